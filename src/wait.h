/* Waiting without polling, shared by every primitive. */
#ifndef DLOCK__WAIT_H
#define DLOCK__WAIT_H

#include <stdint.h>

#include <hiredis/hiredis.h>

#include "dlock.h"
#include "subscriber.h"

/* How long a waiter trusts a not-yet-confirmed subscription before it
 * retries anyway: only matters while the pub/sub connection is down. */
#define DLOCK__WAIT_UNSUBSCRIBED_POLL_MS 200
/* Longest sleep when the holder's lease is unknown. */
#define DLOCK__WAIT_SAFETY_NET_MS 2000

/* The next pause after a server could not be reached: 50 ms, doubling to
 * 1 s. */
static inline long dlock__wait_backoff(long backoff)
{
    return backoff ? (backoff * 2 > 1000 ? 1000 : backoff * 2) : 50;
}

/* Result of one attempt besides DLOCK_OK and failures: not available yet. */
#define DLOCK__BUSY 1

/* How long to wait before trying again, from the milliseconds a holder's
 * lease has left (PTTL: -1 none, -2 gone). A lease with under a
 * millisecond left reads 0, and the key is gone only once the server's
 * clock passes its millisecond: retrying at once would ask again and again
 * until then (waits that a lease running out ends made up to 47 attempts,
 * all but three in that last millisecond), so 0 means 1 ms. Gone means
 * at once. */
static inline long dlock__retry_after(long pttl)
{
    return pttl == -2 ? 0 : pttl == 0 ? 1 : pttl;
}

/* `first` of dlock__wait_for() when no attempt was made: the caller
 * defers to older waiters of its process (dlock__wait_begin()). */
#define DLOCK__DEFER 2

/* How long a waiter may wait before the newcomers of its process stop
 * trying first and queue behind it (bounded barging). */
#define DLOCK__BARGE_MS 2

/* How many of this client's threads and asynchronous acquisitions wait
 * on `channel` now (0 when none has ever waited). */
int dlock__wait_count(dlock_client *client, const char *channel);

/* Wake the waiter of this client on `channel` that a message there would
 * wake: a release that found this client next in line (release.lua) does
 * it itself rather than publish. */
void dlock__wait_wake(dlock_client *client, const char *channel);

/*
 * One attempt to take whatever the caller waits for. Returns DLOCK_OK when
 * taken, DLOCK__BUSY when not (setting *retry_ms to how long the current
 * holder can keep it at most, or -1 when unknown), or a failure status.
 */
typedef int (*dlock__try_fn)(void *ctx, long *retry_ms);

/*
 * Whether a first attempt that came to `result` should go on to
 * dlock__wait_for(): when the caller is willing to wait, a server that cannot
 * be reached right now (restarting, failing over) is waited for like a
 * busy lock, until the caller's deadline.
 */
static inline int dlock__should_wait(int result, long wait_ms)
{
    return (result == DLOCK__BUSY || result == DLOCK_ERR_CONNECT) && wait_ms != 0;
}

/*
 * A wait begun before the first attempt. A waiter normally joins the
 * channel only after a first attempt found the resource busy, waits for
 * the subscription, and tries again before it sleeps: a release between
 * the first attempt and the subscription would otherwise be missed. When
 * the client is subscribed to the channel already (another wait used it
 * within the last second), the caller can join and get in line first;
 * its first attempt is then made as a waiter (it registers its process,
 * acquire.lua), and when that finds the resource busy the wait sleeps at
 * once: one attempt per wait instead of two, in the steady state of a
 * contended lock.
 */
typedef struct dlock__early {
    struct dlock__subscriber *sub;
    dlock__sub_entry *e; /* NULL: not joined */
    dlock__sub_watch me; /* in line on e, since the call */
} dlock__early;

/* How a wait begins, before its first attempt, in one look at the
 * client's subscriber: DLOCK__SUB_DEFER when `may_defer` and a waiter of
 * this client on `channel` has waited longer than DLOCK__BARGE_MS (the
 * newcomer should queue behind it rather than try: bounded barging);
 * DLOCK__SUB_IN_LINE when `in_line` and the client's subscription to
 * `channel` is confirmed (joined, and in line before the first attempt);
 * else DLOCK__SUB_TRY, nothing done. Whatever it answers, `w` goes to
 * dlock__wait_for() (with the same `hand`, which a first attempt made in
 * line may already have offered), or to dlock__wait_early_end() when no
 * wait follows. */
int dlock__wait_begin(dlock_client *client, const char *channel, int may_defer, int in_line, dlock__sub_hand *hand,
                      dlock__early *w);
void dlock__wait_early_end(dlock__early *w);

