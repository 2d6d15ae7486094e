/*
 * warm.h -- loading a voucher's sale state into Redis from the database
 * (the redis strategy's warm-up): at creation, and whenever the order
 * script finds the voucher cold (a Redis restarted empty, a failover to a
 * replica that never had it, an evicted key).
 */
#ifndef SECKILL_WARM_H
#define SECKILL_WARM_H

#include <stdint.h>

#include "common/seckill.h"
#include "skredis.h"
#include "store/db.h"

/* Load a voucher's stock, window and buyers into Redis, from the database
 * minus the orders its stream holds unacknowledged, unless it is warm
 * already. `script` is seckill_warm.lua. All its commands name the
 * voucher's keys, so they reach the voucher's server on every deployment. */
sk_result sk_redis_warm(sk_db *db, const sk_redis *redis, dlock_script *script, int64_t voucher_id);

#endif
