/* The operator's view of a deployment: `dlock list` (everything held,
 * as a table or JSON), `dlock delete` (what a crashed program left under
 * a name) and `dlock semaphore NAME --set-permits N` (a new size). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ------------------------------------------------------------------------ */
/* list                                                                      */
/* ------------------------------------------------------------------------ */

/* The columns of one entry of `list`, as text. */
typedef struct list_row {
    char *name; /* escaped (control characters, backslashes) */
    const char *kind;
    char state[128]; /* who holds it, or how much of it is used */
    char token[24];
    char ttl[32];
} list_row;

/* `s` escaped as cli_put_escaped() writes it, malloc'd (NULL when out of
 * memory): a row's width must be that of what is printed. */
static char *escaped(const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    cli_put_escaped(f, s);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* What the table shows of one entry: each kind's own facts in STATE, and
 * "-" where a kind has no token or no lease. */
static void fill_row(const dlock_entry *e, list_row *r)
{
    long ttl = -1;
    r->kind = dlock_kind_name(e->kind);
    snprintf(r->token, sizeof r->token, "-");
    switch (e->kind) {
    case DLOCK_KIND_LOCK:
    case DLOCK_KIND_FAIR_LOCK:
        snprintf(r->state, sizeof r->state, "%s", e->info.lock.holder);
        snprintf(r->token, sizeof r->token, "%llu", (unsigned long long)e->info.lock.last_token);
        ttl = e->info.lock.ttl_ms;
        break;
    case DLOCK_KIND_RWLOCK:
        if (e->info.rwlock.writer[0]) {
            snprintf(r->state, sizeof r->state, "writer %s", e->info.rwlock.writer);
            snprintf(r->token, sizeof r->token, "%llu", (unsigned long long)e->info.rwlock.last_token);
        } else {
            snprintf(r->state, sizeof r->state, "%ld reader%s", e->info.rwlock.readers,
                     e->info.rwlock.readers == 1 ? "" : "s");
        }
        ttl = e->info.rwlock.ttl_ms;
        break;
    case DLOCK_KIND_PSEM:
        snprintf(r->state, sizeof r->state, "%ld/%ld permits used", e->info.psem.used, e->info.psem.permits);
        ttl = e->info.psem.ttl_ms;
        break;
    case DLOCK_KIND_SEMAPHORE: snprintf(r->state, sizeof r->state, "%ld available", e->info.semaphore.available); break;
    case DLOCK_KIND_LATCH: snprintf(r->state, sizeof r->state, "count %ld", e->info.latch.count); break;
    default: snprintf(r->state, sizeof r->state, "-"); break;
    }
    if (ttl >= 0) cli_human_ms(ttl, r->ttl, sizeof r->ttl);
    else snprintf(r->ttl, sizeof r->ttl, "-");
}

/* The text form: a header and one line per entry, columns as wide as
 * their widest cell, so that a person can read it down. */
static int print_list_text(const dlock_entry *entries, size_t n)
{
    list_row *rows = calloc(n ? n : 1, sizeof *rows);
    if (!rows) return -1;
    int w[4] = {4, 4, 5, 5}; /* NAME, KIND, STATE, TOKEN */
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        fill_row(&entries[i], &rows[i]);
        if (!(rows[i].name = escaped(entries[i].name))) rc = -1;
        int len[4] = {rows[i].name ? (int)strlen(rows[i].name) : 0, (int)strlen(rows[i].kind),
                      (int)strlen(rows[i].state), (int)strlen(rows[i].token)};
        for (int c = 0; c < 4; c++)
            if (len[c] > w[c]) w[c] = len[c];
    }
    if (rc == 0) {
        printf("%-*s  %-*s  %-*s  %-*s  %s\n", w[0], "NAME", w[1], "KIND", w[2], "STATE", w[3], "TOKEN", "TTL");
        for (size_t i = 0; i < n; i++)
            printf("%-*s  %-*s  %-*s  %-*s  %s\n", w[0], rows[i].name, w[1], rows[i].kind, w[2], rows[i].state, w[3],
                   rows[i].token, rows[i].ttl);
    }
    for (size_t i = 0; i < n; i++) free(rows[i].name);
    free(rows);
    return rc;
}

/* One entry as a JSON object: the same members for every kind, null
 * where the kind has no such thing, tokens as strings (they may pass
 * 2^53). */
static void print_entry_json(const dlock_entry *e)
{
    const char *holder = NULL;
    char token[24];
    int has_token = 0, has_ttl = 0, has_readers = 0, is_psem = e->kind == DLOCK_KIND_PSEM;
    long ttl = -1;
    if (e->kind == DLOCK_KIND_LOCK || e->kind == DLOCK_KIND_FAIR_LOCK) {
        holder = e->info.lock.holder;
        snprintf(token, sizeof token, "%llu", (unsigned long long)e->info.lock.last_token);
        has_token = 1;
        ttl = e->info.lock.ttl_ms;
    } else if (e->kind == DLOCK_KIND_RWLOCK) {
        holder = e->info.rwlock.writer[0] ? e->info.rwlock.writer : NULL;
        has_token = holder != NULL;
        snprintf(token, sizeof token, "%llu", (unsigned long long)e->info.rwlock.last_token);
        has_readers = 1;
        ttl = e->info.rwlock.ttl_ms;
    } else if (is_psem) {
        ttl = e->info.psem.ttl_ms;
    }
    has_ttl = ttl >= 0;
    fputs("{\"name\":", stdout);
    cli_json_string(stdout, e->name);
    cli_json_str_member(stdout, "kind", dlock_kind_name(e->kind));
    cli_json_str_member(stdout, "holder", holder);
    cli_json_num_member(stdout, "readers", has_readers ? e->info.rwlock.readers : 0, has_readers);
    cli_json_str_member(stdout, "token", has_token ? token : NULL);
    cli_json_num_member(stdout, "ttl_ms", ttl, has_ttl);
    cli_json_num_member(stdout, "permits", is_psem ? e->info.psem.permits : 0, is_psem);
    cli_json_num_member(stdout, "used", is_psem ? e->info.psem.used : 0, is_psem);
    cli_json_num_member(stdout, "available", e->kind == DLOCK_KIND_SEMAPHORE ? e->info.semaphore.available : 0,
                        e->kind == DLOCK_KIND_SEMAPHORE);
    cli_json_num_member(stdout, "count", e->kind == DLOCK_KIND_LATCH ? e->info.latch.count : 0,
                        e->kind == DLOCK_KIND_LATCH);
    fputc('}', stdout);
}