/*
 * Wait on `channel` and call `try` until it succeeds, fails hard, or
 * `deadline_ms` (-1: none) passes. The caller has already made one attempt,
 * which came to `first` (DLOCK__BUSY with `retry_ms`, or DLOCK_ERR_CONNECT),
 * or none (DLOCK__DEFER): then it sleeps first, in line behind the older
 * waiters, until a release wakes it.
 * Connection failures are waited out with backoff until the deadline. At
 * the deadline the last attempt's result is returned: DLOCK__BUSY when the
 * resource was taken, DLOCK_ERR_CONNECT when the server could not be
 * reached to find out. Wake-ups count in the client's metrics as `kind`.
 * With an `offer` (NULL: none), a releaser of this client may hand the
 * resource over while the caller sleeps (dlock__wait_claim): the wait then
 * ends with DLOCK_OK and no attempt, the offer filled in by the releaser.
 * With a `hand` (NULL: none), another process's release may hand it over
 * (subscriber.h, dlock__sub_hand): the wait ends with DLOCK_OK and
 * hand->got set, whether the caller slept or was making an attempt then
 * (an attempt that succeeds meanwhile wins: hand->got is then stale), if
 * the hand came in time (hand->fresh_ms after hand->sent); a later one is
 * marked hand->stale and the wait tries again instead.
 * With `early` joined (dlock__wait_begin: NULL or not joined, the wait
 * joins here), a first attempt that came to DLOCK__BUSY was made in line
 * on a confirmed subscription, and the wait sleeps before its next.
 */
int dlock__wait_for(dlock_client *client, dlock_stats_kind kind, const char *channel, int64_t deadline_ms,
                    dlock__try_fn try, void *ctx, int first, long retry_ms, void *offer, dlock__sub_hand *hand,
                    dlock__early *early);

/* The releaser's side of that hand-off: the offer of the waiter of this
 * client on `channel` that a wake-up would go to next, claimed (*claimed
 * set; it sleeps on until settled), or NULL (*claimed NULL). */
void *dlock__wait_claim(dlock_client *client, const char *channel, dlock__sub_watch **claimed);

/* The hand-off done (`granted` 1, the offer filled in) or not (0: the
 * waiter sleeps on); a NULL `claimed` is ignored. */
void dlock__wait_settle(dlock_client *client, dlock__sub_watch *claimed, int granted);

/*
 * The same wait without a thread, for the asynchronous acquisitions: each
 * attempt is a call the primitive sends with dlock__async_eval() (callback
 * dlock__await_reply, argument the await), and between attempts a watch on
 * the subscriber (subscriber.h) stands in for the sleeping thread, woken by
 * the same events at the same times as dlock__wait_for().
 */
typedef struct dlock__await dlock__await;

typedef struct dlock__await_ops {
    /* Send one attempt; not DLOCK_OK when it could not be sent (message
     * set), which counts as that attempt's result. */
    dlock_status (*send)(dlock__await *w);
    /* Read an attempt's reply: DLOCK_OK, DLOCK__BUSY (*retry_ms as for
     * dlock__try_fn) or a failure (message set). */
    int (*parse)(dlock__await *w, const redisReply *r, long *retry_ms);
    /* The end, exactly once, on a library thread, the channel already
     * left: DLOCK_OK, DLOCK__BUSY (time ran out) or a failure. */
    void (*done)(dlock__await *w, int result);
} dlock__await_ops;

struct dlock__await {
    dlock__sub_watch watch; /* first: a fired watch leads back here */
    const dlock__await_ops *ops;
    dlock_client *client;
    dlock_stats_kind kind;
    const char *channel; /* must outlive the wait */
    long wait_ms, backoff, retry_ms;
    int64_t deadline;
    int result; /* the last attempt's */
    struct dlock__subscriber *sub;
    dlock__sub_entry *e; /* the channel, once joined */
};

/* How an asynchronous wait begins (dlock__await_start's `how`): with an
 * attempt; or, when the client's subscription to the channel is confirmed
 * already, with an attempt made in line, as dlock__wait_begin() does for
 * a thread (the primitive's send sees `e` set); or as that, unless a
 * waiter of the client has waited past DLOCK__BARGE_MS: then with no
 * attempt, in line behind it (bounded barging). */
enum { DLOCK__AWAIT_TRY = 0, DLOCK__AWAIT_IN_LINE = 1, DLOCK__AWAIT_BOUNDED = 2 };

/* Begin as `how` says. Not DLOCK_OK: nothing was sent and done will not
 * run. `w` is the primitive's, allocated by it, and must stay valid until
 * done (which may free it, and may have run when this returns). `hand`
 * (or NULL): the wait's, when its attempts offer to be handed the lock by
 * another process (dlock__sub_hand); the wait then ends DLOCK_OK when a
 * fresh hand comes, and done reads it. */
dlock_status dlock__await_start(dlock__await *w, const dlock__await_ops *ops, dlock_client *client,
                                dlock_stats_kind kind, const char *channel, long wait_ms, int how,
                                dlock__sub_hand *hand);

/* The callback of every attempt sent by ops->send. */
void dlock__await_reply(dlock_status st, redisReply *r, void *arg);

#endif
