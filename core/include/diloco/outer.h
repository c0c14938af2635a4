/*
 * outer.h - the syncer's state for ONE fragment (docs/algorithm.md §4.2, §4.5): the global
 * parameters Θ of the fragment (n floats), its version counter, the outer optimizer
 * (plain SGD, momentum or Nesterov) and a ring of the last R versions of Θ, so that a
 * contribution computed against an older version can be re-anchored at the current Θ.
 * Sans-IO, no threads; the syncer owns one per fragment.  Details: docs/outer.md.
 *
 *     dlc_fragstate_params fp = dlc_fragstate_default_params();   // Nesterov 0.7 / 0.9, R = 4
 *     dlc_fragstate *fs = dlc_fragstate_new(&fp, theta0, n);      // copies theta0
 *     if (!fs) fprintf(stderr, "%s\n", dlc_last_error());
 *     for each contribution (base version b, decoded outer gradient d, n floats):
 *         if (dlc_fragstate_anchor(fs, b, d) == DLC_ERR_STATE)
 *             ...;                             // too old (or unknown): drop it, resync the learner
 *         else ...;                            // d is now an outer gradient against the current Θ
 *     merge the anchored contributions into delta (merge.h);
 *     dlc_fragstate_step(fs, delta);           // Θ moves, version += 1
 *     broadcast dlc_fragstate_theta(fs), dlc_fragstate_version(fs);
 *     dlc_fragstate_free(fs);
 *
 * Outer step, exactly torch.optim.SGD (dampening 0, weight decay 0) applied to the merged
 * outer gradient Δ = mean of (θ_old − θ_new), all in f32 (lr and μ rounded to f32 once):
 *   momentum == 0:  Θ -= lr·Δ                                     (plain SGD)
 *   otherwise:      buf = μ·buf + Δ           (buf starts at 0, so the first buf is Δ,
 *                                              as torch's first step)
 *                   Θ -= lr·(nesterov ? Δ + μ·buf : buf)
 *
 * Versions: Θ^(v) is the value after v steps (v = 0 is the initial Θ, or the one given to
 * dlc_fragstate_set).  The ring holds Θ^(v) for v in [oldest, current], where
 * oldest = max(current − R + 1, the version of the last new/set).  Θ^(current) is one of
 * the R slots, so memory is R·n floats for the ring plus n floats of momentum buffer
 * (none for plain SGD), all allocated by dlc_fragstate_new and never again.
 *
 * Anchoring (§4.2): a contribution Δ_m against version b stands for θ_m = Θ^(b) − Δ_m, so
 * against the current Θ it is Δ' = Θ^(cur) − θ_m = Δ_m + Θ^(cur) − Θ^(b), computed in f32
 * per element as Δ_m + (Θ^(cur) − Θ^(b)); for b == current it is the identity (delta is
 * not touched at all).
 */
#ifndef DILOCO_OUTER_H
#define DILOCO_OUTER_H

#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest ring: R versions of the fragment are kept. */
#define DLC_FRAGSTATE_RING_MAX 64

typedef struct dlc_fragstate_params {
    double lr;       /* outer learning rate, finite and >= 0 */
    double momentum; /* μ, finite, in [0, 1); 0 = plain SGD (no buffer) */
    int nesterov;    /* 0/1; 1 needs momentum > 0 (as torch) */
    int ring;        /* R, 1..DLC_FRAGSTATE_RING_MAX versions kept (1 = only the current) */
} dlc_fragstate_params;

/* The DiLoCo paper's outer optimizer: lr 0.7, momentum 0.9, Nesterov; R = 4 (§4.5). */
DLC_API dlc_fragstate_params dlc_fragstate_default_params(void);
/* DLC_OK or DLC_ERR_ARG naming the field, its value and what was expected:
 * "fragstate: momentum = 1.5, expected a finite number in [0, 1)". */
DLC_API dlc_status dlc_fragstate_params_check(const dlc_fragstate_params *p);

typedef struct dlc_fragstate dlc_fragstate; /* opaque */

/* A new state of n >= 1 floats with Θ^(0) = theta (borrowed, n finite floats, copied),
 * version 0, zero momentum, the ring holding just version 0; p is copied.  NULL on
 * failure: DLC_ERR_ARG (NULL p or theta, bad params, n < 1 or R·n too large for memory,
 * a non-finite theta value, named with its index) or DLC_ERR_NOMEM.  Caller frees. */
DLC_API dlc_fragstate *dlc_fragstate_new(const dlc_fragstate_params *p, const float *theta, int64_t n);
/* NULL is a no-op. */
DLC_API void dlc_fragstate_free(dlc_fragstate *fs);

/* One outer step with the merged outer gradient delta (borrowed, n floats, may not
 * alias Θ or the ring), then version += 1; the slot of the version that falls out of
 * the ring is reused.  Refused without changing anything: DLC_ERR_ARG for NULL
 * arguments or a non-finite delta value ("fragstate_step: delta[17] = nan: ..."),
 * DLC_ERR_RANGE when the version would overflow. */
