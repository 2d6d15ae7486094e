/*
 * The API: routing, authentication, JSON in and out, and the mapping of
 * every outcome to a status and an error code. See api.h.
 *
 * The routes, who may call them and what they answer are in the route
 * table (routes.c), which GET /openapi.json describes. Every failure is a
 * JSON object {"error":"CODE"}, with "field" and "message" where they
 * help, and a 4xx or 5xx status.
 */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "auth.h"
#include "common/skutil.h"
#include "openapi.h"
#include "routes.h"

/* The status of each outcome (SK_RESULTS): the spec fixes them (409
 * already_ordered, 410 sold_out, ...) and clients branch on them. */
static int result_status(sk_result r)
{
    switch (r) {
#define SK_RESULT_STATUS(name, status, code)                                                                           \
    case SK_##name: return status;
        SK_RESULTS(SK_RESULT_STATUS)
#undef SK_RESULT_STATUS
    case SK_RESULT_COUNT: break;
    }
    return 500;
}

static const char json_ctype[] = "application/json";

/* Bodies built by hand where jansson may not be there for them: when
 * memory is short, this is the answer. */
static void out_of_memory(sk_response *resp)
{
    static const char oom[] = "{\"error\":\"internal\"}";
    resp->status = 500;
    resp->content_type = json_ctype;
    resp->body = strdup(oom);
    resp->body_len = resp->body ? sizeof oom - 1 : 0;
}

/*
 * Every error is one JSON object: {"error": code} and, where they help a
 * client fix its request, "field" (the member or parameter at fault) and
 * "message" (the rule it broke). A field or message jansson cannot encode
 * (a member name that is not UTF-8, cut short) is left out rather than
 * the answer lost. "busy" and "unavailable" invite a retry: Retry-After
 * says when.
 */
static void json_reply(sk_response *resp, int status, json_t *obj);

static void error_with(sk_response *resp, int status, const char *code, const char *field, const char *message)
{
    json_t *o = json_pack("{ss}", "error", code);
    if (o && field && json_object_set_new(o, "field", json_string(field)) != 0) json_object_del(o, "field");
    if (o && message && json_object_set_new(o, "message", json_string(message)) != 0) json_object_del(o, "message");
    json_reply(resp, status, o);
    resp->retry_after = resp->status == 429 || resp->status == 503 ? 1 : 0;
}

static void error(sk_response *resp, int status, const char *code)
{
    error_with(resp, status, code, NULL, NULL);
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

/* Takes ownership of `obj` (NULL: memory ran out). */
static void json_reply(sk_response *resp, int status, json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!text) {
        out_of_memory(resp);
        return;
    }
    resp->status = status;
    resp->content_type = json_ctype;
    resp->body = text;
    resp->body_len = strlen(text);
}

/* ------------------------------------------------------------------------ */
/* Bodies                                                                    */
/* ------------------------------------------------------------------------ */

static int invalid(sk_invalid *why, const char *field, const char *message)
{
    why->code = "bad_request";
    why->field = field;
    why->message = message;
    return -1;
}

/* An integer member in [0, hi]; booleans and reals are not integers. The
 * messages name the rule broken, so a client can fix the one member. */
