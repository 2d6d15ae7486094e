/*
 * The read-write lock. Layout and rules are in rw_acquire.lua; this file
 * keeps each thread's view of its holds (one record per mode: count,
 * lease, watchdog entry, lost flag), in the same way lock.c does for the
 * exclusive lock, and runs the shared wait loop.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "handle.h"
#include "lock.h"
#include "util.h"
#include "wait.h"

static const dlock__handle_keys rw_keys = {":rw", ":rw:fence", ":rw:ch"};

struct rw_thread;

/* One thread's hold of one mode. */
typedef struct rw_hold {
    dlock__held held; /* first, so the watchdog's entry leads back here */
    struct rw_thread *t;
    dlock_rw_mode mode;
} rw_hold;

typedef struct rw_thread {
    dlock__thread_rec rec; /* first: the handle's record */
    struct dlock_rwlock *rw;
    uint64_t token;  /* of the write hold */
    rw_hold hold[2]; /* indexed by dlock_rw_mode */
} rw_thread;

struct dlock_rwlock {
    dlock__handle base; /* first: client, name, keys, threads, callback, floor (write holds) */
};

static const char *const mode_name[2] = {"read", "write"};
static const dlock_stats_kind mode_kind[2] = {DLOCK_STATS_READ, DLOCK_STATS_WRITE};
static const dlock__script_id mode_renew[2] = {DLOCK__SCRIPT_RW_RENEW_READ, DLOCK__SCRIPT_RW_RENEW_WRITE};

static void hold_lost(dlock__wd_entry *e);

/* A thread's first use of the handle: a hold record per mode. */
static int thread_init(dlock__handle *base, dlock__thread_rec *rec)
{
    rw_thread *t = (rw_thread *)rec;
    t->rw = (dlock_rwlock *)base;
    for (int m = 0; m < 2; m++) {
        rw_hold *h = &t->hold[m];
        h->t = t;
        h->mode = (dlock_rw_mode)m;
        h->held.wd.script = mode_renew[m];
        h->held.wd.kind = mode_kind[m];
        h->held.wd.key = base->key;
        h->held.wd.owner = rec->owner;
        h->held.wd.on_lost = hold_lost;
    }
    return 0;
}

static void thread_drop(dlock__handle *base, dlock__thread_rec *rec)
{
    rw_thread *t = (rw_thread *)rec;
    for (int m = 0; m < 2; m++)
        if (t->hold[m].held.renewed) dlock__wd_remove(base->client->wd, &t->hold[m].held.wd);
}

dlock_status dlock_rwlock_new(dlock_client *client, const char *name, dlock_rwlock **out)
{
    dlock__handle *h = NULL;
    dlock_status st = dlock__handle_new(sizeof(dlock_rwlock), client, name, &rw_keys, out ? &h : NULL);
    if (out) *out = (dlock_rwlock *)h;
    return st;
}

void dlock_rwlock_free(dlock_rwlock *rw)
{
    if (!rw) return;
    dlock__handle_destroy(&rw->base, thread_drop);
    free(rw);
}

/* The calling thread's record; made on first use when `create`. */
static rw_thread *thread_record(dlock_rwlock *rw, int create)
{
    return (rw_thread *)dlock__handle_thread(&rw->base, sizeof(rw_thread), create, thread_init);
}

/* Watchdog thread: a renewed hold is gone. */
static void hold_lost(dlock__wd_entry *e)
{
    rw_hold *h = (rw_hold *)e;
    dlock_rwlock *rw = h->t->rw;
    dlock__held_lose(rw->base.client, &h->held);
    void *arg;
    dlock_rw_lost_fn fn = (dlock_rw_lost_fn)dlock__handle_callback(&rw->base, &arg);
    if (fn) fn(rw, h->mode, h->mode == DLOCK_WRITE ? h->t->token : 0, arg);
}

/* The keys and arguments of one run of rw_acquire.lua, shared by the
 * synchronous and the asynchronous acquire. */
typedef struct rw_call {
    const char *keys[2], *args[5];
    char lease[24], count[24], floor[24];
} rw_call;

