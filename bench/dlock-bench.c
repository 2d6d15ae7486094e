/*
 * dlock-bench: acquire+release pairs per second, and their latency, through
 * libdlock's public API.
 *
 *   dlock-bench -u URL --mode MODE --workers N [--seconds S] [--permits P]
 *               [--read-percent R] [--async] [-v]
 *
 * What it measures. N worker threads share ONE dlock_client (the library's
 * intended use: one client per process, its connection pool serving every
 * thread). Each worker loops over
 *
 *     t0 = now; acquire(..., DLOCK_WAIT_FOREVER, lease 10000 ms); release();
 *     latency = now - t0
 *
 * with, per MODE:
 *   uncontended  dlock_lock, every worker its own name and handle: each pair
 *                is exactly two EVALSHA round trips and never waits.
 *   contended    dlock_lock, all workers on one handle of one name: the pair
 *                includes the time spent waiting for the others (pub/sub
 *                wake-up, retry).
 *   fair         the same with dlock_lock_new_fair(): FIFO hand-off, each
 *                release wakes only the head waiter.
 *   rw           one dlock_rwlock; each pair takes a read hold with
 *                probability R % (default 90), else the write hold. Reads
 *                and writes are also counted and timed apart.
 *   semaphore    the plain dlock_semaphore with P permits (default
 *                max(1, N/4), so fewer permits than workers), one permit per
 *                pair.
 *   psem         the permit-expirable dlock_psem, P permits, each permit
 *                with a 10 s lease (random id, sorted set of expiries).
 * With --redlock (uncontended, contended) the lock is a dlock_redlock over
 * the masters that -u lists, comma-separated (a client for each, shared by
 * the workers), every worker with a handle of its own: of its own name, or
 * of one name for contended; the JSON line then adds "kind":"redlock" and
 * "masters".
 * With --async (uncontended, contended, fair) there are no worker threads:
 * the main thread starts N chains of dlock_lock_acquire_async() ->
 * dlock_lock_release_async() -> the next acquire, each chain on a handle
 * of its own (of one name for contended and fair), so N acquisitions are
 * in flight at once and the library's threads run every step; the JSON
 * line then says "api":"async" (else "sync").
 * After a warm-up of 0.5 s that is not counted, every pair that *completes*
 * within the next S seconds is counted and its latency goes into a
 * per-worker log-linear histogram (64 sub-buckets per power of two: under
 * 1% error); p50/p99 are taken over the merged histograms.
 *
 * One JSON line goes to stdout:
 *   {"lib":"dlock","mode":"uncontended","workers":8,"ops":..,"seconds":..,
 *    "ops_per_s":..,"p50_us":..,"p99_us":..,"api":..,"lease":..,"p999_us":..,
 *    "wait_p99_us":..,"wait_p999_us":..,"share_min":..,"share_max":..}
 * where the wait is the acquire call alone (the pair less its release), and
 * a worker's share is the pairs it completed over the mean of all workers:
 * 1.0 everywhere when every worker got its turn as often; a lock that
 * starves some shows share_min near 0 and share_max well above 1. Plus, by
 * mode:
 * - contended, fair: "handoff_p50_us", the median time from a release (the
 *   releaser's release call returning) to the next acquisition by a
 *   different worker that was already waiting (its acquire returning). Both
 *   ends are client-side times, so it includes one reply's trip back; null
 *   when there was no handoff (one worker).
 * - rw: "read_percent", "reads", "writes", "reads_per_s", "writes_per_s",
 *   "read_p50_us", "read_p99_us", "write_p50_us", "write_p99_us".
 * - semaphore, psem: "kind" ("plain" or "expirable") and "permits".
 *
 * Every mode checks its own exclusion rule while it runs (one holder; no
 * reader beside a writer; at most P permit holders) and fails with status
 * 70 if it ever sees it broken. The check only sees overlaps of the
 * holders' own windows, so it is a tripwire, not a proof (the test suite
 * proves exclusion).
 *
 * Caveats:
 * - Leases are an explicit 10 s unless --watchdog: then DLOCK_LEASE_WATCHDOG,
 *   the default of the CLI and of the Python package, and each pair also
 *   registers its hold with the watchdog and takes it off again.
 * - contended measures the plain lock's bounded barging: a releaser that
 *   loops straight back may take the lock again, unless a waiter of this
 *   process has waited longer than a couple of milliseconds (then it queues
 *   behind it), so most hand-offs follow the order of arrival and the wait
 *   tail stays short. fair is strictly ordered. -v prints how often the lock
 *   changed hands.
 * - rw: readers are not held back by a waiting writer (documented in
 *   dlock.h), so with many overlapping readers writes wait long; the write
 *   percentiles show it. A write still waiting when the time is up is not
 *   counted (it completes after the readers stop).
 * - Workers, the library's subscriber thread and (usually) redis-server
 *   share the same cores; with more workers than cores, scheduling delays
 *   are part of every number.
 * - Locks leave their fencing counters behind (they never expire) and
 *   semaphores their permit counts; names carry the pid, so reruns do not
 *   collide. Run it against a scratch server.
 *
 * Exit status: 0 success, 64 bad arguments, 69 the server could not be
 * reached (or refused us), 70 a call failed during the run or exclusion was
 * seen broken.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"

#define EXIT_USAGE 64
#define EXIT_UNAVAILABLE 69
#define EXIT_SOFTWARE 70

#define LEASE_MS 10000L
static long lease_ms = LEASE_MS; /* --watchdog: DLOCK_LEASE_WATCHDOG */
#define WARMUP_NS 500000000LL
#define MAX_WORKERS 1024

