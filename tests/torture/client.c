/*
 * dlock-torture-client: one worker of the torture harness.
 *
 * It runs one kind of client for a given time, recording every operation
 * to its own history file (history.h): take the lock, take a few steps
 * under it, release it, again. A step is a read-modify-write of a counter
 * at a fenced resource (a Redis server the harness never faults): read and
 * write each carry the hold's fencing token and are refused when a higher
 * one was seen, so a stale holder's write never lands. Holders of the
 * library check dlock_*_lost() before each step, as a careful program
 * does; the time of a step is taken before that check.
 *
 * Kinds on libdlock: lock and fair (--threads N: N threads on one client),
 * rw, sem (plain semaphore), psem, multi (two of three locks at once),
 * redlock and latch (odd-numbered clients of lock and fair without
 * --threads, psem, multi, redlock and latch go through the asynchronous
 * calls). `cli` runs `dlock lock` (or
 * `dlock semaphore`) in a loop with this program as COMMAND (`cs`), which
 * records its steps; the CLI kills it when the lease is lost.
 *
 * And the seeds' earlier locks, which the checker must catch:
 *   nolock    no lock at all;
 *   setnx     SET NX PX without an owner, released with DEL (a slow holder
 *             deletes the next holder's lock);
 *   checkdel  an owner value, released by GET, compare, DEL as separate
 *             commands (the lease can end between them);
 *   getset    SETNX of an expiry time, a stale one taken over with GETSET,
 *             judged by the client's own clock (--skew makes clocks differ).
 * They write without tokens: the resource cannot fence them.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "dlock.h"
#include "history.h"

#define MAX_URLS 3
#define MAX_NAMES 3

typedef struct cfg {
    const char *kind, *dir, *resource, *dlock_bin, *cli_args, *mode_arg;
    const char *urls[MAX_URLS];
    int n_urls;
    char names[MAX_NAMES][64];
    int n_names;
    int client;
    long lease_ms, seconds, permits, skew_ms, slow_release_ms;
    int threads;       /* lock: workers of one client, as threads (one hold each) */
    long gc_pause_pct; /* per step: pause between the loss check and the write */
    unsigned long long seed;
    /* latch */
    const char *latch_role;
    long latch_n, round_ms;
    long long epoch_us;
    /* cs: when the torture client started the dlock that runs it */
    long long spawned_us;
} cfg;

typedef struct worker {
    cfg *c;
    int fd, pid;
    long hold;
    unsigned long long rng;
    redisContext *res; /* the fenced resource */
    redisContext *raw; /* broken kinds: the lock server, directly */
    dlock_client *cl[MAX_URLS];
    dlock_lock *lk[MAX_NAMES];
    dlock_rwlock *rw;
    dlock_semaphore *sem;
    dlock_psem *ps;
    dlock_permit *pm;
    dlock_redlock *rl;
    dlock_latch *latch;
    /* the hold in progress */
    int held[MAX_NAMES];
    uint64_t token[MAX_NAMES];
    char mode;
    dlock_rw_mode rw_mode;
    char owner[64];
    long long expiry_ms; /* getset: the expiry this holder wrote */
} worker;

static void record(worker *w, char kind, char mode, int holder, const char *name, int64_t t0, int64_t t1,
                   const char *result, uint64_t token, long long value)
{
    tt_event e = {kind, mode, w->pid, holder, w->c->client, w->hold, "", t0, t1, "", token, value};
    snprintf(e.name, sizeof e.name, "%s", name);
    snprintf(e.result, sizeof e.result, "%s", result);
    tt_write(w->fd, &e);
}

/* A hiredis connection to a redis:// or unix:// URL (no credentials). */
static redisContext *connect_url(const char *url)
{
    dlock_url u;
    if (dlock_url_parse(url, &u) != DLOCK_OK) return NULL;
    struct timeval tv = {2, 0};
    redisContext *c = u.kind == DLOCK_URL_UNIX ? redisConnectUnixWithTimeout(u.path, tv)
                                               : redisConnectWithTimeout(u.host, u.port, tv);
    dlock_url_free(&u);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* Reconnect on demand: the lock server of the broken kinds restarts. */
static redisReply *raw_cmd(worker *w, const char *fmt, ...)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!w->raw) w->raw = connect_url(w->c->urls[0]);
        if (!w->raw) return NULL;
        va_list ap;
        va_start(ap, fmt);
        redisReply *r = redisvCommand(w->raw, fmt, ap);
        va_end(ap);
        if (r) return r;
        redisFree(w->raw);
        w->raw = NULL;
    }
    return NULL;
}

/* ---- the fenced resource ------------------------------------------------ */

/* Read the counter of `name` if `token` is not below the highest token
 * seen, raising that to `token`; -1 when refused. */
static const char *FENCED_GET = "local t = tonumber(ARGV[1]) "
                                "if t < tonumber(redis.call('GET', KEYS[1]) or '0') then return -1 end "
                                "redis.call('SET', KEYS[1], ARGV[1]) "
                                "return tonumber(redis.call('GET', KEYS[2]) or '0')";
