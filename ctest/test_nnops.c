/* test_nnops.c - softmax, cross-entropy, norms, indexing, top-k, attention, dropout:
 * forward values against naive double references, finite-difference gradient checks
 * for every differentiable input, accumulation, no-grad mode, and the error paths. */
#include <stdint.h>
#include <stdlib.h>
#include "check_threads.h"
#include "internal.h" /* dlcx_set_par_grain, dlcx_par_regions: the thread split */

/* ---- helpers ---- */

static dlc_tensor *mk(int ndim, const int64_t *shape, const float *data) {
    return dlc_tensor_from_data(ndim, shape, data);
}

static dlc_tensor *leaf(uint64_t seed, float std, int ndim, const int64_t *shape) {
    dlc_tensor *t = check_randn(seed, std, ndim, shape);
    dlc_tensor_set_requires_grad(t, 1);
    return t;
}

static int64_t rows(const dlc_tensor *t) {
    int64_t r = 1;
    for (int i = 0; i + 1 < t->ndim; i++) r *= t->shape[i];
    return r;
}

/* max |a - ref| over n elements */
static double maxdiff(const float *a, const double *ref, int64_t n) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - ref[i]));
    return w;
}

static int same_shape(const dlc_tensor *t, int ndim, const int64_t *shape) {
    if (t->ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return 0;
    return 1;
}

/* ---- gradcheck functions ---- */

typedef struct {
    int ignore;
    int heads;
    int noncausal; /* attention: 0 (the zero default) = causal */
    int k;
    float p;
    uint64_t seed;
} op_ctx;

static dlc_tensor *f_softmax(dlc_tensor **in, void *c) { (void)c; return dlc_softmax(in[0]); }
static dlc_tensor *f_log_softmax(dlc_tensor **in, void *c) { (void)c; return dlc_log_softmax(in[0]); }
static dlc_tensor *f_ce(dlc_tensor **in, void *c) {
    return dlc_cross_entropy(in[0], in[1], ((op_ctx *)c)->ignore);
}
static dlc_tensor *f_layernorm(dlc_tensor **in, void *c) {
    (void)c;
    return dlc_layernorm(in[0], in[1], in[2], 1e-5f);
}
static dlc_tensor *f_rmsnorm(dlc_tensor **in, void *c) {
    (void)c;
    return dlc_rmsnorm(in[0], in[1], 1e-5f);
}
static dlc_tensor *f_index_select(dlc_tensor **in, void *c) { (void)c; return dlc_index_select(in[0], in[1]); }
static dlc_tensor *f_embedding(dlc_tensor **in, void *c) { (void)c; return dlc_embedding(in[0], in[1]); }
static dlc_tensor *f_index_add(dlc_tensor **in, void *c) { (void)c; return dlc_index_add(in[0], in[1], in[2]); }
static dlc_tensor *f_gather(dlc_tensor **in, void *c) { (void)c; return dlc_gather(in[0], in[1]); }
static dlc_tensor *f_topk(dlc_tensor **in, void *c) {
    dlc_tensor *v = NULL, *i = NULL;
    if (dlc_topk(in[0], ((op_ctx *)c)->k, &v, &i) != DLC_OK) return NULL;
    dlc_tensor_release(i);
    return v;
}
static dlc_tensor *f_attention(dlc_tensor **in, void *c) {
    op_ctx *o = c;
    return dlc_attention(in[0], o->heads, !o->noncausal);
}
static dlc_tensor *f_dropout(dlc_tensor **in, void *c) {
    op_ctx *o = c;
    dlc_rng g;
    dlc_rng_init(&g, o->seed); /* same mask on every call */
    return dlc_dropout(in[0], o->p, &g);
}

/* Backward twice through two fresh graphs: every input grad must double (the
 * backward accumulates rather than overwrites). */
static void check_accumulates(const char *name, gc_fn f, void *ctx, int n, dlc_tensor **in) {
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->requires_grad) dlc_tensor_zero_grad(in[i]);
    dlc_tensor *first[3] = {0};
    for (int pass = 0; pass < 2; pass++) {
        dlc_tensor *out = f(in, ctx);
        CHECK_OK(out);
        if (!out) return;
        dlc_tensor *r = check_randn(99, 1.0f, out->ndim, out->shape);
        CHECK(dlc_backward(out, r, 0) == DLC_OK);
        dlc_tensor_release(r);
        dlc_tensor_release(out);
        for (int i = 0; i < n && pass == 0; i++)
            if (in[i] && in[i]->requires_grad && in[i]->grad) first[i] = dlc_tensor_clone(in[i]->grad);
    }
    int ok = 1;
    for (int i = 0; i < n; i++) {
        if (!first[i]) continue;
        for (int64_t j = 0; j < first[i]->numel; j++)
            if (fabsf(in[i]->grad->data[j] - 2.0f * first[i]->data[j]) >
                1e-5f * (1.0f + fabsf(first[i]->data[j])))
                ok = 0;
        dlc_tensor_release(first[i]);
    }
    if (!ok) fprintf(stderr, "accumulate %s: second backward did not add to the grad\n", name);
    CHECK(ok);
}

/* ---- softmax / log_softmax ---- */

