/* bench_matmul - dlc_matmul against calling cblas_sgemm directly, same process, same
 * threads, interleaved repetitions; prints GFLOPS of both and the ratio ours/direct. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cblas.h>
#include "diloco/diloco.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int sizes[] = {128, 256, 512, 1024, 2048};
    int nsizes = sizeof sizes / sizeof sizes[0];
    printf("matmul: dlc_matmul vs cblas_sgemm, OpenBLAS %d thread(s)\n", openblas_get_num_threads());
    printf("%6s %12s %12s %8s\n", "n", "sgemm GF/s", "ours GF/s", "ratio");
    int worst_ok = 1;
    for (int s = 0; s < nsizes; s++) {
        int n = sizes[s];
        int64_t shape[2] = {n, n};
        dlc_rng g;
        dlc_rng_init(&g, 1);
        dlc_tensor *a = dlc_tensor_randn(2, shape, &g, 0, 1), *b = dlc_tensor_randn(2, shape, &g, 0, 1);
        dlc_tensor *c = dlc_tensor_zeros(2, shape);
        double flop = 2.0 * n * n * (double)n;
        /* enough repetitions for ~0.3 s per side at ~100 GFLOPS */
        int reps = (int)(3e10 / flop);
        if (reps < 3) reps = 3;
        if (reps > 2000) reps = 2000;
        double best_ref = 1e9, best_ours = 1e9;
        for (int round = 0; round < 5; round++) {
            double t0 = now();
            for (int r = 0; r < reps; r++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a->data, n,
                            b->data, n, 0.0f, c->data, n);
            double t1 = now();
            for (int r = 0; r < reps; r++) {
                dlc_tensor *o = dlc_matmul(a, b, 0, 0);
                if (!o) {
                    fprintf(stderr, "bench_matmul: %s\n", dlc_last_error());
                    return 1;
                }
                dlc_tensor_release(o);
            }
            double t2 = now();
            if ((t1 - t0) / reps < best_ref) best_ref = (t1 - t0) / reps;
            if ((t2 - t1) / reps < best_ours) best_ours = (t2 - t1) / reps;
        }
        double ratio = best_ref / best_ours;
        printf("%6d %12.1f %12.1f %8.3f\n", n, flop / best_ref * 1e-9, flop / best_ours * 1e-9, ratio);
        if (n >= 512 && ratio < 0.95) worst_ok = 0;
        dlc_tensor_release(a);
        dlc_tensor_release(b);
        dlc_tensor_release(c);
    }
    printf("goal (ratio >= 0.95 from 512 up): %s\n", worst_ok ? "met" : "NOT met");
    (void)argc;
    (void)argv;
    return 0;
}
