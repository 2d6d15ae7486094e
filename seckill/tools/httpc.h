/*
 * httpc.h -- a minimal HTTP/1.1 client over plain sockets, for `seckill
 * load` and the tests: keep-alive, Content-Length bodies, one request in
 * flight per connection. Not a general client (no TLS, no chunked replies).
 */
#ifndef SECKILL_HTTPC_H
#define SECKILL_HTTPC_H

#include <stddef.h>

/* How a host names a unix socket: SK_HTTPC_UNIX "PATH", the spelling
 * `seckill serve --listen` takes and prints. */
#define SK_HTTPC_UNIX "unix:"
#define SK_HTTPC_UNIX_LEN (sizeof SK_HTTPC_UNIX - 1)

/* Connect to host:port (numeric or name), or to the unix socket PATH when
 * host is "unix:PATH" (port unused), with send/receive timeouts of
 * `timeout_ms`. A socket, or -1. */
int sk_httpc_connect(const char *host, int port, int timeout_ms);

/* Write all of p[n]. 0, or -1. */
int sk_httpc_send_all(int fd, const char *p, size_t n);

/* Send one request (Authorization: Bearer `token` when not NULL, `body`
 * when not NULL) and read its response; the body goes to resp[cap],
 * NUL-terminated, cut if longer. The status, or -1 on a socket error or a
 * malformed response. */
int sk_httpc_request(int fd, const char *method, const char *path, const char *token, const char *body, char *resp,
                     size_t cap);

/* Read one response (after a request sent by other means). */
int sk_httpc_read_response(int fd, char *resp, size_t cap);

#endif
