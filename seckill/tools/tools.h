/*
 * tools.h -- the subcommands besides serve, one file each, as main.c
 * dispatches to them: token (token.c), load (load.c), verify (verify.c).
 * argv[0] is the subcommand's name; each returns the exit status
 * (common/cli.h).
 */
#ifndef SECKILL_TOOLS_H
#define SECKILL_TOOLS_H

int sk_cmd_token(int argc, char **argv);
int sk_cmd_load(int argc, char **argv);
int sk_cmd_verify(int argc, char **argv);

#endif
