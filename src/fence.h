/* Fencing counters and floors: which counter a name draws its tokens
 * from, and what a client passes to the acquire scripts so that its
 * tokens keep rising through a server that forgot its counter. */
#ifndef DLOCK__FENCE_H
#define DLOCK__FENCE_H

#include <pthread.h>
#include <stdint.h>

#define DLOCK__FENCE_SLOTS 1024

/* The highest token this client saw per fence counter key, remembered
 * best-effort: a fixed table, one entry per slot of the key's hash, a
 * newer key taking an older one's slot. Losing an entry only weakens the
 * floor back to the server's own (its counter and clock). */
typedef struct dlock__fence_cache {
    pthread_mutex_t mu;
    struct {
        uint64_t hash; /* of the fence key; 0: empty */
        uint64_t token;
    } slot[DLOCK__FENCE_SLOTS];
} dlock__fence_cache;

/* The fencing counter of every name in the Cluster slot of `name`
 * (malloc'd; NULL when out of memory): "dlock:fence:{TAG}", TAG the slot's
 * tag (dlock__slot_tag). */
char *dlock__fence_key(const char *name);

void dlock__fence_cache_init(dlock__fence_cache *fc);
void dlock__fence_cache_destroy(dlock__fence_cache *fc);

/* The highest token remembered for `fence_key`, 0 when none. */
uint64_t dlock__fence_seen(dlock__fence_cache *fc, const char *fence_key);

/* Remember `token` for `fence_key` if it is the highest so far. */
void dlock__fence_note(dlock__fence_cache *fc, const char *fence_key, uint64_t token);

/* The floor to pass for `fence_key`: the larger of what the cache
 * remembers and `explicit_floor`, as the decimal text the scripts read. */
void dlock__fence_floor_arg(dlock__fence_cache *fc, const char *fence_key, uint64_t explicit_floor, char out[24]);

#endif
