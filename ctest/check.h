/*
 * check.h - the tiny C test harness: CHECK macros and a finite-difference gradient
 * checker.  Each ctest/test_*.c is one executable; main() calls the cases and ends
 * with `return check_done("name");`, which prints "N passed, N failed" and returns
 * non-zero on any failure.
 */
#ifndef DLC_CHECK_H
#define DLC_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/diloco.h"

static int check_pass, check_fail;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (cond) check_pass++;                                                        \
        else {                                                                         \
            check_fail++;                                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
        }                                                                              \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                          \
    do {                                                                               \
        double ca_ = (a), cb_ = (b);                                                   \
        if (fabs(ca_ - cb_) <= (tol)) check_pass++;                                    \
        else {                                                                         \
            check_fail++;                                                              \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.8g, %s = %.8g (tol %g)\n", \
                    __FILE__, __LINE__, #a, ca_, #b, cb_, (double)(tol));              \
        }                                                                              \
    } while (0)

/* A call returning a dlc_status that is expected to fail with `status` and a message
 * containing `needle`. */
#define CHECK_SFAILS(expr, status, needle)                                               \
    do {                                                                                 \
        dlc_status sf_ = (expr);                                                         \
        if (sf_ == (status) && strstr(dlc_last_error(), (needle))) check_pass++;         \
        else {                                                                           \
            check_fail++;                                                                \
            fprintf(stderr, "%s:%d: expected %s to fail with \"%s\", got %d: %s\n",       \
                    __FILE__, __LINE__, #expr, (needle), (int)sf_, dlc_last_error());     \
        }                                                                                \
    } while (0)

/* Fails the check (and prints the library message) when an op returned NULL. */
#define CHECK_OK(ptr)                                                                  \
    do {                                                                               \
        if (ptr) check_pass++;                                                         \
        else {                                                                         \
            check_fail++;                                                              \
            fprintf(stderr, "%s:%d: %s returned NULL: %s\n", __FILE__, __LINE__, #ptr, \
                    dlc_last_error());                                                 \
        }                                                                              \
    } while (0)

/* A call returning a pointer (not a tensor, so nothing is released) that is expected
 * to fail with `status` and a message containing `needle`. */
#define CHECK_PFAILS(expr, status, needle)                                             \
    do {                                                                               \
        void *pf_ = (void *)(expr);                                                    \
        if (!pf_ && dlc_last_status() == (status) && strstr(dlc_last_error(), (needle))) \
            check_pass++;                                                              \
        else {                                                                         \
            check_fail++;                                                              \
            fprintf(stderr, "%s:%d: expected %s to fail with \"%s\", got %s: %s\n",     \
                    __FILE__, __LINE__, #expr, (needle), pf_ ? "success" : "error",     \
                    dlc_last_error());                                                 \
        }                                                                              \
    } while (0)

/* An op expected to fail: NULL, with `status` and a message containing `needle`. */
#define CHECK_FAILS(expr, status, needle)                                              \
    do {                                                                               \
        dlc_tensor *cf_ = (expr);                                                      \
        if (!cf_ && dlc_last_status() == (status) && strstr(dlc_last_error(), (needle))) \
            check_pass++;                                                              \
        else {                                                                         \
            check_fail++;                                                              \
            fprintf(stderr, "%s:%d: expected %s to fail with \"%s\", got %s: %s\n",     \
                    __FILE__, __LINE__, #expr, (needle), cf_ ? "a tensor" : "error",    \
                    dlc_last_error());                                                 \
        }                                                                              \
        dlc_tensor_release(cf_);                                                       \
    } while (0)

static inline int check_done(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_pass, check_fail);
    return check_fail ? 1 : 0;
}

/* Tensor with explicit shape filled N(0, std) from a fixed seed. */
static inline dlc_tensor *check_randn(uint64_t seed, float std, int ndim, const int64_t *shape) {
    dlc_rng g;
    dlc_rng_init(&g, seed);
    return dlc_tensor_randn(ndim, shape, &g, 0.0f, std);
}

/* Builds the op's output from the inputs; must return a new reference (NULL = fail). */
typedef dlc_tensor *(*gc_fn)(dlc_tensor **in, void *ctx);

/*
 * Finite-difference gradient check.  With L = sum(f(in) * r) for a fixed random r,
 * compares dL/dx from dlc_backward with the central difference
 * (L(x + eps) - L(x - eps)) / (2 eps), L accumulated in double, for every element of
 * every input that has requires_grad set.  Passes when
 * |analytic - numeric| <= tol * max(1, |analytic|, |numeric|) everywhere.
 */
static inline int gradcheck(const char *name, gc_fn f, void *ctx, int n, dlc_tensor **in,
                            float eps, double tol) {
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->requires_grad) dlc_tensor_zero_grad(in[i]);
    dlc_tensor *out = f(in, ctx);
    if (!out) {
        check_fail++;
        fprintf(stderr, "gradcheck %s: forward failed: %s\n", name, dlc_last_error());
        return 0;
    }
    dlc_tensor *r = check_randn(1234, 1.0f, out->ndim, out->shape);
    if (dlc_backward(out, r, 0) != DLC_OK) {
        check_fail++;
        fprintf(stderr, "gradcheck %s: backward failed: %s\n", name, dlc_last_error());
        dlc_tensor_release(out);
        dlc_tensor_release(r);
        return 0;
    }
    int prev = dlc_set_grad_enabled(0);
    int ok = 1, checked = 0;
    double worst = 0;
    for (int i = 0; i < n && ok; i++) {
        if (!in[i] || !in[i]->requires_grad) continue;
        if (!in[i]->grad) {
            fprintf(stderr, "gradcheck %s: input %d got no gradient\n", name, i);
            ok = 0;
            break;
        }
        for (int64_t j = 0; j < in[i]->numel; j++) {
            float x0 = in[i]->data[j];
            double lp = 0, lm = 0;
            /* sum each output before the next perturbation: it may be a view of the input */
            in[i]->data[j] = x0 + eps;
            dlc_tensor *op = f(in, ctx);
            for (int64_t k = 0; op && k < op->numel; k++) lp += (double)op->data[k] * r->data[k];
            in[i]->data[j] = x0 - eps;
            dlc_tensor *om = f(in, ctx);
            for (int64_t k = 0; om && k < om->numel; k++) lm += (double)om->data[k] * r->data[k];
            in[i]->data[j] = x0;
            if (!op || !om) {
                fprintf(stderr, "gradcheck %s: perturbed forward failed: %s\n", name, dlc_last_error());
                ok = 0;
            }
            dlc_tensor_release(op);
            dlc_tensor_release(om);
            if (!ok) break;
            double num = (lp - lm) / (2.0 * eps), ana = in[i]->grad->data[j];
            double scale = fmax(1.0, fmax(fabs(num), fabs(ana)));
            double err = fabs(num - ana) / scale;
            if (err > worst) worst = err;
            checked++;
            if (err > tol) {
                fprintf(stderr, "gradcheck %s: input %d element %lld: analytic %.7g numeric %.7g\n",
                        name, i, (long long)j, ana, num);
                ok = 0;
                break;
            }
        }
    }
    dlc_set_grad_enabled(prev);
    dlc_tensor_release(out);
    dlc_tensor_release(r);
    if (ok && checked == 0) {
        fprintf(stderr, "gradcheck %s: no input requires grad\n", name);
        ok = 0;
    }
    if (ok) check_pass++;
    else check_fail++;
    if (getenv("DLC_VERBOSE")) printf("gradcheck %-24s %d elements, worst rel err %.2e\n", name, checked, worst);
    return ok;
}

#endif
