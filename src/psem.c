/*
 * The permit-expirable semaphore.
 *
 * Each permit is a member of a sorted set scored by its expiry (server
 * time), under a random id the client draws. Taking a permit first drops
 * expired members, so a crashed holder's permit returns after its lease
 * with nobody's help; a permit kept by the watchdog is renewed in the same
 * batches as locks (psem_renew.lua) and reported lost if it expired
 * anyway. Waiters sleep until a release is published, or until the next
 * permit is due to expire, whichever is first.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "op.h"
#include "util.h"
#include "wait.h"
#include "watchdog.h"

#define PERMITS_MAX 0x7fffffffL

struct dlock_psem {
    dlock_client *client;
    char *key, *held, *channel;
    pthread_mutex_t mu; /* guards fn, arg */
    dlock_permit_lost_fn fn;
    void *arg;
};

struct dlock_permit {
    dlock_wd_entry wd; /* first, so the watchdog's entry leads back here */
    dlock_psem *psem;
    char id[DLOCK_PERMIT_ID_LEN];
    long lease_ms;
    int renewed;
    int64_t sent;          /* when the last acquire attempt was sent */
    int64_t trusted_until; /* explicit lease: believed until then (monotonic); 0 with the watchdog */
    int64_t held_since;    /* when its acquire returned (dlock_stats_clock) */
    atomic_int lost;
};

dlock_status dlock_psem_new(dlock_client *client, const char *name, dlock_psem **out)
{
    if (!out) return dlock_fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    if (!client) return dlock_fail(DLOCK_ERR_INVALID, "client is NULL");
    dlock_status st = dlock_check_name(name);
    if (st != DLOCK_OK) return st;
    dlock_psem *p = calloc(1, sizeof *p);
    if (p) {
        p->client = client;
        p->key = dlock_key(name, ":psem");
        p->held = dlock_key(name, ":psem:held");
        p->channel = dlock_key(name, ":psem:ch");
        pthread_mutex_init(&p->mu, NULL);
    }
    if (!p || !p->key || !p->held || !p->channel) {
        dlock_psem_free(p);
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    *out = p;
    return DLOCK_OK;
}

void dlock_psem_free(dlock_psem *p)
{
    if (!p) return;
    pthread_mutex_destroy(&p->mu);
    free(p->key);
    free(p->held);
    free(p->channel);
    free(p);
}

dlock_status dlock_psem_set_permits(dlock_psem *p, long permits, int *was_set)
{
    if (was_set) *was_set = 0;
    if (!p) return dlock_fail(DLOCK_ERR_INVALID, "semaphore is NULL");
    if (permits < 0 || permits > PERMITS_MAX)
        return dlock_fail(DLOCK_ERR_INVALID, "permits must be 0 to %ld", PERMITS_MAX);
    char n[24];
    snprintf(n, sizeof n, "%ld", permits);
    dlock_op op;
    dlock_op_new(p->client, p->key, &op);
    const char *keys[2] = {p->key, op.key};
    const char *args[3] = {n, op.seq, op.ttl};
    long long set;
    dlock_status st = dlock_eval_int(p->client, DLOCK_SCRIPT_SEM_SET, 2, keys, 3, args, &set);
    if (st == DLOCK_OK && was_set) *was_set = set == 1;
    return st;
}

/* Watchdog thread: this permit expired while we believed we held it. */
static void permit_lost(dlock_wd_entry *e)
{
    dlock_permit *pm = (dlock_permit *)e;
    dlock_psem *p = pm->psem;
    if (!atomic_exchange(&pm->lost, 1)) dlock_stats_lost(&p->client->stats, DLOCK_STATS_PERMIT);
    pthread_mutex_lock(&p->mu);
    dlock_permit_lost_fn fn = p->fn;
    void *arg = p->arg;
    pthread_mutex_unlock(&p->mu);
    if (fn) fn(pm, arg);
}

/* One try with the permit's id: a resend after a lost reply keeps the
 * same permit instead of taking a second. */
static int psem_try(void *ctx, long *retry_ms)
{
    dlock_permit *pm = ctx;
    dlock_psem *p = pm->psem;
    char lease[24];
    snprintf(lease, sizeof lease, "%ld", pm->lease_ms);
    const char *keys[3] = {p->key, p->held, p->channel};
    const char *args[3] = {pm->id, lease, p->client->publish};
    redisReply *r;
    pm->sent = dlock_mono_ms(); /* a lease it sets starts no earlier */
    dlock_status st = dlock_eval(p->client, DLOCK_SCRIPT_PSEM_ACQUIRE, 3, keys, 3, args, &r, NULL);
    if (st != DLOCK_OK) return st;
    int result;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER) {
        result = dlock_fail(DLOCK_ERR_REDIS, "permit acquire: unexpected reply");
    } else if (r->element[0]->integer == 1) {
        result = DLOCK_OK;
    } else {
        *retry_ms = r->elements > 1 && r->element[1]->type == REDIS_REPLY_INTEGER
                        ? (long)r->element[1]->integer
                        : -1;
        result = DLOCK_BUSY;
    }
    freeReplyObject(r);
    return result;
}

