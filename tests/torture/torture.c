/*
 * dlock-torture: the Jepsen-style torture harness.
 *
 * For each scenario it starts real servers (one redis-server, three for
 * RedLock, a Sentinel setup or a Cluster), a fenced resource (a server it
 * never faults), and client processes (dlock-torture-client: libdlock
 * clients, and `dlock lock` runs driven by a loop), each behind its own
 * loopback proxy where the topology allows, so that one client can be cut
 * off alone. While they run it applies a fault schedule drawn from the
 * seed: pauses (SIGSTOP) and kills (SIGKILL) of holders and waiters,
 * partitions (packets dropped, nothing refused) and latency, kill -9 and
 * restart of a server with and without AOF, failovers, the server's clock
 * jumping forward and back. Every fault goes to faults.log with its
 * times. Afterwards the checker (check.c) reads every history and says
 * whether a promise was broken that no fault explains.
 *
 * Four scenarios run the seeds' earlier locks instead (no lock, SETNX
 * without an owner, check-then-delete, GETSET timestamps with skewed
 * clocks): there the checker must find violations, or it has no teeth.
 *
 *   dlock-torture [--seconds S] [--seed N] [--scenarios a,b,...] [--keep]
 *   dlock-torture --list
 *   dlock-torture --check DIR       (check a kept scenario directory again)
 *
 * Exit 0 when every scenario passed and every broken one was caught.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "dlock.h"
#include "harness.h"
#include "history.h"
#include "proxy.h"
#include "th_topology.h"

#define MAX_CLIENTS 8
#define MAX_MASTERS 3
#define LEASE_MS 1000L
#define LATCH_N 3 /* counters of each latch round */
#define LATCH_ROUND_MS 2000L

typedef enum topo_kind { TOPO_SINGLE, TOPO_REDLOCK, TOPO_SENTINEL, TOPO_CLUSTER } topo_kind;

/* Fault types, as flags of a scenario and names in faults.log. */
enum {
    F_PAUSE = 1 << 0,
    F_KILL = 1 << 1,
    F_PARTITION = 1 << 2,
    F_LATENCY = 1 << 3,
    F_RESTART = 1 << 4,     /* kill -9 and restart, without persistence */
    F_RESTART_AOF = 1 << 5, /* the same with AOF (appendfsync always) */
    F_CLOCK = 1 << 6,       /* the server's clock jumps forward or back */
    F_FAILOVER = 1 << 7,    /* kill the master; Sentinel or Cluster promotes a replica */
    F_SKEW = 1 << 8,        /* the clients' clocks differ (getset) */
};

typedef struct scenario {
    const char *name;
    topo_kind topo;
    const char *kind; /* the library clients' kind (dlock-torture-client --kind) */
    int n_lib, n_cli;
    const char *cli_args; /* `dlock` subcommand and options of the CLI clients */
    const char *cli_mode; /* how their holds count: x (exclusive), p (permit) */
    unsigned faults;
    int broken; /* one of the seeds' locks: must be caught */
    long permits;
    const char *names; /* object names, without the scenario prefix */
    const char *what;  /* one line for the report */
    int threads;       /* library clients of kind lock or fair: threads each (0: one) */
} scenario;

