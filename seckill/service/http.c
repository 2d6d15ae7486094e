/*
 * libmicrohttpd glue: collect a request's body (bounded), hand the request
 * to api.c, send its answer, count it. Everything about what a request
 * means is in api.c; this file only knows HTTP.
 */
#include "http.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "api.h"
#include "common/log.h"
#include "common/skutil.h"
#include "metrics.h"

struct sk_http {
    struct MHD_Daemon *daemon;
    sk_app *app;
    int port;
    char *unix_path; /* --listen unix:PATH: removed at stop */
    /* Requests answered later (suspended, see on_request). Atomics, not a
     * mutex: every order passes here twice, from different threads, and
     * one mutex for all of them was the service's most contended lock. mu
     * and idle only let sk_http_stop sleep until pending drops to 0. */
    atomic_int pending;  /* handed to api.c, answer not yet sent */
    atomic_int awaiting; /* taken asynchronously, api.c's answer not yet in */
    atomic_int stopping; /* sk_http_stop began: answer every request now */
    pthread_mutex_t mu;
    pthread_cond_t idle;
    /* Requests answered later, oldest first, each given its fallback
     * answer at its deadline by the timer thread (app->answer_timeout_ms;
     * none when 0). One timeout for all, so the oldest is the first due. */
    pthread_mutex_t tmu;
    pthread_cond_t tcv; /* on CLOCK_MONOTONIC */
    struct reqctx *thead, *ttail;
    int timer_started, timer_stop;
    pthread_t timer;
};

/* Where an answer given later stands (reqctx.state). EXPIRED: its
 * deadline passed with the connection suspended, and the timer resumed it
 * to send the fallback answer (unless the real one comes first). */
enum { ANSWER_AWAITED, ANSWER_SUSPENDED, ANSWER_READY, ANSWER_EXPIRED };

/* Per-request state, from the first callback to the completion notice. */
typedef struct reqctx {
    int64_t start_ns;
    const char *method, *url, *version; /* MHD's, valid until completion */
    char *body;
    size_t len;
    int too_large;
    int answered;
    /* An answer that comes later. */
    sk_http *h;
    struct MHD_Connection *conn;
    int async;        /* api.c will answer through on_answer */
    int counted;      /* in h->pending until MHD completes it */
    atomic_int state; /* ANSWER_*: READY once resp holds it */
    /* Freed by whichever of MHD's completion and api.c's late answer comes
     * last: an answer sent at the deadline leaves api.c's still to come. */
    atomic_int refs;
    sk_response resp;     /* api.c's answer */
    sk_response fallback; /* the answer at the deadline (or the answer now) */
    /* In h's timer list (under h->tmu). */
    int listed;
    int64_t deadline_ns;
    struct reqctx *prev, *next;
} reqctx;

static void reqctx_unref(reqctx *ctx)
{
    if (atomic_fetch_sub(&ctx->refs, 1) != 1) return;
    sk_response_free(&ctx->resp);
    sk_response_free(&ctx->fallback);
    free(ctx->body);
    free(ctx);
}

/* MHD copies the body, so the caller frees its buffer at once; no-store
 * because stock and order status change from one request to the next. */
static enum MHD_Result send_response(struct MHD_Connection *conn, const sk_response *resp)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(resp->body_len, resp->body ? resp->body : (char *)"", MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    if (resp->content_type) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
    if (resp->allow[0]) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, resp->allow);
    if (resp->location[0]) MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, resp->location);
    if (resp->www_authenticate) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, resp->www_authenticate);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    /* "busy" and "unavailable" are invitations to come back: say when. */
    if (resp->retry_after > 0) {
        char secs[16];
        snprintf(secs, sizeof secs, "%d", resp->retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, secs);
    }
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned int)resp->status, r);
    MHD_destroy_response(r);
    return ret;
}

/* The access log's line for a request answered now. Only when the log is
 * on: the address lookup is not free. */
static void access_line(struct MHD_Connection *conn, const reqctx *ctx, int status, size_t bytes)
{
    if (!sk_log_access_on()) return;
    char host[NI_MAXHOST] = "-";
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr && (ci->client_addr->sa_family == AF_INET || ci->client_addr->sa_family == AF_INET6)) {
        socklen_t len =
            ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        if (getnameinfo(ci->client_addr, len, host, sizeof host, NULL, 0, NI_NUMERICHOST) != 0)
            snprintf(host, sizeof host, "-");
    }
    sk_access a = {.remote = host,
                   .method = ctx->method,
                   .path = ctx->url,
                   .version = ctx->version,
                   .status = status,
                   .bytes = bytes,
                   .ns = sk_mono_ns() - ctx->start_ns};
    sk_log_access(&a);
}