/* Log-linear histogram of nanoseconds: values below 2*SUB exactly, then SUB
 * buckets per power of two. */
#define SUB_BITS 6
#define SUB (1 << SUB_BITS)
#define HIST_BUCKETS (2 * SUB + (64 - SUB_BITS - 1) * SUB)

enum { PHASE_WARMUP, PHASE_MEASURE, PHASE_STOP };

typedef enum { M_UNCONTENDED, M_CONTENDED, M_FAIR, M_RW, M_SEMAPHORE, M_PSEM, M_COUNT } bench_mode;
static const char *const mode_names[M_COUNT] = {"uncontended", "contended", "fair", "rw", "semaphore", "psem"};

/* Pairs are timed in two classes: reads and writes in rw mode; everything
 * is class 0 elsewhere. */
enum { CLS_READ = 0, CLS_WRITE = 1, N_CLS = 2 };

/* One hold of the single lock (contended, fair), kept to compute handoffs
 * afterwards. */
typedef struct hold_rec {
    uint64_t gen;    /* order of this hold among all holds of the lock */
    int64_t t_start; /* acquire called */
    int64_t t_acq;   /* acquire returned */
    int64_t t_rel;   /* release returned */
    int worker;
    int measured; /* completed inside the measured window */
} hold_rec;

typedef struct worker {
    pthread_t thread;
    int index;
    dlock_lock *lock;  /* uncontended, contended, fair */
    dlock_redlock *rl; /* --redlock: instead of lock */
    uint64_t *hist[N_CLS];
    uint64_t *wait_hist; /* the acquire call alone, every class */
    uint64_t ops[N_CLS];
    uint64_t rng;
    hold_rec *recs;
    size_t n_recs, cap_recs;
    hold_rec rec; /* --async: the pair under way */
} worker;

/* What the workers share: the mode and its one resource. */
static bench_mode mode;
static dlock_rwlock *rw;
static dlock_semaphore *sem;
static dlock_psem *psem;
static long permits;
static int read_percent = 90;

static atomic_int phase = PHASE_WARMUP;
static atomic_int failed; /* a worker hit an error; details below */
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;
static char fail_msg[512];
static int fail_exit;
static atomic_uint_fast64_t hold_gen; /* single lock: bumped inside the lock */
static atomic_int inside;             /* exclusive holders (or permit holders) now */
static atomic_int readers_inside;     /* rw: read holders now */
static int use_async;                 /* --async */
#define MAX_MASTERS 32
static dlock_client *masters[MAX_MASTERS]; /* --redlock: a client per master */
static size_t n_masters;
static pthread_mutex_t chains_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t chains_cv = PTHREAD_COND_INITIALIZER;
static int chains_ended; /* --async: chains that stopped */

/* Monotonic nanoseconds: pairs are timed against a clock that never steps. */
static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Modes in which all workers take one exclusive lock, so holds are totally
 * ordered and handoffs can be measured. */
static int single_lock(void)
{
    return mode == M_CONTENDED || mode == M_FAIR;
}

/* Bucket of a latency; exact below 2*SUB ns, then relative error < 1/SUB. */
static int hist_index(uint64_t v)
{
    if (v < 2 * SUB) return (int)v;
    int msb = 63 - __builtin_clzll(v);
    int shift = msb - SUB_BITS;
    return 2 * SUB + (shift - 1) * SUB + (int)((v >> shift) - SUB);
}

/* Middle of a bucket, the value reported for a percentile falling in it. */
static double hist_value(int i)
{
    if (i < 2 * SUB) return (double)i;
    int shift = (i - 2 * SUB) / SUB + 1;
    uint64_t top = (uint64_t)((i - 2 * SUB) % SUB + SUB);
    return (double)(top << shift) + (double)(1ULL << shift) / 2.0;
}

