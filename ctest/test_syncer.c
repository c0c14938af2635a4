/* test_syncer.c - the syncer state machine (syncer.h) driven by scripted events, with
 * every action checked (type, destination, version, flags, payload) against values the
 * test computes itself in double: quorum then a fixed grace timer; the adaptive grace
 * window from the reported step and transit times; grace cut short when every live
 * learner has sent; a late contribution joining the next round, anchored through the
 * ring; a duplicate replacing; stale (older than the ring), non-finite and malformed
 * contributions rejected with a resync; joins with the full model; lost learners and
 * timeouts; a message from a non-live learner; weighting; mean and RDA merges;
 * restart (rings kept, learners unheard until their first message); flush; data-parallel gradient averaging; refusals of bad calls. */
#include <stdint.h>
#include <stdio.h>
#include "check.h"
#include "check_fx.h"
#include "diloco/syncer.h"

/* Plain SGD with lr 0.7 (no momentum), so Θ_new = Θ − 0.7·Δ is easy to check. */
static dlc_syncer_params sgd_params(int M, int K, dlc_grace_mode g, double grace_s) {
    dlc_syncer_params sp = dlc_syncer_default_params();
    sp.learners = M;
    sp.quorum = K;
    sp.grace = g;
    sp.grace_s = grace_s;
    sp.weighting = DLC_WEIGHT_UNIFORM;
    sp.merge = DLC_MERGE_MEAN;
    sp.outer.lr = 0.7;
    sp.outer.momentum = 0;
    sp.outer.nesterov = 0;
    return sp;
}
#define LR 0.7

static dlc_msg contribution(int L, int p, int64_t base, int64_t steps, int64_t tokens, const float *d, int64_t n) {
    return (dlc_msg){.type = DLC_MSG_CONTRIBUTION, .learner = L, .fragment = p, .version = base, .steps = steps,
                     .tokens = tokens, .codec = DLC_CODEC_F32, .payload = (const uint8_t *)d,
                     .len = (size_t)n * sizeof(float)};
}

/* ---- the actions of one call ---- */

typedef struct rec {
    int n;
    dlc_syncer_action a[64];
} rec;

static rec drain(dlc_syncer *s) {
    rec r;
    r.n = 0;
    while (r.n < 64 && dlc_syncer_poll(s, &r.a[r.n])) r.n++;
    return r;
}

static int count_type(const rec *r, dlc_syncer_action_type t) {
    int k = 0;
    for (int i = 0; i < r->n; i++) k += r->a[i].type == t;
    return k;
}

static const dlc_syncer_action *find_type(const rec *r, dlc_syncer_action_type t) {
    for (int i = 0; i < r->n; i++)
        if (r->a[i].type == t) return &r->a[i];
    return NULL;
}

/* The FRAGMENT sent to learner m for fragment p, NULL if none. */
static const dlc_msg *sent_to(const rec *r, int m, int p) {
    for (int i = 0; i < r->n; i++)
        if (r->a[i].type == DLC_SACT_SEND && r->a[i].msg.type == DLC_MSG_FRAGMENT && r->a[i].msg.learner == m &&
            r->a[i].msg.fragment == p)
            return &r->a[i].msg;
    return NULL;
}

static const dlc_merge_contrib *contrib_of(const dlc_merge_info *mi, int m) {
    for (int i = 0; i < mi->count; i++)
        if (mi->contribs[i].learner == m) return &mi->contribs[i];
    return NULL;
}

static double maxdiff_fd(const float *a, const double *b, int64_t n) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

static int payload_is(const dlc_msg *m, const float *want, int64_t n) {
    return m && m->codec == DLC_CODEC_F32 && m->len == (size_t)n * sizeof(float) &&
           memcmp(m->payload, want, (size_t)n * sizeof(float)) == 0;
}

/* Joins learners 0..M-1 at `now`, draining the resyncs. */
static void join_all(dlc_syncer *s, int M, double now) {
    for (int m = 0; m < M; m++) {
        CHECK(dlc_syncer_join(s, m, now) == DLC_OK);
        rec r = drain(s);
        CHECK(r.n == dlc_syncer_fragments(s));
    }
}

/* ---- quorum, grace, late, duplicate ---- */

/* K = 2 of 3, fixed grace 5 s: the second contribution starts the timer, the merge comes
 * at the deadline with exactly 2 contributors; then a late contribution (base 0) joins
 * the next round and is anchored at Θ1 (staleness 1), and that round is cut short when
 * the third learner sends. */
static void test_quorum_grace_late(void) {
    fx x;
    fx_make(&x, 1, 10);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, 2, DLC_GRACE_FIXED, 5.0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float th0[NMAX], th1[NMAX], d0[NMAX], d1[NMAX], d2[NMAX], e0[NMAX], e1[NMAX];
    gather(&x, 0, dlc_params_data(x.p), th0);
    randv(d0, n, 100, 0.1f);
    randv(d1, n, 101, 0.1f);
    randv(d2, n, 102, 0.1f);
    randv(e0, n, 103, 0.1f);
    randv(e1, n, 104, 0.1f);
    join_all(s, 3, 0);
    CHECK(dlc_syncer_live(s) == 3);
    CHECK(dlc_syncer_expiry(s) == INFINITY);

    dlc_msg m = contribution(0, 0, 0, 8, 800, d0, n);
    CHECK(dlc_syncer_receive(s, &m, 1.0) == DLC_OK);
    rec r = drain(s);
    CHECK(r.n == 0);
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_COLLECTING);
    CHECK(dlc_syncer_round_count(s, 0) == 1);
    CHECK(dlc_syncer_expiry(s) == INFINITY);

    m = contribution(1, 0, 0, 8, 800, d1, n);
    CHECK(dlc_syncer_receive(s, &m, 2.0) == DLC_OK);
    r = drain(s);
    CHECK(r.n == 0); /* no merge before the deadline */
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_GRACE);
    CHECK(dlc_syncer_round_count(s, 0) == 2);
    CHECK(dlc_syncer_expiry(s) == 2.0 + 5.0);

    CHECK(dlc_syncer_handle_expiry(s, 6.5) == DLC_OK); /* early: nothing */
    r = drain(s);
    CHECK(r.n == 0);
    CHECK(dlc_syncer_version(s, 0) == 0);

    CHECK(dlc_syncer_handle_expiry(s, 7.0) == DLC_OK);
    r = drain(s);
    CHECK(count_type(&r, DLC_SACT_MERGED) == 1);
    CHECK(count_type(&r, DLC_SACT_SEND) == 3);
    const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
    if (ma) {
        const dlc_merge_info *mi = &ma->merge;
        CHECK(mi->fragment == 0 && mi->version == 1 && mi->count == 2);
        CHECK(contrib_of(mi, 0) && contrib_of(mi, 1) && !contrib_of(mi, 2));
        CHECK(mi->live == 3 && mi->quorum == 2);
        CHECK(mi->opened == 1.0 && mi->quorum_at == 2.0 && mi->grace == 5.0 && mi->waited == 5.0);
        CHECK(mi->all_sent == 0 && mi->flushed == 0);
        CHECK(mi->bytes_in == 2 * n * 4 && mi->bytes_out == 3 * n * 4);
        CHECK_NEAR(mi->useful_tokens, 1600, 1e-9);
        for (int i = 0; i < mi->count; i++) CHECK(mi->contribs[i].staleness == 0 && mi->contribs[i].weight == 1);
    }
    double want[NMAX];
    for (int64_t i = 0; i < n; i++) want[i] = (double)th0[i] - LR * 0.5 * ((double)d0[i] + d1[i]);
    CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), want, n), 0, 2e-6);
    memcpy(th1, dlc_syncer_theta(s, 0), (size_t)n * sizeof(float));
    for (int L = 0; L < 3; L++) {
        const dlc_msg *f = sent_to(&r, L, 0);
        CHECK(f && f->version == 1 && f->flags == 0);
        CHECK(payload_is(f, th1, n));
        /* contributors: how long theirs waited; learner 2: the round's age */
        if (f) CHECK(f->held == (L == 0 ? 6.0 : L == 1 ? 5.0 : 6.0));
    }
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_IDLE && dlc_syncer_round_count(s, 0) == 0);
    CHECK(dlc_syncer_version(s, 0) == 1);

    /* learner 2's contribution on version 0 arrives after the round closed: next round */
    m = contribution(2, 0, 0, 9, 900, d2, n);
    CHECK(dlc_syncer_receive(s, &m, 8.0) == DLC_OK);
    r = drain(s);
    CHECK(r.n == 0);
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_COLLECTING && dlc_syncer_round_count(s, 0) == 1);
    m = contribution(0, 0, 1, 8, 800, e0, n);
    CHECK(dlc_syncer_receive(s, &m, 9.0) == DLC_OK);
    r = drain(s);
    CHECK(r.n == 0 && dlc_syncer_round_state(s, 0) == DLC_ROUND_GRACE);
    CHECK(dlc_syncer_expiry(s) == 14.0);
    m = contribution(1, 0, 1, 8, 800, e1, n);
    CHECK(dlc_syncer_receive(s, &m, 10.0) == DLC_OK); /* every live learner sent: no wait */
    r = drain(s);
    CHECK(count_type(&r, DLC_SACT_MERGED) == 1 && count_type(&r, DLC_SACT_SEND) == 3);
    ma = find_type(&r, DLC_SACT_MERGED);
    if (ma) {
        const dlc_merge_info *mi = &ma->merge;
        CHECK(mi->version == 2 && mi->count == 3 && mi->all_sent == 1);
        CHECK(mi->quorum_at == 9.0 && mi->waited == 1.0 && mi->grace == 5.0);
        const dlc_merge_contrib *c2 = contrib_of(mi, 2), *c0 = contrib_of(mi, 0);
        CHECK(c2 && c2->base_version == 0 && c2->staleness == 1 && c2->steps == 9 && c2->tokens == 900 &&
              c2->arrived == 8.0);
        CHECK(c0 && c0->base_version == 1 && c0->staleness == 0);
    }
    /* Δ'_2 = Δ_2 + Θ1 − Θ0 */
    for (int64_t i = 0; i < n; i++) {
        double a2 = (double)d2[i] + ((double)th1[i] - th0[i]);
        want[i] = (double)th1[i] - LR * (a2 + e0[i] + e1[i]) / 3.0;
    }
    CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), want, n), 0, 2e-6);
    const dlc_msg *f2 = sent_to(&r, 2, 0);
    CHECK(f2 && f2->version == 2 && f2->held == 2.0);
    CHECK(dlc_syncer_expiry(s) == INFINITY);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* K = 2 of 3, fixed grace: the third learner sending inside the window merges at once. */
static void test_grace_cut_short(void) {
    fx x;
    fx_make(&x, 1, 20);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, 2, DLC_GRACE_FIXED, 5.0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float th0[NMAX], d[3][NMAX];
    gather(&x, 0, dlc_params_data(x.p), th0);
    join_all(s, 3, 0);
    for (int L = 0; L < 3; L++) {
        randv(d[L], n, 200 + (uint64_t)L, 0.1f);
        dlc_msg m = contribution(L, 0, 0, 4, 40, d[L], n);
        CHECK(dlc_syncer_receive(s, &m, 1.0 + L) == DLC_OK);
        rec r = drain(s);
        CHECK(count_type(&r, DLC_SACT_MERGED) == (L == 2));
        if (L == 2) {
            const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
            CHECK(ma && ma->merge.count == 3 && ma->merge.all_sent == 1 && ma->merge.waited == 1.0);
            CHECK(count_type(&r, DLC_SACT_SEND) == 3);
        }
    }
    double want[NMAX];
    for (int64_t i = 0; i < n; i++) want[i] = (double)th0[i] - LR * ((double)d[0][i] + d[1][i] + d[2][i]) / 3.0;
    CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), want, n), 0, 2e-6);
    CHECK(dlc_syncer_expiry(s) == INFINITY);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* Adaptive grace: g = clamp(γ(τ·ξ_step − ξ_quorum − ξ_sync), 0, ξ_step), ξ_step and ξ_sync
 * medians of the reported times, ξ_quorum an EMA of the time to quorum. */
