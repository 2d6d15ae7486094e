/*
 * The watchdog: renews every watchdog-held lock of a client, and ends its
 * holder's belief in a hold when the holder's own clock says the lease may
 * be over.
 *
 * Each hold is renewed a third of its lease after its last successful
 * renewal was sent, and holds due within the next sixth of a lease ride
 * along, so that many locks cost one script call (up to BATCH keys)
 * instead of one each. Every kind of hold (lock, read hold, permit) names
 * its own renew script, all with the same calling shape; a batch holds one
 * kind. On a cluster a script may only touch keys of one slot, so a batch
 * also holds one slot (elsewhere every slot number is 0 and this costs
 * nothing).
 *
 * Two kinds of thread, so that no renewal call can stretch a lease:
 *
 *  - The scheduler (one per client) owns the clock. It forms batches of
 *    due holds and hands each to the lane of the server that serves it,
 *    and it declares a hold lost at its `lost_ms`: the lease less the
 *    drift allowance and the safety margin, counted from the moment the
 *    last successful renewal was *sent* (dlock__lease_trust_ms). It does
 *    so whether or not a renewal is in flight, so a renewal stuck on a
 *    connection that neither answers nor fails (a partition: packets
 *    dropped, nothing refused) cannot make the holder believe in a lease
 *    the server may already have ended. Every loss callback runs here.
 *  - A lane per server (node of the topology) makes the renewal calls,
 *    one batch at a time, and blocks in them as long as the connection
 *    layer lets it. A server that stopped answering holds up its own lane
 *    only: holds on the other masters of a cluster, or on the other
 *    masters of a RedLock, keep being renewed. Lanes start on first need.
 *
 * Why not one thread doing everything (as before): a renewal waits out the
 * command timeout (5 s by default) on a partitioned server, longer than a
 * short lease, and the holder then believed in its hold for up to that
 * long after the server had let it go; and every other hold of the client
 * waited too.
 *
 * The users of other libraries complain of three failures, each closed
 * here:
 *
 *  - renewal after unlock: release removes the entry before it returns,
 *    and a renewal already in flight only ever extends a lock whose owner
 *    field still names this holder (see renew.lua);
 *  - renewal that stops after one error: a failed call is retried soon,
 *    over a new connection, until the hold's trusted time is over; only
 *    then is the hold declared lost;
 *  - silent loss: a hold the server no longer has is reported through the
 *    holder's on_lost callback at once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "util.h"
#include "watchdog.h"

#define BATCH 100

/* One renewal call: holds of one kind and slot, on one lane. Strings are
 * copied: a holder may free its own once its entry is removed. */
typedef struct wd_batch {
    dlock__script_id script;
    int n;
    dlock__wd_entry *e[BATCH]; /* NULL once removed (it may be freed) */
    uint64_t gen[BATCH];
    const char *keys[BATCH];
    const char *args[2 * BATCH];
    char leases[BATCH][24];
    char *copies[2 * BATCH];
    struct wd_batch *next; /* in the watchdog's list of active batches */
} wd_batch;

/* A server's renewal thread; `batch` is its one call, NULL when idle. */
typedef struct wd_lane {
    struct dlock__watchdog *wd;
    pthread_t thread;
    pthread_cond_t cond; /* a batch was handed over, or stop */
    wd_batch *batch;
} wd_lane;

/* Lane 0 serves holds whose server is not known yet; lane i + 1 node i. */
#define N_LANES (DLOCK__MAX_NODES + 1)

struct dlock__watchdog {
    dlock_client *client;
    pthread_t thread;       /* the scheduler */
    pthread_mutex_t mu;     /* everything below, and every entry's private part */
    pthread_cond_t cond;    /* entries changed, a lane is idle again, or stop */
    pthread_cond_t cb_done; /* a loss callback returned */
    dlock__wd_entry *in_callback;
    dlock__wd_entry head; /* circular list sentinel */
    wd_batch *active;     /* batches handed out and not finished */
    wd_lane *lanes[N_LANES];
    int max_lane; /* highest lane index ever made */
    uint64_t next_gen;
    int64_t sleep_until; /* the scheduler waits until then; 0 while it runs */
    int stop;
};

