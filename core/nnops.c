/* nnops.c - softmax, cross-entropy, norms, indexing, top-k, attention and
 * dropout.  Each forward sits next to its backward; backwards ACCUMULATE into the
 * inputs' gradient buffers (dlcx_grad).  Index inputs are recorded so the node keeps
 * them alive, but they never receive a gradient. */
#include <limits.h>
#include <math.h>
#include <string.h>
#include "internal.h"

#define SHP(t, buf) dlc_shape_str((t), (buf), sizeof(buf))
#define FAIL(st, ...)                                                                  \
    do {                                                                               \
        dlc_error((st), __VA_ARGS__);                                                  \
        return NULL;                                                                   \
    } while (0)

/* Rows of a [..., C] tensor: the product of every dim but the last. */
static int64_t rows_of(const dlc_tensor *x) {
    int64_t r = 1;
    for (int i = 0; i + 1 < x->ndim; i++) r *= x->shape[i];
    return r;
}

/* Attaches the node; on failure releases out and the saved tensors (all NULL-safe). */
static dlc_node *attach(dlc_tensor *out, dlc_op op, int n, dlc_tensor *const *in,
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

static int check_last_dim(const char *fn, const dlc_tensor *x) {
    char a[64];
    if (!x) {
        dlc_error(DLC_ERR_ARG, "%s: x is NULL", fn);
        return 0;
    }
    if (x->ndim < 1) {
        dlc_error(DLC_ERR_SHAPE, "%s: x %s is a scalar: need at least one dim (the op runs over the last)",
                  fn, SHP(x, a));
        return 0;
    }
    return 1;
}

/* ---- softmax / log_softmax over the last dim ---- */

DLC_HOT static dlc_tensor *softmax_forward(dlc_tensor *x, int log) {
    const char *fn = log ? "log_softmax" : "softmax";
    if (!check_last_dim(fn, x)) return NULL;
    int64_t C = x->shape[x->ndim - 1], R = rows_of(x);
    dlc_tensor *out = dlc_tensor_new(x->ndim, x->shape);
    if (!out) return NULL;
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x->data + r * C;
        float *yr = out->data + r * C;
        float m = -INFINITY, sum = 0.0f;
        DLC_SIMD_REDUCE(max : m)
        for (int64_t j = 0; j < C; j++) m = xr[j] > m ? xr[j] : m;
        DLC_SIMD_REDUCE(+ : sum)
        for (int64_t j = 0; j < C; j++) {
            yr[j] = dlcx_expf(xr[j] - m);
            sum += yr[j];
        }
        if (log) {
            float ls = logf(sum); /* (x - m) - ls keeps precision for large logits */
            for (int64_t j = 0; j < C; j++) yr[j] = (xr[j] - m) - ls;
        } else {
            float inv = 1.0f / sum;
            for (int64_t j = 0; j < C; j++) yr[j] *= inv;
        }
    }
    dlc_tensor *in[1] = {x};
    if (dlcx_should_record(1, in) &&
        !attach(out, log ? DLC_OP_LOG_SOFTMAX : DLC_OP_SOFTMAX, 1, in, NULL, NULL))
        return NULL;
    return out;
}

dlc_tensor *dlc_softmax(dlc_tensor *x) { return softmax_forward(x, 0); }
dlc_tensor *dlc_log_softmax(dlc_tensor *x) { return softmax_forward(x, 1); }

/* dx = y * (g - sum(g * y)) */
DLC_HOT dlc_status dlcx_softmax_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    float *dx = dlcx_grad(n->in[0], &err);
    if (!dx) return err;
    int64_t C = out->shape[out->ndim - 1], R = rows_of(out);
    for (int64_t r = 0; r < R; r++) {
        const float *y = out->data + r * C, *gr = g + r * C;
        float *d = dx + r * C, dot = 0.0f;
        DLC_SIMD_REDUCE(+ : dot)
        for (int64_t j = 0; j < C; j++) dot += gr[j] * y[j];
        for (int64_t j = 0; j < C; j++) d[j] += y[j] * (gr[j] - dot);
    }
    return DLC_OK;
}

/* dx = g - softmax * sum(g), softmax = exp(y) */
DLC_HOT dlc_status dlcx_log_softmax_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    float *dx = dlcx_grad(n->in[0], &err);
    if (!dx) return err;
    int64_t C = out->shape[out->ndim - 1], R = rows_of(out);
    for (int64_t r = 0; r < R; r++) {
        const float *y = out->data + r * C, *gr = g + r * C;
        float *d = dx + r * C, sum = 0.0f;
        DLC_SIMD_REDUCE(+ : sum)
        for (int64_t j = 0; j < C; j++) sum += gr[j];
        for (int64_t j = 0; j < C; j++) d[j] += gr[j] - dlcx_expf(y[j]) * sum;
    }
    return DLC_OK;
}

