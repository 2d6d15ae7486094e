/*
 * One NAME, one kind, against real servers (one server, Sentinel or
 * Cluster: target.h). Every pair of the seven kinds (plain, fair, read,
 * write, semaphore, permit-expirable semaphore, latch) on one NAME: the
 * second kind is refused with DLOCK_ERR_WRONG_KIND naming the first while
 * the first is held or in use, and succeeds once the first is gone; the
 * pairs that are one lock (plain and fair, read and write) still wait for
 * each other. The asynchronous calls end the same way. Then the latch
 * that an await reaches before its setter, the semaphores' sizes (a
 * different size refused, resize and add), and the idle keys' expiry.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "target.h"

static th_target server;

enum kind { PLAIN, FAIR, READ, WRITE, SEM, PSEM, LATCH, KINDS };

static const char *const kind_name[KINDS] = {"plain", "fair", "read", "write", "sem", "psem", "latch"};

/* What a refusal says of a NAME held or used as each kind. */
static const char *const kind_said[KINDS] = {
    "held as a lock",       "held as a lock",        "held as a read lock",
    "held as a write lock", "in use as a semaphore", "in use as a permit-expirable semaphore",
    "in use as a latch",
};

/* One kind's handle on a NAME, of a client of its own (another owner). */
typedef struct use {
    enum kind kind;
    dlock_client *c;
    dlock_lock *lock;
    dlock_rwlock *rw;
    dlock_semaphore *sem;
    dlock_psem *psem;
    dlock_permit *permit;
    dlock_latch *latch;
} use;

static void use_open(use *u, enum kind k, const char *name)
{
    memset(u, 0, sizeof *u);
    u->kind = k;
    assert_int_equal(dlock_client_new(server.url, NULL, &u->c), DLOCK_OK);
    switch (k) {
    case PLAIN: assert_int_equal(dlock_lock_new(u->c, name, &u->lock), DLOCK_OK); break;
    case FAIR: assert_int_equal(dlock_lock_new_fair(u->c, name, &u->lock), DLOCK_OK); break;
    case READ:
    case WRITE: assert_int_equal(dlock_rwlock_new(u->c, name, &u->rw), DLOCK_OK); break;
    case SEM: assert_int_equal(dlock_semaphore_new(u->c, name, &u->sem), DLOCK_OK); break;
    case PSEM: assert_int_equal(dlock_psem_new(u->c, name, &u->psem), DLOCK_OK); break;
    default: assert_int_equal(dlock_latch_new(u->c, name, &u->latch), DLOCK_OK); break;
    }
}

/* Take the kind's hold (or make it, for a semaphore's set and a latch's
 * set): what a caller does first. The status of the first call that is
 * not DLOCK_OK, else DLOCK_OK. Leases of 10 s: no verdict here depends on
 * one ending. */
static dlock_status use_take(use *u)
{
    dlock_status st;
    switch (u->kind) {
    case PLAIN:
    case FAIR: return dlock_lock_acquire(u->lock, 0, 10000, NULL);
    case READ: return dlock_rwlock_acquire(u->rw, DLOCK_READ, 0, 10000, NULL);
    case WRITE: return dlock_rwlock_acquire(u->rw, DLOCK_WRITE, 0, 10000, NULL);
    case SEM:
        st = dlock_semaphore_set_permits(u->sem, 2, NULL);
        return st != DLOCK_OK ? st : dlock_semaphore_acquire(u->sem, 1, 0);
    case PSEM:
        st = dlock_psem_set_permits(u->psem, 2, NULL);
        return st != DLOCK_OK ? st : dlock_psem_acquire(u->psem, 0, 10000, &u->permit);
    default: return dlock_latch_set(u->latch, 1, NULL);
    }
}

/* The kind's other entry points, which must refuse alike: the
 * semaphores' acquire without the set, the latch's await and count-down. */
