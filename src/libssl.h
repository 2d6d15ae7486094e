/*
 * OpenSSL, loaded the first time a client needs TLS.
 *
 * Why not link it: a program that links libssl and libcrypto pays for
 * mapping and relocating them at every start, used or not: 0.7 ms per
 * exec on the machine of docs/BENCHMARKS.md, a fifth of what a `dlock
 * lock NAME -- true` costs, for the many users who never write rediss://.
 * So the library is built against OpenSSL's headers and opens
 * libssl.so.MAJOR (and through it libcrypto) with dlopen() on the first
 * TLS URL; the functions tls.c calls are the table below, written once.
 * Each entry's signature is checked against OpenSSL's own declaration at
 * compile time (libssl.c), so a mistake here fails the build, not a call.
 */
#ifndef DLOCK__LIBSSL_H
#define DLOCK__LIBSSL_H

#include <stddef.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* X(return type, name, parameter types) for every OpenSSL function used. */
#define DLOCK__LIBSSL_FUNCS(X)                                                                                         \
    X(void, BIO_clear_flags, (BIO *, int))                                                                             \
    X(void, BIO_set_flags, (BIO *, int))                                                                               \
    X(void *, BIO_get_data, (BIO *))                                                                                   \
    X(void, BIO_set_data, (BIO *, void *))                                                                             \
    X(void, BIO_set_init, (BIO *, int))                                                                                \
    X(int, BIO_get_new_index, (void))                                                                                  \
    X(BIO_METHOD *, BIO_meth_new, (int, const char *))                                                                 \
    X(int, BIO_meth_set_write, (BIO_METHOD *, int (*)(BIO *, const char *, int)))                                      \
    X(int, BIO_meth_set_read, (BIO_METHOD *, int (*)(BIO *, char *, int)))                                             \
    X(int, BIO_meth_set_ctrl, (BIO_METHOD *, long (*)(BIO *, int, long, void *)))                                      \
    X(int, BIO_meth_set_create, (BIO_METHOD *, int (*)(BIO *)))                                                        \
    X(BIO *, BIO_new, (const BIO_METHOD *))                                                                            \
    X(void, ERR_clear_error, (void))                                                                                   \
    X(unsigned long, ERR_get_error, (void))                                                                            \
    X(const char *, ERR_reason_error_string, (unsigned long))                                                          \
    X(const SSL_METHOD *, TLS_client_method, (void))                                                                   \
    X(SSL_CTX *, SSL_CTX_new, (const SSL_METHOD *))                                                                    \
    X(void, SSL_CTX_free, (SSL_CTX *))                                                                                 \
    X(long, SSL_CTX_ctrl, (SSL_CTX *, int, long, void *))                                                              \
    X(void, SSL_CTX_set_verify, (SSL_CTX *, int, SSL_verify_cb))                                                       \
    X(int, SSL_CTX_load_verify_locations, (SSL_CTX *, const char *, const char *))                                     \
    X(int, SSL_CTX_set_default_verify_paths, (SSL_CTX *))                                                              \
    X(int, SSL_CTX_use_certificate_chain_file, (SSL_CTX *, const char *))                                              \
    X(int, SSL_CTX_use_PrivateKey_file, (SSL_CTX *, const char *, int))                                                \
    X(int, SSL_CTX_check_private_key, (const SSL_CTX *))                                                               \
    X(SSL *, SSL_new, (SSL_CTX *))                                                                                     \
    X(void, SSL_free, (SSL *))                                                                                         \
    X(void, SSL_set_bio, (SSL *, BIO *, BIO *))                                                                        \
    X(long, SSL_ctrl, (SSL *, int, long, void *))                                                                      \
    X(X509_VERIFY_PARAM *, SSL_get0_param, (SSL *))                                                                    \
    X(int, X509_VERIFY_PARAM_set1_ip_asc, (X509_VERIFY_PARAM *, const char *))                                         \
    X(int, SSL_set1_host, (SSL *, const char *))                                                                       \
    X(int, SSL_connect, (SSL *))                                                                                       \
    X(int, SSL_get_error, (const SSL *, int))                                                                          \
    X(long, SSL_get_verify_result, (const SSL *))                                                                      \
    X(const char *, X509_verify_cert_error_string, (long))                                                             \
    X(int, SSL_read, (SSL *, void *, int))                                                                             \
    X(int, SSL_write, (SSL *, const void *, int))                                                                      \
    X(int, SSL_pending, (const SSL *))

typedef struct dlock__libssl {
#define DLOCK__LIBSSL_FIELD(ret, name, params) ret(*name) params;
    DLOCK__LIBSSL_FUNCS(DLOCK__LIBSSL_FIELD)
#undef DLOCK__LIBSSL_FIELD
} dlock__libssl;

/* The functions, once dlock__libssl_load() has succeeded. */
extern dlock__libssl dlock__ssl;

/* Open OpenSSL, once per process (later calls return the first outcome).
 * 0 when every function was found; -1 with the reason in `err`. */
int dlock__libssl_load(char *err, size_t size);

#endif
