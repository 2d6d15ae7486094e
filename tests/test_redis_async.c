/*
 * Asynchronous script calls (dlock_script_eval_async) against real servers
 * (one server, Sentinel or Cluster: see target.h): many calls in flight
 * from several threads are each answered exactly once and agree with the
 * server; NOSCRIPT after SCRIPT FLUSH and error replies; a server killed
 * with calls in flight (DLOCK_REDIS_ONCE: failure, never run twice); a
 * client freed with calls in flight; a callback that submits again; a
 * master killed and replaced under a stream of calls.
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
    atomic_int *times;    /* per call: how many times it was answered */
    long long *values;    /* per call: the integer reply, or -1 */
    char last_error[256]; /* dlock_last_error() inside the last failing callback */
} answers;

typedef struct call {
    answers *a;
    int index;
    dlock_script *again; /* chain: submit one more call from the callback */
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
    while (a->n < n && pthread_cond_timedwait(&a->cv, &a->mu, &dl) == 0) {}
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
    /* About 300 ms on the server. From Redis 7.2 on, and in Valkey, TIME
     * stands still while a script runs, so there the script times itself
     * with os.clock() (which Redis 7.0's scripts do not have). */
    dlock_script *slow;
    assert_int_equal(dlock_script_new(c,
                                      "local os = rawget(_G, 'os') local function now() "
                                      "if os then return os.clock() * 1000000 end "
                                      "local t = redis.call('TIME') return t[1] * 1000000 + t[2] end "
                                      "local s = now() repeat until now() - s > 300000 "
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

/* A stream of calls while the master they go to is killed and replaced. */
typedef struct stream_of_calls {
    dlock_script *s;
    answers *a;
    int max;
    long long *sent_ms; /* per call: when it was submitted */
    atomic_int submitted;
    atomic_int stop;
} stream_of_calls;

static pthread_mutex_t threads_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t callback_threads[64];
static int ncallback_threads;

/* on_answer, noting which library thread ran it. */
static void on_answer_noting_thread(dlock_status st, redisReply *reply, void *arg)
{
    pthread_t self = pthread_self();
    pthread_mutex_lock(&threads_mu);
    int known = 0;
    for (int i = 0; i < ncallback_threads && !known; i++) known = pthread_equal(callback_threads[i], self);
    if (!known && ncallback_threads < 64) callback_threads[ncallback_threads++] = self;
    pthread_mutex_unlock(&threads_mu);
    on_answer(st, reply, arg);
}

/* One call every 5 ms on one key, alternately with and without ONCE,
 * until told to stop. */
static void *submit_stream(void *arg)
{
    stream_of_calls *sc = arg;
    struct timespec gap = {0, 5 * 1000000L};
    for (int i = 0; i < sc->max && !atomic_load(&sc->stop); i++) {
        call *c = malloc(sizeof *c);
        assert_non_null(c);
        *c = (call){sc->a, i, NULL, 0};
        sc->sent_ms[i] = th_now_ms();
        const char *keys[1] = {"async:{failover}"};
        assert_int_equal(
            dlock_script_eval_async(sc->s, i % 2 ? DLOCK_REDIS_ONCE : 0, 1, keys, 0, NULL, on_answer_noting_thread, c),
            DLOCK_OK);
        atomic_store(&sc->submitted, i + 1);
        nanosleep(&gap, NULL);
    }
    return NULL;
}

/*
 * The master of the calls' key is killed while calls keep coming, through
 * the failover and for two seconds after it. Every call is answered
 * exactly once, and within the client's timeouts; during the outage a call
 * either succeeds or fails with DLOCK_ERR_CONNECT, as a synchronous call
 * does (the library does not hold calls until a successor is named:
 * seckill answers those "busy"); from a second after the successor is in
 * place, every call succeeds. The slow lane stays within its bound: the
 * callbacks ran on at most DLOCK__SLOW_LANE_MAX (8) lane threads plus one
 * reader per server.
 */
static void failover_with_calls_in_flight(void **state)
{
    (void)state;
    if (server.kind == TH_TARGET_SINGLE) {
        print_message("skipped on single: a failover needs a Sentinel setup or a Cluster\n");
        skip();
    }
    th_target_flush(&server);
    dlock_client *c;
    dlock_script *s = incr_script(server.url, &c);
    enum { MAX = 4000 };
    answers a;
    answers_init(&a, MAX);
    long long *sent_ms = calloc(MAX, sizeof *sent_ms);
    assert_non_null(sent_ms);
    stream_of_calls sc = {s, &a, MAX, sent_ms, 0, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, submit_stream, &sc), 0);
    struct timespec ts = {0, 10 * 1000000L};
    while (atomic_load(&sc.submitted) < 100) nanosleep(&ts, NULL);
    int victim = th_target_master_port(&server, "async:{failover}");
    assert_true(victim > 0);
    assert_int_equal(th_node_kill(&server.topo, victim), 0);
    long long kill_ms = th_now_ms();
    int heir = server.kind == TH_TARGET_CLUSTER ? th_cluster_wait_failover(&server.topo, victim, 30000)
                                                : th_sentinel_wait_failover(&server.topo, victim, 30000);
    long long heir_ms = th_now_ms();
    assert_true(heir > 0);
    struct timespec after = {2, 0};
    nanosleep(&after, NULL);
    atomic_store(&sc.stop, 1);
    pthread_join(t, NULL);
    int n = atomic_load(&sc.submitted);
    assert_true(n < MAX);
    /* The longest a call may take: connect timeout + 2 x command timeout. */
    assert_int_equal(answers_wait(&a, n, 2000 + 2 * 5000 + 2000), n);
    int late = 0, late_ok = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(atomic_load(&a.times[i]), 1);
        if (sent_ms[i] >= heir_ms + 1000) {
            late++;
            late_ok += a.values[i] > 0;
        }
    }
    print_message("%d calls, master killed after 100, successor in %lld ms: %d succeeded, %d failed to "
                  "connect; %d of %d sent a second after it succeeded; callbacks on %d threads\n",
                  n, heir_ms - kill_ms, a.ok, a.connect, late_ok, late, ncallback_threads);
    assert_int_equal(a.ok + a.connect, n);
    assert_true(late >= 100);
    assert_int_equal(late_ok, late);
    int nodes = 0;
    for (int i = 0; i < server.topo.n; i++) nodes += server.topo.node[i].role != TH_SENTINEL;
    assert_true(ncallback_threads <= 8 + nodes);
    assert_int_equal(th_node_restart(&server.topo, victim), 0);
    free(sent_ms);
    answers_free(&a);
    dlock_script_free(s);
    dlock_client_free(c);
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
        cmocka_unit_test(failover_with_calls_in_flight), /* last: it replaces a node */
    };
    return th_target_run_suite(tests, &server);
}
