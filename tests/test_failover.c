/*
 * Failovers and slot migrations under load, on real Redis Cluster and
 * Sentinel topologies (scripts/redis-topology.sh through th_topology.h).
 *
 * A load of worker threads takes and releases locks on many names while a
 * master is killed, or while a lock's slot is migrated. For every grant we
 * check, outside Redis, whether another thread was already inside that
 * name's critical section (a double grant), and whether its fencing token
 * rose above the name's previous one. Each case prints one JSON line with
 * what it measured (recovery time, failed calls, double grants); the
 * numbers are recorded in docs/TOPOLOGIES.md.
 *
 * What is asserted is what the library promises (docs/design/routing.md
 * and docs/design/locks.md):
 *  - the lock is usable again after a failover, with no help from the
 *    caller beyond its normal wait;
 *  - fencing tokens keep rising across it, for every name;
 *  - with replica-safe acquire (replica_acks = 1) no lock is ever granted
 *    twice, because every grant reached the replica that gets promoted;
 *  - a watchdog-held lock outlives a failover, renewed on the new master;
 *  - a slot migration is invisible to callers: no error, no double grant;
 *  - on Sentinel, a killed master that comes back (still believing it is a
 *    master, with old data) is never used;
 *  - a hold of ours that a failover brings back after we released it is
 *    granted afresh, with a token above every one issued meanwhile.
 * Without replica_acks a double grant is possible (asynchronous
 * replication); it is measured and printed, not asserted away.
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
#include "harness.h"
#include "th_lock.h"
#include "th_topology.h"

#define WORKERS 8
#define NAMES 16
#define FAILOVER_BOUND_MS 30000
/* A returning old master is demoted only after the Sentinels have seen it
 * report itself a master for a while (four publish periods: 8 s). */
#define DEMOTION_BOUND_MS 60000

static const th_topology_opts opts = {.node_timeout_ms = 1000, .down_after_ms = 1000, .failover_timeout_ms = 3000};

/* ------------------------------------------------------------------------ */
/* The load                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct load {
    dlock_client *client;
    dlock_lock *lock[NAMES];
    char name[NAMES][32];
    int watched[NAMES];       /* names served by the node we will kill (all on Sentinel) */
    atomic_int inside[NAMES]; /* threads inside the name's critical section */
    pthread_mutex_t mu[NAMES];
    uint64_t last_token[NAMES];
    long lease_ms, wait_ms;
    atomic_int stop;
    atomic_llong kill_ms;      /* when the master was killed (0: not yet) */
    atomic_llong recovered_ms; /* first grant on a watched name after that */
    atomic_long granted, failed, double_grants, token_regressions, release_failed, release_lost;
    pthread_mutex_t err_mu;
    char first_error[256]; /* the first failure's message, for the report */
    pthread_t th[WORKERS];
} load;

static void note_error(load *L, const char *what)
{
    pthread_mutex_lock(&L->err_mu);
    if (!L->first_error[0]) snprintf(L->first_error, sizeof L->first_error, "%s: %s", what, dlock_last_error());
    pthread_mutex_unlock(&L->err_mu);
}

/* Release as a careful caller does: a release that failed for want of a
 * server leaves the hold in place, so it is tried again until the server
 * answers (released, or found lost). */
static void release(load *L, int n)
{
    long long t0 = th_now_ms();
    for (int tries = 0;; tries++) {
        dlock_status st = dlock_lock_release(L->lock[n]);
        if (st == DLOCK_OK) return;
        if (st == DLOCK_ERR_NOT_OWNER || st == DLOCK_ERR_LOST) {
            atomic_fetch_add(&L->release_lost, 1);
            return;
        }
        if (tries == 0) {
            atomic_fetch_add(&L->release_failed, 1);
            note_error(L, "release");
        }
        if (th_now_ms() - t0 > 20000) fail_msg("release kept failing: %s", dlock_last_error());
        struct timespec pause = {0, 50000000};
        nanosleep(&pause, NULL);
    }
}