static dlock_status use_other_call(use *u)
{
    long left;
    dlock_permit *p = NULL;
    dlock_status st;
    switch (u->kind) {
    case SEM: return dlock_semaphore_acquire(u->sem, 1, 0);
    case PSEM:
        st = dlock_psem_acquire(u->psem, 0, 10000, &p);
        if (p) dlock_psem_release(u->psem, p);
        return st;
    case LATCH:
        st = dlock_latch_await(u->latch, 0);
        return st != DLOCK_ERR_WRONG_KIND ? st : dlock_latch_count_down(u->latch, &left);
    default: return use_take(u);
    }
}

static void use_close(use *u)
{
    switch (u->kind) {
    case PLAIN:
    case FAIR: dlock_lock_free(u->lock); break;
    case READ:
    case WRITE: dlock_rwlock_free(u->rw); break;
    case SEM: dlock_semaphore_free(u->sem); break;
    case PSEM:
        if (u->permit) dlock_permit_free(u->permit);
        dlock_psem_free(u->psem);
        break;
    default: dlock_latch_free(u->latch); break;
    }
    dlock_client_free(u->c);
}

/* Every key of NAME gone, whatever kind left it: as if it were idle long
 * enough for the semaphores' and latch's keys to expire. */
static void forget(const char *name)
{
    static const char *const suffixes[] = {"",           ":rw",    ":sem", ":sem:size", ":psem",
                                           ":psem:held", ":latch", ":q",   ":qt"};
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        char key[160];
        snprintf(key, sizeof key, "dlock:{%s}%s", name, suffixes[i]);
        redisReply *r = th_target_cmd(&server, key, "DEL %s", key);
        assert_non_null(r);
        freeReplyObject(r);
    }
}

/* Whether `a` and `b` are one lock (they wait for each other). */
static int one_lock(enum kind a, enum kind b)
{
    return (a <= FAIR && b <= FAIR) || ((a == READ || a == WRITE) && (b == READ || b == WRITE));
}

/* Every ordered pair of different kinds: `first` holds, `second` tries. */
static void every_pair_of_kinds_on_one_name_excludes(void **state)
{
    (void)state;
    for (int a = 0; a < KINDS; a++) {
        for (int b = 0; b < KINDS; b++) {
            if (a == b) continue;
            char name[64];
            snprintf(name, sizeof name, "kinds-%s-%s", kind_name[a], kind_name[b]);
            use first, second;
            use_open(&first, (enum kind)a, name);
            use_open(&second, (enum kind)b, name);
            assert_int_equal(use_take(&first), DLOCK_OK);
            dlock_status st = use_take(&second);
            if (one_lock((enum kind)a, (enum kind)b)) {
                /* read after read shares; every other pair waits its turn */
                print_message("%s then %s: %s\n", kind_name[a], kind_name[b], dlock_strerror(st));
                assert_int_equal(st, DLOCK_ERR_TIMEOUT);
            } else {
                if (st != DLOCK_ERR_WRONG_KIND)
                    print_message("%s then %s: %s (%s)\n", kind_name[a], kind_name[b], dlock_strerror(st),
                                  dlock_last_error());
                assert_int_equal(st, DLOCK_ERR_WRONG_KIND);
                char want[160];
                snprintf(want, sizeof want, "%s is %s", name, kind_said[a]);
                assert_string_equal(dlock_last_error(), want);
                assert_int_equal(use_other_call(&second), DLOCK_ERR_WRONG_KIND);
            }
            /* The first kind gone, the second works on its own. */
            use_close(&first);
            forget(name);
            assert_int_equal(use_take(&second), DLOCK_OK);
            use_close(&second);
            forget(name);
        }
    }
}

