/*
 * Count-down latch against real servers (one server, Sentinel or
 * Cluster: target.h): set once, waiters in
 * several processes released together when the count reaches zero, and
 * timeouts honoured.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "target.h"

static th_target server;

static dlock_latch *open_latch(dlock_client **c, const char *name)
{
    dlock_latch *l = NULL;
    assert_int_equal(dlock_client_new(server.url, NULL, c), DLOCK_OK);
    assert_int_equal(dlock_latch_new(*c, name, &l), DLOCK_OK);
    return l;
}

/* Four child processes await; the parent counts down three times with
 * pauses. No child may leave before the last count-down, and all must
 * leave within a short time after it (woken together, not by polling). */
static void latch_waiters_are_released_together(void **state)
{
    (void)state;
    enum { WAITERS = 4 };
    dlock_client *c;
    dlock_latch *l = open_latch(&c, "latch-together");
    int set = 0;
    assert_int_equal(dlock_latch_set(l, 3, &set), DLOCK_OK);
    assert_int_equal(set, 1);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    for (int i = 0; i < WAITERS; i++) {
        if (fork() == 0) {
            dlock_client *cc;
            dlock_latch *ll;
            if (dlock_client_new(server.url, NULL, &cc) || dlock_latch_new(cc, "latch-together", &ll))
                _exit(2);
            if (dlock_latch_await(ll, 20000) != DLOCK_OK) _exit(3);
            long long t = th_now_ms(); /* CLOCK_MONOTONIC: comparable across processes */
            if (write(fds[1], &t, sizeof t) != sizeof t) _exit(4);
            _exit(0);
        }
    }
    close(fds[1]);
    usleep(500000);
    long left = -1;
    assert_int_equal(dlock_latch_count_down(l, &left), DLOCK_OK);
    assert_int_equal(left, 2);
    usleep(300000);
    assert_int_equal(dlock_latch_count_down(l, &left), DLOCK_OK);
    assert_int_equal(left, 1);
    usleep(300000);
    long long opened = th_now_ms();
    assert_int_equal(dlock_latch_count_down(l, &left), DLOCK_OK);
    assert_int_equal(left, 0);
    long long first = 0, last = 0, t;
    int n = 0;
    while (read(fds[0], &t, sizeof t) == sizeof t) {
        if (!n || t < first) first = t;
        if (t > last) last = t;
        n++;
    }
    assert_int_equal(n, WAITERS);
    assert_true(first >= opened - 5);
    assert_true(last - opened < 500);
    for (int i = 0; i < WAITERS; i++) {
        int st;
        wait(&st);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    close(fds[0]);
    long count = -1;
    assert_int_equal(dlock_latch_count(l, &count), DLOCK_OK);
    assert_int_equal(count, 0);
    dlock_latch_free(l);
    dlock_client_free(c);
}

static void latch_is_set_only_once_and_counts_down_to_zero(void **state)
{
    (void)state;
    dlock_client *c;
    dlock_latch *l = open_latch(&c, "latch-once");
    int set = -1;
    long left = -1, count = -1;
    assert_int_equal(dlock_latch_set(l, 2, &set), DLOCK_OK);
    assert_int_equal(set, 1);
    assert_int_equal(dlock_latch_set(l, 5, &set), DLOCK_OK);
    assert_int_equal(set, 0);
    assert_int_equal(dlock_latch_count(l, &count), DLOCK_OK);
    assert_int_equal(count, 2);
    assert_int_equal(dlock_latch_count_down(l, &left), DLOCK_OK);
    assert_int_equal(left, 1);
    assert_int_equal(dlock_latch_await(l, 0), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_latch_count_down(l, &left), DLOCK_OK);
    assert_int_equal(left, 0);
    assert_int_equal(dlock_latch_await(l, 0), DLOCK_OK);
    /* Counting down an open latch changes nothing. */
    assert_int_equal(dlock_latch_count_down(l, &left), DLOCK_OK);
    assert_int_equal(left, 0);
    redisReply *r = th_target_cmd(&server, "dlock:{latch-once}:latch", "EXISTS dlock:{latch-once}:latch");
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    /* Once open it may be set again. */
    assert_int_equal(dlock_latch_set(l, 1, &set), DLOCK_OK);
    assert_int_equal(set, 1);
    dlock_latch_free(l);
    dlock_client_free(c);
}

static void latch_await_times_out(void **state)
{
    (void)state;
    dlock_client *c;
    dlock_latch *l = open_latch(&c, "latch-timeout");
    assert_int_equal(dlock_latch_set(l, 1, NULL), DLOCK_OK);
    long long t0 = th_now_ms();
    assert_int_equal(dlock_latch_await(l, 300), DLOCK_ERR_TIMEOUT);
    long long took = th_now_ms() - t0;
    assert_true(took >= 290 && took < 2000);
    assert_int_equal(dlock_latch_set(l, 0, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_latch_await(l, -5), DLOCK_ERR_INVALID);
    dlock_latch_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(latch_waiters_are_released_together),
        cmocka_unit_test(latch_is_set_only_once_and_counts_down_to_zero),
        cmocka_unit_test(latch_await_times_out),
    };
    return th_target_run_suite(tests, &server);
}
