/*
 * The watchdog against real servers (one server, Sentinel or Cluster:
 * target.h): it keeps a hold past its lease, stops renewing at release,
 * rides out a server pause shorter than the lease, and reports a hold
 * lost (flag and callback, once) when the key is deleted behind the
 * holder's back or the holder was paused past its lease; a handle freed
 * while a renewal is in flight is safe.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "target.h"
#include "th_lock.h"

static th_target server;

static dlock_client *new_client(long watchdog_lease)
{
    return th_lock_client_or_fail(server.url, watchdog_lease);
}
static long long redis_int(const char *cmd, const char *key)
{
    return th_lock_int(&server, NULL, cmd, key);
}

/* ------------------------------------------------------------------------ */

/* With a 600 ms watchdog lease, a watchdog hold is still there after
 * 2400 ms (four leases), with a TTL of at most one lease, and another
 * client cannot take it; after release it is free at once. Without
 * renewal the key would expire at 600 ms. (Not shorter: the hold is
 * trusted for 90 % of its lease less 8 ms after each renewal is sent, and
 * a loaded machine has stalled a process past 270 ms.) */
static void watchdog_keeps_the_lock_past_its_lease(void **state)
{
    (void)state;
    dlock_client *c = new_client(600), *c2 = new_client(0);
    dlock_lock *l = th_lock_new(c, "wd"), *l2 = th_lock_new(c2, "wd");
    uint64_t tok;
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, &tok), DLOCK_OK);
    long long pttl = redis_int("PTTL %s", "dlock:{wd}");
    assert_true(pttl > 0 && pttl <= 600);
    usleep(2400000);
    pttl = redis_int("PTTL %s", "dlock:{wd}");
    if (pttl <= 0 || pttl > 600) fail_msg("PTTL after 2400 ms: %lld", pttl);
    assert_int_equal(dlock_lock_lost(l), 0);
    assert_int_equal(dlock_lock_acquire(l2, 0, 5000, NULL), DLOCK_ERR_TIMEOUT);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c2, "wd", &info), DLOCK_OK);
    assert_true(th_lock_held_by(&info, c));
    assert_true(info.last_token == tok);

    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{wd}"), 0);
    assert_int_equal(dlock_lock_acquire(l2, 0, 5000, NULL), DLOCK_OK);
    /* The released hold is no longer renewed: l2's explicit lease stands. */
    usleep(150000);
    pttl = redis_int("PTTL %s", "dlock:{wd}");
    assert_true(pttl > 0 && pttl <= 4850);
    assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
    dlock_lock_free(l2);
    dlock_lock_free(l);
    dlock_client_free(c2);
    dlock_client_free(c);
}

/* After release the watchdog stops renewing: with a 600 ms lease it would
 * renew every 200 ms, so 800 ms of silence from the only client proves it
 * (one renewal already in flight at release may still land). The lease is
 * not shorter because a CI machine running the suites side by side on two
 * cores has stalled the process past a 90 ms lease, and the hold was then
 * rightly reported lost at release; a loaded one, past 270 ms. */
