/*
 * The subscriber: one thread per client, and one pub/sub connection per
 * server that serves a channel somebody waits on (one on a plain server or
 * Sentinel, up to one per shard on a cluster).
 *
 * Waiting for a lock must not poll. A waiter declares interest in the
 * lock's channel, waits for the subscription to be confirmed, tries the
 * lock once more (a release published before the subscription took effect
 * would otherwise be missed), and only then sleeps. Releases publish on the
 * channel; this thread turns each message into "permits" on the channel's
 * entry and wakes that many sleepers, so one release wakes one waiter of
 * the process instead of the whole herd: the one that began waiting first.
 * (A plain lock's waiters listen on their process's own channel, so that
 * a release wakes one process: release.lua.) Every sleeper is a watch
 * (subscriber.h): a thread asleep on
 * a word of its own (thread_watch), or an asynchronous acquire whose next
 * attempt this thread sends when the watch fires.
 *
 * The connections are owned by this thread alone: other threads never
 * write to them. They change the channel table under `mu` and poke an
 * eventfd; the thread then sends the (S)SUBSCRIBE/(S)UNSUBSCRIBE commands.
 * At most one command per channel is in flight (the entry's state), which
 * keeps confirmations unambiguous when a channel is dropped and wanted
 * again quickly. Slow work (connecting, looking the topology up) happens
 * with `mu` released, so a thread joining a channel never waits for it.
 *
 * On a cluster a channel is sharded: it lives on the node serving its
 * slot, which the lock's hash tag makes the lock's own node, so releases
 * (SPUBLISH in the scripts) reach only that shard instead of every node.
 *
 * Whenever a subscription may have been lost, its waiters are woken to
 * retry, since releases may have been published meanwhile, and it is made
 * again where the topology now says: when a connection breaks (restart,
 * failover), when a server drops a shard channel because its slot moved
 * away (an unasked "sunsubscribe"), when a server refuses a subscription
 * (a MOVED error: the whole connection is reset), and when Sentinel names a
 * new master. Lost messages cost a waiter at most the holder's remaining
 * lease: waiters never sleep longer than that.
 */
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "client.h"
#include "subscriber.h"
#include "util.h"

#define BUCKETS 256
#define IDLE_UNSUBSCRIBE_MS 1000
#define MASTER_CHECK_MS 1000
#define MAX_LINKS 64

enum { SUB_IDLE, SUB_SENT, SUB_ACTIVE, UNSUB_SENT };

/* Who reads the links (see "Reading without this thread" below). */
enum { READER_NONE, READER_THREAD, READER_SLEEPER };

struct dlock__sub_entry {
    char *channel;
    size_t len;
    int refs; /* waiters interested in the channel */
    int state;
    int link;                  /* links[] index while not SUB_IDLE, else -1 */
    long permits;              /* wake-ups not yet consumed */
    int64_t idle_since;        /* when refs dropped to zero */
    dlock__sub_watch *waiting; /* enlisted waiters, oldest first */
    pthread_cond_t cond;
    struct dlock__sub_entry *next;
};

/* A pub/sub connection to one node of the topology. */
typedef struct sub_link {
    int node;
    dlock__link *c;   /* NULL while not connected */
    int64_t retry_at; /* after a failed connect, not before this */
    int backoff;
} sub_link;

struct thread_watch;

struct dlock__subscriber {
    dlock_client *client;
    pthread_t thread;
    pthread_mutex_t mu;
    int wake_fd;                  /* eventfd: wakes this thread */
    int yield_fd;                 /* eventfd: wakes the sleeper that reads the links */
    int reader;                   /* READER_*: who reads the links now (or may: NONE) */
    struct thread_watch *reading; /* READER_SLEEPER: that sleeper's watch */
    int polling;                  /* ... which is in poll() now, without mu */
    int yield_asked;              /* this thread wants the links back */
    int stop;
    int dirty;                       /* some entry needs a command sent */
    int unsettled;                   /* entries for which unsettled() holds */
    int firing_all;                  /* the client is draining: watches fire at once */
    dlock__sub_watch *armed, *due;   /* asynchronous waits (dlock__sub_arm) */
    const char *cmd_sub, *cmd_unsub; /* SUBSCRIBE or SSUBSCRIBE, ... */
    sub_link links[MAX_LINKS];
    int n_links; /* links are never removed: entries hold indexes */
    dlock__sub_entry *buckets[BUCKETS];
};

static unsigned bucket_of(const char *s, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h % BUCKETS;
}

static dlock__sub_entry *find(struct dlock__subscriber *s, const char *ch, size_t len)
{
    for (dlock__sub_entry *e = s->buckets[bucket_of(ch, len)]; e; e = e->next)
        if (e->len == len && memcmp(e->channel, ch, len) == 0) return e;
    return NULL;
}

/* An entry that keeps the links' reader at work: a command awaits its
 * confirmation, or waiters want a subscription it does not have yet.
 * The count of them (s->unsettled) is what may_park() asks after once
 * per hand-off; a walk of the buckets there would cost per channel. */
static int unsettled(const dlock__sub_entry *e)
{
    return e->state == SUB_SENT || e->state == UNSUB_SENT || (e->refs > 0 && e->state == SUB_IDLE);
}

/* Every change of an entry's state or refs goes through these two, which
 * keep s->unsettled true. Called with mu held. */
