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

#include "diloco/diloco.h"

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
/* Gradient buffer of t (zero-filled on first use), NULL if t needs no gradient or
 * allocation failed (then *err is set to DLC_ERR_NOMEM). */
float *dlcx_grad(dlc_tensor *t, dlc_status *err);

/* Normalise axis (negative from the end) for an ndim tensor; -1 + error if invalid.
 * `fn` names the op in the message. */
int dlcx_axis(const char *fn, int axis, int ndim);
/* Checks idx values are integers in [0, n) (or == allow, e.g. an ignore index);
 * returns DLC_OK or a DLC_ERR_RANGE naming fn, the position and the value. */
dlc_status dlcx_check_index(const char *fn, const dlc_tensor *idx, int64_t n, int64_t allow);
/* Uninitialised tensor with a given shape; like dlc_tensor_new. */
#define dlcx_new dlc_tensor_new

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

#endif
