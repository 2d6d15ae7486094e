/*
 * Hash slots, computed as a Redis Cluster node does, so that a command can
 * go straight to the node that serves it instead of costing a MOVED
 * round trip. Every key and channel of one lock carries the tag {NAME}, so
 * they all land in one slot and a script may touch them all; a key shared
 * by all the names of one slot (the fencing counter) carries the slot's
 * own short tag (dlock__slot_tag).
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "slot.h"

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the checksum
 * the cluster specification names; table-free, since one key costs only a
 * few dozen bytes of shifting. */
static uint16_t crc16(const unsigned char *s, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(s[i] << 8);
        for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned dlock__key_slot(const char *key, size_t len)
{
    const unsigned char *k = (const unsigned char *)key;
    size_t open = 0;
    while (open < len && k[open] != '{') open++;
    if (open < len) {
        size_t close = open + 1;
        while (close < len && k[close] != '}') close++;
        /* "{}" or an unclosed '{': the whole key counts, as on the server. */
        if (close < len && close > open + 1) return crc16(k + open + 1, close - open - 1) % DLOCK__SLOTS;
    }
    return crc16(k, len) % DLOCK__SLOTS;
}

/* ------------------------------------------------------------------------ */
/* A hash tag per slot                                                       */
/* ------------------------------------------------------------------------ */

/* The alphabet of slot tags, in the order they are tried. */
static const char TAG_ALPHABET[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
#define TAG_ALPHABET_LEN (sizeof TAG_ALPHABET - 1)

static char slot_tags[DLOCK__SLOTS][DLOCK__SLOT_TAG_MAX + 1];
static pthread_once_t slot_tags_once = PTHREAD_ONCE_INIT;

/* Every tag of one to three characters, shortest first and in alphabet
 * order within a length; a slot keeps the first that lands on it. The
 * order is part of the key format (every client, of every version, must
 * name a slot's counter alike: docs/design/keys.md), so it never
 * changes. Three characters reach all 16384 slots; 62^3 checksums of at
 * most three bytes take well under a millisecond, once per process. */
static void slot_tags_build(void)
{
    size_t left = DLOCK__SLOTS;
    unsigned char t[DLOCK__SLOT_TAG_MAX];
    for (size_t len = 1; len <= DLOCK__SLOT_TAG_MAX && left > 0; len++) {
        size_t combos = 1;
        for (size_t i = 0; i < len; i++) combos *= TAG_ALPHABET_LEN;
        for (size_t n = 0; n < combos && left > 0; n++) {
            size_t v = n;
            for (size_t i = len; i-- > 0; v /= TAG_ALPHABET_LEN)
                t[i] = (unsigned char)TAG_ALPHABET[v % TAG_ALPHABET_LEN];
            unsigned slot = crc16(t, len) % DLOCK__SLOTS;
            if (slot_tags[slot][0]) continue;
            memcpy(slot_tags[slot], t, len);
            left--;
        }
    }
}

const char *dlock__slot_tag(unsigned slot)
{
    pthread_once(&slot_tags_once, slot_tags_build);
    return slot_tags[slot % DLOCK__SLOTS];
}
