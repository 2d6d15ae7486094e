/*
 * The torture checker (tests/torture/check.c) on histories written by
 * hand: which overlaps a fault explains and which are violations. The
 * torture runs (test_torture) prove the checker catches broken locks;
 * these prove, case by case, where it draws the line, so that a change
 * that makes it more lenient or stricter than the rule in docs/SAFETY.md
 * fails here.
 *
 * Times are microseconds; one name, exclusive holds, a fenced counter that
 * accepted every step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "check.h"

#define NAME "redlock-L"

typedef struct history {
    tt_event ev[32];
    size_t n;
    long accepted;
} history;

/* An event of process `pid`, whose lock is held by `holder` (itself, or
 * for a `dlock lock` COMMAND the dlock process). */
static void add_by(history *h, char kind, int pid, int holder, long hold, int64_t t0, int64_t t1, const char *result,
                   uint64_t token)
{
    tt_event e = {kind, TT_EXCLUSIVE, pid, holder, 1, hold, NAME, t0, t1, "", token, 0};
    snprintf(e.result, sizeof e.result, "%s", result);
    if (kind == TT_STEP && !strcmp(result, "acc")) h->accepted++;
    h->ev[h->n++] = e;
}

static void add(history *h, char kind, int pid, long hold, int64_t t0, int64_t t1, const char *result, uint64_t token)
{
    add_by(h, kind, pid, pid, hold, t0, t1, result, token);
}

static void fault_on(history *h, const char *what, int holder, const char *target, int64_t t0, int64_t t1)
{
    tt_event e = {TT_FAULT, TT_NONE, 1, holder, 0, 0, "", t0, t1, "", 0, 0};
    snprintf(e.name, sizeof e.name, "%s", what);
    snprintf(e.result, sizeof e.result, "%s", target);
    h->ev[h->n++] = e;
}

static void fault(history *h, const char *what, const char *target, int64_t t0, int64_t t1)
{
    fault_on(h, what, 0, target, t0, t1);
}

static tt_report check(history *h)
{
    tt_event meta = {TT_META, TT_NONE, 1, 0, 0, 0, NAME, 0, 0, "count", 0, h->accepted};
    h->ev[h->n++] = meta;
    tt_report r;
    tt_check(h->ev, h->n, &r);
    return r;
}

/* Two holds as a RedLock run left them: pid 20 began waiting at 100 and
 * was granted early (its answer then waited out a master behind a
 * partition: it returns at 2000); pid 10, a `dlock` started at 1900,
 * returns at 1950 with a greater token, while 20 still believes it holds.
 * Sorted by their returns, 10 comes first, but 20 was granted first. */
static void overlap(history *h)
{
    add(h, TT_ACQUIRE, 20, 1, 100, 2000, "ok", 500);
    add(h, TT_ACQUIRE, 10, 1, 1900, 1950, "ok", 900);
    add(h, TT_STEP, 10, 1, 1960, 1961, "acc", 900);
    add(h, TT_STEP, 20, 1, 2010, 2011, "rej", 500);
    add(h, TT_STEP, 10, 1, 2080, 2081, "acc", 900);
}

static void a_server_restart_explains_an_overlap_whose_later_return_was_granted_first(void **state)
{
    (void)state;
    history h = {0};
    overlap(&h);
    /* Before 10's acquisition began, after 20's: it may have wiped 20's
     * key, which is how 10 got a majority. */
    fault(&h, "restart", "server2", 1800, 1830);
    tt_report r = check(&h);
    assert_int_equal(r.overlaps_explained, 1);
    assert_int_equal(r.overlaps_unexplained, 0);
    assert_int_equal(tt_violations(&r), 0);
}

static void an_overlap_with_no_fault_is_a_violation(void **state)
{
    (void)state;
    history h = {0};
    overlap(&h);
    tt_report r = check(&h);
    assert_int_equal(r.overlaps_unexplained, 1);
    assert_true(tt_violations(&r) > 0);
}

/* A restart that ended before either acquisition began wiped nothing
 * either of them was granted. */
static void a_restart_before_both_acquisitions_explains_nothing(void **state)
{
    (void)state;
    history h = {0};
    overlap(&h);
    fault(&h, "restart", "server2", 40, 90);
    tt_report r = check(&h);
    assert_int_equal(r.overlaps_unexplained, 1);
}

/* A restart after both holds began cannot have let the later one in. */
static void a_restart_after_both_holds_began_explains_nothing(void **state)
{
    (void)state;
    history h = {0};
    overlap(&h);
    fault(&h, "restart", "server2", 2050, 2070);
    tt_report r = check(&h);
    assert_int_equal(r.overlaps_unexplained, 1);
}

/* Faults the lock must survive explain nothing, whenever they come. */
static void a_partition_or_a_restart_with_aof_explains_nothing(void **state)
{
    (void)state;
    history h = {0};
    overlap(&h);
    fault(&h, "partition", "slot1", 1500, 2100);
    fault(&h, "restart-aof", "server2", 1800, 1830);
    tt_report r = check(&h);
    assert_int_equal(r.overlaps_unexplained, 1);
}

/* A hold of `dlock lock` (dlock 10 started at 1000, its COMMAND 11
 * started at 1950 and stepped until 2080), then a library client's that
 * began while it was still believed. */
