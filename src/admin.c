/*
 * Administration: listing what is held under which names, reading
 * semaphores and latches by name, and deleting what a crashed program
 * left behind. For operators and tools, not for a program's lock paths:
 * dlock_list() walks the whole keyspace with SCAN.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "fence.h"
#include "link.h"
#include "script.h"
#include "util.h"

const char *dlock_kind_name(dlock_kind kind)
{
    switch (kind) {
    case DLOCK_KIND_LOCK: return "lock";
    case DLOCK_KIND_FAIR_LOCK: return "fair";
    case DLOCK_KIND_RWLOCK: return "rwlock";
    case DLOCK_KIND_SEMAPHORE: return "semaphore";
    case DLOCK_KIND_PSEM: return "psem";
    case DLOCK_KIND_LATCH: return "latch";
    }
    return "?";
}

/* ------------------------------------------------------------------------ */
/* Reading one object                                                        */
/* ------------------------------------------------------------------------ */

/* GET of a counter key of `name` (a semaphore's permits, a latch's
 * count): *exists and *value, 0 and 0 when the key is not there. */
static dlock_status counter_get(dlock_client *client, const char *name, const char *suffix, int *exists, long *value)
{
    *exists = 0;
    *value = 0;
    if (!client) return dlock__fail(DLOCK_ERR_INVALID, "client is NULL");
    dlock_status st = dlock_check_name(name);
    if (st != DLOCK_OK) return st;
    char *key = dlock__key(name, suffix);
    if (!key) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    const char *argv[2] = {"GET", key};
    redisReply *r;
    st = dlock__topo_command(client->topo, key, 2, argv, NULL, &r, NULL);
    free(key);
    if (st != DLOCK_OK) return st;
    if (r->type == REDIS_REPLY_STRING) {
        *exists = 1;
        *value = strtol(r->str, NULL, 10);
    } else if (r->type != REDIS_REPLY_NIL) {
        st = dlock__reply_error(r, "GET");
    }
    freeReplyObject(r);
    return st;
}

dlock_status dlock_semaphore_inspect(dlock_client *client, const char *name, dlock_semaphore_info *info)
{
    if (!info) return dlock__fail(DLOCK_ERR_INVALID, "info is NULL");
    return counter_get(client, name, ":sem", &info->exists, &info->available);
}

dlock_status dlock_latch_inspect(dlock_client *client, const char *name, dlock_latch_info *info)
{
    if (!info) return dlock__fail(DLOCK_ERR_INVALID, "info is NULL");
    return counter_get(client, name, ":latch", &info->exists, &info->count);
}

dlock_status dlock_psem_inspect(dlock_client *client, const char *name, dlock_psem_info *info)
{
    if (!info) return dlock__fail(DLOCK_ERR_INVALID, "info is NULL");
    memset(info, 0, sizeof *info);
    info->ttl_ms = -1;
    if (!client) return dlock__fail(DLOCK_ERR_INVALID, "client is NULL");
    dlock_status st = dlock_check_name(name);
    if (st != DLOCK_OK) return st;
    char *size = dlock__key(name, ":psem"), *held = dlock__key(name, ":psem:held");
    redisReply *r = NULL;
    if (!size || !held) {
        st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    } else {
        const char *keys[2] = {size, held};
        st = dlock__eval(client, DLOCK__SCRIPT_PSEM_INSPECT, 2, keys, 0, NULL, &r, NULL);
    }
    free(size);
    free(held);
    if (st != DLOCK_OK) return st;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER || r->element[2]->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return dlock__fail(DLOCK_ERR_REDIS, "psem inspect: unexpected reply");
    }
    info->exists = r->element[0]->integer >= 0;
    info->permits = info->exists ? (long)r->element[0]->integer : 0;
    info->used = (long)r->element[1]->integer;
    info->ttl_ms = (long)r->element[2]->integer;
    freeReplyObject(r);
    return DLOCK_OK;
}

/* ------------------------------------------------------------------------ */
/* Listing                                                                   */
/* ------------------------------------------------------------------------ */

/* The masters to SCAN, each named by a slot it serves (*slots, malloc'd;
 * a command for "{TAG}" of that slot goes to it), or by -1 (any server
 * that holds data) off a Cluster. */
