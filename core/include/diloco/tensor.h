/*
 * tensor.h - f32 tensors of up to 4 dimensions with reference-counted storage,
 * and the counter-based random generator.
 *
 * A tensor is a contiguous row-major window (offset + shape) into a refcounted
 * storage.  Views share the storage and keep it alive.  Tensors themselves are
 * refcounted: every function that returns a dlc_tensor* returns a NEW reference
 * the caller must dlc_tensor_release(); functions taking dlc_tensor* arguments
 * borrow them.
 *
 *     int64_t shape[2] = {2, 3};
 *     dlc_rng g; dlc_rng_init(&g, 42);
 *     dlc_tensor *w = dlc_tensor_randn(2, shape, &g, 0.0f, 0.02f);
 *     dlc_tensor *r = dlc_tensor_view(w, 3, 1, (int64_t[]){3});   // row 1, shares data
 *     dlc_tensor_release(r);
 *     dlc_tensor_release(w);
 *
 * Threads: a tensor never crosses threads.  Refcounts (of tensors and storages) are
 * plain ints, not atomics, so a tensor and every view of it belong to the thread that
 * made them; hand bytes to another thread (the I/O thread's mailbox does), never a
 * tensor.  The compute kernels' own OpenMP threads only read and write the data of
 * tensors owned by the calling thread, inside one call.
 *
 * Index tensors (token ids, class labels, gather/topk indices) are ordinary f32
 * tensors holding 0-based integer values; ops check that every value is an
 * integer in range.
 */
#ifndef DILOCO_TENSOR_H
#define DILOCO_TENSOR_H

#include <stdint.h>
#include <stddef.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DLC_MAX_DIMS 4

typedef struct dlc_storage dlc_storage; /* opaque, refcounted float buffer */
struct dlc_node;                         /* autograd node, see autograd.h */

/* The fields are public so that kernels and hosts can read a tensor without a call per
 * element.  What a host may do with each is stated at the field: "read" fields are API
 * (stable, read them freely, never assign them: use the functions named); "internal:"
 * fields are libdiloco's own bookkeeping, not API, and may change meaning in any release:
 * a host neither reads nor writes them. */
typedef struct dlc_tensor {
    float *data;                   /* read; the elements may be written (contiguous, row-major) */
    int64_t shape[DLC_MAX_DIMS];   /* read: shape[i] >= 0; unused dims are 1 */
    int64_t numel;                 /* read: product of shape[0..ndim) (1 for ndim 0) */
    int ndim;                      /* read: 0..DLC_MAX_DIMS; 0 is a scalar */
    int refs;                      /* read: reference count (not thread-safe); change it only
                                      with dlc_tensor_retain / dlc_tensor_release */
    unsigned requires_grad : 1;    /* read: leaf asks for .grad, or result of a tracked op;
                                      set with dlc_tensor_set_requires_grad (autograd.h) */
    unsigned retain_grad : 1;      /* read and write: keep .grad of a non-leaf after backward */
    unsigned graph_freed : 1;      /* internal: its node was freed by a backward pass */
    unsigned mark;                 /* internal: scratch for graph traversals */
    struct dlc_tensor *grad;       /* read: borrowed; NULL until a backward reaches it (owned
                                      by the tensor; dlc_tensor_zero_grad clears it) */
    struct dlc_node *node;         /* read: NULL for a leaf, else the op that produced it (its
                                      contents are internal: compare with NULL only) */
    struct dlc_tensor *release_next; /* internal: queue of tensors being freed */
    dlc_storage *storage;          /* read: identity of the shared storage (views of one
                                      tensor compare equal); opaque, owned by the tensor */
} dlc_tensor;

/* ---- creation (all return a new reference, NULL on failure) ---- */

