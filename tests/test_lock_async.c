/*
 * The asynchronous lock API (dlock_lock_acquire_async,
 * dlock_lock_release_async) against real servers (one server, TLS,
 * Sentinel or Cluster: see target.h): holds that many handles of one name
 * take from one thread exclude each other, with rising tokens; a wait is
 * woken by the release, not by the holder's lease; a wait runs out; a fair
 * lock serves asynchronous waiters in order; the hold belongs to the
 * handle; re-entry; one call in flight per handle; loss is reported; and
 * dlock_client_free() ends a waiting acquire.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlock.h"
#include "target.h"

static th_target server;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static dlock_client *new_client(long watchdog_lease_ms)
{
    dlock_options o = {0};
    o.watchdog_lease_ms = watchdog_lease_ms;
    dlock_client *c;
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    return c;
}

/* One completion, waited for by the test's thread. */
typedef struct done {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;                 /* callbacks so far */
    dlock_status st;
    uint64_t token;
    long long at;          /* now_ms() of the last callback */
    char error[256];       /* dlock_last_error() inside a failing callback */
} done;

static void done_init(done *d)
{
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
}

static void done_note(done *d, dlock_status st, uint64_t token)
{
    pthread_mutex_lock(&d->mu);
    d->n++;
    d->st = st;
    d->token = token;
    d->at = now_ms();
    if (st != DLOCK_OK) snprintf(d->error, sizeof d->error, "%s", dlock_last_error());
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static void on_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)l;
    done_note(arg, st, token);
}

static void on_released(dlock_lock *l, dlock_status st, void *arg)
{
    (void)l;
    done_note(arg, st, 0);
}

/* Wait until `d` has `n` callbacks, at most `ms`; returns how many it has. */
static int done_wait(done *d, int n, long ms)
{
    long long until = now_ms() + ms;
    pthread_mutex_lock(&d->mu);
    while (d->n < n && now_ms() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    }
    int got = d->n;
    pthread_mutex_unlock(&d->mu);
    return got;
}

static void acquire_ok(dlock_lock *l, long wait_ms, long lease_ms, uint64_t *token)
{
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(l, wait_ms, lease_ms, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 10000), 1);
    if (d.st != DLOCK_OK) fail_msg("acquire_async: %s", d.error);
    if (token) *token = d.token;
}

static void release_ok(dlock_lock *l)
{
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_release_async(l, on_released, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 10000), 1);
    if (d.st != DLOCK_OK) fail_msg("release_async: %s", d.error);
}

static void async_acquire_and_release_leave_the_lock_free(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "async:once", &l), DLOCK_OK);
    uint64_t token = 0;
    acquire_ok(l, 0, DLOCK_LEASE_WATCHDOG, &token);
    assert_true(token > 0);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "async:once", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.last_token, token);
    /* The handle's own record: "<client id>:0:<handle>". */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s:0:", dlock_client_id(c));
    assert_memory_equal(info.holder, prefix, strlen(prefix));
    assert_int_equal(dlock_lock_lost(l), 0);
    release_ok(l);
    assert_int_equal(dlock_lock_inspect(c, "async:once", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    /* Nothing is held any more: refused at once, no callback. */
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_release_async(l, on_released, &d), DLOCK_ERR_NOT_OWNER);
    dlock_lock_free(l);
    dlock_client_free(c);
    assert_int_equal(d.n, 0);
}

/* Many handles of one name, all waiting from one thread, each taking the
 * lock ROUNDS times: every callback checks that nobody else is inside and
 * that tokens rise in the order of the holds. */
#define HANDLES 16
#define ROUNDS 8

typedef struct crowd {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int inside, overlaps, failures, finished;
    uint64_t last_token;
    atomic_int out_of_order;
    int rounds[HANDLES];
    dlock_lock *locks[HANDLES];
} crowd;

static void crowd_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg);

static int crowd_index(crowd *cr, dlock_lock *l)
{
    for (int i = 0; i < HANDLES; i++)
        if (cr->locks[i] == l) return i;
    return -1;
}

static void crowd_finished(crowd *cr)
{
    pthread_mutex_lock(&cr->mu);
    atomic_fetch_add(&cr->finished, 1);
    pthread_cond_broadcast(&cr->cv);
    pthread_mutex_unlock(&cr->mu);
}

