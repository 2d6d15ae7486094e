/*
 * The SQLite backend of db.h. WAL mode, so readers never wait for the one
 * writer; every write transaction starts with BEGIN IMMEDIATE, so two
 * writers queue on the busy timeout instead of failing to upgrade a read
 * lock halfway through. Connections are pooled: a thread borrows one whole
 * connection (with its prepared statements) for one operation.
 */
#include "db.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "common/log.h"

#define BUSY_TIMEOUT_MS 10000

static const char schema[] = "CREATE TABLE IF NOT EXISTS vouchers ("
                             "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
                             "  title TEXT NOT NULL,"
                             "  stock INTEGER NOT NULL CHECK (stock >= 0),"
                             "  initial_stock INTEGER NOT NULL CHECK (initial_stock >= 0),"
                             "  begin_at INTEGER NOT NULL,"
                             "  end_at INTEGER NOT NULL,"
                             "  created_at INTEGER NOT NULL,"
                             "  CHECK (end_at > begin_at),"
                             "  CHECK (stock <= initial_stock));"
                             "CREATE TABLE IF NOT EXISTS orders ("
                             "  id INTEGER PRIMARY KEY,"
                             "  user_id INTEGER NOT NULL,"
                             "  voucher_id INTEGER NOT NULL REFERENCES vouchers(id),"
                             "  fence INTEGER NOT NULL DEFAULT 0,"
                             "  created_at INTEGER NOT NULL,"
                             "  UNIQUE (user_id, voucher_id));"
                             "CREATE INDEX IF NOT EXISTS orders_by_voucher ON orders(voucher_id);"
                             "CREATE TABLE IF NOT EXISTS rejected_orders ("
                             "  id INTEGER PRIMARY KEY,"
                             "  user_id INTEGER NOT NULL,"
                             "  voucher_id INTEGER NOT NULL,"
                             "  reason TEXT NOT NULL,"
                             "  created_at INTEGER NOT NULL);"
                             "CREATE INDEX IF NOT EXISTS rejected_by_voucher ON rejected_orders(voucher_id);";

enum {
    ST_BEGIN,
    ST_BEGIN_READ,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_V_INSERT,
    ST_V_GET,
    ST_V_IDS,
    ST_V_LIST,
    ST_V_BUYERS,
    ST_V_COUNTS,
    ST_V_TAKE,
    ST_O_GET,
    ST_O_BY_USER,
    ST_O_INSERT,
    ST_O_INSERT_NEW,
    ST_O_DELETE,
    ST_R_GET,
    ST_R_INSERT,
    ST_PING,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_BEGIN_READ] = "BEGIN",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_V_INSERT] = "INSERT INTO vouchers(title, stock, initial_stock, begin_at, end_at, created_at)"
                    " VALUES (?1, ?2, ?2, ?3, ?4, ?5)",
    [ST_V_GET] = "SELECT id, title, stock, initial_stock, begin_at, end_at FROM vouchers WHERE id = ?1",
    [ST_V_IDS] = "SELECT id FROM vouchers WHERE end_at > ?1 ORDER BY id DESC LIMIT ?2",
    [ST_V_LIST] = "SELECT id, title, stock, initial_stock, begin_at, end_at FROM vouchers WHERE id > ?1"
                  " ORDER BY id LIMIT ?2",
    [ST_V_BUYERS] = "SELECT user_id FROM orders WHERE voucher_id = ?1 ORDER BY user_id",
    [ST_V_COUNTS] = "SELECT (SELECT count(*) FROM orders WHERE voucher_id = ?1),"
                    " (SELECT count(DISTINCT user_id) FROM orders WHERE voucher_id = ?1),"
                    " (SELECT count(*) FROM rejected_orders WHERE voucher_id = ?1)",
    [ST_V_TAKE] = "UPDATE vouchers SET stock = stock - 1 WHERE id = ?1 AND stock > 0",
    [ST_O_GET] = "SELECT user_id, voucher_id, fence FROM orders WHERE id = ?1",
    [ST_O_BY_USER] = "SELECT id FROM orders WHERE user_id = ?1 AND voucher_id = ?2",
    [ST_O_INSERT] = "INSERT INTO orders(id, user_id, voucher_id, fence, created_at)"
                    " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
    /* The writer's insert: an order refused before stays refused. */
    [ST_O_INSERT_NEW] = "INSERT INTO orders(id, user_id, voucher_id, fence, created_at)"
                        " SELECT ?1, ?2, ?3, ?4, ?5"
                        " WHERE NOT EXISTS (SELECT 1 FROM rejected_orders WHERE id = ?1)"
                        " ON CONFLICT DO NOTHING",
    [ST_O_DELETE] = "DELETE FROM orders WHERE id = ?1",
    [ST_R_GET] = "SELECT user_id, voucher_id FROM rejected_orders WHERE id = ?1",
    [ST_R_INSERT] = "INSERT INTO rejected_orders(id, user_id, voucher_id, reason, created_at)"
                    " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
    [ST_PING] = "SELECT 1",
};

