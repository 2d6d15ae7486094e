/*
 * Global IDs, the order numbers of the flash sale:
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
 * Because of that floor the sequence cannot tell how many IDs a day gave
 * out, so the script also counts them, in "{icr:<prefix>:<yyyy:MM:dd>}:n".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "async.h"
#include "client.h"
#include "dlock_redis.h"
#include "util.h"

#define PREFIX_MAX 64
#define COUNT_MAX 1000000
#define SEQ_MAX 0xffffffffULL
/* Room for "{icr:<prefix>:yyyy:MM:dd}:n" with the longest prefix. */
#define KEY_MAX (PREFIX_MAX + 24)

/* The prefix becomes part of a key: only characters that can neither
 * break the key's layout nor collide with another prefix's day key. */
dlock_status dlock_check_id_prefix(const char *p)
{
    if (!p) return dlock__fail(DLOCK_ERR_INVALID, "ID prefix is NULL");
    size_t len = strnlen(p, PREFIX_MAX + 1);
    if (len == 0 || len > PREFIX_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "ID prefix must be 1 to %d characters", PREFIX_MAX);
    for (size_t i = 0; i < len; i++) {
        char ch = p[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '.' || ch == '-'))
            return dlock__fail(DLOCK_ERR_INVALID, "ID prefix may only hold [A-Za-z0-9_.-]");
    }
    return DLOCK_OK;
}

/* The day's sequence key and its count key. The sequence key has no hash
 * tag, so Cluster hashes its whole name; using that name as the count
 * key's tag puts both in one slot, as a script's keys must be, without
 * renaming the sequence key that existing deployments already hold. */
static void day_keys(const char *prefix, int year, int month, int day, char *seq, char *count, size_t size)
{
#define DAY_KEY "icr:%s:%04d:%02d:%02d"
    snprintf(seq, size, DAY_KEY, prefix, year, month, day);
    snprintf(count, size, "{" DAY_KEY "}:n", prefix, year, month, day);
#undef DAY_KEY
}

/* A date is a key part: only a real calendar day in exactly one spelling,
 * so that "2026-1-5" and "2026-01-05" cannot name two counts of one day. */
