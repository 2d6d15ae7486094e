/*
 * Replica-safe acquire against a real master and replica: an acquisition
 * counts only once a replica has it (WAIT on the same connection), and is
 * undone when the replica does not acknowledge in time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "dlock_lua.h" /* dlock__lua_release_sha: the undo's request */
#include "harness.h"
#include "proxy.h"
#include "th_lock.h"
#include "watchdog.h" /* dlock__test_watchdog_fails */

static th_redis master, replica;

/* Wait until the replica reports its link to the master up. */
static int link_up(void)
{
    for (int i = 0; i < 500; i++) {
        redisReply *r = th_redis_cmd(&replica, "INFO replication");
        int up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up");
        if (r) freeReplyObject(r);
        if (up) return 1;
        usleep(20000);
    }
    return 0;
}

static int setup(void **state)
{
    (void)state;
    if (th_redis_start(&master, NULL) != 0) return -1;
    char conf[128];
    snprintf(conf, sizeof conf, "replicaof 127.0.0.1 %d\n", master.port);
    if (th_redis_start(&replica, conf) != 0) return -1;
    return link_up() ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    th_redis_stop(&replica);
    th_redis_stop(&master);
    th_redis_stop_all(); /* and any server a failed test left running */
    return 0;
}

static dlock_client *safe_client_waiting(int acks, int replica_timeout_ms)
{
    dlock_options o = {0};
    o.replica_acks = acks;
    o.replica_timeout_ms = replica_timeout_ms;
    o.command_timeout_ms = replica_timeout_ms + 2000;
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(master.url, &o, &c), DLOCK_OK);
    return c;
}

/* For the cases that expect the replica to acknowledge: a WAIT of 1.5 s,
 * which a loaded machine's replica meets (it has missed 200 ms). */
static dlock_client *patient_safe_client(void)
{
    return safe_client_waiting(1, 1500);
}

static dlock_client *safe_client(int acks)
{
    return safe_client_waiting(acks, 200);
}

static long long exists_on(th_redis *s, const char *key)
{
    redisReply *r = th_redis_cmd(s, "EXISTS %s", key);
    long long v = r ? r->integer : -1;
    if (r) freeReplyObject(r);
    return v;
}

/* With the replica up, the acquisition is acknowledged and is on the
 * replica by the time acquire returns. */
static void replica_safe_acquire_succeeds_when_the_replica_acknowledges(void **state)
{
    (void)state;
    dlock_client *c = patient_safe_client();
    dlock_lock *l, *f;
    assert_int_equal(dlock_lock_new(c, "rs-ok", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(exists_on(&replica, "dlock:{rs-ok}"), 1);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_lock_new_fair(c, "rs-fair", &f), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(f, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(exists_on(&replica, "dlock:{rs-fair}"), 1);
    assert_int_equal(dlock_lock_release(f), DLOCK_OK);
    dlock_lock_free(l);
    dlock_lock_free(f);
    dlock_client_free(c);
}

/* The replica is paused (SIGSTOP): WAIT gets no acknowledgement within
 * 200 ms, so acquire reports DLOCK_ERR_REPLICA and the lock is not left
 * held on the master. With a wait, it keeps trying until the wait ends and
 * still reports the replica shortfall rather than a plain timeout. Once the
 * replica resumes, acquire works again. */
static void replica_safe_acquire_is_undone_when_the_replica_is_paused(void **state)
{
    (void)state;
    dlock_client *c = safe_client(1);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "rs-paused", &l), DLOCK_OK);
    th_redis_pause(&replica);
    long long t0 = th_now_ms();
    dlock_status st = dlock_lock_acquire(l, 0, 10000, NULL);
    long long took = th_now_ms() - t0;
    long long held = exists_on(&master, "dlock:{rs-paused}");
    dlock_status st2 = dlock_lock_acquire(l, 600, 10000, NULL);
    long long took2 = th_now_ms() - t0 - took;
    th_redis_resume(&replica);
    assert_int_equal(st, DLOCK_ERR_REPLICA);
    assert_true(took >= 190);
    assert_int_equal(held, 0);
    assert_int_equal(st2, DLOCK_ERR_REPLICA);
    assert_true(took2 >= 590);
    assert_int_equal(exists_on(&master, "dlock:{rs-paused}"), 0);
    /* Its 200 ms WAIT may still come up short while the resumed replica
     * catches up on a loaded machine: asked a few times, it works. */
    for (int i = 0; i < 10 && (st = dlock_lock_acquire(l, 0, 10000, NULL)) == DLOCK_ERR_REPLICA; i++) usleep(100000);
    assert_int_equal(st, DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* Asking for more replicas than exist can never be satisfied: refused,
 * and nothing stays held. Off by default: a plain client ignores replicas. */
static void replica_count_is_enforced_and_off_by_default(void **state)
{
    (void)state;
    dlock_client *c = safe_client(2);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "rs-two", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_ERR_REPLICA);
    assert_int_equal(exists_on(&master, "dlock:{rs-two}"), 0);
    dlock_lock_free(l);
    dlock_client_free(c);
    dlock_client *plain = NULL;
    assert_int_equal(dlock_client_new(master.url, NULL, &plain), DLOCK_OK);
    assert_int_equal(dlock_lock_new(plain, "rs-two", &l), DLOCK_OK);
    th_redis_pause(&replica);
    dlock_status st = dlock_lock_acquire(l, 0, 10000, NULL);
    th_redis_resume(&replica);
    assert_int_equal(st, DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_free(plain);
    dlock_options bad = {0};
    bad.replica_acks = 1;
    bad.replica_timeout_ms = 5000;
    bad.command_timeout_ms = 1000;
    assert_int_equal(dlock_client_new(master.url, &bad, &plain), DLOCK_ERR_INVALID);
}

/* Bounded barging where the lock cannot be handed over: a replica-safe
 * acquire waits for the replica after its own attempt, so a release does
 * not hand the lock to a waiting thread in the script (lock.c); it wakes
 * it, and the releaser's next attempt would reach Redis first. A holder
 * that releases and at once asks again must still queue behind a thread
 * of its client that has waited past the bound (wait.c,
 * dlock__wait_begin). Without the bound the releaser wins the first round
 * already (checked by switching it off). The replica gets 1 s to answer:
 * fifteen replica-safe acquisitions must not fail on a busy machine. */
static void a_releaser_asking_again_queues_behind_an_old_waiter_it_cannot_hand_over_to(void **state)
{
    (void)state;
    dlock_client *c = safe_client_waiting(1, 1000);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "rs-barge", &l), DLOCK_OK);
    th_lock_no_barging(l, 5);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* What an asynchronous acquire's callback saw. */
typedef struct async_done {
    atomic_int done;
    dlock_status st;
} async_done;

static void on_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)l;
    (void)token;
    async_done *d = arg;
    d->st = st;
    atomic_store(&d->done, 1);
}

