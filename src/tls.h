/* TLS for the connections of a client: one OpenSSL context, made from a
 * rediss:// URL's parameters, the handshake over a connected socket, and
 * the calls link.c makes on such a connection. The only file that calls
 * OpenSSL (through libssl.h, loaded on first use). */
#ifndef DLOCK__TLS_H
#define DLOCK__TLS_H

#include <openssl/ssl.h>

#include "dlock.h"

typedef struct dlock__tls dlock__tls;

/* A context for `url` (which must be a TLS URL): the CA file or the system
 * store, the client certificate and key, the SNI name, whether to verify.
 * DLOCK_ERR_URL when a file cannot be used, with OpenSSL's reason. */
dlock_status dlock__tls_new(const dlock_url *url, dlock__tls **out);
void dlock__tls_free(dlock__tls *t);

/* Make `fd` (connected, non-blocking) a TLS connection to `host` (the
 * name the certificate must carry, unless the context has an SNI name or
 * does not verify), within `timeout_ms`. DLOCK_ERR_CONNECT with the
 * reason (OpenSSL's, or the certificate's verification error) on failure. */
dlock_status dlock__tls_handshake(const dlock__tls *t, int fd, const char *host, const char *name, int timeout_ms,
                                  SSL **out);

/* One SSL_read or SSL_write on a connection (callers serialise the calls
 * on one connection): the bytes moved, or <= 0 with *err an SSL_ERROR_*
 * code and errno as the call left it; with SSL_ERROR_SSL, OpenSSL's reason
 * in `why`. */
int dlock__tls_call(SSL *ssl, int write, void *buf, int n, int *err, char *why, size_t whylen);

/* Bytes decrypted and not yet read (SSL_pending). */
int dlock__tls_pending(SSL *ssl);

/* Free a connection made by dlock__tls_handshake (not its socket). */
void dlock__tls_close(SSL *ssl);

/* Why the last TLS call on this thread failed, for a message: OpenSSL's
 * error queue, emptied. */
void dlock__tls_reason(char *out, size_t size);

#endif
