/*
 * The questions behind the topology, asked of servers and answered with
 * addresses: which master a Sentinel names (sentinel.c), which node serves
 * which slots (cluster.c). They know pools and replies, not the topology:
 * topology.c turns their answers into its tables, so the layers call
 * down only.
 */
#ifndef DLOCK_LOOKUP_H
#define DLOCK_LOOKUP_H

#include <stdint.h>

#include "conn.h"
#include "slot.h"

/*
 * Ask the Sentinels sentinels[0..n) in turn, starting at *first, for the
 * address of `master`; the first answer wins and *first becomes the one
 * that gave it. A Sentinel that says NOAUTH is asked once more with
 * `auth_cfg` (the URL's credentials), and keeps it. host (malloc'd) and
 * port on DLOCK_OK; otherwise the last Sentinel's failure.
 */
dlock_status dlock_sentinel_ask(dlock_pool *sentinels, size_t n, size_t *first, const char *master,
                                const dlock_conn_cfg *auth_cfg, char **host, int *port);

/* One range of a cluster's slot map: slots [from, to] served by host:port. */
typedef struct dlock_slot_range {
    int from, to;
    char *host; /* owned by the map */
    int port;
} dlock_slot_range;

typedef struct dlock_slot_map {
    dlock_slot_range *ranges;
    size_t n;
    long covered; /* slots covered by the ranges */
} dlock_slot_map;

void dlock_slot_map_free(dlock_slot_map *m);

/*
 * Ask the nodes nodes[0..n) in turn, starting at `start`, for CLUSTER
 * SLOTS; *map receives the first good answer (an empty host in it already
 * replaced by the address the node was reached at). An authentication
 * failure ends the asking: no other node will accept the credentials
 * either.
 */
dlock_status dlock_cluster_ask(dlock_pool *const *nodes, int n, int start, dlock_slot_map *map);

#endif
