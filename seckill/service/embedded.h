/*
 * embedded.h -- a private redis-server for `seckill serve` run with no
 * --redis: started on a unix socket in a fresh temp dir, no TCP port, no
 * persistence, stopped by PID at exit (and by the kernel if we die).
 */
#ifndef SECKILL_EMBEDDED_H
#define SECKILL_EMBEDDED_H

#include <stddef.h>
#include <sys/types.h>

typedef struct sk_embedded {
    pid_t pid;
    char dir[64];
    char url[128]; /* unix:///tmp/seckill-XXXXXX/redis.sock */
} sk_embedded;

/* Start it and wait until it answers PING. 0, or -1 with err. */
int sk_embedded_start(sk_embedded *e, char *err, size_t errlen);

/* SIGTERM, wait (SIGKILL after 5 s), remove the directory. Idempotent. */
void sk_embedded_stop(sk_embedded *e);

#endif
