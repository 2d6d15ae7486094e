/*
 * The reentrant lock against real servers (one server, Sentinel or
 * Cluster: target.h): mutual exclusion across processes and threads,
 * reentrancy, owner-only release, expiry of a killed holder's lease,
 * fencing tokens that rise across processes and server restarts, waits
 * that time out, waiters woken by release rather than by polling (also
 * across a server restart), the NOSCRIPT fallback, inspect, force unlock
 * and name checks. The watchdog is test_watchdog.c's, the connection's
 * credentials and database test_connection.c's.
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
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "fence.h" /* dlock__fence_key */
#include "lock.h"  /* dlock__test_before_leave */
#include "proxy.h"
#include "target.h"
#include "th_lock.h"

static th_target server;

static dlock_client *new_client(long watchdog_lease)
{
    return th_lock_client_or_fail(server.url, watchdog_lease);
}
static long long redis_int(const char *cmd, const char *key)
{
    return th_lock_int(&server, NULL, cmd, key);
}

/* Atomically note one entry into a critical section: INCR the "inside"
 * counter, count a breach when someone else was already inside, keep the
 * highest value seen, and count the round. The caller DECRs on leaving. */
static const char *ENTER = "local n = redis.call('INCR', KEYS[1]) "
                           "if n > 1 then redis.call('INCR', KEYS[2]) end "
                           "if n > tonumber(redis.call('GET', KEYS[3]) or '0') then redis.call('SET', KEYS[3], n) end "
                           "redis.call('INCR', KEYS[4]) return n";

static int enter_critical(redisContext *rc, const char *tag)
{
    redisReply *r =
        redisCommand(rc, "EVAL %s 4 {%s}:inside {%s}:breach {%s}:max {%s}:rounds", ENTER, tag, tag, tag, tag);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r) freeReplyObject(r);
    return ok;
}

static int leave_critical(redisContext *rc, const char *tag)
{
    redisReply *r = redisCommand(rc, "DECR {%s}:inside", tag);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r) freeReplyObject(r);
    return ok;
}

/* After a run: rounds as expected, never two inside at once (and the
 * counter back at zero). */
static void assert_exclusion_held(const char *tag, long long rounds)
{
    char k[64];
    snprintf(k, sizeof k, "{%s}:rounds", tag);
    assert_int_equal(redis_int("GET %s", k), rounds);
    snprintf(k, sizeof k, "{%s}:breach", tag);
    assert_int_equal(redis_int("GET %s", k), -2); /* nil: no breach */
    snprintf(k, sizeof k, "{%s}:max", tag);
    assert_int_equal(redis_int("GET %s", k), 1);
    snprintf(k, sizeof k, "{%s}:inside", tag);
    assert_int_equal(redis_int("GET %s", k), 0);
}

static void wait_children(int n)
{
    for (int i = 0; i < n; i++) {
        int st;
        assert_true(wait(&st) > 0);
        assert_true(WIFEXITED(st));
        if (WEXITSTATUS(st) != 0) fail_msg("child exited with %d", WEXITSTATUS(st));
    }
}

/* ------------------------------------------------------------------------ */

/* Six processes take the lock 30 times each and, while holding it, enter a
 * critical section tracked in Redis. Nobody may ever find someone else
 * inside. If acquire.lua did not check the owner, or release deleted a
 * lock it does not own, two children would overlap within the 1 ms they
 * spend inside and "breach"/"max" would show it. */
