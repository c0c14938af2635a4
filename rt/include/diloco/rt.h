/*
 * rt.h - the real-time drivers: the learner and the syncer state machines (learner.h,
 * syncer.h) on the wall clock and the transport (net.h).  libdiloco_rt, above
 * libdiloco_net; core/ knows nothing of it.  docs/runtime.md is the guide.
 *
 * The syncer driver (dlc_srt) owns a thread that runs the transport's event loop inline
 * and feeds the syncer: connections that become READY join (the WELCOME gave them their
 * learner id), frames are received, connections LOST are lost (the transport's
 * heartbeats and timeouts are the one liveness layer: the state machine's own timeout is
 * off), grace deadlines expire on time.  What the host wants to know (merges, joins,
 * losses, refusals, goodbyes) comes out of dlc_srt_poll as events.  A merged fragment
 * goes to every live learner from one refcounted buffer, the syncer's own (no copy).
 *
 * Back-pressure: nothing the syncer sends is lost to a full queue.  A send the transport
 * refuses (the learner's queue is past out_max or its share of mem_max, net.h; the driver
 * lowers out_max to two of the largest fragment's frames, at least 256 KiB, so that the
 * transport's queue stays a short pipe) waits in the driver, in order, and goes at the
 * peer's DRAINED; so does every later send to that learner.  A join streams the whole
 * model that way, fragment by fragment, never queued whole.  A merged fragment that waits is replaced by the next version of its fragment
 * (the learner gets the newest Θ_p; a resync stays a resync), so a learner holds at most
 * one waiting entry per fragment, referencing the shared bytes; each replacement is
 * counted (sends_superseded) and reported (a BEHIND event, at most one per learner per
 * refusals_every).  What waits for a connection that ends is dropped: the next join sends
 * the whole model.  The net's frame_max, in_max and mem_max are raised to what the
 * layout's largest fragment needs (dlc_srt_new), and the learner's likewise.
 *
 *     dlc_srt_config sc = dlc_srt_default_config();
 *     sc.syncer = sp; sc.plan = plan; sc.theta0 = dlc_params_data(model);
 *     sc.listen = "127.0.0.1:0"; sc.net.secret_file = "OUT/secret"; sc.run = "r1";
 *     dlc_srt *s = dlc_srt_new(&sc);                // listening, its thread running
 *     int port = dlc_srt_port(s);
 *     dlc_srt_event ev;
 *     while (dlc_srt_poll(s, &ev, 100) >= 0) { if (ev.kind == DLC_SRT_MERGED) ...; }
 *     dlc_srt_free(s);
 *
 * The learner driver (dlc_lrt): the host's compute thread calls it between inner steps;
 * the transport's I/O thread moves the bytes and decodes every arrived fragment (the
 * net's two bounded queues are the mailbox between them); a codec thread of the driver
 * encodes each contribution (quantization, error feedback) while the next inner step
 * runs, and hands it to the transport.  Arrived fragments wait, decoded, in the mailbox
 * until dlc_lrt_step_done, which hands them to the state machine at the step boundary
 * (checked, and kept in their frames until applied: dlc_learner_receive_lent), then
 * reports the step and takes the outer gradients that
 * are due (one pass over those fragments).  Nothing in step_done waits on the network:
 * in a non-blocking preset the compute thread never waits (only for an encode of the
 * step before that is not done a whole step later: encode_wait_s); with `blocking` (or
 * dp) the host calls dlc_lrt_wait while the state machine is WAITING.  In data parallel
 * the gradient leaves as f32, copied once, and the average arrives decoded into the
 * grad arena by the compute thread (it waits for it anyway).
 *
 *     dlc_lrt_config lc = dlc_lrt_default_config();
 *     lc.learner = lp; lc.params = params; lc.plan = plan; lc.connect = "127.0.0.1:7070";
 *     dlc_lrt *l = dlc_lrt_new(&lc);
 *     if (dlc_lrt_join(l, 30.0) != DLC_OK) fail(dlc_last_error());   // the whole model arrived
 *     for (;;) {
 *         inner step on params;
 *         dlc_lrt_step_done(l, tokens, seconds);
 *         if (dlc_lrt_state(l) == DLC_LEARNER_WAITING) dlc_lrt_wait(l, 60.0);
 *     }
 *     dlc_lrt_finish(l, 10.0, "finished");          // what was sent comes back, then BYE
 *     dlc_lrt_free(l);
 *
 * Threads: a dlc_srt may be called from any one host thread (its calls take the lock its
 * thread holds while it drives the syncer); a dlc_lrt from one thread only (the compute
 * thread), never concurrently.  The learner's codec thread reads the outer gradient and
 * writes the error feedback of the fragment it encodes, which the state machine lends it
 * until the next dlc_lrt call takes the encode back (learner.h, "Deferred encoding"); the
 * I/O thread reads only the driver's fragment sizes.  Errors: negative dlc_status, message in dlc_last_error()
 * of the calling thread.
 */
