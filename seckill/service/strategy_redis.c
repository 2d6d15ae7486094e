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
#include "batch.h"
#include "common/log.h"
#include "common/skutil.h"
#include "keys.h"
#include "scripts.h"
#include "soldout.h"
#include "warm.h"
#include "writer.h"

typedef struct redis_strategy {
    sk_db *db;
    const sk_redis *redis;
    sk_orderids *ids;
    sk_writer *writer;
    int grace_s;             /* see sk_strategy_redis_new */
    pthread_mutex_t warming; /* one warm-up per process at a time */
    /* Asynchronous orders that found their voucher cold, for the warm-up
     * thread (started on first need). */
    pthread_mutex_t wq_mu;
    pthread_cond_t wq_cv;
    struct async_order *wq_head, *wq_tail;
    int wq_started, wq_stop;
    pthread_t wq_thread;
    dlock_script *order, *warm, *pending, *soldout_read, *mine, *ping;
    sk_soldout *soldout; /* sold-out vouchers this instance remembers */
    sk_batcher *batcher; /* asynchronous orders, per voucher (batch.h) */
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
    sk_soldout_forget(s->soldout, voucher_id);
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
        sk_log(SK_LOG_WARN, "voucher %lld created but not warmed; the first order will", (long long)*id);
    sk_soldout_forget(s->soldout, *id);
    if (s->writer) sk_writer_notify(s->writer);
    return SK_OK;
}

/* Remaining stock comes from Redis, where the sale happens; the database
 * lags behind by the orders still in the stream. Kept as the database
 * has it when Redis does not answer. */
static int stock_from_redis(redis_strategy *s, sk_voucher *v)
{
    char keys[SK_K_COUNT][SK_KEY_MAX];
    sk_voucher_keys(v->id, keys);
    redisReply *rep;
    sk_redis_cmd(s->redis, keys[SK_K_STOCK], 0, &rep, "GET", keys[SK_K_STOCK], NULL);
    if (rep && rep->type == REDIS_REPLY_STRING) {
        int64_t left;
        if (sk_parse_i64(rep->str, rep->len, INT64_MAX, &left) == 0) v->stock = left;
    }
    if (!rep) return -1;
    freeReplyObject(rep);
    return 0;
}

static sk_result rs_voucher_get(void *ctx, int64_t id, sk_voucher *out)
{
    redis_strategy *s = ctx;
    sk_result r = s->db->ops->voucher_get(s->db, id, out);
    if (r != SK_OK) return r;
    stock_from_redis(s, out);
    return SK_OK;
}

/* A page as the database has it, each stock as Redis has it (one GET a
 * voucher: on a cluster they live in different slots). A Redis that does
 * not answer is asked once a page, not once a voucher: the rest of the
 * page keeps the database's stock rather than wait a timeout each. */
static sk_result rs_voucher_list(void *ctx, int64_t after, sk_voucher *out, size_t cap, size_t *n)
{
    redis_strategy *s = ctx;
    sk_result r = s->db->ops->voucher_list(s->db, after, out, cap, n);
    for (size_t i = 0; r == SK_OK && i < *n && stock_from_redis(s, &out[i]) == 0; i++) {}
    return r;
}

/* The most orders one script call decides, and how many calls of one
 * voucher may be in flight at once (batch.h). A call of 64 orders keeps
 * the server busy for about 0.1 ms. */
#define BATCH_MAX 64
#define BATCH_IN_FLIGHT 2

/* One order's three script arguments (lua/seckill_order.lua). */
typedef struct order_argv {
    char uid[24], ostr[24], nows[24];
} order_argv;

/* The order script's keys and leading arguments, for one voucher. */
typedef struct order_call {
    char keys[SK_K_COUNT][SK_KEY_MAX];
    char vid[24], want[16];
    const char *keyv[5];
} order_call;

/* Spelled once, so the synchronous and the asynchronous path send the very
 * same script call; `args` gets 2 + 3 * n entries, the orders' from `ov`,
 * which the caller filled with order_argv_fill. */
