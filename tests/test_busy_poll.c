/*
 * dlock_options.busy_poll_us: the thread that reads the shared
 * connection's replies (a synchronous caller, or the asynchronous API's
 * reader thread) polls its socket before it sleeps in read(), unless the
 * option says never.
 *
 * The polls are counted by wrapping poll(2) in this program: the library
 * is linked into it statically, so its calls land in the wrapper below,
 * which counts the zero-timeout polls of one descriptor (the shape of the
 * shared connection's poll, src/mux.c) and hands every call on to the C
 * library. A real redis-server answers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dlock.h"
#include "harness.h"

static th_redis server;
static atomic_long zero_polls;

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    static int (*real)(struct pollfd *, nfds_t, int);
    if (!real) real = (int (*)(struct pollfd *, nfds_t, int))dlsym(RTLD_NEXT, "poll");
    if (n == 1 && timeout == 0) atomic_fetch_add(&zero_polls, 1);
    return real(fds, n, timeout);
}

#define PAIRS 200

static dlock_client *client_with(int busy_poll_us)
{
    dlock_options o = {0};
    o.busy_poll_us = busy_poll_us;
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    return c;
}

/* One thread, one lock at a time: every reply is awaited by this thread
 * alone. */
static void sync_pairs(dlock_client *c, const char *name)
{
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, name, &l), DLOCK_OK);
    for (int i = 0; i < PAIRS; i++) {
        assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    dlock_lock_free(l);
}

/* Several threads at once: the one that reads for them all polls too
 * (giving way when the others have the CPU, src/mux.c). */
typedef struct pairs_arg {
    dlock_client *c;
    char name[32];
} pairs_arg;

static void *pairs_thread(void *arg)
{
    pairs_arg *a = arg;
    sync_pairs(a->c, a->name);
    return NULL;
}

static void threaded_pairs(dlock_client *c)
{
    enum { N = 4 };
    pthread_t th[N];
    pairs_arg a[N];
    for (int i = 0; i < N; i++) {
        a[i].c = c;
        snprintf(a[i].name, sizeof a[i].name, "busy-poll-thread-%d", i);
        assert_int_equal(pthread_create(&th[i], NULL, pairs_thread, &a[i]), 0);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
}

/* The same through the asynchronous API: each completion starts the next
 * call, so one request at a time is in flight, read by the reader thread. */
typedef struct chain {
    int left;
    atomic_int failed;
    sem_t done;
} chain;

static void on_released(dlock_lock *l, dlock_status st, void *arg);

static void on_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)token;
    chain *ch = arg;
    if (st != DLOCK_OK || dlock_lock_release_async(l, on_released, ch) != DLOCK_OK) {
        atomic_store(&ch->failed, 1);
        sem_post(&ch->done);
    }
}

static void on_released(dlock_lock *l, dlock_status st, void *arg)
{
    chain *ch = arg;
    if (st != DLOCK_OK) atomic_store(&ch->failed, 1);
    if (st != DLOCK_OK || --ch->left == 0 || dlock_lock_acquire_async(l, 0, 10000, on_acquired, ch) != DLOCK_OK)
        sem_post(&ch->done);
}

static void async_pairs(dlock_client *c, const char *name)
{
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, name, &l), DLOCK_OK);
    chain ch = {.left = PAIRS};
    atomic_init(&ch.failed, 0);
    sem_init(&ch.done, 0, 0);
    assert_int_equal(dlock_lock_acquire_async(l, 0, 10000, on_acquired, &ch), DLOCK_OK);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    assert_int_equal(sem_timedwait(&ch.done, &until), 0);
    assert_int_equal(atomic_load(&ch.failed), 0);
    assert_int_equal(ch.left, 0);
    sem_destroy(&ch.done);
    dlock_lock_free(l);
}

/* The default polls: the wrapper sees it (so the next case's zero is not
 * a wrapper that counts nothing). Polls in vain on a slow machine are
 * skipped for a while, never for good: some are always counted. */
static void the_reading_thread_polls_before_it_sleeps_by_default(void **state)
{
    (void)state;
    dlock_client *c = client_with(0);
    atomic_store(&zero_polls, 0);
    sync_pairs(c, "busy-poll-sync");
    long sync = atomic_load(&zero_polls);
    atomic_store(&zero_polls, 0);
    async_pairs(c, "busy-poll-async");
    long async = atomic_load(&zero_polls);
    atomic_store(&zero_polls, 0);
    threaded_pairs(c);
    long threaded = atomic_load(&zero_polls);
    fprintf(stderr, "zero-timeout polls for %d pairs: %ld sync, %ld async, %ld by 4 threads\n", PAIRS, sync, async,
            threaded);
    assert_true(sync > 0);
    assert_true(async > 0);
    assert_true(threaded > 0);
    dlock_client_free(c);
}

static void busy_poll_never_means_no_poll_at_all(void **state)
{
    (void)state;
    dlock_client *c = client_with(-1);
    atomic_store(&zero_polls, 0);
    sync_pairs(c, "busy-poll-sync");
    async_pairs(c, "busy-poll-async");
    threaded_pairs(c);
    assert_int_equal(atomic_load(&zero_polls), 0);
    dlock_client_free(c);
}

static void busy_poll_out_of_range_is_refused(void **state)
{
    (void)state;
    dlock_options o = {0};
    dlock_client *c = NULL;
    int bad[] = {-2, 10001, -1000000};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.busy_poll_us = bad[i];
        assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_ERR_INVALID);
        assert_null(c);
        assert_non_null(strstr(dlock_last_error(), "busy poll"));
    }
    o.busy_poll_us = 10000;
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    dlock_client_free(c);
}

static int setup(void **state)
{
    (void)state;
    return th_redis_start(&server, NULL);
}

static int teardown(void **state)
{
    (void)state;
    th_redis_stop(&server);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_reading_thread_polls_before_it_sleeps_by_default),
        cmocka_unit_test(busy_poll_never_means_no_poll_at_all),
        cmocka_unit_test(busy_poll_out_of_range_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
