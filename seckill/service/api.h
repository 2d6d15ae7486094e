/*
 * api.h -- the HTTP API as a pure function: a parsed request in, a status
 * and a body out. No sockets here (http.c does those), so the whole of
 * routing, authentication and JSON handling can be fuzzed in-process.
 */
#ifndef SECKILL_API_H
#define SECKILL_API_H

#include <stddef.h>

#include "common/seckill.h"
#include "metrics.h"

/* One query parameter, as sent (not unescaped). */
typedef struct sk_query_arg {
    const char *key, *value; /* value may be NULL ("?after") */
} sk_query_arg;

#define SK_QUERY_MAX 8

typedef struct sk_request {
    const char *method;        /* "GET", "POST", ... */
    const char *path;          /* without the query string */
    const sk_query_arg *query; /* its parameters, in the order sent */
    size_t nquery;
    int query_too_long;        /* more than SK_QUERY_MAX parameters (the rest dropped) */
    const char *authorization; /* the Authorization header, or NULL */
    const char *body;          /* may be NULL when body_len is 0 */
    size_t body_len;
    int body_too_large; /* the body passed SK_BODY_MAX and was dropped */
} sk_request;

typedef struct sk_response {
    int status;
    char *body; /* malloc'ed, NUL-terminated */
    size_t body_len;
    const char *content_type;     /* static */
    char allow[48];               /* set with 405: the methods the path takes */
    char location[64];            /* set with 201: where the new resource is */
    int retry_after;              /* seconds, sent as Retry-After with 429 and 503 */
    const char *www_authenticate; /* static; set with 401 */
    sk_route route;
} sk_response;

/* Handle one request. Always fills *resp with a status and a body (a JSON
 * error when anything is wrong); never fails. */
void sk_api_handle(sk_app *app, const sk_request *req, sk_response *resp);

/* Where an answer given later goes: `resp` is the callee's to send and
 * free. Runs on a thread of the strategy's or the library's. */
typedef void sk_api_done(void *arg, sk_response *resp);

/* sk_api_handle(), except that an order on a strategy that can decide
 * without waiting (the redis strategy without --replica-acks) returns 1
 * at once and is answered through done(arg, resp) on another thread,
 * possibly before this returns. 0: *resp holds the answer now. With 1,
 * *resp holds the answer to give instead should app->answer_timeout_ms
 * pass first (429 busy: the order's fate is not known yet); the caller
 * frees it either way, and done() still comes. */
int sk_api_handle_async(sk_app *app, const sk_request *req, sk_response *resp, sk_api_done *done, void *arg);

void sk_response_free(sk_response *resp);

/* Why a body was refused: the JSON error code ("bad_json",
 * "bad_request"), the member at fault (NULL when it is the body as a
 * whole) and the rule it broke, as the 400 answer says them. */
typedef struct sk_invalid {
    const char *code;
    const char *field;   /* points into name, or static */
    const char *message; /* points into text, or static */
    char name[64];
    char text[200];
} sk_invalid;

/* Check a voucher creation body. 0 and *out filled, or -1 and *why set. */
int sk_parse_voucher(const char *body, size_t len, sk_voucher *out, sk_invalid *why);

#endif
