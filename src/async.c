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
 * Calls of acquire.lua and release.lua that completions start (a chain of
 * acquire, release, acquire ... driven from callbacks) are held back until
 * the completions of that read have all run, and then go out as one call
 * of batch.lua, which runs each as its script would alone (not on a
 * cluster, whose keys of one call must share a slot). Why: most of what
 * such a short script costs the server is the call itself, and the server
 * is what bounds a busy client; one call for a burst costs it about a
 * third less (docs/BENCHMARKS.md, stop 40). A batch goes through the fast
 * path and the slow lane as one call; its reply is then handed out, each
 * call's part as if it had been its own reply. Calls started anywhere else
 * (an application's thread, a slow-lane thread) are sent at once, as
 * before, and a completion's synchronous call first sends what that
 * completion held back (mux.c, dlock__mux_defer), so no thread sees its
 * own calls reordered.
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
#include "util.h"

struct async_call {
    dlock_client *client;
    const char *sha, *body;  /* the script's: it outlives its calls */
    int io_flags;
    char batch;              /* 'a' acquire.lua, 'r' release.lua: may go in a batch; else 0 */
    int argc, nkeys;         /* argv: EVALSHA sha nkeys keys... args... */
    int node;                /* fast path: the node it went to */
    int resent;              /* the slow lane sends it again */
    int acked;               /* WAIT for client->replica_acks after it (slow lane only) */
    long long acks;          /* ... and what WAIT answered (-1: not asked) */
    int64_t deadline;        /* slow lane: after this it fails unsent */
    dlock_redis_callback *cb;
    void *arg;
    async_call *next;        /* in the slow lane's queue */
    const char **argv;       /* into the same allocation */
    char nk[16];
};

static void *worker(void *arg);
static void stage_flush(void);

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
    stage_flush(); /* a completion that frees a client sends what it held back first */
    pthread_mutex_lock(&a->mu);
    while (a->inflight > 0) pthread_cond_wait(&a->drained, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

void dlock__async_shutdown(dlock__async *a)
{
    stage_flush();
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
    return closing ? dlock__fail(DLOCK_ERR_INVALID, "the client is shutting down (dlock_client_drain or dlock_client_free)") : DLOCK_OK;
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
    dlock_status st = dlock__eval_raw(c->client, c->sha, c->body, c->nkeys, c->argv + 3, nargs,
                                     c->argv + 3 + c->nkeys, c->io_flags, &r, c->acked ? &acks : NULL, NULL);
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

/* Send a call on the fast path to c->node, or to the slow lane when it
 * cannot be appended there; a call that can go nowhere fails through its
 * callback. */
static void send_fast(async_call *c)
{
    dlock__topo *t = c->client->topo;
    dlock__pool *pool = dlock__topo_pool(t, c->node);
    dlock_status st = dlock__mux_submit(&pool->mux, &pool->ep, c->argc, c->argv, NULL, on_reply, c);
    if (st == DLOCK_OK) return;
    if (st == DLOCK_ERR_CONNECT) dlock__topo_node_failed(t, c->node);
    if (slow(c) != DLOCK_OK) finish(c, DLOCK_ERR_SYS, NULL);
}

/* ------------------------------------------------------------------------
 * Batches (batch.lua)
 * ------------------------------------------------------------------------ */

#define BATCH_MAX 32       /* calls in one batch: a full stage is sent at once */
#define BATCH_CALL_KEYS 8  /* a call with more keys or arguments goes alone */
#define BATCH_CALL_ARGS 13

/* The calls this thread's completions have held back: one client's, to
 * one node. Thread-local, so it needs no lock: only the thread that
 * fills it sends it. */
static __thread struct {
    dlock_client *client;
    int node, n;
    async_call *calls[BATCH_MAX];
} stage;

typedef struct async_batch {
    int n;
    async_call *calls[BATCH_MAX];
} async_batch;

static async_call *make_call(dlock_client *client, const char *sha, const char *body, int io_flags, int acked,
                             int nkeys, const char *const *keys, int nargs, const char *const *args,
                             dlock_redis_callback *cb, void *arg);

/* The batch's reply, or its failure, handed out to its calls in order:
 * each one's part goes where its own reply would have gone (on_reply's
 * choices: its callback, or the slow lane for a redirection or a "not
 * now" error, which means that call did not run). A failure of the batch
 * as a whole is every call's failure; one that was sent more than once
 * says so to each (dlock__async_resent). */
static void batch_done(dlock_status st, redisReply *reply, void *arg)
{
    async_batch *b = arg;
    int resent = resent_now;
    char why[512];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    int parts = st == DLOCK_OK && reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == (size_t)b->n;
    if (st == DLOCK_OK && !parts) {
        st = DLOCK_ERR_REDIS;
        snprintf(why, sizeof why, "batch: unexpected reply");
    }
    for (int i = 0; i < b->n; i++) {
        async_call *c = b->calls[i];
        c->resent = resent;
        if (!parts) {
            dlock__fail(st, "%s", why);
            finish(c, st, NULL);
            continue;
        }
        redisReply *part = reply->element[i];
        reply->element[i] = NULL; /* the call owns it now */
        if (part->type == REDIS_REPLY_ERROR && routed_error(part->str)) {
            freeReplyObject(part);
            if (slow(c) != DLOCK_OK) finish(c, DLOCK_ERR_SYS, NULL);
        } else {
            finish(c, settle(part), part);
        }
    }
    if (reply) freeReplyObject(reply);
    free(b);
}

/* Send what this thread's completions held back: one call alone, more as
 * one call of batch.lua. Its own in-flight count keeps the client until
 * the batch's reply has been handed out. */
static void stage_flush(void)
{
    int n = stage.n;
    if (n == 0) return;
    /* Taken out first: a call that fails at once runs its callback,
     * which may fill the stage again. */
    async_call *calls[BATCH_MAX];
    memcpy(calls, stage.calls, (size_t)n * sizeof *calls);
    stage.n = 0;
    dlock_client *client = stage.client;
    int node = stage.node;
    async_batch *b = n > 1 ? malloc(sizeof *b) : NULL;
    if (!b) { /* one call, or no memory for a batch: each alone */
        for (int i = 0; i < n; i++) send_fast(calls[i]);
        return;
    }
    b->n = n;
    memcpy(b->calls, calls, (size_t)n * sizeof *b->calls);
    const char *keys[BATCH_MAX * BATCH_CALL_KEYS], *args[BATCH_MAX * (3 + BATCH_CALL_ARGS)];
    char counts[BATCH_MAX][2][12];
    int nkeys = 0, nargs = 0;
    for (int i = 0; i < n; i++) {
        async_call *c = b->calls[i];
        int na = c->argc - 3 - c->nkeys;
        snprintf(counts[i][0], sizeof counts[i][0], "%d", c->nkeys);
        snprintf(counts[i][1], sizeof counts[i][1], "%d", na);
        memcpy(keys + nkeys, c->argv + 3, (size_t)c->nkeys * sizeof *keys);
        nkeys += c->nkeys;
        args[nargs++] = c->batch == 'a' ? "a" : "r";
        args[nargs++] = counts[i][0];
        args[nargs++] = counts[i][1];
        memcpy(args + nargs, c->argv + 3 + c->nkeys, (size_t)na * sizeof *args);
        nargs += na;
    }
    async_call *bc = make_call(client, client->sha[DLOCK__SCRIPT_BATCH], dlock__script_body(DLOCK__SCRIPT_BATCH), 0,
                               0, nkeys, keys, nargs, args, batch_done, b);
    if (!bc) {
        for (int i = 0; i < n; i++) send_fast(b->calls[i]);
        free(b);
        return;
    }
    bc->node = node;
    pthread_mutex_lock(&client->async.mu);
    client->async.inflight++; /* not refused while closing: its calls are in flight already */
    pthread_mutex_unlock(&client->async.mu);
    send_fast(bc);
}

/* Hold a call back for the end of the completions (see the top). */
static void stage_add(async_call *c)
{
    if (stage.n > 0 && (stage.client != c->client || stage.node != c->node)) stage_flush();
    stage.client = c->client;
    stage.node = c->node;
    stage.calls[stage.n++] = c;
    if (stage.n == BATCH_MAX) stage_flush();
    else dlock__mux_defer(stage_flush);
}

static dlock_status submit(dlock_client *client, const char *sha, const char *body, int io_flags, int acked,
                           char batch, int nkeys, const char *const *keys, int nargs, const char *const *args,
                           dlock_redis_callback *cb, void *arg);

dlock_status dlock__async_eval(dlock_client *client, const char *sha, const char *body, int io_flags, int nkeys,
                              const char *const *keys, int nargs, const char *const *args,
                              dlock_redis_callback *cb, void *arg)
{
    return submit(client, sha, body, io_flags, 0, 0, nkeys, keys, nargs, args, cb, arg);
}

/* A call with its own copy of the command's strings (NULL: no memory). */
static async_call *make_call(dlock_client *client, const char *sha, const char *body, int io_flags, int acked,
                             int nkeys, const char *const *keys, int nargs, const char *const *args,
                             dlock_redis_callback *cb, void *arg)
{
    int argc = 3 + nkeys + nargs;
    size_t strings = 0;
    for (int i = 0; i < nkeys; i++) strings += strlen(keys[i]) + 1;
    for (int i = 0; i < nargs; i++) strings += strlen(args[i]) + 1;
    async_call *c = malloc(sizeof *c + (size_t)argc * sizeof(char *) + strings);
    if (!c) return NULL;
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
    return c;
}

/* Appended to the shared connection (the fast path), held back for a
 * batch, or handed to the slow lane; `acked` calls always take the slow
 * lane (WAIT blocks a connection). */
static dlock_status submit(dlock_client *client, const char *sha, const char *body, int io_flags, int acked,
                           char batch, int nkeys, const char *const *keys, int nargs, const char *const *args,
                           dlock_redis_callback *cb, void *arg)
{
    async_call *c = make_call(client, sha, body, io_flags, acked, nkeys, keys, nargs, args, cb, arg);
    if (!c) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    c->batch = batch;
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
    if (node >= 0 && batch && io_flags == 0 && nkeys <= BATCH_CALL_KEYS && nargs <= BATCH_CALL_ARGS &&
        dlock__mux_in_completion() && !dlock__topo_is_cluster(t)) {
        c->node = node;
        stage_add(c);
        return DLOCK_OK;
    }
    stage_flush(); /* what this thread held back goes first */
    if (node >= 0) {
        c->node = node;
        dlock__pool *pool = dlock__topo_pool(t, node);
        dlock_status st = dlock__mux_submit(&pool->mux, &pool->ep, c->argc, c->argv, NULL, on_reply, c);
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

/* The scripts batch.lua can run. */
static char batch_kind(dlock__script_id id)
{
    return id == DLOCK__SCRIPT_ACQUIRE ? 'a' : id == DLOCK__SCRIPT_RELEASE ? 'r' : 0;
}

dlock_status dlock__async_script(dlock_client *client, dlock__script_id id, int nkeys, const char *const *keys,
                                int nargs, const char *const *args, dlock_redis_callback *cb, void *arg)
{
    return submit(client, client->sha[id], dlock__script_body(id), 0, 0, batch_kind(id), nkeys, keys, nargs, args,
                  cb, arg);
}

dlock_status dlock__async_script_acked(dlock_client *client, dlock__script_id id, int nkeys,
                                      const char *const *keys, int nargs, const char *const *args,
                                      dlock_redis_callback *cb, void *arg)
{
    return submit(client, client->sha[id], dlock__script_body(id), 0, client->replica_acks > 0, batch_kind(id), nkeys,
                  keys, nargs, args, cb, arg);
}

void dlock__async_ignore(dlock_status st, redisReply *reply, void *arg)
{
    (void)st;
    (void)arg;
    if (reply) freeReplyObject(reply);
}
