/*
 * One connection per server, shared by all the threads of a client, with
 * their commands pipelined on it.
 *
 * Why: with a blocking connection per thread, every reply wakes a sleeping
 * thread, and on a small machine that thread preempts the Redis server it
 * shares a core with: two context switches per request on the server, and
 * half its CPU spent on them (docs/BENCHMARKS.md measures it). When the
 * threads share one connection, a write carries whatever commands are
 * waiting and a read brings back whatever replies are ready, so the server
 * sees fewer, fuller reads and writes and the clients fewer wake-ups.
 *
 * How, without a thread of its own: a caller appends its commands to the
 * connection's output buffer under the mutex, and joins the queue of
 * requests in flight, whose replies arrive in the same order. Whoever finds
 * nobody sending sends everything buffered so far (one send, MSG_NOSIGNAL:
 * see link.c); whoever finds nobody reading reads, hands each reply to the
 * request at the head of the queue, wakes its thread, and when its own
 * replies are in passes the reading on to the oldest request still
 * waiting. So a thread sleeps only while another does its I/O for it.
 * The reader thread, and a caller that waits alone, poll the socket for a
 * moment before they sleep in read() (spin_for_reply() says why).
 *
 * A connection that fails (the server closed it, a read timed out, a reply
 * could not be parsed) is lost for everyone on it: replies cannot be matched
 * to requests any more. Every request in flight fails with the reason, each
 * knowing whether its bytes had left (then it may have run), the connection
 * is closed, and the next request makes a new one. Whether to send again is
 * the caller's decision, as with a pooled connection (conn.c).
 *
 * Asynchronous requests (dlock__mux_submit) have no thread waiting for
 * them. The first one starts a reader thread for the mux, which reads
 * whenever requests are in flight and nobody else is reading (the role is
 * the same `reading` flag, so a synchronous caller and the reader thread
 * take turns), and runs each finished asynchronous request's completion
 * with the mutex released. A synchronous caller that reads such a reply
 * only queues it for the reader thread: completions never run on an
 * application thread, nor inside the call that submitted them.
 *
 * Requests that completions submit are held back (appended, not sent)
 * until the completions handed back together have all run, or until half
 * the requests in flight on the connection wait so: then one write
 * carries them, where each used to cost a send() of its own. Why the
 * half: with everything in one write, the server would run the batch
 * while the client sat idle, and the client would then handle the whole
 * batch of replies while the server did; two writes on their way keep
 * both busy. A thread's synchronous request first sends what its
 * completions held back, so nothing it submitted is overtaken.
 * Measured (measured; CHANGELOG.md): about a quarter less client
 * CPU per pair with 8 or 64 asynchronous acquisitions in flight.
 *
 * What must not go through here: commands that block the connection on the
 * server (WAIT, BLPOP, XREADGROUP ... BLOCK), which would hold up every
 * other thread. The library sends WAIT on a pooled connection of its own.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/sds.h>

#include "mux.h"
#include "stats.h" /* dlock__stats_clock */
#include "util.h"

/* Why a synchronous caller wakes (mux_req.state): its request is finished
 * and nothing touches it any more, or it is asked to read for everyone. */
#define REQ_DONE 1u
#define REQ_TURN 2u
#define REQ_SLEEP 4u /* ... which it sleeps on: a wake-up is owed */

/* Set `bit` in a synchronous request's word, and wake its thread if it
 * sleeps there. Why the REQ_SLEEP bit: a futex wake is a system call even
 * when nobody sleeps, and the reader's own request, or one whose thread
 * has not gone to sleep yet, needs none. Nothing reads `r` after the
 * store (its thread may be gone with it); the wake-up touches no memory. */
static void req_wake(mux_req *r, unsigned bit);

