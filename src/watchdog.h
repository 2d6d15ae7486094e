/* One renewal thread per client for all the holds it keeps alive. */
#ifndef DLOCK_WATCHDOG_H
#define DLOCK_WATCHDOG_H

#include <stdint.h>

#include "dlock.h"
#include "script.h"

/*
 * A hold the watchdog renews. The holder fills the public part, embeds the
 * struct in its own state and keeps it alive until dlock_wd_remove()
 * returns. on_lost runs on the watchdog thread, after the entry was
 * removed, when the hold was found gone or its lease ran out while renewal
 * kept failing.
 */
typedef struct dlock_wd_entry {
    dlock_script_id script; /* renew script: KEYS[i], ARGV[2i-1] owner, ARGV[2i] lease */
    const char *key;        /* the key that holds the hold */
    const char *owner;
    long lease_ms;
    void (*on_lost)(struct dlock_wd_entry *e);
    /* private to the watchdog */
    int64_t next_ms;     /* next renewal due (monotonic) */
    int64_t deadline_ms; /* the lease surely ends here without renewal */
    uint64_t gen;        /* bumped on every add, to drop stale results */
    int registered;
    int releasing;       /* the holder's release is in flight (see below) */
    unsigned slot;       /* the key's cluster slot (0 elsewhere): one batch, one slot */
    struct dlock_wd_entry *prev, *next;
} dlock_wd_entry;

struct dlock_watchdog *dlock_watchdog_start(dlock_client *client);
void dlock_watchdog_stop(struct dlock_watchdog *wd);

/* Start renewing `e`, whose lease was (re)started at monotonic `since_ms`. */
void dlock_wd_add(struct dlock_watchdog *wd, dlock_wd_entry *e, int64_t since_ms);

/* Mark `e` as being released (on 1) or not any more (on 0). A renewal that
 * runs on the server just after the holder's release script deleted the
 * key answers "not owned"; for an entry being released that answer means
 * nothing (the release will tell), so it is not reported as a loss. */
void dlock_wd_releasing(struct dlock_watchdog *wd, dlock_wd_entry *e, int on);

/* Stop renewing `e`; waits for a loss callback running on it to return. */
void dlock_wd_remove(struct dlock_watchdog *wd, dlock_wd_entry *e);

#endif
