/*
 * seckill serve: the flash-sale service's start-up and shutdown. The
 * flags are checked before anything starts; then the secret, the
 * database, the process's one dlock_client (or a private redis-server
 * first), the order ids, the strategy (with the writer for the redis
 * strategy) and the HTTP server come up in that order, and go down in
 * reverse on SIGINT or SIGTERM. The usage text and the exit codes:
 * common/cli.c and docs/seckill.1.
 */
#include "serve.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "admit.h"
#include "auth.h"
#include "common/cli.h"
#include "common/log.h"
#include "common/seckill.h"
#include "common/skutil.h"
#include "creds.h"
#include "dlock.h"
#include "embedded.h"
#include "http.h"
#include "metrics.h"
#include "orderid.h"
#include "skredis.h"
#include "store/db.h"
#include "strategy.h"
#include "writer.h"

#define DEFAULT_WARM_GRACE_S 5
#define DEFAULT_SOLD_OUT_MS 1000

/* Tuning knobs come from the environment: deployments and tests set them
 * without new flags (SECKILL_CLAIM_IDLE_MS, SECKILL_MAX_DELIVERIES,
 * SECKILL_WRITER_LINGER_MS, SECKILL_WARM_GRACE_S, SECKILL_REPLICA_TIMEOUT_MS,
 * SECKILL_SOLD_OUT_MS, SECKILL_REDIS_TIMEOUT_MS, SECKILL_ORDER_ID_BATCH;
 * see seckill(1)). */
static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 ? dflt : x;
}

/* SECKILL_REDIS_TIMEOUT_MS: how long a Redis command may wait for its
 * answer before its connection is given up (the library's command
 * timeout); 100 to 600000, default 5000. A WAIT for the replicas is kept
 * to half of it (redis_replica_timeout_ms). Why lower it: it bounds what
 * waits in a thread (the lock strategy, --replica-acks) when Redis hangs;
 * requests answered later are bounded by --order-timeout anyway. Why raise it: a Redis
 * that stalls for longer than this (a slow fork, a paused VM) then
 * answers late instead of failing every order in flight with 429; and
 * tests that stop Redis with orders in flight raise it so that buyers
 * slow to arrive cannot see the first orders time out before the last
 * are sent. */
static int redis_timeout_ms(void)
{
    long v = env_long("SECKILL_REDIS_TIMEOUT_MS", 5000);
    return v < 100 ? 100 : v > 600000 ? 600000 : (int)v;
}

/* SECKILL_REPLICA_TIMEOUT_MS (default 100), within half the command
 * timeout: a WAIT that outlasts its connection's timeout would count as
 * lost. */
static int redis_replica_timeout_ms(void)
{
    long v = env_long("SECKILL_REPLICA_TIMEOUT_MS", 100);
    long most = redis_timeout_ms() / 2;
    return (int)(v > most ? most : v);
}

/* serve's --order-timeout, else SECKILL_ORDER_TIMEOUT_MS, else this: at
 * most a second for a buyer to wait, whatever Redis does. */
#define DEFAULT_ORDER_TIMEOUT_MS 1000
#define ORDER_TIMEOUT_MAX_MS 600000

/* ------------------------------------------------------------------------ */
/* serve                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct serve_opts {
    const char *listen, *redis, *db, *strategy, *secret_file;
    int threads;
    int replica_acks;
    int order_timeout_ms;
    const char *log_level, *log_format, *access_log;
    sk_http_limits limits;
    const char *redis_password_file, *db_password_file;
    const char *rate_user, *rate_total; /* as given, for the start-up line */
    dlock_rate_options user, total;     /* parsed, when given */
} serve_opts;

/*
 * Why the default depends on the strategy: a thread waits out whatever its
 * request waits for, except an order on the redis strategy without
 * --replica-acks, which is set aside until its script answers. Where the
 * orders wait in their threads (the lock strategy's commit, the replicas'
 * WAIT), 4 a CPU keep enough of them in flight. Where they do not, threads
 * beyond the CPUs only split the same connections into smaller groups:
 * each wakes up for fewer ready requests and resumed answers at a time.
 * An open sale made 0.57 context switches an order with 4 threads on 2
 * CPUs against 0.75 with 8, and took 8 % less of the service's CPU, at
 * the same rate (measured; CHANGELOG.md). 2 a CPU, at least 4, so
 * that a slow request that does wait (an order lookup on a slow
 * database) holds up a quarter of the connections at most.
 */
