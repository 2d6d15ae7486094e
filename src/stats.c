/*
 * Lock metrics: the counting (called from the primitives, the watchdog
 * and the wait loop) and the two ways out, a copy and the Prometheus
 * text.
 *
 * Every update is a relaxed atomic addition on the client's cells: the
 * numbers need to be exact in the end, not ordered against anything else,
 * so the hot path pays no fence and no lock. Histograms keep one counter
 * per bucket and a sum; their count is the sum of the buckets, so a
 * histogram can never disagree with its own +Inf bucket, and an
 * observation costs two additions.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "stats.h"
#include "util.h"

static const uint64_t bounds_us[] = {DLOCK_STATS_BOUNDS_US};
_Static_assert(sizeof bounds_us / sizeof *bounds_us == DLOCK_STATS_BUCKETS - 1,
               "DLOCK_STATS_BUCKETS must be the number of bounds plus +Inf");

#define LABEL(name, label, what) label,
static const char *const kind_names[DLOCK_STATS_KINDS] = {DLOCK_STATS_KIND_LIST(LABEL)};
static const char *const reason_names[DLOCK_STATS_REASONS] = {DLOCK_STATS_REASON_LIST(LABEL)};
#undef LABEL

static void add(atomic_ullong *a, uint64_t n)
{
    atomic_fetch_add_explicit(a, n, memory_order_relaxed);
}

static uint64_t get(const atomic_ullong *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

/* A linear scan: most observations land in the first few buckets, and 18
 * compares cost less than the atomic addition that follows. */
static void observe(dlock__stats_hist *h, int64_t ns)
{
    if (ns < 0) ns = 0; /* cannot happen on a monotonic clock; never index with it */
    size_t b = 0;
    while (b < DLOCK_STATS_BUCKETS - 1 && (uint64_t)ns > bounds_us[b] * 1000) b++;
    add(&h->bucket[b], 1);
    add(&h->sum_ns, (uint64_t)ns);
}

static dlock_stats_reason reason_of(dlock_status st)
{
    switch (st) {
    case DLOCK_ERR_TIMEOUT: return DLOCK_STATS_TIMEOUT;
    case DLOCK_ERR_CONNECT: return DLOCK_STATS_CONNECT;
    case DLOCK_ERR_LOST: return DLOCK_STATS_LOST;
    case DLOCK_ERR_REDIS: return DLOCK_STATS_REDIS;
    default: return DLOCK_STATS_OTHER;
    }
}

void dlock__stats_acquired(dlock__stats_data *s, dlock_stats_kind kind, int64_t since, dlock_status st)
{
    dlock__stats_cells *k = &s->kind[kind];
    if (st == DLOCK_OK) add(&k->acquisitions, 1);
    else add(&k->failures[reason_of(st)], 1);
    observe(&k->wait, dlock__stats_clock() - since);
}

void dlock__stats_released(dlock__stats_data *s, dlock_stats_kind kind, int64_t since)
{
    observe(&s->kind[kind].hold, dlock__stats_clock() - since);
}

void dlock__stats_renewal(dlock__stats_data *s, dlock_stats_kind kind, int renewed, int64_t ns)
{
    dlock__stats_cells *k = &s->kind[kind];
    add(renewed ? &k->renewals : &k->renewal_failures, 1);
    observe(&k->renewal, ns);
}

void dlock__stats_lost(dlock__stats_data *s, dlock_stats_kind kind)
{
    add(&s->kind[kind].losses, 1);
}

void dlock__stats_woken(dlock__stats_data *s, dlock_stats_kind kind)
{
    add(&s->kind[kind].wakeups, 1);
}

static void copy_hist(dlock_histogram *out, const dlock__stats_hist *h)
{
    uint64_t cum = 0;
    for (size_t b = 0; b < DLOCK_STATS_BUCKETS; b++) {
        cum += get(&h->bucket[b]);
        out->buckets[b] = cum;
    }
    out->count = cum;
    out->sum_ns = get(&h->sum_ns);
}

