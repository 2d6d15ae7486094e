/*
 * Global IDs against real servers (one server, Sentinel or
 * Cluster: target.h): unique across processes and
 * batch sizes, the high half is the second since DLOCK_ID_EPOCH, the
 * sequence key carries the UTC date (not the local one), bad prefixes and
 * counts are refused without touching Redis, a day's sequence that
 * would pass 32 bits gives DLOCK_ERR_OVERFLOW and never a wrong ID, and
 * dlock_id_count() tells exactly how many IDs a day handed out. Batches
 * asked for asynchronously, many in flight from one thread, are
 * consecutive and never overlap each other or the synchronous ones.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "target.h"
#include "th_lock.h"

static th_target server;

static dlock_client *new_client(void)
{
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(server.url, NULL, &c), DLOCK_OK);
    return c;
}

/* The wall clock the library reads (time() may lag it by a tick of the
 * coarse clock, and disagree at a second's boundary). */
static time_t wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec;
}

/* "icr:PREFIX:YYYY:MM:DD" for the UTC date of `t`. */
static void utc_key(char *out, size_t n, const char *prefix, time_t t)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(out, n, "icr:%s:%04d:%02d:%02d", prefix, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
}

/* Today's UTC date as dlock_id_count() takes it, "YYYY-MM-DD". */
static void utc_date(char *out, size_t n)
{
    time_t t = wall_s();
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, n, "%Y-%m-%d", &tm);
}

/* A one-key command (its key the argument) answered by an integer; with no
 * argument, "DBSIZE": keys on all masters together. */
static long long redis_int(const char *fmt, const char *arg)
{
    return arg ? th_lock_int(&server, NULL, fmt, arg) : th_target_keys(&server, "*", NULL, 0);
}

#define SENTINEL 0x5eed5eed5eed5eedULL

static void fill_sentinel(uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) ids[i] = SENTINEL;
}

static int all_sentinel(const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] != SENTINEL) return 0;
    return 1;
}

/* Four processes take 2000 IDs each in batches of 1 to 250 and add them to
 * one Redis set: 8000 IDs must make a set of 8000. Within a batch IDs are
 * consecutive. If INCRBY did not reserve a whole batch atomically (say,
 * INCR per ID, or GET then SET), batches would overlap and the set would
 * be smaller. */
static void ids_are_unique_across_processes_and_batches(void **state)
{
    (void)state;
    enum { CHILDREN = 4, PER_CHILD = 2000 };
    static const size_t sizes[] = {1, 7, 250, 1, 64, 3, 128, 1, 33};
    char day_before[96], day_after[96];
    utc_key(day_before, sizeof day_before, "uniq", wall_s());
    for (int i = 0; i < CHILDREN; i++) {
        if (fork() == 0) {
            dlock_client *c = NULL;
            redisContext *rc = th_target_connect(&server, "{uniq}set");
            if (dlock_client_new(server.url, NULL, &c) != DLOCK_OK || !rc) _exit(2);
            uint64_t ids[250];
            char strs[250][24];
            const char *argv[252];
            size_t done = 0, k = 0;
            while (done < PER_CHILD) {
                size_t n = sizes[(k++ + (size_t)i) % (sizeof sizes / sizeof *sizes)];
                if (n > PER_CHILD - done) n = PER_CHILD - done;
                if (dlock_id_next(c, "uniq", ids, n) != DLOCK_OK) _exit(3);
                argv[0] = "SADD";
                argv[1] = "{uniq}set";
                for (size_t j = 0; j < n; j++) {
                    if (j > 0 && ids[j] != ids[j - 1] + 1) _exit(4); /* batch not consecutive */
                    snprintf(strs[j], sizeof strs[j], "%llu", (unsigned long long)ids[j]);
                    argv[2 + j] = strs[j];
                }
                redisReply *r = redisCommandArgv(rc, (int)n + 2, argv, NULL);
                if (!r || r->type != REDIS_REPLY_INTEGER) _exit(5);
                freeReplyObject(r);
                r = redisCommand(rc, "INCRBY {uniq}total %lld", (long long)n);
                if (!r) _exit(6);
                freeReplyObject(r);
                done += n;
            }
            redisFree(rc);
            dlock_client_free(c);
            _exit(0);
        }
    }
    for (int i = 0; i < CHILDREN; i++) {
        int st;
        assert_true(wait(&st) > 0);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    utc_key(day_after, sizeof day_after, "uniq", wall_s());
    assert_int_equal(redis_int("GET %s", "{uniq}total"), CHILDREN * PER_CHILD);
    assert_int_equal(redis_int("SCARD %s", "{uniq}set"), CHILDREN * PER_CHILD);
    if (strcmp(day_before, day_after) == 0) assert_true(redis_int("GET %s", day_before) >= CHILDREN * PER_CHILD);
}

/* Milliseconds since UTC midnight, times 49: the floor id_next.lua puts
 * under the day's sequence. */
static long long seq_floor_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((long long)(ts.tv_sec % 86400) * 1000 + ts.tv_nsec / 1000000) * 49;
}

