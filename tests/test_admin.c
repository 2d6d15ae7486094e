/*
 * The administration calls against real servers (one server, Sentinel or
 * Cluster: target.h): dlock_list() finds every kind on every master, with
 * what its inspect call reports; dlock_delete() refuses a name in use,
 * deletes an abandoned one whole, and never lets its tokens go back; the
 * semaphore, psem and latch inspect calls read them by name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "fence.h" /* dlock__fence_key */
#include "target.h"

static th_target server;

static dlock_client *client(void)
{
    dlock_client *c = NULL;
    if (dlock_client_new(server.url, NULL, &c) != DLOCK_OK) fail_msg("client: %s", dlock_last_error());
    return c;
}

static void flush(void)
{
    assert_int_equal(th_target_flush(&server), 0);
}

/* The entry of `name` and `kind` in a list, or NULL. */
static const dlock_entry *entry_of(const dlock_entry *e, size_t n, const char *name, dlock_kind kind)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0 && e[i].kind == kind) return &e[i];
    return NULL;
}

/* Keys of `name` left on all masters, but for the operation records
 * (which expire by themselves, and dlock_delete() leaves). */
static long keys_of(const char *name)
{
    char pattern[128], ops[128];
    snprintf(pattern, sizeof pattern, "dlock:{%s}*", name);
    snprintf(ops, sizeof ops, "dlock:{%s}:op:*", name);
    long all = th_target_keys(&server, pattern, NULL, 0), records = th_target_keys(&server, ops, NULL, 0);
    assert_true(all >= 0 && records >= 0);
    return all - records;
}

typedef struct waited {
    atomic_int done;
    dlock_status st;
} waited;

static void on_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)l;
    (void)token;
    waited *w = arg;
    w->st = st;
    atomic_store(&w->done, 1);
}

static void on_released(dlock_lock *l, dlock_status st, void *arg)
{
    on_acquired(l, st, 0, arg);
}

/* Every kind, each in the state its inspect call reports, and only the
 * names the pattern matches and that are in use: a lock released before
 * is not listed, nor a name outside the pattern. Twenty more locks spread
 * over the masters of a Cluster are all found (SCAN on each master). */
