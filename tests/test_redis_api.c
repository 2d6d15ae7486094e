/*
 * The raw-command API (dlock_redis.h) against real servers (one server,
 * Sentinel or Cluster: see target.h): commands reach the server serving
 * their key and replies come back; error replies are failures that keep
 * the reply; scripts survive SCRIPT FLUSH and a restart; the ONCE flag
 * never sends a command twice when its reply was lost; a dedicated
 * connection reaches the key's server and carries the URL's database;
 * threads sharing the client's connection each get their own replies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "dlock_redis.h"
#include "target.h"

static th_target server;

static long long get_int(const char *key)
{
    redisReply *r = th_target_cmd(&server, key, "GET %s", key);
    assert_non_null(r);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    return v;
}

static void commands_reach_the_server_and_replies_come_back(void **state)
{
    (void)state;
    dlock_client *c;
    assert_int_equal(dlock_client_new(server.url, NULL, &c), DLOCK_OK);
    const char *set[3] = {"SET", "api:{k}", "41"};
    const char *incr[2] = {"INCR", "api:{k}"};
    redisReply *r;
    assert_int_equal(dlock_redis_command(c, "api:{k}", 0, 3, set, NULL, &r), DLOCK_OK);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    assert_int_equal(dlock_redis_command(c, "api:{k}", 0, 2, incr, NULL, &r), DLOCK_OK);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 42);
    freeReplyObject(r);
    assert_int_equal(get_int("api:{k}"), 42);
    /* Binary-safe arguments: a value with a NUL inside. */
    const char *bin[3] = {"SET", "api:{bin}", "a\0b"};
    const size_t lens[3] = {3, 9, 3};
    assert_int_equal(dlock_redis_command(c, "api:{bin}", 0, 3, bin, lens, &r), DLOCK_OK);
    freeReplyObject(r);
    redisReply *g = th_target_cmd(&server, "api:{bin}", "STRLEN api:{bin}");
    assert_int_equal(g->integer, 3);
    freeReplyObject(g);
    dlock_client_free(c);
}

/* An error reply is DLOCK_ERR_REDIS with the server's words, and the reply
 * is still handed over; bad arguments are refused before any I/O. */
static void error_replies_are_failures_that_keep_the_reply(void **state)
{
    (void)state;
    dlock_client *c;
    assert_int_equal(dlock_client_new(server.url, NULL, &c), DLOCK_OK);
    const char *set[3] = {"SET", "api:{text}", "abc"};
    const char *incr[2] = {"INCR", "api:{text}"};
    redisReply *r;
    assert_int_equal(dlock_redis_command(c, "api:{text}", 0, 3, set, NULL, &r), DLOCK_OK);
    freeReplyObject(r);
    assert_int_equal(dlock_redis_command(c, "api:{text}", 0, 2, incr, NULL, &r), DLOCK_ERR_REDIS);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(dlock_last_error(), "not an integer"));
    freeReplyObject(r);
    r = (redisReply *)&r;
    assert_int_equal(dlock_redis_command(c, "k", 0, 0, incr, NULL, &r), DLOCK_ERR_INVALID);
    assert_null(r);
    assert_int_equal(dlock_redis_command(NULL, "k", 0, 2, incr, NULL, &r), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_redis_command(c, "k", 0, 2, incr, NULL, NULL), DLOCK_ERR_INVALID);
    dlock_client_free(c);
}

/* A script is loaded once and run by SHA; after SCRIPT FLUSH and after a
 * restart without persistence it still runs (sent in full once more). A
 * syntax error shows when the script is made. */
