/*
 * The dlock command-line tool, end to end: the built binary is run as a
 * separate process against a real redis-server, exactly as a cron job or a
 * shell script would run it, and only its exit status, its output and the
 * files its COMMAND writes are looked at.
 *
 * Timing asserts are one-sided and generous (seconds where milliseconds
 * are expected) so that the suite stays green on a loaded 2-core machine
 * and under ASan; what they catch is a tool that hangs or does not wait.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "proxy.h"
#include "target.h"

#define MAX_ARGS 32
#define OUT_MAX 8192
/* Upper bound for any single dlock run; far above what any test needs. */
#define RUN_TIMEOUT_MS 20000

static th_target srv;
static char scratch[128]; /* per-suite temp dir for COMMAND's files */
static int run_counter;   /* makes stdout/stderr file names unique */

typedef struct run {
    int status;   /* exit code, 128+N for signal N, -1 on timeout */
    long long ms; /* wall time of the run */
    char out[OUT_MAX];
    char err[OUT_MAX];
} run;

/* A started dlock process whose output goes to files (never pipes: a
 * COMMAND left running must not keep a reader waiting for EOF). */
typedef struct proc {
    pid_t pid;
    long long started;
    char out_path[256];
    char err_path[256];
} proc;

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* Path of a file in the scratch dir. */
static const char *scratch_file(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", scratch, name);
    return buf;
}

/* PREFIX.EXT in the scratch dir: the files of one test's COMMANDs. */
static const char *scratch_file_of(char *buf, size_t size, const char *prefix, const char *ext)
{
    char name[64];
    snprintf(name, sizeof name, "%s.%s", prefix, ext);
    return scratch_file(buf, size, name);
}

/* Read a whole (small) file into buf; "" when it does not exist. */
static void slurp(const char *path, char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Wait (bounded) until COMMAND signals readiness by creating `path`. */
static int wait_for_file(const char *path, long timeout_ms)
{
    long long until = th_now_ms() + timeout_ms;
    while (th_now_ms() < until) {
        if (file_exists(path)) return 1;
        usleep(5000);
    }
    return file_exists(path);
}

/* Start the dlock binary with `args` (NULL-terminated, without argv[0]).
 * `url_env` is put in DLOCK_URL (NULL: removed from the environment);
 * `extra_env` ("NAME=value" or NULL) is added too; its stdin is `in_fd`
 * (-1: /dev/null). */
static void start_dlock_in(proc *p, const char *url_env, const char *extra_env, const char *const *args, int in_fd)
{
    char *argv[MAX_ARGS + 2];
    int n = 0;
    argv[n++] = "dlock";
    for (; args[n - 1] && n <= MAX_ARGS; n++) argv[n] = (char *)args[n - 1];
    argv[n] = NULL;

    int id = ++run_counter;
    snprintf(p->out_path, sizeof p->out_path, "%s/run%d.out", scratch, id);
    snprintf(p->err_path, sizeof p->err_path, "%s/run%d.err", scratch, id);
    const char *bin = th_bin("dlock");
    p->started = th_now_ms();
    p->pid = fork();
    assert_true(p->pid >= 0);
    if (p->pid == 0) {
        int in = in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY);
        int out = open(p->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(p->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || out < 0 || err < 0) _exit(125);
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        if (url_env) setenv("DLOCK_URL", url_env, 1);
        else unsetenv("DLOCK_URL");
        unsetenv("DLOCK_NAME");
        unsetenv("DLOCK_TOKEN");
        if (extra_env) putenv((char *)extra_env);
        execv(bin, argv);
        _exit(125);
    }
}

static void start_dlock(proc *p, const char *url_env, const char *extra_env, const char *const *args)
{
    start_dlock_in(p, url_env, extra_env, args, -1);
}

/* Wait for a started dlock, at most timeout_ms; on timeout kill it and
 * return -1. Otherwise the status a shell would show. */
static int wait_dlock(proc *p, long timeout_ms)
{
    long long until = th_now_ms() + timeout_ms;
    int st;
    for (;;) {
        pid_t w = waitpid(p->pid, &st, WNOHANG);
        if (w == p->pid) break;
        if (w < 0 && errno != EINTR) return -1;
        if (th_now_ms() > until) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            return -1;
        }
        usleep(2000);
    }
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

/* Run dlock to completion and collect status, output and time. */
static void run_argv(run *r, const char *url_env, const char *extra_env, const char *const *args)
{
    proc p;
    start_dlock(&p, url_env, extra_env, args);
    r->status = wait_dlock(&p, RUN_TIMEOUT_MS);
    r->ms = th_now_ms() - p.started;
    slurp(p.out_path, r->out, sizeof r->out);
    slurp(p.err_path, r->err, sizeof r->err);
    unlink(p.out_path);
    unlink(p.err_path);
}

/* run_argv with the arguments inline: RUN(&r, url, "lock", "x", ...). */
#define RUN(r, url, ...)                                                                                               \
    do {                                                                                                               \
        const char *const args_[] = {__VA_ARGS__, NULL};                                                               \
        run_argv((r), (url), NULL, args_);                                                                             \
    } while (0)
/* RUN with one "NAME=value" added to dlock's environment. */
#define RUN_ENV(r, url, env, ...)                                                                                      \
    do {                                                                                                               \
        const char *const args_[] = {__VA_ARGS__, NULL};                                                               \
        run_argv((r), (url), (env), args_);                                                                            \
    } while (0)
#define START(p, url, ...)                                                                                             \
    do {                                                                                                               \
        const char *const args_[] = {__VA_ARGS__, NULL};                                                               \
        start_dlock((p), (url), NULL, args_);                                                                          \
    } while (0)

/* Start `dlock ARGS... -- sh -c "touch READY; BODY"` (DLOCK_URL: the
 * suite's server) and wait until COMMAND runs, i.e. the hold is taken.
 * READY is the scratch file `tag`. */
static void start_holder(proc *p, const char *tag, const char *body, const char *const *args)
{
    char ready[256], script[768];
    const char *argv[MAX_ARGS + 1];
    size_t n = 0;
    scratch_file(ready, sizeof ready, tag);
    unlink(ready);
    snprintf(script, sizeof script, "touch %s; %s", ready, body);
    for (; args[n] && n < MAX_ARGS - 4; n++) argv[n] = args[n];
    argv[n++] = "--";
    argv[n++] = "sh";
    argv[n++] = "-c";
    argv[n++] = script;
    argv[n] = NULL;
    start_dlock(p, srv.url, NULL, argv);
    assert_true(wait_for_file(ready, 10000));
}
#define HOLD(p, tag, body, ...)                                                                                        \
    do {                                                                                                               \
        const char *const args_[] = {__VA_ARGS__, NULL};                                                               \
        start_holder((p), (tag), (body), args_);                                                                       \
    } while (0)

/* The one-line rule: stderr is a single line ending in a newline (so any
 * newline in a NAME was escaped). */
static void assert_one_line(const char *err)
{
    const char *nl = strchr(err, '\n');
    if (strncmp(err, "dlock: ", 7) != 0 || !nl || nl[1] != '\0') {
        print_error("not one 'dlock: ' line on stderr: [%s]\n", err);
        fail();
    }
}

/* Print what dlock said when an expectation fails, then fail. */
static void expect_status(const run *r, int want)
{
    if (r->status != want) {
        print_error("dlock exited %d, wanted %d\nstdout: %s\nstderr: %s\n", r->status, want, r->out, r->err);
        fail();
    }
}

/* The value of a `key: value` line of `status` output, or -2 if absent. */
static long long status_field(const char *out, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "%s: ", key);
    const char *p = strstr(out, pat);
    if (!p) return -2;
    return strtoll(p + strlen(pat), NULL, 10);
}

/* `dlock status NAME` must say free: exit 1 and the holder shown as "-". */
static void assert_free(const char *name)
{
    run r;
    RUN(&r, srv.url, "status", name);
    expect_status(&r, 1);
    assert_non_null(strstr(r.out, "holder: -\n"));
}

/* ------------------------------------------------------------------------ */
/* A reader for `status --json`: one flat object of strings, numbers,        */
/* true, false and null. It checks the whole text, so malformed output      */
/* (an unescaped quote or newline from a command line) fails the test.      */
/* ------------------------------------------------------------------------ */

static const char *json_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* A JSON string at p (after its opening quote) decoded into out[size]
 * (\u escapes as UTF-8); returns the text after the closing quote, or
 * NULL when malformed. */
static const char *json_read_string(const char *p, char *out, size_t size)
{
    size_t n = 0;
#define JPUT(c)                                                                                                        \
    do {                                                                                                               \
        if (n + 1 < size) out[n++] = (char)(c);                                                                        \
    } while (0)
    for (;;) {
        unsigned char c = (unsigned char)*p++;
        if (c == '"') break;
        if (c < 0x20) return NULL; /* raw control characters are not JSON */
        if (c != '\\') {
            JPUT(c);
            continue;
        }
        c = (unsigned char)*p++;
        if (c == 'n') JPUT('\n');
        else if (c == 't') JPUT('\t');
        else if (c == 'r') JPUT('\r');
        else if (c == 'b') JPUT('\b');
        else if (c == 'f') JPUT('\f');
        else if (c == '"' || c == '\\' || c == '/') JPUT(c);
        else if (c == 'u') {
            unsigned cp = 0;
            for (int i = 0; i < 4; i++, p++) {
                char h = *p;
                if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return NULL;
                cp = cp * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
            }
            if (cp < 0x80) {
                JPUT(cp);
            } else if (cp < 0x800) {
                JPUT(0xc0 | cp >> 6);
                JPUT(0x80 | (cp & 0x3f));
            } else {
                JPUT(0xe0 | cp >> 12);
                JPUT(0x80 | (cp >> 6 & 0x3f));
                JPUT(0x80 | (cp & 0x3f));
            }
        } else {
            return NULL;
        }
    }
#undef JPUT
    out[n] = '\0';
    return p;
}

/* A number, true, false or null at p, copied as written; NULL when it is
 * none of them. */
static const char *json_read_scalar(const char *p, char *out, size_t size)
{
    static const char *const words[] = {"true", "false", "null"};
    for (size_t i = 0; i < 3; i++)
        if (strncmp(p, words[i], strlen(words[i])) == 0) {
            snprintf(out, size, "%s", words[i]);
            return p + strlen(words[i]);
        }
    const char *start = p;
    if (*p == '-') p++;
    if (*p < '0' || *p > '9') return NULL;
    while (*p >= '0' && *p <= '9') p++;
    snprintf(out, size, "%.*s", (int)(p - start), start);
    return p;
}

/* The value of `key` in the JSON object `json` (strings decoded; other
 * values as written, e.g. "null"), or fails the test if `json` is not one
 * well-formed flat object on one line or lacks the key. */
static void json_get(const char *json, const char *key, char *out, size_t size)
{
    char k[128], v[1024];
    int found = 0;
    const char *p = json_ws(json);
    if (*p++ != '{') fail_msg("not a JSON object: %s", json);
    for (;;) {
        p = json_ws(p);
        if (*p++ != '"' || !(p = json_read_string(p, k, sizeof k))) fail_msg("bad key in %s", json);
        p = json_ws(p);
        if (*p++ != ':') fail_msg("no ':' after \"%s\" in %s", k, json);
        p = json_ws(p);
        if (*p == '"') p = json_read_string(p + 1, v, sizeof v);
        else p = json_read_scalar(p, v, sizeof v);
        if (!p) fail_msg("bad value of \"%s\" in %s", k, json);
        if (strcmp(k, key) == 0) {
            snprintf(out, size, "%s", v);
            found++;
        }
        p = json_ws(p);
        if (*p == '}') break;
        if (*p++ != ',') fail_msg("no ',' after \"%s\" in %s", k, json);
    }
    if (strcmp(p, "}\n") != 0) fail_msg("not one object on one line: %s", json);
    if (found != 1) fail_msg("\"%s\" found %d times in %s", key, found, json);
}

/* json_get for a number (or -1 for null). */
static long long json_num(const char *json, const char *key)
{
    char v[64];
    json_get(json, key, v, sizeof v);
    return strcmp(v, "null") == 0 ? -1 : strtoll(v, NULL, 10);
}

/* A TCP socket bound to a free loopback port, and that port in *port:
 * nobody else can take the port while the socket is open. */
