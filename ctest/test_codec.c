/* test_codec.c - the wire codecs (codec.h): identity, round-trip error bounds of
 * docs/codecs.md, bf16 and e4m3 rounding against independent references, edge cases,
 * rejected inputs and sizes, error feedback, decode_axpy. */
#include <float.h>
#include <stdint.h>
#include "check.h"
#include "diloco/codec.h"

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float unif(dlc_rng *g) {
    float u;
    dlc_rng_uniform(g, &u, 1, 0.0f, 1.0f);
    return u;
}

static float *randn(int64_t n, uint64_t seed, float std) {
    int64_t s[1] = {n};
    dlc_tensor *t = check_randn(seed, std, 1, s);
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    memcpy(x, t->data, sizeof(float) * (size_t)n);
    dlc_tensor_release(t);
    return x;
}

/* Encodes and decodes x; returns the decoded copy (malloc) or NULL after a CHECK failure. */
static float *roundtrip(dlc_codec_kind k, int block, const float *x, int64_t n) {
    dlc_codec_params p = {block};
    int64_t size = dlc_codec_encoded_size(k, &p, n);
    CHECK(size >= 0);
    uint8_t *buf = malloc((size_t)size + 1);
    float *y = malloc(sizeof(float) * (size_t)(n + 1));
    int64_t w = dlc_codec_encode(k, &p, x, n, buf, (size_t)size, NULL);
    if (w != size) fprintf(stderr, "encode %s: %s\n", dlc_codec_name(k), dlc_last_error());
    CHECK(w == size);
    dlc_status st = dlc_codec_decode(k, &p, buf, (size_t)size, y, n);
    if (st) fprintf(stderr, "decode %s: %s\n", dlc_codec_name(k), dlc_last_error());
    CHECK(st == DLC_OK);
    free(buf);
    return y;
}

/* The documented bound of docs/codecs.md for element i; amax is its block's absmax. */
static double bound(dlc_codec_kind k, float x, float amax) {
    double ax = fabs((double)x), tiny = 64 * 0x1p-149; /* slack for a denormal scale */
    switch (k) {
    case DLC_CODEC_F32: return 0;
    case DLC_CODEC_BF16: return fmax(ax * 0x1p-8, 0x1p-134);
    case DLC_CODEC_FP8: return fmax(ax * 0x1p-4, 0x1p-10);
    case DLC_CODEC_INT8: return amax / 127.0 / 2 * (1 + 1e-5) + tiny;
    case DLC_CODEC_INT4: return amax / 7.0 / 2 * (1 + 1e-5) + tiny;
    default: return fmax(ax / 3, amax * 0x1p-7) * (1 + 1e-5) + tiny;
    }
}

/* Checks every element against its bound; returns max(err / bound) over elements. */
static double check_bounds(dlc_codec_kind k, int block, const float *x, int64_t n) {
    float *y = roundtrip(k, block, x, n);
    int blk = (k == DLC_CODEC_INT8 || k == DLC_CODEC_INT4 || k == DLC_CODEC_E3M0) ? block : 1;
    int bad = 0;
    double worst = 0;
    for (int64_t b0 = 0; b0 < n; b0 += blk) {
        int64_t e = b0 + blk < n ? b0 + blk : n;
        float amax = 0;
        for (int64_t i = b0; i < e; i++) amax = fmaxf(amax, fabsf(x[i]));
        for (int64_t i = b0; i < e; i++) {
            double err = fabs((double)y[i] - x[i]), bd = bound(k, x[i], amax);
            if (!(err <= bd) || !isfinite(y[i])) {
                if (bad++ < 3)
                    fprintf(stderr, "%s block %d: x[%lld] = %.9g decodes to %.9g (err %g > bound %g)\n",
                            dlc_codec_name(k), block, (long long)i, x[i], y[i], err, bd);
            }
            if (bd > 0 && err / bd > worst) worst = err / bd;
        }
    }
    CHECK(bad == 0);
    free(y);
    return worst;
}

