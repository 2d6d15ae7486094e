/*
 * The order writer; see writer.h for what it guarantees. One thread, one
 * Redis connection of its own (it blocks in XREADGROUP), database
 * connections borrowed per batch.
 *
 * The loop, each turn:
 *   - find voucher streams (from the database, every second or when told);
 *   - for a stream not yet set up since (re)connecting: create the group
 *     (from id 0, so orders added before it are not skipped) and re-read
 *     this consumer's own pending entries, which a previous run with the
 *     same name delivered but never acknowledged;
 *   - every claim interval: XAUTOCLAIM entries idle for claim_idle_ms
 *     from any consumer (dead ones, or our own failed batches);
 *   - read new entries from all streams at once, blocking briefly;
 *   - persist what was read in one transaction, then XACK.
 */
#include "writer.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "metrics.h"
#include "skutil.h"

#define STREAMS_MAX 256           /* vouchers followed at once */
#define ENDED_GRACE_S (7 * 86400) /* follow a voucher's stream this long after its sale */
#define REFRESH_NS 1000000000LL
#define LAG_NS 1000000000LL
#define CLAIM_ROUNDS 16           /* XAUTOCLAIM calls per stream per claim pass */

typedef struct stream {
    int64_t vid;
    char keys[SK_K_COUNT][SK_KEY_MAX];
    int ready;   /* the group exists, as far as we know */
    int drained; /* own pending entries re-read since the last (re)connect or failure */
} stream;

/* One stream entry of a batch. */
typedef struct entry {
    size_t stream;
    char id[48];
    const redisReply *fields; /* points into the reply the entry came from */
    int valid;
    const char *bad;          /* why it is not valid */
    long deliveries;          /* known for redeliveries, else 0 */
    char order_id[24];        /* the "order" field as sent, "" when absent or too long */
    sk_order order;
} entry;

struct sk_writer {
    sk_writer_config cfg;
    char consumer[160];
    pthread_t thread;
    atomic_int stop;
    atomic_int notified;
    stream streams[STREAMS_MAX];
    size_t nstreams;
    redisContext *c;
    int stop_before, stop_after; /* test hooks, see sk_writer_start */
    int64_t last_refresh, last_claim, last_lag;
    long backoff_ms;
};

/* Drop the connection and forget what it told us: after a reconnect the
 * groups may be gone (Redis restarted) and our pending list must be
 * re-read, since a batch may have been delivered but never acknowledged. */
static void disconnect(sk_writer *w)
{
    if (w->c) redisFree(w->c);
    w->c = NULL;
    for (size_t i = 0; i < w->nstreams; i++) w->streams[i].ready = w->streams[i].drained = 0;
}

/* One place to classify replies: a lost connection resets the stream
 * state, NOGROUP (Redis restarted empty) makes us re-create the groups. */
static int reply_ok(sk_writer *w, redisReply *r, const char *what)
{
    if (!r) {
        fprintf(stderr, "seckill: writer: %s: connection lost\n", what);
        disconnect(w);
        return 0;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (strncmp(r->str, "NOGROUP", 7) == 0) {
            for (size_t i = 0; i < w->nstreams; i++) w->streams[i].ready = w->streams[i].drained = 0;
        } else {
            fprintf(stderr, "seckill: writer: %s: %s\n", what, r->str);
        }
        return 0;
    }
    return 1;
}

/* Follow every voucher whose sale is running or ended recently: its
 * stream may hold orders. Newest first, bounded by STREAMS_MAX. */
static void refresh_streams(sk_writer *w)
{
    int64_t ids[STREAMS_MAX];
    size_t n = 0;
    if (w->cfg.db->ops->voucher_ids(w->cfg.db, sk_unix_now() - ENDED_GRACE_S, ids, STREAMS_MAX, &n) != SK_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        int known = 0;
        for (size_t j = 0; j < w->nstreams && !known; j++) known = w->streams[j].vid == ids[i];
        if (known || w->nstreams == STREAMS_MAX) continue;
        stream *s = &w->streams[w->nstreams++];
        memset(s, 0, sizeof *s);
        s->vid = ids[i];
        sk_voucher_keys(ids[i], s->keys);
    }
}

/* From id 0 with MKSTREAM: orders added before the group existed are
 * delivered too; BUSYGROUP means another writer made it first. */
