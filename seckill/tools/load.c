/*
 * `seckill load`: a flash sale against a running server, from the outside.
 *
 *   seckill load --url URL --voucher ID --users N --concurrency C
 *                [--attempts K] --secret-file FILE [--stock S] [--threads T] [--csv FILE]
 *
 * N users each send K orders for one voucher over C keep-alive
 * connections, all released at once. Request k is user k % N + 1, so one
 * user's attempts are spread over connections and really race each other.
 * A few threads drive all connections with epoll (one request in flight
 * per connection): on a small machine shared with the server, hundreds of
 * client threads would steal the CPU the measurement is about. Tokens are
 * signed before the start, for the same reason.
 *
 * Prints a progress bar on stderr when it is a terminal, then a table and
 * one JSON line (requests/s, outcomes, p50/p99/p999) on stdout. Exit
 * status (see docs/seckill.1): 0 the run was correct, 1 it was not (more
 * orders than stock or users, a stock that does not add up, 5xx answers,
 * transport errors or unexpected 4xx), 64 usage, 69 server unreachable.
 */
#include "tools.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cli.h"
#include "common/skutil.h"
#include "httpc.h"
#include "service/auth.h"

#define CONNS_MAX 10000
#define THREADS_MAX 64
#define USERS_MAX 1000000LL
#define REQUESTS_MAX 20000000LL
#define TIMEOUT_MS 30000
#define TOKEN_SLOT 96 /* "UID.EXPIRY.MAC" with UID <= 10^6: 83 bytes */
#define RESP_CAP 4096

/* What every connection shares. */
typedef struct run {
    char host[256];
    int port;
    int64_t voucher;
    long long users, attempts, total;
    char *tokens; /* users * TOKEN_SLOT, user u at (u-1)*TOKEN_SLOT */
    char path[64];
    atomic_llong next; /* next request number */
    atomic_llong done; /* answered or failed, for the progress bar */
    int64_t *lat_ns;   /* per request */
    int64_t *end_ns;   /* per request: when answered (monotonic), for --csv */
    short *status;     /* per request; -1 transport error */
    pthread_barrier_t start;
} run;

/* One keep-alive connection with one request in flight. */
typedef struct conn {
    int fd;
    long long req; /* request in flight, -1 none */
    int64_t t0;
    int retried; /* this request was re-sent on a new connection */
    size_t in_len;
    char in[RESP_CAP];
} conn;

typedef struct worker {
    run *r;
    conn *conns;
    int nconns;
    int ep;
} worker;

/* "http://HOST:PORT" or "HOST:PORT"; no path, no TLS. "unix:PATH" (what
 * `serve --listen unix:PATH` prints) stays whole in host, as
 * sk_httpc_connect takes it. */
static int parse_url(const char *url, char *host, size_t cap, int *port)
{
    if (strncmp(url, SK_HTTPC_UNIX, SK_HTTPC_UNIX_LEN) == 0) {
        if (!url[SK_HTTPC_UNIX_LEN] || strlen(url) >= cap) return -1;
        memcpy(host, url, strlen(url) + 1);
        *port = 0;
        return 0;
    }
    if (strncmp(url, "http://", 7) == 0) url += 7;
    const char *colon = strrchr(url, ':');
    const char *end = url + strlen(url);
    if (end > url && end[-1] == '/') end--;
    if (!colon || colon == url || (size_t)(colon - url) >= cap) return -1;
    uint64_t p;
    if (sk_parse_u64(colon + 1, (size_t)(end - colon - 1), 65535, &p) != 0 || p == 0) return -1;
    size_t hl = (size_t)(colon - url);
    if (url[0] == '[' && hl >= 2 && url[hl - 1] == ']') {
        memcpy(host, url + 1, hl - 2);
        host[hl - 2] = '\0';
    } else {
        memcpy(host, url, hl);
        host[hl] = '\0';
    }
    *port = (int)p;
    return 0;
}

/* (Re)connect and watch the socket; -1 when the server cannot be reached. */
static int conn_open(worker *w, conn *c)
{
    c->fd = sk_httpc_connect(w->r->host, w->r->port, TIMEOUT_MS);
    c->in_len = 0;
    if (c->fd < 0) return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    return 0;
}

