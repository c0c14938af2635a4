/*
 * client.h - bring your own trainer: a host process (a C program, a Python one through
 * python/diloco) joins a run as a learner, or hosts its syncer, with its own parameters
 * in its own buffers.  The learner client and the server are the real-time drivers of
 * rt.h (dlc_lrt, dlc_srt) over the transport, on host memory.  docs/embedding.md is the
 * guide.
 *
 * A learner:
 *
 *     float *w = ..., *b = ...;                    // the host's model, f32, contiguous
 *     dlc_client_tensor t[2] = {{"w", w, 4096}, {"b", b, 64}};
 *     dlc_client_config cc = dlc_client_default_config();
 *     cc.tensors = t; cc.count = 2;
 *     cc.run = "{\"sync\": {\"preset\": \"decoupled\", \"H\": 24}}";   // run.h, dlc_run_parse
 *     cc.connect = "10.0.0.1:7070"; cc.secret_file = "secret";
 *     dlc_client *c = dlc_client_new(&cc);          // joined: w and b hold the global model
 *     if (!c) fail(dlc_last_error());
 *     for (;;) {
 *         the host's inner step on w and b;
 *         if (dlc_client_step(c, tokens) != DLC_OK) fail(dlc_last_error());
 *     }
 *     dlc_client_finish(c, 30.0);                   // its last contributions merged, BYE
 *     dlc_client_free(c);
 *
 * The buffers are the host's: the library reads and writes them only inside
 * dlc_client_new and dlc_client_step, on the calling thread.  Inside dlc_client_step it
 * takes the host's values of the fragments the step reads (those due to leave, those a
 * merge is mixed into; most steps none), hands the step to the learner state machine (learner.h: the
 * fragments that are due leave as contributions, encoded on the driver's codec thread),
 * and writes every merged fragment that arrived into the host's buffers (alpha mixing,
 * tau, as the run says); with a blocking preset (diloco) it waits there for the round.
 * In a non-blocking preset (streaming, decoupled) it never waits on the network.  The
 * connection, heartbeats, reconnects and the resync of the whole model after a lost
 * connection are the driver's (its I/O thread).  Data parallel needs the host's
 * gradients and is not offered here (DLC_ERR_ARG).
 *
 * A syncer: dlc_server_new listens and serves on the library's thread; the host takes
 * its events (merges, joins, losses) with dlc_server_poll, or through its on_event
 * callback (dlc_server_dispatch in the host's own loop, or on a library thread), and
 * reads the global model into its buffers with dlc_server_global.
 *
 * Threads: one dlc_client from one thread at a time (calls are not concurrent); distinct
 * clients are independent.  A dlc_server's calls may come from any one thread (rt.h).
 * Errors: a negative dlc_status with the message in dlc_last_error() of the calling
 * thread; nothing prints or exits.
 */
#ifndef DILOCO_CLIENT_H
#define DILOCO_CLIENT_H

#include <stdint.h>
#include "diloco/rt.h"
#include "diloco/run.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One parameter tensor of the host: `numel` contiguous floats at `data`.  The order of
 * the list and the names and sizes make the model's layout: every learner and the
 * syncer of a run must list the same (a learner whose layout differs is refused). */
typedef struct dlc_client_tensor {
    const char *name;     /* non-empty, unique */
    float *data;
    int64_t numel;        /* >= 1 */
    int ndim;             /* 0: a vector of numel; else the shape (its product is numel),
                           * as a diloco-lua learner of the same model has it (the layout
                           * compares names and shapes) */
    const int64_t *shape;
} dlc_client_tensor;

