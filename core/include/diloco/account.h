/*
 * account.h - the run's account, written once for every driver: where each island's time
 * went (every second of the run's window in exactly one bucket), the goodput and the
 * uptime.  `sim` (core/vtime.c) and `run` (its supervisor, lua/diloco/supervisor.lua) feed it
 * the same three kinds of event, so both report by the same rules (docs/runtime.md, "the
 * account"):
 *
 *   - an island changes state at a time (dlc_account_enter): up, down (killed or crashed),
 *     paused, held (stopped while another is down), starting, done, off;
 *   - what its processes measured while up (dlc_account_set_work): seconds computing and
 *     seconds waiting, its compute by fate (learner.h, "the account"), how many of the
 *     steps it sent the syncer merged, its nominal rate;
 *   - a merge at a time with the tokens it made useful (dlc_account_merge).
 *
 *     dlc_account *a = dlc_account_new(2, 0.0);             // two islands, window from t = 0
 *     dlc_account_enter(a, 0, DLC_ISLAND_UP, 0.0);          // both started (each is off until then)
 *     dlc_account_enter(a, 1, DLC_ISLAND_UP, 0.0);
 *     dlc_account_enter(a, 1, DLC_ISLAND_DOWN, 12.5);       // island 1 killed at 12.5 s
 *     dlc_account_enter(a, 1, DLC_ISLAND_UP, 20.0);         // back at 20 s
 *     dlc_account_merge(a, 9.0, 4096);
 *     dlc_account_set_work(a, 0, &w0);  dlc_account_set_work(a, 1, &w1);
 *     dlc_account_row r;
 *     dlc_account_row_of(a, 1, 60.0, &r);                   // r.share[] sums to 1
 *     double g = dlc_account_goodput(a, 60.0);
 *     dlc_account_free(a);
 *
 * The buckets of one island over the window [t0, t_end]:
 *   useful       its compute's share that entered a merge: the sent seconds times the merged
 *                fraction of its sent steps, plus the alpha kept of overwritten steps;
 *   overwritten  trained after its last send of a fragment, replaced by that fragment's merge;
 *   dropped      sent and never merged, discarded by a kill or rollback, and compute no fate
 *                accounts for (a step a kill cut short);
 *   unsent       trained and in no contribution at the end (sync.final_flush sends it);
 *   down         down or paused;
 *   waiting      up but not computing (blocked on a round, joining, its process starting),
 *                starting, or held;
 *   done         finished its steps before the end, or (work.ready_since) up and ready with
 *                no step to take before the end;
 *   other        what no measure covers: off (before its first start, by-hand launches the
 *                run never saw), time up that its processes' own measures miss, and
 *                compute whose fate no account says (work.steps).
 * Up time is split by the work: computing (busy_s) by fate, waiting (idle_s), the rest
 * other; when busy_s + idle_s exceed the up time (a process's clock also ran while it
 * was paused) both are scaled to it, so a row always sums to the window.  Compute by
 * fate is split by steps: exact with steps of equal length.
 *
 * Sans-IO: every time is the driver's (virtual for sim, the monotonic clock for run).
 */
#ifndef DILOCO_ACCOUNT_H
#define DILOCO_ACCOUNT_H

#include "learner.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlc_island_state {
    DLC_ISLAND_OFF = 0,  /* "off": not started yet (every island's state at t0), or gone */
    DLC_ISLAND_STARTING, /* "starting": launched, before its process is up: waiting */
    DLC_ISLAND_UP,       /* "up": its process runs; the work splits this time */
    DLC_ISLAND_DOWN,     /* "down": killed or crashed, until back */
    DLC_ISLAND_PAUSED,   /* "paused": stopped by a pause fault (counts as down) */
    DLC_ISLAND_HELD,     /* "held": stopped while another is down (counts as waiting) */
    DLC_ISLAND_DONE,     /* "done": finished its steps before the run's end */
    DLC_ISLAND_STATE_COUNT
} dlc_island_state;

typedef enum dlc_account_bucket {
    DLC_BUCKET_USEFUL = 0, /* "useful" */
    DLC_BUCKET_OVERWRITTEN,
    DLC_BUCKET_DROPPED,
    DLC_BUCKET_UNSENT,
    DLC_BUCKET_DOWN,
    DLC_BUCKET_WAITING,
    DLC_BUCKET_DONE,
    DLC_BUCKET_OTHER,
    DLC_BUCKET_COUNT
} dlc_account_bucket;

/* Names ("off", "starting", ...; "useful", "overwritten", ...); "?" out of range. */
DLC_API const char *dlc_island_state_name(int state);
DLC_API const char *dlc_account_bucket_name(int bucket);
/* The state of a name above; DLC_ERR_ARG naming the known ones otherwise. */
DLC_API dlc_status dlc_island_state_parse(const char *name, dlc_island_state *out);