long dlock__drift_ms(long lease_ms)
{
    return lease_ms / 100 + 2;
}

long dlock__lease_trust_ms(long lease_ms, int margin_pct)
{
    long trust = lease_ms - dlock__drift_ms(lease_ms) - (long)((int64_t)lease_ms * margin_pct / 100);
    return trust < 1 ? 1 : trust;
}

static void unlink_entry(dlock__wd_entry *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = NULL;
    e->registered = 0;
}

/* Forget `e` in every batch in flight: it may be freed once unlinked. */
static void forget_in_flight(struct dlock__watchdog *wd, dlock__wd_entry *e)
{
    for (wd_batch *b = wd->active; b; b = b->next)
        for (int i = 0; i < b->n; i++)
            if (b->e[i] == e) b->e[i] = NULL;
}

/* Run the loss callback outside the mutex: it may take the holder's own
 * locks, and dlock__wd_remove() waits for it through in_callback. Called
 * on the scheduler thread only, so in_callback names at most one entry. */
static void report_lost(struct dlock__watchdog *wd, dlock__wd_entry *e)
{
    unlink_entry(e);
    forget_in_flight(wd, e);
    wd->in_callback = e;
    pthread_mutex_unlock(&wd->mu);
    e->on_lost(e);
    pthread_mutex_lock(&wd->mu);
    wd->in_callback = NULL;
    pthread_cond_broadcast(&wd->cb_done);
}

/* Take in the answer of one batch. Called with mu held. `sent` is when
 * the call went out: a lease it renewed started no earlier. A hold the
 * server no longer has gets lost_ms in the past, for the scheduler to
 * report (callbacks run on one thread only). `took_ns` is the call's
 * duration, which every hold in it counts as its renewal latency; a
 * "not owned" for a hold being released is its release's doing and
 * counts for nothing. */
static void take_answer(struct dlock__watchdog *wd, wd_batch *b, dlock_status st, const redisReply *r, int64_t sent,
                        int64_t after, int64_t took_ns)
{
    int pct = wd->client->safety_margin_pct;
    for (int i = 0; i < b->n; i++) {
        dlock__wd_entry *e = b->e[i];
        if (!e || !e->registered || e->gen != b->gen[i]) continue;
        int renewed = st == DLOCK_OK && r->element[i]->type == REDIS_REPLY_INTEGER && r->element[i]->integer == 1;
        if (renewed || !e->releasing) dlock__stats_renewal(&wd->client->stats, e->kind, renewed, took_ns);
        if (st != DLOCK_OK) {
            long retry = e->lease_ms / DLOCK__RENEW_RETRY_DIVISOR;
            if (retry < DLOCK__RENEW_RETRY_MIN_MS) retry = DLOCK__RENEW_RETRY_MIN_MS;
            if (retry > DLOCK__RENEW_RETRY_MAX_MS) retry = DLOCK__RENEW_RETRY_MAX_MS;
            e->next_ms = after + retry;
        } else if (renewed) {
            e->lost_ms = sent + dlock__lease_trust_ms(e->lease_ms, pct);
            atomic_store(&e->trusted_until, e->lost_ms);
            e->next_ms = sent + e->lease_ms / DLOCK__RENEW_DIVISOR;
        } else if (e->releasing) {
            /* Released under us, most likely: look again shortly; the
             * holder removes the entry when its release returns. */
            e->next_ms = after + 20;
        } else {
            e->lost_ms = INT64_MIN;
            e->next_ms = after + 20; /* if its release clears it meanwhile */
        }
    }
}

