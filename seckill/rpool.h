/*
 * rpool.h -- plain hiredis connections for the service's own Redis work
 * (the order script, warming, the writer's stream commands), pooled for
 * the HTTP threads. libdlock's own pool is private to the library.
 */
#ifndef SECKILL_RPOOL_H
#define SECKILL_RPOOL_H

#include <stddef.h>

#include <hiredis/hiredis.h>

typedef struct sk_rpool sk_rpool;

/* A Lua script carried in the binary; sha is filled in on first use. */
typedef struct sk_script {
    const char *text;
    char sha[41];
} sk_script;

/* Parse `url` (redis:// or unix://, as libdlock accepts) and connect once
 * to check it. `command_timeout_ms` bounds every reply. */
int sk_rpool_new(const char *url, int command_timeout_ms, sk_rpool **out, char *err, size_t errlen);
void sk_rpool_free(sk_rpool *p);

/* A fresh connection of one's own (the writer keeps one), with AUTH and
 * SELECT done; NULL on failure. `timeout_ms` 0 keeps the pool's. */
redisContext *sk_rpool_connect(sk_rpool *p, int timeout_ms);

/*
 * Run one command (hiredis printf format) on a pooled connection. Returns the reply (caller frees),
 * or NULL when the connection failed. With `resend_ok` a command that
 * failed on a connection is sent once more on a new one; pass 0 for
 * commands that must not run twice when only the reply was lost.
 */
redisReply *sk_rpool_cmd(sk_rpool *p, int resend_ok, const char *fmt, ...);

/*
 * Send `n` commands (argv form, each NULL-terminated) on one pooled
 * connection in one write, and read their `n` replies into out[] (caller
 * frees each). 0, or -1 when the connection failed (out[] all NULL). Read
 * commands only: nothing is resent.
 */
int sk_rpool_pipeline(sk_rpool *p, int n, const char *const *const *cmds, redisReply **out);

/* Run a script by EVALSHA, falling back to EVAL when the server does not
 * have it (restart, SCRIPT FLUSH). `args` holds the keys then the args. */
redisReply *sk_rpool_script(sk_rpool *p, sk_script *s, int resend_ok, int nkeys, int nargs,
                            const char **args);

#endif
