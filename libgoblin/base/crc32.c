/* libgoblin/base/crc32.c - CRC-32 by slicing-by-8: eight table lookups consume eight bytes per step
 * (table k is the CRC of a byte followed by k zero bytes), so the loop-carried
 * dependency is one step per 8 bytes instead of one per byte. */
#include "crc32.h"

#include <pthread.h>
#include <string.h>

static uint32_t tables[8][256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void make_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) tables[t][i] = (tables[t - 1][i] >> 8) ^ tables[0][tables[t - 1][i] & 0xff];
}

uint32_t goblin__crc32(uint32_t crc, const uint8_t *p, size_t n) {
    pthread_once(&tables_once, make_tables);
    crc = ~crc;
    while (n >= 8) {
        /* Little-endian assembly of the two words, whatever the host's byte order. */
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = tables[7][lo & 0xff] ^ tables[6][(lo >> 8) & 0xff] ^ tables[5][(lo >> 16) & 0xff] ^
              tables[4][lo >> 24] ^ tables[3][hi & 0xff] ^ tables[2][(hi >> 8) & 0xff] ^
              tables[1][(hi >> 16) & 0xff] ^ tables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = tables[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}
