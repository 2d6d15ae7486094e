/*
 * dlock-oversell: the seeds' oversell problem, then its fix.
 *
 *   dlock-oversell [-u URL] [-n STOCK] [-w WORKERS]
 *
 * A voucher has STOCK units. WORKERS processes sell it with the
 * read-modify-write the seeds start from: read the stock, and if it is
 * positive, deduct one. Run twice on the same server:
 *
 *   nolock  the check and the deduction race: two buyers both read "1",
 *           both deduct, and the stock goes negative (oversold);
 *   lock    each check-and-deduct runs under one dlock lock, so exactly
 *           STOCK units sell.
 *
 * A short pause between the read and the deduction stands in for the
 * database round trip of the seeds' service; without it the race is still
 * there, only rarer. The program prints a progress line on stderr and a
 * table on stdout, and exits 0 only if the locked run sold exactly STOCK.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "dlock.h"

#define STOCK_KEY "demo:voucher:stock"
#define SOLD_KEY "demo:voucher:sold"
#define LOCK_NAME "demo:voucher"
#define DB_PAUSE_US 200

/* Monotonic seconds, for the table's time column. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A plain hiredis connection for the stock itself: the demo's "database".
 * The URL was checked by dlock_url_parse, so only the two forms occur. */
static redisContext *connect_plain(const dlock_url *u)
{
    struct timeval tv = {2, 0};
    redisContext *c = u->kind == DLOCK_URL_UNIX ? redisConnectUnixWithTimeout(u->path, tv)
                                                : redisConnectWithTimeout(u->host, u->port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisReply *r = NULL;
    if (u->password)
        r = u->user ? redisCommand(c, "AUTH %s %s", u->user, u->password) : redisCommand(c, "AUTH %s", u->password);
    int ok = !u->password || (r && r->type != REDIS_REPLY_ERROR);
    if (r) freeReplyObject(r);
    if (ok && u->db) {
        r = redisCommand(c, "SELECT %d", u->db);
        ok = r && r->type != REDIS_REPLY_ERROR;
        if (r) freeReplyObject(r);
    }
    if (!ok) {
        redisFree(c);
        return NULL;
    }
    return c;
}

/* Read a counter (absent = 0). Returns 0, or -1 on error: the stock
 * itself goes negative when oversold, so no value can mean "error". */
static int get_int(redisContext *c, const char *key, long long *v)
{
    redisReply *r = redisCommand(c, "GET %s", key);
    int rc = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        *v = strtoll(r->str, NULL, 10);
        rc = 0;
    } else if (r && r->type == REDIS_REPLY_NIL) {
        *v = 0;
        rc = 0;
    }
    if (r) freeReplyObject(r);
    return rc;
}

/* One check-and-deduct, as the seeds' first version does it: read, check,
 * pause (the database round trip), then an unconditional decrement.
 * Returns 1 sold, 0 sold out, -1 error. */
static int sell_one(redisContext *c)
{
    long long stock;
    if (get_int(c, STOCK_KEY, &stock) != 0) return -1;
    if (stock <= 0) return 0;
    usleep(DB_PAUSE_US);
    redisReply *r = redisCommand(c, "DECR %s", STOCK_KEY);
    redisReply *s = r ? redisCommand(c, "INCR %s", SOLD_KEY) : NULL;
    int ok = r && s && r->type == REDIS_REPLY_INTEGER && s->type == REDIS_REPLY_INTEGER;
    if (r) freeReplyObject(r);
    if (s) freeReplyObject(s);
    return ok ? 1 : -1;
}

/* A worker process: sell until the stock reads zero. With `locked`, every
 * check-and-deduct holds the lock. Exits 0, or 1 after printing why. */
static int worker(const char *url, const dlock_url *u, int locked)
{
    redisContext *c = connect_plain(u);
    if (!c) {
        fprintf(stderr, "oversell: worker cannot connect\n");
        return 1;
    }
    dlock_client *client = NULL;
    dlock_lock *lock = NULL;
    if (locked &&
        (dlock_client_new(url, NULL, &client) != DLOCK_OK || dlock_lock_new(client, LOCK_NAME, &lock) != DLOCK_OK)) {
        fprintf(stderr, "oversell: %s\n", dlock_last_error());
        dlock_client_free(client);
        redisFree(c);
        return 1;
    }
    int rc = 0;
    for (;;) {
        if (locked && dlock_lock_acquire(lock, 10000, 5000, NULL) != DLOCK_OK) {
            fprintf(stderr, "oversell: acquire: %s\n", dlock_last_error());
            rc = 1;
            break;
        }
        int sold = sell_one(c);
        if (locked && dlock_lock_release(lock) != DLOCK_OK) {
            fprintf(stderr, "oversell: release: %s\n", dlock_last_error());
            rc = 1;
            break;
        }
        if (sold <= 0) {
            rc = sold < 0;
            break;
        }
    }
    dlock_lock_free(lock);
    dlock_client_free(client);
    redisFree(c);
    return rc;
}

