/*
 * `seckill verify`: read the database and Redis side by side and check the
 * invariants a flash sale must keep. For operators after a sale, for the
 * demo and for the tests.
 *
 *   seckill verify --db URL [--redis URL] --voucher ID [--voucher ID...] [--wait S]
 *                  [--redis-password-file FILE] [--db-password-file FILE]
 *
 * --db and --redis default to SECKILL_DB_URL and SECKILL_REDIS_URL; the
 * passwords as for serve (creds.h).
 *
 * Database, always:
 *   orders <= initial stock, one order per user, stock >= 0 and
 *   stock + orders == initial stock.
 * Redis and the database, when --redis is given and the voucher is warm
 * there, once the order stream is drained (every entry delivered to the
 * writers and acknowledged; waited for up to --wait seconds):
 *   Redis stock == database stock, and the set of Redis buyers equals the
 *   set of users with an order in the database. An order the database
 *   refused (rejected_orders) or a dead letter breaks this, and is meant
 *   to: its buyer was told 201.
 *
 * Exit status: 0 all hold, 1 a breach, 64 usage, 69 the database or
 * Redis cannot be read, 75 the stream did not drain in time (no breach
 * found, but the comparison could not be made).
 */
#include "tools.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/skutil.h"
#include "service/creds.h"
#include "service/keys.h"
#include "service/skredis.h"
#include "store/db.h"

#define VOUCHERS_MAX 256

/* The writers' group on one stream: what is not yet acknowledged. */
typedef struct drain {
    long long len;     /* entries in the stream */
    long long lag;     /* never delivered; -1 unknown */
    long long pending; /* delivered, not acknowledged */
    int group;         /* the group exists */
} drain;

/* One field of an XINFO reply (a flat name/value array). */
static const redisReply *info_field(const redisReply *m, const char *name)
{
    for (size_t i = 0; m && m->type == REDIS_REPLY_ARRAY && i + 1 < m->elements; i += 2)
        if (m->element[i]->type == REDIS_REPLY_STRING && !strcmp(m->element[i]->str, name)) return m->element[i + 1];
    return NULL;
}

/* Lag comes from XINFO GROUPS; when Redis cannot tell it (nil), the
 * group is caught up exactly when its last delivered id is the stream's
 * last id. */
static int read_drain(const sk_redis *p, const char *stream, drain *d)
{
    *d = (drain){0, -1, 0, 0};
    redisReply *r;
    sk_redis_cmd(p, stream, 0, &r, "XLEN", stream, NULL);
    if (!r) return -1;
    if (r->type == REDIS_REPLY_INTEGER) d->len = r->integer;
    freeReplyObject(r);
    if (d->len == 0) {
        d->lag = 0;
        return 0;
    }
    sk_redis_cmd(p, stream, 0, &r, "XINFO", "GROUPS", stream, NULL);
    if (!r) return -1;
    char last[48] = "";
    for (size_t g = 0; r->type == REDIS_REPLY_ARRAY && g < r->elements; g++) {
        const redisReply *m = r->element[g];
        const redisReply *name = info_field(m, "name");
        if (!name || name->type != REDIS_REPLY_STRING || strcmp(name->str, SK_GROUP) != 0) continue;
        d->group = 1;
        const redisReply *l = info_field(m, "lag"), *pe = info_field(m, "pending"),
                         *ld = info_field(m, "last-delivered-id");
        if (l && l->type == REDIS_REPLY_INTEGER) d->lag = l->integer;
        if (pe && pe->type == REDIS_REPLY_INTEGER) d->pending = pe->integer;
        if (ld && ld->type == REDIS_REPLY_STRING) snprintf(last, sizeof last, "%s", ld->str);
    }
    freeReplyObject(r);
    if (!d->group || d->lag >= 0) return 0;
    sk_redis_cmd(p, stream, 0, &r, "XINFO", "STREAM", stream, NULL);
    if (!r) return -1;
    const redisReply *lg = info_field(r, "last-generated-id");
    if (lg && lg->type == REDIS_REPLY_STRING) d->lag = strcmp(lg->str, last) == 0 ? 0 : 1;
    freeReplyObject(r);
    return 0;
}

/* Nothing in the stream that a writer has not acknowledged: an empty
 * stream, or a group with no lag and nothing pending. */
static int drained(const drain *d)
{
    return d->len == 0 || (d->group && d->lag == 0 && d->pending == 0);
}

/* Every member of the buyers set, sorted; SSCAN so a big set does not
 * block the server. */