/* Write it under the same rule; 1 when written, -1 when refused. */
static const char *FENCED_SET = "local t = tonumber(ARGV[1]) "
                                "if t < tonumber(redis.call('GET', KEYS[1]) or '0') then return -1 end "
                                "redis.call('SET', KEYS[1], ARGV[1]) "
                                "redis.call('SET', KEYS[2], ARGV[2]) return 1";

static long long res_int(redisReply *r)
{
    long long v = r && r->type == REDIS_REPLY_INTEGER  ? r->integer
                  : r && r->type == REDIS_REPLY_STRING ? atoll(r->str)
                                                       : -2;
    if (r) freeReplyObject(r);
    return v;
}

/* One step: read-modify-write of the counter; fenced when token > 0.
 * Returns "acc", "rej" or "err"; *value is what was read. */
static const char *resource_step(worker *w, const char *name, uint64_t token, long long *value)
{
    char max[96], count[96], tok[24];
    snprintf(max, sizeof max, "res:{%s}:max", name);
    snprintf(count, sizeof count, "res:{%s}:count", name);
    snprintf(tok, sizeof tok, "%llu", (unsigned long long)token);
    long long v;
    if (token) v = res_int(redisCommand(w->res, "EVAL %s 2 %s %s %s", FENCED_GET, max, count, tok));
    else v = res_int(redisCommand(w->res, "GET %s", count));
    if (v == -2 && !token) v = 0; /* a missing key reads as nil */
    *value = v;
    if (v == -1) return "rej";
    if (v < 0) return "err";
    long long ok;
    if (token) ok = res_int(redisCommand(w->res, "EVAL %s 2 %s %s %s %lld", FENCED_SET, max, count, tok, v + 1));
    else {
        redisReply *r = redisCommand(w->res, "SET %s %lld", count, v + 1);
        ok = r && r->type == REDIS_REPLY_STATUS ? 1 : -2;
        if (r) freeReplyObject(r);
    }
    return ok == 1 ? "acc" : ok == -1 ? "rej" : "err";
}

/* The highest token the resource accepted for `name`: a new process
 * passes it as its fencing floor, as a careful user would. */
static uint64_t resource_floor(worker *w, const char *name)
{
    char max[96];
    snprintf(max, sizeof max, "res:{%s}:max", name);
    long long v = res_int(redisCommand(w->res, "GET %s", max));
    return v > 0 ? (uint64_t)v : 0;
}

/* ---- holds of each kind ------------------------------------------------- */

static int is_broken(const char *kind)
{
    return !strcmp(kind, "nolock") || !strcmp(kind, "setnx") || !strcmp(kind, "checkdel") || !strcmp(kind, "getset");
}

static long long wall_ms(worker *w)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000 + w->c->skew_ms;
}

/* The seeds' locks, tried until `wait_ms` ends; 1 when held. */
static int broken_acquire(worker *w, const char *name, long wait_ms)
{
    const char *kind = w->c->kind;
    if (!strcmp(kind, "nolock")) return 1;
    char key[96];
    snprintf(key, sizeof key, "lock:{%s}", name);
    snprintf(w->owner, sizeof w->owner, "%d:%ld", w->pid, w->hold);
    int64_t until = tt_now_us() + wait_ms * 1000;
    do {
        if (!strcmp(kind, "setnx") || !strcmp(kind, "checkdel")) {
            redisReply *r =
                raw_cmd(w, "SET %s %s NX PX %ld", key, !strcmp(kind, "setnx") ? "1" : w->owner, w->c->lease_ms);
            int ok = r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
            if (ok) return 1;
        } else { /* getset */
            long long now = wall_ms(w), mine = now + w->c->lease_ms + 1;
            if (res_int(raw_cmd(w, "SETNX %s %lld", key, mine)) == 1) {
                w->expiry_ms = mine;
                return 1;
            }
            long long cur = res_int(raw_cmd(w, "GET %s", key));
            if (cur >= 0 && cur < now) {
                long long old = res_int(raw_cmd(w, "GETSET %s %lld", key, mine));
                if (old < now) {
                    w->expiry_ms = mine;
                    return 1;
                }
            }
        }
        tt_sleep_ms(10);
    } while (tt_now_us() < until);
    return 0;
}

static void broken_release(worker *w, const char *name)
{
    const char *kind = w->c->kind;
    char key[96];
    snprintf(key, sizeof key, "lock:{%s}", name);
    if (!strcmp(kind, "setnx")) {
        freeReplyObject(raw_cmd(w, "DEL %s", key));
    } else if (!strcmp(kind, "checkdel")) {
        redisReply *r = raw_cmd(w, "GET %s", key);
        int mine = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, w->owner) == 0;
        if (r) freeReplyObject(r);
        tt_sleep_ms(w->c->slow_release_ms); /* where the seeds' story puts its GC pause */
        if (mine) freeReplyObject(raw_cmd(w, "DEL %s", key));
    } else if (!strcmp(kind, "getset")) {
        if (wall_ms(w) < w->expiry_ms) freeReplyObject(raw_cmd(w, "DEL %s", key));
    }
}

