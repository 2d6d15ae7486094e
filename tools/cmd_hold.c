/* `dlock lock` and `dlock semaphore`: parse, connect, take the hold of
 * the kind asked for (hold_kinds.c) within -w, run COMMAND under it
 * (supervise.c) or keep it until told to stop, release. */
#include <errno.h>
#include <getopt.h>
#include <time.h>
#include <unistd.h>
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
    long set_permits;     /* semaphore --set-permits: the new size, or -1 */
    long margin_pct;      /* --safety-margin */
    long busy_exit;       /* -E: the exit status when not acquired */
    uint64_t fence_floor; /* --fence-floor: tokens go above it */
    int verbose;          /* -v: say why the hold was not taken, and when it was */
    int retry_connect;    /* --retry-connect: wait through a Redis outage */
    int until_eof;        /* --until-eof: without COMMAND, hold until stdin ends */
    const char *name;
    cli_command operands; /* COMMAND, or -c; none: hold without COMMAND */
} hold_args;

/* COMMAND from what follows NAME (cli_command_operands), which `lock`
 * without COMMAND may not combine with --until-eof. */
static int parse_command(const char *synopsis, int argc, char **argv, int at, hold_args *h)
{
    int rc = cli_command_operands(synopsis, argc, argv, at, &h->operands);
    if (rc != 0) return rc;
    if (h->operands.command && h->until_eof && !h->operands.shell_command)
        return cli_usage_error(synopsis, "%s: --until-eof is for a hold without COMMAND", argv[0]);
    return 0;
}

/* The N of --set-permits: 0 (nobody gets a permit until it grows) up. */
static int set_permits_arg(const char *s, hold_args *h)
{
    if (cli_parse_number(s, 0, MAX_MS, &h->set_permits) == 0) return 0;
    cli_usage_error(USAGE_SEM, "bad --set-permits '%s': expected a number from 0 to %ld", s, MAX_MS);
    return -1;
}

/* Parse the arguments of `lock` (is_sem 0) or `semaphore` (is_sem 1).
 * Returns 0, the exit status of a usage error, or -1 after printing the
 * subcommand's help. `argv[0]` is the subcommand. */