static void *worker(void *arg)
{
    load *L = arg;
    unsigned seed = (unsigned)(uintptr_t)pthread_self();
    while (!atomic_load(&L->stop)) {
        int n = (int)(rand_r(&seed) % NAMES);
        uint64_t token = 0;
        long long began = th_now_ms();
        dlock_status st = dlock_lock_acquire(L->lock[n], L->wait_ms, L->lease_ms, &token);
        if (st != DLOCK_OK) {
            atomic_fetch_add(&L->failed, 1);
            note_error(L, "acquire");
            continue;
        }
        atomic_fetch_add(&L->granted, 1);
        /* Recovered: a grant on a name of the dead master, asked for after
         * it was dead, so it can only have come from its successor. */
        long long killed = atomic_load(&L->kill_ms);
        if (killed && began >= killed && L->watched[n] && atomic_load(&L->recovered_ms) == 0)
            atomic_store(&L->recovered_ms, th_now_ms());
        if (atomic_fetch_add(&L->inside[n], 1) != 0) atomic_fetch_add(&L->double_grants, 1);
        pthread_mutex_lock(&L->mu[n]);
        if (token <= L->last_token[n]) atomic_fetch_add(&L->token_regressions, 1);
        if (token > L->last_token[n]) L->last_token[n] = token;
        pthread_mutex_unlock(&L->mu[n]);
        struct timespec hold = {0, 1000000};
        nanosleep(&hold, NULL);
        atomic_fetch_sub(&L->inside[n], 1);
        release(L, n);
    }
    return NULL;
}

/* The load running now, if any: a case whose assertion fails leaves its
 * function at once, with the workers still running on its load. */
static load *running;

/* The workers' lease. The slot migration's case makes it 30 s: an acquire
 * that meets the migration is retried until its keys are on one node,
 * and its grant is trusted from the first send, which a loaded machine
 * has put 5 s back (the grant then rightly given back, DLOCK_ERR_LOST). */
static long load_lease_ms = 5000;

static void load_start(load *L, const char *url, int replica_acks, const char *prefix, long wait_ms)
{
    memset(L, 0, sizeof *L);
    running = L;
    dlock_options o = {0};
    o.replica_acks = replica_acks;
    o.replica_timeout_ms = replica_acks ? 500 : 0;
    assert_int_equal(dlock_client_new(url, &o, &L->client), DLOCK_OK);
    L->lease_ms = load_lease_ms;
    L->wait_ms = wait_ms;
    pthread_mutex_init(&L->err_mu, NULL);
    for (int i = 0; i < NAMES; i++) {
        snprintf(L->name[i], sizeof L->name[i], "%s-%d", prefix, i);
        assert_int_equal(dlock_lock_new(L->client, L->name[i], &L->lock[i]), DLOCK_OK);
        pthread_mutex_init(&L->mu[i], NULL);
    }
    for (int i = 0; i < WORKERS; i++) assert_int_equal(pthread_create(&L->th[i], NULL, worker, L), 0);
}