#ifndef DILOCO_RT_H
#define DILOCO_RT_H

#include <stdint.h>
#include "diloco/learner.h"
#include "diloco/net.h"
#include "diloco/run.h"
#include "diloco/syncer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Capacity of one driver's queue of host events; past it the oldest are dropped
 * (counted in dlc_srt_stats.events_dropped). */
#define DLC_RT_EVENTS_MAX 65536
/* Longest text of an event (why a peer was refused or lost). */
#define DLC_RT_TEXT_MAX (DLC_PROTO_TEXT_MAX + 128)

/* ---- the syncer ---- */

typedef struct dlc_srt_config {
    dlc_syncer_params syncer;   /* learners = M; timeout is forced to 0 (the transport's) */
    const dlc_plan *plan;       /* borrowed; must outlive the driver */
    const float *theta0;        /* the initial global model (borrowed during new, copied) */
    dlc_net_config net;         /* secret or secret_file, timeouts, TLS; hello, layout and
                                 * inline_io are set by the driver (strings copied) */
    const char *listen;         /* "HOST:PORT" (port 0: any free one) */
    const char *resume;         /* a syncer checkpoint (dlc_srt_save) to start from, with the
                                 * next epoch; theta0 is then not used (the learners that had
                                 * said BYE are still gone: info.bye).  NULL: a new run */
    const char *run;            /* the run id learners must present ("" allowed) */
    const dlc_run_params *run_params; /* the run's description (core/run.h; borrowed during
                                 * new), stated in the WELCOME: a learner whose run differs is
                                 * refused with the first differing field named; NULL: not
                                 * compared */
    int start_learners;         /* the start gate of a new run (not a resumed one): the first
                                 * learners to connect wait, without the model, until this
                                 * many are connected, then all join at once and start the
                                 * schedule together (one that a slow launcher started late
                                 * would otherwise join at the others' step and skip the
                                 * steps before it); 0..learners, 0: no gate */
    /* Refusals (connections refused before they joined, messages refused) are reported in
     * bounded form, whatever their rate: the first of each reason in an interval of
     * refusals_every seconds as a REFUSED event, the rest counted, and at the interval's
     * end one REFUSALS event with the counts by reason and by address (10 s; > 0). */
    double refusals_every;
    double start_timeout;       /* seconds after the first reached the gate that it opens
                                 * for those there, whoever is missing (>= 0, finite) */
    /* A shard of a sharded syncer (docs/shards.md): shard `shard` (0-based) of `shards`
     * owns the fragments dlc_plan_deal gives it, and its WELCOME states the deal (`own`)
     * and `shards` endpoints: "" for itself, endpoints[k] for shard k when given (NULL or
     * NULL entries: "*", known to the learner from the run's address file).  A learner
     * that does not speak "sharded" is refused, named.  shards 0 or 1: one syncer owning
     * every fragment.  Not with dp. */
    int shard, shards;
    const char *const *endpoints;
    /* Standbys (docs/shards.md, "Standbys").  Every syncer (not dp) takes one standby: a
     * process that connects with the "standby" capability gets, before anything else, a
     * whole replica of each fragment it owns, then the replica of every merge; a merge
     * goes to no learner before the standby acknowledged it (dlc_syncer_set_replicated).
     * A second standby while one is attached is refused; a standby lost releases what
     * waited for it, and the syncer goes on alone.
     * standby_of ("HOST:PORT", or alternates "A|B"): this syncer is the standby of the
     * primary there (made with the same recipe, plan and shard).  It listens at `listen`
     * but refuses learners (ERROR shutdown, which learners retry at their next address)
     * until it takes over: once it has caught up (a whole replica of each of its
     * fragments) and then not reached its primary for `lease` seconds, it stamps the
     * primary's epoch + 1, takes what learners stamped with the primary's epoch as its
     * own (their contributions in flight merge here), and serves.  NULL: a primary. */
    const char *standby_of;
    double lease;               /* seconds (> 0; 0: the net's timeout_s) */
} dlc_srt_config;

