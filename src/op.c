/*
 * Operation ids for resend safety.
 *
 * The connection layer sends a command a second time when a pooled
 * connection breaks before its reply arrives (src/conn.c, src/topology.c),
 * so a script may run twice for one call. Scripts that set state from what
 * the caller knows (lock counts, permit ids) are safe anyway; the others
 * (semaphore permits, latch counts, set-once counters, release by id,
 * force unlock) take an operation id and keep a small record of their
 * effect:
 *
 *   KEYS[k]  "dlock:{NAME}:op:<client id>:<thread number>"  = "<seq>:<result>"
 *   ARGV     <seq> (from a per-client counter), the record's lifetime (ms)
 *
 * A run that finds its own <seq> in the record returns the recorded result
 * instead of applying itself again. The record is per thread, not per
 * call: a thread makes one call at a time, and a resend only ever repeats
 * the thread's latest call, so one key per (client, thread, name) suffices
 * and the number of records does not grow with the call rate. The key has
 * the object's hash tag, so it is in KEYS and in the object's Cluster slot.
 * The scripts' side of it is written once, in src/lua/lib/op_record.lua.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "op.h"
#include "util.h"

/* "<thread number>" or "h<handle number>" names the record's caller. */
static void op_make(dlock_client *client, const char *object_key, const char *kind, unsigned long who, dlock__op *op)
{
    /* Names cannot contain '}', so the first one closes the hash tag. */
    const char *close = strchr(object_key, '}');
    int tag = close ? (int)(close - object_key + 1) : (int)strlen(object_key);
    snprintf(op->key, sizeof op->key, "%.*s:op:%s:%s%lu", tag, object_key, client->id, kind, who);
    snprintf(op->seq, sizeof op->seq, "%llu", (unsigned long long)atomic_fetch_add(&client->op_seq, 1) + 1);
    snprintf(op->ttl, sizeof op->ttl, "%ld", client->op_ttl_ms);
}

void dlock__op_new(dlock_client *client, const char *object_key, dlock__op *op)
{
    op_make(client, object_key, "", dlock__thread_number(), op);
}

void dlock__op_new_async(dlock_client *client, const char *object_key, unsigned long handle, dlock__op *op)
{
    op_make(client, object_key, "h", handle, op);
}
