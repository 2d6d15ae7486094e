/*
 * Connection URLs: dlock_url_parse() is strict (a typo must be an error,
 * never a silent connection to a default port or database), says which
 * part is wrong, leaves the output zeroed on failure, decodes
 * percent-escapes in credentials; dlock_client_new() reports a bad URL as
 * DLOCK_ERR_URL and an unreachable server as DLOCK_ERR_CONNECT, quickly.
 * No Redis server is needed except for nothing listening: these tests run
 * the parser and the connect path only.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"

/* Leave a message in dlock_last_error() that no URL failure produces, so a
 * later check proves the message came from the call under test. */
static void prime_last_error(void)
{
    assert_int_equal(dlock_url_parse("redis://h", NULL), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_last_error(), "no output struct"));
}

static int is_zeroed(const dlock_url *u)
{
    static const dlock_url zero;
    return memcmp(u, &zero, sizeof zero) == 0;
}

/* Parse `url`, expecting DLOCK_ERR_URL, a zeroed struct (even when it held
 * garbage before) and an explanation containing `why`. */
static void expect_bad(const char *url, const char *why)
{
    dlock_url u;
    memset(&u, 0xa5, sizeof u);
    prime_last_error();
    dlock_status st = dlock_url_parse(url, &u);
    if (st != DLOCK_ERR_URL)
        fail_msg("URL \"%s\": status %d (%s), expected DLOCK_ERR_URL", url ? url : "(null)", st, dlock_strerror(st));
    if (!is_zeroed(&u)) fail_msg("URL \"%s\": output not zeroed on failure", url ? url : "(null)");
    const char *msg = dlock_last_error();
    if (!msg[0] || strcmp(msg, "no error") == 0 || !strstr(msg, why))
        fail_msg("URL \"%s\": last error \"%s\" does not mention \"%s\"", url ? url : "(null)", msg, why);
}

static void parse_ok(const char *url, dlock_url *u)
{
    memset(u, 0xa5, sizeof *u);
    dlock_status st = dlock_url_parse(url, u);
    if (st != DLOCK_OK) fail_msg("URL \"%s\": status %d: %s", url, st, dlock_last_error());
}

/* Empty and missing input and unknown schemes are refused. A parser that
 * defaulted to redis://localhost on empty input would make a missing
 * environment variable connect somewhere. */
static void empty_null_and_unknown_schemes_are_refused(void **state)
{
    (void)state;
    expect_bad("", "empty");
    expect_bad(NULL, "empty");
    expect_bad("http://h:6379",
               "must start with redis://, rediss://, unix://, redis[s]-sentinel:// or redis[s]-cluster://");
    expect_bad("redis:/h", "must start with");
    expect_bad("redis:h", "must start with");
    expect_bad("redis//h", "must start with");
    expect_bad("h:6379", "must start with");
    expect_bad("tcp://h", "must start with");
    /* Bare sentinel:// and cluster:// are just unknown schemes ... */
    expect_bad("sentinel://h:26379", "must start with");
    expect_bad("cluster://h:7000", "must start with");
    /* A NULL output struct is an invalid argument, not a URL error. */
    assert_int_equal(dlock_url_parse("redis://h", NULL), DLOCK_ERR_INVALID);
}

/* Ports outside 1..65535 or not plain decimal fail instead of falling back
 * to 6379 (which would connect to some other server). */
static void bad_ports_are_refused(void **state)
{
    (void)state;
    const char *why = "port must be a number from 1 to 65535";
    expect_bad("redis://h:0", why);
    expect_bad("redis://h:65536", why);
    expect_bad("redis://h:99999", why);
    expect_bad("redis://h:abc", why);
    expect_bad("redis://h:", why);
    expect_bad("redis://h:/1", why);
    expect_bad("redis://h:-1", why);
    expect_bad("redis://h:+80", why);
    expect_bad("redis://h:0x50", why);
    expect_bad("redis://h:80a", why);
    expect_bad("redis://h:6379x/0", why);
    expect_bad("redis://h:1234567890123", why); /* would overflow a naive parser */
    expect_bad("redis://h:4294973675", why);    /* 2^32 + 6379: would wrap to 6379 in 32 bits */
    expect_bad("redis://u:p@h:0", why);
}

