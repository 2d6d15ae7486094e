/*
 * The asynchronous lock API (dlock_lock_acquire_async,
 * dlock_lock_release_async) against real servers (one server, TLS,
 * Sentinel or Cluster: see target.h): holds that many handles of one name
 * take from one thread exclude each other, with rising tokens; a wait is
 * woken by the release, not by the holder's lease, and makes one attempt
 * on a lock its client waited on a moment ago; a wait runs out; a fair
 * lock serves asynchronous waiters in order; the hold belongs to the
 * handle; re-entry; one call in flight per handle; loss is reported; and
 * dlock_client_free() ends a waiting acquire. The read-write lock and the
 * semaphore: chains of asynchronous calls from many handles keep their
 * rules (no reader beside a writer, never more holders than permits). The
 * latch: asynchronous awaits end when the count reaches zero. Calls that
 * callbacks start, held back to be sent together, all go out and keep
 * their meaning.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "lock.h" /* dlock__test_before_leave */
#include "proxy.h"
#include "target.h"

static th_target server;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static dlock_client *new_client(long watchdog_lease_ms)
{
    dlock_options o = {0};
    o.watchdog_lease_ms = watchdog_lease_ms;
    dlock_client *c;
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    return c;
}

/* One completion, waited for by the test's thread. */
typedef struct done {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n; /* callbacks so far */
    dlock_status st;
    uint64_t token;
    long long at;    /* now_ms() of the last callback */
    char error[256]; /* dlock_last_error() inside a failing callback */
} done;

static void done_init(done *d)
{
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
}

static void done_note(done *d, dlock_status st, uint64_t token)
{
    pthread_mutex_lock(&d->mu);
    d->n++;
    d->st = st;
    d->token = token;
    d->at = now_ms();
    if (st != DLOCK_OK) snprintf(d->error, sizeof d->error, "%s", dlock_last_error());
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static void on_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)l;
    done_note(arg, st, token);
}

static void on_released(dlock_lock *l, dlock_status st, void *arg)
{
    (void)l;
    done_note(arg, st, 0);
}

/* Wait until `d` has `n` callbacks, at most `ms`; returns how many it has. */
static int done_wait(done *d, int n, long ms)
{
    long long until = now_ms() + ms;
    pthread_mutex_lock(&d->mu);
    while (d->n < n && now_ms() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    }
    int got = d->n;
    pthread_mutex_unlock(&d->mu);
    return got;
}

static void acquire_ok(dlock_lock *l, long wait_ms, long lease_ms, uint64_t *token)
{
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(l, wait_ms, lease_ms, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 10000), 1);
    if (d.st != DLOCK_OK) fail_msg("acquire_async: %s", d.error);
    if (token) *token = d.token;
}

static void release_ok(dlock_lock *l)
{
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_release_async(l, on_released, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 10000), 1);
    if (d.st != DLOCK_OK) fail_msg("release_async: %s", d.error);
}

static void async_acquire_and_release_leave_the_lock_free(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "async:once", &l), DLOCK_OK);
    uint64_t token = 0;
    acquire_ok(l, 0, DLOCK_LEASE_WATCHDOG, &token);
    assert_true(token > 0);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "async:once", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.last_token, token);
    /* The handle's own record: "<client id>:0:<handle>". */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s:0:", dlock_client_id(c));
    assert_memory_equal(info.holder, prefix, strlen(prefix));
    assert_int_equal(dlock_lock_lost(l), 0);
    release_ok(l);
    assert_int_equal(dlock_lock_inspect(c, "async:once", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    /* Nothing is held any more: refused at once, no callback. */
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_release_async(l, on_released, &d), DLOCK_ERR_NOT_OWNER);
    dlock_lock_free(l);
    dlock_client_free(c);
    assert_int_equal(d.n, 0);
}

/* As a_grant_answered_past_its_trusted_time_is_given_back (test_lock):
 * the asynchronous acquire of a 100 ms lease answered 600 ms late, the
 * server paused meanwhile, calls back with DLOCK_ERR_LOST once the
 * give-back is answered, so another client takes the lock at once. */
static void async_grant_answered_past_its_trusted_time_is_given_back(void **state)
{
    (void)state;
    dlock_options o = {0};
    o.command_timeout_ms = 3000;
    dlock_client *c = NULL, *other = new_client(0);
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    dlock_lock *l, *l2;
    assert_int_equal(dlock_lock_new(c, "async:late", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_new(other, "async:late", &l2), DLOCK_OK);
    acquire_ok(l, 0, 5000, NULL); /* connected, routed */
    release_ok(l);
    th_pause_timer pt;
    assert_int_equal(th_target_pause_for(&server, "dlock:{async:late}", 600, &pt), 0);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(l, 0, 100, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 10000), 1);
    assert_int_equal(th_target_pause_join(&pt), 0);
    if (d.st != DLOCK_ERR_LOST) fail_msg("acquire_async answered after the pause: %d (%s)", d.st, d.error);
    assert_non_null(strstr(d.error, "given back"));
    assert_int_equal(d.token, 0);
    assert_int_equal(dlock_lock_acquire(l2, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
    done r;
    done_init(&r);
    assert_int_equal(dlock_lock_release_async(l, on_released, &r), DLOCK_ERR_NOT_OWNER);
    dlock_lock_free(l2);
    dlock_lock_free(l);
    dlock_client_free(other);
    dlock_client_free(c);
}

/* The holder's lease is 10 s: a waiter that got the lock within a second
 * of the release was woken by it. */
static void async_wait_is_woken_by_the_release(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(c, "async:wake", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:wake", &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, 10000, NULL), DLOCK_OK);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(waiter, 20000, DLOCK_LEASE_WATCHDOG, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 500), 0); /* still waiting */
    long long released = now_ms();
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    assert_int_equal(d.st, DLOCK_OK);
    assert_true(d.at - released < 1000);
    struct dlock_stats st;
    assert_int_equal(dlock_stats(c, &st), DLOCK_OK);
    assert_true(st.kind[DLOCK_STATS_LOCK].wakeups >= 1);
    release_ok(waiter);
    dlock_lock_free(holder);
    dlock_lock_free(waiter);
    dlock_client_free(c);
}

/* The names of this process's threads other than the calling one, from
 * /proc, into names[] (at most `cap`); returns how many. */
static int other_thread_names(char names[][16], int cap)
{
    char self[32], path[300];
    snprintf(self, sizeof self, "%ld", (long)gettid());
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, self) == 0) continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* a thread that ended meanwhile */
        if (fgets(names[n], 16, f)) {
            names[n][strcspn(names[n], "\n")] = '\0';
            n++;
        }
        fclose(f);
    }
    closedir(d);
    return n;
}

/* Every thread the library starts carries a "dlock-" name, so `top -H`,
 * `ps -L`, perf and gdb tell them from the program's own. Here the
 * connection reader (an asynchronous call's reply), the waiters'
 * subscriber (a wait on a held lock) and the watchdog (a hold renewed)
 * must be there; others (the slow lane of asynchronous calls, a
 * watchdog's lanes) only have to be named if they run. Unnamed, they
 * would carry the program's name, which threads inherit. */