static int int_member(json_t *obj, const char *key, long long hi, const char *too_big, int64_t *out, sk_invalid *why)
{
    json_t *v = json_object_get(obj, key);
    if (!v) return invalid(why, key, "is required");
    if (!json_is_integer(v) || json_integer_value(v) < 0) return invalid(why, key, "must be an integer >= 0");
    if (json_integer_value(v) > hi) return invalid(why, key, too_big);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

#define STR_(x) #x
#define STR(x) STR_(x)

/* Why so strict: a body that is almost right (a string stock, an extra
 * field with a typo, a duplicated key) is more likely a client bug than
 * intent, and guessing would create a voucher nobody asked for. The first
 * thing wrong is named: an unknown member before the known ones, and
 * those in the order the documentation lists them. */
int sk_parse_voucher(const char *body, size_t len, sk_voucher *out, sk_invalid *why)
{
    static const char *const known[] = {"title", "stock", "begin", "end"};
    memset(why, 0, sizeof *why);
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        why->code = "bad_json";
        snprintf(why->text, sizeof why->text, "malformed JSON at line %d column %d: %s", jerr.line, jerr.column,
                 jerr.text);
        why->message = why->text;
        return -1;
    }
    int rc = -1;
    if (!json_is_object(root)) {
        invalid(why, NULL, "the body must be a JSON object");
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        size_t k = 0;
        while (k < sizeof known / sizeof *known && strcmp(key, known[k]) != 0) k++;
        if (k == sizeof known / sizeof *known) {
            snprintf(why->name, sizeof why->name, "%s", key);
            invalid(why, why->name, "unknown member");
            goto done;
        }
    }
    json_t *title = json_object_get(root, "title");
    if (!title) {
        invalid(why, "title", "is required");
        goto done;
    }
    if (!json_is_string(title)) {
        invalid(why, "title", "must be a string");
        goto done;
    }
    size_t tlen = json_string_length(title);
    const char *t = json_string_value(title);
    if (tlen == 0 || tlen > SK_TITLE_MAX || strlen(t) != tlen) {
        invalid(why, "title", "must be 1 to " STR(SK_TITLE_MAX) " bytes");
        goto done;
    }
    for (size_t i = 0; i < tlen; i++)
        if ((unsigned char)t[i] < 0x20 || t[i] == 0x7f) {
            invalid(why, "title", "must not contain control characters");
            goto done;
        }
    memcpy(out->title, t, tlen + 1);
    if (int_member(root, "stock", SK_STOCK_MAX, "must be at most 100000000", &out->stock, why) != 0 ||
        int_member(root, "begin", SK_TIME_MAX, "must be at most 32503680000 (year 3000)", &out->begin, why) != 0 ||
        int_member(root, "end", SK_TIME_MAX, "must be at most 32503680000 (year 3000)", &out->end, why) != 0)
        goto done;
    if (out->end <= out->begin) {
        invalid(why, "end", "must be greater than begin");
        goto done;
    }
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

static json_t *voucher_json(const sk_voucher *v)
{
    return json_pack("{sI ss sI sI sI}", "id", (json_int_t)v->id, "title", v->title, "stock", (json_int_t)v->stock,
                     "begin", (json_int_t)v->begin, "end", (json_int_t)v->end);
}

/* The order id goes out as a decimal string because 64-bit ids do not
 * survive JavaScript numbers. */
static json_t *order_json(const sk_order *o)
{
    char s[24];
    snprintf(s, sizeof s, "%llu", (unsigned long long)o->id);
    return json_pack("{ss sI sI ss}", "order_id", s, "user_id", (json_int_t)o->user_id, "voucher_id",
                     (json_int_t)o->voucher_id, "status", order_status_name(o->status));
}

/* ------------------------------------------------------------------------ */
/* Handlers                                                                  */
/* ------------------------------------------------------------------------ */

/* The fuzz target pins the clock so token expiry and the sale window are
 * reproducible; the server uses the wall clock. */
static int64_t app_now(sk_app *app)
{
    return app->now ? app->now() : sk_unix_now();
}

/* Admin only (checked by the table): creating stock is not something a
 * buyer may do. The body is checked completely before anything is
 * written. */
static void voucher_create(sk_app *app, const sk_request *req, sk_response *resp)
{
    if (req->body_too_large) {
        error_with(resp, 413, "too_large", NULL, "the body is larger than " STR(SK_BODY_MAX) " bytes");
        return;
    }
    sk_voucher v;
    sk_invalid why;
    if (sk_parse_voucher(req->body, req->body_len, &v, &why) != 0) {
        error_with(resp, 400, why.code, why.field, why.message);
        return;
    }
    int64_t id = 0;
    sk_result r = app->strategy.ops->voucher_create(app->strategy.ctx, &v, &id);
    if (r != SK_OK) {
        result_error(resp, r);
        return;
    }
    json_reply(resp, 201, json_pack("{sI}", "id", (json_int_t)id));
    if (resp->status == 201) snprintf(resp->location, sizeof resp->location, "/api/vouchers/%lld", (long long)id);
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
    json_reply(resp, 200, voucher_json(&v));
}

#define PAGE_DEFAULT 20
#define PAGE_MAX 100

/* One query parameter that is a decimal in [lo, hi]; 0, or -1 with the
 * 400 answered. */
static int query_int(sk_response *resp, const sk_query_arg *a, uint64_t lo, uint64_t hi, const char *rule,
                     uint64_t *out)
{
    if (!a->value || sk_parse_u64(a->value, strlen(a->value), hi, out) != 0 || *out < lo) {
        error_with(resp, 400, "bad_request", a->key, rule);
        return -1;
    }
    return 0;
}

/*
 * A page of vouchers in id order: ?after=ID (the last id of the previous
 * page; 0, the default, starts at the beginning) and ?limit=N. Why a
 * cursor rather than page numbers: vouchers created while a client pages
 * neither shift nor repeat the pages it has yet to read. "next" is the
 * URL of the following page, null on the last.
 */
static void voucher_list(sk_app *app, const sk_request *req, sk_response *resp)
{
    uint64_t after = 0, limit = PAGE_DEFAULT;
    int seen_after = 0, seen_limit = 0;
    if (req->query_too_long) {
        error_with(resp, 400, "bad_request", NULL, "at most " STR(SK_QUERY_MAX) " query parameters");
        return;
    }
    for (size_t i = 0; i < req->nquery; i++) {
        const sk_query_arg *a = &req->query[i];
        int *seen = strcmp(a->key, "after") == 0 ? &seen_after : strcmp(a->key, "limit") == 0 ? &seen_limit : NULL;
        if (!seen) {
            error_with(resp, 400, "bad_request", a->key, "unknown query parameter");
            return;
        }
        if (*seen) {
            error_with(resp, 400, "bad_request", a->key, "given twice");
            return;
        }
        *seen = 1;
        if (seen == &seen_after
                ? query_int(resp, a, 0, INT64_MAX, "must be an integer >= 0", &after)
                : query_int(resp, a, 1, PAGE_MAX, "must be an integer from 1 to " STR(PAGE_MAX), &limit))
            return;
    }
    sk_voucher page[PAGE_MAX];
    size_t n = 0;
    sk_result r = app->strategy.ops->voucher_list(app->strategy.ctx, (int64_t)after, page, (size_t)limit, &n);
    if (r != SK_OK) {
        result_error(resp, r);
        return;
    }
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++)
        if (json_array_append_new(list, voucher_json(&page[i])) != 0) {
            json_decref(list);
            list = NULL;
        }
    json_t *next = json_null();
    if (n == limit) {
        char url[96];
        snprintf(url, sizeof url, "/api/vouchers?after=%lld&limit=%llu", (long long)page[n - 1].id,
                 (unsigned long long)limit);
        next = json_string(url);
    }
    json_reply(resp, 200, list ? json_pack("{so so}", "vouchers", list, "next", next) : NULL);
}

