/*
 * One suite, three deployments: the thin layer that lets a suite name the
 * server it means ("the master serving this key") instead of a server, so
 * the same assertions run on one redis-server, on Sentinel and on Cluster.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "target.h"

/* Failovers are not what these suites test; the timings only need to be
 * quick enough for the suites that do trigger one. 3 s, not 1: a loaded
 * machine stalled a master past one second, the others failed it over,
 * and a lock held on it was lost in the middle of a case about something
 * else. */
static const th_topology_opts topo_opts = {.node_timeout_ms = 3000, .down_after_ms = 3000, .failover_timeout_ms = 6000};

int th_target_start(th_target *t, const char *extra_conf)
{
    memset(t, 0, sizeof *t);
    const char *want = getenv("DLOCK_TEST_TARGET");
    if (!want || !*want || strcmp(want, "single") == 0) {
        t->kind = TH_TARGET_SINGLE;
        t->name = "single";
        if (th_redis_start(&t->single, extra_conf) != 0) return -1;
        snprintf(t->url, sizeof t->url, "%s", t->single.url);
        return 0;
    }
    if (strcmp(want, "tls") == 0) {
        t->kind = TH_TARGET_SINGLE;
        t->name = "tls";
        snprintf(t->certs, sizeof t->certs, "/tmp/dlock-tls-XXXXXX");
        if (!mkdtemp(t->certs) || th_tls_certs(t->certs) != 0 ||
            th_redis_start_tls(&t->single, t->certs, "server", extra_conf) != 0)
            return -1;
        snprintf(t->url, sizeof t->url, "%s", t->single.tls_url);
        fprintf(stderr, "target: tls at %s\n", t->url);
        return 0;
    }
    int cluster = strcmp(want, "cluster") == 0;
    if (!cluster && strcmp(want, "sentinel") != 0) {
        fprintf(stderr, "DLOCK_TEST_TARGET must be single, tls, sentinel or cluster, not \"%s\"\n", want);
        return -1;
    }
    t->kind = cluster ? TH_TARGET_CLUSTER : TH_TARGET_SENTINEL;
    t->name = cluster ? "cluster" : "sentinel";
    if ((cluster ? th_cluster_start(&t->topo, &topo_opts) : th_sentinel_start(&t->topo, &topo_opts)) != 0) return -1;
    snprintf(t->url, sizeof t->url, "%s", t->topo.url);
    fprintf(stderr, "target: %s at %s\n", t->name, t->url);
    return 0;
}

void th_target_stop(th_target *t)
{
    if (t->kind == TH_TARGET_SINGLE) th_redis_stop(&t->single);
    else th_topology_stop(&t->topo);
    if (t->certs[0]) th_redis_remove_dir(t->certs);
    t->certs[0] = '\0';
}

int th_target_master_port(th_target *t, const char *key)
{
    switch (t->kind) {
    case TH_TARGET_SINGLE: return t->single.port;
    case TH_TARGET_SENTINEL: return th_sentinel_master_port(&t->topo);
    case TH_TARGET_CLUSTER: break;
    }
    if (key) return th_cluster_key_owner(&t->topo, key);
    int ports[1];
    return th_topology_masters(&t->topo, ports, 1) == 1 ? ports[0] : -1;
}

redisContext *th_target_connect(th_target *t, const char *key)
{
    if (t->kind == TH_TARGET_SINGLE) return th_redis_connect(&t->single);
    int port = th_target_master_port(t, key);
    return port > 0 ? th_node_connect(&t->topo, port) : NULL;
}

long long th_target_calls(th_target *t, const char *command)
{
    if (t->kind == TH_TARGET_SINGLE) return th_redis_calls(&t->single, command);
    int ports[TH_TOPO_MAX_NODES];
    int n = th_topology_masters(&t->topo, ports, TH_TOPO_MAX_NODES);
    long long sum = 0;
    for (int i = 0; i < n; i++) {
        long long calls = -1; /* asked up to three times, as th_redis_calls() */
        for (int k = 0; k < 3 && calls < 0; k++)
            calls = th_info_calls(th_node_cmd(&t->topo, ports[i], "INFO commandstats"), command);
        if (calls < 0) return -1;
        sum += calls;
    }
    return sum;
}

