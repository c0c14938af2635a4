/*
 * learner.h - one learner (island) of Decoupled DiLoCo as a sans-IO state machine
 * (docs/algorithm.md §4.1, §5).  It never touches a socket, a thread or a clock: the driver
 * (vtime.h in one process, the network runtime later, or a C host) runs the inner steps,
 * passes the time in, delivers messages and performs the actions it returns.
 *
 * The learner borrows the model's parameter arena (params.h) and the fragment plan
 * (frag.h); both must outlive it.  It writes the arena only at a step boundary, inside
 * dlc_learner_step_begin and dlc_learner_step_done, which the driver calls between inner
 * steps (and while JOINING, when it does not step): applying a merged fragment (mixing
 * θ = α·θ + (1 − α)·Θ).  dlc_learner_receive never writes the model: it checks a
 * FRAGMENT and stashes it, so a driver may deliver messages while an inner step runs on
 * the arena (its calls into the learner still must not overlap).  In data parallel
 * dlc_learner_receive writes the averaged gradient into the grad arena, only while
 * WAITING for it (after dlc_learner_gradient, before the optimizer step).  It owns: the
 * last global value Θ̂ of every fragment it received (one copy of the model), the
 * fragments that arrived and wait to be applied (a second copy, allocated at the first
 * such merge; none when the driver lends them, dlc_learner_receive_lent), the encoded
 * contribution of each fragment (its encoded size; none with defer_encode), and with
 * error feedback one more copy.
 *
 *     dlc_learner_params lp = dlc_learner_default_params();
 *     lp.id = 2; lp.H = 24; lp.tau = 2;
 *     dlc_learner *l = dlc_learner_new(&lp, params, plan);      // state JOINING
 *     // the syncer's full model arrives as P FRAGMENT messages flagged DLC_MSG_RESYNC:
 *     dlc_learner_receive(l, &msg, now);                        // -> TRAINING
 *     dlc_learner_action a;
 *     while (dlc_learner_state_of(l) == DLC_LEARNER_TRAINING) {
 *         dlc_learner_step_begin(l, now);                       // may apply fragments
 *         while (dlc_learner_poll(l, &a)) {}                    // APPLIED
 *         run one inner step (forward, backward, optimizer) on params;
 *         // meanwhile messages may arrive: dlc_learner_receive stashes them
 *         dlc_learner_step_done(l, tokens, step_seconds, now);  // sends, applies
 *         while (dlc_learner_poll(l, &a)) if (a.type == DLC_LACT_SEND) send a.msg;
 *     }
 *     // WAITING: deliver messages until the state is TRAINING again, then step_begin;
 *     // timers: call dlc_learner_handle_expiry(l, now) at dlc_learner_expiry(l)
 *
 * Schedule: fragment p (0-based, P fragments) is due after inner step t when t >= off_p
 * and (t − off_p) mod H == 0, with off_p = floor(p·H / P) and t the schedule step: the
 * steps since the learner (re)joined plus the phase its resync carried (the run's
 * schedule step, 0 at the start), so a learner that rejoins syncs in step with the
 * others; H = 0 turns the built-in schedule off and the driver calls
 * dlc_learner_contribute itself (a recipe's own schedule).  A contribution is the
 * encoded outer gradient Θ̂_p − θ_p with the base version and the steps and tokens
 * counted since fragment p was last received.
 *
 * Catching up.  Learners at slightly different speeds drift out of phase, and a round
 * that closes before a late learner's contribution arrives splits in two.  Each merge of
 * fragment p tells the learner how far its sends leave after those of the round's first
 * contributor, in steps of its own step time:
 * - it sent nothing to the round (a merge of p that it has not sent since it last
 *   applied p; its own contribution would leave later, after a merge that replaces its
 *   copy, α = 0, and so carry little): the round's first contribution left `held` plus
 *   its measured transit ago, and its own p is due d steps on, counted from where it is
 *   within its current step;
 * - its contribution was in the round (`age` > 0): it arrived `age` − `held` after the
 *   first;
 * - its contribution missed the round (sent, no `age`): it left that long after the
 *   round's first, `held` + transit before the merge arrived.
 * When that lag, rounded so that the learner lands at most a quarter step ahead of the
 * first contributor (one that overshot would lead, and the one it passed would move in
 * turn), is 1 to H/2 steps, the learner moves its schedule step on by it (never back: the
 * slower ones catch up with the faster), so its next sends leave with theirs; action
 * PHASE; at most once every H/P steps it trains (a move shows in the next fragment's
 * round), and by at most one step in 8 it trains beyond the H/2 it may move at any time
 * (a move waits until it is within that budget).  Learners whose speeds differ by a few
 * percent stay in phase; one lastingly slower (an island at half the others' speed,
 * late at every round however often it moves) keeps its own schedule and contributes
 * every step it trains, where moving it on and on would cut every contribution short and
 * split the others' rounds.  Blocking rounds wait for everyone: there only the first
 * case applies.  A fragment due at a step the move skips is sent at the next
 * dlc_learner_step_done instead, never skipped: a learner far slower than the others,
 * caught up again and again, would otherwise never reach a due step and contribute
 * nothing.  Nothing happens without a step time (no step done yet) or a `held` (< 0),
 * and never in data parallel.
 *
 * Step boundaries.  A merged fragment that arrives is stashed by dlc_learner_receive and
 * applied at the first step boundary at least τ steps after p was last sent.  One that
 * arrives when p was not sent since it was last received is held: when the learner
 * trained since then (with its own schedule, H > 0, neither blocking nor dp), it waits
 * for the learner's next send of p and τ steps more, for applied at once (α = 0) it
 * would overwrite the steps trained on p since the last apply, and the next
 * contribution would carry only the few after it.  Learners in phase with each other
 * never hold one (a round's merge comes after their own send); one out of phase, a step
 * or more behind the others' rounds (a slower or restarted learner), trains its own copy
 * of p on until its send and contributes all of it.  Only the first version past the
 * base is held: a merge further ahead (the others' rounds came faster than its own,
 * a learner far out of phase) is applied at the next boundary, as is one with no step
 * since the last apply, with H = 0, blocking, or a ring of fewer than 3 versions, for
 * the syncer measures a contribution against its current value, so each version
 * between the base and that value is partly undone by the merge (and past the ring it
 * is refused as stale).  The boundaries are the two
 * calls around an inner step: dlc_learner_step_done (after the step: the due
 * contributions are sent first, from the trained arena, then what may be applied is
 * applied) and dlc_learner_step_begin (before the next step: what arrived since, or
 * what a WAITING learner waited for).  A fragment flagged DLC_MSG_RESYNC is taken whole
 * (no mixing) at the next boundary whatever τ says, and at once while JOINING; a newer
 * merge that arrives over a waiting resync replaces it and is taken whole too.  A resync
 * that brings, bit for bit and at the same version, the values the learner holds as its
 * base of that fragment (a reconnect to a syncer that holds them: a cut, a standby that
 * took over) replaces nothing: what it trained on the fragment since stays, to be sent
 * (APPLIED, resync = 1, lag -1; nothing counted overwritten).  With
 * `blocking`, the learner stops stepping (state WAITING) while a fragment sent τ or
 * more steps ago has not come back; the receive that stashes it makes the learner
 * TRAINING again, and the driver, seeing the state, calls dlc_learner_step_begin, which
 * applies it before the step runs.  (A driver that skips step_begin steps on a model
 * that lacks what arrived between steps: step_done applies it one step late.)
 *
 * Fencing (msg.h): the learner has an incarnation (params.incarnation, + 1 at every
 * dlc_learner_restart) and follows the syncer epoch it last heard (0 before any; kept
 * across restarts, it only grows); both are stamped on every message it sends.  A
 * FRAGMENT or GRADIENT_AVG stamped with an older epoch than the one it follows comes from
 * a previous syncer incarnation: refused with DLC_ERR_FORMAT, nothing changes.  One with
 * a newer epoch means the syncer restarted: the learner follows that epoch from then on.
 * Unstamped messages (epoch 0) are not fenced.
 *
 * Data parallel (dp = 1): after the backward pass the driver calls
 * dlc_learner_gradient (the grads go out as one f32 GRADIENT, the learner WAITs), the
 * GRADIENT_AVG that comes back is written into the grad arena (action
 * DLC_LACT_GRADIENT_READY, state TRAINING), then the driver runs the optimizer step
 * and calls dlc_learner_step_done.  A GRADIENT's step is the run's (steps since the
 * learner joined + the phase its resync carried, + 1), so a restarted learner counts in
 * the others' round.  Once joined, a dp learner never takes a resync's model (a dp
 * syncer holds none: its payload is the initial model); a resync that comes while
 * TRAINING or WAITING (its gradient was refused, or its round lost with a restarted
 * syncer) tells the run's step.  At or before the learner's own, the phase becomes the
 * run's step and a WAITING learner TRAINING: its gradient is void, the step runs again.
 * Past it (with `replay`), the learner replays.
 *
 * Replay (dp, `replay`: the syncer has the "replay" capability).  A dp learner that
 * missed steps (restarted from a checkpoint of step k, or from the initial model at step
 * 0; or refused for a step the others have passed) holds the model of step k, while the
 * others hold the model of the run's step: it catches up by running the optimizer on
 * the averaged gradients of the steps it missed, without forward or backward passes.  It
 * sends REPLAY (version k; state WAITING, dlc_learner_replaying 1); each GRADIENT_AVG of
 * step k+1 that comes back (answers carry `steps`, the last step of the answer) is
 * written into the grad arena (GRADIENT_READY, TRAINING); the driver runs its optimizer
 * step exactly as for a step of its own (clip, the learning rate of that step) and calls
 * dlc_learner_replayed: the schedule moves on a step, and the learner WAITs for the next
 * answer, asks again past the last one, or stops replaying at the furthest run step it
 * has heard of.  Nothing is delivered between GRADIENT_READY and dlc_learner_replayed
 * (the arena holds that step's average).  A round's average that arrives in order is
 * taken as an answer.  When the syncer no longer holds some of the steps (its history
 * is bounded, and lost with a restart), the learner skips them (action PHASE with
 * `unreplayed`, its model is then no longer the others') and goes on.  Only a resync
 * whose `answers` names its last REPLAY says "nothing held after it"; a resync without
 * (a refused gradient's, a rejoin's) makes it ask again from the step it holds (at
 * dlc_learner_replayed when an average is in the arena), since a lost connection may
 * have taken the REPLAY or its answer; answers to steps already replayed are dropped.  Its next
 * GRADIENT joins the others' round: deterministic optimizers applied to the same
 * averages in the same order leave it holding the very model the others hold.
 *
 * Deferred encoding (`defer_encode`, not in dp).  Encoding a contribution (quantizing
 * it, updating the error feedback) is a pass over the fragment that a driver may run off
 * its compute thread, overlapped with the next inner step.  With defer_encode a due
 * contribution comes out as DLC_LACT_ENCODE instead of DLC_LACT_SEND: its outer gradient
 * Θ̂ − θ in f32 (`delta`, taken at the step boundary, so the inner steps that follow do
 * not change it), the error-feedback residual of the fragment (`ef`, NULL without error
 * feedback) and the message header (payload NULL, len the encoded size).  Any thread
 * runs dlc_learner_encode(&a, out, ...) on it and sends the message with that payload;
 * the learner's thread then calls dlc_learner_encoded(l, p).  From the action to that
 * call the learner touches neither `delta` nor `ef` of p; in return an event call that
 * would (a send of p, rollback, restart) is refused with DLC_ERR_STATE, changing nothing,
 * so a driver completes each encode before its next step_done.  The bytes sent are the
 * same as without deferral.  `delta` lies in a buffer the learner lends for that time (the
 * largest fragment's size; the one an earlier ENCODE gave back when there is one), so
 * deferral costs a buffer per fragment out at once plus one, not a copy of the model.
 */
