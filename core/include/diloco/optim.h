/*
 * optim.h - optimizers over a parameter arena (params.h), and learning-rate schedules.
 *
 * An optimizer step is ONE flat loop over the arena (split only where the per-tensor
 * weight-decay flag changes), vectorised, with its state in arenas of the same layout
 * as the parameters: AdamW keeps "m" and "v", SGD with momentum keeps "momentum".
 * Saving or restoring the state is copying those arenas plus the step count.
 *
 *     dlc_optim_params op = dlc_optim_default_params(DLC_OPTIM_ADAMW);
 *     op.lr = 3e-4;
 *     op.weight_decay = 0.1;
 *     dlc_optim *opt = dlc_optim_new(params, &op);       // borrows params
 *     dlc_lr_schedule s = {DLC_LR_COSINE, 3e-4, 3e-5, 100, 10000};
 *     for (int64_t step = 0; step < 10000; step++) {
 *         dlc_params_zero_grad(params);
 *         ... forward, backward ...
 *         dlc_params_clip_grad_norm(params, 1.0);
 *         if (dlc_optim_step(opt, dlc_lr_at(&s, step)) != DLC_OK) ...;
 *     }
 *     dlc_optim_free(opt);
 *
 * Update rules (t = the step count after incrementing, lr = the step's lr):
 *   AdamW, exactly torch.optim.AdamW (amsgrad off):
 *     p -= lr*wd*p                        (only tensors whose decay flag is on)
 *     m  = b1*m + (1-b1)*g;   v = b2*v + (1-b2)*g^2
 *     p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 *   SGD, exactly torch.optim.SGD:
 *     g' = g + wd*p                       (only tensors whose decay flag is on)
 *     momentum == 0:  p -= lr*g'
 *     otherwise:      buf = (first step) ? g' : mu*buf + (1-dampening)*g'
 *                     p -= lr * (nesterov ? g' + mu*buf : buf)
 *     "first step" is a step count of 0 before the step.
 *
 * Decay flags: one per tensor, on by default for tensors with 2 or more dimensions
 * (matrices), off for vectors and scalars (biases, norm gains); change them with
 * dlc_optim_set_decay().  The Lua binding adds a name rule (see docs/optim.md).
 * Frozen tensors (requires_grad switched off after packing) are skipped: no update,
 * no state change.  The step count, and so the bias correction, is shared by all.
 *
 * Default hyper-parameters follow LLM pre-training practice (nanoGPT, the DiLoCo
 * paper), not torch's defaults: AdamW lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight
 * decay 0.1; SGD lr 0.01, momentum 0, dampening 0, nesterov off, weight decay 0.
 */
#ifndef DILOCO_OPTIM_H
#define DILOCO_OPTIM_H

#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlc_optim_kind {
    DLC_OPTIM_ADAMW,
    DLC_OPTIM_SGD,
    DLC_OPTIM_KIND_COUNT
} dlc_optim_kind;

/* "adamw", "sgd"; NULL when out of range. */
DLC_API const char *dlc_optim_kind_name(dlc_optim_kind kind);

typedef struct dlc_optim_params {
    dlc_optim_kind kind;
    double lr;           /* >= 0: the default lr (dlc_optim_step takes the step's own) */
    double weight_decay; /* >= 0; applied to tensors whose decay flag is on */
    double beta1, beta2; /* adamw: each in [0, 1) */
    double eps;          /* adamw: > 0 */
    double momentum;     /* sgd: >= 0 */
    double dampening;    /* sgd: in [0, 1]; 0 with nesterov */
    int nesterov;        /* sgd: 0/1; needs momentum > 0 and dampening 0 */
} dlc_optim_params;

/* Defaults for `kind` (see above); an invalid kind gives the AdamW defaults with
 * kind left invalid, which dlc_optim_new rejects. */
DLC_API dlc_optim_params dlc_optim_default_params(dlc_optim_kind kind);
/* DLC_OK or DLC_ERR_ARG naming the bad field:
 * "adamw: beta2 = 1.5, expected a number in [0, 1)". */
DLC_API dlc_status dlc_optim_params_check(const dlc_optim_params *op);

typedef struct dlc_optim dlc_optim; /* opaque */