static const scenario scenarios[] = {
    {"lock", TOPO_SINGLE, "lock", 4, 2, "lock", "x", F_PAUSE | F_KILL | F_PARTITION | F_LATENCY, 0, 0, "L",
     "reentrant lock, library and CLI"},
    {"threads", TOPO_SINGLE, "lock", 1, 0, NULL, NULL, F_PAUSE | F_KILL | F_PARTITION | F_LATENCY, 0, 0, "L",
     "reentrant lock, one client of 6 threads: hand-offs between them", 6},
    {"fair", TOPO_SINGLE, "fair", 3, 2, "lock --fair", "x", F_PAUSE | F_KILL | F_PARTITION | F_LATENCY, 0, 0, "L",
     "fair lock"},
    {"fair-threads", TOPO_SINGLE, "fair", 2, 1, "lock --fair", "x", F_PAUSE | F_KILL | F_PARTITION | F_LATENCY, 0, 0,
     "L", "fair lock, two clients of 4 threads and the CLI: hand-offs within a client, in the queue's order", 4},
    {"rw", TOPO_SINGLE, "rw", 4, 1, "lock --write", "x", F_PAUSE | F_KILL | F_PARTITION | F_LATENCY, 0, 0, "L",
     "read-write lock (60 % readers), CLI writer"},
    {"semaphore", TOPO_SINGLE, "sem", 4, 0, NULL, NULL, F_PAUSE | F_PARTITION | F_LATENCY, 0, 2, "S",
     "semaphore, 2 permits (no kills: its permits have no lease)"},
    {"psem", TOPO_SINGLE, "psem", 3, 2, "semaphore -p 2", "p", F_PAUSE | F_KILL | F_PARTITION | F_LATENCY, 0, 2, "S",
     "permit-expirable semaphore, 2 permits, library and CLI"},
    {"latch", TOPO_SINGLE, "latch", 5, 0, NULL, NULL, F_PAUSE | F_KILL | F_PARTITION | F_LATENCY, 0, 0, "C",
     "count-down latch: 3 counters, 2 awaiters, a round every 2 s"},
    {"multi", TOPO_SINGLE, "multi", 4, 0, NULL, NULL, F_PAUSE | F_KILL | F_PARTITION | F_LATENCY, 0, 0, "A,B,C",
     "multi-lock: two of three locks at once"},
    {"redlock", TOPO_REDLOCK, "redlock", 4, 1, "lock", "x", F_PAUSE | F_KILL | F_PARTITION | F_RESTART, 0, 0, "L",
     "RedLock over 3 masters, library and CLI"},
    {"restart", TOPO_SINGLE, "lock", 4, 1, "lock", "x", F_RESTART | F_PAUSE, 0, 0, "L",
     "server killed and restarted without persistence"},
    {"restart-aof", TOPO_SINGLE, "lock", 4, 1, "lock", "x", F_RESTART_AOF | F_PARTITION, 0, 0, "L",
     "server killed and restarted with AOF (appendfsync always)"},
    {"clock", TOPO_SINGLE, "lock", 4, 1, "lock", "x", F_CLOCK | F_PARTITION, 0, 0, "L",
     "server clock jumps forward 3 s and back 10 s"},
    {"sentinel", TOPO_SENTINEL, "lock", 4, 1, "lock", "x", F_FAILOVER | F_PAUSE | F_KILL, 0, 0, "L",
     "Sentinel failover (master killed)"},
    {"cluster", TOPO_CLUSTER, "lock", 4, 1, "lock", "x", F_FAILOVER | F_PAUSE | F_KILL, 0, 0, "L",
     "Cluster failover (the lock's master killed)"},
    {"seckill", TOPO_SINGLE, "seckill", 0, 0, NULL, NULL, F_RESTART_AOF | F_PAUSE | F_KILL, 0, 0, "V",
     "seckill, redis strategy, AOF: Redis kill -9, the service paused and killed"},
    {"seed-nolock", TOPO_SINGLE, "nolock", 4, 0, NULL, NULL, F_PAUSE, 1, 0, "L", "seed 000: no lock at all"},
    {"seed-setnx", TOPO_SINGLE, "setnx", 4, 0, NULL, NULL, F_PAUSE, 1, 0, "L",
     "SETNX without an owner, released with DEL"},
    /* No pauses from outside: its own slow release is the pause of the
     * seeds' story, and a pause of another holder would explain the very
     * overlap its DEL causes (the checker then counts it as explained and
     * the broken lock goes uncaught: three 10 s runs in a row, under ASan). */
    {"seed-checkdel", TOPO_SINGLE, "checkdel", 4, 0, NULL, NULL, 0, 1, 0, "L",
     "owner checked with GET, then DEL: two commands"},
    {"seed-getset", TOPO_SINGLE, "getset", 4, 0, NULL, NULL, F_SKEW, 1, 0, "L",
     "seed 004: GETSET expiry timestamps, client clocks 0-400 ms apart"},
};
#define N_SCENARIOS (sizeof scenarios / sizeof scenarios[0])

/* One worker slot: a process, restarted after a kill. */
typedef struct slot {
    int cli; /* a `dlock` loop rather than a library client */
    pid_t pid;
    int64_t respawn_at; /* after a kill: when to start it again (0: no) */
    int64_t busy_until; /* a fault on it lasts until then */
    th_proxy *px[MAX_MASTERS];
    long skew;
    const char *latch_role;
} slot;

typedef struct run {
    const scenario *s;
    unsigned long long rng;
    char dir[512];
    char names[128]; /* scenario-prefixed names, comma separated */
    int fault_fd;
    int64_t start_us, end_us;
    th_redis servers[MAX_MASTERS];
    int n_servers;
    th_topology topo;
    int have_topo;
    th_redis *resource;
    slot slots[MAX_CLIENTS];
    int n_slots;
    long clock_offset; /* seconds */
    char client_bin[PATH_MAX];
    const char *dlock_bin;
} run;

/* Copy src into a fixed field of an event record, cut to fit: the record
 * is a fixed size and a cut name or target still reads in the log. */
static void put_field(char *dst, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* One fault in faults.log: its type, the process it hit (0: a server),
 * and when. */
static void log_fault(run *r, const char *type, int pid, const char *target, int64_t t0, int64_t t1)
{
    tt_event e = {TT_FAULT, TT_NONE, (int)getpid(), pid, 0, 0, "", t0, t1, "", 0, 0};
    put_field(e.name, sizeof e.name, type);
    put_field(e.result, sizeof e.result, target);
    tt_write(r->fault_fd, &e);
}

static void log_meta(run *r, const char *what, const char *name, long long value)
{
    tt_event e = {TT_META, TT_NONE, (int)getpid(), 0, 0, 0, "", 0, 0, "", 0, value};
    put_field(e.name, sizeof e.name, name);
    put_field(e.result, sizeof e.result, what);
    tt_write(r->fault_fd, &e);
}

/* The URL(s) slot i's clients use: its proxies where the topology has
 * them, else the topology's own URL. */
static int slot_urls(run *r, int i, const char **urls)
{
    if (r->s->topo == TOPO_SENTINEL || r->s->topo == TOPO_CLUSTER) {
        urls[0] = r->topo.url;
        return 1;
    }
    for (int m = 0; m < r->n_servers; m++) urls[m] = th_proxy_url(r->slots[i].px[m]);
    return r->n_servers;
}

/* The pid a fault on slot i hits: the library client, or the `dlock`
 * holding for the CLI loop now (0 when none runs). */
static pid_t slot_holder(run *r, int i)
{
    if (!r->slots[i].cli) return r->slots[i].pid;
    char path[600];
    snprintf(path, sizeof path, "%s/cli-%d.pid", r->dir, i);
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1) pid = 0;
        fclose(f);
    }
    return pid;
}