#ifndef DILOCO_LEARNER_H
#define DILOCO_LEARNER_H

#include <stdint.h>
#include "codec.h"
#include "frag.h"
#include "msg.h"
#include "params.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The learner's states.  Legal transitions (asserted by the one set_state):
 *   JOINING  -> TRAINING (the whole model arrived) | STOPPED
 *   TRAINING -> WAITING | STOPPED
 *   WAITING  -> TRAINING | STOPPED
 *   STOPPED  -> JOINING (dlc_learner_restart) */
typedef enum dlc_learner_state {
    DLC_LEARNER_JOINING,  /* new or restarted: no global model yet, may not step */
    DLC_LEARNER_TRAINING, /* inner steps allowed */
    DLC_LEARNER_WAITING,  /* blocked: a merged fragment (or dp: the averaged gradient) is due */
    DLC_LEARNER_STOPPED,  /* killed or finished: takes no events but restart */
    DLC_LEARNER_STATE_COUNT
} dlc_learner_state;

/* "joining", "training", "waiting", "stopped"; NULL when out of range. */
DLC_API const char *dlc_learner_state_name(dlc_learner_state s);

typedef struct dlc_learner_params {
    int id;                       /* 0-based learner index, >= 0 */
    int dp;                       /* 0/1: data parallel (gradients every step) */
    int H;                        /* inner steps between two syncs of a fragment; 0 = manual */
    int tau;                      /* steps from sending a fragment to applying its merge; < H */
    double alpha;                 /* mixing on arrival, [0, 1]; 0 = overwrite */
    int blocking;                 /* 0/1: wait for a fragment sent tau steps ago */
    dlc_codec_kind codec;         /* uplink codec of contributions */
    dlc_codec_params codec_params;
    int error_feedback;           /* 0/1: carry each contribution's quantization error (per
                                   * fragment, docs/codecs.md: with a sparse codec, what it
                                   * did not send) into its next contribution.  A whole
                                   * resync of a fragment that replaces what the learner
                                   * trained on it zeroes that fragment's residual: it was
                                   * measured on the replaced trajectory (a stale
                                   * contribution's, a lost link's, a restart's), which
                                   * nothing will send any more; a resync that brings its
                                   * own base back (it replaces nothing) keeps it.  A
                                   * restart or rollback zeroes every fragment's */
    int ring;                     /* the syncer's version ring (sync.ring, 1..64): with
                                   * fewer than 3 versions nothing is held ("Step
                                   * boundaries"): a held contribution would come too late
                                   * to be merged (refused as stale) */
    double heartbeat;             /* seconds between heartbeats, 0 = none */
    double ema;                   /* (0, 1]: weight of a new sample in the step-time and
                                   * transit moving averages */
    int64_t incarnation;          /* >= 1: the incarnation it starts as (a process that
                                   * restarts passes its previous one + 1); each
                                   * dlc_learner_restart adds 1 */
    int replay;                   /* 0/1, dp: the syncer answers REPLAY ("Replay" above) */
    int defer_encode;             /* 0/1, not with dp: contributions come out as
                                   * DLC_LACT_ENCODE ("Deferred encoding" above) */
} dlc_learner_params;