static void test_names_sizes(void) {
    for (int k = 0; k < DLC_CODEC_COUNT; k++) {
        dlc_codec_kind got;
        CHECK(dlc_codec_from_name(dlc_codec_name((dlc_codec_kind)k), &got) == DLC_OK && got == (dlc_codec_kind)k);
    }
    dlc_codec_kind got;
    CHECK(dlc_codec_from_name("e4m3", &got) == DLC_OK && got == DLC_CODEC_FP8);
    CHECK(dlc_codec_from_name("int2", &got) == DLC_ERR_ARG && strstr(dlc_last_error(), "\"int2\"") &&
          strstr(dlc_last_error(), "e3m0"));
    CHECK(dlc_codec_name(DLC_CODEC_COUNT) == NULL);
    CHECK(dlc_codec_default_params().block == 128);
    dlc_codec_params p = {128};
    CHECK(dlc_codec_encoded_size(DLC_CODEC_F32, &p, 1000) == 4000);
    CHECK(dlc_codec_encoded_size(DLC_CODEC_BF16, &p, 1000) == 2000);
    CHECK(dlc_codec_encoded_size(DLC_CODEC_FP8, &p, 1000) == 1000);
    CHECK(dlc_codec_encoded_size(DLC_CODEC_INT8, &p, 1000) == 4 * 8 + 1000);
    CHECK(dlc_codec_encoded_size(DLC_CODEC_INT4, &p, 1001) == 4 * 8 + 501);
    CHECK(dlc_codec_encoded_size(DLC_CODEC_E3M0, &p, 1024) == 4 * 8 + 512);
    CHECK(dlc_codec_encoded_size(DLC_CODEC_E3M0, NULL, 129) == 4 * 2 + 65);
    p.block = 34;
    CHECK(dlc_codec_encoded_size(DLC_CODEC_INT4, &p, 35) == 4 * 2 + 18);
    for (int k = 0; k < DLC_CODEC_COUNT; k++) CHECK(dlc_codec_encoded_size((dlc_codec_kind)k, &p, 0) == 0);
    int badb[] = {16, 31, 33, 258, 0, -2};
    for (int i = 0; i < 6; i++) {
        p.block = badb[i];
        CHECK(dlc_codec_encoded_size(DLC_CODEC_INT8, &p, 10) == DLC_ERR_ARG && strstr(dlc_last_error(), "block ="));
    }
    CHECK(dlc_codec_encoded_size(DLC_CODEC_COUNT, NULL, 10) == DLC_ERR_ARG);
    CHECK(dlc_codec_encoded_size(DLC_CODEC_F32, NULL, -1) == DLC_ERR_RANGE);
}

static void test_f32_identity(void) {
    int64_t n = 1003;
    float *x = randn(n, 1, 1.0f);
    x[0] = -0.0f;
    x[1] = 1e-42f; /* denormal */
    x[2] = FLT_MAX;
    x[3] = -FLT_MIN;
    float *y = roundtrip(DLC_CODEC_F32, 128, x, n);
    CHECK(memcmp(x, y, sizeof(float) * (size_t)n) == 0);
    free(x);
    free(y);
}

/* The dense codecs (every element sent): kinds below it.  The sparse ones have their own
 * tests (test_sparse). */
#define DENSE_COUNT DLC_CODEC_SPARSE2

static void test_bounds_random(void) {
    int blocks[] = {32, 34, 128, 250, 256};
    for (int k = 0; k < DENSE_COUNT; k++)
        for (int b = 0; b < 5; b++) {
            int64_t n = 10007;
            float *x = randn(n, 7 + b, 1.0f);
            double worst = check_bounds((dlc_codec_kind)k, blocks[b], x, n);
            /* the bounds are tight: some element comes close to its bound */
            if (k != DLC_CODEC_F32) CHECK(worst > 0.5);
            free(x);
        }
    /* small outer-gradient-like values too (fp8 is unscaled: mostly subnormal there) */
    for (int k = 0; k < DENSE_COUNT; k++) {
        float *x = randn(4099, 3, 1e-3f);
        check_bounds((dlc_codec_kind)k, 64, x, 4099);
        free(x);
    }
}