/* ---- cross-entropy: fused log-softmax + NLL, mean over non-ignored rows ----
 * saved[0] = per-row logsumexp [N]; i[0] = counted rows; i[1] = ignore_index. */

DLC_HOT dlc_tensor *dlc_cross_entropy(dlc_tensor *logits, dlc_tensor *targets, int ignore_index) {
    char a[64], b[64];
    if (!logits || !targets) FAIL(DLC_ERR_ARG, "cross_entropy: logits or targets is NULL");
    if (logits->ndim != 2)
        FAIL(DLC_ERR_SHAPE, "cross_entropy: logits %s: expected [N, V] (2 dims)", SHP(logits, a));
    int64_t N = logits->shape[0], V = logits->shape[1];
    if (targets->ndim != 1 || targets->shape[0] != N)
        FAIL(DLC_ERR_SHAPE, "cross_entropy: logits %s and targets %s: targets must be [%lld]",
             SHP(logits, a), SHP(targets, b), (long long)N);
    if (dlcx_check_index("cross_entropy", targets, V, ignore_index) != DLC_OK) return NULL;

    dlc_tensor *in[2] = {logits, targets};
    int rec = dlcx_should_record(1, in);
    dlc_tensor *out = dlc_tensor_new(0, NULL);
    dlc_tensor *lse = rec ? dlc_tensor_new(1, &N) : NULL;
    if (!out || (rec && !lse)) {
        dlc_tensor_release(out);
        dlc_tensor_release(lse);
        return NULL;
    }
    double loss = 0.0;
    int64_t count = 0;
    for (int64_t r = 0; r < N; r++) {
        float t = targets->data[r];
        if (t == (float)ignore_index) {
            if (lse) lse->data[r] = 0.0f;
            continue;
        }
        const float *xr = logits->data + r * V;
        float m = -INFINITY, sum = 0.0f;
        DLC_SIMD_REDUCE(max : m)
        for (int64_t j = 0; j < V; j++) m = xr[j] > m ? xr[j] : m;
        DLC_SIMD_REDUCE(+ : sum)
        for (int64_t j = 0; j < V; j++) sum += dlcx_expf(xr[j] - m);
        float ls = logf(sum);
        if (lse) lse->data[r] = m + ls;
        loss += (double)(m - xr[(int64_t)t]) + (double)ls;
        count++;
    }
    out->data[0] = count ? (float)(loss / (double)count) : 0.0f;
    if (rec) {
        dlc_node *nd = attach(out, DLC_OP_CROSS_ENTROPY, 2, in, lse, NULL);
        if (!nd) return NULL;
        nd->i[0] = count;
        nd->i[1] = ignore_index;
    }
    return out;
}

/* dlogits[r] += g / count * (softmax(logits[r]) - onehot(target[r])) */
DLC_HOT dlc_status dlcx_cross_entropy_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *logits = n->in[0], *targets = n->in[1];
    float *dx = dlcx_grad(logits, &err);
    if (!dx) return err;
    int64_t count = n->i[0], N = logits->shape[0], V = logits->shape[1];
    if (count == 0) return DLC_OK;
    float ignore = (float)n->i[1], s = g[0] / (float)count;
    const float *lse = n->saved[0]->data;
    for (int64_t r = 0; r < N; r++) {
        float t = targets->data[r];
        if (t == ignore) continue;
        const float *xr = logits->data + r * V;
        float *d = dx + r * V, l = lse[r];
        for (int64_t j = 0; j < V; j++) d[j] += s * dlcx_expf(xr[j] - l);
        d[(int64_t)t] -= s;
    }
    return DLC_OK;
}

/* ---- layernorm and rmsnorm over the last dim ---- */

static int check_norm_param(const char *fn, const char *what, const dlc_tensor *x,
                            const dlc_tensor *p) {
    char a[64], b[64];
    int64_t C = x->shape[x->ndim - 1];
    if (p && (p->ndim != 1 || p->shape[0] != C)) {
        dlc_error(DLC_ERR_SHAPE, "%s: x %s and %s %s: %s must have the size of the last dim (%lld)",
                  fn, SHP(x, a), what, SHP(p, b), what, (long long)C);
        return 0;
    }
    return 1;
}

static int check_eps(const char *fn, float eps) {
    if (!(eps >= 0.0f) || !isfinite(eps)) {
        dlc_error(DLC_ERR_ARG, "%s: eps = %g: must be finite and >= 0", fn, (double)eps);
        return 0;
    }
    return 1;
}