/* id 0, dp 0, H 24, tau 2, alpha 0, blocking 0, f32 with default block, no error
 * feedback, ring 4, heartbeat 1 s, ema 0.5, incarnation 1. */
DLC_API dlc_learner_params dlc_learner_default_params(void);
/* DLC_OK or DLC_ERR_ARG naming the field: "learner: tau = 30: expected 0 <= tau < H = 24". */
DLC_API dlc_status dlc_learner_params_check(const dlc_learner_params *p);

typedef struct dlc_learner dlc_learner; /* opaque */

/* A learner in state JOINING.  params and plan are borrowed and must outlive it; the
 * plan must be made for params (same tensor count).  dp needs a plan of one fragment.
 * NULL with DLC_ERR_ARG or DLC_ERR_NOMEM. */
DLC_API dlc_learner *dlc_learner_new(const dlc_learner_params *lp, dlc_params *params, const dlc_plan *plan);
DLC_API void dlc_learner_free(dlc_learner *l); /* NULL ok */
/* A model that lives outside the params arena: data[i] holds tensor i of params (its
 * numel floats) where the host keeps it, e.g. a framework's own buffers.  From then on
 * the learner reads and writes the model there, never the arena's values (whose pages
 * the host may give back: the arena only lays the model out); the plan's views, which
 * index the arena, are translated tensor by tensor.  The pointers are copied; the
 * buffers must outlive the learner.  Call it before the first event.  DLC_ERR_ARG for a
 * NULL pointer or a data-parallel learner (its gradient lives in the arena). */
