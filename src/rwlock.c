/*
 * The read-write lock. Layout and rules are in rw_acquire.lua; this file
 * keeps each thread's view of its holds (one record per mode: count,
 * lease, watchdog entry, lost flag), in the same way lock.c does for the
 * exclusive lock, and runs the shared wait loop.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "lock.h"
#include "util.h"
#include "wait.h"
#include "watchdog.h"

struct rw_thread;

/* One thread's hold of one mode. */
typedef struct rw_hold {
    dlock_wd_entry wd; /* first, so the watchdog's entry leads back here */
    struct rw_thread *t;
    dlock_rw_mode mode;
    long count;
    long lease_ms;
    int renewed;
    int64_t trusted_until; /* explicit lease: believed until then (monotonic); 0 with the watchdog */
    int64_t held_since;    /* when the acquire that began the hold returned (dlock_stats_clock) */
    atomic_int lost;
} rw_hold;

typedef struct rw_thread {
    struct dlock_rwlock *rw;
    unsigned long thread;
    char owner[64];
    uint64_t token; /* of the write hold */
    rw_hold hold[2]; /* indexed by dlock_rw_mode */
    struct rw_thread *next;
} rw_thread;

struct dlock_rwlock {
    dlock_client *client;
    unsigned long number; /* in owner strings: two handles are two owners (see lock.c) */
    char *key, *fence, *channel;
    pthread_mutex_t mu; /* guards threads, fn, arg */
    atomic_ullong floor; /* fencing floor the caller set (write holds) */
    rw_thread *threads;
    dlock_rw_lost_fn fn;
    void *arg;
};

static const char *const mode_name[2] = {"read", "write"};
static const dlock_stats_kind mode_kind[2] = {DLOCK_STATS_READ, DLOCK_STATS_WRITE};