/* Smallest latency (ns) at or above fraction q of the merged samples. */
static double hist_percentile(const uint64_t *h, uint64_t total, double q)
{
    if (total == 0) return 0;
    uint64_t rank = (uint64_t)(q * (double)total + 0.999999);
    if (rank < 1) rank = 1;
    uint64_t seen = 0;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        seen += h[i];
        if (seen >= rank) return hist_value(i);
    }
    return hist_value(HIST_BUCKETS - 1);
}

/* Record the first failure (later ones are consequences) and stop the run. */
static void fail(int code, const char *fmt, const char *detail)
{
    pthread_mutex_lock(&fail_mu);
    if (!atomic_load(&failed)) {
        snprintf(fail_msg, sizeof fail_msg, fmt, detail);
        fail_exit = code;
        atomic_store(&failed, 1);
    }
    pthread_mutex_unlock(&fail_mu);
    atomic_store(&phase, PHASE_STOP);
}

/* Exit status for a library failure: unreachable server vs. anything else. */
static int status_exit(dlock_status st)
{
    return st == DLOCK_ERR_CONNECT || st == DLOCK_ERR_AUTH ? EXIT_UNAVAILABLE : EXIT_SOFTWARE;
}

/* The single-lock modes keep every hold (the handoff needs the
 * predecessor's release time, which only the predecessor knows). */
static int push_rec(worker *w, const hold_rec *r)
{
    if (w->n_recs == w->cap_recs) {
        size_t cap = w->cap_recs ? w->cap_recs * 2 : 4096;
        hold_rec *n = realloc(w->recs, cap * sizeof *n);
        if (!n) return -1;
        w->recs = n;
        w->cap_recs = cap;
    }
    w->recs[w->n_recs++] = *r;
    return 0;
}

/* xorshift64*: each worker draws its own read/write mix without sharing a
 * generator (rand() would serialise the threads on a hidden lock). */
static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* Take the mode's resource for one pair; *cls is the pair's class. */
static dlock_status take(worker *w, int *cls, dlock_permit **permit)
{
    uint64_t token;
    *cls = CLS_READ;
    switch (mode) {
    case M_RW:
        *cls = (int)(next_rand(&w->rng) % 100) < read_percent ? CLS_READ : CLS_WRITE;
        return dlock_rwlock_acquire(rw, *cls == CLS_READ ? DLOCK_READ : DLOCK_WRITE, DLOCK_WAIT_FOREVER, lease_ms,
                                    &token);
    case M_SEMAPHORE: return dlock_semaphore_acquire(sem, 1, DLOCK_WAIT_FOREVER);
    case M_PSEM: return dlock_psem_acquire(psem, DLOCK_WAIT_FOREVER, lease_ms, permit);
    default:
        if (w->rl) return dlock_redlock_acquire(w->rl, DLOCK_WAIT_FOREVER, lease_ms, NULL, &token);
        return dlock_lock_acquire(w->lock, DLOCK_WAIT_FOREVER, lease_ms, &token);
    }
}

/* Give back what take() got. */
static dlock_status give(worker *w, int cls, dlock_permit *permit)
{
    switch (mode) {
    case M_RW: return dlock_rwlock_release(rw, cls == CLS_READ ? DLOCK_READ : DLOCK_WRITE);
    case M_SEMAPHORE: return dlock_semaphore_release(sem, 1);
    case M_PSEM: return dlock_psem_release(psem, permit);
    default: return w->rl ? dlock_redlock_release(w->rl) : dlock_lock_release(w->lock);
    }
}

/* While holding: check the mode's exclusion rule and number the hold.
 * Counters are dropped again before release, so a correct lock never lets
 * two windows that break the rule overlap. */
static void check_inside(int cls, hold_rec *rec)
{
    switch (mode) {
    case M_UNCONTENDED: break;
    case M_RW:
        if (cls == CLS_READ) {
            atomic_fetch_add(&readers_inside, 1);
            if (atomic_load(&inside) != 0) fail(EXIT_SOFTWARE, "%s", "read-write lock broken: reader beside a writer");
            atomic_fetch_sub(&readers_inside, 1);
        } else {
            if (atomic_fetch_add(&inside, 1) != 0 || atomic_load(&readers_inside) != 0)
                fail(EXIT_SOFTWARE, "%s", "read-write lock broken: writer beside another holder");
            atomic_fetch_sub(&inside, 1);
        }
        break;
    case M_SEMAPHORE:
    case M_PSEM:
        if (atomic_fetch_add(&inside, 1) >= permits)
            fail(EXIT_SOFTWARE, "%s", "semaphore broken: more holders than permits");
        atomic_fetch_sub(&inside, 1);
        break;
    default:
        if (atomic_fetch_add(&inside, 1) != 0)
            fail(EXIT_SOFTWARE, "%s", "mutual exclusion broken: two holders at once");
        rec->gen = atomic_fetch_add(&hold_gen, 1) + 1;
        atomic_fetch_sub(&inside, 1);
        break;
    }
}

