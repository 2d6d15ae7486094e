/*
 * The slot map of a Redis Cluster, from CLUSTER SLOTS.
 *
 * Any node answers for the whole cluster, so we ask the known nodes in
 * turn, starting with one that served slots in the last map, and replace
 * the map in one sweep. The map is only a hint: a node that no longer serves a slot
 * says MOVED, and topology.c follows it (and asks for a new map). So a map
 * from a node that has not heard of the latest change yet costs one
 * redirection, not a wrong answer.
 */
#include <stdlib.h>
#include <string.h>

#include "topology.h"
#include "util.h"

/* Fill map[] (node index + 1 per slot) from a CLUSTER SLOTS reply got from
 * `asked`; the number of slots covered, or -1 for a malformed reply. */
static long parse_slots(dlock_topo *t, const redisReply *r, const dlock_pool *asked, uint16_t *map, int *first)
{
    long covered = 0;
    if (r->type != REDIS_REPLY_ARRAY) return -1;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY)
            return -1;
        long long from = e->element[0]->integer, to = e->element[1]->integer;
        const redisReply *m = e->element[2];
        if (from < 0 || to >= DLOCK_SLOTS || from > to || m->elements < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        /* An empty host means "the address you reached me at". */
        const char *host = m->element[0]->len ? m->element[0]->str : asked->ep.host;
        long long port = m->element[1]->integer;
        if (!host || port <= 0 || port > 65535) return -1;
        int node = dlock_topo_node_index(t, host, (int)port, 1);
        if (node < 0) return -1;
        if (*first < 0) *first = node;
        for (long long s = from; s <= to; s++) map[s] = (uint16_t)(node + 1);
        covered += to - from + 1;
    }
    return covered;
}

dlock_status dlock_cluster_lookup(dlock_topo *t)
{
    static const char *const argv[2] = {"CLUSTER", "SLOTS"};
    const char *const *argvs[1] = {argv};
    const int argc = 2;
    uint16_t *map = malloc(DLOCK_SLOTS * sizeof *map);
    if (!map) return dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock_status st = DLOCK_ERR_CONNECT; /* every failure below sets the message */
    int n = atomic_load(&t->n_nodes), start = t->any_node >= 0 ? t->any_node : 0;
    for (int k = 0; k < n; k++) {
        dlock_pool *p = dlock_topo_pool(t, (start + k) % n);
        redisReply *r;
        if ((st = dlock_pool_pipeline(p, 1, &argc, argvs, NULL, 0, &r, NULL, NULL)) != DLOCK_OK) continue;
        if (r->type == REDIS_REPLY_ERROR) {
            /* e.g. "cluster support disabled": a redis-cluster:// URL that
             * names a plain server; no other node will say otherwise. */
            st = dlock_reply_error(r, "CLUSTER SLOTS");
            freeReplyObject(r);
            if (st == DLOCK_ERR_AUTH) break;
            continue;
        }
        memset(map, 0, DLOCK_SLOTS * sizeof *map);
        int first = -1;
        long covered = parse_slots(t, r, p, map, &first);
        freeReplyObject(r);
        if (covered <= 0) {
            st = dlock_fail(covered < 0 ? DLOCK_ERR_REDIS : DLOCK_ERR_CONNECT,
                            covered < 0 ? "CLUSTER SLOTS: malformed reply" : "CLUSTER SLOTS: no slot is served");
            continue;
        }
        /* Keep the node keyless commands use while it still serves slots:
         * it may have been chosen because another one was unreachable. */
        int keep = 0;
        for (int s = 0; s < DLOCK_SLOTS; s++) {
            atomic_store(&t->slots[s], map[s]);
            keep = keep || map[s] == t->any_node + 1;
        }
        if (!keep) t->any_node = first;
        free(map);
        return DLOCK_OK;
    }
    free(map);
    return st;
}
