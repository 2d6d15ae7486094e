/*
 * TLS through OpenSSL, under our own connections.
 *
 * hiredis 0.14 has no TLS. Every connection of the library is ours
 * (link.c): hiredis only connects the socket and parses replies. So TLS
 * sits between the socket and the parser, here.
 *
 * Two choices worth knowing:
 *
 *  - The socket is driven by a BIO of our own rather than OpenSSL's socket
 *    BIO, which writes with write(2): writing to a connection the server
 *    closed raises SIGPIPE, whose default kills the whole program, and a
 *    library must neither die of it nor change the program's signal
 *    handling. send(2) with MSG_NOSIGNAL turns it into EPIPE (link.c does
 *    the same for plaintext connections).
 *  - The socket is non-blocking and every wait is a poll(2) with the
 *    caller's deadline, so a handshake with a server that accepts and never
 *    answers ends at the connect timeout, and one SSL object can be read by
 *    one thread while another writes (link.c serialises the calls into
 *    OpenSSL; nobody sleeps while holding that lock).
 *
 * OpenSSL itself is loaded when the first TLS context is made
 * (libssl.c): every call below goes through that table, dlock__ssl.
 *
 * Verification: the server's certificate against the URL's CA file, else
 * the system's store; its name against `sni` if given, else the host the
 * URL names (an IP address is matched against the certificate's IP
 * addresses). `verify=no` turns both off, explicitly.
 */
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "libssl.h"
#include "util.h"

struct dlock__tls {
    SSL_CTX *ctx;
    char *sni;  /* the name to send and to verify, or NULL for the host */
    int verify; /* 0: verify=no */
};

/* ---- a socket BIO that cannot raise SIGPIPE ------------------------------ */

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int bio_write(BIO *b, const char *buf, int len)
{
    int fd = (int)(intptr_t)dlock__ssl.BIO_get_data(b);
    dlock__ssl.BIO_clear_flags(b, BIO_FLAGS_RWS | BIO_FLAGS_SHOULD_RETRY);
    ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        dlock__ssl.BIO_set_flags(b, BIO_FLAGS_WRITE | BIO_FLAGS_SHOULD_RETRY);
    return (int)n;
}

static int bio_read(BIO *b, char *buf, int len)
{
    int fd = (int)(intptr_t)dlock__ssl.BIO_get_data(b);
    dlock__ssl.BIO_clear_flags(b, BIO_FLAGS_RWS | BIO_FLAGS_SHOULD_RETRY);
    ssize_t n = recv(fd, buf, (size_t)len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        dlock__ssl.BIO_set_flags(b, BIO_FLAGS_READ | BIO_FLAGS_SHOULD_RETRY);
    return (int)n;
}

/* OpenSSL asks a BIO to flush; a socket has nothing to flush. */
static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b)
{
    dlock__ssl.BIO_set_init(b, 1);
    return 1;
}

