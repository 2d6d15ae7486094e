/*
 * Fencing counters and floors.
 *
 * A token is max(counter + 1, server clock in microseconds, floor + 1)
 * (src/lua/lib/fence.lua). The counter is one per Cluster hash slot,
 * shared by every name of the slot (dlock__fence_key), so that names
 * locked once leave nothing behind: at most 16384 counters, whatever the
 * number of names. The first two come from one server: a restart
 * without persistence onto a clock stepped back loses both. The floor is
 * what the caller knows: every token a client is handed is remembered
 * here and passed with its next acquisition of the same name, so tokens
 * seen by this process keep rising whatever the server forgot; a caller
 * can add what its fenced resource knows (dlock_lock_set_fence_floor()).
 */
#include <stdio.h>
#include <string.h>

#include "fence.h"
#include "slot.h"
#include "util.h"

/* "dlock:fence:{TAG}": no name's key can be this one, since a name's keys
 * all begin "dlock:{". Names hold no '{' or '}', so a name's slot is
 * the checksum of the whole name. */
char *dlock__fence_key(const char *name)
{
    char *k;
    const char *tag = dlock__slot_tag(dlock__key_slot(name, strlen(name)));
    return asprintf(&k, "dlock:fence:{%s}", tag) < 0 ? NULL : k;
}

void dlock__fence_cache_init(dlock__fence_cache *fc)
{
    memset(fc->slot, 0, sizeof fc->slot);
    pthread_mutex_init(&fc->mu, NULL);
}

void dlock__fence_cache_destroy(dlock__fence_cache *fc)
{
    pthread_mutex_destroy(&fc->mu);
}

/* FNV-1a, never 0 (0 marks an empty slot). */
static uint64_t key_hash(const char *s)
{
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ? h : 1;
}

uint64_t dlock__fence_seen(dlock__fence_cache *fc, const char *fence_key)
{
    uint64_t h = key_hash(fence_key), token = 0;
    size_t i = h % DLOCK__FENCE_SLOTS;
    pthread_mutex_lock(&fc->mu);
    if (fc->slot[i].hash == h) token = fc->slot[i].token;
    pthread_mutex_unlock(&fc->mu);
    return token;
}

void dlock__fence_note(dlock__fence_cache *fc, const char *fence_key, uint64_t token)
{
    uint64_t h = key_hash(fence_key);
    size_t i = h % DLOCK__FENCE_SLOTS;
    pthread_mutex_lock(&fc->mu);
    if (fc->slot[i].hash != h) {
        fc->slot[i].hash = h;
        fc->slot[i].token = token;
    } else if (token > fc->slot[i].token) {
        fc->slot[i].token = token;
    }
    pthread_mutex_unlock(&fc->mu);
}

/* Lua's numbers are doubles: integers are exact up to 2^53, and a floor
 * above that could not be raised by one. Tokens are microseconds since
 * 1970 or counters (about 2^51 today), so a larger floor is a mistake;
 * it is held at the largest floor the scripts can still go above. */
#define FLOOR_MAX ((1ULL << 53) - 2)

void dlock__fence_floor_arg(dlock__fence_cache *fc, const char *fence_key, uint64_t explicit_floor, char out[24])
{
    uint64_t seen = dlock__fence_seen(fc, fence_key);
    uint64_t floor = seen > explicit_floor ? seen : explicit_floor;
    dlock__fmt_ull(floor > FLOOR_MAX ? FLOOR_MAX : floor, out);
}