static void the_library_names_each_thread_it_starts(void **state)
{
    (void)state;
    dlock_client *c = new_client(600);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(c, "async:named", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:named", &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(waiter, 20000, 10000, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 700), 0); /* waiting; the watchdog renewed the hold meanwhile */
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    assert_int_equal(d.st, DLOCK_OK);

    char names[64][16];
    int n = other_thread_names(names, 64), watchdog = 0, sub = 0, io = 0;
    for (int i = 0; i < n; i++) {
        if (strncmp(names[i], "dlock-", 6) != 0) fail_msg("a thread named \"%s\"", names[i]);
        watchdog += strcmp(names[i], "dlock-watchdog") == 0;
        sub += strcmp(names[i], "dlock-sub") == 0;
        io += strcmp(names[i], "dlock-io") == 0;
    }
    if (!watchdog || !sub || !io) fail_msg("threads: watchdog %d, subscriber %d, reader %d", watchdog, sub, io);
    release_ok(waiter);
    dlock_lock_free(holder);
    dlock_lock_free(waiter);
    dlock_client_free(c);
}

/* As test_lock's a_wait_on_a_lock_just_waited_on_attempts_once_and_is_still_woken,
 * for the asynchronous acquire: on a lock its client waited on a moment
 * ago (the subscription lingers for a second), the first attempt is made
 * in line, one attempt per wait, and the release still wakes it at once
 * (the holder's lease is 30 s, one sleep's cap 2 s). The holder is another
 * client, another process as far as the server can tell. */
static void async_wait_on_a_lock_just_waited_on_attempts_once_and_is_still_woken(void **state)
{
    (void)state;
    enum { REPS = 3 };
    dlock_client *c1 = new_client(0), *c2 = new_client(0);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(c1, "async:inline", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c2, "async:inline", &waiter), DLOCK_OK);
    long long attempts[REPS + 1], delay[REPS + 1];
    for (int i = 0; i <= REPS; i++) { /* round 0 subscribes c2 */
        assert_int_equal(dlock_lock_acquire(holder, 0, 30000, NULL), DLOCK_OK);
        long long before = th_target_calls(&server, "evalsha");
        done d;
        done_init(&d);
        assert_int_equal(dlock_lock_acquire_async(waiter, 10000, 30000, on_acquired, &d), DLOCK_OK);
        assert_int_equal(done_wait(&d, 1, 300), 0); /* still waiting */
        attempts[i] = th_target_calls(&server, "evalsha") - before;
        long long released = now_ms();
        assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
        assert_int_equal(done_wait(&d, 1, 10000), 1);
        assert_int_equal(d.st, DLOCK_OK);
        delay[i] = d.at - released;
        release_ok(waiter);
    }
    for (int i = 1; i <= REPS; i++)
        if (attempts[i] != 1 || delay[i] >= 1000) /* the 2 s cap would wake it 1.7 s after */
            fail_msg("round %d: %lld attempts before the release (1 expected), woken %lld ms after it", i, attempts[i],
                     delay[i]);
    dlock_lock_free(waiter);
    dlock_lock_free(holder);
    dlock_client_free(c2);
    dlock_client_free(c1);
}

/* A thread waiting on the lock, for the hand-off test below. */
typedef struct sync_waiter {
    dlock_lock *l;
    dlock_status st;
    uint64_t token;
    atomic_int got, go;
} sync_waiter;

static void *sync_waiter_main(void *arg)
{
    sync_waiter *w = arg;
    w->st = dlock_lock_acquire(w->l, 20000, 7000, &w->token);
    atomic_store(&w->got, 1);
    while (!atomic_load(&w->go)) usleep(1000);
    if (w->st == DLOCK_OK) dlock_lock_release(w->l);
    return NULL;
}

/* The direct hand-off (release.lua) both ways between the APIs of one
 * client: a thread's release hands the lock to a waiting asynchronous
 * acquire, whose callback comes with it, and that hold's asynchronous
 * release hands it to a waiting thread. Each time the script calls from
 * the release to the new holder are the release alone (the waiter's own
 * attempt would be a second), and the new hold has its own token, count
 * 1 and its own lease (7 s, not the releaser's 30 s). */
static void a_release_hands_the_lock_to_a_waiter_of_either_api_in_its_client(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *l, *other;
    assert_int_equal(dlock_lock_new(c, "async:handoff", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:handoff", &other), DLOCK_OK);
    uint64_t first;
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, &first), DLOCK_OK);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(other, 20000, 7000, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 500), 0); /* asleep, registered */
    long long before = th_target_calls(&server, "evalsha");
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    long long calls = th_target_calls(&server, "evalsha") - before;
    if (d.st != DLOCK_OK) fail_msg("handed-over acquire: %s", d.error);
    if (calls != 1) fail_msg("%lld script calls from the thread's release to the asynchronous hold", calls);
    assert_true(d.token > first);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "async:handoff", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.hold_count, 1);
    assert_true(info.ttl_ms > 5000 && info.ttl_ms <= 7000);
    assert_int_equal(info.last_token, d.token);

    sync_waiter w = {.l = l};
    pthread_t th;
    pthread_create(&th, NULL, sync_waiter_main, &w);
    usleep(500000); /* asleep, registered */
    before = th_target_calls(&server, "evalsha");
    release_ok(other);
    while (!atomic_load(&w.got)) usleep(1000);
    calls = th_target_calls(&server, "evalsha") - before;
    atomic_store(&w.go, 1);
    pthread_join(th, NULL);
    assert_int_equal(w.st, DLOCK_OK);
    if (calls != 1) fail_msg("%lld script calls from the asynchronous release to the thread's hold", calls);
    assert_true(w.token > d.token);
    assert_int_equal(dlock_lock_inspect(c, "async:handoff", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    dlock_lock_free(l);
    dlock_lock_free(other);
    dlock_client_free(c);
}

/* The fair lock's direct hand-off (fair_release.lua) from an
 * asynchronous release: the handle's asynchronous hold is released while
 * a thread of the same handle waits at the head of the queue; the thread
 * returns holding the lock with the release as the only script call
 * between them (its own attempt would be a second), its own token, count
 * 1 and its own 7 s lease. */
static void an_async_fair_release_hands_the_lock_to_a_waiting_thread_of_its_handle(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new_fair(c, "async:fair-handoff", &l), DLOCK_OK);
    uint64_t first;
    acquire_ok(l, 0, 30000, &first);
    sync_waiter w = {.l = l};
    pthread_t th;
    pthread_create(&th, NULL, sync_waiter_main, &w);
    usleep(500000); /* queued, asleep */
    long long before = th_target_calls(&server, "evalsha");
    release_ok(l);
    while (!atomic_load(&w.got)) usleep(1000);
    long long calls = th_target_calls(&server, "evalsha") - before;
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "async:fair-handoff", &info), DLOCK_OK);
    atomic_store(&w.go, 1);
    pthread_join(th, NULL);
    assert_int_equal(w.st, DLOCK_OK);
    if (calls != 1) fail_msg("%lld script calls from the asynchronous release to the thread's hold", calls);
    assert_true(w.token > first);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.hold_count, 1);
    assert_true(info.ttl_ms > 5000 && info.ttl_ms <= 7000);
    assert_int_equal(info.last_token, w.token);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* The hand-off between processes, for an asynchronous waiter: its
 * attempt that found the lock busy offered, with its process's
 * registration, to be handed the lock (acquire.lua), and the other
 * client's release takes it for the waiter in its script (release.lua)
 * and tells it so on its process's channel. Each round: the lock names
 * the waiter the moment the release returns (without the offer it would
 * be free, kept for the waiter's process 100 ms, until the waiter's own
 * attempt), the script calls from the release to the waiter's callback
 * are the release alone, and the hold is the waiter's: the token the
 * callback got, count 1, its own 7 s lease. On a `fair` lock the offer
 * goes with the attempt that queues it (fair_acquire.lua), and the
 * release hands it over at the queue's head (fair_release.lua). */
