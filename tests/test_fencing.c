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
#include "dlock_redis.h"
#include "fence.h"
#include "harness.h"
#include "slot.h"

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
    if (blind >= last)
        fail_msg("expected the clock floor alone to fall behind (%llu >= %llu)", (unsigned long long)blind,
                 (unsigned long long)last);
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

/* acquire.lua as built (tools/../lua: cmake/embed_lua.cmake writes the
 * expanded scripts there), with `from` replaced by `to` when given; NULL
 * when the file or `from` is missing. */
static char *acquire_text(const char *from, const char *to)
{
    FILE *f = fopen(th_bin("../lua/acquire.lua"), "r");
    if (!f) return NULL;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (!from) return strdup(buf);
    char *at = strstr(buf, from);
    if (!at || strstr(at + 1, from)) return NULL;
    size_t size = n - strlen(from) + strlen(to) + 1;
    char *out = malloc(size);
    if (out) snprintf(out, size, "%.*s%s%s", (int)(at - buf), buf, to, at + strlen(from));
    return out;
}

/* One command of the test's own on `r`, whose reply must be `type`; the
 * reply, to free. */
static redisReply *expect_reply(const th_redis *r, int type, const char *cmd, const char *key, const char *arg)
{
    redisReply *rep = arg ? th_redis_cmd(r, "%s %s %s", cmd, key, arg) : th_redis_cmd(r, "%s %s", cmd, key);
    if (!rep || rep->type != type) fail_msg("%s %s: unexpected reply", cmd, key);
    return rep;
}

/* One grant through `s` with `floor` ("" for none), checked against the
 * counter it leaves behind (its text is the token's), then dropped so
 * that the next grant is a first one again. */
static uint64_t grant_with(const th_redis *rs, dlock_script *s, const char *floor)
{
    static char fence[32];
    char *k = dlock__fence_key("branches");
    snprintf(fence, sizeof fence, "%s", k);
    free(k);
    const char *keys[3] = {"dlock:{branches}", fence, "dlock:{branches}:r"};
    const char *args[5] = {"0123456789abcdef0123456789abcdef:1:1", "5000", "0", floor,
                           "0123456789abcdef0123456789abcdef"};
    redisReply *r = NULL;
    assert_int_equal(dlock_script_eval(s, 0, 3, keys, 5, args, &r), DLOCK_OK);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_int_equal(r->element[0]->integer, 1);
    uint64_t token = (uint64_t)r->element[1]->integer;
    freeReplyObject(r);
    char text[32];
    snprintf(text, sizeof text, "%llu", (unsigned long long)token);
    r = expect_reply(rs, REDIS_REPLY_STRING, "GET", keys[1], NULL);
    assert_string_equal(r->str, text);
    freeReplyObject(r);
    r = expect_reply(rs, REDIS_REPLY_INTEGER, "DEL", keys[0], NULL);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    return token;
}

/* The rules, through one of the two branches of lib/fence.lua: the clock
 * when the counter is behind it, the counter plus one when it is ahead,
 * the floor plus one when that is higher still, rising by one when
 * grants come faster than the clock. */
static void check_fence_rules(const th_redis *rs, dlock_script *s)
{
    char *fence = dlock__fence_key("branches");
    freeReplyObject(expect_reply(rs, REDIS_REPLY_INTEGER, "DEL", fence, NULL));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now_us = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    uint64_t t1 = grant_with(rs, s, "");
    if (t1 + 60000000u < now_us || t1 > now_us + 60000000u)
        fail_msg("a first token %llu is not the server's clock (~%llu)", (unsigned long long)t1,
                 (unsigned long long)now_us);
    expect_above(grant_with(rs, s, "0"), t1, "the next grant");
    freeReplyObject(expect_reply(rs, REDIS_REPLY_STATUS, "SET", fence, "9000000000000000"));
    free(fence);
    assert_true(grant_with(rs, s, "") == 9000000000000001ULL);
    assert_true(grant_with(rs, s, "8000000000000000") == 9000000000000002ULL);
    assert_true(grant_with(rs, s, "9000000000000005") == 9000000000000006ULL);
    assert_true(grant_with(rs, s, "9000000000000006") == 9000000000000007ULL);
    uint64_t prev = 0;
    for (int i = 0; i < 50; i++) {
        uint64_t t = grant_with(rs, s, "");
        if (i > 0) expect_above(t, prev, "back-to-back grants");
        prev = t;
    }
}