static void lock_excludes_other_processes(void **state)
{
    (void)state;
    enum { CHILDREN = 6, ROUNDS = 30 };
    for (int i = 0; i < CHILDREN; i++) {
        if (fork() == 0) {
            dlock_client *c = th_lock_client(server.url, 0);
            dlock_lock *l;
            redisContext *rc = th_target_connect(&server, "{excl}");
            if (!c || !rc || dlock_lock_new(c, "excl", &l)) _exit(2);
            for (int r = 0; r < ROUNDS; r++) {
                if (dlock_lock_acquire(l, 20000, 10000, NULL) != DLOCK_OK) _exit(3);
                if (!enter_critical(rc, "excl")) _exit(4);
                usleep(1000);
                if (!leave_critical(rc, "excl")) _exit(5);
                /* Counted, not fatal, so that a broken lock shows up as
                 * the breach it causes rather than as a child's exit. */
                if (dlock_lock_release(l) != DLOCK_OK) freeReplyObject(redisCommand(rc, "INCR {excl}:relfail"));
            }
            redisFree(rc);
            dlock_lock_free(l);
            dlock_client_free(c);
            _exit(0);
        }
    }
    int status[CHILDREN];
    for (int i = 0; i < CHILDREN; i++) assert_true(wait(&status[i]) > 0);
    assert_exclusion_held("excl", CHILDREN * ROUNDS);
    assert_int_equal(redis_int("GET %s", "{excl}:relfail"), -2); /* every release succeeded */
    for (int i = 0; i < CHILDREN; i++) assert_true(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{excl}"), 0);
}

/* The holding thread may acquire again at once: the count goes to 2, the
 * token stays the same, one release leaves it held, the second frees it,
 * a third is refused. A lock that was not reentrant would time out on the
 * second acquire; one that did not count would be free after one release. */
static void reentry_counts_holds_and_keeps_the_token(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_client *other = new_client(0);
    dlock_lock *l = th_lock_new(c, "reent");
    dlock_lock *lo = th_lock_new(other, "reent");
    dlock_lock_info info;
    uint64_t t1 = 0, t2 = 0, t3 = 0;

    assert_int_equal(dlock_lock_acquire(l, 0, 5000, &t1), DLOCK_OK);
    assert_true(t1 > 0);
    long long t0 = th_now_ms();
    assert_int_equal(dlock_lock_acquire(l, 2000, 5000, &t2), DLOCK_OK); /* at once, no wait */
    assert_true(th_now_ms() - t0 < 1500); /* not the 2 s wait; room for a loaded machine */
    assert_true(t2 == t1);
    assert_int_equal(dlock_lock_inspect(c, "reent", &info), DLOCK_OK);
    assert_true(th_lock_held_by(&info, c));
    assert_int_equal(info.hold_count, 2);
    assert_true(info.last_token == t1);

    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(c, "reent", &info), DLOCK_OK);
    assert_true(th_lock_held_by(&info, c));
    assert_int_equal(info.hold_count, 1);
    assert_int_equal(dlock_lock_acquire(lo, 0, 5000, NULL), DLOCK_ERR_TIMEOUT); /* still held */

    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(c, "reent", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{reent}"), 0);
    assert_int_equal(dlock_lock_release(l), DLOCK_ERR_NOT_OWNER);

    /* Free for others now, with a new and greater token. */
    assert_int_equal(dlock_lock_acquire(lo, 0, 5000, &t3), DLOCK_OK);
    assert_true(t3 > t1);
    assert_int_equal(dlock_lock_release(lo), DLOCK_OK);
    dlock_lock_free(lo);
    dlock_lock_free(l);
    dlock_client_free(other);
    dlock_client_free(c);
}

struct intruder {
    dlock_lock *l;
    int try_once, try_wait, release, lost;
    long long waited;
    char err[256];
};

static void *intrude(void *arg)
{
    struct intruder *t = arg;
    t->try_once = dlock_lock_acquire(t->l, 0, 5000, NULL);
    long long t0 = th_now_ms();
    t->try_wait = dlock_lock_acquire(t->l, 200, 5000, NULL);
    t->waited = th_now_ms() - t0;
    t->release = dlock_lock_release(t->l);
    snprintf(t->err, sizeof t->err, "%s", dlock_last_error());
    t->lost = dlock_lock_lost(t->l);
    return NULL;
}

static void *take_and_give_back(void *arg)
{
    struct intruder *t = arg;
    t->try_once = dlock_lock_acquire(t->l, 0, 5000, NULL);
    t->release = t->try_once == DLOCK_OK ? dlock_lock_release(t->l) : -100;
    return NULL;
}

/* Holds belong to threads: another thread using the same handle and client
 * can neither acquire (DLOCK_ERR_TIMEOUT, tried once or waiting) nor
 * release (DLOCK_ERR_NOT_OWNER) the lock, and its attempts change nothing
 * in Redis. A lock owned per client instead of per thread would let the
 * second thread re-enter. */
static void other_thread_can_neither_take_nor_release_a_held_lock(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *l = th_lock_new(c, "threads");
    dlock_lock_info before, after;
    uint64_t tok;
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, &tok), DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(c, "threads", &before), DLOCK_OK);

    struct intruder t = {l, -100, -100, -100, -100, 0, ""};
    pthread_t th;
    pthread_create(&th, NULL, intrude, &t);
    pthread_join(th, NULL);
    assert_int_equal(t.try_once, DLOCK_ERR_TIMEOUT);
    assert_int_equal(t.try_wait, DLOCK_ERR_TIMEOUT);
    assert_true(t.waited >= 190);
    assert_int_equal(t.release, DLOCK_ERR_NOT_OWNER);
    assert_non_null(strstr(t.err, "does not hold"));
    assert_int_equal(t.lost, 0);

    assert_int_equal(dlock_lock_inspect(c, "threads", &after), DLOCK_OK);
    assert_int_equal(after.held, 1);
    assert_string_equal(after.holder, before.holder);
    assert_int_equal(after.hold_count, 1);
    assert_true(after.last_token == tok);
    assert_int_equal(dlock_lock_lost(l), 0);

    /* Once released, that other thread gets it. */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    struct intruder t2 = {l, -100, -100, -100, -100, 0, ""};
    pthread_create(&th, NULL, take_and_give_back, &t2);
    pthread_join(th, NULL);
    assert_int_equal(t2.try_once, DLOCK_OK);
    assert_int_equal(t2.release, DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* Two handles of one name in one thread are two owners (as two open file
 * descriptions are for flock): the second cannot take over the first's
 * hold, so releasing through one can never delete the lock under the
 * other. */
static void two_handles_of_one_name_do_not_share_a_hold(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *a, *b;
    assert_int_equal(dlock_lock_new(c, "two-handles", &a), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "two-handles", &b), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(a, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(a, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(b, 0, 10000, NULL), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_lock_release(b), DLOCK_ERR_NOT_OWNER);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "two-handles", &info), DLOCK_OK);
    assert_int_equal(info.hold_count, 2);
    assert_int_equal(dlock_lock_release(a), DLOCK_OK);
    assert_int_equal(dlock_lock_release(a), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(b, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(b), DLOCK_OK);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_free(c);
}

/* The server sleeps 600 ms with the acquire of a 100 ms lease in its
 * socket, then grants it at once: the client, counting from its send,
 * cannot trust that hold, so it gives it back and fails with
 * DLOCK_ERR_LOST instead of returning it. Another client then takes the
 * lock at once (the grant's own lease, begun on the server at the
 * resume, would otherwise keep it out). A library that returned the hold
 * would hand its caller a lock the server may have let go already. */
static void a_grant_answered_past_its_trusted_time_is_given_back(void **state)
{
    (void)state;
    dlock_options o = {0};
    o.command_timeout_ms = 3000;
    dlock_client *c = NULL, *other = new_client(0);
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    dlock_lock *l = th_lock_new(c, "late"), *l2 = th_lock_new(other, "late");
    /* Connected and routed first, on a lease a loaded machine keeps. */
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_pause_timer pt;
    assert_int_equal(th_target_pause_for(&server, "dlock:{late}", 600, &pt), 0);
    /* 100 ms, trusted 87: the answer is late even if this thread is
     * stalled up to 500 ms before the request goes out. */
    uint64_t tok = 0;
    dlock_status st = dlock_lock_acquire(l, 0, 100, &tok);
    char why[512];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    assert_int_equal(th_target_pause_join(&pt), 0);
    if (st != DLOCK_ERR_LOST) fail_msg("acquire answered after the pause: %d (%s)", st, why);
    assert_non_null(strstr(why, "given back"));
    assert_int_equal(tok, 0);
    assert_int_equal(dlock_lock_acquire(l2, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_ERR_NOT_OWNER);
    dlock_lock_free(l2);
    dlock_lock_free(l);
    dlock_client_free(other);
    dlock_client_free(c);
}

/* A holder whose explicit 500 ms lease ran out, and whose lock another
 * client then took, gets DLOCK_ERR_LOST from release, and the new owner's
 * lock stays intact: the seeds' mis-deletion problem. If release.lua
 * deleted without checking the owner, the new owner's lock would vanish. */
static void expired_holder_cannot_release_the_next_owners_lock(void **state)
{
    (void)state;
    dlock_client *c1 = new_client(0), *c2 = new_client(0);
    dlock_lock *l1 = th_lock_new(c1, "misdelete"), *l2 = th_lock_new(c2, "misdelete");
    dlock_lock_info info;
    uint64_t t1, t2, t3;
    assert_int_equal(dlock_lock_acquire(l1, 0, 500, &t1), DLOCK_OK);
    usleep(800000);
    assert_int_equal(dlock_lock_acquire(l2, 0, 5000, &t2), DLOCK_OK);
    assert_true(t2 > t1);

    assert_int_equal(dlock_lock_release(l1), DLOCK_ERR_LOST);
    assert_int_equal(dlock_lock_lost(l1), 1);
    assert_int_equal(dlock_lock_inspect(c1, "misdelete", &info), DLOCK_OK);
    assert_true(th_lock_held_by(&info, c2));
    assert_int_equal(info.hold_count, 1);
    assert_true(info.last_token == t2);
    assert_int_equal(dlock_lock_release(l1), DLOCK_ERR_NOT_OWNER); /* nothing left to release */

    assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
    /* A new acquisition clears the lost flag. */
    assert_int_equal(dlock_lock_acquire(l1, 0, 5000, &t3), DLOCK_OK);
    assert_int_equal(dlock_lock_lost(l1), 0);
    assert_true(t3 > t2);
    assert_int_equal(dlock_lock_release(l1), DLOCK_OK);
    dlock_lock_free(l2);
    dlock_lock_free(l1);
    dlock_client_free(c2);
    dlock_client_free(c1);
}

/* A child takes the lock with an explicit 1000 ms lease and is
 * SIGKILLed. Right after the kill the lock is still held (try once
 * fails); a waiting acquire gets it once the lease has run out: not
 * before (counted from the child's request, which no stall can make
 * early), not long after (1.9 s from the start of the wait), with a
 * greater token. A lock with no lease would never free; a waiter that
 * ignored the holder's TTL would sleep until the 2 s cap on one sleep
 * and miss the bound. The lease is 1000 ms so that a loaded machine
 * neither stalls the child's acquire past its trusted time nor the
 * parent's try past the lease. */
static void killed_holder_lock_frees_after_its_lease_not_before(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dlock_client *cc = th_lock_client(server.url, 0);
        dlock_lock *ll;
        uint64_t got[2]; /* token, and th_now_ms() before the request */
        got[1] = (uint64_t)th_now_ms();
        if (!cc || dlock_lock_new(cc, "killed", &ll) || dlock_lock_acquire(ll, 0, 1000, &got[0])) _exit(2);
        if (write(fds[1], got, sizeof got) != sizeof got) _exit(3);
        pause();
        _exit(0);
    }
    close(fds[1]); /* a child that fails before writing gives EOF, not a hang */
    uint64_t child[2] = {0, 0}, tok = 0;
    assert_int_equal(read(fds[0], child, sizeof child), sizeof child);
    uint64_t child_tok = child[0];
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    dlock_client *c = new_client(0);
    dlock_lock *l = th_lock_new(c, "killed");
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_ERR_TIMEOUT);
    long long t0 = th_now_ms();
    assert_int_equal(dlock_lock_acquire(l, 5000, 5000, &tok), DLOCK_OK);
    long long now = th_now_ms(), since_request = now - (long long)child[1], took = now - t0;
    if (since_request < 995 || took > 1900)
        fail_msg("acquired %lld ms after the child's request, %lld ms into the wait; lease was 1000 ms", since_request,
                 took);
    assert_true(tok > child_tok);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    close(fds[0]);
    dlock_lock_free(l);
    dlock_client_free(c);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The fence counter is set far ahead of the server clock (as after many
 * acquisitions in one microsecond, or a clock that stepped back): each
 * new token must still be the counter plus one, not the clock floor,
 * which now lies below it. Plain and fair locks. */
static void fencing_tokens_step_past_a_counter_ahead_of_the_clock(void **state)
{
    (void)state;
    const unsigned long long ahead = 4000000000000000ULL; /* year 2096 in microseconds */
    dlock_client *c = new_client(0);
    for (int fair = 0; fair < 2; fair++) {
        const char *name = fair ? "fence-ahead-fair" : "fence-ahead";
        dlock_lock *l;
        uint64_t t1 = 0, t2 = 0;
        assert_int_equal((fair ? dlock_lock_new_fair : dlock_lock_new)(c, name, &l), DLOCK_OK);
        char fence[96];
        snprintf(fence, sizeof fence, "dlock:{%s}:fence", name);
        freeReplyObject(th_target_cmd(&server, fence, "SET %s %llu", fence, ahead));
        assert_int_equal(dlock_lock_acquire(l, 0, 10000, &t1), DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        assert_int_equal(dlock_lock_acquire(l, 0, 10000, &t2), DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        assert_true(t1 == ahead + 1);
        assert_true(t2 == ahead + 2);
        dlock_lock_free(l);
    }
    dlock_client_free(c);
}

/* Five processes acquire 30 times each; while holding, each appends its
 * token to a Redis list, so the list is in acquisition order. It must be
 * strictly increasing, and the tokens the children were handed (sent
 * through a pipe) must be exactly the list's. A token taken from the
 * counter without the increment, or handed out before the lock was won,
 * would repeat or go backwards. */
static void fencing_tokens_rise_in_acquisition_order_across_processes(void **state)
{
    (void)state;
    enum { CHILDREN = 5, ROUNDS = 30, TOTAL = CHILDREN * ROUNDS };
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    for (int i = 0; i < CHILDREN; i++) {
        if (fork() == 0) {
            close(fds[0]);
            dlock_client *cc = th_lock_client(server.url, 0);
            dlock_lock *ll;
            redisContext *rc = th_target_connect(&server, "{fence}:order");
            if (!cc || !rc || dlock_lock_new(cc, "fence", &ll)) _exit(2);
            for (int r = 0; r < ROUNDS; r++) {
                uint64_t tok = 0;
                if (dlock_lock_acquire(ll, 20000, 10000, &tok) != DLOCK_OK) _exit(3);
                redisReply *rep = redisCommand(rc, "RPUSH {fence}:order %llu", (unsigned long long)tok);
                if (!rep) _exit(4);
                freeReplyObject(rep);
                if (dlock_lock_release(ll) != DLOCK_OK) _exit(5);
                if (write(fds[1], &tok, sizeof tok) != sizeof tok) _exit(6);
            }
            _exit(0);
        }
    }
    close(fds[1]);
    wait_children(CHILDREN);
    uint64_t piped[TOTAL + 1];
    size_t got = 0;
    ssize_t n;
    while ((n = read(fds[0], (char *)piped + got, sizeof piped - got)) > 0) got += (size_t)n;
    close(fds[0]);
    assert_int_equal(got, TOTAL * sizeof(uint64_t));

    redisReply *r = th_target_cmd(&server, "{fence}:order", "LRANGE {fence}:order 0 -1");
    assert_non_null(r);
    assert_int_equal(r->elements, TOTAL);
    uint64_t listed[TOTAL];
    for (size_t i = 0; i < TOTAL; i++) {
        listed[i] = strtoull(r->element[i]->str, NULL, 10);
        if (i > 0 && listed[i] <= listed[i - 1])
            fail_msg("token #%zu (%llu) not above #%zu (%llu)", i, (unsigned long long)listed[i], i - 1,
                     (unsigned long long)listed[i - 1]);
    }
    freeReplyObject(r);
    qsort(piped, TOTAL, sizeof *piped, cmp_u64);
    for (size_t i = 0; i < TOTAL; i++) assert_true(piped[i] == listed[i]);

    dlock_client *c = new_client(0);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "fence", &info), DLOCK_OK);
    assert_true(info.last_token == listed[TOTAL - 1]);
    dlock_client_free(c);
}

/* A restart without persistence wipes the fencing counter, yet the next
 * token is still greater than the last one before the restart (tokens are
 * floored at the server clock in microseconds). A token from the counter
 * alone would start again at 1 and let a stale holder's writes through.
 * The same client keeps working across the restart (reconnect, NOSCRIPT). */
static void fencing_tokens_rise_across_a_redis_restart(void **state)
{
    (void)state;
    th_target_require_single(&server); /* its own server, restarted or configured */
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    dlock_client *c = th_lock_client(r.url, 0);
    assert_non_null(c);
    dlock_lock *l = th_lock_new(c, "restart-fence");
    uint64_t t1 = 0, t2 = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dlock_lock_acquire(l, 0, 5000, &t1), DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    char *fence = dlock__fence_key("restart-fence");
    assert_int_equal(th_lock_int(&server, &r, "EXISTS %s", fence), 1);

    assert_int_equal(th_redis_restart(&r), 0);
    assert_int_equal(th_lock_int(&server, &r, "EXISTS %s", fence), 0); /* wiped */
    free(fence);

    assert_int_equal(dlock_lock_acquire(l, 0, 5000, &t2), DLOCK_OK);
    if (t2 <= t1) fail_msg("token after restart %llu <= before %llu", (unsigned long long)t2, (unsigned long long)t1);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "restart-fence", &info), DLOCK_OK);
    assert_true(info.last_token == t2);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_free(c);
    th_redis_stop(&r);
}

/* A wait of 300 ms on a lock held for 10 s gives DLOCK_ERR_TIMEOUT after
 * 300 ms (not before, and not after the holder's lease or a 2 s safety
 * net), and a try-once wait returns at once. */
