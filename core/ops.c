/*
 * ops.c - elementwise ops with broadcasting, unary math, reductions, and the shape
 * ops (reshape, transpose, slice, concat).  Forward and backward in pairs; matmul and
 * linear live in linalg.c, the fused neural-network ops in nnops.c.
 */
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include "diloco/ops.h"
#include "internal.h"

/* ------------------------------------------------------------------------------
 * broadcasting binary ops
 * ------------------------------------------------------------------------------ */

enum { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV };
static const char *const bin_names[] = {"add", "sub", "mul", "div"};
static const dlc_op bin_ops[] = {DLC_OP_ADD, DLC_OP_SUB, DLC_OP_MUL, DLC_OP_DIV};

/* Output shape and per-input strides (0 on broadcast dims), everything padded on the
 * left to 4 dims. */
typedef struct bcast {
    int ndim;
    int64_t shape[4], sa[4], sb[4];
} bcast;

static void pad4(const dlc_tensor *t, int64_t shape[4], int64_t stride[4]) {
    int off = 4 - t->ndim;
    for (int i = 0; i < 4; i++) shape[i] = i < off ? 1 : t->shape[i - off];
    int64_t s = 1;
    for (int i = 3; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i];
    }
}

static int bcast_plan(const char *fn, const dlc_tensor *a, const dlc_tensor *b, bcast *p) {
    int64_t as[4], bs[4], ast[4], bst[4];
    pad4(a, as, ast);
    pad4(b, bs, bst);
    p->ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < 4; i++) {
        if (as[i] == bs[i] || bs[i] == 1) p->shape[i] = as[i];
        else if (as[i] == 1) p->shape[i] = bs[i];
        else {
            char x[64], y[64];
            dlc_error(DLC_ERR_SHAPE, "%s: %s and %s: shapes do not broadcast (%lld vs %lld at dim %d)",
                      fn, dlc_shape_str(a, x, sizeof x), dlc_shape_str(b, y, sizeof y),
                      (long long)as[i], (long long)bs[i], i - (4 - p->ndim) + 1);
            return 0;
        }
        p->sa[i] = as[i] == 1 && p->shape[i] != 1 ? 0 : ast[i];
        p->sb[i] = bs[i] == 1 && p->shape[i] != 1 ? 0 : bst[i];
    }
    return 1;
}

DLC_HOT static void bin_inner(int op, float *o, const float *a, int64_t sa, const float *b, int64_t sb,
                      int64_t n) {
    switch (op) {
    case BIN_ADD:
        if (sa == 1 && sb == 1) for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i];
        else for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] + b[i * sb];
        break;
    case BIN_SUB:
        if (sa == 1 && sb == 1) for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i];
        else for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] - b[i * sb];
        break;
    case BIN_MUL:
        if (sa == 1 && sb == 1) for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i];
        else for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] * b[i * sb];
        break;
    default:
        if (sa == 1 && sb == 1) for (int64_t i = 0; i < n; i++) o[i] = a[i] / b[i];
        else for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] / b[i * sb];
        break;
    }
}

typedef struct {
    int op;
    const bcast *p;
    float *o;
    const float *a, *b;
} binary_ctx;

/* Output rows [r0, r1) of length shape[3], r = (i0 shape[1] + i1) shape[2] + i2. */
static void binary_rows(void *ctx, int64_t r0, int64_t r1, int part) {
    const binary_ctx *c = ctx;
    const bcast *p = c->p;
    int64_t n = p->shape[3];
    for (int64_t r = r0; r < r1; r++) {
        int64_t i2 = r % p->shape[2], i1 = r / p->shape[2] % p->shape[1], i0 = r / p->shape[2] / p->shape[1];
        const float *pa = c->a + i0 * p->sa[0] + i1 * p->sa[1] + i2 * p->sa[2];
        const float *pb = c->b + i0 * p->sb[0] + i1 * p->sb[1] + i2 * p->sb[2];
        bin_inner(c->op, c->o + r * n, pa, p->sa[3], pb, p->sb[3], n);
    }
}

/* Both inputs contiguous with the output's shape: floats [lo, hi). */
static void binary_flat(void *ctx, int64_t lo, int64_t hi, int part) {
    const binary_ctx *c = ctx;
    bin_inner(c->op, c->o + lo, c->a + lo, 1, c->b + lo, 1, hi - lo);
}

static dlc_tensor *binary(int op, dlc_tensor *a, dlc_tensor *b) {
    bcast p;
    if (!bcast_plan(bin_names[op], a, b, &p)) return NULL;
    int64_t oshape[4];
    for (int i = 0; i < p.ndim; i++) oshape[i] = p.shape[4 - p.ndim + i];
    dlc_tensor *out = dlc_tensor_new(p.ndim, oshape);
    if (!out) return NULL;
    binary_ctx c = {.op = op, .p = &p, .o = out->data, .a = a->data, .b = b->data};
    if (a->numel == out->numel && b->numel == out->numel) /* nothing broadcast: one flat range */
        dlcx_parallel_for(out->numel, 3 * out->numel, binary_flat, &c);
    else
        dlcx_parallel_for(p.shape[0] * p.shape[1] * p.shape[2], 3 * out->numel, binary_rows, &c);
    dlc_tensor *in[2] = {a, b};
    dlc_node *nd;
    return dlcx_track(out, bin_ops[op], 2, in, &nd);
}