/* A bad database number fails instead of silently using db 0. */
static void bad_databases_are_refused(void **state)
{
    (void)state;
    const char *why = "database must be a non-negative number";
    expect_bad("redis://h/abc", why);
    expect_bad("redis://h:6379/-1", why);
    expect_bad("redis://h/1.5", why);
    expect_bad("redis://h/1000001", why);
    expect_bad("redis://h/99999999999", why);
    expect_bad("redis://h/3a", why);
    expect_bad("redis://h/+3", why);
}

/* Anything after the host, port and db is refused: a query string, a
 * fragment, a second path part, percent-escapes or odd bytes in the host,
 * spaces and control characters anywhere. */
static void trailing_junk_and_odd_characters_are_refused(void **state)
{
    (void)state;
    expect_bad("redis://h:6379/0/extra", "database");
    expect_bad("redis://h/0?x=1", "database");
    expect_bad("redis://h?db=1", "unexpected characters after host");
    expect_bad("redis://h#frag", "unexpected characters after host");
    expect_bad("redis://h%41", "unexpected characters after host");
    expect_bad("redis://h,i", "unexpected characters after host");
    expect_bad("redis://h*", "unexpected characters after host");
    expect_bad("redis://[::1]x", "unexpected characters after host");
    expect_bad("redis://h 1", "space or control character");
    expect_bad(" redis://h", "space or control character");
    expect_bad("redis://h\t", "space or control character");
    expect_bad("redis://h\n", "space or control character");
    expect_bad("redis://h\x7f", "space or control character");
    expect_bad("redis://:pa ss@h", "space or control character");
    expect_bad("unix:///tmp/a b.sock", "space or control character");
}

static void missing_hosts_and_bad_ipv6_are_refused(void **state)
{
    (void)state;
    expect_bad("redis://", "missing host");
    expect_bad("redis://:6379", "missing host");
    expect_bad("redis:///0", "missing host");
    expect_bad("redis://u:p@", "missing host");
    expect_bad("redis://[]:6379", "missing host");
    expect_bad("redis://[::1", "unterminated IPv6 address");
    expect_bad("redis://[::g]:1", "bad IPv6 address");
}

/* Unix socket paths must be absolute and non-empty; only ?db=N may follow. */
static void bad_unix_urls_are_refused(void **state)
{
    (void)state;
    expect_bad("unix://", "must be absolute");
    expect_bad("unix://tmp/x.sock", "must be absolute");
    expect_bad("unix://./x.sock", "must be absolute");
    expect_bad("unix:///", "missing socket path");
    expect_bad("unix:///?db=1", "missing socket path");
    expect_bad("unix:///tmp/x.sock?", "only ?db=N is understood");
    expect_bad("unix:///tmp/x.sock?foo=2", "only ?db=N is understood");
    expect_bad("unix:///tmp/x.sock?DB=2", "only ?db=N is understood");
    expect_bad("unix:///tmp/x.sock?db=", "database must be a non-negative number");
    expect_bad("unix:///tmp/x.sock?db=abc", "database");
    expect_bad("unix:///tmp/x.sock?db=-1", "database");
    expect_bad("unix:///tmp/x.sock?db=2x", "database");
    expect_bad("unix:///tmp/x.sock?db=2&db=3", "database");
    expect_bad("unix:///tmp/x.sock?db=1000001", "database");
}

/* Credentials need "[user]:password@" with a non-empty password, and every
 * percent-escape must be two hex digits and not %00 (a NUL would silently
 * cut the password short). */
