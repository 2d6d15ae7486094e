/*
 * Multi-lock over locks on two real redis-servers: all or nothing when one
 * lock is busy or its server is down, no deadlock between multi-locks that
 * name the same locks in opposite orders, exclusion while held. Every case
 * runs twice: through the synchronous calls, and through the asynchronous
 * ones (dlock_multilock_acquire_async, dlock_multilock_release_async)
 * waited for by the test's thread.
 *
 * With DLOCK_TEST_TARGET=sentinel or cluster the same cases run on one
 * deployment instead of two servers: both "sides" are its URL, and on a
 * cluster the two locks are named so that different masters serve them
 * (so "a server is down" pauses one master and the other lock's is up).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "target.h"

/* One side of a multi-lock: a server of its own, or the shared target. */
typedef struct side {
    th_redis r;
    const char *url;
} side;

static side s1, s2;
static th_target tgt;
static int on_target; /* a Sentinel or Cluster deployment, shared by both sides */
static char name_a[32] = "ml-a", name_b[32] = "ml-b";

/* The calls the cases go through: 0 the synchronous ones, 1 the
 * asynchronous ones (set by a case's twin, see ASYNC_TWIN). */
static int use_async;

static int setup(void **state)
{
    (void)state;
    use_async = 0;
    if (on_target) {
        s1.url = s2.url = tgt.url;
        return th_target_flush(&tgt);
    }
    if (th_redis_start(&s1.r, NULL) != 0 || th_redis_start(&s2.r, NULL) != 0) return -1;
    s1.url = s1.r.url;
    s2.url = s2.r.url;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (on_target) return 0;
    th_redis_stop(&s1.r);
    th_redis_stop(&s2.r);
    th_redis_stop_all(); /* and any server a failed test left running */
    return 0;
}

/* Stop or continue the server that holds `name` on this side. */
static void side_pause(side *s, const char *name, int stop)
{
    char key[64];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    if (on_target) assert_int_equal(stop ? th_target_pause(&tgt, key) : th_target_resume(&tgt, key), 0);
    else if (stop) th_redis_pause(&s->r);
    else th_redis_resume(&s->r);
}

static dlock_client *client(const side *s)
{
    dlock_options o = {0};
    o.command_timeout_ms = 500;
    o.connect_timeout_ms = 500;
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(s->url, &o, &c), DLOCK_OK);
    return c;
}

static int held(const side *s, const char *name)
{
    dlock_client *c = client(s);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, name, &info), DLOCK_OK);
    dlock_client_free(c);
    return info.held;
}

/* One asynchronous multi-lock call's end, waited for by the test. */
typedef struct ml_done {
    pthread_mutex_t mu;
    int n; /* callbacks so far: exactly one is allowed */
    dlock_status st;
} ml_done;

static void ml_done_cb(dlock_status st, void *arg)
{
    ml_done *d = arg;
    pthread_mutex_lock(&d->mu);
    d->n++;
    d->st = st;
    pthread_mutex_unlock(&d->mu);
}

static int ml_done_count(ml_done *d, dlock_status *st)
{
    pthread_mutex_lock(&d->mu);
    int n = d->n;
    if (st) *st = d->st;
    pthread_mutex_unlock(&d->mu);
    return n;
}

/* What the call that started `d` ends with: its status when it did not
 * start (then the callback must not run), else the callback's, which
 * must run once. */
static dlock_status ml_done_wait(ml_done *d, dlock_status started)
{
    dlock_status st = started;
    if (started != DLOCK_OK) {
        usleep(20000);
        assert_int_equal(ml_done_count(d, NULL), 0);
        return started;
    }
    long long until = th_now_ms() + 30000;
    while (ml_done_count(d, &st) == 0 && th_now_ms() < until) usleep(1000);
    assert_int_equal(ml_done_count(d, NULL), 1);
    usleep(1000); /* a second callback would show here */
    assert_int_equal(ml_done_count(d, NULL), 1);
    return st;
}