static void scripts_survive_script_flush_and_restart(void **state)
{
    (void)state;
    dlock_client *c;
    assert_int_equal(dlock_client_new(server.url, NULL, &c), DLOCK_OK);
    dlock_script *s, *bad = (dlock_script *)&bad;
    assert_int_equal(dlock_script_new(c, "this is not lua", &bad), DLOCK_ERR_REDIS);
    assert_null(bad);
    assert_non_null(strstr(dlock_last_error(), "SCRIPT"));
    assert_int_equal(dlock_script_new(c, "return redis.call('INCRBY', KEYS[1], ARGV[1])", &s), DLOCK_OK);
    const char *keys[1] = {"api:{n}"}, *args[1] = {"5"};
    redisReply *r;
    for (int round = 0; round < 3; round++) {
        if (round == 1) {
            redisReply *f = th_target_cmd(&server, keys[0], "SCRIPT FLUSH");
            freeReplyObject(f);
        } else if (round == 2) {
            if (server.kind != TH_TARGET_SINGLE) break; /* a restart without persistence: one server only */
            assert_int_equal(th_redis_restart(&server.single), 0);
        }
        assert_int_equal(dlock_script_eval(s, 0, 1, keys, 1, args, &r), DLOCK_OK);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        assert_int_equal(r->integer, round == 2 ? 5 : 5 * (round + 1));
        freeReplyObject(r);
    }
    /* A failing script is a failure with its message. */
    dlock_script *e;
    assert_int_equal(dlock_script_new(c, "return redis.error_reply('sold out')", &e), DLOCK_OK);
    assert_int_equal(dlock_script_eval(e, 0, 1, keys, 0, NULL, &r), DLOCK_ERR_REDIS);
    assert_non_null(strstr(dlock_last_error(), "sold out"));
    freeReplyObject(r);
    assert_int_equal(dlock_script_eval(e, 0, 0, keys, 0, NULL, &r), DLOCK_ERR_INVALID);
    dlock_script_free(e);
    dlock_script_free(s);
    dlock_client_free(c);
}

/* Over TCP, a command written to a connection whose server has died is
 * accepted by the kernel and its reply never comes: it may have run. With
 * DLOCK_REDIS_ONCE that is an error and the command is not sent again;
 * without it, the command is resent on a new connection. (The restarted
 * server is empty, so the counter shows how many INCRs ran on it.) */
static void once_never_resends_a_command_whose_reply_was_lost(void **state)
{
    (void)state;
    th_target_require_single(&server);
    dlock_client *c;
    assert_int_equal(dlock_client_new(server.single.tcp_url, NULL, &c), DLOCK_OK);
    const char *incr[2] = {"INCR", "api:{once}"};
    redisReply *r;
    assert_int_equal(dlock_redis_command(c, "api:{once}", 0, 2, incr, NULL, &r), DLOCK_OK); /* pool a connection */
    freeReplyObject(r);
    assert_int_equal(th_redis_restart(&server.single), 0);
    assert_int_equal(dlock_redis_command(c, "api:{once}", DLOCK_REDIS_ONCE, 2, incr, NULL, &r), DLOCK_ERR_CONNECT);
    assert_null(r);
    assert_int_equal(get_int("api:{once}"), -1); /* it did not run on the new server */

    assert_int_equal(dlock_redis_command(c, "api:{once}", DLOCK_REDIS_ONCE, 2, incr, NULL, &r), DLOCK_OK);
    freeReplyObject(r);
    assert_int_equal(th_redis_restart(&server.single), 0);
    assert_int_equal(dlock_redis_command(c, "api:{once}", 0, 2, incr, NULL, &r), DLOCK_OK);
    assert_int_equal(r->integer, 1); /* resent on a fresh connection, ran once there */
    freeReplyObject(r);
    dlock_client_free(c);
}

/* A dedicated connection reaches the server of its key, has the URL's
 * database selected (where there are databases) and is the caller's alone
 * (a blocking command on it does not hold up the pool). */
static void dedicated_connections_reach_the_key_and_its_database(void **state)
{
    (void)state;
    char url[600];
    int db = server.kind == TH_TARGET_CLUSTER ? 0 : 3;
    if (db) snprintf(url, sizeof url, "%s?db=%d", server.url, db);
    else snprintf(url, sizeof url, "%s", server.url);
    dlock_client *c;
    assert_int_equal(dlock_client_new(url, NULL, &c), DLOCK_OK);
    redisContext *own;
    assert_int_equal(dlock_redis_connect(c, "api:{q}", &own), DLOCK_OK);
    redisReply *r = redisCommand(own, "RPUSH api:{q} x");
    assert_non_null(r);
    freeReplyObject(r);
    r = redisCommand(own, "BLPOP api:{q} 1");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    r = redisCommand(own, "SET api:{q}:db here");
    freeReplyObject(r);
    redisFree(own);
    redisReply *g = th_target_cmd(&server, "api:{q}:db", "EXISTS api:{q}:db");
    assert_int_equal(g->integer, db ? 0 : 1); /* in db 3, not 0, where there are databases */
    freeReplyObject(g);
    const char *get[2] = {"GET", "api:{q}:db"};
    assert_int_equal(dlock_redis_command(c, "api:{q}:db", 0, 2, get, NULL, &r), DLOCK_OK);
    assert_string_equal(r->str, "here");
    freeReplyObject(r);
    dlock_client_free(c);
}

