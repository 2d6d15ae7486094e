/*
 * acked.h -- a command followed by WAIT on the same connection, for
 * `serve --replica-acks N`: the order script (201 only once N replicas
 * have the order) and the writer's barrier before a commit (it persists
 * only orders N replicas have), so a failover to such a replica loses no
 * acknowledged order and leaves the database no order Redis forgot.
 *
 * WAIT counts the replicas that have every write made on its own
 * connection, so it must follow the write on the connection that carried
 * it: the library's dlock_redis_command_acked() does exactly that, routed
 * like every call (redirections, failovers, TLS); the order script goes
 * through dlock_script_eval_acked(). This file keeps each thread's last
 * failure for the writer's barrier.
 */
#ifndef SECKILL_ACKED_H
#define SECKILL_ACKED_H

#include <stddef.h>

#include "skredis.h"

/*
 * Run argv on the server of `key`, then WAIT r->replicas
 * r->replica_timeout_ms on the same connection. DLOCK_OK with the reply in
 * *out and the replicas that acknowledged in *acks; an error reply is
 * DLOCK_ERR_REDIS with *out set; DLOCK_ERR_CONNECT when the connection
 * failed (whether the command ran is then unknown) or the key's server
 * could not be reached. Never sent twice after it may have run.
 */
dlock_status sk_acked_run(const sk_redis *r, const char *key, int argc, const char *const *argv, const size_t *lens,
                          redisReply **out, long long *acks);

/* Why the calling thread's last sk_acked_run failed
 * without a reply (DLOCK_ERR_CONNECT): the library's message for that very
 * call (the server and the connection's error), kept apart from later
 * calls of the thread. */
const char *sk_acked_error(void);

/* The server of `key` said it has no replica online, which a master the
 * Sentinels demoted while we kept using it also says: the library looks
 * the deployment up again before the next call. */
void sk_acked_forget(const sk_redis *r, const char *key);

#endif