static void test_adaptive_grace(void) {
    fx x;
    fx_make(&x, 1, 30);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, 2, DLC_GRACE_ADAPTIVE, 0);
    sp.tau = 2;
    sp.grace_gamma = 0.8;
    sp.ema = 0.5;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float d[NMAX];
    randv(d, n, 300, 0.1f);
    join_all(s, 3, 0);
    /* learner 2 reports by heartbeat: step 2.0, transit 0.6 */
    dlc_msg hb = {.type = DLC_MSG_HEARTBEAT, .learner = 2, .steps = 5, .tokens = 50, .step_time = 2.0,
                  .transit = 0.6};
    CHECK(dlc_syncer_receive(s, &hb, 0.5) == DLC_OK);
    CHECK(drain(s).n == 0);
    dlc_msg m = contribution(0, 0, 0, 4, 40, d, n);
    m.step_time = 1.0, m.transit = 0.2;
    CHECK(dlc_syncer_receive(s, &m, 10.0) == DLC_OK);
    m = contribution(1, 0, 0, 4, 40, d, n);
    m.step_time = 3.0, m.transit = 0.9;
    CHECK(dlc_syncer_receive(s, &m, 11.0) == DLC_OK);
    CHECK(drain(s).n == 0);
    double xs, xq, xy;
    dlc_syncer_estimates(s, &xs, &xq, &xy);
    CHECK(xs == 2.0 && xq == 1.0 && xy == 0.6); /* medians of {1,2,3}, {0.2,0.6,0.9}; first sample */
    double g = 0.8 * (2 * 2.0 - 1.0 - 0.6); /* 1.92, inside [0, 2] */
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_GRACE);
    CHECK_NEAR(dlc_syncer_expiry(s), 11.0 + g, 1e-12);
    CHECK(dlc_syncer_handle_expiry(s, dlc_syncer_expiry(s)) == DLC_OK);
    rec r = drain(s);
    const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.count == 2);
    if (ma) CHECK_NEAR(ma->merge.grace, g, 1e-12);

    /* second round: 2 s to quorum, EMA ξ_quorum = 0.5·1 + 0.5·2 = 1.5 */
    m = contribution(0, 0, 1, 4, 40, d, n);
    m.step_time = 1.0, m.transit = 0.2;
    CHECK(dlc_syncer_receive(s, &m, 20.0) == DLC_OK);
    m = contribution(1, 0, 1, 4, 40, d, n);
    m.step_time = 3.0, m.transit = 0.9;
    CHECK(dlc_syncer_receive(s, &m, 22.0) == DLC_OK);
    dlc_syncer_estimates(s, NULL, &xq, NULL);
    CHECK_NEAR(xq, 1.5, 1e-12);
    g = 0.8 * (2 * 2.0 - 1.5 - 0.6);
    CHECK_NEAR(dlc_syncer_expiry(s), 22.0 + g, 1e-12);
    CHECK(dlc_syncer_handle_expiry(s, 30.0) == DLC_OK);
    CHECK(count_type((r = drain(s), &r), DLC_SACT_MERGED) == 1);

    /* a huge transit clamps g to 0: merged at quorum */
    hb.transit = 100, hb.learner = 2;
    CHECK(dlc_syncer_receive(s, &hb, 30.0) == DLC_OK);
    m = contribution(0, 0, 2, 4, 40, d, n);
    m.transit = 100;
    CHECK(dlc_syncer_receive(s, &m, 31.0) == DLC_OK);
    CHECK(drain(s).n == 0);
    m = contribution(1, 0, 2, 4, 40, d, n);
    CHECK(dlc_syncer_receive(s, &m, 32.0) == DLC_OK);
    r = drain(s);
    ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.grace == 0 && ma->merge.count == 2 && ma->merge.all_sent == 0);

    /* a long step time with tiny quorum and transit clamps g to ξ_step */
    dlc_syncer_params sp2 = sp;
    sp2.grace_gamma = 1.0;
    dlc_syncer *s2 = dlc_syncer_new(&sp2, x.plan, dlc_params_data(x.p));
    CHECK_OK(s2);
    if (s2) {
        join_all(s2, 3, 0);
        m = contribution(0, 0, 0, 4, 40, d, n);
        m.step_time = 10.0, m.transit = 0.1;
        CHECK(dlc_syncer_receive(s2, &m, 1.0) == DLC_OK);
        m.learner = 1;
        CHECK(dlc_syncer_receive(s2, &m, 1.5) == DLC_OK);
        /* g = 1·(2·10 − 0.5 − 0.1) = 19.4 > ξ_step = 10 */
        CHECK_NEAR(dlc_syncer_expiry(s2), 1.5 + 10.0, 1e-12);
        dlc_syncer_free(s2);
    }
    dlc_syncer_free(s);
    fx_free(&x);
}

/* A second contribution from a learner whose first is in the open round is held (a
 * third replaces it) and opens the next round when this one closes, re-anchored there;
 * the account counts its steps past the first once.  A held one whose round is due at
 * once is left for the next expiry (dlc_syncer_expiry is then). */
static void test_duplicate(void) {
    fx x;
    fx_make(&x, 1, 40);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, 2, DLC_GRACE_FIXED, 5.0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float th0[NMAX], th1[NMAX], da[NMAX], db[NMAX], dc[NMAX], d1[NMAX], d1b[NMAX];
    gather(&x, 0, dlc_params_data(x.p), th0);
    randv(da, n, 400, 0.1f);
    randv(db, n, 401, 0.1f);
    randv(dc, n, 403, 0.1f);
    randv(d1, n, 402, 0.1f);
    randv(d1b, n, 404, 0.1f);
    join_all(s, 3, 0);
    dlc_msg m = contribution(0, 0, 0, 4, 40, da, n);
    CHECK(dlc_syncer_receive(s, &m, 1.0) == DLC_OK);
    m = contribution(0, 0, 0, 6, 60, db, n);
    CHECK(dlc_syncer_receive(s, &m, 2.0) == DLC_OK);
    m = contribution(0, 0, 0, 7, 70, dc, n);
    CHECK(dlc_syncer_receive(s, &m, 2.5) == DLC_OK);
    CHECK(drain(s).n == 0 && dlc_syncer_held(s) == 2);
    CHECK(dlc_syncer_round_count(s, 0) == 1 && dlc_syncer_round_state(s, 0) == DLC_ROUND_COLLECTING);
    m = contribution(1, 0, 0, 4, 40, d1, n);
    CHECK(dlc_syncer_receive(s, &m, 3.0) == DLC_OK);
    CHECK(dlc_syncer_round_count(s, 0) == 2 && dlc_syncer_round_state(s, 0) == DLC_ROUND_GRACE);
    CHECK(dlc_syncer_handle_expiry(s, 8.0) == DLC_OK);
    rec r = drain(s);
    const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.count == 2);
    if (ma) {
        const dlc_merge_contrib *c0 = contrib_of(&ma->merge, 0);
        CHECK(c0 && c0->steps == 4 && c0->tokens == 40 && c0->arrived == 1.0);
        CHECK(ma->merge.opened == 1.0);
    }
    double want[NMAX];
    for (int64_t i = 0; i < n; i++) want[i] = (double)th0[i] - LR * 0.5 * ((double)da[i] + d1[i]);
    CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), want, n), 0, 2e-6);
    CHECK_NEAR(dlc_syncer_merged_steps(s, 0), 4, 1e-12);
    memcpy(th1, dlc_syncer_theta(s, 0), (size_t)n * sizeof(float));
    /* the held one (the newest, dc) opened round 2 at the close */
    CHECK(dlc_syncer_round_count(s, 0) == 1 && dlc_syncer_round_state(s, 0) == DLC_ROUND_COLLECTING);
    m = contribution(1, 0, 1, 4, 40, d1b, n);
    CHECK(dlc_syncer_receive(s, &m, 9.0) == DLC_OK);
    CHECK(dlc_syncer_handle_expiry(s, 14.0) == DLC_OK);
    r = drain(s);
    ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.count == 2 && ma->merge.version == 2 && ma->merge.opened == 8.0);
    if (ma) {
        const dlc_merge_contrib *c0 = contrib_of(&ma->merge, 0);
        CHECK(c0 && c0->steps == 7 && c0->base_version == 0 && c0->staleness == 1 && c0->arrived == 2.5);
    }
    /* re-anchored: θ_0 = Θ^(0) − dc, Δ' = Θ^(1) − θ_0 */
    for (int64_t i = 0; i < n; i++)
        want[i] = (double)th1[i] - LR * 0.5 * (((double)th1[i] - th0[i] + dc[i]) + d1b[i]);
    CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), want, n), 0, 4e-6);
    CHECK_NEAR(dlc_syncer_merged_steps(s, 0), 7, 1e-12); /* 4, then the 3 past them */
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_IDLE);
    dlc_syncer_free(s);

    /* K = 1 of 2, grace 5: learner 0's second contribution is held; learner 1 is lost, so
     * every live learner has sent and the round closes; the held one's round is due at
     * once, left for the expiry */
    sp = sgd_params(2, 1, DLC_GRACE_FIXED, 5.0);
    s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    join_all(s, 2, 0);
    m = contribution(0, 0, 0, 4, 40, da, n);
    CHECK(dlc_syncer_receive(s, &m, 1.0) == DLC_OK);
    m = contribution(0, 0, 0, 6, 60, db, n);
    CHECK(dlc_syncer_receive(s, &m, 2.0) == DLC_OK);
    CHECK(drain(s).n == 0 && dlc_syncer_expiry(s) == 6.0);
    CHECK(dlc_syncer_lost(s, 1, 3.0) == DLC_OK);
    r = drain(s);
    CHECK(count_type(&r, DLC_SACT_MERGED) == 1 && dlc_syncer_version(s, 0) == 1);
    CHECK(dlc_syncer_round_count(s, 0) == 1 && dlc_syncer_round_state(s, 0) == DLC_ROUND_GRACE);
    CHECK(dlc_syncer_expiry(s) == 3.0);
    CHECK(dlc_syncer_handle_expiry(s, 3.0) == DLC_OK);
    r = drain(s);
    ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.count == 1 && ma->merge.version == 2 && dlc_syncer_round_state(s, 0) == DLC_ROUND_IDLE);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* ---- rejections ---- */

/* R = 2: three versions on, base 0 and 1 are older than the ring: REJECTED stale, and the
 * learner gets the current Θ flagged RESYNC; base 2 is still kept (staleness 1). */
static void test_stale(void) {
    fx x;
    fx_make(&x, 1, 50);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, 1, DLC_GRACE_OFF, 0);
    sp.outer.ring = 2;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float d[NMAX], th2[NMAX], th3[NMAX];
    randv(d, n, 500, 0.1f);
    join_all(s, 3, 0);
    for (int v = 0; v < 3; v++) {
        if (v == 2) memcpy(th2, dlc_syncer_theta(s, 0), (size_t)n * sizeof(float));
        dlc_msg m = contribution(0, 0, v, 4, 40, d, n);
        CHECK(dlc_syncer_receive(s, &m, 1.0 + v) == DLC_OK);
        rec r = drain(s);
        CHECK(count_type(&r, DLC_SACT_MERGED) == 1); /* K = 1, grace off: at once */
    }
    CHECK(dlc_syncer_version(s, 0) == 3);
    memcpy(th3, dlc_syncer_theta(s, 0), (size_t)n * sizeof(float));
    for (int base = 0; base < 2; base++) {
        dlc_msg m = contribution(1, 0, base, 4, 40, d, n);
        CHECK(dlc_syncer_receive(s, &m, 5.0) == DLC_OK);
        rec r = drain(s);
        CHECK(r.n == 2);
        const dlc_syncer_action *ra = find_type(&r, DLC_SACT_REJECTED);
        CHECK(ra && ra->learner == 1 && ra->fragment == 0 && ra->reason == DLC_REJECT_STALE);
        const dlc_msg *f = sent_to(&r, 1, 0);
        CHECK(f && f->version == 3 && f->flags == DLC_MSG_RESYNC && payload_is(f, th3, n));
        CHECK(dlc_syncer_round_count(s, 0) == 0 && dlc_syncer_version(s, 0) == 3);
        CHECK(memcmp(dlc_syncer_theta(s, 0), th3, (size_t)n * sizeof(float)) == 0);
    }
    CHECK(strcmp(dlc_reject_reason_name(DLC_REJECT_STALE), "stale") == 0);
    /* base 2 is in the ring: anchored, merged with staleness 1 */
    dlc_msg m = contribution(1, 0, 2, 4, 40, d, n);
    CHECK(dlc_syncer_receive(s, &m, 6.0) == DLC_OK);
    rec r = drain(s);
    const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.count == 1 && ma->merge.contribs[0].staleness == 1 && ma->merge.version == 4);
    double want[NMAX];
    for (int64_t i = 0; i < n; i++) want[i] = (double)th3[i] - LR * ((double)d[i] + ((double)th3[i] - th2[i]));
    CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), want, n), 0, 2e-6);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* A payload decoding to NaN or Inf: DLC_ERR_FORMAT, REJECTED nonfinite, a resync, never
 * merged (Θ unchanged, the round empty). */
static void test_nonfinite(void) {
    fx x;
    fx_make(&x, 1, 60);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, 1, DLC_GRACE_OFF, 0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float th0[NMAX], d[NMAX];
    gather(&x, 0, dlc_params_data(x.p), th0);
    join_all(s, 3, 0);
    for (int k = 0; k < 2; k++) {
        randv(d, n, 600, 0.1f);
        d[7] = k == 0 ? NAN : -INFINITY;
        dlc_msg m = contribution(2, 0, 0, 4, 40, d, n);
        CHECK(dlc_syncer_receive(s, &m, 1.0) == DLC_ERR_FORMAT);
        rec r = drain(s);
        CHECK(r.n == 2);
        const dlc_syncer_action *ra = find_type(&r, DLC_SACT_REJECTED);
        CHECK(ra && ra->learner == 2 && ra->reason == DLC_REJECT_NONFINITE);
        const dlc_msg *f = sent_to(&r, 2, 0);
        CHECK(f && f->flags == DLC_MSG_RESYNC && f->version == 0 && payload_is(f, th0, n));
        CHECK(count_type(&r, DLC_SACT_MERGED) == 0);
        CHECK(dlc_syncer_round_count(s, 0) == 0 && dlc_syncer_round_state(s, 0) == DLC_ROUND_IDLE);
        CHECK(dlc_syncer_version(s, 0) == 0);
        CHECK(memcmp(dlc_syncer_theta(s, 0), th0, (size_t)n * sizeof(float)) == 0);
    }
    dlc_syncer_free(s);
    fx_free(&x);
}

