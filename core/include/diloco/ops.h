/*
 * ops.h - tensor operations.  Every op returns a NEW tensor (new reference, caller
 * releases) or NULL with the reason in dlc_last_error().  Inputs are borrowed.
 *
 * When autograd is enabled (the default, see autograd.h) and any input has
 * requires_grad set, the result records the op so dlc_backward() can differentiate
 * it.  Ops marked [no grad] never record.
 *
 * Axes are 0-based here; negative axes count from the end (-1 = last).
 * Index tensors hold 0-based integer values as f32.
 *
 *     dlc_tensor *h = dlc_matmul(x, w, 0, 1);          // x [N,C] . w[O,C]^T -> [N,O]
 *     dlc_tensor *y = dlc_unary(DLC_UNARY_GELU, h);
 *     dlc_tensor *l = dlc_cross_entropy(y, targets, -1);
 */
#ifndef DILOCO_OPS_H
#define DILOCO_OPS_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise, with numpy broadcasting (dims aligned from the right, size-1
 * dims and missing leading dims stretch) ---- */
DLC_API dlc_tensor *dlc_add(dlc_tensor *a, dlc_tensor *b);
DLC_API dlc_tensor *dlc_sub(dlc_tensor *a, dlc_tensor *b);
DLC_API dlc_tensor *dlc_mul(dlc_tensor *a, dlc_tensor *b);
DLC_API dlc_tensor *dlc_div(dlc_tensor *a, dlc_tensor *b);
/* x [..., N] + b [N]: add with a check that b is the bias of the last dim. */
DLC_API dlc_tensor *dlc_bias_add(dlc_tensor *x, dlc_tensor *b);
/* alpha * x + beta. */
DLC_API dlc_tensor *dlc_affine(dlc_tensor *x, float alpha, float beta);
DLC_API dlc_tensor *dlc_scale(dlc_tensor *x, float alpha);
/* x ^ p, elementwise. */
DLC_API dlc_tensor *dlc_pow(dlc_tensor *x, float p);

typedef enum dlc_unary_op {
    DLC_UNARY_NEG,
    DLC_UNARY_EXP,
    DLC_UNARY_LOG,
    DLC_UNARY_SQRT,
    DLC_UNARY_ABS,
    DLC_UNARY_RELU,
    DLC_UNARY_GELU,    /* tanh approximation, as GPT-2 */
    DLC_UNARY_SILU,
    DLC_UNARY_TANH,
    DLC_UNARY_SIGMOID,
    DLC_UNARY_SIN,
    DLC_UNARY_COS,
    DLC_UNARY_COUNT
} dlc_unary_op;
/* "neg", "exp", ... ; NULL for an out-of-range op. */
DLC_API const char *dlc_unary_name(dlc_unary_op op);
DLC_API dlc_tensor *dlc_unary(dlc_unary_op op, dlc_tensor *x);

/* ---- reductions ---- */
DLC_API dlc_tensor *dlc_sum_all(dlc_tensor *x);   /* -> scalar (ndim 0) */
DLC_API dlc_tensor *dlc_mean_all(dlc_tensor *x);  /* -> scalar */
DLC_API dlc_tensor *dlc_sum(dlc_tensor *x, int axis, int keepdim);
DLC_API dlc_tensor *dlc_mean(dlc_tensor *x, int axis, int keepdim);
/* Maximum along axis; the gradient flows to the first maximal element. */
DLC_API dlc_tensor *dlc_max(dlc_tensor *x, int axis, int keepdim);
/* [no grad] index (as float) of the first maximum along axis. */
DLC_API dlc_tensor *dlc_argmax(dlc_tensor *x, int axis, int keepdim);

/* ---- linear algebra ----
 * a [..., M, K] (stored [..., K, M] if ta), b [..., K, N] (stored [..., N, K] if tb)
 * -> [..., M, N].  Batch dims: equal, or one side has none (2-D), in which case it is
 * shared by every batch entry.  2-D b with untransposed a runs as ONE sgemm over
 * all batch rows. */
DLC_API dlc_tensor *dlc_matmul(dlc_tensor *a, dlc_tensor *b, int ta, int tb);

/* x [..., in] . w [out, in]^T + b [out] -> [..., out] (PyTorch's nn.Linear layout).
 * The bias is written into the output first and the sgemm accumulates onto it, so
 * the layer is one pass over its output.  b may be NULL. */
DLC_API dlc_tensor *dlc_linear(dlc_tensor *x, dlc_tensor *w, dlc_tensor *b);

