/*
 * The reentrant lock: an owner token per thread and handle, a hold count
 * for re-entry, release by an atomic script, a lease kept alive by the
 * watchdog, a fencing token per acquisition, and waiting woken by pub/sub.
 *
 * Redis keys of lock NAME, all with the hash tag {NAME} so that they live in
 * one Cluster slot:
 *
 *   dlock:{NAME}        hash: owner, count (re-entries), token (fencing)
 *   dlock:fence:{TAG}   fencing counter of the name's hash slot (src/fence.c); never expires
 *   dlock:{NAME}:ch     channel on which releases wake waiters
 *   dlock:{NAME}:w      processes waiting (plain lock; see acquire.lua)
 *   dlock:{NAME}:r      the process a release woke, for RESERVE_MS
 *   dlock:{NAME}:q, :qt, :qo  fair lock: the queue, its deadlines, its offers
 *
 * The owner is "<client id>:<thread number>:<handle number>", so holds
 * belong to threads as with a reentrant mutex, and to one handle: two
 * handles of one name are two owners even in one thread (as two open file
 * descriptions are for flock(2)). Were they one owner, each would keep its
 * own hold count and the first release through either would delete the
 * lock while the other still believed it held it. Each thread's view of its hold (count, token,
 * lost flag, watchdog entry) lives in a dlock__hold on the handle; only that
 * thread changes it, except the lost flag, which the watchdog sets.
 *
 * The safety argument, in short: acquire and release are single scripts,
 * so the check of the owner and the change are one atomic step; a key
 * exists only while some owner's lease runs, so a dead holder blocks others
 * for at most one lease; and a holder that may have outlived its lease
 * (paused, partitioned) is told so by the watchdog and carries a fencing
 * token that storage can use to refuse its late writes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "handle.h"
#include "lock.h"
#include "op.h"
#include "subscriber.h"
#include "util.h"
#include "wait.h"

/* How long a release keeps the lock for the process it woke (acquire.lua):
 * long enough for the message, two wake-ups and a round trip on a busy
 * machine, short enough that a process that died costs little. 20 ms was
 * too short with 64 processes on 2 cores: a woken process was often
 * scheduled later than that, and another barged in (least served worker
 * 0.80-0.91 of its share, p99 wait 57-83 ms; with 100 ms: 0.98, 39-49 ms,
 * docs/BENCHMARKS.md). */
#define RESERVE_MS "100"

/* release.lua's answer when the last hold went and this client's waiters
 * are next in line: it published nothing, the releaser wakes one. */
#define WAKE_OWN (-2)

/* release.lua's {HANDED_OVER, token}: the lock went to the waiting thread
 * the releaser named, with that token. */
#define HANDED_OVER (-3)

/* release_quick.lua's answer when processes are registered as waiting:
 * nothing was done, and release.lua must be sent. The handle's next
 * CROWDED_RELEASES releases then go as release.lua straight away. */
#define CROWDED (-4)
#define CROWDED_RELEASES 16

/* Only a hold shorter than this is released quick. What the short script
 * saves (about 3 us of the server's time) counts only where holds are
 * that short and many; a longer hold is likelier to end with processes
 * waiting (a job another job queued behind), where sending it back costs
 * the next holder a round trip. */
#define QUICK_HOLD_NS 1000000

static const dlock__handle_keys lock_keys = {"", ":fence", ":ch"};

/* A thread's view of its hold of one handle. */
typedef struct lock_thread {
    dlock__thread_rec rec; /* first: the handle's record */
    dlock__held held;
    struct dlock_lock *lock;
    uint64_t token;
    uint64_t wait_id;   /* its current wait's, in its offers: counted per owner, which the hand also names */
    char *wake_channel; /* fair locks: this waiter's own channel */
    uint64_t queued;    /* fair locks: its place among the handle's waiters (fair_queued), 0 when not waiting */
} lock_thread;

struct dlock_lock {
    dlock__handle base; /* first: client, name, keys, threads, callback, floor */
    int fair;
    char *queue, *queue_deadlines, *queue_offers; /* fair locks only */
    char *waiters, *woken, *offers;               /* plain locks: the waiting processes, the one woken, their offers */
    char *wait_channel;                           /* plain locks: this process's "dlock:{NAME}:ch:<client id>" */
    char *prefix;                                 /* "dlock:{NAME}:ch:", where the scripts name a waiter's channel */
    uint64_t queued;    /* fair locks: waits begun on this handle (fair_queued); under base.mu */
    atomic_int crowded; /* plain locks: releases to send in full before a quick one (CROWDED) */
};

/* The metrics count the two kinds apart: their waits differ by design. */
static dlock_stats_kind lock_kind(const dlock_lock *l)
{
    return l->fair ? DLOCK_STATS_FAIR : DLOCK_STATS_LOCK;
}

static void hold_lost(dlock__wd_entry *e);

/* A thread's first use of the handle: its renewal entry, and for a fair
 * lock the channel on which it alone is woken. */
static int thread_init(dlock__handle *base, dlock__thread_rec *rec)
{
    dlock_lock *l = (dlock_lock *)base;
    lock_thread *t = (lock_thread *)rec;
    t->lock = l;
    t->held.wd.script = DLOCK__SCRIPT_RENEW;
    t->held.wd.kind = lock_kind(l);
    t->held.wd.key = base->key;
    t->held.wd.owner = rec->owner;
    t->held.wd.on_lost = hold_lost;
    return l->fair && asprintf(&t->wake_channel, "%s:%s", base->channel, rec->owner) < 0 ? -1 : 0;
}

static void thread_drop(dlock__handle *base, dlock__thread_rec *rec)
{
    lock_thread *t = (lock_thread *)rec;
    if (t->held.renewed) dlock__wd_remove(base->client->wd, &t->held.wd);
    free(t->wake_channel);
}

/* The calling thread's record; made on first use when `create`. */
static lock_thread *thread_hold(dlock_lock *l, int create)
{
    return (lock_thread *)dlock__handle_thread(&l->base, sizeof(lock_thread), create, thread_init);
}

/* Both kinds share the hash layout, so inspect, force unlock, renewal and
 * the hold bookkeeping are common; a fair lock adds its queue. */
