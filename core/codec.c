/*
 * codec.c - the wire codecs of codec.h.  Every codec runs over chunks (a scale block, or
 * 256 elements for the unscaled ones) that stay in L1: one pass computes the absmax and
 * the finiteness of the chunk in registers, a second quantizes and packs it.  The loops
 * are branch-free bit manipulation so they vectorise in the AVX2 / AVX-512 clones.
 * Layouts, size formulas and error bounds: docs/codecs.md.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "diloco/codec.h"
#include "internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "codec.c writes the wire layout in host order: port it to big-endian first"
#endif

static const char *const codec_names[] = {"f32", "bf16", "fp8", "int8", "int4", "e3m0", "sparse2", "sparse4"};
_Static_assert(sizeof codec_names / sizeof codec_names[0] == DLC_CODEC_COUNT,
               "one name per dlc_codec_kind");

#define CHUNK 256 /* elements per chunk of the unscaled codecs (f32, bf16, fp8) */
#define INLINE static inline __attribute__((always_inline))

/* Unaligned views of the byte stream: the caller's buffer has no alignment promise. */
typedef float f32u __attribute__((aligned(1), may_alias));
typedef uint16_t u16u __attribute__((aligned(1), may_alias));

typedef union { float f; uint32_t u; } fbits;
INLINE uint32_t f2u(float f) { fbits b; b.f = f; return b.u; }
INLINE float u2f(uint32_t u) { fbits b; b.u = u; return b.f; }

static int is_blocked(dlc_codec_kind k) {
    return k == DLC_CODEC_INT8 || k == DLC_CODEC_INT4 || k == DLC_CODEC_E3M0;
}
static int is_sparse(dlc_codec_kind k) { return k == DLC_CODEC_SPARSE2 || k == DLC_CODEC_SPARSE4; }
/* Largest code magnitude of a blocked codec: a scale above FLT_MAX / qmax overflows. */
static float qmax_of(dlc_codec_kind k) {
    return k == DLC_CODEC_INT8 ? 127.0f : k == DLC_CODEC_INT4 ? 7.0f : 1.0f;
}

/* ---- per-value conversions ---- */

INLINE uint16_t bf16_enc(float x) {
    uint32_t b = f2u(x);
    uint32_t r = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    return (uint16_t)((r & 0x7fffu) == 0x7f80u ? r - 1u : r); /* saturate instead of inf */
}
INLINE float bf16_dec(uint16_t c) { return u2f((uint32_t)c << 16); }

INLINE uint8_t fp8_enc(float x) {
    uint32_t b = f2u(x), s = (b >> 24) & 0x80u, a = b & 0x7fffffffu;
    /* normal range: round the mantissa to 3 bits (nearest even), rebias 127 -> 7 */
    uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
    int32_t cn = (int32_t)r - (120 << 3);
    cn = cn > 0x7e ? 0x7e : cn; /* saturate at 448; 0x7f is NaN in E4M3FN */
    /* below 2^-6: subnormal m * 2^-9, m = rint(|x| * 2^9), m = 8 is the smallest normal */
    float as = a < 0x3c800000u ? u2f(a) : 0.0f;
    int32_t cs = (int32_t)((as * 512.0f + 12582912.0f) - 12582912.0f);
    int32_t c = a < 0x3c800000u ? cs : cn;
    return (uint8_t)((uint32_t)c | s);
}
INLINE float fp8_dec(uint8_t code) {
    uint32_t m = code & 0x7fu;
    m = m > 0x7eu ? 0x7eu : m; /* the NaN codes never come from us; read them as 448 */
    uint32_t e = m >> 3, mm = m & 7u;
    float sub = (float)(int32_t)mm * 0.001953125f;
    float v = e ? u2f(((e + 120u) << 23) | (mm << 20)) : sub;
    return u2f(f2u(v) | ((uint32_t)(code & 0x80u) << 24));
}

uint8_t dlc_fp8_e4m3_from_f32(float x) { return fp8_enc(x); }
float dlc_fp8_e4m3_to_f32(uint8_t code) { return fp8_dec(code); }
uint16_t dlc_bf16_from_f32(float x) { return bf16_enc(x); }
float dlc_bf16_to_f32(uint16_t code) { return bf16_dec(code); }

