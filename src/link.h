/*
 * One connection to one server, the layer under every other: the socket
 * (TCP or unix), TLS on it or not, the handshake (AUTH, SELECT, and on
 * Sentinel a ROLE check), commands formatted into an output buffer and
 * replies parsed from what comes back. hiredis connects the socket and
 * parses replies; the bytes travel here, so that TLS can sit in between
 * and no write can raise SIGPIPE.
 *
 * A link may be read by one thread while another writes to it (the shared
 * connection, mux.c); anything else is one thread at a time.
 */
#ifndef DLOCK__LINK_H
#define DLOCK__LINK_H

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "dlock.h"

struct dlock__tls;

/* What every connection of a client shares, whatever server it goes to. */
typedef struct dlock__conn_cfg {
    const char *user;     /* ACL user, or NULL */
    const char *password; /* NULL: no AUTH */
    int db;               /* SELECT when not 0 */
    int connect_timeout_ms;
    int command_timeout_ms;
    int require_master;           /* refuse a server whose ROLE is not master (Sentinel) */
    const atomic_int *closing;    /* set (non-zero) once the client is being freed: connect no more */
    const struct dlock__tls *tls; /* NULL: plaintext */
    int busy_poll_us;             /* the shared connection's poll before read() sleeps (mux.c); 0: none */
} dlock__conn_cfg;

/* How a failed exchange failed, for the router's decisions. */
typedef struct dlock__io_fail {
    int timed_out; /* no reply within the command timeout */
    int sent;      /* the commands left in full: they may have run */
} dlock__io_fail;

typedef struct dlock__link dlock__link;

/* Where a link goes: host:port (host not NULL) or the unix socket `path`,
 * with the client's settings. Embedded by whoever owns the strings. */
typedef struct dlock__endpoint {
    char *host;
    int port;
    char *path;
    const dlock__conn_cfg *cfg;
    char name[300]; /* "host:port", "[v6]:port" or the path, for messages */
} dlock__endpoint;

/* Fill ep (copying host and path); -1 when out of memory. */
int dlock__endpoint_init(dlock__endpoint *ep, const char *host, int port, const char *path, const dlock__conn_cfg *cfg);
void dlock__endpoint_destroy(dlock__endpoint *ep);

/* Connect to `ep`, do the TLS handshake when its settings have TLS, then
 * AUTH, SELECT and ROLE as they ask. */
dlock_status dlock__link_open(const dlock__endpoint *ep, dlock__link **out);
void dlock__link_free(dlock__link *l);

/* A plaintext link's hiredis context, handed to the caller (the raw API's
 * dlock_redis_connect), blocking with the command timeout; the link is
 * gone. NULL, and the link freed, for TLS: hiredis 0.14 cannot speak it. */
redisContext *dlock__link_detach(dlock__link *l);

/* The socket, for poll(2). */
int dlock__link_fd(const dlock__link *l);

/* Bytes TLS has decrypted and not handed out yet: poll(2) cannot see
 * them, so a caller that polls asks this first. 0 for plaintext. */
int dlock__link_buffered(dlock__link *l);

/* Format a command into the output buffer; -1 when out of memory. */
int dlock__link_append(dlock__link *l, int argc, const char *const *argv, const size_t *lens);

/* Bytes appended and not taken yet. */
size_t dlock__link_pending(const dlock__link *l);

/* Take the output buffer (the caller sends it, then hands it back with
 * dlock__link_give_back or frees it with sdsfree); the link starts a new
 * one. NULL when out of memory (the buffer stays). */
sds dlock__link_take(dlock__link *l);

/* A buffer taken and sent, kept for the next take. Same locking as
 * dlock__link_take. */
void dlock__link_give_back(dlock__link *l, sds buf);

/* Send len bytes (all of them, or fail); *sent tells how many left. -1
 * with errno on failure (EAGAIN: the command timeout passed). */
int dlock__link_send(dlock__link *l, const char *buf, size_t len, size_t *sent);

/* Send what is appended. -1 with errno on failure. */
int dlock__link_flush(dlock__link *l);

/* Read what has arrived, waiting up to the command timeout: > 0 bytes,
 * 0 when the server closed, -1 with errno (EAGAIN: timed out). */
ssize_t dlock__link_recv(dlock__link *l, char *buf, size_t cap);

/* Parse received bytes; 0, or -1 on a protocol error. */
int dlock__link_feed(dlock__link *l, const char *buf, size_t len);

/* The next complete reply, or NULL in *out when none is in yet; 0, or -1
 * on a protocol error. */
int dlock__link_reply(dlock__link *l, redisReply **out);

/* The reason to give for a protocol error on the chunk `buf` (n bytes)
 * just read: "protocol error", or, when it does not start like any RESP
 * reply (an HTTP server, a TLS port spoken to in plain text), "not a Redis
 * server (it answered '...')" with the start of its first line, formatted
 * in out[size]. */
const char *dlock__link_protocol_error(const char *buf, size_t n, char *out, size_t size);

/* What a failed send or recv with errno `err` means: TLS's own reason
 * when OpenSSL gave one (an alert from the server, say), else strerror. */
const char *dlock__link_strerror(dlock__link *l, int err);

/* Wake a thread blocked reading or writing it: both fail at once. */
void dlock__link_shutdown(dlock__link *l);

/*
 * Send n commands in one write and read their n replies into replies[]
 * (one thread, a link of its own). On failure nothing is left in
 * replies[], *why says how it failed, and the message names `what`
 * (the first command) and the server. Error replies are replies.
 */
dlock_status dlock__link_pipeline(dlock__link *l, int n, const int *argcs, const char *const *const *argvs,
                                  const size_t *const *lens, redisReply **replies, dlock__io_fail *why);

/* Map an error reply to a status with the server's message, e.g. NOAUTH
 * to DLOCK_ERR_AUTH. */
dlock_status dlock__reply_error(const redisReply *r, const char *what);

#endif