/* Read holds still share with read holds only. */
static void read_holds_share_with_reads_only(void **state)
{
    (void)state;
    use r1, r2, plain;
    use_open(&r1, READ, "kinds-readers");
    use_open(&r2, READ, "kinds-readers");
    use_open(&plain, PLAIN, "kinds-readers");
    assert_int_equal(use_take(&r1), DLOCK_OK);
    assert_int_equal(use_take(&r2), DLOCK_OK);
    assert_int_equal(use_take(&plain), DLOCK_ERR_WRONG_KIND);
    assert_int_equal(dlock_rwlock_release(r1.rw, DLOCK_READ), DLOCK_OK);
    assert_int_equal(use_take(&plain), DLOCK_ERR_WRONG_KIND);
    assert_int_equal(dlock_rwlock_release(r2.rw, DLOCK_READ), DLOCK_OK);
    assert_int_equal(use_take(&plain), DLOCK_OK);
    assert_int_equal(use_take(&r1), DLOCK_ERR_WRONG_KIND);
    assert_string_equal(dlock_last_error(), "kinds-readers is held as a lock");
    assert_int_equal(dlock_lock_release(plain.lock), DLOCK_OK);
    use_close(&r1);
    use_close(&r2);
    use_close(&plain);
    forget("kinds-readers");
}

/* One asynchronous call's outcome, waited for by the test's thread. */
typedef struct outcome {
    atomic_int done;
    dlock_status st;
    char why[160]; /* the callback thread's last error */
} outcome;

static void on_lock(dlock_lock *l, dlock_status st, uint64_t token, void *arg)
{
    (void)l, (void)token;
    outcome *o = arg;
    o->st = st;
    snprintf(o->why, sizeof o->why, "%s", dlock_last_error());
    atomic_store(&o->done, 1);
}

static void on_rw(dlock_rwlock *rw, dlock_rw_mode mode, dlock_status st, uint64_t token, void *arg)
{
    (void)rw, (void)mode;
    on_lock(NULL, st, token, arg);
}

static void on_sem(dlock_semaphore *s, dlock_status st, void *arg)
{
    (void)s;
    on_lock(NULL, st, 0, arg);
}

static void on_permit(dlock_psem *p, dlock_status st, dlock_permit *permit, void *arg)
{
    (void)p;
    if (permit) dlock_permit_free(permit);
    on_lock(NULL, st, 0, arg);
}

static void on_latch(dlock_latch *l, dlock_status st, void *arg)
{
    (void)l;
    on_lock(NULL, st, 0, arg);
}

/* The status the asynchronous call ended with (waits up to 10 s). */
static dlock_status came(outcome *o)
{
    for (int i = 0; i < 10000 && !atomic_load(&o->done); i++) usleep(1000);
    assert_true(atomic_load(&o->done));
    return o->st;
}

/* The asynchronous acquires and await end with the same refusal, even
 * when they would wait. */
static void async_calls_are_refused_alike(void **state)
{
    (void)state;
    use writer, plain;
    use_open(&writer, WRITE, "kinds-async-w");
    use_open(&plain, PLAIN, "kinds-async-w");
    assert_int_equal(use_take(&writer), DLOCK_OK);
    outcome o = {0};
    assert_int_equal(dlock_lock_acquire_async(plain.lock, 5000, 10000, on_lock, &o), DLOCK_OK);
    assert_int_equal(came(&o), DLOCK_ERR_WRONG_KIND);
    assert_string_equal(o.why, "kinds-async-w is held as a write lock");
    use_close(&writer);
    use_close(&plain);
    forget("kinds-async-w");

    use holder, rw, sem, psem, latch;
    use_open(&holder, PLAIN, "kinds-async-l");
    use_open(&rw, READ, "kinds-async-l");
    use_open(&sem, SEM, "kinds-async-l");
    use_open(&psem, PSEM, "kinds-async-l");
    use_open(&latch, LATCH, "kinds-async-l");
    assert_int_equal(use_take(&holder), DLOCK_OK);
    outcome r = {0}, s = {0}, p = {0}, l = {0};
    assert_int_equal(dlock_rwlock_acquire_async(rw.rw, DLOCK_READ, 5000, 10000, on_rw, &r), DLOCK_OK);
    assert_int_equal(dlock_semaphore_acquire_async(sem.sem, 1, 5000, on_sem, &s), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire_async(psem.psem, 5000, 10000, on_permit, &p), DLOCK_OK);
    assert_int_equal(dlock_latch_await_async(latch.latch, 5000, on_latch, &l), DLOCK_OK);
    assert_int_equal(came(&r), DLOCK_ERR_WRONG_KIND);
    assert_int_equal(came(&s), DLOCK_ERR_WRONG_KIND);
    assert_int_equal(came(&p), DLOCK_ERR_WRONG_KIND);
    assert_int_equal(came(&l), DLOCK_ERR_WRONG_KIND);
    assert_string_equal(l.why, "kinds-async-l is held as a lock");
    use_close(&holder);
    use_close(&rw);
    use_close(&sem);
    use_close(&psem);
    use_close(&latch);
    forget("kinds-async-l");
}