/* Uninitialised contents. */
DLC_API dlc_tensor *dlc_tensor_new(int ndim, const int64_t *shape);
DLC_API dlc_tensor *dlc_tensor_zeros(int ndim, const int64_t *shape);
DLC_API dlc_tensor *dlc_tensor_full(int ndim, const int64_t *shape, float value);
/* 1-D tensor start, start+step, ... < stop (> stop for negative step). */
DLC_API dlc_tensor *dlc_tensor_arange(double start, double stop, double step);
/* Copies numel floats from src. */
DLC_API dlc_tensor *dlc_tensor_from_data(int ndim, const int64_t *shape, const float *src);
/* A tensor over memory the caller owns (e.g. a parameter arena).  `release(ctx)` is
 * called when the last view of it goes away; it may be NULL. */
DLC_API dlc_tensor *dlc_tensor_wrap(int ndim, const int64_t *shape, float *data,
                                    void (*release)(void *ctx), void *ctx);

/* A view sharing t's storage: `ndim`/`shape` starting `offset` elements after t->data.
 * Not recorded by autograd.  Fails if the window does not fit inside t. */
DLC_API dlc_tensor *dlc_tensor_view(dlc_tensor *t, int64_t offset, int ndim,
                                    const int64_t *shape);
/* Same data and shape, no autograd history (shares storage). */
DLC_API dlc_tensor *dlc_tensor_detach(dlc_tensor *t);
/* Deep copy, no autograd history. */
DLC_API dlc_tensor *dlc_tensor_clone(const dlc_tensor *t);

DLC_API dlc_tensor *dlc_tensor_retain(dlc_tensor *t);
/* Drops one reference; frees tensor, grad, node and (last) storage at zero.  NULL ok. */
DLC_API void dlc_tensor_release(dlc_tensor *t);

/* ---- in place (not recorded by autograd) ---- */

DLC_API void dlc_tensor_fill(dlc_tensor *t, float value);
/* dst <- src; shapes must have equal numel. */
DLC_API dlc_status dlc_tensor_copy(dlc_tensor *dst, const dlc_tensor *src);

/* ---- inspection ---- */

DLC_API int dlc_tensor_same_shape(const dlc_tensor *a, const dlc_tensor *b);
/* Writes "[4,3]" into buf (always NUL-terminated); returns buf. */
DLC_API char *dlc_shape_str(const dlc_tensor *t, char *buf, size_t size);
/* Number of elements of a shape, or -1 if ndim/shape is invalid or overflows. */
DLC_API int64_t dlc_shape_numel(int ndim, const int64_t *shape);
/* Bytes of tensor storage currently allocated by this process (for GC hints). */
DLC_API size_t dlc_tensor_bytes_live(void);
/* Freed storages are cached per thread by size class: exact below 4096 floats, above
 * rounded up to an eighth of a power of two (training repeats its shapes, so after the
 * first step nothing reaches malloc; sizes that vary a little, like an MoE expert's
 * token count, still hit the cache).  This hands the calling thread's cache
 * back to malloc now; a thread's cache is also released when the thread exits. */
DLC_API void dlc_tensor_cache_clear(void);
/* Bytes the calling thread's cache holds (freed storages kept for reuse). */
DLC_API size_t dlc_tensor_bytes_cached(void);

/* ---- random numbers ----
 * Philox-4x32-10 keyed by the seed, counter advanced per block of 4 outputs: the
 * same seed and the same sequence of calls give bit-identical floats everywhere. */
typedef struct dlc_rng {
    uint64_t seed;
    uint64_t counter;
} dlc_rng;

DLC_API void dlc_rng_init(dlc_rng *g, uint64_t seed);
/* out[i] uniform in [lo, hi). */
DLC_API void dlc_rng_uniform(dlc_rng *g, float *out, int64_t n, float lo, float hi);
/* out[i] ~ N(mean, std^2), Box-Muller. */
DLC_API void dlc_rng_normal(dlc_rng *g, float *out, int64_t n, float mean, float std);
/* n raw 32-bit outputs. */
DLC_API void dlc_rng_u32(dlc_rng *g, uint32_t *out, int64_t n);

DLC_API dlc_tensor *dlc_tensor_randn(int ndim, const int64_t *shape, dlc_rng *g,
                                     float mean, float std);
DLC_API dlc_tensor *dlc_tensor_rand(int ndim, const int64_t *shape, dlc_rng *g,
                                    float lo, float hi);

#ifdef __cplusplus
}
#endif
#endif