/* rint for |v| < 2^22 in plain arithmetic (vectorises without SSE4.1's roundps). */
INLINE float rint_small(float v) { return (v + 12582912.0f) - 12582912.0f; }

INLINE uint32_t q_int(float v, float lim) {
    v = rint_small(v);
    v = v > lim ? lim : v;
    v = v < -lim ? -lim : v;
    return (uint32_t)(int32_t)v;
}
/* The encoders never write -8 (int4) or -128 (int8); a decoder reads them as -7 / -127 so
 * a scale that passed the check cannot overflow. */
INLINE float int4_val(uint32_t nib, float s) {
    int32_t q = ((int32_t)(nib & 15u) ^ 8) - 8;
    return (float)(q < -7 ? -7 : q) * s;
}

/* E3M0: a = |x| / absmax in [0, 1]; nearest level of {0, 2^-6, ..., 2^-1, 1}.  The
 * midpoints are 0.75 * 2^k, so the level is 2^floor(log2(a * 4/3)) (the exponent field
 * of a * 4/3), code c = that exponent + 7; below 2^-7 the nearest level is 0. */
INLINE uint32_t e3m0_code(float x, float pre, float inv) {
    uint32_t sgn = (f2u(x) >> 28) & 8u;
    float a = fabsf(x) * pre * inv;
    int32_t c = (int32_t)(f2u(a * 1.33333337f) >> 23) - 120;
    c = c > 7 ? 7 : c;
    c = c < 1 ? (a >= 0x1p-7f ? 1 : 0) : c;
    return c ? sgn | (uint32_t)c : 0u;
}
INLINE float e3m0_val(uint32_t nib, float s) {
    uint32_t c = nib & 7u;
    float m = u2f(((c + 120u) << 23) | ((nib & 8u) << 28)) * s;
    return c ? m : 0.0f;
}

/* ---- chunk kernels ---- */

/* 1 when every x[i] is finite; *amax = max |x[i]|. */
INLINE int chunk_absmax(const float *x, int len, float *amax) {
    float m = 0.0f, z = 0.0f;
    DLC_PRAGMA(omp simd reduction(max : m) reduction(+ : z))
    for (int i = 0; i < len; i++) {
        float a = fabsf(x[i]);
        m = a > m ? a : m;
        z += x[i] - x[i]; /* NaN for NaN or Inf */
    }
    *amax = m;
    return z == 0.0f;
}
INLINE int chunk_finite(const float *x, int len) {
    float z = 0.0f;
    DLC_SIMD_REDUCE(+ : z)
    for (int i = 0; i < len; i++) z += x[i] - x[i];
    return z == 0.0f;
}

/* Encodes one chunk of len (<= the block) elements; returns 0 if it holds a non-finite
 * value.  `i0` is the chunk's first element, `bi` its block. */
INLINE int enc_chunk(dlc_codec_kind kind, const float *x, int len, int64_t i0, int64_t bi,
                     uint8_t *out, uint8_t *codes) {
    switch (kind) {
    case DLC_CODEC_F32: {
        if (!chunk_finite(x, len)) return 0;
        f32u *o = (f32u *)out + i0;
        for (int i = 0; i < len; i++) o[i] = x[i];
        return 1;
    }
    case DLC_CODEC_BF16: {
        if (!chunk_finite(x, len)) return 0;
        u16u *o = (u16u *)out + i0;
        for (int i = 0; i < len; i++) o[i] = bf16_enc(x[i]);
        return 1;
    }
    case DLC_CODEC_FP8: {
        if (!chunk_finite(x, len)) return 0;
        uint8_t *o = out + i0;
        for (int i = 0; i < len; i++) o[i] = fp8_enc(x[i]);
        return 1;
    }
    default: break;
    }
    float amax;
    if (!chunk_absmax(x, len, &amax)) return 0;
    /* a tiny absmax would overflow 1/scale: pre-multiply by 2^64 (exact for such x) */
    float pre = amax < 0x1p-64f ? 0x1p64f : 1.0f;
    float lim = qmax_of(kind), s = amax / lim;
    if (!(s * lim <= FLT_MAX)) s = u2f(f2u(s) - 1u); /* amax near FLT_MAX: keep lim * s finite */
    float inv = amax > 0.0f ? lim / (amax * pre) : 0.0f;
    ((f32u *)out)[bi] = kind == DLC_CODEC_E3M0 ? amax : s;
    if (kind == DLC_CODEC_INT8) {
        uint8_t *o = codes + i0;
        for (int i = 0; i < len; i++) o[i] = (uint8_t)q_int(x[i] * pre * inv, 127.0f);
        return 1;
    }
    uint8_t *o = codes + i0 / 2;
    int h = len / 2;
    if (kind == DLC_CODEC_INT4) {
        for (int j = 0; j < h; j++)
            o[j] = (uint8_t)((q_int(x[2 * j] * pre * inv, 7.0f) & 15u) |
                             ((q_int(x[2 * j + 1] * pre * inv, 7.0f) & 15u) << 4));
        if (len & 1) o[h] = (uint8_t)(q_int(x[len - 1] * pre * inv, 7.0f) & 15u);
    } else {
        for (int j = 0; j < h; j++)
            o[j] = (uint8_t)(e3m0_code(x[2 * j], pre, inv) | (e3m0_code(x[2 * j + 1], pre, inv) << 4));
        if (len & 1) o[h] = (uint8_t)e3m0_code(x[len - 1], pre, inv);
    }
    return 1;
}

