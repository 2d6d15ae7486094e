/* An instance's memory of sold-out vouchers; see soldout.h. */
#include "soldout.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A flash sale has a handful of vouchers at a time; past this many, the
 * entry that ends first makes room. */
#define SOLDOUT_MAX 64

typedef struct entry {
    int64_t voucher; /* 0: free slot */
    int stored;      /* 0: seen sold out, not read yet */
    int claimed;     /* a thread is reading it now */
    int64_t begin, end;
    int64_t *buyers; /* sorted */
    size_t n;
    int64_t until_ms; /* stored entries end then (monotonic clock) */
} entry;

struct sk_soldout {
    pthread_rwlock_t mu;
    long ttl_ms;
    entry e[SOLDOUT_MAX];
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

sk_soldout *sk_soldout_new(long ttl_ms)
{
    sk_soldout *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->ttl_ms = ttl_ms > 0 ? ttl_ms : 0;
    pthread_rwlock_init(&m->mu, NULL);
    return m;
}

void sk_soldout_free(sk_soldout *m)
{
    if (!m) return;
    for (int i = 0; i < SOLDOUT_MAX; i++) free(m->e[i].buyers);
    pthread_rwlock_destroy(&m->mu);
    free(m);
}

static entry *find(sk_soldout *m, int64_t voucher_id)
{
    for (int i = 0; i < SOLDOUT_MAX; i++)
        if (m->e[i].voucher == voucher_id) return &m->e[i];
    return NULL;
}

static void clear(entry *e)
{
    free(e->buyers);
    memset(e, 0, sizeof *e);
}

/* The hot path: a read lock and a binary search, no Redis. An entry past
 * its time answers nothing; the next "sold out" reads it again. */
sk_result sk_soldout_answer(sk_soldout *m, int64_t voucher_id, int64_t user_id, int64_t now)
{
    if (!m || !m->ttl_ms) return SK_OK;
    sk_result r = SK_OK;
    pthread_rwlock_rdlock(&m->mu);
    entry *e = find(m, voucher_id);
    if (e && e->stored && mono_ms() < e->until_ms) {
        if (now < e->begin) r = SK_NOT_STARTED;
        else if (now >= e->end) r = SK_ENDED;
        else if (bsearch(&user_id, e->buyers, e->n, sizeof *e->buyers, cmp_i64)) r = SK_ALREADY;
        else r = SK_SOLD_OUT;
    }
    pthread_rwlock_unlock(&m->mu);
    return r;
}

/* A slot for a new entry: a free one, an ended one, or the one that ends
 * first; never one a thread is reading. */
static entry *slot(sk_soldout *m)
{
    int64_t now = mono_ms();
    entry *best = NULL;
    for (int i = 0; i < SOLDOUT_MAX; i++) {
        entry *e = &m->e[i];
        if (e->voucher == 0) return e;
        if (e->claimed) continue;
        if (e->stored && e->until_ms <= now) return e;
        if (!best || (e->stored && (!best->stored || e->until_ms < best->until_ms))) best = e;
    }
    return best;
}

void sk_soldout_seen(sk_soldout *m, int64_t voucher_id)
{
    if (!m || !m->ttl_ms) return;
    pthread_rwlock_wrlock(&m->mu);
    entry *e = find(m, voucher_id);
    if (e && e->stored && e->until_ms <= mono_ms() && !e->claimed) clear(e), e = NULL;
    if (!e && (e = slot(m)) != NULL) {
        clear(e);
        e->voucher = voucher_id;
    }
    pthread_rwlock_unlock(&m->mu);
}

int sk_soldout_claim(sk_soldout *m, int64_t voucher_id)
{
    if (!m || !m->ttl_ms) return 0;
    int mine = 0;
    pthread_rwlock_wrlock(&m->mu);
    entry *e = find(m, voucher_id);
    if (e && !e->stored && !e->claimed) mine = e->claimed = 1;
    pthread_rwlock_unlock(&m->mu);
    return mine;
}

void sk_soldout_store(sk_soldout *m, int64_t voucher_id, int64_t begin, int64_t end, const int64_t *buyers, size_t n)
{
    if (!m || !m->ttl_ms) return;
    int64_t *copy = malloc((n ? n : 1) * sizeof *copy);
    if (!copy) {
        sk_soldout_forget(m, voucher_id);
        return;
    }
    if (n) memcpy(copy, buyers, n * sizeof *copy);
    qsort(copy, n, sizeof *copy, cmp_i64);
    pthread_rwlock_wrlock(&m->mu);
    entry *e = find(m, voucher_id);
    if (e && e->claimed) {
        free(e->buyers);
        *e = (entry){voucher_id, 1, 0, begin, end, copy, n, mono_ms() + m->ttl_ms};
        copy = NULL;
    }
    pthread_rwlock_unlock(&m->mu);
    free(copy); /* forgotten while it was being read: keep nothing */
}

void sk_soldout_forget(sk_soldout *m, int64_t voucher_id)
{
    if (!m || !m->ttl_ms) return;
    pthread_rwlock_wrlock(&m->mu);
    entry *e = find(m, voucher_id);
    if (e) clear(e);
    pthread_rwlock_unlock(&m->mu);
}