typedef struct dlc_client_config {
    const dlc_client_tensor *tensors; /* borrowed during new; the buffers for the client's life */
    int count;                  /* >= 1 */
    const char *run;            /* the run as text (dlc_run_parse); NULL: decoupled's defaults */
    const dlc_run_params *run_params; /* or as a struct (wins over run); its hashes are set
                                 * from the layout */
    const char *connect;        /* "HOST:PORT" of the syncer, or "@FILE": its address file
                                 * (`diloco-lua syncer --address-file`; waited for) */
    const char *secret_file;    /* a file holding the run's secret, or */
    const char *secret;         /* the secret itself (NUL-terminated); one of the two */
    const char *run_id;         /* the run id the syncer serves; NULL: the address file's, or "" */
    int id;                     /* the learner id, from 1 as `diloco-lua learner --id` numbers
                                 * them; 0 (default): the syncer assigns one.  (Config versions
                                 * 1 and 2: 0-based, -1 assigned.) */
    double join_timeout;        /* seconds to connect and receive the whole model (60) */
    double wait_timeout;        /* blocking presets: the longest wait for a round (300 s) */
    double heartbeat;           /* seconds between heartbeats (1) */
    /* The host's own state for a restart (its optimizer's moments, its data position; the
     * model itself comes back from the syncer at the join).  With state_dir set, the
     * client calls save_state(state_ctx, path, step) every save_every of its steps (0:
     * only at dlc_client_finish) and at dlc_client_finish: the host writes one file at
     * `path`, `step` being the run's step (dlc_client_schedule_step), and returns 0; the
     * client then publishes it atomically, in the layout of every learner's state
     * (docs/checkpoints.md), as STATE_DIR/checkpoint-STEP.host named by the checkpoint
     * STATE_DIR/checkpoint-STEP.safetensors (no tensors; metadata diloco.step,
     * diloco.learner, 1-based, diloco.run_id and diloco.host_state), and removes the one
     * before.  A save that fails (nonzero, or no file) publishes nothing: the last
     * published state stays whole.  dlc_client_new, after the join, calls
     * load_state(state_ctx, path, step) with the newest published state, if there is
     * one and it is this client's: a state of another run, or of another id the host
     * chose, is refused (DLC_ERR_STATE, naming both; an id the syncer assigned is not
     * compared).  A directory of an older version (state-STEP named by STATE_DIR/latest)
     * is still loaded.  Both callbacks run on the calling thread, inside the
     * client's calls. */
    const char *state_dir;
    int (*save_state)(void *ctx, const char *path, int64_t step);
    int (*load_state)(void *ctx, const char *path, int64_t step);
    void *state_ctx;
    int64_t save_every;         /* steps (>= 0) */
    /* Must be NULL.  (Driver mode, which ran a whole dlc_lrt_config through the client,
     * was removed in version 2: a host whose model already is a params arena and that
     * needs the driver's whole configuration, such as `diloco-lua learner`, makes the
     * driver itself with rt.h: dlc_lrt_new, dlc_lrt_join, dlc_lrt_step_done, and
     * dlc_rt_address_file for an "@FILE".  A config that sets it is refused, naming this.) */
    const dlc_lrt_config *driver;
} dlc_client_config;

/* Versions of the config structs.  A host passes the version of the header it was
 * built against (the macros below do), and the library reads only that version's fields,
 * taking its defaults for any added since: a host built against an older header keeps
 * working with a newer library, unchanged and unrebuilt.  A field is only ever added at
 * the end of a struct, with a new version; the number of a struct no library knows
 * (a host newer than the library) is refused, naming both.  The unversioned symbols
 * dlc_client_default_config, dlc_client_new, dlc_server_default_config and
 * dlc_server_new stay exported, as version 1, for hosts built before the versions. */
#define DLC_CLIENT_CONFIG_V1 1
/* Version 2: the structs are version 1's; `driver` is no longer read (driver mode was
 * removed: rt.h is the way to the drivers' whole configuration), and a config of any
 * version that sets it is refused.  A host that never set it is unaffected. */
#define DLC_CLIENT_CONFIG_V2 2
/* Version 3: the structs are version 2's; learner ids are numbered from 1 everywhere, as
 * the CLI, the metrics and the checkpoints number them: the client's `id` (0: assigned),
 * dlc_client_id, and the server's events (`learner`, 0 unknown).  A client or server
 * made from a version 1 or 2 config keeps numbering from 0 (-1 assigned or unknown). */
#define DLC_CLIENT_CONFIG_V3 3
#define DLC_CLIENT_CONFIG_VERSION DLC_CLIENT_CONFIG_V3
#define DLC_SERVER_CONFIG_V1 1
#define DLC_SERVER_CONFIG_V2 2
#define DLC_SERVER_CONFIG_V3 3
/* Version 4 (the server only): `shard` and `shards` at the end of dlc_server_config. */
#define DLC_SERVER_CONFIG_V4 4
/* Version 5 (the server only): `standby_of` and `lease` after them. */
#define DLC_SERVER_CONFIG_V5 5
#define DLC_SERVER_CONFIG_VERSION DLC_SERVER_CONFIG_V5
/* dlc_KIND_default_config_(): the defaults of config KIND (client, server) for the version
 * of this header, by value, through dlc_KIND_config_default_versioned. */
#define DLC_DEFAULT_CONFIG_FN_(KIND, VERSION)                              \
    static inline dlc_##KIND##_config dlc_##KIND##_default_config_(void) { \
        dlc_##KIND##_config c;                                             \
        dlc_##KIND##_config_default_versioned(VERSION, &c);                \
        return c;                                                          \
    }

