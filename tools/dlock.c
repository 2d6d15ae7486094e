/*
 * dlock -- a distributed flock(1) on Redis.
 *
 *   dlock [-u URL] lock [--fair|--read|--write] [-w WAIT] [-n] [-t TTL] [-E N] NAME [--] COMMAND [ARG...]
 *   dlock [-u URL] lock [OPTIONS] NAME -c 'SHELL COMMAND'
 *   dlock -u URL1 -u URL2 -u URL3 ... lock [-t TTL] [-w WAIT] NAME [--] COMMAND [ARG...]
 *   dlock [-u URL] semaphore -p PERMITS [-t TTL] [-w WAIT] NAME [--] COMMAND [ARG...]
 *   dlock [-u URL] latch NAME --set N | --count-down | --await [-w WAIT]
 *   dlock [-u URL] id [-n COUNT] PREFIX | id --count PREFIX [--date YYYY-MM-DD]
 *   dlock [-u URL] status [--json] NAME
 *   dlock [-u URL] unlock --force NAME
 *   dlock --help | --version | dlock SUBCOMMAND --help
 *
 * Every form takes --password-file FILE and --timeout DURATION before the
 * subcommand, as it takes -u (--url). Durations are milliseconds, or carry
 * a unit (500ms, 10s, 2m, 1h). The options follow flock(1) where it has
 * one: -w/--wait, -n/--nonblock, -E/--conflict-exit-code, -c.
 * The interesting part is `lock`: it takes the lock with a watchdog lease,
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
#include "holdinfo.h"
#include "pwfile.h"

extern char **environ;

/* Exit statuses (sysexits.h values, spelled out so the man page and the
 * code can be checked against each other at a glance). */
#define EXIT_NOT_HELD 1    /* status: lock free; unlock --force: nothing held */
#define EXIT_USAGE 64      /* EX_USAGE: bad arguments or malformed URL */
#define EXIT_UNAVAILABLE 69 /* EX_UNAVAILABLE: Redis unreachable or AUTH refused */
#define EXIT_SOFTWARE 70   /* EX_SOFTWARE: any other internal error */
#define EXIT_BUSY 75       /* EX_TEMPFAIL: lock not acquired within WAIT */
#define EXIT_LOST 76       /* the lease was lost before or while COMMAND ran */
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

#define USAGE_LOCK                                                                                   \
    "dlock [-u URL]... lock [--fair|--read|--write] [-w WAIT] [-n] [-t TTL] [-E N] [--fence-floor TOKEN] " \
    "[--safety-margin PCT] NAME {[--] COMMAND [ARG...] | -c 'SHELL COMMAND'}"
#define USAGE_SEM                                                                                    \
    "dlock [-u URL] semaphore -p PERMITS [-w WAIT] [-n] [-t TTL] [-E N] [--safety-margin PCT] NAME " \
    "{[--] COMMAND [ARG...] | -c 'SHELL COMMAND'}"
#define USAGE_LATCH "dlock [-u URL] latch NAME --set N | --count-down | --await [-w WAIT]"
#define USAGE_ID "dlock [-u URL] id [-n COUNT] PREFIX | id --count PREFIX [--date YYYY-MM-DD]"
#define USAGE_STATUS "dlock [-u URL] status [--json] NAME"
#define USAGE_UNLOCK "dlock [-u URL] unlock --force NAME"
#define USAGE_MISC "dlock --help | --version | dlock SUBCOMMAND --help"
/* How a duration is written, for help and usage errors. */
#define DURATION_FORMS "milliseconds, or a number with a unit: 500ms, 10s, 2m, 1h"
#define DURATION_UNITS "a bare number is milliseconds; units: 500ms, 10s, 2m, 1h"
/* -E takes an exit status, which a shell sees modulo 256. */
#define MAX_EXIT_CODE 255

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
/* --timeout: connect and command timeout of every client, 0 for the
 * library's defaults (2 s to connect, 5 s a command). */
static long timeout_ms;

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
    char tail[512];
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

/* The global options, shared by --help and every subcommand's help. */
#define HELP_GLOBAL                                                                                  \
    "Global options (before the subcommand):\n"                                                      \
    "  -u, --url URL   redis://[[user]:password@]host[:port][/db], unix:///path?db=N,\n"             \
    "                  redis-sentinel://..., redis-cluster://...\n"                                   \
    "                  (default: $DLOCK_URL, else " DEFAULT_URL ")\n"                                 \
    "  --password-file FILE  Redis password: FILE's first line; FILE must be mode\n"                \
    "                  0600 or 0400 (default: $DLOCK_PASSWORD)\n"                                     \
    "  --timeout DURATION  connect and command timeout (default 2s and 5s)\n"                        \
    "\n"                                                                                             \
    "DURATION is " DURATION_FORMS ".\n"

