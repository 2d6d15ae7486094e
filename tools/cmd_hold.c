/* `dlock lock` and `dlock semaphore`: parse, connect, take the hold of
 * the kind asked for (hold_kinds.c), run COMMAND under it (supervise.c),
 * release. */
#include <getopt.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold.h"
#include "holdinfo.h"

/* The arguments of `lock` and `semaphore`. */
typedef struct hold_args {
    hold_kind kind;
    long ttl, wait_ms, permits;
    long margin_pct; /* --safety-margin */
    long busy_exit;  /* -E: the exit status when not acquired */
    uint64_t fence_floor; /* --fence-floor: tokens go above it */
    const char *name;
    const char *shell_command; /* -c */
    char *shell_argv[4];       /* /bin/sh -c SHELL_COMMAND */
    char **command;
} hold_args;

/* COMMAND from what follows NAME: "[--] COMMAND [ARG...]", or flock(1)'s
 * "-c 'SHELL COMMAND'" right after NAME; nothing else after NAME is read
 * as an option, so COMMAND's own options stay COMMAND's. */
static int parse_command(const char *synopsis, int argc, char **argv, int at, hold_args *h)
{
    const char *sub = argv[0];
    if (at < argc && (strcmp(argv[at], "-c") == 0 || strcmp(argv[at], "--command") == 0)) {
        if (h->shell_command) return cli_usage_error(synopsis, "%s: -c given twice", sub);
        if (at + 2 != argc) return cli_usage_error(synopsis, "%s: %s takes exactly one SHELL COMMAND", sub, argv[at]);
        h->shell_command = argv[at + 1];
        at = argc;
    } else if (at < argc && strcmp(argv[at], "--") == 0) {
        at++;
    }
    if (h->shell_command) {
        if (at < argc) return cli_usage_error(synopsis, "%s: give COMMAND or -c, not both", sub);
        h->shell_argv[0] = "/bin/sh";
        h->shell_argv[1] = "-c";
        h->shell_argv[2] = (char *)h->shell_command;
        h->shell_argv[3] = NULL;
        h->command = h->shell_argv;
        return 0;
    }
    if (at >= argc) return cli_usage_error(synopsis, "%s: missing COMMAND after NAME", sub);
    h->command = argv + at;
    return 0;
}

/* Parse the arguments of `lock` (is_sem 0) or `semaphore` (is_sem 1).
 * Returns 0, the exit status of a usage error, or -1 after printing the
 * subcommand's help. `argv[0]` is the subcommand. */
