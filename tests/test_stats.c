/*
 * Lock metrics against a real server: what dlock_stats() counts after
 * known sequences (acquisitions and re-entries, holds, failures by reason,
 * losses counted once, watchdog renewals and their failures, wake-ups by
 * a release, every kind apart, one client's numbers not another's), that
 * histograms agree with their own counts and with the calls' real
 * durations, and that dlock_stats_prometheus() writes text a strict
 * parser of the Prometheus text format accepts, with the same numbers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "target.h"

static th_target server;

/* Bucket indexes of some bounds of DLOCK_STATS_BOUNDS_US. */
enum { LE_100MS = 11, LE_250MS = 12, LE_1S = 14, LE_INF = DLOCK_STATS_BUCKETS - 1 };

static dlock_client *client_with(long watchdog_lease_ms)
{
    dlock_options o = {0};
    o.watchdog_lease_ms = watchdog_lease_ms;
    dlock_client *c = NULL;
    if (dlock_client_new(server.url, &o, &c) != DLOCK_OK) fail_msg("dlock_client_new: %s", dlock_last_error());
    return c;
}

static struct dlock_stats stats_of(dlock_client *c)
{
    struct dlock_stats s;
    assert_int_equal(dlock_stats(c, &s), DLOCK_OK);
    return s;
}

static uint64_t failures(const dlock_kind_stats *k)
{
    uint64_t n = 0;
    for (int r = 0; r < DLOCK_STATS_REASONS; r++) n += k->failures[r];
    return n;
}

/* A histogram agrees with itself: cumulative buckets, +Inf is the count,
 * and nothing is summed without being counted. */
static void check_hist(const dlock_histogram *h)
{
    for (int b = 1; b < DLOCK_STATS_BUCKETS; b++) assert_true(h->buckets[b] >= h->buckets[b - 1]);
    assert_true(h->buckets[LE_INF] == h->count);
    if (h->count == 0) assert_true(h->sum_ns == 0);
}

/* Every kind agrees with itself once nothing runs: each acquire call is
 * one wait observation, each renewal one latency observation, and no
 * hold ends that did not begin. */
static void check_consistent(const struct dlock_stats *s)
{
    for (int i = 0; i < DLOCK_STATS_KINDS; i++) {
        const dlock_kind_stats *k = &s->kind[i];
        check_hist(&k->wait);
        check_hist(&k->hold);
        check_hist(&k->renewal);
        assert_true(k->wait.count == k->acquisitions + failures(k));
        assert_true(k->renewal.count == k->renewals + k->renewal_failures);
        assert_true(k->hold.count <= k->acquisitions);
    }
}

static void expect_untouched(const dlock_kind_stats *k)
{
    assert_true(k->acquisitions == 0 && failures(k) == 0 && k->renewals == 0 && k->renewal_failures == 0 &&
                k->losses == 0 && k->wakeups == 0 && k->wait.count == 0 && k->hold.count == 0 && k->renewal.count == 0);
}

/* The library's stats clock, so the test's spans and the library's
 * observations are comparable to the nanosecond. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* N acquire/release pairs and one re-entry: N + 2 acquisitions, N + 1
 * holds (a re-entry is inside its hold), every wait and hold shorter than
 * the whole loop, the other kinds and another client untouched. */
static void acquisitions_holds_and_reentries_are_counted(void **state)
{
    (void)state;
    enum { N = 20 };
    dlock_client *c = client_with(0), *other = client_with(0);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "st-pairs", &l), DLOCK_OK);
    uint64_t t0 = now_ns();
    for (int i = 0; i < N; i++) {
        assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
    uint64_t reentry_from = now_ns();
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
    uint64_t reentry_ns = now_ns() - reentry_from;
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    struct dlock_stats mid = stats_of(c);
    assert_true(mid.kind[DLOCK_STATS_LOCK].hold.count == N); /* the outer hold is still open */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    uint64_t elapsed_ns = now_ns() - t0;

    struct dlock_stats s = stats_of(c);
    check_consistent(&s);
    const dlock_kind_stats *k = &s.kind[DLOCK_STATS_LOCK];
    assert_true(k->acquisitions == N + 2);
    assert_true(failures(k) == 0);
    assert_true(k->wait.count == N + 2);
    assert_true(k->hold.count == N + 1);
    assert_true(k->wait.sum_ns > 0 && k->wait.sum_ns < elapsed_ns);
    assert_true(k->hold.sum_ns > 0 && k->hold.sum_ns < elapsed_ns);
    /* Waits and holds do not overlap, except the re-entry's wait, which
     * lies inside the outer hold, and the moment between stamping a hold's
     * start and stamping its acquire's end (well under a microsecond a
     * pair). A hold that counted its acquire's wait would overshoot by the
     * whole wait sum, four times the slack allowed here. */
    assert_true(k->wait.sum_ns + k->hold.sum_ns < elapsed_ns + reentry_ns + k->wait.sum_ns / 4);
    /* An uncontended acquire takes well under a second. */
    assert_true(k->wait.buckets[LE_1S] == k->wait.count);
    assert_true(k->renewals == 0 && k->losses == 0 && k->wakeups == 0);
    for (int i = 0; i < DLOCK_STATS_KINDS; i++)
        if (i != DLOCK_STATS_LOCK) expect_untouched(&s.kind[i]);
    struct dlock_stats o = stats_of(other);
    for (int i = 0; i < DLOCK_STATS_KINDS; i++) expect_untouched(&o.kind[i]);

    struct dlock_stats bad;
    assert_int_equal(dlock_stats(NULL, &bad), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_stats(c, NULL), DLOCK_ERR_INVALID);
    dlock_lock_free(l);
    dlock_client_free(other);
    dlock_client_free(c);
}

