/*
 * RedLock over three real, independent redis-server masters: mutual
 * exclusion across processes with one master stopped, refusal with two
 * stopped, requests sent in parallel, a waiter woken by the release,
 * validity accounting, extension and watchdog renewal under the majority
 * rule.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"

enum { N = 3 };
static th_redis masters[N];

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        if (th_redis_start(&masters[i], NULL) != 0) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++) th_redis_stop(&masters[i]);
    th_redis_stop_all(); /* and any server a failed test left running */
    return 0;
}

/* One client per master; a short command timeout so that a stopped master
 * costs a round little time. */
static void connect_all(dlock_client **c, long watchdog_lease, int command_timeout)
{
    dlock_options o = {0};
    o.watchdog_lease_ms = watchdog_lease;
    o.command_timeout_ms = command_timeout;
    for (int i = 0; i < N; i++) assert_int_equal(dlock_client_new(masters[i].url, &o, &c[i]), DLOCK_OK);
}

static void free_all(dlock_client **c)
{
    for (int i = 0; i < N; i++) dlock_client_free(c[i]);
}

static long long exists_on(int i, const char *key)
{
    redisReply *r = th_redis_cmd(&masters[i], "EXISTS %s", key);
    long long v = r ? r->integer : -1;
    if (r) freeReplyObject(r);
    return v;
}

/* A majority grant excludes a second handle until release; the shares on
 * every master are gone after release. */
