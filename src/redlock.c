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
 *      at once (asynchronous calls on their shared connections), so a
 *      round costs the slowest master's round trip, not the sum;
 *   2. count grants; validity = lease - (now - t0) - drift, drift = 1% of
 *      the lease + 2 ms for clock-rate differences between the masters;
 *   3. with a majority and validity > 0 the lock is ours for `validity` ms
 *      by every master's clock; otherwise release on every master (also on
 *      those that did not answer: the request may have run), waking no
 *      waiter, and sleep a random 20-200 ms before the next round, so that
 *      contenders that split the vote do not collide again in lockstep; a
 *      holder's release published on the first master ends the sleep.
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

#include "async.h"
#include "client.h"
#include "handle.h"
#include "util.h"
#include "wait.h"

#define MAX_MASTERS DLOCK_REDLOCK_MAX_MASTERS

struct dlock_redlock;

/* One master's share of a hold, registered with that master's watchdog. */
typedef struct rl_share {
    dlock__wd_entry wd; /* first: the watchdog's entry leads back here */
    struct dlock_redlock *rl;
    int granted; /* acquired on this master in the current hold */
    int renewed; /* registered with the watchdog */
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
    char floor[24]; /* fencing floor passed in this round */
    char *quiet;    /* "dlock:{NAME}:quiet", a key that never exists (rl_release_all) */
    long lease_ms;
    int held;
    atomic_int alive; /* shares still held, watched by the loss check */
    atomic_int lost;
    int64_t trusted_until; /* explicit lease: believed until then (monotonic); 0 with the watchdog */
    int64_t held_since;    /* when the acquire of the current hold returned (dlock__stats_clock) */
    long validity_ms;      /* what the hold's acquisition or latest extension reported */
    atomic_int busy;       /* an asynchronous call is under way */
};

struct rl_round;

/* A request to one master in a round. */
typedef struct rl_call {
    dlock_redlock *rl;
    struct rl_round *round;
    size_t i;
    int kind; /* 0 acquire, 1 release, 2 renew, 3 release that wakes nobody */
    char lease_s[24];
    dlock_status st;
    long long result; /* acquire: 1 granted / 0 busy; release, renew: script answer */
    uint64_t token;
    int sent; /* went out as an asynchronous call (else st says why not) */
} rl_call;

/* A round's requests, answered on library threads: the last answer wakes
 * the caller, who sleeps on cv, or, in an asynchronous call, runs `last`
 * on the thread that read it. */
typedef struct rl_round {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t left;
    void (*last)(struct rl_round *w);
} rl_round_wait;

/* The script, keys and arguments of request c. */
static dlock__script_id rl_call_make(const rl_call *c, int *nkeys, const char **keys, int *nargs, const char **args)
{
    const dlock_redlock *rl = c->rl;
    keys[0] = rl->base.key;
    args[0] = rl->owner;
    args[1] = c->lease_s;
    if (c->kind == 0) {
        keys[1] = rl->base.fence;
        args[2] = "0";
        args[3] = rl->floor;
        *nkeys = 2;
        *nargs = 4;
        return DLOCK__SCRIPT_ACQUIRE;
    }
    if (c->kind == 1 || c->kind == 3) {
        keys[1] = rl->base.channel;
        keys[2] = rl->quiet; /* as the waiting set: none, so no PUBLISH */
        args[2] = "1";
        args[3] = rl->masters[c->i]->publish;
        *nkeys = c->kind == 3 ? 3 : 2;
        *nargs = 4;
        return DLOCK__SCRIPT_RELEASE;
    }
    *nkeys = 1;
    *nargs = 2;
    return DLOCK__SCRIPT_RENEW;
}

/* What master c->i answered (`retried`: the request was sent twice). */
static void rl_call_read(rl_call *c, const redisReply *r, int retried)
{
    c->result = 0;
    if (c->kind == 0) {
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
            r->element[1]->type == REDIS_REPLY_INTEGER) {
            c->result = r->element[0]->integer != 0;
            c->token = (uint64_t)r->element[1]->integer;
        } else {
            c->st = dlock__fail(DLOCK_ERR_REDIS, "acquire: unexpected reply");
        }
    } else if (c->kind == 1 || c->kind == 3) {
        if (r->type == REDIS_REPLY_INTEGER)
            /* A resent release answers -1 when the first send released it
             * (the count is always 1 here), as in dlock_lock_release(). */
            c->result = r->integer < 0 && retried ? 0 : r->integer;
        else c->st = dlock__fail(DLOCK_ERR_REDIS, "release: unexpected reply");
    } else {
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->type == REDIS_REPLY_INTEGER)
            c->result = r->element[0]->integer;
        else c->st = dlock__fail(DLOCK_ERR_REDIS, "renew: unexpected reply");
    }
}

