/*
 * dlock.h -- distributed locks on Redis.
 *
 * This header is the whole public API of libdlock. Everything in src/ is
 * private and may change. Every call returns a dlock_status; on failure the
 * calling thread can read a one-line human explanation with
 * dlock_last_error(). The library never exits, never prints and never
 * raises signals.
 *
 * Thread model: one dlock_client per process is the normal use. It is safe
 * to share between threads; each command borrows a connection from the
 * client's pool, so two threads never interleave on one socket. A client
 * must not be used across fork(): create a new one in the child.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the exported functions; everything else in the library is hidden. */
#if defined(__GNUC__)
#define DLOCK_API __attribute__((visibility("default")))
#else
#define DLOCK_API
#endif

#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 1
#define DLOCK_VERSION_PATCH 0
#define DLOCK_VERSION "0.1.0"

/* Status codes. DLOCK_OK is zero, every failure is negative. */
typedef enum dlock_status {
    DLOCK_OK = 0,
    DLOCK_ERR_INVALID = -1,   /* a bad argument: NULL, empty or malformed name, bad count */
    DLOCK_ERR_URL = -2,       /* the connection URL could not be parsed */
    DLOCK_ERR_CONNECT = -3,   /* Redis unreachable, connection lost, or command timed out */
    DLOCK_ERR_AUTH = -4,      /* AUTH or SELECT refused by the server */
    DLOCK_ERR_TIMEOUT = -5,   /* the lock was not acquired within the wait time */
    DLOCK_ERR_NOT_OWNER = -6, /* release by a thread that does not hold the lock */
    DLOCK_ERR_LOST = -7,      /* the lock's lease ended while it was held */
    DLOCK_ERR_REDIS = -8,     /* the server answered with an error or an unexpected reply */
    DLOCK_ERR_NOMEM = -9,     /* out of memory */
    DLOCK_ERR_OVERFLOW = -10, /* a global ID sequence would exceed 32 bits */
    DLOCK_ERR_SYS = -11       /* an operating-system call failed (threads, random source) */
} dlock_status;

/* Wait forever in dlock_lock_acquire(). */
#define DLOCK_WAIT_FOREVER (-1L)
/* Lease argument of dlock_lock_acquire(): let the watchdog renew the lock. */
#define DLOCK_LEASE_WATCHDOG 0L

typedef struct dlock_client dlock_client;
typedef struct dlock_lock dlock_lock;

/* Static name of a status code, e.g. "not owner". Never NULL. */
DLOCK_API const char *dlock_strerror(dlock_status status);

/*
 * A one-line explanation of the last failing call made by this thread, with
 * detail the status code cannot carry (the server's message, the bad part of
 * a URL). The string lives until the thread's next dlock call. Never NULL.
 */
DLOCK_API const char *dlock_last_error(void);

/* The library's version string, e.g. "0.1.0". */
DLOCK_API const char *dlock_version(void);

/* ------------------------------------------------------------------------ */
/* URLs                                                                      */
/* ------------------------------------------------------------------------ */

typedef enum dlock_url_kind {
    DLOCK_URL_TCP = 1,  /* redis://[[user]:password@]host[:port][/db] */
    DLOCK_URL_UNIX = 2  /* unix:///path/to.sock[?db=N] */
} dlock_url_kind;

/* A parsed connection URL. Strings are owned by the struct. */
typedef struct dlock_url {
    dlock_url_kind kind;
    char *host;     /* TCP host name or address, without IPv6 brackets */
    int port;       /* TCP port, 6379 by default */
    char *path;     /* unix socket path */
    char *user;     /* ACL user name, or NULL for the default user */
    char *password; /* password, or NULL for no AUTH */
    int db;         /* database number for SELECT, 0 by default */
} dlock_url;

/*
 * Parse a connection URL into *out. Percent-escapes in the user and password
 * are decoded, so a password may contain any byte. On failure *out is left
 * zeroed, the status is DLOCK_ERR_URL and dlock_last_error() says which part
 * is wrong. Free a successful result with dlock_url_free().
 */
DLOCK_API dlock_status dlock_url_parse(const char *url, dlock_url *out);

/* Release the strings of a parsed URL and zero it. Safe on a zeroed struct. */
DLOCK_API void dlock_url_free(dlock_url *url);

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * Options for dlock_client_new(). Zero in any field means the default, so
 * `dlock_options o = {0};` is a valid start.
 */
typedef struct dlock_options {
    int connect_timeout_ms;  /* connecting to Redis; default 2000 */
    int command_timeout_ms;  /* one command's round trip; default 5000 */
    long watchdog_lease_ms;  /* lease kept alive by the watchdog; default 30000,
                                renewed every third of it */
} dlock_options;

/*
 * Connect to the Redis server named by `url` and return a client in *out.
 * The first connection is made (and AUTH/SELECT run) before returning, so a
 * wrong address or password is reported here as DLOCK_ERR_CONNECT or
 * DLOCK_ERR_AUTH. Later connections are made on demand and re-made after the
 * server restarts. `opts` may be NULL for all defaults.
 */
DLOCK_API dlock_status dlock_client_new(const char *url, const dlock_options *opts, dlock_client **out);

/*
 * Stop the client's background threads, close its connections and free it.
 * Locks still held are not released: their leases run out on the server.
 * Every dlock_lock of the client must be freed first.
 */
