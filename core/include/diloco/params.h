/*
 * params.h - the parameter arena: every parameter of a model in ONE f32 buffer, and
 * every gradient in a second buffer of identical layout (torch7's getParameters,
 * llm.c's params_memory).
 *
 * dlc_params_new() takes the model's existing leaf tensors, copies their values into
 * a fresh arena and RE-POINTS each tensor into it: the dlc_tensor objects stay the
 * same (so every reference to them, a Lua Tensor for instance, keeps working), only
 * their storage becomes the arena's and their data pointer `arena + offset`.  Each
 * tensor's .grad becomes a view into the grad arena at the same offset, so a backward
 * pass accumulates straight into the grad arena.  Whole-model operations are then
 * single loops: zero_grad is one memset, the grad norm one pass, an optimizer step
 * one loop (optim.h), a checkpoint one write.
 *
 * Only the tensors passed in are re-pointed.  Other views of their old storage (a row
 * view taken before packing, or the tensor a packed view was taken from) keep the old
 * memory and no longer share data with the packed tensor: pack whole parameters, and
 * take views of them after packing.
 *
 *     dlc_tensor *w = ..., *b = ...;                    // leaves of the model
 *     dlc_params *p = dlc_params_new(2, (const char *[]){"fc.w", "fc.b"},
 *                                    (dlc_tensor *[]){w, b});
 *     if (!p) fprintf(stderr, "%s\n", dlc_last_error());
 *     // w->data == dlc_params_data(p) + dlc_params_offset(p, 0)
 *     dlc_params_zero_grad(p);
 *     ... forward, dlc_backward(loss, NULL, 0) ...     // grads land in dlc_params_grad(p)
 *     double norm = dlc_params_clip_grad_norm(p, 1.0);
 *     ... dlc_optim_step(opt, lr) ...
 *     dlc_params_free(p);                               // w and b keep working
 *
 * Layout.  Tensors are laid out in the order given; each starts at an offset that is a
 * multiple of DLC_PARAMS_ALIGN floats (64 bytes: the arena itself is 64-byte aligned),
 * and the arena length (dlc_params_size) is a multiple of DLC_PARAMS_ALIGN too.  The
 * padding between tensors is zero in both arenas and stays zero (every update keeps a
 * zero parameter with a zero gradient at zero); do not write into it.
 *
 * Fragments.  The later sync machinery (fragments of the model exchanged between
 * learners and the syncer) describes a fragment as a set of named views of this
 * arena: (name, offset, numel) triples from dlc_params_find/offset, never copies of
 * tensors.  Optimizer state arenas (optim.h) share the layout, so "the AdamW moments
 * of fragment p" are the same offsets in the state arenas.
 *
 * Lifetime.  The arenas are refcounted storages: every re-pointed tensor (and every
 * view of one) holds a reference, so dlc_params_free() never frees memory a tensor
 * still uses; the memory goes when the last tensor goes.  While a dlc_params is alive
 * its tensors cannot be packed into another one; after dlc_params_free they can
 * (they are copied out into the new arena).
 *
 * Rules for packed tensors: do not replace or release a packed tensor's .grad (the
 * autograd keeps a leaf's grad buffer, so normal use never does); dlc_optim_step
 * checks this and fails naming the tensor.  A view of a tensor made BEFORE packing
 * keeps the tensor's old memory alive and no longer follows it (it sees the values at
 * packing time, and writes through it do not reach the parameter); views made after
 * packing share the arena.  Tensors that are views of one another (overlapping
 * memory) cannot be packed together: each would get its own copy.
 */
#ifndef DILOCO_PARAMS_H
#define DILOCO_PARAMS_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every tensor's offset, and the arena length, are multiples of this many floats. */
#define DLC_PARAMS_ALIGN 16

typedef struct dlc_params dlc_params; /* opaque */