/* lib/fence.lua takes the counter with SET ... GET where the server has
 * it (7.0 and later) and with GET and SET on older servers. No older
 * server is at hand, so the other branch runs here by loading
 * acquire.lua with it forced; both must follow the same rules. */
static void both_ways_of_taking_the_counter_follow_the_same_rules(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    dlock_client *c = client_of(r.url);
    const char *branch = "redis.REDIS_VERSION_NUM ~= nil";
    char *texts[2] = {acquire_text(NULL, NULL), acquire_text(branch, "false")};
    if (!texts[0] || !texts[1]) fail_msg("acquire.lua or its '%s' not found by the test", branch);
    for (int i = 0; i < 2; i++) {
        dlock_script *s = NULL;
        assert_int_equal(dlock_script_new(c, texts[i], &s), DLOCK_OK);
        check_fence_rules(&r, s);
        dlock_script_free(s);
        free(texts[i]);
    }
    dlock_client_free(c);
    th_redis_stop(&r);
}

/* ------------------------------------------------------------------------ */
/* One counter per hash slot                                                */
/* ------------------------------------------------------------------------ */

/* An integer reply of the test's own command on `r`. */
static long long int_of(const th_redis *r, const char *fmt, const char *arg)
{
    redisReply *rep = arg ? th_redis_cmd(r, fmt, arg) : th_redis_cmd(r, fmt);
    if (!rep || rep->type != REDIS_REPLY_INTEGER) fail_msg("%s: not an integer reply", fmt);
    long long v = rep->integer;
    freeReplyObject(rep);
    return v;
}

/* Every slot has a tag that hashes back to it, and the tags are the ones
 * docs/design/keys.md lists (computed apart from the library, in Python):
 * a tag that changed between versions would split a slot's counter in
 * two, and tokens of two versions would no longer rise together. */
static void each_slot_has_a_stable_tag_of_its_own(void **state)
{
    (void)state;
    for (unsigned slot = 0; slot < DLOCK__SLOTS; slot++) {
        const char *tag = dlock__slot_tag(slot);
        size_t len = strlen(tag);
        if (len < 1 || len > DLOCK__SLOT_TAG_MAX || dlock__key_slot(tag, len) != slot)
            fail_msg("slot %u: tag '%s' does not hash back to it", slot, tag);
    }
    assert_string_equal(dlock__slot_tag(0), "06S");
    assert_string_equal(dlock__slot_tag(12182), "9Le"); /* the slot of "foo" */
    assert_string_equal(dlock__slot_tag(16383), "6ZJ");
    char *k = dlock__fence_key("foo");
    assert_string_equal(k, "dlock:fence:{9Le}");
    free(k);
}

/* Many names, each locked once and released, leave no more than one key
 * per slot: their counters are their slots' (there were as many counters
 * as names before, never expiring). DLOCK_TEST_NAMES sets how many. */