static int parse_hold_args(int argc, char **argv, int is_sem, hold_args *h)
{
#define HOLD_COMMON_OPTS                                                                                               \
    {"wait", required_argument, NULL, 'w'}, {"ttl", required_argument, NULL, 't'},                                     \
        {"nonblock", no_argument, NULL, 'n'}, {"conflict-exit-code", required_argument, NULL, 'E'},                    \
        {"command", required_argument, NULL, 'c'}, {"safety-margin", required_argument, NULL, 'm'},                    \
        {"verbose", no_argument, NULL, 'v'}, {"quiet", no_argument, NULL, 'q'},                                        \
        {"retry-connect", no_argument, NULL, 'r'}, {"until-eof", no_argument, NULL, 'e'},                              \
    {                                                                                                                  \
        "help", no_argument, NULL, 'h'                                                                                 \
    }
    static const struct option lock_opts[] = {
        HOLD_COMMON_OPTS,
        {"fair", no_argument, NULL, 'F'},
        {"read", no_argument, NULL, 'R'},
        {"shared", no_argument, NULL, 'R'},
        {"write", no_argument, NULL, 'W'},
        {"exclusive", no_argument, NULL, 'W'},
        {"fence-floor", required_argument, NULL, 'f'},
        {NULL, 0, NULL, 0},
    };
    static const struct option sem_opts[] = {
        HOLD_COMMON_OPTS,
        {"permits", required_argument, NULL, 'p'},
        {"set-permits", required_argument, NULL, 'S'},
        {NULL, 0, NULL, 0},
    };
#undef HOLD_COMMON_OPTS
    const char *synopsis = is_sem ? USAGE_SEM : USAGE_LOCK;
    int opt, kinds = 0;
    optind = 0; /* 0: full getopt reset in glibc, honouring the '+' again */
    while ((opt = getopt_long(argc, argv, is_sem ? "+:t:w:p:nE:c:hvq" : "+:t:w:nE:c:hvqsx",
                              is_sem ? sem_opts : lock_opts, NULL)) != -1) {
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
                return cli_usage_error(synopsis, "bad %s '%s': expected an exit status from 0 to %d",
                                       cli_typed_option(argv), optarg, MAX_EXIT_CODE);
            break;
        case 'c':
            if (h->operands.shell_command) return cli_usage_error(synopsis, "%s: -c given twice", argv[0]);
            h->operands.shell_command = optarg;
            break;
        case 'p':
            if (cli_parse_number(optarg, 1, MAX_MS, &h->permits) != 0)
                return cli_usage_error(synopsis, "bad PERMITS '%s': expected a number from 1 to %ld", optarg, MAX_MS);
            break;
        case 'S':
            if (set_permits_arg(optarg, h) != 0) return EXIT_USAGE;
            break;
        case 'f':
            if (cli_parse_token(optarg, &h->fence_floor) != 0)
                return cli_usage_error(synopsis, "bad --fence-floor '%s': expected a fencing token (digits)", optarg);
            break;
        case 'm':
            if (cli_parse_number(optarg, 1, 50, &h->margin_pct) != 0)
                return cli_usage_error(synopsis, "bad --safety-margin '%s': expected a percentage from 1 to 50",
                                       optarg);
            break;
        case 'v': h->verbose = 1; break;
        case 'q': cli_set_quiet(1); break;
        case 'r': h->retry_connect = 1; break;
        case 'e': h->until_eof = 1; break;
        case 'F':
            h->kind = HOLD_FAIR;
            kinds++;
            break;
        case 's':
        case 'R':
            h->kind = HOLD_READ;
            kinds++;
            break;
        case 'x':
        case 'W':
            h->kind = HOLD_WRITE;
            kinds++;
            break;
        case 'h': cli_print_sub_help(argv[0]); return -1;
        case ':': return cli_usage_error(synopsis, "option %s needs a value", cli_bad_option(argv));
        default: return cli_unknown_option(synopsis, cli_bad_option(argv));
        }
    }
    if (kinds > 1) return cli_usage_error(synopsis, "lock: --fair, --read (-s) and --write (-x) exclude each other");
    if (optind >= argc) return cli_usage_error(synopsis, "%s: missing NAME", argv[0]);
    h->name = argv[optind++];
    int bad = cli_check_name(synopsis, h->name, 0);
    if (bad) return bad;
    /* The form the man page shows, `semaphore NAME --set-permits N`: after
     * NAME, where a COMMAND would be, since no command is called that. */
    if (is_sem && optind < argc && strcmp(argv[optind], "--set-permits") == 0) {
        if (optind + 2 != argc)
            return cli_usage_error(synopsis, "semaphore: --set-permits takes one N and nothing after");
        if (set_permits_arg(argv[optind + 1], h) != 0) return EXIT_USAGE;
        optind = argc;
    }
    if (h->set_permits >= 0) {
        if (h->permits > 0) return cli_usage_error(synopsis, "semaphore: give -p or --set-permits, not both");
        if (optind < argc || h->operands.shell_command)
            return cli_usage_error(synopsis, "semaphore: --set-permits runs no COMMAND");
        return 0;
    }
    if (is_sem && h->permits <= 0) return cli_usage_error(synopsis, "semaphore: -p PERMITS is required");
    return parse_command(synopsis, argc, argv, optind, h);
}

/* Milliseconds on the monotonic clock. */
static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* What is left of -w at `deadline` (-1: there is none, wait forever). */
static long wait_left(long long deadline)
{
    if (deadline < 0) return DLOCK_WAIT_FOREVER;
    long long left = deadline - now_ms();
    return left > 0 ? (long)left : 0;
}

/* How long --retry-connect sleeps between tries of an unreachable server:
 * short enough that a restart is noticed at once, long enough not to
 * spin. */
#define RETRY_CONNECT_MS 200

/* Make the kind's handle and take the hold before `deadline`. With
 * --retry-connect, a server that cannot be reached is tried again every
 * RETRY_CONNECT_MS until then, the handle made anew (a semaphore's needs
 * the server); without, the first refusal is the answer. */
