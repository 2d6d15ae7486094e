/* Real redis-server processes for the test suites; see harness.h. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

long long th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Ask the kernel for a free port by binding port 0. Another process could
 * take it before the server binds; callers retry on that. */
int th_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    socklen_t len = sizeof a;
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

/*
 * Every server started and not stopped yet. A test that fails an
 * assertion leaves its function at once (cmocka longjmps out), skipping
 * its th_redis_stop(); the registry lets the suite's teardown
 * (th_redis_stop_all) and, failing that, an atexit handler stop such
 * servers by PID. A program killed outright runs neither; for that each
 * server is started with PR_SET_PDEATHSIG, so the kernel kills it when
 * the test program dies.
 */
#define MAX_SERVERS 64
static struct {
    pid_t pid;
    char dir[128];
} registry[MAX_SERVERS];
static pid_t registry_owner; /* forked test children must not stop our servers */

static void registry_forget(pid_t pid)
{
    for (int i = 0; i < MAX_SERVERS; i++)
        if (registry[i].pid == pid) registry[i].pid = 0;
}

static void stop_all_at_exit(void)
{
    if (getpid() == registry_owner) th_redis_stop_all();
}

static void registry_add(pid_t pid, const char *dir)
{
    if (registry_owner != getpid()) {
        /* First server of this process. In a forked child the entries are
         * the parent's (not ours to stop) and the atexit handler came with
         * the fork. */
        int inherited = registry_owner != 0;
        memset(registry, 0, sizeof registry);
        registry_owner = getpid();
        if (!inherited) atexit(stop_all_at_exit);
    }
    registry_forget(pid);
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (registry[i].pid == 0) {
            registry[i].pid = pid;
            snprintf(registry[i].dir, sizeof registry[i].dir, "%s", dir);
            return;
        }
    }
}

static void kill_pid_and_reap(pid_t pid, int sig)
{
    kill(pid, SIGCONT);
    kill(pid, sig);
    for (int i = 0; i < 500; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) return;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* By shell: a server dir holds a few files, and rm -rf needs no code here. */
void th_redis_remove_dir(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) { /* best effort */
    }
}

void th_redis_stop_all(void)
{
    if (getpid() != registry_owner) return;
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (registry[i].pid == 0) continue;
        kill_pid_and_reap(registry[i].pid, SIGKILL);
        registry[i].pid = 0;
        th_redis_remove_dir(registry[i].dir);
    }
}

int th_stop_all_fixture(void **state)
{
    (void)state;
    th_redis_stop_all();
    return 0;
}

/* libfaketime, and glibc's plain malloc preloaded before it: jemalloc
 * (redis-server's allocator) calls the clock while libfaketime is still
 * setting itself up, and crashes; with the debug malloc library first,
 * jemalloc never runs. Valkey also needs sized_free.c's library between
 * them (it frees some blocks through jemalloc by name). */
#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
#define MALLOC_LIB "/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0"
#ifndef DLOCK_SIZED_FREE_LIB
#define DLOCK_SIZED_FREE_LIB "libdlock_sized_free.so"
#endif

static int faketime_installed(void)
{
    return access(FAKETIME_LIB, R_OK) == 0 && access(MALLOC_LIB, R_OK) == 0 && access(DLOCK_SIZED_FREE_LIB, R_OK) == 0;
}

int th_redis_clock_offset(th_redis *r, const char *offset)
{
    r->clock[0] = '\0';
    if (!offset || !*offset) return 0;
    if (!faketime_installed()) return -1;
    snprintf(r->clock, sizeof r->clock, "%s", offset);
    return 0;
}

int th_redis_clock_file(th_redis *r, const char *path)
{
    r->clock_file[0] = '\0';
    if (!faketime_installed()) return -1;
    snprintf(r->clock_file, sizeof r->clock_file, "%s", path);
    return th_redis_clock_jump(r, "+0s");
}

int th_redis_clock_jump(const th_redis *r, const char *offset)
{
    if (!r->clock_file[0]) return -1;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s.tmp", r->clock_file);
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fprintf(f, "%s\n", offset);
    if (fclose(f) != 0) return -1;
    return rename(tmp, r->clock_file); /* a reader never sees half a line */
}

