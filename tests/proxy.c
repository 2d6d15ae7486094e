/* The lossy loopback proxy of the tests; see proxy.h. */
#include "proxy.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_PAIRS 64

typedef struct pair {
    int cfd, ufd; /* client side, server side; -1 once closed */
    int doomed;   /* the request whose reply must be lost went through */
    char *held;   /* a delayed request, forwarded at release_at */
    size_t held_len;
    long long release_at;
} pair;

struct th_proxy {
    int lfd, port, wake[2];
    char url[64];
    char upstream[192];
    pthread_t thread;
    pthread_mutex_t mu; /* guards match, armed, lost, stop */
    char match[256], delay_match[256];
    int armed, lost, stop;
    int partitioned;       /* forward nothing, close nothing (a cut network) */
    long delay_ms;         /* > 0: a delay is armed */
    long latency_ms;       /* > 0: every request waits this long */
    pair pairs[MAX_PAIRS]; /* the proxy thread's own, as is buf */
    int n;
    char buf[1 << 16];
};

/* Write everything: loopback sockets, small messages. */
static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

static int connect_upstream(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {0};
    a.sun_family = AF_UNIX;
    size_t len = strlen(path);
    if (len >= sizeof a.sun_path) len = sizeof a.sun_path - 1;
    memcpy(a.sun_path, path, len);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

static void close_pair(pair *p)
{
    if (p->cfd >= 0) close(p->cfd);
    if (p->ufd >= 0) close(p->ufd);
    p->cfd = p->ufd = -1;
    free(p->held);
    p->held = NULL;
}

/* Client bytes go to the server; the armed request dooms its connection. */
static void from_client(th_proxy *px, pair *p, const char *buf, size_t len)
{
    long delay = 0;
    pthread_mutex_lock(&px->mu);
    if (px->armed && memmem(buf, len, px->match, strlen(px->match))) {
        px->armed = 0;
        p->doomed = 1;
    }
    if (px->delay_ms > 0 && memmem(buf, len, px->delay_match, strlen(px->delay_match))) {
        delay = px->delay_ms;
        px->delay_ms = 0;
    }
    if (delay == 0) delay = px->latency_ms;
    pthread_mutex_unlock(&px->mu);
    if (delay > 0 && (p->held = malloc(len)) != NULL) {
        memcpy(p->held, buf, len);
        p->held_len = len;
        p->release_at = th_now_ms() + delay;
        return;
    }
    if (write_all(p->ufd, buf, len) != 0) close_pair(p);
}

/* Server bytes go to the client, unless they answer the doomed request:
 * then the command has run, and the reply is lost with the connection. */
static void from_server(th_proxy *px, pair *p, const char *buf, size_t len)
{
    if (p->doomed) {
        close_pair(p);
        pthread_mutex_lock(&px->mu);
        px->lost++;
        pthread_mutex_unlock(&px->mu);
        return;
    }
    if (write_all(p->cfd, buf, len) != 0) close_pair(p);
}

static void accept_one(th_proxy *px)
{
    int cfd = accept4(px->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (cfd < 0) return;
    int ufd = connect_upstream(px->upstream);
    if (ufd < 0 || px->n == MAX_PAIRS) {
        close(cfd);
        if (ufd >= 0) close(ufd);
        return;
    }
    px->pairs[px->n++] = (pair){cfd, ufd, 0, NULL, 0, 0};
}

/* Forward delayed requests that are due; the poll timeout until the next
 * one (-1: none). */
static int release_held(th_proxy *px)
{
    long long now = th_now_ms(), next = -1;
    for (int i = 0; i < px->n; i++) {
        pair *p = &px->pairs[i];
        if (!p->held) continue;
        if (p->release_at <= now) {
            int bad = write_all(p->ufd, p->held, p->held_len);
            free(p->held);
            p->held = NULL;
            if (bad) close_pair(p);
        } else if (next < 0 || p->release_at - now < next) {
            next = p->release_at - now;
        }
    }
    return (int)next;
}

static void *proxy_main(void *arg)
{
    th_proxy *px = arg;
    for (;;) {
        struct pollfd fds[2 + 2 * MAX_PAIRS];
        int timeout = release_held(px);
        fds[0] = (struct pollfd){px->wake[0], POLLIN, 0};
        fds[1] = (struct pollfd){px->lfd, POLLIN, 0};
        int n = px->n;
        pthread_mutex_lock(&px->mu);
        int cut = px->partitioned;
        pthread_mutex_unlock(&px->mu);
        for (int i = 0; i < n; i++) {
            /* A connection with a request held back sends nothing more.
             * Across a partition nothing is read: bytes wait in the
             * kernel's buffers, as they would in TCP's retransmissions,
             * and arrive when it heals. */
            fds[2 + 2 * i] = (struct pollfd){cut ? -1 : px->pairs[i].cfd, px->pairs[i].held ? 0 : POLLIN, 0};
            fds[3 + 2 * i] = (struct pollfd){cut ? -1 : px->pairs[i].ufd, POLLIN, 0};
        }
        if (poll(fds, (nfds_t)(2 + 2 * n), cut ? -1 : timeout) < 0 && errno != EINTR) break;
        if (fds[0].revents & POLLIN) {
            char drain[64];
            if (read(px->wake[0], drain, sizeof drain) < 0) { /* nothing to drain */
            }
        }
        pthread_mutex_lock(&px->mu);
        int stop = px->stop;
        /* Again: a partition begun while this thread slept in poll cuts
         * what poll found readable too (a reply the test sent for after
         * cutting must not slip through because the wake-up came late). */
        cut |= px->partitioned;
        pthread_mutex_unlock(&px->mu);
        if (stop) break;
        if (cut) {
            /* Connections still complete (the kernel's backlog), but
             * nothing passes them until the partition heals. */
            if (fds[1].revents & POLLIN) accept_one(px);
            continue;
        }
        for (int i = 0; i < n; i++) {
            pair *p = &px->pairs[i];
            for (int side = 0; side < 2 && p->cfd >= 0; side++) {
                if (side == 0 && p->held) continue;
                if (!(fds[2 + 2 * i + side].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                ssize_t r = read(side == 0 ? p->cfd : p->ufd, px->buf, sizeof px->buf);
                if (r <= 0) close_pair(p);
                else if (side == 0) from_client(px, p, px->buf, (size_t)r);
                else from_server(px, p, px->buf, (size_t)r);
            }
        }
        /* Drop closed pairs before taking new ones. */
        int kept = 0;
        for (int i = 0; i < px->n; i++)
            if (px->pairs[i].cfd >= 0) px->pairs[kept++] = px->pairs[i];
        px->n = kept;
        if (fds[1].revents & POLLIN) accept_one(px);
    }
    for (int i = 0; i < px->n; i++) close_pair(&px->pairs[i]);
    px->n = 0;
    return NULL;
}

th_proxy *th_proxy_start(const th_redis *upstream)
{
    th_proxy *px = calloc(1, sizeof *px);
    if (!px) return NULL;
    snprintf(px->upstream, sizeof px->upstream, "%s", upstream->sock);
    pthread_mutex_init(&px->mu, NULL);
    px->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {0};
    socklen_t len = sizeof a;
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (px->lfd < 0 || bind(px->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(px->lfd, 64) != 0 ||
        getsockname(px->lfd, (struct sockaddr *)&a, &len) != 0 || pipe2(px->wake, O_CLOEXEC) != 0) {
        if (px->lfd >= 0) close(px->lfd);
        free(px);
        return NULL;
    }
    px->port = ntohs(a.sin_port);
    snprintf(px->url, sizeof px->url, "redis://127.0.0.1:%d", px->port);
    if (pthread_create(&px->thread, NULL, proxy_main, px) != 0) {
        close(px->lfd);
        close(px->wake[0]);
        close(px->wake[1]);
        free(px);
        return NULL;
    }
    return px;
}

const char *th_proxy_url(const th_proxy *px)
{
    return px->url;
}

void th_proxy_lose_next_reply(th_proxy *px, const char *match)
{
    pthread_mutex_lock(&px->mu);
    snprintf(px->match, sizeof px->match, "%s", match);
    px->armed = 1;
    pthread_mutex_unlock(&px->mu);
}

void th_proxy_delay_next(th_proxy *px, const char *match, long ms)
{
    pthread_mutex_lock(&px->mu);
    snprintf(px->delay_match, sizeof px->delay_match, "%s", match);
    px->delay_ms = ms;
    pthread_mutex_unlock(&px->mu);
}

void th_proxy_partition(th_proxy *px, int on)
{
    pthread_mutex_lock(&px->mu);
    px->partitioned = on;
    pthread_mutex_unlock(&px->mu);
    if (write(px->wake[1], "p", 1) != 1) { /* a full pipe wakes the thread anyway */
    }
}

void th_proxy_latency(th_proxy *px, long ms)
{
    pthread_mutex_lock(&px->mu);
    px->latency_ms = ms;
    pthread_mutex_unlock(&px->mu);
}

int th_proxy_lost(th_proxy *px)
{
    pthread_mutex_lock(&px->mu);
    int n = px->lost;
    pthread_mutex_unlock(&px->mu);
    return n;
}

void th_proxy_stop(th_proxy *px)
{
    if (!px) return;
    pthread_mutex_lock(&px->mu);
    px->stop = 1;
    pthread_mutex_unlock(&px->mu);
    if (write(px->wake[1], "x", 1) != 1) { /* the thread also sees stop on its next wake-up */
    }
    pthread_join(px->thread, NULL);
    close(px->lfd);
    close(px->wake[0]);
    close(px->wake[1]);
    pthread_mutex_destroy(&px->mu);
    free(px);
}
