/*
 * seckill's admission limits (--rate-per-user, --rate-total), end to end
 * on a real `seckill serve` with its private redis-server: a user over
 * its rate gets 429 rate_limited with Retry-After and the body while
 * other users go on, a user refused by its own limit takes no permit of
 * the overall one, the overall limit admits no more than its rate allows
 * over a window (and at least its burst), refused orders never reach the
 * stock, and a malformed limit is a usage error.
 *
 * Each case starts its own server, so each has fresh buckets. The rates
 * that must not refill during a case are per hour, so no verdict depends
 * on how fast a loaded machine runs.
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

#include <jansson.h>

#include "sk_test.h"
#include "tools/httpc.h"

static skt_dir dir;
static skt_serve sv;

static int setup(void **state)
{
    (void)state;
    return skt_dir_make(&dir);
}

static int teardown(void **state)
{
    (void)state;
    skt_kill_all();
    skt_dir_remove(&dir);
    return 0;
}

static long long now_s(void)
{
    return (long long)time(NULL);
}

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* serve with these limits (NULL: off) on a private redis-server. */
static void serve(const char *per_user, const char *total)
{
    const char *extra[6];
    int n = 0;
    if (per_user) extra[n++] = "--rate-per-user", extra[n++] = per_user;
    if (total) extra[n++] = "--rate-total", extra[n++] = total;
    extra[n] = NULL;
    assert_int_equal(skt_serve_start(&sv, &dir, NULL, "redis", extra, NULL), 0);
}

static long long voucher(long stock)
{
    long long v = skt_voucher(sv.port, &dir, "rate", stock, now_s() - 5, now_s() + 3600);
    assert_true(v > 0);
    return v;
}

/* An order by `uid`; its status, the Retry-After header (-1: none) and
 * the body. */
