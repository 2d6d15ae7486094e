/*
 * The multi-node test infrastructure itself, proved with plain hiredis
 * against real servers: the cluster and Sentinel topologies that
 * scripts/redis-topology.sh starts are what they claim to be, the harness's
 * slot hashing agrees with the servers', failovers and slot migrations do
 * what the suites built on them will rely on, and nothing outlives a test.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "th_topology.h"

#define FAILOVER_BOUND_MS 30000

static th_topology cl, se;

/* The cluster runs with a password (so AUTH in the script, redis-cli
 * --cluster and MIGRATE are exercised); both get explicit timings. */
static const th_topology_opts cluster_opts = {.node_timeout_ms = 1000, .password = "topo-secret"};
static const th_topology_opts sentinel_opts = {.down_after_ms = 1000, .failover_timeout_ms = 3000};

static void *start_sentinel(void *arg)
{
    return (void *)(intptr_t)th_sentinel_start(arg, &sentinel_opts);
}

/* Both topologies start at once: each spends most of its time waiting. */
static int setup(void **state)
{
    (void)state;
    pthread_t th;
    if (pthread_create(&th, NULL, start_sentinel, &se) != 0) return -1;
    int c = th_cluster_start(&cl, &cluster_opts);
    void *s;
    pthread_join(th, &s);
    return c == 0 && (intptr_t)s == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    th_cluster_stop(&cl);
    th_sentinel_stop(&se);
    return 0;
}

static long long reply_int(redisReply *r)
{
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    return v;
}

/* A reply's text (status, string or error), freed; "" when none. */
static const char *reply_text(redisReply *r)
{
    static char buf[256];
    buf[0] = '\0';
    if (r && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_ERROR))
        snprintf(buf, sizeof buf, "%s", r->str);
    if (r) freeReplyObject(r);
    return buf;
}

/* A live master other than `not`. */
static int other_master(th_topology *t, int not )
{
    int ports[TH_TOPO_MAX_NODES];
    int n = th_topology_masters(t, ports, TH_TOPO_MAX_NODES);
    for (int i = 0; i < n; i++)
        if (ports[i] != not ) return ports[i];
    return -1;
}

/* Write `key` on its owner and wait until the owner's replica has it. */
static void set_replicated(th_topology *t, const char *key, const char *value)
{
    int owner = t->is_cluster ? th_cluster_key_owner(t, key) : th_sentinel_master_port(t);
    assert_true(owner > 0);
    redisContext *c = th_node_connect(t, owner);
    assert_non_null(c);
    assert_string_equal(reply_text(redisCommand(c, "SET %s %s", key, value)), "OK");
    assert_int_equal(reply_int(redisCommand(c, "WAIT 1 5000")), 1);
    redisFree(c);
}

static void cluster_starts_with_three_masters_each_with_an_attached_replica(void **state)
{
    (void)state;
    assert_int_equal(cl.n, 6);
    assert_true(strncmp(cl.url, "redis-cluster://127.0.0.1:", 26) == 0);
    int masters = 0, seen[TH_TOPO_MAX_NODES] = {0};
    for (int i = 0; i < cl.n; i++) {
        th_node *nd = &cl.node[i];
        char addr[32];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", nd->port);
        assert_non_null(strstr(cl.url, addr));
        assert_true(nd->pid > 0 && th_pid_alive(nd->pid));
        redisReply *r = th_node_cmd(&cl, nd->port, "CLUSTER INFO");
        assert_non_null(r);
        assert_non_null(strstr(r->str, "cluster_state:ok"));
        assert_non_null(strstr(r->str, "cluster_known_nodes:6"));
        assert_non_null(strstr(r->str, "cluster_size:3"));
        freeReplyObject(r);
        if (nd->role == TH_MASTER) {
            masters++;
            int rep = th_topology_replica_of(&cl, nd->port);
            assert_true(rep > 0);
            th_node *rn = th_topology_node(&cl, rep);
            assert_false(seen[rn - cl.node]);
            seen[rn - cl.node] = 1;
            /* the replica's own view: connected to this master */
            assert_int_equal(th_node_wait_role(&cl, rep, TH_REPLICA, 0), 0);
            assert_int_equal(rn->master_port, nd->port);
        } else {
            assert_int_equal(nd->role, TH_REPLICA);
        }
    }
    assert_int_equal(masters, 3);
    assert_int_equal(th_cluster_wait_ok(&cl, 0), 0);

    redisReply *r = th_node_cmd(&cl, cl.node[0].port, "CONFIG GET cluster-node-timeout");
    assert_true(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    assert_string_equal(r->element[1]->str, "1000");
    freeReplyObject(r);
    /* the password is required */
    redisContext *c = redisConnect("127.0.0.1", cl.node[0].port);
    assert_true(c && !c->err);
    assert_string_equal(reply_text(redisCommand(c, "PING")), "NOAUTH Authentication required.");
    redisFree(c);
}

/* Both topologies are made of the program DLOCK_TEST_SERVER names
 * (redis-server without it), Sentinels included: otherwise the
 * @valkey entries would prove things about Redis under another name. */
static void every_process_runs_the_server_the_environment_names(void **state)
{
    (void)state;
    const char *named = getenv("DLOCK_TEST_SERVER");
    if (!named || !*named) named = "redis-server";
    th_topology *both[2] = {&cl, &se};
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < both[t]->n; i++) assert_int_equal(th_pid_runs(both[t]->node[i].pid, named), 1);
}

