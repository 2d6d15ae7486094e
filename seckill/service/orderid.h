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

sk_orderids *sk_orderids_new(dlock_client *client, int batch);
void sk_orderids_free(sk_orderids *ids);

/* The next id; SK_UNAVAILABLE when Redis cannot be reached. */
sk_result sk_orderids_next(sk_orderids *ids, uint64_t *out);

#endif
