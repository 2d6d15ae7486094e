/* Option values: numbers, tokens, durations, names, and the option as
 * the user typed it for a usage error. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Refuse a bad NAME (or ID prefix) before connecting, so that a typo is a
 * usage error (64) even when Redis is down, never a connection error. */
int cli_check_name(const char *synopsis, const char *name, int is_prefix)
{
    if ((is_prefix ? dlock_check_id_prefix(name) : dlock_check_name(name)) == DLOCK_OK) return 0;
    return cli_usage_error(synopsis, "bad %s '%s': %s", is_prefix ? "PREFIX" : "NAME", cli_shown(name),
                           dlock_last_error());
}

/* The options main() takes before the subcommand: given after it, they
 * are unknown to the subcommand, and saying only that would puzzle. */
static int is_global_option(const char *opt)
{
    static const char *const globals[] = {"-u", "--url", "--password-file", "--timeout", "-V", "--version", NULL};
    for (size_t i = 0; globals[i]; i++)
        if (strcmp(opt, globals[i]) == 0) return 1;
    return 0;
}

int cli_unknown_option(const char *synopsis, const char *opt)
{
    if (is_global_option(opt))
        return cli_usage_error(synopsis, "%s is a global option: put it before the subcommand", opt);
    return cli_usage_error(synopsis, "unknown option '%s'", cli_shown(opt));
}

/* The offending option as the user typed it, for an error line: a long
 * one is in argv (getopt has stepped past it), a short one in optopt
 * (argv may hold several, as in -nq). */
const char *cli_bad_option(char **argv)
{
    static char buf[64];
    const char *last = optind > 0 ? argv[optind - 1] : "";
    if (strncmp(last, "--", 2) == 0 && last[2]) {
        snprintf(buf, sizeof buf, "%.*s", (int)strcspn(last, "="), last);
        return buf;
    }
    if (optopt > 0 && optopt < 128) {
        buf[0] = '-';
        buf[1] = (char)optopt;
        buf[2] = '\0';
        return buf;
    }
    return last;
}

/* Strict decimal parsing: the whole string must be digits and the value in
 * [lo, hi]. strtol alone would take " 12", "+12", "12abc" and "" quietly,
 * and a lock TTL silently read as 0 is a bug nobody notices until it bites. */
int cli_parse_number(const char *s, long lo, long hi, long *out)
{
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* A fencing token as text: digits only, at most 2^63-1 (tokens are
 * microseconds since 1970 or counters, far below it). */
int cli_parse_token(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > (unsigned long long)INT64_MAX) return -1;
    *out = v;
    return 0;
}

/*
 * A duration, into milliseconds within [lo, hi]: digits, an optional
 * fraction (".5"), then nothing (seconds, as in flock(1), etcdctl and
 * consul) or one of the units ms, s, m, h. As strict as cli_parse_number:
 * no sign, space or other unit, no fraction finer than a millisecond and
 * no overflow when the unit multiplies, so that "10x", "-1s", "1.", "0.0001"
 * or "99999999999h" is an error and never some other lease.
 */
int cli_parse_duration(const char *s, long lo, long hi, long *out)
{
    static const struct {
        const char *unit;
        long long ms;
    } units[] = {{"", 1000}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    long long whole = strtoll(s, &end, 10);
    if (errno != 0) return -1;
    /* The fraction as frac / scale, at most 9 digits (a nanosecond of a
     * second, far below a millisecond of any unit). */
    long long frac = 0, scale = 1;
    if (*end == '.') {
        end++;
        if (*end < '0' || *end > '9') return -1;
        for (; *end >= '0' && *end <= '9'; end++) {
            if (scale == 1000000000LL) return -1;
            frac = frac * 10 + (*end - '0');
            scale *= 10;
        }
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) != 0) continue;
        long long unit = units[i].ms;
        if (whole > hi / unit) return -1;
        if (frac * unit % scale != 0) return -1; /* finer than a millisecond */
        long long v = whole * unit + frac * unit / scale;
        if (v < lo || v > hi) return -1;
        *out = (long)v;
        return 0;
    }
    return -1;
}