/* Decodes one chunk into y[0..len).  Scales were validated by the caller. */
INLINE void dec_chunk(dlc_codec_kind kind, const uint8_t *in, const uint8_t *codes, int len,
                      int64_t i0, int64_t bi, float *y) {
    switch (kind) {
    case DLC_CODEC_F32: {
        const f32u *p = (const f32u *)in + i0;
        for (int i = 0; i < len; i++) y[i] = p[i];
        return;
    }
    case DLC_CODEC_BF16: {
        const u16u *p = (const u16u *)in + i0;
        for (int i = 0; i < len; i++) y[i] = bf16_dec(p[i]);
        return;
    }
    case DLC_CODEC_FP8: {
        const uint8_t *p = in + i0;
        for (int i = 0; i < len; i++) y[i] = fp8_dec(p[i]);
        return;
    }
    default: break;
    }
    float s = ((const f32u *)in)[bi];
    if (kind == DLC_CODEC_INT8) {
        const int8_t *p = (const int8_t *)(codes + i0);
        for (int i = 0; i < len; i++) y[i] = (float)(p[i] < -127 ? -127 : p[i]) * s;
        return;
    }
    const uint8_t *p = codes + i0 / 2;
    int h = len / 2;
    if (kind == DLC_CODEC_INT4) {
        for (int j = 0; j < h; j++) {
            uint32_t b = p[j];
            y[2 * j] = int4_val(b, s);
            y[2 * j + 1] = int4_val(b >> 4, s);
        }
        if (len & 1) y[len - 1] = int4_val(p[h], s);
    } else {
        for (int j = 0; j < h; j++) {
            uint32_t b = p[j];
            y[2 * j] = e3m0_val(b, s);
            y[2 * j + 1] = e3m0_val(b >> 4, s);
        }
        if (len & 1) y[len - 1] = e3m0_val(p[h], s);
    }
}

/* ---- sparse codecs (sparse2, sparse4) ----
 *
 * Per block of L elements (L = B but for the last): kk = min(k, L) kept values, k =
 * max(1, B / 64).  Record: u16 bf16 scale, kk u8 indices (strictly increasing, < L), kk
 * codes of `bits` bits packed from bit 0 of the first code byte.  Every record is
 * self-contained, so blocks b0..b1 of an encoding are an encoding of their elements. */

INLINE int sp_bits(dlc_codec_kind k) { return k == DLC_CODEC_SPARSE2 ? 2 : 4; }
INLINE int sp_k(int block) { return block / 64 > 1 ? block / 64 : 1; }
INLINE int64_t sp_rec(dlc_codec_kind kind, int kk) { return 2 + kk + ((int64_t)kk * sp_bits(kind) + 7) / 8; }

static int64_t sp_size(dlc_codec_kind kind, int block, int64_t n) {
    int64_t full = n / block, last = n % block;
    int k = sp_k(block);
    return full * sp_rec(kind, k) + (last ? sp_rec(kind, last < k ? (int)last : k) : 0);
}

