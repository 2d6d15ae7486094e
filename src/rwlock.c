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

struct rw_attempt {
    rw_thread *t;
    dlock_rw_mode mode;
    long lease;
    uint64_t token;
    int64_t sent; /* when the last attempt was sent */
};

/* One run of rw_acquire.lua: DLOCK_OK, DLOCK__BUSY, DLOCK_ERR_DEADLOCK or a
 * failure. */
static int rw_try(void *ctx, long *retry_ms)
{
    struct rw_attempt *a = ctx;
    dlock_rwlock *rw = a->t->rw;
    char lease[24], count[24], floor[24];
    snprintf(lease, sizeof lease, "%ld", a->lease);
    snprintf(count, sizeof count, "%ld", a->t->hold[a->mode].held.count);
    dlock__fence_floor_arg(&rw->base.client->fences, rw->base.fence, atomic_load(&rw->base.floor), floor);
    const char *keys[2] = {rw->base.key, rw->base.fence};
    const char *args[5] = {a->t->rec.owner, lease, count, mode_name[a->mode], floor};
    redisReply *r;
    a->sent = dlock__mono_ms(); /* a lease it sets starts no earlier */
    dlock_status st = dlock__eval(rw->base.client, DLOCK__SCRIPT_RW_ACQUIRE, 2, keys, 5, args, &r, NULL);
    if (st != DLOCK_OK) return st;
    int result;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER) {
        result = dlock__fail(DLOCK_ERR_REDIS, "rwlock acquire: unexpected reply");
    } else if (r->element[0]->integer == -1) {
        result = dlock__fail(DLOCK_ERR_DEADLOCK,
                            "read-to-write upgrade refused: release the read hold first");
    } else if (r->elements < 2 || r->element[1]->type != REDIS_REPLY_INTEGER) {
        result = dlock__fail(DLOCK_ERR_REDIS, "rwlock acquire: unexpected reply");
    } else if (r->element[0]->integer == 0) {
        long ms = (long)r->element[1]->integer;
        *retry_ms = ms == -2 ? 0 : ms;
        result = DLOCK__BUSY;
    } else {
        a->token = (uint64_t)r->element[1]->integer;
        dlock__fence_note(&rw->base.client->fences, rw->base.fence, a->token);
        result = DLOCK_OK;
    }
    freeReplyObject(r);
    return result;
}

static dlock_status rw_acquire(dlock_rwlock *rw, dlock_rw_mode mode, long wait_ms, long lease_ms, uint64_t *token)
{
    if (wait_ms < DLOCK_WAIT_FOREVER)
        return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    dlock_status bad = dlock__check_lease(lease_ms, 3, 1);
    if (bad != DLOCK_OK) return bad;
    rw_thread *t = thread_record(rw, 1);
    if (!t) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    rw_hold *h = &t->hold[mode];
    if (h->held.count > 0 && atomic_load(&h->held.lost))
        return dlock__fail(DLOCK_ERR_LOST, "the %s hold was lost while held; release it first",
                          mode_name[mode]);
    /* Refuse the upgrade here too: no need to ask the server. */
    if (mode == DLOCK_WRITE && t->hold[DLOCK_WRITE].held.count == 0 && t->hold[DLOCK_READ].held.count > 0)
        return dlock__fail(DLOCK_ERR_DEADLOCK, "read-to-write upgrade refused: release the read hold first");

    int watchdog = lease_ms == DLOCK_LEASE_WATCHDOG || h->held.renewed;
    struct rw_attempt a = {t, mode, watchdog ? rw->base.client->watchdog_lease_ms : lease_ms, 0, 0};
    int64_t deadline = dlock__deadline(wait_ms);
    long retry = -1;
    long before = h->held.count;
    int result = rw_try(&a, &retry);
    if (dlock__should_wait(result, wait_ms))
        result =
            dlock__wait_for(rw->base.client, mode_kind[mode], rw->base.channel, deadline, rw_try, &a, result, retry);
    if (result == DLOCK__BUSY)
        return dlock__fail(DLOCK_ERR_TIMEOUT, "the %s hold was not free in time", mode_name[mode]);
    if (result != DLOCK_OK) return (dlock_status)result;

    h->held.count = before + 1;
    if (mode == DLOCK_WRITE) t->token = a.token;
    if (dlock__held_begin(rw->base.client, &h->held, before == 0, watchdog, a.lease, a.sent) != DLOCK_OK) {
        dlock_rwlock_release(rw, mode);
        return dlock__fail(DLOCK_ERR_SYS, "cannot start the watchdog thread");
    }
    if (token) *token = a.token;
    return DLOCK_OK;
}

/* Every call is counted, however it ends (as dlock_lock_acquire). */
dlock_status dlock_rwlock_acquire(dlock_rwlock *rw, dlock_rw_mode mode, long wait_ms, long lease_ms,
                                  uint64_t *token)
{
    if (!rw) return dlock__fail(DLOCK_ERR_INVALID, "rwlock is NULL");
    if (mode != DLOCK_READ && mode != DLOCK_WRITE) return dlock__fail(DLOCK_ERR_INVALID, "bad mode");
    int64_t since = dlock__stats_clock();
    dlock_status st = rw_acquire(rw, mode, wait_ms, lease_ms, token);
    dlock__stats_acquired(&rw->base.client->stats, mode_kind[mode], since, st);
    return st;
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
    char lease[24], count[24];
    snprintf(lease, sizeof lease, "%ld", h->held.lease_ms);
    snprintf(count, sizeof count, "%ld", h->held.count);
    const char *keys[2] = {rw->base.key, rw->base.channel};
    const char *args[5] = {t->rec.owner, lease, count, mode_name[mode], rw->base.client->publish};
    redisReply *r;
    int retried;
    dlock_status st = dlock__eval(c, DLOCK__SCRIPT_RW_RELEASE, 2, keys, 5, args, &r, &retried);
    if (st != DLOCK_OK) {
        dlock__held_release_failed(c, &h->held);
        return st;
    }
    if (r->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return dlock__fail(DLOCK_ERR_REDIS, "rwlock release: unexpected reply");
    }
    long left = (long)r->integer;
    freeReplyObject(r);
    if (dlock__held_release_done(c, &h->held, left, retried))
        return dlock__fail(DLOCK_ERR_LOST, "the %s hold expired before release", mode_name[mode]);
    return DLOCK_OK;
}

int dlock_rwlock_lost(dlock_rwlock *rw, dlock_rw_mode mode)
{
    if (!rw || (mode != DLOCK_READ && mode != DLOCK_WRITE)) return 0;
    rw_thread *t = thread_record(rw, 0);
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
    if (st == DLOCK_OK) st = dlock__force_unlock_hash(client, h.key, h.channel, "*", was_held);
    dlock__handle_destroy(&h, NULL);
    return st;
}
