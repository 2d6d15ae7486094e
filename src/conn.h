/* Connections: making one (connect, AUTH, SELECT) and a pool of idle ones
 * shared by the threads of a client. */
#ifndef DLOCK_CONN_H
#define DLOCK_CONN_H

#include <hiredis/hiredis.h>
#include <pthread.h>

#include "dlock.h"

typedef struct dlock_pool {
    dlock_url url;
    int connect_timeout_ms;
    int command_timeout_ms;
    pthread_mutex_t mu;
    redisContext **idle; /* stack of idle connections */
    size_t n_idle, cap;
} dlock_pool;

dlock_status dlock_pool_init(dlock_pool *p, const char *url, int connect_timeout_ms,
                             int command_timeout_ms);
void dlock_pool_destroy(dlock_pool *p);

/* A fresh connection with AUTH and SELECT done; the subscriber uses this
 * directly since a subscribed connection can never return to the pool. */
dlock_status dlock_connect(const dlock_pool *p, redisContext **out);

/* Run one command (binary-safe argv) on a pooled connection. When a pooled
 * connection turns out dead (server restarted) every idle connection is
 * dropped and the command is sent once more on a fresh one; *retried (may
 * be NULL) tells the caller, whose command must therefore be idempotent.
 * An error reply is returned as a reply, not as a failure. */
dlock_status dlock_pool_command(dlock_pool *p, int argc, const char **argv, const size_t *lens,
                                redisReply **out, int *retried);

/* dlock_pool_command() followed, on the same connection and in the same
 * write, by WAIT `replicas` `timeout_ms`: *acks receives how many replicas
 * acknowledged the command's writes (-1 if WAIT failed). */
dlock_status dlock_pool_command_wait(dlock_pool *p, int argc, const char **argv, int replicas, int timeout_ms,
                                     redisReply **out, long long *acks, int *retried);

/* redisCommandArgv() that cannot raise SIGPIPE on a closed connection (a
 * library must not let that kill the program). */
redisReply *dlock_command(redisContext *c, int argc, const char **argv, const size_t *lens);

/* Map an error reply to a status with the server's message, e.g. NOAUTH
 * to DLOCK_ERR_AUTH. */
dlock_status dlock_reply_error(const redisReply *r, const char *what);

#endif