static void spawn(run *r, int i)
{
    slot *sl = &r->slots[i];
    const char *urls[MAX_MASTERS];
    int n = slot_urls(r, i, urls);
    long left = (long)((r->end_us - tt_now_us()) / 1000000);
    if (left < 1) return;
    char client[16], seconds[16], seed[24], lease[16], permits[16], skew[16], latch_n[16], epoch[24];
    snprintf(client, sizeof client, "%d", i);
    snprintf(seconds, sizeof seconds, "%ld", left);
    snprintf(seed, sizeof seed, "%llu", tt_rand(&r->rng));
    snprintf(lease, sizeof lease, "%ld", LEASE_MS);
    snprintf(permits, sizeof permits, "%ld", r->s->permits);
    snprintf(skew, sizeof skew, "%ld", sl->skew);
    snprintf(latch_n, sizeof latch_n, "%d", LATCH_N);
    snprintf(epoch, sizeof epoch, "%lld", (long long)r->start_us);
    const char *argv[64];
    int a = 0;
    argv[a++] = r->client_bin;
    argv[a++] = "--kind";
    argv[a++] = sl->cli ? "cli" : r->s->kind;
    const char *fixed[] = {"--dir",          r->dir,   "--client",  client,       "--resource", r->resource->url,
                           "--name",         r->names, "--seconds", seconds,      "--seed",     seed,
                           "--lease",        lease,    "--permits", permits,      "--skew",     skew,
                           "--slow-release", lease,    "--dlock",   r->dlock_bin, NULL};
    for (int k = 0; fixed[k]; k++) argv[a++] = fixed[k];
    for (int m = 0; m < n; m++) {
        argv[a++] = "--url";
        argv[a++] = urls[m];
    }
    /* Process pauses inside a hold, between the check and the write, in
     * one step of a hundred (the library's clients of scenarios with
     * pauses; a COMMAND of the CLI is the CLI's business). */
    if (!sl->cli && (r->s->faults & F_PAUSE) && !r->s->broken) {
        argv[a++] = "--gc-pause-pct";
        argv[a++] = "1";
    }
    char threads[16];
    if (!sl->cli && r->s->threads > 1) {
        snprintf(threads, sizeof threads, "%d", r->s->threads);
        argv[a++] = "--threads";
        argv[a++] = threads;
    }
    if (sl->cli) {
        argv[a++] = "--cli-args";
        argv[a++] = r->s->cli_args;
        argv[a++] = "--mode";
        argv[a++] = r->s->cli_mode;
    }
    if (sl->latch_role) {
        char round_ms[16];
        snprintf(round_ms, sizeof round_ms, "%ld", LATCH_ROUND_MS);
        const char *l[] = {"--latch-role", sl->latch_role, "--latch-n", latch_n, "--round-ms",
                           round_ms,       "--epoch",      epoch,       NULL};
        for (int k = 0; l[k]; k++) argv[a++] = l[k];
    }
    argv[a] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0); /* a `dlock` it runs is in here too; ^C to the harness stops neither */
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        /* What the clients and dlock say goes to the scenario's directory. */
        char out[600];
        snprintf(out, sizeof out, "%s/out-%d.txt", r->dir, i);
        int fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(r->client_bin, (char *const *)argv);
        _exit(127);
    }
    sl->pid = pid > 0 ? pid : 0;
    sl->respawn_at = 0;
}

/* ---- servers ---------------------------------------------------------- */

static int start_servers(run *r)
{
    const scenario *s = r->s;
    if (s->topo == TOPO_SENTINEL || s->topo == TOPO_CLUSTER) {
        th_topology_opts o = {0};
        int rc = s->topo == TOPO_SENTINEL ? th_sentinel_start(&r->topo, &o) : th_cluster_start(&r->topo, &o);
        r->have_topo = rc == 0;
        return rc;
    }
    r->n_servers = s->topo == TOPO_REDLOCK ? 3 : 1;
    const char *conf = s->faults & F_RESTART_AOF ? "appendonly yes\nappendfsync always\n" : NULL;
    for (int m = 0; m < r->n_servers; m++) {
        if (th_redis_start(&r->servers[m], conf) != 0) return -1;
        if (s->faults & F_CLOCK) {
            char path[600];
            snprintf(path, sizeof path, "%s/clock", r->dir);
            if (th_redis_clock_file(&r->servers[m], path) != 0 || th_redis_restart(&r->servers[m]) != 0) return -1;
        }
    }
    for (int i = 0; i < r->n_slots; i++)
        for (int m = 0; m < r->n_servers; m++)
            if (!(r->slots[i].px[m] = th_proxy_start(&r->servers[m]))) return -1;
    return 0;
}

