/*
 * syncer.h - the syncer of Decoupled DiLoCo as a sans-IO state machine (docs/algorithm.md
 * §4.2-§4.7, §5): the global parameters Θ per fragment with their outer optimizer and
 * version ring (outer.h), one round per fragment, the minimum quorum K, the adaptive
 * grace window, token weighting, RDA or mean merging (merge.h), resyncs.  It never
 * touches a socket, a thread or a clock: the driver passes the time in, delivers
 * messages, asks for the next deadline, and performs the actions it returns.
 *
 *     dlc_syncer_params sp = dlc_syncer_default_params();     // decoupled: K = 1, adaptive grace
 *     sp.learners = 4;
 *     dlc_syncer *s = dlc_syncer_new(&sp, plan, dlc_params_data(model));  // Θ0 copied
 *     dlc_syncer_join(s, 0, now);                              // learner 0: full model out
 *     dlc_syncer_receive(s, &msg, now);                        // contributions, heartbeats
 *     dlc_syncer_handle_expiry(s, now);                        // at dlc_syncer_expiry(s)
 *     dlc_syncer_action a;
 *     while (dlc_syncer_poll(s, &a)) switch (a.type) { case DLC_SACT_SEND: ... }
 *
 * A round of fragment p (state per fragment, below) takes at most one contribution per
 * learner.  Each arriving contribution is checked at once: its payload must decode to
 * finite values (else it is rejected and the learner resynced) and its base version must
 * be in the ring (else it is dropped and the learner resynced); a contribution with no
 * steps is ignored.  A contribution that passes is re-anchored at the current Θ_p and
 * added to the round's merge accumulator as it arrives (in arrival order; none is
 * stored, so memory does not grow with the learners), and it stays in its round when its
 * learner is lost or restarts before the round closes (it counts towards the quorum; the
 * round stops waiting for that learner).  A learner that sends p again while its earlier
 * contribution is in p's open round has the newer one held (its encoded bytes; a still
 * newer one replaces it; dlc_syncer_held counts them) until the round closes, when it
 * opens p's next round, re-anchored there like any late contribution (dropped and its
 * learner resynced if its base has left the ring by then).  When
 * the round holds K contributions (K = DLC_QUORUM_ALL: every live learner) it waits
 * for the grace window g, cut short as soon as every live learner has sent ("every live
 * learner" of a round: those live when it opened; one that joins during a round takes
 * part from the next):
 *   grace ADAPTIVE  g = clamp(γ·(τ·ξ_step − ξ_quorum − ξ_sync), 0, ξ_step)
 *                   ξ_step = median over live learners of their reported step time,
 *                   ξ_sync = median of their reported transit time (msg.h), ξ_quorum =
 *                   EMA of the time from a round's first contribution to its quorum;
 *   grace OFF       g = 0;  grace FIXED  g = grace_s.
 * (A round whose contributions all weigh 0 — no tokens — merges nothing; its senders get
 * the current Θ_p back, flagged DLC_MSG_RESYNC, so none stays blocked on it.)
 * Each contribution was weighted as it came (uniform 1, tokens c_tokens, tokens2_steps
 * c_tokens²/c_steps); at the close the merge is finished, the outer step is taken,
 * the version moves on, and Θ_p (codec_down) goes to every live learner.  In data parallel (dp = 1) the round is one step's GRADIENTs of every live
 * learner, averaged and sent back as GRADIENT_AVG, with no outer step (a second
 * GRADIENT of the same step from a learner adds nothing: its first is in).  A GRADIENT counts
 * in the round of its step (`version`): the open round's or, when none is open, the next
 * one's (1 + the rounds closed).  One for the round that closed last gets that round's
 * average back, to its sender alone (it was on the way when the round closed); any other
 * is refused with DLC_ERR_FORMAT naming the step expected, a REJECTED action and a
 * resync.  A dp resync (a join too) carries the run's step in `steps` (the rounds
 * closed), from which the learner counts its next step.  A GRADIENT of no tokens is void
 * (its sender's step went non-finite): it weighs 0, left out of the average, which its
 * sender still gets; a round of void gradients alone averages nothing and resyncs each
 * sender at the run's step, to run that step again.  A learner that asks for a
 * replay (below) is not awaited in the rounds until its next gradient: the others do not
 * wait while it catches up.
 *
 * Replay (dp): the syncer keeps the newest `dp_history` averages.  A REPLAY with version
 * k from a live learner is answered with the averages of steps k+1, k+2, ... it holds (up
 * to DLC_SYNCER_REPLAY_BYTES, at least one), to that learner alone, each with `steps` =
 * the last step of the answer; the learner applies them through its own optimizer and
 * holds the model the others hold (learner.h, "Replay").  When it holds none after k
 * (k is the run's step, or the history was lost in a restart), the answer is a resync
 * of the model with the run's step; when its oldest is past k + 1 the answer starts
 * there (the learner sees the gap).
 *
 * Liveness: join (a new or restarted learner; it gets the full model as P FRAGMENTs
 * flagged DLC_MSG_RESYNC, carrying the run's schedule step: the median of the other live
 * learners' heartbeats), lost (the driver saw it die: its contributions stay in the open
 * rounds, which stop waiting for it), and, with `timeout` > 0, silence for `timeout` seconds (action LOST).  A
 * message from a learner that is not live makes it join again (action JOINED, full
 * resync; the message itself is dropped), except a BYE, which is ignored.
 *
 * Restarts: dlc_syncer_load gives a new incarnation of the syncer: its epoch the saved one
 * + 1, or params.epoch when that is larger (a driver that knows of later incarnations
 * which died before they saved, from a record it bumps at every start, passes the next
 * one: no two incarnations stamp one epoch); Θ, momentum, versions, rings, the estimates and the per-learner counters (the
 * learners' incarnations among them) as saved; no open round (their contributions are
 * lost).  dlc_syncer_restart does the same in memory but keeps the epoch: it models a
 * restart whose learners' connections survive (vtime.h).  Every learner is "unheard"
 * until its first message the fencing below lets through; the live ones stay live (the
 * rounds count on them as before), their timeouts counted from the load.  After a load
 * what a learner stamped with the old epoch is fenced: the first such message brings it
 * the whole model with the new epoch, and none is merged.  A message that passes (no
 * epoch stamped, or after dlc_syncer_restart) is used as any other without blocking: a
 * contribution whose base version the ring holds is merged, one it does not hold is
 * rejected as stale and the fragment resynced.  With blocking (dp aside) the learner may
 * wait for a round the restart dropped, which nothing would end: its first message is
 * not used but answered with the whole model (action JOINED, P FRAGMENTs flagged RESYNC,
 * counters kept); a BYE still leaves.  A learner that restarted meanwhile and only waits
 * for its model says nothing: the driver joins it when it connects.
 *
 * Fencing (msg.h).  The syncer stamps its epoch (params.epoch, one per syncer process: a
 * syncer restarted from its checkpoint is made with a later epoch) on everything it
 * sends, and records each learner's latest incarnation from the messages it stamps.
 *   - a message from an OLDER incarnation than the one recorded (a previous process of
 *     that learner) is refused with DLC_ERR_FORMAT, never merged, and the learner is
 *     resynced (a contribution or gradient also makes a REJECTED action, reason
 *     INCARNATION; a BYE is refused alone);
 *   - a message from a NEWER incarnation while the learner is live is a restart: action
 *     JOINED and a full resync, as a rejoin (the message itself is dropped); after a
 *     dlc_syncer_join, though, the learner's next message tells its incarnation and is
 *     taken (the join has resynced it already);
 *   - a message stamped with another EPOCH than the syncer's (the learner talked to a
 *     previous syncer incarnation, or to a later one) is refused with DLC_ERR_FORMAT,
 *     never merged, and the learner is resynced, with this epoch (REJECTED, reason
 *     EPOCH, for a contribution or gradient);
 *   - epoch or incarnation 0 (not stamped: an older peer, or a learner that has not heard
 *     from a syncer yet) is not fenced.
 * A learner resynced for a fenced message is not resynced again for the next ones it sent
 * before the resync reached it (refused alone), until a message of it is taken.  What the
 * syncer sends carries the incarnation it holds for the destination (0 while it waits to
 * learn it after a join).  dlc_syncer_restart keeps the epoch: it models a
 * restart whose learners' connections survive (vtime.h), not a new syncer process.
 *
 * Memory: per fragment the ring (R copies), momentum and a merge accumulator, into which
 * a contribution is decoded, re-anchored and added in one pass as it arrives (no decoded
 * copy; the merged Δ is finished in the accumulator itself); the encoded bytes of at most
 * one held contribution per learner (a second one to an open round); and, with a bf16
 * downlink, the encoded Θ_p to send (an f32 one goes from the ring's slots).  Nothing
 * grows with the number of learners, and no other fragment-sized buffer is kept.
 */