/* Wrong length: DLC_ERR_FORMAT, REJECTED malformed, a resync; the syncer keeps serving. */
static void test_malformed(void) {
    fx x;
    fx_make(&x, 1, 70);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(2, 1, DLC_GRACE_OFF, 0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float th0[NMAX], d[NMAX];
    gather(&x, 0, dlc_params_data(x.p), th0);
    randv(d, n, 700, 0.1f);
    join_all(s, 2, 0);
    dlc_msg m = contribution(1, 0, 0, 4, 40, d, n - 1);
    CHECK(dlc_syncer_receive(s, &m, 1.0) == DLC_ERR_FORMAT);
    CHECK(strstr(dlc_last_error(), "contribution from learner 2") != NULL); /* index 1: learner 2 */
    rec r = drain(s);
    const dlc_syncer_action *ra = find_type(&r, DLC_SACT_REJECTED);
    CHECK(ra && ra->learner == 1 && ra->reason == DLC_REJECT_MALFORMED);
    const dlc_msg *f = sent_to(&r, 1, 0);
    CHECK(f && f->flags == DLC_MSG_RESYNC && payload_is(f, th0, n));
    CHECK(dlc_syncer_round_count(s, 0) == 0 && dlc_syncer_version(s, 0) == 0);
    /* the wrong codec is malformed too */
    m = contribution(1, 0, 0, 4, 40, d, n);
    m.codec = DLC_CODEC_BF16;
    CHECK(dlc_syncer_receive(s, &m, 1.5) == DLC_ERR_FORMAT);
    r = drain(s);
    ra = find_type(&r, DLC_SACT_REJECTED);
    CHECK(ra && ra->reason == DLC_REJECT_MALFORMED);
    /* a fragment out of range: refused */
    m = contribution(1, 3, 0, 4, 40, d, n);
    CHECK(dlc_syncer_receive(s, &m, 1.6) == DLC_ERR_FORMAT);
    drain(s);
    /* still serving: the next valid contribution merges */
    m = contribution(1, 0, 0, 4, 40, d, n);
    CHECK(dlc_syncer_receive(s, &m, 2.0) == DLC_OK);
    r = drain(s);
    CHECK(count_type(&r, DLC_SACT_MERGED) == 1 && count_type(&r, DLC_SACT_SEND) == 2);
    double want[NMAX];
    for (int64_t i = 0; i < n; i++) want[i] = (double)th0[i] - LR * d[i];
    CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), want, n), 0, 2e-6);
    /* a contribution with no steps is ignored */
    m = contribution(0, 0, 1, 0, 0, d, n);
    CHECK(dlc_syncer_receive(s, &m, 3.0) == DLC_OK);
    CHECK(drain(s).n == 0 && dlc_syncer_round_count(s, 0) == 0);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* ---- liveness ---- */

/* A joining learner gets every fragment's Θ_p and version, flagged RESYNC. */
static void test_join(void) {
    fx x;
    fx_make(&x, 4, 80);
    dlc_syncer_params sp = sgd_params(3, 1, DLC_GRACE_OFF, 0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    CHECK(dlc_syncer_fragments(s) == 4 && dlc_syncer_live(s) == 0);
    /* move fragment 2 to version 1 first: learner 0 joins, contributes */
    CHECK(dlc_syncer_join(s, 0, 0) == DLC_OK);
    drain(s);
    int64_t n2 = dlc_plan_numel(x.plan, 2);
    float d[NMAX];
    randv(d, n2, 800, 0.1f);
    dlc_msg m = contribution(0, 2, 0, 4, 40, d, n2);
    CHECK(dlc_syncer_receive(s, &m, 1.0) == DLC_OK);
    drain(s);
    CHECK(dlc_syncer_version(s, 2) == 1);
    CHECK(dlc_syncer_join(s, 1, 2.0) == DLC_OK);
    rec r = drain(s);
    CHECK(r.n == 4 && count_type(&r, DLC_SACT_SEND) == 4);
    float model[256], frag[NMAX];
    CHECK(dlc_syncer_copy_model(s, model) == DLC_OK);
    for (int p = 0; p < 4; p++) {
        const dlc_msg *f = sent_to(&r, 1, p);
        /* held: the age of the fragment's latest round (fragment 2's opened at 1.0), -1 for none */
        CHECK(f && f->flags == DLC_MSG_RESYNC && f->version == (p == 2 ? 1 : 0) && f->held == (p == 2 ? 1.0 : -1.0));
        gather(&x, p, model, frag);
        CHECK(payload_is(f, frag, dlc_plan_numel(x.plan, p)));
        CHECK(memcmp(dlc_syncer_theta(s, p), frag, (size_t)dlc_plan_numel(x.plan, p) * sizeof(float)) == 0);
        if (p != 2) {
            gather(&x, p, dlc_params_data(x.p), frag);
            CHECK(payload_is(f, frag, dlc_plan_numel(x.plan, p)));
        }
    }
    CHECK(dlc_syncer_live(s) == 2 && dlc_syncer_is_live(s, 1) && !dlc_syncer_is_live(s, 2));
    dlc_syncer_free(s);
    fx_free(&x);
}

/* The last SEND action of fragment p in r, NULL if none. */
static const dlc_syncer_action *send_action(const rec *r, int p) {
    const dlc_syncer_action *a = NULL;
    for (int i = 0; i < r->n; i++)
        if (r->a[i].type == DLC_SACT_SEND && r->a[i].msg.fragment == p) a = &r->a[i];
    return a;
}

/* A SEND of a FRAGMENT names the buffer its payload lies in (syncer.h, dlc_payload): a
 * driver that keeps a reference across later merges finds its bytes unchanged and frees
 * it with the last reference.  bf16 down: the next version is encoded into a new buffer
 * while one is held, into the same one when none is.  f32 down: the payload is Θ_p's own
 * ring slot (no copy); a held version's slot buffer goes with its payload when a step
 * would overwrite it (the ring takes a fresh one), an unheld one is reused; a payload
 * still held when the syncer is freed stays readable. */
static void test_payload_owner(void) {
    for (int f32 = 0; f32 <= 1; f32++) {
        fx x;
        fx_make(&x, 2, 81);
        dlc_syncer_params sp = sgd_params(1, 1, DLC_GRACE_OFF, 0);
        sp.codec_down = f32 ? DLC_CODEC_F32 : DLC_CODEC_BF16;
        sp.outer.ring = 2;
        dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
        CHECK_OK(s);
        if (!s) return;
        CHECK(dlc_syncer_join(s, 0, 0) == DLC_OK);
        rec r = drain(s);
        const dlc_syncer_action *a = send_action(&r, 1);
        CHECK(a && a->owner && a->msg.version == 0);
        if (!a) return;
        int64_t n1 = dlc_plan_numel(x.plan, 1);
        size_t len = a->msg.len;
        CHECK(len == (size_t)n1 * (f32 ? 4 : 2));
        if (f32) CHECK(a->msg.payload == (const uint8_t *)dlc_syncer_theta(s, 1)); /* the ring's slot */
        float v0[NMAX], d[NMAX];
        memcpy(v0, a->msg.payload, len);
        dlc_payload *held = dlc_payload_ref(a->owner);
        const uint8_t *held_bytes = a->msg.payload;
        randv(d, n1, 810, 0.1f);
        /* versions 1 and 2: with R = 2, version 2 is written where version 0 was */
        const dlc_syncer_action *b = NULL;
        const uint8_t *b_bytes = NULL;
        for (int64_t v = 1; v <= 2; v++) {
            dlc_msg m = contribution(0, 1, v - 1, 4, 40, d, n1);
            CHECK(dlc_syncer_receive(s, &m, (double)v) == DLC_OK);
            r = drain(s);
            const dlc_msg *f = sent_to(&r, 0, 1);
            b = send_action(&r, 1);
            CHECK(f && f->version == v && b && b->owner && b->owner != held);
            CHECK(memcmp(held_bytes, v0, len) == 0); /* untouched */
            CHECK(f && memcmp(f->payload, v0, len) != 0);
            if (f32) CHECK(b && b->msg.payload == (const uint8_t *)dlc_syncer_theta(s, 1));
            if (v == 1 && b) b_bytes = b->msg.payload;
        }
        CHECK(b && b->msg.payload != held_bytes);
        dlc_payload_unref(held);
        /* nothing held now: version 3 goes into version 1's buffer (bf16: version 2's) */
        dlc_payload *b2 = b ? b->owner : NULL;
        dlc_msg m = contribution(0, 1, 2, 4, 40, d, n1);
        CHECK(dlc_syncer_receive(s, &m, 3.0) == DLC_OK);
        r = drain(s);
        const dlc_syncer_action *c = send_action(&r, 1);
        CHECK(c && c->msg.version == 3);
        if (c && f32) CHECK(c->msg.payload == b_bytes && c->owner != b2);
        if (c && !f32) CHECK(c->owner == b2);
        /* a payload held past the syncer's end */
        float v3[NMAX];
        dlc_payload *last = c ? dlc_payload_ref(c->owner) : NULL;
        const uint8_t *last_bytes = c ? c->msg.payload : NULL;
        if (c) memcpy(v3, c->msg.payload, len);
        dlc_syncer_free(s);
        if (last) CHECK(memcmp(last_bytes, v3, len) == 0);
        dlc_payload_unref(last);
        dlc_payload_unref(NULL);
        fx_free(&x);
    }
}

/* The outer step as a choice (docs/outer.md): SGD with lr 1 and no momentum over a mean
 * merge is plain averaging, Θ ← Θ − (Θ − mean θ_m) = the mean of the learners' models
 * (to f32 rounding); Nesterov with the defaults moves Θ past it, along the mean. */
static void test_plain_averaging(void) {
    fx x;
    fx_make(&x, 1, 85);
    int64_t n = dlc_plan_numel(x.plan, 0);
    float th0[NMAX], th[3][NMAX], d[3][NMAX], mean[NMAX];
    gather(&x, 0, dlc_params_data(x.p), th0);
    for (int m = 0; m < 3; m++) {
        randv(th[m], n, 850 + (uint64_t)m, 0.1f);
        for (int64_t i = 0; i < n; i++) th[m][i] += th0[i], d[m][i] = th0[i] - th[m][i];
    }
    for (int64_t i = 0; i < n; i++) mean[i] = (th[0][i] + th[1][i] + th[2][i]) / 3;
    for (int nesterov = 0; nesterov <= 1; nesterov++) {
        dlc_syncer_params sp = sgd_params(3, DLC_QUORUM_ALL, DLC_GRACE_OFF, 0);
        if (nesterov) sp.outer = dlc_fragstate_default_params(); /* lr 0.7, momentum 0.9, Nesterov */
        else sp.outer.lr = 1, sp.outer.momentum = 0, sp.outer.nesterov = 0;
        dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
        CHECK_OK(s);
        if (!s) return;
        for (int m = 0; m < 3; m++) {
            CHECK(dlc_syncer_join(s, m, 0) == DLC_OK);
            drain(s);
        }
        for (int m = 0; m < 3; m++) {
            dlc_msg c = contribution(m, 0, 0, 4, 40, d[m], n);
            CHECK(dlc_syncer_receive(s, &c, 1) == DLC_OK);
            drain(s);
        }
        const float *g = dlc_syncer_theta(s, 0);
        double worst = 0, past = 0;
        for (int64_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs((double)g[i] - mean[i]));
            past += ((double)g[i] - th0[i]) * ((double)mean[i] - th0[i]); /* along the mean's direction */
        }
        CHECK(dlc_syncer_version(s, 0) == 1);
        if (!nesterov) CHECK(worst < 1e-6);
        else CHECK(worst > 1e-3 && past > 0);
        dlc_syncer_free(s);
    }
    fx_free(&x);
}

/* A lost learner's contribution stays in its round (it counts towards the quorum); the
 * round stops waiting for the lost learner and merges when every live one has sent. */