static void on_released(dlock_lock *l, dlock_status st, void *arg)
{
    on_acquired(l, st, 0, arg);
}

/* One round of the case below, the replica-safe acquire made `async`ly
 * or not; the time from its return to the waiter's grant. */
static long long waiter_woken_after_undo(int async)
{
    const char *name = async ? "rs-wake-async" : "rs-wake";
    char key[64];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    dlock_client *holder = th_lock_client_or_fail(master.url, 0), *other = th_lock_client_or_fail(master.url, 0);
    dlock_client *safe = safe_client(1);
    dlock_lock *h = th_lock_new(holder, name), *w = th_lock_new(other, name), *s = th_lock_new(safe, name);
    assert_int_equal(dlock_lock_acquire(h, 0, 30000, NULL), DLOCK_OK);
    th_waiter waiter;
    th_waiter_start(&waiter, w, 20000, 10000);
    th_lock_wait_registered(NULL, &master, name, 1);
    /* the lock goes without a release (an operator's DEL, a lease run
     * out): nobody is woken, and the waiter sleeps to its timed retry */
    redisReply *r = th_redis_cmd(&master, "DEL %s", key);
    assert_non_null(r);
    freeReplyObject(r);
    th_redis_pause(&replica);
    dlock_status st;
    if (async) {
        async_done d = {0};
        assert_int_equal(dlock_lock_acquire_async(s, 0, 10000, on_acquired, &d), DLOCK_OK);
        while (!atomic_load(&d.done)) usleep(1000);
        st = d.st;
    } else {
        st = dlock_lock_acquire(s, 0, 10000, NULL);
    }
    long long undone = th_now_ms();
    th_redis_resume(&replica);
    assert_int_equal(st, DLOCK_ERR_REPLICA);
    long long after = th_waiter_granted_after(&waiter, undone);
    dlock_lock_free(h);
    dlock_lock_free(w);
    dlock_lock_free(s);
    dlock_client_free(holder);
    dlock_client_free(other);
    dlock_client_free(safe);
    return after;
}

/* An acquisition undone for want of replicas is released as any last
 * hold is: a waiter of another process registered on the lock is woken
 * at once, not left to find the lock free at its timed retry (2 s). The
 * waiter registers while the lock is held, the lock is then deleted
 * behind its back, and a replica-safe client takes it with its replica
 * paused. With the undo's release made of the lock's two keys alone (as
 * it was), the waiter was granted 1.7 s after the undo in each round. */