static void async_handed_by_another_process(const char *name, int fair)
{
    enum { REPS = 3 };
    dlock_client *c = new_client(0), *other = new_client(0), *look = new_client(0);
    dlock_lock *holder, *waiter;
    assert_int_equal((fair ? dlock_lock_new_fair : dlock_lock_new)(c, name, &holder), DLOCK_OK);
    assert_int_equal((fair ? dlock_lock_new_fair : dlock_lock_new)(other, name, &waiter), DLOCK_OK);
    for (int i = 0; i < REPS; i++) {
        uint64_t mine;
        assert_int_equal(dlock_lock_acquire(holder, 0, 30000, &mine), DLOCK_OK);
        done d;
        done_init(&d);
        assert_int_equal(dlock_lock_acquire_async(waiter, 10000, 7000, on_acquired, &d), DLOCK_OK);
        assert_int_equal(done_wait(&d, 1, 300), 0); /* registered with its offer, subscribed, asleep */
        long long before = th_target_calls(&server, "evalsha");
        assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
        dlock_lock_info at_release, held;
        assert_int_equal(dlock_lock_inspect(look, name, &at_release), DLOCK_OK);
        assert_int_equal(done_wait(&d, 1, 5000), 1);
        long long calls = th_target_calls(&server, "evalsha") - before - 1; /* not the inspect */
        assert_int_equal(d.st, DLOCK_OK);
        if (!at_release.held) fail_msg("round %d: the lock was free after the release, not handed over", i);
        if (calls != 1) fail_msg("round %d: %lld script calls from the release to the waiter's hold", i, calls);
        assert_true(d.token > mine);
        assert_int_equal((long long)at_release.last_token, (long long)d.token);
        assert_int_equal(dlock_lock_inspect(look, name, &held), DLOCK_OK);
        assert_int_equal(held.held, 1);
        assert_int_equal(held.hold_count, 1);
        assert_true(held.ttl_ms > 5000 && held.ttl_ms <= 7000);
        release_ok(waiter);
    }
    dlock_lock_free(waiter);
    dlock_lock_free(holder);
    dlock_client_free(look);
    dlock_client_free(other);
    dlock_client_free(c);
}

static void an_async_waiter_is_handed_the_lock_by_another_process(void **state)
{
    (void)state;
    async_handed_by_another_process("async:handed-x", 0);
}

static void an_async_fair_waiter_at_the_head_is_handed_the_lock_by_another_process(void **state)
{
    (void)state;
    async_handed_by_another_process("async:fair-handed-x", 1);
}

/* An asynchronous waiter that gives up just as another process hands it
 * the lock: its client is cut off by the proxy from before the release
 * until after its 400 ms wait ended, so it knows nothing of the hand-off.
 * Its leave takes the offer back, and then it finds the lock in its own
 * name and gives it back, in that order, as a thread does: the lock is
 * free well within the 20 s lease it was handed with, and the caller is
 * told of its timeout after that. On a `fair` lock
 * one script does both as the waiter leaves the queue (fair_leave.lua). */
static void async_gave_up_as_it_was_handed_the_lock(const char *name, int fair)
{
    th_target_require_single(&server); /* the proxy fronts one server */
    th_proxy *px = th_proxy_start(&server.single);
    assert_non_null(px);
    dlock_client *c = new_client(0), *cut;
    assert_int_equal(dlock_client_new(th_proxy_url(px), NULL, &cut), DLOCK_OK);
    dlock_lock *holder, *waiter;
    assert_int_equal((fair ? dlock_lock_new_fair : dlock_lock_new)(c, name, &holder), DLOCK_OK);
    assert_int_equal((fair ? dlock_lock_new_fair : dlock_lock_new)(cut, name, &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, 30000, NULL), DLOCK_OK);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(waiter, 400, 20000, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 150), 0); /* registered with its offer, asleep */
    th_proxy_partition(px, 1);
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, name, &info), DLOCK_OK);
    if (!info.held) fail_msg("the release did not hand the lock to the registered waiter");
    /* Its wait runs out, cut off. It is told once its give-back (a fair
     * lock's leave, a plain one's release after its leave) is answered
     * (an_acquire_made_as_an_async_wait_gives_up_is_not_given_back says
     * why), so not before the network heals. */
    assert_int_equal(done_wait(&d, 1, 1000), 0);
    th_proxy_partition(px, 0);
    assert_int_equal(done_wait(&d, 1, 3000), 1);
    assert_int_equal(d.st, DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_lock_acquire(holder, 3000, 30000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    dlock_lock_free(waiter);
    dlock_lock_free(holder);
    dlock_client_free(cut);
    dlock_client_free(c);
    th_proxy_stop(px);
}

static void an_async_waiter_that_gave_up_gives_back_a_lock_handed_to_it(void **state)
{
    (void)state;
    async_gave_up_as_it_was_handed_the_lock("async:given-back", 0);
}

static void an_async_fair_waiter_that_gave_up_gives_back_a_lock_handed_to_it(void **state)
{
    (void)state;
    async_gave_up_as_it_was_handed_the_lock("async:fair-given-back", 1);
}

/* The holder that release_holder() lets go as the waiter leaves, on the
 * library's thread: its hold is an asynchronous one, the handle's. */
static dlock_lock *leaving_holder;
static dlock_status holder_released; /* checked on the test's thread */

static void release_holder(void)
{
    done d;
    done_init(&d);
    holder_released = dlock_lock_release_async(leaving_holder, on_released, &d);
    if (holder_released == DLOCK_OK) holder_released = done_wait(&d, 1, 5000) == 1 ? d.st : DLOCK_ERR_TIMEOUT;
}

/* A first acquisition and the one its callback makes when it ran out. */
typedef struct again {
    done first, second;
} again;

static void acquire_again(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    again *a = arg;
    done_note(&a->first, st, token);
    if (st != DLOCK_ERR_TIMEOUT) return;
    dlock_status sent = dlock_lock_acquire_async(l, 0, 30000, on_acquired, &a->second);
    if (sent != DLOCK_OK) done_note(&a->second, sent, 0);
}

/* A waiter that offered and gave up gives back what it may have been
 * handed (above), under its handle's owner string. Its caller, told of
 * the timeout, may ask again on that handle at once; that acquisition is
 * granted under the same owner, and a give-back that lands after it
 * would delete it, its caller sure of a lock that is free. So the caller
 * is told only once the give-back is answered. Here the holder lets go
 * just as the waiter leaves (the release hands it the lock) and the
 * callback asks again at once: the second hold must still be there, and
 * its release must find it. */
static void an_acquire_made_as_an_async_wait_gives_up_is_not_given_back(void **state)
{
    (void)state;
    const char *name = "async:again";
    dlock_client *hc = new_client(0), *c = new_client(0);
    dlock_lock *waiter;
    assert_int_equal(dlock_lock_new(hc, name, &leaving_holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, name, &waiter), DLOCK_OK);
    acquire_ok(leaving_holder, 0, 30000, NULL);
    again a;
    holder_released = DLOCK_ERR_INVALID;
    done_init(&a.first);
    done_init(&a.second);
    dlock__test_before_leave = release_holder;
    assert_int_equal(dlock_lock_acquire_async(waiter, 300, 30000, acquire_again, &a), DLOCK_OK);
    assert_int_equal(done_wait(&a.first, 1, 5000), 1);
    assert_int_equal(a.first.st, DLOCK_ERR_TIMEOUT);
    assert_int_equal(done_wait(&a.second, 1, 5000), 1);
    dlock__test_before_leave = NULL;
    assert_int_equal(holder_released, DLOCK_OK);
    if (a.second.st != DLOCK_OK) fail_msg("the second acquisition: %s", a.second.error);
    usleep(200000); /* a late give-back would have landed */
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(hc, name, &info), DLOCK_OK);
    if (!info.held) fail_msg("the second acquisition was reported taken, and the lock is free");
    assert_int_equal(info.last_token, a.second.token);
    release_ok(waiter);
    dlock_lock_free(waiter);
    dlock_lock_free(leaving_holder);
    dlock_client_free(c);
    dlock_client_free(hc);
}