static int ensure_group(sk_writer *w, stream *s)
{
    redisReply *r = redisCommand(w->c, "XGROUP CREATE %s %s 0 MKSTREAM", s->keys[SK_K_ORDERS], SK_GROUP);
    if (!r) {
        disconnect(w);
        return -1;
    }
    int ok = r->type != REDIS_REPLY_ERROR || strncmp(r->str, "BUSYGROUP", 9) == 0;
    if (!ok) fprintf(stderr, "seckill: writer: XGROUP CREATE %s: %s\n", s->keys[SK_K_ORDERS], r->str);
    freeReplyObject(r);
    if (ok) s->ready = 1;
    return ok ? 0 : -1;
}

static const redisReply *field(const redisReply *fields, const char *name)
{
    if (!fields || fields->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < fields->elements; i += 2) {
        const redisReply *k = fields->element[i];
        if (k->type == REDIS_REPLY_STRING && strcmp(k->str, name) == 0) return fields->element[i + 1];
    }
    return NULL;
}

/* Turn one [id, fields] reply into an entry. Anything not exactly what the
 * order script writes is marked invalid: it can never be persisted, so it
 * goes to the dead-letter stream rather than being retried forever. */
static int parse_entry(sk_writer *w, size_t si, const redisReply *er, entry *e)
{
    memset(e, 0, sizeof *e);
    e->stream = si;
    if (er->type != REDIS_REPLY_ARRAY || er->elements != 2 || er->element[0]->type != REDIS_REPLY_STRING ||
        er->element[0]->len >= sizeof e->id)
        return -1;
    memcpy(e->id, er->element[0]->str, er->element[0]->len + 1);
    e->fields = er->element[1];
    const redisReply *o = field(e->fields, "order"), *u = field(e->fields, "user"),
                     *v = field(e->fields, "voucher");
    e->valid = 0;
    if (o && o->type == REDIS_REPLY_STRING && o->len < sizeof e->order_id) memcpy(e->order_id, o->str, o->len + 1);
    if (e->fields->type != REDIS_REPLY_ARRAY) e->bad = "deleted";
    else if (!o || !u || !v || o->type != REDIS_REPLY_STRING || u->type != REDIS_REPLY_STRING ||
             v->type != REDIS_REPLY_STRING)
        e->bad = "missing_field";
    else if (sk_parse_u64(o->str, o->len, INT64_MAX, &e->order.id) != 0 || e->order.id == 0 ||
             sk_parse_i64(u->str, u->len, INT64_MAX, &e->order.user_id) != 0 ||
             sk_parse_i64(v->str, v->len, INT64_MAX, &e->order.voucher_id) != 0)
        e->bad = "bad_number";
    else if (e->order.voucher_id != w->streams[si].vid)
        e->bad = "wrong_voucher";
    else
        e->valid = 1;
    return 0;
}

/* Acknowledge entries of one stream and drop their orders from its
 * pending hash, in one round trip (two pipelined commands): from then on
 * GET /api/orders finds them in the database (or, dead-lettered, not at
 * all). */
static int ack(sk_writer *w, const stream *s, entry *const *es, size_t n)
{
    if (n == 0) return 0;
    const char **argv = malloc((n + 3) * sizeof *argv);
    if (!argv) return -1;
    argv[0] = "XACK";
    argv[1] = s->keys[SK_K_ORDERS];
    argv[2] = SK_GROUP;
    for (size_t i = 0; i < n; i++) argv[3 + i] = es[i]->id;
    int ok = redisAppendCommandArgv(w->c, (int)(n + 3), argv, NULL) == REDIS_OK;
    argv[0] = "HDEL";
    argv[1] = s->keys[SK_K_PENDING];
    for (size_t i = 0; i < n; i++) argv[2 + i] = es[i]->order_id;
    ok = ok && redisAppendCommandArgv(w->c, (int)(n + 2), argv, NULL) == REDIS_OK;
    free(argv);
    for (int k = 0; k < 2 && ok; k++) {
        void *r = NULL;
        if (redisGetReply(w->c, &r) != REDIS_OK) r = NULL;
        ok = reply_ok(w, r, k == 0 ? "XACK" : "HDEL pending");
        if (r) freeReplyObject(r);
    }
    if (!ok && w->c) disconnect(w); /* a reply may be left unread */
    return ok ? 0 : -1;
}

