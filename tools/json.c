/* The JSON printer of `dlock status --json` and `dlock list --json`:
 * strings escaped and made valid UTF-8, and members that may be null. */
#include <stdio.h>

#include "cli.h"

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
void cli_json_string(FILE *f, const char *s)
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
void cli_json_str_member(FILE *f, const char *key, const char *value)
{
    fprintf(f, ",\"%s\":", key);
    if (value) cli_json_string(f, value);
    else fputs("null", f);
}

void cli_json_num_member(FILE *f, const char *key, long long value, int known)
{
    if (known) fprintf(f, ",\"%s\":%lld", key, value);
    else fprintf(f, ",\"%s\":null", key);
}
