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
 * to share between threads: their commands are pipelined on one shared
 * connection per server (each thread's commands stay whole and in order;
 * commands that block a connection, WAIT, get one of their own). A client
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

/* DLOCK_VERSION_MAJOR, _MINOR, _PATCH and DLOCK_VERSION ("0.2.0"), made at
 * build time from the source tree's VERSION file and installed next to
 * this header. */
#include "dlock_version.h"

/*
 * Status codes, written once: XX(name, value, text), where `text` is what
 * dlock_strerror() returns. DLOCK_OK is zero, every failure is negative:
 *
 *   INVALID   a bad argument: NULL, empty or malformed name, bad count
 *   URL       the connection URL could not be parsed
 *   CONNECT   Redis unreachable, connection lost, command timed out, TLS refused
 *   AUTH      AUTH or SELECT refused, or the ACL user lacks a permission
 *   TIMEOUT   the lock was not acquired within the wait time
 *   NOT_OWNER release by a thread that does not hold the lock
 *   LOST      the lock's lease ended (or may have) while it was held
 *   REDIS     the server answered with an error or an unexpected reply
 *   NOMEM     out of memory
 *   OVERFLOW  a global ID sequence would exceed 32 bits
 *   SYS       an operating-system call failed (threads, random source)
 *   DEADLOCK  refused because it would wait for itself (read-to-write upgrade)
 *   REPLICA   replica-safe acquire: too few replicas acknowledged; undone
 *   WRONG_KIND the NAME is in use as another kind of lock, semaphore or
 *             latch (the message names it); nothing was changed
 */
#define DLOCK_STATUS_MAP(XX)                                                                                           \
    XX(OK, 0, "ok")                                                                                                    \
    XX(ERR_INVALID, -1, "invalid argument")                                                                            \
    XX(ERR_URL, -2, "malformed URL")                                                                                   \
    XX(ERR_CONNECT, -3, "cannot reach Redis")                                                                          \
    XX(ERR_AUTH, -4, "authentication failed")                                                                          \
    XX(ERR_TIMEOUT, -5, "not acquired in time")                                                                        \
    XX(ERR_NOT_OWNER, -6, "not owner")                                                                                 \
    XX(ERR_LOST, -7, "lock lost")                                                                                      \
    XX(ERR_REDIS, -8, "Redis error")                                                                                   \
    XX(ERR_NOMEM, -9, "out of memory")                                                                                 \
    XX(ERR_OVERFLOW, -10, "ID sequence overflow")                                                                      \
    XX(ERR_SYS, -11, "system error")                                                                                   \
    XX(ERR_DEADLOCK, -12, "would deadlock")                                                                            \
    XX(ERR_REPLICA, -13, "too few replicas acknowledged")                                                              \
    XX(ERR_WRONG_KIND, -14, "name in use as another kind")

typedef enum dlock_status {
#define DLOCK_STATUS_ENUM(name, value, text) DLOCK_##name = value,
    DLOCK_STATUS_MAP(DLOCK_STATUS_ENUM)
#undef DLOCK_STATUS_ENUM
} dlock_status;

/*
 * One NAME, one kind. A plain or fair lock, a read-write lock, a semaphore,
 * a permit-expirable semaphore and a latch on the same NAME keep their
 * state in different keys, so each acquire, set, count-down and await
 * first checks that no key of another kind exists for that NAME, and is
 * refused at once with DLOCK_ERR_WRONG_KIND when one does, its message
 * naming the kind ("job is held as a write lock"); nothing is changed.
 * Why a refusal and not a wait: a NAME used as two kinds is a mistake in
 * the callers, and the kinds wake and order their waiters in ways that do
 * not mix (a fair queue knows nothing of readers), so waiting would hide
 * the mistake without keeping either kind's promises; the refusal keeps
 * mutual exclusion and says what is wrong. Its limit: it is seen only
 * while the other kind is held or in use, and either kind succeeds on
 * its own. Plain and fair locks share one key and wait for each other.
 * Asynchronous calls end with the same status.
 */

/* How long a semaphore at its full size, a permit-expirable semaphore
 * with no live permit, and an open latch are kept in Redis before their
 * keys expire: one day. */
#define DLOCK_IDLE_MS (24L * 60 * 60 * 1000)

/* Wait forever in dlock_lock_acquire(). */
#define DLOCK_WAIT_FOREVER (-1L)
/* Lease argument of dlock_lock_acquire(): let the watchdog renew the lock. */
#define DLOCK_LEASE_WATCHDOG 0L
/*
 * The longest lease any call accepts: 2^31-1 ms, about 24.8 days. Every
 * lease argument (locks, fair and read-write locks, permits, RedLock
 * acquire and extend, renewals, multi-lock, the client's
 * watchdog_lease_ms) above it is refused with DLOCK_ERR_INVALID before
 * anything is sent, so a lease the server cannot set never leaves a hold
 * without an expiry behind. fair_waiter_timeout_ms may be at most half of
 * it (the queue keys live twice as long).
 */
#define DLOCK_LEASE_MAX_MS 2147483647L
/* dlock_options.watchdog_lease_ms: at least this (a third of it is already
 * close to one round trip on a busy host), and this when left 0. */
#define DLOCK_WATCHDOG_LEASE_MIN_MS 30L
#define DLOCK_WATCHDOG_LEASE_DEFAULT_MS 30000L
/* dlock_options.safety_margin_pct when left 0. */
#define DLOCK_SAFETY_MARGIN_DEFAULT_PCT 10
/* dlock_redlock_new() takes at most this many masters. */
#define DLOCK_REDLOCK_MAX_MASTERS 32

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

/* The library's version string, e.g. "0.2.0": the DLOCK_VERSION the
 * library was built with, which may differ from the header a program was
 * compiled against. */
DLOCK_API const char *dlock_version(void);

/*
 * Check the name of a lock, semaphore or latch without touching Redis:
 * DLOCK_OK, or DLOCK_ERR_INVALID with the reason, exactly as every
 * dlock_*_new() would answer. A name is 1 to 512 bytes with no '{' or '}'
 * (they would break the hash tag that keeps an object's keys in one
 * Cluster slot) and no control characters. For tools that check their
 * input before connecting.
 */
DLOCK_API dlock_status dlock_check_name(const char *name);

/* The same for the prefix of dlock_id_next(): 1 to 64 characters of
 * [A-Za-z0-9_.-]. */
DLOCK_API dlock_status dlock_check_id_prefix(const char *prefix);

/* ------------------------------------------------------------------------ */
/* URLs                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Every TCP kind has a TLS form: rediss://, rediss-sentinel:// (TLS to the
 * Sentinels and to the master), rediss-cluster://, each taking after the
 * rest of the URL (after /db, /MASTER or the address list) the parameters
 * ?cacert=FILE&cert=FILE&key=FILE&sni=NAME&verify=no, all optional, in any
 * order, values percent-decoded: the server's certificate is verified
 * against cacert (else the system's CA store) and its name against sni
 * (else the host); cert and key (both or neither) present a client
 * certificate; verify=no turns verification off. A '?' in the password of
 * such a URL must be written %3F.
 */
typedef enum dlock_url_kind {
    DLOCK_URL_TCP = 1,      /* redis://[[user]:password@]host[:port][/db] */
    DLOCK_URL_UNIX = 2,     /* unix:///path/to.sock[?db=N] */
    DLOCK_URL_SENTINEL = 3, /* redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTER[?db=N] */
    DLOCK_URL_CLUSTER = 4   /* redis-cluster://[[user]:password@]host[:port][,host[:port]...] */
} dlock_url_kind;

/* One host and port of a Sentinel or Cluster URL's list. */
typedef struct dlock_url_addr {
    char *host; /* without IPv6 brackets */
    int port;   /* 26379 by default for Sentinels, 6379 for Cluster nodes */
} dlock_url_addr;

/*
 * A parsed connection URL. Strings are owned by the struct. For Sentinel
 * and Cluster URLs, addrs[] lists every address given (host and port
 * repeat the first one); the credentials and database apply to the data
 * nodes (the master, the cluster's nodes), and are offered to a Sentinel
 * only when it asks for them.
 */
typedef struct dlock_url {
    dlock_url_kind kind;
    char *host;            /* TCP host name or address, without IPv6 brackets */
    int port;              /* TCP port, 6379 by default */
    char *path;            /* unix socket path */
    char *user;            /* ACL user name, or NULL for the default user */
    char *password;        /* password, or NULL for no AUTH */
    int db;                /* database number for SELECT, 0 by default (always 0 on Cluster) */
    char *master;          /* Sentinel: the name of the monitored master */
    dlock_url_addr *addrs; /* Sentinel: the Sentinels; Cluster: seed nodes */
    size_t n_addrs;
    int tls;          /* a rediss scheme: TLS to every server */
    char *tls_cacert; /* CA certificates (PEM file), or NULL: the system's store */
    char *tls_cert;   /* client certificate (PEM file), or NULL */
    char *tls_key;    /* its private key (PEM file), or NULL */
    char *tls_sni;    /* the server name to send and to verify, or NULL: the host */
    int tls_verify;   /* 1, or 0 with verify=no: no verification at all */
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
    int connect_timeout_ms;      /* connecting to Redis; default 2000 */
    int command_timeout_ms;      /* one command's round trip; default 5000 */
    long watchdog_lease_ms;      /* lease kept alive by the watchdog; default 30000,
                                renewed every third of it */
    long fair_waiter_timeout_ms; /* fair locks: a waiter that has not retried for
                                    this long is presumed dead and skipped;
                                    default 5000 (see dlock_lock_new_fair) */
    int offline_ok;              /* 1: if the server cannot be reached now, return
                                the client anyway and connect on first use
                                (RedLock masters, one of which may be down);
                                a refused password still fails */
    int replica_acks;            /* replica-safe acquire (off when 0): after each new
                                lock acquisition (plain or fair), WAIT until this
                                many replicas have it; if fewer acknowledge in
                                time the acquisition is undone (see
                                DLOCK_ERR_REPLICA and docs/design/locks.md) */
    int replica_timeout_ms;      /* how long to WAIT for them; default 100, must be
                                under command_timeout_ms */
    int safety_margin_pct;       /* percent of a lease, 1 to 50 (default 10): a hold
                                is no longer believed by its holder this much
                                plus the clock-drift allowance (1 % + 2 ms)
                                before its lease would end, counted by the
                                holder's own clock from when the last successful
                                renewal was sent; the watchdog then declares it
                                lost whether or not a renewal is still on its
                                way (see dlock_lock_lost) */
    const char *username;        /* ACL user for AUTH, instead of the URL's; NULL:
                                the URL's (or the default user) */
    const char *password;        /* password for AUTH, instead of the URL's (with
                                the URL's user unless username is set); NULL:
                                the URL's. Lets a program keep credentials
                                out of URLs it may print or log, and gives a
                                unix:// URL a password. Both strings are
                                copied. */
    int busy_poll_us;            /* how long the thread that reads replies for
                                every caller of a connection (the
                                asynchronous API's reader thread, or the
                                synchronous caller whose turn it is) polls
                                the socket before it sleeps in read(): 0 for
                                the default, 100 us; -1 never; at most 10000.
                                On the VMs we measure, the poll doubled one
                                waiter's round trips per second and gave 8
                                threads a third more (an idle vCPU is slow
                                to wake). A program whose own
                                threads keep every CPU busy (a server) loses
                                by it, and should pass -1: seckill's open
                                sale ran a tenth faster without it */
} dlock_options;

