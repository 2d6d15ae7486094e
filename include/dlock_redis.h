/*
 * dlock_redis.h -- your own Redis commands, sent where the client's locks go.
 *
 * A program that keeps data next to its locks (a stock counter, an order
 * stream) wants its commands routed the way the library routes its own: to
 * the one server, to the master the Sentinels name, or to the Redis Cluster
 * node serving the key's hash slot, with the same connection pool, the same
 * handling of redirections and failovers, and the same credentials. This
 * header gives that, in hiredis's types; include it only if your program
 * uses hiredis itself, and build with `pkg-config --cflags --libs dlock
 * hiredis`.
 *
 * The rules are the library's own: every key of one command must share a
 * hash slot (give related keys one {hash tag}), and `key` names that slot.
 * Calls are thread-safe; replies belong to the caller (freeReplyObject).
 */
#ifndef DLOCK_REDIS_H
#define DLOCK_REDIS_H

#include <hiredis/hiredis.h>

#include "dlock.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Flag for dlock_redis_command() and dlock_script_eval(): never send the
 * command a second time. Without it, a command whose connection broke
 * after it was sent (a server restart, a failover) is sent again on a new
 * connection, which is right for idempotent commands. With it, that case
 * fails with DLOCK_ERR_CONNECT instead, and the caller must find out
 * whether the command ran.
 */
#define DLOCK_REDIS_ONCE 1

/*
 * Flag: the command may keep the connection busy on the server for a
 * while (BLPOP, XREADGROUP ... BLOCK, WAIT, a slow script). Commands of all
 * threads normally share one pipelined connection per server, and such a
 * command would hold up everyone's; with this flag it gets a connection of
 * its own from the pool for the time it runs.
 */
#define DLOCK_REDIS_BLOCKING 2

/*
 * Run one command (binary-safe argv; argvlen may be NULL for C strings) on
 * the server that serves `key`, or on any data node when `key` is NULL.
 * DLOCK_OK with the reply in *reply; an error reply gives DLOCK_ERR_REDIS
 * (DLOCK_ERR_AUTH for NOAUTH/NOPERM) with the server's message in
 * dlock_last_error(), and *reply is still set so the caller can look at it.
 * Connection failures give DLOCK_ERR_CONNECT and *reply NULL.
 */
DLOCK_API dlock_status dlock_redis_command(dlock_client *client, const char *key, int flags, int argc,
                                           const char *const *argv, const size_t *argvlen, redisReply **reply);

/*
 * A new connection of the caller's own to the server that serves `key`
 * (NULL: any data node), with AUTH and SELECT done and, on Sentinel, the
 * master checked: for blocking commands (XREADGROUP ... BLOCK) that must
 * not hold one of the pool's connections. It does not follow failovers or
 * redirections; on any error, close it and ask for a new one. Not over
 * TLS (DLOCK_ERR_INVALID): a hiredis 0.14 context cannot speak it; use
 * dlock_redis_command() with DLOCK_REDIS_BLOCKING there.
 */
DLOCK_API dlock_status dlock_redis_connect(dlock_client *client, const char *key, redisContext **out);

/* A Lua script of the caller's, run by SHA1 (EVALSHA) and sent in full only
 * to servers that lack it (after a restart, a failover, on a cluster node
 * that never saw it). */
typedef struct dlock_script dlock_script;

/*
 * Make a script from its text (copied). The text is loaded with SCRIPT
 * LOAD at once, so a syntax error shows here (DLOCK_ERR_REDIS, with the
 * server's message). The script may only touch keys passed to it.
 */
DLOCK_API dlock_status dlock_script_new(dlock_client *client, const char *text, dlock_script **out);

/* Free a script made by dlock_script_new(). */
DLOCK_API void dlock_script_free(dlock_script *script);

/*
 * Run the script with keys[0..nkeys-1] (one slot; at least one key, which
 * routes it) and args[0..nargs-1]. Replies and errors as for
 * dlock_redis_command(); a script that calls redis.error_reply() or fails
 * gives DLOCK_ERR_REDIS with its message.
 */
DLOCK_API dlock_status dlock_script_eval(dlock_script *script, int flags, int nkeys, const char *const *keys, int nargs,
                                         const char *const *args, redisReply **reply);

/*
 * Run the command, then WAIT `replicas` `timeout_ms` on the same
 * connection (one of the call's own: WAIT counts the replicas that have
 * every write made on its connection, and blocks it on the server), routed
 * by `key` as dlock_redis_command() routes. *reply as for
 * dlock_redis_command(); *acks receives how many replicas acknowledged
 * (-1 when WAIT gave no number). For writes that must survive a failover
 * only once enough replicas have them. Works over TLS like every call.
 */
DLOCK_API dlock_status dlock_redis_command_acked(dlock_client *client, const char *key, int flags, int argc,
                                                 const char *const *argv, const size_t *argvlen, int replicas,
                                                 int timeout_ms, redisReply **reply, long long *acks);

/* The same for a script (EVALSHA, EVAL when the server lacks it). */
DLOCK_API dlock_status dlock_script_eval_acked(dlock_script *script, int flags, int nkeys, const char *const *keys,
                                               int nargs, const char *const *args, int replicas, int timeout_ms,
                                               redisReply **reply, long long *acks);

/*
 * The server of `key` answered as no master would (it says it has no
 * replicas online, say: a demoted master you still reach): close its idle
 * connections and look the deployment up again before the next command.
 * No-op on a single server, which has nowhere else to be.
 */
DLOCK_API void dlock_redis_refresh(dlock_client *client, const char *key);

/*
 * What an asynchronous call ends with: `status` and the reply as
 * dlock_script_eval() would give them (DLOCK_OK with the reply; an error
 * reply gives DLOCK_ERR_REDIS and the reply; a failure gives its status and
 * NULL). The callback owns the reply (freeReplyObject). dlock_last_error()
 * called inside it gives the failure's message.
 */
typedef void dlock_redis_callback(dlock_status status, redisReply *reply, void *arg);

/*
 * dlock_script_eval() without waiting: the call is appended to the shared
 * connection of the server that serves keys[0] and this returns without
 * waiting for the reply (it may wait, up to the connect timeout, for that
 * connection to be made);
 * cb(status, reply, arg) runs exactly once later, on a thread of the
 * library (never inside this call, never with a library lock held), so
 * many calls can be in flight from one thread. Routing, NOSCRIPT,
 * redirections and failovers are handled as for the synchronous call, and
 * DLOCK_REDIS_ONCE keeps its meaning: a call whose reply was lost after it
 * may have reached the server ends with DLOCK_ERR_CONNECT and is never
 * sent again. Keys and args are copied; the script must outlive its calls.
 * A status other than DLOCK_OK means nothing was sent and cb will not run.
 * dlock_client_free() waits for every call in flight (each ends within
 * the client's timeouts, as a synchronous call does); do not call it from a
 * callback, and calls submitted once it has begun are refused. Callbacks
 * should be short: they run on the threads that read every caller's
 * replies, and calls made inside one leave together, in one write, once
 * the callbacks of that burst of replies have run (or sooner).
 */
DLOCK_API dlock_status dlock_script_eval_async(dlock_script *script, int flags, int nkeys, const char *const *keys,
                                               int nargs, const char *const *args, dlock_redis_callback *cb, void *arg);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_REDIS_H */
