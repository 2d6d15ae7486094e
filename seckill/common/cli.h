/*
 * cli.h -- what seckill's subcommands share on the command line, so that
 * main.c, serve (service/serve.c) and the tools (tools/) agree without
 * calling each other: the defaults, the exit codes (documented in the
 * usage text and docs/seckill.1), the usage text and how an option error
 * is said (cli.c).
 */
#ifndef SECKILL_CLI_H
#define SECKILL_CLI_H

#include <stdio.h>

#define DEFAULT_LISTEN "127.0.0.1:8080"
#define DEFAULT_DB "seckill.db"
#define SK_DEFAULT_SECRET_FILE "seckill.secret"

/* Exit codes, after sysexits.h where one fits (as the dlock CLI does). */
#define EXIT_CHECK 1        /* verify: an invariant broke; load: the run was not correct */
#define EXIT_USAGE 64       /* bad option or argument */
#define EXIT_UNAVAILABLE 69 /* Redis, the database, the server or the secret file unusable */
#define EXIT_SOFTWARE 70    /* internal error (out of memory, threads) */
#define EXIT_TEMPFAIL 75    /* verify: the order stream did not drain within --wait */

/* The usage text of every subcommand. */
void sk_usage(FILE *f);

/* What follows a usage error's one line, instead of the whole text. */
#define SK_HELP_HINT "Try 'seckill --help' for more information.\n"

/* getopt_long's complaint about argv (optstring ":", opterr 0: c is '?'
 * for an unknown option, ':' for a missing value) as one line on stderr. */
void sk_opt_error(const char *cmd, int c, char *const *argv);

#endif
