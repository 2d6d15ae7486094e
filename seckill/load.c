/*
 * `seckill load`: a flash sale against a running server, from the outside.
 * N users each send --repeat orders for one voucher over C keep-alive
 * connections, all released at once; the tool prints throughput, the
 * count of each status and latency percentiles, then reads the voucher's
 * remaining stock. It exits 1 if more units were sold than the stock, if
 * any request failed at the transport level, or if the server answered
 * 5xx: a load run that "passes" must also have been correct.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "auth.h"
#include "commands.h"
#include "httpc.h"
#include "skutil.h"

#define CONNS_MAX 1024
#define TIMEOUT_MS 30000

typedef struct load {
    char host[256];
    int port;
    const unsigned char *secret;
    size_t secret_len;
    long long users, repeat;
    int64_t voucher;
    atomic_llong next;            /* next request number, shared by the connections */
    int64_t *lat_ns;              /* per request */
    int *status;                  /* per request; -1 transport error */
    pthread_barrier_t start;
} load;

/* "http://HOST:PORT" or "HOST:PORT"; no path, no TLS. */
static int parse_url(const char *url, char *host, size_t cap, int *port)
{
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

/* One connection: take request numbers until none is left. Request k is
 * user k / repeat + 1, so each user's repeats spread over connections and
 * really do race each other. */
static void *worker(void *arg)
{
    load *l = arg;
    int fd = sk_httpc_connect(l->host, l->port, TIMEOUT_MS);
    char path[64], tok[SK_TOKEN_MAX + 1], resp[512];
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", (long long)l->voucher);
    pthread_barrier_wait(&l->start);
    long long total = l->users * l->repeat;
    for (;;) {
        long long k = atomic_fetch_add(&l->next, 1);
        if (k >= total) break;
        long long uid = k % l->users + 1;
        sk_token_make(l->secret, l->secret_len, uid, sk_unix_now() + 3600, tok, sizeof tok);
        int64_t t0 = sk_mono_ns();
        int st = fd >= 0 ? sk_httpc_request(fd, "POST", path, tok, NULL, resp, sizeof resp) : -1;
        if (st < 0) { /* the server may close a connection; retry once on a new one */
            if (fd >= 0) close(fd);
            fd = sk_httpc_connect(l->host, l->port, TIMEOUT_MS);
            st = fd >= 0 ? sk_httpc_request(fd, "POST", path, tok, NULL, resp, sizeof resp) : -1;
        }
        l->lat_ns[k] = sk_mono_ns() - t0;
        l->status[k] = st;
    }
    if (fd >= 0) close(fd);
    return NULL;
}

/* Percentiles come from the sorted latencies. */
static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* One admin request with a JSON reply; the reply's integer `key`, or -1. */
static long long admin_call(load *l, const char *method, const char *path, const char *body, const char *key)
{
    char tok[SK_TOKEN_MAX + 1], resp[2048];
    sk_token_make(l->secret, l->secret_len, 0, sk_unix_now() + 3600, tok, sizeof tok);
    int fd = sk_httpc_connect(l->host, l->port, TIMEOUT_MS);
    if (fd < 0) return -1;
    int st = sk_httpc_request(fd, method, path, tok, body, resp, sizeof resp);
    close(fd);
    if (st != 200 && st != 201) {
        fprintf(stderr, "seckill: %s %s: %d %s\n", method, path, st, st > 0 ? resp : "");
        return -1;
    }
    json_t *j = json_loads(resp, 0, NULL);
    json_t *v = j ? json_object_get(j, key) : NULL;
    long long x = json_is_integer(v) ? (long long)json_integer_value(v) : -1;
    json_decref(j);
    return x;
}

/* Creates its own voucher unless told one, so a run is repeatable and
 * its stock check is exact; all connections start at one barrier. */
int sk_cmd_load(int argc, char **argv)
{
    static const struct option longs[] = {
        {"url", required_argument, NULL, 'u'},         {"secret-file", required_argument, NULL, 'k'},
        {"users", required_argument, NULL, 'n'},       {"connections", required_argument, NULL, 'c'},
        {"stock", required_argument, NULL, 's'},       {"voucher", required_argument, NULL, 'v'},
        {"repeat", required_argument, NULL, 'r'},      {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *url = "http://127.0.0.1:8080", *secret_file = SK_DEFAULT_SECRET_FILE;
    uint64_t users = 10000, conns = 32, stock = 100, voucher = 0, repeat = 1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'u': url = optarg; break;
        case 'k': secret_file = optarg; break;
        case 'n': bad = sk_parse_u64(optarg, strlen(optarg), 10000000, &users) || !users; break;
        case 'c': bad = sk_parse_u64(optarg, strlen(optarg), CONNS_MAX, &conns) || !conns; break;
        case 's': bad = sk_parse_u64(optarg, strlen(optarg), 100000000, &stock); break;
        case 'v': bad = sk_parse_u64(optarg, strlen(optarg), INT64_MAX, &voucher) || !voucher; break;
        case 'r': bad = sk_parse_u64(optarg, strlen(optarg), 1000, &repeat) || !repeat; break;
        case 'h': sk_usage(stdout); return 0;
        default: sk_usage(stderr); return EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "seckill: bad option value \"%s\"\n", optarg);
            return EXIT_USAGE;
        }
    }
    if (optind != argc || users * repeat > 10000000) {
        sk_usage(stderr);
        return EXIT_USAGE;
    }
    load l;
    memset(&l, 0, sizeof l);
    if (parse_url(url, l.host, sizeof l.host, &l.port) != 0) {
        fprintf(stderr, "seckill: --url wants http://HOST:PORT, got \"%s\"\n", url);
        return EXIT_USAGE;
    }
    unsigned char *secret;
    size_t slen;
    int created;
    char err[512];
    if (sk_secret_load(secret_file, &secret, &slen, &created, err, sizeof err) != 0) {
        fprintf(stderr, "seckill: %s\n", err);
        return 1;
    }
    l.secret = secret;
    l.secret_len = slen;
    l.users = (long long)users;
    l.repeat = (long long)repeat;
    int rc = 1;
    char path[64], body[256];
    if (voucher) {
        l.voucher = (int64_t)voucher;
    } else {
        int64_t now = sk_unix_now();
        snprintf(body, sizeof body, "{\"title\":\"load %lld\",\"stock\":%llu,\"begin\":%lld,\"end\":%lld}",
                 (long long)now, (unsigned long long)stock, (long long)now - 1, (long long)now + 3600);
        long long id = admin_call(&l, "POST", "/api/vouchers", body, "id");
        if (id <= 0) goto out_secret;
        l.voucher = id;
    }
    snprintf(path, sizeof path, "/api/vouchers/%lld", (long long)l.voucher);
    long long stock_before = admin_call(&l, "GET", path, NULL, "stock");
    if (stock_before < 0) goto out_secret;

    size_t total = (size_t)(users * repeat);
    l.lat_ns = calloc(total, sizeof *l.lat_ns);
    l.status = calloc(total, sizeof *l.status);
    pthread_t *th = calloc(conns, sizeof *th);
    if (!l.lat_ns || !l.status || !th) {
        fprintf(stderr, "seckill: out of memory\n");
        goto out;
    }
    atomic_init(&l.next, 0);
    pthread_barrier_init(&l.start, NULL, (unsigned)conns + 1);
    size_t started = 0;
    for (; started < conns; started++)
        if (pthread_create(&th[started], NULL, worker, &l) != 0) break;
    if (started < conns) { /* could not start them all: release and stop */
        fprintf(stderr, "seckill: could only start %zu connections\n", started);
        atomic_store(&l.next, (long long)total);
        for (size_t i = started; i <= conns; i++) pthread_barrier_wait(&l.start);
    } else {
        pthread_barrier_wait(&l.start);
    }
    int64_t t0 = sk_mono_ns();
    for (size_t i = 0; i < started; i++) pthread_join(th[i], NULL);
    double secs = (double)(sk_mono_ns() - t0) / 1e9;
    pthread_barrier_destroy(&l.start);
    if (started < conns) goto out;

    long long n201 = 0, n409 = 0, n410 = 0, n429 = 0, n4xx = 0, n5xx = 0, nerr = 0;
    for (size_t i = 0; i < total; i++) {
        int st = l.status[i];
        if (st == 201) n201++;
        else if (st == 409) n409++;
        else if (st == 410) n410++;
        else if (st == 429) n429++;
        else if (st >= 400 && st < 500) n4xx++;
        else if (st >= 500) n5xx++;
        else nerr++;
    }
    qsort(l.lat_ns, total, sizeof *l.lat_ns, cmp_i64);
#define PCT(p) ((double)l.lat_ns[(size_t)((double)(total - 1) * (p))] / 1e6)
    printf("voucher %lld (stock %lld): %zu requests from %llu users on %llu connections in %.2f s: %.0f req/s\n",
           (long long)l.voucher, stock_before, total, (unsigned long long)users, (unsigned long long)conns,
           secs, (double)total / secs);
    printf("  201 created          %lld\n  409 already_ordered  %lld\n  410 sold_out         %lld\n"
           "  429 busy             %lld\n  other 4xx            %lld\n  5xx                  %lld\n"
           "  transport errors     %lld\n",
           n201, n409, n410, n429, n4xx, n5xx, nerr);
    printf("latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", PCT(0.50), PCT(0.90), PCT(0.99), PCT(1.0));
    long long stock_after = admin_call(&l, "GET", path, NULL, "stock");
    printf("stock left %lld\n", stock_after);
    rc = 0;
    if (n201 > stock_before || n201 > (long long)users) {
        printf("FAIL: %lld orders accepted for %lld units and %llu users\n", n201, stock_before,
               (unsigned long long)users);
        rc = 1;
    }
    if (stock_after >= 0 && stock_after != stock_before - n201) {
        printf("FAIL: stock went from %lld to %lld with %lld orders\n", stock_before, stock_after, n201);
        rc = 1;
    }
    if (n5xx || nerr || n4xx) {
        printf("FAIL: %lld server errors, %lld transport errors, %lld unexpected 4xx\n", n5xx, nerr, n4xx);
        rc = 1;
    }
out:
    free(th);
    free(l.lat_ns);
    free(l.status);
out_secret:
    free(secret);
    return rc;
}