/* Defaults: dlc_syncer_default_params, dlc_net_default_config, listen "127.0.0.1:0", run "",
 * no start gate. */
DLC_API dlc_srt_config dlc_srt_default_config(void);

typedef struct dlc_srt dlc_srt; /* opaque */

/* Builds the syncer, listens and starts the driver's thread.  NULL with the message in
 * dlc_last_error() (a bad parameter named, the address in use). */
DLC_API dlc_srt *dlc_srt_new(const dlc_srt_config *cfg);
/* Stops the thread, closes every connection (flushing up to the net's drain timeout) and
 * frees everything.  NULL is a no-op. */
DLC_API void dlc_srt_free(dlc_srt *s);
/* Frees it as a killed process ends (chaos under `run`, docs/shards.md "Standbys"): no BYE
 * to its standby, which then takes over after its lease; its connections closed.  NULL is a
 * no-op. */
DLC_API void dlc_srt_kill(dlc_srt *s);
DLC_API int dlc_srt_port(const dlc_srt *s); /* the port listened on */

typedef enum dlc_srt_event_kind {
    DLC_SRT_MERGED,   /* a round closed: merge (contribs owned by the event) */
    DLC_SRT_JOINED,   /* learner connected (or reconnected) and was sent the whole model */
    DLC_SRT_LOST,     /* learner's connection ended (text: why) */
    DLC_SRT_REJECTED, /* a contribution of learner was not merged (reason, fragment) */
    DLC_SRT_REFUSED,  /* a connection or message was refused (learner -1 before WELCOME; text):
                       * the first of its reason in the current refusals_every interval */
    DLC_SRT_BYE,      /* learner left for good (text: its reason) */
    DLC_SRT_REPLACED, /* learner's live-looking connection, silent for part of the timeout,
                       * gave way to a new one claiming its id (text: both addresses); a
                       * JOINED follows.  A claim on the id of a learner heard from
                       * recently is refused instead (REFUSED, code "conflict") */
    DLC_SRT_REFUSALS, /* the refusals of the last refusals_every seconds, when some were not
                       * each a REFUSED event: count, and text with the counts by reason
                       * and by address (the DLC_SRT_REFUSAL_ADDRS busiest, then "others") */
    DLC_SRT_BEHIND,   /* learner's queue is full and merged fragments to it wait
                       * (back-pressure, at the top): one waiting was replaced by a newer version
                       * of its fragment (fragment; count: replaced since the last BEHIND
                       * of this learner, interval: over how long; at most one per learner
                       * per refusals_every), or so many other sends waited that it was cut
                       * off to rejoin (text says which) */
    DLC_SRT_STANDBY,  /* replication (text says which): a primary's standby attached, was
                       * refused or lost; a standby reached or lost its primary, refused a
                       * replica, or took over (count: the epoch it stamps from then on) */
    DLC_SRT_EVENT_COUNT
} dlc_srt_event_kind;
DLC_API const char *dlc_srt_event_name(dlc_srt_event_kind k); /* "merged", "joined", ... */

typedef struct dlc_srt_event {
    dlc_srt_event_kind kind;
    double time;              /* seconds since the driver started */
    double clock;             /* the same instant on the driver's clock (dlc_rt_clock, or
                               * the config's net.clock) */
    int learner;              /* -1 when unknown */
    int fragment;             /* REJECTED, BEHIND */
    dlc_reject_reason reason; /* REJECTED */
    dlc_merge_info merge;     /* MERGED: merge.contribs owned by the event */
    char text[DLC_RT_TEXT_MAX];
    dlc_merge_contrib *owned_; /* freed by dlc_srt_event_release */
    int64_t count;            /* REFUSALS: refusals in the interval; BEHIND: fragments replaced */
    double interval;          /* REFUSALS, BEHIND: its length (s) */
} dlc_srt_event;

/* The next event: 1, 0 when none arrived within timeout_ms (-1: wait for ever), or a
 * negative status (the driver's thread failed: the message says why).  Release every
 * event taken. */
DLC_API int dlc_srt_poll(dlc_srt *s, dlc_srt_event *ev, int timeout_ms);
DLC_API void dlc_srt_event_release(dlc_srt_event *ev);