static void crowd_released(dlock_lock *l, dlock_status st, void *arg)
{
    crowd *cr = arg;
    int i = crowd_index(cr, l);
    if (st != DLOCK_OK) atomic_fetch_add(&cr->failures, 1);
    if (st != DLOCK_OK || ++cr->rounds[i] == ROUNDS) {
        crowd_finished(cr);
        return;
    }
    if (dlock_lock_acquire_async(l, DLOCK_WAIT_FOREVER, DLOCK_LEASE_WATCHDOG, crowd_acquired, cr) != DLOCK_OK) {
        atomic_fetch_add(&cr->failures, 1);
        crowd_finished(cr);
    }
}

static void crowd_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    crowd *cr = arg;
    if (st != DLOCK_OK) {
        atomic_fetch_add(&cr->failures, 1);
        crowd_finished(cr);
        return;
    }
    if (atomic_fetch_add(&cr->inside, 1) != 0) atomic_fetch_add(&cr->overlaps, 1);
    pthread_mutex_lock(&cr->mu);
    if (token <= cr->last_token) atomic_fetch_add(&cr->out_of_order, 1);
    cr->last_token = token;
    pthread_mutex_unlock(&cr->mu);
    atomic_fetch_sub(&cr->inside, 1); /* before the release lets the next one in */
    if (dlock_lock_release_async(l, crowd_released, cr) != DLOCK_OK) {
        atomic_fetch_add(&cr->failures, 1);
        crowd_finished(cr);
    }
}

static void run_crowd(int fair)
{
    dlock_client *c = new_client(0);
    crowd cr;
    memset(&cr, 0, sizeof cr);
    pthread_mutex_init(&cr.mu, NULL);
    pthread_cond_init(&cr.cv, NULL);
    for (int i = 0; i < HANDLES; i++)
        assert_int_equal(fair ? dlock_lock_new_fair(c, "async:crowd", &cr.locks[i])
                              : dlock_lock_new(c, "async:crowd", &cr.locks[i]),
                         DLOCK_OK);
    for (int i = 0; i < HANDLES; i++)
        assert_int_equal(
            dlock_lock_acquire_async(cr.locks[i], DLOCK_WAIT_FOREVER, DLOCK_LEASE_WATCHDOG, crowd_acquired, &cr),
            DLOCK_OK);
    long long until = now_ms() + 60000;
    pthread_mutex_lock(&cr.mu);
    while (atomic_load(&cr.finished) < HANDLES && now_ms() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&cr.cv, &cr.mu, &ts);
    }
    pthread_mutex_unlock(&cr.mu);
    assert_int_equal(atomic_load(&cr.finished), HANDLES);
    assert_int_equal(atomic_load(&cr.failures), 0);
    assert_int_equal(atomic_load(&cr.overlaps), 0);
    assert_int_equal(atomic_load(&cr.out_of_order), 0);
    for (int i = 0; i < HANDLES; i++) assert_int_equal(cr.rounds[i], ROUNDS);
    struct dlock_stats st;
    assert_int_equal(dlock_stats(c, &st), DLOCK_OK);
    assert_int_equal(st.kind[fair ? DLOCK_STATS_FAIR : DLOCK_STATS_LOCK].acquisitions, HANDLES * ROUNDS);
    for (int i = 0; i < HANDLES; i++) dlock_lock_free(cr.locks[i]);
    dlock_client_free(c);
}

static void async_holds_of_one_name_exclude_each_other_with_rising_tokens(void **state)
{
    (void)state;
    run_crowd(0);
}

static void async_fair_holds_exclude_each_other_with_rising_tokens(void **state)
{
    (void)state;
    run_crowd(1);
}

/* The holder's lease is 10 s: a waiter that got the lock within a second
 * of the release was woken by it. */