/* Why poll rather than sleep a fixed time: libfaketime re-reads the file
 * when its whole-second cache counter moves on, which is anywhere from
 * one to two seconds after the write, later on a loaded machine. A checker
 * that must know when the server's leases jumped needs the moment it was
 * seen, not a guess. */
int th_redis_clock_settle(const th_redis *r, long offset_s, int timeout_ms)
{
    redisContext *c = th_redis_connect(r);
    if (!c) return -1;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int rc = -1;
    for (;;) {
        redisReply *rep = redisCommand(c, "TIME");
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2) {
            long long srv_us =
                strtoll(rep->element[0]->str, NULL, 10) * 1000000LL + strtoll(rep->element[1]->str, NULL, 10);
            long long ours_us = (long long)wall.tv_sec * 1000000LL + wall.tv_nsec / 1000;
            long long diff = srv_us - ours_us - (long long)offset_s * 1000000LL;
            if (diff > -1000000LL && diff < 1000000LL) rc = 0;
        }
        if (rep) freeReplyObject(rep);
        if (rc == 0) break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long ms = (now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (ms >= timeout_ms) break;
        usleep(2000);
    }
    redisFree(c);
    return rc;
}

/* The server's environment: ours, plus libfaketime when its clock is
 * offset. Built before fork(): the child of a threaded program may only
 * make async-signal-safe calls until it execs. NULL on failure. */
static char **server_env(const th_redis *r, char (*vars)[512])
{
    extern char **environ;
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 5, sizeof *env);
    if (!env) return NULL;
    int faked = r->clock[0] || r->clock_file[0];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!faked || (strncmp(environ[i], "LD_PRELOAD=", 11) != 0 && strncmp(environ[i], "FAKETIME", 8) != 0 &&
                       strncmp(environ[i], "DONT_FAKE_MONOTONIC=", 20) != 0))
            env[k++] = environ[i];
    if (faked) {
        snprintf(vars[0], sizeof vars[0], "LD_PRELOAD=%s %s %s", MALLOC_LIB, DLOCK_SIZED_FREE_LIB, FAKETIME_LIB);
        env[k++] = vars[0];
    }
    if (r->clock[0]) {
        snprintf(vars[1], sizeof vars[1], "FAKETIME=%s", r->clock);
        env[k++] = vars[1];
    } else if (r->clock_file[0]) {
        snprintf(vars[1], sizeof vars[1], "FAKETIME_TIMESTAMP_FILE=%s", r->clock_file);
        snprintf(vars[2], sizeof vars[2], "FAKETIME_CACHE_DURATION=1");
        snprintf(vars[3], sizeof vars[3], "DONT_FAKE_MONOTONIC=1");
        env[k++] = vars[1];
        env[k++] = vars[2];
        env[k++] = vars[3];
    }
    env[k] = NULL;
    return env;
}

/* One switch moves every suite to another server of the same protocol
 * (the @valkey ctest entries) without a line of the suites changing. */
const char *th_server_binary(void)
{
    const char *bin = getenv("DLOCK_TEST_SERVER");
    return bin && *bin ? bin : "redis-server";
}