/* Closed connections are reopened lazily by the next request they take. */
static void conn_close(conn *c)
{
    if (c->fd >= 0) close(c->fd); /* closing also removes it from epoll */
    c->fd = -1;
}

/* Write the request in flight. The socket is blocking: one small request
 * per connection always fits its send buffer, so this never waits. */
static int send_req(worker *w, conn *c)
{
    run *r = w->r;
    long long uid = c->req % r->users + 1;
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "POST %s HTTP/1.1\r\nHost: seckill\r\nAuthorization: Bearer %s\r\n"
                     "Content-Length: 0\r\n\r\n",
                     r->path, r->tokens + (uid - 1) * TOKEN_SLOT);
    return sk_httpc_send_all(c->fd, buf, (size_t)n);
}

/* Record an answer (or -1) in the request's own slots: no lock, every
 * request number belongs to one connection. */
static void finish_req(run *r, conn *c, int status)
{
    int64_t now = sk_mono_ns();
    r->lat_ns[c->req] = now - c->t0;
    r->end_ns[c->req] = now;
    r->status[c->req] = (short)status;
    atomic_fetch_add_explicit(&r->done, 1, memory_order_relaxed);
    c->req = -1;
}

/* A request whose connection failed is sent once more on a new
 * connection (the server may close idle or broken connections); a second
 * failure is a transport error. */
static void retry_or_fail(worker *w, conn *c)
{
    conn_close(c);
    if (!c->retried && conn_open(w, c) == 0 && send_req(w, c) == 0) {
        c->retried = 1;
        return;
    }
    finish_req(w->r, c, -1);
}

/* Take the next request number and send it; 0 when none is left (the
 * connection is then closed). A request that cannot even be sent counts
 * as a transport error and the next one is tried. */
static int start_next(worker *w, conn *c)
{
    run *r = w->r;
    for (;;) {
        long long k = atomic_fetch_add(&r->next, 1);
        if (k >= r->total) {
            conn_close(c);
            return 0;
        }
        c->req = k;
        c->retried = 0;
        c->in_len = 0;
        c->t0 = sk_mono_ns();
        if (c->fd < 0 && conn_open(w, c) != 0) {
            finish_req(r, c, -1);
            continue;
        }
        if (send_req(w, c) == 0) return 1;
        retry_or_fail(w, c);
        if (c->req >= 0) return 1;
    }
}

/* A complete response in c->in: its status (>0), 0 when more bytes are
 * needed, -1 when malformed. Bodies are Content-Length delimited. */
static int parse_resp(conn *c, int *close_after)
{
    c->in[c->in_len] = '\0';
    char *hdr_end = strstr(c->in, "\r\n\r\n");
    if (!hdr_end) return c->in_len >= RESP_CAP - 1 ? -1 : 0;
    int st;
    if (sscanf(c->in, "HTTP/1.%*d %d", &st) != 1) return -1;
    long clen = -1;
    *close_after = 0;
    for (char *p = c->in; p < hdr_end; p++) {
        if (p != c->in && p[-1] != '\n') continue;
        if (strncasecmp(p, "Content-Length:", 15) == 0) clen = strtol(p + 15, NULL, 10);
        if (strncasecmp(p, "Connection:", 11) == 0 && strncasecmp(p + 11, " close", 6) == 0) *close_after = 1;
    }
    if (clen < 0) return -1;
    size_t need = (size_t)(hdr_end + 4 - c->in) + (size_t)clen;
    if (need > RESP_CAP - 1) return -1;
    return c->in_len >= need ? st : 0;
}

/* A 429 of the admission limits (serve's --rate-*), told from "busy" by
 * its body, is recorded as this: it is not a status the server sends. */
#define RATE_LIMITED 1429