static void list_finds_every_kind_with_its_state(void **state)
{
    (void)state;
    flush();
    dlock_client *c = client(), *other = client();
    dlock_lock *lock, *fair, *fair_waiter, *gone, *outside, *many[20];
    dlock_rwlock *rw;
    dlock_semaphore *sem;
    dlock_psem *psem;
    dlock_latch *latch;
    uint64_t lock_token = 0, fair_token = 0, write_token = 0;
    assert_int_equal(dlock_lock_new(c, "adm:lock", &lock), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(lock, 0, 5000, &lock_token), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(lock, 0, 5000, NULL), DLOCK_OK); /* count 2 */
    assert_int_equal(dlock_lock_new_fair(c, "adm:fair", &fair), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(fair, 0, 5000, &fair_token), DLOCK_OK);
    assert_int_equal(dlock_lock_new_fair(other, "adm:fair", &fair_waiter), DLOCK_OK);
    waited w = {0, DLOCK_OK};
    assert_int_equal(dlock_lock_acquire_async(fair_waiter, 20000, 5000, on_acquired, &w), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(c, "adm:rw", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 5000, &write_token), DLOCK_OK);
    assert_int_equal(dlock_semaphore_new(c, "adm:sem", &sem), DLOCK_OK);
    assert_int_equal(dlock_semaphore_set_permits(sem, 5, NULL), DLOCK_OK);
    assert_int_equal(dlock_semaphore_acquire(sem, 2, 0), DLOCK_OK);
    assert_int_equal(dlock_psem_new(c, "adm:psem", &psem), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(psem, 3, NULL), DLOCK_OK);
    dlock_permit *permit = NULL;
    assert_int_equal(dlock_psem_acquire(psem, 0, 5000, &permit), DLOCK_OK);
    assert_int_equal(dlock_latch_new(c, "adm:latch", &latch), DLOCK_OK);
    assert_int_equal(dlock_latch_set(latch, 4, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "adm:gone", &gone), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(gone, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(gone), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "elsewhere", &outside), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(outside, 0, 5000, NULL), DLOCK_OK);
    int ports_differ = 0;
    for (int i = 0; i < 20; i++) {
        char name[32], key[48];
        snprintf(name, sizeof name, "adm:many:%d", i);
        assert_int_equal(dlock_lock_new(c, name, &many[i]), DLOCK_OK);
        assert_int_equal(dlock_lock_acquire(many[i], 0, 5000, NULL), DLOCK_OK);
        snprintf(key, sizeof key, "dlock:{%s}", name);
        if (th_target_master_port(&server, key) != th_target_master_port(&server, "dlock:{adm:many:0}"))
            ports_differ = 1;
    }
    if (server.kind == TH_TARGET_CLUSTER) assert_true(ports_differ); /* the names span masters */
    /* the fair waiter has queued once its first attempt found the lock held */
    char q[] = "dlock:{adm:fair}:q";
    for (int i = 0; i < 100; i++) {
        redisReply *r = th_target_cmd(&server, q, "EXISTS %s", q);
        int queued = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        freeReplyObject(r);
        if (queued) break;
        usleep(20000);
    }

    dlock_entry *e = NULL;
    size_t n = 0;
    assert_int_equal(dlock_list(other, "adm:*", &e, &n), DLOCK_OK);
    assert_int_equal(n, 6 + 20);
    for (size_t i = 1; i < n; i++) assert_true(strcmp(e[i - 1].name, e[i].name) <= 0); /* sorted by name */
    const dlock_entry *x = entry_of(e, n, "adm:lock", DLOCK_KIND_LOCK);
    assert_non_null(x);
    assert_int_equal(x->info.lock.held, 1);
    assert_int_equal(x->info.lock.hold_count, 2);
    assert_true(x->info.lock.last_token == lock_token);
    assert_true(x->info.lock.ttl_ms > 0 && x->info.lock.ttl_ms <= 5000);
    assert_true(strstr(x->info.lock.holder, dlock_client_id(c)) == x->info.lock.holder);
    x = entry_of(e, n, "adm:fair", DLOCK_KIND_FAIR_LOCK);
    assert_non_null(x);
    assert_true(x->info.lock.last_token == fair_token);
    x = entry_of(e, n, "adm:rw", DLOCK_KIND_RWLOCK);
    assert_non_null(x);
    assert_int_equal(x->info.rwlock.write_count, 1);
    assert_true(x->info.rwlock.last_token == write_token);
    x = entry_of(e, n, "adm:sem", DLOCK_KIND_SEMAPHORE);
    assert_non_null(x);
    assert_int_equal(x->info.semaphore.available, 3);
    x = entry_of(e, n, "adm:psem", DLOCK_KIND_PSEM);
    assert_non_null(x);
    assert_int_equal(x->info.psem.permits, 3);
    assert_int_equal(x->info.psem.used, 1);
    assert_true(x->info.psem.ttl_ms > 0 && x->info.psem.ttl_ms <= 5000);
    x = entry_of(e, n, "adm:latch", DLOCK_KIND_LATCH);
    assert_non_null(x);
    assert_int_equal(x->info.latch.count, 4);
    for (int i = 0; i < 20; i++) {
        char name[32];
        snprintf(name, sizeof name, "adm:many:%d", i);
        assert_non_null(entry_of(e, n, name, DLOCK_KIND_LOCK));
    }
    assert_null(entry_of(e, n, "adm:gone", DLOCK_KIND_LOCK));
    assert_string_equal(dlock_kind_name(DLOCK_KIND_FAIR_LOCK), "fair");
    dlock_list_free(e, n);

    /* a glob of one character, and one that matches nothing */
    assert_int_equal(dlock_list(other, "adm:l?ck", &e, &n), DLOCK_OK);
    assert_int_equal(n, 1);
    assert_string_equal(e[0].name, "adm:lock");
    dlock_list_free(e, n);
    assert_int_equal(dlock_list(other, "nothing:*", &e, &n), DLOCK_OK);
    assert_int_equal(n, 0);
    assert_null(e);

    for (int i = 0; i < 20; i++) dlock_lock_free(many[i]); /* the holds end with their leases */
    dlock_lock_free(outside);
    dlock_lock_free(gone);
    dlock_latch_free(latch);
    assert_int_equal(dlock_psem_release(psem, permit), DLOCK_OK);
    dlock_psem_free(psem);
    dlock_semaphore_free(sem);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    dlock_rwlock_free(rw);
    assert_int_equal(dlock_lock_release(fair), DLOCK_OK);
    for (int i = 0; i < 500 && !atomic_load(&w.done); i++) usleep(20000);
    assert_true(atomic_load(&w.done));
    assert_int_equal(w.st, DLOCK_OK);
    atomic_store(&w.done, 0);
    assert_int_equal(dlock_lock_release_async(fair_waiter, on_released, &w), DLOCK_OK);
    for (int i = 0; i < 500 && !atomic_load(&w.done); i++) usleep(20000);
    assert_int_equal(w.st, DLOCK_OK);
    dlock_lock_free(fair_waiter);
    dlock_lock_free(fair);
    assert_int_equal(dlock_lock_release(lock), DLOCK_OK);
    assert_int_equal(dlock_lock_release(lock), DLOCK_OK);
    dlock_lock_free(lock);
    dlock_client_free(other);
    dlock_client_free(c);
}