/* Count a measured pair: its whole time, and its wait (the acquire call). */
static void record(worker *w, int cls, const hold_rec *rec)
{
    w->hist[cls][hist_index((uint64_t)(rec->t_rel - rec->t_start))]++;
    w->wait_hist[hist_index((uint64_t)(rec->t_acq - rec->t_start))]++;
    w->ops[cls]++;
}

/* The measured loop of one worker thread: acquire, release, record. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    while (atomic_load(&phase) != PHASE_STOP) {
        hold_rec rec = {.worker = w->index};
        dlock_permit *permit = NULL;
        int cls;
        rec.t_start = now_ns();
        dlock_status st = take(w, &cls, &permit);
        if (st != DLOCK_OK) {
            fail(status_exit(st), "acquire failed: %s", dlock_last_error());
            break;
        }
        rec.t_acq = now_ns();
        check_inside(cls, &rec);
        st = give(w, cls, permit);
        if (st != DLOCK_OK) {
            fail(status_exit(st), "release failed: %s", dlock_last_error());
            break;
        }
        rec.t_rel = now_ns();
        rec.measured = atomic_load(&phase) == PHASE_MEASURE;
        if (rec.measured) record(w, cls, &rec);
        if (single_lock() && push_rec(w, &rec) != 0) {
            fail(EXIT_SOFTWARE, "%s", "out of memory");
            break;
        }
    }
    return NULL;
}

/* --async: one pair as a chain of callbacks on the library's threads.
 * Each chain's steps follow one another, so its worker needs no lock. */
static void chain_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg);
static void chain_released(dlock_lock *l, dlock_status st, void *arg);

static void chain_end(void)
{
    pthread_mutex_lock(&chains_mu);
    chains_ended++;
    pthread_cond_broadcast(&chains_cv);
    pthread_mutex_unlock(&chains_mu);
}

static void chain_next(worker *w)
{
    if (atomic_load(&phase) == PHASE_STOP) {
        chain_end();
        return;
    }
    w->rec = (hold_rec){.worker = w->index};
    w->rec.t_start = now_ns();
    dlock_status st = dlock_lock_acquire_async(w->lock, DLOCK_WAIT_FOREVER, lease_ms, chain_acquired, w);
    if (st != DLOCK_OK) {
        fail(status_exit(st), "acquire failed: %s", dlock_last_error());
        chain_end();
    }
}

static void chain_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)token;
    worker *w = arg;
    if (st == DLOCK_OK) {
        w->rec.t_acq = now_ns();
        check_inside(CLS_READ, &w->rec);
        if ((st = dlock_lock_release_async(l, chain_released, w)) == DLOCK_OK) return;
        fail(status_exit(st), "release failed: %s", dlock_last_error());
    } else {
        fail(status_exit(st), "acquire failed: %s", dlock_last_error());
    }
    chain_end();
}

static void chain_released(dlock_lock *l, dlock_status st, void *arg)
{
    (void)l;
    worker *w = arg;
    if (st != DLOCK_OK) {
        fail(status_exit(st), "release failed: %s", dlock_last_error());
        chain_end();
        return;
    }
    w->rec.t_rel = now_ns();
    w->rec.measured = atomic_load(&phase) == PHASE_MEASURE;
    if (w->rec.measured) record(w, CLS_READ, &w->rec);
    if (single_lock() && push_rec(w, &w->rec) != 0) {
        fail(EXIT_SOFTWARE, "%s", "out of memory");
        chain_end();
        return;
    }
    chain_next(w);
}

/* qsort order for nanosecond samples. */
static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Median handoff (ns) over measured holds whose predecessor was another
 * worker's, and that had been waiting since before the predecessor got the
 * lock; -1 when there was none. *err set on allocation failure; with
 * `verbose`, how often the lock changed hands goes to stderr (it explains
 * the contended numbers: a barging lock mostly stays with its releaser). */
