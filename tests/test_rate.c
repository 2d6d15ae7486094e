/*
 * The rate limiter against real servers (one server, Sentinel or Cluster,
 * TLS: target.h): a burst then refusals with the right next-permit time,
 * subjects independent of each other, the settings stored and a mismatch
 * refused unless changed, buckets whose keys expire when full, waiters
 * woken by a change and never polling, and processes hammering one limit
 * admitted no more than the rate allows.
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
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "target.h"

static th_target server;

static dlock_client *client(void)
{
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(server.url, NULL, &c), DLOCK_OK);
    return c;
}

static dlock_rate *open_rate(dlock_client *c, const char *name, long rate, long interval_ms, long burst)
{
    dlock_rate_options o = {0};
    o.rate = rate;
    o.interval_ms = interval_ms;
    o.burst = burst;
    dlock_rate *r = NULL;
    assert_int_equal(dlock_rate_new(c, name, &o, &r), DLOCK_OK);
    return r;
}

/* Script calls the masters have run, by SHA or by text. */
static long long script_calls(void)
{
    long long a = th_target_calls(&server, "evalsha"), b = th_target_calls(&server, "eval");
    assert_true(a >= 0 && b >= 0);
    return a + b;
}

/* The server's clock, in ms, from the master serving `key`. */
static long long server_ms(const char *key)
{
    redisReply *r = th_target_cmd(&server, key, "TIME");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* A full bucket gives exactly its burst at once, counting down, then
 * refuses with the time one permit stands for (100 ms here); a request
 * larger than the burst can never be granted and is refused as invalid. */
static void a_burst_is_allowed_then_refused_with_the_next_permit_time(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_rate *r = open_rate(c, "rate-burst", 10, 1000, 5);
    dlock_rate_result res;
    for (long i = 0; i < 5; i++) {
        assert_int_equal(dlock_rate_try(r, NULL, 1, &res), DLOCK_OK);
        assert_int_equal(res.allowed, 1);
        assert_int_equal(res.remaining, 4 - i);
        assert_int_equal(res.rate, 10);
        assert_int_equal(res.burst, 5);
    }
    assert_int_equal(dlock_rate_try(r, NULL, 1, &res), DLOCK_ERR_TIMEOUT);
    assert_int_equal(res.allowed, 0);
    assert_int_equal(res.remaining, 0);
    assert_true(res.retry_after_ms >= 1 && res.retry_after_ms <= 100);
    assert_true(res.reset_ms > 400 && res.reset_ms <= 500);
    assert_non_null(strstr(dlock_last_error(), "rate-burst"));
    /* Looking takes nothing. */
    dlock_rate_result look;
    assert_int_equal(dlock_rate_status(r, NULL, 1, &look), DLOCK_OK);
    assert_int_equal(look.allowed, 0);
    assert_true(look.retry_after_ms >= 1 && look.retry_after_ms <= res.retry_after_ms);
    assert_int_equal(dlock_rate_try(r, NULL, 6, &res), DLOCK_ERR_INVALID);
    assert_int_equal(res.retry_after_ms, -1);
    dlock_rate_free(r);
    dlock_client_free(c);
}

/* At 5 per second with a burst of 1, the next permit is due 200 ms after
 * the last; a waiter gets it then, and not much sooner. A wait shorter
 * than that gives up at once rather than sleep in vain. */
static void a_waiter_gets_its_permit_when_due(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_rate *r = open_rate(c, "rate-due", 5, 1000, 1);
    dlock_rate_result res;
    assert_int_equal(dlock_rate_try(r, NULL, 1, &res), DLOCK_OK);
    long long t0 = th_now_ms();
    assert_int_equal(dlock_rate_acquire(r, NULL, 1, 20, &res), DLOCK_ERR_TIMEOUT);
    assert_true(th_now_ms() - t0 < 150);
    assert_true(res.retry_after_ms > 100 && res.retry_after_ms <= 200);
    long due = res.retry_after_ms;
    t0 = th_now_ms();
    assert_int_equal(dlock_rate_acquire(r, NULL, 1, 10000, &res), DLOCK_OK);
    long long took = th_now_ms() - t0;
    assert_true(took >= due - 20);
    assert_true(took < 3000);
    dlock_rate_free(r);
    dlock_client_free(c);
}

/* Each subject has its own bucket; the whole limit's is another. */
static void subjects_have_buckets_of_their_own(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_rate *r = open_rate(c, "rate-subj", 1, 60000, 2);
    dlock_rate_result res;
    assert_int_equal(dlock_rate_try(r, "alice", 2, &res), DLOCK_OK);
    assert_int_equal(dlock_rate_try(r, "alice", 1, &res), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_rate_try(r, "bob", 1, &res), DLOCK_OK);
    assert_int_equal(res.remaining, 1);
    assert_int_equal(dlock_rate_try(r, "10.0.0.1", 2, &res), DLOCK_OK);
    assert_int_equal(dlock_rate_try(r, NULL, 2, &res), DLOCK_OK);
    assert_int_equal(dlock_rate_try(r, "alice", 1, &res), DLOCK_ERR_TIMEOUT);
    assert_true(res.retry_after_ms > 55000 && res.retry_after_ms <= 60000);
    char big[514];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(dlock_rate_try(r, big, 1, &res), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_rate_try(r, "", 1, &res), DLOCK_ERR_INVALID);
    dlock_rate_free(r);
    dlock_client_free(c);
}

/* The settings are stored: a second opener with others is refused with
 * both in the message, unless it asks to change them; the stored ones
 * then apply to every handle, the first one's included. */
static void other_settings_are_refused_unless_changed(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_rate *r = open_rate(c, "rate-set", 10, 1000, 10);
    dlock_rate_options o = {0};
    o.rate = 20;
    dlock_rate *r2 = (dlock_rate *)&o; /* must be cleared */
    assert_int_equal(dlock_rate_new(c, "rate-set", &o, &r2), DLOCK_ERR_INVALID);
    assert_null(r2);
    const char *msg = dlock_last_error();
    assert_non_null(strstr(msg, "10 per 1000 ms, burst 10"));
    assert_non_null(strstr(msg, "20 per 1000 ms, burst 20"));
    /* The same settings, written out or by their defaults, are no conflict. */
    dlock_rate_options same = {0};
    same.rate = 10;
    assert_int_equal(dlock_rate_new(c, "rate-set", &same, &r2), DLOCK_OK);
    dlock_rate_free(r2);
    o.change = 1;
    assert_int_equal(dlock_rate_new(c, "rate-set", &o, &r2), DLOCK_OK);
    dlock_rate_free(r2);
    redisReply *rep = th_target_cmd(&server, "dlock:{rate-set}:rate", "HGET dlock:{rate-set}:rate rate");
    assert_non_null(rep);
    assert_string_equal(rep->str, "20");
    freeReplyObject(rep);
    dlock_rate_result res;
    assert_int_equal(dlock_rate_try(r, NULL, 1, &res), DLOCK_OK);
    assert_int_equal(res.rate, 20);
    assert_int_equal(res.burst, 20);
    assert_int_equal(res.remaining, 19);
    int changed = -1;
    same.burst = 3;
    assert_int_equal(dlock_rate_set(r, &same, &changed), DLOCK_OK);
    assert_int_equal(changed, 1);
    assert_int_equal(dlock_rate_set(r, &same, &changed), DLOCK_OK);
    assert_int_equal(changed, 0);
    /* Out of range, or beyond what the scripts count exactly. */
    o.rate = 0;
    assert_int_equal(dlock_rate_new(c, "rate-set", &o, &r2), DLOCK_ERR_INVALID);
    o.rate = 10;
    o.interval_ms = 86400000;
    o.burst = 1000000;
    assert_int_equal(dlock_rate_new(c, "rate-set", &o, &r2), DLOCK_ERR_INVALID);
    assert_null(r2);
    dlock_rate_free(r);
    dlock_client_free(c);
}

/* The bucket's remainder, the part of its TAT finer than a microsecond. */
static long bucket_remainder(const char *key)
{
    redisReply *rep = th_target_cmd(&server, key, "GET %s", key);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STRING);
    const char *sp = strchr(rep->str, ' ');
    assert_non_null(sp);
    long rem = atol(sp + 1);
    freeReplyObject(rep);
    return rem;
}

