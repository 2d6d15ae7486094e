/*
 * Helpers for the seckill suites: run `seckill serve` as a real process
 * against a real redis-server (tests/harness.c) and a real database, talk
 * HTTP/1.1 to it over plain sockets (no client library), and look into the
 * database.
 *
 * Every suite runs once per database: its program takes "sqlite" or
 * "postgres" as its argument (two ctest entries), and the helpers below
 * hide which one is in use. With "postgres" the program starts its own
 * PostgreSQL server (pg_harness.h) and gives each test a fresh schema.
 *
 * And once per Redis deployment (tests/target.h: DLOCK_TEST_TARGET is
 * single, sentinel or cluster): a suite starts its th_target, gives
 * `seckill` its URL, and reaches a voucher's keys through the helpers
 * below, which route by the voucher's hash tag.
 */
#ifndef SECKILL_TEST_H
#define SECKILL_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"
#include "target.h"

/* Pick the database from argv[1] ("sqlite" or "postgres") and start
 * PostgreSQL when needed. 0 to go on; otherwise the exit code for main:
 * 77 (ctest's SKIP_RETURN_CODE) with the reason printed when PostgreSQL
 * cannot run here, 64 for a bad argument. */
int skt_backend_init(int argc, char **argv);
/* Stop what skt_backend_init started. */
void skt_backend_stop(void);
/* "sqlite@single", "postgres@cluster", ...: the cmocka group name, so a
 * report says which database and which deployment failed. */
const char *skt_backend_name(void);
int skt_is_postgres(void);
/* The PostgreSQL server of a "postgres" run (NULL otherwise), for a test
 * that sets up roles of its own. */
const struct skt_pg *skt_pg_server(void);

/* A scratch directory with a secret file, and a fresh empty database:
 * a SQLite file in the directory, or a new PostgreSQL schema. `db` is the
 * URL to give `seckill serve --db` and `seckill verify --db`. */
typedef struct skt_dir {
    char path[128];
    char secret_file[192];
    char db[512];
    unsigned char secret[64];
    size_t secret_len;
} skt_dir;

int skt_dir_make(skt_dir *d);
void skt_dir_remove(skt_dir *d);

/* A token for `uid` valid for an hour, or expired when `expired`. */
void skt_token(const skt_dir *d, int64_t uid, int expired, char *out, size_t cap);

typedef struct skt_serve {
    pid_t pid;
    int port;
    char out[256];
    char err[256];
} skt_serve;

/*
 * Start `seckill serve --listen 127.0.0.1:0 --redis URL --db DB
 * --secret-file F --strategy S` plus `extra` args (NULL-terminated, may be
 * NULL), with `env` ("K=V" strings, NULL-terminated, may be NULL) added to
 * the environment. Waits for the "listening" line. 0 on success (port 0
 * when `extra` has its own --listen unix:PATH). With
 * `redis_url` NULL there is no --redis: serve starts its private
 * redis-server.
 */
int skt_serve_start(skt_serve *s, const skt_dir *d, const char *redis_url, const char *strategy,
                    const char *const *extra, const char *const *env);

/* SIGTERM and wait; returns the exit status (128+N for a signal). Prints
 * its stderr when that is not 0. */
int skt_serve_stop(skt_serve *s);

/* Wait up to `ms` for it to exit by itself; its exit status, or -1. */
int skt_serve_wait(skt_serve *s, int ms);

/* Wait up to `ms` for it to stop itself (SIGSTOP, the writer's test
 * hooks); 0 once stopped, -1 if it did not (or exited). */
int skt_serve_wait_stopped(skt_serve *s, int ms);

/* SIGKILL it and reap it; returns 128 + SIGKILL. */
int skt_serve_kill(skt_serve *s);

/* SIGKILL every serve process still running (test teardown). */
void skt_kill_all(void);

/* The fixture most suites share: a Redis target, a scratch directory,
 * one `seckill serve` (redis strategy) on them, and tokens for the admin
 * (user 0) and users 1 and 2, each `cap` bytes. 0 when all started. */
int skt_app_start(th_target *srv, skt_dir *dir, skt_serve *sv, char *admin, char *user1, char *user2, size_t cap);
/* Stop it, with any server a case that failed half-way left behind: 0
 * when the service stopped cleanly. */
int skt_app_stop(th_target *srv, skt_dir *dir, skt_serve *sv);

/* Print its stderr (for failing tests). */
void skt_serve_dump(const skt_serve *s);

/* For a service that fell behind without a word: print its writer and
 * stream lines of /metrics and every thread's stack (gdb, when the
 * machine has it), so a stall that happens once in many runs shows where
 * it waited. */
void skt_serve_stall_report(const skt_serve *s);

/* One keep-alive connection. */
int skt_connect(int port);

/*
 * Send one request on `fd` and read the response. `token` and `body` may
 * be NULL. The body goes to resp[cap] (NUL-terminated). Returns the status
 * or -1 on a socket error / malformed response.
 */
int skt_request(int fd, const char *method, const char *path, const char *token, const char *body, char *resp,
                size_t cap);

/* The same on a fresh connection, closed afterwards. */
int skt_http(int port, const char *method, const char *path, const char *token, const char *body, char *resp,
             size_t cap);

/* Send raw bytes on a fresh connection and read one response. */
int skt_raw(int port, const char *raw, size_t len, char *resp, size_t cap);

/* Create a voucher as admin; returns its id or -1. */
long long skt_voucher(int port, const skt_dir *d, const char *title, long stock, long long begin, long long end);

/* A string value of a JSON response body, or "" (static buffer). */
const char *skt_json_str(const char *body, const char *key);
/* An integer value of a JSON response body, or -1. */
long long skt_json_int(const char *body, const char *key);

/* SELECT one integer from the database (a fresh connection); -1 when no row. */
long long skt_db_int(const skt_dir *d, const char *sql);

/* Run statements on the database (to corrupt it on purpose). 0 on success. */
int skt_db_exec(const skt_dir *d, const char *sql);

/* Hold the database's write lock from another connection (SQLite: an
 * open BEGIN IMMEDIATE; PostgreSQL: every voucher row locked FOR UPDATE,
 * which stalls stock updates and order inserts) until skt_db_release:
 * writers wait, readers do not. A stalled database, for real. 0 on
 * success. */
int skt_db_hold(const skt_dir *d);
void skt_db_release(void);

/* Run a program (no shell) and wait; its exit status (128+N if killed),
 * its stdout in out[cap] (may be NULL). argv is NULL-terminated. */
int skt_run(char *out, size_t cap, const char *const *argv);
/* The same with stderr in out as well. */
int skt_run_err(char *out, size_t cap, const char *const *argv);

/* Poll `sql` until it returns `want` or `ms` pass; returns the last value. */
long long skt_db_wait(const skt_dir *d, const char *sql, long long want, int ms);

/* A Redis command about voucher `voucher`, sent to the master holding
 * its keys; the reply (freeReplyObject), or NULL. */
redisReply *skt_redis_cmd(th_target *t, long long voucher, const char *fmt, ...);

/* An integer (or numeric string) reply of such a command, or -1. */
long long skt_redis_int(th_target *t, long long voucher, const char *fmt, ...);

/* Pending count of the writers' group on a stream (XPENDING summary). */
long long skt_pending(th_target *t, long long voucher);

#endif
