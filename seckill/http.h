/*
 * http.h -- the HTTP/1.1 server (libmicrohttpd, internal threads with a
 * pool of N, epoll where available), feeding api.c.
 */
#ifndef SECKILL_HTTP_H
#define SECKILL_HTTP_H

#include <stddef.h>

#include "seckill.h"

typedef struct sk_http sk_http;

/* Listen on "HOST:PORT" ("[::1]:8080" for IPv6; port 0 picks a free one)
 * with `threads` worker threads. 0, or -1 with err. */
int sk_http_start(sk_app *app, const char *listen, int threads, sk_http **out, char *err, size_t errlen);

/* Check a --listen value without binding, so `serve` can refuse a bad
 * one before it starts anything. 0, or -1 with err. */
int sk_http_check_listen(const char *listen, char *err, size_t errlen);

/* The port actually bound. */
int sk_http_port(sk_http *h);

/* Stop accepting, finish the requests in flight, free. */
void sk_http_stop(sk_http *h);

#endif
