/* optim.c - AdamW and SGD as flat loops over the parameter arena; lr schedules. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/optim.h"
#include "diloco/params.h"
#include "internal.h"

/* Blocks of B floats: every run starts and ends on a multiple of DLC_PARAMS_ALIGN, so
 * the fixed-size inner loops need no scalar tail and GCC vectorises them at -O2. */
enum { B = DLC_PARAMS_ALIGN };

static const char *const kind_names[] = {"adamw", "sgd"};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == DLC_OPTIM_KIND_COUNT,
               "optimizer name table out of sync with dlc_optim_kind");
static const char *const lr_names[] = {"constant", "cosine", "linear"};
_Static_assert(sizeof lr_names / sizeof lr_names[0] == DLC_LR_KIND_COUNT,
               "schedule name table out of sync with dlc_lr_kind");

const char *dlc_optim_kind_name(dlc_optim_kind kind) {
    return (unsigned)kind < DLC_OPTIM_KIND_COUNT ? kind_names[kind] : NULL;
}

const char *dlc_lr_kind_name(dlc_lr_kind kind) {
    return (unsigned)kind < DLC_LR_KIND_COUNT ? lr_names[kind] : NULL;
}

typedef struct run {
    int64_t start, len; /* floats, multiples of B */
    int decay;
} run;

struct dlc_optim {
    dlc_optim_params op;
    dlc_params *p;       /* borrowed */
    int n;               /* tensors */
    unsigned char *decay; /* [n] flags */
    run *runs;           /* [n] scratch, rebuilt each step (no allocation on the step) */
    int nstate;
    dlc_tensor *state[2]; /* [size] each */
    int64_t steps;
};

/* ---- hyper-parameters ---- */

dlc_optim_params dlc_optim_default_params(dlc_optim_kind kind) {
    dlc_optim_params op = {0};
    op.kind = kind;
    op.beta1 = 0.9;
    op.beta2 = 0.95;
    op.eps = 1e-8;
    if (kind == DLC_OPTIM_SGD) {
        op.lr = 0.01;
    } else {
        op.lr = 1e-3;
        op.weight_decay = 0.1;
    }
    return op;
}

/* lo <= x < hi (hi_open) or lo <= x <= hi. */
static dlc_status check_range(const char *fn, const char *field, double x, double lo, double hi,
                              int hi_open) {
    if (x >= lo && (hi_open ? x < hi : x <= hi) && isfinite(x)) return DLC_OK;
    if (isinf(hi))
        return dlc_error(DLC_ERR_ARG, "%s: %s = %g, expected a finite number >= %g", fn, field, x, lo);
    return dlc_error(DLC_ERR_ARG, "%s: %s = %g, expected a number in [%g, %g%s", fn, field, x, lo,
                     hi, hi_open ? ")" : "]");
}

dlc_status dlc_optim_params_check(const dlc_optim_params *op) {
    const char *fn = dlc_optim_kind_name(op->kind);
    if (!fn)
        return dlc_error(DLC_ERR_ARG, "optimizer: kind = %d, expected DLC_OPTIM_ADAMW or DLC_OPTIM_SGD",
                         (int)op->kind);
    dlc_status st;
    if ((st = check_range(fn, "lr", op->lr, 0, INFINITY, 1)) != DLC_OK) return st;
    if ((st = check_range(fn, "weight_decay", op->weight_decay, 0, INFINITY, 1)) != DLC_OK) return st;
    if (op->kind == DLC_OPTIM_ADAMW) {
        if ((st = check_range(fn, "beta1", op->beta1, 0, 1, 1)) != DLC_OK) return st;
        if ((st = check_range(fn, "beta2", op->beta2, 0, 1, 1)) != DLC_OK) return st;
        if (!(op->eps > 0) || !isfinite(op->eps))
            return dlc_error(DLC_ERR_ARG, "adamw: eps = %g, expected a finite number > 0", op->eps);
        return DLC_OK;
    }
    if ((st = check_range(fn, "momentum", op->momentum, 0, INFINITY, 1)) != DLC_OK) return st;
    if ((st = check_range(fn, "dampening", op->dampening, 0, 1, 0)) != DLC_OK) return st;
    if (op->nesterov && (op->momentum <= 0 || op->dampening != 0))
        return dlc_error(DLC_ERR_ARG,
                         "sgd: nesterov needs momentum > 0 and dampening = 0 (momentum = %g, dampening = %g)",
                         op->momentum, op->dampening);
    return DLC_OK;
}