#ifndef DILOCO_SYNCER_H
#define DILOCO_SYNCER_H

#include <stdint.h>
#include "codec.h"
#include "frag.h"
#include "merge.h"
#include "msg.h"
#include "outer.h"
#include "policy.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The states of one fragment's round.  Legal transitions (asserted by set_round_state):
 *   IDLE       -> COLLECTING (a first contribution, below the quorum)
 *              -> GRACE      (a first contribution that is the quorum, K = 1)
 *   COLLECTING -> GRACE      (quorum reached)
 *              -> IDLE       (its contributions left with lost learners; or a flush)
 *   GRACE      -> IDLE       (merged: grace over, every live learner sent, or a flush)
 *              -> COLLECTING (lost learners took it below the quorum) */
typedef enum dlc_round_state {
    DLC_ROUND_IDLE,       /* no contribution yet */
    DLC_ROUND_COLLECTING, /* fewer than K */
    DLC_ROUND_GRACE,      /* K or more: waiting for the grace deadline or the last live learner */
    DLC_ROUND_STATE_COUNT
} dlc_round_state;
DLC_API const char *dlc_round_state_name(dlc_round_state s); /* "idle", "collecting", "grace" */

/* dlc_grace_mode, dlc_weighting and DLC_QUORUM_ALL: policy.h */
#define DLC_SYNCER_LEARNERS_MAX 4096