dlc_tensor *dlc_add(dlc_tensor *a, dlc_tensor *b) { return binary(BIN_ADD, a, b); }
dlc_tensor *dlc_sub(dlc_tensor *a, dlc_tensor *b) { return binary(BIN_SUB, a, b); }
dlc_tensor *dlc_mul(dlc_tensor *a, dlc_tensor *b) { return binary(BIN_MUL, a, b); }
dlc_tensor *dlc_div(dlc_tensor *a, dlc_tensor *b) { return binary(BIN_DIV, a, b); }

dlc_tensor *dlc_bias_add(dlc_tensor *x, dlc_tensor *b) {
    if (b->ndim != 1 || x->ndim < 1 || b->shape[0] != x->shape[x->ndim - 1]) {
        char s1[64], s2[64];
        dlc_error(DLC_ERR_SHAPE, "bias_add: x %s and bias %s: bias must be 1-D with the size of x's last dim",
                  dlc_shape_str(x, s1, sizeof s1), dlc_shape_str(b, s2, sizeof s2));
        return NULL;
    }
    return binary(BIN_ADD, x, b);
}

/* The two shapes training hits constantly, without the strided walk: equal shapes
 * (residual adds, products), and b broadcast over the leading dims of a (bias adds,
 * row-scaling).  Returns 0 when the shapes are neither. */
typedef struct {
    dlc_op op;
    const float *a, *b, *o, *g;
    float *ga, *gb;
    int64_t rows, m;
} bwd_fast_ctx;

/* Columns [j0, j1) of every row: b's gradient sums over rows in row order whatever the
 * split, and no two threads write one element. */
DLC_HOT static void binary_backward_cols(void *ctx, int64_t j0, int64_t j1, int part) {
    const bwd_fast_ctx *c = ctx;
    int64_t m = c->m, w = j1 - j0;
    const float *bv = c->b + j0;
    float *gb = c->gb ? c->gb + j0 : NULL;
    for (int64_t r = 0; r < c->rows; r++) {
        const float *gr = c->g + r * m + j0, *ar = c->a + r * m + j0, *orow = c->o + r * m + j0;
        float *gar = c->ga ? c->ga + r * m + j0 : NULL;
        switch (c->op) {
        case DLC_OP_ADD:
            if (gar) for (int64_t j = 0; j < w; j++) gar[j] += gr[j];
            if (gb) for (int64_t j = 0; j < w; j++) gb[j] += gr[j];
            break;
        case DLC_OP_SUB:
            if (gar) for (int64_t j = 0; j < w; j++) gar[j] += gr[j];
            if (gb) for (int64_t j = 0; j < w; j++) gb[j] -= gr[j];
            break;
        case DLC_OP_MUL:
            if (gar) for (int64_t j = 0; j < w; j++) gar[j] += gr[j] * bv[j];
            if (gb) for (int64_t j = 0; j < w; j++) gb[j] += gr[j] * ar[j];
            break;
        default:
            if (gar) for (int64_t j = 0; j < w; j++) gar[j] += gr[j] / bv[j];
            if (gb) for (int64_t j = 0; j < w; j++) gb[j] -= gr[j] * orow[j] / bv[j];
            break;
        }
    }
}

static int binary_backward_fast(dlc_op op, const dlc_tensor *a, const dlc_tensor *b,
                                const dlc_tensor *out, const float *g, float *ga, float *gb) {
    int64_t n = out->numel;
    if (n == 0) return 1; /* empty: nothing to accumulate (and no division by b->numel = 0) */
    if (a->numel != n || (b->numel != n && (b->numel == 0 || n % b->numel))) return 0;
    for (int i = 1; i <= b->ndim; i++) /* b's shape must be a suffix of a's */
        if (a->ndim < i || b->shape[b->ndim - i] != a->shape[a->ndim - i]) return 0;
    int64_t m = b->numel;
    bwd_fast_ctx c = {.op = op, .a = a->data, .b = b->data, .o = out->data, .g = g, .ga = ga, .gb = gb,
                      .rows = n / m, .m = m};
    dlcx_parallel_for(m, 4 * n, binary_backward_cols, &c);
    return 1;
}

/* b [..., 1] broadcast along a's last dim (per-row scaling: MoE gates, masks), same
 * leading dims.  Returns 0 when the shapes are not that. */
