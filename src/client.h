/* The client object, shared by every part of the library. */
#ifndef DLOCK__CLIENT_H
#define DLOCK__CLIENT_H

#include <pthread.h>
#include <stdatomic.h>

#include "async.h"
#include "fence.h"
#include "script.h"
#include "stats.h"
#include "topology.h"

struct dlock__subscriber;
struct dlock__watchdog;

struct dlock_client {
    dlock__topo *topo; /* where each command goes */
    char id[33];       /* 128 random bits in hex */
    long watchdog_lease_ms;
    long fair_waiter_timeout_ms;
    int replica_acks;                  /* replica-safe acquire: replicas to wait for (0: off) */
    int replica_timeout_ms;            /* ... and for how long */
    int safety_margin_pct;             /* a hold is trusted until its lease less this (watchdog.h) */
    long op_ttl_ms;                    /* lifetime of operation records (op.c) */
    atomic_ullong op_seq;              /* last operation sequence number handed out */
    char sha[DLOCK__SCRIPT_COUNT][41]; /* SHA1 of each script, computed at build time */
    atomic_int scripts_ready;          /* sha[] is filled (set once, under mu) */
    const char *publish;               /* "publish", or "spublish" on Cluster (sharded pub/sub) */
    pthread_mutex_t mu;                /* guards the lazy start of the threads, and draining */
    int draining;                      /* dlock_client_drain() began */
    struct dlock__subscriber *sub;     /* started by the first waiter */
    struct dlock__watchdog *wd;        /* started by the first renewed hold */
    dlock__async async;                /* asynchronous calls in flight, and the slow lane */
    dlock__fence_cache fences;         /* the highest fencing token seen per name */
    dlock__stats_data stats;           /* lock metrics (stats.c) */
};

/* The subscriber and watchdog threads are started on first need, so a
 * client that only makes IDs or tries once costs no threads. */
struct dlock__subscriber *dlock__client_subscriber(dlock_client *c);
struct dlock__watchdog *dlock__client_watchdog(dlock_client *c);

#endif