/* Request c, from the calling thread. */
static void rl_call_run(rl_call *c)
{
    const char *keys[3], *args[4];
    int nkeys, nargs, retried;
    dlock__script_id id = rl_call_make(c, &nkeys, keys, &nargs, args);
    redisReply *r;
    c->st = dlock__eval(c->rl->masters[c->i], id, nkeys, keys, nargs, args, &r, &retried);
    if (c->st != DLOCK_OK) return;
    rl_call_read(c, r, retried);
    freeReplyObject(r);
}

/* The answer to request c, on a library thread. */
static void rl_call_reply(dlock_status st, redisReply *r, void *arg)
{
    rl_call *c = arg;
    c->st = st;
    if (st == DLOCK_OK) rl_call_read(c, r, dlock__async_resent());
    if (r) freeReplyObject(r);
    rl_round_wait *w = c->round;
    /* Read before the unlock: a caller woken by the signal returns, and
     * its w with it. */
    void (*last)(rl_round_wait *) = w->last;
    pthread_mutex_lock(&w->mu);
    int end = --w->left == 0;
    if (end && !last) pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (end && last) last(w);
}

/* Send one kind of request to every master as asynchronous calls on their
 * shared connections, answered to w; returns how many could not go out
 * (their `sent` is 0 and their st says why: a client being drained, no
 * memory). */
static size_t rl_round_send(dlock_redlock *rl, int kind, long lease_ms, rl_call *calls, rl_round_wait *w)
{
    size_t unsent = 0;
    for (size_t i = 0; i < rl->n; i++) {
        rl_call *c = &calls[i];
        *c = (rl_call){.rl = rl, .round = w, .i = i, .kind = kind};
        dlock__fmt_ll(lease_ms, c->lease_s);
        const char *keys[3], *args[4];
        int nkeys, nargs;
        dlock__script_id id = rl_call_make(c, &nkeys, keys, &nargs, args);
        c->sent = 1; /* before the call: its answer may come before it returns */
        dlock_status st = dlock__async_script(rl->masters[i], id, nkeys, keys, nargs, args, rl_call_reply, c);
        if (st != DLOCK_OK) {
            c->sent = 0;
            c->st = st;
            unsent++;
        }
    }
    return unsent;
}

/* Take `done` answers off w's count (the requests that did not go out, and
 * the sender's own guard); 1 when that was the last of them: the round has
 * ended in the sender's hands. */
static int rl_round_settle(rl_round_wait *w, size_t done)
{
    pthread_mutex_lock(&w->mu);
    w->left -= done;
    int end = w->left == 0;
    pthread_mutex_unlock(&w->mu);
    return end;
}

/* Send one kind of request to every master at the same time, so a round
 * costs the slowest master's round trip, not the sum: each goes out as an
 * asynchronous call on its master's shared connection, and this thread
 * sleeps until the last answer is in. Before, each master beyond the
 * first was asked from a thread started for the round, which cost more
 * than the requests (docs/BENCHMARKS.md, "RedLock's rounds"). A request
 * that cannot go out so (its client is being drained) is made from here
 * afterwards, late but not skipped. */
static void rl_round(dlock_redlock *rl, int kind, long lease_ms, rl_call *calls)
{
    rl_round_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, rl->n, NULL};
    size_t unsent = rl_round_send(rl, kind, lease_ms, calls, &w);
    pthread_mutex_lock(&w.mu);
    w.left -= unsent;
    while (w.left > 0) pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    for (size_t i = 0; i < rl->n; i++)
        if (!calls[i].sent) rl_call_run(&calls[i]);
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

/* How many masters a release round's answers confirm held our share. */
static size_t rl_confirmed(const dlock_redlock *rl, const rl_call *calls)
{
    size_t n = 0;
    for (size_t i = 0; i < rl->n; i++)
        if (calls[i].st == DLOCK_OK && calls[i].result >= 0) n++;
    return n;
}

