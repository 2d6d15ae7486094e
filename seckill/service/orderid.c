/* Batched order ids; see orderid.h. */
#include "orderid.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/skutil.h"

#define BATCH_MAX 4096

struct sk_orderids {
    dlock_client *client;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC: a batch landed, or the filler has work */
    int batch;
    size_t pos, len; /* the batch in use: ids[pos..len) */
    uint64_t ids[BATCH_MAX];
    uint64_t next[BATCH_MAX];
    size_t next_len; /* the batch fetched ahead; 0: none */
    int want;        /* the filler is asked to fetch, or fetching */
    int stop, started;
    pthread_t filler;
};

/* Fetch one batch (one INCRBY) without the lock held. */
static dlock_status fetch(sk_orderids *o, uint64_t *into)
{
    dlock_status st = dlock_id_next(o->client, "order", into, (size_t)o->batch);
    if (st != DLOCK_OK) SK_LOG_REPEATED(SK_LOG_ERROR, "order id: %s", dlock_last_error());
    return st;
}

/* Why a thread of its own: the INCRBY that reserves the next batch is
 * sent while the current one still lasts, so no order waits for Redis
 * for its id, and a Redis that hangs holds this thread, not the orders
 * (which then find no id and are answered busy at once, see next). */
static void *filler_main(void *arg)
{
    sk_orderids *o = arg;
    pthread_setname_np(pthread_self(), "sk-orderids");
    uint64_t *buf = malloc(BATCH_MAX * sizeof *buf);
    pthread_mutex_lock(&o->mu);
    while (buf) {
        while (!o->want && !o->stop) pthread_cond_wait(&o->cv, &o->mu);
        if (o->stop) break;
        pthread_mutex_unlock(&o->mu);
        dlock_status st = fetch(o, buf);
        pthread_mutex_lock(&o->mu);
        if (st == DLOCK_OK) {
            memcpy(o->next, buf, (size_t)o->batch * sizeof *buf);
            o->next_len = (size_t)o->batch;
        }
        o->want = 0;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    free(buf);
    return NULL;
}

/* The batch bounds both the INCRBY rate and the ids lost on a crash. */
sk_orderids *sk_orderids_new(dlock_client *client, int batch)
{
    sk_orderids *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->client = client;
    o->batch = batch < 1 ? 1 : batch > BATCH_MAX ? BATCH_MAX : batch;
    pthread_mutex_init(&o->mu, NULL);
    sk_cond_init_mono(&o->cv);
    if (pthread_create(&o->filler, NULL, filler_main, o) != 0) {
        sk_orderids_free(o);
        return NULL;
    }
    o->started = 1;
    return o;
}

sk_result sk_orderids_fill(sk_orderids *o)
{
    uint64_t *buf = malloc(BATCH_MAX * sizeof *buf);
    if (!buf) return SK_INTERNAL;
    dlock_status st = fetch(o, buf);
    pthread_mutex_lock(&o->mu);
    if (st == DLOCK_OK && o->pos == o->len) {
        memcpy(o->ids, buf, (size_t)o->batch * sizeof *buf);
        o->pos = 0;
        o->len = (size_t)o->batch;
    }
    pthread_mutex_unlock(&o->mu);
    free(buf);
    return st == DLOCK_OK ? SK_OK : st == DLOCK_ERR_CONNECT ? SK_UNAVAILABLE : SK_INTERNAL;
}

/* Unused ids of the current batch are simply never handed out. The
 * filler may be waiting for Redis: this waits for it (at most the
 * client's command timeout). */
void sk_orderids_free(sk_orderids *o)
{
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    o->stop = 1;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    if (o->started) pthread_join(o->filler, NULL);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    free(o);
}

/* Under o->mu: take the batch fetched ahead when the current one is
 * spent, and ask for the next once half of it is. */
static void advance(sk_orderids *o)
{
    if (o->pos == o->len && o->next_len) {
        memcpy(o->ids, o->next, o->next_len * sizeof *o->ids);
        o->pos = 0;
        o->len = o->next_len;
        o->next_len = 0;
    }
    if (o->len - o->pos <= (size_t)o->batch / 2 && !o->next_len && !o->want) {
        o->want = 1;
        pthread_cond_broadcast(&o->cv);
    }
}

/* How long an order waits for a batch on its way before it is answered
 * busy: far above one INCRBY, far below the order timeout. */
#define WAIT_MS 250

/* Why batches: dlock_id_next reserves a whole batch with one INCRBY, and
 * every id it gives is unique across processes; ids a crashed process had
 * reserved are simply never used. Why the wait is bounded: with Redis
 * hung the filler waits out the command timeout, and the orders behind
 * it must not. */
sk_result sk_orderids_next(sk_orderids *o, uint64_t *out)
{
    pthread_mutex_lock(&o->mu);
    advance(o);
    if (o->pos == o->len) {
        struct timespec ts = sk_mono_timespec(sk_mono_ns() + (int64_t)WAIT_MS * 1000000);
        while (!o->next_len && o->want && pthread_cond_timedwait(&o->cv, &o->mu, &ts) == 0) {}
        advance(o);
        if (o->pos == o->len) {
            pthread_mutex_unlock(&o->mu);
            return SK_UNAVAILABLE;
        }
    }
    *out = o->ids[o->pos++];
    advance(o);
    pthread_mutex_unlock(&o->mu);
    return SK_OK;
}