static dlock_status take_hold(holder *h, const hold_args *a, long long deadline, uint64_t *token)
{
    int said = 0;
    for (;;) {
        dlock_status st = h->handle ? DLOCK_OK : h->ops->open(h, a->permits, a->fence_floor);
        if (st == DLOCK_OK) st = h->ops->acquire(h, wait_left(deadline), token);
        if (st != DLOCK_ERR_CONNECT || !a->retry_connect) return st;
        long left = wait_left(deadline);
        if (left == 0) return st;
        if (a->verbose && !said++) cli_errorf("Redis cannot be reached (%s); trying again", dlock_last_error());
        h->ops->free(h);
        h->handle = NULL;
        usleep(1000L * (left >= 0 && left < RETRY_CONNECT_MS ? left : RETRY_CONNECT_MS));
    }
}

/* The options of the hold's clients: its lease and margin; a RedLock
 * master that is down must not stop us, and a stalled one must not eat
 * the lease, so its commands time out at a tenth of it. With a -w, no
 * single call may outlast the wait by much: connect and command timeouts
 * are at most the wait plus a second (the alarm of cli_deadline_arm() is
 * the backstop). --retry-connect lets the clients be made with the server
 * down. */
static dlock_options hold_options(const hold_args *a)
{
    dlock_options o = {0};
    o.watchdog_lease_ms = a->ttl;
    o.safety_margin_pct = (int)a->margin_pct;
    if (a->kind == HOLD_REDLOCK) {
        long t = a->ttl / 10;
        o.command_timeout_ms = (int)(t < 50 ? 50 : t > 2000 ? 2000 : t);
        o.connect_timeout_ms = o.command_timeout_ms;
        o.offline_ok = 1;
    }
    cli_cap_timeouts(&o, a->wait_ms);
    if (a->retry_connect) o.offline_ok = 1;
    return o;
}

/* Print the token (or permit id) of a hold without COMMAND, for the
 * script that holds it: one line on stdout. */
static int print_hold(const holder *h, uint64_t token)
{
    if (h->permit) printf("%s\n", dlock_permit_id(h->permit));
    else printf("%llu\n", (unsigned long long)token);
    if (fflush(stdout) == 0) return 0;
    cli_errorf("writing the token: %s", strerror(errno));
    return EXIT_SOFTWARE;
}

/* Hold NAME (a lock of some kind, or a semaphore permit) while COMMAND
 * runs, or without COMMAND until told to stop. */