static void stop_servers(run *r)
{
    for (int i = 0; i < r->n_slots; i++)
        for (int m = 0; m < MAX_MASTERS; m++) {
            th_proxy_stop(r->slots[i].px[m]);
            r->slots[i].px[m] = NULL;
        }
    for (int m = 0; m < r->n_servers; m++) th_redis_stop(&r->servers[m]);
    if (r->have_topo) th_topology_stop(&r->topo);
}

/* ---- faults ----------------------------------------------------------- */

typedef struct active {
    int type, slot;
    pid_t pid;
    int64_t t0, until;
    long clock_offset; /* F_CLOCK: the offset its servers must show */
} active;

static int free_slot(run *r, int64_t now)
{
    for (int tries = 0; tries < 2 * r->n_slots; tries++) {
        int i = (int)tt_rand_between(&r->rng, 0, r->n_slots - 1);
        if (r->slots[i].busy_until <= now && r->slots[i].pid > 0) return i;
    }
    return -1;
}

/* Start one fault of a type the scenario allows; faults that last are
 * added to `act`. Server faults block while they happen. */
static void start_fault(run *r, active *act, int *n_act)
{
    const scenario *s = r->s;
    int64_t now = tt_now_us();
    unsigned types[16];
    int nt = 0;
    for (int b = 0; b < 9; b++)
        if ((s->faults & (1u << b)) && (1u << b) != F_SKEW) types[nt++] = 1u << b;
    if (nt == 0) return;
    unsigned type = types[tt_rand_between(&r->rng, 0, nt - 1)];
    char target[32];
    if (type == F_PAUSE || type == F_KILL || type == F_PARTITION || type == F_LATENCY) {
        int i = free_slot(r, now);
        if (i < 0) return;
        pid_t pid = slot_holder(r, i);
        snprintf(target, sizeof target, "slot%d", i);
        if (type == F_PAUSE) {
            if (pid <= 0) return;
            long ms = tt_rand_between(&r->rng, LEASE_MS / 3, LEASE_MS * 5 / 2);
            kill(pid, SIGSTOP);
            act[(*n_act)++] = (active){F_PAUSE, i, pid, now, now + ms * 1000};
            r->slots[i].busy_until = now + ms * 1000;
        } else if (type == F_KILL) {
            if (pid <= 0) return;
            kill(pid, SIGKILL);
            log_fault(r, "kill", pid, target, now, now);
            if (!r->slots[i].cli) r->slots[i].respawn_at = now + tt_rand_between(&r->rng, 50, 300) * 1000;
            r->slots[i].busy_until = now + 400000;
        } else if (r->s->topo == TOPO_SINGLE || r->s->topo == TOPO_REDLOCK) {
            long ms = type == F_PARTITION ? tt_rand_between(&r->rng, LEASE_MS / 2, LEASE_MS * 5 / 2)
                                          : tt_rand_between(&r->rng, 1000, 3000);
            long lat = tt_rand_between(&r->rng, 20, LEASE_MS / 4);
            /* RedLock: cut off from one master (still a majority) or two. */
            int cut = r->n_servers == 1 ? 1 : (int)tt_rand_between(&r->rng, 1, 2);
            for (int m = 0; m < cut; m++) {
                if (type == F_PARTITION) th_proxy_partition(r->slots[i].px[m], 1);
                else th_proxy_latency(r->slots[i].px[m], lat);
            }
            act[(*n_act)++] = (active){(int)type, i, pid, now, now + ms * 1000};
            r->slots[i].busy_until = now + ms * 1000;
        }
        return;
    }
    if (type == F_RESTART || type == F_RESTART_AOF) {
        int m = (int)tt_rand_between(&r->rng, 0, r->n_servers - 1);
        snprintf(target, sizeof target, "server%d", m);
        th_redis_restart(&r->servers[m]);
        log_fault(r, type == F_RESTART ? "restart" : "restart-aof", 0, target, now, tt_now_us());
    } else if (type == F_CLOCK) {
        for (int k = 0; k < *n_act; k++)
            if (act[k].type == F_CLOCK) return; /* one jump at a time */
        /* Forward 3 s (leases end early: explained), or back 10 s (they end
         * late, and the fencing clock floor steps back: nothing may go
         * wrong). */
        int forward = r->clock_offset < 0 || tt_rand_between(&r->rng, 0, 1);
        r->clock_offset += forward ? 3 : -10;
        char off[24];
        snprintf(off, sizeof off, "%+ld", r->clock_offset);
        for (int m = 0; m < r->n_servers; m++) th_redis_clock_jump(&r->servers[m], off);
        /* The fault lasts until every server is seen on its new clock (a
         * lease may end early at any moment up to then): end_faults() asks
         * them, and gives up after 5 s. */
        act[(*n_act)++] = (active){(int)type, forward, 0, now, now + 5000000, r->clock_offset};
    } else if (type == F_FAILOVER && r->have_topo) {
        int port, next = -1;
        if (r->s->topo == TOPO_SENTINEL) {
            port = th_sentinel_kill_master(&r->topo);
            if (port > 0) next = th_sentinel_wait_failover(&r->topo, port, 30000);
        } else {
            char key[160];
            snprintf(key, sizeof key, "dlock:{%s}", r->names);
            port = th_cluster_key_owner(&r->topo, key);
            if (port > 0 && th_node_kill(&r->topo, port) == 0) next = th_cluster_wait_failover(&r->topo, port, 30000);
        }
        /* The old master comes back, empty, and is a master again until
         * the Sentinels (or the cluster) make it a replica: locks taken on
         * it meanwhile are not on the real master. The fault lasts until
         * the topology is whole again. */
        if (port > 0 && next > 0 && th_node_restart(&r->topo, port) == 0)
            th_node_wait_role(&r->topo, port, TH_REPLICA, 30000);
        snprintf(target, sizeof target, "port%d", port);
        log_fault(r, "failover", 0, target, now, tt_now_us());
    }
}