/* --help: the synopsis and one screen of reminders; dlock(1) has the rest. */
static void print_help(void)
{
    print_synopsis(stdout);
    fputs("\n"
          "Run COMMAND while holding the Redis lock NAME (a distributed flock),\n"
          "make global IDs, or inspect and break locks. `dlock SUBCOMMAND --help`\n"
          "lists each subcommand's options.\n"
          "\n" HELP_GLOBAL
          "  -u given 3 or more times: `lock` is a RedLock over those independent\n"
          "  masters (twice is refused: a majority of two masters is both).\n"
          "\n"
          "COMMAND gets DLOCK_NAME and DLOCK_TOKEN (the fencing token) in its environment.\n"
          "\n"
          "Exit status: COMMAND's own (128+N if killed by signal N); 75 lock busy\n"
          "(or -E N); 76 lock lost while COMMAND ran; 69 Redis unreachable or AUTH\n"
          "failed; 64 usage error; 127 COMMAND not executable; 70 internal error.\n"
          "See dlock(1).\n",
          stdout);
}

/* The options `lock` and `semaphore` share, in their --help ... */
#define HELP_HOLD_COMMON                                                                             \
    "  -w, --wait DURATION   give up after DURATION, exit 75 (default: wait forever)\n"              \
    "  -n, --nonblock        try once: the same as -w 0\n"                                           \
    "  -t, --ttl DURATION    lease, renewed every third of it while COMMAND runs\n"                  \
    "                        (default 30s)\n"                                                        \
    "  -E, --conflict-exit-code N  exit N (0 to 255) instead of 75 when not acquired\n"              \
    "  -c, --command 'SHELL COMMAND'  run it with /bin/sh -c (also after NAME, as\n"                 \
    "                        in flock(1))\n"                                                         \
    "  --safety-margin PCT   when renewals fail, stop trusting the lease PCT % of TTL\n"             \
    "                        (+1 % + 2 ms) before it could end: COMMAND gets SIGTERM,\n"             \
    "                        its process group SIGKILL PCT % later (default 10)\n"                   \
    "  -h, --help            this text\n"
/* ... and what follows them. */
#define HELP_HOLD_END                                                                                \
    "\n"                                                                                             \
    "Options end at NAME: everything after it is COMMAND and its arguments ('--'\n"                  \
    "before COMMAND is optional). COMMAND gets DLOCK_NAME and DLOCK_TOKEN (a\n"                      \
    "semaphore's: DLOCK_PERMIT). Exit status: COMMAND's; 75 (or -E N) not acquired,\n"              \
    "76 lost while COMMAND ran, 69 Redis unreachable, 64 usage, 127 not executable.\n"

/* `dlock SUBCOMMAND --help`: that subcommand's synopsis and options, for
 * someone who knows which subcommand they want and not its flags. */
static void print_sub_help(const char *cmd)
{
    if (strcmp(cmd, "lock") == 0) {
        fputs("usage: " USAGE_LOCK "\n"
              "\n"
              "Run COMMAND while holding the lock NAME, and exit with its status.\n"
              "\n" HELP_HOLD_COMMON
              "  --fair                FIFO lock: waiters get it in the order they came\n"
              "  --read, --write       shared / exclusive side of a read-write lock\n"
              "  --fence-floor TOKEN   the fencing token handed out is above TOKEN\n" HELP_HOLD_END,
              stdout);
    } else if (strcmp(cmd, "semaphore") == 0) {
        fputs("usage: " USAGE_SEM "\n"
              "\n"
              "Run COMMAND holding one of PERMITS permits of the semaphore NAME.\n"
              "\n"
              "  -p, --permits PERMITS the semaphore's size, set by its first user\n" HELP_HOLD_COMMON
                  HELP_HOLD_END,
              stdout);
    } else if (strcmp(cmd, "latch") == 0) {
        fputs("usage: " USAGE_LATCH "\n"
              "\n"
              "A count-down latch: --set N once, --count-down (prints what is left),\n"
              "--await until it is zero.\n"
              "\n"
              "  -w, --wait DURATION   --await gives up after DURATION, exit 75\n"
              "  -h, --help            this text\n",
              stdout);
    } else if (strcmp(cmd, "id") == 0) {
        fputs("usage: " USAGE_ID "\n"
              "\n"
              "Print global IDs, one per line, or how many a day handed out.\n"
              "\n"
              "  -n COUNT              how many IDs, 1 to 1000000 (default 1)\n"
              "  --count               print how many IDs PREFIX handed out on one UTC day\n"
              "  --date YYYY-MM-DD     that day (default: today, UTC)\n"
              "  -h, --help            this text\n",
              stdout);
    } else if (strcmp(cmd, "status") == 0) {
        fputs("usage: " USAGE_STATUS "\n"
              "\n"
              "Show who holds NAME: key: value lines (exit 0 held, 1 free).\n"
              "\n"
              "  --json                the same as one JSON object\n"
              "  -h, --help            this text\n",
              stdout);
    } else {
        fputs("usage: " USAGE_UNLOCK "\n"
              "\n"
              "Break the lock NAME whoever holds it (exit 0 held, 1 was free).\n"
              "\n"
              "  -h, --help            this text\n",
              stdout);
    }
    fputs("\n" HELP_GLOBAL, stdout);
}

/* Exit status of a help request: 0 unless stdout could not be written. */
static int help_done(void)
{
    return fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE;
}