static void set_state(struct dlock__subscriber *s, dlock__sub_entry *e, int state)
{
    s->unsettled -= unsettled(e);
    e->state = state;
    s->unsettled += unsettled(e);
}

static void add_refs(struct dlock__subscriber *s, dlock__sub_entry *e, int n)
{
    s->unsettled -= unsettled(e);
    e->refs += n;
    s->unsettled += unsettled(e);
}

static void unlink_free(struct dlock__subscriber *s, dlock__sub_entry *e)
{
    dlock__sub_entry **pp = &s->buckets[bucket_of(e->channel, e->len)];
    while (*pp != e) pp = &(*pp)->next;
    *pp = e->next;
    pthread_cond_destroy(&e->cond);
    free(e->channel);
    free(e);
}

static void poke(struct dlock__subscriber *s)
{
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) { /* counter full: already poked */
    }
}

/* Wake the sleeper that reads the links out of its poll(), to look again
 * under mu. */
static void interrupt(struct dlock__subscriber *s)
{
    uint64_t one = 1;
    if (write(s->yield_fd, &one, sizeof one) < 0) { /* counter full: already woken */
    }
}

/* A sleeping thread's watch: fired under mu, with no trip through the
 * due list, by setting FIRED in `state` and waking the thread, which
 * sleeps on that word without holding mu (dlock__futex_wait). Why: a
 * thread woken from a condition variable must take mu again, and the
 * subscriber thread, which fires watches while it handles a burst of
 * messages, still holds it then; the woken thread would sleep once more
 * on mu, and the subscriber would pay a wake-up to let it go. A fired
 * thread reads `w.woken` and leaves without mu; nothing touches the watch
 * after the store of FIRED (the wake-up that follows touches no memory),
 * so it may leave at once. Other changes a sleeper must look at under mu
 * (its claim settled, the subscriber stopping) add NUDGE to the word and
 * wake it. */
typedef struct thread_watch {
    dlock__sub_watch w; /* first; fn NULL */
    atomic_uint state;
} thread_watch;

#define FIRED 1u
#define NUDGE 2u

/* Wake the sleeping thread of `t` to look again under mu. Called with mu
 * held, so the thread cannot leave before its word is changed. The thread
 * may be the one reading the links, asleep in poll() rather than on its
 * word. */
static void nudge(struct dlock__subscriber *s, thread_watch *t)
{
    int in_poll = s->reading == t && s->polling;
    atomic_fetch_add_explicit(&t->state, NUDGE, memory_order_release);
    dlock__futex_wake(&t->state);
    if (in_poll) interrupt(s);
}

/* Move watch `w` (armed, or new) to the due list, to fire for `why`; a
 * thread's is woken now. */
static void make_due(struct dlock__subscriber *s, dlock__sub_watch *w, int why)
{
    w->woken = why;
    if (!w->fn) {
        thread_watch *t = (thread_watch *)w;
        int in_poll = s->reading == t && s->polling;
        atomic_fetch_or_explicit(&t->state, FIRED, memory_order_release); /* t may be gone from here on */
        dlock__futex_wake(&t->state);
        if (in_poll) interrupt(s);
        return;
    }
    w->next = s->due;
    s->due = w;
}

/* The armed watches of `e` that `why` fires: for a message, one per
 * wake-up the entry has (each takes one), oldest first; for a confirmed
 * subscription, those that asked for it. A claimed sleeper is skipped:
 * its releaser settles it. */
static void fire_watches(struct dlock__subscriber *s, dlock__sub_entry *e, int why)
{
    dlock__sub_watch **pp = &s->armed;
    while (*pp) {
        dlock__sub_watch *w = *pp;
        int fire = w->e == e && !w->claimed && (why == DLOCK__SUB_MESSAGE ? e->permits > 0 : w->want_ready);
        if (!fire) {
            pp = &w->next;
            continue;
        }
        if (why == DLOCK__SUB_MESSAGE) e->permits--;
        *pp = w->next;
        make_due(s, w, why);
    }
}

/* Add wake-ups to an entry; never more than there are waiters, or a burst
 * of releases nobody slept through would cause as many useless retries.
 * They go to the armed watches (sleeping threads among them) oldest first;
 * what is left waits for the next to arm. */
static void grant(struct dlock__subscriber *s, dlock__sub_entry *e, long n)
{
    long cap = e->refs > 0 ? e->refs : 0;
    e->permits += n;
    if (e->permits > cap) e->permits = cap;
    fire_watches(s, e, DLOCK__SUB_MESSAGE);
}

/* The subscription of `e` is gone from the server's side (or never will be
 * confirmed): forget it, and wake its waiters to retry, since a release
 * may have been published where nobody listened. */
static void subscription_lost(struct dlock__subscriber *s, dlock__sub_entry *e)
{
    set_state(s, e, SUB_IDLE);
    e->link = -1;
    if (e->refs == 0) unlink_free(s, e);
    else grant(s, e, e->refs);
    s->dirty = 1;
}

/* Close link L and lose every subscription it carried. */
static void link_reset(struct dlock__subscriber *s, int L)
{
    sub_link *k = &s->links[L];
    if (k->c) dlock__link_free(k->c);
    k->c = NULL;
    for (int b = 0; b < BUCKETS; b++) {
        dlock__sub_entry *e = s->buckets[b], *next;
        for (; e; e = next) {
            next = e->next;
            if (e->link == L) subscription_lost(s, e);
        }
    }
}

