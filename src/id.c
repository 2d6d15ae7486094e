/*
 * Global IDs (seed 000 section 1):
 *
 *     (seconds since 2022-01-01T00:00:00Z) << 32 | INCRBY icr:<prefix>:<yyyy:MM:dd>
 *
 * Uniqueness does not depend on clocks agreeing between hosts: two IDs
 * with the same high half were made in the same second, hence on the same
 * UTC date, hence from the same counter, which never hands out a value
 * twice. The seed formats the date in local time but the seconds in UTC;
 * here both are UTC, so hosts in different time zones share one counter a
 * day. The sign bit stays clear until 2090. id_next.lua floors the counter
 * at 49 per millisecond of the day, so that a counter lost in a restart
 * does not hand out the same sequence values again (see the script).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "util.h"

#define PREFIX_MAX 64
#define COUNT_MAX 1000000
#define SEQ_MAX 0xffffffffULL

/* The prefix becomes part of a key: only characters that can neither
 * break the key's layout nor collide with another prefix's day key. */
dlock_status dlock_check_id_prefix(const char *p)
{
    if (!p) return dlock_fail(DLOCK_ERR_INVALID, "ID prefix is NULL");
    size_t len = strnlen(p, PREFIX_MAX + 1);
    if (len == 0 || len > PREFIX_MAX)
        return dlock_fail(DLOCK_ERR_INVALID, "ID prefix must be 1 to %d characters", PREFIX_MAX);
    for (size_t i = 0; i < len; i++) {
        char ch = p[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-'))
            return dlock_fail(DLOCK_ERR_INVALID, "ID prefix may only hold [A-Za-z0-9_.-]");
    }
    return DLOCK_OK;
}

dlock_status dlock_id_next(dlock_client *client, const char *prefix, uint64_t *ids, size_t count)
{
    if (!client || !ids) return dlock_fail(DLOCK_ERR_INVALID, "client or ids is NULL");
    if (count == 0 || count > COUNT_MAX)
        return dlock_fail(DLOCK_ERR_INVALID, "ID count must be 1 to %d", COUNT_MAX);
    dlock_status st = dlock_check_id_prefix(prefix);
    if (st != DLOCK_OK) return st;

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    time_t now = ts.tv_sec;
    long long secs = (long long)now - DLOCK_ID_EPOCH;
    if (secs < 0 || secs > 0x7fffffffLL)
        return dlock_fail(DLOCK_ERR_SYS, "system clock is outside the ID range (2022 to 2090)");
    struct tm tm;
    gmtime_r(&now, &tm);
    char key[PREFIX_MAX + 32], n[24];
    snprintf(key, sizeof key, "icr:%s:%04d:%02d:%02d", prefix, tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday);
    snprintf(n, sizeof n, "%zu", count);
    long long ms_of_day = (long long)(tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec) * 1000 + ts.tv_nsec / 1000000;
    char floor_s[24];
    snprintf(floor_s, sizeof floor_s, "%lld", ms_of_day * 49);

    const char *keys[1] = {key};
    const char *args[2] = {n, floor_s};
    long long last;
    st = dlock_eval_int(client, DLOCK_SCRIPT_ID_NEXT, 1, keys, 2, args, &last);
    if (st != DLOCK_OK) return st;
    if (last < (long long)count || (unsigned long long)last > SEQ_MAX)
        return dlock_fail(DLOCK_ERR_OVERFLOW, "sequence %s reached %lld, past 32 bits", key, last);
    uint64_t first = (uint64_t)last - count + 1;
    for (size_t i = 0; i < count; i++) ids[i] = (uint64_t)secs << 32 | (first + i);
    return DLOCK_OK;
}
