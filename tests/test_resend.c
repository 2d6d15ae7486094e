/*
 * Resend safety: every call whose reply is lost after the server ran it
 * (the connection breaks between request and reply) is resent by the
 * library on a new connection, and must then take effect exactly once and
 * give the answer the first run would have given. A real redis-server sits
 * behind a real loopback proxy (tests/proxy.c) that forwards the request,
 * waits for the server's reply and drops the connection instead of
 * passing it on.
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
#include <unistd.h>

#include "dlock.h"
#include "fence.h" /* dlock__fence_key */
#include "harness.h"
#include "proxy.h"

static th_redis server;
static th_proxy *proxy;

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
    th_redis_stop_all(); /* and any server a failed test left running */
    return 0;
}

/* A client that talks through the proxy. Making it leaves one pooled
 * connection behind (the scripts are loaded on it), so the next call
 * borrows a connection the library may resend on. */
static dlock_client *proxied_client(void)
{
    dlock_client *c = NULL;
    if (dlock_client_new(th_proxy_url(proxy), NULL, &c) != DLOCK_OK)
        fail_msg("dlock_client_new: %s", dlock_last_error());
    return c;
}

/* A client that talks to the server directly, for looking. */
static dlock_client *direct_client(void)
{
    dlock_client *c = NULL;
    if (dlock_client_new(server.url, NULL, &c) != DLOCK_OK) fail_msg("dlock_client_new: %s", dlock_last_error());
    return c;
}

/* Lose the reply of the next request naming object `name`. */
static void lose_next_reply(const char *name, int *lost_before)
{
    char tag[600];
    snprintf(tag, sizeof tag, "{%s}", name);
    *lost_before = th_proxy_lost(proxy);
    th_proxy_lose_next_reply(proxy, tag);
}

/* The reply was really lost: otherwise a test proves nothing. */
static void assert_one_reply_lost(int lost_before)
{
    assert_int_equal(th_proxy_lost(proxy), lost_before + 1);
}

