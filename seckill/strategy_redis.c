/*
 * The fast strategy: Redis decides, the database records. One script per
 * order checks the window, the buyer and the stock and appends the order
 * to the voucher's stream, all atomically; the writer thread persists the
 * stream into the database, which re-checks everything (its constraints
 * are the last guard). The HTTP thread never waits for the database on the
 * order path.
 */
#include "strategy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "skutil.h"
#include "writer.h"

#define WARM_CHUNK 500

typedef struct redis_strategy {
    sk_db *db;
    sk_rpool *redis;
    sk_orderids *ids;
    sk_writer *writer;
    int grace_s;                /* see sk_strategy_redis_new */
    pthread_mutex_t warming;    /* one warm-up per process at a time */
} redis_strategy;

static sk_script order_script = {dlock_lua_seckill_order, {0}};
static sk_script warm_script = {dlock_lua_seckill_warm, {0}};

/* A stream entry id "MS-SEQ" as two numbers, for ordering. */
typedef struct xid {
    uint64_t ms, seq;
} xid;

/* Stream ids order by (ms, seq) as numbers, not as strings. */
static int xid_parse(const char *s, xid *out)
{
    char *end;
    out->ms = strtoull(s, &end, 10);
    if (*end != '-') return -1;
    out->seq = strtoull(end + 1, &end, 10);
    return *end ? -1 : 0;
}

/* Which of two entries came first in the stream. */
static int xid_cmp(const xid *a, const xid *b)
{
    if (a->ms != b->ms) return a->ms < b->ms ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* xid_cmp for qsort and bsearch over the pending list. */
static int cmp_xid(const void *a, const void *b)
{
    return xid_cmp(a, b);
}

/* Membership in a sorted buyer list, without a hash set. */
static int has_i64(const int64_t *a, size_t n, int64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] == x) return 1;
        if (a[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

/* A growable array of user ids. */
typedef struct ulist {
    int64_t *a;
    size_t n, cap;
} ulist;

/* Doubling growth: a stream may hold any number of pending orders. */
static int ulist_add(ulist *l, int64_t x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        int64_t *b = realloc(l->a, cap * sizeof *b);
        if (!b) return -1;
        l->a = b;
        l->cap = cap;
    }
    l->a[l->n++] = x;
    return 0;
}

/* What the writers' group has not acknowledged yet: entries after its
 * last-delivered id, and the ids in its pending list (sorted). No group
 * (or no stream) means nothing was ever delivered. */
static sk_result group_state(sk_rpool *redis, const char *stream, xid *last, xid **pel, size_t *npel)
{
    *last = (xid){0, 0};
    *pel = NULL;
    *npel = 0;
    redisReply *r = sk_rpool_cmd(redis, 1, "XINFO GROUPS %s", stream);
    if (!r) return SK_UNAVAILABLE;
    int have_group = 0;
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t g = 0; g < r->elements && !have_group; g++) {
            const redisReply *m = r->element[g];
            const char *name = NULL, *ld = NULL;
            for (size_t i = 0; m->type == REDIS_REPLY_ARRAY && i + 1 < m->elements; i += 2) {
                const redisReply *k = m->element[i], *v = m->element[i + 1];
                if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
                if (!strcmp(k->str, "name")) name = v->str;
                if (!strcmp(k->str, "last-delivered-id")) ld = v->str;
            }
            if (name && ld && !strcmp(name, SK_GROUP) && xid_parse(ld, last) == 0) have_group = 1;
        }
    freeReplyObject(r);
    if (!have_group) return SK_OK;
    r = sk_rpool_cmd(redis, 1, "XPENDING %s %s - + %d", stream, SK_GROUP, 1000000);
    if (!r) return SK_UNAVAILABLE;
    sk_result res = SK_OK;
    if (r->type == REDIS_REPLY_ARRAY && r->elements) {
        *pel = malloc(r->elements * sizeof **pel);
        if (!*pel) res = SK_INTERNAL;
        for (size_t i = 0; *pel && i < r->elements; i++) {
            const redisReply *e = r->element[i];
            if (e->type == REDIS_REPLY_ARRAY && e->elements >= 1 && e->element[0]->type == REDIS_REPLY_STRING &&
                xid_parse(e->element[0]->str, &(*pel)[*npel]) == 0)
                (*npel)++;
        }
        if (*pel) qsort(*pel, *npel, sizeof **pel, cmp_xid);
    }
    freeReplyObject(r);
    return res;
}