static int write_conf_and_spawn(th_redis *r)
{
    char conf[256], log[256];
    snprintf(conf, sizeof conf, "%s/redis.conf", r->dir);
    snprintf(log, sizeof log, "%s/redis.log", r->dir);
    FILE *f = fopen(conf, "w");
    if (!f) return -1;
    fprintf(f,
            "port %d\nbind 127.0.0.1\nunixsocket %s\nunixsocketperm 700\n"
            "save \"\"\nappendonly no\ndir %s\nlogfile %s\ndaemonize no\n%s",
            r->port, r->sock, r->dir, log, r->extra);
    fclose(f);
    char vars[4][512];
    char **env = server_env(r, vars);
    if (!env) return -1;
    const char *bin = th_server_binary();
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        free(env);
        return -1;
    }
    if (pid == 0) {
        /* Die with the test program, however it dies. (The signal follows
         * the forking thread: servers are started from the main thread.) */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        char *const argv[] = {(char *)bin, conf, NULL};
        execvpe(bin, argv, env);
        _exit(127);
    }
    free(env);
    r->pid = pid;
    registry_add(pid, r->dir);
    /* Wait until it answers PING on the socket, or died. */
    for (int i = 0; i < 500; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            registry_forget(pid);
            r->pid = 0;
            return -1;
        }
        struct timeval tv = {0, 200000};
        redisContext *c = redisConnectUnixWithTimeout(r->sock, tv);
        if (c && !c->err) {
            redisReply *rep = redisCommand(c, "PING");
            int ok = rep != NULL;
            if (rep) freeReplyObject(rep);
            if (!ok || c->err) {
                redisFree(c);
                usleep(10000);
                continue;
            }
            redisFree(c);
            return 0;
        }
        if (c) redisFree(c);
        usleep(10000);
    }
    return -1;
}

#ifndef DLOCK_TLS_CERTS_SCRIPT_DEFAULT
#define DLOCK_TLS_CERTS_SCRIPT_DEFAULT "scripts/tls-certs.sh"
#endif

int th_tls_certs(const char *dir)
{
    const char *script = getenv("DLOCK_TLS_CERTS_SCRIPT");
    if (!script || !*script) script = DLOCK_TLS_CERTS_SCRIPT_DEFAULT;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* Its stderr stays ours: a failure says so in the test log. */
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) dup2(devnull, 1);
        execlp("sh", "sh", script, dir, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int th_redis_start_tls(th_redis *r, const char *certdir, const char *cert, const char *extra_conf)
{
    int port = th_free_port();
    if (port <= 0) return -1;
    char extra[512];
    snprintf(extra, sizeof extra,
             "tls-port %d\ntls-cert-file %s/%s.pem\ntls-key-file %s/%s.key\n"
             "tls-ca-cert-file %s/ca.pem\ntls-auth-clients optional\n%s",
             port, certdir, cert, certdir, cert, certdir, extra_conf ? extra_conf : "");
    if (th_redis_start(r, extra) != 0) return -1;
    r->tls_port = port;
    snprintf(r->tls_url, sizeof r->tls_url, "rediss://127.0.0.1:%d?cacert=%s/ca.pem", port, certdir);
    return 0;
}

int th_redis_start(th_redis *r, const char *extra_conf)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/dlock-test-XXXXXX");
    if (!mkdtemp(r->dir)) return -1;
    snprintf(r->sock, sizeof r->sock, "%s/redis.sock", r->dir);
    snprintf(r->url, sizeof r->url, "unix://%s", r->sock);
    if (extra_conf) snprintf(r->extra, sizeof r->extra, "%s", extra_conf);
    for (int attempt = 0; attempt < 5; attempt++) {
        r->port = th_free_port();
        if (r->port <= 0) continue;
        snprintf(r->tcp_url, sizeof r->tcp_url, "redis://127.0.0.1:%d", r->port);
        if (write_conf_and_spawn(r) == 0) return 0;
        if (r->pid > 0) {
            kill_pid_and_reap(r->pid, SIGKILL);
            registry_forget(r->pid);
            r->pid = 0;
        }
    }
    return -1;
}

static void kill_and_reap(th_redis *r, int sig)
{
    if (r->pid <= 0) return;
    kill_pid_and_reap(r->pid, sig);
    registry_forget(r->pid);
    r->pid = 0;
}

void th_redis_stop(th_redis *r)
{
    kill_and_reap(r, SIGTERM);
    if (r->dir[0]) {
        th_redis_remove_dir(r->dir);
        r->dir[0] = '\0';
    }
}

int th_redis_restart(th_redis *r)
{
    kill_and_reap(r, SIGKILL);
    unlink(r->sock);
    /* The port may linger briefly; retry a few times. */
    for (int i = 0; i < 20; i++) {
        if (write_conf_and_spawn(r) == 0) return 0;
        usleep(100000);
    }
    return -1;
}