static void released_hold_is_no_longer_renewed(void **state)
{
    (void)state;
    dlock_client *c = new_client(600);
    dlock_lock *l = th_lock_new(c, "wd-stop");
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    long long held_from = th_target_calls(&server, "evalsha"), renewals = 0, t0 = th_now_ms();
    /* It was renewing (every 200 ms; on a loaded machine maybe slower), so
     * the count below means something. */
    while ((renewals = th_target_calls(&server, "evalsha") - held_from) < 3 && th_now_ms() - t0 < 5000) usleep(20000);
    assert_true(renewals >= 3);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    long long after_release = th_target_calls(&server, "evalsha");
    usleep(800000);
    long long later = th_target_calls(&server, "evalsha") - after_release;
    if (later > 1) fail_msg("%lld script calls in the 800 ms after release", later);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* The server stops answering for 800 ms, well inside the 2000 ms lease:
 * the renewal due at 667 ms times out (200 ms command timeout) and is
 * retried every 200 ms until one gets through after the pause, so the
 * hold is neither reported lost nor lets anyone else in. A watchdog that
 * gave up on the first failed renewal would report it lost. */
static void watchdog_rides_out_a_server_pause_shorter_than_the_lease(void **state)
{
    (void)state;
    dlock_options o = {0};
    o.watchdog_lease_ms = 2000;
    o.command_timeout_ms = 200;
    dlock_client *c = NULL, *other = new_client(0);
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    dlock_lock *l = th_lock_new(c, "wd-pause"), *l2 = th_lock_new(other, "wd-pause");
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    usleep(500000);
    assert_int_equal(th_target_pause(&server, "dlock:{wd-pause}"), 0);
    usleep(800000);
    assert_int_equal(th_target_resume(&server, "dlock:{wd-pause}"), 0);
    usleep(2000000); /* a full lease after the pause: renewals resumed */
    assert_int_equal(dlock_lock_lost(l), 0);
    assert_int_equal(dlock_lock_acquire(l2, 0, 5000, NULL), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l2);
    dlock_lock_free(l);
    dlock_client_free(other);
    dlock_client_free(c);
}

/* Someone deletes the lock key behind the holder's back: the watchdog
 * (renewing every 200 ms for a 600 ms lease) finds it gone, sets
 * dlock_lock_lost() and calls on_lost once with the hold's token, within
 * two leases (one, with room for a loaded machine). Until released the
 * hold cannot be re-entered (DLOCK_ERR_LOST), release reports
 * DLOCK_ERR_LOST, and a new acquisition clears the flag. A watchdog that treated "not renewed" as success would
 * never report it. */
static void deleted_lock_is_reported_lost(void **state)
{
    (void)state;
    dlock_client *c = new_client(600);
    dlock_lock *l = th_lock_new(c, "deleted");
    th_lost rec = {0, 0};
    dlock_lock_on_lost(l, th_lost_record, &rec);
    uint64_t tok, tok2;
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, &tok), DLOCK_OK);
    usleep(50000);
    assert_int_equal(dlock_lock_lost(l), 0);
    assert_int_equal(redis_int("DEL %s", "dlock:{deleted}"), 1);
    long long took = th_lock_wait_lost(l, 3000);
    if (took < 0 || took > 1200) fail_msg("loss noticed after %lld ms (lease 600)", took);
    usleep(20000); /* the callback runs right after the flag is set */
    assert_int_equal(atomic_load(&rec.calls), 1);
    assert_true(atomic_load(&rec.token) == tok);

    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_ERR_LOST);
    assert_int_equal(dlock_lock_release(l), DLOCK_ERR_LOST);
    assert_int_equal(dlock_lock_release(l), DLOCK_ERR_NOT_OWNER);
    assert_int_equal(dlock_lock_lost(l), 1); /* still says the last hold was lost */

    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, &tok2), DLOCK_OK);
    assert_int_equal(dlock_lock_lost(l), 0);
    assert_true(tok2 > tok);
    usleep(800000);
    assert_int_equal(dlock_lock_lost(l), 0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(atomic_load(&rec.calls), 1);
    dlock_lock_free(l);
    dlock_client_free(c);
}

struct pause_report {
    uint64_t token;
    int lost_before_release;
    int callbacks;
    int release;
};

/* A child holds the lock through its watchdog (600 ms lease) and is
 * SIGSTOPped, as by a long GC pause or swapping. After 1200 ms its lease
 * has run out and the parent takes the lock at once, with a greater
 * token. Once resumed, the child's watchdog finds the hold gone and says
 * so (dlock_lock_lost() == 1 and the callback) before the child does
 * anything else; its release reports DLOCK_ERR_LOST and leaves the
 * parent's lock alone. A watchdog renewal that extended the key whoever
 * owns it would instead let the child believe it still holds the lock. */