/* The link to `node`, made (unconnected) when there is none. -1 when
 * MAX_LINKS nodes have been used already. */
static int link_for(struct dlock__subscriber *s, int node)
{
    for (int i = 0; i < s->n_links; i++)
        if (s->links[i].node == node) return i;
    if (s->n_links == MAX_LINKS) return -1;
    s->links[s->n_links] = (sub_link){node, NULL, 0, 0};
    return s->n_links++;
}

/* Queue SUBSCRIBE/UNSUBSCRIBE for every entry that needs one and can have
 * it now. Called with mu held; only appends to output buffers, routing
 * from what is known (no I/O). Entries whose node is not connected yet
 * stay idle, and *want_connect is set. */
static void queue_commands(struct dlock__subscriber *s, int64_t now, int *want_connect)
{
    dlock__topo *t = s->client->topo;
    s->dirty = 0;
    for (int b = 0; b < BUCKETS; b++) {
        dlock__sub_entry *e = s->buckets[b], *next;
        for (; e; e = next) {
            next = e->next;
            const char *argv[2] = {NULL, e->channel};
            size_t lens[2] = {0, e->len};
            if (e->refs > 0 && e->state == SUB_IDLE) {
                int node = dlock__topo_node_known(t, e->channel, e->len);
                int L = node >= 0 ? link_for(s, node) : -1;
                if (L < 0 || !s->links[L].c) {
                    /* Not yet: a map to refresh or a node to connect to. */
                    if (node < 0) dlock__topo_mark_stale(t);
                    *want_connect = 1;
                    continue;
                }
                argv[0] = s->cmd_sub;
                lens[0] = strlen(argv[0]);
                dlock__link_append(s->links[L].c, 2, argv, lens);
                set_state(s, e, SUB_SENT);
                e->link = L;
            } else if (e->refs == 0 && e->state == SUB_ACTIVE && now - e->idle_since >= IDLE_UNSUBSCRIBE_MS) {
                argv[0] = s->cmd_unsub;
                lens[0] = strlen(argv[0]);
                dlock__link_append(s->links[e->link].c, 2, argv, lens);
                set_state(s, e, UNSUB_SENT);
            } else if (e->refs == 0 && e->state == SUB_IDLE) {
                unlink_free(s, e);
            }
        }
    }
}

/* Connect the links that waiting entries need. Called with mu held and
 * drops it around each connect, which may take up to the connect timeout. */
static void connect_links(struct dlock__subscriber *s, int64_t now)
{
    dlock__topo *t = s->client->topo;
    pthread_mutex_unlock(&s->mu);
    dlock__topo_refresh(t);
    pthread_mutex_lock(&s->mu);
    for (int b = 0; b < BUCKETS; b++) {
        for (dlock__sub_entry *e = s->buckets[b]; e; e = e->next) {
            if (e->refs == 0 || e->state != SUB_IDLE) continue;
            int node = dlock__topo_node_known(t, e->channel, e->len);
            int L = node >= 0 ? link_for(s, node) : -1;
            if (L < 0 || s->links[L].c || now < s->links[L].retry_at) continue;
            pthread_mutex_unlock(&s->mu);
            dlock__link *c = NULL;
            dlock_status st = dlock__topo_connect(t, node, &c);
            if (st != DLOCK_OK) dlock__topo_node_failed(t, node);
            pthread_mutex_lock(&s->mu);
            sub_link *k = &s->links[L];
            if (st == DLOCK_OK) {
                k->c = c;
                k->backoff = 0;
            } else {
                k->backoff = k->backoff ? (k->backoff * 2 > 1000 ? 1000 : k->backoff * 2) : 20;
                k->retry_at = dlock__mono_ms() + k->backoff;
            }
            s->dirty = 1;
            /* The table may have changed while mu was released. */
            return;
        }
    }
}

static int remove_armed(struct dlock__subscriber *s, dlock__sub_watch *w);

/* A message "><token> <sent> <id> <owner>" (release.lua): another process's
 * release handed the lock to the waiter of this client named <owner>. Its
 * hand is filled in and its thread (or its asynchronous wait's watch), if
 * asleep and not claimed by a releaser of this client (that one settles
 * it), woken holding the lock. (The release sends it only when this
 * client listens on the server that runs it, and then keeps the grant.
 * Versions up to 0.2.0 sent "=..." whatever the count, and took the
 * grant back when PUBLISH counted no listener, although a replica may
 * pass the message on: such a message only wakes a waiter.)
 * A message naming no wait that is on here is dropped: that waiter gave
 * up, and gives the lock back itself (give_back in lock.c), or its wait
 * ended with an attempt of its own that came after the hand-off (and was
 * granted the lock afresh). Under mu. */
static void hand_over(struct dlock__subscriber *s, dlock__sub_entry *e, const char *text)
{
    char *end;
    errno = 0;
    unsigned long long token = strtoull(text, &end, 10);
    if (errno || end == text || *end != ' ' || token == 0) return;
    const char *p = end + 1;
    long long sent = strtoll(p, &end, 10);
    if (errno || end == p || *end != ' ') return;
    p = end + 1;
    unsigned long long id = strtoull(p, &end, 10);
    if (errno || end == p || *end != ' ') return;
    const char *owner = end + 1;
    dlock__sub_watch *in = e->waiting;
    while (in && !(in->hand && !in->hand->got && in->hand->id == id && strcmp(in->hand->owner, owner) == 0))
        in = in->wnext;
    if (!in) return;
    in->hand->token = (uint64_t)token;
    in->hand->sent = (int64_t)sent;
    in->hand->got = 1;
    if (in->fn) { /* an asynchronous wait: its own watch; not armed while an attempt is out (dlock__sub_arm) */
        if (!in->claimed && remove_armed(s, in)) make_due(s, in, DLOCK__SUB_HANDED);
        return;
    }
    for (dlock__sub_watch *w = s->armed; w; w = w->next)
        if (w->line == in) {
            if (!w->claimed && remove_armed(s, w)) make_due(s, w, DLOCK__SUB_HANDED);
            break;
        }
}