/* ------------------------------------------------------------------------
 * The latch an await reaches before its setter.
 * ------------------------------------------------------------------------ */

/* A call that waits (up to 30 s), made on a thread of its own so that the
 * test can watch that it has not returned yet. */
typedef struct waiter {
    dlock_status (*call)(struct waiter *w);
    dlock_latch *l;
    dlock_semaphore *s;
    atomic_int done;
    dlock_status st;
} waiter;

static void *wait_thread(void *arg)
{
    waiter *w = arg;
    w->st = w->call(w);
    atomic_store(&w->done, 1);
    return NULL;
}

static dlock_status latch_await_30s(waiter *w)
{
    return dlock_latch_await(w->l, 30000);
}

static dlock_status take_one_30s(waiter *w)
{
    return dlock_semaphore_acquire(w->s, 1, 30000);
}

/* The awaiter starts first, on a latch never set; the setter sets 3 and
 * counts down three times. The awaiter returns only after the last. */
static void an_await_before_the_set_waits_for_the_last_count_down(void **state)
{
    (void)state;
    dlock_client *ca, *cs;
    dlock_latch *setter;
    waiter a = {.call = latch_await_30s};
    assert_int_equal(dlock_client_new(server.url, NULL, &ca), DLOCK_OK);
    assert_int_equal(dlock_client_new(server.url, NULL, &cs), DLOCK_OK);
    assert_int_equal(dlock_latch_new(ca, "kinds-latch-race", &a.l), DLOCK_OK);
    assert_int_equal(dlock_latch_new(cs, "kinds-latch-race", &setter), DLOCK_OK);
    /* Not set: an await that does not wait finds it shut. */
    assert_int_equal(dlock_latch_await(a.l, 0), DLOCK_ERR_TIMEOUT);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_thread, &a), 0);
    usleep(300000);
    assert_false(atomic_load(&a.done));
    assert_int_equal(dlock_latch_set(setter, 3, NULL), DLOCK_OK);
    long left = -1;
    for (int i = 3; i > 0; i--) {
        usleep(200000);
        assert_false(atomic_load(&a.done));
        assert_int_equal(dlock_latch_count_down(setter, &left), DLOCK_OK);
        assert_int_equal(left, i - 1);
    }
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(a.st, DLOCK_OK);
    /* Open, it lets every later await through, and may be set again. */
    assert_int_equal(dlock_latch_await(a.l, 0), DLOCK_OK);
    int set = 0;
    assert_int_equal(dlock_latch_set(setter, 1, &set), DLOCK_OK);
    assert_int_equal(set, 1);
    assert_int_equal(dlock_latch_await(a.l, 0), DLOCK_ERR_TIMEOUT);
    dlock_latch_free(a.l);
    dlock_latch_free(setter);
    dlock_client_free(ca);
    dlock_client_free(cs);
    forget("kinds-latch-race");
}

