/*
 * vtime.h - the virtual-time driver: M learners (learner.h) and the syncer (syncer.h) in
 * one process on a simulated clock and network.  The ML is real: the host (diloco-lua
 * sim, or a C program) runs every inner step on its own models when told to; only time
 * and the links are simulated, so a run is exactly reproducible.  Sans-IO like the
 * state machines it drives: no clock, no thread, no socket.
 *
 *     dlc_vtime *vt = dlc_vtime_new(&vp, plan, models, dlc_params_data(models[0]));
 *     dlc_vtime_event ev;
 *     while (dlc_vtime_next(vt, &ev) == 1 && ev.type != DLC_VT_DONE) switch (ev.type) {
 *     case DLC_VT_STEP:   run an inner step of learner ev.learner on models[ev.learner];
 *                         dlc_vtime_step_done(vt, ev.learner, tokens); break;
 *                         // dp: forward + backward only, then dlc_vtime_gradient_done
 *     case DLC_VT_OPTIM:  dp: the averaged gradient is in the grad arena: clip, optimizer
 *                         step, dlc_vtime_optim_done(vt, ev.learner); break;
 *     case DLC_VT_EVAL:   dlc_vtime_global(vt, arena) and evaluate; break;
 *     case DLC_VT_MERGE, DLC_VT_REJECT, DLC_VT_FAULT, ...: metrics, hooks; break;
 *     }
 *     dlc_vtime_stats st; dlc_vtime_get_stats(vt, &st);
 *
 * The end.  Without `steps`, every learner trains until `end`.  With it, each stops when
 * its schedule step reaches `steps` (a learner that rejoined late takes the run's step
 * and stops with the others) and the run's end moves to the moment the last live learner
 * stops (the faults and evaluations scheduled after it are dropped); the stats and the
 * goodput are over [0, that end].
 *
 * Time.  Learner m's inner step lasts step_time · scale_m / speed_m virtual seconds,
 * times the factor of any SLOW fault active when it starts, times its jitter: a factor
 * drawn for each step from a log-normal of mean 1 and coefficient of variation
 * jitter_m, a function of (seed, m, the learner's life, the step) only.  A step that would end
 * after `end` is not started; after `end` the run drains (messages in flight are
 * delivered, grace windows expire), every round still holding a contribution is
 * flushed, and DONE follows.  Events at one instant are processed in a fixed order:
 * message deliveries, step ends, faults, timers, step starts, evaluations; ties by the
 * order they were scheduled.  Same inputs, same sequence of events.  A message reaching a
 * learner mid-step is received right after that step ends (a learner that reads its
 * messages between steps; the time it measures transit with); before every STEP event
 * the learner's step boundary (dlc_learner_step_begin) has applied what may be applied,
 * so the host's step runs on the merged model.
 *
 * Links.  Each learner has an uplink and a downlink with a one-way latency and a
 * bandwidth (bytes/s, INFINITY allowed): a message of b bytes (dlc_msg_wire_bytes)
 * leaves when the link is free, occupies it b / bandwidth seconds and arrives latency
 * later.  A CUT link holds every message sent or arriving while it is cut until it is
 * back (a stalled connection that retransmits; the syncer may time the learner out
 * meanwhile); a cut of duration INFINITY, which never ends, loses them instead (counted
 * in `dropped`: nothing is scheduled at t = +inf); a SYNCER fault loses every message to the syncer and stops its timers; a
 * killed learner loses what arrives for it.  A LINK fault changes the bandwidth, the
 * latency or both of the learner's two links while it lasts (dlc_chaos_link_at): a
 * message sent from then on takes the new ones; one already on its way keeps its own.
 * A PAUSE stops the learner where it is (a process under SIGSTOP): a step under way ends
 * the pause's length later, it starts no step, reads nothing (what arrives waits for the
 * pause's end) and says nothing (its timers wait), so the syncer only sees silence and
 * may time it out; then it goes on with its model, optimizer and counters.  Its paused
 * time counts as down_s.
 *
 * Faults (chaos.h, borrowed).  KILL: the learner stops at once (a step under way is
 * lost), the syncer sees the connection drop (dlc_syncer_lost); when it returns it
 * restarts (JOINING) and the syncer sends it the whole model; the host resets its
 * inner optimizer on the FAULT event with begin = 0.  SLOW, CUT, SYNCER, LINK as above; a
 * SYNCER fault ends with dlc_syncer_restart (the syncer restarts from its checkpoint and
 * decides itself what each learner's next message brings: syncer.h, "Restarts"), and
 * the learners that restarted meanwhile and wait for their model connect: each is
 * joined and sent the whole model.
 *
 * Fencing (msg.h) runs as in a real run, unseen: the stamps travel with the messages, a
 * restarted learner is its next incarnation (dlc_learner_restart), whose first message
 * after its join the syncer takes; a SYNCER fault keeps the syncer's epoch, as its
 * learners' connections survive here (what they sent meanwhile is lost), so nothing is
 * refused that a run without fencing would have merged.
 *
 * Accounting (docs/algorithm.md §7): useful tokens = Σ over merges of the merged
 * contributions' tokens / P; goodput = useful tokens / Σ_m (end · nominal tokens/s of
 * m); uptime = share of windows of H steps at speed 1 (one step for dp) in [0, end)
 * holding at least one merge; idle = alive time neither computing nor dead.
 */
