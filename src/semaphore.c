/*
 * The plain counting semaphore: a counter in Redis, taken and returned by
 * scripts, with waiting woken by the release channel. See dlock.h for when
 * to prefer the permit-expirable kind.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "handle.h"
#include "op.h"
#include "sem_size.h"
#include "util.h"
#include "wait.h"

#define PERMITS_MAX 0x7fffffffL

static const dlock__handle_keys sem_keys = {":sem", NULL, ":sem:ch"};

struct dlock_semaphore {
    dlock__handle base; /* first: client, name, keys */
    char *size_key;     /* "dlock:{NAME}:sem:size" */
    atomic_long size;   /* the size this handle set or found, -1 before */
};

dlock_status dlock_semaphore_new(dlock_client *client, const char *name, dlock_semaphore **out)
{
    dlock__handle *h = NULL;
    dlock_status st = dlock__handle_new(sizeof(dlock_semaphore), client, name, &sem_keys, out ? &h : NULL);
    if (out) *out = NULL;
    if (st != DLOCK_OK) return st;
    dlock_semaphore *s = (dlock_semaphore *)h;
    atomic_init(&s->size, -1);
    if (!(s->size_key = dlock__key(name, ":sem:size"))) {
        dlock_semaphore_free(s);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    *out = s;
    return DLOCK_OK;
}

void dlock_semaphore_free(dlock_semaphore *s)
{
    if (!s) return;
    dlock__handle_destroy(&s->base, NULL);
    free(s->size_key);
    free(s);
}

/* ------------------------------------------------------------------------
 * Size: made once, refused when another size is asked for, changed only
 * by name (sem_set.lua, psem_set.lua; shared with psem.c).
 * ------------------------------------------------------------------------ */

dlock_status dlock__sem_size(dlock_client *client, dlock__script_id script, const char *what, const char *name,
                             const char *const keys[2], const char *channel, const char *mode, long n,
                             atomic_long *size, int *was_set)
{
    long least = strcmp(mode, "add") == 0 ? -PERMITS_MAX : 0;
    if (n < least || n > PERMITS_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "%s must be %ld to %ld", least ? "the change" : "permits", least,
                           PERMITS_MAX);
    char num[24], idle[24];
    snprintf(num, sizeof num, "%ld", n);
    snprintf(idle, sizeof idle, "%ld", DLOCK_IDLE_MS);
    dlock__op op;
    dlock__op_new(client, keys[0], &op);
    const char *k[4] = {keys[0], keys[1], op.key, channel};
    const char *args[6] = {num, op.seq, op.ttl, idle, mode, client->publish};
    redisReply *r;
    dlock_status st = dlock__eval(client, script, 4, k, 6, args, &r, NULL);
    if (st != DLOCK_OK) return st;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return dlock__fail(DLOCK_ERR_REDIS, "%s: unexpected reply", what);
    }
    long long code = r->element[0]->integer, stored = r->element[1]->integer;
    freeReplyObject(r);
    if (code < 0 && strcmp(mode, "set") == 0)
        return dlock__fail(DLOCK_ERR_INVALID, "%s '%s' has %lld permits, not %ld (resize it to change that)", what,
                           name, stored, n);
    if (code < 0)
        return dlock__fail(DLOCK_ERR_INVALID, "%s '%s' has %lld permits: %ld would take it below 0", what, name, stored,
                           n);
    atomic_store(size, (long)stored);
    if (was_set) *was_set = code == 1;
    return DLOCK_OK;
}

/* The one call behind set_permits, resize and add_permits. */
static dlock_status sem_size(dlock_semaphore *s, const char *mode, long n, int *was_set)
{
    const char *keys[2] = {s->base.key, s->size_key};
    return dlock__sem_size(s->base.client, DLOCK__SCRIPT_SEM_SET, "semaphore", s->base.name, keys, s->base.channel,
                           mode, n, &s->size, was_set);
}

dlock_status dlock_semaphore_set_permits(dlock_semaphore *s, long permits, int *was_set)
{
    if (was_set) *was_set = 0;
    return s ? sem_size(s, "set", permits, was_set) : dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
}

dlock_status dlock_semaphore_resize(dlock_semaphore *s, long permits)
{
    return s ? sem_size(s, "resize", permits, NULL) : dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
}

dlock_status dlock_semaphore_add_permits(dlock_semaphore *s, long change)
{
    return s ? sem_size(s, "add", change, NULL) : dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
}

struct sem_attempt {
    dlock_semaphore *s;
    long permits;
};

/* The keys and arguments of one run of sem_acquire.lua (sem_release.lua:
 * with the channel and the publish command), each its own operation. */
typedef struct sem_call {
    dlock__op op;
    char n[24], idle[24], size[24];
    const char *keys[4], *args[5];
    int nkeys, nargs;
} sem_call;

/* `handle`: 0 for the calling thread's call, else the asynchronous call's
 * handle number (op.h). */