typedef struct dlc_syncer_params {
    int learners;                /* M: learner ids 0..M-1, 1..DLC_SYNCER_LEARNERS_MAX */
    int dp;                      /* 0/1: data parallel rounds of gradients */
    int quorum;                  /* K >= 1, or DLC_QUORUM_ALL */
    dlc_grace_mode grace;
    double grace_s;              /* FIXED: seconds >= 0 */
    double grace_gamma;          /* γ in (0, 1] */
    double ema;                  /* (0, 1]: weight of a new ξ_quorum sample */
    int tau;                     /* the learners' overlap (steps), for ADAPTIVE */
    dlc_weighting weighting;
    dlc_merge_mode merge;
    dlc_fragstate_params outer;  /* outer optimizer and ring R */
    dlc_codec_kind codec_up;     /* contributions' codec (and block) */
    dlc_codec_params codec_params;
    dlc_codec_kind codec_down;   /* FRAGMENT codec: f32 or bf16 (f32: sent from the
                                  * version ring itself, no encoded copy) */
    const uint8_t *embedding;    /* per tensor of the model (plan tensor index): nonzero =
                                  * weighted mean under RDA; NULL = none (borrowed, copied) */
    double timeout;              /* seconds of silence that make a learner lost, 0 = never */
    int blocking;                /* 0/1: the learners block for their merges (sync.blocking).
                                  * With several fragments a rejoined learner is then awaited
                                  * in fragment p's rounds only once it has sent p again: its
                                  * schedule may reach another fragment first, for whose round
                                  * the others, blocked here, would never come (a deadlock) */
    int64_t epoch;               /* >= 1: the epoch this syncer incarnation stamps on what it
                                  * sends (a restarted syncer process takes a later one) */
    int dp_history;              /* dp: the newest averaged gradients kept for REPLAY, >= 0;
                                  * 0: as many as DLC_SYNCER_DP_HISTORY_BYTES hold, 8..1024 */
    const uint8_t *owns;         /* a shard of a sharded syncer (docs/shards.md): per fragment,
                                  * nonzero = this syncer owns it (at least one; borrowed during
                                  * dlc_syncer_new and dlc_syncer_load, copied).  It holds and
                                  * merges only those: a fragment it does not own has no Θ,
                                  * ring or round here (theta NULL, version -1), a join sends
                                  * only the owned ones, a contribution to another is refused
                                  * (DLC_ERR_FORMAT, REJECTED malformed, no resync), the
                                  * checkpoint keeps only the owned ones.  NULL: every fragment
                                  * (one syncer).  Not with dp */
} dlc_syncer_params;

