/*
 * The order writer under failure, with real processes: `seckill serve` is
 * made to die (test hooks that _exit) right before a batch's commit and
 * right after it (before XACK), then started again; orders must appear
 * exactly once either way, through the same consumer's pending list or
 * through XAUTOCLAIM by a new consumer. Poison entries (unparseable, or
 * delivered too often) must go to the dead-letter stream and not block
 * the rest. A Redis restart without persistence must re-warm the voucher
 * from the database, so earlier buyers are still refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sk_test.h"

static th_redis srv;

static int setup(void **state)
{
    (void)state;
    return th_redis_start(&srv, NULL);
}

static int teardown(void **state)
{
    (void)state;
    skt_kill_all();
    th_redis_stop(&srv);
    return 0;
}

/* Each test has its own database, whose voucher ids start at 1 again:
 * start from an empty Redis too. */
static void flush(void)
{
    redisReply *r = th_redis_cmd(&srv, "FLUSHALL");
    assert_non_null(r);
    freeReplyObject(r);
}

static long long now_s(void)
{
    return (long long)time(NULL);
}

static long long count_sql(const skt_dir *d, const char *fmt, long long v)
{
    char sql[256];
    snprintf(sql, sizeof sql, fmt, v);
    return skt_db_int(d, sql);
}

static long long wait_sql(const skt_dir *d, const char *fmt, long long v, long long want)
{
    char sql[256];
    snprintf(sql, sizeof sql, fmt, v);
    return skt_db_wait(d, sql, want, 10000);
}

static long long wait_pending(long long voucher, long long want)
{
    long long deadline = th_now_ms() + 10000, p;
    while ((p = skt_pending(&srv, voucher)) != want && th_now_ms() < deadline) usleep(20000);
    return p;
}

static int metric(int port, const char *name)
{
    char resp[65536];
    if (skt_http(port, "GET", "/metrics", NULL, NULL, resp, sizeof resp) != 200) return -1;
    const char *p = strstr(resp, name);
    return p ? atoi(p + strlen(name)) : -1;
}

#define ORDERS_OF "SELECT count(*) FROM orders WHERE voucher_id = %lld"

/*
 * Die at `hook` ("BEFORE" or "AFTER" the commit) while persisting one
 * order, restart as the same consumer (pending list) or as another one
 * (XAUTOCLAIM), and check the order exists exactly once.
 */
static void crash_and_recover(const char *hook, int same_consumer)
{
    flush();
    skt_dir dir;
    skt_serve sv;
    assert_int_equal(skt_dir_make(&dir), 0);
    char hook_env[64];
    snprintf(hook_env, sizeof hook_env, "SECKILL_TEST_CRASH_%s_COMMIT=1", hook);
    const char *env1[] = {hook_env, "SECKILL_CONSUMER=first", NULL};
    assert_int_equal(skt_serve_start(&sv, &dir, &srv, "redis", NULL, env1), 0);
    long long v = skt_voucher(sv.port, &dir, "crash", 10, now_s() - 5, now_s() + 3600);
    assert_true(v > 0);
    char path[96], tok[256], resp[1024];
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);
    skt_token(&dir, 7, 0, tok, sizeof tok);
    /* The 201 races the writer's _exit; the stream is what counts. */
    int st = skt_http(sv.port, "POST", path, tok, NULL, resp, sizeof resp);
    assert_true(st == 201 || st == -1);
    int code = skt_serve_wait(&sv, 10000);
    assert_int_equal(code, strcmp(hook, "BEFORE") == 0 ? 98 : 99);
    assert_int_equal(skt_redis_int(&srv, "XLEN seckill:{v:%lld}:orders", v), 1);
    assert_int_equal(skt_pending(&srv, v), 1);
    assert_int_equal(count_sql(&dir, ORDERS_OF, v), strcmp(hook, "BEFORE") == 0 ? 0 : 1);

    const char *env2[] = {same_consumer ? "SECKILL_CONSUMER=first" : "SECKILL_CONSUMER=second",
                          "SECKILL_CLAIM_IDLE_MS=200", NULL};
    assert_int_equal(skt_serve_start(&sv, &dir, &srv, "redis", NULL, env2), 0);
    assert_int_equal(wait_pending(v, 0), 0);
    assert_int_equal(wait_sql(&dir, ORDERS_OF, v, 1), 1);
    assert_int_equal(count_sql(&dir, "SELECT count(*) FROM rejected_orders WHERE voucher_id = %lld", v), 0);
    assert_int_equal(count_sql(&dir, "SELECT stock FROM vouchers WHERE id = %lld", v), 9);
    /* After a crash past the commit, the redelivery was recognised. */
    if (strcmp(hook, "AFTER") == 0)
        assert_int_equal(metric(sv.port, "seckill_writer_orders_total{outcome=\"duplicate\"} "), 1);
    else
        assert_int_equal(metric(sv.port, "seckill_writer_orders_total{outcome=\"created\"} "), 1);
    /* The buyer sees the order as created, and cannot order again. */
    char oid[32];
    snprintf(oid, sizeof oid, "%lld", count_sql(&dir, "SELECT id FROM orders WHERE voucher_id = %lld", v));
    char opath[96];
    snprintf(opath, sizeof opath, "/api/orders/%s", oid);
    assert_int_equal(skt_http(sv.port, "GET", opath, tok, NULL, resp, sizeof resp), 200);
    assert_string_equal(skt_json_str(resp, "status"), "created");
    assert_int_equal(skt_http(sv.port, "POST", path, tok, NULL, resp, sizeof resp), 409);
    assert_int_equal(skt_serve_stop(&sv), 0);
    skt_dir_remove(&dir);
}

