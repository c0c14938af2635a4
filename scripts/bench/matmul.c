/* bench_matmul - dlc_matmul on each gemm backend against calling OpenBLAS's cblas_sgemm
 * directly, same process, same threads, interleaved repetitions.  Square sizes, then
 * the shapes of the charlm model's linear layers (forward and both backward products).
 * Prints GFLOPS and ratios ours/direct: the "openblas" column is our overhead over the
 * library we call, the "onednn" column what the default backend gains over OpenBLAS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cblas.h>
#include "diloco/diloco.h"
#include "bench.h"

typedef struct { int M, N, K, ta, tb; const char *what; } shape;

static dlc_tensor *mat(int r, int c, dlc_rng *g) {
    int64_t s[2] = {r, c};
    return dlc_tensor_randn(2, s, g, 0, 1);
}

/* Seconds per call of cblas_sgemm, and of dlc_matmul on each backend (-1: absent). */
static void time_shape(const shape *sh, double best[3]) {
    dlc_rng g;
    dlc_rng_init(&g, 1);
    int M = sh->M, N = sh->N, K = sh->K;
    dlc_tensor *a = sh->ta ? mat(K, M, &g) : mat(M, K, &g), *b = sh->tb ? mat(N, K, &g) : mat(K, N, &g);
    float *c = malloc(sizeof(float) * (size_t)M * N);
    double flop = 2.0 * M * N * (double)K;
    int reps = (int)(1.5e10 / flop);
    if (reps < 3) reps = 3;
    if (reps > 20000) reps = 20000;
    const char *backends[2] = {"openblas", "onednn"};
    best[0] = best[1] = best[2] = 1e9;
    for (int round = 0; round < 5; round++) {
        double t0 = now();
        for (int r = 0; r < reps; r++)
            cblas_sgemm(CblasRowMajor, sh->ta ? CblasTrans : CblasNoTrans, sh->tb ? CblasTrans : CblasNoTrans, M, N,
                        K, 1.0f, a->data, sh->ta ? M : K, b->data, sh->tb ? K : N, 0.0f, c, N);
        double t = (now() - t0) / reps;
        if (t < best[0]) best[0] = t;
        for (int k = 0; k < 2; k++) {
            if (dlc_set_gemm_backend(backends[k]) != DLC_OK) {
                best[k + 1] = -1;
                continue;
            }
            t0 = now();
            for (int r = 0; r < reps; r++) {
                dlc_tensor *o = dlc_matmul(a, b, sh->ta, sh->tb);
                if (!o) {
                    fprintf(stderr, "bench_matmul: %s\n", dlc_last_error());
                    exit(1);
                }
                dlc_tensor_release(o);
            }
            t = (now() - t0) / reps;
            if (t < best[k + 1]) best[k + 1] = t;
        }
    }
    dlc_tensor_release(a);
    dlc_tensor_release(b);
    free(c);
}

int main(void) {
    static const shape shapes[] = {
        {128, 128, 128, 0, 0, "square"}, {256, 256, 256, 0, 0, "square"}, {512, 512, 512, 0, 0, "square"},
        {1024, 1024, 1024, 0, 0, "square"}, {2048, 2048, 2048, 0, 0, "square"},
        {1024, 384, 128, 0, 1, "qkv fwd"}, {1024, 128, 384, 0, 0, "qkv dX"}, {384, 128, 1024, 1, 0, "qkv dW"},
        {1024, 512, 128, 0, 1, "fc fwd"}, {1024, 128, 512, 0, 1, "proj fwd"}, {128, 512, 1024, 1, 0, "proj dW"},
        {1024, 256, 128, 0, 1, "head fwd"}, {64, 64, 32, 0, 1, "attn QK^T"},
    };
    int n = (int)(sizeof shapes / sizeof shapes[0]), overhead_ok = 1;
    dlc_set_num_threads(dlc_num_threads()); /* one count for both libraries */
    printf("matmul: dlc_matmul vs cblas_sgemm (OpenBLAS core %s), %d thread(s)\n", openblas_get_corename(),
           dlc_num_threads());
    printf("%-10s %16s %10s %10s %8s %10s %8s\n", "shape", "M x N x K", "sgemm", "openblas", "ratio",
           "onednn", "ratio");
    for (int i = 0; i < n; i++) {
        const shape *sh = &shapes[i];
        double best[3], flop = 2.0 * sh->M * sh->N * (double)sh->K;
        time_shape(sh, best);
        char dims[32];
        snprintf(dims, sizeof dims, "%dx%dx%d", sh->M, sh->N, sh->K);
        printf("%-10s %16s %10.1f %10.1f %8.3f", sh->what, dims, flop / best[0] * 1e-9, flop / best[1] * 1e-9,
               best[0] / best[1]);
        if (best[2] > 0) printf(" %10.1f %8.3f\n", flop / best[2] * 1e-9, best[0] / best[2]);
        else printf(" %10s %8s\n", "-", "-");
        if (sh->M >= 512 && sh->M == sh->N && best[0] / best[1] < 0.95) overhead_ok = 0;
    }
    printf("GF/s columns; ratios are ours / direct cblas_sgemm.\n");
    printf("goal (openblas-backend ratio >= 0.95 for squares from 512 up): %s\n", overhead_ok ? "met" : "NOT met");
    return 0;
}