/* Packs n >= 1 tensors.  names[i] (copied) must be non-empty and unique; tensors[i]
 * must be distinct leaves (no autograd history) that are not views of one another and
 * not packed in another live dlc_params.  The function borrows the arrays; the
 * dlc_params retains every tensor (the caller keeps its own references).  Each tensor
 * gets requires_grad = 1 and a .grad viewing the grad arena (zero; an old .grad is
 * released).  On failure returns NULL with every tensor left untouched. */
DLC_API dlc_params *dlc_params_new(int n, const char *const *names, dlc_tensor *const *tensors);
/* The same, but the arena does not take the tensors' values: it holds zeros, in memory
 * that costs nothing until written, and the tensors (re-pointed there like
 * dlc_params_new's) read zeros.  For a host whose model lives in its own buffers and
 * needs the arena only as the layout (a learner bound to them,
 * dlc_learner_bind_tensors): it copies and touches nothing. */
DLC_API dlc_params *dlc_params_new_layout(int n, const char *const *names, dlc_tensor *const *tensors);
/* Releases the dlc_params' references (tensors and arenas).  NULL ok.  Tensors that
 * are still alive keep the arena memory alive and keep working. */
DLC_API void dlc_params_free(dlc_params *p);

/* Number of tensors. */
DLC_API int dlc_params_count(const dlc_params *p);
/* Total number of parameter values: the sum of the tensors' numel, padding excluded. */
DLC_API int64_t dlc_params_numel(const dlc_params *p);
/* Arena length in floats, padding included (>= numel, a multiple of DLC_PARAMS_ALIGN).
 * Optimizer state arenas have this length too. */
DLC_API int64_t dlc_params_size(const dlc_params *p);
/* Name of tensor i (owned by p), NULL if i is out of range. */
DLC_API const char *dlc_params_name(const dlc_params *p, int i);
/* Tensor i (borrowed: p holds a reference), NULL if i is out of range. */
DLC_API dlc_tensor *dlc_params_tensor(const dlc_params *p, int i);
/* Index of the tensor called `name`, -1 if there is none. */
DLC_API int dlc_params_find(const dlc_params *p, const char *name);
/* Offset of tensor i in both arenas, in floats; -1 if i is out of range. */
DLC_API int64_t dlc_params_offset(const dlc_params *p, int i);

/* The arenas (dlc_params_size floats each, 64-byte aligned), valid while p is alive. */
DLC_API float *dlc_params_data(const dlc_params *p);
DLC_API float *dlc_params_grad(const dlc_params *p);
/* 1-D tensors [size] viewing the value / grad arena (NEW references: release them).
 * They keep the arena alive after dlc_params_free. NULL on allocation failure. */
DLC_API dlc_tensor *dlc_params_flat(const dlc_params *p);
DLC_API dlc_tensor *dlc_params_flat_grad(const dlc_params *p);

/* Zeroes the whole grad arena: one memset. */
DLC_API void dlc_params_zero_grad(dlc_params *p);
/* Global L2 norm of all gradients, accumulated in double. */
DLC_API double dlc_params_grad_norm(const dlc_params *p);
/* As torch.nn.utils.clip_grad_norm_: with norm = dlc_params_grad_norm(p), scales
 * every gradient by max_norm / (norm + 1e-6) when that factor is < 1.  Returns the
 * norm BEFORE clipping.  A non-finite norm (inf/NaN gradients) is returned with the
 * gradients left unchanged: check it and skip the step.  max_norm must be a finite
 * number > 0; otherwise returns -1 and records a DLC_ERR_ARG. */
DLC_API double dlc_params_clip_grad_norm(dlc_params *p, double max_norm);

/* Checks that every tensor still points into the arenas (data and .grad); on a
 * mismatch returns DLC_ERR_STATE naming the tensor.  `fn` prefixes the message. */
DLC_API dlc_status dlc_params_check(const dlc_params *p, const char *fn);

#ifdef __cplusplus
}
#endif
#endif
