/*
 * Preloaded, after glibc's malloc library and before libfaketime, into a
 * server whose clock the harness fakes (harness.c). Valkey frees through
 * jemalloc's sdallocx() as well as free(); with malloc() coming from glibc
 * there, jemalloc would be handed glibc's blocks and crash. Here those
 * frees go back to the allocator that made the block. Redis never calls
 * sdallocx(), so it does not notice this library.
 */
#include <stdlib.h>

void sdallocx(void *ptr, size_t size, int flags);

void sdallocx(void *ptr, size_t size, int flags)
{
    (void)size;
    (void)flags;
    free(ptr);
}
