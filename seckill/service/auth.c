/*
 * Bearer tokens. A token is "UID.EXPIRY.MAC": the user id and the expiry in
 * Unix seconds, both plain decimal, and the lower-case hex HMAC-SHA256 of
 * "seckill-v1:UID.EXPIRY" under the server secret. The server keeps no
 * session table: any process holding the secret can check any token.
 */
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cli.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "common/skutil.h"

#define MAC_LEN 32

/*
 * Why a context per thread: HMAC() fetches the algorithm from the provider
 * store and builds a new context on every call, and in OpenSSL 3 that was
 * most of the token check's cost (locks and allocations on every request).
 * Each thread keeps one context keyed with the secret and re-initialises
 * it per MAC (EVP_MAC_init without a key keeps the key). A copy of the
 * secret tells when a caller passes another one (tests do); the copy is
 * cleansed when dropped.
 */
typedef struct mac_cache {
    EVP_MAC_CTX *ctx;
    unsigned char *secret;
    size_t len;
} mac_cache;

static pthread_once_t mac_once = PTHREAD_ONCE_INIT;
static pthread_key_t mac_key;
static EVP_MAC *hmac;

static void mac_cache_free(void *p)
{
    mac_cache *c = p;
    if (!c) return;
    EVP_MAC_CTX_free(c->ctx);
    if (c->secret) OPENSSL_clear_free(c->secret, c->len);
    free(c);
}

static void mac_init_once(void)
{
    hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (pthread_key_create(&mac_key, mac_cache_free) != 0) {
        EVP_MAC_free(hmac);
        hmac = NULL;
    }
}

/* This thread's context, keyed with `secret`; NULL on failure. */
static EVP_MAC_CTX *mac_context(const unsigned char *secret, size_t secret_len)
{
    pthread_once(&mac_once, mac_init_once);
    if (!hmac) return NULL;
    mac_cache *c = pthread_getspecific(mac_key);
    if (c && c->len == secret_len && memcmp(c->secret, secret, secret_len) == 0)
        return EVP_MAC_init(c->ctx, NULL, 0, NULL) ? c->ctx : NULL;
    mac_cache_free(c);
    pthread_setspecific(mac_key, NULL);
    c = calloc(1, sizeof *c);
    if (!c) return NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    if (!(c->ctx = EVP_MAC_CTX_new(hmac)) || !(c->secret = OPENSSL_memdup(secret, secret_len)) ||
        !EVP_MAC_init(c->ctx, secret, secret_len, params)) {
        mac_cache_free(c);
        return NULL;
    }
    c->len = secret_len;
    pthread_setspecific(mac_key, c);
    return c->ctx;
}

/* The versioned prefix keeps these MACs from ever matching a MAC the same
 * secret might produce for another purpose or a future token format. */
static int compute_mac(const unsigned char *secret, size_t secret_len, const char *claims, size_t claims_len,
                       unsigned char mac[MAC_LEN])
{
    static const char prefix[] = "seckill-v1:";
    EVP_MAC_CTX *ctx = mac_context(secret, secret_len);
    size_t len = 0;
    if (!ctx || !EVP_MAC_update(ctx, (const unsigned char *)prefix, sizeof prefix - 1) ||
        !EVP_MAC_update(ctx, (const unsigned char *)claims, claims_len) || !EVP_MAC_final(ctx, mac, &len, MAC_LEN) ||
        len != MAC_LEN)
        return -1;
    return 0;
}

/* Tokens are made by the CLI and by tests; the format is the one place
 * both sides must agree, so it is written only here. */
int sk_token_make(const unsigned char *secret, size_t secret_len, int64_t user_id, int64_t expiry, char *out,
                  size_t cap)
{
    if (user_id < 0 || expiry < 0 || !secret || secret_len < SK_SECRET_MIN) return -1;
    char claims[48];
    int n = snprintf(claims, sizeof claims, "%lld.%lld", (long long)user_id, (long long)expiry);
    if (n < 0 || (size_t)n >= sizeof claims) return -1;
    unsigned char mac[MAC_LEN];
    if (compute_mac(secret, secret_len, claims, (size_t)n, mac) != 0) return -1;
    if (cap < (size_t)n + 1 + 2 * MAC_LEN + 1) return -1;
    memcpy(out, claims, (size_t)n);
    out[n] = '.';
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < MAC_LEN; i++) {
        out[n + 1 + 2 * i] = hex[mac[i] >> 4];
        out[n + 2 + 2 * i] = hex[mac[i] & 15];
    }
    out[n + 1 + 2 * MAC_LEN] = '\0';
    return 0;
}

/* Lower case only: one token has one spelling, like ids. */
static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Why parse before comparing: the layout of a token is public, only the MAC
 * is secret. Rejecting a malformed token early leaks nothing; the MAC itself
 * is compared with CRYPTO_memcmp, whose time does not depend on where the
 * first differing byte is, so a forger cannot find the MAC byte by byte. */