/* End the faults that are due (all of them when `all`). */
static void end_faults(run *r, active *act, int *n_act, int all)
{
    int64_t now = tt_now_us();
    for (int k = 0; k < *n_act;) {
        active *a = &act[k];
        if (a->type == F_CLOCK) {
            int seen = 1;
            for (int m = 0; m < r->n_servers && seen; m++)
                seen = th_redis_clock_settle(&r->servers[m], a->clock_offset, 0) == 0;
            if (!seen && !all && a->until > now) {
                k++;
                continue;
            }
            char off[24];
            snprintf(off, sizeof off, "%+ld", a->clock_offset);
            log_fault(r, a->slot ? "clock-forward" : "clock-back", 0, off, a->t0, tt_now_us());
            act[k] = act[--*n_act];
            continue;
        }
        if (!all && a->until > now) {
            k++;
            continue;
        }
        char target[32];
        snprintf(target, sizeof target, "slot%d", a->slot);
        slot *sl = &r->slots[a->slot];
        if (a->type == F_PAUSE) {
            kill(a->pid, SIGCONT);
            log_fault(r, "pause", a->pid, target, a->t0, now);
        } else {
            for (int m = 0; m < r->n_servers; m++) {
                if (a->type == F_PARTITION) th_proxy_partition(sl->px[m], 0);
                else th_proxy_latency(sl->px[m], 0);
            }
            log_fault(r, a->type == F_PARTITION ? "partition" : "latency", a->pid, target, a->t0, now);
        }
        act[k] = act[--*n_act];
    }
}

/* ---- one scenario ------------------------------------------------------ */

static void reap(run *r)
{
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0)
        for (int i = 0; i < r->n_slots; i++)
            if (r->slots[i].pid == p) r->slots[i].pid = 0;
}

/* Wait for the clients to finish their last holds, then stop whatever is
 * left. */
static void drain(run *r, int64_t deadline)
{
    for (;;) {
        reap(r);
        int left = 0;
        for (int i = 0; i < r->n_slots; i++) left += r->slots[i].pid > 0;
        if (!left || tt_now_us() > deadline) break;
        tt_sleep_ms(20);
    }
    for (int i = 0; i < r->n_slots; i++) {
        pid_t h = slot_holder(r, i);
        if (r->slots[i].cli && h > 0) kill(h, SIGKILL);
        if (r->slots[i].pid > 0) kill(-r->slots[i].pid, SIGKILL);
    }
    tt_sleep_ms(50);
    reap(r);
}

/* The latches of the latch scenario's rounds (see the client's
 * run_latch): set to LATCH_N each before the clients start (`set`), or
 * their final counts recorded for the checker. Set by the harness alone,
 * so that a late client cannot set a round's latch again once it opened. */
static void latch_rounds(run *r, int set)
{
    const char *url = r->have_topo ? r->topo.url : r->servers[0].url;
    dlock_client *cl = NULL;
    if (dlock_client_new(url, NULL, &cl) != DLOCK_OK) return;
    long rounds = (long)((r->end_us - r->start_us) / (LATCH_ROUND_MS * 1000)) + 1;
    for (long k = 1; k <= rounds; k++) {
        char name[96];
        snprintf(name, sizeof name, "%.40s-%ld", r->names, k);
        dlock_latch *l;
        if (dlock_latch_new(cl, name, &l) != DLOCK_OK) continue;
        long count = -1;
        if (set) {
            dlock_latch_set(l, LATCH_N, NULL);
        } else if (dlock_latch_count(l, &count) == DLOCK_OK) {
            log_meta(r, "latch", name, LATCH_N);
            log_meta(r, "left", name, count);
        }
        dlock_latch_free(l);
    }
    dlock_client_free(cl);
}

/* What the checker needs besides the histories: final counters, permits,
 * latch counts. */