static void test_softmax(void) {
    int64_t sh[3] = {3, 4, 5};
    dlc_tensor *x = check_randn(1, 2.0f, 3, sh);
    dlc_tensor *y = dlc_softmax(x), *ly = dlc_log_softmax(x);
    CHECK_OK(y);
    CHECK_OK(ly);
    if (y && ly) {
        CHECK(same_shape(y, 3, sh) && same_shape(ly, 3, sh));
        double ref[60], lref[60];
        for (int r = 0; r < 12; r++) {
            double m = -INFINITY, s = 0;
            for (int j = 0; j < 5; j++) m = fmax(m, x->data[r * 5 + j]);
            for (int j = 0; j < 5; j++) s += exp(x->data[r * 5 + j] - m);
            for (int j = 0; j < 5; j++) {
                ref[r * 5 + j] = exp(x->data[r * 5 + j] - m) / s;
                lref[r * 5 + j] = x->data[r * 5 + j] - m - log(s);
            }
        }
        CHECK(maxdiff(y->data, ref, 60) < 1e-6);
        CHECK(maxdiff(ly->data, lref, 60) < 2e-6);
        CHECK(y->node == NULL && !y->requires_grad); /* no input requires grad */
    }
    dlc_tensor_release(y);
    dlc_tensor_release(ly);

    /* numerically stable: huge logits, -inf entries */
    float big[4] = {1000.0f, 1001.0f, -INFINITY, 1002.0f};
    dlc_tensor *b = mk(1, (int64_t[]){4}, big);
    y = dlc_softmax(b);
    ly = dlc_log_softmax(b);
    if (y && ly) {
        double s = exp(-2.0) + exp(-1.0) + 1.0;
        CHECK_NEAR(y->data[0], exp(-2.0) / s, 1e-6);
        CHECK_NEAR(y->data[2], 0.0, 0.0);
        CHECK_NEAR(y->data[3], 1.0 / s, 1e-6);
        CHECK_NEAR(ly->data[3], -log(s), 1e-5);
        CHECK(isinf(ly->data[2]) && ly->data[2] < 0);
    }
    dlc_tensor_release(y);
    dlc_tensor_release(ly);
    dlc_tensor_release(b);
    dlc_tensor_release(x);

    dlc_tensor *in[1] = {leaf(2, 1.0f, 3, sh)};
    gradcheck("softmax", f_softmax, NULL, 1, in, 1e-2f, 1e-2);
    gradcheck("log_softmax", f_log_softmax, NULL, 1, in, 1e-2f, 1e-2);
    check_accumulates("softmax", f_softmax, NULL, 1, in);
    check_accumulates("log_softmax", f_log_softmax, NULL, 1, in);
    y = dlc_softmax(in[0]);
    CHECK(y && dlc_tensor_op(y) == DLC_OP_SOFTMAX);
    dlc_tensor_release(y);
    y = dlc_log_softmax(in[0]);
    CHECK(y && dlc_tensor_op(y) == DLC_OP_LOG_SOFTMAX);
    dlc_tensor_release(y);
    int prev = dlc_set_grad_enabled(0);
    y = dlc_softmax(in[0]);
    CHECK(y && !y->node && !y->requires_grad);
    dlc_tensor_release(y);
    dlc_set_grad_enabled(prev);
    dlc_tensor_release(in[0]);

    dlc_tensor *s = dlc_tensor_full(0, NULL, 1.0f);
    CHECK_FAILS(dlc_softmax(s), DLC_ERR_SHAPE, "softmax: x [] is a scalar");
    CHECK_FAILS(dlc_log_softmax(s), DLC_ERR_SHAPE, "log_softmax: x [] is a scalar");
    CHECK_FAILS(dlc_softmax(NULL), DLC_ERR_ARG, "softmax: x is NULL");
    dlc_tensor_release(s);
}

/* ---- cross-entropy ---- */

static double ce_ref(const dlc_tensor *lg, const float *t, int ignore) {
    int64_t N = lg->shape[0], V = lg->shape[1], cnt = 0;
    double loss = 0;
    for (int64_t r = 0; r < N; r++) {
        if (t[r] == (float)ignore) continue;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < V; j++) m = fmax(m, lg->data[r * V + j]);
        for (int64_t j = 0; j < V; j++) s += exp(lg->data[r * V + j] - m);
        loss += m + log(s) - lg->data[r * V + (int64_t)t[r]];
        cnt++;
    }
    return cnt ? loss / (double)cnt : 0.0;
}