/* The current global model into arena (laid out as the plan's model). */
DLC_API dlc_status dlc_srt_global(dlc_srt *s, float *arena);
/* Writes the syncer's whole state to `path` (dlc_syncer_save: atomic, so a kill at any
 * moment leaves the previous file or this one), with n metadata key/value pairs of the
 * host's, and the driver's own "rt.bye": the learners that said BYE and have not come
 * back (0-based ids, comma-separated), which a resumed driver restores, so that a run
 * whose learners all finished before the restart is seen to be over (the key is refused
 * from the host). */
DLC_API dlc_status dlc_srt_save(dlc_srt *s, const char *path, int n, const char *const *keys,
                                const char *const *values);
/* The epoch the syncer stamps (1 for a new run, the checkpoint's + 1 after a resume). */
DLC_API int64_t dlc_srt_epoch(dlc_srt *s);
/* The minimum quorum from now on (0: every live learner). */
DLC_API dlc_status dlc_srt_set_quorum(dlc_srt *s, int quorum);
/* Merges every open round holding a contribution (the end of a run). */
DLC_API dlc_status dlc_srt_flush(dlc_srt *s);

/* WAN emulation of learner m's link, both directions, on the syncer's side of it
 * (dlc_net_shape on what the syncer sends, dlc_net_shape_in on what it receives): a
 * bandwidth in bytes/s (0: no cap, else >= 1000) and a one-way latency in seconds
 * (0..60).  Takes effect at once, on a transfer under way too, and holds for m's
 * connections to come (a reconnect, a restarted learner) until changed; (0, 0) removes
 * it.  The learner's own end stays unshaped: both directions are emulated here. */
DLC_API dlc_status dlc_srt_shape(dlc_srt *s, int m, double rate_bytes_s, double latency_s);
/* Cuts learner m's link for `seconds` (> 0, INFINITY: for good; a cut under way is
 * extended or shortened to end then), or ends a cut now (0).  While cut the syncer's side
 * of m's connection is neither read nor written (dlc_net_cut): nothing is delivered
 * either way, what is sent waits, and a cut longer than the transport's timeout loses
 * m on both ends (LOST; the learner trains on and reconnects).  A connection m makes
 * during the cut gets through the handshake (only its HELLO says which learner it is)
 * and is then held, cut, without joining; when the cut ends the surviving connection
 * resumes, or the held one joins and is sent the whole model. */
DLC_API dlc_status dlc_srt_cut(dlc_srt *s, int m, double seconds);

/* Stops the driver's thread for `seconds` (> 0; INFINITY: for good), as SIGSTOP stops a
 * process (chaos `pause` of the syncer under `run`, docs/chaos.md): its transport is not
 * turned (nothing read or written, no heartbeat: peers see silence and time it out after
 * the net's timeout_s), no timer runs and no event is posted; then it goes on with its
 * state, its timers late.  The host's calls (poll of what was posted before, global,
 * save, learner, stats) still answer.  A pause under way is replaced (0: it goes on
 * now).  With a standby, a primary paused for longer than timeout_s + the standby's lease
 * is taken over; it then stamps an epoch its learners no longer follow: they refuse what
 * it sends and leave it for their next address (fencing, docs/shards.md).  DLC_ERR_ARG
 * for a negative or NaN duration. */
DLC_API dlc_status dlc_srt_pause(dlc_srt *s, double seconds);
/* Seconds the pause under way lasts still (INFINITY: for good), 0 when not paused. */
DLC_API double dlc_srt_paused(dlc_srt *s);

/* What the driver knows of learner m. */
typedef struct dlc_srt_learner_info {
    int connected;            /* a READY connection is bound to m */
    int joined;               /* m connected at least once */
    int bye;                  /* m said BYE (finished) and has not come back */
    int64_t steps;            /* its schedule step, from its last heartbeat or contribution */
    int64_t tokens;           /* tokens it reported (its heartbeats), this incarnation */
    double step_time;         /* its reported step-time EMA (s), 0 unknown */
    double best_step_time;    /* the smallest step_time it reported here: its healthy
                               * rate, which a slow patch (a shared core, a pause) does
                               * not lower; 0 unknown */
    double heard;             /* driver time of its last frame, -1 never */
    double absent;            /* s since its connection ended (since the driver started if it
                               * never connected to this one), 0 while connected: what a host
                               * compares with its deadline for learners to come back */
    int64_t merged;           /* its contributions that entered a merge */
    double merged_steps;      /* its steps that entered merges, each once (dlc_syncer_merged_steps) */
    int64_t joins;            /* times it joined */
    uint64_t bytes_in, bytes_out; /* wire bytes from and to it, all its connections */
    double rate, latency;     /* its link's emulation (dlc_srt_shape), 0: none */
    double cut;               /* seconds its cut lasts still (INFINITY: for good), 0: not cut */
    int held;                 /* sends waiting for room in its queue (back-pressure, above) */
    int64_t held_bytes;       /* their payload bytes */
    int64_t queued_bytes;     /* bytes in its connection's queue (the transport's), now */
    double tokens_per_step;   /* its tokens per inner step, as its contributions count them
                               * (an island of R ranks trains R batches a step), 0 unknown */
} dlc_srt_learner_info;
DLC_API dlc_status dlc_srt_learner(dlc_srt *s, int m, dlc_srt_learner_info *out);

