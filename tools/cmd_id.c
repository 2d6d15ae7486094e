/* `dlock id`: global IDs, and how many a day handed out. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Print how many IDs PREFIX handed out on one UTC day (`date`, or today
 * when NULL): the day's sequence starts above a floor and cannot say. */
static int print_id_count(const char *url, const char *prefix, const char *date)
{
    dlock_client *client = NULL;
    int rc = cli_open_client(url, NULL, &client);
    if (rc != 0) return rc;
    uint64_t n = 0;
    dlock_status st = dlock_id_count(client, prefix, date, &n);
    if (st != DLOCK_OK) {
        cli_errorf("cannot count IDs of '%s': %s", prefix, dlock_last_error());
        rc = cli_exit_for(st);
    } else {
        printf("%llu\n", (unsigned long long)n);
        if (fflush(stdout) != 0) rc = EXIT_SOFTWARE;
    }
    dlock_client_free(client);
    return rc;
}

/* Print COUNT global IDs, one per line, for scripts that need unique keys.
 * One call reserves the whole batch, so any COUNT costs one round trip.
 * With --count, print how many a day handed out instead. */
int cli_cmd_id(const char *url, int argc, char **argv)
{
    static const struct option opts[] = {
        {"count", no_argument, NULL, 'C'},
        {"date", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long count = 1;
    int opt, counting = 0, numbered = 0;
    const char *date = NULL;
    optind = 0;
    /* No '+': --date may follow PREFIX, as in `id --count order --date D`. */
    while ((opt = getopt_long(argc, argv, ":n:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'n':
            if (cli_parse_number(optarg, 1, MAX_ID_COUNT, &count) != 0)
                return cli_usage_error(USAGE_ID, "bad COUNT '%s': expected a number from 1 to %ld", optarg,
                                       MAX_ID_COUNT);
            numbered = 1;
            break;
        case 'C': counting = 1; break;
        case 'D':
            if (dlock_check_id_date(optarg) != DLOCK_OK)
                return cli_usage_error(USAGE_ID, "bad --date '%s': expected a calendar day as YYYY-MM-DD", optarg);
            date = optarg;
            break;
        case 'h': cli_print_sub_help(argv[0]); return cli_help_done();
        case ':': return cli_usage_error(USAGE_ID, "option %s needs a value", cli_bad_option(argv));
        default: return cli_unknown_option(USAGE_ID, cli_bad_option(argv));
        }
    }
    if (counting && numbered) return cli_usage_error(USAGE_ID, "id: -n makes IDs, --count counts them: not both");
    if (date && !counting) return cli_usage_error(USAGE_ID, "id: --date goes with --count");
    if (optind >= argc) return cli_usage_error(USAGE_ID, "id: missing PREFIX");
    if (optind + 1 < argc) return cli_usage_error(USAGE_ID, "id: too many arguments");
    const char *prefix = argv[optind];
    int bad = cli_check_name(USAGE_ID, prefix, 1);
    if (bad) return bad;
    if (counting) return print_id_count(url, prefix, date);

    uint64_t *ids = calloc((size_t)count, sizeof *ids);
    if (!ids) {
        cli_errorf("out of memory");
        return EXIT_SOFTWARE;
    }
    dlock_client *client = NULL;
    int rc = cli_open_client(url, NULL, &client);
    if (rc == 0) {
        dlock_status st = dlock_id_next(client, prefix, ids, (size_t)count);
        if (st != DLOCK_OK) {
            cli_errorf("cannot make IDs for '%s': %s", prefix, dlock_last_error());
            rc = cli_exit_for(st);
        } else {
            for (long i = 0; i < count; i++) printf("%llu\n", (unsigned long long)ids[i]);
            if (fflush(stdout) != 0 || ferror(stdout)) {
                cli_errorf("writing IDs: %s", strerror(errno));
                rc = EXIT_SOFTWARE;
            }
        }
    }
    dlock_client_free(client);
    free(ids);
    return rc;
}
