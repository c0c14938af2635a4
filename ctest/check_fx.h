/* check_fx.h - the small model the state-machine tests share (test_learner.c,
 * test_syncer.c): 4 tensors (w [3,5], b [7], e [2,4], h [6]) in one arena with a plan of
 * P fragments, the copies between a fragment's payload order and the arena, and random
 * vectors.  Include after check.h. */
#ifndef DILOCO_CHECK_FX_H
#define DILOCO_CHECK_FX_H

#include <string.h>
#include "diloco/frag.h"
#include "diloco/params.h"

#define NMAX 64 /* floats of the whole model, padding included, is below this */

typedef struct fx {
    dlc_tensor *t[4];
    dlc_params *p;
    dlc_plan *plan;
} fx;

static void fx_make(fx *x, int P, uint64_t seed) {
    static const char *const names[4] = {"w", "b", "e", "h"};
    int64_t sh[4][2] = {{3, 5}, {7, 0}, {2, 4}, {6, 0}};
    int nd[4] = {2, 1, 2, 1};
    for (int i = 0; i < 4; i++) x->t[i] = check_randn(seed + (uint64_t)i, 1.0f, nd[i], sh[i]);
    x->p = dlc_params_new(4, names, x->t);
    dlc_plan_params pp = dlc_plan_default_params();
    pp.fragments = P;
    x->plan = dlc_plan_new(x->p, &pp);
}

static void fx_free(fx *x) {
    dlc_plan_free(x->plan);
    dlc_params_free(x->p);
    for (int i = 0; i < 4; i++) dlc_tensor_release(x->t[i]);
}

/* A fake inner step on x's arena: every float moves 5% of the way to `target`. */
static inline void fx_step(const fx *x, float target) { /* (inline: not every test steps) */
    float *th = dlc_params_data(x->p);
    for (int k = 0; k < dlc_params_count(x->p); k++) {
        int64_t o = dlc_params_offset(x->p, k), n = dlc_params_tensor(x->p, k)->numel;
        for (int64_t i = o; i < o + n; i++) th[i] -= 0.05f * (th[i] - target);
    }
}

/* Fragment p of the arena in payload order. */
static void gather(const fx *x, int p, const float *arena, float *out) {
    int nv;
    const dlc_frag_view *v = dlc_plan_views(x->plan, p, &nv);
    for (int j = 0; j < nv; j++) {
        memcpy(out, arena + v[j].offset, (size_t)v[j].numel * sizeof(float));
        out += v[j].numel;
    }
}

/* n normal values of standard deviation std (seeded). */
static void randv(float *x, int64_t n, uint64_t seed, float std) {
    int64_t s[1] = {n};
    dlc_tensor *t = check_randn(seed, std, 1, s);
    memcpy(x, t->data, sizeof(float) * (size_t)n);
    dlc_tensor_release(t);
}

#endif
