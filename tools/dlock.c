/*
 * dlock -- a distributed flock(1) on Redis.
 *
 *   dlock [-u URL] lock [--fair|--read|--write] [-t TTL_MS] [-w WAIT_MS] NAME -- COMMAND [ARG...]
 *   dlock -u URL1 -u URL2 -u URL3 ... lock [-t TTL_MS] [-w WAIT_MS] NAME -- COMMAND [ARG...]
 *   dlock [-u URL] semaphore -p PERMITS [-t TTL_MS] [-w WAIT_MS] NAME -- COMMAND [ARG...]
 *   dlock [-u URL] latch NAME --set N | --count-down | --await [-w WAIT_MS]
 *   dlock [-u URL] id [-n COUNT] PREFIX
 *   dlock [-u URL] status NAME
 *   dlock [-u URL] unlock --force NAME
 *   dlock --help | --version
 *
 * Every form takes --password-file FILE before the subcommand, as it
 * takes -u. The interesting part is `lock`: it takes the lock with a watchdog lease,
 * runs COMMAND as a child and waits for one of three things with a single
 * poll() on a self-pipe: the child ended (SIGCHLD), a signal to pass on
 * (SIGINT, SIGTERM, ...), or the library's watchdog reporting the lease
 * lost. The signal handlers and the loss callback only write one byte to
 * the pipe, so everything else happens in plain code on the main thread.
 *
 * Exit statuses follow sysexits(3) where one fits, see docs/dlock.1.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "dlock.h"
#include "pwfile.h"

extern char **environ;

/* Exit statuses (sysexits.h values, spelled out so the man page and the
 * code can be checked against each other at a glance). */
#define EXIT_NOT_HELD 1    /* status: lock free; unlock --force: nothing held */
#define EXIT_USAGE 64      /* EX_USAGE: bad arguments or malformed URL */
#define EXIT_UNAVAILABLE 69 /* EX_UNAVAILABLE: Redis unreachable or AUTH refused */
#define EXIT_SOFTWARE 70   /* EX_SOFTWARE: any other internal error */
#define EXIT_BUSY 75       /* EX_TEMPFAIL: lock not acquired within WAIT */
#define EXIT_LOST 76       /* the lease was lost while COMMAND ran */
#define EXIT_NOEXEC 127    /* COMMAND could not be executed, as in sh(1) */

#define DEFAULT_URL "redis://127.0.0.1:6379"
#define DEFAULT_TTL_MS 30000L
/* The library's watchdog refuses leases under 30 ms: a third of that is
 * already close to one round trip on a busy host. */
#define MIN_TTL_MS 30L
#define MAX_MS 2147483647L
#define MAX_ID_COUNT 1000000L
#define MAX_URLS 32 /* -u given more than once: RedLock masters */

/* Byte written to the self-pipe by the loss callback. Signal numbers are
 * written as themselves. */
#define PIPE_LOST 0
/* The library declares a hold lost a margin before its lease could end
 * (dlock_options.safety_margin_pct, --safety-margin): COMMAND gets SIGTERM
 * then, and its whole process group SIGKILL when that margin is over, so
 * that nothing runs under the lock once the server may hand it on. */
#define DEFAULT_MARGIN_PCT 10

#define USAGE_LOCK                                                                                \
    "dlock [-u URL]... lock [--fair|--read|--write] [-t TTL_MS] [-w WAIT_MS] [--fence-floor TOKEN] " \
    "[--safety-margin PCT] NAME -- COMMAND [ARG...]"
#define USAGE_SEM \
    "dlock [-u URL] semaphore -p PERMITS [-t TTL_MS] [-w WAIT_MS] [--safety-margin PCT] NAME -- COMMAND [ARG...]"
#define USAGE_LATCH "dlock [-u URL] latch NAME --set N | --count-down | --await [-w WAIT_MS]"
#define USAGE_ID "dlock [-u URL] id [-n COUNT] PREFIX"
#define USAGE_STATUS "dlock [-u URL] status NAME"
#define USAGE_UNLOCK "dlock [-u URL] unlock --force NAME"
#define USAGE_MISC "dlock --help | --version"

/* The signals dlock passes on to COMMAND. */
static const int forwarded_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
#define N_FORWARDED (sizeof forwarded_signals / sizeof forwarded_signals[0])

/* State shared with the signal handlers and the watchdog thread. Only
 * the write end of the pipe and the lost flag are touched from there. */
static int wake_pipe[2] = {-1, -1};
static atomic_int lease_lost;
/* Main thread only: the loss was already reported on stderr. */
static int lost_reported;

/* The password from --password-file or DLOCK_PASSWORD, or NULL: given to
 * every client in place of the URLs' own (see open_client). */
static char *password;

/* File descriptors open when dlock started; see mark_library_fds(). */
#define FD_TRACK_MAX 1024
static unsigned char inherited_fd[FD_TRACK_MAX / 8];

/* ------------------------------------------------------------------------ */
/* Messages and small helpers                                                */
/* ------------------------------------------------------------------------ */

/* Write `s` with control characters and backslashes escaped (\n, \t,
 * \xNN, \\): a NAME, COMMAND or server message holding a newline or an
 * escape sequence must not break a one-line message or the terminal. */
static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\\') fputs("\\\\", f);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
}

/* One message line on stderr: "dlock: " + the message, escaped, + `tail`
 * (not escaped: our own text). */
static void vmessage(const char *tail, const char *fmt, va_list ap)
{
    char *msg = NULL;
    fputs("dlock: ", stderr);
    if (vasprintf(&msg, fmt, ap) >= 0) {
        put_escaped(stderr, msg);
        free(msg);
    } else {
        fputs("(out of memory formatting a message)", stderr);
    }
    if (tail) fputs(tail, stderr);
    fputc('\n', stderr);
}

/* Every error is one line on stderr prefixed with the program name, so that
 * cron mail and logs show what failed without a second line of context. */
