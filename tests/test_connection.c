/*
 * What a client's connections carry to the server, taken from the URL or
 * the options: the password (AUTH), an ACL user, the database (SELECT);
 * wrong ones refused by dlock_client_new. And a server restart does not
 * kill the process with SIGPIPE. Every case needs a single server (one of
 * its own, or the target's) and skips elsewhere, so ctest runs this suite
 * on single servers only: plain, TLS and Valkey.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "fence.h" /* dlock__fence_key */
#include "target.h"
#include "th_lock.h"

static th_target server;

/* ------------------------------------------------------------------------ */

/* The header promises that the library never raises signals. After a
 * restart the client's pooled connection is dead; on a unix socket the
 * first write to it raises SIGPIPE, which kills any application that has
 * not ignored SIGPIPE itself. A child with the default disposition must
 * survive a restart and simply get the lock on a new connection. */
static void server_restart_does_not_kill_the_process_with_sigpipe(void **state)
{
    (void)state;
    th_target_require_single(&server); /* its own server, restarted or configured */
    th_redis r;
    int up[2], down[2];
    assert_int_equal(th_redis_start(&r, NULL), 0);
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL); /* whatever the test runner set */
        dlock_client *cc = th_lock_client(r.url, 0);
        dlock_lock *ll;
        if (!cc || dlock_lock_new(cc, "sigpipe", &ll)) _exit(2);
        if (dlock_lock_acquire(ll, 0, 5000, NULL) || dlock_lock_release(ll)) _exit(3);
        char ch = 'a';
        if (write(up[1], &ch, 1) != 1 || read(down[0], &ch, 1) != 1) _exit(4);
        int st = dlock_lock_acquire(ll, 0, 5000, NULL);
        if (write(up[1], &st, sizeof st) != sizeof st) _exit(5);
        _exit(0);
    }
    close(up[1]); /* so that reads see EOF if the child dies */
    close(down[0]);
    char ch;
    int got = -100, st = 0;
    ssize_t n1 = read(up[0], &ch, 1);
    int restarted = -1;
    ssize_t n2 = -1, n3 = -1;
    if (n1 == 1) { /* else the child is gone: writing to it would be our SIGPIPE */
        restarted = th_redis_restart(&r);
        n2 = write(down[1], "g", 1);
        n3 = read(up[0], &got, sizeof got);
    }
    waitpid(pid, &st, 0);
    th_redis_stop(&r);
    close(up[0]);
    close(down[1]);
    assert_int_equal(n1, 1);
    assert_int_equal(restarted, 0);
    assert_int_equal(n2, 1);
    if (WIFSIGNALED(st)) fail_msg("the client process was killed by signal %d after the restart", WTERMSIG(st));
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(n3, sizeof got);
    assert_int_equal(got, DLOCK_OK);
}

/* The sockets open now, as a bitmap of descriptor numbers below 1024;
 * how many. */
static int open_sockets(unsigned char *map)
{
    memset(map, 0, 1024 / 8);
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        struct stat st;
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd >= 1024 || fd == dirfd(d)) continue;
        if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        map[fd / 8] |= (unsigned char)(1u << (fd % 8));
        n++;
    }
    closedir(d);
    return n;
}

/* hiredis opens its sockets without SOCK_CLOEXEC; the library marks them,
 * so a program that runs another (fork and exec) hands it none of its
 * Redis connections: not the commands' connection, not the subscriber's
 * that a wait opens. */