/* The buyers of the voucher's orders that are in its stream but not yet
 * acknowledged by a writer: accepted (their buyers were told 201) and
 * possibly not yet in the database. Read in chunks with XRANGE. */
static sk_result unacked_buyers(sk_rpool *redis, const char *stream, ulist *out)
{
    xid last, *pel;
    size_t npel;
    sk_result res = group_state(redis, stream, &last, &pel, &npel);
    if (res != SK_OK) return res;
    /* Everything before the oldest pending entry, and up to the last
     * delivered one when nothing is pending, is acknowledged: skip it. */
    char from[48] = "-";
    if (npel) snprintf(from, sizeof from, "%llu-%llu", (unsigned long long)pel[0].ms, (unsigned long long)pel[0].seq);
    else if (last.ms || last.seq)
        snprintf(from, sizeof from, "(%llu-%llu", (unsigned long long)last.ms, (unsigned long long)last.seq);
    for (int more = 1; more && res == SK_OK;) {
        redisReply *r = sk_rpool_cmd(redis, 1, "XRANGE %s %s + COUNT 1000", stream, from);
        if (!r) {
            res = SK_UNAVAILABLE;
            break;
        }
        more = r->type == REDIS_REPLY_ARRAY && r->elements == 1000;
        for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && res == SK_OK; i++) {
            const redisReply *e = r->element[i];
            xid id;
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[0]->type != REDIS_REPLY_STRING ||
                xid_parse(e->element[0]->str, &id) != 0)
                continue;
            snprintf(from, sizeof from, "(%s", e->element[0]->str);
            int unacked = xid_cmp(&id, &last) > 0 || bsearch(&id, pel, npel, sizeof *pel, cmp_xid);
            const redisReply *f = e->element[1];
            for (size_t j = 0; unacked && f->type == REDIS_REPLY_ARRAY && j + 1 < f->elements; j += 2) {
                int64_t uid;
                if (f->element[j]->type == REDIS_REPLY_STRING && !strcmp(f->element[j]->str, "user") &&
                    f->element[j + 1]->type == REDIS_REPLY_STRING &&
                    sk_parse_i64(f->element[j + 1]->str, f->element[j + 1]->len, INT64_MAX, &uid) == 0 &&
                    ulist_add(out, uid) != 0)
                    res = SK_INTERNAL;
            }
        }
        freeReplyObject(r);
    }
    free(pel);
    return res;
}

/*
 * Why warm from the database, minus what the stream still holds: the
 * database is the truth for persisted orders, and the stream for accepted
 * ones that are not persisted yet. After a Redis restart without
 * persistence (or an evicted stock key) the voucher is rebuilt as
 *   stock  = database stock - buyers of unacknowledged stream orders
 *   buyers = database buyers + those buyers
 * so that a unit accepted but not yet persisted is neither sold again
 * nor lost. The stream is read first and the database second, in one
 * snapshot: an order persisted in between is then seen in the database,
 * and its buyer, already there, is not subtracted twice. Buyers go first
 * in chunks, stock last, so the voucher is "warm" only when complete.
 */