static void a_waiter_of_another_process_is_woken_when_an_acquisition_is_undone(void **state)
{
    (void)state;
    for (int async = 0; async <= 1; async++) {
        long long after = waiter_woken_after_undo(async);
        printf("# %s: waiter granted %lld ms after the undo\n", async ? "async" : "sync", after);
        assert_true(after < 1000);
    }
}

/* The second acquisition that retry_at_once() makes from the callback of
 * a first one undone for want of replicas, once the replica is back. */
typedef struct retried {
    async_done first, second;
    uint64_t token;
} retried;

static void on_retried(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)l;
    retried *r = arg;
    r->token = token;
    r->second.st = st;
    atomic_store(&r->second.done, 1);
}

/* From the first acquisition's callback: note it, and ask again at once. */
static void first_done_then_again(dlock_lock *l, dlock_status st, retried *r, int again)
{
    r->first.st = st;
    atomic_store(&r->first.done, 1);
    if (!again) return;
    dlock_status sent = dlock_lock_acquire_async(l, 0, 10000, on_retried, r);
    if (sent != DLOCK_OK) {
        r->second.st = sent;
        atomic_store(&r->second.done, 1);
    }
}

/* An asynchronous call's outcome, waited for: DLOCK_ERR_TIMEOUT if none
 * came within 5 s. */
static dlock_status async_wait(dlock_status started, async_done *d)
{
    if (started != DLOCK_OK) return started;
    long long until = th_now_ms() + 5000;
    while (!atomic_load(&d->done) && th_now_ms() < until) usleep(1000);
    return atomic_load(&d->done) ? d->st : DLOCK_ERR_TIMEOUT;
}

/* Up to 5 s for the retry from the first acquisition's callback to end. */
static void retry_wait(retried *r)
{
    long long until = th_now_ms() + 5000;
    while (!atomic_load(&r->second.done) && th_now_ms() < until) usleep(1000);
}

/* The first acquisition ended with `first`, its retry from the callback
 * was granted, and the hold is still on the master once a late give-back
 * would have landed; then the retry's hold is released. */
static void retry_kept(dlock_lock *l, retried *r, dlock_status first, const char *key)
{
    assert_int_equal(atomic_load(&r->first.done), 1);
    assert_int_equal(r->first.st, first);
    assert_int_equal(atomic_load(&r->second.done), 1);
    assert_int_equal(r->second.st, DLOCK_OK);
    usleep(500000);
    if (exists_on(&master, key) != 1) fail_msg("the retry was reported taken, and the lock is free");
    async_done d = {0};
    assert_int_equal(async_wait(dlock_lock_release_async(l, on_released, &d), &d), DLOCK_OK);
}

static void retry_at_once(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)token;
    if (st == DLOCK_ERR_REPLICA) th_redis_resume(&replica);
    first_done_then_again(l, st, arg, st == DLOCK_ERR_REPLICA);
}

/* A replica-safe client (one replica, a 200 ms WAIT) through a new proxy
 * in front of the master. */
static dlock_client *safe_client_via(th_proxy **px)
{
    *px = th_proxy_start(&master);
    assert_non_null(*px);
    dlock_options o = {0};
    o.replica_acks = 1;
    o.replica_timeout_ms = 200;
    o.command_timeout_ms = 2000;
    dlock_client *c;
    assert_int_equal(dlock_client_new(th_proxy_url(*px), &o, &c), DLOCK_OK);
    return c;
}

/* An asynchronous acquisition undone for want of replicas gives the lock
 * back under its handle's owner string, and its caller may ask again on
 * the handle at once, the replica back. That attempt goes on a connection
 * of its own (it is followed by WAIT), the undo on the shared one, so
 * nothing orders the two at the server; an undo that lands after the
 * retry was granted (afresh, under the same owner) deletes it, its caller
 * sure of a lock that is free. So the undo is answered before the caller
 * is told. Here a proxy holds the undo back for 300 ms. */
static void a_retry_from_the_callback_of_an_undone_async_acquire_keeps_its_hold(void **state)
{
    (void)state;
    th_proxy *px;
    dlock_client *c = safe_client_via(&px);
    dlock_lock *l = th_lock_new(c, "rs-retry");
    th_redis_pause(&replica);
    th_proxy_delay_next(px, dlock__lua_release_sha, 300);
    retried r = {0};
    assert_int_equal(dlock_lock_acquire_async(l, 0, 10000, retry_at_once, &r), DLOCK_OK);
    retry_wait(&r);
    if (!atomic_load(&r.first.done)) th_redis_resume(&replica);
    retry_kept(l, &r, DLOCK_ERR_REPLICA, "dlock:{rs-retry}");
    dlock_lock_free(l);
    dlock_client_free(c);
    th_proxy_stop(px);
}

