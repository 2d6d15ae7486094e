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
#ifndef DLOCK_LINK_H
#define DLOCK_LINK_H

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "dlock.h"

struct dlock_tls;

/* What every connection of a client shares, whatever server it goes to. */
typedef struct dlock_conn_cfg {
    const char *user;       /* ACL user, or NULL */
    const char *password;   /* NULL: no AUTH */
    int db;                 /* SELECT when not 0 */
    int connect_timeout_ms;
    int command_timeout_ms;
    int require_master;     /* refuse a server whose ROLE is not master (Sentinel) */
    const atomic_int *closing; /* set (non-zero) once the client is being freed: connect no more */
    const struct dlock_tls *tls; /* NULL: plaintext */
} dlock_conn_cfg;

/* How a failed exchange failed, for the router's decisions. */
typedef struct dlock_io_fail {
    int timed_out;          /* no reply within the command timeout */
    int sent;               /* the commands left in full: they may have run */
} dlock_io_fail;

typedef struct dlock_link dlock_link;

/* Where a link goes: host:port (host not NULL) or the unix socket `path`,
 * with the client's settings. Embedded by whoever owns the strings. */
typedef struct dlock_endpoint {
    char *host;
    int port;
    char *path;
    const dlock_conn_cfg *cfg;
    char name[300];         /* "host:port", "[v6]:port" or the path, for messages */
} dlock_endpoint;

/* Fill ep (copying host and path); -1 when out of memory. */
int dlock_endpoint_init(dlock_endpoint *ep, const char *host, int port, const char *path,
                        const dlock_conn_cfg *cfg);
void dlock_endpoint_destroy(dlock_endpoint *ep);

/* Connect to `ep`, do the TLS handshake when its settings have TLS, then
 * AUTH, SELECT and ROLE as they ask. */
dlock_status dlock_link_open(const dlock_endpoint *ep, dlock_link **out);
void dlock_link_free(dlock_link *l);

/* A plaintext link's hiredis context, handed to the caller (the raw API's
 * dlock_redis_connect), blocking with the command timeout; the link is
 * gone. NULL, and the link freed, for TLS: hiredis 0.14 cannot speak it. */
redisContext *dlock_link_detach(dlock_link *l);

/* The socket, for poll(2). */
int dlock_link_fd(const dlock_link *l);

/* Bytes TLS has decrypted and not handed out yet: poll(2) cannot see
 * them, so a caller that polls asks this first. 0 for plaintext. */
int dlock_link_buffered(dlock_link *l);

/* Format a command into the output buffer; -1 when out of memory. */
int dlock_link_append(dlock_link *l, int argc, const char *const *argv, const size_t *lens);

/* Bytes appended and not taken yet. */
size_t dlock_link_pending(const dlock_link *l);

/* Take the output buffer (the caller sends it and frees it with sdsfree);
 * the link starts a new one. */
sds dlock_link_take(dlock_link *l);

/* Send len bytes (all of them, or fail); *sent tells how many left. -1
 * with errno on failure (EAGAIN: the command timeout passed). */
int dlock_link_send(dlock_link *l, const char *buf, size_t len, size_t *sent);

/* Send what is appended. -1 with errno on failure. */
int dlock_link_flush(dlock_link *l);

/* Read what has arrived, waiting up to the command timeout: > 0 bytes,
 * 0 when the server closed, -1 with errno (EAGAIN: timed out). */
ssize_t dlock_link_recv(dlock_link *l, char *buf, size_t cap);

/* Parse received bytes; 0, or -1 on a protocol error. */
int dlock_link_feed(dlock_link *l, const char *buf, size_t len);

/* The next complete reply, or NULL in *out when none is in yet; 0, or -1
 * on a protocol error. */
int dlock_link_reply(dlock_link *l, redisReply **out);

/* What a failed send or recv with errno `err` means: TLS's own reason
 * when OpenSSL gave one (an alert from the server, say), else strerror. */
const char *dlock_link_strerror(dlock_link *l, int err);

/* Wake a thread blocked reading or writing it: both fail at once. */
void dlock_link_shutdown(dlock_link *l);

/*
 * Send n commands in one write and read their n replies into replies[]
 * (one thread, a link of its own). On failure nothing is left in
 * replies[], *why says how it failed, and the message names `what`
 * (the first command) and the server. Error replies are replies.
 */
dlock_status dlock_link_pipeline(dlock_link *l, int n, const int *argcs, const char *const *const *argvs,
                                 const size_t *const *lens, redisReply **replies, dlock_io_fail *why);

/* Map an error reply to a status with the server's message, e.g. NOAUTH
 * to DLOCK_ERR_AUTH. */
dlock_status dlock_reply_error(const redisReply *r, const char *what);

#endif
