/* test_ops.c - ops.c against naive references, finite-difference gradient checks for
 * every op in it, and the autograd mechanics (accumulation, retain_graph, no-grad). */
#include "check_threads.h"
#include "internal.h"

#define SHAPE(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

static dlc_tensor *rnd(uint64_t seed, int ndim, const int64_t *shape) {
    dlc_tensor *t = check_randn(seed, 1.0f, ndim, shape);
    dlc_tensor_set_requires_grad(t, 1);
    return t;
}

static dlc_tensor *positive(uint64_t seed, int ndim, const int64_t *shape) {
    dlc_tensor *t = check_randn(seed, 0.3f, ndim, shape);
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = 1.0f + fabsf(t->data[i]);
    dlc_tensor_set_requires_grad(t, 1);
    return t;
}

/* Values away from the kinks of relu/abs so central differences are exact enough. */
static dlc_tensor *away_from_zero(uint64_t seed, int ndim, const int64_t *shape) {
    dlc_tensor *t = rnd(seed, ndim, shape);
    for (int64_t i = 0; i < t->numel; i++)
        if (fabsf(t->data[i]) < 0.1f) t->data[i] += t->data[i] < 0 ? -0.2f : 0.2f;
    return t;
}

static void release_all(int n, dlc_tensor **t) {
    for (int i = 0; i < n; i++) dlc_tensor_release(t[i]);
}

/* ---- forward values ---- */

static void test_broadcast_values(void) {
    float av[6] = {1, 2, 3, 4, 5, 6}, bv[3] = {10, 20, 30}, cv[2] = {100, 200};
    dlc_tensor *a = dlc_tensor_from_data(SHAPE(2, 3), av);
    dlc_tensor *b = dlc_tensor_from_data(SHAPE(3), bv);
    dlc_tensor *c = dlc_tensor_from_data(SHAPE(2, 1), cv);
    dlc_tensor *s = dlc_add(a, b), *m = dlc_mul(a, c), *d = dlc_sub(b, a), *q = dlc_div(a, c);
    CHECK_OK(s);
    CHECK_OK(m);
    float se[6] = {11, 22, 33, 14, 25, 36}, me[6] = {100, 200, 300, 800, 1000, 1200};
    for (int i = 0; i < 6; i++) {
        CHECK(s->data[i] == se[i]);
        CHECK(m->data[i] == me[i]);
        CHECK(d->data[i] == bv[i % 3] - av[i]);
        CHECK_NEAR(q->data[i], av[i] / cv[i / 3], 1e-7);
    }
    CHECK(d->ndim == 2 && d->shape[0] == 2);
    /* [2,1] + [3] -> [2,3] (both sides stretch) */
    dlc_tensor *o = dlc_add(c, b);
    CHECK(o->ndim == 2 && o->shape[0] == 2 && o->shape[1] == 3 && o->data[4] == 220);
    dlc_tensor *bad = dlc_tensor_zeros(SHAPE(4));
    CHECK_FAILS(dlc_add(a, bad), DLC_ERR_SHAPE, "add: [2,3] and [4]: shapes do not broadcast");
    CHECK_FAILS(dlc_bias_add(a, bad), DLC_ERR_SHAPE, "bias must be 1-D");
    dlc_tensor *all[] = {a, b, c, s, m, d, q, o, bad};
    release_all(9, all);
}

