/* Choosing a database backend from its URL; see db.h. */
#include "db.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"

/* One URL option for every backend keeps the command line the same for
 * SQLite and PostgreSQL. */
int sk_db_open(const char *url, const char *password, int flags, sk_db **out, char *err, size_t errlen)
{
    if (!url || !*url) {
        snprintf(err, errlen, "empty database URL");
        return -1;
    }
    const char *path = url;
    char masked[512];
    if (strncmp(url, "sqlite://", 9) == 0) {
        path = url + 9; /* sqlite:///abs -> /abs, sqlite://rel -> rel */
    } else if (strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0) {
        return sk_db_open_pg(url, password, out, err, errlen);
    } else if (strstr(url, "://")) {
        sk_mask_url(url, masked, sizeof masked);
        snprintf(err, errlen, "unknown database URL scheme: %s", masked);
        return -1;
    }
    if (!*path) {
        snprintf(err, errlen, "database URL has no path: %s", url);
        return -1;
    }
    return sk_db_open_sqlite(path, flags, out, err, errlen);
}