/* Read what arrived; on a complete response record it and go on. */
static int on_readable(worker *w, conn *c)
{
    if (c->req < 0) { /* nothing asked: the server closed an idle connection */
        conn_close(c);
        return 1;
    }
    ssize_t n = recv(c->fd, c->in + c->in_len, RESP_CAP - 1 - c->in_len, 0);
    if (n < 0 && errno == EINTR) return 1;
    if (n <= 0) {
        retry_or_fail(w, c);
        return c->req >= 0 ? 1 : start_next(w, c);
    }
    c->in_len += (size_t)n;
    int close_after = 0;
    int st = parse_resp(c, &close_after);
    if (st == 0) return 1;
    if (st < 0) {
        conn_close(c);
        finish_req(w->r, c, -1);
    } else {
        if (st == 429 && strstr(c->in, "\"rate_limited\"")) st = RATE_LIMITED;
        finish_req(w->r, c, st);
        if (close_after) conn_close(c);
    }
    return start_next(w, c);
}

/* One thread, its share of the connections, one epoll loop. */
static void *worker_main(void *arg)
{
    pthread_setname_np(pthread_self(), "sk-load");
    worker *w = arg;
    for (int i = 0; i < w->nconns; i++) {
        w->conns[i].fd = -1;
        w->conns[i].req = -1;
        conn_open(w, &w->conns[i]); /* a failure is retried per request */
    }
    pthread_barrier_wait(&w->r->start);
    int active = 0;
    for (int i = 0; i < w->nconns; i++) active += start_next(w, &w->conns[i]);
    struct epoll_event evs[256];
    while (active > 0) {
        int n = epoll_wait(w->ep, evs, 256, 1000);
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (on_readable(w, c) == 0) active--;
        }
    }
    for (int i = 0; i < w->nconns; i++) conn_close(&w->conns[i]);
    return NULL;
}

/* Redraws one line on the terminal until the run is over. */
typedef struct progress {
    run *r;
    atomic_int stop;
    int64_t t0;
} progress;

/* One carriage-return line, so a terminal shows a bar that moves. */
static void draw(progress *p, int final)
{
    long long done = atomic_load(&p->r->done), total = p->r->total;
    int width = 30, fill = total ? (int)(width * done / total) : width;
    double secs = (double)(sk_mono_ns() - p->t0) / 1e9;
    fprintf(stderr, "\r  [%.*s%*s] %3lld%%  %lld/%lld  %.0f req/s%s", fill, "##############################",
            width - fill, "", total ? 100 * done / total : 100, done, total, secs > 0 ? (double)done / secs : 0.0,
            final ? "\n" : "");
}

/* Five redraws a second are enough to watch and cost nothing. */
static void *progress_main(void *arg)
{
    pthread_setname_np(pthread_self(), "sk-progress");
    progress *p = arg;
    while (!atomic_load(&p->stop)) {
        draw(p, 0);
        sk_sleep_ms(200);
    }
    draw(p, 1);
    return NULL;
}

/* One admin request with a JSON reply; the reply's integer `key`, or -1
 * with the HTTP status in *status (-1: no answer at all). */
static long long admin_call(run *r, const unsigned char *secret, size_t slen, const char *method, const char *path,
                            const char *body, const char *key, int *status)
{
    char tok[SK_TOKEN_MAX + 1], resp[2048];
    sk_token_make(secret, slen, 0, sk_unix_now() + 3600, tok, sizeof tok);
    *status = -1;
    int fd = sk_httpc_connect(r->host, r->port, TIMEOUT_MS);
    if (fd < 0) {
        if (r->port) fprintf(stderr, "seckill: cannot connect to %s:%d\n", r->host, r->port);
        else fprintf(stderr, "seckill: cannot connect to %s\n", r->host);
        return -1;
    }
    int st = sk_httpc_request(fd, method, path, tok, body, resp, sizeof resp);
    close(fd);
    *status = st;
    if (st == 404 && strcmp(method, "GET") == 0) {
        fprintf(stderr, "seckill: voucher %lld does not exist (%s %s: 404 %s)\n", (long long)r->voucher, method, path,
                resp);
        return -1;
    }
    if (st != 200 && st != 201) {
        fprintf(stderr, "seckill: %s %s: %d %s\n", method, path, st, st > 0 ? resp : "(no answer)");
        return -1;
    }
    json_t *j = json_loads(resp, 0, NULL);
    json_t *v = j ? json_object_get(j, key) : NULL;
    long long x = json_is_integer(v) ? (long long)json_integer_value(v) : -1;
    json_decref(j);
    return x;
}

