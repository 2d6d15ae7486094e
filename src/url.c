/*
 * Connection URLs:
 *
 *   redis://[[user]:password@]host[:port][/db]
 *   unix:///path/to.sock[?db=N]
 *   redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTER[?db=N]
 *   redis-cluster://[[user]:password@]host[:port][,host[:port]...]
 *
 * and the TLS forms rediss://, rediss-sentinel://, rediss-cluster://, each
 * with ?cacert=FILE&cert=FILE&key=FILE&sni=NAME&verify=no after the rest
 * (see dlock.h).
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
            if (i + 2 >= len) {
                free(out);
                return NULL;
            }
            hi = hexval(s[i + 1]);
            lo = hexval(s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                free(out);
                return NULL;
            }
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
    return dlock__fail(DLOCK_ERR_URL, "malformed URL: %s", what);
}

static int host_char_ok(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_';
}

/* Parse "host[:port]" from exactly [s, end) into *host and *port (which
 * keeps its default when no port is given). Shared by every TCP scheme so
 * that a list entry of a Sentinel or Cluster URL is held to the same rules
 * as a plain redis:// host. NULL on success, else what is wrong. */
static const char *parse_addr(const char *s, const char *end, char **host, int *port)
{
    const char *p = s, *h, *h_end;
    long v;
    if (p < end && *p == '[') {
        h = ++p;
        while (p < end && *p != ']') {
            if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.') return "bad IPv6 address";
            p++;
        }
        if (p == end) return "unterminated IPv6 address";
        h_end = p++;
    } else {
        h = p;
        while (p < end && host_char_ok(*p)) p++;
        h_end = p;
    }
    if (h_end == h) return "missing host";
    if (p < end && *p == ':') {
        p++;
        if (parse_range(p, (size_t)(end - p), 1, 65535, &v) != 0) return "port must be a number from 1 to 65535";
        *port = (int)v;
        p = end;
    }
    if (p != end) return "unexpected characters after host";
    *host = strndup(h, (size_t)(h_end - h));
    return *host ? NULL : "out of memory";
}

/* host[:port][/db] of a redis:// URL, userinfo already removed. */
static dlock_status parse_hostpart(const char *s, dlock_url *out)
{
    const char *slash = strchr(s, '/');
    const char *end = slash ? slash : s + strlen(s);
    const char *why = parse_addr(s, end, &out->host, &out->port);
    if (why) return bad(out, why);
    if (slash) {
        long v;
        size_t len = strlen(slash + 1);
        if (len > 0 && parse_range(slash + 1, len, 0, 1000000, &v) != 0)
            return bad(out, "database must be a non-negative number");
        out->db = len > 0 ? (int)v : 0;
    }
    return DLOCK_OK;
}

/* "[[user]:password@]" at the start of s: decoded into out; returns where
 * the rest begins, or NULL after bad() has filled in the error. The last
 * '@' ends the userinfo, so a raw '@' in a password still works. */
static const char *parse_userinfo(const char *s, const char *limit, dlock_url *out, dlock_status *st)
{
    const char *at = NULL;
    for (const char *p = s; p < limit; p++)
        if (*p == '@') at = p;
    if (!at) return s;
    const char *colon = memchr(s, ':', (size_t)(at - s));
    if (!colon) {
        *st = bad(out, "credentials must be [user]:password@");
        return NULL;
    }
    if (colon > s) {
        out->user = percent_decode(s, (size_t)(colon - s));
        if (!out->user) {
            *st = bad(out, "bad percent-escape in user");
            return NULL;
        }
    }
    if (at == colon + 1) {
        *st = bad(out, "empty password");
        return NULL;
    }
    out->password = percent_decode(colon + 1, (size_t)(at - colon - 1));
    if (!out->password) {
        *st = bad(out, "bad percent-escape in password");
        return NULL;
    }
    return at + 1;
}

static dlock_status parse_redis(const char *s, dlock_url *out)
{
    out->kind = DLOCK_URL_TCP;
    out->port = 6379;
    dlock_status st = DLOCK_OK;
    s = parse_userinfo(s, s + strlen(s), out, &st);
    if (!s) return st;
    return parse_hostpart(s, out);
}

/* The comma-separated address list of a Sentinel or Cluster URL, [s, end).
 * Duplicates are refused: they are always a typo, and a Sentinel listed
 * twice would count twice when we ask around. */
