/*
 * The torture checker: reads what the clients recorded and what the
 * harness did to them, and says whether any promise was broken.
 *
 * Promises checked, per object name:
 *  - mutual exclusion: no two holds overlap where one is exclusive (a
 *    lock, a write hold), and no more permits are held at once than the
 *    semaphore has. A hold runs from the moment its acquire returned to
 *    the start of the last step it took while it believed it held the
 *    lock. An overlap is *explained* when a fault that the lock does not
 *    claim to survive happened to the earlier holder or to the server
 *    between the two (see tt_explains); any other overlap is a violation;
 *  - fencing tokens: unique, and rising with the order of the holds;
 *  - no lost update: every step is a read-modify-write of a counter at a
 *    fenced resource, so the counter must equal the steps it accepted,
 *    overlap or not (a stale holder's write is refused by its token);
 *  - the latch opens once, at zero: no await returns before the
 *    count-down that reached zero, and no count is handed out twice;
 *  - seckill: every voucher passes `seckill verify` (no oversell, one
 *    order per user, stock adds up, Redis agrees with the database), and
 *    holds at least as many orders as buyers were answered 201.
 */
#ifndef DLOCK_TORTURE_CHECK_H
#define DLOCK_TORTURE_CHECK_H

#include "history.h"

/* Meta lines (kind 'M', in meta.log): facts the harness records about a
 * scenario for the checker. `result` says which. */
#define TT_META 'M'

typedef struct tt_report {
    long holds;           /* acquisitions that succeeded */
    long steps, rejected; /* steps taken, and refused by the fenced resource */
    long faults;
    long overlaps_explained, overlaps_unexplained;
    int64_t worst_explained_us, worst_unexplained_us;
    long token_dups, token_order;
    long lost_updates;
    long excess_explained, excess_unexplained; /* semaphore holders above permits */
    long latch_rounds, latch_bad;
    long orders_acked, orders_lost; /* seckill: 201 answers, and those not in the database */
    long sales, sales_bad;          /* seckill: vouchers verified, and failing seckill verify */
    char first[6][240];             /* the first violations, described */
    int n_first;
} tt_report;

/* Check the events of one scenario run (histories, faults and meta lines
 * together) into *r. */
void tt_check(const tt_event *ev, size_t n, tt_report *r);

/* How many promises were broken in *r (unexplained overlaps and excess,
 * duplicate or disordered tokens, lost updates, latch errors). */
long tt_violations(const tt_report *r);

#endif
