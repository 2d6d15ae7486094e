/*
 * Asynchronous script calls (dlock_script_eval_async) against real servers
 * (one server, Sentinel or Cluster: see target.h): many calls in flight
 * from several threads are each answered exactly once and agree with the
 * server; NOSCRIPT after SCRIPT FLUSH and error replies; a server killed
 * with calls in flight (DLOCK_REDIS_ONCE: failure, never run twice); a
 * client freed with calls in flight; a callback that submits again.
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
#include <time.h>

#include "dlock.h"
#include "dlock_redis.h"
#include "target.h"

static th_target server;

static long long get_int(const char *key)
{
    redisReply *r = th_target_cmd(&server, key, "GET %s", key);
    assert_non_null(r);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    return v;
}

/* A client on `url` and the script every case counts with: INCR of its
 * one key, so each run leaves a trace and returns a distinct value. */
static dlock_script *incr_script(const char *url, dlock_client **c)
{
    assert_int_equal(dlock_client_new(url, NULL, c), DLOCK_OK);
    dlock_script *s;
    assert_int_equal(dlock_script_new(*c, "return redis.call('INCR', KEYS[1])", &s), DLOCK_OK);
    return s;
}

/* Counts answers; a test waits until it has them all. */
typedef struct answers {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, ok, connect, redis, other;
    atomic_int *times;       /* per call: how many times it was answered */
    long long *values;       /* per call: the integer reply, or -1 */
    char last_error[256];    /* dlock_last_error() inside the last failing callback */
} answers;

typedef struct call {
    answers *a;
    int index;
    dlock_script *again;     /* chain: submit one more call from the callback */
    int left;
} call;

static void answers_init(answers *a, int n)
{
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->times = calloc((size_t)n, sizeof *a->times);
    a->values = calloc((size_t)n, sizeof *a->values);
    assert_non_null(a->times);
    assert_non_null(a->values);
}

static void answers_free(answers *a)
{
    free(a->times);
    free(a->values);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
}

/* Wait until `n` answers are in, at most `ms`; returns how many are. */
static int answers_wait(answers *a, int n, int ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&a->mu);
    while (a->n < n && pthread_cond_timedwait(&a->cv, &a->mu, &dl) == 0) {
    }
    int got = a->n;
    pthread_mutex_unlock(&a->mu);
    return got;
}

static void on_answer(dlock_status st, redisReply *reply, void *arg)
{
    call *c = arg;
    answers *a = c->a;
    atomic_fetch_add(&a->times[c->index], 1);
    a->values[c->index] = st == DLOCK_OK && reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
    if (c->again && c->left > 0) {
        /* A callback may submit again: the next link of the chain. */
        call *next = malloc(sizeof *next);
        assert_non_null(next);
        *next = (call){a, c->index + 1, c->again, c->left - 1};
        const char *keys[1] = {"async:{chain}"};
        if (dlock_script_eval_async(c->again, DLOCK_REDIS_ONCE, 1, keys, 0, NULL, on_answer, next) != DLOCK_OK)
            free(next);
    }
    pthread_mutex_lock(&a->mu);
    a->n++;
    if (st == DLOCK_OK) a->ok++;
    else if (st == DLOCK_ERR_CONNECT) a->connect++;
    else if (st == DLOCK_ERR_REDIS) a->redis++;
    else a->other++;
    if (st != DLOCK_OK) snprintf(a->last_error, sizeof a->last_error, "%s", dlock_last_error());
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    if (reply) freeReplyObject(reply);
    free(c);
}

static dlock_status submit(dlock_script *s, int flags, const char *key, answers *a, int index)
{
    call *c = malloc(sizeof *c);
    assert_non_null(c);
    *c = (call){a, index, NULL, 0};
    const char *keys[1] = {key};
    dlock_status st = dlock_script_eval_async(s, flags, 1, keys, 0, NULL, on_answer, c);
    if (st != DLOCK_OK) free(c);
    return st;
}

#define THREADS 4
#define PER_THREAD 2000
#define TAGS 8