/* Move an entry to the voucher's dead-letter stream, with its fields, why,
 * and where it came from, then acknowledge it. A crash between the two
 * writes can copy it twice; a duplicate in the dead letters is harmless,
 * a lost one is not. */
static int dead_letter(sk_writer *w, entry *e, const char *reason)
{
    const stream *s = &w->streams[e->stream];
    if (e->fields && e->fields->type == REDIS_REPLY_ARRAY && e->fields->elements <= 64) {
        const char *argv[3 + 64 + 6];
        size_t lens[3 + 64 + 6];
        int argc = 0;
        char deliv[24];
        snprintf(deliv, sizeof deliv, "%ld", e->deliveries);
        argv[argc] = "XADD", lens[argc++] = 4;
        argv[argc] = s->keys[SK_K_DEAD], lens[argc++] = strlen(s->keys[SK_K_DEAD]);
        argv[argc] = "*", lens[argc++] = 1;
        for (size_t i = 0; i + 1 < e->fields->elements; i += 2) {
            const redisReply *k = e->fields->element[i], *v = e->fields->element[i + 1];
            if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
            argv[argc] = k->str, lens[argc++] = k->len;
            argv[argc] = v->str, lens[argc++] = v->len;
        }
        argv[argc] = "reason", lens[argc++] = 6;
        argv[argc] = reason, lens[argc++] = strlen(reason);
        argv[argc] = "source_id", lens[argc++] = 9;
        argv[argc] = e->id, lens[argc++] = strlen(e->id);
        argv[argc] = "deliveries", lens[argc++] = 10;
        argv[argc] = deliv, lens[argc++] = strlen(deliv);
        redisReply *r = redisCommandArgv(w->c, argc, argv, lens);
        int ok = reply_ok(w, r, "XADD dead letter");
        if (r) freeReplyObject(r);
        if (!ok) return -1;
        fprintf(stderr, "seckill: writer: order entry %s of %s dead-lettered (%s)\n", e->id,
                s->keys[SK_K_ORDERS], reason);
        sk_metrics_writer(0, 0, 0, 1, 0);
    }
    return ack(w, s, &e, 1);
}

/* Delivery counts of redelivered entries, from XPENDING over their range.
 * Why count deliveries at all: an entry that crashes the writer would
 * otherwise be redelivered to every restart forever (a poison message). */
static int fetch_deliveries(sk_writer *w, entry *e, size_t n)
{
    if (n == 0) return 0;
    const stream *s = &w->streams[e[0].stream];
    redisReply *r = redisCommand(w->c, "XPENDING %s %s %s %s %d %s", s->keys[SK_K_ORDERS], SK_GROUP,
                                 e[0].id, e[n - 1].id, (int)n, w->consumer);
    if (!reply_ok(w, r, "XPENDING")) {
        if (r) freeReplyObject(r);
        return -1;
    }
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *p = r->element[i];
            if (p->type != REDIS_REPLY_ARRAY || p->elements < 4 || p->element[0]->type != REDIS_REPLY_STRING ||
                p->element[3]->type != REDIS_REPLY_INTEGER)
                continue;
            for (size_t j = 0; j < n; j++)
                if (strcmp(e[j].id, p->element[0]->str) == 0) e[j].deliveries = (long)p->element[3]->integer;
        }
    freeReplyObject(r);
    return 0;
}

/*
 * Persist a batch and acknowledge it. `redelivered` entries (own pending
 * list, claimed ones) all come from one stream and are first checked for
 * their delivery count. Returns 0 when everything was persisted or dead-
 * lettered and acknowledged, -1 when the batch must be retried (nothing of
 * it was acknowledged, except dead letters).
 */