DLC_HOT static int binary_backward_col(dlc_op op, const dlc_tensor *a, const dlc_tensor *b,
                                       const dlc_tensor *out, const float *g, float *ga, float *gb) {
    if (a->ndim < 1 || a->ndim != b->ndim || b->shape[b->ndim - 1] != 1 || out->numel != a->numel) return 0;
    for (int i = 0; i < a->ndim - 1; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    int64_t rows = b->numel, m = a->shape[a->ndim - 1];
    if (rows == 0 || m == 0) return 1;
    for (int64_t r = 0; r < rows; r++) {
        const float *gr = g + r * m, *ar = a->data + r * m, *orow = out->data + r * m;
        float *gar = ga ? ga + r * m : NULL, bv = b->data[r], acc = 0.0f;
        switch (op) {
        case DLC_OP_ADD:
        case DLC_OP_SUB:
            if (gar) for (int64_t j = 0; j < m; j++) gar[j] += gr[j];
            if (gb) {
                DLC_SIMD_REDUCE(+ : acc)
                for (int64_t j = 0; j < m; j++) acc += gr[j];
                gb[r] += op == DLC_OP_ADD ? acc : -acc;
            }
            break;
        case DLC_OP_MUL:
            if (gar) for (int64_t j = 0; j < m; j++) gar[j] += gr[j] * bv;
            if (gb) {
                DLC_SIMD_REDUCE(+ : acc)
                for (int64_t j = 0; j < m; j++) acc += gr[j] * ar[j];
                gb[r] += acc;
            }
            break;
        default:
            if (gar) for (int64_t j = 0; j < m; j++) gar[j] += gr[j] / bv;
            if (gb) {
                DLC_SIMD_REDUCE(+ : acc)
                for (int64_t j = 0; j < m; j++) acc += gr[j] * orow[j];
                gb[r] -= acc / bv;
            }
            break;
        }
    }
    return 1;
}

/* d(a op b): walks the output index space once, accumulating into the (possibly
 * broadcast, hence stride-0) positions of each input's gradient. */
dlc_status dlcx_binary_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_tensor *a = n->in[0], *b = n->in[1];
    dlc_status err = DLC_OK;
    float *ga = dlcx_grad(a, &err), *gb = dlcx_grad(b, &err);
    if (err) return dlc_error(err, "backward of %s: out of memory", dlc_op_name(n->op));
    bcast p;
    if (!bcast_plan(dlc_op_name(n->op), a, b, &p)) return DLC_ERR_SHAPE;
    if (binary_backward_fast(n->op, a, b, out, g, ga, gb)) return DLC_OK;
    if (binary_backward_col(n->op, a, b, out, g, ga, gb)) return DLC_OK;
    int64_t k = 0;
    for (int64_t i0 = 0; i0 < p.shape[0]; i0++)
        for (int64_t i1 = 0; i1 < p.shape[1]; i1++)
            for (int64_t i2 = 0; i2 < p.shape[2]; i2++) {
                int64_t oa = i0 * p.sa[0] + i1 * p.sa[1] + i2 * p.sa[2];
                int64_t ob = i0 * p.sb[0] + i1 * p.sb[1] + i2 * p.sb[2];
                for (int64_t i3 = 0; i3 < p.shape[3]; i3++, k++) {
                    int64_t ia = oa + i3 * p.sa[3], ib = ob + i3 * p.sb[3];
                    float gv = g[k];
                    switch (n->op) {
                    case DLC_OP_ADD:
                        if (ga) ga[ia] += gv;
                        if (gb) gb[ib] += gv;
                        break;
                    case DLC_OP_SUB:
                        if (ga) ga[ia] += gv;
                        if (gb) gb[ib] -= gv;
                        break;
                    case DLC_OP_MUL:
                        if (ga) ga[ia] += gv * b->data[ib];
                        if (gb) gb[ib] += gv * a->data[ia];
                        break;
                    default:
                        if (ga) ga[ia] += gv / b->data[ib];
                        if (gb) gb[ib] -= gv * out->data[k] / b->data[ib];
                        break;
                    }
                }
            }
    return DLC_OK;
}

/* ------------------------------------------------------------------------------
 * affine, pow, unary
 * ------------------------------------------------------------------------------ */

dlc_tensor *dlc_affine(dlc_tensor *x, float alpha, float beta) {
    dlc_tensor *out = dlc_tensor_new(x->ndim, x->shape);
    if (!out) return NULL;
    for (int64_t i = 0; i < x->numel; i++) out->data[i] = alpha * x->data[i] + beta;
    dlc_node *nd;
    out = dlcx_track(out, DLC_OP_AFFINE, 1, &x, &nd);
    if (nd) nd->f[0] = alpha;
    return out;
}

dlc_tensor *dlc_scale(dlc_tensor *x, float alpha) { return dlc_affine(x, alpha, 0.0f); }

dlc_status dlcx_affine_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    float *gx = dlcx_grad(n->in[0], &err), alpha = (float)n->f[0];
    if (err) return dlc_error(err, "backward of affine: out of memory");
    if (gx)
        for (int64_t i = 0; i < out->numel; i++) gx[i] += alpha * g[i];
    return DLC_OK;
}