static int order(long long v, int64_t uid, int *retry_after, char *body, size_t cap)
{
    char tok[256], raw[1024];
    skt_token(&dir, uid, 0, tok, sizeof tok);
    snprintf(raw, sizeof raw,
             "POST /api/vouchers/%lld/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
             "Content-Length: 0\r\nConnection: close\r\n\r\n",
             v, tok);
    static char buf[65536];
    int fd = skt_connect(sv.port);
    assert_true(fd >= 0);
    size_t len = 0;
    ssize_t k;
    assert_int_equal(sk_httpc_send_all(fd, raw, strlen(raw)), 0);
    while (len < sizeof buf - 1 && (k = read(fd, buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)k;
    close(fd);
    buf[len] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    assert_non_null(end);
    *end = '\0';
    const char *ra = strstr(buf, "\r\nRetry-After: ");
    *retry_after = ra ? atoi(ra + 15) : -1;
    snprintf(body, cap, "%s", end + 4);
    return atoi(buf + 9);
}

/* The stock Redis has for a voucher, as GET /api/vouchers/ID says it. */
static long long stock(long long v)
{
    char path[64], resp[1024];
    snprintf(path, sizeof path, "/api/vouchers/%lld", v);
    assert_int_equal(skt_http(sv.port, "GET", path, NULL, NULL, resp, sizeof resp), 200);
    return skt_json_int(resp, "stock");
}

/* A counter's value in /metrics, or -1. */
static long long metric(const char *line)
{
    static char resp[131072];
    assert_int_equal(skt_http(sv.port, "GET", "/metrics", NULL, NULL, resp, sizeof resp), 200);
    const char *at = strstr(resp, line);
    return at ? atoll(at + strlen(line)) : -1;
}

/* A 429 from the limiter: its body names the limit and when the next
 * permit is due, within `most_ms`, and Retry-After says the same in whole
 * seconds, rounded up. */
static void expect_refusal(int st, int retry_after, const char *body, const char *scope, long long most_ms)
{
    if (st != 429) fprintf(stderr, "want 429 rate_limited, got %d %s\n", st, body);
    assert_int_equal(st, 429);
    assert_string_equal(skt_json_str(body, "error"), "rate_limited");
    assert_string_equal(skt_json_str(body, "scope"), scope);
    long long ms = skt_json_int(body, "retry_after_ms");
    assert_true(ms > 0 && ms <= most_ms);
    assert_int_equal(retry_after, (int)((ms + 999) / 1000));
}

/*
 * --rate-per-user 1/h: a user's second order (of another voucher, so the
 * one-per-user rule is not what refuses it) gets 429 rate_limited, scope
 * user, with Retry-After near an hour; other users still buy that
 * voucher; the refused order never reached the stock (no order of the
 * user, stock less only the others' units); /metrics counts it.
 */
static void user_over_its_rate_gets_429_and_others_go_on(void **state)
{
    (void)state;
    serve("1/h", NULL);
    long long v1 = voucher(10), v2 = voucher(10);
    char body[1024];
    int ra;
    assert_int_equal(order(v1, 1, &ra, body, sizeof body), 201);
    int st = order(v2, 1, &ra, body, sizeof body);
    fprintf(stderr, "user 1's second order: %d, Retry-After %d, %s\n", st, ra, body);
    expect_refusal(st, ra, body, "user", 3600000);
    assert_true(ra > 3000);
    assert_int_equal(order(v2, 2, &ra, body, sizeof body), 201);
    assert_int_equal(order(v2, 3, &ra, body, sizeof body), 201);
    assert_int_equal(stock(v2), 8);
    assert_int_equal(stock(v1), 9);
    char tok[256], path[96], resp[1024];
    skt_token(&dir, 1, 0, tok, sizeof tok);
    snprintf(path, sizeof path, "/api/vouchers/%lld/order", v2);
    assert_int_equal(skt_http(sv.port, "GET", path, tok, NULL, resp, sizeof resp), 404);
    assert_int_equal(metric("seckill_rate_limited_total{scope=\"user\"} "), 1);
    assert_int_equal(metric("seckill_rate_limited_total{scope=\"total\"} "), 0);
    /* The description lists the refusal's members on the error body. */
    static char doc[131072];
    assert_int_equal(skt_http(sv.port, "GET", "/openapi.json", NULL, NULL, doc, sizeof doc), 200);
    json_t *j = json_loads(doc, 0, NULL);
    json_t *err = json_object_get(json_object_get(json_object_get(j, "components"), "schemas"), "Error");
    assert_non_null(json_object_get(json_object_get(err, "properties"), "scope"));
    assert_non_null(json_object_get(json_object_get(err, "properties"), "retry_after_ms"));
    json_decref(j);
    assert_int_equal(skt_serve_stop(&sv), 0);
}

/*
 * The per-user limit is checked first, and a refusal there takes nothing
 * from the overall limit: with 1 an hour per user and 2 an hour overall,
 * user 1's second order is refused (user), user 2's order still gets the
 * second overall permit, and only user 3's is refused (total). Stock:
 * exactly the two admitted.
 */
static void user_refused_by_its_limit_takes_no_total_permit(void **state)
{
    (void)state;
    serve("1/h", "2/h");
    long long v = voucher(10), w = voucher(10);
    char body[1024];
    int ra;
    assert_int_equal(order(v, 1, &ra, body, sizeof body), 201);
    int st = order(w, 1, &ra, body, sizeof body);
    expect_refusal(st, ra, body, "user", 3600000);
    assert_int_equal(order(v, 2, &ra, body, sizeof body), 201);
    st = order(v, 3, &ra, body, sizeof body);
    fprintf(stderr, "user 3: %d, Retry-After %d, %s\n", st, ra, body);
    expect_refusal(st, ra, body, "total", 1800000);
    assert_int_equal(stock(v), 8);
    assert_int_equal(stock(w), 10);
    assert_int_equal(metric("seckill_rate_limited_total{scope=\"user\"} "), 1);
    assert_int_equal(metric("seckill_rate_limited_total{scope=\"total\"} "), 1);
    assert_int_equal(skt_serve_stop(&sv), 0);
}

/*
 * --rate-total 20/s:5 under distinct users ordering one after another for
 * about two seconds: no stretch of T ms admits more than 5 + 20 T / 1000
 * (the limiter's promise, by the server's clock; T here is measured
 * around every request, so it spans the server's decisions); at least
 * the burst is admitted, and some are refused. Every admitted order and
 * no refused one took a unit.
 */
static void total_limit_caps_the_admitted_orders_in_a_window(void **state)
{
    (void)state;
    serve(NULL, "20/s:5");
    long long v = voucher(100000);
    char body[1024];
    int ra;
    long long admitted = 0, refused = 0, other = 0;
    long long t0 = mono_ms();
    for (int64_t uid = 1000; mono_ms() - t0 < 2000; uid++) {
        int st = order(v, uid, &ra, body, sizeof body);
        if (st == 201) admitted++;
        else if (st == 429 && strcmp(skt_json_str(body, "scope"), "total") == 0) refused++;
        else other++;
    }
    long long t = mono_ms() - t0;
    fprintf(stderr, "%lld ms: %lld admitted, %lld refused, %lld other\n", t, admitted, refused, other);
    assert_int_equal(other, 0);
    assert_true(admitted <= 5 + 20 * t / 1000);
    assert_true(admitted >= 5);
    assert_true(refused > 0);
    assert_int_equal(stock(v), 100000 - admitted);
    assert_int_equal(metric("seckill_rate_limited_total{scope=\"total\"} "), refused);
    assert_int_equal(skt_serve_stop(&sv), 0);
}

/* A malformed limit, as a flag or in the environment, exits 64 before
 * anything starts, saying which and why. */
static void malformed_limit_exits_64_with_a_message(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"--rate-per-user", "5/x"}, {"--rate-per-user", "0"},       {"--rate-total", "5/s:"},
        {"--rate-total", "-1/s"},   {"--rate-total", "10/s:2junk"}, {"--rate-per-user", "1/d:50000"},
    };
    char out[4096];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *argv[] = {SECKILL_BIN, "serve", "--listen", "127.0.0.1:0", bad[i][0], bad[i][1], NULL};
        int rc = skt_run_err(out, sizeof out, argv);
        fprintf(stderr, "%s %s: exit %d: %s", bad[i][0], bad[i][1], rc, out);
        assert_int_equal(rc, 64);
        assert_non_null(strstr(out, bad[i][0]));
        assert_non_null(strstr(out, "RATE[/UNIT][:BURST]"));
    }
    const char *sh[] = {"/bin/sh", "-c", "SECKILL_RATE_TOTAL=lots exec " SECKILL_BIN " serve --listen 127.0.0.1:0",
                        NULL};
    int rc = skt_run_err(out, sizeof out, sh);
    fprintf(stderr, "SECKILL_RATE_TOTAL=lots: exit %d: %s", rc, out);
    assert_int_equal(rc, 64);
    assert_non_null(strstr(out, "SECKILL_RATE_TOTAL"));
}

int main(int argc, char **argv)
{
    int rc = skt_backend_init(argc, argv);
    if (rc) return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(user_over_its_rate_gets_429_and_others_go_on),
        cmocka_unit_test(user_refused_by_its_limit_takes_no_total_permit),
        cmocka_unit_test(total_limit_caps_the_admitted_orders_in_a_window),
        cmocka_unit_test(malformed_limit_exits_64_with_a_message),
    };
    rc = cmocka_run_group_tests_name(skt_backend_name(), tests, setup, teardown);
    skt_backend_stop();
    return rc;
}