static void test_lost(void) {
    fx x;
    fx_make(&x, 1, 90);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, DLC_QUORUM_ALL, DLC_GRACE_FIXED, 5.0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float th0[NMAX], d0[NMAX], d1[NMAX], d2[NMAX];
    gather(&x, 0, dlc_params_data(x.p), th0);
    randv(d0, n, 900, 0.1f);
    randv(d1, n, 901, 0.1f);
    randv(d2, n, 902, 0.1f);
    join_all(s, 3, 0);
    dlc_msg m = contribution(0, 0, 0, 4, 40, d0, n);
    CHECK(dlc_syncer_receive(s, &m, 1.0) == DLC_OK);
    m = contribution(2, 0, 0, 4, 40, d2, n);
    CHECK(dlc_syncer_receive(s, &m, 2.0) == DLC_OK);
    m = contribution(1, 0, 0, 4, 40, d1, n);
    CHECK(drain(s).n == 0 && dlc_syncer_round_count(s, 0) == 2);
    /* learner 2 dies: its contribution stays; learner 1 has not sent: K = all not reached */
    CHECK(dlc_syncer_lost(s, 2, 3.0) == DLC_OK);
    CHECK(drain(s).n == 0);
    CHECK(dlc_syncer_live(s) == 2 && dlc_syncer_round_count(s, 0) == 2);
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_COLLECTING);
    CHECK(dlc_syncer_receive(s, &m, 4.0) == DLC_OK);
    rec r = drain(s);
    const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.count == 3 && ma->merge.all_sent == 1 && ma->merge.live == 2 && ma->merge.quorum == 2);
    CHECK(count_type(&r, DLC_SACT_SEND) == 2 && !sent_to(&r, 2, 0));
    CHECK(dlc_syncer_merged(s, 2) == 1 && dlc_syncer_merged_steps(s, 2) == 4);
    double want[NMAX];
    for (int64_t i = 0; i < n; i++) want[i] = (double)th0[i] - LR * ((double)d0[i] + d1[i] + d2[i]) / 3;
    CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), want, n), 0, 2e-6);

    /* K = all of 3 with 2 sent: the third dies and the round merges with the two */
    CHECK(dlc_syncer_join(s, 2, 5.0) == DLC_OK);
    drain(s);
    float th1[NMAX];
    memcpy(th1, dlc_syncer_theta(s, 0), (size_t)n * sizeof(float));
    m = contribution(0, 0, 1, 4, 40, d0, n);
    CHECK(dlc_syncer_receive(s, &m, 6.0) == DLC_OK);
    m = contribution(1, 0, 1, 4, 40, d1, n);
    CHECK(dlc_syncer_receive(s, &m, 7.0) == DLC_OK);
    CHECK(drain(s).n == 0 && dlc_syncer_round_state(s, 0) == DLC_ROUND_COLLECTING);
    CHECK(dlc_syncer_lost(s, 2, 8.0) == DLC_OK);
    r = drain(s);
    ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.count == 2 && ma->merge.all_sent == 1 && ma->merge.version == 2);
    CHECK(count_type(&r, DLC_SACT_SEND) == 2);
    for (int64_t i = 0; i < n; i++) want[i] = (double)th1[i] - LR * 0.5 * ((double)d0[i] + d1[i]);
    CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), want, n), 0, 2e-6);

    /* the contributor of an open round dies: its contribution waits there for the live
     * learner's */
    m = contribution(0, 0, 2, 4, 40, d0, n);
    CHECK(dlc_syncer_receive(s, &m, 9.0) == DLC_OK);
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_COLLECTING);
    CHECK(dlc_syncer_lost(s, 0, 10.0) == DLC_OK);
    CHECK(drain(s).n == 0);
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_COLLECTING && dlc_syncer_round_count(s, 0) == 1);
    CHECK(dlc_syncer_version(s, 0) == 2);
    /* lost twice is harmless */
    CHECK(dlc_syncer_lost(s, 0, 10.5) == DLC_OK && dlc_syncer_live(s) == 1);
    m = contribution(1, 0, 2, 4, 40, d1, n);
    CHECK(dlc_syncer_receive(s, &m, 11.0) == DLC_OK);
    r = drain(s);
    ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.count == 2 && ma->merge.live == 1 && ma->merge.version == 3);
    CHECK(count_type(&r, DLC_SACT_SEND) == 1 && sent_to(&r, 1, 0));
    dlc_syncer_free(s);
    fx_free(&x);
}

/* Silence for `timeout` makes a learner LOST; a message from a non-live learner makes it
 * JOINED with a full resync (the message itself dropped). */
static void test_timeout_rejoin(void) {
    fx x;
    fx_make(&x, 2, 95);
    int64_t n0 = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, 1, DLC_GRACE_OFF, 0);
    sp.timeout = 10;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    join_all(s, 3, 0);
    CHECK(dlc_syncer_expiry(s) == 10.0);
    dlc_msg hb = {.type = DLC_MSG_HEARTBEAT, .learner = 0, .step_time = 1.0};
    CHECK(dlc_syncer_receive(s, &hb, 5.0) == DLC_OK);
    CHECK(dlc_syncer_handle_expiry(s, 9.99) == DLC_OK);
    CHECK(drain(s).n == 0 && dlc_syncer_live(s) == 3);
    CHECK(dlc_syncer_handle_expiry(s, 10.0) == DLC_OK);
    rec r = drain(s);
    CHECK(r.n == 2 && count_type(&r, DLC_SACT_LOST) == 2);
    CHECK(r.a[0].learner == 1 && r.a[1].learner == 2);
    CHECK(dlc_syncer_live(s) == 1 && dlc_syncer_is_live(s, 0) && !dlc_syncer_is_live(s, 1));
    CHECK(dlc_syncer_expiry(s) == 15.0);
    /* learner 1 comes back with a contribution: JOINED, resynced, the contribution dropped */
    float d[NMAX];
    randv(d, n0, 950, 0.1f);
    dlc_msg m = contribution(1, 0, 0, 4, 40, d, n0);
    CHECK(dlc_syncer_receive(s, &m, 11.0) == DLC_OK);
    r = drain(s);
    CHECK(r.n == 3 && r.a[0].type == DLC_SACT_JOINED && r.a[0].learner == 1);
    for (int p = 0; p < 2; p++) {
        const dlc_msg *f = sent_to(&r, 1, p);
        CHECK(f && f->flags == DLC_MSG_RESYNC && f->version == 0);
    }
    CHECK(dlc_syncer_round_count(s, 0) == 0 && dlc_syncer_version(s, 0) == 0);
    CHECK(dlc_syncer_live(s) == 2 && dlc_syncer_is_live(s, 1));
    CHECK(dlc_syncer_expiry(s) == 15.0); /* learner 0 heard at 5 */
    /* BYE: gone for good */
    dlc_msg bye = {.type = DLC_MSG_BYE, .learner = 0};
    CHECK(dlc_syncer_receive(s, &bye, 12.0) == DLC_OK);
    CHECK(drain(s).n == 0 && dlc_syncer_live(s) == 1);
    CHECK(dlc_syncer_expiry(s) == 21.0);
    /* a BYE from a learner that is not live (again, or after a timeout) is no rejoin */
    CHECK(dlc_syncer_receive(s, &bye, 12.5) == DLC_OK);
    bye.learner = 2;
    CHECK(dlc_syncer_receive(s, &bye, 12.5) == DLC_OK);
    CHECK(drain(s).n == 0 && dlc_syncer_live(s) == 1 && !dlc_syncer_is_live(s, 0) && !dlc_syncer_is_live(s, 2));
    dlc_syncer_free(s);
    fx_free(&x);
}

/* ---- weighting and merging ---- */

static void test_weighting(dlc_weighting wmode) {
    fx x;
    fx_make(&x, 1, 110);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, DLC_QUORUM_ALL, DLC_GRACE_OFF, 0);
    sp.weighting = wmode;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float th0[NMAX], d[3][NMAX];
    gather(&x, 0, dlc_params_data(x.p), th0);
    join_all(s, 3, 0);
    int64_t steps[3] = {4, 2, 8}, tokens[3] = {400, 100, 1000};
    double w[3], ws = 0;
    for (int L = 0; L < 3; L++) {
        w[L] = wmode == DLC_WEIGHT_TOKENS ? (double)tokens[L] : (double)tokens[L] * tokens[L] / steps[L];
        ws += w[L];
        randv(d[L], n, 1100 + (uint64_t)L, 0.1f);
    }
    rec r = {0};
    for (int L = 0; L < 3; L++) {
        dlc_msg m = contribution(L, 0, 0, steps[L], tokens[L], d[L], n);
        CHECK(dlc_syncer_receive(s, &m, 1.0 + L) == DLC_OK);
        r = drain(s);
    }
    const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.count == 3);
    if (ma)
        for (int L = 0; L < 3; L++) {
            const dlc_merge_contrib *c = contrib_of(&ma->merge, L);
            CHECK(c && c->weight == w[L] && c->steps == steps[L] && c->tokens == tokens[L]);
        }
    if (ma) CHECK_NEAR(ma->merge.useful_tokens, 1500, 1e-9);
    double want[NMAX];
    for (int64_t i = 0; i < n; i++) {
        double acc = 0;
        for (int L = 0; L < 3; L++) acc += w[L] * d[L][i];
        want[i] = (double)th0[i] - LR * acc / ws;
    }
    CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), want, n), 0, 2e-6);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* RDA over identical contributions (any weights) equals their mean, Θ − lr·Δ; with
 * Nesterov the outer step matches a double reference. */
static void test_rda_identical(void) {
    fx x;
    fx_make(&x, 1, 120);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, DLC_QUORUM_ALL, DLC_GRACE_OFF, 0);
    sp.merge = DLC_MERGE_RDA;
    sp.weighting = DLC_WEIGHT_TOKENS2_STEPS;
    sp.outer = dlc_fragstate_default_params(); /* Nesterov 0.7 / 0.9 */
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float th0[NMAX], d[NMAX];
    gather(&x, 0, dlc_params_data(x.p), th0);
    join_all(s, 3, 0);
    double th[NMAX], buf[NMAX];
    for (int64_t i = 0; i < n; i++) th[i] = th0[i];
    for (int round = 0; round < 2; round++) {
        randv(d, n, 1200 + (uint64_t)round, 0.1f);
        for (int L = 0; L < 3; L++) {
            dlc_msg m = contribution(L, 0, round, 1 + L, 100 * (1 + L), d, n);
            CHECK(dlc_syncer_receive(s, &m, 1.0 + L) == DLC_OK);
        }
        rec r = drain(s);
        CHECK(count_type(&r, DLC_SACT_MERGED) == 1);
        for (int64_t i = 0; i < n; i++) {
            buf[i] = round == 0 ? d[i] : 0.9 * buf[i] + d[i];
            th[i] -= 0.7 * (d[i] + 0.9 * buf[i]);
        }
        CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), th, n), 0, 4e-6);
    }
    dlc_syncer_free(s);
    fx_free(&x);
}

/* ---- restart, flush, quorum changes ---- */

/* A restart drops the open round and keeps Θ, versions and the ring: a contribution
 * based on version 0 (in the ring before) still anchors; every learner is unheard until
 * its first message.  Without blocking that message is used as usual; with blocking it
 * is answered with the whole model (JOINED, RESYNC fragments) and not used, since the
 * learner may wait for the round the restart dropped; after it, contributions are merged
 * as usual. */
static void test_restart(void) {
    for (int blocking = 0; blocking <= 1; blocking++) {
        fx x;
        fx_make(&x, 1, 130);
        int64_t n = dlc_plan_numel(x.plan, 0);
        dlc_syncer_params sp = sgd_params(3, 2, DLC_GRACE_FIXED, 5.0);
        sp.blocking = blocking;
        dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
        CHECK_OK(s);
        if (!s) return;
        float d[NMAX], th1[NMAX];
        randv(d, n, 1300, 0.1f);
        join_all(s, 3, 0);
        dlc_msg m = contribution(0, 0, 0, 4, 40, d, n);
        CHECK(dlc_syncer_receive(s, &m, 1.0) == DLC_OK);
        m.learner = 1;
        CHECK(dlc_syncer_receive(s, &m, 1.0) == DLC_OK);
        CHECK(dlc_syncer_handle_expiry(s, 6.0) == DLC_OK);
        drain(s);
        CHECK(dlc_syncer_version(s, 0) == 1);
        memcpy(th1, dlc_syncer_theta(s, 0), (size_t)n * sizeof(float));
        /* an open round with one contribution, then the restart drops it */
        m = contribution(0, 0, 1, 4, 40, d, n);
        CHECK(dlc_syncer_receive(s, &m, 7.0) == DLC_OK);
        CHECK(dlc_syncer_round_count(s, 0) == 1);
        CHECK(!dlc_syncer_is_unheard(s, 0));
        CHECK(dlc_syncer_restart(s, 8.0) == DLC_OK);
        CHECK(drain(s).n == 0);
        CHECK(dlc_syncer_round_count(s, 0) == 0 && dlc_syncer_round_state(s, 0) == DLC_ROUND_IDLE);
        CHECK(dlc_syncer_version(s, 0) == 1 && dlc_syncer_live(s) == 3);
        CHECK(memcmp(dlc_syncer_theta(s, 0), th1, (size_t)n * sizeof(float)) == 0);
        for (int L = 0; L < 3; L++) CHECK(dlc_syncer_is_unheard(s, L));
        /* learner 2's first message, based on version 0 (still in the ring) */
        m = contribution(2, 0, 0, 4, 40, d, n);
        CHECK(dlc_syncer_receive(s, &m, 9.0) == DLC_OK);
        rec r = drain(s);
        CHECK(!dlc_syncer_is_unheard(s, 2) && dlc_syncer_is_unheard(s, 1));
        CHECK(!find_type(&r, DLC_SACT_REJECTED));
        if (!blocking) {
            CHECK(r.n == 0 && dlc_syncer_round_count(s, 0) == 1); /* anchored, in the round */
        } else {
            const dlc_syncer_action *ja = find_type(&r, DLC_SACT_JOINED);
            CHECK(ja && ja->learner == 2 && r.n == 2);
            const dlc_msg *f = sent_to(&r, 2, 0);
            CHECK(f && f->flags == DLC_MSG_RESYNC && f->version == 1 && payload_is(f, th1, n));
            CHECK(dlc_syncer_round_count(s, 0) == 0 && dlc_syncer_live(s) == 3);
            /* a heartbeat from learner 0 too; then its contribution counts */
            dlc_msg hb = {.type = DLC_MSG_HEARTBEAT, .learner = 0, .steps = 9};
            CHECK(dlc_syncer_receive(s, &hb, 9.5) == DLC_OK);
            r = drain(s);
            CHECK(find_type(&r, DLC_SACT_JOINED) && sent_to(&r, 0, 0) && sent_to(&r, 0, 0)->flags == DLC_MSG_RESYNC);
            m = contribution(0, 0, 1, 4, 40, d, n);
            CHECK(dlc_syncer_receive(s, &m, 10.0) == DLC_OK);
            CHECK(drain(s).n == 0 && dlc_syncer_round_count(s, 0) == 1);
        }
        /* a BYE from an unheard learner is a goodbye, not a first message */
        dlc_msg bye = {.type = DLC_MSG_BYE, .learner = 1};
        CHECK(dlc_syncer_receive(s, &bye, 11.0) == DLC_OK);
        CHECK(drain(s).n == 0 && !dlc_syncer_is_live(s, 1) && dlc_syncer_live(s) == 2);
        dlc_syncer_free(s);
        fx_free(&x);
    }
}

