/* Redis Cluster helpers for the suites: slot hashing, the slot map as the
 * nodes see it, waiting for agreement and failover, slot migration; see
 * th_topology.h. */
#include "th_topology.h"
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Written from the definition (poly 0x1021, init 0, no reflection) rather
 * than copied from Redis, so agreeing with CLUSTER KEYSLOT proves both. */
unsigned th_crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1);
        crc &= 0xffff;
    }
    return crc;
}

/* The hash-tag rule: only the first '{' counts, and the tag ends at the
 * first '}' after it; a missing or empty tag means the whole key. */
int th_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1) return (int)(th_crc16(open + 1, (size_t)(close - open - 1)) & 16383);
    }
    return (int)(th_crc16(key, len) & 16383);
}

/* A slot map as one node reports it: ranges sorted by first slot, each
 * with its master's port. Ranges split as slots migrate, hence room for
 * many. */
typedef struct slot_range {
    int start, end, port;
} slot_range;
typedef struct slot_map {
    int n;
    slot_range r[1024];
} slot_map;

static int by_start(const void *a, const void *b)
{
    return ((const slot_range *)a)->start - ((const slot_range *)b)->start;
}

static int fetch_slot_map(th_topology *t, int port, slot_map *m)
{
    redisReply *r = th_node_cmd(t, port, "CLUSTER SLOTS");
    int ok = r && r->type == REDIS_REPLY_ARRAY;
    m->n = 0;
    for (size_t i = 0; ok && i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 || m->n == (int)(sizeof m->r / sizeof m->r[0])) {
            ok = 0;
            break;
        }
        slot_range *s = &m->r[m->n++];
        s->start = (int)e->element[0]->integer;
        s->end = (int)e->element[1]->integer;
        s->port = (int)e->element[2]->element[1]->integer;
    }
    if (r) freeReplyObject(r);
    if (ok) qsort(m->r, (size_t)m->n, sizeof m->r[0], by_start);
    return ok ? 0 : -1;
}

static int map_owner(const slot_map *m, int slot)
{
    for (int i = 0; i < m->n; i++)
        if (slot >= m->r[i].start && slot <= m->r[i].end) return m->r[i].port;
    return -1;
}

static int map_has_owner(const slot_map *m, int port)
{
    for (int i = 0; i < m->n; i++)
        if (m->r[i].port == port) return 1;
    return 0;
}

/* Every slot, once, in order. */
static int map_covers_all(const slot_map *m)
{
    int next = 0;
    for (int i = 0; i < m->n; i++) {
        if (m->r[i].start != next) return 0;
        next = m->r[i].end + 1;
    }
    return next == TH_CLUSTER_SLOTS;
}

static int map_equal(const slot_map *a, const slot_map *b)
{
    return a->n == b->n && memcmp(a->r, b->r, (size_t)a->n * sizeof a->r[0]) == 0;
}

static int node_usable(const th_node *nd)
{
    return nd->pid > 0 && !nd->paused && nd->role != TH_SENTINEL;
}

/* The first usable node's map. */
static int any_slot_map(th_topology *t, slot_map *m)
{
    for (int i = 0; i < t->n; i++)
        if (node_usable(&t->node[i]) && fetch_slot_map(t, t->node[i].port, m) == 0) return 0;
    return -1;
}

int th_cluster_slot_owner(th_topology *t, int slot)
{
    static __thread slot_map m;
    if (slot < 0 || slot >= TH_CLUSTER_SLOTS || any_slot_map(t, &m) != 0) return -1;
    return map_owner(&m, slot);
}

int th_cluster_key_owner(th_topology *t, const char *key)
{
    return th_cluster_slot_owner(t, th_key_slot(key, strlen(key)));
}

static int state_ok(th_topology *t, int port)
{
    redisReply *r = th_node_cmd(t, port, "CLUSTER INFO");
    int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
    if (r) freeReplyObject(r);
    return ok;
}