static void test_reduce_values(void) {
    float v[6] = {1, 5, 3, 4, 2, 6};
    dlc_tensor *x = dlc_tensor_from_data(SHAPE(2, 3), v);
    dlc_tensor *s0 = dlc_sum(x, 0, 0), *s1 = dlc_mean(x, -1, 1), *mx = dlc_max(x, 1, 0);
    dlc_tensor *am = dlc_argmax(x, 0, 0), *all = dlc_sum_all(x), *mean = dlc_mean_all(x);
    CHECK(s0->ndim == 1 && s0->data[0] == 5 && s0->data[1] == 7 && s0->data[2] == 9);
    CHECK(s1->ndim == 2 && s1->shape[1] == 1 && s1->data[0] == 3 && s1->data[1] == 4);
    CHECK(mx->data[0] == 5 && mx->data[1] == 6);
    CHECK(am->data[0] == 1 && am->data[1] == 0 && am->data[2] == 1);
    CHECK(all->ndim == 0 && all->data[0] == 21);
    CHECK_NEAR(mean->data[0], 3.5, 1e-6);
    CHECK_FAILS(dlc_sum(x, 2, 0), DLC_ERR_ARG, "axis 2 is out of range");
    dlc_tensor *t[] = {x, s0, s1, mx, am, all, mean};
    release_all(7, t);
}

/* matmul against a double triple loop for every transpose combination and batch mode */
static void naive_mm(const dlc_tensor *a, const dlc_tensor *b, int ta, int tb, int64_t batch,
                     int ash, int bsh, int64_t M, int64_t N, int64_t K, double *out) {
    for (int64_t z = 0; z < batch; z++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                const float *pa = a->data + (ash ? 0 : z * M * K), *pb = b->data + (bsh ? 0 : z * K * N);
                for (int64_t k = 0; k < K; k++)
                    acc += (double)(ta ? pa[k * M + i] : pa[i * K + k]) * (tb ? pb[j * K + k] : pb[k * N + j]);
                out[(z * M + i) * N + j] = acc;
            }
}

static void test_matmul_values(void) {
    const int64_t M = 5, N = 4, K = 3, B = 2;
    for (int mode = 0; mode < 3; mode++) /* 0: 2-D x 2-D, 1: batched x 2-D, 2: 2-D x batched */
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t as[3] = {B, ta ? K : M, ta ? M : K}, bs[3] = {B, tb ? N : K, tb ? K : N};
                int abat = mode == 1, bbat = mode == 2;
                dlc_tensor *a = check_randn(1, 1, abat ? 3 : 2, abat ? as : as + 1);
                dlc_tensor *b = check_randn(2, 1, bbat ? 3 : 2, bbat ? bs : bs + 1);
                dlc_tensor *c = dlc_matmul(a, b, ta, tb);
                CHECK_OK(c);
                if (!c) continue;
                int64_t batch = mode ? B : 1;
                double ref[2 * 5 * 4];
                naive_mm(a, b, ta, tb, batch, !abat, !bbat, M, N, K, ref);
                double worst = 0;
                for (int64_t i = 0; i < batch * M * N; i++) worst = fmax(worst, fabs(ref[i] - c->data[i]));
                CHECK(worst < 1e-5);
                CHECK(c->numel == batch * M * N && c->shape[c->ndim - 1] == N);
                dlc_tensor *t[] = {a, b, c};
                release_all(3, t);
            }
    dlc_tensor *a = dlc_tensor_zeros(SHAPE(4, 3)), *b = dlc_tensor_zeros(SHAPE(2, 5));
    CHECK_FAILS(dlc_matmul(a, b, 0, 0), DLC_ERR_SHAPE, "matmul: [4,3] x [2,5]: inner dimensions 3 and 2 differ");
    dlc_tensor *c3 = dlc_tensor_zeros(SHAPE(2, 4, 3)), *d3 = dlc_tensor_zeros(SHAPE(3, 3, 5));
    CHECK_FAILS(dlc_matmul(c3, d3, 0, 0), DLC_ERR_SHAPE, "batch dimensions differ");
    dlc_tensor *t[] = {a, b, c3, d3};
    release_all(4, t);
}

