/* test_merge.c - the one-fragment merge (merge.h): MEAN against a double reference, RDA
 * identities (identical contributions, orthogonal unit vectors, norm independent of M,
 * φ(0) = 0), embeddings by mean, weights, codecs within their bounds, refused adds that
 * leave the accumulator unchanged. */
#include <float.h>
#include <stdint.h>
#include "check.h"
#include "diloco/merge.h"

static float *randn(int64_t n, uint64_t seed, float std) {
    int64_t s[1] = {n};
    dlc_tensor *t = check_randn(seed, std, 1, s);
    float *x = malloc(sizeof(float) * (size_t)n);
    memcpy(x, t->data, sizeof(float) * (size_t)n);
    dlc_tensor_release(t);
    return x;
}

static dlc_merge *mk(dlc_merge_mode mode, int T, const int64_t *numel, const uint8_t *emb) {
    dlc_merge_params p = {mode, T, numel, emb};
    return dlc_merge_new(&p);
}

static int add(dlc_merge *m, dlc_codec_kind k, const float *x, int64_t n, double w) {
    dlc_codec_params cp = dlc_codec_default_params();
    int64_t size = dlc_codec_encoded_size(k, &cp, n);
    uint8_t *buf = malloc((size_t)size + 1);
    int64_t wr = dlc_codec_encode(k, &cp, x, n, buf, (size_t)size, NULL);
    int st = wr == size ? dlc_merge_add(m, k, &cp, buf, (size_t)size, w) : -100;
    free(buf);
    return st;
}