struct mux_req {
    int n, got; /* replies expected, and in */
    redisReply **replies;
    uint64_t seq;        /* its place among the appended requests */
    size_t end;          /* where its bytes end in the output buffer */
    int done;            /* all replies in, or failed */
    dlock__io_fail fail; /* how it failed */
    char why[200];       /* and the message, for its own thread */
    atomic_uint state;   /* synchronous requests: its thread sleeps on this word
                              * (the REQ_ bits) */
    dlock__mux_done *cb; /* asynchronous requests: called when finished */
    void *arg;
    redisReply *one; /* ... whose one reply lands here */
    struct mux_req *next;
};

void dlock__mux_init(dlock__mux *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    dlock__cond_init(&m->gone);
    dlock__cond_init(&m->wake);
}

/* The client waits for its asynchronous calls before it frees its pools,
 * so the reader thread has nothing left in flight when it is told to stop. */
void dlock__mux_destroy(dlock__mux *m)
{
    if (m->reader_started) {
        pthread_mutex_lock(&m->mu);
        m->reader_stop = 1;
        pthread_cond_signal(&m->wake);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->reader, NULL);
    }
    if (m->c) dlock__link_free(m->c);
    pthread_cond_destroy(&m->wake);
    pthread_cond_destroy(&m->gone);
    pthread_mutex_destroy(&m->mu);
}

/* Close a broken connection once no thread is in send() or read() on it.
 * Until then its descriptor stays open (shut down), so a number the kernel
 * could hand out again is never used by a late send or read. */
static void close_if_quiet(dlock__mux *m)
{
    if (m->broken && !m->flushing && !m->reading) {
        dlock__link_free(m->c);
        m->c = NULL;
        m->broken = 0;
        pthread_cond_broadcast(&m->gone);
    }
}

/* A request is finished (its replies are in, or it failed): wake its
 * thread, or queue it for the reader thread to hand back. Called with mu
 * held, after the request left the in-flight queue. */
static void finished(dlock__mux *m, mux_req *r)
{
    r->next = NULL;
    if (!r->cb) {
        req_wake(r, REQ_DONE);
        return;
    }
    if (m->done_tail) m->done_tail->next = r;
    else m->done_head = r;
    m->done_tail = r;
    pthread_cond_signal(&m->wake);
}

static void req_wake(mux_req *r, unsigned bit)
{
    atomic_uint *word = &r->state;
    if (atomic_fetch_or(word, bit) & REQ_SLEEP) dlock__futex_wake(word);
}

/* Let go synchronous requests that read_some() finished (taken off the
 * queue, replies in): after the store, a request's thread may return and
 * its stack be reused, so nothing here reads `r` after it (the wake-up
 * touches no memory). Called with or without mu. */
static void wake_all(mux_req *r)
{
    for (mux_req *next; r; r = next) {
        next = r->next;
        req_wake(r, REQ_DONE);
    }
}

/* Wake the oldest synchronous waiter, if any, to read for everyone. */
static void wake_sync_reader(dlock__mux *m)
{
    if (m->sync_waiting == 0) return;
    for (mux_req *r = m->head; r; r = r->next)
        if (!r->cb) {
            req_wake(r, REQ_TURN);
            return;
        }
}

/* Someone must read for the requests in flight now that the last reader
 * is done: the reader thread, and the oldest synchronous waiter too,
 * since the reader thread may be running completions (one of which may
 * wait for a lock that a synchronous caller here holds, or make a
 * synchronous call here itself); whoever comes first reads. Called with
 * mu held. */
static void pass_reading(dlock__mux *m)
{
    if (m->reading || !m->head) return;
    pthread_cond_signal(&m->wake);
    wake_sync_reader(m);
}

/* The connection is useless: fail every request in flight with `msg`, and
 * close it, now or when the I/O on it returns. Called with mu held, by the
 * thread that found out. */