/* The reasons refusals are counted by: the transport's error codes (dlc_proto_errcode),
 * then "message" (a ready learner's message the syncer refused). */
#define DLC_SRT_REFUSAL_REASONS (DLC_PERR_COUNT + 1)
/* Addresses a REFUSALS event names (the busiest of its interval). */
#define DLC_SRT_REFUSAL_ADDRS 8

typedef struct dlc_srt_stats {
    double now;               /* seconds since the driver started */
    int learners, live;
    int64_t merges, rejects, refused, events_dropped;
    /* Sends to learners: dropped (its connection was gone or going: the next join
     * resyncs it whole), held (the learner's queue was full: it waited for room, in
     * order), superseded (a held FRAGMENT replaced by a newer one of its fragment) */
    int64_t sends_dropped, sends_held, sends_superseded;
    int64_t refused_by[DLC_SRT_REFUSAL_REASONS]; /* refused, by reason (above) */
    double useful_tokens;     /* Σ over merges of dlc_merge_info.useful_tokens */
    uint64_t bytes_in, bytes_out; /* wire bytes, all peers, all frame types */
    uint64_t bytes_in_type[DLC_FRAME_TYPE_COUNT], bytes_out_type[DLC_FRAME_TYPE_COUNT];
    /* replication: a primary: standby 1 while one is attached, replicas sent (whole ones
     * included) and acks taken; a standby (standby_of): standby 2 while it waits, 3 once
     * it took over, replicas it applied */
    int standby;
    int64_t replicas, acks;
} dlc_srt_stats;
DLC_API dlc_status dlc_srt_get_stats(dlc_srt *s, dlc_srt_stats *out);

/* ---- the learner ---- */

typedef struct dlc_lrt_config {
    dlc_learner_params learner; /* id < 0: the WELCOME assigns one */
    dlc_params *params;         /* the model (borrowed; must outlive the driver) */
    const dlc_plan *plan;       /* borrowed; must outlive the driver */
    float *const *tensors;      /* NULL: the model lives in params' arena; else where each of
                                 * params' tensors lives, the arena only its layout
                                 * (dlc_learner_bind_tensors; not with dp; borrowed, and the
                                 * buffers, for the driver's life) */
    dlc_net_config net;         /* secret or secret_file, timeouts, reconnect, TLS; hello and
                                 * layout are set by the driver (strings copied) */
    const char *connect;        /* "HOST:PORT" of the syncer (copied) */
    const char *run;            /* the run id ("" allowed) */
    const dlc_run_params *run_params; /* the run's description (borrowed during new), stated
                                 * in the HELLO (NULL: not stated, the syncer compares model
                                 * and plan only) */
    int hold;                   /* contributions kept while the syncer is unreachable or
                                 * its queue full (oldest dropped past it; a newer one of
                                 * the same fragment and base replaces a kept one, which
                                 * it holds whole); 0: 2 × the fragments */
    int inline_codec;           /* 1: encode contributions and decode fragments on the
                                 * calling thread, inside the calls (for comparisons); 0
                                 * (default): off it ("Threads" below) */
    /* While dlc_lrt_join, dlc_lrt_wait or dlc_lrt_finish's drain waits,
     * interrupted(interrupt_arg) is asked at least every 100 ms; nonzero ends the wait at
     * once (join, wait: DLC_ERR_STATE saying what it waited for; the finish says its BYE
     * without the merges it waited for).  A host's signal flag: Ctrl-C honoured while
     * joining; a host that finishes because of a signal clears its flag first, so that the
     * drain a stop asks for runs and a second signal ends it.  NULL (default): never. */
    int (*interrupted)(void *arg);
    void *interrupt_arg;
} dlc_lrt_config;

