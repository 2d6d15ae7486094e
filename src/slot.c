/*
 * Hash slots, computed as a Redis Cluster node does, so that a command can
 * go straight to the node that serves it instead of costing a MOVED
 * round trip. Every key and channel of one lock carries the tag {NAME}, so
 * they all land in one slot and a script may touch them all.
 */
#include <stdint.h>

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