static int parse_hold_args(int argc, char **argv, int is_sem, hold_args *h)
{
#define HOLD_COMMON_OPTS                                                                    \
    {"wait", required_argument, NULL, 'w'}, {"ttl", required_argument, NULL, 't'},          \
        {"nonblock", no_argument, NULL, 'n'}, {"conflict-exit-code", required_argument, NULL, 'E'}, \
        {"command", required_argument, NULL, 'c'}, {"safety-margin", required_argument, NULL, 'm'}, \
        {"help", no_argument, NULL, 'h'}
    static const struct option lock_opts[] = {
        HOLD_COMMON_OPTS,
        {"fair", no_argument, NULL, 'F'},
        {"read", no_argument, NULL, 'R'},
        {"write", no_argument, NULL, 'W'},
        {"fence-floor", required_argument, NULL, 'f'},
        {NULL, 0, NULL, 0},
    };
    static const struct option sem_opts[] = {
        HOLD_COMMON_OPTS,
        {"permits", required_argument, NULL, 'p'},
        {NULL, 0, NULL, 0},
    };
#undef HOLD_COMMON_OPTS
    const char *synopsis = is_sem ? USAGE_SEM : USAGE_LOCK;
    int opt, kinds = 0;
    optind = 0; /* 0: full getopt reset in glibc, honouring the '+' again */
    while ((opt = getopt_long(argc, argv, is_sem ? "+:t:w:p:nE:c:h" : "+:t:w:nE:c:h", is_sem ? sem_opts : lock_opts,
                              NULL)) != -1) {
        switch (opt) {
        case 't':
            if (cli_duration_arg(synopsis, argv, MIN_TTL_MS, DLOCK_LEASE_MAX_MS, &h->ttl) != 0) return EXIT_USAGE;
            break;
        case 'w':
            if (cli_duration_arg(synopsis, argv, 0, MAX_MS, &h->wait_ms) != 0) return EXIT_USAGE;
            break;
        case 'n': h->wait_ms = 0; break;
        case 'E':
            if (cli_parse_number(optarg, 0, MAX_EXIT_CODE, &h->busy_exit) != 0)
                return cli_usage_error(synopsis, "bad %s '%s': expected an exit status from 0 to %d", cli_typed_option(argv),
                                   optarg, MAX_EXIT_CODE);
            break;
        case 'c':
            if (h->shell_command) return cli_usage_error(synopsis, "%s: -c given twice", argv[0]);
            h->shell_command = optarg;
            break;
        case 'p':
            if (cli_parse_number(optarg, 1, MAX_MS, &h->permits) != 0)
                return cli_usage_error(synopsis, "bad PERMITS '%s': expected a number from 1 to %ld", optarg, MAX_MS);
            break;
        case 'f':
            if (cli_parse_token(optarg, &h->fence_floor) != 0)
                return cli_usage_error(synopsis, "bad --fence-floor '%s': expected a fencing token (digits)", optarg);
            break;
        case 'm':
            if (cli_parse_number(optarg, 1, 50, &h->margin_pct) != 0)
                return cli_usage_error(synopsis, "bad --safety-margin '%s': expected a percentage from 1 to 50", optarg);
            break;
        case 'F': h->kind = HOLD_FAIR; kinds++; break;
        case 'R': h->kind = HOLD_READ; kinds++; break;
        case 'W': h->kind = HOLD_WRITE; kinds++; break;
        case 'h': cli_print_sub_help(argv[0]); return -1;
        case ':': return cli_usage_error(synopsis, "option %s needs a value", cli_bad_option(argv));
        default: return cli_usage_error(synopsis, "unknown option '%s'", cli_bad_option(argv));
        }
    }
    if (kinds > 1) return cli_usage_error(synopsis, "lock: --fair, --read and --write exclude each other");
    if (is_sem && h->permits <= 0) return cli_usage_error(synopsis, "semaphore: -p PERMITS is required");
    if (optind >= argc) return cli_usage_error(synopsis, "%s: missing NAME", argv[0]);
    h->name = argv[optind++];
    int bad = cli_check_name(synopsis, h->name, 0);
    if (bad) return bad;
    return parse_command(synopsis, argc, argv, optind, h);
}


/* Hold NAME (a lock of some kind, or a semaphore permit) while COMMAND
 * runs; see the file comment for the design. */