/* The offending option as the user typed it, for an error line: a long
 * one is in argv (getopt has stepped past it), a short one in optopt
 * (argv may hold several, as in -nq). */
static const char *bad_option(char **argv)
{
    static char buf[64];
    const char *last = optind > 0 ? argv[optind - 1] : "";
    if (strncmp(last, "--", 2) == 0 && last[2]) {
        snprintf(buf, sizeof buf, "%.*s", (int)strcspn(last, "="), last);
        return buf;
    }
    if (optopt > 0 && optopt < 128) {
        buf[0] = '-';
        buf[1] = (char)optopt;
        buf[2] = '\0';
        return buf;
    }
    return last;
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

/*
 * A duration: digits, then nothing (milliseconds, as every duration was
 * before units) or one of the units ms, s, m, h, into milliseconds within
 * [lo, hi]. As strict as parse_number: no sign, space, fraction or other
 * unit, and no overflow when the unit multiplies, so that "10x", "-1s" or
 * "99999999999h" is an error and never some other lease.
 */
static int parse_duration(const char *s, long lo, long hi, long *out)
{
    static const struct {
        const char *unit;
        long ms;
    } units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0) return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) != 0) continue;
        if (v > hi / units[i].ms) return -1;
        v *= units[i].ms;
        if (v < lo) return -1;
        *out = (long)v;
        return 0;
    }
    return -1;
}

/* The option getopt just handled, as typed ("-w" or "--wait"), for an
 * error about its value: the user may have written either. */
static const char *typed_option(char **argv)
{
    static char buf[64];
    /* The value is its own argument, or attached to the option's. */
    const char *opt = argv[optind - 1] == optarg && optind >= 2 ? argv[optind - 2] : argv[optind - 1];
    size_t n = strncmp(opt, "--", 2) == 0 ? strcspn(opt, "=") : 2;
    snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : sizeof buf - 1), opt);
    return buf;
}

/* A duration option's value, or the one-line usage error naming it. */
static int duration_arg(const char *synopsis, char **argv, long lo, long hi, long *out)
{
    if (parse_duration(optarg, lo, hi, out) == 0) return 0;
    return usage_error(synopsis, "bad %s '%s': expected a duration from %ld to %ld ms (%s)", typed_option(argv),
                       optarg, lo, hi, DURATION_UNITS);
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

/* The options every client of ours gets: the caller's `base` (may be
 * NULL), with the password of --password-file or DLOCK_PASSWORD and the
 * timeouts of --timeout. */
static dlock_options client_options(const dlock_options *base)
{
    dlock_options o = {0};
    if (base) o = *base;
    o.password = password;
    if (timeout_ms > 0) o.connect_timeout_ms = o.command_timeout_ms = (int)timeout_ms;
    return o;
}

/* Check the URL and connect. The URL is parsed first so that a typo is a
 * usage error (64) with the parser's explanation, never a connection error.
 * The URL itself is not printed: it may carry a password. The password of
 * --password-file or DLOCK_PASSWORD goes to the library as an option, so
 * it is never written into a URL. --timeout, when given, is both timeouts
 * of every client, RedLock masters' included. */
static int open_client(const char *url, const dlock_options *opts, dlock_client **out)
{
    dlock_url parsed;
    if (dlock_url_parse(url, &parsed) != DLOCK_OK) {
        errorf("bad Redis URL: %s", dlock_last_error());
        return EXIT_USAGE;
    }
    /* Said once, whatever the number of -u: a choice nobody should make
     * by accident. */
    static int warned;
    if (parsed.tls && !parsed.tls_verify && !warned++)
        errorf("warning: TLS certificate verification is off (verify=no): anyone on the path can pose as the server");
    dlock_url_free(&parsed);
    dlock_options o = client_options(opts);
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

/* SIGCHLD and the forwarded signals that dlock was not started with
 * ignored: the ones it catches while COMMAND runs, and COMMAND gets back
 * at their defaults. A signal the caller set to be ignored (nohup, `cmd &`
 * in a script) stays ignored, for us and COMMAND, exactly as a shell
 * would leave it. Returns -1 on failure. */
static int handled_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGCHLD);
    for (size_t i = 0; i < N_FORWARDED; i++) {
        struct sigaction old;
        if (sigaction(forwarded_signals[i], NULL, &old) != 0) return -1;
        if (old.sa_handler != SIG_IGN) sigaddset(set, forwarded_signals[i]);
    }
    return 0;
}

/* Catch the signals of handled_signals(). Not before the lock is held:
 * while dlock waits, ^C and SIGTERM end it as they would any command.
 * Returns -1 on failure. */
static int install_handlers(const sigset_t *set)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NOCLDSTOP;
    sigfillset(&sa.sa_mask);
    for (int s = 1; s < NSIG; s++)
        if (sigismember(set, s) == 1 && sigaction(s, &sa, NULL) != 0) return -1;
    return 0;
}

