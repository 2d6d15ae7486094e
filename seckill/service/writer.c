/*
 * The order writer; see writer.h for what it guarantees. One thread; its
 * Redis commands go through the process's dlock_client, each routed by
 * the stream it names (so on a cluster each reaches the voucher's node,
 * and failovers are followed); database connections borrowed per batch.
 *
 * The loop, each turn:
 *   - find voucher streams (from the database, every second or when told);
 *   - for a stream not yet set up since it last failed: create the group
 *     (from id 0, so orders added before it are not skipped) and re-read
 *     this consumer's own pending entries, which a previous run with the
 *     same name, or a read whose reply was lost, delivered but never
 *     acknowledged;
 *   - every claim interval: XAUTOCLAIM entries idle for claim_idle_ms
 *     from any consumer (dead ones, or our own failed batches);
 *   - read new entries (writer.h: how, per deployment);
 *   - persist what was read in one transaction, then acknowledge it.
 * A command that fails marks only its stream for setting up again, so a
 * cluster node that is down holds up only its own vouchers.
 */
#include "writer.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acked.h"
#include "common/log.h"
#include "common/skutil.h"
#include "keys.h"
#include "metrics.h"
#include "scripts.h"

#define STREAMS_MAX 256           /* vouchers followed at once */
#define ENDED_GRACE_S (7 * 86400) /* follow a voucher's stream this long after its sale */
#define REFRESH_NS 1000000000LL
#define LAG_NS 1000000000LL
#define CLAIM_ROUNDS 16 /* XAUTOCLAIM calls per stream per claim pass */
#define HINTS 64        /* vouchers with new orders, noted by HTTP threads */

typedef struct stream {
    int64_t vid;
    char keys[SK_K_COUNT][SK_KEY_MAX];
    int ready;   /* the group exists, as far as we know */
    int drained; /* own pending entries re-read since the last failure */
    int hot;     /* cluster: read it next turn (it had entries, or new orders) */
} stream;

/* One stream entry of a batch. */
typedef struct entry {
    size_t stream;
    char id[48];
    const redisReply *fields; /* points into the reply the entry came from */
    int valid;
    const char *bad;   /* why it is not valid */
    long deliveries;   /* known for redeliveries, else 0 */
    char order_id[24]; /* the "order" field as sent, "" when absent or too long */
    sk_order order;
} entry;

struct sk_writer {
    sk_writer_config cfg;
    char consumer[160];
    pthread_t thread;
    atomic_int stop;
    atomic_int notified;
    atomic_llong hint[HINTS]; /* voucher ids (0: none), by id modulo HINTS */
    atomic_int sleeping;      /* the thread waits on `woken` for a hint */
    pthread_mutex_t mu;
    pthread_cond_t woken;
    dlock_script *ack;
    stream streams[STREAMS_MAX];
    size_t nstreams;
    int stop_before, stop_after; /* test hooks, see sk_writer_start */
    int64_t last_refresh, last_claim, last_lag, last_sweep;
    /* A batch's working arrays, `cap` long, allocated once by the thread:
     * large allocations per batch made malloc consolidate its free lists
     * every time (7 % of the writer's CPU). */
    size_t cap;
    entry *e;
    sk_order *orders;
    sk_persist_outcome *outcomes;
    size_t *which;
    entry **es;
    const char **args; /* 2 * cap + 6: arguments of one command */
};

/* Forget what we knew of a stream after a failure: the group may be gone
 * (Redis restarted, a failover to a replica that never had it) and our
 * pending list must be re-read, since entries may have been delivered to
 * us by a read whose reply never came, or persisted but not acknowledged. */
static void reset(stream *s)
{
    s->ready = s->drained = 0;
}

/* One place to judge replies: a lost connection or NOGROUP (Redis lost
 * the group) resets the stream (NULL: every stream), any other error is
 * reported. The reply is freed on failure. */
