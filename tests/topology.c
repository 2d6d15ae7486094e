/* Starting, stopping and driving the processes of a multi-node topology
 * through scripts/redis-topology.sh; see th_topology.h. */
#include "th_topology.h"
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The script from the source tree (compile-time default) unless
 * DLOCK_TOPOLOGY_SCRIPT names another, so an installed copy can be tried. */
static const char *script_path(void)
{
    const char *p = getenv("DLOCK_TOPOLOGY_SCRIPT");
#ifdef DLOCK_TOPOLOGY_SCRIPT_DEFAULT
    if (!p) p = DLOCK_TOPOLOGY_SCRIPT_DEFAULT;
#endif
    return p ? p : "scripts/redis-topology.sh";
}

/* The script's environment: ours, with the options given as its variables.
 * A zero option leaves any value the test's environment sets in force (so
 * CI can slow every failover down); the password is always ours, because
 * the harness must know it to connect, and so is the server program, so
 * that a suite's single servers and topologies are the same server.
 * The wait for a topology to form is 90 s unless the environment says
 * otherwise: the script's 30 s is a bound a loaded machine has missed
 * (a cluster's six nodes beside a suite's sanitized programs), and the
 * wait ends as soon as the topology is up. Strings live in `store`. */
static char **script_env(const th_topology *t, const th_topology_opts *o, char store[7][128], char **envp, size_t max)
{
    size_t n = 0;
    for (char **e = environ; *e && n + 8 < max; e++)
        if (strncmp(*e, "DLOCK_TOPOLOGY_PASSWORD=", 24) != 0 && strncmp(*e, "DLOCK_TOPOLOGY_SERVER=", 22) != 0 &&
            strncmp(*e, "DLOCK_TOPOLOGY_TLS=", 19) != 0)
            envp[n++] = *e;
    if (t->tls[0]) {
        snprintf(store[5], 128, "DLOCK_TOPOLOGY_TLS=%s", t->tls);
        envp[n++] = store[5];
    }
    snprintf(store[4], 96, "DLOCK_TOPOLOGY_SERVER=%s", th_server_binary());
    envp[n++] = store[4];
    if (!getenv("DLOCK_TOPOLOGY_WAIT_S")) {
        snprintf(store[6], 128, "DLOCK_TOPOLOGY_WAIT_S=90");
        envp[n++] = store[6];
    }
    if (o && o->node_timeout_ms > 0) {
        snprintf(store[0], 96, "DLOCK_CLUSTER_NODE_TIMEOUT_MS=%d", o->node_timeout_ms);
        envp[n++] = store[0];
    }
    if (o && o->down_after_ms > 0) {
        snprintf(store[1], 96, "DLOCK_SENTINEL_DOWN_AFTER_MS=%d", o->down_after_ms);
        envp[n++] = store[1];
    }
    if (o && o->failover_timeout_ms > 0) {
        snprintf(store[2], 96, "DLOCK_SENTINEL_FAILOVER_TIMEOUT_MS=%d", o->failover_timeout_ms);
        envp[n++] = store[2];
    }
    if (t->password[0]) {
        snprintf(store[3], 96, "DLOCK_TOPOLOGY_PASSWORD=%s", t->password);
        envp[n++] = store[3];
    }
    envp[n] = NULL;
    return envp;
}

/* Run the script with `args` (NULL-terminated, after the script name),
 * collecting its stdout into `out`; its stderr goes to ours so a failure
 * explains itself in the test log. 0 when it exits 0. posix_spawn, not
 * fork, because tests call this with library threads running. */