static dlock_status scan_targets(dlock_client *client, int **slots, size_t *n)
{
    dlock__topo *t = client->topo;
    int cluster = dlock__topo_is_cluster(t);
    *n = 0;
    if (!(*slots = calloc(cluster ? DLOCK__MAX_NODES : 1, sizeof **slots)))
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    if (!cluster) {
        (*slots)[(*n)++] = -1;
        return DLOCK_OK;
    }
    char *seen = calloc(DLOCK__MAX_NODES, 1);
    if (!seen) {
        free(*slots);
        *slots = NULL;
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    dlock_status st = DLOCK_OK;
    for (unsigned slot = 0; slot < DLOCK__SLOTS; slot++) {
        char route[DLOCK__SLOT_TAG_MAX + 3];
        snprintf(route, sizeof route, "{%s}", dlock__slot_tag(slot));
        /* a slot not in the map is looked up (once for all, as a rule) */
        int node = dlock__topo_node_known(t, route, strlen(route));
        if (node < 0) node = dlock__topo_node_for(t, route, strlen(route));
        if (node < 0 || node >= DLOCK__MAX_NODES) {
            st = dlock__fail(DLOCK_ERR_CONNECT, "no master is known for slot %u", slot);
            break;
        }
        if (!seen[node]) {
            seen[node] = 1;
            (*slots)[(*n)++] = (int)slot;
        }
    }
    free(seen);
    if (st != DLOCK_OK) {
        free(*slots);
        *slots = NULL;
        *n = 0;
    }
    return st;
}

typedef struct found {
    dlock_entry *e;
    size_t n, cap;
} found;

/* The kind a key's suffix (after "dlock:{NAME}") names, or -1 for a key
 * that is not an object's state (a counter, a queue, a record). */
static int kind_of_suffix(const char *suffix)
{
    static const struct {
        const char *suffix;
        dlock_kind kind;
    } kinds[] = {{"", DLOCK_KIND_LOCK},
                 {":rw", DLOCK_KIND_RWLOCK},
                 {":sem", DLOCK_KIND_SEMAPHORE},
                 {":psem", DLOCK_KIND_PSEM},
                 {":latch", DLOCK_KIND_LATCH}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(suffix, kinds[i].suffix) == 0) return (int)kinds[i].kind;
    return -1;
}

/* Note the object key `key` names, if it is one whose name matches. */
static dlock_status found_key(found *f, const char *key, size_t len, const char *pattern)
{
    if (len < 8 || strncmp(key, "dlock:{", 7) != 0) return DLOCK_OK;
    const char *close = memchr(key + 7, '}', len - 7);
    if (!close) return DLOCK_OK;
    int kind = kind_of_suffix(close + 1);
    if (kind < 0) return DLOCK_OK;
    char *name = strndup(key + 7, (size_t)(close - key - 7));
    if (!name) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    /* MATCH saw the whole key: '*' may have run past the name's '}' */
    if (fnmatch(pattern, name, 0) != 0) {
        free(name);
        return DLOCK_OK;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        dlock_entry *e = realloc(f->e, cap * sizeof *e);
        if (!e) {
            free(name);
            return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
        }
        f->e = e;
        f->cap = cap;
    }
    memset(&f->e[f->n], 0, sizeof f->e[f->n]);
    f->e[f->n].name = name;
    f->e[f->n].kind = (dlock_kind)kind;
    f->n++;
    return DLOCK_OK;
}

/* SCAN one master (the one serving `slot`, see scan_targets) for keys
 * matching `match`. Each call of one SCAN goes to the same master, as
 * long as the slot map does not change meanwhile. */
static dlock_status scan_one(dlock_client *client, int slot, const char *match, const char *pattern, found *f)
{
    char cursor[32] = "0", tag[DLOCK__SLOT_TAG_MAX + 3];
    const char *route = NULL;
    if (slot >= 0) {
        snprintf(tag, sizeof tag, "{%s}", dlock__slot_tag((unsigned)slot));
        route = tag;
    }
    do {
        const char *argv[6] = {"SCAN", cursor, "MATCH", match, "COUNT", "1000"};
        redisReply *r;
        dlock_status st = dlock__topo_command(client->topo, route, 6, argv, NULL, &r, NULL);
        if (st != DLOCK_OK) return st;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            st = r->type == REDIS_REPLY_ERROR ? dlock__reply_error(r, "SCAN")
                                              : dlock__fail(DLOCK_ERR_REDIS, "SCAN: unexpected reply");
            freeReplyObject(r);
            return st;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        const redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements && st == DLOCK_OK; i++)
            if (keys->element[i]->type == REDIS_REPLY_STRING)
                st = found_key(f, keys->element[i]->str, keys->element[i]->len, pattern);
        freeReplyObject(r);
        if (st != DLOCK_OK) return st;
    } while (strcmp(cursor, "0") != 0);
    return DLOCK_OK;
}

