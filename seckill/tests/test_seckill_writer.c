/*
 * Failure and recovery with real processes, for both databases and every
 * Redis deployment (the two Redis restarts need a single server and are
 * skipped elsewhere; failovers have their own suite, test_seckill_failover):
 * - the order writer killed with SIGKILL right before a batch's commit and
 *   right after it (before XACK; the process stops itself there through a
 *   test hook and the test kills it), then started again: the order
 *   appears exactly once either way, through the same consumer's pending
 *   list or through XAUTOCLAIM by a new consumer;
 * - poison entries (unparseable, or delivered too often) go to the
 *   dead-letter stream and do not block the rest;
 * - an order is "pending" while the database is stalled, "created" once
 *   persisted (redis strategy), "created" at once (lock strategy); with
 *   vouchers on every cluster master too;
 * - Redis restarted without persistence while an order is in flight: no
 *   oversell in the database, "busy" (429, never a 5xx) until the voucher
 *   is re-warmed, and the re-warm counts the in-flight order;
 * - a stock key lost while orders wait in the stream: the re-warm
 *   subtracts them;
 * - the lock strategy across a Redis restart: no 5xx, no oversell.
 * - order replies lost after the script was sent (Redis stopped, then
 *   killed): 429 busy, and each buyer's retry sells exactly once.
 * - the service stopped (SIGTERM) with orders in flight: each is answered
 *   201, the process exits 0, and every order is persisted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/skutil.h"
#include "service/acked.h"
#include "sk_test.h"
#include "tools/httpc.h"

static th_target srv;

static int setup(void **state)
{
    (void)state;
    return th_target_start(&srv, NULL);
}

static int teardown(void **state)
{
    (void)state;
    skt_kill_all();
    th_target_stop(&srv);
    return 0;
}

/* Each test has its own database, whose voucher ids start at 1 again:
 * start from an empty Redis too. */
static void flush(void)
{
    assert_int_equal(th_target_flush(&srv), 0);
}

