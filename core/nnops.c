/* nnops.c - softmax, cross-entropy, norms, indexing, top-k and dropout (attention is
 * core/attention.c).  Each forward sits next to its backward; backwards ACCUMULATE into the
 * inputs' gradient buffers (dlcx_grad).  Index inputs are recorded so the node keeps
 * them alive, but they never receive a gradient. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/ops.h"
#include "internal.h"

/* Rows of a [..., C] tensor: the product of every dim but the last. */
static int64_t rows_of(const dlc_tensor *x) {
    int64_t r = 1;
    for (int i = 0; i + 1 < x->ndim; i++) r *= x->shape[i];
    return r;
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

/* ---- softmax / log_softmax over the last dim ----
 * Every row-wise kernel below runs on rows [r0, r1) of a context, so dlcx_parallel_for
 * can hand each compute thread a block of rows; results do not depend on the split. */

typedef struct {
    float *y, *dx;          /* output, or the input's gradient (backward) */
    const float *x, *g;     /* input (or the forward's output), output gradient */
    int64_t C;
    int log;
} softmax_ctx;

DLC_HOT static void softmax_rows(void *ctx, int64_t r0, int64_t r1, int part) {
    const softmax_ctx *c = ctx;
    int64_t C = c->C;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = c->x + r * C;
        float *yr = c->y + r * C;
        float m = dlcx_row_max(xr, C), sum = dlcx_exp_sum(xr, yr, C, m);
        if (c->log) {
            float ls = logf(sum); /* (x - m) - ls keeps precision for large logits */
            for (int64_t j = 0; j < C; j++) yr[j] = (xr[j] - m) - ls;
        } else {
            float inv = 1.0f / sum;
            for (int64_t j = 0; j < C; j++) yr[j] *= inv;
        }
    }
}

static dlc_tensor *softmax_forward(dlc_tensor *x, int log) {
    const char *fn = log ? "log_softmax" : "softmax";
    if (!check_last_dim(fn, x)) return NULL;
    int64_t C = x->shape[x->ndim - 1], R = rows_of(x);
    dlc_tensor *out = dlc_tensor_new(x->ndim, x->shape);
    if (!out) return NULL;
    softmax_ctx c = {.y = out->data, .x = x->data, .C = C, .log = log};
    dlcx_parallel_for(R, 3 * R * C, softmax_rows, &c);
    dlc_tensor *in[1] = {x};
    if (dlcx_should_record(1, in) &&
        !dlcx_attach(out, log ? DLC_OP_LOG_SOFTMAX : DLC_OP_SOFTMAX, 1, in, NULL, NULL))
        return NULL;
    return out;
}

dlc_tensor *dlc_softmax(dlc_tensor *x) { return softmax_forward(x, 0); }
dlc_tensor *dlc_log_softmax(dlc_tensor *x) { return softmax_forward(x, 1); }

/* softmax: dx = y * (g - sum(g * y)); log_softmax: dx = g - exp(y) * sum(g) */
DLC_HOT static void softmax_backward_rows(void *ctx, int64_t r0, int64_t r1, int part) {
    const softmax_ctx *c = ctx;
    int64_t C = c->C;
    for (int64_t r = r0; r < r1; r++) {
        const float *y = c->x + r * C, *gr = c->g + r * C;
        float *d = c->dx + r * C, acc = 0.0f;
        if (c->log) {
            DLC_SIMD_REDUCE(+ : acc)
            for (int64_t j = 0; j < C; j++) acc += gr[j];
            for (int64_t j = 0; j < C; j++) d[j] += gr[j] - dlcx_expf(y[j]) * acc;
        } else {
            DLC_SIMD_REDUCE(+ : acc)
            for (int64_t j = 0; j < C; j++) acc += gr[j] * y[j];
            for (int64_t j = 0; j < C; j++) d[j] += y[j] * (gr[j] - acc);
        }
    }
}

static dlc_status softmax_backward(dlc_node *n, dlc_tensor *out, const float *g, int log) {
    dlc_status err = DLC_OK;
    float *dx = dlcx_grad(n->in[0], &err);
    if (!dx) return err;
    int64_t C = out->shape[out->ndim - 1], R = rows_of(out);
    softmax_ctx c = {.dx = dx, .x = out->data, .g = g, .C = C, .log = log};
    dlcx_parallel_for(R, 3 * R * C, softmax_backward_rows, &c);
    return DLC_OK;
}

dlc_status dlcx_softmax_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    return softmax_backward(n, out, g, 0);
}

