/* bench_embed (scripts/bench/embed): what attaching the learner client (diloco/client.h)
 * costs a host's own trainer.  The host is a two-layer MLP regression (D -> HID -> D, relu,
 * its own f32 arrays, OpenBLAS sgemm at one thread, plain SGD), B rows a step; its step is
 * timed alone and with dlc_client_step after it, joined to a server in this process
 * (decoupled: H 24, 4 fragments, f32; loopback), in alternating rounds so that drift of
 * the host hits both alike.  Prints the median step time of each and their ratio (goal for
 * a non-blocking preset: <= 1.02), the client's own share, and merges applied.
 *   bench_embed [D [HID [B [STEPS [ROUNDS]]]]]   (default 512 2048 512 40 7)
 * Run it on a quiet host: it measures wall time. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <diloco/client.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench.h"

static int D = 512, HID = 2048, B = 512;
static float *W1, *W2, *X, *Y, *H, *O, *G1, *G2, *DH;

/* one SGD step of the host on its own arrays: h = relu(x W1^T), o = h W2^T, mse(o, y) */
static void host_step(void) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, HID, D, 1, X, D, W1, D, 0, H, HID);
    for (long i = 0; i < (long)B * HID; i++) H[i] = H[i] > 0 ? H[i] : 0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, D, HID, 1, H, HID, W2, HID, 0, O, D);
    for (long i = 0; i < (long)B * D; i++) O[i] = 2 * (O[i] - Y[i]) / (float)B; /* dL/do */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, HID, B, 1, O, D, H, HID, 0, G2, HID);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, HID, D, 1, O, D, W2, HID, 0, DH, HID);
    for (long i = 0; i < (long)B * HID; i++) DH[i] = H[i] > 0 ? DH[i] : 0;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, HID, D, B, 1, DH, HID, X, D, 0, G1, D);
    cblas_saxpy(HID * D, -1e-3f, G1, 1, W1, 1);
    cblas_saxpy(D * HID, -1e-3f, G2, 1, W2, 1);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    if (argc > 1) D = atoi(argv[1]);
    if (argc > 2) HID = atoi(argv[2]);
    if (argc > 3) B = atoi(argv[3]);
    int steps = argc > 4 ? atoi(argv[4]) : 40, rounds = argc > 5 ? atoi(argv[5]) : 7;
    if (D < 8 || HID < 8 || B < 1 || steps < 2 || rounds < 1) return fprintf(stderr, "bench_embed: bad arguments\n"), 2;
    openblas_set_num_threads(1);
    size_t nw = (size_t)D * HID;
    W1 = malloc(nw * 4), W2 = malloc(nw * 4), G1 = malloc(nw * 4), G2 = malloc(nw * 4);
    X = malloc((size_t)B * D * 4), Y = malloc((size_t)B * D * 4), O = malloc((size_t)B * D * 4);
    H = malloc((size_t)B * HID * 4), DH = malloc((size_t)B * HID * 4);
    if (!W1 || !W2 || !G1 || !G2 || !X || !Y || !O || !H || !DH) return fprintf(stderr, "out of memory\n"), 1;
    srand(1);
    for (size_t i = 0; i < nw; i++) W1[i] = (rand() / (float)RAND_MAX - 0.5f) * 0.05f;
    for (size_t i = 0; i < nw; i++) W2[i] = (rand() / (float)RAND_MAX - 0.5f) * 0.05f;
    for (long i = 0; i < (long)B * D; i++) X[i] = rand() / (float)RAND_MAX - 0.5f, Y[i] = X[i];

    int64_t s1[2] = {HID, D}, s2[2] = {D, HID};
    dlc_client_tensor t[2] = {{"w1", W1, (int64_t)nw, 2, s1}, {"w2", W2, (int64_t)nw, 2, s2}};
    const char *run = "{\"sync\": {\"preset\": \"decoupled\", \"H\": 24, \"fragments\": 4}}";
    dlc_server_config sc = dlc_server_default_config();
    sc.tensors = t, sc.count = 2, sc.run = run, sc.learners = 1, sc.secret = "bench-embed-secret-0123456789";
    dlc_server *s = dlc_server_new(&sc);
    if (!s) return fprintf(stderr, "server: %s\n", dlc_last_error()), 1;
    char port[64];
    snprintf(port, sizeof port, "127.0.0.1:%d", dlc_server_port(s));
    dlc_client_config cc = dlc_client_default_config();
    cc.tensors = t, cc.count = 2, cc.run = run, cc.connect = port, cc.secret = sc.secret;
    dlc_client *c = dlc_client_new(&cc);
    if (!c) return fprintf(stderr, "client: %s\n", dlc_last_error()), 1;

    for (int i = 0; i < 3; i++) host_step(); /* warm up */
    double *alone = malloc(sizeof(double) * rounds), *with = malloc(sizeof(double) * rounds);
    double client_s = 0;
    int64_t client_steps = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        for (int i = 0; i < steps; i++) host_step();
        alone[r] = (now() - t0) / steps;
        t0 = now();
        for (int i = 0; i < steps; i++) {
            host_step();
            double c0 = now();
            if (dlc_client_step(c, B) != DLC_OK) return fprintf(stderr, "client step: %s\n", dlc_last_error()), 1;
            client_s += now() - c0;
            client_steps++;
        }
        with[r] = (now() - t0) / steps;
    }
    int64_t applied = dlc_client_applied(c);
    dlc_client_finish(c, 10);
    dlc_client_free(c);
    dlc_server_free(s);
    double ma = median(alone, rounds), mw = median(with, rounds);
    printf("host: MLP %d -> %d -> %d, %d rows a step, %.1f M parameters (%.1f MB), one OpenBLAS thread\n", D, HID, D,
           B, 2.0 * nw / 1e6, 8.0 * nw / 1e6);
    printf("client: decoupled, H 24, 4 fragments, f32, a server in this process over loopback\n");
    printf("%d rounds of %d steps each way, alternating\n", rounds, steps);
    printf("| | median step ms |\n|---|---|\n| host alone | %.2f |\n| host + dlc_client_step | %.2f |\n", 1e3 * ma,
           1e3 * mw);
    printf("ratio (with / alone) = %.4f (goal <= 1.02)\n", mw / ma);
    printf("dlc_client_step: %.3f ms a step on average (%.2f%% of the host's step); %lld merged fragments applied\n",
           1e3 * client_s / (double)client_steps, 100 * client_s / (double)client_steps / ma, (long long)applied);
    return 0;
}