static int parse_date(const char *s, int *year, int *month, int *day)
{
    static const int days[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (!s || strlen(s) != 10 || s[4] != '-' || s[7] != '-') return -1;
    for (int i = 0; i < 10; i++)
        if (i != 4 && i != 7 && (s[i] < '0' || s[i] > '9')) return -1;
    *year = atoi(s);
    *month = atoi(s + 5);
    *day = atoi(s + 8);
    int leap = (*year % 4 == 0 && *year % 100 != 0) || *year % 400 == 0;
    if (*month < 1 || *month > 12 || *day < 1 || *day > days[*month - 1]) return -1;
    if (*month == 2 && *day == 29 && !leap) return -1;
    return 0;
}

dlock_status dlock_check_id_date(const char *date)
{
    int y, m, d;
    if (parse_date(date, &y, &m, &d) != 0)
        return dlock__fail(DLOCK_ERR_INVALID, "ID date must be a calendar day written YYYY-MM-DD");
    return DLOCK_OK;
}

dlock_status dlock_id_count(dlock_client *client, const char *prefix, const char *date, uint64_t *count)
{
    if (!client || !count) return dlock__fail(DLOCK_ERR_INVALID, "client or count is NULL");
    dlock_status st = dlock_check_id_prefix(prefix);
    if (st != DLOCK_OK) return st;
    int y, m, d;
    if (date) {
        if ((st = dlock_check_id_date(date)) != DLOCK_OK) return st;
        parse_date(date, &y, &m, &d);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        y = tm.tm_year + 1900;
        m = tm.tm_mon + 1;
        d = tm.tm_mday;
    }
    char seq[KEY_MAX], key[KEY_MAX];
    day_keys(prefix, y, m, d, seq, key, sizeof key);
    const char *argv[2] = {"GET", key};
    redisReply *r = NULL;
    st = dlock_redis_command(client, key, 0, 2, argv, NULL, &r);
    if (st == DLOCK_OK && r->type == REDIS_REPLY_NIL) {
        *count = 0;
    } else if (st == DLOCK_OK) {
        char *end = NULL;
        unsigned long long v = 0;
        if (r->type == REDIS_REPLY_STRING && r->str[0] >= '0' && r->str[0] <= '9') v = strtoull(r->str, &end, 10);
        if (!end || *end != '\0') st = dlock__fail(DLOCK_ERR_REDIS, "ID count %s is not a number", key);
        else *count = v;
    }
    if (r) freeReplyObject(r);
    return st;
}

/* One run of id_next.lua: the keys, the batch size, the counter's floor,
 * and the high half of every ID in the batch. */
typedef struct id_call {
    char key[KEY_MAX], count_key[KEY_MAX], n[24], floor_s[24];
    const char *keys[2], *args[2];
    uint64_t high; /* (seconds since the epoch) << 32 */
    size_t count;
} id_call;

/* Check the arguments and read the clock: DLOCK_OK and *c filled in, or
 * the reason nothing can be asked. */
static dlock_status id_call_make(dlock_client *client, const char *prefix, size_t count, id_call *c)
{
    if (!client) return dlock__fail(DLOCK_ERR_INVALID, "client is NULL");
    if (count == 0 || count > COUNT_MAX) return dlock__fail(DLOCK_ERR_INVALID, "ID count must be 1 to %d", COUNT_MAX);
    dlock_status st = dlock_check_id_prefix(prefix);
    if (st != DLOCK_OK) return st;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    time_t now = ts.tv_sec;
    long long secs = (long long)now - DLOCK_ID_EPOCH;
    if (secs < 0 || secs > 0x7fffffffLL)
        return dlock__fail(DLOCK_ERR_SYS, "system clock is outside the ID range (2022 to 2090)");
    struct tm tm;
    gmtime_r(&now, &tm);
    day_keys(prefix, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, c->key, c->count_key, sizeof c->key);
    snprintf(c->n, sizeof c->n, "%zu", count);
    long long ms_of_day = (long long)(tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec) * 1000 + ts.tv_nsec / 1000000;
    snprintf(c->floor_s, sizeof c->floor_s, "%lld", ms_of_day * 49);
    c->keys[0] = c->key;
    c->keys[1] = c->count_key;
    c->args[0] = c->n;
    c->args[1] = c->floor_s;
    c->high = (uint64_t)secs << 32;
    c->count = count;
    return DLOCK_OK;
}

/* The batch's first ID from the counter's new value `last`: the batch is
 * first .. first + count - 1, consecutive, as the sequence never passes
 * 32 bits (checked here). */
static dlock_status id_first(const id_call *c, long long last, uint64_t *first)
{
    if (last < (long long)c->count || (unsigned long long)last > SEQ_MAX)
        return dlock__fail(DLOCK_ERR_OVERFLOW, "sequence %s reached %lld, past 32 bits", c->key, last);
    *first = c->high | ((uint64_t)last - c->count + 1);
    return DLOCK_OK;
}

dlock_status dlock_id_next(dlock_client *client, const char *prefix, uint64_t *ids, size_t count)
{
    if (!ids) return dlock__fail(DLOCK_ERR_INVALID, "ids is NULL");
    id_call c;
    dlock_status st = id_call_make(client, prefix, count, &c);
    if (st != DLOCK_OK) return st;
    long long last;
    uint64_t first = 0; /* set by id_first(); a Release build's -Wmaybe-uninitialized cannot see it */
    st = dlock__eval_int(client, DLOCK__SCRIPT_ID_NEXT, 2, c.keys, 2, c.args, &last);
    if (st == DLOCK_OK) st = id_first(&c, last, &first);
    if (st != DLOCK_OK) return st;
    for (size_t i = 0; i < count; i++) ids[i] = first + i;
    return DLOCK_OK;
}

/* An asynchronous batch: what its answer needs, kept until it comes. */
typedef struct id_async {
    id_call call;
    dlock_client *client;
    dlock_ids_fn cb;
    void *arg;
} id_async;

static void on_ids(dlock_status st, redisReply *r, void *arg)
{
    id_async *op = arg;
    uint64_t first = 0;
    long long last;
    st = dlock__async_int(st, r, &last);
    if (st == DLOCK_OK) st = id_first(&op->call, last, &first);
    op->cb(op->client, st, st == DLOCK_OK ? first : 0, st == DLOCK_OK ? op->call.count : 0, op->arg);
    free(op);
}

dlock_status dlock_id_next_async(dlock_client *client, const char *prefix, size_t count, dlock_ids_fn cb, void *arg)
{
    if (!cb) return dlock__fail(DLOCK_ERR_INVALID, "callback is NULL");
    id_async *op = malloc(sizeof *op);
    if (!op) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock_status st = id_call_make(client, prefix, count, &op->call);
    if (st == DLOCK_OK) {
        op->client = client;
        op->cb = cb;
        op->arg = arg;
        st = dlock__async_script(client, DLOCK__SCRIPT_ID_NEXT, 2, op->call.keys, 2, op->call.args, on_ids, op);
    }
    if (st != DLOCK_OK) free(op);
    return st;
}
