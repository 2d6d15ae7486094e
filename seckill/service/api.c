/*
 * The API: routing, authentication, JSON in and out, and the mapping of
 * every outcome to a status and an error code. See api.h.
 *
 * Routes:
 *   POST /api/vouchers             admin (user 0)   201 {"id":N}
 *   GET  /api/vouchers/ID          anyone           200 voucher
 *   POST /api/vouchers/ID/orders   any user         201 {"order_id":"N"}
 *   GET  /api/orders/ID            its owner, admin 200 order
 *   GET  /healthz, GET /metrics
 * Every failure is {"error":"CODE"} with a 4xx or 5xx status.
 */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "auth.h"
#include "common/skutil.h"

/* The status of each outcome (SK_RESULTS): the spec fixes them (409
 * already_ordered, 410 sold_out, ...) and clients branch on them. */
static int result_status(sk_result r)
{
    switch (r) {
#define SK_RESULT_STATUS(name, status, code) \
    case SK_##name: return status;
        SK_RESULTS(SK_RESULT_STATUS)
#undef SK_RESULT_STATUS
    case SK_RESULT_COUNT: break;
    }
    return 500;
}

static const char json_ctype[] = "application/json";

/* Error bodies are fixed ASCII codes, so they need no JSON encoder; and
 * this path must work even when memory is short. */
static void error(sk_response *resp, int status, const char *code)
{
    static const char oom[] = "{\"error\":\"internal\"}";
    resp->status = status;
    resp->content_type = json_ctype;
    size_t n = strlen(code) + 13;
    resp->body = malloc(n);
    if (resp->body) {
        snprintf(resp->body, n, "{\"error\":\"%s\"}", code);
        resp->body_len = n - 1;
    } else {
        resp->status = 500;
        resp->body = strdup(oom);
        resp->body_len = resp->body ? sizeof oom - 1 : 0;
    }
}

/* RFC 6750, 3: a request without credentials gets the scheme only; one
 * with a bad token gets error="invalid_token" and a description, and the
 * body says the same as a code (malformed, bad_signature, expired). */
static void unauthorized(sk_response *resp, int why)
{
    static const struct {
        int why;
        const char *reason, *header;
    } table[] = {
        {SK_TOKEN_MISSING, "missing", "Bearer realm=\"seckill\""},
        {SK_TOKEN_BAD_SIGNATURE, "bad_signature",
         "Bearer realm=\"seckill\", error=\"invalid_token\", error_description=\"bad signature\""},
        {SK_TOKEN_EXPIRED, "expired",
         "Bearer realm=\"seckill\", error=\"invalid_token\", error_description=\"token expired\""},
        {SK_TOKEN_MALFORMED, "malformed",
         "Bearer realm=\"seckill\", error=\"invalid_token\", error_description=\"malformed token\""},
    };
    size_t i = 0;
    while (i < sizeof table / sizeof *table - 1 && table[i].why != why) i++;
    error(resp, 401, "unauthorized");
    resp->www_authenticate = table[i].header;
    char *body = malloc(64);
    if (!body) return;
    snprintf(body, 64, "{\"error\":\"unauthorized\",\"reason\":\"%s\"}", table[i].reason);
    free(resp->body);
    resp->body = body;
    resp->body_len = strlen(body);
}

/* Most failures are a strategy's outcome; this turns one into its reply. */
static void result_error(sk_response *resp, sk_result r)
{
    error(resp, result_status(r), sk_result_code(r));
}

/* Takes ownership of `obj`. */
static void json_reply(sk_response *resp, int status, json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!text) {
        error(resp, 500, "internal");
        return;
    }
    resp->status = status;
    resp->content_type = json_ctype;
    resp->body = text;
    resp->body_len = strlen(text);
}

/* An integer member in [lo, hi]; booleans and reals are not integers. */
static int int_member(json_t *obj, const char *key, long long lo, long long hi, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) return -1;
    *out = (int64_t)x;
    return 0;
}

/* Why so strict: a body that is almost right (a string stock, an extra
 * field with a typo, a duplicated key) is more likely a client bug than
 * intent, and guessing would create a voucher nobody asked for. */