dlc_status dlcx_log_softmax_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    return softmax_backward(n, out, g, 1);
}

/* ---- cross-entropy: fused log-softmax + NLL, mean over non-ignored rows ----
 * saved[0] = per-row logsumexp [N]; i[0] = counted rows; i[1] = ignore_index. */

typedef struct {
    const float *logits, *targets, *lse;
    float *lse_out, *dx;  /* forward: logsumexp per row (or NULL); backward: dlogits */
    double *row_loss;     /* forward: [N] */
    int64_t V;
    float ignore, s;      /* s: backward scale g / count */
} ce_ctx;

DLC_HOT static void ce_rows(void *ctx, int64_t r0, int64_t r1, int part) {
    const ce_ctx *c = ctx;
    int64_t V = c->V;
    for (int64_t r = r0; r < r1; r++) {
        float t = c->targets[r];
        if (t == c->ignore) {
            if (c->lse_out) c->lse_out[r] = 0.0f;
            c->row_loss[r] = 0.0;
            continue;
        }
        const float *xr = c->logits + r * V;
        float m = dlcx_row_max(xr, V), sum = 0.0f;
        DLC_SIMD_REDUCE(+ : sum)
        for (int64_t j = 0; j < V; j++) sum += dlcx_expf(xr[j] - m);
        float ls = logf(sum);
        if (c->lse_out) c->lse_out[r] = m + ls;
        c->row_loss[r] = (double)(m - xr[(int64_t)t]) + (double)ls;
    }
}

dlc_tensor *dlc_cross_entropy(dlc_tensor *logits, dlc_tensor *targets, int ignore_index) {
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
    /* per-row losses, summed in row order afterwards: the same sum at any thread count */
    double *row_loss = malloc((size_t)(N ? N : 1) * sizeof(double));
    if (!out || (rec && !lse) || !row_loss) {
        if (!row_loss) dlc_error(DLC_ERR_NOMEM, "cross_entropy: out of memory for %lld rows", (long long)N);
        free(row_loss);
        dlc_tensor_release(out);
        dlc_tensor_release(lse);
        return NULL;
    }
    float ignore = (float)ignore_index;
    ce_ctx c = {.logits = logits->data, .targets = targets->data, .lse_out = lse ? lse->data : NULL,
                .row_loss = row_loss, .V = V, .ignore = ignore};
    dlcx_parallel_for(N, 2 * N * V, ce_rows, &c);
    double loss = 0.0;
    int64_t count = 0;
    for (int64_t r = 0; r < N; r++) {
        if (targets->data[r] == ignore) continue;
        loss += row_loss[r];
        count++;
    }
    free(row_loss);
    out->data[0] = count ? (float)(loss / (double)count) : 0.0f;
    if (rec) {
        dlc_node *nd = dlcx_attach(out, DLC_OP_CROSS_ENTROPY, 2, in, lse, NULL);
        if (!nd) return NULL;
        nd->i[0] = count;
        nd->i[1] = ignore_index;
    }
    return out;
}

/* dlogits[r] += g / count * (softmax(logits[r]) - onehot(target[r])) */
DLC_HOT static void ce_backward_rows(void *ctx, int64_t r0, int64_t r1, int part) {
    const ce_ctx *c = ctx;
    int64_t V = c->V;
    float s = c->s;
    for (int64_t r = r0; r < r1; r++) {
        float t = c->targets[r];
        if (t == c->ignore) continue;
        const float *xr = c->logits + r * V;
        float *d = c->dx + r * V, l = c->lse[r];
        for (int64_t j = 0; j < V; j++) d[j] += s * dlcx_expf(xr[j] - l);
        d[(int64_t)t] -= s;
    }
}

dlc_status dlcx_cross_entropy_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *logits = n->in[0], *targets = n->in[1];
    float *dx = dlcx_grad(logits, &err);
    if (!dx) return err;
    int64_t count = n->i[0], N = logits->shape[0], V = logits->shape[1];
    if (count == 0) return DLC_OK;
    ce_ctx c = {.logits = logits->data, .targets = targets->data, .lse = n->saved[0]->data, .dx = dx,
                .V = V, .ignore = (float)n->i[1], .s = g[0] / (float)count};
    dlcx_parallel_for(N, 3 * N * V, ce_backward_rows, &c);
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

/* Forward and backward share one context.  The backward's weight and bias gradients
 * sum over rows: each chunk of NORM_CHUNK rows sums into its own partial row (part),
 * and the chunks are added in order afterwards, so the result depends on the shape
 * only, not on the thread count. */