dlock_status dlock_rwlock_new(dlock_client *client, const char *name, dlock_rwlock **out)
{
    if (!out) return dlock_fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    if (!client) return dlock_fail(DLOCK_ERR_INVALID, "client is NULL");
    dlock_status st = dlock_check_name(name);
    if (st != DLOCK_OK) return st;
    dlock_rwlock *rw = calloc(1, sizeof *rw);
    if (rw) {
        static atomic_ulong handles;
        rw->client = client;
        rw->number = atomic_fetch_add(&handles, 1) + 1;
        rw->key = dlock_key(name, ":rw");
        rw->fence = dlock_key(name, ":rw:fence");
        rw->channel = dlock_key(name, ":rw:ch");
        pthread_mutex_init(&rw->mu, NULL);
    }
    if (!rw || !rw->key || !rw->fence || !rw->channel) {
        dlock_rwlock_free(rw);
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    *out = rw;
    return DLOCK_OK;
}

void dlock_rwlock_free(dlock_rwlock *rw)
{
    if (!rw) return;
    rw_thread *t = rw->threads, *next;
    for (; t; t = next) {
        next = t->next;
        for (int m = 0; m < 2; m++)
            if (t->hold[m].renewed) dlock_wd_remove(rw->client->wd, &t->hold[m].wd);
        free(t);
    }
    pthread_mutex_destroy(&rw->mu);
    free(rw->key);
    free(rw->fence);
    free(rw->channel);
    free(rw);
}

/* The calling thread's record; made on first use when `create`. */
static rw_thread *thread_record(dlock_rwlock *rw, int create)
{
    unsigned long me = dlock_thread_number();
    pthread_mutex_lock(&rw->mu);
    rw_thread *t = rw->threads;
    while (t && t->thread != me) t = t->next;
    if (!t && create && (t = calloc(1, sizeof *t)) != NULL) {
        t->rw = rw;
        t->thread = me;
        snprintf(t->owner, sizeof t->owner, "%s:%lu:%lu", rw->client->id, me, rw->number);
        for (int m = 0; m < 2; m++) {
            t->hold[m].t = t;
            t->hold[m].mode = (dlock_rw_mode)m;
        }
        t->next = rw->threads;
        rw->threads = t;
    }
    pthread_mutex_unlock(&rw->mu);
    return t;
}

/* Watchdog thread: a renewed hold is gone. */
static void hold_lost(dlock_wd_entry *e)
{
    rw_hold *h = (rw_hold *)e;
    dlock_rwlock *rw = h->t->rw;
    if (!atomic_exchange(&h->lost, 1)) dlock_stats_lost(&rw->client->stats, mode_kind[h->mode]);
    pthread_mutex_lock(&rw->mu);
    dlock_rw_lost_fn fn = rw->fn;
    void *arg = rw->arg;
    pthread_mutex_unlock(&rw->mu);
    if (fn) fn(rw, h->mode, h->mode == DLOCK_WRITE ? h->t->token : 0, arg);
}

struct rw_attempt {
    rw_thread *t;
    dlock_rw_mode mode;
    long lease;
    uint64_t token;
    int64_t sent; /* when the last attempt was sent */
};

/* One run of rw_acquire.lua: DLOCK_OK, DLOCK_BUSY, DLOCK_ERR_DEADLOCK or a
 * failure. */
static int rw_try(void *ctx, long *retry_ms)
{
    struct rw_attempt *a = ctx;
    dlock_rwlock *rw = a->t->rw;
    char lease[24], count[24], floor[24];
    snprintf(lease, sizeof lease, "%ld", a->lease);
    snprintf(count, sizeof count, "%ld", a->t->hold[a->mode].count);
    dlock_fence_floor_arg(&rw->client->fences, rw->fence, atomic_load(&rw->floor), floor);
    const char *keys[2] = {rw->key, rw->fence};
    const char *args[5] = {a->t->owner, lease, count, mode_name[a->mode], floor};
    redisReply *r;
    a->sent = dlock_mono_ms(); /* a lease it sets starts no earlier */
    dlock_status st = dlock_eval(rw->client, DLOCK_SCRIPT_RW_ACQUIRE, 2, keys, 5, args, &r, NULL);
    if (st != DLOCK_OK) return st;
    int result;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER) {
        result = dlock_fail(DLOCK_ERR_REDIS, "rwlock acquire: unexpected reply");
    } else if (r->element[0]->integer == -1) {
        result = dlock_fail(DLOCK_ERR_DEADLOCK,
                            "read-to-write upgrade refused: release the read hold first");
    } else if (r->elements < 2 || r->element[1]->type != REDIS_REPLY_INTEGER) {
        result = dlock_fail(DLOCK_ERR_REDIS, "rwlock acquire: unexpected reply");
    } else if (r->element[0]->integer == 0) {
        long ms = (long)r->element[1]->integer;
        *retry_ms = ms == -2 ? 0 : ms;
        result = DLOCK_BUSY;
    } else {
        a->token = (uint64_t)r->element[1]->integer;
        dlock_fence_note(&rw->client->fences, rw->fence, a->token);
        result = DLOCK_OK;
    }
    freeReplyObject(r);
    return result;
}

