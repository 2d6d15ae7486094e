/*
 * acked.h -- a command followed by WAIT on the same connection, for
 * `serve --replica-acks N`: the order script (201 only once N replicas
 * have the order) and the writer's barrier before a commit (it persists
 * only orders N replicas have), so a failover to such a replica loses no
 * acknowledged order and leaves the database no order Redis forgot.
 *
 * Why not the library's routed commands: WAIT counts the replicas that
 * have every write made *on its own connection* so far, so it must follow
 * the write on the connection that carried it. The library sends all
 * threads' commands on one shared pipelined connection per server and has
 * no public "command + WAIT" call (its replica-safe lock acquire does this
 * internally), so each thread keeps a few connections of its own here,
 * made by dlock_redis_connect() to the server serving the key. A
 * connection is dropped on any error; a reply saying the key is served
 * elsewhere (MOVED, READONLY, CLUSTERDOWN, ...) also sends one routed
 * command for that key, so the library's map follows the change.
 */
#ifndef SECKILL_ACKED_H
#define SECKILL_ACKED_H

#include <stddef.h>

#include "skredis.h"

/* A Lua script run by SHA1 (computed here, no SCRIPT LOAD round trip). */
typedef struct sk_lua {
    const char *text;
    char sha[41];
} sk_lua;

void sk_lua_init(sk_lua *s, const char *text);

/*
 * Run argv on the calling thread's connection to the server of `key`, then
 * WAIT r->replicas r->replica_timeout_ms there. DLOCK_OK with the reply in
 * *out and the replicas that acknowledged in *acks; an error reply is
 * DLOCK_ERR_REDIS with *out set; DLOCK_ERR_CONNECT when the connection
 * failed (whether the command ran is then unknown) or the key's server
 * could not be reached. A command refused because the key is served
 * elsewhere did not run and is sent once more, to the new server.
 */
dlock_status sk_acked_run(const sk_redis *r, const char *key, int argc, const char *const *argv, const size_t *lens,
                          redisReply **out, long long *acks);

/* Why the calling thread's last sk_acked_run or sk_acked_eval failed
 * without a reply (DLOCK_ERR_CONNECT): the server and the connection's
 * own error, or why no connection could be made. The library's
 * dlock_last_error() does not cover these calls. */
const char *sk_acked_error(void);

/* The same for a script: EVALSHA, and EVAL when the server lacks it. */
dlock_status sk_acked_eval(const sk_redis *r, const sk_lua *s, int nkeys, const char *const *keys, int nargs,
                           const char *const *args, redisReply **out, long long *acks);

/* Close the calling thread's connection for `key`, so the next call asks
 * the library where the key is served now: after the server said it has
 * no replica online, which a master the Sentinels demoted while we kept
 * a connection to it also says. */
void sk_acked_forget(const sk_redis *r, const char *key);

/* Close the calling thread's connections now (they are closed at thread
 * exit anyway). */
void sk_acked_close(void);

#endif