static void errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(NULL, fmt, ap);
    va_end(ap);
}

/* A usage error names the problem and, on the same line, the synopsis of
 * the subcommand, so the fix is on screen. Returns the exit status. */
static int usage_error(const char *synopsis, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const char *synopsis, const char *fmt, ...)
{
    char tail[256];
    snprintf(tail, sizeof tail, "; usage: %s", synopsis);
    va_list ap;
    va_start(ap, fmt);
    vmessage(tail, fmt, ap);
    va_end(ap);
    return EXIT_USAGE;
}

/* A usage error not tied to one subcommand: the whole synopsis would be
 * seven lines, so point at --help instead. */
static int general_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int general_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("; see 'dlock --help'", fmt, ap);
    va_end(ap);
    return EXIT_USAGE;
}

/* Refuse a bad NAME (or ID prefix) before connecting, so that a typo is a
 * usage error (64) even when Redis is down, never a connection error. */
static int check_name(const char *synopsis, const char *name, int is_prefix)
{
    if ((is_prefix ? dlock_check_id_prefix(name) : dlock_check_name(name)) == DLOCK_OK) return 0;
    return usage_error(synopsis, "bad %s '%s': %s", is_prefix ? "PREFIX" : "NAME", name, dlock_last_error());
}

/* The synopsis of every subcommand: the start of --help, and what a usage
 * error not tied to one subcommand shows on stderr. */
static void print_synopsis(FILE *f)
{
    fputs("usage: " USAGE_LOCK "\n"
          "       " USAGE_SEM "\n"
          "       " USAGE_LATCH "\n"
          "       " USAGE_ID "\n"
          "       " USAGE_STATUS "\n"
          "       " USAGE_UNLOCK "\n"
          "       " USAGE_MISC "\n",
          f);
}

/* --help: the synopsis and one screen of reminders; dlock(1) has the rest. */
static void print_help(void)
{
    print_synopsis(stdout);
    fputs("\n"
          "Run COMMAND while holding the Redis lock NAME (a distributed flock),\n"
          "make global IDs, or inspect and break locks.\n"
          "\n"
          "  -u URL      redis://[[user]:password@]host[:port][/db] or\n"
          "              unix:///path?db=N  (default: $DLOCK_URL, else " DEFAULT_URL ")\n"
          "              given 3 or more times: RedLock over those independent masters\n"
          "              (twice is refused: a majority of two masters is both)\n"
          "  --password-file FILE  Redis password: FILE's first line; FILE must be\n"
          "              mode 0600 or 0400 (default: $DLOCK_PASSWORD); replaces the\n"
          "              password of every URL\n"
          "  -t TTL_MS   lock lease, renewed every TTL/3 while COMMAND runs (default 30000)\n"
          "  -w WAIT_MS  give up after WAIT_MS (default: wait forever; 0 tries once)\n"
          "  --fair      FIFO lock; --read / --write: shared / exclusive read-write lock\n"
          "  --fence-floor TOKEN  the fencing token handed out is above TOKEN (pass the\n"
          "              highest token your fenced resource has accepted)\n"
          "  --safety-margin PCT  stop trusting the lease PCT % of TTL (+1 % + 2 ms for clock\n"
          "              drift) before it could end, by our clock, when renewals fail:\n"
          "              COMMAND gets SIGTERM then, its process group SIGKILL PCT % of\n"
          "              TTL later (default 10)\n"
          "  -p PERMITS  semaphore size, set by the first user of NAME\n"
          "  -n COUNT    number of IDs to print, 1 to 1000000 (default 1)\n"
          "\n"
          "COMMAND gets DLOCK_NAME and DLOCK_TOKEN (the fencing token) in its environment.\n"
          "\n"
          "Exit status: COMMAND's own (128+N if killed by signal N); 75 lock busy;\n"
          "76 lock lost while COMMAND ran; 69 Redis unreachable or AUTH failed;\n"
          "64 usage error; 127 COMMAND not executable; 70 internal error.\n"
          "See dlock(1).\n",
          stdout);
}

/* The offending option as the user typed it, for an error line: getopt
 * leaves it in optopt for a short option and in argv for a long one. */
static const char *bad_option(char **argv)
{
    static char buf[3];
    if (optopt > 0 && optopt < 128) {
        buf[0] = '-';
        buf[1] = (char)optopt;
        return buf;
    }
    return argv[optind - 1];
}

/* Strict decimal parsing: the whole string must be digits and the value in
 * [lo, hi]. strtol alone would take " 12", "+12", "12abc" and "" quietly,
 * and a lock TTL silently read as 0 is a bug nobody notices until it bites. */
static int parse_number(const char *s, long lo, long hi, long *out)
{
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* A fencing token as text: digits only, at most 2^63-1 (tokens are
 * microseconds since 1970 or counters, far below it). */
static int parse_token(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > (unsigned long long)INT64_MAX) return -1;
    *out = v;
    return 0;
}

/* The sysexits status for a failed library call outside of `lock`'s own
 * special cases: callers of the tool care whether retrying later can help
 * (69) or whether they typed something wrong (64). */
static int exit_for(dlock_status st)
{
    switch (st) {
    case DLOCK_ERR_CONNECT:
    case DLOCK_ERR_AUTH: return EXIT_UNAVAILABLE;
    case DLOCK_ERR_URL:
    case DLOCK_ERR_INVALID: return EXIT_USAGE;
    case DLOCK_ERR_TIMEOUT: return EXIT_BUSY;
    case DLOCK_ERR_LOST: return EXIT_LOST;
    default: return EXIT_SOFTWARE;
    }
}

/* Check the URL and connect. The URL is parsed first so that a typo is a
 * usage error (64) with the parser's explanation, never a connection error.
 * The URL itself is not printed: it may carry a password. The password of
 * --password-file or DLOCK_PASSWORD goes to the library as an option, so
 * it is never written into a URL. */
