/* Private view of a lock handle for the primitives built from locks. */
#ifndef DLOCK_LOCK_H
#define DLOCK_LOCK_H

#include "dlock.h"

/* The client a lock handle was made with. */
dlock_client *dlock_lock_client(const dlock_lock *lock);

#endif
