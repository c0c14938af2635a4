/*
 * msg.h - the messages the learner and syncer state machines exchange (learner.h,
 * syncer.h), as plain structs: what a message says, not how it is framed.  Drivers move
 * them: the virtual-time driver (vtime.h) through simulated links, the network driver
 * (issue 9, core/proto.c) through msgpack frames.  Sans-IO.
 *
 * A dlc_msg never owns its payload: `payload` points into a buffer owned by whoever
 * produced the message (the state machine that emitted it, or the driver that received
 * it), valid only for the call it is passed to or, for an emitted action, until the next
 * call into the emitting state machine.  A driver that needs it longer copies it.
 *
 *   type          direction         fields used
 *   HEARTBEAT     learner -> syncer learner, steps (its schedule step: steps since it joined
 *                                   plus the phase it joined at), tokens (total), step_time, transit
 *   CONTRIBUTION  learner -> syncer learner, fragment, version (base), steps, tokens
 *                                   (counted since the fragment was last received),
 *                                   step_time, transit, codec, payload (the encoded outer
 *                                   gradient Θ̂_p − θ_p of the fragment's floats)
 *   FRAGMENT      syncer -> learner learner (destination), fragment, version (new),
 *                                   flags (DLC_MSG_RESYNC), held, age, codec, payload (Θ_p);
 *                                   a resync also carries steps (the run's schedule
 *                                   step; dp: the rounds closed), held (the age of the fragment's latest round,
 *                                   -1 if none) and step_time (the median step time)
 *   GRADIENT      learner -> syncer learner, version (the run's step, 1-based: the
 *                                   learner's steps + the phase of its resync + 1), tokens, codec (f32),
 *                                   payload (the gradient of every float of the model)
 *   GRADIENT_AVG  syncer -> learner learner, version (the step), codec (f32), payload
 *                                   (the averaged gradient)
 *   BYE           learner -> syncer learner: leaves for good (the run is over for it)
 *   REPLICA       primary -> standby fragment, version (the one the merge made), epoch,
 *                                   steps (contributor records), flags, payload (proto.h)
 *   REPLICA_ACK   standby -> primary fragment, version (held), epoch, flags
 *
 * Fencing: every message also carries `epoch` and `incarnation` (both >= 0; 0 = not
 * stamped, which the receiver does not fence: an older peer, or a learner that has not
 * heard from any syncer yet).  The syncer stamps its own epoch (dlc_syncer_params.epoch:
 * one per syncer process; a restarted syncer runs the next) and the incarnation it holds
 * for the destination (0 while it waits to learn it after a join); a learner stamps the
 * last syncer epoch it heard and its own incarnation (dlc_learner_params.incarnation,
 * bumped by each dlc_learner_restart).  The syncer refuses, never merges, what comes
 * from an incarnation older than the learner's latest or from another epoch than its
 * own, and resyncs the sender; a newer incarnation is a restarted learner: a rejoin.  A
 * learner refuses a message of an epoch older than the one it follows and adopts a newer
 * one (syncer.h, learner.h).
 */
#ifndef DILOCO_MSG_H
#define DILOCO_MSG_H

#include <stddef.h>
#include <stdint.h>
#include "codec.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlc_msg_type {
    DLC_MSG_HEARTBEAT,
    DLC_MSG_CONTRIBUTION,
    DLC_MSG_FRAGMENT,
    DLC_MSG_GRADIENT,
    DLC_MSG_GRADIENT_AVG,
    DLC_MSG_BYE,
    DLC_MSG_REPLAY,       /* dp: learner -> syncer, the averages after step `version`, please */
    DLC_MSG_REPLICA,      /* primary -> standby: one merge of `fragment` (proto.h, REPLICA);
                           * never a learner's or a syncer's to receive */
    DLC_MSG_REPLICA_ACK,  /* standby -> primary: it holds `fragment` at `version` */
    DLC_MSG_TYPE_COUNT
} dlc_msg_type;