static void test_crash_before_commit_same_consumer(void **state)
{
    (void)state;
    crash_and_recover("BEFORE", 1);
}

static void test_crash_before_commit_new_consumer(void **state)
{
    (void)state;
    crash_and_recover("BEFORE", 0);
}

static void test_crash_after_commit_same_consumer(void **state)
{
    (void)state;
    crash_and_recover("AFTER", 1);
}

static void test_crash_after_commit_new_consumer(void **state)
{
    (void)state;
    crash_and_recover("AFTER", 0);
}

static void xadd(long long v, const char *const *fields, int n)
{
    redisContext *c = th_redis_connect(&srv);
    assert_non_null(c);
    const char *argv[16];
    char key[64];
    snprintf(key, sizeof key, "seckill:{v:%lld}:orders", v);
    argv[0] = "XADD";
    argv[1] = key;
    argv[2] = "*";
    for (int i = 0; i < n; i++) argv[3 + i] = fields[i];
    redisReply *r = redisCommandArgv(c, 3 + n, argv, NULL);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    freeReplyObject(r);
    redisFree(c);
}

/* The reason field of the dead-letter entry at `index`. */
static void dead_reason(long long v, size_t index, char *out, size_t cap)
{
    out[0] = '\0';
    redisReply *r = th_redis_cmd(&srv, "XRANGE seckill:{v:%lld}:dead - +", v);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ARRAY && index < r->elements) {
        redisReply *f = r->element[index]->element[1];
        for (size_t i = 0; i + 1 < f->elements; i += 2)
            if (strcmp(f->element[i]->str, "reason") == 0) snprintf(out, cap, "%s", f->element[i + 1]->str);
    }
    freeReplyObject(r);
}

static void test_poison_messages(void **state)
{
    (void)state;
    flush();
    skt_dir dir;
    skt_serve sv;
    assert_int_equal(skt_dir_make(&dir), 0);
    const char *env[] = {"SECKILL_CLAIM_IDLE_MS=200", "SECKILL_MAX_DELIVERIES=3", NULL};
    assert_int_equal(skt_serve_start(&sv, &dir, &srv, "redis", NULL, env), 0);
    long long v = skt_voucher(sv.port, &dir, "poison", 10, now_s() - 5, now_s() + 3600);
    assert_true(v > 0);
    /* Let the writer find the stream, then stop it to stage a redelivery. */
    assert_int_equal(wait_pending(v, 0), 0);
    assert_int_equal(skt_serve_stop(&sv), 0);

    char vs[24];
    snprintf(vs, sizeof vs, "%lld", v);
    /* Delivered 10 times already to a consumer that died. */
    const char *good1[] = {"order", "4000000001", "user", "901", "voucher", vs};
    xadd(v, good1, 6);
    redisReply *r = th_redis_cmd(&srv, "XREADGROUP GROUP seckill-writers ghost COUNT 10 STREAMS "
                                       "seckill:{v:%lld}:orders >", v);
    assert_non_null(r);
    freeReplyObject(r);
    r = th_redis_cmd(&srv, "XPENDING seckill:{v:%lld}:orders seckill-writers - + 10", v);
    assert_non_null(r);
    assert_int_equal(r->elements, 1);
    char id[64];
    snprintf(id, sizeof id, "%s", r->element[0]->element[0]->str);
    freeReplyObject(r);
    r = th_redis_cmd(&srv, "XCLAIM seckill:{v:%lld}:orders seckill-writers ghost 0 %s RETRYCOUNT 10", v, id);
    assert_non_null(r);
    freeReplyObject(r);
    /* Delivered once to the dead consumer: must still be persisted. */
    const char *good2[] = {"order", "4000000002", "user", "902", "voucher", vs};
    xadd(v, good2, 6);
    r = th_redis_cmd(&srv, "XREADGROUP GROUP seckill-writers ghost COUNT 10 STREAMS seckill:{v:%lld}:orders >", v);
    assert_non_null(r);
    freeReplyObject(r);

    assert_int_equal(skt_serve_start(&sv, &dir, &srv, "redis", NULL, env), 0);
    /* New entries that can never be persisted. */
    const char *bad_num[] = {"order", "abc", "user", "903", "voucher", vs};
    xadd(v, bad_num, 6);
    const char *missing[] = {"user", "904", "voucher", vs};
    xadd(v, missing, 4);
    const char *wrong_v[] = {"order", "4000000005", "user", "905", "voucher", "999"};
    xadd(v, wrong_v, 6);
    /* A good one behind them. */
    const char *good3[] = {"order", "4000000006", "user", "906", "voucher", vs};
    xadd(v, good3, 6);

    assert_int_equal(wait_sql(&dir, ORDERS_OF, v, 2), 2);
    assert_int_equal(wait_pending(v, 0), 0);
    assert_int_equal(count_sql(&dir, "SELECT count(*) FROM orders WHERE id IN (4000000002, 4000000006) AND %lld", 1),
                     2);
    assert_int_equal(skt_redis_int(&srv, "XLEN seckill:{v:%lld}:dead", v), 4);
    char reasons[4][32];
    for (int i = 0; i < 4; i++) dead_reason(v, (size_t)i, reasons[i], sizeof reasons[i]);
    int seen_max = 0, seen_num = 0, seen_missing = 0, seen_wrong = 0;
    for (int i = 0; i < 4; i++) {
        seen_max += strcmp(reasons[i], "max_deliveries") == 0;
        seen_num += strcmp(reasons[i], "bad_number") == 0;
        seen_missing += strcmp(reasons[i], "missing_field") == 0;
        seen_wrong += strcmp(reasons[i], "wrong_voucher") == 0;
    }
    assert_int_equal(seen_max + seen_num + seen_missing + seen_wrong, 4);
    assert_true(seen_max == 1 && seen_num == 1 && seen_missing == 1 && seen_wrong == 1);
    assert_int_equal(metric(sv.port, "seckill_writer_orders_total{outcome=\"dead_letter\"} "), 4);
    assert_int_equal(skt_serve_stop(&sv), 0);
    skt_dir_remove(&dir);
}

