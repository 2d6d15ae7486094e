/*
 * The asynchronous lock API driven from a libuv loop: JOBS jobs of one
 * thread compete for one lock, each holding it for a while (a uv timer,
 * not a sleep), and no thread is parked for a waiting job.
 *
 * The library calls back on its own threads. A callback here does the one
 * thing it should: it puts the completion on a queue and wakes the loop
 * (uv_async_send); the loop's thread takes it from there, so every step of
 * a job (start the hold's work, release, report) runs on the loop, as
 * libuv code expects. Build it with
 *
 *   cc async_libuv.c $(pkg-config --cflags --libs dlock libuv) -o async_libuv
 *
 * and run it as `./async_libuv [URL]` (default redis://127.0.0.1:6379). It
 * prints one line per hold, in the order the lock was held, and exits 0
 * when every job had its turn with a fencing token above the one before.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <dlock.h>
#include <uv.h>

#define JOBS 8
#define HOLD_MS 20

typedef struct job {
    int id;
    dlock_lock *lock;    /* a handle per job: one asynchronous call per handle */
    uv_timer_t work;     /* the "work" done while holding */
    uint64_t token;
    dlock_status status; /* of the completion being handed over */
    int acquired;        /* 1: that completion was the acquire's */
    struct job *next;    /* in the hand-over queue */
} job;

/* Completions from the library's threads to the loop's. */
static uv_async_t wake;
static pthread_mutex_t queue_mu = PTHREAD_MUTEX_INITIALIZER;
static job *queue_head, *queue_tail;

static int finished, failed;
static uint64_t last_token;

/* On a library thread: queue the completion, wake the loop. Nothing else:
 * the loop is not thread-safe, and a slow callback delays every caller. */
static void hand_over(job *j, dlock_status st, int acquired)
{
    j->status = st;
    j->acquired = acquired;
    if (st != DLOCK_OK) fprintf(stderr, "job %d: %s\n", j->id, dlock_last_error());
    pthread_mutex_lock(&queue_mu);
    j->next = NULL;
    if (queue_tail) queue_tail->next = j;
    else queue_head = j;
    queue_tail = j;
    pthread_mutex_unlock(&queue_mu);
    uv_async_send(&wake);
}

static void on_acquired(dlock_lock *lock, dlock_status st, uint64_t token, void *arg)
{
    (void)lock;
    job *j = arg;
    j->token = token;
    hand_over(j, st, 1);
}

static void on_released(dlock_lock *lock, dlock_status st, void *arg)
{
    (void)lock;
    hand_over(arg, st, 0);
}

/* On the loop: the hold's work is done; give the lock back. */
static void work_done(uv_timer_t *t)
{
    job *j = t->data;
    if (dlock_lock_release_async(j->lock, on_released, j) != DLOCK_OK) {
        fprintf(stderr, "job %d: %s\n", j->id, dlock_last_error());
        failed = 1;
        finished++;
    }
}

/* On the loop: the next step of each job whose completion arrived. */
static void on_wake(uv_async_t *a)
{
    (void)a;
    pthread_mutex_lock(&queue_mu);
    job *j = queue_head;
    queue_head = queue_tail = NULL;
    pthread_mutex_unlock(&queue_mu);
    for (job *next; j; j = next) {
        next = j->next;
        if (j->status != DLOCK_OK) {
            failed = 1;
            finished++;
        } else if (j->acquired) {
            printf("job %d holds the lock, fencing token %llu\n", j->id, (unsigned long long)j->token);
            if (j->token <= last_token) failed = 1;
            last_token = j->token;
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
    uv_async_init(loop, &wake, on_wake);
    job jobs[JOBS] = {0};
    for (int i = 0; i < JOBS; i++) {
        jobs[i].id = i;
        uv_timer_init(loop, &jobs[i].work);
        jobs[i].work.data = &jobs[i];
        if (dlock_lock_new(client, "example:libuv", &jobs[i].lock) != DLOCK_OK ||
            dlock_lock_acquire_async(jobs[i].lock, 10000, DLOCK_LEASE_WATCHDOG, on_acquired, &jobs[i]) != DLOCK_OK) {
            fprintf(stderr, "async_libuv: %s\n", dlock_last_error());
            failed = 1;
            finished++;
        }
    }
    if (finished < JOBS) uv_run(loop, UV_RUN_DEFAULT);
    for (int i = 0; i < JOBS; i++) uv_close((uv_handle_t *)&jobs[i].work, NULL);
    uv_close((uv_handle_t *)&wake, NULL);
    uv_run(loop, UV_RUN_DEFAULT); /* let the closes finish */
    uv_loop_close(loop);
    /* Every job has ended, so no call is in flight on any handle. */
    for (int i = 0; i < JOBS; i++) dlock_lock_free(jobs[i].lock);
    dlock_client_free(client);
    printf("%s: %d jobs, each held the lock once\n", failed ? "FAILED" : "ok", JOBS);
    return failed ? 1 : 0;
}