static void paused_holder_is_told_it_lost_the_lock(void **state)
{
    (void)state;
    int up[2], down[2];
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dlock_client *cc = th_lock_client(server.url, 600);
        dlock_lock *ll;
        th_lost rec = {0, 0};
        struct pause_report rep = {0, -1, -1, -100};
        if (!cc || dlock_lock_new(cc, "paused", &ll)) _exit(2);
        dlock_lock_on_lost(ll, th_lost_record, &rec);
        if (dlock_lock_acquire(ll, 0, DLOCK_LEASE_WATCHDOG, &rep.token)) _exit(3);
        if (write(up[1], &rep.token, sizeof rep.token) != sizeof rep.token) _exit(4);
        char go;
        if (read(down[0], &go, 1) != 1) _exit(5); /* stopped and resumed in here */
        /* The query turns by the clock; the callback follows on the
         * watchdog's thread. */
        for (int i = 0; i < 200 && !(dlock_lock_lost(ll) && atomic_load(&rec.calls) > 0); i++) usleep(10000);
        rep.lost_before_release = dlock_lock_lost(ll);
        rep.callbacks = atomic_load(&rec.calls);
        rep.release = dlock_lock_release(ll);
        if (write(up[1], &rep, sizeof rep) != sizeof rep) _exit(6);
        _exit(0);
    }
    close(up[1]); /* a child that fails gives EOF, not a hang */
    close(down[0]);
    uint64_t child_tok = 0, tok = 0;
    if (read(up[0], &child_tok, sizeof child_tok) != sizeof child_tok) {
        int st;
        waitpid(pid, &st, 0);
        fail_msg("child failed before holding the lock (exit %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    usleep(50000); /* let a renewal or two happen */
    kill(pid, SIGSTOP);
    int st = 0;
    pid_t stopped = waitpid(pid, &st, WUNTRACED);
    int was_stopped = stopped == pid && WIFSTOPPED(st);
    usleep(1200000);

    /* No assertion may fail while the child is stopped: it would stay so. */
    dlock_client *c = th_lock_client(server.url, 0);
    dlock_lock *l = NULL;
    dlock_status got = c ? dlock_lock_new(c, "paused", &l) : DLOCK_ERR_CONNECT;
    if (got == DLOCK_OK) got = dlock_lock_acquire(l, 0, 10000, &tok);
    kill(pid, SIGCONT);
    assert_int_equal(write(down[1], "g", 1), 1);
    struct pause_report rep;
    ssize_t n = read(up[0], &rep, sizeof rep);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(was_stopped);
    assert_int_equal(got, DLOCK_OK);
    assert_true(tok > child_tok);
    assert_int_equal(n, sizeof rep);
    assert_int_equal(rep.lost_before_release, 1);
    assert_int_equal(rep.callbacks, 1);
    assert_int_equal(rep.release, DLOCK_ERR_LOST);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "paused", &info), DLOCK_OK);
    assert_true(th_lock_held_by(&info, c));
    assert_true(info.last_token == tok);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    close(up[0]);
    close(down[1]);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* A handle may be freed as soon as dlock_lock_release() returns. With a
 * 30 ms watchdog lease the watchdog renews every 10 ms, so a renewal is
 * often in flight at the moment of release and free; when its reply
 * comes back the watchdog must not touch the freed hold. Under ASan a
 * use-after-free fails this test; without ASan it may pass silently.
 * The lease stays that short so that renewals are that frequent; a
 * loaded machine can stall an acquire past the 25 ms such a lease is
 * trusted, which then honestly fails with DLOCK_ERR_LOST (the hold given
 * back, nothing to renew): such a round is not counted, and the test
 * goes on until 300 holds were taken, released and freed. */
static void freeing_a_handle_right_after_release_is_safe_during_renewal(void **state)
{
    (void)state;
    dlock_client *c = new_client(30);
    unsigned seed = 12345;
    int held = 0, given_back = 0;
    for (long long t0 = th_now_ms(); held < 300 && th_now_ms() - t0 < 60000;) {
        dlock_lock *l = th_lock_new(c, "free-after-release");
        dlock_status st = dlock_lock_acquire(l, 2000, DLOCK_LEASE_WATCHDOG, NULL);
        if (st == DLOCK_ERR_LOST) {
            given_back++;
            dlock_lock_free(l);
            continue;
        }
        if (st != DLOCK_OK) fail_msg("acquire: %d %s", st, dlock_last_error());
        usleep((useconds_t)(rand_r(&seed) % 12000));
        /* A 30 ms lease may really run out on a loaded machine: LOST is
         * an honest answer here, anything else is not. */
        st = dlock_lock_release(l);
        if (st != DLOCK_OK && st != DLOCK_ERR_LOST) fail_msg("release: %d %s", st, dlock_last_error());
        dlock_lock_free(l);
        held++;
    }
    if (held < 300) fail_msg("only %d holds in 60 s (%d answered too late and given back)", held, given_back);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(watchdog_keeps_the_lock_past_its_lease),
        cmocka_unit_test(released_hold_is_no_longer_renewed),
        cmocka_unit_test(watchdog_rides_out_a_server_pause_shorter_than_the_lease),
        cmocka_unit_test(deleted_lock_is_reported_lost),
        cmocka_unit_test(paused_holder_is_told_it_lost_the_lock),
        /* Last: under ASan a failure here aborts the whole program. */
        cmocka_unit_test(freeing_a_handle_right_after_release_is_safe_during_renewal),
    };
    return th_target_run_suite(tests, &server);
}
