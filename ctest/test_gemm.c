/* test_gemm.c - the sgemm behind every matrix product, on each backend this build has:
 * all transpose combinations, odd sizes, padded leading dimensions, alpha and beta
 * (beta = 0 must not read C, even when C holds NaN), against a double-precision
 * reference; backend and thread-count selection and their errors; a oneDNN failure
 * returned as a status; matmul, linear and attention giving the same numbers on both
 * backends. */
#include "check.h"
#include "internal.h"

static dlc_rng rng; /* seeded in main */

/* C = alpha op(A) op(B) + beta C with A, B, C padded by `pad` columns. */
static void check_one(int ta, int tb, int M, int N, int K, float alpha, float beta, int pad) {
    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    float *A = malloc(sizeof(float) * (size_t)ar * lda), *B = malloc(sizeof(float) * (size_t)br * ldb);
    float *C = malloc(sizeof(float) * (size_t)M * ldc), *C0 = malloc(sizeof(float) * (size_t)M * ldc);
    dlc_rng_uniform(&rng, A, (int64_t)ar * lda, -1.0f, 1.0f);
    dlc_rng_uniform(&rng, B, (int64_t)br * ldb, -1.0f, 1.0f);
    dlc_rng_uniform(&rng, C0, (int64_t)M * ldc, -1.0f, 1.0f);
    for (int i = 0; i < M * ldc; i++) C[i] = C0[i] = beta == 0.0f ? NAN : C0[i];
    CHECK(dlcx_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == DLC_OK);
    double worst = 0;
    int pad_kept = 1;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k], b = tb ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
                mag += fabs(a * b);
            }
            double want = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)C0[i * ldc + j]);
            double err = fabs(C[i * ldc + j] - want) / (fabs(alpha) * mag + fabs(beta) + 1e-30);
            if (!(err <= worst)) worst = err; /* NaN propagates into worst */
        }
        for (int j = N; j < ldc; j++) /* the padding is not C's to write */
            if (memcmp(&C[i * ldc + j], &C0[i * ldc + j], sizeof(float)) != 0) pad_kept = 0;
    }
    if (!(worst <= 1e-6))
        fprintf(stderr, "  %s ta=%d tb=%d M=%d N=%d K=%d alpha=%g beta=%g pad=%d: error %g\n",
                dlc_gemm_backend(), ta, tb, M, N, K, alpha, beta, pad, worst);
    CHECK(worst <= 1e-6);
    CHECK(pad_kept);
    free(A);
    free(B);
    free(C);
    free(C0);
}

static void test_backend_numbers(void) {
    static const int sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {37, 19, 53}, {64, 64, 32}, {130, 70, 257}};
    for (int s = 0; s < 5; s++)
        for (int t = 0; t < 4; t++) {
            int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
            check_one(t >> 1, t & 1, M, N, K, 1.0f, 0.0f, 0);
            check_one(t >> 1, t & 1, M, N, K, 0.5f, 1.0f, 3);
            check_one(t >> 1, t & 1, M, N, K, -2.0f, 0.25f, 1);
        }
    /* K = 0: C = beta C */
    float c[2] = {3.0f, NAN}, a = 1.0f;
    CHECK(dlcx_sgemm(0, 0, 1, 1, 0, 1.0f, &a, 1, &a, 1, 0.5f, c, 2) == DLC_OK);
    CHECK_NEAR(c[0], 1.5, 0);
}

/* Runs a small GPT-like computation (linear, attention, matmul, and their backward)
 * and returns the loss and the sum of |grad| of the weight, for comparing backends. */
static void run_model(double *loss, double *gsum) {
    dlc_rng r;
    dlc_rng_init(&r, 7);
    int64_t xs[3] = {2, 16, 24}, ws[2] = {72, 24}, vs[2] = {24, 11};
    dlc_tensor *x = dlc_tensor_randn(3, xs, &r, 0.0f, 1.0f), *w = dlc_tensor_randn(2, ws, &r, 0.0f, 0.3f);
    dlc_tensor *v = dlc_tensor_randn(2, vs, &r, 0.0f, 1.0f);
    dlc_tensor_set_requires_grad(w, 1);
    dlc_tensor *qkv = dlc_linear(x, w, NULL);
    dlc_tensor *att = dlc_attention(qkv, 2, 1);
    dlc_tensor *y = dlc_matmul(att, v, 0, 0);
    dlc_tensor *yy = dlc_mul(y, y), *l = dlc_mean_all(yy);
    CHECK_OK(l);
    CHECK(dlc_backward(l, NULL, 0) == DLC_OK);
    *loss = l->data[0];
    *gsum = 0;
    for (int64_t i = 0; i < w->numel; i++) *gsum += fabs(w->grad->data[i]);
    dlc_tensor_release(l);
    dlc_tensor_release(yy);
    dlc_tensor_release(y);
    dlc_tensor_release(att);
    dlc_tensor_release(qkv);
    dlc_tensor_release(x);
    dlc_tensor_release(w);
    dlc_tensor_release(v);
}

int main(void) {
    dlc_rng_init(&rng, 12345);
    const char *backends[] = {"openblas", "onednn"};
    double loss[2] = {0}, gsum[2] = {0};
    int have = 0;
    for (int b = 0; b < 2; b++) {
        if (dlc_set_gemm_backend(backends[b]) != DLC_OK) {
            /* only a build without oneDNN may refuse it, and it says why */
            CHECK(b == 1 && strstr(dlc_last_error(), "no oneDNN"));
            continue;
        }
        CHECK(strcmp(dlc_gemm_backend(), backends[b]) == 0);
        for (int th = 1; th <= 2; th++) {
            CHECK(dlc_set_num_threads(th) == DLC_OK);
            CHECK(dlc_num_threads() == th);
            test_backend_numbers();
        }
        run_model(&loss[b], &gsum[b]);
        have |= 1 << b;
    }
    if (have == 3) { /* same numbers from both backends, to float rounding */
        CHECK_NEAR(loss[0], loss[1], 1e-5 * fabs(loss[0]));
        CHECK_NEAR(gsum[0], gsum[1], 1e-5 * fabs(gsum[0]));
    }
    if (have & 2) { /* a failure inside oneDNN comes back as a status with a message */
        float a[4] = {0}, c[4] = {0};
        dlc_set_gemm_backend("onednn");
        CHECK(dlcx_sgemm(0, 0, 2, 2, 2, 1.0f, a, 1 /* < K */, a, 2, 0.0f, c, 2) == DLC_ERR_INTERNAL);
        CHECK(strstr(dlc_last_error(), "sgemm 2x2x2 (onednn): rejected the arguments") != NULL);
    }
    CHECK(dlc_set_gemm_backend("mkl") == DLC_ERR_ARG);
    CHECK(strstr(dlc_last_error(), "\"mkl\": expected \"openblas\" or \"onednn\"") != NULL);
    CHECK(dlc_set_gemm_backend(NULL) == DLC_ERR_ARG);
    CHECK(dlc_set_num_threads(0) == DLC_ERR_ARG);
    CHECK(strstr(dlc_last_error(), "thread count 0: expected 1..1024") != NULL);
    CHECK(dlc_num_threads() == 2); /* unchanged by the refused call */
    return check_done("gemm");
}