/* A try on a held lock and a 150 ms wait are timeouts, and the wait's
 * observation lands above 100 ms; a server nobody listens on is a connect
 * failure; a bad argument is "other". */
static void failures_are_counted_by_reason(void **state)
{
    (void)state;
    dlock_client *c = client_with(0);
    dlock_lock *a, *b;
    assert_int_equal(dlock_lock_new(c, "st-busy", &a), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "st-busy", &b), DLOCK_OK); /* another owner */
    assert_int_equal(dlock_lock_acquire(a, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(b, 0, 10000, NULL), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_lock_acquire(b, 150, 10000, NULL), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_lock_acquire(b, -5, 10000, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_release(a), DLOCK_OK);
    struct dlock_stats s = stats_of(c);
    check_consistent(&s);
    const dlock_kind_stats *k = &s.kind[DLOCK_STATS_LOCK];
    assert_true(k->acquisitions == 1);
    assert_true(k->failures[DLOCK_STATS_TIMEOUT] == 2);
    assert_true(k->failures[DLOCK_STATS_OTHER] == 1);
    assert_true(k->failures[DLOCK_STATS_CONNECT] == 0 && k->failures[DLOCK_STATS_LOST] == 0 &&
                k->failures[DLOCK_STATS_REDIS] == 0);
    assert_true(k->wait.count == 4);
    assert_true(k->wait.sum_ns >= 149000000u);   /* deadlines are whole milliseconds */
    assert_true(k->wait.buckets[LE_100MS] <= 3); /* the 150 ms wait is above it */
    assert_true(k->hold.count == 1);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_free(c);

    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", th_free_port());
    dlock_options o = {0};
    o.offline_ok = 1;
    o.connect_timeout_ms = 200;
    o.command_timeout_ms = 200;
    dlock_client *off;
    assert_int_equal(dlock_client_new(url, &o, &off), DLOCK_OK);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(off, "st-nobody", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_ERR_CONNECT);
    s = stats_of(off);
    check_consistent(&s);
    assert_true(s.kind[DLOCK_STATS_LOCK].failures[DLOCK_STATS_CONNECT] == 1);
    assert_true(s.kind[DLOCK_STATS_LOCK].acquisitions == 0);
    dlock_lock_free(l);
    dlock_client_free(off);
}

/* A read-write lock `name`-rw and a permit-expirable semaphore of one
 * permit `name`-psem (one NAME is one kind). */
static void new_rw_and_psem(dlock_client *c, const char *name, dlock_rwlock **rw, dlock_psem **p)
{
    char n[64];
    snprintf(n, sizeof n, "%s-rw", name);
    assert_int_equal(dlock_rwlock_new(c, n, rw), DLOCK_OK);
    snprintf(n, sizeof n, "%s-psem", name);
    assert_int_equal(dlock_psem_new(c, n, p), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(*p, 1, NULL), DLOCK_OK);
}

static uint64_t wait_losses(dlock_client *c, dlock_stats_kind kind, uint64_t want, long ms)
{
    long long t0 = th_now_ms();
    uint64_t n;
    while ((n = stats_of(c).kind[kind].losses) < want && th_now_ms() - t0 < ms) usleep(5000);
    return n;
}

/* A watchdog hold whose key is deleted: the renewal finds it gone (a
 * renewal failure) and the loss is counted once, by the watchdog, not
 * again by the release that reports it; re-entering the lost hold is a
 * "lost" failure. An explicit lease that ran out before its release is a
 * loss found by that release, for a lock, a read hold, a permit and a
 * RedLock alike. */
static void lost_holds_are_counted_once(void **state)
{
    (void)state;
    dlock_client *c = client_with(600);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "st-lost", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    redisReply *r = th_target_cmd(&server, "dlock:{st-lost}", "DEL dlock:{st-lost}");
    assert_non_null(r);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    assert_true(wait_losses(c, DLOCK_STATS_LOCK, 1, 3000) == 1);
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_ERR_LOST);
    assert_int_equal(dlock_lock_release(l), DLOCK_ERR_LOST);
    usleep(100000);
    struct dlock_stats s = stats_of(c);
    check_consistent(&s);
    const dlock_kind_stats *k = &s.kind[DLOCK_STATS_LOCK];
    assert_true(k->losses == 1);
    assert_true(k->renewal_failures >= 1);
    assert_true(k->failures[DLOCK_STATS_LOST] == 1);
    assert_true(k->acquisitions == 1 && k->hold.count == 1);
    uint64_t held_before = k->hold.sum_ns;

    /* 500 ms leases here: an acquire answered past its trusted time
     * (443 ms) would fail, and a loaded machine can stall a call by
     * hundreds of ms. */
    assert_int_equal(dlock_lock_acquire(l, 0, 500, NULL), DLOCK_OK);
    usleep(800000);
    assert_int_equal(dlock_lock_release(l), DLOCK_ERR_LOST);
    s = stats_of(c);
    check_consistent(&s);
    assert_true(s.kind[DLOCK_STATS_LOCK].losses == 2);
    assert_true(s.kind[DLOCK_STATS_LOCK].hold.count == 2);
    /* Its hold lasted from its acquire to its release, 800 ms or more. */
    assert_true(s.kind[DLOCK_STATS_LOCK].hold.sum_ns - held_before >= 800000000u);

    /* The same for a read hold, a permit and a RedLock. */
    dlock_rwlock *rw;
    dlock_psem *p;
    dlock_permit *pm;
    dlock_redlock *rl;
    new_rw_and_psem(c, "st-lost", &rw, &p);
    assert_int_equal(dlock_redlock_new(&c, 1, "st-lost-rl", &rl), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, 500, NULL), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(p, 0, 500, &pm), DLOCK_OK);
    assert_int_equal(dlock_redlock_acquire(rl, 0, 500, NULL, NULL), DLOCK_OK);
    usleep(800000);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_ERR_LOST);
    assert_int_equal(dlock_psem_release(p, pm), DLOCK_ERR_LOST);
    assert_int_equal(dlock_redlock_release(rl), DLOCK_ERR_LOST);
    s = stats_of(c);
    check_consistent(&s);
    static const dlock_stats_kind kinds[] = {DLOCK_STATS_READ, DLOCK_STATS_PERMIT, DLOCK_STATS_REDLOCK};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        assert_true(s.kind[kinds[i]].losses == 1 && s.kind[kinds[i]].hold.count == 1);
    dlock_redlock_free(rl);
    dlock_psem_free(p);
    dlock_rwlock_free(rw);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* Holds kept for several short leases (600 ms, renewed every 200 ms) are
 * renewed several times each, every renewal timed, none failed; each kind
 * of hold counts its own. (Not shorter: a hold is trusted for 90 % of its
 * lease less 8 ms after each renewal's send, and a loaded machine has
 * stalled a process past 270 ms.) */