static void test_edge_cases(void) {
    int64_t n = 515;
    float *x = calloc((size_t)n, sizeof(float));
    for (int k = 0; k < DLC_CODEC_COUNT; k++) {
        float *y = roundtrip((dlc_codec_kind)k, 64, x, n); /* all zero */
        int nz = 0;
        for (int64_t i = 0; i < n; i++) nz += y[i] != 0.0f;
        CHECK(nz == 0);
        free(y);
    }
    free(x);
    /* one huge value in a block; the largest finite float in another */
    x = randn(n, 11, 1.0f);
    x[70] = 1e30f;
    x[300] = -FLT_MAX;
    for (int k = 0; k < DENSE_COUNT; k++) {
        if (k == DLC_CODEC_FP8) continue; /* saturates at 448, by design */
        check_bounds((dlc_codec_kind)k, 64, x, n);
        float *y = roundtrip((dlc_codec_kind)k, 64, x, n);
        CHECK(y[70] == 1e30f || k == DLC_CODEC_BF16);
        CHECK(isfinite(y[300]) && y[300] < -3e38f);
        free(y);
    }
    float *y = roundtrip(DLC_CODEC_FP8, 64, x, n);
    CHECK(y[70] == 448.0f && y[300] == -448.0f);
    free(y);
    free(x);
    /* denormal inputs, blocks of them and mixed with zeros */
    x = randn(n, 12, 1.0f);
    for (int64_t i = 0; i < n; i++) x[i] *= (i % 3) ? 1e-39f : 0.0f;
    for (int k = 0; k < DENSE_COUNT; k++) check_bounds((dlc_codec_kind)k, 32, x, n);
    free(x);
    /* n = 0 */
    for (int k = 0; k < DLC_CODEC_COUNT; k++) {
        uint8_t b[1];
        float f[1];
        CHECK(dlc_codec_encode((dlc_codec_kind)k, NULL, NULL, 0, NULL, 0, NULL) == 0);
        CHECK(dlc_codec_decode((dlc_codec_kind)k, NULL, b, 0, f, 0) == DLC_OK);
    }
}

/* Independent bf16 reference: from the discarded low half, not by adding a bias. */
static uint16_t bf16_ref(uint32_t u) {
    uint32_t hi = u >> 16, lo = u & 0xffff;
    if (lo > 0x8000 || (lo == 0x8000 && (hi & 1))) hi++;
    if ((hi & 0x7fff) == 0x7f80) hi--; /* documented saturation */
    return (uint16_t)hi;
}

static void test_bf16_rne(void) {
    dlc_rng g;
    dlc_rng_init(&g, 5);
    int bad = 0;
    uint32_t lows[] = {0x8000, 0x7fff, 0x8001, 0x0000, 0xffff, 0x0001};
    float x[600];
    uint32_t want[600];
    int m = 0;
    for (int i = 0; i < 100; i++) {
        uint32_t hi = (uint32_t)(unif(&g) * 65536.0f) & 0xffff;
        if ((hi & 0x7f80) == 0x7f80) hi &= 0xbfff; /* keep it finite */
        if (i == 0) hi = 0x3f80;                  /* 1.0: even, tie stays */
        if (i == 1) hi = 0x3f81;                  /* odd, tie goes up */
        if (i == 2) hi = 0x7f7f;                  /* bf16 max: rounds up to inf, saturated */
        for (int j = 0; j < 6; j++) {
            x[m] = float_of(hi << 16 | lows[j]);
            want[m++] = bf16_ref(hi << 16 | lows[j]);
        }
    }
    for (int i = 0; i < m; i++) bad += dlc_bf16_from_f32(x[i]) != want[i];
    CHECK(bad == 0);
    CHECK(dlc_bf16_from_f32(float_of(0x3f808000)) == 0x3f80);
    CHECK(dlc_bf16_from_f32(float_of(0x3f818000)) == 0x3f82);
    CHECK(dlc_bf16_from_f32(FLT_MAX) == 0x7f7f);
    /* the bulk path agrees with the scalar one */
    dlc_codec_params p = dlc_codec_default_params();
    uint8_t buf[1200];
    CHECK(dlc_codec_encode(DLC_CODEC_BF16, &p, x, m, buf, sizeof buf, NULL) == 2 * m);
    bad = 0;
    for (int i = 0; i < m; i++) bad += (uint16_t)(buf[2 * i] | buf[2 * i + 1] << 8) != want[i];
    CHECK(bad == 0);
}

/* Independent e4m3 reference: nearest of the 127 non-negative finite codes by distance,
 * ties to the even code (= even mantissa), saturating above 448. */
static uint8_t fp8_ref(float x) {
    double ax = fabs((double)x), best = INFINITY;
    int bc = 0;
    for (int c = 0; c <= 0x7e; c++) {
        int e = c >> 3, mm = c & 7;
        double v = e ? ldexp(1.0 + mm / 8.0, e - 7) : ldexp(mm / 8.0, -6);
        double d = fabs(v - ax);
        if (d < best || (d == best && !(c & 1))) best = d, bc = c;
    }
    return (uint8_t)(bc | (signbit(x) ? 0x80 : 0));
}

