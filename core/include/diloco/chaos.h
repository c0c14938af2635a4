/*
 * chaos.h - fault schedules as data (docs/algorithm.md §4.7): what goes wrong, to whom, when
 * and for how long, in a run of M learners and one syncer.  The time axis is seconds:
 * virtual time in the simulator (core/vtime.c), wall time since start in the real
 * runtime.  Both drivers consume the same schedule; nothing here runs a clock.
 * Details and the rules below with examples: docs/chaos.md.
 *
 *     dlc_chaos *c = dlc_chaos_new(8);                          // 8 learners
 *     if (!c) fprintf(stderr, "%s\n", dlc_last_error());
 *     dlc_fault f = {.at = 30, .kind = DLC_FAULT_KILL, .learner = 2, .duration = 60};
 *     dlc_chaos_add(c, &f);                                     // copies f
 *     dlc_chaos_add_poisson(c, -1, 3600, 120, 0, 86400, 42);     // every learner, 1 h MTBF
 *     int n;
 *     const dlc_chaos_event *ev = dlc_chaos_timeline(c, &n);    // begins and ends, by time
 *     for (int i = 0; i < n; i++) {
 *         const dlc_fault *x = dlc_chaos_get(c, ev[i].index);
 *         ... at time ev[i].t, x starts (ev[i].begin) or ends ...
 *     }
 *     dlc_chaos_free(c);
 *
 * Rules (each a choice, made once here):
 *  - Faults are kept sorted by `at`; equal `at` keep insertion order (a poisson batch
 *    counts as inserted learner by learner, each learner's failures in time order).
 *  - KILL, CUT, SYNCER and PAUSE are on/off states, so overlapping or touching ones of the same
 *    target (same kind and learner; the syncer is one target, each of its shards another) are MERGED into one fault
 *    covering the union [min at, max end], at the position of the one that starts first
 *    (its `at` is kept, its duration grows).  Hence at most one of each is active per
 *    target at any time and the driver can treat begin/end as set/clear.  Merging can
 *    lower dlc_chaos_count and shift the indices of later faults.
 *  - SLOW faults are never merged: while several are active for one learner its step
 *    time is multiplied by the product of their factors (dlc_chaos_slow_factor).
 *  - LINK faults are never merged either: while several are active for one learner, each
 *    field of its link (bandwidth, latency) is the one set by the latest begun of them
 *    (ties: insertion order) that sets it, else the link's own (dlc_chaos_link_at).
 *  - A fault with duration INFINITY has no end event in the timeline.
 *  - A killed learner's SLOW/CUT/PAUSE faults still begin and end on schedule; they matter only
 *    while it is alive (the driver's concern).
 *
 * Randomness: xoshiro256** seeded by splitmix64, inside this module (never rand()); each
 * learner of a poisson call has its own stream derived from (seed, learner), so the
 * schedule of learner m does not depend on how many learners there are.
 */
#ifndef DILOCO_CHAOS_H
#define DILOCO_CHAOS_H

#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most learners a schedule can address. */
#define DLC_CHAOS_MAX_LEARNERS 4096
/* Most faults a schedule holds (each gives at most 2 timeline events); bounds its memory,
 * about 32 MiB of faults plus 32 MiB of timeline at the limit.  A poisson call is
 * checked against it before merging. */
#define DLC_CHAOS_MAX_FAULTS (1 << 20)

typedef enum dlc_fault_kind {
    DLC_FAULT_KILL,   /* learner stops (process dies); comes back after `duration` (INFINITY = never) */
    DLC_FAULT_SLOW,   /* learner's step time multiplied by `factor` (>= 1 slower, (0,1) faster) for `duration` */
    DLC_FAULT_CUT,    /* the learner's link to the syncer drops every message both ways for `duration` */
    DLC_FAULT_SYNCER, /* the syncer (or one shard of it: `shard`) is down for `duration`: receives and
                       * sends nothing */
    DLC_FAULT_LINK,   /* the learner's link to the syncer takes `bandwidth` and/or `latency` for `duration` */
    DLC_FAULT_PAUSE,  /* learner is stopped (SIGSTOP) for `duration`: it neither computes nor says anything,
                       * keeps its state, and goes on where it was (the syncer sees silence).  With
                       * learner -1, the syncer (or one shard of it: `shard`; with standbys, which
                       * process: `role`) is stopped so: what reaches it waits, unread, and its
                       * timers with it (docs/chaos.md) */
    DLC_FAULT_KIND_COUNT
} dlc_fault_kind;

