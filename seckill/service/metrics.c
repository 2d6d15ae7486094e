/* Counters and the Prometheus rendering; see metrics.h. */
#include "metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

static const char *const route_names[SK_ROUTE_COUNT] = {
    "voucher_create", "voucher_get",  "order_create", "order_get", "healthz", "metrics",
    "other",          "voucher_list", "my_order",     "readyz",    "openapi",
};

/* The statuses the API produces; anything else counts as "other". */
static const int statuses[] = {200, 201, 400, 401, 403, 404, 405, 409, 410, 413, 429, 500, 503};
#define NSTATUS (sizeof statuses / sizeof *statuses)

/* Latency bucket bounds in seconds (le), then +Inf. */
static const double bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define NBOUND (sizeof bounds / sizeof *bounds)

#define NRESULT SK_RESULT_COUNT

static atomic_uint_fast64_t requests[SK_ROUTE_COUNT][NSTATUS + 1];
static atomic_uint_fast64_t buckets[SK_ROUTE_COUNT][NBOUND + 1];
static atomic_uint_fast64_t latency_ns[SK_ROUTE_COUNT];
static atomic_uint_fast64_t orders[NRESULT];
static atomic_uint_fast64_t w_created, w_dup, w_rejected, w_dead, w_batches;
static atomic_int_fast64_t s_lag, s_pending, in_flight;
static atomic_uint_fast64_t rate_user, rate_total;

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

/* Orders the admission limits refused, by the limit that did; they never
 * reach a strategy, so seckill_orders_total does not count them. */
void sk_metrics_rate_limited(const char *scope)
{
    add(strcmp(scope, "user") == 0 ? &rate_user : &rate_total, 1);
}

void sk_metrics_writer(uint64_t created, uint64_t duplicates, uint64_t rejected, uint64_t dead, uint64_t batches)
{
    add(&w_created, created);
    add(&w_dup, duplicates);
    add(&w_rejected, rejected);
    add(&w_dead, dead);
    add(&w_batches, batches);
}

/* Set by the writer once a second; the gauge shows how far behind the
 * database is, the number to alert on for the redis strategy. */
void sk_metrics_in_flight(int delta)
{
    atomic_fetch_add_explicit(&in_flight, delta, memory_order_relaxed);
}

void sk_metrics_stream(int64_t lag, int64_t pending)
{
    atomic_store_explicit(&s_lag, lag, memory_order_relaxed);
    atomic_store_explicit(&s_pending, pending, memory_order_relaxed);
}

static const char *b_version = "", *b_libdlock = "", *b_strategy = "";
static _Atomic(dlock_client *) lock_client;

void sk_metrics_build_info(const char *version, const char *libdlock, const char *strategy)
{
    b_version = version;
    b_libdlock = libdlock;
    b_strategy = strategy;
}

void sk_metrics_lock_client(dlock_client *client)
{
    atomic_store(&lock_client, client);
}

/* A growable string; rendering is rare (a scrape every few seconds), so
 * simplicity beats speed here. */
typedef struct buf {
    char *p;
    size_t len, cap;
    int oom;
} buf;

/* Make room for `cap` bytes in all; 0, or -1 (remembered) when out of
 * memory. */
static int grow(buf *b, size_t cap)
{
    char *q = realloc(b->p, cap);
    if (!q) {
        b->oom = 1;
        return -1;
    }
    b->p = q;
    b->cap = cap;
    return 0;
}

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
        if (grow(b, b->cap * 2 + (size_t)n) != 0) return;
    }
}

/* The process's own numbers, read from /proc at each scrape, under the
 * names every Prometheus client library uses, so stock dashboards and
 * alerts work unchanged. Any that cannot be read is left out. */
static void process_metrics(buf *b)
{
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    char text[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = '\0';
    /* Fields after the command name, which is in parentheses and may
     * hold spaces: state is field 3, utime 14, stime 15, starttime 22,
     * vsize 23, rss 24. */
    const char *p = strrchr(text, ')');
    unsigned long long utime = 0, stime = 0, start = 0, vsize = 0, rss = 0;
    int ok =
        p && tck > 0 && page > 0 &&
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu %llu %llu",
               &utime, &stime, &start, &vsize, &rss) == 5;
    unsigned long long btime = 0;
    if ((f = fopen("/proc/stat", "r")) != NULL) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "btime %llu", &btime) == 1) break;
        fclose(f);
    }
    if (ok) {
        put(b,
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
            "# TYPE process_cpu_seconds_total counter\n"
            "process_cpu_seconds_total %.2f\n"
            "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
            "# TYPE process_resident_memory_bytes gauge\n"
            "process_resident_memory_bytes %llu\n"
            "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
            "# TYPE process_virtual_memory_bytes gauge\n"
            "process_virtual_memory_bytes %llu\n",
            (double)(utime + stime) / (double)tck, rss * (unsigned long long)page, vsize);
        if (btime)
            put(b,
                "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
                "# TYPE process_start_time_seconds gauge\n"
                "process_start_time_seconds %.2f\n",
                (double)btime + (double)start / (double)tck);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long fds = 0;
        while (readdir(d)) fds++;
        closedir(d);
        /* ".", ".." and the directory's own descriptor. */
        put(b,
            "# HELP process_open_fds Number of open file descriptors.\n"
            "# TYPE process_open_fds gauge\n"
            "process_open_fds %ld\n",
            fds - 3);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        put(b,
            "# HELP process_max_fds Maximum number of open file descriptors.\n"
            "# TYPE process_max_fds gauge\n"
            "process_max_fds %llu\n",
            (unsigned long long)rl.rlim_cur);
}