static void test_fp8(void) {
    struct { float x; uint8_t c; } known[] = {
        {1.0f, 0x38},       {-1.0f, 0xb8},       {448.0f, 0x7e},      {-448.0f, 0xfe},
        {500.0f, 0x7e},     {464.0f, 0x7e},      {1e30f, 0x7e},       {-FLT_MAX, 0xfe},
        {0x1p-9f, 0x01},    {0x1p-10f, 0x00},    {0x1.8p-9f, 0x02},   {0x1p-6f, 0x08},
        {0x1.cp-7f, 0x07},  {0.5f, 0x30},        {240.0f, 0x77},      {0.0f, 0x00},
        {-0.0f, 0x80},      {1.0625f, 0x38},     {1.1875f, 0x3a},     {1e-42f, 0x00},
    };
    int nk = (int)(sizeof known / sizeof known[0]);
    for (int i = 0; i < nk; i++) {
        uint8_t c = dlc_fp8_e4m3_from_f32(known[i].x);
        if (c != known[i].c) fprintf(stderr, "fp8(%g) = 0x%02x, expected 0x%02x\n", known[i].x, c, known[i].c);
        CHECK(c == known[i].c);
    }
    CHECK(dlc_fp8_e4m3_to_f32(0x7e) == 448.0f && dlc_fp8_e4m3_to_f32(0x01) == 0x1p-9f);
    CHECK(dlc_fp8_e4m3_to_f32(0x7f) == 448.0f && dlc_fp8_e4m3_to_f32(0xff) == -448.0f); /* never NaN */
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        float v = dlc_fp8_e4m3_to_f32((uint8_t)c);
        bad += !isfinite(v);
        if ((c & 0x7f) != 0x7f) bad += dlc_fp8_e4m3_from_f32(v) != c;
    }
    CHECK(bad == 0);
    /* random values across the whole range, and exact midpoints between codes */
    dlc_rng g;
    dlc_rng_init(&g, 9);
    bad = 0;
    for (int i = 0; i < 20000; i++) {
        float x = (unif(&g) - 0.5f) * ldexpf(1.0f, (int)(unif(&g) * 24) - 14);
        if (i % 4 == 0) { /* a midpoint */
            int c = (int)(unif(&g) * 126);
            x = 0.5f * (dlc_fp8_e4m3_to_f32((uint8_t)c) + dlc_fp8_e4m3_to_f32((uint8_t)(c + 1)));
        }
        uint8_t got = dlc_fp8_e4m3_from_f32(x), want = fp8_ref(x);
        if (got != want && bad++ < 3) fprintf(stderr, "fp8(%.9g) = 0x%02x, reference 0x%02x\n", x, got, want);
    }
    CHECK(bad == 0);
}

static void test_e3m0_mapping(void) {
    /* block absmax 1: levels 2^-6..1 and zero, the midpoints 0.75 * 2^k round up */
    float x[64] = {1.0f, -1.0f, 0.5f, 0.25f, 0x1p-6f, 0x1p-7f, 0x1.fp-8f, 0.75f, 0.74f, -0.3f, 0.0f, -0.0f};
    dlc_codec_params p = {64};
    uint8_t buf[4 + 32];
    CHECK(dlc_codec_encode(DLC_CODEC_E3M0, &p, x, 64, buf, sizeof buf, NULL) == 36);
    float s;
    memcpy(&s, buf, 4);
    CHECK(s == 1.0f);
    uint8_t *c = buf + 4;
    CHECK(c[0] == (0x7 | 0xf << 4));      /* 1 -> c 7, -1 -> 8|7 */
    CHECK(c[1] == (0x6 | 0x5 << 4));      /* 0.5 -> 6, 0.25 -> 5 */
    CHECK(c[2] == (0x1 | 0x1 << 4));      /* 2^-6 -> 1, 2^-7 (midpoint to zero) -> 1 */
    CHECK(c[3] == (0x0 | 0x7 << 4));      /* just below 2^-7 -> 0, 0.75 -> 7 */
    CHECK(c[4] == (0x6 | 0xd << 4));      /* 0.74 -> 0.5, -0.3 -> -0.25 (8|5) */
    CHECK(c[5] == 0);                     /* +0 and -0 are both code 0 */
    float y[64];
    CHECK(dlc_codec_decode(DLC_CODEC_E3M0, &p, buf, sizeof buf, y, 64) == DLC_OK);
    CHECK(y[0] == 1.0f && y[1] == -1.0f && y[4] == 0x1p-6f && y[9] == -0.25f && y[10] == 0.0f);
    buf[4 + 5] = 0x88; /* -zero codes read as +0 */
    CHECK(dlc_codec_decode(DLC_CODEC_E3M0, &p, buf, sizeof buf, y, 64) == DLC_OK);
    CHECK(y[10] == 0.0f && !signbit(y[10]) && y[11] == 0.0f);
}