/* Release on every master, whether or not it granted: a master that did
 * not answer may still have run the acquire. Only our owner value is ever
 * deleted. Returns how many masters confirmed they held our share.
 *
 * `quiet`: the give-back of a round that won no majority, which wakes no
 * waiter. release.lua publishes a release on the name's channel unless it
 * is given a waiting set (a plain lock's), so it is given one that never
 * exists. Why: the waiters of a RedLock are woken by that message
 * (rl_acquire), and contenders that split the vote would wake one another
 * with their give-backs and collide again at once, where the random pause
 * of rl_try_round() keeps them apart. */
static size_t rl_release_all(dlock_redlock *rl, int quiet)
{
    rl_call calls[MAX_MASTERS];
    rl_round(rl, quiet ? 3 : 1, rl->lease_ms > 0 ? rl->lease_ms : 1, calls);
    for (size_t i = 0; i < rl->n; i++) rl->shares[i].granted = 0;
    return rl_confirmed(rl, calls);
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

/* A random time between rounds, 20-200 ms: contenders that split the
 * vote do not collide again in lockstep. */
static long rl_backoff_ms(void)
{
    char hex[5];
    long ms = 20;
    if (dlock__random_hex(hex, 2) == DLOCK_OK) ms += (long)(strtoul(hex, NULL, 16) % 181);
    return ms;
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
            if (masters[j] == masters[i]) return dlock__fail(DLOCK_ERR_INVALID, "master %zu is given twice", i);
    }
    dlock_redlock *rl = calloc(1, sizeof *rl);
    if (!rl) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    /* A master stores its share as the plain lock stores a hold. */
    static const dlock__handle_keys keys = {"", ":fence", ":ch"};
    dlock_status st = dlock__handle_init(&rl->base, masters[0], name, &keys);
    rl->n = n;
    rl->quorum = n / 2 + 1;
    if (st == DLOCK_OK && (rl->quiet = malloc(strlen(rl->base.key) + sizeof ":quiet")))
        sprintf(rl->quiet, "%s:quiet", rl->base.key);
    rl->masters = malloc(n * sizeof *rl->masters);
    rl->shares = calloc(n, sizeof *rl->shares);
    if (st == DLOCK_OK && (!rl->masters || !rl->shares || !rl->quiet))
        st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
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
    free(rl->quiet);
    free(rl);
}

/* One acquisition's rounds: what they share, and what the last one saw. */
typedef struct rl_try {
    dlock_redlock *rl;
    long lease, drift;
    int64_t t0; /* the last round's start (monotonic) */
    size_t granted, errors;
    uint64_t top; /* the highest token granted in it */
    long validity;
    dlock_status last; /* a master's failure in it, and why */
    char why[256];
} rl_try;

/* A round's start: a fresh owner value, the lease, the fencing floor. */
static dlock_status rl_round_begin(rl_try *t)
{
    dlock_redlock *rl = t->rl;
    char rnd[33];
    dlock_status st = dlock__random_hex(rnd, 16);
    if (st != DLOCK_OK) return st;
    snprintf(rl->owner, sizeof rl->owner, "rl:%s", rnd);
    rl->lease_ms = t->lease;
    rl_floor(rl);
    t->t0 = dlock__mono_ms();
    return DLOCK_OK;
}

/* What an acquire round came to: DLOCK_OK when a majority granted it in
 * time; else DLOCK__BUSY, or, when no master answered at all, an outage
 * (DLOCK_ERR_CONNECT), which a wait backs off from until its deadline. */
static int rl_round_result(rl_try *t, const rl_call *calls)
{
    dlock_redlock *rl = t->rl;
    t->granted = t->errors = 0;
    t->top = 0;
    for (size_t i = 0; i < rl->n; i++) {
        rl->shares[i].granted = calls[i].st == DLOCK_OK && calls[i].result == 1;
        if (rl->shares[i].granted) {
            t->granted++;
            rl->shares[i].token = calls[i].token;
            if (calls[i].token > t->top) t->top = calls[i].token;
        } else if (calls[i].st != DLOCK_OK) {
            t->errors++;
            t->last = calls[i].st;
            snprintf(t->why, sizeof t->why, "master %zu: %s", i, dlock_strerror(calls[i].st));
        }
    }
    t->validity = t->lease - (long)(dlock__mono_ms() - t->t0) - t->drift;
    if (t->granted >= rl->quorum && t->validity > 0) return DLOCK_OK;
    return t->errors == rl->n ? DLOCK_ERR_CONNECT : DLOCK__BUSY;
}