static int reply_ok_why(sk_writer *w, stream *s, dlock_status st, redisReply *r, const char *what, const char *why)
{
    if (st == DLOCK_OK) return 1;
    if (r && strncmp(r->str, "NOGROUP", 7) != 0) SK_LOG_REPEATED(SK_LOG_ERROR, "writer: %s: %s", what, r->str);
    else if (!r) SK_LOG_REPEATED(SK_LOG_ERROR, "writer: %s: %s", what, why ? why : dlock_last_error());
    if (r) freeReplyObject(r);
    for (size_t i = 0; i < w->nstreams; i++)
        if (!s || s == &w->streams[i]) reset(&w->streams[i]);
    return 0;
}

/* For the library's calls, whose failure dlock_last_error() describes. */
static int reply_ok(sk_writer *w, stream *s, dlock_status st, redisReply *r, const char *what)
{
    return reply_ok_why(w, s, st, r, what, NULL);
}

/* Follow every voucher whose sale is running or ended recently: its
 * stream may hold orders. Newest first, bounded by STREAMS_MAX. */
static void refresh_streams(sk_writer *w)
{
    int64_t ids[STREAMS_MAX];
    size_t n = 0;
    if (w->cfg.db->ops->voucher_ids(w->cfg.db, sk_unix_now() - ENDED_GRACE_S, ids, STREAMS_MAX, &n) != SK_OK) return;
    for (size_t i = 0; i < n; i++) {
        int known = 0;
        for (size_t j = 0; j < w->nstreams && !known; j++) known = w->streams[j].vid == ids[i];
        if (known || w->nstreams == STREAMS_MAX) continue;
        stream *s = &w->streams[w->nstreams++];
        memset(s, 0, sizeof *s);
        s->vid = ids[i];
        s->hot = 1;
        sk_voucher_keys(ids[i], s->keys);
    }
}

/* From id 0 with MKSTREAM: orders added before the group existed are
 * delivered too; BUSYGROUP means another writer made it first. */
static int ensure_group(sk_writer *w, stream *s)
{
    redisReply *r;
    dlock_status st = sk_redis_cmd(w->cfg.redis, s->keys[SK_K_ORDERS], 0, &r, "XGROUP", "CREATE", s->keys[SK_K_ORDERS],
                                   SK_GROUP, "0", "MKSTREAM", NULL);
    if (st == DLOCK_ERR_REDIS && strncmp(r->str, "BUSYGROUP", 9) == 0) st = DLOCK_OK;
    if (!reply_ok(w, s, st, r, "XGROUP CREATE")) return -1;
    freeReplyObject(r);
    s->ready = 1;
    return 0;
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
    const redisReply *o = field(e->fields, "order"), *u = field(e->fields, "user"), *v = field(e->fields, "voucher");
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
    else if (e->order.voucher_id != w->streams[si].vid) e->bad = "wrong_voucher";
    else e->valid = 1;
    return 0;
}

/* Acknowledge entries of one stream and drop their orders from its
 * pending hash, in one script call (seckill_ack.lua): from then on GET
 * /api/orders finds them in the database (or, dead-lettered, not at all). */
static int ack(sk_writer *w, stream *s, entry *const *es, size_t n)
{
    if (n == 0) return 0;
    const char **args = w->args;
    char count[24];
    snprintf(count, sizeof count, "%zu", n);
    args[0] = SK_GROUP;
    args[1] = count;
    for (size_t i = 0; i < n; i++) {
        args[2 + i] = es[i]->id;
        args[2 + n + i] = es[i]->order_id;
    }
    const char *keys[2] = {s->keys[SK_K_ORDERS], s->keys[SK_K_PENDING]};
    redisReply *r;
    dlock_status st = dlock_script_eval(w->ack, 0, 2, keys, (int)(2 + 2 * n), args, &r);
    if (!reply_ok(w, s, st, r, "acknowledge")) return -1;
    freeReplyObject(r);
    return 0;
}