static dlock_status lock_make(dlock_client *client, const char *name, int fair, dlock_lock **out)
{
    dlock__handle *h = NULL;
    dlock_status st = dlock__handle_new(sizeof(dlock_lock), client, name, &lock_keys, out ? &h : NULL);
    if (out) *out = NULL;
    if (st != DLOCK_OK) return st;
    dlock_lock *l = (dlock_lock *)h;
    l->fair = fair;
    if (asprintf(&l->prefix, "%s:", l->base.channel) < 0) l->prefix = NULL;
    if (!l->prefix ||
        (fair && (!(l->queue = dlock__key(name, ":q")) || !(l->queue_deadlines = dlock__key(name, ":qt")) ||
                  !(l->queue_offers = dlock__key(name, ":qo")))) ||
        (!fair &&
         (!(l->waiters = dlock__key(name, ":w")) || !(l->woken = dlock__key(name, ":r")) ||
          !(l->offers = dlock__key(name, ":o")) || asprintf(&l->wait_channel, "%s%s", l->prefix, client->id) < 0))) {
        l->wait_channel = NULL;
        dlock_lock_free(l);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    *out = l;
    return DLOCK_OK;
}

dlock_status dlock_lock_new(dlock_client *client, const char *name, dlock_lock **out)
{
    return lock_make(client, name, 0, out);
}

dlock_status dlock_lock_new_fair(dlock_client *client, const char *name, dlock_lock **out)
{
    return lock_make(client, name, 1, out);
}

void dlock_lock_free(dlock_lock *l)
{
    if (!l) return;
    dlock__handle_destroy(&l->base, thread_drop);
    free(l->queue);
    free(l->queue_deadlines);
    free(l->queue_offers);
    free(l->waiters);
    free(l->woken);
    free(l->offers);
    free(l->wait_channel);
    free(l->prefix);
    free(l);
}

const char *dlock_lock_name(const dlock_lock *l)
{
    return l ? l->base.name : "";
}

dlock_client *dlock__lock_client(const dlock_lock *l)
{
    return l->base.client;
}

/* Watchdog thread: the server no longer has this hold. */
static void hold_lost(dlock__wd_entry *e)
{
    lock_thread *t = dlock__container_of(e, lock_thread, held.wd);
    dlock_lock *l = t->lock;
    dlock__held_lose(l->base.client, &t->held);
    void *arg;
    dlock_lost_fn fn = (dlock_lost_fn)dlock__handle_callback(&l->base, &arg);
    if (fn) fn(l, t->token, arg);
}

/* Internal result of try_acquire(): acquired, but too few replicas
 * acknowledged it within the replica timeout, so it was undone. */
#define REPLICA_SHORT 2

static void give_back(dlock_lock *l, lock_thread *h);

/* Replica-safe acquire: take back an acquisition that too few replicas
 * have, so that a failover to one of the others cannot hand the lock to a
 * second owner. It is released as any last hold is (give_back), not with
 * the lock's two keys: a plain lock's waiters of other processes sleep on
 * their own channels and are woken only by a release that reads the
 * waiting set, and without it they would find the lock free at their
 * timed retry (seconds). Best effort: if this fails, the lease ends it. */
static void undo_acquire(dlock_lock *l, lock_thread *h)
{
    give_back(l, h);
}

/* The keys and arguments of one run of acquire.lua (fair_acquire.lua),
 * shared by the synchronous and the asynchronous acquire. */
typedef struct acquire_call {
    dlock__script_id script;
    int nkeys, nargs;
    const char *keys[5], *args[9];
    char lease_s[24], count_s[24], timeout_s[24], floor_s[24];
    char offer[180]; /* "<lease> <floor> <sent> <wait id> <owner>" */
    int offered;     /* the offer goes with this call */
} acquire_call;

/* The offer of a waiting thread (acquire.lua, fair_acquire.lua) in the
 * call, when it fits. */
static int acquire_call_offer(lock_thread *h, long lease, int64_t sent, acquire_call *c)
{
    c->offered = snprintf(c->offer, sizeof c->offer, "%ld %s %lld %llu %s", lease, c->floor_s, (long long)sent,
                          (unsigned long long)h->wait_id, h->rec.owner) < (int)sizeof c->offer;
    return c->offered;
}

/* `queue`: the caller will wait if the lock is busy (a fair waiter joins
 * the queue, a plain one registers its process: acquire.lua);
 * `enlisted`: the caller is one of the waiters on the channel already;
 * `offer_sent` >= 0: a waiter that may be handed the lock by another
 * process's release offers it, with this attempt's send time: a plain
 * one if it is its process's only waiter (release.lua), a fair one when
 * it queues (fair_release.lua, at the queue's head). */
static void acquire_call_make(dlock_lock *l, lock_thread *h, long lease, int queue, int enlisted, int64_t offer_sent,
                              acquire_call *c)
{
    dlock__fmt_ll(lease, c->lease_s);
    dlock__fence_floor_arg(&l->base.client->fences, l->base.fence, atomic_load(&l->base.floor), c->floor_s);
    dlock__fmt_ll(h->held.count, c->count_s);
    dlock__fmt_ll(l->base.client->fair_waiter_timeout_ms, c->timeout_s);
    const char *keys[4] = {l->base.key, l->base.fence, l->queue, l->queue_deadlines};
    memcpy(c->keys, keys, sizeof keys);
    c->offered = 0;
    if (l->fair) {
        const char *args[8] = {
            h->rec.owner, c->lease_s, c->count_s, c->timeout_s, queue ? "1" : "0", l->prefix, l->base.client->publish,
            c->floor_s};
        memcpy(c->args, args, sizeof args);
        c->script = DLOCK__SCRIPT_FAIR_ACQUIRE;
        c->keys[4] = l->queue_offers;
        c->nkeys = 5;
        c->nargs = 8;
        if (offer_sent >= 0 && queue && acquire_call_offer(h, lease, offer_sent, c)) {
            c->args[8] = c->offer;
            c->nargs = 9;
        }
    } else {
        /* A waiter registers its process (a first attempt that finds the
         * lock busy registers at its next, once subscribed, unless it was
         * made in line on a confirmed subscription: wait.h); so does any
         * attempt while other waiters of the process sleep, so that the
         * process stays registered when a newcomer of it takes the lock
         * just after a release picked it (and took it out of the set). */
        dlock_client *client = l->base.client;
        int others = queue ? dlock__wait_count(client, l->wait_channel) - (enlisted ? 1 : 0) : 0;
        const char *mode = others > 0 ? "2" : queue && enlisted ? "1" : "0";
        const char *args[8] = {h->rec.owner, c->lease_s,   c->count_s, c->floor_s,
                               client->id,   c->timeout_s, mode,       c->offer};
        memcpy(c->args, args, sizeof args);
        c->keys[2] = l->woken;
        c->keys[3] = l->waiters;
        c->keys[4] = l->offers;
        c->script = DLOCK__SCRIPT_ACQUIRE;
        /* A first attempt registers nothing, so it leaves off the
         * waiting set, the offers and their arguments (acquire.lua):
         * fewer arguments, less work for the server on every call. */
        c->nkeys = *mode == '0' ? 3 : 5;
        c->nargs = *mode == '0' ? 5 : 7;
        if (offer_sent >= 0 && *mode == '1' && acquire_call_offer(h, lease, offer_sent, c)) c->nargs = 8;
    }
}

/* What acquire.lua answered: DLOCK_OK (hold updated), DLOCK__BUSY
 * (*pttl: the holder's remaining lease, -1 when it has none),
 * REPLICA_SHORT (taken, but fewer than `acks` replicas have it: the caller
 * undoes it), or a failure. */
static int acquire_reply(dlock_lock *l, lock_thread *h, const redisReply *r, long long acks, long *pttl)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER)
        return dlock__fail(DLOCK_ERR_REDIS, "acquire: unexpected reply");
    if (r->element[0]->integer == 0) {
        long ttl = (long)r->element[1]->integer;
        *pttl = dlock__retry_after(ttl);
        /* A lock this handle finds busy is likely waited for by others
         * when this handle releases it: its next releases go in full
         * (release_quick.lua), not quick and then sent back. */
        if (!l->fair) atomic_store(&l->crowded, CROWDED_RELEASES);
        return DLOCK__BUSY;
    }
    if (r->element[0]->integer == 1 && l->base.client->replica_acks > 0 && acks < l->base.client->replica_acks) {
        dlock__fail(DLOCK_ERR_REPLICA, "lock '%s': %lld of %d replicas acknowledged within %d ms; undone", l->base.name,
                    acks < 0 ? 0 : acks, l->base.client->replica_acks, l->base.client->replica_timeout_ms);
        *pttl = 50;
        return REPLICA_SHORT;
    }
    h->token = (uint64_t)r->element[1]->integer;
    h->held.count = r->element[0]->integer == 1 ? 1 : h->held.count + 1;
    dlock__fence_note(&l->base.client->fences, l->base.fence, h->token);
    return DLOCK_OK;
}

/* One run of acquire.lua: acquire_reply()'s results, with a replica-short
 * acquisition undone. */
static int try_acquire(dlock_lock *l, lock_thread *h, long lease, int queue, int enlisted, int offer, long *pttl,
                       int64_t *sent)
{
    acquire_call c;
    *sent = dlock__mono_ms(); /* a lease it sets starts no earlier, nor one handed over on its offer */
    acquire_call_make(l, h, lease, queue, enlisted, offer ? *sent : -1, &c);
    redisReply *r;
    long long acks;
    dlock_status st = dlock__eval_acked(l->base.client, c.script, c.nkeys, c.keys, c.nargs, c.args, &r, &acks);
    if (st != DLOCK_OK) return st;
    int result = acquire_reply(l, h, r, acks, pttl);
    freeReplyObject(r);
    if (result == REPLICA_SHORT) {
        char why[512];
        snprintf(why, sizeof why, "%s", dlock_last_error());
        undo_acquire(l, h);
        dlock__fail(DLOCK_ERR_REPLICA, "%s", why);
    }
    return result;
}