static void test_shape_values(void) {
    dlc_tensor *x = dlc_tensor_arange(0, 24, 1);
    dlc_tensor *r = dlc_reshape(x, SHAPE(2, -1, 4));
    CHECK(r->ndim == 3 && r->shape[1] == 3 && r->data == x->data); /* shares storage */
    dlc_tensor *t = dlc_transpose(r, 0, 2); /* [4,3,2]: t[i,j,k] = r[k,j,i] */
    CHECK(t->shape[0] == 4 && t->shape[2] == 2);
    CHECK(t->data[(1 * 3 + 2) * 2 + 1] == r->data[(1 * 3 + 2) * 4 + 1]);
    CHECK(t->data[(3 * 3 + 0) * 2 + 1] == r->data[(1 * 3 + 0) * 4 + 3]);
    dlc_tensor *s = dlc_slice(r, 1, 1, 2); /* [2,2,4] */
    CHECK(s->shape[1] == 2 && s->data[0] == 4 && s->data[8] == 16);
    dlc_tensor *s0 = dlc_slice(r, 0, 1, 1);
    CHECK(s0->data == x->data + 12);
    dlc_tensor *parts[2] = {s, r};
    dlc_tensor *c = dlc_concat(2, parts, 1); /* [2,5,4] */
    CHECK(c->shape[1] == 5 && c->data[0] == 4 && c->data[8] == 0 && c->data[20] == 16);
    CHECK_FAILS(dlc_reshape(x, SHAPE(5, -1)), DLC_ERR_SHAPE, "not a multiple of 5");
    CHECK_FAILS(dlc_reshape(x, SHAPE(5, 5)), DLC_ERR_SHAPE, "has 24 elements, the new shape has 25");
    CHECK_FAILS(dlc_slice(r, 1, 2, 2), DLC_ERR_RANGE, "out of range for axis 1");
    dlc_tensor *parts2[2] = {x, r};
    CHECK_FAILS(dlc_concat(2, parts2, 0), DLC_ERR_SHAPE, "does not match");
    dlc_tensor *all[] = {x, r, t, s, s0, c};
    release_all(6, all);
}

/* ---- gradient checks ---- */

static dlc_tensor *f_add(dlc_tensor **in, void *c) { return dlc_add(in[0], in[1]); }
static dlc_tensor *f_sub(dlc_tensor **in, void *c) { return dlc_sub(in[0], in[1]); }
static dlc_tensor *f_mul(dlc_tensor **in, void *c) { return dlc_mul(in[0], in[1]); }
static dlc_tensor *f_div(dlc_tensor **in, void *c) { return dlc_div(in[0], in[1]); }
static dlc_tensor *f_bias(dlc_tensor **in, void *c) { return dlc_bias_add(in[0], in[1]); }
static dlc_tensor *f_affine(dlc_tensor **in, void *c) { return dlc_affine(in[0], -1.5f, 0.25f); }
static dlc_tensor *f_pow(dlc_tensor **in, void *c) { return dlc_pow(in[0], *(float *)c); }
static dlc_tensor *f_unary(dlc_tensor **in, void *c) { return dlc_unary(*(dlc_unary_op *)c, in[0]); }
static dlc_tensor *f_sum_all(dlc_tensor **in, void *c) { return dlc_sum_all(in[0]); }
static dlc_tensor *f_mean_all(dlc_tensor **in, void *c) { return dlc_mean_all(in[0]); }
static dlc_tensor *f_sum(dlc_tensor **in, void *c) { return dlc_sum(in[0], *(int *)c, 0); }
static dlc_tensor *f_mean(dlc_tensor **in, void *c) { return dlc_mean(in[0], *(int *)c, 1); }
static dlc_tensor *f_max(dlc_tensor **in, void *c) { return dlc_max(in[0], *(int *)c, 0); }
static dlc_tensor *f_mm(dlc_tensor **in, void *c) {
    int *t = c;
    return dlc_matmul(in[0], in[1], t[0], t[1]);
}
static dlc_tensor *f_linear(dlc_tensor **in, void *c) { return dlc_linear(in[0], in[1], in[2]); }
static dlc_tensor *f_reshape(dlc_tensor **in, void *c) { return dlc_reshape(in[0], SHAPE(3, -1)); }
static dlc_tensor *f_transpose(dlc_tensor **in, void *c) { return dlc_transpose(in[0], 0, -1); }
static dlc_tensor *f_slice(dlc_tensor **in, void *c) {
    int ax = *(int *)c;
    return dlc_slice(in[0], ax, 1, 1);
}
static dlc_tensor *f_concat(dlc_tensor **in, void *c) { return dlc_concat(3, in, *(int *)c); }
/* a chain reusing one input twice: sum((x*w + x) ^ 2) */
static dlc_tensor *f_chain(dlc_tensor **in, void *c) {
    dlc_tensor *a = dlc_mul(in[0], in[1]), *b = dlc_add(a, in[0]), *p = dlc_pow(b, 2.0f);
    dlc_tensor *s = dlc_sum(p, 0, 0);
    dlc_tensor_release(a);
    dlc_tensor_release(b);
    dlc_tensor_release(p);
    return s;
}

