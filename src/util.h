/* Private helpers shared by every part of the library: error reporting,
 * clocks, random ids and thread numbers. */
#ifndef DLOCK_UTIL_H
#define DLOCK_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dlock.h"

#if defined(__GNUC__)
#define DLOCK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DLOCK_PRINTF(a, b)
#endif

/* Record a message for dlock_last_error() and return `status`, so failure
 * paths read `return dlock_fail(DLOCK_ERR_X, "...")`. */
dlock_status dlock_fail(dlock_status status, const char *fmt, ...) DLOCK_PRINTF(2, 3);

/* Milliseconds on the monotonic clock. */
int64_t dlock_mono_ms(void);

/* Condition variables in the library wait on the monotonic clock, so wall
 * clock steps never stretch or cut a wait. */
int dlock_cond_init(pthread_cond_t *cond);

/* Wait on `cond` until signalled or until monotonic `deadline_ms` (-1 for
 * no deadline). Returns 0 when signalled, ETIMEDOUT otherwise. */
int dlock_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms);

/* Fill `out` with 2*nbytes hex digits from the OS random source. */
dlock_status dlock_random_hex(char *out, size_t nbytes);

/* A small number naming the calling thread, unique for the process's life
 * (thread ids from the OS are reused; these are not). */
unsigned long dlock_thread_number(void);

/* "dlock:{NAME}SUFFIX", malloc'd; NULL when out of memory. */
char *dlock_key(const char *name, const char *suffix);

/* Check a lease argument: `min_ms` to DLOCK_LEASE_MAX_MS, or
 * DLOCK_LEASE_WATCHDOG when `watchdog_ok`. */
dlock_status dlock_check_lease(long lease_ms, long min_ms, int watchdog_ok);

/* Raise *a to v unless it is larger already. */
void dlock_atomic_max(atomic_ullong *a, uint64_t v);

/* Wait until `fd` is readable (or writable, `want_write`) or the
 * monotonic `deadline_ms` passes: 0 when ready, -1 with errno (EAGAIN
 * when the deadline passed). */
int dlock_poll_fd(int fd, int want_write, int64_t deadline_ms);

/* Deadline for a wait of `wait_ms` (DLOCK_WAIT_FOREVER gives -1). */
int64_t dlock_deadline(long wait_ms);

#endif