/* At 3 per second a permit stands for 333 333 1/3 us: the bucket keeps
 * the third as a remainder, so three permits taken one by one move it by
 * exactly a second, as three at once do; a rounded TAT would be off by
 * a microsecond per permit, and drift at high rates. */
static void a_permit_finer_than_a_microsecond_adds_up_exactly(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_rate *r = open_rate(c, "rate-exact", 3, 1000, 3);
    const char *key = "dlock:{rate-exact}:rate:tat";
    dlock_rate_result res;
    for (long i = 1; i <= 3; i++) {
        assert_int_equal(dlock_rate_try(r, NULL, 1, &res), DLOCK_OK);
        assert_int_equal(bucket_remainder(key), i % 3);
    }
    assert_int_equal(res.remaining, 0);
    assert_int_equal(dlock_rate_try(r, NULL, 1, &res), DLOCK_ERR_TIMEOUT);
    assert_true(res.retry_after_ms > 250 && res.retry_after_ms <= 334);
    dlock_rate_free(r);
    dlock_client_free(c);
}

/* A server that lost the settings (restart, FLUSHALL) gets them back from
 * the next decision: the ones last stored, which a handle opened before a
 * change learned from its answers, not the ones it was opened with. */
static void lost_settings_come_back_as_last_stored(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_rate *r = open_rate(c, "rate-lost", 10, 1000, 10);
    dlock_rate *other = open_rate(c, "rate-lost", 10, 1000, 10);
    dlock_rate_options o = {0};
    o.rate = 4;
    o.burst = 2;
    assert_int_equal(dlock_rate_set(other, &o, NULL), DLOCK_OK);
    dlock_rate_result res;
    assert_int_equal(dlock_rate_try(r, "u", 1, &res), DLOCK_OK);
    assert_int_equal(res.rate, 4);
    redisReply *rep = th_target_cmd(&server, "dlock:{rate-lost}:rate", "DEL dlock:{rate-lost}:rate");
    freeReplyObject(rep);
    assert_int_equal(dlock_rate_try(r, "v", 1, &res), DLOCK_OK);
    assert_int_equal(res.rate, 4);
    assert_int_equal(res.burst, 2);
    rep = th_target_cmd(&server, "dlock:{rate-lost}:rate", "HGET dlock:{rate-lost}:rate rate");
    assert_non_null(rep);
    assert_string_equal(rep->str, "4");
    freeReplyObject(rep);
    dlock_rate_free(other);
    dlock_rate_free(r);
    dlock_client_free(c);
}

