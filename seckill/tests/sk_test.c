/* Helpers for the seckill suites; see sk_test.h. */
#include "sk_test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include "pg_harness.h"
#include "service/auth.h"
#include "tools/httpc.h"

#ifndef SECKILL_BIN
#define SECKILL_BIN "seckill"
#endif

static int use_pg;
static skt_pg pg;

/* One program, two ctest entries: the database is its only argument. */
int skt_backend_init(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "sqlite") != 0 && strcmp(argv[1], "postgres") != 0)) {
        fprintf(stderr, "usage: %s sqlite|postgres\n", argv[0]);
        return 64;
    }
    use_pg = strcmp(argv[1], "postgres") == 0;
    if (!use_pg) return 0;
    char why[256];
    if (skt_pg_start(&pg, why, sizeof why) != 0) {
        fprintf(stderr, "SKIPPED: the PostgreSQL suite needs a local PostgreSQL server: %s\n", why);
        return 77;
    }
    return 0;
}

/* A held lock would keep PostgreSQL from a fast shutdown. */
void skt_backend_stop(void)
{
    skt_db_release();
    if (use_pg) skt_pg_stop(&pg);
}

/* Names the cmocka group, so a report says which database and which
 * deployment failed. */
const char *skt_backend_name(void)
{
    static char name[64];
    const char *t = getenv("DLOCK_TEST_TARGET");
    snprintf(name, sizeof name, "%s@%s", use_pg ? "postgres" : "sqlite", t && *t ? t : "single");
    return name;
}

/* For the rare test that must know. */
int skt_is_postgres(void)
{
    return use_pg;
}

const skt_pg *skt_pg_server(void)
{
    return use_pg ? &pg : NULL;
}

/* A fresh database per test, so ids and counts start from zero. */
int skt_dir_make(skt_dir *d)
{
    static int schemas;
    memset(d, 0, sizeof *d);
    snprintf(d->path, sizeof d->path, "/tmp/seckill-test-XXXXXX");
    if (!mkdtemp(d->path)) return -1;
    snprintf(d->secret_file, sizeof d->secret_file, "%s/secret", d->path);
    if (use_pg) {
        char name[32];
        snprintf(name, sizeof name, "t%d", ++schemas);
        if (skt_pg_schema(&pg, name, d->db, sizeof d->db) != 0) return -1;
    } else {
        snprintf(d->db, sizeof d->db, "%s/seckill.db", d->path);
    }
    static const char s[] = "test-secret-0123456789abcdef";
    memcpy(d->secret, s, sizeof s - 1);
    d->secret_len = sizeof s - 1;
    FILE *f = fopen(d->secret_file, "w");
    if (!f) return -1;
    fprintf(f, "%s\n", s);
    fclose(f);
    return 0;
}