sk_result sk_redis_warm(sk_db *db, sk_rpool *redis, int64_t voucher_id)
{
    char keys[SK_K_COUNT][SK_KEY_MAX];
    sk_voucher_keys(voucher_id, keys);
    ulist pending = {0};
    sk_result r = unacked_buyers(redis, keys[SK_K_ORDERS], &pending);
    sk_voucher_state st;
    int64_t *uids = NULL;
    size_t n = 0;
    if (r == SK_OK) r = db->ops->voucher_state(db, voucher_id, &st, &uids, &n);
    if (r != SK_OK) {
        free(pending.a);
        return r;
    }
    /* Buyers: the database's (sorted), then pending ones it lacks. */
    sk_sort_i64(pending.a, pending.n);
    int64_t stock = st.v.stock;
    for (size_t i = 0; i < pending.n && r == SK_OK; i++) {
        if (i > 0 && pending.a[i] == pending.a[i - 1]) continue;
        if (has_i64(uids, n, pending.a[i])) continue;
        stock--;
        int64_t *b = realloc(uids, (n + 1) * sizeof *b);
        if (!b) r = SK_INTERNAL;
        else (uids = b)[n++] = pending.a[i];
    }
    free(pending.a);
    if (stock < 0) {
        fprintf(stderr, "seckill: voucher %lld: %lld more orders pending than units left\n",
                (long long)voucher_id, (long long)-stock);
        stock = 0;
    }
    char stocks[24], begin[24], end[24];
    snprintf(stocks, sizeof stocks, "%lld", (long long)stock);
    snprintf(begin, sizeof begin, "%lld", (long long)st.v.begin);
    snprintf(end, sizeof end, "%lld", (long long)st.v.end);
    const char *args[3 + 4 + WARM_CHUNK];
    char (*ustr)[24] = malloc((n ? n : 1) * sizeof *ustr);
    if (!ustr) r = SK_INTERNAL;
    for (size_t i = 0; ustr && i < n; i++) snprintf(ustr[i], sizeof ustr[i], "%lld", (long long)uids[i]);
    free(uids);
    size_t done = 0;
    while (r == SK_OK) {
        size_t chunk = n - done > WARM_CHUNK ? WARM_CHUNK : n - done;
        int last = done + chunk == n;
        args[0] = keys[SK_K_STOCK];
        args[1] = keys[SK_K_WINDOW];
        args[2] = keys[SK_K_BUYERS];
        args[3] = stocks;
        args[4] = begin;
        args[5] = end;
        args[6] = last ? "1" : "0";
        for (size_t i = 0; i < chunk; i++) args[7 + i] = ustr[done + i];
        redisReply *rep = sk_rpool_script(redis, &warm_script, 1, 3, 4 + (int)chunk, args);
        if (!rep) r = SK_UNAVAILABLE;
        else if (rep->type != REDIS_REPLY_INTEGER) {
            fprintf(stderr, "seckill: warm voucher %lld: %s\n", (long long)voucher_id,
                    rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
            r = SK_INTERNAL;
        }
        if (rep) freeReplyObject(rep);
        done += chunk;
        if (last) break;
    }
    free(ustr);
    return r;
}

/* Seconds since the Redis server started (INFO server), or -1. */
static long redis_uptime(sk_rpool *redis)
{
    redisReply *r = sk_rpool_cmd(redis, 1, "INFO server");
    long up = r && r->type == REDIS_REPLY_STRING ? sk_info_uptime(r->str) : -1;
    if (r) freeReplyObject(r);
    return up;
}

/*
 * Warm a voucher the order path found cold, or say "busy". Why wait out a
 * grace period after a Redis restart: a writer may hold a batch it read
 * from the lost stream and not yet committed; the stream no longer shows
 * those orders, so warming before they land in the database would offer
 * their units again. Why one warm-up per process: after a restart every
 * HTTP thread finds every voucher cold at once; one rebuilds it while the
 * others answer busy instead of piling the same reads on the database.
 */
static sk_result warm_on_demand(redis_strategy *s, int64_t voucher_id)
{
    /* An unknown voucher is 404 at once, without reading any stream. */
    sk_voucher v;
    sk_result r = s->db->ops->voucher_get(s->db, voucher_id, &v);
    if (r != SK_OK) return r;
    if (s->grace_s > 0) {
        long up = redis_uptime(s->redis);
        if (up < 0) return SK_BUSY;
        if (up < s->grace_s) return SK_BUSY;
    }
    if (pthread_mutex_trylock(&s->warming) != 0) return SK_BUSY;
    r = sk_redis_warm(s->db, s->redis, voucher_id);
    pthread_mutex_unlock(&s->warming);
    if (r == SK_OK && s->writer) sk_writer_notify(s->writer);
    return r;
}

/* The database first, then Redis: a voucher exists once it is committed,
 * and a failed warm-up is repaired by the first order (which warms on a
 * miss), so the admin gets 201 either way. */
static sk_result rs_voucher_create(void *ctx, const sk_voucher *v, int64_t *id)
{
    redis_strategy *s = ctx;
    sk_result r = s->db->ops->voucher_create(s->db, v, sk_unix_now(), id);
    if (r != SK_OK) return r;
    if (sk_redis_warm(s->db, s->redis, *id) != SK_OK)
        fprintf(stderr, "seckill: voucher %lld created but not warmed; the first order will\n",
                (long long)*id);
    if (s->writer) sk_writer_notify(s->writer);
    return SK_OK;
}

/* Remaining stock comes from Redis, where the sale happens; the database
 * lags behind by the orders still in the stream. */
static sk_result rs_voucher_get(void *ctx, int64_t id, sk_voucher *out)
{
    redis_strategy *s = ctx;
    sk_result r = s->db->ops->voucher_get(s->db, id, out);
    if (r != SK_OK) return r;
    char keys[SK_K_COUNT][SK_KEY_MAX];
    sk_voucher_keys(id, keys);
    redisReply *rep = sk_rpool_cmd(s->redis, 1, "GET %s", keys[SK_K_STOCK]);
    if (rep && rep->type == REDIS_REPLY_STRING) {
        int64_t left;
        if (sk_parse_i64(rep->str, rep->len, INT64_MAX, &left) == 0) out->stock = left;
    }
    if (rep) freeReplyObject(rep);
    return SK_OK;
}

/* One script call decides; the codes are the script's (lua/seckill_order.lua). */
static sk_result run_order(redis_strategy *s, int64_t user_id, int64_t voucher_id, int64_t now,
                           uint64_t oid, int *not_warm)
{
    char keys[SK_K_COUNT][SK_KEY_MAX];
    sk_voucher_keys(voucher_id, keys);
    char uid[24], ostr[24], vid[24], nows[24];
    snprintf(uid, sizeof uid, "%lld", (long long)user_id);
    snprintf(ostr, sizeof ostr, "%llu", (unsigned long long)oid);
    snprintf(vid, sizeof vid, "%lld", (long long)voucher_id);
    snprintf(nows, sizeof nows, "%lld", (long long)now);
    const char *args[9] = {keys[SK_K_STOCK], keys[SK_K_WINDOW], keys[SK_K_BUYERS], keys[SK_K_ORDERS],
                           keys[SK_K_PENDING], uid, ostr, vid, nows};
    /* Not resent: if only the reply was lost the order may be in, and a
     * resend would answer already_ordered to the buyer who got it. */
    redisReply *rep = sk_rpool_script(s->redis, &order_script, 0, 5, 4, args);
    *not_warm = 0;
    if (!rep) return SK_UNAVAILABLE;
    sk_result r = SK_INTERNAL;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
        rep->element[0]->type == REDIS_REPLY_INTEGER) {
        switch (rep->element[0]->integer) {
        case 0: r = SK_OK; break;
        case 1: *not_warm = 1; r = SK_NO_VOUCHER; break;
        case 2: r = SK_NOT_STARTED; break;
        case 3: r = SK_ENDED; break;
        case 4: r = SK_ALREADY; break;
        case 5: r = SK_SOLD_OUT; break;
        default: break;
        }
    } else if (rep->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "seckill: order script: %s\n", rep->str);
    }
    freeReplyObject(rep);
    return r;
}

