/* GET /openapi.json, generated from the route table; see openapi.h. */
#include "openapi.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "dlock.h"
#include "routes.h"

/* One sentence per status: what it means on this API, with the error
 * codes a client branches on (SK_RESULTS in seckill.h, and api.c's own). */
static const char *status_text(int status)
{
    switch (status) {
    case 200: return "OK";
    case 201: return "Created; Location names the new resource";
    case 400:
        return "Bad request: malformed JSON (bad_json), a member or query parameter that breaks its rule "
               "(bad_request, with field and message), an id that is not a decimal integer (bad_id), or an "
               "HTTP/1.1 request without Host (missing_host)";
    case 401: return "No valid bearer token (unauthorized; reason: missing, malformed, bad_signature, expired)";
    case 403: return "Not the admin (forbidden), or outside the sale window (not_started, ended)";
    case 404: return "No such voucher (no_voucher), order (no_order) or route (not_found)";
    case 405: return "The path does not take this method (method_not_allowed); Allow lists those it takes";
    case 409: return "The user has an order of this voucher already (already_ordered)";
    case 410: return "Sold out (sold_out)";
    case 413: return "The body is larger than 8192 bytes (too_large)";
    case 429:
        return "Try again after Retry-After seconds (busy): Redis is slow, restarting or failing over, or the "
               "order's fate is not known yet; a retry is safe (409 if an earlier try was taken). Or over an "
               "admission limit (rate_limited, with scope user or total and retry_after_ms): the stock was not "
               "touched";
    case 500: return "The service failed (internal)";
    case 503: return "Redis or the database does not answer (unavailable); retry after Retry-After seconds";
    }
    return "Other";
}

static json_t *ref(const char *schema)
{
    char r[96];
    snprintf(r, sizeof r, "#/components/schemas/%s", schema);
    return json_pack("{ss}", "$ref", r);
}

static json_t *response(const sk_route_def *d, int status)
{
    json_t *o = json_pack("{ss}", "description", status_text(status));
    if (!o) return NULL;
    json_t *schema = status >= 400  ? ref("Error")
                     : d->ok_schema ? ref(d->ok_schema)
                                    : json_pack("{ss}", "type", "string");
    const char *type = status >= 400 ? "application/json" : d->ok_type;
    json_object_set_new(o, "content", json_pack("{s{so}}", type, "schema", schema));
    json_t *headers = json_object();
    if (status == 429 || status == 503)
        json_object_set_new(headers, "Retry-After",
                            json_pack("{ss s{ss}}", "description", "seconds to wait", "schema", "type", "integer"));
    if (status == d->ok && d->location) {
        char text[128];
        snprintf(text, sizeof text, "the new resource, %s", d->location);
        json_object_set_new(headers, "Location",
                            json_pack("{ss s{ss}}", "description", text, "schema", "type", "string"));
    }
    if (status == 405)
        json_object_set_new(
            headers, "Allow",
            json_pack("{ss s{ss}}", "description", "the methods the path takes", "schema", "type", "string"));
    if (status == 401)
        json_object_set_new(
            headers, "WWW-Authenticate",
            json_pack("{ss s{ss}}", "description", "Bearer realm=\"seckill\" (RFC 6750)", "schema", "type", "string"));
    if (json_object_size(headers)) json_object_set_new(o, "headers", headers);
    else json_decref(headers);
    return o;
}

static json_t *parameters(const sk_route_def *d)
{
    json_t *a = json_array();
    if (strstr(d->path, "{id}"))
        json_array_append_new(a, json_pack("{ss ss sb s{ss ss si}}", "name", "id", "in", "path", "required", 1,
                                           "schema", "type", "integer", "format", "int64", "minimum", 0));
    if (d->paged) {
        json_array_append_new(a, json_pack("{ss ss ss s{ss si si}}", "name", "after", "in", "query", "description",
                                           "the last id of the previous page (the next link says it)", "schema", "type",
                                           "integer", "minimum", 0, "default", 0));
        json_array_append_new(a, json_pack("{ss ss ss s{ss si si si}}", "name", "limit", "in", "query", "description",
                                           "vouchers a page", "schema", "type", "integer", "minimum", 1, "maximum", 100,
                                           "default", 20));
    }
    return a;
}

static json_t *operation(const sk_route_def *d)
{
    json_t *op = json_pack("{ss ss}", "operationId", d->operation, "summary", d->summary);
    json_t *params = parameters(d);
    if (json_array_size(params)) json_object_set_new(op, "parameters", params);
    else json_decref(params);
    if (d->auth != SK_AUTH_NONE) json_object_set_new(op, "security", json_pack("[{s[]}]", "bearer"));
    if (d->request)
        json_object_set_new(
            op, "requestBody",
            json_pack("{sb s{s{so}}}", "required", 1, "content", "application/json", "schema", ref(d->request)));
    json_t *responses = json_object();
    char key[8];
    snprintf(key, sizeof key, "%d", d->ok);
    json_object_set_new(responses, key, response(d, d->ok));
    for (const int *s = d->errors; *s; s++) {
        snprintf(key, sizeof key, "%d", *s);
        json_object_set_new(responses, key, response(d, *s));
    }
    for (const int *s = sk_route_common_statuses(); *s; s++) {
        snprintf(key, sizeof key, "%d", *s);
        json_object_set_new(responses, key, response(d, *s));
    }
    json_object_set_new(op, "responses", responses);
    return op;
}

