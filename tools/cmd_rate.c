/* `dlock rate`: run COMMAND when the rate limit NAME grants a permit, or
 * show what the limit has left (--status). A permit is spent, never held,
 * so COMMAND is not watched: dlock becomes it (exec), and its exit status
 * is COMMAND's own. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock_redis.h"
#include "hold.h" /* cli_deadline_arm(): -w is a deadline here too */

/* The arguments of `rate`. */
typedef struct rate_args {
    dlock_rate_options o;
    const char *rate_arg; /* -r as typed, for the messages */
    long wait_ms, busy_exit;
    int verbose;
    int status, json; /* --status, --json */
    const char *subject;
    const char *name;
    cli_command operands;
} rate_args;

/* ------------------------------------------------------------------------ */
/* Parsing                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * RATE[/UNIT] into o->rate and o->interval_ms: "10/s", "100/m", "5/1.5s",
 * "3600/h", "20/500ms"; a bare RATE is per second. UNIT is a duration as
 * every other option takes it (a bare number is seconds), its leading 1
 * optional ("s" is "1s"), so that the usual spellings of a rate read as
 * they are meant.
 */
static int parse_rate(const char *s, dlock_rate_options *o)
{
    char num[24];
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    if (n == 0 || n >= sizeof num) return -1;
    memcpy(num, s, n);
    num[n] = '\0';
    if (cli_parse_number(num, 1, MAX_MS, &o->rate) != 0) return -1;
    o->interval_ms = 1000;
    if (!slash) return 0;
    const char *unit = slash + 1;
    char with_one[32];
    if (*unit >= 'a' && *unit <= 'z') {
        snprintf(with_one, sizeof with_one, "1%s", unit);
        unit = with_one;
    }
    return cli_parse_duration(unit, 1, DLOCK_RATE_INTERVAL_MAX_MS, &o->interval_ms);
}

/* What follows `NAME --status`: --json and --subject S, in any order. */
static int parse_status_operands(int argc, char **argv, int at, rate_args *a)
{
    for (; at < argc; at++) {
        if (strcmp(argv[at], "--json") == 0) a->json = 1;
        else if (strcmp(argv[at], "--subject") == 0 && at + 1 < argc) a->subject = argv[++at];
        else if (strncmp(argv[at], "--subject=", 10) == 0) a->subject = argv[at] + 10;
        else if (strcmp(argv[at], "--subject") == 0)
            return cli_usage_error(USAGE_RATE, "option --subject needs a value");
        else return cli_usage_error(USAGE_RATE, "rate --status: unexpected '%s'", cli_shown(argv[at]));
    }
    return 0;
}

/* The checks the library would make, made before connecting, so that a
 * setting out of range is a usage error (64) even with Redis down, never
 * mistaken for settings stored otherwise (78). */
static int check_settings(const rate_args *a)
{
    if (a->subject && (a->subject[0] == '\0' || strlen(a->subject) > 512))
        return cli_usage_error(USAGE_RATE, "bad --subject: expected 1 to 512 bytes");
    if (a->status) return 0;
    if (a->o.rate == 0) return cli_usage_error(USAGE_RATE, "rate: -r RATE[/UNIT] is required");
    long burst = a->o.burst ? a->o.burst : a->o.rate;
    if ((long long)burst * a->o.interval_ms > DLOCK_RATE_SPAN_MAX)
        return cli_usage_error(USAGE_RATE,
                               "rate: burst %ld x interval %ld ms is over %lld ms: lower -b or the interval", burst,
                               a->o.interval_ms, DLOCK_RATE_SPAN_MAX);
    return 0;
}

/* Parse the arguments of `rate`. Returns 0, the exit status of a usage
 * error, or -1 after printing the subcommand's help. */
