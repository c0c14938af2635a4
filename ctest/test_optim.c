/* test_optim.c - the parameter arena (layout, re-pointing, grads, norms) and the
 * optimizers and lr schedules against straightforward double-precision references. */
#define _DEFAULT_SOURCE /* mincore */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
#include "check.h"
#include "internal.h" /* dlcx_tensor_rebind */

/* A call returning a dlc_status expected to fail the same way. */

/* |got - want| <= 1e-6 relative (to max(|want|, 1e-3), so values near 0 do not demand
 * more than float can give). */
static int rel_ok(double got, double want) {
    return fabs(got - want) <= 1e-6 * fmax(fabs(want), 1e-3);
}

/* The same, relative to `mag` when larger: the sum of the magnitudes of the terms that
 * made `want`.  A momentum buffer b*m + (1-b)*g can cancel to a value far smaller than
 * its terms, and float arithmetic is only exact relative to the terms. */
static int rel_mag_ok(double got, double want, double mag) {
    return fabs(got - want) <= 1e-6 * fmax(fmax(fabs(want), mag), 1e-6);
}

static dlc_tensor *randn(uint64_t seed, int ndim, const int64_t *shape) {
    return check_randn(seed, 1.0f, ndim, shape);
}

/* ---------------------------------------------------------------------------
 * the arena
 * --------------------------------------------------------------------------- */

static void test_layout(void) {
    int64_t sa[2] = {3, 5}, sb[1] = {7}, sd[3] = {2, 2, 2}, se[1] = {0};
    dlc_tensor *a = randn(1, 2, sa), *b = randn(2, 1, sb), *c = dlc_tensor_full(0, NULL, 4.5f);
    dlc_tensor *d = randn(3, 3, sd), *e = dlc_tensor_zeros(1, se);
    float a0[15], b0[7];
    memcpy(a0, a->data, sizeof a0);
    memcpy(b0, b->data, sizeof b0);
    /* a view of `a` made before packing, and a grad `b` had before */
    dlc_tensor *early = dlc_tensor_view(a, 5, 1, (int64_t[]){5});
    b->grad = dlc_tensor_full(1, sb, 9.0f);
    dlc_tensor *oldgrad = dlc_tensor_retain(b->grad);

    const char *names[5] = {"a", "b", "c", "d", "e"};
    dlc_tensor *ts[5] = {a, b, c, d, e};
    dlc_params *p = dlc_params_new(5, names, ts);
    CHECK_OK(p);
    CHECK(dlc_params_count(p) == 5);
    CHECK(dlc_params_numel(p) == 15 + 7 + 1 + 8 + 0);
    int64_t want_off[5] = {0, 16, 32, 48, 64};
    for (int i = 0; i < 5; i++) CHECK(dlc_params_offset(p, i) == want_off[i]);
    CHECK(dlc_params_size(p) == 64);
    CHECK(dlc_params_size(p) % DLC_PARAMS_ALIGN == 0);
    CHECK((uintptr_t)dlc_params_data(p) % 64 == 0 && (uintptr_t)dlc_params_grad(p) % 64 == 0);
    CHECK(dlc_params_offset(p, 5) == -1 && dlc_params_offset(p, -1) == -1);
    CHECK(dlc_params_find(p, "d") == 3 && dlc_params_find(p, "zz") == -1);
    CHECK(strcmp(dlc_params_name(p, 1), "b") == 0 && dlc_params_name(p, 9) == NULL);
    CHECK(dlc_params_tensor(p, 2) == c && dlc_params_tensor(p, 5) == NULL);

    /* re-pointed: same objects, arena memory, values preserved, grads are views */
    float *data = dlc_params_data(p), *grad = dlc_params_grad(p);
    for (int i = 0; i < 5; i++) {
        CHECK(ts[i]->data == data + want_off[i]);
        CHECK(ts[i]->storage == a->storage);
        CHECK(ts[i]->requires_grad);
        CHECK(ts[i]->grad && ts[i]->grad->data == grad + want_off[i]);
        CHECK(ts[i]->grad && dlc_tensor_same_shape(ts[i]->grad, ts[i]));
    }
    CHECK(memcmp(a->data, a0, sizeof a0) == 0 && memcmp(b->data, b0, sizeof b0) == 0);
    CHECK(c->data[0] == 4.5f);
    int pad_zero = 1;
    for (int64_t i = 0; i < dlc_params_size(p); i++) {
        int inside = 0;
        for (int k = 0; k < 5; k++)
            inside |= i >= want_off[k] && i < want_off[k] + ts[k]->numel;
        if (!inside && data[i] != 0.0f) pad_zero = 0;
        if (grad[i] != 0.0f) pad_zero = 0;
    }
    CHECK(pad_zero);

    /* writes go both ways */
    data[16 + 3] = 123.0f;
    CHECK(b->data[3] == 123.0f);
    d->data[7] = -2.0f;
    CHECK(data[48 + 7] == -2.0f);
    dlc_tensor *late = dlc_tensor_view(a, 5, 1, (int64_t[]){5});
    late->data[0] = 77.0f;
    CHECK(data[5] == 77.0f);

    /* the early view keeps the old memory: packing-time values, no longer linked */
    CHECK(early->data[0] == a0[5] && early->data != a->data + 5);
    early->data[1] = 555.0f;
    CHECK(a->data[6] == a0[6]);
    /* the old grad is released by b but still alive for whoever held it */
    CHECK(oldgrad->refs == 1 && oldgrad->data[0] == 9.0f && b->grad != oldgrad);

    /* flat views share the arenas and keep them alive */
    dlc_tensor *flat = dlc_params_flat(p), *fgrad = dlc_params_flat_grad(p);
    CHECK(flat->numel == 64 && flat->data == data && fgrad->data == grad && flat->ndim == 1);
    flat->data[32] = 8.0f;
    CHECK(c->data[0] == 8.0f);

    /* free: the tensors keep working (under ASan this is a use-after-free check) */
    dlc_params_free(p);
    CHECK(a->data[5] == 77.0f && c->data[0] == 8.0f && flat->data[32] == 8.0f);
    a->grad->data[0] = 1.0f;
    CHECK(fgrad->data[0] == 1.0f);

    /* once freed, they may be packed again (copied into a new arena) */
    dlc_params *q = dlc_params_new(2, (const char *[]){"d", "a"}, (dlc_tensor *[]){d, a});
    CHECK_OK(q);
    if (q) {
        CHECK(a->data == dlc_params_data(q) + 16 && a->data[5] == 77.0f && d->data[7] == -2.0f);
        CHECK(a->grad->data[0] == 0.0f); /* a fresh grad */
        CHECK(flat->data[0] != 0.0f && flat->data[5] == 77.0f); /* old arena still alive via flat */
        dlc_params_free(q);
    }
    dlc_tensor_release(flat);
    dlc_tensor_release(fgrad);
    dlc_tensor_release(early);
    dlc_tensor_release(late);
    dlc_tensor_release(oldgrad);
    for (int i = 0; i < 5; i++) dlc_tensor_release(ts[i]);
}

