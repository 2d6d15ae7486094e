/*
 * The harness's own promise: no redis-server outlives the test that
 * started it, whether the test failed half-way (the suite teardown stops
 * it), the program exited (atexit) or was killed outright (the kernel,
 * through PR_SET_PDEATHSIG). Orphaned servers would pile up on the
 * machine and hold ports and memory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Alive and not a zombie (an orphan killed outright may wait for a
 * reaper that never comes, in a container). */
static int alive(pid_t pid)
{
    if (kill(pid, 0) != 0) return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close = strrchr(buf, ')');
    return !(close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X'));
}

static int gone_within(pid_t pid, long ms)
{
    long long until = th_now_ms() + ms;
    while (alive(pid) && th_now_ms() < until) usleep(10000);
    return !alive(pid);
}

/* A test that fails before its th_redis_stop(): the suite teardown's
 * th_redis_stop_all() stops the server by PID. */
static void server_a_failed_test_left_running_is_stopped_by_the_teardown(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    pid_t pid = r.pid;
    assert_true(alive(pid));
    th_redis_stop_all();
    assert_true(gone_within(pid, 2000));
    assert_int_equal(access(r.dir, F_OK), -1);
}

/* A child process starts a server and then exits normally without
 * stopping it, or is SIGKILLed. Either way the server must go; on a normal
 * exit its directory goes too. */
static void assert_server_dies_with_its_program(int killed)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t child = fork();
    if (child == 0) {
        th_redis r;
        if (th_redis_start(&r, NULL) != 0) _exit(2);
        if (write(fds[1], &r.pid, sizeof r.pid) != sizeof r.pid) _exit(3);
        if (write(fds[1], r.dir, sizeof r.dir) != sizeof r.dir) _exit(3);
        if (killed) pause();
        exit(0); /* not _exit: the atexit handler must run */
    }
    pid_t server = 0;
    char dir[sizeof((th_redis *)0)->dir] = "";
    ssize_t n = read(fds[0], &server, sizeof server);
    ssize_t nd = n == sizeof server ? read(fds[0], dir, sizeof dir) : -1;
    if (killed && n == sizeof server) kill(child, SIGKILL);
    int st;
    waitpid(child, &st, 0);
    close(fds[0]);
    close(fds[1]);
    assert_int_equal(n, sizeof server);
    assert_int_equal(nd, sizeof dir);
    assert_true(server > 0);
    if (!gone_within(server, 3000)) {
        kill(server, SIGKILL);
        fail_msg("redis-server %d outlived its program", (int)server);
    }
    if (!killed) assert_int_equal(access(dir, F_OK), -1);
    else th_redis_remove_dir(dir);
}

static void server_is_stopped_when_its_program_exits(void **state)
{
    (void)state;
    assert_server_dies_with_its_program(0);
}

static void server_dies_with_a_killed_program(void **state)
{
    (void)state;
    assert_server_dies_with_its_program(1);
}

/* The @valkey ctest entries prove something about Valkey only if the
 * servers they start are Valkey's: the running server's executable is
 * the program DLOCK_TEST_SERVER names (redis-server without it). */
static void server_is_the_program_the_environment_names(void **state)
{
    (void)state;
    const char *named = getenv("DLOCK_TEST_SERVER");
    if (!named || !*named) named = "redis-server";
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    int runs = th_pid_runs(r.pid, named);
    th_redis_stop(&r);
    assert_int_equal(runs, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(server_a_failed_test_left_running_is_stopped_by_the_teardown),
        cmocka_unit_test(server_is_stopped_when_its_program_exits),
        cmocka_unit_test(server_dies_with_a_killed_program),
        cmocka_unit_test(server_is_the_program_the_environment_names),
    };
    return cmocka_run_group_tests(tests, NULL, th_stop_all_fixture);
}