static void open_handles(worker *w)
{
    cfg *c = w->c;
    dlock_options o = {0};
    o.watchdog_lease_ms = c->lease_ms;
    o.offline_ok = 1;
    if (!strcmp(c->kind, "redlock")) {
        o.command_timeout_ms = (int)(c->lease_ms / 10 < 50 ? 50 : c->lease_ms / 10);
        o.connect_timeout_ms = o.command_timeout_ms;
    }
    for (int i = 0; i < c->n_urls; i++)
        if (dlock_client_new(c->urls[i], &o, &w->cl[i]) != DLOCK_OK) {
            fprintf(stderr, "torture client: %s\n", dlock_last_error());
            exit(2);
        }
    const char *k = c->kind;
    for (int i = 0; i < c->n_names; i++) {
        const char *name = c->names[i];
        if (!strcmp(k, "lock") || !strcmp(k, "multi")) dlock_lock_new(w->cl[0], name, &w->lk[i]);
        if (!strcmp(k, "fair")) dlock_lock_new_fair(w->cl[0], name, &w->lk[i]);
        if (w->lk[i]) dlock_lock_set_fence_floor(w->lk[i], resource_floor(w, name));
    }
    if (!strcmp(k, "rw")) {
        dlock_rwlock_new(w->cl[0], c->names[0], &w->rw);
        dlock_rwlock_set_fence_floor(w->rw, resource_floor(w, c->names[0]));
    }
    if (!strcmp(k, "sem")) {
        dlock_semaphore_new(w->cl[0], c->names[0], &w->sem);
        dlock_semaphore_set_permits(w->sem, c->permits, NULL);
    }
    if (!strcmp(k, "psem")) {
        dlock_psem_new(w->cl[0], c->names[0], &w->ps);
        dlock_psem_set_permits(w->ps, c->permits, NULL);
    }
    if (!strcmp(k, "redlock")) {
        dlock_redlock_new(w->cl, (size_t)c->n_urls, c->names[0], &w->rl);
        dlock_redlock_set_fence_floor(w->rl, resource_floor(w, c->names[0]));
    }
}

static void close_handles(worker *w)
{
    for (int i = 0; i < MAX_NAMES; i++) dlock_lock_free(w->lk[i]);
    dlock_rwlock_free(w->rw);
    dlock_semaphore_free(w->sem);
    dlock_permit_free(w->pm);
    dlock_psem_free(w->ps);
    dlock_redlock_free(w->rl);
    dlock_latch_free(w->latch);
    for (int i = 0; i < MAX_URLS; i++) dlock_client_free(w->cl[i]);
    if (w->raw) redisFree(w->raw);
}

/* Odd-numbered lock, fair, psem, multi and redlock clients take and give
 * back their permits and locks through the asynchronous calls, and
 * odd-numbered latch clients count down and await so, waiting here for the
 * callback, so that the history checks those calls too. */
typedef struct permit_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    dlock_status st;
    dlock_permit *pm;
    uint64_t token;
} permit_wait;

static permit_wait permit_waiter = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, DLOCK_OK, NULL, 0};

static void permit_done(dlock_psem *p, dlock_status st, dlock_permit *pm, void *arg)
{
    (void)p;
    permit_wait *pw = arg;
    pthread_mutex_lock(&pw->mu);
    pw->st = st;
    pw->pm = pm;
    pw->done = 1;
    pthread_cond_signal(&pw->cv);
    pthread_mutex_unlock(&pw->mu);
}

static void multi_done(dlock_status st, void *arg)
{
    permit_done(NULL, st, NULL, arg);
}

static void redlock_acquired(dlock_redlock *rl, dlock_status st, uint64_t token, void *arg)
{
    (void)rl;
    permit_wait *pw = arg;
    pthread_mutex_lock(&pw->mu);
    pw->token = token;
    pthread_mutex_unlock(&pw->mu);
    permit_done(NULL, st, NULL, arg);
}

static void redlock_released(dlock_redlock *rl, dlock_status st, void *arg)
{
    (void)rl;
    permit_done(NULL, st, NULL, arg);
}

static void lock_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)l;
    permit_wait *pw = arg;
    pthread_mutex_lock(&pw->mu);
    pw->token = token;
    pthread_mutex_unlock(&pw->mu);
    permit_done(NULL, st, NULL, arg);
}

static void lock_released(dlock_lock *l, dlock_status st, void *arg)
{
    (void)l;
    permit_done(NULL, st, NULL, arg);
}

static void latch_counted(dlock_latch *l, dlock_status st, long left, void *arg)
{
    (void)l;
    permit_wait *pw = arg;
    pthread_mutex_lock(&pw->mu);
    pw->token = (uint64_t)left;
    pthread_mutex_unlock(&pw->mu);
    permit_done(NULL, st, NULL, arg);
}