static void fail_all(dlock__mux *m, const char *msg, int timed_out)
{
    /* Bytes on their way out may have arrived: counted as sent, so that
     * nothing that must not run twice is sent again. */
    uint64_t out = m->flushing ? m->sending : m->flushed;
    for (mux_req *r = m->head, *next; r; r = next) {
        next = r->next;
        for (int i = 0; i < r->got; i++) freeReplyObject(r->replies[i]);
        r->got = 0;
        r->done = -1;
        r->fail.timed_out = timed_out;
        r->fail.sent = r->seq <= out;
        snprintf(r->why, sizeof r->why, "%s", msg);
        finished(m, r);
    }
    m->head = m->tail = NULL;
    m->queued = 0;
    if (m->c && !m->broken) {
        m->broken = 1;
        dlock__link_shutdown(m->c); /* wakes a reader blocked on it */
    }
    close_if_quiet(m);
}

/* Send everything appended so far, unless someone else is at it. Called
 * and returns with mu held; drops it around the send. */
static void flush(dlock__mux *m)
{
    while (!m->flushing && m->c && !m->broken && dlock__link_pending(m->c) > 0) {
        m->flushing = 1;
        m->sending = m->appended;
        dlock__link *link = m->c; /* not freed while flushing is set */
        sds out = dlock__link_take(m->c);
        size_t off = 0;
        int err = ENOMEM;
        if (out) {
            pthread_mutex_unlock(&m->mu);
            err = dlock__link_send(link, out, sdslen(out), &off) == 0 ? 0 : errno;
            pthread_mutex_lock(&m->mu);
            dlock__link_give_back(link, out);
        }
        m->flushing = 0;
        if (m->broken) {
            close_if_quiet(m); /* failed meanwhile, by a reader */
            return;
        }
        if (err) {
            char msg[160];
            /* The requests wholly within the first `off` bytes left; a
             * command cut short cannot run, and neither can what follows. */
            for (mux_req *r = m->head; r && r->seq <= m->sending; r = r->next)
                if (r->seq > m->flushed && r->end <= off) m->flushed = r->seq;
            snprintf(msg, sizeof msg, "send: %s", dlock__link_strerror(link, err));
            fail_all(m, msg, err == EAGAIN || err == EWOULDBLOCK);
            return;
        }
        m->flushed = m->sending;
    }
}

/* How many reads at most a reader skips polling after polls in vain, and
 * how long a sched_yield() may take before it counts as having run
 * another thread. */
#define SPIN_SKIP_MAX 64
#define SPIN_BUSY_NS 10000

/*
 * Poll the socket, yielding the CPU in between, for up to spin_us
 * (dlock_options.busy_poll_us, 100 by default) before the read sleeps.
 * Why: on the VMs we measure, a thread that sleeps for a reply due in tens
 * of microseconds is woken by the hypervisor only after its idle vCPU was
 * halted and brought back, which cost more than the round trip itself:
 * one asynchronous acquisition in flight made 1.5k pairs/s, 12k with the
 * poll (measured; CHANGELOG.md). sched_yield() lets anything
 * runnable on this CPU (the server, say) go first. When polls keep coming
 * back empty (a slow server, or a machine too busy to answer within the
 * poll: many processes each polling would take the server's CPU), the
 * next reads skip it, twice as many after each poll in vain, up to
 * SPIN_SKIP_MAX.
 *
 * `give_way`: the reader is one of several synchronous callers. The ones
 * it woke with its last read run on these CPUs, and processes of many
 * such threads beside each other would poll one another's CPU away (four
 * processes of 8 threads lost a tenth). So a yield that comes back late,
 * another thread having run meanwhile, ends the poll for this read: the
 * CPU is not idle and will not halt. The reader thread and a lone caller
 * poll on regardless: there the thread that runs during the yield is
 * mostly the server, answering (measured both ways). A program
 * whose own threads keep the CPUs busy turns the poll off: it takes their
 * CPU and wakes the reader for smaller batches of replies (seckill's open
 * sale ran about a tenth faster without it). Called with mu
 * released, as the reader.
 */