static void watchdog_renewals_are_counted(void **state)
{
    (void)state;
    dlock_client *c = client_with(600);
    dlock_lock *l;
    dlock_rwlock *rw;
    dlock_psem *p;
    dlock_permit *pm;
    assert_int_equal(dlock_lock_new(c, "st-renew", &l), DLOCK_OK);
    new_rw_and_psem(c, "st-renew", &rw, &p);
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(p, 0, DLOCK_LEASE_WATCHDOG, &pm), DLOCK_OK);
    usleep(1400000);
    assert_int_equal(dlock_lock_lost(l), 0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    assert_int_equal(dlock_psem_release(p, pm), DLOCK_OK);
    struct dlock_stats s = stats_of(c);
    check_consistent(&s);
    static const dlock_stats_kind kinds[] = {DLOCK_STATS_LOCK, DLOCK_STATS_WRITE, DLOCK_STATS_PERMIT};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        const dlock_kind_stats *k = &s.kind[kinds[i]];
        print_message("kind %d: %llu renewals, %llu ns in all\n", (int)kinds[i], (unsigned long long)k->renewals,
                      (unsigned long long)k->renewal.sum_ns);
        /* 1400 ms at one renewal per 200 ms: 7, fewer on a busy machine. */
        assert_true(k->renewals >= 3);
        assert_true(k->renewal_failures == 0);
        assert_true(k->renewal.sum_ns > 0);
        assert_true(k->renewal.buckets[LE_1S] == k->renewal.count);
        assert_true(k->losses == 0);
        assert_true(k->hold.count == 1 && k->hold.sum_ns >= 1400000000u);
    }
    expect_untouched(&s.kind[DLOCK_STATS_READ]);
    dlock_lock_free(l);
    dlock_rwlock_free(rw);
    dlock_psem_free(p);
    dlock_client_free(c);
}

struct waiter {
    dlock_client *c;
    dlock_status st;
};

static void *wait_for_lock(void *arg)
{
    struct waiter *w = arg;
    dlock_lock *l;
    w->st = dlock_lock_new(w->c, "st-wake", &l);
    if (w->st != DLOCK_OK) return NULL;
    w->st = dlock_lock_acquire(l, 5000, 10000, NULL);
    if (w->st == DLOCK_OK) dlock_lock_release(l);
    dlock_lock_free(l);
    return NULL;
}

/* Subscribers of `channel` on the server. */
/* Processes registered as waiting for a plain lock (acquire.lua): one
 * registers at its first retry after its subscription is confirmed. */
static long long registered(const char *key)
{
    redisReply *r = th_target_cmd(&server, key, "ZCARD %s", key);
    long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    return n;
}

/* A waiter asleep on the lock's channel is woken once, by the release,
 * and its wait (about 400 ms) lands in its own client's histogram above
 * 250 ms; the holder's client counts its hold and no wake-up. */