/* flush merges below the quorum, flushed = 1; set_quorum re-checks open rounds. */
static void test_flush_and_quorum(void) {
    fx x;
    fx_make(&x, 2, 140);
    int64_t n0 = dlc_plan_numel(x.plan, 0), n1 = dlc_plan_numel(x.plan, 1);
    dlc_syncer_params sp = sgd_params(3, 3, DLC_GRACE_FIXED, 5.0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float th0[NMAX], d[NMAX];
    gather(&x, 0, dlc_params_data(x.p), th0);
    randv(d, n0, 1400, 0.1f);
    join_all(s, 3, 0);
    dlc_msg m = contribution(1, 0, 0, 4, 40, d, n0);
    CHECK(dlc_syncer_receive(s, &m, 1.0) == DLC_OK);
    CHECK(drain(s).n == 0);
    CHECK(dlc_syncer_flush(s, 3.0) == DLC_OK);
    rec r = drain(s);
    const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(count_type(&r, DLC_SACT_MERGED) == 1); /* fragment 1 had nothing */
    CHECK(ma && ma->merge.fragment == 0 && ma->merge.flushed == 1 && ma->merge.count == 1);
    CHECK(ma && ma->merge.quorum_at == 3.0 && ma->merge.waited == 0 && ma->merge.grace == 0);
    CHECK(count_type(&r, DLC_SACT_SEND) == 3);
    double want[NMAX];
    for (int64_t i = 0; i < n0; i++) want[i] = (double)th0[i] - LR * d[i];
    CHECK_NEAR(maxdiff_fd(dlc_syncer_theta(s, 0), want, n0), 0, 2e-6);
    CHECK(dlc_syncer_version(s, 0) == 1 && dlc_syncer_version(s, 1) == 0);
    /* quorum 3 -> 1 with an open round of one: GRACE with the fixed window */
    float d1[NMAX];
    randv(d1, n1, 1401, 0.1f);
    m = contribution(0, 1, 0, 4, 40, d1, n1);
    CHECK(dlc_syncer_receive(s, &m, 4.0) == DLC_OK);
    CHECK(dlc_syncer_round_state(s, 1) == DLC_ROUND_COLLECTING);
    CHECK(dlc_syncer_set_quorum(s, 1, 5.0) == DLC_OK);
    CHECK(dlc_syncer_round_state(s, 1) == DLC_ROUND_GRACE && dlc_syncer_expiry(s) == 10.0);
    CHECK(dlc_syncer_set_quorum(s, 2, 6.0) == DLC_OK); /* back below: collecting */
    CHECK(dlc_syncer_round_state(s, 1) == DLC_ROUND_COLLECTING && dlc_syncer_expiry(s) == INFINITY);
    CHECK(dlc_syncer_set_quorum(s, 9, 6.0) == DLC_ERR_ARG);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* Manual rounds: neither the quorum, nor the grace deadline, nor the last live learner
 * closes a round; only flush does, with exactly what was received, and the result is the
 * merge the same contributions make without it. */
static void test_manual(void) {
    fx x;
    fx_make(&x, 2, 160);
    int64_t n0 = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(2, 1, DLC_GRACE_OFF, 0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    dlc_syncer *auto_s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s && auto_s);
    if (!s || !auto_s) return;
    CHECK(dlc_syncer_set_manual(NULL, 1) == DLC_ERR_ARG);
    CHECK(dlc_syncer_set_manual(s, 1) == DLC_OK && dlc_syncer_pending(s) == 0);
    join_all(s, 2, 0);
    join_all(auto_s, 2, 0);
    float d0[NMAX], d1[NMAX];
    randv(d0, n0, 1600, 0.1f);
    randv(d1, n0, 1601, 0.1f);
    dlc_msg a = contribution(0, 0, 0, 4, 40, d0, n0), b = contribution(1, 0, 0, 2, 30, d1, n0);
    /* quorum 1, no grace: without manual the first contribution merges at once */
    CHECK(dlc_syncer_receive(auto_s, &a, 1.0) == DLC_OK);
    rec r = drain(auto_s);
    CHECK(count_type(&r, DLC_SACT_MERGED) == 1 && dlc_syncer_version(auto_s, 0) == 1);
    /* manual: both wait, past every deadline, and every live learner has sent */
    CHECK(dlc_syncer_receive(s, &a, 1.0) == DLC_OK);
    CHECK(drain(s).n == 0 && dlc_syncer_round_state(s, 0) == DLC_ROUND_GRACE);
    CHECK(dlc_syncer_handle_expiry(s, 100.0) == DLC_OK);
    CHECK(drain(s).n == 0);
    CHECK(dlc_syncer_receive(s, &b, 101.0) == DLC_OK);
    CHECK(drain(s).n == 0 && dlc_syncer_round_count(s, 0) == 2 && dlc_syncer_version(s, 0) == 0);
    CHECK(dlc_syncer_flush(s, 102.0) == DLC_OK);
    r = drain(s);
    const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.count == 2 && ma->merge.flushed == 1 && dlc_syncer_version(s, 0) == 1);
    /* the same two contributions merged by an automatic syncer of quorum 2 give the same floats */
    dlc_syncer_params sp2 = sgd_params(2, 2, DLC_GRACE_OFF, 0);
    dlc_syncer *both = dlc_syncer_new(&sp2, x.plan, dlc_params_data(x.p));
    CHECK_OK(both);
    if (both) {
        join_all(both, 2, 0);
        CHECK(dlc_syncer_receive(both, &a, 1.0) == DLC_OK);
        CHECK(drain(both).n == 0);
        CHECK(dlc_syncer_receive(both, &b, 2.0) == DLC_OK);
        r = drain(both);
        CHECK(count_type(&r, DLC_SACT_MERGED) == 1);
        CHECK(memcmp(dlc_syncer_theta(both, 0), dlc_syncer_theta(s, 0), (size_t)n0 * sizeof(float)) == 0);
        dlc_syncer_free(both);
    }
    /* manual off again: the next round closes by itself */
    CHECK(dlc_syncer_set_manual(s, 0) == DLC_OK);
    a.version = 1;
    CHECK(dlc_syncer_receive(s, &a, 103.0) == DLC_OK);
    r = drain(s);
    CHECK(count_type(&r, DLC_SACT_MERGED) == 1 && dlc_syncer_version(s, 0) == 2);
    dlc_syncer_free(s);
    dlc_syncer_free(auto_s);
    fx_free(&x);
}

/* ---- data parallel ---- */

static void test_dp(void) {
    fx x;
    fx_make(&x, 1, 150);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, DLC_QUORUM_ALL, DLC_GRACE_OFF, 0);
    sp.dp = 1;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float th0[NMAX], g[3][NMAX];
    gather(&x, 0, dlc_params_data(x.p), th0);
    join_all(s, 3, 0);
    for (int step = 1; step <= 2; step++) {
        rec r = {0};
        for (int L = 0; L < 3; L++) {
            randv(g[L], n, 1500 + 10 * (uint64_t)step + (uint64_t)L, 1.0f);
            dlc_msg m = {.type = DLC_MSG_GRADIENT, .learner = L, .version = step, .tokens = 64,
                         .codec = DLC_CODEC_F32, .payload = (const uint8_t *)g[L], .len = (size_t)n * 4};
            CHECK(dlc_syncer_receive(s, &m, step + 0.1 * L) == DLC_OK);
            r = drain(s);
            if (L < 2) CHECK(r.n == 0);
        }
        CHECK(count_type(&r, DLC_SACT_MERGED) == 1 && count_type(&r, DLC_SACT_SEND) == 3);
        const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
        CHECK(ma && ma->merge.version == step && ma->merge.count == 3);
        /* every gradient is for the round's own step: staleness 0, base the step */
        for (int i = 0; ma && i < ma->merge.count; i++)
            CHECK(ma->merge.contribs[i].staleness == 0 && ma->merge.contribs[i].base_version == step);
        double want[NMAX];
        for (int64_t i = 0; i < n; i++) want[i] = ((double)g[0][i] + g[1][i] + g[2][i]) / 3.0;
        for (int L = 0; L < 3; L++) {
            const dlc_msg *a = NULL;
            for (int i = 0; i < r.n; i++)
                if (r.a[i].type == DLC_SACT_SEND && r.a[i].msg.learner == L) a = &r.a[i].msg;
            CHECK(a && a->type == DLC_MSG_GRADIENT_AVG && a->version == step && a->codec == DLC_CODEC_F32 &&
                  a->len == (size_t)n * 4);
            if (a) CHECK_NEAR(maxdiff_fd((const float *)(const void *)a->payload, want, n), 0, 1e-6);
        }
        CHECK(dlc_syncer_version(s, 0) == 0); /* no outer step in dp */
        CHECK(memcmp(dlc_syncer_theta(s, 0), th0, (size_t)n * sizeof(float)) == 0);
    }
    /* learner 2 restarts: its resync carries the run's step (2 rounds closed), so its next
     * gradient is for step 3 and counts in that round with the others' */
    CHECK(dlc_syncer_lost(s, 2, 3.0) == DLC_OK && drain(s).n == 0);
    CHECK(dlc_syncer_join(s, 2, 3.0) == DLC_OK);
    rec r = drain(s);
    CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_FRAGMENT && (r.a[0].msg.flags & DLC_MSG_RESYNC) &&
          r.a[0].msg.steps == 2);
    for (int L = 0; L < 3; L++) {
        dlc_msg m = {.type = DLC_MSG_GRADIENT, .learner = L, .version = 3, .tokens = 64, .codec = DLC_CODEC_F32,
                     .payload = (const uint8_t *)g[L], .len = (size_t)n * 4};
        CHECK(dlc_syncer_receive(s, &m, 3.5 + 0.1 * L) == DLC_OK);
        r = drain(s);
    }
    const dlc_syncer_action *m3 = find_type(&r, DLC_SACT_MERGED);
    CHECK(m3 && m3->merge.version == 3 && m3->merge.count == 3 && count_type(&r, DLC_SACT_SEND) == 3);
    /* a gradient of a round that closed without it gets that round's average back, to it
     * alone, and opens nothing */
    double avg3[NMAX];
    for (int64_t i = 0; i < n; i++) avg3[i] = ((double)g[0][i] + g[1][i] + g[2][i]) / 3.0;
    dlc_msg late = {.type = DLC_MSG_GRADIENT, .learner = 1, .version = 3, .tokens = 64, .codec = DLC_CODEC_F32,
                    .payload = (const uint8_t *)g[1], .len = (size_t)n * 4};
    CHECK(dlc_syncer_receive(s, &late, 3.9) == DLC_OK);
    r = drain(s);
    CHECK(r.n == 1 && r.a[0].type == DLC_SACT_SEND && r.a[0].msg.type == DLC_MSG_GRADIENT_AVG &&
          r.a[0].msg.learner == 1 && r.a[0].msg.version == 3);
    if (r.n == 1) CHECK_NEAR(maxdiff_fd((const float *)(const void *)r.a[0].msg.payload, avg3, n), 0, 1e-6);
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_IDLE && dlc_syncer_round_count(s, 0) == 0);
    /* a gradient for another step (a restarted learner counting from 1) is refused naming
     * the step expected, counted in no round, and its sender resynced at the run's step */
    late.version = 1, late.learner = 2;
    CHECK(dlc_syncer_receive(s, &late, 4.0) == DLC_ERR_FORMAT);
    CHECK(strstr(dlc_last_error(), "gradient from learner 3 for step 1: expected step 4 (the next round)") != NULL);
    r = drain(s);
    const dlc_syncer_action *rj = find_type(&r, DLC_SACT_REJECTED);
    CHECK(rj && rj->learner == 2 && rj->reason == DLC_REJECT_STALE);
    const dlc_msg *rs = sent_to(&r, 2, 0);
    CHECK(rs && (rs->flags & DLC_MSG_RESYNC) && rs->steps == 3);
    CHECK(dlc_syncer_round_count(s, 0) == 0);
    /* a contribution in a dp run is refused */
    dlc_msg c = contribution(0, 0, 0, 1, 1, g[0], n);
    CHECK(dlc_syncer_receive(s, &c, 9.0) == DLC_ERR_FORMAT);
    /* a gradient of the wrong size is refused */
    dlc_msg m = {.type = DLC_MSG_GRADIENT, .learner = 0, .version = 4, .codec = DLC_CODEC_F32,
                 .payload = (const uint8_t *)g[0], .len = (size_t)(n - 1) * 4};
    CHECK(dlc_syncer_receive(s, &m, 9.0) == DLC_ERR_FORMAT);
    CHECK(dlc_syncer_round_count(s, 0) == 0);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* dp: a void gradient (no tokens: the learner's step went non-finite on a finite model)
 * is left out of the average, which still goes to its sender too; a round whose every
 * gradient is void averages nothing: each sender is resynced at the run's step (the
 * rounds closed so far), to run the step again, and the next round is that step's. */
