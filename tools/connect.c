/* Clients of the tool: the global options (--password-file, --timeout)
 * every one gets, and the exit status of a failed library call. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

/* The password from --password-file or DLOCK_PASSWORD, or NULL: given to
 * every client in place of the URLs' own (see cli_open_client). */
static const char *password;
/* --timeout: connect and command timeout of every client, 0 for the
 * library's defaults (2 s to connect, 5 s a command). */
static long timeout_ms;

/* Set once by main() before any client is made. */
void cli_set_client_globals(const char *pw, long timeout)
{
    password = pw;
    timeout_ms = timeout;
}

/* --timeout, for a subcommand that derives its own timeouts. */
long cli_timeout_ms(void)
{
    return timeout_ms;
}

/* The sysexits status for a failed library call outside of `lock`'s own
 * special cases: callers of the tool care whether retrying later can help
 * (69), whether they typed something wrong (64), or whether NAME is used
 * as another kind of lock, semaphore or latch (65), which no retry mends. */
int cli_exit_for(dlock_status st)
{
    switch (st) {
    case DLOCK_ERR_CONNECT:
    case DLOCK_ERR_AUTH: return EXIT_UNAVAILABLE;
    case DLOCK_ERR_URL:
    case DLOCK_ERR_INVALID: return EXIT_USAGE;
    case DLOCK_ERR_TIMEOUT: return EXIT_BUSY;
    case DLOCK_ERR_LOST: return EXIT_LOST;
    case DLOCK_ERR_WRONG_KIND: return EXIT_WRONG_KIND;
    default: return EXIT_SOFTWARE;
    }
}

/* The options every client of ours gets: the caller's `base` (may be
 * NULL), with the password of --password-file or DLOCK_PASSWORD and the
 * timeouts of --timeout. */
dlock_options cli_client_options(const dlock_options *base)
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
int cli_open_client(const char *url, const dlock_options *opts, dlock_client **out)
{
    dlock_url parsed;
    if (dlock_url_parse(url, &parsed) != DLOCK_OK) {
        cli_errorf("bad Redis URL: %s", dlock_last_error());
        return EXIT_USAGE;
    }
    /* Said once, whatever the number of -u: a choice nobody should make
     * by accident. */
    static int warned;
    if (parsed.tls && !parsed.tls_verify && !warned++)
        cli_warnf(
            "warning: TLS certificate verification is off (verify=no): anyone on the path can pose as the server");
    dlock_url_free(&parsed);
    dlock_options o = cli_client_options(opts);
    dlock_status st = dlock_client_new(url, &o, out);
    if (st != DLOCK_OK) {
        cli_errorf("cannot connect to Redis: %s", dlock_last_error());
        return cli_exit_for(st);
    }
    return 0;
}

/* Cap the connect and command timeouts of `o` at `wait_ms` plus a second,
 * so that no single call outlasts a -w by much. */
void cli_cap_timeouts(dlock_options *o, long wait_ms)
{
    if (wait_ms == DLOCK_WAIT_FOREVER) return;
    dlock_options g = cli_client_options(o);
    long cap = wait_ms + 1000;
    int connect = g.connect_timeout_ms ? g.connect_timeout_ms : 2000;
    int command = g.command_timeout_ms ? g.command_timeout_ms : 5000;
    o->connect_timeout_ms = connect < cap ? connect : (int)cap;
    o->command_timeout_ms = command < cap ? command : (int)cap;
}