static void spin_for_reply(dlock__mux *m, dlock__link *link, int give_way)
{
    if (m->spin_skip_left > 0) {
        m->spin_skip_left--;
        return;
    }
    if (m->spin_us <= 0 || dlock__link_buffered(link)) return; /* off; TLS: read() has bytes already */
    struct pollfd pfd = {dlock__link_fd(link), POLLIN, 0};
    int64_t now = dlock__stats_clock(), until = now + (int64_t)m->spin_us * 1000;
    do {
        if (poll(&pfd, 1, 0) != 0) { /* a reply, a hang-up, or an error for read() to report */
            m->spin_skip = 0;
            return;
        }
        int64_t before = now;
        sched_yield();
        now = dlock__stats_clock();
        if (give_way && now - before > SPIN_BUSY_NS) return; /* others had this CPU: not idle */
    } while (now < until);
    m->spin_skip = m->spin_skip ? (m->spin_skip * 2 > SPIN_SKIP_MAX ? SPIN_SKIP_MAX : m->spin_skip * 2) : 1;
    m->spin_skip_left = m->spin_skip;
}

/* Read once for everyone and hand out the replies; `self` is the reading
 * caller's own request (NULL on the reader thread). Called and returns
 * with mu held; drops it around the read. */
static void read_some(dlock__mux *m, mux_req *self)
{
    m->reading = 1;
    dlock__link *link = m->c; /* not freed while reading is set */
    int give_way = self && m->sync_waiting > 1;
    pthread_mutex_unlock(&m->mu);
    char buf[16384];
    spin_for_reply(m, link, give_way);
    ssize_t n = dlock__link_recv(link, buf, sizeof buf);
    int err = n < 0 ? errno : 0;
    pthread_mutex_lock(&m->mu);
    m->reading = 0;
    if (m->broken) {
        close_if_quiet(m); /* failed meanwhile, by a sender */
        return;
    }
    if (n <= 0) {
        char msg[160];
        int timed_out = err == EAGAIN || err == EWOULDBLOCK;
        if (n == 0) snprintf(msg, sizeof msg, "server closed the connection");
        else if (timed_out) snprintf(msg, sizeof msg, "command timed out");
        else snprintf(msg, sizeof msg, "read: %s", dlock__link_strerror(link, err));
        fail_all(m, msg, timed_out);
        return;
    }
    if (dlock__link_feed(m->c, buf, (size_t)n) != 0) {
        fail_all(m, "protocol error", 0);
        return;
    }
    redisReply *reply;
    mux_req *woken = NULL; /* finished synchronous requests, woken below */
    for (;;) {
        if (dlock__link_reply(m->c, &reply) != 0) {
            char why[96];
            wake_all(woken);
            fail_all(m, dlock__link_protocol_error(buf, (size_t)n, why, sizeof why), 0);
            return;
        }
        if (!reply) break;
        mux_req *r = m->head;
        if (!r) { /* a reply nobody asked for: the stream is out of step */
            freeReplyObject(reply);
            wake_all(woken);
            fail_all(m, "unexpected reply", 0);
            return;
        }
        r->replies[r->got++] = reply;
        if (r->got == r->n) {
            r->done = 1;
            m->head = r->next;
            m->queued--;
            if (!m->head) m->tail = NULL;
            if (r->cb) {
                finished(m, r);
            } else {
                r->next = woken;
                woken = r;
            }
        }
    }
    /* Woken with mu released: a thread woken while the reader still held
     * it would only sleep again on the mutex (measured on one
     * VM). The reader's own request alone (a
     * lone caller's every request) needs neither. */
    if (woken == self && self && !self->next) {
        req_wake(self, REQ_DONE);
    } else if (woken) {
        pthread_mutex_unlock(&m->mu);
        wake_all(woken);
        pthread_mutex_lock(&m->mu);
    }
}

/* A connection to append to: wait until a broken one is closed, and
 * connect when there is none. Connecting happens under the mutex: whoever
 * else comes meanwhile needs this very connection, and would only wait
 * for it anyway. Called and returns with mu held; *fresh (may be NULL)
 * tells whether this call made the connection. */
