/*
 * The fast strategy: Redis decides, the database records. One script per
 * order checks the window, the buyer and the stock and appends the order
 * to the voucher's stream, all atomically; the writer thread persists the
 * stream into the database, which re-checks everything (its constraints
 * are the last guard). The HTTP thread never waits for the database on the
 * order path.
 *
 * Every command names one voucher's keys (hash tag {v:ID}), so it reaches
 * the server holding that voucher on one server, under Sentinel and on
 * Redis Cluster alike; the one lookup that spans vouchers (GET
 * /api/orders) is split per voucher on a cluster.
 */
#include "strategy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acked.h"
#include "keys.h"
#include "scripts.h"
#include "skutil.h"
#include "warm.h"
#include "writer.h"

typedef struct redis_strategy {
    sk_db *db;
    const sk_redis *redis;
    sk_orderids *ids;
    sk_writer *writer;
    int grace_s;                /* see sk_strategy_redis_new */
    pthread_mutex_t warming;    /* one warm-up per process at a time */
    dlock_script *order, *warm, *pending;
    sk_lua order_acked;         /* the order script again, for --replica-acks (acked.h) */
} redis_strategy;

/* Seconds since the server holding the voucher started (INFO server), or -1. */
static long redis_uptime(const sk_redis *redis, const char *key)
{
    redisReply *r;
    sk_redis_cmd(redis, key, 0, &r, "INFO", "server", NULL);
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
        char keys[SK_K_COUNT][SK_KEY_MAX];
        sk_voucher_keys(voucher_id, keys);
        long up = redis_uptime(s->redis, keys[SK_K_STOCK]);
        if (up < 0) return SK_BUSY;
        if (up < s->grace_s) return SK_BUSY;
    }
    if (pthread_mutex_trylock(&s->warming) != 0) return SK_BUSY;
    r = sk_redis_warm(s->db, s->redis, s->warm, voucher_id);
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
    if (sk_redis_warm(s->db, s->redis, s->warm, *id) != SK_OK)
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
    redisReply *rep;
    sk_redis_cmd(s->redis, keys[SK_K_STOCK], 0, &rep, "GET", keys[SK_K_STOCK], NULL);
    if (rep && rep->type == REDIS_REPLY_STRING) {
        int64_t left;
        if (sk_parse_i64(rep->str, rep->len, INT64_MAX, &left) == 0) out->stock = left;
    }
    if (rep) freeReplyObject(rep);
    return SK_OK;
}

/*
 * One script call decides; the codes are the script's
 * (lua/seckill_order.lua). It is never sent twice (DLOCK_REDIS_ONCE): if
 * only its reply was lost (a connection broken by a failover, say), the
 * order may be in, and a resend would answer already_ordered to the buyer
 * who got it. Such a request is answered 429 busy instead, and retrying
 * is safe: the script refuses a second order of the same user (409 tells
 * the buyer the first one stood), and one that never ran is simply taken
 * now. With --replica-acks the script first refuses (429, nothing
 * written) while fewer replicas are online, and is followed by WAIT on the
 * same connection; an order fewer replicas acknowledged is answered 429
 * too: it stands if its master survives (a retry then says 409) and
 * vanishes with it otherwise (a retry then takes a fresh one).
 */
static sk_result run_order(redis_strategy *s, int64_t user_id, int64_t voucher_id, int64_t now, uint64_t oid,
                           int *not_warm)
{
    char keys[SK_K_COUNT][SK_KEY_MAX];
    sk_voucher_keys(voucher_id, keys);
    char uid[24], ostr[24], vid[24], nows[24], want[16];
    snprintf(uid, sizeof uid, "%lld", (long long)user_id);
    snprintf(ostr, sizeof ostr, "%llu", (unsigned long long)oid);
    snprintf(vid, sizeof vid, "%lld", (long long)voucher_id);
    snprintf(nows, sizeof nows, "%lld", (long long)now);
    snprintf(want, sizeof want, "%d", s->redis->replicas);
    const char *keyv[5] = {keys[SK_K_STOCK], keys[SK_K_WINDOW], keys[SK_K_BUYERS], keys[SK_K_ORDERS],
                           keys[SK_K_PENDING]};
    const char *args[5] = {uid, ostr, vid, nows, want};
    redisReply *rep = NULL;
    long long acks = -1;
    if (s->redis->replicas > 0) sk_acked_eval(s->redis, &s->order_acked, 5, keyv, 5, args, &rep, &acks);
    else dlock_script_eval(s->order, DLOCK_REDIS_ONCE, 5, keyv, 4, args, &rep);
    *not_warm = 0;
    if (!rep) return SK_UNAVAILABLE;
    sk_result r = SK_INTERNAL;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 && rep->element[0]->type == REDIS_REPLY_INTEGER) {
        switch (rep->element[0]->integer) {
        case 0: r = s->redis->replicas > 0 && acks < s->redis->replicas ? SK_BUSY : SK_OK; break;
        case 1: *not_warm = 1; r = SK_NO_VOUCHER; break;
        case 2: r = SK_NOT_STARTED; break;
        case 3: r = SK_ENDED; break;
        case 4: r = SK_ALREADY; break;
        case 5: r = SK_SOLD_OUT; break;
        case 6: /* too few replicas online: nothing taken */
            r = SK_BUSY;
            sk_acked_forget(s->redis, keys[SK_K_STOCK]);
            break;
        default: break;
        }
    } else if (rep->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "seckill: order script: %s\n", rep->str);
    }
    freeReplyObject(rep);
    return r;
}

