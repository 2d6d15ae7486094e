/*
 * The rate limiter: GCRA in one script per decision (rate_acquire.lua),
 * settings stored with the limit (rate_set.lua), and waiters that sleep
 * until their permits are due, woken early on the limit's channel when
 * its settings change. See docs/design/rate.md.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "client.h"
#include "handle.h"
#include "subscriber.h"
#include "util.h"
#include "wait.h"

#define RATE_MAX 0x7fffffffL
#define SUBJECT_MAX 512
/* "dlock:{NAME}:rate" + ":tat:" + a subject, with the longest name. */
#define RATE_KEY_MAX 1100

static const dlock__handle_keys rate_keys = {":rate", NULL, ":rate:ch"};

struct dlock_rate {
    dlock__handle base; /* first: client, name, keys (key: the settings) */
    /* The settings last known to be stored: sent with every decision, to
     * be written only if the server lost them, and refreshed from every
     * answer, so a handle re-creates what the limit was changed to, not
     * what it was opened with. */
    atomic_long rate, interval_ms, burst;
};

/* ------------------------------------------------------------------------
 * Settings
 * ------------------------------------------------------------------------ */

/* The settings of *opts with the defaults filled in, checked. */
static dlock_status settings_check(const dlock_rate_options *opts, dlock_rate_options *out)
{
    if (!opts) return dlock__fail(DLOCK_ERR_INVALID, "rate options are NULL");
    *out = *opts;
    if (out->interval_ms == 0) out->interval_ms = 1000;
    if (out->burst == 0) out->burst = out->rate;
    if (out->rate < 1 || out->rate > RATE_MAX) return dlock__fail(DLOCK_ERR_INVALID, "rate must be 1 to %ld", RATE_MAX);
    if (out->interval_ms < 1 || out->interval_ms > DLOCK_RATE_INTERVAL_MAX_MS)
        return dlock__fail(DLOCK_ERR_INVALID, "interval must be 1 to %ld ms", DLOCK_RATE_INTERVAL_MAX_MS);
    if (out->burst < 1 || out->burst > RATE_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "burst must be 1 to %ld", RATE_MAX);
    if ((long long)out->burst * out->interval_ms > DLOCK_RATE_SPAN_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "burst x interval must be at most %lld ms (here %ld x %ld)",
                           DLOCK_RATE_SPAN_MAX, out->burst, out->interval_ms);
    return DLOCK_OK;
}

static void settings_remember(dlock_rate *r, long rate, long interval_ms, long burst)
{
    atomic_store_explicit(&r->rate, rate, memory_order_relaxed);
    atomic_store_explicit(&r->interval_ms, interval_ms, memory_order_relaxed);
    atomic_store_explicit(&r->burst, burst, memory_order_relaxed);
}

/* Integer element i of a script's array answer, or `bad` when missing. */
static long long element_int(const redisReply *rep, size_t i, long long bad)
{
    if (rep->type != REDIS_REPLY_ARRAY || i >= rep->elements || rep->element[i]->type != REDIS_REPLY_INTEGER)
        return bad;
    return rep->element[i]->integer;
}

/* Run rate_set.lua: store, check or (`change`) replace the settings.
 * *how as the script answers it (1 stored, 0 same, -1 others, 2 replaced). */
static dlock_status settings_store(dlock_rate *r, const dlock_rate_options *o, int change, int *how)
{
    dlock_client *c = r->base.client;
    char rate[24], interval[24], burst[24];
    const char *keys[2] = {r->base.key, r->base.channel};
    const char *args[5] = {dlock__fmt_ll(o->rate, rate), dlock__fmt_ll(o->interval_ms, interval),
                           dlock__fmt_ll(o->burst, burst), change ? "1" : "0", c->publish};
    redisReply *rep;
    dlock_status st = dlock__eval(c, DLOCK__SCRIPT_RATE_SET, 2, keys, 5, args, &rep, NULL);
    if (st != DLOCK_OK) return st;
    long long h = element_int(rep, 0, -9), sr = element_int(rep, 1, 0), si = element_int(rep, 2, 0),
              sb = element_int(rep, 3, 0);
    freeReplyObject(rep);
    if (h < -1 || h > 2 || sr < 1 || si < 1 || sb < 1)
        return dlock__fail(DLOCK_ERR_REDIS, "rate limit '%s': unexpected answer to the settings script", r->base.name);
    *how = (int)h;
    if (h == -1) {
        settings_remember(r, (long)sr, (long)si, (long)sb);
        return dlock__fail(DLOCK_ERR_INVALID,
                           "rate limit '%s' is stored as %lld per %lld ms, burst %lld; asked for %ld per %ld ms, "
                           "burst %ld (open it with change set to replace them)",
                           r->base.name, sr, si, sb, o->rate, o->interval_ms, o->burst);
    }
    settings_remember(r, o->rate, o->interval_ms, o->burst);
    return DLOCK_OK;
}