/* The internal helper behind packing: bounds, and the old storage kept by its views. */
static void test_rebind(void) {
    int64_t s4[1] = {4}, s3[1] = {3};
    dlc_tensor *base = dlc_tensor_arange(0, 10, 1), *t = dlc_tensor_full(1, s4, 7.0f);
    dlc_tensor *old = dlc_tensor_view(t, 0, 1, s4);
    CHECK_SFAILS(dlcx_tensor_rebind(t, base, 7), DLC_ERR_RANGE, "4 elements at offset 7 do not fit");
    CHECK_SFAILS(dlcx_tensor_rebind(t, base, -1), DLC_ERR_RANGE, "do not fit");
    CHECK(t->data[0] == 7.0f);
    CHECK(dlcx_tensor_rebind(t, base, 6) == DLC_OK);
    CHECK(t->data == base->data + 6 && t->storage == base->storage && t->data[3] == 9.0f);
    CHECK(old->data[0] == 7.0f); /* the old storage lives on through the view */
    dlc_tensor *win = dlc_tensor_view(base, 2, 1, s3);
    dlc_tensor *u = dlc_tensor_full(1, s3, 1.0f);
    CHECK_SFAILS(dlcx_tensor_rebind(u, win, 1), DLC_ERR_RANGE, "do not fit"); /* the window, not the storage */
    CHECK(dlcx_tensor_rebind(u, win, 0) == DLC_OK && u->data[0] == 2.0f);
    CHECK(dlcx_tensor_rebind(u, base, 0) == DLC_OK && u->data[0] == 0.0f); /* within its own storage */
    dlc_tensor_release(u);
    dlc_tensor_release(win);
    dlc_tensor_release(old);
    dlc_tensor_release(t);
    dlc_tensor_release(base);
}

/* dlc_params_new_layout: the same offsets and size as dlc_params_new, the tensors
 * re-pointed into an arena of zeros that no byte of was written: none of its pages is
 * resident (mincore) until something writes it. */
static void test_layout_only(void) {
    const char *names[2] = {"a", "b"};
    int64_t sa[1] = {3 << 20}, sb[2] = {5, 7}; /* 12 MiB and a small one */
    dlc_tensor *a = dlc_tensor_full(1, sa, 2.0f), *b = dlc_tensor_full(2, sb, 3.0f);
    dlc_tensor *a2 = dlc_tensor_full(1, sa, 2.0f), *b2 = dlc_tensor_full(2, sb, 3.0f);
    dlc_tensor *ts[2] = {a, b}, *ts2[2] = {a2, b2};
    dlc_params *lay = dlc_params_new_layout(2, names, ts), *full = dlc_params_new(2, names, ts2);
    CHECK_OK(lay && full);
    if (!lay || !full) return;
    CHECK(dlc_params_size(lay) == dlc_params_size(full) && dlc_params_offset(lay, 1) == dlc_params_offset(full, 1));
    CHECK(a->data == dlc_params_data(lay) && b->data == dlc_params_data(lay) + dlc_params_offset(lay, 1));
    CHECK(b->data[34] == 0.0f && a2->data[5] == 2.0f); /* zeros, not the values */
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)a->data + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    size_t len = (size_t)(4 << 20); /* 4 MiB inside a's 12, away from b's page */
    unsigned char vec[(4 << 20) / 4096 + 1];
    int resident = 0;
    if (pg == 4096 && mincore((void *)lo, len, vec) == 0) {
        for (size_t i = 0; i < len / 4096; i++) resident += vec[i] & 1;
        CHECK(resident == 0);
    }
    dlc_params_free(lay);
    dlc_params_free(full);
    dlc_tensor_release(a), dlc_tensor_release(b), dlc_tensor_release(a2), dlc_tensor_release(b2);
}