static void semaphore_release_is_applied_once_when_its_reply_is_lost(void **state)
{
    (void)state;
    dlock_client *c = proxied_client();
    dlock_semaphore *s;
    long av = -1;
    int lost;
    assert_int_equal(dlock_semaphore_new(c, "rs-sem-rel", &s), DLOCK_OK);
    assert_int_equal(dlock_semaphore_set_permits(s, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_semaphore_acquire(s, 1, 0), DLOCK_OK);
    lose_next_reply("rs-sem-rel", &lost);
    assert_int_equal(dlock_semaphore_release(s, 1), DLOCK_OK);
    assert_one_reply_lost(lost);
    assert_int_equal(dlock_semaphore_available(s, &av), DLOCK_OK);
    assert_int_equal(av, 1);
    dlock_semaphore_free(s);
    dlock_client_free(c);
}

static void semaphore_acquire_is_applied_once_when_its_reply_is_lost(void **state)
{
    (void)state;
    dlock_client *c = proxied_client();
    dlock_semaphore *s;
    long av = -1;
    int lost;
    assert_int_equal(dlock_semaphore_new(c, "rs-sem-acq", &s), DLOCK_OK);
    assert_int_equal(dlock_semaphore_set_permits(s, 3, NULL), DLOCK_OK);
    lose_next_reply("rs-sem-acq", &lost);
    assert_int_equal(dlock_semaphore_acquire(s, 2, 0), DLOCK_OK);
    assert_one_reply_lost(lost);
    assert_int_equal(dlock_semaphore_available(s, &av), DLOCK_OK);
    assert_int_equal(av, 1);
    dlock_semaphore_free(s);
    dlock_client_free(c);
}

/* set_permits sets only once anyway; the caller must still hear that it
 * was the one that set them. */
static void semaphore_set_permits_reports_its_set_when_its_reply_is_lost(void **state)
{
    (void)state;
    dlock_client *c = proxied_client();
    dlock_semaphore *s;
    int set = -1, lost;
    assert_int_equal(dlock_semaphore_new(c, "rs-sem-set", &s), DLOCK_OK);
    lose_next_reply("rs-sem-set", &lost);
    assert_int_equal(dlock_semaphore_set_permits(s, 4, &set), DLOCK_OK);
    assert_one_reply_lost(lost);
    assert_int_equal(set, 1);
    dlock_semaphore_free(s);
    dlock_client_free(c);
}

static void latch_count_down_is_applied_once_when_its_reply_is_lost(void **state)
{
    (void)state;
    dlock_client *c = proxied_client();
    dlock_latch *l;
    long left = -1, count = -1;
    int lost;
    assert_int_equal(dlock_latch_new(c, "rs-latch", &l), DLOCK_OK);
    assert_int_equal(dlock_latch_set(l, 5, NULL), DLOCK_OK);
    lose_next_reply("rs-latch", &lost);
    assert_int_equal(dlock_latch_count_down(l, &left), DLOCK_OK);
    assert_one_reply_lost(lost);
    assert_int_equal(left, 4);
    assert_int_equal(dlock_latch_count(l, &count), DLOCK_OK);
    assert_int_equal(count, 4);
    dlock_latch_free(l);
    dlock_client_free(c);
}

/* An asynchronous count-down's outcome, waited for by the test's thread. */
typedef struct counted {
    atomic_int done;
    dlock_status st;
    long left;
} counted;

static void on_counted(dlock_latch *l, dlock_status st, long left, void *arg)
{
    (void)l;
    counted *k = arg;
    k->st = st;
    k->left = left;
    atomic_store(&k->done, 1);
}

/* The same, asynchronously: resent by the library's slow lane, it finds
 * the handle's operation record and counts once. */
static void async_latch_count_down_is_applied_once_when_its_reply_is_lost(void **state)
{
    (void)state;
    dlock_client *c = proxied_client();
    dlock_latch *l;
    long count = -1;
    int lost;
    assert_int_equal(dlock_latch_new(c, "rs-latch-async", &l), DLOCK_OK);
    assert_int_equal(dlock_latch_set(l, 5, NULL), DLOCK_OK);
    lose_next_reply("rs-latch-async", &lost);
    counted k = {0};
    assert_int_equal(dlock_latch_count_down_async(l, on_counted, &k), DLOCK_OK);
    for (int i = 0; i < 10000 && !atomic_load(&k.done); i++) usleep(1000);
    assert_int_equal(atomic_load(&k.done), 1);
    assert_one_reply_lost(lost);
    assert_int_equal(k.st, DLOCK_OK);
    assert_int_equal(k.left, 4);
    assert_int_equal(dlock_latch_count(l, &count), DLOCK_OK);
    assert_int_equal(count, 4);
    dlock_latch_free(l);
    dlock_client_free(c);
}

/* The resent acquire finds the hold its first run took: it must take it
 * as the caller's one hold (count 1), or the one release would leave the
 * lock held; its token is the newest handed out (the first run's token was
 * never seen, so it is replaced rather than reused: see acquire.lua). */
static void assert_acquire_holds_once(int fair)
{
    const char *name = fair ? "rs-fair-acq" : "rs-lock-acq";
    dlock_client *c = proxied_client(), *look = direct_client();
    dlock_lock *l;
    dlock_lock_info info;
    uint64_t token = 0;
    int lost;
    assert_int_equal((fair ? dlock_lock_new_fair : dlock_lock_new)(c, name, &l), DLOCK_OK);
    lose_next_reply(name, &lost);
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, &token), DLOCK_OK);
    assert_one_reply_lost(lost);
    assert_int_equal(dlock_lock_inspect(look, name, &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.hold_count, 1);
    assert_true(token > 0);
    assert_true(info.last_token == token); /* the caller's token is the newest */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(look, name, &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    dlock_lock_free(l);
    dlock_client_free(look);
    dlock_client_free(c);
}

static void acquire_after_a_lost_reply_holds_once(void **state)
{
    (void)state;
    assert_acquire_holds_once(0);
}

static void fair_acquire_after_a_lost_reply_holds_once(void **state)
{
    (void)state;
    assert_acquire_holds_once(1);
}

/* A re-entry whose reply is lost counts once; a release whose reply is
 * lost releases one hold, and the last one reports success, not a loss. */
static void lock_release_is_applied_once_when_its_reply_is_lost(void **state)
{
    (void)state;
    dlock_client *c = proxied_client(), *look = direct_client();
    dlock_lock *l;
    dlock_lock_info info;
    int lost;
    assert_int_equal(dlock_lock_new(c, "rs-lock-rel", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
    lose_next_reply("rs-lock-rel", &lost);
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
    assert_one_reply_lost(lost);
    assert_int_equal(dlock_lock_inspect(look, "rs-lock-rel", &info), DLOCK_OK);
    assert_int_equal(info.hold_count, 2);
    lose_next_reply("rs-lock-rel", &lost);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_one_reply_lost(lost);
    assert_int_equal(dlock_lock_inspect(look, "rs-lock-rel", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.hold_count, 1);
    lose_next_reply("rs-lock-rel", &lost);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_one_reply_lost(lost);
    assert_int_equal(dlock_lock_lost(l), 0);
    assert_int_equal(dlock_lock_inspect(look, "rs-lock-rel", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    dlock_lock_free(l);
    dlock_client_free(look);
    dlock_client_free(c);
}

/* A thread of the releaser's client waiting for the lock. */
struct handoff_waiter {
    dlock_lock *l;
    dlock_status status, released;
    uint64_t token;
    long long got_ms; /* monotonic, when its acquire returned */
};

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *handoff_waiter_main(void *arg)
{
    struct handoff_waiter *w = arg;
    w->status = dlock_lock_acquire(w->l, 10000, 10000, &w->token);
    w->got_ms = mono_ms();
    if (w->status == DLOCK_OK) w->released = dlock_lock_release(w->l);
    return NULL;
}

/* A release that hands the lock to a sleeping thread of its own client
 * (release.lua, fair_release.lua) and whose reply is lost: its resend
 * finds the lock the waiter's and answers "not yours", which the releaser
 * reads as done, and wakes the waiter, whose attempt finds itself the
 * owner with no hold it knows of. It must get the lock once, with the
 * newest token (the one the counter holds, not the lost hand-off's, which
 * it never saw), at once (not at its timed retry, 2.5 s later on a fair
 * lock), and give it back. */
static void hand_off_with_its_release_reply_lost(int fair)
{
    dlock_client *c = proxied_client(), *look = direct_client();
    dlock_lock *l;
    int lost;
    uint64_t mine;
    const char *name = fair ? "rs-fair-handoff" : "rs-handoff";
    assert_int_equal((fair ? dlock_lock_new_fair : dlock_lock_new)(c, name, &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, &mine), DLOCK_OK);
    struct handoff_waiter w = {l, DLOCK_ERR_SYS, DLOCK_ERR_SYS, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, handoff_waiter_main, &w);
    usleep(200000); /* asleep, registered */
    lose_next_reply(name, &lost);
    long long released = mono_ms();
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_one_reply_lost(lost);
    pthread_join(th, NULL);
    assert_int_equal(w.status, DLOCK_OK);
    assert_int_equal(w.released, DLOCK_OK);
    assert_true(w.token > mine);
    if (w.got_ms - released > 1000) fail_msg("the waiter got the lock %lld ms after the release", w.got_ms - released);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(look, name, &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    assert_int_equal((long long)info.last_token, (long long)w.token);
    dlock_lock_free(l);
    dlock_client_free(look);
    dlock_client_free(c);
}

static void a_hand_off_whose_release_reply_is_lost_leaves_the_waiter_one_hold(void **state)
{
    (void)state;
    hand_off_with_its_release_reply_lost(0);
}

static void a_fair_hand_off_whose_release_reply_is_lost_leaves_the_waiter_one_hold(void **state)
{
    (void)state;
    hand_off_with_its_release_reply_lost(1);
}

static void force_unlock_reports_the_deletion_when_its_reply_is_lost(void **state)
{
    (void)state;
    dlock_client *c = proxied_client();
    dlock_lock *l;
    int was_held = -1, lost;
    assert_int_equal(dlock_lock_new(c, "rs-force", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
    lose_next_reply("rs-force", &lost);
    assert_int_equal(dlock_lock_force_unlock(c, "rs-force", &was_held), DLOCK_OK);
    assert_one_reply_lost(lost);
    assert_int_equal(was_held, 1);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* The hold counts in the read-write lock's hash (docs/design/keys.md):
 * every "wcount" and "r:<owner>" field equals `want`. */
static void assert_rw_counts(const char *key, const char *want)
{
    redisReply *r = th_redis_cmd(&server, "HGETALL %s", key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    int counts = 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const char *f = r->element[i]->str;
        if (strcmp(f, "wcount") != 0 && strncmp(f, "r:", 2) != 0) continue;
        assert_string_equal(r->element[i + 1]->str, want);
        counts++;
    }
    assert_int_equal(counts, 1);
    freeReplyObject(r);
}

/* Both modes: the resent acquire holds once (count 1; a write hold's token
 * is the newest drawn), and the one release frees the lock for another
 * owner. */
static void rwlock_acquire_after_a_lost_reply_holds_once(void **state)
{
    (void)state;
    dlock_client *c = proxied_client(), *look = direct_client();
    dlock_rwlock *rw, *other;
    uint64_t token = 0, seen = 0;
    int lost;
    assert_int_equal(dlock_rwlock_new(c, "rs-rw", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(look, "rs-rw", &other), DLOCK_OK);
    for (int mode = DLOCK_READ; mode <= DLOCK_WRITE; mode++) {
        lose_next_reply("rs-rw", &lost);
        assert_int_equal(dlock_rwlock_acquire(rw, (dlock_rw_mode)mode, 0, 10000, &token), DLOCK_OK);
        assert_one_reply_lost(lost);
        assert_rw_counts("dlock:{rs-rw}:rw", "1");
        lose_next_reply("rs-rw", &lost);
        assert_int_equal(dlock_rwlock_release(rw, (dlock_rw_mode)mode), DLOCK_OK);
        assert_one_reply_lost(lost);
        assert_int_equal(dlock_rwlock_lost(rw, (dlock_rw_mode)mode), 0);
        /* Nothing left behind: another owner gets the write hold at once,
         * with a token above the one the resent write hold got. */
        assert_int_equal(dlock_rwlock_acquire(other, DLOCK_WRITE, 0, 10000, &seen), DLOCK_OK);
        if (mode == DLOCK_WRITE) assert_true(seen > token);
        assert_int_equal(dlock_rwlock_release(other, DLOCK_WRITE), DLOCK_OK);
    }
    /* A write hold's token is the last one drawn: the caller's. */
    lose_next_reply("rs-rw", &lost);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 10000, &token), DLOCK_OK);
    assert_one_reply_lost(lost);
    char *fence = dlock__fence_key("rs-rw");
    redisReply *r = th_redis_cmd(&server, "GET %s", fence);
    free(fence);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_true(strtoull(r->str, NULL, 10) == token);
    freeReplyObject(r);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    dlock_rwlock_free(other);
    dlock_rwlock_free(rw);
    dlock_client_free(look);
    dlock_client_free(c);
}

static void psem_release_reports_success_when_its_reply_is_lost(void **state)
{
    (void)state;
    dlock_client *c = proxied_client();
    dlock_psem *p;
    dlock_permit *pm;
    long av = -1;
    int lost;
    assert_int_equal(dlock_psem_new(c, "rs-psem", &p), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(p, 2, NULL), DLOCK_OK);
    lose_next_reply("rs-psem", &lost);
    assert_int_equal(dlock_psem_acquire(p, 0, 10000, &pm), DLOCK_OK);
    assert_one_reply_lost(lost);
    assert_int_equal(dlock_psem_available(p, &av), DLOCK_OK);
    assert_int_equal(av, 1);
    lose_next_reply("rs-psem", &lost);
    assert_int_equal(dlock_psem_release(p, pm), DLOCK_OK);
    assert_one_reply_lost(lost);
    assert_int_equal(dlock_psem_available(p, &av), DLOCK_OK);
    assert_int_equal(av, 2);
    dlock_psem_free(p);
    dlock_client_free(c);
}

/* RedLock over one master: the resent release must count as confirmed. */
static void redlock_release_reports_success_when_its_reply_is_lost(void **state)
{
    (void)state;
    dlock_client *c = proxied_client();
    dlock_redlock *rl;
    int lost;
    assert_int_equal(dlock_redlock_new(&c, 1, "rs-redlock", &rl), DLOCK_OK);
    lose_next_reply("rs-redlock", &lost);
    assert_int_equal(dlock_redlock_acquire(rl, 0, 10000, NULL, NULL), DLOCK_OK);
    assert_one_reply_lost(lost);
    lose_next_reply("rs-redlock", &lost);
    assert_int_equal(dlock_redlock_release(rl), DLOCK_OK);
    assert_one_reply_lost(lost);
    redisReply *r = th_redis_cmd(&server, "EXISTS dlock:{rs-redlock}");
    assert_non_null(r);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    dlock_redlock_free(rl);
    dlock_client_free(c);
}

/* IDs are not resent-proof by design (id_next.lua): a resend reserves a
 * second batch. What must hold is that no ID is handed out twice. */
static void id_batch_after_a_lost_reply_repeats_no_id(void **state)
{
    (void)state;
    dlock_client *c = proxied_client();
    uint64_t a[10], b[10];
    int lost;
    assert_int_equal(dlock_id_next(c, "rs-ids", a, 10), DLOCK_OK);
    lost = th_proxy_lost(proxy);
    th_proxy_lose_next_reply(proxy, "icr:rs-ids:");
    assert_int_equal(dlock_id_next(c, "rs-ids", b, 10), DLOCK_OK);
    assert_one_reply_lost(lost);
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 10; j++) assert_true((a[i] & 0xffffffffu) != (b[j] & 0xffffffffu));
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(semaphore_release_is_applied_once_when_its_reply_is_lost),
        cmocka_unit_test(semaphore_acquire_is_applied_once_when_its_reply_is_lost),
        cmocka_unit_test(semaphore_set_permits_reports_its_set_when_its_reply_is_lost),
        cmocka_unit_test(latch_count_down_is_applied_once_when_its_reply_is_lost),
        cmocka_unit_test(async_latch_count_down_is_applied_once_when_its_reply_is_lost),
        cmocka_unit_test(acquire_after_a_lost_reply_holds_once),
        cmocka_unit_test(fair_acquire_after_a_lost_reply_holds_once),
        cmocka_unit_test(lock_release_is_applied_once_when_its_reply_is_lost),
        cmocka_unit_test(a_hand_off_whose_release_reply_is_lost_leaves_the_waiter_one_hold),
        cmocka_unit_test(a_fair_hand_off_whose_release_reply_is_lost_leaves_the_waiter_one_hold),
        cmocka_unit_test(force_unlock_reports_the_deletion_when_its_reply_is_lost),
        cmocka_unit_test(rwlock_acquire_after_a_lost_reply_holds_once),
        cmocka_unit_test(psem_release_reports_success_when_its_reply_is_lost),
        cmocka_unit_test(redlock_release_reports_success_when_its_reply_is_lost),
        cmocka_unit_test(id_batch_after_a_lost_reply_repeats_no_id),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
