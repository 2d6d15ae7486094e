/*
 * The warm-up of a voucher; see warm.h. Why from the database minus the
 * stream, and in which order they are read, is explained above
 * sk_redis_warm() below.
 */
#include "warm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/skutil.h"
#include "keys.h"

#define WARM_CHUNK 500

/* A stream entry id "MS-SEQ" as two numbers, for ordering. */
typedef struct xid {
    uint64_t ms, seq;
} xid;

/* Stream ids order by (ms, seq) as numbers, not as strings. */
static int xid_parse(const char *s, xid *out)
{
    char *end;
    out->ms = strtoull(s, &end, 10);
    if (*end != '-') return -1;
    out->seq = strtoull(end + 1, &end, 10);
    return *end ? -1 : 0;
}

/* Which of two entries came first in the stream. */
static int xid_cmp(const xid *a, const xid *b)
{
    if (a->ms != b->ms) return a->ms < b->ms ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* xid_cmp for qsort and bsearch over the pending list. */
static int cmp_xid(const void *a, const void *b)
{
    return xid_cmp(a, b);
}

/* Membership in a sorted buyer list, without a hash set. */
static int has_i64(const int64_t *a, size_t n, int64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] == x) return 1;
        if (a[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

/* A growable array of user ids. */
typedef struct ulist {
    int64_t *a;
    size_t n, cap;
} ulist;

/* Doubling growth: a stream may hold any number of pending orders. */
static int ulist_add(ulist *l, int64_t x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        int64_t *b = realloc(l->a, cap * sizeof *b);
        if (!b) return -1;
        l->a = b;
        l->cap = cap;
    }
    l->a[l->n++] = x;
    return 0;
}

/* What the writers' group has not acknowledged yet: entries after its
 * last-delivered id, and the ids in its pending list (sorted). No group
 * (or no stream) means nothing was ever delivered. */
static sk_result group_state(const sk_redis *redis, const char *stream, xid *last, xid **pel, size_t *npel)
{
    *last = (xid){0, 0};
    *pel = NULL;
    *npel = 0;
    redisReply *r;
    dlock_status st = sk_redis_cmd(redis, stream, 0, &r, "XINFO", "GROUPS", stream, NULL);
    if (st == DLOCK_ERR_REDIS) {
        freeReplyObject(r);
        return SK_OK; /* "no such key": no stream yet, nothing delivered */
    }
    if (st != DLOCK_OK) {
        if (r) freeReplyObject(r);
        return SK_UNAVAILABLE;
    }
    int have_group = 0;
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t g = 0; g < r->elements && !have_group; g++) {
            const redisReply *m = r->element[g];
            const char *name = NULL, *ld = NULL;
            for (size_t i = 0; m->type == REDIS_REPLY_ARRAY && i + 1 < m->elements; i += 2) {
                const redisReply *k = m->element[i], *v = m->element[i + 1];
                if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
                if (!strcmp(k->str, "name")) name = v->str;
                if (!strcmp(k->str, "last-delivered-id")) ld = v->str;
            }
            if (name && ld && !strcmp(name, SK_GROUP) && xid_parse(ld, last) == 0) have_group = 1;
        }
    freeReplyObject(r);
    if (!have_group) return SK_OK;
    if (sk_redis_cmd(redis, stream, 0, &r, "XPENDING", stream, SK_GROUP, "-", "+", "1000000", NULL) != DLOCK_OK) {
        if (r) freeReplyObject(r);
        return SK_UNAVAILABLE;
    }
    sk_result res = SK_OK;
    if (r->type == REDIS_REPLY_ARRAY && r->elements) {
        *pel = malloc(r->elements * sizeof **pel);
        if (!*pel) res = SK_INTERNAL;
        for (size_t i = 0; *pel && i < r->elements; i++) {
            const redisReply *e = r->element[i];
            if (e->type == REDIS_REPLY_ARRAY && e->elements >= 1 && e->element[0]->type == REDIS_REPLY_STRING &&
                xid_parse(e->element[0]->str, &(*pel)[*npel]) == 0)
                (*npel)++;
        }
        if (*pel) qsort(*pel, *npel, sizeof **pel, cmp_xid);
    }
    freeReplyObject(r);
    return res;
}

/* The buyers of the voucher's orders that are in its stream but not yet
 * acknowledged by a writer: accepted (their buyers were told 201) and
 * possibly not yet in the database. Read in chunks with XRANGE. */
