/*
 * The base of the lock family. As libuv's handles begin with
 * UV_HANDLE_FIELDS, every primitive's struct begins with a dlock__handle:
 * its client, name and keys, the records its threads keep, the loss
 * callback and the fencing floor. Every hold begins with a dlock__held: its
 * watchdog entry, hold count, lease, trusted time, lost flag and the time
 * it began (for the metrics). What a primitive writes itself is its
 * scripts and the logic between them.
 *
 * The life of a hold, in the calls below:
 *
 *   acquire:  run the script, then dlock__held_begin() (trust, renewal)
 *   lost:     the watchdog's on_lost calls dlock__held_lose(), then the
 *             callback from dlock__handle_callback()
 *   release:  dlock__held_release_begin(), the script, then
 *             dlock__held_release_failed() or dlock__held_release_done()
 *   query:    dlock__held_lost() (the flag, or the holder's clock)
 */
#ifndef DLOCK__HANDLE_H
#define DLOCK__HANDLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock.h"
#include "watchdog.h"

/* The struct of type `type` whose member `member` is at `ptr`: from a
 * watchdog entry back to the hold and record around it. */
#define dlock__container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* The suffixes a primitive's keys carry after "dlock:{NAME}"; NULL for a
 * key it does not have. */
typedef struct dlock__handle_keys {
    const char *key; /* the state of the primitive */
    /* non-NULL when it draws fencing tokens: the handle's fence is then its
     * slot's counter (dlock__fence_key); the suffix names the per-name
     * counter of earlier versions, which the scripts fold into it */
    const char *fence;
    const char *channel; /* where releases wake its waiters */
} dlock__handle_keys;

/* A thread's record on a handle; a primitive's own record begins with it. */
typedef struct dlock__thread_rec {
    struct dlock__thread_rec *next;
    unsigned long thread; /* dlock__thread_number() */
    /* "<client id>:<thread number>:<handle number>": two handles of one
     * name are two owners even in one thread (see lock.c) */
    char owner[64];
    atomic_int async_busy; /* record 0: an asynchronous call is in flight */
} dlock__thread_rec;

/* The loss callback as stored: each primitive casts its own type to and
 * from this one (the type C allows any function pointer to round-trip). */
typedef void (*dlock__handle_fn)(void);

typedef struct dlock__handle {
    dlock_client *client;
    unsigned long number; /* distinguishes handles in owner strings */
    char *name, *key, *fence, *channel;
    pthread_mutex_t mu; /* guards threads, fn, arg */
    dlock__thread_rec *threads;
    dlock__handle_fn fn;
    void *arg;
    atomic_ullong floor; /* the fencing floor the caller set */
} dlock__handle;

/* One hold; a primitive's hold begins with it. The holder fills wd's
 * script, kind, key, owner and on_lost once, when it makes the record;
 * wd.kind also names the kind to the metrics when there is no watchdog. */
typedef struct dlock__held {
    dlock__wd_entry wd; /* first, so the watchdog's entry leads back here */
    long count;         /* re-entries; 0 while not held */
    long lease_ms;
    int renewed;           /* registered with the watchdog (holder only) */
    int64_t trusted_until; /* explicit lease: believed until then (monotonic); 0 with the watchdog */
    int64_t held_since;    /* when the acquire that began the hold returned (dlock__stats_clock) */
    atomic_int lost;
} dlock__held;

/* Make a handle of `size` bytes (the primitive's struct, whose first
 * member is the dlock__handle) for `name` on `client`, with the keys named
 * by `keys`: the checks and allocation every dlock_*_new() does. */
dlock_status dlock__handle_new(size_t size, dlock_client *client, const char *name, const dlock__handle_keys *keys,
                               dlock__handle **out);

/* The same, on a handle the caller owns (a primitive that checks its own
 * arguments, or a short-lived one on the stack for an admin call); undone
 * by dlock__handle_destroy(), also when it failed. */
dlock_status dlock__handle_init(dlock__handle *h, dlock_client *client, const char *name,
                                const dlock__handle_keys *keys);

/* Free what dlock__handle_init() made and every thread record, after
 * `drop` (may be NULL) let go of what the primitive hung on each. Not the
 * handle itself. */
void dlock__handle_destroy(dlock__handle *h, void (*drop)(dlock__handle *h, dlock__thread_rec *t));