DLC_API dlc_status dlc_fragstate_step(dlc_fragstate *fs, const float *delta);

/* Re-anchors delta_inout (n floats, caller-owned, an outer gradient against version
 * base_version) at the current Θ (formula above).  DLC_ERR_STATE, with delta_inout
 * untouched, when base_version is not in the ring: older than the oldest kept, newer
 * than the current, or negative ("fragstate_anchor: base version 3 is not kept: the
 * ring holds versions 5..8 (current 8); drop the contribution and resync the learner").
 * DLC_ERR_ARG for NULL arguments.  Values are not checked here (step checks the merged
 * delta; merge.h's add checks each encoded contribution). */
DLC_API dlc_status dlc_fragstate_anchor(const dlc_fragstate *fs, int64_t base_version, float *delta_inout);

/* The next version given whole, as a standby takes its primary's (syncer.h,
 * "Replication"): Θ^(current + 1) = theta (borrowed, n finite floats, copied) into the
 * ring, current + 1; the momentum buffer is left as it is (write it through
 * dlc_fragstate_momentum).  Refused without changing anything: DLC_ERR_ARG for NULL or a
 * non-finite value (named), DLC_ERR_RANGE at the last version. */
DLC_API dlc_status dlc_fragstate_push(dlc_fragstate *fs, const float *theta);

/* Restores from a checkpoint: Θ^(version) = theta (borrowed, n finite floats, copied),
 * current = oldest = version (>= 0): the ring is reset to just this version, since older
 * values are not in a checkpoint and learners anchored at them must resync.  The
 * momentum buffer is KEPT: restore it separately through dlc_fragstate_momentum (or
 * zero it there for a fresh optimizer).  Refused without changing anything:
 * DLC_ERR_ARG for NULL, a negative version or a non-finite theta value (named). */
DLC_API dlc_status dlc_fragstate_set(dlc_fragstate *fs, const float *theta, int64_t version);

/* Restores a ring from a checkpoint (the syncer's, syncer.h): versions oldest..version
 * (0 <= oldest <= version, at most R of them), `thetas` holding their Θ back to back,
 * (version − oldest + 1)·n floats, Θ^(oldest) first (borrowed, finite, copied).  After
 * it dlc_fragstate_at answers for exactly those versions, as it did in the state that
 * was saved.  The momentum buffer is KEPT, as with dlc_fragstate_set.  Refused without
 * changing anything: DLC_ERR_ARG for NULL, a bad range (named, with R) or a
 * non-finite value ("fragstate_restore: version 7 [3] = nan: ..."). */
DLC_API dlc_status dlc_fragstate_restore(dlc_fragstate *fs, int64_t oldest, int64_t version, const float *thetas);

/* Gives away the buffer that holds Θ^(version) (a version in the ring's slots:
 * current − R < version <= current) and puts a fresh one in its place: the caller owns
 * the returned n floats (free with dlc_big_free, mem.h) and may keep reading them.  The
 * current version is copied into the fresh buffer and stays; an older one leaves the
 * ring (with anything older), as if it had fallen out.  Lets a driver send a version
 * from the ring without a copy: it takes the buffer just before a step would overwrite
 * it.  NULL with DLC_ERR_STATE (no slot holds that version) or DLC_ERR_NOMEM, nothing
 * changed. */
DLC_API float *dlc_fragstate_give(dlc_fragstate *fs, int64_t version);

/* ---- accessors (NULL fs: 0 / NULL) ---- */

/* The fragment's size n. */
DLC_API int64_t dlc_fragstate_size(const dlc_fragstate *fs);
/* The parameters in use (owned by fs). */
DLC_API const dlc_fragstate_params *dlc_fragstate_get_params(const dlc_fragstate *fs);
/* Θ^(current): n floats, borrowed, valid until the next step, set, give or free (each
 * step moves the current version to another ring slot). */
DLC_API const float *dlc_fragstate_theta(const dlc_fragstate *fs);
/* 1 when every value of the current version is finite (what wrote it checked: new, set,
 * push and restore refuse non-finite input, a step checks what it writes in the same
 * pass), 0 when the step that made it overflowed.  A driver that must send only finite
 * values asks this instead of scanning Θ. */
DLC_API int dlc_fragstate_finite(const dlc_fragstate *fs);
/* Θ^(version) if that version is in the ring, else NULL with DLC_ERR_STATE; borrowed,
 * valid until the next step, set, give or free. */
DLC_API const float *dlc_fragstate_at(const dlc_fragstate *fs, int64_t version);
/* Steps taken since version 0 (or the version given to set). */
DLC_API int64_t dlc_fragstate_version(const dlc_fragstate *fs);
/* The oldest version kept in the ring (== version right after new or set). */
DLC_API int64_t dlc_fragstate_oldest(const dlc_fragstate *fs);
/* The momentum buffer (n floats, writable for checkpoint restore), NULL for plain SGD
 * (momentum 0); valid while fs is alive. */
DLC_API float *dlc_fragstate_momentum(dlc_fragstate *fs);

#ifdef __cplusplus
}
#endif
#endif
