/* test_chaos.c - fault schedules (chaos.h): each field refused with its name and value
 * and nothing changed; time order with ties in insertion order; the timeline's begins
 * and ends (ends first on ties, no end for INFINITY); overlapping and touching kills,
 * cuts and syncer outages merged, slows not; the poisson policy against theory over a
 * long horizon (mean time between failures, down share = down/(mtbf + down), fixed and
 * exponential down times); a learner's stream independent of the number of learners;
 * same seed same schedule, another seed another; the fault limit; link faults: their
 * fields checked, never merged, the latest begun setting each field of the link. */
#include <stdint.h>
#include "check.h"
#include "diloco/chaos.h"

static dlc_fault F(double at, dlc_fault_kind k, int m, double dur, double factor) {
    dlc_fault f = {.at = at, .kind = k, .learner = m, .duration = dur, .factor = factor};
    return f;
}

static dlc_status add(dlc_chaos *c, double at, dlc_fault_kind k, int m, double dur, double factor) {
    dlc_fault f = F(at, k, m, dur, factor);
    return dlc_chaos_add(c, &f);
}

static void test_names(void) {
    CHECK(!strcmp(dlc_fault_kind_name(DLC_FAULT_KILL), "kill"));
    CHECK(!strcmp(dlc_fault_kind_name(DLC_FAULT_SLOW), "slow"));
    CHECK(!strcmp(dlc_fault_kind_name(DLC_FAULT_CUT), "cut"));
    CHECK(!strcmp(dlc_fault_kind_name(DLC_FAULT_SYNCER), "syncer"));
    CHECK(!strcmp(dlc_fault_kind_name(DLC_FAULT_LINK), "link"));
    CHECK(!strcmp(dlc_fault_kind_name(DLC_FAULT_KIND_COUNT), "?"));
    dlc_fault_kind k;
    CHECK(dlc_fault_kind_parse("cut", &k) == DLC_OK && k == DLC_FAULT_CUT);
    CHECK_SFAILS(dlc_fault_kind_parse("crash", &k), DLC_ERR_ARG, "kind = \"crash\"");
}