/* The high 32 bits are the seconds since 2022-01-01 UTC of the call, the
 * low 32 bits the day's sequence: a batch is consecutive, later batches
 * are higher, and the sequence is at least 49 per millisecond of the UTC
 * day. An ID built from local time, from milliseconds, or with the halves
 * swapped fails the bounds below. */
static void id_high_half_is_seconds_since_the_epoch(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    uint64_t ids[5], more[2];
    long long floor_before = seq_floor_now();
    long long before = (long long)wall_s() - DLOCK_ID_EPOCH;
    assert_int_equal(dlock_id_next(c, "epoch", ids, 5), DLOCK_OK);
    assert_int_equal(dlock_id_next(c, "epoch", more, 2), DLOCK_OK);
    long long after = (long long)wall_s() - DLOCK_ID_EPOCH;
    assert_true(before > 0);
    for (int i = 0; i < 5; i++) {
        long long hi = (long long)(ids[i] >> 32);
        assert_true(hi >= before && hi <= after);
        if (i > 0) assert_true(ids[i] == ids[i - 1] + 1);
    }
    long long floor_after = seq_floor_now();
    if (floor_after > floor_before) { /* not across UTC midnight */
        assert_true((long long)(ids[0] & 0xffffffffULL) > floor_before);
        assert_true((long long)(more[1] & 0xffffffffULL) <= floor_after + 7);
    }
    assert_true((more[0] >> 32) >= (ids[4] >> 32) && (long long)(more[1] >> 32) <= after);
    assert_true((more[0] & 0xffffffffULL) > (ids[4] & 0xffffffffULL));
    assert_true(more[1] == more[0] + 1);
    /* IDs of one prefix only ever grow within a day. */
    assert_true(more[0] > ids[4]);
    /* The sign bit stays clear: IDs fit a signed 64-bit column. */
    assert_true((int64_t)more[1] > 0);
    /* Another prefix has its own sequence. */
    uint64_t other;
    assert_int_equal(redis_int("EXISTS %s", "icr:epoch2:never"), 0);
    assert_int_equal(dlock_id_next(c, "epoch2", &other, 1), DLOCK_OK);
    assert_true((other & 0xffffffffULL) <= (uint64_t)seq_floor_now() + 1);
    dlock_client_free(c);
}

/* A restart without persistence loses the day's counter. IDs made right
 * after it, in the same second as IDs made right before, must still be
 * new: the counter starts again above its millisecond floor, past every
 * value handed out before at rates under 49,000 IDs a second. The day's
 * count is lost with it, as documented: it restarts from the IDs made
 * since. */
