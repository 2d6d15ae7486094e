/*
 * Checks for fuzz targets that hold in every build. assert() vanishes
 * under -DNDEBUG (RelWithDebInfo, the default build), which would leave
 * the replay under ctest checking nothing; FUZZ_CHECK always aborts, with
 * the failed condition, so both libFuzzer and the replay report it.
 */
#ifndef DLOCK_FUZZ_CHECK_H
#define DLOCK_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond);                              \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

#endif