/* COMMAND's environment: ours without stale DLOCK_NAME, DLOCK_TOKEN and
 * DLOCK_PERMIT (a nested dlock must not leak its values), plus those of
 * this hold known before it is taken (its token comes with child_go());
 * `vars` ends with NULL and its strings belong to the caller. */
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
    long busy_exit;  /* -E: the exit status when not acquired */
    uint64_t fence_floor; /* --fence-floor: tokens go above it */
    const char *name;
    const char *shell_command; /* -c */
    char *shell_argv[4];       /* /bin/sh -c SHELL_COMMAND */
    char **command;
} hold_args;

/* COMMAND from what follows NAME: "[--] COMMAND [ARG...]", or flock(1)'s
 * "-c 'SHELL COMMAND'" right after NAME; nothing else after NAME is read
 * as an option, so COMMAND's own options stay COMMAND's. */
static int parse_command(const char *synopsis, int argc, char **argv, int at, hold_args *h)
{
    const char *sub = argv[0];
    if (at < argc && (strcmp(argv[at], "-c") == 0 || strcmp(argv[at], "--command") == 0)) {
        if (h->shell_command) return usage_error(synopsis, "%s: -c given twice", sub);
        if (at + 2 != argc) return usage_error(synopsis, "%s: %s takes exactly one SHELL COMMAND", sub, argv[at]);
        h->shell_command = argv[at + 1];
        at = argc;
    } else if (at < argc && strcmp(argv[at], "--") == 0) {
        at++;
    }
    if (h->shell_command) {
        if (at < argc) return usage_error(synopsis, "%s: give COMMAND or -c, not both", sub);
        h->shell_argv[0] = "/bin/sh";
        h->shell_argv[1] = "-c";
        h->shell_argv[2] = (char *)h->shell_command;
        h->shell_argv[3] = NULL;
        h->command = h->shell_argv;
        return 0;
    }
    if (at >= argc) return usage_error(synopsis, "%s: missing COMMAND after NAME", sub);
    h->command = argv + at;
    return 0;
}

/* Parse the arguments of `lock` (is_sem 0) or `semaphore` (is_sem 1).
 * Returns 0, the exit status of a usage error, or -1 after printing the
 * subcommand's help. `argv[0]` is the subcommand. */