static void record_meta(run *r)
{
    char names[128];
    snprintf(names, sizeof names, "%s", r->names);
    for (char *name = strtok(names, ","); name; name = strtok(NULL, ",")) {
        redisReply *c = th_redis_cmd(r->resource, "GET res:{%s}:count", name);
        log_meta(r, "count", name, c && c->type == REDIS_REPLY_STRING ? atoll(c->str) : 0);
        if (c) freeReplyObject(c);
        if (r->s->permits) log_meta(r, "permits", name, r->s->permits);
    }
    if (strcmp(r->s->kind, "latch") == 0) latch_rounds(r, 0);
}

static void print_report(const scenario *s, long seconds, const tt_report *rep, long violations)
{
    const char *verdict = s->broken ? (violations > 0 ? "CAUGHT" : "MISSED") : (violations ? "FAIL" : "PASS");
    printf("%-13s %3lds holds=%-5ld steps=%-5ld rejected=%-4ld faults=%-3ld overlaps=%ld/%ld "
           "worst_ms=%.1f/%.1f token_order=%ld token_dups=%ld lost_updates=%ld excess=%ld/%ld latch=%ld/%ld "
           "sales=%ld/%ld acked=%ld lost_orders=%ld violations=%ld %s\n",
           s->name, seconds, rep->holds, rep->steps, rep->rejected, rep->faults, rep->overlaps_explained,
           rep->overlaps_unexplained, rep->worst_explained_us / 1000.0, rep->worst_unexplained_us / 1000.0,
           rep->token_order, rep->token_dups, rep->lost_updates, rep->excess_explained, rep->excess_unexplained,
           rep->latch_rounds, rep->latch_bad, rep->sales, rep->sales_bad, rep->orders_acked, rep->orders_lost,
           violations, verdict);
    for (int i = 0; i < rep->n_first; i++) printf("    %s\n", rep->first[i]);
    fflush(stdout);
}

static int check_dir(const scenario *s, const char *dir, long seconds)
{
    tt_event *ev;
    size_t n;
    if (tt_read_dir(dir, &ev, &n) != 0) {
        fprintf(stderr, "torture: cannot read %s\n", dir);
        return -1;
    }
    tt_report rep;
    tt_check(ev, n, &rep);
    long v = tt_violations(&rep);
    print_report(s, seconds, &rep, v);
    free(ev);
    return s->broken ? (v > 0 ? 0 : 1) : (v > 0 ? 1 : 0);
}

/* ---- seckill ------------------------------------------------------------ */

/* Start a process with stdout and stderr appended to `out`; its pid. */
static pid_t start_logged(const char *const *argv, const char *out)
{
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* `seckill serve` on `port`, once it accepts connections; its pid or 0. */
static pid_t start_serve(run *r, const char *seckill, int port)
{
    char listen[32], db[600], secret[600], out[600];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(db, sizeof db, "sqlite://%s/orders.db", r->dir);
    snprintf(secret, sizeof secret, "%s/secret", r->dir);
    snprintf(out, sizeof out, "%s/serve.txt", r->dir);
    const char *argv[] = {seckill,         "serve", "--listen",    listen, "--redis", r->servers[0].url, "--db", db,
                          "--secret-file", secret,  "--log-level", "warn", NULL};
    pid_t pid = start_logged(argv, out);
    for (int i = 0; pid > 0 && i < 500; i++) {
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, (struct timeval){0, 100000});
        int up = c && !c->err;
        if (c) redisFree(c);
        if (up) return pid;
        tt_sleep_ms(20);
    }
    return pid;
}

/* A number after `"key":` in a JSON line, or -1. */
static long long json_number(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* The last line of a file, into buf. */
static void last_line(const char *path, char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f))
        if (line[0] == '{') snprintf(buf, size, "%s", line);
    fclose(f);
}

/*
 * The flash-sale service under faults: rounds of `seckill load` (a new
 * voucher each, more buyers than units, each buyer trying twice) while
 * Redis (AOF, appendfsync always) is killed and restarted and the service
 * is paused or killed and started again. Afterwards `seckill verify`
 * checks every voucher (orders <= stock, one per user, stock adds up,
 * Redis agrees with the database), and the checker compares each round's
 * 201 answers with the orders the database holds: an acknowledged order
 * that is not there is lost.
 */