static void test_pack_errors(void) {
    int64_t s[2] = {2, 3};
    dlc_tensor *a = randn(1, 2, s), *b = randn(2, 2, s);
    float *a_data = a->data;
    dlc_tensor *ab[2] = {a, b};
    CHECK_PFAILS(dlc_params_new(0, (const char *[]){"a"}, ab), DLC_ERR_ARG, "need at least 1");
    CHECK_PFAILS(dlc_params_new(2, (const char *[]){"a", ""}, ab), DLC_ERR_ARG, "tensor 1 has an empty name");
    CHECK_PFAILS(dlc_params_new(2, (const char *[]){"a", NULL}, ab), DLC_ERR_ARG, "empty name");
    CHECK_PFAILS(dlc_params_new(2, (const char *[]){"w", "w"}, ab), DLC_ERR_ARG,
                 "the name 'w' is used twice");
    CHECK_PFAILS(dlc_params_new(2, (const char *[]){"x", "y"}, (dlc_tensor *[]){a, a}), DLC_ERR_ARG,
                 "the same tensor is given twice, as 'x' and 'y'");
    dlc_tensor_set_requires_grad(a, 1);
    dlc_tensor *sum = dlc_add(a, b);
    CHECK_PFAILS(dlc_params_new(2, (const char *[]){"a", "sum"}, (dlc_tensor *[]){a, sum}),
                 DLC_ERR_STATE, "tensor 'sum' is the result of an op (add), not a leaf");
    dlc_tensor *row = dlc_tensor_view(a, 3, 1, (int64_t[]){3});
    CHECK_PFAILS(dlc_params_new(2, (const char *[]){"a", "row"}, (dlc_tensor *[]){a, row}),
                 DLC_ERR_ARG, "'a' and 'row' share memory");
    /* nothing was touched by the failures */
    CHECK(a->data == a_data && a->grad == NULL);

    dlc_params *p = dlc_params_new(1, (const char *[]){"layer.w"}, (dlc_tensor *[]){a});
    CHECK_OK(p);
    CHECK_PFAILS(dlc_params_new(2, (const char *[]){"b", "w2"}, (dlc_tensor *[]){b, a}),
                 DLC_ERR_STATE, "tensor 'w2' is already in the arena of another live Params (as 'layer.w')");
    dlc_tensor *v = dlc_tensor_view(a, 3, 1, (int64_t[]){3}); /* a view of a packed tensor */
    CHECK_PFAILS(dlc_params_new(1, (const char *[]){"v"}, (dlc_tensor *[]){v}), DLC_ERR_STATE,
                 "(as 'layer.w')");
    CHECK(b->grad == NULL && !b->requires_grad); /* b untouched by the failed call */
    dlc_params_free(p);
    dlc_tensor_release(v);
    dlc_tensor_release(row);
    dlc_tensor_release(sum);
    dlc_tensor_release(a);
    dlc_tensor_release(b);
}

/* loss = sum(x @ w + b): dL/dw[i][j] = sum_r x[r][i], dL/db[j] = rows */
static void test_backward_into_arena(void) {
    int64_t sx[2] = {2, 3}, sw[2] = {3, 4}, sb[1] = {4};
    dlc_tensor *x = randn(5, 2, sx), *w = randn(6, 2, sw), *b = randn(7, 1, sb);
    dlc_params *p = dlc_params_new(2, (const char *[]){"w", "b"}, (dlc_tensor *[]){w, b});
    CHECK_OK(p);
    float *g = dlc_params_grad(p);
    for (int pass = 1; pass <= 2; pass++) { /* the second pass accumulates */
        dlc_tensor *xw = dlc_matmul(x, w, 0, 0), *y = dlc_bias_add(xw, b), *loss = dlc_sum_all(y);
        CHECK(dlc_backward(loss, NULL, 0) == DLC_OK);
        dlc_tensor_release(xw);
        dlc_tensor_release(y);
        dlc_tensor_release(loss);
        int ok = 1;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) {
                double want = pass * ((double)x->data[i] + x->data[3 + i]);
                if (fabs(g[i * 4 + j] - want) > 1e-5) ok = 0;
            }
        for (int j = 0; j < 4; j++)
            if (g[dlc_params_offset(p, 1) + j] != 2.0f * pass) ok = 0;
        CHECK(ok);
        CHECK(w->grad->data == g && b->grad->data == g + 16);
    }
    dlc_params_zero_grad(p);
    int zero = 1;
    for (int64_t i = 0; i < dlc_params_size(p); i++) zero &= g[i] == 0.0f;
    CHECK(zero);
    CHECK(dlc_params_grad_norm(p) == 0.0);
    dlc_params_free(p);
    dlc_tensor_release(x);
    dlc_tensor_release(w);
    dlc_tensor_release(b);
}

static void test_grad_norm_and_clip(void) {
    int64_t s1[2] = {30, 17}, s2[1] = {5};
    dlc_tensor *a = randn(8, 2, s1), *b = randn(9, 1, s2);
    dlc_params *p = dlc_params_new(2, (const char *[]){"a", "b"}, (dlc_tensor *[]){a, b});
    CHECK_OK(p);
    dlc_rng_normal(&(dlc_rng){11, 0}, a->grad->data, a->numel, 0.0f, 3.0f);
    dlc_rng_normal(&(dlc_rng){12, 0}, b->grad->data, b->numel, 0.0f, 3.0f);
    double ss = 0;
    for (int64_t i = 0; i < a->numel; i++) ss += (double)a->grad->data[i] * a->grad->data[i];
    for (int64_t i = 0; i < b->numel; i++) ss += (double)b->grad->data[i] * b->grad->data[i];
    double ref = sqrt(ss);
    CHECK(rel_ok(dlc_params_grad_norm(p), ref));
    /* max_norm above the norm: unchanged */
    float g0 = b->grad->data[2];
    CHECK(rel_ok(dlc_params_clip_grad_norm(p, ref * 2), ref));
    CHECK(b->grad->data[2] == g0);
    /* below: returns the norm before, scales to max_norm / (norm + 1e-6) */
    double coef = 1.0 / (ref + 1e-6);
    CHECK(rel_ok(dlc_params_clip_grad_norm(p, 1.0), ref));
    CHECK(rel_ok(b->grad->data[2], g0 * coef));
    CHECK(rel_ok(dlc_params_grad_norm(p), ref * coef));
    CHECK(dlc_params_clip_grad_norm(p, 0.0) == -1.0 && strstr(dlc_last_error(), "max_norm = 0"));
    CHECK(dlc_params_clip_grad_norm(p, NAN) == -1.0 && dlc_last_status() == DLC_ERR_ARG);
    /* non-finite gradients: norm reported, gradients left alone */
    b->grad->data[0] = INFINITY;
    g0 = b->grad->data[2];
    CHECK(isinf(dlc_params_clip_grad_norm(p, 1.0)) && b->grad->data[2] == g0);
    dlc_params_free(p);
    dlc_tensor_release(a);
    dlc_tensor_release(b);
}

