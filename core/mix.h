/* mix.h - the core's one random source and one hash, for the modules that need them
 * (internal: not installed).  Both are fixed forever: seeds, schedules and the hashes of
 * models, plans and runs (on the wire, in checkpoints) depend on every bit.
 *   - splitmix64 seeds xoshiro256** (Blackman and Vigna): dlc_mix64, dlc_splitmix64,
 *     dlc_xo_next;
 *   - FNV-1a 64 over a little-endian byte stream: dlc_fnv_bytes, dlc_fnv_u32, dlc_fnv_u64,
 *     from DLC_FNV_OFFSET. */
#ifndef DILOCO_CORE_MIX_H
#define DILOCO_CORE_MIX_H

#include <stddef.h>
#include <stdint.h>

typedef struct dlc_xo {
    uint64_t s[4];
} dlc_xo;

static inline uint64_t dlc_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t dlc_splitmix64(uint64_t *x) { return dlc_mix64(*x += 0x9e3779b97f4a7c15ULL); }

static inline uint64_t dlc_rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t dlc_xo_next(dlc_xo *g) {
    uint64_t *s = g->s, r = dlc_rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = dlc_rotl64(s[3], 45);
    return r;
}

#define DLC_FNV_OFFSET 0xcbf29ce484222325ULL
#define DLC_FNV_PRIME 0x100000001b3ULL

static inline uint64_t dlc_fnv_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * DLC_FNV_PRIME;
    return h;
}

static inline uint64_t dlc_fnv_u32(uint64_t h, uint32_t v) {
    unsigned char b[4];
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
    return dlc_fnv_bytes(h, b, 4);
}

static inline uint64_t dlc_fnv_u64(uint64_t h, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    return dlc_fnv_bytes(h, b, 8);
}

#endif
