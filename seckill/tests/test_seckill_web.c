/*
 * seckill as a web API, end to end on a real `seckill serve` and a real
 * redis-server: an order is answered within --order-timeout whatever
 * Redis does (a SIGSTOPped server here), liveness and readiness are
 * separate, every 4xx is a JSON body and a validation error names the
 * field and the rule, created resources carry Location and read back,
 * vouchers are listed a page at a time, a buyer reads back its own order,
 * GET /openapi.json describes every route of the route table and every
 * status each answers, `seckill token` never makes a secret, and `serve`
 * says when it has stopped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "service/routes.h"
#include "sk_test.h"
#include "tools/httpc.h"

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

/* A case that failed with Redis stopped leaves it stopped: wake it for
 * the next one (SIGCONT on a running server does nothing). */
static int after_test(void **state)
{
    (void)state;
    th_target_resume(&srv, "seckill:{v:0}:stock");
    return 0;
}

static long long now_s(void)
{
    return (long long)time(NULL);
}

/* One whole answer: the status, the headers (as sent, "\r\n" between)
 * and the body. */
typedef struct answer {
    int status;
    char head[2048];
    char body[65536];
} answer;

/* Send `raw` on a fresh connection and read until the server closes it
 * (every request here says Connection: close). */
static int exchange(int port, const char *raw, answer *a)
{
    static char buf[262144];
    memset(a, 0, sizeof *a);
    a->status = -1;
    int fd = skt_connect(port);
    if (fd < 0) return -1;
    size_t len = 0;
    if (sk_httpc_send_all(fd, raw, strlen(raw)) == 0) {
        ssize_t k;
        while (len < sizeof buf - 1 && (k = read(fd, buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)k;
    }
    close(fd);
    buf[len] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.1 ", 9) != 0 || !end) return -1;
    a->status = atoi(buf + 9);
    size_t hl = (size_t)(end - buf);
    snprintf(a->head, sizeof a->head, "%.*s", (int)hl, buf);
    snprintf(a->body, sizeof a->body, "%s", end + 4);
    return a->status;
}

/* A request with `token` (NULL: none) and `body` (NULL: none). */
static int call(const char *method, const char *path, const char *token, const char *body, answer *a)
{
    char raw[8192], auth[320] = "";
    if (token) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", token);
    snprintf(raw, sizeof raw, "%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
             method, path, auth, body ? strlen(body) : 0, body ? body : "");
    return exchange(sv.port, raw, a);
}

/* The value of header `name` (case as sent), or "" (static buffer). */
static const char *header(const answer *a, const char *name)
{
    static char out[256];
    out[0] = '\0';
    char key[80];
    snprintf(key, sizeof key, "\r\n%s: ", name);
    const char *p = strstr(a->head, key);
    if (p) {
        p += strlen(key);
        size_t n = strcspn(p, "\r");
        snprintf(out, sizeof out, "%.*s", (int)n, p);
    }
    return out;
}

/* A 4xx or 5xx is a JSON object with a string "error". */
static void expect_json_error(const answer *a, int status, const char *code)
{
    json_t *j = json_loads(a->body, 0, NULL);
    int ok = a->status == status && json_is_object(j) && json_is_string(json_object_get(j, "error")) &&
             strcmp(header(a, "Content-Type"), "application/json") == 0 &&
             (!code || strcmp(json_string_value(json_object_get(j, "error")), code) == 0);
    if (!ok) fprintf(stderr, "want %d %s, got:\n%s\r\n\r\n%s\n", status, code ? code : "", a->head, a->body);
    json_decref(j);
    assert_true(ok);
}

static long long voucher(long stock, long long begin, long long end)
{
    long long v = skt_voucher(sv.port, &dir, "web", stock, begin, end);
    assert_true(v > 0);
    return v;
}

static void stock_key(long long v, char *key, size_t cap)
{
    snprintf(key, cap, "seckill:{v:%lld}:stock", v);
}

/* ------------------------------------------------------------------------ */
/* Fail fast                                                                 */
/* ------------------------------------------------------------------------ */

/* An order sent to a server whose Redis is stopped: its status, and how
 * long it took, in *ms. */
static int order_with_redis_stopped(int port, const skt_dir *d, long long v, int64_t uid, long long *ms, answer *a)
{
    char tok[256], raw[1024], key[64];
    skt_token(d, uid, 0, tok, sizeof tok);
    snprintf(raw, sizeof raw,
             "POST /api/vouchers/%lld/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
             "Content-Length: 0\r\nConnection: close\r\n\r\n",
             v, tok);
    stock_key(v, key, sizeof key);
    assert_int_equal(th_target_pause(&srv, key), 0);
    long long t0 = th_now_ms();
    int st = exchange(port, raw, a);
    *ms = th_now_ms() - t0;
    assert_int_equal(th_target_resume(&srv, key), 0);
    return st;
}

/*
 * Redis stopped (SIGSTOP: connections open, nothing answered) with an
 * order on its way: the buyer is answered 429 busy with Retry-After once
 * the order timeout (default 1 s, here also 300 ms) passes, not after the
 * library's command timeouts (10.2 s before). The bound asserted is 3 s,
 * room for a loaded machine. The order's script runs once Redis wakes, so
 * the buyer finds its order with GET /api/vouchers/ID/order, and its retry
 * is 409: the 429 said "not known yet", never "not taken".
 */
static void order_with_redis_hung_is_answered_within_the_order_timeout(void **state)
{
    (void)state;
    long long v = voucher(10, now_s() - 5, now_s() + 3600);
    answer a;
    /* Warm, and the order ids fetched, while Redis answers. */
    char path[96];
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);
    assert_int_equal(call("POST", path, user1, NULL, &a), 201);
    long long ms;
    int st = order_with_redis_stopped(sv.port, &dir, v, 2, &ms, &a);
    fprintf(stderr, "order with Redis stopped: %d after %lld ms (default order timeout)\n", st, ms);
    expect_json_error(&a, 429, "busy");
    assert_string_equal(header(&a, "Retry-After"), "1");
    assert_true(ms >= 900);
    assert_true(ms < 3000);
    /* Its fate: taken once Redis answered. */
    snprintf(path, sizeof path, "/api/vouchers/%lld/order", v);
    for (int i = 0; i < 100 && call("GET", path, user2, NULL, &a) != 200; i++) usleep(50000);
    assert_int_equal(a.status, 200);
    assert_int_equal(skt_json_int(a.body, "user_id"), 2);
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);
    assert_int_equal(call("POST", path, user2, NULL, &a), 409);

    /* Below a second, by flag. */
    skt_serve fast;
    const char *extra[] = {"--order-timeout", "300", NULL};
    assert_int_equal(skt_serve_start(&fast, &dir, srv.url, "redis", extra, NULL), 0);
    char tok[256];
    skt_token(&dir, 3, 0, tok, sizeof tok);
    assert_int_equal(skt_http(fast.port, "POST", path, tok, NULL, a.body, sizeof a.body), 201);
    st = order_with_redis_stopped(fast.port, &dir, v, 4, &ms, &a);
    fprintf(stderr, "order with Redis stopped: %d after %lld ms (--order-timeout 300)\n", st, ms);
    expect_json_error(&a, 429, "busy");
    assert_true(ms >= 250);
    assert_true(ms < 3000);
    assert_int_equal(skt_serve_stop(&fast), 0);

    /* Order ids run out while Redis is stopped (one a batch here, 128 by
     * default): the next batch is asked for on a thread of its own, and
     * orders that find none are answered busy at once, instead of waiting
     * in turn for Redis's command timeout (5 s each). */
    skt_serve few;
    const char *env[] = {"SECKILL_ORDER_ID_BATCH=1", NULL};
    assert_int_equal(skt_serve_start(&few, &dir, srv.url, "redis", NULL, env), 0);
    skt_token(&dir, 5, 0, tok, sizeof tok);
    assert_int_equal(skt_http(few.port, "POST", path, tok, NULL, a.body, sizeof a.body), 201);
    char key[64], raw[1024];
    stock_key(v, key, sizeof key);
    assert_int_equal(th_target_pause(&srv, key), 0);
    long long t0 = th_now_ms();
    for (int u = 6; u < 10; u++) {
        skt_token(&dir, u, 0, tok, sizeof tok);
        snprintf(raw, sizeof raw,
                 "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                 "Content-Length: 0\r\nConnection: close\r\n\r\n",
                 path, tok);
        st = exchange(few.port, raw, &a);
        if (st != 429) fprintf(stderr, "user %d: %d %s\n", u, st, a.body);
        assert_int_equal(st, 429);
    }
    ms = th_now_ms() - t0;
    assert_int_equal(th_target_resume(&srv, key), 0);
    fprintf(stderr, "4 orders with Redis stopped and the order ids spent: %lld ms in all\n", ms);
    assert_true(ms < 8000);
    assert_int_equal(skt_serve_stop(&few), 0);
}