static void run_seckill(run *r)
{
    char seckill[PATH_MAX];
    snprintf(seckill, sizeof seckill, "%s", th_bin("../seckill/seckill"));
    int port = th_free_port();
    pid_t serve = start_serve(r, seckill, port);
    char url[64], secret[600];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    snprintf(secret, sizeof secret, "%s/secret", r->dir);
    long vouchers[256];
    int nv = 0;
    for (int round = 0; tt_now_us() < r->end_us && nv < 256; round++) {
        char out[600];
        snprintf(out, sizeof out, "%s/load-%d.txt", r->dir, round);
        const char *argv[] = {seckill,      "load", "--url",         url,  "--stock",       "1000", "--users", "10000",
                              "--attempts", "2",    "--concurrency", "32", "--secret-file", secret, NULL};
        pid_t load = start_logged(argv, out);
        int64_t fault_at = tt_now_us() + tt_rand_between(&r->rng, 0, 300) * 1000;
        int faulted = 0, st;
        while (waitpid(load, &st, WNOHANG) == 0) {
            if (!faulted && tt_now_us() >= fault_at) {
                faulted = 1;
                int64_t t0 = tt_now_us();
                long kind = tt_rand_between(&r->rng, 0, 2);
                if (kind == 0) {
                    th_redis_restart(&r->servers[0]);
                    log_fault(r, "restart-aof", 0, "redis", t0, tt_now_us());
                } else if (kind == 1) {
                    kill(serve, SIGSTOP);
                    tt_sleep_ms(tt_rand_between(&r->rng, 300, 1500));
                    kill(serve, SIGCONT);
                    log_fault(r, "pause", serve, "serve", t0, tt_now_us());
                } else {
                    kill(serve, SIGKILL);
                    waitpid(serve, NULL, 0);
                    log_fault(r, "kill", serve, "serve", t0, t0);
                    serve = start_serve(r, seckill, port);
                }
            }
            tt_sleep_ms(10);
        }
        char json[4096];
        last_line(out, json, sizeof json);
        long long voucher = json_number(json, "voucher"), created = json_number(json, "created");
        if (voucher > 0) {
            char name[32];
            snprintf(name, sizeof name, "%lld", voucher);
            log_meta(r, "created", name, created);
            vouchers[nv++] = (long)voucher;
        }
    }
    /* Verify once the service has drained every order. */
    char db[600], out[600];
    snprintf(db, sizeof db, "sqlite://%s/orders.db", r->dir);
    snprintf(out, sizeof out, "%s/verify.txt", r->dir);
    const char *argv[16 + 2 * 256];
    int a = 0;
    char ids[256][24];
    argv[a++] = seckill;
    argv[a++] = "verify";
    argv[a++] = "--db";
    argv[a++] = db;
    argv[a++] = "--redis";
    argv[a++] = r->servers[0].url;
    argv[a++] = "--wait";
    argv[a++] = "60";
    for (int i = 0; i < nv; i++) {
        snprintf(ids[i], sizeof ids[i], "%ld", vouchers[i]);
        argv[a++] = "--voucher";
        argv[a++] = ids[i];
    }
    argv[a] = NULL;
    int st = 0;
    pid_t v = start_logged(argv, out);
    waitpid(v, &st, 0);
    kill(serve, SIGTERM);
    waitpid(serve, NULL, 0);
    /* Each voucher's line: "voucher ID: initial I, orders O (...)...: OK|FAIL|UNCHECKED". */
    FILE *f = fopen(out, "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        long long id, initial, orders;
        if (sscanf(line, "voucher %lld: initial %lld, orders %lld", &id, &initial, &orders) != 3) continue;
        char name[32];
        snprintf(name, sizeof name, "%lld", id);
        log_meta(r, "orders", name, orders);
        log_meta(r, "verified", name, strstr(line, ": OK") ? 1 : 0);
    }
    if (f) fclose(f);
}

static int run_scenario(const scenario *s, unsigned long long seed, long seconds, const char *base, int keep,
                        th_redis *resource, const char *client_bin)
{
    run r;
    memset(&r, 0, sizeof r);
    r.s = s;
    r.rng = seed;
    r.resource = resource;
    r.dlock_bin = th_bin("dlock");
    snprintf(r.client_bin, sizeof r.client_bin, "%s", client_bin);
    snprintf(r.dir, sizeof r.dir, "%s/%s", base, s->name);
    mkdir(r.dir, 0755);
    char path[600];
    snprintf(path, sizeof path, "%s/faults.log", r.dir);
    r.fault_fd = tt_open(path);
    /* Names carry the scenario and the seed: the resource is shared. */
    char names[64];
    snprintf(names, sizeof names, "%s", s->names);
    for (char *n = strtok(names, ","); n; n = strtok(NULL, ","))
        snprintf(r.names + strlen(r.names), sizeof r.names - strlen(r.names), "%s%s-%s-%llx", r.names[0] ? "," : "",
                 s->name, n, seed & 0xffffff);
    r.n_slots = s->n_lib + s->n_cli;
    for (int i = 0; i < r.n_slots; i++) {
        r.slots[i].cli = i >= s->n_lib;
        if (s->faults & F_SKEW) r.slots[i].skew = tt_rand_between(&r.rng, 0, 400);
        if (!strcmp(s->kind, "latch")) r.slots[i].latch_role = i < LATCH_N ? "down" : "await";
    }
    if (start_servers(&r) != 0) {
        fprintf(stderr, "torture: %s: cannot start the servers\n", s->name);
        stop_servers(&r);
        return -1;
    }
    r.start_us = tt_now_us();
    r.end_us = r.start_us + (int64_t)seconds * 1000000;
    if (!strcmp(s->kind, "latch")) latch_rounds(&r, 1);
    if (!strcmp(s->kind, "seckill")) {
        run_seckill(&r);
        r.end_us = tt_now_us(); /* no clients: straight on to the check */
    }
    for (int i = 0; i < r.n_slots; i++) {
        spawn(&r, i);
        if (r.slots[i].skew) {
            char t[16];
            snprintf(t, sizeof t, "slot%d", i);
            log_fault(&r, "skew", r.slots[i].pid, t, r.start_us, r.start_us + r.slots[i].skew * 1000);
        }
    }
    active act[64];
    int n_act = 0;
    /* Faults start after a second of calm and stop a lease before the
     * end, so the last holds are checked under the same rules. */
    int64_t next = r.start_us + 1000000, stop_faults = r.end_us - LEASE_MS * 1000;
    while (tt_now_us() < r.end_us) {
        reap(&r);
        int64_t now = tt_now_us();
        for (int i = 0; i < r.n_slots; i++)
            if (r.slots[i].respawn_at && r.slots[i].respawn_at <= now) spawn(&r, i);
        end_faults(&r, act, &n_act, 0);
        if (now >= next && now < stop_faults && n_act < 60) {
            start_fault(&r, act, &n_act);
            next = tt_now_us() + tt_rand_between(&r.rng, 200, 1200) * 1000;
        }
        tt_sleep_ms(10);
    }
    end_faults(&r, act, &n_act, 1);
    drain(&r, tt_now_us() + (int64_t)(4 * LEASE_MS + 8000) * 1000);
    record_meta(&r);
    close(r.fault_fd);
    stop_servers(&r);
    int rc = check_dir(s, r.dir, seconds);
    if (rc == 0 && !keep) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", r.dir);
        if (system(cmd) != 0) { /* left for the user */
        }
    } else if (rc != 0) {
        printf("    histories kept in %s (dlock-torture --check %s)\n", r.dir, r.dir);
    }
    return rc;
}

