/* autograd.c - nodes, grad mode, and the backward pass (one switch over ops). */
#include <stdlib.h>
#include <string.h>
#include <assert.h>
#include "diloco/autograd.h"
#include "internal.h"

static const char *const op_names[] = {
    "none", "add", "sub", "mul", "div", "affine", "pow", "unary", "sum_all", "sum",
    "max", "matmul", "softmax", "log_softmax", "cross_entropy", "layernorm", "rmsnorm",
    "index_select", "index_add", "gather", "attention", "reshape", "transpose", "slice",
    "concat", "dropout", "linear",
};
static_assert(sizeof op_names / sizeof op_names[0] == DLC_OP_COUNT,
              "op name table out of sync with dlc_op");

const char *dlc_op_name(dlc_op op) {
    return (unsigned)op < DLC_OP_COUNT ? op_names[op] : NULL;
}

static _Thread_local int grad_disabled;

int dlc_set_grad_enabled(int enabled) {
    int prev = !grad_disabled;
    grad_disabled = !enabled;
    return prev;
}

int dlc_grad_enabled(void) { return !grad_disabled; }

dlc_op dlc_tensor_op(const dlc_tensor *t) { return t->node ? t->node->op : DLC_OP_NONE; }

dlc_status dlc_tensor_set_requires_grad(dlc_tensor *t, int on) {
    if (t->node || t->graph_freed)
        return dlc_error(DLC_ERR_STATE,
                         "requires_grad: only leaf tensors can be changed; this one is the result of %s",
                         t->node ? dlc_op_name(t->node->op) : "an op");
    t->requires_grad = on ? 1 : 0;
    return DLC_OK;
}

void dlc_tensor_zero_grad(dlc_tensor *t) {
    if (t->grad) dlc_tensor_fill(t->grad, 0.0f);
}

int dlcx_should_record(int n, dlc_tensor *const *in) {
    if (grad_disabled) return 0;
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->requires_grad) return 1;
    return 0;
}

dlc_node *dlcx_record(dlc_tensor *out, dlc_op op, int n, dlc_tensor *const *in) {
    dlc_node *node = calloc(1, sizeof *node);
    if (!node) goto fail;
    node->op = op;
    node->n_in = n;
    node->in = n <= DLC_NODE_MAX_IN ? node->in_small : calloc((size_t)n, sizeof *node->in);
    if (!node->in) goto fail;
    for (int i = 0; i < n; i++) node->in[i] = dlc_tensor_retain(in[i]);
    out->node = node;
    out->requires_grad = 1;
    return node;
fail:
    free(node);
    dlc_error(DLC_ERR_NOMEM, "out of memory recording %s for autograd", dlc_op_name(op));
    return NULL;
}

/* Attaches the node; on failure releases out and the saved tensors (all NULL-safe). */
dlc_node *dlcx_attach(dlc_tensor *out, dlc_op op, int n, dlc_tensor *const *in,
                        dlc_tensor *s0, dlc_tensor *s1) {
    dlc_node *nd = dlcx_record(out, op, n, in);
    if (!nd) {
        dlc_tensor_release(out);
        dlc_tensor_release(s0);
        dlc_tensor_release(s1);
        return NULL;
    }
    nd->saved[0] = s0;
    nd->saved[1] = s1;
    return nd;
}

/* Attach the autograd node when needed.  Returns out, or NULL (out released) when
 * recording failed.  *node is the new node or NULL when nothing was recorded. */
dlc_tensor *dlcx_track(dlc_tensor *out, dlc_op op, int n, dlc_tensor *const *in,
                         dlc_node **node) {
    if (node) *node = NULL;
    if (!out || !dlcx_should_record(n, in)) return out;
    dlc_node *nd = dlcx_record(out, op, n, in);
    if (!nd) {
        dlc_tensor_release(out);
        return NULL;
    }
    if (node) *node = nd;
    return out;
}

void dlcx_node_free(dlc_node *n) {
    for (int i = 0; i < n->n_in; i++) dlc_tensor_release(n->in[i]);
    for (int i = 0; i < DLC_NODE_MAX_SAVED; i++) dlc_tensor_release(n->saved[i]);
    if (n->in != n->in_small) free(n->in);
    free(n);
}

