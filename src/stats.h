/*
 * A client's lock metrics (dlock_stats): relaxed atomic counters and
 * fixed-bucket histograms, updated from the acquire and release paths,
 * the watchdog and the wait loop, read by dlock_stats() and rendered by
 * dlock_stats_prometheus(). No mutex: an update is a few uncontended
 * atomic additions, and a reader may see one call half-counted, which a
 * scrape can live with.
 */
#ifndef DLOCK_STATS_H
#define DLOCK_STATS_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "dlock.h"

typedef struct dlock_stats_hist {
    atomic_ullong sum_ns;
    atomic_ullong bucket[DLOCK_STATS_BUCKETS]; /* not cumulative here */
} dlock_stats_hist;

typedef struct dlock_stats_cells {
    atomic_ullong acquisitions;
    atomic_ullong failures[DLOCK_STATS_REASONS];
    atomic_ullong renewals, renewal_failures, losses, wakeups;
    dlock_stats_hist wait, hold, renewal;
} dlock_stats_cells;

/* Lives in the client; all zero is the start. */
typedef struct dlock_stats_data {
    dlock_stats_cells kind[DLOCK_STATS_KINDS];
} dlock_stats_data;

/* Nanoseconds on the monotonic clock. The library's other clock counts
 * milliseconds, too coarse for an uncontended acquire (~100 us). */
static inline int64_t dlock_stats_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* An acquire call that began at `since` (dlock_stats_clock) returned `st`. */
void dlock_stats_acquired(dlock_stats_data *s, dlock_stats_kind kind, int64_t since, dlock_status st);

/* A hold that began at `since` ended with its release. */
void dlock_stats_released(dlock_stats_data *s, dlock_stats_kind kind, int64_t since);

/* The watchdog renewed a hold (`renewed`) or failed to, in a call of `ns`. */
void dlock_stats_renewal(dlock_stats_data *s, dlock_stats_kind kind, int renewed, int64_t ns);

/* A hold was found lost; its holder counts it once. */
void dlock_stats_lost(dlock_stats_data *s, dlock_stats_kind kind);

/* A waiting call was woken by a message on its channel. */
void dlock_stats_woken(dlock_stats_data *s, dlock_stats_kind kind);

#endif