typedef struct sqconn {
    sqlite3 *h;
    sqlite3_stmt *st[ST_COUNT];
    struct sqconn *next;
} sqconn;

typedef struct sqlite_db {
    sk_db base;
    char *path;
    pthread_mutex_t mu;
    sqconn *idle;
} sqlite_db;

/* Statements first: sqlite3_close refuses a connection with live ones. */
static void conn_free(sqconn *c)
{
    if (!c) return;
    for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(c->st[i]);
    sqlite3_close(c->h);
    free(c);
}

/* Why: SQLite keeps process-wide memory statistics by default, behind one
 * global mutex taken on every allocation of every connection; the writer
 * allocates per row, so that lock was a sixth of its CPU in the open-sale
 * benchmark. Nothing here reads the statistics. sqlite3_config only works
 * before SQLite is initialized; if something else in the process got there
 * first, it refuses and the statistics stay on, which is merely slower. */
static void no_memstatus(void)
{
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

/* Why each connection sets its own pragmas: busy_timeout and foreign_keys
 * are per connection in SQLite, and a connection without them would fail
 * at once under contention or skip the voucher reference check. */
static sqconn *conn_open(const char *path, int create_schema, int create_file, char *err, size_t errlen)
{
    sqconn *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, no_memstatus);
    int rc = sqlite3_open_v2(
        path, &c->h, SQLITE_OPEN_READWRITE | (create_file ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "sqlite open %s: %s", path, c->h ? sqlite3_errmsg(c->h) : sqlite3_errstr(rc));
        conn_free(c);
        return NULL;
    }
    sqlite3_busy_timeout(c->h, BUSY_TIMEOUT_MS);
    char *msg = NULL;
    const char *setup = create_schema ? "PRAGMA journal_mode=WAL; PRAGMA foreign_keys=ON;" : "PRAGMA foreign_keys=ON;";
    if (sqlite3_exec(c->h, setup, NULL, NULL, &msg) != SQLITE_OK ||
        (create_schema && sqlite3_exec(c->h, schema, NULL, NULL, &msg) != SQLITE_OK)) {
        snprintf(err, errlen, "sqlite setup %s: %s", path, msg ? msg : sqlite3_errmsg(c->h));
        sqlite3_free(msg);
        conn_free(c);
        return NULL;
    }
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v3(c->h, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &c->st[i], NULL) != SQLITE_OK) {
            snprintf(err, errlen, "sqlite prepare: %s", sqlite3_errmsg(c->h));
            conn_free(c);
            return NULL;
        }
    }
    return c;
}

/* Borrow a connection: an idle one, or a new one. The pool grows to the
 * number of threads that use it at once and never shrinks; that number is
 * bounded by the HTTP thread pool plus the writer. */
static sqconn *borrow(sqlite_db *d)
{
    pthread_mutex_lock(&d->mu);
    sqconn *c = d->idle;
    if (c) d->idle = c->next;
    pthread_mutex_unlock(&d->mu);
    if (c) return c;
    char err[256];
    c = conn_open(d->path, 0, 0, err, sizeof err); /* the first one made the file */
    if (!c) SK_LOG_REPEATED(SK_LOG_ERROR, "%s", err);
    return c;
}

