/*
 * Who holds a lock: the record `dlock lock` keeps beside its hold, and
 * what `dlock status` reads back. See holdinfo.h for the layout and its
 * lifetime. Everything goes through the library's raw command API, routed
 * by the lock's key, so it works unchanged on Sentinel and Cluster, and
 * none of it is on the path of the library's own lock calls.
 */
#include "holdinfo.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock_redis.h"

/*
 * KEYS[1] the lock's hash, KEYS[2] the record; ARGV[1] our token, ARGV[2]
 * the record's TTL (ms), ARGV[3] the hash's owner field, ARGV[4...] field,
 * value pairs. Writes only while the hold with our token is the current
 * one, and copies its owner from the hash: the record then names exactly
 * this hold, whatever the owner string looks like.
 */
static const char record_script[] =
    "local h = redis.call('HMGET', KEYS[1], ARGV[3], 'token')\n"
    "if not h[1] or h[1] == '' or h[2] ~= ARGV[1] then return 0 end\n"
    "local t = redis.call('TIME')\n"
    "local since = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "redis.call('DEL', KEYS[2])\n"
    "redis.call('HSET', KEYS[2], 'owner', h[1], 'token', ARGV[1], 'since_ms', string.format('%.0f', since),\n"
    "           unpack(ARGV, 4))\n"
    "redis.call('PEXPIRE', KEYS[2], ARGV[2])\n"
    "return 1\n";

/* KEYS[1] the record; ARGV[1] our token, ARGV[2] a new TTL (ms), or "0" to
 * delete it. Touches only a record of our hold: after our release the next
 * holder's record may already be there. */
static const char touch_script[] = "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end\n"
                                   "if ARGV[2] == '0' then return redis.call('DEL', KEYS[1]) end\n"
                                   "return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n";

/*
 * KEYS: the lock's hash, its record, the read-write lock's hash, its
 * record, the fair queue's deadlines. Returns {server time (ms), lock
 * token, lock record, write token, write record, live fair waiters}: a
 * record only while its owner and token are the current hold's, all read
 * in one step so that they agree with each other. Read-only.
 */
static const char read_script[] =
    "local t = redis.call('TIME')\n"
    "local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))\n"
    "local function hold(lock, who, record)\n"
    "    local h = redis.call('HMGET', lock, who, 'token')\n"
    "    if not h[1] or h[1] == '' then return '', {} end\n"
    "    local r = redis.call('HGETALL', record)\n"
    "    local f = {}\n"
    "    for i = 1, #r, 2 do f[r[i]] = r[i + 1] end\n"
    "    if f.owner ~= h[1] or f.token ~= h[2] then r = {} end\n"
    "    return h[2] or '', r\n"
    "end\n"
    "local lt, lr = hold(KEYS[1], 'owner', KEYS[2])\n"
    "local wt, wr = hold(KEYS[3], 'writer', KEYS[4])\n"
    "return {now, lt, lr, wt, wr, redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf')\n"
    "    + redis.call('ZCOUNT', KEYS[6], '(' .. now, '+inf')}\n";

struct holdinfo {
    dlock_client *client; /* the holder's, for the first write and the last delete */
    char *url;
    dlock_options opts; /* for the keeper's own client */
    dlock_client *keeper_client;
    char *key; /* the record */
    char token[24];
    char ttl[24];     /* the record's TTL, ms */
    long every_ms;    /* refresh period */
    atomic_int *lost; /* the hold was lost: stop refreshing */
    /* The first write, made by the keeper (see holdinfo_start()). */
    char *lock; /* the lock's hash */
    const char *owner_field;
    char host[256], pid[24], command[HOLDINFO_COMMAND_MAX + 1];
    int running; /* the keeper thread was started */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    int remove; /* holdinfo_end(): delete the record on the way out */
};

/* EVAL through the raw API: the tool links no script of its own into the
 * library, and EVAL routes by keys[0] like any keyed command. */