static void test_dp_void(void) {
    fx x;
    fx_make(&x, 1, 151);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, DLC_QUORUM_ALL, DLC_GRACE_OFF, 0);
    sp.dp = 1;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float g[3][NMAX], zero[NMAX] = {0};
    join_all(s, 3, 0);
    for (int L = 0; L < 3; L++) randv(g[L], n, 1600 + (uint64_t)L, 1.0f);
    rec r = {0};
    for (int L = 0; L < 3; L++) { /* learner 1's step is void */
        dlc_msg m = {.type = DLC_MSG_GRADIENT, .learner = L, .version = 1, .tokens = L == 1 ? 0 : 64,
                     .codec = DLC_CODEC_F32, .payload = (const uint8_t *)(L == 1 ? zero : g[L]), .len = (size_t)n * 4};
        CHECK(dlc_syncer_receive(s, &m, 1.0 + 0.1 * L) == DLC_OK);
        r = drain(s);
    }
    const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.version == 1 && ma->merge.count == 2 && count_type(&r, DLC_SACT_SEND) == 3);
    for (int i = 0; ma && i < ma->merge.count; i++) CHECK(ma->merge.contribs[i].learner != 1);
    CHECK(ma && ma->merge.useful_tokens == 128);
    double want[NMAX];
    for (int64_t i = 0; i < n; i++) want[i] = ((double)g[0][i] + g[2][i]) / 2.0;
    for (int L = 0; L < 3; L++) {
        const dlc_msg *a = NULL;
        for (int i = 0; i < r.n; i++)
            if (r.a[i].type == DLC_SACT_SEND && r.a[i].msg.learner == L) a = &r.a[i].msg;
        CHECK(a && a->type == DLC_MSG_GRADIENT_AVG && a->version == 1);
        if (a) CHECK_NEAR(maxdiff_fd((const float *)(const void *)a->payload, want, n), 0, 1e-6);
    }
    /* step 2: every step void: no merge, each resynced at the run's step, 1 */
    for (int L = 0; L < 3; L++) {
        dlc_msg m = {.type = DLC_MSG_GRADIENT, .learner = L, .version = 2, .tokens = 0, .codec = DLC_CODEC_F32,
                     .payload = (const uint8_t *)zero, .len = (size_t)n * 4};
        CHECK(dlc_syncer_receive(s, &m, 2.0 + 0.1 * L) == DLC_OK);
        r = drain(s);
    }
    CHECK(count_type(&r, DLC_SACT_MERGED) == 0);
    for (int L = 0; L < 3; L++) {
        const dlc_msg *rs = sent_to(&r, L, 0);
        CHECK(rs && rs->type == DLC_MSG_FRAGMENT && (rs->flags & DLC_MSG_RESYNC) && rs->steps == 1);
    }
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_IDLE && dlc_syncer_round_count(s, 0) == 0);
    /* the step runs again: its round is step 2's */
    for (int L = 0; L < 3; L++) {
        dlc_msg m = {.type = DLC_MSG_GRADIENT, .learner = L, .version = 2, .tokens = 64, .codec = DLC_CODEC_F32,
                     .payload = (const uint8_t *)g[L], .len = (size_t)n * 4};
        CHECK(dlc_syncer_receive(s, &m, 3.0 + 0.1 * L) == DLC_OK);
        r = drain(s);
    }
    ma = find_type(&r, DLC_SACT_MERGED);
    CHECK(ma && ma->merge.version == 2 && ma->merge.count == 3);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* dp: one step's round of the three learners' gradients g[step % 6] (learner L's scaled
 * by L + 1); returns the actions of the last receive. */
static rec dp_round(dlc_syncer *s, int64_t step, float g[][NMAX], int64_t n, int learners) {
    rec r = {0};
    for (int L = 0; L < learners; L++) {
        dlc_msg m = {.type = DLC_MSG_GRADIENT, .learner = L, .version = step, .tokens = 64, .codec = DLC_CODEC_F32,
                     .payload = (const uint8_t *)g[step % 6], .len = (size_t)n * 4};
        CHECK(dlc_syncer_receive(s, &m, (double)step + 0.1 * L) == DLC_OK);
        r = drain(s);
    }
    return r;
}

/* Replay (syncer.h): the newest dp_history averages answer a REPLAY, to its sender alone,
 * in order from the step after the one asked, each stating the answer's last step; the
 * oldest give way; nothing after the step asked is answered with a resync at the run's
 * step; a learner that asked is not awaited until its next gradient; a REPLAY outside
 * data parallel is refused. */
static void test_dp_replay(void) {
    fx x;
    fx_make(&x, 1, 155);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, DLC_QUORUM_ALL, DLC_GRACE_OFF, 0);
    sp.dp = 1;
    sp.dp_history = -1;
    CHECK(dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p)) == NULL && strstr(dlc_last_error(), "dp_history = -1"));
    sp.dp_history = 3;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return fx_free(&x);
    float g[6][NMAX];
    for (int k = 0; k < 6; k++) randv(g[k], n, 1550 + (uint64_t)k, 1.0f);
    join_all(s, 3, 0);
    for (int64_t step = 1; step <= 4; step++) {
        rec r = dp_round(s, step, g, n, 3);
        CHECK(count_type(&r, DLC_SACT_MERGED) == 1);
    }
    /* learner 2 holds step 1: the history keeps 2..4 */
    dlc_msg q = {.type = DLC_MSG_REPLAY, .learner = 2, .version = 1};
    CHECK(dlc_syncer_receive(s, &q, 5.0) == DLC_OK);
    rec r = drain(s);
    CHECK(r.n == 3);
    for (int i = 0; i < r.n && i < 3; i++) {
        const dlc_msg *a = &r.a[i].msg;
        CHECK(r.a[i].type == DLC_SACT_SEND && a->type == DLC_MSG_GRADIENT_AVG && a->learner == 2 &&
              a->version == 2 + i && a->steps == 4 && a->len == (size_t)n * 4);
        /* the average of three copies of the same gradient is that gradient */
        double want[NMAX];
        for (int64_t j = 0; j < n; j++) want[j] = g[(2 + i) % 6][j];
        CHECK_NEAR(maxdiff_fd((const float *)(const void *)a->payload, want, n), 0, 1e-6);
    }
    /* step 5: learners 0 and 1 close it without learner 2, which is replaying */
    r = dp_round(s, 5, g, n, 2);
    const dlc_syncer_action *m5 = find_type(&r, DLC_SACT_MERGED);
    CHECK(m5 && m5->merge.version == 5 && m5->merge.count == 2 && count_type(&r, DLC_SACT_SEND) == 3);
    /* it asks past 4: 5 alone; the oldest kept is now 3, so asking after 0 starts there */
    q.version = 4;
    CHECK(dlc_syncer_receive(s, &q, 5.5) == DLC_OK);
    r = drain(s);
    CHECK(r.n == 1 && r.a[0].msg.version == 5 && r.a[0].msg.steps == 5);
    q.version = 0;
    CHECK(dlc_syncer_receive(s, &q, 5.6) == DLC_OK);
    r = drain(s);
    CHECK(r.n == 3 && r.a[0].msg.version == 3 && r.a[2].msg.version == 5 && r.a[0].msg.steps == 5);
    /* nothing after 5: the run's step, in a resync */
    q.version = 5;
    CHECK(dlc_syncer_receive(s, &q, 5.7) == DLC_OK);
    r = drain(s);
    CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_FRAGMENT && (r.a[0].msg.flags & DLC_MSG_RESYNC) &&
          r.a[0].msg.steps == 5 && r.a[0].msg.answers == 5 + 1); /* marked: the answer to REPLAY 5 */
    /* a round open when learner 2 asks closes at once without it */
    dlc_msg m = {.type = DLC_MSG_GRADIENT, .learner = 0, .version = 6, .tokens = 64, .codec = DLC_CODEC_F32,
                 .payload = (const uint8_t *)g[0], .len = (size_t)n * 4};
    CHECK(dlc_syncer_receive(s, &m, 6.0) == DLC_OK && drain(s).n == 0);
    m.learner = 2; /* its gradient of 6: caught up, awaited again */
    CHECK(dlc_syncer_receive(s, &m, 6.1) == DLC_OK && drain(s).n == 0);
    q.version = 4, q.learner = 1;
    CHECK(dlc_syncer_receive(s, &q, 6.2) == DLC_OK);
    r = drain(s);
    m5 = find_type(&r, DLC_SACT_MERGED);
    CHECK(m5 && m5->merge.version == 6 && m5->merge.count == 2);
    dlc_syncer_free(s);
    /* outside dp */
    sp = sgd_params(2, 1, DLC_GRACE_OFF, 0);
    s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (s) {
        join_all(s, 2, 0);
        q.learner = 0, q.version = 0;
        CHECK(dlc_syncer_receive(s, &q, 1.0) == DLC_ERR_FORMAT && strstr(dlc_last_error(), "replay request"));
        CHECK(drain(s).n == 0);
    }
    dlc_syncer_free(s);
    fx_free(&x);
}

/* The account (syncer.h): a learner that sends fragment 0 again from the same base before
 * a merge came back (a cut) carries the steps of both; each step counts once in the
 * merged steps and the useful tokens, a contribution from a newer base counts whole, and
 * a rejoin starts the records afresh. */
