/* One server's connections: the one all threads share (mux.c) and a pool
 * of idle ones for commands that must have a connection to themselves.
 * Which server a command goes to is topology.c's business; how bytes get
 * there is link.c's. */
#ifndef DLOCK__CONN_H
#define DLOCK__CONN_H

#include <pthread.h>

#include "dlock.h"
#include "link.h"
#include "mux.h"

/* One server. */
typedef struct dlock__pool {
    dlock__endpoint ep; /* where, and with which settings */
    dlock__mux mux;
    pthread_mutex_t mu;
    dlock__link **idle; /* stack of idle connections */
    size_t n_idle, cap;
} dlock__pool;

/* Flags of dlock__pool_pipeline() and dlock__topo_pipeline(). */
#define DLOCK__IO_ONCE 1 /* never send again what may have run */
#define DLOCK__IO_EXCLUSIVE                                                                                            \
    2 /* a connection of its own: the commands block
                                the connection on the server (WAIT) */

/* Set up a pool for host:port (host not NULL) or the unix socket `path`.
 * Strings are copied; cfg must outlive the pool. */
dlock_status dlock__pool_init(dlock__pool *p, const char *host, int port, const char *path, const dlock__conn_cfg *cfg);
void dlock__pool_destroy(dlock__pool *p);

/* "host:port" or the socket path, for messages and identities. */
void dlock__pool_name(const dlock__pool *p, char *out, size_t size);

/* A fresh connection of its own (a subscription, the raw API's blocking
 * commands): it never returns to the pool. */
dlock_status dlock__pool_connect(const dlock__pool *p, dlock__link **out);

/* Close every idle connection (and the shared one, if nothing is in flight
 * on it): after one turned out dead, or the server stopped being the one
 * we want, the others are suspect too. */
void dlock__pool_drop_idle(dlock__pool *p);

/*
 * Send n commands, one right after the other, and read their n replies
 * into replies[]: on the shared connection, or with DLOCK__IO_EXCLUSIVE on a
 * pooled connection of their own. When a connection made earlier turns out
 * dead (server restarted) every idle connection is dropped and the
 * commands are sent once more on a fresh one; *retried (may be NULL) tells
 * the caller, whose commands must therefore be idempotent, unless
 * DLOCK__IO_ONCE is set: then commands that may have reached the server are
 * never sent again, and the failure is reported instead. Error replies are
 * replies, not failures. On failure nothing is left in replies[] and *why
 * (may be NULL) says how it failed.
 */
dlock_status dlock__pool_pipeline(dlock__pool *p, int n, const int *argcs, const char *const *const *argvs,
                                  const size_t *const *lens, int flags, redisReply **replies, int *retried,
                                  dlock__io_fail *why);

#endif
