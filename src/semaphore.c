/*
 * The plain counting semaphore: a counter in Redis, taken and returned by
 * scripts, with waiting woken by the release channel. See dlock.h for when
 * to prefer the permit-expirable kind.
 */
#include <stdio.h>
#include <stdlib.h>

#include "client.h"
#include "handle.h"
#include "op.h"
#include "util.h"
#include "wait.h"

#define PERMITS_MAX 0x7fffffffL

static const dlock__handle_keys sem_keys = {":sem", NULL, ":sem:ch"};

struct dlock_semaphore {
    dlock__handle base; /* first: client, name, keys */
};

dlock_status dlock_semaphore_new(dlock_client *client, const char *name, dlock_semaphore **out)
{
    dlock__handle *h = NULL;
    dlock_status st = dlock__handle_new(sizeof(dlock_semaphore), client, name, &sem_keys, out ? &h : NULL);
    if (out) *out = (dlock_semaphore *)h;
    return st;
}

void dlock_semaphore_free(dlock_semaphore *s)
{
    if (!s) return;
    dlock__handle_destroy(&s->base, NULL);
    free(s);
}

dlock_status dlock_semaphore_set_permits(dlock_semaphore *s, long permits, int *was_set)
{
    if (was_set) *was_set = 0;
    if (!s) return dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
    if (permits < 0 || permits > PERMITS_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "permits must be 0 to %ld", PERMITS_MAX);
    char n[24];
    snprintf(n, sizeof n, "%ld", permits);
    dlock__op op;
    dlock__op_new(s->base.client, s->base.key, &op);
    const char *keys[2] = {s->base.key, op.key};
    const char *args[3] = {n, op.seq, op.ttl};
    long long set;
    dlock_status st = dlock__eval_int(s->base.client, DLOCK__SCRIPT_SEM_SET, 2, keys, 3, args, &set);
    if (st == DLOCK_OK && was_set) *was_set = set == 1;
    return st;
}

struct sem_attempt {
    dlock_semaphore *s;
    const char *n;
};

/* One try; with no lease to bound the wait, the retry bound is unknown.
 * Each try is its own operation: one that took nothing may run again. */
static int sem_try(void *ctx, long *retry_ms)
{
    struct sem_attempt *a = ctx;
    dlock__op op;
    dlock__op_new(a->s->base.client, a->s->base.key, &op);
    const char *keys[2] = {a->s->base.key, op.key};
    const char *args[3] = {a->n, op.seq, op.ttl};
    long long got;
    dlock_status st = dlock__eval_int(a->s->base.client, DLOCK__SCRIPT_SEM_ACQUIRE, 2, keys, 3, args, &got);
    if (st != DLOCK_OK) return st;
    *retry_ms = -1;
    return got == 1 ? DLOCK_OK : DLOCK__BUSY;
}

static dlock_status sem_acquire(dlock_semaphore *s, long permits, long wait_ms)
{
    if (permits < 1 || permits > PERMITS_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "permits must be 1 to %ld", PERMITS_MAX);
    if (wait_ms < DLOCK_WAIT_FOREVER)
        return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    char n[24];
    snprintf(n, sizeof n, "%ld", permits);
    struct sem_attempt a = {s, n};
    int64_t deadline = dlock__deadline(wait_ms);
    long retry = -1;
    int result = sem_try(&a, &retry);
    if (dlock__should_wait(result, wait_ms))
        result = dlock__wait_for(s->base.client, DLOCK_STATS_SEMAPHORE, s->base.channel, deadline, sem_try, &a, result,
                                 retry);
    if (result == DLOCK__BUSY)
        return dlock__fail(DLOCK_ERR_TIMEOUT, "too few permits became available in time");
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
    char n[24];
    snprintf(n, sizeof n, "%ld", permits);
    dlock__op op;
    dlock__op_new(s->base.client, s->base.key, &op);
    const char *keys[3] = {s->base.key, s->base.channel, op.key};
    const char *args[4] = {n, s->base.client->publish, op.seq, op.ttl};
    long long available;
    return dlock__eval_int(s->base.client, DLOCK__SCRIPT_SEM_RELEASE, 3, keys, 4, args, &available);
}

dlock_status dlock_semaphore_available(dlock_semaphore *s, long *available)
{
    if (!s || !available) return dlock__fail(DLOCK_ERR_INVALID, "semaphore or output is NULL");
    const char *argv[2] = {"GET", s->base.key};
    redisReply *r;
    dlock_status st = dlock__topo_command(s->base.client->topo, s->base.key, 2, argv, NULL, &r, NULL);
    if (st != DLOCK_OK) return st;
    if (r->type == REDIS_REPLY_NIL) *available = 0;
    else if (r->type == REDIS_REPLY_STRING) *available = strtol(r->str, NULL, 10);
    else st = dlock__reply_error(r, "GET");
    freeReplyObject(r);
    return st;
}