/*
 * What waits in a thread (the lock strategy's lock, /readyz's PING) is
 * bounded by SECKILL_REDIS_TIMEOUT_MS, which now goes below a second
 * (it could not go below 5000 before), and the lock's wait by
 * --order-timeout: with Redis stopped, an order on the lock strategy and
 * /readyz are both answered within 3 s.
 */
static void redis_timeout_below_a_second_bounds_what_waits_in_a_thread(void **state)
{
    (void)state;
    skt_serve lk;
    const char *env[] = {"SECKILL_REDIS_TIMEOUT_MS=300", "SECKILL_ORDER_TIMEOUT_MS=500", NULL};
    assert_int_equal(skt_serve_start(&lk, &dir, srv.url, "lock", NULL, env), 0);
    long long v = skt_voucher(lk.port, &dir, "lock", 10, now_s() - 5, now_s() + 3600);
    assert_true(v > 0);
    answer a;
    long long ms;
    int st = order_with_redis_stopped(lk.port, &dir, v, 5, &ms, &a);
    fprintf(stderr, "lock strategy order with Redis stopped: %d after %lld ms\n", st, ms);
    assert_true(st == 429 || st == 503);
    assert_true(a.body[0] == '{');
    assert_true(header(&a, "Retry-After")[0] != '\0');
    assert_true(ms < 3000);
    char key[64];
    stock_key(v, key, sizeof key);
    assert_int_equal(th_target_pause(&srv, key), 0);
    long long t0 = th_now_ms();
    char raw[] = "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    st = exchange(lk.port, raw, &a);
    ms = th_now_ms() - t0;
    assert_int_equal(th_target_resume(&srv, key), 0);
    fprintf(stderr, "/readyz with Redis stopped: %d after %lld ms\n", st, ms);
    expect_json_error(&a, 503, "unavailable");
    assert_true(ms < 3000);
    assert_int_equal(skt_serve_stop(&lk), 0);
}

