/*
 * orderid.h -- order ids from libdlock's global ID generator (prefix
 * "order"), reserved in batches so most orders cost no Redis round trip.
 */
#ifndef SECKILL_ORDERID_H
#define SECKILL_ORDERID_H

#include <stdint.h>

#include "common/seckill.h"
#include "dlock.h"

typedef struct sk_orderids sk_orderids;

/* `batch` ids a reservation (1 to 4096); the next batch is reserved on a
 * thread of its own once half of the current one is used. NULL when
 * memory or a thread cannot be had. */
sk_orderids *sk_orderids_new(dlock_client *client, int batch);
void sk_orderids_free(sk_orderids *ids);

/* Reserve the first batch now, waiting for Redis (serve's start-up), so
 * the first orders need not wait for it. */
sk_result sk_orderids_fill(sk_orderids *ids);

/* The next id; SK_UNAVAILABLE when none is left and none came within
 * 250 ms (Redis cannot be reached, or hangs). Never waits for Redis
 * itself. */
sk_result sk_orderids_next(sk_orderids *ids, uint64_t *out);

#endif
