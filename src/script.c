/*
 * Running the embedded scripts.
 *
 * Scripts are called by SHA1 with EVALSHA, which saves sending their text
 * on every call. The SHA1s are computed at build time (embed_lua.cmake),
 * not asked of the server with SCRIPT LOAD: a new client (a `dlock lock` run) then costs no round
 * trip per script, and only the scripts it uses ever travel. The server
 * knows a script after its first EVAL; until then, and after a restart,
 * a failover or SCRIPT FLUSH, it answers NOSCRIPT, which is answered by
 * EVAL with the full text (the script did not run, so this never runs it
 * twice), so callers never see the difference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "util.h"

static const char *const bodies[DLOCK__SCRIPT_COUNT] = {
#define DLOCK__SCRIPT_BODY(upper, name) [DLOCK__SCRIPT_##upper] = dlock__lua_##name,
    DLOCK__LUA_SCRIPTS(DLOCK__SCRIPT_BODY)
#undef DLOCK__SCRIPT_BODY
};

/* The SHA1s of the embedded scripts, computed at build time: the same for
 * every client and every server (a script's SHA1 is that of its text). */
static const char *const shas[DLOCK__SCRIPT_COUNT] = {
#define DLOCK__SCRIPT_SHA(upper, name) [DLOCK__SCRIPT_##upper] = dlock__lua_##name##_sha,
    DLOCK__LUA_SCRIPTS(DLOCK__SCRIPT_SHA)
#undef DLOCK__SCRIPT_SHA
};

dlock_status dlock__scripts_ensure(dlock_client *client)
{
    if (atomic_load(&client->scripts_ready)) return DLOCK_OK;
    pthread_mutex_lock(&client->mu);
    if (!atomic_load(&client->scripts_ready)) {
        for (int i = 0; i < DLOCK__SCRIPT_COUNT; i++) memcpy(client->sha[i], shas[i], 41);
        atomic_store(&client->scripts_ready, 1);
    }
    pthread_mutex_unlock(&client->mu);
    return DLOCK_OK;
}

const char *dlock__script_body(dlock__script_id id)
{
    return bodies[id];
}

/* Run a script whose reply is one integer, into *out. */
dlock_status dlock__eval_int(dlock_client *client, dlock__script_id id, int nkeys, const char **keys, int nargs,
                             const char **args, long long *out)
{
    redisReply *r = NULL;
    dlock_status st = dlock__eval(client, id, nkeys, keys, nargs, args, &r, NULL);
    if (st != DLOCK_OK) return st;
    if (r->type == REDIS_REPLY_INTEGER) *out = r->integer;
    else st = dlock__fail(DLOCK_ERR_REDIS, "script: unexpected reply type %d", r->type);
    freeReplyObject(r);
    return st;
}

dlock_status dlock__eval_raw(dlock_client *client, const char *sha, const char *body, int nkeys,
                             const char *const *keys, int nargs, const char *const *args, int flags, redisReply **out,
                             dlock__acks *acks, int *retried)
{
    const char *stack[40];
    int argc = 3 + nkeys + nargs;
    const char **argv = argc <= 40 ? stack : malloc((size_t)argc * sizeof *argv);
    char nk[24];
    int again = 0;
    if (!argv) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock__fmt_ll(nkeys, nk);
    argv[0] = "EVALSHA";
    argv[1] = sha;
    argv[2] = nk;
    if (nkeys) memcpy(argv + 3, keys, (size_t)nkeys * sizeof *keys);
    if (nargs) memcpy(argv + 3 + nkeys, args, (size_t)nargs * sizeof *args);

    /* Every key of one call shares a hash tag: the first routes it. */
    const char *route = nkeys ? keys[0] : NULL;
    char nrep[24], tmo[24];
    dlock__fmt_ll(acks ? acks->replicas : 0, nrep);
    dlock__fmt_ll(acks ? acks->timeout_ms : 0, tmo);
    const char *wait_argv[3] = {"WAIT", nrep, tmo};
    const int argcs[2] = {argc, 3};
    const char *const *argvs[2] = {argv, wait_argv};
    redisReply *r = NULL, *rep[2];
    dlock_status st;
    if (retried) *retried = 0;
    for (int pass = 0; pass < 2; pass++) {
        /* With acks, WAIT follows on the same connection, in the same write,
         * so it waits for exactly this script's writes. */
        st = dlock__topo_pipeline(client->topo, route, acks ? 2 : 1, argcs, argvs, NULL,
                                  acks ? flags | DLOCK__IO_EXCLUSIVE : flags, rep, &again);
        if (retried && again) *retried = 1;
        if (st != DLOCK_OK) break;
        r = rep[0];
        if (acks) {
            acks->acks = rep[1]->type == REDIS_REPLY_INTEGER ? rep[1]->integer : -1;
            freeReplyObject(rep[1]);
        }
        if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, "NOSCRIPT", 8) != 0) break;
        freeReplyObject(r);
        r = NULL;
        argv[0] = "EVAL";
        argv[1] = body;
    }
    if (argv != stack) free(argv);
    if (st == DLOCK_OK) *out = r;
    return st;
}