/* Handle one pushed reply on link L: a confirmation, a message, or an
 * error (a subscription refused: the slot lives elsewhere). */
static void on_reply(struct dlock__subscriber *s, int L, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        dlock__topo_mark_stale(s->client->topo);
        link_reset(s, L);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    /* The sharded forms name the same events: smessage, ssubscribe, sunsubscribe. */
    if (strcmp(kind, "smessage") == 0 || strcmp(kind, "ssubscribe") == 0 || strcmp(kind, "sunsubscribe") == 0) kind++;
    dlock__sub_entry *e = find(s, r->element[1]->str, r->element[1]->len);
    if (!e || e->link != L) return;
    if (strcmp(kind, "message") == 0) {
        const redisReply *p = r->element[2];
        long n = 1;
        if (p->type == REDIS_REPLY_STRING && p->len > 1 && p->str[0] == '>') {
            hand_over(s, e, p->str + 1);
            return;
        }
        if (p->type == REDIS_REPLY_STRING && p->len == 1 && p->str[0] == '*') n = e->refs;
        else if (p->type == REDIS_REPLY_STRING && p->len > 1 && p->str[0] == '=') n = 1; /* see hand_over */
        else if (p->type == REDIS_REPLY_STRING) n = strtol(p->str, NULL, 10);
        if (n > 0) grant(s, e, n);
    } else if (strcmp(kind, "subscribe") == 0 && e->state == SUB_SENT) {
        set_state(s, e, SUB_ACTIVE);
        fire_watches(s, e, DLOCK__SUB_READY);
        pthread_cond_broadcast(&e->cond);
    } else if (strcmp(kind, "unsubscribe") == 0 && e->state == UNSUB_SENT) {
        set_state(s, e, SUB_IDLE);
        e->link = -1;
        if (e->refs > 0) s->dirty = 1;
        else unlink_free(s, e);
    } else if (strcmp(kind, "unsubscribe") == 0) {
        /* Not asked for: the server dropped the channel because its slot
         * moved to another node. */
        dlock__topo_mark_stale(s->client->topo);
        subscription_lost(s, e);
    }
}

/* When to wake up without news: idle channels due for UNSUBSCRIBE, links
 * due for another connect, and (Sentinel) checking the master. */
static int poll_timeout(struct dlock__subscriber *s, int64_t now)
{
    int64_t at = INT64_MAX;
    int any_active = 0;
    for (int b = 0; b < BUCKETS; b++)
        for (dlock__sub_entry *e = s->buckets[b]; e; e = e->next) {
            /* An idle channel is due for UNSUBSCRIBE a second after its
             * last waiter left; one in use is looked at again within a
             * second, since its last waiter may leave meanwhile, and a
             * leaving waiter does not wake this thread (dlock__sub_leave). */
            int64_t check = e->refs == 0 ? e->idle_since + IDLE_UNSUBSCRIBE_MS : now + IDLE_UNSUBSCRIBE_MS;
            if (e->state == SUB_ACTIVE && check < at) at = check;
            if (e->refs > 0 && e->state == SUB_IDLE) at = now; /* retried below, with backoff */
            if (e->state != SUB_IDLE) any_active = 1;
        }
    if (at == now) {
        int64_t soonest = INT64_MAX;
        for (int i = 0; i < s->n_links; i++)
            if (!s->links[i].c && s->links[i].retry_at < soonest) soonest = s->links[i].retry_at;
        at = soonest > now ? (soonest == INT64_MAX ? now + 20 : soonest) : now + 20;
    }
    if (any_active && s->client->topo->url.kind == DLOCK_URL_SENTINEL && now + MASTER_CHECK_MS < at)
        at = now + MASTER_CHECK_MS;
    for (dlock__sub_watch *w = s->armed; w; w = w->next)
        if (w->at < at && !w->claimed) at = w->at;
    if (s->due) at = now;
    if (at == INT64_MAX) return -1;
    return at <= now ? 0 : (int)(at - now);
}

/* Sentinel: a link to a node that is no longer the master is closed, so
 * its channels move to the new master. Replication would still bring the
 * messages to the old one while it lives on as a replica, but not if it
 * is cut off, and never from a deposed master still taking writes. */
static void check_master(struct dlock__subscriber *s)
{
    dlock__topo *t = s->client->topo;
    if (t->url.kind != DLOCK_URL_SENTINEL) return;
    int m = dlock__topo_node_known(t, NULL, 0);
    for (int i = 0; i < s->n_links; i++)
        if (s->links[i].c && s->links[i].node != m) link_reset(s, i);
}

/* Empty an eventfd, so the next poll() sleeps until it is written again. */
static void drain(int fd)
{
    uint64_t v;
    if (read(fd, &v, sizeof v) < 0) { /* nothing pending */
    }
}