/* ---------------------------------------------------------------------------
 * optimizers vs a per-element double reference
 * --------------------------------------------------------------------------- */

/* Three tensors: w [6,5] (decays by default), bias [5] (does not), emb [4,3]. */
typedef struct fixture {
    dlc_tensor *t[3];
    dlc_params *p;
    int64_t n;      /* arena size */
    double *ref;    /* [n] reference parameters */
    double *s0, *s1;/* [n] reference state */
    double *mp, *m0, *m1; /* [n] magnitudes of the terms behind ref, s0, s1 */
    int *decay;     /* [n] per-float flag for the reference */
    int *live;      /* [n] 1 inside a tensor, 0 in padding */
} fixture;

static void fx_init(fixture *f) {
    int64_t sw[2] = {6, 5}, sb[1] = {5}, se[2] = {4, 3};
    f->t[0] = randn(21, 2, sw);
    f->t[1] = randn(22, 1, sb);
    f->t[2] = randn(23, 2, se);
    f->p = dlc_params_new(3, (const char *[]){"w", "bias", "emb"}, f->t);
    DLC_ASSERT(f->p);
    f->n = dlc_params_size(f->p);
    f->ref = calloc((size_t)f->n, sizeof(double));
    f->s0 = calloc((size_t)f->n, sizeof(double));
    f->s1 = calloc((size_t)f->n, sizeof(double));
    f->mp = calloc((size_t)f->n, sizeof(double));
    f->m0 = calloc((size_t)f->n, sizeof(double));
    f->m1 = calloc((size_t)f->n, sizeof(double));
    f->decay = calloc((size_t)f->n, sizeof(int));
    f->live = calloc((size_t)f->n, sizeof(int));
    for (int k = 0; k < 3; k++) {
        int64_t o = dlc_params_offset(f->p, k);
        for (int64_t i = 0; i < f->t[k]->numel; i++) f->live[o + i] = 1;
    }
    for (int64_t i = 0; i < f->n; i++) {
        f->ref[i] = dlc_params_data(f->p)[i];
        f->mp[i] = fabs(f->ref[i]);
    }
}

static void fx_set_decay(fixture *f, int k, int on) {
    int64_t o = dlc_params_offset(f->p, k);
    for (int64_t i = 0; i < f->t[k]->numel; i++) f->decay[o + i] = on;
}

/* Fresh N(0,1) gradients for step `step` (padding stays 0). */
static void fx_grads(fixture *f, int step) {
    dlc_params_zero_grad(f->p);
    for (int k = 0; k < 3; k++)
        dlc_rng_normal(&(dlc_rng){1000 + 10 * (uint64_t)step + (uint64_t)k, 0}, f->t[k]->grad->data,
                       f->t[k]->numel, 0.0f, 1.0f);
}

/* Compares arena and state with the reference; returns the worst relative error. */
static int fx_compare(fixture *f, dlc_optim *o, const char *what) {
    const float *pd = dlc_params_data(f->p);
    const float *st0 = dlc_optim_state(o, 0), *st1 = dlc_optim_state(o, 1);
    for (int64_t i = 0; i < f->n; i++) {
        int ok = rel_mag_ok(pd[i], f->ref[i], f->mp[i]) &&
                 (!st0 || rel_mag_ok(st0[i], f->s0[i], f->m0[i])) &&
                 (!st1 || rel_mag_ok(st1[i], f->s1[i], f->m1[i]));
        if (!f->live[i]) ok = ok && pd[i] == 0.0f; /* padding stays exactly zero */
        if (!ok) {
            fprintf(stderr, "%s: element %lld: param %.9g want %.9g, state %.9g/%.9g want %.9g/%.9g\n",
                    what, (long long)i, pd[i], f->ref[i], st0 ? st0[i] : 0.0, st1 ? st1[i] : 0.0,
                    f->s0[i], f->s1[i]);
            return 0;
        }
    }
    return 1;
}

static void fx_free(fixture *f) {
    dlc_params_free(f->p);
    for (int k = 0; k < 3; k++) dlc_tensor_release(f->t[k]);
    free(f->ref);
    free(f->s0);
    free(f->s1);
    free(f->mp);
    free(f->m0);
    free(f->m1);
    free(f->decay);
    free(f->live);
}

static const float step_lr[6] = {1e-2f, 2e-2f, 3e-2f, 3e-2f, 2e-2f, 5e-3f};