/* Pooling keeps the prepared statements: preparing is the costly part. */
static void give_back(sqlite_db *d, sqconn *c)
{
    if (!c) return;
    /* A connection must never go back to the pool inside a transaction. */
    if (!sqlite3_get_autocommit(c->h)) sqlite3_exec(c->h, "ROLLBACK", NULL, NULL, NULL);
    pthread_mutex_lock(&d->mu);
    c->next = d->idle;
    d->idle = c;
    pthread_mutex_unlock(&d->mu);
}

/* Map an SQLite failure: a lock we waited for too long is "try later", the
 * rest are faults. Logged, because the client only sees a code. */
static sk_result fail(sqconn *c, int rc, const char *what)
{
    SK_LOG_REPEATED(SK_LOG_ERROR, "sqlite %s: %s", what, sqlite3_errmsg(c->h));
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) return SK_UNAVAILABLE;
    return SK_INTERNAL;
}

/* Run a statement that returns no rows, leaving it reset. */
static int exec_stmt(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* Step a query once: SQLITE_ROW, SQLITE_DONE or an error. The caller reads
 * the row and then calls finish(). */
static void finish(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* Called at shutdown, when no operation is running. */
static void sq_close(sk_db *db)
{
    sqlite_db *d = (sqlite_db *)db;
    while (d->idle) {
        sqconn *c = d->idle;
        d->idle = c->next;
        conn_free(c);
    }
    pthread_mutex_destroy(&d->mu);
    free(d->path);
    free(d);
}

/* One INSERT: initial_stock is set from stock by the statement itself,
 * so the two can never disagree at creation. */
static sk_result sq_voucher_create(sk_db *db, const sk_voucher *v, int64_t now, int64_t *id)
{
    sqlite_db *d = (sqlite_db *)db;
    sqconn *c = borrow(d);
    if (!c) return SK_UNAVAILABLE;
    sqlite3_stmt *st = c->st[ST_V_INSERT];
    sqlite3_bind_text(st, 1, v->title, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, v->stock);
    sqlite3_bind_int64(st, 3, v->begin);
    sqlite3_bind_int64(st, 4, v->end);
    sqlite3_bind_int64(st, 5, now);
    int rc = exec_stmt(st);
    sk_result r = SK_OK;
    if (rc != SQLITE_OK) r = rc == SQLITE_CONSTRAINT ? SK_INVALID : fail(c, rc, "voucher insert");
    else *id = sqlite3_last_insert_rowid(c->h);
    give_back(d, c);
    return r;
}

/* A row of ST_V_GET or ST_V_LIST, whose columns are the same. */
static void voucher_row(sqlite3_stmt *st, sk_voucher *out)
{
    memset(out, 0, sizeof *out);
    out->id = sqlite3_column_int64(st, 0);
    const unsigned char *t = sqlite3_column_text(st, 1);
    snprintf(out->title, sizeof out->title, "%s", t ? (const char *)t : "");
    out->stock = sqlite3_column_int64(st, 2);
    out->initial_stock = sqlite3_column_int64(st, 3);
    out->begin = sqlite3_column_int64(st, 4);
    out->end = sqlite3_column_int64(st, 5);
}

/* Read one voucher with a borrowed connection (shared by get and place). */
static sk_result read_voucher(sqconn *c, int64_t id, sk_voucher *out)
{
    sqlite3_stmt *st = c->st[ST_V_GET];
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    sk_result r = SK_OK;
    if (rc == SQLITE_ROW) {
        voucher_row(st, out);
    } else if (rc == SQLITE_DONE) {
        r = SK_NO_VOUCHER;
    } else {
        r = fail(c, rc, "voucher get");
    }
    finish(st);
    return r;
}

/* Read-only, like sq_voucher_get. */
static sk_result sq_voucher_list(sk_db *db, int64_t after, sk_voucher *out, size_t cap, size_t *n)
{
    sqlite_db *d = (sqlite_db *)db;
    sqconn *c = borrow(d);
    if (!c) return SK_UNAVAILABLE;
    sqlite3_stmt *st = c->st[ST_V_LIST];
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)cap);
    int rc;
    *n = 0;
    while (*n < cap && (rc = sqlite3_step(st)) == SQLITE_ROW) voucher_row(st, &out[(*n)++]);
    if (*n == cap) rc = SQLITE_DONE;
    sk_result r = rc == SQLITE_DONE ? SK_OK : fail(c, rc, "voucher list");
    finish(st);
    give_back(d, c);
    return r;
}

