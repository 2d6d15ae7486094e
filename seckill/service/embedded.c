/* A private redis-server; see embedded.h. */
#include "embedded.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "common/skutil.h"

/* Remove the files we made and the directory; nothing else is in it. */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        char path[256];
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
                if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) < (int)sizeof path) unlink(path);
            }
        closedir(d);
    }
    rmdir(dir);
}

/* Started means answering: a fresh redis-server takes a moment to listen. */
static int ping(const char *sock)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectUnixWithTimeout(sock, tv);
    int ok = 0;
    if (c && !c->err) {
        redisReply *r = redisCommand(c, "PING");
        ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return ok;
}

/* Why a unix socket and "port 0": nothing outside this machine's user can
 * reach the embedded server, and two services never fight over a port.
 * Why PR_SET_PDEATHSIG: if seckill is killed with SIGKILL it cannot stop
 * its child, so the kernel does. */
int sk_embedded_start(sk_embedded *e, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    snprintf(e->dir, sizeof e->dir, "/tmp/seckill-XXXXXX");
    if (!mkdtemp(e->dir)) {
        snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
        e->dir[0] = '\0';
        return -1;
    }
    char conf[96], sock[96], log[96];
    snprintf(conf, sizeof conf, "%s/redis.conf", e->dir);
    snprintf(sock, sizeof sock, "%s/redis.sock", e->dir);
    snprintf(log, sizeof log, "%s/redis.log", e->dir);
    snprintf(e->url, sizeof e->url, "unix://%s", sock);
    FILE *f = fopen(conf, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", conf, strerror(errno));
        sk_embedded_stop(e);
        return -1;
    }
    fprintf(f,
            "port 0\nunixsocket %s\nunixsocketperm 700\nsave \"\"\nappendonly no\n"
            "dir %s\nlogfile %s\ndaemonize no\n",
            sock, e->dir, log);
    fclose(f);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        sk_embedded_stop(e);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        execlp("redis-server", "redis-server", conf, (char *)NULL);
        _exit(127);
    }
    e->pid = pid;
    for (int i = 0; i < 500; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            e->pid = 0;
            snprintf(err, errlen, "redis-server exited at start (is it installed? see %s)", log);
            sk_embedded_stop(e);
            return -1;
        }
        if (ping(sock)) return 0;
        sk_sleep_ms(10);
    }
    snprintf(err, errlen, "redis-server did not answer within 5 s");
    sk_embedded_stop(e);
    return -1;
}

/* By PID, never by name: other redis-servers on the host are not ours. */
void sk_embedded_stop(sk_embedded *e)
{
    if (e->pid > 0) {
        kill(e->pid, SIGTERM);
        int done = 0;
        for (int i = 0; i < 500 && !done; i++) {
            if (waitpid(e->pid, NULL, WNOHANG) == e->pid) done = 1;
            else sk_sleep_ms(10);
        }
        if (!done) {
            kill(e->pid, SIGKILL);
            waitpid(e->pid, NULL, 0);
        }
        e->pid = 0;
    }
    if (e->dir[0]) {
        remove_dir(e->dir);
        e->dir[0] = '\0';
    }
}