dlock_status dlock_rate_new(dlock_client *client, const char *name, const dlock_rate_options *opts, dlock_rate **out)
{
    if (!out) return dlock__fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    dlock_rate_options o;
    dlock_status st = settings_check(opts, &o);
    if (st != DLOCK_OK) return st;
    dlock__handle *h = NULL;
    if ((st = dlock__handle_new(sizeof(dlock_rate), client, name, &rate_keys, &h)) != DLOCK_OK) return st;
    dlock_rate *r = (dlock_rate *)h;
    int how;
    if ((st = dlock__scripts_ensure(client)) != DLOCK_OK || (st = settings_store(r, &o, o.change, &how)) != DLOCK_OK) {
        dlock_rate_free(r);
        return st;
    }
    *out = r;
    return DLOCK_OK;
}

void dlock_rate_free(dlock_rate *r)
{
    if (!r) return;
    dlock__handle_destroy(&r->base, NULL);
    free(r);
}

dlock_status dlock_rate_set(dlock_rate *r, const dlock_rate_options *opts, int *changed)
{
    if (changed) *changed = 0;
    if (!r) return dlock__fail(DLOCK_ERR_INVALID, "rate limit is NULL");
    dlock_rate_options o;
    dlock_status st = settings_check(opts, &o);
    int how = 0;
    if (st == DLOCK_OK) st = settings_store(r, &o, 1, &how);
    if (st == DLOCK_OK && changed) *changed = how == 2;
    return st;
}

/* ------------------------------------------------------------------------
 * Decisions
 * ------------------------------------------------------------------------ */

/* The keys and arguments of one run of rate_acquire.lua. */
typedef struct rate_call {
    char key[RATE_KEY_MAX];
    char n[24], rate[24], interval[24], burst[24];
    const char *keys[2], *args[5];
} rate_call;

static dlock_status check_subject(const char *subject)
{
    if (!subject) return DLOCK_OK;
    size_t len = strlen(subject);
    if (len < 1 || len > SUBJECT_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "subject must be 1 to %d bytes", SUBJECT_MAX);
    return DLOCK_OK;
}

/* The bucket of `subject` (NULL: the whole limit's) and the arguments
 * for `permits`, taken (`take`) or only looked at. The subject was
 * checked, so the key fits. */
static void rate_call_make(dlock_rate *r, const char *subject, long permits, int take, rate_call *c)
{
    snprintf(c->key, sizeof c->key, "%s:tat%s%s", r->base.key, subject ? ":" : "", subject ? subject : "");
    c->keys[0] = r->base.key;
    c->keys[1] = c->key;
    c->args[0] = dlock__fmt_ll(permits, c->n);
    c->args[1] = take ? "1" : "0";
    c->args[2] = dlock__fmt_ll(atomic_load_explicit(&r->rate, memory_order_relaxed), c->rate);
    c->args[3] = dlock__fmt_ll(atomic_load_explicit(&r->interval_ms, memory_order_relaxed), c->interval);
    c->args[4] = dlock__fmt_ll(atomic_load_explicit(&r->burst, memory_order_relaxed), c->burst);
}

/* Read a decision: DLOCK_OK (allowed), DLOCK__BUSY (not yet: when in
 * res->retry_after_ms), or a failure: more than the burst, a bad answer. */
static int decision_parse(dlock_rate *r, const redisReply *rep, long permits, dlock_rate_result *res)
{
    long long v[7];
    for (size_t i = 0; i < 7; i++) v[i] = element_int(rep, i, -2);
    if (rep->type == REDIS_REPLY_ERROR)
        return dlock__fail(DLOCK_ERR_REDIS, "rate limit '%s': %s", r->base.name, rep->str);
    if (v[0] < 0 || v[1] < 0 || v[2] < -1 || v[3] < 0 || v[4] < 1 || v[5] < 1 || v[6] < 1)
        return dlock__fail(DLOCK_ERR_REDIS, "rate limit '%s': unexpected answer to the rate script", r->base.name);
    res->allowed = v[0] == 1;
    res->remaining = (long)v[1];
    res->retry_after_ms = (long)v[2];
    res->reset_ms = (long)v[3];
    res->rate = (long)v[4];
    res->interval_ms = (long)v[5];
    res->burst = (long)v[6];
    if (res->rate != atomic_load_explicit(&r->rate, memory_order_relaxed) ||
        res->interval_ms != atomic_load_explicit(&r->interval_ms, memory_order_relaxed) ||
        res->burst != atomic_load_explicit(&r->burst, memory_order_relaxed))
        settings_remember(r, res->rate, res->interval_ms, res->burst);
    if (res->allowed) return DLOCK_OK;
    if (res->retry_after_ms < 0)
        return dlock__fail(DLOCK_ERR_INVALID, "rate limit '%s': %ld permits are more than its burst of %ld",
                           r->base.name, permits, res->burst);
    return DLOCK__BUSY;
}