/* Six AdamW steps with fresh gradients, each compared with the double reference. */
static int adamw_vs_reference(fixture *f, dlc_optim *o, const dlc_optim_params *op, const char *what) {
    int ok = 1;
    for (int s = 0; s < 6; s++) {
        fx_grads(f, s);
        const float *g = dlc_params_grad(f->p);
        double lr = step_lr[s], t = s + 1, b1 = op->beta1, b2 = op->beta2;
        for (int64_t i = 0; i < f->n; i++) {
            double gi = g[i];
            if (f->decay[i]) f->ref[i] -= lr * op->weight_decay * f->ref[i];
            f->s0[i] = b1 * f->s0[i] + (1 - b1) * gi;
            f->s1[i] = b2 * f->s1[i] + (1 - b2) * gi * gi;
            double mh = f->s0[i] / (1 - pow(b1, t)), vh = f->s1[i] / (1 - pow(b2, t));
            f->ref[i] -= lr * mh / (sqrt(vh) + op->eps);
            f->m0[i] = b1 * f->m0[i] + (1 - b1) * fabs(gi);
            f->m1[i] = f->s1[i];
            f->mp[i] += lr * f->m0[i] / (1 - pow(b1, t)) / (sqrt(vh) + op->eps);
        }
        ok &= dlc_optim_step(o, step_lr[s]) == DLC_OK;
        ok &= fx_compare(f, o, what);
    }
    return ok;
}

static void test_adamw(void) {
    fixture f = {0};
    fx_init(&f);
    dlc_optim_params op = dlc_optim_default_params(DLC_OPTIM_ADAMW);
    CHECK(op.beta1 == 0.9 && op.beta2 == 0.95 && op.eps == 1e-8 && op.weight_decay == 0.1);
    op.weight_decay = 0.3; /* large enough that a wrong mask shows */
    dlc_optim *o = dlc_optim_new(f.p, &op);
    CHECK_OK(o);
    /* default mask: matrices decay, vectors do not; then switch emb off */
    CHECK(dlc_optim_decays(o, 0) == 1 && dlc_optim_decays(o, 1) == 0 && dlc_optim_decays(o, 2) == 1);
    CHECK(dlc_optim_set_decay(o, 2, 0) == DLC_OK && dlc_optim_decays(o, 2) == 0);
    CHECK_SFAILS(dlc_optim_set_decay(o, 3, 1), DLC_ERR_RANGE, "tensor index 3 is out of range");
    CHECK(dlc_optim_decays(o, -1) == -1);
    fx_set_decay(&f, 0, 1);
    CHECK(dlc_optim_state_count(o) == 2);
    CHECK(!strcmp(dlc_optim_state_name(o, 0), "m") && !strcmp(dlc_optim_state_name(o, 1), "v"));
    CHECK(dlc_optim_state_name(o, 2) == NULL && dlc_optim_state(o, 2) == NULL);
    CHECK(dlc_optim_state_tensor(o, 1)->numel == f.n);

    int ok = adamw_vs_reference(&f, o, &op, "adamw defaults, weight decay 0.3");
    CHECK(ok);
    CHECK(dlc_optim_step_count(o) == 6);

    /* decay mask respected: with zero gradients only the decaying tensor moves (by
     * exactly the decay factor; Adam's update is 0/(0+eps) = 0 once m and v vanish) */
    dlc_optim_params op2 = op;
    op2.beta1 = 0.0;
    op2.beta2 = 0.0;
    dlc_optim *o2 = dlc_optim_new(f.p, &op2);
    CHECK_OK(o2);
    dlc_optim_set_decay(o2, 2, 0);
    dlc_params_zero_grad(f.p);
    float w0 = f.t[0]->data[3], b0 = f.t[1]->data[3], e0 = f.t[2]->data[3];
    CHECK(dlc_optim_step(o2, 0.5f) == DLC_OK);
    CHECK(rel_ok(f.t[0]->data[3], w0 * (1 - 0.5 * 0.3)));
    CHECK(f.t[1]->data[3] == b0 && f.t[2]->data[3] == e0);
    dlc_optim_free(o2);

    /* frozen tensors are skipped entirely */
    f.t[1]->requires_grad = 0;
    fx_grads(&f, 9);
    float fb = f.t[1]->data[0], fm = dlc_optim_state(o, 0)[dlc_params_offset(f.p, 1)];
    float fw = f.t[0]->data[0];
    CHECK(dlc_optim_step(o, 0.01f) == DLC_OK);
    CHECK(f.t[1]->data[0] == fb && dlc_optim_state(o, 0)[dlc_params_offset(f.p, 1)] == fm);
    CHECK(f.t[0]->data[0] != fw);
    f.t[1]->requires_grad = 1;

    /* step count round trip, and step lr validation */
    CHECK(dlc_optim_set_step_count(o, 100) == DLC_OK && dlc_optim_step_count(o) == 100);
    CHECK_SFAILS(dlc_optim_set_step_count(o, -1), DLC_ERR_ARG, "step count = -1");
    CHECK_SFAILS(dlc_optim_step(o, NAN), DLC_ERR_ARG, "adamw: step lr = nan");
    CHECK_SFAILS(dlc_optim_step(o, -1.0f), DLC_ERR_ARG, "expected a finite number >= 0");
    CHECK(dlc_optim_step_count(o) == 100);

    /* a tensor whose grad was swapped out is caught, not silently untrained */
    dlc_tensor *g = f.t[2]->grad;
    f.t[2]->grad = dlc_tensor_clone(g);
    CHECK_SFAILS(dlc_optim_step(o, 0.01f), DLC_ERR_STATE, "adamw: the .grad of tensor 'emb'");
    dlc_tensor_release(f.t[2]->grad);
    f.t[2]->grad = g;
    CHECK(dlc_optim_step(o, 0.01f) == DLC_OK);

    dlc_optim_free(o);
    fx_free(&f);
}

