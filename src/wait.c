/*
 * The waiting loop behind every blocking acquire.
 *
 * Order matters: join the channel, wait until the subscription is
 * confirmed, try once more, and only then sleep. A release published
 * between the caller's first attempt and the subscription is caught by the
 * retry; one published after it wakes the sleeper. (A caller that joined
 * a confirmed subscription before its first attempt needs no retry:
 * dlock__wait_begin.) Sleeps are bounded by
 * how long the current holder can keep the resource (its remaining lease),
 * so a message lost with a broken connection costs at most that. Where no
 * such bound exists (a plain semaphore) a safety net of a few seconds
 * applies instead.
 */
#include "wait.h"

#include <string.h>

#include "client.h"
#include "subscriber.h"
#include "util.h"

#define UNSUBSCRIBED_POLL_MS DLOCK__WAIT_UNSUBSCRIBED_POLL_MS
#define SAFETY_NET_MS DLOCK__WAIT_SAFETY_NET_MS

/* Whether a hand-off from another process (dlock__sub_hand) may be taken:
 * not when its message came so late (a partition held it back) that much
 * of the lease counted from the offer has passed. Such a hand is marked
 * stale and the waiter tries instead: its attempt finds itself the owner
 * with no hold it knows of, if the lease still runs, and is granted afresh
 * with a new token and a whole lease; or it finds another owner. */
static int hand_taken(dlock__sub_hand *hand)
{
    if (!hand || !hand->got || hand->stale) return 0;
    if (dlock__mono_ms() - hand->sent < hand->fresh_ms) return 1;
    hand->stale = 1;
    return 0;
}

int dlock__wait_for(dlock_client *client, dlock_stats_kind kind, const char *channel, int64_t deadline_ms,
                    dlock__try_fn try, void *ctx, int first, long retry_ms, void *offer, dlock__sub_hand *hand,
                    dlock__early *early)
{
    dlock__early local = {0}, *in = early && early->e ? early : &local;
    /* The first attempt was made in line on a confirmed subscription: a
     * release after it wakes this wait, so it sleeps before the next. */
    int asleep_first = in == early && first == DLOCK__BUSY;
    if (in == &local) {
        if (!(in->sub = dlock__client_subscriber(client)))
            return dlock__fail(DLOCK_ERR_SYS, "cannot start the subscriber thread");
        if (!(in->e = dlock__sub_join(in->sub, channel))) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
        in->me.since = dlock__mono_ms();
        in->me.hand = hand;
        dlock__sub_enlist(in->sub, in->e, &in->me);
    } /* else joined by dlock__wait_begin, with the same hand */
    struct dlock__subscriber *sub = in->sub;
    dlock__sub_entry *e = in->e;
    int defer = first == DLOCK__DEFER;
    int result = defer ? DLOCK__BUSY : first;
    long backoff = 0;
    /* Woken by a message as the wait runs out: it still makes its attempt.
     * The message named this waiter; given up unused, it is spent, and
     * the other waiters of this process sleep on with the resource free
     * until their timed retry (seconds). So the caller may be granted a
     * little (one round trip) past its deadline. */
    int woken = 0;
    for (;;) {
        int64_t now = dlock__mono_ms();
        if (deadline_ms >= 0 && now >= deadline_ms && !woken) break;
        woken = 0;
        int64_t ready_by = now + 1000;
        if (deadline_ms >= 0 && ready_by > deadline_ms) ready_by = deadline_ms;
        int subscribed = dlock__sub_wait_ready(sub, e, ready_by);

        int64_t until;
        if (defer && subscribed) {
            /* Older waiters are in line: one of them is woken by the next
             * release, then this one in its turn. */
            defer = 0;
            until = now + SAFETY_NET_MS;
            if (deadline_ms >= 0 && until > deadline_ms) until = deadline_ms;
            int w = dlock__sub_wait(sub, e, until, &in->me, offer);
            if (w) dlock__stats_woken(&client->stats, kind);
            if (w == 2 || (w == 3 && hand_taken(hand))) {
                result = DLOCK_OK;
                break;
            }
            woken = w == 1;
            continue;
        }
        defer = 0;
        if (asleep_first) asleep_first = 0; /* `first` and `retry_ms` stand for this attempt */
        else result = try(ctx, &retry_ms);
        now = dlock__mono_ms();
        if (result == DLOCK_OK) {
            break;
        } else if (result == DLOCK_ERR_CONNECT) {
            backoff = dlock__wait_backoff(backoff);
            until = now + backoff;
        } else if (result != DLOCK__BUSY) {
            break;
        } else {
            backoff = 0;
            until = now + (retry_ms >= 0 && retry_ms < SAFETY_NET_MS ? retry_ms : SAFETY_NET_MS);
            if (!subscribed && until > now + UNSUBSCRIBED_POLL_MS) until = now + UNSUBSCRIBED_POLL_MS;
        }
        if (deadline_ms >= 0 && until > deadline_ms) until = deadline_ms;
        int w = until > now ? dlock__sub_wait(sub, e, until, &in->me, offer) : 0;
        if (w) dlock__stats_woken(&client->stats, kind);
        if (w == 2 || (w == 3 && hand_taken(hand))) {
            result = DLOCK_OK; /* handed over while asleep */
            break;
        }
        woken = w == 1;
    }
    dlock__wait_early_end(in);
    /* Handed over by another process while awake, or as the wait ended:
     * the lock is the caller's (delisted, no hand-off can come now). */
    if (result != DLOCK_OK && hand_taken(hand)) result = DLOCK_OK;
    return result;
}