static void sem_call_make(dlock_semaphore *s, long permits, int release, unsigned long handle, sem_call *c)
{
    dlock_client *client = s->base.client;
    snprintf(c->n, sizeof c->n, "%ld", permits);
    if (handle) dlock__op_new_async(client, s->base.key, handle, &c->op);
    else dlock__op_new(client, s->base.key, &c->op);
    snprintf(c->idle, sizeof c->idle, "%ld", DLOCK_IDLE_MS);
    long size = atomic_load(&s->size);
    snprintf(c->size, sizeof c->size, "%ld", size);
    c->keys[0] = s->base.key;
    if (release) {
        const char *keys[4] = {s->base.key, s->base.channel, c->op.key, s->size_key};
        const char *args[5] = {c->n, client->publish, c->op.seq, c->op.ttl, c->idle};
        memcpy(c->keys, keys, sizeof keys);
        memcpy(c->args, args, sizeof args);
        c->nkeys = 4;
        c->nargs = 5;
    } else {
        const char *keys[3] = {s->base.key, c->op.key, s->size_key};
        const char *args[5] = {c->n, c->op.seq, c->op.ttl, c->idle, c->size};
        memcpy(c->keys, keys, sizeof keys);
        memcpy(c->args, args, sizeof args);
        c->nkeys = 3;
        c->nargs = size >= 0 ? 5 : 4;
    }
}

/* One try; with no lease to bound the wait, the retry bound is unknown.
 * Each try is its own operation: one that took nothing may run again. */
static int sem_try(void *ctx, long *retry_ms)
{
    struct sem_attempt *a = ctx;
    sem_call c;
    sem_call_make(a->s, a->permits, 0, 0, &c);
    long long got;
    dlock_status st =
        dlock__eval_int(a->s->base.client, DLOCK__SCRIPT_SEM_ACQUIRE, c.nkeys, c.keys, c.nargs, c.args, &got);
    if (st != DLOCK_OK) return st;
    *retry_ms = -1;
    return got == 1 ? DLOCK_OK : DLOCK__BUSY;
}

/* The arguments every acquire checks. */
static dlock_status sem_check(long permits, long wait_ms)
{
    if (permits < 1 || permits > PERMITS_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "permits must be 1 to %ld", PERMITS_MAX);
    if (wait_ms < DLOCK_WAIT_FOREVER) return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    return DLOCK_OK;
}

static dlock_status sem_acquire(dlock_semaphore *s, long permits, long wait_ms)
{
    dlock_status bad = sem_check(permits, wait_ms);
    if (bad != DLOCK_OK) return bad;
    struct sem_attempt a = {s, permits};
    int64_t deadline = dlock__deadline(wait_ms);
    long retry = -1;
    dlock__early early = {0};
    if (wait_ms != 0) (void)dlock__wait_begin(s->base.client, s->base.channel, 0, 1, NULL, &early);
    int result = sem_try(&a, &retry);
    if (dlock__should_wait(result, wait_ms))
        result = dlock__wait_for(s->base.client, DLOCK_STATS_SEMAPHORE, s->base.channel, deadline, sem_try, &a, result,
                                 retry, NULL, NULL, &early);
    else dlock__wait_early_end(&early);
    if (result == DLOCK__BUSY) return dlock__fail(DLOCK_ERR_TIMEOUT, "too few permits became available in time");
    return (dlock_status)result;
}

/* Every call is counted, however it ends (as dlock_lock_acquire). */
dlock_status dlock_semaphore_acquire(dlock_semaphore *s, long permits, long wait_ms)
{
    if (!s) return dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
    int64_t since = dlock__stats_clock();
    dlock_status st = sem_acquire(s, permits, wait_ms);
    dlock__stats_acquired(&s->base.client->stats, DLOCK_STATS_SEMAPHORE, since, st);
    return st;
}

dlock_status dlock_semaphore_release(dlock_semaphore *s, long permits)
{
    if (!s) return dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
    if (permits < 1 || permits > PERMITS_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "permits must be 1 to %ld", PERMITS_MAX);
    sem_call c;
    sem_call_make(s, permits, 1, 0, &c);
    long long available;
    return dlock__eval_int(s->base.client, DLOCK__SCRIPT_SEM_RELEASE, c.nkeys, c.keys, c.nargs, c.args, &available);
}

/* ------------------------------------------------------------------------
 * The asynchronous acquire and release: as lock.c's (see there). Permits
 * have no owner, but each call keeps an operation record for its resends,
 * and the handle's (op.h) allows one asynchronous call at a time.
 * ------------------------------------------------------------------------ */

typedef struct sem_async {
    dlock__await aw; /* first: the wait's state */
    dlock_semaphore *s;
    dlock__thread_rec *rec; /* the handle's record 0: one call at a time */
    long permits;
    int64_t since;
    dlock_semaphore_fn cb;
    void *arg;
} sem_async;

static dlock_status async_attempt(dlock__await *aw)
{
    sem_async *op = (sem_async *)aw;
    sem_call c;
    sem_call_make(op->s, op->permits, 0, op->s->base.number, &c);
    return dlock__async_script(op->s->base.client, DLOCK__SCRIPT_SEM_ACQUIRE, c.nkeys, c.keys, c.nargs, c.args,
                               dlock__await_reply, op);
}