static void test_cross_entropy(void) {
    int64_t sh[2] = {6, 5}, n6 = 6;
    float tg[6] = {0, 4, -1, 2, -1, 3};
    dlc_tensor *t = mk(1, &n6, tg);
    dlc_tensor *lg = check_randn(3, 1.5f, 2, sh);
    dlc_tensor *l = dlc_cross_entropy(lg, t, -1);
    CHECK_OK(l);
    if (l) {
        CHECK(l->ndim == 0 && l->numel == 1);
        CHECK_NEAR(l->data[0], ce_ref(lg, tg, -1), 1e-5);
    }
    dlc_tensor_release(l);
    /* ignore_index that is a valid class: rows with target 2 skipped */
    float tg2[6] = {0, 4, 2, 2, 1, 3};
    dlc_tensor *t2 = mk(1, &n6, tg2);
    l = dlc_cross_entropy(lg, t2, 2);
    CHECK(l && fabs(l->data[0] - ce_ref(lg, tg2, 2)) < 1e-5);
    dlc_tensor_release(l);

    /* large logits stay finite */
    dlc_tensor *huge = dlc_tensor_clone(lg);
    for (int64_t i = 0; i < huge->numel; i++) huge->data[i] = huge->data[i] * 100.0f + 5000.0f;
    l = dlc_cross_entropy(huge, t, -1);
    CHECK(l && isfinite(l->data[0]) && fabs(l->data[0] - ce_ref(huge, tg, -1)) < 1e-2);
    dlc_tensor_release(l);
    dlc_tensor_release(huge);

    /* every row ignored: loss 0, gradient 0 */
    float all_ign[6] = {-1, -1, -1, -1, -1, -1};
    dlc_tensor *ti = mk(1, &n6, all_ign), *lgl = leaf(4, 1.0f, 2, sh);
    l = dlc_cross_entropy(lgl, ti, -1);
    CHECK_OK(l);
    if (l) {
        CHECK_NEAR(l->data[0], 0.0, 0.0);
        CHECK(dlc_tensor_op(l) == DLC_OP_CROSS_ENTROPY);
        CHECK(dlc_backward(l, NULL, 0) == DLC_OK);
        int zero = lgl->grad != NULL;
        for (int64_t i = 0; zero && i < lgl->grad->numel; i++) zero = lgl->grad->data[i] == 0.0f;
        CHECK(zero);
    }
    dlc_tensor_release(l);
    dlc_tensor_release(ti);

    /* gradient: softmax - onehot, mean over the 4 counted rows, 0 on ignored rows */
    dlc_tensor_zero_grad(lgl);
    l = dlc_cross_entropy(lgl, t, -1);
    if (l && dlc_backward(l, NULL, 0) == DLC_OK) {
        double w = 0;
        for (int r = 0; r < 6; r++) {
            double m = -INFINITY, s = 0;
            for (int j = 0; j < 5; j++) m = fmax(m, lgl->data[r * 5 + j]);
            for (int j = 0; j < 5; j++) s += exp(lgl->data[r * 5 + j] - m);
            for (int j = 0; j < 5; j++) {
                double ref = tg[r] < 0 ? 0.0 : (exp(lgl->data[r * 5 + j] - m) / s - (j == tg[r])) / 4.0;
                w = fmax(w, fabs(lgl->grad->data[r * 5 + j] - ref));
            }
        }
        CHECK(w < 1e-6);
    } else CHECK(0);
    dlc_tensor_release(l);

    op_ctx c = {.ignore = -1};
    dlc_tensor *in[2] = {lgl, t};
    gradcheck("cross_entropy", f_ce, &c, 2, in, 1e-2f, 1e-2);
    check_accumulates("cross_entropy", f_ce, &c, 2, in);
    op_ctx c2 = {.ignore = 2};
    in[1] = t2;
    gradcheck("cross_entropy ignore=2", f_ce, &c2, 2, in, 1e-2f, 1e-2);

    /* errors */
    int64_t sh3[3] = {2, 3, 5}, n5 = 5;
    dlc_tensor *x3 = dlc_tensor_zeros(3, sh3), *t5 = dlc_tensor_zeros(1, &n5);
    CHECK_FAILS(dlc_cross_entropy(x3, t, -1), DLC_ERR_SHAPE, "cross_entropy: logits [2,3,5]: expected [N, V]");
    CHECK_FAILS(dlc_cross_entropy(lg, t5, -1), DLC_ERR_SHAPE, "targets [5]: targets must be [6]");
    float bad[6] = {0, 5, 1, 1, 1, 1}, frac[6] = {0, 1.5f, 1, 1, 1, 1}, neg[6] = {0, -1, 1, 1, 1, 1};
    dlc_tensor *tb = mk(1, &n6, bad), *tf = mk(1, &n6, frac), *tn = mk(1, &n6, neg);
    CHECK_FAILS(dlc_cross_entropy(lg, tb, -1), DLC_ERR_RANGE, "cross_entropy: index 5 at position 1");
    CHECK_FAILS(dlc_cross_entropy(lg, tf, -1), DLC_ERR_RANGE, "index 1.5");
    CHECK_FAILS(dlc_cross_entropy(lg, tn, -100), DLC_ERR_RANGE, "index -1");
    dlc_tensor_release(tb);
    dlc_tensor_release(tf);
    dlc_tensor_release(tn);
    dlc_tensor_release(x3);
    dlc_tensor_release(t5);
    dlc_tensor_release(lgl);
    dlc_tensor_release(lg);
    dlc_tensor_release(t);
    dlc_tensor_release(t2);
}

/* ---- layernorm / rmsnorm ---- */

static void norm_ref(const dlc_tensor *x, const dlc_tensor *w, const dlc_tensor *b, double eps,
                     int rms, double *out) {
    int64_t C = x->shape[x->ndim - 1], R = rows(x);
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x->data + r * C;
        double m = 0, v = 0;
        if (!rms) {
            for (int64_t j = 0; j < C; j++) m += xr[j];
            m /= (double)C;
        }
        for (int64_t j = 0; j < C; j++) v += (xr[j] - m) * (xr[j] - m);
        double s = 1.0 / sqrt(v / (double)C + eps);
        for (int64_t j = 0; j < C; j++)
            out[r * C + j] = (xr[j] - m) * s * (w ? w->data[j] : 1.0) + (b ? b->data[j] : 0.0);
    }
}

