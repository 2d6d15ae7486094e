/*
 * dlock-rate: the rate limiter's decisions per second and its accuracy
 * (bench/rate.sh runs it beside a fixed-window floor).
 *
 *   dlock-rate -u URL -m sync -w WORKERS -s SECONDS
 *       WORKERS threads, each deciding dlock_rate_try() on a subject of
 *       its own drawn at random per call (a fresh bucket, as the floor's
 *       random keys), on a limit that allows them all
 *   dlock-rate -u URL -m async -w INFLIGHT -s SECONDS
 *       one thread keeps INFLIGHT dlock_rate_acquire_async() calls in
 *       flight, each on a handle of its own
 *   dlock-rate -u URL -m accuracy -w PROCS -s SECONDS -r RATE -b BURST
 *       PROCS processes take permits of one limit (RATE per second, burst
 *       BURST) as fast as they are given, waiting for each; prints how
 *       many were admitted in the seconds measured by the server's clock
 *       and the bound BURST + RATE x seconds
 *
 * Prints one JSON line.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "dlock.h"

static const char *url = "redis://127.0.0.1:6379";
static int workers = 8, seconds = 5;
static long rate = 100, burst = 10;
static atomic_long decisions, admitted;
static atomic_int stop;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "dlock-rate: %s: %s\n", what, dlock_last_error());
    exit(1);
}

static dlock_rate *open_limit(dlock_client *c, const char *name, long r, long b)
{
    dlock_rate_options o = {0};
    o.rate = r;
    o.burst = b;
    o.change = 1;
    dlock_rate *lim;
    if (dlock_rate_new(c, name, &o, &lim) != DLOCK_OK) die("dlock_rate_new");
    return lim;
}

struct worker {
    dlock_rate *lim;
    unsigned seed;
};

static void *sync_worker(void *arg)
{
    struct worker *w = arg;
    char subject[32];
    dlock_rate_result res;
    while (!atomic_load(&stop)) {
        snprintf(subject, sizeof subject, "u%d", rand_r(&w->seed) % 100000000);
        dlock_status st = dlock_rate_try(w->lim, subject, 1, &res);
        if (st != DLOCK_OK && st != DLOCK_ERR_TIMEOUT) die("dlock_rate_try");
        atomic_fetch_add(&decisions, 1);
    }
    return NULL;
}

/* The asynchronous mode: each completion sends the next call on its handle. */
struct slot {
    dlock_rate *lim;
    unsigned seed;
    char subject[32];
};

static void async_next(struct slot *s);

static void on_decided(dlock_rate *lim, dlock_status st, const dlock_rate_result *res, void *arg)
{
    (void)lim;
    (void)res;
    if (st != DLOCK_OK && st != DLOCK_ERR_TIMEOUT) die("dlock_rate_acquire_async");
    atomic_fetch_add(&decisions, 1);
    if (!atomic_load(&stop)) async_next(arg);
    else atomic_fetch_add(&admitted, 1); /* here: slots finished */
}

static void async_next(struct slot *s)
{
    snprintf(s->subject, sizeof s->subject, "u%d", rand_r(&s->seed) % 100000000);
    if (dlock_rate_acquire_async(s->lim, s->subject, 1, 0, on_decided, s) != DLOCK_OK) die("async call");
}