DLC_API dlc_status dlc_learner_bind_tensors(dlc_learner *l, float *const *data);

/* Syncer shards (docs/shards.md): the fragments are owned by `shards` syncer processes,
 * fragment p by shard owner[p] (0..shards-1, each shard owning at least one; copied;
 * dlc_plan_deal deals them).  The learner then follows each shard's epoch on its own
 * (Fencing above, per shard): a FRAGMENT is fenced against the epoch of its fragment's
 * shard, a contribution is stamped with it, and its other messages (HEARTBEAT, BYE) with
 * shard 0's, which a driver restamps for each shard it sends them to
 * (dlc_learner_shard_epoch).  A whole resync after a reconnect is one shard's fragments.
 * Not in data parallel (one fragment).  Call it before the first event; 1 shard (the
 * default) is one syncer.  DLC_ERR_ARG names a bad owner, DLC_ERR_STATE a started learner. */
#define DLC_LEARNER_SHARDS_MAX 16
DLC_API dlc_status dlc_learner_set_shards(dlc_learner *l, int shards, const int *owner);
DLC_API int dlc_learner_shards(const dlc_learner *l);        /* 0 for NULL */
DLC_API int dlc_learner_owner(const dlc_learner *l, int p);  /* -1 out of range */
/* The epoch of shard k it follows (0: none heard yet, or k out of range). */
DLC_API int64_t dlc_learner_shard_epoch(const dlc_learner *l, int k);

