/* A real PostgreSQL server for the seckill suites; see pg_harness.h. */
#include "pg_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "harness.h"

#define PG_USER "seckill"
#define PG_DB "seckill"

/* Deadlines for start-up and shutdown. */
static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The newest installed server: /usr/lib/postgresql/<major>/bin. */
static int find_bindir(char *out, size_t cap)
{
    const char *env = getenv("SECKILL_PG_BINDIR");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return 0;
    }
    DIR *d = opendir("/usr/lib/postgresql");
    if (!d) return -1;
    long best = -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long v = strtol(de->d_name, &end, 10);
        char probe[320];
        snprintf(probe, sizeof probe, "/usr/lib/postgresql/%s/bin/postgres", de->d_name);
        if (!*end && v > best && access(probe, X_OK) == 0) best = v;
    }
    closedir(d);
    if (best < 0) return -1;
    snprintf(out, cap, "/usr/lib/postgresql/%ld/bin", best);
    return 0;
}

/* Who the server runs as: ourselves, or "nobody" when we are root. */
typedef struct runas {
    int drop;
    uid_t uid;
    gid_t gid;
} runas;

/* PostgreSQL refuses to run as root; "nobody" exists on every Debian. */
static int pick_user(runas *ra, char *why, size_t cap)
{
    ra->drop = geteuid() == 0;
    if (!ra->drop) return 0;
    struct passwd *pw = getpwnam("nobody");
    if (!pw) {
        snprintf(why, cap, "running as root and there is no user \"nobody\" to run PostgreSQL as");
        return -1;
    }
    ra->uid = pw->pw_uid;
    ra->gid = pw->pw_gid;
    return 0;
}

/* fork + (drop root) + exec, output to `log`. The server child also asks
 * the kernel to stop it (SIGQUIT: immediate shutdown) if the test program
 * dies without stopping it; that setting must follow the setuid, which
 * clears it. */
static pid_t spawn(const runas *ra, const char *log, int die_with_parent, char *const argv[])
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid;
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int devnull = open("/dev/null", O_RDONLY);
    if (fd < 0 || devnull < 0) _exit(126);
    dup2(devnull, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (ra->drop && (setgroups(0, NULL) != 0 || setgid(ra->gid) != 0 || setuid(ra->uid) != 0)) _exit(125);
    if (die_with_parent) {
        prctl(PR_SET_PDEATHSIG, SIGQUIT);
        if (getppid() != parent) _exit(1);
    }
    execv(argv[0], argv);
    _exit(127);
}

/* A server that did not start says why in its log. */
static void tail_log(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    fprintf(stderr, "---- %s\n", path);
    while (fgets(line, sizeof line, f)) fputs(line, stderr);
    fclose(f);
}

/* The data directory is owned by nobody: rm -r as root removes it. */
static void remove_tree(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) { /* best effort */
    }
}

/* A URI with the socket directory as host: no TCP at all. */
void skt_pg_url(const skt_pg *pg, char *url, size_t cap)
{
    snprintf(url, cap, "postgresql:///%s?host=%s&port=%d&user=%s", PG_DB, pg->dir, pg->port, PG_USER);
}

/* initdb, then postgres; a port taken in between is retried. */
int skt_pg_start(skt_pg *pg, char *why, size_t cap)
{
    memset(pg, 0, sizeof *pg);
    if (find_bindir(pg->bindir, sizeof pg->bindir) != 0) {
        snprintf(why, cap, "no PostgreSQL server in /usr/lib/postgresql/*/bin (package postgresql)");
        return -1;
    }
    runas ra;
    if (pick_user(&ra, why, cap) != 0) return -1;
    snprintf(pg->dir, sizeof pg->dir, "/tmp/seckill-pg-XXXXXX");
    if (!mkdtemp(pg->dir)) {
        snprintf(why, cap, "mkdtemp failed");
        return -1;
    }
    if (ra.drop && chown(pg->dir, ra.uid, ra.gid) != 0) {
        snprintf(why, cap, "cannot hand %s to user nobody", pg->dir);
        remove_tree(pg->dir);
        return -1;
    }
    char data[192], log[192], initdb[320], postgres[320], port[16], sockdir[160];
    snprintf(data, sizeof data, "%s/data", pg->dir);
    snprintf(log, sizeof log, "%s/postgres.log", pg->dir);
    snprintf(initdb, sizeof initdb, "%s/initdb", pg->bindir);
    snprintf(postgres, sizeof postgres, "%s/postgres", pg->bindir);
    snprintf(sockdir, sizeof sockdir, "%s", pg->dir);
    char *iargv[] = {initdb,  "-D", data,   "-U",         PG_USER,     "-A",
                     "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions",
                     NULL};
    pid_t pid = spawn(&ra, log, 0, iargv);
    int st = -1;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        tail_log(log);
        snprintf(why, cap, "initdb failed (status %d)", st);
        remove_tree(pg->dir);
        return -1;
    }
    /* Durability is not under test here (processes are killed, never the
     * machine), so the server skips fsync: tests run several times faster. */
    for (int attempt = 0; attempt < 5; attempt++) {
        pg->port = th_free_port();
        snprintf(port, sizeof port, "%d", pg->port);
        char *pargv[] = {postgres,
                         "-D",
                         data,
                         "-k",
                         sockdir,
                         "-p",
                         port,
                         "-c",
                         "listen_addresses=",
                         "-c",
                         "fsync=off",
                         "-c",
                         "synchronous_commit=off",
                         "-c",
                         "full_page_writes=off",
                         "-c",
                         "max_connections=200",
                         "-c",
                         "shared_buffers=32MB",
                         "-c",
                         "dynamic_shared_memory_type=mmap",
                         "-c",
                         "huge_pages=off",
                         NULL};
        pg->pid = spawn(&ra, log, 1, pargv);
        if (pg->pid < 0) break;
        char url[400];
        snprintf(url, sizeof url, "host=%s port=%d user=%s dbname=postgres", pg->dir, pg->port, PG_USER);
        long long deadline = now_ms() + 30000;
        while (now_ms() < deadline) {
            if (waitpid(pg->pid, &st, WNOHANG) == pg->pid) {
                pg->pid = 0;
                break;
            }
            if (PQping(url) == PQPING_OK) {
                PGconn *c = PQconnectdb(url);
                PGresult *r = PQexec(c, "CREATE DATABASE " PG_DB);
                int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
                if (!ok) snprintf(why, cap, "CREATE DATABASE: %s", PQerrorMessage(c));
                PQclear(r);
                PQfinish(c);
                if (ok) return 0;
                skt_pg_stop(pg);
                return -1;
            }
            usleep(20000);
        }
        if (pg->pid > 0) {
            kill(pg->pid, SIGKILL);
            waitpid(pg->pid, NULL, 0);
            pg->pid = 0;
        }
    }
    tail_log(log);
    snprintf(why, cap, "postgres did not start");
    remove_tree(pg->dir);
    return -1;
}

