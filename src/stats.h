/*
 * A client's lock metrics (dlock_stats): relaxed atomic counters and
 * fixed-bucket histograms, updated from the acquire and release paths,
 * the watchdog and the wait loop, read by dlock_stats() and rendered by
 * dlock_stats_prometheus(). No mutex: an update is a few uncontended
 * atomic additions, and a reader may see one call half-counted, which a
 * scrape can live with.
 */
#ifndef DLOCK__STATS_H
#define DLOCK__STATS_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "dlock.h"

typedef struct dlock__stats_hist {
    atomic_ullong sum_ns;
    atomic_ullong bucket[DLOCK_STATS_BUCKETS]; /* not cumulative here */
} dlock__stats_hist;

typedef struct dlock__stats_cells {
    atomic_ullong acquisitions;
    atomic_ullong failures[DLOCK_STATS_REASONS];
    atomic_ullong renewals, renewal_failures, losses, wakeups;
    dlock__stats_hist wait, hold, renewal;
} dlock__stats_cells;

/* Lives in the client; all zero is the start. */
typedef struct dlock__stats_data {
    dlock__stats_cells kind[DLOCK_STATS_KINDS];
} dlock__stats_data;

/* Nanoseconds on the monotonic clock. The library's other clock counts
 * milliseconds, too coarse for an uncontended acquire (~100 us). */
static inline int64_t dlock__stats_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* An acquire call that began at `since` (dlock__stats_clock) returned `st`. */
void dlock__stats_acquired(dlock__stats_data *s, dlock_stats_kind kind, int64_t since, dlock_status st);

/* A hold that began at `since` ended with its release. */
void dlock__stats_released(dlock__stats_data *s, dlock_stats_kind kind, int64_t since);

/* The watchdog renewed a hold (`renewed`) or failed to, in a call of `ns`. */
void dlock__stats_renewal(dlock__stats_data *s, dlock_stats_kind kind, int renewed, int64_t ns);

/* A hold was found lost; its holder counts it once. */
void dlock__stats_lost(dlock__stats_data *s, dlock_stats_kind kind);

/* A waiting call was woken by a message on its channel. */
void dlock__stats_woken(dlock__stats_data *s, dlock_stats_kind kind);

#endif