/* An empty Redis and database, and a server of `strategy` on them. */
static void fresh_server(skt_dir *dir, skt_serve *sv, const char *strategy)
{
    flush();
    assert_int_equal(skt_dir_make(dir), 0);
    assert_int_equal(skt_serve_start(sv, dir, srv.url, strategy, NULL, NULL), 0);
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

/* Send an order without waiting for the answer (the server may stop
 * before it answers); the connection, or -1. */
static int send_order(int port, const skt_dir *d, long long v, int64_t uid)
{
    char tok[256], req[512];
    skt_token(d, uid, 0, tok, sizeof tok);
    int n = snprintf(req, sizeof req,
                     "POST /api/vouchers/%lld/orders HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
                     "Content-Length: 0\r\n\r\n",
                     v, tok);
    int fd = skt_connect(port);
    if (fd < 0) return -1;
    if (sk_httpc_send_all(fd, req, (size_t)n) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* POST an order for `uid`; the status, the body in resp. */
static int order(int port, const skt_dir *d, long long v, int64_t uid, char *resp, size_t cap)
{
    char tok[256], path[96];
    skt_token(d, uid, 0, tok, sizeof tok);
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);
    return skt_http(port, "POST", path, tok, NULL, resp, cap);
}

/* GET an order as its owner; its "status", or "" (static buffer). */
static const char *order_status(int port, const skt_dir *d, int64_t uid, const char *oid)
{
    static char resp[1024];
    char tok[256], path[96];
    skt_token(d, uid, 0, tok, sizeof tok);
    snprintf(path, sizeof path, "/api/orders/%s", oid);
    if (skt_http(port, "GET", path, tok, NULL, resp, sizeof resp) != 200) return "";
    return skt_json_str(resp, "status");
}

/* `seckill verify` of one voucher with Redis; its exit status. */
static int verify(const skt_dir *d, long long v, const char *wait_s)
{
    char vs[24], out[4096];
    snprintf(vs, sizeof vs, "%lld", v);
    const char *argv[] = {SECKILL_BIN, "verify", "--db",   d->db,  "--redis", srv.url,
                          "--voucher", vs,       "--wait", wait_s, NULL};
    int rc = skt_run(out, sizeof out, argv);
    if (rc != 0) fprintf(stderr, "%s", out);
    return rc;
}

/*
 * Kill the process at `hook` ("BEFORE" or "AFTER" the commit) while it
 * persists one order, restart it as the same consumer (pending list) or as
 * another one (XAUTOCLAIM), and check the order exists exactly once.
 */
static void crash_and_recover(const char *hook, int same_consumer)
{
    flush();
    skt_dir dir;
    skt_serve sv;
    assert_int_equal(skt_dir_make(&dir), 0);
    char hook_env[64];
    snprintf(hook_env, sizeof hook_env, "SECKILL_TEST_STOP_%s_COMMIT=1", hook);
    const char *env1[] = {hook_env, "SECKILL_CONSUMER=first", NULL};
    assert_int_equal(skt_serve_start(&sv, &dir, srv.url, "redis", NULL, env1), 0);
    long long v = skt_voucher(sv.port, &dir, "crash", 10, now_s() - 5, now_s() + 3600);
    assert_true(v > 0);
    int fd = send_order(sv.port, &dir, v, 7);
    assert_true(fd >= 0);
    /* The writer stops itself at the hook; then a real SIGKILL. */
    assert_int_equal(skt_serve_wait_stopped(&sv, 10000), 0);
    assert_int_equal(skt_serve_kill(&sv), 128 + SIGKILL);
    char resp[1024];
    int st = sk_httpc_read_response(fd, resp, sizeof resp);
    close(fd);
    assert_true(st == 201 || st == -1); /* the answer raced the stop; the stream is what counts */
    assert_int_equal(skt_redis_int(&srv, v, "XLEN seckill:{v:%lld}:orders", v), 1);
    assert_int_equal(skt_pending(&srv, v), 1);
    assert_int_equal(count_sql(&dir, ORDERS_OF, v), strcmp(hook, "BEFORE") == 0 ? 0 : 1);

    const char *env2[] = {same_consumer ? "SECKILL_CONSUMER=first" : "SECKILL_CONSUMER=second",
                          "SECKILL_CLAIM_IDLE_MS=200", NULL};
    assert_int_equal(skt_serve_start(&sv, &dir, srv.url, "redis", NULL, env2), 0);
    assert_int_equal(wait_pending(v, 0), 0);
    assert_int_equal(wait_sql(&dir, ORDERS_OF, v, 1), 1);
    assert_int_equal(count_sql(&dir, "SELECT count(*) FROM rejected_orders WHERE voucher_id = %lld", v), 0);
    assert_int_equal(count_sql(&dir, "SELECT stock FROM vouchers WHERE id = %lld", v), 9);
    /* After a crash past the commit, the redelivery was recognised. */
    if (strcmp(hook, "AFTER") == 0)
        assert_int_equal(metric(sv.port, "seckill_writer_orders_total{outcome=\"duplicate\"} "), 1);
    else assert_int_equal(metric(sv.port, "seckill_writer_orders_total{outcome=\"created\"} "), 1);
    /* The buyer sees the order as created, and cannot order again. */
    char oid[32];
    snprintf(oid, sizeof oid, "%lld", count_sql(&dir, "SELECT id FROM orders WHERE voucher_id = %lld", v));
    assert_string_equal(order_status(sv.port, &dir, 7, oid), "created");
    assert_int_equal(order(sv.port, &dir, v, 7, resp, sizeof resp), 409);
    assert_int_equal(verify(&dir, v, "10"), 0);
    assert_int_equal(skt_serve_stop(&sv), 0);
    skt_dir_remove(&dir);
}

static void killed_before_commit_order_is_persisted_after_restart(void **state)
{
    (void)state;
    crash_and_recover("BEFORE", 1);
}

static void killed_before_commit_order_is_claimed_by_another_writer(void **state)
{
    (void)state;
    crash_and_recover("BEFORE", 0);
}

static void killed_after_commit_order_is_stored_once_after_restart(void **state)
{
    (void)state;
    crash_and_recover("AFTER", 1);
}

static void killed_after_commit_order_claimed_by_another_writer_is_stored_once(void **state)
{
    (void)state;
    crash_and_recover("AFTER", 0);
}

static void xadd(long long v, const char *const *fields, int n)
{
    char key[64];
    snprintf(key, sizeof key, "seckill:{v:%lld}:orders", v);
    int port = th_target_master_port(&srv, key);
    redisContext *c = srv.kind == TH_TARGET_SINGLE ? th_redis_connect(&srv.single) : th_node_connect(&srv.topo, port);
    assert_non_null(c);
    const char *argv[16];
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
    redisReply *r = skt_redis_cmd(&srv, v, "XRANGE seckill:{v:%lld}:dead - +", v);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ARRAY && index < r->elements) {
        redisReply *f = r->element[index]->element[1];
        for (size_t i = 0; i + 1 < f->elements; i += 2)
            if (strcmp(f->element[i]->str, "reason") == 0) snprintf(out, cap, "%s", f->element[i + 1]->str);
    }
    freeReplyObject(r);
}

static void unreadable_or_redelivered_entries_go_to_the_dead_letter_stream(void **state)
{
    (void)state;
    flush();
    skt_dir dir;
    skt_serve sv;
    assert_int_equal(skt_dir_make(&dir), 0);
    const char *env[] = {"SECKILL_CLAIM_IDLE_MS=200", "SECKILL_MAX_DELIVERIES=3", NULL};
    assert_int_equal(skt_serve_start(&sv, &dir, srv.url, "redis", NULL, env), 0);
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
    redisReply *r = skt_redis_cmd(&srv, v,
                                  "XREADGROUP GROUP seckill-writers ghost COUNT 10 STREAMS "
                                  "seckill:{v:%lld}:orders >",
                                  v);
    assert_non_null(r);
    freeReplyObject(r);
    r = skt_redis_cmd(&srv, v, "XPENDING seckill:{v:%lld}:orders seckill-writers - + 10", v);
    assert_non_null(r);
    assert_int_equal(r->elements, 1);
    char id[64];
    snprintf(id, sizeof id, "%s", r->element[0]->element[0]->str);
    freeReplyObject(r);
    r = skt_redis_cmd(&srv, v, "XCLAIM seckill:{v:%lld}:orders seckill-writers ghost 0 %s RETRYCOUNT 10", v, id);
    assert_non_null(r);
    freeReplyObject(r);
    /* Delivered once to the dead consumer: must still be persisted. */
    const char *good2[] = {"order", "4000000002", "user", "902", "voucher", vs};
    xadd(v, good2, 6);
    r = skt_redis_cmd(&srv, v, "XREADGROUP GROUP seckill-writers ghost COUNT 10 STREAMS seckill:{v:%lld}:orders >", v);
    assert_non_null(r);
    freeReplyObject(r);

    assert_int_equal(skt_serve_start(&sv, &dir, srv.url, "redis", NULL, env), 0);
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
    assert_int_equal(
        count_sql(&dir, "SELECT count(*) FROM orders WHERE id IN (4000000002, 4000000006) AND %lld = 1", 1), 2);
    assert_int_equal(skt_redis_int(&srv, v, "XLEN seckill:{v:%lld}:dead", v), 4);
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

/* Pending while the database is stalled, created once the writer commits;
 * `seckill verify` meanwhile says "not drained" (75), not OK. */
static void order_is_pending_until_persisted_and_verify_waits_for_it(void **state)
{
    (void)state;
    skt_dir dir;
    skt_serve sv;
    fresh_server(&dir, &sv, "redis");
    long long v = skt_voucher(sv.port, &dir, "pending", 3, now_s() - 5, now_s() + 3600);
    assert_true(v > 0);
    assert_int_equal(skt_db_hold(&dir), 0);
    char resp[1024], oid[32];
    assert_int_equal(order(sv.port, &dir, v, 11, resp, sizeof resp), 201);
    snprintf(oid, sizeof oid, "%s", skt_json_str(resp, "order_id"));
    assert_string_equal(order_status(sv.port, &dir, 11, oid), "pending");
    assert_int_equal(verify(&dir, v, "1"), 75);
    usleep(300000);
    assert_string_equal(order_status(sv.port, &dir, 11, oid), "pending");
    assert_int_equal(count_sql(&dir, ORDERS_OF, v), 0);
    skt_db_release();
    assert_int_equal(wait_sql(&dir, ORDERS_OF, v, 1), 1);
    assert_string_equal(order_status(sv.port, &dir, 11, oid), "created");
    assert_int_equal(verify(&dir, v, "10"), 0);
    assert_int_equal(skt_serve_stop(&sv), 0);

    /* The lock strategy commits before it answers: never pending. */
    assert_int_equal(skt_serve_start(&sv, &dir, srv.url, "lock", NULL, NULL), 0);
    assert_int_equal(order(sv.port, &dir, v, 12, resp, sizeof resp), 201);
    snprintf(oid, sizeof oid, "%s", skt_json_str(resp, "order_id"));
    assert_string_equal(order_status(sv.port, &dir, 12, oid), "created");
    assert_int_equal(skt_serve_stop(&sv), 0);
    skt_dir_remove(&dir);
}

/* The masters serving the vouchers' keys: how many different ones among
 * vids[0..n). */
static int masters_of(const long long *vids, int n)
{
    int ports[16], k = 0;
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "seckill:{v:%lld}:stock", vids[i]);
        int p = th_target_master_port(&srv, key), seen = 0;
        for (int j = 0; j < k; j++) seen |= ports[j] == p;
        if (!seen && k < 16) ports[k++] = p;
    }
    return k;
}