/* Fire the watches whose time came, and every due one, in the order they
 * became due; with mu released, since each starts an attempt. */
static void run_due(struct dlock__subscriber *s)
{
    int64_t now = dlock__mono_ms();
    dlock__sub_watch **pp = &s->armed;
    while (*pp) {
        dlock__sub_watch *w = *pp;
        if (w->at > now || w->claimed) { /* a claimed one waits for its releaser */
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        make_due(s, w, DLOCK__SUB_TIMER);
    }
    while (s->due) {
        /* The list is newest first: reverse it. */
        dlock__sub_watch *list = NULL, *w = s->due;
        s->due = NULL;
        while (w) {
            dlock__sub_watch *next = w->next;
            w->next = list;
            list = w;
            w = next;
        }
        pthread_mutex_unlock(&s->mu);
        for (w = list; w;) {
            dlock__sub_watch *next = w->next; /* w belongs to its owner once fired */
            w->fn(w, w->woken);
            w = next;
        }
        pthread_mutex_lock(&s->mu);
    }
}

/*
 * Reading without this thread. A message that wakes a sleeping thread
 * costs two wake-ups when this thread reads it: this thread's, then the
 * sleeper's. Where a process has one thread waiting (a worker process, the
 * CLI), both are on the path of every hand-off from another process, and
 * on a small machine each wake-up waits for a CPU. So when this thread has
 * nothing of its own to do (nothing to send or to hear confirmed, no
 * watch armed), it stops reading the links (READER_NONE) and polls only
 * its eventfd; the next thread to sleep on a channel reads them itself
 * (READER_SLEEPER) instead of sleeping on its word, handles whatever comes
 * as this thread would, and wakes with its own message. It hands the
 * links back (READER_NONE, and a poke when somebody else must read on, or
 * this thread has work) when it leaves, and when this thread asks for them
 * (yield_asked: a channel to subscribe, a second's housekeeping, stopping).
 * The links are touched only by their reader: this thread reads, connects,
 * sends and resets them only as READER_THREAD. Watches made due run here
 * whoever reads, since that needs no link.
 */

/* Nothing to send, no confirmation awaited, nobody asleep or armed: the
 * links need no reader until the next sleeper. Under mu. */
static int may_park(struct dlock__subscriber *s)
{
    if (s->dirty || s->due || s->armed) return 0;
    for (int i = 0; i < s->n_links; i++)
        if (s->links[i].c && dlock__link_buffered(s->links[i].c) > 0) return 0;
#ifndef NDEBUG
    int walked = 0;
    for (int b = 0; b < BUCKETS; b++)
        for (dlock__sub_entry *e = s->buckets[b]; e; e = e->next) walked += unsettled(e);
    assert(walked == s->unsettled);
#endif
    return s->unsettled == 0;
}

/* Wait up to `timeout` ms (-1: no limit) for the links or `extra_fd` (an
 * eventfd, drained here), read what came and handle every reply. Called by
 * the links' reader with mu held, which it releases while it waits and
 * reads. */
static void read_links(struct dlock__subscriber *s, int extra_fd, int timeout)
{
    struct pollfd fds[MAX_LINKS + 1];
    int which[MAX_LINKS + 1], nfds = 1;
    fds[0] = (struct pollfd){extra_fd, POLLIN, 0};
    for (int i = 0; i < s->n_links; i++) {
        if (!s->links[i].c) continue;
        fds[nfds] = (struct pollfd){dlock__link_fd(s->links[i].c), POLLIN, 0};
        /* TLS may hold decrypted bytes poll() cannot see. */
        if (dlock__link_buffered(s->links[i].c) > 0) timeout = 0;
        which[nfds++] = i;
    }
    s->polling = 1;
    pthread_mutex_unlock(&s->mu);
    int n = poll(fds, (nfds_t)nfds, timeout);
    int broken[MAX_LINKS + 1] = {0};
    char buf[16384];
    for (int f = 1; f < nfds; f++) {
        dlock__link *c = s->links[which[f]].c;
        if (!((n > 0 && (fds[f].revents & (POLLIN | POLLHUP | POLLERR))) || dlock__link_buffered(c) > 0)) continue;
        ssize_t k = dlock__link_recv(c, buf, sizeof buf);
        broken[f] = k <= 0 || dlock__link_feed(c, buf, (size_t)k) != 0;
    }
    if (n > 0 && (fds[0].revents & POLLIN)) drain(extra_fd);
    pthread_mutex_lock(&s->mu);
    s->polling = 0;

    for (int f = 1; f < nfds; f++) {
        int L = which[f];
        sub_link *k = &s->links[L];
        redisReply *reply;
        while (!broken[f] && k->c) {
            if (dlock__link_reply(k->c, &reply) != 0) broken[f] = 1;
            if (!reply) break;
            on_reply(s, L, reply);
            freeReplyObject(reply);
        }
        if (k->c && broken[f]) {
            dlock__topo_node_failed(s->client->topo, k->node);
            link_reset(s, L);
            k->backoff = 20;
            k->retry_at = dlock__mono_ms() + k->backoff;
        }
    }
}

/* Poll only the eventfd, while nobody or a sleeper reads the links: this
 * thread runs the watches made due and wakes for its timers. Called with
 * mu held. */
static void idle_wait(struct dlock__subscriber *s, int timeout)
{
    struct pollfd fd = {s->wake_fd, POLLIN, 0};
    pthread_mutex_unlock(&s->mu);
    if (poll(&fd, 1, timeout) > 0) drain(s->wake_fd);
    pthread_mutex_lock(&s->mu);
}

static void *subscriber_main(void *arg)
{
    dlock__thread_name("dlock-sub");
    struct dlock__subscriber *s = arg;
    /* This thread writes SUBSCRIBE commands itself; a write to a server
     * that went away must fail with EPIPE, not kill the program. */
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, NULL);

    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        int64_t now = dlock__mono_ms();
        int timeout = poll_timeout(s, now);
        /* When a timer runs out, there may be housekeeping (idle channels
         * to drop, links to connect, the Sentinel check): dirty. */
        int64_t timer_at = timeout >= 0 ? now + timeout : INT64_MAX;
        if (s->reader == READER_SLEEPER) {
            if (s->dirty && !s->yield_asked) {
                s->yield_asked = 1;
                interrupt(s);
            }
            idle_wait(s, timeout);
            if (dlock__mono_ms() >= timer_at) s->dirty = 1;
            run_due(s);
            continue;
        }
        if (may_park(s)) {
            s->reader = READER_NONE;
            idle_wait(s, timeout);
            if (dlock__mono_ms() >= timer_at) s->dirty = 1;
            run_due(s);
            continue;
        }
        s->reader = READER_THREAD;
        check_master(s);
        if (s->dirty) {
            int want_connect = 0;
            queue_commands(s, now, &want_connect);
            if (want_connect) {
                connect_links(s, now);
                if (s->dirty) queue_commands(s, dlock__mono_ms(), &want_connect);
            }
            for (int i = 0; i < s->n_links; i++) {
                dlock__link *c = s->links[i].c;
                if (!c) continue;
                if (dlock__link_pending(c) > 0 && dlock__link_flush(c) != 0) {
                    dlock__topo_node_failed(s->client->topo, s->links[i].node);
                    link_reset(s, i);
                }
            }
        }
        if (may_park(s)) continue; /* the housekeeping sent nothing, and nobody waits */
        now = dlock__mono_ms();
        timeout = poll_timeout(s, now);
        timer_at = timeout >= 0 ? now + timeout : INT64_MAX;
        read_links(s, s->wake_fd, timeout);
        if (dlock__mono_ms() >= timer_at) s->dirty = 1;
        run_due(s);
    }
    /* The links are freed below: a sleeper reading them must be gone. */
    while (s->reader == READER_SLEEPER) {
        s->yield_asked = 1;
        interrupt(s);
        idle_wait(s, 10);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_links; i++)
        if (s->links[i].c) dlock__link_free(s->links[i].c);
    return NULL;
}

