/*
 * A real PostgreSQL server for the seckill suites, like tests/harness.c's
 * redis-server: initdb into a private temp dir, `postgres` listening only
 * on a unix socket in that dir (named after a free port), stopped by PID.
 * Tests may run as root, which PostgreSQL refuses: the server then runs as
 * the unprivileged user "nobody". Binaries come from SECKILL_PG_BINDIR or
 * the newest /usr/lib/postgresql/N/bin (Debian's layout).
 */
#ifndef SECKILL_PG_HARNESS_H
#define SECKILL_PG_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#include <libpq-fe.h>

typedef struct skt_pg {
    pid_t pid;
    int port;
    char dir[128]; /* data dir, socket and logs */
    char bindir[256];
} skt_pg;

/* Start a server. 0 on success; -1 with a reason in why[cap] (not
 * installed, cannot drop root, did not start). */
int skt_pg_start(skt_pg *pg, char *why, size_t cap);

/* Fast shutdown (SIGINT), SIGKILL after 10 s, remove the directory. */
void skt_pg_stop(skt_pg *pg);

/* A fresh, empty schema `name` and a libpq URL whose search_path is it,
 * so each test starts from an empty database as it does with SQLite.
 * 0 on success. */
int skt_pg_schema(const skt_pg *pg, const char *name, char *url, size_t cap);

/* Run one statement on `c`; 0, or -1 with libpq's message on stderr. */
int skt_pg_exec(PGconn *c, const char *sql);

/* A libpq URL of the server's main database (no search_path). */
void skt_pg_url(const skt_pg *pg, char *url, size_t cap);

/* A login role `user` that must give `password` (scram-sha-256, for this
 * role only: every other stays trusted) and a fresh schema `schema` it
 * owns; a libpq URL of that schema as that user, without the password, in
 * url[cap]. 0 on success. */
int skt_pg_password_role(const skt_pg *pg, const char *user, const char *password, const char *schema, char *url,
                         size_t cap);

#endif
