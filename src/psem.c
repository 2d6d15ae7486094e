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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "handle.h"
#include "op.h"
#include "util.h"
#include "wait.h"

#define PERMITS_MAX 0x7fffffffL

static const dlock__handle_keys psem_keys = {":psem", NULL, ":psem:ch"};

struct dlock_psem {
    dlock__handle base; /* first: client, name, keys, callback */
    char *held;        /* the sorted set of permits held */
};

/* A permit belongs to the handle, not to a thread: whoever has it may
 * release it, so it is its own record. */
struct dlock_permit {
    dlock__held held; /* first, so the watchdog's entry leads back here; count 1 */
    dlock_psem *psem;
    char id[DLOCK_PERMIT_ID_LEN];
    int64_t sent; /* when the last acquire attempt was sent */
};

dlock_status dlock_psem_new(dlock_client *client, const char *name, dlock_psem **out)
{
    dlock__handle *h = NULL;
    dlock_status st = dlock__handle_new(sizeof(dlock_psem), client, name, &psem_keys, out ? &h : NULL);
    if (out) *out = NULL;
    if (st != DLOCK_OK) return st;
    dlock_psem *p = (dlock_psem *)h;
    if (!(p->held = dlock__key(name, ":psem:held"))) {
        dlock_psem_free(p);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    *out = p;
    return DLOCK_OK;
}

void dlock_psem_free(dlock_psem *p)
{
    if (!p) return;
    dlock__handle_destroy(&p->base, NULL);
    free(p->held);
    free(p);
}

dlock_status dlock_psem_set_permits(dlock_psem *p, long permits, int *was_set)
{
    if (was_set) *was_set = 0;
    if (!p) return dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
    if (permits < 0 || permits > PERMITS_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "permits must be 0 to %ld", PERMITS_MAX);
    char n[24];
    snprintf(n, sizeof n, "%ld", permits);
    dlock__op op;
    dlock__op_new(p->base.client, p->base.key, &op);
    const char *keys[2] = {p->base.key, op.key};
    const char *args[3] = {n, op.seq, op.ttl};
    long long set;
    dlock_status st = dlock__eval_int(p->base.client, DLOCK__SCRIPT_SEM_SET, 2, keys, 3, args, &set);
    if (st == DLOCK_OK && was_set) *was_set = set == 1;
    return st;
}

/* Watchdog thread: this permit expired while we believed we held it. */
static void permit_lost(dlock__wd_entry *e)
{
    dlock_permit *pm = (dlock_permit *)e;
    dlock_psem *p = pm->psem;
    dlock__held_lose(p->base.client, &pm->held);
    void *arg;
    dlock_permit_lost_fn fn = (dlock_permit_lost_fn)dlock__handle_callback(&p->base, &arg);
    if (fn) fn(pm, arg);
}

/* One try with the permit's id: a resend after a lost reply keeps the
 * same permit instead of taking a second. */
static int psem_try(void *ctx, long *retry_ms)
{
    dlock_permit *pm = ctx;
    dlock_psem *p = pm->psem;
    char lease[24];
    snprintf(lease, sizeof lease, "%ld", pm->held.lease_ms);
    const char *keys[3] = {p->base.key, p->held, p->base.channel};
    const char *args[3] = {pm->id, lease, p->base.client->publish};
    redisReply *r;
    pm->sent = dlock__mono_ms(); /* a lease it sets starts no earlier */
    dlock_status st = dlock__eval(p->base.client, DLOCK__SCRIPT_PSEM_ACQUIRE, 3, keys, 3, args, &r, NULL);
    if (st != DLOCK_OK) return st;
    int result;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER) {
        result = dlock__fail(DLOCK_ERR_REDIS, "permit acquire: unexpected reply");
    } else if (r->element[0]->integer == 1) {
        result = DLOCK_OK;
    } else {
        *retry_ms = r->elements > 1 && r->element[1]->type == REDIS_REPLY_INTEGER
                        ? dlock__retry_after((long)r->element[1]->integer)
                        : -1;
        result = DLOCK__BUSY;
    }
    freeReplyObject(r);
    return result;
}

static dlock_status psem_acquire(dlock_psem *p, long wait_ms, long lease_ms, dlock_permit **out)
{
    if (!out) return dlock__fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    if (!p) return dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
    if (wait_ms < DLOCK_WAIT_FOREVER)
        return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    dlock_status bad = dlock__check_lease(lease_ms, 3, 1);
    if (bad != DLOCK_OK) return bad;
    dlock_permit *pm = calloc(1, sizeof *pm);
    if (!pm) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    pm->psem = p;
    pm->held.lease_ms = lease_ms ? lease_ms : p->base.client->watchdog_lease_ms;
    pm->held.wd.script = DLOCK__SCRIPT_PSEM_RENEW;
    pm->held.wd.kind = DLOCK_STATS_PERMIT;
    pm->held.wd.key = p->held;
    pm->held.wd.owner = pm->id;
    pm->held.wd.on_lost = permit_lost;
    dlock_status st = dlock__random_hex(pm->id, 16);
    if (st != DLOCK_OK) {
        free(pm);
        return st;
    }
    int64_t deadline = dlock__deadline(wait_ms);
    long retry = -1;
    dlock__early early = {0};
    if (wait_ms != 0) (void)dlock__wait_begin(p->base.client, p->base.channel, 0, 1, NULL, &early);
    int result = psem_try(pm, &retry);
    if (dlock__should_wait(result, wait_ms))
        result =
            dlock__wait_for(p->base.client, DLOCK_STATS_PERMIT, p->base.channel, deadline, psem_try, pm, result, retry,
                            NULL, NULL, &early);
    else dlock__wait_early_end(&early);
    if (result != DLOCK_OK) {
        free(pm);
        if (result == DLOCK__BUSY) return dlock__fail(DLOCK_ERR_TIMEOUT, "no permit became free in time");
        return (dlock_status)result;
    }
    pm->held.count = 1;
    if (dlock__held_begin(p->base.client, &pm->held, 1, lease_ms == DLOCK_LEASE_WATCHDOG, pm->held.lease_ms,
                          pm->sent) != DLOCK_OK) {
        dlock_psem_release(p, pm);
        return dlock__fail(DLOCK_ERR_SYS, "cannot start the watchdog thread");
    }
    *out = pm;
    return DLOCK_OK;
}

