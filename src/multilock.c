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

dlock_status dlock_multilock_acquire(dlock_lock *const *locks, size_t n, long wait_ms, long lease_ms,
                                     uint64_t *tokens)
{
    if (!locks || n == 0) return dlock__fail(DLOCK_ERR_INVALID, "multi-lock needs at least one lock");
    if (wait_ms < DLOCK_WAIT_FOREVER)
        return dlock__fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    /* Checked here too, so a bad lease takes no lock at all. */
    dlock_status bad = dlock__check_lease(lease_ms, 3, 1);
    if (bad != DLOCK_OK) return bad;
    for (size_t i = 0; i < n; i++)
        if (!locks[i]) return dlock__fail(DLOCK_ERR_INVALID, "lock %zu is NULL", i);
    size_t *idx = malloc(n * sizeof *idx);
    if (!idx) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    if (order(locks, n, idx) != 0) {
        free(idx);
        return dlock__fail(DLOCK_ERR_INVALID, "multi-lock names the same lock twice");
    }
    int64_t deadline = dlock__deadline(wait_ms);
    dlock_status st;
    for (;;) {
        size_t k = 0;
        st = DLOCK_OK;
        for (; k < n; k++) {
            long left = DLOCK_WAIT_FOREVER;
            if (deadline >= 0) {
                int64_t d = deadline - dlock__mono_ms();
                left = d > 0 ? (long)d : 0;
            }
            uint64_t tok = 0;
            st = dlock_lock_acquire(locks[idx[k]], left, lease_ms, &tok);
            if (st != DLOCK_OK) break;
            if (tokens) tokens[idx[k]] = tok;
        }
        char why[512];
        if (st == DLOCK_OK) {
            size_t gone = 0;
            while (gone < n && !dlock_lock_lost(locks[idx[gone]])) gone++;
            if (gone == n) break;
            /* A lock taken early ran out while a later one was awaited (an
             * explicit lease shorter than the wait, or renewals cut off by
             * a partition): someone may hold it now, with a higher token.
             * Never return that hold: give everything back and start
             * over, as after a server error. */
            st = DLOCK_ERR_LOST;
            snprintf(why, sizeof why, "lock '%s' was lost while the others were taken",
                     dlock_lock_name(locks[idx[gone]]));
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