float *dlcx_grad(dlc_tensor *t, dlc_status *err) {
    if (!t || !t->requires_grad) return NULL;
    if (!t->grad) {
        t->grad = dlc_tensor_zeros(t->ndim, t->shape);
        if (!t->grad) {
            char buf[64];
            *err = dlc_error(DLC_ERR_NOMEM, "backward: out of memory for the gradient of a %s tensor",
                             dlc_shape_str(t, buf, sizeof buf));
            return NULL;
        }
    }
    return t->grad->data;
}

static dlc_status node_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    switch (n->op) {
    case DLC_OP_ADD:
    case DLC_OP_SUB:
    case DLC_OP_MUL:
    case DLC_OP_DIV: return dlcx_binary_backward(n, out, g);
    case DLC_OP_AFFINE: return dlcx_affine_backward(n, out, g);
    case DLC_OP_POW: return dlcx_pow_backward(n, out, g);
    case DLC_OP_UNARY: return dlcx_unary_backward(n, out, g);
    case DLC_OP_SUM_ALL: return dlcx_sum_all_backward(n, out, g);
    case DLC_OP_SUM: return dlcx_sum_backward(n, out, g);
    case DLC_OP_MAX: return dlcx_max_backward(n, out, g);
    case DLC_OP_MATMUL: return dlcx_matmul_backward(n, out, g);
    case DLC_OP_SOFTMAX: return dlcx_softmax_backward(n, out, g);
    case DLC_OP_LOG_SOFTMAX: return dlcx_log_softmax_backward(n, out, g);
    case DLC_OP_CROSS_ENTROPY: return dlcx_cross_entropy_backward(n, out, g);
    case DLC_OP_LAYERNORM: return dlcx_layernorm_backward(n, out, g);
    case DLC_OP_RMSNORM: return dlcx_rmsnorm_backward(n, out, g);
    case DLC_OP_INDEX_SELECT: return dlcx_index_select_backward(n, out, g);
    case DLC_OP_INDEX_ADD: return dlcx_index_add_backward(n, out, g);
    case DLC_OP_GATHER: return dlcx_gather_backward(n, out, g);
    case DLC_OP_ATTENTION: return dlcx_attention_backward(n, out, g);
    case DLC_OP_RESHAPE: return dlcx_reshape_backward(n, out, g);
    case DLC_OP_TRANSPOSE: return dlcx_transpose_backward(n, out, g);
    case DLC_OP_SLICE: return dlcx_slice_backward(n, out, g);
    case DLC_OP_CONCAT: return dlcx_concat_backward(n, out, g);
    case DLC_OP_DROPOUT: return dlcx_dropout_backward(n, out, g);
    case DLC_OP_LINEAR: return dlcx_linear_backward(n, out, g);
    case DLC_OP_NONE:
    case DLC_OP_COUNT: break;
    }
    return dlc_error(DLC_ERR_INTERNAL, "backward: node with invalid op %d", (int)n->op);
}

/* Growable array of tensor pointers for the tape. */
typedef struct tvec {
    dlc_tensor **v;
    size_t n, cap;
} tvec;

static int tvec_push(tvec *a, dlc_tensor *t) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        dlc_tensor **v = realloc(a->v, cap * sizeof *v);
        if (!v) return 0;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = t;
    return 1;
}

static _Thread_local unsigned mark_gen; /* per thread: concurrent backward passes on separate graphs */

/* Post-order DFS (iterative, so deep graphs cannot overflow the C stack): `tape`
 * ends in topological order, inputs before the tensors computed from them. */
static dlc_status build_tape(dlc_tensor *root, tvec *tape) {
    tvec stack = {0}, child = {0}; /* child.v[i] = next input index of stack.v[i] (as ptr) */
    dlc_status st = DLC_OK;
    unsigned visiting = ++mark_gen, done = ++mark_gen;
    if (mark_gen > 0xF0000000u) mark_gen = 0; /* marks are compared for equality only */
    if (!tvec_push(&stack, root) || !tvec_push(&child, NULL)) goto nomem;
    root->mark = visiting;
    while (stack.n) {
        dlc_tensor *t = stack.v[stack.n - 1];
        size_t k = (size_t)child.v[child.n - 1];
        if (t->node && k < (size_t)t->node->n_in) {
            child.v[child.n - 1] = (dlc_tensor *)(k + 1);
            dlc_tensor *in = t->node->in[k];
            if (!in || !in->requires_grad || in->mark == visiting || in->mark == done) continue;
            if (in->graph_freed) {
                st = dlc_error(DLC_ERR_STATE,
                               "backward: the graph was already freed by an earlier backward; "
                               "pass retain_graph to backpropagate through it twice");
                goto out;
            }
            in->mark = visiting;
            if (!tvec_push(&stack, in) || !tvec_push(&child, NULL)) goto nomem;
            continue;
        }
        t->mark = done;
        stack.n--;
        child.n--;
        if (!tvec_push(tape, t)) goto nomem;
        dlc_tensor_retain(t); /* freeing nodes mid-walk must not free tensors still on the tape */
    }
    goto out;
nomem:
    st = dlc_error(DLC_ERR_NOMEM, "backward: out of memory building the tape");
out:
    free(stack.v);
    free(child.v);
    return st;
}