int cli_cmd_hold(const char *const *urls, size_t n_urls, int is_sem, int argc, char **argv)
{
    hold_args a = {.kind = HOLD_PLAIN, .ttl = DEFAULT_TTL_MS, .wait_ms = DLOCK_WAIT_FOREVER,
                   .margin_pct = DEFAULT_MARGIN_PCT, .busy_exit = EXIT_BUSY};
    int rc = parse_hold_args(argc, argv, is_sem, &a);
    if (rc < 0) return cli_help_done();
    if (rc != 0) return rc;
    const char *synopsis = is_sem ? USAGE_SEM : USAGE_LOCK;
    if (is_sem) a.kind = HOLD_PERMIT;
    if (n_urls > 1) {
        if (is_sem || a.kind != HOLD_PLAIN)
            return cli_usage_error(synopsis, "several -u URLs (RedLock) work only with a plain `lock`");
        if (n_urls < 3)
            return cli_usage_error(synopsis, "RedLock needs at least 3 masters (-u given %zu times)", n_urls);
        a.kind = HOLD_REDLOCK;
    }

    /* COMMAND's guard first, before any connection is open (see
     * tools/child.c): it waits while we do, so a hand-off of the lock
     * costs no fork. Not when we will not wait (-n, -w 0): there is no
     * hand-off to shorten then, and a busy lock, what a cron job's -n
     * usually finds, should cost no fork; the guard is forked once the
     * lock is held. */
    child c = CHILD_NONE;
    sigset_t handled;
    int early = a.wait_ms != 0;
    if (early && (rc = cli_prepare_guard(&c, a.name, a.command, &handled)) != 0) return rc;

    holder h = {.ops = &cli_hold_kinds[a.kind], .name = a.name, .n = n_urls};
    /* RedLock: a master that is down must not stop us, and a stalled one
     * must not eat the lease, so its commands time out at a tenth of it. */
    dlock_options o = {0};
    o.watchdog_lease_ms = a.ttl;
    o.safety_margin_pct = (int)a.margin_pct;
    if (a.kind == HOLD_REDLOCK) {
        long t = a.ttl / 10;
        o.command_timeout_ms = (int)(t < 50 ? 50 : t > 2000 ? 2000 : t);
        o.connect_timeout_ms = o.command_timeout_ms;
        o.offline_ok = 1;
    }
    for (size_t i = 0; i < n_urls; i++) {
        if ((rc = cli_open_client(urls[i], &o, &h.clients[i])) != 0) {
            h.n = i;
            cli_holder_close(&h);
            child_finish(&c);
            return rc;
        }
    }
    dlock_status st = h.ops->open(&h, a.permits, a.fence_floor);
    if (st != DLOCK_OK) {
        cli_errorf("cannot use '%s': %s", a.name, dlock_last_error());
        rc = cli_exit_for(st);
        goto out;
    }
    uint64_t token = 0;
    st = h.ops->acquire(&h, a.wait_ms, &token);
    if (st == DLOCK_ERR_TIMEOUT) {
        cli_errorf("%s '%s' not acquired within %ld ms: %s", h.ops->what, a.name, a.wait_ms,
               dlock_last_error());
        rc = (int)a.busy_exit;
        goto out;
    } else if (st != DLOCK_OK) {
        cli_errorf("cannot acquire '%s': %s", a.name, dlock_last_error());
        rc = cli_exit_for(st);
        goto out;
    }

    rc = early ? 0 : cli_prepare_guard(&c, a.name, a.command, &handled);
    if (rc == 0)
        rc = cli_start_command(&c, a.name, token, h.permit ? dlock_permit_id(h.permit) : NULL, a.command[0], &handled,
                           cli_holder_lost, &h);
    /* Who holds it, for `dlock status`: the kinds it can show. Started
     * after COMMAND, which need not wait for it. */
    holdinfo *info = NULL;
    if (rc == 0 && h.ops->holdinfo_kind >= 0) {
        dlock_options ko = cli_client_options(NULL);
        info = holdinfo_start(h.clients[0], urls[0], &ko, (holdinfo_kind)h.ops->holdinfo_kind, a.name, token, a.ttl,
                              a.command, &cli_lease_lost);
    }
    if (rc == 0) rc = cli_wait_command(&c, a.name, a.command[0], a.ttl * a.margin_pct / 100, cli_holder_lost, &h);

    /* The record's delete goes out from the keeper's thread beside the
     * release: one round trip for both (holdinfo.c, keeper()). Not for a
     * hold known lost: the server may be out of reach (a partition), the
     * release then returns without asking it, and a delete would hold our
     * exit for a whole command timeout; the record expires by itself. */
    if (info) holdinfo_end(info, !cli_lost_reported && !cli_holder_lost(&h));
    st = h.ops->release(&h);
    cli_test_stop_after_release();
    holdinfo_free(info);
    if (atomic_load(&cli_lease_lost) || cli_lost_reported) {
        /* Reported when it happened, unless COMMAND had just ended. */
        if (!cli_lost_reported) cli_errorf("lost '%s' while COMMAND ran", a.name);
        rc = EXIT_LOST;
    } else if (st == DLOCK_ERR_LOST) {
        cli_errorf("'%s' was lost before COMMAND finished: %s", a.name, dlock_last_error());
        rc = EXIT_LOST;
    } else if (st != DLOCK_OK) {
        /* COMMAND ran under the hold; only the early release failed, and
         * the lease runs out by itself within TTL. */
        cli_errorf("cannot release '%s' (it expires within %ld ms): %s", a.name, a.ttl, dlock_last_error());
    }
out:
    child_finish(&c); /* without the lock: the guard goes without COMMAND */
    cli_holder_close(&h);
    return rc;
}