/* The asynchronous await waits for a latch not set yet, too. */
static void an_async_await_before_the_set_waits_too(void **state)
{
    (void)state;
    dlock_client *c;
    dlock_latch *l, *setter;
    assert_int_equal(dlock_client_new(server.url, NULL, &c), DLOCK_OK);
    assert_int_equal(dlock_latch_new(c, "kinds-latch-async", &l), DLOCK_OK);
    assert_int_equal(dlock_latch_new(c, "kinds-latch-async", &setter), DLOCK_OK);
    outcome o = {0};
    assert_int_equal(dlock_latch_await_async(l, 30000, on_latch, &o), DLOCK_OK);
    usleep(300000);
    assert_false(atomic_load(&o.done));
    assert_int_equal(dlock_latch_set(setter, 1, NULL), DLOCK_OK);
    usleep(200000);
    assert_false(atomic_load(&o.done));
    assert_int_equal(dlock_latch_count_down(setter, NULL), DLOCK_OK);
    assert_int_equal(came(&o), DLOCK_OK);
    dlock_latch_free(l);
    dlock_latch_free(setter);
    dlock_client_free(c);
    forget("kinds-latch-async");
}

/* ------------------------------------------------------------------------
 * Semaphore sizes.
 * ------------------------------------------------------------------------ */

static void a_semaphore_opened_with_another_size_is_refused_unless_resized(void **state)
{
    (void)state;
    use a, b;
    use_open(&a, SEM, "kinds-size");
    use_open(&b, SEM, "kinds-size");
    int set = -1;
    long av = -1;
    assert_int_equal(dlock_semaphore_set_permits(a.sem, 2, &set), DLOCK_OK);
    assert_int_equal(set, 1);
    assert_int_equal(dlock_semaphore_set_permits(b.sem, 5, &set), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_last_error(), "'kinds-size' has 2 permits, not 5"));
    assert_int_equal(dlock_semaphore_set_permits(b.sem, 2, &set), DLOCK_OK);
    assert_int_equal(set, 0);
    assert_int_equal(dlock_semaphore_acquire(a.sem, 1, 0), DLOCK_OK);
    /* Resize: the available permits move by as much as the size. */
    assert_int_equal(dlock_semaphore_resize(b.sem, 5), DLOCK_OK);
    assert_int_equal(dlock_semaphore_available(a.sem, &av), DLOCK_OK);
    assert_int_equal(av, 4);
    assert_int_equal(dlock_semaphore_set_permits(a.sem, 5, &set), DLOCK_OK);
    assert_int_equal(set, 0);
    assert_int_equal(dlock_semaphore_add_permits(a.sem, -3), DLOCK_OK);
    assert_int_equal(dlock_semaphore_available(a.sem, &av), DLOCK_OK);
    assert_int_equal(av, 1);
    assert_int_equal(dlock_semaphore_set_permits(b.sem, 2, &set), DLOCK_OK);
    assert_int_equal(dlock_semaphore_add_permits(a.sem, -3), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_last_error(), "has 2 permits"));
    /* Shrunk below what is taken: acquires wait until enough come back. */
    assert_int_equal(dlock_semaphore_resize(a.sem, 0), DLOCK_OK);
    assert_int_equal(dlock_semaphore_available(a.sem, &av), DLOCK_OK);
    assert_int_equal(av, -1);
    assert_int_equal(dlock_semaphore_acquire(b.sem, 1, 0), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_semaphore_add_permits(b.sem, 2), DLOCK_OK);
    assert_int_equal(dlock_semaphore_acquire(b.sem, 1, 0), DLOCK_OK);
    assert_int_equal(dlock_semaphore_acquire(b.sem, 1, 0), DLOCK_ERR_TIMEOUT);
    use_close(&a);
    use_close(&b);
    forget("kinds-size");
}

