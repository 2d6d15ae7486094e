/* What the plain and the permit-expirable semaphore share: the call that
 * makes one of a size or changes its size (semaphore.c). */
#ifndef DLOCK__SEM_SIZE_H
#define DLOCK__SEM_SIZE_H

#include <stdatomic.h>

#include "client.h"
#include "script.h"

/*
 * Run sem_set.lua or psem_set.lua (`script`) in `mode` ("set", "resize",
 * "add") with `n` on keys[0] (the state, whose tag names the operation
 * record) and keys[1]; `what` and `name` word the errors. On DLOCK_OK
 * *size is the stored size and *was_set (if not NULL) whether the call
 * made or changed it. A "set" that finds another size is DLOCK_ERR_INVALID
 * with both numbers in the message; `n` out of range is DLOCK_ERR_INVALID.
 */
dlock_status dlock__sem_size(dlock_client *client, dlock__script_id script, const char *what, const char *name,
                             const char *const keys[2], const char *channel, const char *mode, long n,
                             atomic_long *size, int *was_set);

#endif
