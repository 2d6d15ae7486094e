/*
 * The watchdog: renews every watchdog-held lock of a client from one
 * thread.
 *
 * Each hold is renewed a third of its lease after its last successful
 * renewal, and holds due within the next sixth of a lease ride along, so
 * that many locks cost one script call (up to BATCH keys) instead of one
 * each. Every kind of hold (lock, read hold, permit) names its own renew
 * script, all with the same calling shape; a batch holds one kind. On a
 * cluster a script may only touch keys of one slot, so a batch also holds
 * one slot (elsewhere every slot number is 0 and this costs nothing).
 *
 * The users of other libraries complain of three failures, each closed
 * here:
 *
 *  - renewal after unlock: release removes the entry before it returns,
 *    and a renewal already in flight only ever extends a lock whose owner
 *    field still names this holder (see renew.lua);
 *  - renewal that stops after one error: a failed call is retried soon,
 *    over a new connection, until the lease would have ended by our own
 *    clock; only then is the hold declared lost;
 *  - silent loss: a hold the server no longer has is reported through the
 *    holder's on_lost callback at once.
 *
 * Deadlines are measured from the moment a renewal was sent, not answered,
 * so a slow reply can only make us think the lease ends sooner than it
 * does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "util.h"
#include "watchdog.h"

#define BATCH 100

struct dlock_watchdog {
    dlock_client *client;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;      /* entries changed, or stop */
    pthread_cond_t cb_done;   /* a loss callback returned */
    dlock_wd_entry *in_callback;
    dlock_wd_entry **flight;  /* the batch being renewed; removed entries */
    int flight_n;             /* are set to NULL in it (they may be freed) */
    dlock_wd_entry head;      /* circular list sentinel */
    uint64_t next_gen;
    int stop;
};

static void unlink_entry(dlock_wd_entry *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = NULL;
    e->registered = 0;
}

/* A hold whose renewal failed: retry soon, unless the lease is over. */
static int retry_or_lost(dlock_wd_entry *e, int64_t now)
{
    if (now >= e->deadline_ms) return 1;
    long retry = e->lease_ms / 10;
    if (retry < 20) retry = 20;
    if (retry > 1000) retry = 1000;
    e->next_ms = now + retry;
    if (e->next_ms > e->deadline_ms) e->next_ms = e->deadline_ms;
    return 0;
}

/* Run the loss callback outside the mutex: it may take the holder's own
 * locks, and dlock_wd_remove() waits for it through in_callback. */
static void report_lost(struct dlock_watchdog *wd, dlock_wd_entry *e)
{
    unlink_entry(e);
    wd->in_callback = e;
    pthread_mutex_unlock(&wd->mu);
    e->on_lost(e);
    pthread_mutex_lock(&wd->mu);
    wd->in_callback = NULL;
    pthread_cond_broadcast(&wd->cb_done);
}

/* Renew one batch of due entries. Called and returns with mu held. */
static void renew_batch(struct dlock_watchdog *wd, int64_t now)
{
    dlock_wd_entry *batch[BATCH];
    uint64_t gens[BATCH];
    const char *keys[BATCH];
    const char *args[2 * BATCH];
    char leases[BATCH][24];
    char *copies[2 * BATCH];
    int n = 0;

    dlock_script_id script = DLOCK_SCRIPT_COUNT;
    unsigned slot = 0;
    for (dlock_wd_entry *e = wd->head.next; e != &wd->head && n < BATCH; e = e->next) {
        if (e->next_ms > now + e->lease_ms / 6) continue;
        /* One call renews holds of one kind and slot; the others wait
         * their turn. */
        if (script == DLOCK_SCRIPT_COUNT) {
            script = e->script;
            slot = e->slot;
        }
        if (e->script != script || e->slot != slot) continue;
        batch[n] = e;
        gens[n] = e->gen;
        /* Copies: the holder may free its strings once it is removed. */
        copies[2 * n] = strdup(e->key);
        copies[2 * n + 1] = strdup(e->owner);
        keys[n] = copies[2 * n];
        args[2 * n] = copies[2 * n + 1];
        snprintf(leases[n], sizeof leases[n], "%ld", e->lease_ms);
        args[2 * n + 1] = leases[n];
        e->next_ms = INT64_MAX; /* in flight */
        if (!keys[n] || !args[2 * n]) {
            free(copies[2 * n]);
            free(copies[2 * n + 1]);
            e->next_ms = now + 100;
            continue;
        }
        n++;
    }
    if (n == 0) return;

    wd->flight = batch;
    wd->flight_n = n;
    pthread_mutex_unlock(&wd->mu);
    redisReply *r = NULL;
    dlock_status st = dlock_eval(wd->client, script, n, keys, 2 * n, args, &r, NULL);
    if (st == DLOCK_OK && (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)n)) {
        st = DLOCK_ERR_REDIS;
    }
    int64_t after = dlock_mono_ms();
    pthread_mutex_lock(&wd->mu);

    for (int i = 0; i < n; i++) {
        dlock_wd_entry *e = batch[i];
        free(copies[2 * i]);
        free(copies[2 * i + 1]);
        /* NULL: removed while in flight, and perhaps freed by its holder. */
        if (!e || !e->registered || e->gen != gens[i]) continue;
        int lost;
        if (st != DLOCK_OK) {
            lost = retry_or_lost(e, after);
        } else if (r->element[i]->type == REDIS_REPLY_INTEGER && r->element[i]->integer == 1) {
            e->deadline_ms = now + e->lease_ms;
            e->next_ms = now + e->lease_ms / 3;
            lost = 0;
        } else if (e->releasing) {
            /* Released under us, most likely: look again shortly; the
             * holder removes the entry when its release returns. */
            e->next_ms = after + 20;
            lost = 0;
        } else {
            lost = 1;
        }
        if (lost) report_lost(wd, e);
    }
    wd->flight = NULL;
    wd->flight_n = 0;
    if (r) freeReplyObject(r);
}