static int parse_hold_args(int argc, char **argv, int is_sem, hold_args *h)
{
#define HOLD_COMMON_OPTS                                                                    \
    {"wait", required_argument, NULL, 'w'}, {"ttl", required_argument, NULL, 't'},          \
        {"nonblock", no_argument, NULL, 'n'}, {"conflict-exit-code", required_argument, NULL, 'E'}, \
        {"command", required_argument, NULL, 'c'}, {"safety-margin", required_argument, NULL, 'm'}, \
        {"help", no_argument, NULL, 'h'}
    static const struct option lock_opts[] = {
        HOLD_COMMON_OPTS,
        {"fair", no_argument, NULL, 'F'},
        {"read", no_argument, NULL, 'R'},
        {"write", no_argument, NULL, 'W'},
        {"fence-floor", required_argument, NULL, 'f'},
        {NULL, 0, NULL, 0},
    };
    static const struct option sem_opts[] = {
        HOLD_COMMON_OPTS,
        {"permits", required_argument, NULL, 'p'},
        {NULL, 0, NULL, 0},
    };
#undef HOLD_COMMON_OPTS
    const char *synopsis = is_sem ? USAGE_SEM : USAGE_LOCK;
    int opt, kinds = 0;
    optind = 0; /* 0: full getopt reset in glibc, honouring the '+' again */
    while ((opt = getopt_long(argc, argv, is_sem ? "+:t:w:p:nE:c:h" : "+:t:w:nE:c:h", is_sem ? sem_opts : lock_opts,
                              NULL)) != -1) {
        switch (opt) {
        case 't':
            if (duration_arg(synopsis, argv, MIN_TTL_MS, DLOCK_LEASE_MAX_MS, &h->ttl) != 0) return EXIT_USAGE;
            break;
        case 'w':
            if (duration_arg(synopsis, argv, 0, MAX_MS, &h->wait_ms) != 0) return EXIT_USAGE;
            break;
        case 'n': h->wait_ms = 0; break;
        case 'E':
            if (parse_number(optarg, 0, MAX_EXIT_CODE, &h->busy_exit) != 0)
                return usage_error(synopsis, "bad %s '%s': expected an exit status from 0 to %d", typed_option(argv),
                                   optarg, MAX_EXIT_CODE);
            break;
        case 'c':
            if (h->shell_command) return usage_error(synopsis, "%s: -c given twice", argv[0]);
            h->shell_command = optarg;
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
        case 'h': print_sub_help(argv[0]); return -1;
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
    return parse_command(synopsis, argc, argv, optind, h);
}

/* Start COMMAND, through the guard child_prepare() started, under the
 * hold just acquired: its token (or permit) goes in COMMAND's
 * environment. Returns 0 when COMMAND was started, else the status dlock
 * exits with (the guard is gone then). */
static int start_command(child *c, const char *name, uint64_t token, const char *permit, const char *command0,
                         const sigset_t *handled, int (*lost)(void *), void *hold)
{
    char late[CHILD_LATE_MAX];
    /* A permit has no fencing token; it is named by its id instead. */
    int n = permit ? snprintf(late, sizeof late, "DLOCK_PERMIT=%s", permit)
                   : snprintf(late, sizeof late, "DLOCK_TOKEN=%llu", (unsigned long long)token);
    if (n < 0 || (size_t)n >= sizeof late) {
        errorf("permit id too long");
        child_finish(c);
        return EXIT_SOFTWARE;
    }
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        errorf("pipe: %s", strerror(errno));
        child_finish(c);
        return EXIT_SOFTWARE;
    }
    /* Block our signals until the guard has its word, so that a SIGTERM
     * arriving now is passed on once it can be, rather than lost. */
    sigset_t block, old_mask;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    for (size_t i = 0; i < N_FORWARDED; i++) sigaddset(&block, forwarded_signals[i]);
    pthread_sigmask(SIG_BLOCK, &block, &old_mask);
    if (install_handlers(handled) != 0) {
        errorf("sigaction: %s", strerror(errno));
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
        child_finish(c);
        return EXIT_SOFTWARE;
    }
    /* A lease that ran out since the acquisition (dlock was paused, or the
     * answer came late) must not start COMMAND, even for the moment
     * before supervise() would kill it: that moment is already the next
     * holder's. */
    int err = child_go(c, late, lost, hold);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (err == ECANCELED) {
        lost_reported = 1;
        errorf("lost lock '%s' before COMMAND started; COMMAND was not run", name);
        return EXIT_LOST;
    }
    if (err != 0) {
        errorf("cannot run '%s': %s", command0, strerror(err));
        return EXIT_SOFTWARE;
    }
    return 0;
}

/* Test hook (dlock(1), ENVIRONMENT): DLOCK_TEST_STOP_AFTER_RELEASE=1
 * stops us right after the release, before the guard is reaped, so that
 * test_cli can prove nothing of COMMAND's group runs on by then: what
 * child_stop() killed before the release, and not child_finish() after. */
static void test_stop_after_release(void)
{
    const char *v = getenv("DLOCK_TEST_STOP_AFTER_RELEASE");
    if (v && strcmp(v, "1") == 0) raise(SIGSTOP);
}

/* Wait for COMMAND that start_command() started, and return the status
 * dlock should exit with, before the release is considered. */
static int wait_command(child *c, const char *name, const char *command0, long margin_ms, int (*lost)(void *),
                        void *hold)
{
    int wstatus = supervise(c, name, margin_ms, lost, hold);
    /* Whatever COMMAND left in its group dies before the lock is released;
     * the guard is reaped after the release (child_finish()). */
    child_stop(c);
    if (wstatus < 0) {
        errorf("cannot run '%s': %s", command0, strerror(c->exec_errno));
        return EXIT_NOEXEC;
    }
    return shell_status(wstatus);
}

/* Start COMMAND's guard (tools/child.c) with the part of COMMAND's
 * environment known before the hold; *handled gets the signals dlock
 * will catch while COMMAND runs. Returns 0, or the status dlock exits
 * with. */
static int prepare_guard(child *c, const hold_args *a, sigset_t *handled)
{
    char *name_var = NULL, **env = NULL;
    if (asprintf(&name_var, "DLOCK_NAME=%s", a->name) < 0) name_var = NULL;
    char *vars[2] = {name_var, NULL};
    int err = !name_var || !(env = child_environment(vars)) ? ENOMEM : 0;
    if (err == 0 && handled_signals(handled) != 0) err = errno;
    sigset_t mask;
    pthread_sigmask(SIG_SETMASK, NULL, &mask);
    if (err == 0) err = child_prepare(c, a->command, env, handled, &mask);
    free(env);
    free(name_var);
    if (err == 0) return 0;
    errorf("cannot run '%s': %s", a->command[0], strerror(err));
    return EXIT_SOFTWARE;
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
                   .margin_pct = DEFAULT_MARGIN_PCT, .busy_exit = EXIT_BUSY};
    int rc = parse_hold_args(argc, argv, is_sem, &a);
    if (rc < 0) return help_done();
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

    /* COMMAND's guard first, before any connection is open (see
     * tools/child.c): it waits while we do, so a hand-off of the lock
     * costs no fork. Not when we will not wait (-n, -w 0): there is no
     * hand-off to shorten then, and a busy lock, what a cron job's -n
     * usually finds, should cost no fork; the guard is forked once the
     * lock is held. */
    child c = CHILD_NONE;
    sigset_t handled;
    int early = a.wait_ms != 0;
    if (early && (rc = prepare_guard(&c, &a, &handled)) != 0) return rc;

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
            child_finish(&c);
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
        rc = (int)a.busy_exit;
        goto out;
    } else if (st != DLOCK_OK) {
        errorf("cannot acquire '%s': %s", a.name, dlock_last_error());
        rc = exit_for(st);
        goto out;
    }

    rc = early ? 0 : prepare_guard(&c, &a, &handled);
    if (rc == 0)
        rc = start_command(&c, a.name, token, h.permit ? dlock_permit_id(h.permit) : NULL, a.command[0], &handled,
                           holder_lost, &h);
    /* Who holds it, for `dlock status`: the kinds it can show. Started
     * after COMMAND, which need not wait for it. */
    holdinfo *info = NULL;
    if (rc == 0 && (a.kind == HOLD_PLAIN || a.kind == HOLD_FAIR || a.kind == HOLD_WRITE)) {
        dlock_options ko = client_options(NULL);
        info = holdinfo_start(h.clients[0], urls[0], &ko, a.kind == HOLD_WRITE ? HOLDINFO_WRITE : HOLDINFO_LOCK,
                              a.name, token, a.ttl, a.command, &lease_lost);
    }
    if (rc == 0) rc = wait_command(&c, a.name, a.command[0], a.ttl * a.margin_pct / 100, holder_lost, &h);

    /* The record's delete goes out from the keeper's thread beside the
     * release: one round trip for both (holdinfo.c, keeper()). Not for a
     * hold known lost: the server may be out of reach (a partition), the
     * release then returns without asking it, and a delete would hold our
     * exit for a whole command timeout; the record expires by itself. */
    if (info) holdinfo_end(info, !lost_reported && !holder_lost(&h));
    st = holder_release(&h);
    test_stop_after_release();
    holdinfo_free(info);
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
    child_finish(&c); /* without the lock: the guard goes without COMMAND */
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
        {"wait", required_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long count = 0, wait_ms = DLOCK_WAIT_FOREVER;
    int action = 0, actions = 0, waited = 0, opt;
    optind = 0;
    /* No '+': NAME may come before or after the action. */
    while ((opt = getopt_long(argc, argv, ":w:h", opts, NULL)) != -1) {
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
            if (duration_arg(USAGE_LATCH, argv, 0, MAX_MS, &wait_ms) != 0) return EXIT_USAGE;
            waited = 1;
            break;
        case 'h': print_sub_help(argv[0]); return help_done();
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

/* Print how many IDs PREFIX handed out on one UTC day (`date`, or today
 * when NULL): the day's sequence starts above a floor and cannot say. */
static int print_id_count(const char *url, const char *prefix, const char *date)
{
    dlock_client *client = NULL;
    int rc = open_client(url, NULL, &client);
    if (rc != 0) return rc;
    uint64_t n = 0;
    dlock_status st = dlock_id_count(client, prefix, date, &n);
    if (st != DLOCK_OK) {
        errorf("cannot count IDs of '%s': %s", prefix, dlock_last_error());
        rc = exit_for(st);
    } else {
        printf("%llu\n", (unsigned long long)n);
        if (fflush(stdout) != 0) rc = EXIT_SOFTWARE;
    }
    dlock_client_free(client);
    return rc;
}

/* Print COUNT global IDs, one per line, for scripts that need unique keys.
 * One call reserves the whole batch, so any COUNT costs one round trip.
 * With --count, print how many a day handed out instead. */
static int cmd_id(const char *url, int argc, char **argv)
{
    static const struct option opts[] = {
        {"count", no_argument, NULL, 'C'},
        {"date", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long count = 1;
    int opt, counting = 0, numbered = 0;
    const char *date = NULL;
    optind = 0;
    /* No '+': --date may follow PREFIX, as in `id --count order --date D`. */
    while ((opt = getopt_long(argc, argv, ":n:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'n':
            if (parse_number(optarg, 1, MAX_ID_COUNT, &count) != 0)
                return usage_error(USAGE_ID, "bad COUNT '%s': expected a number from 1 to %ld", optarg,
                                   MAX_ID_COUNT);
            numbered = 1;
            break;
        case 'C': counting = 1; break;
        case 'D':
            if (dlock_check_id_date(optarg) != DLOCK_OK)
                return usage_error(USAGE_ID, "bad --date '%s': expected a calendar day as YYYY-MM-DD", optarg);
            date = optarg;
            break;
        case 'h': print_sub_help(argv[0]); return help_done();
        case ':': return usage_error(USAGE_ID, "option %s needs a value", bad_option(argv));
        default: return usage_error(USAGE_ID, "unknown option '%s'", bad_option(argv));
        }
    }
    if (counting && numbered) return usage_error(USAGE_ID, "id: -n makes IDs, --count counts them: not both");
    if (date && !counting) return usage_error(USAGE_ID, "id: --date goes with --count");
    if (optind >= argc) return usage_error(USAGE_ID, "id: missing PREFIX");
    if (optind + 1 < argc) return usage_error(USAGE_ID, "id: too many arguments");
    const char *prefix = argv[optind];
    int bad = check_name(USAGE_ID, prefix, 1);
    if (bad) return bad;
    if (counting) return print_id_count(url, prefix, date);

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

/* A span of time as a person reads it at a glance: 850ms, 12.3s, 3m12s,
 * 2h05m, 3d04h. */
static void human_ms(long long ms, char *buf, size_t size)
{
    if (ms < 0) ms = 0;
    long long s = ms / 1000;
    if (ms < 1000) snprintf(buf, size, "%lldms", ms);
    else if (s < 60) snprintf(buf, size, "%lld.%llds", s, ms % 1000 / 100);
    else if (s < 3600) snprintf(buf, size, "%lldm%02llds", s / 60, s % 60);
    else if (s < 86400) snprintf(buf, size, "%lldh%02lldm", s / 3600, s % 3600 / 60);
    else snprintf(buf, size, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
}

/* Milliseconds since 1970 as an ISO 8601 UTC time, e.g.
 * 2026-11-25T10:00:00Z: one spelling for every host's time zone. */
static void utc_time(long long ms, char *buf, size_t size)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) snprintf(buf, size, "?");
}

/* Length of the valid UTF-8 character at `s`, or 0 if it is not one:
 * JSON must be UTF-8, and names and command lines are any bytes. */
static int utf8_len(const unsigned char *s)
{
    int n;
    unsigned char lo = 0x80, hi = 0xbf;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) n = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef) n = 3;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4) n = 4;
    else return 0;
    if (s[0] == 0xe0) lo = 0xa0;      /* overlong */
    else if (s[0] == 0xed) hi = 0x9f; /* surrogates */
    else if (s[0] == 0xf0) lo = 0x90; /* overlong */
    else if (s[0] == 0xf4) hi = 0x8f; /* above U+10FFFF */
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return n;
}

/* `s` as a JSON string: quotes, backslashes and control characters
 * escaped, bytes that are not UTF-8 replaced by U+FFFD, so that any name
 * or command line gives a document every parser takes. */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p++);
        else if (*p == '\n') fputs("\\n", f), p++;
        else if (*p == '\t') fputs("\\t", f), p++;
        else if (*p == '\r') fputs("\\r", f), p++;
        else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p++);
        else if (*p < 0x80) fputc(*p++, f);
        else {
            int n = utf8_len(p);
            if (n == 0) {
                fputs("\\ufffd", f);
                p++;
            } else {
                fwrite(p, 1, (size_t)n, f);
                p += n;
            }
        }
    }
    fputc('"', f);
}