static const scenario *find(const char *name)
{
    for (size_t i = 0; i < N_SCENARIOS; i++)
        if (!strcmp(scenarios[i].name, name)) return &scenarios[i];
    return NULL;
}

int main(int argc, char **argv)
{
    long seconds = 8;
    unsigned long long seed = 0;
    int keep = 0, have_seed = 0;
    const char *list = NULL, *check = NULL;
    static const struct option opts[] = {
        {"seconds", 1, NULL, 's'}, {"seed", 1, NULL, 'S'}, {"scenarios", 1, NULL, 'c'}, {"keep", 0, NULL, 'k'},
        {"check", 1, NULL, 'C'},   {"list", 0, NULL, 'l'}, {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 's': seconds = atol(optarg); break;
        case 'S':
            seed = strtoull(optarg, NULL, 10);
            have_seed = 1;
            break;
        case 'c': list = optarg; break;
        case 'k': keep = 1; break;
        case 'C': check = optarg; break;
        case 'l':
            for (size_t i = 0; i < N_SCENARIOS; i++) printf("%-14s %s\n", scenarios[i].name, scenarios[i].what);
            return 0;
        default:
            fprintf(stderr, "usage: dlock-torture [--seconds S] [--seed N] [--scenarios a,b] [--keep]\n"
                            "       dlock-torture --check DIR | --list\n");
            return 64;
        }
    }
    if (check) {
        const char *base = strrchr(check, '/');
        const scenario *s = find(base ? base + 1 : check);
        if (!s) s = &scenarios[0];
        return check_dir(s, check, 0) == 0 ? 0 : 1;
    }
    if (!have_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 20) ^ (unsigned long long)getpid();
    }
    signal(SIGPIPE, SIG_IGN);
    char client_bin[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", client_bin, sizeof client_bin - 40);
    if (len <= 0) return 70;
    client_bin[len] = '\0';
    char *slash = strrchr(client_bin, '/');
    snprintf(slash + 1, client_bin + sizeof client_bin - slash - 1, "dlock-torture-client");
    char base[] = "/tmp/dlock-torture-XXXXXX";
    if (!mkdtemp(base)) return 70;
    printf("torture: seed %llu, %ld s per scenario (replay: dlock-torture --seed %llu --seconds %ld%s%s)\n", seed,
           seconds, seed, seconds, list ? " --scenarios " : "", list ? list : "");
    fflush(stdout);
    th_redis resource;
    if (th_redis_start(&resource, NULL) != 0) {
        fprintf(stderr, "torture: cannot start the resource server\n");
        return 69;
    }
    int failed = 0;
    char copy[512];
    snprintf(copy, sizeof copy, "%s", list ? list : "");
    if (list) {
        char *save = NULL;
        for (char *name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
            const scenario *s = find(name);
            if (!s) {
                fprintf(stderr, "torture: no scenario '%s' (see --list)\n", name);
                failed = 1;
                continue;
            }
            failed |= run_scenario(s, seed++, seconds, base, keep, &resource, client_bin) != 0;
        }
    } else {
        for (size_t i = 0; i < N_SCENARIOS; i++)
            failed |= run_scenario(&scenarios[i], seed++, seconds, base, keep, &resource, client_bin) != 0;
    }
    th_redis_stop(&resource);
    if (!failed && !keep) rmdir(base);
    printf("torture: %s\n", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
