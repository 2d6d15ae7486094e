/*
 * log.h -- the service's log (standard error) and access log.
 *
 * Every line carries a UTC timestamp (RFC 3339, milliseconds) and a
 * level, as text ("2026-01-02T03:04:05.678Z warn message") or as one JSON
 * object per line ({"ts":..,"level":..,"msg":..}). Errors that can come
 * once per request (Redis down) go through SK_LOG_REPEATED: at most one
 * line per second from each place, with how many times it happened.
 */
#ifndef SECKILL_LOG_H
#define SECKILL_LOG_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sk_log_level { SK_LOG_DEBUG = 0, SK_LOG_INFO, SK_LOG_WARN, SK_LOG_ERROR } sk_log_level;

/* Set the level ("debug", "info", "warn", "error") and the format ("text",
 * "json"); NULL keeps the current one (info, text). 0, or -1 with err. */
int sk_log_configure(const char *level, const char *format, char *err, size_t errlen);

/* Whether a line of this level would be written. */
int sk_log_enabled(sk_log_level level);

void sk_log(sk_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sk_logv(sk_log_level level, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* One place's repeated error; zero-initialised (static storage). */
typedef struct sk_log_limit {
    atomic_llong next_ns; /* monotonic time before which lines are only counted */
    atomic_llong count;   /* occurrences not yet reported */
} sk_log_limit;

/* Log at most once per second per `lim`; the line says how many times it
 * happened since the last one written from there (this one included). */
void sk_log_limited(sk_log_limit *lim, sk_log_level level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define SK_LOG_REPEATED(level, ...)                                                                                    \
    do {                                                                                                               \
        static sk_log_limit sk_log_lim_;                                                                               \
        sk_log_limited(&sk_log_lim_, (level), __VA_ARGS__);                                                            \
    } while (0)

/* The access log: "-" is standard output. Off until opened. 0, or -1 with err. */
int sk_log_access_open(const char *path, char *err, size_t errlen);
void sk_log_access_close(void);
int sk_log_access_on(void);

/* One answered request. */
typedef struct sk_access {
    const char *remote; /* client address, or "-" */
    const char *method;
    const char *path;
    const char *version; /* "HTTP/1.1" */
    int status;
    size_t bytes; /* body bytes sent */
    int64_t ns;   /* handling time */
} sk_access;

void sk_log_access(const sk_access *a);

/* Copy `url` with any password replaced by "***": "scheme://user:pw@host",
 * "scheme://:pw@host" and libpq's "password=pw" (query or key=value). */
void sk_mask_url(const char *url, char *out, size_t cap);

#endif
