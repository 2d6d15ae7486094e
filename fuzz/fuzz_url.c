/*
 * Fuzz target for dlock_url_parse(): URLs arrive from command lines and
 * environment variables, the one place the library parses bytes it did
 * not produce. Built as a libFuzzer target with clang (-DDLOCK_FUZZ=ON),
 * and replayed with generated mutations by replay.c in every test run.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* For replay.c: pieces of URL syntax worth splicing into a seed. */
const char *const fuzz_fragments[] = {
    "redis://",
    "unix://",
    "redis-sentinel://",
    "redis-cluster://",
    ",",
    "/mymaster",
    "/",
    ":",
    "@",
    "[",
    "]",
    "?db=",
    "%",
    "%4",
    "%40",
    "%00",
    "::1",
    "127.0.0.1",
    "6379",
    "65536",
    "0",
    "-1",
    "user",
    ":pw@",
    "?",
    "=",
    "\x01",
    " ",
    NULL,
};
const long fuzz_rounds = 20000;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    dlock_url u;
    dlock_status st = dlock_url_parse(s, &u);
    if (st == DLOCK_OK) {
        /* Whatever is accepted must be usable as it stands. */
        if (u.kind == DLOCK_URL_TCP) {
            FUZZ_CHECK(u.host && u.host[0]);
            FUZZ_CHECK(u.port >= 1 && u.port <= 65535);
            FUZZ_CHECK(!u.path);
        } else if (u.kind == DLOCK_URL_UNIX) {
            FUZZ_CHECK(u.path && u.path[0] == '/');
            FUZZ_CHECK(!u.host);
        } else {
            /* Sentinel or Cluster: a list of usable, distinct addresses,
             * the first repeated in host and port. */
            FUZZ_CHECK(u.kind == DLOCK_URL_SENTINEL || u.kind == DLOCK_URL_CLUSTER);
            FUZZ_CHECK(u.n_addrs >= 1 && u.n_addrs <= 64 && u.addrs);
            for (size_t i = 0; i < u.n_addrs; i++) {
                FUZZ_CHECK(u.addrs[i].host && u.addrs[i].host[0]);
                FUZZ_CHECK(u.addrs[i].port >= 1 && u.addrs[i].port <= 65535);
                for (size_t j = 0; j < i; j++)
                    FUZZ_CHECK(u.addrs[i].port != u.addrs[j].port || strcmp(u.addrs[i].host, u.addrs[j].host) != 0);
            }
            FUZZ_CHECK(strcmp(u.host, u.addrs[0].host) == 0 && u.port == u.addrs[0].port);
            FUZZ_CHECK(u.kind == DLOCK_URL_CLUSTER ? !u.master && u.db == 0 : u.master && u.master[0]);
            FUZZ_CHECK(!u.path);
        }
        FUZZ_CHECK(u.db >= 0);
        FUZZ_CHECK(!u.password || strlen(u.password) > 0);
        dlock_url_free(&u);
    } else {
        FUZZ_CHECK(st == DLOCK_ERR_URL);
        FUZZ_CHECK(u.host == NULL && u.path == NULL && u.user == NULL && u.password == NULL && u.master == NULL &&
                   u.addrs == NULL && u.n_addrs == 0);
        FUZZ_CHECK(dlock_last_error()[0] != '\0');
    }
    free(s);
    return 0;
}