/* What an island's processes measured, over all of them (each field >= 0 and finite). */
typedef struct dlc_account_work {
    double busy_s;             /* seconds computing inner steps (while up) */
    double idle_s;             /* seconds up and not computing: blocked on a round,
                                * joining, the process starting */
    double ready_since;        /* < 0: not set; else ready with nothing to do since this
                                * time while up (sim: no step fits before the end): the up
                                * time from max(it, the last state change) is done, taken
                                * out of idle_s */
    double nominal_tps;        /* tokens per second at its healthy speed: the weight of
                                * the total and of goodput's capacity (0: unknown, weight 1
                                * in the total, no capacity) */
    dlc_learner_account fates; /* its compute by fate (learner.h), over its processes */
    double merged_steps;       /* of the steps it sent, those the syncer merged (syncer.h) */
    double steps;              /* the inner steps it ran; used only when fates are all 0
                                * (its processes' accounts unknown, as to a syncer started
                                * by hand): then merged_steps / steps of its compute is
                                * useful and the rest other */
} dlc_account_work;

typedef struct dlc_account_row {
    double window;                  /* t_end - t0 (0 when t_end <= t0) */
    double s[DLC_BUCKET_COUNT];     /* seconds per bucket: they sum to window */
    double share[DLC_BUCKET_COUNT]; /* s / window: they sum to 1 (all 0 for an empty window) */
} dlc_account_row;

typedef struct dlc_account dlc_account;

/* An account of `islands` (1..DLC_ACCOUNT_MAX_ISLANDS) islands, all off, over a window
 * from t0.  NULL on a bad argument or no memory (dlc_last_error says which). */
#define DLC_ACCOUNT_MAX_ISLANDS 4096
DLC_API dlc_account *dlc_account_new(int islands, double t0);
DLC_API void dlc_account_free(dlc_account *a);
DLC_API int dlc_account_islands(const dlc_account *a);
DLC_API double dlc_account_t0(const dlc_account *a);

/* Island m (0-based) is in `state` from time t on.  A t before the island's last change
 * (or t0) is taken as that time, so a late report never makes time run backwards; the
 * same state again changes nothing.  DLC_ERR_RANGE for a bad m, DLC_ERR_ARG for a bad
 * state or a non-finite t. */
DLC_API dlc_status dlc_account_enter(dlc_account *a, int m, dlc_island_state state, double t);
/* Island m's state now (DLC_ISLAND_OFF for a bad m) and since when. */
DLC_API dlc_island_state dlc_account_state(const dlc_account *a, int m, double *since);
/* Seconds island m spent in `state` within [t0, t_end] (the current state lasting to t_end). */
DLC_API double dlc_account_seconds(const dlc_account *a, int m, dlc_island_state state, double t_end);

/* Replaces island m's work (a copy).  DLC_ERR_ARG for a negative or non-finite field. */
DLC_API dlc_status dlc_account_set_work(dlc_account *a, int m, const dlc_account_work *w);

/* A merge at time t that made useful_tokens (>= 0) useful: goodput's numerator, and the
 * uptime's evidence.  Merges are kept as times (8 bytes each). */
DLC_API dlc_status dlc_account_merge(dlc_account *a, double t, double useful_tokens);
DLC_API int64_t dlc_account_merges(const dlc_account *a);
/* The driver's corrections: a syncer restored from a checkpoint lost the merges after it
 * (forget all but the `keep` earliest, keep >= 0), and with them their useful tokens, as
 * a rollback of data parallel takes back the work past its checkpoint (set the total,
 * >= 0 and finite). */
DLC_API dlc_status dlc_account_forget_merges(dlc_account *a, int64_t keep);
DLC_API dlc_status dlc_account_set_useful_tokens(dlc_account *a, double useful_tokens);
DLC_API double dlc_account_useful_tokens(const dlc_account *a);

/* Island m's row over [t0, t_end]. */
DLC_API dlc_status dlc_account_row_of(const dlc_account *a, int m, double t_end, dlc_account_row *out);
/* Every island's rows weighted by its nominal rate (1 where none is known). */
DLC_API dlc_status dlc_account_total(const dlc_account *a, double t_end, dlc_account_row *out);
/* Useful tokens over the capacity Σ nominal_tps × (t_end - t0); 0 with no capacity. */
DLC_API double dlc_account_goodput(const dlc_account *a, double t_end);
/* The same for `useful_tokens` (>= 0) tallied elsewhere over this account's capacity: a
 * syncer in shards under a launcher, whose shard 1 adds every shard's useful tokens and
 * measured the learners' capacity (docs/shards.md).  0 with no capacity or a negative or
 * non-finite tally. */
DLC_API double dlc_account_goodput_of(const dlc_account *a, double t_end, double useful_tokens);
/* The share of windows of `window` seconds from t0 up to t_end (at least one) that hold a
 * merge made before t_end; 0 when window <= 0 or t_end <= t0. */
DLC_API double dlc_account_uptime(const dlc_account *a, double t_end, double window);

#ifdef __cplusplus
}
#endif
#endif
