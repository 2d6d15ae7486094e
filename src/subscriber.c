/*
 * The subscriber: one thread and one pub/sub connection per client.
 *
 * Waiting for a lock must not poll. A waiter declares interest in the
 * lock's channel, waits for the subscription to be confirmed, tries the
 * lock once more (a release published before the subscription took effect
 * would otherwise be missed), and only then sleeps. Releases publish on the
 * channel; this thread turns each message into "permits" on the channel's
 * entry and wakes that many sleeping threads, so one release wakes one
 * waiter of the process instead of the whole herd.
 *
 * The connection is owned by this thread alone: other threads never write
 * to it. They change the channel table under `mu` and poke an eventfd; the
 * thread then sends the SUBSCRIBE/UNSUBSCRIBE commands. At most one command
 * per channel is in flight (the entry's state), which keeps confirmations
 * unambiguous when a channel is dropped and wanted again quickly.
 *
 * When the connection breaks (server restart, failover) every waiter is
 * woken to retry, since releases may have been lost with the connection,
 * and the thread reconnects with backoff and subscribes again to every
 * wanted channel. Lost messages cost a waiter at most the holder's
 * remaining lease: waiters never sleep longer than that.
 */
#include <errno.h>
#include <signal.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "client.h"
#include "subscriber.h"
#include "util.h"

#define BUCKETS 256
#define IDLE_UNSUBSCRIBE_MS 1000

enum { SUB_IDLE, SUB_SENT, SUB_ACTIVE, UNSUB_SENT };

struct dlock_sub_entry {
    char *channel;
    size_t len;
    int refs;           /* waiters interested in the channel */
    int state;
    long permits;       /* wake-ups not yet consumed */
    int64_t idle_since; /* when refs dropped to zero */
    pthread_cond_t cond;
    struct dlock_sub_entry *next;
};

struct dlock_subscriber {
    dlock_client *client;
    pthread_t thread;
    pthread_mutex_t mu;
    int wake_fd;
    int stop;
    int dirty;          /* some entry needs a command sent */
    int connected;
    dlock_sub_entry *buckets[BUCKETS];
};

static unsigned bucket_of(const char *s, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h % BUCKETS;
}

static dlock_sub_entry *find(struct dlock_subscriber *s, const char *ch, size_t len)
{
    for (dlock_sub_entry *e = s->buckets[bucket_of(ch, len)]; e; e = e->next)
        if (e->len == len && memcmp(e->channel, ch, len) == 0) return e;
    return NULL;
}

static void unlink_free(struct dlock_subscriber *s, dlock_sub_entry *e)
{
    dlock_sub_entry **pp = &s->buckets[bucket_of(e->channel, e->len)];
    while (*pp != e) pp = &(*pp)->next;
    *pp = e->next;
    pthread_cond_destroy(&e->cond);
    free(e->channel);
    free(e);
}

static void poke(struct dlock_subscriber *s)
{
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) { /* counter full: already poked */ }
}

/* Add wake-ups to an entry; never more than there are waiters, or a burst
 * of releases nobody slept through would cause as many useless retries. */
static void grant(dlock_sub_entry *e, long n)
{
    long cap = e->refs > 0 ? e->refs : 0;
    e->permits += n;
    if (e->permits > cap) e->permits = cap;
    if (n == 1) pthread_cond_signal(&e->cond);
    else pthread_cond_broadcast(&e->cond);
}

/* Queue SUBSCRIBE/UNSUBSCRIBE for every entry that needs one. Called with
 * mu held; only appends to the connection's output buffer. */