static int read_buyers(const sk_redis *p, const char *key, int64_t **out, size_t *n)
{
    size_t cap = 1024, len = 0;
    int64_t *a = malloc(cap * sizeof *a);
    char cursor[32] = "0";
    int rc = a ? 0 : -1;
    do {
        redisReply *r = NULL;
        if (rc == 0) sk_redis_cmd(p, key, 0, &r, "SSCAN", key, cursor, "COUNT", "1000", NULL);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (r) freeReplyObject(r);
            rc = -1;
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str ? r->element[0]->str : "0");
        const redisReply *m = r->element[1];
        for (size_t i = 0; m->type == REDIS_REPLY_ARRAY && i < m->elements && rc == 0; i++) {
            if (len == cap) {
                int64_t *b = realloc(a, 2 * cap * sizeof *a);
                if (!b) {
                    rc = -1;
                    break;
                }
                a = b;
                cap *= 2;
            }
            a[len++] = strtoll(m->element[i]->str, NULL, 10);
        }
        freeReplyObject(r);
    } while (rc == 0 && strcmp(cursor, "0") != 0);
    if (rc != 0) {
        free(a);
        return -1;
    }
    sk_sort_i64(a, len);
    *out = a;
    *n = len;
    return 0;
}

/* Members of a[] missing from b[] (both sorted). */
static size_t missing(const int64_t *a, size_t na, const int64_t *b, size_t nb)
{
    size_t i = 0, j = 0, miss = 0;
    while (i < na) {
        if (j == nb || a[i] < b[j]) {
            miss++;
            i++;
        } else if (a[i] == b[j]) {
            i++;
            j++;
        } else {
            j++;
        }
    }
    return miss;
}