DLC_API dlc_lrt_config dlc_lrt_default_config(void);

typedef struct dlc_lrt dlc_lrt; /* opaque */

/* Starts the transport and connects (the state machine is made once the WELCOME names
 * the learner id).  NULL with the message in dlc_last_error(). */
DLC_API dlc_lrt *dlc_lrt_new(const dlc_lrt_config *cfg);
DLC_API void dlc_lrt_free(dlc_lrt *l); /* closes the connection (flushing), NULL ok */

/* Waits up to timeout_s for the connection and the whole model: DLC_OK in state
 * TRAINING, else DLC_ERR_STATE naming what did not arrive and the last refusal (a
 * mismatch named by the syncer, a wrong secret). */
DLC_API dlc_status dlc_lrt_join(dlc_lrt *l, double timeout_s);
/* An inner step finished: hands the arrived fragments to the state machine, then
 * dlc_learner_step_done(tokens, seconds), sends what is due, heartbeats.  Never waits. */
DLC_API dlc_status dlc_lrt_step_done(dlc_lrt *l, int64_t tokens, double seconds);
/* The step boundary's first half, for a host that checks the values a step reads
 * (client.h): the encodes of earlier steps collected and the arrived fragments handed to the state
 * machine, as dlc_lrt_step_done would; then mask[P] gets the fragments whose model values
 * that step_done will read (dlc_learner_step_reads), and the count is returned (a
 * negative dlc_status on error).  The next call must be dlc_lrt_step_done, which then
 * takes no more arrivals (those wait for the next boundary). */
DLC_API int dlc_lrt_step_reads(dlc_lrt *l, uint8_t *mask);
/* dp: the gradient is in the grad arena: sends it (state WAITING). */
DLC_API dlc_status dlc_lrt_gradient(dlc_lrt *l, int64_t tokens);
/* The final flush (sync.final_flush): sends every fragment trained since it was last
 * applied with no contribution in flight (dlc_learner_flush); *sent (may be NULL): how
 * many.  Then dlc_lrt_finish waits for their merges. */
DLC_API dlc_status dlc_lrt_flush(dlc_lrt *l, int *sent);
/* A host schedule: sends fragment p's contribution now. */
DLC_API dlc_status dlc_lrt_contribute(dlc_lrt *l, int p);
/* While the state machine is WAITING (blocking presets, dp) or JOINING (a resync after a
 * reconnect): takes messages as they arrive, up to timeout_s.  DLC_OK once it may step
 * again (dp: the averaged gradient is in the grad arena; otherwise what it waited for is
 * applied, dlc_learner_step_begin, before it returns), DLC_ERR_STATE at the deadline
 * naming what it waited for. */
DLC_API dlc_status dlc_lrt_wait(dlc_lrt *l, double timeout_s);
/* Takes what the transport brought (connections made or lost, messages: a merge is stashed
 * for the next step boundary), waiting up to timeout_s for the first; never steps.  For a
 * host between steps or after its last one (a learner at its end waiting for a standby to
 * take over its shard: dlc_lrt_get_stats' connected). */
DLC_API dlc_status dlc_lrt_pump(dlc_lrt *l, double timeout_s);
/* A fault on the learner (a non-finite loss or parameter, the host's check, e.g.
 * dlc_lrt_check_finite): instead of dlc_lrt_step_done for the failed step, rolls the
 * model back in place to the last global model (dlc_learner_rollback, learner.h: each
 * fragment's last global value, a merge that waited taken whole, counters restarted,
 * contributions already sent left outstanding).  Takes the messages that arrived first,
 * so the model it rolls back to is the newest it has.  The host then resets its inner
 * optimizer.  DLC_ERR_STATE before the join and in data parallel (learner.h). */
DLC_API dlc_status dlc_lrt_rollback(dlc_lrt *l);
/* DLC_OK when every element of the model is finite, else DLC_ERR_RANGE with the first
 * one that is not named ("parameter 'h' element 3 is nan"), and *tensor (0-based),
 * *index (in the tensor) and *value; any of them may be NULL.  One pass over the model:
 * cheap beside an inner step. */
DLC_API dlc_status dlc_lrt_check_finite(const dlc_lrt *l, int *tensor, int64_t *index, float *value);
/* The end: waits up to timeout_s for the fragments it sent to come back merged, then
 * says BYE (why: its reason) and flushes. */