static void latch_awaited(dlock_latch *l, dlock_status st, void *arg)
{
    (void)l;
    permit_done(NULL, st, NULL, arg);
}

/* The outcome of a call started with `started`, its permit in *pm. */
static dlock_status permit_wait_for(dlock_status started, dlock_permit **pm)
{
    permit_wait *pw = &permit_waiter;
    if (started != DLOCK_OK) return started;
    pthread_mutex_lock(&pw->mu);
    while (!pw->done) pthread_cond_wait(&pw->cv, &pw->mu);
    pw->done = 0;
    dlock_status st = pw->st;
    if (pm) *pm = pw->pm;
    pthread_mutex_unlock(&pw->mu);
    return st;
}

/* One worker a process: the waiter above is the process's one. */
static int async_client(const worker *w)
{
    return w->c->client % 2 == 1 && w->c->threads <= 1;
}

/* Take a hold of the worker's kind; which names it covers are in held[]. */
static const char *acquire(worker *w, long wait_ms)
{
    cfg *c = w->c;
    const char *k = c->kind;
    memset(w->held, 0, sizeof w->held);
    memset(w->token, 0, sizeof w->token);
    w->mode = TT_EXCLUSIVE;
    dlock_status st = DLOCK_OK;
    if (is_broken(k)) {
        int name = (int)tt_rand_between(&w->rng, 0, c->n_names - 1);
        if (!broken_acquire(w, c->names[name], wait_ms)) return "busy";
        w->held[name] = 1;
        return "ok";
    }
    if (!strcmp(k, "lock") || !strcmp(k, "fair")) {
        int i = (int)tt_rand_between(&w->rng, 0, c->n_names - 1);
        if (async_client(w)) {
            st = permit_wait_for(
                dlock_lock_acquire_async(w->lk[i], wait_ms, DLOCK_LEASE_WATCHDOG, lock_acquired, &permit_waiter), NULL);
            w->token[i] = permit_waiter.token; /* written before the callback's signal */
        } else {
            st = dlock_lock_acquire(w->lk[i], wait_ms, DLOCK_LEASE_WATCHDOG, &w->token[i]);
        }
        w->held[i] = st == DLOCK_OK;
    } else if (!strcmp(k, "multi")) {
        int skip = (int)tt_rand_between(&w->rng, 0, 2), j = 0, idx[2];
        dlock_lock *pair[2];
        for (int i = 0; i < 3; i++)
            if (i != skip) {
                idx[j] = i;
                pair[j++] = w->lk[i];
            }
        uint64_t t[2] = {0, 0};
        if (async_client(w))
            st = permit_wait_for(
                dlock_multilock_acquire_async(pair, 2, wait_ms, DLOCK_LEASE_WATCHDOG, t, multi_done, &permit_waiter),
                NULL);
        else st = dlock_multilock_acquire(pair, 2, wait_ms, DLOCK_LEASE_WATCHDOG, t);
        if (st == DLOCK_OK)
            for (j = 0; j < 2; j++) {
                w->held[idx[j]] = 1;
                w->token[idx[j]] = t[j];
            }
    } else if (!strcmp(k, "rw")) {
        w->rw_mode = tt_rand_between(&w->rng, 0, 99) < 60 ? DLOCK_READ : DLOCK_WRITE;
        w->mode = w->rw_mode == DLOCK_READ ? TT_READ : TT_EXCLUSIVE;
        st = dlock_rwlock_acquire(w->rw, w->rw_mode, wait_ms, DLOCK_LEASE_WATCHDOG, &w->token[0]);
        w->held[0] = st == DLOCK_OK;
    } else if (!strcmp(k, "sem")) {
        w->mode = TT_PERMIT;
        st = dlock_semaphore_acquire(w->sem, 1, wait_ms);
        w->held[0] = st == DLOCK_OK;
    } else if (!strcmp(k, "psem")) {
        w->mode = TT_PERMIT;
        if (async_client(w))
            st = permit_wait_for(
                dlock_psem_acquire_async(w->ps, wait_ms, DLOCK_LEASE_WATCHDOG, permit_done, &permit_waiter), &w->pm);
        else st = dlock_psem_acquire(w->ps, wait_ms, DLOCK_LEASE_WATCHDOG, &w->pm);
        w->held[0] = st == DLOCK_OK;
    } else if (!strcmp(k, "redlock")) {
        if (async_client(w)) {
            st = permit_wait_for(
                dlock_redlock_acquire_async(w->rl, wait_ms, DLOCK_LEASE_WATCHDOG, redlock_acquired, &permit_waiter),
                NULL);
            w->token[0] = permit_waiter.token; /* written before the callback's signal */
        } else {
            st = dlock_redlock_acquire(w->rl, wait_ms, DLOCK_LEASE_WATCHDOG, NULL, &w->token[0]);
        }
        w->held[0] = st == DLOCK_OK;
    }
    return st == DLOCK_OK ? "ok" : st == DLOCK_ERR_TIMEOUT ? "busy" : "err";
}

