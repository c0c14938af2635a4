/* syncer_internal.h - the syncer's state, shared by core/syncer.c (the state machine)
 * and core/syncer_state.c (its checkpoint); not installed, not public API.  What a
 * checkpoint keeps of each field: docs/checkpoints.md, "The syncer's checkpoint". */
#ifndef DILOCO_SYNCER_INTERNAL_H
#define DILOCO_SYNCER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "diloco/syncer.h"

/* Learner m's part in fragment p's open round.  Its payload went into the merge
 * accumulator when it arrived (core/syncer.c, "Rounds"); what stays is what the merge's
 * report and the account need.  held: a newer contribution that came while this one was
 * in the round, waiting (its encoded bytes) to open the next one. */
typedef struct contrib {
    int present;
    double weight;          /* its weight in the merge (0: no tokens, not added) */
    int64_t base, steps, tokens, incarnation, life; /* life: the learner's when it arrived */
    double arrived;
    size_t len;
    int held;
    int64_t h_base, h_steps, h_tokens, h_incarnation, h_life;
    double h_arrived;
    uint8_t *h_bytes;
    size_t h_len;
} contrib;

/* What a replicated syncer would have sent learner m of fragment p while p's merge waits
 * for its standby (dlc_syncer_set_replicated): one send, at the acknowledgement. */
typedef struct pub_owed {
    int on;
    uint32_t flags;
    double held, age, step_time;
    int64_t phase;
} pub_owed;

typedef struct sfrag {
    dlc_fragstate *fs;       /* NULL: a fragment another shard owns (params.owns) */
    dlc_merge *mg;
    int64_t n;
    dlc_round_state state;
    int count;
    double opened, quorum_at, grace, deadline;
    int64_t dp_step;        /* dp: the step of the open round */
    uint8_t *avg;           /* dp: the last averaged gradient (f32), of step avg_step (the
                             * newest entry of the history) */
    int64_t avg_step;       /* dp: -1 before the first round */
    uint8_t **hist;         /* dp: [hist_cap] averages (allocated as they come), a ring */
    int64_t *hist_step;     /* dp: [hist_cap] the step of each */
    int hist_cap, hist_head, hist_len; /* the oldest at hist_head */
    double last_open;       /* when the latest round opened (-1: none yet) */
    contrib *c;             /* [M] */
    int *arr;               /* [M]: the round's contributors in arrival order (count) */
    dlc_merge_contrib *mc;  /* [2M]: a merge's contributors, the halves used in turn */
    double *mc_new;         /* [2M]: beside mc, the steps each added to the account (1/P each) */
    int mc_flip;
    int mc_count;           /* contributors of the latest merge (its half: the one before mc_flip) */
    double mc_useful;       /* the latest merge's useful tokens */
    dlc_payload *out;       /* encoded Θ_p (one reference; a driver may hold others);
                             * NULL with f32 down, which sends from the ring: */
    dlc_payload **ring_pl;  /* [R] f32 down: a payload over each ring slot's Θ (or NULL) */
    int64_t *ring_v;        /* [R] ... and its version */
    int64_t out_cap, out_len, out_version;
    /* replicated (dlc_syncer_set_replicated): the merge held back for its standby */
    int pub;                /* 1: version pub_version merged, not yet acknowledged */
    int64_t pub_version;
    dlc_merge_info pub_mi;  /* its DLC_SACT_MERGED (contribs: mc's half of that close) */
    double pub_at, pub_opened; /* when it closed; when its round opened */
    double *pub_arr;        /* [M] when each contributor's contribution arrived, -1 none */
    pub_owed *pub_owed;     /* [M] other sends of p held back with it */
} sfrag;

struct dlc_syncer {
    dlc_syncer_params p;
    const dlc_plan *plan;
    int P, M;
    sfrag *f;
    double *sorted;          /* [M], for medians */
    int manual;              /* 1: rounds close only by dlc_syncer_flush (dlc_syncer_set_manual) */
    int owned;               /* fragments this syncer owns (P unless a shard, params.owns) */
    dlc_replica_contrib *rep;/* [M] dlc_syncer_replica's contributors */
    uint8_t *live;
    double *heard, *step_t, *transit;
    double *joined_at;       /* [M]: when each live learner (re)joined */
    uint8_t *ever;           /* [M]: the learner has joined before (a later join is a rejoin) */
    uint8_t *sent_since;     /* [M * P]: it has contributed to fragment p since it joined */
    int64_t *sched;          /* [M]: schedule step each learner last reported (heartbeats) */
    uint8_t *unheard;        /* [M]: not heard from since a restart or a load (syncer.h) */
    int64_t *merged;         /* [M]: contributions merged, over the run (checkpointed) */
    double *merged_steps;    /* [M]: their new steps / P (syncer.h, the account) */
    int64_t *last_base, *last_steps, *last_tokens; /* [M * P]: learner m's last merged
                             * contribution to fragment p (base -1: none) ... */
    int64_t *last_life;      /* [M * P] ... from which of its lives */
    int64_t *life;           /* [M]: + 1 at each (re)join (0 after a load) */
    int64_t *shard;          /* [M]: the driver's data shard of each learner, -1 = none */
    int nlive;
    int64_t held;            /* contributions held for a round's next (dlc_syncer_held) */
    int64_t dp_next;         /* dp: the step of the next round (1 + the rounds closed) */
    double xi_quorum;
    int64_t epoch;           /* stamped on every message sent */
    int64_t prev_epoch;      /* a standby that took over: its primary's epoch, taken as its
                              * own from learners (dlc_syncer_take_over); 0 none */
    int replicated;          /* dlc_syncer_set_replicated */
    int64_t *incarnation;    /* [M]: each learner's latest stamped incarnation (0: none yet) */
    uint8_t *inc_open;       /* [M]: joined, its incarnation not heard since: the next one is taken */
    uint8_t *fenced;         /* [M]: resynced for a fenced message, nothing taken from it since */
    dlc_syncer_action *q;
    int qcap, qhead, qlen;
};

#endif