static void rw_call_make(dlock_rwlock *rw, rw_thread *t, dlock_rw_mode mode, long lease, rw_call *c)
{
    dlock__fmt_ll(lease, c->lease);
    dlock__fmt_ll(t->hold[mode].held.count, c->count);
    dlock__fence_floor_arg(&rw->base.client->fences, rw->base.fence, atomic_load(&rw->base.floor), c->floor);
    c->keys[0] = rw->base.key;
    c->keys[1] = rw->base.fence;
    const char *args[5] = {t->rec.owner, c->lease, c->count, mode_name[mode], c->floor};
    memcpy(c->args, args, sizeof args);
}

/* What rw_acquire.lua answered: DLOCK_OK (*token), DLOCK__BUSY
 * (*retry_ms), DLOCK_ERR_DEADLOCK or a failure. */
static int rw_reply(dlock_rwlock *rw, const redisReply *r, long *retry_ms, uint64_t *token)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER)
        return dlock__fail(DLOCK_ERR_REDIS, "rwlock acquire: unexpected reply");
    if (r->element[0]->integer == -1)
        return dlock__fail(DLOCK_ERR_DEADLOCK, "read-to-write upgrade refused: release the read hold first");
    if (r->elements < 2 || r->element[1]->type != REDIS_REPLY_INTEGER)
        return dlock__fail(DLOCK_ERR_REDIS, "rwlock acquire: unexpected reply");
    if (r->element[0]->integer == 0) {
        *retry_ms = dlock__retry_after((long)r->element[1]->integer);
        return DLOCK__BUSY;
    }
    *token = (uint64_t)r->element[1]->integer;
    dlock__fence_note(&rw->base.client->fences, rw->base.fence, *token);
    return DLOCK_OK;
}

struct rw_attempt {
    rw_thread *t;
    dlock_rw_mode mode;
    long lease;
    uint64_t token;
    int64_t sent; /* when the last attempt was sent */
};

/* One run of rw_acquire.lua: rw_reply()'s results. */
static int rw_try(void *ctx, long *retry_ms)
{
    struct rw_attempt *a = ctx;
    dlock_rwlock *rw = a->t->rw;
    rw_call c;
    rw_call_make(rw, a->t, a->mode, a->lease, &c);
    redisReply *r;
    a->sent = dlock__mono_ms(); /* a lease it sets starts no earlier */
    dlock_status st = dlock__eval(rw->base.client, DLOCK__SCRIPT_RW_ACQUIRE, 2, c.keys, 5, c.args, &r, NULL);
    if (st != DLOCK_OK) return st;
    int result = rw_reply(rw, r, retry_ms, &a->token);
    freeReplyObject(r);
    return result;
}

/* Checks every acquire makes before it sends anything. */
static dlock_status rw_check(rw_thread *t, dlock_rw_mode mode)
{
    rw_hold *h = &t->hold[mode];
    if (h->held.count > 0 && atomic_load(&h->held.lost))
        return dlock__fail(DLOCK_ERR_LOST, "the %s hold was lost while held; release it first", mode_name[mode]);
    /* Refuse the upgrade here too: no need to ask the server. */
    if (mode == DLOCK_WRITE && t->hold[DLOCK_WRITE].held.count == 0 && t->hold[DLOCK_READ].held.count > 0)
        return dlock__fail(DLOCK_ERR_DEADLOCK, "read-to-write upgrade refused: release the read hold first");
    return DLOCK_OK;
}