/* Read entry e's state; *live is 0 when there is nothing to list (the
 * lock was released since the SCAN saw it, the latch opened). */
static dlock_status entry_read(dlock_client *client, dlock_entry *e, int *live)
{
    dlock_status st = DLOCK_OK;
    switch (e->kind) {
    case DLOCK_KIND_LOCK:
    case DLOCK_KIND_FAIR_LOCK:
        if ((st = dlock_lock_inspect(client, e->name, &e->info.lock)) != DLOCK_OK) return st;
        *live = e->info.lock.held;
        if (*live) { /* a fair lock shows by its queue, which exists only while someone waits */
            char *q = dlock__key(e->name, ":q"), *qt = dlock__key(e->name, ":qt");
            redisReply *r = NULL;
            if (!q || !qt) {
                st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
            } else {
                const char *argv[3] = {"EXISTS", q, qt};
                st = dlock__topo_command(client->topo, q, 3, argv, NULL, &r, NULL);
            }
            free(q);
            free(qt);
            if (st != DLOCK_OK) return st;
            if (r->type == REDIS_REPLY_INTEGER && r->integer > 0) e->kind = DLOCK_KIND_FAIR_LOCK;
            else if (r->type != REDIS_REPLY_INTEGER) st = dlock__reply_error(r, "EXISTS");
            freeReplyObject(r);
        }
        return st;
    case DLOCK_KIND_RWLOCK:
        st = dlock_rwlock_inspect(client, e->name, &e->info.rwlock);
        *live = e->info.rwlock.held;
        return st;
    case DLOCK_KIND_SEMAPHORE:
        st = dlock_semaphore_inspect(client, e->name, &e->info.semaphore);
        *live = e->info.semaphore.exists;
        return st;
    case DLOCK_KIND_PSEM:
        st = dlock_psem_inspect(client, e->name, &e->info.psem);
        *live = e->info.psem.exists;
        return st;
    case DLOCK_KIND_LATCH:
        st = dlock_latch_inspect(client, e->name, &e->info.latch);
        *live = e->info.latch.exists;
        return st;
    }
    return dlock__fail(DLOCK_ERR_INVALID, "unknown kind %d", (int)e->kind);
}

/* By name, then kind; a fair lock sorts as the lock it was found as. */
static int entry_cmp(const void *a, const void *b)
{
    const dlock_entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    int kx = x->kind == DLOCK_KIND_FAIR_LOCK ? DLOCK_KIND_LOCK : (int)x->kind;
    int ky = y->kind == DLOCK_KIND_FAIR_LOCK ? DLOCK_KIND_LOCK : (int)y->kind;
    return kx - ky;
}

/* A glob that MATCH and fnmatch() both take, with no hash-tag braces,
 * and at most a name's length. */
static dlock_status check_pattern(const char *pattern)
{
    if (!pattern || !*pattern) return dlock__fail(DLOCK_ERR_INVALID, "pattern is NULL or empty");
    if (strlen(pattern) > 512) return dlock__fail(DLOCK_ERR_INVALID, "pattern is longer than 512 bytes");
    if (strpbrk(pattern, "{}")) return dlock__fail(DLOCK_ERR_INVALID, "pattern may not contain '{' or '}'");
    for (const char *p = pattern; *p; p++)
        if ((unsigned char)*p < ' ' || *p == 0x7f)
            return dlock__fail(DLOCK_ERR_INVALID, "pattern may not contain control characters");
    return DLOCK_OK;
}