static int loopback_socket(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    socklen_t len = sizeof a;
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* A loopback TCP port nobody listens on (bound, then closed). */
static int closed_port(void)
{
    int port;
    close(loopback_socket(&port));
    return port;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

/* --help and --version need no Redis and succeed. */
static void help_and_version_need_no_server(void **state)
{
    (void)state;
    run r;
    RUN(&r, "redis://127.0.0.1:1", "--help");
    expect_status(&r, 0);
    assert_non_null(strstr(r.out, "usage:"));
    assert_non_null(strstr(r.out, "[--until-eof] NAME [[--] COMMAND [ARG...] | -c 'SHELL COMMAND']"));
    assert_non_null(strstr(r.out, "--timeout DURATION"));
    assert_non_null(strstr(r.out, "--url URL"));
    assert_non_null(strstr(r.out, "semaphore -p PERMITS"));
    assert_non_null(strstr(r.out, "latch NAME"));
    RUN(&r, "redis://127.0.0.1:1", "--version");
    expect_status(&r, 0);
    assert_string_equal(r.out, "dlock " DLOCK_VERSION "\n");
    RUN(&r, "redis://127.0.0.1:1", "-h");
    expect_status(&r, 0);
}

/* Every malformed command line is 64 with a one-line "dlock: " error,
 * before anything touches Redis or runs COMMAND. */
static void every_usage_error_exits_64_with_one_line(void **state)
{
    (void)state;
    char marker[256];
    scratch_file(marker, sizeof marker, "must-not-exist");
    char touch[300];
    snprintf(touch, sizeof touch, "touch %s", marker);
    static const char *const empty[] = {NULL};
    const char *const cases[][16] = {
        {"frob", NULL},
        {"lock", NULL},
        {"lock", "u1", "--", NULL},
        {"lock", "--until-eof", "u1", "true", NULL},
        {"lock", "-s", "-x", "u1", NULL},
        {"lock", "--shared", "--fair", "u1", NULL},
        {"lock", "-t", "abc", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-t", "-5", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-t", "0", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-t", "", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-t", "12x", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-t", " 100", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-t", "99999999999999999999", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-t", "2147483648", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "x", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "-1", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-t", NULL},
        {"lock", "-k", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "bad{name}", "--", "sh", "-c", "x", NULL},
        {"id", NULL},
        {"id", "-n", "0", "p", NULL},
        {"id", "-n", "1000001", "p", NULL},
        {"id", "-n", "abc", "p", NULL},
        {"id", "a b", NULL},
        {"id", "p", "q", NULL},
        {"status", NULL},
        {"status", "a", "b", NULL},
        {"unlock", "u1", NULL},
        {"unlock", "--force", NULL},
        {"-u", NULL},
        {"-u", "redis://host:99999", "status", "u1", NULL},
        {"-u", "http://x", "status", "u1", NULL},
        {"-u", "", "status", "u1", NULL},
        {"-u", "redis://127.0.0.1:abc", "lock", "u1", "--", "sh", "-c", "x", NULL},
        {"--bogus", NULL},
        {"lock", "--read", "--write", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "--fair", "--read", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "--sharde", "u1", "--", "sh", "-c", "x", NULL},
        {"semaphore", "s1", "--", "sh", "-c", "x", NULL},
        {"semaphore", "-p", "0", "s1", "--", "sh", "-c", "x", NULL},
        {"semaphore", "-p", "x2", "s1", "--", "sh", "-c", "x", NULL},
        {"semaphore", "-p", "2", "s1", "--", NULL},
        {"latch", "l1", NULL},
        {"latch", "--set", "2", NULL},
        {"latch", "l1", "--set", "0", NULL},
        {"latch", "l1", "--set", NULL},
        {"latch", "l1", "--set", "2", "--await", NULL},
        {"latch", "l1", "--count-down", "-w", "10", NULL},
        {"latch", "l1", "l2", "--await", NULL},
        {"-u", "redis://127.0.0.1:1", "-u", "redis://127.0.0.1:2", "lock", "u1", "--", "sh", "-c", "x", NULL},
        {"-u", "redis://127.0.0.1:1", "-u", "redis://127.0.0.1:2", "-u", "redis://127.0.0.1:3", "lock", "--fair", "u1",
         "--", "sh", "-c", "x", NULL},
        {"-u", "redis://127.0.0.1:1", "-u", "redis://127.0.0.1:2", "status", "u1", NULL},
        /* Durations: a bare number is seconds, else one unit of ms, s, m,
         * h; a fraction only down to a millisecond. */
        {"lock", "-w", "10x", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "-1s", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "--wait", "1.5.0s", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "1.", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", ".5", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "0.0001", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "1.5ms", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "2147484", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-t", "0.029", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "--wait=10 s", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "10S", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "s", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "10sec", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "2147484s", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "99999999999999h", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-w", "999999999999999999999ms", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-t", "29ms", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "--ttl", "0s", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-t", "597h", "u1", "--", "sh", "-c", "x", NULL},
        {"semaphore", "-p", "2", "--wait", "3d", "s1", "--", "sh", "-c", "x", NULL},
        {"latch", "l1", "--await", "-w", "5x", NULL},
        {"latch", "l1", "--await", "--wait", "-5", NULL},
        {"--timeout", "0", "status", "u1", NULL},
        {"--timeout", "10x", "status", "u1", NULL},
        {"--timeout", NULL},
        {"--url", NULL},
        /* flock's -E, -c and -n. */
        {"lock", "-E", "256", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-E", "x", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "--conflict-exit-code", "-1", "u1", "--", "sh", "-c", "x", NULL},
        {"lock", "-c", "x", "u1", "--", "true", NULL},
        {"lock", "-c", "x", "u1", "true", NULL},
        {"lock", "-c", "x", "-c", "x", "u1", NULL},
        {"lock", "-c", "x", "u1", "-c", "x", NULL},
        {"lock", "u1", "-c", NULL},
        {"lock", "u1", "-c", "x", "extra", NULL},
        {"lock", "u1", "--command", NULL},
        {"lock", "-c", NULL},
        /* id --count and --date; status --json. */
        {"id", "--count", NULL},
        {"id", "--count", "-n", "3", "p", NULL},
        {"id", "--date", "2024-01-01", "p", NULL},
        {"id", "--count", "--date", "2023-02-29", "p", NULL},
        {"id", "--count", "--date", "2024-1-01", "p", NULL},
        {"id", "--count", "p", "--date", NULL},
        {"status", "--jsn", "u1", NULL},
        {"status", "--json", NULL},
    };
    run r;
    run_argv(&r, srv.url, NULL, empty);
    expect_status(&r, 64);
    assert_int_equal(strncmp(r.err, "dlock: ", 7), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[18];
        size_t n = 0;
        for (; cases[i][n]; n++) args[n] = strcmp(cases[i][n], "x") == 0 ? touch : cases[i][n];
        args[n] = NULL;
        run_argv(&r, srv.url, NULL, args);
        if (r.status != 64) {
            print_error("case %zu (%s %s ...): exit %d, stderr: %s\n", i, args[0], args[1] ? args[1] : "", r.status,
                        r.err);
            fail();
        }
        assert_one_line(r.err);
    }
    /* A malformed URL in the environment is a usage error too. */
    RUN(&r, "redis://h:0", "status", "u1");
    expect_status(&r, 64);
    assert_non_null(strstr(r.err, "URL"));
    /* A bad duration names the option as it was typed, and the value. */
    RUN(&r, srv.url, "lock", "-w", "10x", "u1", "true");
    expect_status(&r, 64);
    assert_non_null(strstr(r.err, "bad -w '10x'"));
    RUN(&r, srv.url, "lock", "--ttl=-1s", "u1", "true");
    expect_status(&r, 64);
    assert_non_null(strstr(r.err, "bad --ttl '-1s'"));
    RUN(&r, srv.url, "--timeout", "5 s", "status", "u1");
    expect_status(&r, 64);
    assert_non_null(strstr(r.err, "bad --timeout '5 s'"));
    assert_false(file_exists(marker));
}

/* COMMAND's exit status is dlock's; a signal death is 128+N as in sh;
 * a COMMAND that cannot be executed is 127. The lock is free afterwards. */
static void command_exit_status_is_passed_through(void **state)
{
    (void)state;
    run r;
    RUN(&r, srv.url, "lock", "pass", "--", "sh", "-c", "exit 3");
    expect_status(&r, 3);
    RUN(&r, srv.url, "lock", "pass", "--", "sh", "-c", "kill -9 $$");
    expect_status(&r, 137);
    RUN(&r, srv.url, "lock", "pass", "--", "true");
    expect_status(&r, 0);
    RUN(&r, srv.url, "lock", "pass", "--", "/nonexistent/dlock-test-command", "arg");
    expect_status(&r, 127);
    assert_int_equal(strncmp(r.err, "dlock: ", 7), 0);
    /* Options after NAME and after -- belong to COMMAND. */
    RUN(&r, srv.url, "lock", "-w", "5", "pass", "--", "sh", "-c", "exit $#", "sh", "-t", "-w");
    expect_status(&r, 2);
    assert_free("pass");
}

/* COMMAND sees DLOCK_NAME and DLOCK_TOKEN; tokens grow strictly from run
 * to run (TCP and unix URLs alike), a stale DLOCK_TOKEN from the caller is
 * replaced, and `status` reports the last token handed out. */
static void command_gets_its_name_and_rising_tokens(void **state)
{
    (void)state;
    char file[256], script[512], buf[256];
    scratch_file(file, sizeof file, "env.txt");
    snprintf(script, sizeof script, "printf '%%s %%s\\n' \"$DLOCK_NAME\" \"$DLOCK_TOKEN\" > %s", file);
    unsigned long long prev = 0;
    for (int i = 0; i < 4; i++) {
        run r;
        const char *const args[] = {"lock", "env-lock", "--", "sh", "-c", script, NULL};
        /* Alternate transports, and pass a bogus token in from outside. */
        run_argv(&r, i % 2 && srv.kind == TH_TARGET_SINGLE ? srv.single.tcp_url : srv.url, "DLOCK_TOKEN=7", args);
        expect_status(&r, 0);
        slurp(file, buf, sizeof buf);
        char name[64];
        unsigned long long token = 0;
        assert_int_equal(sscanf(buf, "%63s %llu", name, &token), 2);
        assert_string_equal(name, "env-lock");
        assert_true(token > prev);
        assert_true(token != 7);
        prev = token;
        unlink(file);
    }
    run r;
    RUN(&r, srv.url, "status", "env-lock");
    expect_status(&r, 1);
    assert_int_equal(status_field(r.out, "last_token"), (long long)prev);
    assert_int_equal(status_field(r.out, "count"), 0);
    assert_int_equal(status_field(r.out, "ttl_ms"), -1);
}

/* Concurrent dlock runs of one NAME never overlap: each COMMAND writes a
 * start and an end line around a sleep, and the file must alternate. */
static void concurrent_runs_of_one_name_never_overlap(void **state)
{
    (void)state;
    enum { N = 5 };
    char file[256], script[1024];
    scratch_file(file, sizeof file, "mutex.txt");
    unlink(file);
    snprintf(script, sizeof script, "echo \"start $$\" >> %s; sleep 0.1; echo \"end $$\" >> %s", file, file);
    proc p[N];
    for (int i = 0; i < N; i++) START(&p[i], srv.url, "lock", "mutex", "--", "sh", "-c", script);
    for (int i = 0; i < N; i++) assert_int_equal(wait_dlock(&p[i], RUN_TIMEOUT_MS), 0);

    char buf[OUT_MAX];
    slurp(file, buf, sizeof buf);
    char *save = NULL, *line = strtok_r(buf, "\n", &save);
    int lines = 0;
    char open_pid[32] = "";
    for (; line; line = strtok_r(NULL, "\n", &save), lines++) {
        if (lines % 2 == 0) {
            assert_int_equal(sscanf(line, "start %31s", open_pid), 1);
        } else {
            char pid[32];
            assert_int_equal(sscanf(line, "end %31s", pid), 1);
            assert_string_equal(pid, open_pid);
        }
    }
    assert_int_equal(lines, 2 * N);
    assert_free("mutex");
}

/* While another process holds NAME: -w 0 gives up at once, -w 300 after
 * about 300 ms, both with 75; `status` shows the holder; a waiter without
 * -w dies of SIGTERM like any process while it waits; SIGTERM to the
 * holding dlock reaches COMMAND and the lock is released. */
static void busy_lock_exits_75_after_the_wait_and_signals_reach_the_holder(void **state)
{
    (void)state;
    proc holder;
    HOLD(&holder, "busy.ready", "exec sleep 30", "lock", "busy");

    run r;
    RUN(&r, srv.url, "lock", "-w", "0", "busy", "--", "true");
    expect_status(&r, 75);
    assert_true(r.ms < 5000);
    assert_string_equal(r.err, "");

    RUN(&r, srv.url, "lock", "-w", "0.3", "busy", "--", "true");
    expect_status(&r, 75);
    assert_true(r.ms >= 290);
    assert_true(r.ms < 10000);

    RUN(&r, srv.url, "status", "busy");
    expect_status(&r, 0);
    assert_non_null(strstr(r.out, "holder: "));
    assert_null(strstr(r.out, "holder: -\n"));
    assert_int_equal(status_field(r.out, "count"), 1);
    assert_true(status_field(r.out, "ttl_ms") > 0);
    assert_true(status_field(r.out, "last_token") > 0);

    proc waiter;
    START(&waiter, srv.url, "lock", "busy", "--", "true");
    usleep(200000);
    kill(waiter.pid, SIGTERM);
    assert_int_equal(wait_dlock(&waiter, 10000), 128 + SIGTERM);

    /* `exec sleep` makes sleep COMMAND itself: it dies of the forwarded
     * SIGTERM and dlock reports that as 128+15. */
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);
    assert_free("busy");

    /* A bounded wait that a release ends in time acquires the lock. */
    HOLD(&holder, "busy.ready2", "sleep 0.3", "lock", "busy");
    RUN(&r, srv.url, "lock", "-w", "15", "busy", "--", "true");
    expect_status(&r, 0);
    assert_int_equal(wait_dlock(&holder, 10000), 0);
}

/* With a 600 ms TTL and a COMMAND that runs 4 s, the lock is renewed
 * (every 200 ms) for as long as COMMAND runs: a second dlock finds it held
 * well past several TTLs, and the first ends with COMMAND's own status,
 * not 76. (Not a shorter TTL: the hold is trusted for 90 % of it less
 * 8 ms after each renewal's send, and a loaded machine has stalled a
 * process past 270 ms, which would rightly end the run with 76.) */
static void lock_is_renewed_while_a_long_command_runs(void **state)
{
    (void)state;
    proc holder;
    HOLD(&holder, "renew.ready", "sleep 4", "lock", "-t", "0.6", "renewed");
    usleep(1800000); /* three TTLs */
    run r;
    RUN(&r, srv.url, "lock", "-w", "0", "renewed", "--", "true");
    expect_status(&r, 75);
    assert_int_equal(wait_dlock(&holder, 15000), 0);
    assert_free("renewed");
}

/* The lease is deleted behind the holder's back while COMMAND runs: the
 * watchdog (renewing every TTL/3 = 200 ms) notices, COMMAND gets SIGTERM
 * at once and dlock exits 76, long before COMMAND's 20 s sleep ends. */
static void lost_lease_terminates_command_and_exits_76(void **state)
{
    (void)state;
    char ready[256], term[256], script[768];
    scratch_file(ready, sizeof ready, "lost.ready");
    scratch_file(term, sizeof term, "lost.term");
    snprintf(script, sizeof script, "trap 'echo term > %s; kill $p; exit 143' TERM; sleep 20 & p=$!; touch %s; wait $p",
             term, ready);
    proc holder;
    START(&holder, srv.url, "lock", "-t", "0.6", "lost", "--", "sh", "-c", script);
    assert_true(wait_for_file(ready, 10000));

    redisReply *rep = th_target_cmd(&srv, "dlock:{lost}", "DEL %s", "dlock:{lost}");
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_INTEGER);
    assert_int_equal(rep->integer, 1);
    freeReplyObject(rep);
    long long t0 = th_now_ms();
    assert_int_equal(wait_dlock(&holder, 15000), 76);
    assert_true(th_now_ms() - t0 < 8000);

    char buf[64], err[OUT_MAX];
    slurp(term, buf, sizeof buf);
    assert_string_equal(buf, "term\n");
    slurp(holder.err_path, err, sizeof err);
    assert_non_null(strstr(err, "dlock: "));
    assert_non_null(strstr(err, "lost"));
    assert_free("lost");
}

/* The lock vanishes while COMMAND runs but COMMAND ends before the
 * watchdog's next renewal (TTL 30 s): the release finds it gone, and dlock
 * still exits 76 although COMMAND itself succeeded. */
static void loss_found_at_release_exits_76(void **state)
{
    (void)state;
    char go[256], body[512];
    scratch_file(go, sizeof go, "late.go");
    snprintf(body, sizeof body, "while [ ! -e %s ]; do sleep 0.02; done; exit 0", go);
    proc holder;
    HOLD(&holder, "late.ready", body, "lock", "late");
    redisReply *rep = th_target_cmd(&srv, "dlock:{late}", "DEL %s", "dlock:{late}");
    assert_non_null(rep);
    assert_int_equal(rep->integer, 1);
    freeReplyObject(rep);
    FILE *f = fopen(go, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(wait_dlock(&holder, 15000), 76);
    char err[OUT_MAX];
    slurp(holder.err_path, err, sizeof err);
    assert_non_null(strstr(err, "lost"));
}

/* SIGTERM and SIGINT sent to dlock are passed to COMMAND (which traps
 * them and exits with its own status), and the lock is released after. */
static void sigterm_and_sigint_are_passed_to_command(void **state)
{
    (void)state;
    static const int sigs[2] = {SIGTERM, SIGINT};
    static const char *const names[2] = {"TERM", "INT"};
    for (int i = 0; i < 2; i++) {
        char ready[256], got[256], script[768];
        scratch_file(ready, sizeof ready, "sig.ready");
        scratch_file(got, sizeof got, "sig.got");
        unlink(ready);
        unlink(got);
        snprintf(script, sizeof script, "trap 'echo %s > %s; kill $p; exit 7' %s; sleep 20 & p=$!; touch %s; wait $p",
                 names[i], got, names[i], ready);
        proc holder;
        START(&holder, srv.url, "lock", "sig", "--", "sh", "-c", script);
        assert_true(wait_for_file(ready, 10000));
        kill(holder.pid, sigs[i]);
        assert_int_equal(wait_dlock(&holder, 10000), 7);
        char buf[64], want[16];
        slurp(got, buf, sizeof buf);
        snprintf(want, sizeof want, "%s\n", names[i]);
        assert_string_equal(buf, want);
        assert_free("sig");
    }
}

/* COMMAND does not inherit dlock's Redis connections, whether its guard
 * was forked before the connections were opened (a dlock that may wait)
 * or after (-n: tools/child.c); nor does the guard (COMMAND's parent) keep
 * a copy of any, which would hold the connection open on the server after
 * dlock closed it: its one socket is its lifeline to dlock. */
static void command_inherits_no_redis_socket(void **state)
{
    (void)state;
    const char *url = srv.kind == TH_TARGET_SINGLE ? srv.single.tcp_url : srv.url;
    for (int nonblock = 0; nonblock < 2; nonblock++) {
        char file[256], guard_file[256], script[1024], buf[OUT_MAX];
        scratch_file(file, sizeof file, nonblock ? "fds-n.txt" : "fds.txt");
        scratch_file(guard_file, sizeof guard_file, nonblock ? "guard-fds-n.txt" : "guard-fds.txt");
        snprintf(script, sizeof script, "ls -l /proc/self/fd/ > %s; ls -l /proc/$PPID/fd/ > %s", file, guard_file);
        run r;
        if (nonblock) RUN(&r, url, "lock", "-n", "fds", "--", "sh", "-c", script);
        else RUN(&r, url, "lock", "fds", "--", "sh", "-c", script);
        expect_status(&r, 0);
        slurp(file, buf, sizeof buf);
        assert_non_null(strstr(buf, "total"));
        if (strstr(buf, "socket:")) {
            print_error("COMMAND inherited a socket%s:\n%s\n", nonblock ? " (-n)" : "", buf);
            fail();
        }
        slurp(guard_file, buf, sizeof buf);
        assert_non_null(strstr(buf, "total"));
        int sockets = 0;
        for (const char *p = buf; (p = strstr(p, "socket:")) != NULL; p++) sockets++;
        if (sockets != 1) {
            print_error("the guard has %d sockets%s, not its lifeline alone:\n%s\n", sockets, nonblock ? " (-n)" : "",
                        buf);
            fail();
        }
    }
}

/* No server at the address: 69 for every subcommand, one error line. */
static void unreachable_server_exits_69_with_one_line(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", closed_port());
    run r;
    RUN(&r, url, "status", "x");
    expect_status(&r, 69);
    assert_int_equal(strncmp(r.err, "dlock: ", 7), 0);
    assert_non_null(strchr(r.err, '\n'));
    assert_int_equal(strchr(r.err, '\n')[1], '\0');
    RUN(&r, url, "lock", "x", "--", "true");
    expect_status(&r, 69);
    RUN(&r, url, "id", "p");
    expect_status(&r, 69);
    RUN(&r, srv.url, "-u", "unix:///nonexistent/dlock-test/redis.sock", "lock", "x", "--", "true");
    expect_status(&r, 69);
    RUN(&r, NULL, "-u", url, "unlock", "--force", "x");
    expect_status(&r, 69);
}

/* A password-protected server: wrong or missing password is 69, the
 * right one works. */
static void refused_password_exits_69(void **state)
{
    (void)state;
    th_redis pw;
    assert_int_equal(th_redis_start(&pw, "requirepass s3cret\n"), 0);
    char bad[160], none[160], good[160];
    snprintf(bad, sizeof bad, "redis://:wrong@127.0.0.1:%d", pw.port);
    snprintf(none, sizeof none, "redis://127.0.0.1:%d", pw.port);
    snprintf(good, sizeof good, "redis://:s3cret@127.0.0.1:%d", pw.port);
    run r;
    RUN(&r, bad, "status", "auth");
    int s1 = r.status;
    char e1[OUT_MAX];
    snprintf(e1, sizeof e1, "%s", r.err);
    RUN(&r, none, "lock", "auth", "--", "true");
    int s2 = r.status;
    RUN(&r, good, "lock", "auth", "--", "true");
    int s3 = r.status;
    RUN(&r, good, "status", "auth");
    int s4 = r.status;
    th_redis_stop(&pw);
    assert_int_equal(s1, 69);
    assert_int_equal(strncmp(e1, "dlock: ", 7), 0);
    assert_int_equal(s2, 69);
    assert_int_equal(s3, 0);
    assert_int_equal(s4, 1);
}

/* Write `text` to the scratch file `name` with `mode`; its path in buf. */
static const char *secret_file(char *buf, size_t size, const char *name, const char *text, unsigned mode)
{
    assert_int_equal(th_write_file(scratch_file(buf, size, name), text, mode), 0);
    return buf;
}

/* Fail if a secret shows anywhere in what dlock wrote. */
static void assert_not_shown(const run *r, const char *secret)
{
    if (strstr(r->err, secret) || strstr(r->out, secret)) {
        print_error("'%s' shown by dlock:\nstdout: %s\nstderr: %s\n", secret, r->out, r->err);
        fail();
    }
}

/* No password on the command line: DLOCK_PASSWORD or --password-file (the
 * file's first line; the file wins) replaces the URL's password, on TCP
 * and unix socket URLs. COMMAND does not inherit DLOCK_PASSWORD. A wrong
 * password exits 69 and no password, given or in the URL, shows on
 * stderr. */
static void password_from_environment_or_file_replaces_the_urls(void **state)
{
    (void)state;
    th_target_require_single(&srv); /* a server of its own */
    th_redis pw;
    assert_int_equal(th_redis_start(&pw, "requirepass env-s3cret\n"), 0);
    char none[160], wrong[160], file[256], ro_file[256];
    snprintf(none, sizeof none, "redis://127.0.0.1:%d", pw.port);
    snprintf(wrong, sizeof wrong, "redis://:url-s3cret@127.0.0.1:%d", pw.port);
    secret_file(file, sizeof file, "pw", "env-s3cret\nsecond line, not read\n", 0600);
    secret_file(ro_file, sizeof ro_file, "pw-ro", "env-s3cret", 0400);
    run r[8];
    RUN_ENV(&r[0], none, "DLOCK_PASSWORD=env-s3cret", "lock", "pw", "--", "sh", "-c",
            "test -z \"${DLOCK_PASSWORD+set}\"");
    RUN_ENV(&r[1], wrong, "DLOCK_PASSWORD=env-s3cret", "status", "pw");
    RUN_ENV(&r[2], pw.url, "DLOCK_PASSWORD=env-s3cret", "status", "pw");
    RUN(&r[3], wrong, "--password-file", file, "lock", "pw", "--", "true");
    RUN_ENV(&r[4], none, "DLOCK_PASSWORD=wrong-env-s3cret", "--password-file", ro_file, "status", "pw");
    RUN_ENV(&r[5], wrong, "DLOCK_PASSWORD=wrong-env-s3cret", "status", "pw");
    RUN(&r[6], wrong, "lock", "pw", "--", "true");
    RUN(&r[7], none, "-u", wrong, "id", "p");
    th_redis_stop(&pw);
    expect_status(&r[0], 0);
    expect_status(&r[1], 1);
    expect_status(&r[2], 1);
    expect_status(&r[3], 0);
    expect_status(&r[4], 1);
    for (int i = 5; i < 8; i++) {
        expect_status(&r[i], 69);
        assert_one_line(r[i].err);
    }
    for (int i = 0; i < 8; i++) {
        assert_not_shown(&r[i], "s3cret");
    }
}

/* A RedLock's masters all get the password of DLOCK_PASSWORD, whatever
 * their URLs say. */
static void password_from_environment_reaches_every_redlock_master(void **state)
{
    (void)state;
    th_target_require_single(&srv); /* servers of its own */
    th_redis m[3];
    for (int i = 0; i < 3; i++) assert_int_equal(th_redis_start(&m[i], "requirepass rl-s3cret\n"), 0);
    char u[3][256];
    snprintf(u[0], sizeof u[0], "redis://127.0.0.1:%d", m[0].port);
    snprintf(u[1], sizeof u[1], "redis://:wrong@127.0.0.1:%d", m[1].port);
    snprintf(u[2], sizeof u[2], "%s", m[2].url);
    run ok, refused;
    RUN_ENV(&ok, NULL, "DLOCK_PASSWORD=rl-s3cret", "-u", u[0], "-u", u[1], "-u", u[2], "lock", "-w", "0", "rlpw", "--",
            "true");
    RUN(&refused, NULL, "-u", u[0], "-u", u[1], "-u", u[2], "lock", "-w", "0", "rlpw", "--", "true");
    for (int i = 0; i < 3; i++) th_redis_stop(&m[i]);
    expect_status(&ok, 0);
    expect_status(&refused, 69);
}

/* A password file others may read or write, that is not a regular file,
 * is missing or has an empty first line is a usage error (64, one line,
 * nothing of the file shown), found before connecting: the URL's port is
 * closed. */
static void password_file_open_to_others_is_a_usage_error(void **state)
{
    (void)state;
    char url[64], p[5][256];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", closed_port());
    const char *const files[] = {
        secret_file(p[0], sizeof p[0], "pw-644", "file-s3cret\n", 0644),
        secret_file(p[1], sizeof p[1], "pw-660", "file-s3cret\n", 0660),
        secret_file(p[2], sizeof p[2], "pw-604", "file-s3cret\n", 0604),
        secret_file(p[3], sizeof p[3], "pw-empty", "\nfile-s3cret\n", 0600),
        scratch_file(p[4], sizeof p[4], "pw-missing"),
        scratch, /* a directory */
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        run r;
        RUN(&r, url, "--password-file", files[i], "status", "x");
        expect_status(&r, 64);
        assert_one_line(r.err);
        assert_non_null(strstr(r.err, "password file"));
        assert_not_shown(&r, "file-s3cret");
    }
    run r;
    RUN(&r, url, "status", "x", "--password-file");
    expect_status(&r, 64); /* after the subcommand it is not ours */
    RUN(&r, url, "--password-file");
    expect_status(&r, 64);
    assert_one_line(r.err);
}

/* `id -n 5` prints 5 distinct decimal IDs, one per line; a second run
 * never repeats one. */
static void id_prints_distinct_ids_one_per_line(void **state)
{
    (void)state;
    unsigned long long seen[6];
    int n = 0;
    run r;
    RUN(&r, srv.url, "id", "-n", "5", "cli-test");
    expect_status(&r, 0);
    char *save = NULL;
    for (char *line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *end;
        assert_true(n < 5);
        assert_true(line[0] >= '1' && line[0] <= '9');
        seen[n++] = strtoull(line, &end, 10);
        assert_int_equal(*end, '\0');
    }
    assert_int_equal(n, 5);
    RUN(&r, srv.url, "id", "cli-test");
    expect_status(&r, 0);
    char *end;
    seen[n++] = strtoull(r.out, &end, 10);
    assert_string_equal(end, "\n");
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) assert_true(seen[i] != seen[j]);
}

/* status of a lock never taken; unlock --force breaks a live hold (the
 * holder then exits 76) and says 1 when there is nothing to break. */
static void status_shows_the_holder_and_force_unlock_breaks_it(void **state)
{
    (void)state;
    run r;
    RUN(&r, srv.url, "status", "never-taken");
    expect_status(&r, 1);
    assert_non_null(strstr(r.out, "holder: -\n"));
    assert_int_equal(status_field(r.out, "count"), 0);
    assert_int_equal(status_field(r.out, "ttl_ms"), -1);
    assert_int_equal(status_field(r.out, "last_token"), 0);

    proc holder;
    HOLD(&holder, "force.ready", "exec sleep 30", "lock", "-t", "0.6", "force");
    RUN(&r, srv.url, "status", "force");
    expect_status(&r, 0);

    long long t0 = th_now_ms();
    RUN(&r, srv.url, "unlock", "--force", "force");
    expect_status(&r, 0);
    assert_non_null(strstr(r.out, "was held"));
    assert_int_equal(wait_dlock(&holder, 15000), 76);
    assert_true(th_now_ms() - t0 < 8000);
    assert_free("force");

    RUN(&r, srv.url, "unlock", "--force", "force");
    expect_status(&r, 1);
    assert_non_null(strstr(r.out, "not held"));
}

/* A bad NAME or PREFIX is a usage error (64) before anything connects,
 * so even with no server at the address; the message is one line, with
 * control characters in the name escaped. */
static void bad_name_is_a_usage_error_even_when_redis_is_down(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", closed_port());
    const char *const cases[][8] = {
        {"lock", "a\nb", "--", "true", NULL},
        {"lock", "--write", "x{y}", "--", "true", NULL},
        {"semaphore", "-p", "1", "a}", "--", "true", NULL},
        {"latch", "a{", "--await", NULL},
        {"status", "x{y}", NULL},
        {"unlock", "--force", "a\tb", NULL},
        {"id", "a b", NULL},
        {"id", "new\nline", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run r;
        run_argv(&r, url, NULL, cases[i]);
        if (r.status != 64) {
            print_error("case %zu (%s): exit %d, stderr: %s\n", i, cases[i][0], r.status, r.err);
            fail();
        }
        assert_one_line(r.err);
    }
    run r;
    RUN(&r, url, "lock", "a\nb", "--", "true");
    assert_non_null(strstr(r.err, "'a\\nb'"));
}

/* `status` sees read-write holds too (a different key from the plain
 * lock of the same name): a --write holder is shown as writer, --read
 * holders are counted, either makes it exit 0; `unlock --force` breaks
 * them (the writer's dlock then exits 76). */
static void status_shows_read_and_write_holders_and_unlock_breaks_them(void **state)
{
    (void)state;
    proc holder;
    run r;
    HOLD(&holder, "rwstat.ready", "exec sleep 30", "lock", "--write", "-t", "0.6", "rwstat");
    RUN(&r, srv.url, "status", "rwstat");
    expect_status(&r, 0);
    assert_non_null(strstr(r.out, "holder: -\n"));
    assert_null(strstr(r.out, "writer: -\n"));
    assert_non_null(strstr(r.out, "writer: "));
    assert_int_equal(status_field(r.out, "readers"), 0);
    assert_true(status_field(r.out, "rw_ttl_ms") > 0);
    assert_true(status_field(r.out, "rw_last_token") > 0);
    RUN(&r, srv.url, "unlock", "--force", "rwstat");
    expect_status(&r, 0);
    assert_int_equal(wait_dlock(&holder, 15000), 76);

    HOLD(&holder, "rwstat.ready2", "exec sleep 30", "lock", "--read", "rwstat");
    RUN(&r, srv.url, "status", "rwstat");
    expect_status(&r, 0);
    assert_non_null(strstr(r.out, "writer: -\n"));
    assert_int_equal(status_field(r.out, "readers"), 1);
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);
    RUN(&r, srv.url, "status", "rwstat");
    expect_status(&r, 1);
    assert_int_equal(status_field(r.out, "readers"), 0);
    assert_int_equal(status_field(r.out, "rw_ttl_ms"), -1);
}

/* --read holds overlap, --write excludes them and gets a fencing token,
 * --fair hands one out too. */
static void readers_share_writers_exclude_and_fair_locks_give_tokens(void **state)
{
    (void)state;
    char script[512], out[256];
    proc reader;
    HOLD(&reader, "rw.ready", "exec sleep 30", "lock", "--read", "rwcli");
    run r;
    RUN(&r, srv.url, "lock", "--read", "-w", "0", "rwcli", "--", "true");
    expect_status(&r, 0);
    RUN(&r, srv.url, "lock", "--write", "-w", "0", "rwcli", "--", "true");
    expect_status(&r, 75);
    kill(reader.pid, SIGTERM);
    assert_int_equal(wait_dlock(&reader, 10000), 128 + SIGTERM);
    scratch_file(out, sizeof out, "rw.token");
    snprintf(script, sizeof script, "echo $DLOCK_TOKEN > %s", out);
    RUN(&r, srv.url, "lock", "--write", "-w", "5", "rwcli", "--", "sh", "-c", script);
    expect_status(&r, 0);
    char buf[64];
    slurp(out, buf, sizeof buf);
    assert_true(strtoull(buf, NULL, 10) > 0);
    RUN(&r, srv.url, "lock", "--fair", "-w", "0", "faircli", "--", "sh", "-c", script);
    expect_status(&r, 0);
    slurp(out, buf, sizeof buf);
    assert_true(strtoull(buf, NULL, 10) > 0);
}

/* Two permits: two holders run, a third is refused (75); COMMAND sees
 * DLOCK_PERMIT and no DLOCK_TOKEN. A SIGKILLed dlock's permit comes back
 * once its 600 ms lease runs out. */
static void semaphore_admits_permits_holders_and_a_killed_ones_permit_returns(void **state)
{
    (void)state;
    char script[512], envf[256], buf[256];
    proc holder[2];
    for (int i = 0; i < 2; i++) {
        char n[32];
        snprintf(n, sizeof n, "sem.ready%d", i);
        HOLD(&holder[i], n, "exec sleep 30", "semaphore", "-p", "2", "-t", "0.6", "semcli");
    }
    run r;
    RUN(&r, srv.url, "semaphore", "-p", "2", "-w", "0", "semcli", "--", "true");
    expect_status(&r, 75);
    /* SIGKILL: dlock cannot release; the lease must end the permit. */
    kill(holder[0].pid, SIGKILL);
    waitpid(holder[0].pid, NULL, 0);
    scratch_file(envf, sizeof envf, "sem.env");
    snprintf(script, sizeof script, "echo \"$DLOCK_PERMIT ${DLOCK_TOKEN:-none}\" > %s", envf);
    RUN(&r, srv.url, "semaphore", "-p", "2", "-w", "5", "semcli", "--", "sh", "-c", script);
    expect_status(&r, 0);
    slurp(envf, buf, sizeof buf);
    assert_int_equal(strlen(buf), 32 + 1 + 4 + 1);
    assert_non_null(strstr(buf, " none\n"));
    kill(holder[1].pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder[1], 10000), 128 + SIGTERM);
}

/* --set once (then 1), --await times out with 75 while the count is not
 * zero, and a waiting --await ends as soon as --count-down reaches zero. */
static void latch_sets_once_and_releases_awaiters_at_zero(void **state)
{
    (void)state;
    run r;
    RUN(&r, srv.url, "latch", "latchcli", "--set", "2");
    expect_status(&r, 0);
    RUN(&r, srv.url, "latch", "latchcli", "--set", "2");
    expect_status(&r, 1);
    RUN(&r, srv.url, "latch", "latchcli", "--await", "-w", "0.2");
    expect_status(&r, 75);
    proc waiter;
    START(&waiter, srv.url, "latch", "latchcli", "--await");
    RUN(&r, srv.url, "latch", "latchcli", "--count-down");
    expect_status(&r, 0);
    assert_string_equal(r.out, "1\n");
    usleep(200000);
    assert_int_equal(waitpid(waiter.pid, NULL, WNOHANG), 0);
    RUN(&r, srv.url, "latch", "--count-down", "latchcli");
    expect_status(&r, 0);
    assert_string_equal(r.out, "0\n");
    long long t0 = th_now_ms();
    assert_int_equal(wait_dlock(&waiter, 10000), 0);
    assert_true(th_now_ms() - t0 < 2000);
}

/* -u three times is RedLock: works with all masters, still works with one
 * stopped, refuses (75) with two stopped and reports 69 with none. */
static void redlock_over_three_urls_holds_with_a_majority_only(void **state)
{
    (void)state;
    th_redis m[3];
    for (int i = 0; i < 3; i++) assert_int_equal(th_redis_start(&m[i], NULL), 0);
    run r;
#define RL(...) RUN(&r, srv.url, "-u", m[0].url, "-u", m[1].url, "-u", m[2].url, __VA_ARGS__)
    RL("lock", "-w", "0", "rlcli", "--", "true");
    expect_status(&r, 0);
    th_redis_stop(&m[2]);
    RL("lock", "-w", "2", "rlcli", "--", "sh", "-c", "exit 4");
    expect_status(&r, 4);
    th_redis_stop(&m[1]);
    RL("lock", "-v", "-w", "0.3", "rlcli", "--", "true");
    expect_status(&r, 75);
    assert_non_null(strstr(r.err, "majority"));
    th_redis_stop(&m[0]);
    RL("lock", "-w", "0.3", "rlcli", "--", "true");
    expect_status(&r, 69);
#undef RL
}

/* The first line of a file written by `date +%s%N` (nanoseconds), or the
 * largest of its lines: the moments a COMMAND showed it was running. */
static long long max_stamp(const char *path)
{
    char buf[1 << 16];
    slurp(path, buf, sizeof buf);
    long long max = 0;
    for (char *line = buf; *line;) {
        long long v = strtoll(line, &line, 10);
        if (v > max) max = v;
        while (*line == '\n') line++;
        if (*line && (*line < '0' || *line > '9')) break;
    }
    return max;
}

/* The files through which a test's COMMANDs tell what they do, PREFIX.a
 * and so on in the scratch dir: `pid` a COMMAND's pid, `bg` its child's,
 * `ready` that it runs; `a` the first COMMAND's clock stamps and `b` the
 * next holder's, for the check that one stopped before the other
 * started. */
typedef struct cmd_files {
    char a[256], b[256], pid[256], bg[256], ready[256];
} cmd_files;

static void cmd_files_name(cmd_files *f, const char *prefix)
{
    scratch_file_of(f->a, sizeof f->a, prefix, "a");
    scratch_file_of(f->b, sizeof f->b, prefix, "b");
    scratch_file_of(f->pid, sizeof f->pid, prefix, "pid");
    scratch_file_of(f->bg, sizeof f->bg, prefix, "bg");
    scratch_file_of(f->ready, sizeof f->ready, prefix, "ready");
}

/* Every stamp of the first COMMAND comes before the next holder's
 * first. */
static void expect_first_stopped_before_second(const cmd_files *f)
{
    long long last_a = max_stamp(f->a), start_b = max_stamp(f->b);
    print_message("the first COMMAND's last stamp: %lld us before the second's first\n", (start_b - last_a) / 1000);
    assert_true(last_a > 0 && start_b > 0);
    assert_true(last_a < start_b);
}

/* The pid a COMMAND wrote to `path`, or 0. */
static pid_t read_pid(const char *path)
{
    char buf[32];
    slurp(path, buf, sizeof buf);
    return (pid_t)strtol(buf, NULL, 10);
}

/* A holder cut off from Redis (the proxy forwards nothing and closes
 * nothing) must stop COMMAND before its lease can end on the server, so
 * before anyone else can run under the lock: the first COMMAND's last
 * sign of life comes before the second COMMAND's first. COMMAND ignores
 * SIGTERM here, so only the SIGKILL at the lease's end stops it; dlock
 * exits 76. */
static void cut_off_holder_stops_command_before_the_lease_ends(void **state)
{
    (void)state;
    th_target_require_single(&srv);
    th_proxy *px = th_proxy_start(&srv.single);
    assert_non_null(px);
    cmd_files f;
    cmd_files_name(&f, "cut");
    char script[1536], second[512];
    snprintf(script, sizeof script,
             "trap '' TERM; echo $$ > %s; touch %s; while :; do date +%%s%%N >> %s; sleep 0.01; done", f.pid, f.ready,
             f.a);
    snprintf(second, sizeof second, "date +%%s%%N > %s", f.b);
    proc holder;
    START(&holder, th_proxy_url(px), "lock", "-t", "2", "cut", "--", "sh", "-c", script);
    assert_true(wait_for_file(f.ready, 10000));
    usleep(300000);
    long long cut = th_now_ms();
    th_proxy_partition(px, 1);
    run r;
    RUN(&r, srv.url, "lock", "-w", "15", "cut", "--", "sh", "-c", second);
    int first = wait_dlock(&holder, 15000);
    long long told = th_now_ms() - cut;
    pid_t left = read_pid(f.pid);
    if (left > 0 && th_pid_alive(left)) kill(left, SIGKILL); /* whatever the outcome */
    th_proxy_partition(px, 0);
    th_proxy_stop(px);
    expect_status(&r, 0);
    assert_int_equal(first, 76);
    print_message("dlock exited %lld ms after the cut\n", told);
    expect_first_stopped_before_second(&f);
    /* And it exits soon after: nothing it sends at the end may wait out
     * the 5 s command timeout on the dead connection (the status
     * record's delete did, once: 5.4 s instead of 1.7). */
    if (told >= 4500) fail_msg("dlock exited %lld ms after the cut: it waited on the cut-off server", told);
}

/* A lease no longer trusted when COMMAND is about to start (here its
 * answer came back late, as after a pause of dlock between acquiring and
 * starting COMMAND) must not start COMMAND at all: that time is the next
 * holder's. 25 ms on every request against a 30 ms lease trusted for
 * half of it less the drift allowance, about 13 ms from the acquisition's
 * send: the answer comes after. The library now refuses such a grant
 * (gives it back, DLOCK_ERR_LOST); dlock's own check before COMMAND's
 * start covers a pause after the acquire returned. Either way dlock
 * exits 76 and says why; COMMAND (which would leave a file at once) never
 * ran. Before the checks, COMMAND was started and killed at the first
 * look at the lease. */
static void command_is_not_started_on_a_lease_no_longer_trusted(void **state)
{
    (void)state;
    th_target_require_single(&srv);
    th_proxy *px = th_proxy_start(&srv.single);
    assert_non_null(px);
    char ran[256];
    scratch_file(ran, sizeof ran, "late.ran");
    th_proxy_latency(px, 25);
    run r;
    RUN(&r, th_proxy_url(px), "lock", "-t", "30ms", "--safety-margin", "50", "late", "--", "touch", ran);
    th_proxy_latency(px, 0);
    th_proxy_stop(px);
    expect_status(&r, 76);
    if (!strstr(r.err, "given back") && !strstr(r.err, "before COMMAND started")) fail_msg("dlock said: %s", r.err);
    assert_false(file_exists(ran));
}

/* For the tests that kill dlock or its guard: start `dlock lock NAME`
 * (with `-t TTL` unless ttl is NULL) whose COMMAND is sh with a child
 * (sleep 60) in its group, and once both run, their pids, told through
 * the files PREFIX.pid, .bg and .ready (prefix: NAME). */
static void start_sh_with_child(proc *holder, const char *name, const char *ttl, pid_t *sh, pid_t *bg)
{
    cmd_files f;
    cmd_files_name(&f, name);
    char script[1536];
    snprintf(script, sizeof script, "sleep 60 & echo $! > %s; echo $$ > %s; touch %s; wait", f.bg, f.pid, f.ready);
    const char *with_ttl[] = {"lock", "-t", ttl, name, "--", "sh", "-c", script, NULL};
    const char *without[] = {"lock", name, "--", "sh", "-c", script, NULL};
    start_dlock(holder, srv.url, NULL, ttl ? with_ttl : without);
    assert_true(wait_for_file(f.ready, 10000));
    *sh = read_pid(f.pid);
    *bg = read_pid(f.bg);
    assert_true(*sh > 0 && *bg > 0);
}

/* Both gone within 3 s of `after` happening (those that are not are
 * killed here, then the test fails). */
static void expect_group_gone(pid_t sh, pid_t bg, const char *after)
{
    long long t0 = th_now_ms();
    while ((th_pid_alive(sh) || th_pid_alive(bg)) && th_now_ms() - t0 < 3000) usleep(5000);
    int sh_alive = th_pid_alive(sh), bg_alive = th_pid_alive(bg);
    if (sh_alive) kill(sh, SIGKILL);
    if (bg_alive) kill(bg, SIGKILL);
    assert_false(sh_alive);
    assert_false(bg_alive);
    print_message("COMMAND and its child gone %lld ms after %s\n", th_now_ms() - t0, after);
}

/* kill -9 of dlock takes COMMAND down with it, and everything COMMAND
 * started in its process group: nothing may run on unprotected once the
 * lease runs out and the next holder starts. */
static void killed_dlock_takes_command_and_its_group_down(void **state)
{
    (void)state;
    proc holder;
    pid_t sh, bg;
    start_sh_with_child(&holder, "k9", "1", &sh, &bg);
    kill(holder.pid, SIGKILL);
    assert_int_equal(wait_dlock(&holder, 5000), 128 + SIGKILL);
    expect_group_gone(sh, bg, "dlock was killed");
}

/* When COMMAND ends, whatever it left running in its process group is
 * killed before the lock is released (tools/child.c), so that nothing of
 * it runs on under the next holder. COMMAND leaves a loop behind that
 * stamps the clock into a file as fast as it can, and ends while the next
 * holder waits; the next holder's COMMAND stamps the clock once. Every
 * stamp of the loop must come before that one. (A process with SIGKILL
 * pending writes no more to a file, so a stamp taken late cannot land
 * either.) */
static void what_command_left_running_stops_before_the_next_holder_starts(void **state)
{
    (void)state;
    cmd_files f;
    cmd_files_name(&f, "left");
    char script[1536], second[512];
    snprintf(script, sizeof script,
             "(while :; do date +%%s%%N >> %s; done) & echo $! > %s;"
             " while [ ! -s %s ]; do sleep 0.01; done; touch %s; sleep 0.3",
             f.a, f.pid, f.a, f.ready);
    snprintf(second, sizeof second, "date +%%s%%N > %s", f.b);
    proc holder;
    START(&holder, srv.url, "lock", "left", "--", "sh", "-c", script);
    assert_true(wait_for_file(f.ready, 10000));
    run r;
    RUN(&r, srv.url, "lock", "-w", "15", "left", "--", "sh", "-c", second);
    int first = wait_dlock(&holder, 15000);
    pid_t loop = read_pid(f.pid);
    long long t0 = th_now_ms();
    while (loop > 0 && th_pid_alive(loop) && th_now_ms() - t0 < 3000) usleep(5000);
    int alive = loop > 0 && th_pid_alive(loop);
    if (alive) kill(loop, SIGKILL);
    assert_int_equal(first, 0);
    expect_status(&r, 0);
    expect_first_stopped_before_second(&f);
    assert_false(alive);
}

/* The order of the two steps above, pinned down: COMMAND's group is
 * killed before the release, and the guard reaped only after it (a
 * hand-off no longer waits for the guard's exit). The test before cannot
 * tell the two apart: the next holder starts milliseconds after the
 * release, the late kill microseconds after it. Here dlock stops itself
 * right after its release (DLOCK_TEST_STOP_AFTER_RELEASE), and what
 * COMMAND left behind, a loop appending clock stamps to a file, must have
 * stopped by then: the file must not grow while dlock sits stopped. With
 * the group killed only when the guard is reaped, the loop runs on
 * (checked by hand, with the guard's own kill taken out too). */
static void command_left_running_is_killed_before_the_release_not_after(void **state)
{
    (void)state;
    cmd_files f;
    cmd_files_name(&f, "kill-first");
    char script[1536];
    snprintf(script, sizeof script,
             "(while :; do date +%%s%%N >> %s; done) & echo $! > %s;"
             " while [ ! -s %s ]; do sleep 0.01; done; touch %s; sleep 0.2",
             f.a, f.pid, f.a, f.ready);
    const char *args[] = {"lock", "kill-first", "--", "sh", "-c", script, NULL};
    proc holder;
    start_dlock(&holder, srv.url, "DLOCK_TEST_STOP_AFTER_RELEASE=1", args);
    assert_true(wait_for_file(f.ready, 10000));
    long long t0 = th_now_ms();
    while (!th_pid_stopped(holder.pid) && th_now_ms() - t0 < 10000) usleep(2000);
    int stopped = th_pid_stopped(holder.pid);
    struct stat s1, s2;
    int have1 = stat(f.a, &s1) == 0;
    usleep(300000);
    int have2 = stat(f.a, &s2) == 0;
    pid_t loop = read_pid(f.pid);
    int alive = loop > 0 && th_pid_alive(loop);
    if (alive) kill(loop, SIGKILL);
    kill(holder.pid, SIGCONT);
    int st = wait_dlock(&holder, 10000);
    assert_true(stopped);
    assert_int_equal(st, 0);
    assert_true(have1 && have2);
    if (s2.st_size != s1.st_size)
        fail_msg("COMMAND's loop wrote %lld bytes after dlock had released the lock",
                 (long long)(s2.st_size - s1.st_size));
    assert_false(alive);
}

/* COMMAND's guard killed on its own (kill -9 of the guard, not of dlock)
 * takes COMMAND along (its parent-death signal) and dlock kills the rest
 * of the group when it reaps the guard (tools/child.c): nothing of
 * COMMAND runs on once dlock has released the lock, which it then does
 * (the next `-n` gets it). dlock exits as a shell would for a COMMAND
 * killed by SIGKILL. */
static void a_guard_killed_alone_takes_command_and_its_group_along(void **state)
{
    (void)state;
    proc holder;
    pid_t sh, bg;
    start_sh_with_child(&holder, "g9", NULL, &sh, &bg);
    pid_t guard = th_pid_parent(sh);
    assert_true(guard > 0 && guard != holder.pid && th_pid_parent(guard) == holder.pid);
    kill(guard, SIGKILL);
    int st = wait_dlock(&holder, 10000);
    expect_group_gone(sh, bg, "the guard was killed");
    assert_int_equal(st, 128 + SIGKILL);
    run r;
    RUN(&r, srv.url, "lock", "-n", "g9", "--", "true");
    expect_status(&r, 0);
}

/* The children of `pid` (from /proc), at most `max`; how many. */
static int children_of(pid_t pid, pid_t *out, int max)
{
    int n = 0;
    DIR *d = opendir("/proc");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        pid_t p = (pid_t)atoi(e->d_name);
        if (p > 0 && th_pid_parent(p) == pid) out[n++] = p;
    }
    closedir(d);
    return n;
}