dlc_tensor *dlc_pow(dlc_tensor *x, float p) {
    dlc_tensor *out = dlc_tensor_new(x->ndim, x->shape);
    if (!out) return NULL;
    if (p == 2.0f)
        for (int64_t i = 0; i < x->numel; i++) out->data[i] = x->data[i] * x->data[i];
    else
        for (int64_t i = 0; i < x->numel; i++) out->data[i] = powf(x->data[i], p);
    dlc_node *nd;
    out = dlcx_track(out, DLC_OP_POW, 1, &x, &nd);
    if (nd) nd->f[0] = p;
    return out;
}

dlc_status dlcx_pow_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *x = n->in[0];
    float *gx = dlcx_grad(x, &err), p = (float)n->f[0];
    if (err) return dlc_error(err, "backward of pow: out of memory");
    if (gx && p != 0.0f) /* d/dx x^0 = 0 everywhere, also at x = 0 where powf(0, -1) = inf */
        for (int64_t i = 0; i < out->numel; i++) gx[i] += g[i] * p * powf(x->data[i], p - 1.0f);
    return DLC_OK;
}

static const char *const unary_names[] = {
    "neg", "exp", "log", "sqrt", "abs", "relu", "gelu", "silu", "tanh", "sigmoid", "sin", "cos",
};
_Static_assert(sizeof unary_names / sizeof unary_names[0] == DLC_UNARY_COUNT,
               "unary name table out of sync with dlc_unary_op");