static void wait_gives_up_after_its_wait_time(void **state)
{
    (void)state;
    dlock_client *c1 = new_client(0), *c2 = new_client(0);
    dlock_lock *l1 = th_lock_new(c1, "timeout"), *l2 = th_lock_new(c2, "timeout");
    assert_int_equal(dlock_lock_acquire(l1, 0, 10000, NULL), DLOCK_OK);

    long long t0 = th_now_ms();
    assert_int_equal(dlock_lock_acquire(l2, 300, 5000, NULL), DLOCK_ERR_TIMEOUT);
    long long took = th_now_ms() - t0;
    if (took < 299 || took >= 1500) fail_msg("a 300 ms wait took %lld ms", took);
    assert_non_null(strstr(dlock_last_error(), "held by another owner"));

    t0 = th_now_ms();
    assert_int_equal(dlock_lock_acquire(l2, 0, 5000, NULL), DLOCK_ERR_TIMEOUT);
    assert_true(th_now_ms() - t0 < 1000);                          /* no 2 s safety net; room for a loaded machine */
    assert_int_equal(dlock_lock_release(l2), DLOCK_ERR_NOT_OWNER); /* the timeout left no hold */
    assert_int_equal(dlock_lock_release(l1), DLOCK_OK);
    dlock_lock_free(l2);
    dlock_lock_free(l1);
    dlock_client_free(c2);
    dlock_client_free(c1);
}

struct waiter {
    dlock_lock *l;
    long wait_ms, lease_ms;
    int release_after; /* release in the thread once acquired */
    int status;
    uint64_t token;
    long long got_at;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    w->status = dlock_lock_acquire(w->l, w->wait_ms, w->lease_ms, &w->token);
    w->got_at = th_now_ms();
    if (w->status == DLOCK_OK && w->release_after) dlock_lock_release(w->l);
    return NULL;
}

/* Release `holder`, then wait for the thread `th` running `w` (`who` in
 * the message): it must have the lock within 1 s of the release, which
 * only the release's wake-up explains when the holder's lease is 30 s
 * (a waiter's sleeps are capped at 2 s). */
static void release_then_expect_it_within_a_second(dlock_lock *holder, pthread_t th, struct waiter *w, const char *who)
{
    long long released = th_now_ms();
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    pthread_join(th, NULL);
    assert_int_equal(w->status, DLOCK_OK);
    if (w->got_at - released >= 1000)
        fail_msg("the %s got the lock %lld ms after the release", who, w->got_at - released);
}

/* A waiter on a lock held with a 30 s lease is woken by the release,
 * five times in a row: its client counts one wake-up by a message each
 * time or more (not the library's fallbacks, a 200 ms poll while the
 * subscription is unconfirmed and a 2 s cap on any one sleep), and it has
 * the lock within 1 s of the release (the cap would wake it about 1.7 s
 * after it: the waiter starts 300 ms before the release). The count, not
 * a tight bound on the delay, tells a message from the 200 ms poll, so
 * that a loaded machine's stalls cannot fail the test. The waiter's
 * bounded 10 s wait only keeps a broken build from hanging. */
static void release_wakes_a_waiter_at_once(void **state)
{
    (void)state;
    enum { REPS = 5 };
    dlock_client *c1 = new_client(0), *c2 = new_client(0);
    dlock_lock *l1 = th_lock_new(c1, "wake"), *l2 = th_lock_new(c2, "wake");
    long long delay[REPS], wakeups[REPS];
    for (int i = 0; i < REPS; i++) {
        assert_int_equal(dlock_lock_acquire(l1, 0, 30000, NULL), DLOCK_OK);
        struct waiter w = {l2, 10000, 30000, 1, -100, 0, 0};
        pthread_t th;
        pthread_create(&th, NULL, waiter_main, &w);
        usleep(300000);
        /* Registered by its attempt once subscribed: asleep, however late
         * a loaded machine began its thread (a waiter still on its first
         * attempts would take the lock unwoken). */
        th_lock_wait_registered(&server, NULL, "wake", 1);
        long long released = th_now_ms();
        assert_int_equal(dlock_lock_release(l1), DLOCK_OK);
        pthread_join(th, NULL);
        assert_int_equal(w.status, DLOCK_OK);
        delay[i] = w.got_at - released;
        struct dlock_stats s;
        assert_int_equal(dlock_stats(c2, &s), DLOCK_OK);
        wakeups[i] = (long long)s.kind[DLOCK_STATS_LOCK].wakeups;
    }
    /* At least one wake-up a round: a late message of the last round's
     * release may wake a waiter once more. */
    for (int i = 0; i < REPS; i++)
        if (delay[i] >= 1000 || wakeups[i] < (i ? wakeups[i - 1] : 0) + 1)
            fail_msg("wake-up delays %lld %lld %lld %lld %lld ms, wake-ups counted %lld %lld %lld %lld %lld", delay[0],
                     delay[1], delay[2], delay[3], delay[4], wakeups[0], wakeups[1], wakeups[2], wakeups[3],
                     wakeups[4]);
    dlock_lock_free(l2);
    dlock_lock_free(l1);
    dlock_client_free(c2);
    dlock_client_free(c1);
}

/* A release whose next in line is a waiter of its own client wakes that
 * waiter itself: release.lua answers so instead of publishing, and the
 * hand-off skips the trip through the server's pub/sub and the
 * subscriber thread. The waiter must still get the lock at once (its
 * holder's lease is 30 s, so a missed wake-up shows), and the server must
 * have published nothing: with the message sent, every round counts one
 * PUBLISH (SPUBLISH on a cluster). On Sentinel the count is not checked:
 * each sentinel PUBLISHes its hello on the master every 2 s, and one
 * landing inside a round read as ours (a red clean-clone run). One server and
 * Cluster show the same client code. */