/* COMMAND's guard is started before dlock waits for the lock (so that a
 * hand-off costs no fork, tools/child.c). A waiting dlock that is killed
 * must take that guard along without COMMAND ever starting: the lock was
 * never held. */
static void a_dlock_killed_while_it_waits_takes_its_guard_along(void **state)
{
    (void)state;
    proc holder;
    HOLD(&holder, "kw.ready", "exec sleep 30", "lock", "kw");
    char ran[256], script[320];
    scratch_file(ran, sizeof ran, "kw.ran");
    snprintf(script, sizeof script, "touch %s", ran);
    proc waiter;
    START(&waiter, srv.url, "lock", "kw", "--", "sh", "-c", script);
    pid_t guard[4];
    int n = 0;
    long long t0 = th_now_ms();
    while ((n = children_of(waiter.pid, guard, 4)) == 0 && th_now_ms() - t0 < 5000) usleep(5000);
    assert_int_equal(n, 1); /* the guard, waiting with dlock */
    usleep(100000);
    kill(waiter.pid, SIGKILL);
    assert_int_equal(wait_dlock(&waiter, 5000), 128 + SIGKILL);
    t0 = th_now_ms();
    while (th_pid_alive(guard[0]) && th_now_ms() - t0 < 3000) usleep(5000);
    int alive = th_pid_alive(guard[0]);
    if (alive) kill(guard[0], SIGKILL);
    assert_false(alive);
    usleep(200000);
    assert_false(file_exists(ran));
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);
    assert_false(file_exists(ran));
    assert_free("kw");
}