/* Gives t back the grad *k set aside by dlc_backward (added into t's new grad if it
 * has one), or drops it when `drop`. */
static void keep_merge(dlc_tensor *t, dlc_tensor **k, int drop) {
    if (!drop && !t->grad) {
        t->grad = *k;
    } else {
        if (!drop)
            for (int64_t j = 0; j < t->grad->numel; j++) t->grad->data[j] += (*k)->data[j];
        dlc_tensor_release(*k);
    }
    *k = NULL;
}

dlc_status dlc_backward(dlc_tensor *root, dlc_tensor *grad, int retain_graph) {
    char a[64], b[64];
    if (!root->requires_grad)
        return dlc_error(DLC_ERR_STATE,
                         "backward: tensor %s does not require grad (no input had requires_grad, "
                         "or it was computed in no-grad mode)", dlc_shape_str(root, a, sizeof a));
    if (root->graph_freed)
        return dlc_error(DLC_ERR_STATE,
                         "backward: the graph was already freed by an earlier backward; "
                         "pass retain_graph to backpropagate through it twice");
    if (!grad && root->numel != 1)
        return dlc_error(DLC_ERR_ARG,
                         "backward: root has shape %s; give its gradient, or reduce it to one element",
                         dlc_shape_str(root, a, sizeof a));
    if (grad && grad->numel != root->numel)
        return dlc_error(DLC_ERR_SHAPE, "backward: gradient %s does not match root %s",
                         dlc_shape_str(grad, b, sizeof b), dlc_shape_str(root, a, sizeof a));

    tvec tape = {0};
    dlc_tensor **kept = NULL; /* [tape.n] grads non-leaves kept from earlier passes */
    dlc_status st = build_tape(root, &tape);
    if (st != DLC_OK) goto out;

    /* A non-leaf's .grad from an earlier pass (retain_grad + retain_graph) must not be
     * propagated again: set it aside and add it back once this pass has used the grad. */
    for (size_t i = 0; i < tape.n; i++) {
        dlc_tensor *t = tape.v[i];
        if (!t->node || !t->grad) continue;
        if (!kept && !(kept = calloc(tape.n, sizeof *kept))) {
            st = dlc_error(DLC_ERR_NOMEM, "backward: out of memory");
            goto out;
        }
        kept[i] = t->grad;
        t->grad = NULL;
    }

    /* Seed the root's gradient. */
    float *g = dlcx_grad(root, &st);
    if (!g) goto out;
    for (int64_t i = 0; i < root->numel; i++) g[i] += grad ? grad->data[i] : 1.0f;

    for (size_t i = tape.n; i-- > 0;) {
        dlc_tensor *t = tape.v[i];
        if (!t->node) continue; /* leaf: keep its grad */
        if (t->grad) {
            st = node_backward(t->node, t, t->grad->data);
            if (st != DLC_OK) goto out;
        }
        if (!t->retain_grad) {
            dlc_tensor_release(t->grad);
            t->grad = NULL;
        }
        if (kept && kept[i]) keep_merge(t, &kept[i], !t->retain_grad);
        if (!retain_graph) {
            dlcx_node_free(t->node);
            t->node = NULL;
            t->graph_freed = 1;
        }
    }
out:
    for (size_t i = 0; i < tape.n; i++) {
        if (kept && kept[i]) keep_merge(tape.v[i], &kept[i], 0);
        dlc_tensor_release(tape.v[i]);
    }
    free(kept);
    free(tape.v);
    return st;
}