static void test_grad_elementwise(void) {
    int64_t A[3] = {2, 3, 4}, B[1] = {4}, C[3] = {2, 1, 4}, D[2] = {3, 1}, E[3] = {2, 3, 1};
    /* same shape, suffix broadcast, size-1 broadcast, both sides stretching, per-row
     * scaling b [..., 1] (its own fast path) and its mirror */
    struct { int na; const int64_t *a; int nb; const int64_t *b; } pairs[] = {
        {3, A, 3, A}, {3, A, 1, B}, {3, A, 3, C}, {3, C, 2, D}, {3, A, 3, E}, {3, E, 3, A},
    };
    dlc_tensor *in[2];
    gc_fn fs[4] = {f_add, f_sub, f_mul, f_div};
    const char *names[4] = {"add", "sub", "mul", "div"};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < (int)(sizeof pairs / sizeof pairs[0]); i++) {
            in[0] = rnd(1 + 2 * i, pairs[i].na, pairs[i].a);
            in[1] = k == 3 ? positive(2 + 2 * i, pairs[i].nb, pairs[i].b) : rnd(2 + 2 * i, pairs[i].nb, pairs[i].b);
            gradcheck(names[k], fs[k], NULL, 2, in, 1e-3f, 1e-2);
            release_all(2, in);
        }
    in[0] = rnd(9, 3, A);
    in[1] = rnd(10, 1, B);
    gradcheck("bias_add", f_bias, NULL, 2, in, 1e-3f, 1e-2);
    release_all(2, in);
    in[0] = rnd(11, 3, A);
    gradcheck("affine", f_affine, NULL, 1, in, 1e-3f, 1e-2);
    release_all(1, in);
    float ps[3] = {2.0f, 3.0f, -0.5f};
    for (int k = 0; k < 3; k++) {
        in[0] = positive(12, 3, A);
        gradcheck("pow", f_pow, &ps[k], 1, in, 1e-3f, 1e-2);
        release_all(1, in);
    }
    for (int op = 0; op < DLC_UNARY_COUNT; op++) {
        dlc_unary_op u = (dlc_unary_op)op;
        int pos = u == DLC_UNARY_LOG || u == DLC_UNARY_SQRT;
        in[0] = pos ? positive(13, 3, A) : away_from_zero(13, 3, A);
        gradcheck(dlc_unary_name(u), f_unary, &u, 1, in, 1e-3f, 1e-2);
        release_all(1, in);
    }
    in[0] = rnd(14, 2, D + 0);
    in[0] = (dlc_tensor_release(in[0]), rnd(14, 3, A));
    in[1] = rnd(15, 3, A);
    gradcheck("chain (input used twice)", f_chain, NULL, 2, in, 1e-3f, 1e-2);
    release_all(2, in);
}