static void test_validation(void) {
    CHECK_PFAILS(dlc_chaos_new(0), DLC_ERR_ARG, "learners = 0");
    CHECK_PFAILS(dlc_chaos_new(4097), DLC_ERR_ARG, "learners = 4097");
    dlc_chaos *c = dlc_chaos_new(4);
    CHECK_OK(c);
    if (!c) return;
    CHECK_SFAILS(add(c, 0, DLC_FAULT_KILL, 5, 1, 0), DLC_ERR_ARG,
                 "chaos: learner = 5: expected an index in [0, 3] (4 learners)");
    CHECK_SFAILS(add(c, 0, DLC_FAULT_KILL, -1, 1, 0), DLC_ERR_ARG, "learner = -1");
    CHECK_SFAILS(add(c, 0, DLC_FAULT_SYNCER, 0, 1, 0), DLC_ERR_ARG, "learner = 0: expected -1 for a syncer");
    CHECK_SFAILS(add(c, -1, DLC_FAULT_KILL, 0, 1, 0), DLC_ERR_ARG, "at = -1");
    CHECK_SFAILS(add(c, NAN, DLC_FAULT_KILL, 0, 1, 0), DLC_ERR_ARG, "at = nan");
    CHECK_SFAILS(add(c, INFINITY, DLC_FAULT_KILL, 0, 1, 0), DLC_ERR_ARG, "at = inf");
    CHECK_SFAILS(add(c, 0, (dlc_fault_kind)7, 0, 1, 0), DLC_ERR_ARG, "kind = 7");
    CHECK_SFAILS(add(c, 0, DLC_FAULT_CUT, 0, 0, 0), DLC_ERR_ARG, "duration = 0");
    CHECK_SFAILS(add(c, 0, DLC_FAULT_CUT, 0, NAN, 0), DLC_ERR_ARG, "duration = nan");
    CHECK_SFAILS(add(c, 0, DLC_FAULT_CUT, 0, -INFINITY, 0), DLC_ERR_ARG, "duration = -inf");
    CHECK_SFAILS(add(c, 0, DLC_FAULT_SLOW, 0, 1, 0), DLC_ERR_ARG, "factor = 0");
    CHECK_SFAILS(add(c, 0, DLC_FAULT_SLOW, 0, 1, INFINITY), DLC_ERR_ARG, "factor = inf");
    CHECK_SFAILS(add(c, 0, DLC_FAULT_SLOW, 0, 1, -2), DLC_ERR_ARG, "factor = -2");
    CHECK_SFAILS(dlc_chaos_add(c, NULL), DLC_ERR_ARG, "f is NULL");
    CHECK(dlc_chaos_count(c) == 0);
    /* accepted: INFINITY duration, a faster "slow", factor ignored (stored 0) elsewhere */
    CHECK(add(c, 0, DLC_FAULT_KILL, 3, INFINITY, 0) == DLC_OK);
    CHECK(add(c, 1, DLC_FAULT_SLOW, 0, 2, 0.5) == DLC_OK);
    CHECK(add(c, 2, DLC_FAULT_CUT, 0, 2, 99) == DLC_OK);
    CHECK(dlc_chaos_get(c, 2)->factor == 0);
    CHECK_PFAILS(dlc_chaos_get(c, 3), DLC_ERR_RANGE, "i = 3");
    CHECK_PFAILS(dlc_chaos_get(c, -1), DLC_ERR_RANGE, "i = -1");

    CHECK_SFAILS(dlc_chaos_add_poisson(c, 4, 10, 1, 0, 100, 1), DLC_ERR_ARG, "learner = 4");
    CHECK_SFAILS(dlc_chaos_add_poisson(c, -2, 10, 1, 0, 100, 1), DLC_ERR_ARG, "learner = -2");
    CHECK_SFAILS(dlc_chaos_add_poisson(c, 0, 0, 1, 0, 100, 1), DLC_ERR_ARG, "mtbf = 0");
    CHECK_SFAILS(dlc_chaos_add_poisson(c, 0, INFINITY, 1, 0, 100, 1), DLC_ERR_ARG, "mtbf = inf");
    CHECK_SFAILS(dlc_chaos_add_poisson(c, 0, 10, 0, 0, 100, 1), DLC_ERR_ARG, "down = 0");
    CHECK_SFAILS(dlc_chaos_add_poisson(c, 0, 10, 1, 2, 100, 1), DLC_ERR_ARG, "exponential_down = 2");
    CHECK_SFAILS(dlc_chaos_add_poisson(c, 0, 10, 1, 0, -1, 1), DLC_ERR_ARG, "horizon = -1");
    CHECK_SFAILS(dlc_chaos_add_poisson(c, 0, 10, 1, 0, INFINITY, 1), DLC_ERR_ARG, "horizon = inf");
    CHECK(dlc_chaos_count(c) == 3);
    CHECK(dlc_chaos_add_poisson(c, 0, 10, 1, 0, 0, 1) == DLC_OK && dlc_chaos_count(c) == 3);
    /* the limit: refused whole, nothing added */
    CHECK_SFAILS(dlc_chaos_add_poisson(c, -1, 1e-3, 1e-3, 0, 1e6, 1), DLC_ERR_RANGE, "DLC_CHAOS_MAX_FAULTS = 1048576");
    CHECK(dlc_chaos_count(c) == 3);
    dlc_chaos_free(c);
    dlc_chaos_free(NULL);
    CHECK(dlc_chaos_count(NULL) == 0);
    CHECK(isnan(dlc_chaos_down_share(NULL, 0, 1)));
}