static void a_release_wakes_a_waiter_of_its_own_client_without_publishing(void **state)
{
    (void)state;
    enum { REPS = 5 };
    dlock_client *c = new_client(0);
    dlock_lock *l = th_lock_new(c, "ownwake");
    for (int i = 0; i < REPS; i++) {
        assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
        struct waiter w = {l, 10000, 30000, 1, -100, 0, 0};
        pthread_t th;
        pthread_create(&th, NULL, waiter_main, &w);
        usleep(100000); /* the waiter sleeps on its channel, registered */
        long long before = th_target_calls(&server, "publish") + th_target_calls(&server, "spublish");
        long long released = th_now_ms();
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        pthread_join(th, NULL);
        long long published = th_target_calls(&server, "publish") + th_target_calls(&server, "spublish") - before;
        assert_int_equal(w.status, DLOCK_OK);
        /* 1 s: the 2 s cap would wake it 1.9 s after the release. */
        if (w.got_at - released >= 1000) fail_msg("round %d: woken after %lld ms", i, w.got_at - released);
        /* the waiter's own release, with nobody waiting, publishes once */
        if (published > 1 && server.kind != TH_TARGET_SENTINEL)
            fail_msg("round %d: %lld messages published for one hand-off", i, published);
    }
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* The direct hand-off: a release whose next in line is a sleeping thread
 * of its own client takes the lock for that thread in the same script
 * (release.lua), and the thread wakes holding it. Each round, the script
 * calls between the release and the waiter's return are the release
 * alone (an attempt of the waiter's own would be a second), the waiter's
 * token is above the releaser's, and the hold is the waiter's: its owner,
 * count 1 and its own 7 s lease, not the releaser's 30 s. */
struct handed {
    dlock_lock *l;
    dlock_status status;
    uint64_t token;
    atomic_int got, go;   /* acquired; the main thread has counted */
    dlock_lock_info info; /* inspected while held */
    dlock_client *look;
};

static void *handed_main(void *arg)
{
    struct handed *w = arg;
    w->status = dlock_lock_acquire(w->l, 10000, 7000, &w->token);
    atomic_store(&w->got, 1);
    while (!atomic_load(&w->go)) usleep(1000);
    if (w->status == DLOCK_OK) {
        dlock_lock_inspect(w->look, dlock_lock_name(w->l), &w->info);
        dlock_lock_release(w->l);
    }
    return NULL;
}

static void a_release_hands_the_lock_to_a_sleeping_thread_of_its_own_client(void **state)
{
    (void)state;
    enum { REPS = 5 };
    dlock_client *c = new_client(0), *look = new_client(0);
    dlock_lock *l = th_lock_new(c, "handover");
    for (int i = 0; i < REPS; i++) {
        uint64_t mine;
        assert_int_equal(dlock_lock_acquire(l, 0, 30000, &mine), DLOCK_OK);
        struct handed w = {.l = l, .look = look};
        pthread_t th;
        pthread_create(&th, NULL, handed_main, &w);
        usleep(100000); /* the waiter sleeps on its channel, registered */
        long long before = th_target_calls(&server, "evalsha");
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        while (!atomic_load(&w.got)) usleep(1000);
        long long calls = th_target_calls(&server, "evalsha") - before;
        atomic_store(&w.go, 1);
        pthread_join(th, NULL);
        assert_int_equal(w.status, DLOCK_OK);
        if (calls != 1) fail_msg("round %d: %lld script calls from the release to the waiter's hold", i, calls);
        assert_true(w.token > mine);
        assert_int_equal(w.info.held, 1);
        assert_int_equal(w.info.hold_count, 1);
        assert_true(w.info.ttl_ms > 5000 && w.info.ttl_ms <= 7000);
        assert_int_equal((long long)w.info.last_token, (long long)w.token);
        dlock_lock_info now;
        assert_int_equal(dlock_lock_inspect(look, "handover", &now), DLOCK_OK);
        assert_int_equal(now.held, 0);
    }
    dlock_lock_free(l);
    dlock_client_free(look);
    dlock_client_free(c);
}

/* The same hand-off between processes (two clients: two processes to the
 * server): the waiting thread of the other client offered, when it
 * registered, to be handed the lock (acquire.lua), and the release takes
 * it for that thread in its script (release.lua), telling it so on its
 * process's channel. Each round: the lock names the waiter as owner the
 * moment the release returns (before the waiter even wakes), the script
 * calls from the release to the waiter's hold are the release alone, the
 * waiter's token is above the releaser's, and the hold is the waiter's,
 * with its own 7 s lease and count 1. (A hold of 100 ms is released in
 * full at once, never quick and sent back: QUICK_HOLD_NS in lock.c.) */
static void a_release_hands_the_lock_to_a_waiting_thread_of_another_process(void **state)
{
    (void)state;
    enum { REPS = 5 };
    dlock_client *c = new_client(0), *other = new_client(0), *look = new_client(0);
    dlock_lock *l = th_lock_new(c, "handover-x"), *theirs = th_lock_new(other, "handover-x");
    for (int i = 0; i < REPS; i++) {
        uint64_t mine;
        assert_int_equal(dlock_lock_acquire(l, 0, 30000, &mine), DLOCK_OK);
        struct handed w = {.l = theirs, .look = look};
        pthread_t th;
        pthread_create(&th, NULL, handed_main, &w);
        usleep(100000); /* the waiter sleeps on its channel, registered with its offer */
        th_lock_wait_registered(&server, NULL, "handover-x", 1); /* however late a loaded machine began it */
        long long before = th_target_calls(&server, "evalsha");
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        dlock_lock_info at_release;
        assert_int_equal(dlock_lock_inspect(look, "handover-x", &at_release), DLOCK_OK);
        while (!atomic_load(&w.got)) usleep(1000);
        long long calls = th_target_calls(&server, "evalsha") - before - 1; /* not the inspect */
        atomic_store(&w.go, 1);
        pthread_join(th, NULL);
        assert_int_equal(w.status, DLOCK_OK);
        if (!at_release.held) fail_msg("round %d: the lock was free after the release, not handed over", i);
        if (calls != 1) fail_msg("round %d: %lld script calls from the release to the waiter's hold", i, calls);
        assert_true(w.token > mine);
        assert_int_equal((long long)at_release.last_token, (long long)w.token);
        assert_int_equal(w.info.held, 1);
        assert_int_equal(w.info.hold_count, 1);
        assert_true(w.info.ttl_ms > 5000 && w.info.ttl_ms <= 7000);
        assert_int_equal((long long)w.info.last_token, (long long)w.token);
        dlock_lock_info now;
        assert_int_equal(dlock_lock_inspect(look, "handover-x", &now), DLOCK_OK);
        assert_int_equal(now.held, 0);
    }
    dlock_lock_free(theirs);
    dlock_lock_free(l);
    dlock_client_free(look);
    dlock_client_free(other);
    dlock_client_free(c);
}

/* One round of the case below on lock `name`: a waiter of another
 * process registers while the lock is held, the lock goes behind its
 * back (DEL), `releaser` takes it (after finding it busy once, when
 * `busy_first`) and releases it at once; the script calls of that
 * release, up to the waiter's hold. */
static long long short_release_calls(dlock_client *c, dlock_client *other, dlock_client *look, const char *name,
                                     int busy_first)
{
    char key[64];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    dlock_client *first = new_client(0);
    dlock_lock *holder = th_lock_new(first, name), *releaser = th_lock_new(c, name), *theirs = th_lock_new(other, name);
    assert_int_equal(dlock_lock_acquire(holder, 0, 30000, NULL), DLOCK_OK);
    struct handed w = {.l = theirs, .look = look};
    pthread_t th;
    pthread_create(&th, NULL, handed_main, &w);
    th_lock_wait_registered(&server, NULL, name, 1);
    if (busy_first) assert_int_equal(dlock_lock_acquire(releaser, 0, 30000, NULL), DLOCK_ERR_TIMEOUT);
    freeReplyObject(th_target_cmd(&server, key, "DEL %s", key));
    /* Counted from before the acquire, which is one call: the hold must
     * stay shorter than QUICK_HOLD_NS, and reading the counters of a
     * Cluster's masters takes longer. EVAL too: a node that has not seen
     * a script yet runs it by EVAL (its NOSCRIPT answer is no call). */
    long long before = th_target_calls(&server, "evalsha") + th_target_calls(&server, "eval");
    assert_int_equal(dlock_lock_acquire(releaser, 0, 30000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(releaser), DLOCK_OK);
    while (!atomic_load(&w.got)) usleep(1000);
    long long calls = th_target_calls(&server, "evalsha") + th_target_calls(&server, "eval") - before - 1;
    atomic_store(&w.go, 1);
    pthread_join(th, NULL);
    assert_int_equal(w.status, DLOCK_OK);
    assert_int_equal(dlock_lock_release(holder), DLOCK_ERR_LOST);
    dlock_lock_free(holder);
    dlock_lock_free(releaser);
    dlock_lock_free(theirs);
    dlock_client_free(first);
    return calls;
}

/* A short hold is released quick (release_quick.lua, two keys and three
 * arguments) unless the handle found the lock busy: it expects others to
 * wait too, and releases in full at once. Here another process waits
 * each time, so the quick release is sent back and the full one follows
 * (two calls up to the waiter's hold), and after a busy answer the full
 * one goes first (one call). Fails with one call in the first round when
 * releases are never quick, and with two in the second when finding the
 * lock busy leaves them quick. */
static void a_short_hold_is_released_quick_unless_its_handle_found_the_lock_busy(void **state)
{
    (void)state;
    dlock_client *c = new_client(0), *other = new_client(0), *look = new_client(0);
    /* A hold stretched past QUICK_HOLD_NS (the thread preempted on a
     * busy machine) goes in full: up to three tries for the quick one */
    long long quick = 0;
    const char *names[3] = {"quick-0", "quick-0b", "quick-0c"};
    for (int i = 0; i < 3 && quick != 2; i++) quick = short_release_calls(c, other, look, names[i], 0);
    long long full = short_release_calls(c, other, look, "quick-1", 1);
    dlock_client_free(c);
    dlock_client_free(other);
    dlock_client_free(look);
    if (quick != 2) fail_msg("%lld script calls from a quick release to the waiter's hold", quick);
    if (full != 1) fail_msg("%lld script calls from a release after a busy answer to the waiter's hold", full);
}

/* A release hands the lock only to a process that is there to take it:
 * a process that registered with an offer and then died (here, one made
 * up in the set and the offers, whose channel nobody listens on) is
 * skipped, since PUBLISH counts no listener (release.lua), and the next
 * waiting process gets the lock at once. Handed to the dead one, the lock
 * would be held for its 20 s lease (the live waiter's 10 s wait would
 * time out); woken in vain, the live one would sleep on until its timed
 * retry, near 2 s after the release (the holder's lease here is 30 s,
 * one sleep's cap 2 s). */
static void a_release_skips_a_waiting_process_that_is_gone(void **state)
{
    (void)state;
    dlock_client *c = new_client(0), *other = new_client(0);
    dlock_lock *l = th_lock_new(c, "gone-waiter"), *theirs = th_lock_new(other, "gone-waiter");
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
    struct waiter w = {theirs, 10000, 30000, 1, -100, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, waiter_main, &w);
    usleep(150000); /* registered, asleep */
    /* The dead process: first in line (counted as waiting for another
     * second, the live one for about five), with an offer. */
    redisReply *t = th_target_cmd(&server, "{gone-waiter}", "TIME");
    assert_non_null(t);
    long long now_ms = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    freeReplyObject(t);
    freeReplyObject(th_target_cmd(&server, "{gone-waiter}", "ZADD dlock:{gone-waiter}:w %lld deadbeef", now_ms + 1000));
    freeReplyObject(
        th_target_cmd(&server, "{gone-waiter}", "HSET dlock:{gone-waiter}:o deadbeef %s", "20000 0 1 1 deadbeef:1:1"));
    release_then_expect_it_within_a_second(l, th, &w, "live waiter");
    redisReply *r = th_target_cmd(&server, "{gone-waiter}", "ZSCORE dlock:{gone-waiter}:w deadbeef");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_NIL); /* dropped from the set */
    freeReplyObject(r);
    dlock_lock_free(theirs);
    dlock_lock_free(l);
    dlock_client_free(other);
    dlock_client_free(c);
}

/* A release by a client whose own threads wait wakes one of them even
 * when the server has the client in no set of waiting processes. That
 * happens in a burst: a newcomer that finds an older waiter of its
 * process in line sleeps without an attempt (bounded barging), so it
 * registers nothing, while the older waiter takes the lock in a way that
 * took the process out of the set (it was its only waiter when its
 * attempt was sent, or a release handed it the lock). The release that
 * ends that hold then found nobody registered, published where no waiter
 * listens, and the newcomers slept until their timed retry with the lock
 * free (seckill's one-user burst: 429s after 2 s). Here the set is
 * emptied under a sleeping waiter, the state that race leaves; the
 * holder's lease is 30 s and one sleep's cap 2 s, so only the release
 * explains a wake-up within a second of it. */
static void a_release_wakes_its_own_waiters_when_none_of_them_is_registered(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *l = th_lock_new(c, "unregistered");
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
    struct waiter w = {l, 10000, 30000, 1, -100, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, waiter_main, &w);
    usleep(150000); /* registered, asleep */
    freeReplyObject(th_target_cmd(&server, "{unregistered}", "DEL dlock:{unregistered}:w"));
    release_then_expect_it_within_a_second(l, th, &w, "waiter");
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* The newcomer that slip_in() starts, in the gap the hook opens. */
static struct waiter slipped;
static pthread_t slipped_thread;

static void slip_in(void)
{
    pthread_create(&slipped_thread, NULL, waiter_main, &slipped);
    usleep(200000); /* its attempt has registered the process; it sleeps in line */
}

/* A waiter that gives up as its process's last takes the process out of
 * the set of waiting processes. A newcomer of the process whose attempt
 * registers it after that count but before the leave (the library's test
 * hook runs it exactly there) would be taken out with it, and the next
 * release would wake nobody in the process: the newcomer would sleep to
 * its 2 s cap with the lock free. The leaver wakes it to register again,
 * so it gets the lock within 1 s of the release. */
static void a_newcomer_that_registers_as_the_last_waiter_leaves_is_woken_by_the_next_release(void **state)
{
    (void)state;
    dlock_client *hc = new_client(0), *c = new_client(0);
    dlock_lock *hl = th_lock_new(hc, "slipped-in"), *l = th_lock_new(c, "slipped-in");
    assert_int_equal(dlock_lock_acquire(hl, 0, 30000, NULL), DLOCK_OK);
    slipped = (struct waiter){l, 10000, 30000, 1, -100, 0, 0};
    dlock__test_before_leave = slip_in;
    assert_int_equal(dlock_lock_acquire(l, 300, 30000, NULL), DLOCK_ERR_TIMEOUT);
    dlock__test_before_leave = NULL;
    usleep(100000);
    release_then_expect_it_within_a_second(hl, slipped_thread, &slipped, "newcomer");
    dlock_lock_free(l);
    dlock_lock_free(hl);
    dlock_client_free(c);
    dlock_client_free(hc);
}

/* The set-up of the four tests below: a waiter, of a client cut off by
 * the proxy, registered with its offer (queued with it, on a `fair`
 * lock) and asleep on a lock held by a client connected directly; the
 * proxy cuts the waiter off, and the lock is released, which hands it to
 * the waiter (checked, and its token kept in `info`); the waiter hears
 * nothing until the proxy heals. */
struct cut_off {
    th_proxy *px;
    dlock_client *holder, *cut;
    dlock_lock *h, *l;
    struct waiter w;
    pthread_t th;
    dlock_lock_info info;
};

static void cut_off_handed(struct cut_off *c, const char *name, int fair, long wait_ms, long lease_ms)
{
    th_target_require_single(&server); /* the proxy fronts one server */
    c->px = th_proxy_start(&server.single);
    assert_non_null(c->px);
    c->holder = new_client(0);
    c->cut = th_lock_client(th_proxy_url(c->px), 0);
    assert_non_null(c->cut);
    if (fair) {
        assert_int_equal(dlock_lock_new_fair(c->holder, name, &c->h), DLOCK_OK);
        assert_int_equal(dlock_lock_new_fair(c->cut, name, &c->l), DLOCK_OK);
    } else {
        c->h = th_lock_new(c->holder, name);
        c->l = th_lock_new(c->cut, name);
    }
    assert_int_equal(dlock_lock_acquire(c->h, 0, 30000, NULL), DLOCK_OK);
    c->w = (struct waiter){c->l, wait_ms, lease_ms, 1, -100, 0, 0};
    pthread_create(&c->th, NULL, waiter_main, &c->w);
    usleep(150000); /* registered with its offer, asleep */
    th_proxy_partition(c->px, 1);
    assert_int_equal(dlock_lock_release(c->h), DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(c->holder, name, &c->info), DLOCK_OK);
    if (!c->info.held) fail_msg("the release did not hand the lock to the registered waiter");
}

/* Heal after `ms` and wait for the waiter to return. */
static void cut_off_heal(struct cut_off *c, long ms)
{
    usleep((useconds_t)ms * 1000);
    th_proxy_partition(c->px, 0);
    pthread_join(c->th, NULL);
}

static void cut_off_end(struct cut_off *c)
{
    dlock_lock_free(c->l);
    dlock_lock_free(c->h);
    dlock_client_free(c->cut);
    dlock_client_free(c->holder);
    th_proxy_stop(c->px);
}

/* A waiter that gives up just as another process hands it the lock: the
 * message does not reach it (its client is cut off by the proxy from
 * before the release until after its 400 ms wait ended), so it knows
 * nothing of the hand-off. Having taken its offer back, it finds the lock
 * in its own name and gives it back (give_back in src/lock.c), and the
 * lock is free well within the 20 s lease it was handed with: without
 * that, nobody could take it until the lease ran out. */
static void gave_up_as_it_was_handed_the_lock(const char *name, int fair)
{
    struct cut_off c;
    cut_off_handed(&c, name, fair, 400, 20000);
    cut_off_heal(&c, 500); /* the wait has ended; its leave was held by the partition */
    /* Either ending is right: the message may come first after the heal. */
    if (c.w.status == DLOCK_OK) {
        assert_int_equal(dlock_lock_acquire(c.h, 0, 30000, NULL), DLOCK_OK); /* released by the waiter's thread */
    } else {
        assert_int_equal(c.w.status, DLOCK_ERR_TIMEOUT);
        assert_int_equal(dlock_lock_acquire(c.h, 2000, 30000, NULL), DLOCK_OK);
    }
    assert_int_equal(dlock_lock_release(c.h), DLOCK_OK);
    cut_off_end(&c);
}

static void a_waiter_that_gave_up_gives_back_a_lock_handed_to_it(void **state)
{
    (void)state;
    gave_up_as_it_was_handed_the_lock("given-back", 0);
}

/* The same on a fair lock, where the head of the queue was handed the
 * lock by the release of another process (fair_release.lua): it takes
 * its offer back and gives the lock back in one script as it leaves the
 * queue (fair_leave.lua). */
static void a_fair_waiter_that_gave_up_gives_back_a_lock_handed_to_it(void **state)
{
    (void)state;
    gave_up_as_it_was_handed_the_lock("fair-given-back", 1);
}

/* A hand-off whose message comes late is not taken: the waiter's client
 * is cut off by the proxy from before the release until 600 ms after it,
 * and the lock was handed to it with its 400 ms lease, which has run out
 * by then at the server (and by the waiter's own clock). Taking the hand
 * would return a hold the server no longer keeps, under a token below
 * those of holders since (the torture's `clock` scenario found that). The
 * waiter must instead try again and be granted afresh: a token above the
 * handed one. */
static void late_hand_is_not_taken(const char *name, int fair)
{
    struct cut_off c;
    cut_off_handed(&c, name, fair, 10000, 400);
    cut_off_heal(&c, 600);
    assert_int_equal(c.w.status, DLOCK_OK);
    if (c.w.token <= c.info.last_token)
        fail_msg("the waiter took the late hand-off's token %llu (handed %llu)", (unsigned long long)c.w.token,
                 (unsigned long long)c.info.last_token);
    cut_off_end(&c);
}

static void a_hand_off_that_comes_too_late_is_not_taken(void **state)
{
    (void)state;
    late_hand_is_not_taken("late-hand", 0);
}

/* The same for the head of a fair lock's queue, handed the lock by the
 * release of another process. */
static void a_fair_hand_off_that_comes_too_late_is_not_taken(void **state)
{
    (void)state;
    late_hand_is_not_taken("fair-late-hand", 1);
}

/* A wait that the holder's lease running out ends: the waiter sleeps
 * until then and asks a few times more, not again and again while the
 * lease has under a millisecond left (PTTL 0, dlock__retry_after). It
 * made 3 to 47 attempts per wait before; now at most 6 (the first, the
 * retry once subscribed, and a few around the lease's last millisecond).
 * Eight waits, so that the old loop cannot pass by luck. */
static void a_wait_ended_by_a_lease_running_out_does_not_ask_in_a_loop(void **state)
{
    (void)state;
    dlock_client *ca = new_client(0), *cb = new_client(0);
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof name, "expiry%d", i);
        dlock_lock *la = th_lock_new(ca, name), *lb = th_lock_new(cb, name);
        assert_int_equal(dlock_lock_acquire(la, 0, 500, NULL), DLOCK_OK);
        long long before = th_target_calls(&server, "evalsha");
        assert_int_equal(dlock_lock_acquire(lb, 5000, 30000, NULL), DLOCK_OK);
        long long attempts = th_target_calls(&server, "evalsha") - before;
        if (attempts > 6) fail_msg("wait %d: %lld attempts", i, attempts);
        assert_int_equal(dlock_lock_release(lb), DLOCK_OK);
        (void)dlock_lock_release(la); /* lost: its lease ran out */
        dlock_lock_free(la);
        dlock_lock_free(lb);
    }
    dlock_client_free(ca);
    dlock_client_free(cb);
}

/* No barging within a process: a holder that releases and at once asks
 * again (the loop of every worker) must not take the lock ahead of a
 * thread of its process that waits for it. Two things see to that here:
 * the release hands the lock to the sleeping waiter in its script (the
 * direct hand-off), and the newcomer queues behind a waiter past the
 * bound (bounded barging). With both gone the releaser's new attempt
 * reaches Redis before the woken waiter's and wins nearly every time:
 * five rounds make that a near-certain failure. The bound alone, where no
 * hand-off can happen, is proven in test_replica. */
static void a_releaser_asking_again_queues_behind_an_old_waiter(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *l = th_lock_new(c, "barge");
    th_lock_no_barging(l, 5);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* Across processes: a release wakes one waiting process, the one that
 * has waited (retried) least recently, not every subscribed process.
 * Four child processes start waiting 150 ms apart on a lock the parent
 * holds; each, once it has the lock, appends its number to a list and
 * holds it 100 ms. After the parent's release they must come in the order
 * they began, and every hand-off must cost the server one acquire that
 * works (the EVALSHA count stays near releases + acquisitions). Woken
 * all at once, the others would retry in vain at each hand-off and the
 * newest could come first. */
static void a_release_wakes_the_process_that_waited_longest(void **state)
{
    (void)state;
    enum { CHILDREN = 4 };
    dlock_client *c = new_client(0);
    dlock_lock *l = th_lock_new(c, "herd");
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
    for (int i = 0; i < CHILDREN; i++) {
        if (fork() == 0) {
            dlock_client *cc = th_lock_client(server.url, 0);
            dlock_lock *cl;
            redisContext *rc = th_target_connect(&server, "{herd}");
            if (!cc || !rc || dlock_lock_new(cc, "herd", &cl)) _exit(2);
            if (dlock_lock_acquire(cl, 20000, 10000, NULL) != DLOCK_OK) _exit(3);
            freeReplyObject(redisCommand(rc, "RPUSH {herd}:order %d", i));
            usleep(100000);
            if (dlock_lock_release(cl) != DLOCK_OK) _exit(4);
            redisFree(rc);
            dlock_lock_free(cl);
            dlock_client_free(cc);
            _exit(0);
        }
        usleep(150000);
    }
    long long before = th_target_calls(&server, "evalsha");
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    wait_children(CHILDREN);
    long long calls = th_target_calls(&server, "evalsha") - before;
    redisReply *r = th_target_cmd(&server, "{herd}", "LRANGE {herd}:order 0 -1");
    assert_non_null(r);
    assert_int_equal(r->elements, CHILDREN);
    char order[16] = "", want[16] = "";
    for (int i = 0; i < CHILDREN; i++) {
        snprintf(order + strlen(order), sizeof order - strlen(order), "%s", r->element[i]->str);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%d", i);
    }
    freeReplyObject(r);
    if (strcmp(order, want) != 0) fail_msg("processes got the lock in the order %s, not %s", order, want);
    /* 1 parent release + 4 acquisitions + 4 releases, and slack for the
     * last child's first tries (on a slow machine they may come after the
     * count began) and a safety-net retry or two; a herd would add
     * 3 + 2 + 1 retries in vain to the 9. */
    if (calls > 13) fail_msg("%lld EVALSHA calls for %d hand-offs", calls, CHILDREN);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* A client that waited on a lock a moment ago is still subscribed to its
 * channel (for a second), and its next wait there gets in line before its
 * first attempt: that attempt registers its process, and when it finds the
 * lock busy the wait sleeps at once, so the server sees one attempt per
 * wait, not two (the steady state of a contended lock: wait.h,
 * dlock__wait_begin). The release must still wake it at once: the
 * holder's lease is 30 s and one sleep's cap is 2 s, so a wake-up missed
 * because the attempt came before the waiter was in line would show.
 * Three rounds, each within the second the subscription lingers. */
static void a_wait_on_a_lock_just_waited_on_attempts_once_and_is_still_woken(void **state)
{
    (void)state;
    enum { REPS = 3 };
    dlock_client *c1 = new_client(0), *c2 = new_client(0);
    dlock_lock *l1 = th_lock_new(c1, "inline"), *l2 = th_lock_new(c2, "inline");
    long long attempts[REPS + 1], delay[REPS + 1];
    for (int i = 0; i <= REPS; i++) { /* round 0 subscribes c2 */
        assert_int_equal(dlock_lock_acquire(l1, 0, 30000, NULL), DLOCK_OK);
        long long before = th_target_calls(&server, "evalsha");
        struct waiter w = {l2, 10000, 30000, 1, -100, 0, 0};
        pthread_t th;
        pthread_create(&th, NULL, waiter_main, &w);
        usleep(300000);
        attempts[i] = th_target_calls(&server, "evalsha") - before;
        long long released = th_now_ms();
        assert_int_equal(dlock_lock_release(l1), DLOCK_OK);
        pthread_join(th, NULL);
        assert_int_equal(w.status, DLOCK_OK);
        delay[i] = w.got_at - released;
    }
    for (int i = 1; i <= REPS; i++)
        if (attempts[i] != 1 || delay[i] >= 1000) /* the 2 s cap would wake it 1.7 s after */
            fail_msg("round %d: %lld attempts before the release (1 expected), woken %lld ms after it", i, attempts[i],
                     delay[i]);
    dlock_lock_free(l2);
    dlock_lock_free(l1);
    dlock_client_free(c2);
    dlock_client_free(c1);
}

/* How many subscribers `channel` has on the server of hash tag `tag`. */
static long long subscribers(const char *tag, const char *channel)
{
    redisReply *r = th_target_cmd(
        &server, tag, server.kind == TH_TARGET_CLUSTER ? "PUBSUB SHARDNUMSUB %s" : "PUBSUB NUMSUB %s", channel);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    long long n = r->element[1]->integer;
    freeReplyObject(r);
    return n;
}

/* A channel nobody waits on is unsubscribed about a second after its last
 * wait ended (subscriber.c), though the end of a wait does not wake the
 * subscriber thread: the thread looks again within a second while a
 * channel is in use, and must not forget one whose waiters left while it
 * slept. Three waits a quarter of a second apart (each in line on the
 * lingering subscription), then the subscription must be gone within 3 s
 * (it stays forever if the thread forgets) and not before 0.8 s. */
static void a_channel_is_unsubscribed_a_second_after_its_last_wait(void **state)
{
    (void)state;
    dlock_client *c1 = new_client(0), *c2 = new_client(0);
    dlock_lock *l1 = th_lock_new(c1, "linger"), *l2 = th_lock_new(c2, "linger");
    char channel[128];
    snprintf(channel, sizeof channel, "dlock:{linger}:ch:%s", dlock_client_id(c2));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dlock_lock_acquire(l1, 0, 30000, NULL), DLOCK_OK);
        struct waiter w = {l2, 10000, 30000, 1, -100, 0, 0};
        pthread_t th;
        pthread_create(&th, NULL, waiter_main, &w);
        usleep(150000);
        assert_int_equal(dlock_lock_release(l1), DLOCK_OK);
        pthread_join(th, NULL);
        assert_int_equal(w.status, DLOCK_OK);
        assert_int_equal(subscribers("{linger}", channel), 1);
        usleep(100000);
    }
    long long ended = th_now_ms(), gone_after = -1;
    while (th_now_ms() - ended < 3000) {
        if (subscribers("{linger}", channel) == 0) {
            gone_after = th_now_ms() - ended;
            break;
        }
        usleep(20000);
    }
    if (gone_after < 0) fail_msg("still subscribed 3 s after the last wait ended");
    if (gone_after < 800) fail_msg("unsubscribed %lld ms after the last wait: it should linger a second", gone_after);
    dlock_lock_free(l2);
    dlock_lock_free(l1);
    dlock_client_free(c2);
    dlock_client_free(c1);
}

/* A thread that sleeps on a lock while nobody reads the client's pub/sub
 * links reads them itself (subscriber.c, "Reading without this thread").
 * It must not keep them from the rest of the client: a second thread that
 * begins waiting on another lock meanwhile needs its channel subscribed
 * (the subscriber thread must get the links back for that), and, once the
 * first leaves, somebody must read on for the second. Both locks are held
 * with 30 s leases, so a waiter nobody wakes sleeps until its 2 s cap. */
static void a_thread_reading_its_own_wake_ups_leaves_the_other_waits_of_its_client_heard(void **state)
{
    (void)state;
    dlock_client *c1 = new_client(0), *c2 = new_client(0);
    dlock_lock *a1 = th_lock_new(c1, "self-a"), *b1 = th_lock_new(c1, "self-b");
    dlock_lock *a2 = th_lock_new(c2, "self-a"), *b2 = th_lock_new(c2, "self-b");
    char channel[128];
    snprintf(channel, sizeof channel, "dlock:{self-b}:ch:%s", dlock_client_id(c2));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dlock_lock_acquire(a1, 0, 30000, NULL), DLOCK_OK);
        assert_int_equal(dlock_lock_acquire(b1, 0, 30000, NULL), DLOCK_OK);
        struct waiter wa = {a2, 10000, 30000, 1, -100, 0, 0}, wb = {b2, 10000, 30000, 1, -100, 0, 0};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, waiter_main, &wa);
        usleep(200000);
        pthread_create(&tb, NULL, waiter_main, &wb);
        long long asked = th_now_ms(), heard = -1;
        while (th_now_ms() - asked < 1000) {
            if (subscribers("{self-b}", channel) == 1) {
                heard = th_now_ms() - asked;
                break;
            }
            usleep(10000);
        }
        if (heard < 0) fail_msg("round %d: the second wait's channel not subscribed after 1 s", i);
        usleep(100000);
        long long released = th_now_ms();
        assert_int_equal(dlock_lock_release(a1), DLOCK_OK);
        pthread_join(ta, NULL);
        assert_int_equal(wa.status, DLOCK_OK);
        long long da = wa.got_at - released;
        usleep(100000);
        released = th_now_ms();
        assert_int_equal(dlock_lock_release(b1), DLOCK_OK);
        pthread_join(tb, NULL);
        assert_int_equal(wb.status, DLOCK_OK);
        long long db = wb.got_at - released;
        /* 1 s: the 2 s cap would wake them 1.5 s or more after the releases. */
        if (da >= 1000 || db >= 1000) fail_msg("round %d: woken %lld and %lld ms after the releases", i, da, db);
    }
    dlock_lock_free(b2);
    dlock_lock_free(a2);
    dlock_lock_free(b1);
    dlock_lock_free(a1);
    dlock_client_free(c2);
    dlock_client_free(c1);
}