static void ids_do_not_repeat_and_the_count_restarts_after_redis_loses_the_counter(void **state)
{
    (void)state;
    th_target_require_single(&server);
    enum { N = 200, M = 30 };
    uint64_t a[N], b[N], count = 0;
    dlock_client *c = new_client();
    char day_before[16], day_after[16];
    utc_date(day_before, sizeof day_before);
    assert_int_equal(dlock_id_next(c, "restart", a, N), DLOCK_OK);
    assert_int_equal(dlock_id_count(c, "restart", day_before, &count), DLOCK_OK);
    assert_int_equal(count, N);
    assert_int_equal(th_redis_restart(&server.single), 0);
    dlock_status st = dlock_id_next(c, "restart", b, M);
    if (st != DLOCK_OK) st = dlock_id_next(c, "restart", b, M); /* the pool's first try may find the old socket */
    assert_int_equal(st, DLOCK_OK);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < M; j++)
            if (a[i] == b[j]) fail_msg("ID %llu handed out before and after the restart", (unsigned long long)a[i]);
    if ((a[0] >> 32) == (b[0] >> 32)) assert_true(b[0] > a[N - 1]);
    utc_date(day_after, sizeof day_after);
    assert_int_equal(dlock_id_count(c, "restart", day_after, &count), DLOCK_OK);
    if (strcmp(day_before, day_after) == 0) assert_int_equal(count, M);
    dlock_client_free(c);
}

/* The day's count is exact where the sequence is not (it starts at the
 * millisecond floor): 1 after one ID, then every batch adds its size, for
 * today by date or by NULL, in a key beside the sequence, in its Cluster
 * slot (else the script would fail there with CROSSSLOT). Another day and
 * another prefix count nothing; a batch refused for overflow counts
 * nothing either. Retried if UTC midnight passes meanwhile. */
static void id_count_is_the_number_of_ids_handed_out_today(void **state)
{
    (void)state;
    static const size_t batches[] = {1, 250, 7, 1, 1000, 41};
    static const char *const prefixes[] = {"tally", "tally2", "tally3"};
    dlock_client *c = new_client();
    char day[16], day2[16], seq_key[96], count_key[104], pattern[32];
    uint64_t ids[1000], count = 99, total = 0;
    const char *prefix = NULL;
    for (int attempt = 0; attempt < 3; attempt++) {
        prefix = prefixes[attempt];
        utc_date(day, sizeof day);
        utc_key(seq_key, sizeof seq_key, prefix, wall_s());
        assert_int_equal(dlock_id_count(c, prefix, day, &count), DLOCK_OK);
        assert_int_equal(count, 0);
        total = 0;
        for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) {
            assert_int_equal(dlock_id_next(c, prefix, ids, batches[i]), DLOCK_OK);
            total += batches[i];
            assert_int_equal(dlock_id_count(c, prefix, NULL, &count), DLOCK_OK);
            if (i == 0) assert_int_equal(count, 1);
            assert_int_equal(count, total);
        }
        /* A sequence near 2^32: the refused batch is not counted. */
        redisReply *r = th_target_cmd(&server, seq_key, "SET %s %s", seq_key, "4294967290");
        assert_non_null(r);
        freeReplyObject(r);
        assert_int_equal(dlock_id_next(c, prefix, ids, 10), DLOCK_ERR_OVERFLOW);
        assert_int_equal(dlock_id_count(c, prefix, day, &count), DLOCK_OK);
        utc_date(day2, sizeof day2);
        if (strcmp(day, day2) == 0) break;
    }
    assert_int_equal(count, total);
    snprintf(count_key, sizeof count_key, "{%s}:n", seq_key);
    assert_int_equal(redis_int("GET %s", count_key), (long long)total);
    char first[128];
    snprintf(pattern, sizeof pattern, "{icr:%s:*", prefix);
    assert_int_equal(th_target_keys(&server, pattern, first, sizeof first), 1);
    assert_string_equal(first, count_key);
    /* Other days and prefixes have counts of their own. */
    assert_int_equal(dlock_id_count(c, "tally", "2023-02-28", &count), DLOCK_OK);
    assert_int_equal(count, 0);
    assert_int_equal(dlock_id_count(c, "never-used", NULL, &count), DLOCK_OK);
    assert_int_equal(count, 0);
    dlock_client_free(c);
}

/* Dates are calendar days in one spelling, prefixes as for dlock_id_next:
 * anything else is DLOCK_ERR_INVALID before Redis is asked, and *count is
 * left alone. A count key that is not a number is a Redis error. */
