/*
 * The link's own command formatter (src/link.c, dlock__link_append): the
 * bytes it writes are hiredis's for every shape of command, and a real
 * server reads them back as sent, binary arguments included. Also the
 * number printing the lock calls use in place of snprintf (util.c).
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

#include "harness.h"
#include "link.h"
#include "util.h"

static th_redis server;

static int start_server(void **state)
{
    (void)state;
    return th_redis_start(&server, NULL) == 0 ? 0 : -1;
}

static int stop_server(void **state)
{
    (void)state;
    th_redis_stop(&server);
    return 0;
}

static const dlock__conn_cfg cfg = {.connect_timeout_ms = 2000, .command_timeout_ms = 2000};

static dlock__link *open_link(dlock__endpoint *ep)
{
    assert_int_equal(dlock__endpoint_init(ep, NULL, 0, server.sock, &cfg), 0);
    dlock__link *l = NULL;
    assert_int_equal(dlock__link_open(ep, &l), DLOCK_OK);
    return l;
}

/* Append one command to the link and to hiredis's formatter; the link's
 * pending bytes must be hiredis's. */
static void expect_hiredis_bytes(dlock__link *l, int argc, const char **argv, const size_t *lens)
{
    char *want = NULL;
    int n = redisFormatCommandArgv(&want, argc, argv, lens);
    assert_true(n > 0);
    assert_int_equal(dlock__link_append(l, argc, argv, lens), 0);
    sds got = dlock__link_take(l);
    assert_non_null(got);
    assert_int_equal(sdslen(got), (size_t)n);
    assert_memory_equal(got, want, (size_t)n);
    dlock__link_give_back(l, got);
    free(want);
}

/* Lengths on each side of every change in the number of digits, empty
 * arguments, NUL and CR LF inside arguments, and more arguments than the
 * formatter keeps on its stack. */
static void formatter_writes_the_bytes_hiredis_writes(void **state)
{
    (void)state;
    dlock__endpoint ep;
    dlock__link *l = open_link(&ep);
    static char big[100001];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)(i * 7 + 3);
    const size_t sizes[] = {0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 9999, 10000, 99999, 100000};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const char *argv[2] = {"SET", big};
        size_t lens[2] = {3, sizes[s]};
        expect_hiredis_bytes(l, 2, argv, lens);
    }
    for (int argc = 1; argc <= 130; argc++) {
        const char **argv = calloc((size_t)argc, sizeof *argv);
        size_t *lens = calloc((size_t)argc, sizeof *lens);
        assert_true(argv && lens);
        for (int i = 0; i < argc; i++) {
            argv[i] = big + i;
            lens[i] = (size_t)(i * 37 % 23);
        }
        expect_hiredis_bytes(l, argc, argv, lens);
        free(argv);
        free(lens);
    }
    const char *text[] = {"EVALSHA", "2a5abcfa7fe626b2fe79dc8cd72f0fdc6ebb9442", "6", "dlock:{a}", "", "10000"};
    expect_hiredis_bytes(l, 6, text, NULL); /* NUL-terminated, lengths by strlen */
    dlock__link_free(l);
    dlock__endpoint_destroy(&ep);
}

/* What the server receives is what was appended: a value with every byte
 * value in it, set and read back over the link, several commands in one
 * write, the buffer handed back and taken again in between. */
static void server_reads_back_what_was_appended(void **state)
{
    (void)state;
    dlock__endpoint ep;
    dlock__link *l = open_link(&ep);
    char value[512];
    for (size_t i = 0; i < sizeof value; i++) value[i] = (char)i;
    for (int round = 0; round < 3; round++) {
        const char *set[3] = {"SET", "link:bytes", value};
        size_t set_lens[3] = {3, 10, sizeof value - (size_t)round};
        const char *get[2] = {"GET", "link:bytes"};
        assert_int_equal(dlock__link_append(l, 3, set, set_lens), 0);
        assert_int_equal(dlock__link_append(l, 2, get, NULL), 0);
        assert_int_equal(dlock__link_flush(l), 0);
        redisReply *r[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++) {
            char buf[4096];
            while (!r[k]) {
                assert_int_equal(dlock__link_reply(l, &r[k]), 0);
                if (r[k]) break;
                ssize_t n = dlock__link_recv(l, buf, sizeof buf);
                assert_true(n > 0);
                assert_int_equal(dlock__link_feed(l, buf, (size_t)n), 0);
            }
        }
        assert_int_equal(r[0]->type, REDIS_REPLY_STATUS);
        assert_int_equal(r[1]->type, REDIS_REPLY_STRING);
        assert_int_equal(r[1]->len, set_lens[2]);
        assert_memory_equal(r[1]->str, value, set_lens[2]);
        freeReplyObject(r[0]);
        freeReplyObject(r[1]);
    }
    dlock__link_free(l);
    dlock__endpoint_destroy(&ep);
}

/* dlock__fmt_ll and dlock__fmt_ull print what printf prints, at the ends
 * of their ranges and at every change in the number of digits. */
static void numbers_print_as_printf_prints_them(void **state)
{
    (void)state;
    char got[24], want[24];
    const long long signed_cases[] = {0, 1, -1, 9, -9, 10, -10, 99, 100, LLONG_MAX, LLONG_MIN, LLONG_MIN + 1};
    for (size_t i = 0; i < sizeof signed_cases / sizeof *signed_cases; i++) {
        snprintf(want, sizeof want, "%lld", signed_cases[i]);
        assert_string_equal(dlock__fmt_ll(signed_cases[i], got), want);
    }
    unsigned long long v = 1;
    for (int digits = 1; digits <= 20; digits++, v *= 10) {
        const unsigned long long around[3] = {v - 1, v, v + 1};
        for (int k = 0; k < 3; k++) {
            snprintf(want, sizeof want, "%llu", around[k]);
            assert_string_equal(dlock__fmt_ull(around[k], got), want);
        }
        if (digits == 19) break; /* 10^20 does not fit */
    }
    snprintf(want, sizeof want, "%llu", ULLONG_MAX);
    assert_string_equal(dlock__fmt_ull(ULLONG_MAX, got), want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(numbers_print_as_printf_prints_them),
        cmocka_unit_test(formatter_writes_the_bytes_hiredis_writes),
        cmocka_unit_test(server_reads_back_what_was_appended),
    };
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