/* The release comes after the waiter's failed try but before its
 * subscription is active (the proxy holds the SUBSCRIBE back for 300 ms):
 * the message is published to nobody. The waiter must still get the lock
 * promptly, because it retries once its subscription is confirmed; a
 * waiter that slept right after subscribing would miss the message and
 * sleep until the 2 s cap (the holder's lease is 30 s). Three rounds,
 * each on a fresh name so that each needs a fresh subscription. */
static void release_between_a_failed_try_and_the_subscription_still_wakes_the_waiter(void **state)
{
    (void)state;
    th_target_require_single(&server); /* the proxy fronts one server */
    th_proxy *px = th_proxy_start(&server.single);
    assert_non_null(px);
    dlock_client *holder = new_client(0), *c = th_lock_client(th_proxy_url(px), 0);
    assert_non_null(c);
    for (int i = 0; i < 3; i++) {
        char name[32], channel[48];
        snprintf(name, sizeof name, "subwin-%d", i);
        snprintf(channel, sizeof channel, "{%s}:ch", name);
        dlock_lock *h = th_lock_new(holder, name), *l = th_lock_new(c, name);
        assert_int_equal(dlock_lock_acquire(h, 0, 30000, NULL), DLOCK_OK);
        th_proxy_delay_next(px, channel, 300);
        struct waiter w = {l, 10000, 30000, 1, -100, 0, 0};
        pthread_t th;
        pthread_create(&th, NULL, waiter_main, &w);
        usleep(100000); /* the first try has failed; the SUBSCRIBE is held */
        long long released = th_now_ms();
        assert_int_equal(dlock_lock_release(h), DLOCK_OK);
        pthread_join(th, NULL);
        assert_int_equal(w.status, DLOCK_OK);
        if (w.got_at - released >= 1000) fail_msg("round %d: woken %lld ms after the release", i, w.got_at - released);
        dlock_lock_free(l);
        dlock_lock_free(h);
    }
    dlock_client_free(c);
    dlock_client_free(holder);
    th_proxy_stop(px);
}

