/*
 * creds.h -- where `seckill serve` and `seckill verify` find Redis and the
 * database, and what they log in with, without a password on the command
 * line: the URLs of --redis and --db default to SECKILL_REDIS_URL and
 * SECKILL_DB_URL, and the passwords of --redis-password-file and
 * --db-password-file (else SECKILL_REDIS_PASSWORD, SECKILL_DB_PASSWORD)
 * replace the URLs' own. Passwords stay out of every URL seckill builds,
 * prints or logs.
 */
#ifndef SECKILL_CREDS_H
#define SECKILL_CREDS_H

#include <stddef.h>

#include "dlock.h"

/* The value of environment variable `name`, or NULL when unset or empty:
 * the default of a URL flag. */
const char *sk_env_url(const char *name);

typedef struct sk_passwords {
    char *redis; /* NULL: the Redis URL's own, if any */
    char *db;    /* NULL: the database URL's own, if any */
} sk_passwords;

/* Read the password files (either may be NULL), else the variables, which
 * leave the environment either way (a private redis-server started by
 * serve inherits it). 0, or -1 with the reason in err: a usage error. */
int sk_passwords_load(const char *redis_file, const char *db_file, sk_passwords *out, char *err, size_t errlen);

/* Wipe and free them. */
void sk_passwords_free(sk_passwords *p);

/* dlock_client_new(url) logging in with `password` (NULL: the URL's),
 * with the library's command timeout in ms (0: its default).
 * 0, or -1 with "redis URL: why" in err, the URL's password masked. */
int sk_redis_connect(const char *url, const char *password, int command_timeout_ms, dlock_client **out, char *err,
                     size_t errlen);

#endif