static dlock_status rw_acquire(dlock_rwlock *rw, dlock_rw_mode mode, long wait_ms, long lease_ms, uint64_t *token)
{
    if (wait_ms < DLOCK_WAIT_FOREVER) return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    dlock_status bad = dlock__check_lease(lease_ms, 3, 1);
    if (bad != DLOCK_OK) return bad;
    rw_thread *t = thread_record(rw, 1);
    if (!t) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    rw_hold *h = &t->hold[mode];
    dlock_status bad_state = rw_check(t, mode);
    if (bad_state != DLOCK_OK) return bad_state;

    int watchdog = lease_ms == DLOCK_LEASE_WATCHDOG || h->held.renewed;
    struct rw_attempt a = {t, mode, watchdog ? rw->base.client->watchdog_lease_ms : lease_ms, 0, 0};
    int64_t deadline = dlock__deadline(wait_ms);
    long retry = -1;
    long before = h->held.count;
    dlock__early early = {0};
    if (wait_ms != 0 && before == 0) (void)dlock__wait_begin(rw->base.client, rw->base.channel, 0, 1, NULL, &early);
    int result = rw_try(&a, &retry);
    if (dlock__should_wait(result, wait_ms))
        result = dlock__wait_for(rw->base.client, mode_kind[mode], rw->base.channel, deadline, rw_try, &a, result,
                                 retry, NULL, NULL, &early);
    else dlock__wait_early_end(&early);
    if (result == DLOCK__BUSY)
        return dlock__fail(DLOCK_ERR_TIMEOUT, "the %s hold was not free in time", mode_name[mode]);
    if (result != DLOCK_OK) return (dlock_status)result;

    h->held.count = before + 1;
    if (mode == DLOCK_WRITE) t->token = a.token;
    dlock_status begun = dlock__held_begin(rw->base.client, &h->held, before == 0, watchdog, a.lease, a.sent);
    if (begun != DLOCK_OK) {
        char why[512];
        snprintf(why, sizeof why, "the %s hold: %s", mode_name[mode], dlock_last_error());
        dlock_rwlock_release(rw, mode);
        return dlock__fail(begun, "%s", why);
    }
    if (token) *token = a.token;
    return DLOCK_OK;
}

/* Every call is counted, however it ends (as dlock_lock_acquire). */
dlock_status dlock_rwlock_acquire(dlock_rwlock *rw, dlock_rw_mode mode, long wait_ms, long lease_ms, uint64_t *token)
{
    if (!rw) return dlock__fail(DLOCK_ERR_INVALID, "rwlock is NULL");
    if (mode != DLOCK_READ && mode != DLOCK_WRITE) return dlock__fail(DLOCK_ERR_INVALID, "bad mode");
    int64_t since = dlock__stats_clock();
    dlock_status st = rw_acquire(rw, mode, wait_ms, lease_ms, token);
    dlock__stats_acquired(&rw->base.client->stats, mode_kind[mode], since, st);
    return st;
}

/* The keys and arguments of one run of rw_release.lua. */
typedef struct rel_call {
    const char *keys[2], *args[5];
    char lease[24], count[24];
} rel_call;

static void rel_call_make(dlock_rwlock *rw, rw_thread *t, dlock_rw_mode mode, rel_call *c)
{
    rw_hold *h = &t->hold[mode];
    dlock__fmt_ll(h->held.lease_ms, c->lease);
    dlock__fmt_ll(h->held.count, c->count);
    c->keys[0] = rw->base.key;
    c->keys[1] = rw->base.channel;
    const char *args[5] = {t->rec.owner, c->lease, c->count, mode_name[mode], rw->base.client->publish};
    memcpy(c->args, args, sizeof args);
}

/* What rw_release.lua answered, from a send that was `retried`. */
static dlock_status rel_reply(dlock_rwlock *rw, rw_hold *h, const redisReply *r, int retried)
{
    if (r->type != REDIS_REPLY_INTEGER) return dlock__fail(DLOCK_ERR_REDIS, "rwlock release: unexpected reply");
    if (dlock__held_release_done(rw->base.client, &h->held, (long)r->integer, retried))
        return dlock__fail(DLOCK_ERR_LOST, "the %s hold expired before release",
                           h->mode == DLOCK_READ ? "read" : "write");
    return DLOCK_OK;
}