static void test_rejects(void) {
    int64_t n = 3000;
    float *x = randn(n, 21, 1.0f);
    float *ef = calloc((size_t)n, sizeof(float));
    for (int64_t i = 0; i < n; i++) ef[i] = 1e-3f * (float)(i % 7);
    float *ef0 = malloc(sizeof(float) * (size_t)n);
    memcpy(ef0, ef, sizeof(float) * (size_t)n);
    uint8_t *buf = malloc(4 * (size_t)n + 1024);
    size_t cap = 4 * (size_t)n + 1024;
    char want[160];
    for (int k = 0; k < DLC_CODEC_COUNT; k++) {
        float saved = x[1234];
        x[1234] = NAN;
        CHECK(dlc_codec_encode((dlc_codec_kind)k, NULL, x, n, buf, cap, NULL) == DLC_ERR_ARG &&
              strstr(dlc_last_error(), "element 1234 is nan"));
        x[1234] = saved;
        x[2999] = -INFINITY;
        CHECK(dlc_codec_encode((dlc_codec_kind)k, NULL, x, n, buf, cap, ef) == DLC_ERR_ARG &&
              strstr(dlc_last_error(), "element 2999 is -inf"));
        CHECK(memcmp(ef, ef0, sizeof(float) * (size_t)n) == 0); /* feedback untouched */
        x[2999] = 1.0f;
        x[5] = FLT_MAX;
        ef[5] = FLT_MAX;
        CHECK(dlc_codec_encode((dlc_codec_kind)k, NULL, x, n, buf, cap, ef) == DLC_ERR_ARG &&
              strstr(dlc_last_error(), "element 5: x + error_feedback"));
        ef[5] = ef0[5];
        x[5] = 0.5f;
        int64_t size = dlc_codec_encoded_size((dlc_codec_kind)k, NULL, n);
        snprintf(want, sizeof want, "out_cap = %lld bytes, but 3000 elements need %lld", (long long)size - 1,
                 (long long)size);
        CHECK(dlc_codec_encode((dlc_codec_kind)k, NULL, x, n, buf, (size_t)size - 1, NULL) == DLC_ERR_RANGE &&
              strstr(dlc_last_error(), want));
        CHECK(dlc_codec_encode((dlc_codec_kind)k, NULL, x, n, buf, (size_t)size, NULL) == size);
        float *y = malloc(sizeof(float) * (size_t)n);
        snprintf(want, sizeof want, "in_len = %lld bytes, but 3000 elements encode to %lld", (long long)size + 1,
                 (long long)size);
        CHECK(dlc_codec_decode((dlc_codec_kind)k, NULL, buf, (size_t)size + 1, y, n) == DLC_ERR_FORMAT &&
              strstr(dlc_last_error(), want));
        CHECK(dlc_codec_decode((dlc_codec_kind)k, NULL, buf, (size_t)size - 1, y, n) == DLC_ERR_FORMAT);
        CHECK(dlc_codec_decode_axpy((dlc_codec_kind)k, NULL, buf, (size_t)size - 1, n, 1.0f, y) == DLC_ERR_FORMAT);
        CHECK(dlc_codec_validate((dlc_codec_kind)k, NULL, buf, (size_t)size - 1, n) == DLC_ERR_FORMAT &&
              strstr(dlc_last_error(), "validate: in_len"));
        CHECK(dlc_codec_validate((dlc_codec_kind)k, NULL, buf, (size_t)size, n) == DLC_OK);
        /* hostile bytes: a NaN or negative scale, a NaN f32 / bf16 value */
        float acc0 = 3.0f;
        for (int64_t i = 0; i < n; i++) y[i] = acc0;
        if (k >= DLC_CODEC_SPARSE2) { /* block 2's record: a NaN or negative scale, indices out of order */
            int64_t rec = dlc_codec_encoded_size((dlc_codec_kind)k, NULL, 128), at = 2 * rec;
            uint16_t bad_s[3] = {0xffc0u, 0xbf80u, 0};
            for (int j = 0; j < 3; j++) {
                uint8_t keep[5];
                memcpy(keep, buf + at, 5);
                if (j < 2) memcpy(buf + at, &bad_s[j], 2);
                else buf[at + 2] = buf[at + 3]; /* the two indices equal */
                const char *why = j < 2 ? "block 2: its scale is negative or not finite"
                                        : "block 2: its indices are not strictly increasing";
                CHECK(dlc_codec_decode((dlc_codec_kind)k, NULL, buf, (size_t)size, y, n) == DLC_ERR_FORMAT &&
                      strstr(dlc_last_error(), why));
                for (int64_t i = 0; i < n; i++) y[i] = acc0;
                CHECK(dlc_codec_decode_axpy((dlc_codec_kind)k, NULL, buf, (size_t)size, n, 1.0f, y) == DLC_ERR_FORMAT);
                CHECK(dlc_codec_validate((dlc_codec_kind)k, NULL, buf, (size_t)size, n) == DLC_ERR_FORMAT &&
                      strstr(dlc_last_error(), why));
                memcpy(buf + at, keep, 5);
            }
        } else if (k >= DLC_CODEC_INT8) {
            float bad_s[2] = {NAN, -1.0f};
            for (int j = 0; j < 2; j++) {
                uint8_t keep[4];
                memcpy(keep, buf + 8, 4);
                memcpy(buf + 8, &bad_s[j], 4);
                CHECK(dlc_codec_decode((dlc_codec_kind)k, NULL, buf, (size_t)size, y, n) == DLC_ERR_FORMAT &&
                      strstr(dlc_last_error(), "block 2 has scale"));
                for (int64_t i = 0; i < n; i++) y[i] = acc0;
                CHECK(dlc_codec_decode_axpy((dlc_codec_kind)k, NULL, buf, (size_t)size, n, 1.0f, y) == DLC_ERR_FORMAT);
                CHECK(dlc_codec_validate((dlc_codec_kind)k, NULL, buf, (size_t)size, n) == DLC_ERR_FORMAT &&
                      strstr(dlc_last_error(), "block 2 has scale"));
                memcpy(buf + 8, keep, 4);
            }
        } else if (k != DLC_CODEC_FP8) {
            int w = k == DLC_CODEC_F32 ? 4 : 2;
            memset(buf + (size_t)w * 2900, 0xff, (size_t)w); /* a NaN pattern at element 2900 */
            CHECK(dlc_codec_decode((dlc_codec_kind)k, NULL, buf, (size_t)size, y, n) == DLC_ERR_FORMAT &&
                  strstr(dlc_last_error(), "element 2900 decodes to nan"));
            for (int64_t i = 0; i < n; i++) y[i] = acc0;
            CHECK(dlc_codec_decode_axpy((dlc_codec_kind)k, NULL, buf, (size_t)size, n, 1.0f, y) == DLC_ERR_FORMAT &&
                  strstr(dlc_last_error(), "element 2900"));
            CHECK(dlc_codec_validate((dlc_codec_kind)k, NULL, buf, (size_t)size, n) == DLC_ERR_FORMAT &&
                  strstr(dlc_last_error(), "validate: element 2900 decodes to nan"));
        }
        int same = 1;
        for (int64_t i = 0; i < n; i++) same &= y[i] == acc0; /* axpy left acc alone */
        CHECK(same);
        free(y);
    }
    free(x);
    free(ef);
    free(ef0);
    free(buf);
}