/* saved[0] = mean [R], saved[1] = rstd [R]. */
DLC_HOT dlc_tensor *dlc_layernorm(dlc_tensor *x, dlc_tensor *w, dlc_tensor *b, float eps) {
    if (!check_last_dim("layernorm", x) || !check_norm_param("layernorm", "weight", x, w) ||
        !check_norm_param("layernorm", "bias", x, b) || !check_eps("layernorm", eps))
        return NULL;
    int64_t C = x->shape[x->ndim - 1], R = rows_of(x);
    dlc_tensor *in[3] = {x, w, b};
    int rec = dlcx_should_record(3, in);
    dlc_tensor *out = dlc_tensor_new(x->ndim, x->shape);
    dlc_tensor *mean = rec ? dlc_tensor_new(1, &R) : NULL, *rstd = rec ? dlc_tensor_new(1, &R) : NULL;
    if (!out || (rec && (!mean || !rstd))) {
        dlc_tensor_release(out);
        dlc_tensor_release(mean);
        dlc_tensor_release(rstd);
        return NULL;
    }
    float invC = C ? 1.0f / (float)C : 0.0f;
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x->data + r * C;
        float *y = out->data + r * C, m = 0.0f, v = 0.0f;
        DLC_SIMD_REDUCE(+ : m)
        for (int64_t j = 0; j < C; j++) m += xr[j];
        m *= invC;
        DLC_SIMD_REDUCE(+ : v)
        for (int64_t j = 0; j < C; j++) v += (xr[j] - m) * (xr[j] - m);
        float s = 1.0f / sqrtf(v * invC + eps);
        for (int64_t j = 0; j < C; j++) y[j] = (xr[j] - m) * s;
        if (w)
            for (int64_t j = 0; j < C; j++) y[j] *= w->data[j];
        if (b)
            for (int64_t j = 0; j < C; j++) y[j] += b->data[j];
        if (rec) {
            mean->data[r] = m;
            rstd->data[r] = s;
        }
    }
    if (rec && !attach(out, DLC_OP_LAYERNORM, 3, in, mean, rstd)) return NULL;
    return out;
}

/* xhat = (x - mean) rstd, dn = g w:
 * dx += rstd (dn - mean(dn) - xhat mean(dn xhat)); dw += g xhat; db += g. */
DLC_HOT dlc_status dlcx_layernorm_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *x = n->in[0], *w = n->in[1];
    float *dx = dlcx_grad(x, &err), *dw = dlcx_grad(w, &err), *db = dlcx_grad(n->in[2], &err);
    if (err != DLC_OK) return err;
    int64_t C = x->shape[x->ndim - 1], R = rows_of(x);
    const float *mean = n->saved[0]->data, *rstd = n->saved[1]->data, *wd = w ? w->data : NULL;
    float invC = C ? 1.0f / (float)C : 0.0f;
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x->data + r * C, *gr = g + r * C;
        float m = mean[r], s = rstd[r], sdn = 0.0f, sdnx = 0.0f;
        if (wd) {
            DLC_SIMD_REDUCE(+ : sdn, sdnx)
            for (int64_t j = 0; j < C; j++) {
                float dn = gr[j] * wd[j];
                sdn += dn;
                sdnx += dn * (xr[j] - m) * s;
            }
        } else {
            DLC_SIMD_REDUCE(+ : sdn, sdnx)
            for (int64_t j = 0; j < C; j++) {
                sdn += gr[j];
                sdnx += gr[j] * (xr[j] - m) * s;
            }
        }
        sdn *= invC;
        sdnx *= invC;
        if (dx) { /* dx, dw, db are gradient buffers, never x or g themselves */
            float *d = dx + r * C;
            if (wd) {
                DLC_PRAGMA(omp simd)
                for (int64_t j = 0; j < C; j++) d[j] += s * (gr[j] * wd[j] - sdn - (xr[j] - m) * s * sdnx);
            } else {
                DLC_PRAGMA(omp simd)
                for (int64_t j = 0; j < C; j++) d[j] += s * (gr[j] - sdn - (xr[j] - m) * s * sdnx);
            }
        }
        if (dw) {
            DLC_PRAGMA(omp simd)
            for (int64_t j = 0; j < C; j++) dw[j] += gr[j] * (xr[j] - m) * s;
        }
        if (db) {
            DLC_PRAGMA(omp simd)
            for (int64_t j = 0; j < C; j++) db[j] += gr[j];
        }
    }
    return DLC_OK;
}

