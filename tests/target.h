/*
 * The deployment a suite runs against, so that one suite proves the same
 * behaviour on one server, on Sentinel and on Cluster. DLOCK_TEST_TARGET
 * picks it: "single" (the default: one redis-server from harness.h),
 * "tls" (one redis-server the library reaches over TLS only: rediss://,
 * certificates from th_tls_certs; the harness's own commands use its
 * plaintext unix socket), "sentinel" or "cluster" (the topologies of
 * th_topology.h). ctest runs each such suite once per target
 * (tests/CMakeLists.txt).
 *
 * A suite talks to the servers only through these calls: commands go to
 * the master serving a key, so assertions about keys hold on every target.
 * Cases that need one server's particulars (a restart without
 * persistence, ACL users, databases, a TCP-only trick) call
 * th_target_require_single() first and are skipped elsewhere.
 */
#ifndef DLOCK_TEST_TARGET_H
#define DLOCK_TEST_TARGET_H

#include <pthread.h>
#include <stdarg.h>
#include <hiredis/hiredis.h>

#include "harness.h"
#include "th_topology.h"

typedef enum th_target_kind { TH_TARGET_SINGLE = 0, TH_TARGET_SENTINEL, TH_TARGET_CLUSTER } th_target_kind;

typedef struct th_target {
    th_target_kind kind;
    const char *name; /* "single", "tls", "sentinel" or "cluster" */
    char url[512];    /* what clients connect to */
    char certs[64];   /* "tls": the certificates' directory */
    th_redis single;  /* TH_TARGET_SINGLE */
    th_topology topo; /* otherwise */
} th_target;

/* Start the target DLOCK_TEST_TARGET names; `extra_conf` (may be NULL)
 * goes to a single server's config only. Returns 0 on success. */
int th_target_start(th_target *t, const char *extra_conf);
void th_target_stop(th_target *t);

/* One command on the master serving `key` (any master when NULL). Free
 * the reply with freeReplyObject(); NULL when unreachable. */
redisReply *th_target_cmd(th_target *t, const char *key, const char *fmt, ...);
redisReply *th_target_vcmd(th_target *t, const char *key, const char *fmt, va_list ap);

/* A connection to the master serving `key` (free with redisFree()), for
 * tests that keep one, e.g. in a child process. NULL when unreachable. */
redisContext *th_target_connect(th_target *t, const char *key);

/* How many times the masters have run `command` (lower case, e.g.
 * "evalsha") since they started, summed; -1 when it cannot be read. */
long long th_target_calls(th_target *t, const char *command);

/* Keys matching `pattern` on all masters together (KEYS on each); the
 * first one found is copied to `first` (may be NULL). -1 on failure. */
long th_target_keys(th_target *t, const char *pattern, char *first, size_t size);

/* The port of the master serving `key` (0 for a single server on its unix
 * socket is never returned: single servers answer their TCP port). */
int th_target_master_port(th_target *t, const char *key);

/* SIGSTOP / SIGCONT the master serving `key`. */
int th_target_pause(th_target *t, const char *key);
int th_target_resume(th_target *t, const char *key);

/* SIGSTOP the master serving `key` now and SIGCONT it `ms` later from a
 * thread of its own, so that a call made meanwhile waits in the server's
 * socket and is answered late; th_target_pause_join() waits for the
 * resume and returns 0 when both worked. */
typedef struct th_pause_timer {
    pthread_t tid;
    th_target *t;
    const char *key;
    long ms;
    int rc;
} th_pause_timer;
int th_target_pause_for(th_target *t, const char *key, long ms, th_pause_timer *pt);
int th_target_pause_join(th_pause_timer *pt);

/* Empty every master (and wait for replicas): a clean slate between cases
 * that share one target. */
int th_target_flush(th_target *t);

/* A cmocka group fixture for the usual suite, whose cases share one
 * target: th_target_suite_setup starts `t` (the one named by
 * th_target_run_suite), th_target_suite_teardown stops it and any server a
 * failed case left running. Use th_target_run_suite(tests, &t) in main()
 * instead of cmocka_run_group_tests (a macro too: it needs the array). */
void th_target_suite_use(th_target *t);
int th_target_suite_setup(void **state);
int th_target_suite_teardown(void **state);
#define th_target_run_suite(tests, t)                                                                                  \
    (th_target_suite_use(t), cmocka_run_group_tests(tests, th_target_suite_setup, th_target_suite_teardown))

/* Skip the calling cmocka test unless the target is a single server. */
#define th_target_require_single(t)                                                                                    \
    do {                                                                                                               \
        if ((t)->kind != TH_TARGET_SINGLE) {                                                                           \
            print_message("skipped on %s: needs a single server\n", (t)->name);                                        \
            skip();                                                                                                    \
        }                                                                                                              \
    } while (0)

#endif