/* The JSON form: one array, an object per line, so that both jq and grep
 * read it. */
static void print_list_json(const dlock_entry *entries, size_t n)
{
    fputs(n ? "[\n" : "[]\n", stdout);
    for (size_t i = 0; i < n; i++) {
        print_entry_json(&entries[i]);
        fputs(i + 1 < n ? ",\n" : "\n]\n", stdout);
    }
}

/* Every lock held, semaphore set and latch not yet open whose name
 * matches PATTERN (all of them without one), on every master of a
 * Cluster: what an operator looks at first. Exit 0 even when nothing
 * matches; a listing is an answer, not a test. */
int cli_cmd_list(const char *url, int argc, char **argv)
{
    int json = 0, rc = cli_json_options(USAGE_LIST, argc, argv, &json);
    if (rc < 0) return cli_help_done();
    if (rc != 0) return rc;
    if (optind + 1 < argc) return cli_usage_error(USAGE_LIST, "list: too many arguments");
    const char *pattern = optind < argc ? argv[optind] : "*";
    if (!*pattern || strpbrk(pattern, "{}"))
        return cli_usage_error(USAGE_LIST, "bad PATTERN '%s': a glob (* ? [...]) without '{' or '}'",
                               cli_shown(pattern));
    dlock_client *client = NULL;
    if ((rc = cli_open_client(url, NULL, &client)) != 0) return rc;
    dlock_entry *entries = NULL;
    size_t n = 0;
    dlock_status st = dlock_list(client, pattern, &entries, &n);
    if (st != DLOCK_OK) {
        cli_errorf("cannot list: %s", dlock_last_error());
        rc = cli_exit_for(st);
    } else if (json) {
        print_list_json(entries, n);
    } else if (print_list_text(entries, n) != 0) {
        cli_errorf("out of memory");
        rc = EXIT_SOFTWARE;
    }
    if (fflush(stdout) != 0 && rc == 0) rc = EXIT_SOFTWARE;
    dlock_list_free(entries, n);
    dlock_client_free(client);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* delete                                                                    */
/* ------------------------------------------------------------------------ */

/* Remove every key of NAME: for a name a crashed program left set (a
 * semaphore's size, a latch that never opened), or one to use as another
 * kind. Refused while anything holds it (exit 75, the library's message
 * naming what), unless --force: an operator must say so to break holds. */
int cli_cmd_delete(const char *url, int argc, char **argv)
{
    int force = 0, first = 1;
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        cli_print_sub_help(argv[0]);
        return cli_help_done();
    }
    if (argc > 1 && strcmp(argv[1], "--force") == 0) force = 1, first = 2;
    const char *name;
    int rc = cli_one_name(USAGE_DELETE, argc, argv, first, &name);
    if (rc != 0) return rc;
    dlock_client *client = NULL;
    if ((rc = cli_open_client(url, NULL, &client)) != 0) return rc;
    int deleted = 0;
    dlock_status st = dlock_delete(client, name, force, &deleted);
    if (st == DLOCK_ERR_NOT_OWNER) {
        cli_errorf("cannot delete '%s': %s", name, dlock_last_error());
        rc = EXIT_BUSY;
    } else if (st != DLOCK_OK) {
        cli_errorf("cannot delete '%s': %s", name, dlock_last_error());
        rc = cli_exit_for(st);
    } else {
        cli_put_escaped(stdout, name);
        if (deleted) printf(": deleted %d key%s\n", deleted, deleted == 1 ? "" : "s");
        else fputs(": nothing to delete\n", stdout);
        rc = deleted ? 0 : EXIT_NOT_HELD;
        if (fflush(stdout) != 0) rc = EXIT_SOFTWARE;
    }
    dlock_client_free(client);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* semaphore NAME --set-permits N                                            */
/* ------------------------------------------------------------------------ */

/* Give the semaphore `dlock semaphore` holds (the permit-expirable one)
 * a new size, making it if need be: the one way to change what a -p
 * that differs is refused against. Permits held beyond a smaller size
 * stay held until released or expired. */
int cli_sem_resize(const char *url, const char *name, long permits)
{
    dlock_client *client = NULL;
    int rc = cli_open_client(url, NULL, &client);
    if (rc != 0) return rc;
    dlock_psem *sem = NULL;
    dlock_status st = dlock_psem_new(client, name, &sem);
    if (st == DLOCK_OK) st = dlock_psem_resize(sem, permits);
    if (st != DLOCK_OK) {
        cli_errorf("cannot resize semaphore '%s': %s", name, dlock_last_error());
        rc = cli_exit_for(st);
    } else {
        cli_put_escaped(stdout, name);
        printf(": %ld permit%s\n", permits, permits == 1 ? "" : "s");
        if (fflush(stdout) != 0) rc = EXIT_SOFTWARE;
    }
    dlock_psem_free(sem);
    dlock_client_free(client);
    return rc;
}
