/* Where seckill's Redis and database are and how it logs in; see creds.h. */
#include "creds.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "pwfile.h"

const char *sk_env_url(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int sk_passwords_load(const char *redis_file, const char *db_file, sk_passwords *out, char *err, size_t errlen)
{
    *out = (sk_passwords){NULL, NULL};
    if (pwfile_or_env(redis_file, "SECKILL_REDIS_PASSWORD", &out->redis, err, errlen) == 0 &&
        pwfile_or_env(db_file, "SECKILL_DB_PASSWORD", &out->db, err, errlen) == 0)
        return 0;
    sk_passwords_free(out);
    return -1;
}

void sk_passwords_free(sk_passwords *p)
{
    pwfile_free(p->redis);
    pwfile_free(p->db);
    *p = (sk_passwords){NULL, NULL};
}

int sk_redis_connect(const char *url, const char *password, int command_timeout_ms, dlock_client **out, char *err,
                     size_t errlen)
{
    dlock_options o = {0};
    o.password = password;
    o.command_timeout_ms = command_timeout_ms;
    /* The service's HTTP threads keep the CPUs busy: a reader that polls
     * for replies takes their CPU and reads smaller batches of them (the
     * open sale ran faster without, measured; CHANGELOG.md). */
    o.busy_poll_us = -1;
    if (dlock_client_new(url, &o, out) == DLOCK_OK) return 0;
    char masked[512];
    sk_mask_url(url, masked, sizeof masked);
    snprintf(err, errlen, "redis %s: %s", masked, dlock_last_error());
    return -1;
}
