/*
 * Fair lock against real servers (one server, Sentinel or
 * Cluster: target.h): FIFO across processes, a dead
 * waiter skipped once its timeout passes, a waiter that gives up leaving
 * the queue, a release waking only the head waiter, and handing the lock
 * to a thread of its own client at the head without a message, never
 * past the head, or to the head in another process that listens.
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
#include "th_lock.h"

static th_target server;

/* A client of `url` (a server of the test's own) with fair_waiter_timeout_ms. */
static dlock_client *client_of(const char *url, long fair_timeout)
{
    dlock_options o = {0};
    o.fair_waiter_timeout_ms = fair_timeout;
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(url, &o, &c), DLOCK_OK);
    return c;
}

static dlock_client *new_client(long fair_timeout)
{
    return client_of(server.url, fair_timeout);
}

static long long queue_length(const char *name)
{
    char key[160];
    snprintf(key, sizeof key, "dlock:{%s}:q", name);
    redisReply *r = th_target_cmd(&server, key, "LLEN %s", key);
    long long n = r ? r->integer : -1;
    freeReplyObject(r);
    return n;
}

/* Wait until the queue has `n` waiters, so children enter in a known order. */
static void wait_queue(const char *name, long long n)
{
    long long t0 = th_now_ms();
    while (queue_length(name) != n && th_now_ms() - t0 < 5000) usleep(2000);
    assert_int_equal(queue_length(name), n);
}

/* A holder of `name` notes its index in "order:NAME", so a test can read
 * back the order in which the lock was held. */
static void note_order(const char *name, int index)
{
    char key[160];
    snprintf(key, sizeof key, "order:%s", name);
    redisContext *rc = th_target_connect(&server, key);
    freeReplyObject(redisCommand(rc, "RPUSH %s %d", key, index));
    redisFree(rc);
}

/* Child: wait for the fair lock, record our index, hold briefly, release. */
static pid_t spawn_waiter(const char *name, int index, long fair_timeout, long wait_ms)
{
    pid_t pid = fork();
    if (pid == 0) {
        dlock_options o = {0};
        o.fair_waiter_timeout_ms = fair_timeout;
        dlock_client *c;
        dlock_lock *l;
        if (dlock_client_new(server.url, &o, &c) || dlock_lock_new_fair(c, name, &l)) _exit(2);
        dlock_status st = dlock_lock_acquire(l, wait_ms, 30000, NULL);
        if (st == DLOCK_ERR_TIMEOUT) _exit(75);
        if (st != DLOCK_OK) _exit(3);
        note_order(name, index);
        usleep(20000);
        if (dlock_lock_release(l) != DLOCK_OK) _exit(4);
        dlock_lock_free(l);
        dlock_client_free(c);
        _exit(0);
    }
    return pid;
}

