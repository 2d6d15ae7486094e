/* Commands followed by WAIT on the same connection; see acked.h. */
#include "acked.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __thread char last_error[320];

const char *sk_acked_error(void)
{
    return last_error[0] ? last_error : "no error";
}

void sk_acked_forget(const sk_redis *r, const char *key)
{
    dlock_redis_refresh(r->client, key);
}

/* DLOCK_REDIS_ONCE: an order or a claim whose reply was lost may have
 * taken effect; the caller answers 429 and a retry settles it. */
dlock_status sk_acked_run(const sk_redis *r, const char *key, int argc, const char *const *argv, const size_t *lens,
                          redisReply **out, long long *acks)
{
    dlock_status st = dlock_redis_command_acked(r->client, key, DLOCK_REDIS_ONCE, argc, argv, lens, r->replicas,
                                                r->replica_timeout_ms, out, acks);
    if (st != DLOCK_OK && !*out) snprintf(last_error, sizeof last_error, "%s", dlock_last_error());
    return st;
}