/* Answer before the body has been read: MHD then closes the connection
 * instead of reading (and us buffering) an upload we will not use. `body`
 * is a static JSON error. */
static enum MHD_Result reject_early(struct MHD_Connection *conn, reqctx *ctx, int status, const char *body)
{
    sk_response resp = {.status = status,
                        .body = (char *)body,
                        .body_len = strlen(body),
                        .content_type = "application/json",
                        .route = SK_ROUTE_OTHER};
    ctx->answered = 1;
    sk_metrics_request(SK_ROUTE_OTHER, status, sk_mono_ns() - ctx->start_ns);
    access_line(conn, ctx, status, resp.body_len);
    return send_response(conn, &resp);
}

/* HTTP/1.1 makes Host mandatory (RFC 9112, 3.2) and says to answer 400
 * without it; libmicrohttpd lets it through. Versions after 1.1 in the
 * 1.x line count as 1.1. */
static int lacks_host(struct MHD_Connection *conn, const char *version)
{
    return strncmp(version, "HTTP/1.", 7) == 0 && strcmp(version, MHD_HTTP_VERSION_1_0) != 0 &&
           !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
}

/* Send an answer, count it, free its body. */
static enum MHD_Result answer(struct MHD_Connection *conn, reqctx *ctx, sk_response *resp)
{
    ctx->answered = 1;
    enum MHD_Result ret = send_response(conn, resp);
    sk_metrics_request(resp->route, resp->status, sk_mono_ns() - ctx->start_ns);
    access_line(conn, ctx, resp->status, resp->body_len);
    sk_response_free(resp);
    return ret;
}

/* One answer fewer to wait for; the last one wakes sk_http_stop. Why this
 * is enough (Dekker's pattern, all seq_cst): a request adds itself to
 * `pending` before it looks at `stopping`, and sk_http_stop sets
 * `stopping` before it looks at `pending`, so either the request sees the
 * stop and answers at once, or the stop sees the request and waits. */
static void answer_done(sk_http *h)
{
    if (atomic_fetch_sub(&h->pending, 1) == 1 && atomic_load(&h->stopping)) {
        pthread_mutex_lock(&h->mu);
        pthread_cond_broadcast(&h->idle);
        pthread_mutex_unlock(&h->mu);
    }
}

/* api.c's answer to a request it took asynchronously, on a library or
 * strategy thread: keep it, and resume the connection if it waits, so MHD
 * calls on_request again on its own thread to send it. Once the state says
 * READY, ctx belongs to MHD's thread (it may answer and free it at once),
 * unless the connection was suspended: then it stays until resumed. */
static void on_answer(void *arg, sk_response *resp)
{
    reqctx *ctx = arg;
    struct MHD_Connection *conn = ctx->conn;
    sk_http *h = ctx->h;
    ctx->resp = *resp;
    if (atomic_exchange(&ctx->state, ANSWER_READY) == ANSWER_SUSPENDED) MHD_resume_connection(conn);
    reqctx_unref(ctx);
    /* The last touch of h: sk_http_stop frees it once none is awaited. */
    pthread_mutex_lock(&h->mu);
    if (atomic_fetch_sub(&h->awaiting, 1) == 1) pthread_cond_broadcast(&h->idle);
    pthread_mutex_unlock(&h->mu);
}

/* A request taken asynchronously joins the timer's list (its deadline is
 * the latest, so the list stays in deadline order). */
static void timer_add(sk_http *h, reqctx *ctx)
{
    if (!h->timer_started) return;
    ctx->deadline_ns = sk_mono_ns() + (int64_t)h->app->answer_timeout_ms * 1000000;
    pthread_mutex_lock(&h->tmu);
    ctx->prev = h->ttail;
    ctx->next = NULL;
    if (h->ttail) h->ttail->next = ctx;
    else h->thead = ctx;
    h->ttail = ctx;
    ctx->listed = 1;
    if (h->thead == ctx) pthread_cond_signal(&h->tcv);
    pthread_mutex_unlock(&h->tmu);
}

