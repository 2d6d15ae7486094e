/*
 * skutil.h -- small helpers shared by the service's files: strict decimal
 * parsing (ids arrive in URLs, tokens and stream entries) and clocks.
 */
#ifndef SECKILL_SKUTIL_H
#define SECKILL_SKUTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Parse exactly `len` bytes of s as a decimal in [0, max]: digits only, no
 * sign, no spaces, no leading zero (except "0" itself). 0 on success. */
int sk_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out);
int sk_parse_i64(const char *s, size_t len, int64_t max, int64_t *out);

/* Sort ascending: buyer lists (binary search in warm-up and verify) and
 * latencies (percentiles in load). */
void sk_sort_i64(int64_t *a, size_t n);

/* Redis's uptime_in_seconds from an INFO reply's text, or -1: the restart
 * grace (strategy_redis.c) and its test read it the same way. */
long sk_info_uptime(const char *info);

/* Unix seconds, wall clock. */
int64_t sk_unix_now(void);

/* Monotonic nanoseconds, for latencies and timeouts. */
int64_t sk_mono_ns(void);

/* A condition variable whose timed waits count on the monotonic clock,
 * and the deadline to give them: sk_mono_ns() time `ns`. */
void sk_cond_init_mono(pthread_cond_t *cv);
struct timespec sk_mono_timespec(int64_t ns);

/* Sleep `ms` milliseconds (restarting on signals). */
void sk_sleep_ms(long ms);

#endif