static void bad_credentials_are_refused(void **state)
{
    (void)state;
    expect_bad("redis://user@h", "credentials must be [user]:password@");
    expect_bad("redis://@h", "credentials must be [user]:password@");
    expect_bad("redis://u:@h", "empty password");
    expect_bad("redis://:@h", "empty password");
    expect_bad("redis://:%zz@h", "bad percent-escape in password");
    expect_bad("redis://:%4@h", "bad percent-escape in password");
    expect_bad("redis://:ab%@h", "bad percent-escape in password");
    expect_bad("redis://:a%4g@h", "bad percent-escape in password");
    expect_bad("redis://:%00x@h", "bad percent-escape in password");
    expect_bad("redis://u:pw%00@h", "bad percent-escape in password");
    expect_bad("redis://%zz:pw@h", "bad percent-escape in user");
    expect_bad("redis://a%00b:pw@h", "bad percent-escape in user");
    expect_bad("redis://u%:pw@h", "bad percent-escape in user");
}

/* URLs longer than 4096 bytes are refused; exactly 4096 is fine. */
static void very_long_urls_are_refused(void **state)
{
    (void)state;
    enum { MAX = 4096 };
    char *url = malloc(MAX + 64);
    assert_non_null(url);
    strcpy(url, "redis://");
    memset(url + 8, 'a', MAX - 8);
    url[MAX] = '\0';
    dlock_url u;
    parse_ok(url, &u);
    assert_int_equal(strlen(u.host), MAX - 8);
    dlock_url_free(&u);
    url[MAX] = 'a';
    url[MAX + 1] = '\0';
    expect_bad(url, "longer than 4096 bytes");
    /* Far longer, and with junk past the limit: refused on length. */
    memset(url + 8, 'b', MAX + 50);
    url[MAX + 58] = '\0';
    url[MAX + 10] = ' ';
    expect_bad(url, "longer than 4096 bytes");
    free(url);
}

/* The good forms fill exactly the fields they name and default the rest
 * (port 6379, db 0, no user, no password). */
static void good_tcp_urls_fill_their_fields(void **state)
{
    (void)state;
    dlock_url u;

    parse_ok("redis://host", &u);
    assert_int_equal(u.kind, DLOCK_URL_TCP);
    assert_string_equal(u.host, "host");
    assert_int_equal(u.port, 6379);
    assert_int_equal(u.db, 0);
    assert_null(u.user);
    assert_null(u.password);
    assert_null(u.path);
    dlock_url_free(&u);
    assert_true(is_zeroed(&u));

    parse_ok("redis://127.0.0.1:6380/5", &u);
    assert_int_equal(u.kind, DLOCK_URL_TCP);
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 6380);
    assert_int_equal(u.db, 5);
    assert_null(u.user);
    assert_null(u.password);
    dlock_url_free(&u);

    parse_ok("redis://:pass@host", &u);
    assert_string_equal(u.host, "host");
    assert_int_equal(u.port, 6379);
    assert_null(u.user);
    assert_string_equal(u.password, "pass");
    assert_int_equal(u.db, 0);
    dlock_url_free(&u);

    parse_ok("redis://user:pass@host:7000/3", &u);
    assert_string_equal(u.user, "user");
    assert_string_equal(u.password, "pass");
    assert_string_equal(u.host, "host");
    assert_int_equal(u.port, 7000);
    assert_int_equal(u.db, 3);
    dlock_url_free(&u);

    /* Bounds: ports 1 and 65535, db 0 and 1000000, an empty db part. */
    parse_ok("redis://my-host.example_1:1/1000000", &u);
    assert_string_equal(u.host, "my-host.example_1");
    assert_int_equal(u.port, 1);
    assert_int_equal(u.db, 1000000);
    dlock_url_free(&u);
    parse_ok("redis://h:65535/", &u);
    assert_int_equal(u.port, 65535);
    assert_int_equal(u.db, 0);
    dlock_url_free(&u);

    /* IPv6 literals lose their brackets. */
    parse_ok("redis://[::1]:6390/2", &u);
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 6390);
    assert_int_equal(u.db, 2);
    dlock_url_free(&u);
}