/* One round (dlock__try_fn's shape): its result, and when it won no
 * majority, everything given back (quietly) and a random retry time. */
static int rl_try_round(void *ctx, long *retry_ms)
{
    rl_try *t = ctx;
    dlock_status st = rl_round_begin(t);
    if (st != DLOCK_OK) return st;
    rl_call calls[MAX_MASTERS];
    rl_round(t->rl, 0, t->lease, calls);
    int result = rl_round_result(t, calls);
    if (result == DLOCK_OK) return DLOCK_OK;
    rl_release_all(t->rl, 1);
    *retry_ms = rl_backoff_ms();
    return result;
}

/*
 * The rounds after a first that won no majority, until one does or the
 * deadline passes; returns the last round's result. Between rounds the
 * caller sleeps the round's random pause, or less: until a release of the
 * name on the first master wakes it (release.lua publishes a RedLock's
 * release on the name's channel, as it does for a lock that no process
 * waits for), so a waiter tries again at once instead of polling, as
 * every other wait of the library does. A release on another master alone
 * wakes nobody; the pause still bounds the sleep.
 *
 * As in the plain lock's wait (dlock__wait_for), the waiter first waits
 * for its subscription to be confirmed and then tries again before it
 * sleeps, so that a release published before it listened is not missed.
 * Unlike there, that wait for the subscription is bounded by the pause,
 * not by a second: the first master may be the one that is down, and the
 * others must still be asked at the pace of the pauses.
 */
static int rl_wait(rl_try *t, int64_t deadline, int result, long retry_ms)
{
    dlock_redlock *rl = t->rl;
    dlock_client *c = rl->masters[0];
    struct dlock__subscriber *sub = dlock__client_subscriber(c);
    if (!sub) return dlock__fail(DLOCK_ERR_SYS, "cannot start the subscriber thread");
    dlock__sub_entry *e = dlock__sub_join(sub, rl->base.channel);
    if (!e) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock__sub_watch me = {0};
    me.since = dlock__mono_ms();
    dlock__sub_enlist(sub, e, &me);
    long backoff = 0;
    int listened = 0; /* the subscription was confirmed and a round made since */
    for (;;) {
        int64_t now = dlock__mono_ms();
        if (deadline >= 0 && now >= deadline) break;
        int64_t until = now + retry_ms;
        if (result == DLOCK_ERR_CONNECT) {
            backoff = dlock__wait_backoff(backoff);
            until = now + backoff;
        }
        if (deadline >= 0 && until > deadline) until = deadline;
        int subscribed = dlock__sub_wait_ready(sub, e, until);
        if (subscribed && listened && dlock__sub_wait(sub, e, until, &me, NULL))
            dlock__stats_woken(&c->stats, DLOCK_STATS_REDLOCK);
        listened = subscribed;
        result = rl_try_round(t, &retry_ms);
        if (result != DLOCK__BUSY && result != DLOCK_ERR_CONNECT) break;
    }
    dlock__sub_delist(sub, e, &me);
    dlock__sub_leave(sub, e);
    return result;
}

/* The end of an acquisition whose last round came to `result`: its
 * failure with a message, or the hold begun (renewals registered, the
 * fencing floors raised). DLOCK_ERR_SYS when a watchdog thread could not
 * start: the hold is then over here, and the caller gives it back. */