/* Read-only: in WAL mode it never waits for the writer. */
static sk_result sq_voucher_get(sk_db *db, int64_t id, sk_voucher *out)
{
    sqlite_db *d = (sqlite_db *)db;
    sqconn *c = borrow(d);
    if (!c) return SK_UNAVAILABLE;
    sk_result r = read_voucher(c, id, out);
    give_back(d, c);
    return r;
}

/* The writer follows these vouchers' streams. */
static sk_result sq_voucher_ids(sk_db *db, int64_t ended_after, int64_t *ids, size_t cap, size_t *n)
{
    sqlite_db *d = (sqlite_db *)db;
    sqconn *c = borrow(d);
    if (!c) return SK_UNAVAILABLE;
    sqlite3_stmt *st = c->st[ST_V_IDS];
    sqlite3_bind_int64(st, 1, ended_after);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)cap);
    int rc;
    *n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && *n < cap) ids[(*n)++] = sqlite3_column_int64(st, 0);
    sk_result r = rc == SQLITE_DONE || rc == SQLITE_ROW ? SK_OK : fail(c, rc, "voucher ids");
    finish(st);
    give_back(d, c);
    return r;
}

/* The users of a voucher's orders, ascending, with a borrowed connection. */
static int read_buyers(sqconn *c, int64_t voucher_id, int64_t **uids, size_t *n)
{
    sqlite3_stmt *st = c->st[ST_V_BUYERS];
    sqlite3_bind_int64(st, 1, voucher_id);
    size_t cap = 64, len = 0;
    int64_t *a = malloc(cap * sizeof *a);
    int rc = SQLITE_NOMEM;
    while (a && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (len == cap) {
            int64_t *b = realloc(a, 2 * cap * sizeof *a);
            if (!b) {
                rc = SQLITE_NOMEM;
                break;
            }
            a = b;
            cap *= 2;
        }
        a[len++] = sqlite3_column_int64(st, 0);
    }
    finish(st);
    if (rc != SQLITE_DONE) {
        free(a);
        return rc;
    }
    *uids = a;
    *n = len;
    return SQLITE_OK;
}

/* Why one read transaction: in WAL mode it pins one snapshot, so the
 * stock, the counts and the buyers agree even while the writer commits.
 * Warming Redis from a stock that already counts an order whose buyer is
 * missing (or the reverse) would sell a unit twice or lose one. */
static sk_result sq_voucher_state(sk_db *db, int64_t voucher_id, sk_voucher_state *out, int64_t **uids, size_t *n)
{
    sqlite_db *d = (sqlite_db *)db;
    sqconn *c = borrow(d);
    if (!c) return SK_UNAVAILABLE;
    if (uids) {
        *uids = NULL;
        *n = 0;
    }
    int rc = exec_stmt(c->st[ST_BEGIN_READ]);
    if (rc != SQLITE_OK) {
        sk_result r = fail(c, rc, "begin");
        give_back(d, c);
        return r;
    }
    memset(out, 0, sizeof *out);
    sk_result r = read_voucher(c, voucher_id, &out->v);
    if (r == SK_OK) {
        sqlite3_stmt *st = c->st[ST_V_COUNTS];
        sqlite3_bind_int64(st, 1, voucher_id);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            out->orders = sqlite3_column_int64(st, 0);
            out->users = sqlite3_column_int64(st, 1);
            out->rejected = sqlite3_column_int64(st, 2);
        } else {
            r = fail(c, rc, "voucher counts");
        }
        finish(st);
    }
    if (r == SK_OK && uids) {
        rc = read_buyers(c, voucher_id, uids, n);
        if (rc != SQLITE_OK) r = rc == SQLITE_NOMEM ? SK_INTERNAL : fail(c, rc, "voucher buyers");
    }
    exec_stmt(c->st[ST_COMMIT]);
    give_back(d, c);
    return r;
}