static dlock_status ml_acquire(dlock_lock *const *set, size_t n, long wait_ms, long lease_ms, uint64_t *tokens)
{
    if (!use_async) return dlock_multilock_acquire(set, n, wait_ms, lease_ms, tokens);
    ml_done d = {PTHREAD_MUTEX_INITIALIZER, 0, DLOCK_OK};
    return ml_done_wait(&d, dlock_multilock_acquire_async(set, n, wait_ms, lease_ms, tokens, ml_done_cb, &d));
}

static dlock_status ml_release(dlock_lock *const *set, size_t n)
{
    if (!use_async) return dlock_multilock_release(set, n);
    ml_done d = {PTHREAD_MUTEX_INITIALIZER, 0, DLOCK_OK};
    return ml_done_wait(&d, dlock_multilock_release_async(set, n, ml_done_cb, &d));
}

/* ml-a on `other`, ml-b on `busy`, and a second client's handle on ml-b
 * that holds it for `hold_ms` from the start. */
typedef struct pair {
    dlock_client *c1, *c2, *holder;
    dlock_lock *a, *b, *hb;
} pair;

static void pair_open(pair *p, side *other, side *busy, long hold_ms)
{
    p->c1 = client(other);
    p->c2 = client(busy);
    p->holder = client(busy);
    assert_int_equal(dlock_lock_new(p->c1, name_a, &p->a), DLOCK_OK);
    assert_int_equal(dlock_lock_new(p->c2, name_b, &p->b), DLOCK_OK);
    assert_int_equal(dlock_lock_new(p->holder, name_b, &p->hb), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(p->hb, 0, hold_ms, NULL), DLOCK_OK);
}

static void pair_close(pair *p)
{
    dlock_lock_free(p->a);
    dlock_lock_free(p->b);
    dlock_lock_free(p->hb);
    dlock_client_free(p->c1);
    dlock_client_free(p->c2);
    dlock_client_free(p->holder);
}

/* Another client holds "ml-b" on `busy`; a multi-lock of {"ml-a" on
 * `other`, "ml-b"} waits out its 300 ms, fails, and does not keep ml-a;
 * once ml-b is free it takes both, and releases both. */
static void assert_nothing_kept_when_busy(side *other, side *busy)
{
    pair p;
    pair_open(&p, other, busy, 10000);
    dlock_lock *set[2] = {p.b, p.a};
    long long t0 = th_now_ms();
    assert_int_equal(ml_acquire(set, 2, 300, 5000, NULL), DLOCK_ERR_TIMEOUT);
    assert_true(th_now_ms() - t0 >= 290);
    assert_int_equal(held(other, name_a), 0);
    assert_int_equal(dlock_lock_release(p.hb), DLOCK_OK);
    uint64_t tokens[2] = {0, 0};
    assert_int_equal(ml_acquire(set, 2, 1000, 5000, tokens), DLOCK_OK);
    assert_true(tokens[0] > 0 && tokens[1] > 0);
    assert_int_equal(held(other, name_a), 1);
    assert_int_equal(held(busy, name_b), 1);
    assert_int_equal(ml_release(set, 2), DLOCK_OK);
    assert_int_equal(held(other, name_a), 0);
    assert_int_equal(held(busy, name_b), 0);
    pair_close(&p);
}

/* The lock taken first runs out (an explicit 800 ms lease) while the
 * multi-lock waits for the other, which its holder keeps for 2000 ms.
 * (Not shorter: the final grant must come back within the 710 ms such a
 * lease is trusted, and neither hold be lost by the clock before the
 * checks below, also on a loaded machine.)
 * The multi-lock must not come back with the lost hold (someone may have
 * it, with a higher token): it starts over and returns with both held. */
static void assert_no_lost_hold_returned(side *other, side *busy)
{
    pair p;
    pair_open(&p, other, busy, 2000);
    dlock_lock *set[2] = {p.a, p.b};
    uint64_t tokens[2] = {0, 0};
    assert_int_equal(ml_acquire(set, 2, 5000, 800, tokens), DLOCK_OK);
    assert_false(dlock_lock_lost(p.a));
    assert_false(dlock_lock_lost(p.b));
    assert_int_equal(ml_release(set, 2), DLOCK_OK);
    pair_close(&p);
}

/* Run both ways, so that in one of them the free lock comes first in the
 * global order and its lease runs out during the wait. */
