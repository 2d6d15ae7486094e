/*
 * Credentials of `seckill serve` and `seckill verify`, end to end: the
 * Redis and database URLs from SECKILL_REDIS_URL and SECKILL_DB_URL, their
 * passwords from password files or SECKILL_REDIS_PASSWORD and
 * SECKILL_DB_PASSWORD instead of the URLs, against a redis-server with
 * requirepass and (in the postgres run) a PostgreSQL role that must give
 * its password. No password, given any of these ways, may show on stderr
 * or in /metrics, also when it is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pg_harness.h"
#include "sk_test.h"

/* Every password of this suite has this in it, so one search finds any. */
#define SECRET_MARK "s3cret"

static skt_dir dir;

static int setup(void **state)
{
    (void)state;
    return skt_dir_make(&dir);
}

static int teardown(void **state)
{
    (void)state;
    skt_kill_all();
    skt_dir_remove(&dir);
    th_redis_stop_all();
    return 0;
}

/* Write `text` to `name` in the test's directory with `mode`; its path. */
static const char *write_file(char *path, size_t cap, const char *name, const char *text, unsigned mode)
{
    snprintf(path, cap, "%s/%s", dir.path, name);
    assert_int_equal(th_write_file(path, text, mode), 0);
    return path;
}

/* Run seckill to its end with `env` ("K=V", NULL-terminated, may be NULL)
 * added; its exit status, and its stderr in err[cap]. */
static int run_seckill(const char *const *argv, const char *const *env, char *err, size_t cap)
{
    static int n;
    char path[256];
    snprintf(path, sizeof path, "%s/run%d.err", dir.path, n++);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
        int devnull = open("/dev/null", O_RDWR);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (devnull < 0 || fd < 0) _exit(126);
        dup2(devnull, 0);
        dup2(devnull, 1);
        dup2(fd, 2);
        execv(SECKILL_BIN, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    for (int waited = 0; waitpid(pid, &st, WNOHANG) != pid; waited += 10) {
        if (waited > 60000) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_msg("seckill did not end within 60 s");
        }
        usleep(10000);
    }
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t len = fread(err, 1, cap - 1, f);
    err[len] = '\0';
    fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Fail, showing `where`, if a password shows in `text`. */
static void assert_no_secret(const char *where, const char *text)
{
    if (strstr(text, SECRET_MARK)) fail_msg("a password shows in %s:\n%s", where, text);
}

/* A served instance takes orders (Redis and the database are really in
 * use), /metrics and then its whole stderr show no password; it stops. */
static void serve_works_and_shows_no_secret(skt_serve *s)
{
    char resp[65536];
    char user[256], path[96];
    long long v = skt_voucher(s->port, &dir, "creds", 3, (long long)time(NULL) - 5, (long long)time(NULL) + 3600);
    assert_true(v > 0);
    snprintf(path, sizeof path, "/api/vouchers/%lld/orders", v);
    skt_token(&dir, 7, 0, user, sizeof user);
    assert_int_equal(skt_http(s->port, "POST", path, user, NULL, resp, sizeof resp), 201);
    assert_int_equal(skt_http(s->port, "GET", "/metrics", NULL, NULL, resp, sizeof resp), 200);
    assert_no_secret("/metrics", resp);
    assert_int_equal(skt_serve_stop(s), 0);
    FILE *f = fopen(s->err, "r");
    assert_non_null(f);
    size_t len = fread(resp, 1, sizeof resp - 1, f);
    resp[len] = '\0';
    fclose(f);
    assert_no_secret("serve's stderr", resp);
}

/* Redis's password from SECKILL_REDIS_PASSWORD or --redis-password-file
 * (the file wins, and both win over the URL's), the URL from --redis or
 * SECKILL_REDIS_URL; verify takes them the same way. A refused password
 * is 69 with the URL masked on stderr. */
static void redis_password_from_environment_or_file(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start(&r, "requirepass redis-" SECRET_MARK "\n"), 0);
    char none[128], wrong[160], file[256], env_url[200], err[8192];
    snprintf(none, sizeof none, "redis://127.0.0.1:%d", r.port);
    snprintf(wrong, sizeof wrong, "redis://:url-" SECRET_MARK "@127.0.0.1:%d", r.port);
    write_file(file, sizeof file, "redis.pw", "redis-" SECRET_MARK "\n", 0600);
    snprintf(env_url, sizeof env_url, "SECKILL_REDIS_URL=%s", wrong);

    skt_serve s;
    const char *const env_pw[] = {"SECKILL_REDIS_PASSWORD=redis-" SECRET_MARK, NULL};
    assert_int_equal(skt_serve_start(&s, &dir, none, "redis", NULL, env_pw), 0);
    serve_works_and_shows_no_secret(&s);

    const char *const from_file[] = {"--redis-password-file", file, NULL};
    const char *const env_both[] = {env_url, "SECKILL_REDIS_PASSWORD=wrong-" SECRET_MARK, NULL};
    assert_int_equal(skt_serve_start(&s, &dir, NULL, "redis", from_file, env_both), 0);
    serve_works_and_shows_no_secret(&s);

    const char *const serve_wrong[] = {SECKILL_BIN, "serve", "--listen",      "127.0.0.1:0",   "--redis", wrong,
                                       "--db",      dir.db,  "--secret-file", dir.secret_file, NULL};
    assert_int_equal(run_seckill(serve_wrong, NULL, err, sizeof err), 69);
    assert_no_secret("serve's stderr (URL password refused)", err);
    assert_non_null(strstr(err, "redis://:***@127.0.0.1:"));
    const char *const serve_env[] = {SECKILL_BIN, "serve",         "--listen",      "127.0.0.1:0", "--db",
                                     dir.db,      "--secret-file", dir.secret_file, NULL};
    const char *const env_wrong[] = {env_url, NULL};
    assert_int_equal(run_seckill(serve_env, env_wrong, err, sizeof err), 69);
    assert_no_secret("serve's stderr (SECKILL_REDIS_URL password refused)", err);

    const char *const verify[] = {SECKILL_BIN, "verify", "--voucher", "1", "--redis-password-file", file, NULL};
    char db_url[600];
    snprintf(db_url, sizeof db_url, "SECKILL_DB_URL=%s", dir.db);
    const char *const env_verify[] = {env_url, db_url, NULL};
    assert_int_equal(run_seckill(verify, env_verify, err, sizeof err), 0);
    assert_no_secret("verify's stderr", err);
    const char *const verify_wrong[] = {SECKILL_BIN, "verify", "--voucher", "1", NULL};
    assert_int_equal(run_seckill(verify_wrong, env_verify, err, sizeof err), 69);
    assert_no_secret("verify's stderr (password refused)", err);
    assert_non_null(strstr(err, "redis://:***@127.0.0.1:"));
    th_redis_stop(&r);
}