/* dp_history 0: the averages kept fill up to this many bytes (within 8..1024 steps). */
#define DLC_SYNCER_DP_HISTORY_BYTES (512ll << 20)
/* Most bytes of averages one REPLAY is answered with (at least one step): the learner
 * asks again for the rest, so a catch-up never floods the connection's send queue. */
#define DLC_SYNCER_REPLAY_BYTES (32ll << 20)

/* Decoupled defaults: M = 1, K = 1, adaptive grace γ 0.8, ema 0.5, τ 2, tokens2_steps, RDA,
 * Nesterov 0.7 / 0.9 with R = 4, f32 up and down, no embeddings, no timeout, epoch 1. */
DLC_API dlc_syncer_params dlc_syncer_default_params(void);
DLC_API dlc_status dlc_syncer_params_check(const dlc_syncer_params *p);

typedef struct dlc_syncer dlc_syncer; /* opaque */

/* A syncer whose Θ^(0) is `theta0`: an arena laid out as the plan's model (the plan's
 * view offsets address it; borrowed, copied).  plan is borrowed and must outlive the
 * syncer; dp needs a plan of one fragment.  No learner is live yet.  NULL with
 * DLC_ERR_ARG (bad params, non-finite theta0 named) or DLC_ERR_NOMEM. */
DLC_API dlc_syncer *dlc_syncer_new(const dlc_syncer_params *sp, const dlc_plan *plan, const float *theta0);
DLC_API void dlc_syncer_free(dlc_syncer *s); /* NULL ok */

/* ---- events: each queues actions, read with dlc_syncer_poll ----
 *
 * No silent loss: every event call below is refused with DLC_ERR_STATE, changing nothing,
 * while actions of an earlier call are still queued ("the syncer has 4 unpolled
 * actions"); a driver polls until dlc_syncer_poll returns 0 after every call, whatever
 * the call returned (a refused contribution still queues its REJECTED and resync).  The
 * payloads of SENDs (several SENDs of one call may share one buffer) and a MERGED
 * action's contribs point into the syncer: valid from the poll until its next accepted
 * event call.  Calls into one syncer must not overlap (it has no lock). */

/* Learner m joins (or rejoins): live, and sent the full model.  Its next stamped message
 * tells its incarnation, taken as it is if not older than the one recorded (fencing). */
DLC_API dlc_status dlc_syncer_join(dlc_syncer *s, int m, double now);
/* Learner m is gone: not live; its contributions stay in the open rounds, which stop
 * waiting for it and may then merge (every remaining live learner has sent). */
DLC_API dlc_status dlc_syncer_lost(dlc_syncer *s, int m, double now);
/* A message from a learner (CONTRIBUTION, GRADIENT, HEARTBEAT, BYE; borrowed for the
 * call).  A malformed one is refused with DLC_ERR_FORMAT naming what was wrong (and a
 * contribution that cannot be merged leads to a REJECTED action and a resync); the
 * syncer is then exactly as before apart from that. */
DLC_API dlc_status dlc_syncer_receive(dlc_syncer *s, const dlc_msg *m, double now);
/* The earliest time dlc_syncer_handle_expiry wants to be called (INFINITY: none). */
DLC_API double dlc_syncer_expiry(const dlc_syncer *s);
/* Grace deadlines and timeouts due at `now`. */
DLC_API dlc_status dlc_syncer_handle_expiry(dlc_syncer *s, double now);
/* The minimum quorum changes (a recipe's quorum function of the live learners): open
 * rounds are re-checked. */
