/*
 * rt_internal.h - what the two drivers of libdiloco_rt share (rt/srt.c, rt/lrt.c):
 * owned copies of the configuration strings the transport keeps pointers to, the
 * payload layout and the HELLO a plan implies.  Private to rt/.
 */
#ifndef DILOCO_RT_INTERNAL_H
#define DILOCO_RT_INTERNAL_H

#include "diloco/frag.h"
#include "diloco/net.h"
#include "diloco/rt.h"
#include "diloco/run.h"

/* Copies of cfg's strings (secret, secret_file, TLS paths) and *run, owned by the
 * driver: cfg and *run are re-pointed at the copies. */
typedef struct rt_strings {
    char *secret, *secret_file, *cert, *key, *ca, *run;
} rt_strings;
dlc_status rt_strings_copy(rt_strings *s, dlc_net_config *cfg, const char **run);
void rt_strings_free(rt_strings *s);

/* The payload sizes of plan's fragments (*numel allocated, the caller frees it). */
dlc_status rt_layout(const dlc_plan *plan, dlc_codec_params codec, dlc_proto_layout *out, int64_t **numel);
/* The net's limits raised to what the run's layout needs (numel: P fragments' floats):
 * frame_max to the largest fragment as f32 (the largest any codec or a dp gradient
 * takes) with its header, in_max to frame_max, mem_max to twice frame_max.  A fragment
 * beyond the protocol's largest frame is refused, named, with what to change.  A
 * syncer's (who "syncer...") frame_max also covers a REPLICA of the largest fragment
 * with momentum and DLC_PROTO_REPLICA_CONTRIBS_MAX contributor records, bounded by the
 * protocol's largest frame; a learner's stays the fragment's. */
dlc_status rt_limits(const char *who, const int64_t *numel, int P, dlc_net_config *cfg);
/* A peer's queue in the transport kept a short pipe, not a store: out_max lowered to
 * `frames` frames of the largest fragment as f32 (the syncer 2, serving many learners;
 * a learner 1: it sends one contribution in H/P steps, and one in flight keeps its
 * link busy), at least RT_WINDOW_MIN.  What does not fit waits
 * in the driver, where a newer send of a fragment replaces an older one, so a slow link
 * carries the newest rather than a backlog (srt: merged fragments; lrt: contributions).
 * The frames received and not yet taken by the driver likewise: in_max lowered to the
 * same (at least frame_max); past it the transport stops reading and the sender's
 * driver holds what is newest (a learner's merges wait in the syncer's queue for it, not
 * in its own memory; the connection is not timed out meanwhile, net.h). */
#define RT_WINDOW_MIN ((size_t)256 << 10)
void rt_window(const int64_t *numel, int P, int frames, dlc_net_config *cfg);
/* The HELLO (learner: the id asked for, -1 any) or, with learner = RT_SERVER, the
 * server's terms, of a run over plan: run id, model and plan hashes, every codec, block,
 * the capabilities (gradients with dp). */
#define RT_SERVER (-2)
dlc_status rt_hello(dlc_hello *h, const dlc_plan *plan, const char *run, int learner, int block, int dp,
                    const dlc_run_params *rp);

/* The driver's clock: its config's net.clock (dlc_net_config) if set, else
 * dlc_rt_clock.  Every timer of the driver and of its transport follows it; how long a
 * call blocks (its timeout_s), and the stats' wait_s and call_s, are wall time. */
static inline double rt_time(const dlc_net_config *n) { return n->clock ? n->clock(n->clock_arg) : dlc_rt_clock(); }

#endif
