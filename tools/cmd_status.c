/* `dlock status` (who holds NAME, as text or JSON) and `dlock unlock
 * --force` (break it). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "holdinfo.h"

/* Check that a subcommand got exactly one NAME and no options; shared by
 * status and unlock. Returns 0 or a usage exit status. */
static int one_name(const char *synopsis, int argc, char **argv, int first, const char **name)
{
    if (first < argc && argv[first][0] == '-' && argv[first][1] != '\0' && strcmp(argv[first], "--") != 0)
        return cli_unknown_option(synopsis, argv[first]);
    if (first < argc && strcmp(argv[first], "--") == 0) first++;
    if (first >= argc) return cli_usage_error(synopsis, "%s: missing NAME", argv[0]);
    if (first + 1 < argc) return cli_usage_error(synopsis, "%s: too many arguments", argv[0]);
    *name = argv[first];
    return cli_check_name(synopsis, *name, 0);
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
    cli_json_string(stdout, r->name);
    fprintf(stdout, ",\"held\":%s", r->lock.held || r->rw.held ? "true" : "false");
    cli_json_str_member(stdout, "holder", r->lock.held ? r->lock.holder : NULL);
    cli_json_num_member(stdout, "count", r->lock.held ? r->lock.hold_count : 0, 1);
    cli_json_num_member(stdout, "ttl_ms", r->lock.ttl_ms, 1);
    snprintf(token, sizeof token, "%llu", (unsigned long long)r->lock.last_token);
    cli_json_str_member(stdout, "last_token", token);
    cli_json_str_member(stdout, "writer", r->rw.writer[0] ? r->rw.writer : NULL);
    cli_json_num_member(stdout, "readers", r->rw.readers, 1);
    cli_json_num_member(stdout, "rw_ttl_ms", r->rw.ttl_ms, 1);
    snprintf(token, sizeof token, "%llu", (unsigned long long)r->rw.last_token);
    cli_json_str_member(stdout, "rw_last_token", token);
    cli_json_num_member(stdout, "waiting", r->v.waiting, r->v.waiting >= 0);
    cli_json_num_member(stdout, "rw_waiting", r->v.rw_waiting, r->v.rw_waiting >= 0);
    cli_json_str_member(stdout, "token", r->token);
    cli_json_str_member(stdout, "host", m ? m->host : NULL);
    cli_json_num_member(stdout, "pid", m ? m->pid : 0, m != NULL);
    cli_json_str_member(stdout, "command", m ? m->command : NULL);
    if (m) utc_time(m->since_ms, since, sizeof since);
    cli_json_str_member(stdout, "since", m ? since : NULL);
    cli_json_num_member(stdout, "since_ms", m ? m->since_ms : 0, m != NULL);
    cli_json_num_member(stdout, "held_for_ms", m ? r->v.now_ms - m->since_ms : 0, m != NULL);
    cli_json_num_member(stdout, "lease_left_ms", r->lease_left_ms, r->lease_left_ms >= 0);
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
    cli_put_escaped(stdout, m ? m->host : "-");
    if (m) printf("\npid: %ld\n", m->pid);
    else fputs("\npid: -\n", stdout);
    fputs("command: ", stdout);
    cli_put_escaped(stdout, m ? m->command : "-");
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
int cli_cmd_status(const char *url, int argc, char **argv)
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
        case 'h': cli_print_sub_help(argv[0]); return cli_help_done();
        default: return cli_unknown_option(USAGE_STATUS, cli_bad_option(argv));
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
    if ((rc = cli_open_client(url, NULL, &client)) != 0) return rc;
    dlock_status st = dlock_lock_inspect(client, r.name, &r.lock);
    if (st == DLOCK_OK) st = dlock_rwlock_inspect(client, r.name, &r.rw);
    if (st == DLOCK_OK) st = holdinfo_read(client, r.name, cluster, &r.v);
    if (st != DLOCK_OK) {
        cli_errorf("cannot inspect lock '%s': %s", r.name, dlock_last_error());
        rc = cli_exit_for(st);
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
int cli_cmd_unlock(const char *url, int argc, char **argv)
{
    const char *name;
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        cli_print_sub_help(argv[0]);
        return cli_help_done();
    }
    if (argc < 2 || strcmp(argv[1], "--force") != 0)
        return cli_usage_error(USAGE_UNLOCK, "unlock: --force is required (this breaks another holder's lock)");
    int rc = one_name(USAGE_UNLOCK, argc, argv, 2, &name);
    if (rc != 0) return rc;
    dlock_client *client = NULL;
    if ((rc = cli_open_client(url, NULL, &client)) != 0) return rc;
    /* Whatever `status` would show as holding NAME: the plain or fair lock
     * and the read-write lock. */
    int lock_held = 0, rw_held = 0;
    dlock_status st = dlock_lock_force_unlock(client, name, &lock_held);
    if (st == DLOCK_OK) st = dlock_rwlock_force_unlock(client, name, &rw_held);
    if (st != DLOCK_OK) {
        cli_errorf("cannot unlock '%s': %s", name, dlock_last_error());
        rc = cli_exit_for(st);
    } else {
        cli_put_escaped(stdout, name);
        fputs(lock_held || rw_held ? ": was held, now unlocked\n" : ": was not held\n", stdout);
        rc = lock_held || rw_held ? 0 : EXIT_NOT_HELD;
        if (fflush(stdout) != 0) rc = EXIT_SOFTWARE;
    }
    dlock_client_free(client);
    return rc;
}
