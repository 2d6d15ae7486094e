/*
 * The lock strategy, the classic design (docs/HISTORY.md): read the voucher, refuse
 * early when the window is closed or the stock is gone, then take the
 * user's distributed lock ("seckill:user:UID") so one user's parallel
 * requests, on any server, run one at a time; inside it one database
 * transaction re-checks everything and inserts the order with the lock's
 * fencing token. 201 means committed.
 *
 * The lock is what the seeds teach; the database's UNIQUE(user_id,
 * voucher_id) would refuse a second order even without it. With the lock,
 * a user's burst queues in Redis instead of piling up on the database's
 * write lock, and the fencing token in each row shows which hold wrote it.
 */
#include "strategy.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "common/skutil.h"

#define LOCK_WAIT_MS 2000   /* longer than this and the user gets 429 busy (at most) */
#define LOCK_LEASE_MS 10000 /* far above one transaction; bounds a crashed holder */

typedef struct lock_strategy {
    sk_db *db;
    dlock_client *client;
    sk_orderids *ids;
    long wait_ms; /* for the user's lock: LOCK_WAIT_MS or less */
} lock_strategy;

/* Nothing to warm: this strategy reads the database only. */
static sk_result ls_voucher_create(void *ctx, const sk_voucher *v, int64_t *id)
{
    lock_strategy *s = ctx;
    return s->db->ops->voucher_create(s->db, v, sk_unix_now(), id);
}

/* The database stock is current: orders commit before 201. */
static sk_result ls_voucher_get(void *ctx, int64_t id, sk_voucher *out)
{
    lock_strategy *s = ctx;
    return s->db->ops->voucher_get(s->db, id, out);
}

/* A lock not free in time means the user's other request is running:
 * 429, try again. So is a Redis out of reach (restarting): the database
 * alone decides nothing on this path, and the sale resumes by itself once
 * Redis is back. A refused password is a configuration fault: 503. */
static sk_result from_dlock(dlock_status st)
{
    switch (st) {
    case DLOCK_OK: return SK_OK;
    case DLOCK_ERR_TIMEOUT:
    case DLOCK_ERR_CONNECT: return SK_BUSY;
    case DLOCK_ERR_AUTH: return SK_UNAVAILABLE;
    default: return SK_INTERNAL;
    }
}

static sk_result ls_order_create(void *ctx, int64_t user_id, int64_t voucher_id, int64_t now, uint64_t *order_id)
{
    lock_strategy *s = ctx;
    /* The cheap refusals first, without the lock (the seeds' steps 1-4):
     * once the stock is gone, the flood of late buyers costs one read
     * each. The transaction below checks again; this read only filters. */
    sk_voucher v;
    sk_result r = s->db->ops->voucher_get(s->db, voucher_id, &v);
    if (r != SK_OK) return r;
    if (now < v.begin) return SK_NOT_STARTED;
    if (now >= v.end) return SK_ENDED;
    /* Sold out, but is this buyer one of those who got a unit? A client
     * whose 201 was lost retries to find its order, and the man page
     * (like the redis strategy) answers 409 before 410. One more read,
     * only for the late buyers. */
    if (v.stock <= 0) {
        r = s->db->ops->order_of_user(s->db, user_id, voucher_id, NULL);
        return r == SK_OK ? SK_SOLD_OUT : r;
    }

    char name[48];
    snprintf(name, sizeof name, "seckill:user:%lld", (long long)user_id);
    dlock_lock *lock;
    dlock_status st = dlock_lock_new(s->client, name, &lock);
    if (st != DLOCK_OK) return from_dlock(st);
    uint64_t token = 0;
    st = dlock_lock_acquire(lock, s->wait_ms, LOCK_LEASE_MS, &token);
    if (st != DLOCK_OK) {
        if (st != DLOCK_ERR_TIMEOUT) SK_LOG_REPEATED(SK_LOG_ERROR, "lock %s: %s", name, dlock_last_error());
        dlock_lock_free(lock);
        return from_dlock(st);
    }
    sk_order o = {.user_id = user_id, .voucher_id = voucher_id, .fence = token};
    r = sk_orderids_next(s->ids, &o.id);
    if (r == SK_UNAVAILABLE) r = SK_BUSY; /* the ids live in Redis too */
    if (r == SK_OK) r = s->db->ops->order_place(s->db, &o, now);
    /* A failed release (lease already over, Redis gone) changes nothing
     * for this order: it is committed or not by the transaction alone. */
    if (dlock_lock_release(lock) != DLOCK_OK) SK_LOG_REPEATED(SK_LOG_WARN, "release %s: %s", name, dlock_last_error());
    dlock_lock_free(lock);
    if (r == SK_OK) *order_id = o.id;
    return r;
}

/* Orders are committed before 201, so never pending. */
static sk_result ls_order_get(void *ctx, uint64_t order_id, sk_order *out)
{
    lock_strategy *s = ctx;
    return s->db->ops->order_get(s->db, order_id, out);
}

static sk_result ls_voucher_list(void *ctx, int64_t after, sk_voucher *out, size_t cap, size_t *n)
{
    lock_strategy *s = ctx;
    return s->db->ops->voucher_list(s->db, after, out, cap, n);
}

/* Committed before 201: the database alone knows. */
static sk_result ls_order_of_user(void *ctx, int64_t user_id, int64_t voucher_id, sk_order *out)
{
    lock_strategy *s = ctx;
    uint64_t oid = 0;
    sk_result r = s->db->ops->order_of_user(s->db, user_id, voucher_id, &oid);
    if (r == SK_OK) return SK_NO_ORDER;
    if (r != SK_ALREADY) return r;
    return s->db->ops->order_get(s->db, oid, out);
}

/* Both stores must answer: the lock needs Redis, the order the database. */
static int ls_health(void *ctx)
{
    lock_strategy *s = ctx;
    dlock_lock_info info;
    int down = 0;
    /* Any read through the client proves Redis answers. */
    if (dlock_lock_inspect(s->client, "seckill:health", &info) != DLOCK_OK) down |= SK_DOWN_REDIS;
    if (s->db->ops->ping(s->db) != SK_OK) down |= SK_DOWN_DB;
    return down;
}

/* The database, client and ids belong to the caller. */
static void ls_destroy(void *ctx)
{
    free(ctx);
}

static const sk_strategy_ops lock_ops = {
    .name = "lock",
    .voucher_create = ls_voucher_create,
    .voucher_get = ls_voucher_get,
    .order_create = ls_order_create,
    .order_get = ls_order_get,
    .voucher_list = ls_voucher_list,
    .order_of_user = ls_order_of_user,
    .health = ls_health,
    .destroy = ls_destroy,
};

/* No I/O here: `serve` has already connected everything. */
int sk_strategy_lock_new(sk_db *db, dlock_client *client, sk_orderids *ids, int order_timeout_ms, sk_strategy *out)
{
    lock_strategy *s = calloc(1, sizeof *s);
    if (!s) return -1;
    s->db = db;
    s->client = client;
    s->ids = ids;
    s->wait_ms = order_timeout_ms > 0 && order_timeout_ms < LOCK_WAIT_MS ? order_timeout_ms : LOCK_WAIT_MS;
    out->ops = &lock_ops;
    out->ctx = s;
    return 0;
}