static void the_clients_connections_are_close_on_exec(void **state)
{
    (void)state;
    unsigned char before[1024 / 8], after[1024 / 8];
    open_sockets(before);
    dlock_client *hc = th_lock_client(server.url, 0), *wc = th_lock_client(server.url, 0);
    assert_non_null(hc);
    assert_non_null(wc);
    dlock_lock *held = th_lock_new(hc, "cloexec"), *waiting = th_lock_new(wc, "cloexec");
    assert_int_equal(dlock_lock_acquire(held, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(waiting, 200, 5000, NULL), DLOCK_ERR_TIMEOUT); /* waited: subscribed */
    open_sockets(after);
    int opened = 0;
    for (int fd = 0; fd < 1024; fd++) {
        if (!(after[fd / 8] & (1u << (fd % 8))) || (before[fd / 8] & (1u << (fd % 8)))) continue;
        opened++;
        int flags = fcntl(fd, F_GETFD);
        if (flags < 0 || !(flags & FD_CLOEXEC)) fail_msg("socket %d of the library is not close-on-exec", fd);
    }
    assert_true(opened >= 3); /* two clients' commands, one subscriber */
    assert_int_equal(dlock_lock_release(held), DLOCK_OK);
    dlock_lock_free(waiting);
    dlock_lock_free(held);
    dlock_client_free(wc);
    dlock_client_free(hc);
}

/* Take and release a lock through a client of `url` made with options
 * `o` (NULL: none): the credentials and database really reached the
 * server. */
static void assert_lock_works_with(const char *url, const dlock_options *o, const char *name)
{
    dlock_client *c = NULL;
    if (dlock_client_new(url, o, &c) != DLOCK_OK) fail_msg("client for %s: %s", url, dlock_last_error());
    dlock_lock *l = th_lock_new(c, name);
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_free(c);
}

static void assert_lock_works(const char *url, const char *name)
{
    assert_lock_works_with(url, NULL, name);
}

static void assert_client_fails_with(const char *url, const dlock_options *o, dlock_status want)
{
    dlock_client *c = (dlock_client *)&c;
    dlock_status st = dlock_client_new(url, o, &c);
    if (st != want) fail_msg("%s: status %d (%s), want %d", url, st, dlock_last_error(), want);
    assert_null(c);
}

static void assert_client_fails(const char *url, dlock_status want)
{
    assert_client_fails_with(url, NULL, want);
}

/* With requirepass, the URL's password is sent with AUTH and the lock
 * works; a wrong or missing password is DLOCK_ERR_AUTH from
 * dlock_client_new, not a later confusing failure. A percent-encoded
 * password reaches the server decoded. */
static void password_from_url_is_used_and_wrong_one_refused(void **state)
{
    (void)state;
    th_target_require_single(&server); /* its own server, restarted or configured */
    th_redis r;
    char url[512];
    assert_int_equal(th_redis_start(&r, "requirepass s3cret\n"), 0);
    snprintf(url, sizeof url, "redis://:s3cret@127.0.0.1:%d", r.port);
    assert_lock_works(url, "auth");
    snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d", r.port);
    assert_client_fails(url, DLOCK_ERR_AUTH);
    assert_non_null(strstr(dlock_last_error(), "AUTH"));
    assert_client_fails(r.tcp_url, DLOCK_ERR_AUTH); /* no password at all */
    assert_client_fails(r.url, DLOCK_ERR_AUTH);     /* unix socket, no password */
    th_redis_stop(&r);

    assert_int_equal(th_redis_start(&r, "requirepass p@ss:w/rd%x\n"), 0);
    snprintf(url, sizeof url, "redis://:p%%40ss%%3Aw%%2Frd%%25x@127.0.0.1:%d", r.port);
    assert_lock_works(url, "auth-escaped");
    snprintf(url, sizeof url, "redis://:p%%40ss%%3Aw%%2Frd%%25y@127.0.0.1:%d", r.port);
    assert_client_fails(url, DLOCK_ERR_AUTH);
    th_redis_stop(&r);
}

/* dlock_options.password and .username stand in for the URL's, so a
 * program can keep them out of every URL it prints: the option's password
 * wins over the URL's (right or wrong), keeps the URL's user unless
 * username is given too, and gives a unix:// URL (which has no place for
 * one) a password. An empty one is refused like "user:@" in a URL. */
static void credentials_from_options_replace_the_urls(void **state)
{
    (void)state;
    th_target_require_single(&server); /* its own server, configured */
    th_redis r;
    char url[512];
    assert_int_equal(th_redis_start(&r, "requirepass s3cret\nuser alice on >pw ~* &* +@all\n"), 0);
    dlock_options o = {0};
    o.password = "s3cret";
    snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d", r.port);
    assert_lock_works_with(url, &o, "opt-auth");
    assert_lock_works_with(r.tcp_url, &o, "opt-auth");
    assert_lock_works_with(r.url, &o, "opt-auth"); /* unix socket */
    o.password = "wrong";
    snprintf(url, sizeof url, "redis://:s3cret@127.0.0.1:%d", r.port);
    assert_client_fails_with(url, &o, DLOCK_ERR_AUTH);

    /* "pw" is alice's password only: a success is AUTH as alice. */
    o.password = "pw";
    snprintf(url, sizeof url, "redis://alice:nope@127.0.0.1:%d", r.port);
    assert_lock_works_with(url, &o, "opt-acl");
    assert_client_fails_with(r.tcp_url, &o, DLOCK_ERR_AUTH); /* the default user */
    o.username = "alice";
    assert_lock_works_with(r.tcp_url, &o, "opt-acl");
    snprintf(url, sizeof url, "redis://mallory:s3cret@127.0.0.1:%d", r.port);
    assert_lock_works_with(url, &o, "opt-acl");

    o.password = "";
    assert_client_fails_with(r.tcp_url, &o, DLOCK_ERR_INVALID);
    o.password = "pw";
    o.username = "";
    assert_client_fails_with(r.tcp_url, &o, DLOCK_ERR_INVALID);
    th_redis_stop(&r);
}

/* An ACL user from the URL ("user:password@") authenticates as that user;
 * a wrong password or unknown user is DLOCK_ERR_AUTH. A user whose ACL
 * does not cover the lock's keys gets DLOCK_ERR_AUTH (NOPERM) on acquire,
 * not a lock. */
static void acl_user_from_url_is_used(void **state)
{
    (void)state;
    th_target_require_single(&server); /* its own server, restarted or configured */
    th_redis r;
    char url[512];
    assert_int_equal(th_redis_start(&r, "user alice on >pw ~* &* +@all\n"
                                        "user bob on >pw ~other:* &* +@all\n"),
                     0);
    snprintf(url, sizeof url, "redis://alice:pw@127.0.0.1:%d", r.port);
    assert_lock_works(url, "acl");
    snprintf(url, sizeof url, "redis://alice:nope@127.0.0.1:%d", r.port);
    assert_client_fails(url, DLOCK_ERR_AUTH);
    snprintf(url, sizeof url, "redis://mallory:pw@127.0.0.1:%d", r.port);
    assert_client_fails(url, DLOCK_ERR_AUTH);

    snprintf(url, sizeof url, "redis://bob:pw@127.0.0.1:%d", r.port);
    dlock_client *c = th_lock_client(url, 0);
    assert_non_null(c);
    dlock_lock *l = th_lock_new(c, "acl");
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_ERR_AUTH);
    assert_non_null(strstr(dlock_last_error(), "NOPERM"));
    assert_int_equal(th_lock_int(&server, &r, "EXISTS %s", "dlock:{acl}"), 0);
    dlock_lock_free(l);
    dlock_client_free(c);
    th_redis_stop(&r);
}