static double norm(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

static double maxdiff(const float *a, const float *b, int64_t n) {
    double d = 0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void test_mean_reference(void) {
    int64_t seg[3] = {1000, 4097, 3};
    int64_t n = 5100;
    dlc_merge *m = mk(DLC_MERGE_MEAN, 3, seg, NULL);
    CHECK_OK(m);
    double *ref = calloc((size_t)n, sizeof(double)), wsum = 0;
    for (int k = 0; k < 5; k++) {
        float *x = randn(n, 10 + k, 1.0f);
        double w = 0.5 + k;
        CHECK(add(m, DLC_CODEC_F32, x, n, w) == DLC_OK);
        for (int64_t i = 0; i < n; i++) ref[i] += w * x[i];
        wsum += w;
        free(x);
    }
    float *out = malloc(sizeof(float) * (size_t)n);
    CHECK(dlc_merge_finish(m, out) == DLC_OK);
    double e = 0;
    for (int64_t i = 0; i < n; i++) e = fmax(e, fabs(out[i] - ref[i] / wsum));
    CHECK(e < 1e-5);
    CHECK(dlc_merge_count(m) == 5);
    CHECK_NEAR(dlc_merge_weight_sum(m), wsum, 0);
    dlc_merge_reset(m);
    CHECK(dlc_merge_finish(m, out) == DLC_ERR_STATE && strstr(dlc_last_error(), "no contribution"));
    free(out);
    free(ref);
    dlc_merge_free(m);
}

static void test_rda_identical(void) {
    int64_t seg[2] = {3000, 777};
    int64_t n = 3777;
    float *x = randn(n, 3, 0.01f), *out = malloc(sizeof(float) * (size_t)n);
    for (int M = 1; M <= 8; M *= 2) {
        dlc_merge *m = mk(DLC_MERGE_RDA, 2, seg, NULL);
        for (int k = 0; k < M; k++) CHECK(add(m, DLC_CODEC_F32, x, n, 1.0 + k) == DLC_OK);
        CHECK(dlc_merge_finish(m, out) == DLC_OK);
        CHECK(maxdiff(out, x, n) < 1e-6 * 0.05);
        dlc_merge_free(m);
    }
    free(x);
    free(out);
}

static void test_rda_orthogonal(void) {
    int64_t seg[1] = {4};
    float a[4] = {1, 0, 0, 0}, b[4] = {0, 1, 0, 0}, out[4];
    dlc_merge *m = mk(DLC_MERGE_RDA, 1, seg, NULL), *mm = mk(DLC_MERGE_MEAN, 1, seg, NULL);
    CHECK(add(m, DLC_CODEC_F32, a, 4, 2.0) == DLC_OK && add(m, DLC_CODEC_F32, b, 4, 2.0) == DLC_OK);
    CHECK(add(mm, DLC_CODEC_F32, a, 4, 2.0) == DLC_OK && add(mm, DLC_CODEC_F32, b, 4, 2.0) == DLC_OK);
    CHECK(dlc_merge_finish(m, out) == DLC_OK);
    CHECK_NEAR(norm(out, 4), 1.0, 1e-6);
    CHECK_NEAR(out[0], 1 / sqrt(2.0), 1e-6);
    CHECK(dlc_merge_finish(mm, out) == DLC_OK);
    CHECK_NEAR(norm(out, 4), 1 / sqrt(2.0), 1e-6);
    dlc_merge_free(m);
    dlc_merge_free(mm);
}

/* Random contributions of norm ~1 in 10^4 dimensions are near-orthogonal: the mean shrinks
 * like 1/sqrt(M), RDA keeps the mean norm. */
static void test_rda_norm_vs_M(void) {
    int64_t n = 10000, seg[1] = {n};
    float *out = malloc(sizeof(float) * (size_t)n);
    for (int M = 2; M <= 32; M *= 4) {
        dlc_merge *m = mk(DLC_MERGE_RDA, 1, seg, NULL), *mm = mk(DLC_MERGE_MEAN, 1, seg, NULL);
        double nsum = 0;
        for (int k = 0; k < M; k++) {
            float *x = randn(n, 100 + k, 0.01f);
            nsum += norm(x, n);
            add(m, DLC_CODEC_F32, x, n, 1.0);
            add(mm, DLC_CODEC_F32, x, n, 1.0);
            free(x);
        }
        CHECK(dlc_merge_finish(m, out) == DLC_OK);
        CHECK_NEAR(norm(out, n), nsum / M, 1e-5);
        CHECK(dlc_merge_finish(mm, out) == DLC_OK);
        CHECK_NEAR(norm(out, n) * sqrt((double)M), nsum / M, 0.05);
        dlc_merge_free(m);
        dlc_merge_free(mm);
    }
    free(out);
}

static void test_embedding_and_zero(void) {
    int64_t seg[3] = {4, 4, 4};
    uint8_t emb[3] = {1, 0, 0};
    float a[12] = {1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
    float b[12] = {0, 3, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0}, out[12];
    dlc_merge *m = mk(DLC_MERGE_RDA, 3, seg, emb);
    CHECK(add(m, DLC_CODEC_F32, a, 12, 1.0) == DLC_OK && add(m, DLC_CODEC_F32, b, 12, 1.0) == DLC_OK);
    CHECK(dlc_merge_finish(m, out) == DLC_OK);
    /* embedding segment: the plain mean */
    CHECK_NEAR(out[0], 0.5, 1e-7);
    CHECK_NEAR(out[1], 1.5, 1e-7);
    /* RDA segment: norm (1 + 3) / 2 = 2 along (1, 1)/sqrt 2 */
    CHECK_NEAR(out[4], sqrt(2.0), 1e-6);
    CHECK_NEAR(out[5], sqrt(2.0), 1e-6);
    /* all-zero segment: φ(0) = 0, no NaN */
    for (int i = 8; i < 12; i++) CHECK(out[i] == 0.0f);
    dlc_merge_free(m);
    /* a zero contribution segment next to a nonzero one: only the nonzero one has direction,
     * the norm is the weighted mean of 0 and 2 */
    int64_t s1[1] = {2};
    float z[2] = {0, 0}, c[2] = {2, 0};
    m = mk(DLC_MERGE_RDA, 1, s1, NULL);
    CHECK(add(m, DLC_CODEC_F32, z, 2, 1.0) == DLC_OK && add(m, DLC_CODEC_F32, c, 2, 1.0) == DLC_OK);
    CHECK(dlc_merge_finish(m, out) == DLC_OK);
    CHECK_NEAR(out[0], 1.0, 1e-7);
    CHECK(out[1] == 0.0f);
    dlc_merge_free(m);
}

static void test_weights(void) {
    int64_t seg[1] = {2};
    float a[2] = {1, 0}, b[2] = {0, 1}, out[2];
    for (int mode = 0; mode < DLC_MERGE_MODE_COUNT; mode++) {
        dlc_merge *m = mk((dlc_merge_mode)mode, 1, seg, NULL);
        CHECK(add(m, DLC_CODEC_F32, a, 2, 0.0) == DLC_ERR_ARG && strstr(dlc_last_error(), "weight = 0"));
        CHECK(add(m, DLC_CODEC_F32, a, 2, -1.0) == DLC_ERR_ARG);
        CHECK(add(m, DLC_CODEC_F32, a, 2, NAN) == DLC_ERR_ARG && strstr(dlc_last_error(), "nan"));
        CHECK(add(m, DLC_CODEC_F32, a, 2, INFINITY) == DLC_ERR_ARG);
        CHECK(dlc_merge_count(m) == 0);
        CHECK(add(m, DLC_CODEC_F32, a, 2, 1.0) == DLC_OK && add(m, DLC_CODEC_F32, b, 2, 3.0) == DLC_OK);
        CHECK(dlc_merge_finish(m, out) == DLC_OK);
        CHECK_NEAR(out[1] / out[0], 3.0, 1e-6);
        if (mode == DLC_MERGE_MEAN) CHECK_NEAR(out[0], 0.25, 1e-7);
        else CHECK_NEAR(norm(out, 2), 1.0, 1e-6);
        dlc_merge_free(m);
    }
}

/* Through a lossy codec the merge is within the codec's bound of the f32 merge: for MEAN
 * the bound is the weighted mean of per-element bounds; for RDA we check the relative
 * distance, which the same bound controls. */
static void test_codecs(void) {
    int64_t seg[3] = {5000, 300, 2701}, n = 8001; /* not multiples of 128 */
    dlc_codec_kind kinds[2] = {DLC_CODEC_INT4, DLC_CODEC_E3M0};
    float *ref = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
    for (int kk = 0; kk < 2; kk++)
        for (int mode = 0; mode < DLC_MERGE_MODE_COUNT; mode++) {
            dlc_merge *mf = mk((dlc_merge_mode)mode, 3, seg, NULL), *mq = mk((dlc_merge_mode)mode, 3, seg, NULL);
            double bound = 0;
            for (int k = 0; k < 4; k++) {
                float *x = randn(n, 50 + k, 0.01f);
                double amax = 0;
                for (int64_t i = 0; i < n; i++) amax = fmax(amax, fabs(x[i]));
                double b = kinds[kk] == DLC_CODEC_INT4 ? amax / 14 : fmax(amax / 3, amax / 128);
                bound = fmax(bound, b);
                CHECK(add(mf, DLC_CODEC_F32, x, n, 1.0 + k) == DLC_OK);
                CHECK(add(mq, kinds[kk], x, n, 1.0 + k) == DLC_OK);
                free(x);
            }
            CHECK(dlc_merge_finish(mf, ref) == DLC_OK && dlc_merge_finish(mq, out) == DLC_OK);
            double d = maxdiff(ref, out, n);
            if (mode == DLC_MERGE_MEAN) CHECK(d <= bound * 1.0001);
            else {
                double rel = 0, den = 0;
                for (int64_t i = 0; i < n; i++) rel += pow(ref[i] - out[i], 2), den += pow(ref[i], 2);
                CHECK(sqrt(rel / den) < (kinds[kk] == DLC_CODEC_INT4 ? 0.3 : 0.5));
                CHECK(d < 4 * bound);
            }
            CHECK(d > 0);
            dlc_merge_free(mf);
            dlc_merge_free(mq);
        }
    free(ref);
    free(out);
}

/* The sparse codecs: merging their bytes is merging what they decode to (in f32), for both
 * modes, across the merge's decode ranges (segments and lengths not multiples of the
 * block, so ranges start and end inside blocks). */
static void test_sparse_codecs(void) {
    int64_t seg[3] = {5000, 300, 2701}, n = 8001;
    dlc_codec_params cp = dlc_codec_default_params();
    float *ref = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
    float *y = malloc(sizeof(float) * (size_t)n);
    uint8_t *buf = malloc(4 * (size_t)n);
    for (int kind = DLC_CODEC_SPARSE2; kind <= DLC_CODEC_SPARSE4; kind++)
        for (int mode = 0; mode < DLC_MERGE_MODE_COUNT; mode++) {
            dlc_merge *mf = mk((dlc_merge_mode)mode, 3, seg, NULL), *mq = mk((dlc_merge_mode)mode, 3, seg, NULL);
            for (int k = 0; k < 3; k++) {
                float *x = randn(n, 70 + k, 0.01f);
                int64_t size = dlc_codec_encoded_size((dlc_codec_kind)kind, &cp, n);
                CHECK(dlc_codec_encode((dlc_codec_kind)kind, &cp, x, n, buf, (size_t)size, NULL) == size);
                CHECK(dlc_codec_decode((dlc_codec_kind)kind, &cp, buf, (size_t)size, y, n) == DLC_OK);
                CHECK(dlc_merge_add(mq, (dlc_codec_kind)kind, &cp, buf, (size_t)size, 1.0 + k) == DLC_OK);
                CHECK(add(mf, DLC_CODEC_F32, y, n, 1.0 + k) == DLC_OK);
                free(x);
            }
            CHECK(dlc_merge_finish(mf, ref) == DLC_OK && dlc_merge_finish(mq, out) == DLC_OK);
            double d = maxdiff(ref, out, n), amax = 0;
            for (int64_t i = 0; i < n; i++) amax = fmax(amax, fabs(ref[i]));
            CHECK(amax > 0 && d <= 1e-6 * amax);
            dlc_merge_free(mf);
            dlc_merge_free(mq);
        }
    free(ref);
    free(out);
    free(y);
    free(buf);
}

static void test_refused_add_unchanged(void) {
    int64_t seg[2] = {3000, 1000}, n = 4000;
    float *x = randn(n, 7, 0.01f), *y = randn(n, 8, 0.01f);
    float *o1 = malloc(sizeof(float) * (size_t)n), *o2 = malloc(sizeof(float) * (size_t)n);
    dlc_codec_params cp = dlc_codec_default_params();
    for (int mode = 0; mode < DLC_MERGE_MODE_COUNT; mode++)
        for (int kk = 0; kk < 2; kk++) {
            dlc_codec_kind k = kk ? DLC_CODEC_INT4 : DLC_CODEC_F32;
            dlc_merge *m = mk((dlc_merge_mode)mode, 2, seg, NULL);
            CHECK(add(m, k, x, n, 1.0) == DLC_OK);
            CHECK(dlc_merge_finish(m, o1) == DLC_OK);
            int64_t size = dlc_codec_encoded_size(k, &cp, n);
            uint8_t *buf = malloc((size_t)size + 1);
            CHECK(dlc_codec_encode(k, &cp, y, n, buf, (size_t)size, NULL) == size);
            CHECK(dlc_merge_add(m, k, &cp, buf, (size_t)size - 1, 1.0) == DLC_ERR_FORMAT &&
                  strstr(dlc_last_error(), "encode to"));
            /* a NaN late in the second segment (f32), or a NaN scale in the last block (int4):
             * the first segment must not have been added */
            if (k == DLC_CODEC_F32) {
                float nan = NAN;
                memcpy(buf + 4 * 3900, &nan, 4);
            } else {
                float nan = NAN;
                memcpy(buf + 4 * ((n + 127) / 128 - 1), &nan, 4);
            }
            CHECK(dlc_merge_add(m, k, &cp, buf, (size_t)size, 1.0) == DLC_ERR_FORMAT &&
                  strstr(dlc_last_error(), "refused"));
            fprintf(stderr, "  (expected) %s\n", dlc_last_error());
            CHECK(dlc_merge_count(m) == 1);
            CHECK(dlc_merge_finish(m, o2) == DLC_OK);
            CHECK(memcmp(o1, o2, sizeof(float) * (size_t)n) == 0);
            free(buf);
            dlc_merge_free(m);
        }
    free(x);
    free(y);
    free(o1);
    free(o2);
}

/* dlc_merge_add_anchored (merge.h): bit for bit the add of the contribution decoded,
 * re-anchored element by element as x + (cur - base) in a buffer of its own, and added as
 * f32, for every mode, codec and an embedding segment; a re-anchored value that is not
 * finite is refused with the accumulator unchanged; dlc_merge_check changes nothing and
 * agrees with the add; dlc_merge_take gives finish's Δ. */
static void test_anchored(void) {
    int64_t seg[3] = {5000, 3000, 200}, n = 8200;
    uint8_t emb[3] = {0, 1, 0};
    float *x = randn(n, 11, 0.01f), *y = randn(n, 12, 0.02f), *cur = randn(n, 13, 1.0f), *base = randn(n, 14, 1.0f);
    float *d = malloc(sizeof(float) * (size_t)n), *o1 = malloc(sizeof(float) * (size_t)n),
          *o2 = malloc(sizeof(float) * (size_t)n);
    dlc_codec_params cp = dlc_codec_default_params();
    const dlc_codec_kind kinds[4] = {DLC_CODEC_F32, DLC_CODEC_BF16, DLC_CODEC_INT8, DLC_CODEC_INT4};
    for (int mode = 0; mode < DLC_MERGE_MODE_COUNT; mode++)
        for (int kk = 0; kk < 4; kk++) {
            dlc_codec_kind k = kinds[kk];
            int64_t size = dlc_codec_encoded_size(k, &cp, n);
            uint8_t *bx = malloc((size_t)size), *by = malloc((size_t)size);
            CHECK(dlc_codec_encode(k, &cp, x, n, bx, (size_t)size, NULL) == size);
            CHECK(dlc_codec_encode(k, &cp, y, n, by, (size_t)size, NULL) == size);
            dlc_merge *a = mk((dlc_merge_mode)mode, 3, seg, emb), *b = mk((dlc_merge_mode)mode, 3, seg, emb);
            /* the reference: decode, re-anchor, add as f32; y is taken as it is */
            CHECK(dlc_codec_decode(k, &cp, bx, (size_t)size, d, n) == DLC_OK);
            for (int64_t i = 0; i < n; i++) d[i] = d[i] + (cur[i] - base[i]);
            CHECK(add(a, DLC_CODEC_F32, d, n, 2.5) == DLC_OK);
            CHECK(dlc_merge_add(a, k, &cp, by, (size_t)size, 0.5) == DLC_OK);
            CHECK(dlc_merge_check(b, k, &cp, bx, (size_t)size, cur, base) == DLC_OK && dlc_merge_count(b) == 0);
            CHECK(dlc_merge_add_anchored(b, k, &cp, bx, (size_t)size, 2.5, cur, base) == DLC_OK);
            CHECK(dlc_merge_add_anchored(b, k, &cp, by, (size_t)size, 0.5, NULL, NULL) == DLC_OK);
            CHECK(dlc_merge_finish(a, o1) == DLC_OK && dlc_merge_finish(b, o2) == DLC_OK);
            CHECK(memcmp(o1, o2, sizeof(float) * (size_t)n) == 0);
            /* a base far from cur: x + (cur - base) overflows to inf in the last segment */
            float keep = base[8100];
            base[8100] = -FLT_MAX;
            cur[8100] = FLT_MAX;
            CHECK(dlc_merge_check(b, k, &cp, bx, (size_t)size, cur, base) == DLC_ERR_FORMAT &&
                  strstr(dlc_last_error(), "segment 2") && strstr(dlc_last_error(), "re-anchored"));
            CHECK(dlc_merge_add_anchored(b, k, &cp, bx, (size_t)size, 1.0, cur, base) == DLC_ERR_FORMAT);
            fprintf(stderr, "  (expected) %s\n", dlc_last_error());
            base[8100] = keep;
            cur[8100] = 0.5f;
            CHECK(dlc_merge_add_anchored(b, k, &cp, bx, (size_t)size, 1.0, cur, NULL) == DLC_ERR_ARG);
            CHECK(dlc_merge_count(b) == 2);
            CHECK(dlc_merge_finish(b, o2) == DLC_OK && memcmp(o1, o2, sizeof(float) * (size_t)n) == 0);
            const float *t = dlc_merge_take(b);
            CHECK(t && memcmp(o1, t, sizeof(float) * (size_t)n) == 0);
            dlc_merge_reset(b);
            CHECK(dlc_merge_count(b) == 0 && !dlc_merge_take(b));
            free(bx), free(by);
            dlc_merge_free(a), dlc_merge_free(b);
        }
    free(x), free(y), free(cur), free(base), free(d), free(o1), free(o2);
}

static void test_params(void) {
    int64_t bad[2] = {3, 0};
    dlc_merge_params p = {DLC_MERGE_RDA, 2, bad, NULL};
    CHECK(!dlc_merge_new(&p) && strstr(dlc_last_error(), "segment 1 has numel = 0"));
    p.segments = 0;
    CHECK(!dlc_merge_new(&p) && strstr(dlc_last_error(), "segments = 0"));
    p.segments = 1;
    p.mode = DLC_MERGE_MODE_COUNT;
    CHECK(!dlc_merge_new(&p) && strstr(dlc_last_error(), "mode = 2"));
    dlc_merge_mode md;
    CHECK(dlc_merge_mode_parse("mean", &md) == DLC_OK && md == DLC_MERGE_MEAN);
    CHECK(dlc_merge_mode_parse("median", &md) == DLC_ERR_ARG && strstr(dlc_last_error(), "rda or mean"));
    CHECK(!strcmp(dlc_merge_mode_name(DLC_MERGE_RDA), "rda") && !dlc_merge_mode_name(DLC_MERGE_MODE_COUNT));
}

int main(void) {
    test_mean_reference();
    test_rda_identical();
    test_rda_orthogonal();
    test_rda_norm_vs_M();
    test_embedding_and_zero();
    test_weights();
    test_codecs();
    test_sparse_codecs();
    test_refused_add_unchanged();
    test_anchored();
    test_params();
    return check_done("test_merge");
}