/* Other betas and a large eps (so its placement matters), all tensors decaying. */
static void test_adamw_other_hyperparameters(void) {
    fixture f = {0};
    fx_init(&f);
    dlc_optim_params op = dlc_optim_default_params(DLC_OPTIM_ADAMW);
    op.beta1 = 0.8;
    op.beta2 = 0.999;
    op.eps = 1e-2;
    op.weight_decay = 0.05;
    dlc_optim *o = dlc_optim_new(f.p, &op);
    CHECK_OK(o);
    for (int k = 0; k < 3; k++) {
        dlc_optim_set_decay(o, k, 1);
        fx_set_decay(&f, k, 1);
    }
    CHECK(adamw_vs_reference(&f, o, &op, "adamw betas (0.8, 0.999), eps 1e-2"));
    dlc_optim_free(o);
    fx_free(&f);
}

typedef struct sgd_case {
    const char *name;
    double momentum, dampening, wd;
    int nesterov;
} sgd_case;

static void run_sgd_case(const sgd_case *c) {
    fixture f = {0};
    fx_init(&f);
    dlc_optim_params op = dlc_optim_default_params(DLC_OPTIM_SGD);
    CHECK(op.momentum == 0 && op.weight_decay == 0 && !op.nesterov && op.dampening == 0);
    op.momentum = c->momentum;
    op.dampening = c->dampening;
    op.weight_decay = c->wd;
    op.nesterov = c->nesterov;
    dlc_optim *o = dlc_optim_new(f.p, &op);
    CHECK_OK(o);
    if (!o) {
        fx_free(&f);
        return;
    }
    CHECK(dlc_optim_state_count(o) == (c->momentum != 0));
    if (c->momentum != 0) CHECK(!strcmp(dlc_optim_state_name(o, 0), "momentum"));
    fx_set_decay(&f, 0, 1);
    fx_set_decay(&f, 2, 1);
    int ok = 1;
    for (int s = 0; s < 6; s++) {
        fx_grads(&f, s);
        const float *g = dlc_params_grad(f.p);
        double lr = step_lr[s], mu = c->momentum;
        for (int64_t i = 0; i < f.n; i++) {
            double d = g[i], md = fabs(d);
            if (f.decay[i]) {
                d += c->wd * f.ref[i];
                md += c->wd * f.mp[i];
            }
            if (mu != 0) {
                f.s0[i] = s == 0 ? d : mu * f.s0[i] + (1 - c->dampening) * d;
                f.m0[i] = s == 0 ? md : mu * f.m0[i] + (1 - c->dampening) * md;
                d = c->nesterov ? d + mu * f.s0[i] : f.s0[i];
                md = c->nesterov ? md + mu * f.m0[i] : f.m0[i];
            }
            f.ref[i] -= lr * d;
            f.mp[i] += lr * md;
        }
        ok &= dlc_optim_step(o, step_lr[s]) == DLC_OK;
        ok &= fx_compare(&f, o, c->name);
    }
    if (!ok) fprintf(stderr, "sgd case %s failed\n", c->name);
    CHECK(ok);
    dlc_optim_free(o);
    fx_free(&f);
}