/* A password file others may access, that is missing or not a regular
 * file is a usage error (64, one line, nothing of it shown), for serve and
 * verify, before anything starts. SECKILL_DB_URL is serve's --db too. */
static void password_file_open_to_others_is_a_usage_error(void **state)
{
    (void)state;
    char open644[256], open640[256], missing[256], err[8192];
    write_file(open644, sizeof open644, "pw644", "file-" SECRET_MARK "\n", 0644);
    write_file(open640, sizeof open640, "pw640", "file-" SECRET_MARK "\n", 0640);
    snprintf(missing, sizeof missing, "%s/no-such-file", dir.path);
    const char *const bad[] = {open644, open640, missing, dir.path};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *const serve[] = {
            SECKILL_BIN, "serve", "--listen", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1", "--redis-password-file",
            bad[i],      NULL};
        const char *const verify[] = {SECKILL_BIN,          "verify", "--db", dir.db, "--voucher", "1",
                                      "--db-password-file", bad[i],   NULL};
        const char *const *runs[] = {serve, verify};
        for (int k = 0; k < 2; k++) {
            assert_int_equal(run_seckill(runs[k], NULL, err, sizeof err), 64);
            assert_no_secret("stderr", err);
            assert_non_null(strstr(err, "password file"));
            assert_non_null(strchr(err, '\n'));
            assert_int_equal(strchr(err, '\n')[1], '\0');
        }
    }
    const char *const serve[] = {SECKILL_BIN,           "serve",         "--listen",      "127.0.0.1:0", "--redis",
                                 "redis://127.0.0.1:1", "--secret-file", dir.secret_file, NULL};
    const char *const env[] = {"SECKILL_DB_URL=nosuch://u:db-" SECRET_MARK "@host/db", NULL};
    assert_int_equal(run_seckill(serve, env, err, sizeof err), 69);
    assert_non_null(strstr(err, "unknown database URL scheme: nosuch://u:***@host/db"));
    assert_no_secret("stderr", err);
}

