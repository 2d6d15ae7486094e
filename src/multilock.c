/*
 * Multi-lock: hold several locks, possibly on different servers, all or
 * none.
 *
 * Deadlock: two callers asking for {A, B} and {B, A} would each take one
 * and wait forever for the other. Every caller therefore takes the locks
 * in one global order, (server, name), whatever order they were passed
 * in; with a single order nobody can hold a later lock while waiting for
 * an earlier one, so waits cannot form a cycle, and waiting for lock k
 * while holding locks 1..k-1 is safe.
 *
 * Partial failure: if any lock cannot be taken (its wait ran out, or its
 * server failed), every lock taken so far is released before returning or
 * retrying, so the caller never ends up holding part of the set. A server
 * error is retried after a random pause while wait time remains; running
 * out of wait time is reported as DLOCK_ERR_TIMEOUT.
 *
 * A lock taken first can be lost while a later one is awaited. Returning
 * it would hand the caller a hold that someone else may have, under a
 * token lower than theirs (the torture harness's multi scenario caught
 * exactly that under a partition). So the set is checked once complete,
 * and a set with a lost member is given back and taken again, like a
 * server error; with no wait time left the answer is DLOCK_ERR_LOST.
 *
 * The locks are ordinary reentrant locks: each hold belongs to the calling
 * thread, and each is renewed by its own client's watchdog.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "lock.h"
#include "util.h"

/* The server part of the global order: what names one Redis deployment. */
static void server_key(const dlock_lock *l, char *out, size_t size)
{
    dlock__topo_identity(dlock__lock_client(l)->topo, out, size);
}

static int compare_locks(const dlock_lock *a, const dlock_lock *b)
{
    char sa[512], sb[512];
    server_key(a, sa, sizeof sa);
    server_key(b, sb, sizeof sb);
    int c = strcmp(sa, sb);
    return c ? c : strcmp(dlock_lock_name(a), dlock_lock_name(b));
}

/* Sort indices (insertion sort: sets are small) into the global order;
 * -1 when two entries name the same lock, which no order can make safe. */