/* Codes the encoders never write (-128, the int4 nibble 8) under the largest scale an
 * encoder can write must still decode to finite values. */
static void test_unwritten_codes(void) {
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = i % 2 ? FLT_MAX : -FLT_MAX;
    dlc_codec_params p = {32};
    uint8_t buf[4 + 32];
    float y[32];
    CHECK(dlc_codec_encode(DLC_CODEC_INT8, &p, x, 32, buf, sizeof buf, NULL) == 36);
    buf[4] = 0x80; /* -128 */
    CHECK(dlc_codec_decode(DLC_CODEC_INT8, &p, buf, 36, y, 32) == DLC_OK && isfinite(y[0]) && y[0] == y[2]);
    CHECK(dlc_codec_encode(DLC_CODEC_INT4, &p, x, 32, buf, sizeof buf, NULL) == 20);
    buf[4] = 0x88; /* -8, -8 */
    CHECK(dlc_codec_decode(DLC_CODEC_INT4, &p, buf, 20, y, 32) == DLC_OK && isfinite(y[0]) && isfinite(y[1]));
    CHECK(y[0] == y[2] && y[1] == y[2]);
}

static void test_error_feedback(void) {
    int64_t n = 4096;
    int K = 64;
    float *x = randn(n, 31, 1e-2f);
    float *ef = calloc((size_t)n, sizeof(float));
    double *s_fb = calloc((size_t)n, sizeof(double)), *s_no = calloc((size_t)n, sizeof(double));
    float *y = malloc(sizeof(float) * (size_t)n);
    uint8_t *buf = malloc(4 * (size_t)n);
    for (int k = DLC_CODEC_BF16; k < DLC_CODEC_COUNT; k++) {
        dlc_codec_params p = {64};
        int64_t size = dlc_codec_encoded_size((dlc_codec_kind)k, &p, n);
        memset(ef, 0, sizeof(float) * (size_t)n);
        memset(s_fb, 0, sizeof(double) * (size_t)n);
        memset(s_no, 0, sizeof(double) * (size_t)n);
        for (int r = 0; r < K; r++) {
            CHECK(dlc_codec_encode((dlc_codec_kind)k, &p, x, n, buf, (size_t)size, ef) == size);
            CHECK(dlc_codec_decode((dlc_codec_kind)k, &p, buf, (size_t)size, y, n) == DLC_OK);
            for (int64_t i = 0; i < n; i++) s_fb[i] += y[i];
            CHECK(dlc_codec_encode((dlc_codec_kind)k, &p, x, n, buf, (size_t)size, NULL) == size);
            CHECK(dlc_codec_decode((dlc_codec_kind)k, &p, buf, (size_t)size, y, n) == DLC_OK);
            for (int64_t i = 0; i < n; i++) s_no[i] += y[i];
        }
        double e_fb = 0, e_no = 0;
        for (int64_t i = 0; i < n; i++) {
            e_fb += pow(s_fb[i] - (double)K * x[i], 2);
            e_no += pow(s_no[i] - (double)K * x[i], 2);
        }
        e_fb = sqrt(e_fb);
        e_no = sqrt(e_no);
        printf("error feedback %s: |sum - K x| %.3g with, %.3g without (K = %d)\n", dlc_codec_name((dlc_codec_kind)k),
               e_fb, e_no, K);
        /* without feedback the error of a constant input adds up K times; with it, the
         * sum is off by the last round's residual alone (sum + e = K x), which for the
         * sparse codecs is what waits to be sent */
        if (k < DENSE_COUNT) CHECK(e_fb * 10 < e_no);
        double e_id = 0;
        for (int64_t i = 0; i < n; i++) e_id = fmax(e_id, fabs(s_fb[i] + ef[i] - (double)K * x[i]));
        CHECK(e_fb < e_no && e_id < 1e-4);
    }
    free(x);
    free(ef);
    free(s_fb);
    free(s_no);
    free(y);
    free(buf);
}