#define NORM_CHUNK 16

typedef struct {
    const float *x, *w, *b, *g;
    float *y, *mean, *rstd;   /* forward output; saved statistics (NULL when not recorded) */
    float *dx, *dw, *db;      /* backward: gradient buffers (NULL when not needed) */
    float *part;              /* backward: [chunks][2C] partial dw | db */
    const float *smean, *srstd;
    int64_t R, C;
    float eps;
} norm_ctx;

static int64_t norm_chunks(int64_t R) { return (R + NORM_CHUNK - 1) / NORM_CHUNK; }

/* What every norm kernel starts from: its context c, the row length C, the weight wd
 * (NULL: none) and 1 / C for the row means (0 when C = 0). */
#define NORM_KERNEL_LOCALS(ctx)   \
    const norm_ctx *c = (ctx);    \
    int64_t C = c->C;             \
    const float *wd = c->w;       \
    float invC = C ? 1.0f / (float)C : 0.0f

/* saved[0] = mean [R], saved[1] = rstd [R]. */
DLC_HOT static void layernorm_rows(void *ctx, int64_t r0, int64_t r1, int part) {
    NORM_KERNEL_LOCALS(ctx);
    const float *bd = c->b;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = c->x + r * C;
        float *y = c->y + r * C, m = 0.0f, v = 0.0f;
        DLC_SIMD_REDUCE(+ : m)
        for (int64_t j = 0; j < C; j++) m += xr[j];
        m *= invC;
        DLC_SIMD_REDUCE(+ : v)
        for (int64_t j = 0; j < C; j++) v += (xr[j] - m) * (xr[j] - m);
        float s = 1.0f / sqrtf(v * invC + c->eps);
        for (int64_t j = 0; j < C; j++) y[j] = (xr[j] - m) * s;
        if (wd)
            for (int64_t j = 0; j < C; j++) y[j] *= wd[j];
        if (bd)
            for (int64_t j = 0; j < C; j++) y[j] += bd[j];
        if (c->mean) {
            c->mean[r] = m;
            c->rstd[r] = s;
        }
    }
}

/* y = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps); saved[0] = rstd [R]. */
DLC_HOT static void rmsnorm_rows(void *ctx, int64_t r0, int64_t r1, int part) {
    NORM_KERNEL_LOCALS(ctx);
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = c->x + r * C;
        float *y = c->y + r * C, ss = 0.0f;
        DLC_SIMD_REDUCE(+ : ss)
        for (int64_t j = 0; j < C; j++) ss += xr[j] * xr[j];
        float s = 1.0f / sqrtf(ss * invC + c->eps);
        for (int64_t j = 0; j < C; j++) y[j] = xr[j] * s;
        if (wd)
            for (int64_t j = 0; j < C; j++) y[j] *= wd[j];
        if (c->rstd) c->rstd[r] = s;
    }
}

/* xhat = (x - mean) rstd, dn = g w:
 * dx += rstd (dn - mean(dn) - xhat mean(dn xhat)); dw += g xhat; db += g.
 * Runs on chunks [k0, k1) of NORM_CHUNK rows. */
DLC_HOT static void layernorm_backward_chunks(void *ctx, int64_t k0, int64_t k1, int part) {
    NORM_KERNEL_LOCALS(ctx);
    for (int64_t k = k0; k < k1; k++) {
        float *pw = c->dw ? c->part + k * 2 * C : NULL, *pb = c->db ? c->part + k * 2 * C + C : NULL;
        if (pw) memset(pw, 0, (size_t)C * sizeof(float));
        if (pb) memset(pb, 0, (size_t)C * sizeof(float));
        int64_t r1 = (k + 1) * NORM_CHUNK < c->R ? (k + 1) * NORM_CHUNK : c->R;
        for (int64_t r = k * NORM_CHUNK; r < r1; r++) {
            const float *xr = c->x + r * C, *gr = c->g + r * C;
            float m = c->smean[r], s = c->srstd[r], sdn = 0.0f, sdnx = 0.0f;
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
            if (c->dx) { /* dx, dw, db are gradient buffers, never x or g themselves */
                float *d = c->dx + r * C;
                if (wd) {
                    DLC_PRAGMA(omp simd)
                    for (int64_t j = 0; j < C; j++) d[j] += s * (gr[j] * wd[j] - sdn - (xr[j] - m) * s * sdnx);
                } else {
                    DLC_PRAGMA(omp simd)
                    for (int64_t j = 0; j < C; j++) d[j] += s * (gr[j] - sdn - (xr[j] - m) * s * sdnx);
                }
            }
            if (pw) {
                DLC_PRAGMA(omp simd)
                for (int64_t j = 0; j < C; j++) pw[j] += gr[j] * (xr[j] - m) * s;
            }
            if (pb) {
                DLC_PRAGMA(omp simd)
                for (int64_t j = 0; j < C; j++) pb[j] += gr[j];
            }
        }
    }
}

