/* Commands followed by WAIT on a connection of the thread's own; see acked.h. */
#include "acked.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "keys.h"

#define CONNS 8         /* per thread: the vouchers on sale, a handful */
#define ARGV_STACK 40

typedef struct conn {
    char route[SK_KEY_MAX]; /* the key it was made for ("" off a cluster) */
    redisContext *c;
    unsigned long used;     /* for least-recently-used replacement */
} conn;

typedef struct conns {
    conn slot[CONNS];
    unsigned long tick;
} conns;

static pthread_key_t conns_key;
static __thread char last_error[320];

const char *sk_acked_error(void)
{
    return last_error[0] ? last_error : "no error";
}

/* Name the server a failed connection went to, then its error. */
static void io_failed(const redisContext *c)
{
    if (c->connection_type == REDIS_CONN_UNIX)
        snprintf(last_error, sizeof last_error, "unix://%s: %s", c->unix_sock.path ? c->unix_sock.path : "?",
                 c->errstr[0] ? c->errstr : "connection failed");
    else
        snprintf(last_error, sizeof last_error, "%s:%d: %s", c->tcp.host ? c->tcp.host : "?", c->tcp.port,
                 c->errstr[0] ? c->errstr : "connection failed");
}
static pthread_once_t conns_once = PTHREAD_ONCE_INIT;

/* Thread exit closes what the thread kept open: HTTP worker threads are
 * the HTTP library's, and end when the server stops. */
static void conns_free(void *p)
{
    conns *cs = p;
    for (int i = 0; cs && i < CONNS; i++)
        if (cs->slot[i].c) redisFree(cs->slot[i].c);
    free(cs);
}

static void conns_key_make(void)
{
    pthread_key_create(&conns_key, conns_free);
}

static conns *my_conns(void)
{
    pthread_once(&conns_once, conns_key_make);
    conns *cs = pthread_getspecific(conns_key);
    if (!cs && (cs = calloc(1, sizeof *cs)) != NULL) pthread_setspecific(conns_key, cs);
    return cs;
}

void sk_acked_close(void)
{
    pthread_once(&conns_once, conns_key_make);
    conns_free(pthread_getspecific(conns_key));
    pthread_setspecific(conns_key, NULL);
}

void sk_lua_init(sk_lua *s, const char *text)
{
    unsigned char d[SHA_DIGEST_LENGTH];
    s->text = text;
    SHA1((const unsigned char *)text, strlen(text), d);
    for (int i = 0; i < SHA_DIGEST_LENGTH; i++) snprintf(s->sha + 2 * i, 3, "%02x", d[i]);
}

/* The thread's connection to the server of `key`: on a cluster one per
 * routing key (keys of one voucher share a node, different vouchers may
 * not), elsewhere one for all, since one server serves every key. */
static conn *conn_for(const sk_redis *r, const char *key)
{
    conns *cs = my_conns();
    if (!cs) return NULL;
    const char *route = r->cluster ? key : "";
    conn *lru = &cs->slot[0];
    for (int i = 0; i < CONNS; i++) {
        conn *x = &cs->slot[i];
        if (x->c && strcmp(x->route, route) == 0) {
            x->used = ++cs->tick;
            return x;
        }
        if (!x->c || (lru->c && x->used < lru->used)) lru = x;
    }
    if (lru->c) redisFree(lru->c);
    lru->c = NULL;
    if (dlock_redis_connect(r->client, key, &lru->c) != DLOCK_OK) {
        snprintf(last_error, sizeof last_error, "no connection to the server of %s: %s", key, dlock_last_error());
        return NULL;
    }
    snprintf(lru->route, sizeof lru->route, "%s", route);
    lru->used = ++cs->tick;
    return lru;
}

static void drop(conn *x)
{
    redisFree(x->c);
    x->c = NULL;
}

void sk_acked_forget(const sk_redis *r, const char *key)
{
    pthread_once(&conns_once, conns_key_make);
    conns *cs = pthread_getspecific(conns_key);
    const char *route = r->cluster ? key : "";
    for (int i = 0; cs && i < CONNS; i++)
        if (cs->slot[i].c && strcmp(cs->slot[i].route, route) == 0) drop(&cs->slot[i]);
}