/* What a waiting thread offers a releaser of its own client
 * (dlock__wait_claim): enough to take the lock for it in release.lua, and
 * room for what that gave. */
typedef struct lock_offer {
    dlock_lock *l;
    lock_thread *h;
    long lease;
    uint64_t token;       /* set by the releaser when handed over (never 0) */
    int64_t sent;         /* when the releaser sent the release: the lease began no earlier */
    dlock__sub_hand hand; /* the same from another process (dlock__sub_hand) */
} lock_offer;

/* A hold handed over while its acquire waited (release.lua), by a
 * releaser of this client or of another process: it begins as an
 * attempt's would, with `token`, its lease counted from `from` (the
 * release's send, or the send of the attempt that made the offer). */
static void hold_handed(dlock_lock *l, lock_thread *h, uint64_t token, int64_t from, int64_t *sent)
{
    h->token = token;
    h->held.count = 1;
    *sent = from;
    dlock__fence_note(&l->base.client->fences, l->base.fence, h->token);
}

/* Whether a wait of `h` offers to be handed the lock by another
 * process's release (a first hold, waited for; a replica-safe acquire
 * waits for replicas after its own attempt, so it is not handed over; a
 * fair one is handed the lock only at the queue's head), and if so its hand:
 * this wait's id, and fresh for half the lease the holder may trust,
 * counted from the offer. For the thread's and the asynchronous acquire
 * alike. */
static int hand_begin(dlock_lock *l, lock_thread *h, long wait_ms, long before, long lease, dlock__sub_hand *hand)
{
    dlock_client *c = l->base.client;
    if (c->replica_acks != 0 || wait_ms == 0 || before != 0) return 0;
    *hand = (dlock__sub_hand){h->rec.owner, ++h->wait_id, 0, 0, 0, 0, 0};
    hand->fresh_ms = dlock__lease_trust_ms(lease, c->safety_margin_pct) / 2;
    return 1;
}

/* Arguments of one acquire attempt, for dlock__wait_for(). */
struct attempt {
    dlock_lock *l;
    lock_thread *h;
    long lease;
    int replica_short;           /* the last attempt was undone for want of replicas */
    int offer;                   /* offer the lock's hand-off to other processes */
    const dlock__sub_hand *hand; /* ... received in this hand */
    int64_t sent;                /* when the last attempt was sent */
};

/* A replica-short attempt counts as busy: the wait goes on, and if it ends
 * so, the caller reports DLOCK_ERR_REPLICA rather than a timeout. */
static int try_again(void *ctx, long *retry_ms)
{
    struct attempt *a = ctx;
    /* After a stale hand (wait.c), no more offers in this wait: its hand
     * is spent, and a second hand-off would find nobody to take it. */
    int r = try_acquire(a->l, a->h, a->lease, 1, 1, a->offer && !a->hand->stale, retry_ms, &a->sent);
    a->replica_short = r == REPLICA_SHORT;
    return a->replica_short ? DLOCK__BUSY : r;
}

/* A fair waiter that stops waiting leaves the queue at once, so the lock
 * is not held up until its deadline passes. Best effort: if this fails,
 * the deadline still ends it. */
static void fair_leave(dlock_lock *l, lock_thread *h)
{
    const char *keys[4] = {l->base.key, l->queue, l->queue_deadlines, l->queue_offers};
    /* "1": this thread holds nothing, so a lock that names it was handed
     * over (by a release of this client whose answer was lost, or of
     * another process whose message came too late): give it back in the
     * same script that takes the offer back (fair_leave.lua). */
    const char *args[4] = {h->rec.owner, l->base.client->publish, l->prefix, "1"};
    long long n;
    dlock__eval_int(l->base.client, DLOCK__SCRIPT_FAIR_LEAVE, 4, keys, h->held.count == 0 ? 4 : 3, args, &n);
}

/* A fair waiter of this handle begins (`waits`) or ends its wait. Its
 * place is counted, not timed: the hand-offs of a busy lock come faster
 * than a clock's milliseconds, and a tie would be settled by the order of
 * the handle's records instead of the queue's. */
static void fair_queued(dlock_lock *l, lock_thread *h, int waits)
{
    pthread_mutex_lock(&l->base.mu);
    h->queued = waits ? ++l->queued : 0;
    pthread_mutex_unlock(&l->base.mu);
}

/* The channel of the thread of this handle that has waited longest on
 * the fair lock, other than `self`, or NULL. Why the oldest: the queue is
 * served in order, so the oldest waiter of this client is the one most
 * likely at its head when the release runs (fair_release.lua checks). */
static const char *fair_oldest(dlock_lock *l, lock_thread *self)
{
    const char *channel = NULL;
    uint64_t oldest = 0;
    pthread_mutex_lock(&l->base.mu);
    for (dlock__thread_rec *r = l->base.threads; r; r = r->next) {
        lock_thread *t = (lock_thread *)r;
        if (t != self && t->queued > 0 && (!channel || t->queued < oldest)) {
            channel = t->wake_channel;
            oldest = t->queued;
        }
    }
    pthread_mutex_unlock(&l->base.mu);
    return channel;
}

void (*dlock__test_before_leave)(void) = NULL;

/* After a leave by the process's last waiter. A newcomer of the process
 * may have registered it between the count that made that waiter the
 * last and the leave, which then took the process out of the set; a
 * release would wake nobody here and the newcomer would sleep to its
 * timed retry (seconds) with the lock free. So when a waiter of this
 * process is in line now, one is woken to try again, and its attempt
 * registers the process anew. A newcomer that enlisted before its
 * attempt (in line, wait.h), which is how one comes on a channel still
 * subscribed, is always seen: its attempt preceded the leave at the
 * server, hence the leave's answer. When it came after the leave, the
 * cost is one attempt. */
static void left_last(dlock_client *c, const char *channel)
{
    if (dlock__wait_count(c, channel) > 0) dlock__wait_wake(c, channel);
}

/* A waiter of this process on a plain lock gave up: the last one takes
 * the process out of the set of waiting processes, and one that offered
 * (`offered`) takes its offer back (waiter_leave.lua). Best effort: if
 * this fails, the registration runs out by itself. */
static dlock_status waiter_leave(dlock_lock *l, lock_thread *h, int last, int offered)
{
    const char *keys[2] = {l->waiters, l->offers};
    const char *args[3] = {l->base.client->id, last ? "1" : "0", h->rec.owner};
    long long n;
    return dlock__eval_int(l->base.client, DLOCK__SCRIPT_WAITER_LEAVE, 2, keys, offered ? 3 : 2, args, &n);
}