/* A waiter for a permit is let in when the semaphore grows. */
static void growing_a_semaphore_lets_a_waiter_in(void **state)
{
    (void)state;
    use a, b;
    use_open(&a, SEM, "kinds-grow");
    use_open(&b, SEM, "kinds-grow");
    assert_int_equal(dlock_semaphore_set_permits(a.sem, 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_semaphore_acquire(a.sem, 1, 0), DLOCK_OK);
    waiter w = {.call = take_one_30s, .s = b.sem};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_thread, &w), 0);
    usleep(300000);
    assert_false(atomic_load(&w.done));
    assert_int_equal(dlock_semaphore_add_permits(a.sem, 1), DLOCK_OK);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(w.st, DLOCK_OK);
    long av = -1;
    assert_int_equal(dlock_semaphore_available(a.sem, &av), DLOCK_OK);
    assert_int_equal(av, 0);
    use_close(&a);
    use_close(&b);
    forget("kinds-grow");
}

static void a_psem_opened_with_another_size_is_refused_unless_resized(void **state)
{
    (void)state;
    use a, b;
    use_open(&a, PSEM, "kinds-psize");
    use_open(&b, PSEM, "kinds-psize");
    int set = -1;
    long av = -1;
    assert_int_equal(dlock_psem_set_permits(a.psem, 1, &set), DLOCK_OK);
    assert_int_equal(set, 1);
    assert_int_equal(dlock_psem_set_permits(b.psem, 5, &set), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_last_error(), "'kinds-psize' has 1 permits, not 5"));
    dlock_permit *p1 = NULL, *p2 = NULL, *p3 = NULL;
    assert_int_equal(dlock_psem_acquire(a.psem, 0, 10000, &p1), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(b.psem, 0, 10000, &p2), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_psem_resize(b.psem, 2), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(b.psem, 0, 10000, &p2), DLOCK_OK);
    assert_int_equal(dlock_psem_available(a.psem, &av), DLOCK_OK);
    assert_int_equal(av, 0);
    assert_int_equal(dlock_psem_add_permits(a.psem, 1), DLOCK_OK);
    assert_int_equal(dlock_psem_set_permits(b.psem, 3, &set), DLOCK_OK);
    assert_int_equal(set, 0);
    assert_int_equal(dlock_psem_add_permits(a.psem, -4), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_psem_add_permits(a.psem, -2), DLOCK_OK);
    /* Two held, one permit: none granted until fewer than one are held. */
    assert_int_equal(dlock_psem_acquire(b.psem, 0, 10000, &p3), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_psem_release(a.psem, p1), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(b.psem, 0, 10000, &p3), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_psem_release(b.psem, p2), DLOCK_OK);
    assert_int_equal(dlock_psem_acquire(b.psem, 0, 10000, &p3), DLOCK_OK);
    assert_int_equal(dlock_psem_release(b.psem, p3), DLOCK_OK);
    use_close(&a);
    use_close(&b);
    forget("kinds-psize");
}

/* ------------------------------------------------------------------------
 * Idle keys.
 * ------------------------------------------------------------------------ */

/* The key's PTTL (-2 missing, -1 kept). */
static long long pttl(const char *key)
{
    redisReply *r = th_target_cmd(&server, key, "PTTL %s", key);
    assert_non_null(r);
    long long ms = r->integer;
    freeReplyObject(r);
    return ms;
}

/* Expiring within DLOCK_IDLE_MS, and not long ago set so (a minute's room). */
static int idle(long long ms)
{
    return ms > DLOCK_IDLE_MS - 60000 && ms <= DLOCK_IDLE_MS;
}