static void async_wait_is_woken_by_the_release(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(c, "async:wake", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:wake", &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, 10000, NULL), DLOCK_OK);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(waiter, 20000, DLOCK_LEASE_WATCHDOG, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 500), 0); /* still waiting */
    long long released = now_ms();
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    assert_int_equal(d.st, DLOCK_OK);
    assert_true(d.at - released < 1000);
    struct dlock_stats st;
    assert_int_equal(dlock_stats(c, &st), DLOCK_OK);
    assert_true(st.kind[DLOCK_STATS_LOCK].wakeups >= 1);
    release_ok(waiter);
    dlock_lock_free(holder);
    dlock_lock_free(waiter);
    dlock_client_free(c);
}

static void async_wait_runs_out_with_timeout(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(c, "async:timeout", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:timeout", &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    done d;
    done_init(&d);
    long long start = now_ms();
    assert_int_equal(dlock_lock_acquire_async(waiter, 300, DLOCK_LEASE_WATCHDOG, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    assert_int_equal(d.st, DLOCK_ERR_TIMEOUT);
    assert_non_null(strstr(d.error, "held by another owner"));
    assert_true(d.at - start >= 290);
    /* wait 0: one attempt */
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(waiter, 0, DLOCK_LEASE_WATCHDOG, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    assert_int_equal(d.st, DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    dlock_lock_free(holder);
    dlock_lock_free(waiter);
    dlock_client_free(c);
}

/* Fair: waiters queued one after another get the lock in that order. */
typedef struct order {
    pthread_mutex_t mu;
    int seq[8], n;
    dlock_lock *locks[8];
} order;

static void order_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)token;
    order *o = arg;
    pthread_mutex_lock(&o->mu);
    int i = 0;
    while (o->locks[i] != l) i++;
    o->seq[o->n++] = st == DLOCK_OK ? i : -1;
    pthread_mutex_unlock(&o->mu);
}

static long long queue_length(const char *key)
{
    redisReply *r = th_target_cmd(&server, key, "LLEN %s", key);
    long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    return n;
}

static void async_fair_waiters_get_the_lock_in_queue_order(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *holder;
    assert_int_equal(dlock_lock_new_fair(c, "async:fifo", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    order o;
    memset(&o, 0, sizeof o);
    pthread_mutex_init(&o.mu, NULL);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(dlock_lock_new_fair(c, "async:fifo", &o.locks[i]), DLOCK_OK);
        assert_int_equal(dlock_lock_acquire_async(o.locks[i], 20000, 60000, order_acquired, &o), DLOCK_OK);
        long long until = now_ms() + 5000;
        while (queue_length("dlock:{async:fifo}:q") < i + 1 && now_ms() < until) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
        assert_int_equal(queue_length("dlock:{async:fifo}:q"), i + 1);
    }
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    /* Each one, once it has the lock, is released by the test in turn. */
    for (int k = 0; k < 6; k++) {
        long long until = now_ms() + 5000;
        for (;;) {
            pthread_mutex_lock(&o.mu);
            int n = o.n;
            pthread_mutex_unlock(&o.mu);
            if (n > k || now_ms() > until) break;
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
        assert_int_equal(o.n, k + 1);
        assert_int_equal(o.seq[k], k);
        release_ok(o.locks[k]);
    }
    for (int i = 0; i < 6; i++) dlock_lock_free(o.locks[i]);
    dlock_lock_free(holder);
    dlock_client_free(c);
}

/* Any thread may release the handle's hold; a thread's own release does
 * not touch it; re-entry counts on the handle. */
typedef struct from_thread {
    dlock_lock *l;
    dlock_status sync_release, async_submit;
    done d;
} from_thread;

static void *release_elsewhere(void *arg)
{
    from_thread *f = arg;
    f->sync_release = dlock_lock_release(f->l);
    f->async_submit = dlock_lock_release_async(f->l, on_released, &f->d);
    return NULL;
}

static void async_hold_belongs_to_the_handle_and_reenters(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "async:handle", &l), DLOCK_OK);
    uint64_t t1 = 0, t2 = 0;
    acquire_ok(l, 0, DLOCK_LEASE_WATCHDOG, &t1);
    acquire_ok(l, 0, DLOCK_LEASE_WATCHDOG, &t2);
    assert_true(t1 == t2);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "async:handle", &info), DLOCK_OK);
    assert_int_equal(info.hold_count, 2);
    /* A synchronous acquire by this thread is another owner: busy. */
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_ERR_TIMEOUT);
    from_thread f;
    memset(&f, 0, sizeof f);
    f.l = l;
    done_init(&f.d);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, release_elsewhere, &f), 0);
    pthread_join(th, NULL);
    assert_int_equal(f.sync_release, DLOCK_ERR_NOT_OWNER);
    assert_int_equal(f.async_submit, DLOCK_OK);
    assert_int_equal(done_wait(&f.d, 1, 5000), 1);
    assert_int_equal(f.d.st, DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(c, "async:handle", &info), DLOCK_OK);
    assert_int_equal(info.hold_count, 1);
    release_ok(l);
    assert_int_equal(dlock_lock_inspect(c, "async:handle", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    dlock_lock_free(l);
    dlock_client_free(c);
}

static void second_async_call_on_a_handle_is_refused_while_one_is_in_flight(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(c, "async:busy", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:busy", &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    done d, d2;
    done_init(&d);
    done_init(&d2);
    assert_int_equal(dlock_lock_acquire_async(waiter, 5000, DLOCK_LEASE_WATCHDOG, on_acquired, &d), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire_async(waiter, 0, DLOCK_LEASE_WATCHDOG, on_acquired, &d2),
                     DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_last_error(), "in flight"));
    /* Bad arguments: refused at once. */
    assert_int_equal(dlock_lock_acquire_async(NULL, 0, DLOCK_LEASE_WATCHDOG, on_acquired, &d2), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_acquire_async(holder, 0, DLOCK_LEASE_WATCHDOG, NULL, &d2), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_acquire_async(holder, -5, DLOCK_LEASE_WATCHDOG, on_acquired, &d2),
                     DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_acquire_async(holder, 0, 1, on_acquired, &d2), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    assert_int_equal(d.st, DLOCK_OK);
    assert_int_equal(d2.n, 0);
    release_ok(waiter);
    dlock_lock_free(holder);
    dlock_lock_free(waiter);
    dlock_client_free(c);
}

static atomic_int lost_calls;
static atomic_ullong lost_token;

static void on_lost(dlock_lock *l, uint64_t token, void *arg)
{
    (void)l;
    (void)arg;
    atomic_store(&lost_token, token);
    atomic_fetch_add(&lost_calls, 1);
}

/* The watchdog renews an asynchronous hold, and reports it lost when the
 * server no longer has it; its release then says so. */
static void async_hold_is_renewed_and_its_loss_reported(void **state)
{
    (void)state;
    dlock_client *c = new_client(600);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "async:lost", &l), DLOCK_OK);
    dlock_lock_on_lost(l, on_lost, NULL);
    atomic_store(&lost_calls, 0);
    uint64_t token = 0;
    acquire_ok(l, 0, DLOCK_LEASE_WATCHDOG, &token);
    struct timespec ts = {1, 500000000};
    nanosleep(&ts, NULL); /* 2.5 leases: held only if renewed */
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "async:lost", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_int_equal(dlock_lock_lost(l), 0);
    int was_held = 0;
    assert_int_equal(dlock_lock_force_unlock(c, "async:lost", &was_held), DLOCK_OK);
    assert_int_equal(was_held, 1);
    long long until = now_ms() + 5000;
    while (atomic_load(&lost_calls) == 0 && now_ms() < until) {
        struct timespec p = {0, 10000000};
        nanosleep(&p, NULL);
    }
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(atomic_load(&lost_token), token);
    assert_int_equal(dlock_lock_lost(l), 1);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_release_async(l, on_released, &d), DLOCK_ERR_LOST);
    assert_int_equal(d.n, 0);
    /* Over: a new acquisition starts afresh. */
    acquire_ok(l, 0, DLOCK_LEASE_WATCHDOG, NULL);
    assert_int_equal(dlock_lock_lost(l), 0);
    release_ok(l);
    dlock_lock_free(l);
    dlock_client_free(c);
}