static dlock_status rw_acquire(dlock_rwlock *rw, dlock_rw_mode mode, long wait_ms, long lease_ms, uint64_t *token)
{
    if (wait_ms < DLOCK_WAIT_FOREVER)
        return dlock_fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    dlock_status bad = dlock_check_lease(lease_ms, 3, 1);
    if (bad != DLOCK_OK) return bad;
    rw_thread *t = thread_record(rw, 1);
    if (!t) return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    rw_hold *h = &t->hold[mode];
    if (h->count > 0 && atomic_load(&h->lost))
        return dlock_fail(DLOCK_ERR_LOST, "the %s hold was lost while held; release it first",
                          mode_name[mode]);
    /* Refuse the upgrade here too: no need to ask the server. */
    if (mode == DLOCK_WRITE && t->hold[DLOCK_WRITE].count == 0 && t->hold[DLOCK_READ].count > 0)
        return dlock_fail(DLOCK_ERR_DEADLOCK, "read-to-write upgrade refused: release the read hold first");

    int watchdog = lease_ms == DLOCK_LEASE_WATCHDOG || h->renewed;
    struct rw_attempt a = {t, mode, watchdog ? rw->client->watchdog_lease_ms : lease_ms, 0, 0};
    int64_t deadline = dlock_deadline(wait_ms);
    long retry = -1;
    long before = h->count;
    int result = rw_try(&a, &retry);
    if (dlock_should_wait(result, wait_ms))
        result = dlock_wait_for(rw->client, mode_kind[mode], rw->channel, deadline, rw_try, &a, result, retry);
    if (result == DLOCK_BUSY)
        return dlock_fail(DLOCK_ERR_TIMEOUT, "the %s hold was not free in time", mode_name[mode]);
    if (result != DLOCK_OK) return (dlock_status)result;

    if (before == 0) {
        atomic_store(&h->lost, 0);
        h->held_since = dlock_stats_clock();
    }
    h->count = before + 1;
    h->lease_ms = a.lease;
    h->trusted_until = watchdog ? 0 : a.sent + dlock_lease_trust_ms(a.lease, rw->client->safety_margin_pct);
    if (mode == DLOCK_WRITE) t->token = a.token;
    if (watchdog) {
        struct dlock_watchdog *wd = dlock_client_watchdog(rw->client);
        if (!wd) {
            dlock_rwlock_release(rw, mode);
            return dlock_fail(DLOCK_ERR_SYS, "cannot start the watchdog thread");
        }
        h->wd.script = mode == DLOCK_WRITE ? DLOCK_SCRIPT_RW_RENEW_WRITE : DLOCK_SCRIPT_RW_RENEW_READ;
        h->wd.kind = mode_kind[mode];
        h->wd.key = rw->key;
        h->wd.owner = t->owner;
        h->wd.lease_ms = a.lease;
        h->wd.on_lost = hold_lost;
        dlock_wd_add(wd, &h->wd, a.sent);
        h->renewed = 1;
    }
    if (token) *token = a.token;
    return DLOCK_OK;
}

/* Every call is counted, however it ends (as dlock_lock_acquire). */
dlock_status dlock_rwlock_acquire(dlock_rwlock *rw, dlock_rw_mode mode, long wait_ms, long lease_ms,
                                  uint64_t *token)
{
    if (!rw) return dlock_fail(DLOCK_ERR_INVALID, "rwlock is NULL");
    if (mode != DLOCK_READ && mode != DLOCK_WRITE) return dlock_fail(DLOCK_ERR_INVALID, "bad mode");
    int64_t since = dlock_stats_clock();
    dlock_status st = rw_acquire(rw, mode, wait_ms, lease_ms, token);
    dlock_stats_acquired(&rw->client->stats, mode_kind[mode], since, st);
    return st;
}

static void hold_end(dlock_rwlock *rw, rw_hold *h)
{
    dlock_stats_released(&rw->client->stats, mode_kind[h->mode], h->held_since);
    h->count = 0;
    if (h->renewed) {
        dlock_wd_remove(rw->client->wd, &h->wd);
        h->renewed = 0;
    }
}