/* PostgreSQL's password from SECKILL_DB_PASSWORD or --db-password-file,
 * given to libpq as a parameter of its own, in place of the URL's; a
 * refused one is 69 with nothing of it shown (also from libpq). */
static void database_password_from_environment_or_file(void **state)
{
    (void)state;
    const skt_pg *pg = skt_pg_server();
    if (!pg) {
        print_message("skipped: PostgreSQL only (SQLite has no password)\n");
        skip();
    }
    char url[512], with_pw[600], file[256], err[8192];
    assert_int_equal(skt_pg_password_role(pg, "skpw", "db-" SECRET_MARK, "pwschema", url, sizeof url), 0);
    snprintf(dir.db, sizeof dir.db, "%s", url);
    write_file(file, sizeof file, "db.pw", "db-" SECRET_MARK "\n", 0600);
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);

    skt_serve s;
    const char *const env_pw[] = {"SECKILL_DB_PASSWORD=db-" SECRET_MARK, NULL};
    assert_int_equal(skt_serve_start(&s, &dir, r.url, "redis", NULL, env_pw), 0);
    serve_works_and_shows_no_secret(&s);
    const char *const from_file[] = {"--db-password-file", file, NULL};
    const char *const env_wrong_pw[] = {"SECKILL_DB_PASSWORD=wrong-" SECRET_MARK, NULL};
    assert_int_equal(skt_serve_start(&s, &dir, r.url, "lock", from_file, env_wrong_pw), 0);
    serve_works_and_shows_no_secret(&s);

    const char *const verify[] = {SECKILL_BIN,          "verify", "--db", url, "--voucher", "1",
                                  "--db-password-file", file,     NULL};
    assert_int_equal(run_seckill(verify, NULL, err, sizeof err), 0);
    const char *const verify_env[] = {SECKILL_BIN, "verify", "--db", url, "--voucher", "1", NULL};
    assert_int_equal(run_seckill(verify_env, env_wrong_pw, err, sizeof err), 69);
    assert_no_secret("verify's stderr (SECKILL_DB_PASSWORD refused)", err);
    assert_non_null(strstr(err, "password authentication failed"));
    assert_int_equal(run_seckill(verify_env, NULL, err, sizeof err), 69); /* no password at all */

    /* A wrong password in the URL itself: refused, and masked. */
    snprintf(with_pw, sizeof with_pw, "postgresql://skpw:url-" SECRET_MARK "@/%s", url + strlen("postgresql:///"));
    const char *const serve_url_pw[] = {SECKILL_BIN, "serve", "--listen",      "127.0.0.1:0",   "--redis", r.url,
                                        "--db",      with_pw, "--secret-file", dir.secret_file, NULL};
    assert_int_equal(run_seckill(serve_url_pw, NULL, err, sizeof err), 69);
    assert_no_secret("serve's stderr (URL password refused)", err);
    /* One libpq cannot parse (a bad escape in the password) shows none of it. */
    snprintf(with_pw, sizeof with_pw, "postgresql://skpw:url-%%zz" SECRET_MARK "@/%s", url + strlen("postgresql:///"));
    const char *const serve_bad_uri[] = {SECKILL_BIN, "serve", "--listen",      "127.0.0.1:0",   "--redis", r.url,
                                         "--db",      with_pw, "--secret-file", dir.secret_file, NULL};
    assert_int_equal(run_seckill(serve_bad_uri, NULL, err, sizeof err), 69);
    assert_no_secret("serve's stderr (malformed URL)", err);
    assert_non_null(strstr(err, "malformed URL"));
    th_redis_stop(&r);
}

int main(int argc, char **argv)
{
    int rc = skt_backend_init(argc, argv);
    if (rc) return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(redis_password_from_environment_or_file, setup, teardown),
        cmocka_unit_test_setup_teardown(password_file_open_to_others_is_a_usage_error, setup, teardown),
        cmocka_unit_test_setup_teardown(database_password_from_environment_or_file, setup, teardown),
    };
    rc = cmocka_run_group_tests_name(skt_backend_name(), tests, NULL, NULL);
    skt_backend_stop();
    return rc;
}
