/*
 * merge.h - the syncer's merge of ONE fragment for one round (docs/algorithm.md §4.2, §4.4):
 * encoded contributions go in one at a time, decoded straight into f32 accumulators, and
 * the merged outer gradient Δ comes out.  Sans-IO, no threads; the syncer owns one per
 * fragment and resets it each round.  Formulas, method and memory bound: docs/merge.md.
 *
 * The fragment is n floats split into T "tensor segments" (its views, frag.h, in payload
 * order); a segment can be marked as an embedding.
 *   DLC_MERGE_MEAN  Δ = Σ w·Δ_m / Σ w
 *   DLC_MERGE_RDA   per segment s: Δ_s = (Σ w‖Δ_m,s‖ / Σ w) · φ(Σ w·φ(Δ_m,s)),
 *                   φ(x) = x/‖x‖, φ(0) = 0; embedding segments use the weighted mean.
 * Memory is n floats of accumulator plus O(T) and a 16 KiB decode chunk: it never grows
 * with the number of contributions.
 *
 *     int64_t seg[3] = {1024, 4096, 512};
 *     uint8_t emb[3] = {1, 0, 0};                 // segment 0 is an embedding
 *     dlc_merge_params mp = {DLC_MERGE_RDA, 3, seg, emb};
 *     dlc_merge *m = dlc_merge_new(&mp);
 *     if (!m) fprintf(stderr, "%s\n", dlc_last_error());
 *     for each contribution:                      // bytes borrowed for the call only
 *         if (dlc_merge_add(m, DLC_CODEC_INT4, &cp, bytes, len, weight) != DLC_OK)
 *             ...;                                // refused, m is as before; resync that learner
 *     dlc_merge_finish(m, delta);                 // delta: n floats, caller-owned
 *     dlc_merge_reset(m);                         // next round
 *     dlc_merge_free(m);
 */
#ifndef DILOCO_MERGE_H
#define DILOCO_MERGE_H

#include <stddef.h>
#include <stdint.h>
#include "codec.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlc_merge_mode {
    DLC_MERGE_RDA,  /* radial-directional averaging per segment (embeddings: mean) */
    DLC_MERGE_MEAN, /* weighted mean of everything */
    DLC_MERGE_MODE_COUNT
} dlc_merge_mode;

/* "rda", "mean"; NULL when out of range. */
DLC_API const char *dlc_merge_mode_name(dlc_merge_mode mode);
/* Parses "rda" / "mean" into *out; DLC_ERR_ARG naming the value and the choices. */
DLC_API dlc_status dlc_merge_mode_parse(const char *name, dlc_merge_mode *out);

/* Largest accepted weight: keeps w·Δ and Σw far from f32 / f64 overflow. */
#define DLC_MERGE_WEIGHT_MAX 1e30

typedef struct dlc_merge_params {
    dlc_merge_mode mode;
    int segments;             /* T >= 1 */
    const int64_t *numel;     /* T segment lengths, each >= 1; n = their sum (borrowed, copied) */
    const uint8_t *embedding; /* T flags, nonzero = weighted mean in RDA mode; NULL = none
                               * (borrowed, copied) */
} dlc_merge_params;

typedef struct dlc_merge dlc_merge;

/* A new, empty accumulator (caller frees with dlc_merge_free), or NULL with DLC_ERR_ARG
 * (bad mode, T, a segment length) or DLC_ERR_NOMEM. */
DLC_API dlc_merge *dlc_merge_new(const dlc_merge_params *params);
/* NULL is a no-op. */
DLC_API void dlc_merge_free(dlc_merge *m);

/* Adds one contribution: `bytes` (borrowed, len bytes) encode the fragment's n floats with
 * codec `kind` / `cparams` (NULL = defaults).  weight must be finite, > 0 and
 * <= DLC_MERGE_WEIGHT_MAX.  Errors, each naming the value and what was expected:
 *   DLC_ERR_ARG     bad weight, kind or cparams, NULL m or bytes;
 *   DLC_ERR_FORMAT  len != the encoded size of n floats; a value or scale that decodes
 *                   to a non-finite number (the codec's message, with the element);
 *   DLC_ERR_RANGE   Σ w would overflow.
 * On any error the accumulator is exactly as it was before the call: every check, and in
 * RDA mode the norm pass, runs before the accumulators are written (docs/merge.md). */
DLC_API dlc_status dlc_merge_add(dlc_merge *m, dlc_codec_kind kind, const dlc_codec_params *cparams,
                                 const uint8_t *bytes, size_t len, double weight);

/* dlc_merge_add of the contribution re-anchored at another version of the fragment:
 * each decoded value x_i enters as x_i + (cur_i - base_i), the learner's Δ measured
 * against cur instead of the base it trained from (cur and base: n floats each, both or
 * neither given; NULL, NULL is dlc_merge_add).  One pass over the bytes and the two
 * versions per sweep, no fragment-sized scratch.  Also DLC_ERR_FORMAT when a re-anchored
 * value is not finite; on any error the accumulator is as it was. */
DLC_API dlc_status dlc_merge_add_anchored(dlc_merge *m, dlc_codec_kind kind, const dlc_codec_params *cparams,
                                          const uint8_t *bytes, size_t len, double weight, const float *cur,
                                          const float *base);
/* The checks of dlc_merge_add_anchored alone (no weight): whether the contribution would
 * be taken.  The accumulator is untouched. */
DLC_API dlc_status dlc_merge_check(dlc_merge *m, dlc_codec_kind kind, const dlc_codec_params *cparams,
                                   const uint8_t *bytes, size_t len, const float *cur, const float *base);

/* Writes the merged Δ into out (n floats, caller-owned, must not alias m).  m is not
 * modified (finish can be called again, or more contributions added).
 * DLC_ERR_STATE with no contribution; DLC_ERR_RANGE if a merged value is not finite. */
DLC_API dlc_status dlc_merge_finish(const dlc_merge *m, float *out);

/* dlc_merge_finish into the accumulator itself: returns the merged Δ (n floats, owned by
 * m), or NULL with finish's errors.  The sums are gone: m must be dlc_merge_reset before
 * its next add.  For a host that applies Δ at once and holds no second fragment. */
DLC_API float *dlc_merge_take(dlc_merge *m);

/* Empties the accumulator for the next round (keeps the segments and mode). */
DLC_API void dlc_merge_reset(dlc_merge *m);

DLC_API int64_t dlc_merge_numel(const dlc_merge *m);       /* n */
DLC_API int dlc_merge_count(const dlc_merge *m);            /* contributions added */
DLC_API double dlc_merge_weight_sum(const dlc_merge *m);    /* Σ w */

#ifdef __cplusplus
}
#endif
#endif
