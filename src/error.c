/* Names of status codes and the library version. */
#include "dlock.h"

const char *dlock_strerror(dlock_status status)
{
    switch (status) {
    case DLOCK_OK: return "ok";
    case DLOCK_ERR_INVALID: return "invalid argument";
    case DLOCK_ERR_URL: return "malformed URL";
    case DLOCK_ERR_CONNECT: return "cannot reach Redis";
    case DLOCK_ERR_AUTH: return "authentication failed";
    case DLOCK_ERR_TIMEOUT: return "not acquired in time";
    case DLOCK_ERR_NOT_OWNER: return "not owner";
    case DLOCK_ERR_LOST: return "lock lost";
    case DLOCK_ERR_REDIS: return "Redis error";
    case DLOCK_ERR_NOMEM: return "out of memory";
    case DLOCK_ERR_OVERFLOW: return "ID sequence overflow";
    case DLOCK_ERR_SYS: return "system error";
    case DLOCK_ERR_DEADLOCK: return "would deadlock";
    case DLOCK_ERR_REPLICA: return "too few replicas acknowledged";
    }
    return "unknown status";
}

const char *dlock_version(void)
{
    return DLOCK_VERSION;
}