static long long pttl(const char *key)
{
    redisReply *rep = th_target_cmd(&server, key, "PTTL %s", key);
    assert_non_null(rep);
    long long v = rep->integer;
    freeReplyObject(rep);
    return v;
}

/* A bucket's key lives until its bucket is full again, no longer: one
 * permit of 10 per second keeps it 100 ms, the whole burst a second. A
 * subject seen once leaves nothing behind. */
static void a_bucket_key_expires_when_full_again(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_rate *r = open_rate(c, "rate-exp", 10, 1000, 10);
    const char *key = "dlock:{rate-exp}:rate:tat:u1";
    dlock_rate_result res;
    assert_int_equal(dlock_rate_try(r, "u1", 1, &res), DLOCK_OK);
    long long t = pttl(key);
    assert_true(t >= 0 && t <= 100);
    assert_true(res.reset_ms >= 1 && res.reset_ms <= 100);
    assert_int_equal(dlock_rate_try(r, "u1", 9, &res), DLOCK_OK);
    t = pttl(key);
    assert_true(t > 500 && t <= 1000);
    usleep(1300 * 1000);
    assert_int_equal(pttl(key), -2);
    assert_int_equal(dlock_rate_status(r, "u1", 10, &res), DLOCK_OK);
    assert_int_equal(res.allowed, 1);
    assert_int_equal(res.remaining, 10);
    assert_int_equal(pttl(key), -2); /* looking writes no bucket */
    /* The settings stay: they are the limit, one key per name. */
    assert_true(pttl("dlock:{rate-exp}:rate") == -1);
    dlock_rate_free(r);
    dlock_client_free(c);
}

struct waiter {
    dlock_rate *r;
    long wait_ms;
    dlock_status st;
    long long done_at;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    dlock_rate_result res;
    w->st = dlock_rate_acquire(w->r, NULL, 1, w->wait_ms, &res);
    w->done_at = th_now_ms();
    return NULL;
}

/* At one permit a minute a waiter sleeps a minute; a change of the limit
 * to 100 a second wakes it, and it is granted at once. */