static void test_grad_reduce_matmul_shape(void) {
    int64_t A[3] = {2, 3, 4};
    dlc_tensor *in[3];
    in[0] = rnd(20, 3, A);
    gradcheck("sum_all", f_sum_all, NULL, 1, in, 1e-3f, 1e-2);
    gradcheck("mean_all", f_mean_all, NULL, 1, in, 1e-3f, 1e-2);
    for (int ax = -1; ax < 3; ax++) {
        gradcheck("sum(axis)", f_sum, &ax, 1, in, 1e-3f, 1e-2);
        gradcheck("mean(axis)", f_mean, &ax, 1, in, 1e-3f, 1e-2);
        gradcheck("max(axis)", f_max, &ax, 1, in, 1e-3f, 1e-2);
    }
    gradcheck("reshape", f_reshape, NULL, 1, in, 1e-3f, 1e-2);
    gradcheck("transpose", f_transpose, NULL, 1, in, 1e-3f, 1e-2);
    for (int ax = 0; ax < 3; ax++) gradcheck("slice", f_slice, &ax, 1, in, 1e-3f, 1e-2);
    release_all(1, in);
    for (int ax = 0; ax < 3; ax++) {
        int64_t s1[3] = {2, 3, 4}, s2[3] = {2, 3, 4};
        s2[ax] = 1;
        in[0] = rnd(21, 3, s1);
        in[1] = rnd(22, 3, s2);
        in[2] = rnd(23, 3, s1);
        gradcheck("concat", f_concat, &ax, 3, in, 1e-3f, 1e-2);
        release_all(3, in);
    }
    const int64_t M = 4, N = 3, K = 5, Bt = 2;
    for (int mode = 0; mode < 4; mode++) /* 2-D, batched x 2-D, 2-D x batched, both batched */
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t as[3] = {Bt, ta ? K : M, ta ? M : K}, bs[3] = {Bt, tb ? N : K, tb ? K : N};
                int abat = mode == 1 || mode == 3, bbat = mode >= 2;
                in[0] = rnd(30 + mode, abat ? 3 : 2, abat ? as : as + 1);
                in[1] = rnd(40 + mode, bbat ? 3 : 2, bbat ? bs : bs + 1);
                int t[2] = {ta, tb};
                gradcheck("matmul", f_mm, t, 2, in, 1e-2f, 1e-2);
                release_all(2, in);
            }
}

/* ---- autograd mechanics ---- */

/* x^0: gradient 0 everywhere, including x = 0 (not 0 * inf = NaN) */
static void test_pow_zero(void) {
    float v[3] = {0.0f, 2.0f, -1.0f};
    dlc_tensor *x = dlc_tensor_from_data(SHAPE(3), v);
    dlc_tensor_set_requires_grad(x, 1);
    dlc_tensor *y = dlc_pow(x, 0.0f), *l = dlc_sum_all(y);
    CHECK(dlc_backward(l, NULL, 0) == DLC_OK);
    CHECK(y->data[0] == 1.0f && x->grad && x->grad->data[0] == 0.0f && x->grad->data[1] == 0.0f);
    dlc_tensor_release(l);
    dlc_tensor_release(y);
    dlc_tensor_release(x);
}