typedef struct opts {
    const char *url, *secret_file, *csv;
    uint64_t users, conns, attempts, voucher, stock, threads;
    int have_stock;
} opts;

/* The issue's spelling, exactly; --stock and --threads are conveniences. */
static int parse_opts(int argc, char **argv, opts *o)
{
    static const struct option longs[] = {
        {"url", required_argument, NULL, 'u'},
        {"secret-file", required_argument, NULL, 'k'},
        {"users", required_argument, NULL, 'n'},
        {"concurrency", required_argument, NULL, 'c'},
        {"attempts", required_argument, NULL, 'a'},
        {"voucher", required_argument, NULL, 'v'},
        {"stock", required_argument, NULL, 's'},
        {"threads", required_argument, NULL, 't'},
        {"csv", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (opts){.url = NULL, .secret_file = NULL, .attempts = 1, .threads = (uint64_t)(ncpu > 2 ? ncpu / 2 : 1)};
    int c, li = 0;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longs, &li)) != -1) {
        int bad = 0;
        switch (c) {
        case 'u': o->url = optarg; break;
        case 'k': o->secret_file = optarg; break;
        case 'C': o->csv = optarg; break;
        case 'n': bad = sk_parse_u64(optarg, strlen(optarg), USERS_MAX, &o->users) || !o->users; break;
        case 'c': bad = sk_parse_u64(optarg, strlen(optarg), CONNS_MAX, &o->conns) || !o->conns; break;
        case 'a': bad = sk_parse_u64(optarg, strlen(optarg), 1000, &o->attempts) || !o->attempts; break;
        case 'v': bad = sk_parse_u64(optarg, strlen(optarg), INT64_MAX, &o->voucher) || !o->voucher; break;
        case 's':
            bad = sk_parse_u64(optarg, strlen(optarg), 100000000, &o->stock);
            o->have_stock = 1;
            break;
        case 't': bad = sk_parse_u64(optarg, strlen(optarg), THREADS_MAX, &o->threads) || !o->threads; break;
        case 'h': sk_usage(stdout); exit(0);
        default: sk_opt_error("load", c, argv); return -1;
        }
        if (bad) {
            fprintf(stderr, "seckill: load: bad value \"%s\" for --%s\n", optarg, longs[li].name);
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "seckill: load takes no arguments, only options\n");
        return -1;
    }
    if (!o->url || !o->users || !o->conns || (!o->voucher && !o->have_stock)) {
        fprintf(stderr, "seckill: load needs --url, --voucher (or --stock), --users and --concurrency\n");
        return -1;
    }
    if (o->voucher && o->have_stock) {
        fprintf(stderr, "seckill: load takes --voucher or --stock, not both\n");
        return -1;
    }
    if ((long long)(o->users * o->attempts) > REQUESTS_MAX) {
        fprintf(stderr, "seckill: load: at most %lld requests (--users x --attempts)\n", REQUESTS_MAX);
        return -1;
    }
    if (o->threads > o->conns) o->threads = o->conns;
    return 0;
}

/* Many connections need many descriptors: lift the soft limit to the hard one. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Counts of each kind of answer. */
typedef struct tally {
    long long created, already, sold_out, busy, rate_limited, other4xx, server, transport;
} tally;