/*
 * Connect to the Redis deployment named by `url` and return a client in
 * *out. The first connection is made (and AUTH/SELECT run) before
 * returning, so a wrong address or password is reported here as
 * DLOCK_ERR_CONNECT or DLOCK_ERR_AUTH. Later connections are made on demand
 * and re-made after the server restarts. With a redis-sentinel:// URL the
 * master is looked up through the Sentinels, checked with ROLE, and looked
 * up again after a failover; with redis-cluster:// every command goes to
 * the node serving its key's slot, following MOVED and ASK redirections.
 * Every lock's keys share one slot, so each primitive works unchanged on
 * all of them. Its connections are close-on-exec: a program that runs
 * another does not hand them on. `opts` may be NULL for all defaults.
 */
DLOCK_API dlock_status dlock_client_new(const char *url, const dlock_options *opts, dlock_client **out);

/*
 * Stop the client's background threads, close its connections and free it.
 * Locks still held are not released: their leases run out on the server.
 * Every dlock_lock of the client must be freed first.
 */
DLOCK_API void dlock_client_free(dlock_client *client);

/*
 * End the client's asynchronous life before it is freed: refuse new
 * asynchronous calls (DLOCK_ERR_INVALID), end the acquisitions that are
 * waiting (their callbacks get DLOCK_ERR_INVALID), and return once every
 * callback has returned, so the handles may then be freed and the client
 * after them. Synchronous calls keep working. Never from a callback.
 * dlock_client_free() does this first.
 */
DLOCK_API void dlock_client_drain(dlock_client *client);

/*
 * The client's unique id: 32 hex digits drawn from the OS random source when
 * the client was made. Lock owners are "<id>:<thread number>:<handle number>".
 */
DLOCK_API const char *dlock_client_id(const dlock_client *client);

/* ------------------------------------------------------------------------ */
/* Reentrant lock                                                            */
/* ------------------------------------------------------------------------ */

/*
 * Called from the watchdog thread when a hold of `lock` was found gone
 * (expired while the holder was paused, deleted by force, or taken by
 * another owner), or when renewals kept failing (the server unreachable,
 * a partition) until the hold's trusted time ran out: its lease less the
 * client's safety margin and drift allowance (dlock_options
 * .safety_margin_pct), counted from the send of its last successful
 * renewal, so before the server can let anyone else have it. `token` is
 * the fencing token of the lost hold. Keep it short: set a flag, signal a
 * process; do not call back into the lock.
 */
typedef void (*dlock_lost_fn)(dlock_lock *lock, uint64_t token, void *arg);

/*
 * Make a handle for the lock called `name` (1 to 512 bytes, no NUL). The
 * handle does not touch Redis. One handle may be shared by threads: holds
 * belong to the calling thread, as with a reentrant mutex. Two handles of
 * one name are two owners even in one thread (as two open files are for
 * flock(2)): re-entry works through the same handle only.
 */
DLOCK_API dlock_status dlock_lock_new(dlock_client *client, const char *name, dlock_lock **out);

/*
 * Make a handle for a fair lock called `name`: waiters get the lock in the
 * order they started waiting (FIFO across all processes), and a release
 * wakes only the first waiter. Every other dlock_lock_* call works on it;
 * do not mix fair and plain handles on one name (a plain acquire ignores
 * the queue; they share the lock's key, so each waits for the other's
 * hold). A read-write lock, semaphore or latch on the name is refused
 * (see "One NAME, one kind" above).
 *
 * A waiter proves it is alive by retrying at least every half of the
 * client's fair_waiter_timeout_ms (the library does this while it waits);
 * one that stops (crashed) is skipped once its timeout passes. A short
 * timeout (default 5 s, Redisson's is 5 min) means a dead waiter stalls
 * the queue only briefly; the price is one small script call per waiter
 * every half timeout, and a live waiter paused longer than the timeout
 * (swapping, SIGSTOP) loses its place and queues again at the back.
 * Extra keys: "dlock:{NAME}:q" (queue), "dlock:{NAME}:qt" (deadlines);
 * each waiter is woken on "dlock:{NAME}:ch:<owner>".
 */
DLOCK_API dlock_status dlock_lock_new_fair(dlock_client *client, const char *name, dlock_lock **out);

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
 * milliseconds, DLOCK_WAIT_FOREVER waits until it is acquired; a release
 * heard just as the wait runs out is still tried (one round trip past
 * `wait_ms`), since the wake-up was meant for this waiter. Waiting does
 * not poll: the thread sleeps until a release is announced on the lock's
 * channel, or at most until the holder's lease would end, and never more
 * than 2 s at a time (a safety net: a release message lost with a broken
 * pub/sub connection costs at most that). While its subscription is not
 * confirmed yet (the pub/sub link is being re-made) it retries every
 * 200 ms; a fair waiter also retries every half fair_waiter_timeout_ms to
 * keep its place. Order, for the plain lock: a release wakes one waiting
 * process (the one that retried least recently, which then has the free
 * lock to itself for 100 ms) and in it the thread that has waited longest;
 * a thread that starts to acquire while a thread of its process has waited
 * more than 2 ms queues behind it instead of trying first. Waits are
 * therefore served about in order, not strictly (the fair lock is
 * strict).
 *
 * `lease_ms`: a positive lease (3 to DLOCK_LEASE_MAX_MS) makes the hold
 * expire by itself after that long; DLOCK_LEASE_WATCHDOG uses the client's
 * watchdog lease, renewed in the background until release, and reports
 * loss through dlock_lock_lost().
 *
 * On success *token (if not NULL) receives the fencing token of this
 * acquisition: strictly greater than every token handed out before for this
 * name. A re-entry by the holding thread succeeds at once, increments the
 * hold count and returns the same token. Fails with DLOCK_ERR_TIMEOUT when
 * the wait ends first. A waiting thread may be handed the lock by a
 * release of the same client (a plain lock, without replica
 * acknowledgements): it then returns holding it without asking Redis
 * again, and if that release was under way when its wait ran out, up to
 * one command timeout late, with the lock rather than a timeout. A new
 * hold whose answer came back after the lease could be trusted (its lease
 * less the safety margin, counted from the send: a reply held up by a
 * partition or a stalled server) is given back and fails with
 * DLOCK_ERR_LOST, never returned: the server may have let it go already.
 * The same holds for the read-write lock and the permit-expirable
 * semaphore, and for the asynchronous calls.
 */
DLOCK_API dlock_status dlock_lock_acquire(dlock_lock *lock, long wait_ms, long lease_ms, uint64_t *token);

/*
 * Undo one acquisition by the calling thread. When the hold count reaches
 * zero the lock is deleted and waiters are woken, or handed it directly
 * when the next in line is a thread of this client asleep on it. Fails with
 * DLOCK_ERR_NOT_OWNER (changing nothing) when the thread does not hold it,
 * and with DLOCK_ERR_LOST when the watchdog had already found it lost.
 */
DLOCK_API dlock_status dlock_lock_release(dlock_lock *lock);

/*
 * Raise the floor of this handle's fencing tokens: every acquisition
 * through it from now on gets a token greater than `floor`. Tokens rise by
 * themselves while Redis keeps its counter (AOF, a replica that had it)
 * or its clock; the client also remembers the highest token it saw for
 * each name and passes it on. What neither covers is a new process after
 * a restart without persistence onto a clock that stepped back: pass the
 * highest token your fenced resource has accepted, and the next token is
 * above it (see docs/design/locks.md, "Fencing tokens"). The scripts count
 * in doubles, exact to 2^53: a floor above 2^53 - 2 is taken as that
 * (tokens are microseconds since 1970, about 2^51 today).
 */
DLOCK_API void dlock_lock_set_fence_floor(dlock_lock *lock, uint64_t floor);

/*
 * 1 when the calling thread's current or most recent hold of this lock (or,
 * when the thread has none, the handle's asynchronous hold) was
 * found lost by the watchdog, or when its trusted time is over by this
 * process's monotonic clock (see dlock_lost_fn; for an explicit lease: the
 * lease less the margin, from the send of the acquire), else 0. Exact by
 * the clock even before the watchdog thread has run, so a holder that asks
 * before each step of its work never starts one after that time; the
 * callback follows on the watchdog thread. A new acquisition clears it.
 */
DLOCK_API int dlock_lock_lost(dlock_lock *lock);