static void client_free_ends_a_waiting_async_acquire(void **state)
{
    (void)state;
    dlock_client *c = new_client(0), *other = new_client(0);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(other, "async:free", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:free", &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(waiter, DLOCK_WAIT_FOREVER, DLOCK_LEASE_WATCHDOG, on_acquired, &d),
                     DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 300), 0);
    long long start = now_ms();
    dlock_client_free(c);
    assert_true(now_ms() - start < 3000);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.st, DLOCK_ERR_INVALID);
    assert_non_null(strstr(d.error, "being freed"));
    dlock_lock_free(waiter);
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    dlock_lock_free(holder);
    dlock_client_free(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(async_acquire_and_release_leave_the_lock_free),
        cmocka_unit_test(async_holds_of_one_name_exclude_each_other_with_rising_tokens),
        cmocka_unit_test(async_fair_holds_exclude_each_other_with_rising_tokens),
        cmocka_unit_test(async_wait_is_woken_by_the_release),
        cmocka_unit_test(async_wait_runs_out_with_timeout),
        cmocka_unit_test(async_fair_waiters_get_the_lock_in_queue_order),
        cmocka_unit_test(async_hold_belongs_to_the_handle_and_reenters),
        cmocka_unit_test(second_async_call_on_a_handle_is_refused_while_one_is_in_flight),
        cmocka_unit_test(async_hold_is_renewed_and_its_loss_reported),
        cmocka_unit_test(client_free_ends_a_waiting_async_acquire),
    };
    return th_target_run_suite(tests, &server);
}