/* `dlock SUBCOMMAND --help` (and -h) prints that subcommand's synopsis and
 * options on stdout and exits 0, for every subcommand, without a server. */
static void every_subcommand_prints_its_help(void **state)
{
    (void)state;
    static const struct {
        const char *sub, *synopsis, *option;
    } subs[] = {
        {"lock", "lock [--fair|--read|--write|-s|-x] [-w WAIT] [-n]", "--conflict-exit-code N"},
        {"semaphore", "semaphore -p PERMITS", "--set-permits N"},
        {"latch", "latch NAME --set N", "--wait DURATION"},
        {"id", "id [-n COUNT] PREFIX | id --count PREFIX", "--date YYYY-MM-DD"},
        {"status", "status [--json] NAME", "--json"},
        {"unlock", "unlock --force NAME", "--help"},
        {"list", "list [--json] [PATTERN]", "--json"},
        {"delete", "delete [--force] NAME", "--force"},
    };
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", closed_port());
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        for (int form = 0; form < 2; form++) {
            run r;
            RUN(&r, url, subs[i].sub, form ? "-h" : "--help");
            if (r.status != 0 || strncmp(r.out, "usage: dlock ", 13) != 0 || !strstr(r.out, subs[i].synopsis) ||
                !strstr(r.out, subs[i].option) || !strstr(r.out, "--timeout DURATION") || r.err[0]) {
                print_error("%s %s: exit %d\nstdout: %s\nstderr: %s\n", subs[i].sub, form ? "-h" : "--help", r.status,
                            r.out, r.err);
                fail();
            }
        }
    }
}