/* y = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps); saved[0] = rstd [R]. */
DLC_HOT dlc_tensor *dlc_rmsnorm(dlc_tensor *x, dlc_tensor *w, float eps) {
    if (!check_last_dim("rmsnorm", x) || !check_norm_param("rmsnorm", "weight", x, w) ||
        !check_eps("rmsnorm", eps))
        return NULL;
    int64_t C = x->shape[x->ndim - 1], R = rows_of(x);
    dlc_tensor *in[2] = {x, w};
    int rec = dlcx_should_record(2, in);
    dlc_tensor *out = dlc_tensor_new(x->ndim, x->shape);
    dlc_tensor *rstd = rec ? dlc_tensor_new(1, &R) : NULL;
    if (!out || (rec && !rstd)) {
        dlc_tensor_release(out);
        dlc_tensor_release(rstd);
        return NULL;
    }
    float invC = C ? 1.0f / (float)C : 0.0f;
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x->data + r * C;
        float *y = out->data + r * C, ss = 0.0f;
        DLC_SIMD_REDUCE(+ : ss)
        for (int64_t j = 0; j < C; j++) ss += xr[j] * xr[j];
        float s = 1.0f / sqrtf(ss * invC + eps);
        for (int64_t j = 0; j < C; j++) y[j] = xr[j] * s;
        if (w)
            for (int64_t j = 0; j < C; j++) y[j] *= w->data[j];
        if (rec) rstd->data[r] = s;
    }
    if (rec && !attach(out, DLC_OP_RMSNORM, 2, in, rstd, NULL)) return NULL;
    return out;
}

/* xhat = x rstd, dn = g w: dx += rstd (dn - xhat mean(dn xhat)); dw += g xhat. */
DLC_HOT dlc_status dlcx_rmsnorm_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *x = n->in[0], *w = n->in[1];
    float *dx = dlcx_grad(x, &err), *dw = dlcx_grad(w, &err);
    if (err != DLC_OK) return err;
    int64_t C = x->shape[x->ndim - 1], R = rows_of(x);
    const float *rstd = n->saved[0]->data;
    float invC = C ? 1.0f / (float)C : 0.0f;
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x->data + r * C, *gr = g + r * C;
        float s = rstd[r], sdnx = 0.0f;
        DLC_SIMD_REDUCE(+ : sdnx)
        for (int64_t j = 0; j < C; j++) sdnx += gr[j] * (w ? w->data[j] : 1.0f) * xr[j] * s;
        sdnx *= invC;
        if (dx) {
            float *d = dx + r * C;
            for (int64_t j = 0; j < C; j++)
                d[j] += s * (gr[j] * (w ? w->data[j] : 1.0f) - xr[j] * s * sdnx);
        }
        if (dw)
            for (int64_t j = 0; j < C; j++) dw[j] += gr[j] * xr[j] * s;
    }
    return DLC_OK;
}

/* ---- index_select / embedding: rows of x [N, ...] picked by idx [I...] ---- */

static dlc_tensor *select_rows(const char *fn, dlc_tensor *x, dlc_tensor *idx) {
    char a[64], b[64];
    if (!x || !idx) FAIL(DLC_ERR_ARG, "%s: table or idx is NULL", fn);
    if (x->ndim < 1) FAIL(DLC_ERR_SHAPE, "%s: table %s is a scalar: need [N, ...]", fn, SHP(x, a));
    int ndim = idx->ndim + x->ndim - 1;
    if (ndim > DLC_MAX_DIMS)
        FAIL(DLC_ERR_SHAPE, "%s: table %s and idx %s give a %d-dim result: at most %d dims",
             fn, SHP(x, a), SHP(idx, b), ndim, DLC_MAX_DIMS);
    if (dlcx_check_index(fn, idx, x->shape[0], INT64_MIN) != DLC_OK) return NULL;
    int64_t shape[DLC_MAX_DIMS], D = 1;
    for (int i = 0; i < idx->ndim; i++) shape[i] = idx->shape[i];
    for (int i = 1; i < x->ndim; i++) {
        shape[idx->ndim + i - 1] = x->shape[i];
        D *= x->shape[i];
    }
    dlc_tensor *out = dlc_tensor_new(ndim, shape);
    if (!out) return NULL;
    for (int64_t i = 0; i < idx->numel; i++)
        memcpy(out->data + i * D, x->data + (int64_t)idx->data[i] * D, (size_t)D * sizeof(float));
    dlc_tensor *in[2] = {x, idx};
    if (dlcx_should_record(1, in) && !attach(out, DLC_OP_INDEX_SELECT, 2, in, NULL, NULL))
        return NULL;
    return out;
}

dlc_tensor *dlc_index_select(dlc_tensor *x, dlc_tensor *idx) {
    return select_rows("index_select", x, idx);
}

