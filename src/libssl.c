/* OpenSSL, loaded on first use; see libssl.h. */
#include "libssl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include <openssl/opensslv.h>

/* The soname of the libssl the headers describe: OpenSSL keeps its ABI
 * within a major version (3.0, 3.1, ... are all libssl.so.3). */
#define DLOCK__STR2(x) #x
#define DLOCK__STR(x) DLOCK__STR2(x)
#define LIBSSL_SONAME "libssl.so." DLOCK__STR(OPENSSL_VERSION_MAJOR)

/* Each entry of the table has exactly the type OpenSSL declares. */
#define CHECK_TYPE(ret, name, params)                                                                                  \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&name), ret(*) params),                                     \
                   "libssl.h: " #name " is not declared as OpenSSL declares it");
DLOCK__LIBSSL_FUNCS(CHECK_TYPE)
#undef CHECK_TYPE

dlock__libssl dlock__ssl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char failure[256]; /* empty once loaded */

/* RTLD_LOCAL: the symbols stay ours and cannot change how the program's
 * own OpenSSL, if it links one, resolves; a second libssl.so.3 handle is
 * the same library, loaded once by the dynamic linker. Never closed: the
 * contexts and connections made from it live until the clients go. dlsym
 * on libssl's handle also finds libcrypto's functions (its dependency). */
static void load(void)
{
    void *h = dlopen(LIBSSL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(failure, sizeof failure, "TLS needs %s, which cannot be loaded: %s", LIBSSL_SONAME,
                 why ? why : "unknown error");
        return;
    }
#define LOAD(ret, name, params)                                                                                        \
    *(void **)(&dlock__ssl.name) = dlsym(h, #name);                                                                    \
    if (!dlock__ssl.name) {                                                                                            \
        snprintf(failure, sizeof failure, "TLS: %s has no function %s", LIBSSL_SONAME, #name);                         \
        return;                                                                                                        \
    }
    DLOCK__LIBSSL_FUNCS(LOAD)
#undef LOAD
    failure[0] = '\0';
}

int dlock__libssl_load(char *err, size_t size)
{
    pthread_once(&once, load);
    if (!failure[0] && dlock__ssl.SSL_pending) return 0;
    snprintf(err, size, "%s", failure[0] ? failure : "TLS: OpenSSL not loaded");
    return -1;
}
