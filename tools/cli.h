/*
 * What the files of the dlock tool share: exit statuses, limits, the
 * synopsis lines, and the declarations of messages (message.c), option
 * parsing (options.c), help (help.c), connecting (connect.c), the JSON
 * printer (json.c) and the subcommands (cmd_*.c). One concern per file,
 * as in hiredis; main() is in dlock.c.
 */
#ifndef DLOCK_TOOLS_CLI_H
#define DLOCK_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "dlock.h"

/* ------------------------------------------------------------------------ */
/* Exit statuses and limits                                                  */
/* ------------------------------------------------------------------------ */

/* Exit statuses (sysexits.h values, spelled out so the man page and the
 * code can be checked against each other at a glance). */
#define EXIT_NOT_HELD 1     /* status: lock free; unlock --force: nothing held */
#define EXIT_USAGE 64       /* EX_USAGE: bad arguments or malformed URL */
#define EXIT_WRONG_KIND 65  /* EX_DATAERR: NAME is in use as another kind */
#define EXIT_UNAVAILABLE 69 /* EX_UNAVAILABLE: Redis unreachable or AUTH refused */
#define EXIT_SOFTWARE 70    /* EX_SOFTWARE: any other internal error */
#define EXIT_BUSY 75        /* EX_TEMPFAIL: lock not acquired within WAIT */
#define EXIT_LOST 76        /* the lease was lost before or while COMMAND ran */
#define EXIT_CONFIG 78      /* EX_CONFIG: semaphore -p or rate -r/-b differs from what is stored */
#define EXIT_NOEXEC 127     /* COMMAND could not be executed, as in sh(1) */

#define DEFAULT_URL "redis://127.0.0.1:6379"
#define MAX_MS 2147483647L
#define MAX_ID_COUNT 1000000L
#define MAX_URLS DLOCK_REDLOCK_MAX_MASTERS /* -u given more than once: RedLock masters */
/* -E takes an exit status, which a shell sees modulo 256. */
#define MAX_EXIT_CODE 255

/* The synopsis of each subcommand: --help, and every usage error. */
#define USAGE_LOCK                                                                                                     \
    "dlock [-u URL]... lock [--fair|--read|--write|-s|-x] [-w WAIT] [-n] [-t TTL] [-E N] [-v] [-q] "                   \
    "[--retry-connect] [--fence-floor TOKEN] [--safety-margin PCT] [--until-eof] NAME "                                \
    "[[--] COMMAND [ARG...] | -c 'SHELL COMMAND']"
#define USAGE_SEM                                                                                                      \
    "dlock [-u URL] semaphore -p PERMITS [-w WAIT] [-n] [-t TTL] [-E N] [-v] [-q] [--retry-connect] "                  \
    "[--safety-margin PCT] [--until-eof] NAME [[--] COMMAND [ARG...] | -c 'SHELL COMMAND'] | "                         \
    "semaphore NAME --set-permits N"
#define USAGE_RATE                                                                                                     \
    "dlock [-u URL] rate -r RATE[/UNIT] [-b BURST] [-w WAIT] [-n] [-E N] [-v] [-q] [--subject S] "                     \
    "[--change] NAME [[--] COMMAND [ARG...] | -c 'SHELL COMMAND'] | rate NAME --status [--json] "                      \
    "[--subject S]"
#define USAGE_LATCH "dlock [-u URL] latch NAME --set N | --count-down | --await [-w WAIT]"
#define USAGE_ID "dlock [-u URL] id [-n COUNT] PREFIX | id --count PREFIX [--date YYYY-MM-DD]"
#define USAGE_STATUS "dlock [-u URL] status [--json] NAME"
#define USAGE_LIST "dlock [-u URL] list [--json] [PATTERN]"
#define USAGE_UNLOCK "dlock [-u URL] unlock --force NAME"
#define USAGE_DELETE "dlock [-u URL] delete [--force] NAME"
#define USAGE_MISC "dlock --help | --version | dlock SUBCOMMAND --help"
/* How a duration is written, for help and usage errors. */
#define DURATION_FORMS "seconds (10, 1.5), or a number with a unit: 500ms, 10s, 1.5s, 2m, 1h"
#define DURATION_UNITS "a bare number is seconds; units: 500ms, 10s, 1.5s, 2m, 1h"

/* ------------------------------------------------------------------------ */
/* Messages (message.c)                                                      */
/* ------------------------------------------------------------------------ */

