/* Redis Sentinel helpers for the suites: who the master is, killing or
 * pausing it, waiting for the failover; see th_topology.h. */
#include "th_topology.h"
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One Sentinel's answer for the master's port; -1 when it gives none. */
static int asked_master_port(th_topology *t, int sentinel_port)
{
    redisReply *r = th_node_cmd(t, sentinel_port, "SENTINEL GET-MASTER-ADDR-BY-NAME %s", TH_SENTINEL_MASTER_NAME);
    int port = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
        port = th_topology_plain_port(t, atoi(r->element[1]->str));
    if (r) freeReplyObject(r);
    return port;
}

static int is_live_sentinel(const th_node *nd)
{
    return nd->role == TH_SENTINEL && nd->pid > 0 && !nd->paused;
}

int th_sentinel_master_port(th_topology *t)
{
    for (int i = 0; i < t->n; i++) {
        if (!is_live_sentinel(&t->node[i])) continue;
        int port = asked_master_port(t, t->node[i].port);
        if (port > 0) return port;
    }
    return -1;
}

int th_sentinel_kill_master(th_topology *t)
{
    int port = th_sentinel_master_port(t);
    return port > 0 && th_node_kill(t, port) == 0 ? port : -1;
}

int th_sentinel_pause_master(th_topology *t)
{
    int port = th_sentinel_master_port(t);
    return port > 0 && th_node_pause(t, port) == 0 ? port : -1;
}

/* Every live Sentinel's answer, when they all give the same one. */
static int agreed_master_port(th_topology *t)
{
    int agreed = -1;
    for (int i = 0; i < t->n; i++) {
        if (!is_live_sentinel(&t->node[i])) continue;
        int port = asked_master_port(t, t->node[i].port);
        if (port <= 0 || (agreed > 0 && port != agreed)) return -1;
        agreed = port;
    }
    return agreed;
}

int th_sentinel_wait_failover(th_topology *t, int old_master_port, int timeout_ms)
{
    long long end = th_now_ms() + timeout_ms;
    do {
        int port = agreed_master_port(t);
        if (port > 0 && port != old_master_port && th_node_wait_role(t, port, TH_MASTER, 0) == 0) {
            th_topology_refresh(t);
            return port;
        }
        usleep(50000);
    } while (th_now_ms() < end);
    return -1;
}

/* Whether a Sentinel's flags for the master ("master", or with
 * ",s_down", ",o_down", ",failover_in_progress", ...) say anything but
 * that it is a master; a Sentinel that does not answer counts as unsure. */
static int master_unsettled(th_topology *t, int sentinel_port)
{
    redisReply *r = th_node_cmd(t, sentinel_port, "SENTINEL MASTER %s", TH_SENTINEL_MASTER_NAME);
    int unsettled = 1;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, "flags") == 0 &&
            r->element[i + 1]->type == REDIS_REPLY_STRING)
            unsettled = strcmp(r->element[i + 1]->str, "master") != 0;
    if (r) freeReplyObject(r);
    return unsettled;
}

int th_sentinel_wait_settled(th_topology *t, int timeout_ms)
{
    long long end = th_now_ms() + timeout_ms;
    do {
        int port = agreed_master_port(t), calm = port > 0;
        for (int i = 0; calm && i < t->n; i++)
            if (is_live_sentinel(&t->node[i]) && master_unsettled(t, t->node[i].port)) calm = 0;
        if (calm && th_node_wait_role(t, port, TH_MASTER, 0) == 0) {
            th_topology_refresh(t);
            return port;
        }
        usleep(50000);
    } while (th_now_ms() < end);
    th_sentinel_print_events(t);
    return -1;
}

/* A Sentinel logs each state change as one line holding " +event" or
 * " -event" (see the Sentinel docs' list of events); the rest of its log
 * is start-up noise. */
void th_sentinel_print_events(th_topology *t)
{
    for (int i = 0; i < t->n; i++) {
        if (t->node[i].role != TH_SENTINEL) continue;
        char path[160], line[512];
        snprintf(path, sizeof path, "%s/%d/redis.log", t->dir, t->node[i].port);
        FILE *f = fopen(path, "r");
        if (!f) {
            fprintf(stderr, "sentinel %d: no log at %s\n", t->node[i].port, path);
            continue;
        }
        while (fgets(line, sizeof line, f))
            if (strstr(line, " +") || strstr(line, " -")) fprintf(stderr, "sentinel %d: %s", t->node[i].port, line);
        fclose(f);
    }
}

int th_sentinel_wait_replica_back(th_topology *t, int old, int promoted, int timeout_ms)
{
    long long end = th_now_ms() + timeout_ms;
    do {
        if (th_node_wait_role(t, old, TH_REPLICA, 250) == 0 && th_topology_node(t, old)->master_port == promoted)
            return old;
        if (th_node_wait_role(t, promoted, TH_REPLICA, 250) == 0 && th_topology_node(t, promoted)->master_port == old) {
            fprintf(stderr, "the Sentinels failed back: %d is master again, %d its replica\n", old, promoted);
            th_sentinel_print_events(t);
            return promoted;
        }
    } while (th_now_ms() < end);
    fprintf(stderr, "neither %d nor %d became a replica of the other in %d ms\n", old, promoted, timeout_ms);
    th_sentinel_print_events(t);
    return 0;
}
