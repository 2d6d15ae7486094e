/*
 * The kinds of hold `dlock lock` and `dlock semaphore` take, as one table
 * of operations: plain, fair, read, write, RedLock and semaphore permit.
 * cmd_hold.c only ever calls through a row, so a new kind of hold is a new
 * row here (and an option that picks it).
 */
#include <stdatomic.h>
#include <stddef.h>

#include "hold.h"
#include "holdinfo.h"

/* ------------------------------------------------------------------------ */
/* Loss callbacks: all end in cli_on_lost's wake-up                          */
/* ------------------------------------------------------------------------ */

static void on_rw_lost(dlock_rwlock *rw, dlock_rw_mode mode, uint64_t token, void *arg)
{
    (void)rw;
    (void)mode;
    cli_on_lost(NULL, token, arg);
}

static void on_rl_lost(dlock_redlock *rl, void *arg)
{
    (void)rl;
    cli_on_lost(NULL, 0, arg);
}

static void on_permit_lost(dlock_permit *permit, void *arg)
{
    (void)permit;
    cli_on_lost(NULL, 0, arg);
}

/* ------------------------------------------------------------------------ */
/* Plain and fair locks                                                      */
/* ------------------------------------------------------------------------ */

/* Both kinds share a handle type; only how it is made differs. */
static dlock_status lock_setup(holder *h, dlock_status st, uint64_t fence_floor)
{
    if (st == DLOCK_OK) dlock_lock_on_lost(h->handle, cli_on_lost, NULL);
    if (st == DLOCK_OK) dlock_lock_set_fence_floor(h->handle, fence_floor);
    return st;
}

static dlock_status plain_open(holder *h, long permits, uint64_t fence_floor)
{
    (void)permits;
    dlock_lock *l = NULL;
    dlock_status st = dlock_lock_new(h->clients[0], h->name, &l);
    h->handle = l;
    return lock_setup(h, st, fence_floor);
}

static dlock_status fair_open(holder *h, long permits, uint64_t fence_floor)
{
    (void)permits;
    dlock_lock *l = NULL;
    dlock_status st = dlock_lock_new_fair(h->clients[0], h->name, &l);
    h->handle = l;
    return lock_setup(h, st, fence_floor);
}

static dlock_status lock_acquire(holder *h, long wait_ms, uint64_t *token)
{
    return dlock_lock_acquire(h->handle, wait_ms, DLOCK_LEASE_WATCHDOG, token);
}

static int lock_lost(const holder *h)
{
    return dlock_lock_lost(h->handle);
}

static dlock_status lock_release(holder *h)
{
    return dlock_lock_release(h->handle);
}

static void lock_free(holder *h)
{
    dlock_lock_free(h->handle);
}

/* ------------------------------------------------------------------------ */
/* Read-write locks: one handle, the side picked per call                    */
/* ------------------------------------------------------------------------ */

static dlock_status rw_open(holder *h, long permits, uint64_t fence_floor)
{
    (void)permits;
    dlock_rwlock *rw = NULL;
    dlock_status st = dlock_rwlock_new(h->clients[0], h->name, &rw);
    h->handle = rw;
    if (st == DLOCK_OK) dlock_rwlock_on_lost(rw, on_rw_lost, NULL);
    if (st == DLOCK_OK) dlock_rwlock_set_fence_floor(rw, fence_floor);
    return st;
}

static dlock_status read_acquire(holder *h, long wait_ms, uint64_t *token)
{
    return dlock_rwlock_acquire(h->handle, DLOCK_READ, wait_ms, DLOCK_LEASE_WATCHDOG, token);
}

static dlock_status write_acquire(holder *h, long wait_ms, uint64_t *token)
{
    return dlock_rwlock_acquire(h->handle, DLOCK_WRITE, wait_ms, DLOCK_LEASE_WATCHDOG, token);
}

static int read_lost(const holder *h)
{
    return dlock_rwlock_lost(h->handle, DLOCK_READ);
}

static int write_lost(const holder *h)
{
    return dlock_rwlock_lost(h->handle, DLOCK_WRITE);
}

static dlock_status read_release(holder *h)
{
    return dlock_rwlock_release(h->handle, DLOCK_READ);
}