/* The bodies, written once here. */
static json_t *schemas(void)
{
    json_t *integer = json_pack("{ss ss}", "type", "integer", "format", "int64");
    json_t *s = json_object();
    json_object_set_new(
        s, "Error",
        json_pack("{ss s[s] s{s{ss ss} s{ss ss} s{ss ss} s{ss ss} s{ss s{ss} ss} s{ss s[ss] ss} s{ss ss}}}", "type",
                  "object", "required", "error", "properties", "error", "type", "string", "description",
                  "a code clients branch on", "field", "type", "string", "description",
                  "the body member or query parameter at fault", "message", "type", "string", "description",
                  "the rule broken, for people", "reason", "type", "string", "description",
                  "401 only: missing, malformed, bad_signature or expired", "down", "type", "array", "items", "type",
                  "string", "description", "503 of /readyz: redis and/or database", "scope", "type", "string", "enum",
                  "user", "total", "description",
                  "429 rate_limited only: the limit that refused, --rate-per-user or --rate-total", "retry_after_ms",
                  "type", "integer", "description", "429 rate_limited only: ms until that limit's next permit is due"));
    json_object_set_new(s, "VoucherNew",
                        json_pack("{ss s[ssss] sb s{s{ss si si} s{sO si si} s{sO si} s{sO si}}}", "type", "object",
                                  "required", "title", "stock", "begin", "end", "additionalProperties", 0, "properties",
                                  "title", "type", "string", "minLength", 1, "maxLength", 200, "stock", "type",
                                  json_object_get(integer, "type"), "minimum", 0, "maximum", 100000000, "begin", "type",
                                  json_object_get(integer, "type"), "minimum", 0, "end", "type",
                                  json_object_get(integer, "type"), "minimum", 1));
    json_object_set_new(s, "VoucherCreated",
                        json_pack("{ss s[s] s{sO}}", "type", "object", "required", "id", "properties", "id", integer));
    json_object_set_new(s, "Voucher",
                        json_pack("{ss s[sssss] s{sO s{ss} sO sO sO}}", "type", "object", "required", "id", "title",
                                  "stock", "begin", "end", "properties", "id", integer, "title", "type", "string",
                                  "stock", integer, "begin", integer, "end", integer));
    json_object_set_new(s, "VoucherPage",
                        json_pack("{ss s[ss] s{s{ss so} s{ss sb ss}}}", "type", "object", "required", "vouchers",
                                  "next", "properties", "vouchers", "type", "array", "items", ref("Voucher"), "next",
                                  "type", "string", "nullable", 1, "description",
                                  "the URL of the next page; null on the last"));
    json_object_set_new(s, "OrderCreated",
                        json_pack("{ss s[s] s{s{ss ss}}}", "type", "object", "required", "order_id", "properties",
                                  "order_id", "type", "string", "description", "decimal: 64 bits"));
    json_object_set_new(s, "Order",
                        json_pack("{ss s[ssss] s{s{ss} sO sO s{ss s[sss]}}}", "type", "object", "required", "order_id",
                                  "user_id", "voucher_id", "status", "properties", "order_id", "type", "string",
                                  "user_id", integer, "voucher_id", integer, "status", "type", "string", "enum",
                                  "pending", "created", "rejected"));
    json_object_set_new(s, "Health",
                        json_pack("{ss s{s{ss} s{ss}}}", "type", "object", "properties", "status", "type", "string",
                                  "strategy", "type", "string"));
    json_decref(integer);
    return s;
}

static char *text;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Paths in table order, each with its operations. */
static void build(void)
{
    json_t *paths = json_object();
    size_t n;
    const sk_route_def *t = sk_routes(&n);
    for (size_t i = 0; paths && i < n; i++) {
        json_t *item = json_object_get(paths, t[i].path);
        if (!item) {
            item = json_object();
            json_object_set_new(paths, t[i].path, item);
        }
        char m[8];
        size_t k = 0;
        for (; t[i].method[k] && k < sizeof m - 1; k++) m[k] = (char)(t[i].method[k] | 0x20);
        m[k] = '\0';
        json_object_set_new(item, m, operation(&t[i]));
    }
    json_t *doc = json_pack(
        "{ss s{ss ss ss} so s{so s{s{ss ss}}}}", "openapi", "3.0.3", "info", "title", "seckill", "version",
        DLOCK_VERSION, "description",
        "The flash-sale voucher service. Every error is a JSON object with an error code (see Error).", "paths", paths,
        "components", "schemas", schemas(), "securitySchemes", "bearer", "type", "http", "scheme", "bearer");
    text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
}

const char *sk_openapi_json(void)
{
    pthread_once(&once, build);
    return text;
}
