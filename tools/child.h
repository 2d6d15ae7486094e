/* COMMAND of `dlock lock`, run so that it cannot outlive its lock holder. */
#ifndef DLOCK_TOOLS_CHILD_H
#define DLOCK_TOOLS_CHILD_H

#include <signal.h>
#include <sys/types.h>

/*
 * A running COMMAND: a guard process leading a process group of its own,
 * with COMMAND (and whatever COMMAND starts) inside that group.
 */
typedef struct child {
    pid_t guard;     /* our child; leader of the group */
    pid_t pgid;      /* the group: signals to COMMAND go to all of it */
    int report_fd;   /* read end: COMMAND's exec error or wait status */
    int lifeline_fd; /* write end: closed by our death, the guard kills the group */
    int tty_fd;      /* the terminal handed to the group, or -1 */
    int status;      /* COMMAND's wait status, once reported */
    int reported;    /* 1 when `status` is known; -1 after an exec error */
    int exec_errno;  /* why COMMAND could not be executed */
} child;

/* A child not started yet: child_finish() on it does nothing. */
#define CHILD_NONE                                                                                                     \
    {                                                                                                                  \
        .report_fd = -1, .lifeline_fd = -1, .tty_fd = -1                                                               \
    }

/* The longest late variable child_go() can pass, its NUL included. */
#define CHILD_LATE_MAX 256

/*
 * Start COMMAND's guard, which waits for child_go() before it starts
 * COMMAND (argv, with environment env plus the late variable child_go()
 * passes). `defaults` are the signals whose handlers COMMAND gets back as
 * SIG_DFL, `mask` its signal mask. The guard is a copy of this process: it
 * closes the descriptors that are close-on-exec and keeps the others for
 * COMMAND, so every descriptor of our own must be close-on-exec by now
 * (the library's are). Returns 0, or an errno value when the guard could
 * not be started. Until child_go(), child_finish() makes the guard go
 * away without COMMAND.
 */
int child_prepare(child *c, char *const *argv, char *const *env, const sigset_t *defaults, const sigset_t *mask);

/*
 * Hand the terminal to COMMAND's group, then tell the guard to start
 * COMMAND with `late` ("NAME=value", or NULL) added to its environment.
 * `cancel(arg)` (or NULL) is asked last, just before the word is sent:
 * nonzero, and COMMAND is not started. Returns 0; ECANCELED when cancel()
 * said so; or an errno value when the guard is gone. On any error the
 * guard is finished (child_finish()). COMMAND not being executable is
 * reported later, by child_poll(), as the shell would: after it was tried.
 */
int child_go(child *c, const char *late, int (*cancel)(void *), void *arg);

/* Send `sig` to COMMAND's whole process group. */
void child_signal(const child *c, int sig);

/*
 * Handle what the guard reported (call when report_fd is readable, or
 * SIGCHLD came): returns 1 once COMMAND has ended, as the guard reported
 * it or as its own death says (*wstatus: COMMAND's wait status, or -1 with
 * c->exec_errno when it could not be executed), 0 while it runs; the
 * guard may not be reaped yet. A stopped COMMAND (^Z at a terminal)
 * stops us too, and both go on together.
 */
int child_poll(child *c, int *wstatus);

/* Kill whatever is left of COMMAND's group (when this returns, every
 * process still in it has SIGKILL pending) and give the terminal back.
 * The guard is reaped later, by child_finish(). */
void child_stop(child *c);

/* Kill whatever is left of the group, reap the guard, give the terminal
 * back, close. */
void child_finish(child *c);

#endif
