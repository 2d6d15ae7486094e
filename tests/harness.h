/*
 * Test harness: real redis-server processes for the suites, started on a
 * unix socket and a free loopback TCP port in a private temp dir, stopped
 * by PID. Never a fake Redis.
 */
#ifndef DLOCK_TEST_HARNESS_H
#define DLOCK_TEST_HARNESS_H

#include <stdarg.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>

typedef struct th_redis {
    pid_t pid;
    int port;             /* loopback TCP port */
    char dir[128];        /* private temp dir (socket, config, log) */
    char sock[192];       /* unix socket path */
    char url[256];        /* unix:// URL of this server */
    char tcp_url[128];    /* redis://127.0.0.1:PORT URL of this server */
    char extra[512];      /* extra config lines given at start */
    char clock[32];       /* libfaketime offset of its clock ("-60s"), or "" */
    char clock_file[192]; /* or a file holding that offset, read again every second */
    int tls_port;         /* th_redis_start_tls: its TLS port (its TCP port stays plaintext) */
    char tls_url[512];    /* rediss://127.0.0.1:TLS_PORT?cacert=DIR/ca.pem */
} th_redis;

/* The server program started by th_redis_start() and by the topologies:
 * DLOCK_TEST_SERVER when set (e.g. "valkey-server", looked up in PATH),
 * redis-server otherwise. */
const char *th_server_binary(void);

/* 1 when process `pid` runs `program` (as PATH finds it, links resolved:
 * redis-server and redis-sentinel are one file), 0 when it runs another,
 * -1 when either cannot be found. */
int th_pid_runs(pid_t pid, const char *program);

/* Start a private redis-server; `extra_conf` (may be NULL) is appended to its
 * config, e.g. "requirepass s3cret\n". Returns 0 on success. */
int th_redis_start(th_redis *r, const char *extra_conf);

/* Certificates for TLS tests in `dir`, made by scripts/tls-certs.sh (see
 * it for the list: a CA, a server's for localhost and 127.0.0.1, one for
 * the wrong host, an expired one, a client's, a CA that signed none).
 * 0 on success. */
int th_tls_certs(const char *dir);

/* Start a redis-server that speaks TLS on a free loopback port, with the
 * certificate `cert` ("server", "wronghost", "expired") from `certdir`,
 * the unix socket and the TCP port still plaintext (for the harness's own
 * commands, and tests that build URLs of their own from them);
 * `extra_conf` as for th_redis_start() (e.g.
 * "tls-auth-clients yes\n"; client certificates are optional otherwise).
 * Fills tls_port and tls_url. */
int th_redis_start_tls(th_redis *r, const char *certdir, const char *cert, const char *extra_conf);

/* Stop it (SIGTERM, then SIGKILL after 5 s) and remove its directory. */
void th_redis_stop(th_redis *r);

/* Stop (SIGKILL) every server this program started and has not stopped,
 * and remove their directories: for suite teardowns, after a test that
 * failed half-way. Also run at exit; and every server dies with the
 * program anyway (PR_SET_PDEATHSIG). */
void th_redis_stop_all(void);

/* Remove a server's directory (after a server that died with its program). */
void th_redis_remove_dir(const char *dir);

/* th_redis_stop_all() as a cmocka setup/teardown function. */
int th_stop_all_fixture(void **state);

/* Kill it (SIGKILL) and start a fresh, empty server on the same socket and
 * port: a restart without persistence. Returns 0 on success. */
int th_redis_restart(th_redis *r);

/* th_redis_restart, then 0 only if `key` is gone: proof that a test's
 * state did not survive (a test about what a restart wipes). */
int th_redis_restart_wiped(th_redis *r, const char *key);

/* Run the server's clock `offset` away from the machine's ("-60s",
 * "+1h", as libfaketime's FAKETIME reads it; NULL or "" for the real
 * clock) from its next (re)start on. The clocks of the test program and of
 * the library are not touched: only what the server thinks (TIME, key
 * expiry). Returns -1 when libfaketime is not installed. */
int th_redis_clock_offset(th_redis *r, const char *offset);

/* Run the server's clock under libfaketime from its next (re)start on,
 * with the offset read from `path` (as FAKETIME_TIMESTAMP_FILE: "+0s",
 * "+5s", "-60s") and read again at most a second after it changes
 * (FAKETIME_CACHE_DURATION=1), so th_redis_clock_jump() moves the clock
 * of a running server. Only the wall clock is faked, never the monotonic
 * one its event loop uses. Returns -1 when libfaketime is not installed. */
int th_redis_clock_file(th_redis *r, const char *path);

/* Write `offset` into the clock file of a server started after
 * th_redis_clock_file(). The server reads it up to two seconds later
 * (libfaketime counts its cache in whole seconds): wait for that with
 * th_redis_clock_settle(). 0 on success. */
int th_redis_clock_jump(const th_redis *r, const char *offset);

/* Wait until the server's TIME is `offset_s` seconds (give or take one)
 * from our own wall clock, polling every few milliseconds for up to
 * `timeout_ms`: the moment a jump has surely taken effect. 0 once it has,
 * -1 on timeout or when the server cannot be asked. */
int th_redis_clock_settle(const th_redis *r, long offset_s, int timeout_ms);

/* SIGSTOP / SIGCONT the server. */
void th_redis_pause(th_redis *r);
void th_redis_resume(th_redis *r);

/* A direct hiredis connection to the server, for assertions. Free it with
 * redisFree(). NULL on failure. */
redisContext *th_redis_connect(const th_redis *r);

/* Run one command on a fresh connection; returns the reply (free it with
 * freeReplyObject) or NULL. */
redisReply *th_redis_cmd(const th_redis *r, const char *fmt, ...);

/* Run one command on connection `c` (may be NULL: returns NULL) and free
 * the connection: the body of every one-shot command helper. */
redisReply *th_vcmd_once(redisContext *c, const char *fmt, va_list ap);

/* How many times the server has run `command` (lower case, e.g.
 * "evalsha": every library script) since it started, from INFO
 * commandstats; -1 when it cannot be read. */
long long th_redis_calls(const th_redis *r, const char *command);

/* The same from a reply to INFO commandstats, which it frees (NULL: -1). */
long long th_info_calls(redisReply *info, const char *command);

/* A loopback TCP port that was free a moment ago (bind to port 0), or -1. */
int th_free_port(void);

/* Monotonic milliseconds. */
long long th_now_ms(void);

/* Path of a built program next to the test binaries (e.g. "dlock"), found
 * through the DLOCK_BIN_DIR environment variable or the compile-time
 * default. */
const char *th_bin(const char *name);

/* Create (or replace) `path` holding `text`, with permission bits `mode`
 * (chmod, whatever the umask): password and secret files for the tools.
 * 0 on success. */
int th_write_file(const char *path, const char *text, unsigned mode);

#endif