static dlock_status eval(dlock_client *c, int flags, const char *script, int nkeys, const char *const *keys, int nargs,
                         const char *const *args, redisReply **reply)
{
    const char *argv[16];
    char n[12];
    if (3 + nkeys + nargs > 16) return DLOCK_ERR_INVALID;
    snprintf(n, sizeof n, "%d", nkeys);
    int argc = 0;
    argv[argc++] = "EVAL";
    argv[argc++] = script;
    argv[argc++] = n;
    for (int i = 0; i < nkeys; i++) argv[argc++] = keys[i];
    for (int i = 0; i < nargs; i++) argv[argc++] = args[i];
    *reply = NULL;
    return dlock_redis_command(c, keys[0], flags, argc, argv, NULL, reply);
}

/* An EVAL whose integer answer is all we want; -1 on any failure. */
static long long eval_int(dlock_client *c, int flags, const char *script, int nkeys, const char *const *keys, int nargs,
                          const char *const *args)
{
    redisReply *r = NULL;
    long long v = -1;
    if (eval(c, flags, script, nkeys, keys, nargs, args, &r) == DLOCK_OK && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    if (r) freeReplyObject(r);
    return v;
}

/* A word that a shell reads back as itself, so it needs no quotes. */
static int plain_word(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("_./:=@%+,-", c)))
            return 0;
    }
    return 1;
}

void holdinfo_command_line(char *const *command, char *out, size_t size)
{
    size_t n = 0;
    if (size == 0) return;
#define PUT(ch)                                                                                                        \
    do {                                                                                                               \
        if (n < size - 1) out[n] = (ch);                                                                               \
        n++;                                                                                                           \
    } while (0)
    for (size_t i = 0; command[i]; i++) {
        const char *a = command[i];
        if (i > 0) PUT(' ');
        if (plain_word(a)) {
            for (; *a; a++) PUT(*a);
            continue;
        }
        PUT('\'');
        for (; *a; a++) {
            if (*a == '\'') {
                PUT('\'');
                PUT('\\');
                PUT('\'');
            }
            PUT(*a);
        }
        PUT('\'');
    }
#undef PUT
    if (n < size) {
        out[n] = '\0';
        return;
    }
    /* Too long: end in "..." without splitting a UTF-8 character. */
    size_t k = size > 4 ? size - 4 : 0;
    while (k > 0 && ((unsigned char)out[k] & 0xc0) == 0x80) k--;
    snprintf(out + k, size - k, "...");
}

/*
 * Renew the record every third of the lease, as the watchdog renews the
 * lease itself, until holdinfo_end(), then delete it if asked to. The
 * keeper has a client of its own whose timeouts are a fraction of that
 * period (at most 1 s): holdinfo_free() must wait for a refresh in flight,
 * and one stuck on a server that stopped answering would otherwise hold
 * dlock's exit for the holder's whole command timeout after COMMAND was
 * stopped. A failed refresh is not retried early: the record outlives the
 * lease by a third, which covers two.
 *
 * Why the delete is made here and not by the caller after its release:
 * sent from this thread while the caller sends the release, both share
 * the holder's pipelined connection and cost one round trip instead of
 * two, on the path from COMMAND's end to dlock's exit that every cron run
 * and every waiter behind us pays. The release does not wait for it: the
 * two scripts touch different keys, and the delete, which checks the
 * token, is right before or after the release alike.
 */