dlc_tensor *dlc_embedding(dlc_tensor *weight, dlc_tensor *idx) {
    return select_rows("embedding", weight, idx);
}

/* dx[idx[i]] += g[i] (repeated indices accumulate) */
dlc_status dlcx_index_select_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *x = n->in[0], *idx = n->in[1];
    float *dx = dlcx_grad(x, &err);
    if (!dx) return err;
    int64_t D = x->shape[0] ? x->numel / x->shape[0] : 0;
    for (int64_t i = 0; i < idx->numel; i++) {
        float *d = dx + (int64_t)idx->data[i] * D;
        const float *gi = g + i * D;
        for (int64_t j = 0; j < D; j++) d[j] += gi[j];
    }
    return DLC_OK;
}

/* ---- index_add: base [N, ...] + rows of src [M, ...] at idx [M] ---- */

dlc_tensor *dlc_index_add(dlc_tensor *base, dlc_tensor *idx, dlc_tensor *src) {
    char a[64], b[64], c[64];
    if (!base || !idx || !src) FAIL(DLC_ERR_ARG, "index_add: base, idx or src is NULL");
    if (base->ndim < 1)
        FAIL(DLC_ERR_SHAPE, "index_add: base %s is a scalar: need [N, ...]", SHP(base, a));
    if (idx->ndim != 1)
        FAIL(DLC_ERR_SHAPE, "index_add: idx %s: expected a 1-dim [M] index", SHP(idx, a));
    int same = src->ndim == base->ndim && src->shape[0] == idx->shape[0];
    for (int i = 1; same && i < base->ndim; i++) same = src->shape[i] == base->shape[i];
    if (!same)
        FAIL(DLC_ERR_SHAPE,
             "index_add: base %s, idx %s, src %s: src must be [%lld, ...] with base's trailing dims",
             SHP(base, a), SHP(idx, b), SHP(src, c), (long long)idx->shape[0]);
    if (dlcx_check_index("index_add", idx, base->shape[0], INT64_MIN) != DLC_OK) return NULL;
    int64_t D = base->shape[0] ? base->numel / base->shape[0] : 0;
    dlc_tensor *out = dlc_tensor_clone(base);
    if (!out) return NULL;
    for (int64_t m = 0; m < idx->numel; m++) {
        float *o = out->data + (int64_t)idx->data[m] * D;
        const float *s = src->data + m * D;
        for (int64_t j = 0; j < D; j++) o[j] += s[j];
    }
    dlc_tensor *in[3] = {base, idx, src}, *grads[2] = {base, src};
    if (dlcx_should_record(2, grads) && !attach(out, DLC_OP_INDEX_ADD, 3, in, NULL, NULL))
        return NULL;
    return out;
}

/* dbase += g; dsrc[m] += g[idx[m]] */
dlc_status dlcx_index_add_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *base = n->in[0], *idx = n->in[1], *src = n->in[2];
    float *db = dlcx_grad(base, &err), *ds = dlcx_grad(src, &err);
    if (err != DLC_OK) return err;
    if (db)
        for (int64_t i = 0; i < base->numel; i++) db[i] += g[i];
    if (ds) {
        int64_t D = base->shape[0] ? base->numel / base->shape[0] : 0;
        for (int64_t m = 0; m < idx->numel; m++) {
            const float *gr = g + (int64_t)idx->data[m] * D;
            float *d = ds + m * D;
            for (int64_t j = 0; j < D; j++) d[j] += gr[j];
        }
    }
    return DLC_OK;
}

/* ---- gather along the last dim: x [..., E], idx [..., k] -> [..., k] ---- */

dlc_tensor *dlc_gather(dlc_tensor *x, dlc_tensor *idx) {
    char a[64], b[64];
    if (!x || !idx) FAIL(DLC_ERR_ARG, "gather: x or idx is NULL");
    int same = x->ndim >= 1 && idx->ndim == x->ndim;
    for (int i = 0; same && i + 1 < x->ndim; i++) same = x->shape[i] == idx->shape[i];
    if (!same)
        FAIL(DLC_ERR_SHAPE, "gather: x %s and idx %s: idx must have x's dims except the last",
             SHP(x, a), SHP(idx, b));
    int64_t E = x->shape[x->ndim - 1];
    if (dlcx_check_index("gather", idx, E, INT64_MIN) != DLC_OK) return NULL;
    int64_t K = idx->shape[idx->ndim - 1], R = rows_of(x);
    dlc_tensor *out = dlc_tensor_new(idx->ndim, idx->shape);
    if (!out) return NULL;
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x->data + r * E, *ir = idx->data + r * K;
        float *o = out->data + r * K;
        for (int64_t j = 0; j < K; j++) o[j] = xr[(int64_t)ir[j]];
    }
    dlc_tensor *in[2] = {x, idx};
    if (dlcx_should_record(1, in) && !attach(out, DLC_OP_GATHER, 2, in, NULL, NULL)) return NULL;
    return out;
}

