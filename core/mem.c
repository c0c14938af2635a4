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
    size_t n = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    if (n < bytes || posix_memalign(&p, HUGE_PAGE, n) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n, MADV_HUGEPAGE); /* advice: refused, the buffer works in small pages */
#endif
    return p;
}

void *dlc_big_calloc(size_t bytes) {
    void *p = dlc_big_alloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void dlc_big_free(void *p) { free(p); }