/* Move an entry to the voucher's dead-letter stream, with its fields, why,
 * and where it came from, then acknowledge it. A crash (or a resend after
 * a lost reply) between the two writes can copy it twice; a duplicate in
 * the dead letters is harmless, a lost one is not. */
static int dead_letter(sk_writer *w, entry *e, const char *reason)
{
    stream *s = &w->streams[e->stream];
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
        redisReply *r;
        dlock_status st = sk_redis_argv(w->cfg.redis, s->keys[SK_K_DEAD], 0, argc, argv, lens, &r);
        if (!reply_ok(w, s, st, r, "XADD dead letter")) return -1;
        freeReplyObject(r);
        sk_log(SK_LOG_WARN, "writer: order entry %s of %s dead-lettered (%s)", e->id, s->keys[SK_K_ORDERS], reason);
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
    stream *s = &w->streams[e[0].stream];
    char count[24];
    snprintf(count, sizeof count, "%zu", n);
    redisReply *r;
    dlock_status st = sk_redis_cmd(w->cfg.redis, s->keys[SK_K_ORDERS], 0, &r, "XPENDING", s->keys[SK_K_ORDERS],
                                   SK_GROUP, e[0].id, e[n - 1].id, count, w->consumer, NULL);
    if (!reply_ok(w, s, st, r, "XPENDING")) return -1;
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
 * With replica acks: hold the batch until the replicas have it. Why: an
 * order the database holds but a promoted replica never saw leaves Redis
 * with a unit too many and a buyer forgotten, so a later 201 would turn
 * into a refusal by the database. WAIT covers every write made before the
 * last write on its connection, so the barrier is a write that touches the
 * batch: XCLAIM of our own entries, JUSTID (it changes nothing but their
 * idle time; the delivery count stays). Retried while too few replicas
 * answer, with the batch in hand, as a database outage is; a failure of
 * the connection gives the batch up to redelivery.
 */
static int replicated(sk_writer *w, entry *const *es, size_t n)
{
    const sk_redis *rd = w->cfg.redis;
    stream *s = &w->streams[es[0]->stream];
    const char **argv = w->args;
    int argc = 0;
    argv[argc++] = "XCLAIM";
    argv[argc++] = s->keys[SK_K_ORDERS];
    argv[argc++] = SK_GROUP;
    argv[argc++] = w->consumer;
    argv[argc++] = "0";
    for (size_t i = 0; i < n; i++) argv[argc++] = es[i]->id;
    argv[argc++] = "JUSTID";
    int rc = -1, told = 0;
    while (!atomic_load(&w->stop)) {
        redisReply *r;
        long long acks;
        dlock_status st = sk_acked_run(rd, s->keys[SK_K_ORDERS], argc, argv, NULL, &r, &acks);
        /* Not the library's call: dlock_last_error() would name an older,
         * unrelated failure (a harmless BUSYGROUP, say). */
        if (!reply_ok_why(w, s, st, r, "XCLAIM before WAIT", sk_acked_error())) break;
        freeReplyObject(r);
        if (acks >= rd->replicas) {
            rc = 0;
            break;
        }
        if (!told++)
            sk_log(SK_LOG_WARN, "writer: %lld of %d replicas have %s; holding the batch", acks < 0 ? 0 : acks,
                   rd->replicas, s->keys[SK_K_ORDERS]);
    }
    return rc;
}

/* The entries es[0..n) of one stream (index si) out of a batch. */
static size_t of_stream(entry *e, const size_t *which, size_t m, size_t si, entry **es)
{
    size_t k = 0;
    for (size_t j = 0; j < m; j++)
        if (e[which[j]].stream == si) es[k++] = &e[which[j]];
    return k;
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
    sk_order *orders = w->orders;
    sk_persist_outcome *outcomes = w->outcomes;
    size_t *which = w->which;
    entry **es = w->es;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!e[i].valid) {
            if (dead_letter(w, &e[i], e[i].bad) != 0) return -1;
        } else if (e[i].deliveries > w->cfg.max_deliveries) {
            if (dead_letter(w, &e[i], "max_deliveries") != 0) return -1;
        } else {
            orders[m] = e[i].order;
            which[m++] = i;
        }
    }
    if (m == 0) return 0;
    if (w->cfg.redis->replicas > 0)
        for (size_t si = 0; si < w->nstreams; si++) {
            size_t k = of_stream(e, which, m, si, es);
            if (k && replicated(w, es, k) != 0) return -1;
        }
    if (w->stop_before) raise(SIGSTOP); /* test hook: stop with the batch read, not committed */
    /* A database that fails is retried here, with the batch in hand,
     * rather than by redelivery: redeliveries are counted, and an
     * outage must not turn good orders into dead letters. */
    long pause = 100;
    for (;;) {
        sk_result r = w->cfg.db->ops->orders_persist(w->cfg.db, orders, m, sk_unix_now(), outcomes);
        if (r == SK_OK) break;
        SK_LOG_REPEATED(SK_LOG_ERROR, "writer: batch of %zu not persisted (%s); retrying", m, sk_result_code(r));
        if (atomic_load(&w->stop)) return -1;
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
    for (size_t si = 0; si < w->nstreams; si++) {
        size_t k = of_stream(e, which, m, si, es);
        if (k && ack(w, &w->streams[si], es, k) != 0) return -1;
    }
    return 0;
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
    char from[48] = "0", count[16];
    snprintf(count, sizeof count, "%d", w->cfg.batch);
    for (;;) {
        redisReply *r;
        dlock_status st = sk_redis_cmd(w->cfg.redis, s->keys[SK_K_ORDERS], 0, &r, "XREADGROUP", "GROUP", SK_GROUP,
                                       w->consumer, "COUNT", count, "STREAMS", s->keys[SK_K_ORDERS], from, NULL);
        if (!reply_ok(w, s, st, r, "XREADGROUP pending")) return -1;
        size_t n = 0;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->type == REDIS_REPLY_ARRAY &&
            r->element[0]->elements == 2)
            collect(w, si, r->element[0]->element[1], e, (size_t)w->cfg.batch, &n);
        int rc = n ? handle(w, e, n, 1) : 0;
        if (n) snprintf(from, sizeof from, "%s", e[n - 1].id);
        freeReplyObject(r);
        if (rc != 0) {
            reset(s);
            return -1;
        }
        if (n == 0) break;
    }
    s->drained = 1;
    return 0;
}