#ifndef DILOCO_VTIME_H
#define DILOCO_VTIME_H

#include <stdint.h>
#include "account.h"
#include "chaos.h"
#include "frag.h"
#include "learner.h"
#include "msg.h"
#include "params.h"
#include "syncer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlc_vtime_island {
    double speed;      /* > 0: relative compute speed */
    double scale;      /* > 0: relative work of one step (its batch / the reference batch) */
    int64_t tokens;    /* >= 1: tokens of one inner step */
    double latency;    /* one-way seconds >= 0, both directions */
    double bandwidth;  /* bytes/s > 0, INFINITY allowed, both directions */
    double jitter;     /* >= 0: each step's time drawn around its nominal, log-normal with
                        * this coefficient of variation and mean 1 (0: every step nominal) */
} dlc_vtime_island;

typedef struct dlc_vtime_params {
    int learners;                     /* M, 1..DLC_SYNCER_LEARNERS_MAX */
    double step_time;                 /* virtual seconds of a step at speed 1, scale 1; > 0 */
    double end;                       /* > 0: no step ends after this */
    double eval_every;                /* seconds between EVAL events in (0, end]; 0 = none */
    const dlc_vtime_island *islands;  /* [M], borrowed, copied */
    dlc_learner_params learner;       /* for every learner (id set by vtime) */
    dlc_syncer_params syncer;         /* learners must be M; dp must match learner.dp */
    dlc_chaos *chaos;                 /* borrowed, must outlive the driver; NULL = none */
    uint64_t seed;                    /* of the steps' jitter (same seed, same times) */
    int final_flush;                  /* 0/1: at its last step (the next would end after
                                       * `end`) a learner sends every fragment trained
                                       * since its last apply with none in flight
                                       * (dlc_learner_flush; not dp), so the final merges
                                       * hold those steps; 0: they are not merged */
    int cores;                        /* > 0: the islands share this many cores, one compute
                                       * thread each (several learner processes on one
                                       * host): a step that starts while n learners are
                                       * computing (training, not down, waiting at a round
                                       * or done; itself included) lasts max(1, n / cores)
                                       * times its own time, so step_time is a step's time
                                       * on a core of its own; a learner's nominal rate is
                                       * then the one it reached (its tokens over its
                                       * compute seconds), as `run` measures.  0 (default):
                                       * each island on hardware of its own */
    int64_t steps;                    /* > 0: a learner trains until its schedule step
                                       * (dlc_learner_schedule_step: its steps plus the
                                       * run's step it joined at, moved on by catch-ups)
                                       * reaches this, as a real run's learners do, and
                                       * the run ends when every live learner has (one
                                       * that is down then stays down), with `end` the
                                       * latest it may last; with final_flush a learner
                                       * flushes as it stops.  0 (default): every learner
                                       * trains until `end`, a faster one more steps */
    int shards;                       /* > 1: the syncer in this many shards (docs/shards.md),
                                       * each a syncer of the fragments dlc_plan_deal gives
                                       * it, with its own rounds, versions and restarts; a
                                       * learner sends each fragment to its owner and its
                                       * heartbeats to every shard, over its one link.  A
                                       * SYNCER fault with `shard` k downs shard k only.
                                       * 0 or 1 (default): one syncer.  Not with dp */
    int standbys;                     /* 1: each shard (or the one syncer) has a standby
                                       * (docs/shards.md, "Standbys"): a SYNCER fault of role
                                       * primary downs it only for `lease`, then its standby
                                       * serves holding every merge (the shard restarts as a
                                       * fault's end restarts it), and the fault's end brings
                                       * the old primary back as the standby; role standby
                                       * leaves it without one meanwhile (learners see
                                       * nothing); role both, or a primary fault while it has
                                       * no standby, is a fault as without standbys.  0
                                       * (default): none, and a fault of role standby or both
                                       * is refused.  Not with dp.
                                       * A PAUSE of the syncer (learner -1; shard, role) stops
                                       * the shard's state machine: what reaches it is held,
                                       * in order, its timers wait, and it takes what waited
                                       * when the pause ends (nothing lost).  With a standby,
                                       * a primary's pause still under way after `lease` ends
                                       * in a takeover then (what it held is lost, counted
                                       * in `dropped`; it is the standby when its pause
                                       * ends); a standby's pause changes nothing */
    double lease;                     /* standbys: seconds before a standby takes over, >= 0 */
} dlc_vtime_params;