static void test_order_and_timeline(void) {
    dlc_chaos *c = dlc_chaos_new(3);
    CHECK_OK(c);
    if (!c) return;
    CHECK(add(c, 5, DLC_FAULT_SLOW, 0, 10, 2) == DLC_OK);       /* A */
    CHECK(add(c, 1, DLC_FAULT_CUT, 1, 4, 0) == DLC_OK);         /* B, ends at 5 */
    CHECK(add(c, 5, DLC_FAULT_KILL, 2, INFINITY, 0) == DLC_OK); /* C, same at as A: after A */
    CHECK(add(c, 5, DLC_FAULT_SYNCER, -1, 3, 0) == DLC_OK);     /* D, after C */
    CHECK(add(c, 0, DLC_FAULT_SLOW, 1, 8, 0.5) == DLC_OK);      /* E, ends at 8 with D */
    CHECK(dlc_chaos_count(c) == 5);
    /* order: E(0) B(1) A(5) C(5) D(5) */
    const dlc_fault_kind want[5] = {DLC_FAULT_SLOW, DLC_FAULT_CUT, DLC_FAULT_SLOW, DLC_FAULT_KILL, DLC_FAULT_SYNCER};
    const double at[5] = {0, 1, 5, 5, 5};
    for (int i = 0; i < 5; i++) CHECK(dlc_chaos_get(c, i)->kind == want[i] && dlc_chaos_get(c, i)->at == at[i]);
    CHECK(dlc_chaos_get(c, 0)->factor == 0.5 && dlc_chaos_get(c, 2)->learner == 0);
    int n;
    const dlc_chaos_event *e = dlc_chaos_timeline(c, &n);
    CHECK_OK(e);
    /* t:    0 E+, 1 B+, 5 B- (end first), 5 A+, 5 C+, 5 D+, 8 E-, 8 D- (by index: E=0 < D=4),
     *      15 A-; C has no end */
    const double t[9] = {0, 1, 5, 5, 5, 5, 8, 8, 15};
    const int idx[9] = {0, 1, 1, 2, 3, 4, 0, 4, 2}, beg[9] = {1, 1, 0, 1, 1, 1, 0, 0, 0};
    CHECK(n == 9);
    for (int i = 0; e && i < n && i < 9; i++) {
        if (e[i].t != t[i] || e[i].index != idx[i] || e[i].begin != beg[i]) {
            fprintf(stderr, "event %d: t %g index %d begin %d\n", i, e[i].t, e[i].index, e[i].begin);
            CHECK(0);
        }
    }
    CHECK(dlc_chaos_timeline(c, &n) == e); /* cached until the next change */
    CHECK_NEAR(dlc_chaos_slow_factor(c, 1, 3), 0.5, 0);
    CHECK(add(c, 2, DLC_FAULT_SLOW, 1, 2, 3) == DLC_OK); /* slows compose by product */
    CHECK_NEAR(dlc_chaos_slow_factor(c, 1, 3), 1.5, 1e-15);
    CHECK_NEAR(dlc_chaos_slow_factor(c, 1, 4), 0.5, 0); /* [2, 4) has ended */
    CHECK_NEAR(dlc_chaos_slow_factor(c, 2, 3), 1, 0);
    e = dlc_chaos_timeline(c, &n);
    CHECK(n == 11);
    dlc_chaos_free(c);

    c = dlc_chaos_new(1);
    CHECK(dlc_chaos_timeline(c, &n) == NULL && n == 0);
    dlc_chaos_free(c);
}

static void test_merge(void) {
    dlc_chaos *c = dlc_chaos_new(2);
    CHECK_OK(c);
    if (!c) return;
    CHECK(add(c, 10, DLC_FAULT_KILL, 0, 10, 0) == DLC_OK); /* [10, 20) */
    CHECK(add(c, 15, DLC_FAULT_KILL, 0, 2, 0) == DLC_OK);  /* inside: absorbed */
    CHECK(dlc_chaos_count(c) == 1 && dlc_chaos_get(c, 0)->duration == 10);
    CHECK(add(c, 18, DLC_FAULT_KILL, 0, 7, 0) == DLC_OK);  /* overlaps the end: [10, 25) */
    CHECK(dlc_chaos_count(c) == 1 && dlc_chaos_get(c, 0)->at == 10 && dlc_chaos_get(c, 0)->duration == 15);
    CHECK(add(c, 25, DLC_FAULT_KILL, 0, 5, 0) == DLC_OK);  /* touches: [10, 30) */
    CHECK(dlc_chaos_count(c) == 1 && dlc_chaos_get(c, 0)->duration == 20);
    CHECK(add(c, 5, DLC_FAULT_KILL, 0, 6, 0) == DLC_OK);   /* starts before: [5, 30) */
    CHECK(dlc_chaos_count(c) == 1 && dlc_chaos_get(c, 0)->at == 5 && dlc_chaos_get(c, 0)->duration == 25);
    CHECK(add(c, 40, DLC_FAULT_KILL, 0, 5, 0) == DLC_OK);  /* apart */
    CHECK(add(c, 50, DLC_FAULT_KILL, 0, 5, 0) == DLC_OK);
    CHECK(add(c, 12, DLC_FAULT_KILL, 1, 100, 0) == DLC_OK); /* another learner: not merged */
    CHECK(add(c, 12, DLC_FAULT_CUT, 0, 100, 0) == DLC_OK);  /* another kind: not merged */
    CHECK(dlc_chaos_count(c) == 5);
    CHECK(add(c, 35, DLC_FAULT_KILL, 0, INFINITY, 0) == DLC_OK); /* swallows 40 and 50 */
    CHECK(dlc_chaos_count(c) == 4);
    CHECK(dlc_chaos_get(c, 3)->at == 35 && dlc_chaos_get(c, 3)->duration == INFINITY);
    CHECK_NEAR(dlc_chaos_down_share(c, 0, 100), (25.0 + 65.0) / 100, 1e-12);
    CHECK_NEAR(dlc_chaos_down_share(c, 1, 100), 88.0 / 100, 1e-12);
    /* a cut bridging two cuts joins them; syncer outages too; slows stay separate */
    CHECK(add(c, 200, DLC_FAULT_CUT, 0, 10, 0) == DLC_OK);
    CHECK(add(c, 105, DLC_FAULT_CUT, 0, 100, 0) == DLC_OK); /* [12,112) + [105,205) + [200,210) */
    int ncut = 0;
    for (int i = 0; i < dlc_chaos_count(c); i++) {
        const dlc_fault *f = dlc_chaos_get(c, i);
        if (f->kind == DLC_FAULT_CUT) {
            ncut++;
            CHECK(f->at == 12 && f->duration == 198);
        }
    }
    CHECK(ncut == 1);
    CHECK(add(c, 0, DLC_FAULT_SYNCER, -1, 5, 0) == DLC_OK);
    CHECK(add(c, 3, DLC_FAULT_SYNCER, -1, 5, 0) == DLC_OK);
    CHECK(dlc_chaos_get(c, 0)->kind == DLC_FAULT_SYNCER && dlc_chaos_get(c, 0)->duration == 8);
    int before = dlc_chaos_count(c);
    CHECK(add(c, 1, DLC_FAULT_SLOW, 1, 5, 2) == DLC_OK);
    CHECK(add(c, 2, DLC_FAULT_SLOW, 1, 5, 2) == DLC_OK);
    CHECK(dlc_chaos_count(c) == before + 2);
    /* no two faults of one on/off target overlap or touch */
    int ok = 1;
    for (int i = 0; i < dlc_chaos_count(c); i++)
        for (int j = i + 1; j < dlc_chaos_count(c); j++) {
            const dlc_fault *a = dlc_chaos_get(c, i), *b = dlc_chaos_get(c, j);
            if (a->kind == b->kind && a->learner == b->learner && a->kind != DLC_FAULT_SLOW &&
                a->at + a->duration >= b->at)
                ok = 0;
        }
    CHECK(ok);
    dlc_chaos_free(c);
}

