/*
 * COMMAND of `dlock lock`, run so that it cannot outlive its lock.
 *
 * flock(1) gets this for free: the lock is a file descriptor COMMAND
 * inherits, released only when the last holder closes it. A Redis lock is
 * held by dlock on COMMAND's behalf, so when dlock dies (kill -9, OOM
 * killer) nobody renews it, it expires, and the next holder starts while
 * COMMAND may still run. So COMMAND must die with dlock, and with it
 * everything COMMAND started:
 *
 *   dlock ── guard (leader of a new process group) ── COMMAND ── ...
 *
 *  - The guard holds one end of a "lifeline" socket pair whose other end
 *    only dlock has. However dlock dies, the kernel closes that end; the
 *    guard reads EOF and kills its whole group (SIGKILL to itself
 *    included). Unlike PR_SET_PDEATHSIG this has no window: a dlock that
 *    died before the guard started waiting is an EOF all the same.
 *  - COMMAND also has PR_SET_PDEATHSIG = SIGKILL, checked against a guard
 *    already gone, so a guard killed on its own takes COMMAND along; dlock
 *    then kills the rest of the group when it reaps the guard.
 *  - When COMMAND ends, the guard reports its wait status and kills the
 *    group, and dlock, on the report, kills the group too before it
 *    releases the lock (child_stop()), reaping the guard only after the
 *    release: nothing COMMAND left behind runs on unprotected once the
 *    lock is released. A daemon meant to outlive COMMAND must leave the
 *    group (setsid), and is then on its own.
 *  - Signals for COMMAND go to the whole group; the guard ignores them.
 *
 * The guard is started before the lock is asked for (child_prepare()),
 * and waits: the go message that makes it start COMMAND (child_go())
 * brings the one variable not known until the lock is held (the fencing
 * token). Why so early: forking dlock, reading its descriptor list and
 * setting the guard's signals up took about a millisecond between a
 * hand-off of the lock and COMMAND's start; now they happen while dlock
 * waits. (A dlock that will not wait starts it once it holds the lock.)
 *
 * A terminal: when dlock runs in the foreground of one, the group gets
 * the terminal for as long as COMMAND runs (so COMMAND may read it, and ^C
 * reaches it), and ^Z stops COMMAND and then dlock, as a shell's job.
 *
 * Between fork() and exec() (and in the guard, which never execs) only
 * async-signal-safe calls are made: dlock has threads, and the copy of a
 * lock another thread held at fork() would never be released. execvpe()
 * of glibc searches PATH on the stack, without malloc.
 */
#include "child.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

/* What the guard (and COMMAND, when exec fails) tells dlock. */
enum { REPORT_EXEC_ERROR = 'E', REPORT_STATUS = 'S', REPORT_STOPPED = 'T' };
typedef struct report {
    int kind;
    int value;
} report;

/* Job-control signals: the guard ignores them, COMMAND gets them back as
 * dlock found them. */
static const int job_signals[] = {SIGTSTP, SIGTTIN, SIGTTOU};
#define N_JOB (sizeof job_signals / sizeof job_signals[0])

/* Code that runs on the stack of exec_stack() (see spawn_command()):
 * AddressSanitizer's instrumentation, run there, warns that it does not
 * know that stack and that false reports may follow. */
#define NO_ASAN __attribute__((no_sanitize_address))

/* One report, whole (pipe writes up to PIPE_BUF are atomic). */
NO_ASAN static void send_report(int fd, int kind, int value)
{
    report r = {kind, value};
    ssize_t n = write(fd, &r, sizeof r);
    (void)n;
}

/* COMMAND, in the guard's child: the signals and mask dlock was started
 * with, death with the guard, then exec. Never returns. */
NO_ASAN static void exec_command(pid_t guard, int report_fd, char *const *argv, char *const *env,
                                 const sigset_t *defaults, const sigset_t *mask, const struct sigaction *job_orig)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != guard) _exit(127);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        if (sigismember(defaults, s) == 1) sigaction(s, &dfl, NULL);
    for (size_t i = 0; i < N_JOB; i++) sigaction(job_signals[i], &job_orig[i], NULL);
    sigaction(SIGCHLD, &dfl, NULL);
    sigprocmask(SIG_SETMASK, mask, NULL);
    execvpe(argv[0], argv, env);
    send_report(report_fd, REPORT_EXEC_ERROR, errno);
    _exit(127);
}

/* exec_command()'s arguments, through clone(). */
typedef struct exec_args {
    pid_t guard;
    int report_fd;
    char *const *argv, *const *env;
    const sigset_t *defaults, *mask;
    const struct sigaction *job_orig;
} exec_args;