static int default_threads(const serve_opts *o)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) ncpu = 1;
    if (ncpu > 256) ncpu = 256;
    int parks = strcmp(o->strategy, "redis") == 0 && o->replica_acks == 0;
    long per = parks ? 2 : 4, least = parks ? 4 : 8;
    return (int)(ncpu * per < least ? least : ncpu * per);
}

/* A --rate-* value (or its environment variable's: the flag wins, and
 * either is checked the same way); NULL is off. */
static int parse_rate(const char *flag, const char *env, const char *spec, dlock_rate_options *o)
{
    char why[160];
    if (!spec || sk_rate_parse(spec, o, why, sizeof why) == 0) return 0;
    fprintf(stderr, "seckill: %s (or %s) wants RATE[/UNIT][:BURST], e.g. 5/s:10: \"%s\": %s\n", flag, env, spec, why);
    return -1;
}

/* All of serve's flags are checked before anything starts, so a typo
 * never leaves a half-started server or a stray redis-server. */
static int parse_serve(int argc, char **argv, serve_opts *o)
{
    static const struct option longs[] = {
        {"listen", required_argument, NULL, 'l'},
        {"redis", required_argument, NULL, 'r'},
        {"db", required_argument, NULL, 'd'},
        {"strategy", required_argument, NULL, 's'},
        {"secret-file", required_argument, NULL, 'k'},
        {"threads", required_argument, NULL, 't'},
        {"replica-acks", required_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {"log-level", required_argument, NULL, 'L'},
        {"log-format", required_argument, NULL, 'F'},
        {"access-log", required_argument, NULL, 'A'},
        {"max-connections", required_argument, NULL, 'M'},
        {"max-connections-per-client", required_argument, NULL, 'P'},
        {"idle-timeout", required_argument, NULL, 'I'},
        {"event-loop", required_argument, NULL, 'E'},
        {"redis-password-file", required_argument, NULL, 'R'},
        {"db-password-file", required_argument, NULL, 'D'},
        {"order-timeout", required_argument, NULL, 'O'},
        {"rate-per-user", required_argument, NULL, 'U'},
        {"rate-total", required_argument, NULL, 'T'},
        {NULL, 0, NULL, 0},
    };
    *o = (serve_opts){DEFAULT_LISTEN,
                      NULL,
                      DEFAULT_DB,
                      "redis",
                      sk_secret_file(NULL),
                      0,
                      0,
                      DEFAULT_ORDER_TIMEOUT_MS,
                      NULL,
                      NULL,
                      NULL,
                      {0, SK_HTTP_MAX_CONNECTIONS, SK_HTTP_PER_CLIENT, SK_HTTP_IDLE_TIMEOUT_S, SK_HTTP_LOOP_AUTO},
                      NULL,
                      NULL,
                      NULL,
                      NULL,
                      {0},
                      {0}};
    o->redis = sk_env_url("SECKILL_REDIS_URL");
    if (sk_env_url("SECKILL_DB_URL")) o->db = sk_env_url("SECKILL_DB_URL");
    const char *ot = sk_env_url("SECKILL_ORDER_TIMEOUT_MS");
    uint64_t n;
    if (ot && (sk_parse_u64(ot, strlen(ot), ORDER_TIMEOUT_MAX_MS, &n) != 0)) {
        fprintf(stderr, "seckill: SECKILL_ORDER_TIMEOUT_MS wants 0 (never) to 600000 ms\n");
        return -1;
    }
    if (ot) o->order_timeout_ms = (int)n;
    o->rate_user = sk_env_url("SECKILL_RATE_PER_USER");
    o->rate_total = sk_env_url("SECKILL_RATE_TOTAL");
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longs, NULL)) != -1) {
        switch (c) {
        case 'l': o->listen = optarg; break;
        case 'r': o->redis = optarg; break;
        case 'd': o->db = optarg; break;
        case 's': o->strategy = optarg; break;
        case 'k': o->secret_file = optarg; break;
        case 't':
            if (sk_parse_u64(optarg, strlen(optarg), 1024, &n) != 0 || n == 0) {
                fprintf(stderr, "seckill: --threads wants 1 to 1024\n");
                return -1;
            }
            o->threads = (int)n;
            break;
        case 'a':
            if (sk_parse_u64(optarg, strlen(optarg), 16, &n) != 0) {
                fprintf(stderr, "seckill: --replica-acks wants 0 to 16\n");
                return -1;
            }
            o->replica_acks = (int)n;
            break;
        case 'M':
            if (sk_parse_u64(optarg, strlen(optarg), 1000000, &n) != 0 || n == 0) {
                fprintf(stderr, "seckill: --max-connections wants 1 to 1000000\n");
                return -1;
            }
            o->limits.max_connections = (int)n;
            break;
        case 'P':
            if (sk_parse_u64(optarg, strlen(optarg), 1000000, &n) != 0) {
                fprintf(stderr, "seckill: --max-connections-per-client wants 0 (no limit) to 1000000\n");
                return -1;
            }
            o->limits.per_client = (int)n;
            break;
        case 'I':
            if (sk_parse_u64(optarg, strlen(optarg), 86400, &n) != 0) {
                fprintf(stderr, "seckill: --idle-timeout wants 0 (never) to 86400 seconds\n");
                return -1;
            }
            o->limits.idle_timeout_s = (int)n;
            break;
        case 'E':
            if (strcmp(optarg, "auto") == 0) o->limits.event_loop = SK_HTTP_LOOP_AUTO;
            else if (strcmp(optarg, "poll") == 0) o->limits.event_loop = SK_HTTP_LOOP_POLL;
            else if (strcmp(optarg, "epoll") == 0) o->limits.event_loop = SK_HTTP_LOOP_EPOLL;
            else {
                fprintf(stderr, "seckill: --event-loop is auto, poll or epoll\n");
                return -1;
            }
            break;
        case 'O':
            if (sk_parse_u64(optarg, strlen(optarg), ORDER_TIMEOUT_MAX_MS, &n) != 0) {
                fprintf(stderr, "seckill: --order-timeout wants 0 (never) to 600000 ms\n");
                return -1;
            }
            o->order_timeout_ms = (int)n;
            break;
        case 'U': o->rate_user = optarg; break;
        case 'T': o->rate_total = optarg; break;
        case 'R': o->redis_password_file = optarg; break;
        case 'D': o->db_password_file = optarg; break;
        case 'L': o->log_level = optarg; break;
        case 'F': o->log_format = optarg; break;
        case 'A': o->access_log = optarg; break;
        case 'h': sk_usage(stdout); exit(0);
        default: sk_opt_error("serve", c, argv); return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "seckill: serve takes no arguments, only options\n");
        return -1;
    }
    if (strcmp(o->strategy, "redis") != 0 && strcmp(o->strategy, "lock") != 0) {
        fprintf(stderr, "seckill: --strategy is redis or lock\n");
        return -1;
    }
    if (parse_rate("--rate-per-user", "SECKILL_RATE_PER_USER", o->rate_user, &o->user) != 0 ||
        parse_rate("--rate-total", "SECKILL_RATE_TOTAL", o->rate_total, &o->total) != 0)
        return -1;
    if (o->threads == 0) o->threads = default_threads(o);
    /* libmicrohttpd gives each worker thread an equal share of the limit. */
    if (o->limits.max_connections < o->threads) {
        fprintf(stderr, "seckill: --max-connections (%d) must be at least --threads (%d)\n", o->limits.max_connections,
                o->threads);
        return -1;
    }
    o->limits.threads = o->threads;
    char err[256];
    if (sk_log_configure(o->log_level, o->log_format, err, sizeof err) != 0) {
        fprintf(stderr, "seckill: %s\n", err);
        return -1;
    }
    if (sk_http_check_listen(o->listen, err, sizeof err) != 0) {
        fprintf(stderr, "seckill: %s\n", err);
        return -1;
    }
    return 0;
}

