/*
 * run.h - one run description: what every learner and the syncer of a run must agree on
 * (the algorithm preset, the schedule, the fragment plan, the merge, the outer optimizer,
 * the codecs), in one struct from which both state machines' params derive, with a hash
 * the wire compares (HELLO's `rh`, docs/protocol.md) and a diff that names the first
 * field two descriptions disagree on.  Plain data: no allocation, no I/O.
 *
 *     dlc_run_params run = dlc_run_default_params();           // decoupled
 *     run.H = 30; run.tau = 3; run.fragments = dlc_plan_count(plan);
 *     run.plan_hash = dlc_plan_hash(plan); run.model_hash = dlc_plan_model_hash(plan);
 *     dlc_learner_params lp;
 *     if (dlc_run_learner_params(&run, 2, &lp) < 0) fprintf(stderr, "%s\n", dlc_last_error());
 *     lp.heartbeat = 0.5;                                       // the process's own choice
 *     dlc_syncer_params sp;
 *     dlc_run_syncer_params(&run, 4, &sp);                      // 4 learners
 *     hello.run_hash = dlc_run_hash(&run); hello.run_params = run;    // what HELLO states
 *     char why[256];
 *     if (dlc_run_diff(&ours, &theirs, why, sizeof why)) ...;   // "sync.tau: 2 here, 3 in the learner's run"
 *
 * What is NOT in a run description, because each process chooses it alone: the learner's
 * id, heartbeat and incarnation, the syncer's learner count, epoch, liveness timeout and
 * embedding flags (set them on the derived params).  A quorum function of the live count
 * (a recipe's) is described by the quorum it starts with.
 *
 * Every function borrows its arguments for the call only; nothing is kept.
 */
#ifndef DILOCO_RUN_H
#define DILOCO_RUN_H

#include <stddef.h>
#include <stdint.h>
#include "codec.h"
#include "frag.h"
#include "merge.h"
#include "policy.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The state machines' params that a run derives (learner.h, syncer.h): a run description
 * names them without including the state machines, so the wire codec (proto.h) states a
 * run without depending on them. */
struct dlc_learner_params;
struct dlc_syncer_params;

/* The algorithm presets (docs/sim.md; lua/diloco/recipe.lua's sync.preset). */
typedef enum dlc_run_preset {
    DLC_PRESET_DP,        /* data parallel: gradients averaged every step */
    DLC_PRESET_DILOCO,    /* one fragment, every learner, blocking */
    DLC_PRESET_STREAMING, /* P fragments, every learner, overlapped */
    DLC_PRESET_DECOUPLED, /* P fragments, a minimum quorum, adaptive grace */
    DLC_PRESET_COUNT
} dlc_run_preset;

/* "dp", "diloco", "streaming", "decoupled"; NULL when out of range. */
DLC_API const char *dlc_run_preset_name(dlc_run_preset p);
/* Parses a preset name; DLC_ERR_ARG naming the value and the choices. */
DLC_API dlc_status dlc_run_preset_parse(const char *name, dlc_run_preset *out);

/* The fields, in the order the hash, the diff and the wire list them.  Each is named as
 * the recipe names it (the name dlc_run_diff and dlc_run_params_check print). */
typedef struct dlc_run_params {
    int dp;                   /* sync.dp: 0/1, data parallel (first: what a peer differs in most) */
    dlc_run_preset preset;    /* sync.preset; DP exactly when dp = 1 */
    int H;                    /* sync.H: inner steps between syncs of a fragment, 0 = the host's schedule */
    int fragments;            /* sync.fragments: P >= 1 (1 with dp) */
    dlc_plan_kind plan;       /* sync.plan */
    uint64_t plan_hash;       /* sync.plan_hash: dlc_plan_hash, 0 = not known */
    uint64_t model_hash;      /* model_hash: dlc_plan_model_hash, 0 = not known */
    int tau;                  /* sync.tau: 0 <= tau < H (any tau >= 0 with H = 0) */
    double alpha;             /* sync.alpha: mixing on arrival, [0, 1] */
    int blocking;             /* sync.blocking: 0/1 */
    int quorum;               /* sync.quorum: K >= 1, or DLC_QUORUM_ALL (0) */
    dlc_grace_mode grace;     /* sync.grace */
    double grace_s;           /* sync.grace_s: FIXED: seconds >= 0 */
    double grace_gamma;       /* sync.grace_gamma: (0, 1] */
    dlc_weighting weighting;  /* sync.weighting */
    dlc_merge_mode merge;     /* sync.merge */
    int ring;                 /* sync.ring: 1..DLC_FRAGSTATE_RING_MAX versions kept */
    double outer_lr;          /* outer.lr: finite, >= 0 */
    double outer_momentum;    /* outer.momentum: [0, 1) */
    int outer_nesterov;       /* outer.nesterov: 0/1 (1 needs momentum > 0) */
    dlc_codec_kind codec_up;  /* sync.codec: the contributions' codec */
    dlc_codec_kind codec_down;/* sync.codec_down: f32 or bf16 */
    int block;                /* sync.block: codec block, even, DLC_CODEC_BLOCK_MIN..MAX */
    int error_feedback;       /* sync.error_feedback: 0/1 */
    double ema;               /* sync.ema: (0, 1], the learners' and the syncer's EMA weight */
} dlc_run_params;