/*
 * Vouchers on different servers at once (on a cluster: vouchers are
 * created until every master holds one). Orders of each are pending while
 * the database is stalled and created once it is released: the writer
 * reads every voucher's stream, and GET /api/orders finds every pending
 * order, though no command may span two vouchers' slots there.
 */
static void orders_of_vouchers_on_every_master_are_pending_then_created(void **state)
{
    (void)state;
    skt_dir dir;
    skt_serve sv;
    fresh_server(&dir, &sv, "redis");
    int want = 1;
    if (srv.kind == TH_TARGET_CLUSTER) {
        int ports[3];
        th_topology_refresh(&srv.topo);
        want = th_topology_masters(&srv.topo, ports, 3);
    }
    long long vids[12];
    int n = 0;
    while (n < 12 && (n < 2 || masters_of(vids, n) < want)) {
        vids[n] = skt_voucher(sv.port, &dir, "spread", 5, now_s() - 5, now_s() + 3600);
        assert_true(vids[n] > 0);
        n++;
    }
    assert_int_equal(masters_of(vids, n), want);
    assert_int_equal(skt_db_hold(&dir), 0);
    char oids[12][32], resp[1024];
    for (int i = 0; i < n; i++) {
        assert_int_equal(order(sv.port, &dir, vids[i], 100 + i, resp, sizeof resp), 201);
        snprintf(oids[i], sizeof oids[i], "%s", skt_json_str(resp, "order_id"));
    }
    for (int i = 0; i < n; i++) assert_string_equal(order_status(sv.port, &dir, 100 + i, oids[i]), "pending");
    skt_db_release();
    assert_int_equal(skt_db_wait(&dir, "SELECT count(*) FROM orders", n, 10000), n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(order_status(sv.port, &dir, 100 + i, oids[i]), "created");
        assert_int_equal(wait_pending(vids[i], 0), 0);
        assert_int_equal(verify(&dir, vids[i], "10"), 0);
    }
    assert_int_equal(skt_serve_stop(&sv), 0);
    skt_dir_remove(&dir);
}