/* Register the loss callback of this handle (NULL to remove it). */
DLOCK_API void dlock_lock_on_lost(dlock_lock *lock, dlock_lost_fn fn, void *arg);

/*
 * What an asynchronous acquire ends with: `status` as dlock_lock_acquire()
 * would return it, and the fencing token when it is DLOCK_OK.
 * dlock_last_error() inside the callback gives a failure's message.
 */
typedef void (*dlock_acquired_fn)(dlock_lock *lock, dlock_status status, uint64_t token, void *arg);

/* What an asynchronous release ends with, as dlock_lock_release(). */
typedef void (*dlock_released_fn)(dlock_lock *lock, dlock_status status, void *arg);

/*
 * dlock_lock_acquire() without a thread that waits: returns at once, and
 * cb(lock, status, token, arg) runs exactly once later on a thread of the
 * library (never inside this call, never with a library lock held), so one
 * thread can keep many acquisitions in flight, each on its own handle.
 * `wait_ms` and `lease_ms` as for dlock_lock_acquire(); a busy lock is
 * waited for as there (woken by the release, bounded by the holder's
 * lease, handed the lock directly by a release of this client), with no
 * thread parked for it. Works on plain and fair handles.
 *
 * The hold belongs to the handle, not to a thread: any thread may release
 * it with dlock_lock_release_async(), re-entry is another
 * dlock_lock_acquire_async() on the same handle, and it is separate from
 * holds the handle's threads take with dlock_lock_acquire(). One
 * asynchronous call (acquire or release) runs on a handle at a time: a
 * second one fails with DLOCK_ERR_INVALID until the first one's callback
 * has begun. Watchdog renewal, loss (dlock_lock_lost(), the loss callback)
 * and fencing work as for synchronous holds. Under replica-safe acquire
 * (dlock_options.replica_acks) each attempt and its WAIT run on one of the
 * library's threads (the synchronous path, not the shared connection), and
 * end as dlock_lock_acquire() would (DLOCK_ERR_REPLICA). A wait that runs
 * out, or an attempt undone for want of replicas, is reported only after
 * the server has answered the command that gives back what the handle may
 * hold meanwhile, so a new call on the handle can never be undone by it;
 * cut off from the server, that report comes when the link heals or the
 * command times out (command_timeout_ms), as dlock_lock_acquire() returns
 * then.
 *
 * Callbacks run on the threads that read every caller's replies: keep them
 * short and never call the synchronous API from one (hand the result to
 * your own loop; examples/async_libuv.c shows how). Calls started inside
 * a callback leave together, in one write, once the callbacks of that
 * burst of replies have run, or sooner (docs/ARCHITECTURE.md). A status
 * other than DLOCK_OK means nothing was started and cb will not run. Do
 * not free the handle while a call is in flight: to stop with
 * acquisitions still waiting, dlock_client_drain() ends them and waits for
 * every callback.
 */
DLOCK_API dlock_status dlock_lock_acquire_async(dlock_lock *lock, long wait_ms, long lease_ms, dlock_acquired_fn cb,
                                                void *arg);

/*
 * Undo one asynchronous acquisition of the handle: cb(lock, status, arg)
 * later, with what dlock_lock_release() would return. DLOCK_ERR_NOT_OWNER
 * at once when the handle holds nothing taken asynchronously, and
 * DLOCK_ERR_LOST at once (the hold is over) when it was already found
 * lost; in both cases cb will not run.
 */
DLOCK_API dlock_status dlock_lock_release_async(dlock_lock *lock, dlock_released_fn cb, void *arg);

