/*
 * Finding the master through Redis Sentinel.
 *
 * We ask the Sentinels in turn, starting with the one that answered last
 * (as the Sentinel client guidelines suggest), for the address of the
 * master by name. The first answer is used: a Sentinel that is out of date
 * can only name a demoted master, and every new connection checks ROLE
 * (link.c), so such an answer costs a failed connection and another
 * lookup, never a lock granted by a replica. The lookup runs again
 * whenever a connection to the master breaks or a server answers READONLY,
 * which is how a failover shows itself to us (topology.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lookup.h"
#include "util.h"

/* Ask one Sentinel. NOAUTH means it has a password after all: the URL's
 * credentials are offered once, and kept for that Sentinel. */
static dlock_status ask(dlock__pool *sp, const char *master, const dlock__conn_cfg *auth_cfg, redisReply **out)
{
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", master};
    const char *const *argvs[1] = {argv};
    const int argc = 3;
    for (int pass = 0;; pass++) {
        dlock_status st = dlock__pool_pipeline(sp, 1, &argc, argvs, NULL, 0, out, NULL, NULL);
        if (st != DLOCK_OK) return st;
        const redisReply *r = *out;
        if (pass || r->type != REDIS_REPLY_ERROR || strncmp(r->str, "NOAUTH", 6) != 0 || !auth_cfg->password ||
            sp->ep.cfg == auth_cfg)
            return DLOCK_OK;
        freeReplyObject(*out);
        *out = NULL;
        sp->ep.cfg = auth_cfg;
        dlock__pool_drop_idle(sp);
    }
}

dlock_status dlock__sentinel_ask(dlock__pool *sentinels, size_t n, size_t *first, const char *master,
                                 const dlock__conn_cfg *auth_cfg, char **host, int *port)
{
    dlock_status st = DLOCK_ERR_CONNECT; /* the URL lists at least one; each failure sets the message */
    *host = NULL;
    for (size_t k = 0; k < n; k++) {
        size_t i = (*first + k) % n;
        dlock__pool *sp = &sentinels[i];
        const char *name = sp->ep.name;
        redisReply *r;
        if ((st = ask(sp, master, auth_cfg, &r)) != DLOCK_OK) continue;
        if (r->type == REDIS_REPLY_ERROR) {
            st = dlock__reply_error(r, "SENTINEL get-master-addr-by-name");
        } else if (r->type == REDIS_REPLY_NIL) {
            st = dlock__fail(DLOCK_ERR_CONNECT, "Sentinel %s does not know a master called %s", name, master);
        } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
                   r->element[1]->type != REDIS_REPLY_STRING) {
            st = dlock__fail(DLOCK_ERR_REDIS, "Sentinel %s: unexpected reply for master %s", name, master);
        } else {
            char *end;
            long p = strtol(r->element[1]->str, &end, 10);
            if (*end || p <= 0 || p > 65535) {
                st = dlock__fail(DLOCK_ERR_REDIS, "Sentinel %s: bad port for master %s", name, master);
            } else if (!(*host = strdup(r->element[0]->str))) {
                st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
            } else {
                *port = (int)p;
                *first = i;
                freeReplyObject(r);
                return DLOCK_OK;
            }
        }
        freeReplyObject(r);
    }
    return st;
}