/* ---- events (each may queue actions; read them with dlc_learner_poll) ----
 *
 * No silent loss: every event call below (not poll, not the queries, not stop) is refused
 * with DLC_ERR_STATE, changing nothing, while actions of an earlier call are still queued
 * ("learner 2 has 3 unpolled actions"); a driver polls until dlc_learner_poll returns 0
 * after every call, whatever the call returned (a failed call may have queued some).  A
 * SEND's payload points into the learner's buffers, which the next accepted event call
 * may reuse: it is valid from the poll until then (a driver that keeps a message longer
 * copies it).  Calls into one learner must not overlap (it has no lock). */

/* An inner step is about to run (a step boundary): applies the stashed fragments that may
 * now be applied (actions APPLIED).  Call it before every inner step (dp: before the
 * forward pass).  TRAINING only (DLC_ERR_STATE otherwise). */
DLC_API dlc_status dlc_learner_step_begin(dlc_learner *l, double now);

/* An inner step finished (a step boundary): `tokens` (>= 0) trained in `seconds` (>= 0,
 * the step's compute time, for the step-time average).  TRAINING only, not while
 * replaying (DLC_ERR_STATE otherwise).  Sends the contributions that are due, then applies the stashed fragments
 * that may now be applied, and may enter WAITING. */
DLC_API dlc_status dlc_learner_step_done(dlc_learner *l, int64_t tokens, double seconds, double now);

/* The fragments whose model values the next dlc_learner_step_done reads: mask[p] (P
 * entries) = 1 for each fragment it would send (due at that step, or left over from a
 * skipped one) or that holds a stashed merge (applied there when it may be, mixed with
 * alpha of the model's values), else 0; returns how many (a negative dlc_status for a
 * NULL argument).  Valid until the next event call.  A host that keeps its own copy of
 * the parameters (client.h) copies in only these before the step.  Data parallel: every
 * fragment (its GRADIENT reads the whole gradient arena). */
DLC_API int dlc_learner_step_reads(const dlc_learner *l, uint8_t *mask);

/* Sends fragment p's contribution now (the driver's own schedule; also allowed with
 * H > 0).  TRAINING or WAITING. */
DLC_API dlc_status dlc_learner_contribute(dlc_learner *l, int p, double now);

/* The final flush (the learner's last step): sends every fragment trained since it was
 * last applied that has no contribution in flight (one sent and not yet merged back
 * would be sent again from the same base, its steps merged twice; with alpha = 0 the
 * steps after that send are overwritten by its merge, as at every round).  *sent (may be
 * NULL): how many.  TRAINING or WAITING, not dp (DLC_ERR_STATE). */
DLC_API dlc_status dlc_learner_flush(dlc_learner *l, double now, int *sent);

/* dp: the gradient of the step is in the grad arena; sends it and WAITs.  TRAINING only,
 * not while replaying.  tokens = 0 with a zeroed grad arena: a void step (its loss or
 * gradient went non-finite on a finite model), left out of the average (syncer.h); the
 * learner applies the average that comes back as for any step. */
DLC_API dlc_status dlc_learner_gradient(dlc_learner *l, int64_t tokens, double now);

/* A message from the syncer (FRAGMENT or GRADIENT_AVG; m borrowed for the call).  A
 * malformed one (wrong fragment, size, codec, non-finite values), one addressed to
 * another learner (`learner` is not this one's id) or one of an older syncer epoch than
 * the learner follows is refused with DLC_ERR_FORMAT and changes
 * nothing; a FRAGMENT older than the one held or waiting is ignored (DLC_OK).  A FRAGMENT
 * is only stashed for the next step boundary (above; no action), except a resync while
 * JOINING, applied at once (APPLIED; the last one makes the learner TRAINING).  It may be
 * called while an inner step runs: it does not touch the model arena.  STOPPED learners
 * ignore every message. */
DLC_API dlc_status dlc_learner_receive(dlc_learner *l, const dlc_msg *m, double now);
/* The same for a FRAGMENT the driver already decoded off its compute thread: values[0..n)
 * are dlc_codec_decode(m->codec, NULL, m->payload, m->len, values, n) of a call that
 * succeeded (so finite), and the learner only copies them (n must be the fragment's
 * size, else DLC_ERR_FORMAT).  Other messages: as dlc_learner_receive, values ignored. */