static void crc16_gives_the_xmodem_check_value(void **state)
{
    (void)state;
    assert_int_equal(th_crc16("123456789", 9), 0x31C3);
    assert_int_equal(th_crc16("", 0), 0);
}

/* Every key: our slot equals CLUSTER KEYSLOT, the owner we name accepts a
 * write of it, and another master redirects with MOVED to that slot. */
static void key_slots_and_owners_agree_with_the_servers(void **state)
{
    (void)state;
    static const struct {
        const char *k;
        size_t len;
    } keys[] = {
        {"foo", 3},
        {"bar", 3},
        {"somekey", 7},
        {"", 0},
        {"a", 1},
        {"{user1000}.following", 20},
        {"{user1000}.followers", 20},
        {"{}", 2},
        {"foo{}{bar}", 10},
        {"{}bar", 5},
        {"foo{{bar}}zap", 13},
        {"foo{bar}{zap}", 13},
        {"{a}{b}", 6},
        {"{", 1},
        {"}", 1},
        {"}{", 2},
        {"a{b", 3},
        {"a}b{c}", 6},
        {"{{}}", 4},
        {"x{ }y", 5},
        {"dlock:{reports:nightly}:owner", 29},
        {"\xff\xfe{\x00\x01}", 6},
        {"lock:12345678901234567890123456789012345678901234567890", 55},
    };
    /* two values the Redis documentation shows */
    assert_int_equal(th_key_slot("somekey", 7), 11058);
    assert_int_equal(th_key_slot("foo{hash_tag}", 13), 2515);
    int first = cl.node[0].port;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int slot = th_key_slot(keys[i].k, keys[i].len);
        long long server = reply_int(th_node_cmd(&cl, first, "CLUSTER KEYSLOT %b", keys[i].k, keys[i].len));
        assert_int_equal(slot, server);
        int owner = th_cluster_slot_owner(&cl, slot);
        assert_true(owner > 0);
        assert_string_equal(reply_text(th_node_cmd(&cl, owner, "SET %b v", keys[i].k, keys[i].len)), "OK");
        char moved[64];
        snprintf(moved, sizeof moved, "MOVED %d 127.0.0.1:%d", slot, owner);
        assert_string_equal(reply_text(th_node_cmd(&cl, other_master(&cl, owner), "GET %b", keys[i].k, keys[i].len)),
                            moved);
    }
    /* hash tags put these in one slot, whatever the rest says */
    assert_int_equal(th_key_slot("{user1000}.following", 20), th_key_slot("user1000", 8));
    assert_int_equal(th_key_slot("foo{bar}{zap}", 13), th_key_slot("bar", 3));
    assert_int_equal(th_key_slot("foo{{bar}}zap", 13), th_key_slot("{bar", 4));
    assert_int_equal(th_key_slot("foo{}{bar}", 10), (int)(th_crc16("foo{}{bar}", 10) & 16383));
}

/* After the previous test wrote keys on every master. */
static void flushall_leaves_every_node_empty(void **state)
{
    (void)state;
    long long total = 0;
    for (int i = 0; i < cl.n; i++) {
        redisReply *r = th_node_cmd(&cl, cl.node[i].port, "DBSIZE");
        total += reply_int(r);
    }
    assert_true(total > 0);
    assert_int_equal(th_topology_flushall(&cl), 0);
    for (int i = 0; i < cl.n; i++) assert_int_equal(reply_int(th_node_cmd(&cl, cl.node[i].port, "DBSIZE")), 0);
}