/* A thread waits for a lock held with a 20 s lease when the server is
 * restarted without persistence (the lock is gone with its data). The
 * subscriber's broken connection wakes the waiter, which reconnects,
 * gets NOSCRIPT, falls back to EVAL and takes the lock within 1 s of the
 * restart (typically ~20 ms). Neither the holder's 20 s TTL nor the 2 s
 * cap on one sleep (which would wake it about 1.6 s after the restart)
 * explains that. The old holder's release afterwards cannot delete the
 * new owner's lock. */
static void waiter_acquires_after_redis_restart(void **state)
{
    (void)state;
    th_target_require_single(&server); /* its own server, restarted or configured */
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    dlock_client *ca = th_lock_client(r.url, 0), *cb = th_lock_client(r.url, 0);
    assert_non_null(ca);
    assert_non_null(cb);
    dlock_lock *la = th_lock_new(ca, "restart-wait"), *lb = th_lock_new(cb, "restart-wait");
    uint64_t ta;
    assert_int_equal(dlock_lock_acquire(la, 0, 20000, &ta), DLOCK_OK);
    struct waiter w = {lb, 15000, 10000, 0, -100, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, waiter_main, &w);
    usleep(300000);
    assert_int_equal(th_redis_restart(&r), 0);
    long long restarted = th_now_ms();
    pthread_join(th, NULL);
    assert_int_equal(w.status, DLOCK_OK);
    long long took = w.got_at - restarted;
    if (took > 1000) fail_msg("waiter got the lock %lld ms after the restart", took);
    assert_true(w.token > ta);

    /* The old holder must learn that its lock is gone, and must not free
     * B's lock. Over a unix socket the dead connection fails the send, so
     * the release is known not to have run before and its resend is
     * judged on its own answer. */
    dlock_status st = dlock_lock_release(la);
    assert_int_equal(st, DLOCK_ERR_LOST);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(ca, "restart-wait", &info), DLOCK_OK);
    assert_true(th_lock_held_by(&info, cb));
    assert_true(info.last_token == w.token);
    dlock_lock_free(lb);
    dlock_lock_free(la);
    dlock_client_free(cb);
    dlock_client_free(ca);
    th_redis_stop(&r);
}

/* SCRIPT FLUSH empties the server's script cache between every pair of
 * calls: acquire, re-entry, release, inspect and the watchdog's renewal
 * all still work (EVALSHA gets NOSCRIPT and falls back to EVAL). Without
 * the fallback every call after a flush would fail with DLOCK_ERR_REDIS,
 * and the watchdog hold would be reported lost. */
static void script_flush_does_not_break_the_lock(void **state)
{
    (void)state;
    dlock_client *c = new_client(600);
    dlock_lock *l = th_lock_new(c, "flush");
    dlock_lock_info info;
#define FLUSH() freeReplyObject(th_target_cmd(&server, "dlock:{flush}", "SCRIPT FLUSH"))
    FLUSH();
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_OK);
    FLUSH();
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_OK);
    FLUSH();
    assert_int_equal(dlock_lock_inspect(c, "flush", &info), DLOCK_OK);
    assert_int_equal(info.hold_count, 2);
    FLUSH();
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    FLUSH();
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{flush}"), 0);

    FLUSH();
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    for (int i = 0; i < 12; i++) { /* two 600 ms leases */
        FLUSH();
        usleep(100000);
    }
    assert_int_equal(dlock_lock_lost(l), 0);
    assert_true(redis_int("PTTL %s", "dlock:{flush}") > 0);
    FLUSH();
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{flush}"), 0);
#undef FLUSH
    dlock_lock_free(l);
    dlock_client_free(c);
}

struct worker {
    dlock_lock *shared;
    dlock_client *c;
    int index;
    int failed; /* 0, or the step that failed */
};