static dlock_status write_release(holder *h)
{
    return dlock_rwlock_release(h->handle, DLOCK_WRITE);
}

static void rw_free(holder *h)
{
    dlock_rwlock_free(h->handle);
}

/* ------------------------------------------------------------------------ */
/* RedLock over several masters                                              */
/* ------------------------------------------------------------------------ */

static dlock_status redlock_open(holder *h, long permits, uint64_t fence_floor)
{
    (void)permits;
    dlock_redlock *rl = NULL;
    dlock_status st = dlock_redlock_new(h->clients, h->n, h->name, &rl);
    h->handle = rl;
    if (st == DLOCK_OK) dlock_redlock_on_lost(rl, on_rl_lost, NULL);
    if (st == DLOCK_OK) dlock_redlock_set_fence_floor(rl, fence_floor);
    return st;
}

static dlock_status redlock_acquire(holder *h, long wait_ms, uint64_t *token)
{
    return dlock_redlock_acquire(h->handle, wait_ms, DLOCK_LEASE_WATCHDOG, NULL, token);
}

static int redlock_lost(const holder *h)
{
    return dlock_redlock_lost(h->handle);
}

static dlock_status redlock_release(holder *h)
{
    return dlock_redlock_release(h->handle);
}

static void redlock_free(holder *h)
{
    dlock_redlock_free(h->handle);
}

/* ------------------------------------------------------------------------ */
/* Semaphore permits                                                         */
/* ------------------------------------------------------------------------ */

static dlock_status permit_open(holder *h, long permits, uint64_t fence_floor)
{
    (void)fence_floor;
    dlock_psem *s = NULL;
    dlock_status st = dlock_psem_new(h->clients[0], h->name, &s);
    h->handle = s;
    if (st == DLOCK_OK) st = dlock_psem_set_permits(s, permits, NULL);
    if (st == DLOCK_OK) dlock_psem_on_lost(s, on_permit_lost, NULL);
    return st;
}

/* A permit has no fencing token: *token stays 0. */
static dlock_status permit_acquire(holder *h, long wait_ms, uint64_t *token)
{
    *token = 0;
    return dlock_psem_acquire(h->handle, wait_ms, DLOCK_LEASE_WATCHDOG, &h->permit);
}

static int permit_lost(const holder *h)
{
    return dlock_permit_lost(h->permit);
}

/* The permit is released (and freed) by the semaphore: forget it first. */
static dlock_status permit_release(holder *h)
{
    dlock_permit *p = h->permit;
    h->permit = NULL;
    return dlock_psem_release(h->handle, p);
}

static void permit_free(holder *h)
{
    dlock_permit_free(h->permit);
    h->permit = NULL;
    dlock_psem_free(h->handle);
}

/* ------------------------------------------------------------------------ */
/* The table                                                                 */
/* ------------------------------------------------------------------------ */

const hold_ops cli_hold_kinds[HOLD_KINDS] = {
    [HOLD_PLAIN] = {"lock", HOLDINFO_LOCK, plain_open, lock_acquire, lock_lost, lock_release, lock_free},
    [HOLD_FAIR] = {"lock", HOLDINFO_LOCK, fair_open, lock_acquire, lock_lost, lock_release, lock_free},
    [HOLD_READ] = {"lock", -1, rw_open, read_acquire, read_lost, read_release, rw_free},
    [HOLD_WRITE] = {"lock", HOLDINFO_WRITE, rw_open, write_acquire, write_lost, write_release, rw_free},
    [HOLD_REDLOCK] = {"lock", -1, redlock_open, redlock_acquire, redlock_lost, redlock_release, redlock_free},
    [HOLD_PERMIT] = {"semaphore", -1, permit_open, permit_acquire, permit_lost, permit_release, permit_free},
};

int cli_holder_lost(void *arg)
{
    holder *h = arg;
    return atomic_load(&cli_lease_lost) || h->ops->lost(h);
}

void cli_holder_close(holder *h)
{
    if (h->ops) h->ops->free(h);
    h->handle = NULL;
    for (size_t i = 0; i < h->n; i++) dlock_client_free(h->clients[i]);
    h->n = 0;
}