/* One `"key": value` member of the status object; a NULL string is null. */
static void json_str_member(FILE *f, const char *key, const char *value)
{
    fprintf(f, ",\"%s\":", key);
    if (value) json_string(f, value);
    else fputs("null", f);
}

static void json_num_member(FILE *f, const char *key, long long value, int known)
{
    if (known) fprintf(f, ",\"%s\":%lld", key, value);
    else fprintf(f, ",\"%s\":null", key);
}

/* What `status` reports, gathered before printing it either way. */
typedef struct status_report {
    const char *name;
    dlock_lock_info lock;
    dlock_rwlock_info rw;
    holdinfo_view v;
    /* The hold described by token..lease_left: the plain or fair lock when
     * held, else the write hold, else none. */
    const char *token;
    const holdinfo_meta *meta;
    long lease_left_ms; /* -1 when free */
} status_report;

/* The JSON form: the same facts as the text, as one object, with tokens as
 * strings (they may pass 2^53, beyond what a double holds exactly) and
 * null for what is not known. */
static void print_status_json(const status_report *r)
{
    const holdinfo_meta *m = r->meta;
    char since[32], token[24];
    fputs("{\"name\":", stdout);
    json_string(stdout, r->name);
    fprintf(stdout, ",\"held\":%s", r->lock.held || r->rw.held ? "true" : "false");
    json_str_member(stdout, "holder", r->lock.held ? r->lock.holder : NULL);
    json_num_member(stdout, "count", r->lock.held ? r->lock.hold_count : 0, 1);
    json_num_member(stdout, "ttl_ms", r->lock.ttl_ms, 1);
    snprintf(token, sizeof token, "%llu", (unsigned long long)r->lock.last_token);
    json_str_member(stdout, "last_token", token);
    json_str_member(stdout, "writer", r->rw.writer[0] ? r->rw.writer : NULL);
    json_num_member(stdout, "readers", r->rw.readers, 1);
    json_num_member(stdout, "rw_ttl_ms", r->rw.ttl_ms, 1);
    snprintf(token, sizeof token, "%llu", (unsigned long long)r->rw.last_token);
    json_str_member(stdout, "rw_last_token", token);
    json_num_member(stdout, "waiting", r->v.waiting, r->v.waiting >= 0);
    json_num_member(stdout, "rw_waiting", r->v.rw_waiting, r->v.rw_waiting >= 0);
    json_str_member(stdout, "token", r->token);
    json_str_member(stdout, "host", m ? m->host : NULL);
    json_num_member(stdout, "pid", m ? m->pid : 0, m != NULL);
    json_str_member(stdout, "command", m ? m->command : NULL);
    if (m) utc_time(m->since_ms, since, sizeof since);
    json_str_member(stdout, "since", m ? since : NULL);
    json_num_member(stdout, "since_ms", m ? m->since_ms : 0, m != NULL);
    json_num_member(stdout, "held_for_ms", m ? r->v.now_ms - m->since_ms : 0, m != NULL);
    json_num_member(stdout, "lease_left_ms", r->lease_left_ms, r->lease_left_ms >= 0);
    fputs("}\n", stdout);
}

