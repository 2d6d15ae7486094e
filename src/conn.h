/* One server's connections: the one all threads share (mux.c) and a pool
 * of idle ones for commands that must have a connection to themselves.
 * Which server a command goes to is topology.c's business; how bytes get
 * there is link.c's. */
#ifndef DLOCK_CONN_H
#define DLOCK_CONN_H

#include <pthread.h>

#include "dlock.h"
#include "link.h"
#include "mux.h"

/* One server. */
typedef struct dlock_pool {
    dlock_endpoint ep;      /* where, and with which settings */
    dlock_mux mux;
    pthread_mutex_t mu;
    dlock_link **idle;      /* stack of idle connections */
    size_t n_idle, cap;
} dlock_pool;

/* Flags of dlock_pool_pipeline() and dlock_topo_pipeline(). */
#define DLOCK_IO_ONCE 1      /* never send again what may have run */
#define DLOCK_IO_EXCLUSIVE 2 /* a connection of its own: the commands block
                                the connection on the server (WAIT) */

/* Set up a pool for host:port (host not NULL) or the unix socket `path`.
 * Strings are copied; cfg must outlive the pool. */
dlock_status dlock_pool_init(dlock_pool *p, const char *host, int port, const char *path, const dlock_conn_cfg *cfg);
void dlock_pool_destroy(dlock_pool *p);

/* "host:port" or the socket path, for messages and identities. */
void dlock_pool_name(const dlock_pool *p, char *out, size_t size);

/* A fresh connection of its own (a subscription, the raw API's blocking
 * commands): it never returns to the pool. */
dlock_status dlock_pool_connect(const dlock_pool *p, dlock_link **out);

/* Close every idle connection (and the shared one, if nothing is in flight
 * on it): after one turned out dead, or the server stopped being the one
 * we want, the others are suspect too. */
void dlock_pool_drop_idle(dlock_pool *p);

/*
 * Send n commands, one right after the other, and read their n replies
 * into replies[]: on the shared connection, or with DLOCK_IO_EXCLUSIVE on a
 * pooled connection of their own. When a connection made earlier turns out
 * dead (server restarted) every idle connection is dropped and the
 * commands are sent once more on a fresh one; *retried (may be NULL) tells
 * the caller, whose commands must therefore be idempotent, unless
 * DLOCK_IO_ONCE is set: then commands that may have reached the server are
 * never sent again, and the failure is reported instead. Error replies are
 * replies, not failures. On failure nothing is left in replies[] and *why
 * (may be NULL) says how it failed.
 */
dlock_status dlock_pool_pipeline(dlock_pool *p, int n, const int *argcs, const char *const *const *argvs,
                                 const size_t *const *lens, int flags, redisReply **replies, int *retried,
                                 dlock_io_fail *why);

#endif