/* One synchronous decision (or look). */
static int decide(dlock_rate *r, const char *subject, long permits, int take, dlock_rate_result *res)
{
    rate_call c;
    rate_call_make(r, subject, permits, take, &c);
    redisReply *rep;
    dlock_status st = dlock__eval(r->base.client, DLOCK__SCRIPT_RATE_ACQUIRE, 2, c.keys, 5, c.args, &rep, NULL);
    if (st != DLOCK_OK) return st;
    int result = decision_parse(r, rep, permits, res);
    freeReplyObject(rep);
    return result;
}

/* The arguments every call checks. */
static dlock_status call_check(dlock_rate *r, const char *subject, long permits, long wait_ms)
{
    if (!r) return dlock__fail(DLOCK_ERR_INVALID, "rate limit is NULL");
    if (permits < 1 || permits > RATE_MAX) return dlock__fail(DLOCK_ERR_INVALID, "permits must be 1 to %ld", RATE_MAX);
    if (wait_ms < DLOCK_WAIT_FOREVER) return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    return check_subject(subject);
}

/* A refusal's status and message. */
static dlock_status not_in_time(dlock_rate *r, long permits, const dlock_rate_result *res)
{
    return dlock__fail(DLOCK_ERR_TIMEOUT, "rate limit '%s': %ld permits due in %ld ms", r->base.name, permits,
                       res->retry_after_ms);
}

/* Whether permits due `retry_ms` after `now` come too late for `deadline`
 * (-1: none): the wait then ends at once rather than sleep in vain. */
static int due_too_late(int64_t now, long retry_ms, int64_t deadline)
{
    return deadline >= 0 && now + retry_ms > deadline;
}

/*
 * The wait. Not dlock__wait_for(): a lock's waiter sleeps until a release
 * or at most a safety net (a lost message must not cost a whole lease),
 * while here nothing is released: permits fall due at a time the script
 * names exactly, so the waiter sleeps exactly that long on a timer, and
 * the channel only carries changes of the settings, which may move that
 * time. The order is a lock's: join the channel, wait for the
 * subscription, decide again (a change between the first decision and
 * the subscription is caught by it), and only then sleep.
 */
static int rate_wait(dlock_rate *r, const char *subject, long permits, int64_t deadline, int first,
                     dlock_rate_result *res)
{
    dlock_client *client = r->base.client;
    struct dlock__subscriber *sub = dlock__client_subscriber(client);
    if (!sub) return dlock__fail(DLOCK_ERR_SYS, "cannot start the subscriber thread");
    dlock__sub_entry *e = dlock__sub_join(sub, r->base.channel);
    if (!e) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock__sub_watch me;
    memset(&me, 0, sizeof me);
    me.since = dlock__mono_ms();
    dlock__sub_enlist(sub, e, &me);
    int64_t now = dlock__mono_ms();
    int result = first;
    if (result != DLOCK__BUSY || !due_too_late(now, res->retry_after_ms, deadline)) {
        int64_t ready_by = now + 1000;
        if (deadline >= 0 && ready_by > deadline) ready_by = deadline;
        (void)dlock__sub_wait_ready(sub, e, ready_by);
        result = decide(r, subject, permits, 1, res);
    }
    long backoff = 0;
    for (;;) {
        now = dlock__mono_ms();
        int64_t until;
        if (result == DLOCK__BUSY) {
            if (due_too_late(now, res->retry_after_ms, deadline)) break;
            backoff = 0;
            until = now + res->retry_after_ms;
            /* A change published while the subscription is down would be
             * missed: look again soon until it is back. */
            if (!dlock__sub_ready(sub, e) && until > now + DLOCK__WAIT_UNSUBSCRIBED_POLL_MS)
                until = now + DLOCK__WAIT_UNSUBSCRIBED_POLL_MS;
        } else if (result == DLOCK_ERR_CONNECT) {
            if (deadline >= 0 && now >= deadline) break;
            backoff = dlock__wait_backoff(backoff);
            until = now + backoff;
            if (deadline >= 0 && until > deadline) until = deadline;
        } else {
            break;
        }
        if (until > now && dlock__sub_wait(sub, e, until, &me, NULL) == 1)
            dlock__stats_woken(&client->stats, DLOCK_STATS_RATE);
        result = decide(r, subject, permits, 1, res);
    }
    dlock__sub_delist(sub, e, &me);
    dlock__sub_leave(sub, e);
    return result;
}