static void redlock_excludes_a_second_holder_until_release(void **state)
{
    (void)state;
    dlock_client *a[N], *b[N];
    connect_all(a, 0, 0);
    connect_all(b, 0, 0);
    dlock_redlock *ra, *rb;
    assert_int_equal(dlock_redlock_new(a, N, "rl-basic", &ra), DLOCK_OK);
    assert_int_equal(dlock_redlock_new(b, N, "rl-basic", &rb), DLOCK_OK);
    long validity = 0;
    uint64_t t1 = 0, t2 = 0;
    assert_int_equal(dlock_redlock_acquire(ra, 0, 5000, &validity, &t1), DLOCK_OK);
    assert_true(validity > 4000 && validity <= 5000 - 52);
    for (int i = 0; i < N; i++) assert_int_equal(exists_on(i, "dlock:{rl-basic}"), 1);
    assert_int_equal(dlock_redlock_acquire(rb, 0, 5000, NULL, NULL), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_redlock_acquire(ra, 0, 5000, NULL, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_redlock_release(ra), DLOCK_OK);
    for (int i = 0; i < N; i++) assert_int_equal(exists_on(i, "dlock:{rl-basic}"), 0);
    assert_int_equal(dlock_redlock_release(ra), DLOCK_ERR_NOT_OWNER);
    assert_int_equal(dlock_redlock_acquire(rb, 1000, 5000, NULL, &t2), DLOCK_OK);
    assert_true(t2 > t1);
    assert_int_equal(dlock_redlock_release(rb), DLOCK_OK);
    dlock_redlock_free(ra);
    dlock_redlock_free(rb);
    free_all(a);
    free_all(b);
}

/* Clients for every master, made even while some are down (offline_ok),
 * with a short command timeout so a dead master costs a round little. */
static void connect_offline_ok(dlock_client **c, long watchdog_lease)
{
    dlock_options o = {0};
    o.offline_ok = 1;
    o.command_timeout_ms = 300;
    o.connect_timeout_ms = 300;
    o.watchdog_lease_ms = watchdog_lease;
    for (int i = 0; i < N; i++) assert_int_equal(dlock_client_new(masters[i].url, &o, &c[i]), DLOCK_OK);
}

/* Child processes contend for one RedLock with master 2 stopped; a shared
 * counter on master 0 records how many are inside at once. Two of three
 * masters are a majority, so the lock keeps working and never admits two. */
static void redlock_keeps_mutual_exclusion_with_one_master_stopped(void **state)
{
    (void)state;
    enum { CHILDREN = 4, ROUNDS = 10 };
    th_redis_stop(&masters[2]);
    for (int k = 0; k < CHILDREN; k++) {
        if (fork() == 0) {
            dlock_client *c[N];
            dlock_options o = {0};
            o.offline_ok = 1;
            o.command_timeout_ms = 300;
            for (int i = 0; i < N; i++)
                if (dlock_client_new(masters[i].url, &o, &c[i]) != DLOCK_OK) _exit(2);
            dlock_redlock *rl;
            redisContext *rc = th_redis_connect(&masters[0]);
            if (!rc || dlock_redlock_new(c, N, "rl-excl", &rl) != DLOCK_OK) _exit(3);
            for (int r = 0; r < ROUNDS; r++) {
                if (dlock_redlock_acquire(rl, 20000, 5000, NULL, NULL) != DLOCK_OK) _exit(4);
                redisReply *rep = redisCommand(rc, "INCR inside");
                long long now = rep ? rep->integer : -1;
                freeReplyObject(rep);
                if (now != 1) freeReplyObject(redisCommand(rc, "SET overlap 1"));
                usleep(2000);
                freeReplyObject(redisCommand(rc, "DECR inside"));
                freeReplyObject(redisCommand(rc, "INCR entries"));
                if (dlock_redlock_release(rl) != DLOCK_OK) _exit(5);
            }
            dlock_redlock_free(rl);
            redisFree(rc);
            for (int i = 0; i < N; i++) dlock_client_free(c[i]);
            _exit(0);
        }
    }
    for (int k = 0; k < CHILDREN; k++) {
        int st;
        wait(&st);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    assert_int_equal(exists_on(0, "overlap"), 0);
    redisReply *r = th_redis_cmd(&masters[0], "GET entries");
    assert_non_null(r);
    assert_int_equal(atoi(r->str), CHILDREN * ROUNDS);
    freeReplyObject(r);
}

/* With two of three masters stopped no majority is possible: acquire gives
 * up with DLOCK_ERR_TIMEOUT when its wait ends, and leaves nothing on the
 * surviving master. */
static void redlock_refuses_with_two_masters_stopped(void **state)
{
    (void)state;
    th_redis_stop(&masters[1]);
    th_redis_stop(&masters[2]);
    dlock_client *c[N];
    connect_offline_ok(c, 0);
    dlock_redlock *rl;
    assert_int_equal(dlock_redlock_new(c, N, "rl-down", &rl), DLOCK_OK);
    long long t0 = th_now_ms();
    assert_int_equal(dlock_redlock_acquire(rl, 400, 5000, NULL, NULL), DLOCK_ERR_TIMEOUT);
    assert_true(th_now_ms() - t0 >= 390);
    assert_int_equal(exists_on(0, "dlock:{rl-down}"), 0);
    assert_int_equal(dlock_redlock_acquire(rl, 0, 5000, NULL, NULL), DLOCK_ERR_TIMEOUT);
    assert_int_equal(exists_on(0, "dlock:{rl-down}"), 0);
    dlock_redlock_free(rl);
    free_all(c);
}

/* A round asks every master at once: with two masters paused (SIGSTOP)
 * and a 400 ms command timeout, one round ends after about one timeout.
 * Asking one master after another would take two. */
static void redlock_asks_all_masters_in_parallel(void **state)
{
    (void)state;
    dlock_client *c[N];
    connect_offline_ok(c, 0);
    dlock_options o = {0};
    o.command_timeout_ms = 400;
    for (int i = 1; i < N; i++) {
        dlock_client_free(c[i]);
        assert_int_equal(dlock_client_new(masters[i].url, &o, &c[i]), DLOCK_OK);
    }
    dlock_redlock *rl;
    assert_int_equal(dlock_redlock_new(c, N, "rl-par", &rl), DLOCK_OK);
    th_redis_pause(&masters[1]);
    th_redis_pause(&masters[2]);
    long long t0 = th_now_ms();
    dlock_status st = dlock_redlock_acquire(rl, 0, 5000, NULL, NULL);
    long long took = th_now_ms() - t0;
    th_redis_resume(&masters[1]);
    th_redis_resume(&masters[2]);
    assert_int_equal(st, DLOCK_ERR_TIMEOUT);
    /* one timeout for the acquire round, one for the release round */
    assert_true(took >= 750);
    assert_true(took < 1500);
    dlock_redlock_free(rl);
    free_all(c);
}

/* Releases `rl` after `ms` and notes when the release returned. */
struct later_release {
    dlock_redlock *rl;
    long ms;
    long long at;
};

static void *release_later(void *arg)
{
    struct later_release *r = arg;
    usleep((useconds_t)r->ms * 1000);
    r->at = th_now_ms();
    dlock_redlock_release(r->rl);
    return NULL;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* A waiting RedLock tries again when the holder's release is published on
 * the first master, not only at the end of its 20-200 ms pause: over
 * twenty hand-offs the median time from the release's start to the grant
 * stays far under what the pauses alone give (about 50 ms or more). */
static void redlock_waiter_is_woken_by_the_release(void **state)
{
    (void)state;
    dlock_client *a[N], *b[N];
    connect_all(a, 0, 0);
    connect_all(b, 0, 0);
    dlock_redlock *holder, *waiter;
    assert_int_equal(dlock_redlock_new(a, N, "rl-wake", &holder), DLOCK_OK);
    assert_int_equal(dlock_redlock_new(b, N, "rl-wake", &waiter), DLOCK_OK);
    long long delays[20];
    for (int i = 0; i < 20; i++) {
        assert_int_equal(dlock_redlock_acquire(holder, 0, 5000, NULL, NULL), DLOCK_OK);
        /* Released after 60-88 ms: the waiter is asleep by then. */
        struct later_release r = {holder, 60 + 7 * (i % 5), 0};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, release_later, &r), 0);
        assert_int_equal(dlock_redlock_acquire(waiter, 5000, 5000, NULL, NULL), DLOCK_OK);
        long long got = th_now_ms();
        pthread_join(t, NULL);
        delays[i] = got - r.at;
        assert_int_equal(dlock_redlock_release(waiter), DLOCK_OK);
    }
    qsort(delays, 20, sizeof *delays, cmp_ll);
    print_message("release to grant: median %lld ms, max %lld ms\n", delays[9], delays[19]);
    assert_true(delays[9] < 15);
    dlock_redlock_free(holder);
    dlock_redlock_free(waiter);
    free_all(a);
    free_all(b);
}

/* With the first master down, whose channel a waiter listens on, the
 * waiter still asks the other two at the pace of its 20-200 ms pauses:
 * granted within a pause and a round of the release, not after waiting a
 * second for a subscription that cannot come. */
static void redlock_waiter_keeps_asking_with_the_first_master_down(void **state)
{
    (void)state;
    th_redis_stop(&masters[0]);
    dlock_client *a[N], *b[N];
    connect_offline_ok(a, 0);
    connect_offline_ok(b, 0);
    dlock_redlock *holder, *waiter;
    assert_int_equal(dlock_redlock_new(a, N, "rl-first-down", &holder), DLOCK_OK);
    assert_int_equal(dlock_redlock_new(b, N, "rl-first-down", &waiter), DLOCK_OK);
    long long worst = 0;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(dlock_redlock_acquire(holder, 0, 5000, NULL, NULL), DLOCK_OK);
        struct later_release r = {holder, 300, 0};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, release_later, &r), 0);
        assert_int_equal(dlock_redlock_acquire(waiter, 5000, 5000, NULL, NULL), DLOCK_OK);
        long long got = th_now_ms();
        pthread_join(t, NULL);
        if (got - r.at > worst) worst = got - r.at;
        assert_int_equal(dlock_redlock_release(waiter), DLOCK_OK); /* 2 of 3 masters confirm: a majority */
    }
    print_message("release to grant, first master down: at most %lld ms\n", worst);
    assert_true(worst < 450);
    dlock_redlock_free(holder);
    dlock_redlock_free(waiter);
    free_all(a);
    free_all(b);
}