dlock_status dlock_rwlock_release(dlock_rwlock *rw, dlock_rw_mode mode)
{
    if (!rw) return dlock_fail(DLOCK_ERR_INVALID, "rwlock is NULL");
    if (mode != DLOCK_READ && mode != DLOCK_WRITE) return dlock_fail(DLOCK_ERR_INVALID, "bad mode");
    rw_thread *t = thread_record(rw, 0);
    rw_hold *h = t ? &t->hold[mode] : NULL;
    if (!h || h->count == 0)
        return dlock_fail(DLOCK_ERR_NOT_OWNER, "this thread holds no %s hold", mode_name[mode]);
    if (atomic_load(&h->lost)) {
        hold_end(rw, h);
        return dlock_fail(DLOCK_ERR_LOST, "the %s hold was lost while held", mode_name[mode]);
    }
    char lease[24], count[24];
    snprintf(lease, sizeof lease, "%ld", h->lease_ms);
    snprintf(count, sizeof count, "%ld", h->count);
    const char *keys[2] = {rw->key, rw->channel};
    const char *args[5] = {t->owner, lease, count, mode_name[mode], rw->client->publish};
    redisReply *r;
    int retried;
    /* The last release deletes the hold; a renewal racing it must not be
     * taken for a loss. */
    int last = h->count == 1 && h->renewed;
    if (last) dlock_wd_releasing(rw->client->wd, &h->wd, 1);
    dlock_status st = dlock_eval(rw->client, DLOCK_SCRIPT_RW_RELEASE, 2, keys, 5, args, &r, &retried);
    if (last && st != DLOCK_OK) dlock_wd_releasing(rw->client->wd, &h->wd, 0);
    if (st != DLOCK_OK) return st;
    if (r->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return dlock_fail(DLOCK_ERR_REDIS, "rwlock release: unexpected reply");
    }
    long left = (long)r->integer;
    freeReplyObject(r);
    if (left < 0 && retried && h->count == 1) left = 0; /* see dlock_lock_release() */
    if (left < 0) {
        if (!atomic_exchange(&h->lost, 1)) dlock_stats_lost(&rw->client->stats, mode_kind[mode]);
        hold_end(rw, h);
        return dlock_fail(DLOCK_ERR_LOST, "the %s hold expired before release", mode_name[mode]);
    }
    if (left == 0) hold_end(rw, h);
    else h->count = left;
    return DLOCK_OK;
}

int dlock_rwlock_lost(dlock_rwlock *rw, dlock_rw_mode mode)
{
    if (!rw || (mode != DLOCK_READ && mode != DLOCK_WRITE)) return 0;
    rw_thread *t = thread_record(rw, 0);
    if (!t) return 0;
    rw_hold *h = &t->hold[mode];
    if (atomic_load(&h->lost)) return 1;
    /* Or the holder's clock, as in dlock_lock_lost(). */
    return h->count > 0 && !dlock_hold_trusted(&h->wd, h->renewed, h->trusted_until);
}

void dlock_rwlock_set_fence_floor(dlock_rwlock *rw, uint64_t floor)
{
    if (!rw) return;
    dlock_atomic_max(&rw->floor, floor);
}

void dlock_rwlock_on_lost(dlock_rwlock *rw, dlock_rw_lost_fn fn, void *arg)
{
    if (!rw) return;
    pthread_mutex_lock(&rw->mu);
    rw->fn = fn;
    rw->arg = arg;
    pthread_mutex_unlock(&rw->mu);
}

/* The admin view of a name's read-write lock, for operators and `dlock
 * status`: one read-only script, so writer, readers and TTL agree. */
dlock_status dlock_rwlock_inspect(dlock_client *client, const char *name, dlock_rwlock_info *info)
{
    if (!client || !info) return dlock_fail(DLOCK_ERR_INVALID, "client or info is NULL");
    memset(info, 0, sizeof *info);
    info->ttl_ms = -1;
    dlock_status st = dlock_check_name(name);
    if (st != DLOCK_OK) return st;
    char *key = dlock_key(name, ":rw"), *fence = dlock_key(name, ":rw:fence");
    if (!key || !fence) {
        free(key);
        free(fence);
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    const char *keys[2] = {key, fence};
    redisReply *r;
    st = dlock_eval(client, DLOCK_SCRIPT_RW_INSPECT, 2, keys, 0, NULL, &r, NULL);
    free(key);
    free(fence);
    if (st != DLOCK_OK) return st;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 5 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_INTEGER || r->element[2]->type != REDIS_REPLY_INTEGER ||
        r->element[3]->type != REDIS_REPLY_INTEGER || r->element[4]->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return dlock_fail(DLOCK_ERR_REDIS, "rwlock inspect: unexpected reply");
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
    if (!client) return dlock_fail(DLOCK_ERR_INVALID, "client is NULL");
    dlock_status st = dlock_check_name(name);
    if (st != DLOCK_OK) return st;
    char *key = dlock_key(name, ":rw"), *channel = dlock_key(name, ":rw:ch");
    if (!key || !channel) {
        free(key);
        free(channel);
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    st = dlock_force_unlock_hash(client, key, channel, "*", was_held);
    free(key);
    free(channel);
    return st;
}