DLC_API dlc_status dlc_learner_receive_decoded(dlc_learner *l, const dlc_msg *m, const float *values, int64_t n,
                                               double now);
/* The same, a FRAGMENT lent rather than copied, for a driver that keeps a merge in the
 * frame it came in until it is applied (no stash of the model in the learner): values
 * (n floats, decoded as for dlc_learner_receive_decoded) or, values NULL, m's payload
 * (checked now, dlc_codec_validate; decoded into the base when applied) must stay valid
 * and unchanged while the learner holds it: while dlc_learner_lent(l, m->fragment)
 * returns that pointer.  The driver asks after each call (a newer merge of the
 * fragment, an apply, a restart let it go) and frees a buffer the learner no longer
 * holds.  Not lent, and copied as dlc_learner_receive_decoded does: a resync while
 * JOINING (applied at once) and dp.  Other messages: as dlc_learner_receive. */
DLC_API dlc_status dlc_learner_receive_lent(dlc_learner *l, const dlc_msg *m, const float *values, int64_t n,
                                            double now);
/* The buffer (values or payload) the learner holds lent for fragment p, or NULL. */
DLC_API const void *dlc_learner_lent(const dlc_learner *l, int p);

/* The earliest time dlc_learner_handle_expiry wants to be called (INFINITY for none). */
DLC_API double dlc_learner_expiry(const dlc_learner *l);
/* Timers due at `now` (finite): the heartbeat, one however many periods passed; the next
 * one is on the grid of periods after `now`, and strictly after it even when the period is
 * below the precision of `now` (then the next representable time). */
DLC_API dlc_status dlc_learner_handle_expiry(dlc_learner *l, double now);

/* The learner dies (or finishes): STOPPED, pending fragments and timers dropped, and so
 * are actions still queued (a dead learner sends nothing; dlc_learner_pending tells a
 * driver beforehand what it would drop). */
DLC_API void dlc_learner_stop(dlc_learner *l);
/* STOPPED -> JOINING as the next incarnation (+ 1): counters, versions and error
 * feedback reset (the epoch followed is kept); the driver resets the inner optimizer (or
 * restores it from the learner's checkpoint).  DLC_ERR_STATE unless STOPPED. */
DLC_API dlc_status dlc_learner_restart(dlc_learner *l, double now);

/* A fault on the learner (a non-finite loss or parameter, the driver's check): rolls it
 * back in place to the last global model, at a step boundary (between inner steps, never
 * while one runs on the arena).  TRAINING or WAITING, not data parallel (DLC_ERR_STATE:
 * a dp learner's Θ̂ is its last resync, not the model the others step on; a restart
 * resyncs it).  For every fragment p:
 *   - a merge waiting for its step boundary is taken whole (APPLIED, resync = 1): it is
 *     a newer global value than Θ̂_p, and nothing local is left to mix with it;
 *   - otherwise Θ̂_p is written into the arena (no action: nothing new arrived);
 *   - the counters restart at 0 (c_steps, c_tokens): what was trained since the last
 *     receive is discarded, so the next contribution Θ̂_p − θ_p is the work of the steps
 *     after the rollback alone, and says so;
 *   - a contribution already sent (sent_step >= 0, no merge stashed) stays outstanding:
 *     it was encoded from finite parameters (the codec refuses others) and its merge is
 *     applied as usual (τ, blocking, dlc_learner_outstanding count it), mixed with α
 *     into the rolled-back model;
 *   - the error feedback is zeroed: its residual belongs to the discarded trajectory (at
 *     most one quantization step of each fragment is lost).
 * The step counters (steps, tokens, the schedule step) do not move: the learner stays in
 * phase with the others.  The driver resets the inner optimizer (its moments describe,
 * or are poisoned by, the discarded steps) and does not report the failed step
 * (no step_done: it trained nothing).  A WAITING learner may become TRAINING (a merge
 * taken whole) or stay WAITING. */
DLC_API dlc_status dlc_learner_rollback(dlc_learner *l, double now);
/* Rollbacks since the learner was made (restarts keep counting). */
DLC_API int64_t dlc_learner_rollbacks(const dlc_learner *l);