static void test_norms(void) {
    int64_t sh[3] = {2, 3, 8}, c8 = 8;
    dlc_tensor *x = leaf(5, 1.0f, 3, sh), *w = leaf(6, 0.5f, 1, &c8), *b = leaf(7, 0.5f, 1, &c8);
    for (int i = 0; i < 8; i++) w->data[i] += 1.0f;
    for (int i = 0; i < 8; i++) x->data[i] += 3.0f; /* a row with a large mean */
    double ref[48];

    dlc_tensor *y = dlc_layernorm(x, w, b, 1e-5f);
    CHECK_OK(y);
    norm_ref(x, w, b, 1e-5, 0, ref);
    CHECK(y && same_shape(y, 3, sh) && maxdiff(y->data, ref, 48) < 2e-5);
    CHECK(y && dlc_tensor_op(y) == DLC_OP_LAYERNORM);
    dlc_tensor_release(y);
    y = dlc_layernorm(x, NULL, NULL, 1e-5f);
    norm_ref(x, NULL, NULL, 1e-5, 0, ref);
    CHECK(y && maxdiff(y->data, ref, 48) < 2e-5);
    dlc_tensor_release(y);
    y = dlc_rmsnorm(x, w, 1e-5f);
    CHECK_OK(y);
    norm_ref(x, w, NULL, 1e-5, 1, ref);
    CHECK(y && maxdiff(y->data, ref, 48) < 2e-5);
    CHECK(y && dlc_tensor_op(y) == DLC_OP_RMSNORM);
    dlc_tensor_release(y);
    y = dlc_rmsnorm(x, NULL, 1e-5f);
    norm_ref(x, NULL, NULL, 1e-5, 1, ref);
    CHECK(y && maxdiff(y->data, ref, 48) < 2e-5);
    dlc_tensor_release(y);

    dlc_tensor *in[3] = {x, w, b};
    gradcheck("layernorm x,w,b", f_layernorm, NULL, 3, in, 1e-2f, 2e-2);
    check_accumulates("layernorm", f_layernorm, NULL, 3, in);
    dlc_tensor *in_x[3] = {x, NULL, NULL};
    gradcheck("layernorm x", f_layernorm, NULL, 3, in_x, 1e-2f, 2e-2);
    /* only the parameters need grad (x a constant input) */
    dlc_tensor *xc = check_randn(8, 1.0f, 3, sh);
    dlc_tensor *in_wb[3] = {xc, w, b};
    gradcheck("layernorm w,b", f_layernorm, NULL, 3, in_wb, 1e-2f, 2e-2);
    dlc_tensor *in_r[2] = {x, w};
    gradcheck("rmsnorm x,w", f_rmsnorm, NULL, 2, in_r, 1e-2f, 2e-2);
    check_accumulates("rmsnorm", f_rmsnorm, NULL, 2, in_r);
    dlc_tensor *in_rx[2] = {x, NULL};
    gradcheck("rmsnorm x", f_rmsnorm, NULL, 2, in_rx, 1e-2f, 2e-2);

    /* errors */
    int64_t s48[2] = {4, 8}, c7 = 7;
    dlc_tensor *x48 = dlc_tensor_zeros(2, s48), *w7 = dlc_tensor_zeros(1, &c7);
    CHECK_FAILS(dlc_layernorm(x48, w7, NULL, 1e-5f), DLC_ERR_SHAPE,
                "layernorm: x [4,8] and weight [7]: weight must have the size of the last dim (8)");
    CHECK_FAILS(dlc_layernorm(x48, NULL, w7, 1e-5f), DLC_ERR_SHAPE,
                "layernorm: x [4,8] and bias [7]: bias must have the size of the last dim (8)");
    CHECK_FAILS(dlc_layernorm(x48, NULL, x48, 1e-5f), DLC_ERR_SHAPE, "bias [4,8]");
    CHECK_FAILS(dlc_layernorm(x48, NULL, NULL, -1.0f), DLC_ERR_ARG, "layernorm: eps = -1");
    CHECK_FAILS(dlc_rmsnorm(x48, w7, 1e-5f), DLC_ERR_SHAPE,
                "rmsnorm: x [4,8] and weight [7]: weight must have the size of the last dim (8)");
    CHECK_FAILS(dlc_rmsnorm(x48, NULL, NAN), DLC_ERR_ARG, "rmsnorm: eps = nan");
    dlc_tensor_release(x48);
    dlc_tensor_release(w7);
    dlc_tensor_release(xc);
    dlc_tensor_release(x);
    dlc_tensor_release(w);
    dlc_tensor_release(b);
}

/* ---- index_select / embedding / index_add / gather ---- */