/* Step by step with traffic in between: moved keys are answered with ASK
 * by the source and served by the target after ASKING, keys not yet moved
 * stay writable at the source; at the end every node names the target. */
static void slot_migration_moves_the_keys_and_every_node_names_the_new_owner(void **state)
{
    (void)state;
    const char *keys[] = {"{mig}a", "{mig}b", "{mig}c", "{mig}d", "{mig}e"};
    int slot = th_key_slot("{mig}", 5);
    int from = th_cluster_slot_owner(&cl, slot);
    th_topology_refresh(&cl);
    int to = other_master(&cl, from);
    assert_true(from > 0 && to > 0);
    for (int i = 0; i < 5; i++)
        assert_string_equal(reply_text(th_node_cmd(&cl, from, "SET %s %s PX 600000", keys[i], keys[i])), "OK");

    th_migration m;
    assert_int_equal(th_migration_begin(&m, &cl, slot, to), 0);
    assert_int_equal(m.from_port, from);
    char ask[64];
    snprintf(ask, sizeof ask, "ASK %d 127.0.0.1:%d", slot, to);
    /* a key the source does not have goes to the target from now on */
    assert_string_equal(reply_text(th_node_cmd(&cl, from, "SET {mig}new x")), ask);
    redisContext *tc = th_node_connect(&cl, to);
    assert_non_null(tc);
    assert_string_equal(reply_text(redisCommand(tc, "ASKING")), "OK");
    assert_string_equal(reply_text(redisCommand(tc, "SET {mig}new written-by-ask")), "OK");
    redisFree(tc);

    int moved = th_migration_step(&m, 2);
    assert_int_equal(moved, 2);
    int asked = 0, served = 0;
    for (int i = 0; i < 5; i++) {
        const char *at_source = reply_text(th_node_cmd(&cl, from, "GET %s", keys[i]));
        if (strcmp(at_source, ask) == 0) {
            asked++;
            redisContext *c = th_node_connect(&cl, to);
            assert_non_null(c);
            assert_string_equal(reply_text(redisCommand(c, "ASKING")), "OK");
            assert_string_equal(reply_text(redisCommand(c, "GET %s", keys[i])), keys[i]);
            redisFree(c);
        } else {
            assert_string_equal(at_source, keys[i]);
            served++;
            /* load during the migration: the source still takes writes */
            assert_string_equal(reply_text(th_node_cmd(&cl, from, "SET %s %s PX 600000", keys[i], keys[i])), "OK");
        }
    }
    assert_int_equal(asked, 2);
    assert_int_equal(served, 3);

    while ((moved = th_migration_step(&m, 2)) > 0) {}
    assert_int_equal(moved, 0);
    assert_int_equal(m.moved, 5);
    assert_int_equal(th_migration_finish(&m), 0);

    assert_int_equal(th_cluster_slot_owner(&cl, slot), to);
    char moved_err[64];
    snprintf(moved_err, sizeof moved_err, "MOVED %d 127.0.0.1:%d", slot, to);
    for (int i = 0; i < 5; i++) {
        assert_string_equal(reply_text(th_node_cmd(&cl, to, "GET %s", keys[i])), keys[i]);
        assert_true(reply_int(th_node_cmd(&cl, to, "PTTL %s", keys[i])) > 0);
        assert_string_equal(reply_text(th_node_cmd(&cl, from, "GET %s", keys[i])), moved_err);
    }
    assert_string_equal(reply_text(th_node_cmd(&cl, to, "GET {mig}new")), "written-by-ask");
    for (int i = 0; i < cl.n; i++) {
        if (cl.node[i].role != TH_MASTER) continue;
        long long count = reply_int(th_node_cmd(&cl, cl.node[i].port, "CLUSTER COUNTKEYSINSLOT %d", slot));
        assert_int_equal(count, cl.node[i].port == to ? 6 : 0);
    }
    /* and back, in one call */
    assert_int_equal(th_cluster_migrate_slot(&cl, slot, from), 0);
    assert_int_equal(th_cluster_slot_owner(&cl, slot), from);
    assert_string_equal(reply_text(th_node_cmd(&cl, from, "GET {mig}c")), "{mig}c");
    assert_string_equal(reply_text(th_node_cmd(&cl, from, "GET {mig}new")), "written-by-ask");
}

