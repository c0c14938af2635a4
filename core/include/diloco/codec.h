/*
 * codec.h - encodings of f32 contributions (outer gradients, global fragments) for the
 * wire: f32, bf16, fp8 e4m3, int8 / int4 with a per-block absmax scale, and 4-bit E3M0
 * (sign + 3 exponent bits) with a per-block scale.  Pure functions over caller-owned
 * buffers: nothing allocates, nothing keeps state (error feedback lives in a buffer the
 * caller owns, one per learner).  The byte layouts, size formulas and error bounds are
 * in docs/codecs.md; the layouts are part of the wire format.
 *
 *     dlc_codec_params p = dlc_codec_default_params();          // block = 128
 *     int64_t size = dlc_codec_encoded_size(DLC_CODEC_INT4, &p, n);
 *     uint8_t *buf = malloc(size);
 *     int64_t w = dlc_codec_encode(DLC_CODEC_INT4, &p, delta, n, buf, size, ef); // ef may be NULL
 *     if (w < 0) fprintf(stderr, "%s\n", dlc_last_error()); // "... element 1234 is nan"
 *     // syncer side: acc += weight * decoded, no decoded copy held
 *     dlc_codec_decode_axpy(DLC_CODEC_INT4, &p, buf, size, n, weight, acc);
 *
 * Layout, all little-endian (the library refuses to build on a big-endian host):
 *   f32   n x f32                         4n bytes
 *   bf16  n x u16 (upper half of the f32) 2n bytes
 *   fp8   n x u8 e4m3 (OCP E4M3FN)         n bytes
 *   int8  nb x f32 scale, n x i8           4nb + n bytes
 *   int4  nb x f32 scale, n nibbles        4nb + ceil(n/2) bytes
 *   e3m0  nb x f32 scale, n nibbles        4nb + ceil(n/2) bytes
 *   sparse2/4  per block of L elements, keeping kk = min(k, L): u16 bf16 scale, kk x u8
 *         index (strictly increasing), kk codes of 2 / 4 bits packed from bit 0;
 *         2 + kk + ceil(kk * bits / 8) bytes a block
 * with nb = ceil(n / block).  Nibbles: element 2j in the low nibble of byte j, element
 * 2j+1 in the high nibble; a final unpaired high nibble is 0.  The block size is any EVEN
 * value in 32..256 (even, so every block's codes start on a byte boundary).
 */
#ifndef DILOCO_CODEC_H
#define DILOCO_CODEC_H

#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlc_codec_kind {
    DLC_CODEC_F32,  /* identity: bit-exact */
    DLC_CODEC_BF16, /* round to nearest even; beyond bf16's max saturates to +-max */
    DLC_CODEC_FP8,  /* e4m3, no scale: round to nearest even, saturates at +-448, no NaN */
    DLC_CODEC_INT8, /* q in -127..127, value q * scale, scale = block absmax / 127 */
    DLC_CODEC_INT4, /* q in -7..7 (two's complement nibble), scale = block absmax / 7 */
    DLC_CODEC_E3M0, /* nibble s|c: c = 0 zero, c = 1..7 value (-1)^s * scale * 2^(c-7),
                     * scale = block absmax (docs/codecs.md) */
    /* Sparse (SparseLoCo-style): per block only its k = max(1, block / 64) largest values
     * by magnitude (1.6% at block 128), each as a one-byte index in the block and a 2- or
     * 4-bit code of a bf16 block scale; every other element decodes to 0.  Meant with
     * error feedback, which carries what was not sent (docs/codecs.md). */
    DLC_CODEC_SPARSE2, /* code s|m: (-1)^s * scale * (m ? 1 : 1/2), scale = amax of the kept */
    DLC_CODEC_SPARSE4, /* code q in -7..7 (two's complement nibble), q * scale, scale = amax / 7 */
    DLC_CODEC_COUNT
} dlc_codec_kind;

#define DLC_CODEC_BLOCK_MIN 32
#define DLC_CODEC_BLOCK_MAX 256
#define DLC_CODEC_BLOCK_DEFAULT 128

typedef struct dlc_codec_params {
    int block; /* elements per scale (int8, int4, e3m0); even, in 32..256 */
} dlc_codec_params;

/* {block = 128}. */
DLC_API dlc_codec_params dlc_codec_default_params(void);

