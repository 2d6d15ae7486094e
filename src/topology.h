/*
 * The topology: which server a command goes to. One server (redis://,
 * unix://), the master that Sentinels name (redis-sentinel://), or the node
 * that serves a key's hash slot (redis-cluster://). Everything above it
 * names a key and gets a reply; redirections, failovers and map refreshes
 * happen here.
 */
#ifndef DLOCK__TOPOLOGY_H
#define DLOCK__TOPOLOGY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "conn.h"
#include "slot.h"

/* Nodes are never removed while the client lives (a pool pointer handed to
 * a thread stays valid); a deployment sees few distinct addresses. */
#define DLOCK__MAX_NODES 1024

typedef struct dlock__topo {
    dlock_url url;
    dlock__conn_cfg cfg;    /* data nodes: credentials, db, timeouts, TLS */
    struct dlock__tls *tls; /* rediss URLs: TLS to every server, Sentinels too */
    _Atomic(dlock__pool *) nodes[DLOCK__MAX_NODES];
    atomic_int n_nodes;
    pthread_mutex_t mu;        /* adding nodes; one lookup at a time */
    atomic_int stale;          /* look the topology up again before next use */
    atomic_int closing;        /* the client is being freed (dlock__topo_close_io) */
    int64_t looked_up_ms;      /* under mu: when it was last looked up */
    dlock_status last_lookup;  /* under mu: how that went */
    char last_lookup_msg[256]; /* under mu: and why, when it failed */
    /* One server or Sentinel: the node commands go to (-1: not known yet). */
    atomic_int master;
    /* Sentinel: a pool per Sentinel, and which answered last. */
    dlock__conn_cfg sentinel_cfg, sentinel_auth_cfg;
    dlock__pool *sentinels;
    size_t n_sentinels, sentinel_first;
    /* Cluster: node index + 1 serving each slot (0: unknown). */
    _Atomic uint16_t slots[DLOCK__SLOTS];
    int any_node; /* under mu: a node that answered, for keyless commands */
} dlock__topo;

/*
 * The error replies the router acts on, written once: XX(KIND, prefix).
 * Each means the command did not run (a redirection, a server not ready
 * or not a master), so it may be sent again, elsewhere or later.
 */
#define DLOCK__ROUTE_ERRORS(XX)                                                                                        \
    XX(MOVED, "MOVED ")                                                                                                \
    XX(ASK, "ASK ")                                                                                                    \
    XX(TRYAGAIN, "TRYAGAIN")                                                                                           \
    XX(CLUSTERDOWN, "CLUSTERDOWN")                                                                                     \
    XX(MASTERDOWN, "MASTERDOWN")                                                                                       \
    XX(LOADING, "LOADING")                                                                                             \
    XX(READONLY, "READONLY")

typedef enum dlock__route_error {
    DLOCK__ROUTE_NONE = 0, /* an answer, or an error for the caller */
#define DLOCK__ROUTE_ENUM(kind, prefix) DLOCK__ROUTE_##kind,
    DLOCK__ROUTE_ERRORS(DLOCK__ROUTE_ENUM)
#undef DLOCK__ROUTE_ENUM
} dlock__route_error;

/* Which of them an error reply's text is. */
dlock__route_error dlock__route_classify(const char *err);

/* Parse `url` and set up, without connecting yet. busy_poll_us goes to
 * every connection's dlock__conn_cfg (0: no poll). */
dlock_status dlock__topo_new(const char *url, const char *username, const char *password, int connect_timeout_ms,
                             int command_timeout_ms, int busy_poll_us, dlock__topo **out);
void dlock__topo_free(dlock__topo *t);

/*
 * Send n (at most 4) commands in one write to the server for `key` (NULL:
 * any server that holds data; keyless commands such as SCRIPT LOAD) and
 * read their replies. Follows MOVED and ASK, waits out TRYAGAIN,
 * CLUSTERDOWN, LOADING and a failover in progress within the command
 * timeout, and after a broken connection looks the topology up again and
 * resends to the new server. `flags` and *retried as for
 * dlock__pool_pipeline(): with DLOCK__IO_ONCE, a resend happens only when the
 * commands surely did not reach the first server.
 */
dlock_status dlock__topo_pipeline(dlock__topo *t, const char *key, int n, const int *argcs,
                                  const char *const *const *argvs, const size_t *const *lens, int flags,
                                  redisReply **replies, int *retried);

/* One command; see dlock__topo_pipeline(). */
dlock_status dlock__topo_command(dlock__topo *t, const char *key, int argc, const char **argv, const size_t *lens,
                                 redisReply **out, int *retried);

/* The node serving `key` (a channel, for the subscriber), or -1 when none
 * is known even after looking. */
int dlock__topo_node_for(dlock__topo *t, const char *key, size_t len);

/* The same from what is known now: never does I/O, so it may be called
 * under a caller's mutex. -1 when not known. */
int dlock__topo_node_known(dlock__topo *t, const char *key, size_t len);

/* The client is being freed: every command in flight on a shared
 * connection fails now, and no connection is made any more, so that no
 * thread of the library waits out a timeout on a server that stopped
 * answering. */
void dlock__topo_close_io(dlock__topo *t);

/* Look the topology up now if it is stale (rate-limited as always). */
void dlock__topo_refresh(dlock__topo *t);

/* Something suggests the topology changed (a slot moved under a
 * subscription): look it up again before the next use. */
void dlock__topo_mark_stale(dlock__topo *t);

/* 1 on a cluster, where channels are sharded (SSUBSCRIBE). */
int dlock__topo_is_cluster(const dlock__topo *t);

/* A fresh connection to node `node`, e.g. for a subscription. */
dlock_status dlock__topo_connect(dlock__topo *t, int node, dlock__link **out);

/* A connection to `node` broke or it refused to serve: its idle
 * connections go, and the topology is looked up again before next use. */
void dlock__topo_node_failed(dlock__topo *t, int node);

/* The slot of `key` on a cluster; 0 everywhere else (so callers can group
 * by it unconditionally). */
unsigned dlock__topo_slot(const dlock__topo *t, const char *key);

/* What names this deployment, for a global order between clients. */
void dlock__topo_identity(const dlock__topo *t, char *out, size_t size);

/* Node index for host:port, added when new; -1 when the table is full or
 * memory ran out. Takes mu unless the caller holds it (`locked`). */
int dlock__topo_node_index(dlock__topo *t, const char *host, int port, int locked);

static inline dlock__pool *dlock__topo_pool(dlock__topo *t, int node)
{
    return atomic_load(&t->nodes[node]);
}

#endif
