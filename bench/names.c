/*
 * dlock-names: lock N distinct names once each and release them, as a
 * sale that locks "lock:order:<user>" per user does, to see what that
 * leaves in Redis (bench/names.sh prints the server's memory around it).
 *
 *   dlock-names -u URL [-n NAMES] [-w WORKERS] [-p PREFIX]
 *
 * WORKERS threads (default 8) share one client and take the names
 * PREFIX0 .. PREFIX<N-1> (default prefix "lock:order:") in turn, each an
 * acquire with a 10 s lease and a release through a handle of its own.
 * Prints one JSON line: names, workers, seconds, pairs_per_s. Exits 1 on
 * the first failure.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"

static dlock_client *client;
static long names = 1000000, workers = 8;
static const char *prefix = "lock:order:";
static atomic_long next_name;
static atomic_int failed;

/* One worker: the next name not taken yet, until there are none. */
static void *worker(void *arg)
{
    (void)arg;
    for (;;) {
        long i = atomic_fetch_add(&next_name, 1);
        if (i >= names || atomic_load(&failed)) return NULL;
        char name[96];
        snprintf(name, sizeof name, "%s%ld", prefix, i);
        dlock_lock *l;
        dlock_status st = dlock_lock_new(client, name, &l);
        if (st == DLOCK_OK) {
            st = dlock_lock_acquire(l, DLOCK_WAIT_FOREVER, 10000, NULL);
            if (st == DLOCK_OK) st = dlock_lock_release(l);
            dlock_lock_free(l);
        }
        if (st != DLOCK_OK) {
            fprintf(stderr, "dlock-names: %s: %s\n", name, dlock_last_error());
            atomic_store(&failed, 1);
            return NULL;
        }
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *url = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "u:n:w:p:")) != -1) {
        switch (opt) {
        case 'u': url = optarg; break;
        case 'n': names = atol(optarg); break;
        case 'w': workers = atol(optarg); break;
        case 'p': prefix = optarg; break;
        default:
            url = NULL;
            optind = argc;
            break;
        }
    }
    if (!url || names < 0 || workers < 1 || workers > 1024) {
        fprintf(stderr, "usage: dlock-names -u URL [-n NAMES] [-w WORKERS] [-p PREFIX]\n");
        return 64;
    }
    if (dlock_client_new(url, NULL, &client) != DLOCK_OK) {
        fprintf(stderr, "dlock-names: %s\n", dlock_last_error());
        return 1;
    }
    pthread_t *t = calloc((size_t)workers, sizeof *t);
    if (!t) return 1;
    double t0 = now_s();
    long started = 0;
    for (; started < workers; started++)
        if (pthread_create(&t[started], NULL, worker, NULL) != 0) break;
    for (long i = 0; i < started; i++) pthread_join(t[i], NULL);
    double secs = now_s() - t0;
    free(t);
    dlock_client_free(client);
    if (atomic_load(&failed) || started == 0) return 1;
    printf("{\"names\":%ld,\"workers\":%ld,\"seconds\":%.2f,\"pairs_per_s\":%.0f}\n", names, started, secs,
           secs > 0 ? (double)names / secs : 0.0);
    return 0;
}
