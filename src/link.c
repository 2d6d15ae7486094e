/*
 * One connection to one server (see link.h).
 *
 * Plaintext links are blocking sockets with the command timeout as their
 * SO_RCVTIMEO/SO_SNDTIMEO: one system call per send or read, which is what
 * the shared connection's speed rests on (docs/BENCHMARKS.md). TLS links
 * are non-blocking and wait in poll(2) with the same timeout, because an
 * SSL object may not be used by two threads at once: every call into
 * OpenSSL takes the link's mutex, and nobody sleeps while holding it, so
 * one thread can wait for replies while another sends (mux.c).
 *
 * Every write uses send(2) with MSG_NOSIGNAL (TLS too, through tls.c's
 * BIO): writing to a connection the server closed raises SIGPIPE, whose
 * default kills the whole program, and a library must neither die of it
 * nor change the program's signal dispositions.
 */
#include "link.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tls.h"
#include "util.h"

struct dlock__link {
    redisContext *c;        /* the socket (c->fd), the reply reader, the output buffer */
    SSL *ssl;               /* NULL: plaintext */
    pthread_mutex_t ssl_mu; /* TLS: calls into OpenSSL, one at a time */
    int timeout_ms;         /* the command timeout */
    const char *name;       /* the endpoint's, which outlives its links */
    char why[160];          /* TLS: OpenSSL's reason for the last failure */
    sds spare;              /* a sent output buffer, emptied, for the next take */
};

int dlock__endpoint_init(dlock__endpoint *ep, const char *host, int port, const char *path, const dlock__conn_cfg *cfg)
{
    memset(ep, 0, sizeof *ep);
    ep->port = port;
    ep->cfg = cfg;
    if ((host && !(ep->host = strdup(host))) || (path && !(ep->path = strdup(path)))) {
        dlock__endpoint_destroy(ep);
        return -1;
    }
    if (path) snprintf(ep->name, sizeof ep->name, "%s", path);
    else if (strchr(host, ':')) snprintf(ep->name, sizeof ep->name, "[%s]:%d", host, port);
    else snprintf(ep->name, sizeof ep->name, "%s:%d", host, port);
    return 0;
}

void dlock__endpoint_destroy(dlock__endpoint *ep)
{
    free(ep->host);
    free(ep->path);
    ep->host = ep->path = NULL;
}

static struct timeval ms_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

int dlock__link_fd(const dlock__link *l)
{
    return l->c->fd;
}

dlock_status dlock__reply_error(const redisReply *r, const char *what)
{
    if (!r) return dlock__fail(DLOCK_ERR_CONNECT, "%s: no reply", what);
    if (r->type != REDIS_REPLY_ERROR)
        return dlock__fail(DLOCK_ERR_REDIS, "%s: unexpected reply type %d", what, r->type);
    if (strncmp(r->str, "NOAUTH", 6) == 0 || strncmp(r->str, "WRONGPASS", 9) == 0 || strncmp(r->str, "NOPERM", 6) == 0)
        return dlock__fail(DLOCK_ERR_AUTH, "%s: %s", what, r->str);
    /* A script's refusal of a NAME that is another kind (lib/kinds.lua):
     * its text names that kind and is the whole message. */
    if (strncmp(r->str, "WRONGKIND ", 10) == 0) return dlock__fail(DLOCK_ERR_WRONG_KIND, "%s", r->str + 10);
    return dlock__fail(DLOCK_ERR_REDIS, "%s: %s", what, r->str);
}

/* One call into OpenSSL for I/O, under the link's mutex: the bytes moved,
 * or <= 0 with *err (SSL_get_error) and errno as the call left it. */
static int tls_call(dlock__link *l, int write, void *buf, size_t len, int *err)
{
    int n = len > INT_MAX ? INT_MAX : (int)len;
    pthread_mutex_lock(&l->ssl_mu);
    int r = dlock__tls_call(l->ssl, write, buf, n, err, l->why, sizeof l->why);
    int saved = errno;
    pthread_mutex_unlock(&l->ssl_mu);
    errno = saved;
    return r;
}

/* TLS: move bytes one way, waiting in poll(2) until the deadline when
 * OpenSSL needs the socket. As send()/read() would: > 0, 0 at the end of
 * the stream (reads), -1 with errno (EAGAIN on timeout). */