/* mean gap between a learner's failure starts minus the down time = the mean up time */
static void poisson_stats(const dlc_chaos *c, int m, double *mean_up, double *mean_down, int *count) {
    double prev_end = 0, up = 0, dn = 0;
    int k = 0;
    for (int i = 0; i < dlc_chaos_count(c); i++) {
        const dlc_fault *f = dlc_chaos_get(c, i);
        if (f->learner != m) continue;
        up += f->at - prev_end;
        dn += f->duration;
        prev_end = f->at + f->duration;
        k++;
    }
    *mean_up = up / k;
    *mean_down = dn / k;
    *count = k;
}

static void test_poisson_theory(void) {
    const double mtbf = 100, down = 25, horizon = 4e6; /* ~32000 failures per learner */
    for (int expd = 0; expd <= 1; expd++) {
        dlc_chaos *c = dlc_chaos_new(2);
        CHECK_OK(c);
        if (!c) return;
        CHECK(dlc_chaos_add_poisson(c, -1, mtbf, down, expd, horizon, 7) == DLC_OK);
        for (int m = 0; m < 2; m++) {
            double up, dn;
            int k;
            poisson_stats(c, m, &up, &dn, &k);
            CHECK_NEAR(up / mtbf, 1, 0.03);
            CHECK_NEAR(dn / down, 1, expd ? 0.03 : 1e-12);
            CHECK_NEAR(k / (horizon / (mtbf + down)), 1, 0.03);
            CHECK_NEAR(dlc_chaos_down_share(c, m, horizon) / (down / (mtbf + down)), 1, 0.03);
            if (getenv("DLC_VERBOSE"))
                printf("exp_down %d learner %d: %d failures, mean up %.3f, mean down %.3f, share %.4f (theory %.4f)\n",
                       expd, m, k, up, dn, dlc_chaos_down_share(c, m, horizon), down / (mtbf + down));
        }
        /* all kills, in time order */
        int sorted = 1;
        for (int i = 1; i < dlc_chaos_count(c); i++)
            if (dlc_chaos_get(c, i - 1)->at > dlc_chaos_get(c, i)->at || dlc_chaos_get(c, i)->kind != DLC_FAULT_KILL)
                sorted = 0;
        CHECK(sorted);
        dlc_chaos_free(c);
    }
}

/* the faults of learner m, copied into out (at most cap); returns how many */
static int faults_of(const dlc_chaos *c, int m, dlc_fault *out, int cap) {
    int k = 0;
    for (int i = 0; i < dlc_chaos_count(c); i++)
        if (dlc_chaos_get(c, i)->learner == m && k < cap) out[k++] = *dlc_chaos_get(c, i);
    return k;
}

static int same(const dlc_fault *a, int na, const dlc_fault *b, int nb) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (a[i].at != b[i].at || a[i].duration != b[i].duration || a[i].kind != b[i].kind) return 0;
    return 1;
}