/* dx[r, idx[r, j]] += g[r, j] */
dlc_status dlcx_gather_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *x = n->in[0], *idx = n->in[1];
    float *dx = dlcx_grad(x, &err);
    if (!dx) return err;
    int64_t E = x->shape[x->ndim - 1], K = idx->shape[idx->ndim - 1], R = rows_of(x);
    for (int64_t r = 0; r < R; r++) {
        const float *ir = idx->data + r * K, *gr = g + r * K;
        float *d = dx + r * E;
        for (int64_t j = 0; j < K; j++) d[(int64_t)ir[j]] += gr[j];
    }
    return DLC_OK;
}

/* ---- top-k along the last dim ----
 * A size-k heap whose root is the lowest-ranked entry kept so far, then heapsort:
 * O(E log k) per row.  Rank: larger value first, ties by lower index, NaN highest. */

static inline int ranks_below(float va, float ia, float vb, float ib) {
    if (va != va) return vb != vb && ia > ib;
    if (vb != vb) return 1;
    return va < vb || (va == vb && ia > ib);
}

static void heap_sift_down(float *hv, float *hi, int64_t n, int64_t p) {
    for (;;) {
        int64_t c = 2 * p + 1;
        if (c >= n) return;
        if (c + 1 < n && ranks_below(hv[c + 1], hi[c + 1], hv[c], hi[c])) c++;
        if (!ranks_below(hv[c], hi[c], hv[p], hi[p])) return;
        float tv = hv[p], ti = hi[p];
        hv[p] = hv[c], hi[p] = hi[c];
        hv[c] = tv, hi[c] = ti;
        p = c;
    }
}

static void heap_sift_up(float *hv, float *hi, int64_t p) {
    while (p > 0) {
        int64_t q = (p - 1) / 2;
        if (!ranks_below(hv[p], hi[p], hv[q], hi[q])) return;
        float tv = hv[p], ti = hi[p];
        hv[p] = hv[q], hi[p] = hi[q];
        hv[q] = tv, hi[q] = ti;
        p = q;
    }
}