/* The validity is the lease less the time the round took and the drift:
 * with a 1000 ms lease it is at most 1000 - 12 and, on loopback, close to
 * that. An explicit extension renews the lease on a majority. */
static void redlock_validity_and_extension_follow_the_majority(void **state)
{
    (void)state;
    dlock_client *c[N];
    connect_all(c, 0, 0);
    dlock_redlock *rl;
    assert_int_equal(dlock_redlock_new(c, N, "rl-ext", &rl), DLOCK_OK);
    long validity = 0;
    assert_int_equal(dlock_redlock_acquire(rl, 0, 1000, &validity, NULL), DLOCK_OK);
    assert_true(validity <= 988);
    assert_true(validity > 700);
    assert_int_equal(dlock_redlock_extend(rl, 10000, &validity), DLOCK_OK);
    assert_true(validity > 9000);
    redisReply *r = th_redis_cmd(&masters[1], "PTTL dlock:{rl-ext}");
    assert_true(r->integer > 5000);
    freeReplyObject(r);
    /* Gone on one master: a majority still extends. On two: refused. */
    freeReplyObject(th_redis_cmd(&masters[0], "DEL dlock:{rl-ext}"));
    assert_int_equal(dlock_redlock_extend(rl, 10000, NULL), DLOCK_OK);
    freeReplyObject(th_redis_cmd(&masters[1], "DEL dlock:{rl-ext}"));
    assert_int_equal(dlock_redlock_extend(rl, 10000, NULL), DLOCK_ERR_LOST);
    assert_int_equal(dlock_redlock_release(rl), DLOCK_ERR_LOST);
    assert_int_equal(exists_on(2, "dlock:{rl-ext}"), 0);
    dlock_redlock_free(rl);
    free_all(c);
}