/* Take over entries idle longer than claim_idle_ms, whoever holds them.
 * Never resent: a lost reply leaves claimed entries in our pending list,
 * which the stream's reset has us re-read. */
static int claim_idle(sk_writer *w, size_t si, entry *e)
{
    stream *s = &w->streams[si];
    char cursor[48] = "0-0", idle[24], count[16];
    snprintf(idle, sizeof idle, "%ld", w->cfg.claim_idle_ms);
    snprintf(count, sizeof count, "%d", w->cfg.batch);
    for (int round = 0; round < CLAIM_ROUNDS; round++) {
        redisReply *r;
        dlock_status st = sk_redis_cmd(w->cfg.redis, s->keys[SK_K_ORDERS], DLOCK_REDIS_ONCE, &r, "XAUTOCLAIM",
                                       s->keys[SK_K_ORDERS], SK_GROUP, w->consumer, idle, cursor, "COUNT", count, NULL);
        if (!reply_ok(w, s, st, r, "XAUTOCLAIM")) return -1;
        size_t n = 0;
        int more = 0;
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[0]->type == REDIS_REPLY_STRING) {
            snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
            more = strcmp(cursor, "0-0") != 0;
            collect(w, si, r->element[1], e, (size_t)w->cfg.batch, &n);
        }
        if (n) sk_log(SK_LOG_INFO, "writer: claimed %zu idle orders of %s", n, s->keys[SK_K_ORDERS]);
        int rc = handle(w, e, n, 1);
        freeReplyObject(r);
        if (rc != 0) {
            reset(s);
            return -1;
        }
        if (!more) break;
    }
    return 0;
}