/* Back-pressure from the driver: at most `room` contributions leave at the next step
 * boundaries (each send takes one; -1, the default: any).  With none left, a fragment
 * that is due is not sent: it trains on and leaves at the first dlc_learner_step_done
 * that has room, its contribution then covering the steps since its last send (as a
 * catch-up's skipped send does; dlc_learner_step_reads names it at every boundary
 * meanwhile).  A driver whose link is backed up so keeps no backlog of contributions
 * (each a fragment of memory, and older the longer it waits), and sends the newest
 * when the link frees.  Blocking presets and dp always send (they wait for the round);
 * flush and contribute ignore it. */
DLC_API void dlc_learner_set_send_room(dlc_learner *l, int room);
/* Due contributions that waited for room (counted once per wait). */
DLC_API int64_t dlc_learner_deferred(const dlc_learner *l);
/* The contributions the next dlc_learner_step_done would send given room for all: the
 * fragments due at that step and those that waited (for room, or skipped by a catch-up).
 * A driver that limits the room records when it bound (a replay sets the same). */
DLC_API int dlc_learner_sends_due(const dlc_learner *l);

/* dp with `replay` ("Replay" above): starts a replay when the run is past the schedule
 * step (a host that restored a checkpoint and set its schedule step calls it once
 * joined); nothing when it is not.  TRAINING and not replaying, else DLC_ERR_STATE. */
DLC_API dlc_status dlc_learner_replay(dlc_learner *l, double now);
/* The optimizer step on a replayed average is done (after GRADIENT_READY while
 * replaying): the schedule moves on one step; the replay goes on (WAITING) or ends
 * (TRAINING).  DLC_ERR_STATE when no replayed average waits. */
DLC_API dlc_status dlc_learner_replayed(dlc_learner *l, double now);
/* 1 while the learner catches up by replay. */
DLC_API int dlc_learner_replaying(const dlc_learner *l);

/* ---- the account ----
 *
 * Where the learner's compute went, over all its incarnations, in inner steps and in the
 * seconds the driver passed to dlc_learner_step_done.  Each step counts 1/P on each
 * fragment (data parallel: the whole step), and each fragment's share ends in one of:
 *   sent         in a contribution (dp: the gradient of a step done); whether the
 *                syncer merged it is the syncer's to say (dlc_syncer_merged_steps);
 *   overwritten  trained on p after its last send, replaced when a merge of p was
 *                applied (1 − alpha of it; all of it for a resync, taken whole);
 *   kept         the alpha of it that the mix keeps;
 *   discarded    thrown away by a rollback or a stop (a kill);
 *   unsent       not yet in any of those (at the end of a run: trained and never sent).
 * So sent + overwritten + kept + discarded + unsent = the steps done (and the seconds
 * passed).  A step lost mid-way (a kill, a void dp step) never reaches step_done and is
 * in none: the driver counts it. */
typedef struct dlc_learner_account {
    double sent_steps, overwritten_steps, kept_steps, discarded_steps, unsent_steps;
    double sent_s, overwritten_s, kept_s, discarded_s, unsent_s;
} dlc_learner_account;
DLC_API dlc_learner_account dlc_learner_get_account(const dlc_learner *l); /* zeros for NULL */

/* ---- actions ---- */

typedef enum dlc_learner_action_type {
    DLC_LACT_SEND,           /* send msg to the syncer */
    DLC_LACT_APPLIED,        /* fragment `fragment` of `version` was applied to the arena */
    DLC_LACT_GRADIENT_READY, /* dp: the averaged gradient is in the grad arena: step now */
    DLC_LACT_PHASE,          /* the schedule step moved (a catch-up, or a whole resync after a
                              * reconnect): `schedule`, by `lag` steps, `fragment` the merge
                              * that told (-1: a resync).  A driver that replays a run
                              * records it (sim --replay sets it back with
                              * dlc_learner_set_schedule_step) */
    DLC_LACT_ENCODE,         /* defer_encode: encode `msg`'s payload from `delta` (and `ef`)
                              * with dlc_learner_encode, send it, then dlc_learner_encoded */
    DLC_LACT_TYPE_COUNT
} dlc_learner_action_type;