/* Make one renewal call. Called and returns with mu held; drops it for
 * the call, which may block as long as the connection layer allows. */
static void run_batch(struct dlock__watchdog *wd, wd_batch *b)
{
    int64_t sent = dlock__mono_ms(), sent_ns = dlock__stats_clock();
    pthread_mutex_unlock(&wd->mu);
    redisReply *r = NULL;
    dlock_status st = dlock__eval(wd->client, b->script, b->n, b->keys, 2 * b->n, b->args, &r, NULL);
    if (st == DLOCK_OK && (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)b->n)) st = DLOCK_ERR_REDIS;
    int64_t after = dlock__mono_ms(), took_ns = dlock__stats_clock() - sent_ns;
    pthread_mutex_lock(&wd->mu);
    take_answer(wd, b, st, r, sent, after, took_ns);
    if (r) freeReplyObject(r);
    for (wd_batch **p = &wd->active; *p; p = &(*p)->next)
        if (*p == b) {
            *p = b->next;
            break;
        }
    for (int i = 0; i < 2 * b->n; i++) free(b->copies[i]);
    free(b);
    pthread_cond_signal(&wd->cond); /* the lane is idle: the scheduler may have work for it */
}

static void *lane_main(void *arg)
{
    dlock__thread_name("dlock-wd-lane");
    wd_lane *ln = arg;
    struct dlock__watchdog *wd = ln->wd;
    pthread_mutex_lock(&wd->mu);
    for (;;) {
        if (ln->batch) {
            run_batch(wd, ln->batch);
            ln->batch = NULL;
        } else if (wd->stop) {
            break;
        } else {
            pthread_cond_wait(&ln->cond, &wd->mu);
        }
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

/* The lane for the server of `e`'s key, started on first need; NULL when
 * its thread cannot start (then the scheduler makes the call itself). */
static wd_lane *lane_for(struct dlock__watchdog *wd, const dlock__wd_entry *e)
{
    int node = dlock__topo_node_known(wd->client->topo, e->key, strlen(e->key));
    int i = node >= 0 && node < DLOCK__MAX_NODES ? node + 1 : 0;
    if (wd->lanes[i]) return wd->lanes[i];
    wd_lane *ln = calloc(1, sizeof *ln);
    if (!ln) return NULL;
    ln->wd = wd;
    dlock__cond_init(&ln->cond);
    if (pthread_create(&ln->thread, NULL, lane_main, ln) != 0) {
        pthread_cond_destroy(&ln->cond);
        free(ln);
        return NULL;
    }
    wd->lanes[i] = ln;
    if (i > wd->max_lane) wd->max_lane = i;
    return ln;
}

/* A batch led by `lead`: it and the holds of the same kind, slot and lane
 * that are due by now plus a sixth of their lease. NULL when out of
 * memory (the holds stay due). */
static wd_batch *make_batch(struct dlock__watchdog *wd, dlock__wd_entry *lead, const wd_lane *lane, int64_t now)
{
    wd_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->script = lead->script;
    for (dlock__wd_entry *e = lead; e != &wd->head && b->n < BATCH; e = e->next) {
        if (e->next_ms == INT64_MAX || e->script != lead->script || e->slot != lead->slot) continue;
        if (e->next_ms > now + e->lease_ms / DLOCK__RENEW_RIDE_ALONG_DIVISOR) continue;
        if (e != lead && lane_for(wd, e) != lane) continue;
        int n = b->n;
        b->copies[2 * n] = strdup(e->key);
        b->copies[2 * n + 1] = strdup(e->owner);
        if (!b->copies[2 * n] || !b->copies[2 * n + 1]) {
            free(b->copies[2 * n]);
            free(b->copies[2 * n + 1]);
            break;
        }
        b->e[n] = e;
        b->gen[n] = e->gen;
        b->keys[n] = b->copies[2 * n];
        b->args[2 * n] = b->copies[2 * n + 1];
        snprintf(b->leases[n], sizeof b->leases[n], "%ld", e->lease_ms);
        b->args[2 * n + 1] = b->leases[n];
        e->next_ms = INT64_MAX; /* in flight */
        b->n++;
    }
    if (b->n == 0) {
        free(b);
        return NULL;
    }
    b->next = wd->active;
    wd->active = b;
    return b;
}

/* Hand every due hold whose lane is idle to that lane. Returns when the
 * next hold not yet due will be, ignoring holds that wait for a busy lane
 * (its return wakes the scheduler). Called with mu held. */
static int64_t dispatch(struct dlock__watchdog *wd, int64_t now)
{
    int64_t earliest = INT64_MAX;
    for (;;) {
        dlock__wd_entry *lead = NULL;
        wd_lane *lane = NULL;
        for (dlock__wd_entry *e = wd->head.next; e != &wd->head; e = e->next) {
            if (e->next_ms == INT64_MAX) continue; /* in flight */
            if (e->next_ms > now) {
                if (e->next_ms < earliest) earliest = e->next_ms;
                continue;
            }
            lane = lane_for(wd, e);
            if (lane && lane->batch) continue;
            lead = e;
            break;
        }
        if (!lead) return earliest;
        wd_batch *b = make_batch(wd, lead, lane, now);
        if (!b) {
            lead->next_ms = now + 100;
            continue;
        }
        if (lane) {
            lane->batch = b;
            pthread_cond_signal(&lane->cond);
        } else {
            run_batch(wd, b); /* drops mu: the list may change, so scan again */
            now = dlock__mono_ms();
        }
    }
}

/* The first hold (not being released) whose lease is no longer trusted
 * at `now`; else NULL, with the earliest time one will be in *earliest.
 * Called with mu held. */
static dlock__wd_entry *first_lost(struct dlock__watchdog *wd, int64_t now, int64_t *earliest)
{
    *earliest = INT64_MAX;
    for (dlock__wd_entry *e = wd->head.next; e != &wd->head; e = e->next) {
        if (e->releasing) continue;
        if (e->lost_ms <= now) return e;
        if (e->lost_ms < *earliest) *earliest = e->lost_ms;
    }
    return NULL;
}

static void *watchdog_main(void *arg)
{
    dlock__thread_name("dlock-watchdog");
    struct dlock__watchdog *wd = arg;
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        int64_t earliest;
        dlock__wd_entry *lost = first_lost(wd, dlock__mono_ms(), &earliest);
        if (!lost) {
            int64_t due = dispatch(wd, dlock__mono_ms());
            /* Again: dispatch may have dropped mu, and a hold added or
             * marked meanwhile woke nobody (sleep_until was 0). */
            lost = first_lost(wd, dlock__mono_ms(), &earliest);
            if (due < earliest) earliest = due;
        }
        if (lost) {
            report_lost(wd, lost);
            continue;
        }
        if (earliest > dlock__mono_ms()) {
            wd->sleep_until = earliest;
            dlock__cond_wait_until(&wd->cond, &wd->mu, earliest == INT64_MAX ? -1 : earliest);
            wd->sleep_until = 0;
        }
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

atomic_int dlock__test_watchdog_fails;

struct dlock__watchdog *dlock__watchdog_start(dlock_client *client)
{
    if (atomic_load(&dlock__test_watchdog_fails)) return NULL;
    struct dlock__watchdog *wd = calloc(1, sizeof *wd);
    if (!wd) return NULL;
    wd->client = client;
    wd->head.next = wd->head.prev = &wd->head;
    pthread_mutex_init(&wd->mu, NULL);
    dlock__cond_init(&wd->cond);
    dlock__cond_init(&wd->cb_done);
    if (pthread_create(&wd->thread, NULL, watchdog_main, wd) != 0) {
        pthread_cond_destroy(&wd->cb_done);
        pthread_cond_destroy(&wd->cond);
        pthread_mutex_destroy(&wd->mu);
        free(wd);
        return NULL;
    }
    return wd;
}

/* Why not always signal: every acquire adds its hold and every release
 * marks it, and a scheduler woken each time only finds its next deadline
 * unchanged (a renewal is a third of a lease away), at the price of a
 * context switch per call on a busy client. It is woken only when `e` is
 * due before the time it sleeps until; while it runs (sleep_until 0) it
 * looks at every entry before it sleeps again. Called with mu held. */
static void wake_for(struct dlock__watchdog *wd, const dlock__wd_entry *e)
{
    int64_t due = e->next_ms < e->lost_ms ? e->next_ms : e->lost_ms;
    if (due < wd->sleep_until) pthread_cond_signal(&wd->cond);
}

/* Each lane finishes its call in flight (within the client's timeouts)
 * before it stops. */
void dlock__watchdog_stop(struct dlock__watchdog *wd)
{
    if (!wd) return;
    pthread_mutex_lock(&wd->mu);
    wd->stop = 1;
    pthread_cond_signal(&wd->cond);
    for (int i = 0; i <= wd->max_lane; i++)
        if (wd->lanes[i]) pthread_cond_signal(&wd->lanes[i]->cond);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
    for (int i = 0; i <= wd->max_lane; i++) {
        wd_lane *ln = wd->lanes[i];
        if (!ln) continue;
        pthread_join(ln->thread, NULL);
        pthread_cond_destroy(&ln->cond);
        free(ln);
    }
    while (wd->head.next != &wd->head) unlink_entry(wd->head.next);
    pthread_cond_destroy(&wd->cb_done);
    pthread_cond_destroy(&wd->cond);
    pthread_mutex_destroy(&wd->mu);
    free(wd);
}

void dlock__wd_add(struct dlock__watchdog *wd, dlock__wd_entry *e, int64_t since_ms)
{
    pthread_mutex_lock(&wd->mu);
    if (!e->registered) {
        e->prev = wd->head.prev;
        e->next = &wd->head;
        wd->head.prev->next = e;
        wd->head.prev = e;
        e->registered = 1;
        e->slot = dlock__topo_slot(wd->client->topo, e->key);
    }
    e->gen = ++wd->next_gen;
    e->releasing = 0;
    e->lost_ms = since_ms + dlock__lease_trust_ms(e->lease_ms, wd->client->safety_margin_pct);
    atomic_store(&e->trusted_until, e->lost_ms);
    e->next_ms = since_ms + e->lease_ms / DLOCK__RENEW_DIVISOR;
    wake_for(wd, e);
    pthread_mutex_unlock(&wd->mu);
}

int dlock__wd_trusted(const dlock__wd_entry *e)
{
    return dlock__mono_ms() < atomic_load(&e->trusted_until);
}

int dlock__hold_trusted(const dlock__wd_entry *e, int renewed, int64_t until)
{
    if (renewed) return dlock__wd_trusted(e);
    return until == 0 || dlock__mono_ms() < until;
}

void dlock__wd_releasing(struct dlock__watchdog *wd, dlock__wd_entry *e, int on)
{
    pthread_mutex_lock(&wd->mu);
    e->releasing = on;
    if (!on) wake_for(wd, e); /* its loss counts once more */
    pthread_mutex_unlock(&wd->mu);
}

void dlock__wd_remove(struct dlock__watchdog *wd, dlock__wd_entry *e)
{
    pthread_mutex_lock(&wd->mu);
    /* A loss callback that releases its own lock must not wait for itself. */
    while (wd->in_callback == e && !pthread_equal(pthread_self(), wd->thread)) pthread_cond_wait(&wd->cb_done, &wd->mu);
    if (e->registered) unlink_entry(e);
    forget_in_flight(wd, e);
    pthread_mutex_unlock(&wd->mu);
}