int th_redis_restart_wiped(th_redis *r, const char *key)
{
    if (th_redis_restart(r) != 0) return -1;
    redisReply *e = th_redis_cmd(r, "EXISTS %s", key);
    int gone = e && e->type == REDIS_REPLY_INTEGER && e->integer == 0;
    if (e) freeReplyObject(e);
    return gone ? 0 : -1;
}

void th_redis_pause(th_redis *r)
{
    if (r->pid > 0) kill(r->pid, SIGSTOP);
}
void th_redis_resume(th_redis *r)
{
    if (r->pid > 0) kill(r->pid, SIGCONT);
}

redisContext *th_redis_connect(const th_redis *r)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectUnixWithTimeout(r->sock, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    /* Authenticate when the server was started with a password. */
    const char *p = strstr(r->extra, "requirepass ");
    if (p) {
        char pw[128];
        if (sscanf(p + 12, "%127s", pw) == 1) {
            redisReply *rep = redisCommand(c, "AUTH %s", pw);
            if (rep) freeReplyObject(rep);
        }
    }
    return c;
}

redisReply *th_vcmd_once(redisContext *c, const char *fmt, va_list ap)
{
    if (!c) return NULL;
    redisReply *rep = redisvCommand(c, fmt, ap);
    redisFree(c);
    return rep;
}

redisReply *th_redis_cmd(const th_redis *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = th_vcmd_once(th_redis_connect(r), fmt, ap);
    va_end(ap);
    return rep;
}

long long th_info_calls(redisReply *info, const char *command)
{
    if (!info) return -1;
    long long n = info->type == REDIS_REPLY_STRING ? 0 : -1;
    char pat[64];
    snprintf(pat, sizeof pat, "cmdstat_%s:calls=", command);
    const char *p = info->type == REDIS_REPLY_STRING ? strstr(info->str, pat) : NULL;
    if (p) n = atoll(p + strlen(pat));
    freeReplyObject(info);
    return n;
}

/* Asked up to three times: a count the test compares must not turn into
 * -1 because a loaded machine kept the server from answering one fresh
 * connection within its 2 s. */
long long th_redis_calls(const th_redis *r, const char *command)
{
    long long n = -1;
    for (int i = 0; i < 3 && n < 0; i++) n = th_info_calls(th_redis_cmd(r, "INFO commandstats"), command);
    return n;
}

const char *th_bin(const char *name)
{
    static __thread char path[512];
    const char *dir = getenv("DLOCK_BIN_DIR");
#ifdef DLOCK_BIN_DIR_DEFAULT
    if (!dir) dir = DLOCK_BIN_DIR_DEFAULT;
#endif
    if (!dir) dir = ".";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* Where PATH finds `name` (or `name` itself when it holds a slash), links
 * resolved, into `out`. 0 when found. */
static int resolve_program(const char *name, char *out)
{
    if (strchr(name, '/')) return realpath(name, out) ? 0 : -1;
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        char candidate[4352];
        snprintf(candidate, sizeof candidate, "%s/%s", dir, name);
        if (access(candidate, X_OK) == 0 && realpath(candidate, out)) return 0;
    }
    return -1;
}

/* By the executable, not by INFO: a server that names itself otherwise
 * (Valkey still answers redis_version) cannot pass for another. */
int th_pid_runs(pid_t pid, const char *program)
{
    char want[PATH_MAX], got[PATH_MAX], link[64];
    if (resolve_program(program, want) != 0) {
        fprintf(stderr, "%s is not in PATH\n", program);
        return -1;
    }
    snprintf(link, sizeof link, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(link, got, sizeof got - 1);
    if (n <= 0) return -1;
    got[n] = '\0';
    if (strcmp(got, want) == 0) return 1;
    fprintf(stderr, "pid %d runs %s, not %s (%s)\n", (int)pid, got, want, program);
    return 0;
}

int th_write_file(const char *path, const char *text, unsigned mode)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    ok = fclose(f) == 0 && ok;
    return ok && chmod(path, (mode_t)mode) == 0 ? 0 : -1;
}
