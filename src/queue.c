/*
 * Completion queues (dlock.h, dlock_queue_*): asynchronous outcomes that
 * wait for an event loop to take them on its own thread.
 *
 * Why: the asynchronous API calls back on the library thread that reads
 * every caller's replies. A binding whose callback must run interpreter
 * code (Python's ctypes takes the global interpreter lock for it) makes
 * that thread wait for the loop's thread to let go of the interpreter,
 * once per completion, while every other reply waits behind it; measured,
 * that was about three context switches and fifteen futex calls per
 * lock+release pair (measured; CHANGELOG.md). Posting here costs
 * the library thread a mutex and, when the queue was empty, one write to
 * an eventfd; the loop takes a burst of outcomes with one call.
 *
 * A ticket is the one allocation of a call: it travels as the call's
 * argument, becomes the queued completion, and is freed when taken. Each
 * live ticket holds a reference on its queue, so a queue freed while
 * calls are in flight stays in memory (descriptor closed, outcomes
 * dropped) until the last of them ends.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util.h"

typedef struct queued {
    dlock_queue *q;
    struct queued *next;   /* in the queue, once posted */
    dlock_queue_fn divert; /* set by dlock_queue_divert(), under q->mu */
    void *divert_arg;
    dlock_completion c;
} queued;

struct dlock_queue {
    pthread_mutex_t mu;
    int fd;              /* the eventfd; -1 once freed */
    int armed;           /* the eventfd holds a count: it reads readable */
    int refs;            /* the owner's, and one per live ticket */
    queued *head, *tail; /* posted, not taken */
};

/* Called with q->mu held; returns 1 when that was the last reference. */
static int unref_locked(dlock_queue *q)
{
    return --q->refs == 0;
}

static void destroy(dlock_queue *q)
{
    pthread_mutex_destroy(&q->mu);
    free(q);
}

/* Why the eventfd is written only on the way from empty to non-empty and
 * read only by take: one wake-up of the loop per burst of completions,
 * however many the burst holds. Called with q->mu held. */
static void arm(dlock_queue *q)
{
    if (q->armed || q->fd < 0) return;
    uint64_t one = 1;
    if (write(q->fd, &one, sizeof one) == (ssize_t)sizeof one) q->armed = 1;
}

dlock_status dlock_queue_new(dlock_queue **out)
{
    if (!out) return dlock__fail(DLOCK_ERR_INVALID, "dlock_queue_new: out is NULL");
    *out = NULL;
    dlock_queue *q = calloc(1, sizeof *q);
    if (!q) return dlock__fail(DLOCK_ERR_NOMEM, "dlock_queue_new: out of memory");
    q->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->fd < 0) {
        int e = errno;
        free(q);
        return dlock__fail(DLOCK_ERR_SYS, "dlock_queue_new: eventfd: %s", strerror(e));
    }
    pthread_mutex_init(&q->mu, NULL);
    q->refs = 1;
    *out = q;
    return DLOCK_OK;
}

int dlock_queue_fd(const dlock_queue *q)
{
    return q ? q->fd : -1;
}

void dlock_queue_free(dlock_queue *q)
{
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    if (q->fd >= 0) close(q->fd);
    q->fd = -1;
    for (queued *t = q->head, *n; t; t = n) {
        n = t->next;
        free(t);
        unref_locked(q); /* never the last: the owner's reference stays */
    }
    q->head = q->tail = NULL;
    int last = unref_locked(q);
    pthread_mutex_unlock(&q->mu);
    if (last) destroy(q);
}

void *dlock_queue_ticket(dlock_queue *q, uint64_t key)
{
    if (!q) return NULL;
    /* Not calloc: the message buffer is written only on failure. */
    queued *t = malloc(sizeof *t);
    if (!t) return NULL;
    t->q = q;
    t->next = NULL;
    t->divert = NULL;
    t->divert_arg = NULL;
    t->c.key = key;
    t->c.status = DLOCK_OK;
    t->c.token = 0;
    t->c.error[0] = '\0';
    pthread_mutex_lock(&q->mu);
    q->refs++;
    pthread_mutex_unlock(&q->mu);
    return t;
}

void dlock_queue_ticket_free(void *ticket_)
{
    queued *t = ticket_;
    if (!t) return;
    dlock_queue *q = t->q;
    free(t);
    pthread_mutex_lock(&q->mu);
    int last = unref_locked(q);
    pthread_mutex_unlock(&q->mu);
    if (last) destroy(q);
}

/* The end of a call: into the queue, to the diverted function, or (the
 * queue freed) nowhere. Runs on the library thread that ends the call,
 * where dlock_last_error() holds a failure's message. */