static void id_count_refuses_bad_dates_and_prefixes(void **state)
{
    (void)state;
    static const char *const bad[] = {"",           "2024-1-05",  "2024-01-5",   "20240105",    "2024/01/05",
                                      "2024-13-01", "2024-00-10", "2024-01-00",  "2024-01-32",  "2023-02-29",
                                      "2100-02-29", "2024-04-31", "2024-01-05x", " 2024-01-05", "+024-01-05",
                                      "2024-0a-05"};
    static const char *const good[] = {"2024-02-29", "2000-02-29", "2024-12-31", "2022-01-01"};
    dlock_client *c = new_client();
    uint64_t count = 77;
    long long calls = th_target_calls(&server, "get");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (dlock_id_count(c, "dates", bad[i], &count) != DLOCK_ERR_INVALID) fail_msg("date '%s' accepted", bad[i]);
        assert_int_equal(dlock_check_id_date(bad[i]), DLOCK_ERR_INVALID);
        assert_non_null(strstr(dlock_last_error(), "YYYY-MM-DD"));
    }
    assert_int_equal(dlock_check_id_date(NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_id_count(c, "a:b", NULL, &count), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_id_count(c, "dates", NULL, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_id_count(NULL, "dates", NULL, &count), DLOCK_ERR_INVALID);
    assert_int_equal(count, 77);
    assert_int_equal(th_target_calls(&server, "get"), calls);
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        assert_int_equal(dlock_check_id_date(good[i]), DLOCK_OK);
        assert_int_equal(dlock_id_count(c, "dates", good[i], &count), DLOCK_OK);
        assert_int_equal(count, 0);
    }
    redisReply *r = th_target_cmd(&server, "{icr:dates:2024:02:29}:n", "SET %s %s", "{icr:dates:2024:02:29}:n", "x1");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(dlock_id_count(c, "dates", "2024-02-29", &count), DLOCK_ERR_REDIS);
    dlock_client_free(c);
}

/* The sequence key is "icr:PREFIX:YYYY:MM:DD" with the UTC date. The test
 * moves the process's local time zone so that the local date differs from
 * the UTC date right now (UTC-12 in the UTC morning, UTC+14 in the UTC
 * afternoon); a key built with localtime() would land on the other date. */
static void id_sequence_key_carries_the_utc_date(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    time_t now = wall_s();
    struct tm utc;
    gmtime_r(&now, &utc);
    char *old_tz = getenv("TZ") ? strdup(getenv("TZ")) : NULL;
    setenv("TZ", utc.tm_hour < 12 ? "WEST+12" : "EAST-14", 1);
    tzset();

    char key_before[96], key_after[96], local_key[96];
    uint64_t ids[4];
    int attempts = 0;
    do { /* retried only if UTC midnight passes during the call */
        utc_key(key_before, sizeof key_before, "utcday", wall_s());
        assert_int_equal(dlock_id_next(c, "utcday", ids, 4), DLOCK_OK);
        now = wall_s();
        utc_key(key_after, sizeof key_after, "utcday", now);
    } while (strcmp(key_before, key_after) != 0 && ++attempts < 3);
    struct tm local;
    localtime_r(&now, &local);
    snprintf(local_key, sizeof local_key, "icr:utcday:%04d:%02d:%02d", local.tm_year + 1900, local.tm_mon + 1,
             local.tm_mday);

    if (old_tz) setenv("TZ", old_tz, 1);
    else unsetenv("TZ");
    tzset();
    free(old_tz);

    assert_string_not_equal(key_after, local_key); /* the time zone trick worked */
    assert_int_equal(redis_int("EXISTS %s", key_after), 1);
    if (attempts == 0) assert_int_equal(redis_int("GET %s", key_after), (long long)(ids[3] & 0xffffffffULL));
    assert_int_equal(redis_int("EXISTS %s", local_key), 0);
    char only[96];
    assert_int_equal(th_target_keys(&server, "icr:utcday:*", only, sizeof only), 1);
    assert_string_equal(only, key_after);
    /* The key has the documented shape, e.g. icr:utcday:2025:03:07. */
    assert_int_equal(strlen(key_after), strlen("icr:utcday:YYYY:MM:DD"));
    dlock_client_free(c);
}