static void test_axpy(void) {
    int64_t n = 5001;
    float *x = randn(n, 41, 1.0f), *acc = randn(n, 42, 1.0f), *ref = malloc(sizeof(float) * (size_t)n);
    float *y = malloc(sizeof(float) * (size_t)n);
    uint8_t *buf = malloc(4 * (size_t)n);
    float w = 0.37f;
    for (int k = 0; k < DLC_CODEC_COUNT; k++) {
        dlc_codec_params p = {96};
        int64_t size = dlc_codec_encoded_size((dlc_codec_kind)k, &p, n);
        CHECK(dlc_codec_encode((dlc_codec_kind)k, &p, x, n, buf, (size_t)size, NULL) == size);
        CHECK(dlc_codec_decode((dlc_codec_kind)k, &p, buf, (size_t)size, y, n) == DLC_OK);
        for (int64_t i = 0; i < n; i++) ref[i] = acc[i] + w * y[i];
        CHECK(dlc_codec_decode_axpy((dlc_codec_kind)k, &p, buf, (size_t)size, n, w, acc) == DLC_OK);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) bad += fabsf(acc[i] - ref[i]) > 1e-6f * (fabsf(ref[i]) + fabsf(w * y[i]));
        CHECK(bad == 0);
    }
    CHECK(dlc_codec_decode_axpy(DLC_CODEC_F32, NULL, buf, 4 * (size_t)n, n, NAN, acc) == DLC_ERR_ARG);
    free(x);
    free(acc);
    free(ref);
    free(y);
    free(buf);
}

/* ---- the sparse codecs against an independent reference ---- */

static const float *sp_x; /* (qsort's comparison reads it) */
static int by_magnitude(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    float fa = fabsf(sp_x[i]), fb = fabsf(sp_x[j]);
    if (fa != fb) return fa > fb ? -1 : 1;
    return i < j ? -1 : 1; /* the lower index first among equals */
}

