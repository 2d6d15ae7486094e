/*
 * Completion queues (dlock_queue_*) against a real server: outcomes of
 * asynchronous calls wait in the queue, in order, until taken, and its
 * descriptor is readable exactly while some wait; a failure carries its
 * message; a diverted call ends in its function and never in the queue,
 * or is handed back at once when it had already arrived; a queue freed
 * with a call in flight drops the late outcome and nothing else breaks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "target.h"

static th_target server;

static dlock_client *new_client(void)
{
    dlock_client *c;
    assert_int_equal(dlock_client_new(server.url, NULL, &c), DLOCK_OK);
    return c;
}

static dlock_lock *new_lock(dlock_client *c, const char *name)
{
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, name, &l), DLOCK_OK);
    return l;
}

/* 1 when the queue's descriptor turns readable within `ms`. */
static int readable(dlock_queue *q, int ms)
{
    struct pollfd p = {dlock_queue_fd(q), POLLIN, 0};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* Take `n` completions into out[], `per` at a time, each take after the
 * descriptor said so; fails the test after 10 s. */
static void take_n(dlock_queue *q, dlock_completion *out, size_t n, size_t per)
{
    size_t got = 0;
    while (got < n) {
        if (!readable(q, 10000)) fail_msg("the queue's descriptor stayed quiet with %zu of %zu taken", got, n);
        size_t k = dlock_queue_take(q, out + got, n - got < per ? n - got : per);
        if (k == 0) fail_msg("readable, but nothing to take (%zu of %zu taken)", got, n);
        got += k;
    }
}

/* A lock `name` held by one handle of a new client, a second handle of
 * it to wait, and an empty queue: the scene of the tests below. */
typedef struct scene {
    dlock_client *c;
    dlock_lock *holder, *waiter;
    dlock_queue *q;
    uint64_t token; /* the holder's */
} scene;

static void scene_open(scene *s, const char *name)
{
    s->c = new_client();
    s->holder = new_lock(s->c, name);
    s->waiter = new_lock(s->c, name);
    assert_int_equal(dlock_lock_acquire(s->holder, 0, 10000, &s->token), DLOCK_OK);
    assert_int_equal(dlock_queue_new(&s->q), DLOCK_OK);
}

static void scene_close(scene *s)
{
    dlock_lock_free(s->waiter);
    dlock_lock_free(s->holder);
    dlock_queue_free(s->q);
    dlock_client_free(s->c);
}

static void completions_wait_in_the_queue_until_taken_and_its_descriptor_says_so(void **state)
{
    (void)state;
    enum { N = 8 };
    dlock_client *c = new_client();
    dlock_queue *q;
    assert_int_equal(dlock_queue_new(&q), DLOCK_OK);
    assert_false(readable(q, 0));
    dlock_lock *l[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "queue:%d", i);
        l[i] = new_lock(c, name);
        void *t = dlock_queue_ticket(q, (uint64_t)(100 + i));
        assert_non_null(t);
        assert_int_equal(dlock_lock_acquire_async(l[i], 5000, 10000, dlock_queue_on_acquired, t), DLOCK_OK);
    }
    /* All in (free locks: milliseconds), then three at a time: the
     * descriptor must stay readable while some wait, with no new outcome
     * coming to set it again. */
    assert_true(readable(q, 5000));
    usleep(300 * 1000);
    dlock_completion got[N];
    take_n(q, got, N, 3);
    int seen[N] = {0};
    for (int i = 0; i < N; i++) {
        assert_true(got[i].key >= 100 && got[i].key < 100 + N);
        seen[got[i].key - 100]++;
        assert_int_equal(got[i].status, DLOCK_OK);
        assert_true(got[i].token > 0);
        assert_string_equal(got[i].error, "");
    }
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
    assert_false(readable(q, 50));
    assert_int_equal(dlock_queue_take(q, got, N), 0);

    for (int i = 0; i < N; i++) {
        dlock_lock_info info;
        char name[32];
        snprintf(name, sizeof name, "queue:%d", i);
        assert_int_equal(dlock_lock_inspect(c, name, &info), DLOCK_OK);
        assert_int_equal(info.held, 1);
        assert_int_equal(dlock_lock_release_async(l[i], dlock_queue_on_released, dlock_queue_ticket(q, (uint64_t)i)),
                         DLOCK_OK);
    }
    take_n(q, got, N, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(got[i].status, DLOCK_OK);
        assert_int_equal(got[i].token, 0);
        char name[32];
        snprintf(name, sizeof name, "queue:%d", i);
        dlock_lock_info info;
        assert_int_equal(dlock_lock_inspect(c, name, &info), DLOCK_OK);
        assert_int_equal(info.held, 0);
    }
    for (int i = 0; i < N; i++) dlock_lock_free(l[i]);
    dlock_queue_free(q);
    dlock_client_free(c);
}

static void a_failure_arrives_with_its_message(void **state)
{
    (void)state;
    scene s;
    scene_open(&s, "queue:busy");
    /* Another handle is another owner only from another thread or as an
     * asynchronous hold: this one waits 100 ms and runs out. */
    assert_int_equal(
        dlock_lock_acquire_async(s.waiter, 100, 10000, dlock_queue_on_acquired, dlock_queue_ticket(s.q, 42)), DLOCK_OK);
    dlock_completion got;
    take_n(s.q, &got, 1, 1);
    assert_int_equal(got.key, 42);
    assert_int_equal(got.status, DLOCK_ERR_TIMEOUT);
    assert_int_equal(got.token, 0);
    assert_true(strlen(got.error) > 0);
    assert_string_not_equal(got.error, "no error");
    assert_int_equal(dlock_lock_release(s.holder), DLOCK_OK);
    scene_close(&s);
}