/* Prefixes outside 1..64 characters of [A-Za-z0-9_.-] are refused before
 * anything is sent: no key appears and the output array is untouched. A
 * ':' or '{' would let one prefix collide with another's key or break the
 * Cluster hash tag. */
static void bad_prefixes_are_refused_and_write_nothing(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    char long65[66], long64[65];
    memset(long65, 'p', 65);
    long65[65] = '\0';
    memset(long64, 'q', 64);
    long64[64] = '\0';
    memcpy(long64, "Az09_.-", 7);
    const char *bad[] = {"",    long65, "a:b",         "a{b",  "a}b",  "a b",   "a*b",
                         "a/b", "a?b",  "caf\xc3\xa9", "a\nb", "a\tb", "a\x7f", NULL};
    long long keys_before = redis_int("DBSIZE", NULL);
    uint64_t ids[3];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        fill_sentinel(ids, 3);
        dlock_status st = dlock_id_next(c, bad[i], ids, 3);
        if (st != DLOCK_ERR_INVALID) fail_msg("prefix #%zu accepted (status %d)", i, st);
        assert_true(all_sentinel(ids, 3));
        assert_non_null(strstr(dlock_last_error(), "prefix"));
    }
    assert_int_equal(redis_int("DBSIZE", NULL), keys_before);
    /* 64 characters of every allowed class is fine. */
    assert_int_equal(dlock_id_next(c, long64, ids, 3), DLOCK_OK);
    /* The day's sequence and its count. */
    assert_int_equal(redis_int("DBSIZE", NULL), keys_before + 2);
    char key[128], count_key[136];
    utc_key(key, sizeof key, long64, wall_s());
    assert_int_equal(redis_int("EXISTS %s", key), 1);
    snprintf(count_key, sizeof count_key, "{%s}:n", key);
    assert_int_equal(redis_int("GET %s", count_key), 3);
    dlock_client_free(c);
}

/* A count of 0 or above 1,000,000, or a NULL array or client, is an
 * invalid argument and reserves nothing; 1,000,000 itself works and is one
 * gap-free run. */
static void bad_counts_are_refused_and_the_maximum_works(void **state)
{
    (void)state;
    enum { MAX = 1000000 };
    dlock_client *c = new_client();
    uint64_t ids[2];
    char key[96];
    fill_sentinel(ids, 2);
    assert_int_equal(dlock_id_next(c, "counts", ids, 0), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_last_error(), "count"));
    assert_int_equal(dlock_id_next(c, "counts", ids, MAX + 1), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_id_next(c, "counts", ids, (size_t)-1), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_id_next(c, "counts", NULL, 1), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_id_next(NULL, "counts", ids, 1), DLOCK_ERR_INVALID);
    assert_true(all_sentinel(ids, 2));
    assert_int_equal(th_target_keys(&server, "icr:counts:*", NULL, 0), 0);

    uint64_t *big = malloc(MAX * sizeof *big);
    assert_non_null(big);
    time_t t0 = wall_s();
    assert_int_equal(dlock_id_next(c, "counts", big, MAX), DLOCK_OK);
    for (size_t i = 1; i < MAX; i++)
        if (big[i] != big[i - 1] + 1) fail_msg("ids %zu and %zu not consecutive", i - 1, i);
    utc_key(key, sizeof key, "counts", t0);
    if (wall_s() / 86400 == t0 / 86400)
        assert_int_equal(redis_int("GET %s", key), (long long)(big[MAX - 1] & 0xffffffffULL));
    free(big);
    dlock_client_free(c);
}

/* Set today's sequence to `start`, then ask for `n` IDs; retried if UTC
 * midnight passes in between (a new day's key would start at 1). */