#define CAP 4096

static void test_streams(void) {
    static dlc_fault a[CAP], b[CAP], d[CAP];
    dlc_chaos *c3 = dlc_chaos_new(3), *c5 = dlc_chaos_new(5), *c5b = dlc_chaos_new(5), *cs = dlc_chaos_new(5);
    CHECK(c3 && c5 && c5b && cs);
    if (!c3 || !c5 || !c5b || !cs) return;
    CHECK(dlc_chaos_add_poisson(c3, -1, 50, 5, 1, 1e4, 42) == DLC_OK);
    CHECK(dlc_chaos_add_poisson(c5, -1, 50, 5, 1, 1e4, 42) == DLC_OK);
    int na = faults_of(c3, 2, a, CAP), nb = faults_of(c5, 2, b, CAP);
    CHECK(na > 100);
    CHECK(same(a, na, b, nb)); /* learner 2 is the same with 3 or 5 learners */
    /* ... and when only learner 2 is drawn */
    CHECK(dlc_chaos_add_poisson(cs, 2, 50, 5, 1, 1e4, 42) == DLC_OK);
    nb = faults_of(cs, 2, b, CAP);
    CHECK(same(a, na, b, nb) && dlc_chaos_count(cs) == nb);
    /* determinism: the same call twice, the whole schedule */
    CHECK(dlc_chaos_add_poisson(c5b, -1, 50, 5, 1, 1e4, 42) == DLC_OK);
    CHECK(dlc_chaos_count(c5) == dlc_chaos_count(c5b));
    int all_same = dlc_chaos_count(c5) == dlc_chaos_count(c5b);
    for (int i = 0; all_same && i < dlc_chaos_count(c5); i++)
        all_same = !memcmp(dlc_chaos_get(c5, i), dlc_chaos_get(c5b, i), sizeof(dlc_fault));
    CHECK(all_same);
    /* learners differ from each other; another seed differs */
    nb = faults_of(c5, 3, b, CAP);
    CHECK(!same(a, na, b, nb));
    dlc_chaos *o = dlc_chaos_new(3);
    CHECK(dlc_chaos_add_poisson(o, -1, 50, 5, 1, 1e4, 43) == DLC_OK);
    int nd = faults_of(o, 2, d, CAP);
    CHECK(!same(a, na, d, nd));
    CHECK(a[0].at != d[0].at);
    /* seed 0 works and is not degenerate */
    dlc_chaos *z = dlc_chaos_new(2);
    CHECK(dlc_chaos_add_poisson(z, -1, 50, 5, 0, 1e4, 0) == DLC_OK);
    nd = faults_of(z, 0, d, CAP);
    nb = faults_of(z, 1, b, CAP);
    CHECK(nd > 100 && nb > 100 && !same(d, nd, b, nb));
    /* poisson kills merge with hand-written ones: one long kill swallows the draws under it */
    CHECK(add(z, 1000, DLC_FAULT_KILL, 0, 2000, 0) == DLC_OK);
    for (int i = 0; i < dlc_chaos_count(z); i++) {
        const dlc_fault *f = dlc_chaos_get(z, i);
        if (f->learner == 0 && f->at >= 1000 && f->at <= 3000) CHECK(f->at == 1000 && f->at + f->duration >= 3000);
    }
    dlc_chaos_free(c3);
    dlc_chaos_free(c5);
    dlc_chaos_free(c5b);
    dlc_chaos_free(cs);
    dlc_chaos_free(o);
    dlc_chaos_free(z);
}

/* LINK faults: each field refused with its value; a fault that keeps both is refused;
 * the fields of other kinds are stored as 0; never merged; dlc_chaos_link_at gives the
 * link's own fields with each replaced by the latest begun fault under way that sets it. */
