/*
 * Helpers of the suites about the lock itself, which share them:
 * test_lock.c (the lock), test_watchdog.c (renewals and loss reports),
 * test_connection.c (AUTH, ACL, SELECT and the URL), test_replica.c,
 * test_failover.c (a waiter on a failed-over Cluster) and test_fairlock.c
 * (a waiter of another client handed the fair lock). Every one of them
 * fails the calling cmocka test on a broken precondition, except
 * th_lock_client(), which child processes use.
 */
#ifndef DLOCK_TH_LOCK_H
#define DLOCK_TH_LOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dlock.h"
#include "target.h"

/* A client of `url` with the given watchdog lease (0: default); NULL when
 * it cannot be made, for use in child processes. */
dlock_client *th_lock_client(const char *url, long watchdog_lease);

/* The same, failing the test when it cannot be made. */
dlock_client *th_lock_client_or_fail(const char *url, long watchdog_lease);

/* A handle on lock `name`. */
dlock_lock *th_lock_new(dlock_client *c, const char *name);

/* Run `cmd` (one key, its argument) on `r`, or on the target's master
 * serving the key when `r` is NULL, and return its integer (or
 * number-string) reply; -2 for nil. */
long long th_lock_int(th_target *t, const th_redis *r, const char *cmd, const char *key);

/* Wait (up to 2 s) until `n` processes are registered as waiting for
 * plain lock `name` (its set "dlock:{NAME}:w", acquire.lua), on `r` or
 * the target's master for the name when `r` is NULL; fails the test
 * otherwise. */
void th_lock_wait_registered(th_target *t, const th_redis *r, const char *name, long long n);

/* The holder recorded in Redis belongs to client `c`:
 * "<id>:<thread digits>:<handle digits>". */
int th_lock_held_by(const dlock_lock_info *info, const dlock_client *c);

/* What a lock's loss callback saw: how many calls, the last token. */
typedef struct th_lost {
    atomic_int calls;
    _Atomic uint64_t token;
} th_lost;

/* A dlock_lock_on_lost() callback; `arg` is a th_lost. */
void th_lost_record(dlock_lock *l, uint64_t token, void *arg);

/* `rounds` rounds of: take `l`, start a thread that waits for it, let
 * that waiter sleep 100 ms (past the barging bound), release and at once
 * ask again; fails the test when the releaser got the lock back before the
 * waiter had it (it barged). */
void th_lock_no_barging(dlock_lock *l, int rounds);

/* Poll dlock_lock_lost() for up to `ms`; the time it took, or -1. */
long long th_lock_wait_lost(dlock_lock *l, long ms);

/* A thread that waits for a lock, for the cases that watch a waiter of
 * another client: th_waiter_start() starts it on dlock_lock_acquire(l,
 * wait_ms, lease_ms); once it returned, `st`, `token` and `at`
 * (th_now_ms()) say how, with what and when, and it keeps what it got
 * until th_waiter_finish(), which releases that (`released`) and joins it. */
typedef struct th_waiter {
    dlock_lock *l;
    long wait_ms, lease_ms;
    dlock_status st, released;
    uint64_t token;
    long long at;
    atomic_int done, release_now;
    pthread_t thread;
} th_waiter;

void th_waiter_start(th_waiter *w, dlock_lock *l, long wait_ms, long lease_ms);
/* Whether it has returned from its acquire. */
int th_waiter_returned(th_waiter *w);
/* Wait until it has returned from its acquire. */
void th_waiter_wait(th_waiter *w);
void th_waiter_finish(th_waiter *w);
/* Wait until it has returned from its acquire, which must have succeeded,
 * then release and join it (the release must succeed too); how long after
 * `since` (th_now_ms()) the acquire returned. */
long long th_waiter_granted_after(th_waiter *w, long long since);

#endif