static void *keeper(void *arg)
{
    pthread_setname_np(pthread_self(), "dlock-holdinfo");
    holdinfo *h = arg;
    const char *first_keys[2] = {h->lock, h->key};
    const char *first_args[9] = {h->token, h->ttl, h->owner_field, "host",    h->host,
                                 "pid",    h->pid, "command",      h->command};
    const char *keys[1] = {h->key};
    const char *args[2] = {h->token, h->ttl};
    /* A COMMAND that ended before we got here (`true`) needs no record. */
    pthread_mutex_lock(&h->mu);
    int stop = h->stop;
    pthread_mutex_unlock(&h->mu);
    if (stop) return NULL;
    /* Not written (the hold is gone already, the server refused or did
     * not answer): the hold goes on without a record, and a write whose
     * answer was lost expires by itself. Sent once, so that
     * holdinfo_free() waits for one command's timeout at most. */
    if (eval_int(h->client, DLOCK_REDIS_ONCE, record_script, 2, first_keys, 9, first_args) != 1) return NULL;
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        at.tv_sec += h->every_ms / 1000;
        at.tv_nsec += (h->every_ms % 1000) * 1000000L;
        if (at.tv_nsec >= 1000000000L) {
            at.tv_sec++;
            at.tv_nsec -= 1000000000L;
        }
        int rc = 0;
        while (!h->stop && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&h->cv, &h->mu, &at);
        if (h->stop || (h->lost && atomic_load(h->lost))) break;
        pthread_mutex_unlock(&h->mu);
        if (h->keeper_client || dlock_client_new(h->url, &h->opts, &h->keeper_client) == DLOCK_OK)
            eval_int(h->keeper_client, DLOCK_REDIS_ONCE, touch_script, 1, keys, 2, args);
        pthread_mutex_lock(&h->mu);
    }
    /* A hold found lost stops the refreshes; the record goes at the end. */
    while (!h->stop) pthread_cond_wait(&h->cv, &h->mu);
    int remove = h->remove;
    pthread_mutex_unlock(&h->mu);
    if (remove) {
        const char *del_args[2] = {h->token, "0"};
        eval_int(h->client, DLOCK_REDIS_ONCE, touch_script, 1, keys, 2, del_args);
    }
    return NULL;
}

/* The keeper takes no signals, so that none meant for COMMAND lands in
 * the middle of one of its Redis calls, where it would only cut a refresh
 * short. */
static int start_keeper(holdinfo *h)
{
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0) return -1;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&h->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) return -1;
    pthread_mutex_init(&h->mu, NULL);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&h->thread, NULL, keeper, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        return -1;
    }
    h->running = 1;
    return 0;
}

/* Why the keeper makes the first write, not the caller: the record is for
 * `dlock status` only, and a round trip here would come between the
 * acquisition and COMMAND's start, the hand-off a waiting script feels.
 * The record script writes only while this hold is the lock's current
 * one, so a write that lands after a quick COMMAND's release writes
 * nothing. */
holdinfo *holdinfo_start(dlock_client *client, const char *url, const dlock_options *opts, holdinfo_kind kind,
                         const char *name, uint64_t token, long lease_ms, char *const *command, atomic_int *lost)
{
    holdinfo *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    const char *suffix = kind == HOLDINFO_WRITE ? ":rw" : "";
    h->url = strdup(url);
    if (asprintf(&h->key, "dlock:{%s}%s:info", name, suffix) < 0) h->key = NULL; /* else undefined */
    if (asprintf(&h->lock, "dlock:{%s}%s", name, suffix) < 0) h->lock = NULL;
    if (!h->url || !h->key || !h->lock) {
        holdinfo_free(h);
        return NULL;
    }
    if (gethostname(h->host, sizeof h->host) != 0) snprintf(h->host, sizeof h->host, "?");
    h->host[sizeof h->host - 1] = '\0';
    snprintf(h->pid, sizeof h->pid, "%ld", (long)getpid());
    holdinfo_command_line(command, h->command, sizeof h->command);
    h->owner_field = kind == HOLDINFO_WRITE ? "writer" : "owner";
    h->client = client;
    h->lost = lost;
    snprintf(h->token, sizeof h->token, "%llu", (unsigned long long)token);
    snprintf(h->ttl, sizeof h->ttl, "%ld", lease_ms + lease_ms / 3);
    h->every_ms = lease_ms / 3 > 0 ? lease_ms / 3 : 1;
    long t = h->every_ms / 2 < 20 ? 20 : h->every_ms / 2 > 1000 ? 1000 : h->every_ms / 2;
    h->opts = *opts;
    if (!h->opts.command_timeout_ms || h->opts.command_timeout_ms > t) h->opts.command_timeout_ms = (int)t;
    if (!h->opts.connect_timeout_ms || h->opts.connect_timeout_ms > t) h->opts.connect_timeout_ms = (int)t;
    h->opts.offline_ok = 1;
    if (start_keeper(h) != 0) {
        holdinfo_free(h);
        return NULL;
    }
    return h;
}

