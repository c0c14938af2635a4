/* rt_limits.c - the drivers' frame limits follow the run's layout (rt/rt_internal.h,
 * rt_limits): frame_max is raised to the largest fragment's f32 frame with its header (a
 * syncer's: to its REPLICA, with momentum and the most contributor records, bounded by
 * the protocol's largest frame), in_max to frame_max, mem_max to twice frame_max, and
 * larger limits a host set are kept; a fragment whose f32 frame would pass the
 * protocol's largest frame (2047 MiB) is refused naming the fragment, the sizes and what
 * to change (sync.fragments), with the limits untouched.  Both sides of the boundary are
 * checked: the largest fragment that fits, and one float more. */
#include <string.h>
#include "check.h"
#include "diloco/proto.h"
#include "../rt/rt_internal.h"

static uint64_t frame_of(int64_t floats) {
    return (uint64_t)floats * sizeof(float) + DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX;
}

/* A REPLICA of `floats` with momentum and the most records, with its header room. */
static uint64_t replica_of(int64_t floats) {
    return 2 * (uint64_t)floats * sizeof(float) + DLC_PROTO_REPLICA_CONTRIBS_MAX * DLC_PROTO_REPLICA_RECORD +
           DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX;
}

static void test_raised(void) {
    dlc_net_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.frame_max = 1024, cfg.in_max = 2048, cfg.mem_max = 4096;
    int64_t numel[3] = {1000, 300000, 2000};
    CHECK(rt_limits("learner", numel, 3, &cfg) == DLC_OK);
    CHECK(cfg.frame_max == frame_of(300000)); /* the largest fragment, not the first */
    CHECK(cfg.in_max == cfg.frame_max && cfg.mem_max == 2 * cfg.frame_max);
    /* a syncer's carries the replica of that fragment to (or from) a standby */
    memset(&cfg, 0, sizeof cfg);
    CHECK(rt_limits("syncer", numel, 3, &cfg) == DLC_OK);
    CHECK(cfg.frame_max == replica_of(300000) && replica_of(300000) == 2 * 1200000 + 163840 + 16 + 16384);
    CHECK(cfg.in_max == cfg.frame_max && cfg.mem_max == 2 * cfg.frame_max);
    /* ...and one REPLICA of fragment 1 with 4096 records, as dlc_replica_payload_size
     * counts it, fits with its header */
    CHECK((uint64_t)dlc_replica_payload_size(300000, DLC_MSG_REPLICA_MOMENTUM, DLC_PROTO_REPLICA_CONTRIBS_MAX) +
              DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX == cfg.frame_max);
    /* a host's larger limits stay */
    cfg.frame_max = (size_t)64 << 20, cfg.in_max = (size_t)128 << 20, cfg.mem_max = (size_t)1 << 30;
    CHECK(rt_limits("learner", numel, 3, &cfg) == DLC_OK);
    CHECK(cfg.frame_max == (size_t)64 << 20 && cfg.in_max == (size_t)128 << 20 && cfg.mem_max == (size_t)1 << 30);
}

static void test_refused(void) {
    int64_t fits = (int64_t)((DLC_PROTO_FRAME_MAX_LIMIT - DLC_PROTO_PREFIX - DLC_PROTO_HEADER_MAX) / sizeof(float));
    dlc_net_config cfg;
    memset(&cfg, 0, sizeof cfg);
    int64_t numel[2] = {7, fits};
    CHECK(rt_limits("learner", numel, 2, &cfg) == DLC_OK);
    CHECK(cfg.frame_max == frame_of(fits) && frame_of(fits) <= DLC_PROTO_FRAME_MAX_LIMIT);
    /* a syncer's replica of it would not fit: bounded by the largest frame, not refused */
    memset(&cfg, 0, sizeof cfg);
    CHECK(rt_limits("syncer", numel, 2, &cfg) == DLC_OK && cfg.frame_max == DLC_PROTO_FRAME_MAX_LIMIT &&
          cfg.mem_max == 2 * DLC_PROTO_FRAME_MAX_LIMIT);
    memset(&cfg, 0, sizeof cfg);
    cfg.frame_max = 1234, cfg.in_max = 5678, cfg.mem_max = 9012;
    numel[1] = fits + 1;
    CHECK(rt_limits("syncer", numel, 2, &cfg) == DLC_ERR_ARG);
    const char *e = dlc_last_error();
    char want[128];
    snprintf(want, sizeof want, "syncer: the largest of the 2 fragments holds %lld floats", (long long)(fits + 1));
    CHECK(strstr(e, want) != NULL);
    CHECK(strstr(e, "beyond the protocol's largest") && strstr(e, "(sync.fragments)"));
    CHECK(cfg.frame_max == 1234 && cfg.in_max == 5678 && cfg.mem_max == 9012); /* untouched */
    /* a 12B-parameter model in 4 fragments: each far past it */
    int64_t big[4] = {3000000000LL, 3000000000LL, 3000000000LL, 3000000000LL};
    CHECK(rt_limits("learner", big, 4, &cfg) == DLC_ERR_ARG && strstr(dlc_last_error(), "learner: "));
}

int main(void) {
    test_raised();
    test_refused();
    return check_done("rt_limits");
}