static int handle(sk_writer *w, entry *e, size_t n, int redelivered)
{
    if (n == 0) return 0;
    if (redelivered && fetch_deliveries(w, e, n) != 0) return -1;
    sk_order *orders = malloc(n * sizeof *orders);
    sk_persist_outcome *outcomes = malloc(n * sizeof *outcomes);
    size_t *which = malloc(n * sizeof *which);
    int rc = -1;
    if (!orders || !outcomes || !which) goto out;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!e[i].valid) {
            if (dead_letter(w, &e[i], e[i].bad) != 0) goto out;
        } else if (e[i].deliveries > w->cfg.max_deliveries) {
            if (dead_letter(w, &e[i], "max_deliveries") != 0) goto out;
        } else {
            orders[m] = e[i].order;
            which[m++] = i;
        }
    }
    if (m > 0) {
        if (w->stop_before) raise(SIGSTOP); /* test hook: stop with the batch read, not committed */
        /* A database that fails is retried here, with the batch in hand,
         * rather than by redelivery: redeliveries are counted, and an
         * outage must not turn good orders into dead letters. */
        long pause = 100;
        for (;;) {
            sk_result r = w->cfg.db->ops->orders_persist(w->cfg.db, orders, m, sk_unix_now(), outcomes);
            if (r == SK_OK) break;
            fprintf(stderr, "seckill: writer: batch of %zu not persisted (%s); retrying\n", m,
                    sk_result_code(r));
            if (atomic_load(&w->stop)) goto out;
            sk_sleep_ms(pause);
            pause = pause * 2 > 5000 ? 5000 : pause * 2;
        }
        if (w->stop_after) raise(SIGSTOP); /* test hook: stop committed, not acknowledged */
        uint64_t created = 0, dup = 0, rej = 0;
        for (size_t k = 0; k < m; k++) {
            if (outcomes[k] == SK_PERSIST_CREATED) created++;
            else if (outcomes[k] == SK_PERSIST_DUPLICATE) dup++;
            else rej++;
        }
        sk_metrics_writer(created, dup, rej, 0, 1);
        /* Acknowledge per stream, after the commit. */
        entry **ids = malloc(m * sizeof *ids);
        if (!ids) goto out;
        for (size_t si = 0; si < w->nstreams; si++) {
            size_t k = 0;
            for (size_t j = 0; j < m; j++)
                if (e[which[j]].stream == si) ids[k++] = &e[which[j]];
            if (k && ack(w, &w->streams[si], ids, k) != 0) {
                free(ids);
                goto out;
            }
        }
        free(ids);
    }
    rc = 0;
out:
    free(orders);
    free(outcomes);
    free(which);
    return rc;
}

/* Parse the entries of one stream's reply array into e[*n...]. */
static void collect(sk_writer *w, size_t si, const redisReply *list, entry *e, size_t cap, size_t *n)
{
    if (!list || list->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i < list->elements && *n < cap; i++)
        if (parse_entry(w, si, list->element[i], &e[*n]) == 0) (*n)++;
}

/* Re-read this consumer's own pending entries of one stream, oldest first,
 * until none is left. */
static int drain_own(sk_writer *w, size_t si, entry *e)
{
    stream *s = &w->streams[si];
    char from[48] = "0";
    for (;;) {
        redisReply *r = redisCommand(w->c, "XREADGROUP GROUP %s %s COUNT %d STREAMS %s %s", SK_GROUP,
                                     w->consumer, w->cfg.batch, s->keys[SK_K_ORDERS], from);
        if (!reply_ok(w, r, "XREADGROUP pending")) {
            if (r) freeReplyObject(r);
            return -1;
        }
        size_t n = 0;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->type == REDIS_REPLY_ARRAY &&
            r->element[0]->elements == 2)
            collect(w, si, r->element[0]->element[1], e, (size_t)w->cfg.batch, &n);
        int rc = n ? handle(w, e, n, 1) : 0;
        if (n) snprintf(from, sizeof from, "%s", e[n - 1].id);
        freeReplyObject(r);
        if (rc != 0) return -1;
        if (n == 0) break;
    }
    s->drained = 1;
    return 0;
}

