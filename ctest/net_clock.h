/*
 * net_clock.h - the clock of the transport's tests (ctest/net_*.c): monotonic seconds
 * and a sleep, for deadlines and timeouts measured from outside the net.
 */
#ifndef DLC_NET_CLOCK_H
#define DLC_NET_CLOCK_H
#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

#endif