DLC_API dlc_status dlc_syncer_set_quorum(dlc_syncer *s, int quorum, double now);
/* Manual rounds (on = 1): a round then closes only by dlc_syncer_flush, never by its
 * quorum, its grace deadline or its last live learner; quorum and grace are still
 * computed.  For a driver that decides itself which contributions each merge takes
 * (`sim --replay` re-executing a recorded run, lua/diloco/replay.lua).  Queues nothing. */
DLC_API dlc_status dlc_syncer_set_manual(dlc_syncer *s, int on);
/* Merges every open round that holds a contribution, quorum or not (the end of a run). */
DLC_API dlc_status dlc_syncer_flush(dlc_syncer *s, double now);
/* The syncer restarted from a checkpoint of this instant (what save then load would
 * give, epoch aside): open rounds dropped, Θ, momentum, versions and rings kept, every
 * learner unheard ("Restarts" above), every live learner's timeout counted from `now`. */
DLC_API dlc_status dlc_syncer_restart(dlc_syncer *s, double now);

/* ---- actions ---- */

typedef enum dlc_syncer_action_type {
    DLC_SACT_SEND,     /* send msg to learner msg.learner */
    DLC_SACT_MERGED,   /* a round closed: merge (below) */
    DLC_SACT_REJECTED, /* a contribution was not merged: learner, fragment, reason */
    DLC_SACT_JOINED,   /* learner (re)joined: learner */
    DLC_SACT_LOST,     /* learner timed out: learner */
    DLC_SACT_REPLICATE,/* replicated (dlc_syncer_set_replicated): fragment `fragment` merged
                        * into version merge.version, held back from learners until the
                        * standby acknowledges it (dlc_syncer_replica, _replica_acked) */
    DLC_SACT_TYPE_COUNT
} dlc_syncer_action_type;

typedef enum dlc_reject_reason {
    DLC_REJECT_STALE,     /* base version older than the ring */
    DLC_REJECT_NONFINITE, /* payload decodes to NaN/Inf */
    DLC_REJECT_MALFORMED, /* wrong size, codec or fragment */
    DLC_REJECT_EPOCH,     /* stamped with another syncer epoch (fencing, above) */
    DLC_REJECT_INCARNATION, /* from an older incarnation of the learner (fencing) */
    DLC_REJECT_REASON_COUNT
} dlc_reject_reason;
/* "stale", "nonfinite", "malformed", "epoch", "incarnation" */
DLC_API const char *dlc_reject_reason_name(dlc_reject_reason r);

typedef struct dlc_merge_contrib {
    int learner;
    double weight;           /* as used (before normalisation) */
    int64_t base_version, staleness; /* staleness = version merged into − base version; dp:
                                      * base_version is the gradient's step, staleness 0 */
    int64_t steps, tokens;
    int64_t incarnation;     /* the sender's incarnation recorded at the merge (0: unstamped) */
    double arrived;          /* time it arrived */
} dlc_merge_contrib;

typedef struct dlc_merge_info {
    int fragment;
    int64_t version;         /* the new version (dp: the step) */
    int count;               /* contributions merged */
    const dlc_merge_contrib *contribs; /* count entries in the order they arrived (the
                                        * order of the sums: a replay feeds them so);
                                        * owned by the syncer, valid as a SEND's payload */
    int live;                /* live learners at the merge */
    int quorum;              /* the K in force */
    double opened;           /* first contribution's arrival */
    double quorum_at;        /* when K was reached (= now for a flush below K) */
    double grace;            /* the window chosen at quorum (s) */
    double waited;           /* now − quorum_at */
    int all_sent;            /* 1: cut short because every live learner had sent */
    int flushed;             /* 1: by dlc_syncer_flush */
    int64_t bytes_in;        /* payload bytes of the merged contributions */
    int64_t bytes_out;       /* payload bytes sent (the encoded Θ_p × live learners) */
    double useful_tokens;    /* Σ c_tokens / P of the merged contributions (§7) */
    int replica;             /* 1: a standby's record of a merge its primary made and
                              * replicated to it (rt.h, standby_of); the fields the replica
                              * does not carry (grace, waited, live, quorum, bytes, weights,
                              * arrivals) are 0 */
} dlc_merge_info;