/* Take over entries idle longer than claim_idle_ms, whoever holds them. */
static int claim_idle(sk_writer *w, size_t si, entry *e)
{
    stream *s = &w->streams[si];
    char cursor[48] = "0-0";
    for (int round = 0; round < CLAIM_ROUNDS; round++) {
        redisReply *r = redisCommand(w->c, "XAUTOCLAIM %s %s %s %ld %s COUNT %d", s->keys[SK_K_ORDERS],
                                     SK_GROUP, w->consumer, w->cfg.claim_idle_ms, cursor, w->cfg.batch);
        if (!reply_ok(w, r, "XAUTOCLAIM")) {
            if (r) freeReplyObject(r);
            return -1;
        }
        size_t n = 0;
        int more = 0;
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[0]->type == REDIS_REPLY_STRING) {
            snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
            more = strcmp(cursor, "0-0") != 0;
            collect(w, si, r->element[1], e, (size_t)w->cfg.batch, &n);
        }
        if (n) fprintf(stderr, "seckill: writer: claimed %zu idle orders of %s\n", n, s->keys[SK_K_ORDERS]);
        int rc = handle(w, e, n, 1);
        freeReplyObject(r);
        if (rc != 0) return -1;
        if (!more) break;
    }
    return 0;
}

/* New entries from every ready stream in one blocking read. */
static int read_new(sk_writer *w, entry *e)
{
    size_t idx[STREAMS_MAX], k = 0;
    for (size_t i = 0; i < w->nstreams; i++)
        if (w->streams[i].ready && w->streams[i].drained) idx[k++] = i;
    if (k == 0) {
        sk_sleep_ms(w->cfg.block_ms);
        return 0;
    }
    const char *argv[9 + 2 * STREAMS_MAX];
    char count[16], block[16];
    snprintf(count, sizeof count, "%d", w->cfg.batch);
    snprintf(block, sizeof block, "%d", w->cfg.block_ms);
    int argc = 0;
    argv[argc++] = "XREADGROUP";
    argv[argc++] = "GROUP";
    argv[argc++] = SK_GROUP;
    argv[argc++] = w->consumer;
    argv[argc++] = "COUNT";
    argv[argc++] = count;
    argv[argc++] = "BLOCK";
    argv[argc++] = block;
    argv[argc++] = "STREAMS";
    for (size_t i = 0; i < k; i++) argv[argc++] = w->streams[idx[i]].keys[SK_K_ORDERS];
    for (size_t i = 0; i < k; i++) argv[argc++] = ">";
    redisReply *r = redisCommandArgv(w->c, argc, argv, NULL);
    if (!reply_ok(w, r, "XREADGROUP")) {
        if (r) freeReplyObject(r);
        return -1;
    }
    size_t n = 0;
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *sr = r->element[i];
            if (sr->type != REDIS_REPLY_ARRAY || sr->elements != 2 || sr->element[0]->type != REDIS_REPLY_STRING)
                continue;
            for (size_t j = 0; j < k; j++)
                if (strcmp(sr->element[0]->str, w->streams[idx[j]].keys[SK_K_ORDERS]) == 0)
                    collect(w, idx[j], sr->element[1], e, (size_t)w->cfg.batch * k, &n);
        }
    int rc = handle(w, e, n, 0);
    freeReplyObject(r);
    if (rc != 0) {
        /* Retry from our pending list, counting deliveries. */
        for (size_t i = 0; i < w->nstreams; i++) w->streams[i].drained = 0;
        return -1;
    }
    return 0;
}

/* Sum of the group's lag and pending over all streams, for /metrics. */
static void update_lag(sk_writer *w)
{
    long long lag = 0, pending = 0;
    for (size_t i = 0; i < w->nstreams; i++) {
        redisReply *r = redisCommand(w->c, "XINFO GROUPS %s", w->streams[i].keys[SK_K_ORDERS]);
        if (!r) {
            disconnect(w);
            return;
        }
        if (r->type == REDIS_REPLY_ARRAY)
            for (size_t g = 0; g < r->elements; g++) {
                const redisReply *m = r->element[g];
                if (m->type != REDIS_REPLY_ARRAY) continue;
                const redisReply *name = field(m, "name");
                if (!name || name->type != REDIS_REPLY_STRING || strcmp(name->str, SK_GROUP) != 0) continue;
                const redisReply *l = field(m, "lag"), *p = field(m, "pending");
                if (l && l->type == REDIS_REPLY_INTEGER) lag += l->integer;
                if (p && p->type == REDIS_REPLY_INTEGER) pending += p->integer;
            }
        freeReplyObject(r);
    }
    sk_metrics_stream(lag, pending);
}