/* Every call is counted, however it ends (as dlock_lock_acquire). */
dlock_status dlock_psem_acquire(dlock_psem *p, long wait_ms, long lease_ms, dlock_permit **out)
{
    int64_t since = dlock__stats_clock();
    dlock_status st = psem_acquire(p, wait_ms, lease_ms, out);
    if (p) dlock__stats_acquired(&p->base.client->stats, DLOCK_STATS_PERMIT, since, st);
    return st;
}

const char *dlock_permit_id(const dlock_permit *pm)
{
    return pm ? pm->id : "";
}

int dlock_permit_lost(dlock_permit *pm)
{
    return pm && dlock__held_lost(&pm->held);
}

void dlock_psem_on_lost(dlock_psem *p, dlock_permit_lost_fn fn, void *arg)
{
    if (p) dlock__handle_on_lost(&p->base, (dlock__handle_fn)fn, arg);
}

void dlock_permit_free(dlock_permit *pm)
{
    if (!pm) return;
    if (pm->held.renewed) dlock__wd_remove(pm->psem->base.client->wd, &pm->held.wd);
    free(pm);
}

/* Release by id; *released tells whether a live permit was removed. */
static dlock_status release_id(dlock_psem *p, const char *id, int *released)
{
    dlock__op op;
    dlock__op_new(p->base.client, p->held, &op);
    const char *keys[3] = {p->held, p->base.channel, op.key};
    const char *args[4] = {id, p->base.client->publish, op.seq, op.ttl};
    long long n = 0;
    dlock_status st = dlock__eval_int(p->base.client, DLOCK__SCRIPT_PSEM_RELEASE, 3, keys, 4, args, &n);
    *released = n == 1;
    return st;
}

dlock_status dlock_psem_release(dlock_psem *p, dlock_permit *pm)
{
    if (!p || !pm) return dlock__fail(DLOCK_ERR_INVALID, "semaphore or permit is NULL");
    dlock_client *c = p->base.client;
    if (pm->held.renewed) {
        dlock__wd_remove(c->wd, &pm->held.wd);
        pm->held.renewed = 0;
    }
    /* Its entry is gone, so the watchdog can no longer set the flag. */
    int released = 0;
    dlock_status st = atomic_load(&pm->held.lost) ? DLOCK_OK : release_id(p, pm->id, &released);
    dlock__held_end(c, &pm->held);
    if (st == DLOCK_OK && !released) dlock__held_lose(c, &pm->held);
    free(pm);
    if (st != DLOCK_OK) return st;
    if (!released) return dlock__fail(DLOCK_ERR_LOST, "the permit had expired before release");
    return DLOCK_OK;
}

dlock_status dlock_psem_release_id(dlock_psem *p, const char *id)
{
    if (!p || !id) return dlock__fail(DLOCK_ERR_INVALID, "semaphore or id is NULL");
    int released = 0;
    dlock_status st = release_id(p, id, &released);
    if (st == DLOCK_OK && !released)
        return dlock__fail(DLOCK_ERR_NOT_OWNER, "no live permit has id '%.40s'", id);
    return st;
}

dlock_status dlock_psem_renew(dlock_psem *p, const char *id, long lease_ms)
{
    if (!p || !id) return dlock__fail(DLOCK_ERR_INVALID, "semaphore or id is NULL");
    dlock_status bad = dlock__check_lease(lease_ms, 3, 0);
    if (bad != DLOCK_OK) return bad;
    char lease[24];
    snprintf(lease, sizeof lease, "%ld", lease_ms);
    const char *keys[1] = {p->held};
    const char *args[2] = {id, lease};
    redisReply *r;
    dlock_status st = dlock__eval(p->base.client, DLOCK__SCRIPT_PSEM_RENEW, 1, keys, 2, args, &r, NULL);
    if (st != DLOCK_OK) return st;
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
             r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
    freeReplyObject(r);
    if (!ok) return dlock__fail(DLOCK_ERR_LOST, "the permit had expired before renewal");
    return DLOCK_OK;
}

dlock_status dlock_psem_available(dlock_psem *p, long *available)
{
    if (!p || !available) return dlock__fail(DLOCK_ERR_INVALID, "semaphore or output is NULL");
    const char *keys[2] = {p->base.key, p->held};
    long long n;
    dlock_status st = dlock__eval_int(p->base.client, DLOCK__SCRIPT_PSEM_AVAILABLE, 2, keys, 0, NULL, &n);
    if (st == DLOCK_OK) *available = (long)n;
    return st;
}