/* The master owning `key` and its replica, as the cluster says now. */
static void owner_and_heir(const char *key, int *victim, int *heir)
{
    th_topology_refresh(&cl);
    *victim = th_cluster_key_owner(&cl, key);
    *heir = th_topology_replica_of(&cl, *victim);
    assert_true(*victim > 0 && *heir > 0);
}

static void killing_a_cluster_master_promotes_its_replica(void **state)
{
    (void)state;
    int victim, heir;
    owner_and_heir("{failover}k", &victim, &heir);
    set_replicated(&cl, "{failover}k", "before");

    long long t0 = th_now_ms();
    assert_int_equal(th_node_kill(&cl, victim), 0);
    int promoted = th_cluster_wait_failover(&cl, victim, FAILOVER_BOUND_MS);
    print_message("cluster failover after SIGKILL: %lld ms\n", th_now_ms() - t0);
    assert_int_equal(promoted, heir);
    assert_int_equal(th_cluster_key_owner(&cl, "{failover}k"), heir);
    assert_string_equal(reply_text(th_node_cmd(&cl, heir, "GET {failover}k")), "before");

    /* the old master comes back as a replica of its heir */
    assert_int_equal(th_node_restart(&cl, victim), 0);
    assert_int_equal(th_node_wait_role(&cl, victim, TH_REPLICA, FAILOVER_BOUND_MS), 0);
    assert_int_equal(th_topology_node(&cl, victim)->master_port, heir);
    assert_int_equal(th_cluster_wait_ok(&cl, FAILOVER_BOUND_MS), 0);
}

static void pausing_a_cluster_master_promotes_its_replica_and_resuming_demotes_it(void **state)
{
    (void)state;
    int victim, heir;
    owner_and_heir("{pause}k", &victim, &heir);

    long long t0 = th_now_ms();
    assert_int_equal(th_node_pause(&cl, victim), 0);
    int promoted = th_cluster_wait_failover(&cl, victim, FAILOVER_BOUND_MS);
    print_message("cluster failover after SIGSTOP: %lld ms\n", th_now_ms() - t0);
    assert_int_equal(promoted, heir);

    assert_int_equal(th_node_resume(&cl, victim), 0);
    assert_int_equal(th_node_wait_role(&cl, victim, TH_REPLICA, FAILOVER_BOUND_MS), 0);
    assert_int_equal(th_topology_node(&cl, victim)->master_port, heir);
    assert_int_equal(th_cluster_wait_ok(&cl, FAILOVER_BOUND_MS), 0);
}

/* Each Sentinel's SENTINEL MASTER field `name` as a number. */
static long long sentinel_field(int port, const char *name)
{
    redisReply *r = th_node_cmd(&se, port, "SENTINEL MASTER %s", TH_SENTINEL_MASTER_NAME);
    long long v = -1;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, name) == 0) v = atoll(r->element[i + 1]->str);
    if (r) freeReplyObject(r);
    return v;
}

static void sentinel_setup_has_a_master_a_replica_and_three_sentinels_that_know_them(void **state)
{
    (void)state;
    assert_int_equal(se.n, 5);
    assert_int_equal(se.node[0].role, TH_MASTER);
    assert_int_equal(se.node[1].role, TH_REPLICA);
    assert_int_equal(se.node[1].master_port, se.node[0].port);
    char url[128];
    snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/mymaster", se.node[2].port,
             se.node[3].port, se.node[4].port);
    assert_string_equal(se.url, url);
    assert_int_equal(th_sentinel_master_port(&se), se.node[0].port);
    for (int i = 2; i < 5; i++) {
        assert_int_equal(se.node[i].role, TH_SENTINEL);
        assert_int_equal(sentinel_field(se.node[i].port, "num-slaves"), 1);
        assert_int_equal(sentinel_field(se.node[i].port, "num-other-sentinels"), 2);
        assert_int_equal(sentinel_field(se.node[i].port, "quorum"), 2);
        assert_int_equal(sentinel_field(se.node[i].port, "down-after-milliseconds"), 1000);
        assert_int_equal(sentinel_field(se.node[i].port, "failover-timeout"), 3000);
    }
    assert_int_equal(th_node_wait_role(&se, se.node[1].port, TH_REPLICA, 0), 0);
}

static int sentinel_old_master, sentinel_new_master;

/* Killed master: the replica is promoted with the data. The old master is
 * restarted at the end; the Sentinels take about 10 s to turn it into a
 * replica, checked by a later test so the cluster tests run meanwhile. */
