/*
 * seckill.h -- the flash-sale service's shared types.
 *
 * One process serves the HTTP API (http.c, api.c), decides every order
 * through one strategy (strategy_redis.c or strategy_lock.c) and keeps the
 * truth in a database (db.h). This header holds what all of them agree on:
 * the records, the outcome codes and the strategy interface, so that the
 * request layer never knows which strategy or which database it talks to.
 */
#ifndef SECKILL_H
#define SECKILL_H

#include <stddef.h>
#include <stdint.h>

/* Limits of what the API accepts. They bound memory per request and keep
 * every number inside SQLite's signed 64-bit integers. */
#define SK_TITLE_MAX 200          /* bytes of a voucher title */
#define SK_STOCK_MAX 100000000LL  /* units of one voucher */
#define SK_TIME_MAX 32503680000LL /* year 3000, in Unix seconds */
#define SK_BODY_MAX 8192          /* bytes of a request body */

/*
 * What a request came to, written once: XX(name, HTTP status, code), the
 * code being what JSON errors and metrics labels say. The strategies and
 * the database return them; the HTTP layer answers each with its status
 * (api.c). SK_BUSY is 429 for every "try again": the user's own other
 * request holds the lock, Redis is restarting, failing over or being
 * re-warmed, too few replicas acknowledged, or the order's fate is not
 * known after a lost reply (seckill(1), NOTES).
 */
#define SK_RESULTS(XX)                                                                                                 \
    XX(OK, 200, "ok")                                                                                                  \
    XX(NO_VOUCHER, 404, "no_voucher")                                                                                  \
    XX(NOT_STARTED, 403, "not_started")                                                                                \
    XX(ENDED, 403, "ended")                                                                                            \
    XX(ALREADY, 409, "already_ordered")                                                                                \
    XX(SOLD_OUT, 410, "sold_out")                                                                                      \
    XX(BUSY, 429, "busy")                                                                                              \
    XX(NO_ORDER, 404, "no_order")                                                                                      \
    XX(INVALID, 400, "bad_request")                                                                                    \
    XX(UNAVAILABLE, 503, "unavailable")                                                                                \
    XX(INTERNAL, 500, "internal")

typedef enum sk_result {
#define SK_RESULT_ENUM(name, status, code) SK_##name,
    SK_RESULTS(SK_RESULT_ENUM)
#undef SK_RESULT_ENUM
        SK_RESULT_COUNT
} sk_result;

/* Short name of a result, as used in JSON errors and metrics labels
 * (seckill.c). */
const char *sk_result_code(sk_result r);

typedef struct sk_voucher {
    int64_t id;
    char title[SK_TITLE_MAX + 1];
    int64_t stock;         /* remaining units */
    int64_t initial_stock; /* units at creation */
    int64_t begin;         /* sale window [begin, end), Unix seconds */
    int64_t end;
} sk_voucher;

typedef enum sk_order_status {
    SK_ORDER_PENDING = 0, /* accepted into the stream, not yet in the database */
    SK_ORDER_CREATED,     /* persisted */
    SK_ORDER_REJECTED     /* the database refused it (its last-guard checks) */
} sk_order_status;

typedef struct sk_order {
    uint64_t id;
    int64_t user_id;
    int64_t voucher_id;
    uint64_t fence; /* lock strategy: fencing token of the user's lock; 0 otherwise */
    sk_order_status status;
} sk_order;

typedef struct sk_app sk_app;

/* Why an order was not admitted (sk_app.admit): which limit refused it
 * ("user" or "total") and when its next permit is due. */
typedef struct sk_refusal {
    const char *scope;
    long retry_after_ms;
} sk_refusal;

/*
 * A way of deciding orders. Both implementations share the database for
 * vouchers and persisted orders; they differ in where stock and buyers are
 * decided. `now` is Unix seconds, passed in so that all checks of one
 * request agree on the time.
 */
/* How an order decided without waiting ends (order_create_async). */
typedef void sk_order_done(void *arg, sk_result r, uint64_t order_id);

typedef struct sk_strategy_ops {
    const char *name;
    sk_result (*voucher_create)(void *ctx, const sk_voucher *v, int64_t *id);
    sk_result (*voucher_get)(void *ctx, int64_t id, sk_voucher *out);
    sk_result (*order_create)(void *ctx, int64_t user_id, int64_t voucher_id, int64_t now, uint64_t *order_id);
    sk_result (*order_get)(void *ctx, uint64_t order_id, sk_order *out);
    /* Up to `cap` vouchers with ids above `after`, ascending. */
    sk_result (*voucher_list)(void *ctx, int64_t after, sk_voucher *out, size_t cap, size_t *n);
    /* The user's order for the voucher, persisted or still pending;
     * SK_NO_ORDER when there is none. */
    sk_result (*order_of_user)(void *ctx, int64_t user_id, int64_t voucher_id, sk_order *out);
    /* What does not answer: 0, or SK_DOWN_REDIS and/or SK_DOWN_DB. */
    int (*health)(void *ctx);
    /* Optional (NULL: health only). The same without waiting for Redis:
     * 1 when the answer will be passed to done(arg, down) on another
     * thread, possibly before this returns; 0 when it is in *down now. */
    int (*health_async)(void *ctx, void (*done)(void *arg, int down), void *arg, int *down);
    void (*destroy)(void *ctx);
    /* Optional (NULL: order_create only). The same decision without making
     * the caller wait: 1 when the outcome will be passed to done(arg, ...)
     * on another thread, possibly before this returns; 0 when it is known
     * already, in *r and *order_id. */
    int (*order_create_async)(void *ctx, int64_t user_id, int64_t voucher_id, int64_t now, sk_order_done *done,
                              void *arg, sk_result *r, uint64_t *order_id);
} sk_strategy_ops;

/* sk_strategy_ops.health's answer, one bit per backend. */
#define SK_DOWN_REDIS 1
#define SK_DOWN_DB 2

typedef struct sk_strategy {
    const sk_strategy_ops *ops;
    void *ctx;
} sk_strategy;

/* Everything a request handler needs. Built by `serve` (service/serve.c),
 * and by the fuzz target with an in-memory strategy. */
struct sk_app {
    sk_strategy strategy;
    const unsigned char *secret; /* token key */
    size_t secret_len;
    int64_t (*now)(void);  /* Unix seconds; NULL means time(NULL) */
    int answer_timeout_ms; /* serve's --order-timeout: an order answered later
                                    (sk_api_handle_async) gets its fallback answer
                                    once this passes; 0: never */
    /* Admission before an order reaches the strategy (serve's --rate-*,
     * service/admit.c); NULL: every order goes on. SK_OK to go on,
     * SK_BUSY with *why (answered 429 rate_limited), or another result to
     * answer instead. */
    sk_result (*admit)(void *ctx, int64_t user_id, sk_refusal *why);
    void *admit_ctx;
};

#endif