/* An order the writer refused is reported as rejected, so its buyer is
 * told instead of seeing "pending" forever. */
static sk_result sq_order_get(sk_db *db, uint64_t id, sk_order *out)
{
    sqlite_db *d = (sqlite_db *)db;
    sqconn *c = borrow(d);
    if (!c) return SK_UNAVAILABLE;
    sk_result r = SK_NO_ORDER;
    sqlite3_stmt *st = c->st[ST_O_GET];
    sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        out->id = id;
        out->user_id = sqlite3_column_int64(st, 0);
        out->voucher_id = sqlite3_column_int64(st, 1);
        out->fence = (uint64_t)sqlite3_column_int64(st, 2);
        out->status = SK_ORDER_CREATED;
        r = SK_OK;
    } else if (rc != SQLITE_DONE) {
        r = fail(c, rc, "order get");
    }
    finish(st);
    if (r == SK_NO_ORDER) {
        st = c->st[ST_R_GET];
        sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            out->id = id;
            out->user_id = sqlite3_column_int64(st, 0);
            out->voucher_id = sqlite3_column_int64(st, 1);
            out->fence = 0;
            out->status = SK_ORDER_REJECTED;
            r = SK_OK;
        } else if (rc != SQLITE_DONE) {
            r = fail(c, rc, "rejected order get");
        }
        finish(st);
    }
    give_back(d, c);
    return r;
}

/* 1 when (user, voucher) already has an order, 0 when not, -rc on error. */
static int has_order(sqconn *c, int64_t user_id, int64_t voucher_id, uint64_t *order_id)
{
    sqlite3_stmt *st = c->st[ST_O_BY_USER];
    sqlite3_bind_int64(st, 1, user_id);
    sqlite3_bind_int64(st, 2, voucher_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && order_id) *order_id = (uint64_t)sqlite3_column_int64(st, 0);
    finish(st);
    if (rc == SQLITE_ROW) return 1;
    if (rc == SQLITE_DONE) return 0;
    return -rc;
}

/* Outside a transaction: the lock strategy asks it before taking the
 * user's lock, where a plain read of the last commit is what it needs. */
static sk_result sq_order_of_user(sk_db *db, int64_t user_id, int64_t voucher_id, uint64_t *order_id)
{
    sqlite_db *d = (sqlite_db *)db;
    sqconn *c = borrow(d);
    if (!c) return SK_UNAVAILABLE;
    int k = has_order(c, user_id, voucher_id, order_id);
    sk_result r = k < 0 ? fail(c, -k, "order lookup") : k == 1 ? SK_ALREADY : SK_OK;
    give_back(d, c);
    return r;
}

/* Take one unit: 1 taken, 0 none left (or no such voucher), -rc on error.
 * The WHERE stock > 0 is the seeds' optimistic update; CHECK(stock >= 0)
 * backs it. */
static int take_stock(sqconn *c, int64_t voucher_id)
{
    sqlite3_stmt *st = c->st[ST_V_TAKE];
    sqlite3_bind_int64(st, 1, voucher_id);
    int rc = exec_stmt(st);
    if (rc != SQLITE_OK) return -rc;
    return sqlite3_changes(c->h) == 1;
}

/* Insert an order with statement `which` (ST_O_INSERT or ST_O_INSERT_NEW):
 * 1 inserted, 0 nothing (a conflict, or refused before), -rc on error. */
static int insert_order(sqconn *c, int which, const sk_order *o, int64_t now)
{
    sqlite3_stmt *st = c->st[which];
    sqlite3_bind_int64(st, 1, (sqlite3_int64)o->id);
    sqlite3_bind_int64(st, 2, o->user_id);
    sqlite3_bind_int64(st, 3, o->voucher_id);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)o->fence);
    sqlite3_bind_int64(st, 5, now);
    int rc = exec_stmt(st);
    if (rc != SQLITE_OK) return -rc;
    return sqlite3_changes(c->h) == 1;
}