typedef enum dlc_vtime_event_type {
    DLC_VT_STEP,    /* host: run learner's inner step (dp: forward + backward), then
                     * dlc_vtime_step_done (dp: dlc_vtime_gradient_done) */
    DLC_VT_OPTIM,   /* dp host: the averaged gradient is in the grad arena: optimizer
                     * step, then dlc_vtime_optim_done */
    DLC_VT_MERGE,   /* the syncer merged a round: merge */
    DLC_VT_REJECT,  /* the syncer refused a contribution (learner, fragment, reason) */
    DLC_VT_FAULT,   /* a chaos fault began (begin = 1) or ended (begin = 0) */
    DLC_VT_LOST,    /* the syncer timed a learner out */
    DLC_VT_JOINED,  /* a learner the syncer had lost came back (resynced whole) */
    DLC_VT_EVAL,    /* host: evaluate the global model (dlc_vtime_global) */
    DLC_VT_DONE,    /* the run is over */
    DLC_VT_EVENT_COUNT
} dlc_vtime_event_type;
DLC_API const char *dlc_vtime_event_name(dlc_vtime_event_type t);

typedef struct dlc_vtime_event {
    dlc_vtime_event_type type;
    double time;                 /* virtual seconds */
    int learner;                 /* STEP, OPTIM, REJECT, FAULT (-1 for the syncer), LOST, JOINED */
    int64_t step;                /* STEP, OPTIM: the learner's inner step about to run (1-based,
                                  * counted since it (re)joined) */
    int64_t schedule;            /* STEP, OPTIM: its schedule step before that step (learner.h,
                                  * dlc_learner_schedule_step: the run's step it is at) */
    dlc_merge_info merge;        /* MERGE: contribs valid until the next dlc_vtime_next */
    int fragment;                /* REJECT */
    dlc_reject_reason reason;    /* REJECT */
    dlc_fault_kind fault;        /* FAULT */
    int begin;                   /* FAULT */
    double duration, factor;     /* FAULT: as scheduled */
    double bandwidth, latency;   /* FAULT of kind LINK: the learner's link from then on (bytes/s,
                                  * one-way s), its own with the LINK faults under way on top */
    int shard;                   /* with shards > 1: the shard (1-based) of a MERGE, REJECT,
                                  * LOST or JOINED, and of a SYNCER FAULT or a PAUSE of
                                  * the syncer (0: the whole syncer); 0 with one syncer */
    dlc_fault_role role;         /* a fault of the syncer: which process of it (standbys) */
} dlc_vtime_event;

typedef struct dlc_vtime dlc_vtime; /* opaque */

/* A driver over M models (models[m] borrowed, all laid out as the plan's model, must
 * outlive it) and the initial global model theta0 (borrowed, copied by the syncer).
 * Every learner joins at time 0.  NULL with DLC_ERR_ARG naming the field, or NOMEM. */
DLC_API dlc_vtime *dlc_vtime_new(const dlc_vtime_params *vp, const dlc_plan *plan, dlc_params *const *models,
                                 const float *theta0);
DLC_API void dlc_vtime_free(dlc_vtime *vt); /* NULL ok */

/* The next event for the host: 1 with *ev filled, or a negative dlc_status (a state
 * machine failed; the message names it).  DLC_ERR_STATE when a STEP or OPTIM has not
 * been answered.  After DONE every call returns DONE again. */