/* Everything serve builds, so one function can tear down whatever part
 * of it exists, in reverse order. */
typedef struct server {
    sk_embedded embedded;
    unsigned char *secret;
    size_t secret_len;
    sk_db *db;
    dlock_client *client; /* the process's one client: locks, ids and the redis strategy */
    sk_redis redis;
    sk_orderids *ids;
    sk_writer *writer;
    sk_admit admit;
    sk_app app;
    sk_http *http;
} server;

/* Reverse order of start: HTTP first (no new orders), the writer after
 * (it finishes its batch), the stores last. */
static void server_down(server *s)
{
    sk_http_stop(s->http);
    if (s->app.strategy.ops) s->app.strategy.ops->destroy(s->app.strategy.ctx);
    sk_writer_stop(s->writer);
    sk_admit_close(&s->admit);
    sk_orderids_free(s->ids);
    sk_metrics_lock_client(NULL);
    if (s->client) dlock_client_free(s->client);
    sk_db_close(s->db);
    free(s->secret);
    sk_embedded_stop(&s->embedded);
    sk_log_access_close();
}

/* Each connection is a descriptor: take the hard limit, as the load tool
 * does, and say so when even that cannot hold --max-connections (plus a
 * margin for Redis, the database and the writer), since the kernel would
 * then refuse connections the limit lets in. */