static sk_result unacked_buyers(const sk_redis *redis, const char *stream, ulist *out)
{
    xid last, *pel;
    size_t npel;
    sk_result res = group_state(redis, stream, &last, &pel, &npel);
    if (res != SK_OK) return res;
    /* Everything before the oldest pending entry, and up to the last
     * delivered one when nothing is pending, is acknowledged: skip it. */
    char from[48] = "-";
    if (npel) snprintf(from, sizeof from, "%llu-%llu", (unsigned long long)pel[0].ms, (unsigned long long)pel[0].seq);
    else if (last.ms || last.seq)
        snprintf(from, sizeof from, "(%llu-%llu", (unsigned long long)last.ms, (unsigned long long)last.seq);
    for (int more = 1; more && res == SK_OK;) {
        redisReply *r;
        if (sk_redis_cmd(redis, stream, 0, &r, "XRANGE", stream, from, "+", "COUNT", "1000", NULL) != DLOCK_OK) {
            if (r) freeReplyObject(r);
            res = SK_UNAVAILABLE;
            break;
        }
        more = r->type == REDIS_REPLY_ARRAY && r->elements == 1000;
        for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && res == SK_OK; i++) {
            const redisReply *e = r->element[i];
            xid id;
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[0]->type != REDIS_REPLY_STRING ||
                xid_parse(e->element[0]->str, &id) != 0)
                continue;
            snprintf(from, sizeof from, "(%s", e->element[0]->str);
            int unacked = xid_cmp(&id, &last) > 0 || bsearch(&id, pel, npel, sizeof *pel, cmp_xid);
            const redisReply *f = e->element[1];
            for (size_t j = 0; unacked && f->type == REDIS_REPLY_ARRAY && j + 1 < f->elements; j += 2) {
                int64_t uid;
                if (f->element[j]->type == REDIS_REPLY_STRING && !strcmp(f->element[j]->str, "user") &&
                    f->element[j + 1]->type == REDIS_REPLY_STRING &&
                    sk_parse_i64(f->element[j + 1]->str, f->element[j + 1]->len, INT64_MAX, &uid) == 0 &&
                    ulist_add(out, uid) != 0)
                    res = SK_INTERNAL;
            }
        }
        freeReplyObject(r);
    }
    free(pel);
    return res;
}

/*
 * Why warm from the database, minus what the stream still holds: the
 * database is the truth for persisted orders, and the stream for accepted
 * ones that are not persisted yet. After a Redis restart without
 * persistence (or an evicted stock key) the voucher is rebuilt as
 *   stock  = database stock - buyers of unacknowledged stream orders
 *   buyers = database buyers + those buyers
 * so that a unit accepted but not yet persisted is neither sold again
 * nor lost. The stream is read first and the database second, in one
 * snapshot: an order persisted in between is then seen in the database,
 * and its buyer, already there, is not subtracted twice. Buyers go first
 * in chunks, stock last, so the voucher is "warm" only when complete.
 */
sk_result sk_redis_warm(sk_db *db, const sk_redis *redis, dlock_script *script, int64_t voucher_id)
{
    char keys[SK_K_COUNT][SK_KEY_MAX];
    sk_voucher_keys(voucher_id, keys);
    ulist pending = {0};
    sk_result r = unacked_buyers(redis, keys[SK_K_ORDERS], &pending);
    sk_voucher_state st;
    int64_t *uids = NULL;
    size_t n = 0;
    if (r == SK_OK) r = db->ops->voucher_state(db, voucher_id, &st, &uids, &n);
    if (r != SK_OK) {
        free(pending.a);
        return r;
    }
    /* Buyers: the database's (sorted), then pending ones it lacks. */
    sk_sort_i64(pending.a, pending.n);
    int64_t stock = st.v.stock;
    for (size_t i = 0; i < pending.n && r == SK_OK; i++) {
        if (i > 0 && pending.a[i] == pending.a[i - 1]) continue;
        if (has_i64(uids, n, pending.a[i])) continue;
        stock--;
        int64_t *b = realloc(uids, (n + 1) * sizeof *b);
        if (!b) r = SK_INTERNAL;
        else (uids = b)[n++] = pending.a[i];
    }
    free(pending.a);
    if (stock < 0) {
        sk_log(SK_LOG_WARN, "voucher %lld: %lld more orders pending than units left", (long long)voucher_id,
               (long long)-stock);
        stock = 0;
    }
    char stocks[24], begin[24], end[24];
    snprintf(stocks, sizeof stocks, "%lld", (long long)stock);
    snprintf(begin, sizeof begin, "%lld", (long long)st.v.begin);
    snprintf(end, sizeof end, "%lld", (long long)st.v.end);
    const char *keyv[3] = {keys[SK_K_STOCK], keys[SK_K_WINDOW], keys[SK_K_BUYERS]};
    const char *args[4 + WARM_CHUNK];
    char(*ustr)[24] = malloc((n ? n : 1) * sizeof *ustr);
    if (!ustr) r = SK_INTERNAL;
    for (size_t i = 0; ustr && i < n; i++) snprintf(ustr[i], sizeof ustr[i], "%lld", (long long)uids[i]);
    free(uids);
    size_t done = 0;
    while (r == SK_OK) {
        size_t chunk = n - done > WARM_CHUNK ? WARM_CHUNK : n - done;
        int last = done + chunk == n;
        args[0] = stocks;
        args[1] = begin;
        args[2] = end;
        args[3] = last ? "1" : "0";
        for (size_t i = 0; i < chunk; i++) args[4 + i] = ustr[done + i];
        redisReply *rep;
        /* Resent after a lost reply: harmless, the stock is set once. */
        if (dlock_script_eval(script, 0, 3, keyv, 4 + (int)chunk, args, &rep) != DLOCK_OK && !rep) r = SK_UNAVAILABLE;
        else if (rep->type != REDIS_REPLY_INTEGER) {
            SK_LOG_REPEATED(SK_LOG_ERROR, "warm voucher %lld: %s", (long long)voucher_id,
                            rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
            r = SK_INTERNAL;
        }
        if (rep) freeReplyObject(rep);
        done += chunk;
        if (last) break;
    }
    free(ustr);
    return r;
}