/* "kill", "slow", "cut", "syncer", "link", "pause"; "?" outside the enum.  Never NULL. */
DLC_API const char *dlc_fault_kind_name(dlc_fault_kind k);
/* Parses one of those names into *out: DLC_OK, or DLC_ERR_ARG naming the string. */
DLC_API dlc_status dlc_fault_kind_parse(const char *name, dlc_fault_kind *out);

typedef enum dlc_fault_role {
    DLC_ROLE_PRIMARY,    /* the serving syncer process (the default) */
    DLC_ROLE_STANDBY,    /* its standby */
    DLC_ROLE_BOTH,       /* both at once */
    DLC_ROLE_COUNT
} dlc_fault_role;
/* "primary", "standby", "both"; "?" outside the enum.  Never NULL. */
DLC_API const char *dlc_fault_role_name(dlc_fault_role r);
/* Parses one of those names into *out: DLC_OK, or DLC_ERR_ARG naming the string. */
DLC_API dlc_status dlc_fault_role_parse(const char *name, dlc_fault_role *out);

typedef struct dlc_fault {
    double at;           /* seconds >= 0, finite */
    dlc_fault_kind kind;
    int learner;         /* 0-based learner index, -1 for DLC_FAULT_SYNCER and a pause of the syncer */
    double duration;     /* > 0, INFINITY = for the rest of the run */
    double factor;       /* DLC_FAULT_SLOW only: finite > 0; else ignored (stored as 0) */
    double bandwidth;    /* DLC_FAULT_LINK only: bytes/s > 0 (INFINITY: no cap), or 0 to keep the
                          * link's; else ignored (stored as 0) */
    double latency;      /* DLC_FAULT_LINK only: one-way seconds, finite >= 0, or < 0 to keep the
                          * link's (set it to -1 when only the bandwidth changes); a LINK fault
                          * sets at least one of the two; else ignored (stored as 0) */
    int shard;           /* a fault of the syncer only (DLC_FAULT_SYNCER, DLC_FAULT_PAUSE with learner
                          * -1): 0 the whole syncer, 1..DLC_CHAOS_MAX_SHARDS one shard of a syncer
                          * split by fragment (docs/shards.md), its own target (merged with that
                          * shard's faults of the same kind only); else 0 */
    dlc_fault_role role; /* a fault of the syncer only: which process of the shard (or syncer) is down
                          * when it has a standby (docs/shards.md, "Standbys"): the primary
                          * (its standby takes over), the standby, or both; each role of each
                          * shard its own target; else DLC_ROLE_PRIMARY (0) */
} dlc_fault;
#define DLC_CHAOS_MAX_SHARDS 16

/* One point of the merged timeline: fault `index` (into dlc_chaos_get) begins or ends. */
typedef struct dlc_chaos_event {
    double t;   /* seconds: the fault's at (begin) or at + duration (end) */
    int index;  /* 0..dlc_chaos_count-1 */
    int begin;  /* 1 = the fault starts, 0 = it ends */
} dlc_chaos_event;

typedef struct dlc_chaos dlc_chaos; /* opaque */

/* An empty schedule for `learners` learners (1..DLC_CHAOS_MAX_LEARNERS).  NULL on failure:
 * DLC_ERR_ARG (learners out of range) or DLC_ERR_NOMEM.  Caller frees. */
DLC_API dlc_chaos *dlc_chaos_new(int learners);
/* NULL is a no-op. */
DLC_API void dlc_chaos_free(dlc_chaos *c);

/* Adds a copy of *f (borrowed), merged with overlapping faults by the rules above.
 * Refused without changing anything: DLC_ERR_ARG naming the field, its value and what was
 * expected ("chaos: learner = 5: expected an index in [0, 3] (4 learners)"; the syncer
 * needs learner = -1; NULL arguments), DLC_ERR_RANGE at DLC_CHAOS_MAX_FAULTS,
 * DLC_ERR_NOMEM. */
DLC_API dlc_status dlc_chaos_add(dlc_chaos *c, const dlc_fault *f);

/* Random policy: for learner `learner` (or every learner when -1), failures with
 * exponential time between failures of mean `mtbf` (finite > 0 s), each a KILL lasting
 * `down` (finite > 0 s; fixed, or exponential with that mean when `exponential_down` is 1),
 * the next failure drawn after the recovery, for failures starting in [0, horizon)
 * (finite >= 0; the last outage may run past it).  Each learner starts up at t = 0.
 * Exponential samples are -mean·log(1 - u), u in [0, 1) from 53 bits of xoshiro256**.
 * Seeded: learner m's stream depends on (seed, m) only, so adding a learner does not
 * change the others' schedules; the same call gives the same schedule.  The new kills
 * are merged with the faults already there.  Refused without changing anything:
 * DLC_ERR_ARG naming the bad argument, DLC_ERR_RANGE when the total before merging would
 * exceed DLC_CHAOS_MAX_FAULTS (raise mtbf or shorten the horizon), DLC_ERR_NOMEM. */