DLC_API dlc_status dlc_lrt_finish(dlc_lrt *l, double timeout_s, const char *why);

DLC_API dlc_learner_state dlc_lrt_state(const dlc_lrt *l); /* JOINING before the WELCOME */
DLC_API int dlc_lrt_id(const dlc_lrt *l);                  /* -1 before the WELCOME */
/* dp: 1 when the last dlc_lrt_wait ended without the averaged gradient of the step: the
 * syncer refused it or lost its round (a restart), or the learner started to replay
 * (below); the step's gradient is void, the host skips its optimizer step, replays when
 * dlc_lrt_replaying says so, and runs the step again. */
DLC_API int dlc_lrt_step_void(const dlc_lrt *l);
/* dp, replay (learner.h, "Replay"): a learner that restored a checkpoint of step k (its
 * model and optimizer state; dlc_lrt_set_schedule_step(k)), or holds the initial model
 * at step 0, catches up with the run by running its optimizer on the averages of the
 * steps it missed:
 *
 *     dlc_lrt_replay(l);                       // asks, when the run is past its step
 *     while (dlc_lrt_replaying(l)) {
 *         if (!dlc_lrt_replay_ready(l)) dlc_lrt_wait(l, 60.0);
 *         if (dlc_lrt_replay_ready(l)) {       // the average of the next step is in the grads
 *             clip, optimizer step with the learning rate of that step;
 *             dlc_lrt_replayed(l);
 *         }
 *     }
 *
 * A dp learner also starts replaying by itself when a resync says the run is past its
 * step (its gradient refused for a step the others have passed): the host checks
 * dlc_lrt_replaying before each step.  dlc_lrt_replay is DLC_ERR_STATE when the syncer
 * does not replay (dlc_lrt_replays 0: an older syncer), a no-op when not dp. */
DLC_API dlc_status dlc_lrt_replay(dlc_lrt *l);
DLC_API dlc_status dlc_lrt_replayed(dlc_lrt *l);
DLC_API int dlc_lrt_replaying(const dlc_lrt *l);
DLC_API int dlc_lrt_replay_ready(const dlc_lrt *l);
DLC_API int dlc_lrt_replays(const dlc_lrt *l);
DLC_API const dlc_learner *dlc_lrt_learner(const dlc_lrt *l); /* NULL before; for queries */
/* Why the syncer last refused or dropped this learner, as it said (a BYE, a refused
 * reconnect: "learner 1 is live, connected from ..."), "" if it never did; valid until
 * the next call into l. */
DLC_API const char *dlc_lrt_last_refusal(const dlc_lrt *l);
/* dlc_learner_set_schedule_step after a join: the host restored a checkpoint of that step. */
DLC_API dlc_status dlc_lrt_set_schedule_step(dlc_lrt *l, int64_t step);

typedef enum dlc_lrt_event_kind {
    DLC_LRT_APPLIED,      /* fragment (version) applied to the model (resync: taken whole) */
    DLC_LRT_CONNECTED,    /* the connection to the syncer is READY (again) */
    DLC_LRT_DISCONNECTED, /* it was lost (text: why); the learner trains on */
    DLC_LRT_PHASE,        /* its schedule step moved (learner.h, DLC_LACT_PHASE): schedule,
                           * by lag steps, at boundary; fragment the merge that told, -1 a
                           * resync */
    DLC_LRT_ROOM,         /* at boundary, the transport had room for `room` contributions
                           * and fewer than were due: the others waited (learner.h,
                           * dlc_learner_set_send_room; the merge tape keeps it, so that a
                           * replay sends when the run did) */
    DLC_LRT_EVENT_COUNT
} dlc_lrt_event_kind;
DLC_API const char *dlc_lrt_event_name(dlc_lrt_event_kind k);

typedef struct dlc_lrt_event {
    dlc_lrt_event_kind kind;
    double time;
    int fragment, resync;
    int64_t version, lag;
    int64_t boundary;         /* APPLIED, PHASE: the step boundary, the inner steps the learner
                               * had run since it joined (0: applied while joining) */
    int64_t schedule;         /* PHASE: the schedule step from then on */
    int64_t unreplayed;       /* PHASE, dp: steps skipped unreplayed (learner.h), else 0 */
    int room;                 /* ROOM: the contributions the learner could send there */
    char text[DLC_RT_TEXT_MAX];
} dlc_lrt_event;
/* The next event (nothing waits: events come from the calls above): 1 or 0. */
DLC_API int dlc_lrt_poll(dlc_lrt *l, dlc_lrt_event *ev);