static dlock_status rl_acquired(rl_try *t, int result, int watchdog)
{
    dlock_redlock *rl = t->rl;
    if (result == DLOCK_ERR_CONNECT) /* No master answered at all: that is an outage, not contention. */
        return dlock__fail(t->last, "redlock '%s': no master reachable (%s)", rl->base.name, t->why);
    if (result == DLOCK__BUSY) {
        if (t->errors > 0)
            return dlock__fail(DLOCK_ERR_TIMEOUT, "redlock '%s': no majority (%zu of %zu granted; %s)", rl->base.name,
                               t->granted, rl->n, t->why);
        return dlock__fail(DLOCK_ERR_TIMEOUT, "redlock '%s': no majority (%zu of %zu granted)", rl->base.name,
                           t->granted, rl->n);
    }
    if (result != DLOCK_OK) return (dlock_status)result;
    rl->held = 1;
    rl->held_since = dlock__stats_clock();
    rl->validity_ms = t->validity;
    atomic_store(&rl->lost, 0);
    atomic_store(&rl->alive, (int)t->granted);
    rl->trusted_until = watchdog ? 0 : t->t0 + dlock__lease_trust_ms(t->lease, rl->masters[0]->safety_margin_pct);
    if (watchdog) {
        for (size_t i = 0; i < rl->n; i++) {
            rl_share *s = &rl->shares[i];
            if (!s->granted) continue;
            if (dlock__handle_renew(rl->masters[i], &s->wd, t->lease, t->t0) != DLOCK_OK) {
                rl_stop_renewal(rl);
                rl->held = 0;
                return dlock__fail(DLOCK_ERR_SYS, "cannot start the watchdog thread");
            }
            s->renewed = 1;
        }
    }
    /* Every master's next token goes above this one: tokens of this
     * process then rise across masters whatever their clocks say. */
    for (size_t i = 0; i < rl->n; i++) dlock__fence_note(&rl->masters[i]->fences, rl->base.fence, t->top);
    return DLOCK_OK;
}

/* What both acquires refuse before taking anything. */
static dlock_status rl_acquire_check(const dlock_redlock *rl, long wait_ms, long lease_ms)
{
    if (wait_ms < DLOCK_WAIT_FOREVER) return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    dlock_status bad = dlock__check_lease(lease_ms, 10, 1);
    if (bad != DLOCK_OK) return bad;
    if (rl->held) return dlock__fail(DLOCK_ERR_INVALID, "redlock '%s' is already held by this handle", rl->base.name);
    return DLOCK_OK;
}

static dlock_status rl_acquire(dlock_redlock *rl, long wait_ms, long lease_ms, long *validity_ms, uint64_t *token)
{
    dlock_status bad = rl_acquire_check(rl, wait_ms, lease_ms);
    if (bad != DLOCK_OK) return bad;
    int watchdog = lease_ms == DLOCK_LEASE_WATCHDOG;
    rl_try t = {.rl = rl, .last = DLOCK_OK};
    t.lease = watchdog ? rl->masters[0]->watchdog_lease_ms : lease_ms;
    t.drift = dlock__drift_ms(t.lease);
    int64_t deadline = dlock__deadline(wait_ms);
    long retry_ms = -1;
    int result = rl_try_round(&t, &retry_ms);
    if (dlock__should_wait(result, wait_ms)) result = rl_wait(&t, deadline, result, retry_ms);
    dlock_status st = rl_acquired(&t, result, watchdog);
    if (st == DLOCK_ERR_SYS) rl_release_all(rl, 0); /* the hold could not start */
    if (st != DLOCK_OK) return st;
    if (validity_ms) *validity_ms = t.validity;
    if (token) *token = t.top;
    return DLOCK_OK;
}

/* Every call is counted, however it ends (as dlock_lock_acquire), on the
 * first master's client: one RedLock, one place to look. */
dlock_status dlock_redlock_acquire(dlock_redlock *rl, long wait_ms, long lease_ms, long *validity_ms, uint64_t *token)
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
    rl_round(rl, 2, lease_ms, calls);
    size_t renewed = 0;
    for (size_t i = 0; i < rl->n; i++)
        if (calls[i].st == DLOCK_OK && calls[i].result == 1) renewed++;
    long validity = lease_ms - (long)(dlock__mono_ms() - t0) - dlock__drift_ms(lease_ms);
    if (renewed < rl->quorum || validity <= 0)
        return dlock__fail(DLOCK_ERR_LOST, "redlock '%s': extension reached %zu of %zu masters, need %zu",
                           rl->base.name, renewed, rl->n, rl->quorum);
    rl->lease_ms = lease_ms;
    rl->validity_ms = validity;
    if (rl->trusted_until) rl->trusted_until = t0 + dlock__lease_trust_ms(lease_ms, rl->masters[0]->safety_margin_pct);
    if (validity_ms) *validity_ms = validity;
    return DLOCK_OK;
}

/* The end of a release that `confirmed` masters answered holding our
 * share: DLOCK_OK, or DLOCK_ERR_LOST when that is under a majority or the
 * hold was found lost. Renewal has stopped already. */
