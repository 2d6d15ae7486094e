/*
 * The torture harness inside the test suite (docs/SAFETY.md): short runs
 * of tests/torture/dlock-torture. Three parts, one ctest entry each (the
 * DLOCK_TORTURE_PART environment variable):
 *
 *   teeth       the seeds' earlier locks must be caught: no lock, SETNX
 *               without an owner, check-then-delete, GETSET timestamps with
 *               skewed clocks (the default part);
 *   primitives  every primitive of the library and the CLI under pauses,
 *               kills, partitions and latency: no violation a fault does
 *               not explain;
 *   servers     the same under server faults: restarts with and without
 *               AOF, clock jumps, RedLock masters, Sentinel and Cluster
 *               failovers.
 *
 * Each run prints its seed; `dlock-torture --seed N --scenarios ...`
 * replays it. The long run is `make torture`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The harness binary, next to this one in torture/. */
static const char *torture_bin(void)
{
    static char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n <= 0) return "dlock-torture";
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    snprintf(slash + 1, path + sizeof path - slash - 1, "torture/dlock-torture");
    return path;
}

/* Run the harness on `scenarios` for `seconds` each; its exit status
 * (0: every scenario passed, every broken lock caught). Its report goes
 * to our output as it comes. */
static int torture(const char *scenarios, long seconds, unsigned long long seed)
{
    char cmd[PATH_MAX + 512];
    snprintf(cmd, sizeof cmd, "'%s' --scenarios %s --seconds %ld --seed %llu", torture_bin(), scenarios, seconds, seed);
    fflush(stdout);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static unsigned long long seed_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_nsec ^ (unsigned long long)ts.tv_sec ^ (unsigned long long)getpid() << 16;
}

/* A broken lock is caught within three runs of ten seconds, each with a
 * seed of its own (check-then-delete needs the lease to end exactly
 * between its check and its delete, and is caught in most runs, not all). */
static void caught(const char *scenario)
{
    unsigned long long seed = seed_now();
    for (int i = 0; i < 3; i++)
        if (torture(scenario, 10, seed + (unsigned long long)i) == 0) return;
    fail_msg("%s was not caught in three runs (seeds %llu to %llu)", scenario, seed, seed + 2);
}

static void checker_catches_no_lock_at_all(void **state)
{
    (void)state;
    caught("seed-nolock");
}

static void checker_catches_setnx_without_an_owner(void **state)
{
    (void)state;
    caught("seed-setnx");
}

static void checker_catches_check_then_delete_release(void **state)
{
    (void)state;
    caught("seed-checkdel");
}

static void checker_catches_getset_lock_with_skewed_clocks(void **state)
{
    (void)state;
    caught("seed-getset");
}

static void primitives_break_no_promise_under_client_faults(void **state)
{
    (void)state;
    assert_int_equal(torture("lock,threads,fair,fair-threads,rw,semaphore,psem,latch,multi", 6, seed_now()), 0);
}

static void locks_break_no_promise_under_server_faults(void **state)
{
    (void)state;
    assert_int_equal(torture("redlock,restart,restart-aof,clock,sentinel,cluster", 8, seed_now()), 0);
}

int main(void)
{
    const char *part = getenv("DLOCK_TORTURE_PART");
    const struct CMUnitTest teeth[] = {
        cmocka_unit_test(checker_catches_no_lock_at_all),
        cmocka_unit_test(checker_catches_setnx_without_an_owner),
        cmocka_unit_test(checker_catches_check_then_delete_release),
        cmocka_unit_test(checker_catches_getset_lock_with_skewed_clocks),
    };
    const struct CMUnitTest primitives[] = {
        cmocka_unit_test(primitives_break_no_promise_under_client_faults),
    };
    const struct CMUnitTest servers[] = {
        cmocka_unit_test(locks_break_no_promise_under_server_faults),
    };
    if (part && !strcmp(part, "primitives")) return cmocka_run_group_tests(primitives, NULL, NULL);
    if (part && !strcmp(part, "servers")) return cmocka_run_group_tests(servers, NULL, NULL);
    return cmocka_run_group_tests(teeth, NULL, NULL);
}