static void waiter_woken_by_release_counts_a_wakeup(void **state)
{
    (void)state;
    dlock_client *holder = client_with(0), *waiting = client_with(0);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(holder, "st-wake", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
    long long t0 = th_now_ms();
    struct waiter w = {waiting, DLOCK_ERR_SYS};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_lock, &w), 0);
    /* The waiter retries once after its subscription is confirmed, which
     * registers it, then sleeps. */
    while (registered("dlock:{st-wake}:w") < 1 && th_now_ms() - t0 < 3000) usleep(5000);
    assert_true(registered("dlock:{st-wake}:w") == 1);
    /* 401 ms from now, not from t0: the waiter began its wait before it
     * registered, however late a loaded machine started its thread.
     * 401: th_now_ms() counts whole milliseconds, the metrics nanoseconds. */
    long long seen = th_now_ms();
    while (th_now_ms() - seen < 401) usleep(5000);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.st, DLOCK_OK);

    struct dlock_stats s = stats_of(waiting);
    check_consistent(&s);
    const dlock_kind_stats *k = &s.kind[DLOCK_STATS_LOCK];
    assert_true(k->wakeups == 1);
    assert_true(k->acquisitions == 1);
    assert_true(k->wait.count == 1 && k->wait.buckets[LE_250MS] == 0);
    s = stats_of(holder);
    check_consistent(&s);
    assert_true(s.kind[DLOCK_STATS_LOCK].wakeups == 0);
    assert_true(s.kind[DLOCK_STATS_LOCK].hold.count == 1 && s.kind[DLOCK_STATS_LOCK].hold.sum_ns >= 400000000u);
    dlock_lock_free(l);
    dlock_client_free(waiting);
    dlock_client_free(holder);
}

/* One call of each kind counts under that kind only: fair, read, write,
 * semaphore (no hold time: no owner), permit, RedLock, latch (an await;
 * no hold). The plain lock stays at zero. */