static dlock_status lock_acquire(dlock_lock *l, long wait_ms, long lease_ms, uint64_t *token)
{
    if (wait_ms < DLOCK_WAIT_FOREVER) return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    dlock_status bad = dlock__check_lease(lease_ms, 3, 1);
    if (bad != DLOCK_OK) return bad;
    lock_thread *h = thread_hold(l, 1);
    if (!h) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    if (h->held.count > 0 && atomic_load(&h->held.lost))
        return dlock__fail(DLOCK_ERR_LOST, "lock '%s' was lost while held; release it first", l->base.name);

    int watchdog = lease_ms == DLOCK_LEASE_WATCHDOG || h->held.renewed;
    /* A hold the watchdog renews keeps the watchdog's lease, or a short
     * explicit lease on a re-entry would expire it between renewals. */
    long lease = watchdog ? l->base.client->watchdog_lease_ms : lease_ms;
    int64_t deadline = dlock__deadline(wait_ms);
    long pttl = 0;
    long before = h->held.count;

    struct attempt a = {l, h, lease, 0, 0, NULL, 0};
    int result;
    dlock__early early = {0};
    /* Bounded barging: a plain newcomer queues behind a waiter of this
     * process that has waited too long (a fair lock queues anyway). Else,
     * on a lock this client waited on a moment ago, the first attempt is
     * made in line (wait.h), so a busy lock costs one attempt. */
    const char *channel = l->fair ? h->wake_channel : l->wait_channel;
    int may_wait = wait_ms != 0 && before == 0;
    /* A replica-safe acquire waits for replicas after its own attempt:
     * it is not handed over. A fair one is, by its own client's releases
     * (fair_release.lua), when it is the queue's head. */
    int offered = l->base.client->replica_acks == 0;
    lock_offer offer = {l, h, lease, 0, 0, {0}};
    a.offer = hand_begin(l, h, wait_ms, before, lease, &offer.hand);
    a.hand = &offer.hand;
    int begin = may_wait ? dlock__wait_begin(l->base.client, channel, !l->fair, l->base.client->replica_acks == 0,
                                             a.offer ? &offer.hand : NULL, &early)
                         : DLOCK__SUB_TRY;
    if (begin == DLOCK__SUB_DEFER) {
        result = DLOCK__DEFER;
    } else {
        result = try_acquire(l, h, lease, wait_ms != 0, begin == DLOCK__SUB_IN_LINE, a.offer, &pttl, &a.sent);
        a.replica_short = result == REPLICA_SHORT;
        if (result == REPLICA_SHORT) result = DLOCK__BUSY;
    }
    if (result == DLOCK__DEFER || dlock__should_wait(result, wait_ms)) {
        /* The watchdog's thread starts on a client's first renewed hold:
         * start it now, while the wait costs nothing, not between the
         * release that ends the wait and the caller's first step (a
         * failure to start is reported by the hold, as without the wait). */
        if (watchdog) (void)dlock__client_watchdog(l->base.client);
        if (l->fair && offered) fair_queued(l, h, 1);
        result = dlock__wait_for(l->base.client, lock_kind(l), channel, deadline, try_again, &a, result, pttl,
                                 offered ? &offer : NULL, a.offer ? &offer.hand : NULL, &early);
        if (l->fair && offered) fair_queued(l, h, 0);
        if (result == DLOCK_OK && offer.token) hold_handed(l, h, offer.token, offer.sent, &a.sent);
        else if (result == DLOCK_OK && offer.hand.got && !offer.hand.stale && h->held.count == 0)
            hold_handed(l, h, offer.hand.token, offer.hand.sent, &a.sent);
        int last = result != DLOCK_OK && !l->fair && dlock__wait_count(l->base.client, l->wait_channel) == 0;
        if (result != DLOCK_OK && (l->fair || last || a.offer)) {
            dlock_status keep = (dlock_status)result;
            char why[512];
            snprintf(why, sizeof why, "%s", dlock_last_error());
            if (l->fair) {
                fair_leave(l, h);
            } else {
                if (last && dlock__test_before_leave) dlock__test_before_leave();
                /* The give-back only after the offer is gone, and not
                 * when the server did not answer the leave: it would wait
                 * out another timeout for nothing (the lease ends it). */
                if (waiter_leave(l, h, last, a.offer) == DLOCK_OK && a.offer) give_back(l, h);
                if (last) left_last(l->base.client, l->wait_channel);
            }
            dlock__fail(keep, "%s", why); /* the reason, not the leave's */
        }
    } else {
        dlock__wait_early_end(&early);
    }
    if (result == DLOCK__BUSY && a.replica_short) return DLOCK_ERR_REPLICA; /* message set by try_acquire */
    if (result == DLOCK__BUSY)
        return dlock__fail(DLOCK_ERR_TIMEOUT, "lock '%s' is held by another owner", l->base.name);
    if (result != DLOCK_OK) return (dlock_status)result;

    dlock_status begun = dlock__held_begin(l->base.client, &h->held, before == 0, watchdog, lease, a.sent);
    if (begun != DLOCK_OK) {
        char why[512];
        snprintf(why, sizeof why, "lock '%s': %s", l->base.name, dlock_last_error());
        dlock_lock_release(l);
        return dlock__fail(begun, "%s", why);
    }
    if (token) *token = h->token;
    return DLOCK_OK;
}

/* Every call is counted, however it ends, so the body above may return
 * anywhere. */
dlock_status dlock_lock_acquire(dlock_lock *l, long wait_ms, long lease_ms, uint64_t *token)
{
    if (!l) return dlock__fail(DLOCK_ERR_INVALID, "lock is NULL");
    int64_t since = dlock__stats_clock();
    dlock_status st = lock_acquire(l, wait_ms, lease_ms, token);
    dlock__stats_acquired(&l->base.client->stats, lock_kind(l), since, st);
    return st;
}

/* The keys and arguments of one run of release.lua (fair_release.lua). */
typedef struct release_call {
    dlock__script_id script;
    int nkeys, nargs;
    const char *keys[6], *args[11];
    char lease_s[24], count_s[24];
    char next_lease_s[24], next_floor_s[24], timeout_s[24];
    int waiters; /* of this client on a plain lock, when the call was made */
} release_call;

/* The lease and fencing floor the waiter `o` asked for, in the text both
 * release scripts take: the grant they make in its name is the grant its
 * own attempt would have made. */
static void release_call_offer_terms(dlock_lock *l, release_call *c, const lock_offer *o)
{
    snprintf(c->next_lease_s, sizeof c->next_lease_s, "%ld", o->lease);
    dlock__fence_floor_arg(&l->base.client->fences, o->l->base.fence, atomic_load(&o->l->base.floor), c->next_floor_s);
}

/* release.lua's direct hand-off to `o`, a waiting thread of this client
 * (ARGV[8..11]); `others` when more of its waiters wait on. */
static void release_call_offer(dlock_lock *l, release_call *c, const lock_offer *o, int others)
{
    release_call_offer_terms(l, c, o);
    c->args[7] = o->h->rec.owner;
    c->args[8] = c->next_lease_s;
    c->args[9] = c->next_floor_s;
    c->args[10] = others ? "1" : "0";
    c->nargs = 11;
}

/* fair_release.lua's direct hand-off to `o` (ARGV[6..8]), a waiting
 * thread of this client, if it is the queue's head. */
static void release_call_fair_offer(dlock_lock *l, release_call *c, const lock_offer *o)
{
    release_call_offer_terms(l, c, o);
    c->args[5] = o->h->rec.owner;
    c->args[6] = c->next_lease_s;
    c->args[7] = c->next_floor_s;
    c->nargs = 8;
}

/* The last hold: a waiter of this client may be handed the lock in the
 * same script (release.lua; fair_release.lua when it is the queue's
 * head, for which the waiter of this handle that has waited longest is
 * the guess). Its offer, claimed and named in `c` (*claimed set, for
 * dlock__wait_settle), or NULL. */
static lock_offer *release_claim(dlock_lock *l, lock_thread *h, release_call *c, dlock__sub_watch **claimed)
{
    dlock_client *client = l->base.client;
    lock_offer *o = NULL;
    *claimed = NULL;
    if (h->held.count != 1 || client->replica_acks != 0) return NULL;
    if (l->fair) {
        const char *channel = fair_oldest(l, h);
        if (channel && (o = dlock__wait_claim(client, channel, claimed))) release_call_fair_offer(l, c, o);
    } else if (c->waiters > 0 && (o = dlock__wait_claim(client, l->wait_channel, claimed))) {
        release_call_offer(l, c, o, c->waiters > 1);
    }
    return o;
}

/* The channel of a claimed fair waiter, to wake it when the release's
 * answer was lost: the lost run may have handed it the lock, and then it
 * published nothing, so nobody else would wake it before its timed retry
 * (seconds). Its attempt finds itself the owner with no hold it knows of,
 * which fair_acquire.lua grants afresh. Read before the waiter is settled:
 * `o` is the waiter's memory. A plain lock's waiters are woken in
 * release_reply either way. */
static const char *claimed_channel(const dlock_lock *l, const lock_offer *o)
{
    return l->fair && o ? o->h->wake_channel : NULL;
}

/* A release that got no answer leaves the hold as it was (the caller may
 * try again), but a fair waiter it named may have been handed the lock by
 * a run whose answer was lost, so it is woken to look (claimed_channel). */
