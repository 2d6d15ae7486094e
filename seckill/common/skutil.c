/* Small helpers; see skutil.h. */
#include "skutil.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Why so strict: one id must have one spelling, so "007", "+7" and "7 "
 * cannot name the same voucher as "7" in caches, logs or keys. */
int sk_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    if (!s || len == 0 || len > 20) return -1;
    if (len > 1 && s[0] == '0') return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    if (v > max) return -1;
    *out = v;
    return 0;
}

/* The signed form every table column uses (SQLite integers are signed). */
int sk_parse_i64(const char *s, size_t len, int64_t max, int64_t *out)
{
    uint64_t v;
    if (max < 0 || sk_parse_u64(s, len, (uint64_t)max, &v) != 0) return -1;
    *out = (int64_t)v;
    return 0;
}

/* The sale window and token expiry are wall-clock instants. */
int64_t sk_unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec;
}

/* Latencies must not jump when the wall clock is stepped. */
int64_t sk_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Deadlines must not move when the wall clock is stepped either. */
void sk_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

struct timespec sk_mono_timespec(int64_t ns)
{
    return (struct timespec){.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
}

/* Back-off and polling loops sleep through signal interruptions. */
void sk_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* qsort's comparator for sk_sort_i64; written out because a - b overflows. */
static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

void sk_sort_i64(int64_t *a, size_t n)
{
    if (n > 1) qsort(a, n, sizeof *a, cmp_i64);
}

long sk_info_uptime(const char *info)
{
    const char *p = info ? strstr(info, "uptime_in_seconds:") : NULL;
    return p ? strtol(p + 18, NULL, 10) : -1;
}
