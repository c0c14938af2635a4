/* bench_goodput - wall time and events per second of the goodput simulator on the issue's
 * size: decoupled, 2.4M chips, 16 learners, 30 simulated days, one thread.
 * Usage: bench_goodput [CHIPS [LEARNERS [DAYS [ROUNDS]]]]  (defaults 2400000 16 30 5) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "diloco/goodput.h"
#include "bench.h"

int main(int argc, char **argv) {
    dlc_goodput_params p = dlc_goodput_default_params();
    p.policy = DLC_GOODPUT_DECOUPLED;
    p.chips = argc > 1 ? (int64_t)atof(argv[1]) : 2400000;
    p.learners = argc > 2 ? atoi(argv[2]) : 16;
    p.duration = (argc > 3 ? atof(argv[3]) : 30) * 86400;
    int rounds = argc > 4 ? atoi(argv[4]) : 5;
    if (p.learners == 1) p.policy = DLC_GOODPUT_ELASTIC;
    double best = 1e300;
    dlc_goodput_result r = {0};
    for (int i = 0; i < rounds; i++) {
        p.seed = (uint64_t)i;
        dlc_goodput_result_free(&r);
        double t0 = now();
        if (dlc_goodput_run(&p, &r) != DLC_OK) {
            fprintf(stderr, "bench_goodput: %s\n", dlc_last_error());
            return 1;
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    printf("goodput %s: %lld chips, %d learners, %g days, hourly series\n", dlc_goodput_policy_name(p.policy),
           (long long)p.chips, p.learners, p.duration / 86400);
    printf("  events %lld (interruptions %lld)  wall %.3f s (best of %d)  %.2f M events/s  goodput %.4f uptime %.4f\n",
           (long long)r.events, (long long)r.interruptions, best, rounds, (double)r.events / best / 1e6, r.goodput,
           r.uptime);
    int ok = best <= 1.0;
    printf("  target: <= 1 s on one core: %s\n", ok ? "met" : "MISSED");
    dlc_goodput_result_free(&r);
    return ok ? 0 : 1;
}
