/* `dlock latch`: a count-down latch from the shell. */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"

/* Coordinate processes through a count-down latch: one sets the count,
 * workers count down, others wait for zero. */
int cli_cmd_latch(const char *url, int argc, char **argv)
{
    static const struct option opts[] = {
        {"set", required_argument, NULL, 'S'}, {"count-down", no_argument, NULL, 'D'},
        {"await", no_argument, NULL, 'A'},     {"wait", required_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},      {NULL, 0, NULL, 0},
    };
    long count = 0, wait_ms = DLOCK_WAIT_FOREVER;
    int action = 0, actions = 0, waited = 0, opt;
    optind = 0;
    /* No '+': NAME may come before or after the action. */
    while ((opt = getopt_long(argc, argv, ":w:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'S':
            if (cli_parse_number(optarg, 1, MAX_MS, &count) != 0)
                return cli_usage_error(USAGE_LATCH, "bad count '%s': expected a number from 1 to %ld", optarg, MAX_MS);
            action = 'S';
            actions++;
            break;
        case 'D':
            action = 'D';
            actions++;
            break;
        case 'A':
            action = 'A';
            actions++;
            break;
        case 'w':
            if (cli_duration_arg(USAGE_LATCH, argv, 0, MAX_MS, &wait_ms) != 0) return EXIT_USAGE;
            waited = 1;
            break;
        case 'h': cli_print_sub_help(argv[0]); return cli_help_done();
        case ':': return cli_usage_error(USAGE_LATCH, "option %s needs a value", cli_bad_option(argv));
        default: return cli_unknown_option(USAGE_LATCH, cli_bad_option(argv));
        }
    }
    if (actions != 1) return cli_usage_error(USAGE_LATCH, "latch: give exactly one of --set, --count-down, --await");
    if (waited && action != 'A') return cli_usage_error(USAGE_LATCH, "latch: -w goes with --await");
    if (optind >= argc) return cli_usage_error(USAGE_LATCH, "latch: missing NAME");
    if (optind + 1 < argc) return cli_usage_error(USAGE_LATCH, "latch: too many arguments");
    const char *name = argv[optind];
    int rc = cli_check_name(USAGE_LATCH, name, 0);
    if (rc != 0) return rc;
    dlock_client *client = NULL;
    if ((rc = cli_open_client(url, NULL, &client)) != 0) return rc;
    dlock_latch *latch = NULL;
    dlock_status st = dlock_latch_new(client, name, &latch);
    if (st == DLOCK_OK) {
        if (action == 'S') {
            int was_set = 0;
            st = dlock_latch_set(latch, count, &was_set);
            if (st == DLOCK_OK && !was_set) {
                cli_errorf("latch '%s' is already set", name);
                rc = EXIT_NOT_HELD;
            }
        } else if (action == 'D') {
            long left = 0;
            st = dlock_latch_count_down(latch, &left);
            if (st == DLOCK_OK) printf("%ld\n", left);
        } else {
            st = dlock_latch_await(latch, wait_ms);
            if (st == DLOCK_ERR_TIMEOUT) {
                cli_errorf("latch '%s' did not reach zero within %ld ms", name, wait_ms);
                rc = EXIT_BUSY;
                st = DLOCK_OK;
            }
        }
    }
    if (st != DLOCK_OK) {
        cli_errorf("latch '%s': %s", name, dlock_last_error());
        rc = cli_exit_for(st);
    }
    if (fflush(stdout) != 0 && rc == 0) rc = EXIT_SOFTWARE;
    dlock_latch_free(latch);
    dlock_client_free(client);
    return rc;
}