static void release_unanswered(dlock_lock *l, lock_thread *h, lock_offer *o, dlock__sub_watch *claimed)
{
    dlock_client *c = l->base.client;
    const char *fair_claimed = claimed_channel(l, o);
    dlock__wait_settle(c, claimed, 0);
    if (fair_claimed) dlock__wait_wake(c, fair_claimed);
    dlock__held_release_failed(c, &h->held);
}

static void release_call_make(dlock_lock *l, lock_thread *h, release_call *c)
{
    dlock__fmt_ll(h->held.lease_ms, c->lease_s);
    dlock__fmt_ll(h->held.count, c->count_s);
    c->keys[0] = l->base.key;
    c->keys[1] = l->fair ? l->queue : l->base.channel;
    c->keys[2] = l->waiters;
    c->keys[3] = l->woken;
    c->keys[4] = l->base.fence;
    c->keys[5] = l->offers;
    /* release.lua's ARGV[5] is the reservation, its ARGV[6] this client
     * (so that it can tell when the next in line is this client's own
     * waiter); fair_release.lua's ARGV[5] is the prefix */
    const char *args[6] = {
        h->rec.owner,      c->lease_s, c->count_s, l->base.client->publish, l->fair ? l->prefix : RESERVE_MS,
        l->base.client->id};
    memcpy(c->args, args, sizeof args);
    c->script = l->fair ? DLOCK__SCRIPT_FAIR_RELEASE : DLOCK__SCRIPT_RELEASE;
    if (l->fair) { /* the queue's deadlines, the fence and the offers, for a hand-off (fair_release.lua) */
        c->keys[2] = l->queue_deadlines;
        c->keys[3] = l->base.fence;
        c->keys[4] = l->queue_offers;
    }
    c->nkeys = l->fair ? 5 : 6;
    c->nargs = l->fair ? 5 : 7;
    c->waiters = 0;
    if (!l->fair) {
        /* ARGV[7]: whether this client has waiters, who may have made no
         * attempt that registered it (release.lua says why it matters). */
        dlock_client *client = l->base.client;
        c->waiters = dlock__wait_count(client, l->wait_channel);
        dlock__fmt_ll(c->waiters > 0 ? client->fair_waiter_timeout_ms : 0L, c->timeout_s);
        c->args[6] = c->timeout_s;
    }
}

/* release_quick.lua in place of the full call `c` (release_call_make)
 * for `h`'s hold, when it will do: a plain lock, no thread or acquisition
 * of this client waiting for it (release.lua must know of them, and may
 * hand one the lock), a short hold (QUICK_HOLD_NS), and no release of this
 * handle sent back lately nor the lock found busy (l->crowded). Whether
 * it did. */
static int release_call_quicken(dlock_lock *l, const lock_thread *h, release_call *c)
{
    if (l->fair || c->waiters > 0 || dlock__stats_clock() - h->held.held_since > QUICK_HOLD_NS) return 0;
    int n = atomic_load(&l->crowded);
    if (n > 0) {
        atomic_compare_exchange_strong(&l->crowded, &n, n - 1);
        return 0;
    }
    c->script = DLOCK__SCRIPT_RELEASE_QUICK;
    c->keys[1] = l->waiters; /* args[0..2] are owner, lease and count already */
    c->nkeys = 2;
    c->nargs = 3;
    return 1;
}

/* Whether `r` is release_quick.lua's CROWDED; if so the handle's next
 * releases go in full. */
static int release_crowded(dlock_lock *l, const redisReply *r)
{
    if (r->type != REDIS_REPLY_INTEGER || r->integer != CROWDED) return 0;
    atomic_store(&l->crowded, CROWDED_RELEASES);
    return 1;
}

/* release.lua for the one hold a lock that names `h` as owner holds,
 * whatever `h`'s count says: a hand-off it gave up on, or a grant being
 * undone (give_back, and the asynchronous leave and undo). */
static void release_call_last(dlock_lock *l, lock_thread *h, release_call *c)
{
    release_call_make(l, h, c);
    snprintf(c->count_s, sizeof c->count_s, "1");
}

/* Such a release's answer, taken (`r` freed): WAKE_OWN names one of this
 * client's waiters (on `channel`) as next, which it wakes. */
static void released_wake_own(dlock_client *c, const char *channel, dlock_status st, redisReply *r)
{
    if (st == DLOCK_OK && r && r->type == REDIS_REPLY_INTEGER && r->integer == WAKE_OWN) dlock__wait_wake(c, channel);
    if (r) freeReplyObject(r);
}

/* Why: a waiter that offered may have been handed the lock by another
 * process just before it took its offer back (waiter_leave), the message
 * still on its way. Having given up, it holds no hold, so a lock that
 * names it as owner is such a hand-off (or a grant whose reply was lost),
 * and it releases it as a holder would (release.lua, which wakes the next
 * waiter); a lock it does not own is left alone. Best effort: if this
 * fails, the lease ends it. */
static void give_back(dlock_lock *l, lock_thread *h)
{
    release_call rc;
    release_call_last(l, h, &rc);
    redisReply *r;
    if (dlock__eval(l->base.client, rc.script, rc.nkeys, rc.keys, rc.nargs, rc.args, &r, NULL) != DLOCK_OK) return;
    released_wake_own(l->base.client, l->wait_channel, DLOCK_OK, r);
}

/* What release.lua answered, from a send that was `retried`: the hold's
 * bookkeeping done, and the caller's status. A waiter `o` that was
 * claimed for a direct hand-off (`claimed`) is settled: handed the lock
 * (the reply {-3, token}, its lease counted from `sent`), or left to
 * sleep on, or woken as any waiter of this client would be. */
static dlock_status release_reply(dlock_lock *l, lock_thread *h, const redisReply *r, int retried, lock_offer *o,
                                  dlock__sub_watch *claimed, int64_t sent)
{
    long left;
    const char *fair_claimed = claimed_channel(l, o);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[0]->integer == HANDED_OVER && r->element[1]->type == REDIS_REPLY_INTEGER && o &&
        r->element[1]->integer > 0) {
        o->token = (uint64_t)r->element[1]->integer;
        o->sent = sent;
        dlock__wait_settle(l->base.client, claimed, 1);
        left = 0;
    } else {
        dlock__wait_settle(l->base.client, claimed, 0);
        if (r->type != REDIS_REPLY_INTEGER) return dlock__fail(DLOCK_ERR_REDIS, "release: unexpected reply");
        left = (long)r->integer;
    }
    /* -2: released, and this client's waiters are next (release.lua): wake
     * one here. A resent release cannot tell whether its first run said
     * so, so it wakes one too; at worst that one retries in vain. */
    if (!l->fair && (left == WAKE_OWN || (retried && left < 0))) {
        if (left == WAKE_OWN) left = 0;
        dlock__wait_wake(l->base.client, l->wait_channel);
    }
    /* A fair waiter named in a release that was resent: the first run may
     * have handed it the lock (claimed_channel). */
    if (fair_claimed && retried && left < 0) dlock__wait_wake(l->base.client, fair_claimed);
    if (dlock__held_release_done(l->base.client, &h->held, left, retried))
        return dlock__fail(DLOCK_ERR_LOST, "lock '%s' expired before release; another owner may hold it", l->base.name);
    return DLOCK_OK;
}

