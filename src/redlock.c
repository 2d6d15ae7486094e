/*
 * RedLock: one lock over N independent Redis masters (no replication
 * between them), held when a majority granted it.
 *
 * Each master stores the lock exactly as the reentrant lock does
 * ("dlock:{NAME}" hash, fencing counter, release channel), run by the same
 * acquire/release/renew scripts, so `dlock status NAME` against any one
 * master shows its share, and a master mixes RedLock and plain holders of
 * different names freely.
 *
 * Acquire, in rounds until the wait ends:
 *
 *   1. read the monotonic clock (t0), then send acquire.lua to every master
 *      at once (one short-lived thread per master beyond the first), so a
 *      round costs the slowest master's round trip, not the sum;
 *   2. count grants; validity = lease - (now - t0) - drift, drift = 1% of
 *      the lease + 2 ms for clock-rate differences between the masters;
 *   3. with a majority and validity > 0 the lock is ours for `validity` ms
 *      by every master's clock; otherwise release on every master (also on
 *      those that did not answer: the request may have run) and sleep a
 *      random 20-200 ms before the next round, so that contenders that
 *      split the vote do not collide again in lockstep.
 *
 * The owner is a fresh random value per acquisition (not client:thread),
 * because the hold belongs to the handle, whichever thread releases it.
 *
 * Renewal uses the masters' own watchdogs: the hold registers one entry
 * with each granting master's client, so each renews its share in its
 * usual batches. When an entry is lost (key gone, or renewals failed until
 * the lease ran out) the share is gone; once fewer than a majority of
 * shares remain, the hold is lost and the callback runs. An explicit
 * extension applies the same majority rule to one parallel renew round.
 *
 * Fencing: the token returned is the highest token granted by the
 * majority. Any two majorities share a master, whose tokens strictly rise,
 * but the highest token of a round may come from a master whose clock runs
 * ahead of the others (tokens are floored at server time), so across
 * masters tokens rise strictly only while the masters' clocks agree to
 * within the time between acquisitions. Storage that needs a hard fencing
 * guarantee should use a single-master lock (with replica-safe acquire).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "handle.h"
#include "util.h"

#define MAX_MASTERS 32

struct dlock_redlock;

/* One master's share of a hold, registered with that master's watchdog. */
typedef struct rl_share {
    dlock__wd_entry wd; /* first: the watchdog's entry leads back here */
    struct dlock_redlock *rl;
    int granted;       /* acquired on this master in the current hold */
    int renewed;       /* registered with the watchdog */
    uint64_t token;
} rl_share;

/* The handle's base (handle.h) is on the first master's client, where
 * its metrics are counted; its hold spans the masters and is lost by the
 * majority rule above, so it keeps that state itself. */
struct dlock_redlock {
    dlock__handle base; /* first: name, keys, callback, the floor the caller set */
    size_t n, quorum;
    dlock_client **masters;
    rl_share *shares;
    char owner[48];
    char floor[24];       /* fencing floor passed in this round */
    long lease_ms;
    int held;
    atomic_int alive; /* shares still held, watched by the loss check */
    atomic_int lost;
    int64_t trusted_until; /* explicit lease: believed until then (monotonic); 0 with the watchdog */
    int64_t held_since;    /* when the acquire of the current hold returned (dlock__stats_clock) */
};

/* A request to one master, run on its own thread in a round. */
typedef struct rl_call {
    dlock_redlock *rl;
    size_t i;
    int kind; /* 0 acquire, 1 release, 2 renew */
    long lease_ms;
    pthread_t thread;
    int started;
    dlock_status st;
    long long result; /* acquire: 1 granted / 0 busy; release, renew: script answer */
    uint64_t token;
} rl_call;