static ssize_t tls_io(dlock__link *l, int write, void *buf, size_t len)
{
    int64_t deadline = dlock__mono_ms() + l->timeout_ms;
    for (;;) {
        int err;
        int n = tls_call(l, write, buf, len, &err);
        if (n > 0) return n;
        int saved = errno;
        if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
            if (dlock__poll_fd(l->c->fd, err == SSL_ERROR_WANT_WRITE, deadline) == 0) continue;
            return -1; /* errno: EAGAIN on timeout */
        }
        if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && saved == 0)) {
            if (!write) return 0; /* closed, with or without close_notify */
            saved = EPIPE;
        }
        errno = saved ? saved : EPROTO;
        return -1;
    }
}

int dlock__link_buffered(dlock__link *l)
{
    if (!l->ssl) return 0;
    pthread_mutex_lock(&l->ssl_mu);
    int n = dlock__tls_pending(l->ssl);
    pthread_mutex_unlock(&l->ssl_mu);
    return n;
}

int dlock__link_send(dlock__link *l, const char *buf, size_t len, size_t *sent)
{
    size_t off = 0;
    int rc = 0;
    while (off < len) {
        ssize_t n =
            l->ssl ? tls_io(l, 1, (void *)(buf + off), len - off) : send(l->c->fd, buf + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            rc = -1;
            break;
        }
        off += (size_t)n;
    }
    if (sent) *sent = off;
    return rc;
}

ssize_t dlock__link_recv(dlock__link *l, char *buf, size_t cap)
{
    if (l->ssl) return tls_io(l, 0, buf, cap);
    ssize_t n;
    do {
        n = read(l->c->fd, buf, cap);
    } while (n < 0 && errno == EINTR);
    return n;
}