/* ---- compute backend and threads ----
 * Every matrix product runs on one sgemm with two backends: "onednn" (oneDNN's kernels,
 * chosen at run time for the CPU's widest vector ISA; the default when libdiloco was
 * built with oneDNN) and "openblas".  DILOCO_GEMM=openblas|onednn in the environment
 * picks one at start-up (the library ignores other values; diloco-lua refuses them).  dlc_set_gemm_backend fails (DLC_ERR_ARG) on any other name,
 * or on "onednn" in a build without it.  Process-wide; not to be switched while another
 * thread is inside a matrix product. */
DLC_API const char *dlc_gemm_backend(void);
DLC_API dlc_status dlc_set_gemm_backend(const char *name);
/* Threads of the compute kernels, both backends (1..1024).  Starts as OpenBLAS's count:
 * OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else all cores. */
DLC_API dlc_status dlc_set_num_threads(int n);
DLC_API int dlc_num_threads(void);

/* ---- normalisation and losses (over the last dim) ---- */
DLC_API dlc_tensor *dlc_softmax(dlc_tensor *x);
DLC_API dlc_tensor *dlc_log_softmax(dlc_tensor *x);
/* logits [N, V], targets [N] (class ids as floats); rows whose target equals
 * ignore_index are skipped.  Returns the mean loss over the other rows (scalar). */
DLC_API dlc_tensor *dlc_cross_entropy(dlc_tensor *logits, dlc_tensor *targets,
                                      int ignore_index);
/* x [..., C]; w, b [C] or NULL (then 1 and 0). */
DLC_API dlc_tensor *dlc_layernorm(dlc_tensor *x, dlc_tensor *w, dlc_tensor *b, float eps);
DLC_API dlc_tensor *dlc_rmsnorm(dlc_tensor *x, dlc_tensor *w, float eps);

/* ---- indexing ---- */
/* Rows of x [N, ...] picked by idx of any shape [I...] -> [I..., ...].
 * With x an embedding table [V, C] and idx token ids this is the embedding lookup. */
DLC_API dlc_tensor *dlc_index_select(dlc_tensor *x, dlc_tensor *idx);
DLC_API dlc_tensor *dlc_embedding(dlc_tensor *weight, dlc_tensor *idx);
/* base [N, ...] with rows of src [M, ...] added at rows idx [M]; repeated indices
 * accumulate.  The scatter half of mixture-of-experts routing. */
DLC_API dlc_tensor *dlc_index_add(dlc_tensor *base, dlc_tensor *idx, dlc_tensor *src);
/* out[..., j] = x[..., idx[..., j]] along the last dim; idx [..., k]. */
DLC_API dlc_tensor *dlc_gather(dlc_tensor *x, dlc_tensor *idx);
/* The k largest entries along the last dim, in descending order (ties: lower index
 * first).  *values is differentiable (a gather of x); *indices is not.  Both are new
 * references; on failure both are NULL. */
DLC_API dlc_status dlc_topk(dlc_tensor *x, int k, dlc_tensor **values, dlc_tensor **indices);

/* ---- attention ----
 * Multi-head self-attention as one fused op.  qkv [B, T, 3C] holds q, k, v side by
 * side (as produced by one fused projection), C = heads * head_dim.
 * Returns [B, T, C]: softmax(q k^T / sqrt(head_dim) [+ causal mask]) v per head, heads
 * concatenated.  causal != 0: position t attends to positions <= t (GPT); causal == 0:
 * every position attends to all T (ViT, encoders). */
DLC_API dlc_tensor *dlc_attention(dlc_tensor *qkv, int heads, int causal);

/* ---- shape ---- */
/* Same data, new shape (one entry may be -1); shares storage. */
DLC_API dlc_tensor *dlc_reshape(dlc_tensor *x, int ndim, const int64_t *shape);
/* Swap two axes (copies into a contiguous result). */
DLC_API dlc_tensor *dlc_transpose(dlc_tensor *x, int axis0, int axis1);
/* x restricted to [start, start + len) along axis (copies; shares storage on axis 0). */
DLC_API dlc_tensor *dlc_slice(dlc_tensor *x, int axis, int64_t start, int64_t len);
/* Concatenate n tensors along axis; all other dims must agree. */
DLC_API dlc_tensor *dlc_concat(int n, dlc_tensor *const *xs, int axis);

/* ---- regularisation ---- */
/* Zeroes each element with probability p and scales the rest by 1/(1-p); the mask
 * comes from g.  p = 0 returns x itself (new reference). */
DLC_API dlc_tensor *dlc_dropout(dlc_tensor *x, float p, dlc_rng *g);

#ifdef __cplusplus
}
#endif
#endif