static void good_unix_urls_fill_their_fields(void **state)
{
    (void)state;
    dlock_url u;
    parse_ok("unix:///tmp/x.sock?db=2", &u);
    assert_int_equal(u.kind, DLOCK_URL_UNIX);
    assert_string_equal(u.path, "/tmp/x.sock");
    assert_int_equal(u.db, 2);
    assert_null(u.host);
    assert_null(u.user);
    assert_null(u.password);
    dlock_url_free(&u);

    parse_ok("unix:///var/run/redis/redis-server.sock", &u);
    assert_int_equal(u.kind, DLOCK_URL_UNIX);
    assert_string_equal(u.path, "/var/run/redis/redis-server.sock");
    assert_int_equal(u.db, 0);
    dlock_url_free(&u);
}

/* Percent-escapes in user and password decode to any byte except NUL, in
 * either case of hex digit; ':' and '@' may also appear raw in a password
 * (the first ':' ends the user, the last '@' ends the password). */
static void credentials_are_percent_decoded(void **state)
{
    (void)state;
    dlock_url u;
    parse_ok("redis://us%40r:p%3A%40%2F%25w@h:1/0", &u);
    assert_string_equal(u.user, "us@r");
    assert_string_equal(u.password, "p:@/%w");
    assert_string_equal(u.host, "h");
    dlock_url_free(&u);

    parse_ok("redis://:%2f%2F%ff%20x@h", &u);
    assert_null(u.user);
    assert_string_equal(u.password, "//\xff x");
    dlock_url_free(&u);

    parse_ok("redis://u:p:w@rd@h:7", &u);
    assert_string_equal(u.user, "u");
    assert_string_equal(u.password, "p:w@rd");
    assert_string_equal(u.host, "h");
    assert_int_equal(u.port, 7);
    dlock_url_free(&u);

    /* The host part is not decoded: a '%' there is an error (see above). */
}

/* Sentinel URLs: a list of Sentinels (26379 by default), the master's name,
 * an optional ?db=N; credentials are for the data nodes. */
static void good_sentinel_urls_fill_their_fields(void **state)
{
    (void)state;
    dlock_url u;
    parse_ok("redis-sentinel://s1,s2:26380,[::1]:1/mymaster", &u);
    assert_int_equal(u.kind, DLOCK_URL_SENTINEL);
    assert_string_equal(u.master, "mymaster");
    assert_int_equal(u.n_addrs, 3);
    assert_string_equal(u.addrs[0].host, "s1");
    assert_int_equal(u.addrs[0].port, 26379);
    assert_string_equal(u.addrs[1].host, "s2");
    assert_int_equal(u.addrs[1].port, 26380);
    assert_string_equal(u.addrs[2].host, "::1");
    assert_int_equal(u.addrs[2].port, 1);
    assert_string_equal(u.host, "s1"); /* host and port repeat the first */
    assert_int_equal(u.port, 26379);
    assert_int_equal(u.db, 0);
    assert_null(u.user);
    assert_null(u.password);
    dlock_url_free(&u);
    assert_true(is_zeroed(&u));

    /* A '/' and an '@' in the password do not end the list early. */
    parse_ok("redis-sentinel://app:p%40s/s@127.0.0.1:5000/prod-cache.1?db=3", &u);
    assert_string_equal(u.user, "app");
    assert_string_equal(u.password, "p@s/s");
    assert_int_equal(u.n_addrs, 1);
    assert_string_equal(u.addrs[0].host, "127.0.0.1");
    assert_int_equal(u.addrs[0].port, 5000);
    assert_string_equal(u.master, "prod-cache.1");
    assert_int_equal(u.db, 3);
    dlock_url_free(&u);
}