/* Run one phase: reset the stock, fork the workers, show progress until
 * they end. Fills sold and seconds; returns 0 if every worker exited 0. */
static int run_phase(const char *url, const dlock_url *u, redisContext *c, int locked, long stock, int workers,
                     long long *sold, double *seconds)
{
    redisReply *r = redisCommand(c, "MSET %s %ld %s 0", STOCK_KEY, stock, SOLD_KEY);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        if (r) freeReplyObject(r);
        fprintf(stderr, "oversell: cannot set the stock\n");
        return -1;
    }
    freeReplyObject(r);
    fflush(NULL);
    double t0 = now_s();
    pid_t *pids = calloc((size_t)workers, sizeof *pids);
    if (!pids) return -1;
    int failed = 0, started = 0;
    for (int i = 0; i < workers; i++) {
        pid_t p = fork();
        if (p == 0) _exit(worker(url, u, locked));
        if (p < 0) {
            failed = 1;
            break;
        }
        pids[started++] = p;
    }
    int running = started;
    while (running > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            running--;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
            continue;
        }
        if (p < 0 && errno != EINTR) break;
        long long now_sold = 0;
        if (isatty(STDERR_FILENO) && get_int(c, SOLD_KEY, &now_sold) == 0)
            fprintf(stderr, "\r  %-7s sold %lld of %ld, %d workers running   ", locked ? "lock" : "nolock", now_sold,
                    stock, running);
        usleep(100000);
    }
    *seconds = now_s() - t0;
    if (get_int(c, SOLD_KEY, sold) != 0) failed = 1;
    fprintf(stderr, "\r  %-7s sold %lld of %ld, done%24s\n", locked ? "lock" : "nolock", *sold, stock, "");
    free(pids);
    return failed ? -1 : 0;
}

/* Why: a bad option should say what is wrong and how to call us. */
static int usage(const char *msg)
{
    fprintf(stderr, "oversell: %s\nusage: dlock-oversell [-u URL] [-n STOCK] [-w WORKERS]\n", msg);
    return 64;
}

int main(int argc, char **argv)
{
    const char *url = getenv("DLOCK_URL");
    if (!url || !*url) url = "redis://127.0.0.1:6379";
    long stock = 500, workers = 16;
    int opt;
    while ((opt = getopt(argc, argv, "u:n:w:")) != -1) {
        char *end = NULL;
        switch (opt) {
        case 'u': url = optarg; break;
        case 'n':
            stock = strtol(optarg, &end, 10);
            if (*end || stock < 1 || stock > 1000000) return usage("STOCK must be 1..1000000");
            break;
        case 'w':
            workers = strtol(optarg, &end, 10);
            if (*end || workers < 1 || workers > 256) return usage("WORKERS must be 1..256");
            break;
        default: return usage("unknown option");
        }
    }
    if (optind != argc) return usage("unexpected argument");
    dlock_url u;
    if (dlock_url_parse(url, &u) != DLOCK_OK) {
        fprintf(stderr, "oversell: %s\n", dlock_last_error());
        return 64;
    }
    redisContext *c = connect_plain(&u);
    if (!c) {
        fprintf(stderr, "oversell: cannot connect to Redis\n");
        dlock_url_free(&u);
        return 69;
    }
    long long sold[2] = {0, 0};
    double secs[2] = {0, 0};
    int bad = 0;
    fprintf(stderr, "Selling %ld vouchers with %ld worker processes (read, check, deduct):\n", stock, workers);
    for (int locked = 0; locked <= 1 && !bad; locked++)
        bad = run_phase(url, &u, c, locked, stock, (int)workers, &sold[locked], &secs[locked]) != 0;
    long long left = -1;
    if (!bad) bad = get_int(c, STOCK_KEY, &left) != 0;
    redisFree(c);
    dlock_url_free(&u);
    if (bad) {
        fprintf(stderr, "oversell: a worker failed; see above\n");
        return 70;
    }
    printf("\n%-8s %8s %8s %9s %12s\n", "mode", "sold", "oversold", "time_s", "lock_ops/s");
    printf("%-8s %8lld %8lld %9.2f %12s\n", "nolock", sold[0], sold[0] > stock ? sold[0] - stock : 0, secs[0], "-");
    printf("%-8s %8lld %8lld %9.2f %12.0f\n", "lock", sold[1], sold[1] > stock ? sold[1] - stock : 0, secs[1],
           (double)(sold[1] + workers) / secs[1]);
    printf("\nstock left after the locked run: %lld\n", left);
    if (sold[1] != stock || left != 0) {
        printf("FAIL: the locked run sold %lld of %ld\n", sold[1], stock);
        return 1;
    }
    printf("The locked run sold exactly %ld: no oversell.%s\n", stock,
           sold[0] > stock ? " Without the lock it oversold." : "");
    return 0;
}