/* xhat = x rstd, dn = g w: dx += rstd (dn - xhat mean(dn xhat)); dw += g xhat.
 * Runs on chunks [k0, k1) of NORM_CHUNK rows. */
DLC_HOT static void rmsnorm_backward_chunks(void *ctx, int64_t k0, int64_t k1, int part) {
    NORM_KERNEL_LOCALS(ctx);
    for (int64_t k = k0; k < k1; k++) {
        float *pw = c->dw ? c->part + k * 2 * C : NULL;
        if (pw) memset(pw, 0, (size_t)C * sizeof(float));
        int64_t r1 = (k + 1) * NORM_CHUNK < c->R ? (k + 1) * NORM_CHUNK : c->R;
        for (int64_t r = k * NORM_CHUNK; r < r1; r++) {
            const float *xr = c->x + r * C, *gr = c->g + r * C;
            float s = c->srstd[r], sdnx = 0.0f;
            DLC_SIMD_REDUCE(+ : sdnx)
            for (int64_t j = 0; j < C; j++) sdnx += gr[j] * (wd ? wd[j] : 1.0f) * xr[j] * s;
            sdnx *= invC;
            if (c->dx) {
                float *d = c->dx + r * C;
                for (int64_t j = 0; j < C; j++) d[j] += s * (gr[j] * (wd ? wd[j] : 1.0f) - xr[j] * s * sdnx);
            }
            if (pw)
                for (int64_t j = 0; j < C; j++) pw[j] += gr[j] * xr[j] * s;
        }
    }
}

/* dw += partial dw of every chunk, db likewise, in chunk order. */
static void norm_add_partials(const norm_ctx *c, int64_t chunks) {
    int64_t C = c->C;
    for (int64_t k = 0; k < chunks; k++) {
        const float *pw = c->part + k * 2 * C, *pb = pw + C;
        if (c->dw)
            for (int64_t j = 0; j < C; j++) c->dw[j] += pw[j];
        if (c->db)
            for (int64_t j = 0; j < C; j++) c->db[j] += pb[j];
    }
}

/* Scratch for the chunks' partial rows, or NULL when there are no weight gradients. */
static dlc_tensor *norm_partials(norm_ctx *c, dlc_status *err) {
    if (!c->dw && !c->db) return NULL;
    int64_t n = norm_chunks(c->R) * 2 * c->C;
    dlc_tensor *t = dlc_tensor_new(1, &n);
    if (!t) *err = dlc_last_status();
    else c->part = t->data;
    return t;
}

/* What the two norms' forwards share, after their checks.  ln: layernorm (inputs x, w, b;
 * saved mean and rstd), else rmsnorm (inputs x, w; saved rstd). */
static dlc_tensor *norm_forward(int ln, dlc_tensor *x, dlc_tensor *w, dlc_tensor *b, float eps) {
    int64_t C = x->shape[x->ndim - 1], R = rows_of(x);
    dlc_tensor *in[3] = {x, w, b};
    int n = ln ? 3 : 2, rec = dlcx_should_record(n, in);
    dlc_tensor *out = dlc_tensor_new(x->ndim, x->shape);
    dlc_tensor *mean = rec && ln ? dlc_tensor_new(1, &R) : NULL, *rstd = rec ? dlc_tensor_new(1, &R) : NULL;
    if (!out || (rec && ((ln && !mean) || !rstd))) {
        dlc_tensor_release(out);
        dlc_tensor_release(mean);
        dlc_tensor_release(rstd);
        return NULL;
    }
    norm_ctx c = {.x = x->data, .w = w ? w->data : NULL, .b = b ? b->data : NULL, .y = out->data,
                  .mean = mean ? mean->data : NULL, .rstd = rstd ? rstd->data : NULL, .R = R, .C = C,
                  .eps = eps};
    dlcx_parallel_for(R, (ln ? 3 : 2) * R * C, ln ? layernorm_rows : rmsnorm_rows, &c);
    if (rec && !dlcx_attach(out, ln ? DLC_OP_LAYERNORM : DLC_OP_RMSNORM, n, in, ln ? mean : rstd, ln ? rstd : NULL))
        return NULL;
    return out;
}

