/*
 * linalg.c - matmul (batched, transpose flags, 2-D weights folded into one sgemm) and
 * the fused linear layer, forward and backward on dlcx_sgemm (gemm.c).
 */
#include <limits.h>
#include <string.h>
#include "diloco/ops.h"
#include "internal.h"

/* ------------------------------------------------------------------------------
 * matmul
 * ------------------------------------------------------------------------------ */

typedef struct mm_plan {
    int64_t M, N, K;     /* op(a) [M,K] . op(b) [K,N] */
    int64_t batch;       /* number of output matrices */
    int a_shared, b_shared;
    int ta, tb;
} mm_plan;

static int mm_make_plan(const dlc_tensor *a, const dlc_tensor *b, int ta, int tb, mm_plan *p,
                        int64_t *oshape, int *ondim) {
    char s1[64], s2[64];
    if (a->ndim < 2 || b->ndim < 2) {
        dlc_error(DLC_ERR_SHAPE, "matmul: %s x %s: both operands need at least 2 dims",
                  dlc_shape_str(a, s1, sizeof s1), dlc_shape_str(b, s2, sizeof s2));
        return 0;
    }
    int64_t ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    int64_t br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    p->ta = ta;
    p->tb = tb;
    p->M = ta ? ac : ar;
    p->K = ta ? ar : ac;
    int64_t kb = tb ? bc : br;
    p->N = tb ? br : bc;
    if (p->K != kb) {
        dlc_error(DLC_ERR_SHAPE, "matmul: %s%s x %s%s: inner dimensions %lld and %lld differ",
                  dlc_shape_str(a, s1, sizeof s1), ta ? "^T" : "", dlc_shape_str(b, s2, sizeof s2),
                  tb ? "^T" : "", (long long)p->K, (long long)kb);
        return 0;
    }
    p->a_shared = a->ndim == 2 && b->ndim > 2;
    p->b_shared = b->ndim == 2;
    const dlc_tensor *bt = p->b_shared ? a : b; /* the operand carrying the batch dims */
    if (!p->a_shared && !p->b_shared) {
        int same = a->ndim == b->ndim;
        for (int i = 0; same && i < a->ndim - 2; i++) same = a->shape[i] == b->shape[i];
        if (!same) {
            dlc_error(DLC_ERR_SHAPE, "matmul: %s x %s: batch dimensions differ",
                      dlc_shape_str(a, s1, sizeof s1), dlc_shape_str(b, s2, sizeof s2));
            return 0;
        }
    }
    p->batch = 1;
    *ondim = bt->ndim;
    for (int i = 0; i < bt->ndim - 2; i++) {
        oshape[i] = bt->shape[i];
        p->batch *= bt->shape[i];
    }
    oshape[bt->ndim - 2] = p->M;
    oshape[bt->ndim - 1] = p->N;
    /* cblas takes int sizes; a folded 2-D-weight product has batch * M rows */
    if (p->M > INT_MAX || p->N > INT_MAX || p->K > INT_MAX ||
        (p->b_shared && !ta && p->batch * p->M > INT_MAX)) {
        dlc_error(DLC_ERR_SHAPE, "matmul: %s%s x %s%s: matrix sizes must fit in an int (BLAS)",
                  dlc_shape_str(a, s1, sizeof s1), ta ? "^T" : "", dlc_shape_str(b, s2, sizeof s2),
                  tb ? "^T" : "");
        return 0;
    }
    return 1;
}

dlc_tensor *dlc_matmul(dlc_tensor *a, dlc_tensor *b, int ta, int tb) {
    mm_plan p;
    int64_t oshape[DLC_MAX_DIMS];
    int ondim;
    if (!mm_make_plan(a, b, ta, tb, &p, oshape, &ondim)) return NULL;
    dlc_tensor *out = dlc_tensor_new(ondim, oshape);
    if (!out) return NULL;
    int64_t M = p.M, N = p.N, K = p.K;
    int lda = (int)(ta ? M : K), ldb = (int)(tb ? K : N);
    dlc_status st = DLC_OK;
    if (M == 0 || N == 0 || K == 0) {
        memset(out->data, 0, (size_t)out->numel * sizeof(float));
    } else if (p.b_shared && !ta) {
        /* fold the batch into rows: one big sgemm */
        st = dlcx_sgemm(0, tb, p.batch * M, N, K, 1.0f, a->data, lda, b->data, ldb, 0.0f, out->data, N);
    } else {
        for (int64_t i = 0; i < p.batch && st == DLC_OK; i++) {
            const float *pa = a->data + (p.a_shared ? 0 : i * M * K);
            const float *pb = b->data + (p.b_shared ? 0 : i * K * N);
            st = dlcx_sgemm(ta, tb, M, N, K, 1.0f, pa, lda, pb, ldb, 0.0f, out->data + i * M * N, N);
        }
    }
    if (st != DLC_OK) {
        dlc_tensor_release(out);
        return NULL;
    }
    dlc_tensor *in[2] = {a, b};
    dlc_node *nd;
    out = dlcx_track(out, DLC_OP_MATMUL, 2, in, &nd);
    if (nd) {
        nd->i[0] = ta;
        nd->i[1] = tb;
    }
    return out;
}

/* C = op(A) op(B).  d op(A) = dC op(B)^T and d op(B) = op(A)^T dC, transposed back
 * into A's / B's storage layout; every call accumulates (beta = 1). */