static dlock_status connected(dlock__mux *m, const dlock__endpoint *ep, int *fresh)
{
    while (m->broken) pthread_cond_wait(&m->gone, &m->mu);
    if (m->c) return DLOCK_OK;
    dlock__link *c;
    dlock_status st = dlock__link_open(ep, &c);
    if (st != DLOCK_OK) return st;
    m->c = c;
    if (fresh) *fresh = 1;
    return DLOCK_OK;
}

/* Queue a request whose commands were just appended (replies come in this
 * order) and send what is waiting. Called and returns with mu held. */
static void enqueue(dlock__mux *m, mux_req *r)
{
    r->seq = ++m->appended;
    r->end = dlock__link_pending(m->c);
    if (m->tail) m->tail->next = r;
    else m->head = r;
    m->tail = r;
    m->queued++;
}

static __thread int handing_back;   /* this thread runs completions (hand_back) */
static __thread dlock__mux *corked; /* where its completions' requests wait to be sent */
static __thread int corked_n;       /* how many wait there */

/* Send what this thread's completions appended and held back (see the
 * top). Called with no mutex held. */
void dlock__mux_uncork(void)
{
    dlock__mux *m = corked;
    if (!m) return;
    corked = NULL;
    corked_n = 0;
    pthread_mutex_lock(&m->mu);
    flush(m);
    pthread_mutex_unlock(&m->mu);
}

dlock_status dlock__mux_pipeline(dlock__mux *m, const dlock__endpoint *ep, int n, const int *argcs,
                                 const char *const *const *argvs, const size_t *const *lens, redisReply **replies,
                                 int *fresh, dlock__io_fail *why)
{
    dlock__mux_uncork(); /* a completion's earlier requests go first */
    mux_req me;
    memset(&me, 0, sizeof me);
    me.n = n;
    me.replies = replies;
    *fresh = 0;
    *why = (dlock__io_fail){0, 0};
    pthread_mutex_lock(&m->mu);
    dlock_status st = connected(m, ep, fresh);
    if (st != DLOCK_OK) {
        pthread_mutex_unlock(&m->mu);
        return st;
    }
    for (int i = 0; i < n; i++) {
        if (dlock__link_append(m->c, argcs[i], argvs[i], lens ? lens[i] : NULL) != 0) {
            /* Out of memory half way: the buffer now holds a partial
             * pipeline, which nobody may send. */
            fail_all(m, "out of memory", 0);
            pthread_mutex_unlock(&m->mu);
            return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
        }
    }
    m->sync_waiting++;
    enqueue(m, &me);
    flush(m);
    /* Until REQ_DONE, not me.done: read_some() sets that under mu but lets
     * the request go after dropping mu, and may still be on its way to the
     * store. Slept on with no deadline: the link's timeout bounds the read. */
    for (;;) {
        unsigned seen = atomic_fetch_and(&me.state, ~(REQ_TURN | REQ_SLEEP)) & ~(REQ_TURN | REQ_SLEEP);
        if (seen & REQ_DONE) break;
        if (!me.done && !m->reading && m->c && !m->broken) {
            read_some(m, &me);
            continue;
        }
        pthread_mutex_unlock(&m->mu);
        seen = atomic_fetch_or(&me.state, REQ_SLEEP) | REQ_SLEEP;
        if (!(seen & (REQ_DONE | REQ_TURN))) dlock__futex_wait(&me.state, seen, -1);
        pthread_mutex_lock(&m->mu);
    }
    m->sync_waiting--;
    /* Pass the reading on: the oldest waiter may be asleep. */
    pass_reading(m);
    pthread_mutex_unlock(&m->mu);
    if (me.done < 0) {
        *why = me.fail;
        return dlock__fail(DLOCK_ERR_CONNECT, "%s on %s: %s", argvs[0][0], ep->name, me.why);
    }
    return DLOCK_OK;
}