/* The value of code c (bits wide) under scale s. */
INLINE float sp_val(dlc_codec_kind kind, uint32_t c, float s) {
    if (kind == DLC_CODEC_SPARSE2) return u2f(f2u((c & 1u) ? s : 0.5f * s) | ((c & 2u) << 30));
    return int4_val(c, s);
}

/* Encodes the block v[0..len) into rec; 0 when it holds a non-finite value.  Keeps the kk
 * largest |v| (the lower index first among equals), in index order. */
static int sp_enc_block(dlc_codec_kind kind, int block, const float *v, int len, uint8_t *rec) {
    if (!chunk_finite(v, len)) return 0;
    int k = sp_k(block), kk = len < k ? len : k, idx[4], n = 0;
    float mag[4];
    for (int i = 0; i < len; i++) { /* a sorted top-kk by magnitude, descending */
        float a = fabsf(v[i]);
        if (n == kk && !(a > mag[kk - 1])) continue;
        int j = n < kk ? n++ : kk - 1;
        while (j > 0 && a > mag[j - 1]) mag[j] = mag[j - 1], idx[j] = idx[j - 1], j--;
        mag[j] = a, idx[j] = i;
    }
    for (int a = 1; a < kk; a++) /* index order */
        for (int j = a; j > 0 && idx[j] < idx[j - 1]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1], idx[j - 1] = t;
        }
    float amax = 0.0f;
    for (int j = 0; j < kk; j++) amax = fabsf(v[idx[j]]) > amax ? fabsf(v[idx[j]]) : amax;
    float q = kind == DLC_CODEC_SPARSE2 ? 1.0f : 7.0f;
    uint16_t sc = bf16_enc(amax / q);
    if (!(bf16_dec(sc) * q <= FLT_MAX)) sc--; /* rounded up past what q codes can reach */
    float s = bf16_dec(sc);
    memcpy(rec, &sc, 2);
    uint8_t *codes = rec + 2 + kk;
    memset(codes, 0, (size_t)((kk * sp_bits(kind) + 7) / 8));
    for (int j = 0; j < kk; j++) {
        float x = v[idx[j]];
        uint32_t c;
        if (kind == DLC_CODEC_SPARSE2) {
            c = (fabsf(x) >= 0.75f * s ? 1u : 0u) | (x < 0.0f ? 2u : 0u);
        } else {
            float r = s > 0.0f ? x / s : 0.0f;
            c = q_int(r, 7.0f) & 15u; /* (x / s beyond 2^22 is clamped to +-7 first) */
            if (!(fabsf(r) < 0x1p22f)) c = r > 0.0f ? 7u : 9u;
        }
        rec[2 + j] = (uint8_t)idx[j];
        int bit = j * sp_bits(kind);
        codes[bit / 8] |= (uint8_t)(c << (bit % 8));
    }
    return 1;
}

/* Decodes record rec of a block of len elements into y[0..len) (zeros but the kept); the
 * record was checked (sp_check). */
INLINE void sp_dec_block(dlc_codec_kind kind, int block, const uint8_t *rec, int len, float *y) {
    int k = sp_k(block), kk = len < k ? len : k, bits = sp_bits(kind);
    uint16_t sc;
    memcpy(&sc, rec, 2);
    float s = bf16_dec(sc);
    const uint8_t *codes = rec + 2 + kk;
    memset(y, 0, sizeof(float) * (size_t)len);
    for (int j = 0; j < kk; j++) {
        int bit = j * bits;
        uint32_t c = (uint32_t)(codes[bit / 8] >> (bit % 8)) & ((1u << bits) - 1u);
        y[rec[2 + j]] = sp_val(kind, c, s);
    }
}

/* Checks every record of an n-element sparse encoding: a finite scale >= 0 whose largest
 * code stays finite, indices strictly increasing and inside their block.  -1 when all
 * are valid, else the block, with *why. */