/* flock(1)'s forms: -n/--nonblock, durations with units, NAME COMMAND
 * without '--', -c 'SHELL COMMAND' before or (as in flock) after NAME, and
 * nothing after NAME taken as an option. */
static void lock_takes_flock_forms_and_durations_with_units(void **state)
{
    (void)state;
    run r;
    RUN(&r, srv.url, "lock", "-n", "flock1", "--", "true");
    expect_status(&r, 0);
    RUN(&r, srv.url, "lock", "-w", "2s", "-t", "1m", "flock1", "sh", "-c", "exit 5");
    expect_status(&r, 5);
    RUN(&r, srv.url, "lock", "--nonblock", "--wait=500ms", "--ttl=90s", "flock1", "true");
    expect_status(&r, 0);
    /* -t 1m is 60000 ms: the lease is above the 30 s default. */
    proc holder;
    HOLD(&holder, "flock1.ready", "exec sleep 30", "lock", "-t", "1m", "flock1");
    redisReply *rep = th_target_cmd(&srv, "dlock:{flock1}", "PTTL %s", "dlock:{flock1}");
    assert_non_null(rep);
    assert_true(rep->type == REDIS_REPLY_INTEGER && rep->integer > 30000 && rep->integer <= 60000);
    freeReplyObject(rep);
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);

    /* -c runs one shell command, with the hold's environment. */
    RUN(&r, srv.url, "lock", "-c", "exit 7", "flock1");
    expect_status(&r, 7);
    RUN(&r, srv.url, "lock", "flock1", "-c", "exit 7");
    expect_status(&r, 7);
    RUN(&r, srv.url, "lock", "--command", "[ \"$DLOCK_NAME\" = flock1 ] && [ -n \"$DLOCK_TOKEN\" ] && exit 8",
        "flock1");
    expect_status(&r, 8);
    RUN(&r, srv.url, "semaphore", "-p", "1", "-c", "[ -n \"$DLOCK_PERMIT\" ] && exit 6", "flocksem");
    expect_status(&r, 6);
    RUN(&r, srv.url, "semaphore", "--permits", "1", "flocksem", "-c", "exit 4");
    expect_status(&r, 4);

    /* After NAME, options are COMMAND's: "-w" is run (and not found). */
    RUN(&r, srv.url, "lock", "flock1", "-w", "5", "true");
    expect_status(&r, 127);
    assert_non_null(strstr(r.err, "'-w'"));
    RUN(&r, srv.url, "lock", "flock1", "sh", "-c", "exit $#", "sh", "-t", "-n", "-c");
    expect_status(&r, 3);
    assert_free("flock1");
}

/* A bare number is seconds, fractions allowed, as in flock(1), etcdctl
 * and consul: -w 1 waits a second (not a millisecond), -w 0.5 half of
 * one; -t 2 and -t 1.5 are leases of seconds (as milliseconds both are
 * below the 30 ms minimum); --timeout takes the same forms. */
static void bare_duration_is_seconds_as_in_flock(void **state)
{
    (void)state;
    proc holder;
    HOLD(&holder, "secs.ready", "exec sleep 30", "lock", "secs");
    run r;
    RUN(&r, srv.url, "lock", "-w", "1", "secs", "true");
    expect_status(&r, 75);
    assert_true(r.ms >= 950);
    RUN(&r, srv.url, "lock", "--wait=0.5", "secs", "true");
    expect_status(&r, 75);
    assert_true(r.ms >= 450);
    RUN(&r, srv.url, "--timeout", "1.5", "lock", "-w", "0.25s", "secs", "true");
    expect_status(&r, 75);
    assert_true(r.ms >= 240);
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);

    static const char *const ttls[] = {"2", "1.5"};
    for (size_t i = 0; i < 2; i++) {
        HOLD(&holder, "secs.ready", "exec sleep 30", "lock", "-t", ttls[i], "secs");
        redisReply *rep = th_target_cmd(&srv, "dlock:{secs}", "PTTL %s", "dlock:{secs}");
        assert_non_null(rep);
        long long limit = i == 0 ? 2000 : 1500;
        if (rep->type != REDIS_REPLY_INTEGER || rep->integer <= 100 || rep->integer > limit) {
            print_error("-t %s: PTTL %lld\n", ttls[i], rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1);
            fail();
        }
        freeReplyObject(rep);
        kill(holder.pid, SIGTERM);
        assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);
    }
    assert_free("secs");
}

/* As flock(1): a lock that -n or -w does not get prints nothing (exit 75
 * or -E's), -v says why (and, when it gets it, after how long); -q is
 * taken; -s/--shared and -x/--exclusive are the read and write sides. */
static void busy_lock_is_silent_unless_verbose(void **state)
{
    (void)state;
    proc holder;
    HOLD(&holder, "silent.ready", "exec sleep 30", "lock", "silent");
    run r;
    static const char *const quiet_forms[][4] = {
        {"-n", NULL}, {"-w", "0.2", NULL}, {"-n", "-E", "3", NULL}, {"-q", "-n", NULL}};
    for (size_t i = 0; i < sizeof quiet_forms / sizeof quiet_forms[0]; i++) {
        const char *args[12] = {"lock"};
        size_t n = 1;
        for (size_t k = 0; quiet_forms[i][k]; k++) args[n++] = quiet_forms[i][k];
        args[n++] = "silent";
        args[n++] = "true";
        args[n] = NULL;
        run_argv(&r, srv.url, NULL, args);
        expect_status(&r, strcmp(quiet_forms[i][1] ? quiet_forms[i][1] : "", "-E") == 0 ? 3 : 75);
        if (r.err[0] || r.out[0]) {
            print_error("form %zu printed: [%s][%s]\n", i, r.out, r.err);
            fail();
        }
    }
    RUN(&r, srv.url, "lock", "-v", "-n", "silent", "true");
    expect_status(&r, 75);
    assert_one_line(r.err);
    assert_non_null(strstr(r.err, "not acquired"));
    RUN(&r, srv.url, "semaphore", "-p", "1", "--verbose", "-n", "silent-sem", "true");
    expect_status(&r, 0);
    assert_non_null(strstr(r.err, "acquired after"));
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);

    HOLD(&holder, "silent.ready", "exec sleep 30", "lock", "-s", "silent-rw");
    RUN(&r, srv.url, "lock", "--shared", "-n", "silent-rw", "true");
    expect_status(&r, 0);
    RUN(&r, srv.url, "lock", "-x", "-n", "silent-rw", "true");
    expect_status(&r, 75);
    RUN(&r, srv.url, "lock", "--exclusive", "-n", "silent-rw", "true");
    expect_status(&r, 75);
    assert_string_equal(r.err, "");
    RUN(&r, srv.url, "lock", "--write", "-n", "silent-rw", "true");
    expect_status(&r, 75);
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);
    RUN(&r, srv.url, "lock", "-x", "-n", "silent-rw", "true");
    expect_status(&r, 0);
}

/* -w is a deadline whatever the server does: stopped (SIGSTOP) before we
 * connect, or while we wait, `lock -w D` is back within D plus the 2 s
 * dlock(1) states, with 69. The bounds here add 1.5 s for a loaded
 * machine; before, a stopped server cost 5 s (one command timeout) and
 * one stopped during the wait 12 s. */
static void wait_is_a_deadline_when_redis_stops_answering(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    run x;
    th_redis_pause(&r);
    RUN(&x, r.tcp_url, "lock", "-w", "1", "deadline", "true");
    th_redis_resume(&r);
    print_message("lock -w 1, server stopped: exit %d after %lld ms\n", x.status, x.ms);
    expect_status(&x, 69);
    assert_one_line(x.err);
    assert_true(x.ms < 1000 + 2000 + 1500);
    th_redis_pause(&r);
    RUN(&x, r.tcp_url, "lock", "-n", "deadline", "true");
    th_redis_resume(&r);
    print_message("lock -n, server stopped: exit %d after %lld ms\n", x.status, x.ms);
    expect_status(&x, 69);
    assert_true(x.ms < 2000 + 1500);

    char ready[256], script[300];
    scratch_file(ready, sizeof ready, "deadline.ready");
    unlink(ready);
    snprintf(script, sizeof script, "touch %s; exec sleep 30", ready);
    proc holder, waiter;
    START(&holder, r.url, "lock", "deadline", "--", "sh", "-c", script);
    assert_true(wait_for_file(ready, 10000));
    START(&waiter, r.tcp_url, "lock", "-w", "3", "deadline", "true");
    usleep(500000);
    th_redis_pause(&r);
    int st = wait_dlock(&waiter, RUN_TIMEOUT_MS);
    long long ms = th_now_ms() - waiter.started;
    th_redis_resume(&r);
    print_message("lock -w 3, server stopped during the wait: exit %d after %lld ms\n", st, ms);
    assert_int_equal(st, 69);
    assert_true(ms < 3000 + 2000 + 1500);
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);
    th_redis_stop(&r);
}

/* --retry-connect: a waiter started while Redis is down keeps trying
 * within its -w, and runs COMMAND once the server is back on the same
 * port; without it, the first refusal is 69. */
static void retry_connect_waits_through_an_outage(void **state)
{
    (void)state;
    th_redis r;
    assert_int_equal(th_redis_start(&r, NULL), 0);
    kill(r.pid, SIGKILL);
    waitpid(r.pid, NULL, 0);
    r.pid = -1;
    run x;
    RUN(&x, r.tcp_url, "lock", "-w", "5", "outage", "true");
    expect_status(&x, 69);
    assert_one_line(x.err);

    char ran[256], touch[300];
    scratch_file(ran, sizeof ran, "outage.ran");
    unlink(ran);
    snprintf(touch, sizeof touch, "touch %s", ran);
    proc waiter;
    START(&waiter, r.tcp_url, "lock", "--retry-connect", "-w", "15", "outage", "--", "sh", "-c", touch);
    usleep(1000000);
    assert_int_equal(waitpid(waiter.pid, NULL, WNOHANG), 0);
    assert_int_equal(th_redis_restart(&r), 0);
    assert_int_equal(wait_dlock(&waiter, RUN_TIMEOUT_MS), 0);
    assert_true(file_exists(ran));
    th_redis_stop(&r);
}

/* The first line of dlock's stdout once it has one (the token of a hold
 * without COMMAND), waiting at most 10 s; "" if none came. */
static void first_line(const proc *p, char *buf, size_t size)
{
    long long until = th_now_ms() + 10000;
    do {
        slurp(p->out_path, buf, size);
        char *nl = strchr(buf, '\n');
        if (nl) {
            *nl = '\0';
            return;
        }
        usleep(5000);
    } while (th_now_ms() < until);
    buf[0] = '\0';
}

/* `dlock lock NAME` without COMMAND prints the fencing token, holds the
 * lock (others get 75) until SIGTERM (exit 0, released), or with
 * --until-eof until its stdin ends; a hold lost meanwhile exits 76. */
static void lock_without_command_holds_until_told_to_stop(void **state)
{
    (void)state;
    proc holder;
    START(&holder, srv.url, "lock", "idle");
    char line[64];
    first_line(&holder, line, sizeof line);
    assert_true(strtoull(line, NULL, 10) > 0);
    run r;
    RUN(&r, srv.url, "lock", "-n", "idle", "true");
    expect_status(&r, 75);
    RUN(&r, srv.url, "status", "idle");
    expect_status(&r, 0);
    assert_int_equal(status_field(r.out, "last_token"), (long long)strtoull(line, NULL, 10));
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 0);
    assert_free("idle");

    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0); /* only stdin, a dup, stays open in dlock */
    static const char *const eof_args[] = {"lock", "--until-eof", "idle", NULL};
    start_dlock_in(&holder, srv.url, NULL, eof_args, p[0]);
    close(p[0]);
    first_line(&holder, line, sizeof line);
    assert_true(strtoull(line, NULL, 10) > 0);
    assert_int_equal(write(p[1], "x\n", 2), 2); /* input is read and dropped */
    RUN(&r, srv.url, "lock", "-n", "idle", "true");
    expect_status(&r, 75);
    close(p[1]);
    assert_int_equal(wait_dlock(&holder, 10000), 0);
    assert_free("idle");

    /* Broken by `unlock --force`: the next renewal (every third of 1 s)
     * finds it gone. */
    START(&holder, srv.url, "lock", "-t", "1", "idle");
    first_line(&holder, line, sizeof line);
    assert_true(line[0] != '\0');
    RUN(&r, srv.url, "unlock", "--force", "idle");
    expect_status(&r, 0);
    assert_int_equal(wait_dlock(&holder, 10000), 76);

    START(&holder, srv.url, "semaphore", "-p", "1", "idle-sem");
    first_line(&holder, line, sizeof line);
    assert_true(line[0] != '\0');
    RUN(&r, srv.url, "semaphore", "-p", "1", "-n", "idle-sem", "true");
    expect_status(&r, 75);
    kill(holder.pid, SIGINT);
    assert_int_equal(wait_dlock(&holder, 10000), 0);
    RUN(&r, srv.url, "semaphore", "-p", "1", "-n", "idle-sem", "true");
    expect_status(&r, 0);
}

/* A process of ours on a loopback port that answers every connection with
 * an HTTP error and closes it: a server that is not Redis. */
static pid_t start_http_liar(int *port)
{
    int fd = loopback_socket(port);
    assert_int_equal(listen(fd, 16), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (;;) {
            int c = accept(fd, NULL, NULL);
            if (c < 0) _exit(0);
            char buf[256];
            ssize_t n = read(c, buf, sizeof buf);
            (void)n;
            static const char answer[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
            n = write(c, answer, sizeof answer - 1);
            close(c);
        }
    }
    close(fd);
    return pid;
}

/* Small edges: a 10 KB NAME is cut in the message, with its length; a
 * global option after the subcommand says where it goes; a server that
 * is not Redis is named as such, with what it answered. */
static void long_names_misplaced_options_and_other_servers_are_explained(void **state)
{
    (void)state;
    static char big[10241];
    memset(big, 'n', sizeof big - 1);
    run r;
    RUN(&r, srv.url, "lock", big, "true");
    expect_status(&r, 64);
    assert_one_line(r.err);
    assert_true(strlen(r.err) < 600);
    assert_non_null(strstr(r.err, "(10240 bytes)"));

    RUN(&r, srv.url, "lock", "-u", srv.url, "misplaced", "true");
    expect_status(&r, 64);
    assert_non_null(strstr(r.err, "-u is a global option: put it before the subcommand"));
    RUN(&r, srv.url, "status", "--timeout", "1", "misplaced");
    expect_status(&r, 64);
    assert_non_null(strstr(r.err, "--timeout is a global option"));
    RUN(&r, srv.url, "unlock", "--force", "--url", "misplaced");
    expect_status(&r, 64);
    assert_non_null(strstr(r.err, "--url is a global option"));

    int port;
    pid_t liar = start_http_liar(&port);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    RUN(&r, url, "lock", "-n", "other", "true");
    kill(liar, SIGKILL);
    waitpid(liar, NULL, 0);
    expect_status(&r, 69);
    assert_one_line(r.err);
    assert_non_null(strstr(r.err, "not a Redis server (it answered 'HTTP/1.1 400 Bad Request')"));
}

/* Busy: -n and --nonblock give up at once; -E N (--conflict-exit-code)
 * replaces 75 (0 included) and COMMAND does not run; -w 1s waits a
 * second, not a millisecond; free, -E changes nothing. */
static void busy_lock_exits_with_the_conflict_exit_code(void **state)
{
    (void)state;
    char marker[256], touch[300];
    scratch_file(marker, sizeof marker, "conflict.ran");
    snprintf(touch, sizeof touch, "touch %s", marker);
    proc holder;
    HOLD(&holder, "conflict.ready", "exec sleep 30", "lock", "conflict");
    run r;
    RUN(&r, srv.url, "lock", "-n", "conflict", "true");
    expect_status(&r, 75);
    assert_true(r.ms < 5000);
    RUN(&r, srv.url, "lock", "--nonblock", "conflict", "true");
    expect_status(&r, 75);
    RUN(&r, srv.url, "lock", "-n", "-E", "3", "conflict", "true");
    expect_status(&r, 3);
    RUN(&r, srv.url, "lock", "--conflict-exit-code=0", "-n", "-c", touch, "conflict");
    expect_status(&r, 0);
    assert_false(file_exists(marker));
    RUN(&r, srv.url, "semaphore", "-p", "1", "-n", "-E", "9", "conflict-sem", "true");
    expect_status(&r, 0);
    RUN(&r, srv.url, "lock", "-w", "1s", "-E", "4", "conflict", "true");
    expect_status(&r, 4);
    assert_true(r.ms >= 950);
    assert_true(r.ms < 10000);
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);
    RUN(&r, srv.url, "lock", "-n", "-E", "3", "conflict", "sh", "-c", "exit 0");
    expect_status(&r, 0);
}

