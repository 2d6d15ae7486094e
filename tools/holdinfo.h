/*
 * Who holds a lock, in words an operator can act on: the host, PID and
 * command line of the `dlock lock` that holds it, and since when.
 *
 * The library knows a holder only by its owner string (a random client id
 * and two numbers). So `dlock lock`, right after acquiring, writes a hash
 * of its own beside the lock, in the lock's slot: "dlock:{NAME}:info" for a
 * plain or fair lock, "dlock:{NAME}:rw:info" for a write hold. Its fields:
 * owner and token (copied by the script from the lock's own hash, so they
 * name this hold exactly), since_ms (the server's clock), host, pid and
 * command. It lives a third longer than the lease and is refreshed by a
 * thread of ours every third of the lease, as the watchdog renews the
 * lease, and deleted at release while it is still ours. A dlock killed with
 * -9 leaves it behind for at most that long; `dlock status` shows it only
 * while its owner and token are those of the current hold.
 *
 * Readers, RedLock and semaphore permits record nothing: a read-write lock
 * has one hash for any number of readers, a RedLock's hold is spread over
 * masters that `status` does not ask, and `status` shows a semaphore's
 * counts, not who holds its permits.
 */
#ifndef DLOCK_TOOLS_HOLDINFO_H
#define DLOCK_TOOLS_HOLDINFO_H

#include <stdatomic.h>
#include <stdint.h>

#include "dlock.h"

/* Longest command line kept, in bytes; a longer one is cut and ends in
 * "...". */
#define HOLDINFO_COMMAND_MAX 200

/* The lock kinds that record who holds them. */
typedef enum holdinfo_kind { HOLDINFO_LOCK, HOLDINFO_WRITE } holdinfo_kind;

typedef struct holdinfo holdinfo;

/*
 * Record that this process holds `name` (acquired through `client` with
 * `token` and a lease of `lease_ms`) while running `command`, and keep the
 * record alive until holdinfo_end(), or until *lost (may be NULL) becomes
 * nonzero: a hold known lost needs no refresh. Returns at once: a thread
 * of its own writes the record (through `client`) and then refreshes it
 * through a client of its own, made from `url` and `opts` with short
 * timeouts (see keeper() in holdinfo.c). Best effort: when the record
 * cannot be written (the server refused, or the hold is already gone) the
 * hold goes on without it; NULL only when the thread cannot start.
 */
holdinfo *holdinfo_start(dlock_client *client, const char *url, const dlock_options *opts, holdinfo_kind kind,
                         const char *name, uint64_t token, long lease_ms, char *const *command, atomic_int *lost);

/*
 * Stop refreshing the record and, with `remove`, have it deleted if it is
 * still this hold's. Returns at once (NULL is fine): the keeper's thread
 * sends the delete, so call it just before the release, which then shares
 * the round trip. Once a hold ends the record is of no use to anyone, and
 * one that cannot be deleted (Redis unreachable) expires by itself.
 */
void holdinfo_end(holdinfo *h, int remove);

/* Wait for the keeper (its delete included; each of its calls ends within
 * the client's command timeout) and free `h` (NULL is fine). */
void holdinfo_free(holdinfo *h);

/* What a holder recorded about itself. */
typedef struct holdinfo_meta {
    int known; /* 1 when the current hold's record was found */
    char host[256];
    long pid;
    char command[HOLDINFO_COMMAND_MAX + 1];
    long long since_ms; /* when it was acquired, by the server's clock */
} holdinfo_meta;

/* What `dlock status` shows beyond the library's inspect calls. */
typedef struct holdinfo_view {
    long long now_ms;    /* the server's clock when read */
    char lock_token[24]; /* the current plain or fair hold's fencing token, "" when free */
    char rw_token[24];   /* the current write hold's, "" when none */
    holdinfo_meta lock, rw;
    long waiting;    /* waiting for the plain or fair lock; -1 unknown */
    long rw_waiting; /* waiting for the read-write lock; -1 unknown */
} holdinfo_view;

/*
 * Read the records and the waiters of `name`. `cluster`: the client talks
 * to a Redis Cluster, where waiters listen with sharded pub/sub. The
 * waiters are live entries of the fair queue, the processes registered as
 * waiting for the plain lock (dlock:{NAME}:w, until their deadline), and
 * processes subscribed to the lock's channel (RedLock, older clients), so
 * a process that has just acquired after waiting may still count for
 * about a second, until its subscription is dropped.
 */
dlock_status holdinfo_read(dlock_client *client, const char *name, int cluster, holdinfo_view *v);

/* `command` as one line a shell would read back the same (arguments
 * quoted where needed), cut to HOLDINFO_COMMAND_MAX bytes; into out[size]. */
void holdinfo_command_line(char *const *command, char *out, size_t size);

#endif
