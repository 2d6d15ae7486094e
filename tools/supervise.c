/*
 * COMMAND under a hold: the guard process (child.c) is started early,
 * COMMAND is let go once the hold is taken, and one poll() on a self-pipe
 * waits for whichever comes first: the child ended (SIGCHLD), a signal to
 * pass on (SIGINT, SIGTERM, ...), or the library's watchdog reporting the
 * lease lost. The signal handlers and the loss callback only write one
 * byte to the pipe, so everything else happens in plain code on the main
 * thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hold.h"

extern char **environ;

/* Byte written to the self-pipe by the loss callback. Signal numbers are
 * written as themselves. */
#define PIPE_LOST 0

/* The signals dlock passes on to COMMAND. */
static const int forwarded_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
#define N_FORWARDED (sizeof forwarded_signals / sizeof forwarded_signals[0])

/* State shared with the signal handlers and the watchdog thread. Only
 * the write end of the pipe and the lost flag are touched from there. */
static int wake_pipe[2] = {-1, -1};
atomic_int cli_lease_lost;
/* Main thread only: the loss was already reported on stderr. */
int cli_lost_reported;

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
void cli_on_lost(dlock_lock *lock, uint64_t token, void *arg)
{
    (void)lock;
    (void)token;
    (void)arg;
    atomic_store(&cli_lease_lost, 1);
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
        if (kill_at < 0 && !cli_lost_reported && lost(hold)) {
            cli_lost_reported = 1;
            cli_errorf("lost lock '%s' while COMMAND ran; sending it SIGTERM, SIGKILL in %ld ms", name,
                       margin_ms - every);
            child_signal(c, SIGTERM);
            kill_at = mono_ms() + margin_ms - every;
        }
        int timeout = cli_lost_reported ? -1 : (int)every;
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
            cli_errorf("waiting for COMMAND: %s", strerror(errno));
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

/* Start COMMAND, through the guard child_prepare() started, under the
 * hold just acquired: its token (or permit) goes in COMMAND's
 * environment. Returns 0 when COMMAND was started, else the status dlock
 * exits with (the guard is gone then). */
int cli_start_command(child *c, const char *name, uint64_t token, const char *permit, const char *command0,
                      const sigset_t *handled, int (*lost)(void *), void *hold)
{
    char late[CHILD_LATE_MAX];
    /* A permit has no fencing token; it is named by its id instead. */
    int n = permit ? snprintf(late, sizeof late, "DLOCK_PERMIT=%s", permit)
                   : snprintf(late, sizeof late, "DLOCK_TOKEN=%llu", (unsigned long long)token);
    if (n < 0 || (size_t)n >= sizeof late) {
        cli_errorf("permit id too long");
        child_finish(c);
        return EXIT_SOFTWARE;
    }
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        cli_errorf("pipe: %s", strerror(errno));
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
        cli_errorf("sigaction: %s", strerror(errno));
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
        cli_lost_reported = 1;
        cli_errorf("lost lock '%s' before COMMAND started; COMMAND was not run", name);
        return EXIT_LOST;
    }
    if (err != 0) {
        cli_errorf("cannot run '%s': %s", command0, strerror(err));
        return EXIT_SOFTWARE;
    }
    return 0;
}

/* Test hook (dlock(1), ENVIRONMENT): DLOCK_TEST_STOP_AFTER_RELEASE=1
 * stops us right after the release, before the guard is reaped, so that
 * test_cli can prove nothing of COMMAND's group runs on by then: what
 * child_stop() killed before the release, and not child_finish() after. */
void cli_test_stop_after_release(void)
{
    const char *v = getenv("DLOCK_TEST_STOP_AFTER_RELEASE");
    if (v && strcmp(v, "1") == 0) raise(SIGSTOP);
}

/* Wait for COMMAND that cli_start_command() started, and return the status
 * dlock should exit with, before the release is considered. */
int cli_wait_command(child *c, const char *name, const char *command0, long margin_ms, int (*lost)(void *), void *hold)
{
    int wstatus = supervise(c, name, margin_ms, lost, hold);
    /* Whatever COMMAND left in its group dies before the lock is released;
     * the guard is reaped after the release (child_finish()). */
    child_stop(c);
    if (wstatus < 0) {
        cli_errorf("cannot run '%s': %s", command0, strerror(c->exec_errno));
        return EXIT_NOEXEC;
    }
    return shell_status(wstatus);
}

/* Start COMMAND's guard (tools/child.c) with the part of COMMAND's
 * environment known before the hold; *handled gets the signals dlock
 * will catch while COMMAND runs. Returns 0, or the status dlock exits
 * with. */
int cli_prepare_guard(child *c, const char *name, char **command, sigset_t *handled)
{
    char *name_var = NULL, **env = NULL;
    if (asprintf(&name_var, "DLOCK_NAME=%s", name) < 0) name_var = NULL;
    char *vars[2] = {name_var, NULL};
    int err = !name_var || !(env = child_environment(vars)) ? ENOMEM : 0;
    if (err == 0 && handled_signals(handled) != 0) err = errno;
    sigset_t mask;
    pthread_sigmask(SIG_SETMASK, NULL, &mask);
    if (err == 0) err = child_prepare(c, command, env, handled, &mask);
    free(env);
    free(name_var);
    if (err == 0) return 0;
    cli_errorf("cannot run '%s': %s", command[0], strerror(err));
    return EXIT_SOFTWARE;
}

