/*
 * metrics.h -- process-wide counters for GET /metrics (Prometheus text).
 * Every update is one relaxed atomic add: cheap enough for the hot path.
 */
#ifndef SECKILL_METRICS_H
#define SECKILL_METRICS_H

#include <stdint.h>

#include "common/seckill.h"
#include "dlock.h"

/* The API's routes, as metrics labels. */
typedef enum sk_route {
    SK_ROUTE_VOUCHER_CREATE = 0,
    SK_ROUTE_VOUCHER_GET,
    SK_ROUTE_ORDER_CREATE,
    SK_ROUTE_ORDER_GET,
    SK_ROUTE_HEALTHZ,
    SK_ROUTE_METRICS,
    SK_ROUTE_OTHER,
    SK_ROUTE_VOUCHER_LIST,
    SK_ROUTE_MY_ORDER,
    SK_ROUTE_READYZ,
    SK_ROUTE_OPENAPI,
    SK_ROUTE_COUNT
} sk_route;

/* One finished request: its route, HTTP status and handling time. */
void sk_metrics_request(sk_route route, int status, int64_t ns);

/* The outcome of one order attempt (SK_OK = accepted). */
void sk_metrics_order(sk_result r);

/* An order handed to the strategy to be answered later (+1), and its
 * answer (-1): the orders waiting for Redis. */
void sk_metrics_in_flight(int delta);

/* An order refused by an admission limit: scope "user" or "total". */
void sk_metrics_rate_limited(const char *scope);

/* The writer's progress. */
void sk_metrics_writer(uint64_t created, uint64_t duplicates, uint64_t rejected, uint64_t dead, uint64_t batches);

/* Entries not yet persisted: never delivered (lag) and delivered but not
 * acknowledged (pending), summed over the voucher streams. */
void sk_metrics_stream(int64_t lag, int64_t pending);

/* What seckill_build_info says (static strings, kept by pointer). */
void sk_metrics_build_info(const char *version, const char *libdlock, const char *strategy);

/* The client whose lock metrics (dlock_*) each scrape appends; NULL
 * (before the client goes away) stops that. */
void sk_metrics_lock_client(dlock_client *client);

/* The whole exposition as a malloc'ed string. */
char *sk_metrics_render(void);

#endif
