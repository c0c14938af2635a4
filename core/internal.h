/*
 * internal.h - shared between libdiloco's .c files; not installed, not public API.
 *
 * Autograd contract for op implementations:
 *   - the forward computes `out`, then, if dlcx_should_record(), calls dlcx_record()
 *     which attaches a node retaining the inputs; saved tensors go in node->saved[]
 *     (retained by the node) and scalars in node->f[] / node->i[].
 *   - the backward gets the node, the output tensor (alive, its data valid) and the
 *     output gradient, and ACCUMULATES into each input's gradient buffer obtained with
 *     dlcx_grad(input) (NULL when that input needs no gradient).
 */
#ifndef DILOCO_INTERNAL_H
#define DILOCO_INTERNAL_H

#include <math.h>

#include "diloco/autograd.h"
#include "diloco/status.h"
#include "diloco/tensor.h"

#define DLC_NODE_MAX_IN 3
#define DLC_NODE_MAX_SAVED 3

typedef struct dlc_node {
    dlc_op op;
    int n_in;
    dlc_tensor **in;                      /* in_small, or heap for concat */
    dlc_tensor *in_small[DLC_NODE_MAX_IN];
    dlc_tensor *saved[DLC_NODE_MAX_SAVED];
    double f[4];
    int64_t i[4];
} dlc_node;

/* True when grad mode is on and any of the n inputs (NULLs skipped) requires grad. */
int dlcx_should_record(int n, dlc_tensor *const *in);
/* Attach a node for `op` to out (retains the n inputs, NULLs allowed); sets
 * out->requires_grad.  Returns the node, or NULL on allocation failure (out is left
 * untracked and an error is recorded). */
dlc_node *dlcx_record(dlc_tensor *out, dlc_op op, int n, dlc_tensor *const *in);
void dlcx_node_free(dlc_node *n);
/* dlcx_record, then the node keeps s0 and s1 (new references, NULL allowed) as
 * saved[0] and saved[1].  On failure releases out, s0 and s1 and returns NULL. */
dlc_node *dlcx_attach(dlc_tensor *out, dlc_op op, int n, dlc_tensor *const *in, dlc_tensor *s0,
                      dlc_tensor *s1);
/* dlcx_record when dlcx_should_record says so.  Returns out, or NULL (out released)
 * when recording failed; *node (optional) is the new node or NULL if none. */
dlc_tensor *dlcx_track(dlc_tensor *out, dlc_op op, int n, dlc_tensor *const *in, dlc_node **node);
/* Gradient buffer of t (zero-filled on first use), NULL if t needs no gradient or
 * allocation failed (then *err is set to DLC_ERR_NOMEM). */
float *dlcx_grad(dlc_tensor *t, dlc_status *err);

/* Re-points t into base's storage: t->data = base->data + offset, t's shape kept, t's
 * old storage released (views made earlier keep it alive).  DLC_ERR_RANGE if t's numel
 * elements at `offset` do not fit inside base.  Used by the parameter arena (params.c). */
dlc_status dlcx_tensor_rebind(dlc_tensor *t, dlc_tensor *base, int64_t offset);

/* Normalise axis (negative from the end) for an ndim tensor; -1 + error if invalid.
 * `fn` names the op in the message. */
int dlcx_axis(const char *fn, int axis, int ndim);
/* Checks idx values are integers in [0, n) (or == allow, e.g. an ignore index);
 * returns DLC_OK or a DLC_ERR_RANGE naming fn, the position and the value. */
dlc_status dlcx_check_index(const char *fn, const dlc_tensor *idx, int64_t n, int64_t allow);
/* Uninitialised tensor with a given shape; like dlc_tensor_new. */
#define dlcx_new dlc_tensor_new

/* Hot kernels are compiled three times, baseline, AVX2 and x86-64-v4 (AVX-512), and
 * the loader picks one per machine (GCC target_clones, glibc ifunc), so a portable
 * build still runs 8- or 16-wide where it can.  The clones may round differently:
 * FMA contraction is on (-ffp-contract=fast) and DLC_SIMD_REDUCE lets float sums be
 * split across vector lanes, so the order of additions depends on the vector width. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define DLC_HOT __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define DLC_HOT
#endif

/* Before a loop whose only cross-iteration dependence is a reduction: lets the compiler
 * vectorise it (OpenMP SIMD, -fopenmp-simd; no OpenMP runtime involved). */
#define DLC_PRAGMA(x) _Pragma(#x)
#define DLC_SIMD_REDUCE(...) DLC_PRAGMA(omp simd reduction(__VA_ARGS__))

/* exp(x) in plain f32 arithmetic so loops over it vectorise (libm's expf does not
 * at -O2/-O3 without -ffast-math): Cody-Waite range reduction and the Cephes degree-6
 * polynomial, within 2 ulp of expf; the power of two is applied in two halves so
 * overflow gives inf, underflow is gradual down to 0, exp(-inf) = 0 and NaN stays NaN. */
static inline float dlcx_expf(float x) {
    float xin = x;
    x = x == x ? x : 0.0f;
    x = x > 89.0f ? 89.0f : x;
    x = x < -104.0f ? -104.0f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln 2) */
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float q = 1.9875691500e-4f;
    q = q * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    q = q * r * r + r + 1.0f;
    int32_t ni = (int32_t)n, h = ni / 2;
    union { int32_t i; float f; } s1 = {(h + 127) << 23}, s2 = {(ni - h + 127) << 23};
    float res = q * s1.f * s2.f;
    return xin == xin ? res : xin;
}