static int64_t sp_check(dlc_codec_kind kind, int block, const uint8_t *in, int64_t n, const char **why) {
    int k = sp_k(block);
    float q = kind == DLC_CODEC_SPARSE2 ? 1.0f : 7.0f;
    int64_t b = 0;
    for (int64_t i0 = 0; i0 < n; i0 += block, b++) {
        int len = n - i0 < block ? (int)(n - i0) : block, kk = len < k ? len : k;
        uint16_t sc;
        memcpy(&sc, in, 2);
        float s = bf16_dec(sc);
        if (!(s >= 0.0f && s * q <= FLT_MAX) || (sc & 0x8000u)) {
            *why = "its scale is negative or not finite";
            return b;
        }
        for (int j = 0; j < kk; j++)
            if (in[2 + j] >= len || (j > 0 && in[2 + j] <= in[1 + j])) {
                *why = "its indices are not strictly increasing inside the block";
                return b;
            }
        in += sp_rec(kind, kk);
    }
    return -1;
}

/* Encodes x (+ ef) into out; -1, or the first element of a block holding a non-finite value. */
static int64_t sp_encode_run(dlc_codec_kind kind, int block, const float *x, int64_t n, uint8_t *out, float *ef) {
    float v[DLC_CODEC_BLOCK_MAX], d[DLC_CODEC_BLOCK_MAX];
    int k = sp_k(block);
    for (int64_t i0 = 0; i0 < n; i0 += block) {
        int len = n - i0 < block ? (int)(n - i0) : block;
        const float *src = x + i0;
        if (ef) {
            for (int i = 0; i < len; i++) v[i] = x[i0 + i] + ef[i0 + i];
            src = v;
        }
        if (!sp_enc_block(kind, block, src, len, out)) return i0;
        if (ef) {
            sp_dec_block(kind, block, out, len, d);
            float *e = ef + i0;
            for (int i = 0; i < len; i++) e[i] = v[i] - d[i];
        }
        out += sp_rec(kind, len < k ? len : k);
    }
    return -1;
}

/* mode 0: decode into y; 2: y += w * decoded (only the kept elements are touched). */
static void sp_decode_run(dlc_codec_kind kind, int block, const uint8_t *in, int64_t n, float *y, int mode, float w) {
    int k = sp_k(block), bits = sp_bits(kind);
    for (int64_t i0 = 0; i0 < n; i0 += block) {
        int len = n - i0 < block ? (int)(n - i0) : block, kk = len < k ? len : k;
        if (mode == 0) {
            sp_dec_block(kind, block, in, len, y + i0);
        } else {
            uint16_t sc;
            memcpy(&sc, in, 2);
            float s = bf16_dec(sc);
            const uint8_t *codes = in + 2 + kk;
            for (int j = 0; j < kk; j++) {
                int bit = j * bits;
                uint32_t c = (uint32_t)(codes[bit / 8] >> (bit % 8)) & ((1u << bits) - 1u);
                y[i0 + in[2 + j]] += w * sp_val(kind, c, s);
            }
        }
        in += sp_rec(kind, kk);
    }
}

/* ---- whole-buffer loops (one clone per ISA; the chunk kernels inline into each) ---- */

static int64_t n_blocks(dlc_codec_kind kind, int block, int64_t n) {
    return is_blocked(kind) ? (n + block - 1) / block : 0;
}

/* Returns -1, or the first element of the chunk holding a non-finite value. */
DLC_HOT static int64_t encode_run(dlc_codec_kind kind, int block, const float *x, int64_t n,
                                  uint8_t *out, float *ef) {
    if (is_sparse(kind)) return sp_encode_run(kind, block, x, n, out, ef);
    int ch = is_blocked(kind) ? block : CHUNK;
    uint8_t *codes = out + 4 * n_blocks(kind, block, n);
    float v[DLC_CODEC_BLOCK_MAX], d[DLC_CODEC_BLOCK_MAX];
    int64_t bi = 0;
    for (int64_t i0 = 0; i0 < n; i0 += ch, bi++) {
        int len = n - i0 < ch ? (int)(n - i0) : ch;
        const float *src = x + i0;
        if (ef) {
            for (int i = 0; i < len; i++) v[i] = x[i0 + i] + ef[i0 + i];
            src = v;
        }
        if (!enc_chunk(kind, src, len, i0, bi, out, codes)) return i0;
        if (ef) {
            dec_chunk(kind, out, codes, len, i0, bi, d);
            float *e = ef + i0;
            for (int i = 0; i < len; i++) e[i] = v[i] - d[i];
        }
    }
    return -1;
}

