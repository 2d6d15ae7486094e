/*
 * The lease bound: every lease above DLOCK_LEASE_MAX_MS is refused with
 * DLOCK_ERR_INVALID before any I/O and leaves nothing in Redis (a lease
 * the server cannot set would otherwise fail the script after the hold
 * was written, leaving a hold with no expiry), while the maximum itself
 * works.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "dlock.h"
#include "harness.h"

static th_redis server;

static int setup(void **state)
{
    (void)state;
    return th_redis_start(&server, NULL);
}

static int teardown(void **state)
{
    (void)state;
    th_redis_stop(&server);
    th_redis_stop_all(); /* and any server a failed test left running */
    return 0;
}

static dlock_client *client_of(const char *url, int offline_ok)
{
    dlock_options o = {0};
    o.offline_ok = offline_ok;
    dlock_client *c = NULL;
    if (dlock_client_new(url, &o, &c) != DLOCK_OK) fail_msg("dlock_client_new: %s", dlock_last_error());
    return c;
}

/* Every lease-taking call, with `lease`, on objects named `name`; each
 * must answer DLOCK_ERR_INVALID. */
static void assert_every_call_refuses(dlock_client *c, const char *name, long lease)
{
    dlock_lock *l, *fair;
    dlock_rwlock *rw;
    dlock_psem *p;
    dlock_permit *pm = NULL;
    dlock_redlock *rl;
    assert_int_equal(dlock_lock_new(c, name, &l), DLOCK_OK);
    assert_int_equal(dlock_lock_new_fair(c, name, &fair), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(c, name, &rw), DLOCK_OK);
    assert_int_equal(dlock_psem_new(c, name, &p), DLOCK_OK);
    assert_int_equal(dlock_redlock_new(&c, 1, name, &rl), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, lease, NULL), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_last_error(), "2147483647"));
    assert_int_equal(dlock_lock_acquire(fair, 0, lease, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_multilock_acquire(&l, 1, 0, lease, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, lease, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, lease, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_psem_acquire(p, 0, lease, &pm), DLOCK_ERR_INVALID);
    assert_null(pm);
    assert_int_equal(dlock_psem_renew(p, "0123456789abcdef0123456789abcdef", lease), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_redlock_acquire(rl, 0, lease, NULL, NULL), DLOCK_ERR_INVALID);
    dlock_redlock_free(rl);
    dlock_psem_free(p);
    dlock_rwlock_free(rw);
    dlock_lock_free(fair);
    dlock_lock_free(l);
}

/* Keys of object `name`, by the library's hash-tagged names. */
static long long keys_of(const char *name)
{
    redisReply *r =
        th_redis_cmd(&server, "EVAL %s 0 %s", "return #redis.call('KEYS', 'dlock:{' .. ARGV[1] .. '}*')", name);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

static void huge_lease_is_refused_and_leaves_nothing(void **state)
{
    (void)state;
    dlock_client *c = client_of(server.url, 0);
    assert_every_call_refuses(c, "huge-long-max", LONG_MAX);
    assert_every_call_refuses(c, "huge-one-over", DLOCK_LEASE_MAX_MS + 1);
    assert_int_equal(keys_of("huge-long-max"), 0);
    assert_int_equal(keys_of("huge-one-over"), 0);
    dlock_client_free(c);
}

/* Refused before any I/O: a client of an unreachable server still says
 * "invalid", not "cannot connect". */
static void huge_lease_is_refused_before_any_io(void **state)
{
    (void)state;
    dlock_client *c = client_of("redis://127.0.0.1:1", 1);
    assert_every_call_refuses(c, "huge-offline", LONG_MAX);
    dlock_client_free(c);
}

/* The extension of a held RedLock is bounded too, and the refused one
 * leaves the hold as it was. */
static void huge_redlock_extension_is_refused(void **state)
{
    (void)state;
    dlock_client *c = client_of(server.url, 0);
    dlock_redlock *rl;
    assert_int_equal(dlock_redlock_new(&c, 1, "huge-extend", &rl), DLOCK_OK);
    assert_int_equal(dlock_redlock_acquire(rl, 0, 5000, NULL, NULL), DLOCK_OK);
    assert_int_equal(dlock_redlock_extend(rl, LONG_MAX, NULL), DLOCK_ERR_INVALID);
    redisReply *r = th_redis_cmd(&server, "PTTL dlock:{huge-extend}");
    assert_non_null(r);
    assert_true(r->integer > 0 && r->integer <= 5000);
    freeReplyObject(r);
    assert_int_equal(dlock_redlock_release(rl), DLOCK_OK);
    dlock_redlock_free(rl);
    dlock_client_free(c);
}

static void client_refuses_a_watchdog_lease_above_the_maximum(void **state)
{
    (void)state;
    dlock_options o = {0};
    dlock_client *c = NULL;
    o.watchdog_lease_ms = DLOCK_LEASE_MAX_MS + 1;
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_ERR_INVALID);
    assert_null(c);
    o.watchdog_lease_ms = 0;
    o.fair_waiter_timeout_ms = LONG_MAX;
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_ERR_INVALID);
    assert_null(c);
}

/* The bound itself is a working lease: the hold gets exactly that TTL. */
static void longest_lease_is_accepted(void **state)
{
    (void)state;
    dlock_client *c = client_of(server.url, 0);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "huge-max", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_MAX_MS, NULL), DLOCK_OK);
    redisReply *r = th_redis_cmd(&server, "PTTL dlock:{huge-max}");
    assert_non_null(r);
    assert_true(r->integer > DLOCK_LEASE_MAX_MS - 60000 && r->integer <= DLOCK_LEASE_MAX_MS);
    freeReplyObject(r);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(keys_of("huge-max"), 0); /* the fencing counter is the slot's, not the name's */
    dlock_lock_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(huge_lease_is_refused_and_leaves_nothing),
        cmocka_unit_test(huge_lease_is_refused_before_any_io),
        cmocka_unit_test(huge_redlock_extension_is_refused),
        cmocka_unit_test(client_refuses_a_watchdog_lease_above_the_maximum),
        cmocka_unit_test(longest_lease_is_accepted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