/* A write transaction on a pooled connection, for the order paths:
 * BEGIN IMMEDIATE takes the write lock first, so checks and writes see the
 * same state. tx_end commits when `r` is SK_OK (its failure becomes the
 * result), else rolls back, and gives the connection back. */
static sk_result tx_begin(sqlite_db *d, sqconn **out)
{
    sqconn *c = borrow(d);
    if (!c) return SK_UNAVAILABLE;
    int rc = exec_stmt(c->st[ST_BEGIN]);
    if (rc != SQLITE_OK) {
        sk_result r = fail(c, rc, "begin");
        give_back(d, c);
        return r;
    }
    *out = c;
    return SK_OK;
}

static sk_result tx_end(sqlite_db *d, sqconn *c, sk_result r)
{
    if (r == SK_OK) {
        int rc = exec_stmt(c->st[ST_COMMIT]);
        if (rc != SQLITE_OK) r = fail(c, rc, "commit");
    }
    if (r != SK_OK) exec_stmt(c->st[ST_ROLLBACK]);
    give_back(d, c);
    return r;
}

/* The lock strategy's transaction: BEGIN IMMEDIATE takes the write lock
 * first, so the checks and the writes see the same state. */
static sk_result sq_order_place(sk_db *db, const sk_order *o, int64_t now)
{
    sqlite_db *d = (sqlite_db *)db;
    sqconn *c;
    sk_result r = tx_begin(d, &c);
    if (r != SK_OK) return r;
    sk_voucher v;
    r = read_voucher(c, o->voucher_id, &v);
    int k = 0;
    if (r == SK_OK) {
        if (now < v.begin) r = SK_NOT_STARTED;
        else if (now >= v.end) r = SK_ENDED;
    }
    if (r == SK_OK) {
        k = has_order(c, o->user_id, o->voucher_id, NULL);
        if (k < 0) r = fail(c, -k, "order lookup");
        else if (k == 1) r = SK_ALREADY;
    }
    if (r == SK_OK) {
        k = take_stock(c, o->voucher_id);
        if (k < 0) r = fail(c, -k, "stock update");
        else if (k == 0) r = SK_SOLD_OUT;
    }
    if (r == SK_OK) {
        k = insert_order(c, ST_O_INSERT, o, now);
        if (k < 0) r = fail(c, -k, "order insert");
        else if (k == 0) r = SK_ALREADY;
    }
    return tx_end(d, c, r);
}

/* Refusals are kept, with their reason: a buyer was told 201 for them. */
static int reject_order(sqconn *c, const sk_order *o, const char *reason, int64_t now)
{
    sqlite3_stmt *st = c->st[ST_R_INSERT];
    sqlite3_bind_int64(st, 1, (sqlite3_int64)o->id);
    sqlite3_bind_int64(st, 2, o->user_id);
    sqlite3_bind_int64(st, 3, o->voucher_id);
    sqlite3_bind_text(st, 4, reason, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, now);
    int rc = exec_stmt(st);
    return rc == SQLITE_OK ? 0 : -rc;
}

/* 1 when this order was decided before (created or rejected), 0 when
 * new, 2 when its id is taken by a different order, -rc on error. This is
 * what makes a redelivery a no-op: an order committed just before a crash
 * that came before XACK is found here. Comparing user and voucher keeps an
 * id collision (possible when Redis lost its ID counters) from being
 * mistaken for a redelivery and silently dropped. */
static int seen_order(sqconn *c, const sk_order *o)
{
    int which[2] = {ST_O_GET, ST_R_GET};
    for (int i = 0; i < 2; i++) {
        sqlite3_stmt *st = c->st[which[i]];
        sqlite3_bind_int64(st, 1, (sqlite3_int64)o->id);
        int rc = sqlite3_step(st);
        int same = rc == SQLITE_ROW && sqlite3_column_int64(st, 0) == o->user_id &&
                   sqlite3_column_int64(st, 1) == o->voucher_id;
        finish(st);
        if (rc == SQLITE_ROW) return same ? 1 : 2;
        if (rc != SQLITE_DONE) return -rc;
    }
    return 0;
}