const char *dlc_unary_name(dlc_unary_op op) {
    return (unsigned)op < DLC_UNARY_COUNT ? unary_names[op] : NULL;
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* Elementwise kernels run on ranges [lo, hi) of the flat tensor, split across the
 * compute threads when large (dlcx_parallel_for); each element is computed alone, so
 * the result does not depend on the split. */
typedef struct {
    dlc_unary_op op;
    float *o, *sg;           /* forward: output, GELU's saved sigmoid (or NULL) */
    float *gx;               /* backward: input gradient */
    const float *a, *y, *g;  /* input, forward output, output gradient */
    const float *sgs;        /* backward: GELU's saved sigmoid */
} unary_ctx;

DLC_HOT static void unary_range(void *ctx, int64_t lo, int64_t hi, int part) {
    const unary_ctx *c = ctx;
    const float *a = c->a + lo;
    float *o = c->o + lo, *sg = c->sg ? c->sg + lo : NULL;
    int64_t n = hi - lo;
    switch (c->op) {
    case DLC_UNARY_NEG: for (int64_t i = 0; i < n; i++) o[i] = -a[i]; break;
    case DLC_UNARY_EXP: for (int64_t i = 0; i < n; i++) o[i] = expf(a[i]); break;
    case DLC_UNARY_LOG: for (int64_t i = 0; i < n; i++) o[i] = logf(a[i]); break;
    case DLC_UNARY_SQRT: for (int64_t i = 0; i < n; i++) o[i] = sqrtf(a[i]); break;
    case DLC_UNARY_ABS: for (int64_t i = 0; i < n; i++) o[i] = fabsf(a[i]); break;
    case DLC_UNARY_RELU: for (int64_t i = 0; i < n; i++) o[i] = a[i] > 0 ? a[i] : 0.0f; break;
    case DLC_UNARY_GELU:
        /* 0.5 v (1 + tanh(u)) = v sigmoid(2u): one exp and one division */
        if (sg) {
            for (int64_t i = 0; i < n; i++) {
                float v = a[i];
                sg[i] = 1.0f / (1.0f + dlcx_expf(-2.0f * GELU_K * (v + GELU_C * v * v * v)));
                o[i] = v * sg[i];
            }
        } else {
            for (int64_t i = 0; i < n; i++) {
                float v = a[i];
                o[i] = v / (1.0f + dlcx_expf(-2.0f * GELU_K * (v + GELU_C * v * v * v)));
            }
        }
        break;
    case DLC_UNARY_SILU: for (int64_t i = 0; i < n; i++) o[i] = a[i] / (1.0f + dlcx_expf(-a[i])); break;
    case DLC_UNARY_TANH: for (int64_t i = 0; i < n; i++) o[i] = tanhf(a[i]); break;
    case DLC_UNARY_SIGMOID: for (int64_t i = 0; i < n; i++) o[i] = 1.0f / (1.0f + dlcx_expf(-a[i])); break;
    case DLC_UNARY_SIN: for (int64_t i = 0; i < n; i++) o[i] = sinf(a[i]); break;
    case DLC_UNARY_COS: for (int64_t i = 0; i < n; i++) o[i] = cosf(a[i]); break;
    case DLC_UNARY_COUNT: break;
    }
}

dlc_tensor *dlc_unary(dlc_unary_op op, dlc_tensor *x) {
    if ((unsigned)op >= DLC_UNARY_COUNT) {
        dlc_error(DLC_ERR_ARG, "unary: op %d is not a dlc_unary_op", (int)op);
        return NULL;
    }
    dlc_tensor *out = dlc_tensor_new(x->ndim, x->shape), *sig = NULL;
    if (!out) return NULL;
    /* GELU keeps sigmoid(2u) for its backward, which then needs no exp or division */
    if (op == DLC_UNARY_GELU && dlcx_should_record(1, &x)) {
        sig = dlc_tensor_new(x->ndim, x->shape);
        if (!sig) {
            dlc_tensor_release(out);
            return NULL;
        }
    }
    unary_ctx c = {.op = op, .o = out->data, .sg = sig ? sig->data : NULL, .a = x->data};
    dlcx_parallel_for(x->numel, 3 * x->numel, unary_range, &c);
    dlc_node *nd;
    out = dlcx_track(out, DLC_OP_UNARY, 1, &x, &nd);
    if (nd) {
        nd->i[0] = op;
        nd->saved[0] = sig;
    } else {
        dlc_tensor_release(sig);
    }
    return out;
}

DLC_HOT static void unary_backward_range(void *ctx, int64_t lo, int64_t hi, int part) {
    const unary_ctx *c = ctx;
    const float *a = c->a + lo, *o = c->y + lo, *g = c->g + lo, *sg = c->sgs ? c->sgs + lo : NULL;
    float *gx = c->gx + lo;
    int64_t len = hi - lo;
    switch (c->op) {
    case DLC_UNARY_NEG: for (int64_t i = 0; i < len; i++) gx[i] -= g[i]; break;
    case DLC_UNARY_EXP: for (int64_t i = 0; i < len; i++) gx[i] += g[i] * o[i]; break;
    case DLC_UNARY_LOG: for (int64_t i = 0; i < len; i++) gx[i] += g[i] / a[i]; break;
    case DLC_UNARY_SQRT: for (int64_t i = 0; i < len; i++) gx[i] += g[i] * 0.5f / o[i]; break;
    case DLC_UNARY_ABS:
        for (int64_t i = 0; i < len; i++) gx[i] += a[i] > 0 ? g[i] : a[i] < 0 ? -g[i] : 0.0f;
        break;
    case DLC_UNARY_RELU: for (int64_t i = 0; i < len; i++) gx[i] += a[i] > 0 ? g[i] : 0.0f; break;
    case DLC_UNARY_GELU: {
        /* d/dv v s(2u) = s + v s (1 - s) 2u'(v), s saved by the forward */
        for (int64_t i = 0; i < len; i++) {
            float v = a[i], s = sg[i];
            gx[i] += g[i] * (s + v * s * (1.0f - s) * 2.0f * GELU_K * (1.0f + 3.0f * GELU_C * v * v));
        }
        break;
    }
    case DLC_UNARY_SILU:
        for (int64_t i = 0; i < len; i++) {
            float s = 1.0f / (1.0f + dlcx_expf(-a[i]));
            gx[i] += g[i] * s * (1.0f + a[i] * (1.0f - s));
        }
        break;
    case DLC_UNARY_TANH: for (int64_t i = 0; i < len; i++) gx[i] += g[i] * (1.0f - o[i] * o[i]); break;
    case DLC_UNARY_SIGMOID: for (int64_t i = 0; i < len; i++) gx[i] += g[i] * o[i] * (1.0f - o[i]); break;
    case DLC_UNARY_SIN: for (int64_t i = 0; i < len; i++) gx[i] += g[i] * cosf(a[i]); break;
    case DLC_UNARY_COS: for (int64_t i = 0; i < len; i++) gx[i] -= g[i] * sinf(a[i]); break;
    case DLC_UNARY_COUNT: break;
    }
}

dlc_status dlcx_unary_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    float *gx = dlcx_grad(n->in[0], &err);
    if (err) return dlc_error(err, "backward of unary: out of memory");
    if (!gx) return DLC_OK;
    dlc_unary_op op = (dlc_unary_op)n->i[0];
    unary_ctx c = {.op = op, .gx = gx, .a = n->in[0]->data, .y = out->data, .g = g,
                   .sgs = op == DLC_UNARY_GELU ? n->saved[0]->data : NULL};
    dlcx_parallel_for(out->numel, 4 * out->numel, unary_backward_range, &c);
    return DLC_OK;
}

/* ------------------------------------------------------------------------------
 * reductions: x viewed as [outer, len, inner] around the reduced axis
 * ------------------------------------------------------------------------------ */

static void split_axis(const dlc_tensor *x, int ax, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < ax; i++) *outer *= x->shape[i];
    *len = x->shape[ax];
    for (int i = ax + 1; i < x->ndim; i++) *inner *= x->shape[i];
}

static dlc_tensor *reduced_like(const dlc_tensor *x, int ax, int keepdim) {
    int64_t s[DLC_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i != ax) s[nd++] = x->shape[i];
        else if (keepdim) s[nd++] = 1;
    }
    return dlc_tensor_new(nd, s);
}

static dlc_tensor *sum_all(dlc_tensor *x, double scale) {
    dlc_tensor *out = dlc_tensor_new(0, NULL);
    if (!out) return NULL;
    double acc = 0;
    for (int64_t i = 0; i < x->numel; i++) acc += x->data[i];
    out->data[0] = (float)(acc * scale);
    dlc_node *nd;
    out = dlcx_track(out, DLC_OP_SUM_ALL, 1, &x, &nd);
    if (nd) nd->f[0] = scale;
    return out;
}