/* "heartbeat", "contribution", "fragment", "gradient", "gradient_avg", "bye", "replay",
 * "replica", "replica_ack"; NULL when out of range. */
DLC_API const char *dlc_msg_type_name(dlc_msg_type type);

/* FRAGMENT flag: part of a full-model resync (a join, a dropped or rejected contribution):
 * the learner takes it at once, whatever it was waiting for. */
#define DLC_MSG_RESYNC 1u
/* REPLICA flags: the payload carries the outer momentum after Θ; and the replica is a
 * catch-up, fragment p whole at `version` (not the next merge).  REPLICA_ACK takes
 * DLC_MSG_REPLICA_WHOLE alone: the standby's statement of the version it holds, once per
 * fragment right after it attaches.  Other bits are refused on both. */
#define DLC_MSG_REPLICA_MOMENTUM 0x2u
#define DLC_MSG_REPLICA_WHOLE 0x4u

/* Bytes a message costs on a link besides its payload (the frame and header, an upper
 * bound of what core/proto.c will write); the virtual-time driver charges it. */
#define DLC_MSG_OVERHEAD 64

typedef struct dlc_msg {
    dlc_msg_type type;
    int learner;          /* sender (to the syncer) or destination (from it), 0-based */
    int fragment;         /* CONTRIBUTION, FRAGMENT: 0-based */
    int64_t version;      /* CONTRIBUTION: base version; FRAGMENT: new version;
                           * GRADIENT, GRADIENT_AVG: the inner step (1-based); REPLAY:
                           * the last step whose average the learner holds */
    int64_t steps;        /* REPLICA: its contributor records;
                           * CONTRIBUTION: c_steps; HEARTBEAT: schedule step; FRAGMENT with
                           * DLC_MSG_RESYNC: the run's schedule step for a joining learner;
                           * GRADIENT_AVG: 0 for a round's average, else an answer to a
                           * REPLAY, the last step of that answer */
    int64_t tokens;       /* CONTRIBUTION: c_tokens; GRADIENT: tokens of the step;
                           * HEARTBEAT: tokens so far */
    double step_time;     /* CONTRIBUTION, HEARTBEAT: EMA of the inner step time (s), 0 unknown */
    double transit;       /* CONTRIBUTION, HEARTBEAT: EMA of the time a contribution and its
                           * merged fragment spend on the links (s), 0 unknown */
    double held;          /* FRAGMENT: seconds the syncer held this learner's contribution
                           * before sending the merge; for a learner without one in the
                           * round, the round's age (since its first contribution) */
    double age;           /* FRAGMENT (not a resync): the round's age when merged, seconds
                           * since its first contribution arrived (0 = not stated: an older
                           * syncer); a contributor's lag behind the round's first sender is
                           * age - held */
    uint32_t flags;       /* FRAGMENT: DLC_MSG_RESYNC; REPLICA: DLC_MSG_REPLICA_MOMENTUM,
                           * DLC_MSG_REPLICA_WHOLE; REPLICA_ACK: DLC_MSG_REPLICA_WHOLE */
    dlc_codec_kind codec; /* payload encoding */
    const uint8_t *payload; /* borrowed, see above */
    size_t len;
    int64_t epoch;        /* the syncer's epoch: stamped by it; from a learner, the last it
                           * heard (0 = none yet) */
    int64_t incarnation;  /* the learner's incarnation: stamped by it; from the syncer, the
                           * one it holds for the destination (0 = not known yet) */
    int64_t answers;      /* FRAGMENT with DLC_MSG_RESYNC to a dp learner: 1 + the step k of
                           * the REPLAY it answers ("nothing held after k"); 0 = it answers
                           * none (a join's or a refused gradient's resync) */
} dlc_msg;

/* Bytes the message costs on a link: DLC_MSG_OVERHEAD + len. */
DLC_API int64_t dlc_msg_wire_bytes(const dlc_msg *m);

#ifdef __cplusplus
}
#endif
#endif