/* Redis dies (SIGKILL) and stays down until redis_up(): a restart without
 * persistence, with time in between to see what the service answers. */
static void redis_down(void)
{
    assert_true(srv.single.pid > 0);
    kill(srv.single.pid, SIGKILL);
    waitpid(srv.single.pid, NULL, 0);
    srv.single.pid = 0;
}

/* A fresh, empty server on the same socket. */
static void redis_up(void)
{
    assert_int_equal(th_redis_restart(&srv.single), 0);
}

/* Seconds since the test's redis-server started (INFO), or -1. */
static long redis_uptime_s(void)
{
    redisReply *r = th_redis_cmd(&srv.single, "INFO server");
    long up = r && r->type == REDIS_REPLY_STRING ? sk_info_uptime(r->str) : -1;
    if (r) freeReplyObject(r);
    return up;
}

/* The grace period of the restart test; long enough for a loaded machine
 * to send a few requests inside it. */
#define GRACE_S 3
#define GRACE_STR "3"

/* A redis-strategy server (with `env`, one "K=V") selling a voucher of
 * `stock` units, users 1 and 2 with persisted, acknowledged orders. */
static long long two_persisted_orders(skt_dir *dir, skt_serve *sv, const char *env1, long stock)
{
    flush();
    assert_int_equal(skt_dir_make(dir), 0);
    const char *env[] = {env1, NULL, NULL, NULL};
    /* Tests that stop Redis with orders in flight give the orders a
     * minute, in Redis and at the HTTP deadline: the buyers' threads may
     * reach the service seconds apart on a loaded machine, and with the
     * defaults (5 s, 1 s) the first orders could time out before the last
     * were sent. */
    int n = 1;
    if (strstr(env1, "SECKILL_REDIS_TIMEOUT_MS") == NULL) env[n++] = "SECKILL_REDIS_TIMEOUT_MS=60000";
    if (strstr(env1, "SECKILL_ORDER_TIMEOUT_MS") == NULL) env[n++] = "SECKILL_ORDER_TIMEOUT_MS=60000";
    assert_int_equal(skt_serve_start(sv, dir, srv.url, "redis", NULL, env), 0);
    long long v = skt_voucher(sv->port, dir, "recovery", stock, now_s() - 5, now_s() + 3600);
    assert_true(v > 0);
    char resp[1024];
    assert_int_equal(order(sv->port, dir, v, 1, resp, sizeof resp), 201);
    assert_int_equal(order(sv->port, dir, v, 2, resp, sizeof resp), 201);
    assert_int_equal(wait_sql(dir, ORDERS_OF, v, 2), 2);
    assert_int_equal(wait_pending(v, 0), 0);
    return v;
}

/*
 * Redis restarts empty while the writer holds an accepted order it has
 * read but not committed (the database is stalled). Until the grace
 * period after the restart is over, orders are answered 429 busy, never a
 * 5xx; the in-flight order lands meanwhile; the re-warm then counts it,
 * so exactly the initial stock is sold and nothing is rejected.
 */