static void test_indexing(void) {
    /* index_select on hand-made values */
    int64_t s32[2] = {3, 2}, s22[2] = {2, 2};
    dlc_tensor *x = mk(2, s32, (float[]){0, 1, 10, 11, 20, 21});
    dlc_tensor *idx = mk(2, s22, (float[]){2, 0, 2, 1});
    dlc_tensor *y = dlc_index_select(x, idx);
    CHECK_OK(y);
    if (y) {
        float want[8] = {20, 21, 0, 1, 20, 21, 10, 11};
        CHECK(same_shape(y, 3, (int64_t[]){2, 2, 2}));
        CHECK(memcmp(y->data, want, sizeof want) == 0);
    }
    dlc_tensor_release(y);
    y = dlc_embedding(x, idx);
    CHECK(y && y->data[6] == 10 && y->data[7] == 11);
    dlc_tensor_release(y);
    dlc_tensor *i0 = dlc_tensor_full(0, NULL, 1.0f); /* scalar index -> one row */
    y = dlc_index_select(x, i0);
    CHECK(y && same_shape(y, 1, (int64_t[]){2}) && y->data[0] == 10 && y->data[1] == 11);
    dlc_tensor_release(y);
    dlc_tensor_release(i0);

    /* index_add: repeated index accumulates */
    dlc_tensor *base = dlc_tensor_full(2, s32, 1.0f);
    dlc_tensor *ia = mk(1, (int64_t[]){3}, (float[]){2, 0, 2});
    dlc_tensor *src = mk(2, s32, (float[]){1, 2, 3, 4, 5, 6});
    y = dlc_index_add(base, ia, src);
    CHECK_OK(y);
    if (y) {
        float want[6] = {4, 5, 1, 1, 7, 9};
        CHECK(same_shape(y, 2, s32) && memcmp(y->data, want, sizeof want) == 0);
        CHECK(base->data[0] == 1.0f); /* base untouched */
    }
    dlc_tensor_release(y);

    /* gather */
    int64_t s24[2] = {2, 4}, s23[2] = {2, 3};
    dlc_tensor *gx = mk(2, s24, (float[]){1, 2, 3, 4, 5, 6, 7, 8});
    dlc_tensor *gi = mk(2, s23, (float[]){3, 0, 3, 1, 1, 2});
    y = dlc_gather(gx, gi);
    CHECK_OK(y);
    if (y) {
        float want[6] = {4, 1, 4, 6, 6, 7};
        CHECK(same_shape(y, 2, s23) && memcmp(y->data, want, sizeof want) == 0);
    }
    dlc_tensor_release(y);

    /* gradchecks with repeated indices */
    int64_t sv[2] = {5, 3}, si[2] = {2, 3};
    dlc_tensor *tab = leaf(10, 1.0f, 2, sv);
    dlc_tensor *ids = mk(2, si, (float[]){4, 1, 4, 0, 4, 1});
    dlc_tensor *in[3] = {tab, ids, NULL};
    gradcheck("index_select", f_index_select, NULL, 2, in, 1e-2f, 1e-2);
    gradcheck("embedding", f_embedding, NULL, 2, in, 1e-2f, 1e-2);
    check_accumulates("index_select", f_index_select, NULL, 2, in);
    y = dlc_embedding(tab, ids);
    CHECK(y && dlc_tensor_op(y) == DLC_OP_INDEX_SELECT && !ids->requires_grad);
    dlc_tensor_release(y);
    /* index_select of a 3-d table */
    int64_t s3[3] = {4, 2, 3};
    dlc_tensor *tab3 = leaf(11, 1.0f, 3, s3);
    dlc_tensor *ids3 = mk(1, (int64_t[]){5}, (float[]){3, 3, 0, 2, 3});
    dlc_tensor *in3[2] = {tab3, ids3};
    gradcheck("index_select 3d", f_index_select, NULL, 2, in3, 1e-2f, 1e-2);

    int64_t sb[2] = {4, 3}, ss[2] = {5, 3};
    dlc_tensor *bl = leaf(12, 1.0f, 2, sb), *sl = leaf(13, 1.0f, 2, ss);
    dlc_tensor *ix = mk(1, (int64_t[]){5}, (float[]){1, 3, 1, 1, 0});
    dlc_tensor *ina[3] = {bl, ix, sl};
    gradcheck("index_add base,src", f_index_add, NULL, 3, ina, 1e-2f, 1e-2);
    check_accumulates("index_add", f_index_add, NULL, 3, ina);
    y = dlc_index_add(bl, ix, sl);
    CHECK(y && dlc_tensor_op(y) == DLC_OP_INDEX_ADD);
    dlc_tensor_release(y);
    dlc_tensor *blc = check_randn(14, 1.0f, 2, sb);
    dlc_tensor *ina2[3] = {blc, ix, sl};
    gradcheck("index_add src", f_index_add, NULL, 3, ina2, 1e-2f, 1e-2);

    int64_t sgx[3] = {2, 3, 6}, sgi[3] = {2, 3, 4};
    dlc_tensor *gxl = leaf(15, 1.0f, 3, sgx);
    dlc_tensor *gil = dlc_tensor_new(3, sgi);
    for (int64_t i = 0; i < gil->numel; i++) gil->data[i] = (float)((i * 5) % 6 / 2); /* repeats */
    dlc_tensor *ing[2] = {gxl, gil};
    gradcheck("gather", f_gather, NULL, 2, ing, 1e-2f, 1e-2);
    check_accumulates("gather", f_gather, NULL, 2, ing);

    /* errors */
    dlc_tensor *oob = mk(1, (int64_t[]){2}, (float[]){1, 3});
    dlc_tensor *negi = mk(1, (int64_t[]){2}, (float[]){-1, 0});
    CHECK_FAILS(dlc_index_select(x, oob), DLC_ERR_RANGE, "index_select: index 3 at position 1 is not an integer in [0, 3)");
    CHECK_FAILS(dlc_embedding(x, negi), DLC_ERR_RANGE, "embedding: index -1");
    int64_t s222[3] = {2, 2, 2};
    dlc_tensor *i3 = dlc_tensor_zeros(3, s222), *t3 = dlc_tensor_zeros(3, s222);
    CHECK_FAILS(dlc_index_select(t3, i3), DLC_ERR_SHAPE, "5-dim result: at most 4 dims");
    dlc_tensor *src2 = dlc_tensor_zeros(2, s22);
    CHECK_FAILS(dlc_index_add(base, oob, src2), DLC_ERR_RANGE, "index_add: index 3");
    dlc_tensor_release(src2);
    CHECK_FAILS(dlc_index_add(base, ia, gx), DLC_ERR_SHAPE, "index_add: base [3,2], idx [3], src [2,4]");
    CHECK_FAILS(dlc_index_add(base, idx, src), DLC_ERR_SHAPE, "index_add: idx [2,2]: expected a 1-dim");
    CHECK_FAILS(dlc_gather(gx, x), DLC_ERR_SHAPE, "gather: x [2,4] and idx [3,2]");
    CHECK_FAILS(dlc_gather(gx, i3), DLC_ERR_SHAPE, "idx must have x's dims except the last");
    dlc_tensor *gbad = mk(2, s23, (float[]){3, 0, 4, 1, 1, 2});
    CHECK_FAILS(dlc_gather(gx, gbad), DLC_ERR_RANGE, "gather: index 4 at position 2");
    dlc_tensor_release(gbad);
    dlc_tensor_release(i3);
    dlc_tensor_release(t3);
    dlc_tensor_release(oob);
    dlc_tensor_release(negi);

    dlc_tensor *all[] = {x, idx, base, ia, src, gx, gi, tab, ids, tab3, ids3, bl, sl, ix, blc, gxl, gil};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dlc_tensor_release(all[i]);
}

/* ---- top-k ---- */