/* The buffer of an encoded fragment the syncer sends (a SEND's `owner`).  The syncer
 * encodes each version of Θ_p into one and keeps it while it can; a driver that sends the
 * payload later than the syncer's next event call (a frame queued behind others, a
 * learner whose link is slow) takes a reference instead of copying the bytes, and drops
 * it once they are written.  The syncer never writes into a buffer a driver holds: the
 * next version goes into a new one.  References may be dropped from any thread. */
typedef struct dlc_payload dlc_payload;
DLC_API dlc_payload *dlc_payload_ref(dlc_payload *p); /* returns p */
DLC_API void dlc_payload_unref(dlc_payload *p);        /* NULL ok */

typedef struct dlc_syncer_action {
    dlc_syncer_action_type type;
    dlc_msg msg;             /* SEND: payload owned by the syncer, valid until its next
                              * accepted event call (above), or for as long as the driver
                              * holds a reference to `owner` */
    dlc_payload *owner;      /* SEND of a FRAGMENT: the buffer msg.payload lies in (not a
                              * reference: dlc_payload_ref it to keep it); NULL otherwise */
    dlc_merge_info merge;    /* MERGED */
    int learner, fragment;   /* REJECTED, JOINED, LOST; REPLICATE: fragment */
    dlc_reject_reason reason;/* REJECTED */
} dlc_syncer_action;

/* Pops the oldest queued action into *a: 1, or 0 when there is none. */
DLC_API int dlc_syncer_poll(dlc_syncer *s, dlc_syncer_action *a);
/* Actions queued and not yet polled (0 for NULL): an event call needs 0. */
DLC_API int dlc_syncer_pending(const dlc_syncer *s);

/* ---- queries ---- */

DLC_API int dlc_syncer_fragments(const dlc_syncer *s);
/* 1 when this syncer owns fragment p (every fragment unless a shard: params.owns). */
DLC_API int dlc_syncer_owns(const dlc_syncer *s, int p);
DLC_API int64_t dlc_syncer_version(const dlc_syncer *s, int p);
DLC_API dlc_round_state dlc_syncer_round_state(const dlc_syncer *s, int p);
/* Contributions in fragment p's open round. */
DLC_API int dlc_syncer_round_count(const dlc_syncer *s, int p);
DLC_API int dlc_syncer_live(const dlc_syncer *s);   /* live learners */
DLC_API int dlc_syncer_is_live(const dlc_syncer *s, int m);
/* The current global fragment p (its floats in payload order), borrowed until the next
 * event. */
DLC_API const float *dlc_syncer_theta(const dlc_syncer *s, int p);
/* Writes the current global model into `arena` (laid out as the plan's model); a shard
 * writes only the fragments it owns, leaving the rest of the arena as it was. */
DLC_API dlc_status dlc_syncer_copy_model(const dlc_syncer *s, float *arena);
/* The adaptive-grace estimates (s): ξ_step, ξ_quorum, ξ_sync. */
DLC_API void dlc_syncer_estimates(const dlc_syncer *s, double *step, double *quorum, double *sync);
/* The epoch it stamps (params.epoch, or the saved one + 1 after a load; 0 for NULL). */
DLC_API int64_t dlc_syncer_epoch(const dlc_syncer *s);
/* The latest incarnation of learner m it has seen stamped (0: none yet, or m out of range). */
DLC_API int64_t dlc_syncer_incarnation(const dlc_syncer *s, int m);
/* Contributions of learner m merged over the run (kept by save/load); 0 out of range. */
DLC_API int64_t dlc_syncer_merged(const dlc_syncer *s, int m);
/* Contributions held for their fragment's next round (above), since made or loaded. */
DLC_API int64_t dlc_syncer_held(const dlc_syncer *s);
/* The account (learner.h): learner m's steps that entered merges, each step 1/P per
 * fragment (dp: whole steps), counted once: a contribution sent from the same base as
 * one of its earlier merged ones (a learner that sends p again before a merge of p came
 * back, across a cut or a syncer restart, carries the steps of both) adds only its steps
 * past that one; the merge's useful_tokens count the same way.  Since the syncer was
 * made or loaded (not checkpointed). */