void holdinfo_end(holdinfo *h, int remove)
{
    if (!h || !h->running) return;
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    h->remove = remove;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void holdinfo_free(holdinfo *h)
{
    if (!h) return;
    if (h->running) {
        holdinfo_end(h, h->remove); /* as holdinfo_end() said; without it, no delete */
        pthread_join(h->thread, NULL);
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
    }
    dlock_client_free(h->keeper_client);
    free(h->url);
    free(h->key);
    free(h->lock);
    free(h);
}

/* A record as HGETALL returns it (field, value, ...) into *m. */
static void read_meta(const redisReply *r, holdinfo_meta *m)
{
    memset(m, 0, sizeof *m);
    m->pid = -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *f = r->element[i], *v = r->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
        if (strcmp(f->str, "host") == 0) snprintf(m->host, sizeof m->host, "%s", v->str);
        else if (strcmp(f->str, "pid") == 0) m->pid = strtol(v->str, NULL, 10);
        else if (strcmp(f->str, "command") == 0) snprintf(m->command, sizeof m->command, "%s", v->str);
        else if (strcmp(f->str, "since_ms") == 0) m->since_ms = strtoll(v->str, NULL, 10);
    }
    m->known = 1;
}

/* The token of a hold as the read script gives it ("" when none). */
static void read_token(const redisReply *r, char *out, size_t size)
{
    snprintf(out, size, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
}

/* Subscribers of the plain and the read-write lock's channels: each
 * waiting process listens once per channel on its own connection (a
 * plain-lock waiter of this version listens on its process's own channel
 * and is counted from dlock:{NAME}:w instead; RedLock's and older clients'
 * here). Clusters count sharded subscribers apart (SHARDNUMSUB). */
static void count_subscribers(dlock_client *client, const char *name, int cluster, holdinfo_view *v)
{
    char *ch = NULL, *rwch = NULL;
    if (asprintf(&ch, "dlock:{%s}:ch", name) < 0) return;
    if (asprintf(&rwch, "dlock:{%s}:rw:ch", name) < 0) {
        free(ch);
        return;
    }
    const char *argv[4] = {"PUBSUB", cluster ? "SHARDNUMSUB" : "NUMSUB", ch, rwch};
    redisReply *r = NULL;
    if (dlock_redis_command(client, ch, 0, 4, argv, NULL, &r) == DLOCK_OK && r->type == REDIS_REPLY_ARRAY &&
        r->elements == 4 && r->element[1]->type == REDIS_REPLY_INTEGER && r->element[3]->type == REDIS_REPLY_INTEGER) {
        v->waiting = v->waiting < 0 ? -1 : v->waiting + (long)r->element[1]->integer;
        v->rw_waiting = (long)r->element[3]->integer;
    } else {
        v->waiting = -1;
    }
    if (r) freeReplyObject(r);
    free(ch);
    free(rwch);
}

dlock_status holdinfo_read(dlock_client *client, const char *name, int cluster, holdinfo_view *v)
{
    memset(v, 0, sizeof *v);
    v->lock.pid = v->rw.pid = -1;
    v->waiting = v->rw_waiting = -1;
    /* ":qt": fair waiters; ":w": processes waiting for the plain lock */
    static const char *const suffixes[6] = {"", ":info", ":rw", ":rw:info", ":qt", ":w"};
    char *keys[6] = {NULL};
    dlock_status st = DLOCK_OK;
    for (int i = 0; i < 6; i++)
        if (asprintf(&keys[i], "dlock:{%s}%s", name, suffixes[i]) < 0) {
            keys[i] = NULL;
            st = DLOCK_ERR_NOMEM;
        }
    redisReply *r = NULL;
    if (st == DLOCK_OK) st = eval(client, 0, read_script, 6, (const char *const *)keys, 0, NULL, &r);
    for (int i = 0; i < 6; i++) free(keys[i]);
    if (st != DLOCK_OK) {
        if (r) freeReplyObject(r);
        return st;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 6 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[5]->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return DLOCK_ERR_REDIS;
    }
    v->now_ms = strtoll(r->element[0]->str, NULL, 10);
    read_token(r->element[1], v->lock_token, sizeof v->lock_token);
    read_meta(r->element[2], &v->lock);
    read_token(r->element[3], v->rw_token, sizeof v->rw_token);
    read_meta(r->element[4], &v->rw);
    v->waiting = (long)r->element[5]->integer;
    freeReplyObject(r);
    count_subscribers(client, name, cluster, v);
    return DLOCK_OK;
}
