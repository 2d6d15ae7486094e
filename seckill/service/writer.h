/*
 * writer.h -- the order writer: one thread that moves accepted orders from
 * the voucher streams into the database.
 *
 * It reads as consumer `consumer` of group "seckill-writers", persists each
 * batch in one transaction, and XACKs only after the commit, so a crash at
 * any point loses nothing: at start it re-reads its own pending list
 * (XREADGROUP ... 0), and it claims entries other consumers left idle for
 * claim_idle_ms (XAUTOCLAIM; a dead process's). The database's idempotent
 * insert makes every redelivery harmless. An entry delivered more than
 * max_deliveries times, or one that cannot be parsed, goes to the voucher's
 * dead-letter stream instead of blocking the rest.
 *
 * How it reads: on one server or under Sentinel, one XREADGROUP ... BLOCK
 * over every followed stream. On Redis Cluster a command may not span
 * slots, and each voucher is in its own slot: it reads stream by stream
 * without blocking, the streams of vouchers this process just sold
 * (sk_writer_order) at once, all of them every block_ms (orders taken by
 * other instances, whose own writers normally read them first).
 *
 * Why it lingers: a read returns as soon as one entry is there, so under a
 * steady stream of orders every read would bring a few and each would cost
 * a commit (an fdatasync) and an acknowledgement of its own. After a read
 * that was not a full batch the writer waits linger_ms before reading
 * again, so that the next one is fuller; an order's 201 does not wait for
 * it, only the moment GET /api/orders says "created" instead of "pending".
 *
 * With replica acks (sk_redis.replicas), a batch is committed only once
 * that many replicas have it (acked.h), so the database never holds an
 * order a failover can take out of Redis.
 */
#ifndef SECKILL_WRITER_H
#define SECKILL_WRITER_H

#include <stdint.h>

#include "skredis.h"
#include "store/db.h"

typedef struct sk_writer sk_writer;

typedef struct sk_writer_config {
    sk_db *db;
    const sk_redis *redis; /* routed commands; BLOCK reads get a connection of their own */
    const char *consumer;  /* NULL: "HOSTNAME:PID" */
    long claim_idle_ms;    /* 0: 30000 */
    int max_deliveries;    /* 0: 5 */
    int batch;             /* 0: 256 entries per read and per transaction */
    int block_ms;          /* 0: 200, the longest a read waits for new orders */
    int linger_ms;         /* 0: 20; < 0: none. After a read that was not a
                                full batch, wait this long before the next */
} sk_writer_config;

/* Load its script and start the thread. NULL on failure (Redis refused
 * the script: see dlock_last_error(); out of memory; threads). */
sk_writer *sk_writer_start(const sk_writer_config *cfg);

/* A voucher was created or warmed: look for new streams now, and re-create
 * consumer groups a restarted Redis lost. Cheap, callable from any thread. */
void sk_writer_notify(sk_writer *w);

/* An order for `voucher_id` is in its stream: on a cluster, read that
 * stream now. Cheap (an atomic store), callable from any thread. */
void sk_writer_order(sk_writer *w, int64_t voucher_id);

/* Stop after the current batch and free everything. */
void sk_writer_stop(sk_writer *w);

#endif
