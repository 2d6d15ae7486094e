/*
 * Semaphore and permit-expirable semaphore against real servers (one server, Sentinel or
 * Cluster: target.h):
 * never more holders than permits across processes, permits set once,
 * waiters woken by release rather than by polling, a SIGKILLed holder's
 * permit returning after its lease, watchdog renewal and loss reports.
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
#include "target.h"

static th_target server;

static dlock_client *client_with_lease(long lease)
{
    dlock_options o = {0};
    o.watchdog_lease_ms = lease;
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    return c;
}

/* Children take permits and bump a shared "inside" counter in Redis while
 * holding one; the highest value ever seen must not pass the permits. */
static void semaphore_never_admits_more_than_its_permits(void **state)
{
    (void)state;
    enum { CHILDREN = 6, ROUNDS = 40, PERMITS = 2 };
    dlock_client *c = client_with_lease(0);
    dlock_semaphore *s;
    assert_int_equal(dlock_semaphore_new(c, "sem-excl", &s), DLOCK_OK);
    assert_int_equal(dlock_semaphore_set_permits(s, PERMITS, NULL), DLOCK_OK);
    dlock_semaphore_free(s);
    dlock_client_free(c);
    for (int i = 0; i < CHILDREN; i++) {
        if (fork() == 0) {
            dlock_client *cc = client_with_lease(0);
            dlock_semaphore *ss;
            redisContext *rc = th_target_connect(&server, "{sb}inside");
            if (!cc || dlock_semaphore_new(cc, "sem-excl", &ss) != DLOCK_OK || !rc) _exit(2);
            for (int r = 0; r < ROUNDS; r++) {
                if (dlock_semaphore_acquire(ss, 1, 10000) != DLOCK_OK) _exit(3);
                redisReply *rep = redisCommand(rc, "INCR {sb}inside");
                long long now = rep ? rep->integer : -1;
                freeReplyObject(rep);
                rep = redisCommand(rc, "EVAL %s 1 {sb}maxinside %lld",
                                   "if tonumber(redis.call('GET',KEYS[1]) or '0') < tonumber(ARGV[1]) "
                                   "then redis.call('SET',KEYS[1],ARGV[1]) end",
                                   now);
                freeReplyObject(rep);
                usleep(500);
                freeReplyObject(redisCommand(rc, "DECR {sb}inside"));
                if (dlock_semaphore_release(ss, 1) != DLOCK_OK) _exit(4);
            }
            redisFree(rc);
            dlock_semaphore_free(ss);
            dlock_client_free(cc);
            _exit(0);
        }
    }
    for (int i = 0; i < CHILDREN; i++) {
        int st;
        wait(&st);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    redisReply *r = th_target_cmd(&server, "{sb}maxinside", "GET {sb}maxinside");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    /* More than one at a time really happened, and never more than PERMITS. */
    assert_int_equal(atoi(r->str), PERMITS);
    freeReplyObject(r);
    r = th_target_cmd(&server, "dlock:{sem-excl}:sem", "GET dlock:{sem-excl}:sem");
    assert_string_equal(r->str, "2");
    freeReplyObject(r);
}

static void semaphore_permits_are_set_only_once(void **state)
{
    (void)state;
    dlock_client *c = client_with_lease(0);
    dlock_semaphore *s;
    int set = -1;
    long av = -1;
    assert_int_equal(dlock_semaphore_new(c, "sem-once", &s), DLOCK_OK);
    assert_int_equal(dlock_semaphore_available(s, &av), DLOCK_OK);
    assert_int_equal(av, 0);
    assert_int_equal(dlock_semaphore_set_permits(s, 3, &set), DLOCK_OK);
    assert_int_equal(set, 1);
    /* The same size again is no change; another is refused, and says both. */
    assert_int_equal(dlock_semaphore_set_permits(s, 3, &set), DLOCK_OK);
    assert_int_equal(set, 0);
    set = -1;
    assert_int_equal(dlock_semaphore_set_permits(s, 7, &set), DLOCK_ERR_INVALID);
    assert_int_equal(set, 0);
    assert_non_null(strstr(dlock_last_error(), "has 3 permits, not 7"));
    assert_int_equal(dlock_semaphore_available(s, &av), DLOCK_OK);
    assert_int_equal(av, 3);
    /* All or nothing: 4 of 3 fails at once and takes none. */
    assert_int_equal(dlock_semaphore_acquire(s, 4, 0), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_semaphore_available(s, &av), DLOCK_OK);
    assert_int_equal(av, 3);
    dlock_semaphore_free(s);
    dlock_client_free(c);
}

struct waiter {
    dlock_client *c;
    long long woke_at;
    int status;
};

static void *semaphore_waiter(void *arg)
{
    struct waiter *w = arg;
    dlock_semaphore *s;
    dlock_semaphore_new(w->c, "sem-wake", &s);
    w->status = dlock_semaphore_acquire(s, 1, 20000);
    w->woke_at = th_now_ms();
    dlock_semaphore_free(s);
    return NULL;
}

/* A plain semaphore has no lease to bound a sleep, so the library's safety
 * net is 2 s: waking within a few hundred ms can only be the release. */
static void semaphore_waiter_is_woken_by_release(void **state)
{
    (void)state;
    dlock_client *c = client_with_lease(0);
    dlock_semaphore *s;
    assert_int_equal(dlock_semaphore_new(c, "sem-wake", &s), DLOCK_OK);
    assert_int_equal(dlock_semaphore_set_permits(s, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_semaphore_acquire(s, 1, 0), DLOCK_OK);
    struct waiter w = {c, 0, -100};
    pthread_t t;
    pthread_create(&t, NULL, semaphore_waiter, &w);
    usleep(700000);
    long long released = th_now_ms();
    assert_int_equal(dlock_semaphore_release(s, 1), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.status, DLOCK_OK);
    assert_true(w.woke_at - released < 1000); /* the net: 1.3 s after the release */
    dlock_semaphore_free(s);
    dlock_client_free(c);
}

static void semaphore_wait_times_out(void **state)
{
    (void)state;
    dlock_client *c = client_with_lease(0);
    dlock_semaphore *s;
    assert_int_equal(dlock_semaphore_new(c, "sem-timeout", &s), DLOCK_OK);
    long long t0 = th_now_ms();
    assert_int_equal(dlock_semaphore_acquire(s, 1, 300), DLOCK_ERR_TIMEOUT);
    long long took = th_now_ms() - t0;
    assert_true(took >= 290 && took < 2000);
    dlock_semaphore_free(s);
    dlock_client_free(c);
}

/* Two waiters of one process, the first with a short wait; each takes
 * the permit on a handle of its own, notes when, and gives it back. */
struct late {
    dlock_semaphore *s;
    long wait_ms;
    int status;
    long long got_at;
    int done[2]; /* a pipe: the asynchronous acquire has ended */
};

static void *late_waiter(void *arg)
{
    struct late *w = arg;
    w->status = dlock_semaphore_acquire(w->s, 1, w->wait_ms);
    w->got_at = th_now_ms();
    if (w->status == DLOCK_OK) dlock_semaphore_release(w->s, 1);
    return NULL;
}

static void late_done(dlock_semaphore *s, dlock_status st, void *arg)
{
    (void)s;
    struct late *w = arg;
    w->status = st;
    w->got_at = th_now_ms();
    if (write(w->done[1], "x", 1) != 1) _exit(4);
}

/* The child of the test below: the first waiter is a thread, or an
 * asynchronous acquire (`async_first`); the results go to `fd`. */
static void late_child(int fd, int async_first)
{
    dlock_client *cc = client_with_lease(0);
    struct late w[2] = {{NULL, 1000, -100, 0, {-1, -1}}, {NULL, 10000, -100, 0, {-1, -1}}};
    if (dlock_semaphore_new(cc, "sem-late", &w[0].s) != DLOCK_OK ||
        dlock_semaphore_new(cc, "sem-late", &w[1].s) != DLOCK_OK || pipe(w[0].done) != 0)
        _exit(2);
    pthread_t th[2];
    long long start = th_now_ms(); /* the first waiter's wait starts now: the parent times its steps from it */
    if (write(fd, &start, sizeof start) != (ssize_t)sizeof start) _exit(3);
    if (async_first && dlock_semaphore_acquire_async(w[0].s, 1, w[0].wait_ms, late_done, &w[0]) != DLOCK_OK) _exit(2);
    if (!async_first) pthread_create(&th[0], NULL, late_waiter, &w[0]);
    usleep(100000); /* the first in line */
    pthread_create(&th[1], NULL, late_waiter, &w[1]);
    if (async_first) {
        char x;
        if (read(w[0].done[0], &x, 1) != 1) _exit(3);
        if (w[0].status == DLOCK_OK) dlock_semaphore_release(w[0].s, 1);
    } else {
        pthread_join(th[0], NULL);
    }
    pthread_join(th[1], NULL);
    if (write(fd, w, sizeof w) != (ssize_t)sizeof w) _exit(3);
    _exit(0);
}

/* A release's message that reaches a waiter just as its wait runs out is
 * still owed its attempt: given up unused it would be spent, and the other
 * waiter of that process would sleep on, with the permit free, to its
 * 2 s safety net. The process is stopped (SIGSTOP) while the release is
 * sent and past the first waiter's deadline, so on SIGCONT the message
 * and the deadline are there together. The first waiter waits 1000 ms:
 * the stop must come before its deadline, and a loaded machine may be
 * slow to stop it by hundreds of ms; the second's safety net still
 * falls a second after the SIGCONT, beyond the 600 ms bound. */
static void late_wake_up(int async_first)
{
    dlock_client *c = client_with_lease(0);
    dlock_semaphore *s;
    assert_int_equal(dlock_semaphore_new(c, "sem-late", &s), DLOCK_OK);
    assert_int_equal(dlock_semaphore_set_permits(s, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_semaphore_acquire(s, 1, 0), DLOCK_OK);
    /* The permit is a count, not a hold: it stays taken without the
     * client, and the fork below copies no client of ours. */
    dlock_semaphore_free(s);
    dlock_client_free(c);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        late_child(fds[1], async_first);
    }
    close(fds[1]);
    c = client_with_lease(0);
    assert_int_equal(dlock_semaphore_new(c, "sem-late", &s), DLOCK_OK);
    long long t0;
    assert_int_equal(read(fds[0], &t0, sizeof t0), (ssize_t)sizeof t0);
    long long asleep = t0 + 300 - th_now_ms(); /* both asleep by then, the first until t0 + 1000 */
    if (asleep > 0) usleep((useconds_t)asleep * 1000);
    int st;
    kill(pid, SIGSTOP);
    assert_int_equal(waitpid(pid, &st, WUNTRACED), pid);
    long long stopped = th_now_ms();
    if (stopped >= t0 + 900) { /* the first waiter's wait may have run out already: nothing to test */
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        fail_msg("the waiters were stopped too late (%lld ms into the first one's wait)", stopped - t0);
    }
    assert_int_equal(dlock_semaphore_release(s, 1), DLOCK_OK);
    long long late = t0 + 1100 - th_now_ms(); /* past the first waiter's deadline */
    if (late > 0) usleep((useconds_t)late * 1000);
    long long cont = th_now_ms();
    kill(pid, SIGCONT);
    struct late w[2];
    assert_int_equal(read(fds[0], w, sizeof w), (ssize_t)sizeof w);
    close(fds[0]);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    fprintf(stderr, "first waiter: %d, %lld ms after SIGCONT; second: %d, %lld ms\n", w[0].status, w[0].got_at - cont,
            w[1].status, w[1].got_at - cont);
    assert_int_equal(w[1].status, DLOCK_OK);
    if (w[1].got_at - cont >= 600)
        fail_msg("the second waiter got the permit %lld ms after SIGCONT: the wake-up was spent", w[1].got_at - cont);
    dlock_semaphore_free(s);
    dlock_client_free(c);
}

static void a_wake_up_that_comes_as_the_wait_runs_out_is_not_spent(void **state)
{
    (void)state;
    late_wake_up(0);
}

static void a_wake_up_that_comes_as_an_asynchronous_wait_runs_out_is_not_spent(void **state)
{
    (void)state;
    late_wake_up(1);
}

static void semaphore_rejects_bad_input(void **state)
{
    (void)state;
    dlock_client *c = client_with_lease(0);
    dlock_semaphore *s = NULL;
    long av;
    assert_int_equal(dlock_semaphore_new(c, "a{b}", &s), DLOCK_ERR_INVALID);
    assert_null(s);
    assert_int_equal(dlock_semaphore_new(NULL, "x", &s), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_semaphore_new(c, "sem-bad", &s), DLOCK_OK);
    assert_int_equal(dlock_semaphore_set_permits(s, -1, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_semaphore_acquire(s, 0, 0), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_semaphore_acquire(s, 1, -2), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_semaphore_release(s, 0), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_semaphore_available(s, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_semaphore_available(s, &av), DLOCK_OK);
    assert_int_equal(av, 0); /* nothing above changed anything */
    dlock_semaphore_free(s);
    dlock_client_free(c);
}

/* A child takes the only permit with a 1000 ms lease and is SIGKILLed;
 * the parent gets the permit once the lease ends, not before (counted
 * from the child's request, which no stall can make early), and within
 * 3 s of the kill. 1000 ms: a loaded machine stalls neither the child's
 * acquire past its trusted time nor the parent's first try past the
 * lease. */
static void psem_permit_of_killed_holder_returns_after_its_lease(void **state)
{
    (void)state;
    dlock_client *c = client_with_lease(0);
    dlock_psem *p;
    assert_int_equal(dlock_psem_new(c, "psem-kill", &p), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(p, 1, NULL), DLOCK_OK);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dlock_client *cc = client_with_lease(0);
        dlock_psem *pp;
        dlock_permit *pm;
        long long asked = th_now_ms();
        if (dlock_psem_new(cc, "psem-kill", &pp) || dlock_psem_acquire(pp, 0, 1000, &pm)) _exit(2);
        if (write(fds[1], &asked, sizeof asked) != sizeof asked) _exit(3);
        pause();
        _exit(0);
    }
    long long asked = 0;
    assert_int_equal(read(fds[0], &asked, sizeof asked), sizeof asked);
    long long t0 = th_now_ms();
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    dlock_permit *pm = NULL;
    assert_int_equal(dlock_psem_acquire(p, 0, 1000, &pm), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_psem_acquire(p, 5000, 1000, &pm), DLOCK_OK);
    long long now = th_now_ms(), took = now - t0;
    if (now - asked < 995 || took >= 3000)
        fail_msg("permit back %lld ms after the child's request, %lld ms after the kill", now - asked, took);
    assert_int_equal(dlock_psem_release(p, pm), DLOCK_OK);
    close(fds[0]);
    close(fds[1]);
    dlock_psem_free(p);
    dlock_client_free(c);
}

static void psem_release_by_id_and_renew(void **state)
{
    (void)state;
    dlock_client *c = client_with_lease(0);
    dlock_psem *p;
    dlock_permit *pm;
    long av;
    assert_int_equal(dlock_psem_new(c, "psem-id", &p), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(p, 2, NULL), DLOCK_OK);
    /* 1000 ms, renewed at 300 ms: a loaded machine does not stall us past
     * the lease before the renewal, nor past the renewed one before the
     * check that it outlived the first. */
    assert_int_equal(dlock_psem_acquire(p, 0, 1000, &pm), DLOCK_OK);
    char id[DLOCK_PERMIT_ID_LEN];
    snprintf(id, sizeof id, "%s", dlock_permit_id(pm));
    assert_int_equal(strlen(id), 32);
    assert_int_equal(dlock_psem_available(p, &av), DLOCK_OK);
    assert_int_equal(av, 1);
    /* Renewal keeps it past its first lease. */
    usleep(300000);
    assert_int_equal(dlock_psem_renew(p, id, 3000), DLOCK_OK);
    usleep(1000000);
    assert_int_equal(dlock_psem_available(p, &av), DLOCK_OK);
    assert_int_equal(av, 1);
    /* Another handle (as another process would) releases it by id. */
    dlock_psem *other;
    assert_int_equal(dlock_psem_new(c, "psem-id", &other), DLOCK_OK);
    assert_int_equal(dlock_psem_release_id(other, id), DLOCK_OK);
    assert_int_equal(dlock_psem_release_id(other, id), DLOCK_ERR_NOT_OWNER);
    assert_int_equal(dlock_psem_release_id(other, "no-such-permit"), DLOCK_ERR_NOT_OWNER);
    assert_int_equal(dlock_psem_available(p, &av), DLOCK_OK);
    assert_int_equal(av, 2);
    /* The original holder now learns it had nothing left to release. */
    assert_int_equal(dlock_psem_release(p, pm), DLOCK_ERR_LOST);
    dlock_psem_free(other);
    dlock_psem_free(p);
    dlock_client_free(c);
}

/* A permit answered 600 ms late on a 100 ms lease (the server paused
 * with the acquire in its socket) is given back and fails with
 * DLOCK_ERR_LOST: the set's only permit is free again at once. */
static void psem_permit_answered_past_its_trusted_time_is_given_back(void **state)
{
    (void)state;
    dlock_options o = {0};
    o.command_timeout_ms = 3000;
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    dlock_psem *p;
    dlock_permit *pm = NULL;
    assert_int_equal(dlock_psem_new(c, "psem-late", &p), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(p, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(p, 0, 5000, &pm), DLOCK_OK); /* connected, routed */
    assert_int_equal(dlock_psem_release(p, pm), DLOCK_OK);
    pm = NULL;
    th_pause_timer pt;
    assert_int_equal(th_target_pause_for(&server, "dlock:{psem-late}", 600, &pt), 0);
    dlock_status st = dlock_psem_acquire(p, 0, 100, &pm);
    char why[512];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    assert_int_equal(th_target_pause_join(&pt), 0);
    if (st != DLOCK_ERR_LOST) fail_msg("permit answered after the pause: %d (%s)", st, why);
    assert_non_null(strstr(why, "given back"));
    long av = -1;
    assert_int_equal(dlock_psem_available(p, &av), DLOCK_OK);
    assert_int_equal(av, 1);
    assert_int_equal(dlock_psem_acquire(p, 0, 5000, &pm), DLOCK_OK);
    assert_int_equal(dlock_psem_release(p, pm), DLOCK_OK);
    dlock_psem_free(p);
    dlock_client_free(c);
}

static void psem_expired_permit_cannot_be_renewed(void **state)
{
    (void)state;
    dlock_client *c = client_with_lease(0);
    dlock_psem *p;
    dlock_permit *pm;
    assert_int_equal(dlock_psem_new(c, "psem-exp", &p), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(p, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(p, 0, 500, &pm), DLOCK_OK);
    usleep(800000);
    assert_int_equal(dlock_psem_renew(p, dlock_permit_id(pm), 5000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_psem_release(p, pm), DLOCK_ERR_LOST);
    dlock_psem_free(p);
    dlock_client_free(c);
}

/* Two permits: one held with a long lease keeps the set alive, the other
 * is taken with a 500 ms lease and abandoned (as by a crashed holder).
 * Once that lease has passed, its place must be free again although the
 * set itself does not expire. (Not shorter: the check that both are taken
 * must come before the lease ends, also on a loaded CI machine.) */
static void psem_expired_permit_returns_while_another_is_held(void **state)
{
    (void)state;
    dlock_client *c = client_with_lease(0);
    dlock_psem *p;
    dlock_permit *kept, *abandoned, *again = NULL;
    assert_int_equal(dlock_psem_new(c, "psem-reclaim", &p), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(p, 2, NULL), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(p, 0, 30000, &kept), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(p, 0, 500, &abandoned), DLOCK_OK);
    dlock_permit_free(abandoned);
    assert_int_equal(dlock_psem_acquire(p, 0, 5000, &again), DLOCK_ERR_TIMEOUT);
    usleep(800000);
    assert_int_equal(dlock_psem_acquire(p, 0, 5000, &again), DLOCK_OK);
    assert_int_equal(dlock_psem_release(p, again), DLOCK_OK);
    assert_int_equal(dlock_psem_release(p, kept), DLOCK_OK);
    dlock_psem_free(p);
    dlock_client_free(c);
}

/* The same with an explicit renewal: a permit whose lease has passed
 * cannot be renewed back to life, even while another permit keeps the
 * set (and so the expired member) around. */
static void psem_expired_permit_is_not_revived_while_another_is_held(void **state)
{
    (void)state;
    dlock_client *c = client_with_lease(0);
    dlock_psem *p;
    dlock_permit *kept, *late;
    long av = -1;
    assert_int_equal(dlock_psem_new(c, "psem-revive", &p), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(p, 2, NULL), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(p, 0, 30000, &kept), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(p, 0, 500, &late), DLOCK_OK);
    usleep(800000);
    assert_int_equal(dlock_psem_renew(p, dlock_permit_id(late), 30000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_psem_available(p, &av), DLOCK_OK);
    assert_int_equal(av, 1);
    assert_int_equal(dlock_psem_release(p, late), DLOCK_ERR_LOST);
    assert_int_equal(dlock_psem_release(p, kept), DLOCK_OK);
    dlock_psem_free(p);
    dlock_client_free(c);
}

static atomic_int lost_calls;

static void on_permit_lost(dlock_permit *pm, void *arg)
{
    (void)pm;
    (void)arg;
    atomic_fetch_add(&lost_calls, 1);
}

/* The watchdog keeps a permit with a 600 ms lease for four leases, and
 * reports it lost once someone removes it behind its back. (Not 300 ms:
 * a permit is trusted for 90 % of its lease less 8 ms after each
 * renewal's send, and a loaded machine has stalled a process past
 * 270 ms.) */
static void psem_watchdog_renews_and_reports_loss(void **state)
{
    (void)state;
    dlock_client *c = client_with_lease(600);
    dlock_psem *p;
    dlock_permit *pm;
    long av;
    assert_int_equal(dlock_psem_new(c, "psem-wd", &p), DLOCK_OK);
    dlock_psem_on_lost(p, on_permit_lost, NULL);
    assert_int_equal(dlock_psem_set_permits(p, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(p, 0, DLOCK_LEASE_WATCHDOG, &pm), DLOCK_OK);
    usleep(2400000);
    assert_int_equal(dlock_permit_lost(pm), 0);
    assert_int_equal(dlock_psem_available(p, &av), DLOCK_OK);
    assert_int_equal(av, 0);
    freeReplyObject(
        th_target_cmd(&server, "dlock:{psem-wd}:psem:held", "ZREM dlock:{psem-wd}:psem:held %s", dlock_permit_id(pm)));
    long long t0 = th_now_ms();
    while (!dlock_permit_lost(pm) && th_now_ms() - t0 < 3000) usleep(10000);
    assert_int_equal(dlock_permit_lost(pm), 1);
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(dlock_psem_release(p, pm), DLOCK_ERR_LOST);
    dlock_psem_free(p);
    dlock_client_free(c);
}

/* One asynchronous permit call's outcome, which the test waits for. */
typedef struct permit_call {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    dlock_status st;
    dlock_permit *pm;
} permit_call;

static void permit_call_init(permit_call *pc)
{
    memset(pc, 0, sizeof *pc);
    pthread_mutex_init(&pc->mu, NULL);
    pthread_cond_init(&pc->cv, NULL);
}

static void on_permit_call(dlock_psem *p, dlock_status st, dlock_permit *pm, void *arg)
{
    (void)p;
    permit_call *pc = arg;
    pthread_mutex_lock(&pc->mu);
    pc->st = st;
    pc->pm = pm;
    pc->done = 1;
    pthread_cond_signal(&pc->cv);
    pthread_mutex_unlock(&pc->mu);
}

/* 1 when the call ended within `ms` (its outcome in pc, and pc made ready
 * for the next call), else 0. */
static int permit_call_ended(permit_call *pc, long ms)
{
    long long until = th_now_ms() + ms;
    pthread_mutex_lock(&pc->mu);
    while (!pc->done && th_now_ms() < until) {
        pthread_mutex_unlock(&pc->mu);
        usleep(2000);
        pthread_mutex_lock(&pc->mu);
    }
    int done = pc->done;
    pc->done = 0;
    pthread_mutex_unlock(&pc->mu);
    return done;
}

/* Asynchronous acquires get no more permits than there are, a waiting one
 * is granted by a release, a release cannot start on a handle whose call
 * is in flight (and leaves its permit held), and every permit comes back. */
static void psem_async_calls_keep_to_the_permits(void **state)
{
    (void)state;
    dlock_client *c = client_with_lease(0);
    dlock_psem *h[3];
    permit_call pc[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dlock_psem_new(c, "psem-async", &h[i]), DLOCK_OK);
        permit_call_init(&pc[i]);
    }
    assert_int_equal(dlock_psem_set_permits(h[0], 2, NULL), DLOCK_OK);
    dlock_permit *pm[3];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(dlock_psem_acquire_async(h[i], 0, 10000, on_permit_call, &pc[i]), DLOCK_OK);
        assert_true(permit_call_ended(&pc[i], 5000));
        assert_int_equal(pc[i].st, DLOCK_OK);
        assert_non_null(pm[i] = pc[i].pm);
    }
    assert_string_not_equal(dlock_permit_id(pm[0]), dlock_permit_id(pm[1]));
    assert_int_equal(dlock_psem_acquire_async(h[2], 0, 10000, on_permit_call, &pc[2]), DLOCK_OK);
    assert_true(permit_call_ended(&pc[2], 5000));
    assert_int_equal(pc[2].st, DLOCK_ERR_TIMEOUT);
    assert_null(pc[2].pm);
    long av;
    assert_int_equal(dlock_psem_available(h[2], &av), DLOCK_OK);
    assert_int_equal(av, 0);

    /* A waiting acquire, granted by an asynchronous release. */
    assert_int_equal(dlock_psem_acquire_async(h[2], DLOCK_WAIT_FOREVER, 10000, on_permit_call, &pc[2]), DLOCK_OK);
    assert_false(permit_call_ended(&pc[2], 300));
    assert_int_equal(dlock_psem_release_async(h[0], pm[0], on_permit_call, &pc[0]), DLOCK_OK);
    assert_true(permit_call_ended(&pc[0], 5000));
    assert_int_equal(pc[0].st, DLOCK_OK);
    assert_null(pc[0].pm);
    long long t0 = th_now_ms();
    assert_true(permit_call_ended(&pc[2], 5000));
    assert_int_equal(pc[2].st, DLOCK_OK);
    assert_true(th_now_ms() - t0 < 1000); /* woken by the release, not by a timer */
    pm[2] = pc[2].pm;

    /* h[0] busy with a waiting acquire: a release through it does not
     * start, and the permit stays held, released through another handle. */
    assert_int_equal(dlock_psem_acquire_async(h[0], DLOCK_WAIT_FOREVER, 10000, on_permit_call, &pc[0]), DLOCK_OK);
    assert_int_equal(dlock_psem_release_async(h[0], pm[1], on_permit_call, &pc[1]), DLOCK_ERR_INVALID);
    assert_false(permit_call_ended(&pc[1], 100));
    assert_int_equal(dlock_psem_available(h[1], &av), DLOCK_OK);
    assert_int_equal(av, 0);
    assert_int_equal(dlock_psem_release_async(h[1], pm[1], on_permit_call, &pc[1]), DLOCK_OK);
    assert_true(permit_call_ended(&pc[1], 5000));
    assert_int_equal(pc[1].st, DLOCK_OK);
    assert_true(permit_call_ended(&pc[0], 5000));
    assert_int_equal(pc[0].st, DLOCK_OK);
    assert_int_equal(dlock_psem_release(h[0], pc[0].pm), DLOCK_OK);
    assert_int_equal(dlock_psem_release(h[1], pm[2]), DLOCK_OK); /* any handle of the semaphore */
    assert_int_equal(dlock_psem_available(h[0], &av), DLOCK_OK);
    assert_int_equal(av, 2);
    for (int i = 0; i < 3; i++) dlock_psem_free(h[i]);
    dlock_client_free(c);
}

/* A permit taken asynchronously with the watchdog (600 ms, as above) is
 * renewed past its lease, its loss is reported, and its asynchronous
 * release says so. */
static void psem_async_watchdog_permit_is_renewed_and_its_loss_reported(void **state)
{
    (void)state;
    atomic_store(&lost_calls, 0);
    dlock_client *c = client_with_lease(600);
    dlock_psem *p;
    permit_call pc;
    permit_call_init(&pc);
    assert_int_equal(dlock_psem_new(c, "psem-async-wd", &p), DLOCK_OK);
    dlock_psem_on_lost(p, on_permit_lost, NULL);
    assert_int_equal(dlock_psem_set_permits(p, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire_async(p, 0, DLOCK_LEASE_WATCHDOG, on_permit_call, &pc), DLOCK_OK);
    assert_true(permit_call_ended(&pc, 5000));
    assert_int_equal(pc.st, DLOCK_OK);
    dlock_permit *pm = pc.pm;
    usleep(2400000);
    assert_int_equal(dlock_permit_lost(pm), 0);
    long av;
    assert_int_equal(dlock_psem_available(p, &av), DLOCK_OK);
    assert_int_equal(av, 0);
    freeReplyObject(th_target_cmd(&server, "dlock:{psem-async-wd}:psem:held", "ZREM dlock:{psem-async-wd}:psem:held %s",
                                  dlock_permit_id(pm)));
    long long t0 = th_now_ms();
    while (!dlock_permit_lost(pm) && th_now_ms() - t0 < 3000) usleep(10000);
    assert_int_equal(dlock_permit_lost(pm), 1);
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(dlock_psem_release_async(p, pm, on_permit_call, &pc), DLOCK_OK);
    assert_true(permit_call_ended(&pc, 5000));
    assert_int_equal(pc.st, DLOCK_ERR_LOST);
    dlock_psem_free(p);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(semaphore_never_admits_more_than_its_permits),
        cmocka_unit_test(semaphore_permits_are_set_only_once),
        cmocka_unit_test(semaphore_waiter_is_woken_by_release),
        cmocka_unit_test(semaphore_wait_times_out),
        cmocka_unit_test(a_wake_up_that_comes_as_the_wait_runs_out_is_not_spent),
        cmocka_unit_test(a_wake_up_that_comes_as_an_asynchronous_wait_runs_out_is_not_spent),
        cmocka_unit_test(semaphore_rejects_bad_input),
        cmocka_unit_test(psem_permit_of_killed_holder_returns_after_its_lease),
        cmocka_unit_test(psem_release_by_id_and_renew),
        cmocka_unit_test(psem_expired_permit_cannot_be_renewed),
        cmocka_unit_test(psem_permit_answered_past_its_trusted_time_is_given_back),
        cmocka_unit_test(psem_expired_permit_returns_while_another_is_held),
        cmocka_unit_test(psem_expired_permit_is_not_revived_while_another_is_held),
        cmocka_unit_test(psem_watchdog_renews_and_reports_loss),
        cmocka_unit_test(psem_async_calls_keep_to_the_permits),
        cmocka_unit_test(psem_async_watchdog_permit_is_renewed_and_its_loss_reported),
    };
    return th_target_run_suite(tests, &server);
}
