/* The torture checker (see check.h). */
#include "check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* acq_start: when its acquisition began, the earliest it can have been
 * granted; for a `dlock lock` hold, when that dlock was started.
 * pause_from: from when a pause of its holder explains an overlap: the
 * acquisition's start for a library client (a pause after the library's
 * last look at the clock, before the call returned, can leave it holding
 * a hold whose lease ran out, reported lost at the first check), but
 * COMMAND's start for `dlock lock`, which must not start COMMAND on a
 * lease that ran out while it was paused. */
typedef struct hold {
    int pid, holder, client;
    long n;
    char mode;
    const char *name;
    int64_t acq_start, pause_from, start, end;
    uint64_t token;
} hold;

static void note(tt_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(tt_report *r, const char *fmt, ...)
{
    if (r->n_first >= (int)(sizeof r->first / sizeof r->first[0])) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->first[r->n_first++], sizeof r->first[0], fmt, ap);
    va_end(ap);
}

/* Faults after which the lock promises nothing for holds they touch: the
 * holder's process paused (it cannot know its lease ran out), and the
 * server losing state (a restart without persistence, a failover to a
 * replica without the last writes, its clock jumping forward). A
 * partition, latency, a killed client, a restart with AOF or a clock
 * jumping back explain nothing: the lock must survive those. */
static int is_pause(const tt_event *f)
{
    return strcmp(f->name, "pause") == 0;
}

static int loses_server_state(const tt_event *f)
{
    return strcmp(f->name, "restart") == 0 || strcmp(f->name, "failover") == 0 || strcmp(f->name, "clock-forward") == 0;
}

/* Whether a fault explains why hold y began while hold x (which began
 * first) was still believed. "Began" is when the acquire returned, which
 * need not be the order of the grants: y's acquire may start before x's
 * and return after it, its grant made early and its answer late (a
 * RedLock attempt that waits out a master behind a partition, a `dlock`
 * whose COMMAND starts late). So a loss of server state explains the
 * overlap when it falls after the earlier of the two acquisitions began
 * (whichever was granted first may have had its key wiped) and before y
 * returned. */
static int explains(const tt_event *faults, size_t nf, const hold *x, const hold *y)
{
    int64_t first = x->acq_start < y->acq_start ? x->acq_start : y->acq_start;
    for (size_t i = 0; i < nf; i++) {
        const tt_event *f = &faults[i];
        /* A clock jump's t1 is when its servers were seen on the new
         * clock (the harness polls TIME): until then any lease may end. */
        int64_t end = f->t1;
        if (is_pause(f) && f->holder == x->holder && f->t0 <= x->end && end >= x->pause_from) return 1;
        if (loses_server_state(f) && f->t0 <= y->start && end >= first) return 1;
    }
    return 0;
}

