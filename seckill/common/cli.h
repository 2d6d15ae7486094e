/*
 * commands.h -- the subcommands other than serve and token, each in its
 * own file, and what they share with main.c: the usage text and the exit
 * codes (documented in the usage text and docs/seckill.1).
 */
#ifndef SECKILL_COMMANDS_H
#define SECKILL_COMMANDS_H

#include <stdio.h>

#define DEFAULT_DB "seckill.db"

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

int sk_cmd_verify(int argc, char **argv);
int sk_cmd_load(int argc, char **argv);

#endif
