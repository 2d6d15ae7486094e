/*
 * Asynchronous script calls: many in flight, no thread waiting for each.
 *
 * Why: a program that answers many requests at once (an HTTP server)
 * otherwise parks one thread per request until its script's reply is in,
 * and every reply costs a sleep and a wake-up of that thread. Here a call
 * is appended to the shared connection of the key's server (mux.c) and
 * the caller goes on; the mux's reader thread hands the reply back.
 *
 * The fast path is one attempt, on the connection of the server the
 * topology names now, and covers the normal case: a reply that is an
 * answer. Everything unusual goes to the slow lane, a few library threads
 * that run the synchronous path (dlock__eval_raw: NOSCRIPT, MOVED and ASK,
 * the waits for TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN and READONLY,
 * new connections, failovers) and then call back:
 *
 *   - a topology not known yet, or stale (a lookup is I/O);
 *   - a redirection or a "not now" error reply, or NOSCRIPT: the script
 *     did not run, so running it again is safe even with DLOCK_REDIS_ONCE;
 *   - a connection that failed before the command's bytes had all left;
 *   - without DLOCK_REDIS_ONCE, a connection that failed after (the
 *     synchronous path sends again, as it would for the caller).
 *
 * With DLOCK_REDIS_ONCE, a command that may have reached the server and
 * whose reply was lost is never sent again: DLOCK_ERR_CONNECT, as for a
 * synchronous call. A command that timed out is not sent again either.
 *
 * Callbacks run on the mux's reader thread or a slow-lane thread, never
 * inside the submitting call and never with a library mutex held; the
 * thread-local last error is set on that thread before the callback runs.
 * dlock_client_free() waits for every call in flight.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "client.h"
#include "mux.h"
#include "util.h"

struct async_call {
    dlock_client *client;
    const char *sha, *body; /* the script's: it outlives its calls */
    int io_flags;
    int argc, nkeys;  /* argv: EVALSHA sha nkeys keys... args... */
    int node;         /* fast path: the node it went to */
    int resent;       /* the slow lane sends it again */
    int acked;        /* WAIT for client->replica_acks after it (slow lane only) */
    long long acks;   /* ... and what WAIT answered (-1: not asked) */
    int64_t deadline; /* slow lane: after this it fails unsent */
    dlock_redis_callback *cb;
    void *arg;
    async_call *next;  /* in the slow lane's queue */
    const char **argv; /* into the same allocation */
    char nk[16];
};

static void *worker(void *arg);

void dlock__async_init(dlock__async *a)
{
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
    dlock__cond_init(&a->work);
    dlock__cond_init(&a->drained);
}

/* Why wait rather than cancel: a callback owns the caller's state (a
 * suspended HTTP request, say), and only an answer or a failure lets the
 * caller release it. Every call ends within the timeouts. */
void dlock__async_close(dlock__async *a)
{
    pthread_mutex_lock(&a->mu);
    a->closing = 1;
    pthread_mutex_unlock(&a->mu);
}