int sk_parse_voucher(const char *body, size_t len, sk_voucher *out, const char **code)
{
    json_error_t jerr;
    json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        *code = "bad_json";
        return -1;
    }
    *code = "bad_request";
    int rc = -1;
    memset(out, 0, sizeof *out);
    if (!json_is_object(root) || json_object_size(root) != 4) goto done;
    json_t *title = json_object_get(root, "title");
    if (!json_is_string(title)) goto done;
    size_t tlen = json_string_length(title);
    const char *t = json_string_value(title);
    if (tlen == 0 || tlen > SK_TITLE_MAX || strlen(t) != tlen) goto done;
    for (size_t i = 0; i < tlen; i++)
        if ((unsigned char)t[i] < 0x20 || t[i] == 0x7f) goto done;
    memcpy(out->title, t, tlen + 1);
    if (int_member(root, "stock", 0, SK_STOCK_MAX, &out->stock) != 0) goto done;
    if (int_member(root, "begin", 0, SK_TIME_MAX, &out->begin) != 0) goto done;
    if (int_member(root, "end", 0, SK_TIME_MAX, &out->end) != 0) goto done;
    if (out->end <= out->begin) goto done;
    out->initial_stock = out->stock;
    rc = 0;
done:
    json_decref(root);
    return rc;
}

static const char *order_status_name(sk_order_status s)
{
    switch (s) {
    case SK_ORDER_PENDING: return "pending";
    case SK_ORDER_CREATED: return "created";
    case SK_ORDER_REJECTED: return "rejected";
    }
    return "pending";
}

/* Split "/api/<a>/<b>/<c>" style paths: returns the number of segments
 * after the prefix (up to 3), with pointers and lengths; -1 for empty
 * segments ("//", trailing "/"), which no route has. */
static int segments(const char *p, const char *seg[3], size_t len[3])
{
    int n = 0;
    if (*p == '\0') return 0;
    for (;;) {
        if (*p != '/') return -1;
        p++;
        const char *s = p;
        while (*p && *p != '/') p++;
        if (p == s) return -1;
        if (n == 3) return 4;
        seg[n] = s;
        len[n] = (size_t)(p - s);
        n++;
        if (*p == '\0') return n;
    }
}

/* Segments are not NUL-terminated; compare by length so "orders" does not
 * match "ordersX". */
static int seg_is(const char *s, size_t len, const char *word)
{
    return strlen(word) == len && memcmp(s, word, len) == 0;
}

typedef struct route {
    sk_route route;
    const char *method;  /* the one method the route takes */
    const char *id;      /* the id segment, when the route has one */
    size_t id_len;
} route;

/* Map a path to a route; 0 when none matches. */
static int match(const char *path, route *r)
{
    memset(r, 0, sizeof *r);
    if (strcmp(path, "/healthz") == 0) {
        r->route = SK_ROUTE_HEALTHZ;
        r->method = "GET";
        return 1;
    }
    if (strcmp(path, "/metrics") == 0) {
        r->route = SK_ROUTE_METRICS;
        r->method = "GET";
        return 1;
    }
    if (strncmp(path, "/api", 4) != 0) return 0;
    const char *seg[3];
    size_t len[3];
    int n = segments(path + 4, seg, len);
    if (n < 1 || n > 3) return 0;
    if (seg_is(seg[0], len[0], "vouchers")) {
        if (n == 1) {
            r->route = SK_ROUTE_VOUCHER_CREATE;
            r->method = "POST";
            return 1;
        }
        r->id = seg[1];
        r->id_len = len[1];
        if (n == 2) {
            r->route = SK_ROUTE_VOUCHER_GET;
            r->method = "GET";
            return 1;
        }
        if (seg_is(seg[2], len[2], "orders")) {
            r->route = SK_ROUTE_ORDER_CREATE;
            r->method = "POST";
            return 1;
        }
        return 0;
    }
    if (seg_is(seg[0], len[0], "orders") && n == 2) {
        r->route = SK_ROUTE_ORDER_GET;
        r->method = "GET";
        r->id = seg[1];
        r->id_len = len[1];
        return 1;
    }
    return 0;
}

/* The fuzz target pins the clock so token expiry and the sale window are
 * reproducible; the server uses the wall clock. */