static void async_wait_runs_out_with_timeout(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(c, "async:timeout", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:timeout", &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    done d;
    done_init(&d);
    long long start = now_ms();
    assert_int_equal(dlock_lock_acquire_async(waiter, 300, DLOCK_LEASE_WATCHDOG, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    assert_int_equal(d.st, DLOCK_ERR_TIMEOUT);
    assert_non_null(strstr(d.error, "held by another owner"));
    assert_true(d.at - start >= 290);
    /* wait 0: one attempt */
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(waiter, 0, DLOCK_LEASE_WATCHDOG, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    assert_int_equal(d.st, DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    dlock_lock_free(holder);
    dlock_lock_free(waiter);
    dlock_client_free(c);
}

/* The newcomer that slip_in() starts: a thread of the same client. */
static struct {
    dlock_lock *l;
    pthread_t thread;
    dlock_status st;
    long long got_at;
} slipped;

static void *slipped_main(void *arg)
{
    (void)arg;
    slipped.st = dlock_lock_acquire(slipped.l, 10000, 30000, NULL);
    slipped.got_at = now_ms();
    if (slipped.st == DLOCK_OK) dlock_lock_release(slipped.l);
    return NULL;
}

static void slip_in(void)
{
    pthread_create(&slipped.thread, NULL, slipped_main, NULL);
    usleep(200000); /* its attempt has registered the process; it sleeps in line */
}

/* test_lock's a_newcomer_that_registers_as_the_last_waiter_leaves_... with
 * an asynchronous acquire as the waiter that gives up: its leave, sent
 * from the library's thread, must also wake the newcomer that registered
 * the process in the gap, or the next release wakes nobody there. With
 * `replica_acks` the waiter makes no offer, so its leave is the plain one
 * (async_leave_last in lock.c) rather than the one that takes an offer
 * back. */
static void newcomer_slips_in_as_an_async_waiter_leaves(int replica_acks)
{
    dlock_options o = {0};
    o.replica_acks = replica_acks;
    o.replica_timeout_ms = 1000;
    dlock_client *hc = new_client(0), *c;
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(hc, "async:slipped-in", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:slipped-in", &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:slipped-in", &slipped.l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, 30000, NULL), DLOCK_OK);
    done d;
    done_init(&d);
    dlock__test_before_leave = slip_in;
    assert_int_equal(dlock_lock_acquire_async(waiter, 300, 30000, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    dlock__test_before_leave = NULL;
    assert_int_equal(d.st, DLOCK_ERR_TIMEOUT);
    usleep(100000);
    long long released = now_ms();
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    pthread_join(slipped.thread, NULL);
    if (slipped.st != DLOCK_OK) fail_msg("the newcomer: %s", dlock_strerror(slipped.st));
    if (slipped.got_at - released >= 1000)
        fail_msg("the newcomer got the lock %lld ms after the release", slipped.got_at - released);
    dlock_lock_free(slipped.l);
    dlock_lock_free(waiter);
    dlock_lock_free(holder);
    dlock_client_free(c);
    dlock_client_free(hc);
}

static void a_newcomer_that_registers_as_an_async_waiter_leaves_is_woken_by_the_next_release(void **state)
{
    (void)state;
    newcomer_slips_in_as_an_async_waiter_leaves(0);
}

/* The same with replica acknowledgements asked for, which need a replica
 * to grant the newcomer its lock: Sentinel and Cluster targets. */
static void a_newcomer_that_registers_as_an_async_waiter_without_an_offer_leaves_is_woken_too(void **state)
{
    (void)state;
    if (server.kind == TH_TARGET_SINGLE) skip();
    newcomer_slips_in_as_an_async_waiter_leaves(1);
}

/* Fair: waiters queued one after another get the lock in that order. */
typedef struct order {
    pthread_mutex_t mu;
    int seq[8], n;
    dlock_lock *locks[8];
} order;

static void order_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)token;
    order *o = arg;
    pthread_mutex_lock(&o->mu);
    int i = 0;
    while (o->locks[i] != l) i++;
    o->seq[o->n++] = st == DLOCK_OK ? i : -1;
    pthread_mutex_unlock(&o->mu);
}

static long long queue_length(const char *key)
{
    redisReply *r = th_target_cmd(&server, key, "LLEN %s", key);
    long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    return n;
}

static void async_fair_waiters_get_the_lock_in_queue_order(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *holder;
    assert_int_equal(dlock_lock_new_fair(c, "async:fifo", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    order o;
    memset(&o, 0, sizeof o);
    pthread_mutex_init(&o.mu, NULL);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(dlock_lock_new_fair(c, "async:fifo", &o.locks[i]), DLOCK_OK);
        assert_int_equal(dlock_lock_acquire_async(o.locks[i], 20000, 60000, order_acquired, &o), DLOCK_OK);
        long long until = now_ms() + 5000;
        while (queue_length("dlock:{async:fifo}:q") < i + 1 && now_ms() < until) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
        assert_int_equal(queue_length("dlock:{async:fifo}:q"), i + 1);
    }
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    /* Each one, once it has the lock, is released by the test in turn. */
    for (int k = 0; k < 6; k++) {
        long long until = now_ms() + 5000;
        for (;;) {
            pthread_mutex_lock(&o.mu);
            int n = o.n;
            pthread_mutex_unlock(&o.mu);
            if (n > k || now_ms() > until) break;
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
        assert_int_equal(o.n, k + 1);
        assert_int_equal(o.seq[k], k);
        release_ok(o.locks[k]);
    }
    for (int i = 0; i < 6; i++) dlock_lock_free(o.locks[i]);
    dlock_lock_free(holder);
    dlock_client_free(c);
}

/* Any thread may release the handle's hold; a thread's own release does
 * not touch it; re-entry counts on the handle. */
typedef struct from_thread {
    dlock_lock *l;
    dlock_status sync_release, async_submit;
    done d;
} from_thread;

static void *release_elsewhere(void *arg)
{
    from_thread *f = arg;
    f->sync_release = dlock_lock_release(f->l);
    f->async_submit = dlock_lock_release_async(f->l, on_released, &f->d);
    return NULL;
}

static void async_hold_belongs_to_the_handle_and_reenters(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "async:handle", &l), DLOCK_OK);
    uint64_t t1 = 0, t2 = 0;
    acquire_ok(l, 0, DLOCK_LEASE_WATCHDOG, &t1);
    acquire_ok(l, 0, DLOCK_LEASE_WATCHDOG, &t2);
    assert_true(t1 == t2);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "async:handle", &info), DLOCK_OK);
    assert_int_equal(info.hold_count, 2);
    /* A synchronous acquire by this thread is another owner: busy. */
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_ERR_TIMEOUT);
    from_thread f;
    memset(&f, 0, sizeof f);
    f.l = l;
    done_init(&f.d);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, release_elsewhere, &f), 0);
    pthread_join(th, NULL);
    assert_int_equal(f.sync_release, DLOCK_ERR_NOT_OWNER);
    assert_int_equal(f.async_submit, DLOCK_OK);
    assert_int_equal(done_wait(&f.d, 1, 5000), 1);
    assert_int_equal(f.d.st, DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(c, "async:handle", &info), DLOCK_OK);
    assert_int_equal(info.hold_count, 1);
    release_ok(l);
    assert_int_equal(dlock_lock_inspect(c, "async:handle", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    dlock_lock_free(l);
    dlock_client_free(c);
}

static void second_async_call_on_a_handle_is_refused_while_one_is_in_flight(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(c, "async:busy", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:busy", &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    done d, d2;
    done_init(&d);
    done_init(&d2);
    assert_int_equal(dlock_lock_acquire_async(waiter, 5000, DLOCK_LEASE_WATCHDOG, on_acquired, &d), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire_async(waiter, 0, DLOCK_LEASE_WATCHDOG, on_acquired, &d2), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_last_error(), "in flight"));
    /* Bad arguments: refused at once. */
    assert_int_equal(dlock_lock_acquire_async(NULL, 0, DLOCK_LEASE_WATCHDOG, on_acquired, &d2), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_acquire_async(holder, 0, DLOCK_LEASE_WATCHDOG, NULL, &d2), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_acquire_async(holder, -5, DLOCK_LEASE_WATCHDOG, on_acquired, &d2), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_acquire_async(holder, 0, 1, on_acquired, &d2), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    assert_int_equal(d.st, DLOCK_OK);
    assert_int_equal(d2.n, 0);
    release_ok(waiter);
    dlock_lock_free(holder);
    dlock_lock_free(waiter);
    dlock_client_free(c);
}

static atomic_int lost_calls;
static atomic_ullong lost_token;

static void on_lost(dlock_lock *l, uint64_t token, void *arg)
{
    (void)l;
    (void)arg;
    atomic_store(&lost_token, token);
    atomic_fetch_add(&lost_calls, 1);
}

/* The watchdog renews an asynchronous hold, and reports it lost when the
 * server no longer has it; its release then says so. */
static void async_hold_is_renewed_and_its_loss_reported(void **state)
{
    (void)state;
    dlock_client *c = new_client(600);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "async:lost", &l), DLOCK_OK);
    dlock_lock_on_lost(l, on_lost, NULL);
    atomic_store(&lost_calls, 0);
    uint64_t token = 0;
    acquire_ok(l, 0, DLOCK_LEASE_WATCHDOG, &token);
    struct timespec ts = {1, 500000000};
    nanosleep(&ts, NULL); /* 2.5 leases: held only if renewed */
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "async:lost", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_int_equal(dlock_lock_lost(l), 0);
    int was_held = 0;
    assert_int_equal(dlock_lock_force_unlock(c, "async:lost", &was_held), DLOCK_OK);
    assert_int_equal(was_held, 1);
    long long until = now_ms() + 5000;
    while (atomic_load(&lost_calls) == 0 && now_ms() < until) {
        struct timespec p = {0, 10000000};
        nanosleep(&p, NULL);
    }
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(atomic_load(&lost_token), token);
    assert_int_equal(dlock_lock_lost(l), 1);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_release_async(l, on_released, &d), DLOCK_ERR_LOST);
    assert_int_equal(d.n, 0);
    /* Over: a new acquisition starts afresh. */
    acquire_ok(l, 0, DLOCK_LEASE_WATCHDOG, NULL);
    assert_int_equal(dlock_lock_lost(l), 0);
    release_ok(l);
    dlock_lock_free(l);
    dlock_client_free(c);
}