typedef struct submitter {
    dlock_script *s;
    answers *a;
    int first;
} submitter;

/* Keys on several hash tags, so that on a cluster the calls go to every
 * master at once. */
static void *submit_many(void *arg)
{
    submitter *sb = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        int index = sb->first + i;
        char key[32];
        snprintf(key, sizeof key, "async:{t%d}", index % TAGS);
        assert_int_equal(submit(sb->s, DLOCK_REDIS_ONCE, key, sb->a, index), DLOCK_OK);
    }
    return NULL;
}

/* Every call is answered once, with the counter value the server gave it:
 * per key the values are exactly 1..n, and each server's counter says n. */
static void many_calls_from_several_threads_are_answered_once(void **state)
{
    (void)state;
    th_target_flush(&server);
    dlock_client *c;
    dlock_script *s = incr_script(server.url, &c);
    int n = THREADS * PER_THREAD;
    answers a;
    answers_init(&a, n);
    pthread_t t[THREADS];
    submitter sb[THREADS];
    for (int i = 0; i < THREADS; i++) {
        sb[i] = (submitter){s, &a, i * PER_THREAD};
        assert_int_equal(pthread_create(&t[i], NULL, submit_many, &sb[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    assert_int_equal(answers_wait(&a, n, 30000), n);
    assert_int_equal(a.ok, n);
    char *seen = calloc((size_t)n + 1, 1);
    assert_non_null(seen);
    for (int i = 0; i < n; i++) {
        assert_int_equal(atomic_load(&a.times[i]), 1);
        long long v = a.values[i];
        assert_true(v >= 1 && v <= n / TAGS);
        int slot = (int)((i % TAGS) * (n / TAGS) + v);
        assert_int_equal(seen[slot], 0); /* no value handed out twice for one key */
        seen[slot] = 1;
    }
    free(seen);
    for (int k = 0; k < TAGS; k++) {
        char key[32];
        snprintf(key, sizeof key, "async:{t%d}", k);
        assert_int_equal(get_int(key), n / TAGS);
    }
    answers_free(&a);
    dlock_script_free(s);
    dlock_client_free(c);
}

/* After SCRIPT FLUSH the calls still run (NOSCRIPT goes to the slow lane,
 * which sends the text), exactly once each; an error reply is
 * DLOCK_ERR_REDIS with the reply and its message in dlock_last_error()
 * inside the callback; bad arguments are refused before anything is sent. */
static void noscript_and_error_replies(void **state)
{
    (void)state;
    th_target_flush(&server);
    dlock_client *c;
    dlock_script *s = incr_script(server.url, &c), *e;
    assert_int_equal(dlock_script_new(c, "return redis.error_reply('sold out')", &e), DLOCK_OK);
    answers a;
    answers_init(&a, 101);
    assert_int_equal(submit(s, DLOCK_REDIS_ONCE, "async:{ns}", &a, 0), DLOCK_OK);
    assert_int_equal(answers_wait(&a, 1, 10000), 1);
    redisReply *f = th_target_cmd(&server, "async:{ns}", "SCRIPT FLUSH");
    freeReplyObject(f);
    for (int i = 1; i <= 99; i++) assert_int_equal(submit(s, DLOCK_REDIS_ONCE, "async:{ns}", &a, i), DLOCK_OK);
    assert_int_equal(answers_wait(&a, 100, 10000), 100);
    assert_int_equal(a.ok, 100);
    for (int i = 0; i < 100; i++) assert_int_equal(atomic_load(&a.times[i]), 1);
    assert_int_equal(get_int("async:{ns}"), 100);
    assert_int_equal(submit(e, 0, "async:{ns}", &a, 100), DLOCK_OK);
    assert_int_equal(answers_wait(&a, 101, 10000), 101);
    assert_int_equal(a.redis, 1);
    assert_non_null(strstr(a.last_error, "sold out"));
    const char *keys[1] = {"async:{ns}"};
    assert_int_equal(dlock_script_eval_async(s, 0, 0, keys, 0, NULL, on_answer, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_script_eval_async(s, 0, 1, keys, 0, NULL, NULL, NULL), DLOCK_ERR_INVALID);
    answers_free(&a);
    dlock_script_free(e);
    dlock_script_free(s);
    dlock_client_free(c);
}

/* The server is stopped with calls written to it, then killed: with
 * DLOCK_REDIS_ONCE every call ends in DLOCK_ERR_CONNECT (its reply was
 * lost; it may have run) and none is sent again, which the restarted
 * (empty) server proves. Without ONCE, a call on the dead connection is
 * sent again on a new one and runs once there. */
static void server_killed_with_calls_in_flight(void **state)
{
    (void)state;
    th_target_require_single(&server);
    dlock_client *c;
    dlock_script *s = incr_script(server.single.tcp_url, &c);
    answers a;
    answers_init(&a, 301);
    assert_int_equal(submit(s, DLOCK_REDIS_ONCE, "async:{kill}", &a, 0), DLOCK_OK); /* connect, warm */
    assert_int_equal(answers_wait(&a, 1, 10000), 1);
    assert_int_equal(th_target_pause(&server, "async:{kill}"), 0);
    for (int i = 1; i <= 200; i++) assert_int_equal(submit(s, DLOCK_REDIS_ONCE, "async:{kill}", &a, i), DLOCK_OK);
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    kill(server.single.pid, SIGKILL);
    assert_int_equal(answers_wait(&a, 201, 10000), 201);
    assert_int_equal(a.ok, 1);
    assert_int_equal(a.connect, 200);
    for (int i = 0; i <= 200; i++) assert_int_equal(atomic_load(&a.times[i]), 1);
    assert_int_equal(th_redis_restart(&server.single), 0);
    struct timespec settle = {0, 300 * 1000000L};
    nanosleep(&settle, NULL);
    assert_int_equal(get_int("async:{kill}"), -1); /* none was sent again */

    /* Restart under a live connection: without ONCE, resent; with ONCE,
     * a failure, as for the synchronous call. */
    assert_int_equal(submit(s, 0, "async:{kill}", &a, 201), DLOCK_OK);
    assert_int_equal(answers_wait(&a, 202, 10000), 202);
    assert_int_equal(a.values[201], 1);
    assert_int_equal(th_redis_restart(&server.single), 0);
    for (int i = 202; i < 300; i++) assert_int_equal(submit(s, 0, "async:{kill}", &a, i), DLOCK_OK);
    assert_int_equal(answers_wait(&a, 300, 20000), 300);
    assert_int_equal(a.ok, 1 + 1 + 98);
    assert_int_equal(get_int("async:{kill}"), 98);
    answers_free(&a);
    dlock_script_free(s);
    dlock_client_free(c);
}

/* dlock_client_free() with calls in flight waits for their answers: when
 * it returns every callback has run, once (ASan checks the rest). */
static void client_freed_with_calls_in_flight(void **state)
{
    (void)state;
    th_target_flush(&server);
    for (int round = 0; round < 3; round++) {
        dlock_client *c;
        dlock_script *s = incr_script(server.url, &c);
        answers a;
        answers_init(&a, 500);
        int n = round == 0 ? 1 : 500;
        for (int i = 0; i < n; i++) {
            char key[32];
            snprintf(key, sizeof key, "async:{free%d}", i % TAGS);
            assert_int_equal(submit(s, DLOCK_REDIS_ONCE, key, &a, i), DLOCK_OK);
        }
        dlock_client_free(c);
        assert_int_equal(a.n, n);
        for (int i = 0; i < n; i++) assert_int_equal(atomic_load(&a.times[i]), 1);
        dlock_script_free(s);
        answers_free(&a);
    }
}

/* A callback submits the next call: a chain of 200, each answered once,
 * in order (each sees the counter one higher). */
static void callback_submits_another_call(void **state)
{
    (void)state;
    th_target_flush(&server);
    dlock_client *c;
    dlock_script *s = incr_script(server.url, &c);
    answers a;
    answers_init(&a, 200);
    call *first = malloc(sizeof *first);
    assert_non_null(first);
    *first = (call){&a, 0, s, 199};
    const char *keys[1] = {"async:{chain}"};
    assert_int_equal(dlock_script_eval_async(s, DLOCK_REDIS_ONCE, 1, keys, 0, NULL, on_answer, first), DLOCK_OK);
    assert_int_equal(answers_wait(&a, 200, 20000), 200);
    assert_int_equal(a.ok, 200);
    for (int i = 0; i < 200; i++) {
        assert_int_equal(atomic_load(&a.times[i]), 1);
        assert_int_equal(a.values[i], i + 1);
    }
    dlock_client_free(c);
    dlock_script_free(s);
    answers_free(&a);
}

/* A callback that takes a lock which another thread holds across a
 * synchronous call to the same server: while the reader thread waits in
 * that callback, the synchronous caller reads for itself and gets its
 * reply (it used to wait for ever: nobody read). */
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;

static void on_answer_locking(dlock_status st, redisReply *reply, void *arg)
{
    pthread_mutex_lock(&held);
    pthread_mutex_unlock(&held);
    on_answer(st, reply, arg);
}

typedef struct sync_call {
    dlock_script *s;
    dlock_status st;
    atomic_int done;
} sync_call;

static void *hold_lock_across_sync_call(void *arg)
{
    sync_call *sc = arg;
    const char *keys[1] = {"async:{lock}"};
    redisReply *r = NULL;
    pthread_mutex_lock(&held);
    sc->st = dlock_script_eval(sc->s, 0, 1, keys, 0, NULL, &r);
    pthread_mutex_unlock(&held);
    if (r) freeReplyObject(r);
    atomic_store(&sc->done, 1);
    return NULL;
}

static void callback_waits_for_a_synchronous_caller(void **state)
{
    (void)state;
    th_target_flush(&server);
    dlock_client *c;
    assert_int_equal(dlock_client_new(server.url, NULL, &c), DLOCK_OK);
    dlock_script *slow; /* about 300 ms on the server */
    assert_int_equal(dlock_script_new(c,
                                      "local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] "
                                      "repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - s > 300000 "
                                      "return redis.call('INCR', KEYS[1])",
                                      &slow),
                     DLOCK_OK);
    answers a;
    answers_init(&a, 1);
    call *first = malloc(sizeof *first);
    assert_non_null(first);
    *first = (call){&a, 0, NULL, 0};
    const char *keys[1] = {"async:{lock}"};
    assert_int_equal(dlock_script_eval_async(slow, 0, 1, keys, 0, NULL, on_answer_locking, first), DLOCK_OK);
    struct timespec ts = {0, 100 * 1000000L}; /* the reader thread is reading for it now */
    nanosleep(&ts, NULL);
    sync_call sc = {slow, DLOCK_ERR_REDIS, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, hold_lock_across_sync_call, &sc), 0);
    for (int i = 0; i < 200 && !atomic_load(&sc.done); i++) nanosleep(&ts, NULL); /* up to 20 s */
    assert_int_equal(atomic_load(&sc.done), 1);
    pthread_join(t, NULL);
    assert_int_equal(sc.st, DLOCK_OK);
    assert_int_equal(answers_wait(&a, 1, 10000), 1);
    assert_int_equal(a.ok, 1);
    assert_int_equal(get_int("async:{lock}"), 2);
    dlock_client_free(c);
    dlock_script_free(slow);
    answers_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(many_calls_from_several_threads_are_answered_once),
        cmocka_unit_test(noscript_and_error_replies),
        cmocka_unit_test(server_killed_with_calls_in_flight),
        cmocka_unit_test(client_freed_with_calls_in_flight),
        cmocka_unit_test(callback_submits_another_call),
        cmocka_unit_test(callback_waits_for_a_synchronous_caller),
    };
    return th_target_run_suite(tests, &server);
}