static void names_locked_once_leave_at_most_one_counter_per_slot(void **state)
{
    (void)state;
    const char *env = getenv("DLOCK_TEST_NAMES");
    long names = env ? atol(env) : 100000;
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    dlock_client *c = client_of(r.url);
    long long t0 = th_now_ms();
    for (long i = 0; i < names; i++) {
        char name[48];
        snprintf(name, sizeof name, "lock:order:%ld", i);
        dlock_lock *l;
        assert_int_equal(dlock_lock_new(c, name, &l), DLOCK_OK);
        uint64_t tok = 0;
        if (dlock_lock_acquire(l, 0, 5000, &tok) != DLOCK_OK) fail_msg("%s: %s", name, dlock_last_error());
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        dlock_lock_free(l);
    }
    long long keys = int_of(&r, "DBSIZE", NULL);
    long long counters = 0;
    redisReply *scan = NULL;
    char cursor[32] = "0";
    do { /* every key left is a slot's counter */
        scan = th_redis_cmd(&r, "SCAN %s COUNT 1000", cursor);
        assert_true(scan && scan->type == REDIS_REPLY_ARRAY && scan->elements == 2);
        snprintf(cursor, sizeof cursor, "%s", scan->element[0]->str);
        for (size_t i = 0; i < scan->element[1]->elements; i++) {
            const char *key = scan->element[1]->element[i]->str;
            if (strncmp(key, "dlock:fence:{", 13) != 0) fail_msg("key %s left behind", key);
            counters++;
        }
        freeReplyObject(scan);
    } while (strcmp(cursor, "0") != 0);
    print_message("%ld names locked once: %lld keys left (%lld ms)\n", names, keys, th_now_ms() - t0);
    if (keys > DLOCK__SLOTS || keys > names) fail_msg("%lld keys for %ld names", keys, names);
    assert_true(counters == keys);
    dlock_client_free(c);
    th_redis_stop(&r);
}

/* Two names of one slot (found by trying), distinct from `name`. */
static void name_in_slot_of(const char *name, char *out, size_t size)
{
    unsigned slot = dlock__key_slot(name, strlen(name));
    for (long i = 0;; i++) {
        snprintf(out, size, "%s-%ld", name, i);
        if (dlock__key_slot(out, strlen(out)) == slot) return;
    }
}

/* Every kind that draws tokens draws them from the slot's one counter, so
 * tokens rise across names and kinds of a slot: a plain lock, a fair lock,
 * a write hold and a RedLock of names in one slot, taken in turn. */
static void names_of_one_slot_draw_from_one_rising_counter(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    dlock_client *c = client_of(r.url);
    char other[64], third[64], fourth[64];
    name_in_slot_of("slot-mate", other, sizeof other);
    name_in_slot_of(other, third, sizeof third);
    name_in_slot_of(third, fourth, sizeof fourth);
    dlock_lock *plain, *fair;
    dlock_rwlock *rw;
    dlock_redlock *rl;
    assert_int_equal(dlock_lock_new(c, "slot-mate", &plain), DLOCK_OK);
    assert_int_equal(dlock_lock_new_fair(c, other, &fair), DLOCK_OK);
    assert_int_equal(dlock_rwlock_new(c, third, &rw), DLOCK_OK);
    assert_int_equal(dlock_redlock_new(&c, 1, fourth, &rl), DLOCK_OK);
    uint64_t prev = 0;
    for (int round = 0; round < 5; round++) {
        uint64_t t = take(plain);
        expect_above(t, prev, "plain lock after its slot's last token");
        expect_above(prev = take(fair), t, "fair lock of the same slot");
        assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 5000, &t), DLOCK_OK);
        assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
        expect_above(t, prev, "write hold of the same slot");
        prev = t;
        assert_int_equal(dlock_redlock_acquire(rl, 0, 5000, NULL, &t), DLOCK_OK);
        assert_int_equal(dlock_redlock_release(rl), DLOCK_OK);
        expect_above(t, prev, "RedLock of the same slot");
        prev = t;
    }
    char *fence = dlock__fence_key("slot-mate");
    redisReply *last = th_redis_cmd(&r, "GET %s", fence);
    assert_true(last && last->type == REDIS_REPLY_STRING && strtoull(last->str, NULL, 10) == prev);
    freeReplyObject(last);
    free(fence);
    assert_int_equal(int_of(&r, "DBSIZE", NULL), 1);
    dlock_redlock_free(rl);
    dlock_rwlock_free(rw);
    dlock_lock_free(fair);
    dlock_lock_free(plain);
    dlock_client_free(c);
    th_redis_stop(&r);
}

