/*
 * strategy.h -- the two ways of deciding orders (see seckill.h for the
 * interface).
 *
 * lock:  the seeds' design. A per-user dlock lock ("seckill:user:UID"),
 *        then one database transaction checks the window, the user's
 *        earlier order and the stock, and inserts the order. 201 means
 *        the order is committed.
 * redis: one Lua script per order decides in Redis and appends the order
 *        to the voucher's stream; the writer (writer.h) persists it. 201
 *        means the order is in the stream.
 */
#ifndef SECKILL_STRATEGY_H
#define SECKILL_STRATEGY_H

#include "common/seckill.h"
#include "dlock.h"
#include "orderid.h"
#include "skredis.h"
#include "store/db.h"

struct sk_writer;

/* The database stays owned by the caller; so do the Redis access (whose
 * client the lock strategy and the ids share), ids and writer.
 * `grace_s`: after a Redis restart, vouchers are re-warmed only once the
 * server has been up this many seconds (orders are answered "busy" until
 * then), so that orders a writer read before the restart have landed in
 * the database. 0 when no other process can hold such orders (the
 * embedded Redis is private to this process). `sold_out_ms`: how long
 * the instance remembers a sold-out voucher and answers its late buyers
 * without Redis (soldout.h; 0: never). Loads the scripts; -1 with a reason
 * in err when that fails. */
int sk_strategy_redis_new(sk_db *db, const sk_redis *redis, sk_orderids *ids, struct sk_writer *writer, int grace_s,
                          long sold_out_ms, sk_strategy *out, char *err, size_t errlen);
/* `order_timeout_ms` (serve's --order-timeout; 0: none) caps how long an
 * order waits for its user's lock (2 s at most): this strategy answers in
 * the request's thread, where the HTTP layer's deadline cannot reach. */
int sk_strategy_lock_new(sk_db *db, dlock_client *client, sk_orderids *ids, int order_timeout_ms, sk_strategy *out);

#endif
