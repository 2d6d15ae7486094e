/*
 * scripts.h -- the service's Lua scripts, one per file in lua/, embedded
 * as C strings at build time by cmake/embed_lua.cmake. Each file's header
 * says what it takes, returns and guarantees.
 */
#ifndef SECKILL_SCRIPTS_H
#define SECKILL_SCRIPTS_H

extern const char dlock_lua_seckill_order[];   /* decide one order (strategy_redis.c) */
extern const char dlock_lua_seckill_warm[];    /* load a voucher into Redis (warm.c) */
extern const char dlock_lua_seckill_pending[]; /* find a pending order (strategy_redis.c) */
extern const char dlock_lua_seckill_ack[];     /* acknowledge persisted orders (writer.c) */

#endif
