/*
 * Routing commands to the right server.
 *
 * The library's commands are all of one kind: a script (or a GET) on keys
 * that share one hash tag, safe to send again (docs/design/locks.md). That
 * makes routing simple to get right. A command goes to the server we think
 * serves its key; every way a server can say "not me, not now" is handled
 * here, so that a lock call sees a slower reply during a failover or a slot
 * migration and never an error it could not act on:
 *
 *   MOVED slot addr      the slot lives elsewhere now: remember it, resend
 *   ASK slot addr        one command's keys are being migrated: resend to
 *                        addr once, after ASKING, without remembering it
 *   TRYAGAIN             some of the keys moved and some not, mid-migration
 *   CLUSTERDOWN          a master failed and its replica is not promoted yet
 *   LOADING, MASTERDOWN  a server starting up or cut off from its master
 *   READONLY             we reached a replica: a demoted master
 *
 * The last four are waited out until the command timeout, with the map or
 * the master looked up again in between. A broken connection means the
 * server may be gone: the topology is looked up again and, if someone else
 * serves the key now, the command goes there (as a resend, which callers
 * are ready for). If the map still names the dead server, the error goes
 * up and the caller's own retry loop (wait.c, the watchdog) takes over.
 *
 * Lookups (CLUSTER SLOTS, or asking the Sentinels) happen under one mutex
 * and at most every LOOKUP_MIN_MS, so a storm of failing commands costs one
 * lookup, not one each. Routing itself reads atomics and takes no lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lookup.h"
#include "tls.h"
#include "topology.h"
#include "util.h"

#define LOOKUP_MIN_MS 100
#define MAX_HOPS 16
#define MAX_PIPELINE 4

/* Put `value` in place of the URL's credential *field. Done once, right
 * after parsing, so that every connection (data nodes, and Sentinels that
 * ask) authenticates with the caller's credentials and nothing further
 * down needs to know where they came from. */
static dlock_status override_credential(char **field, const char *value)
{
    if (!value) return DLOCK_OK;
    char *copy = strdup(value);
    if (!copy) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    free(*field);
    *field = copy;
    return DLOCK_OK;
}

dlock_status dlock__topo_new(const char *url, const char *username, const char *password, int connect_timeout_ms,
                             int command_timeout_ms, int busy_poll_us, dlock__topo **out)
{
    *out = NULL;
    dlock__topo *t = calloc(1, sizeof *t);
    if (!t) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock_status st = dlock_url_parse(url, &t->url);
    if (st == DLOCK_OK) st = override_credential(&t->url.user, username);
    if (st == DLOCK_OK) st = override_credential(&t->url.password, password);
    if (st != DLOCK_OK) {
        dlock_url_free(&t->url);
        free(t);
        return st;
    }
    if (t->url.tls && (st = dlock__tls_new(&t->url, &t->tls)) != DLOCK_OK) {
        dlock_url_free(&t->url);
        free(t);
        return st;
    }
    pthread_mutex_init(&t->mu, NULL);
    t->cfg = (dlock__conn_cfg){t->url.user,        t->url.password,
                               t->url.db,          connect_timeout_ms,
                               command_timeout_ms, t->url.kind == DLOCK_URL_SENTINEL,
                               &t->closing,        t->tls,
                               busy_poll_us};
    atomic_init(&t->master, -1);
    t->any_node = -1;
    t->last_lookup = DLOCK_OK;
    switch (t->url.kind) {
    case DLOCK_URL_TCP:
    case DLOCK_URL_UNIX: {
        dlock__pool *p = calloc(1, sizeof *p);
        if (!p || (st = dlock__pool_init(p, t->url.host, t->url.port, t->url.path, &t->cfg)) != DLOCK_OK) {
            free(p);
            dlock__topo_free(t);
            return p ? st : dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
        }
        atomic_store(&t->nodes[0], p);
        atomic_store(&t->n_nodes, 1);
        atomic_store(&t->master, 0);
        break;
    }
    case DLOCK_URL_SENTINEL:
        /* Sentinels are asked without credentials first: the URL's are the
         * data nodes', and most Sentinels have none. */
        t->sentinel_cfg = (dlock__conn_cfg){NULL, NULL,        0,      connect_timeout_ms, command_timeout_ms,
                                            0,    &t->closing, t->tls, busy_poll_us};
        t->sentinel_auth_cfg = t->sentinel_cfg;
        t->sentinel_auth_cfg.user = t->url.user;
        t->sentinel_auth_cfg.password = t->url.password;
        t->sentinels = calloc(t->url.n_addrs, sizeof *t->sentinels);
        if (!t->sentinels) {
            dlock__topo_free(t);
            return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
        }
        for (size_t i = 0; i < t->url.n_addrs; i++) {
            st = dlock__pool_init(&t->sentinels[i], t->url.addrs[i].host, t->url.addrs[i].port, NULL, &t->sentinel_cfg);
            if (st != DLOCK_OK) {
                dlock__topo_free(t);
                return st;
            }
            t->n_sentinels++;
        }
        atomic_store(&t->stale, 1);
        break;
    case DLOCK_URL_CLUSTER:
        /* The seeds are where the first CLUSTER SLOTS is asked. */
        for (size_t i = 0; i < t->url.n_addrs; i++) {
            if (dlock__topo_node_index(t, t->url.addrs[i].host, t->url.addrs[i].port, 0) < 0) {
                dlock__topo_free(t);
                return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
            }
        }
        atomic_store(&t->stale, 1);
        break;
    }
    *out = t;
    return DLOCK_OK;
}