/* A new optimizer over p with zeroed state and step count 0, NULL on failure (bad
 * hyper-parameters or no memory).  Borrows p, which must stay alive for every call on
 * the optimizer except dlc_optim_free; op is copied. */
DLC_API dlc_optim *dlc_optim_new(dlc_params *p, const dlc_optim_params *op);
/* Frees the optimizer (state arenas live on while a tensor from
 * dlc_optim_state_tensor still views them).  Does not touch the params.  NULL ok. */
DLC_API void dlc_optim_free(dlc_optim *o);

/* The hyper-parameters in use (owned by o). */
DLC_API const dlc_optim_params *dlc_optim_get_params(const dlc_optim *o);

/* Weight-decay flag of tensor i of the params (0/1); DLC_ERR_RANGE for a bad i. */
DLC_API dlc_status dlc_optim_set_decay(dlc_optim *o, int i, int on);
/* 1/0, or -1 for a bad i. */
DLC_API int dlc_optim_decays(const dlc_optim *o, int i);

/* One update of every (non-frozen) parameter from the grad arena, with learning rate
 * lr (finite, >= 0) for this step; then the step count is incremented.  Fails without
 * changing anything when lr is bad or a tensor left the arena (dlc_params_check). */
DLC_API dlc_status dlc_optim_step(dlc_optim *o, float lr);

/* Steps taken (restore it together with the state arenas). */
DLC_API int64_t dlc_optim_step_count(const dlc_optim *o);
/* n >= 0, else DLC_ERR_ARG. */
DLC_API dlc_status dlc_optim_set_step_count(dlc_optim *o, int64_t n);

/* State arenas: 2 for AdamW ("m", "v"), 1 for SGD with momentum ("momentum"), else 0.
 * Each has dlc_params_size(p) floats in the params' layout. */
DLC_API int dlc_optim_state_count(const dlc_optim *o);
/* Name of state arena k (static string), NULL if k is out of range. */
DLC_API const char *dlc_optim_state_name(const dlc_optim *o, int k);
/* Raw pointer to state arena k, NULL if out of range; valid while o is alive. */
DLC_API float *dlc_optim_state(const dlc_optim *o, int k);
/* State arena k as a 1-D tensor [size] (borrowed: retain it, or make views of it, to
 * keep it beyond dlc_optim_free), NULL if out of range. */
DLC_API dlc_tensor *dlc_optim_state_tensor(const dlc_optim *o, int k);

/* ---- learning-rate schedules ----
 *
 * Warm-up (every kind): for step < warmup, lr * (step + 1) / warmup, so step 0 already
 * moves and step warmup - 1 reaches lr.  After it:
 *   constant: lr
 *   cosine:   min_lr + 0.5 (lr - min_lr) (1 + cos(pi * q))
 *   linear:   min_lr + (lr - min_lr) (1 - q)
 * with q = (step - warmup) / (total - warmup) clamped to [0, 1]: lr at step == warmup,
 * min_lr from step == total on.  Steps are 0-based (the step about to be taken). */
typedef enum dlc_lr_kind {
    DLC_LR_CONSTANT,
    DLC_LR_COSINE,
    DLC_LR_LINEAR,
    DLC_LR_KIND_COUNT
} dlc_lr_kind;

/* "constant", "cosine", "linear"; NULL when out of range. */
DLC_API const char *dlc_lr_kind_name(dlc_lr_kind kind);

typedef struct dlc_lr_schedule {
    dlc_lr_kind kind;
    double lr;      /* peak lr, finite >= 0 */
    double min_lr;  /* cosine/linear: final lr, in [0, lr] */
    int64_t warmup; /* >= 0 warm-up steps (0 = none) */
    int64_t total;  /* cosine/linear: > warmup, the step at which min_lr is reached */
} dlc_lr_schedule;

/* DLC_OK or DLC_ERR_ARG naming the field ("cosine: total = 100 must be greater than
 * warmup = 100"). */
DLC_API dlc_status dlc_lr_schedule_check(const dlc_lr_schedule *s);
/* The lr for 0-based `step` (negative counts as 0).  NaN (and an error recorded) when
 * the schedule fails dlc_lr_schedule_check. */
DLC_API float dlc_lr_at(const dlc_lr_schedule *s, int64_t step);

#ifdef __cplusplus
}
#endif
#endif
