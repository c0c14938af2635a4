/* test_outer.c - one fragment's syncer state (outer.h): plain SGD, momentum and Nesterov
 * against a double reference of torch.optim.SGD over 5 steps; versions; anchoring at the
 * current and at older versions against copies saved by the test; bases outside the
 * ring refused with DLC_ERR_STATE and the delta untouched; wrap-around over 3R steps;
 * non-finite deltas refused with the state unchanged; set() resets the ring; restore()
 * brings a saved ring back exactly, or refuses and changes nothing; give() hands a slot's
 * buffer away (the caller's bytes stay; the ring goes on in a fresh one); bad params. */
#include "diloco/mem.h"
#include <float.h>
#include <stdint.h>
#include "check.h"
#include "diloco/outer.h"

#define N 257

static void fill(float *x, int64_t n, uint64_t seed, float std) {
    int64_t s[1] = {n};
    dlc_tensor *t = check_randn(seed, std, 1, s);
    memcpy(x, t->data, sizeof(float) * (size_t)n);
    dlc_tensor_release(t);
}

static dlc_fragstate *mk(double lr, double mu, int nesterov, int ring, const float *theta) {
    dlc_fragstate_params p = {lr, mu, nesterov, ring};
    return dlc_fragstate_new(&p, theta, N);
}

/* torch.optim.SGD(dampening=0, weight_decay=0) in double, from the formulas of its docs. */
static void reference(double *th, double *buf, const float *d, double lr, double mu, int nesterov, int first) {
    for (int i = 0; i < N; i++) {
        double g = d[i], step = g;
        if (mu != 0) {
            buf[i] = first ? g : mu * buf[i] + g;
            step = nesterov ? g + mu * buf[i] : buf[i];
        }
        th[i] -= lr * step;
    }
}

static void test_optimizer(double lr, double mu, int nesterov) {
    float theta[N], d[N];
    double th[N], buf[N];
    fill(theta, N, 1, 1.0f);
    for (int i = 0; i < N; i++) th[i] = theta[i];
    dlc_fragstate *fs = mk(lr, mu, nesterov, 4, theta);
    CHECK_OK(fs);
    if (!fs) return;
    CHECK((dlc_fragstate_momentum(fs) != NULL) == (mu != 0));
    double worst = 0;
    for (int k = 0; k < 5; k++) {
        fill(d, N, 100 + k, 0.1f);
        CHECK(dlc_fragstate_step(fs, d) == DLC_OK);
        reference(th, buf, d, lr, mu, nesterov, k == 0);
        CHECK(dlc_fragstate_version(fs) == k + 1);
        const float *t = dlc_fragstate_theta(fs);
        for (int i = 0; i < N; i++) worst = fmax(worst, fabs(t[i] - th[i]));
    }
    CHECK_NEAR(worst, 0, 2e-6);
    if (mu != 0) { /* the buffer matches too */
        const float *b = dlc_fragstate_momentum(fs);
        double wb = 0;
        for (int i = 0; i < N; i++) wb = fmax(wb, fabs(b[i] - buf[i]));
        CHECK_NEAR(wb, 0, 1e-6);
    }
    /* the step actually moved Θ (a reference that ignores the update would fail) */
    CHECK(fabs(dlc_fragstate_theta(fs)[0] - theta[0]) > 1e-4);
    dlc_fragstate_free(fs);
}

