/*
 * `dlock lock` and `dlock semaphore`: what they hold (the table of hold
 * kinds, hold_kinds.c) and how COMMAND runs under it (supervise.c).
 */
#ifndef DLOCK_TOOLS_HOLD_H
#define DLOCK_TOOLS_HOLD_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "child.h"
#include "cli.h"
#include "dlock.h"

/* -t and --safety-margin default to the library's own defaults, and -t
 * is refused below its watchdog's minimum (include/dlock.h). The library
 * declares a hold lost a margin before its lease could end: COMMAND gets
 * SIGTERM then, and its whole process group SIGKILL when that margin is
 * over, so that nothing runs under the lock once the server may hand it
 * on. */
#define DEFAULT_TTL_MS DLOCK_WATCHDOG_LEASE_DEFAULT_MS
#define MIN_TTL_MS DLOCK_WATCHDOG_LEASE_MIN_MS
#define DEFAULT_MARGIN_PCT DLOCK_SAFETY_MARGIN_DEFAULT_PCT

/* ------------------------------------------------------------------------ */
/* Kinds of hold (hold_kinds.c)                                              */
/* ------------------------------------------------------------------------ */

/* What `lock` and `semaphore` hold while COMMAND runs: an index into
 * cli_hold_kinds[]. */
typedef enum hold_kind {
    HOLD_PLAIN,
    HOLD_FAIR,
    HOLD_READ,
    HOLD_WRITE,
    HOLD_REDLOCK,
    HOLD_PERMIT,
    HOLD_KINDS
} hold_kind;

/* The objects behind one hold, whatever its kind. */
typedef struct holder {
    const struct hold_ops *ops;
    const char *name;
    size_t n;
    dlock_client *clients[DLOCK_REDLOCK_MAX_MASTERS];
    void *handle;         /* the kind's own: dlock_lock, _rwlock, _redlock or _psem */
    dlock_permit *permit; /* a semaphore's, while held */
} holder;

/* One kind of hold: one row of cli_hold_kinds[], so that a new kind is
 * one row and cmd_hold.c does not change. */
typedef struct hold_ops {
    const char *what;  /* "lock" or "semaphore", for messages */
    int holdinfo_kind; /* what `dlock status` is told (holdinfo_kind), or -1 */
    /* Make the handle and register its loss callback (cli_on_lost). */
    dlock_status (*open)(holder *h, long permits, uint64_t fence_floor);
    /* Take the hold, renewed by the watchdog; *token its fencing token
     * (0 for a permit, which has none). */
    dlock_status (*acquire)(holder *h, long wait_ms, uint64_t *token);
    /* Whether the hold is over by the clock (the library's query). */
    int (*lost)(const holder *h);
    dlock_status (*release)(holder *h);
    /* Free the handle (and what it holds); NULL handles are fine. */
    void (*free)(holder *h);
} hold_ops;

extern const hold_ops cli_hold_kinds[HOLD_KINDS];

/* Whether the hold `arg` (a holder) is lost: flagged by the watchdog, or
 * over by the clock. */
int cli_holder_lost(void *arg);
/* Free the hold's handle and its clients. */
void cli_holder_close(holder *h);

/* ------------------------------------------------------------------------ */
/* COMMAND under the hold (supervise.c)                                      */
/* ------------------------------------------------------------------------ */

/* Set by the watchdog's loss callback (any thread). */
extern atomic_int cli_lease_lost;
/* Main thread only: the loss was already reported on stderr. */
extern int cli_lost_reported;

/* The library's loss callback of a plain or fair lock; the other kinds'
 * callbacks end in it. */
void cli_on_lost(dlock_lock *lock, uint64_t token, void *arg);
int cli_prepare_guard(child *c, const char *name, char **command, sigset_t *handled);
int cli_start_command(child *c, const char *name, uint64_t token, const char *permit, const char *command0,
                      const sigset_t *handled, int (*lost)(void *), void *hold);
int cli_wait_command(child *c, const char *name, const char *command0, long margin_ms, int (*lost)(void *), void *hold);
void cli_test_stop_after_release(void);
/* Keep a hold without COMMAND until a signal ends it (0), stdin ends when
 * `until_eof` (0), or it is lost (EXIT_LOST). */
int cli_hold_idle(const char *name, int until_eof, long margin_ms, int (*lost)(void *), void *hold);

/* How late, past -w, `lock` and `semaphore` may return: what the alarm of
 * cli_deadline_arm() allows the library to finish a call in flight. */
#define DEADLINE_GRACE_MS 2000L
/* Exit EXIT_UNAVAILABLE, saying Redis did not answer in time, `after_ms`
 * from now unless cli_deadline_disarm() comes first. 0, or -1. */
int cli_deadline_arm(const char *name, long after_ms);
void cli_deadline_disarm(void);

#endif