void dlock__async_wait_drained(dlock__async *a)
{
    dlock__mux_uncork(); /* a completion that frees a client: its own requests go first */
    pthread_mutex_lock(&a->mu);
    while (a->inflight > 0) pthread_cond_wait(&a->drained, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

void dlock__async_shutdown(dlock__async *a)
{
    dlock__mux_uncork();
    pthread_mutex_lock(&a->mu);
    a->closing = 1;
    while (a->inflight > 0) pthread_cond_wait(&a->drained, &a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->work);
    int n = a->workers;
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < n; i++) pthread_join(a->tids[i], NULL);
    pthread_cond_destroy(&a->work);
    pthread_cond_destroy(&a->drained);
    pthread_mutex_destroy(&a->mu);
}

/* One call fewer in flight; the last one lets dlock_client_free() go on. */
static void release(dlock__async *a)
{
    pthread_mutex_lock(&a->mu);
    if (--a->inflight == 0 && a->closing) pthread_cond_broadcast(&a->drained);
    pthread_mutex_unlock(&a->mu);
}

dlock_status dlock__async_begin(dlock__async *a)
{
    pthread_mutex_lock(&a->mu);
    int closing = a->closing;
    if (!closing) a->inflight++;
    pthread_mutex_unlock(&a->mu);
    return closing
               ? dlock__fail(DLOCK_ERR_INVALID, "the client is shutting down (dlock_client_drain or dlock_client_free)")
               : DLOCK_OK;
}

void dlock__async_end(dlock__async *a)
{
    release(a);
}

static __thread int resent_now;
static __thread long long acks_now = -1;

long long dlock__async_acks(void)
{
    return acks_now;
}

int dlock__async_resent(void)
{
    return resent_now;
}

/* The end of a call: its callback, exactly once. The caller has set the
 * thread's last error for a failure. */
static void finish(async_call *c, dlock_status st, redisReply *reply)
{
    dlock__async *a = &c->client->async;
    dlock_redis_callback *cb = c->cb;
    void *arg = c->arg;
    resent_now = c->resent;
    acks_now = c->acks;
    free(c);
    cb(st, reply, arg);
    resent_now = 0;
    acks_now = -1;
    release(a);
}

/* An error reply is a failure with the server's message, and the callback
 * still gets the reply, as dlock_script_eval()'s caller does. */
static dlock_status settle(redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR ? dlock__reply_error(r, "script") : DLOCK_OK;
}

/* Hand a call to the slow lane, starting a thread when none is free. Not
 * DLOCK_OK only when no thread could be started at all. */
static dlock_status slow(async_call *c)
{
    dlock__async *a = &c->client->async;
    pthread_mutex_lock(&a->mu);
    if (a->tail) a->tail->next = c;
    else a->head = c;
    a->tail = c;
    c->next = NULL;
    /* More calls queued than threads waiting for work: a thread signalled
     * but not yet awake still counts as waiting, so comparing with the
     * queue (not "nobody waits") starts one for each call it cannot take. */
    if (++a->queued > a->idle && a->workers < DLOCK__SLOW_LANE_MAX &&
        pthread_create(&a->tids[a->workers], NULL, worker, c->client) == 0)
        a->workers++;
    if (a->workers == 0) {
        a->head = a->tail = NULL;
        a->queued = 0;
        pthread_mutex_unlock(&a->mu);
        return dlock__fail(DLOCK_ERR_SYS, "cannot start a thread for the slow lane");
    }
    pthread_cond_signal(&a->work);
    pthread_mutex_unlock(&a->mu);
    return DLOCK_OK;
}

/* The synchronous path, on a slow-lane thread. A call that waited past its
 * deadline in the queue (a long outage, the lane full of calls waiting it
 * out) fails without being sent. */
static void run_slow(async_call *c)
{
    if (dlock__mono_ms() > c->deadline) {
        finish(c, dlock__fail(DLOCK_ERR_CONNECT, "script: no server answered in time"), NULL);
        return;
    }
    redisReply *r = NULL;
    int nargs = c->argc - 3 - c->nkeys;
    dlock__acks acks = {c->client->replica_acks, c->client->replica_timeout_ms, -1};
    dlock_status st = dlock__eval_raw(c->client, c->sha, c->body, c->nkeys, c->argv + 3, nargs, c->argv + 3 + c->nkeys,
                                      c->io_flags, &r, c->acked ? &acks : NULL, NULL);
    c->acks = acks.acks;
    if (st == DLOCK_OK) st = settle(r);
    finish(c, st, r); /* an error reply goes to the callback too */
}

/* Why several threads: during a failover each call in the lane may wait
 * for the new master up to the command timeout; one thread would make the
 * last of many wait as many times. */
static void *worker(void *arg)
{
    dlock__thread_name("dlock-slowlane");
    dlock_client *client = arg;
    dlock__async *a = &client->async;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->head && !a->stop) {
            a->idle++;
            pthread_cond_wait(&a->work, &a->mu);
            a->idle--;
        }
        async_call *c = a->head;
        if (!c) break;
        a->queued--;
        a->head = c->next;
        if (!a->head) a->tail = NULL;
        pthread_mutex_unlock(&a->mu);
        run_slow(c);
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* Error replies the synchronous router acts on (topology.h's list), and
 * NOSCRIPT: each means the script did not run, so the slow lane may run
 * it again. */
static int routed_error(const char *s)
{
    return dlock__route_classify(s) != DLOCK__ROUTE_NONE || strncmp(s, "NOSCRIPT", 8) == 0;
}

/* The fast path's outcome, on the mux's reader thread. */
static void on_reply(void *arg, redisReply *reply, const dlock__io_fail *fail, const char *why)
{
    async_call *c = arg;
    dlock__topo *t = c->client->topo;
    if (reply) {
        if (reply->type == REDIS_REPLY_ERROR && routed_error(reply->str)) {
            freeReplyObject(reply);
        } else {
            finish(c, settle(reply), reply);
            return;
        }
    } else {
        dlock__topo_node_failed(t, c->node);
        if (fail->sent && ((c->io_flags & DLOCK__IO_ONCE) || fail->timed_out)) {
            char name[300];
            dlock__pool_name(dlock__topo_pool(t, c->node), name, sizeof name);
            finish(c, dlock__fail(DLOCK_ERR_CONNECT, "EVALSHA on %s: %s", name, why), NULL);
            return;
        }
        c->resent = fail->sent;
    }
    if (slow(c) != DLOCK_OK) finish(c, DLOCK_ERR_SYS, NULL); /* slow() set the message */
}

static dlock_status submit(dlock_client *client, const char *sha, const char *body, int io_flags, int acked, int nkeys,
                           const char *const *keys, int nargs, const char *const *args, dlock_redis_callback *cb,
                           void *arg);

dlock_status dlock__async_eval(dlock_client *client, const char *sha, const char *body, int io_flags, int nkeys,
                               const char *const *keys, int nargs, const char *const *args, dlock_redis_callback *cb,
                               void *arg)
{
    return submit(client, sha, body, io_flags, 0, nkeys, keys, nargs, args, cb, arg);
}

/* Appended to the shared connection (the fast path) or handed to the
 * slow lane; `acked` calls always take the slow lane (WAIT blocks a
 * connection). */
static dlock_status submit(dlock_client *client, const char *sha, const char *body, int io_flags, int acked, int nkeys,
                           const char *const *keys, int nargs, const char *const *args, dlock_redis_callback *cb,
                           void *arg)
{
    int argc = 3 + nkeys + nargs;
    size_t strings = 0;
    for (int i = 0; i < nkeys; i++) strings += strlen(keys[i]) + 1;
    for (int i = 0; i < nargs; i++) strings += strlen(args[i]) + 1;
    async_call *c = malloc(sizeof *c + (size_t)argc * sizeof(char *) + strings);
    if (!c) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    memset(c, 0, sizeof *c);
    c->client = client;
    c->sha = sha;
    c->body = body;
    c->io_flags = io_flags;
    c->acked = acked;
    c->acks = -1;
    c->argc = argc;
    c->nkeys = nkeys;
    c->cb = cb;
    c->arg = arg;
    c->argv = (const char **)(c + 1);
    char *p = (char *)(c->argv + argc);
    snprintf(c->nk, sizeof c->nk, "%d", nkeys);
    c->argv[0] = "EVALSHA";
    c->argv[1] = sha;
    c->argv[2] = c->nk;
    for (int i = 0; i < nkeys + nargs; i++) {
        const char *s = i < nkeys ? keys[i] : args[i - nkeys];
        size_t n = strlen(s) + 1;
        memcpy(p, s, n);
        c->argv[3 + i] = p;
        p += n;
    }
    const dlock__conn_cfg *cfg = &client->topo->cfg;
    c->deadline = dlock__mono_ms() + cfg->connect_timeout_ms + 2L * cfg->command_timeout_ms;

    dlock__async *a = &client->async;
    pthread_mutex_lock(&a->mu);
    if (a->closing) {
        pthread_mutex_unlock(&a->mu);
        free(c);
        return dlock__fail(DLOCK_ERR_INVALID, "the client is shutting down (dlock_client_drain or dlock_client_free)");
    }
    a->inflight++;
    pthread_mutex_unlock(&a->mu);

    dlock__topo *t = client->topo;
    int node = -1;
    if (!acked && !(io_flags & DLOCK__IO_EXCLUSIVE) && !atomic_load(&t->stale))
        node = dlock__topo_node_known(t, keys[0], strlen(keys[0]));
    if (node >= 0) {
        c->node = node;
        dlock__pool *pool = dlock__topo_pool(t, node);
        dlock_status st = dlock__mux_submit(&pool->mux, &pool->ep, argc, c->argv, NULL, on_reply, c);
        if (st == DLOCK_OK) return DLOCK_OK;
        if (st == DLOCK_ERR_CONNECT) dlock__topo_node_failed(t, node);
    }
    /* Not appended anywhere: the slow lane decides where it goes. */
    dlock_status st = slow(c);
    if (st != DLOCK_OK) {
        free(c);
        release(a);
    }
    return st;
}

dlock_status dlock__async_script(dlock_client *client, dlock__script_id id, int nkeys, const char *const *keys,
                                 int nargs, const char *const *args, dlock_redis_callback *cb, void *arg)
{
    return dlock__async_eval(client, client->sha[id], dlock__script_body(id), 0, nkeys, keys, nargs, args, cb, arg);
}

dlock_status dlock__async_script_acked(dlock_client *client, dlock__script_id id, int nkeys, const char *const *keys,
                                       int nargs, const char *const *args, dlock_redis_callback *cb, void *arg)
{
    return submit(client, client->sha[id], dlock__script_body(id), 0, client->replica_acks > 0, nkeys, keys, nargs,
                  args, cb, arg);
}

void dlock__async_ignore(dlock_status st, redisReply *reply, void *arg)
{
    (void)st;
    (void)arg;
    if (reply) freeReplyObject(reply);
}

dlock_status dlock__async_int(dlock_status st, redisReply *reply, long long *out)
{
    *out = 0;
    if (st == DLOCK_OK && reply->type == REDIS_REPLY_INTEGER) *out = reply->integer;
    else if (st == DLOCK_OK) st = dlock__fail(DLOCK_ERR_REDIS, "script: unexpected reply type %d", reply->type);
    if (reply) freeReplyObject(reply);
    return st;
}