NO_ASAN static int exec_entry(void *arg)
{
    const exec_args *a = arg;
    exec_command(a->guard, a->report_fd, a->argv, a->env, a->defaults, a->mask, a->job_orig);
    return 127;
}

/* A stack for COMMAND's child until its exec, with an unmapped page below
 * it: room for execvpe()'s PATH search and its /bin/sh fallback, which
 * copies argv, on the stack. Mapped by dlock before the guard's fork (the
 * guard inherits it), so the guard need not. NULL when it cannot be
 * mapped; *total is the whole mapping, for munmap(). */
static char *exec_stack(char *const *argv, size_t *size, size_t *total)
{
    size_t argc = 0;
    while (argv[argc]) argc++;
    const char *path = getenv("PATH");
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t need = 256 * 1024 + (argc + 4) * sizeof(char *) + (path ? strlen(path) : 0) + 2 * 4096;
    need = (need + page - 1) / page * page;
    char *m = mmap(NULL, need + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) return NULL;
    if (mprotect(m, page, PROT_NONE) != 0) {
        munmap(m, need + page);
        return NULL;
    }
    *size = need;
    *total = need + page;
    return m + page;
}

/*
 * Start COMMAND's process, as posix_spawn() does: clone(CLONE_VM |
 * CLONE_VFORK) on a stack of its own. Why not fork(): the guard is a copy
 * of dlock, libraries and threads' stacks included, and copying its page
 * tables for a child that only execs was the larger part of the time from
 * the lock's hand-off to COMMAND's start. The child shares the guard's
 * memory until its exec, while the guard is suspended, and makes only
 * system calls there (exec_command()); its signal dispositions and mask
 * are its own (no CLONE_SIGHAND). Returns its pid, or -1 with errno.
 */
static pid_t spawn_command(const exec_args *a, char *stack, size_t size)
{
    if (!stack) {
        pid_t pid = fork();
        if (pid == 0) exec_entry((void *)a); /* does not return */
        return pid;
    }
    return clone(exec_entry, stack + size, CLONE_VM | CLONE_VFORK | SIGCHLD, (void *)a);
}

/* The guard: wait for dlock's go, start COMMAND, then report what becomes
 * of it, and kill the group when COMMAND ends or dlock dies. Never
 * returns. */
/* dlock's own descriptors, listed before fork (the guard may not read a
 * directory: opendir allocates). */
#define MAX_OWN_FDS 256
typedef struct own_fds {
    int fd[MAX_OWN_FDS];
    int n;
    int overflow; /* more than MAX_OWN_FDS: the guard tries every number */
    int max;      /* the highest descriptor open */
} own_fds;

