/* The tool's messages: one line on stderr each, escaped, prefixed with
 * the program name. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Write `s` with control characters and backslashes escaped (\n, \t,
 * \xNN, \\): a NAME, COMMAND or server message holding a newline or an
 * escape sequence must not break a one-line message or the terminal. */
void cli_put_escaped(FILE *f, const char *s)
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
        cli_put_escaped(stderr, msg);
        free(msg);
    } else {
        fputs("(out of memory formatting a message)", stderr);
    }
    if (tail) fputs(tail, stderr);
    fputc('\n', stderr);
}

/* Every error is one line on stderr prefixed with the program name, so that
 * cron mail and logs show what failed without a second line of context. */
void cli_errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(NULL, fmt, ap);
    va_end(ap);
}

/* A usage error names the problem and, on the same line, the synopsis of
 * the subcommand, so the fix is on screen. Returns the exit status. */
int cli_usage_error(const char *synopsis, const char *fmt, ...)
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
int cli_general_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("; see 'dlock --help'", fmt, ap);
    va_end(ap);
    return EXIT_USAGE;
}

/* -q: warnings about things that still worked are not wanted. */
static int quiet;

void cli_set_quiet(int on)
{
    quiet = on;
}

/* A warning: something worked, but not quite as asked (TLS without
 * verification, a release that failed after COMMAND ran). -q hides it;
 * errors are never hidden. */
void cli_warnf(const char *fmt, ...)
{
    if (quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vmessage(NULL, fmt, ap);
    va_end(ap);
}

/* `s` as a message shows it: whole up to SHOWN_MAX bytes, else its start,
 * "..." and its length, so that a 10 KB argument does not bury the line
 * that says what is wrong with it. */
#define SHOWN_MAX 64
const char *cli_shown(const char *s)
{
    static char buf[SHOWN_MAX + 48];
    size_t n = strlen(s);
    if (n <= SHOWN_MAX) return s;
    snprintf(buf, sizeof buf, "%.*s... (%zu bytes)", SHOWN_MAX, s, n);
    return buf;
}

/* A span of time as a person reads it at a glance: 850ms, 12.3s, 3m12s,
 * 2h05m, 3d04h. */
void cli_human_ms(long long ms, char *buf, size_t size)
{
    if (ms < 0) ms = 0;
    long long s = ms / 1000;
    if (ms < 1000) snprintf(buf, size, "%lldms", ms);
    else if (s < 60) snprintf(buf, size, "%lld.%llds", s, ms % 1000 / 100);
    else if (s < 3600) snprintf(buf, size, "%lldm%02llds", s / 60, s % 60);
    else if (s < 86400) snprintf(buf, size, "%lldh%02lldm", s / 3600, s % 3600 / 60);
    else snprintf(buf, size, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
}
