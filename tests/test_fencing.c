/*
 * Fencing tokens when the server forgets and its clock lies.
 *
 * A token must be greater than every token handed out before for the
 * same name, or a fenced resource refuses every new holder (or worse,
 * accepts a stale one). The counter in Redis is forgotten by a restart
 * without persistence; the server's clock, the floor the scripts use
 * then, can have been stepped back (NTP, a VM restored, an operator). The
 * server here runs under libfaketime, 60 s behind the machine's clock, so
 * a floor from its clock alone lands below the last token.
 *
 * What rises, and where (docs/design/locks.md says the same):
 *  - with the counter kept (AOF, or a replica that had it), always;
 *  - otherwise, through any client that saw a token for the name before
 *    (it remembers the highest and passes it as a floor), or any caller
 *    that passes the fenced resource's highest token itself
 *    (dlock_lock_set_fence_floor(), `dlock lock --fence-floor`);
 *  - a new process that passes nothing gets max(server clock, counter):
 *    below the last token here. That limit is shown, not hidden.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"

static int teardown(void **state)
{
    (void)state;
    th_redis_stop_all();
    return 0;
}

static dlock_client *client_of(const char *url)
{
    dlock_client *c = NULL;
    if (dlock_client_new(url, NULL, &c) != DLOCK_OK) fail_msg("dlock_client_new: %s", dlock_last_error());
    return c;
}

/* Start a server (with `conf`) whose clock is right, or skip when
 * libfaketime is missing (it is in scripts/install-deps.sh). */
static void start(th_redis *r, const char *conf)
{
    assert_int_equal(th_redis_start(r, conf), 0);
    if (th_redis_clock_offset(r, NULL) != 0) skip();
}

/* Kill -9 the server and start it again with its clock 60 s behind. */
static void restart_behind(th_redis *r)
{
    if (th_redis_clock_offset(r, "-60s") != 0) {
        print_message("libfaketime is not installed\n");
        skip();
    }
    assert_int_equal(th_redis_restart(r), 0);
    redisReply *t = th_redis_cmd(r, "TIME");
    assert_non_null(t);
    long long behind = (long long)time(NULL) - atoll(t->element[0]->str);
    freeReplyObject(t);
    if (behind < 55) fail_msg("the restarted server's clock is only %lld s behind", behind);
}

static uint64_t take(dlock_lock *l)
{
    uint64_t tok = 0;
    if (dlock_lock_acquire(l, 0, 5000, &tok) != DLOCK_OK) fail_msg("acquire: %s", dlock_last_error());
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    return tok;
}

/* One acquisition by a process of its own (a client and handle made for
 * it and freed after, so nothing is remembered), with `floor` set. */
static uint64_t take_as_new_process(const th_redis *r, const char *name, uint64_t floor)
{
    dlock_client *c = client_of(r->url);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, name, &l), DLOCK_OK);
    if (floor) dlock_lock_set_fence_floor(l, floor);
    uint64_t tok = take(l);
    dlock_lock_free(l);
    dlock_client_free(c);
    return tok;
}

static void expect_above(uint64_t tok, uint64_t floor, const char *what)
{
    if (tok <= floor)
        fail_msg("%s: token %llu is not above %llu", what, (unsigned long long)tok, (unsigned long long)floor);
}

/* The client that took a token keeps tokens rising across a restart
 * without persistence onto a clock 60 s behind, through the same handle
 * and through a new one, for plain, fair and write holds. */