typedef struct dlc_learner_action {
    dlc_learner_action_type type;
    dlc_msg msg;          /* SEND: payload owned by the learner, valid until its next
                           * accepted event call (above: not before every action is polled) */
    int fragment;         /* APPLIED */
    int64_t version;      /* APPLIED */
    int64_t lag;          /* APPLIED: inner steps since the fragment was last sent (-1 if
                           * it was not) */
    int resync;           /* APPLIED: 1 for a resync (taken whole) */
    int64_t schedule;     /* PHASE: the schedule step from now on (lag: the move) */
    int64_t unreplayed;   /* PHASE, dp: steps skipped whose averages the syncer no longer
                           * held (the learner's model is no longer the others'), else 0 */
    /* ENCODE (fragment `fragment`; msg.payload NULL, msg.len the encoded size): */
    const float *delta;   /* the outer gradient, n floats, the learner's */
    float *ef;            /* its error-feedback residual (n floats, updated), or NULL */
    int64_t n;
    dlc_codec_params codec_params; /* with msg.codec */
} dlc_learner_action;

/* Encodes an ENCODE action's outer gradient into out[0..cap) (cap >= a->msg.len), updating
 * its error feedback; *len the bytes written (= a->msg.len).  Touches only the action's
 * buffers and out: any thread may run it between the action and dlc_learner_encoded.
 * Errors: a non-finite value (named), a short buffer. */
DLC_API dlc_status dlc_learner_encode(const dlc_learner_action *a, uint8_t *out, size_t cap, size_t *len);
/* The encode of fragment p is over (sent or not): the learner may use p's buffers again.
 * DLC_ERR_STATE when p has none outstanding. */
DLC_API dlc_status dlc_learner_encoded(dlc_learner *l, int p);
/* Encodes outstanding (0 without defer_encode). */
DLC_API int dlc_learner_encoding(const dlc_learner *l);

/* Pops the oldest queued action into *a: 1, or 0 when there is none. */
DLC_API int dlc_learner_poll(dlc_learner *l, dlc_learner_action *a);
/* Actions queued and not yet polled (0 for NULL): an event call needs 0. */
DLC_API int dlc_learner_pending(const dlc_learner *l);

/* ---- queries ---- */

DLC_API dlc_learner_state dlc_learner_state_of(const dlc_learner *l);
DLC_API int dlc_learner_id(const dlc_learner *l);
/* Inner steps since the learner (re)joined, and tokens. */
DLC_API int64_t dlc_learner_steps(const dlc_learner *l);
DLC_API int64_t dlc_learner_tokens(const dlc_learner *l);
/* Version of fragment p the learner last received (-1 before any), its counters. */
DLC_API int64_t dlc_learner_base_version(const dlc_learner *l, int p);
DLC_API int64_t dlc_learner_fragment_steps(const dlc_learner *l, int p);
DLC_API int64_t dlc_learner_fragment_tokens(const dlc_learner *l, int p);
/* The schedule step: inner steps since the learner (re)joined plus the phase its resync
 * carried (the run's step when it joined; 0 at the start). */
DLC_API int64_t dlc_learner_schedule_step(const dlc_learner *l);
/* A host that restored its model from a checkpoint of schedule step `step` (the rollback
 * of a non-elastic data-parallel run: every learner restarts from the same checkpoint)
 * continues its schedule there: the phase becomes step − steps, so a dp learner's next
 * GRADIENT is for step + 1.  TRAINING only (not while a gradient waits): DLC_ERR_STATE
 * otherwise; step < 0: DLC_ERR_ARG. */
DLC_API dlc_status dlc_learner_set_schedule_step(dlc_learner *l, int64_t step);
/* Moves the schedule step on to `step` (>= the current one, else DLC_ERR_ARG) as a
 * catch-up does ("Catching up"): each fragment due at a step it skips is sent at the
 * next dlc_learner_step_done.  For a host that replays a run's PHASE actions of
 * catch-ups (sim --replay).  TRAINING only (DLC_ERR_STATE otherwise). */
DLC_API dlc_status dlc_learner_skip_to(dlc_learner *l, int64_t step);
/* Fragments sent with no merge arrived since the send (a driver that ends a learner waits
 * for them before its BYE; a merge held from before the send does not count). */
DLC_API int dlc_learner_outstanding(const dlc_learner *l);
/* EMAs reported to the syncer (s), 0 before the first sample. */
DLC_API double dlc_learner_step_time(const dlc_learner *l);
DLC_API double dlc_learner_transit(const dlc_learner *l);
/* Its incarnation (0 for NULL), and the syncer epoch it follows (0: none heard yet; with
 * shards, shard 0's). */
DLC_API int64_t dlc_learner_incarnation(const dlc_learner *l);
DLC_API int64_t dlc_learner_epoch(const dlc_learner *l);

#ifdef __cplusplus
}
#endif
#endif