static void copy_stats(const dlock__stats_data *s, struct dlock_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < DLOCK_STATS_KINDS; i++) {
        const dlock__stats_cells *k = &s->kind[i];
        dlock_kind_stats *o = &out->kind[i];
        o->acquisitions = get(&k->acquisitions);
        for (int r = 0; r < DLOCK_STATS_REASONS; r++) o->failures[r] = get(&k->failures[r]);
        o->renewals = get(&k->renewals);
        o->renewal_failures = get(&k->renewal_failures);
        o->losses = get(&k->losses);
        o->wakeups = get(&k->wakeups);
        copy_hist(&o->wait, &k->wait);
        copy_hist(&o->hold, &k->hold);
        copy_hist(&o->renewal, &k->renewal);
    }
}

dlock_status dlock_stats(dlock_client *client, struct dlock_stats *out)
{
    if (!client || !out) return dlock__fail(DLOCK_ERR_INVALID, "client or output is NULL");
    copy_stats(&client->stats, out);
    return DLOCK_OK;
}

/* ---- Prometheus text ---------------------------------------------------- */

/* Which kinds a family shows: a plain semaphore and a latch have no holds
 * (so no hold times, renewals or losses), nor a rate limit; a RedLock waits by backing off,
 * not on a channel (no wake-ups). */
enum { F_ALL = 0, F_HOLDS = 1, F_WAITS = 2 };

static int kind_in(int kind, int kinds)
{
    if (kinds == F_HOLDS) return kind != DLOCK_STATS_SEMAPHORE && kind != DLOCK_STATS_LATCH && kind != DLOCK_STATS_RATE;
    if (kinds == F_WAITS) return kind != DLOCK_STATS_REDLOCK;
    return 1;
}

/* Once anything of a kind was counted, all its series are shown. */
static int kind_used(const dlock_kind_stats *k)
{
    uint64_t any = k->acquisitions | k->renewals | k->renewal_failures | k->losses | k->wakeups | k->wait.count |
                   k->hold.count | k->renewal.count;
    for (int r = 0; r < DLOCK_STATS_REASONS; r++) any |= k->failures[r];
    return any != 0;
}

/* The families, in the order they are written. `offset` is the field of
 * dlock_kind_stats: a uint64_t for a counter, a dlock_histogram for a
 * histogram, the failures array for the one counter with reasons. */
enum { COUNTER, BY_REASON, HISTOGRAM };
static const struct family {
    const char *name;
    int type, kinds;
    size_t offset;
    const char *help;
} families[] = {
    {"dlock_acquisitions_total", COUNTER, F_ALL, offsetof(dlock_kind_stats, acquisitions),
     "Acquire calls that succeeded, re-entries included, by kind of lock."},
    {"dlock_acquire_failures_total", BY_REASON, F_ALL, offsetof(dlock_kind_stats, failures),
     "Acquire calls that failed, by kind of lock and reason."},
    {"dlock_wait_seconds", HISTOGRAM, F_ALL, offsetof(dlock_kind_stats, wait),
     "Duration of acquire calls, successful or not."},
    {"dlock_hold_seconds", HISTOGRAM, F_HOLDS, offsetof(dlock_kind_stats, hold),
     "Holds, from the acquire that began one to the release that ended it."},
    {"dlock_renewals_total", COUNTER, F_HOLDS, offsetof(dlock_kind_stats, renewals), "Holds the watchdog renewed."},
    {"dlock_renewal_failures_total", COUNTER, F_HOLDS, offsetof(dlock_kind_stats, renewal_failures),
     "Watchdog renewals that failed or found the hold gone."},
    {"dlock_renewal_seconds", HISTOGRAM, F_HOLDS, offsetof(dlock_kind_stats, renewal),
     "Duration of the watchdog's renewal calls, once per hold in the call."},
    {"dlock_losses_total", COUNTER, F_HOLDS, offsetof(dlock_kind_stats, losses),
     "Holds found lost while held, by the watchdog or at release."},
    {"dlock_wakeups_total", COUNTER, F_WAITS, offsetof(dlock_kind_stats, wakeups),
     "Waiting acquire calls woken by a release."},
};