/* By PID, never by name: other servers on the host are not ours. */
void skt_pg_stop(skt_pg *pg)
{
    if (pg->pid > 0) {
        kill(pg->pid, SIGINT);
        int done = 0;
        for (int i = 0; i < 1000 && !done; i++) {
            if (waitpid(pg->pid, NULL, WNOHANG) == pg->pid) done = 1;
            else usleep(10000);
        }
        if (!done) {
            kill(pg->pid, SIGKILL);
            waitpid(pg->pid, NULL, 0);
        }
        pg->pid = 0;
    }
    if (pg->dir[0]) {
        remove_tree(pg->dir);
        pg->dir[0] = '\0';
    }
}

int skt_pg_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok) fprintf(stderr, "pg harness: %s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    return ok ? 0 : -1;
}

/* Run one statement on the main database as the trusted superuser. */
static int exec_admin(const skt_pg *pg, const char *sql)
{
    char base[400];
    skt_pg_url(pg, base, sizeof base);
    PGconn *c = PQconnectdb(base);
    int rc = skt_pg_exec(c, sql);
    PQfinish(c);
    return rc;
}

/* A schema is created in microseconds, a database in most of a second. */
int skt_pg_schema(const skt_pg *pg, const char *name, char *url, size_t cap)
{
    char base[400], sql[128];
    skt_pg_url(pg, base, sizeof base);
    snprintf(sql, sizeof sql, "CREATE SCHEMA %s", name);
    if (exec_admin(pg, sql) != 0) return -1;
    /* Both spellings seckill accepts, alternately: postgres:// and postgresql://. */
    static int alternate;
    int n = snprintf(url, cap, "%s%s&options=-csearch_path%%3D%s", alternate++ % 2 ? "postgres" : "postgresql",
                     base + strlen("postgresql"), name);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* The server trusts every local connection (initdb -A trust); a rule for
 * this one role goes in front, and the reload is waited for by trying to
 * log in without the password until that is refused. */
int skt_pg_password_role(const skt_pg *pg, const char *user, const char *password, const char *schema, char *url,
                         size_t cap)
{
    char sql[512], hba[192], old[8192];
    snprintf(sql, sizeof sql, "CREATE ROLE %s LOGIN PASSWORD '%s'", user, password);
    if (exec_admin(pg, sql) != 0) return -1;
    snprintf(sql, sizeof sql, "CREATE SCHEMA %s AUTHORIZATION %s", schema, user);
    if (exec_admin(pg, sql) != 0) return -1;
    snprintf(hba, sizeof hba, "%s/data/pg_hba.conf", pg->dir);
    FILE *f = fopen(hba, "r");
    if (!f) return -1;
    size_t n = fread(old, 1, sizeof old - 1, f);
    fclose(f);
    old[n] = '\0';
    if (!(f = fopen(hba, "w"))) return -1;
    fprintf(f, "local all %s scram-sha-256\n%s", user, old);
    if (fclose(f) != 0 || exec_admin(pg, "SELECT pg_reload_conf()") != 0) return -1;
    int n_url = snprintf(url, cap, "postgresql:///seckill?host=%s&port=%d&user=%s&options=-csearch_path%%3D%s", pg->dir,
                         pg->port, user, schema);
    if (n_url < 0 || (size_t)n_url >= cap) return -1;
    for (long long deadline = now_ms() + 10000; now_ms() < deadline; usleep(20000)) {
        PGconn *c = PQconnectdb(url);
        int refused = PQstatus(c) != CONNECTION_OK;
        PQfinish(c);
        if (refused) return 0;
    }
    return -1;
}
