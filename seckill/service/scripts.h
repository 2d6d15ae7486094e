/*
 * scripts.h -- the service's Lua scripts, one per file in seckill/lua/, embedded
 * as C strings at build time by cmake/embed_lua.cmake, which also writes
 * their declarations (sk_lua_seckill_order, _warm, _pending, _ack) and
 * SECKILL_LUA_SCRIPTS into seckill_lua.h. Each file's header says what it
 * takes, returns and guarantees.
 */
#ifndef SECKILL_SCRIPTS_H
#define SECKILL_SCRIPTS_H

#include "seckill_lua.h"

#endif