/* One request to master c->i; everything it learns goes into *c. */
static void rl_call_run(rl_call *c)
{
    dlock_redlock *rl = c->rl;
    dlock_client *m = rl->masters[c->i];
    char lease_s[24];
    snprintf(lease_s, sizeof lease_s, "%ld", c->lease_ms);
    c->result = 0;
    if (c->kind == 0) {
        const char *keys[2] = {rl->base.key, rl->base.fence};
        const char *args[4] = {rl->owner, lease_s, "0", rl->floor};
        redisReply *r;
        c->st = dlock__eval(m, DLOCK__SCRIPT_ACQUIRE, 2, keys, 4, args, &r, NULL);
        if (c->st != DLOCK_OK) return;
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
            r->element[1]->type == REDIS_REPLY_INTEGER) {
            c->result = r->element[0]->integer != 0;
            c->token = (uint64_t)r->element[1]->integer;
        } else {
            c->st = dlock__fail(DLOCK_ERR_REDIS, "acquire: unexpected reply");
        }
        freeReplyObject(r);
    } else if (c->kind == 1) {
        const char *keys[2] = {rl->base.key, rl->base.channel};
        const char *args[4] = {rl->owner, lease_s, "1", m->publish};
        redisReply *r;
        int retried;
        c->st = dlock__eval(m, DLOCK__SCRIPT_RELEASE, 2, keys, 4, args, &r, &retried);
        if (c->st != DLOCK_OK) return;
        if (r->type == REDIS_REPLY_INTEGER)
            /* A resent release answers -1 when the first send released it
             * (the count is always 1 here), as in dlock_lock_release(). */
            c->result = r->integer < 0 && retried ? 0 : r->integer;
        else
            c->st = dlock__fail(DLOCK_ERR_REDIS, "release: unexpected reply");
        freeReplyObject(r);
    } else {
        const char *keys[1] = {rl->base.key};
        const char *args[2] = {rl->owner, lease_s};
        redisReply *r;
        c->st = dlock__eval(m, DLOCK__SCRIPT_RENEW, 1, keys, 2, args, &r, NULL);
        if (c->st != DLOCK_OK) return;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->type == REDIS_REPLY_INTEGER)
            c->result = r->element[0]->integer;
        else
            c->st = dlock__fail(DLOCK_ERR_REDIS, "renew: unexpected reply");
        freeReplyObject(r);
    }
}

static void *rl_call_thread(void *arg)
{
    dlock__thread_name("dlock-redlock");
    rl_call_run(arg);
    return NULL;
}

/* Send one kind of request to the masters flagged in `which` (NULL: all)
 * at the same time: threads for all but the first, which runs here. A
 * master whose thread cannot start is asked from here afterwards, late
 * but not skipped. */
static void rl_round(dlock_redlock *rl, int kind, long lease_ms, const int *which, rl_call *calls)
{
    size_t first = rl->n;
    for (size_t i = 0; i < rl->n; i++) {
        calls[i] = (rl_call){.rl = rl, .i = i, .kind = kind, .lease_ms = lease_ms, .st = DLOCK_ERR_INVALID};
        if (which && !which[i]) continue;
        if (first == rl->n) {
            first = i;
            continue;
        }
        calls[i].started = pthread_create(&calls[i].thread, NULL, rl_call_thread, &calls[i]) == 0;
    }
    if (first < rl->n) rl_call_run(&calls[first]);
    for (size_t i = 0; i < rl->n; i++) {
        if (which && !which[i]) continue;
        if (calls[i].started) pthread_join(calls[i].thread, NULL);
        else if (i != first) rl_call_run(&calls[i]);
    }
}

/* Stop renewing every share; waits for loss callbacks in flight. */
static void rl_stop_renewal(dlock_redlock *rl)
{
    for (size_t i = 0; i < rl->n; i++) {
        if (rl->shares[i].renewed) {
            dlock__wd_remove(rl->masters[i]->wd, &rl->shares[i].wd);
            rl->shares[i].renewed = 0;
        }
    }
}

/* Release on every master, whether or not it granted: a master that did
 * not answer may still have run the acquire. Only our owner value is ever
 * deleted. Returns how many masters confirmed they held our share. */
static size_t rl_release_all(dlock_redlock *rl)
{
    rl_call calls[MAX_MASTERS];
    rl_round(rl, 1, rl->lease_ms > 0 ? rl->lease_ms : 1, NULL, calls);
    size_t n = 0;
    for (size_t i = 0; i < rl->n; i++) {
        if (calls[i].st == DLOCK_OK && calls[i].result >= 0) n++;
        rl->shares[i].granted = 0;
    }
    return n;
}

