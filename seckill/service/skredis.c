/* The service's Redis access over the library's client; see skredis.h. */
#include "skredis.h"

#include <stdarg.h>
#include <stdio.h>

#define CMD_WORDS 16

/* The deployment is fixed by the URL: parse it once here rather than ask
 * the client, whose topology is private. */
int sk_redis_init(sk_redis *r, dlock_client *client, const char *url, int replicas, int replica_timeout_ms, char *err,
                  size_t errlen)
{
    dlock_url u;
    if (dlock_url_parse(url, &u) != DLOCK_OK) {
        snprintf(err, errlen, "%s", dlock_last_error());
        return -1;
    }
    /* A WAIT must end well inside the connection's command timeout (the
     * library's default, 5 s), or its reply would count as lost. */
    if (replica_timeout_ms <= 0) replica_timeout_ms = 100;
    if (replica_timeout_ms > 4000) replica_timeout_ms = 4000;
    *r = (sk_redis){client, u.kind == DLOCK_URL_CLUSTER, replicas, replica_timeout_ms};
    dlock_url_free(&u);
    return 0;
}

dlock_status sk_redis_argv(const sk_redis *r, const char *key, int flags, int argc, const char *const *argv,
                           const size_t *lens, redisReply **out)
{
    return dlock_redis_command(r->client, key, flags, argc, argv, lens, out);
}

/* Most of the service's commands are a few fixed words and key names;
 * spelling them as arguments keeps each call site one line. */
dlock_status sk_redis_cmd(const sk_redis *r, const char *key, int flags, redisReply **out, ...)
{
    const char *argv[CMD_WORDS + 1];
    int argc = 0;
    va_list ap;
    va_start(ap, out);
    for (const char *w; argc <= CMD_WORDS && (w = va_arg(ap, const char *)) != NULL;) argv[argc++] = w;
    va_end(ap);
    if (argc > CMD_WORDS) {
        *out = NULL;
        return DLOCK_ERR_INVALID; /* a programming error: use sk_redis_argv */
    }
    return dlock_redis_command(r->client, key, flags, argc, argv, NULL, out);
}