/* The threads of a client pipeline their commands on one connection per
 * server and take turns reading for each other (src/mux.c): each reply
 * must reach the thread that asked, and no thread may sleep through its
 * own. Sixteen threads echo numbered words while asynchronous scripts are
 * in flight on the same connection (their replies are handed to the
 * reader thread); a reply given to the wrong thread fails it, and a lost
 * wake-up (a thread asleep with its reply in) is killed by the alarm. */
#define SHARE_THREADS 16
#define SHARE_CALLS 1500

typedef struct {
    dlock_client *c;
    int id;
    int wrong, failed;
} share_arg;

static atomic_int share_async_left;
static atomic_int share_async_wrong;

static void *share_echoer(void *p)
{
    share_arg *a = p;
    char key[32], word[48];
    snprintf(key, sizeof key, "api:{share}:%d", a->id);
    for (int i = 0; i < SHARE_CALLS; i++) {
        snprintf(word, sizeof word, "t%d-%d", a->id, i);
        const char *echo[2] = {"ECHO", word};
        redisReply *r;
        if (dlock_redis_command(a->c, key, 0, 2, echo, NULL, &r) != DLOCK_OK) {
            a->failed++;
            continue;
        }
        if (r->type != REDIS_REPLY_STRING || strcmp(r->str, word) != 0) a->wrong++;
        freeReplyObject(r);
    }
    return NULL;
}

static void share_async_done(dlock_status st, redisReply *reply, void *arg)
{
    intptr_t want = (intptr_t)arg;
    if (st != DLOCK_OK || !reply || reply->type != REDIS_REPLY_INTEGER || reply->integer != want)
        atomic_fetch_add(&share_async_wrong, 1);
    if (reply) freeReplyObject(reply);
    atomic_fetch_sub(&share_async_left, 1);
}

static void threads_sharing_the_connection_each_get_their_own_replies(void **state)
{
    (void)state;
    alarm(120); /* 24 000 round trips take about a second */
    dlock_client *c;
    assert_int_equal(dlock_client_new(server.url, NULL, &c), DLOCK_OK);
    dlock_script *sc;
    assert_int_equal(dlock_script_new(c, "return tonumber(ARGV[1])", &sc), DLOCK_OK);
    pthread_t t[SHARE_THREADS];
    share_arg a[SHARE_THREADS];
    atomic_store(&share_async_wrong, 0);
    for (int i = 0; i < SHARE_THREADS; i++) {
        a[i] = (share_arg){c, i, 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, share_echoer, &a[i]), 0);
    }
    /* The keys of thread 0's server, so that on Cluster these share its
     * connection. */
    const char *keys[1] = {"api:{share}:0"};
    int async_sent = 0;
    for (intptr_t i = 0; i < 4000; i++) {
        char n[24];
        snprintf(n, sizeof n, "%ld", (long)i);
        const char *args[1] = {n};
        atomic_fetch_add(&share_async_left, 1);
        if (dlock_script_eval_async(sc, 0, 1, keys, 1, args, share_async_done, (void *)i) != DLOCK_OK) {
            atomic_fetch_sub(&share_async_left, 1);
            continue;
        }
        async_sent++;
    }
    for (int i = 0; i < SHARE_THREADS; i++) pthread_join(t[i], NULL);
    while (atomic_load(&share_async_left) > 0) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < SHARE_THREADS; i++) {
        assert_int_equal(a[i].failed, 0);
        assert_int_equal(a[i].wrong, 0);
    }
    assert_int_equal(async_sent, 4000);
    assert_int_equal(atomic_load(&share_async_wrong), 0);
    dlock_script_free(sc);
    dlock_client_free(c);
    alarm(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(commands_reach_the_server_and_replies_come_back),
        cmocka_unit_test(error_replies_are_failures_that_keep_the_reply),
        cmocka_unit_test(scripts_survive_script_flush_and_restart),
        cmocka_unit_test(once_never_resends_a_command_whose_reply_was_lost),
        cmocka_unit_test(dedicated_connections_reach_the_key_and_its_database),
        cmocka_unit_test(threads_sharing_the_connection_each_get_their_own_replies),
    };
    return th_target_run_suite(tests, &server);
}