dlock_status dlock_rwlock_release(dlock_rwlock *rw, dlock_rw_mode mode)
{
    if (!rw) return dlock__fail(DLOCK_ERR_INVALID, "rwlock is NULL");
    if (mode != DLOCK_READ && mode != DLOCK_WRITE) return dlock__fail(DLOCK_ERR_INVALID, "bad mode");
    rw_thread *t = thread_record(rw, 0);
    rw_hold *h = t ? &t->hold[mode] : NULL;
    if (!h || h->held.count == 0)
        return dlock__fail(DLOCK_ERR_NOT_OWNER, "this thread holds no %s hold", mode_name[mode]);
    dlock_client *c = rw->base.client;
    if (dlock__held_release_begin(c, &h->held))
        return dlock__fail(DLOCK_ERR_LOST, "the %s hold was lost while held", mode_name[mode]);
    rel_call rc;
    rel_call_make(rw, t, mode, &rc);
    redisReply *r;
    int retried;
    dlock_status st = dlock__eval(c, DLOCK__SCRIPT_RW_RELEASE, 2, rc.keys, 5, rc.args, &r, &retried);
    if (st != DLOCK_OK) {
        dlock__held_release_failed(c, &h->held);
        return st;
    }
    st = rel_reply(rw, h, r, retried);
    freeReplyObject(r);
    return st;
}

/* ------------------------------------------------------------------------
 * The asynchronous acquire and release: as lock.c's (see there), on the
 * handle's record 0, with wait.c's dlock__await between attempts.
 * ------------------------------------------------------------------------ */

typedef struct rw_async {
    dlock__await aw; /* first: the wait's state */
    dlock_rwlock *rw;
    rw_thread *t;
    dlock_rw_mode mode;
    long lease, before;
    int watchdog;
    uint64_t token;
    int64_t sent, since;
    dlock_rw_acquired_fn acquired;
    dlock_rw_released_fn released;
    void *arg;
} rw_async;

static rw_thread *async_record(dlock_rwlock *rw, int create)
{
    return (rw_thread *)dlock__handle_record(&rw->base, 0, sizeof(rw_thread), create, thread_init);
}

static dlock_status async_attempt(dlock__await *aw)
{
    rw_async *op = (rw_async *)aw;
    rw_call c;
    rw_call_make(op->rw, op->t, op->mode, op->lease, &c);
    op->sent = dlock__mono_ms();
    return dlock__async_script(op->rw->base.client, DLOCK__SCRIPT_RW_ACQUIRE, 2, c.keys, 5, c.args, dlock__await_reply,
                               op);
}

static int async_parse(dlock__await *aw, const redisReply *r, long *retry_ms)
{
    rw_async *op = (rw_async *)aw;
    return rw_reply(op->rw, r, retry_ms, &op->token);
}

static void acquire_done(dlock__await *aw, int result)
{
    rw_async *op = (rw_async *)aw;
    dlock_rwlock *rw = op->rw;
    rw_thread *t = op->t;
    rw_hold *h = &t->hold[op->mode];
    dlock_client *c = rw->base.client;
    dlock_status st = (dlock_status)result;
    if (result == DLOCK_OK) {
        h->held.count = op->before + 1;
        if (op->mode == DLOCK_WRITE) t->token = op->token;
        dlock_status begun = dlock__held_begin(c, &h->held, op->before == 0, op->watchdog, op->lease, op->sent);
        if (begun != DLOCK_OK) {
            char why[512];
            snprintf(why, sizeof why, "the %s hold: %s", mode_name[op->mode], dlock_last_error());
            rel_call rc;
            rel_call_make(rw, t, op->mode, &rc);
            dlock__async_script(c, DLOCK__SCRIPT_RW_RELEASE, 2, rc.keys, 5, rc.args, dlock__async_ignore, NULL);
            h->held.count = op->before;
            st = dlock__fail(begun, "%s", why);
        }
    } else if (result == DLOCK__BUSY) {
        st = dlock__fail(DLOCK_ERR_TIMEOUT, "the %s hold was not free in time", mode_name[op->mode]);
    }
    dlock__stats_acquired(&c->stats, mode_kind[op->mode], op->since, st);
    uint64_t token = st == DLOCK_OK ? op->token : 0;
    dlock_rw_mode mode = op->mode;
    dlock_rw_acquired_fn cb = op->acquired;
    void *arg = op->arg;
    free(op);
    dlock__handle_async_done(&t->rec);
    cb(rw, mode, st, token, arg);
    dlock__async_end(&c->async);
}

