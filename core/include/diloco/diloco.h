/*
 * diloco.h - the whole public C API of libdiloco.
 *
 * Module headers, each documenting ownership for every function:
 *   status.h    error codes, dlc_last_error(), DLC_ASSERT
 *   tensor.h    f32 tensors, views, refcounting, the Philox random generator
 *   ops.h       tensor operations (elementwise, matmul, norms, attention, ...)
 *   autograd.h  reverse-mode differentiation over those ops
 *   ckpt.h      safetensors checkpoints (save with atomic replace, validating load)
 *   params.h    the parameter arena: all of a model's parameters (and grads) in one buffer
 *   optim.h     AdamW and SGD as one loop over the arena; learning-rate schedules
 *   codec.h     wire codecs for contributions: f32, bf16, fp8, int8/int4/E3M0 with block scales
 *   frag.h      fragment plans (balanced, strided, sequential) over the arena; layout hashes
 *   merge.h     the merge of one fragment: RDA or weighted mean of encoded contributions, one pass
 *   outer.h     one fragment's syncer state: global Θ, version, outer SGD/Nesterov, version ring
 *   run.h       the run description learners and syncer agree on; their params derive from it
 *   chaos.h     fault schedules (kill, pause, slow, cut, syncer down, link) as data, fixed or Poisson, seeded
 */
#ifndef DILOCO_H
#define DILOCO_H

/* DLC_VERSION_MAJOR/MINOR/PATCH/STRING, generated from CMakeLists.txt's project(VERSION). */
#include "diloco/version.h"

#include "status.h"
#include "tensor.h"
#include "ops.h"
#include "autograd.h"
#include "data.h"
#include "ckpt.h"
#include "params.h"
#include "optim.h"
#include "codec.h"
#include "frag.h"
#include "merge.h"
#include "outer.h"
#include "policy.h"
#include "mem.h"
#include "msg.h"
#include "proto.h"
#include "learner.h"
#include "syncer.h"
#include "run.h"
#include "vtime.h"
#include "chaos.h"
#include "goodput.h"
#include "account.h"
#include "supervise.h"

#endif
