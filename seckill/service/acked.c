/* Commands followed by WAIT on the same connection; see acked.h. */
#include "acked.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#define ARGV_STACK 40

static __thread char last_error[320];

const char *sk_acked_error(void)
{
    return last_error[0] ? last_error : "no error";
}

void sk_lua_init(sk_lua *s, const char *text)
{
    unsigned char d[SHA_DIGEST_LENGTH];
    s->text = text;
    SHA1((const unsigned char *)text, strlen(text), d);
    for (int i = 0; i < SHA_DIGEST_LENGTH; i++) snprintf(s->sha + 2 * i, 3, "%02x", d[i]);
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

/* NOSCRIPT means nothing ran, so EVAL after it never runs a script twice. */
dlock_status sk_acked_eval(const sk_redis *r, const sk_lua *s, int nkeys, const char *const *keys, int nargs,
                           const char *const *args, redisReply **out, long long *acks)
{
    const char *stack[ARGV_STACK];
    int argc = 3 + nkeys + nargs;
    const char **argv = argc <= ARGV_STACK ? stack : malloc((size_t)argc * sizeof *argv);
    if (!argv) return DLOCK_ERR_NOMEM;
    char nk[16];
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = s->sha;
    argv[2] = nk;
    memcpy(argv + 3, keys, (size_t)nkeys * sizeof *keys);
    if (nargs) memcpy(argv + 3 + nkeys, args, (size_t)nargs * sizeof *args);
    dlock_status st = sk_acked_run(r, keys[0], argc, argv, NULL, out, acks);
    if (st == DLOCK_ERR_REDIS && strncmp((*out)->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(*out);
        argv[0] = "EVAL";
        argv[1] = s->text;
        st = sk_acked_run(r, keys[0], argc, argv, NULL, out, acks);
    }
    if (argv != stack) free(argv);
    return st;
}