static dlock_status rate_acquire(dlock_rate *r, const char *subject, long permits, long wait_ms, dlock_rate_result *res)
{
    dlock_status bad = call_check(r, subject, permits, wait_ms);
    if (bad != DLOCK_OK) return bad;
    int64_t deadline = dlock__deadline(wait_ms);
    int result = decide(r, subject, permits, 1, res);
    if (dlock__should_wait(result, wait_ms) &&
        !(result == DLOCK__BUSY && due_too_late(dlock__mono_ms(), res->retry_after_ms, deadline)))
        result = rate_wait(r, subject, permits, deadline, result, res);
    if (result == DLOCK__BUSY) return not_in_time(r, permits, res);
    return (dlock_status)result;
}

/* Every call is counted, however it ends (as dlock_lock_acquire). */
dlock_status dlock_rate_acquire(dlock_rate *r, const char *subject, long permits, long wait_ms, dlock_rate_result *res)
{
    dlock_rate_result mine;
    if (!res) res = &mine;
    memset(res, 0, sizeof *res);
    if (!r) return dlock__fail(DLOCK_ERR_INVALID, "rate limit is NULL");
    int64_t since = dlock__stats_clock();
    dlock_status st = rate_acquire(r, subject, permits, wait_ms, res);
    dlock__stats_acquired(&r->base.client->stats, DLOCK_STATS_RATE, since, st);
    return st;
}

dlock_status dlock_rate_try(dlock_rate *r, const char *subject, long permits, dlock_rate_result *res)
{
    return dlock_rate_acquire(r, subject, permits, 0, res);
}

dlock_status dlock_rate_status(dlock_rate *r, const char *subject, long permits, dlock_rate_result *res)
{
    if (!res) return dlock__fail(DLOCK_ERR_INVALID, "result is NULL");
    memset(res, 0, sizeof *res);
    dlock_status st = call_check(r, subject, permits, 0);
    if (st != DLOCK_OK) return st;
    int result = decide(r, subject, permits, 0, res);
    return result == DLOCK__BUSY ? DLOCK_OK : (dlock_status)result;
}

/* ------------------------------------------------------------------------
 * The asynchronous acquire: the decisions of the wait above, each sent
 * without waiting for its answer, and between them a watch on the
 * subscriber armed for the time the permits fall due (or the
 * confirmation of the subscription, first), which a change of the
 * settings fires early. One call at a time per handle, as for the
 * semaphore's.
 * ------------------------------------------------------------------------ */

typedef struct rate_async {
    dlock__sub_watch watch; /* first: a fired watch leads back here */
    dlock_rate *r;
    dlock__thread_rec *rec; /* the handle's record 0: one call at a time */
    struct dlock__subscriber *sub;
    dlock__sub_entry *e; /* the channel, once joined */
    char subject[SUBJECT_MAX + 1];
    int has_subject;
    long permits, wait_ms, backoff;
    int64_t deadline, since;
    int result; /* the last decision's */
    dlock_rate_result res;
    dlock_rate_fn cb;
    void *arg;
} rate_async;

static void async_send(rate_async *op);

/* The end, exactly once: off the channel, the callback, with the
 * thread's last error set. */
static void async_end(rate_async *op, int result)
{
    if (op->e) {
        dlock__sub_delist(op->sub, op->e, &op->watch);
        dlock__sub_leave(op->sub, op->e);
    }
    dlock_rate *r = op->r;
    dlock_client *c = r->base.client;
    dlock_status st = (dlock_status)result;
    if (result == DLOCK__BUSY) st = not_in_time(r, op->permits, &op->res);
    dlock__stats_acquired(&c->stats, DLOCK_STATS_RATE, op->since, st);
    dlock_rate_result res = op->res;
    int has_res = st == DLOCK_OK || st == DLOCK_ERR_TIMEOUT;
    dlock__thread_rec *rec = op->rec;
    dlock_rate_fn cb = op->cb;
    void *arg = op->arg;
    free(op);
    dlock__handle_async_done(rec);
    cb(r, st, has_res ? &res : NULL, arg);
    dlock__async_end(&c->async);
}