static void reap_ok(pid_t pid)
{
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void fair_lock_grants_in_arrival_order_across_processes(void **state)
{
    (void)state;
    enum { WAITERS = 6 };
    dlock_client *c = new_client(0);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new_fair(c, "fifo", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
    pid_t pids[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
        pids[i] = spawn_waiter("fifo", i, 0, 20000);
        wait_queue("fifo", i + 1);
    }
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    for (int i = 0; i < WAITERS; i++) reap_ok(pids[i]);
    redisReply *r = th_target_cmd(&server, "order:fifo", "LRANGE order:fifo 0 -1");
    assert_int_equal(r->elements, WAITERS);
    for (int i = 0; i < WAITERS; i++) assert_int_equal(atoi(r->element[i]->str), i);
    freeReplyObject(r);
    assert_int_equal(queue_length("fifo"), 0);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* The head waiter is SIGKILLed; the one behind it gets the lock once the
 * dead one's deadline (600 ms after its last retry, so at most 600 ms
 * after the kill) has passed, plus at most one of its own retries (every
 * 300 ms): well under 1500 ms from the kill. Neither the queue keys'
 * expiry (they are refreshed by the live waiter) nor the 2 s cap on one
 * sleep could explain that; only dropping the dead head can. */
static void dead_fair_waiter_is_skipped_after_its_timeout(void **state)
{
    (void)state;
    dlock_client *c = new_client(600);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new_fair(c, "dead", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
    pid_t dead = spawn_waiter("dead", 0, 600, 20000);
    wait_queue("dead", 1);
    pid_t alive = spawn_waiter("dead", 1, 600, 20000);
    wait_queue("dead", 2);
    long long t0 = th_now_ms();
    kill(dead, SIGKILL);
    waitpid(dead, NULL, 0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    reap_ok(alive);
    long long took = th_now_ms() - t0;
    if (took >= 1500) fail_msg("the live waiter got the lock %lld ms after the head died", took);
    redisReply *r = th_target_cmd(&server, "order:dead", "LRANGE order:dead 0 -1");
    assert_int_equal(r->elements, 1);
    assert_string_equal(r->element[0]->str, "1");
    freeReplyObject(r);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* A waiter whose wait ends leaves the queue itself; the waiter behind it
 * is not held up until the leaver's (long) deadline. */
static void waiter_that_gives_up_leaves_the_queue(void **state)
{
    (void)state;
    dlock_client *c = new_client(10000);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new_fair(c, "leave", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
    pid_t quitter = spawn_waiter("leave", 0, 10000, 400);
    wait_queue("leave", 1);
    pid_t patient = spawn_waiter("leave", 1, 10000, 20000);
    wait_queue("leave", 2);
    int st;
    assert_int_equal(waitpid(quitter, &st, 0), quitter);
    assert_int_equal(WEXITSTATUS(st), 75);
    assert_int_equal(queue_length("leave"), 1);
    long long t0 = th_now_ms();
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    reap_ok(patient);
    assert_true(th_now_ms() - t0 < 1500);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* Five waiters with a 10 s waiter timeout sleep without retrying. One
 * release must cost about one acquire attempt (the head's), not five. */
static void release_wakes_only_the_head_waiter(void **state)
{
    (void)state;
    enum { WAITERS = 5 };
    dlock_client *c = new_client(10000);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new_fair(c, "head", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
    pid_t pids[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
        /* Children hold for 20 ms and release: the chain is observable. */
        pids[i] = spawn_waiter("head", i, 10000, 20000);
        wait_queue("head", i + 1);
    }
    usleep(200000); /* every waiter is asleep now */
    long long before = th_target_calls(&server, "evalsha");
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    for (int i = 0; i < WAITERS; i++) reap_ok(pids[i]);
    long long used = th_target_calls(&server, "evalsha") - before;
    /* Per hand-off: one release and one acquire, plus the first release.
     * A herd would add up to WAITERS-1 failed attempts per hand-off. */
    assert_true(used <= 2 * WAITERS + 2);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* The head waiter is paused (SIGSTOP) but within its deadline when the
 * lock is released: a newcomer trying once must not jump the queue, and
 * the head gets the lock once it runs again. */
static void newcomer_cannot_jump_the_queue(void **state)
{
    (void)state;
    dlock_client *c = new_client(4000);
    dlock_lock *l, *newcomer;
    assert_int_equal(dlock_lock_new_fair(c, "jump", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
    pid_t head = spawn_waiter("jump", 0, 4000, 20000);
    wait_queue("jump", 1);
    kill(head, SIGSTOP);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client *c2 = new_client(4000);
    assert_int_equal(dlock_lock_new_fair(c2, "jump", &newcomer), DLOCK_OK);
    dlock_status st = dlock_lock_acquire(newcomer, 0, 30000, NULL);
    /* Resume the head before asserting, so a failure leaves no stopped child. */
    kill(head, SIGCONT);
    assert_int_equal(st, DLOCK_ERR_TIMEOUT);
    reap_ok(head);
    redisReply *r = th_target_cmd(&server, "order:jump", "LRANGE order:jump 0 -1");
    assert_int_equal(r->elements, 1);
    freeReplyObject(r);
    /* With the queue empty, the newcomer now gets it at once. */
    assert_int_equal(dlock_lock_acquire(newcomer, 0, 30000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(newcomer), DLOCK_OK);
    dlock_lock_free(newcomer);
    dlock_client_free(c2);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* A thread of the test's own client waiting for the fair lock on `l`,
 * then noting `index` (note_order) and releasing, as spawn_waiter's
 * children do. */
struct own_waiter {
    dlock_lock *l;
    const char *name;
    int index;
    long wait_ms;
    dlock_status st;
    uint64_t token;
};

static void *own_waiter_main(void *arg)
{
    struct own_waiter *w = arg;
    w->st = dlock_lock_acquire(w->l, w->wait_ms, 30000, &w->token);
    if (w->st != DLOCK_OK) return NULL;
    note_order(w->name, w->index);
    w->st = dlock_lock_release(w->l);
    return NULL;
}

static long long published(void)
{
    return th_target_calls(&server, "publish") + th_target_calls(&server, "spublish");
}

/* The direct hand-off (fair_release.lua): a release whose queue's head is
 * a sleeping thread of its own client takes the lock for it in the same
 * script. The thread returns holding it, with a newer token, having made
 * no attempt after the release, and nothing is published: two scripts
 * for the hand-off and the thread's own release, where the wake-up by
 * message costs three and a PUBLISH. (Sentinel sends its own PUBLISHes to
 * the master every 2 s, so there only the scripts are counted.) */
static void a_release_hands_the_lock_to_a_thread_of_its_client_at_the_head(void **state)
{
    (void)state;
    dlock_client *c = new_client(10000);
    dlock_lock *l;
    uint64_t mine;
    assert_int_equal(dlock_lock_new_fair(c, "own-head", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, &mine), DLOCK_OK);
    struct own_waiter w = {l, "own-head", 0, 20000, DLOCK_ERR_SYS, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, own_waiter_main, &w), 0);
    wait_queue("own-head", 1);
    usleep(200000); /* asleep */
    long long scripts = th_target_calls(&server, "evalsha"), messages = published();
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    pthread_join(th, NULL);
    assert_int_equal(w.st, DLOCK_OK);
    assert_true(w.token > mine);
    scripts = th_target_calls(&server, "evalsha") - scripts;
    messages = published() - messages;
    if (scripts != 2) fail_msg("%lld scripts for the hand-off and the release after it", scripts);
    if (messages != 0 && server.kind != TH_TARGET_SENTINEL) fail_msg("%lld messages published", messages);
    assert_int_equal(queue_length("own-head"), 0);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* The releaser's guess (its own longest waiting thread) is not the head:
 * a process that joined the queue first is. The lock goes to that
 * process, then to the thread: the queue's order, not the client's. */
static void a_hand_off_within_a_client_never_passes_the_head_of_another_process(void **state)
{
    (void)state;
    dlock_client *c = new_client(10000);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new_fair(c, "own-second", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
    pid_t head = spawn_waiter("own-second", 0, 10000, 20000);
    wait_queue("own-second", 1);
    struct own_waiter w = {l, "own-second", 1, 20000, DLOCK_ERR_SYS, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, own_waiter_main, &w), 0);
    wait_queue("own-second", 2);
    usleep(200000); /* both asleep */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    reap_ok(head);
    pthread_join(th, NULL);
    assert_int_equal(w.st, DLOCK_OK);
    redisReply *r = th_target_cmd(&server, "order:own-second", "LRANGE order:own-second 0 -1");
    assert_int_equal(r->elements, 2);
    if (atoi(r->element[0]->str) != 0) fail_msg("the thread of the releaser's client got the lock first");
    freeReplyObject(r);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* A waiter that gives up while the lock names it, as a hand-off of its
 * own client whose answer was lost would leave it (here the owner is
 * written by hand, unseen by the waiter, which sleeps to its deadline):
 * it gives the lock back as it leaves the queue (fair_leave.lua), which
 * wakes the queue's head, so that waiter gets it at once, not after the
 * 30 s lease. The head joins first: a child process can take seconds to
 * start (TLS, Sentinel, sanitizers), longer than the quitter's wait. */
static void a_waiter_that_gives_up_gives_back_a_lock_that_names_it(void **state)
{
    (void)state;
    dlock_client *c = new_client(10000), *c2 = new_client(10000);
    dlock_lock *holder, *quitter;
    assert_int_equal(dlock_lock_new_fair(c2, "give-back", &holder), DLOCK_OK);
    assert_int_equal(dlock_lock_new_fair(c, "give-back", &quitter), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(holder, 0, 30000, NULL), DLOCK_OK);
    pid_t patient = spawn_waiter("give-back", 0, 10000, 20000);
    wait_queue("give-back", 1);
    struct own_waiter w = {quitter, "give-back", 1, 1500, DLOCK_ERR_SYS, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, own_waiter_main, &w), 0);
    wait_queue("give-back", 2);
    redisReply *r = th_target_cmd(&server, "dlock:{give-back}:q", "LINDEX dlock:{give-back}:q 1");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char owner[128];
    snprintf(owner, sizeof owner, "%s", r->str);
    freeReplyObject(r);
    assert_memory_equal(owner, dlock_client_id(c), strlen(dlock_client_id(c)));
    /* Asleep: its attempt once subscribed is made (one after that would
     * find itself the owner and take the lock), its timed retry (2 s) is
     * past its deadline. */
    usleep(400000);
    freeReplyObject(th_target_cmd(&server, "dlock:{give-back}", "HSET dlock:{give-back} owner %s", owner));
    pthread_join(th, NULL);
    assert_int_equal(w.st, DLOCK_ERR_TIMEOUT);
    long long t0 = th_now_ms();
    reap_ok(patient);
    if (th_now_ms() - t0 > 1500) fail_msg("the head got the lock %lld ms later", th_now_ms() - t0);
    assert_int_not_equal(dlock_lock_release(holder), DLOCK_OK); /* its hold was taken from it by hand */
    dlock_lock_free(holder);
    dlock_lock_free(quitter);
    dlock_client_free(c2);
    dlock_client_free(c);
}

/* The hand-off between processes (fair_release.lua): the queue's head,
 * a thread of another client, offered when it queued, and the release
 * grants it the lock in its own script and tells it so on its channel.
 * Each round: the lock names the waiter the moment the release returns,
 * the release is the only script from there to the waiter's hold (its
 * own attempt would be a second), one message is published, and the
 * hold is the waiter's: a newer token, count 1, its own 7 s lease. */
static void a_release_hands_the_lock_to_the_head_in_another_process(void **state)
{
    (void)state;
    enum { REPS = 5 };
    dlock_client *c = new_client(10000), *other = new_client(10000), *look = new_client(10000);
    dlock_lock *l, *theirs;
    assert_int_equal(dlock_lock_new_fair(c, "fair-handover", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_new_fair(other, "fair-handover", &theirs), DLOCK_OK);
    for (int i = 0; i < REPS; i++) {
        uint64_t mine;
        assert_int_equal(dlock_lock_acquire(l, 0, 30000, &mine), DLOCK_OK);
        th_waiter w;
        th_waiter_start(&w, theirs, 10000, 7000);
        wait_queue("fair-handover", 1);
        usleep(200000); /* asleep, subscribed, its offer made */
        long long scripts = th_target_calls(&server, "evalsha"), messages = published();
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        dlock_lock_info at_release, held;
        assert_int_equal(dlock_lock_inspect(look, "fair-handover", &at_release), DLOCK_OK);
        th_waiter_wait(&w);
        scripts = th_target_calls(&server, "evalsha") - scripts - 1; /* not the inspect */
        messages = published() - messages;
        assert_int_equal(dlock_lock_inspect(look, "fair-handover", &held), DLOCK_OK);
        th_waiter_finish(&w);
        assert_int_equal(w.st, DLOCK_OK);
        assert_int_equal(w.released, DLOCK_OK);
        if (!at_release.held) fail_msg("round %d: the lock was free after the release, not handed over", i);
        if (scripts != 1) fail_msg("round %d: %lld scripts from the release to the waiter's hold", i, scripts);
        if (messages != 1 && server.kind != TH_TARGET_SENTINEL) fail_msg("round %d: %lld messages", i, messages);
        assert_true(w.token > mine);
        assert_int_equal((long long)at_release.last_token, (long long)w.token);
        assert_int_equal(held.held, 1);
        assert_int_equal(held.hold_count, 1);
        assert_true(held.ttl_ms > 5000 && held.ttl_ms <= 7000);
        assert_int_equal(queue_length("fair-handover"), 0);
    }
    dlock_lock_free(theirs);
    dlock_lock_free(l);
    dlock_client_free(look);
    dlock_client_free(other);
    dlock_client_free(c);
}

/* A head that offered but does not listen on the server (a process that
 * died: here one made up in the queue, its deadlines and its offers,
 * whose channel nobody listens on) is not handed the lock: the release
 * wakes it as before, and the live waiter behind it gets the lock once
 * the dead one's deadline (1.5 s) has passed. Handed to the dead one,
 * the lock would be held for its 20 s lease, past the live waiter's
 * 10 s wait. */
static void a_release_does_not_hand_the_lock_to_a_head_that_does_not_listen(void **state)
{
    (void)state;
    dlock_client *c = new_client(2000), *other = new_client(2000);
    dlock_lock *l, *theirs;
    assert_int_equal(dlock_lock_new_fair(c, "fair-gone", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_new_fair(other, "fair-gone", &theirs), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, NULL), DLOCK_OK);
    redisReply *t = th_target_cmd(&server, "dlock:{fair-gone}", "TIME");
    assert_non_null(t);
    long long now_ms = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    freeReplyObject(t);
    const char *dead = "deadbeef:1:1";
    freeReplyObject(th_target_cmd(&server, "dlock:{fair-gone}", "RPUSH dlock:{fair-gone}:q %s", dead));
    freeReplyObject(
        th_target_cmd(&server, "dlock:{fair-gone}", "ZADD dlock:{fair-gone}:qt %lld %s", now_ms + 1500, dead));
    freeReplyObject(th_target_cmd(&server, "dlock:{fair-gone}", "HSET dlock:{fair-gone}:qo %s %s", dead,
                                  "20000 0 1 1 deadbeef:1:1"));
    struct own_waiter w = {theirs, "fair-gone", 0, 10000, DLOCK_ERR_SYS, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, own_waiter_main, &w), 0);
    wait_queue("fair-gone", 2);
    usleep(200000); /* asleep, behind the dead head */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_info at_release;
    assert_int_equal(dlock_lock_inspect(c, "fair-gone", &at_release), DLOCK_OK);
    pthread_join(th, NULL);
    if (at_release.held) fail_msg("the release handed the lock to a head that does not listen");
    assert_int_equal(w.st, DLOCK_OK);
    dlock_lock_free(theirs);
    dlock_lock_free(l);
    dlock_client_free(other);
    dlock_client_free(c);
}

static void fair_lock_is_reentrant_with_rising_tokens(void **state)
{
    (void)state;
    dlock_client *c = new_client(0);
    dlock_lock *l;
    uint64_t a = 0, b = 0, d = 0;
    assert_int_equal(dlock_lock_new_fair(c, "fair-reenter", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, &a), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, &b), DLOCK_OK);
    assert_true(a == b && a > 0);
    dlock_lock_info info;
    assert_int_equal(dlock_lock_inspect(c, "fair-reenter", &info), DLOCK_OK);
    assert_int_equal(info.hold_count, 2);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_ERR_NOT_OWNER);
    assert_int_equal(dlock_lock_acquire(l, 0, 1000, &d), DLOCK_OK);
    assert_true(d > a);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* Tokens come from a counter floored at the server's clock
 * (src/lua/lib/fence.lua): a restart without persistence wipes the
 * counter, and the next token must still be above every earlier one. */
static void fair_tokens_rise_across_a_redis_restart(void **state)
{
    (void)state;
    th_target_require_single(&server); /* its own server, restarted */
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    dlock_client *c = client_of(r.url, 0);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new_fair(c, "fair-restart", &l), DLOCK_OK);
    uint64_t before = 0, after = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dlock_lock_acquire(l, 0, 5000, &before), DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    char *fence = dlock__fence_key("fair-restart");
    assert_int_equal(th_redis_restart_wiped(&r, fence), 0);
    free(fence);
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, &after), DLOCK_OK);
    assert_true(after > before);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_free(c);
    th_redis_stop(&r);
}

/* As a_grant_answered_past_its_trusted_time_is_given_back (test_lock),
 * for the fair lock: a grant of a 100 ms lease answered 600 ms late (the
 * server paused with the acquire in its socket) is given back and fails
 * with DLOCK_ERR_LOST; another client takes the lock at once. */
static void fair_grant_answered_past_its_trusted_time_is_given_back(void **state)
{
    (void)state;
    dlock_options o = {0};
    o.command_timeout_ms = 3000;
    dlock_client *c = NULL, *other = new_client(0);
    assert_int_equal(dlock_client_new(server.url, &o, &c), DLOCK_OK);
    dlock_lock *l, *l2;
    assert_int_equal(dlock_lock_new_fair(c, "fair-late", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_new_fair(other, "fair-late", &l2), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_OK); /* connected, routed */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_pause_timer pt;
    assert_int_equal(th_target_pause_for(&server, "dlock:{fair-late}", 600, &pt), 0);
    dlock_status st = dlock_lock_acquire(l, 0, 100, NULL);
    char why[512];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    assert_int_equal(th_target_pause_join(&pt), 0);
    if (st != DLOCK_ERR_LOST) fail_msg("fair acquire answered after the pause: %d (%s)", st, why);
    assert_non_null(strstr(why, "given back"));
    assert_int_equal(dlock_lock_acquire(l2, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
    dlock_lock_free(l2);
    dlock_lock_free(l);
    dlock_client_free(other);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fair_tokens_rise_across_a_redis_restart),
        cmocka_unit_test(fair_lock_grants_in_arrival_order_across_processes),
        cmocka_unit_test(dead_fair_waiter_is_skipped_after_its_timeout),
        cmocka_unit_test(fair_grant_answered_past_its_trusted_time_is_given_back),
        cmocka_unit_test(waiter_that_gives_up_leaves_the_queue),
        cmocka_unit_test(release_wakes_only_the_head_waiter),
        cmocka_unit_test(newcomer_cannot_jump_the_queue),
        cmocka_unit_test(a_release_hands_the_lock_to_a_thread_of_its_client_at_the_head),
        cmocka_unit_test(a_hand_off_within_a_client_never_passes_the_head_of_another_process),
        cmocka_unit_test(a_waiter_that_gives_up_gives_back_a_lock_that_names_it),
        cmocka_unit_test(a_release_hands_the_lock_to_the_head_in_another_process),
        cmocka_unit_test(a_release_does_not_hand_the_lock_to_a_head_that_does_not_listen),
        cmocka_unit_test(fair_lock_is_reentrant_with_rising_tokens),
    };
    return th_target_run_suite(tests, &server);
}