static void test_anchor(void) {
    enum { R = 4 };
    float theta[N], d[N], saved[R + 1][N], c[N], want[N];
    fill(theta, N, 2, 1.0f);
    dlc_fragstate *fs = mk(0.7, 0.9, 1, R, theta);
    CHECK_OK(fs);
    if (!fs) return;
    CHECK(dlc_fragstate_version(fs) == 0 && dlc_fragstate_oldest(fs) == 0);
    memcpy(saved[0], dlc_fragstate_theta(fs), sizeof saved[0]);
    CHECK(!memcmp(saved[0], theta, sizeof theta));

    /* identity at the current version: bit for bit */
    fill(c, N, 3, 0.1f);
    memcpy(d, c, sizeof d);
    CHECK(dlc_fragstate_anchor(fs, 0, d) == DLC_OK);
    CHECK(!memcmp(d, c, sizeof d));

    for (int k = 1; k <= R; k++) { /* versions 1..R; the ring now holds 1..R */
        fill(d, N, 200 + k, 0.1f);
        CHECK(dlc_fragstate_step(fs, d) == DLC_OK);
        memcpy(saved[k], dlc_fragstate_theta(fs), sizeof saved[k]);
    }
    CHECK(dlc_fragstate_version(fs) == R);
    CHECK(dlc_fragstate_oldest(fs) == 1);
    for (int b = 1; b <= R; b++) { /* Δ' = Δ + (Θ^cur − Θ^b), from the saved copies */
        fill(c, N, 300 + b, 0.1f);
        for (int i = 0; i < N; i++) want[i] = c[i] + (saved[R][i] - saved[b][i]);
        memcpy(d, c, sizeof d);
        CHECK(dlc_fragstate_anchor(fs, b, d) == DLC_OK);
        CHECK(!memcmp(d, want, sizeof d));
        if (b < R) CHECK(memcmp(d, c, sizeof d) != 0); /* it did change */
        const float *at = dlc_fragstate_at(fs, b);
        CHECK(at && !memcmp(at, saved[b], sizeof saved[b]));
    }
    /* and the anchored Δ' reconstructs the same θ_m: Θ^cur − Δ' ≈ Θ^b − Δ */
    fill(c, N, 400, 0.1f);
    memcpy(d, c, sizeof d);
    CHECK(dlc_fragstate_anchor(fs, 2, d) == DLC_OK);
    double worst = 0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs((saved[R][i] - d[i]) - (saved[2][i] - c[i])));
    CHECK_NEAR(worst, 0, 1e-6);

    /* version 0 fell out; negative and future bases too: DLC_ERR_STATE, delta untouched */
    int64_t bad[3] = {0, -1, R + 1};
    for (int j = 0; j < 3; j++) {
        memcpy(d, c, sizeof d);
        CHECK(dlc_fragstate_anchor(fs, bad[j], d) == DLC_ERR_STATE);
        CHECK(!memcmp(d, c, sizeof d));
        CHECK(dlc_fragstate_at(fs, bad[j]) == NULL && dlc_last_status() == DLC_ERR_STATE);
    }
    memcpy(d, c, sizeof d);
    CHECK(dlc_fragstate_anchor(fs, 0, d) == DLC_ERR_STATE);
    CHECK(strstr(dlc_last_error(), "base version 0") && strstr(dlc_last_error(), "versions 1..4") &&
          strstr(dlc_last_error(), "current 4"));
    CHECK(dlc_fragstate_anchor(NULL, 0, d) == DLC_ERR_ARG);
    CHECK(dlc_fragstate_anchor(fs, R, NULL) == DLC_ERR_ARG);
    dlc_fragstate_free(fs);
}

/* 3R steps with every version saved: the ring always holds exactly the last R, each
 * bit for bit, and anchoring from each of them is exact. */
static void test_wraparound(int R) {
    float theta[N], d[N], c[N];
    float(*saved)[N] = malloc(sizeof(float[N]) * (size_t)(3 * R + 1));
    fill(theta, N, 5, 1.0f);
    dlc_fragstate *fs = mk(0.5, 0.8, 0, R, theta);
    CHECK_OK(fs);
    if (!fs) { free(saved); return; }
    memcpy(saved[0], theta, sizeof theta);
    int ok = 1;
    for (int v = 1; v <= 3 * R; v++) {
        fill(d, N, 500 + v, 0.1f);
        ok &= dlc_fragstate_step(fs, d) == DLC_OK;
        memcpy(saved[v], dlc_fragstate_theta(fs), sizeof saved[v]);
        int64_t lo = v - R + 1 > 0 ? v - R + 1 : 0;
        ok &= dlc_fragstate_version(fs) == v && dlc_fragstate_oldest(fs) == lo;
        for (int64_t b = 0; b <= v; b++) {
            const float *at = dlc_fragstate_at(fs, b);
            if (b < lo) { ok &= at == NULL; continue; }
            ok &= at && !memcmp(at, saved[b], sizeof saved[b]);
            fill(c, N, 900 + (uint64_t)b, 0.1f);
            memcpy(d, c, sizeof d);
            ok &= dlc_fragstate_anchor(fs, b, d) == DLC_OK;
            for (int i = 0; i < N; i++) ok &= d[i] == c[i] + (saved[v][i] - saved[b][i]);
        }
        if (lo > 0) {
            memcpy(d, c, sizeof d);
            ok &= dlc_fragstate_anchor(fs, lo - 1, d) == DLC_ERR_STATE && !memcmp(d, c, sizeof d);
        }
    }
    CHECK(ok);
    dlc_fragstate_free(fs);
    free(saved);
}