static atomic_int lost_calls;

static void on_lost(dlock_redlock *rl, void *arg)
{
    (void)rl;
    (void)arg;
    atomic_fetch_add(&lost_calls, 1);
}

/* With the watchdog (lease 300 ms) the hold outlives its lease on every
 * master; losing one share keeps it (2 of 3), losing a second reports the
 * hold lost through the callback and the query. */
static void redlock_watchdog_renews_and_reports_loss_below_majority(void **state)
{
    (void)state;
    dlock_client *c[N];
    connect_all(c, 300, 0);
    dlock_redlock *rl;
    assert_int_equal(dlock_redlock_new(c, N, "rl-wd", &rl), DLOCK_OK);
    dlock_redlock_on_lost(rl, on_lost, NULL);
    atomic_store(&lost_calls, 0);
    assert_int_equal(dlock_redlock_acquire(rl, 0, DLOCK_LEASE_WATCHDOG, NULL, NULL), DLOCK_OK);
    usleep(1000 * 1000);
    for (int i = 0; i < N; i++) assert_int_equal(exists_on(i, "dlock:{rl-wd}"), 1);
    freeReplyObject(th_redis_cmd(&masters[0], "DEL dlock:{rl-wd}"));
    usleep(500 * 1000);
    assert_int_equal(dlock_redlock_lost(rl), 0);
    assert_int_equal(atomic_load(&lost_calls), 0);
    freeReplyObject(th_redis_cmd(&masters[1], "DEL dlock:{rl-wd}"));
    long long t0 = th_now_ms();
    while (!dlock_redlock_lost(rl) && th_now_ms() - t0 < 3000) usleep(10000);
    assert_int_equal(dlock_redlock_lost(rl), 1);
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(dlock_redlock_release(rl), DLOCK_ERR_LOST);
    dlock_redlock_free(rl);
    free_all(c);
}

/* Bad arguments are refused before any request. */
static void redlock_rejects_bad_arguments(void **state)
{
    (void)state;
    dlock_client *c[N];
    connect_all(c, 0, 0);
    dlock_redlock *rl = NULL;
    assert_int_equal(dlock_redlock_new(c, 0, "x", &rl), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_redlock_new(c, N, "bad{name}", &rl), DLOCK_ERR_INVALID);
    dlock_client *twice[2] = {c[0], c[0]};
    assert_int_equal(dlock_redlock_new(twice, 2, "x", &rl), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_redlock_new(c, N, "x", &rl), DLOCK_OK);
    assert_int_equal(dlock_redlock_acquire(rl, -5, 1000, NULL, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_redlock_acquire(rl, 0, 5, NULL, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_redlock_extend(rl, 1000, NULL), DLOCK_ERR_NOT_OWNER);
    dlock_redlock_free(rl);
    free_all(c);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(redlock_excludes_a_second_holder_until_release, setup, teardown),
    cmocka_unit_test_setup_teardown(redlock_keeps_mutual_exclusion_with_one_master_stopped, setup, teardown),
    cmocka_unit_test_setup_teardown(redlock_refuses_with_two_masters_stopped, setup, teardown),
    cmocka_unit_test_setup_teardown(redlock_asks_all_masters_in_parallel, setup, teardown),
    cmocka_unit_test_setup_teardown(redlock_waiter_is_woken_by_the_release, setup, teardown),
    cmocka_unit_test_setup_teardown(redlock_waiter_keeps_asking_with_the_first_master_down, setup, teardown),
    cmocka_unit_test_setup_teardown(redlock_validity_and_extension_follow_the_majority, setup, teardown),
    cmocka_unit_test_setup_teardown(redlock_watchdog_renews_and_reports_loss_below_majority, setup, teardown),
    cmocka_unit_test_setup_teardown(redlock_rejects_bad_arguments, setup, teardown),
};

int main(void)
{
    return cmocka_run_group_tests(tests, NULL, NULL);
}
