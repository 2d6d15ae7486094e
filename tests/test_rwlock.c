/*
 * Read-write lock against real servers (one server, Sentinel or
 * Cluster: target.h): readers overlap, writers
 * exclude everyone (across processes), no read-to-write upgrade, the
 * writer may read, a crashed reader's hold expires, a write release wakes
 * all readers together, and the watchdog renews read holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "fence.h" /* dlock__fence_key */
#include "target.h"

static th_target server;

/* A client of `url` (a server of the test's own) with watchdog_lease_ms. */
static dlock_client *client_of(const char *url, long watchdog_lease)
{
    dlock_options o = {0};
    o.watchdog_lease_ms = watchdog_lease;
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(url, &o, &c), DLOCK_OK);
    return c;
}

static dlock_client *new_client(long watchdog_lease)
{
    return client_of(server.url, watchdog_lease);
}

/* Atomically record the state seen on entering a critical section: a
 * writer must find nobody inside; a reader must find no writer. Any breach
 * increments "breach"; "maxreaders" keeps the most readers seen at once. */
static const char *ENTER =
    "local r = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "local w = tonumber(redis.call('GET', KEYS[2]) or '0') "
    "if ARGV[1] == 'w' then "
    "  if r > 0 or w > 0 then redis.call('INCR', KEYS[3]) end "
    "  redis.call('INCR', KEYS[2]) "
    "else "
    "  if w > 0 then redis.call('INCR', KEYS[3]) end "
    "  r = redis.call('INCR', KEYS[1]) "
    "  if r > tonumber(redis.call('GET', KEYS[4]) or '0') then redis.call('SET', KEYS[4], r) end "
    "end return 1";

static void readers_overlap_and_writers_exclude_everyone(void **state)
{
    (void)state;
    enum { CHILDREN = 6, ROUNDS = 40 };
    for (int i = 0; i < CHILDREN; i++) {
        if (fork() == 0) {
            dlock_client *c = new_client(0);
            dlock_rwlock *rw;
            redisContext *rc = th_target_connect(&server, "{sb}rin");
            if (!rc || dlock_rwlock_new(c, "rw-excl", &rw)) _exit(2);
            srand((unsigned)getpid());
            for (int r = 0; r < ROUNDS; r++) {
                int write = rand() % 4 == 0;
                dlock_rw_mode m = write ? DLOCK_WRITE : DLOCK_READ;
                if (dlock_rwlock_acquire(rw, m, 20000, 10000, NULL) != DLOCK_OK) _exit(3);
                freeReplyObject(redisCommand(rc, "EVAL %s 4 {sb}rin {sb}win {sb}breach {sb}maxreaders %s", ENTER,
                                             write ? "w" : "r"));
                usleep(2000);
                freeReplyObject(redisCommand(rc, "DECR %s", write ? "{sb}win" : "{sb}rin"));
                if (dlock_rwlock_release(rw, m) != DLOCK_OK) _exit(4);
            }
            redisFree(rc);
            dlock_rwlock_free(rw);
            dlock_client_free(c);
            _exit(0);
        }
    }
    for (int i = 0; i < CHILDREN; i++) {
        int st;
        wait(&st);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    redisReply *r = th_target_cmd(&server, "{sb}breach", "MGET {sb}breach {sb}maxreaders {sb}win {sb}rin");
    assert_int_equal(r->element[0]->type, REDIS_REPLY_NIL); /* no breach */
    assert_true(atoi(r->element[1]->str) >= 2);             /* readers did overlap */
    assert_string_equal(r->element[2]->str, "0");
    assert_string_equal(r->element[3]->str, "0");
    freeReplyObject(r);
}

static void read_to_write_upgrade_is_refused_and_writer_may_read(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_rwlock *rw;
    uint64_t wtok = 0, rtok = 0;
    assert_int_equal(dlock_rwlock_new(c, "rw-upgrade", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 1000, 5000, NULL), DLOCK_ERR_DEADLOCK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_OK);
    /* Writer takes a read hold too, then releases both in either order. */
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 5000, &wtok), DLOCK_OK);
    assert_true(wtok > 0);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, 5000, &rtok), DLOCK_OK);
    assert_true(rtok == wtok);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_ERR_NOT_OWNER);
    redisReply *r = th_target_cmd(&server, "dlock:{rw-upgrade}:rw", "EXISTS dlock:{rw-upgrade}:rw");
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    dlock_rwlock_free(rw);
    dlock_client_free(c);
}