struct dlock__subscriber *dlock__subscriber_start(dlock_client *client)
{
    struct dlock__subscriber *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->client = client;
    int sharded = dlock__topo_is_cluster(client->topo);
    s->cmd_sub = sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
    s->cmd_unsub = sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE";
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->yield_fd = s->wake_fd < 0 ? -1 : eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->yield_fd < 0) {
        if (s->wake_fd >= 0) close(s->wake_fd);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    if (pthread_create(&s->thread, NULL, subscriber_main, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        close(s->wake_fd);
        close(s->yield_fd);
        free(s);
        return NULL;
    }
    return s;
}

void dlock__subscriber_stop(struct dlock__subscriber *s)
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
    close(s->yield_fd);
    free(s);
}

dlock__sub_entry *dlock__sub_join(struct dlock__subscriber *s, const char *channel)
{
    size_t len = strlen(channel);
    pthread_mutex_lock(&s->mu);
    dlock__sub_entry *e = find(s, channel, len);
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e || !(e->channel = strdup(channel))) {
            free(e);
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        e->len = len;
        e->link = -1;
        dlock__cond_init(&e->cond);
        unsigned b = bucket_of(channel, len);
        e->next = s->buckets[b];
        s->buckets[b] = e;
    }
    add_refs(s, e, 1);
    int need = e->state == SUB_IDLE;
    if (need) s->dirty = 1;
    pthread_mutex_unlock(&s->mu);
    if (need) poke(s);
    return e;
}

/* Into the entry's list of waiters, ordered by `since` (after its
 * equals). Called with mu held. */
static void enlist(dlock__sub_entry *e, dlock__sub_watch *w)
{
    dlock__sub_watch **pp = &e->waiting;
    while (*pp && (*pp)->since <= w->since) pp = &(*pp)->wnext;
    w->wnext = *pp;
    *pp = w;
}

/* Why one call: a newcomer on a busy lock asked first whether to defer
 * and then whether it could get in line, two lookups of its channel under
 * mu before its first attempt; one answers both. */
int dlock__sub_begin(struct dlock__subscriber *s, const char *channel, int64_t defer_before, dlock__sub_watch *me,
                     dlock__sub_entry **e)
{
    int how = DLOCK__SUB_TRY;
    *e = NULL;
    pthread_mutex_lock(&s->mu);
    dlock__sub_entry *f = find(s, channel, strlen(channel));
    if (f && defer_before >= 0 && f->waiting && f->waiting->since < defer_before) {
        how = DLOCK__SUB_DEFER;
    } else if (f && me && f->state == SUB_ACTIVE) {
        add_refs(s, f, 1);
        enlist(f, me);
        *e = f;
        how = DLOCK__SUB_IN_LINE;
    }
    pthread_mutex_unlock(&s->mu);
    return how;
}