/* The holder that retry_after_release() lets go from the waiter's
 * callback: its hold is an asynchronous one (the handle's, not the test
 * thread's), on a client of its own. */
static dlock_lock *fair_holder;

static void retry_after_release(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)token;
    async_done d = {0};
    int released =
        st == DLOCK_ERR_TIMEOUT && async_wait(dlock_lock_release_async(fair_holder, on_released, &d), &d) == DLOCK_OK;
    first_done_then_again(l, st, arg, released);
}

/* The same for a fair lock's leave, which gives back a lock that names
 * the leaving waiter (fair_leave.lua): a replica-safe waiter's timed-out
 * wait leaves on the shared connection, and a retry from its callback
 * goes on a pooled one. With the leave held back 300 ms, a retry made
 * before its answer was granted (the waiter's own place in the queue
 * still there) and then deleted by the leave. */
static void a_retry_after_an_async_fair_wait_ran_out_keeps_its_hold(void **state)
{
    (void)state;
    th_proxy *px;
    dlock_client *c = safe_client_via(&px), *hc = th_lock_client_or_fail(master.url, 0);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new_fair(c, "rs-fair-retry", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_new_fair(hc, "rs-fair-retry", &fair_holder), DLOCK_OK);
    async_done held = {0};
    assert_int_equal(async_wait(dlock_lock_acquire_async(fair_holder, 0, 30000, on_acquired, &held), &held), DLOCK_OK);
    th_proxy_delay_next(px, dlock__lua_fair_leave_sha, 300);
    retried r = {0};
    assert_int_equal(dlock_lock_acquire_async(l, 300, 10000, retry_after_release, &r), DLOCK_OK);
    retry_wait(&r);
    retry_kept(l, &r, DLOCK_ERR_TIMEOUT, "dlock:{rs-fair-retry}");
    dlock_lock_free(l);
    dlock_lock_free(fair_holder);
    dlock_client_free(c);
    dlock_client_free(hc);
    th_proxy_stop(px);
}

/* From the first acquisition's callback, its watchdog refused: let
 * watchdogs start again, and ask again at once. */
static void retry_with_a_watchdog(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)token;
    atomic_store(&dlock__test_watchdog_fails, 0);
    first_done_then_again(l, st, arg, st == DLOCK_ERR_SYS);
}

/* The same for a grant whose watchdog could not start (no thread to be
 * had): the grant is given back under the handle's owner string on the
 * shared connection, and a retry from the callback goes on a pooled one.
 * With the give-back held back 300 ms, a retry made before its answer
 * was taken as a re-entry of the grant still there, and then deleted
 * with it (release.lua sets the count, it does not decrement it). */
static void a_retry_after_an_async_grant_whose_watchdog_failed_keeps_its_hold(void **state)
{
    (void)state;
    th_proxy *px;
    dlock_client *c = safe_client_via(&px);
    dlock_lock *l = th_lock_new(c, "rs-wd-retry");
    atomic_store(&dlock__test_watchdog_fails, 1);
    th_proxy_delay_next(px, dlock__lua_release_sha, 300);
    retried r = {0};
    assert_int_equal(dlock_lock_acquire_async(l, 0, DLOCK_LEASE_WATCHDOG, retry_with_a_watchdog, &r), DLOCK_OK);
    retry_wait(&r);
    atomic_store(&dlock__test_watchdog_fails, 0);
    retry_kept(l, &r, DLOCK_ERR_SYS, "dlock:{rs-wd-retry}");
    dlock_lock_free(l);
    dlock_client_free(c);
    th_proxy_stop(px);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(replica_safe_acquire_succeeds_when_the_replica_acknowledges),
        cmocka_unit_test(replica_safe_acquire_is_undone_when_the_replica_is_paused),
        cmocka_unit_test(replica_count_is_enforced_and_off_by_default),
        cmocka_unit_test(a_releaser_asking_again_queues_behind_an_old_waiter_it_cannot_hand_over_to),
        cmocka_unit_test(a_waiter_of_another_process_is_woken_when_an_acquisition_is_undone),
        cmocka_unit_test(a_retry_from_the_callback_of_an_undone_async_acquire_keeps_its_hold),
        cmocka_unit_test(a_retry_after_an_async_fair_wait_ran_out_keeps_its_hold),
        cmocka_unit_test(a_retry_after_an_async_grant_whose_watchdog_failed_keeps_its_hold),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