static double handoff_p50(worker *ws, int n, int verbose, int *err)
{
    uint64_t max_gen = atomic_load(&hold_gen);
    *err = 0;
    if (max_gen < 2) return -1;
    hold_rec **by_gen = calloc(max_gen + 1, sizeof *by_gen);
    int64_t *samples = calloc(max_gen, sizeof *samples);
    if (!by_gen || !samples) {
        free(by_gen);
        free(samples);
        *err = 1;
        return -1;
    }
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < ws[i].n_recs; j++) by_gen[ws[i].recs[j].gen] = &ws[i].recs[j];
    size_t k = 0, measured = 0, same = 0, inverted = 0;
    for (uint64_t g = 2; g <= max_gen; g++) {
        const hold_rec *b = by_gen[g], *a = by_gen[g - 1];
        if (!a || !b || !b->measured) continue;
        measured++;
        if (a->worker == b->worker) same++;
        if (a->worker == b->worker || b->t_start >= a->t_acq) continue;
        int64_t d = b->t_acq - a->t_rel;
        if (d < 0) inverted++;
        samples[k++] = d > 0 ? d : 0; /* the waiter's reply was read first */
    }
    double result = -1;
    if (k > 0) {
        qsort(samples, k, sizeof *samples, cmp_i64);
        result = (double)samples[(k - 1) / 2];
    }
    if (verbose) {
        /* How many holds began while each waiter waited: at most N-1 when
         * the waits are served in the order they began. */
        int64_t *ahead = calloc(max_gen + 1, sizeof *ahead);
        size_t m = 0;
        uint64_t g0 = 1;
        for (uint64_t g = 1; ahead && g <= max_gen; g++) {
            const hold_rec *b = by_gen[g];
            if (!b || !b->measured) continue;
            while (g0 < g && by_gen[g0] && by_gen[g0]->t_acq < b->t_start) g0++;
            ahead[m++] = (int64_t)(g - g0);
        }
        if (m) {
            qsort(ahead, m, sizeof *ahead, cmp_i64);
            fprintf(stderr, "dlock-bench: holds begun during a wait: p50 %lld, p99 %lld, max %lld\n",
                    (long long)ahead[(m - 1) / 2], (long long)ahead[(size_t)((double)(m - 1) * 0.99)],
                    (long long)ahead[m - 1]);
        }
        free(ahead);
#define HANDOFF_Q(q) (k ? (double)samples[(size_t)((double)(k - 1) * (q))] / 1e3 : 0.0)
        fprintf(stderr,
                "dlock-bench: %zu measured holds: %zu re-taken by the releaser, %zu handed to a "
                "waiter (%zu of them read before the release's own reply), handoff p90 %.1f, "
                "p99 %.1f, p999 %.1f, max %.1f us\n",
                measured, same, k, inverted, HANDOFF_Q(0.9), HANDOFF_Q(0.99), HANDOFF_Q(0.999), HANDOFF_Q(1.0));
#undef HANDOFF_Q
    }
    free(by_gen);
    free(samples);
    return result;
}

/* Usage text, to stderr with status 64 for mistakes or stdout for --help. */
static void usage(FILE *f)
{
    fprintf(f,
            "usage: dlock-bench -u URL --mode MODE --workers N [--seconds S] [--permits P]\n"
            "                   [--read-percent R] [--async] [--redlock] [--watchdog] [-v]\n"
            "  -u URL             redis://host:port or unix:///path.sock (required); with\n"
            "                     --redlock, the masters' URLs, comma-separated\n"
            "  --mode MODE        uncontended: a lock per worker; contended: one lock for all;\n"
            "                     fair: one fair lock for all; rw: one read-write lock, R%% reads;\n"
            "                     semaphore: plain semaphore of P permits; psem: permit-expirable\n"
            "                     semaphore of P permits\n"
            "  --workers N        worker threads sharing one client, 1..%d\n"
            "  --seconds S        measured time after a 0.5 s warm-up (default 5)\n"
            "  --permits P        semaphore, psem: permits (default max(1, N/4))\n"
            "  --read-percent R   rw: percentage of read holds, 0..100 (default 90)\n"
            "  --async            uncontended, contended, fair: N acquisitions in flight from\n"
            "                     one thread through the asynchronous API, not N threads\n"
            "  --redlock          uncontended, contended: RedLock over the masters of -u\n"
            "  --watchdog         holds renewed by the watchdog instead of a 10 s lease\n"
            "  -v, --verbose      contended, fair: how often the lock changed hands, on stderr\n"
            "Prints one JSON line: lib, api, lease, mode, workers, ops, seconds, ops_per_s, p50_us, p99_us,\n"
            "and handoff_p50_us (contended, fair), reads/writes and their rates and\n"
            "percentiles (rw), kind and permits (semaphore, psem), kind and masters (--redlock).\n",
            MAX_WORKERS);
}

/* Report a usage error the same way for every bad argument. */
static int bad_usage(const char *what, const char *value)
{
    fprintf(stderr, "dlock-bench: %s%s%s\n", what, value ? ": " : "", value ? value : "");
    usage(stderr);
    return EXIT_USAGE;
}

/* Sleep in small steps until `until_ns` or until a worker fails. */
static void sleep_until(int64_t until_ns)
{
    for (;;) {
        int64_t left = until_ns - now_ns();
        if (left <= 0 || atomic_load(&failed)) return;
        if (left > 20000000) left = 20000000;
        struct timespec ts = {0, (long)left};
        nanosleep(&ts, NULL);
    }
}

