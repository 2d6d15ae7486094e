/*
 * Connection URLs:
 *
 *   redis://[[user]:password@]host[:port][/db]
 *   unix:///path/to.sock[?db=N]
 *
 * The parser is strict on purpose: a URL comes from a command line or an
 * environment variable, and a typo that silently connects somewhere else
 * (port 6379 on a bad port string, db 0 on a bad db) is worse than an error.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define URL_MAX 4096

/* Parse a decimal number in [lo, hi] from exactly [s, s+len). */
static int parse_range(const char *s, size_t len, long lo, long hi, long *out)
{
    long v = 0;
    if (len == 0 || len > 9) return -1;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode %XX escapes so passwords may hold ':', '@' or '/'. A decoded NUL
 * is refused: it would silently truncate the credential. */
static char *percent_decode(const char *s, size_t len)
{
    char *out = malloc(len + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%') {
            int hi, lo;
            if (i + 2 >= len) { free(out); return NULL; }
            hi = hexval(s[i + 1]);
            lo = hexval(s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) { free(out); return NULL; }
            *o++ = (char)(hi * 16 + lo);
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
}

static dlock_status bad(dlock_url *out, const char *what)
{
    dlock_url_free(out);
    return dlock_fail(DLOCK_ERR_URL, "malformed URL: %s", what);
}

static int host_char_ok(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_';
}

/* host[:port][/db] of a redis:// URL, userinfo already removed. */
static dlock_status parse_hostpart(const char *s, dlock_url *out)
{
    const char *p = s, *host, *host_end;
    long v;
    if (*p == '[') {
        host = ++p;
        while (*p && *p != ']') {
            if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.') return bad(out, "bad IPv6 address");
            p++;
        }
        if (*p != ']') return bad(out, "unterminated IPv6 address");
        host_end = p++;
    } else {
        host = p;
        while (host_char_ok(*p)) p++;
        host_end = p;
    }
    if (host_end == host) return bad(out, "missing host");
    out->host = strndup(host, (size_t)(host_end - host));
    if (!out->host) return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    if (*p == ':') {
        const char *port = ++p;
        while (*p && *p != '/') p++;
        if (parse_range(port, (size_t)(p - port), 1, 65535, &v) != 0)
            return bad(out, "port must be a number from 1 to 65535");
        out->port = (int)v;
    }
    if (*p == '/') {
        const char *db = ++p;
        size_t len = strlen(db);
        if (len > 0 && parse_range(db, len, 0, 1000000, &v) != 0)
            return bad(out, "database must be a non-negative number");
        out->db = len > 0 ? (int)v : 0;
        p += len;
    }
    if (*p != '\0') return bad(out, "unexpected characters after host");
    return DLOCK_OK;
}

static dlock_status parse_redis(const char *s, dlock_url *out)
{
    out->kind = DLOCK_URL_TCP;
    out->port = 6379;
    /* The last '@' ends the userinfo: a raw '@' in a password still works. */
    const char *at = strrchr(s, '@');
    if (at) {
        const char *colon = memchr(s, ':', (size_t)(at - s));
        if (!colon) return bad(out, "credentials must be [user]:password@");
        if (colon > s) {
            out->user = percent_decode(s, (size_t)(colon - s));
            if (!out->user) return bad(out, "bad percent-escape in user");
        }
        if (at == colon + 1) return bad(out, "empty password");
        out->password = percent_decode(colon + 1, (size_t)(at - colon - 1));
        if (!out->password) return bad(out, "bad percent-escape in password");
        s = at + 1;
    }
    return parse_hostpart(s, out);
}

static dlock_status parse_unix(const char *s, dlock_url *out)
{
    out->kind = DLOCK_URL_UNIX;
    if (*s != '/') return bad(out, "unix socket path must be absolute (unix:///path)");
    const char *q = strchr(s, '?');
    size_t plen = q ? (size_t)(q - s) : strlen(s);
    if (plen < 2) return bad(out, "missing socket path");
    out->path = strndup(s, plen);
    if (!out->path) return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    if (q) {
        long v;
        if (strncmp(q + 1, "db=", 3) != 0) return bad(out, "only ?db=N is understood");
        if (parse_range(q + 4, strlen(q + 4), 0, 1000000, &v) != 0)
            return bad(out, "database must be a non-negative number");
        out->db = (int)v;
    }
    return DLOCK_OK;
}

dlock_status dlock_url_parse(const char *url, dlock_url *out)
{
    if (!out) return dlock_fail(DLOCK_ERR_INVALID, "no output struct");
    memset(out, 0, sizeof *out);
    if (!url || !*url) return dlock_fail(DLOCK_ERR_URL, "malformed URL: empty");
    size_t len = strnlen(url, URL_MAX + 1);
    if (len > URL_MAX) return dlock_fail(DLOCK_ERR_URL, "malformed URL: longer than %d bytes", URL_MAX);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)url[i] <= ' ' || url[i] == 0x7f)
            return dlock_fail(DLOCK_ERR_URL, "malformed URL: contains a space or control character");
    if (strncmp(url, "redis://", 8) == 0) return parse_redis(url + 8, out);
    if (strncmp(url, "unix://", 7) == 0) return parse_unix(url + 7, out);
    if (strncmp(url, "redis-sentinel://", 17) == 0 || strncmp(url, "redis-cluster://", 16) == 0)
        return dlock_fail(DLOCK_ERR_URL, "malformed URL: Sentinel and Cluster are not supported yet");
    if (strncmp(url, "rediss://", 9) == 0)
        return dlock_fail(DLOCK_ERR_URL, "malformed URL: TLS (rediss://) is not supported");
    return dlock_fail(DLOCK_ERR_URL, "malformed URL: must start with redis:// or unix://");
}

void dlock_url_free(dlock_url *url)
{
    if (!url) return;
    free(url->host);
    free(url->path);
    free(url->user);
    free(url->password);
    memset(url, 0, sizeof *url);
}