void skt_dir_remove(skt_dir *d)
{
    char cmd[256];
    if (!d->path[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->path);
    if (system(cmd) != 0) { /* best effort */
    }
    d->path[0] = '\0';
}

void skt_token(const skt_dir *d, int64_t uid, int expired, char *out, size_t cap)
{
    int64_t exp = (int64_t)time(NULL) + (expired ? -10 : 3600);
    if (sk_token_make(d->secret, d->secret_len, uid, exp, out, cap) != 0) out[0] = '\0';
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int counter;

/* Every serve process a test started and has not reaped: a failing
 * assertion jumps out of the test, and its server must not outlive it. */
static pid_t live[64];

static void track(pid_t pid)
{
    for (int i = 0; i < 64; i++)
        if (!live[i]) {
            live[i] = pid;
            return;
        }
}

static void untrack(pid_t pid)
{
    for (int i = 0; i < 64; i++)
        if (live[i] == pid) live[i] = 0;
}

void skt_kill_all(void)
{
    for (int i = 0; i < 64; i++)
        if (live[i] > 0) {
            kill(live[i], SIGKILL);
            waitpid(live[i], NULL, 0);
            live[i] = 0;
        }
}

int skt_serve_start(skt_serve *s, const skt_dir *d, const char *redis_url, const char *strategy,
                    const char *const *extra, const char *const *env)
{
    memset(s, 0, sizeof *s);
    int n = counter++;
    snprintf(s->out, sizeof s->out, "%s/serve%d.out", d->path, n);
    snprintf(s->err, sizeof s->err, "%s/serve%d.err", d->path, n);
    const char *argv[40];
    int argc = 0;
    argv[argc++] = SECKILL_BIN;
    argv[argc++] = "serve";
    argv[argc++] = "--listen";
    argv[argc++] = "127.0.0.1:0";
    if (redis_url) {
        argv[argc++] = "--redis";
        argv[argc++] = redis_url;
    }
    argv[argc++] = "--db";
    argv[argc++] = d->db;
    argv[argc++] = "--secret-file";
    argv[argc++] = d->secret_file;
    argv[argc++] = "--strategy";
    argv[argc++] = strategy;
    /* A suite run can force the HTTP loop (tests/CMakeLists.txt), so both
     * of serve's loops answer the whole suite; a test's own flags come
     * after and win. */
    const char *loop = getenv("SKT_EVENT_LOOP");
    if (loop && *loop) {
        argv[argc++] = "--event-loop";
        argv[argc++] = loop;
    }
    for (int i = 0; extra && extra[i] && argc < 38; i++) argv[argc++] = extra[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
        int out = open(s->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(s->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (out < 0 || err < 0) _exit(126);
        dup2(out, 1);
        dup2(err, 2);
        execv(SECKILL_BIN, (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
    track(pid);
    long long deadline = now_ms() + 15000;
    while (now_ms() < deadline) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            untrack(pid);
            s->pid = 0;
            skt_serve_dump(s);
            return -1;
        }
        FILE *f = fopen(s->out, "r");
        if (f) {
            char line[256];
            if (fgets(line, sizeof line, f)) {
                const char *p = strstr(line, "http://127.0.0.1:");
                if (p && strchr(line, '\n')) {
                    s->port = atoi(p + 17);
                    fclose(f);
                    return s->port > 0 ? 0 : -1;
                }
                if (strstr(line, "listening on unix:") && strchr(line, '\n')) {
                    fclose(f);
                    return 0; /* an extra --listen unix:PATH; port stays 0 */
                }
            }
            fclose(f);
        }
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    untrack(pid);
    s->pid = 0;
    skt_serve_dump(s);
    return -1;
}

static int decode_status(int st)
{
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

int skt_serve_wait(skt_serve *s, int ms)
{
    if (s->pid <= 0) return -1;
    long long deadline = now_ms() + ms;
    do {
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            untrack(s->pid);
            s->pid = 0;
            return decode_status(st);
        }
        usleep(5000);
    } while (now_ms() < deadline);
    return -1;
}

/* WUNTRACED reports the stop, so the test kills it exactly there. */
int skt_serve_wait_stopped(skt_serve *s, int ms)
{
    if (s->pid <= 0) return -1;
    long long deadline = now_ms() + ms;
    do {
        int st;
        pid_t p = waitpid(s->pid, &st, WNOHANG | WUNTRACED);
        if (p == s->pid && WIFSTOPPED(st)) return 0;
        if (p == s->pid) {
            untrack(s->pid);
            s->pid = 0;
            return -1;
        }
        usleep(5000);
    } while (now_ms() < deadline);
    return -1;
}

/* A real crash: no handler runs, nothing is flushed or acknowledged. */
int skt_serve_kill(skt_serve *s)
{
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGKILL);
    int st;
    waitpid(s->pid, &st, 0);
    untrack(s->pid);
    s->pid = 0;
    return decode_status(st);
}

int skt_serve_stop(skt_serve *s)
{
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGTERM);
    int rc = skt_serve_wait(s, 15000);
    if (rc < 0 && s->pid > 0) {
        kill(s->pid, SIGKILL);
        int st;
        waitpid(s->pid, &st, 0);
        untrack(s->pid);
        s->pid = 0;
        rc = -1;
    }
    /* Whoever asserts on it, a stop that went wrong shows why. */
    if (rc != 0) skt_serve_dump(s);
    return rc;
}

void skt_serve_dump(const skt_serve *s)
{
    FILE *f = fopen(s->err, "r");
    if (!f) return;
    char line[512];
    fprintf(stderr, "---- %s\n", s->err);
    int n = 0;
    while (fgets(line, sizeof line, f) && n++ < 200) fputs(line, stderr);
    fclose(f);
}

void skt_serve_stall_report(const skt_serve *s)
{
    if (s->pid <= 0) return;
    static char resp[1 << 16];
    if (skt_http(s->port, "GET", "/metrics", NULL, NULL, resp, sizeof resp) == 200) {
        fprintf(stderr, "---- /metrics of %d (writer and stream lines)\n", (int)s->pid);
        for (char *line = strtok(resp, "\n"); line; line = strtok(NULL, "\n"))
            if (strncmp(line, "seckill_writer", 14) == 0 || strncmp(line, "seckill_stream", 14) == 0)
                fprintf(stderr, "%s\n", line);
    }
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)s->pid);
    fprintf(stderr, "---- threads of %s\n", pid);
    fflush(stderr);
    pid_t g = fork();
    if (g == 0) {
        dup2(2, 1);
        execlp("timeout", "timeout", "60", "gdb", "-p", pid, "-batch", "-nx", "-ex", "thread apply all bt", NULL);
        _exit(127);
    }
    if (g > 0) waitpid(g, NULL, 0);
}

int skt_connect(int port)
{
    return sk_httpc_connect("127.0.0.1", port, 20000);
}

int skt_request(int fd, const char *method, const char *path, const char *token, const char *body, char *resp,
                size_t cap)
{
    return sk_httpc_request(fd, method, path, token, body, resp, cap);
}

int skt_http(int port, const char *method, const char *path, const char *token, const char *body, char *resp,
             size_t cap)
{
    int fd = skt_connect(port);
    if (fd < 0) return -1;
    int st = skt_request(fd, method, path, token, body, resp, cap);
    close(fd);
    return st;
}

int skt_raw(int port, const char *raw, size_t len, char *resp, size_t cap)
{
    int fd = skt_connect(port);
    if (fd < 0) return -1;
    int st = sk_httpc_send_all(fd, raw, len) == 0 ? sk_httpc_read_response(fd, resp, cap) : -1;
    close(fd);
    return st;
}

long long skt_voucher(int port, const skt_dir *d, const char *title, long stock, long long begin, long long end)
{
    char tok[256], body[512], resp[1024];
    skt_token(d, 0, 0, tok, sizeof tok);
    snprintf(body, sizeof body, "{\"title\":\"%s\",\"stock\":%ld,\"begin\":%lld,\"end\":%lld}", title, stock, begin,
             end);
    int st = skt_http(port, "POST", "/api/vouchers", tok, body, resp, sizeof resp);
    if (st != 201) {
        fprintf(stderr, "create voucher: %d %s\n", st, resp);
        return -1;
    }
    return skt_json_int(resp, "id");
}

const char *skt_json_str(const char *body, const char *key)
{
    static __thread char out[256];
    out[0] = '\0';
    json_t *j = json_loads(body, 0, NULL);
    json_t *v = j ? json_object_get(j, key) : NULL;
    if (json_is_string(v)) snprintf(out, sizeof out, "%s", json_string_value(v));
    json_decref(j);
    return out;
}

long long skt_json_int(const char *body, const char *key)
{
    json_t *j = json_loads(body, 0, NULL);
    json_t *v = j ? json_object_get(j, key) : NULL;
    long long x = json_is_integer(v) ? (long long)json_integer_value(v) : -1;
    json_decref(j);
    return x;
}

/* Notices ("relation exists") are noise in test output. */
static void quiet(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;
}

/* One connection per call: tests read while the server writes, and a
 * fresh connection always sees the latest commit. */
static PGconn *pg_connect(const skt_dir *d)
{
    PGconn *c = PQconnectdb(d->db);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "test: postgres: %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    PQsetNoticeProcessor(c, quiet, NULL);
    return c;
}

/* The same SQL works on both databases: tests stick to the common subset. */
long long skt_db_int(const skt_dir *d, const char *sql)
{
    long long v = -1;
    if (use_pg) {
        PGconn *c = pg_connect(d);
        if (!c) return -1;
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) >= 1 && !PQgetisnull(r, 0, 0))
            v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        PQfinish(c);
        return v;
    }
    sqlite3 *db;
    if (sqlite3_open_v2(d->db, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return -1;
    }
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return v;
}

/* Corrupting the database on purpose proves verify notices. */
int skt_db_exec(const skt_dir *d, const char *sql)
{
    if (use_pg) {
        PGconn *c = pg_connect(d);
        if (!c) return -1;
        int rc = skt_pg_exec(c, sql);
        PQfinish(c);
        return rc;
    }
    sqlite3 *db;
    if (sqlite3_open(d->db, &db) != SQLITE_OK) {
        sqlite3_close(db);
        return -1;
    }
    sqlite3_busy_timeout(db, 5000);
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    sqlite3_close(db);
    return rc;
}

static sqlite3 *held_sqlite;
static PGconn *held_pg;

/* One held lock per program is all a test needs. */
int skt_db_hold(const skt_dir *d)
{
    skt_db_release();
    if (use_pg) {
        held_pg = pg_connect(d);
        if (!held_pg) return -1;
        PGresult *r = PQexec(held_pg, "BEGIN; SELECT id FROM vouchers FOR UPDATE");
        int ok = PQresultStatus(r) == PGRES_TUPLES_OK;
        PQclear(r);
        if (!ok) skt_db_release();
        return ok ? 0 : -1;
    }
    if (sqlite3_open(d->db, &held_sqlite) != SQLITE_OK) {
        skt_db_release();
        return -1;
    }
    sqlite3_busy_timeout(held_sqlite, 5000);
    if (sqlite3_exec(held_sqlite, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        skt_db_release();
        return -1;
    }
    return 0;
}

/* Idempotent: teardown calls it whatever the test did. */
void skt_db_release(void)
{
    if (held_pg) {
        PGresult *r = PQexec(held_pg, "COMMIT");
        PQclear(r);
        PQfinish(held_pg);
        held_pg = NULL;
    }
    if (held_sqlite) {
        sqlite3_exec(held_sqlite, "COMMIT", NULL, NULL, NULL);
        sqlite3_close(held_sqlite);
        held_sqlite = NULL;
    }
}

/* No shell: PostgreSQL URLs carry & and %, which a shell would eat. */
/* stdout, and with `err` stderr too, into out. */
static int run_capture(char *out, size_t cap, const char *const *argv, int err)
{
    int fds[2]; /* a socket pair, so a receive timeout bounds the wait */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        if (err) dup2(fds[1], 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    /* A hung command must fail the test, not hang the suite. */
    struct timeval tv = {90, 0};
    setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t len = 0;
    char sink[4096];
    for (;;) {
        char *dst = out && len + 1 < cap ? out + len : sink;
        size_t room = out && len + 1 < cap ? cap - 1 - len : sizeof sink;
        ssize_t n = read(fds[0], dst, room);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (dst != sink) len += (size_t)n;
    }
    close(fds[0]);
    if (out && cap) out[len] = '\0';
    int st;
    long long deadline = now_ms() + 90000;
    while (waitpid(pid, &st, WNOHANG) != pid) {
        if (now_ms() > deadline) {
            fprintf(stderr, "test: %s did not finish in 90 s; killed\n", argv[0]);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
    return decode_status(st);
}

int skt_run(char *out, size_t cap, const char *const *argv)
{
    return run_capture(out, cap, argv, 0);
}

int skt_run_err(char *out, size_t cap, const char *const *argv)
{
    return run_capture(out, cap, argv, 1);
}

long long skt_db_wait(const skt_dir *d, const char *sql, long long want, int ms)
{
    long long deadline = now_ms() + ms, v;
    for (;;) {
        v = skt_db_int(d, sql);
        if (v == want || now_ms() >= deadline) return v;
        usleep(20000);
    }
}

/* The master of a voucher's slot: one command on a fresh connection. */
static redisReply *voucher_vcmd(th_target *t, long long voucher, const char *fmt, va_list ap)
{
    char key[64];
    snprintf(key, sizeof key, "seckill:{v:%lld}:stock", voucher);
    return th_target_vcmd(t, key, fmt, ap);
}

redisReply *skt_redis_cmd(th_target *t, long long voucher, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = voucher_vcmd(t, voucher, fmt, ap);
    va_end(ap);
    return r;
}

long long skt_redis_int(th_target *t, long long voucher, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = voucher_vcmd(t, voucher, fmt, ap);
    va_end(ap);
    long long v = -1;
    if (rep && rep->type == REDIS_REPLY_INTEGER) v = rep->integer;
    else if (rep && rep->type == REDIS_REPLY_STRING) v = strtoll(rep->str, NULL, 10);
    if (rep) freeReplyObject(rep);
    return v;
}

long long skt_pending(th_target *t, long long voucher)
{
    redisReply *rep = skt_redis_cmd(t, voucher, "XPENDING seckill:{v:%lld}:orders seckill-writers", voucher);
    long long v = -1;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 && rep->element[0]->type == REDIS_REPLY_INTEGER)
        v = rep->element[0]->integer;
    if (rep) freeReplyObject(rep);
    return v;
}

int skt_app_start(th_target *srv, skt_dir *dir, skt_serve *sv, char *admin, char *user1, char *user2, size_t cap)
{
    if (th_target_start(srv, NULL) != 0) return -1;
    if (skt_dir_make(dir) != 0) return -1;
    if (skt_serve_start(sv, dir, srv->url, "redis", NULL, NULL) != 0) return -1;
    skt_token(dir, 0, 0, admin, cap);
    skt_token(dir, 1, 0, user1, cap);
    skt_token(dir, 2, 0, user2, cap);
    return 0;
}

int skt_app_stop(th_target *srv, skt_dir *dir, skt_serve *sv)
{
    int rc = skt_serve_stop(sv);
    /* Servers of cases that failed half-way (several start their own). */
    skt_kill_all();
    skt_dir_remove(dir);
    th_target_stop(srv);
    return rc == 0 ? 0 : -1;
}