dlc_tensor *dlc_sum_all(dlc_tensor *x) { return sum_all(x, 1.0); }
dlc_tensor *dlc_mean_all(dlc_tensor *x) {
    if (x->numel == 0) {
        dlc_error(DLC_ERR_SHAPE, "mean: the tensor is empty");
        return NULL;
    }
    return sum_all(x, 1.0 / (double)x->numel);
}

dlc_status dlcx_sum_all_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *x = n->in[0];
    float *gx = dlcx_grad(x, &err), v = (float)(g[0] * n->f[0]);
    if (err) return dlc_error(err, "backward of sum: out of memory");
    if (gx)
        for (int64_t i = 0; i < x->numel; i++) gx[i] += v;
    return DLC_OK;
}

static dlc_tensor *sum_axis(const char *fn, dlc_tensor *x, int axis, int keepdim, int mean) {
    int ax = dlcx_axis(fn, axis, x->ndim);
    if (ax < 0) return NULL;
    int64_t outer, len, inner;
    split_axis(x, ax, &outer, &len, &inner);
    if (mean && len == 0) {
        dlc_error(DLC_ERR_SHAPE, "mean: axis %d has size 0", axis);
        return NULL;
    }
    dlc_tensor *out = reduced_like(x, ax, keepdim);
    if (!out) return NULL;
    float scale = mean ? 1.0f / (float)len : 1.0f;
    for (int64_t o = 0; o < outer; o++) {
        float *dst = out->data + o * inner;
        const float *src = x->data + o * len * inner;
        if (inner == 1) {
            double acc = 0;
            for (int64_t k = 0; k < len; k++) acc += src[k];
            dst[0] = (float)acc * scale;
            continue;
        }
        memset(dst, 0, (size_t)inner * sizeof(float));
        for (int64_t k = 0; k < len; k++)
            for (int64_t i = 0; i < inner; i++) dst[i] += src[k * inner + i];
        for (int64_t i = 0; i < inner; i++) dst[i] *= scale;
    }
    dlc_node *nd;
    out = dlcx_track(out, DLC_OP_SUM, 1, &x, &nd);
    if (nd) {
        nd->i[0] = ax;
        nd->f[0] = scale;
    }
    return out;
}

dlc_tensor *dlc_sum(dlc_tensor *x, int axis, int keepdim) { return sum_axis("sum", x, axis, keepdim, 0); }
dlc_tensor *dlc_mean(dlc_tensor *x, int axis, int keepdim) { return sum_axis("mean", x, axis, keepdim, 1); }

dlc_status dlcx_sum_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *x = n->in[0];
    float *gx = dlcx_grad(x, &err), scale = (float)n->f[0];
    if (err) return dlc_error(err, "backward of sum: out of memory");
    if (!gx) return DLC_OK;
    int64_t outer, len, inner;
    split_axis(x, (int)n->i[0], &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < len; k++)
            for (int64_t i = 0; i < inner; i++)
                gx[(o * len + k) * inner + i] += scale * g[o * inner + i];
    return DLC_OK;
}

/* Max along an axis; *arg (optional) receives the index of the first maximum. */
static dlc_tensor *max_axis(const char *fn, dlc_tensor *x, int axis, int keepdim, dlc_tensor **arg,
                            int want_value) {
    int ax = dlcx_axis(fn, axis, x->ndim);
    if (ax < 0) return NULL;
    int64_t outer, len, inner;
    split_axis(x, ax, &outer, &len, &inner);
    if (len == 0) {
        dlc_error(DLC_ERR_SHAPE, "%s: axis %d has size 0", fn, axis);
        return NULL;
    }
    dlc_tensor *val = want_value ? reduced_like(x, ax, keepdim) : NULL;
    dlc_tensor *idx = reduced_like(x, ax, keepdim);
    if ((want_value && !val) || !idx) goto fail;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *src = x->data + o * len * inner + i;
            float best = src[0];
            int64_t bi = 0;
            for (int64_t k = 1; k < len; k++)
                if (src[k * inner] > best || (isnan(src[k * inner]) && !isnan(best))) {
                    best = src[k * inner];
                    bi = k;
                }
            if (val) val->data[o * inner + i] = best;
            idx->data[o * inner + i] = (float)bi;
        }
    *arg = idx;
    return want_value ? val : idx;
fail:
    dlc_tensor_release(val);
    dlc_tensor_release(idx);
    return NULL;
}

dlc_tensor *dlc_max(dlc_tensor *x, int axis, int keepdim) {
    dlc_tensor *idx = NULL;
    dlc_tensor *out = max_axis("max", x, axis, keepdim, &idx, 1);
    if (!out) return NULL;
    dlc_node *nd;
    out = dlcx_track(out, DLC_OP_MAX, 1, &x, &nd);
    if (nd) {
        nd->i[0] = dlcx_axis("max", axis, x->ndim);
        nd->saved[0] = idx;
        idx = NULL;
    }
    dlc_tensor_release(idx);
    return out;
}