DLC_API double dlc_syncer_merged_steps(const dlc_syncer *s, int m);
/* 1 while m is live but not heard from since a restart or a load ("Restarts" above). */
DLC_API int dlc_syncer_is_unheard(const dlc_syncer *s, int m);
/* A table the driver fills and the checkpoint keeps: learner m's data shard (-1 = none,
 * the default; the syncer never reads it).  set: DLC_ERR_RANGE for m, DLC_ERR_ARG for
 * shard < -1. */
DLC_API dlc_status dlc_syncer_set_shard(dlc_syncer *s, int m, int64_t shard);
DLC_API int64_t dlc_syncer_shard(const dlc_syncer *s, int m);

/* ---- replication (docs/shards.md, "Standbys") ----
 *
 * A standby is a syncer made with the same params, plan and Θ0 as its primary (or loaded
 * from the same checkpoint) that takes, for every merge of the primary, what the merge
 * changed: fragment p's new version, its Θ_p and outer momentum, and the account of the
 * merge's contributors.  It then holds the primary's global state bit for bit (Θ, ring,
 * momentum, versions, each learner's merged contributions and steps), so that it can
 * serve the learners in the primary's place: contributions from any base in the ring
 * merge on it as they would have on the primary.  Open rounds, held contributions and the
 * grace estimates are not replicated (a round in flight when the primary is lost is sent
 * again by its learners).  Not in data parallel. */
typedef struct dlc_replica_contrib {
    int learner;
    double new_steps;           /* the steps the merge added to its account (1/P each) */
    int64_t base_version, steps, tokens; /* its contribution's, as sent */
} dlc_replica_contrib;
typedef struct dlc_replica {
    int fragment;
    int64_t version;            /* the version the merge made */
    const float *theta;         /* n floats: Θ_p of that version */
    const float *momentum;      /* n floats, NULL without outer momentum */
    int64_t n;
    int count;                  /* contributors, in the merge's order */
    const dlc_replica_contrib *contribs;
    double useful_tokens;       /* the merge's (dlc_merge_info), 0 in a whole replica */
    int whole;                  /* 1: a catch-up, not a merge: fragment p as it is at
                                 * `version` (any version >= 0; count 0), for a standby
                                 * that attached behind its primary */
} dlc_replica;
/* The primary: what a standby needs of fragment p's latest merge, into *out (after its
 * DLC_SACT_MERGED, or its DLC_SACT_REPLICATE when replicated); everything it points to
 * is the syncer's, valid until its next event call, and while replicated until the
 * merge is acknowledged.  DLC_ERR_STATE when p's latest round merged nothing, or in dp.
 * whole = 1: p as it is now, as a catch-up replica (count 0), whatever merged last. */
DLC_API dlc_status dlc_syncer_replica_of(dlc_syncer *s, int p, int whole, dlc_replica *out);
DLC_API dlc_status dlc_syncer_replica(dlc_syncer *s, int p, dlc_replica *out);
/* The standby: takes the replica of the primary's next merge of its fragment (borrowed for
 * the call).  Refused, changing nothing: DLC_ERR_STATE for a version that is not the next
 * one it holds (a replica lost or repeated: named with both versions), DLC_ERR_ARG for a
 * fragment it does not own, a size or momentum that is not its own, or non-finite values.
 * A whole replica (r->whole) sets the fragment to that version, its ring reset to it (as
 * a checkpoint's load does), whatever it held.  Queues no action. */
DLC_API dlc_status dlc_syncer_replicate(dlc_syncer *s, const dlc_replica *r, double now);