dlock_status dlock_lock_release(dlock_lock *l)
{
    if (!l) return dlock__fail(DLOCK_ERR_INVALID, "lock is NULL");
    lock_thread *h = thread_hold(l, 0);
    if (!h || h->held.count == 0)
        return dlock__fail(DLOCK_ERR_NOT_OWNER, "this thread does not hold lock '%s'", l->base.name);
    dlock_client *c = l->base.client;
    if (dlock__held_release_begin(c, &h->held))
        return dlock__fail(DLOCK_ERR_LOST, "lock '%s' was lost while held", l->base.name);
    release_call rc;
    release_call_make(l, h, &rc);
    dlock__sub_watch *claimed = NULL;
    lock_offer *o = NULL;
    int quick = release_call_quicken(l, h, &rc);
    redisReply *r;
    int retried;
    int64_t sent;
    dlock_status st;
    for (;;) {
        if (!quick) o = release_claim(l, h, &rc, &claimed);
        sent = dlock__mono_ms();
        st = dlock__eval(c, rc.script, rc.nkeys, rc.keys, rc.nargs, rc.args, &r, &retried);
        if (st != DLOCK_OK) {
            release_unanswered(l, h, o, claimed);
            return st;
        }
        if (!quick || !release_crowded(l, r)) break;
        freeReplyObject(r); /* sent back, nothing done: the full release */
        release_call_make(l, h, &rc);
        quick = 0;
    }
    st = release_reply(l, h, r, retried, o, claimed, sent);
    freeReplyObject(r);
    return st;
}

/* ------------------------------------------------------------------------
 * The asynchronous acquire and release.
 *
 * Why: a program that serves many requests from one thread (an event loop)
 * cannot park a thread per waiting acquire. Each attempt here is one
 * dlock__async_eval() on the shared connection, and between attempts
 * wait.c's dlock__await stands in for the sleeping thread: the same
 * events, the same timers, the same order (join the channel, wait for the
 * confirmation, try again, and only then sleep).
 *
 * A hold taken this way belongs to the handle, not to a thread: its record
 * is the handle's record 0 (owner "<client id>:0:<handle>"), which no thread
 * has, so any thread may release it, and one asynchronous call runs on a
 * handle at a time. Replies come on the library's reader thread, so nothing
 * here may wait for a reply: what the synchronous path does in passing (a
 * fair waiter leaving the queue) is sent without waiting for its answer.
 * ------------------------------------------------------------------------ */

typedef struct lock_async {
    dlock__await aw; /* first: the wait's state (wait.h) */
    dlock_lock *l;
    lock_thread *h;
    long lease, before;
    int watchdog, queued;
    int replica_short; /* the last attempt was undone for want of replicas */
    int64_t sent, since;
    lock_offer offer; /* an acquire's, for a direct hand-off (its watch's offer; offer.hand: from another process) */
    int offers;       /* its attempts offer the hand-off between processes (as lock_acquire's a.offer) */
    int offered;      /* one was sent with an offer */
    lock_offer *next; /* a release's: the waiter it claimed, if any */
    int quick;        /* a release's: sent as release_quick.lua */
    dlock__sub_watch *claimed;
    dlock_acquired_fn acquired;
    dlock_released_fn released;
    void *arg;
} lock_async;

static lock_thread *async_hold(dlock_lock *l, int create)
{
    return (lock_thread *)dlock__handle_record(&l->base, 0, sizeof(lock_thread), create, thread_init);
}

/* An asynchronous acquire's outcome, kept until it may be told. */
typedef struct acquire_end {
    dlock_lock *l;
    lock_thread *h;
    dlock_status st;
    uint64_t token;
    dlock_acquired_fn cb;
    void *arg;
    char why[512]; /* the reason of a failure, set again on the thread that tells it */
} acquire_end;

/* Tell the caller, on whichever library thread this runs. The handle is
 * free for its next call only now, and the client's count of calls in
 * flight drops after the callback, so dlock_client_free() waits for it. */
static void acquire_tell(const acquire_end *e)
{
    dlock_client *c = e->l->base.client;
    if (e->st != DLOCK_OK) dlock__fail(e->st, "%s", e->why);
    dlock__handle_async_done(&e->h->rec);
    e->cb(e->l, e->st, e->token, e->arg);
    dlock__async_end(&c->async);
}

/* The answer to script_then_tell()'s command: now the caller is told. */
static void told_after_reply(dlock_status st, redisReply *r, void *arg)
{
    (void)st; /* unanswered: the lease ends what it was to undo */
    acquire_end *e = arg;
    if (r) freeReplyObject(r);
    acquire_tell(e);
    free(e);
}

/* Send a command that may delete a hold under the handle's owner string,
 * with the caller's report to follow its answer, for the reason
 * give_back_call gives; without the memory to wait, it is sent and the
 * caller told at once. */
static void script_then_tell(dlock_client *c, dlock__script_id id, int nkeys, const char *const *keys, int nargs,
                             const char *const *args, const acquire_end *end)
{
    acquire_end *e = malloc(sizeof *e);
    if (e) *e = *end;
    if (dlock__async_script(c, id, nkeys, keys, nargs, args, e ? told_after_reply : dlock__async_ignore, e) ==
            DLOCK_OK &&
        e)
        return;
    free(e);
    acquire_tell(end);
}

/* give_back() for an asynchronous wait that offered and gave up: its
 * release, sent once the leave that took the offer back has been
 * answered, in that order, as lock_acquire() does. The caller is told
 * only after the release is answered (or was never sent). Why: the
 * release names the handle's owner string, and a new acquisition on the
 * handle made in between would be granted afresh under that same owner,
 * then deleted by this late release, leaving its caller sure of a lock
 * that is free. The synchronous call is safe for the same reason: it
 * gives back before it returns. */
typedef struct give_back_call {
    dlock_client *c;
    int last; /* the leave was the process's last waiter's (left_last) */
    int nkeys, nargs;
    const char *argv[6 + 7]; /* the keys, then the arguments */
    char *wake;              /* the client's channel on the lock, to wake one of its waiters (WAKE_OWN) */
    acquire_end end;
    char text[]; /* the strings above */
} give_back_call;

static void give_back_reply(dlock_status st, redisReply *r, void *arg)
{
    give_back_call *g = arg;
    released_wake_own(g->c, g->wake, st, r);
    acquire_tell(&g->end);
    free(g);
}

static void leave_reply(dlock_status st, redisReply *r, void *arg)
{
    give_back_call *g = arg;
    if (r) freeReplyObject(r);
    if (g->last) left_last(g->c, g->wake);
    /* Not when the leave got no answer: the offer may stand (the lease ends it). */
    if (st != DLOCK_OK || dlock__async_script(g->c, DLOCK__SCRIPT_RELEASE, g->nkeys, g->argv, g->nargs,
                                              g->argv + g->nkeys, give_back_reply, g) != DLOCK_OK) {
        acquire_tell(&g->end);
        free(g);
    }
}

/* The leave of an asynchronous acquire that was its process's last
 * waiter and made no offer; `channel` is the client's on the lock. */
typedef struct leave_call {
    dlock_client *c;
    char channel[];
} leave_call;

/* A leave_call for `l`'s channel, or NULL (out of memory, or a fair lock,
 * which has no such channel). */
static leave_call *leave_call_new(dlock_lock *l)
{
    if (!l->wait_channel) return NULL;
    size_t len = strlen(l->wait_channel) + 1;
    leave_call *g = malloc(sizeof *g + len);
    if (g) {
        g->c = l->base.client;
        memcpy(g->channel, l->wait_channel, len);
    }
    return g;
}

static void last_leave_reply(dlock_status st, redisReply *r, void *arg)
{
    (void)st;
    leave_call *g = arg;
    if (r) freeReplyObject(r);
    left_last(g->c, g->channel);
    free(g);
}

static void async_leave_last(dlock_lock *l, const char *const *wkeys, const char *const *wargs)
{
    leave_call *g = leave_call_new(l);
    if (!g) { /* the registration runs out by itself */
        dlock__async_script(l->base.client, DLOCK__SCRIPT_WAITER_LEAVE, 2, wkeys, 2, wargs, dlock__async_ignore, NULL);
        return;
    }
    if (dlock__async_script(g->c, DLOCK__SCRIPT_WAITER_LEAVE, 2, wkeys, 2, wargs, last_leave_reply, g) != DLOCK_OK)
        free(g);
}

/* The leave of an asynchronous acquire that offered, and then its
 * give-back; `end` is told once they are done (give_back_call). */
