/*
 * admit.h -- serve's admission limits (--rate-per-user, --rate-total):
 * two dlock_rate limits checked before an order reaches its strategy, so
 * that a user or a crowd over its rate is refused without touching the
 * stock. The parsing of RATE[/UNIT][:BURST] is here too, so that serve
 * checks the flags before anything starts.
 */
#ifndef SECKILL_ADMIT_H
#define SECKILL_ADMIT_H

#include <stddef.h>

#include "common/seckill.h"
#include "dlock.h"

/* The limits' names in Redis (their keys are dlock:{NAME}:rate...). */
#define SK_RATE_USER_NAME "seckill-rate-user"
#define SK_RATE_TOTAL_NAME "seckill-rate-total"

/* Parse "RATE[/UNIT][:BURST]" (UNIT: [N]ms, [N]s, [N]m, [N]h or [N]d,
 * default s; BURST default RATE) into *o. 0, or -1 with why[] saying the
 * rule broken. */
int sk_rate_parse(const char *spec, dlock_rate_options *o, char *why, size_t cap);

typedef struct sk_admit {
    dlock_rate *user;  /* NULL: no per-user limit */
    dlock_rate *total; /* NULL: no overall limit */
} sk_admit;

/* Open the limits given (NULL: that one off), replacing settings another
 * instance stored (the last one started wins). 0, or -1 with err. */
int sk_admit_open(sk_admit *a, dlock_client *client, const dlock_rate_options *user, const dlock_rate_options *total,
                  char *err, size_t cap);
void sk_admit_close(sk_admit *a);

/* sk_app.admit: the per-user limit first, then the overall one, one
 * decision each (see seckill.h). */
sk_result sk_admit_check(void *ctx, int64_t user_id, sk_refusal *why);

#endif