static void order_call_fill(order_call *c, const redis_strategy *s, int64_t voucher_id, const order_argv *ov, size_t n,
                            const char **args)
{
    sk_voucher_keys(voucher_id, c->keys);
    snprintf(c->vid, sizeof c->vid, "%lld", (long long)voucher_id);
    snprintf(c->want, sizeof c->want, "%d", s->redis->replicas);
    const char *keyv[5] = {c->keys[SK_K_STOCK], c->keys[SK_K_WINDOW], c->keys[SK_K_BUYERS], c->keys[SK_K_ORDERS],
                           c->keys[SK_K_PENDING]};
    memcpy(c->keyv, keyv, sizeof keyv);
    args[0] = c->vid;
    args[1] = c->want;
    for (size_t i = 0; i < n; i++) {
        args[2 + 3 * i] = ov[i].uid;
        args[3 + 3 * i] = ov[i].ostr;
        args[4 + 3 * i] = ov[i].nows;
    }
}

static void order_argv_fill(order_argv *a, int64_t user_id, int64_t now, uint64_t oid)
{
    snprintf(a->uid, sizeof a->uid, "%lld", (long long)user_id);
    snprintf(a->ostr, sizeof a->ostr, "%llu", (unsigned long long)oid);
    snprintf(a->nows, sizeof a->nows, "%lld", (long long)now);
}

/* Redis out of reach fails every order alike: one line a second for all. */
static sk_log_limit order_down_log;

/* Whether a reply is the script's answer for n orders. */
static int order_reply_ok(const redisReply *rep, size_t n)
{
    if (!rep) return 0;
    if (rep->type == REDIS_REPLY_ERROR) {
        SK_LOG_REPEATED(SK_LOG_ERROR, "order script: %s", rep->str);
        return 0;
    }
    return rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 * n;
}

/* Order i's answer in a reply order_reply_ok() accepted (NULL: none came,
 * or a malformed one); the codes are the script's
 * (lua/seckill_order.lua). `acks` and `stock_key` matter with
 * --replica-acks only. */
static sk_result order_outcome(redis_strategy *s, const redisReply *rep, size_t i, long long acks,
                               const char *stock_key, int *not_warm)
{
    *not_warm = 0;
    if (!rep) return SK_UNAVAILABLE;
    const redisReply *code = rep->element[2 * i], *msg = rep->element[2 * i + 1];
    if (code->type != REDIS_REPLY_INTEGER) return SK_INTERNAL;
    switch (code->integer) {
    case 0: return s->redis->replicas > 0 && acks < s->redis->replicas ? SK_BUSY : SK_OK;
    case 1: *not_warm = 1; return SK_NO_VOUCHER;
    case 2: return SK_NOT_STARTED;
    case 3: return SK_ENDED;
    case 4: return SK_ALREADY;
    case 5: return SK_SOLD_OUT;
    case 6: /* too few replicas online: nothing taken */
        if (stock_key) sk_acked_forget(s->redis, stock_key);
        return SK_BUSY;
    case 7: /* the write refused: nothing taken */
        SK_LOG_REPEATED(SK_LOG_ERROR, "order script: %s", msg->type == REDIS_REPLY_STRING ? msg->str : "write refused");
        return SK_INTERNAL;
    default: return SK_INTERNAL;
    }
}

/*
 * One script call decides. It is never sent twice (DLOCK_REDIS_ONCE): if
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
    order_argv ov;
    order_call c;
    const char *args[5];
    order_argv_fill(&ov, user_id, now, oid);
    order_call_fill(&c, s, voucher_id, &ov, 1, args);
    redisReply *rep = NULL;
    long long acks = -1;
    if (s->redis->replicas > 0)
        dlock_script_eval_acked(s->order, DLOCK_REDIS_ONCE, 5, c.keyv, 5, args, s->redis->replicas,
                                s->redis->replica_timeout_ms, &rep, &acks);
    else dlock_script_eval(s->order, DLOCK_REDIS_ONCE, 5, c.keyv, 5, args, &rep);
    if (!rep) sk_log_limited(&order_down_log, SK_LOG_ERROR, "order script: no answer: %s", dlock_last_error());
    int ok = order_reply_ok(rep, 1);
    sk_result r = order_outcome(s, ok ? rep : NULL, 0, acks, c.keys[SK_K_STOCK], not_warm);
    if (rep && !ok) r = SK_INTERNAL;
    if (rep) freeReplyObject(rep);
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

/*
 * The order path has one sequence of steps, which the synchronous
 * rs_order_create() and the asynchronous rs_order_create_async() both
 * take; they differ only in who waits for the script's first answer:
 *
 *   remembered sold out? answer (order_known)
 *     -> sk_orderids_next -> order script (run_order / its async submit)
 *     -> order_outcome -> cold voucher? warm_and_retry
 *     -> order_settled (busy when Redis is down; the writer told; a
 *        sold-out answer noted for order_known)
 */