/* A server that accepts connections and never answers (a listening socket
 * nobody reads; the kernel completes the handshake) costs the default
 * command timeout, 5 s, even with -n. --timeout 300ms makes it 69 within
 * about that, for lock and status alike. */
static void timeout_gives_up_on_a_server_that_never_answers(void **state)
{
    (void)state;
    int port, fd = loopback_socket(&port);
    assert_int_equal(listen(fd, 16), 0);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    run r;
    RUN(&r, url, "--timeout", "300ms", "lock", "-n", "stall", "true");
    print_message("lock -n with --timeout 300ms: exit %d after %lld ms\n", r.status, r.ms);
    expect_status(&r, 69);
    assert_one_line(r.err);
    assert_true(r.ms < 1500);
    RUN(&r, NULL, "--timeout", "0.3", "--url", url, "status", "stall");
    expect_status(&r, 69);
    assert_true(r.ms < 1500);
    close(fd);
}

/* Start a holder of NAME whose COMMAND writes its DLOCK_TOKEN to a scratch
 * file and then sleeps; returns that token. */
static unsigned long long hold_with_token(proc *p, const char *name, const char *const *opts)
{
    char ready[64], tokf[256], body[900], buf[64];
    const char *args[MAX_ARGS];
    size_t n = 0;
    snprintf(ready, sizeof ready, "%s.ready", name);
    snprintf(buf, sizeof buf, "%s.token", name);
    scratch_file(tokf, sizeof tokf, buf);
    unlink(tokf);
    snprintf(body, sizeof body, "echo $DLOCK_TOKEN > %s.tmp; mv %s.tmp %s; exec sleep 30", tokf, tokf, tokf);
    args[n++] = "lock";
    for (; opts[n - 1]; n++) args[n] = opts[n - 1];
    args[n++] = name;
    args[n] = NULL;
    start_holder(p, ready, body, args);
    assert_true(wait_for_file(tokf, 10000));
    slurp(tokf, buf, sizeof buf);
    return strtoull(buf, NULL, 10);
}

/* `status --json` while a dlock holds NAME: who (this host, the holding
 * dlock's pid, its COMMAND), since when, the token COMMAND got, the lease
 * left and the count, as one parseable object, also after several leases
 * (the record is refreshed, not left to expire with the first); the text
 * form says the same; a waiter is counted; after release it is free, with
 * nulls, and the record is gone. */
static void status_json_names_the_holders_host_pid_command_and_token(void **state)
{
    (void)state;
    static const char *const opts[] = {"-t", "900ms", NULL};
    char host[256], v[1024], want[64];
    assert_int_equal(gethostname(host, sizeof host), 0);
    proc holder;
    long long t0 = th_now_ms();
    unsigned long long token = hold_with_token(&holder, "stjson", opts);
    assert_true(token > 0);
    usleep(1500000); /* the record's own TTL is 1.2 s */
    run r;
    RUN(&r, srv.url, "status", "--json", "stjson");
    expect_status(&r, 0);
    json_get(r.out, "name", v, sizeof v);
    assert_string_equal(v, "stjson");
    json_get(r.out, "held", v, sizeof v);
    assert_string_equal(v, "true");
    json_get(r.out, "host", v, sizeof v);
    assert_string_equal(v, host);
    assert_int_equal(json_num(r.out, "pid"), holder.pid);
    json_get(r.out, "command", v, sizeof v);
    assert_int_equal(strncmp(v, "sh -c 'touch ", 13), 0);
    assert_non_null(strstr(v, "stjson.ready; echo $DLOCK_TOKEN > "));
    snprintf(want, sizeof want, "%llu", token);
    json_get(r.out, "token", v, sizeof v);
    assert_string_equal(v, want);
    json_get(r.out, "last_token", v, sizeof v);
    assert_string_equal(v, want);
    assert_int_equal(json_num(r.out, "count"), 1);
    long long left = json_num(r.out, "lease_left_ms");
    assert_true(left > 0 && left <= 900);
    long long held_for = json_num(r.out, "held_for_ms");
    assert_true(held_for >= 1400 && held_for <= th_now_ms() - t0 + 1000);
    json_get(r.out, "since", v, sizeof v);
    assert_int_equal(strlen(v), strlen("2026-11-25T10:00:00Z"));
    assert_int_equal(v[strlen(v) - 1], 'Z');
    assert_true(json_num(r.out, "since_ms") > 1640995200000LL);
    assert_int_equal(json_num(r.out, "waiting"), 0);
    json_get(r.out, "writer", v, sizeof v);
    assert_string_equal(v, "null");

    RUN(&r, srv.url, "status", "stjson");
    expect_status(&r, 0);
    assert_int_equal(status_field(r.out, "pid"), holder.pid);
    assert_int_equal(status_field(r.out, "token"), (long long)token);
    snprintf(v, sizeof v, "\nhost: %s\n", host);
    assert_non_null(strstr(r.out, v));
    assert_non_null(strstr(r.out, "\ncommand: sh -c 'touch "));
    assert_non_null(strstr(r.out, " ago)\n"));
    assert_non_null(strstr(r.out, "\nlease_left: "));

    /* One process waiting for it. */
    proc waiter;
    START(&waiter, srv.url, "lock", "stjson", "true");
    long long waiting = 0;
    for (long long until = th_now_ms() + 10000; waiting != 1 && th_now_ms() < until; usleep(50000)) {
        RUN(&r, srv.url, "status", "--json", "stjson");
        waiting = json_num(r.out, "waiting");
    }
    assert_int_equal(waiting, 1);
    kill(waiter.pid, SIGTERM);
    assert_int_equal(wait_dlock(&waiter, 10000), 128 + SIGTERM);

    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);
    RUN(&r, srv.url, "status", "--json", "stjson");
    expect_status(&r, 1);
    json_get(r.out, "held", v, sizeof v);
    assert_string_equal(v, "false");
    static const char *const nulls[] = {"holder", "host", "pid", "command", "since", "token", "lease_left_ms"};
    for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++) {
        json_get(r.out, nulls[i], v, sizeof v);
        if (strcmp(v, "null") != 0) fail_msg("%s is %s after the release", nulls[i], v);
    }
    redisReply *rep = th_target_cmd(&srv, "dlock:{stjson}:info", "EXISTS %s", "dlock:{stjson}:info");
    assert_non_null(rep);
    assert_int_equal(rep->integer, 0);
    freeReplyObject(rep);
    assert_free("stjson");
}

/* The command line is kept to about 200 bytes and shown with its control
 * characters escaped (text: one line; JSON: escapes a parser decodes);
 * a write hold records itself too; a record whose token is not the
 * current hold's is not shown. */
static void status_escapes_the_command_and_shows_only_the_current_holds_record(void **state)
{
    (void)state;
    char body[512], xs[301], v[1024];
    memset(xs, 'x', 300);
    xs[300] = '\0';
    snprintf(body, sizeof body, "exec sleep 30 # tab\tquote' newline\n %s", xs);
    proc holder;
    HOLD(&holder, "stesc.ready", body, "lock", "stesc");
    run r;
    RUN(&r, srv.url, "status", "stesc");
    expect_status(&r, 0);
    const char *line = strstr(r.out, "\ncommand: ");
    assert_non_null(line);
    line += 10;
    const char *eol = strchr(line, '\n');
    assert_non_null(eol);
    assert_null(memchr(line, '\t', (size_t)(eol - line)));
    assert_true(eol - line > 150 && eol - line < 240);
    assert_non_null(strstr(line, "tab\\tquote'\\\\'' newline\\n xxx"));
    assert_int_equal(strncmp(eol - 3, "...", 3), 0);
    assert_int_equal(status_field(r.out, "pid"), holder.pid);

    RUN(&r, srv.url, "status", "--json", "stesc");
    expect_status(&r, 0);
    json_get(r.out, "command", v, sizeof v);
    assert_non_null(strstr(v, "tab\tquote'\\'' newline\n xxx"));
    assert_true(strlen(v) <= 200 && strlen(v) > 190);
    assert_string_equal(v + strlen(v) - 3, "...");

    /* Not the current hold's: shown as unknown, while the lock's own
     * facts stay. */
    redisReply *rep = th_target_cmd(&srv, "dlock:{stesc}:info", "HSET %s token 1", "dlock:{stesc}:info");
    assert_non_null(rep);
    freeReplyObject(rep);
    RUN(&r, srv.url, "status", "stesc");
    expect_status(&r, 0);
    assert_non_null(strstr(r.out, "\nhost: -\npid: -\ncommand: -\nsince: -\n"));
    assert_true(status_field(r.out, "token") > 0);
    RUN(&r, srv.url, "status", "--json", "stesc");
    assert_int_equal(json_num(r.out, "pid"), -1);
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);

    static const char *const write_opts[] = {"--write", NULL};
    unsigned long long token = hold_with_token(&holder, "stw", write_opts);
    RUN(&r, srv.url, "status", "--json", "stw");
    expect_status(&r, 0);
    json_get(r.out, "holder", v, sizeof v);
    assert_string_equal(v, "null");
    json_get(r.out, "writer", v, sizeof v);
    assert_string_not_equal(v, "null");
    assert_int_equal(json_num(r.out, "pid"), holder.pid);
    char want[32];
    snprintf(want, sizeof want, "%llu", token);
    json_get(r.out, "token", v, sizeof v);
    assert_string_equal(v, want);
    kill(holder.pid, SIGTERM);
    assert_int_equal(wait_dlock(&holder, 10000), 128 + SIGTERM);
}

/* `id --count PREFIX` is how many IDs PREFIX handed out today (UTC), or on
 * --date; a day without any is 0. */
static void id_count_tells_how_many_ids_a_day_handed_out(void **state)
{
    (void)state;
    char today[16], today2[16];
    run r;
    for (int attempt = 0; attempt < 3; attempt++) { /* UTC midnight may pass */
        time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(today, sizeof today, "%Y-%m-%d", &tm);
        RUN(&r, srv.url, "id", "--count", attempt ? "cnt-cli2" : "cnt-cli");
        expect_status(&r, 0);
        assert_string_equal(r.out, "0\n");
        RUN(&r, srv.url, "id", "-n", "5", attempt ? "cnt-cli2" : "cnt-cli");
        expect_status(&r, 0);
        RUN(&r, srv.url, "id", attempt ? "cnt-cli2" : "cnt-cli");
        expect_status(&r, 0);
        RUN(&r, srv.url, "id", "--count", attempt ? "cnt-cli2" : "cnt-cli", "--date", today);
        t = time(NULL);
        gmtime_r(&t, &tm);
        strftime(today2, sizeof today2, "%Y-%m-%d", &tm);
        if (strcmp(today, today2) == 0) break;
    }
    expect_status(&r, 0);
    assert_string_equal(r.out, "6\n");
    RUN(&r, srv.url, "id", "--count", "--date", "2023-01-01", "cnt-cli");
    expect_status(&r, 0);
    assert_string_equal(r.out, "0\n");
}

/* ------------------------------------------------------------------------ */
/* The admin view: list, status of every kind, delete, semaphore sizes,     */
/* one NAME one kind                                                         */
/* ------------------------------------------------------------------------ */

/* Line `i` (0: the first) of `text` into out[size], without its newline;
 * "" past the end. */
static void nth_line(const char *text, int i, char *out, size_t size)
{
    const char *p = text;
    for (; i > 0 && p; i--) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    size_t n = p ? strcspn(p, "\n") : 0;
    snprintf(out, size, "%.*s", (int)n, p ? p : "");
}

/* The column at which `word` starts in `line` (-1: not there). */
static int column_of(const char *line, const char *word)
{
    const char *p = strstr(line, word);
    return p ? (int)(p - line) : -1;
}

/* The object of `list --json`'s line `i` (1: the first object) as
 * json_get() reads it: one flat object ending in "}\n". */
static void list_json_object(const char *out, int i, char *obj, size_t size)
{
    char line[1024];
    nth_line(out, i, line, sizeof line);
    size_t n = strlen(line);
    if (n && line[n - 1] == ',') line[--n] = '\0';
    snprintf(obj, size, "%s\n", line);
}

/* `list PATTERN`: nothing matching is a header and exit 0 (`[]` with
 * --json); then a held write lock, a plain lock, a semaphore with one of
 * two permits used and a latch at 3 are one aligned line each, sorted by
 * name, with the lock's token and lease, and one JSON object each; names
 * hash to different Cluster masters, so all of them are asked. 69 when
 * Redis cannot be reached. */
static void list_shows_every_kind_held_as_a_table_and_as_json(void **state)
{
    (void)state;
    run r;
    RUN(&r, srv.url, "list", "ls-*");
    expect_status(&r, 0);
    assert_string_equal(r.out, "NAME  KIND  STATE  TOKEN  TTL\n");
    RUN(&r, srv.url, "list", "--json", "ls-*");
    expect_status(&r, 0);
    assert_string_equal(r.out, "[]\n");

    proc lock, write, sem;
    const char *plain_opts[] = {NULL}, *write_opts[] = {"--write", NULL};
    unsigned long long token = hold_with_token(&lock, "ls-a", plain_opts);
    unsigned long long wtoken = hold_with_token(&write, "ls-job", write_opts);
    HOLD(&sem, "ls.sem", "exec sleep 30", "semaphore", "-p", "2", "ls-pool");
    RUN(&r, srv.url, "latch", "ls-go", "--set", "3");
    expect_status(&r, 0);

    RUN(&r, srv.url, "list", "ls-*");
    expect_status(&r, 0);
    char line[5][512], want[64];
    for (int i = 0; i < 5; i++) nth_line(r.out, i, line[i], sizeof line[i]);
    nth_line(r.out, 5, want, sizeof want);
    assert_string_equal(want, "");
    assert_int_equal(column_of(line[0], "NAME"), 0);
    static const char *const names[] = {"ls-a", "ls-go", "ls-job", "ls-pool"};
    static const char *const kinds[] = {"lock", "latch", "rwlock", "psem"};
    for (int i = 0; i < 4; i++) {
        if (strncmp(line[i + 1], names[i], strlen(names[i])) != 0 ||
            column_of(line[i + 1], kinds[i]) != column_of(line[0], "KIND"))
            fail_msg("row %d not aligned under the header:\n%s", i + 1, r.out);
    }
    snprintf(want, sizeof want, "%llu", token);
    assert_int_equal(column_of(line[1], want), column_of(line[0], "TOKEN"));
    snprintf(want, sizeof want, "%llu", wtoken);
    assert_int_equal(column_of(line[3], want), column_of(line[0], "TOKEN"));
    assert_int_equal(column_of(line[2], "count 3"), column_of(line[0], "STATE"));
    assert_int_equal(column_of(line[3], "writer "), column_of(line[0], "STATE"));
    assert_int_equal(column_of(line[4], "1/2 permits used"), column_of(line[0], "STATE"));

    RUN(&r, srv.url, "list", "--json", "ls-*");
    expect_status(&r, 0);
    char obj[1024], v[128];
    nth_line(r.out, 0, want, sizeof want);
    assert_string_equal(want, "[");
    nth_line(r.out, 5, want, sizeof want);
    assert_string_equal(want, "]");
    list_json_object(r.out, 1, obj, sizeof obj);
    json_get(obj, "kind", v, sizeof v);
    assert_string_equal(v, "lock");
    json_get(obj, "token", v, sizeof v);
    assert_int_equal(strtoull(v, NULL, 10), token);
    assert_true(json_num(obj, "ttl_ms") > 0);
    list_json_object(r.out, 2, obj, sizeof obj);
    assert_int_equal(json_num(obj, "count"), 3);
    list_json_object(r.out, 3, obj, sizeof obj);
    json_get(obj, "kind", v, sizeof v);
    assert_string_equal(v, "rwlock");
    json_get(obj, "token", v, sizeof v);
    assert_int_equal(strtoull(v, NULL, 10), wtoken);
    list_json_object(r.out, 4, obj, sizeof obj);
    json_get(obj, "name", v, sizeof v);
    assert_string_equal(v, "ls-pool");
    assert_int_equal(json_num(obj, "permits"), 2);
    assert_int_equal(json_num(obj, "used"), 1);
    assert_int_equal(json_num(obj, "count"), -1);

    RUN(&r, srv.url, "list", "ls-p*");
    expect_status(&r, 0);
    nth_line(r.out, 2, want, sizeof want);
    assert_string_equal(want, "");
    assert_non_null(strstr(r.out, "ls-pool"));

    proc *holders[] = {&lock, &write, &sem};
    for (int i = 0; i < 3; i++) {
        kill(holders[i]->pid, SIGTERM);
        assert_int_equal(wait_dlock(holders[i], 10000), 128 + SIGTERM);
    }
    RUN(&r, srv.url, "delete", "ls-go");
    RUN(&r, srv.url, "list", "bad{");
    expect_status(&r, 64);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", closed_port());
    RUN(&r, url, "list");
    expect_status(&r, 69);
    assert_one_line(r.err);
}