static void async_leave_offered(dlock_lock *l, lock_thread *h, int last, const char *const *wkeys,
                                const char *const *wargs, const acquire_end *end)
{
    dlock_client *c = l->base.client;
    release_call rc;
    release_call_last(l, h, &rc);
    const char *from[6 + 7 + 1]; /* what the call needs, each copied into g->text */
    int n = rc.nkeys + rc.nargs;
    memcpy(from, rc.keys, (size_t)rc.nkeys * sizeof *from);
    memcpy(from + rc.nkeys, rc.args, (size_t)rc.nargs * sizeof *from);
    from[n] = l->wait_channel;
    size_t size = 0;
    for (int i = 0; i <= n; i++) size += strlen(from[i]) + 1;
    give_back_call *g = malloc(sizeof *g + size);
    if (!g) { /* the lease ends what a hand-off gave it */
        acquire_tell(end);
        return;
    }
    g->c = c;
    g->last = last;
    g->nkeys = rc.nkeys;
    g->nargs = rc.nargs;
    g->end = *end;
    char *p = g->text;
    for (int i = 0; i <= n; i++) {
        size_t len = strlen(from[i]) + 1;
        memcpy(p, from[i], len);
        if (i < n) g->argv[i] = p;
        else g->wake = p;
        p += len;
    }
    if (dlock__async_script(c, DLOCK__SCRIPT_WAITER_LEAVE, 2, wkeys, 3, wargs, leave_reply, g) != DLOCK_OK) {
        acquire_tell(&g->end);
        free(g);
    }
}

/* The end of an asynchronous acquire: the hold begun, or the wait given
 * up; the channel left; the callback, with the thread's last error set,
 * once every command sent here that may give back under the handle's
 * owner is answered (give_back_call, script_then_tell). */
static void acquire_done(dlock__await *aw, int result)
{
    lock_async *op = (lock_async *)aw;
    dlock_lock *l = op->l;
    lock_thread *h = op->h;
    dlock_client *c = l->base.client;
    dlock_status st = (dlock_status)result;
    if (result == DLOCK_OK && op->offer.token) /* handed over while it waited */
        hold_handed(l, h, op->offer.token, op->offer.sent, &op->sent);
    else if (result == DLOCK_OK && op->offer.hand.got && !op->offer.hand.stale && h->held.count == op->before)
        hold_handed(l, h, op->offer.hand.token, op->offer.hand.sent, &op->sent); /* by another process */
    release_call undo;
    int undone = 0;
    dlock_status begun = DLOCK_OK;
    if (result == DLOCK_OK &&
        (begun = dlock__held_begin(c, &h->held, op->before == 0, op->watchdog, op->lease, op->sent)) != DLOCK_OK) {
        char why[512];
        snprintf(why, sizeof why, "lock '%s': %s", l->base.name, dlock_last_error());
        release_call_make(l, h, &undo); /* sent below, before the caller is told */
        undone = 1;
        h->held.count = op->before;
        st = dlock__fail(begun, "%s", why);
    } else if (result == DLOCK__BUSY && op->replica_short) {
        st = dlock__fail(DLOCK_ERR_REPLICA, "lock '%s': fewer than %d replicas acknowledged it within %d ms; undone",
                         l->base.name, c->replica_acks, c->replica_timeout_ms);
    } else if (result == DLOCK__BUSY) {
        st = dlock__fail(DLOCK_ERR_TIMEOUT, "lock '%s' is held by another owner", l->base.name);
    }
    dlock__stats_acquired(&c->stats, lock_kind(l), op->since, st);
    acquire_end end = {l, h, st, st == DLOCK_OK ? h->token : 0, op->acquired, op->arg, ""};
    if (st != DLOCK_OK) snprintf(end.why, sizeof end.why, "%s", dlock_last_error());
    int last = st != DLOCK_OK && op->queued && (l->fair || dlock__wait_count(c, l->wait_channel) == 0);
    int offered = op->offered;
    free(op);
    if (undone) {
        script_then_tell(c, undo.script, undo.nkeys, undo.keys, undo.nargs, undo.args, &end);
        return;
    }
    if (last || (st != DLOCK_OK && offered)) { /* as lock_acquire() */
        const char *keys[4] = {l->base.key, l->queue, l->queue_deadlines, l->queue_offers};
        const char *args[4] = {h->rec.owner, c->publish, l->prefix, "1"}; /* "1": as fair_leave() */
        const char *wkeys[2] = {l->waiters, l->offers};
        const char *wargs[3] = {c->id, last ? "1" : "0", h->rec.owner};
        if (!l->fair && last && dlock__test_before_leave) dlock__test_before_leave();
        /* The caller is told once a leave that may give back is
         * answered: a fair one gives back in the same script. A plain
         * leave without an offer gives nothing back. */
        if (l->fair) {
            script_then_tell(c, DLOCK__SCRIPT_FAIR_LEAVE, 4, keys, h->held.count == 0 ? 4 : 3, args, &end);
            return;
        }
        if (offered) {
            async_leave_offered(l, h, last, wkeys, wargs, &end);
            return;
        }
        async_leave_last(l, wkeys, wargs); /* !offered: last, as the condition says */
    }
    acquire_tell(&end);
}

/* One attempt, sent; dlock__await_reply() takes its answer. */
static dlock_status async_attempt(dlock__await *aw)
{
    lock_async *op = (lock_async *)aw;
    acquire_call ac;
    op->sent = dlock__mono_ms();
    /* After a stale hand no more offers in this wait, as in try_again(). */
    int offer = op->offers && !op->offer.hand.stale;
    acquire_call_make(op->l, op->h, op->lease, aw->wait_ms != 0, aw->e != NULL, offer ? op->sent : -1, &ac);
    op->queued |= aw->wait_ms != 0 && (op->l->fair || aw->e != NULL); /* as acquire_call_make() */
    op->offered |= ac.offered;
    return dlock__async_script_acked(op->l->base.client, ac.script, ac.nkeys, ac.keys, ac.nargs, ac.args,
                                     dlock__await_reply, op);
}

/* A replica-short acquisition is undone as the synchronous call undoes
 * it, waiting for the answer, and counts as busy, as in try_again(). Why
 * wait, on a library thread: an acknowledged attempt runs on a
 * slow-lane thread (async.c), which may, and its next attempt, or the one
 * its caller makes from the callback, goes on a connection of its own,
 * the undo on the shared one. Nothing would order the two at the server,
 * and an undo that landed after such an attempt was granted (afresh,
 * under the same owner string) would delete that new hold. */
static int async_parse(dlock__await *aw, const redisReply *r, long *retry_ms)
{
    lock_async *op = (lock_async *)aw;
    int result = acquire_reply(op->l, op->h, r, dlock__async_acks(), retry_ms);
    op->replica_short = result == REPLICA_SHORT;
    if (!op->replica_short) return result;
    undo_acquire(op->l, op->h);
    return DLOCK__BUSY;
}

static const dlock__await_ops acquire_ops = {async_attempt, async_parse, acquire_done};