/* What the two backwards share; ln as for norm_forward. */
static dlc_status norm_backward(int ln, dlc_node *n, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *x = n->in[0], *w = n->in[1];
    float *dx = dlcx_grad(x, &err), *dw = dlcx_grad(w, &err), *db = ln ? dlcx_grad(n->in[2], &err) : NULL;
    if (err != DLC_OK) return err;
    int64_t C = x->shape[x->ndim - 1], R = rows_of(x), chunks = norm_chunks(R);
    norm_ctx c = {.x = x->data, .w = w ? w->data : NULL, .g = g, .dx = dx, .dw = dw, .db = db,
                  .smean = ln ? n->saved[0]->data : NULL, .srstd = n->saved[ln ? 1 : 0]->data, .R = R, .C = C};
    dlc_tensor *part = norm_partials(&c, &err);
    if (err != DLC_OK) return err;
    dlcx_parallel_for(chunks, 4 * R * C, ln ? layernorm_backward_chunks : rmsnorm_backward_chunks, &c);
    norm_add_partials(&c, chunks);
    dlc_tensor_release(part);
    return DLC_OK;
}

dlc_tensor *dlc_layernorm(dlc_tensor *x, dlc_tensor *w, dlc_tensor *b, float eps) {
    if (!check_last_dim("layernorm", x) || !check_norm_param("layernorm", "weight", x, w) ||
        !check_norm_param("layernorm", "bias", x, b) || !check_eps("layernorm", eps))
        return NULL;
    return norm_forward(1, x, w, b, eps);
}

dlc_status dlcx_layernorm_backward(dlc_node *n, dlc_tensor *out, const float *g) { return norm_backward(1, n, g); }

dlc_tensor *dlc_rmsnorm(dlc_tensor *x, dlc_tensor *w, float eps) {
    if (!check_last_dim("rmsnorm", x) || !check_norm_param("rmsnorm", "weight", x, w) ||
        !check_eps("rmsnorm", eps))
        return NULL;
    return norm_forward(0, x, w, NULL, eps);
}

dlc_status dlcx_rmsnorm_backward(dlc_node *n, dlc_tensor *out, const float *g) { return norm_backward(0, n, g); }

/* ---- index_select / embedding: rows of x [N, ...] picked by idx [I...] ---- */

typedef struct {
    float *out;                 /* forward: [n, D]; backward: the table's gradient [N, D] */
    const float *x, *idx, *g;   /* table [N, D], indices [n], backward: gradient [n, D] */
    int64_t n, D;
} select_ctx;

static void select_rows_range(void *ctx, int64_t i0, int64_t i1, int part) {
    const select_ctx *c = ctx;
    for (int64_t i = i0; i < i1; i++)
        memcpy(c->out + i * c->D, c->x + (int64_t)c->idx[i] * c->D, (size_t)c->D * sizeof(float));
}

/* Columns [j0, j1) of every picked row: repeated indices accumulate in index order
 * whatever the split, and no two threads write one element. */
DLC_HOT static void select_backward_cols(void *ctx, int64_t j0, int64_t j1, int part) {
    const select_ctx *c = ctx;
    int64_t D = c->D;
    for (int64_t i = 0; i < c->n; i++) {
        float *d = c->out + (int64_t)c->idx[i] * D;
        const float *gi = c->g + i * D;
        for (int64_t j = j0; j < j1; j++) d[j] += gi[j];
    }
}

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
    select_ctx c = {.out = out->data, .x = x->data, .idx = idx->data, .n = idx->numel, .D = D};
    dlcx_parallel_for(idx->numel, 2 * idx->numel * D, select_rows_range, &c);
    dlc_tensor *in[2] = {x, idx};
    if (dlcx_should_record(1, in) && !dlcx_attach(out, DLC_OP_INDEX_SELECT, 2, in, NULL, NULL))
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
    select_ctx c = {.out = dx, .idx = idx->data, .g = g, .n = idx->numel, .D = D};
    dlcx_parallel_for(D, 3 * idx->numel * D, select_backward_cols, &c);
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
    if (dlcx_should_record(2, grads) && !dlcx_attach(out, DLC_OP_INDEX_ADD, 3, in, NULL, NULL))
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
    if (dlcx_should_record(1, in) && !dlcx_attach(out, DLC_OP_GATHER, 2, in, NULL, NULL)) return NULL;
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
    if (!dlcx_attach(out, DLC_OP_DROPOUT, 1, in, mask, NULL)) return NULL;
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