/* Fills *cfg with the defaults: the fields of config version `version` only (nothing
 * past them is written).  DLC_OK, or DLC_ERR_ARG for NULL or a version unknown here. */
DLC_API dlc_status dlc_client_config_default_versioned(int version, dlc_client_config *cfg);
/* The defaults, for the version of this header (the one to use). */
DLC_DEFAULT_CONFIG_FN_(client, DLC_CLIENT_CONFIG_VERSION)
#define dlc_client_default_config() dlc_client_default_config_()
DLC_API dlc_client_config(dlc_client_default_config)(void); /* version 1 (see above) */

typedef struct dlc_client dlc_client; /* opaque */

/* Checks the config (a bad one named: the tensor, the run field), connects, joins and
 * writes the global model into the host's buffers.  NULL with the message in
 * dlc_last_error(): a refusal by the syncer names what differs (the layout, the run, the
 * secret); a deadline names what did not arrive. */
DLC_API dlc_client *dlc_client_new_versioned(int version, const dlc_client_config *cfg);
#define dlc_client_new(cfg) dlc_client_new_versioned(DLC_CLIENT_CONFIG_VERSION, (cfg))
DLC_API dlc_client *(dlc_client_new)(const dlc_client_config *cfg); /* version 1 */
/* Says BYE (if not finished) and closes.  NULL is a no-op. */
DLC_API void dlc_client_free(dlc_client *c);

/* After each inner step of the host, with the tokens it consumed (>= 0): see above.
 * DLC_ERR_RANGE (the step not taken) when a value it takes is not finite, naming it (a
 * fragment's values are taken when it is due, so a NaN is found within H steps); the
 * host may then call dlc_client_rollback.  DLC_ERR_IO when a save of the host's state
 * failed (the step was taken; the state before it stays published). */
DLC_API dlc_status dlc_client_step(dlc_client *c, int64_t tokens);
/* The same, with the seconds the step computed for (>= 0: the host's own measure, which
 * leaves out what it did between steps, an eval or a checkpoint; < 0: the time since the
 * last step returned, as dlc_client_step takes). */
DLC_API dlc_status dlc_client_step_timed(dlc_client *c, int64_t tokens, double seconds);
/* A fault on the host (a non-finite loss): its buffers go back to the last global model
 * (rt.h, dlc_lrt_rollback); the host resets its inner optimizer. */
DLC_API dlc_status dlc_client_rollback(dlc_client *c);
/* The end: sends what it trained since each fragment's last send, waits up to timeout_s
 * for its contributions to come back merged (writing them into the host's buffers), then
 * says BYE.  A client whose connection is down when it finishes (or goes down meanwhile)
 * leaves at once without its BYE: what it had not had merged is lost, and the syncer sees
 * it lost, not finished. */
DLC_API dlc_status dlc_client_finish(dlc_client *c, double timeout_s);
/* The same with the reason its BYE gives ("finished", "stopped by SIGTERM"; NULL:
 * "finished") and whether it first sends what it trained since each fragment's last send
 * (flush 1, as dlc_client_finish does; 0: not, e.g. a host leaving on an error). */
DLC_API dlc_status dlc_client_finish_why(dlc_client *c, double timeout_s, const char *why, int flush);

DLC_API int dlc_client_id(const dlc_client *c); /* its id (the one assigned, if it asked none):
                                                 * from 1 (config versions 1, 2: from 0) */
DLC_API int64_t dlc_client_steps(const dlc_client *c); /* dlc_client_step calls since the join */
/* The run's step this learner is at (learner.h, dlc_learner_schedule_step): its inner steps
 * plus those it skipped catching up with the others' rounds.  A host's learning-rate
 * schedule follows it, and a run of N steps ends when it reaches N. */
DLC_API int64_t dlc_client_schedule_step(const dlc_client *c);
DLC_API int64_t dlc_client_applied(const dlc_client *c); /* merged fragments written to the host */
DLC_API dlc_lrt *dlc_client_lrt(dlc_client *c);        /* the driver, for its stats (dlc_lrt_get_stats) */

/* ---- the syncer ---- */

struct dlc_server_event; /* below */