/* One thread's loop: its own lock, then the shared one (re-entered), the
 * critical section, and release in reverse order. */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    enum { ROUNDS = 40 };
    char name[32];
    snprintf(name, sizeof name, "mt-own-%d", w->index);
    dlock_lock *own;
    redisContext *rc = th_target_connect(&server, "{mt}");
    if (!rc || dlock_lock_new(w->c, name, &own) != DLOCK_OK) {
        w->failed = 1;
        if (rc) redisFree(rc);
        return NULL;
    }
    for (int r = 0; r < ROUNDS && !w->failed; r++) {
        if (dlock_lock_acquire(own, 0, 10000, NULL) != DLOCK_OK) w->failed = 2;
        else if (dlock_lock_acquire(w->shared, 20000, 10000, NULL) != DLOCK_OK) w->failed = 3;
        else if (dlock_lock_acquire(w->shared, 0, 10000, NULL) != DLOCK_OK) w->failed = 4;
        else if (!enter_critical(rc, "mt")) w->failed = 5;
        else {
            usleep(200);
            if (!leave_critical(rc, "mt")) w->failed = 6;
            else if (dlock_lock_release(w->shared) != DLOCK_OK) w->failed = 7;
            else if (dlock_lock_release(w->shared) != DLOCK_OK) w->failed = 8;
            else if (dlock_lock_release(own) != DLOCK_OK) w->failed = 9;
        }
    }
    dlock_lock_free(own);
    redisFree(rc);
    return NULL;
}

/* Eight threads share one client and one handle of a lock (plus a lock of
 * their own each) and hammer them: never two inside the shared critical
 * section, every own-lock acquire succeeds at once (no interference
 * between names), and everything is free at the end. Confused per-thread
 * bookkeeping in the shared handle, or a connection used by two threads
 * at once, would break exclusion or fail calls. */
static void threads_sharing_a_client_exclude_each_other(void **state)
{
    (void)state;
    enum { THREADS = 8 };
    dlock_client *c = new_client(0);
    dlock_lock *shared = th_lock_new(c, "mt-shared");
    struct worker w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){shared, c, i, 0};
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++)
        if (w[i].failed) fail_msg("thread %d failed at step %d", i, w[i].failed);
    assert_exclusion_held("mt", THREADS * 40);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{mt-shared}"), 0);
    assert_int_equal(th_target_keys(&server, "dlock:{mt-own-*}", NULL, 0), 0);
    dlock_lock_free(shared);
    dlock_client_free(c);
}

/* inspect reports the holder ("<client id>:<thread>"), the hold count, the
 * remaining lease and the last token; a free lock shows held 0, ttl -1 and
 * keeps its last token; a never-used name has token 0. inspect changes
 * nothing (the TTL keeps running down). */
static void inspect_reports_holder_count_ttl_and_token(void **state)
{
    (void)state;
    dlock_client *c = new_client(0), *admin = new_client(0);
    dlock_lock *l = th_lock_new(c, "inspect");
    dlock_lock_info info;
    uint64_t tok;

    assert_int_equal(dlock_lock_inspect(admin, "inspect-never-used", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    assert_string_equal(info.holder, "");
    assert_int_equal(info.hold_count, 0);
    assert_int_equal(info.ttl_ms, -1);
    assert_true(info.last_token == 0);

    assert_int_equal(dlock_lock_acquire(l, 0, 5000, &tok), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(admin, "inspect", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_true(th_lock_held_by(&info, c));
    assert_int_equal(info.hold_count, 3);
    assert_true(info.ttl_ms > 4000 && info.ttl_ms <= 5000);
    assert_true(info.last_token == tok);
    usleep(200000);
    long before = info.ttl_ms;
    assert_int_equal(dlock_lock_inspect(admin, "inspect", &info), DLOCK_OK);
    assert_true(info.ttl_ms < before && info.ttl_ms > 0);

    for (int i = 0; i < 3; i++) assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(admin, "inspect", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    assert_string_equal(info.holder, "");
    assert_int_equal(info.hold_count, 0);
    assert_int_equal(info.ttl_ms, -1);
    assert_true(info.last_token == tok);
    dlock_lock_free(l);
    dlock_client_free(admin);
    dlock_client_free(c);
}

/* force_unlock deletes a held lock (was_held 1, then 0 on a free lock);
 * the holder's watchdog reports it lost with its token; and a waiter on a
 * lock held for 30 s is woken by the force unlock at once, not by the
 * lease. The old holder's release then reports DLOCK_ERR_LOST and leaves
 * the waiter's new hold alone. */
static void force_unlock_deletes_reports_loss_and_wakes_waiters(void **state)
{
    (void)state;
    dlock_client *c = new_client(600), *admin = new_client(0), *cw = new_client(0);
    dlock_lock *l = th_lock_new(c, "force");
    th_lost rec = {0, 0};
    dlock_lock_on_lost(l, th_lost_record, &rec);
    uint64_t tok;
    int was = -1;

    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, &tok), DLOCK_OK);
    assert_int_equal(dlock_lock_force_unlock(admin, "force", &was), DLOCK_OK);
    assert_int_equal(was, 1);
    assert_int_equal(dlock_lock_force_unlock(admin, "force", &was), DLOCK_OK);
    assert_int_equal(was, 0);
    assert_int_equal(dlock_lock_force_unlock(admin, "force", NULL), DLOCK_OK);
    long long took = th_lock_wait_lost(l, 3000);
    if (took < 0 || took > 1200) fail_msg("force unlock noticed after %lld ms (lease 600)", took);
    usleep(20000);
    assert_int_equal(atomic_load(&rec.calls), 1);
    assert_true(atomic_load(&rec.token) == tok);
    assert_int_equal(dlock_lock_release(l), DLOCK_ERR_LOST);

    /* A waiter is woken by the force unlock. */
    uint64_t tok2;
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, &tok2), DLOCK_OK);
    assert_true(tok2 > tok);
    dlock_lock *lw = th_lock_new(cw, "force");
    struct waiter w = {lw, 10000, 5000, 0, -100, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, waiter_main, &w);
    usleep(300000);
    long long forced = th_now_ms();
    assert_int_equal(dlock_lock_force_unlock(admin, "force", &was), DLOCK_OK);
    pthread_join(th, NULL);
    assert_int_equal(was, 1);
    assert_int_equal(w.status, DLOCK_OK);
    /* 1 s: the 2 s cap would wake it 1.7 s after the force unlock. */
    if (w.got_at - forced >= 1000) fail_msg("waiter woke %lld ms after force unlock", w.got_at - forced);
    assert_true(w.token > tok2);
    assert_int_equal(dlock_lock_release(l), DLOCK_ERR_LOST);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(admin, "force", &info), DLOCK_OK);
    assert_true(th_lock_held_by(&info, cw));
    assert_int_equal(dlock_lock_force_unlock(admin, "force", &was), DLOCK_OK);
    assert_int_equal(was, 1);
    dlock_lock_free(lw);
    dlock_lock_free(l);
    dlock_client_free(cw);
    dlock_client_free(admin);
    dlock_client_free(c);
}

/* Names must be 1..512 bytes without '{', '}' or control characters (the
 * braces would break the {NAME} hash tag, so one lock's keys could land in
 * two Cluster slots or collide with another name's); bad names, NULLs and
 * bad wait/lease arguments are DLOCK_ERR_INVALID and write nothing. */
