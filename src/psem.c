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
#include "handle.h"
#include "op.h"
#include "sem_size.h"
#include "util.h"
#include "wait.h"

static const dlock__handle_keys psem_keys = {":psem", NULL, ":psem:ch"};

struct dlock_psem {
    dlock__handle base; /* first: client, name, keys, callback */
    char *held;         /* the sorted set of permits held */
    atomic_long size;   /* the number of permits this handle set or found, -1 before */
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
    atomic_init(&p->size, -1);
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

/* The one call behind set_permits, resize and add_permits (sem_size.h). */
static dlock_status psem_size(dlock_psem *p, const char *mode, long n, int *was_set)
{
    const char *keys[2] = {p->base.key, p->held};
    return dlock__sem_size(p->base.client, DLOCK__SCRIPT_PSEM_SET, "permit-expirable semaphore", p->base.name, keys,
                           p->base.channel, mode, n, &p->size, was_set);
}

dlock_status dlock_psem_set_permits(dlock_psem *p, long permits, int *was_set)
{
    if (was_set) *was_set = 0;
    return p ? psem_size(p, "set", permits, was_set) : dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
}

dlock_status dlock_psem_resize(dlock_psem *p, long permits)
{
    return p ? psem_size(p, "resize", permits, NULL) : dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
}

dlock_status dlock_psem_add_permits(dlock_psem *p, long change)
{
    return p ? psem_size(p, "add", change, NULL) : dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
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

/* One attempt's keys and arguments (`lease` is the caller's buffer), and
 * its send time: a lease the attempt sets starts no earlier. */
typedef struct psem_call {
    const char *keys[3];
    const char *args[5];
    char lease[24], idle[24], size[24];
    int nargs;
} psem_call;

static void psem_call_make(dlock_permit *pm, psem_call *c)
{
    dlock_psem *p = pm->psem;
    snprintf(c->lease, sizeof c->lease, "%ld", pm->held.lease_ms);
    c->keys[0] = p->base.key;
    c->keys[1] = p->held;
    c->keys[2] = p->base.channel;
    c->args[0] = pm->id;
    c->args[1] = c->lease;
    c->args[2] = p->base.client->publish;
    snprintf(c->idle, sizeof c->idle, "%ld", DLOCK_IDLE_MS);
    c->args[3] = c->idle;
    long size = atomic_load(&p->size);
    snprintf(c->size, sizeof c->size, "%ld", size);
    c->args[4] = c->size;
    c->nargs = size >= 0 ? 5 : 4;
    pm->sent = dlock__mono_ms();
}

/* An attempt's answer: {1} taken, or {0, ms until the next permit is due
 * to expire}. */
static int psem_parse(const redisReply *r, long *retry_ms)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER)
        return dlock__fail(DLOCK_ERR_REDIS, "permit acquire: unexpected reply");
    if (r->element[0]->integer == 1) return DLOCK_OK;
    *retry_ms = r->elements > 1 && r->element[1]->type == REDIS_REPLY_INTEGER
                    ? dlock__retry_after((long)r->element[1]->integer)
                    : -1;
    return DLOCK__BUSY;
}

/* One try with the permit's id: a resend after a lost reply keeps the
 * same permit instead of taking a second. */
static int psem_try(void *ctx, long *retry_ms)
{
    dlock_permit *pm = ctx;
    psem_call c;
    psem_call_make(pm, &c);
    redisReply *r;
    dlock_status st =
        dlock__eval(pm->psem->base.client, DLOCK__SCRIPT_PSEM_ACQUIRE, 3, c.keys, c.nargs, c.args, &r, NULL);
    if (st != DLOCK_OK) return st;
    int result = psem_parse(r, retry_ms);
    freeReplyObject(r);
    return result;
}

/* A new permit record with a fresh random id, after the arguments of an
 * acquire were checked. */