/* The outcome of one order inside the writer's transaction, or -rc.
 * Insert first (nothing happens on a conflict), then take a unit; on the
 * common path that is two statements. A conflict is told apart afterwards:
 * the same order again (a redelivery) or another order of this user. */
static int persist_one(sqconn *c, const sk_order *o, int64_t now)
{
    int k = insert_order(c, ST_O_INSERT_NEW, o, now);
    if (k == -SQLITE_CONSTRAINT) /* no such voucher (foreign key): it can never be persisted */
        return (k = reject_order(c, o, "no_voucher", now)) < 0 ? k : SK_PERSIST_REJECTED;
    if (k < 0) return k;
    if (k == 1) {
        k = take_stock(c, o->voucher_id);
        if (k != 0) return k < 0 ? k : SK_PERSIST_CREATED;
        sqlite3_stmt *st = c->st[ST_O_DELETE];
        sqlite3_bind_int64(st, 1, (sqlite3_int64)o->id);
        if ((k = exec_stmt(st)) != SQLITE_OK) return -k;
        return (k = reject_order(c, o, "sold_out", now)) < 0 ? k : SK_PERSIST_REJECTED;
    }
    k = seen_order(c, o);
    if (k < 0) return k;
    if (k == 1) return SK_PERSIST_DUPLICATE;
    if (k == 2) {
        sk_log(SK_LOG_ERROR, "order id %llu of user %lld already belongs to another order", (unsigned long long)o->id,
               (long long)o->user_id);
        return SK_PERSIST_REJECTED;
    }
    return (k = reject_order(c, o, "already_ordered", now)) < 0 ? k : SK_PERSIST_REJECTED;
}

/* One transaction per batch: a commit (and its fsync) is the expensive
 * part, and the writer acknowledges the batch only after it. Refusals are
 * recorded, not rolled back. */
static sk_result sq_orders_persist(sk_db *db, const sk_order *orders, size_t n, int64_t now,
                                   sk_persist_outcome *outcomes)
{
    sqlite_db *d = (sqlite_db *)db;
    sqconn *c;
    sk_result r = tx_begin(d, &c);
    if (r != SK_OK) return r;
    for (size_t i = 0; i < n && r == SK_OK; i++) {
        int k = persist_one(c, &orders[i], now);
        if (k < 0) r = fail(c, -k, "persist order");
        else outcomes[i] = (sk_persist_outcome)k;
    }
    return tx_end(d, c, r);
}

/* /healthz: proves a connection can be had and used. */
static sk_result sq_ping(sk_db *db)
{
    sqlite_db *d = (sqlite_db *)db;
    sqconn *c = borrow(d);
    if (!c) return SK_UNAVAILABLE;
    int rc = exec_stmt(c->st[ST_PING]);
    sk_result r = rc == SQLITE_OK ? SK_OK : fail(c, rc, "ping");
    give_back(d, c);
    return r;
}

static const sk_db_ops sqlite_ops = {
    .close = sq_close,
    .voucher_create = sq_voucher_create,
    .voucher_get = sq_voucher_get,
    .voucher_ids = sq_voucher_ids,
    .voucher_list = sq_voucher_list,
    .voucher_state = sq_voucher_state,
    .order_get = sq_order_get,
    .order_of_user = sq_order_of_user,
    .order_place = sq_order_place,
    .orders_persist = sq_orders_persist,
    .ping = sq_ping,
};

/* The first connection creates the schema and switches the file to WAL
 * (a property of the file, kept across opens); it then stays in the pool. */
int sk_db_open_sqlite(const char *path, int flags, sk_db **out, char *err, size_t errlen)
{
    sqlite_db *d = calloc(1, sizeof *d);
    if (!d || !(d->path = strdup(path))) {
        free(d);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    d->base.ops = &sqlite_ops;
    pthread_mutex_init(&d->mu, NULL);
    int existing = (flags & SK_DB_EXISTING) != 0;
    sqconn *c = conn_open(path, !existing, !existing, err, errlen);
    if (!c) {
        pthread_mutex_destroy(&d->mu);
        free(d->path);
        free(d);
        return -1;
    }
    d->idle = c;
    *out = &d->base;
    return 0;
}