static void a_waiter_is_woken_when_the_limit_changes(void **state)
{
    (void)state;
    dlock_client *c = client(), *c2 = client();
    dlock_rate *r = open_rate(c, "rate-wake", 1, 60000, 1);
    dlock_rate_result res;
    assert_int_equal(dlock_rate_try(r, NULL, 1, &res), DLOCK_OK);
    struct waiter w = {r, 120000, -100, 0};
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    usleep(800 * 1000);
    assert_int_equal(w.st, -100); /* still asleep */
    dlock_rate_options o = {0};
    o.rate = 100;
    o.burst = 1;
    dlock_rate *other;
    o.change = 1;
    long long changed = th_now_ms();
    assert_int_equal(dlock_rate_new(c2, "rate-wake", &o, &other), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.st, DLOCK_OK);
    assert_true(w.done_at - changed < 5000);
    dlock_rate_free(other);
    dlock_rate_free(r);
    dlock_client_free(c2);
    dlock_client_free(c);
}

/* A wait of 6 s (one permit per 6 s) is one sleep: the first decision,
 * one more once subscribed, and one when the permit is due (one more is
 * allowed for a subscription slow to be confirmed on a loaded machine).
 * A waiter that polled, or woke on the locks' 2 s safety net, would make
 * five or more. */
static void a_wait_sleeps_until_due_and_does_not_poll(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_rate *r = open_rate(c, "rate-nopoll", 1, 6000, 1);
    dlock_rate_result res;
    assert_int_equal(dlock_rate_try(r, NULL, 1, &res), DLOCK_OK);
    long long before = script_calls();
    long long t0 = th_now_ms();
    assert_int_equal(dlock_rate_acquire(r, NULL, 1, 20000, &res), DLOCK_OK);
    long long took = th_now_ms() - t0;
    long long calls = script_calls() - before;
    print_message("waited %lld ms, %lld script calls\n", took, calls);
    assert_true(took >= 5500 && took < 15000);
    assert_true(calls >= 2 && calls <= 4);
    dlock_rate_free(r);
    dlock_client_free(c);
}

struct async_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    dlock_status st;
    int has_res;
    dlock_rate_result res;
    long long at;
};