/* The order reply, shared by both paths so they answer alike; Location
 * names the order, which GET /api/orders/ID reads back. */
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
    if (resp->status == 201) snprintf(resp->location, sizeof resp->location, "/api/orders/%s", s);
}

/* The hot path: one strategy call. */
static void order_create(sk_app *app, int64_t uid, int64_t vid, sk_response *resp)
{
    uint64_t oid = 0;
    sk_result r = app->strategy.ops->order_create(app->strategy.ctx, uid, vid, app_now(app), &oid);
    order_reply(resp, r, oid);
}

/* The admission limits (sk_app.admit) before the strategy: 1 when the
 * order may go on, 0 when *resp holds its refusal. A refusal says which
 * limit and when to come back, in ms in the body and in whole seconds
 * (rounded up) in Retry-After, and the stock is never asked. */
static int admitted(sk_app *app, int64_t uid, sk_response *resp)
{
    if (!app->admit) return 1;
    sk_refusal why = {NULL, 0};
    sk_result r = app->admit(app->admit_ctx, uid, &why);
    if (r == SK_OK) return 1;
    if (r != SK_BUSY || !why.scope) {
        result_error(resp, r);
        return 0;
    }
    sk_metrics_rate_limited(why.scope);
    json_reply(resp, 429,
               json_pack("{ss ss sI}", "error", "rate_limited", "scope", why.scope, "retry_after_ms",
                         (json_int_t)why.retry_after_ms));
    if (resp->status == 429) resp->retry_after = (int)((why.retry_after_ms + 999) / 1000);
    if (resp->retry_after < 1) resp->retry_after = 1;
    return 0;
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

/* What an order gets when its answer does not come in time: 429 like any
 * order whose fate is not known (the script may still run once Redis
 * answers), so the retry is safe: it is taken now, or refused with 409
 * because the first one was. */
static void order_timed_out(const sk_app *app, sk_response *resp)
{
    char msg[160];
    snprintf(msg, sizeof msg, "no answer from Redis within %d ms; retry (409 says an earlier try was taken)",
             app->answer_timeout_ms);
    error_with(resp, 429, "busy", NULL, msg);
    resp->route = SK_ROUTE_ORDER_CREATE;
}

/* The hot path without waiting, where the strategy can: 1 when the answer
 * will come through done() (and *resp holds the answer for a timeout), 0
 * when *resp holds it now. */
static int order_create_async(sk_app *app, int64_t uid, int64_t vid, sk_response *resp, sk_api_done *done, void *arg)
{
    pending_order *p = malloc(sizeof *p);
    if (!p) {
        order_create(app, uid, vid, resp);
        return 0;
    }
    *p = (pending_order){done, arg};
    /* Built before the call: the answer may come before it returns. */
    sk_response fallback;
    memset(&fallback, 0, sizeof fallback);
    order_timed_out(app, &fallback);
    sk_result r = SK_INTERNAL;
    uint64_t oid = 0;
    sk_metrics_in_flight(1); /* before: order_decided may come first */
    if (app->strategy.ops->order_create_async(app->strategy.ctx, uid, vid, app_now(app), order_decided, p, &r, &oid)) {
        *resp = fallback;
        return 1;
    }
    sk_response_free(&fallback);
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
    json_reply(resp, 200, order_json(&o));
}

/* The caller's own order of a voucher: a client whose 201 was lost (a
 * timeout, a dropped connection) learns here whether it has an order and
 * its id, instead of ordering again to find out. */
static void my_order(sk_app *app, int64_t uid, int64_t vid, sk_response *resp)
{
    sk_order o;
    sk_result r = app->strategy.ops->order_of_user(app->strategy.ctx, uid, vid, &o);
    if (r != SK_OK) {
        result_error(resp, r);
        return;
    }
    json_reply(resp, 200, order_json(&o));
}

/* Liveness: the process answers. Nothing else is asked, so a Redis or
 * database outage never gets the service restarted (readiness, below,
 * takes it out of rotation instead). */
static void healthz(const sk_app *app, sk_response *resp)
{
    json_reply(resp, 200, json_pack("{ss ss}", "status", "ok", "strategy", app->strategy.ops->name));
}

/* Readiness, for load balancers: 200 only when Redis and the database
 * both answer, so a server that cannot sell is taken out of rotation; the
 * 503 names what does not answer ("down": ["redis", "database"]). */
static void readyz_reply(const sk_app *app, int down, sk_response *resp)
{
    resp->route = SK_ROUTE_READYZ;
    if (!down) {
        json_reply(resp, 200, json_pack("{ss ss}", "status", "ok", "strategy", app->strategy.ops->name));
        return;
    }
    const char *msg = down == (SK_DOWN_REDIS | SK_DOWN_DB) ? "redis and the database do not answer"
                      : down == SK_DOWN_REDIS              ? "redis does not answer"
                                                           : "the database does not answer";
    json_t *list = json_array();
    if (list && (down & SK_DOWN_REDIS)) json_array_append_new(list, json_string("redis"));
    if (list && (down & SK_DOWN_DB)) json_array_append_new(list, json_string("database"));
    json_reply(resp, 503, list ? json_pack("{ss so ss}", "error", "unavailable", "down", list, "message", msg) : NULL);
    if (resp->status == 503) resp->retry_after = 1;
}

/* A readiness probe answered later: the strategy's answer, for the HTTP
 * layer. */
typedef struct pending_ready {
    const sk_app *app;
    sk_api_done *done;
    void *arg;
} pending_ready;

static void ready_decided(void *arg, int down)
{
    pending_ready *p = arg;
    sk_response resp;
    memset(&resp, 0, sizeof resp);
    readyz_reply(p->app, down, &resp);
    sk_api_done *done = p->done;
    void *darg = p->arg;
    free(p);
    done(darg, &resp);
}

/* Without a thread waiting for Redis where the strategy can: a Redis that
 * hangs gets the probe its 503 at the order timeout, like an order. */
static int readyz(sk_app *app, sk_response *resp, sk_api_done *done, void *arg)
{
    int down = 0;
    pending_ready *p = done && app->strategy.ops->health_async ? malloc(sizeof *p) : NULL;
    if (!p) {
        readyz_reply(app, app->strategy.ops->health(app->strategy.ctx), resp);
        return 0;
    }
    *p = (pending_ready){app, done, arg};
    sk_response fallback;
    memset(&fallback, 0, sizeof fallback);
    readyz_reply(app, SK_DOWN_REDIS, &fallback);
    if (app->strategy.ops->health_async(app->strategy.ctx, ready_decided, p, &down)) {
        *resp = fallback;
        return 1;
    }
    free(p);
    sk_response_free(&fallback);
    readyz_reply(app, down, resp);
    return 0;
}

/* Prometheus scrapes this; it needs no token (it carries no user data). */
static void metrics(sk_response *resp)
{
    char *text = sk_metrics_render();
    if (!text) {
        out_of_memory(resp);
        return;
    }
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
    resp->body = text;
    resp->body_len = strlen(text);
}

/* The description is built once from the route table (openapi.c). */
static void openapi(sk_response *resp)
{
    const char *text = sk_openapi_json();
    char *copy = text ? strdup(text) : NULL;
    if (!copy) {
        out_of_memory(resp);
        return;
    }
    resp->status = 200;
    resp->content_type = json_ctype;
    resp->body = copy;
    resp->body_len = strlen(copy);
}

/* Checks run cheapest first and in a fixed order (route, method, token,
 * id, body; for an order then the admission limits), so a request is refused for the first thing wrong with it and
 * nothing reaches a strategy unauthenticated or unparsed. With `done`, an
 * order may be answered later (returns 1); see sk_api_handle_async(). */
static int handle(sk_app *app, const sk_request *req, sk_response *resp, sk_api_done *done, void *arg)
{
    memset(resp, 0, sizeof *resp);
    resp->route = SK_ROUTE_OTHER;
    char allow[sizeof resp->allow];
    const char *idp = NULL;
    size_t idlen = 0;
    const sk_route_def *rt =
        req->path && req->method ? sk_route_match(req->method, req->path, &idp, &idlen, allow, sizeof allow) : NULL;
    if (!rt) {
        if (req->path && req->method && allow[0]) {
            error_with(resp, 405, "method_not_allowed", NULL, "this path takes other methods (see Allow)");
            memcpy(resp->allow, allow, sizeof allow);
        } else {
            error_with(resp, 404, "not_found", NULL, "no such route (GET /openapi.json lists them)");
        }
        return 0;
    }
    resp->route = rt->route;
    int64_t uid = -1;
    if (rt->auth != SK_AUTH_NONE) {
        int why = sk_auth_header(app->secret, app->secret_len, req->authorization, app_now(app), &uid);
        if (why != 0) {
            unauthorized(resp, why);
            return 0;
        }
        if (rt->auth == SK_AUTH_ADMIN && uid != 0) {
            error_with(resp, 403, "forbidden", NULL, "only the admin (user 0) may do this");
            return 0;
        }
    }
    uint64_t id = 0;
    if (idp && sk_parse_u64(idp, idlen, INT64_MAX, &id) != 0) {
        error_with(resp, 400, "bad_id", "id", "must be a decimal integer from 0 to 9223372036854775807");
        return 0;
    }
    switch (rt->route) {
    case SK_ROUTE_HEALTHZ: healthz(app, resp); break;
    case SK_ROUTE_READYZ: return readyz(app, resp, done, arg);
    case SK_ROUTE_METRICS: metrics(resp); break;
    case SK_ROUTE_OPENAPI: openapi(resp); break;
    case SK_ROUTE_VOUCHER_CREATE: voucher_create(app, req, resp); break;
    case SK_ROUTE_VOUCHER_LIST: voucher_list(app, req, resp); break;
    case SK_ROUTE_VOUCHER_GET: voucher_get(app, (int64_t)id, resp); break;
    case SK_ROUTE_ORDER_CREATE:
        if (!admitted(app, uid, resp)) break;
        if (done && app->strategy.ops->order_create_async)
            return order_create_async(app, uid, (int64_t)id, resp, done, arg);
        order_create(app, uid, (int64_t)id, resp);
        break;
    case SK_ROUTE_MY_ORDER: my_order(app, uid, (int64_t)id, resp); break;
    case SK_ROUTE_ORDER_GET: order_get(app, uid, id, resp); break;
    default: error(resp, 404, "not_found"); break;
    }
    resp->route = rt->route;
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
