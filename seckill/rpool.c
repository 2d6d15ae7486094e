/* Pooled hiredis connections and embedded scripts; see rpool.h. */
#include "rpool.h"

#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "dlock.h"

#define POOL_IDLE_MAX 64
#define CONNECT_TIMEOUT_MS 2000

struct sk_rpool {
    dlock_url url;
    int timeout_ms;
    pthread_mutex_t mu;
    redisContext *idle[POOL_IDLE_MAX];
    int nidle;
};

/* hiredis wants timevals; every timeout here is in milliseconds. */
static struct timeval tv_ms(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Run AUTH and SELECT as the URL asks; the same for pooled and own
 * connections so a password-protected Redis works everywhere. */
static int handshake(redisContext *c, const dlock_url *u)
{
    redisReply *r;
    if (u->password) {
        r = u->user ? redisCommand(c, "AUTH %s %s", u->user, u->password)
                    : redisCommand(c, "AUTH %s", u->password);
        int ok = r && r->type != REDIS_REPLY_ERROR;
        if (r) freeReplyObject(r);
        if (!ok) return -1;
    }
    if (u->db) {
        r = redisCommand(c, "SELECT %d", u->db);
        int ok = r && r->type != REDIS_REPLY_ERROR;
        if (r) freeReplyObject(r);
        if (!ok) return -1;
    }
    return 0;
}

/* The writer blocks in XREADGROUP, so it has its own connection with a
 * timeout longer than its BLOCK. */
redisContext *sk_rpool_connect(sk_rpool *p, int timeout_ms)
{
    struct timeval ct = tv_ms(CONNECT_TIMEOUT_MS);
    redisContext *c = p->url.kind == DLOCK_URL_UNIX
                          ? redisConnectUnixWithTimeout(p->url.path, ct)
                          : redisConnectWithTimeout(p->url.host, p->url.port, ct);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv_ms(timeout_ms > 0 ? timeout_ms : p->timeout_ms));
    if (handshake(c, &p->url) != 0) {
        redisFree(c);
        return NULL;
    }
    return c;
}

/* Connect once at start so a wrong URL or password fails `serve` at once
 * instead of every request later. */
int sk_rpool_new(const char *url, int command_timeout_ms, sk_rpool **out, char *err, size_t errlen)
{
    sk_rpool *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (dlock_url_parse(url, &p->url) != DLOCK_OK) {
        snprintf(err, errlen, "%s", dlock_last_error());
        free(p);
        return -1;
    }
    p->timeout_ms = command_timeout_ms > 0 ? command_timeout_ms : 5000;
    pthread_mutex_init(&p->mu, NULL);
    redisContext *c = sk_rpool_connect(p, 0);
    if (!c) {
        snprintf(err, errlen, "cannot connect to Redis at %s (or AUTH/SELECT refused)", url);
        sk_rpool_free(p);
        return -1;
    }
    p->idle[p->nidle++] = c;
    *out = p;
    return 0;
}