static void killing_the_sentinel_master_promotes_the_replica(void **state)
{
    (void)state;
    int master = th_sentinel_master_port(&se);
    int replica = th_topology_replica_of(&se, master);
    assert_true(master > 0 && replica > 0);
    set_replicated(&se, "sentinel-k", "before");

    long long t0 = th_now_ms();
    assert_int_equal(th_sentinel_kill_master(&se), master);
    int promoted = th_sentinel_wait_failover(&se, master, FAILOVER_BOUND_MS);
    print_message("sentinel failover after SIGKILL: %lld ms\n", th_now_ms() - t0);
    assert_int_equal(promoted, replica);
    assert_int_equal(th_sentinel_master_port(&se), replica);
    assert_string_equal(reply_text(th_node_cmd(&se, replica, "GET sentinel-k")), "before");

    assert_int_equal(th_node_restart(&se, master), 0);
    sentinel_old_master = master;
    sentinel_new_master = replica;
}

/* Why: this wait once timed out (one run in six, under a full parallel
 * `make test`) and nothing said why. Print what each Sentinel thinks of
 * the node and whether it is in TILT mode, and what the node says it is,
 * so the next time does. */
static void print_sentinel_view_of(int port)
{
    char want[32];
    snprintf(want, sizeof want, "127.0.0.1:%d", port);
    for (int i = 0; i < se.n; i++) {
        if (se.node[i].role != TH_SENTINEL) continue;
        redisReply *r = th_node_cmd(&se, se.node[i].port, "SENTINEL REPLICAS %s", TH_SENTINEL_MASTER_NAME);
        for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
            redisReply *e = r->element[k];
            int match = 0;
            char line[512] = "";
            for (size_t j = 0; e->type == REDIS_REPLY_ARRAY && j + 1 < e->elements; j += 2) {
                const char *f = e->element[j]->str, *v = e->element[j + 1]->str;
                if (!f || !v) continue;
                if (strcmp(f, "name") == 0) match = strcmp(v, want) == 0;
                if (strcmp(f, "flags") == 0 || strcmp(f, "role-reported") == 0 ||
                    strcmp(f, "role-reported-time") == 0 || strcmp(f, "master-port") == 0 ||
                    strcmp(f, "master-link-status") == 0 || strcmp(f, "s-down-time") == 0)
                    snprintf(line + strlen(line), sizeof line - strlen(line), " %s=%s", f, v);
            }
            if (match) print_message("sentinel %d sees %s:%s\n", se.node[i].port, want, line);
        }
        if (r) freeReplyObject(r);
        r = th_node_cmd(&se, se.node[i].port, "INFO sentinel");
        const char *tilt = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "sentinel_tilt") : NULL;
        print_message("sentinel %d: %.*s\n", se.node[i].port, tilt ? (int)strcspn(tilt, "\r\n") : 4,
                      tilt ? tilt : "(no answer)");
        if (r) freeReplyObject(r);
    }
    redisReply *r = th_node_cmd(&se, port, "INFO replication");
    print_message("%s INFO replication:\n%s\n", want, r && r->type == REDIS_REPLY_STRING ? r->str : "(no answer)");
    if (r) freeReplyObject(r);
}

static void restarted_old_sentinel_master_rejoins_the_pair_as_a_replica(void **state)
{
    (void)state;
    assert_true(sentinel_old_master > 0);
    /* Sentinels reconfigure it about 8 s after it is back. A Sentinel whose
     * timer was held up for 2 s (the whole VM descheduled, say) enters
     * TILT mode and does nothing for 30 s: the bound leaves room for one.
     * A fail-back (the new master found silent for 1 s under load, the old
     * one promoted again) is the Sentinels' call and leaves a linked pair
     * too; the helper then prints their events. */
    int replica =
        th_sentinel_wait_replica_back(&se, sentinel_old_master, sentinel_new_master, 30000 + FAILOVER_BOUND_MS);
    if (replica <= 0) print_sentinel_view_of(sentinel_old_master);
    assert_true(replica > 0);
    int master = replica == sentinel_old_master ? sentinel_new_master : sentinel_old_master;
    assert_int_equal(th_topology_node(&se, replica)->master_port, master);
    assert_int_equal(th_sentinel_master_port(&se), master);
}