/* Hand the finished asynchronous requests back, with mu released: a
 * completion may submit again, or make a synchronous call. */
static void hand_back(dlock__mux *m)
{
    mux_req *r = m->done_head;
    m->done_head = m->done_tail = NULL;
    /* Nobody reads while the completions run: a synchronous waiter must,
     * or one that a completion waits for (a lock its thread holds across
     * the call) would never get its reply. */
    if (!m->reading && m->head) wake_sync_reader(m);
    pthread_mutex_unlock(&m->mu);
    handing_back = 1;
    for (mux_req *next; r; r = next) {
        next = r->next;
        dlock__io_fail fail = r->fail;
        r->cb(r->arg, r->done > 0 ? r->one : NULL, &fail, r->why);
        free(r);
    }
    handing_back = 0;
    dlock__mux_uncork();
    pthread_mutex_lock(&m->mu);
}

/* Why a thread: an asynchronous request has nobody waiting for it, so
 * when no synchronous caller happens to be reading, somebody else must.
 * It sleeps while nothing is in flight or another thread reads. */
static void *reader_main(void *arg)
{
    dlock__thread_name("dlock-io");
    dlock__mux *m = arg;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        if (m->done_head) hand_back(m);
        else if (m->head && !m->reading && m->c && !m->broken) read_some(m, NULL);
        else if (m->reader_stop) break;
        else pthread_cond_wait(&m->wake, &m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

dlock_status dlock__mux_submit(dlock__mux *m, const dlock__endpoint *ep, int argc, const char *const *argv,
                               const size_t *lens, dlock__mux_done *done, void *arg)
{
    mux_req *r = calloc(1, sizeof *r);
    if (!r) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    r->n = 1;
    r->replies = &r->one;
    r->cb = done;
    r->arg = arg;
    if (handing_back && corked && corked != m) dlock__mux_uncork(); /* one mux at a time */
    pthread_mutex_lock(&m->mu);
    if (!m->reader_started) {
        if (pthread_create(&m->reader, NULL, reader_main, m) != 0) {
            pthread_mutex_unlock(&m->mu);
            free(r);
            return dlock__fail(DLOCK_ERR_SYS, "cannot start the reader thread");
        }
        m->reader_started = 1;
    }
    dlock_status st = connected(m, ep, NULL);
    if (st != DLOCK_OK) {
        pthread_mutex_unlock(&m->mu);
        free(r);
        return st;
    }
    if (dlock__link_append(m->c, argc, argv, lens) != 0) {
        fail_all(m, "out of memory", 0);
        pthread_mutex_unlock(&m->mu);
        free(r);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    enqueue(m, r);
    if (handing_back) {
        /* Held back for the end of the completions, or until half the
         * requests in flight wait here: then at least two writes are on
         * their way, and the server reads one while the client handles
         * the other's replies. */
        corked = m;
        if (++corked_n >= (m->queued / 2 > 1 ? m->queued / 2 : 1)) {
            corked = NULL;
            corked_n = 0;
            flush(m);
        }
    } else {
        flush(m);
    }
    /* A failed send finished it already (queued for the reader thread);
     * otherwise make sure someone reads for it. */
    if (!m->reading) pthread_cond_signal(&m->wake);
    pthread_mutex_unlock(&m->mu);
    return DLOCK_OK;
}

void dlock__mux_abort(dlock__mux *m, const char *why)
{
    pthread_mutex_lock(&m->mu);
    if (m->c && !m->broken) fail_all(m, why, 0);
    pthread_mutex_unlock(&m->mu);
}

void dlock__mux_close_idle(dlock__mux *m)
{
    pthread_mutex_lock(&m->mu);
    if (m->c && !m->broken && !m->head && !m->flushing && !m->reading) {
        dlock__link_free(m->c);
        m->c = NULL;
    }
    pthread_mutex_unlock(&m->mu);
}
