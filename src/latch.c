/*
 * The count-down latch: a counter that, on reaching zero, is kept as "0"
 * (open) for DLOCK_IDLE_MS and announces it with a "*" message, which
 * wakes every waiter of every process at once (a plain release wakes
 * one). An await waits for a latch that is not set yet, so that one that
 * starts before the setter cannot pass at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "client.h"
#include "handle.h"
#include "op.h"
#include "util.h"
#include "wait.h"

#define COUNT_MAX 0x7fffffffL

static const dlock__handle_keys latch_keys = {":latch", NULL, ":latch:ch"};

struct dlock_latch {
    dlock__handle base; /* first: client, name, keys */
};

dlock_status dlock_latch_new(dlock_client *client, const char *name, dlock_latch **out)
{
    dlock__handle *h = NULL;
    dlock_status st = dlock__handle_new(sizeof(dlock_latch), client, name, &latch_keys, out ? &h : NULL);
    if (out) *out = (dlock_latch *)h;
    return st;
}

void dlock_latch_free(dlock_latch *l)
{
    if (!l) return;
    dlock__handle_destroy(&l->base, NULL);
    free(l);
}

dlock_status dlock_latch_set(dlock_latch *l, long count, int *was_set)
{
    if (was_set) *was_set = 0;
    if (!l) return dlock__fail(DLOCK_ERR_INVALID, "latch is NULL");
    if (count < 1 || count > COUNT_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "latch count must be 1 to %ld", COUNT_MAX);
    char n[24];
    snprintf(n, sizeof n, "%ld", count);
    dlock__op op;
    dlock__op_new(l->base.client, l->base.key, &op);
    const char *keys[2] = {l->base.key, op.key};
    const char *args[3] = {n, op.seq, op.ttl};
    long long set;
    dlock_status st = dlock__eval_int(l->base.client, DLOCK__SCRIPT_LATCH_SET, 2, keys, 3, args, &set);
    if (st == DLOCK_OK && was_set) *was_set = set == 1;
    return st;
}

/* The keys and arguments of one run of latch_count_down.lua, for the
 * calling thread's call (`handle` 0) or an asynchronous one through
 * handle number `handle` (op.h: whose operation record it uses). */
typedef struct count_down_call {
    dlock__op op;
    char idle[24];
    const char *keys[3], *args[4];
} count_down_call;

static void count_down_call_make(dlock_latch *l, unsigned long handle, count_down_call *c)
{
    dlock_client *client = l->base.client;
    if (handle) dlock__op_new_async(client, l->base.key, handle, &c->op);
    else dlock__op_new(client, l->base.key, &c->op);
    const char *keys[3] = {l->base.key, l->base.channel, c->op.key};
    snprintf(c->idle, sizeof c->idle, "%ld", DLOCK_IDLE_MS);
    const char *args[4] = {client->publish, c->op.seq, c->op.ttl, c->idle};
    memcpy(c->keys, keys, sizeof keys);
    memcpy(c->args, args, sizeof args);
}

dlock_status dlock_latch_count_down(dlock_latch *l, long *remaining)
{
    if (!l) return dlock__fail(DLOCK_ERR_INVALID, "latch is NULL");
    count_down_call c;
    count_down_call_make(l, 0, &c);
    long long left;
    dlock_status st = dlock__eval_int(l->base.client, DLOCK__SCRIPT_LATCH_COUNT_DOWN, 3, c.keys, 4, c.args, &left);
    if (st == DLOCK_OK && remaining) *remaining = (long)left;
    return st;
}

dlock_status dlock_latch_count(dlock_latch *l, long *count)
{
    if (!l || !count) return dlock__fail(DLOCK_ERR_INVALID, "latch or output is NULL");
    const char *argv[2] = {"GET", l->base.key};
    redisReply *r;
    dlock_status st = dlock__topo_command(l->base.client->topo, l->base.key, 2, argv, NULL, &r, NULL);
    if (st != DLOCK_OK) return st;
    if (r->type == REDIS_REPLY_NIL) *count = 0;
    else if (r->type == REDIS_REPLY_STRING) *count = strtol(r->str, NULL, 10);
    else st = dlock__reply_error(r, "GET");
    freeReplyObject(r);
    return st;
}

/* Open when the count is "0" (latch_count.lua): a latch not set yet, -1,
 * is waited for like a shut one. Nothing bounds how long it stays shut. */
static int latch_try(void *ctx, long *retry_ms)
{
    dlock_latch *l = ctx;
    const char *keys[1] = {l->base.key};
    long long count;
    dlock_status st = dlock__eval_int(l->base.client, DLOCK__SCRIPT_LATCH_COUNT, 1, keys, 0, NULL, &count);
    if (st != DLOCK_OK) return st;
    *retry_ms = -1;
    return count == 0 ? DLOCK_OK : DLOCK__BUSY;
}

static dlock_status latch_await(dlock_latch *l, long wait_ms)
{
    if (wait_ms < DLOCK_WAIT_FOREVER) return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    int64_t deadline = dlock__deadline(wait_ms);
    long retry = -1;
    dlock__early early = {0};
    if (wait_ms != 0) (void)dlock__wait_begin(l->base.client, l->base.channel, 0, 1, NULL, &early);
    int result = latch_try(l, &retry);
    if (dlock__should_wait(result, wait_ms))
        result = dlock__wait_for(l->base.client, DLOCK_STATS_LATCH, l->base.channel, deadline, latch_try, l, result,
                                 retry, NULL, NULL, &early);
    else dlock__wait_early_end(&early);
    if (result == DLOCK__BUSY) return dlock__fail(DLOCK_ERR_TIMEOUT, "latch still shut when time ran out");
    return (dlock_status)result;
}