static int lost(worker *w)
{
    const char *k = w->c->kind;
    if (is_broken(k) || !strcmp(k, "sem")) return 0;
    if (!strcmp(k, "rw")) return dlock_rwlock_lost(w->rw, w->rw_mode);
    if (!strcmp(k, "psem")) return dlock_permit_lost(w->pm);
    if (!strcmp(k, "redlock")) return dlock_redlock_lost(w->rl);
    for (int i = 0; i < w->c->n_names; i++)
        if (w->held[i] && dlock_lock_lost(w->lk[i])) return 1;
    return 0;
}

static const char *release(worker *w)
{
    const char *k = w->c->kind;
    dlock_status st = DLOCK_OK;
    if (is_broken(k)) {
        for (int i = 0; i < w->c->n_names; i++)
            if (w->held[i]) broken_release(w, w->c->names[i]);
    } else if (!strcmp(k, "lock") || !strcmp(k, "fair")) {
        for (int i = 0; i < w->c->n_names; i++)
            if (w->held[i] && async_client(w))
                st = permit_wait_for(dlock_lock_release_async(w->lk[i], lock_released, &permit_waiter), NULL);
            else if (w->held[i]) st = dlock_lock_release(w->lk[i]);
    } else if (!strcmp(k, "multi")) {
        dlock_lock *held[MAX_NAMES];
        size_t n = 0;
        for (int i = 0; i < MAX_NAMES; i++)
            if (w->held[i]) held[n++] = w->lk[i];
        if (async_client(w))
            st = permit_wait_for(dlock_multilock_release_async(held, n, multi_done, &permit_waiter), NULL);
        else st = dlock_multilock_release(held, n);
    } else if (!strcmp(k, "rw")) {
        st = dlock_rwlock_release(w->rw, w->rw_mode);
    } else if (!strcmp(k, "sem")) {
        st = dlock_semaphore_release(w->sem, 1);
    } else if (!strcmp(k, "psem")) {
        if (async_client(w)) {
            st = permit_wait_for(dlock_psem_release_async(w->ps, w->pm, permit_done, &permit_waiter), NULL);
            if (st == DLOCK_ERR_INVALID) dlock_permit_free(w->pm); /* not started: still ours */
        } else {
            st = dlock_psem_release(w->ps, w->pm);
        }
        w->pm = NULL;
    } else if (!strcmp(k, "redlock")) {
        if (async_client(w))
            st = permit_wait_for(dlock_redlock_release_async(w->rl, redlock_released, &permit_waiter), NULL);
        else st = dlock_redlock_release(w->rl);
    }
    return st == DLOCK_OK ? "ok" : st == DLOCK_ERR_LOST ? "lost" : "err";
}

/* Kleppmann's process pause: the holder checked its lock, then stops (a
 * GC pause, the VM descheduled) for longer than the lease, then writes.
 * No lock can prevent the overlap; the fencing token makes the resource
 * refuse the write. Recorded as a pause fault of this process; the step
 * counts from the end of the pause, when it acts. */
static int64_t gc_pause(worker *w, int holder)
{
    long ms = tt_rand_between(&w->rng, w->c->lease_ms * 6 / 5, w->c->lease_ms * 5 / 2);
    int64_t t0 = tt_now_us();
    /* The whole process stops, its watchdog too, as in a real pause: a
     * child wakes it up (only async-signal-safe calls after fork). */
    pid_t me = getpid(), waker = fork();
    if (waker == 0) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {}
        kill(me, SIGCONT);
        _exit(0);
    }
    if (waker > 0) {
        raise(SIGSTOP);
        while (waitpid(waker, NULL, 0) < 0 && errno == EINTR) {}
    }
    int64_t t1 = tt_now_us();
    tt_event f = {TT_FAULT, TT_NONE, w->pid, holder, w->c->client, w->hold, "pause", t0, t1, "gc", 0, 0};
    tt_write(w->fd, &f);
    return t1;
}

/* Steps under the hold just taken: each starts with the time, then the
 * loss check, then the write. A step now and then outlasts the lease:
 * the watchdog must carry the hold through it; the seeds' locks cannot. */
static void steps(worker *w, int holder)
{
    cfg *c = w->c;
    long n = tt_rand_between(&w->rng, 2, 8);
    for (long s = 0; s < n; s++) {
        int64_t t0 = tt_now_us();
        if (lost(w)) break;
        if (c->gc_pause_pct && tt_rand_between(&w->rng, 1, 100) <= c->gc_pause_pct) t0 = gc_pause(w, holder);
        for (int i = 0; i < c->n_names; i++) {
            if (!w->held[i]) continue;
            long long v = 0;
            const char *res = "ok";
            if (w->mode == TT_EXCLUSIVE) res = resource_step(w, c->names[i], w->token[i], &v);
            record(w, TT_STEP, w->mode, holder, c->names[i], t0, tt_now_us(), res, w->token[i], v);
        }
        long pause =
            tt_rand_between(&w->rng, 0, 99) < 3 ? c->lease_ms * 3 / 2 : tt_rand_between(&w->rng, 5, c->lease_ms / 8);
        tt_sleep_ms(pause);
    }
}