/* mode 0: decode into y; 1: check only (f32, bf16), returns the first element of a
 * non-finite chunk; 2: acc += w * decoded.  Returns -1 when all is well. */
DLC_HOT static int64_t decode_run(dlc_codec_kind kind, int block, const uint8_t *in, int64_t n,
                                  float *y, int mode, float w) {
    if (is_sparse(kind)) { /* (checked whole before: sp_check; its values are finite) */
        if (mode != 1) sp_decode_run(kind, block, in, n, y, mode, w);
        return -1;
    }
    int ch = is_blocked(kind) ? block : CHUNK;
    const uint8_t *codes = in + 4 * n_blocks(kind, block, n);
    int checks = kind == DLC_CODEC_F32 || kind == DLC_CODEC_BF16;
    float d[DLC_CODEC_BLOCK_MAX];
    int64_t bi = 0;
    for (int64_t i0 = 0; i0 < n; i0 += ch, bi++) {
        int len = n - i0 < ch ? (int)(n - i0) : ch;
        if (mode == 0) {
            dec_chunk(kind, in, codes, len, i0, bi, y + i0);
            if (checks && !chunk_finite(y + i0, len)) return i0;
        } else if (mode == 1) {
            dec_chunk(kind, in, codes, len, i0, bi, d);
            if (!chunk_finite(d, len)) return i0;
        } else {
            dec_chunk(kind, in, codes, len, i0, bi, d);
            float *a = y + i0;
            for (int i = 0; i < len; i++) a[i] += w * d[i];
        }
    }
    return -1;
}

/* ---- the API ---- */

dlc_codec_params dlc_codec_default_params(void) {
    dlc_codec_params p = {DLC_CODEC_BLOCK_DEFAULT};
    return p;
}

const char *dlc_codec_name(dlc_codec_kind kind) {
    return (unsigned)kind < DLC_CODEC_COUNT ? codec_names[kind] : NULL;
}

dlc_status dlc_codec_from_name(const char *name, dlc_codec_kind *kind) {
    for (int k = 0; name && k < DLC_CODEC_COUNT; k++)
        if (!strcmp(name, codec_names[k])) {
            *kind = (dlc_codec_kind)k;
            return DLC_OK;
        }
    if (name && !strcmp(name, "e4m3")) {
        *kind = DLC_CODEC_FP8;
        return DLC_OK;
    }
    return dlc_error(DLC_ERR_ARG, "codec = \"%s\": expected one of f32, bf16, fp8, int8, int4, e3m0, sparse2, sparse4",
                     name ? name : "(null)");
}

dlc_status dlc_codec_check(dlc_codec_kind kind, const dlc_codec_params *params) {
    if ((unsigned)kind >= DLC_CODEC_COUNT)
        return dlc_error(DLC_ERR_ARG, "codec: kind = %d, expected 0..%d (dlc_codec_kind)", (int)kind,
                         DLC_CODEC_COUNT - 1);
    int b = params ? params->block : DLC_CODEC_BLOCK_DEFAULT;
    if (b < DLC_CODEC_BLOCK_MIN || b > DLC_CODEC_BLOCK_MAX || (b & 1))
        return dlc_error(DLC_ERR_ARG, "codec %s: block = %d, expected an even number in %d..%d",
                         codec_names[kind], b, DLC_CODEC_BLOCK_MIN, DLC_CODEC_BLOCK_MAX);
    return DLC_OK;
}

int64_t dlc_codec_encoded_size(dlc_codec_kind kind, const dlc_codec_params *params, int64_t n) {
    dlc_status st = dlc_codec_check(kind, params);
    if (st != DLC_OK) return st;
    if (n < 0 || n > INT64_MAX / 8 || (uint64_t)n > SIZE_MAX / 8)
        return dlc_error(DLC_ERR_RANGE, "codec %s: n = %lld elements, expected 0..%lld", codec_names[kind],
                         (long long)n, (long long)(INT64_MAX / 8 < SIZE_MAX / 8 ? INT64_MAX / 8 : SIZE_MAX / 8));
    int block = params ? params->block : DLC_CODEC_BLOCK_DEFAULT;
    int64_t nb = n_blocks(kind, block, n);
    switch (kind) {
    case DLC_CODEC_F32: return 4 * n;
    case DLC_CODEC_BF16: return 2 * n;
    case DLC_CODEC_FP8: return n;
    case DLC_CODEC_INT8: return 4 * nb + n;
    case DLC_CODEC_SPARSE2:
    case DLC_CODEC_SPARSE4: return sp_size(kind, block, n);
    default: return 4 * nb + (n + 1) / 2;
    }
}

