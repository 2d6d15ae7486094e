/*
 * The slot map of a Redis Cluster, from CLUSTER SLOTS.
 *
 * Any node answers for the whole cluster, so we ask the known nodes in
 * turn, starting with one that served slots in the last map (topology.c
 * replaces its map in one sweep from the answer). The map is only a hint:
 * a node that no longer serves a slot says MOVED, and topology.c follows
 * it (and asks for a new map). So a map from a node that has not heard of
 * the latest change yet costs one redirection, not a wrong answer.
 */
#include <stdlib.h>
#include <string.h>

#include "lookup.h"
#include "util.h"

void dlock__slot_map_free(dlock__slot_map *m)
{
    for (size_t i = 0; i < m->n; i++) free(m->ranges[i].host);
    free(m->ranges);
    memset(m, 0, sizeof *m);
}

/* Fill *m from a CLUSTER SLOTS reply got from `asked`; -1 for a malformed
 * reply (m left for dlock__slot_map_free). */
static int parse_slots(const redisReply *r, const dlock__pool *asked, dlock__slot_map *m)
{
    if (r->type != REDIS_REPLY_ARRAY) return -1;
    m->ranges = calloc(r->elements ? r->elements : 1, sizeof *m->ranges);
    if (!m->ranges) return -1;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY)
            return -1;
        long long from = e->element[0]->integer, to = e->element[1]->integer;
        const redisReply *node = e->element[2];
        if (from < 0 || to >= DLOCK__SLOTS || from > to || node->elements < 2 ||
            node->element[0]->type != REDIS_REPLY_STRING || node->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        /* An empty host means "the address you reached me at". */
        const char *host = node->element[0]->len ? node->element[0]->str : asked->ep.host;
        long long port = node->element[1]->integer;
        if (!host || port <= 0 || port > 65535) return -1;
        dlock__slot_range *g = &m->ranges[m->n];
        if (!(g->host = strdup(host))) return -1;
        g->from = (int)from;
        g->to = (int)to;
        g->port = (int)port;
        m->n++;
        m->covered += to - from + 1;
    }
    return 0;
}

dlock_status dlock__cluster_ask(dlock__pool *const *nodes, int n, int start, dlock__slot_map *map)
{
    static const char *const argv[2] = {"CLUSTER", "SLOTS"};
    const char *const *argvs[1] = {argv};
    const int argc = 2;
    dlock_status st = DLOCK_ERR_CONNECT; /* every failure below sets the message */
    memset(map, 0, sizeof *map);
    for (int k = 0; k < n; k++) {
        int i = (start + k) % n;
        redisReply *r;
        if ((st = dlock__pool_pipeline(nodes[i], 1, &argc, argvs, NULL, 0, &r, NULL, NULL)) != DLOCK_OK) continue;
        if (r->type == REDIS_REPLY_ERROR) {
            /* e.g. "cluster support disabled": a redis-cluster:// URL that
             * names a plain server; no other node will say otherwise. */
            st = dlock__reply_error(r, "CLUSTER SLOTS");
            freeReplyObject(r);
            if (st == DLOCK_ERR_AUTH) break;
            continue;
        }
        int bad = parse_slots(r, nodes[i], map);
        freeReplyObject(r);
        if (bad || map->covered <= 0) {
            st = dlock__fail(bad ? DLOCK_ERR_REDIS : DLOCK_ERR_CONNECT,
                             bad ? "CLUSTER SLOTS: malformed reply" : "CLUSTER SLOTS: no slot is served");
            dlock__slot_map_free(map);
            continue;
        }
        return DLOCK_OK;
    }
    return st;
}
