/*
 * The HTTP API end to end, on a real `seckill serve` (redis strategy) and
 * a real redis-server, Sentinel setup or Cluster (tests/target.h): authentication (forged, expired and malformed
 * tokens are 401), every kind of malformed request (a 4xx with a JSON
 * error, and the server still answers afterwards), the voucher and order
 * routes, the sale window, keep-alive, /healthz and /metrics, and
 * `seckill token`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/log.h"
#include "common/skutil.h"
#include "dlock.h"
#include "service/auth.h"
#include "sk_test.h"

static th_target srv;
static skt_dir dir;
static skt_serve sv;
static char admin[256], user1[256], user2[256];

static int setup(void **state)
{
    (void)state;
    return skt_app_start(&srv, &dir, &sv, admin, user1, user2, sizeof admin);
}

static int teardown(void **state)
{
    (void)state;
    return skt_app_stop(&srv, &dir, &sv);
}

/* A 4xx whose body is {"error": code}. */
static void expect_error(int status, const char *body, int want_status, const char *want_code)
{
    if (status != want_status || strcmp(skt_json_str(body, "error"), want_code) != 0)
        fprintf(stderr, "got %d %s, want %d %s\n", status, body, want_status, want_code);
    assert_int_equal(status, want_status);
    assert_string_equal(skt_json_str(body, "error"), want_code);
}

/* A 401 whose body names why: {"error":"unauthorized","reason":R}. */
static void expect_401(int status, const char *body, const char *reason)
{
    expect_error(status, body, 401, "unauthorized");
    if (strcmp(skt_json_str(body, "reason"), reason) != 0) fprintf(stderr, "got %s, want reason %s\n", body, reason);
    assert_string_equal(skt_json_str(body, "reason"), reason);
}

/* The whole answer to a POST with `token` (NULL: no Authorization) carries
 * "WWW-Authenticate: Bearer realm="seckill"..." containing `want`. */
static void expect_www_authenticate(const char *path, const char *token, const char *want)
{
    char req[1024], resp[4096], auth[512] = "";
    if (token) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", token);
    int n = snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: 0\r\nConnection: close\r\n\r\n",
                     path, auth);
    int fd = skt_connect(sv.port);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, req, (size_t)n), n);
    size_t len = 0;
    ssize_t k;
    while (len < sizeof resp - 1 && (k = read(fd, resp + len, sizeof resp - 1 - len)) > 0) len += (size_t)k;
    resp[len] = '\0';
    close(fd);
    const char *h = strstr(resp, "WWW-Authenticate: Bearer realm=\"seckill\"");
    if (!h || !strstr(h, want)) fprintf(stderr, "want %s in:\n%s\n", want, resp);
    assert_non_null(h);
    assert_non_null(strstr(h, want));
}

static long long now_s(void)
{
    return (long long)time(NULL);
}

/* The value of an unlabelled metric in a Prometheus text body, or -1. */
static double metric(const char *body, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(body, key);
    return p ? atof(p + strlen(key)) : -1;
}

