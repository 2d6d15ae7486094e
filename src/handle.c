/*
 * The base of the lock family (see handle.h): what every primitive did in
 * its own copy before, set-up, thread records, loss callbacks, renewal
 * and the bookkeeping of a hold's life.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "fence.h"
#include "handle.h"
#include "util.h"

dlock_status dlock__handle_init(dlock__handle *h, dlock_client *client, const char *name,
                                const dlock__handle_keys *keys)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    if (!client) return dlock__fail(DLOCK_ERR_INVALID, "client is NULL");
    dlock_status st = dlock_check_name(name);
    if (st != DLOCK_OK) return st;
    /* Numbers start at 1 and are never reused in the process, so an owner
     * string names one handle for as long as a lock can live. */
    static atomic_ulong handles;
    h->client = client;
    h->number = atomic_fetch_add(&handles, 1) + 1;
    h->name = strdup(name);
    h->key = keys->key ? dlock__key(name, keys->key) : NULL;
    h->fence = keys->fence ? dlock__fence_key(name) : NULL;
    h->channel = keys->channel ? dlock__key(name, keys->channel) : NULL;
    if (!h->name || (keys->key && !h->key) || (keys->fence && !h->fence) || (keys->channel && !h->channel))
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    return DLOCK_OK;
}

dlock_status dlock__handle_new(size_t size, dlock_client *client, const char *name, const dlock__handle_keys *keys,
                               dlock__handle **out)
{
    if (!out) return dlock__fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    dlock__handle *h = calloc(1, size);
    if (!h) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    dlock_status st = dlock__handle_init(h, client, name, keys);
    if (st != DLOCK_OK) {
        dlock__handle_destroy(h, NULL);
        free(h);
        return st;
    }
    *out = h;
    return DLOCK_OK;
}

void dlock__handle_destroy(dlock__handle *h, void (*drop)(dlock__handle *h, dlock__thread_rec *t))
{
    dlock__thread_rec *t = h->threads, *next;
    for (; t; t = next) {
        next = t->next;
        if (drop) drop(h, t);
        free(t);
    }
    pthread_mutex_destroy(&h->mu);
    free(h->name);
    free(h->key);
    free(h->fence);
    free(h->channel);
}

/* Records are found by a walk of a short list: a handle is used by few
 * threads, and each keeps its record for the handle's life, so its hold
 * count survives between acquire and release. */
dlock__thread_rec *dlock__handle_thread(dlock__handle *h, size_t size, int create,
                                        int (*init)(dlock__handle *h, dlock__thread_rec *t))
{
    return dlock__handle_record(h, dlock__thread_number(), size, create, init);
}

dlock__thread_rec *dlock__handle_record(dlock__handle *h, unsigned long me, size_t size, int create,
                                        int (*init)(dlock__handle *h, dlock__thread_rec *t))
{
    pthread_mutex_lock(&h->mu);
    dlock__thread_rec *t = h->threads;
    while (t && t->thread != me) t = t->next;
    if (!t && create && (t = calloc(1, size)) != NULL) {
        t->thread = me;
        snprintf(t->owner, sizeof t->owner, "%s:%lu:%lu", h->client->id, me, h->number);
        if (init && init(h, t) < 0) {
            free(t);
            t = NULL;
        } else {
            t->next = h->threads;
            h->threads = t;
        }
    }
    pthread_mutex_unlock(&h->mu);
    return t;
}

dlock_status dlock__handle_async_claim(dlock__handle *h, dlock__thread_rec *rec)
{
    int idle = 0;
    if (!atomic_compare_exchange_strong(&rec->async_busy, &idle, 1))
        return dlock__fail(DLOCK_ERR_INVALID, "'%s': an asynchronous call is in flight on this handle", h->name);
    dlock_status st = dlock__async_begin(&h->client->async);
    if (st != DLOCK_OK) atomic_store(&rec->async_busy, 0);
    return st;
}

void dlock__handle_async_done(dlock__thread_rec *rec)
{
    atomic_store(&rec->async_busy, 0);
}