static int order(dlock_lock *const *locks, size_t n, size_t *idx)
{
    for (size_t i = 0; i < n; i++) {
        size_t j = i;
        while (j > 0 && compare_locks(locks[idx[j - 1]], locks[i]) > 0) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    for (size_t i = 1; i < n; i++)
        if (compare_locks(locks[idx[i - 1]], locks[idx[i]]) == 0) return -1;
    return 0;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The checks both acquires make before taking anything, and the global
 * order of the set into *idx (the caller frees it). */
static dlock_status prepare(dlock_lock *const *locks, size_t n, long wait_ms, long lease_ms, size_t **idx)
{
    if (!locks || n == 0) return dlock__fail(DLOCK_ERR_INVALID, "multi-lock needs at least one lock");
    if (wait_ms < DLOCK_WAIT_FOREVER) return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    /* Checked here too, so a bad lease takes no lock at all. */
    dlock_status bad = dlock__check_lease(lease_ms, 3, 1);
    if (bad != DLOCK_OK) return bad;
    for (size_t i = 0; i < n; i++)
        if (!locks[i]) return dlock__fail(DLOCK_ERR_INVALID, "lock %zu is NULL", i);
    *idx = malloc(n * sizeof **idx);
    if (!*idx) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    if (order(locks, n, *idx) != 0) {
        free(*idx);
        return dlock__fail(DLOCK_ERR_INVALID, "multi-lock names the same lock twice");
    }
    return DLOCK_OK;
}

/* What is left of the wait for the next lock of the set. */
static long wait_left(int64_t deadline)
{
    if (deadline < 0) return DLOCK_WAIT_FOREVER;
    int64_t d = deadline - dlock__mono_ms();
    return d > 0 ? (long)d : 0;
}

/* The first lock of the complete set (in the global order) found lost, or
 * n when none is. */
static size_t first_lost(dlock_lock *const *locks, const size_t *idx, size_t n)
{
    size_t gone = 0;
    while (gone < n && !dlock_lock_lost(locks[idx[gone]])) gone++;
    return gone;
}

/* Why a lost member makes the whole set start over: a lock taken early
 * ran out while a later one was awaited (an explicit lease shorter than
 * the wait, or renewals cut off by a partition), and someone may hold it
 * now with a higher token. That hold is never returned. */
static void lost_why(const dlock_lock *l, char *why, size_t size)
{
    snprintf(why, size, "lock '%s' was lost while the others were taken", dlock_lock_name(l));
}

dlock_status dlock_multilock_acquire(dlock_lock *const *locks, size_t n, long wait_ms, long lease_ms, uint64_t *tokens)
{
    size_t *idx;
    dlock_status st = prepare(locks, n, wait_ms, lease_ms, &idx);
    if (st != DLOCK_OK) return st;
    int64_t deadline = dlock__deadline(wait_ms);
    for (;;) {
        size_t k = 0;
        st = DLOCK_OK;
        for (; k < n; k++) {
            uint64_t tok = 0;
            st = dlock_lock_acquire(locks[idx[k]], wait_left(deadline), lease_ms, &tok);
            if (st != DLOCK_OK) break;
            if (tokens) tokens[idx[k]] = tok;
        }
        char why[512];
        if (st == DLOCK_OK) {
            size_t gone = first_lost(locks, idx, n);
            if (gone == n) break;
            /* Give everything back and start over, as after a server
             * error (see lost_why()). */
            st = DLOCK_ERR_LOST;
            lost_why(locks[idx[gone]], why, sizeof why);
        } else {
            snprintf(why, sizeof why, "lock '%s': %s", dlock_lock_name(locks[idx[k]]), dlock_last_error());
        }
        while (k > 0) dlock_lock_release(locks[idx[--k]]);
        int64_t now = dlock__mono_ms();
        if (st == DLOCK_ERR_TIMEOUT || st == DLOCK_ERR_INVALID || st == DLOCK_ERR_NOMEM ||
            (deadline >= 0 && now >= deadline) || wait_ms == 0) {
            st = dlock__fail(st, "multi-lock: %s", why);
            break;
        }
        /* A server failed: give it a moment, then start over. */
        char hex[3] = "00";
        dlock__random_hex(hex, 1);
        long pause = 20 + (long)(strtoul(hex, NULL, 16) % 100);
        if (deadline >= 0 && deadline - now < pause) pause = (long)(deadline - now);
        pause_ms(pause);
    }
    free(idx);
    return st;
}

dlock_status dlock_multilock_release(dlock_lock *const *locks, size_t n)
{
    if (!locks || n == 0) return dlock__fail(DLOCK_ERR_INVALID, "multi-lock needs at least one lock");
    dlock_status first = DLOCK_OK;
    char why[512] = "";
    for (size_t i = n; i-- > 0;) {
        dlock_status st = locks[i] ? dlock_lock_release(locks[i]) : DLOCK_ERR_INVALID;
        if (st != DLOCK_OK && first == DLOCK_OK) {
            first = st;
            snprintf(why, sizeof why, "lock '%s': %s", locks[i] ? dlock_lock_name(locks[i]) : "(null)",
                     dlock_last_error());
        }
    }
    if (first != DLOCK_OK) return dlock__fail(first, "multi-lock release: %s", why);
    return DLOCK_OK;
}

/*
 * The asynchronous multi-lock walks the same global order with
 * dlock_lock_acquire_async(), one lock at a time, each started by the
 * callback of the one before, so no thread waits for any of them. A
 * failure gives back what was taken, the last first, each release started
 * by the callback of the one after it.
 *
 * It differs from the synchronous walk in one thing: it does not start
 * over after a server error. A library thread may not sleep out the
 * pause, and without one a refused connection would be retried at once,
 * without end; so it ends with the error, the set given back, and the
 * caller's loop, which has timers, decides when to try again. A lost
 * member starts it over at once: the lost lock is another's now (the wait
 * for it is woken by that holder's release) or free.
 */
typedef struct ml_async {
    dlock_lock **locks; /* the set, in the caller's order (a copy) */
    size_t *idx;        /* the global order */
    size_t n, k;        /* the locks; how many of them are taken */
    long wait_ms, lease_ms;
    int64_t deadline;
    uint64_t *tokens; /* the caller's, or NULL */
    dlock_status st;  /* the failure being given back, or a release's first */
    char why[512];
    dlock_multilock_fn cb;
    void *arg;
} ml_async;

static ml_async *ml_new(dlock_lock *const *locks, size_t n, size_t *idx, dlock_multilock_fn cb, void *arg)
{
    ml_async *a = calloc(1, sizeof *a);
    dlock_lock **copy = malloc(n * sizeof *copy);
    if (!a || !copy) {
        free(a);
        free(copy);
        return NULL;
    }
    memcpy(copy, locks, n * sizeof *copy);
    a->locks = copy;
    a->idx = idx;
    a->n = n;
    a->cb = cb;
    a->arg = arg;
    return a;
}

static void ml_free(ml_async *a)
{
    free(a->idx);
    free(a->locks);
    free(a);
}

/* The end of either call: the message of a failure is set on the thread
 * that runs the callback, as for every asynchronous call. */
static void ml_end(ml_async *a, dlock_status st, const char *what)
{
    if (st != DLOCK_OK) st = dlock__fail(st, "%s: %s", what, a->why);
    dlock_multilock_fn cb = a->cb;
    void *arg = a->arg;
    ml_free(a);
    cb(st, arg);
}

static void ml_note(ml_async *a, dlock_status st, const dlock_lock *l)
{
    a->st = st;
    snprintf(a->why, sizeof a->why, "lock '%s': %s", dlock_lock_name(l), dlock_last_error());
}

static void ml_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg);
static void ml_given_back(dlock_lock *l, dlock_status st, void *arg);

static dlock_status ml_take_next(ml_async *a)
{
    return dlock_lock_acquire_async(a->locks[a->idx[a->k]], wait_left(a->deadline), a->lease_ms, ml_acquired, a);
}

/* Give back the locks taken, the last first; then end, or start over
 * after a lost member while wait time remains. A release that does not
 * start (the hold was already lost, or its client is draining) has
 * nothing to wait for. */
static void ml_give_back(ml_async *a)
{
    while (a->k > 0) {
        if (dlock_lock_release_async(a->locks[a->idx[a->k - 1]], ml_given_back, a) == DLOCK_OK) return;
        a->k--;
    }
    if (a->st == DLOCK_ERR_LOST && a->wait_ms != 0 && (a->deadline < 0 || dlock__mono_ms() < a->deadline)) {
        dlock_status st = ml_take_next(a);
        if (st == DLOCK_OK) return;
        ml_note(a, st, a->locks[a->idx[0]]);
    }
    ml_end(a, a->st, "multi-lock");
}

static void ml_given_back(dlock_lock *l, dlock_status st, void *arg)
{
    (void)l;
    (void)st; /* as in the synchronous walk: a failed give-back is the lease's to end */
    ml_async *a = arg;
    a->k--;
    ml_give_back(a);
}

static void ml_acquired(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    ml_async *a = arg;
    if (st == DLOCK_OK) {
        if (a->tokens) a->tokens[a->idx[a->k]] = token;
        if (++a->k == a->n) {
            size_t gone = first_lost(a->locks, a->idx, a->n);
            if (gone == a->n) {
                ml_end(a, DLOCK_OK, NULL);
                return;
            }
            a->st = DLOCK_ERR_LOST;
            lost_why(a->locks[a->idx[gone]], a->why, sizeof a->why);
            ml_give_back(a);
            return;
        }
        if ((st = ml_take_next(a)) == DLOCK_OK) return;
        l = a->locks[a->idx[a->k]];
    }
    ml_note(a, st, l);
    ml_give_back(a);
}

dlock_status dlock_multilock_acquire_async(dlock_lock *const *locks, size_t n, long wait_ms, long lease_ms,
                                           uint64_t *tokens, dlock_multilock_fn cb, void *arg)
{
    if (!cb) return dlock__fail(DLOCK_ERR_INVALID, "callback is NULL");
    size_t *idx;
    dlock_status st = prepare(locks, n, wait_ms, lease_ms, &idx);
    if (st != DLOCK_OK) return st;
    ml_async *a = ml_new(locks, n, idx, cb, arg);
    if (!a) {
        free(idx);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    a->wait_ms = wait_ms;
    a->lease_ms = lease_ms;
    a->deadline = dlock__deadline(wait_ms);
    a->tokens = tokens;
    st = ml_take_next(a);
    if (st != DLOCK_OK) ml_free(a);
    return st;
}

static void ml_released(dlock_lock *l, dlock_status st, void *arg);

/* Start the next release, from the last of the caller's order to the
 * first: 1 when one started, 0 when none is left. A release that does not
 * start counts as its failure. */
static int ml_release_start(ml_async *a)
{
    while (a->k > 0) {
        dlock_lock *l = a->locks[--a->k];
        dlock_status st = dlock_lock_release_async(l, ml_released, a);
        if (st == DLOCK_OK) return 1;
        if (a->st == DLOCK_OK) ml_note(a, st, l);
    }
    return 0;
}

static void ml_released(dlock_lock *l, dlock_status st, void *arg)
{
    ml_async *a = arg;
    if (st != DLOCK_OK && a->st == DLOCK_OK) ml_note(a, st, l);
    if (!ml_release_start(a)) ml_end(a, a->st, "multi-lock release");
}

dlock_status dlock_multilock_release_async(dlock_lock *const *locks, size_t n, dlock_multilock_fn cb, void *arg)
{
    if (!locks || n == 0 || !cb) return dlock__fail(DLOCK_ERR_INVALID, "multi-lock or callback is NULL");
    for (size_t i = 0; i < n; i++)
        if (!locks[i]) return dlock__fail(DLOCK_ERR_INVALID, "lock %zu is NULL", i);
    ml_async *a = ml_new(locks, n, NULL, cb, arg);
    if (!a) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    a->k = n;
    /* Releases that do not start before the first that does are answered
     * here: when none starts, cb will not run. */
    if (ml_release_start(a)) return DLOCK_OK;
    dlock_status st = dlock__fail(a->st, "multi-lock release: %s", a->why);
    ml_free(a);
    return st;
}