static void test_link(void) {
    dlc_chaos *c = dlc_chaos_new(2);
    CHECK_OK(c);
    if (!c) return;
    dlc_fault f = {.at = 1, .kind = DLC_FAULT_LINK, .learner = 1, .duration = 4, .bandwidth = -5, .latency = -1};
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG, "bandwidth = -5");
    f.bandwidth = NAN;
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG, "bandwidth = nan");
    f.bandwidth = 0;
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG, "keeps both");
    f.latency = NAN;
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG, "latency = nan");
    f.latency = INFINITY;
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG, "latency = inf");
    CHECK(dlc_chaos_count(c) == 0);
    /* A: [1, 5) 1 MB/s; B: [2, 4) 50 ms; C: [3, 6) 2 MB/s, overlapping A: three faults */
    f.bandwidth = 1e6, f.latency = -7;
    CHECK(dlc_chaos_add(c, &f) == DLC_OK);
    f = (dlc_fault){.at = 2, .kind = DLC_FAULT_LINK, .learner = 1, .duration = 2, .latency = 0.05};
    CHECK(dlc_chaos_add(c, &f) == DLC_OK);
    f = (dlc_fault){.at = 3, .kind = DLC_FAULT_LINK, .learner = 1, .duration = 3, .bandwidth = 2e6, .latency = -1};
    CHECK(dlc_chaos_add(c, &f) == DLC_OK);
    f = (dlc_fault){.at = 0, .kind = DLC_FAULT_KILL, .learner = 0, .duration = 1, .bandwidth = 9, .latency = 9};
    CHECK(dlc_chaos_add(c, &f) == DLC_OK);
    CHECK(dlc_chaos_count(c) == 4);
    const dlc_fault *k = dlc_chaos_get(c, 0), *a = dlc_chaos_get(c, 1);
    CHECK(k && k->kind == DLC_FAULT_KILL && k->bandwidth == 0 && k->latency == 0);
    CHECK(a && a->kind == DLC_FAULT_LINK && a->bandwidth == 1e6 && a->latency == -1); /* "keep" as -1 */
    static const struct { double t, bw, lat; } want[] = {
        {0.5, 10e6, 0.02}, {1, 1e6, 0.02}, {2, 1e6, 0.05}, {3.5, 2e6, 0.05}, {4, 2e6, 0.02}, {5, 2e6, 0.02},
        {6, 10e6, 0.02},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        double bw = 10e6, lat = 0.02;
        CHECK(dlc_chaos_link_at(c, 1, want[i].t, &bw, &lat) == DLC_OK);
        if (bw != want[i].bw || lat != want[i].lat)
            fprintf(stderr, "link at %g: %g B/s %g s, expected %g %g\n", want[i].t, bw, lat, want[i].bw, want[i].lat);
        CHECK(bw == want[i].bw && lat == want[i].lat);
    }
    double bw = 10e6, lat = 0.02;
    CHECK(dlc_chaos_link_at(c, 0, 3, &bw, &lat) == DLC_OK && bw == 10e6 && lat == 0.02); /* not its faults */
    CHECK_SFAILS(dlc_chaos_link_at(c, 2, 3, &bw, &lat), DLC_ERR_ARG, "learner = 2");
    CHECK_SFAILS(dlc_chaos_link_at(c, 0, 3, NULL, &lat), DLC_ERR_ARG, "NULL");
    dlc_chaos_free(c);
}

/* The cursor: the timeline handed out in order, each event once and only when due; its
 * fault with it; peek and position; a schedule changed after the cursor started refused;
 * an empty schedule has nothing due. */
static void test_cursor(void) {
    dlc_chaos *c = dlc_chaos_new(2);
    CHECK_OK(c);
    if (!c) return;
    CHECK(add(c, 1, DLC_FAULT_KILL, 0, 2, 0) == DLC_OK);
    CHECK(add(c, 2, DLC_FAULT_KILL, 0, 2, 0) == DLC_OK); /* merged: one kill 1..4 */
    CHECK(add(c, 1.5, DLC_FAULT_SLOW, 1, 3, 2) == DLC_OK);
    CHECK(add(c, 2, DLC_FAULT_SLOW, 1, 3, 1.5) == DLC_OK); /* slows never merge */
    dlc_chaos_cursor cur;
    CHECK(dlc_chaos_cursor_init(&cur, c) == DLC_OK);
    dlc_chaos_event ev;
    const dlc_fault *f = NULL;
    CHECK(dlc_chaos_cursor_peek(&cur) == 1);
    CHECK(dlc_chaos_cursor_next(&cur, 0.5, &ev, &f) == 0); /* nothing due yet */
    double want_t[] = {1, 1.5, 2, 4, 4.5, 5};
    int want_begin[] = {1, 1, 1, 0, 0, 0};
    dlc_fault_kind want_kind[] = {DLC_FAULT_KILL, DLC_FAULT_SLOW, DLC_FAULT_SLOW, DLC_FAULT_KILL, DLC_FAULT_SLOW,
                                  DLC_FAULT_SLOW};
    int k = 0;
    for (double now = 0; now <= 6; now += 0.25) {
        while (dlc_chaos_cursor_next(&cur, now, &ev, &f) == 1) {
            CHECK(k < 6);
            if (k >= 6) break;
            CHECK(ev.t == want_t[k] && ev.t <= now && ev.begin == want_begin[k] && f && f->kind == want_kind[k]);
            if (k == 0) CHECK(f->duration == 3); /* the merged kill */
            k++;
            CHECK(dlc_chaos_cursor_position(&cur) == k);
        }
    }
    CHECK(k == 6);
    CHECK(dlc_chaos_cursor_next(&cur, INFINITY, &ev, NULL) == 0 && isinf(dlc_chaos_cursor_peek(&cur)));
    CHECK(add(c, 9, DLC_FAULT_CUT, 1, 1, 0) == DLC_OK);
    CHECK_SFAILS(dlc_chaos_cursor_next(&cur, 10, &ev, NULL), DLC_ERR_STATE, "the schedule changed after the cursor");
    CHECK(isinf(dlc_chaos_cursor_peek(&cur)));
    CHECK(dlc_chaos_cursor_init(&cur, c) == DLC_OK && dlc_chaos_cursor_next(&cur, 1, &ev, NULL) == 1);
    CHECK_SFAILS(dlc_chaos_cursor_init(NULL, c), DLC_ERR_ARG, "cur is NULL");
    CHECK_SFAILS(dlc_chaos_cursor_next(&cur, 1, NULL, NULL), DLC_ERR_ARG, "ev is NULL");
    dlc_chaos_free(c);
    dlc_chaos *empty = dlc_chaos_new(1);
    CHECK(dlc_chaos_cursor_init(&cur, empty) == DLC_OK && dlc_chaos_cursor_next(&cur, 1e9, &ev, NULL) == 0);
    dlc_chaos_free(empty);
}

