/* The log and the access log; see log.h. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "skutil.h"

#define LINE_MAX_BYTES 4096

static atomic_int g_level = SK_LOG_INFO;
static atomic_int g_json = 0;
static atomic_int g_access_fd = -1;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

int sk_log_configure(const char *level, const char *format, char *err, size_t errlen)
{
    int lv = -1;
    if (level) {
        for (int i = 0; i < 4; i++)
            if (strcasecmp(level, level_names[i]) == 0) lv = i;
        if (lv < 0) {
            snprintf(err, errlen, "--log-level is debug, info, warn or error");
            return -1;
        }
    }
    int json = -1;
    if (format) {
        if (strcmp(format, "text") == 0) json = 0;
        else if (strcmp(format, "json") == 0) json = 1;
        else {
            snprintf(err, errlen, "--log-format is text or json");
            return -1;
        }
    }
    if (lv >= 0) atomic_store(&g_level, lv);
    if (json >= 0) atomic_store(&g_json, json);
    return 0;
}

int sk_log_enabled(sk_log_level level)
{
    return (int)level >= atomic_load_explicit(&g_level, memory_order_relaxed);
}

/* One write() per line: lines of different threads never interleave, and
 * a line reaches a pipe or the journal whole. */
static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

/* RFC 3339 in UTC with milliseconds: sorts as text, means the same on
 * every machine of a fleet. */
static size_t timestamp(char *out, size_t cap)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    int k = snprintf(out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
    return n + (k > 0 ? (size_t)k : 0);
}

/* Append `s` as the inside of a JSON string; stops short of `cap`. */
static size_t json_escape(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    for (; *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n] = '\0';
    return n;
}

/* The message is formatted first, then wrapped in the chosen format. */
static void emit(sk_log_level level, const char *msg)
{
    char line[LINE_MAX_BYTES + 128];
    char ts[40];
    timestamp(ts, sizeof ts);
    size_t n;
    if (atomic_load_explicit(&g_json, memory_order_relaxed)) {
        n = (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"", ts, level_names[level]);
        n += json_escape(line + n, sizeof line - n - 3, msg);
        line[n++] = '"';
        line[n++] = '}';
    } else {
        n = (size_t)snprintf(line, sizeof line, "%s %-5s %s", ts, level_names[level], msg);
        if (n > sizeof line - 2) n = sizeof line - 2;
        while (n > 0 && line[n - 1] == '\n') n--;
    }
    line[n++] = '\n';
    write_all(2, line, n);
}

static void vlog(sk_log_level level, const char *suffix, const char *fmt, va_list ap)
{
    char msg[LINE_MAX_BYTES];
    int k = vsnprintf(msg, sizeof msg, fmt, ap);
    if (k < 0) return;
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n') msg[--n] = '\0';
    if (suffix) snprintf(msg + n, sizeof msg - n, "%s", suffix);
    emit(level, msg);
}

void sk_logv(sk_log_level level, const char *fmt, va_list ap)
{
    if (sk_log_enabled(level)) vlog(level, NULL, fmt, ap);
}

void sk_log(sk_log_level level, const char *fmt, ...)
{
    if (!sk_log_enabled(level)) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, NULL, fmt, ap);
    va_end(ap);
}

/* Why a count and not silence: "Redis down" at 20000 requests a second
 * must neither flood the log nor hide how often it happened. Whoever
 * moves next_ns forward writes the line and takes the count; the others
 * only add to it. */
void sk_log_limited(sk_log_limit *lim, sk_log_level level, const char *fmt, ...)
{
    if (!sk_log_enabled(level)) return;
    atomic_fetch_add(&lim->count, 1);
    long long now = sk_mono_ns();
    long long next = atomic_load(&lim->next_ns);
    if (now < next || !atomic_compare_exchange_strong(&lim->next_ns, &next, now + 1000000000LL)) return;
    long long count = atomic_exchange(&lim->count, 0);
    char suffix[80] = "";
    if (count > 1) snprintf(suffix, sizeof suffix, " (%lld times since the last report)", count);
    va_list ap;
    va_start(ap, fmt);
    vlog(level, suffix, fmt, ap);
    va_end(ap);
}