/* What sparse2 / sparse4 at `block` must decode x[0..n) to, by sorting each block. */
static void sparse_ref(dlc_codec_kind k, int block, const float *x, int64_t n, float *y) {
    int keep = block / 64 > 1 ? block / 64 : 1;
    float q = k == DLC_CODEC_SPARSE2 ? 1.0f : 7.0f;
    int order[256];
    for (int64_t i0 = 0; i0 < n; i0 += block) {
        int len = n - i0 < block ? (int)(n - i0) : block, kk = len < keep ? len : keep;
        for (int i = 0; i < len; i++) order[i] = i, y[i0 + i] = 0.0f;
        sp_x = x + i0;
        qsort(order, (size_t)len, sizeof order[0], by_magnitude);
        float amax = fabsf(x[i0 + order[0]]), v = amax / q;
        uint32_t u;
        memcpy(&u, &v, 4);
        uint32_t sb = (uint32_t)bf16_ref(u) << 16;
        float s;
        memcpy(&s, &sb, 4);
        if (!((double)s * q <= FLT_MAX)) sb -= 1u << 16, memcpy(&s, &sb, 4);
        for (int j = 0; j < kk; j++) {
            float xv = x[i0 + order[j]], r;
            if (k == DLC_CODEC_SPARSE2) {
                r = fabsf(xv) >= 0.75f * s ? s : 0.5f * s;
            } else {
                double qq = s > 0 ? nearbyint((double)fabsf(xv) / s) : 0;
                r = (float)(qq > 7 ? 7 : qq) * s;
            }
            y[i0 + order[j]] = xv < 0 ? -r : r;
        }
    }
}

/* Sizes (the records of docs/codecs.md), and decoding that equals the reference: each
 * block's k = max(1, block / 64) largest magnitudes kept (ties to the lower index), on a
 * bf16 scale, every other element 0; blocks of ties, zeros and a short last block. */
static void test_sparse(void) {
    dlc_codec_params p = {128};
    CHECK(dlc_codec_encoded_size(DLC_CODEC_SPARSE2, &p, 1000) == 7 * 5 + 5); /* 2 + 2 + 1 a block */
    CHECK(dlc_codec_encoded_size(DLC_CODEC_SPARSE4, &p, 1000) == 7 * 5 + 5);
    p.block = 256;
    CHECK(dlc_codec_encoded_size(DLC_CODEC_SPARSE2, &p, 1000) == 3 * 7 + 7); /* 2 + 4 + 1: 0.22 bits/element */
    CHECK(dlc_codec_encoded_size(DLC_CODEC_SPARSE4, &p, 1000) == 3 * 8 + 8);
    p.block = 32;
    CHECK(dlc_codec_encoded_size(DLC_CODEC_SPARSE4, &p, 33) == 4 + 4); /* 2 + 1 + 1, and a block of one */
    int blocks[] = {32, 64, 128, 200, 256};
    for (int k = DLC_CODEC_SPARSE2; k <= DLC_CODEC_SPARSE4; k++)
        for (int b = 0; b < 5; b++) {
            int64_t n = 2021;
            float *x = randn(n, 50 + (uint64_t)b, 1e-2f);
            for (int64_t i = 0; i < 64; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * 0.5f; /* ties */
            for (int64_t i = 300; i < 300 + 256; i++) x[i] = 0.0f;                /* zeros */
            x[700] = 3e38f;                                                       /* near FLT_MAX */
            float *y = roundtrip((dlc_codec_kind)k, blocks[b], x, n);
            float *want = malloc(sizeof(float) * (size_t)n);
            sparse_ref((dlc_codec_kind)k, blocks[b], x, n, want);
            int bad = 0;
            for (int64_t i = 0; i < n; i++)
                if (y[i] != want[i] && bad++ < 3)
                    fprintf(stderr, "%s block %d: x[%lld] = %g decodes to %g, expected %g\n",
                            dlc_codec_name((dlc_codec_kind)k), blocks[b], (long long)i, x[i], y[i], want[i]);
            CHECK(bad == 0);
            free(x);
            free(y);
            free(want);
        }
}

int main(void) {
    test_names_sizes();
    test_f32_identity();
    test_bounds_random();
    test_edge_cases();
    test_bf16_rne();
    test_fp8();
    test_e3m0_mapping();
    test_rejects();
    test_unwritten_codes();
    test_error_feedback();
    test_axpy();
    test_sparse();
    return check_done("test_codec");
}