static int async_parse(dlock__await *aw, const redisReply *r, long *retry_ms)
{
    (void)aw;
    *retry_ms = -1;
    if (r->type != REDIS_REPLY_INTEGER)
        return dlock__fail(DLOCK_ERR_REDIS, "script: unexpected reply type %d", r->type);
    return r->integer == 1 ? DLOCK_OK : DLOCK__BUSY;
}

/* The end of either call: the callback, with the thread's last error set. */
static void async_done(sem_async *op, dlock_status st)
{
    dlock_client *c = op->s->base.client;
    dlock_semaphore *s = op->s;
    dlock__thread_rec *rec = op->rec;
    dlock_semaphore_fn cb = op->cb;
    void *arg = op->arg;
    free(op);
    dlock__handle_async_done(rec);
    cb(s, st, arg);
    dlock__async_end(&c->async);
}

static void acquire_done(dlock__await *aw, int result)
{
    sem_async *op = (sem_async *)aw;
    dlock_status st = (dlock_status)result;
    if (result == DLOCK__BUSY) st = dlock__fail(DLOCK_ERR_TIMEOUT, "too few permits became available in time");
    dlock__stats_acquired(&op->s->base.client->stats, DLOCK_STATS_SEMAPHORE, op->since, st);
    async_done(op, st);
}

static const dlock__await_ops acquire_ops = {async_attempt, async_parse, acquire_done};

static void on_release_reply(dlock_status st, redisReply *r, void *arg)
{
    long long released;
    async_done(arg, dlock__async_int(st, r, &released));
}

/* Claim the handle for one asynchronous call and make its state. */
static dlock_status async_begin(dlock_semaphore *s, long permits, dlock_semaphore_fn cb, void *arg, sem_async **out)
{
    dlock__thread_rec *rec;
    dlock_status st;
    sem_async *op = *out = dlock__handle_async_op(&s->base, sizeof *op, &rec, &st);
    if (!op) return st;
    op->s = s;
    op->rec = rec;
    op->permits = permits;
    op->cb = cb;
    op->arg = arg;
    return DLOCK_OK;
}

/* Undo async_begin() for a call that was not sent. */
static dlock_status async_abandon(sem_async *op, dlock_status st)
{
    dlock__handle *h = &op->s->base;
    dlock__thread_rec *rec = op->rec;
    free(op);
    dlock__handle_async_abandon(h, rec);
    return st;
}

dlock_status dlock_semaphore_acquire_async(dlock_semaphore *s, long permits, long wait_ms, dlock_semaphore_fn cb,
                                           void *arg)
{
    if (!s || !cb) return dlock__fail(DLOCK_ERR_INVALID, "semaphore or callback is NULL");
    dlock_status st = sem_check(permits, wait_ms);
    sem_async *op;
    if (st == DLOCK_OK) st = async_begin(s, permits, cb, arg, &op);
    if (st != DLOCK_OK) return st;
    op->since = dlock__stats_clock();
    st = dlock__await_start(&op->aw, &acquire_ops, s->base.client, DLOCK_STATS_SEMAPHORE, s->base.channel, wait_ms,
                            DLOCK__AWAIT_IN_LINE, NULL);
    return st == DLOCK_OK ? st : async_abandon(op, st);
}

dlock_status dlock_semaphore_release_async(dlock_semaphore *s, long permits, dlock_semaphore_fn cb, void *arg)
{
    if (!s || !cb) return dlock__fail(DLOCK_ERR_INVALID, "semaphore or callback is NULL");
    if (permits < 1 || permits > PERMITS_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "permits must be 1 to %ld", PERMITS_MAX);
    sem_async *op;
    dlock_status st = async_begin(s, permits, cb, arg, &op);
    if (st != DLOCK_OK) return st;
    sem_call c;
    sem_call_make(s, permits, 1, s->base.number, &c);
    st = dlock__async_script(s->base.client, DLOCK__SCRIPT_SEM_RELEASE, c.nkeys, c.keys, c.nargs, c.args,
                             on_release_reply, op);
    return st == DLOCK_OK ? st : async_abandon(op, st);
}

dlock_status dlock_semaphore_available(dlock_semaphore *s, long *available)
{
    if (!s || !available) return dlock__fail(DLOCK_ERR_INVALID, "semaphore or output is NULL");
    const char *argv[2] = {"GET", s->base.key};
    redisReply *r;
    dlock_status st = dlock__topo_command(s->base.client->topo, s->base.key, 2, argv, NULL, &r, NULL);
    if (st != DLOCK_OK) return st;
    long size = atomic_load(&s->size);
    if (r->type == REDIS_REPLY_NIL) *available = size > 0 ? size : 0; /* gone idle: as sem_acquire.lua remakes it */
    else if (r->type == REDIS_REPLY_STRING) *available = strtol(r->str, NULL, 10);
    else st = dlock__reply_error(r, "GET");
    freeReplyObject(r);
    return st;
}