static void client_free_ends_a_waiting_async_acquire(void **state)
{
    (void)state;
    dlock_client *c = new_client(0), *other = new_client(0);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(other, "async:free", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:free", &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(waiter, DLOCK_WAIT_FOREVER, DLOCK_LEASE_WATCHDOG, on_acquired, &d),
                     DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 300), 0);
    long long start = now_ms();
    dlock_client_free(c);
    assert_true(now_ms() - start < 3000);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.st, DLOCK_ERR_INVALID);
    assert_non_null(strstr(d.error, "shutting down"));
    dlock_lock_free(waiter);
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    dlock_lock_free(holder);
    dlock_client_free(other);
}

/*
 * Many handles of one name (a lock, a fair lock, a read-write lock or a
 * semaphore of PERMITS), each a chain of asynchronous acquire -> release
 * ROUNDS times, all started from one thread. The holds are handed to the
 * test's thread, which ends each after a short pause: the windows of
 * holds span many callbacks, so holders the rule forbids at once would be
 * seen. Tokens of exclusive holds must rise in the order of the holds.
 */
#define HANDLES 16
#define ROUNDS 8
#define PERMITS 3

enum { K_LOCK, K_FAIR, K_RW, K_SEM };

typedef struct family {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int kind;
    atomic_int writers, readers, holders, broken, failures;
    int finished;                   /* chains that ended (under mu) */
    int pending[HANDLES], npending; /* holds for the test's thread to end (under mu) */
    uint64_t last_token;            /* under mu */
    int rounds[HANDLES];
    dlock_rw_mode mode[HANDLES];
    dlock_lock *locks[HANDLES];
    dlock_rwlock *rw[HANDLES];
    dlock_semaphore *sems[HANDLES];
    atomic_int reads, writes;
} family;

static void family_finished(family *f)
{
    pthread_mutex_lock(&f->mu);
    f->finished++;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void family_failed(family *f)
{
    atomic_fetch_add(&f->failures, 1);
    family_finished(f);
}

static int family_index(family *f, const void *h)
{
    for (int i = 0; i < HANDLES; i++)
        if ((void *)f->locks[i] == h || (void *)f->rw[i] == h || (void *)f->sems[i] == h) return i;
    return -1;
}

static void lock_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg);
static void rw_acquired(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status st, uint64_t token, void *arg);
static void sem_acquired(dlock_semaphore *s, dlock_status st, void *arg);

/* The next round of handle i, or its end. */
static void family_next(family *f, int i)
{
    if (f->rounds[i]++ == ROUNDS) {
        family_finished(f);
        return;
    }
    dlock_status st;
    switch (f->kind) {
    case K_SEM: st = dlock_semaphore_acquire_async(f->sems[i], 1, DLOCK_WAIT_FOREVER, sem_acquired, f); break;
    case K_RW:
        f->mode[i] = (f->rounds[i] + i) % 4 == 0 ? DLOCK_WRITE : DLOCK_READ;
        st = dlock_rwlock_acquire_async(f->rw[i], f->mode[i], DLOCK_WAIT_FOREVER, 10000, rw_acquired, f);
        break;
    default: st = dlock_lock_acquire_async(f->locks[i], DLOCK_WAIT_FOREVER, DLOCK_LEASE_WATCHDOG, lock_acquired, f);
    }
    if (st != DLOCK_OK) family_failed(f);
}

/* A hold began: check the rule, then hand it to the test's thread. */
static void family_held(family *f, const void *h, int exclusive, uint64_t token)
{
    int i = family_index(f, h);
    switch (f->kind) {
    case K_SEM:
        if (atomic_fetch_add(&f->holders, 1) >= PERMITS) atomic_fetch_add(&f->broken, 1);
        break;
    case K_RW:
        if (exclusive) {
            atomic_fetch_add(&f->writes, 1);
            if (atomic_fetch_add(&f->writers, 1) != 0 || atomic_load(&f->readers) != 0) atomic_fetch_add(&f->broken, 1);
        } else {
            atomic_fetch_add(&f->reads, 1);
            atomic_fetch_add(&f->readers, 1);
            if (atomic_load(&f->writers) != 0) atomic_fetch_add(&f->broken, 1);
        }
        break;
    default:
        if (atomic_fetch_add(&f->holders, 1) != 0) atomic_fetch_add(&f->broken, 1);
    }
    pthread_mutex_lock(&f->mu);
    if (exclusive) {
        if (token <= f->last_token) atomic_fetch_add(&f->broken, 1);
        f->last_token = token;
    }
    f->pending[f->npending++] = i;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void lock_released(dlock_lock *l, dlock_status st, void *arg)
{
    if (st != DLOCK_OK) family_failed(arg);
    else family_next(arg, family_index(arg, l));
}

static void lock_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    if (st != DLOCK_OK) family_failed(arg);
    else family_held(arg, l, 1, token);
}