static void raise_fd_limit(int max_connections)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)max_connections + 128)
        sk_log(SK_LOG_WARN, "open-file limit %llu is below --max-connections %d plus 128; raise it (LimitNOFILE=)",
               (unsigned long long)rl.rlim_cur, max_connections);
}

/* The one line that says what this instance is: an operator reading a
 * log (or a ticket) sees version, address, strategy, where its data lives
 * and how many threads serve, without the passwords. */
static void log_startup(const serve_opts *o, const server *s, const char *redis_url)
{
    char redis[512], db[512], rs[640];
    sk_mask_url(redis_url, redis, sizeof redis);
    sk_mask_url(o->db, db, sizeof db);
    if (o->redis) snprintf(rs, sizeof rs, "%s", redis);
    else snprintf(rs, sizeof rs, "%s (private redis-server pid %ld)", redis, (long)s->embedded.pid);
    char url[160];
    sk_http_url(s->http, o->listen, url, sizeof url);
    sk_log(SK_LOG_INFO,
           "seckill %s (libdlock %s) listening on %s, strategy %s, redis %s, db %s, %d threads, "
           "max-connections %d (%d per client), idle-timeout %d s, event loop %s, replica-acks %d, "
           "order-timeout %d ms, redis command timeout %d ms, rate per user %s, rate total %s, access log %s",
           DLOCK_VERSION, dlock_version(), url, o->strategy, rs, db, o->threads, o->limits.max_connections,
           o->limits.per_client, o->limits.idle_timeout_s,
           sk_http_event_loop(&o->limits) == SK_HTTP_LOOP_POLL ? "poll" : "epoll", o->replica_acks, o->order_timeout_ms,
           redis_timeout_ms(), o->rate_user ? o->rate_user : "off", o->rate_total ? o->rate_total : "off",
           o->access_log ? o->access_log : "off");
    /* verify=no must be a choice somebody sees, not a default nobody does. */
    dlock_url u;
    if (redis_url && dlock_url_parse(redis_url, &u) == DLOCK_OK) {
        if (u.tls && !u.tls_verify)
            sk_log(SK_LOG_WARN, "TLS certificate verification is off for Redis (verify=no): anyone on the path "
                                "can pose as the server");
        dlock_url_free(&u);
    }
}