static void *watchdog_main(void *arg)
{
    struct dlock_watchdog *wd = arg;
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        int64_t now = dlock_mono_ms(), earliest = INT64_MAX;
        for (dlock_wd_entry *e = wd->head.next; e != &wd->head; e = e->next)
            if (e->next_ms < earliest) earliest = e->next_ms;
        if (earliest > now) {
            dlock_cond_wait_until(&wd->cond, &wd->mu, earliest == INT64_MAX ? -1 : earliest);
            continue;
        }
        renew_batch(wd, now);
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

struct dlock_watchdog *dlock_watchdog_start(dlock_client *client)
{
    struct dlock_watchdog *wd = calloc(1, sizeof *wd);
    if (!wd) return NULL;
    wd->client = client;
    wd->head.next = wd->head.prev = &wd->head;
    pthread_mutex_init(&wd->mu, NULL);
    dlock_cond_init(&wd->cond);
    dlock_cond_init(&wd->cb_done);
    if (pthread_create(&wd->thread, NULL, watchdog_main, wd) != 0) {
        pthread_cond_destroy(&wd->cb_done);
        pthread_cond_destroy(&wd->cond);
        pthread_mutex_destroy(&wd->mu);
        free(wd);
        return NULL;
    }
    return wd;
}

void dlock_watchdog_stop(struct dlock_watchdog *wd)
{
    if (!wd) return;
    pthread_mutex_lock(&wd->mu);
    wd->stop = 1;
    pthread_cond_signal(&wd->cond);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
    while (wd->head.next != &wd->head) unlink_entry(wd->head.next);
    pthread_cond_destroy(&wd->cb_done);
    pthread_cond_destroy(&wd->cond);
    pthread_mutex_destroy(&wd->mu);
    free(wd);
}

void dlock_wd_add(struct dlock_watchdog *wd, dlock_wd_entry *e, int64_t since_ms)
{
    pthread_mutex_lock(&wd->mu);
    if (!e->registered) {
        e->prev = wd->head.prev;
        e->next = &wd->head;
        wd->head.prev->next = e;
        wd->head.prev = e;
        e->registered = 1;
        e->slot = dlock_topo_slot(wd->client->topo, e->key);
    }
    e->gen = ++wd->next_gen;
    e->releasing = 0;
    e->deadline_ms = since_ms + e->lease_ms;
    e->next_ms = since_ms + e->lease_ms / 3;
    pthread_cond_signal(&wd->cond);
    pthread_mutex_unlock(&wd->mu);
}

void dlock_wd_releasing(struct dlock_watchdog *wd, dlock_wd_entry *e, int on)
{
    pthread_mutex_lock(&wd->mu);
    e->releasing = on;
    pthread_mutex_unlock(&wd->mu);
}

void dlock_wd_remove(struct dlock_watchdog *wd, dlock_wd_entry *e)
{
    pthread_mutex_lock(&wd->mu);
    /* A loss callback that releases its own lock must not wait for itself. */
    while (wd->in_callback == e && !pthread_equal(pthread_self(), wd->thread))
        pthread_cond_wait(&wd->cb_done, &wd->mu);
    if (e->registered) unlink_entry(e);
    for (int i = 0; i < wd->flight_n; i++)
        if (wd->flight[i] == e) wd->flight[i] = NULL;
    pthread_mutex_unlock(&wd->mu);
}
