/*
 * Holders cut off from Redis.
 *
 * A real loopback proxy stands between a holder and its server and is cut
 * (th_proxy_partition: nothing passes either way, nothing is closed or
 * refused, as when a network drops packets). The holder's renewals then
 * neither succeed nor fail: they just get no answer. What must hold is the
 * one promise a lease can make to its holder: it is never believed past
 * its end by the holder's own clock. The library must declare the hold
 * lost (flag and callback, at the same moment) while the server still has
 * it, so that nobody else can have taken it yet; a competitor that asks
 * the server directly at that moment must be refused.
 *
 * Every kind of renewed hold is tried: plain and fair lock (also taken
 * through the asynchronous API), read and write hold, permit, and RedLock
 * (by majority, two of three masters cut off).
 * A hold with an explicit lease and no watchdog is told by the clock too.
 * On a Redis Cluster, one master cut off (paused) must not cost the holds
 * on the healthy masters: renewals of one server must not wait for
 * another's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "proxy.h"
#include "th_topology.h"

#define LEASE_MS 1000L

static th_redis server;
static th_proxy *proxy;
static th_proxy *proxy2; /* RedLock's second master, while that case runs */

static int setup(void **state)
{
    (void)state;
    if (th_redis_start(&server, NULL) != 0) return -1;
    proxy = th_proxy_start(&server);
    return proxy ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    th_proxy_stop(proxy);
    th_redis_stop(&server);
    th_redis_stop_all();
    return 0;
}

/* After each case, passed or failed: no partition is left behind. */
static int heal_all(void **state)
{
    (void)state;
    th_proxy_partition(proxy, 0);
    if (proxy2) th_proxy_partition(proxy2, 0);
    return 0;
}

/* What a loss callback saw: when, and whether the query agreed then. */
static atomic_llong lost_at;
static atomic_int lost_calls;

static void note_lost(void)
{
    long long expected = 0;
    atomic_compare_exchange_strong(&lost_at, &expected, th_now_ms());
    atomic_fetch_add(&lost_calls, 1);
}

static void on_lock_lost(dlock_lock *l, uint64_t token, void *arg)
{
    (void)l;
    (void)token;
    (void)arg;
    note_lost();
}

static void on_rw_lost(dlock_rwlock *rw, dlock_rw_mode mode, uint64_t token, void *arg)
{
    (void)rw;
    (void)mode;
    (void)token;
    (void)arg;
    note_lost();
}

static void on_permit_lost(dlock_permit *p, void *arg)
{
    (void)p;
    (void)arg;
    note_lost();
}

static void on_redlock_lost(dlock_redlock *rl, void *arg)
{
    (void)rl;
    (void)arg;
    note_lost();
}

static dlock_client *client_of(const char *url)
{
    dlock_options o = {0};
    o.watchdog_lease_ms = LEASE_MS;
    dlock_client *c = NULL;
    if (dlock_client_new(url, &o, &c) != DLOCK_OK) fail_msg("dlock_client_new: %s", dlock_last_error());
    return c;
}

/* Cut the holder off and wait until it is told; returns how long after
 * the cut that was. The caller then checks the server still has the
 * hold. */
static long long cut_and_wait_for_loss(void)
{
    atomic_store(&lost_at, 0);
    atomic_store(&lost_calls, 0);
    usleep(450000); /* past one renewal (every LEASE_MS / 3) */
    long long cut = th_now_ms();
    th_proxy_partition(proxy, 1);
    while (atomic_load(&lost_at) == 0 && th_now_ms() - cut < 10000) usleep(1000);
    long long after = atomic_load(&lost_at) - cut;
    if (atomic_load(&lost_at) == 0) fail_msg("the cut-off holder was never told (10 s)");
    print_message("told %lld ms after the cut (lease %ld ms)\n", after, LEASE_MS);
    return after;
}

/* The hold ended on the holder's side before a lease from its last
 * renewal could have run out on the server. */
static void heal(void)
{
    th_proxy_partition(proxy, 0);
}

/* A hold taken with dlock_lock_acquire_async() belongs to the handle, not
 * a thread, but is renewed and given up by the same clock. */
static atomic_int async_done;
static atomic_int async_status;

static void on_async_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)l;
    (void)token;
    (void)arg;
    atomic_store(&async_status, st);
    atomic_store(&async_done, 1);
}