static void rw_released(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status st, void *arg)
{
    (void)mode;
    if (st != DLOCK_OK) family_failed(arg);
    else family_next(arg, family_index(arg, rw));
}

static void rw_acquired(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status st, uint64_t token, void *arg)
{
    if (st != DLOCK_OK) family_failed(arg);
    else family_held(arg, rw, mode == DLOCK_WRITE, token);
}

static void sem_released(dlock_semaphore *s, dlock_status st, void *arg)
{
    if (st != DLOCK_OK) family_failed(arg);
    else family_next(arg, family_index(arg, s));
}

static void sem_acquired(dlock_semaphore *s, dlock_status st, void *arg)
{
    if (st != DLOCK_OK) family_failed(arg);
    else family_held(arg, s, 0, 0);
}

/* The test's thread: end hold i (the rule's counters first, since the
 * release lets the next holder in), after a pause. */
static void family_release(family *f, int i)
{
    struct timespec pause = {0, 300000};
    nanosleep(&pause, NULL);
    dlock_status st;
    switch (f->kind) {
    case K_SEM:
        atomic_fetch_sub(&f->holders, 1);
        st = dlock_semaphore_release_async(f->sems[i], 1, sem_released, f);
        break;
    case K_RW:
        atomic_fetch_sub(f->mode[i] == DLOCK_WRITE ? &f->writers : &f->readers, 1);
        st = dlock_rwlock_release_async(f->rw[i], f->mode[i], rw_released, f);
        break;
    default: atomic_fetch_sub(&f->holders, 1); st = dlock_lock_release_async(f->locks[i], lock_released, f);
    }
    if (st != DLOCK_OK) family_failed(f);
}