/* The table is for people, the JSON line (always last) for scripts. */
static void report(const run *r, const opts *o, double secs, const tally *t, long long before, long long after, int ok)
{
    size_t total = (size_t)r->total;
#define PCT(p) ((double)r->lat_ns[(size_t)((double)(total - 1) * (p))] / 1e6)
    double rps = secs > 0 ? (double)total / secs : 0;
    printf("seckill load: voucher %lld, %llu users x %llu attempts over %llu connections (%llu threads)\n",
           (long long)r->voucher, (unsigned long long)o->users, (unsigned long long)o->attempts,
           (unsigned long long)o->conns, (unsigned long long)o->threads);
    printf("  %-22s %12zu in %.3f s = %.0f req/s\n", "requests", total, secs, rps);
    printf("  %-22s %12lld\n  %-22s %12lld\n  %-22s %12lld\n  %-22s %12lld\n", "201 created", t->created,
           "409 already_ordered", t->already, "410 sold_out", t->sold_out, "429 busy", t->busy);
    printf("  %-22s %12lld\n  %-22s %12lld\n  %-22s %12lld\n  %-22s %12lld\n", "429 rate_limited", t->rate_limited,
           "other 4xx", t->other4xx, "5xx", t->server, "transport errors", t->transport);
    printf("  %-22s p50 %.2f  p99 %.2f  p999 %.2f  max %.2f\n", "latency ms", PCT(0.50), PCT(0.99), PCT(0.999),
           PCT(1.0));
    printf("  %-22s %lld -> %lld\n", "stock", before, after);
    printf("{\"tool\":\"seckill-load\",\"voucher\":%lld,\"users\":%llu,\"attempts\":%llu,\"concurrency\":%llu,"
           "\"requests\":%zu,\"seconds\":%.3f,\"requests_per_s\":%.1f,"
           "\"outcomes\":{\"created\":%lld,\"already_ordered\":%lld,\"sold_out\":%lld,\"busy\":%lld,"
           "\"rate_limited\":%lld,\"other_4xx\":%lld,\"server_error\":%lld,\"transport_error\":%lld},"
           "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f,"
           "\"stock_before\":%lld,\"stock_after\":%lld,\"ok\":%s}\n",
           (long long)r->voucher, (unsigned long long)o->users, (unsigned long long)o->attempts,
           (unsigned long long)o->conns, total, secs, rps, t->created, t->already, t->sold_out, t->busy,
           t->rate_limited, t->other4xx, t->server, t->transport, PCT(0.50), PCT(0.99), PCT(0.999), PCT(1.0), before,
           after, ok ? "true" : "false");
#undef PCT
    fflush(stdout);
}

#define CSV_STEP_NS 100000000LL /* 100 ms */

static int cmp_by_end(const void *a, const void *b, void *arg)
{
    const int64_t *end = arg;
    int64_t x = end[*(const long long *)a], y = end[*(const long long *)b];
    return (x > y) - (x < y);
}

/* The run as a time series, one row per 100 ms from the release of the
 * requests: requests sent and answered in it, the answers by status, and
 * the latency percentiles of those answered in it; what bench/plot.sh
 * draws. Written before the summary so that a plot of a failed run can
 * still show where it went wrong. 0, or -1 with errno. */
static int write_csv(const run *r, const char *file, int64_t t0)
{
    long long n = r->total;
    long long *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    int64_t *lat = malloc((size_t)(n ? n : 1) * sizeof *lat);
    FILE *f = order && lat ? fopen(file, "w") : NULL;
    if (!f) {
        int e = order && lat ? errno : ENOMEM;
        free(order);
        free(lat);
        errno = e;
        return -1;
    }
    for (long long i = 0; i < n; i++) order[i] = i;
    qsort_r(order, (size_t)n, sizeof *order, cmp_by_end, r->end_ns);
    long long buckets = n ? (r->end_ns[order[n - 1]] - t0) / CSV_STEP_NS + 1 : 0;
    long long *sent = calloc((size_t)(buckets ? buckets : 1), sizeof *sent);
    fprintf(f, "t_s,sent,answered,s201,s409,s410,s429,other_4xx,s5xx,transport,p50_ms,p99_ms\n");
    for (long long i = 0; sent && i < n; i++) {
        long long b = (r->end_ns[i] - r->lat_ns[i] - t0) / CSV_STEP_NS;
        if (b >= 0 && b < buckets) sent[b]++;
    }
    long long at = 0;
    for (long long b = 0; b < buckets; b++) {
        long long k = 0, c201 = 0, c409 = 0, c410 = 0, c429 = 0, c4xx = 0, c5xx = 0, ct = 0;
        while (at < n && (r->end_ns[order[at]] - t0) / CSV_STEP_NS <= b) {
            long long i = order[at++];
            int st = r->status[i];
            lat[k++] = r->lat_ns[i];
            if (st == 201) c201++;
            else if (st == 409) c409++;
            else if (st == 410) c410++;
            else if (st == 429 || st == RATE_LIMITED) c429++;
            else if (st >= 400 && st < 500) c4xx++;
            else if (st >= 500) c5xx++;
            else ct++;
        }
        sk_sort_i64(lat, (size_t)k);
        double p50 = k ? (double)lat[(size_t)((double)(k - 1) * 0.50)] / 1e6 : 0;
        double p99 = k ? (double)lat[(size_t)((double)(k - 1) * 0.99)] / 1e6 : 0;
        fprintf(f, "%.1f,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%.3f,%.3f\n", (double)b / 10.0,
                sent ? sent[b] : 0, k, c201, c409, c410, c429, c4xx, c5xx, ct, p50, p99);
    }
    free(sent);
    free(order);
    free(lat);
    return fclose(f) == 0 ? 0 : -1;
}