static void redis_restart_is_busy_until_rewarmed_then_sells_exactly_the_stock(void **state)
{
    (void)state;
    th_target_require_single(&srv); /* a restart without persistence; failovers: test_seckill_failover */
    skt_dir dir;
    skt_serve sv;
    long long v = two_persisted_orders(&dir, &sv, "SECKILL_WARM_GRACE_S=" GRACE_STR, 5);
    char resp[1024];

    /* User 3's order is read by the writer, which then waits for the database. */
    assert_int_equal(skt_db_hold(&dir), 0);
    assert_int_equal(order(sv.port, &dir, v, 3, resp, sizeof resp), 201);
    assert_int_equal(wait_pending(v, 1), 1);

    /* Busy, never an error, while Redis is down... */
    redis_down();
    int busy = 0, other = 0;
    for (int u = 50; u < 55; u++) {
        int st = order(sv.port, &dir, v, u, resp, sizeof resp);
        if (st == 429 && strcmp(skt_json_str(resp, "error"), "busy") == 0) busy++;
        else fprintf(stderr, "Redis down: %d %s\n", st, resp);
    }
    assert_int_equal(busy, 5);
    busy = 0;
    redis_up();

    /* ...and while the grace period after its restart runs: an answer
     * that came back while Redis was still younger than the grace was
     * decided before the grace ended, so it must be busy. The database
     * is released at the first one, so the in-flight order lands inside
     * the grace; requests stop a second before its end, so none of them
     * can be decided after it. */
    int created = 0;
    for (int u = 100; u < 200 && redis_uptime_s() < GRACE_S - 1; u++) {
        int st = order(sv.port, &dir, v, u, resp, sizeof resp);
        int decided_in_grace = redis_uptime_s() < GRACE_S;
        if (st == 201) created++;
        if (st == 429 && strcmp(skt_json_str(resp, "error"), "busy") == 0) {
            if (busy++ == 0) skt_db_release();
        } else if (decided_in_grace) {
            fprintf(stderr, "during grace: %d %s\n", st, resp);
            other++;
        }
        usleep(50000);
    }
    skt_db_release(); /* in case no answer came back inside the grace */
    assert_true(busy > 0);
    assert_int_equal(other, 0);
    assert_int_equal(wait_sql(&dir, ORDERS_OF, v, 3), 3);

    /* After the grace: earlier buyers, including the in-flight one, are
     * refused, and the units left sell without a single refusal by the
     * database: the re-warm counted the in-flight order. */
    for (int waited = 0; waited < 100; waited++) { /* busy until the grace is over */
        int st = order(sv.port, &dir, v, 1, resp, sizeof resp);
        if (st != 429) {
            assert_int_equal(st, 409);
            break;
        }
        usleep(100000);
    }
    assert_int_equal(order(sv.port, &dir, v, 3, resp, sizeof resp), 409);
    for (int u = 4; u <= 9; u++) {
        int st = order(sv.port, &dir, v, u, resp, sizeof resp);
        if (st == 201) created++;
        else if (st != 410) fprintf(stderr, "user %d: %d %s\n", u, st, resp);
    }
    assert_int_equal(created, 2);
    assert_int_equal(wait_sql(&dir, ORDERS_OF, v, 5), 5);
    assert_int_equal(wait_pending(v, 0), 0);
    assert_int_equal(count_sql(&dir, "SELECT stock FROM vouchers WHERE id = %lld", v), 0);
    assert_int_equal(count_sql(&dir, "SELECT count(*) FROM rejected_orders WHERE voucher_id = %lld", v), 0);
    assert_int_equal(skt_redis_int(&srv, v, "GET seckill:{v:%lld}:stock", v), 0);
    assert_int_equal(verify(&dir, v, "10"), 0);
    assert_int_equal(skt_http(sv.port, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    assert_int_equal(skt_serve_stop(&sv), 0);
    skt_dir_remove(&dir);
}

/* The stock key vanishes (eviction, an operator) while two accepted
 * orders wait in the stream: the re-warm takes the database's stock minus
 * those two, and their buyers stay refused. */
static void rewarm_subtracts_orders_still_in_the_stream(void **state)
{
    (void)state;
    skt_dir dir;
    skt_serve sv;
    long long v = two_persisted_orders(&dir, &sv, "SECKILL_WARM_GRACE_S=0", 10);
    char resp[1024];
    assert_int_equal(skt_db_hold(&dir), 0);
    assert_int_equal(order(sv.port, &dir, v, 3, resp, sizeof resp), 201);
    assert_int_equal(order(sv.port, &dir, v, 4, resp, sizeof resp), 201);
    assert_int_equal(skt_redis_int(&srv, v, "DEL seckill:{v:%lld}:stock", v), 1);
    /* Database: 8 left; stream: 2 more accepted. So 6, then user 5 takes one. */
    assert_int_equal(order(sv.port, &dir, v, 5, resp, sizeof resp), 201);
    assert_int_equal(skt_redis_int(&srv, v, "GET seckill:{v:%lld}:stock", v), 5);
    assert_int_equal(order(sv.port, &dir, v, 3, resp, sizeof resp), 409);
    skt_db_release();
    assert_int_equal(wait_sql(&dir, ORDERS_OF, v, 5), 5);
    assert_int_equal(wait_pending(v, 0), 0);
    assert_int_equal(count_sql(&dir, "SELECT stock FROM vouchers WHERE id = %lld", v), 5);
    assert_int_equal(count_sql(&dir, "SELECT count(*) FROM rejected_orders WHERE voucher_id = %lld", v), 0);
    assert_int_equal(verify(&dir, v, "10"), 0);
    assert_int_equal(skt_serve_stop(&sv), 0);
    skt_dir_remove(&dir);
}

typedef struct crowd {
    int port;
    const skt_dir *dir;
    long long voucher;
    atomic_int next_user, stop;
    atomic_int created, definite, busy, other;
} crowd;

/* Buyers on one keep-alive connection each, until told to stop. */
static void *crowd_buyer(void *arg)
{
    crowd *c = arg;
    int fd = skt_connect(c->port);
    char path[96], tok[256], resp[1024];
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", c->voucher);
    while (!atomic_load(&c->stop)) {
        int u = atomic_fetch_add(&c->next_user, 1) % 400 + 1;
        skt_token(c->dir, u, 0, tok, sizeof tok);
        int st = fd >= 0 ? skt_request(fd, "POST", path, tok, NULL, resp, sizeof resp) : -1;
        if (st == 201) atomic_fetch_add(&c->created, 1);
        else if (st == 409 || st == 410) atomic_fetch_add(&c->definite, 1);
        else if (st == 429) atomic_fetch_add(&c->busy, 1);
        else {
            fprintf(stderr, "lock strategy during restart: %d %s\n", st, resp);
            atomic_fetch_add(&c->other, 1);
        }
    }
    if (fd >= 0) close(fd);
    return NULL;
}

/* The lock strategy while Redis restarts under load: answers stay 201,
 * 409, 410 or 429; the database never sells more than its stock. */
static void lock_strategy_never_oversells_while_redis_restarts(void **state)
{
    (void)state;
    th_target_require_single(&srv); /* a restart without persistence; failovers: test_seckill_failover */
    skt_dir dir;
    skt_serve sv;
    fresh_server(&dir, &sv, "lock");
    crowd c;
    memset(&c, 0, sizeof c);
    c.port = sv.port;
    c.dir = &dir;
    c.voucher = skt_voucher(sv.port, &dir, "lock restart", 150, now_s() - 5, now_s() + 3600);
    assert_true(c.voucher > 0);
    pthread_t th[8];
    for (int i = 0; i < 8; i++) assert_int_equal(pthread_create(&th[i], NULL, crowd_buyer, &c), 0);
    usleep(150000);
    redis_down();
    usleep(300000);
    redis_up();
    usleep(700000);
    atomic_store(&c.stop, 1);
    for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
    fprintf(stderr, "lock strategy across a restart: %d created, %d 409/410, %d busy, %d other\n",
            atomic_load(&c.created), atomic_load(&c.definite), atomic_load(&c.busy), atomic_load(&c.other));
    assert_int_equal(atomic_load(&c.other), 0);
    long long orders = count_sql(&dir, ORDERS_OF, c.voucher);
    assert_int_equal(orders, atomic_load(&c.created));
    assert_true(orders <= 150);
    assert_int_equal(count_sql(&dir, "SELECT stock FROM vouchers WHERE id = %lld", c.voucher), 150 - orders);
    assert_int_equal(verify(&dir, c.voucher, "10"), 0);
    assert_int_equal(skt_serve_stop(&sv), 0);
    skt_dir_remove(&dir);
}

/* One buyer's order, on a thread of its own. */
typedef struct lost_buyer {
    int port;
    const skt_dir *dir;
    long long voucher;
    int64_t user;
    int status;
    char resp[256];
} lost_buyer;

static void *lost_buy(void *arg)
{
    lost_buyer *b = arg;
    b->status = order(b->port, b->dir, b->voucher, b->user, b->resp, sizeof b->resp);
    return NULL;
}

/* k buyers, users first.., each ordering on a thread of its own. */
static void buyers_start(lost_buyer *b, pthread_t *th, int k, int port, const skt_dir *dir, long long voucher,
                         int64_t first)
{
    for (int i = 0; i < k; i++) {
        b[i] = (lost_buyer){port, dir, voucher, first + i, 0, ""};
        assert_int_equal(pthread_create(&th[i], NULL, lost_buy, &b[i]), 0);
    }
}

/* Wait (10 s at most) until the service has `k` orders waiting for their
 * scripts' replies (GET /metrics needs no Redis); how many it has. A
 * fixed sleep was too short under ASan on a loaded machine: a buyer's
 * connection not yet accepted when the test went on was refused by the
 * stop, not answered. Short of k, the service's threads are shown: once
 * (ctest -j4) one order of 8 never arrived, unexplained. */
static int wait_in_flight(const skt_serve *sv, int k)
{
    long long deadline = th_now_ms() + 10000;
    int n;
    while ((n = metric(sv->port, "\nseckill_orders_in_flight ")) != k && th_now_ms() < deadline) usleep(10000);
    if (n != k) skt_serve_stall_report(sv);
    return n;
}

/* Wait for the k buyers; each must have been answered `status`. */
static void buyers_expect(lost_buyer *b, pthread_t *th, int k, int status)
{
    for (int i = 0; i < k; i++) {
        pthread_join(th[i], NULL);
        if (b[i].status != status) fprintf(stderr, "user %lld: %d %s\n", (long long)b[i].user, b[i].status, b[i].resp);
        assert_int_equal(b[i].status, status);
    }
}

/*
 * Orders whose script reached Redis but whose replies never came back: the
 * server is stopped (SIGSTOP) with the orders written to it, then killed.
 * Each is answered 429 busy (the order script is never sent twice, so a
 * lost reply cannot become a second sale), and after Redis comes back
 * empty each buyer's retry takes exactly one unit: 201 once, then 409.
 * These orders take the asynchronous path (the redis strategy without
 * --replica-acks), whose lost replies must end as the synchronous ones do.
 */
static void lost_order_reply_is_busy_and_never_sold_twice(void **state)
{
    (void)state;
    th_target_require_single(&srv); /* a restart without persistence */
    skt_dir dir;
    skt_serve sv;
    long long v = two_persisted_orders(&dir, &sv, "SECKILL_WARM_GRACE_S=1", 20);
    enum { K = 8 };
    lost_buyer b[K];
    pthread_t th[K];
    kill(srv.single.pid, SIGSTOP);
    buyers_start(b, th, K, sv.port, &dir, v, 10);
    assert_int_equal(wait_in_flight(&sv, K), K); /* every order written to the stopped server */
    redis_down();                                /* SIGKILL works on a stopped process */
    buyers_expect(b, th, K, 429);
    for (int i = 0; i < K; i++) assert_string_equal(skt_json_str(b[i].resp, "error"), "busy");
    redis_up();
    char resp[1024];
    for (int i = 0; i < K; i++) {
        int st = 429;
        for (int tries = 0; st == 429 && tries < 100; tries++) {
            st = order(sv.port, &dir, v, 10 + i, resp, sizeof resp);
            if (st == 429) usleep(100000);
        }
        assert_int_equal(st, 201);
        assert_int_equal(order(sv.port, &dir, v, 10 + i, resp, sizeof resp), 409);
    }
    assert_int_equal(wait_sql(&dir, ORDERS_OF, v, 2 + K), 2 + K);
    assert_int_equal(wait_pending(v, 0), 0);
    /* One order per buyer: K distinct buyers among the voucher's orders. */
    assert_int_equal(count_sql(&dir, "SELECT count(DISTINCT user_id) FROM orders WHERE voucher_id = %lld", v), 2 + K);
    assert_int_equal(count_sql(&dir, "SELECT stock FROM vouchers WHERE id = %lld", v), 20 - 2 - K);
    assert_int_equal(count_sql(&dir, "SELECT count(*) FROM rejected_orders WHERE voucher_id = %lld", v), 0);
    assert_int_equal(verify(&dir, v, "10"), 0);
    assert_int_equal(skt_serve_stop(&sv), 0);
    skt_dir_remove(&dir);
}

/*
 * SIGTERM while orders wait for their scripts' replies (the Redis master
 * of the voucher paused, so they stay in flight): the stop waits, closes
 * new connections unanswered meanwhile, every buyer gets 201 once Redis
 * answers, the process exits 0, and the orders
 * are persisted, by the writer before it stops or by the next start (same
 * consumer name, so it re-reads its own pending list). Fails if the stop
 * tears MHD down with a connection suspended or an answer unsent (a buyer
 * left without one), or frees what a late answer still uses (ASan).
 */
static void stop_answers_every_order_in_flight(void **state)
{
    (void)state;
    skt_dir dir;
    skt_serve sv;
    long long v = two_persisted_orders(&dir, &sv, "SECKILL_CONSUMER=stop-test", 20);
    char key[64];
    snprintf(key, sizeof key, "seckill:{v:%lld}:stock", v);
    enum { K = 8 };
    lost_buyer b[K];
    pthread_t th[K];
    assert_int_equal(th_target_pause(&srv, key), 0);
    buyers_start(b, th, K, sv.port, &dir, v, 10);
    assert_int_equal(wait_in_flight(&sv, K), K); /* every order sent to the paused master */
    kill(sv.pid, SIGTERM);
    usleep(300000); /* the stop has begun, and waits */
    assert_true(skt_serve_wait(&sv, 0) < 0);
    /* A connection made now is closed unanswered, at once: no new work is
     * taken (one that waited in the listen queue would hang for 20 s). */
    char resp[256];
    long long t0 = th_now_ms();
    assert_true(skt_http(sv.port, "GET", "/healthz", NULL, NULL, resp, sizeof resp) < 0);
    assert_true(th_now_ms() - t0 < 2000);
    assert_int_equal(th_target_resume(&srv, key), 0);
    buyers_expect(b, th, K, 201);
    int rc = skt_serve_wait(&sv, 15000);
    if (rc != 0) skt_serve_dump(&sv);
    assert_int_equal(rc, 0);
    const char *env[] = {"SECKILL_CONSUMER=stop-test", NULL};
    assert_int_equal(skt_serve_start(&sv, &dir, srv.url, "redis", NULL, env), 0);
    assert_int_equal(wait_sql(&dir, ORDERS_OF, v, 2 + K), 2 + K);
    assert_int_equal(wait_pending(v, 0), 0);
    assert_int_equal(verify(&dir, v, "10"), 0);
    assert_int_equal(skt_serve_stop(&sv), 0);
    skt_dir_remove(&dir);
}

/* A failed assertion leaves the test's server running (and perhaps the
 * database held, or Redis stopped): stop it, and wake Redis, which the
 * next test needs. */
static int after_test(void **state)
{
    (void)state;
    skt_db_release();
    skt_kill_all();
    (void)th_target_resume(&srv, "");
    if (srv.kind == TH_TARGET_SINGLE && srv.single.pid <= 0 && th_redis_restart(&srv.single) != 0)
        return -1; /* failed while Redis was down */
    return 0;
}

/* A command + WAIT (--replica-acks) whose connection died says why: the
 * server and the connection's error. The writer logged dlock_last_error()
 * for it, which names the thread's last failed *library* call, e.g. a
 * harmless BUSYGROUP from creating the group (the log after a Sentinel
 * failover read "XCLAIM before WAIT: XGROUP: BUSYGROUP ..."). */
static void failed_command_and_wait_names_its_own_cause(void **state)
{
    (void)state;
    th_target_require_single(&srv);
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    dlock_client *c;
    assert_int_equal(dlock_client_new(r.tcp_url, NULL, &c), DLOCK_OK);
    sk_redis rd;
    char err[256];
    assert_int_equal(sk_redis_init(&rd, c, r.tcp_url, 1, 50, err, sizeof err), 0);
    const char *set[] = {"SET", "{v:1}:x", "1"};
    redisReply *rep;
    long long acks;
    assert_int_equal(sk_acked_run(&rd, "{v:1}:x", 3, set, NULL, &rep, &acks), DLOCK_OK);
    freeReplyObject(rep);
    assert_int_equal(acks, 0); /* no replica: WAIT gives up after 50 ms */
    /* The earlier, harmless error. */
    for (int i = 0; i < 2; i++) {
        sk_redis_cmd(&rd, "{v:1}:s", 0, &rep, "XGROUP", "CREATE", "{v:1}:s", "g", "$", "MKSTREAM", NULL);
        if (rep) freeReplyObject(rep);
    }
    assert_non_null(strstr(dlock_last_error(), "BUSYGROUP"));
    /* The server dies under the thread's connection. */
    char port[16];
    snprintf(port, sizeof port, ":%d", r.port);
    th_redis_stop(&r);
    assert_int_equal(sk_acked_run(&rd, "{v:1}:x", 3, set, NULL, &rep, &acks), DLOCK_ERR_CONNECT);
    assert_null(rep);
    const char *why = sk_acked_error();
    fprintf(stderr, "sk_acked_error: %s\n", why);
    assert_null(strstr(why, "BUSYGROUP"));
    assert_non_null(strstr(why, port));
    /* And with no connection left to use: why none could be made. */
    assert_int_equal(sk_acked_run(&rd, "{v:1}:x", 3, set, NULL, &rep, &acks), DLOCK_ERR_CONNECT);
    why = sk_acked_error();
    fprintf(stderr, "sk_acked_error: %s\n", why);
    assert_null(strstr(why, "BUSYGROUP"));
    assert_non_null(strstr(why, "cannot connect"));
    assert_non_null(strstr(why, port));
    dlock_client_free(c);
}

int main(int argc, char **argv)
{
    int rc = skt_backend_init(argc, argv);
    if (rc) return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(killed_before_commit_order_is_persisted_after_restart, after_test),
        cmocka_unit_test_teardown(killed_before_commit_order_is_claimed_by_another_writer, after_test),
        cmocka_unit_test_teardown(killed_after_commit_order_is_stored_once_after_restart, after_test),
        cmocka_unit_test_teardown(killed_after_commit_order_claimed_by_another_writer_is_stored_once, after_test),
        cmocka_unit_test_teardown(unreadable_or_redelivered_entries_go_to_the_dead_letter_stream, after_test),
        cmocka_unit_test_teardown(order_is_pending_until_persisted_and_verify_waits_for_it, after_test),
        cmocka_unit_test_teardown(orders_of_vouchers_on_every_master_are_pending_then_created, after_test),
        cmocka_unit_test_teardown(redis_restart_is_busy_until_rewarmed_then_sells_exactly_the_stock, after_test),
        cmocka_unit_test_teardown(rewarm_subtracts_orders_still_in_the_stream, after_test),
        cmocka_unit_test_teardown(lock_strategy_never_oversells_while_redis_restarts, after_test),
        cmocka_unit_test_teardown(lost_order_reply_is_busy_and_never_sold_twice, after_test),
        cmocka_unit_test_teardown(stop_answers_every_order_in_flight, after_test),
        cmocka_unit_test_teardown(failed_command_and_wait_names_its_own_cause, after_test),
    };
    rc = cmocka_run_group_tests_name(skt_backend_name(), tests, setup, teardown);
    skt_backend_stop();
    return rc;
}