/* One look at the whole cluster: every usable node ok, all maps equal and
 * complete, every owner a usable node. The agreed map goes to `agreed`. */
static int cluster_settled(th_topology *t, slot_map *agreed)
{
    static __thread slot_map m;
    int seen = 0;
    for (int i = 0; i < t->n; i++) {
        if (!node_usable(&t->node[i])) continue;
        int port = t->node[i].port;
        if (!state_ok(t, port) || fetch_slot_map(t, port, seen ? &m : agreed) != 0) return 0;
        if (seen && !map_equal(&m, agreed)) return 0;
        seen = 1;
    }
    if (!seen || !map_covers_all(agreed)) return 0;
    for (int i = 0; i < agreed->n; i++) {
        th_node *owner = th_topology_node(t, agreed->r[i].port);
        if (!owner || !node_usable(owner)) return 0;
    }
    return 1;
}

int th_cluster_wait_ok(th_topology *t, int timeout_ms)
{
    static __thread slot_map m;
    long long end = th_now_ms() + timeout_ms;
    th_topology_refresh(t);
    do {
        if (cluster_settled(t, &m)) {
            th_topology_refresh(t);
            return 0;
        }
        usleep(50000);
    } while (th_now_ms() < end);
    return -1;
}

/* The replica that should replace the old master is the one the table
 * (refreshed by th_node_kill / th_node_pause) says replicated it. */
int th_cluster_wait_failover(th_topology *t, int old_master_port, int timeout_ms)
{
    static __thread slot_map m;
    int heirs[TH_TOPO_MAX_NODES], nh = 0;
    for (int i = 0; i < t->n; i++)
        if (t->node[i].master_port == old_master_port && t->node[i].pid > 0) heirs[nh++] = t->node[i].port;
    if (nh == 0) return -1;
    long long end = th_now_ms() + timeout_ms;
    do {
        if (cluster_settled(t, &m) && !map_has_owner(&m, old_master_port)) {
            for (int h = 0; h < nh; h++) {
                if (map_has_owner(&m, heirs[h]) && th_node_wait_role(t, heirs[h], TH_MASTER, 0) == 0) {
                    th_topology_refresh(t);
                    return heirs[h];
                }
            }
        }
        usleep(50000);
    } while (th_now_ms() < end);
    return -1;
}

