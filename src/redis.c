/*
 * The public raw-command API (dlock_redis.h): a thin face on the same
 * topology, pool and script runner the library's own primitives use, so a
 * program's data commands get routing, failover handling and NOSCRIPT
 * recovery without a second client of its own.
 */
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "client.h"
#include "dlock_redis.h"
#include "util.h"

struct dlock_script {
    dlock_client *client;
    char *text;
    char sha[41];
};

/* The public flags, in the connection layer's terms. */
static int io_flags(int flags)
{
    return (flags & DLOCK_REDIS_ONCE ? DLOCK__IO_ONCE : 0) | (flags & DLOCK_REDIS_BLOCKING ? DLOCK__IO_EXCLUSIVE : 0);
}

/* An error reply is a failure with the server's message, but the caller
 * still gets the reply: some errors (BUSYGROUP, say) are answers. */
static dlock_status settle(redisReply *r, const char *what)
{
    return r->type == REDIS_REPLY_ERROR ? dlock__reply_error(r, what) : DLOCK_OK;
}

dlock_status dlock_redis_command(dlock_client *client, const char *key, int flags, int argc, const char *const *argv,
                                 const size_t *argvlen, redisReply **reply)
{
    if (!reply) return dlock__fail(DLOCK_ERR_INVALID, "no reply pointer");
    *reply = NULL;
    if (!client || argc < 1 || !argv || !argv[0]) return dlock__fail(DLOCK_ERR_INVALID, "client, argc or argv missing");
    const char *const *argvs[1] = {argv};
    const size_t *const lens[1] = {argvlen};
    dlock_status st = dlock__topo_pipeline(client->topo, key, 1, &argc, argvs, lens, io_flags(flags), reply, NULL);
    return st == DLOCK_OK ? settle(*reply, argv[0]) : st;
}

dlock_status dlock_redis_command_acked(dlock_client *client, const char *key, int flags, int argc,
                                       const char *const *argv, const size_t *argvlen, int replicas, int timeout_ms,
                                       redisReply **reply, long long *acks)
{
    if (!reply || !acks) return dlock__fail(DLOCK_ERR_INVALID, "no reply or acks pointer");
    *reply = NULL;
    *acks = -1;
    if (!client || argc < 1 || !argv || !argv[0] || replicas < 0 || timeout_ms < 0)
        return dlock__fail(DLOCK_ERR_INVALID, "client, argv, replicas or timeout missing or negative");
    dlock__acks a = {replicas, timeout_ms, -1};
    dlock_status st = dlock__command_acked(client, key, io_flags(flags), argc, argv, argvlen, &a, reply);
    *acks = a.acks;
    return st == DLOCK_OK ? settle(*reply, argv[0]) : st;
}

dlock_status dlock_script_eval_acked(dlock_script *s, int flags, int nkeys, const char *const *keys, int nargs,
                                     const char *const *args, int replicas, int timeout_ms, redisReply **reply,
                                     long long *acks)
{
    if (!reply || !acks) return dlock__fail(DLOCK_ERR_INVALID, "no reply or acks pointer");
    *reply = NULL;
    *acks = -1;
    if (!s || nkeys < 1 || !keys || nargs < 0 || (nargs && !args) || replicas < 0 || timeout_ms < 0)
        return dlock__fail(DLOCK_ERR_INVALID, "script, keys, args, replicas or timeout missing or negative");
    dlock__acks a = {replicas, timeout_ms, -1};
    dlock_status st =
        dlock__eval_raw(s->client, s->sha, s->text, nkeys, keys, nargs, args, io_flags(flags), reply, &a, NULL);
    *acks = a.acks;
    return st == DLOCK_OK ? settle(*reply, "script") : st;
}

void dlock_redis_refresh(dlock_client *client, const char *key)
{
    if (!client) return;
    int node = dlock__topo_node_known(client->topo, key, key ? strlen(key) : 0);
    if (node >= 0) dlock__topo_node_failed(client->topo, node);
}

dlock_status dlock_redis_connect(dlock_client *client, const char *key, redisContext **out)
{
    if (!out) return dlock__fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    if (!client) return dlock__fail(DLOCK_ERR_INVALID, "no client");
    int node = dlock__topo_node_for(client->topo, key, key ? strlen(key) : 0);
    if (node < 0) return dlock__fail(DLOCK_ERR_CONNECT, "no server known for \"%.100s\"", key ? key : "");
    if (client->topo->tls)
        return dlock__fail(DLOCK_ERR_INVALID, "dlock_redis_connect: a hiredis connection cannot speak TLS");
    dlock__link *l;
    dlock_status st = dlock__topo_connect(client->topo, node, &l);
    if (st == DLOCK_ERR_CONNECT) dlock__topo_node_failed(client->topo, node);
    if (st != DLOCK_OK) return st;
    *out = dlock__link_detach(l);
    return *out ? DLOCK_OK : dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
}

dlock_status dlock_script_new(dlock_client *client, const char *text, dlock_script **out)
{
    if (!out) return dlock__fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    if (!client || !text || !*text) return dlock__fail(DLOCK_ERR_INVALID, "client or script text missing");
    dlock_script *s = calloc(1, sizeof *s);
    if (!s || !(s->text = strdup(text))) {
        free(s);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    s->client = client;
    const char *argv[3] = {"SCRIPT", "LOAD", text};
    redisReply *r;
    dlock_status st = dlock_redis_command(client, NULL, 0, 3, argv, NULL, &r);
    if (st == DLOCK_OK && (r->type != REDIS_REPLY_STRING || r->len != 40))
        st = dlock__fail(DLOCK_ERR_REDIS, "SCRIPT LOAD: unexpected reply");
    if (st == DLOCK_OK) memcpy(s->sha, r->str, 41);
    if (r) freeReplyObject(r);
    if (st != DLOCK_OK) {
        dlock_script_free(s);
        return st;
    }
    *out = s;
    return DLOCK_OK;
}

void dlock_script_free(dlock_script *s)
{
    if (!s) return;
    free(s->text);
    free(s);
}

dlock_status dlock_script_eval(dlock_script *s, int flags, int nkeys, const char *const *keys, int nargs,
                               const char *const *args, redisReply **reply)
{
    if (!reply) return dlock__fail(DLOCK_ERR_INVALID, "no reply pointer");
    *reply = NULL;
    if (!s || nkeys < 1 || !keys || nargs < 0 || (nargs && !args))
        return dlock__fail(DLOCK_ERR_INVALID, "script, keys or args missing");
    dlock_status st =
        dlock__eval_raw(s->client, s->sha, s->text, nkeys, keys, nargs, args, io_flags(flags), reply, NULL, NULL);
    return st == DLOCK_OK ? settle(*reply, "script") : st;
}

dlock_status dlock_script_eval_async(dlock_script *s, int flags, int nkeys, const char *const *keys, int nargs,
                                     const char *const *args, dlock_redis_callback *cb, void *arg)
{
    if (!s || nkeys < 1 || !keys || nargs < 0 || (nargs && !args) || !cb)
        return dlock__fail(DLOCK_ERR_INVALID, "script, keys, args or callback missing");
    for (int i = 0; i < nkeys + nargs; i++)
        if (!(i < nkeys ? keys[i] : args[i - nkeys])) return dlock__fail(DLOCK_ERR_INVALID, "NULL key or argument");
    return dlock__async_eval(s->client, s->sha, s->text, io_flags(flags), nkeys, keys, nargs, args, cb, arg);
}