/* Under h->tmu. */
static void timer_unlink(sk_http *h, reqctx *ctx)
{
    if (!ctx->listed) return;
    if (ctx->prev) ctx->prev->next = ctx->next;
    else h->thead = ctx->next;
    if (ctx->next) ctx->next->prev = ctx->prev;
    else h->ttail = ctx->prev;
    ctx->listed = 0;
}

static void timer_wait_until(sk_http *h, int64_t ns)
{
    struct timespec ts = sk_mono_timespec(ns);
    pthread_cond_timedwait(&h->tcv, &h->tmu, &ts);
}

/*
 * Why a deadline here and not only Redis's command timeout: a Redis that
 * hangs (stopped, swapping, a paused VM) holds an order until the
 * library gives its connection up, seconds later, while a buyer's client
 * and the load balancer in front have long given up themselves. At the
 * deadline the order is answered with api.c's fallback (429 busy, retry
 * safe); the script may still run later, which the retry's 409 reports.
 * A request still on its way into suspension (AWAITED) is looked at
 * again a millisecond later; one whose answer is in (READY) is left to
 * be sent.
 */
static void *timer_main(void *arg)
{
    sk_http *h = arg;
    pthread_setname_np(pthread_self(), "sk-deadline");
    pthread_mutex_lock(&h->tmu);
    while (!h->timer_stop) {
        reqctx *c = h->thead;
        if (!c) {
            pthread_cond_wait(&h->tcv, &h->tmu);
            continue;
        }
        int64_t now = sk_mono_ns();
        if (c->deadline_ns > now) {
            timer_wait_until(h, c->deadline_ns);
            continue;
        }
        int st = ANSWER_SUSPENDED;
        if (atomic_compare_exchange_strong(&c->state, &st, ANSWER_EXPIRED)) {
            timer_unlink(h, c);
            MHD_resume_connection(c->conn);
        } else if (st == ANSWER_READY) {
            timer_unlink(h, c);
        } else {
            timer_wait_until(h, now + 1000000);
        }
    }
    pthread_mutex_unlock(&h->tmu);
    return NULL;
}

/* A request's query parameters, for api.c. */
typedef struct query_args {
    sk_query_arg args[SK_QUERY_MAX];
    size_t n;
    int too_many;
} query_args;

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    query_args *q = cls;
    if (q->n == SK_QUERY_MAX) {
        q->too_many = 1;
        return MHD_NO;
    }
    q->args[q->n++] = (sk_query_arg){key, value};
    return MHD_YES;
}

