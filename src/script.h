/* The embedded Lua scripts and how they are run (EVALSHA, falling back to
 * EVAL on NOSCRIPT). */
#ifndef DLOCK__SCRIPT_H
#define DLOCK__SCRIPT_H

#include <hiredis/hiredis.h>

#include "dlock.h"
#include "dlock_lua.h"

/* One id per script of src/lua, from the list the build writes
 * (dlock_lua.h: DLOCK__LUA_SCRIPTS and the dlock__lua_NAME strings). */
typedef enum dlock__script_id {
#define DLOCK__SCRIPT_ENUM(upper, name) DLOCK__SCRIPT_##upper,
    DLOCK__LUA_SCRIPTS(DLOCK__SCRIPT_ENUM)
#undef DLOCK__SCRIPT_ENUM
        DLOCK__SCRIPT_COUNT
} dlock__script_id;

/* Give the client the SHA1 of every script (computed once per process),
 * unless that was done already. Thread-safe; no I/O. */
dlock_status dlock__scripts_ensure(dlock_client *client);

/* The text of a script, for a caller that runs it by its SHA1 through
 * dlock__async_eval() (client->sha[id]). */
const char *dlock__script_body(dlock__script_id id);

/* WAIT after a command: for how many replicas, how long, and (out) how
 * many acknowledged (-1 when the reply was not a number). */
typedef struct dlock__acks {
    int replicas;
    int timeout_ms;
    long long acks;
} dlock__acks;

/* EVALSHA `sha` with the given keys (which share one slot; the first
 * routes the call) and args, and EVAL `body` when the server does not know
 * the SHA (restart, failover, SCRIPT FLUSH, a cluster node never asked).
 * Any reply, error replies included, comes back with DLOCK_OK. With `acks`
 * (not NULL), WAIT follows on the same connection (one of its own: WAIT
 * blocks it) and acks->acks receives its answer. `flags` (DLOCK__IO_ONCE)
 * and *retried as for dlock__topo_pipeline(). */
dlock_status dlock__eval_raw(dlock_client *client, const char *sha, const char *body, int nkeys,
                             const char *const *keys, int nargs, const char *const *args, int flags, redisReply **out,
                             dlock__acks *acks, int *retried);

/* Any command followed by WAIT on the same connection of its own, routed
 * by `key` like every command (redirections, failovers). */
dlock_status dlock__command_acked(dlock_client *client, const char *key, int flags, int argc, const char *const *argv,
                                  const size_t *lens, dlock__acks *acks, redisReply **out);

/* Run a script. Only a non-error reply comes back with DLOCK_OK; an error
 * reply becomes a status with the server's message. *retried as in
 * dlock__pool_command(). */
dlock_status dlock__eval(dlock_client *client, dlock__script_id id, int nkeys, const char **keys, int nargs,
                         const char **args, redisReply **out, int *retried);

/* dlock__eval() for acquisitions: with replica-safe acquire configured
 * (client->replica_acks > 0), the script is followed by WAIT on the same
 * connection and *acks receives the replicas that acknowledged it (-1 when
 * not configured). */
dlock_status dlock__eval_acked(dlock_client *client, dlock__script_id id, int nkeys, const char **keys, int nargs,
                               const char **args, redisReply **out, long long *acks);

/* dlock__eval() for scripts that answer one integer. */
dlock_status dlock__eval_int(dlock_client *client, dlock__script_id id, int nkeys, const char **keys, int nargs,
                             const char **args, long long *out);

#endif
