/* Redis Cluster's key -> hash slot mapping. */
#ifndef DLOCK__SLOT_H
#define DLOCK__SLOT_H

#include <stddef.h>

#define DLOCK__SLOTS 16384

/* The slot of a key: CRC16 of its hash tag (the part between the first '{'
 * and the next '}', when not empty) or of the whole key, modulo 16384. */
unsigned dlock__key_slot(const char *key, size_t len);

#endif