static dlock_status rl_released(dlock_redlock *rl, size_t confirmed)
{
    rl->held = 0;
    /* Renewal has stopped, so rl->lost no longer changes under us. */
    dlock__stats_released(&rl->masters[0]->stats, DLOCK_STATS_REDLOCK, rl->held_since);
    if (!atomic_load(&rl->lost) && confirmed < rl->quorum)
        dlock__stats_lost(&rl->masters[0]->stats, DLOCK_STATS_REDLOCK);
    if (atomic_load(&rl->lost) || confirmed < rl->quorum)
        return dlock__fail(DLOCK_ERR_LOST, "redlock '%s' was held on only %zu of %zu masters at release", rl->base.name,
                           confirmed, rl->n);
    return DLOCK_OK;
}

dlock_status dlock_redlock_release(dlock_redlock *rl)
{
    if (!rl) return dlock__fail(DLOCK_ERR_INVALID, "redlock is NULL");
    if (!rl->held) return dlock__fail(DLOCK_ERR_NOT_OWNER, "redlock '%s' is not held by this handle", rl->base.name);
    rl_stop_renewal(rl);
    return rl_released(rl, rl_release_all(rl, 0));
}

/*
 * The asynchronous calls. An acquisition runs the synchronous one's steps
 * without a thread waiting: each round's answers come back to the
 * library thread that reads the last of them, which reads the round;
 * between rounds the acquisition sleeps as a watch on the first master's
 * subscriber (subscriber.h), armed for the round's pause and fired by it,
 * by a release published on the name's channel, or by the subscription's
 * confirmation (the first time: then it tries again at once, as rl_wait()
 * does). The first round is sent from the caller's thread, with a guard
 * on the count of answers so that the round cannot end in the caller's
 * hands unseen; when it does (a request could not go out and the others
 * were all answered before the call returned), the watch is armed to fire
 * at once, and the round is read on the subscriber's thread: a callback
 * never runs inside the call that started it.
 */
typedef struct rl_async {
    dlock__sub_watch watch; /* first: a fired watch leads back here */
    dlock_redlock *rl;
    rl_try t;
    rl_call calls[MAX_MASTERS];
    rl_round_wait w;
    struct dlock__subscriber *sub;
    dlock__sub_entry *e; /* joined on the first wait */
    int64_t deadline, since;
    long wait_ms, retry_ms, backoff;
    int result;   /* the last round's */
    int listened; /* the subscription was confirmed */
    int deferred; /* the watch fires to read a round that ended in the caller's hands */
    int watchdog;
    int release; /* a release (rl_release_async), not an acquisition */
    dlock_redlock_acquired_fn acquired;
    dlock_redlock_released_fn released;
    void *arg;
} rl_async;

static void rl_async_answered(rl_round_wait *w);

static rl_async *rl_async_of(rl_round_wait *w)
{
    return (rl_async *)((char *)w - offsetof(rl_async, w));
}

/* Join the name's channel on the first master, for the watch. */
static dlock_status rl_async_join(rl_async *a)
{
    if (a->e) return DLOCK_OK;
    a->watch.since = dlock__mono_ms();
    if (!(a->sub = dlock__client_subscriber(a->rl->masters[0])))
        return dlock__fail(DLOCK_ERR_SYS, "cannot start the subscriber thread");
    if (!(a->e = dlock__sub_join(a->sub, a->rl->base.channel))) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    return DLOCK_OK;
}

/* Have a round that ended in the caller's hands read on the subscriber's
 * thread: the watch, armed to fire at once. */
static dlock_status rl_async_defer(rl_async *a)
{
    dlock_status st = rl_async_join(a);
    if (st != DLOCK_OK) return st;
    a->deferred = 1;
    dlock__sub_arm(a->sub, a->e, &a->watch, dlock__mono_ms(), 0);
    return DLOCK_OK;
}

/* The last answer to a give-back: nobody waits for it. */
static void rl_async_answer_free(rl_round_wait *w)
{
    free(rl_async_of(w));
}

/* Give back a round's grants without waiting for the answers (a library
 * thread may not wait for them: it may be the one that reads them). */