static void run_family(int kind)
{
    dlock_client *c = new_client(0);
    family f;
    memset(&f, 0, sizeof f);
    pthread_mutex_init(&f.mu, NULL);
    pthread_cond_init(&f.cv, NULL);
    f.kind = kind;
    const char *name = "async:family";
    for (int i = 0; i < HANDLES; i++) {
        dlock_status st;
        switch (kind) {
        case K_SEM: st = dlock_semaphore_new(c, name, &f.sems[i]); break;
        case K_RW: st = dlock_rwlock_new(c, name, &f.rw[i]); break;
        case K_FAIR: st = dlock_lock_new_fair(c, name, &f.locks[i]); break;
        default: st = dlock_lock_new(c, name, &f.locks[i]);
        }
        assert_int_equal(st, DLOCK_OK);
    }
    if (kind == K_SEM) assert_int_equal(dlock_semaphore_set_permits(f.sems[0], PERMITS, NULL), DLOCK_OK);
    for (int i = 0; i < HANDLES; i++) family_next(&f, i);
    long long until = now_ms() + 60000;
    pthread_mutex_lock(&f.mu);
    while (f.finished < HANDLES && now_ms() < until) {
        if (f.npending > 0) {
            int i = f.pending[--f.npending];
            pthread_mutex_unlock(&f.mu);
            family_release(&f, i);
            pthread_mutex_lock(&f.mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&f.cv, &f.mu, &ts);
    }
    pthread_mutex_unlock(&f.mu);
    assert_int_equal(f.finished, HANDLES);
    assert_int_equal(atomic_load(&f.failures), 0);
    assert_int_equal(atomic_load(&f.broken), 0);
    for (int i = 0; i < HANDLES; i++) assert_int_equal(f.rounds[i], ROUNDS + 1);
    struct dlock_stats st;
    assert_int_equal(dlock_stats(c, &st), DLOCK_OK);
    if (kind == K_SEM) {
        long available = -1;
        assert_int_equal(dlock_semaphore_available(f.sems[0], &available), DLOCK_OK);
        assert_int_equal(available, PERMITS);
        assert_int_equal(st.kind[DLOCK_STATS_SEMAPHORE].acquisitions, HANDLES * ROUNDS);
    } else if (kind == K_RW) {
        assert_int_equal(atomic_load(&f.reads) + atomic_load(&f.writes), HANDLES * ROUNDS);
        assert_true(atomic_load(&f.writes) > 0);
        dlock_rwlock_info info;
        assert_int_equal(dlock_rwlock_inspect(c, name, &info), DLOCK_OK);
        assert_int_equal(info.held, 0);
    } else {
        assert_int_equal(st.kind[kind == K_FAIR ? DLOCK_STATS_FAIR : DLOCK_STATS_LOCK].acquisitions, HANDLES * ROUNDS);
        dlock_lock_info info;
        assert_int_equal(dlock_lock_inspect(c, name, &info), DLOCK_OK);
        assert_int_equal(info.held, 0);
    }
    for (int i = 0; i < HANDLES; i++) {
        dlock_lock_free(f.locks[i]);
        dlock_rwlock_free(f.rw[i]);
        dlock_semaphore_free(f.sems[i]);
    }
    dlock_client_free(c);
    /* The next case's name is clean again. */
    th_target_flush(&server);
}

static void async_holds_of_one_name_exclude_each_other_with_rising_tokens(void **state)
{
    (void)state;
    run_family(K_LOCK);
}

static void async_fair_holds_exclude_each_other_with_rising_tokens(void **state)
{
    (void)state;
    run_family(K_FAIR);
}

static void async_rw_holds_never_put_a_reader_beside_a_writer(void **state)
{
    (void)state;
    run_family(K_RW);
}

static void async_semaphore_never_admits_more_holders_than_permits(void **state)
{
    (void)state;
    run_family(K_SEM);
}

/* A write hold taken synchronously keeps an asynchronous reader waiting
 * until its release wakes it; then the writer's own thread cannot release
 * the handle's read hold, any thread's release_async can. */
typedef struct rw_done {
    done d;
    dlock_rw_mode mode;
} rw_done;

static void on_rw_acquired(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status st, uint64_t token, void *arg)
{
    (void)rw;
    rw_done *r = arg;
    r->mode = mode;
    done_note(&r->d, st, token);
}

static void on_rw_released(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status st, void *arg)
{
    (void)rw;
    rw_done *r = arg;
    r->mode = mode;
    done_note(&r->d, st, 0);
}

static void async_reader_waits_for_the_writer_and_is_woken(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_rwlock *writer, *reader;
    assert_int_equal(dlock_rwlock_new(c, "async:rw", &writer), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(c, "async:rw", &reader), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire(writer, DLOCK_WRITE, 0, 10000, NULL), DLOCK_OK);
    rw_done r;
    memset(&r, 0, sizeof r);
    done_init(&r.d);
    assert_int_equal(dlock_rwlock_acquire_async(reader, DLOCK_READ, 20000, 10000, on_rw_acquired, &r), DLOCK_OK);
    assert_int_equal(dlock_rwlock_acquire_async(reader, DLOCK_READ, 0, 10000, on_rw_acquired, &r), DLOCK_ERR_INVALID);
    assert_int_equal(done_wait(&r.d, 1, 300), 0);
    long long released = now_ms();
    assert_int_equal(dlock_rwlock_release(writer, DLOCK_WRITE), DLOCK_OK);
    assert_int_equal(done_wait(&r.d, 1, 5000), 1);
    assert_int_equal(r.d.st, DLOCK_OK);
    assert_int_equal(r.mode, DLOCK_READ);
    assert_true(r.d.at - released < 1000);
    assert_int_equal(dlock_rwlock_release(reader, DLOCK_READ), DLOCK_ERR_NOT_OWNER);
    /* Upgrade refused at once, as synchronously. */
    assert_int_equal(dlock_rwlock_acquire_async(reader, DLOCK_WRITE, 0, 10000, on_rw_acquired, &r), DLOCK_ERR_DEADLOCK);
    done_init(&r.d);
    assert_int_equal(dlock_rwlock_release_async(reader, DLOCK_READ, on_rw_released, &r), DLOCK_OK);
    assert_int_equal(done_wait(&r.d, 1, 5000), 1);
    assert_int_equal(r.d.st, DLOCK_OK);
    dlock_rwlock_info info;
    assert_int_equal(dlock_rwlock_inspect(c, "async:rw", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    dlock_rwlock_free(writer);
    dlock_rwlock_free(reader);
    dlock_client_free(c);
}

/* dlock_client_drain() ends a waiting acquire, refuses new asynchronous
 * calls and leaves the synchronous API working; then the handles are
 * freed and the client after them, as documented. */
static void drain_ends_waits_and_leaves_the_synchronous_api_working(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *holder, *waiter;
    assert_int_equal(dlock_lock_new(c, "async:drain", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "async:drain", &waiter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(waiter, DLOCK_WAIT_FOREVER, DLOCK_LEASE_WATCHDOG, on_acquired, &d),
                     DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 200), 0);
    dlock_client_drain(c);
    assert_int_equal(d.n, 1); /* the callback has run when drain returns */
    assert_int_equal(d.st, DLOCK_ERR_INVALID);
    assert_non_null(strstr(d.error, "shutting down"));
    assert_int_equal(dlock_lock_acquire_async(waiter, 0, DLOCK_LEASE_WATCHDOG, on_acquired, &d), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(waiter, 0, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(waiter), DLOCK_OK);
    dlock_lock_free(holder);
    dlock_lock_free(waiter);
    dlock_client_free(c);
}

/* Replica-safe acquire: each attempt is followed by WAIT. A single server
 * has no replica, so every acquisition is undone (DLOCK_ERR_REPLICA, the
 * lock left free); Sentinel and Cluster masters have one, so it holds. */
static void async_replica_safe_acquire_waits_for_replicas(void **state)
{
    (void)state;
    dlock_options o = {0};
    o.replica_acks = 1;
    o.replica_timeout_ms = 100;
    dlock_client *c;
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "async:replica", &l), DLOCK_OK);
    done d;
    done_init(&d);
    assert_int_equal(dlock_lock_acquire_async(l, 300, DLOCK_LEASE_WATCHDOG, on_acquired, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 10000), 1);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "async:replica", &info), DLOCK_OK);
    if (server.kind == TH_TARGET_SINGLE) {
        assert_int_equal(d.st, DLOCK_ERR_REPLICA);
        assert_non_null(strstr(d.error, "replicas"));
        assert_int_equal(info.held, 0);
    } else {
        if (d.st != DLOCK_OK) fail_msg("acquire_async: %s", d.error);
        assert_int_equal(info.held, 1);
        assert_int_equal(info.last_token, d.token);
        release_ok(l);
    }
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* examples/async_libuv.c, run against the target: every job held the lock
 * once, in order of rising tokens, from one libuv loop. */
static void on_latch(dlock_latch *l, dlock_status st, void *arg)
{
    (void)l;
    done_note(arg, st, 0);
}

/* Eight awaits from one thread on a latch of two, half of them begun
 * after the first count-down: none ends before the second, all end at it;
 * a shut latch runs out at its wait; a latch never set is open; one await
 * at a time per handle. */
static void async_latch_await_opens_at_zero_and_runs_out_when_shut(void **state)
{
    (void)state;
    enum { N = 8 };
    dlock_client *c = new_client(0);
    dlock_latch *setter, *l[N];
    assert_int_equal(dlock_latch_new(c, "async:latch", &setter), DLOCK_OK);
    for (int i = 0; i < N; i++) assert_int_equal(dlock_latch_new(c, "async:latch", &l[i]), DLOCK_OK);
    int was_set;
    assert_int_equal(dlock_latch_set(setter, 2, &was_set), DLOCK_OK);
    assert_true(was_set);
    done d;
    done_init(&d);
    for (int i = 0; i < N / 2; i++)
        assert_int_equal(dlock_latch_await_async(l[i], DLOCK_WAIT_FOREVER, on_latch, &d), DLOCK_OK);
    assert_int_equal(dlock_latch_await_async(l[0], DLOCK_WAIT_FOREVER, on_latch, &d), DLOCK_ERR_INVALID);
    assert_int_equal(done_wait(&d, 1, 300), 0);
    long remaining;
    assert_int_equal(dlock_latch_count_down(setter, &remaining), DLOCK_OK);
    assert_int_equal(remaining, 1);
    /* One left: still shut, for the awaits begun before and after it. */
    for (int i = N / 2; i < N; i++)
        assert_int_equal(dlock_latch_await_async(l[i], DLOCK_WAIT_FOREVER, on_latch, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 300), 0);
    long long opened = now_ms();
    assert_int_equal(dlock_latch_count_down(setter, &remaining), DLOCK_OK);
    assert_int_equal(remaining, 0);
    assert_int_equal(done_wait(&d, N, 5000), N);
    assert_int_equal(d.st, DLOCK_OK);
    assert_true(d.at - opened < 1000); /* woken by the count-down, not a timer */

    /* Shut: runs out at its wait. Open (never set): at once. */
    assert_int_equal(dlock_latch_set(setter, 1, &was_set), DLOCK_OK);
    done_init(&d);
    long long start = now_ms();
    assert_int_equal(dlock_latch_await_async(l[0], 300, on_latch, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    assert_int_equal(d.st, DLOCK_ERR_TIMEOUT);
    assert_true(d.at - start >= 290);
    assert_int_equal(dlock_latch_count_down(setter, NULL), DLOCK_OK);
    done_init(&d);
    assert_int_equal(dlock_latch_await_async(l[1], 0, on_latch, &d), DLOCK_OK);
    assert_int_equal(done_wait(&d, 1, 5000), 1);
    assert_int_equal(d.st, DLOCK_OK);
    for (int i = 0; i < N; i++) dlock_latch_free(l[i]);
    dlock_latch_free(setter);
    dlock_client_free(c);
}

/* Calls that completions start are held back and sent together when the
 * completions have run (src/mux.c), and every one of them goes out and
 * keeps its meaning: from inside a callback, acquisitions of BURST names,
 * one of them held by another client (busy) and one stored as a plain
 * string (the script's error); then, from inside another callback, the
 * releases. Each gets what it would have got alone, in time, and the
 * holds are the server's with their tokens. After a script flush the
 * trigger is answered NOSCRIPT and run again by the slow lane, whose
 * thread then starts the calls: they go out at once. */
#define BURST 12
#define BURST_BUSY 3
#define BURST_WRONG 7

typedef struct burst {
    dlock_lock *locks[BURST];
    done acquired[BURST], released[BURST];
    dlock_status submitted[BURST];
    done started; /* the callback that started them returned */
} burst;

static void burst_acquire_all(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)l;
    burst *b = arg;
    for (int i = 0; i < BURST; i++)
        b->submitted[i] = dlock_lock_acquire_async(b->locks[i], 0, 10000, on_acquired, &b->acquired[i]);
    done_note(&b->started, st, token);
}

static void burst_release_all(dlock_lock *l, dlock_status st, void *arg)
{
    (void)l;
    burst *b = arg;
    for (int i = 0; i < BURST; i++)
        b->submitted[i] = b->acquired[i].st == DLOCK_OK
                              ? dlock_lock_release_async(b->locks[i], on_released, &b->released[i])
                              : DLOCK_OK;
    done_note(&b->started, st, 0);
}

static void run_burst(int flush_scripts)
{
    th_target_flush(&server); /* nothing left of a case before that failed */
    dlock_client *c = new_client(0), *other = new_client(0);
    burst *b = calloc(1, sizeof *b);
    assert_non_null(b);
    char name[64];
    dlock_lock *trigger, *taken;
    assert_int_equal(dlock_lock_new(c, "async:burst:trigger", &trigger), DLOCK_OK);
    for (int i = 0; i < BURST; i++) {
        snprintf(name, sizeof name, "async:burst:%d", i);
        assert_int_equal(dlock_lock_new(c, name, &b->locks[i]), DLOCK_OK);
        done_init(&b->acquired[i]);
        done_init(&b->released[i]);
    }
    snprintf(name, sizeof name, "async:burst:%d", BURST_BUSY);
    assert_int_equal(dlock_lock_new(other, name, &taken), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(taken, 0, 10000, NULL), DLOCK_OK);
    char wrong[64];
    snprintf(wrong, sizeof wrong, "dlock:{async:burst:%d}", BURST_WRONG);
    freeReplyObject(th_target_cmd(&server, wrong, "SET %s x", wrong));
    if (flush_scripts) freeReplyObject(th_target_cmd(&server, wrong, "SCRIPT FLUSH"));

    done_init(&b->started);
    assert_int_equal(dlock_lock_acquire_async(trigger, 0, 10000, burst_acquire_all, b), DLOCK_OK);
    assert_int_equal(done_wait(&b->started, 1, 10000), 1);
    assert_int_equal(b->started.st, DLOCK_OK);
    /* Nothing else is sent meanwhile: a call held back and never sent
     * would not be carried out by another's write. */
    for (int i = 0; i < BURST; i++) {
        assert_int_equal(b->submitted[i], DLOCK_OK);
        assert_int_equal(done_wait(&b->acquired[i], 1, 10000), 1);
    }
    for (int i = 0; i < BURST; i++) {
        if (i == BURST_BUSY) {
            assert_int_equal(b->acquired[i].st, DLOCK_ERR_TIMEOUT);
        } else if (i == BURST_WRONG) {
            assert_int_not_equal(b->acquired[i].st, DLOCK_OK);
            assert_non_null(strstr(b->acquired[i].error, "WRONGTYPE"));
        } else {
            if (b->acquired[i].st != DLOCK_OK) fail_msg("lock %d: %s", i, b->acquired[i].error);
            dlock_lock_info info;
            snprintf(name, sizeof name, "async:burst:%d", i);
            assert_int_equal(dlock_lock_inspect(c, name, &info), DLOCK_OK);
            assert_int_equal(info.held, 1);
            assert_int_equal(info.hold_count, 1);
            assert_true(b->acquired[i].token > 0);
            assert_true(info.last_token == b->acquired[i].token);
        }
    }
    done_init(&b->started);
    assert_int_equal(dlock_lock_release_async(trigger, burst_release_all, b), DLOCK_OK);
    assert_int_equal(done_wait(&b->started, 1, 10000), 1);
    for (int i = 0; i < BURST; i++) {
        if (b->acquired[i].st != DLOCK_OK) continue;
        assert_int_equal(b->submitted[i], DLOCK_OK);
        assert_int_equal(done_wait(&b->released[i], 1, 10000), 1);
        if (b->released[i].st != DLOCK_OK) fail_msg("release %d: %s", i, b->released[i].error);
    }
    for (int i = 0; i < BURST; i++) {
        if (i == BURST_WRONG) continue; /* not a lock */
        dlock_lock_info info;
        snprintf(name, sizeof name, "async:burst:%d", i);
        assert_int_equal(dlock_lock_inspect(c, name, &info), DLOCK_OK);
        assert_int_equal(info.held, i == BURST_BUSY);
    }

    assert_int_equal(dlock_lock_release(taken), DLOCK_OK);
    dlock_lock_free(taken);
    dlock_lock_free(trigger);
    for (int i = 0; i < BURST; i++) dlock_lock_free(b->locks[i]);
    dlock_client_free(other);
    dlock_client_free(c);
    free(b);
    th_target_flush(&server);
}

static void calls_started_by_callbacks_all_go_out_and_keep_their_meaning(void **state)
{
    (void)state;
    run_burst(0);
}

static void calls_started_by_callbacks_all_go_out_after_a_script_flush(void **state)
{
    (void)state;
    run_burst(1);
}

static void libuv_example_runs_every_job_through_the_lock(void **state)
{
    (void)state;
#ifndef DLOCK_EXAMPLE_LIBUV
    skip();
#else
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' '%s' 2>&1", DLOCK_EXAMPLE_LIBUV, server.url);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512];
    int holds = 0, ok = 0;
    while (fgets(line, sizeof line, p)) {
        fputs(line, stderr);
        if (strstr(line, "holds the lock, fencing token")) holds++;
        if (strncmp(line, "ok: 8 jobs", 10) == 0) ok = 1;
    }
    assert_int_equal(pclose(p), 0);
    assert_int_equal(holds, 8);
    assert_int_equal(ok, 1);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(async_acquire_and_release_leave_the_lock_free),
        cmocka_unit_test(async_holds_of_one_name_exclude_each_other_with_rising_tokens),
        cmocka_unit_test(async_fair_holds_exclude_each_other_with_rising_tokens),
        cmocka_unit_test(async_wait_is_woken_by_the_release),
        cmocka_unit_test(async_grant_answered_past_its_trusted_time_is_given_back),
        cmocka_unit_test(the_library_names_each_thread_it_starts),
        cmocka_unit_test(async_wait_on_a_lock_just_waited_on_attempts_once_and_is_still_woken),
        cmocka_unit_test(a_release_hands_the_lock_to_a_waiter_of_either_api_in_its_client),
        cmocka_unit_test(an_async_fair_release_hands_the_lock_to_a_waiting_thread_of_its_handle),
        cmocka_unit_test(an_async_waiter_is_handed_the_lock_by_another_process),
        cmocka_unit_test(an_async_fair_waiter_at_the_head_is_handed_the_lock_by_another_process),
        cmocka_unit_test(an_async_waiter_that_gave_up_gives_back_a_lock_handed_to_it),
        cmocka_unit_test(an_async_fair_waiter_that_gave_up_gives_back_a_lock_handed_to_it),
        cmocka_unit_test(an_acquire_made_as_an_async_wait_gives_up_is_not_given_back),
        cmocka_unit_test(async_wait_runs_out_with_timeout),
        cmocka_unit_test(a_newcomer_that_registers_as_an_async_waiter_leaves_is_woken_by_the_next_release),
        cmocka_unit_test(a_newcomer_that_registers_as_an_async_waiter_without_an_offer_leaves_is_woken_too),
        cmocka_unit_test(async_fair_waiters_get_the_lock_in_queue_order),
        cmocka_unit_test(async_hold_belongs_to_the_handle_and_reenters),
        cmocka_unit_test(second_async_call_on_a_handle_is_refused_while_one_is_in_flight),
        cmocka_unit_test(async_hold_is_renewed_and_its_loss_reported),
        cmocka_unit_test(client_free_ends_a_waiting_async_acquire),
        cmocka_unit_test(async_rw_holds_never_put_a_reader_beside_a_writer),
        cmocka_unit_test(async_semaphore_never_admits_more_holders_than_permits),
        cmocka_unit_test(async_reader_waits_for_the_writer_and_is_woken),
        cmocka_unit_test(drain_ends_waits_and_leaves_the_synchronous_api_working),
        cmocka_unit_test(async_replica_safe_acquire_waits_for_replicas),
        cmocka_unit_test(async_latch_await_opens_at_zero_and_runs_out_when_shut),
        cmocka_unit_test(calls_started_by_callbacks_all_go_out_and_keep_their_meaning),
        cmocka_unit_test(calls_started_by_callbacks_all_go_out_after_a_script_flush),
        cmocka_unit_test(libuv_example_runs_every_job_through_the_lock),
    };
    return th_target_run_suite(tests, &server);
}
