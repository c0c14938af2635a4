/* bench_codec - encode, decode and decode_axpy of every codec against memcpy of the same
 * f32 bytes, one thread, one process, interleaved rounds (best of N).  GB/s counts the
 * f32 side (4 bytes per element), so every row compares like with like; the ratio is
 * (memcpy time) / (codec time), i.e. >= 1 means faster than copying the f32 array.
 * Usage: bench_codec [N_FLOATS [ROUNDS]]   (default 16M floats, 7 rounds) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "diloco/diloco.h"
#include "bench.h"

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 16 << 20;
    int rounds = argc > 2 ? atoi(argv[2]) : 7;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    float *cp = malloc(sizeof(float) * (size_t)n), *ef = calloc((size_t)n, sizeof(float));
    uint8_t *buf = malloc(4 * (size_t)n + 4096);
    if (!x || !y || !cp || !ef || !buf) return fprintf(stderr, "bench_codec: out of memory\n"), 1;
    dlc_rng g;
    dlc_rng_init(&g, 1);
    int64_t s[1] = {n};
    dlc_tensor *t = dlc_tensor_randn(1, s, &g, 0.0f, 1e-2f);
    memcpy(x, t->data, sizeof(float) * (size_t)n);
    dlc_tensor_release(t);
    memset(y, 0, sizeof(float) * (size_t)n);
    memset(cp, 0, sizeof(float) * (size_t)n);
    memset(buf, 0, 4 * (size_t)n + 4096);
    dlc_codec_params p = dlc_codec_default_params();
    double gb = 4.0 * (double)n / 1e9;
    const char *env = getenv("OPENBLAS_CORETYPE");
    printf("bench_codec: %lld floats (%.0f MiB of f32), best of %d rounds, block %d, one thread, "
           "OPENBLAS_CORETYPE %s%s\n",
           (long long)n, 4.0 * n / 1048576.0, rounds, p.block, env ? "=" : "unset", env ? env : "");
    printf("%-6s %-10s %8s %9s %9s %8s\n", "codec", "direction", "bytes/el", "GB/s", "memcpy", "ratio");
    for (int k = 0; k < DLC_CODEC_COUNT; k++) {
        int64_t size = dlc_codec_encoded_size((dlc_codec_kind)k, &p, n);
        /* 0 encode, 1 encode + error feedback, 2 decode, 3 decode_axpy */
        const char *dir[4] = {"encode", "encode+ef", "decode", "axpy"};
        double best[4] = {1e9, 1e9, 1e9, 1e9}, bm[4] = {1e9, 1e9, 1e9, 1e9};
        for (int r = 0; r < rounds; r++)
            for (int d = 0; d < 4; d++) {
                double t0 = now();
                memcpy(cp, d == 2 ? y : x, sizeof(float) * (size_t)n);
                double tm = now() - t0;
                if (tm < bm[d]) bm[d] = tm;
                t0 = now();
                int ok = 1;
                if (d == 0) ok = dlc_codec_encode((dlc_codec_kind)k, &p, x, n, buf, (size_t)size, NULL) == size;
                if (d == 1) ok = dlc_codec_encode((dlc_codec_kind)k, &p, x, n, buf, (size_t)size, ef) == size;
                if (d == 2) ok = dlc_codec_decode((dlc_codec_kind)k, &p, buf, (size_t)size, y, n) == DLC_OK;
                if (d == 3) ok = dlc_codec_decode_axpy((dlc_codec_kind)k, &p, buf, (size_t)size, n, 1e-3f, y) == DLC_OK;
                double tc = now() - t0;
                if (!ok) return fprintf(stderr, "bench_codec: %s\n", dlc_last_error()), 1;
                if (tc < best[d]) best[d] = tc;
            }
        for (int d = 0; d < 4; d++)
            printf("%-6s %-10s %8.3f %9.2f %9.2f %8.2f\n", dlc_codec_name((dlc_codec_kind)k), dir[d],
                   (double)size / (double)n, gb / best[d], gb / bm[d], bm[d] / best[d]);
    }
    free(x);
    free(y);
    free(cp);
    free(ef);
    free(buf);
    return 0;
}