/* Redis out of reach on the order path is "busy, try again" (429), not a
 * server error: the sale resumes by itself once Redis is back (or its
 * successor took over) and the voucher is warm again, and a client's
 * retry is the right reaction. */
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
    if (s->writer) sk_writer_order(s->writer, voucher_id);
    *order_id = oid;
    return SK_OK;
}

/* Vouchers whose streams may still hold orders: the writer's horizon. */
#define PENDING_VOUCHERS 256
#define PENDING_HORIZON_S (7 * 86400)

/* The voucher (index into vids) whose pending hash holds the order, and
 * its user; -1 when none does, -2 when Redis did not answer. One script
 * call asks every voucher at once on one server or under Sentinel; on a
 * cluster each voucher is in its own slot, so one call per voucher. */
static int find_pending(redis_strategy *s, const int64_t *vids, size_t nv, const char *oid, int64_t *uid)
{
    char (*keys)[SK_KEY_MAX] = malloc((nv ? nv : 1) * sizeof *keys);
    const char **keyv = malloc((nv ? nv : 1) * sizeof *keyv);
    int found = keys && keyv ? -1 : -2;
    for (size_t i = 0; found == -1 && i < nv; i++) {
        char all[SK_K_COUNT][SK_KEY_MAX];
        sk_voucher_keys(vids[i], all);
        memcpy(keys[i], all[SK_K_PENDING], SK_KEY_MAX);
        keyv[i] = keys[i];
    }
    size_t per_call = s->redis->cluster ? 1 : nv;
    for (size_t i = 0; found == -1 && i < nv; i += per_call) {
        size_t n = nv - i < per_call ? nv - i : per_call;
        redisReply *rep;
        if (dlock_script_eval(s->pending, 0, (int)n, keyv + i, 1, &oid, &rep) != DLOCK_OK) {
            found = -2;
        } else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
                   rep->element[0]->type == REDIS_REPLY_INTEGER && rep->element[1]->type == REDIS_REPLY_STRING &&
                   rep->element[0]->integer >= 1 && (size_t)rep->element[0]->integer <= n &&
                   sk_parse_i64(rep->element[1]->str, rep->element[1]->len, INT64_MAX, uid) == 0) {
            found = (int)(i + (size_t)rep->element[0]->integer - 1);
        }
        if (rep) freeReplyObject(rep);
    }
    free(keys);
    free(keyv);
    return found;
}

/*
 * Database, Redis, database. An order is in its voucher's pending hash
 * from the moment its buyer got 201 until a writer acknowledges it, which
 * happens only after it is committed (or dead-lettered). So an order the
 * first database read misses is either still pending when Redis is read,
 * or committed by then and found by the second database read. Persisted
 * orders, the common case, cost one database read and no Redis at all.
 * The order id alone does not name its voucher, so every voucher the
 * writers follow is asked.
 */
static sk_result rs_order_get(void *ctx, uint64_t order_id, sk_order *out)
{
    redis_strategy *s = ctx;
    sk_result r = s->db->ops->order_get(s->db, order_id, out);
    if (r != SK_NO_ORDER) return r;
    int64_t vids[PENDING_VOUCHERS];
    size_t nv = 0;
    r = s->db->ops->voucher_ids(s->db, sk_unix_now() - PENDING_HORIZON_S, vids, PENDING_VOUCHERS, &nv);
    if (r != SK_OK) return r;
    char oid[24];
    snprintf(oid, sizeof oid, "%llu", (unsigned long long)order_id);
    int64_t uid;
    int at = find_pending(s, vids, nv, oid, &uid);
    if (at == -2) return SK_UNAVAILABLE;
    if (at >= 0) {
        *out = (sk_order){.id = order_id, .user_id = uid, .voucher_id = vids[at], .status = SK_ORDER_PENDING};
        return SK_OK;
    }
    return s->db->ops->order_get(s->db, order_id, out);
}

/* Orders need Redis; the writer and GETs need the database. */
static sk_result rs_health(void *ctx)
{
    redis_strategy *s = ctx;
    redisReply *rep;
    sk_redis_cmd(s->redis, NULL, 0, &rep, "PING", NULL);
    int ok = rep && rep->type == REDIS_REPLY_STATUS;
    if (rep) freeReplyObject(rep);
    if (!ok) return SK_UNAVAILABLE;
    return s->db->ops->ping(s->db);
}

/* The client, ids and writer belong to the caller. */
static void rs_destroy(void *ctx)
{
    redis_strategy *s = ctx;
    pthread_mutex_destroy(&s->warming);
    dlock_script_free(s->order);
    dlock_script_free(s->warm);
    dlock_script_free(s->pending);
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

/* The scripts are loaded here (one SCRIPT LOAD each), so a server that
 * refuses them fails `serve` at start rather than every order later. */
int sk_strategy_redis_new(sk_db *db, const sk_redis *redis, sk_orderids *ids, sk_writer *writer, int grace_s,
                          sk_strategy *out, char *err, size_t errlen)
{
    redis_strategy *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->db = db;
    s->redis = redis;
    s->ids = ids;
    s->writer = writer;
    s->grace_s = grace_s;
    pthread_mutex_init(&s->warming, NULL);
    sk_lua_init(&s->order_acked, dlock_lua_seckill_order);
    if (dlock_script_new(redis->client, dlock_lua_seckill_order, &s->order) != DLOCK_OK ||
        dlock_script_new(redis->client, dlock_lua_seckill_warm, &s->warm) != DLOCK_OK ||
        dlock_script_new(redis->client, dlock_lua_seckill_pending, &s->pending) != DLOCK_OK) {
        snprintf(err, errlen, "loading the order scripts: %s", dlock_last_error());
        rs_destroy(s);
        return -1;
    }
    out->ops = &redis_ops;
    out->ctx = s;
    return 0;
}
