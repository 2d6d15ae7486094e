/*
 * Orders of one voucher gathered into one script call (batch.h).
 *
 * Why: Redis spends most of an order's time on what surrounds the script,
 * not in it: reading the command, looking the script up, setting up the
 * Lua call, writing the reply (docs/BENCHMARKS.md, "Orders in batches").
 * A call that decides many orders of one voucher pays that once, and the
 * service reads one reply instead of many. The orders are decided one
 * after the other inside the script, each with every check before its
 * writes, exactly as one order per call would decide them.
 *
 * A voucher's state lives in a bucket of a small table, and only while it
 * has calls in flight or orders waiting; an idle voucher takes no memory.
 * Each bucket has its own mutex, so orders of different vouchers do not
 * contend, and the mutex is never held while sending.
 */
#include "batch.h"

#include <pthread.h>
#include <stdlib.h>

#define BUCKETS 64

typedef struct entry {
    int64_t key;
    int in_flight;
    sk_batch_item *head, *tail;
    struct entry *next;
} entry;

typedef struct bucket {
    pthread_mutex_t mu;
    entry *list;
} bucket;

struct sk_batcher {
    int in_flight;
    size_t max;
    sk_batch_send *send;
    void *ctx;
    bucket b[BUCKETS];
};

sk_batcher *sk_batcher_new(int in_flight, size_t max, sk_batch_send *send, void *ctx)
{
    sk_batcher *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->in_flight = in_flight > 0 ? in_flight : 1;
    b->max = max > 0 ? max : 1;
    b->send = send;
    b->ctx = ctx;
    for (int i = 0; i < BUCKETS; i++) pthread_mutex_init(&b->b[i].mu, NULL);
    return b;
}

void sk_batcher_free(sk_batcher *b)
{
    if (!b) return;
    for (int i = 0; i < BUCKETS; i++) {
        for (entry *e = b->b[i].list, *n; e; e = n) {
            n = e->next;
            free(e);
        }
        pthread_mutex_destroy(&b->b[i].mu);
    }
    free(b);
}

static bucket *bucket_of(sk_batcher *b, int64_t key)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return &b->b[h >> 58]; /* the top 6 bits: BUCKETS is 64 */
}

static entry **find(bucket *bk, int64_t key)
{
    entry **p = &bk->list;
    while (*p && (*p)->key != key) p = &(*p)->next;
    return p;
}

/* Drop an entry with nothing in flight and nothing queued. Called with
 * the bucket's mutex held. */
static void forget_if_idle(entry **p)
{
    entry *e = *p;
    if (e->in_flight == 0 && !e->head) {
        *p = e->next;
        free(e);
    }
}

/* Send the queue of the entry at *p while it may have more calls in
 * flight. Called and returns with the bucket's mutex held; `p` may be
 * invalid on return (the entry freed). A send that fails has answered
 * its items, so it frees the slot it took at once. */
static void pump(sk_batcher *b, bucket *bk, int64_t key)
{
    for (;;) {
        entry **p = find(bk, key);
        entry *e = *p;
        if (!e) return;
        if (!e->head || e->in_flight >= b->in_flight) {
            forget_if_idle(p);
            return;
        }
        sk_batch_item *chain = e->head, *last = chain;
        size_t n = 1;
        while (n < b->max && last->next) {
            last = last->next;
            n++;
        }
        e->head = last->next;
        if (!e->head) e->tail = NULL;
        last->next = NULL;
        e->in_flight++;
        pthread_mutex_unlock(&bk->mu);
        int rc = b->send(b->ctx, key, chain, n);
        pthread_mutex_lock(&bk->mu);
        if (rc != 0) {
            /* The entry cannot have gone: it had this call in flight. */
            (*find(bk, key))->in_flight--;
        }
    }
}

int sk_batcher_add(sk_batcher *b, sk_batch_item *item)
{
    bucket *bk = bucket_of(b, item->key);
    item->next = NULL;
    pthread_mutex_lock(&bk->mu);
    entry **p = find(bk, item->key);
    if (!*p) {
        entry *e = calloc(1, sizeof *e);
        if (!e) {
            pthread_mutex_unlock(&bk->mu);
            return -1;
        }
        e->key = item->key;
        *p = e;
    }
    entry *e = *p;
    if (e->tail) e->tail->next = item;
    else e->head = item;
    e->tail = item;
    pump(b, bk, item->key);
    pthread_mutex_unlock(&bk->mu);
    return 0;
}

void sk_batcher_done(sk_batcher *b, int64_t key)
{
    bucket *bk = bucket_of(b, key);
    pthread_mutex_lock(&bk->mu);
    entry **p = find(bk, key);
    if (*p) {
        if ((*p)->in_flight > 0) (*p)->in_flight--;
        pump(b, bk, key);
    }
    pthread_mutex_unlock(&bk->mu);
}