static void test_redis_restart_rewarm(void **state)
{
    (void)state;
    flush();
    skt_dir dir;
    skt_serve sv;
    assert_int_equal(skt_dir_make(&dir), 0);
    assert_int_equal(skt_serve_start(&sv, &dir, &srv, "redis", NULL, NULL), 0);
    long long v = skt_voucher(sv.port, &dir, "rewarm", 5, now_s() - 5, now_s() + 3600);
    assert_true(v > 0);
    char path[96], resp[1024], t1[256], t2[256], t3[256];
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);
    skt_token(&dir, 1, 0, t1, sizeof t1);
    skt_token(&dir, 2, 0, t2, sizeof t2);
    skt_token(&dir, 3, 0, t3, sizeof t3);
    assert_int_equal(skt_http(sv.port, "POST", path, t1, NULL, resp, sizeof resp), 201);
    assert_int_equal(skt_http(sv.port, "POST", path, t2, NULL, resp, sizeof resp), 201);
    assert_int_equal(wait_sql(&dir, ORDERS_OF, v, 2), 2);
    assert_int_equal(wait_pending(v, 0), 0);

    /* Redis loses everything. Order ids restart their daily counter, so
     * wait for the next second (see the report on dlock_id_next). */
    assert_int_equal(th_redis_restart(&srv), 0);
    usleep(1100000);
    assert_int_equal(skt_http(sv.port, "POST", path, t1, NULL, resp, sizeof resp), 409);
    assert_string_equal(skt_json_str(resp, "error"), "already_ordered");
    assert_int_equal(skt_http(sv.port, "POST", path, t3, NULL, resp, sizeof resp), 201);
    assert_int_equal(wait_sql(&dir, ORDERS_OF, v, 3), 3);
    assert_int_equal(skt_redis_int(&srv, "GET seckill:{v:%lld}:stock", v), 2);
    assert_int_equal(count_sql(&dir, "SELECT stock FROM vouchers WHERE id = %lld", v), 2);
    assert_int_equal(wait_pending(v, 0), 0);
    assert_int_equal(skt_http(sv.port, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    assert_int_equal(skt_serve_stop(&sv), 0);
    skt_dir_remove(&dir);
}

/* A failed assertion leaves the test's server running: stop it. */
static int after_test(void **state)
{
    (void)state;
    skt_kill_all();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_crash_before_commit_same_consumer, after_test),
        cmocka_unit_test_teardown(test_crash_before_commit_new_consumer, after_test),
        cmocka_unit_test_teardown(test_crash_after_commit_same_consumer, after_test),
        cmocka_unit_test_teardown(test_crash_after_commit_new_consumer, after_test),
        cmocka_unit_test_teardown(test_poison_messages, after_test),
        cmocka_unit_test_teardown(test_redis_restart_rewarm, after_test),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
