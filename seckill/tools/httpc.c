/* A minimal HTTP/1.1 client; see httpc.h. */
#include "httpc.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define RESP_MAX 65536

/* A socket of `family` with send and receive timeouts, connected to
 * addr, or -1. Timeouts on the socket itself keep a stuck server from
 * hanging a load run or a test forever; TCP_NODELAY because requests are
 * small and the next one waits for the reply. */
static int connect_to(int family, const struct sockaddr *addr, socklen_t len, int timeout_ms)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    if (family != AF_UNIX) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, addr, len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int sk_httpc_connect(const char *host, int port, int timeout_ms)
{
    if (strncmp(host, SK_HTTPC_UNIX, SK_HTTPC_UNIX_LEN) == 0) {
        const char *path = host + SK_HTTPC_UNIX_LEN;
        struct sockaddr_un su = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof su.sun_path) return -1;
        memcpy(su.sun_path, path, strlen(path) + 1);
        return connect_to(AF_UNIX, (struct sockaddr *)&su, sizeof su, timeout_ms);
    }
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    if (getaddrinfo(host, ps, &hints, &ai) != 0 || !ai) return -1;
    int fd = connect_to(ai->ai_family, ai->ai_addr, ai->ai_addrlen, timeout_ms);
    freeaddrinfo(ai);
    return fd;
}

/* send() may write less than asked; MSG_NOSIGNAL so a closed server is
 * an error return, not a SIGPIPE. */
int sk_httpc_send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Headers up to the blank line, then Content-Length bytes of body, or up
 * to EOF when the server sent no length (it then closes). */
int sk_httpc_read_response(int fd, char *resp, size_t cap)
{
    char *buf = malloc(RESP_MAX);
    if (!buf) return -1;
    size_t len = 0;
    char *hdr_end = NULL;
    int status = -1;
    while (!hdr_end) {
        if (len == RESP_MAX - 1) goto out;
        ssize_t r = recv(fd, buf + len, RESP_MAX - 1 - len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) goto out;
        len += (size_t)r;
        buf[len] = '\0';
        hdr_end = strstr(buf, "\r\n\r\n");
    }
    int st;
    if (sscanf(buf, "HTTP/1.%*d %d", &st) != 1) goto out;
    long clen = -1;
    for (char *p = buf; p < hdr_end; p++)
        if ((p == buf || p[-1] == '\n') && strncasecmp(p, "Content-Length:", 15) == 0) clen = strtol(p + 15, NULL, 10);
    size_t body_off = (size_t)(hdr_end + 4 - buf);
    size_t have = len - body_off;
    if (clen < 0) {
        while (len < RESP_MAX - 1) {
            ssize_t r = recv(fd, buf + len, RESP_MAX - 1 - len, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            len += (size_t)r;
        }
        have = len - body_off;
    } else {
        if ((size_t)clen > RESP_MAX - 1 - body_off) goto out;
        while (have < (size_t)clen) {
            ssize_t r = recv(fd, buf + len, RESP_MAX - 1 - len, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) goto out;
            len += (size_t)r;
            have += (size_t)r;
        }
        have = (size_t)clen;
    }
    if (resp && cap) {
        size_t n = have < cap - 1 ? have : cap - 1;
        memcpy(resp, buf + body_off, n);
        resp[n] = '\0';
    }
    status = st;
out:
    free(buf);
    return status;
}

int sk_httpc_request(int fd, const char *method, const char *path, const char *token, const char *body, char *resp,
                     size_t cap)
{
    char head[1024];
    size_t blen = body ? strlen(body) : 0;
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: seckill\r\n%s%s%sContent-Length: %zu\r\n\r\n", method,
                     path, token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "", blen);
    if (n < 0 || (size_t)n >= sizeof head) return -1;
    if (sk_httpc_send_all(fd, head, (size_t)n) != 0) return -1;
    if (blen && sk_httpc_send_all(fd, body, blen) != 0) return -1;
    return sk_httpc_read_response(fd, resp, cap);
}
