/* One connection per server, shared by every thread of a client, with the
 * commands of all of them pipelined on it (see mux.c). */
#ifndef DLOCK_MUX_H
#define DLOCK_MUX_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdint.h>

#include "dlock.h"
#include "link.h"

typedef struct mux_req mux_req;

/* How an asynchronous request ends (dlock_mux_submit): its reply (the
 * callee owns it), or NULL with how and why it failed. Runs on the mux's
 * reader thread, without the mutex held. */
typedef void dlock_mux_done(void *arg, redisReply *reply, const dlock_io_fail *fail, const char *why);

typedef struct dlock_mux {
    pthread_mutex_t mu;
    pthread_cond_t gone;     /* a broken connection was closed */
    dlock_link *c;           /* NULL while not connected */
    int broken;              /* c failed; closed when the I/O on it returns */
    mux_req *head, *tail;    /* in flight, oldest first: replies come in this order */
    uint64_t appended;       /* requests appended to c's output so far (their seq) */
    uint64_t flushed;        /* requests whose bytes have all been sent */
    uint64_t sending;        /* while flushing: requests whose bytes are leaving */
    int flushing, reading;   /* a thread is sending / reading for everyone */
    /* Asynchronous requests: a reader thread, started by the first one,
     * reads when no caller does and hands finished requests back. */
    pthread_cond_t wake;     /* the reader thread: something to read or hand back */
    mux_req *done_head, *done_tail; /* finished asynchronous requests, to hand back */
    int reader_started, reader_stop;
    int sync_waiting;        /* synchronous requests in flight (they can read) */
    pthread_t reader;
} dlock_mux;

void dlock_mux_init(dlock_mux *m);
void dlock_mux_destroy(dlock_mux *m);

/*
 * Send n commands, one after the other on the shared connection (nothing
 * of other threads in between, so ASKING stays next to its command), and
 * wait for their n replies. On failure every request in flight fails: the
 * connection is closed and the next request opens a new one. *fresh tells
 * whether this call opened the connection it failed on; *why as for
 * dlock_pool_pipeline().
 */
dlock_status dlock_mux_pipeline(dlock_mux *m, const dlock_endpoint *ep, int n, const int *argcs,
                                const char *const *const *argvs, const size_t *const *lens, redisReply **replies,
                                int *fresh, dlock_io_fail *why);

/*
 * Append one command to the shared connection and return without waiting:
 * `done` gets its reply, or its failure, later on the mux's reader thread
 * (started here on first use), never inside this call. DLOCK_OK means
 * `done` will run exactly once; any other status (no connection could be
 * made, out of memory) means the command was not appended and `done` will
 * not run.
 */
dlock_status dlock_mux_submit(dlock_mux *m, const dlock_endpoint *ep, int argc, const char *const *argv,
                              const size_t *lens, dlock_mux_done *done, void *arg);

/* Close the connection if nothing is in flight on it (else the next
 * failure or the server closes it): its server is no longer the one we
 * want, or is suspect. */
void dlock_mux_close_idle(dlock_mux *m);

/* Fail every request in flight with `why` and close the connection. */
void dlock_mux_abort(dlock_mux *m, const char *why);

#endif