static const char *nonfinite_name(float v) { return v != v ? "nan" : v > 0 ? "inf" : "-inf"; }

/* The element of x[i0..) (or of x + e) that is not finite, named in the message. */
static dlc_status report_nonfinite(dlc_codec_kind kind, const float *x, const float *e, int64_t i0,
                                   int64_t n) {
    for (int64_t i = i0; i < n; i++) {
        if (!isfinite(x[i]))
            return dlc_error(DLC_ERR_ARG, "codec %s: element %lld is %s: contributions must be finite",
                             codec_names[kind], (long long)i, nonfinite_name(x[i]));
        if (e && !isfinite(x[i] + e[i]))
            return dlc_error(DLC_ERR_ARG,
                             "codec %s: element %lld: x + error_feedback = %g + %g is not finite: "
                             "contributions must be finite (reset the feedback buffer?)",
                             codec_names[kind], (long long)i, x[i], e[i]);
    }
    return dlc_error(DLC_ERR_INTERNAL, "codec %s: a non-finite chunk at %lld but no such element",
                     codec_names[kind], (long long)i0);
}

int64_t dlc_codec_encode(dlc_codec_kind kind, const dlc_codec_params *params, const float *x,
                         int64_t n, uint8_t *out, size_t out_cap, float *error_feedback) {
    int64_t size = dlc_codec_encoded_size(kind, params, n);
    if (size < 0) return size;
    if ((uint64_t)size > out_cap)
        return dlc_error(DLC_ERR_RANGE, "codec %s encode: out_cap = %zu bytes, but %lld elements need %lld",
                         codec_names[kind], out_cap, (long long)n, (long long)size);
    if (n > 0 && (!x || !out))
        return dlc_error(DLC_ERR_ARG, "codec %s encode: x or out is NULL with n = %lld", codec_names[kind],
                         (long long)n);
    int block = params ? params->block : DLC_CODEC_BLOCK_DEFAULT;
    if (error_feedback) {
        /* validate first so a bad contribution leaves the feedback state as it was */
        for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
            int len = n - i0 < CHUNK ? (int)(n - i0) : CHUNK;
            float z = 0.0f;
            DLC_SIMD_REDUCE(+ : z)
            for (int i = 0; i < len; i++) {
                float v = x[i0 + i] + error_feedback[i0 + i];
                z += (v - v) + (x[i0 + i] - x[i0 + i]);
            }
            if (z != 0.0f) return report_nonfinite(kind, x, error_feedback, i0, n);
        }
    }
    int64_t bad = encode_run(kind, block, x, n, out, error_feedback);
    if (bad >= 0) return report_nonfinite(kind, x, NULL, bad, n);
    return size;
}

/* Checks in_len, n, the pointers and the scales of a buffer about to be decoded. */
static dlc_status check_input(dlc_codec_kind kind, const dlc_codec_params *params, const uint8_t *in,
                              size_t in_len, int64_t n, const void *dst, const char *fn) {
    int64_t size = dlc_codec_encoded_size(kind, params, n);
    if (size < 0) return (dlc_status)size;
    if ((uint64_t)size != in_len)
        return dlc_error(DLC_ERR_FORMAT, "codec %s %s: in_len = %zu bytes, but %lld elements encode to %lld",
                         codec_names[kind], fn, in_len, (long long)n, (long long)size);
    if (n > 0 && (!in || !dst))
        return dlc_error(DLC_ERR_ARG, "codec %s %s: a buffer is NULL with n = %lld", codec_names[kind], fn,
                         (long long)n);
    if (is_sparse(kind)) {
        const char *why = "";
        int64_t b = sp_check(kind, params ? params->block : DLC_CODEC_BLOCK_DEFAULT, in, n, &why);
        if (b >= 0)
            return dlc_error(DLC_ERR_FORMAT, "codec %s %s: block %lld: %s", codec_names[kind], fn, (long long)b, why);
        return DLC_OK;
    }
    int64_t nb = n_blocks(kind, params ? params->block : DLC_CODEC_BLOCK_DEFAULT, n);
    float q = qmax_of(kind);
    for (int64_t b = 0; b < nb; b++) {
        float s = ((const f32u *)in)[b];
        if (!(s >= 0.0f && s * q <= FLT_MAX))
            return dlc_error(DLC_ERR_FORMAT,
                             "codec %s %s: block %lld has scale %g, expected a number >= 0 with %g * scale finite",
                             codec_names[kind], fn, (long long)b, s, q);
    }
    return DLC_OK;
}