static void test_topk(void) {
    int64_t s25[2] = {2, 5};
    dlc_tensor *x = mk(2, s25, (float[]){1, 3, 3, 2, 5, 0, -1, 7, 7, 7});
    dlc_tensor *v = NULL, *i = NULL;
    CHECK(dlc_topk(x, 3, &v, &i) == DLC_OK);
    if (v && i) {
        float wv[6] = {5, 3, 3, 7, 7, 7}, wi[6] = {4, 1, 2, 2, 3, 4};
        CHECK(same_shape(v, 2, (int64_t[]){2, 3}) && same_shape(i, 2, (int64_t[]){2, 3}));
        CHECK(memcmp(v->data, wv, sizeof wv) == 0);
        CHECK(memcmp(i->data, wi, sizeof wi) == 0);
    }
    dlc_tensor_release(v);
    dlc_tensor_release(i);
    CHECK(dlc_topk(x, 5, &v, &i) == DLC_OK);
    if (v && i) {
        float wv[10] = {5, 3, 3, 2, 1, 7, 7, 7, 0, -1}, wi[10] = {4, 1, 2, 3, 0, 2, 3, 4, 0, 1};
        CHECK(memcmp(v->data, wv, sizeof wv) == 0 && memcmp(i->data, wi, sizeof wi) == 0);
    }
    dlc_tensor_release(v);
    dlc_tensor_release(i);
    CHECK(dlc_topk(x, 0, &v, &i) == DLC_OK && v && v->numel == 0 && i && i->numel == 0);
    dlc_tensor_release(v);
    dlc_tensor_release(i);
    /* NaN ranks above every number (as in PyTorch), ties among NaNs by index */
    dlc_tensor *xn = mk(1, (int64_t[]){4}, (float[]){1, NAN, 3, NAN});
    CHECK(dlc_topk(xn, 3, &v, &i) == DLC_OK);
    CHECK(v && i && i->data[0] == 1 && i->data[1] == 3 && i->data[2] == 2 && v->data[2] == 3);
    dlc_tensor_release(v);
    dlc_tensor_release(i);
    dlc_tensor_release(xn);

    /* against a naive stable selection on rows with many ties */
    int64_t sb[2] = {4, 100};
    dlc_tensor *r = check_randn(20, 3.0f, 2, sb);
    for (int64_t j = 0; j < r->numel; j++) r->data[j] = roundf(r->data[j]);
    int ok = 1;
    for (int k = 1; k <= 100 && ok; k += 33) {
        if (dlc_topk(r, k, &v, &i) != DLC_OK) {
            ok = 0;
            break;
        }
        for (int row = 0; row < 4; row++) {
            char used[100] = {0};
            for (int s = 0; s < k; s++) {
                int best = -1;
                for (int j = 0; j < 100; j++)
                    if (!used[j] && (best < 0 || r->data[row * 100 + j] > r->data[row * 100 + best]))
                        best = j;
                used[best] = 1;
                if (i->data[row * k + s] != (float)best || v->data[row * k + s] != r->data[row * 100 + best])
                    ok = 0;
            }
        }
        dlc_tensor_release(v);
        dlc_tensor_release(i);
    }
    CHECK(ok);
    dlc_tensor_release(r);

    /* gradient through the values; indices never require grad */
    int64_t s38[2] = {3, 8};
    dlc_tensor *xl = dlc_tensor_new(2, s38);
    for (int row = 0; row < 3; row++)
        for (int j = 0; j < 8; j++) xl->data[row * 8 + j] = (float)((j * 5 + row) % 8) * 0.25f - 1.0f;
    dlc_tensor_set_requires_grad(xl, 1);
    CHECK(dlc_topk(xl, 3, &v, &i) == DLC_OK);
    CHECK(v && v->requires_grad && dlc_tensor_op(v) == DLC_OP_GATHER);
    CHECK(i && !i->requires_grad && !i->node);
    dlc_tensor_release(v);
    dlc_tensor_release(i);
    op_ctx c = {.k = 3};
    dlc_tensor *in[1] = {xl};
    gradcheck("topk values", f_topk, &c, 1, in, 1e-2f, 1e-2);
    check_accumulates("topk", f_topk, &c, 1, in);

    /* errors: both outputs NULL */
    v = i = (dlc_tensor *)x; /* garbage that must be cleared */
    CHECK(dlc_topk(x, 6, &v, &i) == DLC_ERR_ARG && !v && !i);
    CHECK(strstr(dlc_last_error(), "topk: k = 6 with x [2,5]: k must be in [0, 5]") != NULL);
    v = i = (dlc_tensor *)x;
    CHECK(dlc_topk(x, -1, &v, &i) == DLC_ERR_ARG && !v && !i);
    dlc_tensor *s = dlc_tensor_full(0, NULL, 1.0f);
    CHECK(dlc_topk(s, 1, &v, &i) == DLC_ERR_SHAPE && !v && !i);
    dlc_tensor_release(s);
    dlc_tensor_release(xl);
    dlc_tensor_release(x);
}

/* ---- attention ---- */

/* causal: row i sees columns 0..i; otherwise all T */
static void attention_ref(const dlc_tensor *qkv, int H, int causal, double *out) {
    int64_t B = qkv->shape[0], T = qkv->shape[1], C3 = qkv->shape[2], C = C3 / 3, hd = C / H;
    double scale = 1.0 / sqrt((double)hd), *p = malloc((size_t)T * sizeof *p);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                const float *q = qkv->data + (b * T + i) * C3 + h * hd;
                double m = -INFINITY, s = 0;
                int64_t n = causal ? i + 1 : T;
                for (int64_t j = 0; j < n; j++) {
                    const float *k = qkv->data + (b * T + j) * C3 + C + h * hd;
                    double d = 0;
                    for (int64_t e = 0; e < hd; e++) d += (double)q[e] * k[e];
                    p[j] = d * scale;
                    m = fmax(m, p[j]);
                }
                for (int64_t j = 0; j < n; j++) s += (p[j] = exp(p[j] - m));
                for (int64_t e = 0; e < hd; e++) {
                    double o = 0;
                    for (int64_t j = 0; j < n; j++)
                        o += p[j] / s * qkv->data[(b * T + j) * C3 + 2 * C + h * hd + e];
                    out[(b * T + i) * C + h * hd + e] = o;
                }
            }
    free(p);
}