/* Fire the requests: all connections first, then one barrier. */
static int fire(run *r, const opts *o, double *secs, int64_t *start)
{
    int nt = (int)o->threads;
    worker *ws = calloc((size_t)nt, sizeof *ws);
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    conn *conns = calloc(o->conns, sizeof *conns);
    if (!ws || !th || !conns) {
        free(ws);
        free(th);
        free(conns);
        return -1;
    }
    pthread_barrier_init(&r->start, NULL, (unsigned)nt + 1);
    int started = 0, per = (int)o->conns / nt, extra = (int)o->conns % nt, off = 0;
    for (; started < nt; started++) {
        worker *w = &ws[started];
        w->r = r;
        w->conns = conns + off;
        w->nconns = per + (started < extra);
        off += w->nconns;
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        if (w->ep < 0 || pthread_create(&th[started], NULL, worker_main, w) != 0) {
            if (w->ep >= 0) close(w->ep);
            break;
        }
    }
    if (started < nt) { /* release the started ones with nothing to do */
        atomic_store(&r->next, r->total);
        for (int i = started; i < nt; i++) pthread_barrier_wait(&r->start);
    }
    progress p = {.r = r, .t0 = 0};
    atomic_init(&p.stop, 0);
    pthread_t pt;
    int show = isatty(2) && started == nt;
    pthread_barrier_wait(&r->start);
    int64_t t0 = sk_mono_ns();
    *start = t0;
    p.t0 = t0;
    if (show && pthread_create(&pt, NULL, progress_main, &p) != 0) show = 0;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    *secs = (double)(sk_mono_ns() - t0) / 1e9;
    if (show) {
        atomic_store(&p.stop, 1);
        pthread_join(pt, NULL);
    }
    for (int i = 0; i < started; i++) close(ws[i].ep);
    pthread_barrier_destroy(&r->start);
    free(ws);
    free(th);
    free(conns);
    return started == nt ? 0 : -1;
}

/* Set up (voucher, stock before, tokens) outside the timed part, fire,
 * then judge the run by its answers and the stock after. */
