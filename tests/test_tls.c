/*
 * TLS (rediss://): the library's own transport under every connection,
 * against Debian's redis-server on its TLS port with certificates the
 * harness makes. The lock, a waiter woken by pub/sub and the watchdog
 * work over it; every way the handshake can fail is DLOCK_ERR_CONNECT with
 * a reason a person can act on, and the CLI exits 69 with it on one line.
 * (The other suites run over TLS too: NAME@tls in ctest, tests/target.c.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "th_lock.h"

static char certs[64];

static int setup(void **state)
{
    (void)state;
    snprintf(certs, sizeof certs, "/tmp/dlock-tls-XXXXXX");
    if (!mkdtemp(certs)) return -1;
    return th_tls_certs(certs);
}

static int teardown(void **state)
{
    (void)state;
    th_redis_stop_all();
    th_redis_remove_dir(certs);
    return 0;
}

/* A client for `url`, or the status and message of its failure. */
static dlock_status connect_to(const char *url, dlock_client **c)
{
    dlock_options o = {0};
    o.connect_timeout_ms = 2000;
    /* 600 ms: a hold is trusted for 90 % of it less 8 ms after each
     * renewal's send, and a loaded machine has stalled a process past
     * 270 ms. */
    o.watchdog_lease_ms = 600;
    *c = NULL;
    return dlock_client_new(url, &o, c);
}

static void expect_refused(const char *url, const char *why)
{
    dlock_client *c;
    dlock_status st = connect_to(url, &c);
    if (st == DLOCK_OK) {
        dlock_client_free(c);
        fail_msg("%s: connected, expected a failure mentioning \"%s\"", url, why);
    }
    assert_int_equal(st, DLOCK_ERR_CONNECT);
    if (!strstr(dlock_last_error(), why)) fail_msg("%s: \"%s\" does not mention \"%s\"", url, dlock_last_error(), why);
    print_message("%s\n", dlock_last_error());
}

struct waiter {
    dlock_client *c;
    dlock_status st;
    long long waited;
};

static void *wait_for_lock(void *arg)
{
    struct waiter *w = arg;
    dlock_lock *l;
    if (dlock_lock_new(w->c, "tls-lock", &l) != DLOCK_OK) return NULL;
    long long t0 = th_now_ms();
    w->st = dlock_lock_acquire(l, 5000, DLOCK_LEASE_WATCHDOG, NULL);
    w->waited = th_now_ms() - t0;
    if (w->st == DLOCK_OK) dlock_lock_release(l);
    dlock_lock_free(l);
    return NULL;
}

/* Acquire, renew through three leases, wake a waiter at release: the
 * library's whole round over TLS. */
/* Whether this process has OpenSSL's libssl mapped. */
static int libssl_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[1024];
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "/libssl.so")) found = 1;
    fclose(f);
    return found;
}

static void lock_once(const char *url)
{
    dlock_client *c;
    dlock_lock *l;
    assert_int_equal(connect_to(url, &c), DLOCK_OK);
    assert_int_equal(dlock_lock_new(c, "tls-load", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, 1000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_free(c);
}

/* OpenSSL is opened by the first TLS URL, not at start: a program that
 * never uses TLS never maps libssl (src/libssl.h says why). First in the
 * list, before any case has used TLS in this process. */
static void openssl_is_loaded_by_the_first_tls_url_only(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start_tls(&r, certs, "server", NULL), 0);
    assert_false(libssl_mapped());
    lock_once(r.tcp_url);
    lock_once(r.url);
    assert_false(libssl_mapped());
    lock_once(r.tls_url);
    assert_true(libssl_mapped());
    th_redis_stop(&r);
}

static void lock_wait_and_watchdog_work_over_tls(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start_tls(&r, certs, "server", NULL), 0);
    dlock_client *a, *b;
    assert_int_equal(connect_to(r.tls_url, &a), DLOCK_OK);
    assert_int_equal(connect_to(r.tls_url, &b), DLOCK_OK);
    dlock_lock *l;
    uint64_t token = 0;
    assert_int_equal(dlock_lock_new(a, "tls-lock", &l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG, &token), DLOCK_OK);
    assert_true(token > 0);
    struct waiter w = {b, DLOCK_ERR_SYS, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_lock, &w), 0);
    usleep(1800000); /* three leases: only the watchdog keeps it */
    assert_int_equal(dlock_lock_lost(l), 0);
    long long released = th_now_ms();
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.st, DLOCK_OK);
    /* Woken by the release (pub/sub over TLS), not by a timer: with the
     * watchdog's 600 ms lease the waiter sleeps only until the holder's
     * TTL and may have tried again just then, so once more on a 30 s
     * lease: its client counts the wake-up by a message, and it has the
     * lock within 1 s (its 2 s cap would wake it 1.7 s after the
     * release). */
    struct dlock_stats s;
    assert_int_equal(dlock_stats(b, &s), DLOCK_OK);
    uint64_t woken = s.kind[DLOCK_STATS_LOCK].wakeups;
    assert_int_equal(dlock_lock_acquire(l, 0, 30000, &token), DLOCK_OK);
    w = (struct waiter){b, DLOCK_ERR_SYS, 0};
    assert_int_equal(pthread_create(&t, NULL, wait_for_lock, &w), 0);
    usleep(300000);
    th_lock_wait_registered(NULL, &r, "tls-lock", 1); /* asleep, however late its thread began */
    released = th_now_ms();
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.st, DLOCK_OK);
    long long after = th_now_ms() - released;
    print_message("waiter got the lock %lld ms after the release\n", after);
    assert_int_equal(dlock_stats(b, &s), DLOCK_OK);
    if (s.kind[DLOCK_STATS_LOCK].wakeups <= woken || after >= 1000)
        fail_msg("waiter in %lld ms, %llu wake-ups counted", after,
                 (unsigned long long)s.kind[DLOCK_STATS_LOCK].wakeups);
    dlock_lock_free(l);
    dlock_client_free(b);
    dlock_client_free(a);
    th_redis_stop(&r);
}