static void multilock_never_returns_a_hold_lost_while_waiting(void **state)
{
    (void)state;
    assert_no_lost_hold_returned(&s1, &s2);
    assert_no_lost_hold_returned(&s2, &s1);
}

/* Whichever server comes first in the global order (it depends on the
 * servers' random socket paths), one of the two runs takes the free lock
 * first and must give it back: the partial-failure path runs every time. */
static void multilock_takes_nothing_when_one_lock_is_busy(void **state)
{
    (void)state;
    assert_nothing_kept_when_busy(&s1, &s2);
    assert_nothing_kept_when_busy(&s2, &s1);
}

/* `down` stops answering (paused past the command timeout): the
 * multi-lock reports the failure and holds nothing on `up` afterwards. */
static void assert_nothing_kept_when_down(side *up, side *down)
{
    dlock_client *c1 = client(up), *c2 = client(down);
    dlock_lock *a, *b;
    assert_int_equal(dlock_lock_new(c1, name_a, &a), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c2, name_b, &b), DLOCK_OK);
    side_pause(down, name_b, 1);
    dlock_lock *set[2] = {a, b};
    dlock_status st = ml_acquire(set, 2, 500, 5000, NULL);
    side_pause(down, name_b, 0);
    assert_int_equal(st, DLOCK_ERR_CONNECT);
    assert_int_equal(held(up, name_a), 0);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_free(c1);
    dlock_client_free(c2);
}

/* Both ways round, for the same reason as above. On Sentinel both locks
 * live on the one master, and pausing it long enough to matter would start
 * a failover: skipped there. */
static void multilock_takes_nothing_when_a_server_is_down(void **state)
{
    (void)state;
    if (on_target && tgt.kind == TH_TARGET_SENTINEL) {
        print_message("skipped on sentinel: one master serves both locks\n");
        skip();
    }
    assert_nothing_kept_when_down(&s1, &s2);
    assert_nothing_kept_when_down(&s2, &s1);
}

struct worker {
    int reverse; /* pass the set as {y, x} instead of {x, y} */
    int done, failed;
};

/* One of two threads taking {x, y} and {y, x} many times over, each with
 * its own clients. */
static void *ordered_worker(void *arg)
{
    struct worker *w = arg;
    dlock_client *c1 = client(&s1), *c2 = client(&s2);
    dlock_lock *x, *y;
    dlock_lock_new(c1, "ml-x", &x);
    dlock_lock_new(c2, "ml-y", &y);
    redisContext *rc = on_target ? th_target_connect(&tgt, "ml-inside") : th_redis_connect(&s1.r);
    dlock_lock *set[2] = {w->reverse ? y : x, w->reverse ? x : y};
    for (int i = 0; i < 40; i++) {
        if (ml_acquire(set, 2, 8000, 10000, NULL) != DLOCK_OK) {
            fprintf(stderr, "worker %d, round %d: acquire: %s\n", w->reverse, i, dlock_last_error());
            w->failed++;
            break;
        }
        redisReply *r = redisCommand(rc, "INCR ml-inside");
        if (!r || r->integer != 1) {
            fprintf(stderr, "worker %d, round %d: %s\n", w->reverse, i, r ? "two inside" : "INCR failed");
            w->failed++;
        }
        freeReplyObject(r);
        usleep(500);
        freeReplyObject(redisCommand(rc, "DECR ml-inside"));
        dlock_status rst = ml_release(set, 2);
        if (rst != DLOCK_OK) {
            /* The status too: an asynchronous release's message was set on
             * the callback's thread, not this one. */
            fprintf(stderr, "worker %d, round %d: release: %s (%s)\n", w->reverse, i, dlock_strerror(rst),
                    dlock_last_error());
            w->failed++;
        }
        w->done++;
    }
    redisFree(rc);
    dlock_lock_free(x);
    dlock_lock_free(y);
    dlock_client_free(c1);
    dlock_client_free(c2);
    return NULL;
}

/* Taken in the order given, the two would deadlock within a few rounds
 * (each holding one, waiting for the other until the 8 s wait ends); the
 * global order makes them finish. A counter proves exclusion. */