/* Watchdog thread of master i: its share is gone. The hold is lost once
 * fewer than a majority of shares remain. */
static void rl_share_lost(dlock__wd_entry *e)
{
    rl_share *s = (rl_share *)e;
    dlock_redlock *rl = s->rl;
    int left = atomic_fetch_sub(&rl->alive, 1) - 1;
    if (left >= (int)rl->quorum || atomic_exchange(&rl->lost, 1)) return;
    dlock__stats_lost(&rl->masters[0]->stats, DLOCK_STATS_REDLOCK);
    void *arg;
    dlock_redlock_lost_fn fn = (dlock_redlock_lost_fn)dlock__handle_callback(&rl->base, &arg);
    if (fn) fn(rl, arg);
}

/* The floor of a round: the highest token any master's client saw for
 * the name, or the caller's floor if higher. */
static void rl_floor(dlock_redlock *rl)
{
    uint64_t floor = atomic_load(&rl->base.floor);
    for (size_t i = 0; i < rl->n; i++) {
        uint64_t seen = dlock__fence_seen(&rl->masters[i]->fences, rl->base.fence);
        if (seen > floor) floor = seen;
    }
    snprintf(rl->floor, sizeof rl->floor, "%llu", (unsigned long long)floor);
}

/* A random sleep between rounds, bounded by the deadline. */
static void rl_backoff(int64_t deadline)
{
    char hex[5];
    unsigned ms = 20;
    if (dlock__random_hex(hex, 2) == DLOCK_OK) ms += (unsigned)strtoul(hex, NULL, 16) % 181;
    if (deadline >= 0) {
        int64_t left = deadline - dlock__mono_ms();
        if (left <= 0) return;
        if ((int64_t)ms > left) ms = (unsigned)left;
    }
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

dlock_status dlock_redlock_new(dlock_client *const *masters, size_t n, const char *name, dlock_redlock **out)
{
    if (!out) return dlock__fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    if (!masters || n == 0 || n > MAX_MASTERS)
        return dlock__fail(DLOCK_ERR_INVALID, "RedLock needs 1 to %d masters", MAX_MASTERS);
    for (size_t i = 0; i < n; i++) {
        if (!masters[i]) return dlock__fail(DLOCK_ERR_INVALID, "master %zu is NULL", i);
        for (size_t j = 0; j < i; j++)
            if (masters[j] == masters[i])
                return dlock__fail(DLOCK_ERR_INVALID, "master %zu is given twice", i);
    }
    dlock_redlock *rl = calloc(1, sizeof *rl);
    if (!rl) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    /* A master stores its share as the plain lock stores a hold. */
    static const dlock__handle_keys keys = {"", ":fence", ":ch"};
    dlock_status st = dlock__handle_init(&rl->base, masters[0], name, &keys);
    rl->n = n;
    rl->quorum = n / 2 + 1;
    rl->masters = malloc(n * sizeof *rl->masters);
    rl->shares = calloc(n, sizeof *rl->shares);
    if (st == DLOCK_OK && (!rl->masters || !rl->shares)) st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    if (st != DLOCK_OK) {
        dlock_redlock_free(rl);
        return st;
    }
    memcpy(rl->masters, masters, n * sizeof *masters);
    for (size_t i = 0; i < n; i++) {
        rl_share *s = &rl->shares[i];
        s->rl = rl;
        s->wd.script = DLOCK__SCRIPT_RENEW;
        s->wd.kind = DLOCK_STATS_REDLOCK;
        s->wd.key = rl->base.key;
        s->wd.owner = rl->owner;
        s->wd.on_lost = rl_share_lost;
    }
    *out = rl;
    return DLOCK_OK;
}

void dlock_redlock_free(dlock_redlock *rl)
{
    if (!rl) return;
    if (rl->shares) rl_stop_renewal(rl);
    dlock__handle_destroy(&rl->base, NULL);
    free(rl->masters);
    free(rl->shares);
    free(rl);
}

static dlock_status rl_acquire(dlock_redlock *rl, long wait_ms, long lease_ms, long *validity_ms, uint64_t *token)
{
    if (wait_ms < DLOCK_WAIT_FOREVER)
        return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    dlock_status bad = dlock__check_lease(lease_ms, 10, 1);
    if (bad != DLOCK_OK) return bad;
    if (rl->held) return dlock__fail(DLOCK_ERR_INVALID, "redlock '%s' is already held by this handle", rl->base.name);
    int watchdog = lease_ms == DLOCK_LEASE_WATCHDOG;
    long lease = watchdog ? rl->masters[0]->watchdog_lease_ms : lease_ms;
    int64_t deadline = dlock__deadline(wait_ms);
    long drift = dlock__drift_ms(lease);

    for (;;) {
        char rnd[33];
        dlock_status st = dlock__random_hex(rnd, 16);
        if (st != DLOCK_OK) return st;
        snprintf(rl->owner, sizeof rl->owner, "rl:%s", rnd);
        rl->lease_ms = lease;
        rl_floor(rl);

        rl_call calls[MAX_MASTERS];
        int64_t t0 = dlock__mono_ms();
        rl_round(rl, 0, lease, NULL, calls);
        size_t granted = 0, errors = 0;
        uint64_t top = 0;
        dlock_status last = DLOCK_OK;
        char why[256] = "";
        for (size_t i = 0; i < rl->n; i++) {
            rl->shares[i].granted = calls[i].st == DLOCK_OK && calls[i].result == 1;
            if (rl->shares[i].granted) {
                granted++;
                rl->shares[i].token = calls[i].token;
                if (calls[i].token > top) top = calls[i].token;
            } else if (calls[i].st != DLOCK_OK) {
                errors++;
                last = calls[i].st;
                snprintf(why, sizeof why, "master %zu: %s", i, dlock_strerror(calls[i].st));
            }
        }
        int64_t now = dlock__mono_ms();
        long validity = lease - (long)(now - t0) - drift;
        if (granted >= rl->quorum && validity > 0) {
            rl->held = 1;
            rl->held_since = dlock__stats_clock();
            atomic_store(&rl->lost, 0);
            atomic_store(&rl->alive, (int)granted);
            rl->trusted_until = watchdog ? 0 : t0 + dlock__lease_trust_ms(lease, rl->masters[0]->safety_margin_pct);
            if (watchdog) {
                for (size_t i = 0; i < rl->n; i++) {
                    rl_share *s = &rl->shares[i];
                    if (!s->granted) continue;
                    if (dlock__handle_renew(rl->masters[i], &s->wd, lease, t0) != DLOCK_OK) {
                        dlock_redlock_release(rl);
                        return dlock__fail(DLOCK_ERR_SYS, "cannot start the watchdog thread");
                    }
                    s->renewed = 1;
                }
            }
            /* Every master's next token goes above this one: tokens of
             * this process then rise across masters whatever their
             * clocks say. */
            for (size_t i = 0; i < rl->n; i++) dlock__fence_note(&rl->masters[i]->fences, rl->base.fence, top);
            if (validity_ms) *validity_ms = validity;
            if (token) *token = top;
            return DLOCK_OK;
        }
        rl_release_all(rl);
        int over = wait_ms == 0 || (deadline >= 0 && dlock__mono_ms() >= deadline);
        if (!over) rl_backoff(deadline);
        if (over || (deadline >= 0 && dlock__mono_ms() >= deadline)) {
            /* No master answered at all: that is an outage, not contention. */
            if (errors == rl->n)
                return dlock__fail(last, "redlock '%s': no master reachable (%s)", rl->base.name, why);
            if (errors > 0)
                return dlock__fail(DLOCK_ERR_TIMEOUT, "redlock '%s': no majority (%zu of %zu granted; %s)",
                                  rl->base.name, granted, rl->n, why);
            return dlock__fail(DLOCK_ERR_TIMEOUT, "redlock '%s': no majority (%zu of %zu granted)", rl->base.name,
                              granted, rl->n);
        }
    }
}

/* Every call is counted, however it ends (as dlock_lock_acquire), on the
 * first master's client: one RedLock, one place to look. */
dlock_status dlock_redlock_acquire(dlock_redlock *rl, long wait_ms, long lease_ms, long *validity_ms,
                                   uint64_t *token)
{
    if (!rl) return dlock__fail(DLOCK_ERR_INVALID, "redlock is NULL");
    int64_t since = dlock__stats_clock();
    dlock_status st = rl_acquire(rl, wait_ms, lease_ms, validity_ms, token);
    dlock__stats_acquired(&rl->masters[0]->stats, DLOCK_STATS_REDLOCK, since, st);
    return st;
}

dlock_status dlock_redlock_extend(dlock_redlock *rl, long lease_ms, long *validity_ms)
{
    if (!rl) return dlock__fail(DLOCK_ERR_INVALID, "redlock is NULL");
    dlock_status bad = dlock__check_lease(lease_ms, 10, 0);
    if (bad != DLOCK_OK) return bad;
    if (!rl->held) return dlock__fail(DLOCK_ERR_NOT_OWNER, "redlock '%s' is not held by this handle", rl->base.name);
    if (atomic_load(&rl->lost)) return dlock__fail(DLOCK_ERR_LOST, "redlock '%s' was lost", rl->base.name);
    rl_call calls[MAX_MASTERS];
    int64_t t0 = dlock__mono_ms();
    rl_round(rl, 2, lease_ms, NULL, calls);
    size_t renewed = 0;
    for (size_t i = 0; i < rl->n; i++)
        if (calls[i].st == DLOCK_OK && calls[i].result == 1) renewed++;
    long validity = lease_ms - (long)(dlock__mono_ms() - t0) - dlock__drift_ms(lease_ms);
    if (renewed < rl->quorum || validity <= 0)
        return dlock__fail(DLOCK_ERR_LOST, "redlock '%s': extension reached %zu of %zu masters, need %zu",
                          rl->base.name, renewed, rl->n, rl->quorum);
    rl->lease_ms = lease_ms;
    if (rl->trusted_until) rl->trusted_until = t0 + dlock__lease_trust_ms(lease_ms, rl->masters[0]->safety_margin_pct);
    if (validity_ms) *validity_ms = validity;
    return DLOCK_OK;
}

dlock_status dlock_redlock_release(dlock_redlock *rl)
{
    if (!rl) return dlock__fail(DLOCK_ERR_INVALID, "redlock is NULL");
    if (!rl->held) return dlock__fail(DLOCK_ERR_NOT_OWNER, "redlock '%s' is not held by this handle", rl->base.name);
    rl_stop_renewal(rl);
    size_t confirmed = rl_release_all(rl);
    rl->held = 0;
    /* Renewal has stopped, so rl->lost no longer changes under us. */
    dlock__stats_released(&rl->masters[0]->stats, DLOCK_STATS_REDLOCK, rl->held_since);
    if (!atomic_load(&rl->lost) && confirmed < rl->quorum)
        dlock__stats_lost(&rl->masters[0]->stats, DLOCK_STATS_REDLOCK);
    if (atomic_load(&rl->lost) || confirmed < rl->quorum)
        return dlock__fail(DLOCK_ERR_LOST, "redlock '%s' was held on only %zu of %zu masters at release",
                          rl->base.name, confirmed, rl->n);
    return DLOCK_OK;
}

int dlock_redlock_lost(dlock_redlock *rl)
{
    if (!rl) return 0;
    if (atomic_load(&rl->lost)) return 1;
    if (!rl->held) return 0;
    /* Or the holder's clock, as in dlock_lock_lost(): a majority of the
     * shares must still be trusted. */
    size_t trusted = 0;
    for (size_t i = 0; i < rl->n; i++) {
        const rl_share *s = &rl->shares[i];
        if (s->granted && dlock__hold_trusted(&s->wd, s->renewed, rl->trusted_until)) trusted++;
    }
    return trusted < rl->quorum;
}

void dlock_redlock_set_fence_floor(dlock_redlock *rl, uint64_t floor)
{
    if (rl) dlock__atomic_max(&rl->base.floor, floor);
}

void dlock_redlock_on_lost(dlock_redlock *rl, dlock_redlock_lost_fn fn, void *arg)
{
    if (rl) dlock__handle_on_lost(&rl->base, (dlock__handle_fn)fn, arg);
}
