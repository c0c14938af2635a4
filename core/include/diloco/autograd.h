/*
 * autograd.h - reverse-mode automatic differentiation.
 *
 * Every tracked op result points to a node (op, retained inputs, saved tensors).
 * dlc_backward() sorts the nodes reachable from the root into a tape (topological
 * order) and walks it in reverse, each op's backward ACCUMULATING into its inputs'
 * grads.  Leaves (requires_grad, no node) keep their .grad and accumulate across
 * calls until dlc_tensor_zero_grad().  Non-leaf grads are dropped once used unless
 * retain_grad is set.
 *
 *     dlc_tensor_set_requires_grad(w, 1);
 *     dlc_tensor *loss = dlc_mean_all(dlc_mul(w, w));   (release intermediates!)
 *     dlc_backward(loss, NULL, 0);                      // w->grad = 2w/numel
 *
 * Grad mode is per thread: with dlc_set_grad_enabled(0) no op records.
 */
#ifndef DILOCO_AUTOGRAD_H
#define DILOCO_AUTOGRAD_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlc_op {
    DLC_OP_NONE,
    DLC_OP_ADD,
    DLC_OP_SUB,
    DLC_OP_MUL,
    DLC_OP_DIV,
    DLC_OP_AFFINE,
    DLC_OP_POW,
    DLC_OP_UNARY,
    DLC_OP_SUM_ALL,
    DLC_OP_SUM,        /* sum or mean along an axis */
    DLC_OP_MAX,
    DLC_OP_MATMUL,
    DLC_OP_SOFTMAX,
    DLC_OP_LOG_SOFTMAX,
    DLC_OP_CROSS_ENTROPY,
    DLC_OP_LAYERNORM,
    DLC_OP_RMSNORM,
    DLC_OP_INDEX_SELECT,
    DLC_OP_INDEX_ADD,
    DLC_OP_GATHER,
    DLC_OP_ATTENTION,
    DLC_OP_RESHAPE,
    DLC_OP_TRANSPOSE,
    DLC_OP_SLICE,
    DLC_OP_CONCAT,
    DLC_OP_DROPOUT,
    DLC_OP_LINEAR,
    DLC_OP_COUNT
} dlc_op;

/* "add", "matmul", ...; NULL when out of range. */
DLC_API const char *dlc_op_name(dlc_op op);

/* Returns the previous setting.  Enabled by default on every thread. */
DLC_API int dlc_set_grad_enabled(int enabled);
DLC_API int dlc_grad_enabled(void);

/* Marks a leaf as wanting a gradient.  Fails (DLC_ERR_STATE) on a non-leaf. */
DLC_API dlc_status dlc_tensor_set_requires_grad(dlc_tensor *t, int on);
/* Zero the leaf's .grad if it has one (keeps the buffer). */
DLC_API void dlc_tensor_zero_grad(dlc_tensor *t);

/* Backpropagates from root.  grad: the gradient of root (same shape), or NULL when
 * root is a one-element tensor (then 1).  Without retain_graph the nodes walked are
 * freed afterwards and a second backward through them fails with DLC_ERR_STATE. */
DLC_API dlc_status dlc_backward(dlc_tensor *root, dlc_tensor *grad, int retain_graph);

/* Op that produced t (DLC_OP_NONE for a leaf). */
DLC_API dlc_op dlc_tensor_op(const dlc_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
