/* --help, `dlock SUBCOMMAND --help` and the synopsis: one screen of
 * reminders; dlock(1) has the rest. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The synopsis of every subcommand: the start of --help, and what a usage
 * error not tied to one subcommand shows on stderr. */
void cli_print_synopsis(FILE *f)
{
    fputs("usage: " USAGE_LOCK "\n"
          "       " USAGE_SEM "\n"
          "       " USAGE_RATE "\n"
          "       " USAGE_LATCH "\n"
          "       " USAGE_ID "\n"
          "       " USAGE_STATUS "\n"
          "       " USAGE_LIST "\n"
          "       " USAGE_UNLOCK "\n"
          "       " USAGE_DELETE "\n"
          "       " USAGE_MISC "\n",
          f);
}

/* The global options, shared by --help and every subcommand's help. */
#define HELP_GLOBAL                                                                                                    \
    "Global options (before the subcommand):\n"                                                                        \
    "  -u, --url URL   redis://[[user]:password@]host[:port][/db], unix:///path?db=N,\n"                               \
    "                  redis-sentinel://..., redis-cluster://...\n"                                                    \
    "                  (default: $DLOCK_URL, else " DEFAULT_URL ")\n"                                                  \
    "  --password-file FILE  Redis password: FILE's first line; FILE must be mode\n"                                   \
    "                  0600 or 0400 (default: $DLOCK_PASSWORD)\n"                                                      \
    "  --timeout DURATION  connect and command timeout (default 2s and 5s)\n"                                          \
    "\n"                                                                                                               \
    "DURATION is " DURATION_FORMS ".\n"

/* --help: the synopsis and one screen of reminders; dlock(1) has the rest. */
void cli_print_help(void)
{
    cli_print_synopsis(stdout);
    fputs("\n"
          "Run COMMAND while holding the Redis lock NAME (a distributed flock), or\n"
          "when the rate limit NAME grants a permit, make global IDs, or list, inspect, break and delete locks, "
          "semaphores and\n"
          "latches. `dlock SUBCOMMAND --help` lists each subcommand's options.\n"
          "\n" HELP_GLOBAL "  -u given 3 or more times: `lock` is a RedLock over those independent\n"
          "  masters (twice is refused: a majority of two masters is both).\n"
          "\n"
          "COMMAND gets DLOCK_NAME and DLOCK_TOKEN (the fencing token) in its environment.\n"
          "\n"
          "Exit status: COMMAND's own (128+N if killed by signal N); 75 lock busy\n"
          "(or -E N), printing nothing unless -v; 76 lock lost while held; 69 Redis\n"
          "unreachable, not answering in time or AUTH failed; 64 usage error; 65 NAME\n"
          "in use as another kind (a lock, a read-write lock, a semaphore, a latch);\n"
          "78 semaphore -p or rate -r/-b differs from what is stored; 127 COMMAND not\n"
          "executable; rate: 75 no permit within the wait (or -E N), quietly;\n"
          "70 internal error.\n"
          "See dlock(1).\n",
          stdout);
}

/* The options `lock` and `semaphore` share, in their --help ... */
#define HELP_HOLD_COMMON                                                                                               \
    "  -w, --wait DURATION   give up after DURATION, exit 75 quietly (default: wait\n"                                 \
    "                        forever); back within DURATION + 2 s whatever Redis does\n"                               \
    "  -n, --nonblock        try once: the same as -w 0\n"                                                             \
    "  --retry-connect       wait through a Redis outage (within -w) instead of exit 69\n"                             \
    "  -v, --verbose         say why the lock was not acquired, or after how long it was\n"                            \
    "  -q, --quiet           no warnings (errors are still printed)\n"                                                 \
    "  -t, --ttl DURATION    lease, renewed every third of it while held\n"                                            \
    "                        (default 30s)\n"                                                                          \
    "  -E, --conflict-exit-code N  exit N (0 to 255) instead of 75 when not acquired\n"                                \
    "  -c, --command 'SHELL COMMAND'  run it with /bin/sh -c (also after NAME, as\n"                                   \
    "                        in flock(1))\n"                                                                           \
    "  --safety-margin PCT   when renewals fail, stop trusting the lease PCT % of TTL\n"                               \
    "                        (+1 % + 2 ms) before it could end: COMMAND gets SIGTERM,\n"                               \
    "                        its process group SIGKILL PCT % later (default 10)\n"                                     \
    "  --until-eof           without COMMAND: hold until stdin ends\n"                                                 \
    "  -h, --help            this text\n"
/* ... and what follows them. */
#define HELP_HOLD_END                                                                                                  \
    "\n"                                                                                                               \
    "Options end at NAME: everything after it is COMMAND and its arguments ('--'\n"                                    \
    "before COMMAND is optional). COMMAND gets DLOCK_NAME and DLOCK_TOKEN (a\n"                                        \
    "semaphore's: DLOCK_PERMIT). Without COMMAND, the token is printed and the hold\n"                                 \
    "kept until SIGTERM or SIGINT (or, with --until-eof, the end of stdin), exit 0.\n"                                 \
    "Exit status: COMMAND's; 75 (or -E N) not acquired, 76 lost while held, 69 Redis\n"                                \
    "unreachable or not answering in time, 64 usage, 65 NAME in use as another kind\n"                                 \
    "(COMMAND not run), 127 not executable.\n"