void dlock__topo_close_io(dlock__topo *t)
{
    atomic_store(&t->closing, 1);
    int n = atomic_load(&t->n_nodes);
    for (int i = 0; i < n; i++) dlock__mux_abort(&atomic_load(&t->nodes[i])->mux, "the client is closing");
}

void dlock__topo_free(dlock__topo *t)
{
    if (!t) return;
    int n = atomic_load(&t->n_nodes);
    for (int i = 0; i < n; i++) {
        dlock__pool *p = atomic_load(&t->nodes[i]);
        dlock__pool_destroy(p);
        free(p);
    }
    for (size_t i = 0; i < t->n_sentinels; i++) dlock__pool_destroy(&t->sentinels[i]);
    free(t->sentinels);
    pthread_mutex_destroy(&t->mu);
    dlock_url_free(&t->url);
    dlock__tls_free(t->tls);
    free(t);
}

int dlock__topo_node_index(dlock__topo *t, const char *host, int port, int locked)
{
    if (!locked) pthread_mutex_lock(&t->mu);
    int n = atomic_load(&t->n_nodes), found = -1;
    for (int i = 0; i < n && found < 0; i++) {
        dlock__pool *p = atomic_load(&t->nodes[i]);
        if (p->ep.host && p->ep.port == port && strcmp(p->ep.host, host) == 0) found = i;
    }
    if (found < 0 && n < DLOCK__MAX_NODES) {
        dlock__pool *p = calloc(1, sizeof *p);
        if (p && dlock__pool_init(p, host, port, NULL, &t->cfg) == DLOCK_OK) {
            atomic_store(&t->nodes[n], p);
            atomic_store(&t->n_nodes, n + 1); /* published after the pool is ready */
            found = n;
        } else {
            free(p);
        }
    }
    if (!locked) pthread_mutex_unlock(&t->mu);
    return found;
}

/* The master the Sentinels name now becomes the node commands go to.
 * Called with mu held. */
static dlock_status sentinel_lookup(dlock__topo *t)
{
    char *host;
    int port;
    dlock_status st = dlock__sentinel_ask(t->sentinels, t->n_sentinels, &t->sentinel_first, t->url.master,
                                          &t->sentinel_auth_cfg, &host, &port);
    if (st != DLOCK_OK) return st;
    int node = dlock__topo_node_index(t, host, port, 1);
    free(host);
    if (node < 0) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    int old = atomic_exchange(&t->master, node);
    /* Connections to a master that is one no more must not be reused,
     * even if it still answers. */
    if (old >= 0 && old != node) dlock__pool_drop_idle(dlock__topo_pool(t, old));
    return DLOCK_OK;
}

/* A new slot map replaces the old one in one sweep. Called with mu held. */
static dlock_status cluster_lookup(dlock__topo *t)
{
    dlock__pool *nodes[DLOCK__MAX_NODES];
    int n = atomic_load(&t->n_nodes);
    for (int i = 0; i < n; i++) nodes[i] = dlock__topo_pool(t, i);
    dlock__slot_map map;
    dlock_status st = dlock__cluster_ask(nodes, n, t->any_node >= 0 ? t->any_node : 0, &map);
    if (st != DLOCK_OK) return st;
    uint16_t *slots = calloc(DLOCK__SLOTS, sizeof *slots);
    int first = -1;
    for (size_t i = 0; slots && i < map.n; i++) {
        int node = dlock__topo_node_index(t, map.ranges[i].host, map.ranges[i].port, 1);
        if (node < 0) {
            free(slots);
            slots = NULL;
            break;
        }
        if (first < 0) first = node;
        for (int s = map.ranges[i].from; s <= map.ranges[i].to; s++) slots[s] = (uint16_t)(node + 1);
    }
    dlock__slot_map_free(&map);
    if (!slots) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    /* Keep the node keyless commands use while it still serves slots: it
     * may have been chosen because another one was unreachable. */
    int keep = 0;
    for (int s = 0; s < DLOCK__SLOTS; s++) {
        atomic_store(&t->slots[s], slots[s]);
        keep = keep || slots[s] == t->any_node + 1;
    }
    if (!keep) t->any_node = first;
    free(slots);
    return DLOCK_OK;
}