/* ---- lifetime ---- */

dlc_optim *dlc_optim_new(dlc_params *p, const dlc_optim_params *op) {
    if (!p || !op) {
        dlc_error(DLC_ERR_ARG, "optimizer: params or hyper-parameters are NULL");
        return NULL;
    }
    if (dlc_optim_params_check(op) != DLC_OK) return NULL;
    dlc_optim *o = calloc(1, sizeof *o);
    if (!o) goto nomem;
    o->op = *op;
    o->op.nesterov = op->nesterov != 0;
    o->p = p;
    o->n = dlc_params_count(p);
    o->decay = calloc((size_t)o->n, 1);
    o->runs = calloc((size_t)o->n, sizeof *o->runs);
    if (!o->decay || !o->runs) goto nomem;
    for (int i = 0; i < o->n; i++) o->decay[i] = dlc_params_tensor(p, i)->ndim >= 2;
    o->nstate = op->kind == DLC_OPTIM_ADAMW ? 2 : op->momentum != 0 ? 1 : 0;
    int64_t size = dlc_params_size(p);
    for (int k = 0; k < o->nstate; k++)
        if (!(o->state[k] = dlc_tensor_zeros(1, &size))) goto fail;
    return o;
nomem:
    dlc_error(DLC_ERR_NOMEM, "optimizer: out of memory");
fail:
    dlc_optim_free(o);
    return NULL;
}

void dlc_optim_free(dlc_optim *o) {
    if (!o) return;
    for (int k = 0; k < 2; k++) dlc_tensor_release(o->state[k]);
    free(o->decay);
    free(o->runs);
    free(o);
}

const dlc_optim_params *dlc_optim_get_params(const dlc_optim *o) { return &o->op; }

dlc_status dlc_optim_set_decay(dlc_optim *o, int i, int on) {
    if (i < 0 || i >= o->n)
        return dlc_error(DLC_ERR_RANGE, "optimizer: tensor index %d is out of range [0, %d)", i, o->n);
    o->decay[i] = on != 0;
    return DLC_OK;
}

int dlc_optim_decays(const dlc_optim *o, int i) { return i >= 0 && i < o->n ? o->decay[i] : -1; }

int64_t dlc_optim_step_count(const dlc_optim *o) { return o->steps; }

dlc_status dlc_optim_set_step_count(dlc_optim *o, int64_t n) {
    if (n < 0 || n > ((int64_t)1 << 53))
        return dlc_error(DLC_ERR_ARG, "optimizer: step count = %lld, expected an integer in [0, 2^53]",
                         (long long)n);
    o->steps = n;
    return DLC_OK;
}

int dlc_optim_state_count(const dlc_optim *o) { return o->nstate; }

const char *dlc_optim_state_name(const dlc_optim *o, int k) {
    if (k < 0 || k >= o->nstate) return NULL;
    return o->op.kind == DLC_OPTIM_ADAMW ? (k ? "v" : "m") : "momentum";
}

float *dlc_optim_state(const dlc_optim *o, int k) {
    return k >= 0 && k < o->nstate ? o->state[k]->data : NULL;
}

dlc_tensor *dlc_optim_state_tensor(const dlc_optim *o, int k) {
    return k >= 0 && k < o->nstate ? o->state[k] : NULL;
}

/* ---- kernels: outputs first, then inputs, then sizes; n is a multiple of B ---- */

typedef struct adamw_k {
    float decay;           /* 1 - lr*wd, or 1 */
    float b1, c1, b2, c2;  /* c = 1 - b */
    float step_size;       /* lr / (1 - b1^t) */
    float inv_bc2_sqrt;    /* 1 / sqrt(1 - b2^t) */
    float eps;
} adamw_k;