/* The streams of an XREADGROUP reply ([[key, entries]...]) into e[*n...]. */
static void collect_streams(sk_writer *w, const redisReply *r, entry *e, size_t cap, size_t *n)
{
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *sr = r->element[i];
        if (sr->type != REDIS_REPLY_ARRAY || sr->elements != 2 || sr->element[0]->type != REDIS_REPLY_STRING) continue;
        for (size_t j = 0; j < w->nstreams; j++)
            if (strcmp(sr->element[0]->str, w->streams[j].keys[SK_K_ORDERS]) == 0)
                collect(w, j, sr->element[1], e, cap, n);
    }
}

/* Whether a stream takes part in reading new entries. */
static int readable(const stream *s)
{
    return s->ready && s->drained;
}

/* Persist what a read brought; on failure its streams re-read their
 * pending lists (the entries are delivered to us), counting deliveries. */
static int persist_read(sk_writer *w, entry *e, size_t n)
{
    if (handle(w, e, n, 0) == 0) return 0;
    for (size_t i = 0; i < n; i++) reset(&w->streams[e[i].stream]);
    return -1;
}

/* One server or Sentinel: new entries from every stream in one blocking
 * read, on a connection of its own while it blocks. Never resent: a lost
 * reply delivered entries to us that only a re-read of our pending lists
 * finds. *got: how many entries it brought. */
static int read_all(sk_writer *w, entry *e, size_t *got)
{
    size_t idx[STREAMS_MAX], k = 0;
    for (size_t i = 0; i < w->nstreams; i++)
        if (readable(&w->streams[i])) idx[k++] = i;
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
    redisReply *r;
    dlock_status st =
        sk_redis_argv(w->cfg.redis, argv[9], DLOCK_REDIS_BLOCKING | DLOCK_REDIS_ONCE, argc, argv, NULL, &r);
    if (!reply_ok(w, NULL, st, r, "XREADGROUP")) return -1;
    size_t n = 0;
    collect_streams(w, r, e, (size_t)w->cfg.batch * k, &n);
    *got = n;
    int rc = persist_read(w, e, n);
    freeReplyObject(r);
    return rc;
}

/* Take the vouchers HTTP threads noted and mark their streams hot. */
static void take_hints(sk_writer *w)
{
    for (int i = 0; i < HINTS; i++) {
        int64_t vid = atomic_exchange(&w->hint[i], 0);
        for (size_t j = 0; vid && j < w->nstreams; j++)
            if (w->streams[j].vid == vid) w->streams[j].hot = 1;
    }
}

static int hints_pending(sk_writer *w)
{
    for (int i = 0; i < HINTS; i++)
        if (atomic_load(&w->hint[i])) return 1;
    return 0;
}

/* `ms` from now on the monotonic clock, which `woken` waits on (see
 * sk_writer_start: why not the wall clock). */
static struct timespec deadline_in(long ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Sleep until an HTTP thread notes an order, or `ms` pass. `sleeping` is
 * set before hints are looked at, and sk_writer_order() stores its hint
 * before it looks at `sleeping`, so one of the two always sees the other:
 * no order waits out the whole sleep. */
static void wait_for_orders(sk_writer *w, long ms)
{
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->sleeping, 1);
    if (!hints_pending(w) && !atomic_load(&w->stop) && !atomic_load(&w->notified)) {
        struct timespec until = deadline_in(ms);
        pthread_cond_timedwait(&w->woken, &w->mu, &until);
    }
    atomic_store(&w->sleeping, 0);
    pthread_mutex_unlock(&w->mu);
}

