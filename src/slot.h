/* Redis Cluster's key -> hash slot mapping. */
#ifndef DLOCK__SLOT_H
#define DLOCK__SLOT_H

#include <stddef.h>

#define DLOCK__SLOTS 16384

/* The slot of a key: CRC16 of its hash tag (the part between the first '{'
 * and the next '}', when not empty) or of the whole key, modulo 16384. */
unsigned dlock__key_slot(const char *key, size_t len);

/* The longest tag dlock__slot_tag() returns. */
#define DLOCK__SLOT_TAG_MAX 3

/* A short hash tag whose slot is `slot` (0..16383): one to three
 * characters of [0-9A-Za-z], the same in every process and version, so
 * that a key "...{TAG}..." lives beside every key tagged with a name of
 * that slot. The table is built on first use; thread-safe. */
const char *dlock__slot_tag(unsigned slot);

#endif