static void list_refuses_bad_patterns(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_entry *e = (dlock_entry *)1;
    size_t n = 7;
    assert_int_equal(dlock_list(c, "a{b}", &e, &n), DLOCK_ERR_INVALID);
    assert_null(e);
    assert_int_equal(n, 0);
    assert_int_equal(dlock_list(c, "", &e, &n), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_list(c, NULL, &e, &n), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_list(NULL, "*", &e, &n), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_delete(c, "a}b", 0, NULL), DLOCK_ERR_INVALID);
    dlock_client_free(c);
}

/* The inspect calls by name, before anything is set and after. */
static void semaphores_and_latches_are_read_by_name(void **state)
{
    (void)state;
    flush();
    dlock_client *c = client();
    dlock_semaphore_info si;
    dlock_psem_info pi;
    dlock_latch_info li;
    assert_int_equal(dlock_semaphore_inspect(c, "adm:never", &si), DLOCK_OK);
    assert_int_equal(si.exists, 0);
    assert_int_equal(dlock_psem_inspect(c, "adm:never", &pi), DLOCK_OK);
    assert_int_equal(pi.exists, 0);
    assert_int_equal(pi.used, 0);
    assert_int_equal(pi.ttl_ms, -1);
    assert_int_equal(dlock_latch_inspect(c, "adm:never", &li), DLOCK_OK);
    assert_int_equal(li.exists, 0);

    dlock_psem *p;
    assert_int_equal(dlock_psem_new(c, "adm:p", &p), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(p, 4, NULL), DLOCK_OK);
    dlock_permit *a, *b;
    assert_int_equal(dlock_psem_acquire(p, 0, 3000, &a), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(p, 0, 8000, &b), DLOCK_OK);
    assert_int_equal(dlock_psem_inspect(c, "adm:p", &pi), DLOCK_OK);
    assert_int_equal(pi.exists, 1);
    assert_int_equal(pi.permits, 4);
    assert_int_equal(pi.used, 2);
    assert_true(pi.ttl_ms > 3000 && pi.ttl_ms <= 8000); /* the longer lease */
    assert_int_equal(dlock_psem_release(p, a), DLOCK_OK);
    assert_int_equal(dlock_psem_release(p, b), DLOCK_OK);
    assert_int_equal(dlock_psem_inspect(c, "adm:p", &pi), DLOCK_OK);
    assert_int_equal(pi.used, 0);
    assert_int_equal(pi.ttl_ms, -1);
    dlock_psem_free(p);

    dlock_latch *l;
    assert_int_equal(dlock_latch_new(c, "adm:l", &l), DLOCK_OK);
    assert_int_equal(dlock_latch_set(l, 2, NULL), DLOCK_OK);
    assert_int_equal(dlock_latch_count_down(l, NULL), DLOCK_OK);
    assert_int_equal(dlock_latch_inspect(c, "adm:l", &li), DLOCK_OK);
    assert_int_equal(li.exists, 1);
    assert_int_equal(li.count, 1);
    dlock_latch_free(l);
    dlock_client_free(c);
}