/* Syncer shards (docs/shards.md): a syncer fault names shard 0 (the whole syncer) or 1..16,
 * each shard its own target: overlapping faults of one shard merge, of two shards (or of a
 * shard and the whole syncer) do not; a shard on another kind, or out of range, is refused. */
static void test_shards(void) {
    dlc_chaos *c = dlc_chaos_new(2);
    CHECK_OK(c);
    if (!c) return;
    dlc_fault f = F(0, DLC_FAULT_SYNCER, -1, 5, 0);
    f.shard = 17;
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG, "shard = 17: expected 0 (the whole syncer) or a shard in [1, 16]");
    f = F(0, DLC_FAULT_KILL, 0, 5, 0);
    f.shard = 1;
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG, "shard = 1: expected 0 (only a fault of the syncer names a shard)");
    int shard[4] = {2, 2, 1, 0};
    double at[4] = {0, 3, 1, 2};
    for (int i = 0; i < 4; i++) {
        f = F(at[i], DLC_FAULT_SYNCER, -1, 5, 0);
        f.shard = shard[i];
        CHECK(dlc_chaos_add(c, &f) == DLC_OK);
    }
    /* shard 2's two (0+5, 3+5) merged into one of 0..8; shard 1's and the whole syncer's apart */
    CHECK(dlc_chaos_count(c) == 3);
    int seen[3] = {0, 0, 0};
    for (int i = 0; i < dlc_chaos_count(c); i++) {
        const dlc_fault *g = dlc_chaos_get(c, i);
        CHECK(g->kind == DLC_FAULT_SYNCER && g->shard >= 0 && g->shard <= 2);
        if (g->shard == 2) CHECK(g->at == 0 && g->duration == 8);
        if (g->shard == 1) CHECK(g->at == 1 && g->duration == 5);
        if (g->shard == 0) CHECK(g->at == 2 && g->duration == 5);
        seen[g->shard]++;
    }
    CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
    dlc_chaos_free(c);
}

/* Roles (docs/shards.md, "Standbys"): a syncer fault of the primary, the standby or both,
 * each role of each shard its own target (a primary's and its standby's overlapping faults
 * stay apart, two of one role merge); a role on another kind, or out of range, is refused;
 * the names parse back. */