static void queue_commands(struct dlock_subscriber *s, redisContext *c, int64_t now)
{
    s->dirty = 0;
    for (int b = 0; b < BUCKETS; b++) {
        dlock_sub_entry *e = s->buckets[b], *next;
        for (; e; e = next) {
            next = e->next;
            const char *argv[2] = {NULL, e->channel};
            size_t lens[2] = {0, e->len};
            if (e->refs > 0 && e->state == SUB_IDLE) {
                argv[0] = "SUBSCRIBE";
                lens[0] = 9;
                redisAppendCommandArgv(c, 2, argv, lens);
                e->state = SUB_SENT;
            } else if (e->refs == 0 && e->state == SUB_ACTIVE &&
                       now - e->idle_since >= IDLE_UNSUBSCRIBE_MS) {
                argv[0] = "UNSUBSCRIBE";
                lens[0] = 11;
                redisAppendCommandArgv(c, 2, argv, lens);
                e->state = UNSUB_SENT;
            } else if (e->refs == 0 && e->state == SUB_IDLE) {
                unlink_free(s, e);
            }
        }
    }
}

/* Handle one pushed reply: a confirmation or a message. */
static void on_reply(struct dlock_subscriber *s, redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    dlock_sub_entry *e = find(s, r->element[1]->str, r->element[1]->len);
    if (!e) return;
    if (strcmp(kind, "message") == 0) {
        const redisReply *p = r->element[2];
        long n = 1;
        if (p->type == REDIS_REPLY_STRING && p->len == 1 && p->str[0] == '*') n = e->refs;
        else if (p->type == REDIS_REPLY_STRING) n = strtol(p->str, NULL, 10);
        if (n > 0) grant(e, n);
    } else if (strcmp(kind, "subscribe") == 0 && e->state == SUB_SENT) {
        e->state = SUB_ACTIVE;
        pthread_cond_broadcast(&e->cond);
    } else if (strcmp(kind, "unsubscribe") == 0 && e->state == UNSUB_SENT) {
        e->state = SUB_IDLE;
        if (e->refs > 0) s->dirty = 1;
        else unlink_free(s, e);
    }
}

/* The connection is gone: forget server-side state and wake every waiter
 * so it retries the lock instead of trusting a message that may be lost. */
static void on_disconnect(struct dlock_subscriber *s)
{
    s->connected = 0;
    for (int b = 0; b < BUCKETS; b++) {
        dlock_sub_entry *e = s->buckets[b], *next;
        for (; e; e = next) {
            next = e->next;
            e->state = SUB_IDLE;
            if (e->refs == 0) unlink_free(s, e);
            else grant(e, e->refs);
        }
    }
    s->dirty = 1;
}

static int has_idle_active(struct dlock_subscriber *s)
{
    for (int b = 0; b < BUCKETS; b++)
        for (dlock_sub_entry *e = s->buckets[b]; e; e = e->next)
            if (e->refs == 0 && e->state == SUB_ACTIVE) return 1;
    return 0;
}

static void drain_wake_fd(struct dlock_subscriber *s)
{
    uint64_t v;
    if (read(s->wake_fd, &v, sizeof v) < 0) { /* nothing pending */ }
}

static void *subscriber_main(void *arg)
{
    struct dlock_subscriber *s = arg;
    redisContext *c = NULL;
    int backoff = 0;
    /* This thread writes SUBSCRIBE commands itself; a write to a server
     * that went away must fail with EPIPE, not kill the program. */
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, NULL);

    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (!c) {
            pthread_mutex_unlock(&s->mu);
            if (backoff) {
                struct pollfd w = {s->wake_fd, POLLIN, 0};
                if (poll(&w, 1, backoff) > 0) drain_wake_fd(s);
            }
            dlock_status st = dlock_connect(&s->client->pool, &c);
            pthread_mutex_lock(&s->mu);
            if (st != DLOCK_OK) {
                backoff = backoff ? (backoff * 2 > 1000 ? 1000 : backoff * 2) : 20;
                continue;
            }
            backoff = 0;
            s->connected = 1;
            s->dirty = 1;
        }
        if (s->dirty) {
            queue_commands(s, c, dlock_mono_ms());
            int done = 0;
            while (!done && redisBufferWrite(c, &done) == REDIS_OK) {}
            if (c->err) {
                redisFree(c);
                c = NULL;
                on_disconnect(s);
                continue;
            }
        }
        int timeout = has_idle_active(s) ? IDLE_UNSUBSCRIBE_MS : -1;
        pthread_mutex_unlock(&s->mu);

        struct pollfd fds[2] = {{c->fd, POLLIN, 0}, {s->wake_fd, POLLIN, 0}};
        int n = poll(fds, 2, timeout);
        int broken = 0;
        if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
            broken = redisBufferRead(c) != REDIS_OK;
        if (n > 0 && (fds[1].revents & POLLIN)) drain_wake_fd(s);

        pthread_mutex_lock(&s->mu);
        void *reply;
        while (!broken && redisGetReplyFromReader(c, &reply) == REDIS_OK && reply) {
            on_reply(s, reply);
            freeReplyObject(reply);
        }
        if (broken || c->err) {
            redisFree(c);
            c = NULL;
            on_disconnect(s);
            backoff = 20;
            continue;
        }
        if (timeout >= 0) s->dirty = 1; /* idle channels may be due for UNSUBSCRIBE */
    }
    pthread_mutex_unlock(&s->mu);
    if (c) redisFree(c);
    return NULL;
}

