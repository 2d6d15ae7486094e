/*
 * The fast strategy: Redis decides, the database records. One script per
 * order checks the window, the buyer and the stock and appends the order
 * to the voucher's stream, all atomically; the writer thread persists the
 * stream into the database, which re-checks everything (its constraints
 * are the last guard). The HTTP thread never waits for the database on the
 * order path.
 */
#include "strategy.h"

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
} redis_strategy;

static sk_script order_script = {dlock_lua_seckill_order, {0}};
static sk_script warm_script = {dlock_lua_seckill_warm, {0}};

/* Why warm from the database: it is the truth. After a Redis restart
 * without persistence the keys are gone; reloading the remaining stock and
 * the buyers of persisted orders makes Redis refuse second orders and
 * oversell again. Orders that were in the lost stream are lost with it
 * (their buyers were told 201): the price of this strategy without Redis
 * persistence, which docs must state. Buyers go first in chunks, stock
 * last, so the voucher is "warm" only when complete. */
sk_result sk_redis_warm(sk_db *db, sk_rpool *redis, int64_t voucher_id)
{
    sk_voucher v;
    sk_result r = db->ops->voucher_get(db, voucher_id, &v);
    if (r != SK_OK) return r;
    int64_t *uids = NULL;
    size_t n = 0;
    r = db->ops->voucher_buyers(db, voucher_id, &uids, &n);
    if (r != SK_OK) return r;
    char keys[SK_K_COUNT][SK_KEY_MAX];
    sk_voucher_keys(voucher_id, keys);
    char stock[24], begin[24], end[24];
    snprintf(stock, sizeof stock, "%lld", (long long)v.stock);
    snprintf(begin, sizeof begin, "%lld", (long long)v.begin);
    snprintf(end, sizeof end, "%lld", (long long)v.end);
    const char *args[3 + 4 + WARM_CHUNK];
    char (*ustr)[24] = malloc((n ? n : 1) * sizeof *ustr);
    if (!ustr) {
        free(uids);
        return SK_INTERNAL;
    }
    for (size_t i = 0; i < n; i++) snprintf(ustr[i], sizeof ustr[i], "%lld", (long long)uids[i]);
    free(uids);
    r = SK_OK;
    size_t done = 0;
    do {
        size_t chunk = n - done > WARM_CHUNK ? WARM_CHUNK : n - done;
        int last = done + chunk == n;
        args[0] = keys[SK_K_STOCK];
        args[1] = keys[SK_K_WINDOW];
        args[2] = keys[SK_K_BUYERS];
        args[3] = stock;
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
    } while (r == SK_OK && done < n);
    free(ustr);
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
    const char *args[8] = {keys[SK_K_STOCK], keys[SK_K_WINDOW], keys[SK_K_BUYERS], keys[SK_K_ORDERS],
                           uid, ostr, vid, nows};
    /* Not resent: if only the reply was lost the order may be in, and a
     * resend would answer already_ordered to the buyer who got it. */
    redisReply *rep = sk_rpool_script(s->redis, &order_script, 0, 4, 4, args);
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

static sk_result rs_order_create(void *ctx, int64_t user_id, int64_t voucher_id, int64_t now,
                                 uint64_t *order_id)
{
    redis_strategy *s = ctx;
    uint64_t oid;
    sk_result r = sk_orderids_next(s->ids, &oid);
    if (r != SK_OK) return r;
    int not_warm;
    r = run_order(s, user_id, voucher_id, now, oid, &not_warm);
    if (not_warm) {
        /* A voucher Redis does not know: new, or Redis restarted empty.
         * The database says whether it exists at all. */
        r = sk_redis_warm(s->db, s->redis, voucher_id);
        if (r != SK_OK) return r;
        if (s->writer) sk_writer_notify(s->writer);
        r = run_order(s, user_id, voucher_id, now, oid, &not_warm);
        if (not_warm) return SK_UNAVAILABLE;
    }
    if (r != SK_OK) return r;
    /* Only accepted orders (at most the stock) pay for this second round
     * trip. If it is lost the order is still persisted; it is merely not
     * visible as "pending" before the writer commits it. */
    char key[SK_KEY_MAX], val[48];
    sk_order_index_key(oid, key);
    snprintf(val, sizeof val, "%lld:%lld", (long long)user_id, (long long)voucher_id);
    redisReply *rep = sk_rpool_cmd(s->redis, 1, "SET %s %s EX 86400", key, val);
    if (rep) freeReplyObject(rep);
    *order_id = oid;
    return SK_OK;
}

/* The database first (created or rejected is final), then the pending
 * index the order path wrote after its 201. */
static sk_result rs_order_get(void *ctx, uint64_t order_id, sk_order *out)
{
    redis_strategy *s = ctx;
    sk_result r = s->db->ops->order_get(s->db, order_id, out);
    if (r != SK_NO_ORDER) return r;
    char key[SK_KEY_MAX];
    sk_order_index_key(order_id, key);
    redisReply *rep = sk_rpool_cmd(s->redis, 1, "GET %s", key);
    if (!rep) return SK_UNAVAILABLE;
    r = SK_NO_ORDER;
    if (rep->type == REDIS_REPLY_STRING) {
        const char *colon = memchr(rep->str, ':', rep->len);
        int64_t uid, vid;
        if (colon && sk_parse_i64(rep->str, (size_t)(colon - rep->str), INT64_MAX, &uid) == 0 &&
            sk_parse_i64(colon + 1, rep->len - (size_t)(colon + 1 - rep->str), INT64_MAX, &vid) == 0) {
            out->id = order_id;
            out->user_id = uid;
            out->voucher_id = vid;
            out->fence = 0;
            out->status = SK_ORDER_PENDING;
            r = SK_OK;
        }
    }
    freeReplyObject(rep);
    /* The writer may have committed between the two reads. */
    if (r == SK_OK) {
        sk_order o2;
        if (s->db->ops->order_get(s->db, order_id, &o2) == SK_OK) *out = o2;
    }
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
    free(ctx);
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

int sk_strategy_redis_new(sk_db *db, sk_rpool *redis, sk_orderids *ids, sk_writer *writer,
                          sk_strategy *out)
{
    redis_strategy *s = calloc(1, sizeof *s);
    if (!s) return -1;
    s->db = db;
    s->redis = redis;
    s->ids = ids;
    s->writer = writer;
    out->ops = &redis_ops;
    out->ctx = s;
    return 0;
}