DLC_API int dlc_vtime_next(dlc_vtime *vt, dlc_vtime_event *ev);
/* Answers STEP: learner m's inner step ran (tokens >= 0; normally the island's). */
DLC_API dlc_status dlc_vtime_step_done(dlc_vtime *vt, int m, int64_t tokens);
/* dp, answers STEP: forward and backward ran, the gradient is in the grad arena. */
DLC_API dlc_status dlc_vtime_gradient_done(dlc_vtime *vt, int m, int64_t tokens);
/* dp, answers OPTIM: the optimizer step ran. */
DLC_API dlc_status dlc_vtime_optim_done(dlc_vtime *vt, int m);
/* A host schedule (learner.H = 0): between STEP and its answer, marks fragment p of
 * learner m to be sent when that step ends. */
DLC_API dlc_status dlc_vtime_contribute(dlc_vtime *vt, int m, int p);
/* The minimum quorum from now on (a recipe's function of the live learners). */
DLC_API dlc_status dlc_vtime_set_quorum(dlc_vtime *vt, int quorum);

/* The current global model into `arena` (laid out as the plan's model): the syncer's Θ;
 * for dp the model of the first live learner (every learner holds the same one). */
DLC_API dlc_status dlc_vtime_global(const dlc_vtime *vt, float *arena);
/* Borrowed state machines, for queries (not for events: vtime drives them). */
DLC_API const dlc_syncer *dlc_vtime_syncer(const dlc_vtime *vt); /* (shard 0 of several) */
DLC_API const dlc_syncer *dlc_vtime_shard(const dlc_vtime *vt, int k); /* 0-based; NULL out of range */
DLC_API int dlc_vtime_shards(const dlc_vtime *vt);                    /* S (1: one syncer) */
DLC_API const dlc_learner *dlc_vtime_learner(const dlc_vtime *vt, int m);
DLC_API int dlc_vtime_live(const dlc_vtime *vt, int m); /* not killed */
DLC_API int dlc_vtime_learners(const dlc_vtime *vt);    /* M */

typedef struct dlc_vtime_learner_stats {
    int64_t steps, tokens;        /* inner steps and tokens run (all incarnations) */
    double busy_s, idle_s, down_s; /* within [0, end] */
    int64_t bytes_up, bytes_down; /* link bytes sent by / to it (dropped ones included) */
    int64_t merged;               /* contributions of it that entered a merge */
    double nominal_tps;           /* tokens per virtual second at its speed, unslowed (with
                                   * cores: the rate it reached, its tokens over busy_s) */
    /* The account: every second of [0, end] in one bucket, so that useful + overwritten +
     * dropped + unsent + waiting + done + down = end.  The compute (busy_s) by the fate
     * of each step's share of each fragment (learner.h, "the account"): useful (merged,
     * dlc_syncer_merged_steps of the steps it sent, and the alpha kept of the
     * overwritten), overwritten (replaced by a merge applied after its last send),
     * dropped (sent and never merged, discarded by a kill, and what ran of a step a kill
     * cut short), unsent (trained and in no contribution at the end: sync.final_flush
     * sends them); idle_s = waiting (blocked on a round, joining) + done (ready, but no
     * further step fits before `end`).  Compute seconds are split by steps: exact with
     * steps of equal length, close under SLOW faults. */
    double useful_s, overwritten_s, dropped_s, unsent_s, waiting_s, done_s;
    double sent_steps, merged_steps; /* learner.h, syncer.h: steps / P per fragment */
} dlc_vtime_learner_stats;

typedef struct dlc_vtime_stats {
    double now, end;
    int64_t merges, rejects, faults;
    int64_t bytes_up, bytes_down;                 /* all links, link bytes */
    int64_t bytes_up_type[DLC_MSG_TYPE_COUNT];    /* by message type */
    int64_t bytes_down_type[DLC_MSG_TYPE_COUNT];
    int64_t dropped;                              /* messages lost to faults */
    int64_t takeovers;                            /* standbys that took over */
    double useful_tokens, goodput, uptime;
    int learners;
    const dlc_vtime_learner_stats *learner;       /* [M], borrowed until the next call */
} dlc_vtime_stats;

DLC_API dlc_status dlc_vtime_get_stats(dlc_vtime *vt, dlc_vtime_stats *st);
/* The run's account (account.h) that the stats above read: islands' states, their work
 * as of the last dlc_vtime_get_stats, the merges.  Borrowed, valid until dlc_vtime_free. */
DLC_API const dlc_account *dlc_vtime_account(const dlc_vtime *vt);

#ifdef __cplusplus
}
#endif
#endif