static dlock_status permit_new(dlock_psem *p, long wait_ms, long lease_ms, dlock_permit **out)
{
    if (wait_ms < DLOCK_WAIT_FOREVER) return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
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
    *out = pm;
    return DLOCK_OK;
}

static dlock_status psem_acquire(dlock_psem *p, long wait_ms, long lease_ms, dlock_permit **out)
{
    if (!out) return dlock__fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    if (!p) return dlock__fail(DLOCK_ERR_INVALID, "semaphore is NULL");
    dlock_permit *pm = NULL;
    dlock_status st = permit_new(p, wait_ms, lease_ms, &pm);
    if (st != DLOCK_OK) return st;
    int64_t deadline = dlock__deadline(wait_ms);
    long retry = -1;
    dlock__early early = {0};
    if (wait_ms != 0) (void)dlock__wait_begin(p->base.client, p->base.channel, 0, 1, NULL, &early);
    int result = psem_try(pm, &retry);
    if (dlock__should_wait(result, wait_ms))
        result = dlock__wait_for(p->base.client, DLOCK_STATS_PERMIT, p->base.channel, deadline, psem_try, pm, result,
                                 retry, NULL, NULL, &early);
    else dlock__wait_early_end(&early);
    if (result != DLOCK_OK) {
        free(pm);
        if (result == DLOCK__BUSY) return dlock__fail(DLOCK_ERR_TIMEOUT, "no permit became free in time");
        return (dlock_status)result;
    }
    pm->held.count = 1;
    dlock_status begun =
        dlock__held_begin(p->base.client, &pm->held, 1, lease_ms == DLOCK_LEASE_WATCHDOG, pm->held.lease_ms, pm->sent);
    if (begun != DLOCK_OK) {
        char why[512];
        snprintf(why, sizeof why, "permit: %s", dlock_last_error());
        dlock_psem_release(p, pm);
        return dlock__fail(begun, "%s", why);
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

/* A release's keys and arguments under operation id `op`. */
typedef struct release_call {
    const char *keys[3];
    const char *args[4];
} release_call;

static void release_call_make(dlock_psem *p, const char *id, const dlock__op *op, release_call *c)
{
    c->keys[0] = p->held;
    c->keys[1] = p->base.channel;
    c->keys[2] = op->key;
    c->args[0] = id;
    c->args[1] = p->base.client->publish;
    c->args[2] = op->seq;
    c->args[3] = op->ttl;
}

/* Release by id; *released tells whether a live permit was removed. */
static dlock_status release_id(dlock_psem *p, const char *id, int *released)
{
    dlock__op op;
    dlock__op_new(p->base.client, p->held, &op);
    release_call c;
    release_call_make(p, id, &op, &c);
    long long n = 0;
    dlock_status st = dlock__eval_int(p->base.client, DLOCK__SCRIPT_PSEM_RELEASE, 3, c.keys, 4, c.args, &n);
    *released = n == 1;
    return st;
}

/* The end of a release, sent or not: stop renewing, count, free. A
 * release that reached the server and removed nothing finds the permit
 * lost (it had expired, or was released by id elsewhere). */
static dlock_status release_end(dlock_psem *p, dlock_permit *pm, dlock_status st, int released)
{
    dlock_client *c = p->base.client;
    dlock__held_end(c, &pm->held);
    if (st == DLOCK_OK && !released) dlock__held_lose(c, &pm->held);
    free(pm);
    if (st != DLOCK_OK) return st;
    if (!released) return dlock__fail(DLOCK_ERR_LOST, "the permit had expired before release");
    return DLOCK_OK;
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
    return release_end(p, pm, st, released);
}

dlock_status dlock_psem_release_id(dlock_psem *p, const char *id)
{
    if (!p || !id) return dlock__fail(DLOCK_ERR_INVALID, "semaphore or id is NULL");
    int released = 0;
    dlock_status st = release_id(p, id, &released);
    if (st == DLOCK_OK && !released) return dlock__fail(DLOCK_ERR_NOT_OWNER, "no live permit has id '%.40s'", id);
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
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->type == REDIS_REPLY_INTEGER &&
             r->element[0]->integer == 1;
    freeReplyObject(r);
    if (!ok) return dlock__fail(DLOCK_ERR_LOST, "the permit had expired before renewal");
    return DLOCK_OK;
}

dlock_status dlock_psem_available(dlock_psem *p, long *available)
{
    if (!p || !available) return dlock__fail(DLOCK_ERR_INVALID, "semaphore or output is NULL");
    const char *keys[2] = {p->base.key, p->held};
    char size[24];
    long known = atomic_load(&p->size);
    snprintf(size, sizeof size, "%ld", known);
    const char *args[1] = {size};
    long long n;
    dlock_status st =
        dlock__eval_int(p->base.client, DLOCK__SCRIPT_PSEM_AVAILABLE, 2, keys, known >= 0 ? 1 : 0, args, &n);
    if (st == DLOCK_OK) *available = (long)n;
    return st;
}

/* ------------------------------------------------------------------------
 * The asynchronous acquire and release, as semaphore.c's: the wait is a
 * dlock__await, the handle runs one asynchronous call at a time (its
 * operation record, op.h, is the handle's), and the call counts as in
 * flight until its callback has returned. The permit record is made
 * before the first attempt, so every attempt and resend carries the same
 * id, as the synchronous acquire's do.
 * ------------------------------------------------------------------------ */

typedef struct psem_async {
    dlock__await aw; /* first: the wait's state */
    dlock_psem *p;
    dlock__thread_rec *rec; /* the handle's record 0: one call at a time */
    dlock_permit *pm;
    int watchdog;
    int64_t since;
    dlock_permit_fn cb;
    void *arg;
} psem_async;

static dlock_status async_attempt(dlock__await *aw)
{
    psem_async *op = (psem_async *)aw;
    psem_call c;
    psem_call_make(op->pm, &c);
    return dlock__async_script(op->p->base.client, DLOCK__SCRIPT_PSEM_ACQUIRE, 3, c.keys, c.nargs, c.args,
                               dlock__await_reply, op);
}

static int async_parse(dlock__await *aw, const redisReply *r, long *retry_ms)
{
    (void)aw;
    return psem_parse(r, retry_ms);
}

/* The end of either call: the callback, with the thread's last error set. */
static void async_done(psem_async *op, dlock_status st, dlock_permit *pm)
{
    dlock_psem *p = op->p;
    dlock_client *c = p->base.client;
    dlock__thread_rec *rec = op->rec;
    dlock_permit_fn cb = op->cb;
    void *arg = op->arg;
    free(op);
    dlock__handle_async_done(rec);
    cb(p, st, pm, arg);
    dlock__async_end(&c->async);
}

static void acquire_done(dlock__await *aw, int result)
{
    psem_async *op = (psem_async *)aw;
    dlock_psem *p = op->p;
    dlock_permit *pm = op->pm;
    dlock_status st = (dlock_status)result;
    if (result == DLOCK__BUSY) st = dlock__fail(DLOCK_ERR_TIMEOUT, "no permit became free in time");
    if (st == DLOCK_OK) {
        pm->held.count = 1;
        dlock_status begun = dlock__held_begin(p->base.client, &pm->held, 1, op->watchdog, pm->held.lease_ms, pm->sent);
        if (begun != DLOCK_OK) {
            /* Given back without waiting for the answer: a lease of its
             * own ends it anyway. */
            char why[512];
            snprintf(why, sizeof why, "permit: %s", dlock_last_error());
            dlock__op rop;
            dlock__op_new(p->base.client, p->held, &rop);
            release_call c;
            release_call_make(p, pm->id, &rop, &c);
            (void)dlock__async_script(p->base.client, DLOCK__SCRIPT_PSEM_RELEASE, 3, c.keys, 4, c.args,
                                      dlock__async_ignore, NULL);
            st = dlock__fail(begun, "%s", why);
        }
    }
    if (st != DLOCK_OK) {
        free(pm);
        pm = NULL;
    }
    dlock__stats_acquired(&p->base.client->stats, DLOCK_STATS_PERMIT, op->since, st);
    async_done(op, st, pm);
}

static const dlock__await_ops acquire_ops = {async_attempt, async_parse, acquire_done};

static void on_release_reply(dlock_status st, redisReply *r, void *arg)
{
    psem_async *op = arg;
    long long released;
    st = dlock__async_int(st, r, &released);
    st = release_end(op->p, op->pm, st, released == 1);
    async_done(op, st, NULL);
}

/* Claim the handle for one asynchronous call and make its state. */
static dlock_status async_begin(dlock_psem *p, dlock_permit_fn cb, void *arg, psem_async **out)
{
    dlock__thread_rec *rec;
    dlock_status st;
    psem_async *op = *out = dlock__handle_async_op(&p->base, sizeof *op, &rec, &st);
    if (!op) return st;
    op->p = p;
    op->rec = rec;
    op->cb = cb;
    op->arg = arg;
    return DLOCK_OK;
}

/* Undo async_begin() for a call that was not sent. */
static dlock_status async_abandon(psem_async *op, dlock_status st)
{
    dlock__handle *h = &op->p->base;
    dlock__thread_rec *rec = op->rec;
    free(op);
    dlock__handle_async_abandon(h, rec);
    return st;
}

dlock_status dlock_psem_acquire_async(dlock_psem *p, long wait_ms, long lease_ms, dlock_permit_fn cb, void *arg)
{
    if (!p || !cb) return dlock__fail(DLOCK_ERR_INVALID, "semaphore or callback is NULL");
    dlock_permit *pm = NULL;
    dlock_status st = permit_new(p, wait_ms, lease_ms, &pm);
    if (st != DLOCK_OK) return st;
    psem_async *op;
    if ((st = async_begin(p, cb, arg, &op)) != DLOCK_OK) {
        free(pm);
        return st;
    }
    op->pm = pm;
    op->watchdog = lease_ms == DLOCK_LEASE_WATCHDOG;
    op->since = dlock__stats_clock();
    st = dlock__await_start(&op->aw, &acquire_ops, p->base.client, DLOCK_STATS_PERMIT, p->base.channel, wait_ms,
                            DLOCK__AWAIT_IN_LINE, NULL);
    if (st == DLOCK_OK) return st;
    free(pm);
    return async_abandon(op, st);
}

dlock_status dlock_psem_release_async(dlock_psem *p, dlock_permit *pm, dlock_permit_fn cb, void *arg)
{
    if (!p || !pm || !cb) return dlock__fail(DLOCK_ERR_INVALID, "semaphore, permit or callback is NULL");
    psem_async *op;
    dlock_status st = async_begin(p, cb, arg, &op);
    if (st != DLOCK_OK) return st;
    op->pm = pm;
    dlock_client *c = p->base.client;
    /* Renewals go on until the answer (a renewal that finds the permit
     * just released is not a loss: dlock__wd_releasing), so a release
     * that cannot be sent leaves the permit as it was. */
    if (pm->held.renewed) dlock__wd_releasing(c->wd, &pm->held.wd, 1);
    dlock__op rop;
    dlock__op_new_async(c, p->held, p->base.number, &rop);
    release_call rc;
    release_call_make(p, pm->id, &rop, &rc);
    st = dlock__async_script(c, DLOCK__SCRIPT_PSEM_RELEASE, 3, rc.keys, 4, rc.args, on_release_reply, op);
    if (st == DLOCK_OK) return st;
    if (pm->held.renewed) dlock__wd_releasing(c->wd, &pm->held.wd, 0);
    return async_abandon(op, st);
}
