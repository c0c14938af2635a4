/* bench_merge - the syncer's merge of one fragment (merge.h): M contributions of an
 * N-float fragment added to a dlc_merge and finished, decode included, against memcpy of
 * the same incoming f32-equivalent bytes (4·N·M) in the same run; one thread, best of
 * ROUNDS.  The fragment is cut into segments of 1M floats (like the tensors of a model;
 * the first is an embedding).  GB/s counts 4 bytes per contribution element.
 * Usage: bench_merge [N_FLOATS [M [ROUNDS]]]   (default 16M floats, M = 8, 5 rounds) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "diloco/diloco.h"
#include "bench.h"

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 16 << 20;
    int M = argc > 2 ? atoi(argv[2]) : 8, rounds = argc > 3 ? atoi(argv[3]) : 5;
    int64_t segl = 1 << 20;
    int T = (int)((n + segl - 1) / segl);
    int64_t *seg = malloc(sizeof(int64_t) * (size_t)T);
    uint8_t *emb = calloc((size_t)T, 1);
    for (int s = 0; s < T; s++) seg[s] = s < T - 1 ? segl : n - segl * (T - 1);
    emb[0] = 1;
    float *x = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
    float *cp = malloc(sizeof(float) * (size_t)n);
    uint8_t **bufs = calloc((size_t)M, sizeof *bufs);
    dlc_codec_params p = dlc_codec_default_params();
    const char *env = getenv("OPENBLAS_CORETYPE");
    printf("bench_merge: M = %d contributions of %lld floats (%.0f MiB of f32 each), %d segments, best of %d, "
           "one thread, OPENBLAS_CORETYPE %s%s\n",
           M, (long long)n, 4.0 * n / 1048576.0, T, rounds, env ? "=" : "unset", env ? env : "");
    printf("%-6s %-5s %9s %9s %8s\n", "codec", "merge", "GB/s", "memcpy", "ratio");
    dlc_codec_kind kinds[2] = {DLC_CODEC_F32, DLC_CODEC_INT4};
    double gb = 4.0 * (double)n * M / 1e9;
    for (int kk = 0; kk < 2; kk++) {
        int64_t size = dlc_codec_encoded_size(kinds[kk], &p, n);
        for (int k = 0; k < M; k++) {
            dlc_rng g;
            dlc_rng_init(&g, 1 + (uint64_t)k);
            int64_t s1[1] = {n};
            dlc_tensor *t = dlc_tensor_randn(1, s1, &g, 0.0f, 1e-2f);
            bufs[k] = malloc((size_t)size);
            if (!bufs[k] || dlc_codec_encode(kinds[kk], &p, t->data, n, bufs[k], (size_t)size, NULL) != size)
                return fprintf(stderr, "bench_merge: %s\n", dlc_last_error()), 1;
            dlc_tensor_release(t);
        }
        for (int mode = 0; mode < DLC_MERGE_MODE_COUNT; mode++) {
            dlc_merge_params mp = {(dlc_merge_mode)mode, T, seg, emb};
            dlc_merge *m = dlc_merge_new(&mp);
            if (!m) return fprintf(stderr, "bench_merge: %s\n", dlc_last_error()), 1;
            double best = 1e9, bm = 1e9;
            for (int r = 0; r < rounds; r++) {
                double t0 = now();
                for (int k = 0; k < M; k++) memcpy(cp, k & 1 ? out : x, sizeof(float) * (size_t)n);
                double tm = now() - t0;
                if (tm < bm) bm = tm;
                t0 = now();
                dlc_merge_reset(m);
                for (int k = 0; k < M; k++)
                    if (dlc_merge_add(m, kinds[kk], &p, bufs[k], (size_t)size, 1.0 + k) != DLC_OK)
                        return fprintf(stderr, "bench_merge: %s\n", dlc_last_error()), 1;
                if (dlc_merge_finish(m, out) != DLC_OK) return fprintf(stderr, "bench_merge: %s\n", dlc_last_error()), 1;
                double tc = now() - t0;
                if (tc < best) best = tc;
            }
            printf("%-6s %-5s %9.2f %9.2f %8.2f\n", dlc_codec_name(kinds[kk]), dlc_merge_mode_name((dlc_merge_mode)mode),
                   gb / best, gb / bm, bm / best);
            dlc_merge_free(m);
        }
        for (int k = 0; k < M; k++) free(bufs[k]);
    }
    free(bufs);
    free(seg);
    free(emb);
    free(x);
    free(out);
    free(cp);
    return 0;
}