/* A reply that must be +OK. Frees it. */
static int ok_reply(redisReply *r)
{
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (r && !ok) fprintf(stderr, "topology: %s\n", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}

static int node_id(th_topology *t, int port, char *id, size_t size)
{
    redisReply *r = th_node_cmd(t, port, "CLUSTER MYID");
    int ok = r && r->type == REDIS_REPLY_STRING && r->len < size;
    if (ok) memcpy(id, r->str, r->len + 1);
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}

int th_migration_begin(th_migration *m, th_topology *t, int slot, int to_port)
{
    memset(m, 0, sizeof *m);
    m->t = t;
    m->slot = slot;
    m->to_port = to_port;
    m->from_port = th_cluster_slot_owner(t, slot);
    if (m->from_port < 0 || m->from_port == to_port) return -1;
    if (node_id(t, m->from_port, m->from_id, sizeof m->from_id) != 0 ||
        node_id(t, to_port, m->to_id, sizeof m->to_id) != 0)
        return -1;
    /* Importing first: once the source says MIGRATING and sends ASK, the
     * target must already accept ASKING for the slot. */
    if (ok_reply(th_node_cmd(t, to_port, "CLUSTER SETSLOT %d IMPORTING %s", slot, m->from_id)) != 0) return -1;
    return ok_reply(th_node_cmd(t, m->from_port, "CLUSTER SETSLOT %d MIGRATING %s", slot, m->to_id));
}

int th_migration_step(th_migration *m, int max_keys)
{
    redisContext *c = th_node_connect(m->t, m->from_port);
    if (!c) return -1;
    redisReply *keys = redisCommand(c, "CLUSTER GETKEYSINSLOT %d %d", m->slot, max_keys);
    int moved = -1;
    if (keys && keys->type == REDIS_REPLY_ARRAY) {
        size_t n = keys->elements, na = 0;
        moved = 0;
        if (n > 0) {
            const char **argv = malloc((n + 10) * sizeof *argv);
            size_t *lens = malloc((n + 10) * sizeof *lens);
            char port[16];
            /* With TLS, nodes reach each other on their TLS ports. */
            snprintf(port, sizeof port, "%d", m->t->tls[0] ? m->to_port + 1000 : m->to_port);
            const char *head[] = {"MIGRATE", "127.0.0.1", port, "", "0", "5000"};
            for (size_t i = 0; i < 6; i++) argv[na++] = head[i];
            if (m->t->password[0]) {
                argv[na++] = "AUTH";
                argv[na++] = m->t->password;
            }
            argv[na++] = "KEYS";
            for (size_t i = 0; i < na; i++) lens[i] = strlen(argv[i]);
            for (size_t i = 0; i < n; i++) {
                argv[na] = keys->element[i]->str;
                lens[na++] = keys->element[i]->len;
            }
            redisReply *r = redisCommandArgv(c, (int)na, argv, lens);
            int ok = r && r->type == REDIS_REPLY_STATUS && (strcmp(r->str, "OK") == 0 || strcmp(r->str, "NOKEY") == 0);
            if (r && !ok && r->type == REDIS_REPLY_ERROR) fprintf(stderr, "topology: MIGRATE: %s\n", r->str);
            if (r) freeReplyObject(r);
            moved = ok ? (int)n : -1;
            free(argv);
            free(lens);
        }
    }
    if (keys) freeReplyObject(keys);
    redisFree(c);
    if (moved > 0) m->moved += moved;
    return moved;
}

/* Target first (it bumps its config epoch and starts claiming the slot),
 * then the source (it stops answering ASK), then every other master, as
 * the Redis cluster tutorial orders it; replicas learn by gossip. */
int th_migration_finish(th_migration *m)
{
    th_topology *t = m->t;
    int s = m->slot;
    if (ok_reply(th_node_cmd(t, m->to_port, "CLUSTER SETSLOT %d NODE %s", s, m->to_id)) != 0 ||
        ok_reply(th_node_cmd(t, m->from_port, "CLUSTER SETSLOT %d NODE %s", s, m->to_id)) != 0)
        return -1;
    th_topology_refresh(t);
    for (int i = 0; i < t->n; i++) {
        th_node *nd = &t->node[i];
        if (nd->role != TH_MASTER || !node_usable(nd) || nd->port == m->to_port || nd->port == m->from_port) continue;
        if (ok_reply(th_node_cmd(t, nd->port, "CLUSTER SETSLOT %d NODE %s", s, m->to_id)) != 0) return -1;
    }
    if (th_cluster_wait_ok(t, 10000) != 0) return -1;
    return th_cluster_slot_owner(t, s) == m->to_port ? 0 : -1;
}

int th_migration_abort(th_migration *m)
{
    int a = ok_reply(th_node_cmd(m->t, m->to_port, "CLUSTER SETSLOT %d STABLE", m->slot));
    int b = ok_reply(th_node_cmd(m->t, m->from_port, "CLUSTER SETSLOT %d STABLE", m->slot));
    return a == 0 && b == 0 ? 0 : -1;
}

int th_cluster_migrate_slot(th_topology *t, int slot, int to_port)
{
    th_migration m;
    if (th_migration_begin(&m, t, slot, to_port) != 0) return -1;
    int n;
    while ((n = th_migration_step(&m, 100)) > 0) {}
    if (n < 0) {
        th_migration_abort(&m);
        return -1;
    }
    return th_migration_finish(&m);
}
