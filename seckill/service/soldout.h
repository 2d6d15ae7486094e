/*
 * soldout.h -- an instance's memory of sold-out vouchers, so that the
 * flood of late buyers of a flash sale (most of its requests) is answered
 * without asking Redis.
 *
 * What is remembered, per voucher: its window and every user who got a
 * unit, read in one atomic step while the stock was 0 (seckill_soldout.lua).
 * While the stock stays 0 no buyer can be added, so those answers are the
 * order script's own: 403 by the window, 409 for a buyer, 410 for
 * everyone else, in the script's order.
 *
 * The limit, in one sentence: stock that comes back (a Redis that lost the
 * voucher is warmed again from the database by another instance) is seen
 * here only when the memory ends, `ttl_ms` after it was read; until then
 * this instance answers 410 for units that are there, never the reverse,
 * so it can refuse a sale but never oversell. A warm-up by this instance
 * forgets the voucher at once.
 */
#ifndef SECKILL_SOLDOUT_H
#define SECKILL_SOLDOUT_H

#include <stddef.h>
#include <stdint.h>

#include "common/seckill.h"

typedef struct sk_soldout sk_soldout;

/* A memory whose entries last ttl_ms (0: remember nothing, every call
 * below then does nothing). NULL when out of memory. */
sk_soldout *sk_soldout_new(long ttl_ms);
void sk_soldout_free(sk_soldout *m);

/* The answer for this order if the voucher is remembered sold out (then
 * one of SK_NOT_STARTED, SK_ENDED, SK_ALREADY, SK_SOLD_OUT), else SK_OK:
 * ask Redis. */
sk_result sk_soldout_answer(sk_soldout *m, int64_t voucher_id, int64_t user_id, int64_t now);

/* The order script said "sold out": the voucher is worth reading. */
void sk_soldout_seen(sk_soldout *m, int64_t voucher_id);

/* 1 when the voucher was seen sold out and is not remembered yet, and the
 * caller is the one thread to read it now (then it calls sk_soldout_store,
 * or sk_soldout_forget when the read failed or found stock). */
int sk_soldout_claim(sk_soldout *m, int64_t voucher_id);

/* Remember the voucher: its window and its buyers (copied; any order). */
void sk_soldout_store(sk_soldout *m, int64_t voucher_id, int64_t begin, int64_t end, const int64_t *buyers, size_t n);

/* Drop whatever is known or wanted of the voucher (it was warmed again). */
void sk_soldout_forget(sk_soldout *m, int64_t voucher_id);

#endif
