/* Names of status codes and the library version. */
#include "dlock.h"

const char *dlock_strerror(dlock_status status)
{
    switch (status) {
#define DLOCK__STATUS_TEXT(name, value, text)                                                                          \
    case DLOCK_##name: return text;
        DLOCK_STATUS_MAP(DLOCK__STATUS_TEXT)
#undef DLOCK__STATUS_TEXT
    }
    return "unknown status";
}

const char *dlock_version(void)
{
    return DLOCK_VERSION;
}
