/* One pub/sub connection per client, shared by all its waiting threads. */
#ifndef DLOCK__SUBSCRIBER_H
#define DLOCK__SUBSCRIBER_H

#include <stdint.h>

#include "dlock.h"

struct dlock__subscriber;
typedef struct dlock__sub_entry dlock__sub_entry;
typedef struct dlock__sub_watch dlock__sub_watch;

struct dlock__subscriber *dlock__subscriber_start(dlock_client *client);
void dlock__subscriber_stop(struct dlock__subscriber *s);

/* Declare interest in `channel`; the subscriber thread subscribes to it if
 * no other waiter of the client has yet. NULL when out of memory. */
dlock__sub_entry *dlock__sub_join(struct dlock__subscriber *s, const char *channel);

/* How a newcomer on `channel` begins, in one look at the channel under
 * the subscriber's mutex (dlock__sub_begin):
 * - DLOCK__SUB_DEFER: `defer_before` >= 0 and a waiter of the client on it
 *   began before that time (monotonic ms): the newcomer should not try but
 *   queue behind it (bounded barging). Nothing is joined.
 * - DLOCK__SUB_IN_LINE: `me` given and the channel's subscription is
 *   confirmed already (a waiter of the client used it within the last
 *   second): joined as dlock__sub_join() does (*e set), and `me` enlisted.
 *   Every message published on the channel from now on counts for the
 *   caller, who may therefore make its first attempt as a registered
 *   waiter and sleep at once if it fails (dlock__wait_begin): a release
 *   that picks it after that attempt cannot be missed.
 * - DLOCK__SUB_TRY: neither; nothing done. */
enum { DLOCK__SUB_TRY = 0, DLOCK__SUB_DEFER = 1, DLOCK__SUB_IN_LINE = 2 };
int dlock__sub_begin(struct dlock__subscriber *s, const char *channel, int64_t defer_before, dlock__sub_watch *me,
                     dlock__sub_entry **e);

/* Wait until the server has confirmed the subscription, or the deadline
 * (-1: none). 1 when subscribed. A waiter must not sleep on the channel
 * before this, or a release published in between would be missed. */
int dlock__sub_wait_ready(struct dlock__subscriber *s, dlock__sub_entry *e, int64_t deadline_ms);

/* Sleep until a message on the channel wakes this thread (1), the
 * deadline passes (0), or it is handed what it waits for: by a releaser
 * of this client (2), when the sleeper made an `offer` (NULL: none; see
 * dlock__sub_claim), or by another process (3), when its wait `me` (the
 * watch it enlisted) carries a hand (dlock__sub_hand). Each message wakes
 * as many waiters as it names, those that began waiting (me->since,
 * monotonic ms) first: a waiter that retried in vain and sleeps again
 * keeps its place. A sleeper that is claimed sleeps on past its deadline
 * until the claim is settled (one command of the releaser's, within its
 * timeout). */
int dlock__sub_wait(struct dlock__subscriber *s, dlock__sub_entry *e, int64_t deadline_ms, dlock__sub_watch *me,
                    void *offer);

/*
 * A hand-off from another process (release.lua): a waiting thread that
 * offered to be handed the lock under its owner string and wait id puts a
 * hand on the watch it enlisted. A message "><token> <sent> <id> <owner>"
 * on the channel fills in the hand whose owner and id it names (under the
 * subscriber's mutex; `got` then stays set) and wakes its thread if it
 * sleeps; one that is awake finds it at its next sleep. Read `token` and
 * `sent` only once `got` is seen with the watch delisted or the thread
 * woken with 3. An asynchronous wait puts the hand on its own watch, which
 * fires with DLOCK__SUB_HANDED: at once if armed, else when it is armed
 * next (its attempt was out).
 */
typedef struct dlock__sub_hand {
    const char *owner;
    uint64_t id; /* this wait's, counted per owner: a late message of an earlier wait matches none */
    uint64_t token;
    int64_t sent; /* the offering attempt's send time, the waiter's clock */
    int got;
    long fresh_ms; /* the waiter's: a hand taken later than this after `sent` is stale */
    int stale;     /* the waiter's: it found the hand stale, and tries instead */
} dlock__sub_hand;