int sk_cmd_load(int argc, char **argv)
{
    opts o;
    if (parse_opts(argc, argv, &o) != 0) {
        fputs(SK_HELP_HINT, stderr);
        return EXIT_USAGE;
    }
    run *r = calloc(1, sizeof *r);
    if (!r) return EXIT_SOFTWARE;
    if (parse_url(o.url, r->host, sizeof r->host, &r->port) != 0) {
        fprintf(stderr, "seckill: --url wants http://HOST:PORT or unix:PATH, got \"%s\"\n" SK_HELP_HINT, o.url);
        free(r);
        return EXIT_USAGE;
    }
    unsigned char *secret;
    size_t slen;
    int created;
    char err[512];
    if (sk_secret_load(sk_secret_file(o.secret_file), 0, &secret, &slen, &created, err, sizeof err) != 0) {
        fprintf(stderr, "seckill: %s\n", err);
        free(r);
        return EXIT_UNAVAILABLE;
    }
    raise_fd_limit();
    int rc = EXIT_UNAVAILABLE, st = 0;
    char path[64];
    r->voucher = (int64_t)o.voucher;
    if (!r->voucher) {
        int64_t now = sk_unix_now();
        char body[256];
        snprintf(body, sizeof body, "{\"title\":\"load %lld\",\"stock\":%llu,\"begin\":%lld,\"end\":%lld}",
                 (long long)now, (unsigned long long)o.stock, (long long)now - 1, (long long)now + 3600);
        long long id = admin_call(r, secret, slen, "POST", "/api/vouchers", body, "id", &st);
        if (id <= 0) {
            if (st > 0) rc = EXIT_CHECK; /* the server answered, and refused */
            goto out;
        }
        r->voucher = id;
    }
    snprintf(path, sizeof path, "/api/vouchers/%lld", (long long)r->voucher);
    long long before = admin_call(r, secret, slen, "GET", path, NULL, "stock", &st);
    if (before < 0) {
        /* No such voucher (or a refusal) is an answer, and the run's
         * failure; only a server out of reach is "unavailable". */
        if (st > 0) rc = EXIT_CHECK;
        goto out;
    }

    rc = EXIT_SOFTWARE;
    r->users = (long long)o.users;
    r->attempts = (long long)o.attempts;
    r->total = r->users * r->attempts;
    snprintf(r->path, sizeof r->path, "/api/vouchers/%lld/orders", (long long)r->voucher);
    r->tokens = malloc((size_t)r->users * TOKEN_SLOT);
    r->lat_ns = calloc((size_t)r->total, sizeof *r->lat_ns);
    r->end_ns = calloc((size_t)r->total, sizeof *r->end_ns);
    r->status = calloc((size_t)r->total, sizeof *r->status);
    if (!r->tokens || !r->lat_ns || !r->end_ns || !r->status) {
        fprintf(stderr, "seckill: out of memory\n");
        goto out;
    }
    int64_t expiry = sk_unix_now() + 3600 + r->total / 100;
    for (long long u = 1; u <= r->users; u++)
        if (sk_token_make(secret, slen, u, expiry, r->tokens + (u - 1) * TOKEN_SLOT, TOKEN_SLOT) != 0) goto out;
    atomic_init(&r->next, 0);
    atomic_init(&r->done, 0);
    double secs = 0;
    int64_t start = 0;
    if (fire(r, &o, &secs, &start) != 0) {
        fprintf(stderr, "seckill: cannot start the load threads\n");
        goto out;
    }
    if (o.csv && write_csv(r, o.csv, start) != 0) {
        fprintf(stderr, "seckill: --csv %s: %s\n", o.csv, strerror(errno));
        rc = EXIT_UNAVAILABLE;
        goto out;
    }
    tally t = {0};
    for (long long i = 0; i < r->total; i++) {
        switch (r->status[i]) {
        case 201: t.created++; break;
        case 409: t.already++; break;
        case 410: t.sold_out++; break;
        case 429: t.busy++; break;
        case RATE_LIMITED: t.rate_limited++; break;
        default:
            if (r->status[i] >= 400 && r->status[i] < 500) t.other4xx++;
            else if (r->status[i] >= 500) t.server++;
            else t.transport++;
        }
    }
    sk_sort_i64(r->lat_ns, (size_t)r->total);
    long long after = admin_call(r, secret, slen, "GET", path, NULL, "stock", &st);
    /* A run that "passes" must also have been correct. */
    int ok = 1;
    if (t.created > before || t.created > r->users) {
        fprintf(stderr, "seckill: FAIL: %lld orders accepted for %lld units and %lld users\n", t.created, before,
                r->users);
        ok = 0;
    }
    if (after < 0 || after != before - t.created) {
        fprintf(stderr, "seckill: FAIL: stock went from %lld to %lld with %lld orders\n", before, after, t.created);
        ok = 0;
    }
    if (t.server || t.transport || t.other4xx) {
        fprintf(stderr, "seckill: FAIL: %lld server errors, %lld transport errors, %lld unexpected 4xx\n", t.server,
                t.transport, t.other4xx);
        ok = 0;
    }
    report(r, &o, secs, &t, before, after, ok);
    rc = ok ? 0 : EXIT_CHECK;
out:
    free(r->tokens);
    free(r->lat_ns);
    free(r->end_ns);
    free(r->status);
    free(r);
    free(secret);
    return rc;
}
