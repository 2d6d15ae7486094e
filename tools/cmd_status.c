/* `dlock status` (who holds NAME, as text or JSON) and `dlock unlock
 * --force` (break it). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "holdinfo.h"

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
    dlock_psem_info psem;     /* what `dlock semaphore` holds */
    dlock_semaphore_info sem; /* the library's semaphore without leases */
    dlock_latch_info latch;
    holdinfo_view v;
    /* The hold described by token..lease_left: the plain or fair lock when
     * held, else the write hold, else none. */
    const char *token;
    const holdinfo_meta *meta;
    long lease_left_ms; /* -1 when free */
    const char *kind;   /* what NAME is used as (dlock_kind_name), NULL: nothing */
    int in_use;         /* exit 0: a lock or permit held, a latch shut */
} status_report;

/* A latch is open once counted down to zero (kept as 0 a while), shut
 * while set above it; NULL when not set. */
static const char *latch_state(const dlock_latch_info *l)
{
    return !l->exists ? NULL : l->count > 0 ? "shut" : "open";
}

/* What NAME is in use as, one kind at most (the library refuses a
 * second), and whether that counts as held for the exit status. */
static void classify(status_report *r)
{
    r->in_use = 1;
    if (r->lock.held) r->kind = dlock_kind_name(DLOCK_KIND_LOCK);
    else if (r->rw.held) r->kind = dlock_kind_name(DLOCK_KIND_RWLOCK);
    else if (r->psem.exists) r->kind = dlock_kind_name(DLOCK_KIND_PSEM), r->in_use = r->psem.used > 0;
    else if (r->sem.exists) r->kind = dlock_kind_name(DLOCK_KIND_SEMAPHORE), r->in_use = 0;
    else if (r->latch.exists) r->kind = dlock_kind_name(DLOCK_KIND_LATCH), r->in_use = r->latch.count > 0;
    else r->in_use = 0;
}

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
    cli_json_str_member(stdout, "kind", r->kind);
    cli_json_num_member(stdout, "permits", r->psem.permits, r->psem.exists);
    cli_json_num_member(stdout, "permits_used", r->psem.used, r->psem.exists);
    cli_json_num_member(stdout, "permits_ttl_ms", r->psem.ttl_ms, r->psem.exists && r->psem.ttl_ms >= 0);
    cli_json_num_member(stdout, "available", r->sem.available, r->sem.exists);
    cli_json_num_member(stdout, "latch_count", r->latch.count, r->latch.exists);
    cli_json_str_member(stdout, "latch", latch_state(&r->latch));
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
           (unsigned long long)r->lock.last_token, r->rw.writer[0] ? r->rw.writer : "-", r->rw.readers, r->rw.ttl_ms,
           (unsigned long long)r->rw.last_token);
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
        cli_human_ms(r->v.now_ms - m->since_ms, ago, sizeof ago);
        printf("\nsince: %s (%s ago)\n", buf, ago);
    } else {
        fputs("\nsince: -\n", stdout);
    }
    if (r->lease_left_ms >= 0) cli_human_ms(r->lease_left_ms, buf, sizeof buf);
    printf("lease_left: %s\n", r->lease_left_ms >= 0 ? buf : "-");
    printf("kind: %s\n", r->kind ? r->kind : "-");
    put_count("permits", r->psem.exists ? r->psem.permits : -1);
    put_count("permits_used", r->psem.exists ? r->psem.used : -1);
    if (r->psem.exists && r->psem.ttl_ms >= 0) cli_human_ms(r->psem.ttl_ms, buf, sizeof buf);
    printf("permits_ttl: %s\n", r->psem.exists && r->psem.ttl_ms >= 0 ? buf : "-");
    put_count("available", r->sem.exists ? r->sem.available : -1);
    put_count("latch_count", r->latch.exists ? r->latch.count : -1);
    printf("latch: %s\n", r->latch.exists ? latch_state(&r->latch) : "-");
}

/* Show who holds NAME, for operators and for scripts (`key: value` lines
 * or --json, exit 0 when in use, 1 when free). NAME may be a plain or
 * fair lock (`lock`, `lock --fair`), a read-write lock (`lock --read`,
 * `--write`), a semaphore or a latch: different keys, one kind at a time,
 * and the lock lines come first as they always did, so scripts that read
 * them keep working; `kind` says which it is. */
int cli_cmd_status(const char *url, int argc, char **argv)
{
    int json = 0, rc = cli_json_options(USAGE_STATUS, argc, argv, &json);
    if (rc < 0) return cli_help_done();
    if (rc != 0) return rc;
    status_report r = {.name = NULL};
    /* getopt took a "--" that ends the options: one_name wants it back, so
     * that a NAME starting with '-' is still a NAME. */
    int first = optind > 1 && strcmp(argv[optind - 1], "--") == 0 ? optind - 1 : optind;
    rc = cli_one_name(USAGE_STATUS, argc, argv, first, &r.name);
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
    if (st == DLOCK_OK) st = dlock_psem_inspect(client, r.name, &r.psem);
    if (st == DLOCK_OK) st = dlock_semaphore_inspect(client, r.name, &r.sem);
    if (st == DLOCK_OK) st = dlock_latch_inspect(client, r.name, &r.latch);
    if (st == DLOCK_OK) st = holdinfo_read(client, r.name, cluster, &r.v);
    if (st != DLOCK_OK) {
        cli_errorf("cannot inspect '%s': %s", r.name, dlock_last_error());
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
        classify(&r);
        if (json) print_status_json(&r);
        else print_status_text(&r);
        rc = r.in_use ? 0 : EXIT_NOT_HELD;
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
    int rc = cli_one_name(USAGE_UNLOCK, argc, argv, 2, &name);
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