/* Redis out of reach on the order path is "busy, try again" (429), not a
 * server error: the sale resumes by itself once Redis is back and the
 * voucher is warm again, and a client's retry is the right reaction. */
static sk_result busy_if_down(sk_result r)
{
    return r == SK_UNAVAILABLE ? SK_BUSY : r;
}

static sk_result rs_order_create(void *ctx, int64_t user_id, int64_t voucher_id, int64_t now,
                                 uint64_t *order_id)
{
    redis_strategy *s = ctx;
    uint64_t oid;
    sk_result r = sk_orderids_next(s->ids, &oid);
    if (r != SK_OK) return busy_if_down(r);
    int not_warm;
    r = run_order(s, user_id, voucher_id, now, oid, &not_warm);
    if (not_warm) {
        /* A voucher Redis does not know: new, or Redis restarted empty.
         * The database says whether it exists at all. */
        r = warm_on_demand(s, voucher_id);
        if (r != SK_OK) return busy_if_down(r);
        r = run_order(s, user_id, voucher_id, now, oid, &not_warm);
        if (not_warm) return SK_BUSY;
    }
    if (r != SK_OK) return busy_if_down(r);
    *order_id = oid;
    return SK_OK;
}

/* Vouchers whose streams may still hold orders: the writer's horizon. */
#define PENDING_VOUCHERS 256
#define PENDING_HORIZON_S (7 * 86400)

