/*
 * keys.h -- the Redis key layout of one voucher. Every key carries the
 * hash tag {v:ID}, so all of a voucher's keys live in one Cluster slot and
 * one script may touch them all; the script receives each in KEYS.
 *
 *   seckill:{v:ID}:stock    string  units left
 *   seckill:{v:ID}:window   hash    begin, end (Unix seconds)
 *   seckill:{v:ID}:buyers   set     user ids with an order
 *   seckill:{v:ID}:orders   stream  accepted orders: order, user, voucher
 *   seckill:{v:ID}:pending  hash    order id -> user id, for each accepted
 *                                   order the writers have not acknowledged
 *                                   yet (GET /api/orders answers "pending")
 *   seckill:{v:ID}:dead     stream  orders the writer gave up on
 */
#ifndef SECKILL_KEYS_H
#define SECKILL_KEYS_H

#include <stdint.h>
#include <stdio.h>

#define SK_KEY_MAX 64
#define SK_GROUP "seckill-writers"

enum { SK_K_STOCK, SK_K_WINDOW, SK_K_BUYERS, SK_K_ORDERS, SK_K_PENDING, SK_K_DEAD, SK_K_COUNT };

static inline void sk_voucher_keys(int64_t vid, char keys[SK_K_COUNT][SK_KEY_MAX])
{
    static const char *const suffix[SK_K_COUNT] = {"stock", "window", "buyers", "orders", "pending", "dead"};
    for (int i = 0; i < SK_K_COUNT; i++)
        snprintf(keys[i], SK_KEY_MAX, "seckill:{v:%lld}:%s", (long long)vid, suffix[i]);
}

#endif