static void load_stop(load *L)
{
    running = NULL;
    atomic_store(&L->stop, 1);
    for (int i = 0; i < WORKERS; i++) pthread_join(L->th[i], NULL);
    for (int i = 0; i < NAMES; i++) {
        dlock_lock_free(L->lock[i]);
        pthread_mutex_destroy(&L->mu[i]);
    }
    pthread_mutex_destroy(&L->err_mu);
    dlock_client_free(L->client);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long long granted_now(load *L)
{
    return atomic_load(&L->granted);
}

/* Grants keep coming after the failover: wait (bounded) for `more`. */
static void expect_progress(load *L, long more, long within_ms)
{
    long long from = granted_now(L), t0 = th_now_ms();
    while (granted_now(L) < from + more && th_now_ms() - t0 < within_ms) sleep_ms(20);
    assert_true(granted_now(L) >= from + more);
}

static void report(const char *topology, const char *event, int replica_acks, load *L, long long kill_ms,
                   long long restored_ms)
{
    long long rec = atomic_load(&L->recovered_ms);
    printf("{\"case\":\"%s-%s\",\"replica_acks\":%d,\"failover_ms\":%lld,\"recovery_ms\":%lld,"
           "\"granted\":%ld,\"failed\":%ld,\"double_grants\":%ld,\"token_regressions\":%ld,"
           "\"releases_found_lost\":%ld,\"releases_retried\":%ld,\"first_error\":\"%s\"}\n",
           topology, event, replica_acks, restored_ms - kill_ms, rec ? rec - kill_ms : -1, atomic_load(&L->granted),
           atomic_load(&L->failed), atomic_load(&L->double_grants), atomic_load(&L->token_regressions),
           atomic_load(&L->release_lost), atomic_load(&L->release_failed), L->first_error);
    fflush(stdout);
}

/* What every failover case asserts. */
static void expect_safe_recovery(load *L, int replica_acks)
{
    assert_int_equal(atomic_load(&L->token_regressions), 0);
    assert_true(atomic_load(&L->recovered_ms) > 0);
    if (replica_acks) assert_int_equal(atomic_load(&L->double_grants), 0);
}

/* ------------------------------------------------------------------------ */
/* Cluster                                                                   */
/* ------------------------------------------------------------------------ */

static void cluster_failover(int replica_acks)
{
    th_topology t;
    assert_int_equal(th_cluster_start(&t, &opts), 0);
    static load L; /* static: outlives a failed assertion, see stop_leftover_load */
    load_start(&L, t.url, replica_acks, replica_acks ? "cfa" : "cf", 10000);
    char key[64];
    snprintf(key, sizeof key, "dlock:{%s}", L.name[0]);
    int victim = th_cluster_key_owner(&t, key);
    assert_true(victim > 0);
    int watched = 0;
    for (int i = 0; i < NAMES; i++) {
        snprintf(key, sizeof key, "dlock:{%s}", L.name[i]);
        L.watched[i] = th_cluster_key_owner(&t, key) == victim;
        watched += L.watched[i];
    }
    assert_true(watched > 0);
    expect_progress(&L, 200, 10000);

    assert_int_equal(th_node_kill(&t, victim), 0);
    long long kill_ms = th_now_ms();
    atomic_store(&L.kill_ms, kill_ms);
    int promoted = th_cluster_wait_failover(&t, victim, FAILOVER_BOUND_MS);
    long long restored_ms = th_now_ms();
    assert_true(promoted > 0);
    if (replica_acks) {
        /* The promoted master has no replica: replica-safe acquire refuses
         * every lock there (safety first) until one is back. */
        assert_int_equal(th_node_restart(&t, victim), 0);
        assert_int_equal(th_node_wait_role(&t, victim, TH_REPLICA, FAILOVER_BOUND_MS), 0);
    }
    expect_progress(&L, 200, 15000);
    long long t0 = th_now_ms();
    while (atomic_load(&L.recovered_ms) == 0 && th_now_ms() - t0 < 15000) sleep_ms(20);
    load_stop(&L);
    report("cluster", "master-killed", replica_acks, &L, kill_ms, restored_ms);
    expect_safe_recovery(&L, replica_acks);
    th_cluster_stop(&t);
}

static void cluster_failover_keeps_locks_usable_and_fenced(void **state)
{
    (void)state;
    cluster_failover(0);
}

static void cluster_failover_with_replica_acks_never_grants_twice(void **state)
{
    (void)state;
    cluster_failover(1);
}

/* Move the slot of one busy lock to another master, a key at a time with
 * pauses, while workers contend for that lock (so waiters are subscribed
 * to its channel on the old node) and for others. No caller may see an
 * error, and nobody may be granted a lock twice. */
static void cluster_slot_migration_is_invisible_to_callers(void **state)
{
    (void)state;
    th_topology t;
    assert_int_equal(th_cluster_start(&t, &opts), 0);
    static load L; /* static: outlives a failed assertion, see stop_leftover_load */
    load_lease_ms = 30000;
    load_start(&L, t.url, 0, "mig", 20000);
    load_lease_ms = 5000;
    expect_progress(&L, 200, 10000);
    char key[64];
    snprintf(key, sizeof key, "dlock:{%s}", L.name[3]);
    int slot = th_key_slot(key, strlen(key));
    int from = th_cluster_slot_owner(&t, slot), masters[3], to = -1;
    int nm = th_topology_masters(&t, masters, 3);
    for (int i = 0; i < nm; i++)
        if (masters[i] != from) to = masters[i];
    assert_true(from > 0 && to > 0);
    for (int round = 0; round < 2; round++) {
        th_migration m;
        assert_int_equal(th_migration_begin(&m, &t, slot, to), 0);
        sleep_ms(150);
        int moved;
        while ((moved = th_migration_step(&m, 1)) > 0) sleep_ms(150);
        assert_int_equal(moved, 0);
        sleep_ms(150);
        assert_int_equal(th_migration_finish(&m), 0);
        expect_progress(&L, 100, 10000);
        int back = to;
        to = from;
        from = back; /* and back again */
    }
    load_stop(&L);
    printf("{\"case\":\"cluster-slot-migrated-twice\",\"granted\":%ld,\"failed\":%ld,\"double_grants\":%ld,"
           "\"releases_found_lost\":%ld,\"releases_retried\":%ld,\"first_error\":\"%s\"}\n",
           atomic_load(&L.granted), atomic_load(&L.failed), atomic_load(&L.double_grants), atomic_load(&L.release_lost),
           atomic_load(&L.release_failed), L.first_error);
    assert_int_equal(atomic_load(&L.failed), 0);
    assert_int_equal(atomic_load(&L.release_failed), 0);
    assert_int_equal(atomic_load(&L.release_lost), 0);
    assert_int_equal(atomic_load(&L.double_grants), 0);
    assert_int_equal(atomic_load(&L.token_regressions), 0);
    th_cluster_stop(&t);
}

/* A waiter whose pub/sub link sits on a node that is not the master (here
 * the old master, demoted by a manual failover; in the torture run a
 * killed master that came back) still hears what the master publishes on
 * its channel: Cluster sends it to every node of the shard, replication
 * does the same elsewhere. But SPUBLISH and PUBLISH count only the
 * publishing node's own listeners. release.lua used to hand the lock to
 * that waiter's process, count 0, take the grant back and hand the lock
 * to the next process, while the message arrived anyway: the waiter held
 * a lock that was someone else's or free. Now a release hands the lock
 * only to a process that listens on its own server, and wakes the
 * others. Here: after the release, the waiter must hold the lock for
 * real (a third client is refused). */
static void cluster_hand_off_heard_on_a_replica_is_not_taken_for_the_lock(void **state)
{
    (void)state;
    th_topology t;
    assert_int_equal(th_cluster_start(&t, &opts), 0);
    dlock_client *hc, *wc, *xc;
    assert_int_equal(dlock_client_new(t.url, NULL, &hc), DLOCK_OK);
    assert_int_equal(dlock_client_new(t.url, NULL, &wc), DLOCK_OK);
    assert_int_equal(dlock_client_new(t.url, NULL, &xc), DLOCK_OK);
    dlock_lock *holder = th_lock_new(hc, "far"), *waiting = th_lock_new(wc, "far"), *other = th_lock_new(xc, "far");
    assert_int_equal(dlock_lock_acquire(holder, 0, 30000, NULL), DLOCK_OK);
    th_waiter w;
    th_waiter_start(&w, waiting, 20000, 30000);
    sleep_ms(500); /* subscribed, and its next attempt offered */
    int master = th_cluster_key_owner(&t, "dlock:{far}"), replica = -1;
    for (int i = 0; i < t.n; i++)
        if (t.node[i].role == TH_REPLICA && t.node[i].master_port == master) replica = t.node[i].port;
    assert_true(master > 0 && replica > 0);
    redisReply *r = th_node_cmd(&t, replica, "CLUSTER FAILOVER");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(th_node_wait_role(&t, master, TH_REPLICA, 20000), 0);
    assert_int_equal(th_node_wait_role(&t, replica, TH_MASTER, 20000), 0);
    assert_false(th_waiter_returned(&w));
    /* Let every node of the shard learn the new roles, as they would
     * have long before a release in the wild. */
    sleep_ms(300);
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    th_waiter_wait(&w);
    dlock_status st = w.st == DLOCK_OK ? dlock_lock_acquire(other, 0, 30000, NULL) : DLOCK_ERR_TIMEOUT;
    th_waiter_finish(&w);
    if (w.st != DLOCK_OK) fail_msg("the waiter: %s", dlock_strerror(w.st));
    if (st == DLOCK_OK) fail_msg("a third client took the lock the waiter believes it holds");
    assert_int_equal(st, DLOCK_ERR_TIMEOUT);
    if (w.released != DLOCK_OK) fail_msg("the waiter's release: %s", dlock_strerror(w.released));
    dlock_lock_free(other);
    dlock_lock_free(waiting);
    dlock_lock_free(holder);
    dlock_client_free(xc);
    dlock_client_free(wc);
    dlock_client_free(hc);
    th_cluster_stop(&t);
}

/* ------------------------------------------------------------------------ */
/* Sentinel                                                                  */
/* ------------------------------------------------------------------------ */

static void sentinel_failover(int replica_acks)
{
    th_topology t;
    assert_int_equal(th_sentinel_start(&t, &opts), 0);
    static load L; /* static: outlives a failed assertion, see stop_leftover_load */
    load_start(&L, t.url, replica_acks, replica_acks ? "sfa" : "sf", 10000);
    for (int i = 0; i < NAMES; i++) L.watched[i] = 1;
    expect_progress(&L, 200, 10000);
    int old = th_sentinel_kill_master(&t);
    assert_true(old > 0);
    long long kill_ms = th_now_ms();
    atomic_store(&L.kill_ms, kill_ms);
    int promoted = th_sentinel_wait_failover(&t, old, FAILOVER_BOUND_MS);
    long long restored_ms = th_now_ms();
    assert_true(promoted > 0 && promoted != old);
    if (replica_acks) {
        /* As on the cluster: no replica, no replica-safe grant. The old
         * master returns as a master and is demoted by the Sentinels. */
        assert_int_equal(th_node_restart(&t, old), 0);
        long long back_ms = th_now_ms();
        int replica = th_sentinel_wait_replica_back(&t, old, promoted, DEMOTION_BOUND_MS);
        printf("{\"case\":\"sentinel-old-master-returns\",\"linked_replica\":\"%s\",\"after_ms\":%lld}\n",
               replica == old        ? "old master"
               : replica == promoted ? "promoted, failed over again"
                                     : "none",
               th_now_ms() - back_ms);
        assert_true(replica > 0);
    }
    expect_progress(&L, 200, 15000);
    load_stop(&L);
    report("sentinel", "master-killed", replica_acks, &L, kill_ms, restored_ms);
    expect_safe_recovery(&L, replica_acks);
    th_sentinel_stop(&t);
}

static void sentinel_failover_keeps_locks_usable_and_fenced(void **state)
{
    (void)state;
    sentinel_failover(0);
}

static void sentinel_failover_with_replica_acks_never_grants_twice(void **state)
{
    (void)state;
    sentinel_failover(1);
}

/* ------------------------------------------------------------------------ */
/* Watchdog and the returning master                                         */
/* ------------------------------------------------------------------------ */

static int lost_calls;
static void on_lost(dlock_lock *l, uint64_t token, void *arg)
{
    (void)l, (void)token, (void)arg;
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

static long long pttl_on(th_topology *t, int port, const char *key)
{
    redisReply *r = th_node_cmd(t, port, "PTTL %s", key);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -3;
    if (r) freeReplyObject(r);
    return v;
}

/* A lock held with the watchdog while its master is killed: with
 * replica-safe acquire the promoted replica has it, the watchdog's
 * renewals fail over to it, and the hold is never reported lost. Why a 6 s
 * lease: renewals come every lease/3, so at the kill the key has between
 * 2/3 of a lease and a whole one left, and that must outlast the failover
 * (~2.5 s here, more under sanitizers); with 3 s it did not always. */
static void watchdog_hold_survives_a_failover(int cluster)
{
    th_topology t;
    assert_int_equal(cluster ? th_cluster_start(&t, &opts) : th_sentinel_start(&t, &opts), 0);
    dlock_options o = {0};
    o.replica_acks = 1;
    o.replica_timeout_ms = 500;
    o.watchdog_lease_ms = 6000;
    dlock_client *c;
    dlock_lock *l;
    assert_int_equal(dlock_client_new(t.url, &o, &c), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "wd-failover", &l), DLOCK_OK);
    dlock_lock_on_lost(l, on_lost, NULL);
    lost_calls = 0;
    /* With a wait: on a topology just started, under a loaded ctest -j
     * (and TLS), the replica's first acknowledgement once took longer than
     * the 500 ms WAIT, and the acquisition was undone (DLOCK_ERR_REPLICA);
     * the wait retries it. What this case proves comes after. */
    assert_int_equal(dlock_lock_acquire(l, 5000, DLOCK_LEASE_WATCHDOG, NULL), DLOCK_OK);
    int victim = cluster ? th_cluster_key_owner(&t, "dlock:{wd-failover}") : th_sentinel_master_port(&t);
    assert_true(victim > 0);
    assert_int_equal(th_node_kill(&t, victim), 0);
    int promoted = cluster ? th_cluster_wait_failover(&t, victim, FAILOVER_BOUND_MS)
                           : th_sentinel_wait_failover(&t, victim, FAILOVER_BOUND_MS);
    assert_true(promoted > 0);
    /* A lease and a second on: had renewal stopped at the kill, the key
     * would be gone. */
    sleep_ms(7000);
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 0);
    assert_int_equal(dlock_lock_lost(l), 0);
    long long ttl = pttl_on(&t, promoted, "dlock:{wd-failover}");
    assert_true(ttl > 0 && ttl <= 6000);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(pttl_on(&t, promoted, "dlock:{wd-failover}"), -2);
    dlock_lock_free(l);
    dlock_client_free(c);
    th_topology_stop(&t);
}

