/*
 * commands.h -- the subcommands other than serve and token, each in its
 * own file, and what they share with main.c.
 */
#ifndef SECKILL_COMMANDS_H
#define SECKILL_COMMANDS_H

#include <stdio.h>

#define DEFAULT_DB "seckill.db"
#define EXIT_USAGE 2

/* The usage text of every subcommand. */
void sk_usage(FILE *f);

int sk_cmd_verify(int argc, char **argv);
int sk_cmd_load(int argc, char **argv);

#endif