static void test_autograd_mechanics(void) {
    float wv[3] = {1, -2, 3};
    dlc_tensor *w = dlc_tensor_from_data(SHAPE(3), wv);
    dlc_tensor_set_requires_grad(w, 1);
    dlc_tensor *sq = dlc_mul(w, w), *l = dlc_sum_all(sq);
    CHECK(dlc_tensor_op(l) == DLC_OP_SUM_ALL && l->requires_grad);
    CHECK(dlc_backward(l, NULL, 1) == DLC_OK);
    CHECK(w->grad && w->grad->data[0] == 2 && w->grad->data[1] == -4 && w->grad->data[2] == 6);
    CHECK(sq->grad == NULL); /* non-leaf grads are dropped */
    CHECK(dlc_backward(l, NULL, 0) == DLC_OK); /* graph retained: works again, accumulates */
    CHECK(w->grad->data[2] == 12);
    CHECK(dlc_backward(l, NULL, 0) == DLC_ERR_STATE);
    CHECK(strstr(dlc_last_error(), "already freed"));
    dlc_tensor_zero_grad(w);
    CHECK(w->grad->data[2] == 0);
    CHECK(dlc_tensor_set_requires_grad(sq, 0) == DLC_ERR_STATE);
    dlc_tensor_release(sq);
    dlc_tensor_release(l);

    /* retain_grad keeps an intermediate's gradient */
    sq = dlc_mul(w, w);
    sq->retain_grad = 1;
    l = dlc_sum_all(sq);
    CHECK(dlc_backward(l, NULL, 0) == DLC_OK);
    CHECK(sq->grad && sq->grad->data[0] == 1);
    dlc_tensor_release(sq);
    dlc_tensor_release(l);

    /* no-grad mode records nothing; backward then refuses */
    int prev = dlc_set_grad_enabled(0);
    CHECK(prev == 1 && !dlc_grad_enabled());
    sq = dlc_mul(w, w);
    CHECK(!sq->requires_grad && sq->node == NULL);
    dlc_set_grad_enabled(prev);
    CHECK(dlc_backward(sq, NULL, 0) == DLC_ERR_STATE);
    dlc_tensor_release(sq);

    /* non-scalar roots need an explicit gradient of matching size */
    sq = dlc_mul(w, w);
    CHECK(dlc_backward(sq, NULL, 0) == DLC_ERR_ARG);
    dlc_tensor *g2 = dlc_tensor_zeros(SHAPE(2));
    CHECK(dlc_backward(sq, g2, 0) == DLC_ERR_SHAPE);
    dlc_tensor_release(g2);
    dlc_tensor_release(sq);

    /* a deep chain (10k nodes) must not overflow the C stack and frees cleanly */
    dlc_tensor *x = dlc_tensor_retain(w);
    for (int i = 0; i < 10000; i++) {
        dlc_tensor *y = dlc_affine(x, 1.0f, 0.0f);
        dlc_tensor_release(x);
        x = y;
    }
    l = dlc_sum_all(x);
    dlc_tensor_zero_grad(w);
    CHECK(dlc_backward(l, NULL, 0) == DLC_OK);
    CHECK(w->grad->data[0] == 1);
    dlc_tensor_release(x);
    dlc_tensor_release(l);
    dlc_tensor_release(w);
    /* a million-op chain dropped without backward frees without deep recursion */
    w = dlc_tensor_zeros(SHAPE(1));
    dlc_tensor_set_requires_grad(w, 1);
    x = dlc_tensor_retain(w);
    for (int i = 0; i < 1000000; i++) {
        dlc_tensor *y = dlc_affine(x, 1.0f, 1.0f);
        dlc_tensor_release(x);
        x = y;
    }
    CHECK(x->data[0] == 1000000.0f);
    dlc_tensor_release(x);
    dlc_tensor_release(w);
    CHECK(dlc_op_name(DLC_OP_MATMUL) && strcmp(dlc_op_name(DLC_OP_MATMUL), "matmul") == 0);
    CHECK(dlc_op_name(DLC_OP_COUNT) == NULL);
}

static void test_linear(void) {
    /* value: linear == matmul(x, w^T) + b */
    int64_t xs[3] = {2, 3, 5}, ws[2] = {4, 5}, bs[1] = {4};
    dlc_tensor *in[3] = {rnd(50, 3, xs), rnd(51, 2, ws), rnd(52, 1, bs)};
    dlc_tensor *y = dlc_linear(in[0], in[1], in[2]);
    dlc_tensor *mm = dlc_matmul(in[0], in[1], 0, 1), *ref = dlc_bias_add(mm, in[2]);
    CHECK_OK(y);
    double worst = 0;
    for (int64_t i = 0; y && i < y->numel; i++) worst = fmax(worst, fabs(y->data[i] - ref->data[i]));
    CHECK(y && y->ndim == 3 && y->shape[2] == 4 && worst < 1e-5);
    dlc_tensor *t[] = {y, mm, ref};
    release_all(3, t);
    gradcheck("linear", f_linear, NULL, 3, in, 1e-2f, 1e-2);
    dlc_tensor *nob[3] = {in[0], in[1], NULL};
    gradcheck("linear (no bias)", f_linear, NULL, 3, nob, 1e-2f, 1e-2);
    dlc_tensor *bad = dlc_tensor_zeros(SHAPE(4, 3));
    CHECK_FAILS(dlc_linear(in[0], bad, NULL), DLC_ERR_SHAPE, "weight must be [out, in] with in = 5");
    CHECK_FAILS(dlc_linear(in[0], in[1], in[0]), DLC_ERR_SHAPE, "linear: bias [2,3,5]: expected [4]");
    dlc_tensor_release(bad);
    release_all(3, in);
}