static int run_script(const th_topology *t, const th_topology_opts *o, const char *const *args, char *out, size_t outsz)
{
    char store[7][128];
    char *envp[512];
    char *argv[8];
    size_t na = 0;
    argv[na++] = (char *)script_path();
    for (; *args && na < 7; args++) argv[na++] = (char *)*args;
    argv[na] = NULL;

    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, script_env(t, o, store, envp, 512));
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        return -1;
    }

    size_t len = 0;
    for (;;) {
        char buf[1024];
        ssize_t r = read(pfd[0], buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        size_t take = (size_t)r < outsz - 1 - len ? (size_t)r : outsz - 1 - len;
        memcpy(out + len, buf, take);
        len += take;
    }
    out[len] = '\0';
    close(pfd[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* The guardian: `sh` in its own session (so a signal to the test's process
 * group spares it) blocked reading a pipe only we can write to. When a
 * line arrives (th_topology_stop) or the write end closes (exit, crash,
 * SIGKILL) it stops every process under the topology's directory and
 * removes it. The explicit line matters when the test forked children that
 * still hold a copy of the write end. It starts before the topology does,
 * so even a start that dies halfway is undone. */
static int guardian_start(th_topology *t)
{
    static const char prog[] = "read -r _; \"$0\" stop \"$1\"; "
                               "[ -n \"${DLOCK_KEEP_TOPOLOGY:-}\" ] || rm -rf \"$1\"";
    char *argv[] = {"/bin/sh", "-c", (char *)prog, (char *)script_path(), t->dir, NULL};
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[0], 0);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
    int rc = posix_spawn(&t->guardian, "/bin/sh", &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(pfd[0]);
    if (rc != 0) {
        close(pfd[1]);
        t->guardian = 0;
        return -1;
    }
    t->guardian_fd = pfd[1];
    return 0;
}

static th_role role_named(const char *s)
{
    if (strcmp(s, "master") == 0) return TH_MASTER;
    if (strcmp(s, "replica") == 0 || strcmp(s, "slave") == 0) return TH_REPLICA;
    if (strcmp(s, "sentinel") == 0) return TH_SENTINEL;
    return TH_DOWN;
}

/* Read the script's NODE and URL lines into the table. */
static int parse_output(th_topology *t, char *out)
{
    t->n = 0;
    t->url[0] = '\0';
    for (char *save = NULL, *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int port, pid;
        char role[16], mport[16];
        if (sscanf(line, "NODE %d %d %15s %15s", &port, &pid, role, mport) == 4 && t->n < TH_TOPO_MAX_NODES) {
            th_node *nd = &t->node[t->n++];
            memset(nd, 0, sizeof *nd);
            nd->port = port;
            nd->pid = pid;
            nd->role = role_named(role);
            nd->master_port = atoi(mport);
        } else if (strncmp(line, "URL ", 4) == 0) {
            snprintf(t->url, sizeof t->url, "%s", line + 4);
        }
    }
    return t->n > 0 && t->url[0] ? 0 : -1;
}

static int topology_start(th_topology *t, const th_topology_opts *o, int cluster)
{
    memset(t, 0, sizeof *t);
    t->guardian_fd = -1;
    t->is_cluster = cluster;
    if (o && o->password) snprintf(t->password, sizeof t->password, "%s", o->password);
    snprintf(t->dir, sizeof t->dir, "/tmp/dlock-topo-XXXXXX");
    /* Each way to fail says which, on stderr, for the test log. */
    if (!mkdtemp(t->dir)) {
        fprintf(stderr, "topology: mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    if (guardian_start(t) != 0) {
        fprintf(stderr, "topology: cannot start the guardian: %s\n", strerror(errno));
        rmdir(t->dir);
        return -1;
    }
    const char *tls = getenv("DLOCK_TEST_TLS");
    if (tls && strcmp(tls, "1") == 0) {
        snprintf(t->tls, sizeof t->tls, "%s/certs", t->dir);
        if (th_tls_certs(t->tls) != 0) {
            fprintf(stderr, "topology: cannot make the TLS certificates in %s: %s\n", t->tls, strerror(errno));
            th_topology_stop(t);
            return -1;
        }
    }
    const char *args[] = {cluster ? "cluster" : "sentinel", "start", t->dir, NULL};
    char out[4096] = "";
    int rc = run_script(t, o, args, out, sizeof out);
    if (rc != 0 || parse_output(t, out) != 0 || t->n != (cluster ? 6 : 5)) {
        fprintf(stderr, "topology: %s start %s (%d nodes); its output:\n%s\n", cluster ? "cluster" : "sentinel",
                rc != 0 ? "failed" : "said too little", t->n, out);
        th_topology_stop(t);
        return -1;
    }
    return 0;
}

int th_cluster_start(th_topology *t, const th_topology_opts *opts)
{
    return topology_start(t, opts, 1);
}

int th_sentinel_start(th_topology *t, const th_topology_opts *opts)
{
    return topology_start(t, opts, 0);
}

/* Tell the guardian to stop now. If it is gone the write would raise
 * SIGPIPE, which must not kill the test: block it for this thread and
 * discard one that became pending. */
static void guardian_poke(int fd)
{
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    if (write(fd, "\n", 1) != 1) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void th_topology_stop(th_topology *t)
{
    if (t->guardian_fd >= 0) {
        guardian_poke(t->guardian_fd);
        close(t->guardian_fd);
        t->guardian_fd = -1;
    }
    if (t->guardian > 0) {
        while (waitpid(t->guardian, NULL, 0) < 0 && errno == EINTR) {}
        t->guardian = 0;
    }
    for (int i = 0; i < t->n; i++) {
        t->node[i].pid = 0;
        t->node[i].role = TH_DOWN;
        t->node[i].paused = 0;
    }
}

th_node *th_topology_node(th_topology *t, int port)
{
    for (int i = 0; i < t->n; i++)
        if (t->node[i].port == port) return &t->node[i];
    return NULL;
}

/* /proc state of `pid` (0 when it cannot be read) and, in *ppid, its
 * parent: the node processes are daemons, not our children, so waitpid
 * cannot tell us they died; a zombie counts as dead. */
static char proc_state(pid_t pid, pid_t *ppid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'), s;
    int parent;
    if (!p || sscanf(p + 1, " %c %d", &s, &parent) != 2) return 0;
    if (ppid) *ppid = (pid_t)parent;
    return s;
}

int th_pid_alive(pid_t pid)
{
    char s = pid > 0 ? proc_state(pid, NULL) : 0;
    return s && s != 'Z' && s != 'X';
}

int th_pid_stopped(pid_t pid)
{
    char s = pid > 0 ? proc_state(pid, NULL) : 0;
    return s == 'T' || s == 't';
}

pid_t th_pid_parent(pid_t pid)
{
    pid_t parent = 0;
    return pid > 0 && proc_state(pid, &parent) ? parent : 0;
}

redisContext *th_node_connect(const th_topology *t, int port)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    int sentinel = 0;
    for (int i = 0; i < t->n; i++)
        if (t->node[i].port == port) sentinel = t->node[i].role == TH_SENTINEL;
    if (t->password[0] && !sentinel) {
        redisReply *r = redisCommand(c, "AUTH %s", t->password);
        int ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

redisReply *th_node_cmd(const th_topology *t, int port, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = th_vcmd_once(th_node_connect(t, port), fmt, ap);
    va_end(ap);
    return r;
}

/* One node's role from ROLE; for a replica also its master's port and
 * whether its link is up. TH_DOWN when it does not answer. */
static th_role query_role(const th_topology *t, int port, int *master_port, int *linked)
{
    redisReply *r = th_node_cmd(t, port, "ROLE");
    th_role role = TH_DOWN;
    *master_port = 0;
    *linked = 0;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_STRING) {
        role = role_named(r->element[0]->str);
        if (role == TH_REPLICA && r->elements >= 4) {
            *master_port = th_topology_plain_port(t, (int)r->element[2]->integer);
            *linked = r->element[3]->type == REDIS_REPLY_STRING && strcmp(r->element[3]->str, "connected") == 0;
        }
    }
    if (r) freeReplyObject(r);
    return role;
}

/* Update one entry: gone when its process is, its answer otherwise; a node
 * that is alive but silent keeps what we knew. */
static void refresh_node(th_topology *t, th_node *nd, int *linked)
{
    *linked = 0;
    if (nd->pid > 0 && !th_pid_alive(nd->pid)) {
        nd->pid = 0;
        nd->paused = 0;
    }
    if (nd->pid == 0) {
        nd->role = TH_DOWN;
        nd->master_port = 0;
        return;
    }
    if (nd->paused) return;
    int mport;
    th_role role = query_role(t, nd->port, &mport, linked);
    if (role != TH_DOWN) {
        nd->role = role;
        nd->master_port = mport;
    }
}

int th_topology_refresh(th_topology *t)
{
    int linked;
    for (int i = 0; i < t->n; i++) refresh_node(t, &t->node[i], &linked);
    return 0;
}

int th_topology_masters(th_topology *t, int *ports, int max)
{
    int n = 0;
    for (int i = 0; i < t->n && n < max; i++)
        if (t->node[i].pid > 0 && t->node[i].role == TH_MASTER) ports[n++] = t->node[i].port;
    return n;
}

int th_topology_plain_port(const th_topology *t, int port)
{
    return t->tls[0] && port > 1000 ? port - 1000 : port;
}

int th_topology_replica_of(th_topology *t, int master_port)
{
    for (int i = 0; i < t->n; i++)
        if (t->node[i].pid > 0 && t->node[i].role == TH_REPLICA && t->node[i].master_port == master_port)
            return t->node[i].port;
    return -1;
}

static long long dbsize(const th_topology *t, int port)
{
    redisReply *r = th_node_cmd(t, port, "DBSIZE");
    long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    return n;
}

/* Replicas are waited for, not flushed: they refuse writes, and a test
 * reading from one right after must not see the old keys. */
int th_topology_flushall(th_topology *t)
{
    th_topology_refresh(t);
    for (int i = 0; i < t->n; i++) {
        th_node *nd = &t->node[i];
        if (nd->pid <= 0 || nd->paused || nd->role != TH_MASTER) continue;
        redisReply *r = th_node_cmd(t, nd->port, "FLUSHALL");
        int ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        if (!ok) return -1;
    }
    long long end = th_now_ms() + 5000;
    for (int i = 0; i < t->n; i++) {
        th_node *nd = &t->node[i];
        if (nd->pid <= 0 || nd->paused || nd->role != TH_REPLICA) continue;
        while (dbsize(t, nd->port) != 0) {
            if (th_now_ms() > end) return -1;
            usleep(10000);
        }
    }
    return 0;
}

int th_node_kill(th_topology *t, int port)
{
    th_node *nd = th_topology_node(t, port);
    if (!nd || nd->pid <= 0) return -1;
    th_topology_refresh(t); /* so failover waits know its replica */
    if (nd->pid <= 0) return -1;
    kill(nd->pid, SIGKILL);
    for (int i = 0; i < 500 && th_pid_alive(nd->pid); i++) usleep(10000);
    if (th_pid_alive(nd->pid)) return -1;
    nd->pid = 0;
    nd->paused = 0;
    nd->role = TH_DOWN;
    return 0;
}

int th_node_pause(th_topology *t, int port)
{
    th_node *nd = th_topology_node(t, port);
    if (!nd || nd->pid <= 0 || nd->paused) return -1;
    th_topology_refresh(t);
    if (kill(nd->pid, SIGSTOP) != 0) return -1;
    for (int i = 0; i < 100 && proc_state(nd->pid, NULL) != 'T'; i++) usleep(10000);
    nd->paused = 1;
    return proc_state(nd->pid, NULL) == 'T' ? 0 : -1;
}

int th_node_resume(th_topology *t, int port)
{
    th_node *nd = th_topology_node(t, port);
    if (!nd || nd->pid <= 0 || !nd->paused) return -1;
    if (kill(nd->pid, SIGCONT) != 0) return -1;
    nd->paused = 0;
    return 0;
}

int th_node_restart(th_topology *t, int port)
{
    th_node *nd = th_topology_node(t, port);
    if (!nd || th_pid_alive(nd->pid)) return -1;
    char portstr[16], out[512];
    snprintf(portstr, sizeof portstr, "%d", port);
    const char *args[] = {"restart", t->dir, portstr, NULL};
    if (run_script(t, NULL, args, out, sizeof out) != 0) return -1;
    int p, pid;
    char role[16], mport[16];
    if (sscanf(out, "NODE %d %d %15s %15s", &p, &pid, role, mport) != 4 || p != port || pid <= 0) return -1;
    nd->pid = pid;
    nd->paused = 0;
    nd->role = role_named(role);
    nd->master_port = atoi(mport);
    return 0;
}

int th_node_wait_role(th_topology *t, int port, th_role role, int timeout_ms)
{
    th_node *nd = th_topology_node(t, port);
    if (!nd) return -1;
    long long end = th_now_ms() + timeout_ms;
    do {
        int linked;
        refresh_node(t, nd, &linked);
        if (nd->role == role && (role != TH_REPLICA || linked)) return 0;
        usleep(20000);
    } while (th_now_ms() < end);
    return -1;
}