/*
 * Waiting without a thread, for the asynchronous acquire: a watch armed on
 * an entry the caller joined fires once, on the subscriber thread and
 * without any library lock held, when a message grants the entry a
 * wake-up (woken = DLOCK__SUB_MESSAGE; a wake-up granted while no watch or
 * thread waited is taken at once), when the subscription is confirmed and
 * `want_ready` was asked (DLOCK__SUB_READY), or at `at_ms`
 * (DLOCK__SUB_TIMER). Armed watches share the entry's wake-ups with
 * sleeping threads, first come first served. The watch's memory is the
 * caller's and must stay valid until it fired.
 */
enum {
    DLOCK__SUB_TIMER = 0,
    DLOCK__SUB_MESSAGE = 1,
    DLOCK__SUB_READY = 2,
    DLOCK__SUB_GRANTED = 3,
    DLOCK__SUB_HANDED = 4 /* a wait with a dlock__sub_hand: another process handed it the lock */
};
typedef void dlock__sub_fire_fn(dlock__sub_watch *w, int woken);
struct dlock__sub_watch {
    dlock__sub_fire_fn *fn;
    dlock__sub_entry *e;
    int64_t at;              /* fire by then (monotonic ms) */
    int64_t since;           /* when its wait began: the older, the sooner woken */
    int want_ready;          /* fire when the subscription is confirmed */
    int woken;               /* why it fired */
    void *offer;             /* a sleeping thread's, for dlock__sub_claim (else NULL) */
    int claimed;             /* a releaser holds it asleep until it settles */
    dlock__sub_hand *hand;   /* an enlisted wait's, for another process's hand-off (or NULL) */
    dlock__sub_watch *line;  /* a sleeping thread's: the watch its wait enlisted */
    dlock__sub_watch *next;  /* in the armed or the due list */
    dlock__sub_watch *wnext; /* in its entry's list of waiters (dlock__sub_enlist) */
};

void dlock__sub_arm(struct dlock__subscriber *s, dlock__sub_entry *e, dlock__sub_watch *w, int64_t at_ms,
                    int want_ready);

/*
 * A direct hand-off within one client. A releaser that will free what the
 * client's own waiters on `channel` wait for claims the sleeper a message
 * would wake next (the oldest armed watch of the entry), if that sleeper
 * made an offer (a thread's in dlock__sub_wait, an armed watch's in its
 * `offer` field): its offer is returned, and the sleeper stays asleep,
 * whatever its deadline or timer, until dlock__sub_settle(). NULL when
 * there is no such sleeper (none, or the next one made no offer: it is
 * never skipped). `granted` 1: the releaser handed it over (written into
 * the offer before), the thread wakes with 2, the watch fires with
 * DLOCK__SUB_GRANTED; 0: it sleeps on as before (the releaser may then
 * wake it the usual way).
 */
void *dlock__sub_claim(struct dlock__subscriber *s, const char *channel, dlock__sub_watch **claimed);
void dlock__sub_settle(struct dlock__subscriber *s, dlock__sub_watch *claimed, int granted);

/* A waiter counts on its entry for its whole wait, awake or asleep, from
 * enlist to delist (`w` only needs `since`): what dlock__sub_begin()
 * compares with `defer_before`. */
void dlock__sub_enlist(struct dlock__subscriber *s, dlock__sub_entry *e, dlock__sub_watch *w);
void dlock__sub_delist(struct dlock__subscriber *s, dlock__sub_entry *e, dlock__sub_watch *w);

/* How many waiters of this client are enlisted on `channel`. */
int dlock__sub_waiting(struct dlock__subscriber *s, const char *channel);

/* A message on `channel` that did not come through the server: the
 * waiters enlisted there get the wake-up one would give (none if nobody
 * waits on it now). */
void dlock__sub_wake(struct dlock__subscriber *s, const char *channel);

/* 1 while the entry's subscription is confirmed. */
int dlock__sub_ready(struct dlock__subscriber *s, dlock__sub_entry *e);

/* dlock_client_drain() began: fire every armed watch now, and every watch
 * armed from now on at once, so that asynchronous waits end. */
void dlock__sub_fire_all(struct dlock__subscriber *s);

/* Drop interest; the channel is unsubscribed after a short idle time so a
 * busy lock does not pay SUBSCRIBE/UNSUBSCRIBE on every wait. */
void dlock__sub_leave(struct dlock__subscriber *s, dlock__sub_entry *e);

#endif
