/*
 * seckill: a flash-sale service on Redis and a database.
 *
 *   seckill serve [--listen HOST:PORT|unix:PATH] [--redis URL] [--db URL]
 *                 [--strategy redis|lock] [--secret-file FILE] [--threads N]
 *                 [--replica-acks N] [--log-level L] [--log-format F] [--access-log FILE|-]
 *                 [--max-connections N] [--max-connections-per-client N] [--idle-timeout S]
 *                 [--event-loop auto|poll|epoll]
 *                 [--redis-password-file FILE] [--db-password-file FILE]
 *   seckill token [--secret-file FILE] [--ttl S] USER_ID
 *   seckill load --url URL --voucher ID --users N --concurrency C [--attempts K]
 *                --secret-file FILE
 *   seckill verify --db URL [--redis URL] --voucher ID
 *
 * This file only dispatches: serve is the service (service/serve.c), the
 * others are tools (tools/); none of them calls back into it. Exit codes:
 * see sk_usage() (common/cli.c) and docs/seckill.1.
 */
#include <stdio.h>
#include <string.h>

#include "common/cli.h"
#include "dlock.h"
#include "service/serve.h"
#include "tools/tools.h"

/* Subcommand dispatch, git-style. */
int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "seckill: no command (serve, token, load or verify)\n" SK_HELP_HINT);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "serve")) return sk_cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "token")) return sk_cmd_token(argc - 1, argv + 1);
    if (!strcmp(cmd, "verify")) return sk_cmd_verify(argc - 1, argv + 1);
    if (!strcmp(cmd, "load")) return sk_cmd_load(argc - 1, argv + 1);
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        sk_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("seckill %s (libdlock %s)\n", DLOCK_VERSION, dlock_version());
        return 0;
    }
    fprintf(stderr, "seckill: unknown command \"%s\"\n" SK_HELP_HINT, cmd);
    return EXIT_USAGE;
}