static void pausing_the_sentinel_master_promotes_the_replica(void **state)
{
    (void)state;
    int master = th_sentinel_master_port(&se);
    int replica = th_topology_replica_of(&se, master);
    assert_true(master > 0 && replica > 0);
    long long t0 = th_now_ms();
    assert_int_equal(th_sentinel_pause_master(&se), master);
    int promoted = th_sentinel_wait_failover(&se, master, FAILOVER_BOUND_MS);
    if (promoted != replica) th_sentinel_print_events(&se);
    assert_int_equal(promoted, replica);
    print_message("sentinel failover after SIGSTOP: %lld ms\n", th_now_ms() - t0);
    assert_int_equal(th_node_resume(&se, master), 0);
}

/* A paused node too: stop continues it before SIGTERM, SIGKILLs what
 * lingers, and the directory goes; a forked child still holding a copy of
 * the guardian's pipe does not hold the stop up. */
static void stopping_ends_every_process_and_removes_the_directory(void **state)
{
    (void)state;
    pid_t holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) {
        pause();
        _exit(0);
    }
    th_topology *all[] = {&cl, &se};
    for (int k = 0; k < 2; k++) {
        th_topology *t = all[k];
        pid_t pids[TH_TOPO_MAX_NODES];
        int n = 0;
        for (int i = 0; i < t->n; i++)
            if (t->node[i].pid > 0) pids[n++] = t->node[i].pid;
        assert_true(n >= 5);
        assert_int_equal(th_node_pause(t, t->node[t->n - 1].port), 0);
        char dir[sizeof t->dir];
        snprintf(dir, sizeof dir, "%s", t->dir);
        th_topology_stop(t);
        for (int i = 0; i < n; i++) assert_false(th_pid_alive(pids[i]));
        struct stat st;
        assert_int_not_equal(stat(dir, &st), 0);
    }
    kill(holder, SIGKILL);
    assert_int_equal(waitpid(holder, NULL, 0), holder);
}

/* The guardian: a test process SIGKILLed with a topology running (no
 * teardown, no atexit) still leaves no redis process and no directory.
 * (A cluster without a password, the other way the script starts one.) */
static void a_test_process_killed_mid_test_leaves_no_server_behind(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(pfd[0]);
        th_topology t;
        if (th_cluster_start(&t, NULL) == 0) {
            pid_t pids[TH_TOPO_MAX_NODES];
            for (int i = 0; i < t.n; i++) pids[i] = t.node[i].pid;
            if (write(pfd[1], &t.dir, sizeof t.dir) < 0 || write(pfd[1], pids, sizeof(pid_t) * (size_t)t.n) < 0)
                _exit(1);
        }
        raise(SIGKILL);
    }
    close(pfd[1]);
    char dir[sizeof((th_topology *)0)->dir];
    pid_t pids[TH_TOPO_MAX_NODES];
    assert_int_equal(read(pfd[0], dir, sizeof dir), (ssize_t)sizeof dir);
    ssize_t got = read(pfd[0], pids, sizeof pids);
    close(pfd[0]);
    assert_int_equal(got, (ssize_t)(6 * sizeof(pid_t)));
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFSIGNALED(st));
    struct stat sb;
    long long end = th_now_ms() + 15000;
    int left;
    do {
        left = stat(dir, &sb) == 0;
        for (int i = 0; i < 6; i++) left += th_pid_alive(pids[i]);
        if (left) usleep(50000);
    } while (left && th_now_ms() < end);
    assert_int_equal(left, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crc16_gives_the_xmodem_check_value),
        cmocka_unit_test(every_process_runs_the_server_the_environment_names),
        cmocka_unit_test(sentinel_setup_has_a_master_a_replica_and_three_sentinels_that_know_them),
        cmocka_unit_test(killing_the_sentinel_master_promotes_the_replica),
        cmocka_unit_test(cluster_starts_with_three_masters_each_with_an_attached_replica),
        cmocka_unit_test(key_slots_and_owners_agree_with_the_servers),
        cmocka_unit_test(flushall_leaves_every_node_empty),
        cmocka_unit_test(slot_migration_moves_the_keys_and_every_node_names_the_new_owner),
        cmocka_unit_test(killing_a_cluster_master_promotes_its_replica),
        cmocka_unit_test(pausing_a_cluster_master_promotes_its_replica_and_resuming_demotes_it),
        cmocka_unit_test(restarted_old_sentinel_master_rejoins_the_pair_as_a_replica),
        cmocka_unit_test(pausing_the_sentinel_master_promotes_the_replica),
        cmocka_unit_test(stopping_ends_every_process_and_removes_the_directory),
        cmocka_unit_test(a_test_process_killed_mid_test_leaves_no_server_behind),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