/* A count that may be unknown, for a text line. */
static void put_count(const char *key, long n)
{
    if (n >= 0) printf("%s: %ld\n", key, n);
    else printf("%s: -\n", key);
}

/* The text form: the library's `key: value` lines as they always were,
 * then who holds it in words (host, pid, command, since when, how long
 * the lease has left) and how many wait; "-" for what is not known. */
static void print_status_text(const status_report *r)
{
    const holdinfo_meta *m = r->meta;
    char buf[64];
    printf("holder: %s\ncount: %ld\nttl_ms: %ld\nlast_token: %llu\n"
           "writer: %s\nreaders: %ld\nrw_ttl_ms: %ld\nrw_last_token: %llu\n",
           r->lock.held ? r->lock.holder : "-", r->lock.held ? r->lock.hold_count : 0L, r->lock.ttl_ms,
           (unsigned long long)r->lock.last_token, r->rw.writer[0] ? r->rw.writer : "-", r->rw.readers,
           r->rw.ttl_ms, (unsigned long long)r->rw.last_token);
    put_count("waiting", r->v.waiting);
    put_count("rw_waiting", r->v.rw_waiting);
    printf("token: %s\n", r->token ? r->token : "-");
    fputs("host: ", stdout);
    put_escaped(stdout, m ? m->host : "-");
    if (m) printf("\npid: %ld\n", m->pid);
    else fputs("\npid: -\n", stdout);
    fputs("command: ", stdout);
    put_escaped(stdout, m ? m->command : "-");
    if (m) {
        char ago[32];
        utc_time(m->since_ms, buf, sizeof buf);
        human_ms(r->v.now_ms - m->since_ms, ago, sizeof ago);
        printf("\nsince: %s (%s ago)\n", buf, ago);
    } else {
        fputs("\nsince: -\n", stdout);
    }
    if (r->lease_left_ms >= 0) human_ms(r->lease_left_ms, buf, sizeof buf);
    printf("lease_left: %s\n", r->lease_left_ms >= 0 ? buf : "-");
}

