/* Batched order ids; see orderid.h. */
#include "orderid.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"

#define BATCH_MAX 4096

struct sk_orderids {
    dlock_client *client;
    pthread_mutex_t mu;
    int batch;
    size_t pos, len;
    uint64_t ids[BATCH_MAX];
};

/* The batch bounds both the INCRBY rate and the ids lost on a crash. */
sk_orderids *sk_orderids_new(dlock_client *client, int batch)
{
    sk_orderids *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->client = client;
    o->batch = batch < 1 ? 1 : batch > BATCH_MAX ? BATCH_MAX : batch;
    pthread_mutex_init(&o->mu, NULL);
    return o;
}

/* Unused ids of the current batch are simply never handed out. */
void sk_orderids_free(sk_orderids *o)
{
    if (!o) return;
    pthread_mutex_destroy(&o->mu);
    free(o);
}

/* Why batches: dlock_id_next reserves a whole batch with one INCRBY, and
 * every id it gives is unique across processes; ids a crashed process had
 * reserved are simply never used. The lock is held over the refill so that
 * concurrent callers wait for one INCRBY instead of each sending one. */
sk_result sk_orderids_next(sk_orderids *o, uint64_t *out)
{
    pthread_mutex_lock(&o->mu);
    if (o->pos == o->len) {
        dlock_status st = dlock_id_next(o->client, "order", o->ids, (size_t)o->batch);
        if (st != DLOCK_OK) {
            pthread_mutex_unlock(&o->mu);
            SK_LOG_REPEATED(SK_LOG_ERROR, "order id: %s", dlock_last_error());
            return st == DLOCK_ERR_CONNECT ? SK_UNAVAILABLE : SK_INTERNAL;
        }
        o->pos = 0;
        o->len = (size_t)o->batch;
    }
    *out = o->ids[o->pos++];
    pthread_mutex_unlock(&o->mu);
    return SK_OK;
}