static void an_idle_semaphore_expires_and_its_handle_makes_it_anew(void **state)
{
    (void)state;
    use a, other;
    use_open(&a, SEM, "kinds-idle");
    use_open(&other, SEM, "kinds-idle");
    const char *sem = "dlock:{kinds-idle}:sem", *size = "dlock:{kinds-idle}:sem:size";
    assert_int_equal(dlock_semaphore_set_permits(a.sem, 2, NULL), DLOCK_OK);
    assert_true(idle(pttl(sem)));
    assert_true(idle(pttl(size)));
    /* Permits out (they have no lease): kept. */
    assert_int_equal(dlock_semaphore_acquire(a.sem, 1, 0), DLOCK_OK);
    assert_int_equal(pttl(sem), -1);
    assert_int_equal(pttl(size), -1);
    assert_int_equal(dlock_semaphore_release(a.sem, 1), DLOCK_OK);
    assert_true(idle(pttl(sem)));
    assert_true(idle(pttl(size)));
    /* Expired: the handle that set it makes it anew at its size. */
    forget("kinds-idle");
    long av = -1;
    assert_int_equal(dlock_semaphore_available(a.sem, &av), DLOCK_OK);
    assert_int_equal(av, 2);
    assert_int_equal(dlock_semaphore_acquire(a.sem, 2, 0), DLOCK_OK);
    assert_int_equal(dlock_semaphore_acquire(other.sem, 1, 0), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_semaphore_set_permits(other.sem, 3, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_semaphore_release(a.sem, 2), DLOCK_OK);
    use_close(&a);
    use_close(&other);
    forget("kinds-idle");
}

static void an_idle_psem_expires_after_its_last_lease(void **state)
{
    (void)state;
    use a;
    use_open(&a, PSEM, "kinds-pidle");
    const char *size = "dlock:{kinds-pidle}:psem";
    assert_int_equal(dlock_psem_set_permits(a.psem, 1, NULL), DLOCK_OK);
    assert_true(idle(pttl(size)));
    dlock_permit *p = NULL;
    assert_int_equal(dlock_psem_acquire(a.psem, 0, 600000, &p), DLOCK_OK);
    long long ms = pttl(size);
    assert_true(ms > DLOCK_IDLE_MS && ms <= DLOCK_IDLE_MS + 600000);
    /* A renewal keeps the number at least as long as the permit, even
     * when its key had come to expire sooner. */
    redisReply *r = th_target_cmd(&server, size, "PEXPIRE %s 1000", size);
    freeReplyObject(r);
    assert_int_equal(dlock_psem_renew(a.psem, dlock_permit_id(p), 600000), DLOCK_OK);
    assert_true(pttl(size) > 500000);
    assert_int_equal(dlock_psem_release(a.psem, p), DLOCK_OK);
    forget("kinds-pidle");
    assert_int_equal(dlock_psem_acquire(a.psem, 0, 10000, &p), DLOCK_OK);
    assert_int_equal(dlock_psem_release(a.psem, p), DLOCK_OK);
    use_close(&a);
    forget("kinds-pidle");
}

static void an_open_latch_expires_and_a_shut_one_is_kept(void **state)
{
    (void)state;
    use a;
    use_open(&a, LATCH, "kinds-lidle");
    const char *key = "dlock:{kinds-lidle}:latch";
    assert_int_equal(dlock_latch_set(a.latch, 1, NULL), DLOCK_OK);
    assert_int_equal(pttl(key), -1);
    assert_int_equal(dlock_latch_count_down(a.latch, NULL), DLOCK_OK);
    assert_true(idle(pttl(key)));
    use_close(&a);
    forget("kinds-lidle");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_pair_of_kinds_on_one_name_excludes),
        cmocka_unit_test(read_holds_share_with_reads_only),
        cmocka_unit_test(async_calls_are_refused_alike),
        cmocka_unit_test(an_await_before_the_set_waits_for_the_last_count_down),
        cmocka_unit_test(an_async_await_before_the_set_waits_too),
        cmocka_unit_test(a_semaphore_opened_with_another_size_is_refused_unless_resized),
        cmocka_unit_test(growing_a_semaphore_lets_a_waiter_in),
        cmocka_unit_test(a_psem_opened_with_another_size_is_refused_unless_resized),
        cmocka_unit_test(an_idle_semaphore_expires_and_its_handle_makes_it_anew),
        cmocka_unit_test(an_idle_psem_expires_after_its_last_lease),
        cmocka_unit_test(an_open_latch_expires_and_a_shut_one_is_kept),
    };
    return th_target_run_suite(tests, &server);
}