/* Read a voucher the order script found sold out, for soldout.h: one
 * atomic read of its stock, window and buyers. */
static void soldout_read(redis_strategy *s, int64_t voucher_id)
{
    char keys[SK_K_COUNT][SK_KEY_MAX];
    sk_voucher_keys(voucher_id, keys);
    const char *keyv[3] = {keys[SK_K_STOCK], keys[SK_K_WINDOW], keys[SK_K_BUYERS]};
    redisReply *rep = NULL;
    int stored = 0;
    if (dlock_script_eval(s->soldout_read, 0, 3, keyv, 0, NULL, &rep) == DLOCK_OK && rep->type == REDIS_REPLY_ARRAY &&
        rep->elements >= 2) {
        size_t n = rep->elements - 2;
        int64_t *buyers = malloc((n ? n : 1) * sizeof *buyers);
        int64_t win[2];
        int ok = buyers != NULL;
        for (size_t i = 0; ok && i < rep->elements; i++) {
            redisReply *el = rep->element[i];
            int64_t *to = i < 2 ? &win[i] : &buyers[i - 2];
            ok = el->type == REDIS_REPLY_STRING && sk_parse_i64(el->str, el->len, INT64_MAX, to) == 0;
        }
        if (ok) {
            sk_soldout_store(s->soldout, voucher_id, win[0], win[1], buyers, n);
            stored = 1;
        }
        free(buyers);
    }
    if (rep) freeReplyObject(rep);
    if (!stored) sk_soldout_forget(s->soldout, voucher_id);
}

/* The answer without Redis, when the voucher is remembered sold out; the
 * first caller after "sold out" was seen reads it (one call a voucher per
 * memory's lifetime, on either path). SK_OK: ask Redis. */
static sk_result order_known(redis_strategy *s, int64_t user_id, int64_t voucher_id, int64_t now)
{
    if (sk_soldout_claim(s->soldout, voucher_id)) soldout_read(s, voucher_id);
    return sk_soldout_answer(s->soldout, voucher_id, user_id, now);
}

/* A voucher Redis does not know (new, or Redis restarted empty): the
 * database says whether it exists at all; warm it and run the order once
 * more, synchronously (on the async path, on the warm-up thread). */
static sk_result warm_and_retry(redis_strategy *s, int64_t user_id, int64_t voucher_id, int64_t now, uint64_t oid)
{
    sk_result r = warm_on_demand(s, voucher_id);
    if (r != SK_OK) return r;
    int not_warm;
    r = run_order(s, user_id, voucher_id, now, oid, &not_warm);
    return not_warm ? SK_BUSY : r;
}

/* Every order's last step: Redis out of reach is "busy", and an accepted
 * order wakes the writer. */
static sk_result order_settled(redis_strategy *s, int64_t voucher_id, sk_result r)
{
    r = busy_if_down(r);
    if (r == SK_SOLD_OUT) sk_soldout_seen(s->soldout, voucher_id);
    if (r == SK_OK && s->writer) sk_writer_order(s->writer, voucher_id);
    return r;
}

static sk_result rs_order_create(void *ctx, int64_t user_id, int64_t voucher_id, int64_t now, uint64_t *order_id)
{
    redis_strategy *s = ctx;
    sk_result r = order_known(s, user_id, voucher_id, now);
    if (r != SK_OK) return r;
    uint64_t oid;
    r = sk_orderids_next(s->ids, &oid);
    if (r != SK_OK) return busy_if_down(r);
    int not_warm;
    r = run_order(s, user_id, voucher_id, now, oid, &not_warm);
    if (not_warm) r = warm_and_retry(s, user_id, voucher_id, now, oid);
    r = order_settled(s, voucher_id, r);
    if (r == SK_OK) *order_id = oid;
    return r;
}

/* An order decided asynchronously, from its script call to its answer. */
typedef struct async_order {
    sk_batch_item item; /* first: in its voucher's batch (key: the voucher) */
    redis_strategy *s;
    int64_t user_id, voucher_id, now;
    uint64_t oid;
    sk_order_done *done;
    void *arg;
    struct async_order *next; /* in the warm-up queue */
} async_order;

/* One script call's orders, in the order of its arguments. */
typedef struct order_batch {
    redis_strategy *s;
    int64_t voucher_id;
    size_t n;
    async_order *o[];
} order_batch;

