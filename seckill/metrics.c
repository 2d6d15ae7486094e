/* Counters and the Prometheus rendering; see metrics.h. */
#include "metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const route_names[SK_ROUTE_COUNT] = {
    "voucher_create", "voucher_get", "order_create", "order_get", "healthz", "metrics", "other",
};

/* The statuses the API produces; anything else counts as "other". */
static const int statuses[] = {200, 201, 400, 401, 403, 404, 405, 409, 410, 413, 429, 500, 503};
#define NSTATUS (sizeof statuses / sizeof *statuses)

/* Latency bucket bounds in seconds (le), then +Inf. */
static const double bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define NBOUND (sizeof bounds / sizeof *bounds)

#define NRESULT (SK_INTERNAL + 1)

static atomic_uint_fast64_t requests[SK_ROUTE_COUNT][NSTATUS + 1];
static atomic_uint_fast64_t buckets[SK_ROUTE_COUNT][NBOUND + 1];
static atomic_uint_fast64_t latency_ns[SK_ROUTE_COUNT];
static atomic_uint_fast64_t orders[NRESULT];
static atomic_uint_fast64_t w_created, w_dup, w_rejected, w_dead, w_batches;
static atomic_int_fast64_t s_lag, s_pending;

/* Relaxed: counters need atomicity, not ordering with other memory. */
static void add(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* A scrape may see counters a few increments apart; that is fine. */
static uint64_t get(atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* Called once per answered request, from the HTTP threads. */
void sk_metrics_request(sk_route route, int status, int64_t ns)
{
    if ((unsigned)route >= SK_ROUTE_COUNT) route = SK_ROUTE_OTHER;
    size_t si = NSTATUS;
    for (size_t i = 0; i < NSTATUS; i++)
        if (statuses[i] == status) si = i;
    add(&requests[route][si], 1);
    if (ns < 0) ns = 0;
    double s = (double)ns / 1e9;
    size_t b = NBOUND;
    for (size_t i = 0; i < NBOUND; i++)
        if (s <= bounds[i]) {
            b = i;
            break;
        }
    add(&buckets[route][b], 1);
    add(&latency_ns[route], (uint64_t)ns);
}

/* Outcomes of order attempts, separate from HTTP statuses: 403 is both
 * not_started and ended. */
void sk_metrics_order(sk_result r)
{
    if ((unsigned)r < NRESULT) add(&orders[r], 1);
}

void sk_metrics_writer(uint64_t created, uint64_t duplicates, uint64_t rejected, uint64_t dead,
                       uint64_t batches)
{
    add(&w_created, created);
    add(&w_dup, duplicates);
    add(&w_rejected, rejected);
    add(&w_dead, dead);
    add(&w_batches, batches);
}

/* Set by the writer once a second; the gauge shows how far behind the
 * database is, the number to alert on for the redis strategy. */
void sk_metrics_stream(int64_t lag, int64_t pending)
{
    atomic_store_explicit(&s_lag, lag, memory_order_relaxed);
    atomic_store_explicit(&s_pending, pending, memory_order_relaxed);
}

/* A growable string; rendering is rare (a scrape every few seconds), so
 * simplicity beats speed here. */
typedef struct buf {
    char *p;
    size_t len, cap;
    int oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append with printf formatting, growing the buffer; remembers failure
 * so the caller checks once. */
static void put(buf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

/* Prometheus text format 0.0.4. Request counters never hit are left out
 * (route x status is mostly empty); histograms, outcome counters and the
 * gauges are always there, as dashboards expect. */
char *sk_metrics_render(void)
{
    buf b = {malloc(8192), 0, 8192, 0};
    if (!b.p) return NULL;
    b.p[0] = '\0';
    put(&b, "# HELP seckill_requests_total HTTP requests by route and status.\n"
            "# TYPE seckill_requests_total counter\n");
    for (int r = 0; r < SK_ROUTE_COUNT; r++)
        for (size_t s = 0; s <= NSTATUS; s++) {
            uint64_t v = get(&requests[r][s]);
            if (!v) continue;
            if (s < NSTATUS)
                put(&b, "seckill_requests_total{route=\"%s\",status=\"%d\"} %llu\n", route_names[r],
                    statuses[s], (unsigned long long)v);
            else
                put(&b, "seckill_requests_total{route=\"%s\",status=\"other\"} %llu\n", route_names[r],
                    (unsigned long long)v);
        }
    put(&b, "# HELP seckill_request_duration_seconds Time to handle a request.\n"
            "# TYPE seckill_request_duration_seconds histogram\n");
    for (int r = 0; r < SK_ROUTE_COUNT; r++) {
        uint64_t cum = 0;
        for (size_t i = 0; i <= NBOUND; i++) {
            cum += get(&buckets[r][i]);
            if (i < NBOUND)
                put(&b, "seckill_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n",
                    route_names[r], bounds[i], (unsigned long long)cum);
            else
                put(&b, "seckill_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n",
                    route_names[r], (unsigned long long)cum);
        }
        put(&b, "seckill_request_duration_seconds_sum{route=\"%s\"} %.6f\n", route_names[r],
            (double)get(&latency_ns[r]) / 1e9);
        put(&b, "seckill_request_duration_seconds_count{route=\"%s\"} %llu\n", route_names[r],
            (unsigned long long)cum);
    }
    put(&b, "# HELP seckill_orders_total Order attempts by outcome.\n"
            "# TYPE seckill_orders_total counter\n");
    for (int r = 0; r < NRESULT; r++)
        put(&b, "seckill_orders_total{outcome=\"%s\"} %llu\n",
            r == SK_OK ? "accepted" : sk_result_code((sk_result)r), (unsigned long long)get(&orders[r]));
    put(&b, "# HELP seckill_writer_orders_total Orders the stream writer handled, by outcome.\n"
            "# TYPE seckill_writer_orders_total counter\n"
            "seckill_writer_orders_total{outcome=\"created\"} %llu\n"
            "seckill_writer_orders_total{outcome=\"duplicate\"} %llu\n"
            "seckill_writer_orders_total{outcome=\"rejected\"} %llu\n"
            "seckill_writer_orders_total{outcome=\"dead_letter\"} %llu\n"
            "# HELP seckill_writer_batches_total Database transactions committed by the writer.\n"
            "# TYPE seckill_writer_batches_total counter\n"
            "seckill_writer_batches_total %llu\n",
        (unsigned long long)get(&w_created), (unsigned long long)get(&w_dup),
        (unsigned long long)get(&w_rejected), (unsigned long long)get(&w_dead),
        (unsigned long long)get(&w_batches));
    put(&b, "# HELP seckill_stream_lag Orders in the streams not yet read by the writers' group.\n"
            "# TYPE seckill_stream_lag gauge\n"
            "seckill_stream_lag %lld\n"
            "# HELP seckill_stream_pending Orders read but not yet acknowledged.\n"
            "# TYPE seckill_stream_pending gauge\n"
            "seckill_stream_pending %lld\n",
        (long long)atomic_load_explicit(&s_lag, memory_order_relaxed),
        (long long)atomic_load_explicit(&s_pending, memory_order_relaxed));
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