/* The primary with a standby attached (on = 1): from now on a merge of fragment p is
 * held back (no FRAGMENT to learners, no DLC_SACT_MERGED) and DLC_SACT_REPLICATE is
 * queued in their place; dlc_syncer_replica_acked(p, v) releases them once the standby
 * holds version v.  Meanwhile p's next round collects but does not close, and what p
 * would send a learner (a join's, a resync's) waits for the same acknowledgement and
 * then goes once, as that learner's copy of version v (a resync stays a resync).  So no
 * learner ever holds a version its standby does not: a primary lost at any moment loses
 * no merge a learner has seen.  on = 0 (the standby lost): every merge held back is
 * released now, and merges go at once again.  DLC_ERR_ARG in dp. */
DLC_API dlc_status dlc_syncer_set_replicated(dlc_syncer *s, int on, double now);
DLC_API int dlc_syncer_replicated(const dlc_syncer *s);
/* The version of fragment p held back for its standby's acknowledgement, -1 none. */
DLC_API int64_t dlc_syncer_awaiting(const dlc_syncer *s, int p);
/* The standby acknowledged fragment p's version: what the merge held back goes (its
 * sends, then DLC_SACT_MERGED), and p's next round may close.  DLC_ERR_STATE for a
 * version that is not the one held back (named with both; nothing changes). */
DLC_API dlc_status dlc_syncer_replica_acked(dlc_syncer *s, int p, int64_t version, double now);
/* A standby taking its primary's place: it stamps `epoch` from now on (> its own and the
 * primary's: fencing), and takes what learners stamped with the primary's epoch
 * `prev_epoch` as its own (it holds every version they can have seen: set_replicated
 * above), so their contributions in flight merge here instead of being fenced.  Every
 * learner is not live (they join the standby as they reconnect).  DLC_ERR_ARG for an
 * epoch not above both. */
DLC_API dlc_status dlc_syncer_take_over(dlc_syncer *s, int64_t epoch, int64_t prev_epoch, double now);

/* ---- checkpoint (core/syncer_state.c; keys and rules: docs/checkpoints.md) ---- */

/* Writes s's state to `path` through the atomic safetensors writer (ckpt.h: a temporary
 * file, fsync, rename; a failed save leaves the previous file as it was): Θ, momentum and
 * ring of every fragment, versions, the grace estimate ξ_quorum, the per-learner counters
 * (live, joined before, schedule step, step and transit EMAs, fragments sent since
 * joining, contributions merged, shard, latest incarnation), the epoch, the model and
 * plan hashes.  Open
 * rounds are not saved (docs/checkpoints.md says why).  `now` is the driver's time, so
 * the age of each fragment's latest round survives a change of clock.  The n_meta
 * pairs (borrowed; may be 0 and NULL) are the driver's own (a run id, the recipe as
 * JSON): keys may not be "format" or start with "syncer."; read them back with
 * dlc_safetensors_open and dlc_safetensors_meta.  DLC_OK, DLC_ERR_ARG (a bad argument or
 * key, named; nothing written), DLC_ERR_IO or DLC_ERR_NOMEM. */
DLC_API dlc_status dlc_syncer_save(const dlc_syncer *s, const char *path, double now, int n_meta,
                                   const char *const *meta_keys, const char *const *meta_values);

/* A syncer restored from `path` for params sp and plan (borrowed as dlc_syncer_new
 * borrows them): its epoch is the saved epoch + 1 (sp->epoch is not used), the quorum and
 * every other setting are sp's, the state is the file's, timers start at `now`, every
 * learner is unheard ("Restarts" above).  The file is validated before anything is made
 * of it: format, learners, fragments, dp, model hash, plan hash, each fragment's size
 * against sp and plan, every tensor's dtype (F32), shape and finiteness, every counter's
 * range; errors name the key and both values ("syncer.learners = 4 in the file, 3 in
 * the params").  A ring larger than sp's R keeps its newest versions.  NULL with
 * DLC_ERR_IO (cannot read), DLC_ERR_FORMAT (truncated, corrupt or not this run's
 * checkpoint), DLC_ERR_ARG (bad sp or plan) or DLC_ERR_NOMEM; the caller frees. */
DLC_API dlc_syncer *dlc_syncer_load(const char *path, const dlc_syncer_params *sp, const dlc_plan *plan,
                                    double now);

#ifdef __cplusplus
}
#endif
#endif