dlock_status dlock_lock_acquire_async(dlock_lock *l, long wait_ms, long lease_ms, dlock_acquired_fn cb, void *arg)
{
    if (!l || !cb) return dlock__fail(DLOCK_ERR_INVALID, "lock or callback is NULL");
    if (wait_ms < DLOCK_WAIT_FOREVER) return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    dlock_status st = dlock__check_lease(lease_ms, 3, 1);
    if (st != DLOCK_OK) return st;
    dlock_client *c = l->base.client;
    lock_thread *h = async_hold(l, 1);
    if (!h) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    if ((st = dlock__handle_async_claim(&l->base, &h->rec)) != DLOCK_OK) return st;
    if (h->held.count > 0 && atomic_load(&h->held.lost)) {
        st = dlock__fail(DLOCK_ERR_LOST, "lock '%s' was lost while held; release it first", l->base.name);
    } else {
        lock_async *op = calloc(1, sizeof *op);
        if (!op) {
            st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
        } else {
            op->l = l;
            op->h = h;
            op->watchdog = lease_ms == DLOCK_LEASE_WATCHDOG || h->held.renewed;
            op->lease = op->watchdog ? c->watchdog_lease_ms : lease_ms; /* as lock_acquire() */
            op->before = h->held.count;
            op->since = dlock__stats_clock();
            op->acquired = cb;
            op->arg = arg;
            const char *channel = l->fair ? h->wake_channel : l->wait_channel;
            op->offer = (lock_offer){l, h, op->lease, 0, 0};
            if (!l->fair && c->replica_acks == 0) op->aw.watch.offer = &op->offer; /* as lock_acquire() */
            op->offers = hand_begin(l, h, wait_ms, op->before, op->lease, &op->offer.hand);
            /* Bounded barging, as lock_acquire() */
            int first = op->before != 0 || c->replica_acks != 0 ? DLOCK__AWAIT_TRY
                        : l->fair                               ? DLOCK__AWAIT_IN_LINE
                                                                : DLOCK__AWAIT_BOUNDED; /* as lock_acquire() */
            st = dlock__await_start(&op->aw, &acquire_ops, c, lock_kind(l), channel, wait_ms, first,
                                    op->offers ? &op->offer.hand : NULL);
            if (st == DLOCK_OK) return DLOCK_OK;
            free(op);
        }
    }
    dlock__handle_async_done(&h->rec);
    dlock__async_end(&c->async);
    return st;
}

static void on_release_reply(dlock_status st, redisReply *r, void *arg);

/* An asynchronous release's call: quick when it will do (as
 * dlock_lock_release), else in full with a waiter of this client claimed
 * for a hand-off. */
static dlock_status release_send_async(lock_async *op, int may_be_quick)
{
    dlock_lock *l = op->l;
    release_call rc;
    release_call_make(l, op->h, &rc);
    op->quick = may_be_quick && release_call_quicken(l, op->h, &rc);
    op->next = op->quick ? NULL : release_claim(l, op->h, &rc, &op->claimed);
    op->sent = dlock__mono_ms();
    dlock_status st =
        dlock__async_script(l->base.client, rc.script, rc.nkeys, rc.keys, rc.nargs, rc.args, on_release_reply, op);
    if (st != DLOCK_OK) {
        dlock__wait_settle(l->base.client, op->claimed, 0); /* not sent: nothing was handed over, nobody to wake */
        op->claimed = NULL;
        op->next = NULL;
    }
    return st;
}

static void on_release_reply(dlock_status st, redisReply *r, void *arg)
{
    lock_async *op = arg;
    dlock_lock *l = op->l;
    lock_thread *h = op->h;
    dlock_client *c = l->base.client;
    if (st == DLOCK_OK && op->quick && release_crowded(l, r)) {
        freeReplyObject(r); /* sent back, nothing done: the full release */
        if ((st = release_send_async(op, 0)) == DLOCK_OK) return;
        r = NULL;
    }
    if (st != DLOCK_OK) {
        release_unanswered(l, h, op->next, op->claimed);
    } else {
        st = release_reply(l, h, r, dlock__async_resent(), op->next, op->claimed, op->sent);
    }
    if (r) freeReplyObject(r);
    dlock_released_fn cb = op->released;
    void *cb_arg = op->arg;
    free(op);
    dlock__handle_async_done(&h->rec);
    cb(l, st, cb_arg);
    dlock__async_end(&c->async);
}

dlock_status dlock_lock_release_async(dlock_lock *l, dlock_released_fn cb, void *arg)
{
    if (!l || !cb) return dlock__fail(DLOCK_ERR_INVALID, "lock or callback is NULL");
    lock_thread *h = async_hold(l, 0);
    if (!h || h->held.count == 0)
        return dlock__fail(DLOCK_ERR_NOT_OWNER, "this handle holds lock '%s' by no asynchronous acquire", l->base.name);
    dlock_client *c = l->base.client;
    dlock_status st = dlock__handle_async_claim(&l->base, &h->rec);
    if (st != DLOCK_OK) return st;
    lock_async *op = calloc(1, sizeof *op);
    if (!op) {
        st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    } else if (dlock__held_release_begin(c, &h->held)) {
        st = dlock__fail(DLOCK_ERR_LOST, "lock '%s' was lost while held", l->base.name);
    } else {
        op->l = l;
        op->h = h;
        op->released = cb;
        op->arg = arg;
        st = release_send_async(op, 1);
        if (st == DLOCK_OK) return DLOCK_OK;
        dlock__held_release_failed(c, &h->held);
    }
    free(op);
    dlock__handle_async_done(&h->rec);
    dlock__async_end(&c->async);
    return st;
}

/* The calling thread's hold, or when it has none (never had one, or its
 * last ended unlost), the handle's asynchronous one. */
int dlock_lock_lost(dlock_lock *l)
{
    if (!l) return 0;
    lock_thread *h = thread_hold(l, 0);
    if (h && (h->held.count > 0 || atomic_load(&h->held.lost))) return dlock__held_lost(&h->held);
    h = async_hold(l, 0);
    return h && dlock__held_lost(&h->held);
}

void dlock_lock_set_fence_floor(dlock_lock *l, uint64_t floor)
{
    if (!l) return;
    dlock__atomic_max(&l->base.floor, floor);
}

void dlock_lock_on_lost(dlock_lock *l, dlock_lost_fn fn, void *arg)
{
    if (!l) return;
    dlock__handle_on_lost(&l->base, (dlock__handle_fn)fn, arg);
}

dlock_status dlock_lock_inspect(dlock_client *client, const char *name, dlock_lock_info *info)
{
    if (!client || !info) return dlock__fail(DLOCK_ERR_INVALID, "client or info is NULL");
    memset(info, 0, sizeof *info);
    info->ttl_ms = -1;
    dlock__handle h;
    redisReply *r;
    dlock_status st = dlock__handle_init(&h, client, name, &lock_keys);
    if (st == DLOCK_OK) {
        const char *keys[2] = {h.key, h.fence};
        st = dlock__eval(client, DLOCK__SCRIPT_INSPECT, 2, keys, 0, NULL, &r, NULL);
    }
    dlock__handle_destroy(&h, NULL);
    if (st != DLOCK_OK) return st;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_INTEGER || r->element[2]->type != REDIS_REPLY_INTEGER ||
        r->element[3]->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return dlock__fail(DLOCK_ERR_REDIS, "inspect: unexpected reply");
    }
    if (r->element[0]->len > 0) {
        info->held = 1;
        snprintf(info->holder, sizeof info->holder, "%s", r->element[0]->str);
        info->hold_count = (long)r->element[1]->integer;
        info->ttl_ms = (long)r->element[2]->integer;
    }
    info->last_token = strtoull(r->element[3]->str, NULL, 10);
    freeReplyObject(r);
    return DLOCK_OK;
}

/* Every lock kind keeps all its holds in one hash, so one script breaks
 * any of them: delete the hash, wake its waiters with `wake`. */
dlock_status dlock__force_unlock_hash(dlock_client *client, const char *key, const char *channel, const char *waiters,
                                      const char *wake, int *was_held)
{
    dlock__op op;
    dlock__op_new(client, key, &op);
    const char *keys[4] = {key, channel, op.key, waiters};
    const char *args[4] = {client->publish, op.seq, op.ttl, wake};
    long long deleted = 0;
    dlock_status st = dlock__eval_int(client, DLOCK__SCRIPT_FORCE_UNLOCK, waiters ? 4 : 3, keys, 4, args, &deleted);
    if (st == DLOCK_OK && was_held) *was_held = deleted == 1;
    return st;
}

dlock_status dlock_lock_force_unlock(dlock_client *client, const char *name, int *was_held)
{
    if (was_held) *was_held = 0;
    dlock__handle h;
    dlock_status st = dlock__handle_init(&h, client, name, &lock_keys);
    char *waiters = st == DLOCK_OK ? dlock__key(name, ":w") : NULL;
    if (st == DLOCK_OK && !waiters) st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    if (st == DLOCK_OK) st = dlock__force_unlock_hash(client, h.key, h.channel, waiters, "1", was_held);
    free(waiters);
    dlock__handle_destroy(&h, NULL);
    return st;
}
