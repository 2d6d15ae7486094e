/*
 * The smallest useful dlock program: take a lock, do the critical work with
 * its fencing token, release. Build it with
 *
 *   cc lock.c $(pkg-config --cflags --libs dlock) -o lock
 *
 * and run it as `./lock [URL]` (default redis://127.0.0.1:6379).
 */
#include <stdio.h>

#include <dlock.h>

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    dlock_client *client = NULL;
    dlock_lock *lock = NULL;
    uint64_t token = 0;

    if (dlock_client_new(url, NULL, &client) != DLOCK_OK ||
        dlock_lock_new(client, "example:report", &lock) != DLOCK_OK) {
        fprintf(stderr, "example: %s\n", dlock_last_error());
        dlock_client_free(client);
        return 1;
    }
    /* Wait up to 5 s; lease 0 = kept alive by the watchdog until release. */
    dlock_status st = dlock_lock_acquire(lock, 5000, DLOCK_LEASE_WATCHDOG, &token);
    if (st == DLOCK_OK) {
        printf("holding example:report with fencing token %llu\n", (unsigned long long)token);
        /* ... the critical section: pass `token` to the storage you write ... */
        st = dlock_lock_release(lock);
    }
    if (st != DLOCK_OK) fprintf(stderr, "example: %s\n", dlock_last_error());
    dlock_lock_free(lock);
    dlock_client_free(client);
    return st == DLOCK_OK ? 0 : 1;
}
