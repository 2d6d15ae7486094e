/*
 * dlock -- a distributed flock(1) on Redis.
 *
 *   dlock [-u URL] lock [--fair|--read|--write|-s|-x] [-w WAIT] [-n] [-t TTL] [-E N] NAME [--] COMMAND [ARG...]
 *   dlock [-u URL] lock [OPTIONS] NAME -c 'SHELL COMMAND'
 *   dlock [-u URL] lock [OPTIONS] [--until-eof] NAME      (hold; print the token)
 *   dlock -u URL1 -u URL2 -u URL3 ... lock [-t TTL] [-w WAIT] NAME [--] COMMAND [ARG...]
 *   dlock [-u URL] semaphore -p PERMITS [-t TTL] [-w WAIT] NAME [--] COMMAND [ARG...]
 *   dlock [-u URL] semaphore NAME --set-permits N
 *   dlock [-u URL] rate -r RATE[/UNIT] [-b BURST] [-w WAIT] [-n] NAME [--] COMMAND [ARG...]
 *   dlock [-u URL] rate NAME --status [--json] [--subject S]
 *   dlock [-u URL] latch NAME --set N | --count-down | --await [-w WAIT]
 *   dlock [-u URL] id [-n COUNT] PREFIX | id --count PREFIX [--date YYYY-MM-DD]
 *   dlock [-u URL] status [--json] NAME
 *   dlock [-u URL] list [--json] [PATTERN]
 *   dlock [-u URL] unlock --force NAME
 *   dlock [-u URL] delete [--force] NAME
 *   dlock --help | --version | dlock SUBCOMMAND --help
 *
 * Every form takes --password-file FILE and --timeout DURATION before the
 * subcommand, as it takes -u (--url). The options follow flock(1) where it
 * has one: -w/--wait (seconds, or with a unit), -n/--nonblock, -s, -x,
 * -v, -E/--conflict-exit-code, -c; a busy lock prints nothing.
 *
 * This file is main(): the global options, then the subcommand. The rest
 * is one concern per file (see cli.h): cmd_hold.c runs COMMAND under a
 * lock or a semaphore permit, supervise.c watches it there, hold_kinds.c
 * has one row per kind of hold. Exit statuses follow sysexits(3) where
 * one fits, see docs/dlock.1.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pwfile.h"

/* The password of --password-file or DLOCK_PASSWORD, or NULL. */
static char *password;
/* --timeout, 0 when not given. */
static long timeout_ms;

/* The password of --password-file (`file`, may be NULL), else of
 * DLOCK_PASSWORD, into `password`; DLOCK_PASSWORD leaves the environment
 * COMMAND inherits. A bad file is a usage error, refused before anything
 * else is looked at. */
static int load_password(const char *file)
{
    char err[512];
    if (pwfile_or_env(file, "DLOCK_PASSWORD", &password, err, sizeof err) == 0) return 0;
    cli_errorf("%s", err);
    return EXIT_USAGE;
}

static int run_subcommand(const char *cmd, const char *url, const char *const *urls, size_t n_urls, int argc,
                          char **argv)
{
    if (strcmp(cmd, "lock") == 0) return cli_cmd_hold(urls, n_urls, 0, argc, argv);
    if (strcmp(cmd, "semaphore") == 0) return cli_cmd_hold(urls, n_urls, 1, argc, argv);
    if (n_urls > 1) return cli_general_usage_error("%s: only `lock` takes several -u URLs (RedLock)", cmd);
    if (strcmp(cmd, "latch") == 0) return cli_cmd_latch(url, argc, argv);
    if (strcmp(cmd, "rate") == 0) return cli_cmd_rate(url, argc, argv);
    if (strcmp(cmd, "id") == 0) return cli_cmd_id(url, argc, argv);
    if (strcmp(cmd, "status") == 0) return cli_cmd_status(url, argc, argv);
    if (strcmp(cmd, "unlock") == 0) return cli_cmd_unlock(url, argc, argv);
    if (strcmp(cmd, "list") == 0) return cli_cmd_list(url, argc, argv);
    if (strcmp(cmd, "delete") == 0) return cli_cmd_delete(url, argc, argv);
    return cli_general_usage_error("unknown command '%s'", cmd);
}

/* Global options, then hand the rest of argv to the subcommand. Parsing
 * stops at the subcommand ('+'), so its options are never taken as ours. */
int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"password-file", required_argument, NULL, 'P'},
        {"url", required_argument, NULL, 'u'},
        {"timeout", required_argument, NULL, 'T'},
        {NULL, 0, NULL, 0},
    };
    const char *url = getenv("DLOCK_URL");
    if (!url || !*url) url = DEFAULT_URL;
    const char *urls[MAX_URLS];
    size_t n_urls = 0;
    const char *password_file = NULL;

    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "+:u:hV", longopts, NULL)) != -1) {
        switch (opt) {
        case 'u':
            if (n_urls == MAX_URLS) return cli_general_usage_error("too many -u options (at most %d)", MAX_URLS);
            urls[n_urls++] = url = optarg;
            break;
        case 'h': cli_print_help(); return fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE;
        case 'V': printf("dlock %s\n", DLOCK_VERSION); return fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE;
        case 'P': password_file = optarg; break;
        case 'T':
            if (cli_parse_duration(optarg, 1, MAX_MS, &timeout_ms) != 0)
                return cli_general_usage_error("bad --timeout '%s': expected a duration from 1 to %ld ms (%s)", optarg,
                                               MAX_MS, DURATION_UNITS);
            break;
        case ':': return cli_general_usage_error("option %s needs a value", cli_bad_option(argv));
        default: return cli_general_usage_error("unknown option '%s'", cli_bad_option(argv));
        }
    }
    if (optind >= argc) return cli_general_usage_error("missing command");

    const char *cmd = argv[optind];
    int sub_argc = argc - optind;
    char **sub_argv = argv + optind;
    if (n_urls == 0) urls[n_urls++] = url;
    int rc = load_password(password_file);
    cli_set_client_globals(password, timeout_ms);
    if (rc == 0) rc = run_subcommand(cmd, url, urls, n_urls, sub_argc, sub_argv);
    pwfile_free(password);
    return rc;
}
