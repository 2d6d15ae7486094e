/*
 * Multi-node Redis topologies for the suites: a Redis Cluster of 3 masters
 * and 3 replicas, and a master + replica watched by 3 Sentinels, all real
 * redis-server / redis-sentinel processes on 127.0.0.1. They are started
 * and stopped through scripts/redis-topology.sh, the script users run, so
 * every suite that uses them also tests the script.
 *
 * Cleanup does not depend on the test ending well: each topology has a
 * guardian process (in its own session) holding the read end of a pipe;
 * when the test process closes it, exits or is killed, the guardian runs
 * `redis-topology.sh stop DIR` (SIGTERM, then SIGKILL, by PID) and removes
 * DIR. Set DLOCK_KEEP_TOPOLOGY=1 to keep DIR (logs, configs) for debugging.
 *
 * Functions return 0 (or a port) on success and -1 on failure unless said.
 * One topology must not be driven from two threads at once; th_node_cmd()
 * and th_node_connect() open their own connections and are safe anywhere.
 */
#ifndef DLOCK_TH_TOPOLOGY_H
#define DLOCK_TH_TOPOLOGY_H

#include <stddef.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>

#define TH_TOPO_MAX_NODES 8
#define TH_CLUSTER_SLOTS 16384
#define TH_SENTINEL_MASTER_NAME "mymaster"

typedef enum th_role { TH_DOWN = 0, TH_MASTER, TH_REPLICA, TH_SENTINEL } th_role;

typedef struct th_node {
    int port;        /* 127.0.0.1 port (a cluster node's bus is port+10000) */
    pid_t pid;       /* 0 once killed */
    th_role role;    /* as of the last start, refresh, kill or wait */
    int master_port; /* a replica's master; 0 otherwise */
    int paused;      /* SIGSTOPped by th_node_pause() */
} th_node;

typedef struct th_topology_opts {
    int node_timeout_ms;     /* cluster-node-timeout; 0: the script's 1000 */
    int down_after_ms;       /* Sentinel down-after-milliseconds; 0: 1000 */
    int failover_timeout_ms; /* Sentinel failover-timeout; 0: 3000 */
    const char *password;    /* requirepass + masterauth on data nodes
                                  (Sentinels get auth-pass); NULL: none */
} th_topology_opts;

typedef struct th_topology {
    int is_cluster;
    char dir[64];  /* private temp dir holding every node's dir */
    char url[512]; /* redis-cluster://127.0.0.1:P,... (all 6 nodes) or
                                  redis-sentinel://127.0.0.1:S1,S2,S3/mymaster */
    char password[64];
    char tls[96]; /* DLOCK_TEST_TLS=1: the certificates' directory; the
                                  URL is then rediss-*:// on each node's TLS port (its
                                  port + 1000); the harness keeps the plaintext ports */
    int n;        /* nodes, in the script's order: cluster masters
                                  first; sentinel: master, replica, 3 Sentinels */
    th_node node[TH_TOPO_MAX_NODES];
    pid_t guardian;
    int guardian_fd;
} th_topology;

/* ---- both kinds (topology.c) ---- */

/* Start a 3-master, 3-replica cluster (cluster_state:ok, every replica
 * attached) / a master + replica + 3 Sentinels (quorum 2, master name
 * "mymaster", every Sentinel knowing the replica and the others).
 * `opts` may be NULL. */
int th_cluster_start(th_topology *t, const th_topology_opts *opts);
int th_sentinel_start(th_topology *t, const th_topology_opts *opts);

/* Stop every process of the topology by PID (paused ones too) and remove
 * its directory; waits until done. Safe to call twice. */
void th_topology_stop(th_topology *t);
static inline void th_cluster_stop(th_topology *t)
{
    th_topology_stop(t);
}
static inline void th_sentinel_stop(th_topology *t)
{
    th_topology_stop(t);
}

/* The node on `port`, or NULL. */
th_node *th_topology_node(th_topology *t, int port);

/* Re-read every live, unpaused node's role (ROLE) into t->node[]. */
int th_topology_refresh(th_topology *t);

/* Live data nodes that are masters now (after a refresh), up to `max`
 * ports into `ports`; returns how many. */
int th_topology_masters(th_topology *t, int *ports, int max);

/* Whether a process is alive: not gone and not a zombie. The nodes are
 * daemons, not the test's children, so this reads /proc. */
int th_pid_alive(pid_t pid);

/* The parent of a process, from /proc; 0 when it cannot be read. */
pid_t th_pid_parent(pid_t pid);

/* Whether a process is stopped (SIGSTOP, or traced), from /proc. */
int th_pid_stopped(pid_t pid);

/* The port of a live replica of `master_port` (per the table), or -1. */
int th_topology_replica_of(th_topology *t, int master_port);

/* FLUSHALL on every live, unpaused master, then wait (5 s at most) until
 * every live replica is empty too: a clean slate between tests that share
 * one topology. */
int th_topology_flushall(th_topology *t);

/* SIGKILL the node and wait until it is gone. */
int th_node_kill(th_topology *t, int port);

/* SIGSTOP / SIGCONT the node. A paused node is skipped by every query and
 * wait here (it would block them). */
int th_node_pause(th_topology *t, int port);
int th_node_resume(th_topology *t, int port);