DLC_HOT static void adamw_run(float *restrict p, float *restrict m, float *restrict v,
                      const float *restrict g, int64_t n, const adamw_k *k) {
    const float decay = k->decay, b1 = k->b1, c1 = k->c1, b2 = k->b2, c2 = k->c2;
    const float ss = k->step_size, ib = k->inv_bc2_sqrt, eps = k->eps;
    /* plain sqrtf vectorises: the library is built with -fno-math-errno */
    DLC_PRAGMA(omp simd)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - ss * mi / (sqrtf(vi) * ib + eps);
    }
}

typedef struct {
    float *p, *m, *v;
    const float *g;
    const run *runs;
    int nr;
    adamw_k k;            /* .decay is set per run */
    float decay_on;       /* 1 - lr*wd for runs that decay */
} adamw_ctx;

/* Blocks [b0, b1) of B floats of the runs laid end to end: each element's update is
 * independent, so any split gives the same bits. */
static void adamw_blocks(void *ctx, int64_t b0, int64_t b1, int part) {
    const adamw_ctx *c = ctx;
    adamw_k k = c->k;
    int64_t lo = b0 * B, hi = b1 * B, at = 0; /* at: where run r starts, end to end */
    for (int r = 0; r < c->nr && at < hi; r++) {
        const run *u = &c->runs[r];
        int64_t s = lo > at ? lo : at, e = hi < at + u->len ? hi : at + u->len;
        if (s < e) {
            int64_t off = u->start + (s - at);
            k.decay = u->decay ? c->decay_on : 1.0f;
            adamw_run(c->p + off, c->m + off, c->v + off, c->g + off, e - s, &k);
        }
        at += u->len;
    }
}

/* momentum == 0 */
DLC_HOT static void sgd_plain_run(float *restrict p, const float *restrict g, int64_t n, float lr, float wd) {
    for (int64_t i = 0; i < n; i += B)
        for (int j = 0; j < B; j++) p[i + j] -= lr * (g[i + j] + wd * p[i + j]);
}

/* first: buf = g'; else buf = mu*buf + damp1*g' (damp1 = 1 - dampening); then
 * p -= lr * (nesterov ? g' + mu*buf : buf). */
DLC_HOT static void sgd_momentum_run(float *restrict p, float *restrict buf, const float *restrict g,
                             int64_t n, float lr, float wd, float mu, float damp1, int first,
                             int nesterov) {
    const float keep = first ? 0.0f : mu, add = first ? 1.0f : damp1, nest = nesterov ? 1.0f : 0.0f;
    const float from_buf = nesterov ? mu : 1.0f;
    if (first) /* buf may hold anything (a loaded state): do not multiply it */
        memset(buf, 0, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i += B)
        for (int j = 0; j < B; j++) {
            float gj = g[i + j] + wd * p[i + j];
            float bj = keep * buf[i + j] + add * gj;
            buf[i + j] = bj;
            p[i + j] -= lr * (nest * gj + from_buf * bj);
        }
}

/* Maximal ranges of consecutive non-frozen tensors with the same decay flag; each
 * tensor's range runs to the next tensor's offset (its padding included). */
static int build_runs(dlc_optim *o) {
    const dlc_params *p = o->p;
    int nr = 0;
    for (int i = 0; i < o->n; i++) {
        if (!dlc_params_tensor(p, i)->requires_grad) continue;
        int64_t s = dlc_params_offset(p, i);
        int64_t e = i + 1 < o->n ? dlc_params_offset(p, i + 1) : dlc_params_size(p);
        if (e == s) continue;
        if (nr && o->runs[nr - 1].decay == o->decay[i] && o->runs[nr - 1].start + o->runs[nr - 1].len == s)
            o->runs[nr - 1].len += e - s;
        else
            o->runs[nr++] = (run){s, e - s, o->decay[i]};
    }
    return nr;
}