static dlock_status parse_addr_list(const char *s, const char *end, int default_port, dlock_url *out)
{
    size_t n = 1;
    for (const char *p = s; p < end; p++)
        if (*p == ',') n++;
    if (n > 64) return bad(out, "more than 64 addresses");
    out->addrs = calloc(n, sizeof *out->addrs);
    if (!out->addrs) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    for (const char *p = s; out->n_addrs < n; p++) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        dlock_url_addr *a = &out->addrs[out->n_addrs];
        a->port = default_port;
        const char *why = parse_addr(p, e, &a->host, &a->port);
        if (why) return bad(out, why);
        out->n_addrs++;
        for (size_t i = 0; i + 1 < out->n_addrs; i++)
            if (out->addrs[i].port == a->port && strcmp(out->addrs[i].host, a->host) == 0)
                return bad(out, "address listed twice");
        p = e;
    }
    out->host = strdup(out->addrs[0].host);
    if (!out->host) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    out->port = out->addrs[0].port;
    return DLOCK_OK;
}

/* The "?db=N" that may end a unix:// or Sentinel URL, from the '?'. */
static dlock_status parse_db_query(const char *q, dlock_url *out)
{
    long v;
    if (strncmp(q + 1, "db=", 3) != 0) return bad(out, "only ?db=N is understood");
    if (parse_range(q + 4, strlen(q + 4), 0, 1000000, &v) != 0)
        return bad(out, "database must be a non-negative number");
    out->db = (int)v;
    return DLOCK_OK;
}

/* [[user]:password@]host[:port][,...]/MASTER[?db=N] */
static dlock_status parse_sentinel(const char *s, dlock_url *out)
{
    out->kind = DLOCK_URL_SENTINEL;
    dlock_status st = DLOCK_OK;
    /* The master name and ?db= cannot hold '@', so the last '@' still ends
     * the credentials, and a '/' in a password does not end the list. */
    s = parse_userinfo(s, s + strlen(s), out, &st);
    if (!s) return st;
    const char *slash = strchr(s, '/');
    if (!slash) return bad(out, "Sentinel URL needs /MASTER_NAME after the addresses");
    if ((st = parse_addr_list(s, slash, 26379, out)) != DLOCK_OK) return st;
    const char *name = slash + 1, *q = strchr(name, '?');
    size_t len = q ? (size_t)(q - name) : strlen(name);
    if (len == 0) return bad(out, "missing master name");
    if (len > 128) return bad(out, "master name longer than 128 bytes");
    for (size_t i = 0; i < len; i++)
        if (!host_char_ok(name[i])) return bad(out, "master name may hold only letters, digits, '.', '-' and '_'");
    out->master = strndup(name, len);
    if (!out->master) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    return q ? parse_db_query(q, out) : DLOCK_OK;
}

/* [[user]:password@]host[:port][,...]; a cluster has only database 0. */
static dlock_status parse_cluster(const char *s, dlock_url *out)
{
    out->kind = DLOCK_URL_CLUSTER;
    dlock_status st = DLOCK_OK;
    const char *end = s + strlen(s);
    s = parse_userinfo(s, end, out, &st);
    if (!s) return st;
    const char *slash = strchr(s, '/');
    if (slash && slash[1] != '\0') return bad(out, "Redis Cluster has no databases but 0: nothing may follow '/'");
    return parse_addr_list(s, slash ? slash : end, 6379, out);
}

static dlock_status parse_unix(const char *s, dlock_url *out)
{
    out->kind = DLOCK_URL_UNIX;
    if (*s != '/') return bad(out, "unix socket path must be absolute (unix:///path)");
    const char *q = strchr(s, '?');
    size_t plen = q ? (size_t)(q - s) : strlen(s);
    if (plen < 2) return bad(out, "missing socket path");
    out->path = strndup(s, plen);
    if (!out->path) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    return q ? parse_db_query(q, out) : DLOCK_OK;
}

/* One name=value of a TLS URL's query: *field gets the decoded value. */
static dlock_status set_param(dlock_url *out, char **field, const char *value, size_t len, const char *name)
{
    if (*field) return bad(out, name);
    if (len == 0) return bad(out, "empty TLS parameter value");
    *field = percent_decode(value, len);
    return *field ? DLOCK_OK : bad(out, "bad percent-escape in a TLS parameter");
}

/* The query of a TLS URL, after the '?': cacert, cert, key, sni, verify
 * and, where the scheme has databases there, db. Unknown names are
 * refused, as every other part of a URL is: a misspelt cacert must not
 * fall back to the system's store. */
