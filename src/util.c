/* Error messages, clocks, randomness and thread numbers. */
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Per-thread so that concurrent failures never overwrite each other's
 * explanation; errno does the same for the same reason. */
static __thread char last_error[512];

dlock_status dlock__fail(dlock_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

const char *dlock_last_error(void)
{
    return last_error[0] ? last_error : "no error";
}

int64_t dlock__mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dlock__thread_name(const char *name)
{
    pthread_setname_np(pthread_self(), name);
}

int dlock__cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc) return rc;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

/* A monotonic deadline in ms as the absolute time both waits below take. */
static struct timespec deadline_ts(int64_t deadline_ms)
{
    struct timespec ts;
    ts.tv_sec = deadline_ms / 1000;
    ts.tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
    return ts;
}

int dlock__cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms)
{
    if (deadline_ms < 0) return pthread_cond_wait(cond, mu);
    struct timespec ts = deadline_ts(deadline_ms);
    return pthread_cond_timedwait(cond, mu, &ts);
}

int dlock__futex_wait(atomic_uint *word, unsigned seen, int64_t deadline_ms)
{
    struct timespec ts = deadline_ts(deadline_ms < 0 ? 0 : deadline_ms);
    /* FUTEX_WAIT_BITSET takes an absolute time on CLOCK_MONOTONIC. */
    long rc = syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, seen,
                      deadline_ms < 0 ? NULL : &ts, NULL, FUTEX_BITSET_MATCH_ANY);
    return rc < 0 && errno == ETIMEDOUT ? ETIMEDOUT : 0;
}

void dlock__futex_wake(atomic_uint *word)
{
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, INT_MAX, NULL, NULL, 0);
}

dlock_status dlock__random_hex(char *out, size_t nbytes)
{
    unsigned char buf[64];
    if (nbytes > sizeof buf) return dlock__fail(DLOCK_ERR_INVALID, "random id too long");
    size_t got = 0;
    while (got < nbytes) {
        ssize_t n = getrandom(buf + got, nbytes - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return dlock__fail(DLOCK_ERR_SYS, "getrandom: %s", strerror(errno));
        }
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[buf[i] >> 4];
        out[2 * i + 1] = hex[buf[i] & 15];
    }
    out[2 * nbytes] = '\0';
    return DLOCK_OK;
}

unsigned long dlock__thread_number(void)
{
    static atomic_ulong next = 1;
    static __thread unsigned long mine;
    if (!mine) mine = atomic_fetch_add(&next, 1);
    return mine;
}

/* Why a maximum: a script sets its lease after writing the hold (PEXPIRE
 * after HSET), and a lease the server refuses fails the script half-way
 * with the hold written and no expiry: held forever, by an owner that was
 * told it failed. Checking here, before any I/O, is the only safe place. */
dlock_status dlock__check_lease(long lease_ms, long min_ms, int watchdog_ok)
{
    if (watchdog_ok && lease_ms == DLOCK_LEASE_WATCHDOG) return DLOCK_OK;
    if (lease_ms < min_ms || lease_ms > DLOCK_LEASE_MAX_MS)
        return dlock__fail(DLOCK_ERR_INVALID, "lease must be %ld to %ld ms%s", min_ms, DLOCK_LEASE_MAX_MS,
                           watchdog_ok ? ", or DLOCK_LEASE_WATCHDOG" : "");
    return DLOCK_OK;
}

int dlock__poll_fd(int fd, int want_write, int64_t deadline_ms)
{
    for (;;) {
        int64_t left = deadline_ms - dlock__mono_ms();
        if (left <= 0) {
            errno = EAGAIN;
            return -1;
        }
        struct pollfd p = {fd, (short)(want_write ? POLLOUT : POLLIN), 0};
        int n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n > 0) return 0;
        if (n < 0 && errno != EINTR) return -1;
    }
}

int64_t dlock__deadline(long wait_ms)
{
    return wait_ms < 0 ? -1 : dlock__mono_ms() + wait_ms;
}

#define NAME_MAX_LEN 512

/* One rule for every object, public so that tools refuse a bad name
 * before connecting rather than after. */
dlock_status dlock_check_name(const char *name)
{
    if (!name) return dlock__fail(DLOCK_ERR_INVALID, "name is NULL");
    size_t len = strnlen(name, NAME_MAX_LEN + 1);
    if (len == 0) return dlock__fail(DLOCK_ERR_INVALID, "name is empty");
    if (len > NAME_MAX_LEN) return dlock__fail(DLOCK_ERR_INVALID, "name is longer than %d bytes", NAME_MAX_LEN);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch == '{' || ch == '}') return dlock__fail(DLOCK_ERR_INVALID, "name may not contain '{' or '}'");
        if (ch < ' ' || ch == 0x7f) return dlock__fail(DLOCK_ERR_INVALID, "name may not contain control characters");
    }
    return DLOCK_OK;
}

char *dlock__key(const char *name, const char *suffix)
{
    char *k;
    return asprintf(&k, "dlock:{%s}%s", name, suffix) < 0 ? NULL : k;
}

size_t dlock__dec_len(unsigned long long v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

char *dlock__put_dec(char *p, unsigned long long v, size_t digits)
{
    for (size_t i = digits; i > 0; i--) {
        p[i - 1] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + digits;
}

char *dlock__fmt_ull(unsigned long long v, char *out)
{
    *dlock__put_dec(out, v, dlock__dec_len(v)) = '\0';
    return out;
}

char *dlock__fmt_ll(long long v, char *out)
{
    if (v >= 0) return dlock__fmt_ull((unsigned long long)v, out);
    out[0] = '-';
    /* -(v + 1) + 1: no overflow at LLONG_MIN */
    dlock__fmt_ull((unsigned long long)-(v + 1) + 1, out + 1);
    return out;
}

void dlock__atomic_max(atomic_ullong *a, uint64_t v)
{
    unsigned long long old = atomic_load(a);
    while (v > old && !atomic_compare_exchange_weak(a, &old, v)) {}
}