dlc_status dlc_topk(dlc_tensor *x, int k, dlc_tensor **values, dlc_tensor **indices) {
    char a[64];
    if (!values || !indices) return dlc_error(DLC_ERR_ARG, "topk: values or indices is NULL");
    *values = *indices = NULL;
    if (!check_last_dim("topk", x)) return dlc_last_status();
    int64_t E = x->shape[x->ndim - 1], R = rows_of(x), K = k;
    if (k < 0 || K > E)
        return dlc_error(DLC_ERR_ARG, "topk: k = %d with x %s: k must be in [0, %lld]", k,
                         SHP(x, a), (long long)E);
    if (E > (1 << 24))
        return dlc_error(DLC_ERR_ARG, "topk: x %s: the last dim must be at most 2^24 (f32 indices)",
                         SHP(x, a));
    int64_t shape[DLC_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = K;
    dlc_tensor *ind = dlc_tensor_new(x->ndim, shape);
    dlc_tensor *heapv = dlc_tensor_new(1, &K);
    if (!ind || !heapv) {
        dlc_tensor_release(ind);
        dlc_tensor_release(heapv);
        return dlc_last_status();
    }
    float *hv = heapv->data;
    for (int64_t r = 0; r < R && K > 0; r++) {
        const float *xr = x->data + r * E;
        float *hi = ind->data + r * K;
        int64_t cnt = 0;
        for (int64_t j = 0; j < E; j++) {
            if (cnt < K) {
                hv[cnt] = xr[j];
                hi[cnt] = (float)j;
                heap_sift_up(hv, hi, cnt++);
            } else if (ranks_below(hv[0], hi[0], xr[j], (float)j)) {
                hv[0] = xr[j];
                hi[0] = (float)j;
                heap_sift_down(hv, hi, K, 0);
            }
        }
        for (int64_t end = K - 1; end > 0; end--) {
            float tv = hv[0], ti = hi[0];
            hv[0] = hv[end], hi[0] = hi[end];
            hv[end] = tv, hi[end] = ti;
            heap_sift_down(hv, hi, end, 0);
        }
    }
    dlc_tensor_release(heapv);
    dlc_tensor *val = dlc_gather(x, ind);
    if (!val) {
        dlc_tensor_release(ind);
        return dlc_last_status();
    }
    *values = val;
    *indices = ind;
    return DLC_OK;
}

/* ---- multi-head attention (causal or not) ----
 * qkv [B, T, 3C]; per (batch, head) q, k, v are [T, hd] matrices read in place with
 * leading dimension 3C.  Rows are processed in blocks of ATT_BLOCK; when causal, the
 * scores above the diagonal block are never computed (a block of rows [r0, r1) sees
 * columns [0, r1)), otherwise every block sees all T columns.  saved[0] =
 * probabilities [B,H,T,T] (zero above the diagonal when causal); i[0] = heads,
 * i[1] = causal. */

#define ATT_BLOCK 64

DLC_HOT dlc_tensor *dlc_attention(dlc_tensor *qkv, int heads, int causal) {
    char a[64];
    if (!qkv) FAIL(DLC_ERR_ARG, "attention: qkv is NULL");
    if (qkv->ndim != 3 || qkv->shape[2] % 3 != 0 || qkv->shape[2] == 0)
        FAIL(DLC_ERR_SHAPE, "attention: qkv %s: expected [B, T, 3C] with C > 0", SHP(qkv, a));
    int64_t B = qkv->shape[0], T = qkv->shape[1], C3 = qkv->shape[2], C = C3 / 3, H = heads;
    if (heads < 1 || C % heads != 0)
        FAIL(DLC_ERR_ARG, "attention: qkv %s has C = %lld, which heads = %d does not divide",
             SHP(qkv, a), (long long)C, heads);
    if (T > INT_MAX || C3 > INT_MAX)
        FAIL(DLC_ERR_SHAPE, "attention: qkv %s: T and 3C must fit in an int (BLAS)", SHP(qkv, a));
    int64_t hd = C / H;
    float scale = 1.0f / sqrtf((float)hd);
    dlc_tensor *in[1] = {qkv};
    int rec = dlcx_should_record(1, in);
    int64_t oshape[3] = {B, T, C}, pshape[4] = {B, H, T, T};
    dlc_tensor *out = dlc_tensor_new(3, oshape);
    dlc_tensor *probs = rec ? dlc_tensor_new(4, pshape) : dlc_tensor_new(2, pshape + 2);
    if (!out || !probs) {
        dlc_tensor_release(out);
        dlc_tensor_release(probs);
        return NULL;
    }
    dlc_status st = DLC_OK;
    for (int64_t bt = 0; bt < B * H && st == DLC_OK; bt++) {
        int64_t b = bt / H, h = bt % H;
        const float *q = qkv->data + b * T * C3 + h * hd, *k = q + C, *v = q + 2 * C;
        float *p = probs->data + (rec ? bt * T * T : 0), *o = out->data + b * T * C + h * hd;
        for (int64_t r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int64_t r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
            int64_t cols = causal ? r1 : T;
            /* S[r0:r1, 0:cols] = scale Q[r0:r1] K[0:cols]^T */
            st = dlcx_sgemm(0, 1, rows, cols, hd, scale, q + r0 * C3, C3, k, C3, 0.0f, p + r0 * T, T);
            if (st != DLC_OK) break;
            for (int64_t i = r0; i < r1; i++) {
                int64_t lim = causal ? i + 1 : T;
                float *pr = p + i * T, m = -INFINITY, sum = 0.0f;
                DLC_SIMD_REDUCE(max : m)
                for (int64_t j = 0; j < lim; j++) m = pr[j] > m ? pr[j] : m;
                DLC_SIMD_REDUCE(+ : sum)
                for (int64_t j = 0; j < lim; j++) {
                    pr[j] = dlcx_expf(pr[j] - m);
                    sum += pr[j];
                }
                float inv = 1.0f / sum;
                for (int64_t j = 0; j < lim; j++) pr[j] *= inv;
                for (int64_t j = lim; j < T; j++) pr[j] = 0.0f;
            }
            /* O[r0:r1] = P[r0:r1, 0:cols] V[0:cols] */
            st = dlcx_sgemm(0, 0, rows, hd, cols, 1.0f, p + r0 * T, T, v, C3, 0.0f, o + r0 * C, C);
            if (st != DLC_OK) break;
        }
    }
    if (st != DLC_OK) {
        dlc_tensor_release(out);
        dlc_tensor_release(probs);
        return NULL;
    }
    if (!rec) {
        dlc_tensor_release(probs);
        return out;
    }
    dlc_node *nd = attach(out, DLC_OP_ATTENTION, 1, in, probs, NULL);
    if (!nd) return NULL;
    nd->i[0] = heads;
    nd->i[1] = causal != 0;
    return out;
}

/* dP = dO V^T; dV += P^T dO; dS = P (dP - rowsum(dP P)) scale; dQ += dS K; dK += dS^T Q. */
DLC_HOT dlc_status dlcx_attention_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *qkv = n->in[0];
    float *dqkv = dlcx_grad(qkv, &err);
    if (!dqkv) return err;
    int64_t B = qkv->shape[0], T = qkv->shape[1], C3 = qkv->shape[2], C = C3 / 3, H = n->i[0];
    int64_t hd = C / H, tt[2] = {T, T}, causal = n->i[1];
    float scale = 1.0f / sqrtf((float)hd);
    dlc_tensor *scratch = dlc_tensor_new(2, tt);
    if (!scratch) return dlc_last_status();
    float *ds = scratch->data;
    for (int64_t bt = 0; bt < B * H && err == DLC_OK; bt++) {
        int64_t b = bt / H, h = bt % H, off = b * T * C3 + h * hd;
        const float *q = qkv->data + off, *k = q + C, *v = q + 2 * C;
        const float *p = n->saved[0]->data + bt * T * T, *go = g + b * T * C + h * hd;
        float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
        for (int64_t r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int64_t r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
            int64_t cols = causal ? r1 : T;
            /* dP[r0:r1, 0:cols] = dO[r0:r1] V[0:cols]^T */
            err = dlcx_sgemm(0, 1, rows, cols, hd, 1.0f, go + r0 * C, C, v, C3, 0.0f, ds + r0 * T, T);
            /* dV[0:cols] += P[r0:r1, 0:cols]^T dO[r0:r1] */
            if (err == DLC_OK)
                err = dlcx_sgemm(1, 0, cols, hd, rows, 1.0f, p + r0 * T, T, go + r0 * C, C, 1.0f, dv, C3);
            if (err != DLC_OK) break;
            for (int64_t i = r0; i < r1; i++) {
                int64_t lim = causal ? i + 1 : T;
                const float *pr = p + i * T;
                float *d = ds + i * T, dot = 0.0f;
                DLC_SIMD_REDUCE(+ : dot)
                for (int64_t j = 0; j < lim; j++) dot += d[j] * pr[j];
                for (int64_t j = 0; j < lim; j++) d[j] = pr[j] * (d[j] - dot) * scale;
                for (int64_t j = lim; j < cols; j++) d[j] = 0.0f;
            }
            /* dQ[r0:r1] += dS[r0:r1, 0:cols] K[0:cols] */
            err = dlcx_sgemm(0, 0, rows, hd, cols, 1.0f, ds + r0 * T, T, k, C3, 1.0f, dq + r0 * C3, C3);
            /* dK[0:cols] += dS[r0:r1, 0:cols]^T Q[r0:r1] */
            if (err == DLC_OK)
                err = dlcx_sgemm(1, 0, cols, hd, rows, 1.0f, ds + r0 * T, T, q + r0 * C3, C3, 1.0f, dk, C3);
            if (err != DLC_OK) break;
        }
    }
    dlc_tensor_release(scratch);
    return err;
}