/* Redis Cluster: no command may span slots, so each hot stream is read on
 * its own, without blocking (COUNT bounds each read); all of them every
 * block_ms, for orders other instances took. With nothing read, wait for
 * the next order this process takes. *got: how many entries it brought. */
static int read_each(sk_writer *w, entry *e, size_t *got)
{
    int64_t now = sk_mono_ns();
    if (now - w->last_sweep >= (int64_t)w->cfg.block_ms * 1000000LL) {
        for (size_t i = 0; i < w->nstreams; i++) w->streams[i].hot = 1;
        w->last_sweep = now;
    }
    take_hints(w);
    redisReply *reps[STREAMS_MAX];
    size_t nrep = 0, n = 0;
    char count[16];
    snprintf(count, sizeof count, "%d", w->cfg.batch);
    int rc = 0;
    for (size_t i = 0; i < w->nstreams; i++) {
        stream *s = &w->streams[i];
        if (!s->hot || !readable(s)) continue;
        size_t before = n;
        redisReply *r;
        dlock_status st =
            sk_redis_cmd(w->cfg.redis, s->keys[SK_K_ORDERS], DLOCK_REDIS_ONCE, &r, "XREADGROUP", "GROUP", SK_GROUP,
                         w->consumer, "COUNT", count, "STREAMS", s->keys[SK_K_ORDERS], ">", NULL);
        if (!reply_ok(w, s, st, r, "XREADGROUP")) {
            rc = -1;
            continue;
        }
        collect_streams(w, r, e, (size_t)w->cfg.batch * STREAMS_MAX, &n);
        reps[nrep++] = r;
        s->hot = n > before; /* read it again until it has nothing new */
    }
    *got = n;
    if (n && persist_read(w, e, n) != 0) rc = -1;
    for (size_t i = 0; i < nrep; i++) freeReplyObject(reps[i]);
    if (n == 0 && rc == 0) {
        int64_t next = w->last_sweep + (int64_t)w->cfg.block_ms * 1000000LL - sk_mono_ns();
        if (next > 0) wait_for_orders(w, (long)(next / 1000000LL) + 1);
    }
    return rc;
}

