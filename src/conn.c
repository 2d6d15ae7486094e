/*
 * Connections and the connection pool.
 *
 * hiredis contexts are not thread-safe, so a thread borrows a whole
 * connection for the length of one command and gives it back. The pool
 * grows to the number of threads that talk to Redis at the same moment and
 * never blocks a borrower: contention for connections would otherwise add
 * latency exactly where locks are contended.
 */
#include <errno.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/sds.h>

#include "conn.h"
#include "util.h"

static struct timeval ms_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

dlock_status dlock_pool_init(dlock_pool *p, const char *url, int connect_timeout_ms,
                             int command_timeout_ms)
{
    memset(p, 0, sizeof *p);
    dlock_status st = dlock_url_parse(url, &p->url);
    if (st != DLOCK_OK) return st;
    p->connect_timeout_ms = connect_timeout_ms;
    p->command_timeout_ms = command_timeout_ms;
    pthread_mutex_init(&p->mu, NULL);
    return DLOCK_OK;
}

void dlock_pool_destroy(dlock_pool *p)
{
    for (size_t i = 0; i < p->n_idle; i++) redisFree(p->idle[i]);
    free(p->idle);
    pthread_mutex_destroy(&p->mu);
    dlock_url_free(&p->url);
}

dlock_status dlock_reply_error(const redisReply *r, const char *what)
{
    if (!r) return dlock_fail(DLOCK_ERR_CONNECT, "%s: no reply", what);
    if (r->type != REDIS_REPLY_ERROR)
        return dlock_fail(DLOCK_ERR_REDIS, "%s: unexpected reply type %d", what, r->type);
    if (strncmp(r->str, "NOAUTH", 6) == 0 || strncmp(r->str, "WRONGPASS", 9) == 0 ||
        strncmp(r->str, "NOPERM", 6) == 0)
        return dlock_fail(DLOCK_ERR_AUTH, "%s: %s", what, r->str);
    return dlock_fail(DLOCK_ERR_REDIS, "%s: %s", what, r->str);
}

/* hiredis sends with write(2), and writing to a connection the server has
 * closed raises SIGPIPE, whose default action kills the whole program. A
 * library must not change the program's signal dispositions, and blocking
 * the signal around every command costs four system calls. So we let
 * hiredis only format the commands into its output buffer and send that
 * buffer ourselves with MSG_NOSIGNAL, which turns the signal into EPIPE at
 * no cost; redisGetReply() then finds nothing left to write and just reads.
 * On failure c->err is set as hiredis would, with errno intact. */
static int send_buffer(redisContext *c)
{
    size_t len = sdslen(c->obuf), off = 0;
    while (off < len) {
        ssize_t n = send(c->fd, c->obuf + off, len - off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            int saved = errno;
            c->err = REDIS_ERR_IO;
            snprintf(c->errstr, sizeof c->errstr, "%s", strerror(saved));
            errno = saved;
            return REDIS_ERR;
        }
        off += (size_t)n;
    }
    sdsclear(c->obuf);
    return REDIS_OK;
}

/* Send n commands in one write and read their n replies; replies[i] is
 * NULL after a connection error (c->err says which). */
static void pipeline(redisContext *c, int n, const int *argcs, const char *const *const *argvs,
                     const size_t *const *lens, redisReply **replies)
{
    int ok = 1;
    for (int i = 0; i < n; i++) {
        replies[i] = NULL;
        if (ok && redisAppendCommandArgv(c, argcs[i], (const char **)argvs[i], lens ? lens[i] : NULL) != REDIS_OK)
            ok = 0;
    }
    if (ok && send_buffer(c) != REDIS_OK) ok = 0;
    for (int i = 0; i < n && ok; i++) {
        void *r = NULL;
        if (redisGetReply(c, &r) != REDIS_OK) ok = 0;
        replies[i] = r;
    }
}

redisReply *dlock_command(redisContext *c, int argc, const char **argv, const size_t *lens)
{
    redisReply *r;
    const char *const *argvs[1] = {argv};
    const size_t *const lensv[1] = {lens};
    pipeline(c, 1, &argc, argvs, lensv, &r);
    return r;
}

/* Run a setup command (AUTH, SELECT) on a new connection; any failure to
 * run it is an authentication failure from the caller's point of view. */
static dlock_status setup_command(redisContext *c, int argc, const char **argv, const char *what)
{
    redisReply *r = dlock_command(c, argc, argv, NULL);
    if (!r) return dlock_fail(DLOCK_ERR_CONNECT, "%s: %s", what, c->errstr);
    dlock_status st = DLOCK_OK;
    if (r->type == REDIS_REPLY_ERROR) st = dlock_fail(DLOCK_ERR_AUTH, "%s refused: %s", what, r->str);
    freeReplyObject(r);
    return st;
}