static long long server_ms(redisContext *rc)
{
    redisReply *r = redisCommand(rc, "TIME");
    if (!r || r->type != REDIS_REPLY_ARRAY) die("TIME");
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

static void accuracy(void)
{
    /* The server's clock through a plain connection of the URL's unix
     * socket or host (bench/rate.sh passes unix://). */
    redisContext *rc = strncmp(url, "unix://", 7) == 0 ? redisConnectUnix(url + 7) : redisConnect("127.0.0.1", 6379);
    if (!rc || rc->err) die("connect for TIME");
    freeReplyObject(redisCommand(rc, "DEL dlock:{bench-acc}:rate dlock:{bench-acc}:rate:tat"));
    int fds[2];
    if (pipe(fds) != 0) die("pipe");
    long long start = server_ms(rc);
    for (int i = 0; i < workers; i++) {
        if (fork() == 0) {
            close(fds[0]);
            dlock_client *c;
            if (dlock_client_new(url, NULL, &c) != DLOCK_OK) die("dlock_client_new");
            dlock_rate *lim = open_limit(c, "bench-acc", rate, burst);
            long got = 0;
            double end = now_s() + seconds;
            while (now_s() < end) {
                long left = (long)((end - now_s()) * 1000);
                dlock_status st = dlock_rate_acquire(lim, NULL, 1, left > 0 ? left : 0, NULL);
                if (st == DLOCK_OK) got++;
                else if (st != DLOCK_ERR_TIMEOUT) die("dlock_rate_acquire");
            }
            if (write(fds[1], &got, sizeof got) != (ssize_t)sizeof got) _exit(2);
            dlock_rate_free(lim);
            dlock_client_free(c);
            _exit(0);
        }
    }
    close(fds[1]);
    for (int i = 0; i < workers; i++) wait(NULL);
    long long elapsed = server_ms(rc) - start;
    long total = 0, got;
    while (read(fds[0], &got, sizeof got) == (ssize_t)sizeof got) total += got;
    printf("{\"mode\":\"accuracy\",\"procs\":%d,\"rate\":%ld,\"burst\":%ld,\"seconds\":%d,\"admitted\":%ld,"
           "\"server_ms\":%lld,\"bound\":%.1f}\n",
           workers, rate, burst, seconds, total, elapsed, burst + rate * elapsed / 1000.0);
    redisFree(rc);
}

int main(int argc, char **argv)
{
    const char *mode = "sync";
    int opt;
    while ((opt = getopt(argc, argv, "u:m:w:s:r:b:")) != -1) {
        switch (opt) {
        case 'u': url = optarg; break;
        case 'm': mode = optarg; break;
        case 'w': workers = atoi(optarg); break;
        case 's': seconds = atoi(optarg); break;
        case 'r': rate = atol(optarg); break;
        case 'b': burst = atol(optarg); break;
        default:
            fprintf(stderr, "usage: dlock-rate -u URL -m sync|async|accuracy [-w N] [-s S] [-r R] [-b B]\n");
            return 64;
        }
    }
    if (strcmp(mode, "accuracy") == 0) {
        accuracy();
        return 0;
    }
    dlock_client *c;
    if (dlock_client_new(url, NULL, &c) != DLOCK_OK) die("dlock_client_new");
    /* A limit no worker reaches: every decision is a grant and a write,
     * like the floor's INCR + PEXPIRE. */
    const long big = 1000000000L;
    double t0, t1;
    if (strcmp(mode, "sync") == 0) {
        pthread_t *th = calloc(workers, sizeof *th);
        struct worker *w = calloc(workers, sizeof *w);
        for (int i = 0; i < workers; i++) {
            w[i].lim = open_limit(c, "bench-rate", big, 1000);
            w[i].seed = i + 1;
        }
        t0 = now_s();
        for (int i = 0; i < workers; i++) pthread_create(&th[i], NULL, sync_worker, &w[i]);
        sleep(seconds);
        atomic_store(&stop, 1);
        for (int i = 0; i < workers; i++) pthread_join(th[i], NULL);
        t1 = now_s();
        for (int i = 0; i < workers; i++) dlock_rate_free(w[i].lim);
    } else if (strcmp(mode, "async") == 0) {
        struct slot *s = calloc(workers, sizeof *s);
        for (int i = 0; i < workers; i++) {
            s[i].lim = open_limit(c, "bench-rate", big, 1000);
            s[i].seed = i + 1;
        }
        t0 = now_s();
        for (int i = 0; i < workers; i++) async_next(&s[i]);
        sleep(seconds);
        atomic_store(&stop, 1);
        while (atomic_load(&admitted) < workers) usleep(1000);
        t1 = now_s();
        for (int i = 0; i < workers; i++) dlock_rate_free(s[i].lim);
    } else {
        fprintf(stderr, "dlock-rate: unknown mode %s\n", mode);
        return 64;
    }
    printf("{\"mode\":\"%s\",\"workers\":%d,\"decisions\":%ld,\"seconds\":%.2f,\"decisions_per_s\":%.0f}\n", mode,
           workers, atomic_load(&decisions), t1 - t0, atomic_load(&decisions) / (t1 - t0));
    dlock_client_free(c);
    return 0;
}
