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
 */
#ifndef SECKILL_WRITER_H
#define SECKILL_WRITER_H

#include "db.h"
#include "rpool.h"

typedef struct sk_writer sk_writer;

typedef struct sk_writer_config {
    sk_db *db;
    sk_rpool *redis;         /* connections are made from it; the writer keeps its own */
    const char *consumer;    /* NULL: "HOSTNAME:PID" */
    long claim_idle_ms;      /* 0: 30000 */
    int max_deliveries;      /* 0: 5 */
    int batch;               /* 0: 256 entries per read and per transaction */
    int block_ms;            /* 0: 200, the longest a read waits for new orders */
} sk_writer_config;

/* Start the thread. NULL on failure (out of memory, thread creation). */
sk_writer *sk_writer_start(const sk_writer_config *cfg);

/* A voucher was created or warmed: look for new streams now, and re-create
 * consumer groups a restarted Redis lost. Cheap, callable from any thread. */
void sk_writer_notify(sk_writer *w);

/* Stop after the current batch and free everything. */
void sk_writer_stop(sk_writer *w);

#endif
