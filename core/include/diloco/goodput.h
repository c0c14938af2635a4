/*
 * goodput.h - a discrete-event simulator of training goodput on a cluster of N chips that
 * fail (docs/algorithm.md §6, §7; docs/goodput.md): how much of the allocated chip-time ends in
 * useful training under plain data parallel, elastic data parallel and Decoupled DiLoCo
 * with M learners.  Sans-IO and single-threaded: it computes, it never reads a clock.
 *
 *     dlc_goodput_params p = dlc_goodput_default_params();   // elastic-dp, 1.2M chips, MTBI 1 y
 *     p.policy = DLC_GOODPUT_DECOUPLED;
 *     p.learners = 8;
 *     p.seed = 7;
 *     dlc_goodput_result r;
 *     if (dlc_goodput_run(&p, &r) != DLC_OK) fprintf(stderr, "%s\n", dlc_last_error());
 *     else printf("goodput %.3f uptime %.3f\n", r.goodput, r.uptime);
 *     dlc_goodput_result_free(&r);                          // the time series and per-learner arrays
 *
 * The model.  The N chips are split into M learners (1 for dp and elastic-dp) of N/M chips
 * (the first N mod M learners get one more), each cut into slices of slice_chips chips
 * (the last slice of a learner takes the remainder).  Every live chip is interrupted at
 * exponential intervals of mean mtbi, independently, so a learner with c live chips sees one
 * Poisson process of rate c/mtbi (one event per interruption, never one per chip); the
 * interrupted chip's slice leaves for `repair` seconds.  Work is counted in steps of `step`
 * seconds, each worth (chips computing) x step chip-seconds; a step in progress when the
 * learner is interrupted or paused is lost.
 *
 *   dp          any interruption stops the whole job; it restarts after `restart` seconds
 *               (a spare slice takes the interrupted one's place: all N chips stay in the
 *               job) from the last checkpoint, taken every `checkpoint` seconds of compute
 *               (each blocking `checkpoint_cost` seconds).  Work since it is lost.
 *   elastic-dp  an interruption pauses the job `downscale` seconds, then it continues without
 *               the slice (a smaller batch); when the slice returns it pauses `upscale`
 *               seconds and continues with it.  Nothing is rolled back.
 *   decoupled   M learners, each behaving as elastic-dp on its own chips; the others never
 *               pause.  Learners are independent (the syncer merges whoever is alive).
 *
 * An interruption or return during a pause is handled by that pause (pause = absorb,
 * default) or restarts it (pause = extend: the pause ends `downscale`/`upscale`/`restart`
 * seconds after the last event); docs/goodput.md compares the two.
 *
 * The syncer (decoupled, syncer_shards = S > 0; docs/goodput.md, "The syncer"): S shard
 * processes, each owning 1/S of the fragments, each failing at exponential intervals of
 * mean syncer_mtbf.  Without a standby a failed shard is back after syncer_restart from its
 * checkpoint set (one every syncer_checkpoint seconds, none written while a shard is down):
 * its fragments' merges since that set are lost, and so is the learners' work on them
 * until it is back (their next contributions are stale and they are resynced): 1/S of
 * every learner's useful work from the set to the return.  With standby = 1 a shard's
 * standby takes over after `lease` seconds, the shard's share of the work in the lease
 * counted lost (an upper bound: the learners' next contributions carry most of it); the
 * replaced primary comes back as the new standby after syncer_restart; a primary that
 * fails while its shard has no standby (the standby failed too, or is still starting)
 * is an outage as above.  A standby fails like a primary and is replaced likewise.
 *
 * Outputs (§7): goodput = useful chip-seconds / (N x duration), where useful = the steps
 * that survive (for dp: not rolled back; the work after the last checkpoint at the end of
 * the horizon counts; for decoupled with a syncer modeled: less what its failures lost);
 * uptime = share of the time in which at least one learner computes.
 */
#ifndef DILOCO_GOODPUT_H
#define DILOCO_GOODPUT_H

#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlc_goodput_policy {
    DLC_GOODPUT_DP = 0,        /* "dp": non-elastic data parallel, checkpoint and restart */
    DLC_GOODPUT_ELASTIC = 1,   /* "elastic-dp" */
    DLC_GOODPUT_DECOUPLED = 2, /* "decoupled": M elastic learners that never wait for each other */
    DLC_GOODPUT_POLICY_COUNT
} dlc_goodput_policy;

typedef enum dlc_goodput_pause {
    DLC_GOODPUT_ABSORB = 0, /* "absorb": an event during a pause is handled by that pause */
    DLC_GOODPUT_EXTEND = 1, /* "extend": each event restarts the pause */
    DLC_GOODPUT_PAUSE_COUNT
} dlc_goodput_pause;

/* Names ("dp", "elastic-dp", "decoupled"; "absorb", "extend"); "?" out of range. */
DLC_API const char *dlc_goodput_policy_name(int policy);
DLC_API const char *dlc_goodput_pause_name(int pause);
/* The enum value of a name above; DLC_ERR_ARG naming the known ones otherwise. */
DLC_API dlc_status dlc_goodput_policy_parse(const char *name, dlc_goodput_policy *out);
DLC_API dlc_status dlc_goodput_pause_parse(const char *name, dlc_goodput_pause *out);