/*
 * MHD calls this at least twice per request: once when the headers are in
 * (*con_cls still NULL), then once per chunk of body, then once more with
 * no data when the body is complete; that last call answers.
 */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    sk_http *h = cls;
    reqctx *ctx = *con_cls;
    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        if (!ctx) return MHD_NO;
        atomic_init(&ctx->state, ANSWER_AWAITED);
        atomic_init(&ctx->refs, 1);
        ctx->start_ns = sk_mono_ns();
        ctx->method = method;
        ctx->url = url;
        ctx->version = version;
        *con_cls = ctx;
        if (lacks_host(conn, version)) return reject_early(conn, ctx, 400, "{\"error\":\"missing_host\"}");
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        uint64_t n;
        if (cl && (sk_parse_u64(cl, strlen(cl), UINT64_MAX, &n) != 0 || n > SK_BODY_MAX))
            return reject_early(conn, ctx, 413, "{\"error\":\"too_large\"}");
        return MHD_YES;
    }
    if (ctx->answered) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        /* A chunked body has no length up front: keep reading, drop what
         * passes the limit, refuse at the end. */
        size_t n = *upload_data_size;
        if (!ctx->too_large && ctx->len + n > SK_BODY_MAX) {
            ctx->too_large = 1;
            free(ctx->body);
            ctx->body = NULL;
            ctx->len = 0;
        }
        if (!ctx->too_large) {
            char *b = realloc(ctx->body, ctx->len + n + 1);
            if (!b) return MHD_NO;
            memcpy(b + ctx->len, upload_data, n);
            ctx->body = b;
            ctx->len += n;
            b[ctx->len] = '\0';
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (ctx->async) {
        /* Resumed: the answer came in meanwhile, or the deadline passed. */
        int st = atomic_load(&ctx->state);
        if (st == ANSWER_READY) return answer(conn, ctx, &ctx->resp);
        if (st == ANSWER_EXPIRED) return answer(conn, ctx, &ctx->fallback);
        return MHD_YES; /* cannot happen: resumed once ready or expired */
    }
    query_args q = {.n = 0};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_arg, &q);
    sk_request req = {
        .method = method,
        .path = url,
        .query = q.args,
        .nquery = q.n,
        .query_too_long = q.too_many,
        .authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
        .body = ctx->body,
        .body_len = ctx->len,
        .body_too_large = ctx->too_large,
    };
    ctx->h = h;
    ctx->conn = conn;
    /* Counted until on_completed, i.e. until its answer is sent (or the
     * client is gone): sk_http_stop() must neither stop MHD with the
     * connection suspended nor close it with the answer still unsent. */
    atomic_fetch_add(&h->pending, 1);
    if (atomic_load(&h->stopping)) {
        answer_done(h);
        sk_api_handle(h->app, &req, &ctx->fallback);
        return answer(conn, ctx, &ctx->fallback);
    }
    /* Referenced and awaited by on_answer too, should it come. */
    atomic_fetch_add(&ctx->refs, 1);
    atomic_fetch_add(&h->awaiting, 1);
    if (!sk_api_handle_async(h->app, &req, &ctx->fallback, on_answer, ctx)) {
        atomic_fetch_sub(&ctx->refs, 1);
        atomic_fetch_sub(&h->awaiting, 1);
        answer_done(h);
        return answer(conn, ctx, &ctx->fallback);
    }
    ctx->counted = 1;
    timer_add(h, ctx);
    /* The answer comes on another thread; until then this connection
     * leaves the event loop, and this thread serves others. It may have
     * come already, before or while the connection is being suspended:
     * whoever moves the state second (to SUSPENDED here, to READY in
     * on_answer) sees the other's move, and an answer that won the race
     * finds the connection not yet suspended, so it is resumed here. */
    ctx->async = 1;
    if (atomic_load(&ctx->state) == ANSWER_READY) return answer(conn, ctx, &ctx->resp);
    MHD_suspend_connection(conn);
    int awaited = ANSWER_AWAITED;
    if (!atomic_compare_exchange_strong(&ctx->state, &awaited, ANSWER_SUSPENDED)) MHD_resume_connection(conn);
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    sk_http *h = cls;
    reqctx *ctx = *con_cls;
    if (!ctx) return;
    if (ctx->async && h->timer_started) {
        pthread_mutex_lock(&h->tmu);
        timer_unlink(h, ctx);
        pthread_mutex_unlock(&h->tmu);
    }
    if (ctx->counted) answer_done(h);
    *con_cls = NULL;
    reqctx_unref(ctx); /* with an answer the client left before */
}

/* Once sk_http_stop() has begun, a new connection is closed as soon as it
 * is accepted: the service no longer takes work. (Not MHD_quiesce_daemon:
 * with epoll and a thread pool it removes the listening socket from each
 * worker's epoll set while the worker may be removing it too, and the
 * loser aborts the process, "Failed to remove listen FD from epoll set",
 * which a test's stop met once; only its own worker touches a set here.) */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addr;
    (void)addrlen;
    sk_http *h = cls;
    return atomic_load(&h->stopping) ? MHD_NO : MHD_YES;
}

/* MHD's own messages go to stderr with our prefix, like every other line. */
static void on_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    SK_LOG_REPEATED(SK_LOG_WARN, "http: %s", msg);
}

/* Paths are left exactly as sent. No route of the API needs an escape,
 * so one resource has one spelling: "/api/vouchers/%31" is not voucher 1,
 * and "1%00" cannot be cut short at a decoded NUL. */
static size_t no_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    return strlen(s);
}