/* A plain number from Redis (GET, XLEN); -1 when missing, -2 on error. */
static long long redis_num(const sk_redis *p, const char *cmd, const char *key)
{
    redisReply *r;
    sk_redis_cmd(p, key, 0, &r, cmd, key, NULL);
    if (!r) return -2;
    long long v = -1;
    if (r->type == REDIS_REPLY_INTEGER) v = r->integer;
    else if (r->type == REDIS_REPLY_STRING) v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

/* Checks one voucher and prints one line about it (and one per breach).
 * Returns 0 OK, EXIT_CHECK, EXIT_UNAVAILABLE or EXIT_TEMPFAIL. */
static int verify_one(sk_db *db, const sk_redis *redis, int64_t vid, int wait_s)
{
    char keys[SK_K_COUNT][SK_KEY_MAX];
    sk_voucher_keys(vid, keys);
    drain dr = {0, 0, 0, 0};
    int is_drained = 1;
    if (redis) {
        /* Drain first, then read the database: the writer commits before
         * it acknowledges, so a drained stream is fully in the database. */
        int64_t deadline = sk_mono_ns() + (int64_t)wait_s * 1000000000LL;
        for (;;) {
            if (read_drain(redis, keys[SK_K_ORDERS], &dr) != 0) {
                printf("voucher %lld: Redis unreachable\n", (long long)vid);
                return EXIT_UNAVAILABLE;
            }
            is_drained = drained(&dr);
            if (is_drained || sk_mono_ns() >= deadline) break;
            sk_sleep_ms(100);
        }
    }
    sk_voucher_state st;
    int64_t *uids = NULL;
    size_t nu = 0;
    sk_result r = db->ops->voucher_state(db, vid, &st, &uids, &nu);
    if (r == SK_NO_VOUCHER) {
        printf("voucher %lld: FAIL: not in the database\n", (long long)vid);
        return EXIT_CHECK;
    }
    if (r != SK_OK) {
        printf("voucher %lld: database unreachable (%s)\n", (long long)vid, sk_result_code(r));
        return EXIT_UNAVAILABLE;
    }
    const sk_voucher *v = &st.v;
    char why[8][160];
    int nwhy = 0;
    if (st.orders > v->initial_stock)
        snprintf(why[nwhy++], sizeof why[0], "%lld orders for %lld units (oversold)", (long long)st.orders,
                 (long long)v->initial_stock);
    if (st.users != st.orders)
        snprintf(why[nwhy++], sizeof why[0], "%lld orders from only %lld users", (long long)st.orders,
                 (long long)st.users);
    if (v->stock < 0 || v->stock + st.orders != v->initial_stock)
        snprintf(why[nwhy++], sizeof why[0], "stock %lld + orders %lld != initial %lld", (long long)v->stock,
                 (long long)st.orders, (long long)v->initial_stock);
    printf("voucher %lld: initial %lld, orders %lld (%lld users), stock %lld, rejected %lld", (long long)vid,
           (long long)v->initial_stock, (long long)st.orders, (long long)st.users, (long long)v->stock,
           (long long)st.rejected);
    int rc = 0;
    long long rstock = redis ? redis_num(redis, "GET", keys[SK_K_STOCK]) : -1;
    if (rstock == -2) rc = EXIT_UNAVAILABLE;
    if (redis && rstock == -1) printf(" | Redis: not warm, nothing to compare");
    if (redis && rstock >= 0 && !is_drained) {
        printf(" | Redis: stream not drained after %d s (lag %lld, pending %lld), not compared", wait_s, dr.lag,
               dr.pending);
        rc = EXIT_TEMPFAIL;
    } else if (redis && rstock >= 0) {
        int64_t *rb = NULL;
        size_t nrb = 0;
        long long dead = redis_num(redis, "XLEN", keys[SK_K_DEAD]);
        if (read_buyers(redis, keys[SK_K_BUYERS], &rb, &nrb) != 0 || dead == -2) {
            rc = EXIT_UNAVAILABLE;
        } else {
            size_t lost = missing(rb, nrb, uids, nu), unknown = missing(uids, nu, rb, nrb);
            printf(" | Redis: stock %lld, buyers %zu, stream %lld entries drained, dead letters %lld", rstock, nrb,
                   dr.len, dead < 0 ? 0 : dead);
            if (rstock != v->stock)
                snprintf(why[nwhy++], sizeof why[0], "Redis stock %lld != database stock %lld", rstock,
                         (long long)v->stock);
            if (lost) snprintf(why[nwhy++], sizeof why[0], "%zu Redis buyers have no order in the database", lost);
            if (unknown) snprintf(why[nwhy++], sizeof why[0], "%zu database buyers are not Redis buyers", unknown);
        }
        free(rb);
    }
    free(uids);
    if (rc == EXIT_UNAVAILABLE) printf(" | Redis unreachable");
    printf(": %s\n", nwhy ? "FAIL" : rc ? "UNCHECKED" : "OK");
    for (int i = 0; i < nwhy; i++) printf("  breach: %s\n", why[i]);
    return nwhy ? EXIT_CHECK : rc;
}

/* Every voucher named is checked, even after a breach, so one run reports
 * everything wrong. */
int sk_cmd_verify(int argc, char **argv)
{
    static const struct option longs[] = {
        {"db", required_argument, NULL, 'd'},
        {"redis", required_argument, NULL, 'r'},
        {"voucher", required_argument, NULL, 'v'},
        {"wait", required_argument, NULL, 'w'},
        {"redis-password-file", required_argument, NULL, 'R'},
        {"db-password-file", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *redis_url = sk_env_url("SECKILL_REDIS_URL"), *db_url = sk_env_url("SECKILL_DB_URL");
    const char *redis_pw_file = NULL, *db_pw_file = NULL;
    int64_t ids[VOUCHERS_MAX];
    size_t n = 0;
    uint64_t wait_s = 10;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longs, NULL)) != -1) {
        switch (c) {
        case 'r': redis_url = optarg; break;
        case 'd': db_url = optarg; break;
        case 'R': redis_pw_file = optarg; break;
        case 'D': db_pw_file = optarg; break;
        case 'v':
            if (n == VOUCHERS_MAX || sk_parse_i64(optarg, strlen(optarg), INT64_MAX, &ids[n]) != 0 || !ids[n]) {
                fprintf(stderr, "seckill: bad voucher id \"%s\"\n" SK_HELP_HINT, optarg);
                return EXIT_USAGE;
            }
            n++;
            break;
        case 'w':
            if (sk_parse_u64(optarg, strlen(optarg), 86400, &wait_s) != 0) {
                fprintf(stderr, "seckill: --wait wants 0 to 86400 seconds\n" SK_HELP_HINT);
                return EXIT_USAGE;
            }
            break;
        case 'h': sk_usage(stdout); return 0;
        default:
            sk_opt_error("verify", c, argv);
            fputs(SK_HELP_HINT, stderr);
            return EXIT_USAGE;
        }
    }
    if (optind != argc || !db_url || n == 0) {
        fprintf(stderr, "seckill: verify needs --db URL (or SECKILL_DB_URL) and at least one --voucher ID\n");
        fputs(SK_HELP_HINT, stderr);
        return EXIT_USAGE;
    }
    char err[768];
    sk_passwords pw;
    if (sk_passwords_load(redis_pw_file, db_pw_file, &pw, err, sizeof err) != 0) {
        fprintf(stderr, "seckill: %s\n", err);
        return EXIT_USAGE;
    }
    sk_db *db = NULL;
    dlock_client *client = NULL;
    sk_redis rd, *redis = NULL;
    int opened = sk_db_open(db_url, pw.db, SK_DB_EXISTING, &db, err, sizeof err) == 0 &&
                 (!redis_url || (sk_redis_connect(redis_url, pw.redis, 0, &client, err, sizeof err) == 0 &&
                                 sk_redis_init(&rd, client, redis_url, 0, 0, err, sizeof err) == 0));
    sk_passwords_free(&pw);
    if (!opened) {
        fprintf(stderr, "seckill: %s\n", err);
        if (client) dlock_client_free(client);
        sk_db_close(db);
        return EXIT_UNAVAILABLE;
    }
    if (client) redis = &rd;
    /* The worst outcome wins: a breach over "cannot tell". */
    int worst = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = verify_one(db, redis, ids[i], (int)wait_s);
        if (rc == EXIT_CHECK || (rc && worst != EXIT_CHECK)) worst = rc;
    }
    if (client) dlock_client_free(client);
    sk_db_close(db);
    return worst;
}