dlock_status dlock_list(dlock_client *client, const char *pattern, dlock_entry **out, size_t *n)
{
    if (!out || !n) return dlock__fail(DLOCK_ERR_INVALID, "no output pointer");
    *out = NULL;
    *n = 0;
    if (!client) return dlock__fail(DLOCK_ERR_INVALID, "client is NULL");
    dlock_status st = check_pattern(pattern);
    if (st != DLOCK_OK) return st;
    char *match;
    if (asprintf(&match, "dlock:{%s}*", pattern) < 0) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    int *slots = NULL;
    size_t masters = 0;
    found f = {0};
    st = scan_targets(client, &slots, &masters);
    for (size_t i = 0; i < masters && st == DLOCK_OK; i++) st = scan_one(client, slots[i], match, pattern, &f);
    free(slots);
    free(match);
    if (st == DLOCK_OK && f.n > 0) {
        /* SCAN may return a key twice (the server rehashed meanwhile) */
        qsort(f.e, f.n, sizeof *f.e, entry_cmp);
        size_t kept = 0;
        for (size_t i = 0; i < f.n; i++) {
            if (kept > 0 && entry_cmp(&f.e[kept - 1], &f.e[i]) == 0) {
                free(f.e[i].name);
                continue;
            }
            f.e[kept++] = f.e[i];
        }
        f.n = kept;
        kept = 0;
        for (size_t i = 0; i < f.n; i++) {
            int live = 0;
            if (st == DLOCK_OK) st = entry_read(client, &f.e[i], &live);
            if (st == DLOCK_OK && live) f.e[kept++] = f.e[i];
            else free(f.e[i].name);
        }
        f.n = kept;
    }
    if (st != DLOCK_OK) {
        dlock_list_free(f.e, f.n);
        return st;
    }
    if (f.n == 0) {
        free(f.e);
        f.e = NULL;
    }
    *out = f.e;
    *n = f.n;
    return DLOCK_OK;
}

void dlock_list_free(dlock_entry *entries, size_t n)
{
    if (!entries) return;
    for (size_t i = 0; i < n; i++) free(entries[i].name);
    free(entries);
}

/* ------------------------------------------------------------------------ */
/* Deleting                                                                  */
/* ------------------------------------------------------------------------ */

/* The keys of a name admin_delete.lua takes, in its order: the four it
 * checks, the slot's fencing counter (kept), the two per-name counters of
 * earlier versions, then the rest (src/lock.c, rwlock.c, semaphore.c,
 * psem.c, latch.c and the CLI's records; docs/design/keys.md). */
static const char *const delete_suffixes[] = {
    "",       ":rw",       ":psem:held", ":latch", NULL /* the slot's counter */,
    ":fence", ":rw:fence", ":w",         ":r",     ":o",
    ":q",     ":qt",       ":qo",        ":sem",   ":sem:size",
    ":psem",  ":info",     ":rw:info",   ":rate",  ":rate:tat",
};
#define DELETE_KEYS (sizeof delete_suffixes / sizeof delete_suffixes[0])

dlock_status dlock_delete(dlock_client *client, const char *name, int force, int *deleted)
{
    if (deleted) *deleted = 0;
    if (!client) return dlock__fail(DLOCK_ERR_INVALID, "client is NULL");
    dlock_status st = dlock_check_name(name);
    if (st != DLOCK_OK) return st;
    int unlocked = 0, rw_unlocked = 0;
    if (force) { /* wake the waiters of held locks, as a forced unlock does */
        if ((st = dlock_lock_force_unlock(client, name, &unlocked)) != DLOCK_OK) return st;
        if ((st = dlock_rwlock_force_unlock(client, name, &rw_unlocked)) != DLOCK_OK) return st;
    }
    char *keys[DELETE_KEYS];
    int ok = 1;
    for (size_t i = 0; i < DELETE_KEYS; i++) {
        keys[i] = delete_suffixes[i] ? dlock__key(name, delete_suffixes[i]) : dlock__fence_key(name);
        if (!keys[i]) ok = 0;
    }
    redisReply *r = NULL;
    if (!ok) {
        st = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    } else {
        const char *args[1] = {force ? "1" : "0"};
        st = dlock__eval(client, DLOCK__SCRIPT_ADMIN_DELETE, (int)DELETE_KEYS, (const char **)keys, 1, args, &r, NULL);
    }
    for (size_t i = 0; i < DELETE_KEYS; i++) free(keys[i]);
    if (st != DLOCK_OK) return st;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER) {
        st = dlock__fail(DLOCK_ERR_REDIS, "delete: unexpected reply");
    } else if (r->element[0]->integer < 0) {
        const char *kind = r->elements > 1 && r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "?";
        st = dlock__fail(DLOCK_ERR_NOT_OWNER, "%s is in use (%s): not deleted; force deletes it anyway", name, kind);
    } else if (deleted) {
        *deleted = (int)r->element[0]->integer + unlocked + rw_unlocked;
    }
    freeReplyObject(r);
    return st;
}
