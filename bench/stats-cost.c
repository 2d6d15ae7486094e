/*
 * dlock-stats-cost: what the lock metrics add to one uncontended
 * acquire+release pair, measured without Redis, so that the number does
 * not drown in the noise of a round trip.
 *
 *   dlock-stats-cost [--threads N] [--pairs M]
 *
 * Each of N threads makes M times the very calls the library makes for an
 * uncontended plain-lock pair (src/lock.c): a clock read when the acquire
 * starts, the acquire's count (an acquisition and a wait observation, with
 * its own clock read), a clock read for the hold's start, and the
 * release's count (a hold observation, with its clock read). All threads
 * count into one client's cells, as the workers of one client do, with
 * nothing else in between: the cache lines of the counters move between
 * cores on every call, which real pairs, 30 us or more apart, rarely see.
 * So this is an upper bound of the cost per pair.
 *
 * One JSON line per run on stdout:
 *   {"threads":N,"pairs":..,"cpu_ns_per_pair":..,"wall_ns_per_pair":..}
 * cpu_ns_per_pair is the threads' CPU time (CLOCK_THREAD_CPUTIME_ID)
 * divided by all pairs: the CPU the metrics take from a pair, to set
 * against the CPU a pair costs (docs/BENCHMARKS.md). Exit status 64 on bad
 * arguments, 70 when the counts are not exactly N * M (the test of the
 * counting itself).
 */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "stats.h"

static dlock__stats_data cells;
static long pairs_per_thread = 2000000;

typedef struct worker {
    pthread_t thread;
    int64_t cpu_ns;
} worker;

static int64_t cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *run(void *arg)
{
    worker *w = arg;
    int64_t cpu0 = cpu_now();
    for (long i = 0; i < pairs_per_thread; i++) {
        int64_t since = dlock__stats_clock();
        dlock__stats_acquired(&cells, DLOCK_STATS_LOCK, since, DLOCK_OK);
        int64_t held_since = dlock__stats_clock();
        dlock__stats_released(&cells, DLOCK_STATS_LOCK, held_since);
    }
    w->cpu_ns = cpu_now() - cpu0;
    return NULL;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"threads", required_argument, NULL, 't'},
        {"pairs", required_argument, NULL, 'n'},
        {NULL, 0, NULL, 0},
    };
    int threads = 1, c;
    while ((c = getopt_long(argc, argv, "t:n:", longs, NULL)) != -1) {
        if (c == 't') threads = atoi(optarg);
        else if (c == 'n') pairs_per_thread = atol(optarg);
        else return 64;
    }
    if (threads < 1 || threads > 256 || pairs_per_thread < 1) {
        fprintf(stderr, "usage: dlock-stats-cost [--threads 1-256] [--pairs M]\n");
        return 64;
    }
    worker *w = calloc((size_t)threads, sizeof *w);
    if (!w) return 70;
    int64_t t0 = dlock__stats_clock();
    for (int i = 0; i < threads; i++)
        if (pthread_create(&w[i].thread, NULL, run, &w[i]) != 0) return 70;
    int64_t cpu = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].thread, NULL);
        cpu += w[i].cpu_ns;
    }
    int64_t wall = dlock__stats_clock() - t0;
    double pairs = (double)threads * (double)pairs_per_thread;
    uint64_t held = 0;
    for (int b = 0; b < DLOCK_STATS_BUCKETS; b++) held += atomic_load(&cells.kind[DLOCK_STATS_LOCK].hold.bucket[b]);
    if ((double)atomic_load(&cells.kind[DLOCK_STATS_LOCK].acquisitions) != pairs || (double)held != pairs) {
        fprintf(stderr, "dlock-stats-cost: counted %llu acquisitions and %llu holds of %.0f\n",
                (unsigned long long)atomic_load(&cells.kind[DLOCK_STATS_LOCK].acquisitions), (unsigned long long)held,
                pairs);
        return 70;
    }
    printf("{\"threads\":%d,\"pairs\":%.0f,\"cpu_ns_per_pair\":%.1f,\"wall_ns_per_pair\":%.1f}\n", threads, pairs,
           (double)cpu / pairs, (double)wall / pairs);
    free(w);
    return 0;
}
