/* The renewal of every hold a client keeps alive, and the clock that ends
 * its holder's belief in it. */
#ifndef DLOCK__WATCHDOG_H
#define DLOCK__WATCHDOG_H

#include <stdatomic.h>
#include <stdint.h>

#include "dlock.h"
#include "script.h"

/* Renewal timing, as fractions of a lease: renew a third of a lease after
 * the last renewal was sent, let holds due within the next sixth ride
 * along in the same call, and retry a failed renewal after a tenth (20 ms
 * to 1 s). */
#define DLOCK__RENEW_DIVISOR 3
#define DLOCK__RENEW_RIDE_ALONG_DIVISOR 6
#define DLOCK__RENEW_RETRY_DIVISOR 10
#define DLOCK__RENEW_RETRY_MIN_MS 20
#define DLOCK__RENEW_RETRY_MAX_MS 1000

/*
 * A hold the watchdog renews. The holder fills the public part, embeds the
 * struct in its own state and keeps it alive until dlock__wd_remove()
 * returns. on_lost runs on the watchdog thread, after the entry was
 * removed, when the hold was found gone or its holder's clock says the
 * lease may end soon (dlock__lease_trust_ms) and no renewal has come back.
 */
typedef struct dlock__wd_entry {
    dlock__script_id script; /* renew script: KEYS[i], ARGV[2i-1] owner, ARGV[2i] lease */
    dlock_stats_kind kind;   /* whose renewals the client's metrics count */
    const char *key;         /* the key that holds the hold */
    const char *owner;
    long lease_ms;
    void (*on_lost)(struct dlock__wd_entry *e);
    /* private to the watchdog */
    int64_t next_ms;            /* next renewal due (monotonic); INT64_MAX while one is in flight */
    int64_t lost_ms;            /* declared lost here unless renewed first */
    atomic_llong trusted_until; /* the same from renewals only, for dlock__wd_trusted() */
    uint64_t gen;               /* bumped on every add, to drop stale results */
    int registered;
    int releasing; /* the holder's release is in flight (see below) */
    unsigned slot; /* the key's cluster slot (0 elsewhere): one batch, one slot */
    struct dlock__wd_entry *prev, *next;
} dlock__wd_entry;

/*
 * How long after a lease was (re)started, by the holder's monotonic clock,
 * the holder may still believe in it: the lease, less the clock-drift
 * allowance (dlock__drift_ms: clocks of two machines run at slightly
 * different rates) and less `margin_pct` percent of the lease, the time
 * the holder is given to stop using what the lock protects. A lease is
 * started when the command that set it was sent, never when its answer
 * came, so the server's copy of the lease ends no earlier than this.
 */
long dlock__lease_trust_ms(long lease_ms, int margin_pct);

/* The clock-drift allowance of a lease: 1 % of it plus 2 ms (RedLock's). */
long dlock__drift_ms(long lease_ms);

struct dlock__watchdog *dlock__watchdog_start(dlock_client *client);

/* Tests only: while set, dlock__watchdog_start() fails as it does when no
 * thread can be made, so that the path that undoes a grant whose renewal
 * cannot start is taken on demand. */
extern atomic_int dlock__test_watchdog_fails;
void dlock__watchdog_stop(struct dlock__watchdog *wd);

/* Start renewing `e`, whose lease was (re)started at monotonic `since_ms`. */
void dlock__wd_add(struct dlock__watchdog *wd, dlock__wd_entry *e, int64_t since_ms);

/* Mark `e` as being released (on 1) or not any more (on 0). A renewal that
 * runs on the server just after the holder's release script deleted the
 * key answers "not owned"; for an entry being released that answer means
 * nothing (the release will tell), so it is not reported as a loss; nor is
 * the end of its trusted time, since its holder has stopped using it. */
void dlock__wd_releasing(struct dlock__watchdog *wd, dlock__wd_entry *e, int on);

/* 1 while the holder's own clock still allows it to believe in the hold
 * of `e`: the query behind dlock_lock_lost() and its kin. Exact by the
 * clock even when the scheduler thread runs late (a loaded machine), so
 * a holder that asks before each step never starts one after its trusted
 * time; the loss callback may come a little later. Lock-free. */
int dlock__wd_trusted(const dlock__wd_entry *e);

/* Whether a hold is still believed by its holder's clock: one the
 * watchdog renews (`renewed`, through its entry `e`), or one with an
 * explicit lease trusted until monotonic `until` (0: no limit). */
int dlock__hold_trusted(const dlock__wd_entry *e, int renewed, int64_t until);

/* Stop renewing `e`; waits for a loss callback running on it to return. */
void dlock__wd_remove(struct dlock__watchdog *wd, dlock__wd_entry *e);

#endif