/* A child process holds a read with a 1000 ms lease and is SIGKILLed; a
 * writer gets in once the lease has passed: not before (counted from the
 * child's request, which no stall can make early), within 3 s of the
 * kill. 1000 ms: a loaded machine stalls neither the child's acquire
 * past its trusted time nor the writer's first try past the lease. */
static void crashed_reader_hold_expires(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dlock_client *c = new_client(0);
        dlock_rwlock *rw;
        long long asked = th_now_ms();
        if (dlock_rwlock_new(c, "rw-crash", &rw) || dlock_rwlock_acquire(rw, DLOCK_READ, 0, 1000, NULL)) _exit(2);
        if (write(fds[1], &asked, sizeof asked) != sizeof asked) _exit(3);
        pause();
        _exit(0);
    }
    long long asked = 0;
    assert_int_equal(read(fds[0], &asked, sizeof asked), sizeof asked);
    long long t0 = th_now_ms();
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    dlock_client *c = new_client(0);
    dlock_rwlock *rw;
    assert_int_equal(dlock_rwlock_new(c, "rw-crash", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 5000, NULL), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 5000, 5000, NULL), DLOCK_OK);
    long long now = th_now_ms(), took = now - t0;
    if (now - asked < 995 || took >= 3000)
        fail_msg("writer in %lld ms after the reader's request, %lld ms after the kill", now - asked, took);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    close(fds[0]);
    close(fds[1]);
    dlock_rwlock_free(rw);
    dlock_client_free(c);
}

struct reader {
    dlock_rwlock *rw;
    long long got_at;
    int status;
};

static void *read_waiter(void *arg)
{
    struct reader *r = arg;
    r->status = dlock_rwlock_acquire(r->rw, DLOCK_READ, 20000, 30000, NULL);
    r->got_at = th_now_ms();
    /* Hold a while so the readers provably overlap: long enough that a
     * loaded machine's stalls do not make them look one after another. */
    usleep(1200000);
    if (r->status == DLOCK_OK) dlock_rwlock_release(r->rw, DLOCK_READ);
    return NULL;
}

/* With a 30 s write lease, readers that all get in within a second of
 * the release were woken by it (a reader left to its timer would sleep
 * till 2 s into its wait, 1.5 s after the release), together (each holds
 * 1.2 s, so readers let in one after another would take longer). */
static void write_release_wakes_all_readers(void **state)
{
    (void)state;
    enum { READERS = 4 };
    dlock_client *c = new_client(0);
    dlock_rwlock *rw;
    assert_int_equal(dlock_rwlock_new(c, "rw-wake", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 30000, NULL), DLOCK_OK);
    struct reader rs[READERS];
    pthread_t th[READERS];
    for (int i = 0; i < READERS; i++) {
        rs[i] = (struct reader){rw, 0, -100};
        pthread_create(&th[i], NULL, read_waiter, &rs[i]);
    }
    usleep(500000);
    long long released = th_now_ms();
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    for (int i = 0; i < READERS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < READERS; i++) {
        assert_int_equal(rs[i].status, DLOCK_OK);
        /* All within the first reader's 1200 ms hold: woken together. */
        if (rs[i].got_at - released >= 1000)
            fail_msg("reader %d in %lld ms after the release", i, rs[i].got_at - released);
    }
    dlock_rwlock_free(rw);
    dlock_client_free(c);
}