/* The library's lock metrics of the process's one client (the lock
 * strategy's per-user locks: how long buyers wait for their own lock, and
 * whether they time out), written straight into the buffer, which grows
 * until they fit. */
static void lock_metrics(buf *b)
{
    dlock_client *c = atomic_load(&lock_client);
    while (c && !b->oom) {
        size_t needed = 0;
        if (dlock_stats_prometheus(c, b->p + b->len, b->cap - b->len, &needed) == DLOCK_OK) {
            b->len += needed - 1;
            return;
        }
        if (needed == 0) return;         /* refused for another reason: leave them out */
        grow(b, b->len + needed + 4096); /* room for a kind first used meanwhile */
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
                put(&b, "seckill_requests_total{route=\"%s\",status=\"%d\"} %llu\n", route_names[r], statuses[s],
                    (unsigned long long)v);
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
                put(&b, "seckill_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n", route_names[r],
                    bounds[i], (unsigned long long)cum);
            else
                put(&b, "seckill_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n", route_names[r],
                    (unsigned long long)cum);
        }
        put(&b, "seckill_request_duration_seconds_sum{route=\"%s\"} %.6f\n", route_names[r],
            (double)get(&latency_ns[r]) / 1e9);
        put(&b, "seckill_request_duration_seconds_count{route=\"%s\"} %llu\n", route_names[r], (unsigned long long)cum);
    }
    put(&b, "# HELP seckill_orders_total Order attempts by outcome.\n"
            "# TYPE seckill_orders_total counter\n");
    for (int r = 0; r < NRESULT; r++)
        put(&b, "seckill_orders_total{outcome=\"%s\"} %llu\n", r == SK_OK ? "accepted" : sk_result_code((sk_result)r),
            (unsigned long long)get(&orders[r]));
    put(&b,
        "# HELP seckill_rate_limited_total Orders refused by --rate-per-user (user) or --rate-total (total).\n"
        "# TYPE seckill_rate_limited_total counter\n"
        "seckill_rate_limited_total{scope=\"user\"} %llu\n"
        "seckill_rate_limited_total{scope=\"total\"} %llu\n",
        (unsigned long long)get(&rate_user), (unsigned long long)get(&rate_total));
    put(&b,
        "# HELP seckill_orders_in_flight Orders waiting for their decision (the redis strategy's script).\n"
        "# TYPE seckill_orders_in_flight gauge\n"
        "seckill_orders_in_flight %lld\n",
        (long long)atomic_load_explicit(&in_flight, memory_order_relaxed));
    put(&b,
        "# HELP seckill_writer_orders_total Orders the stream writer handled, by outcome.\n"
        "# TYPE seckill_writer_orders_total counter\n"
        "seckill_writer_orders_total{outcome=\"created\"} %llu\n"
        "seckill_writer_orders_total{outcome=\"duplicate\"} %llu\n"
        "seckill_writer_orders_total{outcome=\"rejected\"} %llu\n"
        "seckill_writer_orders_total{outcome=\"dead_letter\"} %llu\n"
        "# HELP seckill_writer_batches_total Database transactions committed by the writer.\n"
        "# TYPE seckill_writer_batches_total counter\n"
        "seckill_writer_batches_total %llu\n",
        (unsigned long long)get(&w_created), (unsigned long long)get(&w_dup), (unsigned long long)get(&w_rejected),
        (unsigned long long)get(&w_dead), (unsigned long long)get(&w_batches));
    put(&b,
        "# HELP seckill_stream_lag Orders in the streams not yet read by the writers' group.\n"
        "# TYPE seckill_stream_lag gauge\n"
        "seckill_stream_lag %lld\n"
        "# HELP seckill_stream_pending Orders read but not yet acknowledged.\n"
        "# TYPE seckill_stream_pending gauge\n"
        "seckill_stream_pending %lld\n",
        (long long)atomic_load_explicit(&s_lag, memory_order_relaxed),
        (long long)atomic_load_explicit(&s_pending, memory_order_relaxed));
    put(&b,
        "# HELP seckill_build_info Version of seckill and libdlock, and the strategy; always 1.\n"
        "# TYPE seckill_build_info gauge\n"
        "seckill_build_info{version=\"%s\",libdlock=\"%s\",strategy=\"%s\"} 1\n",
        b_version, b_libdlock, b_strategy);
    process_metrics(&b);
    lock_metrics(&b);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