dlc_status dlc_codec_decode(dlc_codec_kind kind, const dlc_codec_params *params, const uint8_t *in,
                            size_t in_len, float *out, int64_t n) {
    dlc_status st = check_input(kind, params, in, in_len, n, out, "decode");
    if (st != DLC_OK) return st;
    int64_t bad = decode_run(kind, params ? params->block : DLC_CODEC_BLOCK_DEFAULT, in, n, out, 0, 0.0f);
    for (int64_t i = bad; bad >= 0 && i < n; i++)
        if (!isfinite(out[i]))
            return dlc_error(DLC_ERR_FORMAT, "codec %s decode: element %lld decodes to %s",
                             codec_names[kind], (long long)i, nonfinite_name(out[i]));
    return DLC_OK;
}

dlc_status dlc_codec_validate(dlc_codec_kind kind, const dlc_codec_params *params, const uint8_t *in, size_t in_len,
                              int64_t n) {
    dlc_status st = check_input(kind, params, in, in_len, n, in, "validate"); /* (no output to check) */
    if (st != DLC_OK) return st;
    int64_t bad = decode_run(kind, params ? params->block : DLC_CODEC_BLOCK_DEFAULT, in, n, NULL, 1, 0.0f);
    if (bad < 0) return DLC_OK;
    int64_t end = bad + CHUNK < n ? bad + CHUNK : n;
    for (int64_t i = bad; i < end && (kind == DLC_CODEC_F32 || kind == DLC_CODEC_BF16); i++) {
        float v = kind == DLC_CODEC_F32 ? ((const f32u *)in)[i] : bf16_dec(((const u16u *)in)[i]);
        if (!isfinite(v))
            return dlc_error(DLC_ERR_FORMAT, "codec %s validate: element %lld decodes to %s", codec_names[kind],
                             (long long)i, nonfinite_name(v));
    }
    return dlc_error(DLC_ERR_FORMAT, "codec %s validate: a value from element %lld on decodes to a non-finite number",
                     codec_names[kind], (long long)bad);
}

dlc_status dlc_codec_decode_axpy(dlc_codec_kind kind, const dlc_codec_params *params, const uint8_t *in,
                                 size_t in_len, int64_t n, float w, float *acc) {
    dlc_status st = check_input(kind, params, in, in_len, n, acc, "decode_axpy");
    if (st != DLC_OK) return st;
    if (!isfinite(w))
        return dlc_error(DLC_ERR_ARG, "codec %s decode_axpy: w = %g, expected a finite weight", codec_names[kind],
                         w);
    int block = params ? params->block : DLC_CODEC_BLOCK_DEFAULT;
    if (kind == DLC_CODEC_F32 || kind == DLC_CODEC_BF16) {
        int64_t bad = decode_run(kind, block, in, n, NULL, 1, 0.0f);
        if (bad >= 0) {
            int64_t end = bad + CHUNK < n ? bad + CHUNK : n;
            for (int64_t i = bad; i < end; i++) {
                float v = kind == DLC_CODEC_F32 ? ((const f32u *)in)[i] : bf16_dec(((const u16u *)in)[i]);
                if (!isfinite(v))
                    return dlc_error(DLC_ERR_FORMAT, "codec %s decode_axpy: element %lld decodes to %s",
                                     codec_names[kind], (long long)i, nonfinite_name(v));
            }
        }
    }
    decode_run(kind, block, in, n, acc, 2, w);
    return DLC_OK;
}