dlock_status dlock__command_acked(dlock_client *client, const char *key, int flags, int argc, const char *const *argv,
                                  const size_t *lens, dlock__acks *acks, redisReply **out)
{
    char nrep[16], tmo[16];
    snprintf(nrep, sizeof nrep, "%d", acks->replicas);
    snprintf(tmo, sizeof tmo, "%d", acks->timeout_ms);
    const char *wait_argv[3] = {"WAIT", nrep, tmo};
    const int argcs[2] = {argc, 3};
    const char *const *argvs[2] = {argv, wait_argv};
    const size_t *const lensv[2] = {lens, NULL};
    redisReply *rep[2];
    /* One connection of its own: WAIT counts the replicas that have every
     * write made on its connection so far, and blocks it on the server. */
    dlock_status st =
        dlock__topo_pipeline(client->topo, key, 2, argcs, argvs, lensv, flags | DLOCK__IO_EXCLUSIVE, rep, NULL);
    if (st != DLOCK_OK) return st;
    acks->acks = rep[1]->type == REDIS_REPLY_INTEGER ? rep[1]->integer : -1;
    freeReplyObject(rep[1]);
    *out = rep[0];
    return DLOCK_OK;
}

/* The library's own scripts: loaded once, and an error reply is a failure
 * with the server's message. */
static dlock_status eval_impl(dlock_client *client, dlock__script_id id, int nkeys, const char **keys, int nargs,
                              const char **args, redisReply **out, long long *acks, int *retried)
{
    dlock_status st = dlock__scripts_ensure(client);
    if (st != DLOCK_OK) return st;
    redisReply *r;
    dlock__acks a = {client->replica_acks, client->replica_timeout_ms, -1};
    st = dlock__eval_raw(client, client->sha[id], bodies[id], nkeys, keys, nargs, args, 0, &r, acks ? &a : NULL,
                         retried);
    if (acks) *acks = a.acks;
    if (st != DLOCK_OK) return st;
    if (r->type == REDIS_REPLY_ERROR) {
        st = dlock__reply_error(r, "script");
        freeReplyObject(r);
        return st;
    }
    *out = r;
    return DLOCK_OK;
}

dlock_status dlock__eval(dlock_client *client, dlock__script_id id, int nkeys, const char **keys, int nargs,
                         const char **args, redisReply **out, int *retried)
{
    return eval_impl(client, id, nkeys, keys, nargs, args, out, NULL, retried);
}

dlock_status dlock__eval_acked(dlock_client *client, dlock__script_id id, int nkeys, const char **keys, int nargs,
                               const char **args, redisReply **out, long long *acks)
{
    *acks = -1;
    if (client->replica_acks <= 0) return eval_impl(client, id, nkeys, keys, nargs, args, out, NULL, NULL);
    return eval_impl(client, id, nkeys, keys, nargs, args, out, acks, NULL);
}