dlc_status dlc_optim_step(dlc_optim *o, float lr) {
    const dlc_optim_params *op = &o->op;
    const char *fn = dlc_optim_kind_name(op->kind);
    if (!(lr >= 0) || !isfinite(lr))
        return dlc_error(DLC_ERR_ARG, "%s: step lr = %g, expected a finite number >= 0", fn, (double)lr);
    dlc_status st = dlc_params_check(o->p, fn);
    if (st != DLC_OK) return st;
    int nr = build_runs(o);
    float *pd = dlc_params_data(o->p), *gd = dlc_params_grad(o->p);
    double wd = op->weight_decay;

    if (op->kind == DLC_OPTIM_ADAMW) {
        double t = (double)(o->steps + 1);
        adamw_k k = {
            .b1 = (float)op->beta1, .c1 = (float)(1 - op->beta1),
            .b2 = (float)op->beta2, .c2 = (float)(1 - op->beta2),
            .step_size = (float)(lr / (1 - pow(op->beta1, t))),
            .inv_bc2_sqrt = (float)(1 / sqrt(1 - pow(op->beta2, t))),
            .eps = (float)op->eps,
        };
        adamw_ctx c = {.p = pd, .m = o->state[0]->data, .v = o->state[1]->data, .g = gd, .runs = o->runs,
                       .nr = nr, .k = k, .decay_on = (float)(1 - (double)lr * wd)};
        int64_t total = 0;
        for (int r = 0; r < nr; r++) total += o->runs[r].len;
        /* one region over the runs laid end to end, split in blocks of B floats */
        dlcx_parallel_for(total / B, 7 * total, adamw_blocks, &c);
    } else {
        for (int r = 0; r < nr; r++) {
            const run *u = &o->runs[r];
            float w = u->decay ? (float)wd : 0.0f;
            if (o->nstate == 0)
                sgd_plain_run(pd + u->start, gd + u->start, u->len, lr, w);
            else
                sgd_momentum_run(pd + u->start, o->state[0]->data + u->start, gd + u->start, u->len,
                                 lr, w, (float)op->momentum, (float)(1 - op->dampening),
                                 o->steps == 0, op->nesterov);
        }
    }
    o->steps++;
    return DLC_OK;
}

/* ---- learning-rate schedules ---- */

dlc_status dlc_lr_schedule_check(const dlc_lr_schedule *s) {
    const char *fn = dlc_lr_kind_name(s->kind);
    if (!fn)
        return dlc_error(DLC_ERR_ARG, "lr schedule: kind = %d, expected constant, cosine or linear",
                         (int)s->kind);
    if (!(s->lr >= 0) || !isfinite(s->lr))
        return dlc_error(DLC_ERR_ARG, "%s: lr = %g, expected a finite number >= 0", fn, s->lr);
    if (s->warmup < 0)
        return dlc_error(DLC_ERR_ARG, "%s: warmup = %lld, expected a number of steps >= 0", fn,
                         (long long)s->warmup);
    if (s->kind == DLC_LR_CONSTANT) return DLC_OK;
    if (!(s->min_lr >= 0) || !(s->min_lr <= s->lr))
        return dlc_error(DLC_ERR_ARG, "%s: min_lr = %g, expected a number in [0, lr = %g]", fn,
                         s->min_lr, s->lr);
    if (s->total <= s->warmup)
        return dlc_error(DLC_ERR_ARG,
                         "%s: total = %lld must be greater than warmup = %lld (total is the step "
                         "at which the lr reaches min_lr)",
                         fn, (long long)s->total, (long long)s->warmup);
    return DLC_OK;
}

float dlc_lr_at(const dlc_lr_schedule *s, int64_t step) {
    if (dlc_lr_schedule_check(s) != DLC_OK) return NAN;
    if (step < 0) step = 0;
    if (step < s->warmup) return (float)(s->lr * (double)(step + 1) / (double)s->warmup);
    if (s->kind == DLC_LR_CONSTANT) return (float)s->lr;
    double q = (double)(step - s->warmup) / (double)(s->total - s->warmup);
    if (q > 1) q = 1;
    double f = s->kind == DLC_LR_COSINE ? 0.5 * (1 + cos(3.14159265358979323846 * q)) : 1 - q;
    return (float)(s->min_lr + (s->lr - s->min_lr) * f);
}