/* `status` of a semaphore: its kind, size, permits used and the longest
 * lease left, exit 0 while one is used; of a latch: its count, shut (exit
 * 0) until counted down to zero, then open (exit 1); as text and JSON. */
static void status_shows_semaphores_and_latches(void **state)
{
    (void)state;
    proc sem;
    HOLD(&sem, "st.sem", "exec sleep 30", "semaphore", "-p", "3", "st-pool");
    run r;
    RUN(&r, srv.url, "status", "st-pool");
    expect_status(&r, 0);
    assert_non_null(strstr(r.out, "kind: psem\n"));
    assert_int_equal(status_field(r.out, "permits"), 3);
    assert_int_equal(status_field(r.out, "permits_used"), 1);
    assert_null(strstr(r.out, "permits_ttl: -\n"));
    RUN(&r, srv.url, "status", "--json", "st-pool");
    expect_status(&r, 0);
    char v[64];
    json_get(r.out, "kind", v, sizeof v);
    assert_string_equal(v, "psem");
    assert_int_equal(json_num(r.out, "permits"), 3);
    assert_int_equal(json_num(r.out, "permits_used"), 1);
    long long ttl = json_num(r.out, "permits_ttl_ms");
    assert_true(ttl > 0 && ttl <= 30000);
    kill(sem.pid, SIGTERM);
    assert_int_equal(wait_dlock(&sem, 10000), 128 + SIGTERM);
    RUN(&r, srv.url, "status", "st-pool");
    expect_status(&r, 1);
    assert_int_equal(status_field(r.out, "permits_used"), 0);
    assert_non_null(strstr(r.out, "permits_ttl: -\n"));

    RUN(&r, srv.url, "latch", "st-go", "--set", "2");
    expect_status(&r, 0);
    RUN(&r, srv.url, "status", "st-go");
    expect_status(&r, 0);
    assert_non_null(strstr(r.out, "kind: latch\n"));
    assert_int_equal(status_field(r.out, "latch_count"), 2);
    assert_non_null(strstr(r.out, "latch: shut\n"));
    RUN(&r, srv.url, "latch", "st-go", "--count-down");
    RUN(&r, srv.url, "latch", "st-go", "--count-down");
    RUN(&r, srv.url, "status", "--json", "st-go");
    expect_status(&r, 1);
    assert_int_equal(json_num(r.out, "latch_count"), 0);
    json_get(r.out, "latch", v, sizeof v);
    assert_string_equal(v, "open");
    RUN(&r, srv.url, "status", "st-none");
    expect_status(&r, 1);
    assert_non_null(strstr(r.out, "kind: -\n"));
    assert_non_null(strstr(r.out, "latch: -\n"));
    RUN(&r, srv.url, "delete", "st-go");
    RUN(&r, srv.url, "delete", "st-pool");
}

/* `semaphore NAME --set-permits N` resizes and runs nothing; -p with
 * another size than the stored one runs nothing either and exits 78
 * naming both numbers and the way to resize; the new size is then the
 * one -p must give. */
static void semaphore_set_permits_resizes_and_another_size_is_refused(void **state)
{
    (void)state;
    char ran[256];
    scratch_file(ran, sizeof ran, "sz.ran");
    unlink(ran);
    run r;
    RUN(&r, srv.url, "semaphore", "sz-pool", "--set-permits", "2");
    expect_status(&r, 0);
    assert_string_equal(r.out, "sz-pool: 2 permits\n");
    RUN(&r, srv.url, "status", "sz-pool");
    assert_int_equal(status_field(r.out, "permits"), 2);
    RUN(&r, srv.url, "semaphore", "-p", "3", "-n", "sz-pool", "--", "touch", ran);
    expect_status(&r, 78);
    assert_one_line(r.err);
    assert_non_null(strstr(r.err, "2 permits, not 3"));
    assert_non_null(strstr(r.err, "dlock semaphore sz-pool --set-permits 3"));
    assert_false(file_exists(ran));
    RUN(&r, srv.url, "semaphore", "--set-permits", "3", "sz-pool");
    expect_status(&r, 0);
    RUN(&r, srv.url, "semaphore", "-p", "3", "-n", "sz-pool", "--", "touch", ran);
    expect_status(&r, 0);
    assert_true(file_exists(ran));
    RUN(&r, srv.url, "semaphore", "sz-pool", "--set-permits");
    expect_status(&r, 64);
    RUN(&r, srv.url, "semaphore", "sz-pool", "--set-permits", "-1");
    expect_status(&r, 64);
    RUN(&r, srv.url, "semaphore", "-p", "3", "--set-permits", "3", "sz-pool");
    expect_status(&r, 64);
    RUN(&r, srv.url, "semaphore", "--set-permits", "3", "sz-pool", "true");
    expect_status(&r, 64);
    RUN(&r, srv.url, "delete", "sz-pool");
    expect_status(&r, 0);
}

/* The fencing token a plain `lock NAME` hands its COMMAND. */
static unsigned long long token_of_a_run(const char *name)
{
    char tokf[256], script[400], buf[64];
    scratch_file_of(tokf, sizeof tokf, name, "tok");
    snprintf(script, sizeof script, "echo $DLOCK_TOKEN > %s", tokf);
    run r;
    RUN(&r, srv.url, "lock", name, "--", "sh", "-c", script);
    expect_status(&r, 0);
    slurp(tokf, buf, sizeof buf);
    return strtoull(buf, NULL, 10);
}

/* `delete NAME`: a latch left shut and a semaphore's size are deleted
 * (after which NAME is free for any kind), nothing is exit 1; while a
 * lock is held, or a latch shut, it is refused with 75 naming what holds
 * it and the holder keeps running; --force deletes anyway (the holder
 * finds its lease gone: 76). A token handed out after is above the one
 * before: delete never makes tokens go back. */
static void delete_refuses_while_held_and_force_breaks_the_hold(void **state)
{
    (void)state;
    run r;
    RUN(&r, srv.url, "delete", "dl-none");
    expect_status(&r, 1);
    assert_string_equal(r.out, "dl-none: nothing to delete\n");
    RUN(&r, srv.url, "latch", "dl-go", "--set", "2");
    RUN(&r, srv.url, "delete", "dl-go");
    expect_status(&r, 75);
    assert_one_line(r.err);
    assert_non_null(strstr(r.err, "latch"));
    RUN(&r, srv.url, "delete", "--force", "dl-go");
    expect_status(&r, 0);
    RUN(&r, srv.url, "lock", "-n", "dl-go", "--", "true");
    expect_status(&r, 0);
    RUN(&r, srv.url, "semaphore", "dl-go", "--set-permits", "4");
    RUN(&r, srv.url, "delete", "dl-go");
    expect_status(&r, 0);
    RUN(&r, srv.url, "status", "dl-go");
    assert_non_null(strstr(r.out, "kind: -\n"));

    unsigned long long before = token_of_a_run("dl-job");
    proc holder;
    HOLD(&holder, "dl.ready", "exec sleep 30", "lock", "-t", "2", "dl-job");
    RUN(&r, srv.url, "delete", "dl-job");
    expect_status(&r, 75);
    assert_one_line(r.err);
    assert_non_null(strstr(r.err, "in use (lock)"));
    assert_int_equal(waitpid(holder.pid, NULL, WNOHANG), 0);
    RUN(&r, srv.url, "delete", "--force", "dl-job");
    expect_status(&r, 0);
    assert_int_equal(wait_dlock(&holder, 10000), 76);
    assert_true(token_of_a_run("dl-job") > before);
    RUN(&r, srv.url, "delete", "dl-job");
    RUN(&r, srv.url, "delete", "bad{name}");
    expect_status(&r, 64);
    RUN(&r, srv.url, "delete");
    expect_status(&r, 64);
    assert_one_line(r.err);
    RUN(&r, srv.url, "delete", "--force", "a", "b");
    expect_status(&r, 64);
    RUN(&r, srv.url, "list", "a*", "b*");
    expect_status(&r, 64);
    assert_one_line(r.err);
}

/* One kind of hold, as `dlock` is asked for it, for the pairs below. */
typedef struct kind_case {
    const char *tag;     /* names the NAME and files */
    const char *args[4]; /* the subcommand and its options before NAME */
    int group;           /* kinds of one group share keys and wait instead */
    const char *held_as; /* what the refusal says of a NAME held so */
} kind_case;

static const kind_case kind_cases[] = {
    {"plain", {"lock"}, 0, "is held as a lock"},
    {"fair", {"lock", "--fair"}, 0, "is held as a lock"},
    {"read", {"lock", "--read"}, 1, "is held as a read lock"},
    {"write", {"lock", "-x"}, 1, "is held as a write lock"},
    {"sem", {"semaphore", "-p", "2"}, 2, "in use as a permit-expirable semaphore"},
    {"latch", {"latch"}, 3, "in use as a latch"},
};
#define KIND_CASES (sizeof kind_cases / sizeof kind_cases[0])

/* Try `other` on `name` held as `held` without waiting: refused at once
 * with 65 and one line naming the kind that holds it, COMMAND not run
 * (a latch has no COMMAND: --set must change nothing). */
static void expect_kind_refused(const char *name, const kind_case *held, const kind_case *other)
{
    char ran[256], file[64];
    const char *argv[MAX_ARGS];
    size_t n = 0;
    snprintf(file, sizeof file, "%.30s.%.10s", name, other->tag);
    scratch_file(ran, sizeof ran, file);
    unlink(ran);
    for (size_t i = 0; other->args[i]; i++) argv[n++] = other->args[i];
    if (other->group == 3) {
        argv[n++] = name;
        argv[n++] = "--set";
        argv[n++] = "2";
    } else {
        argv[n++] = "-n";
        argv[n++] = name;
        argv[n++] = "--";
        argv[n++] = "touch";
        argv[n++] = ran;
    }
    argv[n] = NULL;
    run r;
    run_argv(&r, srv.url, NULL, argv);
    if (r.status != 65 || !strstr(r.err, held->held_as) || file_exists(ran)) {
        print_error("%s on a NAME held as %s: exit %d, COMMAND %s\nstderr: %s\n", other->tag, held->tag, r.status,
                    file_exists(ran) ? "ran" : "not run", r.err);
        fail();
    }
    assert_one_line(r.err);
}

/* One NAME, one kind: for every pair of plain, fair, read, write,
 * semaphore and latch that do not share keys, the second on a NAME the
 * first holds is refused at once (exit 65, the kind named, COMMAND not
 * run), and the first holder goes on. */
static void every_pair_of_kinds_on_one_name_is_refused_without_running_command(void **state)
{
    (void)state;
    proc holders[KIND_CASES];
    char names[KIND_CASES][32];
    for (size_t h = 0; h < KIND_CASES; h++) {
        const kind_case *k = &kind_cases[h];
        snprintf(names[h], sizeof names[h], "pair-%s", k->tag);
        if (k->group == 3) {
            run r;
            RUN(&r, srv.url, "latch", names[h], "--set", "2");
            expect_status(&r, 0);
            continue;
        }
        const char *argv[MAX_ARGS];
        size_t n = 0;
        char ready[64];
        for (size_t i = 0; k->args[i]; i++) argv[n++] = k->args[i];
        argv[n++] = names[h];
        argv[n] = NULL;
        snprintf(ready, sizeof ready, "pair.%s", k->tag);
        start_holder(&holders[h], ready, "exec sleep 30", argv);
    }
    long long t0 = th_now_ms();
    for (size_t h = 0; h < KIND_CASES; h++)
        for (size_t o = 0; o < KIND_CASES; o++)
            if (kind_cases[o].group != kind_cases[h].group)
                expect_kind_refused(names[h], &kind_cases[h], &kind_cases[o]);
    print_message("all pairs refused in %lld ms\n", th_now_ms() - t0);
    /* With a wait, COMMAND's guard is forked before the lock is asked
     * for (tools/child.c): it must go without running COMMAND, at once. */
    char ran[256];
    scratch_file(ran, sizeof ran, "pair.waited");
    unlink(ran);
    run r;
    RUN(&r, srv.url, "lock", "-w", "5", "pair-write", "--", "touch", ran);
    expect_status(&r, 65);
    assert_true(r.ms < 3000);
    assert_false(file_exists(ran));
    for (size_t h = 0; h < KIND_CASES; h++) {
        if (kind_cases[h].group == 3) {
            RUN(&r, srv.url, "delete", "--force", names[h]);
            expect_status(&r, 0);
            continue;
        }
        assert_int_equal(waitpid(holders[h].pid, NULL, WNOHANG), 0);
        kill(holders[h].pid, SIGTERM);
        assert_int_equal(wait_dlock(&holders[h], 10000), 128 + SIGTERM);
    }
}

/* `latch --await` started before the latch is set waits for the set and
 * then for the last count-down: with --set 2 it is still waiting after
 * the first --count-down, and exits 0 soon after the second. */
static void latch_await_before_the_set_waits_for_the_last_count_down(void **state)
{
    (void)state;
    proc waiter;
    START(&waiter, srv.url, "latch", "lr-go", "--await", "-w", "10");
    usleep(300000);
    assert_int_equal(waitpid(waiter.pid, NULL, WNOHANG), 0);
    run r;
    RUN(&r, srv.url, "latch", "lr-go", "--set", "2");
    expect_status(&r, 0);
    usleep(200000);
    assert_int_equal(waitpid(waiter.pid, NULL, WNOHANG), 0);
    RUN(&r, srv.url, "latch", "lr-go", "--count-down");
    assert_string_equal(r.out, "1\n");
    usleep(200000);
    assert_int_equal(waitpid(waiter.pid, NULL, WNOHANG), 0);
    RUN(&r, srv.url, "latch", "lr-go", "--count-down");
    assert_string_equal(r.out, "0\n");
    long long t0 = th_now_ms();
    assert_int_equal(wait_dlock(&waiter, 10000), 0);
    assert_true(th_now_ms() - t0 < 5000);
    RUN(&r, srv.url, "delete", "lr-go");
}

/* ------------------------------------------------------------------------ */
/* dlock rate                                                                */
/* ------------------------------------------------------------------------ */

/* Lines in a scratch file: how many times COMMAND ran. */
static int lines_of(const char *path)
{
    char buf[OUT_MAX];
    int n = 0;
    slurp(path, buf, sizeof buf);
    for (const char *p = buf; *p; p++) n += *p == '\n';
    return n;
}

/* A burst of BURST runs of COMMAND, its exit status dlock's; then, with
 * -n, 75 without running it and without a word (unless -v), or -E N. The
 * rate is per hour, so no permit comes back while the test runs. */