static void guard_main(int report_fd, int lifeline_fd, const own_fds *own, char *const *argv, char **env, size_t env_n,
                       const sigset_t *defaults, const sigset_t *mask, const struct sigaction *job_orig, char *stack,
                       size_t stack_size)
{
    pid_t me = getpid();
    setpgid(0, 0);
    /* dlock's own descriptors (Redis connections, its wake-up pipe) are
     * close-on-exec: COMMAND never gets them, and the guard, which does
     * not exec, must not keep them open (a connection dlock closes would
     * stay half open in here). Those dlock inherited are COMMAND's. */
    if (own->overflow) {
        for (int fd = 3; fd <= own->max; fd++) {
            int flags = fcntl(fd, F_GETFD);
            if (flags >= 0 && (flags & FD_CLOEXEC) && fd != report_fd && fd != lifeline_fd) close(fd);
        }
    } else {
        for (int i = 0; i < own->n; i++)
            if (own->fd[i] != report_fd && own->fd[i] != lifeline_fd) close(own->fd[i]);
    }
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    for (int s = 1; s < NSIG; s++)
        if (sigismember(defaults, s) == 1 && s != SIGCHLD) sigaction(s, &ign, NULL);
    for (size_t i = 0; i < N_JOB; i++) sigaction(job_signals[i], &ign, NULL);
    /* SIGCHLD by signalfd: blocked, with the default disposition (dlock's
     * handler has SA_NOCLDSTOP, which would hide COMMAND's stops). */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &dfl, NULL);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_SETMASK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    /* dlock holds the lock and has set the group up (and the terminal)
     * when the go comes: "g", then the late variable and its NUL. EOF:
     * dlock died, or gave up without the lock. */
    char go[1 + CHILD_LATE_MAX];
    ssize_t n = -1;
    if (sfd >= 0) {
        do n = read(lifeline_fd, go, sizeof go);
        while (n < 0 && errno == EINTR);
    }
    if (n < 2 || go[0] != 'g' || go[n - 1] != '\0') kill(0, SIGKILL);
    if (n > 2) {
        env[env_n] = go + 1; /* env has this free slot, and one more for NULL */
        env[env_n + 1] = NULL;
    }

    exec_args ea = {me, report_fd, argv, env, defaults, mask, job_orig};
    pid_t cmd = spawn_command(&ea, stack, stack_size);
    if (cmd < 0) {
        send_report(report_fd, REPORT_EXEC_ERROR, errno);
        kill(0, SIGKILL);
    }

    for (;;) {
        struct pollfd p[2] = {{lifeline_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR) kill(0, SIGKILL);
        if (p[0].revents) {
            char b;
            if (read(lifeline_fd, &b, 1) <= 0) kill(0, SIGKILL); /* dlock is gone */
        }
        if (p[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {}
        }
        int st;
        pid_t w;
        while ((w = waitpid(cmd, &st, WNOHANG | WUNTRACED)) == cmd) {
            if (WIFSTOPPED(st)) {
                send_report(report_fd, REPORT_STOPPED, WSTOPSIG(st));
                continue;
            }
            send_report(report_fd, REPORT_STATUS, st);
            kill(0, SIGKILL); /* COMMAND's leftovers, and the guard */
        }
    }
}

/* dlock's own descriptors (close-on-exec: COMMAND's are not) and the
 * highest one open, read before fork. */
static void list_own_fds(own_fds *own)
{
    own->n = own->overflow = 0;
    own->max = 1024;
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        own->overflow = 1;
        return;
    }
    int dfd = dirfd(d);
    own->max = 2;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        int fd = atoi(e->d_name);
        if (fd > own->max) own->max = fd;
        int flags = fcntl(fd, F_GETFD);
        if (fd < 3 || fd == dfd || flags < 0 || !(flags & FD_CLOEXEC)) continue;
        if (own->n < MAX_OWN_FDS) own->fd[own->n++] = fd;
        else own->overflow = 1;
    }
    closedir(d);
}

/* The terminal dlock runs in the foreground of, or -1. */
static int foreground_tty(void)
{
    if (!isatty(STDIN_FILENO)) return -1;
    return tcgetpgrp(STDIN_FILENO) == getpgrp() ? STDIN_FILENO : -1;
}

/* Make `pgid` the terminal's foreground group. A process outside the
 * foreground group that does this gets SIGTTOU unless it blocks it. */
static void give_tty(int fd, pid_t pgid)
{
    sigset_t ttou, old;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    pthread_sigmask(SIG_BLOCK, &ttou, &old);
    tcsetpgrp(fd, pgid);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int child_prepare(child *c, char *const *argv, char *const *env, const sigset_t *defaults, const sigset_t *mask)
{
    memset(c, 0, sizeof *c);
    c->report_fd = c->lifeline_fd = c->tty_fd = -1;
    size_t env_n = 0;
    while (env[env_n]) env_n++;
    char **genv = malloc((env_n + 2) * sizeof *genv); /* the guard's copy gets the late variable */
    if (!genv) return ENOMEM;
    memcpy(genv, env, (env_n + 1) * sizeof *genv);
    int rep[2], life[2];
    if (pipe2(rep, O_CLOEXEC) != 0) {
        int e = errno;
        free(genv);
        return e;
    }
    /* A socket, not a pipe: the go is sent with MSG_NOSIGNAL, so a guard
     * that died meanwhile is an error here rather than SIGPIPE; and one
     * packet, read whole. */
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, life) != 0) {
        int e = errno;
        close(rep[0]);
        close(rep[1]);
        free(genv);
        return e;
    }
    struct sigaction job_orig[N_JOB];
    for (size_t i = 0; i < N_JOB; i++) sigaction(job_signals[i], NULL, &job_orig[i]);
    own_fds own;
    list_own_fds(&own);
    size_t stack_size = 0, stack_total = 0;
    char *stack = exec_stack(argv, &stack_size, &stack_total);
    pid_t g = fork();
    if (stack && g != 0) munmap(stack - (stack_total - stack_size), stack_total); /* the guard's copy stays */
    if (g < 0) {
        int e = errno;
        close(rep[0]);
        close(rep[1]);
        close(life[0]);
        close(life[1]);
        free(genv);
        return e;
    }
    if (g == 0) {
        close(rep[0]);
        close(life[1]);
        guard_main(rep[1], life[0], &own, argv, genv, env_n, defaults, mask, job_orig, stack, stack_size);
    }
    free(genv);
    close(rep[1]);
    close(life[0]);
    fcntl(rep[0], F_SETFL, O_NONBLOCK);
    c->guard = c->pgid = g;
    c->report_fd = rep[0];
    c->lifeline_fd = life[1];
    setpgid(g, g); /* also here, so the group exists before we signal it */
    return 0;
}