static void test_nonfinite(void) {
    float theta[N], d[N], before[N], mom[N];
    fill(theta, N, 6, 1.0f);
    dlc_fragstate *fs = mk(0.7, 0.9, 1, 3, theta);
    CHECK_OK(fs);
    if (!fs) return;
    fill(d, N, 7, 0.1f);
    CHECK(dlc_fragstate_step(fs, d) == DLC_OK);
    memcpy(before, dlc_fragstate_theta(fs), sizeof before);
    memcpy(mom, dlc_fragstate_momentum(fs), sizeof mom);
    const float bads[3] = {NAN, INFINITY, -INFINITY};
    for (int j = 0; j < 3; j++) {
        fill(d, N, 8, 0.1f);
        d[17] = bads[j];
        CHECK(dlc_fragstate_step(fs, d) == DLC_ERR_ARG);
        CHECK(strstr(dlc_last_error(), "delta[17]"));
        CHECK(dlc_fragstate_version(fs) == 1 && dlc_fragstate_oldest(fs) == 0);
        CHECK(!memcmp(dlc_fragstate_theta(fs), before, sizeof before));
        CHECK(!memcmp(dlc_fragstate_momentum(fs), mom, sizeof mom));
        CHECK(!memcmp(dlc_fragstate_at(fs, 0), theta, sizeof theta));
    }
    CHECK(dlc_fragstate_step(fs, NULL) == DLC_ERR_ARG);
    CHECK(dlc_fragstate_step(NULL, d) == DLC_ERR_ARG);
    dlc_fragstate_free(fs);
}

static void test_set(void) {
    float theta[N], d[N], ck[N], c[N];
    fill(theta, N, 9, 1.0f);
    dlc_fragstate *fs = mk(0.7, 0.9, 1, 4, theta);
    CHECK_OK(fs);
    if (!fs) return;
    for (int k = 0; k < 6; k++) {
        fill(d, N, 600 + k, 0.1f);
        CHECK(dlc_fragstate_step(fs, d) == DLC_OK);
    }
    CHECK(dlc_fragstate_version(fs) == 6 && dlc_fragstate_oldest(fs) == 3);
    float mom[N];
    memcpy(mom, dlc_fragstate_momentum(fs), sizeof mom);

    fill(ck, N, 10, 1.0f);
    CHECK(dlc_fragstate_set(fs, ck, 42) == DLC_OK);
    CHECK(dlc_fragstate_version(fs) == 42 && dlc_fragstate_oldest(fs) == 42);
    CHECK(!memcmp(dlc_fragstate_theta(fs), ck, sizeof ck));
    CHECK(!memcmp(dlc_fragstate_momentum(fs), mom, sizeof mom)); /* kept */
    fill(c, N, 11, 0.1f);
    for (int64_t b = 39; b <= 41; b++) { /* older versions are gone, even ones "in range" */
        memcpy(d, c, sizeof d);
        CHECK(dlc_fragstate_anchor(fs, b, d) == DLC_ERR_STATE && !memcmp(d, c, sizeof d));
    }
    memcpy(d, c, sizeof d);
    CHECK(dlc_fragstate_anchor(fs, 42, d) == DLC_OK && !memcmp(d, c, sizeof d));
    /* the ring grows again from 42 */
    CHECK(dlc_fragstate_step(fs, c) == DLC_OK);
    CHECK(dlc_fragstate_version(fs) == 43 && dlc_fragstate_oldest(fs) == 42);
    CHECK(dlc_fragstate_at(fs, 42) && !memcmp(dlc_fragstate_at(fs, 42), ck, sizeof ck));
    /* set to a lower version (a checkpoint from before) also works */
    CHECK(dlc_fragstate_set(fs, theta, 0) == DLC_OK);
    CHECK(dlc_fragstate_version(fs) == 0 && dlc_fragstate_oldest(fs) == 0);
    CHECK(!memcmp(dlc_fragstate_theta(fs), theta, sizeof theta));
    /* refused sets change nothing */
    float bad[N];
    memcpy(bad, ck, sizeof bad);
    bad[5] = NAN;
    CHECK(dlc_fragstate_set(fs, bad, 7) == DLC_ERR_ARG && strstr(dlc_last_error(), "theta[5]"));
    CHECK(dlc_fragstate_set(fs, ck, -1) == DLC_ERR_ARG);
    CHECK(dlc_fragstate_set(fs, NULL, 1) == DLC_ERR_ARG);
    CHECK(dlc_fragstate_version(fs) == 0 && !memcmp(dlc_fragstate_theta(fs), theta, sizeof theta));
    dlc_fragstate_free(fs);
}