static const dlock__await_ops acquire_ops = {async_attempt, async_parse, acquire_done};

dlock_status dlock_rwlock_acquire_async(dlock_rwlock *rw, dlock_rw_mode mode, long wait_ms, long lease_ms,
                                        dlock_rw_acquired_fn cb, void *arg)
{
    if (!rw || !cb) return dlock__fail(DLOCK_ERR_INVALID, "rwlock or callback is NULL");
    if (mode != DLOCK_READ && mode != DLOCK_WRITE) return dlock__fail(DLOCK_ERR_INVALID, "bad mode");
    if (wait_ms < DLOCK_WAIT_FOREVER) return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    dlock_status st = dlock__check_lease(lease_ms, 3, 1);
    if (st != DLOCK_OK) return st;
    rw_thread *t = async_record(rw, 1);
    if (!t) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock_client *c = rw->base.client;
    if ((st = dlock__handle_async_claim(&rw->base, &t->rec)) != DLOCK_OK) return st;
    rw_async *op = NULL;
    if ((st = rw_check(t, mode)) == DLOCK_OK && !(op = calloc(1, sizeof *op)))
        st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    if (st == DLOCK_OK) {
        rw_hold *h = &t->hold[mode];
        op->rw = rw;
        op->t = t;
        op->mode = mode;
        op->watchdog = lease_ms == DLOCK_LEASE_WATCHDOG || h->held.renewed;
        op->lease = op->watchdog ? c->watchdog_lease_ms : lease_ms;
        op->before = h->held.count;
        op->since = dlock__stats_clock();
        op->acquired = cb;
        op->arg = arg;
        st = dlock__await_start(&op->aw, &acquire_ops, c, mode_kind[mode], rw->base.channel, wait_ms,
                                op->before == 0 ? DLOCK__AWAIT_IN_LINE : DLOCK__AWAIT_TRY, NULL);
        if (st == DLOCK_OK) return DLOCK_OK;
    }
    free(op);
    dlock__handle_async_done(&t->rec);
    dlock__async_end(&c->async);
    return st;
}

static void on_release_reply(dlock_status st, redisReply *r, void *arg)
{
    rw_async *op = arg;
    dlock_rwlock *rw = op->rw;
    rw_thread *t = op->t;
    rw_hold *h = &t->hold[op->mode];
    dlock_client *c = rw->base.client;
    if (st != DLOCK_OK) dlock__held_release_failed(c, &h->held);
    else st = rel_reply(rw, h, r, dlock__async_resent());
    if (r) freeReplyObject(r);
    dlock_rw_mode mode = op->mode;
    dlock_rw_released_fn cb = op->released;
    void *cb_arg = op->arg;
    free(op);
    dlock__handle_async_done(&t->rec);
    cb(rw, mode, st, cb_arg);
    dlock__async_end(&c->async);
}

dlock_status dlock_rwlock_release_async(dlock_rwlock *rw, dlock_rw_mode mode, dlock_rw_released_fn cb, void *arg)
{
    if (!rw || !cb) return dlock__fail(DLOCK_ERR_INVALID, "rwlock or callback is NULL");
    if (mode != DLOCK_READ && mode != DLOCK_WRITE) return dlock__fail(DLOCK_ERR_INVALID, "bad mode");
    rw_thread *t = async_record(rw, 0);
    rw_hold *h = t ? &t->hold[mode] : NULL;
    if (!h || h->held.count == 0)
        return dlock__fail(DLOCK_ERR_NOT_OWNER, "this handle holds no %s hold taken asynchronously", mode_name[mode]);
    dlock_client *c = rw->base.client;
    dlock_status st = dlock__handle_async_claim(&rw->base, &t->rec);
    if (st != DLOCK_OK) return st;
    rw_async *op = calloc(1, sizeof *op);
    if (!op) {
        st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    } else if (dlock__held_release_begin(c, &h->held)) {
        st = dlock__fail(DLOCK_ERR_LOST, "the %s hold was lost while held", mode_name[mode]);
    } else {
        op->rw = rw;
        op->t = t;
        op->mode = mode;
        op->released = cb;
        op->arg = arg;
        rel_call rc;
        rel_call_make(rw, t, mode, &rc);
        st = dlock__async_script(c, DLOCK__SCRIPT_RW_RELEASE, 2, rc.keys, 5, rc.args, on_release_reply, op);
        if (st == DLOCK_OK) return DLOCK_OK;
        dlock__held_release_failed(c, &h->held);
    }
    free(op);
    dlock__handle_async_done(&t->rec);
    dlock__async_end(&c->async);
    return st;
}

