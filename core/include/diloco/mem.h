/*
 * mem.h - large buffers (a fragment, a model, a frame).  Touching fresh memory costs a
 * page fault per page, and on virtual machines a fault costs tens of microseconds: a
 * fresh 64 MiB buffer written once ran at 0.30 GB/s in 4 KiB pages on the machine of
 * docs/performance.md, against 1.7-11.4 GB/s in 2 MiB pages (scripts/bench/syncer prints
 * both beside memcpy).  So a
 * buffer of at least DLC_BIG_MIN bytes is aligned to 2 MiB and its whole 2 MiB pages are
 * advised for transparent huge pages (madvise MADV_HUGEPAGE, where the kernel has them
 * in "madvise" mode; a kernel without them ignores the advice), its tail left in small
 * pages, so it never holds more memory than its size; a smaller one is a plain 64-byte
 * aligned allocation.  Either is freed with dlc_big_free (free() works too).
 */
#ifndef DILOCO_MEM_H
#define DILOCO_MEM_H

#include <stddef.h>
#include "diloco/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Buffers from this size on (one huge page) are aligned to 2 MiB and advised for huge pages. */
#define DLC_BIG_MIN ((size_t)2 << 20)

/* An uninitialised buffer of `bytes` (>= 1), 64-byte aligned at least; NULL when out of
 * memory (dlc_last_error not set: the caller names what it was for). */
DLC_API void *dlc_big_alloc(size_t bytes);
/* The same, zeroed. */
DLC_API void *dlc_big_calloc(size_t bytes);
DLC_API void dlc_big_free(void *p); /* NULL ok */

#ifdef __cplusplus
}
#endif
#endif