/* Split "HOST:PORT" (HOST may be "[v6]") and resolve it to one address. */
static int resolve(const char *listen, struct sockaddr_storage *ss, int *v6, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || strlen(listen) >= sizeof host) {
        snprintf(err, errlen, "--listen wants HOST:PORT, got \"%s\"", listen);
        return -1;
    }
    size_t hl = (size_t)(colon - listen);
    memcpy(host, listen, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    uint64_t port;
    if (sk_parse_u64(colon + 1, strlen(colon + 1), 65535, &port) != 0) {
        snprintf(err, errlen, "bad port in --listen \"%s\"", listen);
        return -1;
    }
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc != 0 || !ai) {
        snprintf(err, errlen, "--listen %s: %s", listen, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    return 0;
}

/* "unix:PATH": the path, or NULL with err when it does not fit a socket
 * address. NULL without err (err[0] == 0) when `listen` is not unix:. */
static const char *unix_path(const char *listen, char *err, size_t errlen)
{
    if (errlen) err[0] = '\0';
    if (strncmp(listen, SK_HTTP_UNIX_PREFIX, sizeof SK_HTTP_UNIX_PREFIX - 1) != 0) return NULL;
    const char *path = listen + sizeof SK_HTTP_UNIX_PREFIX - 1;
    struct sockaddr_un su;
    if (!*path || strlen(path) >= sizeof su.sun_path) {
        snprintf(err, errlen, "--listen unix:PATH wants a path of 1 to %zu bytes, got \"%s\"", sizeof su.sun_path - 1,
                 listen);
        return NULL;
    }
    return path;
}

int sk_http_check_listen(const char *listen, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    int v6;
    if (unix_path(listen, err, errlen)) return 0;
    if (err[0]) return -1;
    return resolve(listen, &ss, &v6, err, errlen);
}

/* Why a path that exists is looked at before it is replaced: a socket
 * left by a process that died is stale and taken over (nobody answers on
 * it), but one a running service answers on is "in use", as a TCP port
 * would be, and a file that is not a socket is never removed: a typo in
 * --listen must not delete someone's data. The socket's permissions come
 * from the umask, as for any file the service creates. -1 with err. */
static int unix_listen(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un su = {.sun_family = AF_UNIX};
    memcpy(su.sun_path, path, strlen(path) + 1);
    struct stat stt;
    if (lstat(path, &stt) == 0) {
        if (!S_ISSOCK(stt.st_mode)) {
            snprintf(err, errlen, "cannot listen on unix:%s: it exists and is not a socket", path);
            return -1;
        }
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int live = probe >= 0 && connect(probe, (struct sockaddr *)&su, sizeof su) == 0;
        if (probe >= 0) close(probe);
        if (live) {
            snprintf(err, errlen, "cannot listen on unix:%s: another process is listening on it", path);
            return -1;
        }
        unlink(path);
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&su, sizeof su) != 0 || listen(fd, 1024) != 0) {
        snprintf(err, errlen, "cannot listen on unix:%s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

/* Why two loops: a suspended connection leaves its thread's epoll set
 * and a resumed one joins it again, two epoll_ctl calls an order that
 * poll(2) does not make; poll instead walks every connection of its
 * thread on every wake-up. Measured with 64 busy connections on 8
 * threads, poll took 13 % less of the service's CPU an order (and still
 * less with 1000 busy ones), but 2-2.5 times more with 3800 idle
 * connections beside them (docs/BENCHMARKS.md). So "auto" takes poll only
 * when --max-connections bounds a thread to SK_HTTP_POLL_PER_THREAD
 * connections: a service behind a proxy that keeps a few busy ones. */
int sk_http_event_loop(const sk_http_limits *limits)
{
    if (limits->event_loop != SK_HTTP_LOOP_AUTO) return limits->event_loop;
    int threads = limits->threads > 0 ? limits->threads : 1;
    return limits->max_connections <= SK_HTTP_POLL_PER_THREAD * threads ? SK_HTTP_LOOP_POLL : SK_HTTP_LOOP_EPOLL;
}

/* Stop the timer thread (after the last deadline that matters). */
static void timer_end(sk_http *h)
{
    pthread_mutex_lock(&h->tmu);
    h->timer_stop = 1;
    pthread_cond_signal(&h->tcv);
    pthread_mutex_unlock(&h->tmu);
    if (h->timer_started) pthread_join(h->timer, NULL);
    pthread_cond_destroy(&h->tcv);
    pthread_mutex_destroy(&h->tmu);
}

/* Why a thread pool: handlers block on Redis and the database for a round
 * trip or two; N threads, each with its own event loop, keep N requests
 * in flight while keep-alive connections cost no thread each. */
int sk_http_start(sk_app *app, const char *listen, const sk_http_limits *limits, sk_http **out, char *err,
                  size_t errlen)
{
    struct sockaddr_storage ss;
    int v6 = 0, ufd = -1;
    const char *path = unix_path(listen, err, errlen);
    if (!path && err[0]) return -1;
    if (!path && resolve(listen, &ss, &v6, err, errlen) != 0) return -1;
    sk_http *h = calloc(1, sizeof *h);
    if (!h || (path && !(h->unix_path = strdup(path)))) {
        free(h);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (path && (ufd = unix_listen(path, err, errlen)) < 0) {
        free(h->unix_path);
        free(h);
        return -1;
    }
    h->app = app;
    atomic_init(&h->pending, 0);
    atomic_init(&h->awaiting, 0);
    atomic_init(&h->stopping, 0);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->idle, NULL);
    pthread_mutex_init(&h->tmu, NULL);
    sk_cond_init_mono(&h->tcv);
    if (app->answer_timeout_ms > 0 && pthread_create(&h->timer, NULL, timer_main, h) == 0) h->timer_started = 1;
    /* Suspend and resume: orders are answered when their script's reply
     * comes back, without a thread waiting for each (api.c, sk_api_handle_async). */
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC;
    flags |= sk_http_event_loop(limits) == SK_HTTP_LOOP_POLL ? MHD_USE_POLL : MHD_USE_EPOLL;
    if (v6) flags |= MHD_USE_IPv6;
    /* Where to listen: a unix socket bound here (unix_listen; MHD closes
     * it at stop), else the address. An option array, so that each takes
     * its own argument type (a socket, a pointer). */
    struct MHD_OptionItem where[] = {ufd >= 0 ? (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, ufd, NULL}
                                              : (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, &ss},
                                     {MHD_OPTION_END, 0, NULL}};
    h->daemon = MHD_start_daemon(flags, 0, on_accept, h, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL,
                                 MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, NULL, MHD_OPTION_ARRAY, where,
                                 MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)(limits->threads > 0 ? limits->threads : 1),
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                                 /* Idle keep-alive connections hold a descriptor and a slot of the
         * connection limit each; these bound what one client, or many
         * silent ones, can take from the others. */
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)limits->idle_timeout_s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned int)limits->max_connections,
                                 /* Every client of a unix socket has the same (no) address. */
                                 MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)(ufd >= 0 ? 0 : limits->per_client),
                                 /* Our requests are a few hundred bytes (a token is at most 128)
         * and bodies are copied out in chunks; MHD clears this pool for
         * every request, so a big one costs CPU for nothing. */
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(16 * 1024),
                                 MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)1024, MHD_OPTION_END);
    if (!h->daemon) {
        snprintf(err, errlen, "cannot listen on %s (in use, or not an address of this host)", listen);
        /* Not closed here: whether a failed start has closed a socket it
         * was given differs between libmicrohttpd versions, and closing
         * a number another thread has reused would cut its connection.
         * serve exits right after. */
        if (ufd >= 0) unlink(h->unix_path);
        timer_end(h);
        pthread_cond_destroy(&h->idle);
        pthread_mutex_destroy(&h->mu);
        free(h->unix_path);
        free(h);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : 0;
    *out = h;
    return 0;
}