static void cluster_watchdog_hold_survives_a_failover(void **state)
{
    (void)state;
    watchdog_hold_survives_a_failover(1);
}

static void sentinel_watchdog_hold_survives_a_failover(void **state)
{
    (void)state;
    watchdog_hold_survives_a_failover(0);
}

/* A killed Sentinel master restarted from its config comes back as a
 * master, with its old data, until the Sentinels demote it (about 10 s).
 * A client made in that window must take its locks on the real master:
 * the Sentinels name it, and ROLE is checked on every connection. */
static void sentinel_client_never_uses_a_returning_old_master(void **state)
{
    (void)state;
    th_topology t;
    assert_int_equal(th_sentinel_start(&t, &opts), 0);
    int old = th_sentinel_kill_master(&t);
    assert_true(old > 0);
    int promoted = th_sentinel_wait_failover(&t, old, FAILOVER_BOUND_MS);
    assert_true(promoted > 0);
    assert_int_equal(th_node_restart(&t, old), 0);
    assert_int_equal(th_node_wait_role(&t, old, TH_MASTER, 5000), 0); /* the stale master is up */
    dlock_client *c;
    dlock_lock *l;
    assert_int_equal(dlock_client_new(t.url, NULL, &c), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "returning", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
    assert_true(pttl_on(&t, promoted, "dlock:{returning}") > 0);
    redisReply *r = th_node_cmd(&t, old, "ROLE");
    int still_master = r && r->type == REDIS_REPLY_ARRAY && strcmp(r->element[0]->str, "master") == 0;
    if (r) freeReplyObject(r);
    /* If the old master was demoted meanwhile it may have the key by
     * replication; while it is still a master, it must not have it. */
    if (still_master) assert_int_equal(pttl_on(&t, old, "dlock:{returning}"), -2);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_free(c);
    th_topology_stop(&t);
}

/* ------------------------------------------------------------------------ */
/* A released hold brought back by a failover                                */
/* ------------------------------------------------------------------------ */

/* The state a failover can leave, made by hand on one server so the case
 * runs every time: we held NAME with token t1 and released it, but the
 * replica that became master never saw the release; meanwhile another
 * owner took NAME with a higher token t2, which the replica never saw
 * either, except that the fencing counter did reach it. The server now
 * says "yours" to a caller that knows of no hold. Handing back t1 would
 * break the fencing promise (t1 < t2), so a new, higher token is due. */
static void resurrected_hold_gets_a_new_token(int kind)
{
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    dlock_client *c;
    assert_int_equal(dlock_client_new(r.url, NULL, &c), DLOCK_OK);
    const char *name = kind == 2 ? "resurrect-rw" : kind == 1 ? "resurrect-fair" : "resurrect";
    const char *hash = kind == 2   ? "dlock:{resurrect-rw}:rw"
                       : kind == 1 ? "dlock:{resurrect-fair}"
                                   : "dlock:{resurrect}";
    const char *fence = kind == 2   ? "dlock:{resurrect-rw}:rw:fence"
                        : kind == 1 ? "dlock:{resurrect-fair}:fence"
                                    : "dlock:{resurrect}:fence";
    const char *owner_field = kind == 2 ? "writer" : "owner";
    dlock_lock *l = NULL;
    dlock_rwlock *rw = NULL;
    uint64_t t1 = 0, t3 = 0;
    if (kind == 2) {
        assert_int_equal(dlock_rwlock_new(c, name, &rw), DLOCK_OK);
        assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 10000, &t1), DLOCK_OK);
    } else {
        assert_int_equal(kind ? dlock_lock_new_fair(c, name, &l) : dlock_lock_new(c, name, &l), DLOCK_OK);
        assert_int_equal(dlock_lock_acquire(l, 0, 10000, &t1), DLOCK_OK);
    }
    redisReply *o = th_redis_cmd(&r, "HGET %s %s", hash, owner_field);
    assert_true(o && o->type == REDIS_REPLY_STRING);
    char owner[128];
    snprintf(owner, sizeof owner, "%s", o->str);
    freeReplyObject(o);
    assert_int_equal(kind == 2 ? dlock_rwlock_release(rw, DLOCK_WRITE) : dlock_lock_release(l), DLOCK_OK);

    /* The failover's leftovers: our hold back, the counter moved on. */
    uint64_t t2 = t1 + 1000000000ULL; /* another owner's token, 1000 s "later" */
    redisReply *x = th_redis_cmd(&r, "SET %s %llu", fence, (unsigned long long)t2);
    freeReplyObject(x);
    if (kind == 2) x = th_redis_cmd(&r, "HSET %s writer %s wcount 1 token %llu", hash, owner, (unsigned long long)t1);
    else x = th_redis_cmd(&r, "HSET %s owner %s count 1 token %llu", hash, owner, (unsigned long long)t1);
    freeReplyObject(x);
    x = th_redis_cmd(&r, "PEXPIRE %s 10000", hash);
    freeReplyObject(x);

    if (kind == 2) assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 10000, &t3), DLOCK_OK);
    else assert_int_equal(dlock_lock_acquire(l, 0, 10000, &t3), DLOCK_OK);
    if (t3 <= t2)
        fail_msg("token %llu handed out after %llu was issued", (unsigned long long)t3, (unsigned long long)t2);
    /* One hold, released by one release. */
    assert_int_equal(kind == 2 ? dlock_rwlock_release(rw, DLOCK_WRITE) : dlock_lock_release(l), DLOCK_OK);
    x = th_redis_cmd(&r, "EXISTS %s", hash);
    assert_int_equal(x->integer, 0);
    freeReplyObject(x);
    if (rw) dlock_rwlock_free(rw);
    if (l) dlock_lock_free(l);
    dlock_client_free(c);
    th_redis_stop(&r);
}