/*
 * Redis first, then the database. An order is in its voucher's pending
 * hash from the moment its buyer got 201 until a writer acknowledges it,
 * which happens only after it is committed (or dead-lettered): so it is
 * found in one place or the other, whichever moment the two reads fall
 * on. The order id alone does not name its voucher, so every voucher the
 * writers follow is asked, in one pipelined round trip.
 */
static sk_result rs_order_get(void *ctx, uint64_t order_id, sk_order *out)
{
    redis_strategy *s = ctx;
    int64_t vids[PENDING_VOUCHERS];
    size_t nv = 0;
    sk_result r = s->db->ops->voucher_ids(s->db, sk_unix_now() - PENDING_HORIZON_S, vids, PENDING_VOUCHERS, &nv);
    if (r != SK_OK) return r;
    char (*keys)[SK_KEY_MAX] = malloc((nv ? nv : 1) * sizeof *keys);
    const char *(*argv)[4] = malloc((nv ? nv : 1) * sizeof *argv);
    const char *const **cmds = malloc((nv ? nv : 1) * sizeof *cmds);
    redisReply **reps = malloc((nv ? nv : 1) * sizeof *reps);
    char oid[24];
    snprintf(oid, sizeof oid, "%llu", (unsigned long long)order_id);
    int pending = 0;
    if (!keys || !argv || !cmds || !reps) {
        r = SK_INTERNAL;
        goto out;
    }
    for (size_t i = 0; i < nv; i++) {
        char all[SK_K_COUNT][SK_KEY_MAX];
        sk_voucher_keys(vids[i], all);
        memcpy(keys[i], all[SK_K_PENDING], SK_KEY_MAX);
        argv[i][0] = "HGET";
        argv[i][1] = keys[i];
        argv[i][2] = oid;
        argv[i][3] = NULL;
        cmds[i] = argv[i];
    }
    if (nv && sk_rpool_pipeline(s->redis, (int)nv, cmds, reps) != 0) {
        r = SK_UNAVAILABLE;
        goto out;
    }
    for (size_t i = 0; i < nv; i++) {
        int64_t uid;
        if (!pending && reps[i]->type == REDIS_REPLY_STRING &&
            sk_parse_i64(reps[i]->str, reps[i]->len, INT64_MAX, &uid) == 0) {
            *out = (sk_order){.id = order_id, .user_id = uid, .voucher_id = vids[i], .status = SK_ORDER_PENDING};
            pending = 1;
        }
        freeReplyObject(reps[i]);
    }
    /* Committed since, or never pending here (persisted long ago): the
     * database has the final word. */
    sk_order o;
    r = s->db->ops->order_get(s->db, order_id, &o);
    if (r == SK_OK) *out = o;
    if (r == SK_NO_ORDER && pending) r = SK_OK;
out:
    free(keys);
    free(argv);
    free(cmds);
    free(reps);
    return r;
}

/* Orders need Redis; the writer and GETs need the database. */
static sk_result rs_health(void *ctx)
{
    redis_strategy *s = ctx;
    redisReply *rep = sk_rpool_cmd(s->redis, 1, "PING");
    int ok = rep && rep->type == REDIS_REPLY_STATUS;
    if (rep) freeReplyObject(rep);
    if (!ok) return SK_UNAVAILABLE;
    return s->db->ops->ping(s->db);
}

/* The pool, ids and writer belong to the caller. */
static void rs_destroy(void *ctx)
{
    redis_strategy *s = ctx;
    pthread_mutex_destroy(&s->warming);
    free(s);
}

static const sk_strategy_ops redis_ops = {
    .name = "redis",
    .voucher_create = rs_voucher_create,
    .voucher_get = rs_voucher_get,
    .order_create = rs_order_create,
    .order_get = rs_order_get,
    .health = rs_health,
    .destroy = rs_destroy,
};

/* No I/O here: `serve` has already connected everything. */
int sk_strategy_redis_new(sk_db *db, sk_rpool *redis, sk_orderids *ids, sk_writer *writer, int grace_s,
                          sk_strategy *out)
{
    redis_strategy *s = calloc(1, sizeof *s);
    if (!s) return -1;
    s->db = db;
    s->redis = redis;
    s->ids = ids;
    s->writer = writer;
    s->grace_s = grace_s;
    pthread_mutex_init(&s->warming, NULL);
    out->ops = &redis_ops;
    out->ctx = s;
    return 0;
}