long th_target_keys(th_target *t, const char *pattern, char *first, size_t size)
{
    int ports[TH_TOPO_MAX_NODES], n = 1;
    if (t->kind != TH_TARGET_SINGLE) n = th_topology_masters(&t->topo, ports, TH_TOPO_MAX_NODES);
    long total = 0;
    if (first && size) first[0] = '\0';
    for (int i = 0; i < n; i++) {
        redisReply *r = t->kind == TH_TARGET_SINGLE ? th_redis_cmd(&t->single, "KEYS %s", pattern)
                                                    : th_node_cmd(&t->topo, ports[i], "KEYS %s", pattern);
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            if (r) freeReplyObject(r);
            return -1;
        }
        if (first && size && !first[0] && r->elements > 0) snprintf(first, size, "%s", r->element[0]->str);
        total += (long)r->elements;
        freeReplyObject(r);
    }
    return total;
}

redisReply *th_target_vcmd(th_target *t, const char *key, const char *fmt, va_list ap)
{
    return th_vcmd_once(th_target_connect(t, key), fmt, ap);
}

redisReply *th_target_cmd(th_target *t, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = th_target_vcmd(t, key, fmt, ap);
    va_end(ap);
    return r;
}

int th_target_pause(th_target *t, const char *key)
{
    if (t->kind == TH_TARGET_SINGLE) {
        th_redis_pause(&t->single);
        return 0;
    }
    return th_node_pause(&t->topo, th_target_master_port(t, key));
}

static void *resume_later(void *arg)
{
    th_pause_timer *pt = arg;
    usleep((useconds_t)pt->ms * 1000);
    pt->rc = th_target_resume(pt->t, pt->key);
    return NULL;
}

int th_target_pause_for(th_target *t, const char *key, long ms, th_pause_timer *pt)
{
    *pt = (th_pause_timer){.t = t, .key = key, .ms = ms, .rc = -1};
    if (th_target_pause(t, key) != 0) return -1;
    if (pthread_create(&pt->tid, NULL, resume_later, pt) != 0) {
        (void)th_target_resume(t, key);
        return -1;
    }
    return 0;
}

int th_target_pause_join(th_pause_timer *pt)
{
    pthread_join(pt->tid, NULL);
    return pt->rc;
}

int th_target_resume(th_target *t, const char *key)
{
    if (t->kind == TH_TARGET_SINGLE) {
        th_redis_resume(&t->single);
        return 0;
    }
    /* The paused node cannot be asked who serves the key: resume them all. */
    for (int i = 0; i < t->topo.n; i++)
        if (t->topo.node[i].paused && th_node_resume(&t->topo, t->topo.node[i].port) != 0) return -1;
    (void)key;
    if (t->kind == TH_TARGET_SENTINEL) {
        /* The same for Sentinel (below): a pause near down-after may have
         * begun a failover that ends in the next case. Wait out one
         * down-after, then until the Sentinels see one healthy master. */
        usleep((useconds_t)topo_opts.down_after_ms * 1000);
        return th_sentinel_wait_settled(&t->topo, 30000) > 0 ? 0 : -1;
    }
    if (t->kind != TH_TARGET_CLUSTER) return 0;
    /* A pause close to the node timeout (a slow machine, sanitizers) may
     * have let the other masters mark the node failed, and its replica's
     * election then runs after the resume. A failover loses the writes
     * the replica had not received yet, locks among them (docs/SAFETY.md),
     * so a suite that is not about failovers must not meet one in its
     * next case: wait out one node timeout, for such a verdict to reach
     * every node, then until they all agree again (through the failover,
     * if one began). Seen once: test_multilock's next case found two
     * holders inside, with CLUSTERDOWN on its release. */
    usleep((useconds_t)topo_opts.node_timeout_ms * 1000);
    return th_cluster_wait_ok(&t->topo, 30000);
}

int th_target_flush(th_target *t)
{
    if (t->kind != TH_TARGET_SINGLE) return th_topology_flushall(&t->topo);
    redisReply *r = th_redis_cmd(&t->single, "FLUSHALL");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}

/* The suites' shared target; one per test program. */
static th_target *suite_target;

void th_target_suite_use(th_target *t)
{
    suite_target = t;
}

int th_target_suite_setup(void **state)
{
    (void)state;
    return suite_target ? th_target_start(suite_target, NULL) : -1;
}

int th_target_suite_teardown(void **state)
{
    (void)state;
    if (suite_target) th_target_stop(suite_target);
    th_redis_stop_all(); /* and any server a failed test left running */
    return 0;
}