/* tanh from dlcx_expf: absolute error ~1e-7 (relative error grows near 0, so the
 * tanh op itself uses libm; GELU only needs the absolute accuracy). */
static inline float dlcx_tanhf_abs(float x) {
    return 1.0f - 2.0f / (dlcx_expf(2.0f * x) + 1.0f);
}

/* The max of x[0..n) (-inf for n = 0): the shift of a softmax row.  Inline, so each
 * clone of a hot kernel vectorises it at its own width. */
static inline float dlcx_row_max(const float *x, int64_t n) {
    float m = -INFINITY;
    DLC_SIMD_REDUCE(max : m)
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* y = exp(x - m) over n floats (y may be x), returning their sum: a softmax row before
 * its normalisation.  Inline as dlcx_row_max. */
static inline float dlcx_exp_sum(const float *x, float *y, int64_t n, float m) {
    float sum = 0.0f;
    DLC_SIMD_REDUCE(+ : sum)
    for (int64_t j = 0; j < n; j++) {
        y[j] = dlcx_expf(x[j] - m);
        sum += y[j];
    }
    return sum;
}

/* ---- the compute threads for the engine's own kernels (parallel.c) ----
 * A kernel splits an index space [0, n) (rows, heads, floats) into `parts` contiguous
 * ranges, run at once on the OpenMP team, part p on [lo, hi).  Ranges depend only on
 * n and parts, so a row-wise kernel gives the same bits at any thread count; a kernel
 * that sums across rows keeps per-chunk partial sums over fixed row ranges and adds
 * them in order (see layernorm's backward).  Range functions must not allocate tensors
 * (the storage cache is per thread) or report errors with dlc_error (the message is
 * per thread): they leave a status in their context for the caller. */
#define DLCX_PAR_GRAIN 16384 /* floats of memory traffic per thread, at least */
typedef void (*dlcx_range_fn)(void *ctx, int64_t lo, int64_t hi, int part);
/* 1 when kernels can split: built with OpenMP and the gemm backend is oneDNN (whose
 * OpenMP team they share; OpenBLAS's own thread pool would fight that team). */
int dlcx_par_available(void);
/* Parts to split n items of `work` floats of traffic into: 1 (serial) for small work,
 * one thread, inside a parallel region, or !dlcx_par_available(); else up to
 * dlc_num_threads(), at most n. */
int dlcx_par_parts(int64_t n, int64_t work);
/* Runs fn over [0, n) in `parts` ranges (parts from dlcx_par_parts; 1 = this thread). */
void dlcx_par_run(int parts, int64_t n, dlcx_range_fn fn, void *ctx);
/* dlcx_par_run(dlcx_par_parts(n, work), n, fn, ctx). */
void dlcx_parallel_for(int64_t n, int64_t work, dlcx_range_fn fn, void *ctx);
/* memset(dst, 0, n floats), split when large (fresh gradient buffers). */
void dlcx_par_zero(float *dst, int64_t n);
/* dst[i] += src[i] for n floats (dst and src distinct), split when large. */
void dlcx_par_acc(float *dst, const float *src, int64_t n);
/* Each of `rows` rows of n floats at dst := row (or zeros when row is NULL): a bias
 * written before an accumulating product. */
void dlcx_par_fill_rows(float *dst, const float *row, int64_t rows, int64_t n);
/* dst[j] += sum over r of src[r n + j] (a bias gradient), split by columns so every
 * column adds its rows in order: the same bits at any thread count. */
void dlcx_par_acc_col_sums(float *dst, const float *src, int64_t rows, int64_t n);
/* For tests: the grain (floats per thread) in place of DLCX_PAR_GRAIN or the
 * environment's DILOCO_PAR_GRAIN (< 1 restores the default); and the number of
 * dispatches so far that used more than one part. */
void dlcx_set_par_grain(int64_t grain);
int64_t dlcx_par_regions(void);

/* ---- backward functions, one per op family (ops.c, nnops.c) ---- */
typedef dlc_status (*dlcx_backward_fn)(dlc_node *n, dlc_tensor *out, const float *gout);

dlc_status dlcx_binary_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_affine_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_pow_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_unary_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_sum_all_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_sum_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_max_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_matmul_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_linear_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_reshape_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_transpose_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_slice_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_concat_backward(dlc_node *n, dlc_tensor *out, const float *g);

dlc_status dlcx_softmax_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_log_softmax_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_cross_entropy_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_layernorm_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_rmsnorm_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_index_select_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_index_add_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_gather_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_attention_backward(dlc_node *n, dlc_tensor *out, const float *g);
dlc_status dlcx_dropout_backward(dlc_node *n, dlc_tensor *out, const float *g);

/* gemm.c: row-major C = alpha op(A) op(B) + beta C on the selected backend (C is not
 * read when beta = 0).  Callers check that sizes fit the tensors; no-op if M or N is 0;
 * K = 0 gives beta C.  Fails only if oneDNN cannot allocate its scratch (message set;
 * C may then be partly written). */
dlc_status dlcx_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* For op implementations: a shape as text into a local buffer, and "record the error and
 * return NULL" from a function returning a tensor. */
#define SHP(t, buf) dlc_shape_str((t), (buf), sizeof(buf))
#define FAIL(st, ...)                                                                  \
    do {                                                                               \
        dlc_error((st), __VA_ARGS__);                                                  \
        return NULL;                                                                   \
    } while (0)

#endif