static void test_attention(void) {
    /* T = 70 spans two row blocks of the kernel */
    int64_t shapes[3][3] = {{2, 5, 24}, {1, 70, 24}, {2, 3, 12}};
    int heads[3] = {2, 4, 1};
    for (int c = 0; c < 6; c++) {
        int causal = c < 3, sc = c % 3;
        dlc_tensor *qkv = check_randn(30 + (uint64_t)sc, 1.0f, 3, shapes[sc]);
        dlc_tensor *y = dlc_attention(qkv, heads[sc], causal);
        CHECK_OK(y);
        if (y) {
            int64_t want[3] = {shapes[sc][0], shapes[sc][1], shapes[sc][2] / 3};
            CHECK(same_shape(y, 3, want));
            double *ref = malloc((size_t)y->numel * sizeof *ref);
            attention_ref(qkv, heads[sc], causal, ref);
            double d = maxdiff(y->data, ref, y->numel);
            if (d >= 1e-5) fprintf(stderr, "attention case %d (causal %d): max diff %g\n", sc, causal, d);
            CHECK(d < 1e-5);
            free(ref);
        }
        dlc_tensor_release(y);
        dlc_tensor_release(qkv);
    }
    /* non-causal: the first position sees the last one (causal: it does not) */
    {
        int64_t sh[3] = {1, 4, 6};
        dlc_tensor *qkv = check_randn(35, 1.0f, 3, sh);
        dlc_tensor *a = dlc_attention(qkv, 1, 1), *b = dlc_attention(qkv, 1, 0);
        qkv->data[3 * 6 + 4] += 1.0f; /* v of the last position */
        dlc_tensor *a2 = dlc_attention(qkv, 1, 1), *b2 = dlc_attention(qkv, 1, 0);
        CHECK(a && b && a2 && b2);
        if (a && b && a2 && b2) {
            CHECK(a->data[0] == a2->data[0] && a->data[1] == a2->data[1]);
            CHECK(b->data[0] != b2->data[0] && b->data[1] == b2->data[1]);
        }
        dlc_tensor_release(a);
        dlc_tensor_release(b);
        dlc_tensor_release(a2);
        dlc_tensor_release(b2);
        dlc_tensor_release(qkv);
    }

    int64_t s[3] = {2, 5, 24};
    dlc_tensor *qkv = leaf(40, 1.0f, 3, s);
    op_ctx c = {.heads = 2};
    dlc_tensor *in[1] = {qkv};
    gradcheck("attention B2 T5 H2 C8", f_attention, &c, 1, in, 1e-2f, 2e-2);
    check_accumulates("attention", f_attention, &c, 1, in);
    dlc_tensor *y = dlc_attention(qkv, 2, 1);
    CHECK(y && dlc_tensor_op(y) == DLC_OP_ATTENTION);
    dlc_tensor_release(y);
    op_ctx nc = {.heads = 2, .noncausal = 1};
    gradcheck("attention non-causal B2 T5 H2 C8", f_attention, &nc, 1, in, 1e-2f, 2e-2);
    check_accumulates("attention non-causal", f_attention, &nc, 1, in);
    dlc_tensor_release(qkv);
    /* several row blocks */
    int64_t s2[3] = {1, 70, 12};
    dlc_tensor *qkv2 = leaf(41, 1.0f, 3, s2);
    dlc_tensor *in2[1] = {qkv2};
    gradcheck("attention T70 H2 C4", f_attention, &c, 1, in2, 1e-2f, 2e-2);
    gradcheck("attention non-causal T70 H2 C4", f_attention, &nc, 1, in2, 1e-2f, 2e-2);

    /* errors */
    int64_t s2d[2] = {5, 24}, s25[3] = {2, 5, 25};
    dlc_tensor *q2 = dlc_tensor_zeros(2, s2d), *q25 = dlc_tensor_zeros(3, s25);
    CHECK_FAILS(dlc_attention(q2, 2, 1), DLC_ERR_SHAPE, "attention: qkv [5,24]: expected [B, T, 3C]");
    CHECK_FAILS(dlc_attention(q25, 1, 0), DLC_ERR_SHAPE, "attention: qkv [2,5,25]");
    CHECK_FAILS(dlc_attention(qkv2, 3, 1), DLC_ERR_ARG, "has C = 4, which heads = 3 does not divide");
    CHECK_FAILS(dlc_attention(qkv2, 0, 0), DLC_ERR_ARG, "heads = 0");
    dlc_tensor_release(q2);
    dlc_tensor_release(q25);
    dlc_tensor_release(qkv2);
}

/* ---- dropout ---- */

static void test_dropout(void) {
    int64_t n = 200000;
    dlc_tensor *x = dlc_tensor_full(1, &n, 1.0f);
    dlc_rng g;
    dlc_rng_init(&g, 7);
    dlc_tensor *y = dlc_dropout(x, 0.3f, &g);
    CHECK_OK(y);
    if (y) {
        int64_t zeros = 0, other = 0;
        for (int64_t i = 0; i < n; i++) {
            if (y->data[i] == 0.0f) zeros++;
            else if (fabsf(y->data[i] - 1.0f / 0.7f) > 1e-6f) other++;
        }
        CHECK_NEAR((double)zeros / (double)n, 0.3, 0.01);
        CHECK(other == 0);
        /* same seed -> same mask; the generator advanced -> a different one */
        dlc_rng g2;
        dlc_rng_init(&g2, 7);
        dlc_tensor *y2 = dlc_dropout(x, 0.3f, &g2), *y3 = dlc_dropout(x, 0.3f, &g2);
        CHECK(y2 && memcmp(y->data, y2->data, (size_t)n * sizeof(float)) == 0);
        CHECK(y3 && memcmp(y->data, y3->data, (size_t)n * sizeof(float)) != 0);
        dlc_tensor_release(y2);
        dlc_tensor_release(y3);
    }
    dlc_tensor_release(y);
    y = dlc_dropout(x, 0.0f, &g);
    CHECK(y == x && x->refs == 2);
    dlc_tensor_release(y);
    dlc_tensor_release(x);

    int64_t s[2] = {6, 7};
    dlc_tensor *xl = leaf(50, 1.0f, 2, s);
    op_ctx c = {.p = 0.4f, .seed = 11};
    dlc_tensor *in[1] = {xl};
    gradcheck("dropout", f_dropout, &c, 1, in, 1e-2f, 1e-2);
    check_accumulates("dropout", f_dropout, &c, 1, in);
    y = f_dropout(in, &c);
    CHECK(y && dlc_tensor_op(y) == DLC_OP_DROPOUT);
    dlc_tensor_release(y);

    CHECK_FAILS(dlc_dropout(xl, 1.0f, &g), DLC_ERR_ARG, "dropout: p = 1: must be in [0, 1)");
    CHECK_FAILS(dlc_dropout(xl, -0.1f, &g), DLC_ERR_ARG, "dropout: p = -0.1");
    CHECK_FAILS(dlc_dropout(xl, NAN, &g), DLC_ERR_ARG, "dropout: p = nan");
    CHECK_FAILS(dlc_dropout(xl, 0.5f, NULL), DLC_ERR_ARG, "dropout: x or rng is NULL");
    dlc_tensor_release(xl);
}

/* Layernorm's and rmsnorm's weight gradients sum over rows in chunks of 16 rows:
 * 40 rows make three chunks, so the chunks' partial sums (and their split across
 * threads) are exercised. */