static void multilocks_in_opposite_orders_do_not_deadlock(void **state)
{
    (void)state;
    struct worker w1 = {0, 0, 0}, w2 = {1, 0, 0};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, ordered_worker, &w1);
    pthread_create(&t2, NULL, ordered_worker, &w2);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_int_equal(w1.failed + w2.failed, 0);
    assert_int_equal(w1.done + w2.done, 80);
}

/* The same lock twice cannot be ordered (it would re-enter, then be
 * released twice): refused. */
static void multilock_refuses_duplicates_and_empty_sets(void **state)
{
    (void)state;
    dlock_client *c1 = client(&s1);
    dlock_lock *a, *a2;
    assert_int_equal(dlock_lock_new(c1, "ml-dup", &a), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c1, "ml-dup", &a2), DLOCK_OK);
    dlock_lock *set[2] = {a, a2};
    assert_int_equal(ml_acquire(set, 2, 0, 1000, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(ml_acquire(set, 0, 0, 1000, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(held(&s1, "ml-dup"), 0);
    dlock_lock_free(a);
    dlock_lock_free(a2);
    dlock_client_free(c1);
}

/* A case again, through the asynchronous calls. */
#define ASYNC_TWIN(name)                                                                                               \
    static void async_##name(void **state)                                                                             \
    {                                                                                                                  \
        use_async = 1;                                                                                                 \
        name(state);                                                                                                   \
    }
ASYNC_TWIN(multilock_takes_nothing_when_one_lock_is_busy)
ASYNC_TWIN(multilock_takes_nothing_when_a_server_is_down)
ASYNC_TWIN(multilocks_in_opposite_orders_do_not_deadlock)
ASYNC_TWIN(multilock_refuses_duplicates_and_empty_sets)
ASYNC_TWIN(multilock_never_returns_a_hold_lost_while_waiting)

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(multilock_takes_nothing_when_one_lock_is_busy, setup, teardown),
    cmocka_unit_test_setup_teardown(multilock_takes_nothing_when_a_server_is_down, setup, teardown),
    cmocka_unit_test_setup_teardown(multilocks_in_opposite_orders_do_not_deadlock, setup, teardown),
    cmocka_unit_test_setup_teardown(multilock_refuses_duplicates_and_empty_sets, setup, teardown),
    cmocka_unit_test_setup_teardown(multilock_never_returns_a_hold_lost_while_waiting, setup, teardown),
    cmocka_unit_test_setup_teardown(async_multilock_takes_nothing_when_one_lock_is_busy, setup, teardown),
    cmocka_unit_test_setup_teardown(async_multilock_takes_nothing_when_a_server_is_down, setup, teardown),
    cmocka_unit_test_setup_teardown(async_multilocks_in_opposite_orders_do_not_deadlock, setup, teardown),
    cmocka_unit_test_setup_teardown(async_multilock_refuses_duplicates_and_empty_sets, setup, teardown),
    cmocka_unit_test_setup_teardown(async_multilock_never_returns_a_hold_lost_while_waiting, setup, teardown),
};

/* On a cluster, names whose locks different masters serve: the
 * multi-lock must then span masters, as it spans servers on one. */
static void pick_names(void)
{
    if (tgt.kind != TH_TARGET_CLUSTER) return;
    for (int i = 0; i < 100; i++) {
        char ka[64], kb[64];
        snprintf(name_a, sizeof name_a, "ml-a%d", i);
        snprintf(ka, sizeof ka, "dlock:{%s}", name_a);
        snprintf(kb, sizeof kb, "dlock:{%s}", name_b);
        if (th_target_master_port(&tgt, ka) != th_target_master_port(&tgt, kb)) return;
    }
    fprintf(stderr, "no name on another master than %s\n", name_b);
    exit(1);
}

int main(void)
{
    const char *t = getenv("DLOCK_TEST_TARGET");
    on_target = t && *t && strcmp(t, "single") != 0;
    if (on_target) {
        if (th_target_start(&tgt, NULL) != 0) return 1;
        pick_names();
    }
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (on_target) th_target_stop(&tgt);
    return rc;
}