/* ---- dropout: saved[0] = mask (0 or 1/(1-p)) ---- */

dlc_tensor *dlc_dropout(dlc_tensor *x, float p, dlc_rng *g) {
    if (!x || !g) FAIL(DLC_ERR_ARG, "dropout: x or rng is NULL");
    if (!(p >= 0.0f && p < 1.0f))
        FAIL(DLC_ERR_ARG, "dropout: p = %g: must be in [0, 1)", (double)p);
    if (p == 0.0f) return dlc_tensor_retain(x);
    dlc_tensor *out = dlc_tensor_new(x->ndim, x->shape), *mask = dlc_tensor_new(x->ndim, x->shape);
    if (!out || !mask) {
        dlc_tensor_release(out);
        dlc_tensor_release(mask);
        return NULL;
    }
    float keep = 1.0f / (1.0f - p), *mk = mask->data;
    dlc_rng_uniform(g, mk, x->numel, 0.0f, 1.0f);
    for (int64_t i = 0; i < x->numel; i++) {
        mk[i] = mk[i] < p ? 0.0f : keep;
        out->data[i] = x->data[i] * mk[i];
    }
    dlc_tensor *in[1] = {x};
    if (!dlcx_should_record(1, in)) {
        dlc_tensor_release(mask);
        return out;
    }
    if (!attach(out, DLC_OP_DROPOUT, 1, in, mask, NULL)) return NULL;
    return out;
}

dlc_status dlcx_dropout_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    float *dx = dlcx_grad(n->in[0], &err);
    if (!dx) return err;
    const float *mk = n->saved[0]->data;
    for (int64_t i = 0; i < out->numel; i++) dx[i] += g[i] * mk[i];
    return DLC_OK;
}
