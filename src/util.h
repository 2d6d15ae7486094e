/* Private helpers shared by every part of the library: error reporting,
 * clocks, random ids and thread numbers. */
#ifndef DLOCK__UTIL_H
#define DLOCK__UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dlock.h"

#if defined(__GNUC__)
#define DLOCK__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DLOCK__PRINTF(a, b)
#endif

/* Record a message for dlock_last_error() and return `status`, so failure
 * paths read `return dlock__fail(DLOCK_ERR_X, "...")`. */
dlock_status dlock__fail(dlock_status status, const char *fmt, ...) DLOCK__PRINTF(2, 3);

/* Milliseconds on the monotonic clock. */
int64_t dlock__mono_ms(void);

/* Condition variables in the library wait on the monotonic clock, so wall
 * clock steps never stretch or cut a wait. */
int dlock__cond_init(pthread_cond_t *cond);

/* Wait on `cond` until signalled or until monotonic `deadline_ms` (-1 for
 * no deadline). Returns 0 when signalled, ETIMEDOUT otherwise. */
int dlock__cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms);

/* A word one thread sleeps on until another changes it (a Linux futex).
 * Why not a condition variable: its waiter must take the mutex again on
 * waking, which the waker usually still holds, so a wake-up often costs a
 * second sleep and wake on the mutex; a sleeper on a word needs no lock to
 * see why it woke. dlock__futex_wait() returns when *word differs from
 * `seen`, when woken (perhaps spuriously: callers check the word again),
 * or at the monotonic `deadline_ms` (-1: none), with ETIMEDOUT then, else
 * 0. dlock__futex_wake() wakes every sleeper on `word`; it touches no
 * memory, so it may follow the store that lets the sleeper go (and free
 * the word). */
int dlock__futex_wait(atomic_uint *word, unsigned seen, int64_t deadline_ms);
void dlock__futex_wake(atomic_uint *word);

/* Fill `out` with 2*nbytes hex digits from the OS random source. */
dlock_status dlock__random_hex(char *out, size_t nbytes);

/* A small number naming the calling thread, unique for the process's life
 * (thread ids from the OS are reused; these are not). */
unsigned long dlock__thread_number(void);

/* Name the calling thread (15 bytes at most), so that `top -H`, `ps -L`,
 * perf and gdb say which of a program's threads are the library's and
 * what each does, instead of repeating the program's name. */
void dlock__thread_name(const char *name);

/* "dlock:{NAME}SUFFIX", malloc'd; NULL when out of memory. */
char *dlock__key(const char *name, const char *suffix);

/* Check a lease argument: `min_ms` to DLOCK_LEASE_MAX_MS, or
 * DLOCK_LEASE_WATCHDOG when `watchdog_ok`. */
dlock_status dlock__check_lease(long lease_ms, long min_ms, int watchdog_ok);

/* The decimal text of v in out (room for 21 bytes with the NUL); returns
 * out. Why not snprintf: a lock call prints five or six numbers, and
 * printf's machinery took about 6 000 of the 77 000 user-space
 * instructions of a Python lock+release pair (callgrind,
 * measured; CHANGELOG.md). */
char *dlock__fmt_ll(long long v, char *out);
char *dlock__fmt_ull(unsigned long long v, char *out);

/* The same without the NUL, for a writer that sized its buffer first:
 * dlock__dec_len(v) digits of v at p; returns the end. */
size_t dlock__dec_len(unsigned long long v);
char *dlock__put_dec(char *p, unsigned long long v, size_t digits);

/* Raise *a to v unless it is larger already. */
void dlock__atomic_max(atomic_ullong *a, uint64_t v);

/* Wait until `fd` is readable (or writable, `want_write`) or the
 * monotonic `deadline_ms` passes: 0 when ready, -1 with errno (EAGAIN
 * when the deadline passed). */
int dlock__poll_fd(int fd, int want_write, int64_t deadline_ms);

/* Deadline for a wait of `wait_ms` (DLOCK_WAIT_FOREVER gives -1). */
int64_t dlock__deadline(long wait_ms);

#endif