static void test_sgd(void) {
    static const sgd_case cases[] = {
        {"sgd plain", 0, 0, 0, 0},
        {"sgd weight decay", 0, 0, 0.05, 0},
        {"sgd momentum", 0.9, 0, 0, 0},
        {"sgd nesterov", 0.9, 0, 0, 1},
        {"sgd nesterov + weight decay", 0.8, 0, 0.01, 1},
        {"sgd momentum + dampening + weight decay", 0.9, 0.1, 0.01, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_sgd_case(&cases[i]);
}

static void test_bad_hyperparameters(void) {
    int64_t s[1] = {4};
    dlc_tensor *a = randn(1, 1, s);
    dlc_params *p = dlc_params_new(1, (const char *[]){"a"}, (dlc_tensor *[]){a});
    dlc_optim_params op = dlc_optim_default_params(DLC_OPTIM_ADAMW);
    op.beta2 = 1.5;
    CHECK_SFAILS(dlc_optim_params_check(&op), DLC_ERR_ARG, "adamw: beta2 = 1.5, expected a number in [0, 1)");
    CHECK_PFAILS(dlc_optim_new(p, &op), DLC_ERR_ARG, "adamw: beta2 = 1.5, expected a number in [0, 1)");
    op = dlc_optim_default_params(DLC_OPTIM_ADAMW);
    op.beta1 = -0.1;
    CHECK_PFAILS(dlc_optim_new(p, &op), DLC_ERR_ARG, "adamw: beta1 = -0.1, expected a number in [0, 1)");
    op = dlc_optim_default_params(DLC_OPTIM_ADAMW);
    op.lr = -1;
    CHECK_PFAILS(dlc_optim_new(p, &op), DLC_ERR_ARG, "adamw: lr = -1, expected a finite number >= 0");
    op = dlc_optim_default_params(DLC_OPTIM_ADAMW);
    op.eps = 0;
    CHECK_PFAILS(dlc_optim_new(p, &op), DLC_ERR_ARG, "adamw: eps = 0, expected a finite number > 0");
    op = dlc_optim_default_params(DLC_OPTIM_ADAMW);
    op.weight_decay = NAN;
    CHECK_PFAILS(dlc_optim_new(p, &op), DLC_ERR_ARG, "adamw: weight_decay = nan");
    op = dlc_optim_default_params(DLC_OPTIM_SGD);
    op.momentum = -0.5;
    CHECK_PFAILS(dlc_optim_new(p, &op), DLC_ERR_ARG, "sgd: momentum = -0.5, expected a finite number >= 0");
    op = dlc_optim_default_params(DLC_OPTIM_SGD);
    op.dampening = 2;
    CHECK_PFAILS(dlc_optim_new(p, &op), DLC_ERR_ARG, "sgd: dampening = 2, expected a number in [0, 1]");
    op = dlc_optim_default_params(DLC_OPTIM_SGD);
    op.nesterov = 1;
    CHECK_PFAILS(dlc_optim_new(p, &op), DLC_ERR_ARG, "sgd: nesterov needs momentum > 0");
    op.momentum = 0.9;
    op.dampening = 0.5;
    CHECK_PFAILS(dlc_optim_new(p, &op), DLC_ERR_ARG, "dampening = 0 (momentum = 0.9, dampening = 0.5)");
    op = dlc_optim_default_params(DLC_OPTIM_SGD);
    op.kind = DLC_OPTIM_KIND_COUNT;
    CHECK_PFAILS(dlc_optim_new(p, &op), DLC_ERR_ARG, "optimizer: kind = 2");
    CHECK(!strcmp(dlc_optim_kind_name(DLC_OPTIM_SGD), "sgd") && !dlc_optim_kind_name(DLC_OPTIM_KIND_COUNT));
    dlc_params_free(p);
    dlc_tensor_release(a);
}

/* ---------------------------------------------------------------------------
 * schedules
 * --------------------------------------------------------------------------- */

static void test_schedules(void) {
    const double pi = 3.14159265358979323846;
    dlc_lr_schedule cs = {DLC_LR_CONSTANT, 0.1, 0, 10, 0};
    CHECK(rel_ok(dlc_lr_at(&cs, 0), 0.1 / 10));
    CHECK(rel_ok(dlc_lr_at(&cs, 9), 0.1));
    CHECK(rel_ok(dlc_lr_at(&cs, 10), 0.1));
    CHECK(rel_ok(dlc_lr_at(&cs, 1000000), 0.1));
    CHECK(rel_ok(dlc_lr_at(&cs, -5), 0.01));
    dlc_lr_schedule c0 = {DLC_LR_CONSTANT, 0.1, 0, 0, 0};
    CHECK(rel_ok(dlc_lr_at(&c0, 0), 0.1));

    dlc_lr_schedule co = {DLC_LR_COSINE, 3e-3, 3e-4, 100, 1100};
    CHECK(rel_ok(dlc_lr_at(&co, 0), 3e-3 / 100));
    CHECK(rel_ok(dlc_lr_at(&co, 49), 3e-3 * 50 / 100));
    CHECK(rel_ok(dlc_lr_at(&co, 99), 3e-3));
    CHECK(rel_ok(dlc_lr_at(&co, 100), 3e-3));
    CHECK(rel_ok(dlc_lr_at(&co, 600), 3e-4 + 0.5 * (3e-3 - 3e-4)));            /* middle */
    CHECK(rel_ok(dlc_lr_at(&co, 350), 3e-4 + 0.5 * (3e-3 - 3e-4) * (1 + cos(pi * 0.25))));
    CHECK(rel_ok(dlc_lr_at(&co, 1099), 3e-4 + 0.5 * (3e-3 - 3e-4) * (1 + cos(pi * 999.0 / 1000))));
    CHECK(rel_ok(dlc_lr_at(&co, 1100), 3e-4));                                 /* end */
    CHECK(rel_ok(dlc_lr_at(&co, 5000), 3e-4));

    dlc_lr_schedule li = {DLC_LR_LINEAR, 1.0, 0.0, 0, 200};
    CHECK(rel_ok(dlc_lr_at(&li, 0), 1.0));
    CHECK(rel_ok(dlc_lr_at(&li, 50), 0.75));
    CHECK(rel_ok(dlc_lr_at(&li, 100), 0.5));
    CHECK(dlc_lr_at(&li, 200) == 0.0f && dlc_lr_at(&li, 300) == 0.0f);
    dlc_lr_schedule lw = {DLC_LR_LINEAR, 1.0, 0.1, 4, 14};
    CHECK(rel_ok(dlc_lr_at(&lw, 3), 1.0) && rel_ok(dlc_lr_at(&lw, 4), 1.0));
    CHECK(rel_ok(dlc_lr_at(&lw, 9), 0.55) && rel_ok(dlc_lr_at(&lw, 14), 0.1));

    dlc_lr_schedule bad = {DLC_LR_COSINE, 1e-3, 0, 100, 100};
    CHECK_SFAILS(dlc_lr_schedule_check(&bad), DLC_ERR_ARG, "cosine: total = 100 must be greater than warmup = 100");
    CHECK(isnan(dlc_lr_at(&bad, 5)));
    bad = (dlc_lr_schedule){DLC_LR_LINEAR, 1e-3, 1e-2, 0, 100};
    CHECK_SFAILS(dlc_lr_schedule_check(&bad), DLC_ERR_ARG, "linear: min_lr = 0.01, expected a number in [0, lr = 0.001]");
    bad = (dlc_lr_schedule){DLC_LR_CONSTANT, -1, 0, 0, 0};
    CHECK_SFAILS(dlc_lr_schedule_check(&bad), DLC_ERR_ARG, "constant: lr = -1");
    bad = (dlc_lr_schedule){DLC_LR_CONSTANT, 1, 0, -3, 0};
    CHECK_SFAILS(dlc_lr_schedule_check(&bad), DLC_ERR_ARG, "constant: warmup = -3");
    bad = (dlc_lr_schedule){DLC_LR_KIND_COUNT, 1, 0, 0, 0};
    CHECK_SFAILS(dlc_lr_schedule_check(&bad), DLC_ERR_ARG, "lr schedule: kind = 3");
    CHECK(!strcmp(dlc_lr_kind_name(DLC_LR_COSINE), "cosine") && !dlc_lr_kind_name(DLC_LR_KIND_COUNT));
}

/* a restored step count past 2^53 would overflow the counter (and lose f32 meaning) */
static void test_step_count_bounds(void) {
    dlc_tensor *w = dlc_tensor_zeros(1, (int64_t[]){4});
    dlc_params *p = dlc_params_new(1, (const char *[]){"w"}, &w);
    dlc_optim_params op = dlc_optim_default_params(DLC_OPTIM_ADAMW);
    dlc_optim *o = dlc_optim_new(p, &op);
    CHECK(dlc_optim_set_step_count(o, INT64_MAX) == DLC_ERR_ARG);
    CHECK(strstr(dlc_last_error(), "expected an integer in [0, 2^53]") != NULL);
    CHECK(dlc_optim_set_step_count(o, 1000) == DLC_OK && dlc_optim_step_count(o) == 1000);
    dlc_optim_free(o);
    dlc_params_free(p);
    dlc_tensor_release(w);
}

/* ---- two compute threads ----
 * An arena of the charlm model's size: the norm, the clip, AdamW and zero_grad split
 * across two threads and give the same bits as on one (the norm sums fixed chunks in
 * order; the updates are per element). */

typedef struct {
    dlc_tensor *w, *b;
    dlc_params *p;
    dlc_optim *o;
    double norm;
} big_run;

static int big_start(big_run *r) {
    int64_t s1[2] = {512, 384}, s2[1] = {3001};
    r->w = randn(60, 2, s1);
    r->b = randn(61, 1, s2);
    r->p = dlc_params_new(2, (const char *[]){"w", "b"}, (dlc_tensor *[]){r->w, r->b});
    dlc_optim_params op = dlc_optim_default_params(DLC_OPTIM_ADAMW);
    r->o = r->p ? dlc_optim_new(r->p, &op) : NULL;
    return r->o != NULL;
}

/* Two steps of: fixed gradients, clip to 1, AdamW. */
static void big_steps(big_run *r) {
    for (int step = 0; step < 2; step++) {
        dlc_params_zero_grad(r->p);
        dlc_rng_normal(&(dlc_rng){70 + step, 0}, r->w->grad->data, r->w->numel, 0.0f, 0.1f);
        dlc_rng_normal(&(dlc_rng){80 + step, 0}, r->b->grad->data, r->b->numel, 0.0f, 0.1f);
        r->norm = dlc_params_clip_grad_norm(r->p, 1.0);
        CHECK(dlc_optim_step(r->o, 1e-3f) == DLC_OK);
    }
}

static void big_free(big_run *r) {
    dlc_optim_free(r->o);
    dlc_params_free(r->p);
    dlc_tensor_release(r->w);
    dlc_tensor_release(r->b);
}

static void test_two_threads(void) {
    dlcx_set_par_grain(0); /* the default */
    big_run one = {0}, two = {0};
    CHECK(big_start(&one) && big_start(&two));
    if (!one.o || !two.o) return;
    /* the norm of known gradients, against a double reference */
    dlc_set_num_threads(2);
    dlc_rng_normal(&(dlc_rng){90, 0}, dlc_params_grad(one.p), dlc_params_size(one.p), 0.0f, 1.0f);
    double ss = 0;
    const float *g = dlc_params_grad(one.p);
    for (int64_t i = 0; i < dlc_params_size(one.p); i++) ss += (double)g[i] * g[i];
    CHECK(rel_ok(dlc_params_grad_norm(one.p), sqrt(ss)));

    dlc_set_num_threads(1);
    big_steps(&one);
    dlc_set_num_threads(2);
    int64_t before = dlcx_par_regions();
    big_steps(&two);
    if (dlcx_par_available()) { /* else the kernels never split (OpenBLAS backend, no OpenMP) */
        CHECK(dlcx_par_regions() - before >= 2 * 4); /* zero_grad, norm, clip, AdamW per step */
    }
    CHECK(one.norm == two.norm && one.norm > 1.0);
    int64_t n = dlc_params_size(one.p);
    CHECK(memcmp(dlc_params_data(one.p), dlc_params_data(two.p), (size_t)n * sizeof(float)) == 0);
    for (int k = 0; k < 2; k++)
        CHECK(memcmp(dlc_optim_state(one.o, k), dlc_optim_state(two.o, k), (size_t)n * sizeof(float)) == 0);
    big_free(&one);
    big_free(&two);
    dlc_set_num_threads(1);
}

/* Every case at 1 and at 2 compute threads, with the grain at 1 float so that even
 * small arenas are split across both threads. */
int main(void) {
    for (int nt = 1; nt <= 2; nt++) {
        CHECK(dlc_set_num_threads(nt) == DLC_OK);
        dlcx_set_par_grain(1);
        test_step_count_bounds();
        test_layout();
        test_rebind();
        test_layout_only();
        test_pack_errors();
        test_backward_into_arena();
        test_grad_norm_and_clip();
        test_adamw();
        test_adamw_other_hyperparameters();
        test_sgd();
        test_bad_hyperparameters();
        test_schedules();
    }
    test_two_threads();
    return check_done("optim");
}
