/* Real redis-server processes for the test suites; see harness.h. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static int write_conf_and_spawn(th_redis *r)
{
    char conf[256], log[256];
    snprintf(conf, sizeof conf, "%s/redis.conf", r->dir);
    snprintf(log, sizeof log, "%s/redis.log", r->dir);
    FILE *f = fopen(conf, "w");
    if (!f) return -1;
    fprintf(f, "port %d\nbind 127.0.0.1\nunixsocket %s\nunixsocketperm 700\n"
               "save \"\"\nappendonly no\ndir %s\nlogfile %s\ndaemonize no\n%s",
            r->port, r->sock, r->dir, log, r->extra);
    fclose(f);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) { dup2(devnull, 0); dup2(devnull, 1); dup2(devnull, 2); }
        execlp("redis-server", "redis-server", conf, (char *)NULL);
        _exit(127);
    }
    r->pid = pid;
    /* Wait until it answers PING on the socket, or died. */
    for (int i = 0; i < 500; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) { r->pid = 0; return -1; }
        struct timeval tv = {0, 200000};
        redisContext *c = redisConnectUnixWithTimeout(r->sock, tv);
        if (c && !c->err) {
            redisReply *rep = redisCommand(c, "PING");
            int ok = rep != NULL;
            if (rep) freeReplyObject(rep);
            if (!ok || c->err) { redisFree(c); usleep(10000); continue; }
            redisFree(c);
            return 0;
        }
        if (c) redisFree(c);
        usleep(10000);
    }
    return -1;
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
        if (r->pid > 0) { kill(r->pid, SIGKILL); waitpid(r->pid, NULL, 0); r->pid = 0; }
    }
    return -1;
}

static void kill_and_reap(th_redis *r, int sig)
{
    if (r->pid <= 0) return;
    kill(r->pid, SIGCONT);
    kill(r->pid, sig);
    for (int i = 0; i < 500; i++) {
        if (waitpid(r->pid, NULL, WNOHANG) == r->pid) { r->pid = 0; return; }
        usleep(10000);
    }
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
}

void th_redis_stop(th_redis *r)
{
    char cmd[256];
    kill_and_reap(r, SIGTERM);
    if (r->dir[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
        if (system(cmd) != 0) { /* best effort */ }
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

void th_redis_pause(th_redis *r) { if (r->pid > 0) kill(r->pid, SIGSTOP); }
void th_redis_resume(th_redis *r) { if (r->pid > 0) kill(r->pid, SIGCONT); }

redisContext *th_redis_connect(const th_redis *r)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectUnixWithTimeout(r->sock, tv);
    if (!c || c->err) { if (c) redisFree(c); return NULL; }
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

redisReply *th_redis_cmd(const th_redis *r, const char *fmt, ...)
{
    redisContext *c = th_redis_connect(r);
    if (!c) return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return rep;
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