/* ------------------------------------------------------------------------ */
/* Liveness and readiness                                                    */
/* ------------------------------------------------------------------------ */

/*
 * /healthz says only that the process answers: 200 with Redis stopped,
 * at once. /readyz asks Redis and the database: 200 when both answer,
 * 503 with Retry-After naming "redis" when Redis does not, within the
 * order timeout (1 s; asserted: 3 s) with the default Redis timeout of
 * 5 s, as a load balancer's probe needs.
 */
static void healthz_is_liveness_and_readyz_names_what_is_down(void **state)
{
    (void)state;
    answer a, r;
    assert_int_equal(call("GET", "/readyz", NULL, NULL, &a), 200);
    assert_string_equal(skt_json_str(a.body, "status"), "ok");
    assert_int_equal(th_target_pause(&srv, "seckill:{v:0}:stock"), 0);
    long long t0 = th_now_ms();
    int live = call("GET", "/healthz", NULL, NULL, &a);
    long long live_ms = th_now_ms() - t0;
    t0 = th_now_ms();
    int ready = call("GET", "/readyz", NULL, NULL, &r);
    long long ready_ms = th_now_ms() - t0;
    assert_int_equal(th_target_resume(&srv, "seckill:{v:0}:stock"), 0);
    fprintf(stderr, "Redis stopped: /healthz %d in %lld ms, /readyz %d in %lld ms: %s\n", live, live_ms, ready,
            ready_ms, r.body);
    assert_int_equal(live, 200);
    assert_true(live_ms < 1000);
    expect_json_error(&r, 503, "unavailable");
    assert_true(ready_ms < 3000);
    assert_string_equal(header(&r, "Retry-After"), "1");
    json_t *j = json_loads(r.body, 0, NULL);
    json_t *down = json_object_get(j, "down");
    assert_true(json_is_array(down));
    assert_int_equal(json_array_size(down), 1);
    assert_string_equal(json_string_value(json_array_get(down, 0)), "redis");
    json_decref(j);
    /* Redis answers again: ready again. */
    for (int i = 0; i < 100 && call("GET", "/readyz", NULL, NULL, &a) != 200; i++) usleep(50000);
    assert_int_equal(a.status, 200);
}

