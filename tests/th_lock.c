/* Helpers of the lock's suites; see th_lock.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "th_lock.h"

dlock_client *th_lock_client(const char *url, long watchdog_lease)
{
    dlock_options o = {0};
    o.watchdog_lease_ms = watchdog_lease;
    dlock_client *c = NULL;
    return dlock_client_new(url, &o, &c) == DLOCK_OK ? c : NULL;
}

dlock_client *th_lock_client_or_fail(const char *url, long watchdog_lease)
{
    dlock_client *c = th_lock_client(url, watchdog_lease);
    if (!c) fail_msg("dlock_client_new: %s", dlock_last_error());
    return c;
}

dlock_lock *th_lock_new(dlock_client *c, const char *name)
{
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(c, name, &l), DLOCK_OK);
    assert_non_null(l);
    return l;
}

long long th_lock_int(th_target *t, const th_redis *r, const char *cmd, const char *key)
{
    redisReply *rep = r ? th_redis_cmd(r, cmd, key) : th_target_cmd(t, key, cmd, key);
    assert_non_null(rep);
    long long v = -1;
    if (rep->type == REDIS_REPLY_INTEGER) v = rep->integer;
    else if (rep->type == REDIS_REPLY_STRING) v = strtoll(rep->str, NULL, 10);
    else if (rep->type == REDIS_REPLY_NIL) v = -2;
    freeReplyObject(rep);
    return v;
}

void th_lock_wait_registered(th_target *t, const th_redis *r, const char *name, long long n)
{
    char waiting[256];
    snprintf(waiting, sizeof waiting, "dlock:{%s}:w", name);
    long long registered = 0;
    for (int i = 0; i < 1000 && (registered = th_lock_int(t, r, "ZCARD %s", waiting)) != n; i++) usleep(2000);
    assert_int_equal(registered, n);
}

int th_lock_held_by(const dlock_lock_info *info, const dlock_client *c)
{
    const char *id = dlock_client_id(c);
    size_t n = strlen(id);
    if (!info->held || strncmp(info->holder, id, n) != 0 || info->holder[n] != ':') return 0;
    const char *p = info->holder + n + 1;
    int colons = 0;
    if (!isdigit((unsigned char)*p)) return 0;
    for (; *p; p++) {
        if (*p == ':' && isdigit((unsigned char)p[1])) colons++;
        else if (!isdigit((unsigned char)*p)) return 0;
    }
    return colons == 1;
}

void th_lost_record(dlock_lock *l, uint64_t token, void *arg)
{
    (void)l;
    th_lost *r = arg;
    atomic_store(&r->token, token);
    atomic_fetch_add(&r->calls, 1);
}

long long th_lock_wait_lost(dlock_lock *l, long ms)
{
    long long t0 = th_now_ms();
    while (th_now_ms() - t0 < ms) {
        if (dlock_lock_lost(l)) return th_now_ms() - t0;
        usleep(5000);
    }
    return -1;
}

struct barge_waiter {
    dlock_lock *l;
    atomic_llong asked_at, got_at;
    dlock_status status;
};

static void *barge_waiter_main(void *arg)
{
    struct barge_waiter *w = arg;
    atomic_store(&w->asked_at, th_now_ms());
    w->status = dlock_lock_acquire(w->l, 10000, 30000, NULL);
    atomic_store(&w->got_at, th_now_ms());
    usleep(20000);
    if (w->status == DLOCK_OK) dlock_lock_release(w->l);
    return NULL;
}

void th_lock_no_barging(dlock_lock *l, int rounds)
{
    for (int i = 0; i < rounds; i++) {
        assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
        struct barge_waiter w = {l, 0, 0, DLOCK_ERR_INVALID};
        pthread_t th;
        pthread_create(&th, NULL, barge_waiter_main, &w);
        /* The waiter sleeps on the channel, well past the bound: 100 ms
         * from its own call, however late a loaded machine began it. */
        while (atomic_load(&w.asked_at) == 0) usleep(1000);
        while (th_now_ms() - atomic_load(&w.asked_at) < 100) usleep(5000);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        assert_int_equal(dlock_lock_acquire(l, 10000, 30000, NULL), DLOCK_OK);
        int barged = atomic_load(&w.got_at) == 0; /* the waiter has not had it yet */
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        pthread_join(th, NULL);
        if (barged) fail_msg("round %d: the releaser barged ahead of a waiter of 100 ms", i);
        assert_int_equal(w.status, DLOCK_OK);
    }
}

static void *waiter_main(void *arg)
{
    th_waiter *w = arg;
    w->st = dlock_lock_acquire(w->l, w->wait_ms, w->lease_ms, &w->token);
    w->at = th_now_ms();
    atomic_store(&w->done, 1);
    while (!atomic_load(&w->release_now)) usleep(2000);
    if (w->st == DLOCK_OK) w->released = dlock_lock_release(w->l);
    return NULL;
}

void th_waiter_start(th_waiter *w, dlock_lock *l, long wait_ms, long lease_ms)
{
    w->l = l;
    w->wait_ms = wait_ms;
    w->lease_ms = lease_ms;
    w->st = w->released = DLOCK_OK;
    w->at = 0;
    w->token = 0;
    atomic_store(&w->done, 0);
    atomic_store(&w->release_now, 0);
    if (pthread_create(&w->thread, NULL, waiter_main, w) != 0) fail_msg("pthread_create failed");
}

int th_waiter_returned(th_waiter *w)
{
    return atomic_load(&w->done);
}

void th_waiter_wait(th_waiter *w)
{
    while (!atomic_load(&w->done)) usleep(2000);
}

void th_waiter_finish(th_waiter *w)
{
    atomic_store(&w->release_now, 1);
    pthread_join(w->thread, NULL);
}

long long th_waiter_granted_after(th_waiter *w, long long since)
{
    th_waiter_wait(w);
    assert_int_equal(w->st, DLOCK_OK);
    long long after = w->at - since;
    th_waiter_finish(w);
    assert_int_equal(w->released, DLOCK_OK);
    return after;
}