/* The vectorisable exp used by GELU, SiLU, sigmoid, softmax and cross-entropy. */
static void test_fast_exp(void) {
    double worst = 0, worst_sub = 0;
    for (float x = -103.9f; x < 88.7f; x += 0.0037f) {
        float a = dlcx_expf(x), b = expf(x);
        if (b > 1.2e-38f) worst = fmax(worst, fabs((double)a - b) / b); /* normal range */
        else worst_sub = fmax(worst_sub, fabs((double)a - b));          /* gradual underflow */
    }
    CHECK(worst < 2.5e-7); /* about 2 ulp */
    CHECK(worst_sub < 1e-44);
    CHECK(dlcx_expf(-INFINITY) == 0.0f && dlcx_expf(-200.0f) == 0.0f);
    CHECK(isinf(dlcx_expf(INFINITY)) && isinf(dlcx_expf(89.0f)));
    CHECK(isnan(dlcx_expf(NAN)));
    CHECK(dlcx_expf(0.0f) == 1.0f);
    CHECK_NEAR(dlcx_tanhf_abs(0.3f), tanh(0.3), 2e-7);
    CHECK(dlcx_tanhf_abs(20.0f) == 1.0f && dlcx_tanhf_abs(-20.0f) == -1.0f);
}

/* Corner cases: empty tensors through backward, sizes that overflow int64 or int
 * (BLAS), and a retained non-leaf grad across two retain_graph backwards. */
static void test_corner_cases(void) {
    /* backward of an elementwise op on empty tensors (the fast path divided by 0) */
    dlc_tensor *a = rnd(1, SHAPE(0, 3)), *b = rnd(2, SHAPE(0, 3));
    dlc_tensor *c = dlc_mul(a, b), *l = c ? dlc_sum_all(c) : NULL;
    CHECK_OK(l);
    CHECK(l && dlc_backward(l, NULL, 0) == DLC_OK);
    CHECK(a->grad && a->grad->numel == 0 && b->grad && b->grad->numel == 0);
    dlc_tensor *t[] = {a, b, c, l};
    release_all(4, t);

    /* slice start + len overflowing int64 */
    dlc_tensor *x = dlc_tensor_zeros(SHAPE(4)), *x2 = dlc_tensor_zeros(SHAPE(2, 4));
    CHECK_FAILS(dlc_slice(x, 0, INT64_MAX, 1), DLC_ERR_RANGE, "out of range");
    CHECK_FAILS(dlc_slice(x2, 1, INT64_MAX, 2), DLC_ERR_RANGE, "out of range");
    dlc_tensor_release(x2);

    /* reshape to a shape whose size product overflows int64 */
    dlc_tensor *e = dlc_tensor_zeros(SHAPE(0));
    CHECK_FAILS(dlc_reshape(e, SHAPE((int64_t)1 << 62, 8, 0)), DLC_ERR_SHAPE, "reshape");
    dlc_tensor_release(e);

    /* BLAS takes int sizes: K = 2^31 must be rejected, not wrapped (the data is never read) */
    static float dummy[16];
    int64_t big = (int64_t)1 << 31;
    dlc_tensor *wa = dlc_tensor_wrap(SHAPE(1, big), dummy, NULL, NULL);
    dlc_tensor *wb = dlc_tensor_wrap(SHAPE(big, 1), dummy, NULL, NULL);
    CHECK_FAILS(dlc_matmul(wa, wb, 0, 0), DLC_ERR_SHAPE, "int");
    CHECK_FAILS(dlc_matmul(wa, wa, 0, 1), DLC_ERR_SHAPE, "int");
    CHECK_FAILS(dlc_linear(wa, wa, NULL), DLC_ERR_SHAPE, "int");
    dlc_tensor_release(wa);
    dlc_tensor_release(wb);

    /* a retained non-leaf grad accumulates across backwards, but each pass must only
     * propagate that pass's gradient */
    dlc_tensor *w = rnd(3, SHAPE(2));
    dlc_tensor *y = dlc_scale(w, 2.0f);
    y->retain_grad = 1;
    l = dlc_sum_all(y);
    CHECK(dlc_backward(l, NULL, 1) == DLC_OK);
    CHECK(dlc_backward(l, NULL, 1) == DLC_OK);
    CHECK(w->grad && w->grad->data[0] == 4.0f && w->grad->data[1] == 4.0f);
    CHECK(y->grad && y->grad->data[0] == 2.0f);
    dlc_tensor *t2[] = {w, y, l, x};
    release_all(4, t2);
}