/* A per-name counter an earlier version left ("dlock:{NAME}:fence",
 * "dlock:{NAME}:rw:fence"), ahead of the clock and of the slot's counter,
 * is taken as a floor by the next grant and then deleted: the name's
 * tokens never go back across the upgrade, and the key does not stay. A
 * read hold and the admin view count it until then. */
static void an_earlier_versions_per_name_counter_is_folded_in_and_removed(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    dlock_client *c = client_of(r.url);
    const unsigned long long ahead = 4000000000000000ULL; /* year 2096 in microseconds */
    const char *names[4] = {"old-plain", "old-fair", "old-rw", "old-redlock"};
    const char *old_keys[4] = {"dlock:{old-plain}:fence", "dlock:{old-fair}:fence", "dlock:{old-rw}:rw:fence",
                               "dlock:{old-redlock}:fence"};
    for (int kind = 0; kind < 4; kind++) {
        unsigned long long was = ahead + 1000u * (unsigned)kind;
        redisReply *x = th_redis_cmd(&r, "SET %s %llu", old_keys[kind], was);
        freeReplyObject(x);
        uint64_t t1 = 0, t2 = 0;
        if (kind == 2) {
            dlock_rwlock *rw;
            assert_int_equal(dlock_rwlock_new(c, names[kind], &rw), DLOCK_OK);
            dlock_rwlock_info info;
            assert_int_equal(dlock_rwlock_inspect(c, names[kind], &info), DLOCK_OK);
            assert_true(info.last_token == was);
            uint64_t seen = 0;
            assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_READ, 0, 5000, &seen), DLOCK_OK);
            assert_true(seen == was); /* a read hold's token: the last write token */
            assert_int_equal(dlock_rwlock_release(rw, DLOCK_READ), DLOCK_OK);
            for (int i = 0; i < 2; i++) {
                assert_int_equal(dlock_rwlock_acquire(rw, DLOCK_WRITE, 0, 5000, i ? &t2 : &t1), DLOCK_OK);
                assert_int_equal(dlock_rwlock_release(rw, DLOCK_WRITE), DLOCK_OK);
            }
            dlock_rwlock_free(rw);
        } else if (kind == 3) {
            dlock_redlock *rl;
            assert_int_equal(dlock_redlock_new(&c, 1, names[kind], &rl), DLOCK_OK);
            for (int i = 0; i < 2; i++) {
                assert_int_equal(dlock_redlock_acquire(rl, 0, 5000, NULL, i ? &t2 : &t1), DLOCK_OK);
                assert_int_equal(dlock_redlock_release(rl), DLOCK_OK);
            }
            dlock_redlock_free(rl);
        } else {
            dlock_lock *l;
            assert_int_equal((kind ? dlock_lock_new_fair : dlock_lock_new)(c, names[kind], &l), DLOCK_OK);
            dlock_lock_info info;
            assert_int_equal(dlock_lock_inspect(c, names[kind], &info), DLOCK_OK);
            assert_true(info.last_token == was);
            t1 = take(l);
            t2 = take(l);
            dlock_lock_free(l);
        }
        if (t1 != was + 1 || t2 != was + 2)
            fail_msg("%s: tokens %llu, %llu after a per-name counter at %llu", names[kind], (unsigned long long)t1,
                     (unsigned long long)t2, was);
        assert_int_equal(int_of(&r, "EXISTS %s", old_keys[kind]), 0);
    }
    dlock_client_free(c);
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
        cmocka_unit_test_teardown(both_ways_of_taking_the_counter_follow_the_same_rules, teardown),
        cmocka_unit_test(each_slot_has_a_stable_tag_of_its_own),
        cmocka_unit_test_teardown(names_of_one_slot_draw_from_one_rising_counter, teardown),
        cmocka_unit_test_teardown(an_earlier_versions_per_name_counter_is_folded_in_and_removed, teardown),
        cmocka_unit_test_teardown(names_locked_once_leave_at_most_one_counter_per_slot, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