static int parse_rate_args(int argc, char **argv, rate_args *a)
{
    static const struct option opts[] = {
        {"rate", required_argument, NULL, 'r'},
        {"burst", required_argument, NULL, 'b'},
        {"wait", required_argument, NULL, 'w'},
        {"nonblock", no_argument, NULL, 'n'},
        {"conflict-exit-code", required_argument, NULL, 'E'},
        {"command", required_argument, NULL, 'c'},
        {"subject", required_argument, NULL, 'S'},
        {"change", no_argument, NULL, 'C'},
        {"status", no_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"verbose", no_argument, NULL, 'v'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt, takes = 0; /* options that only taking a permit has */
    optind = 0;
    while ((opt = getopt_long(argc, argv, "+:r:b:w:nE:c:hvq", opts, NULL)) != -1) {
        switch (opt) {
        case 'r':
            if (parse_rate(optarg, &a->o) != 0)
                return cli_usage_error(USAGE_RATE,
                                       "bad %s '%s': expected RATE[/UNIT], RATE from 1 to %ld per UNIT, a duration "
                                       "up to %ld ms (10/s, 100/m, 5/1.5s, 3600/h; a bare RATE is per second)",
                                       cli_typed_option(argv), cli_shown(optarg), MAX_MS, DLOCK_RATE_INTERVAL_MAX_MS);
            a->rate_arg = optarg;
            takes++;
            break;
        case 'b':
            if (cli_parse_number(optarg, 1, MAX_MS, &a->o.burst) != 0)
                return cli_usage_error(USAGE_RATE, "bad %s '%s': expected a number from 1 to %ld",
                                       cli_typed_option(argv), cli_shown(optarg), MAX_MS);
            takes++;
            break;
        case 'w':
            if (cli_duration_arg(USAGE_RATE, argv, 0, MAX_MS, &a->wait_ms) != 0) return EXIT_USAGE;
            takes++;
            break;
        case 'n':
            a->wait_ms = 0;
            takes++;
            break;
        case 'E':
            if (cli_parse_number(optarg, 0, MAX_EXIT_CODE, &a->busy_exit) != 0)
                return cli_usage_error(USAGE_RATE, "bad %s '%s': expected an exit status from 0 to %d",
                                       cli_typed_option(argv), optarg, MAX_EXIT_CODE);
            takes++;
            break;
        case 'c':
            if (a->operands.shell_command) return cli_usage_error(USAGE_RATE, "rate: -c given twice");
            a->operands.shell_command = optarg;
            takes++;
            break;
        case 'S': a->subject = optarg; break;
        case 'C':
            a->o.change = 1;
            takes++;
            break;
        case 's': a->status = 1; break;
        case 'j': a->json = 1; break;
        case 'v': a->verbose = 1; break;
        case 'q': cli_set_quiet(1); break;
        case 'h': cli_print_sub_help(argv[0]); return -1;
        case ':': return cli_usage_error(USAGE_RATE, "option %s needs a value", cli_bad_option(argv));
        default: return cli_unknown_option(USAGE_RATE, cli_bad_option(argv));
        }
    }
    if (optind >= argc) return cli_usage_error(USAGE_RATE, "rate: missing NAME");
    a->name = argv[optind++];
    int rc = cli_check_name(USAGE_RATE, a->name, 0);
    if (rc != 0) return rc;
    /* `rate NAME --status`, as `semaphore NAME --set-permits N`: after
     * NAME, where a COMMAND would be, since no command is called that. */
    if (optind < argc && strcmp(argv[optind], "--status") == 0) {
        a->status = 1;
        if ((rc = parse_status_operands(argc, argv, optind + 1, a)) != 0) return rc;
        optind = argc;
    }
    if (a->status) {
        if (takes || optind < argc)
            return cli_usage_error(USAGE_RATE, "rate --status takes only --json and --subject S");
        return check_settings(a);
    }
    if (a->json) return cli_usage_error(USAGE_RATE, "rate: --json goes with --status");
    if ((rc = check_settings(a)) != 0) return rc;
    return cli_command_operands(USAGE_RATE, argc, argv, optind, &a->operands);
}

/* ------------------------------------------------------------------------ */
/* Status                                                                    */
/* ------------------------------------------------------------------------ */

/* The settings stored with the limit (its hash, include/dlock.h), into
 * *o. 1 when it has some, 0 when it is not set, -1 on a failure. */
static int stored_settings(dlock_client *client, const char *name, dlock_rate_options *o)
{
    char key[600];
    snprintf(key, sizeof key, "dlock:{%s}:rate", name);
    const char *argv[5] = {"HMGET", key, "rate", "interval", "burst"};
    redisReply *r = NULL;
    dlock_status st = dlock_redis_command(client, key, 0, 5, argv, NULL, &r);
    int rc = st == DLOCK_OK ? 0 : -1;
    long v[3] = {0, 0, 0};
    if (rc == 0 && (r->type != REDIS_REPLY_ARRAY || r->elements != 3)) rc = -1;
    for (size_t i = 0; rc == 0 && i < 3; i++) {
        if (r->element[i]->type == REDIS_REPLY_NIL) continue;
        if (r->element[i]->type != REDIS_REPLY_STRING || cli_parse_number(r->element[i]->str, 1, MAX_MS, &v[i]) != 0)
            rc = -1;
    }
    if (r) freeReplyObject(r);
    if (rc != 0) return -1;
    if (!v[0] || !v[1] || !v[2]) return 0;
    o->rate = v[0];
    o->interval_ms = v[1];
    o->burst = v[2];
    return 1;
}

/* A handle on a limit that is set, with the settings it is stored with:
 * they are read first, so that a look never stores any of its own, and
 * read again when they change in between. */
static dlock_status open_stored(dlock_client *client, const char *name, dlock_rate **out, int *exists)
{
    for (int tries = 0;; tries++) {
        dlock_rate_options o = {0};
        int have = stored_settings(client, name, &o);
        *exists = have == 1;
        if (have < 0) return DLOCK_ERR_REDIS;
        if (have == 0) return DLOCK_OK;
        dlock_status st = dlock_rate_new(client, name, &o, out);
        if (st != DLOCK_ERR_INVALID || tries == 2) return st;
    }
}

static void print_status_text(const rate_args *a, int exists, const dlock_rate_result *res)
{
    char interval[32], next[32], full[32];
    printf("name: ");
    cli_put_escaped(stdout, a->name);
    printf("\nsubject: ");
    cli_put_escaped(stdout, a->subject ? a->subject : "-");
    if (!exists) {
        fputs("\nlimit: -\n", stdout);
        return;
    }
    cli_human_ms(res->interval_ms, interval, sizeof interval);
    cli_human_ms(res->retry_after_ms, next, sizeof next);
    cli_human_ms(res->reset_ms, full, sizeof full);
    printf("\nlimit: %ld per %s, burst %ld\n"
           "rate: %ld\ninterval_ms: %ld\nburst: %ld\n"
           "remaining: %ld\n"
           "next_permit: %s\nnext_permit_ms: %ld\n"
           "full_in: %s\nfull_in_ms: %ld\n",
           res->rate, interval, res->burst, res->rate, res->interval_ms, res->burst, res->remaining,
           res->retry_after_ms == 0 ? "now" : next, res->retry_after_ms, res->reset_ms == 0 ? "now" : full,
           res->reset_ms);
}

/* The same facts as one JSON object; null for what a limit not set has
 * not. */
static void print_status_json(const rate_args *a, int exists, const dlock_rate_result *res)
{
    fputs("{\"name\":", stdout);
    cli_json_string(stdout, a->name);
    cli_json_str_member(stdout, "subject", a->subject);
    fprintf(stdout, ",\"set\":%s", exists ? "true" : "false");
    cli_json_num_member(stdout, "rate", res->rate, exists);
    cli_json_num_member(stdout, "interval_ms", res->interval_ms, exists);
    cli_json_num_member(stdout, "burst", res->burst, exists);
    cli_json_num_member(stdout, "remaining", res->remaining, exists);
    cli_json_num_member(stdout, "next_permit_ms", res->retry_after_ms, exists);
    cli_json_num_member(stdout, "full_in_ms", res->reset_ms, exists);
    fputs("}\n", stdout);
}

/* `rate NAME --status`: exit 0 when the limit is set, 1 when not. */
static int rate_status(dlock_client *client, const rate_args *a)
{
    dlock_rate *r = NULL;
    dlock_rate_result res;
    memset(&res, 0, sizeof res);
    int exists = 0;
    dlock_status st = open_stored(client, a->name, &r, &exists);
    if (st == DLOCK_OK && exists) st = dlock_rate_status(r, a->subject, 1, &res);
    dlock_rate_free(r);
    if (st != DLOCK_OK) {
        cli_errorf("rate limit '%s': %s", a->name, dlock_last_error());
        return cli_exit_for(st);
    }
    if (a->json) print_status_json(a, exists, &res);
    else print_status_text(a, exists, &res);
    if (fflush(stdout) != 0) return EXIT_SOFTWARE;
    return exists ? 0 : EXIT_NOT_HELD;
}

/* ------------------------------------------------------------------------ */
/* Taking a permit                                                           */
/* ------------------------------------------------------------------------ */

/* Become COMMAND, with DLOCK_NAME set as under `lock`. Returns only when
 * it could not be executed, as sh(1) would then: 127. */
static int exec_command(const rate_args *a)
{
    char **command = a->operands.command;
    if (setenv("DLOCK_NAME", a->name, 1) != 0) {
        cli_errorf("setenv: %s", strerror(errno));
        return EXIT_SOFTWARE;
    }
    execvp(command[0], command);
    cli_errorf("%s: %s", cli_shown(command[0]), strerror(errno));
    return EXIT_NOEXEC;
}

/* Take one permit of NAME within -w. 0 when granted, else an exit status
 * (the message said, or not for a busy limit without -v). */
static int take_permit(dlock_client *client, const rate_args *a)
{
    dlock_rate *r = NULL;
    dlock_rate_result res;
    memset(&res, 0, sizeof res);
    dlock_status st = dlock_rate_new(client, a->name, &a->o, &r);
    if (st == DLOCK_ERR_INVALID) {
        /* The settings were checked: what the library refuses is a limit
         * stored with others, a setting to fix, not a usage error. Both
         * are named in the units the user typed, with the way out. */
        dlock_rate_options stored = {0};
        char was[32], asked[32];
        if (stored_settings(client, a->name, &stored) == 1) {
            cli_human_ms(stored.interval_ms, was, sizeof was);
            cli_human_ms(a->o.interval_ms, asked, sizeof asked);
            cli_errorf("rate limit '%s' is stored as %ld per %s, burst %ld, not -r %s (%ld per %s, burst %ld): "
                       "give --change to replace them",
                       a->name, stored.rate, was, stored.burst, a->rate_arg, a->o.rate, asked,
                       a->o.burst ? a->o.burst : a->o.rate);
        } else {
            cli_errorf("%s; give --change to replace them", dlock_last_error());
        }
        return EXIT_CONFIG;
    }
    if (st == DLOCK_OK) st = dlock_rate_acquire(r, a->subject, 1, a->wait_ms, &res);
    dlock_rate_free(r);
    if (st == DLOCK_ERR_TIMEOUT) {
        /* As a busy lock: no error, and silent unless asked (-v). */
        if (a->verbose)
            cli_errorf("rate limit '%s': no permit within %ld ms (the next is due in %ld ms)", a->name, a->wait_ms,
                       res.retry_after_ms);
        return (int)a->busy_exit;
    }
    if (st != DLOCK_OK) {
        cli_errorf("rate limit '%s': %s", a->name, dlock_last_error());
        return cli_exit_for(st);
    }
    if (a->verbose) cli_errorf("rate limit '%s': permit granted, %ld left", a->name, res.remaining);
    return 0;
}

/* Connect with timeouts no longer than -w allows (as `lock` does), the
 * alarm of cli_deadline_arm() the backstop. */
static dlock_options rate_options(const rate_args *a)
{
    dlock_options o = {0};
    if (!a->status) cli_cap_timeouts(&o, a->wait_ms);
    return o;
}

int cli_cmd_rate(const char *url, int argc, char **argv)
{
    rate_args a = {.wait_ms = DLOCK_WAIT_FOREVER, .busy_exit = EXIT_BUSY};
    int rc = parse_rate_args(argc, argv, &a);
    if (rc < 0) return cli_help_done();
    if (rc != 0) return rc;
    if (!a.status && a.wait_ms != DLOCK_WAIT_FOREVER && cli_deadline_arm(a.name, a.wait_ms + DEADLINE_GRACE_MS) != 0) {
        cli_errorf("setitimer: %s", strerror(errno));
        return EXIT_SOFTWARE;
    }
    dlock_client *client = NULL;
    dlock_options o = rate_options(&a);
    if ((rc = cli_open_client(url, &o, &client)) == 0)
        rc = a.status ? rate_status(client, &a) : take_permit(client, &a);
    cli_deadline_disarm();
    dlock_client_free(client);
    if (rc != 0 || !a.operands.command) return rc;
    if (fflush(stdout) != 0) return EXIT_SOFTWARE;
    return exec_command(&a);
}