static int by_name_start(const void *a, const void *b)
{
    const hold *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* The holds: one per successful acquire (per name, for a multi-lock),
 * ending at the start of its last step. */
static hold *build_holds(const tt_event *ev, size_t n, size_t *nh)
{
    hold *h = calloc(n ? n : 1, sizeof *h);
    *nh = 0;
    if (!h) return NULL;
    for (size_t i = 0; i < n; i++) {
        const tt_event *e = &ev[i];
        if (e->kind != TT_ACQUIRE || strcmp(e->result, "ok") != 0) continue;
        hold *x = &h[(*nh)++];
        int64_t pause_from = e->pid != e->holder ? e->t1 : e->t0; /* a COMMAND's record: see hold */
        *x = (hold){e->pid, e->holder, e->client, e->hold, e->mode, e->name, e->t0, pause_from, e->t1, e->t1, e->token};
    }
    /* Steps extend their hold: index holds by (pid, hold number, name). */
    for (size_t i = 0; i < n; i++) {
        const tt_event *e = &ev[i];
        if (e->kind != TT_STEP) continue;
        for (size_t k = 0; k < *nh; k++) {
            hold *x = &h[k];
            if (x->pid == e->pid && x->n == e->hold && strcmp(x->name, e->name) == 0) {
                if (e->t0 > x->end) x->end = e->t0;
                break;
            }
        }
    }
    qsort(h, *nh, sizeof *h, by_name_start);
    return h;
}

static long long meta(const tt_event *ev, size_t n, const char *what, const char *name, long long dflt)
{
    for (size_t i = 0; i < n; i++)
        if (ev[i].kind == TT_META && strcmp(ev[i].result, what) == 0 && strcmp(ev[i].name, name) == 0)
            return ev[i].value;
    return dflt;
}

/* Mutual exclusion and semaphore bounds over holds sorted by name, then
 * start. */
static void check_overlaps(const tt_event *ev, size_t n, const tt_event *faults, size_t nf, const hold *h, size_t nh,
                           tt_report *r)
{
    for (size_t j = 0; j < nh; j++) {
        const hold *y = &h[j];
        long permits = y->mode == TT_PERMIT ? (long)meta(ev, n, "permits", y->name, 1) : 0;
        long active = 0, unexplained = 0;
        for (size_t i = j; i-- > 0;) {
            const hold *x = &h[i];
            if (strcmp(x->name, y->name) != 0) break;
            if (x->end <= y->start) continue; /* over before y began */
            if (y->mode == TT_PERMIT) {
                if (x->mode != TT_PERMIT) continue;
                active++;
                if (!explains(faults, nf, x, y)) unexplained++;
                continue;
            }
            if (x->mode == TT_READ && y->mode == TT_READ) continue;
            int64_t len = (x->end < y->end ? x->end : y->end) - y->start;
            if (explains(faults, nf, x, y)) {
                r->overlaps_explained++;
                if (len > r->worst_explained_us) r->worst_explained_us = len;
            } else {
                r->overlaps_unexplained++;
                if (len > r->worst_unexplained_us) r->worst_unexplained_us = len;
                note(r, "overlap on '%s': pid %d (%c) held from %lld to %lld, pid %d (%c) from %lld (%lld us)", y->name,
                     x->pid, x->mode, (long long)x->start, (long long)x->end, y->pid, y->mode, (long long)y->start,
                     (long long)len);
            }
        }
        /* Too many holders: explained if, without the holds a fault
         * explains, there would have been a permit free for y. */
        if (y->mode == TT_PERMIT && active >= permits) {
            if (unexplained < permits) {
                r->excess_explained++;
            } else {
                r->excess_unexplained++;
                note(r, "'%s': %ld permits held when pid %d got one at %lld (%ld permits)", y->name, active + 1, y->pid,
                     (long long)y->start, permits);
            }
        }
    }
}

/* Tokens of exclusive holds: unique per name, and a hold whose
 * acquisition began after another hold ended has a greater token. Why
 * its acquisition's start, not its return: the token is drawn when the
 * server grants the lock, anywhere between the two. An attempt sent
 * before a partition can be granted at once and answered only after it
 * heals, when its lease has run out and another holder, granted later
 * with a greater token, has come and gone (the library then reports the
 * late hold lost at its first check, and the fenced resource refuses its
 * lower token). */
static void check_tokens(const hold *h, size_t nh, tt_report *r)
{
    for (size_t j = 0; j < nh; j++) {
        const hold *y = &h[j];
        if (y->mode != TT_EXCLUSIVE || y->token == 0) continue;
        for (size_t i = j; i-- > 0;) {
            const hold *x = &h[i];
            if (strcmp(x->name, y->name) != 0) break;
            if (x->mode != TT_EXCLUSIVE || x->token == 0) continue;
            if (x->token == y->token) {
                r->token_dups++;
                note(r, "'%s': token %llu handed to pid %d and pid %d", y->name, (unsigned long long)y->token, x->pid,
                     y->pid);
            } else if (x->end < y->acq_start && x->token > y->token) {
                r->token_order++;
                note(r, "'%s': token %llu (pid %d, asked from %lld) after token %llu (pid %d, ended %lld)", y->name,
                     (unsigned long long)y->token, y->pid, (long long)y->acq_start, (unsigned long long)x->token,
                     x->pid, (long long)x->end);
            }
        }
    }
}

/* The fenced counters: what the resource holds against the steps it
 * accepted. A step whose write landed but whose process died before it
 * recorded it makes the counter larger, never smaller. */
static void check_counters(const tt_event *ev, size_t n, tt_report *r)
{
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind != TT_META || strcmp(ev[i].result, "count") != 0) continue;
        long long accepted = 0;
        for (size_t k = 0; k < n; k++)
            if (ev[k].kind == TT_STEP && ev[k].mode == TT_EXCLUSIVE && strcmp(ev[k].result, "acc") == 0 &&
                strcmp(ev[k].name, ev[i].name) == 0)
                accepted++;
        if (ev[i].value < accepted) {
            r->lost_updates += accepted - ev[i].value;
            note(r, "'%s': counter %lld after %lld accepted increments", ev[i].name, ev[i].value, accepted);
        }
    }
}