static void post(queued *t, dlock_status status, uint64_t token)
{
    t->c.status = status;
    t->c.token = status == DLOCK_OK ? token : 0;
    if (status != DLOCK_OK) {
        const char *m = dlock_last_error();
        size_t n = strlen(m);
        if (n >= sizeof t->c.error) n = sizeof t->c.error - 1;
        memcpy(t->c.error, m, n);
        t->c.error[n] = '\0';
    }
    dlock_queue *q = t->q;
    pthread_mutex_lock(&q->mu);
    if (t->divert) {
        dlock_queue_fn fn = t->divert;
        void *arg = t->divert_arg;
        pthread_mutex_unlock(&q->mu);
        fn(&t->c, arg);
        dlock_queue_ticket_free(t);
        return;
    }
    if (q->fd < 0) {
        pthread_mutex_unlock(&q->mu);
        dlock_queue_ticket_free(t);
        return;
    }
    t->next = NULL;
    if (q->tail) q->tail->next = t;
    else q->head = t;
    q->tail = t;
    arm(q);
    pthread_mutex_unlock(&q->mu);
}

/* Copy a completion without the unused tail of its message buffer. */
static void copy_out(dlock_completion *out, const dlock_completion *c)
{
    out->key = c->key;
    out->status = c->status;
    out->token = c->token;
    strcpy(out->error, c->error);
}

size_t dlock_queue_take(dlock_queue *q, dlock_completion *out, size_t max)
{
    if (!q || (!out && max > 0)) return 0;
    pthread_mutex_lock(&q->mu);
    if (q->armed) {
        uint64_t v;
        if (read(q->fd, &v, sizeof v) == (ssize_t)sizeof v || errno == EAGAIN) q->armed = 0;
    }
    size_t n = 0;
    while (q->head && n < max) {
        queued *t = q->head;
        q->head = t->next;
        if (!q->head) q->tail = NULL;
        copy_out(&out[n++], &t->c);
        free(t);
        unref_locked(q); /* never the last: the caller's reference stays */
    }
    if (q->head) arm(q);
    pthread_mutex_unlock(&q->mu);
    return n;
}

int dlock_queue_divert(dlock_queue *q, void *ticket_, dlock_completion *out, dlock_queue_fn fn, void *arg)
{
    queued *t = ticket_;
    if (!q || !t || t->q != q || !fn) return 0;
    pthread_mutex_lock(&q->mu);
    for (queued **p = &q->head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
        if (*p != t) continue;
        *p = t->next;
        if (q->tail == t) q->tail = prev;
        if (out) copy_out(out, &t->c);
        free(t);
        unref_locked(q);
        pthread_mutex_unlock(&q->mu);
        return 1;
    }
    t->divert = fn;
    t->divert_arg = arg;
    pthread_mutex_unlock(&q->mu);
    return 0;
}

void dlock_queue_on_acquired(dlock_lock *lock, dlock_status status, uint64_t token, void *ticket)
{
    (void)lock;
    post(ticket, status, token);
}

void dlock_queue_on_released(dlock_lock *lock, dlock_status status, void *ticket)
{
    (void)lock;
    post(ticket, status, 0);
}

void dlock_queue_on_rw_acquired(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status status, uint64_t token, void *ticket)
{
    (void)rw;
    (void)mode;
    post(ticket, status, token);
}

void dlock_queue_on_rw_released(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status status, void *ticket)
{
    (void)rw;
    (void)mode;
    post(ticket, status, 0);
}

void dlock_queue_on_semaphore(dlock_semaphore *sem, dlock_status status, void *ticket)
{
    (void)sem;
    post(ticket, status, 0);
}

void dlock_queue_on_permit(dlock_psem *psem, dlock_status status, dlock_permit *permit, void *ticket)
{
    (void)psem;
    post(ticket, status, (uint64_t)(uintptr_t)permit);
}

void dlock_queue_on_latch(dlock_latch *latch, dlock_status status, void *ticket)
{
    (void)latch;
    post(ticket, status, 0);
}

void dlock_queue_on_counted(dlock_latch *latch, dlock_status status, long remaining, void *ticket)
{
    (void)latch;
    post(ticket, status, (uint64_t)remaining);
}

void dlock_queue_on_ids(dlock_client *client, dlock_status status, uint64_t first, size_t count, void *ticket)
{
    (void)client;
    (void)count; /* the caller asked for it */
    post(ticket, status, first);
}

void dlock_queue_on_multilock(dlock_status status, void *ticket)
{
    post(ticket, status, 0);
}

/* A rate limit's outcome carries one number of its result: what the
 * waiting caller most wants next, the permits left after a grant or, when
 * they were due too late, the milliseconds until they are. */
void dlock_queue_on_rate(dlock_rate *rate, dlock_status status, const dlock_rate_result *res, void *ticket)
{
    (void)rate;
    uint64_t token = 0;
    if (res && status == DLOCK_OK) token = (uint64_t)res->remaining;
    else if (res && status == DLOCK_ERR_TIMEOUT && res->retry_after_ms > 0) token = (uint64_t)res->retry_after_ms;
    post(ticket, status, token);
}

void dlock_queue_on_redlock_acquired(dlock_redlock *rl, dlock_status status, uint64_t token, void *ticket)
{
    (void)rl;
    post(ticket, status, token);
}

void dlock_queue_on_redlock_released(dlock_redlock *rl, dlock_status status, void *ticket)
{
    (void)rl;
    post(ticket, status, 0);
}
