/* The client: configuration, its servers (topology.c), script SHAs, and the
 * lazily started subscriber and watchdog threads. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "subscriber.h"
#include "util.h"
#include "watchdog.h"

dlock_status dlock_client_new(const char *url, const dlock_options *opts, dlock_client **out)
{
    if (!out) return dlock__fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    dlock_options o = {0};
    if (opts) o = *opts;
    if (o.connect_timeout_ms < 0 || o.command_timeout_ms < 0 || o.watchdog_lease_ms < 0 || o.fair_waiter_timeout_ms < 0)
        return dlock__fail(DLOCK_ERR_INVALID, "negative timeout or lease in options");
    if (o.watchdog_lease_ms != 0 &&
        (o.watchdog_lease_ms < DLOCK_WATCHDOG_LEASE_MIN_MS || o.watchdog_lease_ms > DLOCK_LEASE_MAX_MS))
        return dlock__fail(DLOCK_ERR_INVALID, "watchdog lease must be %ld to %ld ms", DLOCK_WATCHDOG_LEASE_MIN_MS,
                           DLOCK_LEASE_MAX_MS);
    if (o.fair_waiter_timeout_ms > DLOCK_LEASE_MAX_MS / 2) /* queue keys live twice as long */
        return dlock__fail(DLOCK_ERR_INVALID, "fair waiter timeout must be at most %ld ms", DLOCK_LEASE_MAX_MS / 2);
    if (!o.connect_timeout_ms) o.connect_timeout_ms = 2000;
    if (!o.command_timeout_ms) o.command_timeout_ms = 5000;
    if (!o.watchdog_lease_ms) o.watchdog_lease_ms = DLOCK_WATCHDOG_LEASE_DEFAULT_MS;
    if (!o.fair_waiter_timeout_ms) o.fair_waiter_timeout_ms = 5000;
    if (o.fair_waiter_timeout_ms < 20)
        return dlock__fail(DLOCK_ERR_INVALID, "fair waiter timeout must be at least 20 ms");
    if (o.replica_acks < 0 || o.replica_timeout_ms < 0)
        return dlock__fail(DLOCK_ERR_INVALID, "negative replica count or timeout in options");
    if (o.replica_acks && !o.replica_timeout_ms) o.replica_timeout_ms = 100;
    if (o.safety_margin_pct < 0 || o.safety_margin_pct > 50)
        return dlock__fail(DLOCK_ERR_INVALID, "safety margin must be 1 to 50 percent of the lease");
    if (!o.safety_margin_pct) o.safety_margin_pct = DLOCK_SAFETY_MARGIN_DEFAULT_PCT;
    if (o.replica_acks && o.replica_timeout_ms >= o.command_timeout_ms)
        return dlock__fail(DLOCK_ERR_INVALID, "replica timeout must be shorter than the command timeout");
    if (o.busy_poll_us < -1 || o.busy_poll_us > 10000)
        return dlock__fail(DLOCK_ERR_INVALID, "busy poll must be -1 (never) or 0 to 10000 us");
    if (!o.busy_poll_us) o.busy_poll_us = 100;
    /* As the URL parser refuses "user:@": AUTH with nothing is a mistake. */
    if ((o.username && !*o.username) || (o.password && !*o.password))
        return dlock__fail(DLOCK_ERR_INVALID, "empty username or password in options");

    dlock_client *c = calloc(1, sizeof *c);
    if (!c) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock__async_init(&c->async);
    dlock__fence_cache_init(&c->fences);
    dlock_status st = dlock__topo_new(url, o.username, o.password, o.connect_timeout_ms, o.command_timeout_ms,
                                      o.busy_poll_us > 0 ? o.busy_poll_us : 0, &c->topo);
    if (st != DLOCK_OK) {
        dlock__async_shutdown(&c->async);
        dlock__fence_cache_destroy(&c->fences);
        free(c);
        return st;
    }
    c->watchdog_lease_ms = o.watchdog_lease_ms;
    c->fair_waiter_timeout_ms = o.fair_waiter_timeout_ms;
    c->replica_acks = o.replica_acks;
    c->replica_timeout_ms = o.replica_timeout_ms;
    c->safety_margin_pct = o.safety_margin_pct;
    /* An operation record must outlive every resend of its call. A resend
     * follows the first send within one command timeout (a timed-out
     * command is never resent) plus making a new connection (connect, then
     * AUTH, SELECT and ROLE, each within a command timeout). A minute on
     * top costs little: there is one record per thread and name. */
    c->op_ttl_ms = 60000L + o.connect_timeout_ms + 4L * o.command_timeout_ms;
    /* On a cluster, PUBLISH reaches every node; SPUBLISH only the shard
     * that serves the lock, whose waiters subscribed there. */
    c->publish = c->topo->url.kind == DLOCK_URL_CLUSTER ? "spublish" : "publish";
    pthread_mutex_init(&c->mu, NULL);
    st = dlock__random_hex(c->id, 16);
    if (st == DLOCK_OK) st = dlock__scripts_ensure(c);
    /* One PING makes the first connection, with AUTH, SELECT and (on
     * Sentinel) ROLE: a wrong address or password is reported here, not
     * at the first lock. An offline_ok client connects on first use. */
    if (st == DLOCK_OK) {
        const char *argv[1] = {"PING"};
        redisReply *r = NULL;
        st = dlock__topo_command(c->topo, NULL, 1, argv, NULL, &r, NULL);
        if (st == DLOCK_OK && r->type == REDIS_REPLY_ERROR) st = dlock__reply_error(r, "PING");
        if (r) freeReplyObject(r);
    }
    if (st == DLOCK_ERR_CONNECT && o.offline_ok) st = DLOCK_OK;
    if (st != DLOCK_OK) {
        dlock_client_free(c);
        return st;
    }
    *out = c;
    return DLOCK_OK;
}

void dlock_client_free(dlock_client *c)
{
    if (!c) return;
    /* Asynchronous calls first: their callbacks may still use the client. */
    dlock_client_drain(c);
    dlock__async_shutdown(&c->async);
    /* A renewal stuck on a server that stopped answering is of no use to
     * anyone now (no handle is left): fail it rather than wait it out. */
    dlock__topo_close_io(c->topo);
    dlock__watchdog_stop(c->wd);
    dlock__subscriber_stop(c->sub);
    dlock__topo_free(c->topo);
    dlock__fence_cache_destroy(&c->fences);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* An asynchronous acquire waiting for a release is ended now: it would
 * otherwise keep the wait for callbacks going until its own deadline. */
void dlock_client_drain(dlock_client *c)
{
    if (!c) return;
    dlock__async_close(&c->async);
    pthread_mutex_lock(&c->mu);
    c->draining = 1;
    struct dlock__subscriber *sub = c->sub;
    pthread_mutex_unlock(&c->mu);
    dlock__sub_fire_all(sub);
    dlock__async_wait_drained(&c->async);
}

const char *dlock_client_id(const dlock_client *c)
{
    return c ? c->id : "";
}

struct dlock__subscriber *dlock__client_subscriber(dlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    if (!c->sub) {
        c->sub = dlock__subscriber_start(c);
        if (c->draining) dlock__sub_fire_all(c->sub); /* started by a wait that must end */
    }
    struct dlock__subscriber *s = c->sub;
    pthread_mutex_unlock(&c->mu);
    return s;
}

struct dlock__watchdog *dlock__client_watchdog(dlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    if (!c->wd) c->wd = dlock__watchdog_start(c);
    struct dlock__watchdog *wd = c->wd;
    pthread_mutex_unlock(&c->mu);
    return wd;
}
