/*
 * http.h -- the HTTP/1.1 server (libmicrohttpd, internal threads with a
 * pool of N, epoll where available), feeding api.c.
 */
#ifndef SECKILL_HTTP_H
#define SECKILL_HTTP_H

#include <stddef.h>

#include "common/seckill.h"

typedef struct sk_http sk_http;

/* Bounds on connections (serve's --max-connections, --max-connections-per-client,
 * --idle-timeout; defaults below). */
typedef struct sk_http_limits {
    int threads;         /* worker threads */
    int max_connections; /* open at once, all clients together */
    int per_client;      /* open at once from one client address; 0: no limit */
    int idle_timeout_s;  /* a connection silent this long is closed; 0: never */
    int event_loop;      /* SK_HTTP_LOOP_AUTO, _POLL or _EPOLL */
} sk_http_limits;

enum { SK_HTTP_LOOP_AUTO = 0, SK_HTTP_LOOP_POLL, SK_HTTP_LOOP_EPOLL };
/* "auto" picks poll(2) up to this many connections a thread, epoll above. */
#define SK_HTTP_POLL_PER_THREAD 128

/* The loop `limits` runs on: SK_HTTP_LOOP_POLL or SK_HTTP_LOOP_EPOLL. */
int sk_http_event_loop(const sk_http_limits *limits);

#define SK_HTTP_MAX_CONNECTIONS 4096
#define SK_HTTP_PER_CLIENT 1024
#define SK_HTTP_IDLE_TIMEOUT_S 30

/* Listen on "HOST:PORT" ("[::1]:8080" for IPv6; port 0 picks a free one),
 * or on "unix:PATH", a unix socket (a stale socket file there is replaced,
 * anything else at PATH is refused), within `limits`; the per-client limit
 * does not apply to a unix socket. 0, or -1 with err. */
int sk_http_start(sk_app *app, const char *listen, const sk_http_limits *limits, sk_http **out, char *err,
                  size_t errlen);

/* Check a --listen value without binding, so `serve` can refuse a bad
 * one before it starts anything. 0, or -1 with err. */
int sk_http_check_listen(const char *listen, char *err, size_t errlen);

#define SK_HTTP_UNIX_PREFIX "unix:"

/* The port actually bound (0 on a unix socket). */
int sk_http_port(sk_http *h);

/* Where clients reach it: "http://HOST:PORT" with the port bound, or
 * "unix:PATH". `listen` is what sk_http_start was given. */
void sk_http_url(sk_http *h, const char *listen, char *out, size_t cap);

/* Stop accepting, finish the requests in flight, free. */
void sk_http_stop(sk_http *h);

#endif