static void bio_method_make(void)
{
    BIO_METHOD *m = dlock__ssl.BIO_meth_new(dlock__ssl.BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dlock socket");
    if (!m) return;
    dlock__ssl.BIO_meth_set_write(m, bio_write);
    dlock__ssl.BIO_meth_set_read(m, bio_read);
    dlock__ssl.BIO_meth_set_ctrl(m, bio_ctrl);
    dlock__ssl.BIO_meth_set_create(m, bio_create);
    bio_method = m;
}

void dlock__tls_reason(char *out, size_t size)
{
    unsigned long e, last = 0;
    while ((e = dlock__ssl.ERR_get_error()) != 0) last = e; /* the last is the most specific */
    if (last) {
        const char *r = dlock__ssl.ERR_reason_error_string(last);
        snprintf(out, size, "%s", r ? r : "TLS error");
    } else {
        snprintf(out, size, "%s", errno ? strerror(errno) : "connection closed");
    }
}

dlock_status dlock__tls_new(const dlock_url *u, dlock__tls **out)
{
    *out = NULL;
    char why[256];
    if (dlock__libssl_load(why, sizeof why) != 0) return dlock__fail(DLOCK_ERR_SYS, "%s", why);
    pthread_once(&bio_once, bio_method_make);
    if (!bio_method) return dlock__fail(DLOCK_ERR_NOMEM, "cannot make the TLS socket method");
    dlock__tls *t = calloc(1, sizeof *t);
    if (!t) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock__ssl.ERR_clear_error();
    t->verify = u->tls_verify;
    t->ctx = dlock__ssl.SSL_CTX_new(dlock__ssl.TLS_client_method());
    if (!t->ctx || (u->tls_sni && !(t->sni = strdup(u->tls_sni)))) {
        dlock__tls_free(t);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    dlock__ssl.SSL_CTX_ctrl(t->ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, NULL);
    dlock__ssl.SSL_CTX_ctrl(t->ctx, SSL_CTRL_MODE, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER,
                            NULL);
    const char *failed = NULL;
    if (t->verify) {
        dlock__ssl.SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
        if (u->tls_cacert ? dlock__ssl.SSL_CTX_load_verify_locations(t->ctx, u->tls_cacert, NULL) != 1
                          : dlock__ssl.SSL_CTX_set_default_verify_paths(t->ctx) != 1)
            failed = u->tls_cacert ? "cacert" : "the system's CA store";
    } else {
        dlock__ssl.SSL_CTX_set_verify(t->ctx, SSL_VERIFY_NONE, NULL);
    }
    if (!failed && u->tls_cert) {
        if (dlock__ssl.SSL_CTX_use_certificate_chain_file(t->ctx, u->tls_cert) != 1) failed = "cert";
        else if (dlock__ssl.SSL_CTX_use_PrivateKey_file(t->ctx, u->tls_key, SSL_FILETYPE_PEM) != 1) failed = "key";
        else if (dlock__ssl.SSL_CTX_check_private_key(t->ctx) != 1) failed = "key (it does not match cert)";
    }
    if (failed) {
        dlock__tls_reason(why, sizeof why);
        dlock__tls_free(t);
        return dlock__fail(DLOCK_ERR_URL, "TLS: cannot use %s: %s", failed, why);
    }
    *out = t;
    return DLOCK_OK;
}

void dlock__tls_free(dlock__tls *t)
{
    if (!t) return;
    dlock__ssl.SSL_CTX_free(t->ctx);
    free(t->sni);
    free(t);
}

/* A handshake failure said so that a person can act on it: a plaintext
 * server, an untrusted or expired certificate, a name mismatch. */
static dlock_status handshake_failed(SSL *ssl, const char *name, const char *why, int timed_out)
{
    long v = dlock__ssl.SSL_get_verify_result(ssl);
    if (timed_out) return dlock__fail(DLOCK_ERR_CONNECT, "TLS handshake with %s timed out (is it a TLS port?)", name);
    if (v != X509_V_OK)
        return dlock__fail(DLOCK_ERR_CONNECT, "TLS handshake with %s failed: certificate verify failed: %s", name,
                           dlock__ssl.X509_verify_cert_error_string(v));
    if (strstr(why, "wrong version number") || strstr(why, "packet length too long") || strstr(why, "unexpected eof") ||
        strstr(why, "record layer failure"))
        return dlock__fail(DLOCK_ERR_CONNECT, "TLS handshake with %s failed: %s (is it a TLS port?)", name, why);
    return dlock__fail(DLOCK_ERR_CONNECT, "TLS handshake with %s failed: %s", name, why);
}

dlock_status dlock__tls_handshake(const dlock__tls *t, int fd, const char *host, const char *name, int timeout_ms,
                                  SSL **out)
{
    *out = NULL;
    dlock__ssl.ERR_clear_error();
    SSL *ssl = dlock__ssl.SSL_new(t->ctx);
    BIO *bio = ssl ? dlock__ssl.BIO_new(bio_method) : NULL;
    if (!bio) {
        dlock__ssl.SSL_free(ssl);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory for a TLS connection");
    }
    dlock__ssl.BIO_set_data(bio, (void *)(intptr_t)fd);
    dlock__ssl.SSL_set_bio(ssl, bio, bio);
    const char *peer = t->sni ? t->sni : host;
    unsigned char addr[16];
    int is_ip = peer && (inet_pton(AF_INET, peer, addr) == 1 || inet_pton(AF_INET6, peer, addr) == 1);
    /* SNI carries names only, never addresses (RFC 6066). */
    if (peer && !is_ip) dlock__ssl.SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, (void *)peer);
    if (t->verify && peer) {
        X509_VERIFY_PARAM *param = dlock__ssl.SSL_get0_param(ssl);
        if (is_ip) dlock__ssl.X509_VERIFY_PARAM_set1_ip_asc(param, peer);
        else dlock__ssl.SSL_set1_host(ssl, peer);
    }
    int64_t deadline = dlock__mono_ms() + timeout_ms;
    for (;;) {
        errno = 0;
        int rc = dlock__ssl.SSL_connect(ssl);
        if (rc == 1) break;
        int e = dlock__ssl.SSL_get_error(ssl, rc);
        if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) &&
            dlock__poll_fd(fd, e == SSL_ERROR_WANT_WRITE, deadline) == 0)
            continue;
        char why[256];
        dlock__tls_reason(why, sizeof why);
        int timed_out = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE;
        dlock_status st = handshake_failed(ssl, name, why, timed_out);
        dlock__ssl.SSL_free(ssl);
        return st;
    }
    *out = ssl;
    return DLOCK_OK;
}

int dlock__tls_call(SSL *ssl, int write, void *buf, int n, int *err, char *why, size_t whylen)
{
    dlock__ssl.ERR_clear_error();
    errno = 0;
    int r = write ? dlock__ssl.SSL_write(ssl, buf, n) : dlock__ssl.SSL_read(ssl, buf, n);
    int saved = errno;
    *err = r > 0 ? SSL_ERROR_NONE : dlock__ssl.SSL_get_error(ssl, r);
    if (*err == SSL_ERROR_SSL) dlock__tls_reason(why, whylen); /* empties the queue */
    errno = saved;
    return r;
}

int dlock__tls_pending(SSL *ssl)
{
    return dlock__ssl.SSL_pending(ssl);
}

void dlock__tls_close(SSL *ssl)
{
    dlock__ssl.SSL_free(ssl);
}