static void rate_runs_a_burst_then_exits_75_silently(void **state)
{
    (void)state;
    char runs[256], body[400];
    scratch_file(runs, sizeof runs, "rate-burst.runs");
    unlink(runs);
    snprintf(body, sizeof body, "echo run >> %s; exit 7", runs);
    run r;
    for (int i = 0; i < 3; i++) {
        RUN(&r, srv.url, "rate", "-r", "1/h", "-b", "3", "-n", "rt-burst", "--", "sh", "-c", body);
        expect_status(&r, 7);
    }
    assert_int_equal(lines_of(runs), 3);
    RUN(&r, srv.url, "rate", "-r", "1/h", "-b", "3", "-n", "rt-burst", "--", "sh", "-c", body);
    expect_status(&r, 75);
    assert_string_equal(r.err, "");
    assert_string_equal(r.out, "");
    RUN(&r, srv.url, "rate", "-r", "1/h", "-b", "3", "-n", "-v", "rt-burst", "sh", "-c", body);
    expect_status(&r, 75);
    assert_one_line(r.err);
    assert_non_null(strstr(r.err, "rt-burst"));
    RUN(&r, srv.url, "rate", "-r", "1/h", "-b", "3", "-n", "-E", "9", "rt-burst", "sh", "-c", body);
    expect_status(&r, 9);
    /* Without COMMAND: the permit alone, exit 0 or 75, as in a shell loop. */
    RUN(&r, srv.url, "rate", "-r", "1/h", "-b", "1", "-n", "rt-burst-bare");
    expect_status(&r, 0);
    assert_string_equal(r.out, "");
    RUN(&r, srv.url, "rate", "-r", "1/h", "-b", "1", "-n", "rt-burst-bare");
    expect_status(&r, 75);
    assert_int_equal(lines_of(runs), 3);
}

/* -w waits until the next permit is due and then runs COMMAND: one permit
 * every 3 s, so the second run cannot end before 3 s after the first one
 * began (the grant is in between), whatever the load; a -w shorter than
 * that gives up with 75. */
static void rate_wait_runs_command_once_the_permit_is_due(void **state)
{
    (void)state;
    run r;
    long long t0 = th_now_ms();
    RUN(&r, srv.url, "rate", "-r", "1/3s", "-b", "1", "rt-wait", "true");
    expect_status(&r, 0);
    RUN(&r, srv.url, "rate", "-r", "1/3s", "-b", "1", "-w", "100ms", "rt-wait", "true");
    expect_status(&r, 75);
    RUN(&r, srv.url, "rate", "-r", "1/3s", "-b", "1", "-w", "15", "rt-wait", "sh", "-c", "exit 3");
    expect_status(&r, 3);
    long long ended = th_now_ms();
    if (ended - t0 < 2900 || r.ms > 15000) {
        print_error("second permit after %lld ms from the first run's start (run took %lld ms)\n", ended - t0, r.ms);
        fail();
    }
}

/* --status as text and as JSON: permits left, when the next is due, when
 * the limit is full again, its settings; a subject's bucket apart; a
 * limit not set exits 1. */
static void rate_status_shows_what_is_left_as_text_and_json(void **state)
{
    (void)state;
    run r;
    for (int i = 0; i < 2; i++) {
        RUN(&r, srv.url, "rate", "-r", "5/m", "-n", "rt-status");
        expect_status(&r, 0);
    }
    RUN(&r, srv.url, "rate", "-r", "5/m", "-n", "--subject", "alice", "rt-status");
    expect_status(&r, 0);
    RUN(&r, srv.url, "rate", "rt-status", "--status");
    expect_status(&r, 0);
    assert_int_equal(status_field(r.out, "rate"), 5);
    assert_int_equal(status_field(r.out, "interval_ms"), 60000);
    assert_int_equal(status_field(r.out, "burst"), 5);
    assert_int_equal(status_field(r.out, "remaining"), 3);
    assert_int_equal(status_field(r.out, "next_permit_ms"), 0);
    long long full = status_field(r.out, "full_in_ms");
    assert_true(full > 0 && full <= 24000); /* two permits of 12 s each */
    assert_non_null(strstr(r.out, "limit: 5 per 1m00s, burst 5\n"));
    assert_non_null(strstr(r.out, "next_permit: now\n"));

    RUN(&r, srv.url, "rate", "rt-status", "--status", "--json");
    expect_status(&r, 0);
    char v[64];
    json_get(r.out, "name", v, sizeof v);
    assert_string_equal(v, "rt-status");
    json_get(r.out, "set", v, sizeof v);
    assert_string_equal(v, "true");
    assert_int_equal(json_num(r.out, "rate"), 5);
    assert_int_equal(json_num(r.out, "interval_ms"), 60000);
    assert_int_equal(json_num(r.out, "burst"), 5);
    assert_int_equal(json_num(r.out, "remaining"), 3);
    assert_int_equal(json_num(r.out, "next_permit_ms"), 0);
    assert_true(json_num(r.out, "full_in_ms") > 0 && json_num(r.out, "full_in_ms") <= 24000);

    RUN(&r, srv.url, "rate", "rt-status", "--status", "--json", "--subject", "alice");
    expect_status(&r, 0);
    json_get(r.out, "subject", v, sizeof v);
    assert_string_equal(v, "alice");
    assert_int_equal(json_num(r.out, "remaining"), 4);

    /* Empty the bucket: the next permit is due in about 12 s. */
    for (int i = 0; i < 3; i++) RUN(&r, srv.url, "rate", "-r", "5/m", "-n", "rt-status");
    RUN(&r, srv.url, "rate", "rt-status", "--status");
    assert_int_equal(status_field(r.out, "remaining"), 0);
    long long next = status_field(r.out, "next_permit_ms");
    assert_true(next > 0 && next <= 12000);

    RUN(&r, srv.url, "rate", "rt-status-none", "--status");
    expect_status(&r, 1);
    assert_non_null(strstr(r.out, "limit: -\n"));
    RUN(&r, srv.url, "rate", "rt-status-none", "--status", "--json");
    expect_status(&r, 1);
    json_get(r.out, "set", v, sizeof v);
    assert_string_equal(v, "false");
    assert_int_equal(json_num(r.out, "remaining"), -1);
    /* A look stores nothing: the limit is still not set. */
    RUN(&r, srv.url, "rate", "rt-status-none", "--status");
    expect_status(&r, 1);
}

/* Settings other than those stored: 78, one line naming both and the
 * --change way out, COMMAND not run; --change replaces them. */
static void rate_of_other_settings_exits_78_until_changed(void **state)
{
    (void)state;
    char ran[256], body[400];
    scratch_file(ran, sizeof ran, "rate-change.ran");
    unlink(ran);
    snprintf(body, sizeof body, "touch %s", ran);
    run r;
    RUN(&r, srv.url, "rate", "-r", "5/m", "rt-change");
    expect_status(&r, 0);
    RUN(&r, srv.url, "rate", "-r", "6/m", "rt-change", "sh", "-c", body);
    expect_status(&r, 78);
    assert_one_line(r.err);
    assert_non_null(strstr(r.err, "5 per 1m00s, burst 5"));
    assert_non_null(strstr(r.err, "6 per 1m00s, burst 6"));
    assert_non_null(strstr(r.err, "--change"));
    assert_false(file_exists(ran));
    RUN(&r, srv.url, "rate", "-r", "5/m", "-b", "2", "rt-change");
    expect_status(&r, 78);
    RUN(&r, srv.url, "rate", "-r", "6/m", "--change", "rt-change", "sh", "-c", body);
    expect_status(&r, 0);
    assert_true(file_exists(ran));
    RUN(&r, srv.url, "rate", "rt-change", "--status");
    assert_int_equal(status_field(r.out, "rate"), 6);
}

/* RATE[/UNIT]: a bare RATE is per second, UNIT a duration with its 1
 * optional; what is stored says so. */
static void rate_without_unit_is_per_second(void **state)
{
    (void)state;
    static const struct {
        const char *arg;
        long rate, interval_ms;
    } forms[] = {
        {"7", 7, 1000},      {"10/s", 10, 1000},        {"100/m", 100, 60000},
        {"5/1.5s", 5, 1500}, {"3600/h", 3600, 3600000}, {"20/500ms", 20, 500},
        {"3/2", 3, 2000},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "rt-unit%zu", i);
        run r;
        RUN(&r, srv.url, "rate", "-r", forms[i].arg, "-n", name);
        expect_status(&r, 0);
        RUN(&r, srv.url, "rate", name, "--status");
        if (status_field(r.out, "rate") != forms[i].rate ||
            status_field(r.out, "interval_ms") != forms[i].interval_ms ||
            status_field(r.out, "burst") != forms[i].rate) {
            print_error("-r %s: stored as\n%s\n", forms[i].arg, r.out);
            fail();
        }
    }
}

/* A bad RATE[/UNIT], burst or subject is a usage error (64, one line
 * saying what is expected), even with Redis down. */
static void bad_rate_is_a_usage_error_naming_the_form(void **state)
{
    (void)state;
    static const char *const bad[] = {"10/x", "0", "abc", "10/", "/s", "10/0s", "-5", "10/-1s", "5.5/s", "1/30d", ""};
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", closed_port());
    run r;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        RUN(&r, url, "rate", "-r", bad[i], "rt-bad", "true");
        if (r.status != 64 || !strstr(r.err, "expected RATE[/UNIT]")) {
            print_error("-r '%s': exit %d, stderr %s\n", bad[i], r.status, r.err);
            fail();
        }
        assert_one_line(r.err);
    }
    RUN(&r, url, "rate", "rt-bad", "true");
    expect_status(&r, 64);
    assert_non_null(strstr(r.err, "-r RATE[/UNIT] is required"));
    RUN(&r, url, "rate", "-r", "5", "-b", "0", "rt-bad");
    expect_status(&r, 64);
    assert_one_line(r.err);
    RUN(&r, url, "rate", "-r", "1/h", "-b", "2000000", "rt-bad");
    expect_status(&r, 64);
    assert_non_null(strstr(r.err, "burst"));
    RUN(&r, url, "rate", "-r", "5", "rt-bad", "--status");
    expect_status(&r, 64);
    RUN(&r, url, "rate", "-r", "5", "--json", "rt-bad");
    expect_status(&r, 64);
}

/* -c 'SHELL COMMAND', before NAME or after it as in flock(1): its exit
 * status is dlock's, and it gets DLOCK_NAME. */
static void rate_runs_a_shell_command_with_c(void **state)
{
    (void)state;
    run r;
    RUN(&r, srv.url, "rate", "-r", "5/m", "-c", "echo \"$DLOCK_NAME\"; exit 4", "rt-shell");
    expect_status(&r, 4);
    assert_string_equal(r.out, "rt-shell\n");
    RUN(&r, srv.url, "rate", "-r", "5/m", "rt-shell", "-c", "echo after; exit 5");
    expect_status(&r, 5);
    assert_string_equal(r.out, "after\n");
    RUN(&r, srv.url, "rate", "-r", "5/m", "rt-shell", "-c", "true", "extra");
    expect_status(&r, 64);
    RUN(&r, srv.url, "rate", "-r", "5/m", "rt-shell", "--", "/nonexistent/command");
    expect_status(&r, 127);
}

/* `dlock rate --help` and --help tell of it. */
static void rate_prints_its_help(void **state)
{
    (void)state;
    run r;
    RUN(&r, srv.url, "rate", "--help");
    expect_status(&r, 0);
    assert_non_null(strstr(r.out, "usage: dlock [-u URL] rate -r RATE[/UNIT]"));
    assert_non_null(strstr(r.out, "--change"));
    assert_non_null(strstr(r.out, "--timeout DURATION"));
    RUN(&r, srv.url, "--help");
    assert_non_null(strstr(r.out, "rate NAME --status"));
}

/* ------------------------------------------------------------------------ */

static int setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    snprintf(scratch, sizeof scratch, "/tmp/dlock-cli-XXXXXX");
    if (!mkdtemp(scratch)) return -1;
    if (access(th_bin("dlock"), X_OK) != 0) {
        fprintf(stderr, "test_cli: %s is not built\n", th_bin("dlock"));
        return -1;
    }
    return th_target_start(&srv, NULL);
}

static int teardown(void **state)
{
    (void)state;
    th_target_stop(&srv);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (system(cmd) != 0) { /* best effort */
    }
    th_redis_stop_all(); /* and any server a failed test left running */
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(help_and_version_need_no_server),
        cmocka_unit_test(every_usage_error_exits_64_with_one_line),
        cmocka_unit_test(command_exit_status_is_passed_through),
        cmocka_unit_test(command_gets_its_name_and_rising_tokens),
        cmocka_unit_test(concurrent_runs_of_one_name_never_overlap),
        cmocka_unit_test(busy_lock_exits_75_after_the_wait_and_signals_reach_the_holder),
        cmocka_unit_test(lock_is_renewed_while_a_long_command_runs),
        cmocka_unit_test(lost_lease_terminates_command_and_exits_76),
        cmocka_unit_test(loss_found_at_release_exits_76),
        cmocka_unit_test(sigterm_and_sigint_are_passed_to_command),
        cmocka_unit_test(command_inherits_no_redis_socket),
        cmocka_unit_test(unreachable_server_exits_69_with_one_line),
        cmocka_unit_test(refused_password_exits_69),
        cmocka_unit_test(password_from_environment_or_file_replaces_the_urls),
        cmocka_unit_test(password_from_environment_reaches_every_redlock_master),
        cmocka_unit_test(password_file_open_to_others_is_a_usage_error),
        cmocka_unit_test(id_prints_distinct_ids_one_per_line),
        cmocka_unit_test(status_shows_the_holder_and_force_unlock_breaks_it),
        cmocka_unit_test(status_shows_read_and_write_holders_and_unlock_breaks_them),
        cmocka_unit_test(bad_name_is_a_usage_error_even_when_redis_is_down),
        cmocka_unit_test(readers_share_writers_exclude_and_fair_locks_give_tokens),
        cmocka_unit_test(semaphore_admits_permits_holders_and_a_killed_ones_permit_returns),
        cmocka_unit_test(latch_sets_once_and_releases_awaiters_at_zero),
        cmocka_unit_test(redlock_over_three_urls_holds_with_a_majority_only),
        cmocka_unit_test(cut_off_holder_stops_command_before_the_lease_ends),
        cmocka_unit_test(command_is_not_started_on_a_lease_no_longer_trusted),
        cmocka_unit_test(killed_dlock_takes_command_and_its_group_down),
        cmocka_unit_test(what_command_left_running_stops_before_the_next_holder_starts),
        cmocka_unit_test(command_left_running_is_killed_before_the_release_not_after),
        cmocka_unit_test(a_guard_killed_alone_takes_command_and_its_group_along),
        cmocka_unit_test(a_dlock_killed_while_it_waits_takes_its_guard_along),
        cmocka_unit_test(every_subcommand_prints_its_help),
        cmocka_unit_test(lock_takes_flock_forms_and_durations_with_units),
        cmocka_unit_test(bare_duration_is_seconds_as_in_flock),
        cmocka_unit_test(busy_lock_is_silent_unless_verbose),
        cmocka_unit_test(wait_is_a_deadline_when_redis_stops_answering),
        cmocka_unit_test(retry_connect_waits_through_an_outage),
        cmocka_unit_test(lock_without_command_holds_until_told_to_stop),
        cmocka_unit_test(long_names_misplaced_options_and_other_servers_are_explained),
        cmocka_unit_test(busy_lock_exits_with_the_conflict_exit_code),
        cmocka_unit_test(timeout_gives_up_on_a_server_that_never_answers),
        cmocka_unit_test(status_json_names_the_holders_host_pid_command_and_token),
        cmocka_unit_test(status_escapes_the_command_and_shows_only_the_current_holds_record),
        cmocka_unit_test(id_count_tells_how_many_ids_a_day_handed_out),
        cmocka_unit_test(list_shows_every_kind_held_as_a_table_and_as_json),
        cmocka_unit_test(status_shows_semaphores_and_latches),
        cmocka_unit_test(semaphore_set_permits_resizes_and_another_size_is_refused),
        cmocka_unit_test(delete_refuses_while_held_and_force_breaks_the_hold),
        cmocka_unit_test(every_pair_of_kinds_on_one_name_is_refused_without_running_command),
        cmocka_unit_test(latch_await_before_the_set_waits_for_the_last_count_down),
        cmocka_unit_test(rate_runs_a_burst_then_exits_75_silently),
        cmocka_unit_test(rate_wait_runs_command_once_the_permit_is_due),
        cmocka_unit_test(rate_status_shows_what_is_left_as_text_and_json),
        cmocka_unit_test(rate_of_other_settings_exits_78_until_changed),
        cmocka_unit_test(rate_without_unit_is_per_second),
        cmocka_unit_test(bad_rate_is_a_usage_error_naming_the_form),
        cmocka_unit_test(rate_runs_a_shell_command_with_c),
        cmocka_unit_test(rate_prints_its_help),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