/* Start a killed node again from its own config (scripts' `restart`): a
 * cluster node keeps its identity and rejoins, normally as a replica; an
 * old master under Sentinel comes back as a master until the Sentinels
 * reconfigure it (about 10 s; see th_node_wait_role). */
int th_node_restart(th_topology *t, int port);

/* Wait until the node reports `role` in ROLE (for TH_REPLICA: with its
 * link to the master connected). Updates t->node[]. */
int th_node_wait_role(th_topology *t, int port, th_role role, int timeout_ms);

/* A connection to the node (2 s timeouts, AUTH done for data nodes when
 * the topology has a password); free with redisFree(). NULL on failure. */
redisContext *th_node_connect(const th_topology *t, int port);

/* One command on a fresh connection to the node; free the reply with
 * freeReplyObject(). NULL when the node cannot be reached. */
redisReply *th_node_cmd(const th_topology *t, int port, const char *fmt, ...);

/* A port a node reported about another (a replica's master, the master a
 * Sentinel names), as the node table knows it: with TLS nodes name each
 * other's TLS ports, the table holds the plaintext ones. */
int th_topology_plain_port(const th_topology *t, int port);

/* ---- Redis Cluster (topology_cluster.c) ---- */

/* CRC16-CCITT (XMODEM: poly 0x1021, init 0), as Redis Cluster uses. */
unsigned th_crc16(const char *buf, size_t len);

/* The hash slot of a key: CRC16 of the hash tag (the bytes between the
 * first '{' and the first '}' after it, when not empty) or of the whole
 * key, mod 16384. */
int th_key_slot(const char *key, size_t len);

/* Port of the master owning `slot` / `key`'s slot, per CLUSTER SLOTS from
 * a live node; -1 on failure. */
int th_cluster_slot_owner(th_topology *t, int slot);
int th_cluster_key_owner(th_topology *t, const char *key);

/* Wait until every live, unpaused node says cluster_state:ok and all of
 * them report the same slot map, covering all slots, owned only by live,
 * unpaused masters. */
int th_cluster_wait_ok(th_topology *t, int timeout_ms);

/* After killing or pausing master `old_master_port`: wait until its replica
 * answers ROLE master, owns the old master's slots in every live node's
 * view, and th_cluster_wait_ok holds. Returns the new master's port. */
int th_cluster_wait_failover(th_topology *t, int old_master_port, int timeout_ms);

/* Moving one slot with its keys from its owner to master `to_port`, step
 * by step so a test can run load between the steps:
 *   begin:  CLUSTER SETSLOT IMPORTING on the target, MIGRATING on the source
 *           (from here the source answers ASK for keys it no longer has);
 *   step:   moves up to `max_keys` keys (GETKEYSINSLOT + MIGRATE ... KEYS),
 *           returns how many were moved (0 once none are left), -1 on error;
 *   finish: SETSLOT NODE on the target, the source and every other master,
 *           then waits (10 s at most) until all nodes agree.
 *   abort:  SETSLOT STABLE on both ends (keys already moved stay moved). */
typedef struct th_migration {
    th_topology *t;
    int slot;
    int from_port, to_port;
    char from_id[48], to_id[48];
    long moved; /* keys moved so far */
} th_migration;

int th_migration_begin(th_migration *m, th_topology *t, int slot, int to_port);
int th_migration_step(th_migration *m, int max_keys);
int th_migration_finish(th_migration *m);
int th_migration_abort(th_migration *m);

/* begin, step until no key is left, finish. */
int th_cluster_migrate_slot(th_topology *t, int slot, int to_port);

/* ---- Sentinel (topology_sentinel.c) ---- */

/* The master's port according to a live Sentinel
 * (SENTINEL GET-MASTER-ADDR-BY-NAME mymaster). */
int th_sentinel_master_port(th_topology *t);

/* SIGKILL / SIGSTOP the current master; returns its port. */
int th_sentinel_kill_master(th_topology *t);
int th_sentinel_pause_master(th_topology *t);

/* Wait until every live Sentinel names the same master, not
 * `old_master_port`, and that node answers ROLE master. Returns its port. */
int th_sentinel_wait_failover(th_topology *t, int old_master_port, int timeout_ms);

/* Wait until every live Sentinel names the same master, flags it as
 * nothing but a master (no s_down, o_down or failover in progress), and
 * that node answers ROLE master. Its port, or -1 on a timeout (with the
 * Sentinels' events on stderr). */
int th_sentinel_wait_settled(th_topology *t, int timeout_ms);

/* After a failover from `old` to `promoted` and a restart of `old`: wait
 * until one of the two is a linked replica of the other, and return its
 * port (0 on timeout). Usually that is `old`, demoted. On a loaded
 * machine a Sentinel may find the just promoted master silent for its
 * down-after time and fail back to `old`, which then stays master; the
 * master has a replica again either way, and which node is master is the
 * Sentinels' call, not the library's. On a timeout, or on a fail-back,
 * the Sentinels' event lines are printed to stderr so the run says why. */
int th_sentinel_wait_replica_back(th_topology *t, int old, int promoted, int timeout_ms);

/* Print each Sentinel's event lines (+sdown, +odown, +tilt,
 * +switch-master, +convert-to-slave, ...) from its log to stderr. */
void th_sentinel_print_events(th_topology *t);

#endif