static void bad_sentinel_urls_are_refused(void **state)
{
    (void)state;
    expect_bad("redis-sentinel://h:26379", "needs /MASTER_NAME");
    expect_bad("redis-sentinel://h:26379/", "missing master name");
    expect_bad("redis-sentinel://h:26379/?db=1", "missing master name");
    expect_bad("redis-sentinel:///m", "missing host");
    expect_bad("redis-sentinel://h,/m", "missing host");
    expect_bad("redis-sentinel://,h/m", "missing host");
    expect_bad("redis-sentinel://h:0/m", "port must be a number from 1 to 65535");
    expect_bad("redis-sentinel://h:1,h:2,h:1/m", "address listed twice");
    expect_bad("redis-sentinel://h,h:26379/m", "address listed twice");
    expect_bad("redis-sentinel://h/m/x", "master name may hold only");
    expect_bad("redis-sentinel://h/m%41", "master name may hold only");
    expect_bad("redis-sentinel://h/m?db=x", "database");
    expect_bad("redis-sentinel://h/m?x=1", "only ?db=N");
    expect_bad("redis-sentinel://u@h/m", "credentials must be [user]:password@");
    expect_bad("redis-sentinel://u:@h/m", "empty password");
    char name[300];
    snprintf(name, sizeof name, "redis-sentinel://h/%0129d", 0);
    expect_bad(name, "longer than 128");
}

/* Cluster URLs: seed nodes (6379 by default) and optional credentials. */
/* The TLS forms: the plain form's fields, TLS on with verification, and
 * every parameter, percent-decoded; the '?' that starts them ends the
 * rest of the URL, so a '/' in a path is not a database. */
static void good_tls_urls_fill_their_fields(void **state)
{
    (void)state;
    dlock_url u;
    parse_ok("rediss://h:6380", &u);
    assert_int_equal(u.kind, DLOCK_URL_TCP);
    assert_int_equal(u.tls, 1);
    assert_int_equal(u.tls_verify, 1);
    assert_null(u.tls_cacert);
    assert_null(u.tls_cert);
    assert_null(u.tls_sni);
    assert_int_equal(u.port, 6380);
    dlock_url_free(&u);
    parse_ok("rediss://u:p%3Fw@h/3?cacert=/etc/ca%20dir/ca.pem&cert=/c.pem&key=/k.pem&sni=redis.example&verify=no", &u);
    assert_string_equal(u.user, "u");
    assert_string_equal(u.password, "p?w");
    assert_int_equal(u.db, 3);
    assert_string_equal(u.tls_cacert, "/etc/ca dir/ca.pem");
    assert_string_equal(u.tls_cert, "/c.pem");
    assert_string_equal(u.tls_key, "/k.pem");
    assert_string_equal(u.tls_sni, "redis.example");
    assert_int_equal(u.tls_verify, 0);
    dlock_url_free(&u);
    parse_ok("rediss-sentinel://s1,s2:26380/mymaster?db=2&cacert=/ca.pem", &u);
    assert_int_equal(u.kind, DLOCK_URL_SENTINEL);
    assert_int_equal(u.tls, 1);
    assert_int_equal(u.n_addrs, 2);
    assert_string_equal(u.master, "mymaster");
    assert_int_equal(u.db, 2);
    assert_string_equal(u.tls_cacert, "/ca.pem");
    dlock_url_free(&u);
    parse_ok("rediss-cluster://a:7000,b:7001?sni=c.example", &u);
    assert_int_equal(u.kind, DLOCK_URL_CLUSTER);
    assert_int_equal(u.tls, 1);
    assert_int_equal(u.n_addrs, 2);
    assert_string_equal(u.tls_sni, "c.example");
    dlock_url_free(&u);
    /* The plain forms take no TLS parameters. */
    parse_ok("redis://h", &u);
    assert_int_equal(u.tls, 0);
    dlock_url_free(&u);
}

/* A misspelt parameter must not fall back to a default (the system's CA
 * store, verification on or off): every TLS mistake is an error. */