/* The loop described at the top of this file. */
static void *run(void *arg)
{
    sk_writer *w = arg;
    size_t cap = (size_t)w->cfg.batch * STREAMS_MAX;
    entry *e = malloc(cap * sizeof *e);
    if (!e) {
        fprintf(stderr, "seckill: writer: out of memory\n");
        return NULL;
    }
    while (!atomic_load(&w->stop)) {
        if (!w->c) {
            w->c = sk_rpool_connect(w->cfg.redis, w->cfg.block_ms + 5000);
            if (!w->c) {
                sk_sleep_ms(w->backoff_ms);
                w->backoff_ms = w->backoff_ms * 2 > 2000 ? 2000 : w->backoff_ms * 2;
                continue;
            }
            w->backoff_ms = 100;
        }
        int64_t now = sk_mono_ns();
        if (atomic_exchange(&w->notified, 0)) {
            /* A warm-up just happened: perhaps after a Redis restart that
             * took our groups with it. Re-creating is idempotent. */
            for (size_t i = 0; i < w->nstreams; i++) w->streams[i].ready = 0;
            w->last_refresh = 0;
        }
        if (now - w->last_refresh >= REFRESH_NS) {
            refresh_streams(w);
            w->last_refresh = now;
        }
        int failed = 0;
        for (size_t i = 0; i < w->nstreams && w->c && !failed; i++) {
            stream *s = &w->streams[i];
            if (!s->ready && ensure_group(w, s) != 0) failed = 1;
            else if (s->ready && !s->drained && drain_own(w, i, e) != 0) failed = 1;
        }
        long claim_every = w->cfg.claim_idle_ms / 2 < 1000 ? w->cfg.claim_idle_ms / 2 : 1000;
        if (!failed && w->c && now - w->last_claim >= (int64_t)claim_every * 1000000LL) {
            for (size_t i = 0; i < w->nstreams && w->c && !failed; i++)
                if (w->streams[i].ready && claim_idle(w, i, e) != 0) failed = 1;
            w->last_claim = now;
        }
        if (!failed && w->c && now - w->last_lag >= LAG_NS) {
            update_lag(w);
            w->last_lag = now;
        }
        if (!failed && w->c && read_new(w, e) != 0) failed = 1;
        if (failed) sk_sleep_ms(100);
    }
    free(e);
    return NULL;
}

/* The consumer name must be unique per live process (HOSTNAME:PID), or
 * two writers would share one pending list; a stable name (containers
 * where PID is 1) lets a restart re-read its own pending list at once. */
sk_writer *sk_writer_start(const sk_writer_config *cfg)
{
    sk_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->cfg = *cfg;
    if (w->cfg.claim_idle_ms <= 0) w->cfg.claim_idle_ms = 30000;
    if (w->cfg.max_deliveries <= 0) w->cfg.max_deliveries = 5;
    if (w->cfg.batch <= 0) w->cfg.batch = 256;
    if (w->cfg.block_ms <= 0) w->cfg.block_ms = 200;
    if (cfg->consumer && *cfg->consumer) {
        snprintf(w->consumer, sizeof w->consumer, "%s", cfg->consumer);
    } else {
        char host[128] = "localhost";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        snprintf(w->consumer, sizeof w->consumer, "%s:%ld", host, (long)getpid());
    }
    w->cfg.consumer = w->consumer;
    /* Test hooks: the whole process stops itself (SIGSTOP) at the exact
     * point a crash is most harmful, so a test can SIGKILL it there. */
    const char *t = getenv("SECKILL_TEST_STOP_BEFORE_COMMIT");
    w->stop_before = t && *t == '1';
    t = getenv("SECKILL_TEST_STOP_AFTER_COMMIT");
    w->stop_after = t && *t == '1';
    w->backoff_ms = 100;
    atomic_init(&w->stop, 0);
    atomic_init(&w->notified, 0);
    if (pthread_create(&w->thread, NULL, run, w) != 0) {
        free(w);
        return NULL;
    }
    return w;
}

/* A flag, not a wake-up: the writer looks within one BLOCK period. */
void sk_writer_notify(sk_writer *w)
{
    atomic_store(&w->notified, 1);
}

/* Entries read but not committed stay pending for the next start. */
void sk_writer_stop(sk_writer *w)
{
    if (!w) return;
    atomic_store(&w->stop, 1);
    pthread_join(w->thread, NULL);
    if (w->c) redisFree(w->c);
    free(w);
}