/* Whether a failed release of this kind leaves the hold for a retry
 * (the others end their hold whatever the release found). */
static int keeps_hold_on_error(worker *w)
{
    const char *k = w->c->kind;
    return !strcmp(k, "lock") || !strcmp(k, "fair") || !strcmp(k, "rw");
}

/* Take, use and give back holds until `end`; the handles are open. */
static void lock_loop(worker *w, int64_t end)
{
    while (tt_now_us() < end) {
        w->hold++;
        int64_t t0 = tt_now_us();
        const char *res = acquire(w, 2 * w->c->lease_ms);
        int64_t t1 = tt_now_us();
        int any = 0;
        for (int i = 0; i < w->c->n_names; i++)
            if (w->held[i]) {
                record(w, TT_ACQUIRE, w->mode, w->pid, w->c->names[i], t0, t1, res, w->token[i], 0);
                any = 1;
            }
        if (!any) {
            record(w, TT_ACQUIRE, w->mode, w->pid, w->c->names[0], t0, t1, res, 0, 0);
            tt_sleep_ms(tt_rand_between(&w->rng, 5, 50));
            continue;
        }
        steps(w, w->pid);
        t0 = tt_now_us();
        res = release(w);
        record(w, TT_RELEASE, w->mode, w->pid, w->c->names[0], t0, tt_now_us(), res, 0, 0);
        /* A lock or rwlock release that failed without an answer (the
         * server restarting) leaves the hold in place, as documented: the
         * caller tries again. Without this the next acquire would be a
         * re-entry, and its token the same as this hold's. */
        for (int tries = 0; !strcmp(res, "err") && keeps_hold_on_error(w) && tries < 100; tries++) {
            tt_sleep_ms(20);
            t0 = tt_now_us();
            res = release(w);
            record(w, TT_RELEASE, w->mode, w->pid, w->c->names[0], t0, tt_now_us(), res, 0, 0);
        }
        tt_sleep_ms(tt_rand_between(&w->rng, 0, 20));
    }
}

typedef struct thread_arg {
    worker w;
    int64_t end;
} thread_arg;

static void *lock_thread(void *arg)
{
    thread_arg *a = arg;
    lock_loop(&a->w, a->end);
    return NULL;
}

/*
 * Why threads: the library hands a lock from a releasing thread straight
 * to a waiting thread of the same client (the direct hand-off of
 * release.lua, and of fair_release.lua when that thread is the queue's
 * head), which processes of one thread each never exercise. With --threads N the
 * process runs N workers on one client and one set of handles, each with
 * its own random stream, resource connection and hold numbers (thread i
 * counts from i * 10^8, so the checker's (pid, hold) pairs stay unique);
 * they share the history file (one write per line) and the pid, so a
 * pause or a kill of the process counts for all of them, as it does.
 */
static void run_locks(worker *w, int64_t end)
{
    open_handles(w);
    int n = (!strcmp(w->c->kind, "lock") || !strcmp(w->c->kind, "fair")) && w->c->threads > 1 ? w->c->threads : 1;
    thread_arg *more = calloc((size_t)n, sizeof *more);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    int started = 0;
    for (int i = 1; more && th && i < n; i++) {
        more[i].w = *w;
        more[i].w.rng = w->rng ^ (0x9E3779B97F4A7C15ull * (unsigned long long)i);
        more[i].w.hold = (long)i * 100000000L;
        more[i].w.res = connect_url(w->c->resource);
        more[i].end = end;
        if (!more[i].w.res || pthread_create(&th[i], NULL, lock_thread, &more[i]) != 0) {
            fprintf(stderr, "torture client: cannot start worker thread %d\n", i);
            exit(2);
        }
        started = i;
    }
    lock_loop(w, end);
    for (int i = 1; i <= started; i++) {
        pthread_join(th[i], NULL);
        redisFree(more[i].w.res);
    }
    free(more);
    free(th);
    close_handles(w);
}

/* COMMAND of `dlock lock`: one hold, its steps, no loss check of its own
 * (dlock kills it when the lease is lost). Its holder is the dlock
 * process: the guard's parent. The hold's acquisition is recorded from
 * the moment that dlock was started (--spawned): its grant lies anywhere
 * in between, and the checker must know how early it may have been. */
static void run_cs(worker *w)
{
    cfg *c = w->c;
    int holder = 0;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)getppid());
    FILE *f = fopen(path, "r");
    if (f) {
        if (fgets(buf, sizeof buf, f)) {
            const char *p = strrchr(buf, ')');
            if (p) sscanf(p + 2, "%*c %d", &holder);
        }
        fclose(f);
    }
    const char *tok = getenv("DLOCK_TOKEN");
    w->token[0] = tok ? strtoull(tok, NULL, 10) : 0;
    w->held[0] = 1;
    w->mode = c->mode_arg ? c->mode_arg[0] : TT_EXCLUSIVE;
    w->hold = 1;
    int64_t t = tt_now_us();
    int64_t since = c->spawned_us > 0 && c->spawned_us <= t ? c->spawned_us : t;
    record(w, TT_ACQUIRE, w->mode, holder, c->names[0], since, t, "ok", w->token[0], 0);
    steps(w, holder);
}

