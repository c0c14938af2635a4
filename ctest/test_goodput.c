/* test_goodput.c - the goodput simulator (goodput.h) against closed forms: one chip and no
 * failures; a single interruption at the time the run reports, for elastic-dp and dp; the
 * mean waste of a Poisson failure process with a restart cost, with and without rollback
 * to a checkpoint and for both pause rules, against its renewal-theory value within 2%;
 * M decoupled learners of N/M chips against M independent single-learner runs (two-sample
 * Kolmogorov-Smirnov on the learners' goodput, means, spreads); determinism and seeds; the
 * time series; names; every bad parameter named. */
#include <stdint.h>
#include "check.h"
#include "diloco/goodput.h"

static dlc_goodput_params base(dlc_goodput_policy pol) {
    dlc_goodput_params p = dlc_goodput_default_params();
    p.policy = pol;
    p.sample = 0;
    return p;
}

static dlc_goodput_result run(const dlc_goodput_params *p) {
    dlc_goodput_result r;
    if (dlc_goodput_run(p, &r) != DLC_OK) {
        fprintf(stderr, "goodput_run failed: %s\n", dlc_last_error());
        check_fail++;
    }
    return r;
}

static void test_no_failures(void) {
    for (int pol = 0; pol < DLC_GOODPUT_POLICY_COUNT; pol++) {
        dlc_goodput_params p = base((dlc_goodput_policy)pol);
        p.chips = 1;
        p.slice_chips = 1;
        p.mtbi = 1e300;
        p.step = 1;
        p.checkpoint = 10;
        p.checkpoint_cost = 1;
        p.duration = 100.5;
        dlc_goodput_result r = run(&p);
        /* dp: cycles of 10 steps + 1 s of checkpoint: 9 cycles (99 s), then 1 step in 1.5 s */
        double want = pol == DLC_GOODPUT_DP ? 91 / 100.5 : 100 / 100.5;
        CHECK_NEAR(r.goodput, want, 1e-12);
        CHECK_NEAR(r.uptime, 1, 1e-12);
        CHECK(r.interruptions == 0 && r.first_interruption == -1 && r.rollbacks == 0);
        CHECK(r.learners == 1 && r.learner_goodput && r.learner_goodput[0] == r.goodput);
        dlc_goodput_result_free(&r);
    }
}

/* The first seed whose run has exactly one interruption, in (lo, hi). */
static int one_failure(dlc_goodput_params *p, double lo, double hi, dlc_goodput_result *out) {
    for (uint64_t seed = 0; seed < 400; seed++) {
        p->seed = seed;
        *out = run(p);
        if (out->interruptions == 1 && out->first_interruption > lo && out->first_interruption < hi) return 1;
        dlc_goodput_result_free(out);
    }
    return 0;
}

static void test_single_failure(void) {
    /* elastic-dp, one chip: steps until t_f (the partial one lost), down for the repair,
     * the upscale pause, then steps again to the end */
    dlc_goodput_params p = base(DLC_GOODPUT_ELASTIC);
    p.chips = 1;
    p.slice_chips = 1;
    p.step = 1;
    p.duration = 1000;
    p.mtbi = 2000;
    p.repair = 100;
    p.downscale = 3;
    p.upscale = 7;
    dlc_goodput_result r;
    CHECK(one_failure(&p, 100, 800, &r));
    double tf = r.first_interruption, back = tf + 100 + 7;
    double want = floor(tf) + floor(1000 - back);
    CHECK_NEAR(r.useful, want, 1e-6);
    CHECK_NEAR(r.uptime, (tf + (1000 - back)) / 1000, 1e-9);
    dlc_goodput_result_free(&r);

    /* elastic-dp, 4 slices of 2 chips: the job pauses 3 s, continues on 6 chips, pauses 7 s
     * when the slice is back and continues on 8 */
    p.chips = 8;
    p.slice_chips = 2;
    p.mtbi = 8 * 2000;
    CHECK(one_failure(&p, 100, 800, &r));
    tf = r.first_interruption;
    double s1 = tf + 3, s2 = tf + 100 + 7;
    want = 8 * floor(tf) + 6 * floor(tf + 100 - s1) + 8 * floor(1000 - s2);
    CHECK_NEAR(r.useful, want, 1e-6);
    CHECK_NEAR(r.uptime, (tf + (tf + 100 - s1) + (1000 - s2)) / 1000, 1e-9);
    dlc_goodput_result_free(&r);

    /* dp, 8 chips, a checkpoint every 10 steps: the steps after the last checkpoint are lost,
     * the job restarts after 20 s with all 8 chips (a spare took the slice's place) */
    p.policy = DLC_GOODPUT_DP;
    p.checkpoint = 10;
    p.restart = 20;
    CHECK(one_failure(&p, 100, 800, &r));
    tf = r.first_interruption;
    double kept = 10 * floor(floor(tf) / 10), lost = floor(tf) - kept;
    want = 8 * (kept + floor(1000 - (tf + 20)));
    CHECK_NEAR(r.useful, want, 1e-6);
    CHECK(r.rollbacks == (lost > 0));
    CHECK_NEAR(r.uptime, (tf + 1000 - (tf + 20)) / 1000, 1e-9);
    dlc_goodput_result_free(&r);
}