static dlock_status ids_after(dlock_client *c, const char *prefix, const char *start, uint64_t *ids, size_t n)
{
    char key[96], key2[96];
    dlock_status st;
    for (int attempt = 0;; attempt++) {
        utc_key(key, sizeof key, prefix, wall_s());
        redisReply *r = th_target_cmd(&server, key, "SET %s %s", key, start);
        assert_non_null(r);
        freeReplyObject(r);
        st = dlock_id_next(c, prefix, ids, n);
        utc_key(key2, sizeof key2, prefix, wall_s());
        if (strcmp(key, key2) == 0 || attempt == 2) return st;
    }
}

/* The last sequence number of a day is 2^32-1. Reaching it exactly works;
 * passing it gives DLOCK_ERR_OVERFLOW and leaves ids[] untouched, instead
 * of IDs whose sequence spilled into the seconds half (which would repeat
 * IDs of a later second). */
static void sequence_past_32_bits_overflows_without_ids(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    uint64_t ids[5];

    /* 4294967293 + 2 = 4294967295: the last two IDs of the day. */
    fill_sentinel(ids, 5);
    assert_int_equal(ids_after(c, "ovf", "4294967293", ids, 2), DLOCK_OK);
    assert_int_equal(ids[0] & 0xffffffffULL, 4294967294ULL);
    assert_int_equal(ids[1] & 0xffffffffULL, 4294967295ULL);
    assert_int_equal(ids[1] >> 32, ids[0] >> 32);
    /* One more is too many. */
    fill_sentinel(ids, 5);
    assert_int_equal(dlock_id_next(c, "ovf", ids, 1), DLOCK_ERR_OVERFLOW);
    assert_true(all_sentinel(ids, 5));
    assert_non_null(strstr(dlock_last_error(), "32 bits"));

    /* 4294967295 - 2, then 5: only 2 would fit, so none are given. */
    fill_sentinel(ids, 5);
    assert_int_equal(ids_after(c, "ovf", "4294967293", ids, 5), DLOCK_ERR_OVERFLOW);
    assert_true(all_sentinel(ids, 5));
    /* Still overflowing on later calls: never wraps back to small numbers. */
    assert_int_equal(dlock_id_next(c, "ovf", ids, 1), DLOCK_ERR_OVERFLOW);
    assert_true(all_sentinel(ids, 5));

    /* A sequence someone set negative is raised to the floor: IDs above
     * it, never small or negative sequence numbers. */
    long long floor = seq_floor_now();
    assert_int_equal(ids_after(c, "ovf", "-10", ids, 3), DLOCK_OK);
    if (seq_floor_now() >= floor) assert_true((long long)(ids[0] & 0xffffffffULL) > floor);
    fill_sentinel(ids, 5);
    /* A non-number in the key is a Redis error, not IDs. */
    assert_int_equal(ids_after(c, "ovf", "abc", ids, 3), DLOCK_ERR_REDIS);
    assert_true(all_sentinel(ids, 5));
    dlock_client_free(c);
}

/* The batches asynchronous calls brought, for the test's thread. */
typedef struct batches {
    pthread_mutex_t mu;
    int n, failed;
    uint64_t first[64];
    size_t count[64];
} batches;