/* ------------------------------------------------------------------------ */
/* Validation                                                                */
/* ------------------------------------------------------------------------ */

/* A voucher body that breaks one rule: 400, the field and the message
 * exactly as given ("" for field: none). */
static void expect_invalid(const char *body, const char *code, const char *field, const char *message)
{
    answer a;
    call("POST", "/api/vouchers", admin, body, &a);
    expect_json_error(&a, 400, code);
    json_t *j = json_loads(a.body, 0, NULL);
    json_t *f = json_object_get(j, "field"), *m = json_object_get(j, "message");
    int ok = (field[0] ? json_is_string(f) && strcmp(json_string_value(f), field) == 0 : f == NULL) &&
             json_is_string(m) && strstr(json_string_value(m), message) != NULL;
    if (!ok) fprintf(stderr, "%s: want field \"%s\", message \"%s\"; got %s\n", body, field, message, a.body);
    json_decref(j);
    assert_true(ok);
}

/*
 * Every refusal of a voucher body names the member and the rule it
 * broke, the first thing wrong first: an unknown member by its name, a
 * missing one, a wrong type, a number out of range, begin not before
 * end. Malformed JSON says so, with where.
 */
static void validation_errors_name_the_field_and_the_rule(void **state)
{
    (void)state;
    expect_invalid("{\"title\":\"x\",\"stock\":-1,\"begin\":1,\"end\":2}", "bad_request", "stock",
                   "must be an integer >= 0");
    expect_invalid("{\"title\":\"x\",\"stock\":\"5\",\"begin\":1,\"end\":2}", "bad_request", "stock",
                   "must be an integer >= 0");
    expect_invalid("{\"title\":\"x\",\"stock\":1.5,\"begin\":1,\"end\":2}", "bad_request", "stock",
                   "must be an integer >= 0");
    expect_invalid("{\"title\":\"x\",\"stock\":100000001,\"begin\":1,\"end\":2}", "bad_request", "stock",
                   "must be at most 100000000");
    expect_invalid("{\"title\":\"x\",\"stock\":1,\"begin\":5,\"end\":2}", "bad_request", "end",
                   "must be greater than begin");
    expect_invalid("{\"title\":\"x\",\"stock\":1,\"begin\":2,\"end\":2}", "bad_request", "end",
                   "must be greater than begin");
    expect_invalid("{\"title\":\"x\",\"stock\":1,\"begin\":-1,\"end\":2}", "bad_request", "begin",
                   "must be an integer >= 0");
    expect_invalid("{\"title\":\"x\",\"stock\":1,\"end\":2}", "bad_request", "begin", "is required");
    expect_invalid("{\"stock\":1,\"begin\":1,\"end\":2}", "bad_request", "title", "is required");
    expect_invalid("{\"title\":7,\"stock\":1,\"begin\":1,\"end\":2}", "bad_request", "title", "must be a string");
    expect_invalid("{\"title\":\"\",\"stock\":1,\"begin\":1,\"end\":2}", "bad_request", "title",
                   "must be 1 to 200 bytes");
    expect_invalid("{\"title\":\"x\",\"stock\":1,\"begin\":1,\"end\":2,\"colour\":\"red\"}", "bad_request", "colour",
                   "unknown member");
    /* Unknown before anything else is checked. */
    expect_invalid("{\"colour\":1,\"stock\":-1}", "bad_request", "colour", "unknown member");
    expect_invalid("[1,2]", "bad_request", "", "must be a JSON object");
    expect_invalid("{\"title\":", "bad_json", "", "malformed JSON at line 1");
    expect_invalid("", "bad_json", "", "malformed JSON");
    /* The exact body the issue names. */
    answer a;
    call("POST", "/api/vouchers", admin, "{\"title\":\"x\",\"stock\":-1,\"begin\":1,\"end\":2}", &a);
    assert_string_equal(a.body,
                        "{\"error\":\"bad_request\",\"field\":\"stock\",\"message\":\"must be an integer >= 0\"}");
    call("POST", "/api/vouchers", admin, "{\"title\":\"x\",\"stock\":1,\"begin\":1,\"end\":2,\"colour\":0}", &a);
    assert_string_equal(a.body, "{\"error\":\"bad_request\",\"field\":\"colour\",\"message\":\"unknown member\"}");
    /* Query parameters of the list, likewise. */
    call("GET", "/api/vouchers?colour=1", NULL, NULL, &a);
    expect_json_error(&a, 400, "bad_request");
    assert_string_equal(skt_json_str(a.body, "field"), "colour");
    call("GET", "/api/vouchers?limit=0", NULL, NULL, &a);
    expect_json_error(&a, 400, "bad_request");
    assert_string_equal(skt_json_str(a.body, "field"), "limit");
    call("GET", "/api/vouchers/x", NULL, NULL, &a);
    expect_json_error(&a, 400, "bad_id");
    assert_string_equal(skt_json_str(a.body, "field"), "id");
}