/* Largest accepted sizes: they bound the arrays dlc_goodput_run allocates. */
#define DLC_GOODPUT_MAX_CHIPS ((int64_t)1 << 40)
#define DLC_GOODPUT_MAX_LEARNERS 4096
#define DLC_GOODPUT_MAX_SAMPLES 1000000 /* time-series points: duration / sample + 1 */
#define DLC_GOODPUT_MAX_SHARDS 64

/* Every duration in seconds.  Defaults and their sources: docs/goodput.md. */
typedef struct dlc_goodput_params {
    dlc_goodput_policy policy;
    int64_t chips;         /* N >= 1 */
    int64_t slice_chips;   /* chips per slice, 1..chips per learner */
    int learners;          /* M, 1..DLC_GOODPUT_MAX_LEARNERS and <= chips; must be 1 unless decoupled */
    double mtbi;           /* mean time between interruptions of ONE chip, > 0 */
    double repair;         /* an interrupted slice is back after this, >= 0 */
    double downscale;      /* elastic pause when a slice leaves, >= 0 */
    double upscale;        /* elastic pause when a slice returns, >= 0 */
    double step;           /* time of one training step, > 0 */
    double checkpoint;     /* dp: compute time between checkpoints, >= step */
    double checkpoint_cost;/* dp: blocking time of one checkpoint, >= 0 */
    double restart;        /* dp: stop-the-world time after an interruption, >= 0 */
    dlc_goodput_pause pause;
    double duration;       /* simulated time, > 0 */
    double sample;         /* time-series interval, 0 = no series, else >= duration / DLC_GOODPUT_MAX_SAMPLES */
    uint64_t seed;         /* same seed, same result; learner m draws from its own stream */
    /* the syncer (decoupled only; above): */
    int syncer_shards;     /* S, 0 (default: the syncer is not modeled) .. DLC_GOODPUT_MAX_SHARDS */
    double syncer_mtbf;    /* mean time between failures of one shard process, > 0 */
    double syncer_restart; /* a failed shard (or a new standby) is up after this, >= 0 */
    double syncer_checkpoint; /* between checkpoint sets, > 0 */
    int standby;           /* 1: each shard has a standby; 0: none */
    double lease;          /* a standby takes over after this, >= 0 */
} dlc_goodput_params;

/* elastic-dp on 1.2M chips, MTBI 1 year, 30 days, hourly samples, seed 0; downscale and
 * upscale calibrated on the paper's 58% (docs/goodput.md, "Calibration"). */
DLC_API dlc_goodput_params dlc_goodput_default_params(void);
/* DLC_OK or DLC_ERR_ARG naming the field, its value and what was expected:
 * "goodput: mtbi = -1, expected a finite duration > 0 (seconds)". */
DLC_API dlc_status dlc_goodput_params_check(const dlc_goodput_params *p);

typedef struct dlc_goodput_result {
    double goodput;          /* useful chip-seconds / (chips x duration), in [0, 1] */
    double uptime;           /* share of the time with at least one learner computing */
    double useful;           /* useful chip-seconds */
    int64_t interruptions;   /* chip interruptions over all learners */
    int64_t rollbacks;       /* dp: restarts that lost work since a checkpoint */
    double first_interruption; /* time of the first interruption, -1 if none (to check accounting) */
    int64_t syncer_failures; /* shard processes (primaries and standbys) that failed */
    int64_t syncer_outages;  /* primaries that failed without a standby to take over */
    int64_t takeovers;       /* primaries replaced by their standby */
    double syncer_lost;      /* useful chip-seconds the syncer's failures took (already left
                                out of useful and goodput) */
    int64_t events;          /* events processed: interruptions, returns, pause ends (steps and
                                checkpoints are computed in closed form, not events) */
    int learners;            /* M, the length of learner_goodput */
    double *learner_goodput; /* [M] useful / (that learner's chips x duration) */
    int64_t samples;         /* length of the three series (0 when params.sample == 0) */
    double *t;               /* [samples] 0, sample, 2·sample, ... <= duration */
    double *live_chips;      /* [samples] chips not under repair at t, all learners */
    double *progress;        /* [samples] useful chip-seconds so far / chips: the run's position
                                in seconds of a full healthy cluster (dp drops on a rollback) */
} dlc_goodput_result;

/* Runs one simulation of p (borrowed) into *out (caller-owned struct; the arrays in it are
 * allocated here and released by dlc_goodput_result_free).  On failure *out is zeroed
 * (free is still safe): DLC_ERR_ARG (bad params, NULL) or DLC_ERR_NOMEM. */
DLC_API dlc_status dlc_goodput_run(const dlc_goodput_params *p, dlc_goodput_result *out);
/* Frees the arrays of r and zeroes it; NULL and a zeroed result are no-ops. */
DLC_API void dlc_goodput_result_free(dlc_goodput_result *r);

#ifdef __cplusplus
}
#endif
#endif