/* ------------------------------------------------------------------------ */
/* A hold without COMMAND                                                    */
/* ------------------------------------------------------------------------ */

/* What ends a hold without COMMAND: the signals a user or a service
 * manager stops a program with. SIGUSR1 and SIGUSR2 are caught and
 * ignored (by default they would kill us without a release). */
static int ends_idle_hold(int sig)
{
    return sig == SIGHUP || sig == SIGINT || sig == SIGQUIT || sig == SIGTERM;
}

/*
 * Keep the hold just taken, the watchdog renewing it, until SIGINT,
 * SIGTERM, SIGHUP or SIGQUIT (0), until stdin reaches its end when
 * `until_eof` (0), or until the hold is lost (EXIT_LOST, said on stderr).
 * The same self-pipe as supervise(): the handlers only write a byte, and
 * the hold's own query is asked every quarter margin, so that a loss the
 * watchdog thread reports late is still seen in time.
 */
int cli_hold_idle(const char *name, int until_eof, long margin_ms, int (*lost)(void *), void *hold)
{
    sigset_t handled, block, old_mask;
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0 || handled_signals(&handled) != 0) {
        cli_errorf("pipe: %s", strerror(errno));
        return EXIT_SOFTWARE;
    }
    sigemptyset(&block);
    for (size_t i = 0; i < N_FORWARDED; i++) sigaddset(&block, forwarded_signals[i]);
    pthread_sigmask(SIG_BLOCK, &block, &old_mask);
    int err = install_handlers(&handled);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (err != 0) {
        cli_errorf("sigaction: %s", strerror(errno));
        return EXIT_SOFTWARE;
    }
    long every = margin_ms / 4 < 10 ? 10 : margin_ms / 4;
    int watch_stdin = until_eof;
    for (;;) {
        if (lost(hold)) {
            cli_lost_reported = 1;
            cli_errorf("lost lock '%s' while holding it", name);
            return EXIT_LOST;
        }
        struct pollfd pfd[2] = {{wake_pipe[0], POLLIN, 0}, {watch_stdin ? 0 : -1, POLLIN, 0}};
        if (poll(pfd, 2, (int)every) < 0 && errno != EINTR) {
            cli_errorf("waiting: %s", strerror(errno));
            return EXIT_SOFTWARE;
        }
        unsigned char buf[512];
        ssize_t n;
        while ((n = read(wake_pipe[0], buf, sizeof buf)) > 0)
            for (ssize_t i = 0; i < n; i++)
                if (buf[i] != PIPE_LOST && ends_idle_hold(buf[i])) return 0;
        if (watch_stdin && pfd[1].revents) {
            /* Whatever is written to us is read and dropped: only its end
             * (the writer closed it, or died) counts. */
            n = read(0, buf, sizeof buf);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return 0;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* The -w deadline                                                           */
/* ------------------------------------------------------------------------ */

/* Armed while the hold is being taken: the alarm exits with this message
 * and EXIT_UNAVAILABLE unless the main thread has disarmed it first. */
static atomic_int deadline_armed;
static char deadline_msg[256];
static size_t deadline_msg_len;

/* The library's calls can each take up to a command timeout, and a server
 * that stopped answering (SIGSTOPped, a half-open link) costs several:
 * the alarm is what makes -w a deadline whatever the server does. It runs
 * as a signal handler, so only write(2) and _exit(2); the guard sees our
 * death through its lifeline and goes without COMMAND. */
static void on_deadline(int sig)
{
    (void)sig;
    if (!atomic_load(&deadline_armed)) return;
    ssize_t n = write(2, deadline_msg, deadline_msg_len);
    (void)n;
    _exit(EXIT_UNAVAILABLE);
}

int cli_deadline_arm(const char *name, long after_ms)
{
    char shown[80];
    snprintf(shown, sizeof shown, "%s", cli_shown(name));
    int n =
        snprintf(deadline_msg, sizeof deadline_msg,
                 "dlock: Redis did not answer in time: gave up on '%s' %ld ms after the wait began\n", shown, after_ms);
    deadline_msg_len = n < 0 ? 0 : (size_t)n < sizeof deadline_msg ? (size_t)n : sizeof deadline_msg - 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_deadline;
    sigfillset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0) return -1;
    atomic_store(&deadline_armed, 1);
    struct itimerval it = {{0, 0}, {after_ms / 1000, (after_ms % 1000) * 1000}};
    if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0) it.it_value.tv_usec = 1;
    return setitimer(ITIMER_REAL, &it, NULL);
}

void cli_deadline_disarm(void)
{
    atomic_store(&deadline_armed, 0);
    struct itimerval it = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &it, NULL);
}
