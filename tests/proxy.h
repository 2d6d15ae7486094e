/*
 * A real TCP proxy for the tests: a thread that listens on a free loopback
 * port and forwards every connection, byte for byte, to a real
 * redis-server started by the harness. It can be told to lose one reply:
 * the next request that contains a given string is forwarded, the
 * server's reply is awaited (so the command surely ran) and thrown away,
 * and the connection is closed. That is the one failure a client cannot
 * tell apart from a command that never arrived, and so the one that makes
 * it resend. It can also hold one request back for a while, to open a
 * race window deterministically.
 */
#ifndef DLOCK_TEST_PROXY_H
#define DLOCK_TEST_PROXY_H

#include "harness.h"

typedef struct th_proxy th_proxy;

/* Start a proxy in front of `upstream` (its unix socket). NULL on failure. */
th_proxy *th_proxy_start(const th_redis *upstream);

/* "redis://127.0.0.1:PORT": connect through the proxy. */
const char *th_proxy_url(const th_proxy *p);

/* Arm: lose the reply of the next request whose bytes contain `match`
 * (e.g. an object's name). One request only; later ones pass. */
void th_proxy_lose_next_reply(th_proxy *p, const char *match);

/* Arm: hold the next request whose bytes contain `match` for `ms`
 * milliseconds before forwarding it (that connection alone waits; the
 * others go on). One request only. */
void th_proxy_delay_next(th_proxy *p, const char *match, long ms);

/* Cut (on 1) or heal (on 0) the network between every client and the
 * server, as a partition does: nothing is forwarded either way and no
 * connection is closed or refused, so a client's reads simply time out.
 * Bytes sent meanwhile are delivered when it heals, as TCP would
 * retransmit them. */
void th_proxy_partition(th_proxy *px, int on);

/* Add `ms` of latency to every request from now on (0: none): each is
 * held that long before it is forwarded, and its connection sends nothing
 * else meanwhile, as on a slow link. */
void th_proxy_latency(th_proxy *px, long ms);

/* How many replies were lost so far. */
int th_proxy_lost(th_proxy *p);

/* Stop the thread and close every connection. */
void th_proxy_stop(th_proxy *p);

#endif
