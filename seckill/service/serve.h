/*
 * serve.h -- `seckill serve`, the service itself (serve.c), as main.c
 * dispatches to it.
 */
#ifndef SECKILL_SERVE_H
#define SECKILL_SERVE_H

/* Run the service until SIGINT or SIGTERM; argv[0] is "serve". The exit
 * status (common/cli.h): 0, EXIT_USAGE or EXIT_UNAVAILABLE. */
int sk_cmd_serve(int argc, char **argv);

#endif