void *dlock__handle_async_op(dlock__handle *h, size_t size, dlock__thread_rec **rec, dlock_status *st)
{
    *rec = dlock__handle_record(h, 0, sizeof **rec, 1, NULL);
    if (!*rec) {
        *st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if ((*st = dlock__handle_async_claim(h, *rec)) != DLOCK_OK) return NULL;
    void *op = calloc(1, size);
    if (!op) {
        dlock__handle_async_abandon(h, *rec);
        *st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    return op;
}

void dlock__handle_async_abandon(dlock__handle *h, dlock__thread_rec *rec)
{
    dlock__handle_async_done(rec);
    dlock__async_end(&h->client->async);
}

void dlock__handle_on_lost(dlock__handle *h, dlock__handle_fn fn, void *arg)
{
    pthread_mutex_lock(&h->mu);
    h->fn = fn;
    h->arg = arg;
    pthread_mutex_unlock(&h->mu);
}

/* Read under the mutex, called outside it: a callback may call back into
 * the handle (release, say) without deadlock. */
dlock__handle_fn dlock__handle_callback(dlock__handle *h, void **arg)
{
    pthread_mutex_lock(&h->mu);
    dlock__handle_fn fn = h->fn;
    *arg = h->arg;
    pthread_mutex_unlock(&h->mu);
    return fn;
}

dlock_status dlock__handle_renew(dlock_client *client, dlock__wd_entry *e, long lease_ms, int64_t sent)
{
    struct dlock__watchdog *wd = dlock__client_watchdog(client);
    if (!wd) return dlock__fail(DLOCK_ERR_SYS, "cannot start the watchdog thread");
    e->lease_ms = lease_ms;
    dlock__wd_add(wd, e, sent);
    return DLOCK_OK;
}

/* Why a new hold whose answer came back after its trusted time is refused
 * rather than returned: the server may have let it go already (its lease
 * started when the script ran, somewhere between the send and the
 * answer), and a caller told DLOCK_OK would act on it. The anchors'
 * RedLock clients fail such an attempt for the same reason. A re-entry
 * adds a count to a hold its caller already believes in, which
 * dlock_lock_lost() reports on as before. */
dlock_status dlock__held_begin(dlock_client *client, dlock__held *h, int first, int watchdog, long lease_ms,
                               int64_t sent)
{
    long trust = dlock__lease_trust_ms(lease_ms, client->safety_margin_pct);
    if (first) {
        int64_t took = dlock__mono_ms() - sent;
        if (took >= trust)
            return dlock__fail(DLOCK_ERR_LOST,
                               "granted, but the answer came %lld ms after the request was sent, past the %ld ms "
                               "a %ld ms lease can be trusted; given back",
                               (long long)took, trust, lease_ms);
        atomic_store(&h->lost, 0);
        h->held_since = dlock__stats_clock();
    }
    h->lease_ms = lease_ms;
    h->trusted_until = watchdog ? 0 : sent + trust;
    /* A re-entry renews too: its acquire restarted the lease at `sent`. */
    if (!watchdog) return DLOCK_OK;
    dlock_status st = dlock__handle_renew(client, &h->wd, lease_ms, sent);
    if (st == DLOCK_OK) h->renewed = 1;
    return st;
}

int dlock__held_lose(dlock_client *client, dlock__held *h)
{
    if (atomic_exchange(&h->lost, 1)) return 0;
    dlock__stats_lost(&client->stats, h->wd.kind);
    return 1;
}

void dlock__held_end(dlock_client *client, dlock__held *h)
{
    dlock__stats_released(&client->stats, h->wd.kind, h->held_since);
    h->count = 0;
    if (h->renewed) {
        dlock__wd_remove(client->wd, &h->wd);
        h->renewed = 0;
    }
}

int dlock__held_lost(const dlock__held *h)
{
    if (atomic_load(&h->lost)) return 1;
    return h->count > 0 && !dlock__hold_trusted(&h->wd, h->renewed, h->trusted_until);
}

int dlock__held_release_begin(dlock_client *client, dlock__held *h)
{
    if (atomic_load(&h->lost)) {
        dlock__held_end(client, h);
        return 1;
    }
    if (h->count == 1 && h->renewed) dlock__wd_releasing(client->wd, &h->wd, 1);
    return 0;
}

void dlock__held_release_failed(dlock_client *client, dlock__held *h)
{
    if (h->count == 1 && h->renewed) dlock__wd_releasing(client->wd, &h->wd, 0);
}

int dlock__held_release_done(dlock_client *client, dlock__held *h, long left, int retried)
{
    if (left < 0 && retried && h->count == 1) left = 0;
    if (left < 0) {
        dlock__held_lose(client, h);
        dlock__held_end(client, h);
        return 1;
    }
    if (left == 0) dlock__held_end(client, h);
    else h->count = left;
    return 0;
}