/* ------------------------------------------------------------------------ */
/* Resources                                                                 */
/* ------------------------------------------------------------------------ */

/*
 * 201 names what it made in Location, which reads back; GET
 * /api/vouchers lists vouchers a page at a time by following "next"
 * until it is null, each once; an absent voucher is a 404 JSON body.
 */
static void created_resources_have_a_location_and_vouchers_are_paged(void **state)
{
    (void)state;
    answer a, b;
    char body[256];
    long long ids[5];
    for (int i = 0; i < 5; i++) {
        snprintf(body, sizeof body, "{\"title\":\"page %d\",\"stock\":3,\"begin\":%lld,\"end\":%lld}", i, now_s() - 5,
                 now_s() + 3600);
        assert_int_equal(call("POST", "/api/vouchers", admin, body, &a), 201);
        ids[i] = skt_json_int(a.body, "id");
        char want[64];
        snprintf(want, sizeof want, "/api/vouchers/%lld", ids[i]);
        assert_string_equal(header(&a, "Location"), want);
        assert_int_equal(call("GET", want, NULL, NULL, &b), 200);
        assert_int_equal(skt_json_int(b.body, "id"), ids[i]);
    }
    /* An order's Location is where its buyer reads it. */
    char path[96];
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", ids[0]);
    assert_int_equal(call("POST", path, user1, NULL, &a), 201);
    char loc[96];
    snprintf(loc, sizeof loc, "/api/orders/%s", skt_json_str(a.body, "order_id"));
    assert_string_equal(header(&a, "Location"), loc);
    assert_int_equal(call("GET", loc, user1, NULL, &b), 200);
    assert_string_equal(skt_json_str(b.body, "order_id"), skt_json_str(a.body, "order_id"));

    /* Every page of 2, in id order, each voucher once. */
    char next[128] = "/api/vouchers?limit=2";
    long long last = 0;
    int seen[5] = {0}, pages = 0;
    while (next[0]) {
        assert_int_equal(call("GET", next, NULL, NULL, &a), 200);
        pages++;
        json_t *j = json_loads(a.body, 0, NULL);
        json_t *list = json_object_get(j, "vouchers"), *nx = json_object_get(j, "next");
        assert_true(json_is_array(list));
        assert_true(json_array_size(list) <= 2);
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v)
        {
            long long id = (long long)json_integer_value(json_object_get(v, "id"));
            assert_true(id > last);
            last = id;
            for (int k = 0; k < 5; k++) seen[k] += ids[k] == id;
        }
        if (json_is_string(nx)) snprintf(next, sizeof next, "%s", json_string_value(nx));
        else {
            assert_true(json_is_null(nx));
            next[0] = '\0';
        }
        json_decref(j);
        assert_true(pages < 100);
    }
    for (int k = 0; k < 5; k++) assert_int_equal(seen[k], 1);
    assert_true(pages >= 3);
    call("GET", "/api/vouchers/987654321", NULL, NULL, &a);
    expect_json_error(&a, 404, "no_voucher");
}