/* Decoupled DiLoCo as recipe.lua's default preset: H 24, P 4, balanced, no hashes, tau 2,
 * alpha 0, not blocking, quorum 1, adaptive grace (γ 0.8), tokens2_steps, RDA, ring 4,
 * Nesterov 0.7 / 0.9, f32 up and down, block 128, no error feedback, ema 0.5. */
DLC_API dlc_run_params dlc_run_default_params(void);

/* The defaults of a preset, as a recipe's sync.preset fills them (docs/recipes.md): dp
 * (H 1, one fragment, blocking, every learner, mean), diloco (H 24, one fragment,
 * blocking, every learner, mean), streaming (H 24, 4 fragments, tau 2, alpha 0.5, every
 * learner, mean), decoupled (dlc_run_default_params).  DLC_ERR_ARG for an unknown one. */
DLC_API dlc_status dlc_run_preset_params(dlc_run_preset p, dlc_run_params *out);

/* From text: a run described as a recipe's sync and outer fields in JSON,
 *     {"sync": {"preset": "streaming", "H": 12, "codec": "int4", "quorum": "all"},
 *      "outer": {"lr": 0.7, "momentum": 0.9, "nesterov": true}}
 * The preset (default decoupled) fills every field the text leaves out; integers, numbers,
 * booleans for flags, names for enums, "all" or an integer for the quorum.  The hashes are
 * not text (a host computes them from its plan).  Into *out on success; DLC_ERR_ARG naming
 * the field and what was expected (an unknown field lists the known ones), *out
 * unchanged. */
DLC_API dlc_status dlc_run_parse(const char *text, dlc_run_params *out);

/* DLC_OK, or DLC_ERR_ARG naming the field, its value and what was expected:
 * "run: sync.tau = 30: expected 0 <= tau < H = 24". */
DLC_API dlc_status dlc_run_params_check(const dlc_run_params *r);

/* The params of learner `id` (>= 0) in run r, into *out: dlc_learner_default_params()
 * with r's fields (codec = codec_up); heartbeat and incarnation keep their defaults
 * (1 s, 1) for the caller to change.  DLC_ERR_ARG (r checked, then *out) and *out
 * unspecified on failure. */
DLC_API dlc_status dlc_run_learner_params(const dlc_run_params *r, int id, struct dlc_learner_params *out);

/* The params of the syncer of `learners` learners in run r, into *out:
 * dlc_syncer_default_params() with r's fields; epoch, timeout and embedding keep their
 * defaults (1, 0, NULL) for the caller to change.  DLC_ERR_ARG as above ("syncer:
 * quorum = 5 but learners = 4: ..."). */
DLC_API dlc_status dlc_run_syncer_params(const dlc_run_params *r, int learners, struct dlc_syncer_params *out);

/* 64-bit FNV-1a of r's canonical byte stream (docs/protocol.md, "Run description"):
 * "dlc.run.v1", then every field in the struct's order, integers and flags as i64,
 * hashes as u64, numbers as the u64 of their IEEE-754 binary64 bits (-0 as +0), enums
 * as u32 length + name, all little-endian.  0 for NULL or an out-of-range enum. */
DLC_API uint64_t dlc_run_hash(const dlc_run_params *r);

/* Compares a (this side's) with b (the learner's, as a syncer sees a HELLO) field by
 * field in the struct's order.  0 when they agree (out gets ""); 1 when they differ,
 * with out (cap bytes, NUL-terminated, cut to fit; may be NULL with cap 0) naming the
 * FIRST field that differs and both values: "sync.tau: 2 here, 3 in the learner's run".
 * DLC_ERR_ARG for a NULL a or b. */
DLC_API int dlc_run_diff(const dlc_run_params *a, const dlc_run_params *b, char *out, size_t cap);

/* ---- the fields one by one (the wire's compact form, core/proto.c) ---- */

typedef enum dlc_run_field_type {
    DLC_RUN_INT,    /* int */
    DLC_RUN_FLAG,   /* int 0/1 */
    DLC_RUN_HASH64, /* uint64_t */
    DLC_RUN_NUMBER, /* double */
    DLC_RUN_ENUM,   /* an enum with a name table */
    DLC_RUN_FIELD_TYPE_COUNT
} dlc_run_field_type;

typedef struct dlc_run_field {
    const char *name;         /* "sync.tau" */
    dlc_run_field_type type;
    size_t offset;            /* in dlc_run_params */
    const char *(*enum_name)(int value); /* ENUM: the name of a value, NULL out of range */
    int enum_count;           /* ENUM: values 0..enum_count-1 */
    /* INT and NUMBER fields with bounds: the value lies in [min, max], or (min, ...] when
     * min_open, [..., max) when max_open (max may be INFINITY); NAN min: no bounds here
     * (a field whose rule is not a range: the quorum, the block's evenness, the hashes).
     * dlc_run_params_check applies them, and the recipe reads them (lua/diloco/recipe.lua
     * through diloco.machine.fields), so a bound is written once. */
    double min, max;
    int min_open, max_open;
    const char *doc;          /* what the field means, for the recipe's help */
} dlc_run_field;

/* "an integer in [1, 64]", "a number in (0, 1]", "a number >= 0": what field f expects
 * (its type and bounds), into out (cap bytes); "" for a field without bounds. */
DLC_API void dlc_run_field_expect(const dlc_run_field *f, char *out, size_t cap);

/* The number of fields, and field i (0 <= i < count, NULL otherwise; static storage). */
DLC_API int dlc_run_field_count(void);
DLC_API const dlc_run_field *dlc_run_field_at(int i);

#ifdef __cplusplus
}
#endif
#endif