dlc_tensor *dlc_argmax(dlc_tensor *x, int axis, int keepdim) {
    dlc_tensor *idx = NULL;
    return max_axis("argmax", x, axis, keepdim, &idx, 0);
}

dlc_status dlcx_max_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *x = n->in[0], *idx = n->saved[0];
    float *gx = dlcx_grad(x, &err);
    if (err) return dlc_error(err, "backward of max: out of memory");
    if (!gx) return DLC_OK;
    int64_t outer, len, inner;
    split_axis(x, (int)n->i[0], &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t k = (int64_t)idx->data[o * inner + i];
            gx[(o * len + k) * inner + i] += g[o * inner + i];
        }
    return DLC_OK;
}

/* ------------------------------------------------------------------------------
 * shape ops
 * ------------------------------------------------------------------------------ */

dlc_tensor *dlc_reshape(dlc_tensor *x, int ndim, const int64_t *shape) {
    int64_t s[DLC_MAX_DIMS], known = 1;
    int infer = -1;
    char buf[64];
    if (ndim < 0 || ndim > DLC_MAX_DIMS) {
        dlc_error(DLC_ERR_SHAPE, "reshape: %d dims requested, at most %d supported", ndim, DLC_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1 && infer < 0) infer = i;
        else if (s[i] < 0) {
            dlc_error(DLC_ERR_SHAPE, "reshape: size %lld at dim %d is invalid (sizes are >= 0, one may be -1)",
                      (long long)s[i], i + 1);
            return NULL;
        } else if (s[i] > 0 && known > INT64_MAX / 4 / s[i]) {
            dlc_error(DLC_ERR_SHAPE, "reshape: the new shape has too many elements (size %lld at dim %d)",
                      (long long)s[i], i + 1);
            return NULL;
        } else known *= s[i];
    }
    if (infer >= 0) {
        if (known == 0 || x->numel % known) {
            dlc_error(DLC_ERR_SHAPE, "reshape: cannot infer dim %d: %lld elements of %s are not a multiple of %lld",
                      infer + 1, (long long)x->numel, dlc_shape_str(x, buf, sizeof buf), (long long)known);
            return NULL;
        }
        s[infer] = x->numel / known;
        known *= s[infer];
    }
    if (known != x->numel) {
        dlc_error(DLC_ERR_SHAPE, "reshape: %s has %lld elements, the new shape has %lld",
                  dlc_shape_str(x, buf, sizeof buf), (long long)x->numel, (long long)known);
        return NULL;
    }
    dlc_tensor *out = dlc_tensor_view(x, 0, ndim, s);
    return dlcx_track(out, DLC_OP_RESHAPE, 1, &x, NULL);
}

dlc_status dlcx_reshape_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    float *gx = dlcx_grad(n->in[0], &err);
    if (err) return dlc_error(err, "backward of reshape: out of memory");
    if (gx) dlcx_par_acc(gx, g, out->numel);
    return DLC_OK;
}

/* out = x with axes a0, a1 swapped.  Walks the output in order; `acc` selects the
 * backward direction (gx[src] += g[dst]) instead of the copy. */
static void transpose_walk(const dlc_tensor *x, int a0, int a1, float *dst, const float *src, int acc) {
    int64_t sh[4], st[4];
    pad4(x, sh, st);
    int off = 4 - x->ndim;
    a0 += off;
    a1 += off;
    int64_t t = sh[a0];
    sh[a0] = sh[a1];
    sh[a1] = t;
    t = st[a0];
    st[a0] = st[a1];
    st[a1] = t;
    int64_t k = 0;
    for (int64_t i0 = 0; i0 < sh[0]; i0++)
        for (int64_t i1 = 0; i1 < sh[1]; i1++)
            for (int64_t i2 = 0; i2 < sh[2]; i2++) {
                int64_t base = i0 * st[0] + i1 * st[1] + i2 * st[2];
                if (acc)
                    for (int64_t i3 = 0; i3 < sh[3]; i3++, k++) dst[base + i3 * st[3]] += src[k];
                else
                    for (int64_t i3 = 0; i3 < sh[3]; i3++, k++) dst[k] = src[base + i3 * st[3]];
            }
}

dlc_tensor *dlc_transpose(dlc_tensor *x, int axis0, int axis1) {
    int a0 = dlcx_axis("transpose", axis0, x->ndim);
    if (a0 < 0) return NULL;
    int a1 = dlcx_axis("transpose", axis1, x->ndim);
    if (a1 < 0) return NULL;
    int64_t s[DLC_MAX_DIMS];
    memcpy(s, x->shape, sizeof s);
    s[a0] = x->shape[a1];
    s[a1] = x->shape[a0];
    dlc_tensor *out = dlc_tensor_new(x->ndim, s);
    if (!out) return NULL;
    transpose_walk(x, a0, a1, out->data, x->data, 0);
    dlc_node *nd;
    out = dlcx_track(out, DLC_OP_TRANSPOSE, 1, &x, &nd);
    if (nd) {
        nd->i[0] = a0;
        nd->i[1] = a1;
    }
    return out;
}