/* Look the topology up again if it is stale and nobody did so just now.
 * Returns the status of the most recent lookup. */
static dlock_status look_up(dlock__topo *t)
{
    pthread_mutex_lock(&t->mu);
    int64_t now = dlock__mono_ms();
    dlock_status st = t->last_lookup;
    if (atomic_load(&t->stale) && (t->looked_up_ms == 0 || now - t->looked_up_ms >= LOOKUP_MIN_MS)) {
        st = t->url.kind == DLOCK_URL_SENTINEL ? sentinel_lookup(t) : cluster_lookup(t);
        t->looked_up_ms = dlock__mono_ms();
        t->last_lookup = st;
        if (st == DLOCK_OK) atomic_store(&t->stale, 0);
        else snprintf(t->last_lookup_msg, sizeof t->last_lookup_msg, "%s", dlock_last_error());
    } else if (st != DLOCK_OK) {
        /* Another thread just failed to look it up: tell its reason. */
        dlock__fail(st, "%s", t->last_lookup_msg);
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* The node for `key`, looking the topology up first when it is stale;
 * -1 with the reason in *why when there is none. */
static int route(dlock__topo *t, const char *key, size_t len, dlock_status *why)
{
    *why = DLOCK_OK;
    dlock_url_kind kind = t->url.kind;
    if (kind == DLOCK_URL_TCP || kind == DLOCK_URL_UNIX) return 0;
    if (atomic_load(&t->stale)) *why = look_up(t);
    if (kind == DLOCK_URL_SENTINEL) {
        int m = atomic_load(&t->master);
        if (m < 0 && *why == DLOCK_OK) *why = dlock__fail(DLOCK_ERR_CONNECT, "no master known for %s", t->url.master);
        return m;
    }
    int node;
    if (key) {
        node = (int)atomic_load(&t->slots[dlock__key_slot(key, len)]) - 1;
    } else {
        pthread_mutex_lock(&t->mu);
        node = t->any_node;
        pthread_mutex_unlock(&t->mu);
    }
    if (node < 0 && *why == DLOCK_OK) {
        /* A slot nobody serves: a map from the middle of a change. */
        atomic_store(&t->stale, 1);
        *why = dlock__fail(DLOCK_ERR_CONNECT, "no cluster node serves the slot of \"%.100s\"", key ? key : "");
    }
    return node;
}

int dlock__topo_node_for(dlock__topo *t, const char *key, size_t len)
{
    dlock_status why;
    return route(t, key, len, &why);
}

int dlock__topo_node_known(dlock__topo *t, const char *key, size_t len)
{
    switch (t->url.kind) {
    case DLOCK_URL_TCP:
    case DLOCK_URL_UNIX: return 0;
    case DLOCK_URL_SENTINEL: return atomic_load(&t->master);
    case DLOCK_URL_CLUSTER: break;
    }
    return (int)atomic_load(&t->slots[dlock__key_slot(key, len)]) - 1;
}

void dlock__topo_refresh(dlock__topo *t)
{
    if (atomic_load(&t->stale)) look_up(t);
}

void dlock__topo_mark_stale(dlock__topo *t)
{
    if (t->url.kind == DLOCK_URL_SENTINEL || t->url.kind == DLOCK_URL_CLUSTER) atomic_store(&t->stale, 1);
}

int dlock__topo_is_cluster(const dlock__topo *t)
{
    return t->url.kind == DLOCK_URL_CLUSTER;
}

dlock_status dlock__topo_connect(dlock__topo *t, int node, dlock__link **out)
{
    return dlock__pool_connect(dlock__topo_pool(t, node), out);
}

void dlock__topo_node_failed(dlock__topo *t, int node)
{
    if (t->url.kind == DLOCK_URL_TCP || t->url.kind == DLOCK_URL_UNIX) return;
    dlock__pool_drop_idle(dlock__topo_pool(t, node));
    atomic_store(&t->stale, 1);
}

unsigned dlock__topo_slot(const dlock__topo *t, const char *key)
{
    return t->url.kind == DLOCK_URL_CLUSTER ? dlock__key_slot(key, strlen(key)) : 0;
}

void dlock__topo_identity(const dlock__topo *t, char *out, size_t size)
{
    const dlock_url *u = &t->url;
    switch (u->kind) {
    case DLOCK_URL_UNIX: snprintf(out, size, "unix:%s/%d", u->path, u->db); break;
    case DLOCK_URL_TCP: snprintf(out, size, "tcp:%s:%d/%d", u->host, u->port, u->db); break;
    case DLOCK_URL_SENTINEL: snprintf(out, size, "sentinel:%s@%s:%d/%d", u->master, u->host, u->port, u->db); break;
    case DLOCK_URL_CLUSTER: snprintf(out, size, "cluster:%s:%d", u->host, u->port); break;
    }
}

/* Sleep `ms`, or less when the deadline comes first; 0 when the deadline
 * has passed, so the caller gives up instead. */
static int pause_until(int64_t deadline, long ms)
{
    int64_t now = dlock__mono_ms();
    if (now >= deadline) return 0;
    if (now + ms > deadline) ms = (long)(deadline - now);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return 1;
}

/* "MOVED 3999 127.0.0.1:6381": the node index of the address, or -1. */
static int redirect_target(dlock__topo *t, const char *msg, unsigned *slot)
{
    const char *sp = strchr(msg, ' ');
    if (!sp) return -1;
    char *end;
    unsigned long s = strtoul(sp + 1, &end, 10);
    if (end == sp + 1 || *end != ' ' || s >= DLOCK__SLOTS) return -1;
    const char *addr = end + 1, *colon = strrchr(addr, ':');
    if (!colon || colon == addr) return -1;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port <= 0 || port > 65535) return -1;
    char host[256];
    size_t hl = (size_t)(colon - addr);
    if (hl >= sizeof host) return -1;
    memcpy(host, addr, hl);
    host[hl] = '\0';
    *slot = (unsigned)s;
    return dlock__topo_node_index(t, host, (int)port, 0);
}

/* A keyless command (SCRIPT LOAD) may go to any master; when the one we
 * used is unreachable, use the next master of the map instead. */
static void avoid_any_node(dlock__topo *t, int node)
{
    pthread_mutex_lock(&t->mu);
    if (t->any_node == node) {
        for (int s = 0; s < DLOCK__SLOTS; s++) {
            int n = (int)atomic_load(&t->slots[s]) - 1;
            if (n >= 0 && n != node) {
                t->any_node = n;
                break;
            }
        }
    }
    pthread_mutex_unlock(&t->mu);
}

dlock__route_error dlock__route_classify(const char *err)
{
#define DLOCK__ROUTE_MATCH(kind, prefix)                                                                               \
    if (strncmp(err, prefix, sizeof prefix - 1) == 0) return DLOCK__ROUTE_##kind;
    DLOCK__ROUTE_ERRORS(DLOCK__ROUTE_MATCH)
#undef DLOCK__ROUTE_MATCH
    return DLOCK__ROUTE_NONE;
}

dlock_status dlock__topo_pipeline(dlock__topo *t, const char *key, int n, const int *argcs,
                                  const char *const *const *argvs, const size_t *const *lens, int flags,
                                  redisReply **replies, int *retried)
{
    if (retried) *retried = 0;
    if (n < 1 || n > MAX_PIPELINE) return dlock__fail(DLOCK_ERR_INVALID, "pipeline of %d commands", n);
    size_t keylen = key ? strlen(key) : 0;
    int64_t deadline = dlock__mono_ms() + t->cfg.command_timeout_ms;
    static const char *const asking[1] = {"ASKING"};
    int ask = -1, hops = 0;
    for (;;) {
        dlock_status st;
        /* Only redirections count: waits (TRYAGAIN through a whole slot
         * migration, CLUSTERDOWN through a failover) end at the deadline. */
        if (hops > MAX_HOPS) return dlock__fail(DLOCK_ERR_REDIS, "%s: too many redirections", argvs[0][0]);
        int node = ask >= 0 ? ask : route(t, key, keylen, &st);
        if (node < 0) {
            /* Nobody to ask yet: a failover or a map being rebuilt. */
            if (pause_until(deadline, 50)) continue;
            return st != DLOCK_OK ? st : dlock__fail(DLOCK_ERR_CONNECT, "no server to send %s to", argvs[0][0]);
        }
        /* ASK: this one command goes to the importing node after ASKING. */
        int x = ask >= 0, again = 0;
        int ac[MAX_PIPELINE + 1];
        const char *const *av[MAX_PIPELINE + 1];
        const size_t *ln[MAX_PIPELINE + 1];
        redisReply *rep[MAX_PIPELINE + 1];
        if (x) {
            ac[0] = 1;
            av[0] = asking;
            ln[0] = NULL;
        }
        for (int i = 0; i < n; i++) {
            ac[x + i] = argcs[i];
            av[x + i] = argvs[i];
            ln[x + i] = lens ? lens[i] : NULL;
        }
        ask = -1;
        dlock__io_fail why;
        st = dlock__pool_pipeline(dlock__topo_pool(t, node), n + x, ac, av, ln, flags, rep, &again, &why);
        if (again && retried) *retried = 1;
        if (st != DLOCK_OK) {
            if (st != DLOCK_ERR_CONNECT) return st;
            /* The server may be gone for good (a failover): if the topology
             * now names another one, resend there. */
            dlock__topo_node_failed(t, node);
            if (t->url.kind == DLOCK_URL_TCP || t->url.kind == DLOCK_URL_UNIX) return st;
            if (!key && t->url.kind == DLOCK_URL_CLUSTER) avoid_any_node(t, node);
            dlock_status why_not;
            int next = route(t, key, keylen, &why_not);
            if (next < 0 || next == node || dlock__mono_ms() >= deadline || ((flags & DLOCK__IO_ONCE) && why.sent))
                return st;
            if (why.sent && retried) *retried = 1;
            hops++;
            continue;
        }
        if (x) freeReplyObject(rep[0]);
        memcpy(replies, rep + x, (size_t)n * sizeof *replies);
        const redisReply *r = replies[0];
        if (r->type != REDIS_REPLY_ERROR) return DLOCK_OK;
        unsigned slot;
        int target = -1, wait_ms = 0;
        switch (dlock__route_classify(r->str)) {
        case DLOCK__ROUTE_MOVED:
            target = redirect_target(t, r->str, &slot);
            if (target >= 0) {
                atomic_store(&t->slots[slot], (uint16_t)(target + 1));
                atomic_store(&t->stale, 1); /* more slots have probably moved with it */
            }
            break;
        case DLOCK__ROUTE_ASK: target = ask = redirect_target(t, r->str, &slot); break;
        case DLOCK__ROUTE_TRYAGAIN: wait_ms = 10; break;
        case DLOCK__ROUTE_CLUSTERDOWN:
        case DLOCK__ROUTE_MASTERDOWN:
        case DLOCK__ROUTE_LOADING:
            wait_ms = 50;
            atomic_store(&t->stale, 1);
            break;
        case DLOCK__ROUTE_READONLY:
            /* One server has nowhere else to be: its READONLY is the caller's. */
            if (t->url.kind == DLOCK_URL_TCP || t->url.kind == DLOCK_URL_UNIX) return DLOCK_OK;
            wait_ms = 20;
            dlock__topo_node_failed(t, node);
            break;
        case DLOCK__ROUTE_NONE: return DLOCK_OK; /* an error the caller must see */
        }
        if (target < 0 && wait_ms == 0) return DLOCK_OK; /* a redirection we cannot parse: show it */
        /* MOVED changes the map; a loop of them is a broken cluster. ASK
         * does not count: mid-migration the importing node answers
         * TRYAGAIN until the last key moved, and every retry starts with
         * the source's ASK again, for as long as the migration lasts. */
        if (target >= 0 && ask < 0) hops++;
        if (wait_ms && !pause_until(deadline, wait_ms)) {
            /* Out of time: report the condition itself. */
            st = dlock__fail(DLOCK_ERR_CONNECT, "%s: server busy or failing over (%.60s)", argvs[0][0], r->str);
            for (int i = 0; i < n; i++) freeReplyObject(replies[i]);
            return st;
        }
        for (int i = 0; i < n; i++) freeReplyObject(replies[i]);
    }
}

dlock_status dlock__topo_command(dlock__topo *t, const char *key, int argc, const char **argv, const size_t *lens,
                                 redisReply **out, int *retried)
{
    const char *const *argvs[1] = {argv};
    const size_t *const lensv[1] = {lens};
    *out = NULL;
    return dlock__topo_pipeline(t, key, 1, &argc, argvs, lensv, 0, out, retried);
}