/* The client's subscriber if it has one yet: these only look at waiters,
 * and a client nobody ever waited on has none to look at. */
static struct dlock__subscriber *existing_subscriber(dlock_client *client)
{
    pthread_mutex_lock(&client->mu);
    struct dlock__subscriber *sub = client->sub;
    pthread_mutex_unlock(&client->mu);
    return sub;
}

/* dlock__sub_begin() for a newcomer whose wait begins at me->since: the
 * barging bound is counted from there, for threads and asynchronous
 * acquires alike. */
static int begin(struct dlock__subscriber *sub, const char *channel, int may_defer, dlock__sub_watch *me, int in_line,
                 dlock__sub_entry **e)
{
    return dlock__sub_begin(sub, channel, may_defer ? me->since - DLOCK__BARGE_MS : -1, in_line ? me : NULL, e);
}

int dlock__wait_begin(dlock_client *client, const char *channel, int may_defer, int in_line, dlock__sub_hand *hand,
                      dlock__early *w)
{
    w->e = NULL;
    w->sub = existing_subscriber(client); /* none yet: nobody waits, nothing to be in line on */
    if (!w->sub || !(may_defer || in_line)) return DLOCK__SUB_TRY;
    memset(&w->me, 0, sizeof w->me);
    w->me.since = dlock__mono_ms();
    w->me.hand = hand; /* before the first attempt, which may offer */
    return begin(w->sub, channel, may_defer, &w->me, in_line, &w->e);
}

void dlock__wait_early_end(dlock__early *w)
{
    if (!w->e) return;
    dlock__sub_delist(w->sub, w->e, &w->me);
    dlock__sub_leave(w->sub, w->e);
    w->e = NULL;
}

/* Why a bound and not strict order: a releaser that takes the lock again
 * at once (barging) saves a wake-up per pair and keeps throughput up, but
 * unbounded it starves the waiters (a tail of many times the mean). Past
 * the bound, the process's newcomers queue, and the waiters are served in
 * the order they came (the subscriber wakes the oldest first). Between
 * processes, the plain lock's scripts do the same at Redis (acquire.lua:
 * the woken process has the free lock to itself for a moment). */
int dlock__wait_count(dlock_client *client, const char *channel)
{
    struct dlock__subscriber *sub = existing_subscriber(client);
    return sub ? dlock__sub_waiting(sub, channel) : 0;
}

void dlock__wait_wake(dlock_client *client, const char *channel)
{
    struct dlock__subscriber *sub = existing_subscriber(client);
    if (sub) dlock__sub_wake(sub, channel);
}

void *dlock__wait_claim(dlock_client *client, const char *channel, dlock__sub_watch **claimed)
{
    struct dlock__subscriber *sub = existing_subscriber(client);
    *claimed = NULL;
    return sub ? dlock__sub_claim(sub, channel, claimed) : NULL;
}

void dlock__wait_settle(dlock_client *client, dlock__sub_watch *claimed, int granted)
{
    if (claimed) dlock__sub_settle(existing_subscriber(client), claimed, granted);
}

/* ------------------------------------------------------------------------
 * Waiting without a thread. The order above (join, confirmation, attempt,
 * sleep) is kept by arming the first watch for the confirmation; every
 * later one sleeps as the loop above does. Replies come on the mux's
 * reader thread, watches fire on the subscriber thread: neither may wait
 * for a reply, so everything here only sends.
 * ------------------------------------------------------------------------ */

/* Out of line and off the channel, if joined. */
static void await_leave(dlock__await *w)
{
    if (w->e) {
        dlock__sub_delist(w->sub, w->e, &w->watch);
        dlock__sub_leave(w->sub, w->e);
    }
    w->e = NULL;
}

static void await_end(dlock__await *w, int result)
{
    await_leave(w);
    w->ops->done(w, result);
}

/* Join the channel and get in line: the wait's first step, after a busy
 * attempt or (bounded barging) instead of one. */
static dlock_status await_join(dlock__await *w)
{
    if (!(w->sub = dlock__client_subscriber(w->client)))
        return dlock__fail(DLOCK_ERR_SYS, "cannot start the subscriber thread");
    if (!(w->e = dlock__sub_join(w->sub, w->channel))) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock__sub_enlist(w->sub, w->e, &w->watch);
    return DLOCK_OK;
}

/* After an attempt that came to `result`: the end, or the watch armed for
 * the next attempt. */