/* "<c><v>\r\n" at p; returns the end. */
static char *put_line(char *p, char c, size_t v)
{
    *p++ = c;
    p = dlock__put_dec(p, v, dlock__dec_len(v));
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* Why not hiredis's redisAppendCommandArgv: it prints each argument's
 * length line with sdscatfmt into a new string, then copies that string
 * onto the output buffer. For a lock call's 12-16 arguments that was
 * about 8 000 instructions a command: a fifth of the user-space work of a
 * Python lock+release pair (measured with callgrind; CHANGELOG.md).
 * RESP's framing is one length line per argument: written here straight
 * into the output buffer, which grows once. test_link checks the bytes
 * against hiredis's formatter. */
int dlock__link_append(dlock__link *l, int argc, const char *const *argv, const size_t *lens)
{
    size_t stack[64], *len = argc <= 64 ? stack : malloc((size_t)argc * sizeof *len);
    if (!len) return -1;
    size_t total = 3 + dlock__dec_len((size_t)argc);
    for (int i = 0; i < argc; i++) {
        len[i] = lens ? lens[i] : strlen(argv[i]);
        total += 5 + dlock__dec_len(len[i]) + len[i];
    }
    sds o = total > INT_MAX ? NULL : sdsMakeRoomFor(l->c->obuf, total);
    if (o) {
        l->c->obuf = o;
        char *p = put_line(o + sdslen(o), '*', (size_t)argc);
        for (int i = 0; i < argc; i++) {
            p = put_line(p, '$', len[i]);
            memcpy(p, argv[i], len[i]);
            p += len[i];
            *p++ = '\r';
            *p++ = '\n';
        }
        sdsIncrLen(o, (int)total);
    }
    if (len != stack) free(len);
    return o ? 0 : -1;
}

size_t dlock__link_pending(const dlock__link *l)
{
    return sdslen(l->c->obuf);
}

sds dlock__link_take(dlock__link *l)
{
    sds next = l->spare ? l->spare : sdsempty();
    if (!next) return NULL;
    l->spare = NULL;
    sds out = l->c->obuf;
    l->c->obuf = next;
    return out;
}

/* Why keep one: a buffer sent is as large as the next burst will need, and
 * taking a new one each flush cost an allocation and the growth of it from
 * empty on every command of a thread that waits for each reply. A buffer
 * grown past SPARE_MAX by a large burst is let go. */
#define SPARE_MAX (64 * 1024)

void dlock__link_give_back(dlock__link *l, sds buf)
{
    if (!buf) return;
    if (l->spare || sdsalloc(buf) > SPARE_MAX) {
        sdsfree(buf);
        return;
    }
    sdsclear(buf);
    l->spare = buf;
}

int dlock__link_flush(dlock__link *l)
{
    size_t sent = 0;
    int rc = dlock__link_send(l, l->c->obuf, sdslen(l->c->obuf), &sent);
    sdsrange(l->c->obuf, (ssize_t)sent, -1);
    return rc;
}

int dlock__link_feed(dlock__link *l, const char *buf, size_t len)
{
    return redisReaderFeed(l->c->reader, buf, len) == REDIS_OK ? 0 : -1;
}

int dlock__link_reply(dlock__link *l, redisReply **out)
{
    void *r = NULL;
    int rc = redisReaderGetReply(l->c->reader, &r) == REDIS_OK ? 0 : -1;
    *out = r;
    return rc;
}

const char *dlock__link_strerror(dlock__link *l, int err)
{
    if (l->ssl && l->why[0]) return l->why;
    return strerror(err ? err : EIO);
}

/* A port that answers, but not in RESP, is almost always the wrong port:
 * saying what it answered tells the user which service is there. */
const char *dlock__link_protocol_error(const char *buf, size_t n, char *out, size_t size)
{
    /* Every RESP2 and RESP3 reply starts with one of these. */
    if (n == 0 || strchr("+-:$*_,#!=(|%~>", buf[0])) return "protocol error";
    char first[48];
    size_t k = 0;
    for (; k < n && k < sizeof first - 1 && buf[k] != '\r' && buf[k] != '\n'; k++)
        first[k] = buf[k] >= 0x20 && buf[k] < 0x7f ? buf[k] : '.';
    first[k] = '\0';
    snprintf(out, size, "not a Redis server (it answered '%s')", first);
    return out;
}

void dlock__link_shutdown(dlock__link *l)
{
    shutdown(l->c->fd, SHUT_RDWR);
}

dlock_status dlock__link_pipeline(dlock__link *l, int n, const int *argcs, const char *const *const *argvs,
                                  const size_t *const *lens, redisReply **replies, dlock__io_fail *why)
{
    *why = (dlock__io_fail){0, 0};
    for (int i = 0; i < n; i++) replies[i] = NULL;
    for (int i = 0; i < n; i++)
        if (dlock__link_append(l, argcs[i], argvs[i], lens ? lens[i] : NULL) != 0)
            return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    const char *what = NULL;
    int err = 0;
    if (dlock__link_flush(l) != 0) {
        err = errno;
    } else {
        /* Only commands that left in full may have run on the server; ones
         * whose send failed did not, and their resend is no "maybe twice". */
        why->sent = 1;
        int got = 0;
        char buf[16384], why_buf[96];
        ssize_t last = 0; /* bytes of the chunk last fed, still in buf */
        while (got < n) {
            redisReply *r;
            if (dlock__link_reply(l, &r) != 0) {
                what = dlock__link_protocol_error(buf, (size_t)last, why_buf, sizeof why_buf);
                break;
            }
            if (r) {
                replies[got++] = r;
                continue;
            }
            ssize_t k = dlock__link_recv(l, buf, sizeof buf);
            if (k <= 0) {
                err = k < 0 ? errno : 0;
                what = k == 0 ? "server closed the connection" : NULL;
                break;
            }
            if (dlock__link_feed(l, buf, (size_t)k) != 0) {
                what = "protocol error";
                break;
            }
            last = k;
        }
        if (got == n) return DLOCK_OK;
    }
    for (int i = 0; i < n; i++) {
        if (replies[i]) freeReplyObject(replies[i]);
        replies[i] = NULL;
    }
    why->timed_out = !what && (err == EAGAIN || err == EWOULDBLOCK);
    if (!what) what = why->timed_out ? "command timed out" : dlock__link_strerror(l, err);
    return dlock__fail(DLOCK_ERR_CONNECT, "%s on %s: %s", argvs[0][0], l->name, what);
}

/* Run a setup command (AUTH, SELECT) on a new link; any failure to run it
 * is an authentication failure from the caller's point of view. */
static dlock_status setup_command(dlock__link *l, int argc, const char **argv, const char *what)
{
    const char *const *argvs[1] = {argv};
    redisReply *r;
    dlock__io_fail f;
    dlock_status st = dlock__link_pipeline(l, 1, &argc, argvs, NULL, &r, &f);
    if (st != DLOCK_OK) return st;
    if (r->type == REDIS_REPLY_ERROR) st = dlock__fail(DLOCK_ERR_AUTH, "%s refused: %s", what, r->str);
    freeReplyObject(r);
    return st;
}

/* Sentinel's word is not enough: between a failover and the moment a
 * client asks, the address it gives may still be a demoted master. ROLE on
 * every new connection means we never send a lock command to a replica. */
static dlock_status check_master(dlock__link *l)
{
    const char *argv[1] = {"ROLE"};
    const char *const *argvs[1] = {argv};
    const int argc = 1;
    redisReply *r;
    dlock__io_fail f;
    dlock_status st = dlock__link_pipeline(l, 1, &argc, argvs, NULL, &r, &f);
    if (st != DLOCK_OK) return st;
    if (r->type == REDIS_REPLY_ERROR) st = dlock__reply_error(r, "ROLE");
    else if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_STRING)
        st = dlock__fail(DLOCK_ERR_REDIS, "ROLE on %s: unexpected reply", l->name);
    else if (strcmp(r->element[0]->str, "master") != 0)
        st = dlock__fail(DLOCK_ERR_CONNECT, "%s is not a master (its role is %s)", l->name, r->element[0]->str);
    freeReplyObject(r);
    return st;
}

