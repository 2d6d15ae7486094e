/* The usage text and option errors of every subcommand; see cli.h. */
#include "cli.h"

#include <getopt.h>
#include <string.h>

/* One usage text for every subcommand: errors and --help print the same. */
void sk_usage(FILE *f)
{
    fprintf(f,
            "usage: seckill serve [--listen HOST:PORT|unix:PATH] [--redis URL] [--db URL]\n"
            "                     [--strategy redis|lock] [--secret-file FILE] [--threads N]\n"
            "                     [--replica-acks N] [--log-level debug|info|warn|error]\n"
            "                     [--log-format text|json] [--access-log FILE|-]\n"
            "                     [--max-connections N] [--max-connections-per-client N]\n"
            "                     [--idle-timeout S] [--event-loop auto|poll|epoll]\n"
            "                     [--redis-password-file FILE] [--db-password-file FILE]\n"
            "                     [--order-timeout MS] [--rate-per-user RATE[/UNIT][:BURST]]\n"
            "                     [--rate-total RATE[/UNIT][:BURST]]\n"
            "       seckill token [--secret-file FILE] [--ttl S] USER_ID\n"
            "       seckill load --url URL --voucher ID --users N --concurrency C [--attempts K]\n"
            "                    [--secret-file FILE] [--stock S] [--threads T] [--csv FILE]\n"
            "       seckill verify --db URL [--redis URL] --voucher ID [--voucher ID...] [--wait S]\n"
            "                      [--redis-password-file FILE] [--db-password-file FILE]\n"
            "       seckill --help | --version\n"
            "\n"
            "serve   run the HTTP API (default %s, strategy redis). --redis takes redis://,\n"
            "        unix://, redis-sentinel://HOST:PORT[,...]/MASTER or redis-cluster://HOST:PORT[,...];\n"
            "        without it a private redis-server is started on a unix socket and stopped at\n"
            "        exit. Without --db the SQLite file %s is used. --db takes sqlite://PATH, a\n"
            "        file path, or postgres://USER@HOST/DB (PostgreSQL, for several instances).\n"
            "        --replica-acks N (redis strategy): answer 201 only once N replicas have the\n"
            "        order, and persist only orders N replicas have (WAIT), so a failover loses\n"
            "        no acknowledged order. Logs go to stderr (--log-level, default info;\n"
            "        --log-format text or json); --access-log writes one line per request.\n"
            "        Connections: at most 4096 (--max-connections), 1024 per client address\n"
            "        (--max-connections-per-client, 0 for none), closed after 30 s idle\n"
            "        (--idle-timeout, 0 for never). --event-loop auto (the default) takes poll\n"
            "        when --max-connections is at most 128 per thread, else epoll. --listen\n"
            "        unix:PATH serves on a unix socket, for a proxy on the same host. An order\n"
            "        Redis has not answered within --order-timeout MS (default 1000) is\n"
            "        answered 429 busy. --rate-per-user and --rate-total (off by default) admit\n"
            "        at most RATE orders per UNIT (ms, s, m, h, d, optionally after a count:\n"
            "        500ms; default s), BURST at once (default RATE), per user and overall; an\n"
            "        order over either is answered 429 rate_limited with Retry-After and never\n"
            "        reaches the stock. GET /openapi.json describes the API.\n"
            "        serve and verify: --redis and --db default to $SECKILL_REDIS_URL and\n"
            "        $SECKILL_DB_URL; a password file's first line (mode 0600 or 0400), else\n"
            "        $SECKILL_REDIS_PASSWORD / $SECKILL_DB_PASSWORD, replaces the URL's password.\n"
            "token   print a bearer token for USER_ID (0 is the admin), valid --ttl seconds\n"
            "        (default 86400), signed with the secret in --secret-file (default\n"
            "        $SECKILL_SECRET_FILE, else %s; the same for every subcommand; only\n"
            "        serve creates it, token and load fail saying where they looked).\n"
            "load    N users each send K orders (default 1) for voucher ID over C keep-alive\n"
            "        connections, all released at once; --stock S creates a voucher with S units\n"
            "        instead of --voucher. Prints a table and one JSON line (requests/s,\n"
            "        outcomes, p50/p99/p999 latency); a progress bar when stderr is a terminal;\n"
            "        --url http://HOST:PORT or unix:PATH;\n"
            "        --csv FILE: per 100 ms, requests, answers by status, p50/p99 (bench/plot.sh).\n"
            "verify  check a voucher: orders <= initial stock, one order per user, stock + orders\n"
            "        = initial stock; with --redis, once the order stream is drained (waiting up\n"
            "        to --wait seconds, default 10): Redis stock and buyers equal the database's.\n"
            "\n"
            "exit status: 0 success; 1 a check failed (verify: an invariant is broken; load: more\n"
            "  orders than stock or users, stock not adding up, 5xx answers, transport errors or\n"
            "  unexpected 4xx); 64 usage error; 69 Redis, the database, the server, the listen\n"
            "  address or the secret file could not be used; 70 internal error; 75 verify: the\n"
            "  order stream did not drain within --wait, so Redis was not compared.\n"
            "See seckill(1) for details and the environment variables.\n",
            DEFAULT_LISTEN, DEFAULT_DB, SK_DEFAULT_SECRET_FILE);
}

/* getopt's own messages name the program by argv[0], which is the
 * subcommand here ("serve: unrecognized option"); ours name both. */
void sk_opt_error(const char *cmd, int c, char *const *argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if (c == ':') fprintf(stderr, "seckill %s: option %s needs a value\n", cmd, arg);
    else if (optopt && strncmp(arg, "--", 2) != 0) fprintf(stderr, "seckill %s: unknown option -%c\n", cmd, optopt);
    else fprintf(stderr, "seckill %s: unknown option %s\n", cmd, arg);
}
