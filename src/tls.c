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
#include <openssl/err.h>
#include <openssl/x509v3.h>

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
    int fd = (int)(intptr_t)BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
    return (int)n;
}

static int bio_read(BIO *b, char *buf, int len)
{
    int fd = (int)(intptr_t)BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t n = recv(fd, buf, (size_t)len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
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
    BIO_set_init(b, 1);
    return 1;
}

static void bio_method_make(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dlock socket");
    if (!m) return;
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    bio_method = m;
}

void dlock__tls_reason(char *out, size_t size)
{
    unsigned long e, last = 0;
    while ((e = ERR_get_error()) != 0) last = e; /* the last is the most specific */
    if (last) {
        const char *r = ERR_reason_error_string(last);
        snprintf(out, size, "%s", r ? r : "TLS error");
    } else {
        snprintf(out, size, "%s", errno ? strerror(errno) : "connection closed");
    }
}

dlock_status dlock__tls_new(const dlock_url *u, dlock__tls **out)
{
    *out = NULL;
    pthread_once(&bio_once, bio_method_make);
    if (!bio_method) return dlock__fail(DLOCK_ERR_NOMEM, "cannot make the TLS socket method");
    dlock__tls *t = calloc(1, sizeof *t);
    if (!t) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    char why[256];
    ERR_clear_error();
    t->verify = u->tls_verify;
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx || (u->tls_sni && !(t->sni = strdup(u->tls_sni)))) {
        dlock__tls_free(t);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    const char *failed = NULL;
    if (t->verify) {
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
        if (u->tls_cacert ? SSL_CTX_load_verify_locations(t->ctx, u->tls_cacert, NULL) != 1
                          : SSL_CTX_set_default_verify_paths(t->ctx) != 1)
            failed = u->tls_cacert ? "cacert" : "the system's CA store";
    } else {
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_NONE, NULL);
    }
    if (!failed && u->tls_cert) {
        if (SSL_CTX_use_certificate_chain_file(t->ctx, u->tls_cert) != 1) failed = "cert";
        else if (SSL_CTX_use_PrivateKey_file(t->ctx, u->tls_key, SSL_FILETYPE_PEM) != 1) failed = "key";
        else if (SSL_CTX_check_private_key(t->ctx) != 1) failed = "key (it does not match cert)";
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
    SSL_CTX_free(t->ctx);
    free(t->sni);
    free(t);
}

/* A handshake failure said so that a person can act on it: a plaintext
 * server, an untrusted or expired certificate, a name mismatch. */
static dlock_status handshake_failed(SSL *ssl, const char *name, const char *why, int timed_out)
{
    long v = SSL_get_verify_result(ssl);
    if (timed_out) return dlock__fail(DLOCK_ERR_CONNECT, "TLS handshake with %s timed out (is it a TLS port?)", name);
    if (v != X509_V_OK)
        return dlock__fail(DLOCK_ERR_CONNECT, "TLS handshake with %s failed: certificate verify failed: %s", name,
                          X509_verify_cert_error_string(v));
    if (strstr(why, "wrong version number") || strstr(why, "packet length too long") ||
        strstr(why, "unexpected eof") || strstr(why, "record layer failure"))
        return dlock__fail(DLOCK_ERR_CONNECT, "TLS handshake with %s failed: %s (is it a TLS port?)", name, why);
    return dlock__fail(DLOCK_ERR_CONNECT, "TLS handshake with %s failed: %s", name, why);
}

dlock_status dlock__tls_handshake(const dlock__tls *t, int fd, const char *host, const char *name, int timeout_ms,
                                 SSL **out)
{
    *out = NULL;
    ERR_clear_error();
    SSL *ssl = SSL_new(t->ctx);
    BIO *bio = ssl ? BIO_new(bio_method) : NULL;
    if (!bio) {
        SSL_free(ssl);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory for a TLS connection");
    }
    BIO_set_data(bio, (void *)(intptr_t)fd);
    SSL_set_bio(ssl, bio, bio);
    const char *peer = t->sni ? t->sni : host;
    unsigned char addr[16];
    int is_ip = peer && (inet_pton(AF_INET, peer, addr) == 1 || inet_pton(AF_INET6, peer, addr) == 1);
    /* SNI carries names only, never addresses (RFC 6066). */
    if (peer && !is_ip) SSL_set_tlsext_host_name(ssl, peer);
    if (t->verify && peer) {
        X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
        if (is_ip) X509_VERIFY_PARAM_set1_ip_asc(param, peer);
        else SSL_set1_host(ssl, peer);
    }
    int64_t deadline = dlock__mono_ms() + timeout_ms;
    for (;;) {
        errno = 0;
        int rc = SSL_connect(ssl);
        if (rc == 1) break;
        int e = SSL_get_error(ssl, rc);
        if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) &&
            dlock__poll_fd(fd, e == SSL_ERROR_WANT_WRITE, deadline) == 0)
            continue;
        char why[256];
        dlock__tls_reason(why, sizeof why);
        int timed_out = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE;
        dlock_status st = handshake_failed(ssl, name, why, timed_out);
        SSL_free(ssl);
        return st;
    }
    *out = ssl;
    return DLOCK_OK;
}