/* Replies that mean "not here, not now": the command did not run. */
static int not_served_here(const redisReply *r)
{
    static const char *const words[] = {"MOVED ", "ASK ", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "LOADING",
                                        "MASTERDOWN"};
    if (r->type != REDIS_REPLY_ERROR) return 0;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (strncmp(r->str, words[i], strlen(words[i])) == 0) return 1;
    return 0;
}

/* One routed command for `key`: the library follows the redirection or
 * waits out the failover, and routes the next dedicated connection right. */
static void reroute(const sk_redis *r, const char *key)
{
    const char *argv[2] = {"EXISTS", key};
    redisReply *rep;
    dlock_redis_command(r->client, key, 0, 2, argv, NULL, &rep);
    if (rep) freeReplyObject(rep);
}

dlock_status sk_acked_run(const sk_redis *r, const char *key, int argc, const char *const *argv, const size_t *lens,
                          redisReply **out, long long *acks)
{
    char n[16], tmo[16];
    snprintf(n, sizeof n, "%d", r->replicas);
    snprintf(tmo, sizeof tmo, "%d", r->replica_timeout_ms);
    const char *wait_argv[3] = {"WAIT", n, tmo};
    *out = NULL;
    *acks = -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        conn *x = conn_for(r, key);
        if (!x) return DLOCK_ERR_CONNECT;
        void *rep = NULL, *w = NULL;
        int ok = redisAppendCommandArgv(x->c, argc, (const char **)argv, lens) == REDIS_OK &&
                 redisAppendCommandArgv(x->c, 3, wait_argv, NULL) == REDIS_OK &&
                 redisGetReply(x->c, &rep) == REDIS_OK && redisGetReply(x->c, &w) == REDIS_OK;
        if (!ok) {
            /* Sent or not, answered or not: unknown. The connection is
             * out of step either way. */
            if (rep) freeReplyObject(rep);
            io_failed(x->c);
            drop(x);
            return DLOCK_ERR_CONNECT;
        }
        redisReply *reply = rep, *wr = w;
        if (not_served_here(reply)) {
            snprintf(last_error, sizeof last_error, "%s (after rerouting)", reply->str);
            freeReplyObject(reply);
            freeReplyObject(wr);
            drop(x);
            reroute(r, key);
            continue;
        }
        *acks = wr->type == REDIS_REPLY_INTEGER ? wr->integer : -1;
        freeReplyObject(wr);
        *out = reply;
        return reply->type == REDIS_REPLY_ERROR ? DLOCK_ERR_REDIS : DLOCK_OK;
    }
    return DLOCK_ERR_CONNECT;
}

/* NOSCRIPT means nothing ran, so EVAL after it never runs a script twice. */
dlock_status sk_acked_eval(const sk_redis *r, const sk_lua *s, int nkeys, const char *const *keys, int nargs,
                           const char *const *args, redisReply **out, long long *acks)
{
    const char *stack[ARGV_STACK];
    int argc = 3 + nkeys + nargs;
    const char **argv = argc <= ARGV_STACK ? stack : malloc((size_t)argc * sizeof *argv);
    if (!argv) return DLOCK_ERR_NOMEM;
    char nk[16];
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = s->sha;
    argv[2] = nk;
    memcpy(argv + 3, keys, (size_t)nkeys * sizeof *keys);
    if (nargs) memcpy(argv + 3 + nkeys, args, (size_t)nargs * sizeof *args);
    dlock_status st = sk_acked_run(r, keys[0], argc, argv, NULL, out, acks);
    if (st == DLOCK_ERR_REDIS && strncmp((*out)->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(*out);
        argv[0] = "EVAL";
        argv[1] = s->text;
        st = sk_acked_run(r, keys[0], argc, argv, NULL, out, acks);
    }
    if (argv != stack) free(argv);
    return st;
}