/* "f32", "bf16", "fp8", "int8", "int4", "e3m0", "sparse2", "sparse4"; NULL for an
 * out-of-range kind. */
DLC_API const char *dlc_codec_name(dlc_codec_kind kind);
/* The kind named `name` (as above; "e4m3" is accepted for fp8) in *kind, or DLC_ERR_ARG
 * with the list of names.  `name` is borrowed. */
DLC_API dlc_status dlc_codec_from_name(const char *name, dlc_codec_kind *kind);

/* Checks kind and params (NULL = defaults): DLC_OK or DLC_ERR_ARG naming the field. */
DLC_API dlc_status dlc_codec_check(dlc_codec_kind kind, const dlc_codec_params *params);

/* Exact number of bytes encode writes for n elements (the formulas above), or a negative
 * dlc_status (bad kind/params, n < 0, or a size beyond INT64_MAX / SIZE_MAX).  n = 0
 * gives 0. */
DLC_API int64_t dlc_codec_encoded_size(dlc_codec_kind kind, const dlc_codec_params *params,
                                       int64_t n);

/* Encodes x[0..n) into out (capacity out_cap >= dlc_codec_encoded_size) and returns the
 * bytes written (= the encoded size), or a negative dlc_status.  All buffers are
 * borrowed and must not overlap.
 *
 * error_feedback: NULL (off), or n floats owned by the caller (zero them before the first
 * contribution, keep one per learner): x + e is encoded and e becomes the new quantization
 * error (x + e) - decode(encoded), so what one contribution loses the next one carries.
 *
 * Errors (message in dlc_last_error()):
 *   DLC_ERR_ARG  a NaN or Inf in x, or x + e not finite ("element 1234 is nan"); bad
 *                kind, params, n < 0, NULL buffers with n > 0;
 *   DLC_ERR_RANGE out_cap smaller than the encoded size (both named).
 * On error error_feedback is untouched; out is untouched except after a non-finite
 * value without feedback, when the blocks (of `block`, or of 256 elements for f32, bf16
 * and fp8) before the one holding it may have been written.  Never send it. */
DLC_API int64_t dlc_codec_encode(dlc_codec_kind kind, const dlc_codec_params *params,
                                 const float *x, int64_t n, uint8_t *out, size_t out_cap,
                                 float *error_feedback);

/* Decodes in[0..in_len) into out[0..n).  in_len must equal dlc_codec_encoded_size(n)
 * exactly (DLC_ERR_FORMAT naming both otherwise): the bytes may come from a peer.
 * DLC_ERR_FORMAT also for a value that would decode to a non-finite number (f32 / bf16
 * NaN or Inf, a scale that is negative, non-finite or too large for its codes), naming
 * the element or block; out may then be partly written.  Buffers borrowed. */
DLC_API dlc_status dlc_codec_decode(dlc_codec_kind kind, const dlc_codec_params *params,
                                    const uint8_t *in, size_t in_len, float *out, int64_t n);

/* The checks of dlc_codec_decode without the decode: DLC_OK when `in` decodes to n
 * finite values, else its error.  For a reader that keeps the bytes (a learner that
 * applies a merge from the frame it came in). */
DLC_API dlc_status dlc_codec_validate(dlc_codec_kind kind, const dlc_codec_params *params,
                                      const uint8_t *in, size_t in_len, int64_t n);

/* acc[i] += w * decoded[i] for i < n, the syncer's merge without a decoded copy.  Same
 * checks as dlc_codec_decode, all done before acc is touched: on error acc is unchanged. */
DLC_API dlc_status dlc_codec_decode_axpy(dlc_codec_kind kind, const dlc_codec_params *params,
                                         const uint8_t *in, size_t in_len, int64_t n, float w,
                                         float *acc);

/* Single-value conversions of the fp8 and bf16 codecs (what the bulk loops compute),
 * for tests and tools.  Inputs finite; the results as described for the kinds above. */
DLC_API uint8_t dlc_fp8_e4m3_from_f32(float x);
DLC_API float dlc_fp8_e4m3_to_f32(uint8_t code);
DLC_API uint16_t dlc_bf16_from_f32(float x);
DLC_API float dlc_bf16_to_f32(uint16_t code);

#ifdef __cplusplus
}
#endif
#endif
