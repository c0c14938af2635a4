/*
 * net_clock.h - the clock of the transport's tests (ctest/net_*.c): monotonic seconds
 * and a sleep, for deadlines and timeouts measured from outside the net, and the wait
 * for an event within such a deadline.
 */
#ifndef DLC_NET_CLOCK_H
#define DLC_NET_CLOCK_H
#include <time.h>
#include "diloco/net.h"

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Takes net's events until one of `kind` (the others dropped) into *out: 1, or 0 when none
 * came within secs (a bound in wall time, for what should come at once). */
static inline int wait_event(dlc_net *net, dlc_net_event_kind kind, double secs, dlc_net_event *out) {
    for (double end = now_s() + secs; now_s() < end;) {
        dlc_net_event ev;
        if (dlc_net_poll(net, &ev, 50) != 1) continue;
        if (ev.kind == kind) {
            *out = ev;
            return 1;
        }
        dlc_net_event_release(&ev);
    }
    return 0;
}

#endif