static void rl_give_back_async(dlock_redlock *rl, int quiet)
{
    rl_async *g = calloc(1, sizeof *g);
    if (!g) return; /* the grants end with their leases */
    g->w = (rl_round_wait){PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, rl->n + 1, rl_async_answer_free};
    size_t unsent = rl_round_send(rl, quiet ? 3 : 1, rl->lease_ms > 0 ? rl->lease_ms : 1, g->calls, &g->w);
    if (rl_round_settle(&g->w, unsent + 1)) free(g);
    for (size_t i = 0; i < rl->n; i++) rl->shares[i].granted = 0;
}

/* The end, on a library thread: the outcome to the callback, the call
 * counted off the first master's client (which dlock_client_drain() waits
 * for). */
static void rl_async_end(rl_async *a, int result)
{
    dlock_redlock *rl = a->rl;
    dlock_client *c = rl->masters[0];
    if (a->e) dlock__sub_leave(a->sub, a->e);
    if (a->release) {
        dlock_status st = rl_released(rl, rl_confirmed(rl, a->calls));
        atomic_store(&rl->busy, 0);
        a->released(rl, st, a->arg);
    } else {
        dlock_status st = rl_acquired(&a->t, result, a->watchdog);
        if (st == DLOCK_ERR_SYS) rl_give_back_async(rl, 0);
        dlock__stats_acquired(&c->stats, DLOCK_STATS_REDLOCK, a->since, st);
        atomic_store(&rl->busy, 0);
        a->acquired(rl, st, st == DLOCK_OK ? a->t.top : 0, a->arg);
    }
    free(a);
    dlock__async_end(&c->async);
}

/* Send an acquisition's next round. `caller`: from the thread that made
 * the call, which must not see the callback run (see above). Not
 * DLOCK_OK only for the caller: nothing is under way, and the callback
 * will not run. */
static dlock_status rl_async_round(rl_async *a, int caller)
{
    dlock_redlock *rl = a->rl;
    dlock_status st = rl_round_begin(&a->t);
    if (st != DLOCK_OK) {
        if (caller) return st;
        rl_async_end(a, st);
        return DLOCK_OK;
    }
    a->w.left = rl->n + 1;
    size_t unsent = rl_round_send(rl, 0, a->t.lease, a->calls, &a->w);
    if (!rl_round_settle(&a->w, unsent + 1)) return DLOCK_OK;
    if (!caller) {
        rl_async_answered(&a->w);
        return DLOCK_OK;
    }
    if (unsent == rl->n) return a->calls[0].st;
    return rl_async_defer(a);
}

/* The last answer of a round is in (or the watch fired for one that ended
 * in the caller's hands). */
static void rl_async_answered(rl_round_wait *w)
{
    rl_async *a = rl_async_of(w);
    a->deferred = 0;
    if (a->release) {
        rl_async_end(a, DLOCK_OK);
        return;
    }
    int result = rl_round_result(&a->t, a->calls);
    if (result == DLOCK_OK) {
        rl_async_end(a, DLOCK_OK);
        return;
    }
    rl_give_back_async(a->rl, 1);
    a->result = result;
    int64_t now = dlock__mono_ms();
    if (a->wait_ms == 0 || (a->deadline >= 0 && now >= a->deadline)) {
        rl_async_end(a, result);
        return;
    }
    dlock_status st = rl_async_join(a);
    if (st != DLOCK_OK) {
        rl_async_end(a, st);
        return;
    }
    a->retry_ms = rl_backoff_ms();
    int64_t until = now + a->retry_ms;
    if (result == DLOCK_ERR_CONNECT) until = now + (a->backoff = dlock__wait_backoff(a->backoff));
    if (a->deadline >= 0 && until > a->deadline) until = a->deadline;
    dlock__sub_arm(a->sub, a->e, &a->watch, until, !a->listened);
}

/* The watch, on the subscriber thread: the pause is over, a release was
 * published, or the subscription is confirmed; or the first master's
 * client is being drained, which ends the acquisition. */