static void on_async_released(dlock_lock *l, dlock_status st, void *arg)
{
    (void)l;
    (void)st;
    (void)arg;
}

/* A plain or fair lock, held by a thread or (`async`) by the handle
 * through the asynchronous API: the competitor, asking the server
 * directly at the moment of loss, must find it still held. */
static void lock_case(int fair, int async, const char *name)
{
    dlock_client *cut = client_of(th_proxy_url(proxy)), *direct = client_of(server.url);
    dlock_lock *l, *other;
    assert_int_equal((fair ? dlock_lock_new_fair : dlock_lock_new)(cut, name, &l), DLOCK_OK);
    assert_int_equal((fair ? dlock_lock_new_fair : dlock_lock_new)(direct, name, &other), DLOCK_OK);
    dlock_lock_on_lost(l, on_lock_lost, NULL);
    if (async) {
        atomic_store(&async_done, 0);
        assert_int_equal(dlock_lock_acquire_async(l, 0, DLOCK_LEASE_WATCHDOG, on_async_acquired, NULL), DLOCK_OK);
        for (long long t0 = th_now_ms(); !atomic_load(&async_done) && th_now_ms() - t0 < 5000;) usleep(1000);
        assert_int_equal(atomic_load(&async_done), 1);
        assert_int_equal(atomic_load(&async_status), DLOCK_OK);
    } else {
        assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    }
    long long after = cut_and_wait_for_loss();
    /* Flag and callback at the same moment: the flag is set by now (for
     * the handle's hold, asked from any thread). */
    assert_int_equal(dlock_lock_lost(l), 1);
    assert_int_equal(dlock_lock_acquire(other, 0, 5000, NULL), DLOCK_ERR_TIMEOUT);
    assert_true(after < LEASE_MS);
    assert_int_equal(atomic_load(&lost_calls), 1);
    heal();
    assert_int_equal(async ? dlock_lock_release_async(l, on_async_released, NULL) : dlock_lock_release(l),
                     DLOCK_ERR_LOST);
    /* ... and it does end on the server by itself. */
    assert_int_equal(dlock_lock_acquire(other, 3000, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(other), DLOCK_OK);
    dlock_lock_free(other);
    dlock_lock_free(l);
    dlock_client_free(direct);
    dlock_client_free(cut);
}

static void cut_off_lock_holder_is_told_before_its_lease_ends(void **state)
{
    (void)state;
    lock_case(0, 0, "cut-plain");
}

static void cut_off_fair_lock_holder_is_told_before_its_lease_ends(void **state)
{
    (void)state;
    lock_case(1, 0, "cut-fair");
}

static void cut_off_async_lock_holder_is_told_before_its_lease_ends(void **state)
{
    (void)state;
    lock_case(0, 1, "cut-async");
}

/* Read or write hold: the competitor asks for the opposite (or the same
 * exclusive) mode. */
static void rw_case(dlock_rw_mode mode, const char *name)
{
    dlock_client *cut = client_of(th_proxy_url(proxy)), *direct = client_of(server.url);
    dlock_rwlock *rw, *other;
    assert_int_equal(dlock_rwlock_new(cut, name, &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(direct, name, &other), DLOCK_OK);
    dlock_rwlock_on_lost(rw, on_rw_lost, NULL);
    assert_int_equal(dlock_rwlock_acquire(rw, mode, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    long long after = cut_and_wait_for_loss();
    assert_int_equal(dlock_rwlock_acquire(other, DLOCK_WRITE, 0, 5000, NULL), DLOCK_ERR_TIMEOUT);
    assert_true(after < LEASE_MS);
    assert_int_equal(dlock_rwlock_lost(rw, mode), 1);
    heal();
    assert_int_equal(dlock_rwlock_release(rw, mode), DLOCK_ERR_LOST);
    assert_int_equal(dlock_rwlock_acquire(other, DLOCK_WRITE, 3000, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(other, DLOCK_WRITE), DLOCK_OK);
    dlock_rwlock_free(other);
    dlock_rwlock_free(rw);
    dlock_client_free(direct);
    dlock_client_free(cut);
}

static void cut_off_write_holder_is_told_before_its_lease_ends(void **state)
{
    (void)state;
    rw_case(DLOCK_WRITE, "cut-write");
}

static void cut_off_read_holder_is_told_before_its_lease_ends(void **state)
{
    (void)state;
    rw_case(DLOCK_READ, "cut-read");
}

/* A permit of a one-permit semaphore: the competitor finds none free. */
static void cut_off_permit_holder_is_told_before_its_lease_ends(void **state)
{
    (void)state;
    dlock_client *cut = client_of(th_proxy_url(proxy)), *direct = client_of(server.url);
    dlock_psem *ps, *other;
    dlock_permit *p = NULL, *q = NULL;
    assert_int_equal(dlock_psem_new(cut, "cut-psem", &ps), DLOCK_OK);
    assert_int_equal(dlock_psem_new(direct, "cut-psem", &other), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(ps, 1, NULL), DLOCK_OK);
    dlock_psem_on_lost(ps, on_permit_lost, NULL);
    assert_int_equal(dlock_psem_acquire(ps, 0, DLOCK_LEASE_WATCHDOG, &p), DLOCK_OK);
    long long after = cut_and_wait_for_loss();
    assert_int_equal(dlock_psem_acquire(other, 0, 5000, &q), DLOCK_ERR_TIMEOUT);
    assert_true(after < LEASE_MS);
    assert_int_equal(dlock_permit_lost(p), 1);
    heal();
    assert_int_equal(dlock_psem_release(ps, p), DLOCK_ERR_LOST);
    assert_int_equal(dlock_psem_acquire(other, 3000, 5000, &q), DLOCK_OK);
    assert_int_equal(dlock_psem_release(other, q), DLOCK_OK);
    dlock_psem_free(other);
    dlock_psem_free(ps);
    dlock_client_free(direct);
    dlock_client_free(cut);
}

/* RedLock over three masters, two of them behind the one proxy: with the
 * majority cut off the hold is lost, and told before a majority of its
 * leases can have ended. */
static void cut_off_redlock_majority_is_told_before_its_lease_ends(void **state)
{
    (void)state;
    th_redis second, third;
    assert_int_equal(th_redis_start(&second, NULL), 0);
    assert_int_equal(th_redis_start(&third, NULL), 0);
    th_proxy *px2 = proxy2 = th_proxy_start(&second);
    assert_non_null(px2);
    dlock_client *cut[3] = {client_of(th_proxy_url(proxy)), client_of(th_proxy_url(px2)), client_of(third.url)};
    dlock_client *direct[3] = {client_of(server.url), client_of(second.url), client_of(third.url)};
    dlock_redlock *rl, *other;
    assert_int_equal(dlock_redlock_new(cut, 3, "cut-redlock", &rl), DLOCK_OK);
    assert_int_equal(dlock_redlock_new(direct, 3, "cut-redlock", &other), DLOCK_OK);
    dlock_redlock_on_lost(rl, on_redlock_lost, NULL);
    assert_int_equal(dlock_redlock_acquire(rl, 0, DLOCK_LEASE_WATCHDOG, NULL, NULL), DLOCK_OK);
    th_proxy_partition(px2, 1); /* cut_and_wait_for_loss cuts the first */
    long long after = cut_and_wait_for_loss();
    assert_int_equal(dlock_redlock_acquire(other, 0, 5000, NULL, NULL), DLOCK_ERR_TIMEOUT);
    assert_true(after < LEASE_MS);
    assert_int_equal(dlock_redlock_lost(rl), 1);
    heal();
    th_proxy_partition(px2, 0);
    dlock_redlock_release(rl);
    assert_int_equal(dlock_redlock_acquire(other, 3000, 5000, NULL, NULL), DLOCK_OK);
    assert_int_equal(dlock_redlock_release(other), DLOCK_OK);
    dlock_redlock_free(other);
    dlock_redlock_free(rl);
    for (int i = 0; i < 3; i++) {
        dlock_client_free(direct[i]);
        dlock_client_free(cut[i]);
    }
    proxy2 = NULL;
    th_proxy_stop(px2);
    th_redis_stop(&third);
    th_redis_stop(&second);
}

/* A hold with an explicit lease has no watchdog, but its holder still
 * learns by the clock that it may have ended: dlock_lock_lost() says so
 * before the server can grant the lock to someone else. A 1000 ms lease
 * with a 50 % safety margin, trusted for 488 ms: 512 ms between the
 * holder's word and the server's, room for a loaded machine to stall
 * this thread between the two checks and the lease's end. */
static void explicit_lease_is_not_believed_past_its_end(void **state)
{
    (void)state;
    dlock_options o = {0};
    o.safety_margin_pct = 50;
    dlock_client *c = NULL, *direct = client_of(server.url);
    if (dlock_client_new(server.url, &o, &c) != DLOCK_OK) fail_msg("dlock_client_new: %s", dlock_last_error());
    dlock_lock *l, *other;
    assert_int_equal(dlock_lock_new(c, "clock-told", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_new(direct, "clock-told", &other), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 1000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_lost(l), 0);
    long long t0 = th_now_ms();
    while (!dlock_lock_lost(l) && th_now_ms() - t0 < 5000) usleep(1000);
    assert_int_equal(dlock_lock_lost(l), 1);
    assert_int_equal(dlock_lock_acquire(other, 0, 5000, NULL), DLOCK_ERR_TIMEOUT);
    assert_true(th_now_ms() - t0 < 1000);
    assert_int_equal(dlock_lock_acquire(other, 3000, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(other), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_ERR_LOST);
    dlock_lock_free(other);
    dlock_lock_free(l);
    dlock_client_free(direct);
    dlock_client_free(c);
}

/* Two names of which the first hashes to the slot range of one master and
 * the second to another's: found by asking the cluster. */
static void names_on_two_masters(th_topology *t, char a[32], char b[32], int *port_a)
{
    int pa = 0, pb = 0;
    for (int i = 0; i < 1000 && !pb; i++) {
        char name[32], key[48];
        snprintf(name, sizeof name, "two-%d", i);
        snprintf(key, sizeof key, "dlock:{%s}", name);
        int port = th_cluster_key_owner(t, key);
        if (!pa) {
            pa = port;
            snprintf(a, 32, "%s", name);
        } else if (port && port != pa) {
            pb = port;
            snprintf(b, 32, "%s", name);
        }
    }
    assert_true(pa && pb);
    *port_a = pa;
}

/* One master of a cluster stops answering (SIGSTOP: its connections hang,
 * like a partition). The hold on it is lost, as it must be; the hold on a
 * healthy master must not be: its renewals do not wait for the other's. */
static void a_master_cut_off_does_not_cost_the_holds_on_the_others(void **state)
{
    (void)state;
    th_topology t;
    /* Long enough that the cluster does not fail the paused master over
     * while the test watches. */
    const th_topology_opts o = {.node_timeout_ms = 15000};
    assert_int_equal(th_cluster_start(&t, &o), 0);
    char a[32], b[32];
    int port_a;
    names_on_two_masters(&t, a, b, &port_a);
    dlock_client *c = client_of(t.url);
    dlock_lock *la, *lb;
    assert_int_equal(dlock_lock_new(c, a, &la), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, b, &lb), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    assert_int_equal(th_node_pause(&t, port_a), 0);
    sleep(3); /* three leases */
    int lost_a = dlock_lock_lost(la), lost_b = dlock_lock_lost(lb);
    assert_int_equal(th_node_resume(&t, port_a), 0);
    assert_int_equal(lost_a, 1);
    assert_int_equal(lost_b, 0);
    assert_int_equal(dlock_lock_release(lb), DLOCK_OK);
    assert_int_equal(dlock_lock_release(la), DLOCK_ERR_LOST);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_free(c);
    th_cluster_stop(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(cut_off_lock_holder_is_told_before_its_lease_ends, heal_all),
        cmocka_unit_test_teardown(cut_off_fair_lock_holder_is_told_before_its_lease_ends, heal_all),
        cmocka_unit_test_teardown(cut_off_async_lock_holder_is_told_before_its_lease_ends, heal_all),
        cmocka_unit_test_teardown(cut_off_write_holder_is_told_before_its_lease_ends, heal_all),
        cmocka_unit_test_teardown(cut_off_read_holder_is_told_before_its_lease_ends, heal_all),
        cmocka_unit_test_teardown(cut_off_permit_holder_is_told_before_its_lease_ends, heal_all),
        cmocka_unit_test_teardown(cut_off_redlock_majority_is_told_before_its_lease_ends, heal_all),
        cmocka_unit_test_teardown(explicit_lease_is_not_believed_past_its_end, heal_all),
        cmocka_unit_test_teardown(a_master_cut_off_does_not_cost_the_holds_on_the_others, heal_all),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