/* Renewal theory.  A run segment lasts X ~ Exp(r); a checkpoint commits every tau of compute
 * (cost delta after it), so the work kept is tau·floor(X / (tau + delta)), of mean
 * tau·q / (1 - q) with q = exp(-r (tau + delta)).  The pause after it lasts C (absorb) or
 * until a failure-free gap of C (extend), of mean (e^{rC} - 1) / r. */
static double analytic(double r, double tau, double delta, double C, int extend) {
    double q = exp(-r * (tau + delta));
    double kept = tau * q / (1 - q);
    double pause = extend ? (exp(r * C) - 1) / r : C;
    return kept / (1 / r + pause);
}

static void test_poisson_waste(void) {
    const struct { double tau, delta, C; int extend; } cases[] = {
        {0.01, 0, 50, 0}, /* checkpoint every step: only the restart is waste */
        {0.01, 0, 50, 1},
        {20, 0, 50, 0},   /* rollback to the last checkpoint */
        {20, 5, 30, 0},   /* with a blocking checkpoint */
        {20, 5, 30, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dlc_goodput_params p = base(DLC_GOODPUT_DP);
        p.chips = 1000;
        p.slice_chips = 10;
        p.mtbi = 1000 * 100.0; /* one interruption every 100 s */
        p.step = 0.01;
        p.checkpoint = cases[i].tau;
        p.checkpoint_cost = cases[i].delta;
        p.restart = cases[i].C;
        p.pause = cases[i].extend ? DLC_GOODPUT_EXTEND : DLC_GOODPUT_ABSORB;
        p.duration = 2e7; /* ~1e5 cycles */
        p.seed = 11 + i;
        dlc_goodput_result r = run(&p);
        double want = analytic(0.01, cases[i].tau, cases[i].delta, cases[i].C, cases[i].extend);
        if (fabs(r.goodput / want - 1) > 0.02)
            fprintf(stderr, "poisson case %zu: goodput %.5f, analytic %.5f\n", i, r.goodput, want);
        CHECK(fabs(r.goodput / want - 1) <= 0.02);
        CHECK(r.interruptions > 100000);
        dlc_goodput_result_free(&r);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Two-sample Kolmogorov-Smirnov statistic (both arrays sorted in place). */
static double ks(double *a, int n, double *b, int m) {
    qsort(a, (size_t)n, sizeof *a, cmp_double);
    qsort(b, (size_t)m, sizeof *b, cmp_double);
    int i = 0, j = 0;
    double d = 0;
    while (i < n && j < m) {
        double x = a[i] <= b[j] ? a[i] : b[j];
        while (i < n && a[i] <= x) i++;
        while (j < m && b[j] <= x) j++;
        d = fmax(d, fabs((double)i / n - (double)j / m));
    }
    return d;
}

static void mean_sd(const double *x, int n, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) s2 += (x[i] - *mean) * (x[i] - *mean);
    *sd = sqrt(s2 / (n - 1));
}

static void test_learners_independent(void) {
    enum { M = 4, K = 24 };
    dlc_goodput_params p = base(DLC_GOODPUT_DECOUPLED);
    p.chips = 4 * 10000;
    p.slice_chips = 100;
    p.learners = M;
    p.mtbi = 1e6; /* a learner of 10000 chips: one interruption every 100 s */
    p.repair = 500;
    p.downscale = p.upscale = 5;
    p.duration = 2e4;
    double dec[K], dec_l[K * M], ind[K], ind_l[K * M];
    for (int k = 0; k < K; k++) {
        p.seed = 100 + k;
        dlc_goodput_result r = run(&p);
        dec[k] = r.goodput;
        for (int m = 0; m < M; m++) dec_l[k * M + m] = r.learner_goodput[m];
        CHECK_NEAR(r.goodput, (dec_l[k * M] + dec_l[k * M + 1] + dec_l[k * M + 2] + dec_l[k * M + 3]) / M, 1e-12);
        dlc_goodput_result_free(&r);
    }
    dlc_goodput_params q = p;
    q.policy = DLC_GOODPUT_ELASTIC;
    q.learners = 1;
    q.chips = 10000;
    for (int k = 0; k < K; k++) {
        double s = 0;
        for (int m = 0; m < M; m++) {
            q.seed = 5000 + (uint64_t)(k * M + m);
            dlc_goodput_result r = run(&q);
            ind_l[k * M + m] = r.goodput;
            s += r.goodput;
            dlc_goodput_result_free(&r);
        }
        ind[k] = s / M;
    }
    double md, sd, mi, si;
    mean_sd(dec, K, &md, &sd);
    mean_sd(ind, K, &mi, &si);
    /* the same distribution: means within 4 standard errors, spreads within 2x */
    double se = sqrt((sd * sd + si * si) / K);
    if (fabs(md - mi) > 4 * se) fprintf(stderr, "decoupled %.5f ± %.5f vs independent %.5f ± %.5f\n", md, sd, mi, si);
    CHECK(fabs(md - mi) <= 4 * se);
    CHECK(sd > 0 && si > 0 && sd / si < 2 && si / sd < 2);
    /* KS on the 96 + 96 learner goodputs; the 0.1% critical value is 1.95·sqrt(2/96) */
    double d = ks(dec_l, K * M, ind_l, K * M);
    if (d > 1.95 * sqrt(2.0 / (K * M))) fprintf(stderr, "KS statistic %.4f\n", d);
    CHECK(d <= 1.95 * sqrt(2.0 / (K * M)));
    /* and the waste is real: a learner loses several percent here */
    CHECK(mi < 0.97 && mi > 0.5);

    /* a learner that pauses the others would not match: elastic-dp on all 40000 chips */
    dlc_goodput_params e = p;
    e.policy = DLC_GOODPUT_ELASTIC;
    e.learners = 1;
    dlc_goodput_result r = run(&e);
    CHECK(r.goodput < mi - 10 * se);
    dlc_goodput_result_free(&r);
}

static void test_determinism_and_series(void) {
    dlc_goodput_params p = base(DLC_GOODPUT_DECOUPLED);
    p.chips = 300000;
    p.learners = 4;
    p.duration = 5 * 86400;
    p.sample = 3600;
    p.seed = 42;
    dlc_goodput_result a = run(&p), b = run(&p);
    CHECK(a.samples == 5 * 24 + 1 && b.samples == a.samples);
    CHECK(a.goodput == b.goodput && a.uptime == b.uptime && a.events == b.events);
    CHECK(a.samples && !memcmp(a.progress, b.progress, sizeof(double) * (size_t)a.samples));
    CHECK(a.samples && !memcmp(a.live_chips, b.live_chips, sizeof(double) * (size_t)a.samples));
    int mono = 1, live_ok = 1;
    for (int64_t i = 0; i < a.samples; i++) {
        if (a.t[i] != (double)i * 3600) mono = 0;
        if (i && a.progress[i] < a.progress[i - 1]) mono = 0; /* no rollback without dp */
        if (a.live_chips[i] > 300000 || a.live_chips[i] < 270000) live_ok = 0;
    }
    CHECK(mono);
    CHECK(live_ok);
    CHECK(a.live_chips[0] == 300000);
    /* the last sample is at the horizon: the position there is goodput x duration */
    CHECK_NEAR(a.progress[a.samples - 1], a.goodput * p.duration, 1e-6 * p.duration);
    p.seed = 43;
    dlc_goodput_result c = run(&p);
    CHECK(c.goodput != a.goodput);
    CHECK(fabs(c.goodput - a.goodput) < 0.02);
    dlc_goodput_result_free(&a);
    dlc_goodput_result_free(&b);
    dlc_goodput_result_free(&c);

    /* dp's position drops at a rollback */
    p.policy = DLC_GOODPUT_DP;
    p.learners = 1;
    p.sample = 5;
    p.duration = 3600;
    dlc_goodput_result d = run(&p);
    int drop = 0;
    for (int64_t i = 1; i < d.samples; i++) drop |= d.progress[i] < d.progress[i - 1];
    CHECK(drop && d.rollbacks > 0);
    dlc_goodput_result_free(&d);
    dlc_goodput_result_free(NULL);
}

static void test_names_and_params(void) {
    for (int i = 0; i < DLC_GOODPUT_POLICY_COUNT; i++) {
        dlc_goodput_policy x;
        CHECK(dlc_goodput_policy_parse(dlc_goodput_policy_name(i), &x) == DLC_OK && (int)x == i);
    }
    dlc_goodput_policy x;
    CHECK(dlc_goodput_policy_parse("elastic", &x) == DLC_ERR_ARG && strstr(dlc_last_error(), "elastic-dp"));
    dlc_goodput_pause y;
    CHECK(dlc_goodput_pause_parse("extend", &y) == DLC_OK && y == DLC_GOODPUT_EXTEND);
    CHECK(!strcmp(dlc_goodput_policy_name(DLC_GOODPUT_POLICY_COUNT), "?"));

    dlc_goodput_params d = dlc_goodput_default_params();
    CHECK(dlc_goodput_params_check(&d) == DLC_OK);
    CHECK(d.chips == 1200000 && d.mtbi == 365 * 86400.0 && d.policy == DLC_GOODPUT_ELASTIC);
    dlc_goodput_params p;
    dlc_goodput_result r;
#define REFUSED(stmt, needle)                                                                    \
    do {                                                                                         \
        p = d;                                                                                   \
        stmt;                                                                                    \
        CHECK(dlc_goodput_run(&p, &r) == DLC_ERR_ARG && strstr(dlc_last_error(), needle));       \
        CHECK(r.learner_goodput == NULL && r.samples == 0);                                      \
    } while (0)
    REFUSED(p.mtbi = -1, "mtbi = -1, expected a finite duration > 0");
    REFUSED(p.mtbi = NAN, "mtbi = nan");
    REFUSED(p.chips = 0, "chips = 0, expected 1..");
    REFUSED(p.learners = 4, "learners = 4 with policy elastic-dp");
    REFUSED((p.policy = DLC_GOODPUT_DECOUPLED, p.learners = 0), "learners = 0, expected 1..4096");
    REFUSED((p.policy = DLC_GOODPUT_DECOUPLED, p.learners = 10000), "learners = 10000");
    REFUSED(p.slice_chips = 2000000, "slice_chips = 2000000, expected 1..1200000");
    REFUSED(p.step = 0, "step = 0, expected a finite duration > 0");
    REFUSED(p.repair = -5, "repair = -5, expected a finite duration >= 0");
    REFUSED(p.upscale = INFINITY, "upscale = inf");
    REFUSED(p.checkpoint = 1, "checkpoint = 1, expected a finite duration >= step (2 s)");
    REFUSED(p.pause = (dlc_goodput_pause)7, "pause = 7");
    REFUSED(p.policy = (dlc_goodput_policy)9, "policy = 9");
    REFUSED(p.duration = 0, "duration = 0");
    REFUSED(p.sample = 1, "sample = 1, expected 0 (no series) or a duration >=");
    REFUSED(p.syncer_shards = 2, "syncer_shards = 2 with policy elastic-dp: the syncer is modeled for decoupled only");
    REFUSED((p.policy = DLC_GOODPUT_DECOUPLED, p.syncer_shards = 65), "syncer_shards = 65, expected 0");
    REFUSED(p.syncer_mtbf = 0, "syncer_mtbf = 0, expected a finite duration > 0");
    REFUSED(p.syncer_checkpoint = -1, "syncer_checkpoint = -1");
    REFUSED(p.lease = -1, "lease = -1, expected a finite duration >= 0");
    REFUSED(p.syncer_restart = NAN, "syncer_restart = nan");
    REFUSED(p.standby = 2, "standby = 2, expected 0 or 1");
    CHECK(dlc_goodput_run(NULL, &r) == DLC_ERR_ARG);
    CHECK(dlc_goodput_run(&d, NULL) == DLC_ERR_ARG);
}

/* The syncer's shards (goodput.h, "The syncer"): one learner of one chip that never fails,
 * steps of 1 s, so its progress is the time.  Without a standby each outage loses the work
 * since the last checkpoint set (uniform in [0, 50 s) at a failure 10^4 s apart on
 * average) plus the restart (100 s): 125 s a failure on average, and the learners' own
 * stream is untouched (useful + lost = the same run without a syncer).  With standbys a
 * takeover loses the lease (10 s) and an outage happens only while a standby restarts. */
static void test_syncer(void) {
    dlc_goodput_params p = base(DLC_GOODPUT_DECOUPLED);
    p.chips = 1, p.slice_chips = 1, p.learners = 1, p.mtbi = 1e15, p.step = 1, p.checkpoint = 1;
    p.duration = 1e6, p.downscale = p.upscale = 0;
    dlc_goodput_result plain = run(&p);
    CHECK(plain.syncer_failures == 0 && plain.syncer_lost == 0 && fabs(plain.useful - 1e6) < 1);
    p.syncer_shards = 1, p.syncer_mtbf = 1e4, p.syncer_restart = 100, p.syncer_checkpoint = 50;
    dlc_goodput_result r = run(&p);
    CHECK(r.syncer_outages > 70 && r.syncer_outages < 130 && r.takeovers == 0 && r.syncer_failures == r.syncer_outages);
    double per = r.syncer_lost / (double)r.syncer_outages;
    CHECK(per > 119 && per < 131);
    CHECK(fabs(r.useful + r.syncer_lost - plain.useful) < 1e-6 * plain.useful);
    CHECK(fabs(r.goodput - r.useful / 1e6) < 1e-12);
    /* 4 shards: each outage loses a quarter of the work */
    p.syncer_shards = 4;
    dlc_goodput_result r4 = run(&p);
    double per4 = r4.syncer_lost / (double)r4.syncer_outages;
    CHECK(r4.syncer_outages > 4 * 70 && per4 > 119 / 4.0 && per4 < 131 / 4.0);
    /* standbys */
    p.syncer_shards = 1, p.standby = 1, p.lease = 10;
    dlc_goodput_result s = run(&p);
    CHECK(s.takeovers > 70 && s.syncer_outages < s.takeovers / 10 && s.syncer_failures > s.takeovers);
    CHECK(s.syncer_lost >= 10 * (double)s.takeovers - 1e-6 &&
          s.syncer_lost <= 10 * (double)s.takeovers + (double)s.syncer_outages * (50 + 100 + 10) + 1e-6);
    CHECK(s.goodput > r.goodput);
    dlc_goodput_result_free(&plain);
    dlc_goodput_result_free(&r);
    dlc_goodput_result_free(&r4);
    dlc_goodput_result_free(&s);
}

int main(void) {
    test_no_failures();
    test_single_failure();
    test_poisson_waste();
    test_learners_independent();
    test_determinism_and_series();
    test_names_and_params();
    test_syncer();
    return check_done("test_goodput");
}