int dlock__sub_wait_ready(struct dlock__subscriber *s, dlock__sub_entry *e, int64_t deadline_ms)
{
    int ok = 1;
    pthread_mutex_lock(&s->mu);
    while (e->state != SUB_ACTIVE && !s->stop) {
        if (dlock__cond_wait_until(&e->cond, &s->mu, deadline_ms) == ETIMEDOUT) {
            ok = e->state == SUB_ACTIVE;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* Into the armed list, ordered by `since` (stable: after its equals), so
 * wake-ups go to the waiter that began waiting first, even when it
 * retried in vain in between and re-arms behind younger ones. */
static void insert_armed(struct dlock__subscriber *s, dlock__sub_watch *w)
{
    dlock__sub_watch **pp = &s->armed;
    while (*pp && (*pp)->since <= w->since) pp = &(*pp)->next;
    w->next = *pp;
    *pp = w;
}

/* Take `w` out of the armed list; 0 when it was not there (it fired). */
static int remove_armed(struct dlock__subscriber *s, dlock__sub_watch *w)
{
    for (dlock__sub_watch **pp = &s->armed; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            return 1;
        }
    return 0;
}

void dlock__sub_arm(struct dlock__subscriber *s, dlock__sub_entry *e, dlock__sub_watch *w, int64_t at_ms,
                    int want_ready)
{
    pthread_mutex_lock(&s->mu);
    w->e = e;
    w->at = at_ms;
    w->want_ready = want_ready;
    if (s->firing_all) {
        make_due(s, w, DLOCK__SUB_TIMER);
    } else if (w->hand && w->hand->got && !w->hand->stale) {
        make_due(s, w, DLOCK__SUB_HANDED); /* came while its attempt was out */
    } else if (e->permits > 0) {
        e->permits--;
        make_due(s, w, DLOCK__SUB_MESSAGE);
    } else if (want_ready && e->state == SUB_ACTIVE) {
        make_due(s, w, DLOCK__SUB_READY);
    } else {
        insert_armed(s, w);
    }
    pthread_mutex_unlock(&s->mu);
    if (w->fn) poke(s); /* a new timer, or a watch due now */
}

/* The sleeper that read the links gives them back: to the next sleeper,
 * or, when somebody is asleep or armed already or this thread has work,
 * to this thread, poked. Called with mu held, after the sleeper's own
 * watch left the armed list (unless it sleeps on: then this thread reads
 * for it). */
static void step_aside(struct dlock__subscriber *s)
{
    s->reader = READER_NONE;
    s->reading = NULL;
    s->yield_asked = 0;
    if (!may_park(s) || s->stop) poke(s);
}

static int woken_as(const thread_watch *t)
{
    return t->w.woken == DLOCK__SUB_GRANTED ? 2 : t->w.woken == DLOCK__SUB_HANDED ? 3 : 1;
}

/* A sleeping thread is an armed watch of its own (no timer: it times its
 * own sleep), so it takes its turn among the watches by `since`. It reads
 * the links itself when nobody does (see "Reading without this thread"),
 * else sleeps on its word. */
int dlock__sub_wait(struct dlock__subscriber *s, dlock__sub_entry *e, int64_t deadline_ms, dlock__sub_watch *me,
                    void *offer)
{
    thread_watch t;
    memset(&t, 0, sizeof t);
    t.w.e = e;
    t.w.at = INT64_MAX;
    t.w.since = me->since;
    t.w.offer = offer;
    t.w.line = me;
    atomic_init(&t.state, 0);
    pthread_mutex_lock(&s->mu);
    if (me->hand && me->hand->got && !me->hand->stale) { /* handed over while it was awake */
        pthread_mutex_unlock(&s->mu);
        return 3;
    }
    if (e->permits > 0 || s->stop) {
        if (e->permits > 0) e->permits--;
        pthread_mutex_unlock(&s->mu);
        return 1;
    }
    insert_armed(s, &t.w);
    int timed_out = 0; /* told by the sleep: one whose deadline has passed returns at once */
    int result;
    for (;;) {
        /* Under mu: fired, or given up (a claimed sleeper waits for the
         * settlement whatever its deadline: its watch is the releaser's to
         * fire or give back). */
        unsigned seen = atomic_load_explicit(&t.state, memory_order_acquire);
        if (seen & FIRED) {
            result = woken_as(&t);
            break;
        }
        if (me->hand && me->hand->got && !me->hand->stale && !t.w.claimed) { /* came while it was claimed */
            remove_armed(s, &t.w);
            result = 3;
            break;
        }
        if (!t.w.claimed && (s->stop || timed_out)) {
            result = s->stop;
            remove_armed(s, &t.w);
            break;
        }
        int64_t until = t.w.claimed ? -1 : deadline_ms;
        if (s->reader == READER_NONE) {
            s->reader = READER_SLEEPER;
            s->reading = &t;
        }
        if (s->reading == &t) {
            if (s->yield_asked || s->dirty) {
                step_aside(s); /* and sleep on its word, below; this thread reads for it */
            } else {
                int64_t now = dlock__mono_ms();
                int timeout = until < 0 ? -1 : until > now ? (int)(until - now) : 0;
                read_links(s, s->yield_fd, timeout);
                if (s->due) poke(s); /* asynchronous watches fired: they run on this thread */
                timed_out = until >= 0 && dlock__mono_ms() >= until;
                continue;
            }
        }
        pthread_mutex_unlock(&s->mu);
        timed_out = dlock__futex_wait(&t.state, seen, until) == ETIMEDOUT;
        if (atomic_load_explicit(&t.state, memory_order_acquire) & FIRED) return woken_as(&t); /* without mu */
        pthread_mutex_lock(&s->mu);
    }
    if (s->reading == &t) step_aside(s);
    pthread_mutex_unlock(&s->mu);
    return result;
}

/* Why claim the sleeper a message would wake: the releaser's script can
 * then take the lock for it (release.lua), and the waiter wakes holding it
 * instead of sending an attempt of its own; its turn is the one a wake-up
 * would have given it. */
void *dlock__sub_claim(struct dlock__subscriber *s, const char *channel, dlock__sub_watch **claimed)
{
    void *offer = NULL;
    *claimed = NULL;
    pthread_mutex_lock(&s->mu);
    dlock__sub_entry *e = find(s, channel, strlen(channel));
    for (dlock__sub_watch *w = e ? s->armed : NULL; w; w = w->next) {
        if (w->e != e) continue;
        if (w->offer && !w->claimed && !s->firing_all) {
            w->claimed = 1;
            *claimed = w;
            offer = w->offer;
        }
        break; /* the next in line, whatever it is */
    }
    pthread_mutex_unlock(&s->mu);
    return offer;
}

void dlock__sub_settle(struct dlock__subscriber *s, dlock__sub_watch *w, int granted)
{
    pthread_mutex_lock(&s->mu);
    w->claimed = 0;
    int async = w->fn != NULL; /* fired on this thread: poke it */
    if (granted && remove_armed(s, w)) {
        make_due(s, w, DLOCK__SUB_GRANTED);
    } else if (async && w->hand && w->hand->got && !w->hand->stale && remove_armed(s, w)) {
        make_due(s, w, DLOCK__SUB_HANDED); /* came while it was claimed (a thread looks itself) */
    } else if (w->e->permits > 0 && remove_armed(s, w)) {
        /* A wake-up it was skipped for while claimed. */
        w->e->permits--;
        make_due(s, w, DLOCK__SUB_MESSAGE);
    } else if (s->firing_all && remove_armed(s, w)) {
        make_due(s, w, DLOCK__SUB_TIMER); /* the drain passed it by */
    } else if (!async) {
        nudge(s, (thread_watch *)w); /* its deadline may have passed meanwhile */
    }
    pthread_mutex_unlock(&s->mu);
    if (async) poke(s); /* due now, or its timer may have passed meanwhile */
}

void dlock__sub_enlist(struct dlock__subscriber *s, dlock__sub_entry *e, dlock__sub_watch *w)
{
    pthread_mutex_lock(&s->mu);
    enlist(e, w);
    pthread_mutex_unlock(&s->mu);
}

void dlock__sub_delist(struct dlock__subscriber *s, dlock__sub_entry *e, dlock__sub_watch *w)
{
    pthread_mutex_lock(&s->mu);
    for (dlock__sub_watch **pp = &e->waiting; *pp; pp = &(*pp)->wnext)
        if (*pp == w) {
            *pp = w->wnext;
            break;
        }
    pthread_mutex_unlock(&s->mu);
}

int dlock__sub_waiting(struct dlock__subscriber *s, const char *channel)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    dlock__sub_entry *e = find(s, channel, strlen(channel));
    for (dlock__sub_watch *w = e ? e->waiting : NULL; w; w = w->wnext) n++;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Why: a release by this client that picked this client's waiters
 * (release.lua) wakes one here instead of publishing, which saves the
 * server a PUBLISH and the hand-off a trip through this thread. A watch
 * of an asynchronous waiter fires on this thread, hence the poke. */
void dlock__sub_wake(struct dlock__subscriber *s, const char *channel)
{
    pthread_mutex_lock(&s->mu);
    dlock__sub_entry *e = find(s, channel, strlen(channel));
    int due = 0;
    if (e && e->refs > 0) {
        grant(s, e, 1);
        due = s->due != NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (due) poke(s);
}

int dlock__sub_ready(struct dlock__subscriber *s, dlock__sub_entry *e)
{
    pthread_mutex_lock(&s->mu);
    int ok = e->state == SUB_ACTIVE;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void dlock__sub_fire_all(struct dlock__subscriber *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->firing_all = 1;
    dlock__sub_watch **pp = &s->armed;
    while (*pp) {
        dlock__sub_watch *w = *pp;
        if (w->claimed) { /* its releaser settles it, and fires it then (firing_all) */
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        make_due(s, w, DLOCK__SUB_TIMER);
    }
    pthread_mutex_unlock(&s->mu);
    poke(s);
}

void dlock__sub_leave(struct dlock__subscriber *s, dlock__sub_entry *e)
{
    pthread_mutex_lock(&s->mu);
    add_refs(s, e, -1);
    if (e->refs == 0) {
        e->permits = 0;
        e->idle_since = dlock__mono_ms();
        /* A subscribed channel is left for the thread to drop when it has
         * been idle a second: it looks within that second anyway
         * (poll_timeout), so the end of a wait need not wake it, which on
         * a busy lock would be a wake-up of that thread per wait. */
        if (e->state == SUB_IDLE) unlink_free(s, e);
    }
    pthread_mutex_unlock(&s->mu);
}