static int open_client(const char *url, const dlock_options *opts, dlock_client **out)
{
    dlock_url parsed;
    if (dlock_url_parse(url, &parsed) != DLOCK_OK) {
        errorf("bad Redis URL: %s", dlock_last_error());
        return EXIT_USAGE;
    }
    dlock_url_free(&parsed);
    dlock_options o = {0};
    if (opts) o = *opts;
    o.password = password;
    dlock_status st = dlock_client_new(url, &o, out);
    if (st != DLOCK_OK) {
        errorf("cannot connect to Redis: %s", dlock_last_error());
        return exit_for(st);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* lock: signals, the self-pipe and the child                                */
/* ------------------------------------------------------------------------ */

/* Milliseconds on the monotonic clock. */
static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Remember which descriptors the caller handed us (e.g. `3>file`): those
 * are COMMAND's too. Everything opened later belongs to the library. */
static void note_inherited_fds(void)
{
    for (int fd = 3; fd < FD_TRACK_MAX; fd++)
        if (fcntl(fd, F_GETFD) != -1) inherited_fd[fd / 8] |= (unsigned char)(1u << (fd % 8));
}

/* hiredis does not open its sockets close-on-exec. Without this COMMAND
 * would inherit our Redis connections and keep them open after dlock has
 * gone, which a daemonizing COMMAND would do for days. */
static void mark_library_fds(void)
{
    for (int fd = 3; fd < FD_TRACK_MAX; fd++) {
        if (inherited_fd[fd / 8] & (1u << (fd % 8))) continue;
        int flags = fcntl(fd, F_GETFD);
        if (flags != -1 && !(flags & FD_CLOEXEC)) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
}

/* Wake the main loop with one byte. Called from signal handlers and the
 * watchdog thread, so only write(2), and errno is preserved for whatever
 * the interrupted code was doing. A full pipe already guarantees a wakeup,
 * so a failed write loses nothing that matters. */
static void wake(unsigned char what)
{
    int saved = errno;
    ssize_t n = write(wake_pipe[1], &what, 1);
    (void)n;
    errno = saved;
}

/* Signal handler for SIGCHLD and the forwarded signals. It may run on any
 * thread, including the library's, which is why it does nothing but wake
 * the main loop. COMMAND runs in a process group of its own, so a signal
 * the terminal sent to ours did not reach it: every one is passed on. */
static void on_signal(int sig, siginfo_t *info, void *ctx)
{
    (void)info;
    (void)ctx;
    wake((unsigned char)sig);
}

/* The watchdog found our hold gone. This runs on the library's watchdog
 * thread: record it and wake the main loop, which does the killing. */
static void on_lost(dlock_lock *lock, uint64_t token, void *arg)
{
    (void)lock;
    (void)token;
    (void)arg;
    atomic_store(&lease_lost, 1);
    wake(PIPE_LOST);
}

/* Catch SIGCHLD and the forwarded signals. A signal the caller set to be
 * ignored (nohup, `cmd &` in a script) stays ignored, for us and COMMAND,
 * exactly as a shell would leave it. Returns -1 on failure. */
static int install_handlers(sigset_t *defaults)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NOCLDSTOP;
    sigfillset(&sa.sa_mask);
    sigemptyset(defaults);
    if (sigaction(SIGCHLD, &sa, NULL) != 0) return -1;
    sigaddset(defaults, SIGCHLD);
    for (size_t i = 0; i < N_FORWARDED; i++) {
        struct sigaction old;
        if (sigaction(forwarded_signals[i], NULL, &old) != 0) return -1;
        if (old.sa_handler == SIG_IGN) continue;
        if (sigaction(forwarded_signals[i], &sa, NULL) != 0) return -1;
        sigaddset(defaults, forwarded_signals[i]);
    }
    return 0;
}

/* COMMAND's environment: ours without stale DLOCK_NAME, DLOCK_TOKEN and
 * DLOCK_PERMIT (a nested dlock must not leak its values), plus those of
 * this hold; `vars` ends with NULL and its strings belong to the caller. */
static char **child_environment(char *const *vars)
{
    size_t n = 0, extra = 0;
    for (char **e = environ; *e; e++) n++;
    while (vars[extra]) extra++;
    char **env = calloc(n + extra + 1, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "DLOCK_NAME=", 11) != 0 && strncmp(*e, "DLOCK_TOKEN=", 12) != 0 &&
            strncmp(*e, "DLOCK_PERMIT=", 13) != 0)
            env[k++] = *e;
    for (size_t i = 0; i < extra; i++) env[k++] = vars[i];
    env[k] = NULL;
    return env;
}

/* The exit status a shell would report for a wait(2) status. */
static int shell_status(int wstatus)
{
    if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
    return EXIT_SOFTWARE;
}

/* Wait for COMMAND while passing on signals and watching the lease.
 * Returns COMMAND's wait status, or -1 when it could not be executed
 * (c->exec_errno). Every event arrives as a pipe byte or a report from
 * COMMAND's guard, so the loop sleeps in poll() until there is something
 * to do; its only timeout is the end of the lease after a loss. */
static int supervise(child *c, const char *name, long margin_ms, int (*lost)(void *), void *hold)
{
    int64_t kill_at = -1; /* monotonic ms: SIGKILL to the group */
    /* The loss callback comes from the library's watchdog thread, which a
     * loaded machine may run late; the hold's own query is exact by the
     * clock. Asking it every quarter margin, and killing a quarter margin
     * early, keeps SIGKILL before the lease can end either way. */
    long every = margin_ms / 4 < 10 ? 10 : margin_ms / 4;
    int wstatus;
    for (;;) {
        if (child_poll(c, &wstatus)) return wstatus;
        if (kill_at < 0 && !lost_reported && lost(hold)) {
            lost_reported = 1;
            errorf("lost lock '%s' while COMMAND ran; sending it SIGTERM, SIGKILL in %ld ms", name, margin_ms - every);
            child_signal(c, SIGTERM);
            kill_at = mono_ms() + margin_ms - every;
        }
        int timeout = lost_reported ? -1 : (int)every;
        if (kill_at >= 0) {
            int64_t left = kill_at - mono_ms();
            if (left <= 0) {
                child_signal(c, SIGKILL);
                kill_at = -1;
                continue;
            }
            timeout = left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd pfd[2] = {{wake_pipe[0], POLLIN, 0}, {c->report_fd, POLLIN, 0}};
        if (poll(pfd, 2, timeout) < 0 && errno != EINTR) {
            /* Cannot happen in practice; still never leave COMMAND running
             * unsupervised while we release its lock. */
            errorf("waiting for COMMAND: %s", strerror(errno));
            child_signal(c, SIGKILL);
            while (!child_poll(c, &wstatus)) usleep(10000);
            return wstatus;
        }
        unsigned char buf[64];
        ssize_t n;
        while ((n = read(wake_pipe[0], buf, sizeof buf)) > 0) {
            for (ssize_t i = 0; i < n; i++) {
                if (buf[i] == PIPE_LOST) {
                    /* The query above says so too: handled there. */
                } else if (buf[i] != SIGCHLD) {
                    child_signal(c, buf[i]);
                }
            }
        }
    }
}

/* What `lock` and `semaphore` hold while COMMAND runs. */
enum hold_kind { HOLD_PLAIN, HOLD_FAIR, HOLD_READ, HOLD_WRITE, HOLD_REDLOCK, HOLD_PERMIT };

typedef struct hold_args {
    enum hold_kind kind;
    long ttl, wait_ms, permits;
    long margin_pct; /* --safety-margin */
    uint64_t fence_floor; /* --fence-floor: tokens go above it */
    const char *name;
    char **command;
} hold_args;

/* Parse the arguments of `lock` (is_sem 0) or `semaphore` (is_sem 1).
 * Returns 0 or the exit status of a usage error. `argv[0]` is the
 * subcommand. */
static int parse_hold_args(int argc, char **argv, int is_sem, hold_args *h)
{
    static const struct option lock_opts[] = {
        {"fair", no_argument, NULL, 'F'},
        {"read", no_argument, NULL, 'R'},
        {"write", no_argument, NULL, 'W'},
        {"fence-floor", required_argument, NULL, 'f'},
        {"safety-margin", required_argument, NULL, 'm'},
        {NULL, 0, NULL, 0},
    };
    static const struct option sem_opts[] = {
        {"safety-margin", required_argument, NULL, 'm'},
        {NULL, 0, NULL, 0},
    };
    const char *synopsis = is_sem ? USAGE_SEM : USAGE_LOCK;
    int opt, kinds = 0;
    optind = 0; /* 0: full getopt reset in glibc, honouring the '+' again */
    while ((opt = getopt_long(argc, argv, is_sem ? "+:t:w:p:" : "+:t:w:", is_sem ? sem_opts : lock_opts, NULL)) !=
           -1) {
        switch (opt) {
        case 't':
            if (parse_number(optarg, MIN_TTL_MS, DLOCK_LEASE_MAX_MS, &h->ttl) != 0)
                return usage_error(synopsis, "bad TTL '%s': expected milliseconds from %ld to %ld", optarg,
                                   MIN_TTL_MS, DLOCK_LEASE_MAX_MS);
            break;
        case 'w':
            if (parse_number(optarg, 0, MAX_MS, &h->wait_ms) != 0)
                return usage_error(synopsis, "bad WAIT '%s': expected milliseconds from 0 to %ld", optarg,
                                   MAX_MS);
            break;
        case 'p':
            if (parse_number(optarg, 1, MAX_MS, &h->permits) != 0)
                return usage_error(synopsis, "bad PERMITS '%s': expected a number from 1 to %ld", optarg, MAX_MS);
            break;
        case 'f':
            if (parse_token(optarg, &h->fence_floor) != 0)
                return usage_error(synopsis, "bad --fence-floor '%s': expected a fencing token (digits)", optarg);
            break;
        case 'm':
            if (parse_number(optarg, 1, 50, &h->margin_pct) != 0)
                return usage_error(synopsis, "bad --safety-margin '%s': expected a percentage from 1 to 50", optarg);
            break;
        case 'F': h->kind = HOLD_FAIR; kinds++; break;
        case 'R': h->kind = HOLD_READ; kinds++; break;
        case 'W': h->kind = HOLD_WRITE; kinds++; break;
        case ':': return usage_error(synopsis, "option %s needs a value", bad_option(argv));
        default: return usage_error(synopsis, "unknown option '%s'", bad_option(argv));
        }
    }
    if (kinds > 1) return usage_error(synopsis, "lock: --fair, --read and --write exclude each other");
    if (is_sem && h->permits <= 0) return usage_error(synopsis, "semaphore: -p PERMITS is required");
    if (optind >= argc) return usage_error(synopsis, "%s: missing NAME", argv[0]);
    h->name = argv[optind++];
    int bad = check_name(synopsis, h->name, 0);
    if (bad) return bad;
    if (optind >= argc || strcmp(argv[optind], "--") != 0)
        return usage_error(synopsis, "%s: expected '--' between NAME and COMMAND", argv[0]);
    optind++;
    if (optind >= argc) return usage_error(synopsis, "%s: missing COMMAND after '--'", argv[0]);
    h->command = argv + optind;
    return 0;
}

/* Run COMMAND under the hold just acquired and return the status dlock
 * should exit with, before the release is considered. Kept apart from
 * cmd_lock so that every path out of here leads back to one release. */
static int run_command(const char *name, uint64_t token, const char *permit, char **command, long margin_ms,
                       int (*lost)(void *), void *hold)
{
    char *name_var = NULL, *token_var = NULL;
    char **env = NULL;
    int rc = EXIT_SOFTWARE;
    if (asprintf(&name_var, "DLOCK_NAME=%s", name) < 0) name_var = NULL;
    /* A permit has no fencing token; it is named by its id instead. */
    if (permit ? asprintf(&token_var, "DLOCK_PERMIT=%s", permit) < 0
               : asprintf(&token_var, "DLOCK_TOKEN=%llu", (unsigned long long)token) < 0)
        token_var = NULL;
    char *vars[3] = {name_var, token_var, NULL};
    if (!name_var || !token_var || !(env = child_environment(vars))) {
        errorf("out of memory");
        goto out;
    }
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        errorf("pipe: %s", strerror(errno));
        goto out;
    }
    /* Block our signals until the child's pid is known, so that a SIGTERM
     * arriving now is passed on once it can be, rather than lost. */
    sigset_t block, old_mask, defaults;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    for (size_t i = 0; i < N_FORWARDED; i++) sigaddset(&block, forwarded_signals[i]);
    pthread_sigmask(SIG_BLOCK, &block, &old_mask);
    if (install_handlers(&defaults) != 0) {
        errorf("sigaction: %s", strerror(errno));
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
        goto out;
    }
    mark_library_fds();
    child c;
    int err = child_start(&c, command, env, &defaults, &old_mask);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (err != 0) {
        errorf("cannot run '%s': %s", command[0], strerror(err));
        goto out;
    }
    int wstatus = supervise(&c, name, margin_ms, lost, hold);
    /* Whatever COMMAND left in its group dies before the lock is released. */
    child_finish(&c);
    if (wstatus < 0) {
        errorf("cannot run '%s': %s", command[0], strerror(c.exec_errno));
        rc = EXIT_NOEXEC;
    } else {
        rc = shell_status(wstatus);
    }
out:
    free(env);
    free(name_var);
    free(token_var);
    return rc;
}

/* The objects behind one hold, whatever its kind. */
typedef struct holder {
    enum hold_kind kind;
    const char *name;
    size_t n;
    dlock_client *clients[MAX_URLS];
    dlock_lock *lock;
    dlock_rwlock *rw;
    dlock_redlock *rl;
    dlock_psem *psem;
    dlock_permit *permit;
} holder;

/* Loss callbacks of each kind; all end in on_lost's wake-up. */
static void on_rw_lost(dlock_rwlock *rw, dlock_rw_mode mode, uint64_t token, void *arg)
{
    (void)rw;
    (void)mode;
    on_lost(NULL, token, arg);
}

static void on_rl_lost(dlock_redlock *rl, void *arg)
{
    (void)rl;
    on_lost(NULL, 0, arg);
}

static void on_permit_lost(dlock_permit *permit, void *arg)
{
    (void)permit;
    on_lost(NULL, 0, arg);
}

/* Make the handle for the hold and register its loss callback. */
static dlock_status holder_open(holder *h, long permits, uint64_t fence_floor)
{
    dlock_status st;
    switch (h->kind) {
    case HOLD_PLAIN:
    case HOLD_FAIR:
        st = h->kind == HOLD_FAIR ? dlock_lock_new_fair(h->clients[0], h->name, &h->lock)
                                  : dlock_lock_new(h->clients[0], h->name, &h->lock);
        if (st == DLOCK_OK) dlock_lock_on_lost(h->lock, on_lost, NULL);
        if (st == DLOCK_OK) dlock_lock_set_fence_floor(h->lock, fence_floor);
        return st;
    case HOLD_READ:
    case HOLD_WRITE:
        st = dlock_rwlock_new(h->clients[0], h->name, &h->rw);
        if (st == DLOCK_OK) dlock_rwlock_on_lost(h->rw, on_rw_lost, NULL);
        if (st == DLOCK_OK) dlock_rwlock_set_fence_floor(h->rw, fence_floor);
        return st;
    case HOLD_REDLOCK:
        st = dlock_redlock_new(h->clients, h->n, h->name, &h->rl);
        if (st == DLOCK_OK) dlock_redlock_on_lost(h->rl, on_rl_lost, NULL);
        if (st == DLOCK_OK) dlock_redlock_set_fence_floor(h->rl, fence_floor);
        return st;
    case HOLD_PERMIT:
        st = dlock_psem_new(h->clients[0], h->name, &h->psem);
        if (st == DLOCK_OK) st = dlock_psem_set_permits(h->psem, permits, NULL);
        if (st == DLOCK_OK) dlock_psem_on_lost(h->psem, on_permit_lost, NULL);
        return st;
    }
    return DLOCK_ERR_INVALID;
}

/* Take the hold, renewed by the watchdog; *token is its fencing token
 * (0 for a permit, which has none). */
static dlock_status holder_acquire(holder *h, long wait_ms, uint64_t *token)
{
    *token = 0;
    switch (h->kind) {
    case HOLD_PLAIN:
    case HOLD_FAIR: return dlock_lock_acquire(h->lock, wait_ms, DLOCK_LEASE_WATCHDOG, token);
    case HOLD_READ: return dlock_rwlock_acquire(h->rw, DLOCK_READ, wait_ms, DLOCK_LEASE_WATCHDOG, token);
    case HOLD_WRITE: return dlock_rwlock_acquire(h->rw, DLOCK_WRITE, wait_ms, DLOCK_LEASE_WATCHDOG, token);
    case HOLD_REDLOCK: return dlock_redlock_acquire(h->rl, wait_ms, DLOCK_LEASE_WATCHDOG, NULL, token);
    case HOLD_PERMIT: return dlock_psem_acquire(h->psem, wait_ms, DLOCK_LEASE_WATCHDOG, &h->permit);
    }
    return DLOCK_ERR_INVALID;
}

/* Whether the hold is lost: flagged by the watchdog, or over by the
 * clock (the library's queries are exact). */
static int holder_lost(void *arg)
{
    holder *h = arg;
    if (atomic_load(&lease_lost)) return 1;
    switch (h->kind) {
    case HOLD_PLAIN:
    case HOLD_FAIR: return dlock_lock_lost(h->lock);
    case HOLD_READ: return dlock_rwlock_lost(h->rw, DLOCK_READ);
    case HOLD_WRITE: return dlock_rwlock_lost(h->rw, DLOCK_WRITE);
    case HOLD_REDLOCK: return dlock_redlock_lost(h->rl);
    case HOLD_PERMIT: return dlock_permit_lost(h->permit);
    }
    return 0;
}

static dlock_status holder_release(holder *h)
{
    switch (h->kind) {
    case HOLD_PLAIN:
    case HOLD_FAIR: return dlock_lock_release(h->lock);
    case HOLD_READ: return dlock_rwlock_release(h->rw, DLOCK_READ);
    case HOLD_WRITE: return dlock_rwlock_release(h->rw, DLOCK_WRITE);
    case HOLD_REDLOCK: return dlock_redlock_release(h->rl);
    case HOLD_PERMIT: {
        dlock_permit *p = h->permit;
        h->permit = NULL;
        return dlock_psem_release(h->psem, p);
    }
    }
    return DLOCK_ERR_INVALID;
}

static void holder_close(holder *h)
{
    dlock_lock_free(h->lock);
    dlock_rwlock_free(h->rw);
    dlock_redlock_free(h->rl);
    dlock_permit_free(h->permit);
    dlock_psem_free(h->psem);
    for (size_t i = 0; i < h->n; i++) dlock_client_free(h->clients[i]);
}

/* Hold NAME (a lock of some kind, or a semaphore permit) while COMMAND
 * runs; see the file comment for the design. */
static int cmd_hold(const char *const *urls, size_t n_urls, int is_sem, int argc, char **argv)
{
    hold_args a = {.kind = HOLD_PLAIN, .ttl = DEFAULT_TTL_MS, .wait_ms = DLOCK_WAIT_FOREVER,
                   .margin_pct = DEFAULT_MARGIN_PCT};
    int rc = parse_hold_args(argc, argv, is_sem, &a);
    if (rc != 0) return rc;
    const char *synopsis = is_sem ? USAGE_SEM : USAGE_LOCK;
    if (is_sem) a.kind = HOLD_PERMIT;
    if (n_urls > 1) {
        if (is_sem || a.kind != HOLD_PLAIN)
            return usage_error(synopsis, "several -u URLs (RedLock) work only with a plain `lock`");
        if (n_urls < 3)
            return usage_error(synopsis, "RedLock needs at least 3 masters (-u given %zu times)", n_urls);
        a.kind = HOLD_REDLOCK;
    }

    note_inherited_fds();
    holder h = {.kind = a.kind, .name = a.name, .n = n_urls};
    /* RedLock: a master that is down must not stop us, and a stalled one
     * must not eat the lease, so its commands time out at a tenth of it. */
    dlock_options o = {0};
    o.watchdog_lease_ms = a.ttl;
    o.safety_margin_pct = (int)a.margin_pct;
    if (a.kind == HOLD_REDLOCK) {
        long t = a.ttl / 10;
        o.command_timeout_ms = (int)(t < 50 ? 50 : t > 2000 ? 2000 : t);
        o.connect_timeout_ms = o.command_timeout_ms;
        o.offline_ok = 1;
    }
    for (size_t i = 0; i < n_urls; i++) {
        if ((rc = open_client(urls[i], &o, &h.clients[i])) != 0) {
            h.n = i;
            holder_close(&h);
            return rc;
        }
    }
    dlock_status st = holder_open(&h, a.permits, a.fence_floor);
    if (st != DLOCK_OK) {
        errorf("cannot use '%s': %s", a.name, dlock_last_error());
        rc = exit_for(st);
        goto out;
    }
    uint64_t token = 0;
    st = holder_acquire(&h, a.wait_ms, &token);
    if (st == DLOCK_ERR_TIMEOUT) {
        errorf("%s '%s' not acquired within %ld ms: %s", is_sem ? "semaphore" : "lock", a.name, a.wait_ms,
               dlock_last_error());
        rc = EXIT_BUSY;
        goto out;
    } else if (st != DLOCK_OK) {
        errorf("cannot acquire '%s': %s", a.name, dlock_last_error());
        rc = exit_for(st);
        goto out;
    }

    rc = run_command(a.name, token, h.permit ? dlock_permit_id(h.permit) : NULL, a.command,
                     a.ttl * a.margin_pct / 100, holder_lost, &h);

    st = holder_release(&h);
    if (atomic_load(&lease_lost) || lost_reported) {
        /* Reported when it happened, unless COMMAND had just ended. */
        if (!lost_reported) errorf("lost '%s' while COMMAND ran", a.name);
        rc = EXIT_LOST;
    } else if (st == DLOCK_ERR_LOST) {
        errorf("'%s' was lost before COMMAND finished: %s", a.name, dlock_last_error());
        rc = EXIT_LOST;
    } else if (st != DLOCK_OK) {
        /* COMMAND ran under the hold; only the early release failed, and
         * the lease runs out by itself within TTL. */
        errorf("cannot release '%s' (it expires within %ld ms): %s", a.name, a.ttl, dlock_last_error());
    }
out:
    holder_close(&h);
    return rc;
}

/* Coordinate processes through a count-down latch: one sets the count,
 * workers count down, others wait for zero. */
static int cmd_latch(const char *url, int argc, char **argv)
{
    static const struct option opts[] = {
        {"set", required_argument, NULL, 'S'},
        {"count-down", no_argument, NULL, 'D'},
        {"await", no_argument, NULL, 'A'},
        {NULL, 0, NULL, 0},
    };
    long count = 0, wait_ms = DLOCK_WAIT_FOREVER;
    int action = 0, actions = 0, waited = 0, opt;
    optind = 0;
    /* No '+': NAME may come before or after the action. */
    while ((opt = getopt_long(argc, argv, ":w:", opts, NULL)) != -1) {
        switch (opt) {
        case 'S':
            if (parse_number(optarg, 1, MAX_MS, &count) != 0)
                return usage_error(USAGE_LATCH, "bad count '%s': expected a number from 1 to %ld", optarg, MAX_MS);
            action = 'S';
            actions++;
            break;
        case 'D': action = 'D'; actions++; break;
        case 'A': action = 'A'; actions++; break;
        case 'w':
            if (parse_number(optarg, 0, MAX_MS, &wait_ms) != 0)
                return usage_error(USAGE_LATCH, "bad WAIT '%s': expected milliseconds from 0 to %ld", optarg,
                                   MAX_MS);
            waited = 1;
            break;
        case ':': return usage_error(USAGE_LATCH, "option %s needs a value", bad_option(argv));
        default: return usage_error(USAGE_LATCH, "unknown option '%s'", bad_option(argv));
        }
    }
    if (actions != 1) return usage_error(USAGE_LATCH, "latch: give exactly one of --set, --count-down, --await");
    if (waited && action != 'A') return usage_error(USAGE_LATCH, "latch: -w goes with --await");
    if (optind >= argc) return usage_error(USAGE_LATCH, "latch: missing NAME");
    if (optind + 1 < argc) return usage_error(USAGE_LATCH, "latch: too many arguments");
    const char *name = argv[optind];
    int rc = check_name(USAGE_LATCH, name, 0);
    if (rc != 0) return rc;
    dlock_client *client = NULL;
    if ((rc = open_client(url, NULL, &client)) != 0) return rc;
    dlock_latch *latch = NULL;
    dlock_status st = dlock_latch_new(client, name, &latch);
    if (st == DLOCK_OK) {
        if (action == 'S') {
            int was_set = 0;
            st = dlock_latch_set(latch, count, &was_set);
            if (st == DLOCK_OK && !was_set) {
                errorf("latch '%s' is already set", name);
                rc = EXIT_NOT_HELD;
            }
        } else if (action == 'D') {
            long left = 0;
            st = dlock_latch_count_down(latch, &left);
            if (st == DLOCK_OK) printf("%ld\n", left);
        } else {
            st = dlock_latch_await(latch, wait_ms);
            if (st == DLOCK_ERR_TIMEOUT) {
                errorf("latch '%s' did not reach zero within %ld ms", name, wait_ms);
                rc = EXIT_BUSY;
                st = DLOCK_OK;
            }
        }
    }
    if (st != DLOCK_OK) {
        errorf("latch '%s': %s", name, dlock_last_error());
        rc = exit_for(st);
    }
    if (fflush(stdout) != 0 && rc == 0) rc = EXIT_SOFTWARE;
    dlock_latch_free(latch);
    dlock_client_free(client);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* id, status, unlock                                                        */
/* ------------------------------------------------------------------------ */

/* Print COUNT global IDs, one per line, for scripts that need unique keys.
 * One call reserves the whole batch, so any COUNT costs one round trip. */
static int cmd_id(const char *url, int argc, char **argv)
{
    long count = 1;
    int opt;
    optind = 0;
    while ((opt = getopt(argc, argv, "+:n:")) != -1) {
        switch (opt) {
        case 'n':
            if (parse_number(optarg, 1, MAX_ID_COUNT, &count) != 0)
                return usage_error(USAGE_ID, "bad COUNT '%s': expected a number from 1 to %ld", optarg,
                                   MAX_ID_COUNT);
            break;
        case ':': return usage_error(USAGE_ID, "option -%c needs a value", optopt);
        default: return usage_error(USAGE_ID, "unknown option '%s'", bad_option(argv));
        }
    }
    if (optind >= argc) return usage_error(USAGE_ID, "id: missing PREFIX");
    if (optind + 1 < argc) return usage_error(USAGE_ID, "id: too many arguments");
    const char *prefix = argv[optind];
    int bad = check_name(USAGE_ID, prefix, 1);
    if (bad) return bad;

    uint64_t *ids = calloc((size_t)count, sizeof *ids);
    if (!ids) {
        errorf("out of memory");
        return EXIT_SOFTWARE;
    }
    dlock_client *client = NULL;
    int rc = open_client(url, NULL, &client);
    if (rc == 0) {
        dlock_status st = dlock_id_next(client, prefix, ids, (size_t)count);
        if (st != DLOCK_OK) {
            errorf("cannot make IDs for '%s': %s", prefix, dlock_last_error());
            rc = exit_for(st);
        } else {
            for (long i = 0; i < count; i++) printf("%llu\n", (unsigned long long)ids[i]);
            if (fflush(stdout) != 0 || ferror(stdout)) {
                errorf("writing IDs: %s", strerror(errno));
                rc = EXIT_SOFTWARE;
            }
        }
    }
    dlock_client_free(client);
    free(ids);
    return rc;
}

/* Check that a subcommand got exactly one NAME and no options; shared by
 * status and unlock. Returns 0 or a usage exit status. */
static int one_name(const char *synopsis, int argc, char **argv, int first, const char **name)
{
    if (first < argc && argv[first][0] == '-' && argv[first][1] != '\0' && strcmp(argv[first], "--") != 0)
        return usage_error(synopsis, "unknown option '%s'", argv[first]);
    if (first < argc && strcmp(argv[first], "--") == 0) first++;
    if (first >= argc) return usage_error(synopsis, "%s: missing NAME", argv[0]);
    if (first + 1 < argc) return usage_error(synopsis, "%s: too many arguments", argv[0]);
    *name = argv[first];
    return check_name(synopsis, *name, 0);
}

/* Show who holds NAME, for operators and for scripts (`key: value` lines,
 * exit 0 when held, 1 when free). One NAME may be used as a plain or fair
 * lock (`lock`, `lock --fair`) and as a read-write lock (`lock --read`,
 * `--write`): they are different keys, and either kind of holder counts,
 * so both are shown. */
static int cmd_status(const char *url, int argc, char **argv)
{
    const char *name;
    int rc = one_name(USAGE_STATUS, argc, argv, 1, &name);
    if (rc != 0) return rc;
    dlock_client *client = NULL;
    if ((rc = open_client(url, NULL, &client)) != 0) return rc;
    dlock_lock_info info;
    dlock_rwlock_info rw;
    dlock_status st = dlock_lock_inspect(client, name, &info);
    if (st == DLOCK_OK) st = dlock_rwlock_inspect(client, name, &rw);
    if (st != DLOCK_OK) {
        errorf("cannot inspect lock '%s': %s", name, dlock_last_error());
        rc = exit_for(st);
    } else {
        printf("holder: %s\ncount: %ld\nttl_ms: %ld\nlast_token: %llu\n"
               "writer: %s\nreaders: %ld\nrw_ttl_ms: %ld\nrw_last_token: %llu\n",
               info.held ? info.holder : "-", info.held ? info.hold_count : 0L, info.ttl_ms,
               (unsigned long long)info.last_token, rw.writer[0] ? rw.writer : "-", rw.readers, rw.ttl_ms,
               (unsigned long long)rw.last_token);
        rc = info.held || rw.held ? 0 : EXIT_NOT_HELD;
        if (fflush(stdout) != 0) rc = EXIT_SOFTWARE;
    }
    dlock_client_free(client);
    return rc;
}

/* Break a lock whoever holds it. --force is required so that nobody types
 * `dlock unlock NAME` expecting a polite release of their own hold. */
static int cmd_unlock(const char *url, int argc, char **argv)
{
    const char *name;
    if (argc < 2 || strcmp(argv[1], "--force") != 0)
        return usage_error(USAGE_UNLOCK, "unlock: --force is required (this breaks another holder's lock)");
    int rc = one_name(USAGE_UNLOCK, argc, argv, 2, &name);
    if (rc != 0) return rc;
    dlock_client *client = NULL;
    if ((rc = open_client(url, NULL, &client)) != 0) return rc;
    /* Whatever `status` would show as holding NAME: the plain or fair lock
     * and the read-write lock. */
    int lock_held = 0, rw_held = 0;
    dlock_status st = dlock_lock_force_unlock(client, name, &lock_held);
    if (st == DLOCK_OK) st = dlock_rwlock_force_unlock(client, name, &rw_held);
    if (st != DLOCK_OK) {
        errorf("cannot unlock '%s': %s", name, dlock_last_error());
        rc = exit_for(st);
    } else {
        put_escaped(stdout, name);
        fputs(lock_held || rw_held ? ": was held, now unlocked\n" : ": was not held\n", stdout);
        rc = lock_held || rw_held ? 0 : EXIT_NOT_HELD;
        if (fflush(stdout) != 0) rc = EXIT_SOFTWARE;
    }
    dlock_client_free(client);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* main                                                                      */
/* ------------------------------------------------------------------------ */

/* The password of --password-file (`file`, may be NULL), else of
 * DLOCK_PASSWORD, into `password`; DLOCK_PASSWORD leaves the environment
 * COMMAND inherits. A bad file is a usage error, refused before anything
 * else is looked at. */
static int load_password(const char *file)
{
    char err[512];
    if (pwfile_or_env(file, "DLOCK_PASSWORD", &password, err, sizeof err) == 0) return 0;
    errorf("%s", err);
    return EXIT_USAGE;
}

static int run_subcommand(const char *cmd, const char *url, const char *const *urls, size_t n_urls, int argc,
                          char **argv)
{
    if (strcmp(cmd, "lock") == 0) return cmd_hold(urls, n_urls, 0, argc, argv);
    if (strcmp(cmd, "semaphore") == 0) return cmd_hold(urls, n_urls, 1, argc, argv);
    if (n_urls > 1) return general_usage_error("%s: only `lock` takes several -u URLs (RedLock)", cmd);
    if (strcmp(cmd, "latch") == 0) return cmd_latch(url, argc, argv);
    if (strcmp(cmd, "id") == 0) return cmd_id(url, argc, argv);
    if (strcmp(cmd, "status") == 0) return cmd_status(url, argc, argv);
    if (strcmp(cmd, "unlock") == 0) return cmd_unlock(url, argc, argv);
    return general_usage_error("unknown command '%s'", cmd);
}

/* Global options, then hand the rest of argv to the subcommand. Parsing
 * stops at the subcommand ('+'), so its options are never taken as ours. */
int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"password-file", required_argument, NULL, 'P'},
        {NULL, 0, NULL, 0},
    };
    const char *url = getenv("DLOCK_URL");
    if (!url || !*url) url = DEFAULT_URL;
    const char *urls[MAX_URLS];
    size_t n_urls = 0;
    const char *password_file = NULL;

    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "+:u:hV", longopts, NULL)) != -1) {
        switch (opt) {
        case 'u':
            if (n_urls == MAX_URLS) return general_usage_error("too many -u options (at most %d)", MAX_URLS);
            urls[n_urls++] = url = optarg;
            break;
        case 'h': print_help(); return fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE;
        case 'V': printf("dlock %s\n", DLOCK_VERSION); return fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE;
        case 'P': password_file = optarg; break;
        case ':':
            if (optopt == 'P') return general_usage_error("option --password-file needs a value");
            return general_usage_error("option -%c needs a value", optopt);
        default: return general_usage_error("unknown option '%s'", bad_option(argv));
        }
    }
    if (optind >= argc) return general_usage_error("missing command");
    const char *cmd = argv[optind];
    int sub_argc = argc - optind;
    char **sub_argv = argv + optind;
    if (n_urls == 0) urls[n_urls++] = url;
    int rc = load_password(password_file);
    if (rc == 0) rc = run_subcommand(cmd, url, urls, n_urls, sub_argc, sub_argv);
    pwfile_free(password);
    return rc;
}
