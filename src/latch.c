/*
 * The count-down latch: a counter that, on reaching zero, is deleted and
 * announces it with a "*" message, which wakes every waiter of every
 * process at once (a plain release wakes one).
 */
#include <stdio.h>
#include <stdlib.h>

#include "client.h"
#include "op.h"
#include "util.h"
#include "wait.h"

#define COUNT_MAX 0x7fffffffL

struct dlock_latch {
    dlock_client *client;
    char *key, *channel;
};

dlock_status dlock_latch_new(dlock_client *client, const char *name, dlock_latch **out)
{
    if (!out) return dlock_fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    if (!client) return dlock_fail(DLOCK_ERR_INVALID, "client is NULL");
    dlock_status st = dlock_check_name(name);
    if (st != DLOCK_OK) return st;
    dlock_latch *l = calloc(1, sizeof *l);
    if (l) {
        l->client = client;
        l->key = dlock_key(name, ":latch");
        l->channel = dlock_key(name, ":latch:ch");
    }
    if (!l || !l->key || !l->channel) {
        dlock_latch_free(l);
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    *out = l;
    return DLOCK_OK;
}

void dlock_latch_free(dlock_latch *l)
{
    if (!l) return;
    free(l->key);
    free(l->channel);
    free(l);
}

dlock_status dlock_latch_set(dlock_latch *l, long count, int *was_set)
{
    if (was_set) *was_set = 0;
    if (!l) return dlock_fail(DLOCK_ERR_INVALID, "latch is NULL");
    if (count < 1 || count > COUNT_MAX)
        return dlock_fail(DLOCK_ERR_INVALID, "latch count must be 1 to %ld", COUNT_MAX);
    char n[24];
    snprintf(n, sizeof n, "%ld", count);
    dlock_op op;
    dlock_op_new(l->client, l->key, &op);
    const char *keys[2] = {l->key, op.key};
    const char *args[3] = {n, op.seq, op.ttl};
    long long set;
    dlock_status st = dlock_eval_int(l->client, DLOCK_SCRIPT_SEM_SET, 2, keys, 3, args, &set);
    if (st == DLOCK_OK && was_set) *was_set = set == 1;
    return st;
}

dlock_status dlock_latch_count_down(dlock_latch *l, long *remaining)
{
    if (!l) return dlock_fail(DLOCK_ERR_INVALID, "latch is NULL");
    dlock_op op;
    dlock_op_new(l->client, l->key, &op);
    const char *keys[3] = {l->key, l->channel, op.key};
    const char *args[3] = {l->client->publish, op.seq, op.ttl};
    long long left;
    dlock_status st = dlock_eval_int(l->client, DLOCK_SCRIPT_LATCH_COUNT_DOWN, 3, keys, 3, args, &left);
    if (st == DLOCK_OK && remaining) *remaining = (long)left;
    return st;
}

dlock_status dlock_latch_count(dlock_latch *l, long *count)
{
    if (!l || !count) return dlock_fail(DLOCK_ERR_INVALID, "latch or output is NULL");
    const char *argv[2] = {"GET", l->key};
    redisReply *r;
    dlock_status st = dlock_topo_command(l->client->topo, l->key, 2, argv, NULL, &r, NULL);
    if (st != DLOCK_OK) return st;
    if (r->type == REDIS_REPLY_NIL) *count = 0;
    else if (r->type == REDIS_REPLY_STRING) *count = strtol(r->str, NULL, 10);
    else st = dlock_reply_error(r, "GET");
    freeReplyObject(r);
    return st;
}

/* Open when the count is gone; nothing bounds how long it stays shut. */
static int latch_try(void *ctx, long *retry_ms)
{
    long count;
    dlock_status st = dlock_latch_count(ctx, &count);
    if (st != DLOCK_OK) return st;
    *retry_ms = -1;
    return count <= 0 ? DLOCK_OK : DLOCK_BUSY;
}

static dlock_status latch_await(dlock_latch *l, long wait_ms)
{
    if (wait_ms < DLOCK_WAIT_FOREVER)
        return dlock_fail(DLOCK_ERR_INVALID, "wait must be >= 0 or DLOCK_WAIT_FOREVER");
    int64_t deadline = dlock_deadline(wait_ms);
    long retry = -1;
    int result = latch_try(l, &retry);
    if (dlock_should_wait(result, wait_ms))
        result = dlock_wait_for(l->client, DLOCK_STATS_LATCH, l->channel, deadline, latch_try, l, result, retry);
    if (result == DLOCK_BUSY) return dlock_fail(DLOCK_ERR_TIMEOUT, "latch still shut when time ran out");
    return (dlock_status)result;
}

/* An await is the latch's acquire: counted as one, however it ends. */
dlock_status dlock_latch_await(dlock_latch *l, long wait_ms)
{
    if (!l) return dlock_fail(DLOCK_ERR_INVALID, "latch is NULL");
    int64_t since = dlock_stats_clock();
    dlock_status st = latch_await(l, wait_ms);
    dlock_stats_acquired(&l->client->stats, DLOCK_STATS_LATCH, since, st);
    return st;
}