dlock_status dlock_connect(const dlock_pool *p, redisContext **out)
{
    const dlock_url *u = &p->url;
    redisContext *c;
    *out = NULL;
    if (u->kind == DLOCK_URL_UNIX)
        c = redisConnectUnixWithTimeout(u->path, ms_tv(p->connect_timeout_ms));
    else
        c = redisConnectWithTimeout(u->host, u->port, ms_tv(p->connect_timeout_ms));
    if (!c) return dlock_fail(DLOCK_ERR_NOMEM, "cannot allocate a connection");
    if (c->err) {
        dlock_status st;
        if (u->kind == DLOCK_URL_UNIX)
            st = dlock_fail(DLOCK_ERR_CONNECT, "cannot connect to %s: %s", u->path, c->errstr);
        else
            st = dlock_fail(DLOCK_ERR_CONNECT, "cannot connect to %s:%d: %s", u->host, u->port,
                            c->errstr);
        redisFree(c);
        return st;
    }
    redisSetTimeout(c, ms_tv(p->command_timeout_ms));
    if (u->kind == DLOCK_URL_TCP) redisEnableKeepAlive(c);
    dlock_status st = DLOCK_OK;
    if (u->password) {
        const char *argv[3] = {"AUTH", u->user ? u->user : u->password, u->password};
        st = setup_command(c, u->user ? 3 : 2, argv, "AUTH");
    }
    if (st == DLOCK_OK && u->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", u->db);
        const char *argv[2] = {"SELECT", db};
        st = setup_command(c, 2, argv, "SELECT");
    }
    if (st != DLOCK_OK) {
        redisFree(c);
        return st;
    }
    *out = c;
    return DLOCK_OK;
}

/* Borrow an idle connection or make a new one. *fresh tells whether it was
 * just made (a fresh connection failing is not a stale-connection case). */
static dlock_status pool_get(dlock_pool *p, redisContext **out, int *fresh)
{
    pthread_mutex_lock(&p->mu);
    if (p->n_idle > 0) {
        *out = p->idle[--p->n_idle];
        pthread_mutex_unlock(&p->mu);
        *fresh = 0;
        return DLOCK_OK;
    }
    pthread_mutex_unlock(&p->mu);
    *fresh = 1;
    return dlock_connect(p, out);
}

/* Return a connection; a broken one is closed instead. */
static void pool_put(dlock_pool *p, redisContext *c)
{
    if (c->err) {
        redisFree(c);
        return;
    }
    pthread_mutex_lock(&p->mu);
    if (p->n_idle == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        redisContext **n = realloc(p->idle, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&p->mu);
            redisFree(c);
            return;
        }
        p->idle = n;
        p->cap = cap;
    }
    p->idle[p->n_idle++] = c;
    pthread_mutex_unlock(&p->mu);
}

/* After one dead connection the others from before are suspect too (the
 * usual cause is a server restart): close them all rather than fail once
 * per idle connection. */
static void pool_drop_idle(dlock_pool *p)
{
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n_idle; i++) redisFree(p->idle[i]);
    p->n_idle = 0;
    pthread_mutex_unlock(&p->mu);
}

dlock_status dlock_pool_command_wait(dlock_pool *p, int argc, const char **argv, int replicas, int timeout_ms,
                                     redisReply **out, long long *acks, int *retried)
{
    *out = NULL;
    *acks = -1;
    if (retried) *retried = 0;
    char nrep[16], tmo[16];
    snprintf(nrep, sizeof nrep, "%d", replicas);
    snprintf(tmo, sizeof tmo, "%d", timeout_ms);
    const char *wait_argv[3] = {"WAIT", nrep, tmo};
    const int argcs[2] = {argc, 3};
    const char *const *argvs[2] = {argv, wait_argv};
    for (int attempt = 0;; attempt++) {
        redisContext *c;
        int fresh;
        dlock_status st = pool_get(p, &c, &fresh);
        if (st != DLOCK_OK) return st;
        redisReply *r[2];
        pipeline(c, 2, argcs, argvs, NULL, r);
        if (r[0] && r[1]) {
            pool_put(p, c);
            *out = r[0];
            if (r[1]->type == REDIS_REPLY_INTEGER) *acks = r[1]->integer;
            freeReplyObject(r[1]);
            return DLOCK_OK;
        }
        if (r[0]) freeReplyObject(r[0]);
        int timed_out = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
        int sent = sdslen(c->obuf) == 0;
        st = dlock_fail(DLOCK_ERR_CONNECT, "%s+WAIT: %s", argv[0], timed_out ? "command timed out" : c->errstr);
        redisFree(c);
        if (fresh || timed_out || attempt > 0) return st;
        pool_drop_idle(p);
        if (retried && sent) *retried = 1;
    }
}

dlock_status dlock_pool_command(dlock_pool *p, int argc, const char **argv, const size_t *lens,
                                redisReply **out, int *retried)
{
    *out = NULL;
    if (retried) *retried = 0;
    for (int attempt = 0;; attempt++) {
        redisContext *c;
        int fresh;
        dlock_status st = pool_get(p, &c, &fresh);
        if (st != DLOCK_OK) return st;
        redisReply *r = dlock_command(c, argc, argv, lens);
        if (r) {
            pool_put(p, c);
            *out = r;
            return DLOCK_OK;
        }
        int timed_out = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
        /* Only a command that left in full may have run on the server; one
         * whose send failed did not, and its resend is no "maybe twice". */
        int sent = sdslen(c->obuf) == 0;
        st = dlock_fail(DLOCK_ERR_CONNECT, "%s: %s", argv[0],
                        timed_out ? "command timed out" : c->errstr);
        redisFree(c);
        /* A timeout is not retried: the server is slow or stopped, and a
         * second wait would only double the caller's delay. */
        if (fresh || timed_out || attempt > 0) return st;
        pool_drop_idle(p);
        if (retried && sent) *retried = 1;
    }
}
