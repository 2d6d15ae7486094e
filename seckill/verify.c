/*
 * `seckill verify`: read the database and Redis side by side and check the
 * invariants a flash sale must keep. For operators after a sale, and for
 * the tests.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "db.h"
#include "keys.h"
#include "rpool.h"
#include "skutil.h"

/* Read a voucher's Redis view: stock (-1 when not warm), buyers, the
 * writers' group lag and pending count, and dead letters. */
static int redis_view(sk_rpool *p, int64_t vid, long long *stock, long long *buyers, long long *lag,
                      long long *pending, long long *dead)
{
    char keys[SK_K_COUNT][SK_KEY_MAX];
    sk_voucher_keys(vid, keys);
    *stock = -1;
    *buyers = *lag = *pending = *dead = 0;
    redisReply *r = sk_rpool_cmd(p, 1, "GET %s", keys[SK_K_STOCK]);
    if (!r) return -1;
    if (r->type == REDIS_REPLY_STRING) *stock = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    r = sk_rpool_cmd(p, 1, "SCARD %s", keys[SK_K_BUYERS]);
    if (!r) return -1;
    if (r->type == REDIS_REPLY_INTEGER) *buyers = r->integer;
    freeReplyObject(r);
    r = sk_rpool_cmd(p, 1, "XLEN %s", keys[SK_K_DEAD]);
    if (!r) return -1;
    if (r->type == REDIS_REPLY_INTEGER) *dead = r->integer;
    freeReplyObject(r);
    r = sk_rpool_cmd(p, 1, "XINFO GROUPS %s", keys[SK_K_ORDERS]);
    if (!r) return -1;
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t g = 0; g < r->elements; g++) {
            const redisReply *m = r->element[g];
            int ours = 0;
            long long l = 0, pe = 0;
            for (size_t i = 0; m->type == REDIS_REPLY_ARRAY && i + 1 < m->elements; i += 2) {
                const redisReply *k = m->element[i], *v = m->element[i + 1];
                if (k->type != REDIS_REPLY_STRING) continue;
                if (!strcmp(k->str, "name") && v->type == REDIS_REPLY_STRING) ours = !strcmp(v->str, SK_GROUP);
                if (!strcmp(k->str, "lag") && v->type == REDIS_REPLY_INTEGER) l = v->integer;
                if (!strcmp(k->str, "pending") && v->type == REDIS_REPLY_INTEGER) pe = v->integer;
            }
            if (ours) {
                *lag = l;
                *pending = pe;
            }
        }
    freeReplyObject(r);
    return 0;
}

/*
 * The invariants, per voucher:
 *   database: sold + stock == initial stock (so nothing oversold; the
 *             schema already forbids duplicates and negative stock);
 *   Redis:    stock >= 0 and stock + buyers == initial stock when warmed
 *             fresh (every unit taken has exactly one buyer);
 *   both, once the writer has drained the stream (lag and pending 0):
 *             every Redis buyer is in the database as an order, a
 *             rejection or a dead letter, i.e. no accepted order was lost.
 */
int sk_cmd_verify(int argc, char **argv)
{
    static const struct option longs[] = {
        {"redis", required_argument, NULL, 'r'},
        {"db", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *redis_url = NULL, *db_url = DEFAULT_DB;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'r': redis_url = optarg; break;
        case 'd': db_url = optarg; break;
        case 'h': sk_usage(stdout); return 0;
        default: sk_usage(stderr); return EXIT_USAGE;
        }
    }
    size_t n = 0, cap = 4096;
    int64_t *ids = calloc(cap, sizeof *ids);
    if (!ids) return 1;
    for (int i = optind; i < argc; i++) {
        if (n == cap || sk_parse_i64(argv[i], strlen(argv[i]), INT64_MAX, &ids[n]) != 0) {
            fprintf(stderr, "seckill: bad voucher id \"%s\"\n", argv[i]);
            free(ids);
            return EXIT_USAGE;
        }
        n++;
    }
    char err[512];
    sk_db *db = NULL;
    sk_rpool *redis = NULL;
    if (sk_db_open(db_url, &db, err, sizeof err) != 0 ||
        (redis_url && sk_rpool_new(redis_url, 5000, &redis, err, sizeof err) != 0)) {
        fprintf(stderr, "seckill: %s\n", err);
        sk_db_close(db);
        free(ids);
        return 1;
    }
    if (n == 0 && db->ops->voucher_ids(db, INT64_MIN, ids, cap, &n) != SK_OK) {
        fprintf(stderr, "seckill: cannot list vouchers\n");
        n = 0;
    }
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        sk_voucher v;
        int64_t sold = 0, rejected = 0;
        if (db->ops->voucher_get(db, ids[i], &v) != SK_OK ||
            db->ops->voucher_sold(db, ids[i], &sold, &rejected) != SK_OK) {
            printf("voucher %lld: not found\n", (long long)ids[i]);
            bad = 1;
            continue;
        }
        int ok = sold + v.stock == v.initial_stock && sold <= v.initial_stock;
        printf("voucher %lld: initial %lld sold %lld stock %lld rejected %lld", (long long)v.id,
               (long long)v.initial_stock, (long long)sold, (long long)v.stock, (long long)rejected);
        if (redis) {
            long long rs, buyers, lag, pending, dead;
            if (redis_view(redis, v.id, &rs, &buyers, &lag, &pending, &dead) != 0) {
                printf(" | redis unreachable");
                ok = 0;
            } else if (rs < 0) {
                printf(" | redis not warm");
            } else {
                printf(" | redis stock %lld buyers %lld lag %lld pending %lld dead %lld", rs, buyers, lag,
                       pending, dead);
                if (rs + buyers != v.initial_stock) ok = 0;
                if (lag == 0 && pending == 0 && buyers > sold + rejected + dead) ok = 0;
            }
        }
        printf(": %s\n", ok ? "OK" : "FAIL");
        if (!ok) bad = 1;
    }
    sk_rpool_free(redis);
    sk_db_close(db);
    free(ids);
    return bad ? 1 : 0;
}