/* An await is the latch's acquire: counted as one, however it ends. */
dlock_status dlock_latch_await(dlock_latch *l, long wait_ms)
{
    if (!l) return dlock__fail(DLOCK_ERR_INVALID, "latch is NULL");
    int64_t since = dlock__stats_clock();
    dlock_status st = latch_await(l, wait_ms);
    dlock__stats_acquired(&l->base.client->stats, DLOCK_STATS_LATCH, since, st);
    return st;
}

/* ------------------------------------------------------------------------
 * The asynchronous calls. The await runs on the wait engine of the
 * asynchronous acquires (wait.h), with the count as the attempt; the
 * count-down is one script call. One call at a time per handle, as for
 * the semaphore's (semaphore.c): a resent count-down is recognised by
 * the handle's operation record, which remembers only its latest call.
 * ------------------------------------------------------------------------ */

typedef struct latch_async {
    dlock__await aw; /* first: an await's state */
    dlock_latch *l;
    dlock__thread_rec *rec; /* the handle's record 0: one call at a time */
    int64_t since;
    dlock_latch_fn awaited;         /* an await's callback, or */
    dlock_latch_counted_fn counted; /* a count-down's */
    void *arg;
} latch_async;

/* Claim the handle for one call and make its state; NULL and *st when
 * it cannot start. */
static latch_async *latch_async_begin(dlock_latch *l, void *arg, dlock_status *st)
{
    dlock__thread_rec *rec;
    latch_async *op = dlock__handle_async_op(&l->base, sizeof *op, &rec, st);
    if (op) {
        op->l = l;
        op->rec = rec;
        op->arg = arg;
    }
    return op;
}

/* Undo latch_async_begin() for a call that was not sent. */
static dlock_status latch_async_abandon(latch_async *op, dlock_status st)
{
    dlock_latch *l = op->l;
    dlock__thread_rec *rec = op->rec;
    free(op);
    dlock__handle_async_abandon(&l->base, rec);
    return st;
}

/* The end of either call: the callback, with the thread's last error set. */
static void latch_async_end(latch_async *op, dlock_status st, long left)
{
    dlock_latch *l = op->l;
    dlock_client *c = l->base.client;
    dlock__thread_rec *rec = op->rec;
    dlock_latch_fn awaited = op->awaited;
    dlock_latch_counted_fn counted = op->counted;
    void *arg = op->arg;
    free(op);
    dlock__handle_async_done(rec);
    if (counted) counted(l, st, left, arg);
    else awaited(l, st, arg);
    dlock__async_end(&c->async);
}

static dlock_status async_attempt(dlock__await *aw)
{
    latch_async *op = (latch_async *)aw;
    const char *keys[1] = {op->l->base.key};
    return dlock__async_script(op->l->base.client, DLOCK__SCRIPT_LATCH_COUNT, 1, keys, 0, NULL, dlock__await_reply, op);
}

static int async_parse(dlock__await *aw, const redisReply *r, long *retry_ms)
{
    (void)aw;
    *retry_ms = -1;
    if (r->type != REDIS_REPLY_INTEGER)
        return dlock__fail(DLOCK_ERR_REDIS, "script: unexpected reply type %d", r->type);
    return r->integer == 0 ? DLOCK_OK : DLOCK__BUSY; /* -1: not set yet, as latch_try() */
}

static void async_done(dlock__await *aw, int result)
{
    latch_async *op = (latch_async *)aw;
    dlock_status st = (dlock_status)result;
    if (result == DLOCK__BUSY) st = dlock__fail(DLOCK_ERR_TIMEOUT, "latch still shut when time ran out");
    dlock__stats_acquired(&op->l->base.client->stats, DLOCK_STATS_LATCH, op->since, st);
    latch_async_end(op, st, 0);
}

static const dlock__await_ops await_ops = {async_attempt, async_parse, async_done};

dlock_status dlock_latch_await_async(dlock_latch *l, long wait_ms, dlock_latch_fn cb, void *arg)
{
    if (!l || !cb) return dlock__fail(DLOCK_ERR_INVALID, "latch or callback is NULL");
    if (wait_ms < DLOCK_WAIT_FOREVER) return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    dlock_status st;
    latch_async *op = latch_async_begin(l, arg, &st);
    if (!op) return st;
    op->awaited = cb;
    op->since = dlock__stats_clock();
    st = dlock__await_start(&op->aw, &await_ops, l->base.client, DLOCK_STATS_LATCH, l->base.channel, wait_ms,
                            DLOCK__AWAIT_IN_LINE, NULL);
    return st == DLOCK_OK ? st : latch_async_abandon(op, st);
}

static void on_counted(dlock_status st, redisReply *r, void *arg)
{
    long long left;
    st = dlock__async_int(st, r, &left);
    latch_async_end(arg, st, (long)left);
}

dlock_status dlock_latch_count_down_async(dlock_latch *l, dlock_latch_counted_fn cb, void *arg)
{
    if (!l || !cb) return dlock__fail(DLOCK_ERR_INVALID, "latch or callback is NULL");
    dlock_status st;
    latch_async *op = latch_async_begin(l, arg, &st);
    if (!op) return st;
    op->counted = cb;
    count_down_call c;
    count_down_call_make(l, l->base.number, &c);
    st = dlock__async_script(l->base.client, DLOCK__SCRIPT_LATCH_COUNT_DOWN, 3, c.keys, 4, c.args, on_counted, op);
    return st == DLOCK_OK ? st : latch_async_abandon(op, st);
}
