/*
 * The questions behind the topology, asked of servers and answered with
 * addresses: which master a Sentinel names (sentinel.c), which node serves
 * which slots (cluster.c). They know pools and replies, not the topology:
 * topology.c turns their answers into its tables, so the layers call
 * down only.
 */
#ifndef DLOCK__LOOKUP_H
#define DLOCK__LOOKUP_H

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
dlock_status dlock__sentinel_ask(dlock__pool *sentinels, size_t n, size_t *first, const char *master,
                                 const dlock__conn_cfg *auth_cfg, char **host, int *port);

/* One range of a cluster's slot map: slots [from, to] served by host:port. */
typedef struct dlock__slot_range {
    int from, to;
    char *host; /* owned by the map */
    int port;
} dlock__slot_range;

typedef struct dlock__slot_map {
    dlock__slot_range *ranges;
    size_t n;
    long covered; /* slots covered by the ranges */
} dlock__slot_map;

void dlock__slot_map_free(dlock__slot_map *m);

/*
 * Ask the nodes nodes[0..n) in turn, starting at `start`, for CLUSTER
 * SLOTS; *map receives the first good answer (an empty host in it already
 * replaced by the address the node was reached at). An authentication
 * failure ends the asking: no other node will accept the credentials
 * either.
 */
dlock_status dlock__cluster_ask(dlock__pool *const *nodes, int n, int start, dlock__slot_map *map);

#endif