/* A name in use is refused, kind by kind, and nothing of it deleted; a
 * plain semaphore (no holders to know of) is not. */
static void delete_refuses_a_name_in_use(void **state)
{
    (void)state;
    flush();
    dlock_client *c = client();
    dlock_lock *l;
    dlock_rwlock *rw;
    dlock_psem *p;
    dlock_latch *la;
    dlock_semaphore *s;
    assert_int_equal(dlock_lock_new(c, "adm:d1", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(c, "adm:d2", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_psem_new(c, "adm:d3", &p), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(p, 2, NULL), DLOCK_OK);
    dlock_permit *permit;
    assert_int_equal(dlock_psem_acquire(p, 0, 5000, &permit), DLOCK_OK);
    assert_int_equal(dlock_latch_new(c, "adm:d4", &la), DLOCK_OK);
    assert_int_equal(dlock_latch_set(la, 1, NULL), DLOCK_OK);
    const char *names[4] = {"adm:d1", "adm:d2", "adm:d3", "adm:d4"};
    const char *kinds[4] = {"(lock)", "(rwlock)", "(psem)", "(latch)"};
    for (int i = 0; i < 4; i++) {
        long before = keys_of(names[i]);
        assert_true(before > 0);
        int deleted = -1;
        assert_int_equal(dlock_delete(c, names[i], 0, &deleted), DLOCK_ERR_NOT_OWNER);
        assert_int_equal(deleted, 0);
        if (!strstr(dlock_last_error(), kinds[i])) fail_msg("%s: message '%s'", names[i], dlock_last_error());
        assert_int_equal(keys_of(names[i]), before);
    }
    assert_int_equal(dlock_semaphore_new(c, "adm:d5", &s), DLOCK_OK);
    assert_int_equal(dlock_semaphore_set_permits(s, 2, NULL), DLOCK_OK);
    int deleted = 0;
    assert_int_equal(dlock_delete(c, "adm:d5", 0, &deleted), DLOCK_OK);
    assert_int_equal(deleted, 2); /* its permits left and its size */
    assert_int_equal(keys_of("adm:d5"), 0);
    dlock_semaphore_free(s);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_OK);
    dlock_rwlock_free(rw);
    assert_int_equal(dlock_psem_release(p, permit), DLOCK_OK);
    dlock_psem_free(p);
    /* A rate limit holds nothing: its settings and its whole-limit bucket
     * go (a subject's bucket expires once full). */
    dlock_rate_options ro = {0};
    ro.rate = 5;
    dlock_rate *rate;
    dlock_rate_result rr;
    assert_int_equal(dlock_rate_new(c, "adm:d6", &ro, &rate), DLOCK_OK);
    assert_int_equal(dlock_rate_try(rate, NULL, 1, &rr), DLOCK_OK);
    assert_int_equal(keys_of("adm:d6"), 2);
    assert_int_equal(dlock_delete(c, "adm:d6", 0, &deleted), DLOCK_OK);
    assert_int_equal(deleted, 2);
    assert_int_equal(keys_of("adm:d6"), 0);
    dlock_rate_free(rate);
    /* An open latch is kept a while as "0", and nothing waits on it: it
     * may go. */
    assert_int_equal(dlock_latch_count_down(la, NULL), DLOCK_OK);
    assert_int_equal(dlock_delete(c, "adm:d4", 0, &deleted), DLOCK_OK);
    assert_int_equal(keys_of("adm:d4"), 0);
    dlock_latch_free(la);
    dlock_client_free(c);
}

/* With force, a held lock is deleted: its holder finds it lost at its
 * next renewal, a waiter takes it at once, and the new token is above the
 * deleted hold's. */
static void delete_with_force_takes_a_held_name(void **state)
{
    (void)state;
    flush();
    dlock_options o = {0};
    o.watchdog_lease_ms = 3000; /* renewed every second: the loss shows soon */
    dlock_client *c = NULL, *admin = client();
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    dlock_lock *l, *next;
    uint64_t t1 = 0, t2 = 0;
    assert_int_equal(dlock_lock_new(c, "adm:force", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, &t1), DLOCK_OK);
    int deleted = 0;
    assert_int_equal(dlock_delete(admin, "adm:force", 1, &deleted), DLOCK_OK);
    assert_true(deleted >= 1);
    assert_int_equal(dlock_lock_new(admin, "adm:force", &next), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(next, 0, 5000, &t2), DLOCK_OK);
    if (t2 <= t1) fail_msg("token after a forced delete %llu <= %llu", (unsigned long long)t2, (unsigned long long)t1);
    for (int i = 0; i < 300 && !dlock_lock_lost(l); i++) usleep(50000);
    assert_int_equal(dlock_lock_lost(l), 1);
    assert_int_equal(dlock_lock_release(next), DLOCK_OK);
    dlock_lock_free(next);
    dlock_lock_free(l);
    dlock_client_free(admin);
    dlock_client_free(c);
}

/* An abandoned name is deleted whole, waiting sets, queues and the CLI's
 * records included, but never the slot's fencing counter; a per-name
 * counter an earlier version left, ahead of everything, is folded into
 * the slot's first, so the name's next token is above it. */
static void delete_of_an_abandoned_name_keeps_its_tokens_rising(void **state)
{
    (void)state;
    flush();
    dlock_client *c = client();
    const unsigned long long ahead = 4000000000000000ULL; /* year 2096 in microseconds */
    const char *leftovers[] = {"dlock:{adm:old}:fence", "dlock:{adm:old}:rw:fence", "dlock:{adm:old}:info",
                               "dlock:{adm:old}:sem",   "dlock:{adm:old}:psem",     "dlock:{adm:old}:qo"};
    for (size_t i = 0; i < sizeof leftovers / sizeof leftovers[0]; i++)
        freeReplyObject(th_target_cmd(&server, leftovers[i], "SET %s %llu", leftovers[i], ahead + i));
    char *fence = dlock__fence_key("adm:old");
    int deleted = 0;
    assert_int_equal(dlock_delete(c, "adm:old", 0, &deleted), DLOCK_OK);
    assert_int_equal(deleted, 6);
    assert_int_equal(keys_of("adm:old"), 0);
    redisReply *r = th_target_cmd(&server, fence, "GET %s", fence);
    assert_true(r && r->type == REDIS_REPLY_STRING);
    assert_true(strtoull(r->str, NULL, 10) == ahead + 1); /* the higher of the two per-name counters */
    freeReplyObject(r);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "adm:old", &l), DLOCK_OK);
    uint64_t t = 0;
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, &t), DLOCK_OK);
    assert_true(t == ahead + 2);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    /* deleting again keeps the counter where it is */
    assert_int_equal(dlock_delete(c, "adm:old", 0, &deleted), DLOCK_OK);
    assert_int_equal(deleted, 0);
    r = th_target_cmd(&server, fence, "GET %s", fence);
    assert_true(r && r->type == REDIS_REPLY_STRING && strtoull(r->str, NULL, 10) == ahead + 2);
    freeReplyObject(r);
    free(fence);
    dlock_lock_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(list_finds_every_kind_with_its_state),
        cmocka_unit_test(list_refuses_bad_patterns),
        cmocka_unit_test(semaphores_and_latches_are_read_by_name),
        cmocka_unit_test(delete_refuses_a_name_in_use),
        cmocka_unit_test(delete_with_force_takes_a_held_name),
        cmocka_unit_test(delete_of_an_abandoned_name_keeps_its_tokens_rising),
    };
    return th_target_run_suite(tests, &server);
}
