/* Connections to one server: making one (connect, AUTH, SELECT, and on
 * Sentinel a ROLE check) and a pool of idle ones shared by the threads of a
 * client. Which server a command goes to is topology.c's business. */
#ifndef DLOCK_CONN_H
#define DLOCK_CONN_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>

#include "dlock.h"
#include "mux.h"

/* What every connection of a client shares, whatever server it goes to. */
typedef struct dlock_conn_cfg {
    const char *user;       /* ACL user, or NULL */
    const char *password;   /* NULL: no AUTH */
    int db;                 /* SELECT when not 0 */
    int connect_timeout_ms;
    int command_timeout_ms;
    int require_master;     /* refuse a server whose ROLE is not master (Sentinel) */
    const atomic_int *closing; /* set (non-zero) once the client is being freed: connect no more */
} dlock_conn_cfg;

/* One server: the connection all threads share (mux.c), and idle
 * connections for commands that must have one to themselves. */
typedef struct dlock_pool {
    char *host;             /* TCP host, or NULL for a unix socket */
    int port;
    char *path;             /* unix socket path, or NULL */
    const dlock_conn_cfg *cfg;
    dlock_mux mux;
    pthread_mutex_t mu;
    redisContext **idle;    /* stack of idle connections */
    size_t n_idle, cap;
} dlock_pool;

/* How a failed exchange failed, for the router's decisions. */
typedef struct dlock_io_fail {
    int timed_out;          /* no reply within the command timeout */
    int sent;               /* the commands left in full: they may have run */
} dlock_io_fail;

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

/* A fresh connection with AUTH, SELECT (and ROLE, when the config asks)
 * done; the subscriber uses this directly since a subscribed connection can
 * never return to the pool. */
dlock_status dlock_connect(const dlock_pool *p, redisContext **out);

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

/* redisCommandArgv() that cannot raise SIGPIPE on a closed connection (a
 * library must not let that kill the program). */
redisReply *dlock_command(redisContext *c, int argc, const char **argv, const size_t *lens);

/* Map an error reply to a status with the server's message, e.g. NOAUTH
 * to DLOCK_ERR_AUTH. */
dlock_status dlock_reply_error(const redisReply *r, const char *what);

#endif