DLOCK_API void dlock_client_free(dlock_client *client);

/*
 * The client's unique id: 32 hex digits drawn from the OS random source when
 * the client was made. Lock owners are "<id>:<thread number>".
 */
DLOCK_API const char *dlock_client_id(const dlock_client *client);

/* ------------------------------------------------------------------------ */
/* Reentrant lock                                                            */
/* ------------------------------------------------------------------------ */

/*
 * Called from the watchdog thread when a hold of `lock` was found gone
 * (expired while the holder was paused, deleted by force, or taken by
 * another owner). `token` is the fencing token of the lost hold. Keep it
 * short: set a flag, signal a process; do not call back into the lock.
 */
typedef void (*dlock_lost_fn)(dlock_lock *lock, uint64_t token, void *arg);

/*
 * Make a handle for the lock called `name` (1 to 512 bytes, no NUL). The
 * handle does not touch Redis. One handle may be shared by threads: holds
 * belong to the calling thread, as with a reentrant mutex.
 */
DLOCK_API dlock_status dlock_lock_new(dlock_client *client, const char *name, dlock_lock **out);

/*
 * Free a handle. A hold still open on it is abandoned: its renewal stops
 * and the lease runs out on the server.
 */
DLOCK_API void dlock_lock_free(dlock_lock *lock);

/* The lock's name as given to dlock_lock_new(). */
DLOCK_API const char *dlock_lock_name(const dlock_lock *lock);

/*
 * Acquire the lock for the calling thread.
 *
 * `wait_ms`: 0 tries once, a positive value waits up to that many
 * milliseconds, DLOCK_WAIT_FOREVER waits until it is acquired. Waiting does
 * not poll: the thread sleeps until a release is announced on the lock's
 * channel, or at most until the holder's lease would end.
 *
 * `lease_ms`: a positive lease makes the hold expire by itself after that
 * long; DLOCK_LEASE_WATCHDOG uses the client's watchdog lease, renewed in the
 * background until release, and reports loss through dlock_lock_lost().
 *
 * On success *token (if not NULL) receives the fencing token of this
 * acquisition: strictly greater than every token handed out before for this
 * name. A re-entry by the holding thread succeeds at once, increments the
 * hold count and returns the same token. Fails with DLOCK_ERR_TIMEOUT when
 * the wait ends first.
 */
DLOCK_API dlock_status dlock_lock_acquire(dlock_lock *lock, long wait_ms, long lease_ms, uint64_t *token);

/*
 * Undo one acquisition by the calling thread. When the hold count reaches
 * zero the lock is deleted and waiters are woken. Fails with
 * DLOCK_ERR_NOT_OWNER (changing nothing) when the thread does not hold it,
 * and with DLOCK_ERR_LOST when the watchdog had already found it lost.
 */
DLOCK_API dlock_status dlock_lock_release(dlock_lock *lock);

/*
 * 1 when the calling thread's current or most recent hold of this lock was
 * found lost by the watchdog, else 0. A new acquisition clears it.
 */
DLOCK_API int dlock_lock_lost(dlock_lock *lock);

/* Register the loss callback of this handle (NULL to remove it). */
DLOCK_API void dlock_lock_on_lost(dlock_lock *lock, dlock_lost_fn fn, void *arg);

/* What dlock_lock_inspect() reports. */
typedef struct dlock_lock_info {
    int held;            /* 1 when someone holds the lock */
    char holder[96];     /* owner string of the holder, empty when free */
    long hold_count;     /* re-entry count of the holder */
    long ttl_ms;         /* remaining lease in milliseconds, -1 when free */
    uint64_t last_token; /* most recent fencing token handed out, 0 if none */
} dlock_lock_info;

/* Read the state of lock `name` without changing it (the admin view). */
DLOCK_API dlock_status dlock_lock_inspect(dlock_client *client, const char *name, dlock_lock_info *info);

/*
 * Delete lock `name` whoever holds it, and wake its waiters. The holder's
 * watchdog will report the lock lost. *was_held (if not NULL) tells whether
 * anything was deleted. For operators, not for normal release.
 */
DLOCK_API dlock_status dlock_lock_force_unlock(dlock_client *client, const char *name, int *was_held);

/* ------------------------------------------------------------------------ */
/* Global IDs                                                                */
/* ------------------------------------------------------------------------ */

/* Seconds since the Unix epoch of 2022-01-01T00:00:00Z, the ID epoch. */
#define DLOCK_ID_EPOCH 1640995200L

/*
 * Generate `count` (1 to 1,000,000) unique 64-bit IDs for `prefix` into ids[]:
 *
 *     (seconds since DLOCK_ID_EPOCH) << 32 | sequence
 *
 * where the sequence comes from INCRBY on "icr:<prefix>:<yyyy:MM:dd>" with
 * the date of the same second in UTC. One INCRBY reserves the whole batch.
 * `prefix` is 1 to 64 characters of [A-Za-z0-9_.-]; anything else is
 * DLOCK_ERR_INVALID. A day whose sequence would pass 2^32-1 gives
 * DLOCK_ERR_OVERFLOW and no IDs, never a wrong one.
 */
DLOCK_API dlock_status dlock_id_next(dlock_client *client, const char *prefix, uint64_t *ids, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_H */
