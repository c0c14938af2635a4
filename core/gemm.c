/*
 * gemm.c - the one sgemm every matrix product in the engine goes through, and the
 * thread count of the compute kernels.
 *
 * Two backends.  "onednn": oneDNN's dnnl_sgemm, whose JIT kernels are chosen at run
 * time for the widest vector ISA the CPU has (AVX-512 where present).  "openblas":
 * cblas_sgemm, whose kernels OpenBLAS picks at load time (OPENBLAS_CORETYPE can pin
 * them).  The default is onednn when the library was built with it; DILOCO_GEMM=openblas
 * or onednn in the environment, or dlc_set_gemm_backend(), picks one.
 *
 * Threads: one count for both backends.  It starts as OpenBLAS's (which reads
 * OPENBLAS_NUM_THREADS, then GOTO_NUM_THREADS, then OMP_NUM_THREADS, else all cores),
 * so the environment that sets OpenBLAS to one thread per learner process does the
 * same for oneDNN.  oneDNN runs on OpenMP, whose thread count is per calling thread,
 * so each call sets it when it differs.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#ifdef DLC_HAVE_ONEDNN
#include <dnnl.h>
#include <omp.h>
#endif
#include "diloco/ops.h"
#include "internal.h"

enum { GEMM_OPENBLAS, GEMM_ONEDNN };
static const char *const gemm_names[] = {"openblas", "onednn"};

static atomic_int g_backend = -1; /* -1: not chosen yet */
static atomic_int g_threads = 0;  /* 0: not chosen yet */

static int default_backend(void) {
#ifdef DLC_HAVE_ONEDNN
    const char *e = getenv("DILOCO_GEMM");
    if (e && strcmp(e, "openblas") == 0) return GEMM_OPENBLAS;
    return GEMM_ONEDNN;
#else
    return GEMM_OPENBLAS;
#endif
}

static int backend(void) {
    int b = atomic_load_explicit(&g_backend, memory_order_relaxed);
    if (b < 0) {
        int expect = -1;
        b = default_backend();
        if (!atomic_compare_exchange_strong(&g_backend, &expect, b)) b = expect;
    }
    return b;
}

const char *dlc_gemm_backend(void) { return gemm_names[backend()]; }

dlc_status dlc_set_gemm_backend(const char *name) {
    if (!name) return dlc_error(DLC_ERR_ARG, "gemm backend: expected \"openblas\" or \"onednn\", got NULL");
#ifdef DLC_HAVE_ONEDNN
    if (strcmp(name, "onednn") == 0) {
        atomic_store(&g_backend, GEMM_ONEDNN);
        return DLC_OK;
    }
#else
    if (strcmp(name, "onednn") == 0)
        return dlc_error(DLC_ERR_ARG, "gemm backend \"onednn\": this build has no oneDNN "
                         "(configure with libdnnl-dev installed and -DDLC_ONEDNN=ON)");
#endif
    if (strcmp(name, "openblas") == 0) {
        atomic_store(&g_backend, GEMM_OPENBLAS);
        return DLC_OK;
    }
    return dlc_error(DLC_ERR_ARG, "gemm backend \"%.64s\": expected \"openblas\" or \"onednn\"", name);
}

int dlc_num_threads(void) {
    int n = atomic_load_explicit(&g_threads, memory_order_relaxed);
    if (n <= 0) {
        int expect = 0;
        n = openblas_get_num_threads();
        if (n < 1) n = 1;
        if (!atomic_compare_exchange_strong(&g_threads, &expect, n)) n = expect;
    }
    return n;
}

dlc_status dlc_set_num_threads(int n) {
    if (n < 1 || n > 1024) return dlc_error(DLC_ERR_ARG, "thread count %d: expected 1..1024", n);
    openblas_set_num_threads(n);
    atomic_store(&g_threads, n);
    return DLC_OK;
}

dlc_status dlcx_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return DLC_OK;
    if (K <= 0) { /* C = beta C; the libraries disagree with BLAS here (they leave C) */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return DLC_OK;
    }
#ifdef DLC_HAVE_ONEDNN
    if (backend() == GEMM_ONEDNN) {
        int n = dlc_num_threads();
        if (omp_get_max_threads() != n) omp_set_num_threads(n);
        /* dnnl_sgemm is row-major like ours.  Bad arguments are ruled out by the callers
         * (sizes checked against the tensors); what remains is its scratch allocation
         * failing, possibly after other threads wrote part of C. */
        dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                                      C, ldc);
        if (st == dnnl_success) return DLC_OK;
        return dlc_error(st == dnnl_out_of_memory ? DLC_ERR_NOMEM : DLC_ERR_INTERNAL,
                         "sgemm %lldx%lldx%lld (onednn): %s", (long long)M, (long long)N, (long long)K,
                         st == dnnl_out_of_memory ? "out of memory" : "rejected the arguments");
    }
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return DLC_OK;
}