static void healthz_is_ok_and_metrics_show_requests_process_and_lock_families(void **state)
{
    (void)state;
    char resp[65536];
    assert_int_equal(skt_http(sv.port, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    assert_string_equal(skt_json_str(resp, "status"), "ok");
    assert_string_equal(skt_json_str(resp, "strategy"), "redis");
    assert_int_equal(skt_http(sv.port, "GET", "/metrics", NULL, NULL, resp, sizeof resp), 200);
    assert_non_null(strstr(resp, "seckill_requests_total{route=\"healthz\",status=\"200\"} "));
    assert_non_null(strstr(resp, "seckill_request_duration_seconds_bucket{route=\"healthz\",le=\"+Inf\"}"));
    assert_non_null(strstr(resp, "seckill_stream_lag "));
    assert_non_null(strstr(resp, "\nseckill_orders_in_flight 0\n")); /* none waits: every answer given */
    assert_non_null(strstr(resp, "seckill_orders_total{outcome=\"sold_out\"}"));
    /* Build info and the standard process metrics. */
    char want[256];
    snprintf(want, sizeof want, "\nseckill_build_info{version=\"%s\",libdlock=\"%s\",strategy=\"redis\"} 1\n",
             DLOCK_VERSION, dlock_version());
    assert_non_null(strstr(resp, want));
    assert_non_null(strstr(resp, "# TYPE process_cpu_seconds_total counter\n"));
    double cpu = metric(resp, "process_cpu_seconds_total");
    double rss = metric(resp, "process_resident_memory_bytes");
    double fds = metric(resp, "process_open_fds");
    double start = metric(resp, "process_start_time_seconds");
    double maxfds = metric(resp, "process_max_fds");
    fprintf(stderr, "cpu %.2f s, rss %.0f, fds %.0f of %.0f, started %.2f (now %lld)\n", cpu, rss, fds, maxfds, start,
            now_s());
    assert_true(cpu >= 0 && cpu < 3600);
    assert_true(rss > 1e6 && rss < 1e10);
    assert_true(fds >= 5 && fds <= maxfds); /* stdio, listen socket, Redis, database, ... */
    assert_true(start > (double)now_s() - 600 && start <= (double)now_s() + 1);
    /* The library's lock metrics: every family declared; no samples, since
     * the redis strategy takes no lock (the lock strategy's are checked in
     * buyer_retrying_after_sold_out_finds_its_order_with_either_strategy). */
    assert_non_null(strstr(resp, "\n# TYPE dlock_acquisitions_total counter\n"));
    assert_non_null(strstr(resp, "\n# TYPE dlock_wait_seconds histogram\n"));
    assert_non_null(strstr(resp, "\n# TYPE dlock_hold_seconds histogram\n"));
    assert_null(strstr(resp, "dlock_acquisitions_total{"));
    /* Open connections are descriptors more. Four of them, and at least
     * two more counted: the service may close a descriptor of its own
     * meanwhile (the connection of the scrape before, an idle one). */
    int held[4];
    for (int i = 0; i < 4; i++) {
        held[i] = skt_connect(sv.port);
        assert_true(held[i] >= 0);
        assert_int_equal(skt_request(held[i], "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    }
    assert_int_equal(skt_http(sv.port, "GET", "/metrics", NULL, NULL, resp, sizeof resp), 200);
    assert_true(metric(resp, "process_open_fds") >= fds + 2);
    for (int i = 0; i < 4; i++) close(held[i]);
}

static void forged_expired_and_malformed_tokens_are_refused_with_their_reason(void **state)
{
    (void)state;
    char resp[4096], tok[512];
    long long v = skt_voucher(sv.port, &dir, "tokens", 100, now_s() - 10, now_s() + 3600);
    assert_true(v > 0);
    char path[64];
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);

    /* No header at all. */
    expect_401(skt_http(sv.port, "POST", path, NULL, NULL, resp, sizeof resp), resp, "missing");
    /* Expired. */
    skt_token(&dir, 5, 1, tok, sizeof tok);
    expect_401(skt_http(sv.port, "POST", path, tok, NULL, resp, sizeof resp), resp, "expired");
    /* Each reason in the WWW-Authenticate header too (RFC 6750). */
    expect_www_authenticate(path, tok, "error=\"invalid_token\", error_description=\"token expired\"");
    expect_www_authenticate(path, NULL, "Bearer realm=\"seckill\"\r\n");
    expect_www_authenticate(path, "5.x", "error=\"invalid_token\", error_description=\"malformed token\"");
    /* Forged: each part changed in turn. */
    skt_token(&dir, 5, 0, tok, sizeof tok);
    char forged[512];
    snprintf(forged, sizeof forged, "%s", tok);
    size_t n = strlen(forged);
    forged[n - 1] = forged[n - 1] == '0' ? '1' : '0';
    expect_401(skt_http(sv.port, "POST", path, forged, NULL, resp, sizeof resp), resp, "bad_signature");
    expect_www_authenticate(path, forged, "error=\"invalid_token\", error_description=\"bad signature\"");
    snprintf(forged, sizeof forged, "6%s", tok + 1); /* another user, same MAC */
    expect_401(skt_http(sv.port, "POST", path, forged, NULL, resp, sizeof resp), resp, "bad_signature");
    snprintf(forged, sizeof forged, "%s", tok);
    char *dot = strchr(forged, '.');
    dot[1] = dot[1] == '9' ? '8' : '9'; /* another expiry */
    expect_401(skt_http(sv.port, "POST", path, forged, NULL, resp, sizeof resp), resp, "bad_signature");
    /* Signed with another secret. */
    unsigned char other[] = "another-secret-0123456789";
    assert_int_equal(sk_token_make(other, sizeof other - 1, 5, now_s() + 100, forged, sizeof forged), 0);
    expect_401(skt_http(sv.port, "POST", path, forged, NULL, resp, sizeof resp), resp, "bad_signature");
    /* In one thread, alternating secrets (each thread keeps a keyed MAC
     * context): every check uses the secret it is given. */
    int64_t uid = -1;
    assert_int_equal(sk_token_verify(other, sizeof other - 1, forged, strlen(forged), now_s(), &uid), 0);
    assert_int_equal(uid, 5);
    assert_int_equal(sk_token_verify(dir.secret, dir.secret_len, forged, strlen(forged), now_s(), &uid),
                     SK_TOKEN_BAD_SIGNATURE);
    assert_int_equal(sk_token_verify(dir.secret, dir.secret_len, tok, strlen(tok), now_s(), &uid), 0);
    assert_int_equal(sk_token_verify(other, sizeof other - 1, tok, strlen(tok), now_s(), &uid), SK_TOKEN_BAD_SIGNATURE);
    assert_int_equal(sk_token_verify(other, sizeof other - 2, forged, strlen(forged), now_s(), &uid),
                     SK_TOKEN_BAD_SIGNATURE);
    /* Expired is said only of a token this secret signed. */
    assert_int_equal(sk_token_make(other, sizeof other - 1, 5, now_s() - 1, forged, sizeof forged), 0);
    assert_int_equal(sk_token_verify(other, sizeof other - 1, forged, strlen(forged), now_s(), &uid), SK_TOKEN_EXPIRED);
    assert_int_equal(sk_token_verify(dir.secret, dir.secret_len, forged, strlen(forged), now_s(), &uid),
                     SK_TOKEN_BAD_SIGNATURE);
    /* Malformed. */
    static const char *const bad[] = {
        "",
        "abc",
        "5",
        "5.",
        "5.99999999999",
        "5.9999999999.",
        ".9999999999.00",
        "-5.9999999999.00",
        "05.9999999999.0000000000000000000000000000000000000000000000000000000000000000",
        "5.9999999999.ZZ00000000000000000000000000000000000000000000000000000000000000",
        "5.9999999999.0000000000000000000000000000000000000000000000000000000000000000.1",
        "99999999999999999999.9999999999.0000000000000000000000000000000000000000000000000000000000000000",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_401(skt_http(sv.port, "POST", path, bad[i], NULL, resp, sizeof resp), resp, "malformed");
    /* Upper-case hex is not the canonical MAC spelling. */
    snprintf(forged, sizeof forged, "%s", tok);
    for (char *p = strrchr(forged, '.'); *p; p++)
        if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 'a' + 'A');
    expect_401(skt_http(sv.port, "POST", path, forged, NULL, resp, sizeof resp), resp, "malformed");
    /* Wrong scheme, and a huge header. */
    char raw[8192];
    int len = snprintf(raw, sizeof raw,
                       "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Basic %s\r\n"
                       "Content-Length: 0\r\n\r\n",
                       path, tok);
    expect_error(skt_raw(sv.port, raw, (size_t)len, resp, sizeof resp), resp, 401, "unauthorized");
    char big[4096];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    len = snprintf(raw, sizeof raw,
                   "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Content-Length: 0\r\n\r\n",
                   path, big);
    expect_error(skt_raw(sv.port, raw, (size_t)len, resp, sizeof resp), resp, 401, "unauthorized");
    /* "bearer" in any case, extra spaces: accepted. */
    len = snprintf(raw, sizeof raw,
                   "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: bEARER   %s\r\n"
                   "Content-Length: 0\r\n\r\n",
                   path, tok);
    assert_int_equal(skt_raw(sv.port, raw, (size_t)len, resp, sizeof resp), 201);
    /* A token the CLI made works. */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s token --secret-file %s --ttl 60 77", SECKILL_BIN, dir.secret_file);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(tok, sizeof tok, p));
    assert_int_equal(pclose(p), 0);
    tok[strcspn(tok, "\n")] = '\0';
    assert_int_equal(skt_http(sv.port, "POST", path, tok, NULL, resp, sizeof resp), 201);
    assert_int_equal(strncmp(tok, "77.", 3), 0);
}

static void voucher_reads_back_as_created_and_only_the_admin_creates_one(void **state)
{
    (void)state;
    char resp[4096], body[512];
    long long b = now_s() - 5, e = now_s() + 3600;
    snprintf(body, sizeof body, "{\"title\":\"caf\\u00e9 \\\"50%%\\\"\",\"stock\":7,\"begin\":%lld,\"end\":%lld}", b,
             e);
    assert_int_equal(skt_http(sv.port, "POST", "/api/vouchers", admin, body, resp, sizeof resp), 201);
    long long id = skt_json_int(resp, "id");
    assert_true(id > 0);
    char path[64];
    snprintf(path, sizeof path, "/api/vouchers/%lld", id);
    assert_int_equal(skt_http(sv.port, "GET", path, NULL, NULL, resp, sizeof resp), 200);
    assert_int_equal(skt_json_int(resp, "id"), id);
    assert_string_equal(skt_json_str(resp, "title"), "caf\xc3\xa9 \"50%\"");
    assert_int_equal(skt_json_int(resp, "stock"), 7);
    assert_int_equal(skt_json_int(resp, "begin"), b);
    assert_int_equal(skt_json_int(resp, "end"), e);
    /* Only the admin creates. */
    expect_error(skt_http(sv.port, "POST", "/api/vouchers", user1, body, resp, sizeof resp), resp, 403, "forbidden");
    expect_error(skt_http(sv.port, "POST", "/api/vouchers", NULL, body, resp, sizeof resp), resp, 401, "unauthorized");
    /* Unknown and malformed ids. */
    expect_error(skt_http(sv.port, "GET", "/api/vouchers/999999", NULL, NULL, resp, sizeof resp), resp, 404,
                 "no_voucher");
    static const char *const bad_ids[] = {"abc",  "-1",  "007", "1.0", "9223372036854775808", "99999999999999999999999",
                                          "1%20", "%31", "1%00"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
        snprintf(path, sizeof path, "/api/vouchers/%s", bad_ids[i]);
        int st = skt_http(sv.port, "GET", path, NULL, NULL, resp, sizeof resp);
        if (st != 400) fprintf(stderr, "%s -> %d %s\n", path, st, resp);
        assert_int_equal(st, 400);
        assert_true(skt_json_str(resp, "error")[0] != '\0');
    }
}

static void malformed_requests_get_a_json_4xx_and_the_server_lives_on(void **state)
{
    (void)state;
    char resp[4096];
    static const struct {
        const char *body;
        const char *code;
    } cases[] = {
        {"", "bad_json"},
        {"{", "bad_json"},
        {"nul", "bad_json"},
        {"{\"title\":\"x\",\"stock\":1,\"begin\":1,\"end\":2", "bad_json"},
        {"{\"title\":\"x\",\"stock\":1,\"begin\":1,\"end\":2}garbage", "bad_json"},
        {"{\"title\":\"x\",\"title\":\"y\",\"stock\":1,\"begin\":1,\"end\":2}", "bad_json"},
        {"{\"title\":\"a\\u0000b\",\"stock\":1,\"begin\":1,\"end\":2}", "bad_json"},
        {"[]", "bad_request"},
        {"\"title\"", "bad_json"},
        {"5", "bad_json"},
        {"{}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":1,\"begin\":1}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":1,\"begin\":1,\"end\":2,\"extra\":0}", "bad_request"},
        {"{\"title\":1,\"stock\":1,\"begin\":1,\"end\":2}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":\"1\",\"begin\":1,\"end\":2}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":1.0,\"begin\":1,\"end\":2}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":true,\"begin\":1,\"end\":2}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":null,\"begin\":1,\"end\":2}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":-1,\"begin\":1,\"end\":2}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":100000001,\"begin\":1,\"end\":2}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":1,\"begin\":2,\"end\":2}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":1,\"begin\":-5,\"end\":2}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":1,\"begin\":1,\"end\":99999999999999999999}", "bad_json"},
        {"{\"title\":\"\",\"stock\":1,\"begin\":1,\"end\":2}", "bad_request"},
        {"{\"title\":\"a\\nb\",\"stock\":1,\"begin\":1,\"end\":2}", "bad_request"},
        {"{\"title\":\"x\",\"stock\":1,\"begin\":1,\"end\":2}\xff", "bad_json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int st = skt_http(sv.port, "POST", "/api/vouchers", admin, cases[i].body, resp, sizeof resp);
        if (st != 400 || strcmp(skt_json_str(resp, "error"), cases[i].code) != 0)
            fprintf(stderr, "case %zu: %s -> %d %s\n", i, cases[i].body, st, resp);
        expect_error(st, resp, 400, cases[i].code);
    }
    /* A title one byte too long. */
    char body[1024];
    char title[202];
    memset(title, 'x', 201);
    title[201] = '\0';
    snprintf(body, sizeof body, "{\"title\":\"%s\",\"stock\":1,\"begin\":1,\"end\":2}", title);
    expect_error(skt_http(sv.port, "POST", "/api/vouchers", admin, body, resp, sizeof resp), resp, 400, "bad_request");
    /* Huge bodies: announced, and chunked. */
    char raw[16384];
    int len = snprintf(raw, sizeof raw,
                       "POST /api/vouchers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                       "Content-Length: 100000000\r\n\r\n{\"title\":",
                       admin);
    expect_error(skt_raw(sv.port, raw, (size_t)len, resp, sizeof resp), resp, 413, "too_large");
    len = snprintf(raw, sizeof raw,
                   "POST /api/vouchers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n",
                   admin);
    for (int i = 0; i < 3; i++) {
        len += snprintf(raw + len, sizeof raw - (size_t)len, "1000\r\n");
        memset(raw + len, ' ', 4096);
        len += 4096;
        len += snprintf(raw + len, sizeof raw - (size_t)len, "\r\n");
    }
    len += snprintf(raw + len, sizeof raw - (size_t)len, "0\r\n\r\n");
    expect_error(skt_raw(sv.port, raw, (size_t)len, resp, sizeof resp), resp, 413, "too_large");
    /* Unknown paths and wrong methods. */
    static const char *const paths[] = {"/",
                                        "/api",
                                        "/api/",
                                        "/api/vouchers/",
                                        "/api/vouchers//orders",
                                        "/api/vouchers/1/orders/",
                                        "/api/vouchers/1/orderx",
                                        "/api/orders",
                                        "/api/orders/1/x",
                                        "/healthz/",
                                        "/API/vouchers",
                                        "/api/vouchers/1/orders/1"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
        expect_error(skt_http(sv.port, "GET", paths[i], admin, NULL, resp, sizeof resp), resp, 404, "not_found");
    expect_error(skt_http(sv.port, "DELETE", "/api/vouchers", admin, NULL, resp, sizeof resp), resp, 405,
                 "method_not_allowed");
    expect_error(skt_http(sv.port, "DELETE", "/api/vouchers/1", admin, NULL, resp, sizeof resp), resp, 405,
                 "method_not_allowed");
    expect_error(skt_http(sv.port, "GET", "/api/vouchers/1/orders", admin, NULL, resp, sizeof resp), resp, 405,
                 "method_not_allowed");
    expect_error(skt_http(sv.port, "POST", "/api/orders/1", admin, NULL, resp, sizeof resp), resp, 405,
                 "method_not_allowed");
    expect_error(skt_http(sv.port, "PUT", "/healthz", admin, NULL, resp, sizeof resp), resp, 405, "method_not_allowed");
    /* Garbage on the wire: MHD answers 400 itself; the server lives on. */
    static const char garbage[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n";
    int st = skt_raw(sv.port, garbage, sizeof garbage - 1, resp, sizeof resp);
    assert_true(st == -1 || (st >= 400 && st < 500));
    assert_int_equal(skt_http(sv.port, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
}

static void one_order_per_user_seen_by_its_owner_within_the_sale_window(void **state)
{
    (void)state;
    char resp[4096], path[96], opath[96];
    long long v = skt_voucher(sv.port, &dir, "one left", 1, now_s() - 5, now_s() + 3600);
    assert_true(v > 0);
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);
    assert_int_equal(skt_http(sv.port, "POST", path, user1, NULL, resp, sizeof resp), 201);
    char oid[32];
    snprintf(oid, sizeof oid, "%s", skt_json_str(resp, "order_id"));
    assert_true(strlen(oid) > 0);
    expect_error(skt_http(sv.port, "POST", path, user1, NULL, resp, sizeof resp), resp, 409, "already_ordered");
    expect_error(skt_http(sv.port, "POST", path, user2, NULL, resp, sizeof resp), resp, 410, "sold_out");
    /* The order: pending or created at once, created after the writer. */
    snprintf(opath, sizeof opath, "/api/orders/%s", oid);
    assert_int_equal(skt_http(sv.port, "GET", opath, user1, NULL, resp, sizeof resp), 200);
    assert_string_equal(skt_json_str(resp, "order_id"), oid);
    assert_int_equal(skt_json_int(resp, "user_id"), 1);
    assert_int_equal(skt_json_int(resp, "voucher_id"), v);
    const char *status = skt_json_str(resp, "status");
    assert_true(strcmp(status, "pending") == 0 || strcmp(status, "created") == 0);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM orders WHERE id = %s", oid);
    assert_int_equal(skt_db_wait(&dir, sql, 1, 10000), 1);
    assert_int_equal(skt_http(sv.port, "GET", opath, user1, NULL, resp, sizeof resp), 200);
    assert_string_equal(skt_json_str(resp, "status"), "created");
    /* Not the owner: not found. The admin: found. */
    expect_error(skt_http(sv.port, "GET", opath, user2, NULL, resp, sizeof resp), resp, 404, "no_order");
    assert_int_equal(skt_http(sv.port, "GET", opath, admin, NULL, resp, sizeof resp), 200);
    expect_error(skt_http(sv.port, "GET", opath, NULL, NULL, resp, sizeof resp), resp, 401, "unauthorized");
    expect_error(skt_http(sv.port, "GET", "/api/orders/12345", user1, NULL, resp, sizeof resp), resp, 404, "no_order");
    expect_error(skt_http(sv.port, "POST", "/api/vouchers/987654/orders", user1, NULL, resp, sizeof resp), resp, 404,
                 "no_voucher");
    /* The sale window. */
    long long later = skt_voucher(sv.port, &dir, "later", 5, now_s() + 3600, now_s() + 7200);
    long long over = skt_voucher(sv.port, &dir, "over", 5, now_s() - 7200, now_s() - 3600);
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", later);
    expect_error(skt_http(sv.port, "POST", path, user1, NULL, resp, sizeof resp), resp, 403, "not_started");
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", over);
    expect_error(skt_http(sv.port, "POST", path, user1, NULL, resp, sizeof resp), resp, 403, "ended");
    /* Stock as seen by GET: 0 left. */
    snprintf(path, sizeof path, "/api/vouchers/%lld", v);
    assert_int_equal(skt_http(sv.port, "GET", path, NULL, NULL, resp, sizeof resp), 200);
    assert_int_equal(skt_json_int(resp, "stock"), 0);
}

/* A buyer whose 201 was lost retries after the last unit went: 409
 * already_ordered, whichever strategy decides (the lock strategy's early
 * stock check answered 410 sold_out here), so the client finds its
 * order. The other buyer still gets 410. */
static void retry_after_sold_out(int port)
{
    char resp[4096], path[96];
    long long v = skt_voucher(port, &dir, "retry", 1, now_s() - 5, now_s() + 3600);
    assert_true(v > 0);
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);
    assert_int_equal(skt_http(port, "POST", path, user1, NULL, resp, sizeof resp), 201);
    expect_error(skt_http(port, "POST", path, user2, NULL, resp, sizeof resp), resp, 410, "sold_out");
    expect_error(skt_http(port, "POST", path, user1, NULL, resp, sizeof resp), resp, 409, "already_ordered");
    expect_error(skt_http(port, "POST", path, user2, NULL, resp, sizeof resp), resp, 410, "sold_out");
}

/* The lock strategy's /metrics also shows its locks: of the four orders
 * only the first gets as far as the user's lock (the others are refused
 * on the database's stock first), one acquisition, one hold, no failure. */
static void buyer_retrying_after_sold_out_finds_its_order_with_either_strategy(void **state)
{
    (void)state;
    retry_after_sold_out(sv.port);
    skt_serve lk;
    assert_int_equal(skt_serve_start(&lk, &dir, srv.url, "lock", NULL, NULL), 0);
    retry_after_sold_out(lk.port);
    char resp[65536];
    assert_int_equal(skt_http(lk.port, "GET", "/metrics", NULL, NULL, resp, sizeof resp), 200);
    assert_true(metric(resp, "dlock_acquisitions_total{kind=\"lock\"}") == 1);
    assert_true(metric(resp, "dlock_acquire_failures_total{kind=\"lock\",reason=\"timeout\"}") == 0);
    assert_true(metric(resp, "dlock_wait_seconds_bucket{kind=\"lock\",le=\"+Inf\"}") == 1);
    assert_true(metric(resp, "dlock_hold_seconds_count{kind=\"lock\"}") == 1);
    double held = metric(resp, "dlock_hold_seconds_sum{kind=\"lock\"}");
    assert_true(held > 0 && held < 10); /* one transaction under the lock */
    assert_null(strstr(resp, "kind=\"fair\""));
    assert_int_equal(skt_serve_stop(&lk), 0);
}

static void keep_alive_connection_serves_requests_and_errors_alike(void **state)
{
    (void)state;
    char resp[4096];
    int fd = skt_connect(sv.port);
    assert_true(fd >= 0);
    for (int i = 0; i < 50; i++) {
        assert_int_equal(skt_request(fd, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
        /* Errors keep the connection too. */
        assert_int_equal(skt_request(fd, "GET", "/nope", NULL, NULL, resp, sizeof resp), 404);
        assert_int_equal(skt_request(fd, "POST", "/api/vouchers", admin, "{", resp, sizeof resp), 400);
    }
    close(fd);
}

/* The private redis-server of a bare `seckill serve`, from its start-up
 * line: "redis unix://DIR/redis.sock (private redis-server pid N)". */
static int embedded_of(const skt_serve *s, long *pid, char *rdir, size_t cap)
{
    FILE *f = fopen(s->err, "r");
    if (!f) return -1;
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "private redis-server pid ");
        const char *u = strstr(line, "unix://");
        if (p && u && sscanf(p + 25, "%ld", pid) == 1) {
            snprintf(rdir, cap, "%.*s", (int)strcspn(u + 7, " "), u + 7);
            char *slash = strrchr(rdir, '/');
            if (slash) *slash = '\0';
            found = 1;
        }
    }
    fclose(f);
    return found ? 0 : -1;
}

/* Gone or a zombie nobody reaped yet: either way it no longer serves. */
static int process_gone(long pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    int gone = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "State:", 6) == 0) gone = strchr(line, 'Z') != NULL || strchr(line, 'X') != NULL;
    fclose(f);
    return gone;
}

static int wait_gone(long pid)
{
    for (int i = 0; i < 500; i++) {
        if (process_gone(pid)) return 1;
        usleep(10000);
    }
    return 0;
}

static void private_redis_server_stops_with_the_service_even_when_it_is_killed(void **state)
{
    (void)state;
    skt_serve s;
    long pid;
    char rdir[256], resp[1024];
    /* Stopped cleanly: the server is stopped and its directory removed. */
    assert_int_equal(skt_serve_start(&s, &dir, NULL, "redis", NULL, NULL), 0);
    assert_int_equal(embedded_of(&s, &pid, rdir, sizeof rdir), 0);
    assert_false(process_gone(pid));
    long long v = skt_voucher(s.port, &dir, "embedded", 3, now_s() - 5, now_s() + 60);
    assert_true(v > 0);
    assert_int_equal(skt_http(s.port, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    assert_int_equal(skt_serve_stop(&s), 0);
    assert_true(wait_gone(pid));
    assert_int_equal(access(rdir, F_OK), -1);
    /* Killed: the kernel stops the server (PR_SET_PDEATHSIG). */
    assert_int_equal(skt_serve_start(&s, &dir, NULL, "lock", NULL, NULL), 0);
    assert_int_equal(embedded_of(&s, &pid, rdir, sizeof rdir), 0);
    kill(s.pid, SIGKILL);
    assert_true(skt_serve_wait(&s, 5000) == 128 + SIGKILL);
    assert_true(wait_gone(pid));
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", rdir);
    assert_int_equal(system(cmd), 0);
}

/* A whole file into buf (NUL-terminated); its length, or -1. */
static long slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return (long)n;
}

/* Lines of `text` containing `needle`. */
static int count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

/* An RFC 3339 UTC time with milliseconds: 2026-01-02T03:04:05.678Z. */
static int is_timestamp(const char *s)
{
    int y, mo, d, h, mi, sec, ms;
    char z;
    return strlen(s) >= 24 && sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &y, &mo, &d, &h, &mi, &sec, &ms, &z) == 8 &&
           z == 'Z';
}

/* The HTTP threads, when --threads is not given: 2 a CPU (at least 4)
 * where an order never waits in its thread (the redis strategy without
 * --replica-acks), 4 a CPU (at least 8) where it does. The start-up line
 * on stdout says how many. */
static void default_threads_are_fewer_where_orders_never_wait_in_them(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    char url[64], text[4096];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", r.port);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long parks = ncpu * 2 < 4 ? 4 : ncpu * 2, waits = ncpu * 4 < 8 ? 8 : ncpu * 4;
    const char *acks[] = {"--replica-acks", "1", NULL};
    struct {
        const char *strategy;
        const char *const *extra;
        long want;
    } cases[] = {{"redis", NULL, parks}, {"lock", NULL, waits}, {"redis", acks, waits}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        skt_serve s;
        assert_int_equal(skt_serve_start(&s, &dir, url, cases[i].strategy, cases[i].extra, NULL), 0);
        assert_true(slurp(s.out, text, sizeof text) > 0);
        char want[96];
        snprintf(want, sizeof want, "(strategy %s, %ld threads)", cases[i].strategy, cases[i].want);
        if (!strstr(text, want)) fprintf(stderr, "want \"%s\" in: %s\n", want, text);
        assert_non_null(strstr(text, want));
        assert_int_equal(skt_serve_stop(&s), 0);
    }
    th_redis_stop(&r);
}

/* JSON logs: every line of stderr is an object with a timestamp, a level
 * and a message; the start-up line names version, address, strategy,
 * Redis (password masked), database and threads; the access log has one
 * object per request; and with Redis down, its error comes once a second
 * with a count, not once per request. */
static void json_logs_are_one_object_a_line_and_repeated_errors_come_once_a_second(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start(&r, "requirepass s3cret-pw\n"), 0);
    char url[256], access[256], text[65536], resp[1024];
    snprintf(url, sizeof url, "redis://:s3cret-pw@127.0.0.1:%d", r.port);
    snprintf(access, sizeof access, "%s/access.json", dir.path);
    const char *extra[] = {"--log-format", "json", "--access-log", access, "--threads", "3", NULL};
    skt_serve s;
    assert_int_equal(skt_serve_start(&s, &dir, url, "redis", extra, NULL), 0);
    long long v = skt_voucher(s.port, &dir, "logs", 5, now_s() - 5, now_s() + 3600);
    assert_true(v > 0);
    assert_int_equal(skt_http(s.port, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    char path[96];
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);

    /* Redis dies; 40 orders over two seconds are each answered 429. */
    th_redis_stop(&r);
    int64_t t0 = sk_mono_ns();
    for (int i = 0; i < 40; i++) {
        assert_int_equal(skt_http(s.port, "POST", path, user1, NULL, resp, sizeof resp), 429);
        usleep(50000);
    }
    double secs = (double)(sk_mono_ns() - t0) / 1e9;
    assert_int_equal(skt_serve_stop(&s), 0);

    assert_true(slurp(s.err, text, sizeof text) > 0);
    assert_null(strstr(text, "s3cret-pw"));
    int lines = 0, startup = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        if (!j) fprintf(stderr, "not JSON: %s\n", line);
        assert_non_null(j);
        assert_true(is_timestamp(json_string_value(json_object_get(j, "ts"))));
        const char *level = json_string_value(json_object_get(j, "level"));
        assert_non_null(level);
        assert_true(!strcmp(level, "info") || !strcmp(level, "warn") || !strcmp(level, "error"));
        const char *msg = json_string_value(json_object_get(j, "msg"));
        assert_non_null(msg);
        if (strstr(msg, "listening on")) {
            char want[768];
            startup++;
            snprintf(want, sizeof want, "seckill %s (libdlock %s) listening on http://127.0.0.1:%d, strategy redis,",
                     DLOCK_VERSION, dlock_version(), s.port);
            assert_non_null(strstr(msg, want));
            snprintf(want, sizeof want, "redis redis://:***@127.0.0.1:%d, db %s, 3 threads", r.port, dir.db);
            if (!skt_is_postgres()) assert_non_null(strstr(msg, want));
            assert_non_null(strstr(msg, "3 threads"));
            assert_string_equal(level, "info");
        }
        lines++;
        json_decref(j);
    }
    assert_int_equal(startup, 1);
    /* Redis down: once a second from each place, with how many times. */
    assert_true(slurp(s.err, text, sizeof text) > 0);
    int down = count_lines(text, "order script: no answer") + count_lines(text, "order id: ");
    fprintf(stderr, "%d lines about Redis down for 40 orders in %.1f s\n", down, secs);
    assert_true(down >= 1);
    assert_true(down <= 2 * ((int)secs + 2));
    assert_non_null(strstr(text, "times since the last report)"));

    /* The access log: one JSON object per request, in order. */
    assert_true(slurp(access, text, sizeof text) > 0);
    assert_int_equal(count_lines(text, "\n"), 42);
    char *first = strtok(text, "\n");
    json_t *j = json_loads(first, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "remote")), "127.0.0.1");
    assert_string_equal(json_string_value(json_object_get(j, "method")), "POST");
    assert_string_equal(json_string_value(json_object_get(j, "path")), "/api/vouchers");
    assert_string_equal(json_string_value(json_object_get(j, "version")), "HTTP/1.1");
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 201);
    assert_true(is_timestamp(json_string_value(json_object_get(j, "ts"))));
    assert_true(json_number_value(json_object_get(j, "duration_s")) >= 0);
    json_decref(j);
    char *last = NULL;
    for (char *line = strtok(NULL, "\n"); line; line = strtok(NULL, "\n")) last = line;
    j = json_loads(last, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 429);
    assert_string_equal(json_string_value(json_object_get(j, "path")), path);
    json_decref(j);
}

/* Text logs: "TIMESTAMP LEVEL message"; the access log's text line; a
 * level above info hides the start-up line (stdout still has the port);
 * no access log unless asked; bad values are usage errors. */
static void text_logs_follow_the_level_and_the_access_log_is_opt_in(void **state)
{
    (void)state;
    char access[256], text[65536], resp[1024];
    snprintf(access, sizeof access, "%s/access.log", dir.path);
    const char *extra[] = {"--access-log", access, NULL};
    skt_serve s;
    assert_int_equal(skt_serve_start(&s, &dir, srv.url, "lock", extra, NULL), 0);
    assert_int_equal(skt_http(s.port, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    assert_int_equal(skt_http(s.port, "GET", "/nope?x=1", NULL, NULL, resp, sizeof resp), 404);
    assert_int_equal(skt_serve_stop(&s), 0);
    assert_true(slurp(s.err, text, sizeof text) > 0);
    char *line = strstr(text, "listening on");
    assert_non_null(line);
    while (line > text && line[-1] != '\n') line--;
    assert_true(is_timestamp(line));
    assert_memory_equal(line + 24, " info  seckill ", 15);
    assert_true(slurp(access, text, sizeof text) > 0);
    assert_int_equal(count_lines(text, "\n"), 2);
    assert_true(is_timestamp(text));
    assert_non_null(strstr(text, "Z 127.0.0.1 \"GET /healthz HTTP/1.1\" 200 "));
    /* The query string is not part of the path MHD hands over. */
    assert_non_null(strstr(text, "\"GET /nope HTTP/1.1\" 404 "));

    /* --log-level error: no info lines at all. */
    const char *quiet[] = {"--log-level", "error", NULL};
    assert_int_equal(skt_serve_start(&s, &dir, srv.url, "redis", quiet, NULL), 0);
    assert_int_equal(skt_http(s.port, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    assert_int_equal(skt_serve_stop(&s), 0);
    assert_true(slurp(s.err, text, sizeof text) >= 0);
    assert_null(strstr(text, " info "));
    assert_true(slurp(s.out, text, sizeof text) > 0);
    assert_non_null(strstr(text, "seckill: listening on http://127.0.0.1:"));

    const char *bad_level[] = {SECKILL_BIN, "serve", "--log-level", "loud", NULL};
    assert_int_equal(skt_run(NULL, 0, bad_level), 64);
    const char *bad_format[] = {SECKILL_BIN, "serve", "--log-format", "xml", NULL};
    assert_int_equal(skt_run(NULL, 0, bad_format), 64);
}

/* A connection from another loopback address (127.0.0.2), i.e. another
 * client as far as the per-client limit goes. */
static int connect_from(const char *src, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0) goto fail;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) goto fail;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
fail:
    if (fd >= 0) close(fd);
    return -1;
}

/* 1 once the server has closed fd (EOF) within `ms`, 0 if it stays open. */
static int closed_by_server(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0) return 0;
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

/* One client cannot take every connection (--max-connections-per-client:
 * the fifth is closed unanswered while another client is served); all
 * clients together stop at --max-connections; an idle connection is
 * closed after --idle-timeout and its slot is free again. */
static void one_client_cannot_take_every_connection_and_idle_ones_are_closed(void **state)
{
    (void)state;
    char resp[1024];
    skt_serve s;
    const char *extra[] = {
        "--threads", "2", "--max-connections", "16", "--max-connections-per-client", "4", "--idle-timeout", "2", NULL};
    assert_int_equal(skt_serve_start(&s, &dir, srv.url, "redis", extra, NULL), 0);
    /* 8 connections a thread: "auto" waits on them with poll, unless the
     * suite forces a loop (SKT_EVENT_LOOP). */
    char text[4096];
    const char *forced = getenv("SKT_EVENT_LOOP");
    char want[64];
    snprintf(want, sizeof want, "event loop %s,", forced && *forced && strcmp(forced, "auto") != 0 ? forced : "poll");
    assert_true(slurp(s.err, text, sizeof text) > 0);
    if (!strstr(text, want)) fail_msg("no '%s' in the start-up log: %s", want, text);
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = skt_connect(s.port);
        assert_true(fds[i] >= 0);
        assert_int_equal(skt_request(fds[i], "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    }
    int fifth = skt_connect(s.port);
    assert_true(fifth >= 0);
    assert_int_equal(skt_request(fifth, "GET", "/healthz", NULL, NULL, resp, sizeof resp), -1);
    close(fifth);
    /* Another client is served meanwhile. */
    int other = connect_from("127.0.0.2", s.port);
    assert_true(other >= 0);
    assert_int_equal(skt_request(other, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    close(other);
    /* Idle for longer than the timeout: closed by the server, and the
     * client has its slots back. */
    int64_t t0 = sk_mono_ns();
    assert_true(closed_by_server(fds[0], 5000));
    double idle = (double)(sk_mono_ns() - t0) / 1e9;
    fprintf(stderr, "idle connection closed after %.2f s more\n", idle);
    assert_true(idle < 4.0);
    /* All four were idle as long: each is closed, and then (MHD frees a
     * slot when it cleans the connection up, a moment after the close)
     * the client is served again. */
    for (int i = 1; i < 4; i++) assert_true(closed_by_server(fds[i], 2000));
    for (int i = 0; i < 4; i++) close(fds[i]);
    int st = -1;
    for (int i = 0; i < 20 && st != 200; i++) {
        st = skt_http(s.port, "GET", "/healthz", NULL, NULL, resp, sizeof resp);
        if (st != 200) usleep(50000);
    }
    assert_int_equal(st, 200);
    assert_int_equal(skt_serve_stop(&s), 0);

    /* All clients together: one thread, two connections. */
    const char *global[] = {"--threads", "1", "--max-connections", "2", "--max-connections-per-client", "0", NULL};
    assert_int_equal(skt_serve_start(&s, &dir, srv.url, "redis", global, NULL), 0);
    int a = skt_connect(s.port), b = connect_from("127.0.0.2", s.port), c = connect_from("127.0.0.3", s.port);
    assert_true(a >= 0 && b >= 0 && c >= 0);
    assert_int_equal(skt_request(a, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    assert_int_equal(skt_request(b, "GET", "/healthz", NULL, NULL, resp, sizeof resp), 200);
    assert_int_equal(skt_request(c, "GET", "/healthz", NULL, NULL, resp, sizeof resp), -1);
    close(a);
    close(b);
    close(c);
    assert_int_equal(skt_serve_stop(&s), 0);

    const char *below_threads[] = {SECKILL_BIN, "serve", "--threads", "8", "--max-connections", "4", NULL};
    assert_int_equal(skt_run(NULL, 0, below_threads), 64);
    const char *bad_timeout[] = {SECKILL_BIN, "serve", "--idle-timeout", "-1", NULL};
    assert_int_equal(skt_run(NULL, 0, bad_timeout), 64);
    const char *bad_loop[] = {SECKILL_BIN, "serve", "--event-loop", "select", NULL};
    assert_int_equal(skt_run(NULL, 0, bad_loop), 64);
}

/* HTTP/1.1 without Host is 400 with a JSON error; HTTP/1.0 needs none. */
static void http_1_1_request_without_host_is_refused(void **state)
{
    (void)state;
    char resp[1024];
    static const char no_host[] = "GET /healthz HTTP/1.1\r\n\r\n";
    expect_error(skt_raw(sv.port, no_host, sizeof no_host - 1, resp, sizeof resp), resp, 400, "missing_host");
    static const char post_no_host[] = "POST /api/vouchers HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
    expect_error(skt_raw(sv.port, post_no_host, sizeof post_no_host - 1, resp, sizeof resp), resp, 400, "missing_host");
    static const char old[] = "GET /healthz HTTP/1.0\r\n\r\n";
    assert_int_equal(skt_raw(sv.port, old, sizeof old - 1, resp, sizeof resp), 200);
    static const char with_host[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(skt_raw(sv.port, with_host, sizeof with_host - 1, resp, sizeof resp), 200);
}

/* A usage error is one line saying what is wrong and the hint to use
 * --help (not the whole usage text), with exit status 64. */
static void usage_error_is_one_line_and_exit_status_64(void **state)
{
    (void)state;
    static const char *const hint = "Try 'seckill --help' for more information.\n";
    struct {
        const char *argv[8];
        const char *line;
    } cases[] = {
        {{SECKILL_BIN, "serve", "--threads", "0", NULL}, "seckill: --threads wants 1 to 1024\n"},
        {{SECKILL_BIN, "serve", "--bogus", NULL}, "seckill serve: unknown option --bogus\n"},
        {{SECKILL_BIN, "serve", "--db", NULL}, "seckill serve: option --db needs a value\n"},
        {{SECKILL_BIN, "verify", "-x", NULL}, "seckill verify: unknown option -x\n"},
        {{SECKILL_BIN, "load", "--users", "3", NULL},
         "seckill: load needs --url, --voucher (or --stock), --users and --concurrency\n"},
        {{SECKILL_BIN, "token", NULL}, "seckill: token wants one USER_ID, a decimal number (0 is the admin)\n"},
        {{SECKILL_BIN, "frob", NULL}, "seckill: unknown command \"frob\"\n"},
        {{SECKILL_BIN, NULL}, "seckill: no command (serve, token, load or verify)\n"},
    };
    char out[4096], want[512];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = skt_run_err(out, sizeof out, cases[i].argv);
        snprintf(want, sizeof want, "%s%s", cases[i].line, hint);
        if (rc != 64 || strcmp(out, want) != 0) fprintf(stderr, "case %zu: exit %d, printed:\n%s", i, rc, out);
        assert_int_equal(rc, 64);
        assert_string_equal(out, want);
    }
    /* --help itself still prints the whole text, on stdout, and exits 0. */
    const char *help[] = {SECKILL_BIN, "--help", NULL};
    assert_int_equal(skt_run(out, sizeof out, help), 0);
    assert_non_null(strstr(out, "usage: seckill serve"));
}

/* The example systemd unit (examples/seckill.service): systemd-analyze
 * verify accepts it, with ExecStart pointed at the built binary (the check
 * is skipped, said so, where systemd-analyze is missing), and `seckill
 * serve` accepts every option its ExecStart gives (parsed up to --help,
 * which then exits 0), so the example cannot drift from the options. */
static void example_systemd_unit_verifies_and_serve_takes_its_options(void **state)
{
    (void)state;
    char unit[256], text[8192];
    snprintf(unit, sizeof unit, "%s/examples/seckill.service", SECKILL_SOURCE_DIR);
    long n = slurp(unit, text, sizeof text);
    assert_true(n > 0);
    /* ExecStart, its continuation lines joined. */
    char *e = strstr(text, "\nExecStart=");
    assert_non_null(e);
    e += 11;
    char cmd[2048];
    size_t k = 0;
    for (; *e && *e != '\n' && k < sizeof cmd - 1; e++) {
        if (*e == '\\' && e[1] == '\n') {
            e++;
            continue;
        }
        cmd[k++] = *e;
    }
    cmd[k] = '\0';
    const char *argv[64];
    int argc = 0;
    for (char *w = strtok(cmd, " "); w && argc < 62; w = strtok(NULL, " ")) argv[argc++] = w;
    assert_true(argc > 2);
    assert_string_equal(argv[0], "/usr/local/bin/seckill");
    assert_string_equal(argv[1], "serve");
    argv[0] = SECKILL_BIN;
    argv[argc++] = "--help";
    argv[argc] = NULL;
    char out[8192];
    assert_int_equal(skt_run(out, sizeof out, argv), 0);
    assert_non_null(strstr(out, "usage: seckill serve"));

    if (access("/usr/bin/systemd-analyze", X_OK) != 0 && access("/bin/systemd-analyze", X_OK) != 0) {
        fprintf(stderr, "SKIPPED: systemd-analyze verify (systemd-analyze not installed)\n");
        return;
    }
    /* A copy whose ExecStart is the built binary: verify checks that it
     * exists. --man=no: the man page need not be installed here. */
    char copy[256], sed[1024];
    snprintf(copy, sizeof copy, "%s/seckill.service", dir.path);
    snprintf(sed, sizeof sed, "sed 's|/usr/local/bin/seckill|%s|' '%s' > '%s'", SECKILL_BIN, unit, copy);
    assert_int_equal(system(sed), 0);
    const char *verify[] = {"/usr/bin/env", "systemd-analyze", "verify", "--man=no", copy, NULL};
    int rc = skt_run_err(out, sizeof out, verify);
    if (rc != 0 || out[0]) fprintf(stderr, "systemd-analyze verify: exit %d\n%s", rc, out);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "");
    /* And it would notice a broken one. */
    snprintf(sed, sizeof sed, "sed -i 's|^ExecStart=/|ExecStart=|' '%s'", copy);
    assert_int_equal(system(sed), 0);
    assert_int_not_equal(skt_run_err(out, sizeof out, verify), 0);
}

/* Passwords never reach a log line, in every spelling of a URL. */
static void passwords_never_reach_a_log_line(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"redis://:pw@h:6379/0", "redis://:***@h:6379/0"},
        {"redis://user:pw@h", "redis://user:***@h"},
        {"redis://h:6379", "redis://h:6379"},
        {"unix:///tmp/r.sock?db=2", "unix:///tmp/r.sock?db=2"},
        {"redis-sentinel://:p@ss@a:1,b:2/m", "redis-sentinel://:***@a:1,b:2/m"},
        {"redis://u:p/s?s#w@h:1/2", "redis://u:***@h:1/2"},
        {"redis-cluster://:p/w@a:1,b:2", "redis-cluster://:***@a:1,b:2"},
        {"postgres://u:secret@db/x?sslmode=require", "postgres://u:***@db/x?sslmode=require"},
        {"postgresql:///x?host=/tmp&password=secret&user=u", "postgresql:///x?host=/tmp&password=***&user=u"},
        {"host=/tmp password=secret dbname=x", "host=/tmp password=*** dbname=x"},
        {"seckill.db", "seckill.db"},
    };
    char out[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sk_mask_url(cases[i][0], out, sizeof out);
        assert_string_equal(out, cases[i][1]);
    }
}

int main(int argc, char **argv)
{
    int rc = skt_backend_init(argc, argv);
    if (rc) return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(healthz_is_ok_and_metrics_show_requests_process_and_lock_families),
        cmocka_unit_test(forged_expired_and_malformed_tokens_are_refused_with_their_reason),
        cmocka_unit_test(voucher_reads_back_as_created_and_only_the_admin_creates_one),
        cmocka_unit_test(malformed_requests_get_a_json_4xx_and_the_server_lives_on),
        cmocka_unit_test(one_order_per_user_seen_by_its_owner_within_the_sale_window),
        cmocka_unit_test(keep_alive_connection_serves_requests_and_errors_alike),
        cmocka_unit_test(private_redis_server_stops_with_the_service_even_when_it_is_killed),
        cmocka_unit_test(buyer_retrying_after_sold_out_finds_its_order_with_either_strategy),
        cmocka_unit_test(default_threads_are_fewer_where_orders_never_wait_in_them),
        cmocka_unit_test(json_logs_are_one_object_a_line_and_repeated_errors_come_once_a_second),
        cmocka_unit_test(text_logs_follow_the_level_and_the_access_log_is_opt_in),
        cmocka_unit_test(passwords_never_reach_a_log_line),
        cmocka_unit_test(one_client_cannot_take_every_connection_and_idle_ones_are_closed),
        cmocka_unit_test(http_1_1_request_without_host_is_refused),
        cmocka_unit_test(usage_error_is_one_line_and_exit_status_64),
        cmocka_unit_test(example_systemd_unit_verifies_and_serve_takes_its_options),
    };
    rc = cmocka_run_group_tests_name(skt_backend_name(), tests, setup, teardown);
    skt_backend_stop();
    return rc;
}