/* The calling thread's record: `size` bytes beginning with a
 * dlock__thread_rec, made on first use when `create` (its owner filled,
 * then `init` run under the handle's mutex, may be NULL, -1 to fail);
 * NULL when there is none or on failure. */
dlock__thread_rec *dlock__handle_thread(dlock__handle *h, size_t size, int create,
                                        int (*init)(dlock__handle *h, dlock__thread_rec *t));

/* The same for record `thread` (a thread number; 0 is the handle's own
 * record, which no thread has: the holds of the asynchronous API, owned by
 * the handle). */
dlock__thread_rec *dlock__handle_record(dlock__handle *h, unsigned long thread, size_t size, int create,
                                        int (*init)(dlock__handle *h, dlock__thread_rec *t));

/* Claim record 0 for one asynchronous call (one at a time per handle:
 * DLOCK_ERR_INVALID while another is in flight), counted in flight for
 * dlock_client_free(); dlock__handle_async_done() gives it back once the
 * callback is about to run. */
dlock_status dlock__handle_async_claim(dlock__handle *h, dlock__thread_rec *rec);
void dlock__handle_async_done(dlock__thread_rec *rec);

/* One asynchronous call on a handle without owners (a semaphore's, a
 * latch's): record 0 claimed as above, and the call's state allocated,
 * `size` bytes zeroed. NULL with *st set (message too) when the handle is
 * busy, the client is being freed or memory ran out; else *rec is the
 * record. A call that is then not sent gives both back with
 * dlock__handle_async_abandon(). */
void *dlock__handle_async_op(dlock__handle *h, size_t size, dlock__thread_rec **rec, dlock_status *st);
void dlock__handle_async_abandon(dlock__handle *h, dlock__thread_rec *rec);

/* Set, or read, the loss callback and its argument. */
void dlock__handle_on_lost(dlock__handle *h, dlock__handle_fn fn, void *arg);
dlock__handle_fn dlock__handle_callback(dlock__handle *h, void **arg);

/* Renew `e` (its script, kind, key, owner and on_lost filled) with lease
 * `lease_ms` started at monotonic `sent`, starting the client's watchdog
 * thread on first use: DLOCK_ERR_SYS when it cannot start. */
dlock_status dlock__handle_renew(dlock_client *client, dlock__wd_entry *e, long lease_ms, int64_t sent);

/* The acquire that (re-)entered `h` returned: a new hold (`first`) starts
 * its clock and forgets an old loss; the lease is trusted until its
 * safety margin (explicit) or renewed (`watchdog`) from `sent`, when the
 * acquire was sent. A new hold answered after that trusted time is
 * DLOCK_ERR_LOST, and on that or DLOCK_ERR_SYS (no watchdog thread) the
 * caller gives back what it took and fails with the message set here. */
dlock_status dlock__held_begin(dlock_client *client, dlock__held *h, int first, int watchdog, long lease_ms,
                               int64_t sent);

/* Mark `h` lost; 1 (and counted in the metrics) the first time only. */
int dlock__held_lose(dlock_client *client, dlock__held *h);

/* The hold is over: counted, count zero, renewal stopped. */
void dlock__held_end(dlock_client *client, dlock__held *h);

/* Lost by the flag the watchdog sets, or by the holder's clock: from the
 * moment its trusted time is over, whether or not the watchdog thread has
 * run yet, and for an explicit lease, which has no watchdog. */
int dlock__held_lost(const dlock__held *h);

/* Before the release script: a hold already lost ends here (returns 1,
 * the caller reports DLOCK_ERR_LOST). Otherwise 0, and when this is the
 * last release of a renewed hold, the watchdog is told a release is in
 * flight, so a renewal that races it is not taken for a loss. */
int dlock__held_release_begin(dlock_client *client, dlock__held *h);

/* The release script failed: the hold is unchanged, renewal goes on. */
void dlock__held_release_failed(dlock_client *client, dlock__held *h);

/* The release script answered `left` (holds left, -1: not ours any more),
 * from a send that was `retried`. Returns 1 when the hold was lost
 * before it (ended and counted; the caller reports DLOCK_ERR_LOST). A
 * resent last release answers -1 when the first send did release it
 * before its reply was lost: either way nothing is held now, not a loss. */
int dlock__held_release_done(dlock_client *client, dlock__held *h, long left, int retried);

#endif
