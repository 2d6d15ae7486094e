/*
 * Finding the master through Redis Sentinel.
 *
 * We ask the Sentinels in turn, starting with the one that answered last
 * (as the Sentinel client guidelines suggest), for the address of the
 * master by name. The first answer is used: a Sentinel that is out of date
 * can only name a demoted master, and every new connection checks ROLE
 * (conn.c), so such an answer costs a failed connection and another
 * lookup, never a lock granted by a replica. The lookup runs again
 * whenever a connection to the master breaks or a server answers READONLY,
 * which is how a failover shows itself to us.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology.h"
#include "util.h"

/* Ask one Sentinel. NOAUTH means it has a password after all: the URL's
 * credentials are offered once, and kept for that Sentinel. */
static dlock_status ask(dlock_topo *t, dlock_pool *sp, redisReply **out)
{
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", t->url.master};
    const char *const *argvs[1] = {argv};
    const int argc = 3;
    for (int pass = 0;; pass++) {
        dlock_status st = dlock_pool_pipeline(sp, 1, &argc, argvs, NULL, 0, out, NULL, NULL);
        if (st != DLOCK_OK) return st;
        const redisReply *r = *out;
        if (pass || r->type != REDIS_REPLY_ERROR || strncmp(r->str, "NOAUTH", 6) != 0 || !t->url.password ||
            sp->ep.cfg == &t->sentinel_auth_cfg)
            return DLOCK_OK;
        freeReplyObject(*out);
        *out = NULL;
        sp->ep.cfg = &t->sentinel_auth_cfg;
        dlock_pool_drop_idle(sp);
    }
}

dlock_status dlock_sentinel_lookup(dlock_topo *t)
{
    dlock_status st = DLOCK_ERR_CONNECT; /* the URL lists at least one; each failure sets the message */
    for (size_t k = 0; k < t->n_sentinels; k++) {
        size_t i = (t->sentinel_first + k) % t->n_sentinels;
        dlock_pool *sp = &t->sentinels[i];
        char name[300];
        dlock_pool_name(sp, name, sizeof name);
        redisReply *r;
        if ((st = ask(t, sp, &r)) != DLOCK_OK) continue;
        if (r->type == REDIS_REPLY_ERROR) {
            st = dlock_reply_error(r, "SENTINEL get-master-addr-by-name");
        } else if (r->type == REDIS_REPLY_NIL) {
            st = dlock_fail(DLOCK_ERR_CONNECT, "Sentinel %s does not know a master called %s", name,
                            t->url.master);
        } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
                   r->element[1]->type != REDIS_REPLY_STRING) {
            st = dlock_fail(DLOCK_ERR_REDIS, "Sentinel %s: unexpected reply for master %s", name, t->url.master);
        } else {
            char *end;
            long port = strtol(r->element[1]->str, &end, 10);
            int node = -1;
            if (*end || port <= 0 || port > 65535)
                st = dlock_fail(DLOCK_ERR_REDIS, "Sentinel %s: bad port for master %s", name, t->url.master);
            else if ((node = dlock_topo_node_index(t, r->element[0]->str, (int)port, 1)) < 0)
                st = dlock_fail(DLOCK_ERR_NOMEM, "out of memory");
            if (node >= 0) {
                int old = atomic_exchange(&t->master, node);
                /* Connections to a master that is one no more must not be
                 * reused, even if it still answers. */
                if (old >= 0 && old != node) dlock_pool_drop_idle(dlock_topo_pool(t, old));
                t->sentinel_first = i;
                freeReplyObject(r);
                return DLOCK_OK;
            }
        }
        freeReplyObject(r);
    }
    return st;
}
