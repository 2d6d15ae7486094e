/*
 * batch.h -- orders of one voucher gathered into one script call.
 *
 * While a voucher has as many script calls in flight as it may
 * (`in_flight`), its further orders wait here, and the next call carries
 * all that waited (up to `max`). So an idle service sends every order at
 * once, alone, and a busy one sends fewer, fuller calls: no timer, no
 * added latency beyond the call already under way.
 */
#ifndef SECKILL_BATCH_H
#define SECKILL_BATCH_H

#include <stddef.h>
#include <stdint.h>

/* What the caller queues: embed it in its own order record. */
typedef struct sk_batch_item {
    struct sk_batch_item *next;
    int64_t key; /* the voucher */
} sk_batch_item;

/* Send `n` items of `key`, chained through next, outside the batcher's
 * lock. 0: sent, and sk_batcher_done(key) follows once for them; -1: not
 * sent, and the callee has already answered every item (no done). */
typedef int sk_batch_send(void *ctx, int64_t key, sk_batch_item *chain, size_t n);

typedef struct sk_batcher sk_batcher;

/* NULL when out of memory. in_flight and max are at least 1. */
sk_batcher *sk_batcher_new(int in_flight, size_t max, sk_batch_send *send, void *ctx);

/* Send the item now, or queue it behind the calls of its key in flight.
 * -1: out of memory, the item not taken (the caller answers it). */
int sk_batcher_add(sk_batcher *b, sk_batch_item *item);

/* A call of `key` is answered: send what queued meanwhile. */
void sk_batcher_done(sk_batcher *b, int64_t key);

/* Nothing may be queued or in flight (the HTTP server is stopped). */
void sk_batcher_free(sk_batcher *b);

#endif