static void bad_names_and_arguments_are_refused(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    char n513[514], n512[513];
    memset(n513, 'n', 513);
    n513[513] = '\0';
    memset(n512, 'm', 512);
    n512[512] = '\0';
    const char *bad[] = {"", "a{b", "a}b", "{x}", "a\nb", "\x01", "tab\there", "del\x7f", n513, NULL};
    long long keys_before = redis_int("DBSIZE", NULL);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dlock_lock *l = (dlock_lock *)&l;
        dlock_lock_info info;
        int was = -1;
        dlock_status st = dlock_lock_new(c, bad[i], &l);
        if (st != DLOCK_ERR_INVALID) fail_msg("name #%zu accepted: status %d", i, st);
        assert_null(l);
        assert_true(dlock_last_error()[0] != '\0');
        assert_int_equal(dlock_lock_new_fair(c, bad[i], &l), DLOCK_ERR_INVALID);
        assert_int_equal(dlock_lock_inspect(c, bad[i], &info), DLOCK_ERR_INVALID);
        assert_int_equal(dlock_lock_force_unlock(c, bad[i], &was), DLOCK_ERR_INVALID);
        assert_int_equal(was, 0);
    }
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(c, n513, &l), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_last_error(), "512"));
    assert_int_equal(dlock_lock_new(NULL, "x", &l), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_new(c, "x", NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_inspect(NULL, "x", &(dlock_lock_info){0}), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_inspect(c, "x", NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_force_unlock(NULL, "x", NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_acquire(NULL, 0, 1000, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_release(NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_lost(NULL), 0);

    l = th_lock_new(c, "args");
    assert_int_equal(dlock_lock_acquire(l, -2, 1000, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_acquire(l, 0, -1, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_acquire(l, 0, 1, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_acquire(l, 0, 2, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_release(l), DLOCK_ERR_NOT_OWNER);
    dlock_lock_free(l);
    assert_int_equal(redis_int("DBSIZE", NULL), keys_before); /* nothing written */

    /* The longest name, and odd but legal ones, work end to end. */
    const char *good[] = {n512, "with space", "caf\xc3\xa9:*?[]", "x"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        l = th_lock_new(c, good[i]);
        assert_string_equal(dlock_lock_name(l), good[i]);
        assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_OK);
        char key[600];
        snprintf(key, sizeof key, "dlock:{%s}", good[i]);
        redisReply *r = th_target_cmd(&server, key, "EXISTS %b", key, strlen(key));
        assert_int_equal(r->integer, 1);
        freeReplyObject(r);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        dlock_lock_free(l);
    }
    dlock_client_free(c);
}

/* Versions up to 0.2.0 published a hand-off as "=<token> <sent> <wait id>
 * <owner>" and took the grant back when PUBLISH counted no listener, which
 * a replica's listener does not disprove (release.lua). During an upgrade
 * such a release may still run beside new waiters, so they take that
 * form only as a wake-up: here a message in it, naming the waiting thread
 * exactly (its offer, read from the server), arrives while the lock is
 * still held; the waiter must not return with it, and gets the lock on
 * the real release. One server: the message is sent with PUBLISH. */
static void a_hand_off_in_the_old_form_only_wakes_the_waiter(void **state)
{
    (void)state;
    if (server.kind != TH_TARGET_SINGLE) skip();
    dlock_client *hc = new_client(0), *wc = new_client(0);
    dlock_lock *holder = th_lock_new(hc, "old-form"), *waiting = th_lock_new(wc, "old-form");
    assert_int_equal(dlock_lock_acquire(holder, 0, 10000, NULL), DLOCK_OK);
    th_waiter w;
    th_waiter_start(&w, waiting, 5000, 10000);
    usleep(300000); /* subscribed, registered with its offer, asleep */
    redisContext *rc = th_redis_connect(&server.single);
    assert_non_null(rc);
    redisReply *r = redisCommand(rc, "HGET dlock:{old-form}:o %s", dlock_client_id(wc));
    assert_non_null(r);
    if (r->type != REDIS_REPLY_STRING) fail_msg("the waiter made no offer");
    char lease[24], floor[24], sent[24], wait[24], owner[128];
    assert_int_equal(sscanf(r->str, "%23s %23s %23s %23s %127s", lease, floor, sent, wait, owner), 5);
    freeReplyObject(r);
    char message[256];
    snprintf(message, sizeof message, "=9007199254740000 %s %s %s", sent, wait, owner);
    r = redisCommand(rc, "PUBLISH dlock:{old-form}:ch:%s %s", dlock_client_id(wc), message);
    assert_non_null(r);
    assert_int_equal(r->integer, 1); /* the waiter's process heard it */
    freeReplyObject(r);
    redisFree(rc);
    usleep(300000);
    if (th_waiter_returned(&w))
        fail_msg("the waiter returned (%s) on the old-form message, the lock still held", dlock_strerror(w.st));
    long long released = th_now_ms();
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    th_waiter_wait(&w);
    th_waiter_finish(&w);
    assert_int_equal(w.st, DLOCK_OK);
    assert_int_equal(w.released, DLOCK_OK);
    if (w.at - released >= 1000) fail_msg("the waiter got the lock %lld ms after the release", w.at - released);
    dlock_lock_free(waiting);
    dlock_lock_free(holder);
    dlock_client_free(wc);
    dlock_client_free(hc);
}

/* The few milliseconds a release keeps the free lock for the process it
 * woke (release.lua's dlock:{NAME}:r): a first attempt of another
 * process is answered busy, the woken process's is granted and ends the
 * reservation, and a lock with neither a holder nor a reservation is
 * granted at once. acquire.lua finds the free lock with one EXISTS over
 * the lock and the reservation; counting the lock alone would
 * let the newcomer take it here. The reservation is made by hand, 5 s
 * long, so that nothing but the script decides. */
static void a_lock_kept_for_a_woken_process_is_busy_to_others_and_free_to_it(void **state)
{
    (void)state;
    dlock_client *ca = new_client(0), *cb = new_client(0);
    dlock_lock *a = th_lock_new(ca, "kept"), *b = th_lock_new(cb, "kept");
    freeReplyObject(th_target_cmd(&server, "{kept}", "SET dlock:{kept}:r %s PX 5000", dlock_client_id(cb)));
    assert_int_equal(dlock_lock_acquire(a, 0, 10000, NULL), DLOCK_ERR_TIMEOUT);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{kept}"), 0);
    assert_int_equal(dlock_lock_acquire(b, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(redis_int("EXISTS %s", "dlock:{kept}:r"), 0);
    assert_int_equal(dlock_lock_release(b), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(a, 0, 10000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(a), DLOCK_OK);
    dlock_lock_free(a);
    dlock_lock_free(b);
    dlock_client_free(ca);
    dlock_client_free(cb);
}

/* One round of the case below: a third client's hold begins with a waiter
 * of another process registered (`registered_first`) or before it
 * registers; the time from its release to the waiter's grant. */
static long long waiter_granted_after_release(int registered_first)
{
    const char *name = registered_first ? "woken-grant" : "woken-wait";
    char key[64];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    dlock_client *ca = new_client(0), *cw = new_client(0), *cn = new_client(0);
    dlock_lock *a = th_lock_new(ca, name), *w = th_lock_new(cw, name), *n = th_lock_new(cn, name);
    dlock_lock *first = registered_first ? a : n;
    assert_int_equal(dlock_lock_acquire(first, 0, 30000, NULL), DLOCK_OK);
    th_waiter waiter;
    th_waiter_start(&waiter, w, 20000, 10000);
    th_lock_wait_registered(&server, NULL, name, 1);
    if (registered_first) {
        /* the lock goes without a release (an operator's DEL, a lease run
         * out): nobody is woken, and a newcomer's first attempt takes it */
        freeReplyObject(th_target_cmd(&server, key, "DEL %s", key));
        assert_int_equal(dlock_lock_acquire(n, 0, 30000, NULL), DLOCK_OK);
    }
    long long released = th_now_ms();
    assert_int_equal(dlock_lock_release(n), DLOCK_OK);
    long long after = th_waiter_granted_after(&waiter, released);
    dlock_lock_free(a);
    dlock_lock_free(w);
    dlock_lock_free(n);
    dlock_client_free(ca);
    dlock_client_free(cw);
    dlock_client_free(cn);
    return after;
}

/* The third round: two waiters of other processes registered, the
 * first handed the lock by the holder's release (its offer, release.lua);
 * the time from its release to the second's grant. */
static long long second_waiter_granted_after_a_hand_off(void)
{
    const char *name = "woken-hand", *key = "dlock:{woken-hand}";
    int master = th_target_master_port(&server, key); /* a failover would show in the failure */
    dlock_client *ca = new_client(0), *c1 = new_client(0), *c2 = new_client(0);
    dlock_lock *a = th_lock_new(ca, name), *w1 = th_lock_new(c1, name), *w2 = th_lock_new(c2, name);
    assert_int_equal(dlock_lock_acquire(a, 0, 30000, NULL), DLOCK_OK);
    th_waiter first, second;
    th_waiter_start(&first, w1, 20000, 10000);
    th_lock_wait_registered(&server, NULL, name, 1);
    th_waiter_start(&second, w2, 20000, 10000);
    th_lock_wait_registered(&server, NULL, name, 2);
    assert_int_equal(dlock_lock_release(a), DLOCK_OK);
    th_waiter_wait(&first);
    assert_int_equal(first.st, DLOCK_OK);
    if (th_waiter_returned(&second))
        fail_msg("the second waiter returned while the first held the lock: %s, token %llu (first's %llu); "
                 "the master serving it: port %d, %d when the round began",
                 dlock_strerror(second.st), (unsigned long long)second.token, (unsigned long long)first.token,
                 th_target_master_port(&server, key), master);
    long long released = th_now_ms();
    th_waiter_finish(&first);
    assert_int_equal(first.released, DLOCK_OK);
    long long after = th_waiter_granted_after(&second, released);
    dlock_lock_free(a);
    dlock_lock_free(w1);
    dlock_lock_free(w2);
    dlock_client_free(ca);
    dlock_client_free(c1);
    dlock_client_free(c2);
    return after;
}

/* However a process came to be registered while a lock is held, the
 * hold's release wakes it at once: registered during the hold; before
 * it began (the lock went behind the sleeping waiter's back, by an
 * operator's DEL or a lease run out, and a newcomer's first attempt took
 * it); and second in line when the first was handed the lock. A release
 * that misses it leaves it to its timed retry (2 s). A variant tried
 * letting a release read the waiting set only when the lock was marked
 * as having one; with the mark left out of each of its three places in
 * turn, the round it guarded failed (the waiter granted about 2 s after
 * the release). That change bought no server time and was not kept; the
 * case stays, for any later change of how a release finds its waiters. */
static void a_release_wakes_processes_registered_before_or_during_its_hold(void **state)
{
    (void)state;
    for (int registered_first = 0; registered_first <= 1; registered_first++) {
        long long after = waiter_granted_after_release(registered_first);
        printf("# registered %s the hold: waiter granted %lld ms after the release\n",
               registered_first ? "before" : "during", after);
        assert_true(after < 1000);
    }
    long long after = second_waiter_granted_after_a_hand_off();
    printf("# after a hand-off: the second waiter granted %lld ms after the release\n", after);
    assert_true(after < 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lock_excludes_other_processes),
        cmocka_unit_test(reentry_counts_holds_and_keeps_the_token),
        cmocka_unit_test(other_thread_can_neither_take_nor_release_a_held_lock),
        cmocka_unit_test(two_handles_of_one_name_do_not_share_a_hold),
        cmocka_unit_test(expired_holder_cannot_release_the_next_owners_lock),
        cmocka_unit_test(a_grant_answered_past_its_trusted_time_is_given_back),
        cmocka_unit_test(killed_holder_lock_frees_after_its_lease_not_before),
        cmocka_unit_test(fencing_tokens_rise_in_acquisition_order_across_processes),
        cmocka_unit_test(fencing_tokens_rise_across_a_redis_restart),
        cmocka_unit_test(fencing_tokens_step_past_a_counter_ahead_of_the_clock),
        cmocka_unit_test(wait_gives_up_after_its_wait_time),
        cmocka_unit_test(release_wakes_a_waiter_at_once),
        cmocka_unit_test(a_release_wakes_a_waiter_of_its_own_client_without_publishing),
        cmocka_unit_test(a_release_hands_the_lock_to_a_sleeping_thread_of_its_own_client),
        cmocka_unit_test(a_release_hands_the_lock_to_a_waiting_thread_of_another_process),
        cmocka_unit_test(a_short_hold_is_released_quick_unless_its_handle_found_the_lock_busy),
        cmocka_unit_test(a_release_skips_a_waiting_process_that_is_gone),
        cmocka_unit_test(a_release_wakes_its_own_waiters_when_none_of_them_is_registered),
        cmocka_unit_test(a_newcomer_that_registers_as_the_last_waiter_leaves_is_woken_by_the_next_release),
        cmocka_unit_test(a_hand_off_in_the_old_form_only_wakes_the_waiter),
        cmocka_unit_test(a_lock_kept_for_a_woken_process_is_busy_to_others_and_free_to_it),
        cmocka_unit_test(a_release_wakes_processes_registered_before_or_during_its_hold),
        cmocka_unit_test(a_waiter_that_gave_up_gives_back_a_lock_handed_to_it),
        cmocka_unit_test(a_fair_waiter_that_gave_up_gives_back_a_lock_handed_to_it),
        cmocka_unit_test(a_hand_off_that_comes_too_late_is_not_taken),
        cmocka_unit_test(a_fair_hand_off_that_comes_too_late_is_not_taken),
        cmocka_unit_test(release_between_a_failed_try_and_the_subscription_still_wakes_the_waiter),
        cmocka_unit_test(a_wait_on_a_lock_just_waited_on_attempts_once_and_is_still_woken),
        cmocka_unit_test(a_channel_is_unsubscribed_a_second_after_its_last_wait),
        cmocka_unit_test(a_thread_reading_its_own_wake_ups_leaves_the_other_waits_of_its_client_heard),
        cmocka_unit_test(a_wait_ended_by_a_lease_running_out_does_not_ask_in_a_loop),
        cmocka_unit_test(a_releaser_asking_again_queues_behind_an_old_waiter),
        cmocka_unit_test(a_release_wakes_the_process_that_waited_longest),
        cmocka_unit_test(waiter_acquires_after_redis_restart),
        cmocka_unit_test(script_flush_does_not_break_the_lock),
        cmocka_unit_test(threads_sharing_a_client_exclude_each_other),
        cmocka_unit_test(inspect_reports_holder_count_ttl_and_token),
        cmocka_unit_test(force_unlock_deletes_reports_loss_and_wakes_waiters),
        cmocka_unit_test(bad_names_and_arguments_are_refused),
    };
    /* SIGPIPE keeps its default action on purpose: the restart tests write
     * to connections whose server was just killed, and the library must
     * not let that kill the program. */
    return th_target_run_suite(tests, &server);
}
