/* bench.h - what the C benchmarks of scripts/bench share. */
#ifndef DLC_BENCH_H
#define DLC_BENCH_H

#include <time.h>

/* Wall time in seconds, monotonic: what every benchmark times with. */
static inline double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
