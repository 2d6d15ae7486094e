/*
 * Fuzz target for the request layer: routing, bearer tokens, voucher JSON
 * and every error path of api.c, driven in-process against an in-memory
 * strategy (no Redis, no database), so a run does millions of requests.
 *
 * Input: "METHOD PATH[?QUERY]\nAUTHORIZATION\nBODY". An AUTHORIZATION line of
 * "-" means no header. Invariants checked for every input: the status is
 * 2xx-4xx (the memory strategy never fails), the body is a JSON object
 * (except /metrics), every 4xx body carries a string "error", a 405
 * names the allowed methods and a 201 names what it made in Location.
 *
 * Built as a libFuzzer target with clang (-DDLOCK_FUZZ=ON) and replayed
 * with generated mutations by replay.c in every test run. The checks are
 * FUZZ_CHECK, not assert(), so that they also hold in release builds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../../fuzz/fuzz_check.h" /* checks that survive -DNDEBUG */
#include "common/seckill.h"
#include "service/api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* For replay.c: pieces of requests, paths and JSON worth splicing in. */
const char *const fuzz_fragments[] = {
    "GET ",
    "POST ",
    "/api/vouchers",
    "/api/orders/",
    "/orders",
    "/",
    "//",
    "0",
    "1",
    "2",
    "9223372036854775807",
    "9223372036854775808",
    "-1",
    "007",
    "Bearer ",
    "0.1800000000.",
    ".",
    "\n",
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "\"title\"",
    "\"stock\"",
    "\"begin\"",
    "\"end\"",
    "null",
    "true",
    "1.5",
    "1e3",
    "\\u0000",
    "\\ud800",
    "\xff",
    "\xc3\xa9",
    " ",
    "%00",
    "?x=1",
    "HEAD ",
    "DELETE ",
    "/order",
    "/readyz",
    "/openapi.json",
    "\"colour\"",
    NULL,
};
const long fuzz_rounds = 10000;

#define FUZZ_NOW 1700000000
#define MAX_V 16
#define MAX_O 64

/* The memory strategy: enough behaviour to reach every branch of api.c. */
static sk_voucher vouchers[MAX_V];
static int nv;
static sk_order orders[MAX_O];
static int no;

static sk_result m_vcreate(void *ctx, const sk_voucher *v, int64_t *id)
{
    (void)ctx;
    if (nv == MAX_V) nv = 0;
    vouchers[nv] = *v;
    vouchers[nv].id = nv + 1;
    *id = ++nv;
    return SK_OK;
}

static sk_result m_vget(void *ctx, int64_t id, sk_voucher *out)
{
    (void)ctx;
    if (id < 1 || id > nv) return SK_NO_VOUCHER;
    *out = vouchers[id - 1];
    return SK_OK;
}

static sk_result m_ocreate(void *ctx, int64_t uid, int64_t vid, int64_t now, uint64_t *oid)
{
    (void)ctx;
    if (vid < 1 || vid > nv) return SK_NO_VOUCHER;
    sk_voucher *v = &vouchers[vid - 1];
    if (now < v->begin) return SK_NOT_STARTED;
    if (now >= v->end) return SK_ENDED;
    for (int i = 0; i < no; i++)
        if (orders[i].user_id == uid && orders[i].voucher_id == vid) return SK_ALREADY;
    if (v->stock <= 0) return SK_SOLD_OUT;
    if (no == MAX_O) return SK_BUSY;
    v->stock--;
    orders[no] = (sk_order){.id = (uint64_t)no + 1000, .user_id = uid, .voucher_id = vid, .status = SK_ORDER_PENDING};
    *oid = orders[no++].id;
    return SK_OK;
}

static sk_result m_oget(void *ctx, uint64_t id, sk_order *out)
{
    (void)ctx;
    for (int i = 0; i < no; i++)
        if (orders[i].id == id) {
            *out = orders[i];
            return SK_OK;
        }
    return SK_NO_ORDER;
}