static void async_cb(dlock_rate *r, dlock_status st, const dlock_rate_result *res, void *arg)
{
    (void)r;
    struct async_wait *a = arg;
    pthread_mutex_lock(&a->mu);
    a->st = st;
    a->has_res = res != NULL;
    if (res) a->res = *res;
    a->at = th_now_ms();
    a->done = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static void async_join(struct async_wait *a)
{
    pthread_mutex_lock(&a->mu);
    while (!a->done) pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

/* The asynchronous acquire: refused at once when the permit comes too
 * late for its wait, granted when due otherwise, with the same number of
 * script calls as a thread's wait, and woken by a change. */
static void an_async_acquire_sleeps_until_due(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_rate *r = open_rate(c, "rate-async", 1, 3000, 1);
    dlock_rate_result res;
    assert_int_equal(dlock_rate_try(r, NULL, 1, &res), DLOCK_OK);
    struct async_wait a = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, -100, 0, {0}, 0};
    long long t0 = th_now_ms();
    assert_int_equal(dlock_rate_acquire_async(r, NULL, 1, 100, async_cb, &a), DLOCK_OK);
    async_join(&a);
    assert_int_equal(a.st, DLOCK_ERR_TIMEOUT);
    assert_true(a.has_res);
    assert_true(a.res.retry_after_ms > 1000);
    assert_true(a.at - t0 < 1000);

    memset(&a, 0, sizeof a);
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    long long before = script_calls();
    t0 = th_now_ms();
    assert_int_equal(dlock_rate_acquire_async(r, NULL, 1, 20000, async_cb, &a), DLOCK_OK);
    assert_int_equal(dlock_rate_acquire_async(r, NULL, 1, 20000, async_cb, &a), DLOCK_ERR_INVALID);
    async_join(&a);
    long long calls = script_calls() - before;
    assert_int_equal(a.st, DLOCK_OK);
    assert_true(a.at - t0 >= 1500 && a.at - t0 < 10000);
    assert_true(calls >= 2 && calls <= 4);

    /* Woken by a change: one a minute, changed to 100 a second. */
    dlock_rate_options o = {0};
    o.rate = 1;
    o.interval_ms = 60000;
    o.burst = 1;
    assert_int_equal(dlock_rate_set(r, &o, NULL), DLOCK_OK);
    assert_int_equal(dlock_rate_try(r, "s", 1, &res), DLOCK_OK);
    memset(&a, 0, sizeof a);
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    assert_int_equal(dlock_rate_acquire_async(r, "s", 1, DLOCK_WAIT_FOREVER, async_cb, &a), DLOCK_OK);
    usleep(800 * 1000);
    pthread_mutex_lock(&a.mu);
    assert_int_equal(a.done, 0);
    pthread_mutex_unlock(&a.mu);
    o.rate = 100;
    o.interval_ms = 1000;
    long long changed = th_now_ms();
    assert_int_equal(dlock_rate_set(r, &o, NULL), DLOCK_OK);
    async_join(&a);
    assert_int_equal(a.st, DLOCK_OK);
    assert_true(a.at - changed < 5000);
    dlock_rate_free(r);
    dlock_client_free(c);
}

/* Processes hammer one limit of RATE per second, burst BURST, for SECS
 * seconds, half of them waiting for permits and half trying. Whatever the
 * timing, GCRA admits at most BURST + RATE x (elapsed seconds, by the
 * server's clock) from a full bucket: asserted strictly. That it admits
 * near that many is timing, asserted loosely. */
static void processes_hammering_one_limit_are_admitted_at_the_rate(void **state)
{
    (void)state;
    enum { PROCS = 4, RATE = 50, BURST = 5, SECS = 3 };
    const char *key = "dlock:{rate-hammer}:rate";
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    long long start = server_ms(key);
    for (int i = 0; i < PROCS; i++) {
        if (fork() == 0) {
            close(fds[0]);
            dlock_client *cc = NULL;
            dlock_rate *rr = NULL;
            dlock_rate_options o = {0};
            o.rate = RATE;
            o.burst = BURST;
            if (dlock_client_new(server.url, NULL, &cc) != DLOCK_OK || dlock_rate_new(cc, "rate-hammer", &o, &rr))
                _exit(2);
            long admitted = 0;
            long long end = th_now_ms() + SECS * 1000;
            dlock_rate_result res;
            while (th_now_ms() < end) {
                dlock_status st =
                    i % 2 ? dlock_rate_try(rr, NULL, 1, &res) : dlock_rate_acquire(rr, NULL, 1, 100, &res);
                if (st == DLOCK_OK) admitted++;
                else if (st != DLOCK_ERR_TIMEOUT) _exit(3);
            }
            if (write(fds[1], &admitted, sizeof admitted) != (ssize_t)sizeof admitted) _exit(4);
            dlock_rate_free(rr);
            dlock_client_free(cc);
            _exit(0);
        }
    }
    close(fds[1]);
    long total = 0;
    for (int i = 0; i < PROCS; i++) {
        int st;
        wait(&st);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    long long elapsed = server_ms(key) - start;
    long got;
    while (read(fds[0], &got, sizeof got) == (ssize_t)sizeof got) total += got;
    close(fds[0]);
    long bound = BURST + (long)(RATE * elapsed / 1000) + 1;
    print_message("admitted %ld in %lld ms (bound %ld, %d/s burst %d)\n", total, elapsed, bound, RATE, BURST);
    assert_true(total <= bound);
    assert_true(total >= RATE * SECS / 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_burst_is_allowed_then_refused_with_the_next_permit_time),
        cmocka_unit_test(a_waiter_gets_its_permit_when_due),
        cmocka_unit_test(subjects_have_buckets_of_their_own),
        cmocka_unit_test(other_settings_are_refused_unless_changed),
        cmocka_unit_test(a_permit_finer_than_a_microsecond_adds_up_exactly),
        cmocka_unit_test(lost_settings_come_back_as_last_stored),
        cmocka_unit_test(a_bucket_key_expires_when_full_again),
        cmocka_unit_test(a_waiter_is_woken_when_the_limit_changes),
        cmocka_unit_test(a_wait_sleeps_until_due_and_does_not_poll),
        cmocka_unit_test(an_async_acquire_sleeps_until_due),
        cmocka_unit_test(processes_hammering_one_limit_are_admitted_at_the_rate),
    };
    return th_target_run_suite(tests, &server);
}