/*
 * GET /api/vouchers/ID/order: a buyer reads back its own order of a
 * voucher by the voucher alone (how a client whose 201 was lost finds it):
 * the same order id as the 201 said, pending or created; another user has
 * none there (404), and without a token it is 401.
 */
static void buyer_reads_back_its_own_order_of_a_voucher(void **state)
{
    (void)state;
    long long v = voucher(5, now_s() - 5, now_s() + 3600);
    char path[96], mine[96];
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);
    snprintf(mine, sizeof mine, "/api/vouchers/%lld/order", v);
    answer a, b;
    call("GET", mine, user1, NULL, &b);
    expect_json_error(&b, 404, "no_order");
    assert_int_equal(call("POST", path, user1, NULL, &a), 201);
    assert_int_equal(call("GET", mine, user1, NULL, &b), 200);
    assert_string_equal(skt_json_str(b.body, "order_id"), skt_json_str(a.body, "order_id"));
    assert_int_equal(skt_json_int(b.body, "voucher_id"), v);
    /* Still the same once the writer has persisted it. */
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM orders WHERE voucher_id = %lld", v);
    assert_int_equal(skt_db_wait(&dir, sql, 1, 10000), 1);
    assert_int_equal(call("GET", mine, user1, NULL, &b), 200);
    assert_string_equal(skt_json_str(b.body, "order_id"), skt_json_str(a.body, "order_id"));
    assert_string_equal(skt_json_str(b.body, "status"), "created");
    call("GET", mine, user2, NULL, &b);
    expect_json_error(&b, 404, "no_order");
    call("GET", mine, NULL, NULL, &b);
    expect_json_error(&b, 401, "unauthorized");
}

/* ------------------------------------------------------------------------ */
/* The description                                                           */
/* ------------------------------------------------------------------------ */

static json_t *openapi;

/* The served description's operation for a route, or NULL. */
static json_t *operation(const sk_route_def *d)
{
    char m[8];
    size_t k = 0;
    for (; d->method[k] && k < sizeof m - 1; k++) m[k] = (char)(d->method[k] | 0x20);
    m[k] = '\0';
    return json_object_get(json_object_get(json_object_get(openapi, "paths"), d->path), m);
}

/* The route's path with its {id} replaced. */
static void concrete(const sk_route_def *d, const char *id, char *out, size_t cap)
{
    const char *at = strstr(d->path, "{id}");
    if (!at) snprintf(out, cap, "%s", d->path);
    else snprintf(out, cap, "%.*s%s%s", (int)(at - d->path), d->path, id, at + 4);
}

/* One request to a route: its answer's status must be listed for the
 * route, in the table and in the served description, with a JSON error
 * body when it is a 4xx or 5xx. */
static void drive(const sk_route_def *d, const char *what, const char *raw)
{
    answer a;
    int st = exchange(sv.port, raw, &a);
    char key[8];
    snprintf(key, sizeof key, "%d", st);
    json_t *op = operation(d);
    int listed = sk_route_lists(d, st) && json_object_get(json_object_get(op, "responses"), key) != NULL;
    if (!listed) fprintf(stderr, "%s %s, %s: %d is not described:\n%s\n", d->method, d->path, what, st, a.body);
    assert_true(listed);
    if (st >= 400) expect_json_error(&a, st, NULL);
}

/* drive() a request made of parts. */
static void drive_req(const sk_route_def *d, const char *what, const char *method, const char *path, const char *token,
                      const char *body)
{
    char raw[8192], auth[320] = "";
    if (token) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", token);
    snprintf(raw, sizeof raw, "%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
             method, path, auth, body ? strlen(body) : 0, body ? body : "");
    drive(d, what, raw);
}

/*
 * GET /openapi.json describes every route of the server's route table
 * (and no other), each with its statuses and the error body. Each route's
 * error paths are then driven (a wrong method, no Host, a body announced
 * too large, no or a bad token, a non-admin, a bad and an absent id, a
 * bad body or query, and for orders the window, a second order, sold out
 * and a stopped Redis) and every status answered must be listed for that
 * route, in the table and in what the server serves.
 */