typedef struct dlc_server_config {
    const dlc_client_tensor *tensors; /* the layout, and the initial global model (copied) */
    int count;
    const char *run;            /* as for the client */
    const dlc_run_params *run_params;
    int learners;               /* M >= 1 */
    const char *listen;         /* "HOST:PORT" (port 0: any free one; default 127.0.0.1:0) */
    const char *secret_file, *secret;
    const char *run_id;         /* "" allowed */
    double timeout;             /* a silent learner is lost after this (5 s) */
    double heartbeat;           /* (1 s) */
    /* A callback for each event (a merge, a join, a loss, a rejection, a refusal, a BYE:
     * what `run` writes to its metrics), in order, instead of dlc_server_poll: on the
     * host's thread inside dlc_server_dispatch (its own event loop calls that), or with
     * event_thread = 1 on a thread of the library's, from dlc_server_new to
     * dlc_server_free.  There the callback must not call dlc_server_free (it may call
     * dlc_server_global and the dlc_srt functions of rt.h) and should return soon: the
     * events wait for it. */
    void (*on_event)(void *ctx, const struct dlc_server_event *ev);
    void *event_ctx;
    int event_thread;           /* 0/1 */
    /* Must be NULL: driver mode was removed in version 2 (as for the client): a host that
     * needs the syncer driver's whole configuration (resume from a checkpoint, the start
     * gate, TLS, the dp history), such as `diloco-lua syncer` and `run`, makes it with
     * rt.h's dlc_srt_new. */
    const dlc_srt_config *driver;
    /* Version 4: a shard of a syncer split by fragment (docs/shards.md): shard `shard`
     * (from 1) of `shards`, serving the fragments dealt to it; its clients are given every
     * shard's address in order ("HOST:PORT,HOST:PORT").  shards 0 or 1: one syncer. */
    int shard, shards;
    /* Version 5: a standby of the syncer (or shard) at `standby_of` ("HOST:PORT", or
     * alternates "A|B"; borrowed during dlc_server_new): it holds that primary's state from
     * a replica of every merge and takes over once it has not reached it for `lease`
     * seconds (0: `timeout`); its clients list it after the primary, "A|A2" (rt.h,
     * dlc_srt_config.standby_of; docs/shards.md, "Standbys").  NULL: a primary, which
     * takes one standby. */
    const char *standby_of;
    double lease;
} dlc_server_config;

/* As dlc_client_config_default_versioned, for the server's config. */
DLC_API dlc_status dlc_server_config_default_versioned(int version, dlc_server_config *cfg);
DLC_DEFAULT_CONFIG_FN_(server, DLC_SERVER_CONFIG_VERSION)
#define dlc_server_default_config() dlc_server_default_config_()
DLC_API dlc_server_config(dlc_server_default_config)(void); /* version 1 */

typedef struct dlc_server dlc_server; /* opaque */

DLC_API dlc_server *dlc_server_new_versioned(int version, const dlc_server_config *cfg);
#define dlc_server_new(cfg) dlc_server_new_versioned(DLC_SERVER_CONFIG_VERSION, (cfg))
DLC_API dlc_server *(dlc_server_new)(const dlc_server_config *cfg); /* version 1 */
DLC_API void dlc_server_free(dlc_server *s); /* NULL ok */
DLC_API int dlc_server_port(const dlc_server *s);
DLC_API dlc_srt *dlc_server_srt(dlc_server *s); /* poll its events, stats, flush (rt.h) */
/* A flat event for hosts that call through an FFI (python/diloco): the kind (rt.h's
 * dlc_srt_event_kind), the learner (from 1, 0 unknown; config versions 1 and 2: from 0, -1
 * unknown), the fragment and new version of a merge
 * (-1 otherwise), seconds since the server started, and the text of a loss, refusal or
 * BYE (cut to fit). */
typedef struct dlc_server_event {
    int kind;
    int learner;
    int fragment;
    int64_t version;
    double time;
    char text[256];
} dlc_server_event;
/* 1 with the next event, 0 when none came within timeout_ms (-1: wait for ever), or a
 * negative status (the server's thread failed; DLC_ERR_STATE when on_event takes the
 * events). */
DLC_API int dlc_server_poll(dlc_server *s, dlc_server_event *ev, int timeout_ms);
/* The host's event loop with on_event: waits up to timeout_ms (0: not at all, -1: for
 * ever) for an event, then calls on_event for it and every other event ready, on the
 * calling thread; returns how many, or a negative status (the server's thread failed;
 * DLC_ERR_STATE without on_event or with event_thread). */
DLC_API int dlc_server_dispatch(dlc_server *s, int timeout_ms);
/* "merged", "joined", "lost", "rejected", "refused", "bye", "replaced", "refusals", "behind"
 * (rt.h); NULL out of range. */
DLC_API const char *dlc_server_event_name(int kind);
/* The global model into the buffers of `tensors` (the layout the server was made with). */
DLC_API dlc_status dlc_server_global(dlc_server *s, const dlc_client_tensor *tensors, int count);

#ifdef __cplusplus
}
#endif
#endif
