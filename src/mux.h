/* One connection per server, shared by every thread of a client, with the
 * commands of all of them pipelined on it (see mux.c). */
#ifndef DLOCK__MUX_H
#define DLOCK__MUX_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdint.h>

#include "dlock.h"
#include "link.h"

typedef struct mux_req mux_req;

/* How an asynchronous request ends (dlock__mux_submit): its reply (the
 * callee owns it), or NULL with how and why it failed. Runs on the mux's
 * reader thread, without the mutex held. */
typedef void dlock__mux_done(void *arg, redisReply *reply, const dlock__io_fail *fail, const char *why);

typedef struct dlock__mux {
    pthread_mutex_t mu;
    pthread_cond_t gone;   /* a broken connection was closed */
    dlock__link *c;        /* NULL while not connected */
    int broken;            /* c failed; closed when the I/O on it returns */
    mux_req *head, *tail;  /* in flight, oldest first: replies come in this order */
    uint64_t appended;     /* requests appended to c's output so far (their seq) */
    uint64_t flushed;      /* requests whose bytes have all been sent */
    uint64_t sending;      /* while flushing: requests whose bytes are leaving */
    int flushing, reading; /* a thread is sending / reading for everyone */
    /* Asynchronous requests: a reader thread, started by the first one,
     * reads when no caller does and hands finished requests back. */
    pthread_cond_t wake;            /* the reader thread: something to read or hand back */
    mux_req *done_head, *done_tail; /* finished asynchronous requests, to hand back */
    int reader_started, reader_stop;
    int sync_waiting;              /* synchronous requests in flight (they can read) */
    int spin_us;                   /* how long the reader polls before read() (mux.c); 0: never */
    int spin_skip, spin_skip_left; /* reads to skip polling before, after polls in vain */
    int queued;                    /* requests in flight (head..tail) */
    pthread_t reader;
} dlock__mux;

void dlock__mux_init(dlock__mux *m);
void dlock__mux_destroy(dlock__mux *m);

/*
 * Send n commands, one after the other on the shared connection (nothing
 * of other threads in between, so ASKING stays next to its command), and
 * wait for their n replies. On failure every request in flight fails: the
 * connection is closed and the next request opens a new one. *fresh tells
 * whether this call opened the connection it failed on; *why as for
 * dlock__pool_pipeline().
 */
dlock_status dlock__mux_pipeline(dlock__mux *m, const dlock__endpoint *ep, int n, const int *argcs,
                                 const char *const *const *argvs, const size_t *const *lens, redisReply **replies,
                                 int *fresh, dlock__io_fail *why);

/*
 * Append one command to the shared connection and return without waiting:
 * `done` gets its reply, or its failure, later on the mux's reader thread
 * (started here on first use), never inside this call. DLOCK_OK means
 * `done` will run exactly once; any other status (no connection could be
 * made, out of memory) means the command was not appended and `done` will
 * not run.
 */
dlock_status dlock__mux_submit(dlock__mux *m, const dlock__endpoint *ep, int argc, const char *const *argv,
                               const size_t *lens, dlock__mux_done *done, void *arg);

/* Send the requests this thread's completions submitted and held back
 * (mux.c says when they are): for a completion that is about to wait for
 * calls in flight (dlock_client_free()), which would otherwise wait for
 * its own. */
void dlock__mux_uncork(void);

/* Close the connection if nothing is in flight on it (else the next
 * failure or the server closes it): its server is no longer the one we
 * want, or is suspect. */
void dlock__mux_close_idle(dlock__mux *m);

/* Fail every request in flight with `why` and close the connection. */
void dlock__mux_abort(dlock__mux *m, const char *why);

#endif