static void openapi_describes_every_route_and_every_status_it_answers(void **state)
{
    (void)state;
    answer a;
    assert_int_equal(call("GET", "/openapi.json", NULL, NULL, &a), 200);
    assert_string_equal(header(&a, "Content-Type"), "application/json");
    openapi = json_loads(a.body, 0, NULL);
    assert_non_null(openapi);
    assert_int_equal(strncmp(json_string_value(json_object_get(openapi, "openapi")), "3.", 2), 0);
    assert_non_null(json_object_get(json_object_get(json_object_get(openapi, "components"), "schemas"), "Error"));
    size_t n;
    const sk_route_def *t = sk_routes(&n);
    size_t ops = 0;
    for (size_t i = 0; i < n; i++) {
        if (!operation(&t[i])) fprintf(stderr, "%s %s is not described\n", t[i].method, t[i].path);
        assert_non_null(operation(&t[i]));
    }
    /* No more operations described than served. */
    const char *p;
    json_t *item;
    json_object_foreach(json_object_get(openapi, "paths"), p, item) ops += json_object_size(item);
    assert_int_equal(ops, n);

    long long v = voucher(1, now_s() - 5, now_s() + 3600);
    long long later = voucher(1, now_s() + 3600, now_s() + 7200);
    long long over = voucher(1, now_s() - 3600, now_s() - 60);
    char vs[24], path[128], raw[1024], forged[300];
    snprintf(vs, sizeof vs, "%lld", v);
    snprintf(forged, sizeof forged, "%.*sX", (int)strlen(user1) - 1, user1);
    for (size_t i = 0; i < n; i++) {
        const sk_route_def *d = &t[i];
        concrete(d, vs, path, sizeof path);
        drive_req(d, "the request itself", d->method, path, d->auth == SK_AUTH_NONE ? NULL : admin,
                  d->request ? "{\"title\":\"x\",\"stock\":1,\"begin\":1,\"end\":2}" : NULL);
        drive_req(d, "PATCH", "PATCH", path, admin, NULL);
        snprintf(raw, sizeof raw, "%s %s HTTP/1.1\r\nConnection: close\r\n\r\n", d->method, path);
        drive(d, "no Host", raw);
        snprintf(raw, sizeof raw, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n",
                 d->method, path);
        drive(d, "a body too large", raw);
        if (d->auth != SK_AUTH_NONE) {
            drive_req(d, "no token", d->method, path, NULL, NULL);
            drive_req(d, "a forged token", d->method, path, forged, NULL);
            drive_req(d, "a user's token", d->method, path, user2, NULL);
        }
        if (strstr(d->path, "{id}")) {
            concrete(d, "x1", path, sizeof path);
            drive_req(d, "a bad id", d->method, path, admin, NULL);
            concrete(d, "987654321", path, sizeof path);
            drive_req(d, "an absent id", d->method, path, admin, NULL);
            concrete(d, vs, path, sizeof path);
        }
        if (d->request) {
            drive_req(d, "bad JSON", d->method, path, admin, "{");
            drive_req(d, "a bad member", d->method, path, admin,
                      "{\"title\":\"x\",\"stock\":-1,\"begin\":1,\"end\":2}");
        }
        if (d->paged) {
            drive_req(d, "a bad limit", d->method, "/api/vouchers?limit=0", NULL, NULL);
            drive_req(d, "an unknown parameter", d->method, "/api/vouchers?page=2", NULL, NULL);
        }
        if (d->route == SK_ROUTE_ORDER_CREATE) {
            drive_req(d, "a first order", d->method, path, user1, NULL);
            drive_req(d, "a second order", d->method, path, user1, NULL);
            drive_req(d, "sold out", d->method, path, user2, NULL);
            snprintf(path, sizeof path, "/api/vouchers/%lld/orders", later);
            drive_req(d, "before the window", d->method, path, user1, NULL);
            snprintf(path, sizeof path, "/api/vouchers/%lld/orders", over);
            drive_req(d, "after the window", d->method, path, user1, NULL);
            /* Redis stopped: the order timeout's answer. */
            char key[64], tok[256];
            skt_token(&dir, 99, 0, tok, sizeof tok);
            long long w = voucher(5, now_s() - 5, now_s() + 3600);
            snprintf(path, sizeof path, "/api/vouchers/%lld/orders", w);
            drive_req(d, "an order warming the voucher", d->method, path, user1, NULL);
            stock_key(w, key, sizeof key);
            assert_int_equal(th_target_pause(&srv, key), 0);
            drive_req(d, "Redis stopped", d->method, path, tok, NULL);
            assert_int_equal(th_target_resume(&srv, key), 0);
        }
        if (d->route == SK_ROUTE_MY_ORDER || d->route == SK_ROUTE_ORDER_GET) {
            drive_req(d, "a user without one", d->method, path, user2, NULL);
        }
    }
    json_decref(openapi);
    openapi = NULL;
}