static void a_client_keeps_tokens_rising_when_the_server_forgets_and_its_clock_steps_back(void **state)
{
    (void)state;
    th_redis r;
    start(&r, NULL);
    dlock_client *c = client_of(r.url);
    dlock_lock *plain, *fair;
    dlock_rwlock *rw;
    assert_int_equal(dlock_lock_new(c, "back", &plain), DLOCK_OK);
    assert_int_equal(dlock_lock_new_fair(c, "back-fair", &fair), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(c, "back-rw", &rw), DLOCK_OK);
    uint64_t p1 = take(plain), f1 = take(fair), w1 = 0;
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 5000, &w1), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);

    restart_behind(&r);

    expect_above(take(plain), p1, "plain lock, same handle");
    expect_above(take(fair), f1, "fair lock, same handle");
    uint64_t w2 = 0;
    assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 5000, &w2), DLOCK_OK);
    assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
    expect_above(w2, w1, "write hold, same handle");
    dlock_lock *again;
    assert_int_equal(dlock_lock_new(c, "back", &again), DLOCK_OK);
    expect_above(take(again), p1, "plain lock, a new handle of the same client");
    dlock_lock_free(again);
    dlock_rwlock_free(rw);
    dlock_lock_free(fair);
    dlock_lock_free(plain);
    dlock_client_free(c);
    th_redis_stop(&r);
}

/* A new process knows nothing: it gets a token below the last one (the
 * documented limit), unless it passes the resource's highest token as a
 * floor, through the library or the CLI. */
/* A floor the scripts cannot count above (their numbers are doubles,
 * exact to 2^53) is held at the largest they can: the token still rises
 * above it, exactly, rather than coming back equal to it. */
static void a_floor_beyond_double_precision_is_held_where_tokens_still_rise(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    dlock_client *c;
    assert_int_equal(dlock_client_new(r.url, NULL, &c), DLOCK_OK);
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "huge-floor", &l), DLOCK_OK);
    dlock_lock_set_fence_floor(l, 1ULL << 62);
    uint64_t token = 0;
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, &token), DLOCK_OK);
    assert_true(token == (1ULL << 53) - 1);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_free(c);
    th_redis_stop(&r);
}

static void a_new_process_needs_the_resources_floor(void **state)
{
    (void)state;
    th_redis r;
    start(&r, NULL);
    uint64_t last = take_as_new_process(&r, "floor", 0);

    restart_behind(&r);

    uint64_t blind = take_as_new_process(&r, "floor", 0);
    if (blind >= last) fail_msg("expected the clock floor alone to fall behind (%llu >= %llu)",
                                (unsigned long long)blind, (unsigned long long)last);
    uint64_t floored = take_as_new_process(&r, "floor", last);
    expect_above(floored, last, "with the resource's floor");

    /* The CLI: --fence-floor. */
    char out[256], cmd[768];
    snprintf(out, sizeof out, "%s/token.txt", r.dir);
    snprintf(cmd, sizeof cmd, "DLOCK_URL='%s' '%s' lock --fence-floor %llu floor -- sh -c 'echo $DLOCK_TOKEN > %s'",
             r.url, th_bin("dlock"), (unsigned long long)(floored + 1000), out);
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    unsigned long long cli = 0;
    assert_int_equal(fscanf(f, "%llu", &cli), 1);
    fclose(f);
    expect_above(cli, floored + 1000, "dlock lock --fence-floor");
    th_redis_stop(&r);
}

/* With AOF the counter itself survives the restart: any new process gets
 * a greater token, whatever the clock says. */
static void with_aof_the_counter_survives_a_restart(void **state)
{
    (void)state;
    th_redis r;
    start(&r, "appendonly yes\nappendfsync always\n");
    uint64_t last = take_as_new_process(&r, "aof", 0);
    restart_behind(&r);
    assert_true(take_as_new_process(&r, "aof", 0) == last + 1);
    th_redis_stop(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(a_client_keeps_tokens_rising_when_the_server_forgets_and_its_clock_steps_back,
                                  teardown),
        cmocka_unit_test_teardown(a_new_process_needs_the_resources_floor, teardown),
        cmocka_unit_test_teardown(a_floor_beyond_double_precision_is_held_where_tokens_still_rise, teardown),
        cmocka_unit_test_teardown(with_aof_the_counter_survives_a_restart, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