static void bad_tls_urls_are_refused(void **state)
{
    (void)state;
    expect_bad("rediss://h?cafile=/ca.pem", "unknown TLS parameter");
    expect_bad("rediss://h?cacert", "name=value");
    expect_bad("rediss://h?cacert=", "empty TLS parameter value");
    expect_bad("rediss://h?cacert=/a&cacert=/b", "cacert given twice");
    expect_bad("rediss://h?cert=/c.pem", "cert and key go together");
    expect_bad("rediss://h?key=/k.pem", "cert and key go together");
    expect_bad("rediss://h?verify=maybe", "verify must be yes or no");
    expect_bad("rediss://h?cacert=/a%zz", "bad percent-escape");
    expect_bad("rediss://h?db=2", "unknown TLS parameter"); /* rediss:// has /db */
    expect_bad("rediss-cluster://h?db=1", "unknown TLS parameter");
    expect_bad("rediss://h:0?cacert=/a", "port must be");
    expect_bad("redis://h?cacert=/a", "unexpected characters");
}

static void good_cluster_urls_fill_their_fields(void **state)
{
    (void)state;
    dlock_url u;
    parse_ok("redis-cluster://:pw@10.0.0.1:7000,10.0.0.2,node-3:7002", &u);
    assert_int_equal(u.kind, DLOCK_URL_CLUSTER);
    assert_int_equal(u.n_addrs, 3);
    assert_string_equal(u.addrs[0].host, "10.0.0.1");
    assert_int_equal(u.addrs[0].port, 7000);
    assert_string_equal(u.addrs[1].host, "10.0.0.2");
    assert_int_equal(u.addrs[1].port, 6379);
    assert_string_equal(u.addrs[2].host, "node-3");
    assert_int_equal(u.addrs[2].port, 7002);
    assert_string_equal(u.password, "pw");
    assert_null(u.master);
    assert_int_equal(u.db, 0);
    dlock_url_free(&u);
    parse_ok("redis-cluster://h/", &u); /* an empty path is no database */
    assert_int_equal(u.n_addrs, 1);
    dlock_url_free(&u);
}

static void bad_cluster_urls_are_refused(void **state)
{
    (void)state;
    expect_bad("redis-cluster://", "missing host");
    expect_bad("redis-cluster://h,,i", "missing host");
    expect_bad("redis-cluster://h:1/0", "databases");
    expect_bad("redis-cluster://h:1?db=1", "port must be");
    expect_bad("redis-cluster://h?db=1", "unexpected characters after host");
    expect_bad("redis-cluster://h:70000", "port must be");
    expect_bad("redis-cluster://h:1,h:1", "address listed twice");
    expect_bad("redis-cluster://h;i", "unexpected characters after host");
    char url[1024] = "redis-cluster://h1";
    for (int i = 2; i <= 65; i++) snprintf(url + strlen(url), sizeof url - strlen(url), ",h%d", i);
    expect_bad(url, "more than 64 addresses");
}

/* dlock_url_free is safe on a zeroed struct, twice, and on NULL. */
static void url_free_is_safe_on_zeroed_and_null(void **state)
{
    (void)state;
    dlock_url u;
    memset(&u, 0, sizeof u);
    dlock_url_free(&u);
    dlock_url_free(NULL);
    parse_ok("redis://:pw@h", &u);
    dlock_url_free(&u);
    dlock_url_free(&u);
    assert_true(is_zeroed(&u));
}

/* A port on which nothing listens: bind to port 0 to get a free one, then
 * close it. Another process could take it meanwhile; unlikely in a test. */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    socklen_t len = sizeof a;
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* dlock_client_new refuses a bad URL with DLOCK_ERR_URL (and the parser's
 * explanation) before touching the network, and leaves *out NULL. */