/* ------------------------------------------------------------------------ */
/* The secret and the last line                                              */
/* ------------------------------------------------------------------------ */

/*
 * `seckill token` run where there is no secret (another directory than
 * the server's) fails, exit 69, saying where it looked, and creates
 * nothing; pointed at the server's secret ($SECKILL_SECRET_FILE or
 * --secret-file) its token is accepted by the server.
 */
static void token_never_creates_a_secret_and_says_where_it_looked(void **state)
{
    (void)state;
    char empty[] = "/tmp/seckill-token-XXXXXX";
    assert_non_null(mkdtemp(empty));
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "cd %s && exec env -u SECKILL_SECRET_FILE %s token 1", empty, SECKILL_BIN);
    const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
    int rc = skt_run_err(out, sizeof out, sh);
    fprintf(stderr, "token without a secret: exit %d: %s", rc, out);
    assert_int_equal(rc, 69);
    char want[256];
    snprintf(want, sizeof want, "no secret file at %s/seckill.secret", empty);
    assert_non_null(strstr(out, want));
    struct stat st;
    snprintf(want, sizeof want, "%s/seckill.secret", empty);
    assert_int_not_equal(stat(want, &st), 0);
    /* The same resolution through the environment. */
    snprintf(cmd, sizeof cmd, "cd %s && exec env SECKILL_SECRET_FILE=%s %s token 1", empty, dir.secret_file,
             SECKILL_BIN);
    assert_int_equal(skt_run(out, sizeof out, sh), 0);
    out[strcspn(out, "\n")] = '\0';
    long long v = voucher(3, now_s() - 5, now_s() + 3600);
    char path[96], resp[1024];
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);
    assert_int_equal(skt_http(sv.port, "POST", path, out, NULL, resp, sizeof resp), 201);
    assert_int_not_equal(stat(want, &st), 0);
    rmdir(empty);
}

/* The last thing `serve` logs, after everything has stopped, says so. */
static void serve_logs_a_last_line_when_it_has_stopped(void **state)
{
    (void)state;
    skt_serve s;
    assert_int_equal(skt_serve_start(&s, &dir, srv.url, "redis", NULL, NULL), 0);
    assert_int_equal(skt_serve_stop(&s), 0);
    FILE *f = fopen(s.err, "r");
    assert_non_null(f);
    char line[1024], last[1024] = "";
    while (fgets(line, sizeof line, f)) snprintf(last, sizeof last, "%s", line);
    fclose(f);
    fprintf(stderr, "last line: %s", last);
    assert_non_null(strstr(last, "stopped"));
}

int main(int argc, char **argv)
{
    int rc = skt_backend_init(argc, argv);
    if (rc) return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(order_with_redis_hung_is_answered_within_the_order_timeout, after_test),
        cmocka_unit_test_teardown(redis_timeout_below_a_second_bounds_what_waits_in_a_thread, after_test),
        cmocka_unit_test_teardown(healthz_is_liveness_and_readyz_names_what_is_down, after_test),
        cmocka_unit_test(validation_errors_name_the_field_and_the_rule),
        cmocka_unit_test(created_resources_have_a_location_and_vouchers_are_paged),
        cmocka_unit_test(buyer_reads_back_its_own_order_of_a_voucher),
        cmocka_unit_test_teardown(openapi_describes_every_route_and_every_status_it_answers, after_test),
        cmocka_unit_test(token_never_creates_a_secret_and_says_where_it_looked),
        cmocka_unit_test(serve_logs_a_last_line_when_it_has_stopped),
    };
    rc = cmocka_run_group_tests_name(skt_backend_name(), tests, setup, teardown);
    skt_backend_stop();
    return rc;
}