static void resurrected_hold_of_a_lock_gets_a_new_token(void **state)
{
    (void)state;
    resurrected_hold_gets_a_new_token(0);
}

static void resurrected_hold_of_a_fair_lock_gets_a_new_token(void **state)
{
    (void)state;
    resurrected_hold_gets_a_new_token(1);
}

static void resurrected_write_hold_gets_a_new_token(void **state)
{
    (void)state;
    resurrected_hold_gets_a_new_token(2);
}

/* ------------------------------------------------------------------------ */
/* Passwords                                                                 */
/* ------------------------------------------------------------------------ */

/* The URL's password reaches every data node: each master of a cluster
 * (locks spread over all three), and the master a Sentinel names (the
 * Sentinels themselves have no password here, and are asked without one).
 * A wrong password is DLOCK_ERR_AUTH, not a connection error. */
static void topologies_with_a_password(int cluster)
{
    th_topology_opts o = opts;
    o.password = "topo-pw";
    th_topology t;
    assert_int_equal(cluster ? th_cluster_start(&t, &o) : th_sentinel_start(&t, &o), 0);
    /* The credentials go after the scheme, whichever it is (rediss-* with
     * DLOCK_TEST_TLS). */
    const char *rest = strstr(t.url, "://") + 3;
    int scheme_len = (int)(rest - t.url);
    char good[1024], bad[1024];
    snprintf(good, sizeof good, "%.*s:topo-pw@%s", scheme_len, t.url, rest);
    snprintf(bad, sizeof bad, "%.*s:wrong@%s", scheme_len, t.url, rest);
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(bad, NULL, &c), DLOCK_ERR_AUTH);
    assert_null(c);
    assert_int_equal(dlock_client_new(good, NULL, &c), DLOCK_OK);
    int ports[3], seen = 0;
    int nm = cluster ? th_topology_masters(&t, ports, 3) : 0;
    for (int i = 0; i < 24; i++) {
        char name[32], key[48];
        snprintf(name, sizeof name, "pw-%d", i);
        snprintf(key, sizeof key, "dlock:{%s}", name);
        dlock_lock *l;
        assert_int_equal(dlock_lock_new(c, name, &l), DLOCK_OK);
        assert_int_equal(dlock_lock_acquire(l, 0, 10000, NULL), DLOCK_OK);
        int port = cluster ? th_cluster_key_owner(&t, key) : th_sentinel_master_port(&t);
        assert_true(pttl_on(&t, port, key) > 0);
        for (int m = 0; m < nm; m++)
            if (ports[m] == port) seen |= 1 << m;
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        dlock_lock_free(l);
    }
    if (cluster) assert_int_equal(seen, (1 << nm) - 1); /* every master was used */
    dlock_client_free(c);
    th_topology_stop(&t);
}