dlc_status dlcx_transpose_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    float *gx = dlcx_grad(n->in[0], &err);
    if (err) return dlc_error(err, "backward of transpose: out of memory");
    if (gx) transpose_walk(n->in[0], (int)n->i[0], (int)n->i[1], gx, g, 1);
    return DLC_OK;
}

dlc_tensor *dlc_slice(dlc_tensor *x, int axis, int64_t start, int64_t len) {
    int ax = dlcx_axis("slice", axis, x->ndim);
    if (ax < 0) return NULL;
    if (start < 0 || len < 0 || start > x->shape[ax] || len > x->shape[ax] - start) {
        char buf[64];
        dlc_error(DLC_ERR_RANGE, "slice: [%lld, %lld) is out of range for axis %d of %s (size %lld)",
                  (long long)start, (long long)((unsigned long long)start + (unsigned long long)len), axis,
                  dlc_shape_str(x, buf, sizeof buf), (long long)x->shape[ax]);
        return NULL;
    }
    int64_t outer, n, inner, s[DLC_MAX_DIMS];
    split_axis(x, ax, &outer, &n, &inner);
    memcpy(s, x->shape, sizeof s);
    s[ax] = len;
    dlc_tensor *out;
    if (outer == 1) {
        out = dlc_tensor_view(x, start * inner, x->ndim, s);
    } else {
        out = dlc_tensor_new(x->ndim, s);
        if (out)
            for (int64_t o = 0; o < outer; o++)
                memcpy(out->data + o * len * inner, x->data + (o * n + start) * inner,
                       (size_t)(len * inner) * sizeof(float));
    }
    dlc_node *nd;
    out = dlcx_track(out, DLC_OP_SLICE, 1, &x, &nd);
    if (nd) {
        nd->i[0] = ax;
        nd->i[1] = start;
    }
    return out;
}

dlc_status dlcx_slice_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *x = n->in[0];
    float *gx = dlcx_grad(x, &err);
    if (err) return dlc_error(err, "backward of slice: out of memory");
    if (!gx) return DLC_OK;
    int64_t outer, len, inner, start = n->i[1], sl = out->shape[n->i[0]];
    split_axis(x, (int)n->i[0], &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++) dlcx_par_acc(gx + (o * len + start) * inner, g + o * sl * inner, sl * inner);
    return DLC_OK;
}

dlc_tensor *dlc_concat(int n, dlc_tensor *const *xs, int axis) {
    char s1[64], s2[64];
    if (n < 1) {
        dlc_error(DLC_ERR_ARG, "concat: needs at least one tensor, got %d", n);
        return NULL;
    }
    int ax = dlcx_axis("concat", axis, xs[0]->ndim);
    if (ax < 0) return NULL;
    int64_t s[DLC_MAX_DIMS];
    memcpy(s, xs[0]->shape, sizeof s);
    s[ax] = 0;
    for (int k = 0; k < n; k++) {
        int ok = xs[k]->ndim == xs[0]->ndim;
        for (int i = 0; ok && i < xs[0]->ndim; i++) ok = i == ax || xs[k]->shape[i] == xs[0]->shape[i];
        if (!ok) {
            dlc_error(DLC_ERR_SHAPE, "concat: tensor %d %s does not match tensor 1 %s outside axis %d",
                      k + 1, dlc_shape_str(xs[k], s1, sizeof s1), dlc_shape_str(xs[0], s2, sizeof s2), axis);
            return NULL;
        }
        s[ax] += xs[k]->shape[ax];
    }
    dlc_tensor *out = dlc_tensor_new(xs[0]->ndim, s);
    if (!out) return NULL;
    int64_t outer, total, inner;
    split_axis(out, ax, &outer, &total, &inner);
    int64_t at = 0;
    for (int k = 0; k < n; k++) {
        int64_t len = xs[k]->shape[ax];
        for (int64_t o = 0; o < outer; o++)
            memcpy(out->data + (o * total + at) * inner, xs[k]->data + o * len * inner,
                   (size_t)(len * inner) * sizeof(float));
        at += len;
    }
    dlc_node *nd;
    out = dlcx_track(out, DLC_OP_CONCAT, n, xs, &nd);
    if (nd) nd->i[0] = ax;
    return out;
}

dlc_status dlcx_concat_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    int ax = (int)n->i[0];
    int64_t outer, total, inner, at = 0;
    split_axis(out, ax, &outer, &total, &inner);
    for (int k = 0; k < n->n_in; k++) {
        dlc_status err = DLC_OK;
        dlc_tensor *x = n->in[k];
        int64_t len = x->shape[ax];
        float *gx = dlcx_grad(x, &err);
        if (err) return dlc_error(err, "backward of concat: out of memory");
        if (gx)
            for (int64_t o = 0; o < outer; o++)
                dlcx_par_acc(gx + o * len * inner, g + (o * total + at) * inner, len * inner);
        at += len;
    }
    return DLC_OK;
}