static int64_t app_now(sk_app *app)
{
    return app->now ? app->now() : sk_unix_now();
}

/* Admin only (user 0): creating stock is not something a buyer may do.
 * The body is checked completely before anything is written. */
static void voucher_create(sk_app *app, const sk_request *req, sk_response *resp, int64_t uid)
{
    if (uid != 0) {
        error(resp, 403, "forbidden");
        return;
    }
    if (req->body_too_large) {
        error(resp, 413, "too_large");
        return;
    }
    sk_voucher v;
    const char *code;
    if (sk_parse_voucher(req->body, req->body_len, &v, &code) != 0) {
        error(resp, 400, code);
        return;
    }
    int64_t id = 0;
    sk_result r = app->strategy.ops->voucher_create(app->strategy.ctx, &v, &id);
    if (r != SK_OK) {
        result_error(resp, r);
        return;
    }
    json_reply(resp, 201, json_pack("{sI}", "id", (json_int_t)id));
}

/* Public: buyers poll the remaining stock before and during a sale. */
static void voucher_get(sk_app *app, int64_t id, sk_response *resp)
{
    sk_voucher v;
    sk_result r = app->strategy.ops->voucher_get(app->strategy.ctx, id, &v);
    if (r != SK_OK) {
        result_error(resp, r);
        return;
    }
    json_reply(resp, 200,
               json_pack("{sI ss sI sI sI}", "id", (json_int_t)v.id, "title", v.title, "stock",
                         (json_int_t)v.stock, "begin", (json_int_t)v.begin, "end", (json_int_t)v.end));
}

/* The order id goes out as a decimal string because 64-bit ids do not
 * survive JavaScript numbers. Shared by both paths so they answer alike. */
static void order_reply(sk_response *resp, sk_result r, uint64_t oid)
{
    sk_metrics_order(r);
    if (r != SK_OK) {
        result_error(resp, r);
        return;
    }
    char s[24];
    snprintf(s, sizeof s, "%llu", (unsigned long long)oid);
    json_reply(resp, 201, json_pack("{ss}", "order_id", s));
}

/* The hot path: one strategy call. */
static void order_create(sk_app *app, int64_t uid, int64_t vid, sk_response *resp)
{
    uint64_t oid = 0;
    sk_result r = app->strategy.ops->order_create(app->strategy.ctx, uid, vid, app_now(app), &oid);
    order_reply(resp, r, oid);
}

/* Where an asynchronous order's answer goes. */
typedef struct pending_order {
    sk_api_done *done;
    void *arg;
} pending_order;

/* The strategy decided, on another thread: the same answer as
 * order_create() gives, handed to the HTTP layer. */
static void order_decided(void *arg, sk_result r, uint64_t oid)
{
    pending_order *p = arg;
    sk_api_done *done = p->done;
    void *darg = p->arg;
    free(p);
    sk_metrics_in_flight(-1);
    sk_response resp;
    memset(&resp, 0, sizeof resp);
    resp.route = SK_ROUTE_ORDER_CREATE;
    order_reply(&resp, r, oid);
    done(darg, &resp);
}

/* The hot path without waiting, where the strategy can: 1 when the answer
 * will come through done(), 0 when *resp holds it now. */
static int order_create_async(sk_app *app, int64_t uid, int64_t vid, sk_response *resp, sk_api_done *done,
                              void *arg)
{
    pending_order *p = malloc(sizeof *p);
    if (!p) {
        order_create(app, uid, vid, resp);
        return 0;
    }
    *p = (pending_order){done, arg};
    sk_result r = SK_INTERNAL;
    uint64_t oid = 0;
    sk_metrics_in_flight(1); /* before: order_decided may come first */
    if (app->strategy.ops->order_create_async(app->strategy.ctx, uid, vid, app_now(app), order_decided, p, &r, &oid))
        return 1;
    sk_metrics_in_flight(-1);
    free(p);
    order_reply(resp, r, oid);
    return 0;
}

/* Someone else's order is reported as missing, not forbidden: order ids
 * are guessable (time and a counter) and must not confirm each other. */