/* After a decision that came to `result`: the end, or the watch armed
 * for the next one, as in rate_wait(). */
static void async_step(rate_async *op, int result)
{
    op->result = result;
    int64_t now = dlock__mono_ms();
    int waits = op->wait_ms != 0 && (result == DLOCK__BUSY || result == DLOCK_ERR_CONNECT);
    if (!waits || (result == DLOCK__BUSY && due_too_late(now, op->res.retry_after_ms, op->deadline)) ||
        (result == DLOCK_ERR_CONNECT && op->deadline >= 0 && now >= op->deadline)) {
        async_end(op, result);
        return;
    }
    int64_t until;
    int want_ready = 0;
    if (!op->e) {
        if (!(op->sub = dlock__client_subscriber(op->r->base.client))) {
            async_end(op, dlock__fail(DLOCK_ERR_SYS, "cannot start the subscriber thread"));
            return;
        }
        if (!(op->e = dlock__sub_join(op->sub, op->r->base.channel))) {
            async_end(op, dlock__fail(DLOCK_ERR_NOMEM, "out of memory"));
            return;
        }
        dlock__sub_enlist(op->sub, op->e, &op->watch);
        until = now + 1000; /* the confirmation, then a decision again */
        want_ready = 1;
    } else if (result == DLOCK_ERR_CONNECT) {
        op->backoff = dlock__wait_backoff(op->backoff);
        until = now + op->backoff;
    } else {
        op->backoff = 0;
        until = now + op->res.retry_after_ms;
        if (!dlock__sub_ready(op->sub, op->e) && until > now + DLOCK__WAIT_UNSUBSCRIBED_POLL_MS)
            until = now + DLOCK__WAIT_UNSUBSCRIBED_POLL_MS;
    }
    if (op->deadline >= 0 && until > op->deadline) until = op->deadline;
    dlock__sub_arm(op->sub, op->e, &op->watch, until, want_ready);
}

static void on_decision(dlock_status st, redisReply *rep, void *arg)
{
    rate_async *op = arg;
    int result = st;
    if (st == DLOCK_OK) result = decision_parse(op->r, rep, op->permits, &op->res);
    if (rep) freeReplyObject(rep);
    async_step(op, result);
}

/* The subscriber thread: the time is due, a change, the confirmation, or
 * dlock_client_drain() (whose refusal of the next send ends the wait). */
static void on_fire(dlock__sub_watch *w, int woken)
{
    rate_async *op = (rate_async *)w;
    if (woken == DLOCK__SUB_MESSAGE) dlock__stats_woken(&op->r->base.client->stats, DLOCK_STATS_RATE);
    async_send(op);
}

static void async_send(rate_async *op)
{
    rate_call c;
    rate_call_make(op->r, op->has_subject ? op->subject : NULL, op->permits, 1, &c);
    dlock_status st =
        dlock__async_script(op->r->base.client, DLOCK__SCRIPT_RATE_ACQUIRE, 2, c.keys, 5, c.args, on_decision, op);
    if (st != DLOCK_OK) async_end(op, st);
}

dlock_status dlock_rate_acquire_async(dlock_rate *r, const char *subject, long permits, long wait_ms, dlock_rate_fn cb,
                                      void *arg)
{
    if (!cb) return dlock__fail(DLOCK_ERR_INVALID, "callback is NULL");
    dlock_status st = call_check(r, subject, permits, wait_ms);
    if (st != DLOCK_OK) return st;
    dlock__thread_rec *rec;
    rate_async *op = dlock__handle_async_op(&r->base, sizeof *op, &rec, &st);
    if (!op) return st;
    op->watch.fn = on_fire;
    op->watch.since = dlock__mono_ms();
    op->r = r;
    op->rec = rec;
    op->has_subject = subject != NULL;
    if (subject) memcpy(op->subject, subject, strlen(subject) + 1);
    op->permits = permits;
    op->wait_ms = wait_ms;
    op->deadline = dlock__deadline(wait_ms);
    op->since = dlock__stats_clock();
    op->cb = cb;
    op->arg = arg;
    rate_call c;
    rate_call_make(r, subject, permits, 1, &c);
    st = dlock__async_script(r->base.client, DLOCK__SCRIPT_RATE_ACQUIRE, 2, c.keys, 5, c.args, on_decision, op);
    if (st != DLOCK_OK) {
        free(op);
        dlock__handle_async_abandon(&r->base, rec);
    }
    return st;
}