int sk_log_access_open(const char *path, char *err, size_t errlen)
{
    int fd = strcmp(path, "-") == 0 ? 1 : open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
        snprintf(err, errlen, "--access-log %s: %s", path, strerror(errno));
        return -1;
    }
    atomic_store(&g_access_fd, fd);
    return 0;
}

void sk_log_access_close(void)
{
    int fd = atomic_exchange(&g_access_fd, -1);
    if (fd > 2) close(fd);
}

int sk_log_access_on(void)
{
    return atomic_load_explicit(&g_access_fd, memory_order_relaxed) >= 0;
}

/* Text is the common log format's fields in its order (client, request
 * line, status, bytes) with an RFC 3339 time and the handling time in
 * seconds at the end; JSON names them. Paths are client input: escaped in
 * JSON, and in text with control characters and quotes replaced. */
void sk_log_access(const sk_access *a)
{
    int fd = atomic_load_explicit(&g_access_fd, memory_order_relaxed);
    if (fd < 0) return;
    char ts[40], path[1024], line[1600];
    timestamp(ts, sizeof ts);
    int n;
    if (atomic_load_explicit(&g_json, memory_order_relaxed)) {
        json_escape(path, sizeof path, a->path ? a->path : "");
        char method[64];
        json_escape(method, sizeof method, a->method ? a->method : "");
        n = snprintf(line, sizeof line,
                     "{\"ts\":\"%s\",\"remote\":\"%s\",\"method\":\"%s\",\"path\":\"%s\",\"version\":\"%s\","
                     "\"status\":%d,\"bytes\":%zu,\"duration_s\":%.6f}\n",
                     ts, a->remote ? a->remote : "-", method, path, a->version ? a->version : "", a->status, a->bytes,
                     (double)a->ns / 1e9);
    } else {
        snprintf(path, sizeof path, "%s", a->path ? a->path : "");
        for (char *p = path; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == '"' || *p == 0x7f) *p = '?';
        n = snprintf(line, sizeof line, "%s %s \"%s %s %s\" %d %zu %.6f\n", ts, a->remote ? a->remote : "-",
                     a->method ? a->method : "-", path, a->version ? a->version : "-", a->status, a->bytes,
                     (double)a->ns / 1e9);
    }
    if (n > 0) write_all(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* Copy s[0..n) into out, bounded. */
static size_t put_n(char *out, size_t cap, size_t at, const char *s, size_t n)
{
    if (at >= cap) return at;
    if (n > cap - 1 - at) n = cap - 1 - at;
    memcpy(out + at, s, n);
    out[at + n] = '\0';
    return at + n;
}

/* Why: the start-up line goes to logs that many people read; a password
 * in a URL must not. Both spellings libdlock and libpq take are masked.
 * The credentials end where each parser ends them: libpq at the first
 * '/', '?' or '#' after "://", libdlock at the last '@' of the whole URL
 * (its passwords may hold a raw '/', '?' or '#'). */
void sk_mask_url(const char *url, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = '\0';
    const char *p = url;
    const char *scheme = strstr(url, "://");
    if (scheme) {
        const char *auth = scheme + 3;
        const char *end = strncmp(url, "redis", 5) == 0 ? auth + strlen(auth) : auth + strcspn(auth, "/?#");
        const char *at = memrchr(auth, '@', (size_t)(end - auth));
        const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
        if (colon) {
            o = put_n(out, cap, o, url, (size_t)(colon + 1 - url));
            o = put_n(out, cap, o, "***", 3);
            p = at;
        }
    }
    /* password=VALUE, in a query string (&-separated) or a key=value
     * conninfo (space-separated). */
    for (;;) {
        const char *k = strstr(p, "password=");
        if (!k) break;
        o = put_n(out, cap, o, p, (size_t)(k + 9 - p));
        o = put_n(out, cap, o, "***", 3);
        p = k + 9 + strcspn(k + 9, "& ");
    }
    put_n(out, cap, o, p, strlen(p));
}
