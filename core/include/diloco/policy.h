/*
 * policy.h - the syncer's merge policies as plain data: how long a round waits after its
 * quorum (the grace mode), how contributions are weighted, and the quorum meaning "every
 * live learner".  The syncer state machine (syncer.h) runs them; the run description
 * (run.h) states them, and with it the wire codec (proto.h, HELLO's "rp"), which so names
 * them without depending on the state machine.  The name functions are the syncer's
 * (core/syncer.c).
 *
 *     dlc_weighting w;
 *     if (dlc_weighting_parse("tokens", &w) < 0) fprintf(stderr, "%s\n", dlc_last_error());
 *     printf("%s\n", dlc_grace_mode_name(DLC_GRACE_ADAPTIVE));   // "adaptive"
 */
#ifndef DILOCO_POLICY_H
#define DILOCO_POLICY_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlc_grace_mode { DLC_GRACE_ADAPTIVE, DLC_GRACE_OFF, DLC_GRACE_FIXED, DLC_GRACE_MODE_COUNT } dlc_grace_mode;
DLC_API const char *dlc_grace_mode_name(dlc_grace_mode m); /* "adaptive", "off", "fixed" */

typedef enum dlc_weighting {
    DLC_WEIGHT_TOKENS2_STEPS, /* c_tokens² / c_steps: quantity × quality (§4.4) */
    DLC_WEIGHT_TOKENS,        /* c_tokens */
    DLC_WEIGHT_UNIFORM,       /* 1 */
    DLC_WEIGHTING_COUNT
} dlc_weighting;
DLC_API const char *dlc_weighting_name(dlc_weighting w); /* "tokens2_steps", "tokens", "uniform" */
DLC_API dlc_status dlc_weighting_parse(const char *name, dlc_weighting *out);

#define DLC_QUORUM_ALL 0      /* quorum = every live learner */

#ifdef __cplusplus
}
#endif
#endif