redisContext *dlock__link_detach(dlock__link *l)
{
    redisContext *c = NULL;
    if (!l->ssl) {
        c = l->c;
        l->c = NULL;
    }
    dlock__link_free(l);
    return c;
}

void dlock__link_free(dlock__link *l)
{
    if (!l) return;
    if (l->ssl) {
        dlock__tls_close(l->ssl);
        pthread_mutex_destroy(&l->ssl_mu);
    }
    if (l->c) redisFree(l->c); /* closes the socket */
    sdsfree(l->spare);
    free(l);
}

dlock_status dlock__link_open(const dlock__endpoint *ep, dlock__link **out)
{
    const dlock__conn_cfg *cfg = ep->cfg;
    const char *host = ep->host, *path = ep->path, *name = ep->name;
    int port = ep->port;
    *out = NULL;
    /* A client being freed waits for nobody's new connection. */
    if (cfg->closing && atomic_load(cfg->closing)) return dlock__fail(DLOCK_ERR_CONNECT, "the client is closing");
    dlock__link *l = calloc(1, sizeof *l);
    if (!l) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    l->name = name;
    l->timeout_ms = cfg->command_timeout_ms;
    l->c = path ? redisConnectUnixWithTimeout(path, ms_tv(cfg->connect_timeout_ms))
                : redisConnectWithTimeout(host, port, ms_tv(cfg->connect_timeout_ms));
    if (!l->c) {
        free(l);
        return dlock__fail(DLOCK_ERR_NOMEM, "cannot allocate a connection");
    }
    if (l->c->err) {
        dlock_status st = dlock__fail(DLOCK_ERR_CONNECT, "cannot connect to %s: %s", name, l->c->errstr);
        dlock__link_free(l);
        return st;
    }
    /* hiredis opens its socket without SOCK_CLOEXEC: a program that runs
     * another (fork and exec) would hand it our connection, which the
     * other program could then keep open for as long as it runs (the
     * CLI's COMMAND, a daemon it starts). Marked as soon as it exists. */
    int fdfl = fcntl(l->c->fd, F_GETFD);
    if (fdfl >= 0 && !(fdfl & FD_CLOEXEC)) fcntl(l->c->fd, F_SETFD, fdfl | FD_CLOEXEC);
    if (!path) redisEnableKeepAlive(l->c);
    dlock_status st = DLOCK_OK;
    if (cfg->tls) {
        int fl = fcntl(l->c->fd, F_GETFL);
        if (fl < 0 || fcntl(l->c->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
            st = dlock__fail(DLOCK_ERR_SYS, "cannot make the connection to %s non-blocking: %s", name, strerror(errno));
        } else {
            pthread_mutex_init(&l->ssl_mu, NULL);
            st = dlock__tls_handshake(cfg->tls, l->c->fd, host, name, cfg->connect_timeout_ms, &l->ssl);
            if (st != DLOCK_OK) pthread_mutex_destroy(&l->ssl_mu);
        }
    } else {
        redisSetTimeout(l->c, ms_tv(cfg->command_timeout_ms));
    }
    if (st == DLOCK_OK && cfg->password) {
        const char *argv[3] = {"AUTH", cfg->user ? cfg->user : cfg->password, cfg->password};
        st = setup_command(l, cfg->user ? 3 : 2, argv, "AUTH");
    }
    if (st == DLOCK_OK && cfg->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", cfg->db);
        const char *argv[2] = {"SELECT", db};
        st = setup_command(l, 2, argv, "SELECT");
    }
    if (st == DLOCK_OK && cfg->require_master) st = check_master(l);
    if (st != DLOCK_OK) {
        dlock__link_free(l);
        return st;
    }
    *out = l;
    return DLOCK_OK;
}