static dlock_status parse_tls_query(const char *q, int db_ok, dlock_url *out)
{
    while (*q) {
        const char *amp = strchr(q, '&'), *end = amp ? amp : q + strlen(q);
        const char *eq = memchr(q, '=', (size_t)(end - q));
        if (!eq) return bad(out, "TLS parameters are name=value, joined by '&'");
        size_t nlen = (size_t)(eq - q), vlen = (size_t)(end - eq - 1);
        const char *v = eq + 1;
        dlock_status st = DLOCK_OK;
        long n;
        if (nlen == 6 && !strncmp(q, "cacert", 6)) st = set_param(out, &out->tls_cacert, v, vlen, "cacert given twice");
        else if (nlen == 4 && !strncmp(q, "cert", 4)) st = set_param(out, &out->tls_cert, v, vlen, "cert given twice");
        else if (nlen == 3 && !strncmp(q, "key", 3)) st = set_param(out, &out->tls_key, v, vlen, "key given twice");
        else if (nlen == 3 && !strncmp(q, "sni", 3)) st = set_param(out, &out->tls_sni, v, vlen, "sni given twice");
        else if (nlen == 6 && !strncmp(q, "verify", 6)) {
            if (vlen == 2 && !strncmp(v, "no", 2)) out->tls_verify = 0;
            else if (vlen == 3 && !strncmp(v, "yes", 3)) out->tls_verify = 1;
            else return bad(out, "verify must be yes or no");
        } else if (nlen == 2 && !strncmp(q, "db", 2) && db_ok) {
            if (parse_range(v, vlen, 0, 1000000, &n) != 0) return bad(out, "database must be a non-negative number");
            out->db = (int)n;
        } else {
            return bad(out, "unknown TLS parameter (cacert, cert, key, sni and verify are understood)");
        }
        if (st != DLOCK_OK) return st;
        q = amp ? amp + 1 : end;
    }
    if (!out->tls_cert != !out->tls_key) return bad(out, "cert and key go together");
    return DLOCK_OK;
}

/* rediss://, rediss-sentinel://, rediss-cluster://: the plain form's
 * parser on the part before the query, then the query. The query starts
 * at the first '?', so a '@' in a file name does not end the credentials. */
static dlock_status parse_tls(const char *rest, dlock_status (*plain)(const char *, dlock_url *), int db_ok,
                              dlock_url *out)
{
    const char *q = strchr(rest, '?');
    char *body = q ? strndup(rest, (size_t)(q - rest)) : strdup(rest);
    if (!body) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock_status st = plain(body, out);
    free(body);
    if (st != DLOCK_OK) return st;
    out->tls = 1;
    out->tls_verify = 1;
    return q ? parse_tls_query(q + 1, db_ok, out) : DLOCK_OK;
}

dlock_status dlock_url_parse(const char *url, dlock_url *out)
{
    if (!out) return dlock__fail(DLOCK_ERR_INVALID, "no output struct");
    memset(out, 0, sizeof *out);
    if (!url || !*url) return dlock__fail(DLOCK_ERR_URL, "malformed URL: empty");
    size_t len = strnlen(url, URL_MAX + 1);
    if (len > URL_MAX) return dlock__fail(DLOCK_ERR_URL, "malformed URL: longer than %d bytes", URL_MAX);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)url[i] <= ' ' || url[i] == 0x7f)
            return dlock__fail(DLOCK_ERR_URL, "malformed URL: contains a space or control character");
    if (strncmp(url, "redis://", 8) == 0) return parse_redis(url + 8, out);
    if (strncmp(url, "unix://", 7) == 0) return parse_unix(url + 7, out);
    if (strncmp(url, "redis-sentinel://", 17) == 0) return parse_sentinel(url + 17, out);
    if (strncmp(url, "redis-cluster://", 16) == 0) return parse_cluster(url + 16, out);
    if (strncmp(url, "rediss://", 9) == 0) return parse_tls(url + 9, parse_redis, 0, out);
    if (strncmp(url, "rediss-sentinel://", 18) == 0) return parse_tls(url + 18, parse_sentinel, 1, out);
    if (strncmp(url, "rediss-cluster://", 17) == 0) return parse_tls(url + 17, parse_cluster, 0, out);
    return dlock__fail(DLOCK_ERR_URL, "malformed URL: must start with redis://, rediss://, unix://, "
                                      "redis[s]-sentinel:// or redis[s]-cluster://");
}

void dlock_url_free(dlock_url *url)
{
    if (!url) return;
    free(url->host);
    free(url->path);
    free(url->user);
    free(url->password);
    free(url->master);
    free(url->tls_cacert);
    free(url->tls_cert);
    free(url->tls_key);
    free(url->tls_sni);
    for (size_t i = 0; i < url->n_addrs; i++) free(url->addrs[i].host);
    free(url->addrs);
    memset(url, 0, sizeof *url);
}