/* Whole-number option in [lo, hi]; -1 when malformed. */
static long parse_long(const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    return v;
}

/* Make the resource every worker shares, named after our pid so reruns on
 * one server do not collide. */
static dlock_status make_shared(dlock_client *client, dlock_lock **shared)
{
    char name[96];
    dlock_status st = DLOCK_OK;
    snprintf(name, sizeof name, "bench:%s:%ld", mode_names[mode], (long)getpid());
    switch (mode) {
    case M_CONTENDED: st = dlock_lock_new(client, name, shared); break;
    case M_FAIR: st = dlock_lock_new_fair(client, name, shared); break;
    case M_RW: st = dlock_rwlock_new(client, name, &rw); break;
    case M_SEMAPHORE:
        st = dlock_semaphore_new(client, name, &sem);
        if (st == DLOCK_OK) st = dlock_semaphore_set_permits(sem, permits, NULL);
        break;
    case M_PSEM:
        st = dlock_psem_new(client, name, &psem);
        if (st == DLOCK_OK) st = dlock_psem_set_permits(psem, permits, NULL);
        break;
    default: break;
    }
    return st;
}

/* The JSON line's mode-specific fields. */
static void print_extra(worker *ws, int n, const uint64_t *const *hist, const uint64_t *ops, double secs, int verbose,
                        int *rc)
{
    if (single_lock()) {
        int err;
        double h = handoff_p50(ws, n, verbose, &err);
        if (err) {
            fprintf(stderr, "dlock-bench: out of memory\n");
            *rc = EXIT_SOFTWARE;
        }
        if (h < 0) printf(",\"handoff_p50_us\":null");
        else printf(",\"handoff_p50_us\":%.1f", h / 1e3);
    } else if (mode == M_RW) {
        printf(",\"read_percent\":%d,\"reads\":%" PRIu64 ",\"writes\":%" PRIu64
               ",\"reads_per_s\":%.1f,\"writes_per_s\":%.1f",
               read_percent, ops[CLS_READ], ops[CLS_WRITE], (double)ops[CLS_READ] / secs,
               (double)ops[CLS_WRITE] / secs);
        printf(",\"read_p50_us\":%.1f,\"read_p99_us\":%.1f,\"write_p50_us\":%.1f,\"write_p99_us\":%.1f",
               hist_percentile(hist[CLS_READ], ops[CLS_READ], 0.50) / 1e3,
               hist_percentile(hist[CLS_READ], ops[CLS_READ], 0.99) / 1e3,
               hist_percentile(hist[CLS_WRITE], ops[CLS_WRITE], 0.50) / 1e3,
               hist_percentile(hist[CLS_WRITE], ops[CLS_WRITE], 0.99) / 1e3);
    } else if (mode == M_SEMAPHORE || mode == M_PSEM) {
        printf(",\"kind\":\"%s\",\"permits\":%ld", mode == M_PSEM ? "expirable" : "plain", permits);
    }
}