static void client_new_reports_bad_url(void **state)
{
    (void)state;
    dlock_client *c = (dlock_client *)&c; /* garbage: must be reset */
    assert_int_equal(dlock_client_new("redis://h:0", NULL, &c), DLOCK_ERR_URL);
    assert_null(c);
    assert_non_null(strstr(dlock_last_error(), "port"));
    assert_int_equal(dlock_client_new("", NULL, &c), DLOCK_ERR_URL);
    assert_null(c);
    assert_int_equal(dlock_client_new(NULL, NULL, &c), DLOCK_ERR_URL);
    assert_null(c);
    assert_int_equal(dlock_client_new("redis-cluster://h/0", NULL, &c), DLOCK_ERR_URL);
    assert_non_null(strstr(dlock_last_error(), "databases"));
    assert_int_equal(dlock_client_new("redis-sentinel://h:1", NULL, &c), DLOCK_ERR_URL);
    assert_non_null(strstr(dlock_last_error(), "MASTER_NAME"));
    assert_int_equal(dlock_client_new("redis://h", NULL, NULL), DLOCK_ERR_INVALID);
    /* Bad options are invalid arguments. */
    dlock_options o = {0};
    o.watchdog_lease_ms = 10;
    assert_int_equal(dlock_client_new("redis://h", &o, &c), DLOCK_ERR_INVALID);
    o.watchdog_lease_ms = 0;
    o.connect_timeout_ms = -1;
    assert_int_equal(dlock_client_new("redis://h", &o, &c), DLOCK_ERR_INVALID);
    assert_null(c);
}

/* Nothing listening on a loopback port, or no socket file: connection
 * refused is reported as DLOCK_ERR_CONNECT at once (not after the 2 s
 * connect timeout, and not as some other code), naming the address. */
static void client_new_reports_unreachable_server_quickly(void **state)
{
    (void)state;
    char url[128], where[64];
    int port = dead_port();
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    dlock_client *c = (dlock_client *)&c;
    long long t0 = th_now_ms();
    assert_int_equal(dlock_client_new(url, NULL, &c), DLOCK_ERR_CONNECT);
    long long took = th_now_ms() - t0;
    assert_null(c);
    assert_true(took < 1500); /* under the 2 s timeout, with room for a loaded machine */
    assert_non_null(strstr(dlock_last_error(), where));

    t0 = th_now_ms();
    assert_int_equal(dlock_client_new("unix:///nonexistent-dlock-dir/redis.sock", NULL, &c), DLOCK_ERR_CONNECT);
    assert_true(th_now_ms() - t0 < 1500);
    assert_null(c);
    assert_non_null(strstr(dlock_last_error(), "/nonexistent-dlock-dir/redis.sock"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(empty_null_and_unknown_schemes_are_refused),
        cmocka_unit_test(bad_ports_are_refused),
        cmocka_unit_test(bad_databases_are_refused),
        cmocka_unit_test(trailing_junk_and_odd_characters_are_refused),
        cmocka_unit_test(missing_hosts_and_bad_ipv6_are_refused),
        cmocka_unit_test(bad_unix_urls_are_refused),
        cmocka_unit_test(bad_credentials_are_refused),
        cmocka_unit_test(very_long_urls_are_refused),
        cmocka_unit_test(good_tcp_urls_fill_their_fields),
        cmocka_unit_test(good_unix_urls_fill_their_fields),
        cmocka_unit_test(credentials_are_percent_decoded),
        cmocka_unit_test(good_sentinel_urls_fill_their_fields),
        cmocka_unit_test(bad_sentinel_urls_are_refused),
        cmocka_unit_test(good_cluster_urls_fill_their_fields),
        cmocka_unit_test(good_tls_urls_fill_their_fields),
        cmocka_unit_test(bad_tls_urls_are_refused),
        cmocka_unit_test(bad_cluster_urls_are_refused),
        cmocka_unit_test(url_free_is_safe_on_zeroed_and_null),
        cmocka_unit_test(client_new_reports_bad_url),
        cmocka_unit_test(client_new_reports_unreachable_server_quickly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