static void every_kind_is_counted_apart(void **state)
{
    (void)state;
    dlock_client *c = client_with(0);
    dlock_lock *fair;
    assert_int_equal(dlock_lock_new_fair(c, "st-kinds", &fair), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(fair, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(fair), DLOCK_OK);
    dlock_rwlock *rw;
    assert_int_equal(dlock_rwlock_new(c, "st-kinds-rw", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    dlock_semaphore *sem;
    assert_int_equal(dlock_semaphore_new(c, "st-kinds-sem", &sem), DLOCK_OK);
    assert_int_equal(dlock_semaphore_set_permits(sem, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_semaphore_acquire(sem, 1, 0), DLOCK_OK);
    assert_int_equal(dlock_semaphore_release(sem, 1), DLOCK_OK);
    dlock_psem *p;
    dlock_permit *pm;
    assert_int_equal(dlock_psem_new(c, "st-kinds-psem", &p), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(p, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(p, 0, 10000, &pm), DLOCK_OK);
    assert_int_equal(dlock_psem_release(p, pm), DLOCK_OK);
    dlock_redlock *rl;
    assert_int_equal(dlock_redlock_new(&c, 1, "st-kinds-rl", &rl), DLOCK_OK);
    assert_int_equal(dlock_redlock_acquire(rl, 0, 10000, NULL, NULL), DLOCK_OK);
    assert_int_equal(dlock_redlock_release(rl), DLOCK_OK);
    dlock_latch *latch;
    assert_int_equal(dlock_latch_new(c, "st-kinds-latch", &latch), DLOCK_OK);
    assert_int_equal(dlock_latch_await(latch, 0), DLOCK_ERR_TIMEOUT); /* never set: shut */
    assert_int_equal(dlock_latch_set(latch, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_latch_count_down(latch, NULL), DLOCK_OK);
    assert_int_equal(dlock_latch_await(latch, 0), DLOCK_OK);

    struct dlock_stats s = stats_of(c);
    check_consistent(&s);
    static const dlock_stats_kind held[] = {DLOCK_STATS_FAIR, DLOCK_STATS_READ, DLOCK_STATS_WRITE, DLOCK_STATS_PERMIT,
                                            DLOCK_STATS_REDLOCK};
    for (size_t i = 0; i < sizeof held / sizeof *held; i++) {
        const dlock_kind_stats *k = &s.kind[held[i]];
        assert_true(k->acquisitions == 1 && failures(k) == 0 && k->wait.count == 1 && k->hold.count == 1);
    }
    const dlock_kind_stats *k = &s.kind[DLOCK_STATS_SEMAPHORE];
    assert_true(k->acquisitions == 1 && k->wait.count == 1 && k->hold.count == 0);
    k = &s.kind[DLOCK_STATS_LATCH];
    assert_true(k->acquisitions == 1 && k->failures[DLOCK_STATS_TIMEOUT] == 1 && k->hold.count == 0);
    expect_untouched(&s.kind[DLOCK_STATS_LOCK]);
    dlock_latch_free(latch);
    dlock_redlock_free(rl);
    dlock_psem_free(p);
    dlock_semaphore_free(sem);
    dlock_rwlock_free(rw);
    dlock_lock_free(fair);
    dlock_client_free(c);
}

/* ---- a strict parser of the Prometheus text format (0.0.4) -------------- */

#define MAX_FAMILIES 32
#define MAX_SERIES 128

typedef struct prom_series {
    char family[96];
    char labels[256]; /* without le */
    double last_le, last_bucket, inf, sum, count;
    int buckets, has_inf, has_sum, has_count;
} prom_series;

typedef struct prom {
    char families[MAX_FAMILIES][96];
    char types[MAX_FAMILIES][16];
    int n_families;
    prom_series series[MAX_SERIES];
    int n_series;
    int samples;
    char why[256];
} prom;

static int prom_fail(prom *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int prom_fail(prom *p, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(p->why, sizeof p->why, "line %d: ", line);
    vsnprintf(p->why + n, sizeof p->why - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* A metric or label name: [a-zA-Z_:][a-zA-Z0-9_:]* (labels: no ':'). */
static size_t name_len(const char *s, int metric)
{
    size_t n = 0;
    while (isalpha((unsigned char)s[n]) || s[n] == '_' || (metric && s[n] == ':') ||
           (n > 0 && isdigit((unsigned char)s[n])))
        n++;
    return n;
}

static int parse_value(const char *s, double *v)
{
    if (strcmp(s, "+Inf") == 0) *v = INFINITY;
    else if (strcmp(s, "-Inf") == 0) *v = -INFINITY;
    else if (strcmp(s, "NaN") == 0) *v = NAN;
    else {
        /* strtod would skip leading blanks and take "inf" or hex. */
        if (!isdigit((unsigned char)s[0]) && !((s[0] == '-' || s[0] == '+' || s[0] == '.') && s[1])) return -1;
        for (const char *c = s; *c; c++)
            if (!isdigit((unsigned char)*c) && !strchr("+-.eE", *c)) return -1;
        char *end;
        *v = strtod(s, &end);
        if (end == s || *end != '\0' || !isdigit((unsigned char)s[strlen(s) - 1])) return -1;
    }
    return 0;
}

static prom_series *series_of(prom *p, const char *family, const char *labels)
{
    for (int i = 0; i < p->n_series; i++)
        if (strcmp(p->series[i].family, family) == 0 && strcmp(p->series[i].labels, labels) == 0) return &p->series[i];
    if (p->n_series == MAX_SERIES) return NULL;
    prom_series *s = &p->series[p->n_series++];
    memset(s, 0, sizeof *s);
    /* Callers pass names from p itself: copy without snprintf's restrict. */
    memcpy(s->family, family, strnlen(family, sizeof s->family - 1));
    memcpy(s->labels, labels, strnlen(labels, sizeof s->labels - 1));
    s->last_le = -INFINITY;
    return s;
}

/* One sample line of family p->families[fam]. */
static int prom_sample(prom *p, int ln, int fam, const char *line)
{
    const char *family = p->families[fam], *type = p->types[fam];
    size_t n = name_len(line, 1);
    if (n == 0) return prom_fail(p, ln, "no metric name: %s", line);
    char name[128];
    if (n >= sizeof name) return prom_fail(p, ln, "name too long");
    memcpy(name, line, n);
    name[n] = '\0';
    const char *q = line + n;
    char labels[256] = "", le[128] = "";
    char seen[8][64];
    int n_seen = 0;
    if (*q == '{') {
        q++;
        while (*q != '}') {
            size_t k = name_len(q, 0);
            if (k == 0 || k >= sizeof seen[0] || q[k] != '=' || q[k + 1] != '"')
                return prom_fail(p, ln, "bad label at %s", q);
            char lname[64];
            memcpy(lname, q, k);
            lname[k] = '\0';
            for (int i = 0; i < n_seen; i++)
                if (strcmp(seen[i], lname) == 0) return prom_fail(p, ln, "label %s twice", lname);
            if (n_seen == 8) return prom_fail(p, ln, "too many labels");
            snprintf(seen[n_seen++], sizeof seen[0], "%s", lname);
            q += k + 2;
            char value[128];
            size_t v = 0;
            for (; *q != '"'; q++) {
                if (*q == '\0' || *q == '\n') return prom_fail(p, ln, "unterminated label value");
                if (*q == '\\') {
                    q++;
                    if (*q != '\\' && *q != '"' && *q != 'n') return prom_fail(p, ln, "bad escape");
                }
                if (v + 1 < sizeof value) value[v++] = *q;
            }
            value[v] = '\0';
            q++;
            if (strcmp(lname, "le") == 0) {
                snprintf(le, sizeof le, "%s", value);
            } else {
                size_t used = strlen(labels);
                snprintf(labels + used, sizeof labels - used, "%s%s=\"%s\"", used ? "," : "", lname, value);
            }
            if (*q == ',') q++;
            else if (*q != '}') return prom_fail(p, ln, "expected , or } at %s", q);
        }
        q++;
    }
    if (*q != ' ') return prom_fail(p, ln, "expected one space before the value: %s", line);
    q++;
    double value;
    if (parse_value(q, &value) != 0) return prom_fail(p, ln, "bad value '%s'", q);
    p->samples++;

    size_t fl = strlen(family);
    if (strcmp(type, "histogram") != 0) {
        if (strcmp(name, family) != 0) return prom_fail(p, ln, "sample %s outside its family %s", name, family);
        if (le[0]) return prom_fail(p, ln, "le on a %s", type);
        if (strcmp(type, "counter") == 0 && (value < 0 || fl < 6 || strcmp(family + fl - 6, "_total") != 0))
            return prom_fail(p, ln, "counter %s: name must end in _total and value be >= 0", name);
        return 0;
    }
    if (strncmp(name, family, fl) != 0) return prom_fail(p, ln, "sample %s outside its family %s", name, family);
    const char *suffix = name + fl;
    prom_series *s = series_of(p, family, labels);
    if (!s) return prom_fail(p, ln, "too many series");
    if (strcmp(suffix, "_bucket") == 0) {
        if (!le[0]) return prom_fail(p, ln, "bucket without le");
        if (s->has_inf || s->has_sum || s->has_count) return prom_fail(p, ln, "bucket after +Inf, _sum or _count");
        double bound;
        if (parse_value(le, &bound) != 0 || isnan(bound)) return prom_fail(p, ln, "bad le '%s'", le);
        if (!(bound > s->last_le)) return prom_fail(p, ln, "le %s not above the previous bucket's", le);
        if (s->buckets && value < s->last_bucket) return prom_fail(p, ln, "bucket count decreases at le=%s", le);
        s->last_le = bound;
        s->last_bucket = value;
        s->buckets++;
        if (isinf(bound)) {
            s->has_inf = 1;
            s->inf = value;
        }
    } else if (strcmp(suffix, "_sum") == 0 && !le[0]) {
        if (s->has_sum) return prom_fail(p, ln, "_sum twice");
        s->has_sum = 1;
        s->sum = value;
    } else if (strcmp(suffix, "_count") == 0 && !le[0]) {
        if (s->has_count) return prom_fail(p, ln, "_count twice");
        s->has_count = 1;
        s->count = value;
    } else {
        return prom_fail(p, ln, "sample %s does not belong to histogram %s", name, family);
    }
    return 0;
}

/* 0 when `text` is valid: lines end in '\n'; each family is introduced
 * once by "# HELP name text" and then "# TYPE name type" before any of its
 * samples; every sample is `name{labels} value` of the current family;
 * counters end in _total; a histogram's series each have buckets with
 * rising le, non-decreasing counts, the last at le="+Inf" equal to its
 * _count, and a _sum. Otherwise -1 with p->why. */
static int prom_parse(prom *p, const char *text)
{
    memset(p, 0, sizeof *p);
    size_t len = strlen(text);
    if (len == 0 || text[len - 1] != '\n') return prom_fail(p, 0, "text does not end with a newline");
    int fam = -1, ln = 0;
    for (const char *line = text; *line; ln++) {
        const char *nl = strchr(line, '\n');
        char buf[512];
        size_t n = (size_t)(nl - line);
        if (n >= sizeof buf) return prom_fail(p, ln, "line too long");
        memcpy(buf, line, n);
        buf[n] = '\0';
        line = nl + 1;
        if (n == 0) return prom_fail(p, ln, "empty line");
        if (strncmp(buf, "# HELP ", 7) == 0) {
            size_t k = name_len(buf + 7, 1);
            if (k == 0 || buf[7 + k] != ' ' || buf[8 + k] == '\0') return prom_fail(p, ln, "bad HELP: %s", buf);
            if (p->n_families == MAX_FAMILIES) return prom_fail(p, ln, "too many families");
            for (int i = 0; i < p->n_families; i++)
                if (strlen(p->families[i]) == k && strncmp(p->families[i], buf + 7, k) == 0)
                    return prom_fail(p, ln, "family %s declared twice", p->families[i]);
            fam = p->n_families++;
            snprintf(p->families[fam], sizeof p->families[fam], "%.*s", (int)k, buf + 7);
            p->types[fam][0] = '\0';
            /* The TYPE line must come next. */
            nl = strchr(line, '\n');
            if (!nl) return prom_fail(p, ln, "HELP without TYPE");
            n = (size_t)(nl - line);
            if (n >= sizeof buf) return prom_fail(p, ln, "line too long");
            memcpy(buf, line, n);
            buf[n] = '\0';
            line = nl + 1;
            ln++;
            char want[128];
            snprintf(want, sizeof want, "# TYPE %s ", p->families[fam]);
            if (strncmp(buf, want, strlen(want)) != 0) return prom_fail(p, ln, "expected %s...: %s", want, buf);
            const char *type = buf + strlen(want);
            if (strcmp(type, "counter") && strcmp(type, "gauge") && strcmp(type, "histogram") &&
                strcmp(type, "summary") && strcmp(type, "untyped"))
                return prom_fail(p, ln, "unknown type %s", type);
            snprintf(p->types[fam], sizeof p->types[fam], "%s", type);
        } else if (buf[0] == '#') {
            return prom_fail(p, ln, "a comment that is neither HELP nor TYPE before it: %s", buf);
        } else {
            if (fam < 0) return prom_fail(p, ln, "sample before any HELP/TYPE: %s", buf);
            if (prom_sample(p, ln, fam, buf) != 0) return -1;
        }
    }
    for (int i = 0; i < p->n_series; i++) {
        const prom_series *s = &p->series[i];
        if (!s->has_inf) return prom_fail(p, ln, "%s{%s}: no le=\"+Inf\" bucket", s->family, s->labels);
        if (!s->has_sum || !s->has_count) return prom_fail(p, ln, "%s{%s}: no _sum or _count", s->family, s->labels);
        if (s->inf != s->count)
            return prom_fail(p, ln, "%s{%s}: +Inf bucket %g is not _count %g", s->family, s->labels, s->inf, s->count);
        if (s->sum < 0) return prom_fail(p, ln, "%s{%s}: negative _sum", s->family, s->labels);
    }
    return 0;
}

/* The value of the sample line starting with `series` ("name{labels}"),
 * or -1 when there is none. */
static double sample(const char *text, const char *series)
{
    char key[256];
    snprintf(key, sizeof key, "\n%s ", series);
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) : -1;
}

/* The parser has teeth: each rule broken once is refused. */
static void the_parser_refuses_broken_text(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "x_total 1\n",                                                     /* no HELP/TYPE */
        "# HELP x_total h\nx_total 1\n",                                   /* no TYPE */
        "# HELP x_total h\n# TYPE x_total counter\nx_total 1",             /* no final newline */
        "# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"1\"}  1\n", /* two spaces */
        "# HELP x_total h\n# TYPE x_total counter\nx_total{a=1} 1\n",      /* unquoted */
        "# HELP x_total h\n# TYPE x_total counter\ny_total 1\n",           /* wrong family */
        "# HELP x h\n# TYPE x counter\nx 1\n",                             /* counter without _total */
        "# HELP x_total h\n# TYPE x_total counter\nx_total abc\n",         /* value */
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\n"
        "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n", /* decreasing */
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", /* no +Inf */
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
        "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",                                        /* le not rising */
        "# HELP x_total h\n# TYPE x_total counter\n# HELP x_total h\n# TYPE x_total counter\n", /* twice */
    };
    prom p;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (prom_parse(&p, bad[i]) == 0) fail_msg("accepted broken text %zu:\n%s", i, bad[i]);
        print_message("refused %zu: %s\n", i, p.why);
    }
    const char *good = "# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"q\\\"\"} 1\n"
                       "# HELP h h\n# TYPE h histogram\nh_bucket{k=\"a\",le=\"1\"} 1\nh_bucket{k=\"a\",le=\"+Inf\"} 2\n"
                       "h_sum{k=\"a\"} 1.5\nh_count{k=\"a\"} 2\n";
    if (prom_parse(&p, good) != 0) fail_msg("refused good text: %s", p.why);
}

static char *render(dlock_client *c)
{
    size_t needed = 0;
    assert_int_equal(dlock_stats_prometheus(c, NULL, 0, &needed), DLOCK_ERR_INVALID);
    assert_true(needed > 1);
    char *buf = malloc(needed);
    assert_non_null(buf);
    size_t again = 0;
    assert_int_equal(dlock_stats_prometheus(c, buf, needed, &again), DLOCK_OK);
    assert_true(again == needed && strlen(buf) + 1 == needed);
    return buf;
}

static const char *const families[] = {
    "dlock_acquisitions_total", "dlock_acquire_failures_total", "dlock_wait_seconds",
    "dlock_hold_seconds",       "dlock_renewals_total",         "dlock_renewal_failures_total",
    "dlock_renewal_seconds",    "dlock_losses_total",           "dlock_wakeups_total",
};

/* The exposition of a client that used the plain lock, a semaphore and a
 * latch parses strictly, carries every family, and says what dlock_stats()
 * says; kinds never used have no samples; a semaphore has no hold times.
 * A fresh client's has the families and no samples. A buffer one byte
 * short is refused and left empty. Every kind in use fits in 64 KiB. */
static void prometheus_text_is_valid_and_matches_the_copy(void **state)
{
    (void)state;
    dlock_client *c = client_with(0);
    prom p;
    char *text = render(c);
    if (prom_parse(&p, text) != 0) fail_msg("%s\n%s", p.why, text);
    assert_int_equal(p.n_families, 9);
    assert_int_equal(p.samples, 0);
    free(text);

    dlock_lock *l, *other;
    assert_int_equal(dlock_lock_new(c, "st-prom", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "st-prom", &other), DLOCK_OK);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
        if (i == 0) assert_int_equal(dlock_lock_acquire(other, 30, 10000, NULL), DLOCK_ERR_TIMEOUT);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    dlock_semaphore *sem;
    assert_int_equal(dlock_semaphore_new(c, "st-prom-sem", &sem), DLOCK_OK);
    assert_int_equal(dlock_semaphore_set_permits(sem, 2, NULL), DLOCK_OK);
    assert_int_equal(dlock_semaphore_acquire(sem, 1, 0), DLOCK_OK);
    dlock_latch *latch;
    assert_int_equal(dlock_latch_new(c, "st-prom-latch", &latch), DLOCK_OK);
    assert_int_equal(dlock_latch_set(latch, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_latch_count_down(latch, NULL), DLOCK_OK);
    assert_int_equal(dlock_latch_await(latch, 0), DLOCK_OK);

    struct dlock_stats s = stats_of(c);
    text = render(c);
    if (prom_parse(&p, text) != 0) fail_msg("%s\n%s", p.why, text);
    for (size_t i = 0; i < sizeof families / sizeof *families; i++) {
        assert_string_equal(p.families[i], families[i]);
        assert_string_equal(p.types[i], strstr(families[i], "_total") ? "counter" : "histogram");
    }
    const dlock_kind_stats *k = &s.kind[DLOCK_STATS_LOCK];
    assert_true(sample(text, "dlock_acquisitions_total{kind=\"lock\"}") == (double)k->acquisitions);
    assert_true(k->acquisitions == 5);
    assert_true(sample(text, "dlock_acquire_failures_total{kind=\"lock\",reason=\"timeout\"}") == 1);
    assert_true(sample(text, "dlock_acquire_failures_total{kind=\"lock\",reason=\"redis\"}") == 0);
    assert_true(sample(text, "dlock_wait_seconds_count{kind=\"lock\"}") == 6);
    assert_true(sample(text, "dlock_hold_seconds_count{kind=\"lock\"}") == 5);
    assert_true(sample(text, "dlock_wait_seconds_bucket{kind=\"lock\",le=\"+Inf\"}") == 6);
    assert_true(sample(text, "dlock_wait_seconds_bucket{kind=\"lock\",le=\"0.1\"}") ==
                (double)k->wait.buckets[LE_100MS]);
    assert_true(sample(text, "dlock_wait_seconds_bucket{kind=\"lock\",le=\"0.000025\"}") == (double)k->wait.buckets[0]);
    assert_true(sample(text, "dlock_wait_seconds_bucket{kind=\"lock\",le=\"60\"}") == 6);
    char want[128];
    snprintf(want, sizeof want, "%llu.%09llu", (unsigned long long)(k->hold.sum_ns / 1000000000u),
             (unsigned long long)(k->hold.sum_ns % 1000000000u));
    const char *sum = strstr(text, "\ndlock_hold_seconds_sum{kind=\"lock\"} ");
    assert_non_null(sum);
    assert_memory_equal(sum + strlen("\ndlock_hold_seconds_sum{kind=\"lock\"} "), want, strlen(want));
    assert_true(fabs(sample(text, "dlock_wait_seconds_sum{kind=\"lock\"}") - (double)k->wait.sum_ns / 1e9) < 1e-6);
    assert_true(sample(text, "dlock_losses_total{kind=\"lock\"}") == 0);
    assert_true(sample(text, "dlock_wakeups_total{kind=\"lock\"}") == (double)k->wakeups);
    assert_true(sample(text, "dlock_acquisitions_total{kind=\"semaphore\"}") == 1);
    assert_true(sample(text, "dlock_acquisitions_total{kind=\"latch\"}") == 1);
    assert_null(strstr(text, "dlock_hold_seconds_count{kind=\"semaphore\"}"));
    assert_null(strstr(text, "dlock_hold_seconds_count{kind=\"latch\"}"));
    assert_null(strstr(text, "kind=\"redlock\""));
    assert_null(strstr(text, "kind=\"fair\""));
    /* 3 used kinds: 3 wait series, lock's hold and renewal series. */
    assert_int_equal(p.n_series, 5);

    size_t needed = 0;
    char *small = malloc(strlen(text));
    assert_non_null(small);
    assert_int_equal(dlock_stats_prometheus(c, small, strlen(text), &needed), DLOCK_ERR_INVALID);
    assert_true(needed == strlen(text) + 1);
    assert_int_equal(small[0], '\0');
    free(small);
    free(text);

    /* The rest of the kinds, then the size of everything. */
    dlock_lock *fair;
    assert_int_equal(dlock_lock_new_fair(c, "st-prom-fair", &fair), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(fair, 0, 10000, NULL), DLOCK_OK);
    dlock_rwlock *rw;
    assert_int_equal(dlock_rwlock_new(c, "st-prom-rw", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 10000, NULL), DLOCK_ERR_DEADLOCK);
    dlock_psem *ps;
    dlock_permit *pm;
    assert_int_equal(dlock_psem_new(c, "st-prom-psem", &ps), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(ps, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(ps, 0, 10000, &pm), DLOCK_OK);
    dlock_redlock *rl;
    assert_int_equal(dlock_redlock_new(&c, 1, "st-prom-rl", &rl), DLOCK_OK);
    assert_int_equal(dlock_redlock_acquire(rl, 0, 10000, NULL, NULL), DLOCK_OK);
    text = render(c);
    if (prom_parse(&p, text) != 0) fail_msg("%s\n%s", p.why, text);
    print_message("every kind: %zu bytes, %d samples\n", strlen(text) + 1, p.samples);
    assert_true(strlen(text) + 1 < 65536);
    assert_true(sample(text, "dlock_acquire_failures_total{kind=\"write\",reason=\"other\"}") == 1);
    assert_null(strstr(text, "dlock_wakeups_total{kind=\"redlock\"}"));
    assert_true(sample(text, "dlock_hold_seconds_count{kind=\"redlock\"}") == 0);
    free(text);
    assert_int_equal(dlock_redlock_release(rl), DLOCK_OK);
    assert_int_equal(dlock_psem_release(ps, pm), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_OK);
    assert_int_equal(dlock_lock_release(fair), DLOCK_OK);
    assert_int_equal(dlock_semaphore_release(sem, 1), DLOCK_OK);

    char one[8];
    assert_int_equal(dlock_stats_prometheus(NULL, one, sizeof one, &needed), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_stats_prometheus(c, NULL, 10, &needed), DLOCK_ERR_INVALID);
    dlock_redlock_free(rl);
    dlock_psem_free(ps);
    dlock_rwlock_free(rw);
    dlock_lock_free(fair);
    dlock_latch_free(latch);
    dlock_semaphore_free(sem);
    dlock_lock_free(other);
    dlock_lock_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(acquisitions_holds_and_reentries_are_counted),
        cmocka_unit_test(failures_are_counted_by_reason),
        cmocka_unit_test(lost_holds_are_counted_once),
        cmocka_unit_test(watchdog_renewals_are_counted),
        cmocka_unit_test(waiter_woken_by_release_counts_a_wakeup),
        cmocka_unit_test(every_kind_is_counted_apart),
        cmocka_unit_test(the_parser_refuses_broken_text),
        cmocka_unit_test(prometheus_text_is_valid_and_matches_the_copy),
    };
    return th_target_run_suite(tests, &server);
}