/* Each way verification can fail names its cause. */
static void bad_certificates_are_refused_with_their_reason(void **state)
{
    (void)state;
    th_redis ok, wrong, expired;
    assert_int_equal(th_redis_start_tls(&ok, certs, "server", NULL), 0);
    assert_int_equal(th_redis_start_tls(&wrong, certs, "wronghost", NULL), 0);
    assert_int_equal(th_redis_start_tls(&expired, certs, "expired", NULL), 0);
    char url[768];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s/other-ca.pem", ok.tls_port, certs);
    expect_refused(url, "certificate verify failed");
    expect_refused(wrong.tls_url, "certificate verify failed: IP address mismatch");
    snprintf(url, sizeof url, "rediss://localhost:%d?cacert=%s/ca.pem", wrong.tls_port, certs);
    expect_refused(url, "hostname mismatch");
    expect_refused(expired.tls_url, "certificate has expired");
    /* The name the certificate does carry, given as sni, passes. */
    dlock_client *c;
    snprintf(url, sizeof url, "%s&sni=wrong.example", wrong.tls_url);
    assert_int_equal(connect_to(url, &c), DLOCK_OK);
    dlock_client_free(c);
    /* verify=no connects to anything, explicitly. */
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s/other-ca.pem&verify=no", expired.tls_port, certs);
    assert_int_equal(connect_to(url, &c), DLOCK_OK);
    dlock_client_free(c);
    /* A CA file that is not there is the URL's fault. */
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s/nothing.pem", ok.tls_port, certs);
    assert_int_equal(connect_to(url, &c), DLOCK_ERR_URL);
    assert_non_null(strstr(dlock_last_error(), "cacert"));
    th_redis_stop(&expired);
    th_redis_stop(&wrong);
    th_redis_stop(&ok);
}

/* rediss:// to a plaintext port: a clear error, quickly, not a hang. */
static void plaintext_server_behind_rediss_is_a_clear_error(void **state)
{
    (void)state;
    th_redis plain;
    assert_int_equal(th_redis_start(&plain, NULL), 0);
    char url[512];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s/ca.pem", plain.port, certs);
    /* The server waits for a line the handshake never sends: only the
     * connect timeout (here 500 ms) ends it. */
    dlock_options o = {0};
    o.connect_timeout_ms = 500;
    dlock_client *c = NULL;
    long long t0 = th_now_ms();
    assert_int_equal(dlock_client_new(url, &o, &c), DLOCK_ERR_CONNECT);
    long long took = th_now_ms() - t0;
    print_message("%s (%lld ms)\n", dlock_last_error(), took);
    assert_non_null(strstr(dlock_last_error(), "is it a TLS port?"));
    assert_true(took < 1600);
    th_redis_stop(&plain);
}

/* tls-auth-clients yes: without a client certificate nothing works; with
 * cert and key everything does. */
static void client_certificate_is_presented(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start_tls(&r, certs, "server", "tls-auth-clients yes\n"), 0);
    dlock_client *c = NULL;
    dlock_status st = connect_to(r.tls_url, &c);
    if (st == DLOCK_OK) {
        /* TLS 1.3: the server's refusal can arrive after the handshake. */
        uint64_t id;
        st = dlock_id_next(c, "tls", &id, 1);
        dlock_client_free(c);
    }
    assert_int_not_equal(st, DLOCK_OK);
    print_message("without a client certificate: %s\n", dlock_last_error());
    char url[768];
    snprintf(url, sizeof url, "%s&cert=%s/client.pem&key=%s/client.key", r.tls_url, certs, certs);
    assert_int_equal(connect_to(url, &c), DLOCK_OK);
    uint64_t id = 0;
    assert_int_equal(dlock_id_next(c, "tls", &id, 1), DLOCK_OK);
    assert_true(id > 0);
    dlock_client_free(c);
    th_redis_stop(&r);
}

/* Run dlock with `url`; its exit status, its stderr in err. */
static int run_cli(const char *url, char *err, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "%s/cli.err", certs);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(path, "w", stderr)) _exit(99);
        execl(th_bin("dlock"), "dlock", "-u", url, "lock", "-w", "0", "tls-cli", "--", "true", (char *)NULL);
        _exit(98);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(err, 1, size - 1, f) : 0;
    err[n] = '\0';
    if (f) fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void cli_runs_over_tls_and_exits_69_on_a_bad_certificate(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start_tls(&r, certs, "server", NULL), 0);
    char err[1024], url[512];
    assert_int_equal(run_cli(r.tls_url, err, sizeof err), 0);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s/other-ca.pem", r.tls_port, certs);
    assert_int_equal(run_cli(url, err, sizeof err), 69);
    print_message("dlock said: %s", err);
    assert_non_null(strstr(err, "certificate verify failed"));
    assert_non_null(strchr(err, '\n'));
    assert_null(strchr(strchr(err, '\n') + 1, '\n')); /* one line */
    th_redis_stop(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(openssl_is_loaded_by_the_first_tls_url_only),
        cmocka_unit_test(lock_wait_and_watchdog_work_over_tls),
        cmocka_unit_test(bad_certificates_are_refused_with_their_reason),
        cmocka_unit_test(plaintext_server_behind_rediss_is_a_clear_error),
        cmocka_unit_test(client_certificate_is_presented),
        cmocka_unit_test(cli_runs_over_tls_and_exits_69_on_a_bad_certificate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