DLC_API dlc_status dlc_chaos_add_poisson(dlc_chaos *c, int learner, double mtbf, double down,
                                         int exponential_down, double horizon, uint64_t seed);

/* ---- accessors (NULL c: 0 / NULL) ---- */

/* The number of learners given to dlc_chaos_new. */
DLC_API int dlc_chaos_learners(const dlc_chaos *c);
/* The number of faults (after merging). */
DLC_API int dlc_chaos_count(const dlc_chaos *c);
/* Fault i in time order (ties: insertion order), borrowed, valid until the next add or
 * free; NULL with DLC_ERR_RANGE outside 0..count-1. */
DLC_API const dlc_fault *dlc_chaos_get(const dlc_chaos *c, int i);
/* Every begin and every finite end (at + duration) of the faults, sorted by t; ties:
 * ends before begins, then by fault index.  *n gets the number of events.  Borrowed
 * array owned by c (built on the first call after a change), valid until the next add
 * or free.  NULL with *n = 0 on DLC_ERR_NOMEM, or for an empty schedule (no error). */
DLC_API const dlc_chaos_event *dlc_chaos_timeline(dlc_chaos *c, int *n);
/* Fraction of [0, horizon) during which `learner` is killed (kills are merged, so no time
 * counts twice).  NaN for NULL c, a learner out of range or a horizon not finite > 0. */
DLC_API double dlc_chaos_down_share(const dlc_chaos *c, int learner, double horizon);
/* The product of the factors of the SLOW faults of `learner` active at time t (at <= t <
 * at + duration): 1 when none.  NaN for NULL c or a learner out of range. */
DLC_API double dlc_chaos_slow_factor(const dlc_chaos *c, int learner, double t);
/* The link of `learner` at time t: *bandwidth and *latency come in as the link's own and
 * go out with each field replaced by the LINK faults active at t (at <= t < at +
 * duration) that set it, in time order, so the latest begun wins.  DLC_ERR_ARG for NULL
 * arguments or a learner out of range (nothing changed). */
DLC_API dlc_status dlc_chaos_link_at(const dlc_chaos *c, int learner, double t, double *bandwidth, double *latency);

/* ---- a cursor: the timeline as a driver consumes it ----
 *
 * Both drivers read a schedule through one: vtime (core/vtime.c) at its virtual clock, the
 * real run's supervisor (lua/diloco/cluster.lua, diloco.Chaos:due) at the wall clock since
 * its start.  It walks the merged timeline in order (so both see the same faults, merged
 * by the same rules, ties in the same order) and hands out each event once, when it is
 * due.  A schedule changed after its cursor started is refused (DLC_ERR_STATE): the
 * positions walked would no longer mean the same faults.
 *
 *     dlc_chaos_cursor cur;
 *     dlc_chaos_cursor_init(&cur, c);
 *     dlc_chaos_event ev;
 *     const dlc_fault *f;
 *     while (dlc_chaos_cursor_next(&cur, now, &ev, &f) == 1) ... f begins (ev.begin) or ends ...
 */
typedef struct dlc_chaos_cursor {
    dlc_chaos *c;  /* borrowed */
    int next;      /* timeline events handed out */
    uint64_t gen;  /* the schedule's change count when the cursor started */
} dlc_chaos_cursor;

/* Starts a cursor at the first event of c's timeline.  DLC_ERR_ARG for NULL arguments. */
DLC_API dlc_status dlc_chaos_cursor_init(dlc_chaos_cursor *cur, dlc_chaos *c);
/* The next event at ev->t <= now: 1 with *ev and (f not NULL) *f, its fault (borrowed);
 * 0 when none is due yet or none is left; a negative dlc_status when the schedule changed
 * since the cursor started (DLC_ERR_STATE) or its timeline could not be built. */
DLC_API int dlc_chaos_cursor_next(dlc_chaos_cursor *cur, double now, dlc_chaos_event *ev, const dlc_fault **f);
/* The time of the next event, INFINITY when none is left (or on an error above). */
DLC_API double dlc_chaos_cursor_peek(dlc_chaos_cursor *cur);
/* Events handed out so far. */
DLC_API int dlc_chaos_cursor_position(const dlc_chaos_cursor *cur);

#ifdef __cplusplus
}
#endif
#endif