/* A ring saved version by version (as the syncer's checkpoint does) and restored into a
 * fresh state answers at() and anchor() exactly as the original, and steps on alike. */
static void test_restore(void) {
    float theta[N], d[N], c0[N], c1[N], saved[3 * N], mom[N];
    fill(theta, N, 12, 1.0f);
    dlc_fragstate *a = mk(0.7, 0.9, 1, 4, theta), *b = mk(0.7, 0.9, 1, 4, theta);
    CHECK_OK(a);
    CHECK_OK(b);
    if (!a || !b) return;
    for (int k = 0; k < 6; k++) {
        fill(d, N, 700 + k, 0.1f);
        CHECK(dlc_fragstate_step(a, d) == DLC_OK);
    }
    for (int64_t v = 4; v <= 6; v++) memcpy(saved + (v - 4) * N, dlc_fragstate_at(a, v), sizeof(float) * N);
    memcpy(mom, dlc_fragstate_momentum(a), sizeof mom);
    CHECK(dlc_fragstate_restore(b, 4, 6, saved) == DLC_OK);
    memcpy(dlc_fragstate_momentum(b), mom, sizeof mom);
    CHECK(dlc_fragstate_version(b) == 6 && dlc_fragstate_oldest(b) == 4);
    CHECK(!dlc_fragstate_at(b, 3) && dlc_fragstate_at(b, 4));
    CHECK(!memcmp(dlc_fragstate_theta(b), dlc_fragstate_theta(a), sizeof(float) * N));
    fill(c0, N, 13, 0.1f);
    memcpy(c1, c0, sizeof c1);
    CHECK(dlc_fragstate_anchor(a, 4, c0) == DLC_OK && dlc_fragstate_anchor(b, 4, c1) == DLC_OK);
    CHECK(!memcmp(c0, c1, sizeof c0));
    CHECK(dlc_fragstate_step(a, c0) == DLC_OK && dlc_fragstate_step(b, c1) == DLC_OK);
    CHECK(!memcmp(dlc_fragstate_theta(b), dlc_fragstate_theta(a), sizeof(float) * N));
    /* refusals change nothing */
    CHECK(dlc_fragstate_restore(b, 2, 7, saved) == DLC_ERR_ARG && strstr(dlc_last_error(), "ring = 4"));
    CHECK(dlc_fragstate_restore(b, 5, 4, saved) == DLC_ERR_ARG);
    CHECK(dlc_fragstate_restore(b, -1, 0, saved) == DLC_ERR_ARG);
    saved[N + 3] = INFINITY;
    CHECK(dlc_fragstate_restore(b, 4, 6, saved) == DLC_ERR_ARG && strstr(dlc_last_error(), "version 5 [3] = inf"));
    CHECK(dlc_fragstate_restore(b, 0, 0, NULL) == DLC_ERR_ARG);
    CHECK(dlc_fragstate_version(b) == 7 && !memcmp(dlc_fragstate_theta(b), dlc_fragstate_theta(a), sizeof(float) * N));
    dlc_fragstate_free(a);
    dlc_fragstate_free(b);
}