/* A release hands the lock to a waiting thread of another process only
 * if that process listens on the server that runs it, which it asks with
 * PUBSUB NUMSUB (release.lua says why). An ACL user who may not run
 * PUBSUB cannot ask, so the release must wake the waiter instead, whose
 * own attempt takes the lock: at once on the release (not at its timed
 * retry, 2 s), and alone. */
static void a_user_who_may_not_run_PUBSUB_is_woken_by_a_release_of_another_process(void **state)
{
    (void)state;
    th_target_require_single(&server); /* its own server, restarted or configured */
    th_redis r;
    char url[512];
    assert_int_equal(th_redis_start(&r, "user lim on >pw ~* &* +@all -pubsub\n"), 0);
    snprintf(url, sizeof url, "redis://lim:pw@127.0.0.1:%d", r.port);
    dlock_client *hc = th_lock_client(url, 0), *wc = th_lock_client(url, 0), *xc = th_lock_client(url, 0);
    assert_true(hc && wc && xc);
    dlock_lock *holder = th_lock_new(hc, "no-pubsub"), *other = th_lock_new(xc, "no-pubsub");
    dlock_lock *waiting = th_lock_new(wc, "no-pubsub");
    assert_int_equal(dlock_lock_acquire(holder, 0, 10000, NULL), DLOCK_OK);
    th_waiter w;
    th_waiter_start(&w, waiting, 5000, 10000);
    usleep(300000); /* subscribed, registered with its offer, asleep */
    long long released = th_now_ms();
    assert_int_equal(dlock_lock_release(holder), DLOCK_OK);
    th_waiter_wait(&w);
    dlock_status st = dlock_lock_acquire(other, 0, 10000, NULL);
    th_waiter_finish(&w);
    if (w.st != DLOCK_OK) fail_msg("the waiter: %s", dlock_strerror(w.st));
    if (w.at - released >= 1000) fail_msg("the waiter got the lock %lld ms after the release", w.at - released);
    if (st == DLOCK_OK) fail_msg("a third client took the lock the waiter holds");
    assert_int_equal(w.released, DLOCK_OK);
    assert_int_equal(th_lock_int(&server, &r, "EXISTS %s", "dlock:{no-pubsub}"), 0);
    dlock_lock_free(waiting);
    dlock_lock_free(other);
    dlock_lock_free(holder);
    dlock_client_free(xc);
    dlock_client_free(wc);
    dlock_client_free(hc);
    th_redis_stop(&r);
}