static void order_get(sk_app *app, int64_t uid, uint64_t oid, sk_response *resp)
{
    sk_order o;
    sk_result r = app->strategy.ops->order_get(app->strategy.ctx, oid, &o);
    if (r == SK_OK && uid != 0 && o.user_id != uid) r = SK_NO_ORDER;
    if (r != SK_OK) {
        result_error(resp, r);
        return;
    }
    char s[24];
    snprintf(s, sizeof s, "%llu", (unsigned long long)o.id);
    json_reply(resp, 200,
               json_pack("{ss sI sI ss}", "order_id", s, "user_id", (json_int_t)o.user_id, "voucher_id",
                         (json_int_t)o.voucher_id, "status", order_status_name(o.status)));
}

/* For load balancers: 200 only when Redis and the database both answer,
 * so a server that cannot sell is taken out of rotation. */
static void health(sk_app *app, sk_response *resp)
{
    sk_result r = app->strategy.ops->health(app->strategy.ctx);
    if (r != SK_OK) {
        error(resp, 503, "unavailable");
        return;
    }
    json_reply(resp, 200, json_pack("{ss ss}", "status", "ok", "strategy", app->strategy.ops->name));
}

/* Prometheus scrapes this; it needs no token (it carries no user data). */
static void metrics(sk_response *resp)
{
    char *text = sk_metrics_render();
    if (!text) {
        error(resp, 500, "internal");
        return;
    }
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
    resp->body = text;
    resp->body_len = strlen(text);
}

/* Checks run cheapest first and in a fixed order (route, method, token,
 * id, body), so a request is refused for the first thing wrong with it and
 * nothing reaches a strategy unauthenticated or unparsed. With `done`, an
 * order may be answered later (returns 1); see sk_api_handle_async(). */
static int handle(sk_app *app, const sk_request *req, sk_response *resp, sk_api_done *done, void *arg)
{
    memset(resp, 0, sizeof *resp);
    resp->route = SK_ROUTE_OTHER;
    route rt;
    if (!req->path || !req->method || !match(req->path, &rt)) {
        error(resp, 404, "not_found");
        return 0;
    }
    resp->route = rt.route;
    int head = strcmp(req->method, "HEAD") == 0 && strcmp(rt.method, "GET") == 0;
    if (strcmp(req->method, rt.method) != 0 && !head) {
        error(resp, 405, "method_not_allowed");
        resp->allow = rt.method;
        return 0;
    }
    if (rt.route == SK_ROUTE_HEALTHZ) {
        health(app, resp);
        return 0;
    }
    if (rt.route == SK_ROUTE_METRICS) {
        metrics(resp);
        return 0;
    }
    int64_t uid = -1;
    int why = rt.route == SK_ROUTE_VOUCHER_GET
                  ? 0
                  : sk_auth_header(app->secret, app->secret_len, req->authorization, app_now(app), &uid);
    if (why != 0) {
        unauthorized(resp, why);
        return 0;
    }
    if (rt.route == SK_ROUTE_VOUCHER_CREATE) {
        voucher_create(app, req, resp, uid);
        return 0;
    }
    uint64_t id;
    if (sk_parse_u64(rt.id, rt.id_len, INT64_MAX, &id) != 0) {
        error(resp, 400, "bad_id");
        return 0;
    }
    switch (rt.route) {
    case SK_ROUTE_VOUCHER_GET: voucher_get(app, (int64_t)id, resp); break;
    case SK_ROUTE_ORDER_CREATE:
        if (done && app->strategy.ops->order_create_async)
            return order_create_async(app, uid, (int64_t)id, resp, done, arg);
        order_create(app, uid, (int64_t)id, resp);
        break;
    case SK_ROUTE_ORDER_GET: order_get(app, uid, id, resp); break;
    default: error(resp, 404, "not_found"); break;
    }
    return 0;
}

void sk_api_handle(sk_app *app, const sk_request *req, sk_response *resp)
{
    handle(app, req, resp, NULL, NULL);
}

int sk_api_handle_async(sk_app *app, const sk_request *req, sk_response *resp, sk_api_done *done, void *arg)
{
    return handle(app, req, resp, done, arg);
}

/* Bodies are malloc'ed by whoever built them (jansson or us); one free. */
void sk_response_free(sk_response *resp)
{
    free(resp->body);
    resp->body = NULL;
}