int sk_token_verify(const unsigned char *secret, size_t secret_len, const char *token, size_t len, int64_t now,
                    int64_t *user_id)
{
    if (!secret || secret_len < SK_SECRET_MIN || !token || len == 0 || len > SK_TOKEN_MAX) return -1;
    const char *dot1 = memchr(token, '.', len);
    if (!dot1) return -1;
    const char *rest = dot1 + 1;
    const char *dot2 = memchr(rest, '.', len - (size_t)(rest - token));
    if (!dot2) return -1;
    const char *machex = dot2 + 1;
    size_t maclen = len - (size_t)(machex - token);
    if (maclen != 2 * MAC_LEN) return -1;
    int64_t uid, exp;
    if (sk_parse_i64(token, (size_t)(dot1 - token), INT64_MAX, &uid) != 0) return -1;
    if (sk_parse_i64(rest, (size_t)(dot2 - rest), INT64_MAX, &exp) != 0) return -1;
    unsigned char given[MAC_LEN], want[MAC_LEN];
    for (int i = 0; i < MAC_LEN; i++) {
        int hi = hexval(machex[2 * i]), lo = hexval(machex[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        given[i] = (unsigned char)(hi << 4 | lo);
    }
    if (compute_mac(secret, secret_len, token, (size_t)(dot2 - token), want) != 0) return -1;
    int bad = CRYPTO_memcmp(given, want, MAC_LEN) != 0;
    if (bad) return SK_TOKEN_BAD_SIGNATURE;
    if (exp <= now) return SK_TOKEN_EXPIRED;
    *user_id = uid;
    return 0;
}

/* RFC 7235: the scheme is case-insensitive, one or more spaces follow it. */
int sk_auth_header(const unsigned char *secret, size_t secret_len, const char *header, int64_t now, int64_t *user_id)
{
    if (!header) return SK_TOKEN_MISSING;
    if (strncasecmp(header, "Bearer ", 7) != 0) return SK_TOKEN_MALFORMED;
    const char *t = header + 7;
    while (*t == ' ') t++;
    size_t len = strnlen(t, SK_TOKEN_MAX + 1);
    while (len > 0 && (t[len - 1] == ' ' || t[len - 1] == '\t')) len--;
    return sk_token_verify(secret, secret_len, t, len, now, user_id);
}

/* Read a whole small file, refusing anything larger than a secret can be. */
static int read_small(int fd, unsigned char *buf, size_t cap, size_t *len)
{
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        n += (size_t)r;
        if (n == cap) return -2;
    }
    *len = n;
    return 0;
}

/* Creating the secret on first use means `seckill serve` and `seckill
 * token` run from the same directory just work; O_EXCL plus a rename-free
 * write to a fresh file means two processes starting at once cannot end up
 * with different secrets (the loser reads the winner's file). */
const char *sk_secret_file(const char *given)
{
    const char *env = getenv("SECKILL_SECRET_FILE");
    return given ? given : env && *env ? env : SK_DEFAULT_SECRET_FILE;
}

/* "where it looked" for a message: the path made absolute, so that a
 * tool run from another directory than the server says which file it
 * wanted. */
static void absolute(const char *path, char *out, size_t cap)
{
    char cwd[4096];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(out, cap, "%s", path);
    else snprintf(out, cap, "%s/%s", cwd, path);
}

int sk_secret_load(const char *path, int create, unsigned char **secret, size_t *len, int *created, char *err,
                   size_t errlen)
{
    *created = 0;
    int fd = create ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    if (!create && access(path, F_OK) != 0) {
        char where[4200];
        absolute(path, where, sizeof where);
        snprintf(err, errlen,
                 "no secret file at %s (%s): `seckill serve` creates it on its first start in the directory it "
                 "runs in; point --secret-file or $SECKILL_SECRET_FILE at the one it uses",
                 where, strerror(errno));
        return -1;
    }
    if (fd >= 0) {
        unsigned char raw[32];
        char hex[65];
        size_t got = 0;
        while (got < sizeof raw) {
            ssize_t r = getrandom(raw + got, sizeof raw - got, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                close(fd);
                unlink(path);
                snprintf(err, errlen, "getrandom: %s", strerror(errno));
                return -1;
            }
            got += (size_t)r;
        }
        for (size_t i = 0; i < sizeof raw; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
        hex[64] = '\n';
        if (write(fd, hex, 65) != 65 || fsync(fd) != 0) {
            snprintf(err, errlen, "writing %s: %s", path, strerror(errno));
            close(fd);
            unlink(path);
            return -1;
        }
        close(fd);
        *created = 1;
    } else if (create && errno != EEXIST) {
        snprintf(err, errlen, "creating %s: %s", path, strerror(errno));
        return -1;
    }
    /* A concurrent creator may still be writing; wait briefly for content. */
    unsigned char buf[SK_SECRET_MAX + 1];
    size_t n = 0;
    for (int attempt = 0; attempt < 50; attempt++) {
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            snprintf(err, errlen, "opening %s: %s", path, strerror(errno));
            return -1;
        }
        int rc = read_small(fd, buf, sizeof buf, &n);
        close(fd);
        if (rc == -2) {
            snprintf(err, errlen, "%s: secret longer than %d bytes", path, SK_SECRET_MAX);
            return -1;
        }
        if (rc != 0) {
            snprintf(err, errlen, "reading %s: %s", path, strerror(errno));
            return -1;
        }
        if (n > 0) break;
        sk_sleep_ms(20);
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
    if (n < SK_SECRET_MIN) {
        snprintf(err, errlen, "%s: secret shorter than %d bytes", path, SK_SECRET_MIN);
        return -1;
    }
    *secret = malloc(n);
    if (!*secret) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(*secret, buf, n);
    *len = n;
    OPENSSL_cleanse(buf, sizeof buf);
    return 0;
}