static long long exists_in_db(int db, const char *key)
{
    redisContext *rc = th_redis_connect(&server.single);
    assert_non_null(rc);
    redisReply *r = redisCommand(rc, "SELECT %d", db);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(rc, "EXISTS %s", key);
    assert_non_null(r);
    long long v = r->integer;
    freeReplyObject(r);
    redisFree(rc);
    return v;
}

/* The database in the URL (unix ?db=3, redis:// /5) is SELECTed on every
 * connection: the lock key lands in that database and nowhere else. A
 * database the server does not have is DLOCK_ERR_AUTH ("SELECT refused")
 * from dlock_client_new. */
static void database_from_url_is_selected(void **state)
{
    (void)state;
    th_target_require_single(&server); /* unix ?db= and redis:// /N forms */
    char url[512];
    snprintf(url, sizeof url, "%s?db=3", server.single.url);
    dlock_client *c = th_lock_client(url, 0);
    assert_non_null(c);
    dlock_lock *l = th_lock_new(c, "dbsel");
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(exists_in_db(3, "dlock:{dbsel}"), 1);
    assert_int_equal(exists_in_db(0, "dlock:{dbsel}"), 0);
    assert_int_equal(exists_in_db(5, "dlock:{dbsel}"), 0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(exists_in_db(3, "dlock:{dbsel}"), 0);
    char *fence = dlock__fence_key("dbsel");
    assert_int_equal(exists_in_db(3, fence), 1);
    free(fence);
    dlock_lock_free(l);
    dlock_client_free(c);

    snprintf(url, sizeof url, "%s/5", server.single.tcp_url);
    c = th_lock_client(url, 0);
    assert_non_null(c);
    l = th_lock_new(c, "dbsel5");
    assert_int_equal(dlock_lock_acquire(l, 0, 5000, NULL), DLOCK_OK);
    assert_int_equal(exists_in_db(5, "dlock:{dbsel5}"), 1);
    assert_int_equal(exists_in_db(0, "dlock:{dbsel5}"), 0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_lock_free(l);
    dlock_client_free(c);

    snprintf(url, sizeof url, "%s/99", server.single.tcp_url); /* default: 16 databases */
    assert_client_fails(url, DLOCK_ERR_AUTH);
    assert_non_null(strstr(dlock_last_error(), "SELECT"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(server_restart_does_not_kill_the_process_with_sigpipe),
        cmocka_unit_test(password_from_url_is_used_and_wrong_one_refused),
        cmocka_unit_test(acl_user_from_url_is_used),
        cmocka_unit_test(a_user_who_may_not_run_PUBSUB_is_woken_by_a_release_of_another_process),
        cmocka_unit_test(credentials_from_options_replace_the_urls),
        cmocka_unit_test(database_from_url_is_selected),
        cmocka_unit_test(the_clients_connections_are_close_on_exec),
    };
    /* SIGPIPE keeps its default action on purpose: the restart test
     * writes to connections whose server was just killed, and the library
     * must not let that kill the program. */
    return th_target_run_suite(tests, &server);
}