static void expect_bad(dlc_fragstate_params p, const char *needle) {
    float theta[N] = {0};
    dlc_fragstate *fs = dlc_fragstate_new(&p, theta, N);
    CHECK(!fs && dlc_last_status() == DLC_ERR_ARG && strstr(dlc_last_error(), needle));
    if (fs) fprintf(stderr, "expected a failure naming %s\n", needle);
    dlc_fragstate_free(fs);
}

static void test_params(void) {
    dlc_fragstate_params d = dlc_fragstate_default_params();
    CHECK(d.lr == 0.7 && d.momentum == 0.9 && d.nesterov == 1 && d.ring == 4);
    CHECK(dlc_fragstate_params_check(&d) == DLC_OK);
    dlc_fragstate_params p = d;
    p.lr = NAN, expect_bad(p, "lr = nan");
    p = d, p.lr = INFINITY, expect_bad(p, "lr = inf");
    p = d, p.lr = -1, expect_bad(p, "lr = -1");
    p = d, p.momentum = NAN, expect_bad(p, "momentum = nan");
    p = d, p.momentum = 1, expect_bad(p, "momentum = 1");
    p = d, p.momentum = -0.1, expect_bad(p, "momentum = -0.1");
    p = d, p.momentum = 0, expect_bad(p, "Nesterov needs momentum > 0");
    p = d, p.nesterov = 2, expect_bad(p, "nesterov = 2");
    p = d, p.ring = 0, expect_bad(p, "ring = 0");
    p = d, p.ring = DLC_FRAGSTATE_RING_MAX + 1, expect_bad(p, "ring = 65");
    p = d, p.ring = DLC_FRAGSTATE_RING_MAX;
    float theta[N] = {0};
    dlc_fragstate *fs = dlc_fragstate_new(&p, theta, N);
    CHECK_OK(fs);
    CHECK(dlc_fragstate_size(fs) == N && dlc_fragstate_get_params(fs)->ring == 64);
    dlc_fragstate_free(fs);
    CHECK(!dlc_fragstate_new(NULL, theta, N) && dlc_last_status() == DLC_ERR_ARG);
    CHECK(!dlc_fragstate_new(&d, NULL, N) && dlc_last_status() == DLC_ERR_ARG);
    CHECK(!dlc_fragstate_new(&d, theta, 0) && strstr(dlc_last_error(), "n = 0"));
    CHECK(!dlc_fragstate_new(&d, theta, INT64_MAX / 2) && strstr(dlc_last_error(), "fit in memory"));
    theta[100] = INFINITY;
    CHECK(!dlc_fragstate_new(&d, theta, N) && strstr(dlc_last_error(), "theta[100] = inf"));
    /* NULL accessors */
    CHECK(!dlc_fragstate_theta(NULL) && dlc_fragstate_version(NULL) == 0 && !dlc_fragstate_momentum(NULL));
    dlc_fragstate_free(NULL);
}

/* give: the oldest version's buffer, taken just before the step that would overwrite it,
 * keeps its bytes while the ring goes on (and that version leaves the ring at once); the
 * current version's is copied first (R = 1: the step then runs on the fresh buffer);
 * versions outside the slots are refused, changing nothing. */