dlc_status dlcx_matmul_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_tensor *a = n->in[0], *b = n->in[1];
    dlc_status err = DLC_OK;
    float *ga = dlcx_grad(a, &err), *gb = dlcx_grad(b, &err);
    if (err) return dlc_error(err, "backward of matmul: out of memory");
    mm_plan p;
    int64_t oshape[DLC_MAX_DIMS];
    int ondim;
    if (!mm_make_plan(a, b, (int)n->i[0], (int)n->i[1], &p, oshape, &ondim)) return DLC_ERR_SHAPE;
    int ta = p.ta, tb = p.tb;
    int M = (int)p.M, N = (int)p.N, K = (int)p.K;
    int lda = ta ? M : K, ldb = tb ? K : N;
    if (M == 0 || N == 0 || K == 0) return DLC_OK;
    int fold = p.b_shared && !ta;
    int64_t reps = fold ? 1 : p.batch;
    int Mf = fold ? (int)(p.batch * M) : M;
    dlc_status st = DLC_OK;
    for (int64_t i = 0; i < reps && st == DLC_OK; i++) {
        const float *pa = a->data + (p.a_shared ? 0 : i * M * K);
        const float *pb = b->data + (p.b_shared ? 0 : i * K * N);
        const float *pg = g + i * (int64_t)M * N;
        if (ga) {
            float *d = ga + (p.a_shared ? 0 : i * M * K);
            if (!ta) /* dA [M,K] = dC [M,N] . op(B)^T [N,K] */
                st = dlcx_sgemm(0, !tb, Mf, K, N, 1.0f, pg, N, pb, ldb, 1.0f, d, K);
            else /* dA [K,M] = op(B) [K,N] . dC^T [N,M] */
                st = dlcx_sgemm(tb, 1, K, M, N, 1.0f, pb, ldb, pg, N, 1.0f, d, M);
        }
        if (gb && st == DLC_OK) {
            float *d = gb + (p.b_shared ? 0 : i * K * N);
            if (!tb) /* dB [K,N] = op(A)^T [K,M] . dC [M,N] */
                st = dlcx_sgemm(!ta, 0, K, N, Mf, 1.0f, pa, lda, pg, N, 1.0f, d, N);
            else /* dB [N,K] = dC^T [N,M] . op(A) [M,K] */
                st = dlcx_sgemm(1, ta, N, K, Mf, 1.0f, pg, N, pa, lda, 1.0f, d, K);
        }
    }
    return st;
}

static int linear_check(const dlc_tensor *x, const dlc_tensor *w, const dlc_tensor *b) {
    char s1[64], s2[64];
    if (x->ndim < 1 || w->ndim != 2 || x->shape[x->ndim - 1] != w->shape[1]) {
        dlc_error(DLC_ERR_SHAPE, "linear: x %s and weight %s: weight must be [out, in] with in = %lld, "
                  "the last dim of x", dlc_shape_str(x, s1, sizeof s1), dlc_shape_str(w, s2, sizeof s2),
                  x->ndim ? (long long)x->shape[x->ndim - 1] : 0LL);
        return 0;
    }
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0])) {
        dlc_error(DLC_ERR_SHAPE, "linear: bias %s: expected [%lld] (the out size of weight %s)",
                  dlc_shape_str(b, s1, sizeof s1), (long long)w->shape[0], dlc_shape_str(w, s2, sizeof s2));
        return 0;
    }
    int64_t in = w->shape[1], rows = in ? x->numel / in : 0;
    if (in > INT_MAX || w->shape[0] > INT_MAX || rows > INT_MAX) {
        dlc_error(DLC_ERR_SHAPE, "linear: x %s and weight %s: rows, in and out must fit in an int (BLAS)",
                  dlc_shape_str(x, s1, sizeof s1), dlc_shape_str(w, s2, sizeof s2));
        return 0;
    }
    return 1;
}

dlc_tensor *dlc_linear(dlc_tensor *x, dlc_tensor *w, dlc_tensor *b) {
    if (!linear_check(x, w, b)) return NULL;
    int64_t in = w->shape[1], nout = w->shape[0], rows = in ? x->numel / in : 0, s[DLC_MAX_DIMS];
    memcpy(s, x->shape, sizeof s);
    s[x->ndim - 1] = nout;
    dlc_tensor *out = dlc_tensor_new(x->ndim, s);
    if (!out) return NULL;
    dlcx_par_fill_rows(out->data, b ? b->data : NULL, rows, nout);
    if (rows && nout && in &&
        dlcx_sgemm(0, 1, rows, nout, in, 1.0f, x->data, in, w->data, in, 1.0f, out->data, nout) != DLC_OK) {
        dlc_tensor_release(out);
        return NULL;
    }
    dlc_tensor *inputs[3] = {x, w, b};
    return dlcx_track(out, DLC_OP_LINEAR, 3, inputs, NULL);
}

DLC_HOT dlc_status dlcx_linear_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    dlc_status err = DLC_OK;
    float *gx = dlcx_grad(x, &err), *gw = dlcx_grad(w, &err), *gb = dlcx_grad(b, &err);
    if (err) return dlc_error(err, "backward of linear: out of memory");
    int in = (int)w->shape[1], nout = (int)w->shape[0], rows = in ? (int)(x->numel / in) : 0;
    if (!rows || !nout || !in) return DLC_OK;
    if (gx) /* dX [rows,in] = G [rows,out] . W [out,in] */
        err = dlcx_sgemm(0, 0, rows, in, nout, 1.0f, g, nout, w->data, in, 1.0f, gx, in);
    if (gw && err == DLC_OK) /* dW [out,in] = G^T [out,rows] . X [rows,in] */
        err = dlcx_sgemm(1, 0, nout, in, rows, 1.0f, g, nout, x->data, in, 1.0f, gw, in);
    if (err != DLC_OK) return err;
    if (gb) dlcx_par_acc_col_sums(gb, g, rows, nout);
    return DLC_OK;
}