/* `dlock SUBCOMMAND --help`: that subcommand's synopsis and options, for
 * someone who knows which subcommand they want and not its flags. */
void cli_print_sub_help(const char *cmd)
{
    if (strcmp(cmd, "lock") == 0) {
        fputs("usage: " USAGE_LOCK "\n"
              "\n"
              "Run COMMAND while holding the lock NAME, and exit with its status; without\n"
              "COMMAND, hold NAME until told to stop.\n"
              "\n" HELP_HOLD_COMMON "  --fair                FIFO lock: waiters get it in the order they came\n"
              "  --read, --write       shared / exclusive side of a read-write lock\n"
              "  -s, --shared, -x, --exclusive  the same, as flock(1) names them\n"
              "  --fence-floor TOKEN   the fencing token handed out is above TOKEN\n" HELP_HOLD_END,
              stdout);
    } else if (strcmp(cmd, "semaphore") == 0) {
        fputs("usage: " USAGE_SEM "\n"
              "\n"
              "Run COMMAND holding one of PERMITS permits of the semaphore NAME.\n"
              "\n"
              "  -p, --permits PERMITS the semaphore's size, set by its first user; another\n"
              "                        size than the one stored exits 78\n"
              "  --set-permits N       resize NAME to N permits (0 or more) and exit 0,\n"
              "                        running nothing (also as NAME --set-permits N)\n" HELP_HOLD_COMMON HELP_HOLD_END,
              stdout);
    } else if (strcmp(cmd, "rate") == 0) {
        fputs("usage: " USAGE_RATE "\n"
              "\n"
              "Run COMMAND (dlock becomes it: its exit status is dlock's) once the rate\n"
              "limit NAME grants a permit; without COMMAND, take the permit and exit 0, as\n"
              "in `dlock rate -r 5/s api && curl ...`.\n"
              "\n"
              "  -r, --rate RATE[/UNIT] permits per UNIT, a duration (default 1 s): 10/s,\n"
              "                        100/m, 5/1.5s, 3600/h; a bare RATE is per second\n"
              "  -b, --burst BURST     permits an idle limit grants at once (default RATE)\n"
              "  -w, --wait DURATION   give up when no permit is due within DURATION, exit 75\n"
              "                        quietly (default: wait as long as it takes)\n"
              "  -n, --nonblock        no waiting: the same as -w 0\n"
              "  -E, --conflict-exit-code N  exit N (0 to 255) instead of 75\n"
              "  -c, --command 'SHELL COMMAND'  run it with /bin/sh -c (also after NAME)\n"
              "  --subject S           a bucket of its own for S (a user, an address)\n"
              "  --change              replace the settings stored with NAME by -r and -b;\n"
              "                        without it, others than those stored exit 78\n"
              "  --status              (after NAME) show the permits left, when the next is\n"
              "                        due, when the limit is full again, and its settings;\n"
              "                        exit 0, or 1 when NAME is not set\n"
              "  --json                with --status: one JSON object\n"
              "  -v, --verbose         say why no permit was granted, or that one was\n"
              "  -q, --quiet           no warnings (errors are still printed)\n"
              "  -h, --help            this text\n"
              "\n"
              "Exit status: COMMAND's; 75 (or -E N) no permit within the wait, 78 settings\n"
              "other than those stored, 69 Redis unreachable, 64 usage, 127 not executable.\n",
              stdout);
    } else if (strcmp(cmd, "latch") == 0) {
        fputs("usage: " USAGE_LATCH "\n"
              "\n"
              "A count-down latch: --set N once, --count-down (prints what is left),\n"
              "--await until it is zero (a latch not set yet is waited for too).\n"
              "Exit 65 when NAME is a lock or semaphore.\n"
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
              "Show who holds NAME, a lock, semaphore or latch: key: value lines (exit 0\n"
              "held, a permit used or the latch shut; 1 free).\n"
              "\n"
              "  --json                the same as one JSON object\n"
              "  -h, --help            this text\n",
              stdout);
    } else if (strcmp(cmd, "list") == 0) {
        fputs("usage: " USAGE_LIST "\n"
              "\n"
              "List every held lock, set semaphore and shut latch whose name matches the\n"
              "glob PATTERN (default *), on every master of a Cluster: one line each\n"
              "(NAME KIND STATE TOKEN TTL), exit 0 even when none.\n"
              "\n"
              "  --json                a JSON array of objects instead\n"
              "  -h, --help            this text\n",
              stdout);
    } else if (strcmp(cmd, "delete") == 0) {
        fputs("usage: " USAGE_DELETE "\n"
              "\n"
              "Delete every key of NAME (exit 0; 1 when there was none). Refused while\n"
              "NAME is held or in use (exit 75, naming what holds it) unless --force.\n"
              "Fencing tokens never go back: the counter they come from is kept.\n"
              "\n"
              "  --force               delete even while held: the holders lose it\n"
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
int cli_help_done(void)
{
    return fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE;
}