/* What dlock_lock_inspect() reports. */
typedef struct dlock_lock_info {
    int held;        /* 1 when someone holds the lock */
    char holder[96]; /* owner string of the holder, empty when free */
    long hold_count; /* re-entry count of the holder */
    long ttl_ms;     /* remaining lease in milliseconds, -1 when free */
    /* the hold's fencing token; when free, the last token of the counter the
     * name shares with its hash slot (at least the name's own last), 0 if none */
    uint64_t last_token;
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
 * the date of the same second in UTC. One INCRBY (in a script) reserves
 * the whole batch, and the script raises the counter to at least 49 per
 * millisecond of the UTC day, so a counter lost in a restart without
 * persistence does not repeat the day's IDs (at under 49,000 IDs a second).
 * `prefix` is 1 to 64 characters of [A-Za-z0-9_.-]; anything else is
 * DLOCK_ERR_INVALID. A day whose sequence would pass 2^32-1 gives
 * DLOCK_ERR_OVERFLOW and no IDs, never a wrong one.
 */
DLOCK_API dlock_status dlock_id_next(dlock_client *client, const char *prefix, uint64_t *ids, size_t count);

/* What an asynchronous batch of IDs ends with: on DLOCK_OK the IDs are
 * first, first + 1, ..., first + count - 1 (a batch is consecutive);
 * otherwise first and count are 0. */
typedef void (*dlock_ids_fn)(dlock_client *client, dlock_status status, uint64_t first, size_t count, void *arg);

/*
 * dlock_id_next() without waiting for the answer: the arguments are
 * checked at once (a status other than DLOCK_OK means nothing was sent
 * and cb will not run), then cb runs once later on a library thread, as
 * for dlock_lock_acquire_async(). Any number may be in flight from one
 * thread; their batches never overlap.
 */
DLOCK_API dlock_status dlock_id_next_async(dlock_client *client, const char *prefix, size_t count, dlock_ids_fn cb,
                                           void *arg);

/*
 * How many IDs dlock_id_next() handed out for `prefix` on one UTC day:
 * `date` is "YYYY-MM-DD" (NULL: today by this host's clock, in UTC), and
 * *count gets 0 for a day that made none. The day's sequence cannot tell,
 * since it starts at a floor that grows with the time of day (see
 * dlock_id_next), so every batch also adds its size to a count key beside
 * it, "{icr:<prefix>:<yyyy:MM:dd>}:n" (that hash tag puts it in the
 * sequence key's Cluster slot; neither key expires). Exact, with two
 * exceptions: a batch resent after a lost reply is counted twice though
 * only one reached the caller, and a restart of Redis without persistence
 * (or a failover to a replica that missed the last batches) loses the count
 * with the sequence: the count starts again from 0 and tells how many were
 * made since, while the IDs made after it still never repeat earlier ones.
 * A `date` that is not a calendar day in that form is DLOCK_ERR_INVALID;
 * dlock_check_id_date() checks one without a client.
 */
DLOCK_API dlock_status dlock_id_count(dlock_client *client, const char *prefix, const char *date, uint64_t *count);

/* Check a date for dlock_id_count() without touching Redis: DLOCK_OK, or
 * DLOCK_ERR_INVALID with the reason. */
DLOCK_API dlock_status dlock_check_id_date(const char *date);

/* ------------------------------------------------------------------------ */
/* Semaphore                                                                 */
/* ------------------------------------------------------------------------ */

/*
 * A counting semaphore with no owners: any process may release. Simple and
 * fast, but a holder that crashes never returns its permits; use the
 * permit-expirable semaphore (dlock_psem) when holders can die.
 * Keys: "dlock:{NAME}:sem" (permits available), "dlock:{NAME}:sem:size"
 * (the size it was made with), channel "dlock:{NAME}:sem:ch",
 * and short-lived operation records "dlock:{NAME}:op:<client id>:<thread>"
 * that make a call resent after a lost reply take effect once. Setting or
 * taking permits of a NAME in use as another kind (a lock, the other
 * semaphore, a latch) is refused with DLOCK_ERR_WRONG_KIND, and so is
 * the permit-expirable semaphore's ("One NAME, one kind" above).
 */
typedef struct dlock_semaphore dlock_semaphore;

/* Make a handle for semaphore `name` (same rules as lock names). */
DLOCK_API dlock_status dlock_semaphore_new(dlock_client *client, const char *name, dlock_semaphore **out);

/* Free a handle. Permits taken through it stay taken. */
DLOCK_API void dlock_semaphore_free(dlock_semaphore *sem);

/*
 * Make the semaphore with `permits` permits (0 to 2^31-1) if it does not
 * exist yet, so every process may call it at start-up. *was_set (if not
 * NULL) tells whether this call made it. A semaphore that exists with
 * another size is left alone and the call fails with DLOCK_ERR_INVALID,
 * both sizes in the message: resize it with dlock_semaphore_resize().
 *
 * Idle keys: a semaphore with all its permits available expires
 * DLOCK_IDLE_MS after it was made or its last permit came back; one with
 * permits taken is kept (they have no lease). So the stored size is that
 * of a semaphore in use or lately used; an expired one is made anew at
 * the size its handle set or found, by that handle's next acquire
 * (available() then counts it full), or by the next set_permits with
 * whatever size that asks for.
 */
DLOCK_API dlock_status dlock_semaphore_set_permits(dlock_semaphore *sem, long permits, int *was_set);

/*
 * Change the semaphore's size to `permits` (0 to 2^31-1), making it if it
 * does not exist: the permits available move by as much as the size does
 * (Redisson's setPermits). Permits taken beyond a smaller size are not
 * taken back: acquires wait until enough of them are returned. Waiters
 * are woken when it grows.
 */
DLOCK_API dlock_status dlock_semaphore_resize(dlock_semaphore *sem, long permits);

/* Grow (change > 0) or shrink the size and the permits available by
 * `change` (Redisson's addPermits); a size that would go below 0 is
 * DLOCK_ERR_INVALID and changes nothing. */
DLOCK_API dlock_status dlock_semaphore_add_permits(dlock_semaphore *sem, long change);

/*
 * Take `permits` (>= 1) permits, all or nothing. `wait_ms` as in
 * dlock_lock_acquire(); waiting is woken by releases, not by polling.
 * DLOCK_ERR_TIMEOUT when too few became available in time.
 */
DLOCK_API dlock_status dlock_semaphore_acquire(dlock_semaphore *sem, long permits, long wait_ms);

/* Return `permits` (>= 1) permits and wake that many waiters. */
DLOCK_API dlock_status dlock_semaphore_release(dlock_semaphore *sem, long permits);

/* Permits available now (0 when the semaphore was never set; the size
 * this handle set or found when it expired idle). */
DLOCK_API dlock_status dlock_semaphore_available(dlock_semaphore *sem, long *available);

/* What an asynchronous semaphore call ends with, as its synchronous twin. */
typedef void (*dlock_semaphore_fn)(dlock_semaphore *sem, dlock_status status, void *arg);

/*
 * dlock_semaphore_acquire() and dlock_semaphore_release() without a thread
 * that waits, under the rules of dlock_lock_acquire_async(): cb runs once
 * later on a library thread, one asynchronous call runs on a handle at a
 * time (use a handle per call in flight), a status other than DLOCK_OK
 * means nothing was started and cb will not run.
 */
DLOCK_API dlock_status dlock_semaphore_acquire_async(dlock_semaphore *sem, long permits, long wait_ms,
                                                     dlock_semaphore_fn cb, void *arg);
DLOCK_API dlock_status dlock_semaphore_release_async(dlock_semaphore *sem, long permits, dlock_semaphore_fn cb,
                                                     void *arg);

/* ------------------------------------------------------------------------ */
/* Permit-expirable semaphore                                               */
/* ------------------------------------------------------------------------ */

/*
 * A semaphore whose every permit has a random id and a lease. A permit
 * whose lease runs out returns to the pool by itself, so a crashed holder
 * cannot leak it for longer than its lease. Permits may be renewed
 * explicitly or by the client's watchdog, and released by id from any
 * process. Keys: "dlock:{NAME}:psem" (number of permits),
 * "dlock:{NAME}:psem:held" (permit id -> expiry), channel
 * "dlock:{NAME}:psem:ch", and operation records "dlock:{NAME}:op:..."
 * (see dlock_semaphore).
 */
typedef struct dlock_psem dlock_psem;

/* One held permit. Owned by the caller until released or freed. */
typedef struct dlock_permit dlock_permit;

/* Length of a permit id: 32 hex digits, plus the terminating NUL. */
#define DLOCK_PERMIT_ID_LEN 33

/* Called on the watchdog thread when a watchdog-renewed permit was found
 * expired. Keep it short; do not call back into the semaphore. */
typedef void (*dlock_permit_lost_fn)(dlock_permit *permit, void *arg);

/* Make a handle for permit-expirable semaphore `name`. */
DLOCK_API dlock_status dlock_psem_new(dlock_client *client, const char *name, dlock_psem **out);

/* Free a handle. Every dlock_permit taken through it must be released or
 * freed first. */
DLOCK_API void dlock_psem_free(dlock_psem *psem);

/*
 * Set the number of permits (0 to 2^31-1), only if not set yet; another
 * number already set is DLOCK_ERR_INVALID with both in the message, as
 * dlock_semaphore_set_permits(). Idle keys: the number expires
 * DLOCK_IDLE_MS after the last live permit's lease ends (or after it was
 * set, with none taken), and an expired one is made anew as the plain
 * semaphore's is.
 */
DLOCK_API dlock_status dlock_psem_set_permits(dlock_psem *psem, long permits, int *was_set);

/* Change the number of permits, as dlock_semaphore_resize() and
 * dlock_semaphore_add_permits(). Permits held beyond a smaller number stay
 * held until released or expired; none is granted until fewer are held. */
DLOCK_API dlock_status dlock_psem_resize(dlock_psem *psem, long permits);
DLOCK_API dlock_status dlock_psem_add_permits(dlock_psem *psem, long change);

/*
 * Take one permit. `wait_ms` as in dlock_lock_acquire(). `lease_ms`: a
 * positive lease after which the permit returns to the pool by itself, or
 * DLOCK_LEASE_WATCHDOG to have the client's watchdog renew it until
 * release (loss is reported through dlock_permit_lost() and the callback).
 * On success *out is the permit.
 */
DLOCK_API dlock_status dlock_psem_acquire(dlock_psem *psem, long wait_ms, long lease_ms, dlock_permit **out);

/* The permit's id, for release or renewal from elsewhere. */
DLOCK_API const char *dlock_permit_id(const dlock_permit *permit);

/* 1 when the watchdog found this permit expired or its trusted time is
 * over by the clock (as dlock_lock_lost()), else 0. */
DLOCK_API int dlock_permit_lost(dlock_permit *permit);

/* Register the loss callback for permits of this handle (NULL removes it). */
DLOCK_API void dlock_psem_on_lost(dlock_psem *psem, dlock_permit_lost_fn fn, void *arg);

/*
 * Release a permit and free it (in every case, so the caller never frees
 * twice). DLOCK_ERR_LOST when it had expired already: another process may
 * have taken that place in the meantime.
 */
DLOCK_API dlock_status dlock_psem_release(dlock_psem *psem, dlock_permit *permit);

/* Free a permit without releasing it: it stays taken until its lease ends. */
DLOCK_API void dlock_permit_free(dlock_permit *permit);

/* Release a permit by id, e.g. from another process. DLOCK_ERR_NOT_OWNER
 * when no live permit has that id. */
DLOCK_API dlock_status dlock_psem_release_id(dlock_psem *psem, const char *id);

/* Extend the lease of the permit with this id to `lease_ms` from now.
 * DLOCK_ERR_LOST when it had expired already. */
DLOCK_API dlock_status dlock_psem_renew(dlock_psem *psem, const char *id, long lease_ms);

/* Permits not held by a live permit. */
DLOCK_API dlock_status dlock_psem_available(dlock_psem *psem, long *available);

/* What an asynchronous permit call ends with: for an acquire, the permit
 * when status is DLOCK_OK (else NULL); for a release, NULL (the permit was
 * freed, as dlock_psem_release() frees it). */
typedef void (*dlock_permit_fn)(dlock_psem *psem, dlock_status status, dlock_permit *permit, void *arg);

/*
 * dlock_psem_acquire() and dlock_psem_release() without a thread that
 * waits, under the rules of dlock_lock_acquire_async(): cb runs once later
 * on a library thread, one asynchronous call runs on a handle at a time
 * (use a handle per call in flight; a permit may be released through any
 * handle of its semaphore), and a status other than DLOCK_OK means nothing
 * was started and cb will not run (a release not started leaves the
 * permit as it was).
 */
DLOCK_API dlock_status dlock_psem_acquire_async(dlock_psem *psem, long wait_ms, long lease_ms, dlock_permit_fn cb,
                                                void *arg);
DLOCK_API dlock_status dlock_psem_release_async(dlock_psem *psem, dlock_permit *permit, dlock_permit_fn cb, void *arg);

/* ------------------------------------------------------------------------ */
/* Count-down latch                                                          */
/* ------------------------------------------------------------------------ */

/*
 * Lets processes wait until others have counted down to zero, e.g. until N
 * workers are ready. Reaching zero opens the latch and wakes every waiter
 * at once; an open latch is kept ("0") for DLOCK_IDLE_MS, then its key
 * expires. A shut latch (set, not yet at zero) is kept until it opens.
 * Keys: "dlock:{NAME}:latch", channel "dlock:{NAME}:latch:ch", and
 * operation records "dlock:{NAME}:op:..." (see dlock_semaphore). Set,
 * count-down and await on a NAME in use as another kind are refused
 * (DLOCK_ERR_WRONG_KIND, "One NAME, one kind" above).
 */
typedef struct dlock_latch dlock_latch;

/* Make a handle for latch `name`. */
DLOCK_API dlock_status dlock_latch_new(dlock_client *client, const char *name, dlock_latch **out);

/* Free a handle. */
DLOCK_API void dlock_latch_free(dlock_latch *latch);

/* Set the count (1 to 2^31-1) only if the latch is not shut (never set,
 * or open); *was_set (if not NULL) tells whether this call set it. */
DLOCK_API dlock_status dlock_latch_set(dlock_latch *latch, long count, int *was_set);

/* Count down by one; *remaining (if not NULL) gets the count left. On a
 * latch that is not set this changes nothing and gives 0. */
DLOCK_API dlock_status dlock_latch_count_down(dlock_latch *latch, long *remaining);

/* Wait until the latch is open: set, then counted down to zero. A latch
 * not set yet is waited for like a shut one, so an await that starts
 * before the setter returns only after the last count-down; one that
 * comes more than DLOCK_IDLE_MS after the latch opened waits for it to
 * be set again. `wait_ms` as in dlock_lock_acquire(); DLOCK_ERR_TIMEOUT
 * when time ran out. */
DLOCK_API dlock_status dlock_latch_await(dlock_latch *latch, long wait_ms);

/* What an asynchronous await ends with, as dlock_latch_await() would. */
typedef void (*dlock_latch_fn)(dlock_latch *latch, dlock_status status, void *arg);

/*
 * dlock_latch_await() without a thread that waits, under the rules of
 * dlock_lock_acquire_async(): cb runs once later on a library thread,
 * with DLOCK_OK when the latch is open, DLOCK_ERR_TIMEOUT when `wait_ms`
 * ran out first, or a failure; one asynchronous call runs on a handle at
 * a time (use a handle per await in flight); a status other than DLOCK_OK
 * means nothing was started and cb will not run.
 */
DLOCK_API dlock_status dlock_latch_await_async(dlock_latch *latch, long wait_ms, dlock_latch_fn cb, void *arg);

/* What an asynchronous count-down ends with: `remaining` as
 * dlock_latch_count_down() gives it (0 on a failure). */
typedef void (*dlock_latch_counted_fn)(dlock_latch *latch, dlock_status status, long remaining, void *arg);

/*
 * dlock_latch_count_down() without waiting for the answer: cb runs once
 * later on a library thread, under the rules of dlock_latch_await_async()
 * (one asynchronous call on a handle at a time, so an await and a
 * count-down in flight together need a handle each). A count-down resent
 * after a lost reply counts once, as the synchronous one does.
 */
DLOCK_API dlock_status dlock_latch_count_down_async(dlock_latch *latch, dlock_latch_counted_fn cb, void *arg);

/* The current count (0 when not set, or open). */
DLOCK_API dlock_status dlock_latch_count(dlock_latch *latch, long *count);

/* ------------------------------------------------------------------------ */
/* Rate limiter                                                              */
/* ------------------------------------------------------------------------ */

/*
 * A distributed rate limit: `rate` permits per `interval_ms`, of which up
 * to `burst` may be taken at once by a caller that has been idle. It is
 * GCRA (the generic cell rate algorithm): one timestamp per bucket, one
 * script per decision, exact at any rate and with no window edges, so no
 * stretch of time t admits more than burst + rate * t / interval. Time is
 * the server's, never the clients'. One limit may keep a bucket per
 * subject (a user id, an address: a limit per subject), each a key that
 * expires as soon as its bucket is full again, so subjects seen once
 * leave nothing behind. The settings are stored with the limit, and every
 * client follows the stored ones. A waiter sleeps until its permits are
 * due, woken early when the settings change; it never polls.
 * Keys: "dlock:{NAME}:rate" (hash: rate, interval, burst; kept until
 * deleted), "dlock:{NAME}:rate:tat" (the whole limit's bucket),
 * "dlock:{NAME}:rate:tat:SUBJECT" (a subject's), channel
 * "dlock:{NAME}:rate:ch". All of one limit share a Cluster slot, so one
 * limit's decisions are made on one node. A server that loses its data
 * (restart without persistence, failover before replication) forgets the
 * buckets and admits a new burst. A rate limit holds nothing, so it is
 * not one of the kinds a NAME is checked against: a lock and a rate limit
 * may share a name. See docs/design/rate.md.
 */
typedef struct dlock_rate dlock_rate;

/* The longest interval: 2^31-1 ms, about 24.8 days. */
#define DLOCK_RATE_INTERVAL_MAX_MS 2147483647L
/* burst * interval_ms may be at most this (4 * 10^12: a burst of 46 000
 * over a day), so the scripts' arithmetic stays exact in Lua's doubles. */
#define DLOCK_RATE_SPAN_MAX 4000000000000LL

/* Settings of dlock_rate_new(). `dlock_rate_options o = {0};` then set
 * the rate. */
typedef struct dlock_rate_options {
    long rate;        /* permits per interval, 1 to 2^31-1 */
    long interval_ms; /* the interval; 0: 1000 (a rate per second) */
    long burst;       /* permits a full bucket holds, 1 to 2^31-1; 0: rate */
    int change;       /* 1: when the limit is stored with other settings,
                         replace them (and wake its waiters); 0: refuse
                         them with DLOCK_ERR_INVALID */
} dlock_rate_options;

/* What a decision or a look reports, read in one atomic step. */
typedef struct dlock_rate_result {
    int allowed;         /* 1: granted (dlock_rate_status: would be granted now) */
    long remaining;      /* permits that could be taken at once after this call */
    long retry_after_ms; /* when the permits asked for are due: 0 now, else
                            ms from now (rounded up); -1 never (more than the burst) */
    long reset_ms;       /* until the bucket is full again (0: full) */
    long rate;           /* the limit's settings as stored, which this */
    long interval_ms;    /* decision followed */
    long burst;
} dlock_rate_result;

/*
 * Open rate limit `name` (same rules as lock names) with the settings in
 * *opts, storing them when the limit has none. When it is stored with
 * others: DLOCK_ERR_INVALID, the message giving both (nothing changes),
 * as a semaphore of another size is refused, unless opts->change, which
 * replaces them. DLOCK_ERR_INVALID too for a setting out of range (see
 * DLOCK_RATE_SPAN_MAX).
 */
DLOCK_API dlock_status dlock_rate_new(dlock_client *client, const char *name, const dlock_rate_options *opts,
                                      dlock_rate **out);

/* Free a handle. The limit and its buckets stay. */
DLOCK_API void dlock_rate_free(dlock_rate *rate);

/*
 * Replace the limit's settings with *opts (opts->change is ignored),
 * waking its waiters so each sleeps for its permits under the new ones.
 * Buckets keep their state: a bucket deeper than the new burst counts as
 * empty. *changed (if not NULL): 1 when the stored settings were others.
 */
DLOCK_API dlock_status dlock_rate_set(dlock_rate *rate, const dlock_rate_options *opts, int *changed);

/*
 * Take `permits` (1 to the burst) from the bucket of `subject` (1 to 512
 * bytes, any but NUL; NULL: the whole limit's bucket), all or nothing,
 * waiting up to `wait_ms` (0: not at all; DLOCK_WAIT_FOREVER) for them to
 * be due. A waiter sleeps exactly until they are due, on a timer; it
 * makes one script call per wake-up, and a change of the settings wakes
 * it at once. DLOCK_ERR_TIMEOUT, without waiting, when they are due only
 * after wait_ms (res->retry_after_ms says when); DLOCK_ERR_INVALID when
 * they are more than the burst. `res` (may be NULL) gets the last
 * decision, on DLOCK_OK and DLOCK_ERR_TIMEOUT. Thread-safe: any number of
 * threads may use one handle.
 */
DLOCK_API dlock_status dlock_rate_acquire(dlock_rate *rate, const char *subject, long permits, long wait_ms,
                                          dlock_rate_result *res);

/* dlock_rate_acquire() with wait_ms 0: one script call, no wait. */
DLOCK_API dlock_status dlock_rate_try(dlock_rate *rate, const char *subject, long permits, dlock_rate_result *res);

/* What taking `permits` from the bucket of `subject` would give now,
 * without taking anything (res->allowed, remaining, when due). */
DLOCK_API dlock_status dlock_rate_status(dlock_rate *rate, const char *subject, long permits, dlock_rate_result *res);

/* What an asynchronous acquire ends with: `status` as dlock_rate_acquire()
 * would return it, and its result (NULL on other failures), valid during
 * the call only. */
typedef void (*dlock_rate_fn)(dlock_rate *rate, dlock_status status, const dlock_rate_result *res, void *arg);

/*
 * dlock_rate_acquire() without a thread that waits, under the rules of
 * dlock_lock_acquire_async(): cb runs once later on a library thread; one
 * asynchronous call runs on a handle at a time (a second one fails with
 * DLOCK_ERR_INVALID until the first one's callback has begun: use a
 * handle per call in flight); a status other than DLOCK_OK means nothing
 * was started and cb will not run. `subject` is copied.
 */
DLOCK_API dlock_status dlock_rate_acquire_async(dlock_rate *rate, const char *subject, long permits, long wait_ms,
                                                dlock_rate_fn cb, void *arg);

/* ------------------------------------------------------------------------ */
/* Read-write lock                                                           */
/* ------------------------------------------------------------------------ */

/*
 * Many readers or one writer. Holds belong to threads and are reentrant
 * per mode. The writer may also take read holds; a reader asking for the
 * write hold is refused with DLOCK_ERR_DEADLOCK (it would wait for its own
 * read hold forever). A crashed reader's hold ends with its lease. Write
 * release wakes every waiter, so all readers go at once. Readers are not
 * held back by a waiting writer (as in Redisson): under a steady stream of
 * overlapping readers a writer waits until they thin out.
 * Keys: "dlock:{NAME}:rw" (hash), the fencing counter of the name's slot
 * (docs/design/keys.md), channel "dlock:{NAME}:rw:ch".
 * A NAME held as a plain or fair lock, or in use as
 * a semaphore or latch, is refused (DLOCK_ERR_WRONG_KIND, "One NAME, one
 * kind" above), and a plain or fair lock is refused while read or write
 * holds of the NAME last.
 */
typedef struct dlock_rwlock dlock_rwlock;

typedef enum dlock_rw_mode { DLOCK_READ = 0, DLOCK_WRITE = 1 } dlock_rw_mode;

/* Called on the watchdog thread when a renewed hold was found lost. */
typedef void (*dlock_rw_lost_fn)(dlock_rwlock *rw, dlock_rw_mode mode, uint64_t token, void *arg);

/* Make a handle for read-write lock `name`; shareable between threads. */
DLOCK_API dlock_status dlock_rwlock_new(dlock_client *client, const char *name, dlock_rwlock **out);

/* Free a handle; holds still open are abandoned to their leases. */
DLOCK_API void dlock_rwlock_free(dlock_rwlock *rw);

/*
 * Take a read or write hold for the calling thread. `wait_ms` and
 * `lease_ms` as in dlock_lock_acquire(). *token (if not NULL): for a write
 * hold, its fencing token; for a read hold, the last token of the counter
 * the name shares with its hash slot (0 if none): at least the latest
 * write hold's and below the next one's, i.e. the version the reader sees.
 */
DLOCK_API dlock_status dlock_rwlock_acquire(dlock_rwlock *rw, dlock_rw_mode mode, long wait_ms, long lease_ms,
                                            uint64_t *token);

/* Undo one acquisition of `mode` by the calling thread; errors as in
 * dlock_lock_release(). */
DLOCK_API dlock_status dlock_rwlock_release(dlock_rwlock *rw, dlock_rw_mode mode);

/* The same as dlock_lock_set_fence_floor(), for this handle's write holds. */
DLOCK_API void dlock_rwlock_set_fence_floor(dlock_rwlock *rw, uint64_t floor);

/* 1 when the calling thread's current or last hold of `mode` was lost or
 * its trusted time is over by the clock (as dlock_lock_lost()). */
DLOCK_API int dlock_rwlock_lost(dlock_rwlock *rw, dlock_rw_mode mode);

/* Register the loss callback of this handle (NULL removes it). */
DLOCK_API void dlock_rwlock_on_lost(dlock_rwlock *rw, dlock_rw_lost_fn fn, void *arg);

/* What an asynchronous read-write call ends with, as its synchronous twin
 * (the token of a write hold; 0 for a read hold). */
typedef void (*dlock_rw_acquired_fn)(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status status, uint64_t token,
                                     void *arg);
typedef void (*dlock_rw_released_fn)(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status status, void *arg);

/*
 * dlock_rwlock_acquire() and dlock_rwlock_release() without a thread that
 * waits, under the rules of dlock_lock_acquire_async(): the holds belong to
 * the handle (any thread may release them, dlock_rwlock_lost() reports
 * them when the calling thread has none of its own), one asynchronous call
 * runs on a handle at a time.
 */
DLOCK_API dlock_status dlock_rwlock_acquire_async(dlock_rwlock *rw, dlock_rw_mode mode, long wait_ms, long lease_ms,
                                                  dlock_rw_acquired_fn cb, void *arg);
DLOCK_API dlock_status dlock_rwlock_release_async(dlock_rwlock *rw, dlock_rw_mode mode, dlock_rw_released_fn cb,
                                                  void *arg);

/*
 * A completion queue: the outcomes of asynchronous calls, waiting for an
 * event loop to take them on its own thread. Pass one of the
 * dlock_queue_on_* functions below as an asynchronous call's callback and
 * a ticket from dlock_queue_ticket() as its argument; the library thread
 * that ends the call then only appends the outcome and, when the queue was
 * empty, makes dlock_queue_fd() readable. Why: a callback that has to run
 * the loop's own code (an interpreter's, under its global lock) would hold
 * up the library thread that reads every caller's replies; a queue costs
 * that thread a mutex and at most one write.
 */
typedef struct dlock_queue dlock_queue;

/* Room for a failure's message in a completion (dlock_last_error()'s). */
#define DLOCK_QUEUE_ERROR_MAX 512

/* One outcome taken from a queue. */
typedef struct dlock_completion {
    uint64_t key;                      /* the ticket's key */
    dlock_status status;               /* what the callback would have been given */
    uint64_t token;                    /* an acquisition's fencing token, else 0 */
    char error[DLOCK_QUEUE_ERROR_MAX]; /* dlock_last_error() of a failure, "" on success */
} dlock_completion;

/* Where dlock_queue_divert() sends one call's outcome instead. */
typedef void (*dlock_queue_fn)(const dlock_completion *completion, void *arg);

/*
 * Make an empty queue with its own descriptor (an eventfd, non-blocking,
 * close-on-exec). DLOCK_OK, or DLOCK_ERR_NOMEM / DLOCK_ERR_SYS with a
 * message when memory or descriptors ran out.
 */
DLOCK_API dlock_status dlock_queue_new(dlock_queue **out);

/*
 * The descriptor to watch for reading (poll, epoll, a loop's "add reader"):
 * readable while completions wait. Read it only through dlock_queue_take().
 */
DLOCK_API int dlock_queue_fd(const dlock_queue *q);

/*
 * Let go of the queue: completions not taken are dropped, and its
 * descriptor is closed. Calls still in flight with its tickets may end
 * later: their outcomes are dropped too (a hold they took stays held, so
 * end or drain them first: dlock_client_drain()).
 */
DLOCK_API void dlock_queue_free(dlock_queue *q);

/*
 * A ticket for one asynchronous call whose outcome `key` names: the `arg`
 * to give the call with the matching dlock_queue_on_* callback. The call's
 * end frees it. NULL when memory ran out. A ticket whose call did not
 * start (the call returned a status other than DLOCK_OK) is given back
 * with dlock_queue_ticket_free().
 */
DLOCK_API void *dlock_queue_ticket(dlock_queue *q, uint64_t key);
DLOCK_API void dlock_queue_ticket_free(void *ticket);

/*
 * Move up to `max` completions into `out`, oldest first, and return how
 * many. Clears the descriptor's readiness, and sets it again when more
 * remain, so a level-triggered loop comes back for them.
 */
DLOCK_API size_t dlock_queue_take(dlock_queue *q, dlock_completion *out, size_t max);

/*
 * Send the outcome of the call holding `ticket` to fn(completion, arg),
 * on the library thread that ends it, instead of to the queue: for a
 * caller that stops waiting for it (a cancelled task, a loop about to
 * close) and must still undo what it brings (give back a hold). Returns 1
 * when the outcome had already arrived: it is taken out of the queue into
 * *out and fn will not run; 0 when fn will run later, once. Call it only
 * for a ticket whose outcome has not been taken.
 */
DLOCK_API int dlock_queue_divert(dlock_queue *q, void *ticket, dlock_completion *out, dlock_queue_fn fn, void *arg);

/* The callbacks that post to a ticket's queue, one per kind of call. */
DLOCK_API void dlock_queue_on_acquired(dlock_lock *lock, dlock_status status, uint64_t token, void *ticket);
DLOCK_API void dlock_queue_on_released(dlock_lock *lock, dlock_status status, void *ticket);
DLOCK_API void dlock_queue_on_rw_acquired(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status status, uint64_t token,
                                          void *ticket);
DLOCK_API void dlock_queue_on_rw_released(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status status, void *ticket);
DLOCK_API void dlock_queue_on_semaphore(dlock_semaphore *sem, dlock_status status, void *ticket);
/* For the permit calls: the completion's token is the permit's address
 * ((uint64_t)(uintptr_t)permit; 0 for none). */
DLOCK_API void dlock_queue_on_permit(dlock_psem *psem, dlock_status status, dlock_permit *permit, void *ticket);
DLOCK_API void dlock_queue_on_latch(dlock_latch *latch, dlock_status status, void *ticket);
/* For dlock_latch_count_down_async(): the token is the count left. */
DLOCK_API void dlock_queue_on_counted(dlock_latch *latch, dlock_status status, long remaining, void *ticket);
/* For dlock_id_next_async(): the token is the batch's first ID (the
 * caller knows how many it asked for). */
DLOCK_API void dlock_queue_on_ids(dlock_client *client, dlock_status status, uint64_t first, size_t count,
                                  void *ticket);
DLOCK_API void dlock_queue_on_multilock(dlock_status status, void *ticket);
/* For dlock_rate_acquire_async(): the token is the result's remaining on
 * DLOCK_OK, its retry_after_ms on DLOCK_ERR_TIMEOUT, else 0. */
DLOCK_API void dlock_queue_on_rate(dlock_rate *rate, dlock_status status, const dlock_rate_result *res, void *ticket);

/* What dlock_rwlock_inspect() reports. */
typedef struct dlock_rwlock_info {
    int held;         /* 1 when a writer or any reader holds it */
    char writer[96];  /* owner string of the write hold, empty when none */
    long write_count; /* the writer's re-entry count, 0 when none */
    long readers;     /* owners holding a live read hold */
    long ttl_ms;      /* remaining lease of the longest hold, -1 when free */
    /* the write hold's token; without one, the last token of the counter
     * the name shares with its hash slot (at least its own last), 0 if none */
    uint64_t last_token;
} dlock_rwlock_info;

/* Read the state of read-write lock `name` without changing it (the admin
 * view; `dlock status` shows it next to the plain lock of that name). */
DLOCK_API dlock_status dlock_rwlock_inspect(dlock_client *client, const char *name, dlock_rwlock_info *info);

/* Delete read-write lock `name` whoever holds it (writer and readers) and
 * wake every waiter; the holders' watchdogs report their holds lost.
 * *was_held (if not NULL) tells whether anything was deleted. For
 * operators, not for normal release. */
DLOCK_API dlock_status dlock_rwlock_force_unlock(dlock_client *client, const char *name, int *was_held);

/* ------------------------------------------------------------------------ */
/* Administration                                                            */
/* ------------------------------------------------------------------------ */

/*
 * For operators and tools (`dlock list`, `dlock delete`): what is held
 * under which names, and removing what a crashed program left behind.
 * Not for the paths of a program that uses the locks.
 */

/* What kind of object a name is used as. A fair lock with no waiter keeps
 * exactly the keys of a plain lock, so it is listed as DLOCK_KIND_LOCK. */
typedef enum dlock_kind {
    DLOCK_KIND_LOCK = 0,      /* a plain lock (or a fair lock nobody waits for) */
    DLOCK_KIND_FAIR_LOCK = 1, /* a fair lock with waiters queued */
    DLOCK_KIND_RWLOCK = 2,
    DLOCK_KIND_SEMAPHORE = 3,
    DLOCK_KIND_PSEM = 4, /* permit-expirable semaphore */
    DLOCK_KIND_LATCH = 5
} dlock_kind;

/* "lock", "fair", "rwlock", "semaphore", "psem" or "latch"; "?" for any
 * other value. Never NULL. */
DLOCK_API const char *dlock_kind_name(dlock_kind kind);

/* What dlock_semaphore_inspect() reports. A semaphore keeps only the
 * permits left, not how many it was set to, so "used" is not known. */
typedef struct dlock_semaphore_info {
    int exists;     /* 1 once set (dlock_semaphore_set_permits) */
    long available; /* permits available now, 0 when not set */
} dlock_semaphore_info;

/* Read semaphore `name` without changing it. */
DLOCK_API dlock_status dlock_semaphore_inspect(dlock_client *client, const char *name, dlock_semaphore_info *info);

/* What dlock_psem_inspect() reports, read in one atomic step. */
typedef struct dlock_psem_info {
    int exists;   /* 1 once set (dlock_psem_set_permits) */
    long permits; /* what it was set to (0 when not set) */
    long used;    /* permits held by a live permit (lease not over) */
    long ttl_ms;  /* the longest lease left among them, -1 when none */
} dlock_psem_info;

/* Read permit-expirable semaphore `name` without changing it. */
DLOCK_API dlock_status dlock_psem_inspect(dlock_client *client, const char *name, dlock_psem_info *info);

/* What dlock_latch_inspect() reports. */
typedef struct dlock_latch_info {
    int exists; /* 1 while set and not yet counted down to zero */
    long count; /* the count left, 0 when not set */
} dlock_latch_info;

/* Read latch `name` without changing it. */
DLOCK_API dlock_status dlock_latch_inspect(dlock_client *client, const char *name, dlock_latch_info *info);

/* One object found by dlock_list(): its name, its kind, and what the
 * kind's inspect call reports (the member named by `kind`). */
typedef struct dlock_entry {
    char *name;
    dlock_kind kind;
    union {
        dlock_lock_info lock; /* DLOCK_KIND_LOCK, DLOCK_KIND_FAIR_LOCK */
        dlock_rwlock_info rwlock;
        dlock_semaphore_info semaphore;
        dlock_psem_info psem;
        dlock_latch_info latch;
    } info;
} dlock_entry;

/*
 * Every held lock, fair lock and read-write lock, every semaphore and
 * permit-expirable semaphore that is set, and every latch not yet open,
 * whose name matches the glob `pattern` (Redis's MATCH syntax: * ? [...]
 * and \ to escape; "*" for all; no '{' or '}'). The keys are found with
 * SCAN on the one server (the Sentinels' master), or on every master of a
 * Cluster, and each object is then read by its inspect call. SCAN is not a
 * snapshot: an object made or removed while it runs may be listed or not,
 * and each entry's state is from its own moment. Objects that are gone by
 * the time they are read are left out. Entries are sorted by name, then
 * kind. On DLOCK_OK *out is an array of *n entries (NULL when none) to
 * free with dlock_list_free(); on a failure *out is NULL and *n 0. It
 * reads the whole keyspace, so its cost grows with the number of keys of
 * the deployment, not with the matches.
 */
DLOCK_API dlock_status dlock_list(dlock_client *client, const char *pattern, dlock_entry **out, size_t *n);

/* Free what dlock_list() returned (NULL is fine). */
DLOCK_API void dlock_list_free(dlock_entry *entries, size_t n);

/*
 * Delete every key of name `name` (its lock, fair lock queue, read-write
 * lock, semaphores, latch, waiting sets and what the CLI wrote for it),
 * in one atomic step. While it is in use (a lock, fair lock or
 * read-write hold, a live permit, or a latch not yet open) it is refused
 * with DLOCK_ERR_NOT_OWNER, the message saying which kind holds it,
 * unless `force` is non-zero: then the holders' watchdogs report their
 * holds lost and waiters are woken (as dlock_lock_force_unlock()). A plain
 * semaphore has no holders to check: deleting it forgets its permits, and
 * the next dlock_semaphore_set_permits() sets them again. Fencing tokens
 * do not go back: the counter they come from belongs to the name's hash
 * slot and is kept, and a per-name counter an earlier version left is
 * folded into it before it is deleted. Short-lived operation records
 * ("dlock:{NAME}:op:...") are left to expire. *deleted (if not NULL)
 * receives the number of keys deleted.
 */
DLOCK_API dlock_status dlock_delete(dlock_client *client, const char *name, int force, int *deleted);

/* ------------------------------------------------------------------------ */
/* Multi-lock                                                                */
/* ------------------------------------------------------------------------ */

/*
 * Acquire every lock in locks[0..n-1] for the calling thread, or none. The
 * locks may belong to different clients (servers). They are taken in one
 * global order, (server, name), whatever order they are passed in, so two
 * multi-locks over overlapping sets cannot deadlock. If one cannot be taken
 * the ones already taken are released before this returns (or before a
 * retry, for server errors while wait time remains). `wait_ms` bounds the
 * whole call; `lease_ms` is as in dlock_lock_acquire(). tokens (may be NULL)
 * receives each lock's fencing token at the lock's index. The same lock may
 * not appear twice (DLOCK_ERR_INVALID). A lock lost while a later one was
 * awaited (its lease ran out) is never returned: the set is given back and
 * taken again, and DLOCK_ERR_LOST says so when no wait time was left.
 */
DLOCK_API dlock_status dlock_multilock_acquire(dlock_lock *const *locks, size_t n, long wait_ms, long lease_ms,
                                               uint64_t *tokens);

/* Release one hold of each lock. Every lock is attempted; the first
 * failure is returned. */
DLOCK_API dlock_status dlock_multilock_release(dlock_lock *const *locks, size_t n);

/* What an asynchronous multi-lock call ends with: `status` as its
 * synchronous twin would return it; dlock_last_error() inside the
 * callback gives a failure's message. */
typedef void (*dlock_multilock_fn)(dlock_status status, void *arg);

/*
 * dlock_multilock_acquire() without a thread that waits, under the rules
 * of dlock_lock_acquire_async(): cb(status, arg) runs once later on a
 * library thread, each lock's hold belongs to its handle (release them
 * with dlock_multilock_release_async()), and no other asynchronous call
 * may run on those handles until cb has begun. The locks are taken one
 * after another in the global order, each asked for when the one before
 * is granted; the array is copied, `tokens` (may be NULL) is written up
 * to cb. Unlike the synchronous call it does not start over after a
 * server error: it gives back what it took and ends with the error, and
 * the caller decides when to try again. A member lost before the set was
 * complete starts it over at once while wait time remains. A status other
 * than DLOCK_OK means nothing was started and cb will not run.
 */
DLOCK_API dlock_status dlock_multilock_acquire_async(dlock_lock *const *locks, size_t n, long wait_ms, long lease_ms,
                                                     uint64_t *tokens, dlock_multilock_fn cb, void *arg);

/*
 * Release one asynchronous hold of each lock, the last first, each
 * release asked for when the one before has ended: cb(status, arg) later
 * with the first failure, as dlock_multilock_release(). Releases that
 * cannot start (a handle holding nothing, a hold already lost) count as
 * failures; when none can start, that failure is returned at once and cb
 * will not run.
 */
DLOCK_API dlock_status dlock_multilock_release_async(dlock_lock *const *locks, size_t n, dlock_multilock_fn cb,
                                                     void *arg);

/* ------------------------------------------------------------------------ */
/* RedLock                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct dlock_redlock dlock_redlock;

/* Called from a watchdog thread when fewer than a majority of masters
 * still hold a watchdog-renewed RedLock. */
typedef void (*dlock_redlock_lost_fn)(dlock_redlock *rl, void *arg);

/*
 * A lock named `name` over n independent masters (1 to 32 clients, each on
 * its own server, not replicas of one another); held when a majority
 * (n/2 + 1) granted it. Give the masters' clients a command timeout well
 * under the lease: a stalled master delays a round by up to that long.
 * A handle holds at most one hold at a time and is not reentrant; any
 * thread may release it, but calls on one handle must not run concurrently.
 */
DLOCK_API dlock_status dlock_redlock_new(dlock_client *const *masters, size_t n, const char *name, dlock_redlock **out);

/* Free the handle; a hold still open is abandoned (its leases run out). */
DLOCK_API void dlock_redlock_free(dlock_redlock *rl);

/*
 * Acquire on all masters in parallel. Success needs a majority of grants
 * and a positive validity = lease - elapsed (monotonic, from before the
 * first request) - drift (1% of the lease + 2 ms); *validity_ms (may be
 * NULL) receives it: the time the lock is surely still held. Failed rounds
 * release everywhere and retry after a random 20-200 ms, or at once when
 * the holder's release is published on the first master, until `wait_ms`
 * ends (DLOCK_ERR_TIMEOUT; DLOCK_ERR_CONNECT when no master answered).
 * DLOCK_LEASE_WATCHDOG renews each master's share from that master's
 * client watchdog; the hold is lost when fewer than a majority remain.
 * *token receives the highest fencing token of the granting masters; it
 * rises strictly only while the masters' clocks agree (see docs).
 */
DLOCK_API dlock_status dlock_redlock_acquire(dlock_redlock *rl, long wait_ms, long lease_ms, long *validity_ms,
                                             uint64_t *token);

/* Extend an explicit lease on all masters to `lease_ms`; succeeds only
 * when a majority renewed within the new validity (DLOCK_ERR_LOST else). */
DLOCK_API dlock_status dlock_redlock_extend(dlock_redlock *rl, long lease_ms, long *validity_ms);

/* Release on every master. DLOCK_ERR_LOST when fewer than a majority
 * still held it (the lock may have been taken by someone else meanwhile). */
DLOCK_API dlock_status dlock_redlock_release(dlock_redlock *rl);

/* The same as dlock_lock_set_fence_floor(), passed to every master. */
DLOCK_API void dlock_redlock_set_fence_floor(dlock_redlock *rl, uint64_t floor);

/* 1 when the watchdog found the current hold lost, or fewer than a
 * majority of its shares are still trusted by the clock (as
 * dlock_lock_lost()), else 0. */
DLOCK_API int dlock_redlock_lost(dlock_redlock *rl);

/* Register the loss callback (NULL removes it). */
DLOCK_API void dlock_redlock_on_lost(dlock_redlock *rl, dlock_redlock_lost_fn fn, void *arg);

/* What an asynchronous RedLock call ends with: `status` as its synchronous
 * twin would return it, and for an acquisition the fencing token when it
 * is DLOCK_OK (dlock_redlock_validity() gives the validity). */
typedef void (*dlock_redlock_acquired_fn)(dlock_redlock *rl, dlock_status status, uint64_t token, void *arg);
typedef void (*dlock_redlock_released_fn)(dlock_redlock *rl, dlock_status status, void *arg);

/*
 * dlock_redlock_acquire() without a thread that waits, under the rules of
 * dlock_lock_acquire_async(): cb runs once later on a library thread, and
 * one asynchronous call runs on a handle at a time (a second one fails
 * with DLOCK_ERR_INVALID until the first one's callback has begun); no
 * synchronous call may run on the handle meanwhile. Rounds, pauses,
 * wake-ups by the holder's release and the majority rule are those of the
 * synchronous call. The call is counted on the first master's client:
 * dlock_client_drain() of that client ends a waiting acquisition with
 * DLOCK_ERR_INVALID. A status other than DLOCK_OK means nothing was
 * started and cb will not run.
 */
DLOCK_API dlock_status dlock_redlock_acquire_async(dlock_redlock *rl, long wait_ms, long lease_ms,
                                                   dlock_redlock_acquired_fn cb, void *arg);

/* dlock_redlock_release() without a thread that waits: cb later, with what
 * it would return. DLOCK_ERR_NOT_OWNER at once when the handle holds
 * nothing (cb will not run). */
DLOCK_API dlock_status dlock_redlock_release_async(dlock_redlock *rl, dlock_redlock_released_fn cb, void *arg);

/* The validity (ms) that the current hold's acquisition, or its latest
 * extension, reported; 0 when the handle holds nothing. */
DLOCK_API long dlock_redlock_validity(const dlock_redlock *rl);

/* The completion queue's callbacks for the two calls above (see
 * dlock_queue_new()). */
DLOCK_API void dlock_queue_on_redlock_acquired(dlock_redlock *rl, dlock_status status, uint64_t token, void *ticket);
DLOCK_API void dlock_queue_on_redlock_released(dlock_redlock *rl, dlock_status status, void *ticket);

/* ------------------------------------------------------------------------ */
/* Lock metrics                                                              */
/* ------------------------------------------------------------------------ */

/*
 * Every client counts what its locks do, so that contention shows before
 * it hurts: acquisitions, failures by reason, how long acquire calls
 * waited and holds lasted, renewals and their latency, losses and
 * wake-ups, each by kind of lock. Counting is always on and costs a few
 * uncontended atomic additions per acquire and release (measured in
 * docs/BENCHMARKS.md, "Cost of the lock metrics"). Counters start at zero
 * when the client is made and only grow. Nothing is counted per lock
 * name: names are unbounded, and a bounded table (the busiest N names)
 * would need a shared structure on the hot path; label your own metrics
 * by name where you need that.
 *
 * What is counted where:
 *  - an acquire call (dlock_lock_acquire, dlock_rwlock_acquire,
 *    dlock_semaphore_acquire, dlock_psem_acquire, dlock_redlock_acquire,
 *    and dlock_latch_await) on a handle counts once when it returns: as an
 *    acquisition when it succeeded (a re-entry too), otherwise as a
 *    failure with its reason; either way its duration goes to the wait
 *    histogram. A multi-lock counts as the plain-lock calls it makes.
 *  - a hold (lock, fair, read, write, permit, redlock: from the return of
 *    the acquire that began it to the release that ends it, re-entries
 *    inside) goes to the hold histogram when that release returns,
 *    whatever it returns. A plain semaphore has no owner and a latch no
 *    hold, so neither has hold times.
 *  - each renewal of a hold by the watchdog: renewed, or failed (an error,
 *    or the server no longer had it), with the duration of the renewal
 *    call it rode in (holds renewed together share one call).
 *  - a loss: a hold the watchdog reported lost (callback), or one whose
 *    release found it expired (DLOCK_ERR_LOST); once per hold.
 *  - a wake-up: a waiting call woken by a release (or by its
 *    subscription being made again after a broken link) rather than by
 *    its own timer.
 * A RedLock counts its acquire calls, holds and losses on the client of
 * its first master, and its renewals on each master's own client.
 */
/*
 * The kinds and the failure reasons, each written once: X(NAME, "label",
 * what it counts). The enums below and the Prometheus labels (src/stats.c)
 * are generated from these lists, so the two cannot disagree.
 */
#define DLOCK_STATS_KIND_LIST(X)                                                                                       \
    X(LOCK, "lock", "dlock_lock_new()")                                                                                \
    X(FAIR, "fair", "dlock_lock_new_fair()")                                                                           \
    X(READ, "read", "read holds of dlock_rwlock")                                                                      \
    X(WRITE, "write", "write holds of dlock_rwlock")                                                                   \
    X(SEMAPHORE, "semaphore", "dlock_semaphore")                                                                       \
    X(PERMIT, "permit", "dlock_psem")                                                                                  \
    X(REDLOCK, "redlock", "dlock_redlock")                                                                             \
    X(LATCH, "latch", "dlock_latch_await()")                                                                           \
    X(RATE, "rate", "dlock_rate_acquire() and its try and async")

/* Why an acquire call failed, from its status. LOST: a re-entry into a
 * lost hold, or a grant answered too late. */
#define DLOCK_STATS_REASON_LIST(X)                                                                                     \
    X(TIMEOUT, "timeout", "DLOCK_ERR_TIMEOUT")                                                                         \
    X(CONNECT, "connect", "DLOCK_ERR_CONNECT")                                                                         \
    X(LOST, "lost", "DLOCK_ERR_LOST")                                                                                  \
    X(REDIS, "redis", "DLOCK_ERR_REDIS")                                                                               \
    X(OTHER, "other", "every other status")

#define DLOCK__STATS_ENUM_ITEM(name, label, what) DLOCK_STATS_##name,
/* DLOCK_STATS_LOCK = 0, DLOCK_STATS_FAIR, ... in the list's order. */
typedef enum dlock_stats_kind {
    DLOCK_STATS_KIND_LIST(DLOCK__STATS_ENUM_ITEM) DLOCK_STATS_KINDS /* how many kinds there are */
} dlock_stats_kind;

/* DLOCK_STATS_TIMEOUT = 0, DLOCK_STATS_CONNECT, ... in the list's order. */
typedef enum dlock_stats_reason {
    DLOCK_STATS_REASON_LIST(DLOCK__STATS_ENUM_ITEM) DLOCK_STATS_REASONS /* how many reasons there are */
} dlock_stats_reason;
#undef DLOCK__STATS_ENUM_ITEM

/* The upper bounds of the histograms' buckets, in microseconds (25 us, an
 * uncontended acquire on a local socket, to 60 s, as Prometheus's "le"),
 * for `static const long b[] = {DLOCK_STATS_BOUNDS_US};`. One more bucket
 * takes everything above. */
#define DLOCK_STATS_BOUNDS_US                                                                                          \
    25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000,   \
        10000000, 30000000, 60000000
/* Buckets per histogram: the bounds above and +Inf. */
#define DLOCK_STATS_BUCKETS 21

/* A histogram of durations. buckets[i] counts the observations up to
 * bound i (cumulative, as Prometheus's), so buckets[DLOCK_STATS_BUCKETS-1]
 * (+Inf) equals count. */
typedef struct dlock_histogram {
    uint64_t count;
    uint64_t sum_ns; /* their total, in nanoseconds */
    uint64_t buckets[DLOCK_STATS_BUCKETS];
} dlock_histogram;

/* The numbers of one kind of lock (see above for what each counts). */
typedef struct dlock_kind_stats {
    uint64_t acquisitions;                  /* acquire calls that succeeded, re-entries included */
    uint64_t failures[DLOCK_STATS_REASONS]; /* acquire calls that failed, by dlock_stats_reason */
    uint64_t renewals;                      /* watchdog renewals that renewed a hold */
    uint64_t renewal_failures;              /* ... that did not (error, or hold gone) */
    uint64_t losses;                        /* holds found lost */
    uint64_t wakeups;                       /* waiting calls woken by a release */
    dlock_histogram wait;                   /* duration of every acquire call */
    dlock_histogram hold;                   /* holds, acquire return to release */
    dlock_histogram renewal;                /* renewal calls, one observation per hold renewed or not
                                                  (count == renewals + renewal_failures) */
} dlock_kind_stats;

/*
 * A copy of a client's metrics, indexed by dlock_stats_kind. A struct tag
 * without a typedef, as POSIX's struct stat beside stat(): the function
 * below has the name. New kinds or fields may be added in a later version
 * (rebuild against the new header).
 */
struct dlock_stats {
    dlock_kind_stats kind[DLOCK_STATS_KINDS];
};

/*
 * Copy client's metrics into *out. Each value is read atomically, but not
 * all of them at one instant: while other threads work, a copy may show a
 * call counted in one place and not yet in another (a wait observation
 * one ahead of its acquisition); when nothing runs, every total agrees
 * (wait.count == acquisitions plus all failures). Lock-free; cheap enough
 * for a scrape every second. DLOCK_ERR_INVALID when either is NULL.
 */
DLOCK_API dlock_status dlock_stats(dlock_client *client, struct dlock_stats *out);

/*
 * Render client's metrics in the Prometheus text exposition format
 * (version 0.0.4) into buf: per family a "# HELP" and a "# TYPE" line,
 * then its samples, labelled kind="..." (and reason="..." for failures):
 * dlock_acquisitions_total, dlock_acquire_failures_total,
 * dlock_wait_seconds (histogram), dlock_hold_seconds (histogram),
 * dlock_renewals_total, dlock_renewal_failures_total,
 * dlock_renewal_seconds (histogram), dlock_losses_total and
 * dlock_wakeups_total. A kind's samples appear once anything of that kind
 * was counted (all of them then, zeros included, so rates start right),
 * and only in the families that apply to it (no hold times for
 * semaphores and latches). Every family's HELP and TYPE lines are always
 * there. The text ends with a newline and is NUL-terminated; to serve it
 * beside other metrics, append it (names all start with "dlock_"). One
 * client per exposition, since the HELP and TYPE lines may appear only
 * once: a program with several clients (the masters of a RedLock) serves
 * the one it cares about, or adds up their dlock_stats itself.
 * DLOCK_OK when the text and its NUL fit in `size` bytes; otherwise
 * DLOCK_ERR_INVALID, with buf holding "" (when size > 0). Either way
 * *needed (if not NULL) gets the size this rendering took or would take,
 * NUL included: call with (NULL, 0) to learn it, and leave room to spare,
 * since the text grows when another kind is first used (a 64 KiB buffer
 * holds every kind). Lock-free; never allocates.
 */
DLOCK_API dlock_status dlock_stats_prometheus(dlock_client *client, char *buf, size_t size, size_t *needed);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_H */
