/* Asynchronous script calls (dlock_script_eval_async): the fast path on
 * the shared connection, and the slow lane for everything unusual (see
 * async.c). */
#ifndef DLOCK__ASYNC_H
#define DLOCK__ASYNC_H

#include <pthread.h>

#include "dlock_redis.h"
#include "script.h"

#define DLOCK__SLOW_LANE_MAX 8 /* slow-lane threads, started as needed */

struct dlock_client;
typedef struct async_call async_call;

typedef struct dlock__async {
    pthread_mutex_t mu;
    pthread_cond_t work;     /* a call for the slow lane, or stop */
    pthread_cond_t drained;  /* inflight reached 0 */
    async_call *head, *tail; /* the slow lane's queue */
    int inflight;            /* submitted, callback not yet returned */
    int closing;             /* dlock_client_free began: no new calls */
    int stop;                /* slow-lane threads: exit */
    int workers, idle;       /* slow-lane threads, and how many wait for work */
    int queued;              /* calls in the slow lane's queue */
    pthread_t tids[DLOCK__SLOW_LANE_MAX];
} dlock__async;

void dlock__async_init(dlock__async *a);

/* Refuse new calls from now on (dlock_client_drain() began); those in
 * flight go on. */
void dlock__async_close(dlock__async *a);

/* Wait until no call is in flight (after dlock__async_close()). */
void dlock__async_wait_drained(dlock__async *a);

/* An asynchronous operation of a primitive (an acquire that waits between
 * its script calls) counts as in flight from its start to its callback, so
 * dlock_client_free() waits for it as for a call: begin refuses
 * (DLOCK_ERR_INVALID) once the client is being freed, end follows the
 * callback's return. */
dlock_status dlock__async_begin(dlock__async *a);
void dlock__async_end(dlock__async *a);

/* dlock__async_eval() of one of the library's scripts. */
dlock_status dlock__async_script(struct dlock_client *client, dlock__script_id id, int nkeys, const char *const *keys,
                                 int nargs, const char *const *args, dlock_redis_callback *cb, void *arg);

/* The same for an acquisition under replica-safe acquire
 * (client->replica_acks > 0): WAIT follows the script on a connection of
 * its own, so the call runs in the slow lane; dlock__async_acks() in the
 * callback gives the replicas that acknowledged it. Without replica-safe
 * acquire, dlock__async_script(). */
dlock_status dlock__async_script_acked(struct dlock_client *client, dlock__script_id id, int nkeys,
                                       const char *const *keys, int nargs, const char *const *args,
                                       dlock_redis_callback *cb, void *arg);
long long dlock__async_acks(void);

/* A callback for a call whose answer is of no use (sent and forgotten:
 * a fair waiter leaving the queue). */
void dlock__async_ignore(dlock_status st, redisReply *reply, void *arg);

/* In a callback, a script's answer of one integer: `reply` freed, then
 * DLOCK_OK with *out, or `st` when the call failed, or DLOCK_ERR_REDIS
 * (with a message) for an answer of another type; *out is 0 unless
 * DLOCK_OK. */
dlock_status dlock__async_int(dlock_status st, redisReply *reply, long long *out);

/* Inside a callback of dlock__async_eval(): 1 when the command was sent
 * more than once (a connection lost after the send; see
 * dlock__held_release_done()). */
int dlock__async_resent(void);

/* Refuse new calls (if not done yet), wait until every call in flight has had its callback
 * return, and stop the slow lane's threads. */
void dlock__async_shutdown(dlock__async *a);

/* EVALSHA `sha` (EVAL `body` after NOSCRIPT) with the keys and args,
 * answered through cb; `io_flags` as for dlock__topo_pipeline(). sha and
 * body must outlive the call. See dlock_script_eval_async(). */
dlock_status dlock__async_eval(struct dlock_client *client, const char *sha, const char *body, int io_flags, int nkeys,
                               const char *const *keys, int nargs, const char *const *args, dlock_redis_callback *cb,
                               void *arg);

#endif