/* Only idle connections are pooled; borrowed ones must be back by now. */
void sk_rpool_free(sk_rpool *p)
{
    if (!p) return;
    for (int i = 0; i < p->nidle; i++) redisFree(p->idle[i]);
    dlock_url_free(&p->url);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* An idle connection whose socket is readable has either been closed by
 * the server (restart, timeout) or holds stray data; both make it useless.
 * Checking costs one poll() and spares a command sent into a dead socket,
 * which matters for commands that must not be resent. */
static int looks_alive(redisContext *c)
{
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    return poll(&pfd, 1, 0) == 0;
}

/* A borrowed connection is used by one thread for one command, so
 * replies can never be mixed up between requests. */
static redisContext *borrow(sk_rpool *p)
{
    for (;;) {
        pthread_mutex_lock(&p->mu);
        redisContext *c = p->nidle ? p->idle[--p->nidle] : NULL;
        pthread_mutex_unlock(&p->mu);
        if (!c) return sk_rpool_connect(p, 0);
        if (looks_alive(c)) return c;
        redisFree(c);
    }
}

/* A connection in error is dropped, never pooled: its stream state is unknown. */
static void give_back(sk_rpool *p, redisContext *c)
{
    if (!c) return;
    if (c->err) {
        redisFree(c);
        return;
    }
    pthread_mutex_lock(&p->mu);
    if (p->nidle < POOL_IDLE_MAX) {
        p->idle[p->nidle++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    if (c) redisFree(c);
}

/* printf form for fixed commands; the resend rule is the caller's call. */
redisReply *sk_rpool_cmd(sk_rpool *p, int resend_ok, const char *fmt, ...)
{
    for (int attempt = 0; attempt < (resend_ok ? 2 : 1); attempt++) {
        redisContext *c = borrow(p);
        if (!c) return NULL;
        va_list ap;
        va_start(ap, fmt);
        redisReply *r = redisvCommand(c, fmt, ap);
        va_end(ap);
        give_back(p, c);
        if (r) return r;
    }
    return NULL;
}

/* One round trip for many reads (one HGET per voucher on GET /api/orders):
 * hiredis buffers the appended commands and writes them together. */
int sk_rpool_pipeline(sk_rpool *p, int n, const char *const *const *cmds, redisReply **out)
{
    for (int i = 0; i < n; i++) out[i] = NULL;
    redisContext *c = borrow(p);
    if (!c) return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int argc = 0;
        while (cmds[i][argc]) argc++;
        if (redisAppendCommandArgv(c, argc, (const char **)cmds[i], NULL) != REDIS_OK) rc = -1;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        void *r = NULL;
        if (redisGetReply(c, &r) != REDIS_OK || !r) rc = -1;
        out[i] = r;
    }
    if (rc != 0) {
        for (int i = 0; i < n; i++)
            if (out[i]) freeReplyObject(out[i]), out[i] = NULL;
        c->err = c->err ? c->err : REDIS_ERR_OTHER; /* replies may be out of step: drop it */
    }
    give_back(p, c);
    return rc;
}

/* The SHA is computed locally, so no SCRIPT LOAD round trip is needed and
 * a restarted server is handled by the same NOSCRIPT fallback. Computed
 * once per script under a lock: HTTP threads race to first use. */
static pthread_mutex_t sha_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *script_sha(sk_script *s)
{
    pthread_mutex_lock(&sha_mu);
    if (!s->sha[0]) {
        unsigned char d[SHA_DIGEST_LENGTH];
        SHA1((const unsigned char *)s->text, strlen(s->text), d);
        for (int i = 0; i < SHA_DIGEST_LENGTH; i++) snprintf(s->sha + 2 * i, 3, "%02x", d[i]);
    }
    pthread_mutex_unlock(&sha_mu);
    return s->sha;
}

/* EVALSHA, then EVAL on NOSCRIPT: a NOSCRIPT reply means nothing ran, so
 * the fallback never runs a script twice. */
static redisReply *run_on(redisContext *c, sk_script *s, int nkeys, int nargs, const char **args)
{
    const char *small[32];
    int argc = 3 + nkeys + nargs;
    const char **argv = argc <= 32 ? small : malloc((size_t)argc * sizeof *argv);
    if (!argv) return NULL;
    char nk[16];
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = script_sha(s);
    argv[2] = nk;
    for (int i = 0; i < nkeys + nargs; i++) argv[3 + i] = args[i];
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(r);
        argv[0] = "EVAL";
        argv[1] = s->text;
        r = redisCommandArgv(c, argc, argv, NULL);
    }
    if (argv != small) free(argv);
    return r;
}

redisReply *sk_rpool_script(sk_rpool *p, sk_script *s, int resend_ok, int nkeys, int nargs,
                            const char **args)
{
    for (int attempt = 0; attempt < (resend_ok ? 2 : 1); attempt++) {
        redisContext *c = borrow(p);
        if (!c) return NULL;
        redisReply *r = run_on(c, s, nkeys, nargs, args);
        give_back(p, c);
        if (r) return r;
    }
    return NULL;
}
