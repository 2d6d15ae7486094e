/* Redis Cluster's key -> hash slot mapping. */
#ifndef DLOCK_SLOT_H
#define DLOCK_SLOT_H

#include <stddef.h>

#define DLOCK_SLOTS 16384

/* The slot of a key: CRC16 of its hash tag (the part between the first '{'
 * and the next '}', when not empty) or of the whole key, modulo 16384. */
unsigned dlock_key_slot(const char *key, size_t len);

#endif