static void test_norms_chunked(void) {
    int64_t sh[3] = {2, 20, 4}, c4 = 4;
    dlc_tensor *x = leaf(15, 1.0f, 3, sh), *w = leaf(16, 0.5f, 1, &c4), *b = leaf(17, 0.5f, 1, &c4);
    dlc_tensor *in[3] = {x, w, b};
    gradcheck("layernorm x,w,b 40 rows", f_layernorm, NULL, 3, in, 1e-2f, 2e-2);
    dlc_tensor *in_r[2] = {x, w};
    gradcheck("rmsnorm x,w 40 rows", f_rmsnorm, NULL, 2, in_r, 1e-2f, 2e-2);
    dlc_tensor_release(x);
    dlc_tensor_release(w);
    dlc_tensor_release(b);
}

/* ---- results independent of the thread count ----
 * At the default grain, shapes of the charlm model's size are split across two
 * threads; each op's output and every input gradient must be the same bits as on one
 * thread (row-wise kernels, head-wise attention, chunked partial sums). */

static dlc_tensor *f_softmax_ce(dlc_tensor **in, void *c) {
    (void)c;
    dlc_tensor *ls = dlc_log_softmax(in[0]);
    dlc_tensor *ce = dlc_cross_entropy(ls, in[1], -1);
    dlc_tensor_release(ls);
    return ce;
}

static void test_thread_count_independence(void) {
    dlcx_set_par_grain(0); /* the default */
    int64_t sh[3] = {8, 64, 128}, c128 = 128, lg[2] = {1024, 256}, n1024 = 1024;
    dlc_tensor *x = leaf(40, 1.0f, 3, sh), *w = leaf(41, 0.5f, 1, &c128), *b = leaf(42, 0.5f, 1, &c128);
    dlc_tensor *in[3] = {x, w, b};
    check_same_bits("layernorm", f_layernorm, NULL, 3, in, 2);
    check_same_bits("rmsnorm", f_rmsnorm, NULL, 2, in, 2);
    check_same_bits("softmax", f_softmax, NULL, 1, in, 2);

    dlc_tensor *logits = leaf(43, 2.0f, 2, lg), *tg = dlc_tensor_new(1, &n1024);
    for (int64_t i = 0; i < n1024; i++) tg->data[i] = (float)((i * 37) % 256);
    tg->data[5] = -1.0f; /* one ignored row */
    op_ctx ci = {.ignore = -1};
    dlc_tensor *in_ce[2] = {logits, tg};
    check_same_bits("cross_entropy", f_ce, &ci, 2, in_ce, 2);
    check_same_bits("log_softmax + cross_entropy", f_softmax_ce, NULL, 2, in_ce, 2);

    int64_t vshape[2] = {256, 128}, ishape[2] = {16, 64};
    dlc_tensor *table = leaf(44, 1.0f, 2, vshape), *ids = dlc_tensor_new(2, ishape);
    for (int64_t i = 0; i < ids->numel; i++) ids->data[i] = (float)((i * 11) % 200); /* repeats */
    dlc_tensor *in_e[2] = {table, ids};
    check_same_bits("embedding", f_embedding, NULL, 2, in_e, 2);

    int64_t qs[3] = {4, 64, 3 * 64};
    dlc_tensor *qkv = leaf(45, 1.0f, 3, qs);
    dlc_tensor *in_a[1] = {qkv};
    op_ctx ca = {.heads = 4}, cn = {.heads = 4, .noncausal = 1};
    check_same_bits("attention", f_attention, &ca, 1, in_a, 2);
    check_same_bits("attention non-causal", f_attention, &cn, 1, in_a, 2);

    dlc_tensor *all[] = {x, w, b, logits, tg, table, ids, qkv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dlc_tensor_release(all[i]);
    dlc_set_num_threads(1);
}

/* On the OpenBLAS backend the kernels stay serial: its own thread pool would fight an
 * OpenMP team for the cores. */
static void test_serial_on_openblas(void) {
    const char *was = dlc_gemm_backend();
    CHECK(dlc_set_gemm_backend("openblas") == DLC_OK);
    CHECK(!dlcx_par_available());
    dlc_set_num_threads(2);
    int64_t sh[2] = {512, 256}, before = dlcx_par_regions();
    dlc_tensor *x = check_randn(4, 1.0f, 2, sh), *y = dlc_softmax(x);
    CHECK_OK(y);
    CHECK(dlcx_par_regions() == before);
    dlc_tensor_release(x);
    dlc_tensor_release(y);
    CHECK(dlc_set_gemm_backend(was) == DLC_OK);
    dlc_set_num_threads(1);
}

/* Every case at 1 and at 2 compute threads, with the grain at 1 float so that even the
 * gradchecks' small shapes are split across both threads; then the charlm-sized
 * shapes at the default grain. */
/* DILOCO_PAR_GRAIN (read once, at the first kernel) is how the golden spec splits a
 * tiny model: a 4x8 softmax at 2 threads must then split. */
static void test_grain_from_environment(void) {
    CHECK(setenv("DILOCO_PAR_GRAIN", "1", 1) == 0);
    CHECK(dlc_set_num_threads(2) == DLC_OK);
    int64_t sh[2] = {4, 8}, before = dlcx_par_regions();
    dlc_tensor *x = check_randn(3, 1.0f, 2, sh), *y = dlc_softmax(x);
    CHECK_OK(y);
    if (dlcx_par_available()) { /* else the kernels never split (OpenBLAS backend, no OpenMP) */
        CHECK(dlcx_par_regions() == before + 1);
    }
    dlc_tensor_release(x);
    dlc_tensor_release(y);
}

int main(void) {
    test_grain_from_environment();
    for (int nt = 1; nt <= 2; nt++) {
        CHECK(dlc_set_num_threads(nt) == DLC_OK);
        dlcx_set_par_grain(1);
        int64_t before = dlcx_par_regions();
        test_softmax();
        test_cross_entropy();
        test_norms();
        test_norms_chunked();
        test_indexing();
        test_topk();
        test_attention();
        test_dropout();
        if (dlcx_par_available()) { /* else the kernels never split (OpenBLAS backend, no OpenMP) */
            CHECK(nt == 1 ? dlcx_par_regions() == before : dlcx_par_regions() > before + 100);
        }
    }
    test_thread_count_independence();
    test_serial_on_openblas();
    return check_done("nnops");
}
