/*
 * Connections to one server, and its pool of idle ones.
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

dlock_status dlock_pool_init(dlock_pool *p, const char *host, int port, const char *path, const dlock_conn_cfg *cfg)
{
    memset(p, 0, sizeof *p);
    p->port = port;
    p->cfg = cfg;
    if ((host && !(p->host = strdup(host))) || (path && !(p->path = strdup(path)))) {
        free(p->host);
        free(p->path);
        return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&p->mu, NULL);
    dlock_mux_init(&p->mux);
    return DLOCK_OK;
}

void dlock_pool_destroy(dlock_pool *p)
{
    for (size_t i = 0; i < p->n_idle; i++) redisFree(p->idle[i]);
    free(p->idle);
    dlock_mux_destroy(&p->mux);
    free(p->host);
    free(p->path);
    pthread_mutex_destroy(&p->mu);
}

void dlock_pool_name(const dlock_pool *p, char *out, size_t size)
{
    if (p->path) snprintf(out, size, "%s", p->path);
    else if (strchr(p->host, ':')) snprintf(out, size, "[%s]:%d", p->host, p->port);
    else snprintf(out, size, "%s:%d", p->host, p->port);
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

/* Sentinel's word is not enough: between a failover and the moment a
 * client asks, the address it gives may still be a demoted master. ROLE on
 * every new connection means we never send a lock command to a replica. */
static dlock_status check_master(redisContext *c, const char *name)
{
    const char *argv[1] = {"ROLE"};
    redisReply *r = dlock_command(c, 1, argv, NULL);
    if (!r) return dlock_fail(DLOCK_ERR_CONNECT, "ROLE on %s: %s", name, c->errstr);
    dlock_status st = DLOCK_OK;
    if (r->type == REDIS_REPLY_ERROR) st = dlock_reply_error(r, "ROLE");
    else if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_STRING)
        st = dlock_fail(DLOCK_ERR_REDIS, "ROLE on %s: unexpected reply", name);
    else if (strcmp(r->element[0]->str, "master") != 0)
        st = dlock_fail(DLOCK_ERR_CONNECT, "%s is not a master (its role is %s)", name, r->element[0]->str);
    freeReplyObject(r);
    return st;
}

dlock_status dlock_connect(const dlock_pool *p, redisContext **out)
{
    const dlock_conn_cfg *cfg = p->cfg;
    char name[300];
    redisContext *c;
    *out = NULL;
    /* A client being freed waits for nobody's new connection. */
    if (cfg->closing && atomic_load(cfg->closing)) return dlock_fail(DLOCK_ERR_CONNECT, "the client is closing");
    if (p->path)
        c = redisConnectUnixWithTimeout(p->path, ms_tv(cfg->connect_timeout_ms));
    else
        c = redisConnectWithTimeout(p->host, p->port, ms_tv(cfg->connect_timeout_ms));
    if (!c) return dlock_fail(DLOCK_ERR_NOMEM, "cannot allocate a connection");
    dlock_pool_name(p, name, sizeof name);
    if (c->err) {
        dlock_status st = dlock_fail(DLOCK_ERR_CONNECT, "cannot connect to %s: %s", name, c->errstr);
        redisFree(c);
        return st;
    }
    redisSetTimeout(c, ms_tv(cfg->command_timeout_ms));
    if (!p->path) redisEnableKeepAlive(c);
    dlock_status st = DLOCK_OK;
    if (cfg->password) {
        const char *argv[3] = {"AUTH", cfg->user ? cfg->user : cfg->password, cfg->password};
        st = setup_command(c, cfg->user ? 3 : 2, argv, "AUTH");
    }
    if (st == DLOCK_OK && cfg->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", cfg->db);
        const char *argv[2] = {"SELECT", db};
        st = setup_command(c, 2, argv, "SELECT");
    }
    if (st == DLOCK_OK && cfg->require_master) st = check_master(c, name);
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

void dlock_pool_drop_idle(dlock_pool *p)
{
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n_idle; i++) redisFree(p->idle[i]);
    p->n_idle = 0;
    pthread_mutex_unlock(&p->mu);
    dlock_mux_close_idle(&p->mux);
}

/* One exchange on a pooled connection of the caller's own. */
static dlock_status exclusive_pipeline(dlock_pool *p, int n, const int *argcs, const char *const *const *argvs,
                                       const size_t *const *lens, redisReply **replies, int *fresh,
                                       dlock_io_fail *f)
{
    redisContext *c;
    dlock_status st = pool_get(p, &c, fresh);
    if (st != DLOCK_OK) return st;
    pipeline(c, n, argcs, argvs, lens, replies);
    int ok = 1;
    for (int i = 0; i < n; i++) ok = ok && replies[i];
    if (ok) {
        pool_put(p, c);
        return DLOCK_OK;
    }
    for (int i = 0; i < n; i++) {
        if (replies[i]) freeReplyObject(replies[i]);
        replies[i] = NULL;
    }
    f->timed_out = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
    /* Only commands that left in full may have run on the server; ones
     * whose send failed did not, and their resend is no "maybe twice". */
    f->sent = sdslen(c->obuf) == 0;
    char name[300];
    dlock_pool_name(p, name, sizeof name);
    st = dlock_fail(DLOCK_ERR_CONNECT, "%s on %s: %s", argvs[0][0], name,
                    f->timed_out ? "command timed out" : c->errstr);
    redisFree(c);
    return st;
}

dlock_status dlock_pool_pipeline(dlock_pool *p, int n, const int *argcs, const char *const *const *argvs,
                                 const size_t *const *lens, int flags, redisReply **replies, int *retried,
                                 dlock_io_fail *why)
{
    if (retried) *retried = 0;
    for (int attempt = 0;; attempt++) {
        int fresh = 0;
        dlock_io_fail f = {0, 0};
        dlock_status st = flags & DLOCK_IO_EXCLUSIVE
                              ? exclusive_pipeline(p, n, argcs, argvs, lens, replies, &fresh, &f)
                              : dlock_mux_pipeline(&p->mux, p, n, argcs, argvs, lens, replies, &fresh, &f);
        if (st == DLOCK_OK) return DLOCK_OK;
        /* A timeout is not retried: the server is slow or stopped, and a
         * second wait would only double the caller's delay. Nor is a
         * failure on a connection made for this very call, nor a second
         * one: the server is really gone. */
        if (st != DLOCK_ERR_CONNECT || fresh || f.timed_out || attempt > 0 || ((flags & DLOCK_IO_ONCE) && f.sent)) {
            if (why) *why = f;
            return st;
        }
        dlock_pool_drop_idle(p);
        if (retried && f.sent) *retried = 1;
    }
}