int child_go(child *c, const char *late, int (*cancel)(void *), void *arg)
{
    char go[1 + CHILD_LATE_MAX];
    size_t len = late ? strlen(late) : 0;
    if (len >= CHILD_LATE_MAX) {
        child_finish(c);
        return E2BIG;
    }
    go[0] = 'g';
    if (len) memcpy(go + 1, late, len);
    go[1 + len] = '\0';
    c->tty_fd = foreground_tty();
    if (c->tty_fd >= 0) give_tty(c->tty_fd, c->pgid);
    /* Asked last, right before the word that makes the guard start
     * COMMAND: what the answer was about cannot have changed before
     * COMMAND starts, unless we are paused in these few instructions.
     * Without the word the guard reads EOF and dies alone. */
    if (cancel && cancel(arg)) {
        child_finish(c);
        return ECANCELED;
    }
    if (send(c->lifeline_fd, go, len + 2, MSG_NOSIGNAL) != (ssize_t)(len + 2)) {
        int e = errno ? errno : EPIPE;
        child_finish(c);
        return e;
    }
    return 0;
}

void child_signal(const child *c, int sig)
{
    if (c->pgid > 0) kill(-c->pgid, sig);
}

/* COMMAND stopped at the terminal (^Z): stop too, as a shell's job
 * would, and when continued, continue COMMAND with the terminal. */
static void follow_stop(child *c)
{
    if (c->tty_fd >= 0) give_tty(c->tty_fd, getpgrp());
    kill(getpid(), SIGSTOP);
    if (c->tty_fd >= 0) give_tty(c->tty_fd, c->pgid);
    child_signal(c, SIGCONT);
}

/* Read every report waiting in the pipe. */
static void read_reports(child *c)
{
    report r;
    while (read(c->report_fd, &r, sizeof r) == (ssize_t)sizeof r) {
        if (r.kind == REPORT_EXEC_ERROR) {
            c->reported = -1;
            c->exec_errno = r.value;
        } else if (r.kind == REPORT_STATUS && c->reported == 0) {
            c->reported = 1;
            c->status = r.value;
        } else if (r.kind == REPORT_STOPPED) {
            follow_stop(c);
        }
    }
}

/* Why COMMAND's end is taken from the report, before the guard has died:
 * the guard's exit (a copy of dlock, its mappings torn down) came between
 * COMMAND's end and the release, on every hand-off of the lock. What
 * makes the release safe is that the group is killed first, which
 * child_stop() does without waiting for the guard. */
int child_poll(child *c, int *wstatus)
{
    read_reports(c);
    if (c->reported != 0 && c->guard > 0) {
        *wstatus = c->reported < 0 ? -1 : c->status;
        return 1;
    }
    if (c->guard <= 0) return 1;
    int gst;
    pid_t w = waitpid(c->guard, &gst, WNOHANG);
    if (w != c->guard) return 0;
    c->guard = 0;
    read_reports(c); /* written before the guard died */
    if (c->reported < 0) {
        *wstatus = -1;
    } else {
        /* No report: the guard itself was killed; COMMAND's fate is
         * unknown, and what is left of the group dies in child_finish(). */
        *wstatus = c->reported ? c->status : gst;
    }
    return 1;
}

/* The terminal comes back here, not in child_finish(): what dlock says
 * about the release (a lost lock, a failed release) is written while it
 * is in the foreground again. */
void child_stop(child *c)
{
    child_signal(c, SIGKILL);
    if (c->tty_fd >= 0) give_tty(c->tty_fd, getpgrp());
    c->tty_fd = -1;
}

void child_finish(child *c)
{
    child_stop(c);
    if (c->guard > 0) {
        while (waitpid(c->guard, NULL, 0) < 0 && errno == EINTR) {}
        c->guard = 0;
    }
    if (c->report_fd >= 0) close(c->report_fd);
    if (c->lifeline_fd >= 0) close(c->lifeline_fd);
    c->report_fd = c->lifeline_fd = -1;
    c->pgid = 0; /* gone: a second call must not signal a reused number */
}
