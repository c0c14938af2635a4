/*
 * fake_clock.h - a clock that a test moves by hand, for the drivers' injected clock
 * (dlc_net_config.clock, rt.h's *_clock_moved): seconds from 1000, moved only by
 * fake_clock_advance, so a timer of 30 s fires in the microseconds the test takes to say
 * so, at the instant it says, however loaded the machine.  Steps that are sums of
 * powers of two (0.25, 0.5, 1) keep the readings exact, so tests compare them with ==.
 */
#ifndef DLC_FAKE_CLOCK_H
#define DLC_FAKE_CLOCK_H
#include <stdatomic.h>

typedef struct fake_clock {
    _Atomic double t;
} fake_clock;

static inline void fake_clock_init(fake_clock *c) { atomic_store(&c->t, 1000.0); }

/* The dlc_net_config.clock function (arg: the fake_clock). */
static inline double fake_clock_read(void *arg) { return atomic_load(&((fake_clock *)arg)->t); }

static inline void fake_clock_advance(fake_clock *c, double dt) {
    double t = atomic_load(&c->t);
    atomic_store(&c->t, t + dt); /* one mover: the test's thread */
}

#endif
