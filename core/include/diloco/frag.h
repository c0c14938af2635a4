/*
 * frag.h - fragment plans: how the parameter arena (params.h) is split into P fragments
 * that are synchronised separately (Streaming / Decoupled DiLoCo, docs/algorithm.md §3, §4.6).
 *
 * A fragment is a list of views of the arena, (tensor, name, offset, numel) in floats,
 * never copies: the same offsets address the grad arena and every optimizer state arena.
 * Every float of every tensor belongs to exactly one fragment; the padding between
 * tensors belongs to none.  A fragment's views are in arena order (increasing offset);
 * its payload on the wire is their concatenation in that order.
 *
 * Plans (docs/fragments.md has the exact rules):
 *   balanced    greedy bin-packing of whole tensors into P fragments of near-equal bytes:
 *               largest first into the currently lightest fragment (the default)
 *   strided     layer i -> fragment i mod P, the layer parsed from the name
 *               ("blocks.3.attn.qkv.weight" -> 3); tensors without a layer number are
 *               then packed as balanced does, into the lightest fragment
 *   sequential  contiguous runs of tensors in arena order, cut near k * total / P
 * With split_rows, a tensor larger than ceil(total / P) floats is cut by whole rows
 * (dim 0) into near-equal pieces that are placed like tensors (strided splits only
 * tensors without a layer number).
 *
 * Two 64-bit FNV-1a hashes with a documented byte stream (docs/fragments.md) let the
 * wire refuse a peer with a different model: the model hash (names and shapes) and
 * the plan hash (model, offsets and the assignment of every view to a fragment).
 *
 *     dlc_plan_params pp = dlc_plan_default_params();
 *     pp.kind = DLC_PLAN_STRIDED; pp.fragments = 4;
 *     dlc_plan *plan = dlc_plan_new(params, &pp);
 *     if (!plan) fprintf(stderr, "%s\n", dlc_last_error());
 *     for (int f = 0; f < dlc_plan_count(plan); f++) {
 *         int n;
 *         const dlc_frag_view *v = dlc_plan_views(plan, f, &n);
 *         for (int j = 0; j < n; j++)   // dlc_params_data(params) + v[j].offset, v[j].numel
 *             ...;
 *     }
 *     uint64_t h = dlc_plan_hash(plan);   // compare with the peer's
 *     dlc_plan_free(plan);
 */
#ifndef DILOCO_FRAG_H
#define DILOCO_FRAG_H

#include <stdint.h>
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlc_plan_kind {
    DLC_PLAN_BALANCED,
    DLC_PLAN_STRIDED,
    DLC_PLAN_SEQUENTIAL,
    DLC_PLAN_KIND_COUNT
} dlc_plan_kind;

/* "balanced", "strided", "sequential"; NULL when out of range. */
DLC_API const char *dlc_plan_kind_name(dlc_plan_kind kind);
/* Parses a plan name into *out.  DLC_ERR_ARG for NULL or an unknown name:
 * "plan = \"blocks\": unknown plan; expected balanced, strided or sequential". */
DLC_API dlc_status dlc_plan_kind_parse(const char *name, dlc_plan_kind *out);

typedef struct dlc_plan_params {
    dlc_plan_kind kind; /* default DLC_PLAN_BALANCED */
    int fragments;      /* P >= 1; default 1.  Without split_rows, P <= number of tensors */
    int split_rows;     /* 0/1, default 0: cut tensors larger than ceil(total / P) by rows */
} dlc_plan_params;

DLC_API dlc_plan_params dlc_plan_default_params(void);

/* One view: `numel` floats from `offset` (floats from the arena start), rows
 * [row0, row0 + rows) of tensor `tensor`.  A whole tensor has row0 = 0 and rows =
 * shape[0] (1 for a scalar). */
typedef struct dlc_frag_view {
    const char *name; /* the tensor's name, owned by the plan */
    int tensor;       /* index in the dlc_params */
    int64_t offset;   /* in floats; same in the grad and optimizer state arenas */
    int64_t numel;    /* floats */
    int64_t row0, rows;
} dlc_frag_view;

typedef struct dlc_plan dlc_plan; /* opaque */

/* Makes the plan of `params` (borrowed, read only during the call: the plan copies the
 * names and keeps no reference) with `pp` (borrowed; NULL = defaults).  Returns a new
 * plan, freed with dlc_plan_free, or NULL with DLC_ERR_ARG when params is NULL, the
 * kind is unknown, fragments < 1, fragments exceeds the number of tensors (or of row
 * pieces with split_rows), or a strided plan leaves a fragment empty. */
DLC_API dlc_plan *dlc_plan_new(const dlc_params *params, const dlc_plan_params *pp);
/* Frees the plan and its views and names.  NULL ok. */
DLC_API void dlc_plan_free(dlc_plan *plan);

/* The parameters the plan was made with. */
DLC_API dlc_plan_params dlc_plan_get_params(const dlc_plan *plan);
/* Number of fragments P (0 for NULL). */
DLC_API int dlc_plan_count(const dlc_plan *plan);
/* Number of tensors of the model the plan was made for (0 for NULL). */
DLC_API int dlc_plan_tensors(const dlc_plan *plan);
/* The views of fragment f in arena order (owned by the plan, valid until
 * dlc_plan_free); *count (may be NULL) gets their number.  NULL and *count = 0 with
 * DLC_ERR_RANGE for f outside [0, P). */
DLC_API const dlc_frag_view *dlc_plan_views(const dlc_plan *plan, int f, int *count);
/* Floats / bytes (f32) of fragment f; -1 for f outside [0, P). */
DLC_API int64_t dlc_plan_numel(const dlc_plan *plan, int f);
DLC_API int64_t dlc_plan_bytes(const dlc_plan *plan, int f);
/* The fragment holding tensor i whole, -1 if i is out of range or the tensor is split
 * across fragments. */
DLC_API int dlc_plan_fragment_of(const dlc_plan *plan, int i);

/* Deals the plan's fragments to `shards` syncer shards (docs/shards.md) so that each
 * carries about the same bytes: largest fragment first, each to the shard carrying the
 * fewest bytes so far (ties: the lowest index; equal fragments go round-robin).  owner[P]
 * gets each fragment's shard; every shard owns at least one.  Deterministic: every
 * learner and shard of a run deals the same.  DLC_ERR_ARG for shards outside 1..P. */
DLC_API dlc_status dlc_plan_deal(const dlc_plan *plan, int shards, int *owner);

/* Model hash: names and shapes only, so it equals dlc_frag_model_hash(params). */
DLC_API uint64_t dlc_plan_model_hash(const dlc_plan *plan);
/* Tensor i's name and shape hashed on their own (0 out of range: a HELLO lists them, so
 * that a syncer names the first tensor that differs), and described, "'name' [d0, d1]"
 * (owned by the plan; NULL out of range). */
DLC_API uint32_t dlc_plan_tensor_hash(const dlc_plan *plan, int i);
DLC_API const char *dlc_plan_tensor_desc(const dlc_plan *plan, int i);
/* Plan hash: model, arena offsets and size, and every fragment's views. */
DLC_API uint64_t dlc_plan_hash(const dlc_plan *plan);
/* Model hash of `params` (borrowed) without making a plan; 0 with DLC_ERR_ARG for NULL. */
DLC_API uint64_t dlc_frag_model_hash(const dlc_params *params);

#ifdef __cplusplus
}
#endif
#endif
