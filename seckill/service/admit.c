/* serve's admission limits; see admit.h and docs/design/seckill.md. */
#include "admit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* A whole decimal number from 1 to hi at *p, advancing *p. */
static int number(const char **p, long hi, long *out)
{
    if (**p < '0' || **p > '9') return -1;
    errno = 0;
    char *end;
    long v = strtol(*p, &end, 10);
    if (errno || v < 1 || v > hi) return -1;
    *p = end;
    *out = v;
    return 0;
}

/* The unit after '/': an optional count and ms, s, m, h or d. */
static int unit(const char **p, long *interval_ms)
{
    static const struct {
        const char *name;
        long ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    long n = 1;
    if (**p >= '0' && **p <= '9' && number(p, DLOCK_RATE_INTERVAL_MAX_MS, &n) != 0) return -1;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        size_t len = strlen(units[i].name);
        if (strncmp(*p, units[i].name, len) != 0 || ((*p)[len] != '\0' && (*p)[len] != ':')) continue;
        if (n > DLOCK_RATE_INTERVAL_MAX_MS / units[i].ms) return -1;
        *interval_ms = n * units[i].ms;
        *p += len;
        return 0;
    }
    return -1;
}

/* Everything is checked here, the library's bounds included, so that a
 * bad flag is a usage error (64) before anything starts, not a failure to
 * open the limit (69) after Redis is up. */
int sk_rate_parse(const char *spec, dlock_rate_options *o, char *why, size_t cap)
{
    memset(o, 0, sizeof *o);
    const char *p = spec;
    o->interval_ms = 1000;
    if (number(&p, 2147483647L, &o->rate) != 0) {
        snprintf(why, cap, "RATE must be a whole number from 1 to 2147483647");
        return -1;
    }
    if (*p == '/') {
        p++;
        if (unit(&p, &o->interval_ms) != 0) {
            snprintf(why, cap,
                     "UNIT must be ms, s, m, h or d, optionally after a count (500ms, 2s), "
                     "at most 2147483647 ms");
            return -1;
        }
    }
    o->burst = o->rate;
    if (*p == ':') {
        p++;
        if (number(&p, 2147483647L, &o->burst) != 0) {
            snprintf(why, cap, "BURST must be a whole number from 1 to 2147483647");
            return -1;
        }
    }
    if (*p != '\0') {
        snprintf(why, cap, "unexpected \"%s\"", p);
        return -1;
    }
    if ((long long)o->burst * o->interval_ms > DLOCK_RATE_SPAN_MAX) {
        snprintf(why, cap, "BURST times the interval in ms may be at most 4000000000000");
        return -1;
    }
    o->change = 1;
    return 0;
}

int sk_admit_open(sk_admit *a, dlock_client *client, const dlock_rate_options *user, const dlock_rate_options *total,
                  char *err, size_t cap)
{
    memset(a, 0, sizeof *a);
    if ((user && dlock_rate_new(client, SK_RATE_USER_NAME, user, &a->user) != DLOCK_OK) ||
        (total && dlock_rate_new(client, SK_RATE_TOTAL_NAME, total, &a->total) != DLOCK_OK)) {
        snprintf(err, cap, "cannot open the rate limits: %s", dlock_last_error());
        sk_admit_close(a);
        return -1;
    }
    return 0;
}

void sk_admit_close(sk_admit *a)
{
    if (a->user) dlock_rate_free(a->user);
    if (a->total) dlock_rate_free(a->total);
    a->user = a->total = NULL;
}

/* One decision on one limit: SK_OK, SK_BUSY with *why filled, or
 * SK_UNAVAILABLE when Redis did not decide (the order would not get
 * through it either). */
static sk_result decide(dlock_rate *r, const char *subject, const char *scope, sk_refusal *why)
{
    dlock_rate_result res;
    dlock_status st = dlock_rate_try(r, subject, 1, &res);
    if (st == DLOCK_OK) return SK_OK;
    if (st == DLOCK_ERR_TIMEOUT) {
        why->scope = scope;
        why->retry_after_ms = res.retry_after_ms > 0 ? res.retry_after_ms : 1;
        return SK_BUSY;
    }
    sk_log(SK_LOG_WARN, "rate limit (%s) not decided: %s", scope, dlock_last_error());
    return SK_UNAVAILABLE;
}

/*
 * The user's limit first: a user over its own rate is refused before it
 * takes a permit of the overall limit, so one client hammering cannot
 * use up the sale's admissions for everyone else. The reverse cost is
 * smaller: a user refused by the overall limit has spent one of its own
 * permits, which only slows a client that retries at once.
 */
sk_result sk_admit_check(void *ctx, int64_t user_id, sk_refusal *why)
{
    sk_admit *a = ctx;
    if (a->user) {
        char subject[24];
        snprintf(subject, sizeof subject, "%lld", (long long)user_id);
        sk_result r = decide(a->user, subject, "user", why);
        if (r != SK_OK) return r;
    }
    return a->total ? decide(a->total, NULL, "total", why) : SK_OK;
}