/* Start everything, print the listening line, wait for SIGINT/SIGTERM. */
int sk_cmd_serve(int argc, char **argv)
{
    serve_opts o;
    if (parse_serve(argc, argv, &o) != 0) {
        fputs(SK_HELP_HINT, stderr);
        return EXIT_USAGE;
    }
    /* Signals are taken by sigwait() below; every thread created from
     * here on inherits the mask, so none of them is interrupted. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    server s;
    memset(&s, 0, sizeof s);
    char err[512];
    sk_passwords pw;
    if (sk_passwords_load(o.redis_password_file, o.db_password_file, &pw, err, sizeof err) != 0) {
        fprintf(stderr, "seckill: %s\n", err);
        return EXIT_USAGE;
    }
    int created = 0;
    const char *redis_url = o.redis;
    if (sk_secret_load(o.secret_file, 1, &s.secret, &s.secret_len, &created, err, sizeof err) != 0) goto fail;
    if (created) sk_log(SK_LOG_INFO, "created secret file %s", o.secret_file);
    if (o.access_log && sk_log_access_open(o.access_log, err, sizeof err) != 0) goto fail;
    if (!redis_url) {
        if (sk_embedded_start(&s.embedded, err, sizeof err) != 0) goto fail;
        redis_url = s.embedded.url;
    }
    /* The private redis-server has no password: a Redis password is for
     * the Redis of --redis. */
    int connected =
        sk_db_open(o.db, pw.db, 0, &s.db, err, sizeof err) == 0 &&
        sk_redis_connect(redis_url, o.redis ? pw.redis : NULL, redis_timeout_ms(), &s.client, err, sizeof err) == 0;
    sk_passwords_free(&pw);
    if (!connected) goto fail;
    s.ids = sk_orderids_new(s.client, (int)env_long("SECKILL_ORDER_ID_BATCH", 128));
    if (!s.ids) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    if (sk_orderids_fill(s.ids) != SK_OK)
        sk_log(SK_LOG_WARN, "no order ids reserved at start: %s; the first orders ask again", dlock_last_error());
    if (strcmp(o.strategy, "redis") == 0) {
        if (sk_redis_init(&s.redis, s.client, redis_url, o.replica_acks, redis_replica_timeout_ms(), err, sizeof err) !=
            0)
            goto fail;
        long linger = env_long("SECKILL_WRITER_LINGER_MS", 20);
        sk_writer_config wc = {
            .db = s.db,
            .redis = &s.redis,
            .consumer = getenv("SECKILL_CONSUMER"),
            .claim_idle_ms = env_long("SECKILL_CLAIM_IDLE_MS", 30000),
            .max_deliveries = (int)env_long("SECKILL_MAX_DELIVERIES", 5),
            .linger_ms = linger == 0 ? -1 : (int)(linger > 1000 ? 1000 : linger),
        };
        s.writer = sk_writer_start(&wc);
        if (!s.writer) {
            snprintf(err, sizeof err, "cannot start the order writer: %s", dlock_last_error());
            goto fail;
        }
        /* The embedded Redis is private to this process: no other writer
         * can hold orders from before it started, so no grace is needed. */
        int grace = o.redis ? (int)env_long("SECKILL_WARM_GRACE_S", DEFAULT_WARM_GRACE_S) : 0;
        long sold_out_ms = env_long("SECKILL_SOLD_OUT_MS", DEFAULT_SOLD_OUT_MS);
        if (sold_out_ms < 0) sold_out_ms = 0;
        if (sk_strategy_redis_new(s.db, &s.redis, s.ids, s.writer, grace, sold_out_ms, &s.app.strategy, err,
                                  sizeof err) != 0)
            goto fail;
    } else if (sk_strategy_lock_new(s.db, s.client, s.ids, o.order_timeout_ms, &s.app.strategy) != 0) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    sk_metrics_build_info(DLOCK_VERSION, dlock_version(), o.strategy);
    sk_metrics_lock_client(s.client);
    s.app.secret = s.secret;
    s.app.secret_len = s.secret_len;
    s.app.answer_timeout_ms = o.order_timeout_ms;
    if (o.rate_user || o.rate_total) {
        if (sk_admit_open(&s.admit, s.client, o.rate_user ? &o.user : NULL, o.rate_total ? &o.total : NULL, err,
                          sizeof err) != 0)
            goto fail;
        s.app.admit = sk_admit_check;
        s.app.admit_ctx = &s.admit;
    }
    raise_fd_limit(o.limits.max_connections);
    if (sk_http_start(&s.app, o.listen, &o.limits, &s.http, err, sizeof err) != 0) goto fail;

    log_startup(&o, &s, redis_url);
    /* The one line on stdout: scripts and tests read the port from it. */
    char url[160];
    sk_http_url(s.http, o.listen, url, sizeof url);
    printf("seckill: listening on %s (strategy %s, %d threads)\n", url, o.strategy, o.threads);
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    sk_log(SK_LOG_INFO, "signal %d (%s), stopping", sig, sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server_down(&s);
    /* The last line: whoever stopped it knows the orders in flight were
     * answered and the writer's batch committed. */
    sk_log(SK_LOG_INFO, "stopped");
    return 0;
fail:
    sk_log(SK_LOG_ERROR, "%s", err);
    sk_passwords_free(&pw);
    server_down(&s);
    sk_log(SK_LOG_INFO, "stopped without serving");
    return EXIT_UNAVAILABLE;
}
