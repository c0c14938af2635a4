/* check_threads.h - for the kernel tests: results must not depend on the thread count.
 * Needs the internal split counters (core/internal.h). */
#ifndef DLC_CHECK_THREADS_H
#define DLC_CHECK_THREADS_H
#include "check.h"
#include "internal.h"

/* out = f(in); backward with a fixed upstream; returns the output then every input
 * gradient (of the inputs that require one), flattened into one fresh tensor. */
static inline dlc_tensor *fwd_bwd(gc_fn f, void *ctx, int n, dlc_tensor **in) {
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->requires_grad) dlc_tensor_zero_grad(in[i]);
    dlc_tensor *out = f(in, ctx);
    if (!out) return NULL;
    dlc_tensor *r = check_randn(77, 1.0f, out->ndim, out->shape);
    int64_t total = out->numel;
    if (dlc_backward(out, r, 0) != DLC_OK) total = -1;
    for (int i = 0; i < n && total >= 0; i++)
        if (in[i] && in[i]->requires_grad) total = in[i]->grad ? total + in[i]->numel : -1;
    dlc_tensor *all = total >= 0 ? dlc_tensor_new(1, &total) : NULL;
    if (all) {
        memcpy(all->data, out->data, (size_t)out->numel * sizeof(float));
        int64_t at = out->numel;
        for (int i = 0; i < n; i++)
            if (in[i] && in[i]->requires_grad) {
                memcpy(all->data + at, in[i]->grad->data, (size_t)in[i]->numel * sizeof(float));
                at += in[i]->numel;
            }
    }
    dlc_tensor_release(r);
    dlc_tensor_release(out);
    return all;
}

/* min_split: kernels that must have been split at two threads (forward and backward: 2). */
static inline void check_same_bits(const char *name, gc_fn f, void *ctx, int n, dlc_tensor **in,
                                   int min_split) {
    dlc_set_num_threads(1);
    dlc_tensor *one = fwd_bwd(f, ctx, n, in);
    dlc_set_num_threads(2);
    int64_t before = dlcx_par_regions();
    dlc_tensor *two = fwd_bwd(f, ctx, n, in);
    int64_t split = dlcx_par_regions() - before;
    CHECK_OK(one);
    CHECK_OK(two);
    int same = one && two && one->numel == two->numel &&
               memcmp(one->data, two->data, (size_t)one->numel * sizeof(float)) == 0;
    if (!same) fprintf(stderr, "%s: results differ between 1 and 2 threads\n", name);
    CHECK(same);
    if (dlcx_par_available()) { /* else the kernels never split (OpenBLAS backend, no OpenMP) */
        if (split < min_split)
            fprintf(stderr, "%s: split %lld times at 2 threads, expected >= %d\n", name, (long long)split,
                    min_split);
        CHECK(split >= min_split);
    }
    dlc_tensor_release(one);
    dlc_tensor_release(two);
}

#endif