static sk_result m_vlist(void *ctx, int64_t after, sk_voucher *out, size_t cap, size_t *n)
{
    (void)ctx;
    *n = 0;
    for (int i = 0; i < nv && *n < cap; i++)
        if (vouchers[i].id > after) out[(*n)++] = vouchers[i];
    return SK_OK;
}

static sk_result m_mine(void *ctx, int64_t uid, int64_t vid, sk_order *out)
{
    (void)ctx;
    for (int i = 0; i < no; i++)
        if (orders[i].user_id == uid && orders[i].voucher_id == vid) {
            *out = orders[i];
            return SK_OK;
        }
    return SK_NO_ORDER;
}

static int m_health(void *ctx)
{
    (void)ctx;
    return 0;
}

static void m_destroy(void *ctx)
{
    (void)ctx;
}

static const sk_strategy_ops mem_ops = {
    .name = "memory",
    .voucher_create = m_vcreate,
    .voucher_get = m_vget,
    .order_create = m_ocreate,
    .order_get = m_oget,
    .voucher_list = m_vlist,
    .order_of_user = m_mine,
    .health = m_health,
    .destroy = m_destroy,
};

static int64_t fixed_now(void)
{
    return FUZZ_NOW;
}

static const char secret[] = "fuzz-secret-0123456789";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Reset the state now and then so inputs do not pile up forever. */
    static unsigned calls;
    if (++calls % 1024 == 0) nv = no = 0;

    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *line1 = buf, *auth = NULL, *body = NULL;
    size_t body_len = 0;
    char *nl = memchr(buf, '\n', size);
    if (nl) {
        *nl = '\0';
        auth = nl + 1;
        char *nl2 = memchr(auth, '\n', size - (size_t)(auth - buf));
        if (nl2) {
            *nl2 = '\0';
            body = nl2 + 1;
            body_len = size - (size_t)(body - buf);
        }
    }
    if (auth && strcmp(auth, "-") == 0) auth = NULL;
    char *sp = strchr(line1, ' ');
    const char *method = line1;
    char *path = (char *)"";
    if (sp) {
        *sp = '\0';
        path = sp + 1;
    }
    sk_app app = {.strategy = {&mem_ops, NULL},
                  .secret = (const unsigned char *)secret,
                  .secret_len = sizeof secret - 1,
                  .now = fixed_now};
    /* "?a=b&c": the query parameters, split as libmicrohttpd splits them. */
    sk_query_arg q[SK_QUERY_MAX];
    size_t nq = 0;
    int too_many = 0;
    char *qs = strchr(path, '?');
    if (qs) {
        *qs++ = '\0';
        char *save = NULL;
        for (char *kv = strtok_r(qs, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
            if (nq == SK_QUERY_MAX) {
                too_many = 1;
                break;
            }
            char *eq = strchr(kv, '=');
            if (eq) *eq++ = '\0';
            q[nq++] = (sk_query_arg){kv, eq};
        }
    }
    sk_request req = {.method = method,
                      .path = path,
                      .query = q,
                      .nquery = nq,
                      .query_too_long = too_many,
                      .authorization = auth,
                      .body = body,
                      .body_len = body_len,
                      .body_too_large = body_len > SK_BODY_MAX};
    sk_response resp;
    sk_api_handle(&app, &req, &resp);
    FUZZ_CHECK(resp.status >= 200 && resp.status < 500);
    FUZZ_CHECK(resp.body && strlen(resp.body) == resp.body_len);
    FUZZ_CHECK(resp.content_type);
    if (strncmp(resp.content_type, "application/json", 16) == 0) {
        json_error_t e;
        json_t *j = json_loadb(resp.body, resp.body_len, 0, &e);
        FUZZ_CHECK(json_is_object(j));
        if (resp.status >= 400) FUZZ_CHECK(json_is_string(json_object_get(j, "error")));
        json_decref(j);
    } else {
        FUZZ_CHECK(resp.status == 200 && resp.route == SK_ROUTE_METRICS);
    }
    if (resp.status == 405) FUZZ_CHECK(resp.allow[0]);
    if (resp.status == 201) FUZZ_CHECK(resp.location[0] == '/');
    sk_response_free(&resp);
    free(buf);
    return 0;
}
