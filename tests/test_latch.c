/*
 * Count-down latch against real servers (one server, Sentinel or
 * Cluster: target.h): set once, waiters in
 * several processes released together when the count reaches zero, and
 * timeouts honoured. The asynchronous count-down opens an asynchronous
 * await, and through a completion queue gives the count left.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <stdatomic.h>
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
            if (dlock_client_new(server.url, NULL, &cc) || dlock_latch_new(cc, "latch-together", &ll)) _exit(2);
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
    /* Open, it is kept as "0" for DLOCK_IDLE_MS (an await after the last
     * count-down must tell it from a latch never set), then expires. */
    redisReply *r = th_target_cmd(&server, "dlock:{latch-once}:latch", "GET dlock:{latch-once}:latch");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "0");
    freeReplyObject(r);
    r = th_target_cmd(&server, "dlock:{latch-once}:latch", "PTTL dlock:{latch-once}:latch");
    assert_true(r->integer > DLOCK_IDLE_MS - 60000 && r->integer <= DLOCK_IDLE_MS);
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

/* One asynchronous call's outcome, waited for by the test's thread. */
typedef struct outcome {
    atomic_int done;
    dlock_status st;
    long remaining;
} outcome;

static void on_counted(dlock_latch *l, dlock_status st, long remaining, void *arg)
{
    (void)l;
    outcome *o = arg;
    o->st = st;
    o->remaining = remaining;
    atomic_store(&o->done, 1);
}

static void on_awaited(dlock_latch *l, dlock_status st, void *arg)
{
    on_counted(l, st, -1, arg);
}

/* Wait up to 5 s for `o`; 1 when it came. */
static int came(outcome *o)
{
    for (int i = 0; i < 5000 && !atomic_load(&o->done); i++) usleep(1000);
    return atomic_load(&o->done);
}

/* Three asynchronous count-downs, one after the other on one handle, give
 * 2, 1 and 0 left; an asynchronous await on another handle opens with the
 * third and not before. The count-down's arguments are checked at once:
 * no callback follows a refusal. */
static void async_count_downs_give_what_is_left_and_open_an_async_await(void **state)
{
    (void)state;
    dlock_client *c;
    dlock_latch *l = open_latch(&c, "latch-async"), *w;
    assert_int_equal(dlock_latch_new(c, "latch-async", &w), DLOCK_OK);
    assert_int_equal(dlock_latch_set(l, 3, NULL), DLOCK_OK);
    outcome awaited = {0};
    assert_int_equal(dlock_latch_await_async(w, 10000, on_awaited, &awaited), DLOCK_OK);
    for (long want = 2; want >= 0; want--) {
        usleep(100000);
        assert_int_equal(atomic_load(&awaited.done), 0);
        outcome o = {0};
        assert_int_equal(dlock_latch_count_down_async(l, on_counted, &o), DLOCK_OK);
        assert_true(came(&o));
        assert_int_equal(o.st, DLOCK_OK);
        assert_int_equal(o.remaining, want);
    }
    assert_true(came(&awaited));
    assert_int_equal(awaited.st, DLOCK_OK);
    long count = -1;
    assert_int_equal(dlock_latch_count(l, &count), DLOCK_OK);
    assert_int_equal(count, 0);
    /* An open latch: nothing changes, 0 left. */
    outcome o = {0};
    assert_int_equal(dlock_latch_count_down_async(l, on_counted, &o), DLOCK_OK);
    assert_true(came(&o));
    assert_int_equal(o.st, DLOCK_OK);
    assert_int_equal(o.remaining, 0);
    assert_int_equal(dlock_latch_count_down_async(l, NULL, &o), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_latch_count_down_async(NULL, on_counted, &o), DLOCK_ERR_INVALID);
    dlock_latch_free(w);
    dlock_latch_free(l);
    dlock_client_free(c);
}

/* Through a completion queue, the count left is the completion's token. */
static void a_queued_count_down_carries_the_count_left(void **state)
{
    (void)state;
    dlock_client *c;
    dlock_latch *l = open_latch(&c, "latch-queued");
    assert_int_equal(dlock_latch_set(l, 7, NULL), DLOCK_OK);
    dlock_queue *q;
    assert_int_equal(dlock_queue_new(&q), DLOCK_OK);
    void *t = dlock_queue_ticket(q, 5);
    assert_non_null(t);
    assert_int_equal(dlock_latch_count_down_async(l, dlock_queue_on_counted, t), DLOCK_OK);
    struct pollfd p = {dlock_queue_fd(q), POLLIN, 0};
    assert_int_equal(poll(&p, 1, 5000), 1);
    dlock_completion got;
    assert_int_equal(dlock_queue_take(q, &got, 1), 1);
    assert_int_equal(got.key, 5);
    assert_int_equal(got.status, DLOCK_OK);
    assert_int_equal(got.token, 6);
    dlock_queue_free(q);
    dlock_latch_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(latch_waiters_are_released_together),
        cmocka_unit_test(latch_is_set_only_once_and_counts_down_to_zero),
        cmocka_unit_test(latch_await_times_out),
        cmocka_unit_test(async_count_downs_give_what_is_left_and_open_an_async_await),
        cmocka_unit_test(a_queued_count_down_carries_the_count_left),
    };
    return th_target_run_suite(tests, &server);
}
