/*
 * auth.h -- bearer tokens: "UID.EXPIRY.MAC", MAC = hex HMAC-SHA256 of
 * "seckill-v1:UID.EXPIRY" under the server secret. User 0 is the admin.
 */
#ifndef SECKILL_AUTH_H
#define SECKILL_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define SK_SECRET_MIN 16 /* bytes: shorter secrets are refused */
#define SK_SECRET_MAX 4096
#define SK_TOKEN_MAX 128 /* a longer Authorization value is refused unread */

/* Write a token for `user_id` valid until `expiry` (Unix seconds) into
 * out[cap]. Returns 0, or -1 if it does not fit or the ids are negative. */
int sk_token_make(const unsigned char *secret, size_t secret_len, int64_t user_id, int64_t expiry, char *out,
                  size_t cap);

/* Why a token was refused: a client (or its operator) can tell a token
 * it mangled from one signed with another secret from one that ran out. */
#define SK_TOKEN_MALFORMED (-1)     /* not UID.EXPIRY.MAC as spelled, or not "Bearer TOKEN" */
#define SK_TOKEN_BAD_SIGNATURE (-2) /* well formed, but not signed with this secret */
#define SK_TOKEN_EXPIRED (-3)       /* signed with this secret, past its expiry */
#define SK_TOKEN_MISSING (-4)       /* no Authorization header */

/* Check a token at time `now`. Returns 0 and sets *user_id when it is
 * well formed, signed with this secret and not expired; otherwise one of
 * the SK_TOKEN_* reasons, judged in that order (expiry only once the
 * signature holds, so it says nothing about forged tokens). */
int sk_token_verify(const unsigned char *secret, size_t secret_len, const char *token, size_t len, int64_t now,
                    int64_t *user_id);

/* Check an Authorization header value ("Bearer TOKEN", scheme
 * case-insensitive): 0, or an SK_TOKEN_* reason. */
int sk_auth_header(const unsigned char *secret, size_t secret_len, const char *header, int64_t now, int64_t *user_id);

/* Where the secret is, the one resolution every subcommand shares:
 * `given` (--secret-file) when not NULL, else $SECKILL_SECRET_FILE, else
 * SK_DEFAULT_SECRET_FILE in the current directory. */
const char *sk_secret_file(const char *given);

/* Load the secret from `path`; with `create`, make it first with 32
 * random bytes (64 hex digits, mode 0600) when it does not exist. Only
 * `serve` creates: a token signed with a secret the server does not have
 * is refused by it, so the tools fail instead, saying where they looked.
 * A trailing newline is not part of the secret. Returns 0 and a
 * malloc'ed buffer; -1 with a message in err[errlen]. *created tells
 * whether this call made the file. */
int sk_secret_load(const char *path, int create, unsigned char **secret, size_t *len, int *created, char *err,
                   size_t errlen);

#endif