typedef struct dlc_lrt_stats {
    double now;
    double wait_s;            /* time spent inside dlc_lrt_wait and dlc_lrt_join */
    double call_s;            /* time spent inside dlc_lrt_step_done (the compute thread's cost) */
    double encode_wait_s;     /* of which waiting for the codec thread to finish an encode
                               * (it had not within a whole inner step) */
    int64_t encoded;          /* contributions the codec thread encoded */
    int64_t decoded;          /* fragments the I/O thread decoded */
    int connected;
    int64_t sent, held, held_dropped, applied, reconnects;
    int64_t held_superseded;  /* held contributions that a newer one of the same fragment
                               * and base replaced before they left (nothing lost) */
    uint64_t bytes_in, bytes_out;
    int64_t rollbacks;        /* dlc_lrt_rollback calls that succeeded */
    int64_t replayed;         /* dp: averages replayed (dlc_lrt_replayed) */
    int64_t unreplayed;       /* dp: steps skipped because the syncer no longer held them */
    int64_t reused;           /* payloads encoded into the buffer of an earlier send, kept
                               * (one at most) instead of a fresh allocation */
    int64_t deferred;         /* due contributions that trained on because one waited for
                               * the transport (dlc_learner_set_send_room), sent later */
    int64_t left;             /* connections it left for its next address: the syncer there
                               * stamped an older epoch than the one it follows (an
                               * incarnation a standby took over from: dlc_srt_pause) */
} dlc_lrt_stats;
DLC_API dlc_status dlc_lrt_get_stats(dlc_lrt *l, dlc_lrt_stats *out);

/* Seconds on the monotonic clock (the drivers' time base, from an arbitrary origin). */
DLC_API double dlc_rt_clock(void);

/* The syncer's address file (`diloco-lua syncer --address-file`): its first line
 * "HOST:PORT" into addr, a line "run ID" into run (empty if none; cap and rcap bytes
 * each), waiting up to timeout_s (wall time) for the file to appear.  DLC_OK, or an
 * error naming the file (DLC_ERR_STATE when it did not appear in time, DLC_ERR_IO when
 * it cannot be read). */
DLC_API dlc_status dlc_rt_address_file(const char *path, double timeout_s, char *addr, size_t cap, char *run,
                                       size_t rcap);

/* The address learners reach a syncer at, as its address file states it
 * (`diloco-lua syncer --address-file`): `advertise` when given ("HOST:PORT", or "HOST"
 * or "HOST:0" for the port the syncer is bound to, `port`); else the host of `listen`
 * ("HOST:PORT") with the bound port, where a wildcard host ("0.0.0.0", "[::]", "::", "*"
 * or none) becomes the IPv4 address of the interface that routes off this host (the
 * default route's; without one, the first interface that is up and not loopback; without
 * any, 127.0.0.1).  Into out (cap bytes).  DLC_OK, or DLC_ERR_ARG naming a malformed
 * advertise or a port out of range. */
DLC_API dlc_status dlc_rt_advertise(const char *listen, int port, const char *advertise, char *out, size_t cap);

/* An injected clock.  A driver's config may name its own clock in net.clock
 * (dlc_net_config): then the driver's time (events' time and clock, the syncer's grace
 * windows and start gate, cuts, the learner's round deadlines) and every timer of its
 * transport follow that clock instead of dlc_rt_clock, so a test moves time by hand and
 * waits on events, never on the wall clock.  After each move the host calls
 * *_clock_moved.  dlc_srt_clock_moved returns once the syncer's thread has acted on the
 * new time: its timers (grace windows, the gate, cuts) and its transport's (timeouts,
 * heartbeats, latency) that fell due have run, and the events they caused are queued
 * for dlc_srt_poll.  dlc_lrt_clock_moved returns once the transport's timers have run;
 * the learner's own take the new time at its next call.  How long a call
 * may block (its timeout_s) stays wall time, as do dlc_lrt_stats' wait_s and call_s. */
DLC_API dlc_status dlc_srt_clock_moved(dlc_srt *s);
DLC_API dlc_status dlc_lrt_clock_moved(dlc_lrt *l);

#ifdef __cplusplus
}
#endif
#endif