static void rl_async_fire(dlock__sub_watch *watch, int woken)
{
    rl_async *a = (rl_async *)watch;
    if (a->deferred) {
        rl_async_answered(&a->w);
        return;
    }
    dlock_client *c = a->rl->masters[0];
    if (woken == DLOCK__SUB_MESSAGE) dlock__stats_woken(&c->stats, DLOCK_STATS_REDLOCK);
    if (woken == DLOCK__SUB_READY) a->listened = 1;
    pthread_mutex_lock(&c->mu);
    int draining = c->draining;
    pthread_mutex_unlock(&c->mu);
    if (draining) {
        rl_async_end(a, dlock__fail(DLOCK_ERR_INVALID, "the client is shutting down (dlock_client_drain)"));
        return;
    }
    if (a->deadline >= 0 && dlock__mono_ms() >= a->deadline && woken != DLOCK__SUB_MESSAGE) {
        rl_async_end(a, a->result);
        return;
    }
    rl_async_round(a, 0);
}

/* A call's state, with the handle claimed and the call counted on the
 * first master's client; NULL with the status in *st. */
static rl_async *rl_async_new(dlock_redlock *rl, void *arg, dlock_status *st)
{
    if (atomic_exchange(&rl->busy, 1)) {
        *st = dlock__fail(DLOCK_ERR_INVALID, "redlock '%s' has an asynchronous call under way", rl->base.name);
        return NULL;
    }
    rl_async *a = calloc(1, sizeof *a);
    if (!a) *st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    else if ((*st = dlock__async_begin(&rl->masters[0]->async)) != DLOCK_OK) {
        free(a);
        a = NULL;
    }
    if (!a) {
        atomic_store(&rl->busy, 0);
        return NULL;
    }
    a->rl = rl;
    a->arg = arg;
    a->watch.fn = rl_async_fire;
    a->w = (rl_round_wait){PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, rl_async_answered};
    a->t.rl = rl;
    return a;
}

/* Undo rl_async_new() for a call that did not start. */
static void rl_async_abandon(rl_async *a)
{
    dlock_redlock *rl = a->rl;
    if (a->e) dlock__sub_leave(a->sub, a->e);
    free(a);
    atomic_store(&rl->busy, 0);
    dlock__async_end(&rl->masters[0]->async);
}

dlock_status dlock_redlock_acquire_async(dlock_redlock *rl, long wait_ms, long lease_ms, dlock_redlock_acquired_fn cb,
                                         void *arg)
{
    if (!rl || !cb) return dlock__fail(DLOCK_ERR_INVALID, "redlock or callback is NULL");
    dlock_status st = rl_acquire_check(rl, wait_ms, lease_ms);
    if (st != DLOCK_OK) return st;
    rl_async *a = rl_async_new(rl, arg, &st);
    if (!a) return st;
    a->acquired = cb;
    a->since = dlock__stats_clock();
    a->wait_ms = wait_ms;
    a->deadline = dlock__deadline(wait_ms);
    a->watchdog = lease_ms == DLOCK_LEASE_WATCHDOG;
    a->t.lease = a->watchdog ? rl->masters[0]->watchdog_lease_ms : lease_ms;
    a->t.drift = dlock__drift_ms(a->t.lease);
    if ((st = rl_async_round(a, 1)) != DLOCK_OK) rl_async_abandon(a);
    return st;
}

dlock_status dlock_redlock_release_async(dlock_redlock *rl, dlock_redlock_released_fn cb, void *arg)
{
    if (!rl || !cb) return dlock__fail(DLOCK_ERR_INVALID, "redlock or callback is NULL");
    if (!rl->held) return dlock__fail(DLOCK_ERR_NOT_OWNER, "redlock '%s' is not held by this handle", rl->base.name);
    dlock_status st;
    rl_async *a = rl_async_new(rl, arg, &st);
    if (!a) return st;
    a->released = cb;
    a->release = 1;
    a->t.lease = rl->lease_ms > 0 ? rl->lease_ms : 1;
    rl_stop_renewal(rl);
    a->w.left = rl->n + 1;
    size_t unsent = rl_round_send(rl, 1, a->t.lease, a->calls, &a->w);
    if (!rl_round_settle(&a->w, unsent + 1)) return DLOCK_OK;
    /* Every answer is in already (or nothing went out): read it on the
     * subscriber's thread, not in this call. */
    if ((st = rl_async_defer(a)) != DLOCK_OK) {
        /* Ended here after all: the hold is over, as the answers say. */
        (void)rl_released(rl, rl_confirmed(rl, a->calls));
        rl_async_abandon(a);
    }
    return st;
}

long dlock_redlock_validity(const dlock_redlock *rl)
{
    return rl && rl->held ? rl->validity_ms : 0;
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