/* ---- results independent of the thread count ----
 * Shapes of the charlm model's size cross the split threshold at the default grain:
 * output and input gradients must be the same bits on one and on two threads. */

static void test_thread_count_independence(void) {
    dlcx_set_par_grain(0); /* the default */
    int64_t X[3] = {16, 64, 96}, P[2] = {64, 96}, H[2] = {1024, 512}; /* 3 divides X (f_reshape) */
    dlc_tensor *in[2] = {rnd(50, 3, X), rnd(51, 3, X)};
    check_same_bits("add", f_add, NULL, 2, in, 2);
    check_same_bits("mul", f_mul, NULL, 2, in, 2);
    check_same_bits("reshape", f_reshape, NULL, 1, in, 1); /* a view: only the backward runs */
    dlc_tensor_release(in[1]);
    in[1] = rnd(52, 2, P); /* token + position embeddings: b's gradient sums over the batch */
    check_same_bits("add broadcast", f_add, NULL, 2, in, 2);
    check_same_bits("mul broadcast", f_mul, NULL, 2, in, 2);
    release_all(2, in);
    in[0] = rnd(53, 2, H);
    dlc_unary_op ops[3] = {DLC_UNARY_GELU, DLC_UNARY_SILU, DLC_UNARY_TANH};
    for (int k = 0; k < 3; k++) check_same_bits(dlc_unary_name(ops[k]), f_unary, &ops[k], 1, in, 2);
    release_all(1, in);
    dlc_set_num_threads(1);
}

/* Every case at 1 and at 2 compute threads, with the grain at 1 float so that even the
 * gradchecks' small shapes are split across both threads; then the charlm-sized
 * shapes at the default grain. */
int main(void) {
    for (int nt = 1; nt <= 2; nt++) {
        CHECK(dlc_set_num_threads(nt) == DLC_OK);
        dlcx_set_par_grain(1);
        int64_t before = dlcx_par_regions();
        test_corner_cases();
        test_fast_exp();
        test_linear();
        test_broadcast_values();
        test_reduce_values();
        test_matmul_values();
        test_shape_values();
        test_grad_elementwise();
        test_grad_reduce_matmul_shape();
        test_pow_zero();
        test_autograd_mechanics();
        if (dlcx_par_available()) { /* else the kernels never split (OpenBLAS backend, no OpenMP) */
            CHECK(nt == 1 ? dlcx_par_regions() == before : dlcx_par_regions() > before + 100);
        }
    }
    test_thread_count_independence();
    return check_done("ops");
}
