/*
 * parallel.c - splitting the engine's own kernels across the compute threads.
 *
 * The matrix products are threaded by their library; the rest of a step (norms,
 * softmax, attention, GELU, cross-entropy, AdamW, residual adds: a fifth of it on one
 * thread) is split here, by rows, heads or contiguous chunks, on the same OpenMP team
 * of dlc_num_threads() threads that oneDNN uses.  Only OpenMP creates threads (the
 * front end blocks signals in its workers once, and the team persists).  With the
 * OpenBLAS backend everything stays serial (dlcx_par_available).
 *
 * Small tensors stay on the caller's thread: waking the team costs a few microseconds,
 * so a kernel gets one thread per DLCX_PAR_GRAIN floats of memory traffic, at most
 * dlc_num_threads().  A kernel called from inside a parallel region (an attention
 * head's products, a caller's own OpenMP loop) runs serially.
 *
 * DILOCO_PAR_GRAIN in the environment (read once) or dlcx_set_par_grain() lowers the
 * grain, so the tests and the golden spec can split tiny tensors and compare.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "diloco/ops.h"
#include "internal.h"

static atomic_llong g_grain = 0;    /* 0: not read yet */
static atomic_llong g_regions = 0;  /* dispatches that used more than one part */

static int64_t grain(void) {
    long long g = atomic_load_explicit(&g_grain, memory_order_relaxed);
    if (g <= 0) {
        long long expect = 0;
        const char *e = getenv("DILOCO_PAR_GRAIN");
        char *end = NULL;
        g = e ? strtoll(e, &end, 10) : 0;
        if (!e || end == e || *end || g < 1) g = DLCX_PAR_GRAIN;
        if (!atomic_compare_exchange_strong(&g_grain, &expect, g)) g = expect;
    }
    return (int64_t)g;
}

void dlcx_set_par_grain(int64_t g) { atomic_store(&g_grain, g < 1 ? DLCX_PAR_GRAIN : (long long)g); }

int64_t dlcx_par_regions(void) { return (int64_t)atomic_load(&g_regions); }

/* OpenBLAS keeps its own pthread pool: an OpenMP team spinning after each of our
 * kernels would fight it for the cores (two-thread charlm on OpenBLAS fell from 30k to
 * 10k tokens/s), so with that backend the kernels stay on the caller's thread. */
int dlcx_par_available(void) {
#ifdef _OPENMP
    return strcmp(dlc_gemm_backend(), "onednn") == 0;
#else
    return 0;
#endif
}

int dlcx_par_parts(int64_t n, int64_t work) {
#ifdef _OPENMP
    if (n < 2 || omp_in_parallel()) return 1;
    int nt = dlc_num_threads();
    if (nt < 2 || !dlcx_par_available()) return 1;
    int64_t by_work = work / grain();
    int64_t parts = by_work < nt ? by_work : nt;
    if (parts > n) parts = n;
    return parts < 2 ? 1 : (int)parts;
#else
    (void)n;
    (void)work;
    return 1;
#endif
}

/* Start of part p of `parts` over [0, n): even shares, boundaries on multiples of 16
 * items when the parts are long (a float range then starts on a cache line). */
static int64_t part_start(int64_t n, int parts, int p) {
    if (p <= 0) return 0;
    if (p >= parts) return n;
    int64_t s = n / parts * p + n % parts * p / parts;
    return n >= 64 * (int64_t)parts ? s & ~(int64_t)15 : s;
}

void dlcx_par_run(int parts, int64_t n, dlcx_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (parts <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    atomic_fetch_add_explicit(&g_regions, 1, memory_order_relaxed);
#ifdef _OPENMP
    /* The runtime may give fewer threads than asked: each runs every k-th part. */
    DLC_PRAGMA(omp parallel num_threads(parts))
    {
        int k = omp_get_num_threads();
        for (int p = omp_get_thread_num(); p < parts; p += k) {
            int64_t lo = part_start(n, parts, p), hi = part_start(n, parts, p + 1);
            if (lo < hi) fn(ctx, lo, hi, p);
        }
    }
#else
    for (int p = 0; p < parts; p++) {
        int64_t lo = part_start(n, parts, p), hi = part_start(n, parts, p + 1);
        if (lo < hi) fn(ctx, lo, hi, p);
    }
#endif
}

void dlcx_parallel_for(int64_t n, int64_t work, dlcx_range_fn fn, void *ctx) {
    dlcx_par_run(dlcx_par_parts(n, work), n, fn, ctx);
}

/* ---- memory-bound helpers ---- */

typedef struct {
    float *dst;
    const float *src;
} copy_ctx;

static void zero_range(void *c, int64_t lo, int64_t hi, int part) {
    (void)part;
    memset(((copy_ctx *)c)->dst + lo, 0, (size_t)(hi - lo) * sizeof(float));
}

void dlcx_par_zero(float *dst, int64_t n) {
    copy_ctx c = {dst, NULL};
    dlcx_parallel_for(n, n, zero_range, &c);
}

DLC_HOT static void acc_range(void *c, int64_t lo, int64_t hi, int part) {
    (void)part;
    float *restrict d = ((copy_ctx *)c)->dst;
    const float *restrict s = ((copy_ctx *)c)->src;
    for (int64_t i = lo; i < hi; i++) d[i] += s[i];
}

void dlcx_par_acc(float *dst, const float *src, int64_t n) {
    copy_ctx c = {dst, src};
    dlcx_parallel_for(n, 3 * n, acc_range, &c);
}

typedef struct {
    float *dst;
    const float *row, *src;
    int64_t rows, n;
} rows_ctx;

static void fill_rows_range(void *ctx, int64_t r0, int64_t r1, int part) {
    const rows_ctx *c = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *o = c->dst + r * c->n;
        if (c->row) memcpy(o, c->row, (size_t)c->n * sizeof(float));
        else memset(o, 0, (size_t)c->n * sizeof(float));
    }
}

void dlcx_par_fill_rows(float *dst, const float *row, int64_t rows, int64_t n) {
    rows_ctx c = {.dst = dst, .row = row, .rows = rows, .n = n};
    dlcx_parallel_for(rows, rows * n, fill_rows_range, &c);
}

/* Columns [j0, j1): each column sums its rows in row order, whatever the split. */
DLC_HOT static void col_sums_range(void *ctx, int64_t j0, int64_t j1, int part) {
    const rows_ctx *c = ctx;
    float *d = c->dst + j0;
    int64_t w = j1 - j0;
    for (int64_t r = 0; r < c->rows; r++) {
        const float *s = c->src + r * c->n + j0;
        for (int64_t j = 0; j < w; j++) d[j] += s[j];
    }
}

void dlcx_par_acc_col_sums(float *dst, const float *src, int64_t rows, int64_t n) {
    rows_ctx c = {.dst = dst, .src = src, .rows = rows, .n = n};
    dlcx_parallel_for(n, rows * n, col_sums_range, &c);
}