/* The option getopt just handled, as typed ("-w" or "--wait"), for an
 * error about its value: the user may have written either. */
const char *cli_typed_option(char **argv)
{
    static char buf[64];
    /* The value is its own argument, or attached to the option's. */
    const char *opt = argv[optind - 1] == optarg && optind >= 2 ? argv[optind - 2] : argv[optind - 1];
    size_t n = strncmp(opt, "--", 2) == 0 ? strcspn(opt, "=") : 2;
    snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : sizeof buf - 1), opt);
    return buf;
}

/* A duration option's value, or the one-line usage error naming it. */
int cli_duration_arg(const char *synopsis, char **argv, long lo, long hi, long *out)
{
    if (cli_parse_duration(optarg, lo, hi, out) == 0) return 0;
    return cli_usage_error(synopsis, "bad %s '%s': expected a duration from %ld to %ld ms (%s)", cli_typed_option(argv),
                           optarg, lo, hi, DURATION_UNITS);
}

/* Check that a subcommand got exactly one NAME and no options; shared by
 * status, unlock and delete. Returns 0 or a usage exit status. */
int cli_one_name(const char *synopsis, int argc, char **argv, int first, const char **name)
{
    if (first < argc && argv[first][0] == '-' && argv[first][1] != '\0' && strcmp(argv[first], "--") != 0)
        return cli_unknown_option(synopsis, argv[first]);
    if (first < argc && strcmp(argv[first], "--") == 0) first++;
    if (first >= argc) return cli_usage_error(synopsis, "%s: missing NAME", argv[0]);
    if (first + 1 < argc) return cli_usage_error(synopsis, "%s: too many arguments", argv[0]);
    *name = argv[first];
    return cli_check_name(synopsis, *name, 0);
}

/* The options of `status` and `list`: --json and --help, nothing else.
 * 0 with *json set, -1 after printing the subcommand's help, or a usage
 * exit status. optind is left at the first operand. */
int cli_json_options(const char *synopsis, int argc, char **argv, int *json)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    optind = 0;
    while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (opt) {
        case 'j': *json = 1; break;
        case 'h': cli_print_sub_help(argv[0]); return -1;
        default: return cli_unknown_option(synopsis, cli_bad_option(argv));
        }
    }
    return 0;
}

/* COMMAND from what follows NAME: "[--] COMMAND [ARG...]", or flock(1)'s
 * "-c 'SHELL COMMAND'" right after NAME; nothing else after NAME is read
 * as an option, so COMMAND's own options stay COMMAND's. */
int cli_command_operands(const char *synopsis, int argc, char **argv, int at, cli_command *c)
{
    const char *sub = argv[0];
    if (at < argc && (strcmp(argv[at], "-c") == 0 || strcmp(argv[at], "--command") == 0)) {
        if (c->shell_command) return cli_usage_error(synopsis, "%s: -c given twice", sub);
        if (at + 2 != argc) return cli_usage_error(synopsis, "%s: %s takes exactly one SHELL COMMAND", sub, argv[at]);
        c->shell_command = argv[at + 1];
        at = argc;
    } else if (at < argc && strcmp(argv[at], "--") == 0) {
        if (++at == argc) return cli_usage_error(synopsis, "%s: missing COMMAND after '--'", sub);
    }
    if (c->shell_command) {
        if (at < argc) return cli_usage_error(synopsis, "%s: give COMMAND or -c, not both", sub);
        c->shell_argv[0] = "/bin/sh";
        c->shell_argv[1] = "-c";
        c->shell_argv[2] = (char *)c->shell_command;
        c->shell_argv[3] = NULL;
        c->command = c->shell_argv;
        return 0;
    }
    c->command = at < argc ? argv + at : NULL;
    return 0;
}