/* `dlock lock ... NAME -- dlock-torture-client --kind cs ...` in a loop;
 * the current dlock's pid is kept in DIR/cli-N.pid for the harness's
 * faults. */
static void run_cli(worker *w, int64_t end, const char *self)
{
    cfg *c = w->c;
    char lease[24], ttl[24], wait[24], client[24], seed[24], spawned[24], pidfile[512];
    /* dlock's durations carry their unit (a bare number is seconds);
     * --lease is ours, in milliseconds. */
    snprintf(lease, sizeof lease, "%ld", c->lease_ms);
    snprintf(ttl, sizeof ttl, "%ldms", c->lease_ms);
    snprintf(wait, sizeof wait, "%ldms", 2 * c->lease_ms);
    snprintf(client, sizeof client, "%d", c->client);
    snprintf(pidfile, sizeof pidfile, "%s/cli-%d.pid", c->dir, c->client);
    while (tt_now_us() < end) {
        snprintf(seed, sizeof seed, "%llu", tt_rand(&w->rng));
        const char *argv[64];
        int a = 0;
        argv[a++] = c->dlock_bin;
        for (int i = 0; i < c->n_urls; i++) {
            argv[a++] = "-u";
            argv[a++] = c->urls[i];
        }
        char extra[128];
        snprintf(extra, sizeof extra, "%s", c->cli_args ? c->cli_args : "lock");
        for (char *tok = strtok(extra, " "); tok && a < 40; tok = strtok(NULL, " ")) argv[a++] = tok;
        int64_t t0 = tt_now_us();
        snprintf(spawned, sizeof spawned, "%lld", (long long)t0);
        const char *tail[] = {"-t",
                              ttl,
                              "-w",
                              wait,
                              c->names[0],
                              "--",
                              self,
                              "--kind",
                              "cs",
                              "--dir",
                              c->dir,
                              "--client",
                              client,
                              "--resource",
                              c->resource,
                              "--name",
                              c->names[0],
                              "--lease",
                              lease,
                              "--seed",
                              seed,
                              "--mode",
                              c->mode_arg ? c->mode_arg : "x",
                              "--spawned",
                              spawned,
                              NULL};
        for (int i = 0; tail[i]; i++) argv[a++] = tail[i];
        argv[a] = NULL;
        pid_t pid = fork();
        if (pid == 0) {
            execv(c->dlock_bin, (char *const *)argv);
            _exit(127);
        }
        if (pid < 0) break;
        FILE *pf = fopen(pidfile, "w");
        if (pf) {
            fprintf(pf, "%d\n", (int)pid);
            fclose(pf);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        unlink(pidfile);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        w->hold++;
        record(w, TT_EXIT, TT_NONE, (int)pid, c->names[0], t0, tt_now_us(), code == 0 ? "ok" : "fail", 0, code);
        tt_sleep_ms(tt_rand_between(&w->rng, 0, 20));
    }
}

/* Latch rounds: round r uses latch "NAME-r" and starts at epoch + r *
 * round_ms; the harness set every round's latch to N before the workers
 * started; counters count down once each after a random delay, awaiters
 * wait for zero. A worker
 * restarted mid-round joins at the next one (it may have counted down in
 * this one before it was killed). */
static void run_latch(worker *w, int64_t end)
{
    cfg *c = w->c;
    open_handles(w);
    long round = (long)((tt_now_us() - c->epoch_us) / (c->round_ms * 1000)) + 1;
    for (;; round++) {
        int64_t start = c->epoch_us + round * c->round_ms * 1000;
        if (start + c->round_ms * 1000 > end) break;
        int64_t now = tt_now_us();
        if (start > now) tt_sleep_ms((long)((start - now) / 1000));
        char name[96];
        snprintf(name, sizeof name, "%.40s-%ld", c->names[0], round);
        dlock_latch_free(w->latch);
        w->latch = NULL;
        if (dlock_latch_new(w->cl[0], name, &w->latch) != DLOCK_OK) continue;
        if (!strcmp(c->latch_role, "down")) {
            tt_sleep_ms(tt_rand_between(&w->rng, 0, c->round_ms / 2));
            long left = -1;
            int64_t t0 = tt_now_us();
            dlock_status st;
            if (async_client(w)) {
                st = permit_wait_for(dlock_latch_count_down_async(w->latch, latch_counted, &permit_waiter), NULL);
                left = (long)permit_waiter.token; /* written before the callback's signal */
            } else {
                st = dlock_latch_count_down(w->latch, &left);
            }
            record(w, TT_COUNTDOWN, TT_NONE, w->pid, name, t0, tt_now_us(), st == DLOCK_OK ? "ok" : "err", 0, left);
        } else {
            int64_t t0 = tt_now_us();
            dlock_status st = async_client(w) ? permit_wait_for(dlock_latch_await_async(w->latch, c->round_ms * 3 / 4,
                                                                                        latch_awaited, &permit_waiter),
                                                                NULL)
                                              : dlock_latch_await(w->latch, c->round_ms * 3 / 4);
            record(w, TT_AWAIT, TT_NONE, w->pid, name, t0, tt_now_us(),
                   st == DLOCK_OK            ? "ok"
                   : st == DLOCK_ERR_TIMEOUT ? "busy"
                                             : "err",
                   0, 0);
        }
    }
    close_handles(w);
}

static void usage(void)
{
    fprintf(stderr, "usage: dlock-torture-client --kind KIND --dir DIR --client N --url URL [--url URL...]\n"
                    "         --resource URL --name NAME[,NAME...] [--lease MS] [--seconds S] [--seed N]\n"
                    "         [--permits P] [--skew MS] [--slow-release MS] [--dlock PATH] [--cli-args ARGS]\n"
                    "         [--mode x|r|p] [--latch-role down|await --latch-n N --round-ms MS --epoch US]\n"
                    "         [--gc-pause-pct P] [--threads N] [--spawned US]\n");
    exit(64);
}

int main(int argc, char **argv)
{
    cfg c = {.lease_ms = 1000, .seconds = 10, .permits = 2, .round_ms = 2000};
    static const struct option opts[] = {
        {"kind", 1, NULL, 'k'},     {"dir", 1, NULL, 'd'},
        {"client", 1, NULL, 'c'},   {"url", 1, NULL, 'u'},
        {"resource", 1, NULL, 'r'}, {"name", 1, NULL, 'n'},
        {"lease", 1, NULL, 'l'},    {"seconds", 1, NULL, 's'},
        {"seed", 1, NULL, 'S'},     {"permits", 1, NULL, 'p'},
        {"skew", 1, NULL, 'K'},     {"slow-release", 1, NULL, 'R'},
        {"dlock", 1, NULL, 'D'},    {"cli-args", 1, NULL, 'A'},
        {"mode", 1, NULL, 'm'},     {"latch-role", 1, NULL, 'L'},
        {"latch-n", 1, NULL, 'N'},  {"round-ms", 1, NULL, 'O'},
        {"epoch", 1, NULL, 'E'},    {"gc-pause-pct", 1, NULL, 'G'},
        {"threads", 1, NULL, 'T'},  {"spawned", 1, NULL, 'P'},
        {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'k': c.kind = optarg; break;
        case 'd': c.dir = optarg; break;
        case 'c': c.client = atoi(optarg); break;
        case 'u':
            if (c.n_urls < MAX_URLS) c.urls[c.n_urls++] = optarg;
            break;
        case 'r': c.resource = optarg; break;
        case 'n': {
            char *copy = strdup(optarg);
            for (char *t = strtok(copy, ","); t && c.n_names < MAX_NAMES; t = strtok(NULL, ","))
                snprintf(c.names[c.n_names++], sizeof c.names[0], "%s", t);
            free(copy);
            break;
        }
        case 'l': c.lease_ms = atol(optarg); break;
        case 's': c.seconds = atol(optarg); break;
        case 'S': c.seed = strtoull(optarg, NULL, 10); break;
        case 'p': c.permits = atol(optarg); break;
        case 'K': c.skew_ms = atol(optarg); break;
        case 'R': c.slow_release_ms = atol(optarg); break;
        case 'D': c.dlock_bin = optarg; break;
        case 'A': c.cli_args = optarg; break;
        case 'm': c.mode_arg = optarg; break;
        case 'L': c.latch_role = optarg; break;
        case 'N': c.latch_n = atol(optarg); break;
        case 'O': c.round_ms = atol(optarg); break;
        case 'E': c.epoch_us = atoll(optarg); break;
        case 'G': c.gc_pause_pct = atol(optarg); break;
        case 'T': c.threads = atoi(optarg); break;
        case 'P': c.spawned_us = atoll(optarg); break;
        default: usage();
        }
    }
    if (!c.kind || !c.dir || !c.resource || c.n_names == 0) usage();
    worker w = {.c = &c, .pid = (int)getpid()};
    w.rng = c.seed ^ ((unsigned long long)w.pid << 32);
    char path[512];
    snprintf(path, sizeof path, "%s/h-%d.log", c.dir, w.pid);
    w.fd = tt_open(path);
    w.res = connect_url(c.resource);
    if (w.fd < 0 || !w.res) {
        fprintf(stderr, "torture client: cannot open %s or reach the resource\n", path);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    int64_t end = tt_now_us() + (int64_t)c.seconds * 1000000;
    if (!strcmp(c.kind, "cs")) run_cs(&w);
    else if (!strcmp(c.kind, "cli")) run_cli(&w, end, argv[0]);
    else if (!strcmp(c.kind, "latch")) run_latch(&w, end);
    else if (c.n_urls > 0) run_locks(&w, end);
    else usage();
    redisFree(w.res);
    close(w.fd);
    return 0;
}
