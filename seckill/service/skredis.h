/*
 * skredis.h -- how the service reaches Redis: through the process's one
 * dlock_client, whose routing (one server, the master the Sentinels name,
 * or the Cluster node serving a key's slot, with redirections and
 * failovers followed) the lock strategy and the order ids use too. So
 * `seckill` runs unchanged on every deployment the library runs on, and
 * every command names the key that routes it (a voucher's keys share the
 * hash tag {v:ID}, see keys.h).
 */
#ifndef SECKILL_SKREDIS_H
#define SECKILL_SKREDIS_H

#include <stddef.h>

#include "dlock.h"
#include "dlock_redis.h"

typedef struct sk_redis {
    dlock_client *client;   /* not owned */
    int cluster;            /* Redis Cluster: different vouchers live in different slots,
                               so no command or script may span vouchers */
    int replicas;           /* --replica-acks: replicas that must have an order before
                               201, and a batch before the writer commits it (0: off) */
    int replica_timeout_ms; /* how long one WAIT for them lasts */
} sk_redis;

/* Fill `r` for `client`, made from `url` (which says whether it is a
 * cluster). 0, or -1 with the reason in err. */
int sk_redis_init(sk_redis *r, dlock_client *client, const char *url, int replicas, int replica_timeout_ms, char *err,
                  size_t errlen);

/*
 * One command routed by `key` (NULL: any data node), its words given as C
 * strings after `out`, ending with NULL. As dlock_redis_command(): DLOCK_OK
 * with the reply; an error reply gives DLOCK_ERR_REDIS and still sets
 * *out; a connection failure gives DLOCK_ERR_CONNECT and *out NULL.
 */
dlock_status sk_redis_cmd(const sk_redis *r, const char *key, int flags, redisReply **out, ...);

/* The same with an argv array (up to `argc` words, lengths optional). */
dlock_status sk_redis_argv(const sk_redis *r, const char *key, int flags, int argc, const char *const *argv,
                           const size_t *lens, redisReply **out);

#endif