/* Show who holds NAME, for operators and for scripts (`key: value` lines
 * or --json, exit 0 when held, 1 when free). One NAME may be used as a
 * plain or fair lock (`lock`, `lock --fair`) and as a read-write lock
 * (`lock --read`, `--write`): they are different keys, and either kind of
 * holder counts, so both are shown. */
static int cmd_status(const char *url, int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int json = 0, opt;
    optind = 0;
    while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (opt) {
        case 'j': json = 1; break;
        case 'h': print_sub_help(argv[0]); return help_done();
        default: return usage_error(USAGE_STATUS, "unknown option '%s'", bad_option(argv));
        }
    }
    status_report r = {.name = NULL};
    /* getopt took a "--" that ends the options: one_name wants it back, so
     * that a NAME starting with '-' is still a NAME. */
    int first = optind > 1 && strcmp(argv[optind - 1], "--") == 0 ? optind - 1 : optind;
    int rc = one_name(USAGE_STATUS, argc, argv, first, &r.name);
    if (rc != 0) return rc;
    dlock_url parsed;
    int cluster = 0;
    if (dlock_url_parse(url, &parsed) == DLOCK_OK) {
        cluster = parsed.kind == DLOCK_URL_CLUSTER;
        dlock_url_free(&parsed);
    }
    dlock_client *client = NULL;
    if ((rc = open_client(url, NULL, &client)) != 0) return rc;
    dlock_status st = dlock_lock_inspect(client, r.name, &r.lock);
    if (st == DLOCK_OK) st = dlock_rwlock_inspect(client, r.name, &r.rw);
    if (st == DLOCK_OK) st = holdinfo_read(client, r.name, cluster, &r.v);
    if (st != DLOCK_OK) {
        errorf("cannot inspect lock '%s': %s", r.name, dlock_last_error());
        rc = exit_for(st);
    } else {
        r.lease_left_ms = -1;
        if (r.lock.held) {
            r.token = r.v.lock_token[0] ? r.v.lock_token : NULL;
            r.meta = r.v.lock.known ? &r.v.lock : NULL;
            r.lease_left_ms = r.lock.ttl_ms;
        } else if (r.rw.writer[0]) {
            r.token = r.v.rw_token[0] ? r.v.rw_token : NULL;
            r.meta = r.v.rw.known ? &r.v.rw : NULL;
            r.lease_left_ms = r.rw.ttl_ms;
        }
        if (json) print_status_json(&r);
        else print_status_text(&r);
        rc = r.lock.held || r.rw.held ? 0 : EXIT_NOT_HELD;
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
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        print_sub_help(argv[0]);
        return help_done();
    }
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
        {"url", required_argument, NULL, 'u'},
        {"timeout", required_argument, NULL, 'T'},
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
        case 'T':
            if (parse_duration(optarg, 1, MAX_MS, &timeout_ms) != 0)
                return general_usage_error("bad --timeout '%s': expected a duration from 1 to %ld ms (%s)", optarg,
                                           MAX_MS, DURATION_UNITS);
            break;
        case ':': return general_usage_error("option %s needs a value", bad_option(argv));
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