struct dlock_subscriber *dlock_subscriber_start(dlock_client *client)
{
    struct dlock_subscriber *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->client = client;
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wake_fd < 0) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    if (pthread_create(&s->thread, NULL, subscriber_main, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        close(s->wake_fd);
        free(s);
        return NULL;
    }
    return s;
}

void dlock_subscriber_stop(struct dlock_subscriber *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    poke(s);
    pthread_join(s->thread, NULL);
    for (int b = 0; b < BUCKETS; b++)
        while (s->buckets[b]) unlink_free(s, s->buckets[b]);
    pthread_mutex_destroy(&s->mu);
    close(s->wake_fd);
    free(s);
}

dlock_sub_entry *dlock_sub_join(struct dlock_subscriber *s, const char *channel)
{
    size_t len = strlen(channel);
    pthread_mutex_lock(&s->mu);
    dlock_sub_entry *e = find(s, channel, len);
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e || !(e->channel = strdup(channel))) {
            free(e);
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        e->len = len;
        dlock_cond_init(&e->cond);
        unsigned b = bucket_of(channel, len);
        e->next = s->buckets[b];
        s->buckets[b] = e;
    }
    e->refs++;
    int need = e->state == SUB_IDLE;
    if (need) s->dirty = 1;
    pthread_mutex_unlock(&s->mu);
    if (need) poke(s);
    return e;
}

int dlock_sub_wait_ready(struct dlock_subscriber *s, dlock_sub_entry *e, int64_t deadline_ms)
{
    int ok = 1;
    pthread_mutex_lock(&s->mu);
    while (e->state != SUB_ACTIVE && !s->stop) {
        if (dlock_cond_wait_until(&e->cond, &s->mu, deadline_ms) == ETIMEDOUT) {
            ok = e->state == SUB_ACTIVE;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

int dlock_sub_wait(struct dlock_subscriber *s, dlock_sub_entry *e, int64_t deadline_ms)
{
    int woken = 1;
    pthread_mutex_lock(&s->mu);
    while (e->permits == 0 && !s->stop) {
        if (dlock_cond_wait_until(&e->cond, &s->mu, deadline_ms) == ETIMEDOUT) {
            woken = 0;
            break;
        }
    }
    if (e->permits > 0) {
        e->permits--;
        woken = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return woken;
}

void dlock_sub_leave(struct dlock_subscriber *s, dlock_sub_entry *e)
{
    int need = 0;
    pthread_mutex_lock(&s->mu);
    if (--e->refs == 0) {
        e->permits = 0;
        e->idle_since = dlock_mono_ms();
        if (e->state == SUB_IDLE) {
            unlink_free(s, e);
        } else {
            /* The thread must start its idle timer for this channel. */
            s->dirty = 1;
            need = 1;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (need) poke(s);
}