static void watchdog_renews_read_holds(void **state)
{
    (void)state;
    dlock_client *c = new_client(600);
    dlock_rwlock *rw, *other;
    assert_int_equal(dlock_rwlock_new(c, "rw-wd", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(c, "rw-wd", &other), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    usleep(2400000); /* four 600 ms leases */
    assert_int_equal(dlock_rwlock_lost(rw, DLOCK_READ), 0);
    /* Another client's writer still cannot get in. */
    dlock_client *c2 = new_client(0);
    dlock_rwlock *w;
    assert_int_equal(dlock_rwlock_new(c2, "rw-wd", &w), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(w, DLOCK_WRITE, 0, 5000, NULL), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(w, DLOCK_WRITE, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(w, DLOCK_WRITE), DLOCK_OK);
    dlock_rwlock_free(w);
    dlock_client_free(c2);
    dlock_rwlock_free(other);
    dlock_rwlock_free(rw);
    dlock_client_free(c);
}

/* The watchdog keeps a write hold past four 600 ms leases: another
 * client's writer cannot get in until it is released. (Not 300 ms: a
 * hold is trusted for 90 % of its lease less 8 ms after each renewal's
 * send, and a loaded machine has stalled a process past 270 ms.) */
static void watchdog_renews_write_holds(void **state)
{
    (void)state;
    dlock_client *c = new_client(600), *c2 = new_client(0);
    dlock_rwlock *rw, *w;
    assert_int_equal(dlock_rwlock_new(c, "rw-wd-write", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(c2, "rw-wd-write", &w), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    usleep(2400000);
    assert_int_equal(dlock_rwlock_lost(rw, DLOCK_WRITE), 0);
    assert_int_equal(dlock_rwlock_acquire(w, DLOCK_WRITE, 0, 5000, NULL), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(w, DLOCK_WRITE, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(w, DLOCK_WRITE), DLOCK_OK);
    dlock_rwlock_free(w);
    dlock_rwlock_free(rw);
    dlock_client_free(c2);
    dlock_client_free(c);
}

/* A read hold whose expiry has passed (as after its holder was paused
 * past its lease) stays in the hash while another reader keeps the key
 * alive. The watchdog must report it lost at its next renewal, never
 * revive it: a writer may have come and gone in between. The expired
 * state is made by moving the hold's "e:<owner>" expiry into the past
 * (see rw_acquire.lua for the layout). */
static void expired_read_hold_is_not_revived_while_another_reader_holds(void **state)
{
    (void)state;
    dlock_client *c = new_client(600), *c2 = new_client(0);
    dlock_rwlock *rw, *keeper;
    assert_int_equal(dlock_rwlock_new(c, "rw-revive", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(c2, "rw-revive", &keeper), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(keeper, DLOCK_READ, 0, 30000, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    char field[128];
    snprintf(field, sizeof field, "e:%s:", dlock_client_id(c));
    redisReply *r = th_target_cmd(&server, "dlock:{rw-revive}:rw", "HGETALL dlock:{rw-revive}:rw");
    assert_non_null(r);
    int moved = 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        if (strncmp(r->element[i]->str, field, strlen(field)) != 0) continue;
        freeReplyObject(
            th_target_cmd(&server, "dlock:{rw-revive}:rw", "HSET dlock:{rw-revive}:rw %s 1", r->element[i]->str));
        moved++;
    }
    freeReplyObject(r);
    assert_int_equal(moved, 1);
    long long t0 = th_now_ms();
    while (!dlock_rwlock_lost(rw, DLOCK_READ) && th_now_ms() - t0 < 2000) usleep(10000);
    assert_int_equal(dlock_rwlock_lost(rw, DLOCK_READ), 1);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_ERR_LOST);
    assert_int_equal(dlock_rwlock_release(keeper, DLOCK_READ), DLOCK_OK);
    dlock_rwlock_free(keeper);
    dlock_rwlock_free(rw);
    dlock_client_free(c2);
    dlock_client_free(c);
}

/* Every write hold gets a greater token than the last, and the counter
 * plus one when the counter is ahead of the server clock; a read hold
 * sees the latest write token. */
static void write_tokens_rise_with_every_write_hold(void **state)
{
    (void)state;
    const unsigned long long ahead = 4000000000000000ULL;
    dlock_client *c = new_client(0);
    dlock_rwlock *rw;
    uint64_t t1 = 0, t2 = 0, t3 = 0, seen = 0;
    assert_int_equal(dlock_rwlock_new(c, "rw-tokens", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 5000, &t1), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 5000, &t2), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    assert_true(t1 > 0 && t2 > t1);
    freeReplyObject(th_target_cmd(&server, "dlock:{rw-tokens}:rw:fence", "SET dlock:{rw-tokens}:rw:fence %llu", ahead));
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 5000, &t3), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    assert_true(t3 == ahead + 1);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, 5000, &seen), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_OK);
    assert_true(seen == t3);
    dlock_rwlock_free(rw);
    dlock_client_free(c);
}

/* A write hold answered 600 ms late on a 100 ms lease (the server
 * paused with the acquire in its socket) is given back and fails with
 * DLOCK_ERR_LOST; a reader of another client then gets in at once. */
static void a_write_hold_answered_past_its_trusted_time_is_given_back(void **state)
{
    (void)state;
    dlock_options o = {0};
    o.command_timeout_ms = 3000;
    dlock_client *c = NULL, *other = new_client(0);
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    dlock_rwlock *a, *b;
    assert_int_equal(dlock_rwlock_new(c, "rw-late", &a), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(other, "rw-late", &b), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(a, DLOCK_WRITE, 0, 5000, NULL), DLOCK_OK); /* connected, routed */
    assert_int_equal(dlock_rwlock_release(a, DLOCK_WRITE), DLOCK_OK);
    th_pause_timer pt;
    assert_int_equal(th_target_pause_for(&server, "dlock:{rw-late}", 600, &pt), 0);
    dlock_status st = dlock_rwlock_acquire(a, DLOCK_WRITE, 0, 100, NULL);
    char why[512];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    assert_int_equal(th_target_pause_join(&pt), 0);
    if (st != DLOCK_ERR_LOST) fail_msg("write acquire answered after the pause: %d (%s)", st, why);
    assert_non_null(strstr(why, "given back"));
    assert_int_equal(dlock_rwlock_acquire(b, DLOCK_READ, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(b, DLOCK_READ), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(a, DLOCK_WRITE), DLOCK_ERR_NOT_OWNER);
    dlock_rwlock_free(b);
    dlock_rwlock_free(a);
    dlock_client_free(other);
    dlock_client_free(c);
}

/* The admin view: a free lock shows nothing; a write hold shows its
 * owner, count and token; two readers count as two; an expired reader
 * counts as none. */
static void inspect_shows_the_writer_and_live_readers(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_rwlock *a, *b;
    dlock_rwlock_info info;
    uint64_t token = 0;
    assert_int_equal(dlock_rwlock_new(c, "rw-inspect", &a), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(c, "rw-inspect", &b), DLOCK_OK);
    assert_int_equal(dlock_rwlock_inspect(c, "rw-inspect", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    assert_int_equal(info.ttl_ms, -1);
    assert_string_equal(info.writer, "");
    assert_int_equal(dlock_rwlock_acquire(a, DLOCK_WRITE, 0, 5000, &token), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(a, DLOCK_WRITE, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_inspect(c, "rw-inspect", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_int_equal(strncmp(info.writer, dlock_client_id(c), 32), 0);
    assert_int_equal(info.write_count, 2);
    assert_int_equal(info.readers, 0);
    assert_true(info.ttl_ms > 0 && info.ttl_ms <= 5000);
    assert_true(info.last_token == token);
    assert_int_equal(dlock_rwlock_release(a, DLOCK_WRITE), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(a, DLOCK_WRITE), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(a, DLOCK_READ, 0, 5000, NULL), DLOCK_OK);
    /* 500 ms: long enough that a machine running the suites side by side
     * does not stall us past it before the count of two below. */
    assert_int_equal(dlock_rwlock_acquire(b, DLOCK_READ, 0, 500, NULL), DLOCK_OK);
    assert_int_equal(dlock_rwlock_inspect(c, "rw-inspect", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_string_equal(info.writer, "");
    assert_int_equal(info.readers, 2);
    usleep(800000);
    assert_int_equal(dlock_rwlock_inspect(c, "rw-inspect", &info), DLOCK_OK);
    assert_int_equal(info.readers, 1);
    assert_int_equal(dlock_rwlock_release(a, DLOCK_READ), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(b, DLOCK_READ), DLOCK_ERR_LOST);
    assert_int_equal(dlock_rwlock_inspect(c, "rw-inspect", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    assert_int_equal(dlock_rwlock_inspect(c, "bad{name}", &info), DLOCK_ERR_INVALID);
    dlock_rwlock_free(b);
    dlock_rwlock_free(a);
    dlock_client_free(c);
}

/* Force unlock deletes the writer's hold: a waiting reader gets in at
 * once (within 500 ms, where its sleep, bounded by the writer's 3 s lease
 * and the 2 s cap, would last far longer without the wake-up), the
 * writer's watchdog reports the loss at its next renewal, and a second
 * force unlock finds nothing. */
static void force_unlock_breaks_the_write_hold_and_wakes_readers(void **state)
{
    (void)state;
    dlock_client *c = new_client(3000), *c2 = new_client(0);
    dlock_rwlock *w, *r;
    int was_held = -1;
    assert_int_equal(dlock_rwlock_new(c, "rw-force", &w), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(c2, "rw-force", &r), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(w, DLOCK_WRITE, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    struct reader rd = {r, 0, -100};
    pthread_t th;
    pthread_create(&th, NULL, read_waiter, &rd);
    usleep(300000);
    long long t0 = th_now_ms();
    assert_int_equal(dlock_rwlock_force_unlock(c2, "rw-force", &was_held), DLOCK_OK);
    assert_int_equal(was_held, 1);
    pthread_join(th, NULL);
    assert_int_equal(rd.status, DLOCK_OK);
    assert_true(rd.got_at - t0 < 500);
    while (!dlock_rwlock_lost(w, DLOCK_WRITE) && th_now_ms() - t0 < 3000) usleep(10000);
    assert_int_equal(dlock_rwlock_lost(w, DLOCK_WRITE), 1);
    assert_int_equal(dlock_rwlock_release(w, DLOCK_WRITE), DLOCK_ERR_LOST);
    assert_int_equal(dlock_rwlock_force_unlock(c2, "rw-force", &was_held), DLOCK_OK);
    assert_int_equal(was_held, 0);
    dlock_rwlock_free(r);
    dlock_rwlock_free(w);
    dlock_client_free(c2);
    dlock_client_free(c);
}

static void rwlock_rejects_bad_input(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_rwlock *rw = NULL;
    assert_int_equal(dlock_rwlock_new(c, "", &rw), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_rwlock_new(c, "rw-bad", &rw), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(rw, (dlock_rw_mode)7, 0, 1000, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, -3, 1000, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, -1, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_ERR_NOT_OWNER);
    dlock_rwlock_free(rw);
    dlock_client_free(c);
}

/* Write tokens come from a counter floored at the server's clock
 * (src/lua/lib/fence.lua): a restart without persistence wipes the
 * counter, and the next write token must still be above every earlier
 * one; a reader then sees that new write's token as its version. */
static void write_tokens_rise_across_a_redis_restart(void **state)
{
    (void)state;
    th_target_require_single(&server); /* its own server, restarted */
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    dlock_client *c = client_of(r.url, 0);
    dlock_rwlock *rw;
    assert_int_equal(dlock_rwlock_new(c, "rw-restart", &rw), DLOCK_OK);
    uint64_t last_write = 0, t = 0;
    for (int round = 0; round < 4; round++) {
        if (round == 2) {
            char *fence = dlock__fence_key("rw-restart");
            assert_int_equal(th_redis_restart_wiped(&r, fence), 0);
            free(fence);
        }
        assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 5000, &t), DLOCK_OK);
        if (t <= last_write)
            fail_msg("round %d: write token %llu <= %llu", round, (unsigned long long)t,
                     (unsigned long long)last_write);
        last_write = t;
        assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
        assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, 5000, &t), DLOCK_OK);
        assert_true(t == last_write);
        assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_OK);
    }
    dlock_rwlock_free(rw);
    dlock_client_free(c);
    th_redis_stop(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(write_tokens_rise_across_a_redis_restart),
        cmocka_unit_test(readers_overlap_and_writers_exclude_everyone),
        cmocka_unit_test(read_to_write_upgrade_is_refused_and_writer_may_read),
        cmocka_unit_test(crashed_reader_hold_expires),
        cmocka_unit_test(write_release_wakes_all_readers),
        cmocka_unit_test(watchdog_renews_read_holds),
        cmocka_unit_test(watchdog_renews_write_holds),
        cmocka_unit_test(expired_read_hold_is_not_revived_while_another_reader_holds),
        cmocka_unit_test(write_tokens_rise_with_every_write_hold),
        cmocka_unit_test(inspect_shows_the_writer_and_live_readers),
        cmocka_unit_test(a_write_hold_answered_past_its_trusted_time_is_given_back),
        cmocka_unit_test(force_unlock_breaks_the_write_hold_and_wakes_readers),
        cmocka_unit_test(rwlock_rejects_bad_input),
    };
    return th_target_run_suite(tests, &server);
}