/* Each latch: distinct counts handed out, every await that returned came
 * after the count-down that reached zero, and none returned on a latch
 * that never reached zero. */
static void check_latches(const tt_event *ev, size_t n, tt_report *r)
{
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind != TT_META || strcmp(ev[i].result, "latch") != 0) continue;
        const char *name = ev[i].name;
        long long left = meta(ev, n, "left", name, -1);
        r->latch_rounds++;
        int64_t zero_at = -1;
        for (size_t a = 0; a < n; a++) {
            const tt_event *d = &ev[a];
            if (d->kind != TT_COUNTDOWN || strcmp(d->name, name) != 0 || strcmp(d->result, "ok") != 0) continue;
            if (d->value == 0 && (zero_at < 0 || d->t0 < zero_at)) zero_at = d->t0;
            for (size_t b = a + 1; b < n; b++) {
                const tt_event *o = &ev[b];
                if (o->kind == TT_COUNTDOWN && strcmp(o->name, name) == 0 && strcmp(o->result, "ok") == 0 &&
                    o->value == d->value) {
                    r->latch_bad++;
                    note(r, "latch '%s': count %lld handed out twice", name, d->value);
                }
            }
        }
        for (size_t a = 0; a < n; a++) {
            const tt_event *w = &ev[a];
            if (w->kind != TT_AWAIT || strcmp(w->name, name) != 0 || strcmp(w->result, "ok") != 0) continue;
            if (left > 0 || (zero_at >= 0 && w->t1 < zero_at)) {
                r->latch_bad++;
                note(r, "latch '%s': await by pid %d returned at %lld before it reached zero", name, w->pid,
                     (long long)w->t1);
            }
        }
    }
}

/* seckill: each voucher verified, and none with fewer orders than 201s. */
static void check_sales(const tt_event *ev, size_t n, tt_report *r)
{
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind != TT_META || strcmp(ev[i].result, "created") != 0) continue;
        const char *name = ev[i].name;
        long long orders = meta(ev, n, "orders", name, -1), ok = meta(ev, n, "verified", name, 0);
        r->sales++;
        r->orders_acked += ev[i].value;
        if (orders < ev[i].value) {
            r->orders_lost += ev[i].value - (orders < 0 ? 0 : orders);
            note(r, "voucher %s: %lld orders answered 201, %lld in the database", name, ev[i].value, orders);
        }
        if (!ok) {
            r->sales_bad++;
            note(r, "voucher %s: seckill verify did not pass", name);
        }
    }
}

void tt_check(const tt_event *ev, size_t n, tt_report *r)
{
    memset(r, 0, sizeof *r);
    tt_event *faults = calloc(n ? n : 1, sizeof *faults);
    size_t nf = 0, nh = 0;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind == TT_FAULT && faults) faults[nf++] = ev[i];
        if (ev[i].kind == TT_STEP) {
            r->steps++;
            if (strcmp(ev[i].result, "rej") == 0) r->rejected++;
        }
    }
    r->faults = (long)nf;
    hold *h = build_holds(ev, n, &nh);
    r->holds = (long)nh;
    if (h && faults) {
        check_overlaps(ev, n, faults, nf, h, nh, r);
        check_tokens(h, nh, r);
    }
    check_counters(ev, n, r);
    check_latches(ev, n, r);
    check_sales(ev, n, r);
    free(h);
    free(faults);
}

long tt_violations(const tt_report *r)
{
    return r->overlaps_unexplained + r->excess_unexplained + r->token_dups + r->token_order + r->lost_updates +
           r->latch_bad + r->orders_lost + r->sales_bad;
}
