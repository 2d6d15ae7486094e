/*
 * db.h -- the database, the service's source of truth and its last guard.
 *
 * The schema makes oversell and duplicates impossible whatever the layers
 * above do: CHECK(stock >= 0) on vouchers, UNIQUE(user_id, voucher_id) and
 * the order id as PRIMARY KEY on orders, and inserts that do nothing on a
 * conflict so a redelivered order is harmless. A backend implements
 * sk_db_ops: store_sqlite.c (one machine, the embedded default) and
 * store_pg.c (PostgreSQL, for several service instances on several
 * machines).
 *
 * All functions are safe to call from many threads at once.
 */
#ifndef SECKILL_DB_H
#define SECKILL_DB_H

#include <stddef.h>
#include <stdint.h>

#include "common/seckill.h"

typedef struct sk_db sk_db;

/* What the writer learned about one order of a batch. */
typedef enum sk_persist_outcome {
    SK_PERSIST_CREATED = 0, /* inserted now, stock taken */
    SK_PERSIST_DUPLICATE,   /* the same order id was already there: a redelivery */
    SK_PERSIST_REJECTED     /* refused (sold out, second order of the user, no voucher);
                                 recorded in rejected_orders */
} sk_persist_outcome;

/* What the database holds for one voucher at one moment. */
typedef struct sk_voucher_state {
    sk_voucher v;
    int64_t orders;   /* rows in orders */
    int64_t users;    /* distinct users among them (the schema makes it == orders) */
    int64_t rejected; /* rows in rejected_orders */
} sk_voucher_state;

typedef struct sk_db_ops {
    void (*close)(sk_db *db);
    sk_result (*voucher_create)(sk_db *db, const sk_voucher *v, int64_t now, int64_t *id);
    sk_result (*voucher_get)(sk_db *db, int64_t id, sk_voucher *out);
    /* Up to `cap` ids of vouchers whose sale ended after `ended_after`, newest first. */
    sk_result (*voucher_ids)(sk_db *db, int64_t ended_after, int64_t *ids, size_t cap, size_t *n);
    /* Up to `cap` vouchers with ids above `after`, ascending: a page of
     * GET /api/vouchers, whose cursor is the last id given. */
    sk_result (*voucher_list)(sk_db *db, int64_t after, sk_voucher *out, size_t cap, size_t *n);
    /* A voucher, its order counts and (when uids is not NULL) the user of
     * every order, all from one snapshot: warming Redis and `seckill
     * verify` compare them with each other. *uids is malloc'ed (caller
     * frees), sorted ascending. */
    sk_result (*voucher_state)(sk_db *db, int64_t voucher_id, sk_voucher_state *out, int64_t **uids, size_t *n);
    /* A persisted or rejected order; SK_NO_ORDER when neither. */
    sk_result (*order_get)(sk_db *db, uint64_t id, sk_order *out);
    /* SK_ALREADY when the user has a persisted order for the voucher
     * (its id in *order_id unless NULL), SK_OK when not: a read outside
     * any transaction, for the lock strategy's early refusals and for a
     * buyer looking up its own order. */
    sk_result (*order_of_user)(sk_db *db, int64_t user_id, int64_t voucher_id, uint64_t *order_id);
    /* The lock strategy's whole decision in one transaction: window, one
     * order per user, stock > 0, insert. Returns the business outcome. */
    sk_result (*order_place)(sk_db *db, const sk_order *o, int64_t now);
    /* The writer's batch, in one transaction; outcomes[i] for orders[i].
     * SK_OK only when committed; on failure nothing of the batch is kept. */
    sk_result (*orders_persist)(sk_db *db, const sk_order *orders, size_t n, int64_t now, sk_persist_outcome *outcomes);
    sk_result (*ping)(sk_db *db);
} sk_db_ops;

struct sk_db {
    const sk_db_ops *ops;
};

/*
 * Open the database named by `url`: "sqlite:///abs/path.db",
 * "sqlite://rel/path.db", a plain file path, or a libpq URI
 * "postgres://..." / "postgresql://...". The schema is created when
 * missing, unless flags has SK_DB_EXISTING: then a SQLite file must exist
 * already and is used as it is (a checker such as `seckill verify` must
 * not turn a mistyped path into a new, empty database that "verifies").
 * `password` (may be NULL) is PostgreSQL's, in place of any in the URL;
 * SQLite has none. Returns 0, or -1 with a message in err[errlen] that
 * shows no password.
 */
#define SK_DB_EXISTING 1
int sk_db_open(const char *url, const char *password, int flags, sk_db **out, char *err, size_t errlen);

/* Backend constructors, chosen by sk_db_open. */
int sk_db_open_sqlite(const char *path, int flags, sk_db **out, char *err, size_t errlen);
int sk_db_open_pg(const char *conninfo, const char *password, sk_db **out, char *err, size_t errlen);

static inline void sk_db_close(sk_db *db)
{
    if (db) db->ops->close(db);
}

#endif