/* With --listen HOST:0 the kernel picks the port; callers need to know it. */
int sk_http_port(sk_http *h)
{
    return h->port;
}

/* One spelling of the address for both start-up lines and for clients:
 * what `seckill load --url` takes. */
void sk_http_url(sk_http *h, const char *listen, char *out, size_t cap)
{
    if (h->unix_path) {
        snprintf(out, cap, SK_HTTP_UNIX_PREFIX "%s", h->unix_path);
        return;
    }
    const char *colon = strrchr(listen, ':');
    snprintf(out, cap, "http://%.*s:%d", (int)(colon - listen), listen, h->port);
}

/* Stop taking connections (on_accept closes new ones); wait until the
 * orders being decided are answered (each within the library's timeouts,
 * also those answered already at their deadline: the strategy goes next)
 * and their answers sent: MHD must not be stopped with a connection
 * suspended, and stopping closes connections whatever they still had to
 * send. New requests on open connections meanwhile are answered
 * synchronously. MHD_stop_daemon waits for handlers in flight, so the
 * strategy and the database can be torn down right after. */
void sk_http_stop(sk_http *h)
{
    if (!h) return;
    atomic_store(&h->stopping, 1);
    pthread_mutex_lock(&h->mu);
    while (atomic_load(&h->pending) > 0 || atomic_load(&h->awaiting) > 0) pthread_cond_wait(&h->idle, &h->mu);
    pthread_mutex_unlock(&h->mu);
    timer_end(h);
    MHD_stop_daemon(h->daemon);
    if (h->unix_path) unlink(h->unix_path);
    pthread_cond_destroy(&h->idle);
    pthread_mutex_destroy(&h->mu);
    free(h->unix_path);
    free(h);
}