static void cluster_with_a_password(void **state)
{
    (void)state;
    topologies_with_a_password(1);
}

static void sentinel_with_a_password(void **state)
{
    (void)state;
    topologies_with_a_password(0);
}

/* Every case's teardown: stop the workers a failed case left behind, so
 * that its failure is reported alone instead of taking the next case (and
 * the program) down with it. */
static int stop_leftover_load(void **state)
{
    (void)state;
    if (running) load_stop(running);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(resurrected_hold_of_a_lock_gets_a_new_token, stop_leftover_load),
        cmocka_unit_test_teardown(resurrected_hold_of_a_fair_lock_gets_a_new_token, stop_leftover_load),
        cmocka_unit_test_teardown(resurrected_write_hold_gets_a_new_token, stop_leftover_load),
        cmocka_unit_test_teardown(cluster_failover_keeps_locks_usable_and_fenced, stop_leftover_load),
        cmocka_unit_test_teardown(cluster_failover_with_replica_acks_never_grants_twice, stop_leftover_load),
        cmocka_unit_test_teardown(cluster_slot_migration_is_invisible_to_callers, stop_leftover_load),
        cmocka_unit_test_teardown(cluster_watchdog_hold_survives_a_failover, stop_leftover_load),
        cmocka_unit_test_teardown(cluster_hand_off_heard_on_a_replica_is_not_taken_for_the_lock, stop_leftover_load),
        cmocka_unit_test_teardown(sentinel_failover_keeps_locks_usable_and_fenced, stop_leftover_load),
        cmocka_unit_test_teardown(sentinel_failover_with_replica_acks_never_grants_twice, stop_leftover_load),
        cmocka_unit_test_teardown(sentinel_watchdog_hold_survives_a_failover, stop_leftover_load),
        cmocka_unit_test_teardown(sentinel_client_never_uses_a_returning_old_master, stop_leftover_load),
        cmocka_unit_test_teardown(cluster_with_a_password, stop_leftover_load),
        cmocka_unit_test_teardown(sentinel_with_a_password, stop_leftover_load),
    };
    /* DLOCK_TEST_FILTER=cluster_slot* runs only the matching cases. */
    if (getenv("DLOCK_TEST_FILTER")) cmocka_set_test_filter(getenv("DLOCK_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