int cli_cmd_hold(const char *const *urls, size_t n_urls, int is_sem, int argc, char **argv)
{
    hold_args a = {.kind = HOLD_PLAIN,
                   .ttl = DEFAULT_TTL_MS,
                   .wait_ms = DLOCK_WAIT_FOREVER,
                   .margin_pct = DEFAULT_MARGIN_PCT,
                   .busy_exit = EXIT_BUSY,
                   .set_permits = -1};
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
    if (a.set_permits >= 0) return cli_sem_resize(urls[0], a.name, a.set_permits);
    long long started = now_ms();
    long long deadline = a.wait_ms == DLOCK_WAIT_FOREVER ? -1 : started + a.wait_ms;

    /* COMMAND's guard first, before any connection is open (see
     * tools/child.c): it waits while we do, so a hand-off of the lock
     * costs no fork. Not when we will not wait (-n, -w 0): there is no
     * hand-off to shorten then, and a busy lock, what a cron job's -n
     * usually finds, should cost no fork; the guard is forked once the
     * lock is held. */
    child c = CHILD_NONE;
    sigset_t handled;
    int early = a.wait_ms != 0 && a.operands.command;
    if (early && (rc = cli_prepare_guard(&c, a.name, a.operands.command, &handled)) != 0) return rc;
    if (deadline >= 0 && cli_deadline_arm(a.name, a.wait_ms + DEADLINE_GRACE_MS) != 0) {
        cli_errorf("setitimer: %s", strerror(errno));
        child_finish(&c);
        return EXIT_SOFTWARE;
    }

    holder h = {.ops = &cli_hold_kinds[a.kind], .name = a.name, .n = n_urls};
    dlock_options o = hold_options(&a);
    dlock_status st = DLOCK_OK;
    uint64_t token = 0;
    for (size_t i = 0; i < n_urls; i++) {
        if ((rc = cli_open_client(urls[i], &o, &h.clients[i])) != 0) {
            h.n = i;
            goto out;
        }
    }
    st = take_hold(&h, &a, deadline, &token);
    cli_deadline_disarm();
    if (st == DLOCK_ERR_TIMEOUT) {
        /* As flock(1): a lock that is busy is no error, and says nothing
         * unless asked to (-v); the exit status tells. */
        if (a.verbose)
            cli_errorf("%s '%s' not acquired within %ld ms: %s", h.ops->what, a.name, a.wait_ms, dlock_last_error());
        rc = (int)a.busy_exit;
        goto out;
    } else if (st == DLOCK_ERR_INVALID && a.kind == HOLD_PERMIT) {
        /* -p was checked: what the library refuses is a semaphore stored
         * with another size (its message names both), a setting to fix,
         * not a usage error. */
        cli_errorf("%s: dlock semaphore %s --set-permits %ld", dlock_last_error(), a.name, a.permits);
        rc = EXIT_CONFIG;
        goto out;
    } else if (st != DLOCK_OK) {
        if (h.handle) cli_errorf("cannot acquire '%s': %s", a.name, dlock_last_error());
        else cli_errorf("cannot use '%s': %s", a.name, dlock_last_error());
        rc = cli_exit_for(st);
        goto out;
    }
    if (a.verbose) cli_errorf("%s '%s' acquired after %lld ms", h.ops->what, a.name, now_ms() - started);

    long margin_ms = a.ttl * a.margin_pct / 100;
    if (a.operands.command) {
        rc = early ? 0 : cli_prepare_guard(&c, a.name, a.operands.command, &handled);
        if (rc == 0)
            rc = cli_start_command(&c, a.name, token, h.permit ? dlock_permit_id(h.permit) : NULL,
                                   a.operands.command[0], &handled, cli_holder_lost, &h);
    } else {
        rc = print_hold(&h, token);
    }
    /* Who holds it, for `dlock status`: the kinds it can show. Started
     * after COMMAND, which need not wait for it. A hold without COMMAND
     * shows as this dlock. */
    holdinfo *info = NULL;
    char *self[] = {"dlock", argv[0], (char *)a.name, NULL};
    if (rc == 0 && h.ops->holdinfo_kind >= 0) {
        dlock_options ko = cli_client_options(NULL);
        info = holdinfo_start(h.clients[0], urls[0], &ko, (holdinfo_kind)h.ops->holdinfo_kind, a.name, token, a.ttl,
                              a.operands.command ? a.operands.command : self, &cli_lease_lost);
    }
    if (rc == 0 && a.operands.command)
        rc = cli_wait_command(&c, a.name, a.operands.command[0], margin_ms, cli_holder_lost, &h);
    else if (rc == 0) rc = cli_hold_idle(a.name, a.until_eof, margin_ms, cli_holder_lost, &h);

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
        if (!cli_lost_reported)
            cli_errorf("lost '%s' while %s", a.name, a.operands.command ? "COMMAND ran" : "holding it");
        rc = EXIT_LOST;
    } else if (st == DLOCK_ERR_LOST) {
        cli_errorf("'%s' was lost before %s: %s", a.name, a.operands.command ? "COMMAND finished" : "its release",
                   dlock_last_error());
        rc = EXIT_LOST;
    } else if (st != DLOCK_OK) {
        /* COMMAND ran under the hold; only the early release failed, and
         * the lease runs out by itself within TTL. */
        cli_warnf("cannot release '%s' (it expires within %ld ms): %s", a.name, a.ttl, dlock_last_error());
    }
out:
    cli_deadline_disarm();
    child_finish(&c); /* without the lock: the guard goes without COMMAND */
    cli_holder_close(&h);
    return rc;
}