/* Write `s` with control characters and backslashes escaped. */
void cli_put_escaped(FILE *f, const char *s);
/* One line on stderr: "dlock: " and the message, escaped. */
void cli_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A usage error with `synopsis` on the same line; returns EXIT_USAGE. */
int cli_usage_error(const char *synopsis, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A usage error pointing at --help; returns EXIT_USAGE. */
int cli_general_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A warning, not shown under -q (cli_set_quiet). */
void cli_warnf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_set_quiet(int on);
/* A long argument cut for a message, with its length (one static buffer). */
const char *cli_shown(const char *s);
/* A span of time as a person reads it: 850ms, 12.3s, 3m12s, 2h05m, 3d04h. */
void cli_human_ms(long long ms, char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Options (options.c)                                                       */
/* ------------------------------------------------------------------------ */

int cli_check_name(const char *synopsis, const char *name, int is_prefix);
const char *cli_bad_option(char **argv);
/* The usage error of an option (as typed) the subcommand does not know, with a hint when it is
 * a global option given after the subcommand. */
int cli_unknown_option(const char *synopsis, const char *opt);
int cli_parse_number(const char *s, long lo, long hi, long *out);
int cli_parse_token(const char *s, uint64_t *out);
int cli_parse_duration(const char *s, long lo, long hi, long *out);
const char *cli_typed_option(char **argv);
int cli_duration_arg(const char *synopsis, char **argv, long lo, long hi, long *out);
int cli_json_options(const char *synopsis, int argc, char **argv, int *json);

/* What `lock`, `semaphore` and `rate` run: COMMAND [ARG...] from argv, or
 * /bin/sh -c SHELL_COMMAND; `command` NULL when nothing was given. */
typedef struct cli_command {
    const char *shell_command; /* -c, given before NAME or right after it */
    char *shell_argv[4];       /* /bin/sh -c SHELL_COMMAND */
    char **command;
} cli_command;
/* COMMAND from argv[at] on (what follows NAME). 0 or a usage exit status. */
int cli_command_operands(const char *synopsis, int argc, char **argv, int at, cli_command *c);

/* ------------------------------------------------------------------------ */
/* Help (help.c)                                                             */
/* ------------------------------------------------------------------------ */

void cli_print_synopsis(FILE *f);
void cli_print_help(void);
void cli_print_sub_help(const char *cmd);
int cli_help_done(void);

/* ------------------------------------------------------------------------ */
/* Connecting (connect.c)                                                    */
/* ------------------------------------------------------------------------ */

/* The global options every client gets: the password of --password-file
 * or DLOCK_PASSWORD (may be NULL, owned by the caller) and --timeout (0:
 * the library's defaults). */
void cli_set_client_globals(const char *password, long timeout_ms);
/* --timeout, or 0 when not given. */
long cli_timeout_ms(void);
int cli_exit_for(dlock_status st);
dlock_options cli_client_options(const dlock_options *base);
int cli_open_client(const char *url, const dlock_options *opts, dlock_client **out);
/* Timeouts of `o` capped at `wait_ms` (a -w; DLOCK_WAIT_FOREVER: none)
 * plus a second. */
void cli_cap_timeouts(dlock_options *o, long wait_ms);

/* ------------------------------------------------------------------------ */
/* JSON (json.c)                                                             */
/* ------------------------------------------------------------------------ */

void cli_json_string(FILE *f, const char *s);
void cli_json_str_member(FILE *f, const char *key, const char *value);
void cli_json_num_member(FILE *f, const char *key, long long value, int known);

/* ------------------------------------------------------------------------ */
/* Subcommands (cmd_*.c)                                                     */
/* ------------------------------------------------------------------------ */

int cli_cmd_hold(const char *const *urls, size_t n_urls, int is_sem, int argc, char **argv);
int cli_cmd_latch(const char *url, int argc, char **argv);
int cli_cmd_rate(const char *url, int argc, char **argv);
int cli_cmd_id(const char *url, int argc, char **argv);
int cli_cmd_status(const char *url, int argc, char **argv);
int cli_cmd_unlock(const char *url, int argc, char **argv);
int cli_cmd_list(const char *url, int argc, char **argv);
int cli_cmd_delete(const char *url, int argc, char **argv);
/* `semaphore NAME --set-permits N`: resize, run nothing. */
int cli_sem_resize(const char *url, const char *name, long permits);
/* Check that a subcommand got exactly one NAME from argv[first] on (a
 * leading "--" allowed, no options). Returns 0 or a usage exit status. */
int cli_one_name(const char *synopsis, int argc, char **argv, int first, const char **name);

#endif