static void on_ids(dlock_client *c, dlock_status st, uint64_t first, size_t count, void *arg)
{
    (void)c;
    batches *b = arg;
    pthread_mutex_lock(&b->mu);
    if (st != DLOCK_OK || count == 0) {
        b->failed++;
    } else {
        b->first[b->n] = first;
        b->count[b->n] = count;
    }
    b->n++;
    pthread_mutex_unlock(&b->mu);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* 64 batches of 1 to 64 IDs asked for at once from one thread, with
 * synchronous ones between: each asynchronous batch is the count it asked
 * for, and no ID is handed out twice. Bad arguments are refused at once,
 * with no callback. */
static void async_batches_in_flight_together_never_overlap(void **state)
{
    (void)state;
    enum { N = 64 };
    dlock_client *c = new_client();
    batches b = {PTHREAD_MUTEX_INITIALIZER, 0, 0, {0}, {0}};
    uint64_t sync_ids[N * 3];
    for (int i = 0; i < N; i++) {
        assert_int_equal(dlock_id_next_async(c, "async", (size_t)(i % 64) + 1, on_ids, &b), DLOCK_OK);
        if (i % 3 == 0) assert_int_equal(dlock_id_next(c, "async", sync_ids + (i / 3) * 3, 3), DLOCK_OK);
    }
    assert_int_equal(dlock_id_next_async(c, "bad prefix", 1, on_ids, &b), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_id_next_async(c, "async", 0, on_ids, &b), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_id_next_async(c, "async", 1, NULL, &b), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_id_next_async(NULL, "async", 1, on_ids, &b), DLOCK_ERR_INVALID);
    for (int i = 0; i < 5000; i++) {
        pthread_mutex_lock(&b.mu);
        int n = b.n;
        pthread_mutex_unlock(&b.mu);
        if (n >= N) break;
        usleep(1000);
    }
    usleep(50000); /* no callback of a refused call comes late */
    assert_int_equal(b.n, N);
    assert_int_equal(b.failed, 0);
    size_t total = (N + 2) / 3 * 3, k = 0;
    for (int i = 0; i < N; i++) total += b.count[i];
    uint64_t *all = malloc(total * sizeof *all);
    assert_non_null(all);
    for (int i = 0; i < N; i++) {
        size_t want = 0;
        for (int j = 0; j < N; j++) want += b.count[j] == (size_t)(i % 64) + 1;
        assert_int_equal(want, 1); /* each size came back once */
        for (size_t j = 0; j < b.count[i]; j++) all[k++] = b.first[i] + j;
    }
    for (int i = 0; i < (N + 2) / 3 * 3; i++) all[k++] = sync_ids[i];
    qsort(all, total, sizeof *all, cmp_u64);
    for (size_t i = 1; i < total; i++)
        if (all[i] == all[i - 1]) fail_msg("ID %llu handed out twice", (unsigned long long)all[i]);
    free(all);
    dlock_client_free(c);
}

/* Through a completion queue, a batch's first ID is the completion's
 * token: the next synchronous batch comes after its four. */
static void a_queued_batch_carries_its_first_id(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    dlock_queue *q;
    assert_int_equal(dlock_queue_new(&q), DLOCK_OK);
    void *t = dlock_queue_ticket(q, 9);
    assert_non_null(t);
    assert_int_equal(dlock_id_next_async(c, "queued", 4, dlock_queue_on_ids, t), DLOCK_OK);
    struct pollfd p = {dlock_queue_fd(q), POLLIN, 0};
    assert_int_equal(poll(&p, 1, 5000), 1);
    dlock_completion got;
    assert_int_equal(dlock_queue_take(q, &got, 1), 1);
    assert_int_equal(got.key, 9);
    assert_int_equal(got.status, DLOCK_OK);
    uint64_t next;
    assert_int_equal(dlock_id_next(c, "queued", &next, 1), DLOCK_OK);
    assert_true(got.token > 0);
    assert_true(next > got.token + 3); /* past the batch (the day's floor may have risen further) */
    dlock_queue_free(q);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ids_are_unique_across_processes_and_batches),
        cmocka_unit_test(async_batches_in_flight_together_never_overlap),
        cmocka_unit_test(a_queued_batch_carries_its_first_id),
        cmocka_unit_test(id_high_half_is_seconds_since_the_epoch),
        cmocka_unit_test(id_sequence_key_carries_the_utc_date),
        cmocka_unit_test(bad_prefixes_are_refused_and_write_nothing),
        cmocka_unit_test(bad_counts_are_refused_and_the_maximum_works),
        cmocka_unit_test(sequence_past_32_bits_overflows_without_ids),
        cmocka_unit_test(id_count_is_the_number_of_ids_handed_out_today),
        cmocka_unit_test(id_count_refuses_bad_dates_and_prefixes),
        cmocka_unit_test(ids_do_not_repeat_and_the_count_restarts_after_redis_loses_the_counter),
    };
    return th_target_run_suite(tests, &server);
}