/* Sum of the group's lag and pending over all streams, for /metrics. */
static void update_lag(sk_writer *w)
{
    long long lag = 0, pending = 0;
    for (size_t i = 0; i < w->nstreams; i++) {
        stream *s = &w->streams[i];
        redisReply *r;
        if (sk_redis_cmd(w->cfg.redis, s->keys[SK_K_ORDERS], 0, &r, "XINFO", "GROUPS", s->keys[SK_K_ORDERS], NULL) !=
            DLOCK_OK) {
            if (r) freeReplyObject(r);
            continue;
        }
        for (size_t g = 0; r->type == REDIS_REPLY_ARRAY && g < r->elements; g++) {
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

/* Wait `ms` unless told to stop (writer.h: why it lingers). Not cut short
 * by new orders: they are what it waits for. */
static void linger(sk_writer *w, long ms)
{
    struct timespec until = deadline_in(ms);
    pthread_mutex_lock(&w->mu);
    while (!atomic_load(&w->stop) && pthread_cond_timedwait(&w->woken, &w->mu, &until) == 0) {}
    pthread_mutex_unlock(&w->mu);
}

/* The loop described at the top of this file. */
static void *run(void *arg)
{
    pthread_setname_np(pthread_self(), "sk-writer");
    sk_writer *w = arg;
    entry *e = w->e;
    while (!atomic_load(&w->stop)) {
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
        for (size_t i = 0; i < w->nstreams; i++) {
            stream *s = &w->streams[i];
            if (!s->ready && ensure_group(w, s) != 0) failed = 1;
            else if (s->ready && !s->drained && drain_own(w, i, e) != 0) failed = 1;
        }
        long claim_every = w->cfg.claim_idle_ms / 2 < 1000 ? w->cfg.claim_idle_ms / 2 : 1000;
        if (now - w->last_claim >= (int64_t)claim_every * 1000000LL) {
            for (size_t i = 0; i < w->nstreams; i++)
                if (readable(&w->streams[i]) && claim_idle(w, i, e) != 0) failed = 1;
            w->last_claim = now;
        }
        if (now - w->last_lag >= LAG_NS) {
            update_lag(w);
            w->last_lag = now;
        }
        size_t got = 0;
        if ((w->cfg.redis->cluster ? read_each(w, e, &got) : read_all(w, e, &got)) != 0) failed = 1;
        if (failed) sk_sleep_ms(100);
        else if (w->cfg.linger_ms > 0 && got > 0 && got < (size_t)w->cfg.batch) linger(w, w->cfg.linger_ms);
    }
    return NULL;
}

static void free_arrays(sk_writer *w)
{
    free(w->e);
    free(w->orders);
    free(w->outcomes);
    free(w->which);
    free(w->es);
    free(w->args);
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
    if (w->cfg.linger_ms == 0) w->cfg.linger_ms = 20;
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
    atomic_init(&w->stop, 0);
    atomic_init(&w->notified, 0);
    atomic_init(&w->sleeping, 0);
    for (int i = 0; i < HINTS; i++) atomic_init(&w->hint[i], 0);
    pthread_mutex_init(&w->mu, NULL);
    /* Its timed waits count on the monotonic clock: on the wall clock, a
     * step back (an NTP correction, a VM's clock set right) would hold a
     * wait for orders, or the linger after a short batch, for as long as
     * the step, with accepted orders not reaching the database. */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&w->woken, &attr);
    pthread_condattr_destroy(&attr);
    w->cap = (size_t)w->cfg.batch * STREAMS_MAX;
    w->e = malloc(w->cap * sizeof *w->e);
    w->orders = malloc(w->cap * sizeof *w->orders);
    w->outcomes = malloc(w->cap * sizeof *w->outcomes);
    w->which = malloc(w->cap * sizeof *w->which);
    w->es = malloc(w->cap * sizeof *w->es);
    w->args = malloc((2 * w->cap + 6) * sizeof *w->args);
    if (!w->e || !w->orders || !w->outcomes || !w->which || !w->es || !w->args) goto fail;
    if (dlock_script_new(cfg->redis->client, sk_lua_seckill_ack, &w->ack) != DLOCK_OK) goto fail;
    if (pthread_create(&w->thread, NULL, run, w) != 0) goto fail;
    return w;
fail:
    dlock_script_free(w->ack);
    pthread_cond_destroy(&w->woken);
    pthread_mutex_destroy(&w->mu);
    free_arrays(w);
    free(w);
    return NULL;
}

/* Wake the thread if it waits for orders. */
static void wake(sk_writer *w)
{
    if (!atomic_load(&w->sleeping)) return;
    pthread_mutex_lock(&w->mu);
    pthread_cond_signal(&w->woken);
    pthread_mutex_unlock(&w->mu);
}

/* A flag, not a wake-up on one server: the writer looks within one BLOCK
 * period. */
void sk_writer_notify(sk_writer *w)
{
    atomic_store(&w->notified, 1);
    wake(w);
}

/* Only a cluster writer waits for these; elsewhere the blocking read
 * wakes up by itself. */
void sk_writer_order(sk_writer *w, int64_t voucher_id)
{
    if (!w->cfg.redis->cluster) return;
    atomic_store(&w->hint[(uint64_t)voucher_id % HINTS], voucher_id);
    wake(w);
}

/* Entries read but not committed stay pending for the next start. */
void sk_writer_stop(sk_writer *w)
{
    if (!w) return;
    atomic_store(&w->stop, 1);
    pthread_mutex_lock(&w->mu);
    pthread_cond_signal(&w->woken);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    dlock_script_free(w->ack);
    pthread_cond_destroy(&w->woken);
    pthread_mutex_destroy(&w->mu);
    free_arrays(w);
    free(w);
}