/* The end of an asynchronous order: order_settled(), then the answer. */
static void async_finish(async_order *o, sk_result r)
{
    r = order_settled(o->s, o->voucher_id, r);
    sk_order_done *done = o->done;
    void *arg = o->arg;
    uint64_t oid = o->oid;
    free(o);
    done(arg, r, r == SK_OK ? oid : 0);
}

/* Why a thread of its own: warming blocks on the database and Redis, and
 * the library's thread that hands replies back must not wait for that. */
static void *warmer_main(void *arg)
{
    pthread_setname_np(pthread_self(), "sk-warmer");
    redis_strategy *s = arg;
    pthread_mutex_lock(&s->wq_mu);
    for (;;) {
        while (!s->wq_head && !s->wq_stop) pthread_cond_wait(&s->wq_cv, &s->wq_mu);
        async_order *o = s->wq_head;
        if (!o) break;
        s->wq_head = o->next;
        if (!s->wq_head) s->wq_tail = NULL;
        pthread_mutex_unlock(&s->wq_mu);
        async_finish(o, warm_and_retry(o->s, o->user_id, o->voucher_id, o->now, o->oid));
        pthread_mutex_lock(&s->wq_mu);
    }
    pthread_mutex_unlock(&s->wq_mu);
    return NULL;
}

/* Queue a cold voucher's order for the warm-up thread (started on first
 * need); "busy" when no thread can be had. */
static void warm_later(async_order *o)
{
    redis_strategy *s = o->s;
    pthread_mutex_lock(&s->wq_mu);
    if (!s->wq_started && !s->wq_stop && pthread_create(&s->wq_thread, NULL, warmer_main, s) == 0) s->wq_started = 1;
    if (!s->wq_started || s->wq_stop) {
        pthread_mutex_unlock(&s->wq_mu);
        async_finish(o, SK_BUSY);
        return;
    }
    o->next = NULL;
    if (s->wq_tail) s->wq_tail->next = o;
    else s->wq_head = o;
    s->wq_tail = o;
    pthread_cond_signal(&s->wq_cv);
    pthread_mutex_unlock(&s->wq_mu);
}

/* A batch's answer, on a library thread. The voucher's next call goes
 * out first, so the server works on it while these orders are answered. */
static void batch_answered(dlock_status st, redisReply *rep, void *arg)
{
    order_batch *b = arg;
    redis_strategy *s = b->s;
    sk_batcher_done(s->batcher, b->voucher_id);
    if (!rep) sk_log_limited(&order_down_log, SK_LOG_ERROR, "order script: no answer: %s", dlock_strerror(st));
    int ok = order_reply_ok(rep, b->n);
    for (size_t i = 0; i < b->n; i++) {
        int not_warm;
        sk_result r = order_outcome(s, ok ? rep : NULL, i, -1, NULL, &not_warm);
        if (rep && !ok) r = SK_INTERNAL;
        if (not_warm) warm_later(b->o[i]);
        else async_finish(b->o[i], r);
    }
    if (rep) freeReplyObject(rep);
    free(b);
}

/* Answer every order of a chain that was not sent. */
static void chain_finish(sk_batch_item *chain, sk_result r)
{
    while (chain) {
        async_order *o = (async_order *)chain;
        chain = chain->next;
        async_finish(o, r);
    }
}

/* batch.h's sender: one script call for the chained orders of a voucher. */
static int batch_send(void *ctx, int64_t voucher_id, sk_batch_item *chain, size_t n)
{
    redis_strategy *s = ctx;
    /* The arguments live on the stack: the call copies them before it
     * returns, so only the batch itself, which the reply needs, is
     * allocated. */
    order_argv ov[BATCH_MAX] = {0};
    const char *args[2 + 3 * BATCH_MAX];
    order_batch *b = n <= BATCH_MAX ? malloc(sizeof *b + n * sizeof b->o[0]) : NULL;
    if (!b) {
        chain_finish(chain, SK_INTERNAL);
        return -1;
    }
    *b = (order_batch){.s = s, .voucher_id = voucher_id, .n = n};
    size_t i = 0;
    for (sk_batch_item *it = chain; it && i < n; it = it->next, i++) {
        b->o[i] = (async_order *)it;
        order_argv_fill(&ov[i], b->o[i]->user_id, b->o[i]->now, b->o[i]->oid);
    }
    b->n = n = i; /* the chain holds n items (batch.c): a shorter one is sent as it is */
    order_call c;
    order_call_fill(&c, s, voucher_id, ov, n, args);
    dlock_status st =
        dlock_script_eval_async(s->order, DLOCK_REDIS_ONCE, 5, c.keyv, (int)(2 + 3 * n), args, batch_answered, b);
    if (st == DLOCK_OK) return 0;
    free(b);
    chain_finish(chain, SK_BUSY); /* not sent: Redis out of reach, as run_order() says */
    return -1;
}

