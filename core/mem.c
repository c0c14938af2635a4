/* mem.c - large buffers (mem.h): 2 MiB aligned and advised for transparent huge pages. */
#define _DEFAULT_SOURCE /* madvise */
#include "diloco/mem.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *dlc_big_alloc(size_t bytes) {
    if (bytes == 0) bytes = 1;
    void *p = NULL;
    if (bytes < DLC_BIG_MIN) {
        size_t n = (bytes + 63) & ~(size_t)63;
        return aligned_alloc(64, n);
    }
    if (posix_memalign(&p, HUGE_PAGE, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    /* the whole huge pages inside it only: the tail stays in small pages, so no buffer
     * holds more resident memory than its size rounds up to in 4 KiB pages.  Advice: if
     * it is refused, the buffer works in small pages. */
    (void)madvise(p, bytes & ~(HUGE_PAGE - 1), MADV_HUGEPAGE);
#endif
    return p;
}

void *dlc_big_calloc(size_t bytes) {
    void *p = dlc_big_alloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void dlc_big_free(void *p) { free(p); }
