/*
 * The asynchronous lock API driven from a libuv loop: JOBS jobs of one
 * thread compete for one lock, each holding it for a while (a uv timer,
 * not a sleep), and no thread is parked for a waiting job.
 *
 * The library ends each call on one of its own threads. Here the calls
 * are given the library's queue callbacks (dlock_queue_on_acquired,
 * dlock_queue_on_released) and a ticket of one completion queue, so that
 * thread only appends the outcome and makes the queue's descriptor
 * readable; the loop watches the descriptor (uv_poll) and takes the
 * outcomes on its own thread, where every step of a job (start the
 * hold's work, release, report) runs, as libuv code expects. Build it with
 *
 *   cc async_libuv.c $(pkg-config --cflags --libs dlock libuv) -o async_libuv
 *
 * and run it as `./async_libuv [URL]` (default redis://127.0.0.1:6379). It
 * prints one line per hold, in the order the lock was held, and exits 0
 * when every job had its turn with a fencing token above the one before.
 */
#include <stdio.h>
#include <stdlib.h>

#include <dlock.h>
#include <uv.h>

#define JOBS 8
#define HOLD_MS 20

typedef struct job {
    int id;
    dlock_lock *lock; /* a handle per job: one asynchronous call per handle */
    uv_timer_t work;  /* the "work" done while holding */
} job;

/* A completion's key says whose it is and which call it ends. */
#define KEY(id, acquired) ((uint64_t)(id)*2 + (acquired))

static job jobs[JOBS];
static dlock_queue *queue;
static uv_poll_t readable;
static int finished, failed;
static uint64_t last_token;

/* On the loop: the hold's work is done; give the lock back. */
static void work_done(uv_timer_t *t)
{
    job *j = t->data;
    void *ticket = dlock_queue_ticket(queue, KEY(j->id, 0));
    if (!ticket || dlock_lock_release_async(j->lock, dlock_queue_on_released, ticket) != DLOCK_OK) {
        fprintf(stderr, "job %d: %s\n", j->id, ticket ? dlock_last_error() : "out of memory");
        dlock_queue_ticket_free(ticket);
        failed = 1;
        finished++;
    }
}

/* On the loop: the next step of each job whose completion arrived. */
static void on_readable(uv_poll_t *p, int status, int events)
{
    (void)p;
    (void)status;
    (void)events;
    dlock_completion done[JOBS];
    size_t n = dlock_queue_take(queue, done, JOBS);
    for (size_t i = 0; i < n; i++) {
        job *j = &jobs[done[i].key / 2];
        if (done[i].status != DLOCK_OK) {
            fprintf(stderr, "job %d: %s\n", j->id, done[i].error);
            failed = 1;
            finished++;
        } else if (done[i].key % 2) {
            printf("job %d holds the lock, fencing token %llu\n", j->id, (unsigned long long)done[i].token);
            if (done[i].token <= last_token) failed = 1;
            last_token = done[i].token;
            uv_timer_start(&j->work, work_done, HOLD_MS, 0);
        } else {
            finished++;
        }
    }
    if (finished == JOBS) uv_stop(uv_default_loop());
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    uv_loop_t *loop = uv_default_loop();
    dlock_client *client = NULL;
    if (dlock_client_new(url, NULL, &client) != DLOCK_OK) {
        fprintf(stderr, "async_libuv: %s\n", dlock_last_error());
        return 1;
    }
    if (dlock_queue_new(&queue) != DLOCK_OK) {
        fprintf(stderr, "async_libuv: %s\n", dlock_last_error());
        dlock_client_free(client);
        return 1;
    }
    uv_poll_init(loop, &readable, dlock_queue_fd(queue));
    uv_poll_start(&readable, UV_READABLE, on_readable);
    for (int i = 0; i < JOBS; i++) {
        jobs[i].id = i;
        uv_timer_init(loop, &jobs[i].work);
        jobs[i].work.data = &jobs[i];
        void *ticket = NULL;
        if (dlock_lock_new(client, "example:libuv", &jobs[i].lock) != DLOCK_OK ||
            !(ticket = dlock_queue_ticket(queue, KEY(i, 1))) ||
            dlock_lock_acquire_async(jobs[i].lock, 10000, DLOCK_LEASE_WATCHDOG, dlock_queue_on_acquired, ticket) !=
                DLOCK_OK) {
            fprintf(stderr, "async_libuv: %s\n", dlock_last_error());
            dlock_queue_ticket_free(ticket);
            failed = 1;
            finished++;
        }
    }
    if (finished < JOBS) uv_run(loop, UV_RUN_DEFAULT);
    for (int i = 0; i < JOBS; i++) uv_close((uv_handle_t *)&jobs[i].work, NULL);
    uv_close((uv_handle_t *)&readable, NULL);
    uv_run(loop, UV_RUN_DEFAULT); /* let the closes finish */
    uv_loop_close(loop);
    /* Every job has ended, so no call is in flight on any handle. */
    for (int i = 0; i < JOBS; i++) dlock_lock_free(jobs[i].lock);
    dlock_queue_free(queue);
    dlock_client_free(client);
    printf("%s: %d jobs, each held the lock once\n", failed ? "FAILED" : "ok", JOBS);
    return failed ? 1 : 0;
}