/*
 * rs_order_create() without waiting for Redis: the order id is taken here
 * (it is local almost always), the order joins its voucher's next script
 * call (batch.h: at once when none is waiting), sent with the same keys,
 * arguments and DLOCK_REDIS_ONCE as run_order() sends, and its part of
 * the reply is mapped on the library's thread exactly as run_order() maps
 * it. With --replica-acks the order stays synchronous (its WAIT holds a
 * connection of its own anyway).
 */
static int rs_order_create_async(void *ctx, int64_t user_id, int64_t voucher_id, int64_t now, sk_order_done *done,
                                 void *arg, sk_result *r, uint64_t *order_id)
{
    redis_strategy *s = ctx;
    if (s->redis->replicas > 0) {
        *r = rs_order_create(ctx, user_id, voucher_id, now, order_id);
        return 0;
    }
    *r = order_known(s, user_id, voucher_id, now);
    if (*r != SK_OK) return 0;
    uint64_t oid;
    *r = sk_orderids_next(s->ids, &oid);
    if (*r != SK_OK) {
        *r = busy_if_down(*r);
        return 0;
    }
    async_order *o = malloc(sizeof *o);
    if (!o) {
        *r = SK_INTERNAL;
        return 0;
    }
    *o = (async_order){{NULL, voucher_id}, s, user_id, voucher_id, now, oid, done, arg, NULL};
    if (sk_batcher_add(s->batcher, &o->item) != 0) {
        free(o);
        *r = SK_INTERNAL;
        return 0;
    }
    return 1;
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
    char(*keys)[SK_KEY_MAX] = malloc((nv ? nv : 1) * sizeof *keys);
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

/*
 * The same order as rs_order_get, by (user, voucher): the database, the
 * voucher's pending hash, the database again, so an order committed
 * between the first read and the scan is found by the second.
 */
static sk_result rs_order_of_user(void *ctx, int64_t user_id, int64_t voucher_id, sk_order *out)
{
    redis_strategy *s = ctx;
    uint64_t oid = 0;
    sk_result r = s->db->ops->order_of_user(s->db, user_id, voucher_id, &oid);
    if (r == SK_ALREADY) return s->db->ops->order_get(s->db, oid, out);
    if (r != SK_OK) return r;
    char keys[SK_K_COUNT][SK_KEY_MAX], uid[24];
    sk_voucher_keys(voucher_id, keys);
    snprintf(uid, sizeof uid, "%lld", (long long)user_id);
    const char *keyv[1] = {keys[SK_K_PENDING]};
    const char *argv[1] = {uid};
    redisReply *rep = NULL;
    if (dlock_script_eval(s->mine, 0, 1, keyv, 1, argv, &rep) != DLOCK_OK) {
        if (rep) freeReplyObject(rep);
        return SK_UNAVAILABLE;
    }
    int pending = rep->type == REDIS_REPLY_STRING && sk_parse_u64(rep->str, rep->len, UINT64_MAX, &oid) == 0;
    freeReplyObject(rep);
    if (pending) {
        *out = (sk_order){.id = oid, .user_id = user_id, .voucher_id = voucher_id, .status = SK_ORDER_PENDING};
        return SK_OK;
    }
    r = s->db->ops->order_of_user(s->db, user_id, voucher_id, &oid);
    if (r == SK_ALREADY) return s->db->ops->order_get(s->db, oid, out);
    return r == SK_OK ? SK_NO_ORDER : r;
}

/* Orders need Redis; the writer and GETs need the database. */
static int rs_health(void *ctx)
{
    redis_strategy *s = ctx;
    redisReply *rep;
    sk_redis_cmd(s->redis, NULL, 0, &rep, "PING", NULL);
    int down = rep && rep->type == REDIS_REPLY_STATUS ? 0 : SK_DOWN_REDIS;
    if (rep) freeReplyObject(rep);
    if (s->db->ops->ping(s->db) != SK_OK) down |= SK_DOWN_DB;
    return down;
}

/* One readiness probe in flight: what the database said, and whom to tell. */
typedef struct health_probe {
    int down;
    void (*done)(void *arg, int down);
    void *arg;
} health_probe;

static void ping_answered(dlock_status st, redisReply *rep, void *arg)
{
    health_probe *p = arg;
    int down = p->down | (st == DLOCK_OK && rep && rep->type == REDIS_REPLY_INTEGER ? 0 : SK_DOWN_REDIS);
    if (rep) freeReplyObject(rep);
    void (*done)(void *, int) = p->done;
    void *darg = p->arg;
    free(p);
    done(darg, down);
}

/* rs_health without a thread waiting for Redis: the database is asked
 * here, Redis by a trivial script sent like an order (to the server of a
 * fixed key), so that a Redis that hangs holds no HTTP thread and the
 * HTTP layer's deadline answers the probe. */
static int rs_health_async(void *ctx, void (*done)(void *arg, int down), void *arg, int *down)
{
    redis_strategy *s = ctx;
    *down = s->db->ops->ping(s->db) != SK_OK ? SK_DOWN_DB : 0;
    health_probe *p = malloc(sizeof *p);
    if (!p) {
        *down = rs_health(ctx);
        return 0;
    }
    *p = (health_probe){*down, done, arg};
    static const char *const key[1] = {"seckill:ready"};
    if (dlock_script_eval_async(s->ping, 0, 1, key, 0, NULL, ping_answered, p) == DLOCK_OK) return 1;
    free(p);
    *down |= SK_DOWN_REDIS;
    return 0;
}

/* The client, ids and writer belong to the caller. */
static void rs_destroy(void *ctx)
{
    redis_strategy *s = ctx;
    /* The HTTP server is stopped: every asynchronous order has been
     * answered, so the warm-up queue is empty. */
    pthread_mutex_lock(&s->wq_mu);
    s->wq_stop = 1;
    pthread_cond_signal(&s->wq_cv);
    int started = s->wq_started;
    pthread_mutex_unlock(&s->wq_mu);
    if (started) pthread_join(s->wq_thread, NULL);
    pthread_cond_destroy(&s->wq_cv);
    pthread_mutex_destroy(&s->wq_mu);
    pthread_mutex_destroy(&s->warming);
    dlock_script_free(s->order);
    dlock_script_free(s->warm);
    dlock_script_free(s->pending);
    dlock_script_free(s->soldout_read);
    dlock_script_free(s->mine);
    dlock_script_free(s->ping);
    sk_soldout_free(s->soldout);
    sk_batcher_free(s->batcher);
    free(s);
}

static const sk_strategy_ops redis_ops = {
    .name = "redis",
    .voucher_create = rs_voucher_create,
    .voucher_get = rs_voucher_get,
    .order_create = rs_order_create,
    .order_get = rs_order_get,
    .voucher_list = rs_voucher_list,
    .order_of_user = rs_order_of_user,
    .health = rs_health,
    .health_async = rs_health_async,
    .destroy = rs_destroy,
    .order_create_async = rs_order_create_async,
};

/* The scripts are loaded here (one SCRIPT LOAD each), so a server that
 * refuses them fails `serve` at start rather than every order later. */
int sk_strategy_redis_new(sk_db *db, const sk_redis *redis, sk_orderids *ids, sk_writer *writer, int grace_s,
                          long sold_out_ms, sk_strategy *out, char *err, size_t errlen)
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
    pthread_mutex_init(&s->wq_mu, NULL);
    pthread_cond_init(&s->wq_cv, NULL);
    if (!(s->soldout = sk_soldout_new(sold_out_ms)) ||
        !(s->batcher = sk_batcher_new(BATCH_IN_FLIGHT, BATCH_MAX, batch_send, s))) {
        snprintf(err, errlen, "out of memory");
        rs_destroy(s);
        return -1;
    }
    if (dlock_script_new(redis->client, sk_lua_seckill_order, &s->order) != DLOCK_OK ||
        dlock_script_new(redis->client, sk_lua_seckill_warm, &s->warm) != DLOCK_OK ||
        dlock_script_new(redis->client, sk_lua_seckill_pending, &s->pending) != DLOCK_OK ||
        dlock_script_new(redis->client, sk_lua_seckill_soldout, &s->soldout_read) != DLOCK_OK ||
        dlock_script_new(redis->client, sk_lua_seckill_mine, &s->mine) != DLOCK_OK ||
        dlock_script_new(redis->client, "return 1", &s->ping) != DLOCK_OK) {
        snprintf(err, errlen, "loading the order scripts: %s", dlock_last_error());
        rs_destroy(s);
        return -1;
    }
    out->ops = &redis_ops;
    out->ctx = s;
    return 0;
}
