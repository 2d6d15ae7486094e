/*
 * `seckill token`: print a bearer token for a user, signed with the
 * service's secret (service/auth.c), for scripts and the demo. It reads
 * the secret `serve` uses and never makes one (sk_secret_file says where).
 *
 *   seckill token [--secret-file FILE] [--ttl S] USER_ID
 *
 * Exit status: 0, 64 usage, 69 the secret file unusable, 70 internal.
 */
#include "tools.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/skutil.h"
#include "service/auth.h"

int sk_cmd_token(int argc, char **argv)
{
    static const struct option longs[] = {
        {"secret-file", required_argument, NULL, 'k'},
        {"ttl", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *secret_file = NULL;
    uint64_t ttl = 86400;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longs, NULL)) != -1) {
        switch (c) {
        case 'k': secret_file = optarg; break;
        case 't':
            if (sk_parse_u64(optarg, strlen(optarg), 10ULL * 365 * 86400, &ttl) != 0 || ttl == 0) {
                fprintf(stderr, "seckill: --ttl wants 1 to 315360000 seconds\n" SK_HELP_HINT);
                return EXIT_USAGE;
            }
            break;
        case 'h': sk_usage(stdout); return 0;
        default:
            sk_opt_error("token", c, argv);
            fputs(SK_HELP_HINT, stderr);
            return EXIT_USAGE;
        }
    }
    int64_t uid;
    if (optind != argc - 1 || sk_parse_i64(argv[optind], strlen(argv[optind]), INT64_MAX, &uid) != 0) {
        fprintf(stderr, "seckill: token wants one USER_ID, a decimal number (0 is the admin)\n" SK_HELP_HINT);
        return EXIT_USAGE;
    }
    unsigned char *secret;
    size_t len;
    int created;
    char err[512];
    if (sk_secret_load(sk_secret_file(secret_file), 0, &secret, &len, &created, err, sizeof err) != 0) {
        fprintf(stderr, "seckill: %s\n", err);
        return EXIT_UNAVAILABLE;
    }
    char tok[SK_TOKEN_MAX + 1];
    int rc = sk_token_make(secret, len, uid, sk_unix_now() + (int64_t)ttl, tok, sizeof tok);
    free(secret);
    if (rc != 0) {
        fprintf(stderr, "seckill: cannot make a token\n");
        return EXIT_SOFTWARE;
    }
    printf("%s\n", tok);
    return 0;
}