static dlock_status psem_acquire(dlock_psem *p, long wait_ms, long lease_ms, dlock_permit **out)
{
    if (!out) return dlock_fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    if (!p) return dlock_fail(DLOCK_ERR_INVALID, "semaphore is NULL");
    if (wait_ms < DLOCK_WAIT_FOREVER)
        return dlock_fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    dlock_status bad = dlock_check_lease(lease_ms, 3, 1);
    if (bad != DLOCK_OK) return bad;
    dlock_permit *pm = calloc(1, sizeof *pm);
    if (!pm) return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    pm->psem = p;
    pm->lease_ms = lease_ms ? lease_ms : p->client->watchdog_lease_ms;
    dlock_status st = dlock_random_hex(pm->id, 16);
    if (st != DLOCK_OK) {
        free(pm);
        return st;
    }
    int64_t deadline = dlock_deadline(wait_ms);
    long retry = -1;
    int result = psem_try(pm, &retry);
    if (dlock_should_wait(result, wait_ms))
        result = dlock_wait_for(p->client, DLOCK_STATS_PERMIT, p->channel, deadline, psem_try, pm, result, retry);
    if (result != DLOCK_OK) {
        free(pm);
        if (result == DLOCK_BUSY) return dlock_fail(DLOCK_ERR_TIMEOUT, "no permit became free in time");
        return (dlock_status)result;
    }
    pm->held_since = dlock_stats_clock();
    if (lease_ms != DLOCK_LEASE_WATCHDOG)
        pm->trusted_until = pm->sent + dlock_lease_trust_ms(pm->lease_ms, p->client->safety_margin_pct);
    if (lease_ms == DLOCK_LEASE_WATCHDOG) {
        struct dlock_watchdog *wd = dlock_client_watchdog(p->client);
        if (!wd) {
            dlock_psem_release(p, pm);
            return dlock_fail(DLOCK_ERR_SYS, "cannot start the watchdog thread");
        }
        pm->wd.script = DLOCK_SCRIPT_PSEM_RENEW;
        pm->wd.kind = DLOCK_STATS_PERMIT;
        pm->wd.key = p->held;
        pm->wd.owner = pm->id;
        pm->wd.lease_ms = pm->lease_ms;
        pm->wd.on_lost = permit_lost;
        dlock_wd_add(wd, &pm->wd, pm->sent);
        pm->renewed = 1;
    }
    *out = pm;
    return DLOCK_OK;
}

/* Every call is counted, however it ends (as dlock_lock_acquire). */
dlock_status dlock_psem_acquire(dlock_psem *p, long wait_ms, long lease_ms, dlock_permit **out)
{
    int64_t since = dlock_stats_clock();
    dlock_status st = psem_acquire(p, wait_ms, lease_ms, out);
    if (p) dlock_stats_acquired(&p->client->stats, DLOCK_STATS_PERMIT, since, st);
    return st;
}

const char *dlock_permit_id(const dlock_permit *pm)
{
    return pm ? pm->id : "";
}