static void test_roles(void) {
    for (int r = 0; r < DLC_ROLE_COUNT; r++) {
        dlc_fault_role x;
        CHECK(dlc_fault_role_parse(dlc_fault_role_name((dlc_fault_role)r), &x) == DLC_OK && (int)x == r);
    }
    dlc_fault_role x;
    CHECK_SFAILS(dlc_fault_role_parse("backup", &x), DLC_ERR_ARG, "role = \"backup\": expected primary, standby or both");
    CHECK(!strcmp(dlc_fault_role_name(DLC_ROLE_COUNT), "?"));
    dlc_chaos *c = dlc_chaos_new(2);
    CHECK_OK(c);
    if (!c) return;
    dlc_fault f = F(0, DLC_FAULT_KILL, 0, 5, 0);
    f.role = DLC_ROLE_STANDBY;
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG, "role = 1: expected 0 (only a fault of the syncer names a role)");
    f = F(0, DLC_FAULT_SYNCER, -1, 5, 0);
    f.role = (dlc_fault_role)3;
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG, "role = 3: expected 0..2 (primary, standby, both)");
    dlc_fault_role role[5] = {DLC_ROLE_PRIMARY, DLC_ROLE_STANDBY, DLC_ROLE_STANDBY, DLC_ROLE_BOTH, DLC_ROLE_STANDBY};
    int shard[5] = {1, 1, 1, 1, 0};
    double at[5] = {0, 1, 3, 2, 0};
    for (int i = 0; i < 5; i++) {
        f = F(at[i], DLC_FAULT_SYNCER, -1, 5, 0);
        f.shard = shard[i], f.role = role[i];
        CHECK(dlc_chaos_add(c, &f) == DLC_OK);
    }
    /* shard 1's standby faults (1+5, 3+5) merged into 1..8; its primary's, its both and the
     * whole syncer's standby apart */
    CHECK(dlc_chaos_count(c) == 4);
    int standby1 = 0;
    for (int i = 0; i < dlc_chaos_count(c); i++) {
        const dlc_fault *g = dlc_chaos_get(c, i);
        if (g->role == DLC_ROLE_STANDBY && g->shard == 1) {
            standby1++;
            CHECK(g->at == 1 && g->duration == 7);
        }
        if (g->role == DLC_ROLE_PRIMARY) CHECK(g->shard == 1 && g->at == 0 && g->duration == 5);
    }
    CHECK(standby1 == 1);
    dlc_chaos_free(c);
}

/* Pauses of the syncer (kind PAUSE, learner -1): they name a shard and a role as a syncer
 * fault does; each (shard, role) its own target, apart from the syncer faults of the same
 * shard and from the learners' pauses; overlapping pauses of one shard and role merge.  A
 * learner's pause names neither, and learner -2 is refused, naming -1. */
static void test_syncer_pauses(void) {
    dlc_chaos *c = dlc_chaos_new(2);
    CHECK_OK(c);
    if (!c) return;
    dlc_fault f = F(0, DLC_FAULT_PAUSE, -2, 5, 0);
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG,
                 "learner = -2: expected an index in [0, 1] (2 learners), or -1 to pause the syncer");
    f = F(0, DLC_FAULT_PAUSE, 0, 5, 0);
    f.shard = 1;
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG, "shard = 1: expected 0 (only a fault of the syncer names a shard)");
    f = F(0, DLC_FAULT_PAUSE, -1, 5, 0);
    f.shard = 17;
    CHECK_SFAILS(dlc_chaos_add(c, &f), DLC_ERR_ARG, "shard = 17: expected 0 (the whole syncer) or a shard in [1, 16]");
    CHECK(dlc_chaos_count(c) == 0);
    /* shard 1's primary paused at 0 and 3 (merged: 0..8), its standby paused at 1, shard 1
     * down at 2, the whole syncer paused at 4, learner 1 (index 0) paused at 0 */
    const struct { double at; dlc_fault_kind kind; int learner, shard; dlc_fault_role role; } add[6] = {
        {0, DLC_FAULT_PAUSE, -1, 1, DLC_ROLE_PRIMARY}, {3, DLC_FAULT_PAUSE, -1, 1, DLC_ROLE_PRIMARY},
        {1, DLC_FAULT_PAUSE, -1, 1, DLC_ROLE_STANDBY}, {2, DLC_FAULT_SYNCER, -1, 1, DLC_ROLE_PRIMARY},
        {4, DLC_FAULT_PAUSE, -1, 0, DLC_ROLE_PRIMARY}, {0, DLC_FAULT_PAUSE, 0, 0, DLC_ROLE_PRIMARY}};
    for (int i = 0; i < 6; i++) {
        f = F(add[i].at, add[i].kind, add[i].learner, 5, 0);
        f.shard = add[i].shard, f.role = add[i].role;
        CHECK(dlc_chaos_add(c, &f) == DLC_OK);
    }
    CHECK(dlc_chaos_count(c) == 5);
    int merged = 0;
    for (int i = 0; i < dlc_chaos_count(c); i++) {
        const dlc_fault *g = dlc_chaos_get(c, i);
        if (g->kind == DLC_FAULT_PAUSE && g->learner == -1 && g->shard == 1 && g->role == DLC_ROLE_PRIMARY) {
            merged++;
            CHECK(g->at == 0 && g->duration == 8);
        }
    }
    CHECK(merged == 1);
    dlc_chaos_free(c);
}

int main(void) {
    test_names();
    test_shards();
    test_roles();
    test_syncer_pauses();
    test_validation();
    test_order_and_timeline();
    test_merge();
    test_poisson_theory();
    test_streams();
    test_link();
    test_cursor();
    return check_done("test_chaos");
}