/* The calling thread's hold of `mode`, or when it has none, the handle's
 * asynchronous one (as dlock_lock_lost()). */
int dlock_rwlock_lost(dlock_rwlock *rw, dlock_rw_mode mode)
{
    if (!rw || (mode != DLOCK_READ && mode != DLOCK_WRITE)) return 0;
    rw_thread *t = thread_record(rw, 0);
    if (t && (t->hold[mode].held.count > 0 || atomic_load(&t->hold[mode].held.lost)))
        return dlock__held_lost(&t->hold[mode].held);
    t = async_record(rw, 0);
    return t && dlock__held_lost(&t->hold[mode].held);
}

void dlock_rwlock_set_fence_floor(dlock_rwlock *rw, uint64_t floor)
{
    if (!rw) return;
    dlock__atomic_max(&rw->base.floor, floor);
}

void dlock_rwlock_on_lost(dlock_rwlock *rw, dlock_rw_lost_fn fn, void *arg)
{
    if (rw) dlock__handle_on_lost(&rw->base, (dlock__handle_fn)fn, arg);
}

/* The admin view of a name's read-write lock, for operators and `dlock
 * status`: one read-only script, so writer, readers and TTL agree. */
dlock_status dlock_rwlock_inspect(dlock_client *client, const char *name, dlock_rwlock_info *info)
{
    if (!client || !info) return dlock__fail(DLOCK_ERR_INVALID, "client or info is NULL");
    memset(info, 0, sizeof *info);
    info->ttl_ms = -1;
    dlock__handle h;
    redisReply *r;
    dlock_status st = dlock__handle_init(&h, client, name, &rw_keys);
    if (st == DLOCK_OK) {
        const char *keys[2] = {h.key, h.fence};
        st = dlock__eval(client, DLOCK__SCRIPT_RW_INSPECT, 2, keys, 0, NULL, &r, NULL);
    }
    dlock__handle_destroy(&h, NULL);
    if (st != DLOCK_OK) return st;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 5 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_INTEGER || r->element[2]->type != REDIS_REPLY_INTEGER ||
        r->element[3]->type != REDIS_REPLY_INTEGER || r->element[4]->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return dlock__fail(DLOCK_ERR_REDIS, "rwlock inspect: unexpected reply");
    }
    snprintf(info->writer, sizeof info->writer, "%s", r->element[0]->str);
    info->write_count = (long)r->element[1]->integer;
    info->readers = (long)r->element[2]->integer;
    info->held = info->writer[0] != '\0' || info->readers > 0;
    if (info->held) info->ttl_ms = (long)r->element[3]->integer;
    info->last_token = strtoull(r->element[4]->str, NULL, 10);
    freeReplyObject(r);
    return DLOCK_OK;
}

/* The same script as dlock_lock_force_unlock(), on the read-write lock's
 * hash, waking every waiter: with the hash gone, all readers may go. */
dlock_status dlock_rwlock_force_unlock(dlock_client *client, const char *name, int *was_held)
{
    if (was_held) *was_held = 0;
    dlock__handle h;
    dlock_status st = dlock__handle_init(&h, client, name, &rw_keys);
    if (st == DLOCK_OK) st = dlock__force_unlock_hash(client, h.key, h.channel, NULL, "*", was_held);
    dlock__handle_destroy(&h, NULL);
    return st;
}
