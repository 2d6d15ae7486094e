/* Private view of a lock handle for the primitives built from locks. */
#ifndef DLOCK__LOCK_H
#define DLOCK__LOCK_H

#include "dlock.h"

/* The client a lock handle was made with. */
dlock_client *dlock__lock_client(const dlock_lock *lock);

/* Force unlock of one lock hash (`key`, waking waiters on `channel` with
 * `wake`: "1" for one per process, "*" for all, and with `waiters` (may be
 * NULL), the plain lock's waiting processes on their own channels);
 * shared by the plain and the read-write lock. */
dlock_status dlock__force_unlock_hash(dlock_client *client, const char *key, const char *channel, const char *waiters,
                                      const char *wake, int *was_held);

/* Tests only (NULL otherwise): run by a plain waiter that gave up as its
 * process's last, between that count and its leave (waiter_leave.lua):
 * the moment at which a newcomer of the process can register it, only to
 * have the leave take it out of the set again. */
extern void (*dlock__test_before_leave)(void);

#endif