static void test_merged_once(void) {
    fx x;
    fx_make(&x, 2, 165);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(2, 1, DLC_GRACE_OFF, 0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return fx_free(&x);
    join_all(s, 2, 0);
    float d[NMAX];
    randv(d, n, 166, 0.01f);
    double useful = 0;
    const struct { int64_t base, steps, tokens; double new_steps, new_tokens; } c[] = {
        {0, 3, 30, 3, 30},  /* merged: version 1 */
        {0, 5, 50, 2, 20},  /* the same base again, 2 steps more: those alone */
        {1, 4, 40, 4, 40},  /* a newer base: whole */
        {1, 4, 40, 0, 0},   /* the same again (a duplicate): nothing new */
    };
    double steps = 0;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        dlc_msg m = contribution(0, 0, c[i].base, c[i].steps, c[i].tokens, d, n);
        CHECK(dlc_syncer_receive(s, &m, 1.0 + (double)i) == DLC_OK);
        rec r = drain(s);
        const dlc_syncer_action *a = find_type(&r, DLC_SACT_MERGED);
        CHECK(a && a->merge.count == 1);
        if (a) {
            CHECK_NEAR(a->merge.useful_tokens, c[i].new_tokens / 2, 1e-12); /* P = 2 */
            useful += a->merge.useful_tokens;
        }
        steps += c[i].new_steps / 2;
        CHECK_NEAR(dlc_syncer_merged_steps(s, 0), steps, 1e-12);
    }
    CHECK_NEAR(useful, 45, 1e-12);
    /* learner 0 restarts: its counters start again, so base 2 with 4 steps is whole */
    CHECK(dlc_syncer_lost(s, 0, 9) == DLC_OK && dlc_syncer_join(s, 0, 9) == DLC_OK);
    drain(s);
    dlc_msg m = contribution(0, 0, dlc_syncer_version(s, 0), 4, 40, d, n);
    CHECK(dlc_syncer_receive(s, &m, 10) == DLC_OK);
    rec r = drain(s);
    const dlc_syncer_action *a = find_type(&r, DLC_SACT_MERGED);
    CHECK(a && a->merge.useful_tokens == 20 && dlc_syncer_merged_steps(s, 0) == steps + 2);
    CHECK(dlc_syncer_merged_steps(s, 1) == 0 && dlc_syncer_merged_steps(s, 7) == 0);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* ---- refusals ---- */

static void test_refusals(void) {
    fx x;
    fx_make(&x, 1, 160);
    dlc_syncer_params sp = sgd_params(2, 1, DLC_GRACE_OFF, 0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    CHECK(dlc_syncer_join(s, 2, 0) == DLC_ERR_RANGE);
    CHECK(dlc_syncer_join(s, -1, 0) == DLC_ERR_RANGE);
    CHECK(dlc_syncer_lost(s, 5, 0) == DLC_ERR_RANGE);
    dlc_msg m = {.type = DLC_MSG_HEARTBEAT, .learner = 7};
    CHECK(dlc_syncer_receive(s, &m, 0) == DLC_ERR_FORMAT);
    CHECK(dlc_syncer_join(s, 0, 0) == DLC_OK);
    /* no silent loss: while the join's resync is unpolled every event is refused, naming
     * the count, and changes nothing; the queued action survives the refusals */
    CHECK(dlc_syncer_pending(s) == 1);
    m = (dlc_msg){.type = DLC_MSG_HEARTBEAT, .learner = 0, .steps = 9};
    CHECK(dlc_syncer_receive(s, &m, 0) == DLC_ERR_STATE);
    CHECK(strstr(dlc_last_error(), "syncer_receive: the syncer has 1 unpolled action:") != NULL);
    CHECK(dlc_syncer_join(s, 1, 0) == DLC_ERR_STATE && dlc_syncer_lost(s, 0, 0) == DLC_ERR_STATE);
    CHECK(dlc_syncer_handle_expiry(s, 0) == DLC_ERR_STATE && dlc_syncer_set_quorum(s, 1, 0) == DLC_ERR_STATE);
    CHECK(dlc_syncer_flush(s, 0) == DLC_ERR_STATE && dlc_syncer_restart(s, 0) == DLC_ERR_STATE);
    CHECK(dlc_syncer_live(s) == 1 && !dlc_syncer_is_live(s, 1) && dlc_syncer_pending(s) == 1);
    rec q = drain(s);
    CHECK(q.n == 1 && q.a[0].type == DLC_SACT_SEND && q.a[0].msg.learner == 0 && (q.a[0].msg.flags & DLC_MSG_RESYNC));
    CHECK(dlc_syncer_pending(s) == 0 && dlc_syncer_receive(s, &m, 0) == DLC_OK);
    m = (dlc_msg){.type = DLC_MSG_FRAGMENT, .learner = 0};
    CHECK(dlc_syncer_receive(s, &m, 0) == DLC_ERR_FORMAT); /* a syncer takes no fragments */
    dlc_syncer_params bad = sp;
    bad.quorum = 3;
    CHECK_PFAILS(dlc_syncer_new(&bad, x.plan, dlc_params_data(x.p)), DLC_ERR_ARG, "quorum = 3");
    bad = sp;
    bad.codec_down = DLC_CODEC_INT4;
    CHECK_PFAILS(dlc_syncer_new(&bad, x.plan, dlc_params_data(x.p)), DLC_ERR_ARG, "codec_down");
    bad = sp;
    bad.epoch = 0;
    CHECK_PFAILS(dlc_syncer_new(&bad, x.plan, dlc_params_data(x.p)), DLC_ERR_ARG, "epoch = 0: expected >= 1");
    CHECK(dlc_syncer_default_params().epoch == 1 && dlc_syncer_epoch(s) == 1);
    bad = sp;
    bad.epoch = 41;
    dlc_syncer *s41 = dlc_syncer_new(&bad, x.plan, dlc_params_data(x.p));
    CHECK(s41 && dlc_syncer_epoch(s41) == 41);
    dlc_syncer_free(s41);
    CHECK(strcmp(dlc_round_state_name(DLC_ROUND_GRACE), "grace") == 0 && !dlc_round_state_name(DLC_ROUND_STATE_COUNT));
    dlc_weighting w;
    CHECK(dlc_weighting_parse("tokens2_steps", &w) == DLC_OK && w == DLC_WEIGHT_TOKENS2_STEPS);
    CHECK(dlc_weighting_parse("tokens3", &w) == DLC_ERR_ARG);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* A round whose only contribution weighs 0 (tokens2_steps, no tokens) merges nothing and
 * sends the sender the current fragment back as a resync, so a blocking learner is not
 * left waiting for a merge that will not come. */
static void test_zero_weight(void) {
    fx x;
    fx_make(&x, 1, 60);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(2, 1, DLC_GRACE_OFF, 0);
    sp.weighting = DLC_WEIGHT_TOKENS2_STEPS;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    join_all(s, 2, 0);
    float d[NMAX], th0[NMAX];
    randv(d, n, 61, 0.1f);
    gather(&x, 0, dlc_params_data(x.p), th0);
    dlc_msg c = contribution(1, 0, 0, 3, 0, d, n);
    CHECK(dlc_syncer_receive(s, &c, 1.0) == DLC_OK);
    rec r = drain(s);
    CHECK(count_type(&r, DLC_SACT_MERGED) == 0);
    const dlc_msg *back = sent_to(&r, 1, 0);
    CHECK(back && (back->flags & DLC_MSG_RESYNC) && back->version == 0 && payload_is(back, th0, n));
    CHECK(sent_to(&r, 0, 0) == NULL);
    CHECK(dlc_syncer_version(s, 0) == 0 && dlc_syncer_round_state(s, 0) == DLC_ROUND_IDLE);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* A learner that joins during a round takes part from the next one: with K = every live
 * learner, the round learner 0 opened merges when learner 1 sends, not waiting for
 * learner 2 who joined meanwhile; learner 2's resync carries the run's schedule step (the
 * median of the others' heartbeats). */
static void test_join_during_round(void) {
    fx x;
    fx_make(&x, 1, 70);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(3, DLC_QUORUM_ALL, DLC_GRACE_OFF, 0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    join_all(s, 2, 0);
    dlc_msg hb = {.type = DLC_MSG_HEARTBEAT, .learner = 0, .steps = 40};
    CHECK(dlc_syncer_receive(s, &hb, 0.5) == DLC_OK);
    hb.learner = 1, hb.steps = 41;
    CHECK(dlc_syncer_receive(s, &hb, 0.5) == DLC_OK);
    float d0[NMAX], d1[NMAX];
    randv(d0, n, 71, 0.1f);
    randv(d1, n, 72, 0.1f);
    dlc_msg c = contribution(0, 0, 0, 8, 64, d0, n);
    CHECK(dlc_syncer_receive(s, &c, 1.0) == DLC_OK);
    drain(s);
    CHECK(dlc_syncer_join(s, 2, 2.0) == DLC_OK);
    rec r = drain(s);
    const dlc_msg *f = sent_to(&r, 2, 0);
    CHECK(f && (f->flags & DLC_MSG_RESYNC) && f->steps == 41);
    CHECK(dlc_syncer_round_state(s, 0) == DLC_ROUND_COLLECTING);
    c = contribution(1, 0, 0, 8, 64, d1, n);
    CHECK(dlc_syncer_receive(s, &c, 3.0) == DLC_OK);
    r = drain(s);
    const dlc_syncer_action *mg = find_type(&r, DLC_SACT_MERGED);
    CHECK(mg && mg->merge.count == 2 && mg->merge.all_sent && mg->merge.quorum == 2 && mg->merge.live == 3);
    CHECK(sent_to(&r, 2, 0) != NULL); /* the merge goes to the newcomer too */
    /* the next round expects all three */
    c = contribution(0, 0, 1, 8, 64, d0, n);
    CHECK(dlc_syncer_receive(s, &c, 4.0) == DLC_OK);
    c = contribution(1, 0, 1, 8, 64, d1, n);
    CHECK(dlc_syncer_receive(s, &c, 4.0) == DLC_OK);
    r = drain(s);
    CHECK(count_type(&r, DLC_SACT_MERGED) == 0 && dlc_syncer_round_count(s, 0) == 2);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* A learner that rejoins after every other one has left (finished, or lost) takes the
 * furthest step they reported, not 0: restarted after the others finished, it must not
 * start the run's schedule over alone. */
static void test_join_after_the_others_left(void) {
    fx x;
    fx_make(&x, 1, 73);
    dlc_syncer_params sp = sgd_params(3, 1, DLC_GRACE_OFF, 0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    join_all(s, 3, 0);
    dlc_msg hb = {.type = DLC_MSG_HEARTBEAT, .learner = 0, .steps = 200};
    CHECK(dlc_syncer_receive(s, &hb, 0.5) == DLC_OK);
    hb.learner = 1, hb.steps = 198;
    CHECK(dlc_syncer_receive(s, &hb, 0.5) == DLC_OK);
    hb.learner = 2, hb.steps = 120;
    CHECK(dlc_syncer_receive(s, &hb, 0.5) == DLC_OK);
    drain(s);
    CHECK(dlc_syncer_lost(s, 2, 1.0) == DLC_OK); /* killed at 120 */
    CHECK(dlc_syncer_lost(s, 0, 2.0) == DLC_OK); /* finished */
    CHECK(dlc_syncer_lost(s, 1, 2.0) == DLC_OK);
    drain(s);
    CHECK(dlc_syncer_join(s, 2, 3.0) == DLC_OK);
    rec r = drain(s);
    const dlc_msg *f = sent_to(&r, 2, 0);
    CHECK(f && (f->flags & DLC_MSG_RESYNC) && f->steps == 200);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* Hostile messages, one at a time: each is refused with DLC_ERR_FORMAT naming what was
 * wrong, changes no round, and the syncer then still merges a valid contribution. */
static void test_hostile(void) {
    fx x;
    fx_make(&x, 1, 170);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(2, 2, DLC_GRACE_OFF, 0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    join_all(s, 2, 0);
    float d[NMAX], bad[NMAX];
    randv(d, n, 171, 0.1f);
    memcpy(bad, d, sizeof bad);
    bad[n / 2] = NAN;
    struct {
        dlc_msg m;
        const char *says;
    } cases[] = {
        {{.type = DLC_MSG_TYPE_COUNT + 3, .learner = 0}, "(unknown)"},
        {{.type = DLC_MSG_FRAGMENT, .learner = 1}, "fragment message"},
        {{.type = DLC_MSG_GRADIENT_AVG, .learner = 1}, "gradient_avg message"},
        /* texts name learners by number, index + 1 */
        {{.type = DLC_MSG_HEARTBEAT, .learner = 2}, "learner 3: expected 1..2"},
        {{.type = DLC_MSG_HEARTBEAT, .learner = -1}, "learner 0: expected 1..2"},
        {{.type = DLC_MSG_GRADIENT, .learner = 0, .codec = DLC_CODEC_F32, .payload = (const uint8_t *)d,
          .len = (size_t)n * 4},
         "gradient from learner 1 in a DiLoCo run"},
        {contribution(0, 5, 0, 3, 30, d, n), "fragment 5"},
        {contribution(0, 0, 0, -3, 30, d, n), "steps -3"},
        {contribution(0, 0, 0, 3, -30, d, n), "tokens -30"},
        {{.type = DLC_MSG_CONTRIBUTION, .learner = 0, .steps = 3, .tokens = 30, .codec = DLC_CODEC_INT4,
          .payload = (const uint8_t *)d, .len = (size_t)n * 4},
         "int4"},
        {{.type = DLC_MSG_CONTRIBUTION, .learner = 0, .steps = 3, .tokens = 30, .codec = DLC_CODEC_F32, .payload = NULL,
          .len = (size_t)n * 4},
         "contribution from learner 1"},
        {contribution(1, 0, 0, 3, 30, bad, n), "nan"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(dlc_syncer_receive(s, &cases[i].m, 1.0) == DLC_ERR_FORMAT);
        if (!strstr(dlc_last_error(), cases[i].says))
            fprintf(stderr, "case %zu: \"%s\" does not say \"%s\"\n", i, dlc_last_error(), cases[i].says);
        CHECK(strstr(dlc_last_error(), cases[i].says) != NULL);
        drain(s);
        CHECK(dlc_syncer_round_count(s, 0) == 0 && dlc_syncer_version(s, 0) == 0 && dlc_syncer_live(s) == 2);
    }
    dlc_msg c = contribution(0, 0, 0, 3, 30, d, n);
    CHECK(dlc_syncer_receive(s, &c, 2.0) == DLC_OK);
    c = contribution(1, 0, 0, 3, 30, d, n);
    CHECK(dlc_syncer_receive(s, &c, 2.0) == DLC_OK);
    rec r = drain(s);
    CHECK(count_type(&r, DLC_SACT_MERGED) == 1 && dlc_syncer_version(s, 0) == 1);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* A refused message changes nothing, not even when its sender was last heard from or the
 * step and transit times it reports: a malformed, a non-finite and an unknown message
 * leave the liveness deadline and the estimates alone; a valid heartbeat moves them. */
static void test_refused_not_heard(void) {
    fx x;
    fx_make(&x, 1, 175);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(2, 2, DLC_GRACE_OFF, 0);
    sp.timeout = 10;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    join_all(s, 2, 0);
    float d[NMAX];
    randv(d, n, 176, 0.1f);
    dlc_msg bad[3] = {contribution(0, 0, 0, 3, 30, d, n - 1), contribution(0, 0, 0, 3, 30, d, n),
                      {.type = DLC_MSG_TYPE_COUNT + 1, .learner = 0}};
    d[1] = NAN;
    for (int i = 0; i < 3; i++) {
        bad[i].step_time = 7, bad[i].transit = 3;
        CHECK(dlc_syncer_receive(s, &bad[i], 5.0 + i) == DLC_ERR_FORMAT);
        drain(s);
        double step = -1, q = -1, sync = -1;
        dlc_syncer_estimates(s, &step, &q, &sync);
        CHECK(step == 0 && sync == 0 && dlc_syncer_expiry(s) == 10.0);
    }
    dlc_msg hb = {.type = DLC_MSG_HEARTBEAT, .learner = 0, .steps = 4, .step_time = 2, .transit = 0.5};
    CHECK(dlc_syncer_receive(s, &hb, 8.0) == DLC_OK && drain(s).n == 0);
    hb.learner = 1;
    CHECK(dlc_syncer_receive(s, &hb, 9.0) == DLC_OK && drain(s).n == 0);
    double step = -1, q = -1, sync = -1;
    dlc_syncer_estimates(s, &step, &q, &sync);
    CHECK(step == 2 && sync == 0.5 && dlc_syncer_expiry(s) == 18.0);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* Blocking with two fragments: a learner that rejoins is awaited in a fragment's round
 * only once it has sent that fragment again (it may reach the other one first, whose round
 * the others, blocked here, would never come to); without blocking, as before. */
static void test_blocking_rejoin(void) {
    for (int blocking = 0; blocking <= 1; blocking++) {
        fx x;
        fx_make(&x, 2, 95);
        int64_t n0 = dlc_plan_numel(x.plan, 0), n1 = dlc_plan_numel(x.plan, 1);
        dlc_syncer_params sp = sgd_params(2, DLC_QUORUM_ALL, DLC_GRACE_OFF, 0);
        sp.blocking = blocking;
        dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
        CHECK_OK(s);
        if (!s) {
            fx_free(&x);
            return;
        }
        float d[NMAX];
        randv(d, n0 > n1 ? n0 : n1, 950, 0.1f);
        join_all(s, 2, 0);
        drain(s);
        /* learner 1 goes and comes back */
        CHECK(dlc_syncer_lost(s, 1, 1.0) == DLC_OK && dlc_syncer_join(s, 1, 2.0) == DLC_OK);
        drain(s);
        /* learner 0 sends fragment 0: blocking, the round merges at once (learner 1 has not
         * sent fragment 0 since it came back); without blocking it waits for learner 1 */
        dlc_msg m = contribution(0, 0, 0, 4, 40, d, n0);
        CHECK(dlc_syncer_receive(s, &m, 3.0) == DLC_OK);
        rec r = drain(s);
        const dlc_syncer_action *ma = find_type(&r, DLC_SACT_MERGED);
        if (blocking) CHECK(ma && ma->merge.count == 1 && ma->merge.quorum == 1 && ma->merge.live == 2);
        else CHECK(!ma && dlc_syncer_round_state(s, 0) == DLC_ROUND_COLLECTING);
        /* learner 1 sends fragment 1 (its schedule reached it first): it opens that round,
         * which, learner 0 having sent fragment 1 since the start, waits for learner 0 */
        m = contribution(1, 1, 0, 4, 40, d, n1);
        CHECK(dlc_syncer_receive(s, &m, 4.0) == DLC_OK);
        CHECK(!find_type((r = drain(s), &r), DLC_SACT_MERGED) && dlc_syncer_round_state(s, 1) == DLC_ROUND_COLLECTING);
        if (blocking) {
            /* and once learner 1 has sent fragment 0 again, a round of it waits for both */
            m = contribution(1, 0, 1, 4, 40, d, n0);
            CHECK(dlc_syncer_receive(s, &m, 5.0) == DLC_OK);
            CHECK(!find_type((r = drain(s), &r), DLC_SACT_MERGED) && dlc_syncer_round_state(s, 0) == DLC_ROUND_COLLECTING);
            m = contribution(0, 0, 1, 4, 40, d, n0);
            CHECK(dlc_syncer_receive(s, &m, 6.0) == DLC_OK);
            r = drain(s);
            ma = find_type(&r, DLC_SACT_MERGED);
            CHECK(ma && ma->merge.fragment == 0 && ma->merge.count == 2);
        }
        dlc_syncer_free(s);
        fx_free(&x);
    }
}

/* ---- fencing: incarnations and epochs (syncer.h) ---- */

static dlc_msg heartbeat_msg(int L, int64_t epoch, int64_t inc) {
    return (dlc_msg){.type = DLC_MSG_HEARTBEAT, .learner = L, .steps = 1, .codec = DLC_CODEC_F32, .epoch = epoch,
                     .incarnation = inc};
}

/* The full model went to learner m: one RESYNC per fragment, stamped (epoch, inc). */
static int resynced(const rec *r, int m, int P, int64_t epoch, int64_t inc) {
    int k = 0;
    for (int p = 0; p < P; p++) {
        const dlc_msg *f = sent_to(r, m, p);
        k += f && (f->flags & DLC_MSG_RESYNC) && f->epoch == epoch && f->incarnation == inc;
    }
    return k == P;
}

/* A newer incarnation rejoins (full resync); a contribution from the older one after
 * that is refused, not merged, and the learner is resynced; the current one merges. */
static void test_fence_incarnation(void) {
    fx x;
    fx_make(&x, 2, 140);
    int64_t n0 = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(2, 2, DLC_GRACE_OFF, 0);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    float d[NMAX];
    randv(d, n0, 1400, 0.1f);
    join_all(s, 2, 0);
    CHECK(dlc_syncer_incarnation(s, 0) == 0 && dlc_syncer_epoch(s) == 1);
    /* after the join, the first stamped message tells the incarnation: taken, nothing sent */
    dlc_msg h = heartbeat_msg(0, 1, 1);
    CHECK(dlc_syncer_receive(s, &h, 1) == DLC_OK && drain(s).n == 0 && dlc_syncer_incarnation(s, 0) == 1);
    h = heartbeat_msg(1, 1, 1);
    CHECK(dlc_syncer_receive(s, &h, 1) == DLC_OK && drain(s).n == 0);
    /* learner 1's contribution opens a round */
    dlc_msg c = contribution(1, 0, 0, 4, 40, d, n0);
    c.epoch = 1, c.incarnation = 1;
    CHECK(dlc_syncer_receive(s, &c, 2) == DLC_OK && drain(s).n == 0 && dlc_syncer_round_count(s, 0) == 1);
    /* learner 0 restarted (incarnation 2) before the syncer saw it go: a rejoin */
    h = heartbeat_msg(0, 1, 2);
    CHECK(dlc_syncer_receive(s, &h, 3) == DLC_OK);
    rec r = drain(s);
    const dlc_syncer_action *j = find_type(&r, DLC_SACT_JOINED);
    CHECK(j && j->learner == 0 && count_type(&r, DLC_SACT_SEND) == 2 && resynced(&r, 0, 2, 1, 2));
    CHECK(dlc_syncer_incarnation(s, 0) == 2 && dlc_syncer_is_live(s, 0) && dlc_syncer_live(s) == 2);
    /* a contribution of incarnation 1 (the previous process, still talking): refused */
    c = contribution(0, 0, 0, 4, 40, d, n0);
    c.epoch = 1, c.incarnation = 1;
    CHECK(dlc_syncer_receive(s, &c, 4) == DLC_ERR_FORMAT);
    CHECK(strstr(dlc_last_error(), "of incarnation 1, but learner 1 is incarnation 2") &&
          strstr(dlc_last_error(), "not merged"));
    r = drain(s);
    const dlc_syncer_action *ra = find_type(&r, DLC_SACT_REJECTED);
    CHECK(ra && ra->learner == 0 && ra->fragment == 0 && ra->reason == DLC_REJECT_INCARNATION);
    CHECK(strcmp(dlc_reject_reason_name(DLC_REJECT_INCARNATION), "incarnation") == 0);
    CHECK(resynced(&r, 0, 2, 1, 2) && count_type(&r, DLC_SACT_MERGED) == 0);
    CHECK(dlc_syncer_round_count(s, 0) == 1 && dlc_syncer_version(s, 0) == 0);
    /* its heartbeat and BYE are refused too, without a second resync; the BYE does not
     * drop the current learner */
    h = heartbeat_msg(0, 1, 1);
    CHECK(dlc_syncer_receive(s, &h, 4.5) == DLC_ERR_FORMAT && drain(s).n == 0);
    dlc_msg bye = {.type = DLC_MSG_BYE, .learner = 0, .epoch = 1, .incarnation = 1};
    CHECK(dlc_syncer_receive(s, &bye, 4.6) == DLC_ERR_FORMAT && drain(s).n == 0 && dlc_syncer_is_live(s, 0));
    /* incarnation 2's contribution completes the round: merged, both contributors */
    c.incarnation = 2;
    CHECK(dlc_syncer_receive(s, &c, 5) == DLC_OK);
    r = drain(s);
    const dlc_syncer_action *mg = find_type(&r, DLC_SACT_MERGED);
    CHECK(mg && mg->merge.count == 2 && dlc_syncer_version(s, 0) == 1);
    const dlc_msg *f = sent_to(&r, 0, 0);
    CHECK(f && f->flags == 0 && f->epoch == 1 && f->incarnation == 2);
    /* unstamped messages are not fenced */
    h = heartbeat_msg(0, 0, 0);
    CHECK(dlc_syncer_receive(s, &h, 6) == DLC_OK && drain(s).n == 0 && dlc_syncer_incarnation(s, 0) == 2);
    /* a driver's join: the next incarnation is taken without a second resync */
    CHECK(dlc_syncer_join(s, 1, 7) == DLC_OK);
    r = drain(s);
    CHECK(resynced(&r, 1, 2, 1, 0));
    h = heartbeat_msg(1, 1, 5);
    CHECK(dlc_syncer_receive(s, &h, 8) == DLC_OK && drain(s).n == 0 && dlc_syncer_incarnation(s, 1) == 5);
    /* ... but an older one stays refused after it */
    h = heartbeat_msg(1, 1, 4);
    CHECK(dlc_syncer_receive(s, &h, 9) == DLC_ERR_FORMAT);
    drain(s);
    /* a lost learner's stale incarnation does not make it join again */
    CHECK(dlc_syncer_lost(s, 1, 10) == DLC_OK);
    drain(s);
    CHECK(dlc_syncer_receive(s, &h, 11) == DLC_ERR_FORMAT && drain(s).n == 0 && !dlc_syncer_is_live(s, 1));
    h.incarnation = 5;
    CHECK(dlc_syncer_receive(s, &h, 12) == DLC_OK && dlc_syncer_is_live(s, 1));
    r = drain(s);
    CHECK(find_type(&r, DLC_SACT_JOINED) && resynced(&r, 1, 2, 1, 5));
    dlc_syncer_free(s);
    fx_free(&x);
}

/* A syncer restarted as a new process runs epoch 2: a contribution stamped with epoch 1
 * (computed against the previous syncer) is refused, not merged, and triggers a resync
 * stamped 2; once the learner stamps 2 it merges. */
static void test_fence_epoch(void) {
    fx x;
    fx_make(&x, 2, 150);
    int64_t n0 = dlc_plan_numel(x.plan, 0);
    dlc_syncer_params sp = sgd_params(2, 1, DLC_GRACE_OFF, 0);
    sp.epoch = 0;
    CHECK(dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p)) == NULL && strstr(dlc_last_error(), "epoch = 0"));
    sp.epoch = 2;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    CHECK(dlc_syncer_epoch(s) == 2 && dlc_syncer_default_params().epoch == 1);
    float d[NMAX];
    randv(d, n0, 1500, 0.1f);
    join_all(s, 2, 0);
    dlc_msg c = contribution(1, 0, 0, 4, 40, d, n0);
    c.epoch = 1, c.incarnation = 1;
    CHECK(dlc_syncer_receive(s, &c, 1) == DLC_ERR_FORMAT);
    CHECK(strstr(dlc_last_error(), "stamped epoch 1, but this syncer is epoch 2"));
    rec r = drain(s);
    const dlc_syncer_action *ra = find_type(&r, DLC_SACT_REJECTED);
    CHECK(ra && ra->learner == 1 && ra->fragment == 0 && ra->reason == DLC_REJECT_EPOCH);
    CHECK(resynced(&r, 1, 2, 2, 0) && count_type(&r, DLC_SACT_MERGED) == 0);
    CHECK(dlc_syncer_round_count(s, 0) == 0 && dlc_syncer_version(s, 0) == 0);
    /* a later epoch than the syncer's (it is the stale one) is refused as well; the
     * learner, resynced already, is not resynced again until it is heard right */
    c.epoch = 3;
    CHECK(dlc_syncer_receive(s, &c, 1.5) == DLC_ERR_FORMAT && strstr(dlc_last_error(), "stamped epoch 3"));
    r = drain(s);
    CHECK(count_type(&r, DLC_SACT_REJECTED) == 1 && count_type(&r, DLC_SACT_SEND) == 0);
    /* stamped with this epoch: merged at once (K = 1, grace off) */
    c.epoch = 2;
    CHECK(dlc_syncer_receive(s, &c, 2) == DLC_OK);
    r = drain(s);
    CHECK(find_type(&r, DLC_SACT_MERGED) && dlc_syncer_version(s, 0) == 1);
    const dlc_msg *f = sent_to(&r, 0, 0);
    CHECK(f && f->epoch == 2 && f->incarnation == 0); /* learner 0 has not stamped yet */
    f = sent_to(&r, 1, 0);
    CHECK(f && f->epoch == 2 && f->incarnation == 1);
    /* heard right once: a stale message resyncs it again */
    dlc_msg h = heartbeat_msg(1, 1, 1);
    CHECK(dlc_syncer_receive(s, &h, 3) == DLC_ERR_FORMAT);
    r = drain(s);
    CHECK(resynced(&r, 1, 2, 2, 1) && find_type(&r, DLC_SACT_REJECTED) == NULL);
    dlc_syncer_free(s);
    fx_free(&x);
}

int main(void) {
    test_payload_owner();
    test_plain_averaging();
    test_quorum_grace_late();
    test_grace_cut_short();
    test_adaptive_grace();
    test_duplicate();
    test_stale();
    test_nonfinite();
    test_malformed();
    test_join();
    test_join_during_round();
    test_join_after_the_others_left();
    test_lost();
    test_blocking_rejoin();
    test_timeout_rejoin();
    test_weighting(DLC_WEIGHT_TOKENS2_STEPS);
    test_weighting(DLC_WEIGHT_TOKENS);
    test_rda_identical();
    test_restart();
    test_flush_and_quorum();
    test_manual();
    test_dp();
    test_dp_void();
    test_dp_replay();
    test_merged_once();
    test_zero_weight();
    test_hostile();
    test_refused_not_heard();
    test_refusals();
    test_fence_incarnation();
    test_fence_epoch();
    return check_done("test_syncer");
}