int dlock_permit_lost(dlock_permit *pm)
{
    if (!pm) return 0;
    if (atomic_load(&pm->lost)) return 1;
    /* Or the holder's clock, as in dlock_lock_lost(). */
    return !dlock_hold_trusted(&pm->wd, pm->renewed, pm->trusted_until);
}

void dlock_psem_on_lost(dlock_psem *p, dlock_permit_lost_fn fn, void *arg)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    pthread_mutex_unlock(&p->mu);
}

void dlock_permit_free(dlock_permit *pm)
{
    if (!pm) return;
    if (pm->renewed) dlock_wd_remove(pm->psem->client->wd, &pm->wd);
    free(pm);
}

/* Release by id; *released tells whether a live permit was removed. */
static dlock_status release_id(dlock_psem *p, const char *id, int *released)
{
    dlock_op op;
    dlock_op_new(p->client, p->held, &op);
    const char *keys[3] = {p->held, p->channel, op.key};
    const char *args[4] = {id, p->client->publish, op.seq, op.ttl};
    long long n = 0;
    dlock_status st = dlock_eval_int(p->client, DLOCK_SCRIPT_PSEM_RELEASE, 3, keys, 4, args, &n);
    *released = n == 1;
    return st;
}

dlock_status dlock_psem_release(dlock_psem *p, dlock_permit *pm)
{
    if (!p || !pm) return dlock_fail(DLOCK_ERR_INVALID, "semaphore or permit is NULL");
    if (pm->renewed) {
        dlock_wd_remove(p->client->wd, &pm->wd);
        pm->renewed = 0;
    }
    int released = 0;
    dlock_status st = atomic_load(&pm->lost) ? DLOCK_OK : release_id(p, pm->id, &released);
    /* Its entry is gone, so the watchdog can no longer count a loss. */
    dlock_stats_released(&p->client->stats, DLOCK_STATS_PERMIT, pm->held_since);
    if (st == DLOCK_OK && !released && !atomic_load(&pm->lost))
        dlock_stats_lost(&p->client->stats, DLOCK_STATS_PERMIT);
    free(pm);
    if (st != DLOCK_OK) return st;
    if (!released) return dlock_fail(DLOCK_ERR_LOST, "the permit had expired before release");
    return DLOCK_OK;
}

dlock_status dlock_psem_release_id(dlock_psem *p, const char *id)
{
    if (!p || !id) return dlock_fail(DLOCK_ERR_INVALID, "semaphore or id is NULL");
    int released = 0;
    dlock_status st = release_id(p, id, &released);
    if (st == DLOCK_OK && !released)
        return dlock_fail(DLOCK_ERR_NOT_OWNER, "no live permit has id '%.40s'", id);
    return st;
}

dlock_status dlock_psem_renew(dlock_psem *p, const char *id, long lease_ms)
{
    if (!p || !id) return dlock_fail(DLOCK_ERR_INVALID, "semaphore or id is NULL");
    dlock_status bad = dlock_check_lease(lease_ms, 3, 0);
    if (bad != DLOCK_OK) return bad;
    char lease[24];
    snprintf(lease, sizeof lease, "%ld", lease_ms);
    const char *keys[1] = {p->held};
    const char *args[2] = {id, lease};
    redisReply *r;
    dlock_status st = dlock_eval(p->client, DLOCK_SCRIPT_PSEM_RENEW, 1, keys, 2, args, &r, NULL);
    if (st != DLOCK_OK) return st;
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
             r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
    freeReplyObject(r);
    if (!ok) return dlock_fail(DLOCK_ERR_LOST, "the permit had expired before renewal");
    return DLOCK_OK;
}

dlock_status dlock_psem_available(dlock_psem *p, long *available)
{
    if (!p || !available) return dlock_fail(DLOCK_ERR_INVALID, "semaphore or output is NULL");
    const char *keys[2] = {p->key, p->held};
    long long n;
    dlock_status st = dlock_eval_int(p->client, DLOCK_SCRIPT_PSEM_AVAILABLE, 2, keys, 0, NULL, &n);
    if (st == DLOCK_OK) *available = (long)n;
    return st;
}