/* What a diverted call's function saw, on the library's thread. */
typedef struct diverted {
    atomic_int n;
    uint64_t key, token;
    dlock_status status;
} diverted;

static void on_diverted(const dlock_completion *c, void *arg)
{
    diverted *d = arg;
    d->key = c->key;
    d->token = c->token;
    d->status = c->status;
    atomic_fetch_add(&d->n, 1);
}

static int wait_for(atomic_int *n, int want, int ms)
{
    for (int i = 0; i < ms / 5 && atomic_load(n) < want; i++) usleep(5000);
    return atomic_load(n);
}

/* Release an asynchronous hold through a queue of its own, once the
 * call that took it has ended: until then the handle has no hold on
 * record (DLOCK_ERR_NOT_OWNER) or a call in flight (DLOCK_ERR_INVALID). */
static void release_async_ok(dlock_lock *l)
{
    dlock_queue *q;
    assert_int_equal(dlock_queue_new(&q), DLOCK_OK);
    void *t = dlock_queue_ticket(q, 1);
    dlock_status st = DLOCK_ERR_INVALID;
    for (int i = 0; i < 500 && st != DLOCK_OK; i++) {
        st = dlock_lock_release_async(l, dlock_queue_on_released, t);
        if (st != DLOCK_OK) usleep(10 * 1000);
    }
    assert_int_equal(st, DLOCK_OK);
    dlock_completion got;
    take_n(q, &got, 1, 1);
    assert_int_equal(got.status, DLOCK_OK);
    dlock_queue_free(q);
}

static void a_diverted_call_ends_in_its_function_and_never_in_the_queue(void **state)
{
    (void)state;
    scene s;
    scene_open(&s, "queue:divert");
    void *t = dlock_queue_ticket(s.q, 7);
    assert_int_equal(dlock_lock_acquire_async(s.waiter, 5000, 10000, dlock_queue_on_acquired, t), DLOCK_OK);
    usleep(100 * 1000);
    diverted d = {0};
    dlock_completion out;
    assert_int_equal(dlock_queue_divert(s.q, t, &out, on_diverted, &d), 0); /* still waiting */
    assert_int_equal(dlock_lock_release(s.holder), DLOCK_OK);
    assert_int_equal(wait_for(&d.n, 1, 5000), 1);
    assert_int_equal(d.key, 7);
    assert_int_equal(d.status, DLOCK_OK);
    assert_true(d.token > s.token);
    assert_false(readable(s.q, 100));
    assert_int_equal(dlock_queue_take(s.q, &out, 1), 0);
    release_async_ok(s.waiter);

    /* An outcome already in the queue comes back from the divert itself. */
    t = dlock_queue_ticket(s.q, 9);
    assert_int_equal(dlock_lock_acquire_async(s.waiter, 5000, 10000, dlock_queue_on_acquired, t), DLOCK_OK);
    assert_true(readable(s.q, 5000));
    memset(&out, 0, sizeof out);
    assert_int_equal(dlock_queue_divert(s.q, t, &out, on_diverted, &d), 1);
    assert_int_equal(out.key, 9);
    assert_int_equal(out.status, DLOCK_OK);
    assert_true(out.token > d.token);
    assert_int_equal(dlock_queue_take(s.q, &out, 1), 0);
    assert_int_equal(atomic_load(&d.n), 1);
    release_async_ok(s.waiter);
    scene_close(&s);
}

static void a_queue_freed_with_a_call_in_flight_drops_its_late_outcome(void **state)
{
    (void)state;
    scene s;
    scene_open(&s, "queue:freed");
    assert_int_equal(
        dlock_lock_acquire_async(s.waiter, 5000, 10000, dlock_queue_on_acquired, dlock_queue_ticket(s.q, 1)), DLOCK_OK);
    /* A ticket whose call never started goes back too. */
    dlock_queue_ticket_free(dlock_queue_ticket(s.q, 2));
    usleep(100 * 1000);
    dlock_queue_free(s.q);
    s.q = NULL;
    assert_int_equal(dlock_lock_release(s.holder), DLOCK_OK);
    /* The waiter's call still ends (its hold taken, as documented), into
     * the freed queue's memory, which its ticket kept (ASan would say). */
    dlock_lock_info info = {0};
    for (int i = 0; i < 500; i++) {
        assert_int_equal(dlock_lock_inspect(s.c, "queue:freed", &info), DLOCK_OK);
        if (info.held && info.last_token > s.token) break;
        usleep(10 * 1000);
    }
    assert_true(info.held && info.last_token > s.token);
    release_async_ok(s.waiter);
    scene_close(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(completions_wait_in_the_queue_until_taken_and_its_descriptor_says_so),
        cmocka_unit_test(a_failure_arrives_with_its_message),
        cmocka_unit_test(a_diverted_call_ends_in_its_function_and_never_in_the_queue),
        cmocka_unit_test(a_queue_freed_with_a_call_in_flight_drops_its_late_outcome),
    };
    return th_target_run_suite(tests, &server);
}