/* Parse arguments, run the workers, print the JSON line. */
int main(int argc, char **argv)
{
    const char *url = NULL, *mode_arg = NULL;
    long workers = 0;
    double seconds = 5;
    int verbose = 0, use_redlock = 0;
    static const struct option longopts[] = {
        {"url", required_argument, NULL, 'u'},     {"mode", required_argument, NULL, 'm'},
        {"workers", required_argument, NULL, 'w'}, {"seconds", required_argument, NULL, 's'},
        {"permits", required_argument, NULL, 'p'}, {"read-percent", required_argument, NULL, 'r'},
        {"verbose", no_argument, NULL, 'v'},       {"help", no_argument, NULL, 'h'},
        {"async", no_argument, NULL, 'a'},         {"watchdog", no_argument, NULL, 'W'},
        {"redlock", no_argument, NULL, 'R'},       {NULL, 0, NULL, 0}};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":u:vh", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'u': url = optarg; break;
        case 'm': mode_arg = optarg; break;
        case 'w':
            if ((workers = parse_long(optarg, 1, MAX_WORKERS)) < 0)
                return bad_usage("--workers must be an integer from 1 to 1024", optarg);
            break;
        case 's':
            errno = 0;
            seconds = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(seconds > 0 && seconds <= 86400))
                return bad_usage("--seconds must be a number above 0 (at most 86400)", optarg);
            break;
        case 'p':
            if ((permits = parse_long(optarg, 1, 0x7fffffffL)) < 0)
                return bad_usage("--permits must be an integer from 1 to 2^31-1", optarg);
            break;
        case 'r':
            if ((read_percent = (int)parse_long(optarg, 0, 100)) < 0)
                return bad_usage("--read-percent must be an integer from 0 to 100", optarg);
            break;
        case 'v': verbose = 1; break;
        case 'a': use_async = 1; break;
        case 'W': lease_ms = DLOCK_LEASE_WATCHDOG; break;
        case 'R': use_redlock = 1; break;
        case 'h': usage(stdout); return 0;
        case ':': return bad_usage("option needs a value", argv[optind - 1]);
        default: return bad_usage("unknown option", argv[optind - 1]);
        }
    }
    if (optind < argc) return bad_usage("unexpected argument", argv[optind]);
    if (!url) return bad_usage("-u URL is required", NULL);
    if (!mode_arg) return bad_usage("--mode is required", NULL);
    for (mode = 0; mode < M_COUNT && strcmp(mode_arg, mode_names[mode]) != 0; mode++) {}
    if (mode == M_COUNT)
        return bad_usage("--mode must be uncontended, contended, fair, rw, semaphore or psem", mode_arg);
    if (!workers) return bad_usage("--workers is required", NULL);
    if (use_async && mode != M_UNCONTENDED && mode != M_CONTENDED && mode != M_FAIR)
        return bad_usage("--async works with uncontended, contended and fair", mode_arg);
    if (use_redlock && (use_async || (mode != M_UNCONTENDED && mode != M_CONTENDED)))
        return bad_usage("--redlock works with uncontended and contended, without --async", mode_arg);
    if (!permits) permits = workers / 4 > 1 ? workers / 4 : 1;

    /* A malformed URL is the caller's mistake; an unreachable one is not. */
    char *urls = strdup(url), *save = NULL;
    if (!urls) return EXIT_SOFTWARE;
    for (char *u = strtok_r(urls, ",", &save); u; u = strtok_r(NULL, ",", &save)) {
        if (n_masters == MAX_MASTERS || (!use_redlock && n_masters == 1))
            return bad_usage(use_redlock ? "at most 32 masters" : "one URL (several only with --redlock)", url);
        dlock_url parsed;
        if (dlock_url_parse(u, &parsed) != DLOCK_OK) return bad_usage("bad URL", dlock_last_error());
        dlock_url_free(&parsed);
        if (dlock_client_new(u, NULL, &masters[n_masters]) != DLOCK_OK) {
            fprintf(stderr, "dlock-bench: cannot use %s: %s\n", u, dlock_last_error());
            return EXIT_UNAVAILABLE;
        }
        n_masters++;
    }
    free(urls);
    if (n_masters == 0) return bad_usage("bad URL", url);
    dlock_client *client = masters[0];
    dlock_status st;

    int n = (int)workers, rc = 0;
    worker *ws = calloc((size_t)n, sizeof *ws);
    /* Per class, slot 0 then one per worker; then the waits, the same way. */
    uint64_t *hist = calloc((size_t)(n + 1) * (N_CLS + 1) * HIST_BUCKETS, sizeof *hist);
    uint64_t *waits = hist ? hist + (size_t)(n + 1) * N_CLS * HIST_BUCKETS : NULL;
    dlock_lock *shared = NULL;
    if (!ws || !hist) {
        fprintf(stderr, "dlock-bench: out of memory\n");
        return EXIT_SOFTWARE;
    }
    st = use_redlock ? DLOCK_OK : make_shared(client, &shared);
    if (st != DLOCK_OK) {
        fprintf(stderr, "dlock-bench: %s\n", dlock_last_error());
        return status_exit(st);
    }
    for (int i = 0; i < n; i++) {
        ws[i].index = i;
        ws[i].rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1);
        for (int k = 0; k < N_CLS; k++) ws[i].hist[k] = hist + ((size_t)(i + 1) * N_CLS + k) * HIST_BUCKETS;
        ws[i].wait_hist = waits + (size_t)(i + 1) * HIST_BUCKETS;
        if (use_redlock) {
            char name[96];
            if (mode == M_UNCONTENDED) snprintf(name, sizeof name, "bench:ru:%ld:%d", (long)getpid(), i);
            else snprintf(name, sizeof name, "bench:redlock:%ld", (long)getpid());
            if (dlock_redlock_new(masters, n_masters, name, &ws[i].rl) != DLOCK_OK) {
                fprintf(stderr, "dlock-bench: %s\n", dlock_last_error());
                return EXIT_SOFTWARE;
            }
        } else if (mode == M_UNCONTENDED) {
            char name[96];
            snprintf(name, sizeof name, "bench:u:%ld:%d", (long)getpid(), i);
            if (dlock_lock_new(client, name, &ws[i].lock) != DLOCK_OK) {
                fprintf(stderr, "dlock-bench: %s\n", dlock_last_error());
                return EXIT_SOFTWARE;
            }
        } else if (use_async && single_lock()) {
            /* One call in flight per handle: a handle per chain. */
            if ((mode == M_FAIR ? dlock_lock_new_fair(client, dlock_lock_name(shared), &ws[i].lock)
                                : dlock_lock_new(client, dlock_lock_name(shared), &ws[i].lock)) != DLOCK_OK) {
                fprintf(stderr, "dlock-bench: %s\n", dlock_last_error());
                return EXIT_SOFTWARE;
            }
        } else {
            ws[i].lock = shared;
        }
    }

    int started = 0;
    for (; use_async && started < n; started++) chain_next(&ws[started]);
    for (; !use_async && started < n; started++) {
        int e = pthread_create(&ws[started].thread, NULL, worker_main, &ws[started]);
        if (e) {
            fail(EXIT_SOFTWARE, "cannot start a worker thread: %s", strerror(e));
            break;
        }
    }
    int64_t t_begin = now_ns();
    sleep_until(t_begin + WARMUP_NS);
    t_begin = now_ns();
    int expected = PHASE_WARMUP;
    atomic_compare_exchange_strong(&phase, &expected, PHASE_MEASURE);
    sleep_until(t_begin + (int64_t)(seconds * 1e9));
    int64_t t_end = now_ns();
    atomic_store(&phase, PHASE_STOP);
    if (use_async) {
        pthread_mutex_lock(&chains_mu);
        while (chains_ended < started) pthread_cond_wait(&chains_cv, &chains_mu);
        pthread_mutex_unlock(&chains_mu);
    }
    for (int i = 0; !use_async && i < started; i++) pthread_join(ws[i].thread, NULL);

    if (atomic_load(&failed)) {
        fprintf(stderr, "dlock-bench: %s\n", fail_msg);
        rc = fail_exit;
    } else {
        /* Slot 0 of each class merges the workers' histograms; class 0
         * then also takes class 1's for the all-pairs percentiles. */
        uint64_t *merged[N_CLS], ops[N_CLS] = {0}, all[HIST_BUCKETS] = {0};
        for (int k = 0; k < N_CLS; k++) {
            merged[k] = hist + (size_t)k * HIST_BUCKETS;
            for (int i = 0; i < n; i++) {
                ops[k] += ws[i].ops[k];
                for (int b = 0; b < HIST_BUCKETS; b++) merged[k][b] += ws[i].hist[k][b];
            }
            for (int b = 0; b < HIST_BUCKETS; b++) all[b] += merged[k][b];
        }
        uint64_t total = ops[CLS_READ] + ops[CLS_WRITE], least = UINT64_MAX, most = 0;
        for (int i = 0; i < n; i++) {
            uint64_t mine = ws[i].ops[CLS_READ] + ws[i].ops[CLS_WRITE];
            if (mine < least) least = mine;
            if (mine > most) most = mine;
            for (int b = 0; b < HIST_BUCKETS; b++) waits[b] += ws[i].wait_hist[b];
        }
        double secs = (double)(t_end - t_begin) / 1e9, fair_share = (double)total / n;
        printf("{\"lib\":\"dlock\",\"mode\":\"%s\",\"workers\":%d,\"ops\":%" PRIu64
               ",\"seconds\":%.3f,\"ops_per_s\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"api\":\"%s\",\"lease\":\"%s\"",
               mode_names[mode], n, total, secs, (double)total / secs, hist_percentile(all, total, 0.50) / 1e3,
               hist_percentile(all, total, 0.99) / 1e3, use_async ? "async" : "sync",
               lease_ms == DLOCK_LEASE_WATCHDOG ? "watchdog" : "10s");
        printf(",\"p999_us\":%.1f,\"wait_p99_us\":%.1f,\"wait_p999_us\":%.1f,\"share_min\":%.3f,\"share_max\":%.3f",
               hist_percentile(all, total, 0.999) / 1e3, hist_percentile(waits, total, 0.99) / 1e3,
               hist_percentile(waits, total, 0.999) / 1e3, total ? (double)least / fair_share : 0.0,
               total ? (double)most / fair_share : 0.0);
        print_extra(ws, n, (const uint64_t *const *)merged, ops, secs, verbose, &rc);
        if (use_redlock) printf(",\"kind\":\"redlock\",\"masters\":%zu", n_masters);
        printf("}\n");
        fflush(stdout);
    }

    for (int i = 0; i < n; i++) {
        dlock_redlock_free(ws[i].rl);
        if (!use_redlock && (mode == M_UNCONTENDED || (use_async && single_lock()))) dlock_lock_free(ws[i].lock);
        free(ws[i].recs);
    }
    dlock_lock_free(shared);
    dlock_rwlock_free(rw);
    dlock_semaphore_free(sem);
    dlock_psem_free(psem);
    for (size_t i = 0; i < n_masters; i++) dlock_client_free(masters[i]);
    free(ws);
    free(hist);
    return rc;
}