/* Text written so far, or only measured once it no longer fits. */
typedef struct text {
    char *buf;
    size_t size, len;
} text;

static void put(text *t, const char *fmt, ...) DLOCK__PRINTF(2, 3);
static void put(text *t, const char *fmt, ...)
{
    size_t room = t->len < t->size ? t->size - t->len : 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) t->len += (size_t)n;
}

/* A bucket's bound in seconds, exactly: "0.000025", "2.5", "60". */
static void le_text(char *out, size_t size, uint64_t us)
{
    int n = snprintf(out, size, "%llu.%06llu", (unsigned long long)(us / 1000000), (unsigned long long)(us % 1000000));
    while (n > 0 && out[n - 1] == '0') out[--n] = '\0';
    if (n > 0 && out[n - 1] == '.') out[--n] = '\0';
}

static void histogram(text *t, const char *name, const char *kind, const dlock_histogram *h)
{
    for (size_t b = 0; b < DLOCK_STATS_BUCKETS - 1; b++) {
        char le[32];
        le_text(le, sizeof le, bounds_us[b]);
        put(t, "%s_bucket{kind=\"%s\",le=\"%s\"} %llu\n", name, kind, le, (unsigned long long)h->buckets[b]);
    }
    put(t, "%s_bucket{kind=\"%s\",le=\"+Inf\"} %llu\n", name, kind,
        (unsigned long long)h->buckets[DLOCK_STATS_BUCKETS - 1]);
    /* Exact decimal seconds: no rounding through a double. */
    put(t, "%s_sum{kind=\"%s\"} %llu.%09llu\n", name, kind, (unsigned long long)(h->sum_ns / 1000000000u),
        (unsigned long long)(h->sum_ns % 1000000000u));
    put(t, "%s_count{kind=\"%s\"} %llu\n", name, kind, (unsigned long long)h->count);
}

static void render(text *t, const struct dlock_stats *s)
{
    for (size_t f = 0; f < sizeof families / sizeof *families; f++) {
        const struct family *fm = &families[f];
        put(t, "# HELP %s %s\n# TYPE %s %s\n", fm->name, fm->help, fm->name,
            fm->type == HISTOGRAM ? "histogram" : "counter");
        for (int i = 0; i < DLOCK_STATS_KINDS; i++) {
            const dlock_kind_stats *k = &s->kind[i];
            if (!kind_used(k) || !kind_in(i, fm->kinds)) continue;
            const void *field = (const char *)k + fm->offset;
            if (fm->type == HISTOGRAM) {
                histogram(t, fm->name, kind_names[i], field);
            } else if (fm->type == BY_REASON) {
                const uint64_t *v = field;
                for (int r = 0; r < DLOCK_STATS_REASONS; r++)
                    put(t, "%s{kind=\"%s\",reason=\"%s\"} %llu\n", fm->name, kind_names[i], reason_names[r],
                        (unsigned long long)v[r]);
            } else {
                put(t, "%s{kind=\"%s\"} %llu\n", fm->name, kind_names[i], (unsigned long long)*(const uint64_t *)field);
            }
        }
    }
}

dlock_status dlock_stats_prometheus(dlock_client *client, char *buf, size_t size, size_t *needed)
{
    if (needed) *needed = 0;
    if (!client || (!buf && size)) return dlock__fail(DLOCK_ERR_INVALID, "client or buffer is NULL");
    struct dlock_stats s;
    copy_stats(&client->stats, &s);
    text t = {buf, size, 0};
    render(&t, &s);
    if (needed) *needed = t.len + 1;
    if (t.len < size) return DLOCK_OK;
    if (size) buf[0] = '\0';
    return dlock__fail(DLOCK_ERR_INVALID, "the metrics take %zu bytes, the buffer has %zu", t.len + 1, size);
}