static void test_give(int R) {
    float theta[N], d[N], saved[N], cur[N];
    fill(theta, N, 21, 1.0f);
    dlc_fragstate *fs = mk(0.7, 0.9, 1, R, theta);
    CHECK_OK(fs);
    if (!fs) return;
    for (int v = 1; v < R; v++) {
        fill(d, N, 600 + (uint64_t)v, 0.1f);
        CHECK(dlc_fragstate_step(fs, d) == DLC_OK);
    }
    int64_t top = dlc_fragstate_version(fs), old = top - R + 1; /* the slots are full */
    CHECK(dlc_fragstate_give(fs, top + 1) == NULL && dlc_last_status() == DLC_ERR_STATE);
    CHECK(dlc_fragstate_give(fs, old - 1) == NULL && dlc_last_status() == DLC_ERR_STATE);
    CHECK(dlc_fragstate_oldest(fs) == old && dlc_fragstate_version(fs) == top);
    memcpy(saved, dlc_fragstate_at(fs, old), sizeof saved);
    memcpy(cur, dlc_fragstate_theta(fs), sizeof cur);
    const float *was = dlc_fragstate_at(fs, old);
    float *mine = dlc_fragstate_give(fs, old);
    CHECK(mine && mine == was && !memcmp(mine, saved, sizeof saved));
    if (R > 1) CHECK(dlc_fragstate_oldest(fs) == old + 1 && dlc_fragstate_at(fs, old) == NULL);
    else CHECK(dlc_fragstate_theta(fs) != was && !memcmp(dlc_fragstate_theta(fs), cur, sizeof cur));
    fill(d, N, 700, 0.1f);
    CHECK(dlc_fragstate_step(fs, d) == DLC_OK);
    CHECK(mine && !memcmp(mine, saved, sizeof saved)); /* the step wrote the fresh buffer */
    CHECK(dlc_fragstate_version(fs) == top + 1 && dlc_fragstate_oldest(fs) == top + 2 - R);
    /* the step matches one on an untouched ring */
    dlc_fragstate *ref = mk(0.7, 0.9, 1, R, theta);
    for (int v = 1; ref && v < R; v++) {
        fill(d, N, 600 + (uint64_t)v, 0.1f);
        CHECK(dlc_fragstate_step(ref, d) == DLC_OK);
    }
    fill(d, N, 700, 0.1f);
    CHECK(ref && dlc_fragstate_step(ref, d) == DLC_OK);
    CHECK(ref && !memcmp(dlc_fragstate_theta(ref), dlc_fragstate_theta(fs), sizeof(float) * N));
    dlc_fragstate_free(ref);
    dlc_big_free(mine);
    dlc_fragstate_free(fs);
}

/* dlc_fragstate_finite: what new, set and push wrote is finite; a step says whether the
 * values it wrote are (in its own pass: a driver need not scan Θ to send it), for each of
 * the three outer steps, and an overflow to inf says 0; the next finite step says 1. */
static void test_finite_flag(void) {
    float theta[N], d[N];
    for (int k = 0; k < 3; k++) {
        fill(theta, N, 31, 1.0f);
        dlc_fragstate *fs = mk(1.0, k == 0 ? 0.0 : 0.5, k == 2, 3, theta);
        CHECK_OK(fs);
        if (!fs) return;
        CHECK(dlc_fragstate_finite(fs) == 1);
        fill(d, N, 32, 0.1f);
        CHECK(dlc_fragstate_step(fs, d) == DLC_OK && dlc_fragstate_finite(fs) == 1);
        theta[5] = FLT_MAX;
        CHECK(dlc_fragstate_push(fs, theta) == DLC_OK && dlc_fragstate_finite(fs) == 1);
        d[5] = -FLT_MAX; /* Θ[5] − 1·d[5] (with momentum: more) overflows */
        CHECK(dlc_fragstate_step(fs, d) == DLC_OK && dlc_fragstate_finite(fs) == 0);
        CHECK(isinf(dlc_fragstate_theta(fs)[5]));
        fill(theta, N, 33, 1.0f);
        CHECK(dlc_fragstate_set(fs, theta, 9) == DLC_OK && dlc_fragstate_finite(fs) == 1);
        dlc_fragstate_free(fs);
    }
    CHECK(dlc_fragstate_finite(NULL) == 0);
}

int main(void) {
    test_optimizer(0.7, 0.9, 1); /* Nesterov */
    test_optimizer(0.5, 0.8, 0); /* momentum */
    test_optimizer(0.3, 0.0, 0); /* plain SGD */
    test_anchor();
    test_wraparound(1);
    test_wraparound(3);
    test_wraparound(4);
    test_nonfinite();
    test_set();
    test_restore();
    test_give(1);
    test_give(2);
    test_give(4);
    test_params();
    test_finite_flag();
    return check_done("test_outer");
}
