/*
 * Histories of the torture harness: what every client process did, when,
 * and what came of it, one line per event, in a file per process.
 *
 * Times are microseconds on CLOCK_MONOTONIC, which is one clock for every
 * process of the machine, so events of different processes compare. Each
 * line is written with one write(2) on a file opened O_APPEND, so a
 * process killed with SIGKILL loses at most the event it was recording.
 */
#ifndef DLOCK_TORTURE_HISTORY_H
#define DLOCK_TORTURE_HISTORY_H

#include <stddef.h>
#include <stdint.h>

/* Event kinds. */
#define TT_ACQUIRE 'A' /* result ok, busy or err; token of the hold */
#define TT_STEP                                                                                                        \
    'S'                  /* one action under the hold; t0 is taken before
                            the hold was last checked, so a hold believed
                            lost never starts a step after t0 */
#define TT_RELEASE 'R'   /* result ok, lost or err */
#define TT_COUNTDOWN 'D' /* latch count-down; value = count left */
#define TT_AWAIT 'W'     /* latch await; result ok or busy (timed out) */
#define TT_EXIT 'E'      /* a `dlock lock` run ended; value = its exit status */
#define TT_FAULT 'F'     /* a fault the harness applied (faults.log) */

/* Hold modes. */
#define TT_EXCLUSIVE 'x' /* plain, fair, multi, RedLock lock; write hold */
#define TT_READ 'r'      /* read hold */
#define TT_PERMIT 'p'    /* semaphore permit (plain or expirable) */
#define TT_NONE '-'

typedef struct tt_event {
    char kind;
    char mode;
    int pid;         /* the process that recorded it */
    int holder;      /* the process holding the lock (dlock for a COMMAND's events) */
    int client;      /* the worker slot it runs in */
    long hold;       /* the hold's number in its process: pairs steps with acquires */
    char name[64];   /* object name; for a fault, its type */
    int64_t t0, t1;  /* start and end, monotonic microseconds */
    char result[16]; /* ok busy err lost acc rej; for a fault, its target */
    uint64_t token;  /* fencing token (0: none) */
    long long value; /* count read (steps), count left (latch), exit status */
} tt_event;

/* Monotonic microseconds. */
int64_t tt_now_us(void);

/* Sleep `ms` milliseconds (through signals). */
void tt_sleep_ms(long ms);

/* The harness's random numbers (splitmix64): every choice of a run comes
 * from its seed, so a run can be replayed. */
unsigned long long tt_rand(unsigned long long *state);

/* A number from lo to hi, both included. */
long tt_rand_between(unsigned long long *state, long lo, long hi);

/* Open (create, append) a history file; -1 on failure. */
int tt_open(const char *path);

/* Append one event as one line. */
void tt_write(int fd, const tt_event *e);

/* Parse one line into *e: 0, or -1 when it is not an event line. */
int tt_parse(const char *line, tt_event *e);

/* All events of every "*.log" file in `dir`, in no particular order:
 * *out (malloc'd) and the count; -1 on failure. */
int tt_read_dir(const char *dir, tt_event **out, size_t *n);

#endif
