/* Operation records: what makes a script that is not idempotent by nature
 * safe to run twice when the connection layer resends it after a lost
 * reply. */
#ifndef DLOCK__OP_H
#define DLOCK__OP_H

#include "dlock.h"

/* Room for "dlock:{NAME}:op:<client id>:<thread number>" with the longest
 * name. */
#define DLOCK__OP_KEY_MAX 640

/* One call's operation id, as a script receives it: the record key (in
 * KEYS, with the object's hash tag), the call's sequence number and the
 * record's lifetime (in ARGV). */
typedef struct dlock__op {
    char key[DLOCK__OP_KEY_MAX];
    char seq[24];
    char ttl[24];
} dlock__op;

/* A new operation id for one call by the calling thread on the object
 * whose key is `object_key` (any "dlock:{NAME}..." key of it). */
void dlock__op_new(dlock_client *client, const char *object_key, dlock__op *op);

/* The same for an asynchronous call through handle number `handle`: its
 * record is the handle's ("...:op:<client id>:h<handle>"), which holds for
 * the same reason, since a handle has one asynchronous call at a time. */
void dlock__op_new_async(dlock_client *client, const char *object_key, unsigned long handle, dlock__op *op);

#endif