static void await_step(dlock__await *w, int result)
{
    w->result = result;
    if ((result != DLOCK__BUSY && result != DLOCK_ERR_CONNECT) || w->wait_ms == 0) {
        await_end(w, result);
        return;
    }
    int64_t now = dlock__mono_ms();
    if (w->deadline >= 0 && now >= w->deadline) {
        await_end(w, result);
        return;
    }
    int64_t until;
    int want_ready = 0;
    if (!w->e) {
        dlock_status st = await_join(w);
        if (st != DLOCK_OK) {
            await_end(w, st);
            return;
        }
        until = now + 1000; /* as dlock__sub_wait_ready() above */
        want_ready = 1;
    } else if (result == DLOCK_ERR_CONNECT) {
        w->backoff = dlock__wait_backoff(w->backoff);
        until = now + w->backoff;
    } else {
        w->backoff = 0;
        long sleep = w->retry_ms >= 0 && w->retry_ms < SAFETY_NET_MS ? w->retry_ms : SAFETY_NET_MS;
        if (sleep > UNSUBSCRIBED_POLL_MS && !dlock__sub_ready(w->sub, w->e)) sleep = UNSUBSCRIBED_POLL_MS;
        until = now + sleep;
    }
    if (w->deadline >= 0 && until > w->deadline) until = w->deadline;
    dlock__sub_arm(w->sub, w->e, &w->watch, until, want_ready);
}

void dlock__await_reply(dlock_status st, redisReply *r, void *arg)
{
    dlock__await *w = arg;
    int result = st;
    w->retry_ms = -1;
    if (st == DLOCK_OK) result = w->ops->parse(w, r, &w->retry_ms);
    if (r) freeReplyObject(r);
    await_step(w, result);
}

/* The subscriber thread: a release, the confirmation, or a timer. At the
 * deadline the wait ends with the last attempt's result, as above, except
 * after a release's message, which is owed its attempt (dlock__wait_for
 * says why). */
static void await_fire(dlock__sub_watch *watch, int woken)
{
    dlock__await *w = (dlock__await *)watch;
    if (woken == DLOCK__SUB_MESSAGE || woken == DLOCK__SUB_GRANTED || woken == DLOCK__SUB_HANDED)
        dlock__stats_woken(&w->client->stats, w->kind);
    /* Handed over by this client's release (dlock__wait_claim: the offer
     * says how) or another process's (the hand says how, if still fresh;
     * a stale one is tried instead, as a thread does). */
    if (woken == DLOCK__SUB_GRANTED || (woken == DLOCK__SUB_HANDED && hand_taken(watch->hand))) {
        await_end(w, DLOCK_OK);
        return;
    }
    if (w->deadline >= 0 && dlock__mono_ms() >= w->deadline && woken != DLOCK__SUB_MESSAGE) {
        await_end(w, w->result);
        return;
    }
    dlock_status st = w->ops->send(w);
    if (st != DLOCK_OK) await_step(w, st);
}

dlock_status dlock__await_start(dlock__await *w, const dlock__await_ops *ops, dlock_client *client,
                                dlock_stats_kind kind, const char *channel, long wait_ms, int how,
                                dlock__sub_hand *hand)
{
    w->watch.fn = await_fire;
    w->ops = ops;
    w->client = client;
    w->kind = kind;
    w->channel = channel;
    w->wait_ms = wait_ms;
    w->deadline = dlock__deadline(wait_ms);
    w->watch.since = dlock__mono_ms();
    w->watch.hand = hand; /* before the first attempt, which may offer */
    w->watch.line = NULL;
    w->backoff = 0;
    w->e = NULL;
    int first = DLOCK__SUB_TRY;
    if (how != DLOCK__AWAIT_TRY && wait_ms != 0 && (w->sub = existing_subscriber(client)))
        first = begin(w->sub, channel, how == DLOCK__AWAIT_BOUNDED, &w->watch, 1, &w->e);
    if (first == DLOCK__SUB_IN_LINE) {
        /* Joined on a confirmed subscription, the attempt is made in line
         * and a busy answer sleeps at once (await_step: `e` is set). */
        dlock_status st = ops->send(w);
        if (st != DLOCK_OK) await_leave(w); /* nothing sent: done will not run */
        return st;
    }
    if (first == DLOCK__SUB_DEFER) {
        /* No attempt: straight into line. What could fail on the way is
         * checked here, so that the callback never runs inside the call. */
        dlock_status st = await_join(w);
        if (st != DLOCK_OK) return st;
        w->result = DLOCK__BUSY;
        int ready = dlock__sub_ready(w->sub, w->e);
        int64_t until = dlock__mono_ms() + (ready ? SAFETY_NET_MS : 1000);
        if (w->deadline >= 0 && until > w->deadline) until = w->deadline;
        dlock__sub_arm(w->sub, w->e, &w->watch, until, !ready);
        return DLOCK_OK;
    }
    return ops->send(w);
}