static void command_then_library(history *h)
{
    add_by(h, TT_ACQUIRE, 11, 10, 1, 1000, 1950, "ok", 500);
    add_by(h, TT_STEP, 11, 10, 1, 1960, 1961, "acc", 500);
    add(h, TT_ACQUIRE, 20, 1, 1970, 2000, "ok", 900);
    add(h, TT_STEP, 20, 1, 2010, 2011, "acc", 900);
    add_by(h, TT_STEP, 11, 10, 1, 2080, 2081, "rej", 500);
}

/* dlock paused while COMMAND runs cannot stop it in time: the holder's
 * limit, explained. */
static void a_pause_of_dlock_while_its_command_runs_explains_the_overlap(void **state)
{
    (void)state;
    history h = {0};
    command_then_library(&h);
    fault_on(&h, "pause", 10, "slot0", 1955, 2050);
    tt_report r = check(&h);
    assert_int_equal(r.overlaps_explained, 1);
    assert_int_equal(r.overlaps_unexplained, 0);
}

/* dlock paused before it started COMMAND must not start it on a lease
 * that ran out meanwhile: no excuse, although its acquisition (counted
 * from dlock's start, for the server's faults) was under way. */
static void a_pause_of_dlock_before_its_command_started_explains_nothing(void **state)
{
    (void)state;
    history h = {0};
    command_then_library(&h);
    fault_on(&h, "pause", 10, "slot0", 1100, 1900);
    tt_report r = check(&h);
    assert_int_equal(r.overlaps_unexplained, 1);
}

/* A library client paused inside its acquire call is given a hold whose
 * lease ran out (the library reports it lost at the first check): the
 * holder's limit, explained. */
static void a_pause_inside_a_library_acquisition_explains_the_overlap(void **state)
{
    (void)state;
    history h = {0};
    add(&h, TT_ACQUIRE, 10, 1, 1000, 1950, "ok", 500);
    add(&h, TT_STEP, 10, 1, 1960, 1961, "acc", 500);
    add(&h, TT_ACQUIRE, 20, 1, 1970, 2000, "ok", 900);
    add(&h, TT_STEP, 20, 1, 2010, 2011, "acc", 900);
    add(&h, TT_STEP, 10, 1, 2080, 2081, "rej", 500);
    fault_on(&h, "pause", 10, "slot0", 1100, 1900);
    tt_report r = check(&h);
    assert_int_equal(r.overlaps_explained, 1);
    assert_int_equal(r.overlaps_unexplained, 0);
}

/* Pid 20 asked at 1000, was granted then with token 500 and answered
 * only at 3000 (a partition held its reply back); its lease ran out
 * meanwhile, and pid 10 held the lock from 1500 to 1700 with token 900.
 * 20's hold returned after 10's ended, but was granted before: its lower
 * token breaks no promise. (Seen in a torture run's clock scenario, which
 * the checker first judged by the returns.) */
static void a_hold_granted_early_and_answered_late_may_carry_a_lower_token(void **state)
{
    (void)state;
    history h = {0};
    add(&h, TT_ACQUIRE, 20, 1, 1000, 3000, "ok", 500);
    add(&h, TT_ACQUIRE, 10, 1, 1500, 1600, "ok", 900);
    add(&h, TT_STEP, 10, 1, 1700, 1701, "acc", 900);
    add(&h, TT_RELEASE, 10, 1, 1800, 1801, "ok", 0);
    add(&h, TT_RELEASE, 20, 1, 3010, 3011, "lost", 0);
    tt_report r = check(&h);
    assert_int_equal(r.token_order, 0);
    assert_int_equal(tt_violations(&r), 0);
}

/* The same two holds, but 20 asked only at 1750, after 10's last step:
 * its grant came after 10's, so a lower token is a broken fence. */
static void a_hold_asked_for_after_another_ended_needs_a_greater_token(void **state)
{
    (void)state;
    history h = {0};
    add(&h, TT_ACQUIRE, 20, 1, 1750, 3000, "ok", 500);
    add(&h, TT_ACQUIRE, 10, 1, 1500, 1600, "ok", 900);
    add(&h, TT_STEP, 10, 1, 1700, 1701, "acc", 900);
    add(&h, TT_RELEASE, 10, 1, 1800, 1801, "ok", 0);
    add(&h, TT_RELEASE, 20, 1, 3010, 3011, "lost", 0);
    tt_report r = check(&h);
    assert_int_equal(r.token_order, 1);
    assert_true(tt_violations(&r) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_server_restart_explains_an_overlap_whose_later_return_was_granted_first),
        cmocka_unit_test(an_overlap_with_no_fault_is_a_violation),
        cmocka_unit_test(a_restart_before_both_acquisitions_explains_nothing),
        cmocka_unit_test(a_restart_after_both_holds_began_explains_nothing),
        cmocka_unit_test(a_partition_or_a_restart_with_aof_explains_nothing),
        cmocka_unit_test(a_pause_of_dlock_while_its_command_runs_explains_the_overlap),
        cmocka_unit_test(a_pause_of_dlock_before_its_command_started_explains_nothing),
        cmocka_unit_test(a_pause_inside_a_library_acquisition_explains_the_overlap),
        cmocka_unit_test(a_hold_granted_early_and_answered_late_may_carry_a_lower_token),
        cmocka_unit_test(a_hold_asked_for_after_another_ended_needs_a_greater_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
