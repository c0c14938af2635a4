/* test_learner.c - the learner state machine (learner.h) driven by scripted events, every
 * action checked: the staggered schedule (P = 4, H = 8) with base versions and counters;
 * the contribution payload Θ̂ − θ bit for bit (f32); receive only stashing a fragment (the
 * arena written at step boundaries: step_done, step_begin); a merged fragment held until
 * τ steps after sending, then mixed with α = 0.5; late arrivals applied at the next
 * boundary, the newest of several once; a resync taken whole at the next boundary; older
 * versions ignored; malformed fragments refused with nothing changed; blocking (WAITING
 * until the fragment is back, applied by step_begin); no silent loss (every event
 * refused while actions are unpolled); joining and restart (full model, zeroed counters); data parallel
 * gradients; an int4 contribution within its codec bound; the DLC_ERR_STATE refusals and
 * dlc_assert_fail aborting (in a forked child).  End to end: 3 learners and a syncer
 * stepped by hand with a fake inner step and zero-latency delivery, decoupled settings
 * (K = all, grace off, P = 1, τ = 0, uniform, mean) against diloco (blocking) after 5
 * rounds, bit for bit; and dp through the syncer.  Rollback: a poisoned arena back to
 * each fragment's last global value (a stashed merge taken whole), counters restarted,
 * sends left outstanding, error feedback zeroed; blocking, dp and the refusals.  The
 * step's reads (dlc_learner_step_reads): an arena holding only the named fragments (the
 * rest NaN) sends and applies exactly what a whole one does.  A model bound to the
 * host's own tensors (dlc_learner_bind_tensors) behaves bit for bit as one on the arena,
 * which it never touches; merges lent in the driver's buffers (dlc_learner_receive_lent)
 * apply bit for bit as copied ones, each buffer let go once applied or replaced. */
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"
#include "check_fx.h"
#include "diloco/learner.h"
#include "diloco/syncer.h"

static void scatter(const fx *x, int p, const float *in, float *arena) {
    int nv;
    const dlc_frag_view *v = dlc_plan_views(x->plan, p, &nv);
    for (int j = 0; j < nv; j++) {
        memcpy(arena + v[j].offset, in, (size_t)v[j].numel * sizeof(float));
        in += v[j].numel;
    }
}

/* The fake inner step θ -= 0.01·(θ − target), over every tensor (not the padding). */
static void inner_step(dlc_params *p, const float *target) {
    float *th = dlc_params_data(p);
    for (int k = 0; k < dlc_params_count(p); k++) {
        int64_t o = dlc_params_offset(p, k), n = dlc_params_tensor(p, k)->numel;
        for (int64_t i = o; i < o + n; i++) th[i] -= 0.01f * (th[i] - target[i]);
    }
}

static dlc_msg fragment_msg(int L, int p, int64_t version, uint32_t flags, const float *v, int64_t n) {
    return (dlc_msg){.type = DLC_MSG_FRAGMENT, .learner = L, .fragment = p, .version = version, .flags = flags,
                     .codec = DLC_CODEC_F32, .payload = (const uint8_t *)v, .len = (size_t)n * sizeof(float)};
}

typedef struct lrec {
    int n;
    dlc_learner_action a[32];
} lrec;

static lrec drain(dlc_learner *l) {
    lrec r;
    r.n = 0;
    while (r.n < 32 && dlc_learner_poll(l, &r.a[r.n])) r.n++;
    return r;
}

static const dlc_learner_action *find(const lrec *r, dlc_learner_action_type t, int p) {
    for (int i = 0; i < r->n; i++)
        if (r->a[i].type == t && (t != DLC_LACT_APPLIED || r->a[i].fragment == p) &&
            (t != DLC_LACT_SEND || r->a[i].msg.fragment == p))
            return &r->a[i];
    return NULL;
}

/* Delivers the whole model in the arena `model` as P RESYNC fragments of `version`. */
static void resync(const fx *x, dlc_learner *l, const float *model, int64_t version, double now) {
    for (int p = 0; p < dlc_plan_count(x->plan); p++) {
        float v[NMAX];
        gather(x, p, model, v);
        dlc_msg m = fragment_msg(dlc_learner_id(l), p, version, DLC_MSG_RESYNC, v, dlc_plan_numel(x->plan, p));
        CHECK(dlc_learner_receive(l, &m, now) == DLC_OK);
        lrec r = drain(l);
        CHECK(r.n == 1 && r.a[0].type == DLC_LACT_APPLIED && r.a[0].resync == 1 && r.a[0].fragment == p &&
              r.a[0].version == version);
    }
}

static dlc_learner_params lparams(int id, int H, int tau, double alpha, int blocking) {
    dlc_learner_params lp = dlc_learner_default_params();
    lp.id = id, lp.H = H, lp.tau = tau, lp.alpha = alpha, lp.blocking = blocking;
    lp.heartbeat = 0;
    return lp;
}

/* ---- schedule and contributions ---- */

static void test_schedule(void) {
    fx x;
    fx_make(&x, 4, 10);
    CHECK(dlc_plan_count(x.plan) == 4);
    dlc_learner_params lp = lparams(1, 8, 2, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    int64_t size = dlc_params_size(x.p);
    float *theta0 = malloc((size_t)size * sizeof(float)), *target = malloc((size_t)size * sizeof(float));
    memcpy(theta0, dlc_params_data(x.p), (size_t)size * sizeof(float));
    randv(target, size, 11, 1.0f);
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_JOINING);
    resync(&x, l, theta0, 0, 0);
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    /* fragment p is due after step t >= off_p with (t − off_p) mod 8 == 0, off_p = 2p */
    for (int t = 1; t <= 16; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 10, 0.5, t) == DLC_OK);
        lrec r = drain(l);
        int sent = 0;
        for (int p = 0; p < 4; p++) {
            int off = p * 8 / 4, want = t >= off && (t - off) % 8 == 0;
            const dlc_learner_action *a = find(&r, DLC_LACT_SEND, p);
            CHECK((a != NULL) == want);
            if (!a) continue;
            sent++;
            const dlc_msg *m = &a->msg;
            CHECK(m->type == DLC_MSG_CONTRIBUTION && m->learner == 1 && m->fragment == p && m->version == 0);
            CHECK(m->steps == t && m->tokens == 10 * t); /* nothing came back: since the join */
            CHECK(m->codec == DLC_CODEC_F32 && m->step_time == 0.5);
            /* payload = Θ̂ − θ, exactly */
            int64_t n = dlc_plan_numel(x.plan, p);
            float hat[NMAX], th[NMAX], want_d[NMAX];
            gather(&x, p, theta0, hat);
            gather(&x, p, dlc_params_data(x.p), th);
            for (int64_t i = 0; i < n; i++) want_d[i] = hat[i] - th[i];
            CHECK(m->len == (size_t)n * 4 && memcmp(m->payload, want_d, (size_t)n * 4) == 0);
        }
        CHECK(r.n == sent);
        CHECK(dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    }
    CHECK(dlc_learner_steps(l) == 16 && dlc_learner_tokens(l) == 160);
    for (int p = 0; p < 4; p++)
        CHECK(dlc_learner_fragment_steps(l, p) == 16 && dlc_learner_fragment_tokens(l, p) == 160 &&
              dlc_learner_base_version(l, p) == 0);
    /* H = 0: the built-in schedule is off; contribute() sends on demand */
    dlc_learner_free(l);
    lp.H = 0, lp.tau = 0;
    l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (l) {
        resync(&x, l, theta0, 3, 0);
        for (int t = 1; t <= 9; t++) {
            CHECK(dlc_learner_step_done(l, 1, 0, t) == DLC_OK);
            CHECK(drain(l).n == 0);
        }
        CHECK(dlc_learner_contribute(l, 2, 10) == DLC_OK);
        lrec r = drain(l);
        CHECK(r.n == 1 && r.a[0].msg.fragment == 2 && r.a[0].msg.version == 3 && r.a[0].msg.steps == 9);
        CHECK(dlc_learner_contribute(l, 4, 10) == DLC_ERR_RANGE);
        dlc_learner_free(l);
    }
    free(theta0);
    free(target);
    fx_free(&x);
}

/* The final flush (dlc_learner_flush): every fragment trained since its last apply with
 * no contribution in flight is sent, with its steps and tokens since that apply; one in
 * flight is not sent again (its base has not moved: its steps would be merged twice);
 * once its merge is applied, what was trained after it is sent; nothing trained, nothing
 * sent; not in dp. */
static void test_flush(void) {
    fx x;
    fx_make(&x, 4, 12);
    dlc_learner_params lp = lparams(0, 8, 2, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    int64_t size = dlc_params_size(x.p);
    float *theta0 = malloc((size_t)size * sizeof(float)), *target = malloc((size_t)size * sizeof(float));
    memcpy(theta0, dlc_params_data(x.p), (size_t)size * sizeof(float));
    randv(target, size, 13, 1.0f);
    resync(&x, l, theta0, 0, 0);
    int sent = -1;
    CHECK(dlc_learner_flush(l, 0.5, &sent) == DLC_OK && sent == 0 && drain(l).n == 0); /* nothing trained */
    /* steps 1..3: fragment 0 is due after step 0 + 8k (not yet), fragment 1 after 2 */
    for (int t = 1; t <= 3; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 10, 0.5, t) == DLC_OK);
        lrec r = drain(l);
        CHECK(r.n == (t == 2));
    }
    /* fragment 1 is in flight: the flush sends 0, 2 and 3, each with its 3 steps */
    CHECK(dlc_learner_flush(l, 3.5, &sent) == DLC_OK && sent == 3);
    lrec r = drain(l);
    CHECK(r.n == 3 && !find(&r, DLC_LACT_SEND, 1));
    for (int p = 0; p < 4; p++) {
        const dlc_learner_action *a = find(&r, DLC_LACT_SEND, p);
        if (a) CHECK(a->msg.type == DLC_MSG_CONTRIBUTION && a->msg.steps == 3 && a->msg.tokens == 30 && a->msg.version == 0);
    }
    /* all four in flight now: nothing more */
    CHECK(dlc_learner_flush(l, 3.6, &sent) == DLC_OK && sent == 0 && drain(l).n == 0);
    /* fragment 1's merge comes back and is applied (τ = 2 steps after its send at 2) */
    float v[NMAX];
    gather(&x, 1, theta0, v);
    dlc_msg m = fragment_msg(0, 1, 1, 0, v, dlc_plan_numel(x.plan, 1));
    CHECK(dlc_learner_receive(l, &m, 3.7) == DLC_OK);
    inner_step(x.p, target);
    CHECK(dlc_learner_step_done(l, 10, 0.5, 4) == DLC_OK);
    r = drain(l);
    CHECK(find(&r, DLC_LACT_APPLIED, 1) != NULL);
    CHECK(dlc_learner_flush(l, 4.5, &sent) == DLC_OK && sent == 0); /* applied at step 4: nothing trained since */
    inner_step(x.p, target);
    CHECK(dlc_learner_step_done(l, 10, 0.5, 5) == DLC_OK);
    drain(l);
    CHECK(dlc_learner_flush(l, 5.5, &sent) == DLC_OK && sent == 1);
    r = drain(l);
    CHECK(r.n == 1 && r.a[0].msg.fragment == 1 && r.a[0].msg.steps == 1 && r.a[0].msg.version == 1);
    dlc_learner_free(l);
    /* dp has no fragments to flush */
    lp.dp = 1;
    fx_free(&x);
    fx_make(&x, 1, 14);
    l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (l) {
        resync(&x, l, dlc_params_data(x.p), 0, 0);
        CHECK(dlc_learner_flush(l, 1.0, &sent) == DLC_ERR_STATE && strstr(dlc_last_error(), "data parallel"));
        dlc_learner_free(l);
    }
    free(theta0);
    free(target);
    fx_free(&x);
}

/* A merge arriving before τ steps is held; applied at the step boundary τ steps after
 * sending (lag τ) with θ = α·θ + (1 − α)·Θ; late ones at once; older ones ignored;
 * malformed ones refused with nothing changed. */
static void test_apply(void) {
    fx x;
    fx_make(&x, 4, 20);
    dlc_learner_params lp = lparams(0, 8, 2, 0.5, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    int64_t size = dlc_params_size(x.p);
    float *theta0 = malloc((size_t)size * 4), *target = malloc((size_t)size * 4), *snap = malloc((size_t)size * 4);
    memcpy(theta0, dlc_params_data(x.p), (size_t)size * 4);
    randv(target, size, 21, 1.0f);
    resync(&x, l, theta0, 0, 0);
    int64_t n1 = dlc_plan_numel(x.plan, 1), n2 = dlc_plan_numel(x.plan, 2);
    float g1[NMAX], g2[NMAX];
    randv(g1, n1, 22, 1.0f);
    randv(g2, n2, 23, 1.0f);
    for (int t = 1; t <= 2; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 5, 0, t) == DLC_OK);
    }
    lrec r = drain(l);
    CHECK(find(&r, DLC_LACT_SEND, 1) != NULL); /* fragment 1 left after step 2 */
    /* its merge (version 1) comes back at once: held */
    memcpy(snap, dlc_params_data(x.p), (size_t)size * 4);
    dlc_msg m = fragment_msg(0, 1, 1, 0, g1, n1);
    m.held = 0.04;
    CHECK(dlc_learner_receive(l, &m, 2.1) == DLC_OK);
    CHECK(drain(l).n == 0);
    CHECK(memcmp(snap, dlc_params_data(x.p), (size_t)size * 4) == 0);
    CHECK(dlc_learner_base_version(l, 1) == 0);
    /* malformed: wrong size, wrong codec, fragment out of range; nothing changes */
    m = fragment_msg(0, 1, 2, 0, g1, n1 - 1);
    CHECK(dlc_learner_receive(l, &m, 2.2) == DLC_ERR_FORMAT);
    m = fragment_msg(0, 1, 2, 0, g1, n1);
    m.codec = DLC_CODEC_INT8;
    CHECK(dlc_learner_receive(l, &m, 2.2) == DLC_ERR_FORMAT);
    m = fragment_msg(0, 4, 2, 0, g1, n1);
    CHECK(dlc_learner_receive(l, &m, 2.2) == DLC_ERR_FORMAT);
    m = fragment_msg(0, 1, 2, DLC_MSG_RESYNC, g1, n1 + 1); /* even a resync */
    CHECK(dlc_learner_receive(l, &m, 2.2) == DLC_ERR_FORMAT);
    CHECK(drain(l).n == 0);
    CHECK(memcmp(snap, dlc_params_data(x.p), (size_t)size * 4) == 0);
    CHECK(dlc_learner_base_version(l, 1) == 0);
    /* step 3: lag 1 < τ, still held */
    inner_step(x.p, target);
    CHECK(dlc_learner_step_done(l, 5, 0, 3) == DLC_OK);
    CHECK(drain(l).n == 0);
    /* step 4: lag 2 = τ: applied (fragment 2 also leaves) */
    inner_step(x.p, target);
    float th4[NMAX];
    gather(&x, 1, dlc_params_data(x.p), th4);
    CHECK(dlc_learner_step_done(l, 5, 0, 4.0) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 2 && r.a[0].type == DLC_LACT_SEND && r.a[0].msg.fragment == 2);
    const dlc_learner_action *ap = find(&r, DLC_LACT_APPLIED, 1);
    CHECK(ap && ap->version == 1 && ap->lag == 2 && ap->resync == 0);
    float now1[NMAX];
    gather(&x, 1, dlc_params_data(x.p), now1);
    double worst = 0;
    for (int64_t i = 0; i < n1; i++) worst = fmax(worst, fabs(now1[i] - (0.5 * (double)th4[i] + 0.5 * (double)g1[i])));
    CHECK_NEAR(worst, 0, 1e-7);
    CHECK(dlc_learner_base_version(l, 1) == 1 && dlc_learner_fragment_steps(l, 1) == 0 &&
          dlc_learner_fragment_tokens(l, 1) == 0);
    CHECK(dlc_learner_fragment_steps(l, 0) == 4 && dlc_learner_base_version(l, 0) == 0);
    /* transit = (2.1 − 2.0) − held 0.04, measured when it arrived: the wait for τ steps
     * until 4.0 is not the links' */
    CHECK_NEAR(dlc_learner_transit(l), 0.06, 1e-12);
    /* the same version again, or an older one: ignored */
    memcpy(snap, dlc_params_data(x.p), (size_t)size * 4);
    m = fragment_msg(0, 1, 1, 0, g2, n1);
    CHECK(dlc_learner_receive(l, &m, 4.5) == DLC_OK);
    m = fragment_msg(0, 1, 0, 0, g2, n1);
    CHECK(dlc_learner_receive(l, &m, 4.5) == DLC_OK);
    CHECK(drain(l).n == 0 && memcmp(snap, dlc_params_data(x.p), (size_t)size * 4) == 0);
    CHECK(dlc_learner_base_version(l, 1) == 1);
    /* steps 5..7; fragment 2 (sent after step 4) comes back at step 7, lag 3 >= τ: at once */
    for (int t = 5; t <= 7; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 5, 0, t) == DLC_OK);
        drain(l);
    }
    float th7[NMAX], now2[NMAX];
    gather(&x, 2, dlc_params_data(x.p), th7);
    /* receive only stashes it, even when it may be applied: the arena is written at the
     * next step boundary, here the one before step 8 */
    memcpy(snap, dlc_params_data(x.p), (size_t)size * 4);
    m = fragment_msg(0, 2, 1, 0, g2, n2);
    CHECK(dlc_learner_receive(l, &m, 7.5) == DLC_OK);
    CHECK(drain(l).n == 0 && memcmp(snap, dlc_params_data(x.p), (size_t)size * 4) == 0);
    CHECK(dlc_learner_base_version(l, 2) == 0);
    CHECK(dlc_learner_step_begin(l, 7.5) == DLC_OK);
    r = drain(l);
    ap = find(&r, DLC_LACT_APPLIED, 2);
    CHECK(r.n == 1 && ap && ap->lag == 3 && ap->version == 1);
    gather(&x, 2, dlc_params_data(x.p), now2);
    worst = 0;
    for (int64_t i = 0; i < n2; i++) worst = fmax(worst, fabs(now2[i] - (0.5 * (double)th7[i] + 0.5 * (double)g2[i])));
    CHECK_NEAR(worst, 0, 1e-7);
    CHECK(dlc_learner_step_begin(l, 7.5) == DLC_OK && drain(l).n == 0); /* nothing more */
    /* a fragment that was not sent since it was last received: at the next boundary (lag
     * -1); a newer one arriving before it replaces the waiting one */
    float g3[NMAX];
    randv(g3, n2, 24, 1.0f);
    m = fragment_msg(0, 2, 2, 0, g3, n2);
    CHECK(dlc_learner_receive(l, &m, 7.6) == DLC_OK && drain(l).n == 0);
    m = fragment_msg(0, 2, 3, 0, g2, n2);
    CHECK(dlc_learner_receive(l, &m, 7.7) == DLC_OK && drain(l).n == 0);
    m = fragment_msg(0, 2, 2, 0, g3, n2); /* older than the waiting one: ignored */
    CHECK(dlc_learner_receive(l, &m, 7.8) == DLC_OK && drain(l).n == 0);
    gather(&x, 2, dlc_params_data(x.p), th7);
    CHECK(dlc_learner_step_begin(l, 7.9) == DLC_OK);
    r = drain(l);
    ap = find(&r, DLC_LACT_APPLIED, 2);
    CHECK(r.n == 1 && ap && ap->lag == -1 && ap->version == 3 && ap->resync == 0);
    gather(&x, 2, dlc_params_data(x.p), now2);
    worst = 0;
    for (int64_t i = 0; i < n2; i++) worst = fmax(worst, fabs(now2[i] - (0.5 * (double)th7[i] + 0.5 * (double)g2[i])));
    CHECK_NEAR(worst, 0, 1e-7);
    /* fragment 1's next contribution (step 10) is against Θ̂ = g1, base 1, 6 steps */
    for (int t = 8; t <= 10; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 5, 0, t) == DLC_OK);
        r = drain(l);
    }
    const dlc_learner_action *sa = find(&r, DLC_LACT_SEND, 1);
    CHECK(sa && sa->msg.version == 1 && sa->msg.steps == 6 && sa->msg.tokens == 30);
    if (sa) {
        float th[NMAX], want_d[NMAX];
        gather(&x, 1, dlc_params_data(x.p), th);
        for (int64_t i = 0; i < n1; i++) want_d[i] = g1[i] - th[i];
        CHECK(memcmp(sa->msg.payload, want_d, (size_t)n1 * 4) == 0);
    }
    /* a resync of fragment 1 (sent after step 10) arrives during step 11: stashed, then
     * taken whole (no α) at that step's end although τ has not passed; an older merge
     * that follows is ignored */
    float rs[NMAX];
    randv(rs, n1, 25, 1.0f);
    memcpy(snap, dlc_params_data(x.p), (size_t)size * 4);
    m = fragment_msg(0, 1, 5, DLC_MSG_RESYNC, rs, n1);
    CHECK(dlc_learner_receive(l, &m, 10.5) == DLC_OK);
    CHECK(drain(l).n == 0 && memcmp(snap, dlc_params_data(x.p), (size_t)size * 4) == 0);
    m = fragment_msg(0, 1, 4, 0, g1, n1);
    CHECK(dlc_learner_receive(l, &m, 10.6) == DLC_OK && drain(l).n == 0);
    inner_step(x.p, target);
    CHECK(dlc_learner_step_done(l, 5, 0, 11) == DLC_OK);
    r = drain(l);
    ap = find(&r, DLC_LACT_APPLIED, 1);
    CHECK(r.n == 1 && ap && ap->resync == 1 && ap->version == 5 && ap->lag == -1);
    float got1[NMAX];
    gather(&x, 1, dlc_params_data(x.p), got1);
    CHECK(memcmp(got1, rs, (size_t)n1 * 4) == 0);
    CHECK(dlc_learner_base_version(l, 1) == 5 && dlc_learner_fragment_steps(l, 1) == 0);
    dlc_learner_free(l);
    free(theta0);
    free(target);
    free(snap);
    fx_free(&x);
}

/* Blocking: WAITING when τ steps pass without the fragment, TRAINING on arrival. */
static void test_blocking(void) {
    fx x;
    fx_make(&x, 1, 30);
    int64_t n = dlc_plan_numel(x.plan, 0);
    for (int tau = 0; tau <= 1; tau++) {
        dlc_learner_params lp = lparams(0, 4, tau, 0, 1);
        dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
        CHECK_OK(l);
        if (!l) continue;
        resync(&x, l, dlc_params_data(x.p), 0, 0);
        int t = 0;
        while (dlc_learner_state_of(l) == DLC_LEARNER_TRAINING && t < 10) {
            CHECK(dlc_learner_step_done(l, 1, 0, ++t) == DLC_OK);
            drain(l);
        }
        CHECK(t == 4 + tau && dlc_learner_state_of(l) == DLC_LEARNER_WAITING);
        CHECK(dlc_learner_step_done(l, 1, 0, 9) == DLC_ERR_STATE);
        CHECK(dlc_learner_step_begin(l, 9) == DLC_ERR_STATE && strstr(dlc_last_error(), "waiting"));
        CHECK(dlc_learner_steps(l) == 4 + tau);
        if (tau == 0) { /* contribute is allowed while waiting */
            CHECK(dlc_learner_contribute(l, 0, 9) == DLC_OK);
            drain(l);
        }
        float g[NMAX];
        randv(g, n, 31, 1.0f);
        /* the receive makes it runnable but leaves the arena alone; the step boundary
         * before its next step applies the fragment */
        float before[NMAX], th[NMAX];
        gather(&x, 0, dlc_params_data(x.p), before);
        dlc_msg m = fragment_msg(0, 0, 1, 0, g, n);
        CHECK(dlc_learner_receive(l, &m, 10) == DLC_OK);
        CHECK(drain(l).n == 0 && dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
        gather(&x, 0, dlc_params_data(x.p), th);
        CHECK(memcmp(th, before, (size_t)n * 4) == 0 && dlc_learner_base_version(l, 0) == 0);
        CHECK(dlc_learner_step_begin(l, 10) == DLC_OK);
        lrec r = drain(l);
        CHECK(r.n == 1 && r.a[0].type == DLC_LACT_APPLIED && r.a[0].version == 1 && r.a[0].lag == tau);
        gather(&x, 0, dlc_params_data(x.p), th);
        CHECK(memcmp(th, g, (size_t)n * 4) == 0); /* α = 0: overwritten */
        CHECK(dlc_learner_step_done(l, 1, 0, 11) == DLC_OK);
        dlc_learner_free(l);
    }
    fx_free(&x);
}

/* Joining until every RESYNC fragment arrived; restart zeroes counters and rejoins with
 * the full model (from a real syncer); the refusals of each state. */
static void test_join_restart(void) {
    fx x;
    fx_make(&x, 4, 40);
    int64_t size = dlc_params_size(x.p);
    float *model = malloc((size_t)size * 4), *target = malloc((size_t)size * 4);
    randv(model, size, 41, 1.0f);
    randv(target, size, 42, 1.0f);
    dlc_learner_params lp = lparams(2, 8, 2, 0, 0);
    lp.heartbeat = 1.0;
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    CHECK(dlc_learner_step_done(l, 1, 0, 0) == DLC_ERR_STATE);
    CHECK(dlc_learner_step_begin(l, 0) == DLC_ERR_STATE);
    CHECK(dlc_learner_contribute(l, 0, 0) == DLC_ERR_STATE);
    CHECK(dlc_learner_gradient(l, 1, 0) == DLC_ERR_STATE);
    CHECK(dlc_learner_restart(l, 0) == DLC_ERR_STATE);
    CHECK(dlc_learner_expiry(l) == INFINITY);
    /* a plain merged fragment while joining is ignored */
    float v[NMAX];
    gather(&x, 0, model, v);
    dlc_msg m = fragment_msg(2, 0, 7, 0, v, dlc_plan_numel(x.plan, 0));
    CHECK(dlc_learner_receive(l, &m, 0) == DLC_OK);
    CHECK(drain(l).n == 0 && dlc_learner_base_version(l, 0) == -1);
    for (int p = 0; p < 4; p++) {
        CHECK(dlc_learner_state_of(l) == DLC_LEARNER_JOINING);
        gather(&x, p, model, v);
        m = fragment_msg(2, p, 3 + p, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, p));
        CHECK(dlc_learner_receive(l, &m, 0.5) == DLC_OK);
        CHECK(drain(l).n == 1);
        if (p == 0) { /* the same fragment twice does not count twice */
            CHECK(dlc_learner_receive(l, &m, 0.5) == DLC_OK);
            CHECK(drain(l).n == 1);
            CHECK(dlc_learner_state_of(l) == DLC_LEARNER_JOINING);
        }
    }
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    for (int p = 0; p < 4; p++) {
        float got[NMAX];
        gather(&x, p, model, v);
        gather(&x, p, dlc_params_data(x.p), got);
        CHECK(memcmp(got, v, (size_t)dlc_plan_numel(x.plan, p) * 4) == 0);
    }
    for (int p = 0; p < 4; p++) CHECK(dlc_learner_base_version(l, p) == 3 + p);
    CHECK(dlc_learner_expiry(l) == 1.5);
    for (int t = 1; t <= 5; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 7, 0.2, 0.5 + t * 0.1) == DLC_OK);
        drain(l);
    }
    CHECK(dlc_learner_handle_expiry(l, 1.6) == DLC_OK);
    lrec r = drain(l);
    CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_HEARTBEAT && r.a[0].msg.steps == 5 && r.a[0].msg.tokens == 35 &&
          r.a[0].msg.learner == 2);
    CHECK_NEAR(r.a[0].msg.step_time, 0.2, 1e-12);
    CHECK(dlc_learner_expiry(l) == 2.5);
    CHECK(dlc_learner_steps(l) == 5 && dlc_learner_fragment_steps(l, 3) == 5);
    /* killed: STOPPED ignores every message and refuses steps */
    dlc_learner_stop(l);
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_STOPPED && dlc_learner_expiry(l) == INFINITY);
    CHECK(dlc_learner_receive(l, &m, 2) == DLC_OK && drain(l).n == 0);
    CHECK(dlc_learner_step_done(l, 1, 0, 2) == DLC_ERR_STATE);
    CHECK(dlc_learner_restart(l, 3) == DLC_OK);
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_JOINING);
    CHECK(dlc_learner_steps(l) == 0 && dlc_learner_tokens(l) == 0 && dlc_learner_step_time(l) == 0);
    for (int p = 0; p < 4; p++)
        CHECK(dlc_learner_base_version(l, p) == -1 && dlc_learner_fragment_steps(l, p) == 0 &&
              dlc_learner_fragment_tokens(l, p) == 0);
    /* the rejoin: a syncer (Θ0 = target, fragment 1 moved on) sends the full model */
    dlc_syncer_params sp = dlc_syncer_default_params();
    sp.learners = 3;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, target);
    CHECK_OK(s);
    if (s) {
        CHECK(dlc_syncer_join(s, 0, 3) == DLC_OK);
        while (dlc_syncer_poll(s, &(dlc_syncer_action){0})) {}
        float d[NMAX];
        randv(d, dlc_plan_numel(x.plan, 1), 43, 0.1f);
        dlc_msg c = {.type = DLC_MSG_CONTRIBUTION, .learner = 0, .fragment = 1, .steps = 3, .tokens = 30,
                     .codec = DLC_CODEC_F32, .payload = (const uint8_t *)d,
                     .len = (size_t)dlc_plan_numel(x.plan, 1) * 4};
        CHECK(dlc_syncer_receive(s, &c, 3) == DLC_OK);
        while (dlc_syncer_poll(s, &(dlc_syncer_action){0})) {}
        CHECK(dlc_syncer_version(s, 1) == 1);
        CHECK(dlc_syncer_join(s, 2, 4) == DLC_OK);
        dlc_syncer_action a;
        int k = 0;
        while (dlc_syncer_poll(s, &a)) {
            CHECK(a.type == DLC_SACT_SEND && a.msg.learner == 2 && (a.msg.flags & DLC_MSG_RESYNC));
            CHECK(dlc_learner_receive(l, &a.msg, 4) == DLC_OK);
            CHECK(drain(l).n == 1);
            k++;
        }
        CHECK(k == 4 && dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
        float *want = malloc((size_t)size * 4);
        memcpy(want, dlc_params_data(x.p), (size_t)size * 4); /* keeps the padding */
        CHECK(dlc_syncer_copy_model(s, want) == DLC_OK);
        CHECK(memcmp(dlc_params_data(x.p), want, (size_t)size * 4) == 0);
        free(want);
        CHECK(dlc_learner_base_version(l, 1) == 1 && dlc_learner_base_version(l, 0) == 0);
        CHECK(dlc_learner_steps(l) == 0 && dlc_learner_fragment_steps(l, 1) == 0);
        dlc_syncer_free(s);
    }
    dlc_learner_free(l);
    free(model);
    free(target);
    fx_free(&x);
}

/* dp alone: gradient() sends the grads and WAITs; GRADIENT_AVG fills the grad arena. */
static void test_dp_alone(void) {
    fx x;
    fx_make(&x, 1, 50);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_learner_params lp = lparams(0, 8, 0, 0, 0);
    lp.dp = 1;
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    resync(&x, l, dlc_params_data(x.p), 0, 0);
    float g[NMAX], avg[NMAX], got[NMAX];
    randv(g, n, 51, 1.0f);
    randv(avg, n, 52, 1.0f);
    scatter(&x, 0, g, dlc_params_grad(x.p));
    CHECK(dlc_learner_gradient(l, 16, 1.0) == DLC_OK);
    lrec r = drain(l);
    CHECK(r.n == 1 && r.a[0].type == DLC_LACT_SEND && r.a[0].msg.type == DLC_MSG_GRADIENT &&
          r.a[0].msg.version == 1 && r.a[0].msg.tokens == 16 && r.a[0].msg.len == (size_t)n * 4 &&
          memcmp(r.a[0].msg.payload, g, (size_t)n * 4) == 0);
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_WAITING);
    CHECK(dlc_learner_step_done(l, 16, 0, 1.1) == DLC_ERR_STATE);
    CHECK(dlc_learner_gradient(l, 16, 1.1) == DLC_ERR_STATE);
    dlc_msg m = {.type = DLC_MSG_GRADIENT_AVG, .learner = 0, .version = 2, .codec = DLC_CODEC_F32,
                 .payload = (const uint8_t *)avg, .len = (size_t)n * 4};
    CHECK(dlc_learner_receive(l, &m, 1.2) == DLC_OK); /* not this step: ignored */
    CHECK(drain(l).n == 0 && dlc_learner_state_of(l) == DLC_LEARNER_WAITING);
    m.version = 1;
    m.len = (size_t)(n - 1) * 4;
    CHECK(dlc_learner_receive(l, &m, 1.2) == DLC_ERR_FORMAT);
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_WAITING);
    m.len = (size_t)n * 4;
    CHECK(dlc_learner_receive(l, &m, 1.3) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 1 && r.a[0].type == DLC_LACT_GRADIENT_READY && r.a[0].version == 1);
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    gather(&x, 0, dlc_params_grad(x.p), got);
    CHECK(memcmp(got, avg, (size_t)n * 4) == 0);
    CHECK(dlc_learner_step_done(l, 16, 0.1, 1.4) == DLC_OK);
    CHECK(drain(l).n == 0 && dlc_learner_steps(l) == 1);
    CHECK(dlc_learner_contribute(l, 0, 1.5) == DLC_ERR_STATE);
    dlc_learner_free(l);
    fx_free(&x);
}

/* A GRADIENT_AVG of `step` (end: the last step of a replay answer, 0 for a round's). */
static dlc_msg avg_msg(int64_t step, int64_t end, const float *v, int64_t n) {
    return (dlc_msg){.type = DLC_MSG_GRADIENT_AVG, .learner = 0, .version = step, .steps = end,
                     .codec = DLC_CODEC_F32, .payload = (const uint8_t *)v, .len = (size_t)n * 4};
}

/* One replayed average: it arrives, lands in the grad arena (GRADIENT_READY), the driver's
 * optimizer step is done (replayed); returns the actions of replayed. */
static lrec replay_one(const fx *x, dlc_learner *l, int64_t step, int64_t end, const float *v, double now) {
    int64_t n = dlc_plan_numel(x->plan, 0);
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_WAITING && dlc_learner_replaying(l));
    dlc_msg m = avg_msg(step, end, v, n);
    CHECK(dlc_learner_receive(l, &m, now) == DLC_OK);
    lrec r = drain(l);
    const dlc_learner_action *ready = find(&r, DLC_LACT_GRADIENT_READY, -1);
    CHECK(ready && ready->version == step && dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    float got[NMAX];
    gather(x, 0, dlc_params_grad(x->p), got);
    CHECK(memcmp(got, v, (size_t)n * 4) == 0);
    CHECK(dlc_learner_step_done(l, 16, 0.1, now) == DLC_ERR_STATE); /* not a step of its own */
    CHECK(dlc_learner_gradient(l, 16, now) == DLC_ERR_STATE);
    CHECK(dlc_learner_replayed(l, now) == DLC_OK);
    CHECK(dlc_learner_schedule_step(l) == step);
    return drain(l);
}

/* Replay (learner.h): a dp learner restored at step 1 of a run at step 4 asks for the
 * averages after 1 and applies 2, 3, 4 in order, then trains in the run's next round; a
 * round's average ahead of the answers is not taken out of order; an answer that starts
 * past the step asked skips the gap (PHASE, unreplayed); a resync past its step makes a
 * learner waiting for its gradient replay (the gradient void), one at or before its step
 * ends a replay; without `replay` nothing of this happens. */
static void test_dp_replay(void) {
    fx x;
    fx_make(&x, 1, 53);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_learner_params lp = lparams(0, 8, 0, 0, 0);
    lp.dp = 1;
    lp.replay = 2;
    CHECK(dlc_learner_new(&lp, x.p, x.plan) == NULL && strstr(dlc_last_error(), "replay = 2"));
    lp.replay = 1;
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    float th[NMAX], a[6][NMAX];
    gather(&x, 0, dlc_params_data(x.p), th);
    for (int k = 0; k < 6; k++) randv(a[k], n, 540 + (uint64_t)k, 1.0f);
    dlc_msg join = fragment_msg(0, 0, 0, DLC_MSG_RESYNC, th, n);
    join.steps = 4; /* the run is at step 4 */
    CHECK(dlc_learner_receive(l, &join, 1.0) == DLC_OK);
    drain(l);
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_TRAINING && dlc_learner_schedule_step(l) == 4);
    /* the host restored its checkpoint of step 1 */
    CHECK(dlc_learner_set_schedule_step(l, 1) == DLC_OK);
    CHECK(dlc_learner_replayed(l, 1.0) == DLC_ERR_STATE);
    CHECK(dlc_learner_replay(l, 1.0) == DLC_OK);
    lrec r = drain(l);
    CHECK(r.n == 1 && r.a[0].type == DLC_LACT_SEND && r.a[0].msg.type == DLC_MSG_REPLAY && r.a[0].msg.version == 1 &&
          r.a[0].msg.learner == 0 && r.a[0].msg.len == 0);
    CHECK(dlc_learner_replay(l, 1.0) == DLC_ERR_STATE && strstr(dlc_last_error(), "already replaying"));
    /* a round's average of step 5 overtakes the answers: not taken, but the run is at 5 */
    dlc_msg ahead = avg_msg(5, 0, a[5], n);
    CHECK(dlc_learner_receive(l, &ahead, 1.1) == DLC_OK && drain(l).n == 0);
    /* the answers, ending at 4 */
    r = replay_one(&x, l, 2, 4, a[2], 1.2);
    CHECK(r.n == 0 && dlc_learner_state_of(l) == DLC_LEARNER_WAITING); /* 3 and 4 are on their way */
    r = replay_one(&x, l, 3, 4, a[3], 1.3);
    CHECK(r.n == 0);
    /* past the answers' last step, short of step 5: asks again from 4 */
    r = replay_one(&x, l, 4, 4, a[4], 1.4);
    CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_REPLAY && r.a[0].msg.version == 4);
    r = replay_one(&x, l, 5, 5, a[5], 1.5);
    CHECK(r.n == 0 && !dlc_learner_replaying(l) && dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    /* caught up: its next gradient is the run's step 6 */
    CHECK(dlc_learner_gradient(l, 16, 1.6) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_GRADIENT && r.a[0].msg.version == 6);
    /* refused (the others passed step 6): a resync at the run's step 8 makes it replay */
    dlc_msg rs = fragment_msg(0, 0, 0, DLC_MSG_RESYNC, th, n);
    rs.steps = 8;
    CHECK(dlc_learner_receive(l, &rs, 1.7) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_REPLAY && r.a[0].msg.version == 5 && dlc_learner_replaying(l));
    /* the syncer's history starts at 7 now: step 6 is skipped, unreplayed */
    dlc_msg gap = avg_msg(7, 8, a[1], n);
    CHECK(dlc_learner_receive(l, &gap, 1.8) == DLC_OK);
    r = drain(l);
    const dlc_learner_action *ph = find(&r, DLC_LACT_PHASE, -1);
    CHECK(ph && ph->unreplayed == 1 && ph->lag == 1 && ph->schedule == 6 && find(&r, DLC_LACT_GRADIENT_READY, -1));
    /* a resync while that average is in the arena (a rejoin's: the rest of the answer may
     * be lost): nothing now, the REPLAY goes again once the step is replayed */
    rs.steps = 8;
    CHECK(dlc_learner_receive(l, &rs, 1.81) == DLC_OK && drain(l).n == 0 &&
          dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    CHECK(dlc_learner_replayed(l, 1.82) == DLC_OK && dlc_learner_schedule_step(l) == 7);
    r = drain(l);
    CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_REPLAY && r.a[0].msg.version == 7);
    /* the next answer: 8 */
    r = replay_one(&x, l, 8, 8, a[2], 1.9);
    CHECK(r.n == 0 && !dlc_learner_replaying(l));
    /* a resync at or before its step ends nothing and replays nothing */
    rs.steps = 8;
    CHECK(dlc_learner_receive(l, &rs, 2.0) == DLC_OK && drain(l).n == 0 && !dlc_learner_replaying(l));
    CHECK(dlc_learner_replay(l, 2.0) == DLC_OK && drain(l).n == 0); /* nothing to replay */
    /* a replay the syncer has nothing for: its resync answers (at the learner's step: done;
     * past it: the steps between are skipped) */
    rs.steps = 10;
    CHECK(dlc_learner_receive(l, &rs, 2.1) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_REPLAY && r.a[0].msg.version == 8);
    /* a refused gradient's resync that crossed the REPLAY (it answers none): not the
     * answer; the learner asks again (the REPLAY might have been lost with a connection) */
    CHECK(dlc_learner_receive(l, &rs, 2.15) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_REPLAY && r.a[0].msg.version == 8 && dlc_learner_replaying(l) &&
          dlc_learner_schedule_step(l) == 8 && dlc_learner_state_of(l) == DLC_LEARNER_WAITING);
    /* an answer to another question (a REPLAY of step 5): nothing changes */
    dlc_msg ans = rs;
    ans.answers = 5 + 1;
    CHECK(dlc_learner_receive(l, &ans, 2.18) == DLC_OK && drain(l).n == 0 && dlc_learner_replaying(l) &&
          dlc_learner_schedule_step(l) == 8);
    /* the answer to the REPLAY of step 8: nothing held after it */
    ans.answers = 8 + 1;
    CHECK(dlc_learner_receive(l, &ans, 2.2) == DLC_OK);
    r = drain(l);
    ph = find(&r, DLC_LACT_PHASE, -1);
    CHECK(r.n == 1 && ph && ph->unreplayed == 2 && ph->schedule == 10 && !dlc_learner_replaying(l) &&
          dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    /* the second answer (to the REPLAY asked twice) after the replay ended: nothing */
    CHECK(dlc_learner_receive(l, &ans, 2.25) == DLC_OK && drain(l).n == 0 && !dlc_learner_replaying(l) &&
          dlc_learner_schedule_step(l) == 10 && dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    /* a malformed answer: refused, nothing changes */
    dlc_msg bad = avg_msg(12, 11, a[0], n);
    CHECK(dlc_learner_receive(l, &bad, 2.3) == DLC_ERR_FORMAT && strstr(dlc_last_error(), "ending a replay at 11"));
    dlc_learner_free(l);
    /* without replay (an older syncer): a resync past its step takes the run's step */
    lp.replay = 0;
    l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return fx_free(&x);
    join.steps = 0;
    CHECK(dlc_learner_receive(l, &join, 3.0) == DLC_OK);
    drain(l);
    CHECK(dlc_learner_replay(l, 3.0) == DLC_ERR_STATE && strstr(dlc_last_error(), "does not replay"));
    CHECK(dlc_learner_gradient(l, 16, 3.1) == DLC_OK);
    drain(l);
    CHECK(dlc_learner_receive(l, &rs, 3.2) == DLC_OK && drain(l).n == 0);
    CHECK(!dlc_learner_replaying(l) && dlc_learner_schedule_step(l) == 10 &&
          dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    dlc_learner_free(l);
    fx_free(&x);
}

/* An int4 contribution decodes within the codec bound amax/14 per block. */
static void test_int4(void) {
    fx x;
    fx_make(&x, 1, 60);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_learner_params lp = lparams(0, 3, 0, 0, 0);
    lp.codec = DLC_CODEC_INT4;
    lp.codec_params.block = 32;
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    int64_t size = dlc_params_size(x.p);
    float *target = malloc((size_t)size * 4), hat[NMAX], th[NMAX], d[NMAX], dec[NMAX];
    randv(target, size, 61, 1.0f);
    gather(&x, 0, dlc_params_data(x.p), hat);
    resync(&x, l, dlc_params_data(x.p), 0, 0);
    lrec r;
    for (int t = 1; t <= 3; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 1, 0, t) == DLC_OK);
        r = drain(l);
    }
    CHECK(r.n == 1 && r.a[0].msg.codec == DLC_CODEC_INT4);
    CHECK((int64_t)r.a[0].msg.len == dlc_codec_encoded_size(DLC_CODEC_INT4, &lp.codec_params, n));
    CHECK(dlc_codec_decode(DLC_CODEC_INT4, &lp.codec_params, r.a[0].msg.payload, r.a[0].msg.len, dec, n) == DLC_OK);
    gather(&x, 0, dlc_params_data(x.p), th);
    for (int64_t i = 0; i < n; i++) d[i] = hat[i] - th[i];
    int ok = 1;
    for (int64_t b = 0; b < n; b += 32) {
        int64_t e = b + 32 < n ? b + 32 : n;
        double amax = 0;
        for (int64_t i = b; i < e; i++) amax = fmax(amax, fabs(d[i]));
        for (int64_t i = b; i < e; i++)
            if (fabs((double)dec[i] - d[i]) > amax / 14 * (1 + 1e-5)) ok = 0;
        CHECK(amax > 0);
    }
    CHECK(ok);
    dlc_learner_free(l);
    free(target);
    fx_free(&x);
}

/* Deferred encoding (learner.h): the same bytes as encoding inside the learner, the
 * fragment's buffers lent out until dlc_learner_encoded (its outer gradient in a buffer
 * kept from one ENCODE to the next), the calls that would touch them
 * refused meanwhile (changing nothing), and a pre-decoded fragment taken as a decoded one. */
static void test_deferred_encode(void) {
    fx xa, xb;
    fx_make(&xa, 2, 71);
    fx_make(&xb, 2, 71);
    dlc_learner_params lp = lparams(0, 4, 1, 0, 0);
    lp.codec = DLC_CODEC_INT4;
    lp.codec_params.block = 32;
    lp.error_feedback = 1;
    dlc_learner *a = dlc_learner_new(&lp, xa.p, xa.plan);
    lp.defer_encode = 1;
    dlc_learner *b = dlc_learner_new(&lp, xb.p, xb.plan);
    CHECK_OK(a && b);
    if (!a || !b) return;
    int64_t size = dlc_params_size(xa.p);
    float target[NMAX];
    randv(target, size, 72, 1.0f);
    resync(&xa, a, dlc_params_data(xa.p), 0, 0);
    resync(&xb, b, dlc_params_data(xb.p), 0, 0);
    int encodes = 0;
    const float *lent = NULL;
    for (int t = 1; t <= 12; t++) {
        inner_step(xa.p, target);
        inner_step(xb.p, target);
        CHECK(dlc_learner_step_done(a, 1, 0.1, t) == DLC_OK);
        CHECK(dlc_learner_step_done(b, 1, 0.1, t) == DLC_OK);
        lrec ra = drain(a), rb = drain(b);
        CHECK(ra.n == rb.n);
        for (int i = 0; i < ra.n && i < rb.n; i++) {
            if (ra.a[i].type != DLC_LACT_SEND) continue;
            const dlc_learner_action *e = &rb.a[i];
            CHECK(e->type == DLC_LACT_ENCODE && e->fragment == ra.a[i].msg.fragment && e->msg.payload == NULL &&
                  e->msg.len == ra.a[i].msg.len && e->msg.version == ra.a[i].msg.version &&
                  e->msg.steps == ra.a[i].msg.steps && e->ef != NULL);
            if (e->type != DLC_LACT_ENCODE) continue;
            CHECK(dlc_learner_encoding(b) == 1);
            /* the outer gradient lies in a buffer of the largest fragment's size, the one
             * the last ENCODE gave back (one out at a time: no copy of the whole model) */
            CHECK(e->delta != NULL && e->n == dlc_plan_numel(xb.plan, e->fragment));
            CHECK(lent == NULL || e->delta == lent);
            lent = e->delta;
            /* lent out: the next step boundary is refused and changes nothing */
            int64_t steps = dlc_learner_steps(b);
            CHECK(dlc_learner_step_done(b, 1, 0.1, t) == DLC_ERR_STATE);
            CHECK(strstr(dlc_last_error(), "dlc_learner_encoded") != NULL);
            CHECK(dlc_learner_steps(b) == steps && dlc_learner_pending(b) == 0);
            CHECK(dlc_learner_contribute(b, e->fragment, t) == DLC_ERR_STATE);
            CHECK(dlc_learner_rollback(b, t) == DLC_ERR_STATE);
            uint8_t out[NMAX * 4];
            size_t len = 0;
            CHECK(dlc_learner_encode(e, out, 1, &len) == DLC_ERR_RANGE); /* a short buffer */
            CHECK(dlc_learner_encode(e, out, sizeof out, &len) == DLC_OK);
            CHECK(len == ra.a[i].msg.len && memcmp(out, ra.a[i].msg.payload, len) == 0); /* bit for bit */
            CHECK(dlc_learner_encoded(b, e->fragment) == DLC_OK);
            CHECK(dlc_learner_encoded(b, e->fragment) == DLC_ERR_STATE); /* none out any more */
            CHECK(dlc_learner_encoding(b) == 0);
            encodes++;
            /* the merge of it, delivered decoded to b and as bytes to a: the same model */
            float v[NMAX];
            int p = e->fragment;
            int64_t n = dlc_plan_numel(xa.plan, p);
            gather(&xa, p, target, v);
            dlc_msg m = fragment_msg(0, p, dlc_learner_base_version(a, p) + 1, 0, v, n);
            CHECK(dlc_learner_receive(a, &m, t) == DLC_OK);
            CHECK(dlc_learner_receive_decoded(b, &m, v, n - 1, t) == DLC_ERR_FORMAT); /* the wrong size */
            CHECK(dlc_learner_receive_decoded(b, &m, v, n, t) == DLC_OK);
        }
    }
    CHECK(encodes >= 4);
    CHECK(memcmp(dlc_params_data(xa.p), dlc_params_data(xb.p), (size_t)size * sizeof(float)) == 0);
    /* an ENCODE never polled lends nothing: stop takes it back, restart is allowed */
    for (int t = 13; dlc_learner_encoding(b) == 0 && t < 40; t++) {
        inner_step(xb.p, target);
        CHECK(dlc_learner_step_done(b, 1, 0.1, t) == DLC_OK);
        if (dlc_learner_encoding(b) == 0) drain(b); /* applies */
    }
    CHECK(dlc_learner_encoding(b) == 1 && dlc_learner_pending(b) >= 1);
    dlc_learner_stop(b);
    CHECK(dlc_learner_encoding(b) == 0);
    CHECK(dlc_learner_restart(b, 50) == DLC_OK);
    /* not with dp */
    lp.dp = 1;
    CHECK(dlc_learner_params_check(&lp) == DLC_ERR_ARG && strstr(dlc_last_error(), "defer_encode") != NULL);
    dlc_learner_free(a);
    dlc_learner_free(b);
    fx_free(&xa);
    fx_free(&xb);
}

/* ---- end to end: 3 learners and a syncer, zero latency, lockstep ---- */

typedef struct world {
    fx x[3];
    dlc_learner *l[3];
    dlc_syncer *s;
    float *target[3];
    uint8_t *buf; /* copies of learner payloads before forwarding */
} world;

/* Forwards every queued syncer action to its learner. */
static void syncer_out(world *w, double now) {
    dlc_syncer_action a;
    while (dlc_syncer_poll(w->s, &a))
        if (a.type == DLC_SACT_SEND) {
            CHECK(dlc_learner_receive(w->l[a.msg.learner], &a.msg, now) == DLC_OK);
            while (dlc_learner_poll(w->l[a.msg.learner], &(dlc_learner_action){0})) {}
        }
}

/* Forwards learner m's queued SENDs to the syncer (copied first: the syncer's replies
 * reach learner m and would reuse its buffers). */
static void learner_out(world *w, int m, double now) {
    dlc_learner_action a[16];
    int k = 0;
    size_t used = 0;
    while (k < 16 && dlc_learner_poll(w->l[m], &a[k]))
        if (a[k].type == DLC_LACT_SEND) {
            memcpy(w->buf + used, a[k].msg.payload, a[k].msg.len);
            a[k].msg.payload = w->buf + used;
            used += a[k].msg.len;
            k++;
        }
    for (int i = 0; i < k; i++) {
        CHECK(dlc_syncer_receive(w->s, &a[i].msg, now) == DLC_OK);
        syncer_out(w, now);
    }
}

static void world_make(world *w, int blocking, int dp) {
    memset(w, 0, sizeof *w);
    for (int m = 0; m < 3; m++) fx_make(&w->x[m], 1, 70); /* the same initial model */
    int64_t size = dlc_params_size(w->x[0].p);
    dlc_syncer_params sp = dlc_syncer_default_params();
    sp.learners = 3;
    sp.dp = dp;
    sp.quorum = DLC_QUORUM_ALL;
    sp.grace = DLC_GRACE_OFF;
    sp.tau = 0;
    sp.weighting = DLC_WEIGHT_UNIFORM;
    sp.merge = DLC_MERGE_MEAN;
    w->s = dlc_syncer_new(&sp, w->x[0].plan, dlc_params_data(w->x[0].p));
    CHECK_OK(w->s);
    w->buf = malloc((size_t)size * 4 * 4);
    for (int m = 0; m < 3; m++) {
        dlc_learner_params lp = lparams(m, dp ? 0 : 5, 0, 0, blocking);
        lp.dp = dp;
        w->l[m] = dlc_learner_new(&lp, w->x[m].p, w->x[m].plan);
        CHECK_OK(w->l[m]);
        w->target[m] = malloc((size_t)size * 4);
        randv(w->target[m], size, 80 + (uint64_t)m, 1.0f);
        /* a different start for each learner: the join must overwrite it */
        randv(dlc_params_data(w->x[m].p), 15, 90 + (uint64_t)m, 1.0f); /* tensor w */
    }
    for (int m = 0; m < 3; m++) {
        CHECK(dlc_syncer_join(w->s, m, 0) == DLC_OK);
        syncer_out(w, 0);
        CHECK(dlc_learner_state_of(w->l[m]) == DLC_LEARNER_TRAINING);
    }
}

static void world_free(world *w) {
    for (int m = 0; m < 3; m++) {
        dlc_learner_free(w->l[m]);
        fx_free(&w->x[m]);
        free(w->target[m]);
    }
    dlc_syncer_free(w->s);
    free(w->buf);
}

/* 25 lockstep steps (5 rounds of H = 5); returns the final global model in `out`. */
static void run_diloco(int blocking, float *out, int64_t *waits) {
    world w;
    world_make(&w, blocking, 0);
    *waits = 0;
    for (int t = 1; t <= 25; t++) {
        for (int m = 0; m < 3; m++) {
            CHECK(dlc_learner_state_of(w.l[m]) == DLC_LEARNER_TRAINING);
            CHECK(dlc_learner_step_begin(w.l[m], t) == DLC_OK);
            while (dlc_learner_poll(w.l[m], &(dlc_learner_action){0})) {}
            inner_step(w.x[m].p, w.target[m]);
            CHECK(dlc_learner_step_done(w.l[m], 100, 0.1, t) == DLC_OK);
            *waits += dlc_learner_state_of(w.l[m]) == DLC_LEARNER_WAITING;
            learner_out(&w, m, t);
        }
    }
    CHECK(dlc_syncer_version(w.s, 0) == 5);
    for (int m = 0; m < 3; m++) { /* the boundary before a 26th step takes the last merge */
        CHECK(dlc_learner_step_begin(w.l[m], 26) == DLC_OK);
        while (dlc_learner_poll(w.l[m], &(dlc_learner_action){0})) {}
    }
    memcpy(out, dlc_params_data(w.x[0].p), (size_t)dlc_params_size(w.x[0].p) * 4);
    CHECK(dlc_syncer_copy_model(w.s, out) == DLC_OK);
    /* every learner holds the global model after the last merge (α = 0, τ = 0) */
    for (int m = 0; m < 3; m++)
        CHECK(memcmp(dlc_params_data(w.x[m].p), out, (size_t)dlc_params_size(w.x[m].p) * 4) == 0);
    world_free(&w);
}

static void test_decoupled_equals_diloco(void) {
    float a[256], b[256];
    int64_t wa, wb;
    run_diloco(0, a, &wa);
    run_diloco(1, b, &wb);
    CHECK(wa == 0 && wb == 15); /* blocking: with tau = 0 each learner waits after each send */
    CHECK(memcmp(a, b, sizeof(float) * 64) == 0);
    /* and the model moved */
    fx x;
    fx_make(&x, 1, 70);
    CHECK(memcmp(a, dlc_params_data(x.p), sizeof(float) * 64) != 0);
    fx_free(&x);
}

/* dp through the syncer: each learner's grad arena ends with the mean of the three. */
static void test_dp_world(void) {
    world w;
    world_make(&w, 0, 1);
    int64_t n = dlc_plan_numel(w.x[0].plan, 0);
    for (int step = 1; step <= 3; step++) {
        float g[3][NMAX];
        for (int m = 0; m < 3; m++) {
            randv(g[m], n, 700 + 10 * (uint64_t)step + (uint64_t)m, 1.0f);
            scatter(&w.x[m], 0, g[m], dlc_params_grad(w.x[m].p));
            CHECK(dlc_learner_gradient(w.l[m], 32, step) == DLC_OK);
            learner_out(&w, m, step);
            CHECK(dlc_learner_state_of(w.l[m]) == (m < 2 ? DLC_LEARNER_WAITING : DLC_LEARNER_TRAINING));
        }
        for (int m = 0; m < 3; m++) {
            float got[NMAX];
            gather(&w.x[m], 0, dlc_params_grad(w.x[m].p), got);
            double worst = 0;
            for (int64_t i = 0; i < n; i++)
                worst = fmax(worst, fabs(got[i] - ((double)g[0][i] + g[1][i] + g[2][i]) / 3.0));
            CHECK_NEAR(worst, 0, 1e-6);
            CHECK(dlc_learner_step_done(w.l[m], 32, 0.1, step) == DLC_OK);
        }
    }
    world_free(&w);
}

/* dp with a restart: learner 2 is killed after 3 rounds and rejoins; its resync carries
 * the run's step, so its next gradient is for step 4 like the others' and the round's
 * average releases all three (before, it sent step 1 and waited for ever).  Then a resync
 * while WAITING (its round lost) sends it back to TRAINING at the run's step. */
static void test_dp_restart(void) {
    world w;
    world_make(&w, 0, 1);
    int64_t n = dlc_plan_numel(w.x[0].plan, 0);
    float g[NMAX];
    for (int step = 1; step <= 3; step++) {
        for (int m = 0; m < 3; m++) {
            randv(g, n, 800 + (uint64_t)step + 10 * (uint64_t)m, 1.0f);
            scatter(&w.x[m], 0, g, dlc_params_grad(w.x[m].p));
            CHECK(dlc_learner_gradient(w.l[m], 32, step) == DLC_OK);
            learner_out(&w, m, step);
        }
        for (int m = 0; m < 3; m++) CHECK(dlc_learner_step_done(w.l[m], 32, 0.1, step + 0.5) == DLC_OK);
    }
    CHECK(dlc_syncer_version(w.s, 0) == 0 && dlc_learner_steps(w.l[0]) == 3);
    dlc_learner_stop(w.l[2]);
    CHECK(dlc_syncer_lost(w.s, 2, 4) == DLC_OK);
    syncer_out(&w, 4);
    CHECK(dlc_learner_restart(w.l[2], 5) == DLC_OK && dlc_syncer_join(w.s, 2, 5) == DLC_OK);
    syncer_out(&w, 5);
    CHECK(dlc_learner_state_of(w.l[2]) == DLC_LEARNER_TRAINING && dlc_learner_steps(w.l[2]) == 0);
    for (int m = 0; m < 3; m++) {
        CHECK(dlc_learner_step_begin(w.l[m], 6) == DLC_OK);
        while (dlc_learner_poll(w.l[m], &(dlc_learner_action){0})) {}
        CHECK(dlc_learner_gradient(w.l[m], 32, 6) == DLC_OK);
        learner_out(&w, m, 6);
    }
    for (int m = 0; m < 3; m++) CHECK(dlc_learner_state_of(w.l[m]) == DLC_LEARNER_TRAINING);
    CHECK(dlc_learner_step_done(w.l[2], 32, 0.1, 6.5) == DLC_OK && dlc_learner_steps(w.l[2]) == 1);
    /* learner 2 sends step 5 but its round is lost (say the syncer restarted): resynced
     * at step 5 of the run, it is TRAINING again and its next gradient is step 6; the
     * resync's model (a dp syncer's initial one) is not taken: it keeps its own */
    CHECK(dlc_learner_gradient(w.l[2], 32, 7) == DLC_OK);
    dlc_learner_action a;
    CHECK(dlc_learner_poll(w.l[2], &a) == 1 && a.msg.type == DLC_MSG_GRADIENT && a.msg.version == 5);
    CHECK(dlc_learner_state_of(w.l[2]) == DLC_LEARNER_WAITING);
    float v[NMAX];
    gather(&w.x[0], 0, dlc_params_data(w.x[0].p), v);
    dlc_msg rs = fragment_msg(2, 0, 0, DLC_MSG_RESYNC, v, n);
    rs.steps = 5;
    float own[NMAX];
    gather(&w.x[2], 0, dlc_params_data(w.x[2].p), own);
    CHECK(dlc_learner_receive(w.l[2], &rs, 7.5) == DLC_OK);
    CHECK(dlc_learner_state_of(w.l[2]) == DLC_LEARNER_TRAINING);
    CHECK(dlc_learner_step_begin(w.l[2], 7.5) == DLC_OK);
    lrec r = drain(w.l[2]);
    CHECK(r.n == 0 && !dlc_learner_replaying(w.l[2]));
    gather(&w.x[2], 0, dlc_params_data(w.x[2].p), v);
    CHECK(memcmp(v, own, (size_t)n * sizeof(float)) == 0);
    CHECK(dlc_learner_gradient(w.l[2], 32, 8) == DLC_OK);
    CHECK(dlc_learner_poll(w.l[2], &a) == 1 && a.msg.type == DLC_MSG_GRADIENT && a.msg.version == 6);
    world_free(&w);
}

/* ---- the assert ---- */

/* No public call reaches an illegal transition (each refuses with DLC_ERR_STATE, checked
 * above and here); what is tested is that dlc_assert_fail / DLC_ASSERT abort. */
static int aborts(int which) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        FILE *devnull = freopen("/dev/null", "w", stderr);
        (void)devnull;
        if (which == 0) dlc_assert_fail("learner: illegal transition", __FILE__, __LINE__);
        else DLC_ASSERT(which == 0);
        _exit(0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static void test_assert_and_refusals(void) {
    CHECK(aborts(0) == 1);
    CHECK(aborts(1) == 1);
    fx x;
    fx_make(&x, 1, 100);
    dlc_learner_params lp = lparams(0, 4, 0, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (l) {
        CHECK(dlc_learner_step_done(l, 1, 0, 0) == DLC_ERR_STATE);
        CHECK(strstr(dlc_last_error(), "joining") != NULL);
        CHECK(dlc_learner_restart(l, 0) == DLC_ERR_STATE);
        resync(&x, l, dlc_params_data(x.p), 0, 0);
        CHECK(dlc_learner_gradient(l, 1, 0) == DLC_ERR_STATE); /* not data parallel */
        /* no silent loss: with a contribution unpolled every event is refused, naming the
         * count, changing nothing; the contribution is still there to poll */
        CHECK(dlc_learner_contribute(l, 0, 0) == DLC_OK && dlc_learner_pending(l) == 1);
        int64_t n0 = dlc_plan_numel(x.plan, 0);
        dlc_learner_action peek;
        CHECK(dlc_learner_step_done(l, 1, 0, 0) == DLC_ERR_STATE);
        CHECK(strstr(dlc_last_error(), "learner_step_done: learner 1 has 1 unpolled action:") != NULL); /* id 0 */
        CHECK(dlc_learner_contribute(l, 0, 0) == DLC_ERR_STATE && dlc_learner_handle_expiry(l, 5) == DLC_ERR_STATE);
        dlc_msg fr = fragment_msg(0, 0, 1, 0, dlc_params_data(x.p), n0);
        CHECK(dlc_learner_receive(l, &fr, 0) == DLC_ERR_STATE);
        CHECK(dlc_learner_steps(l) == 0 && dlc_learner_base_version(l, 0) == 0 && dlc_learner_pending(l) == 1);
        CHECK(dlc_learner_poll(l, &peek) == 1 && peek.type == DLC_LACT_SEND && peek.msg.fragment == 0);
        CHECK(dlc_learner_step_done(l, 1, 0, 0) == DLC_OK && dlc_learner_steps(l) == 1);
        CHECK(dlc_learner_pending(l) == 0 && dlc_learner_poll(l, &peek) == 0);
        CHECK(dlc_learner_step_done(l, -1, 0, 0) == DLC_ERR_ARG);
        dlc_msg hb = {.type = DLC_MSG_HEARTBEAT};
        CHECK(dlc_learner_receive(l, &hb, 0) == DLC_ERR_FORMAT);
        dlc_learner_stop(l);
        dlc_learner_stop(l); /* twice: no transition */
        CHECK(dlc_learner_contribute(l, 0, 0) == DLC_ERR_STATE);
        CHECK(dlc_learner_state_of(l) == DLC_LEARNER_STOPPED);
        dlc_learner_free(l);
    }
    lp.tau = 4;
    CHECK_PFAILS(dlc_learner_new(&lp, x.p, x.plan), DLC_ERR_ARG, "tau = 4");
    lp = lparams(0, 4, 0, 1.5, 0);
    CHECK_PFAILS(dlc_learner_new(&lp, x.p, x.plan), DLC_ERR_ARG, "alpha");
    CHECK(strcmp(dlc_learner_state_name(DLC_LEARNER_WAITING), "waiting") == 0);
    CHECK(dlc_learner_state_name(DLC_LEARNER_STATE_COUNT) == NULL);
    fx_free(&x);
}

/* A learner that joins a running run takes its schedule phase from the resync: with the
 * run at schedule step 30 (P = 4, H = 8, off_p = 2p), fragment 0 is due after 2 more steps
 * (32), fragment 1 after 4 (34), and its heartbeats report the schedule step. */
static void test_phase(void) {
    fx x;
    fx_make(&x, 4, 95);
    dlc_learner_params lp = lparams(1, 8, 1, 0, 0);
    lp.heartbeat = 1.0;
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    float model[256];
    memcpy(model, dlc_params_data(x.p), (size_t)dlc_params_size(x.p) * sizeof(float));
    for (int p = 0; p < 4; p++) {
        float v[NMAX];
        gather(&x, p, model, v);
        dlc_msg m = fragment_msg(1, p, 3, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, p));
        m.steps = 30;
        CHECK(dlc_learner_receive(l, &m, 5.0) == DLC_OK);
        drain(l);
    }
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    int sent_at[4] = {0, 0, 0, 0};
    for (int t = 1; t <= 8; t++) {
        CHECK(dlc_learner_step_done(l, 4, 1.0, 5.0 + 0.1 * t) == DLC_OK); /* before any heartbeat is due */
        lrec r = drain(l);
        for (int i = 0; i < r.n; i++)
            if (r.a[i].type == DLC_LACT_SEND && r.a[i].msg.type == DLC_MSG_CONTRIBUTION && !sent_at[r.a[i].msg.fragment])
                sent_at[r.a[i].msg.fragment] = t;
    }
    CHECK(sent_at[0] == 2 && sent_at[1] == 4 && sent_at[2] == 6 && sent_at[3] == 8);
    CHECK(dlc_learner_handle_expiry(l, 100.0) == DLC_OK);
    lrec r = drain(l);
    CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_HEARTBEAT && r.a[0].msg.steps == 38);
    dlc_learner_free(l);
    fx_free(&x);
}

/* The exact phase: a resync that says fragment 1's latest round opened 2.5 s ago with
 * steps of 1 s (P = 4, H = 8, off_p = 2p) puts the newcomer's fragment 1 six steps on,
 * where the others send it again (8 − 2.5 = 5.5, rounded), and the others in step:
 * fragment 3 after 2 steps, 0 after 4, 2 after 8. */
static void test_phase_from_age(void) {
    fx x;
    fx_make(&x, 4, 96);
    dlc_learner_params lp = lparams(1, 8, 1, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    for (int p = 0; p < 4; p++) {
        float v[NMAX];
        gather(&x, p, dlc_params_data(x.p), v);
        dlc_msg m = fragment_msg(1, p, 3, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, p));
        m.steps = 30; /* the heartbeat estimate, overruled by the round's age */
        m.held = p == 1 ? 2.5 : p == 2 ? 4.5 : -1;
        m.step_time = 1.0;
        CHECK(dlc_learner_receive(l, &m, 5.0) == DLC_OK);
        drain(l);
    }
    /* in step (phase = 4 mod 8) at the run's step: 28, the nearest to 30 (not 4 + 8 = 12,
     * which would start its schedule over) */
    CHECK(dlc_learner_schedule_step(l) == 28);
    int sent_at[4] = {0, 0, 0, 0};
    for (int t = 1; t <= 8; t++) {
        CHECK(dlc_learner_step_done(l, 4, 1.0, 5.0 + t) == DLC_OK);
        lrec r = drain(l);
        for (int i = 0; i < r.n; i++)
            if (r.a[i].type == DLC_LACT_SEND && r.a[i].msg.type == DLC_MSG_CONTRIBUTION && !sent_at[r.a[i].msg.fragment])
                sent_at[r.a[i].msg.fragment] = t;
    }
    CHECK(sent_at[0] == 4 && sent_at[1] == 6 && sent_at[2] == 8 && sent_at[3] == 2);
    dlc_learner_free(l);
    fx_free(&x);
}

/* A learner restarted late in a run joins at the run's step, in step with the others:
 * with fragment 1's round 2.5 s old (phase = 4 mod 8, as above) and the run at schedule
 * step `run`, its schedule step is the nearest step = 4 mod 8, at least 12 (never before
 * an offset): a restart at step 500 must not start its schedule over at 12. */
static void test_phase_late(void) {
    const int64_t run[] = {0, 3, 30, 35, 500, 503};
    const int64_t want[] = {12, 12, 28, 36, 500, 500};
    for (int c = 0; c < 6; c++) {
        fx x;
        fx_make(&x, 4, 99 + c);
        dlc_learner_params lp = lparams(1, 8, 1, 0, 0);
        dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
        CHECK_OK(l);
        if (!l) return;
        for (int p = 0; p < 4; p++) {
            float v[NMAX];
            gather(&x, p, dlc_params_data(x.p), v);
            dlc_msg m = fragment_msg(1, p, 3, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, p));
            m.steps = run[c];
            m.held = p == 1 ? 2.5 : -1;
            m.step_time = 1.0;
            CHECK(dlc_learner_receive(l, &m, 5.0) == DLC_OK);
            drain(l);
        }
        CHECK(dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
        if (dlc_learner_schedule_step(l) != want[c])
            fprintf(stderr, "run step %lld: joined at %lld, expected %lld\n", (long long)run[c],
                    (long long)dlc_learner_schedule_step(l), (long long)want[c]);
        CHECK(dlc_learner_schedule_step(l) == want[c]);
        dlc_learner_free(l);
        fx_free(&x);
    }
}

/* A learner that reconnects (paused, cut) is resynced whole, so it takes the run's step
 * and phase as a rejoin does: trained 5 steps, then a whole resync with the run at step
 * 300 and fragment 1's round 2.5 s old (phase = 4 mod 8) puts it at 300; its fragments
 * are then due in step with the others (fragment 3 after 2 steps, 0 after 4, 1 after 6).
 * A single resync (a refused contribution's: no run step) moves nothing. */
static void test_phase_reconnect(void) {
    fx x;
    fx_make(&x, 4, 110);
    dlc_learner_params lp = lparams(1, 8, 1, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    for (int p = 0; p < 4; p++) {
        float v[NMAX];
        gather(&x, p, dlc_params_data(x.p), v);
        dlc_msg m = fragment_msg(1, p, 3, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, p));
        CHECK(dlc_learner_receive(l, &m, 1.0) == DLC_OK);
        drain(l);
    }
    for (int t = 1; t <= 5; t++) {
        CHECK(dlc_learner_step_done(l, 4, 1.0, 1.0 + t) == DLC_OK);
        drain(l);
    }
    CHECK(dlc_learner_schedule_step(l) == 5);
    float v[NMAX];
    gather(&x, 2, dlc_params_data(x.p), v);
    dlc_msg one = fragment_msg(1, 2, 9, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, 2));
    CHECK(dlc_learner_receive(l, &one, 7.0) == DLC_OK);
    drain(l);
    CHECK(dlc_learner_schedule_step(l) == 5);
    for (int p = 0; p < 4; p++) {
        gather(&x, p, dlc_params_data(x.p), v);
        dlc_msg m = fragment_msg(1, p, 10, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, p));
        m.steps = 301;
        m.held = p == 1 ? 2.5 : -1;
        m.step_time = 1.0;
        CHECK(dlc_learner_receive(l, &m, 8.0) == DLC_OK);
        drain(l);
        if (p < 3) CHECK(dlc_learner_schedule_step(l) == 5); /* not before the whole model is in */
    }
    CHECK(dlc_learner_schedule_step(l) == 300);
    int sent_at[4] = {0, 0, 0, 0};
    for (int t = 1; t <= 8; t++) {
        CHECK(dlc_learner_step_done(l, 4, 1.0, 8.0 + t) == DLC_OK);
        lrec r = drain(l);
        for (int i = 0; i < r.n; i++)
            if (r.a[i].type == DLC_LACT_SEND && r.a[i].msg.type == DLC_MSG_CONTRIBUTION && !sent_at[r.a[i].msg.fragment])
                sent_at[r.a[i].msg.fragment] = t;
    }
    CHECK(sent_at[0] == 4 && sent_at[1] == 6 && sent_at[2] == 8 && sent_at[3] == 2);
    dlc_learner_free(l);
    fx_free(&x);
}

/* Holding a merge (learner.h, "Step boundaries"): a merge of fragment p that arrives
 * after the learner trained p without sending it (the others' round, out of phase with
 * its own) waits for its own send of p and τ steps, so the steps it trained on p leave in
 * its contribution instead of being overwritten; only the first version past its base
 * is held, and never a resync; with H = 0 (the driver's own schedule) nothing is held.  P = 2,
 * H = 8 (offsets 0 and 4), τ = 1, α = 0. */
static void test_hold(void) {
    fx x;
    fx_make(&x, 2, 140);
    dlc_learner_params lp = lparams(0, 8, 1, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    int64_t size = dlc_params_size(x.p), n0 = dlc_plan_numel(x.plan, 0);
    float *model = malloc((size_t)size * 4), *target = malloc((size_t)size * 4);
    memcpy(model, dlc_params_data(x.p), (size_t)size * 4);
    randv(target, size, 141, 1.0f);
    resync(&x, l, model, 0, 0.0);
    float hat0[NMAX], g1[NMAX], g2[NMAX];
    gather(&x, 0, model, hat0);
    randv(g1, n0, 142, 1.0f);
    randv(g2, n0, 143, 1.0f);
    lrec r;
    int sent0 = 0, applied0 = 0;
    for (int t = 1; t <= 9; t++) {
        CHECK(dlc_learner_step_begin(l, t - 0.5) == DLC_OK);
        r = drain(l);
        applied0 += find(&r, DLC_LACT_APPLIED, 0) != NULL;
        inner_step(x.p, target);
        float th[NMAX];
        gather(&x, 0, dlc_params_data(x.p), th);
        CHECK(dlc_learner_step_done(l, 4, 1.0, (double)t) == DLC_OK);
        r = drain(l);
        const dlc_learner_action *sa = find(&r, DLC_LACT_SEND, 0);
        const dlc_learner_action *ap = find(&r, DLC_LACT_APPLIED, 0);
        if (sa) {
            /* all 8 steps on fragment 0 leave, against Θ̂ of version 0 */
            sent0 = t;
            CHECK(sa->msg.version == 0 && sa->msg.steps == 8 && sa->msg.tokens == 32);
            float want[NMAX];
            for (int64_t i = 0; i < n0; i++) want[i] = hat0[i] - th[i];
            CHECK(memcmp(sa->msg.payload, want, (size_t)n0 * 4) == 0);
            /* outstanding: fragment 1 (sent at 4, no merge) and 0 (the held merge is older) */
            CHECK(dlc_learner_outstanding(l) == 2);
        }
        if (ap) {
            applied0++;
            CHECK(t == 9 && ap->version == 1 && ap->lag == 1 && ap->resync == 0);
            float now[NMAX];
            gather(&x, 0, dlc_params_data(x.p), now);
            CHECK(memcmp(now, g1, (size_t)n0 * 4) == 0); /* α = 0: the merge itself */
        }
        CHECK(applied0 == (t >= 9) && dlc_learner_base_version(l, 0) == (t >= 9 ? 1 : 0));
        if (t == 1) { /* the others' round of fragment 0: held */
            dlc_msg m = fragment_msg(0, 0, 1, 0, g1, n0);
            m.held = -1; /* no catch-up (test_catch_up) */
            CHECK(dlc_learner_receive(l, &m, 1.5) == DLC_OK && drain(l).n == 0);
        }
    }
    CHECK(sent0 == 8 && applied0 == 1);
    {
        /* held again after the apply and a step (one version past the base, 1); one more
         * past it is not held, for the contribution would leave ever staler (every
         * version between its base and the syncer's is undone in part by its merge): at
         * the next boundary */
        dlc_msg m = fragment_msg(0, 0, 2, 0, g2, n0);
        m.held = -1;
        CHECK(dlc_learner_receive(l, &m, 9.5) == DLC_OK);
        CHECK(dlc_learner_step_done(l, 4, 1.0, 9.55) == DLC_OK && drain(l).n == 0);
        CHECK(dlc_learner_step_begin(l, 9.6) == DLC_OK && drain(l).n == 0);
        m = fragment_msg(0, 0, 3, 0, g1, n0);
        m.held = -1;
        CHECK(dlc_learner_receive(l, &m, 9.65) == DLC_OK);
        CHECK(dlc_learner_step_begin(l, 9.7) == DLC_OK);
        r = drain(l);
        CHECK(r.n == 1 && r.a[0].type == DLC_LACT_APPLIED && r.a[0].version == 3 && r.a[0].lag == -1);
        /* a resync is never held */
        CHECK(dlc_learner_step_done(l, 4, 1.0, 9.75) == DLC_OK && drain(l).n == 0);
        m = fragment_msg(0, 0, 4, 0, g2, n0);
        m.held = -1;
        CHECK(dlc_learner_receive(l, &m, 9.76) == DLC_OK);
        CHECK(dlc_learner_step_begin(l, 9.77) == DLC_OK && drain(l).n == 0); /* held */
        m = fragment_msg(0, 0, 5, DLC_MSG_RESYNC, g2, n0);
        CHECK(dlc_learner_receive(l, &m, 9.78) == DLC_OK);
        CHECK(dlc_learner_step_begin(l, 9.8) == DLC_OK);
        r = drain(l);
        CHECK(r.n == 1 && r.a[0].type == DLC_LACT_APPLIED && r.a[0].version == 5 && r.a[0].resync == 1);
    }
    dlc_learner_free(l);
    /* H = 0: the driver's own schedule; a merge is applied at the next boundary */
    lp = lparams(0, 0, 1, 0, 0);
    l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (l) {
        resync(&x, l, model, 0, 0.0);
        CHECK(dlc_learner_step_done(l, 4, 1.0, 1.0) == DLC_OK && drain(l).n == 0);
        dlc_msg m = fragment_msg(0, 0, 1, 0, g1, n0);
        CHECK(dlc_learner_receive(l, &m, 1.5) == DLC_OK);
        CHECK(dlc_learner_step_begin(l, 1.6) == DLC_OK);
        r = drain(l);
        CHECK(r.n == 1 && r.a[0].type == DLC_LACT_APPLIED && r.a[0].version == 1 && r.a[0].lag == -1);
        dlc_learner_free(l);
    }
    free(model);
    free(target);
    fx_free(&x);
}

/* Catching up (learner.h): a merge of a fragment the learner has not sent since it last
 * applied it moves its schedule on by the lag of its own send behind the others' (1 to
 * H/2 steps, measured from where it is within its step, rounded so that it lands at most
 * a quarter step ahead of them), so its next sends leave with theirs; no move for a
 * fragment it sent, a lag over H/2, no `held`, or a second move within H/P steps.  H = 8,
 * P = 2 (offsets 0 and 4), one second a step. */
static void test_catch_up(void) {
    fx x;
    fx_make(&x, 2, 130);
    dlc_learner_params lp = lparams(0, 8, 1, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    float model[NMAX * 2];
    memcpy(model, dlc_params_data(x.p), (size_t)dlc_params_size(x.p) * sizeof(float));
    resync(&x, l, model, 0, 0.0);
    lrec r;
    for (int t = 1; t <= 4; t++) {
        CHECK(dlc_learner_step_done(l, 4, 1.0, (double)t) == DLC_OK);
        r = drain(l);
    }
    CHECK(find(&r, DLC_LACT_SEND, 1) != NULL); /* fragment 1 left at its offset, 4 */
    float v0[NMAX], v1[NMAX];
    gather(&x, 0, model, v0);
    gather(&x, 1, model, v1);
    int64_t n0 = dlc_plan_numel(x.plan, 0), n1 = dlc_plan_numel(x.plan, 1);
    /* fragment 1's merge: it sent fragment 1 (sent_step 4), so no move whatever held says */
    dlc_msg m = fragment_msg(0, 1, 1, 0, v1, n1);
    m.held = 1.0;
    CHECK(dlc_learner_receive(l, &m, 4.5) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 0 && dlc_learner_schedule_step(l) == 4);
    for (int t = 5; t <= 6; t++) {
        CHECK(dlc_learner_step_done(l, 4, 1.0, (double)t) == DLC_OK);
        drain(l);
    }
    /* half-way through step 7, fragment 0 is next due at 8 (1.5 steps on): the others sent
     * it 3.5 s ago, a lag of 5 > 4 */
    m = fragment_msg(0, 0, 1, 0, v0, n0);
    m.held = 3.5;
    CHECK(dlc_learner_receive(l, &m, 6.5) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 0 && dlc_learner_schedule_step(l) == 6);
    m = fragment_msg(0, 0, 2, 0, v0, n0); /* no held: nothing to go by */
    m.held = -1;
    CHECK(dlc_learner_receive(l, &m, 6.6) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 0 && dlc_learner_schedule_step(l) == 6);
    /* 0.7 s into step 7, sent 1 s ago: its own leaves 1.3 + 1 = 2.3 steps after theirs,
     * the schedule moves on by 2 (3, a whole step more, would put it ahead of them) */
    m = fragment_msg(0, 0, 3, 0, v0, n0);
    m.held = 1.0;
    CHECK(dlc_learner_receive(l, &m, 6.7) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 1 && r.a[0].type == DLC_LACT_PHASE && r.a[0].fragment == 0 && r.a[0].lag == 2 &&
          r.a[0].schedule == 8);
    CHECK(dlc_learner_schedule_step(l) == 8 && dlc_learner_steps(l) == 6);
    /* fragment 1's next merge would move it by 4 (due in 4 - 0.8, sent 1 s ago), but it
     * caught up 0 < H/P steps ago: no move */
    m = fragment_msg(0, 1, 2, 0, v1, n1);
    m.held = 1.0;
    CHECK(dlc_learner_receive(l, &m, 6.8) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 0 && dlc_learner_schedule_step(l) == 8);
    /* the move skipped step 8, where fragment 0 was due: it leaves at the next step_done,
     * with the 7 steps trained since the resync; then from 9: fragment 1 at 12 (4 steps
     * on), fragment 0 at 16 (8 steps on), in step with the others' next rounds (theirs:
     * 1 s ago + 8) */
    int sends[2][3] = {{0}}, ns[2] = {0, 0};
    for (int t = 1; t <= 8; t++) {
        CHECK(dlc_learner_step_done(l, 4, 1.0, 6.7 + t) == DLC_OK);
        r = drain(l);
        for (int i = 0; i < r.n; i++) {
            int p = r.a[i].type == DLC_LACT_SEND ? r.a[i].msg.fragment : -1;
            if (p >= 0 && ns[p] < 3) sends[p][ns[p]++] = t;
            if (p == 0 && t == 1) CHECK(r.a[i].msg.steps == 7 && r.a[i].msg.version == 0);
        }
    }
    CHECK(ns[0] == 2 && sends[0][0] == 1 && sends[0][1] == 8);
    CHECK(ns[1] == 1 && sends[1][0] == 4);
    /* a replaying host moves it the same way: skip_to sends what the skip passes over;
     * back is refused */
    CHECK(dlc_learner_skip_to(l, dlc_learner_schedule_step(l) - 1) == DLC_ERR_ARG);
    int64_t t0 = dlc_learner_schedule_step(l); /* 16: fragment 1 next due at 20 */
    CHECK(dlc_learner_skip_to(l, t0 + 4) == DLC_OK && dlc_learner_schedule_step(l) == t0 + 4);
    CHECK(dlc_learner_step_done(l, 4, 1.0, 20.0) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 1 && r.a[0].type == DLC_LACT_SEND && r.a[0].msg.fragment == 1);
    dlc_learner_free(l);
    fx_free(&x);
}

/* Catching up from a round the learner was in, or missed (learner.h): a contribution
 * that arrived `age` - `held` after the round's first moves the schedule on by that lag
 * (rounded to land at most a quarter step ahead); one that missed the round moves it by
 * how long after the round's first contribution it left; nothing under a lag of 0.75
 * step, within H/P steps of the last move, with no age in a blocking preset.  H = 8,
 * P = 2 (offsets 0 and 4), tau = 1, one second a step. */
static void test_catch_up_in_round(void) {
    fx x;
    fx_make(&x, 2, 131);
    for (int blocking = 0; blocking <= 1; blocking++) {
        dlc_learner_params lp = lparams(0, 8, 1, 0, blocking);
        dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
        CHECK_OK(l);
        if (!l) continue;
        float model[NMAX * 2], v0[NMAX], v1[NMAX];
        memcpy(model, dlc_params_data(x.p), (size_t)dlc_params_size(x.p) * sizeof(float));
        resync(&x, l, model, 0, 0.0);
        gather(&x, 0, model, v0);
        gather(&x, 1, model, v1);
        int64_t n0 = dlc_plan_numel(x.plan, 0), n1 = dlc_plan_numel(x.plan, 1);
        lrec r;
        for (int t = 1; t <= 4; t++) {
            CHECK(dlc_learner_step_done(l, 4, 1.0, (double)t) == DLC_OK);
            r = drain(l);
        }
        CHECK(find(&r, DLC_LACT_SEND, 1) != NULL); /* fragment 1 left at 4 */
        /* its contribution came 0.5 s after the round's first: under 0.75 step, no move */
        dlc_msg m = fragment_msg(0, 1, 1, 0, v1, n1);
        m.held = 0.3, m.age = 0.8;
        CHECK(dlc_learner_receive(l, &m, 4.5) == DLC_OK);
        r = drain(l);
        CHECK(r.n == 0 && dlc_learner_schedule_step(l) == 4);
        /* the next round's merge: 1.7 s after the first, a move of 1 (not in blocking) */
        m = fragment_msg(0, 1, 2, 0, v1, n1);
        m.held = 0.3, m.age = 2.0;
        CHECK(dlc_learner_receive(l, &m, 4.6) == DLC_OK);
        r = drain(l);
        if (blocking) {
            CHECK(r.n == 0 && dlc_learner_schedule_step(l) == 4);
        } else {
            CHECK(r.n == 1 && r.a[0].type == DLC_LACT_PHASE && r.a[0].fragment == 1 && r.a[0].lag == 1 &&
                  r.a[0].schedule == 5);
            CHECK(dlc_learner_schedule_step(l) == 5 && dlc_learner_steps(l) == 4);
        }
        /* fragment 0 leaves at schedule step 8: step 7 here (8 in blocking) */
        int64_t sent = -1;
        for (int t = 5; t <= 8; t++) {
            CHECK(dlc_learner_step_done(l, 4, 1.0, (double)t) == DLC_OK);
            r = drain(l);
            if (find(&r, DLC_LACT_SEND, 0)) sent = t;
        }
        CHECK(sent == (blocking ? 8 : 7));
        if (blocking) {
            dlc_learner_free(l);
            continue;
        }
        /* a merge of fragment 0 its contribution missed (no age): the round began 3 s
         * before it arrived at 8.6, the links take about 0.25 s: its own left 1.65 steps after
         * the first, a move of 1, 4 steps after the last (H/P) */
        m = fragment_msg(0, 0, 1, 0, v0, n0);
        m.held = 3.0;
        CHECK(dlc_learner_receive(l, &m, 8.6) == DLC_OK);
        r = drain(l);
        CHECK(r.n == 1 && r.a[0].type == DLC_LACT_PHASE && r.a[0].fragment == 0 && r.a[0].lag == 1 &&
              r.a[0].schedule == 10);
        /* and within H/P steps of that move, none: the next merge (2 steps late) waits */
        CHECK(dlc_learner_step_done(l, 4, 1.0, 9.0) == DLC_OK);
        drain(l);
        m = fragment_msg(0, 0, 2, 0, v0, n0);
        m.held = 0.1, m.age = 2.1;
        CHECK(dlc_learner_receive(l, &m, 9.2) == DLC_OK);
        r = drain(l);
        CHECK(r.n == 0 && dlc_learner_schedule_step(l) == 11);
        dlc_learner_free(l);
    }
    fx_free(&x);
}

/* A learner lastingly slower than the others (learner.h, "Catching up"): every merge of
 * a fragment it sent says its contribution came 3 steps after the round's first, however
 * often it moves.  It moves on by at most one step in 8 it trains (after the H/2 it may
 * move at any time), so it keeps its own schedule and contributes what it trains instead
 * of shortening every contribution; a learner drifting by less than that still moves as
 * often as it needs.  H = 8, P = 2, tau = 1, one second a step, 400 steps. */
static void test_catch_up_budget(void) {
    fx x;
    fx_make(&x, 2, 132);
    dlc_learner_params lp = lparams(0, 8, 1, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    float model[NMAX * 2], v[2][NMAX];
    memcpy(model, dlc_params_data(x.p), (size_t)dlc_params_size(x.p) * sizeof(float));
    resync(&x, l, model, 0, 0.0);
    gather(&x, 0, model, v[0]);
    gather(&x, 1, model, v[1]);
    int64_t n[2] = {dlc_plan_numel(x.plan, 0), dlc_plan_numel(x.plan, 1)}, version[2] = {0, 0};
    int64_t moved = 0, moves = 0, sent_steps = 0, sends = 0, first = -1;
    const int T = 400;
    for (int t = 1; t <= T; t++) {
        CHECK(dlc_learner_step_begin(l, t - 0.9) == DLC_OK);
        drain(l);
        CHECK(dlc_learner_step_done(l, 4, 1.0, (double)t) == DLC_OK);
        lrec r = drain(l);
        for (int i = 0; i < r.n; i++) {
            if (r.a[i].type != DLC_LACT_SEND) continue;
            int p = r.a[i].msg.fragment;
            sends++, sent_steps += r.a[i].msg.steps;
            dlc_msg m = fragment_msg(0, p, ++version[p], 0, v[p], n[p]);
            m.held = 0.2, m.age = 3.2; /* arrived 3 s after the round's first */
            CHECK(dlc_learner_receive(l, &m, t + 0.1) == DLC_OK);
            lrec q = drain(l);
            for (int j = 0; j < q.n; j++)
                if (q.a[j].type == DLC_LACT_PHASE) {
                    if (first < 0) first = t;
                    moves++, moved += q.a[j].lag;
                    CHECK(q.a[j].lag == 3);
                }
        }
    }
    /* the first move at once, from the H/2 it starts with; then at most 1 step in 8 */
    CHECK(first == 4);
    CHECK(moved <= 4 + T / 8 && moved >= T / 8 - 3);
    /* its contributions carry what it trained: H - tau = 7 steps each less the few the
     * moves took (6.1 on the mean; moving at every chance, 4) */
    CHECK(sends > 0 && (double)sent_steps / (double)sends > 5.5);
    dlc_learner_free(l);
    fx_free(&x);
}

/* A dp learner restored from a checkpoint of step 40 (a non-elastic rollback) continues
 * its schedule there: its next GRADIENT is for step 41.  Refused while it waits for the
 * average, before it joined, and for a negative step. */
static void test_set_schedule_step(void) {
    fx x;
    fx_make(&x, 1, 120);
    dlc_learner_params lp = lparams(0, 0, 0, 0, 0);
    lp.dp = 1;
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    CHECK(dlc_learner_set_schedule_step(l, 40) == DLC_ERR_STATE); /* JOINING */
    resync(&x, l, dlc_params_data(x.p), 0, 0);
    CHECK(dlc_learner_set_schedule_step(l, -1) == DLC_ERR_ARG);
    CHECK(dlc_learner_set_schedule_step(l, 40) == DLC_OK);
    CHECK(dlc_learner_schedule_step(l) == 40);
    CHECK(dlc_learner_gradient(l, 16, 1.0) == DLC_OK);
    lrec r = drain(l);
    CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_GRADIENT && r.a[0].msg.version == 41);
    CHECK(dlc_learner_set_schedule_step(l, 7) == DLC_ERR_STATE); /* WAITING */
    CHECK(dlc_learner_schedule_step(l) == 40);
    dlc_learner_free(l);
    fx_free(&x);
}

/* Hostile messages to a learner: a type a learner never takes, a NaN fragment, a NaN or
 * wrong-codec averaged gradient; each refused with DLC_ERR_FORMAT, nothing changed.  A
 * NaN resync while it joins (decoded where the join puts it, its base) is refused too,
 * and the join's next resync gives it the model and the base it rolls back to. */
static void test_hostile(void) {
    fx x;
    fx_make(&x, 1, 97);
    int64_t n = dlc_plan_numel(x.plan, 0);
    dlc_learner_params lp = lparams(0, 8, 0, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    {
        float bad[NMAX];
        gather(&x, 0, dlc_params_data(x.p), bad);
        for (int64_t i = 0; i < n; i++) bad[i] += 1.0f;
        bad[n - 1] = NAN;
        dlc_msg m = fragment_msg(0, 0, 0, DLC_MSG_RESYNC, bad, n);
        CHECK(dlc_learner_receive(l, &m, 0) == DLC_ERR_FORMAT && drain(l).n == 0);
        CHECK(dlc_learner_state_of(l) == DLC_LEARNER_JOINING);
    }
    resync(&x, l, dlc_params_data(x.p), 0, 0);
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    {
        /* its base is the model: a rollback after a step that moved the arena puts the
         * model back exactly (a NaN left in the base by the refused resync would show) */
        float before[NMAX], after[NMAX];
        gather(&x, 0, dlc_params_data(x.p), before);
        float *th = dlc_params_data(x.p);
        for (int64_t i = 0; i < dlc_params_size(x.p); i++) th[i] += 0.5f;
        CHECK(dlc_learner_step_done(l, 4, 1.0, 0.5) == DLC_OK);
        drain(l);
        CHECK(dlc_learner_rollback(l, 0.6) == DLC_OK);
        drain(l);
        gather(&x, 0, dlc_params_data(x.p), after);
        CHECK(memcmp(before, after, (size_t)n * sizeof(float)) == 0);
    }
    float v[NMAX], snap[256];
    gather(&x, 0, dlc_params_data(x.p), v);
    v[n / 3] = NAN;
    memcpy(snap, dlc_params_data(x.p), (size_t)dlc_params_size(x.p) * 4);
    dlc_msg cases[] = {
        {.type = DLC_MSG_HEARTBEAT},
        {.type = DLC_MSG_CONTRIBUTION},
        {.type = DLC_MSG_TYPE_COUNT + 1},
        fragment_msg(0, 0, 1, 0, v, n),
        fragment_msg(0, 0, 1, DLC_MSG_RESYNC, v, n),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(dlc_learner_receive(l, &cases[i], 1.0) == DLC_ERR_FORMAT);
        CHECK(drain(l).n == 0);
        CHECK(memcmp(snap, dlc_params_data(x.p), (size_t)dlc_params_size(x.p) * 4) == 0);
        CHECK(dlc_learner_base_version(l, 0) == 0 && dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    }
    /* a well-formed merge addressed to another learner (texts name learners by number:
     * this one, id 0, is learner 1; id 3 is learner 4) */
    float w[NMAX];
    gather(&x, 0, dlc_params_data(x.p), w);
    dlc_msg other = fragment_msg(3, 0, 1, 0, w, n);
    CHECK(dlc_learner_receive(l, &other, 1.0) == DLC_ERR_FORMAT &&
          strstr(dlc_last_error(), "learner 1: a fragment addressed to learner 4, refused") != NULL);
    CHECK(drain(l).n == 0 && dlc_learner_base_version(l, 0) == 0);
    other.learner = 0; /* the same, to this one: taken */
    CHECK(dlc_learner_receive(l, &other, 1.0) == DLC_OK && dlc_learner_step_begin(l, 2.0) == DLC_OK);
    CHECK(dlc_learner_base_version(l, 0) == 1);
    /* what it applied is the merge, whole: the refused NaN fragments were decoded where a
     * merge waits (its stash, nothing waiting then) and left no trace there */
    float got[NMAX];
    gather(&x, 0, dlc_params_data(x.p), got);
    CHECK(memcmp(got, w, (size_t)n * sizeof(float)) == 0);
    dlc_learner_free(l);
    /* dp: the averaged gradient */
    lp.dp = 1;
    l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    resync(&x, l, dlc_params_data(x.p), 0, 0);
    CHECK(dlc_learner_gradient(l, 4, 1.0) == DLC_OK);
    drain(l);
    dlc_msg g = {.type = DLC_MSG_GRADIENT_AVG, .version = 1, .codec = DLC_CODEC_F32, .payload = (const uint8_t *)v,
                 .len = (size_t)n * 4};
    CHECK(dlc_learner_receive(l, &g, 1.1) == DLC_ERR_FORMAT); /* a NaN */
    g.learner = 2, g.payload = (const uint8_t *)w;
    CHECK(dlc_learner_receive(l, &g, 1.1) == DLC_ERR_FORMAT && strstr(dlc_last_error(), "addressed to learner 3"));
    g.learner = 0, g.payload = (const uint8_t *)v;
    g.codec = DLC_CODEC_BF16;
    CHECK(dlc_learner_receive(l, &g, 1.1) == DLC_ERR_FORMAT);
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_WAITING && drain(l).n == 0);
    dlc_learner_free(l);
    fx_free(&x);
}

/* Fencing (learner.h): stamps on what it sends; a FRAGMENT of an older syncer epoch is
 * refused and changes nothing; a newer epoch is adopted; restart bumps the incarnation. */
static void test_fence(void) {
    fx x;
    fx_make(&x, 2, 90);
    int64_t size = dlc_params_size(x.p);
    float *model = malloc((size_t)size * 4), *target = malloc((size_t)size * 4);
    randv(model, size, 91, 1.0f);
    randv(target, size, 92, 1.0f);
    dlc_learner_params lp = lparams(1, 4, 1, 0, 0);
    lp.incarnation = 0;
    CHECK(dlc_learner_new(&lp, x.p, x.plan) == NULL && strstr(dlc_last_error(), "incarnation = 0"));
    lp.incarnation = 7;
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    CHECK(dlc_learner_incarnation(l) == 7 && dlc_learner_epoch(l) == 0 && dlc_learner_default_params().incarnation == 1);
    /* the resync of epoch 2 */
    float v[NMAX];
    for (int p = 0; p < 2; p++) {
        gather(&x, p, model, v);
        dlc_msg m = fragment_msg(1, p, 3, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, p));
        m.epoch = 2, m.incarnation = 7;
        CHECK(dlc_learner_receive(l, &m, 0) == DLC_OK);
        drain(l);
    }
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_TRAINING && dlc_learner_epoch(l) == 2);
    /* fragment 0 is due after step 4: the contribution carries epoch 2, incarnation 7 */
    for (int t = 1; t <= 4; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 5, 0.1, t) == DLC_OK);
        lrec r = drain(l);
        if (t == 4) {
            const dlc_learner_action *a = find(&r, DLC_LACT_SEND, 0);
            CHECK(a && a->msg.type == DLC_MSG_CONTRIBUTION && a->msg.epoch == 2 && a->msg.incarnation == 7);
        }
    }
    /* a merge of epoch 1 (a previous syncer still talking): refused, nothing applied */
    float before[NMAX], got[NMAX];
    gather(&x, 0, dlc_params_data(x.p), before);
    gather(&x, 0, target, v);
    dlc_msg m = fragment_msg(1, 0, 4, 0, v, dlc_plan_numel(x.plan, 0));
    m.epoch = 1;
    CHECK(dlc_learner_receive(l, &m, 5) == DLC_ERR_FORMAT);
    CHECK(strstr(dlc_last_error(), "syncer epoch 1, but it follows epoch 2"));
    CHECK(drain(l).n == 0 && dlc_learner_base_version(l, 0) == 3 && dlc_learner_epoch(l) == 2);
    gather(&x, 0, dlc_params_data(x.p), got);
    CHECK(memcmp(got, before, (size_t)dlc_plan_numel(x.plan, 0) * 4) == 0);
    /* the same merge from epoch 2 is taken, and applied at the next step (tau = 1) */
    m.epoch = 2;
    CHECK(dlc_learner_receive(l, &m, 5) == DLC_OK);
    inner_step(x.p, target);
    CHECK(dlc_learner_step_done(l, 5, 0.1, 5.5) == DLC_OK);
    lrec r = drain(l);
    CHECK(find(&r, DLC_LACT_APPLIED, 0) && dlc_learner_base_version(l, 0) == 4);
    /* a resync of epoch 3 (the syncer restarted): taken, and epoch 3 followed */
    gather(&x, 1, model, v);
    m = fragment_msg(1, 1, 0, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, 1));
    m.epoch = 3;
    CHECK(dlc_learner_receive(l, &m, 6) == DLC_OK && dlc_learner_epoch(l) == 3);
    CHECK(drain(l).n == 0 && dlc_learner_step_begin(l, 6) == DLC_OK); /* applied at the boundary */
    CHECK(drain(l).n == 1 && dlc_learner_base_version(l, 1) == 0);
    m.epoch = 2;
    CHECK(dlc_learner_receive(l, &m, 6) == DLC_ERR_FORMAT && dlc_learner_epoch(l) == 3);
    /* unstamped messages are not fenced */
    m.epoch = 0;
    CHECK(dlc_learner_receive(l, &m, 6) == DLC_OK && dlc_learner_epoch(l) == 3);
    drain(l);
    /* a restart is the next incarnation; the epoch followed stays */
    dlc_learner_stop(l);
    CHECK(dlc_learner_restart(l, 7) == DLC_OK && dlc_learner_incarnation(l) == 8 && dlc_learner_epoch(l) == 3);
    dlc_learner_free(l);
    free(model);
    free(target);
    fx_free(&x);
}

/* Syncer shards (learner.h, dlc_learner_set_shards): fragments 0, 2 of shard 0 and 1, 3 of
 * shard 1.  Each shard's epoch is followed on its own: a FRAGMENT is fenced against its
 * owner's epoch, a contribution stamped with it; a shard's restart (a newer epoch) moves
 * only that shard's; a whole resync of one shard's fragments after a reconnect puts the
 * learner back in step (PHASE), which waiting for all P would never do. */
static void test_shards(void) {
    fx x;
    fx_make(&x, 4, 95);
    int64_t size = dlc_params_size(x.p);
    float *model = malloc((size_t)size * 4), *target = malloc((size_t)size * 4);
    randv(model, size, 96, 1.0f);
    randv(target, size, 97, 1.0f);
    dlc_learner_params lp = lparams(0, 4, 1, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    int owner[4] = {0, 1, 0, 1}, bad[4] = {0, 2, 0, 1}, lonely[4] = {0, 0, 0, 0};
    CHECK_SFAILS(dlc_learner_set_shards(l, 2, bad), DLC_ERR_ARG, "fragment 1 owned by shard 2: expected 0..1");
    CHECK_SFAILS(dlc_learner_set_shards(l, 2, lonely), DLC_ERR_ARG, "shard 1 owns no fragment");
    CHECK_SFAILS(dlc_learner_set_shards(l, 17, owner), DLC_ERR_ARG, "expected 1..16");
    CHECK(dlc_learner_set_shards(l, 2, owner) == DLC_OK && dlc_learner_shards(l) == 2 && dlc_learner_owner(l, 3) == 1);
    /* the whole model from two shards: shard 0 at epoch 2, shard 1 at epoch 5 */
    float v[NMAX];
    for (int p = 0; p < 4; p++) {
        gather(&x, p, model, v);
        dlc_msg m = fragment_msg(0, p, 3, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, p));
        m.epoch = owner[p] ? 5 : 2;
        CHECK(dlc_learner_receive(l, &m, 0) == DLC_OK);
        drain(l);
        CHECK(dlc_learner_state_of(l) == (p == 3 ? DLC_LEARNER_TRAINING : DLC_LEARNER_JOINING));
    }
    CHECK(dlc_learner_shard_epoch(l, 0) == 2 && dlc_learner_shard_epoch(l, 1) == 5 && dlc_learner_epoch(l) == 2);
    CHECK(dlc_learner_set_shards(l, 2, owner) == DLC_ERR_STATE);
    /* H 4, P 4: fragment p is due after step p + 1 (offsets 0..3, the first at step 4 for
     * p = 0); every contribution carries its shard's epoch, heartbeats shard 0's */
    int seen[4] = {0, 0, 0, 0};
    for (int t = 1; t <= 8; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 5, 0.1, t) == DLC_OK);
        lrec r = drain(l);
        for (int i = 0; i < r.n; i++)
            if (r.a[i].type == DLC_LACT_SEND && r.a[i].msg.type == DLC_MSG_CONTRIBUTION) {
                int p = r.a[i].msg.fragment;
                CHECK(r.a[i].msg.epoch == (owner[p] ? 5 : 2));
                seen[p]++;
            }
    }
    for (int p = 0; p < 4; p++) CHECK(seen[p] > 0);
    /* a merge of fragment 1 stamped epoch 2: older than shard 1's 5, refused (shard 0's
     * epoch would have let it through) */
    gather(&x, 1, target, v);
    dlc_msg m = fragment_msg(0, 1, 4, 0, v, dlc_plan_numel(x.plan, 1));
    m.epoch = 2;
    CHECK_SFAILS(dlc_learner_receive(l, &m, 9), DLC_ERR_FORMAT, "follows epoch 5 of that fragment's shard");
    /* shard 0 restarted (epoch 3): fragment 0's resync moves shard 0's epoch alone */
    gather(&x, 0, model, v);
    m = fragment_msg(0, 0, 7, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, 0));
    m.epoch = 3, m.steps = 20;
    CHECK(dlc_learner_receive(l, &m, 9) == DLC_OK);
    CHECK(dlc_learner_shard_epoch(l, 0) == 3 && dlc_learner_shard_epoch(l, 1) == 5);
    CHECK(drain(l).n == 0);
    /* ... and its other fragment completes the shard's whole resync: back in step at the
     * run's step 20 (a PHASE), without shard 1's fragments */
    gather(&x, 2, model, v);
    m = fragment_msg(0, 2, 7, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, 2));
    m.epoch = 3, m.steps = 20;
    CHECK(dlc_learner_receive(l, &m, 9) == DLC_OK);
    lrec r = drain(l);
    const dlc_learner_action *ph = find(&r, DLC_LACT_PHASE, 0);
    CHECK(ph && ph->schedule == 20);
    CHECK(dlc_learner_schedule_step(l) == 20);
    dlc_learner_free(l);
    /* data parallel has one syncer */
    lp.dp = 1;
    fx y;
    fx_make(&y, 1, 98);
    dlc_learner *d = dlc_learner_new(&lp, y.p, y.plan);
    CHECK_OK(d);
    int one[1] = {0};
    CHECK_SFAILS(dlc_learner_set_shards(d, 2, one), DLC_ERR_ARG, "in data parallel");
    dlc_learner_free(d);
    fx_free(&y);
    free(model);
    free(target);
    fx_free(&x);
}

/* Both machines over a syncer restart: a learner of syncer A (epoch 1) contributes after A
 * was replaced by B (epoch 2, restarted from A's state); its contribution, stamped 1, is
 * not merged, B resyncs it with epoch 2, the learner follows 2, and its next
 * contribution merges.  Then it restarts: its next incarnation is taken after B's join. */
static void test_fence_world(void) {
    fx x;
    fx_make(&x, 1, 95);
    int64_t size = dlc_params_size(x.p);
    float *target = malloc((size_t)size * 4);
    randv(target, size, 96, 1.0f);
    dlc_learner_params lp = lparams(0, 2, 0, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    dlc_syncer_params sp = dlc_syncer_default_params();
    sp.learners = 1, sp.grace = DLC_GRACE_OFF;
    dlc_syncer *a = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    sp.epoch = 2;
    dlc_syncer *b = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(l);
    CHECK_OK(a);
    CHECK_OK(b);
    if (!l || !a || !b) return;
    dlc_syncer_action sa;
    dlc_learner_action la;
    CHECK(dlc_syncer_join(a, 0, 0) == DLC_OK);
    while (dlc_syncer_poll(a, &sa)) {
        CHECK(dlc_learner_receive(l, &sa.msg, 0) == DLC_OK);
        while (dlc_learner_poll(l, &la)) {}
    }
    CHECK(dlc_learner_epoch(l) == 1 && dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    /* A is gone; B takes over and joins the learner, whose resync is still on its way */
    CHECK(dlc_syncer_join(b, 0, 1) == DLC_OK);
    dlc_msg held[4];
    uint8_t bytes[4][NMAX * 4];
    int nheld = 0;
    while (dlc_syncer_poll(b, &sa) && nheld < 4) {
        held[nheld] = sa.msg;
        memcpy(bytes[nheld], sa.msg.payload, sa.msg.len);
        held[nheld].payload = bytes[nheld];
        nheld++;
    }
    CHECK(nheld == 1 && held[0].epoch == 2 && (held[0].flags & DLC_MSG_RESYNC));
    /* two steps: fragment 0 is due, sent stamped with epoch 1 */
    dlc_msg c = {0};
    for (int t = 1; t <= 2; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 10, 0.1, 1 + t) == DLC_OK);
        while (dlc_learner_poll(l, &la))
            if (la.type == DLC_LACT_SEND && la.msg.type == DLC_MSG_CONTRIBUTION) c = la.msg;
    }
    CHECK(c.type == DLC_MSG_CONTRIBUTION && c.epoch == 1 && c.incarnation == 1);
    CHECK(dlc_syncer_receive(b, &c, 3) == DLC_ERR_FORMAT && strstr(dlc_last_error(), "stamped epoch 1"));
    int rejected = 0, resyncs = 0;
    while (dlc_syncer_poll(b, &sa)) {
        rejected += sa.type == DLC_SACT_REJECTED && sa.reason == DLC_REJECT_EPOCH;
        resyncs += sa.type == DLC_SACT_SEND && (sa.msg.flags & DLC_MSG_RESYNC) && sa.msg.epoch == 2;
        CHECK(sa.type != DLC_SACT_MERGED);
    }
    CHECK(rejected == 1 && resyncs == 1 && dlc_syncer_version(b, 0) == 0 && dlc_syncer_round_count(b, 0) == 0);
    /* the held resync arrives: the learner follows epoch 2, and its next contribution merges */
    CHECK(dlc_learner_receive(l, &held[0], 4) == DLC_OK && dlc_learner_epoch(l) == 2);
    while (dlc_learner_poll(l, &la)) {}
    c.type = 0;
    for (int t = 3; t <= 4; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 10, 0.1, 4 + t) == DLC_OK);
        while (dlc_learner_poll(l, &la))
            if (la.type == DLC_LACT_SEND && la.msg.type == DLC_MSG_CONTRIBUTION) c = la.msg;
    }
    CHECK(c.type == DLC_MSG_CONTRIBUTION && c.epoch == 2);
    CHECK(dlc_syncer_receive(b, &c, 9) == DLC_OK);
    int merged = 0;
    while (dlc_syncer_poll(b, &sa)) merged += sa.type == DLC_SACT_MERGED;
    CHECK(merged == 1 && dlc_syncer_version(b, 0) == 1 && dlc_syncer_incarnation(b, 0) == 1);
    /* the learner restarts: incarnation 2, joined by the driver, taken on its first message */
    dlc_learner_stop(l);
    CHECK(dlc_syncer_lost(b, 0, 10) == DLC_OK && dlc_learner_restart(l, 10) == DLC_OK);
    CHECK(dlc_syncer_join(b, 0, 10) == DLC_OK);
    while (dlc_syncer_poll(b, &sa)) CHECK(dlc_learner_receive(l, &sa.msg, 10) == DLC_OK);
    while (dlc_learner_poll(l, &la)) {}
    CHECK(dlc_learner_state_of(l) == DLC_LEARNER_TRAINING && dlc_learner_incarnation(l) == 2);
    c.type = 0;
    for (int t = 1; t <= 2; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 10, 0.1, 10 + t) == DLC_OK);
        while (dlc_learner_poll(l, &la))
            if (la.type == DLC_LACT_SEND && la.msg.type == DLC_MSG_CONTRIBUTION) c = la.msg;
    }
    CHECK(c.incarnation == 2 && dlc_syncer_receive(b, &c, 13) == DLC_OK && dlc_syncer_incarnation(b, 0) == 2);
    int joined = 0;
    merged = 0;
    while (dlc_syncer_poll(b, &sa)) joined += sa.type == DLC_SACT_JOINED, merged += sa.type == DLC_SACT_MERGED;
    CHECK(joined == 0 && merged == 1);
    dlc_syncer_free(a);
    dlc_syncer_free(b);
    dlc_learner_free(l);
    free(target);
    fx_free(&x);
}

/* Heartbeats: one per call however many periods passed, the next on the grid; with a
 * period below the clock's precision (1e9 + 1e-9 == 1e9) the call still returns and the
 * next beat is strictly later (an alarm turns a hang into a failure). */
static void test_heartbeat_precision(void) {
    fx x;
    fx_make(&x, 1, 98);
    for (int tiny = 0; tiny <= 1; tiny++) {
        dlc_learner_params lp = lparams(0, 4, 0, 0, 0);
        lp.heartbeat = tiny ? 1e-9 : 1.0;
        double t0 = tiny ? 1e9 : 0.5;
        dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
        CHECK_OK(l);
        if (!l) continue;
        resync(&x, l, dlc_params_data(x.p), 0, t0);
        double e = dlc_learner_expiry(l);
        CHECK(e == (tiny ? t0 : 1.5)); /* tiny: t0 + 1e-9 rounds to t0 */
        double now = tiny ? e : 10.2;  /* not tiny: nine periods missed */
        alarm(20);
        CHECK(dlc_learner_handle_expiry(l, now) == DLC_OK);
        alarm(0);
        lrec r = drain(l);
        CHECK(r.n == 1 && r.a[0].msg.type == DLC_MSG_HEARTBEAT);
        double e2 = dlc_learner_expiry(l);
        CHECK(e2 > now && e2 == (tiny ? nextafter(now, INFINITY) : 10.5));
        CHECK(dlc_learner_handle_expiry(l, now) == DLC_OK && drain(l).n == 0); /* not yet due */
        CHECK(dlc_learner_handle_expiry(l, e2) == DLC_OK && drain(l).n == 1);
        CHECK(dlc_learner_expiry(l) > e2);
        CHECK(dlc_learner_handle_expiry(l, INFINITY) == DLC_ERR_ARG && strstr(dlc_last_error(), "now = inf"));
        dlc_learner_free(l);
    }
    fx_free(&x);
}

/* ---- rollback (learner.h, dlc_learner_rollback) ---- */

static int frag_equals(const fx *x, int p, const float *want) {
    float got[NMAX];
    gather(x, p, dlc_params_data(x->p), got);
    return memcmp(got, want, (size_t)dlc_plan_numel(x->plan, p) * sizeof(float)) == 0;
}

/* A poisoned arena rolled back: each fragment is its Θ̂ again (a merge stashed is taken
 * whole instead), counters restart, what was sent stays outstanding and its merge is
 * mixed in as usual, the schedule does not move; then the refusals. */
static void test_rollback(void) {
    fx x;
    fx_make(&x, 4, 60);
    dlc_learner_params lp = lparams(0, 8, 2, 0.5, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    int64_t size = dlc_params_size(x.p);
    float *theta0 = malloc((size_t)size * 4), *target = malloc((size_t)size * 4);
    memcpy(theta0, dlc_params_data(x.p), (size_t)size * 4);
    randv(target, size, 61, 1.0f);
    CHECK(dlc_learner_rollback(l, 0) == DLC_ERR_STATE && strstr(dlc_last_error(), "joining"));
    resync(&x, l, theta0, 0, 0);
    float hat[4][NMAX], g1[NMAX], g2[NMAX];
    for (int p = 0; p < 4; p++) gather(&x, p, theta0, hat[p]);
    int64_t n1 = dlc_plan_numel(x.plan, 1), n2 = dlc_plan_numel(x.plan, 2);
    randv(g1, n1, 62, 1.0f);
    randv(g2, n2, 63, 1.0f);
    /* steps 1..3: fragment 1 leaves after step 2 (off_1 = 2) */
    for (int t = 1; t <= 3; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 5, 0, t) == DLC_OK);
        lrec r = drain(l);
        CHECK(r.n == (t == 2) && (t != 2 || find(&r, DLC_LACT_SEND, 1)));
    }
    /* a merge of fragment 2 (never sent) arrives and waits for the next boundary */
    dlc_msg m = fragment_msg(0, 2, 1, 0, g2, n2);
    CHECK(dlc_learner_receive(l, &m, 3.1) == DLC_OK && drain(l).n == 0);
    CHECK(!frag_equals(&x, 0, hat[0]) && !frag_equals(&x, 3, hat[3]));
    /* the inner step poisons the model */
    dlc_params_data(x.p)[dlc_params_offset(x.p, 0)] = NAN;
    dlc_params_data(x.p)[dlc_params_offset(x.p, 3)] = INFINITY;
    CHECK(dlc_learner_outstanding(l) == 1);
    CHECK(dlc_learner_rollback(l, 3.2) == DLC_OK);
    lrec r = drain(l);
    CHECK(r.n == 1 && r.a[0].type == DLC_LACT_APPLIED && r.a[0].fragment == 2 && r.a[0].version == 1 &&
          r.a[0].resync == 1 && r.a[0].lag == -1);
    CHECK(frag_equals(&x, 0, hat[0]) && frag_equals(&x, 1, hat[1]) && frag_equals(&x, 2, g2) &&
          frag_equals(&x, 3, hat[3]));
    for (int64_t i = 0; i < size; i++) CHECK(isfinite(dlc_params_data(x.p)[i]));
    for (int p = 0; p < 4; p++)
        CHECK(dlc_learner_fragment_steps(l, p) == 0 && dlc_learner_fragment_tokens(l, p) == 0 &&
              dlc_learner_base_version(l, p) == (p == 2 ? 1 : 0));
    CHECK(dlc_learner_outstanding(l) == 1); /* fragment 1's merge is still awaited */
    CHECK(dlc_learner_steps(l) == 3 && dlc_learner_tokens(l) == 15 && dlc_learner_schedule_step(l) == 3);
    CHECK(dlc_learner_rollbacks(l) == 1 && dlc_learner_state_of(l) == DLC_LEARNER_TRAINING);
    /* fragment 1's merge (version 1) comes back: held until τ = 2 steps after its send at
     * step 2, then mixed with α = 0.5 into the rolled-back model */
    m = fragment_msg(0, 1, 1, 0, g1, n1);
    CHECK(dlc_learner_receive(l, &m, 3.3) == DLC_OK && drain(l).n == 0);
    inner_step(x.p, target);
    float th1[NMAX], th2[NMAX];
    gather(&x, 1, dlc_params_data(x.p), th1);
    gather(&x, 2, dlc_params_data(x.p), th2);
    CHECK(dlc_learner_step_done(l, 5, 0, 4) == DLC_OK);
    r = drain(l);
    CHECK(r.n == 2);
    const dlc_learner_action *s2 = find(&r, DLC_LACT_SEND, 2), *a1 = find(&r, DLC_LACT_APPLIED, 1);
    /* fragment 2 leaves after step 4 (off_2 = 4): based on the merge taken whole, one step */
    CHECK(s2 && s2->msg.version == 1 && s2->msg.steps == 1 && s2->msg.tokens == 5);
    if (s2) {
        float want[NMAX];
        for (int64_t i = 0; i < n2; i++) want[i] = g2[i] - th2[i];
        CHECK(s2->msg.len == (size_t)n2 * 4 && memcmp(s2->msg.payload, want, (size_t)n2 * 4) == 0);
    }
    CHECK(a1 && a1->version == 1 && a1->lag == 2 && a1->resync == 0);
    float now1[NMAX];
    gather(&x, 1, dlc_params_data(x.p), now1);
    double worst = 0;
    for (int64_t i = 0; i < n1; i++) worst = fmax(worst, fabs(now1[i] - (0.5 * (double)th1[i] + 0.5 * (double)g1[i])));
    CHECK_NEAR(worst, 0, 1e-7);
    /* fragment 3 leaves after step 6 (off_3 = 6): Θ̂_3 − θ_3 of the 3 steps since the rollback */
    for (int t = 5; t <= 6; t++) {
        inner_step(x.p, target);
        float th3[NMAX];
        gather(&x, 3, dlc_params_data(x.p), th3);
        CHECK(dlc_learner_step_done(l, 5, 0, t) == DLC_OK);
        r = drain(l);
        const dlc_learner_action *s3 = find(&r, DLC_LACT_SEND, 3);
        CHECK((s3 != NULL) == (t == 6));
        if (s3) {
            int64_t n3 = dlc_plan_numel(x.plan, 3);
            float want[NMAX];
            for (int64_t i = 0; i < n3; i++) want[i] = hat[3][i] - th3[i];
            CHECK(s3->msg.version == 0 && s3->msg.steps == 3 && s3->msg.tokens == 15 &&
                  memcmp(s3->msg.payload, want, (size_t)n3 * 4) == 0);
        }
    }
    /* refused while actions are unpolled, changing nothing */
    CHECK(dlc_learner_contribute(l, 0, 7) == DLC_OK);
    float before[NMAX];
    gather(&x, 0, dlc_params_data(x.p), before);
    CHECK(dlc_learner_rollback(l, 7) == DLC_ERR_STATE && strstr(dlc_last_error(), "unpolled"));
    CHECK(frag_equals(&x, 0, before) && dlc_learner_rollbacks(l) == 1);
    drain(l);
    dlc_learner_stop(l);
    CHECK(dlc_learner_rollback(l, 8) == DLC_ERR_STATE && strstr(dlc_last_error(), "stopped"));
    dlc_learner_free(l);
    free(theta0);
    free(target);
    fx_free(&x);
}

/* Blocking: a learner WAITING for an overdue merge rolls back and still waits for it;
 * data parallel refuses; error feedback is zeroed (a contribution right after the
 * rollback is exactly zero, while the same model without a rollback carries its residual). */
static void test_rollback_blocking_dp_ef(void) {
    fx x;
    fx_make(&x, 1, 70);
    int64_t n = dlc_plan_numel(x.plan, 0), size = dlc_params_size(x.p);
    float *theta0 = malloc((size_t)size * 4), *target = malloc((size_t)size * 4), hat[NMAX];
    memcpy(theta0, dlc_params_data(x.p), (size_t)size * 4);
    gather(&x, 0, theta0, hat);
    randv(target, size, 71, 1.0f);
    dlc_learner_params lp = lparams(0, 4, 0, 0, 1);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (l) {
        resync(&x, l, theta0, 0, 0);
        for (int t = 1; t <= 4; t++) {
            inner_step(x.p, target);
            CHECK(dlc_learner_step_done(l, 1, 0, t) == DLC_OK);
            drain(l);
        }
        CHECK(dlc_learner_state_of(l) == DLC_LEARNER_WAITING);
        CHECK(dlc_learner_rollback(l, 5) == DLC_OK && drain(l).n == 0);
        CHECK(dlc_learner_state_of(l) == DLC_LEARNER_WAITING && frag_equals(&x, 0, hat));
        dlc_learner_free(l);
    }
    memcpy(dlc_params_data(x.p), theta0, (size_t)size * 4);
    lp = lparams(0, 8, 0, 0, 0);
    lp.dp = 1;
    l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (l) {
        resync(&x, l, theta0, 0, 0);
        CHECK(dlc_learner_rollback(l, 1) == DLC_ERR_STATE && strstr(dlc_last_error(), "data parallel"));
        dlc_learner_free(l);
    }
    /* error feedback: two learners in step; B has its model set back by hand, A rolls back */
    lp = lparams(0, 0, 0, 0, 0);
    lp.codec = DLC_CODEC_INT8, lp.error_feedback = 1;
    float zero[NMAX] = {0}, dec[NMAX];
    for (int rolled = 0; rolled <= 1; rolled++) {
        memcpy(dlc_params_data(x.p), theta0, (size_t)size * 4);
        l = dlc_learner_new(&lp, x.p, x.plan);
        CHECK_OK(l);
        if (!l) continue;
        resync(&x, l, theta0, 0, 0);
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 1, 0, 1) == DLC_OK && dlc_learner_contribute(l, 0, 1) == DLC_OK);
        drain(l); /* int8: a residual is left in the error feedback */
        if (rolled) {
            CHECK(dlc_learner_rollback(l, 2) == DLC_OK);
        } else {
            memcpy(dlc_params_data(x.p), theta0, (size_t)size * 4);
        }
        CHECK(dlc_learner_contribute(l, 0, 2) == DLC_OK);
        lrec r = drain(l);
        CHECK(r.n == 1 && r.a[0].type == DLC_LACT_SEND);
        CHECK(dlc_codec_decode(DLC_CODEC_INT8, &lp.codec_params, r.a[0].msg.payload, r.a[0].msg.len, dec, n) == DLC_OK);
        CHECK((memcmp(dec, zero, (size_t)n * 4) == 0) == rolled);
        dlc_learner_free(l);
    }
    free(theta0);
    free(target);
    fx_free(&x);
}

/* dlc_learner_step_reads, the contract a host mirroring the model relies on (client.h):
 * a learner whose arena holds the host's values only in the fragments the mask names
 * before each step_done (the rest NaN) sends the same contributions, bit for bit, and
 * ends every step with the same values in each fragment it named or applied, as a
 * learner whose arena is whole; merges come back one step after each send (held for
 * τ = 2, mixed with α = 0.5).  The mask is the due fragments plus those with a stashed
 * merge. */
static void test_step_reads(void) {
    fx a, b;
    fx_make(&a, 4, 30);
    fx_make(&b, 4, 30);
    dlc_learner_params lp = lparams(0, 8, 2, 0.5, 0);
    dlc_learner *la = dlc_learner_new(&lp, a.p, a.plan), *lb = dlc_learner_new(&lp, b.p, b.plan);
    CHECK_OK(la && lb);
    if (!la || !lb) return;
    int64_t size = dlc_params_size(a.p);
    float *theta0 = malloc((size_t)size * 4), *target = malloc((size_t)size * 4);
    memcpy(theta0, dlc_params_data(a.p), (size_t)size * 4);
    randv(target, size, 31, 1.0f);
    resync(&a, la, theta0, 0, 0);
    resync(&b, lb, theta0, 0, 0);
    uint8_t mask[4];
    CHECK(dlc_learner_step_reads(NULL, mask) == DLC_ERR_ARG && dlc_learner_step_reads(la, NULL) == DLC_ERR_ARG);
    int64_t sent_at[4] = {-1, -1, -1, -1}, version[4] = {0, 0, 0, 0};
    int stash[4] = {0, 0, 0, 0}; /* a merge received and not yet applied */
    int applied = 0, sends = 0;
    for (int t = 1; t <= 40; t++) {
        inner_step(a.p, target); /* a's arena is the host's model */
        int n = dlc_learner_step_reads(lb, mask), count = 0;
        for (int p = 0; p < 4; p++) {
            int off = p * 8 / 4, due = t >= off && (t - off) % 8 == 0;
            CHECK(!due || mask[p]); /* every due fragment */
            CHECK(mask[p] == (due || stash[p]));
            count += mask[p];
        }
        CHECK(n == count);
        float *bd = dlc_params_data(b.p);
        for (int64_t i = 0; i < size; i++) bd[i] = NAN;
        for (int p = 0; p < 4; p++) {
            float v[NMAX];
            if (!mask[p]) continue;
            gather(&a, p, dlc_params_data(a.p), v);
            scatter(&b, p, v, bd);
        }
        CHECK(dlc_learner_step_done(la, 5, 0, t) == DLC_OK && dlc_learner_step_done(lb, 5, 0, t) == DLC_OK);
        lrec ra = drain(la), rb = drain(lb);
        CHECK(ra.n == rb.n);
        for (int i = 0; i < ra.n && i < rb.n; i++) {
            const dlc_learner_action *x = &ra.a[i], *y = &rb.a[i];
            CHECK(x->type == y->type && x->fragment == y->fragment);
            if (x->type == DLC_LACT_SEND) {
                CHECK(x->msg.fragment == y->msg.fragment && x->msg.len == y->msg.len &&
                      memcmp(x->msg.payload, y->msg.payload, x->msg.len) == 0);
                sent_at[x->msg.fragment] = t, sends++;
            }
            if (x->type == DLC_LACT_APPLIED) mask[x->fragment] = 1, stash[x->fragment] = 0, applied++;
        }
        for (int p = 0; p < 4; p++) {
            float va[NMAX], vb[NMAX];
            if (!mask[p]) continue;
            gather(&a, p, dlc_params_data(a.p), va);
            gather(&b, p, bd, vb);
            CHECK(memcmp(va, vb, (size_t)dlc_plan_numel(a.plan, p) * 4) == 0);
        }
        /* each merge comes back a step after its send */
        for (int p = 0; p < 4; p++) {
            if (sent_at[p] != t - 1) continue;
            float g[NMAX];
            randv(g, dlc_plan_numel(a.plan, p), (uint64_t)(100 + t), 1.0f);
            dlc_msg m = fragment_msg(0, p, ++version[p], 0, g, dlc_plan_numel(a.plan, p));
            CHECK(dlc_learner_receive(la, &m, t + 0.5) == DLC_OK && dlc_learner_receive(lb, &m, t + 0.5) == DLC_OK);
            CHECK(drain(la).n == 0 && drain(lb).n == 0);
            stash[p] = 1;
        }
    }
    CHECK(sends >= 16 && applied >= 14);
    dlc_learner_free(la);
    dlc_learner_free(lb);
    free(theta0);
    free(target);
    fx_free(&a);
    fx_free(&b);
}

/* dlc_learner_bind_tensors: a learner whose model lives in the host's own tensors (one
 * allocation each) sends, applies and rolls back bit for bit as one on the arena, and
 * never reads or writes its arena (NaN throughout, still NaN at the end). */
static void test_bind_tensors(void) {
    fx a, b;
    fx_make(&a, 4, 40);
    fx_make(&b, 4, 40);
    dlc_learner_params lp = lparams(0, 8, 2, 0.5, 0);
    dlc_learner *la = dlc_learner_new(&lp, a.p, a.plan), *lb = dlc_learner_new(&lp, b.p, b.plan);
    CHECK_OK(la && lb);
    if (!la || !lb) return;
    int64_t size = dlc_params_size(a.p);
    float *host[4];
    for (int k = 0; k < 4; k++) {
        int64_t n = dlc_params_tensor(b.p, k)->numel;
        host[k] = malloc((size_t)n * sizeof(float));
        memcpy(host[k], dlc_params_data(b.p) + dlc_params_offset(b.p, k), (size_t)n * sizeof(float));
    }
    float *null4[4] = {host[0], NULL, host[2], host[3]};
    CHECK(dlc_learner_bind_tensors(lb, NULL) == DLC_ERR_ARG);
    CHECK(dlc_learner_bind_tensors(lb, null4) == DLC_ERR_ARG && strstr(dlc_last_error(), "tensor 1 ('b')"));
    CHECK(dlc_learner_bind_tensors(lb, host) == DLC_OK);
    float *bd = dlc_params_data(b.p);
    for (int64_t i = 0; i < size; i++) bd[i] = NAN;
    float *theta0 = malloc((size_t)size * 4), *target = malloc((size_t)size * 4);
    memcpy(theta0, dlc_params_data(a.p), (size_t)size * 4);
    randv(target, size, 41, 1.0f);
    resync(&a, la, theta0, 0, 0);
    resync(&a, lb, theta0, 0, 0); /* (the fixture a only lays the fragments out) */
    int64_t sent_at[4] = {-1, -1, -1, -1}, version[4] = {0, 0, 0, 0};
    int applied = 0, sends = 0, same = 1;
    for (int t = 1; t <= 40; t++) {
        inner_step(a.p, target);
        for (int k = 0; k < 4; k++) { /* the same step on the host's tensors */
            int64_t o = dlc_params_offset(b.p, k), n = dlc_params_tensor(b.p, k)->numel;
            for (int64_t i = 0; i < n; i++) host[k][i] -= 0.01f * (host[k][i] - target[o + i]);
        }
        if (t == 23) { /* a fault: both roll back to their last global model */
            CHECK(dlc_learner_rollback(la, t) == DLC_OK && dlc_learner_rollback(lb, t) == DLC_OK);
            drain(la), drain(lb);
        }
        CHECK(dlc_learner_step_done(la, 5, 0, t) == DLC_OK && dlc_learner_step_done(lb, 5, 0, t) == DLC_OK);
        lrec ra = drain(la), rb = drain(lb);
        CHECK(ra.n == rb.n);
        for (int i = 0; i < ra.n && i < rb.n; i++) {
            const dlc_learner_action *x = &ra.a[i], *y = &rb.a[i];
            CHECK(x->type == y->type && x->fragment == y->fragment);
            if (x->type == DLC_LACT_SEND) {
                CHECK(x->msg.len == y->msg.len && memcmp(x->msg.payload, y->msg.payload, x->msg.len) == 0);
                sent_at[x->msg.fragment] = t, sends++;
            }
            if (x->type == DLC_LACT_APPLIED) applied++;
        }
        for (int k = 0; k < 4; k++)
            same &= memcmp(host[k], dlc_params_data(a.p) + dlc_params_offset(a.p, k),
                           (size_t)dlc_params_tensor(a.p, k)->numel * sizeof(float)) == 0;
        for (int p = 0; p < 4; p++) { /* each merge comes back a step after its send */
            if (sent_at[p] != t - 1) continue;
            float g[NMAX];
            randv(g, dlc_plan_numel(a.plan, p), (uint64_t)(200 + t), 1.0f);
            dlc_msg m = fragment_msg(0, p, ++version[p], 0, g, dlc_plan_numel(a.plan, p));
            CHECK(dlc_learner_receive(la, &m, t + 0.5) == DLC_OK && dlc_learner_receive(lb, &m, t + 0.5) == DLC_OK);
            CHECK(drain(la).n == 0 && drain(lb).n == 0);
        }
    }
    CHECK(same);
    CHECK(sends >= 16 && applied >= 14);
    int untouched = 1;
    for (int64_t i = 0; i < size; i++) untouched &= isnan(bd[i]);
    CHECK(untouched);
    /* data parallel keeps its gradient in the arena: refused */
    dlc_learner_params dp = lparams(1, 8, 0, 0, 1);
    dp.dp = 1, dp.H = 1;
    fx c;
    fx_make(&c, 1, 42);
    dlc_learner *ld = dlc_learner_new(&dp, c.p, c.plan);
    CHECK_OK(ld);
    CHECK(!ld || (dlc_learner_bind_tensors(ld, host) == DLC_ERR_ARG && strstr(dlc_last_error(), "data parallel")));
    dlc_learner_free(ld);
    fx_free(&c);
    dlc_learner_free(la);
    dlc_learner_free(lb);
    for (int k = 0; k < 4; k++) free(host[k]);
    free(theta0);
    free(target);
    fx_free(&a);
    fx_free(&b);
}

/* dlc_learner_receive_lent: merges kept in the driver's buffers (here one per fragment,
 * poisoned and freed as soon as dlc_learner_lent lets it go) apply bit for bit as the
 * copied ones, through holds, a newer merge replacing a waiting one, a refused payload
 * (the waiting one kept) and a rollback; a resync while joining is not lent. */
static void lent_poll(dlc_learner *l, uint8_t **buf, int P) {
    for (int p = 0; p < P; p++)
        if (buf[p] && dlc_learner_lent(l, p) != buf[p]) {
            memset(buf[p], 0xff, 4); /* NaN: read after its release, it would show */
            free(buf[p]);
            buf[p] = NULL;
        }
}

static void test_receive_lent(void) {
    fx a, b;
    fx_make(&a, 4, 50);
    fx_make(&b, 4, 50);
    dlc_learner_params lp = lparams(0, 8, 2, 0.5, 0);
    dlc_learner *la = dlc_learner_new(&lp, a.p, a.plan), *lb = dlc_learner_new(&lp, b.p, b.plan);
    CHECK_OK(la && lb);
    if (!la || !lb) return;
    int64_t size = dlc_params_size(a.p);
    float *theta0 = malloc((size_t)size * 4), *target = malloc((size_t)size * 4);
    memcpy(theta0, dlc_params_data(a.p), (size_t)size * 4);
    randv(target, size, 51, 1.0f);
    uint8_t *buf[4] = {NULL, NULL, NULL, NULL};
    /* the join: resyncs lent, but applied at once into the base: nothing held */
    resync(&a, la, theta0, 0, 0);
    for (int p = 0; p < 4; p++) {
        float v[NMAX];
        gather(&a, p, theta0, v);
        dlc_msg m = fragment_msg(0, p, 0, DLC_MSG_RESYNC, v, dlc_plan_numel(a.plan, p));
        CHECK(dlc_learner_receive_lent(lb, &m, NULL, 0, 0) == DLC_OK);
        CHECK(dlc_learner_lent(lb, p) == NULL);
        lrec r = drain(lb);
        CHECK(r.n == 1 && r.a[0].type == DLC_LACT_APPLIED);
    }
    int64_t sent_at[4] = {-1, -1, -1, -1}, version[4] = {0, 0, 0, 0};
    int applied = 0, held = 0, same = 1;
    for (int t = 1; t <= 48; t++) {
        inner_step(a.p, target);
        inner_step(b.p, target);
        if (t == 29) {
            CHECK(dlc_learner_rollback(la, t) == DLC_OK && dlc_learner_rollback(lb, t) == DLC_OK);
            drain(la), drain(lb);
            lent_poll(lb, buf, 4);
        }
        CHECK(dlc_learner_step_done(la, 5, 0, t) == DLC_OK && dlc_learner_step_done(lb, 5, 0, t) == DLC_OK);
        lrec ra = drain(la), rb = drain(lb);
        lent_poll(lb, buf, 4);
        CHECK(ra.n == rb.n);
        for (int i = 0; i < ra.n && i < rb.n; i++) {
            const dlc_learner_action *x = &ra.a[i], *y = &rb.a[i];
            CHECK(x->type == y->type && x->fragment == y->fragment);
            if (x->type == DLC_LACT_SEND) {
                CHECK(x->msg.len == y->msg.len && memcmp(x->msg.payload, y->msg.payload, x->msg.len) == 0);
                sent_at[x->msg.fragment] = t;
            }
            if (x->type == DLC_LACT_APPLIED) {
                applied++;
                CHECK(buf[x->fragment] == NULL);
            }
        }
        same &= memcmp(dlc_params_data(a.p), dlc_params_data(b.p), (size_t)size * 4) == 0;
        for (int p = 0; p < 4; p++) { /* each merge comes back a step after its send, some twice */
            if (sent_at[p] != t - 1) continue;
            int twice = (t + p) % 3 == 0;
            for (int k = 0; k <= twice; k++) {
                int64_t n = dlc_plan_numel(a.plan, p);
                float g[NMAX];
                randv(g, n, (uint64_t)(300 + 10 * t + k), 1.0f);
                dlc_msg m = fragment_msg(0, p, ++version[p], 0, g, n);
                CHECK(dlc_learner_receive(la, &m, t + 0.5) == DLC_OK);
                uint8_t *mine = malloc((size_t)n * 4);
                memcpy(mine, g, (size_t)n * 4);
                m.payload = mine;
                if (k == 1) { /* a malformed newer one first: refused, the waiting one kept */
                    uint8_t *bad = malloc((size_t)n * 4);
                    memcpy(bad, g, (size_t)n * 4);
                    memset(bad + 4 * (n / 2), 0xff, 4);
                    dlc_msg mb = m;
                    mb.payload = bad;
                    CHECK(dlc_learner_receive_lent(lb, &mb, NULL, 0, t + 0.5) == DLC_ERR_FORMAT);
                    CHECK(dlc_learner_lent(lb, p) == buf[p] && buf[p] != NULL);
                    free(bad);
                }
                CHECK(dlc_learner_receive_lent(lb, &m, NULL, 0, t + 0.5) == DLC_OK);
                CHECK(drain(la).n == 0 && drain(lb).n == 0);
                CHECK(dlc_learner_lent(lb, p) == mine);
                lent_poll(lb, buf, 4); /* the one it replaced goes */
                buf[p] = mine;
                held++;
            }
        }
    }
    CHECK(same);
    CHECK(applied >= 14 && held >= 20);
    dlc_learner_stop(lb);
    CHECK(dlc_learner_restart(lb, 50) == DLC_OK);
    for (int p = 0; p < 4; p++) CHECK(dlc_learner_lent(lb, p) == NULL);
    lent_poll(lb, buf, 4);
    dlc_learner_free(la);
    dlc_learner_free(lb);
    free(theta0);
    free(target);
    fx_free(&a);
    fx_free(&b);
}

/* dlc_learner_set_send_room: with no room a due contribution is not sent; the fragment
 * trains on (named by step_reads) and leaves at the first boundary with room, covering
 * every step since its base; a room of 1 lets one of two due ones go; blocking
 * sends regardless. */
static void test_send_room(void) {
    fx x;
    fx_make(&x, 4, 60);
    dlc_learner_params lp = lparams(0, 8, 2, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    int64_t size = dlc_params_size(x.p);
    float *theta0 = malloc((size_t)size * 4), *target = malloc((size_t)size * 4);
    memcpy(theta0, dlc_params_data(x.p), (size_t)size * 4);
    randv(target, size, 61, 1.0f);
    resync(&x, l, theta0, 0, 0);
    /* fragment p is due at steps 2p, 2p + 8, ... (H 8, P 4) */
    uint8_t mask[4];
    int64_t sent_steps[4] = {0, 0, 0, 0};
    int64_t sent_at[4] = {-1, -1, -1, -1};
    for (int t = 1; t <= 12; t++) {
        inner_step(x.p, target);
        dlc_learner_set_send_room(l, (t >= 2 && t <= 5) || (t >= 8 && t <= 10) ? 0 : t == 11 ? 1 : -1);
        if (t >= 3 && t <= 5) CHECK(dlc_learner_step_reads(l, mask) >= 1 && mask[1]); /* deferred: read each step */
        CHECK(dlc_learner_step_done(l, 5, 0, t) == DLC_OK);
        lrec r = drain(l);
        for (int i = 0; i < r.n; i++)
            if (r.a[i].type == DLC_LACT_SEND && r.a[i].msg.type == DLC_MSG_CONTRIBUTION) {
                int p = r.a[i].msg.fragment;
                sent_steps[p] = r.a[i].msg.steps, sent_at[p] = t;
            }
        if (t == 5) CHECK(sent_at[1] < 0 && sent_at[2] < 0 && dlc_learner_deferred(l) == 2);
        if (t == 6) /* room again: 1 (due at 2) and 2 (due at 4) leave with 3 (due now), each
                     * covering the steps since its base (no merge came back) */
            CHECK(sent_at[1] == 6 && sent_at[2] == 6 && sent_at[3] == 6 && sent_steps[1] == 6 && sent_steps[3] == 6);
        if (t == 10) CHECK(sent_at[0] < 0 && sent_at[1] == 6 && dlc_learner_deferred(l) == 4);
        if (t == 11) CHECK(sent_at[0] == 11 && sent_steps[0] == 11 && sent_at[1] == 6); /* room for one */
        if (t == 12) CHECK(sent_at[1] == 12 && sent_at[2] == 12);
    }
    CHECK(dlc_learner_deferred(l) == 4);
    dlc_learner_free(l);
    /* blocking: the round waits for it, so it is sent with no room */
    dlc_learner_params lb = lparams(0, 8, 0, 0, 1);
    l = dlc_learner_new(&lb, x.p, x.plan);
    CHECK_OK(l);
    resync(&x, l, theta0, 0, 0);
    dlc_learner_set_send_room(l, 0);
    int sends = 0;
    for (int t = 1; t <= 2; t++) {
        CHECK(dlc_learner_step_done(l, 5, 0, t) == DLC_OK);
        lrec r = drain(l);
        for (int i = 0; i < r.n; i++) sends += r.a[i].type == DLC_LACT_SEND && r.a[i].msg.type == DLC_MSG_CONTRIBUTION;
    }
    CHECK(sends == 1 && dlc_learner_deferred(l) == 0);
    dlc_learner_free(l);
    free(theta0);
    free(target);
    fx_free(&x);
}

/* A round in flight lost with its syncer (a primary killed, its standby taking over with
 * the base the learner holds): its steps are not lost.  The resync of that base changes
 * nothing, and the learner's next contribution of the fragment, measured from the base it
 * kept, holds every step since it, those of the lost one included. */
static void test_lost_round_steps(void) {
    fx x;
    fx_make(&x, 2, 160);
    dlc_learner_params lp = lparams(1, 8, 1, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    int64_t n = dlc_params_numel(x.p);
    float base[NMAX], target[NMAX], v[NMAX];
    memcpy(base, dlc_params_data(x.p), (size_t)n * sizeof(float));
    randv(target, n, 161, 1.0f);
    resync(&x, l, base, 3, 0.0);
    const dlc_learner_action *sent = NULL;
    lrec r;
    for (int t = 1; t <= 5; t++) { /* fragment 1 is due at step 4 (H/P in), sent then: lost */
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 10, 0.1, 0.1 * t) == DLC_OK);
        r = drain(l);
        if (t == 4) {
            sent = find(&r, DLC_LACT_SEND, 1);
            CHECK(sent && sent->msg.steps == 4 && sent->msg.version == 3);
        }
    }
    gather(&x, 1, base, v); /* the standby's resync of fragment 1: the base, bit for bit */
    dlc_msg same = fragment_msg(1, 1, 3, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, 1));
    CHECK(dlc_learner_receive(l, &same, 0.55) == DLC_OK);
    drain(l);
    sent = NULL;
    for (int t = 6; t <= 12; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 10, 0.1, 0.1 * t) == DLC_OK);
        r = drain(l);
        const dlc_learner_action *a = find(&r, DLC_LACT_SEND, 1);
        if (a && a->msg.type == DLC_MSG_CONTRIBUTION) {
            CHECK(t == 12); /* at its schedule, not before */
            sent = a;
            break;
        }
    }
    CHECK(dlc_learner_get_account(l).overwritten_steps == 0);
    int64_t n1 = dlc_plan_numel(x.plan, 1);
    CHECK(sent && sent->msg.version == 3 && sent->msg.steps == 12 && sent->msg.tokens == 120 &&
          sent->msg.len == (size_t)n1 * sizeof(float));
    if (sent && sent->msg.len == (size_t)n1 * sizeof(float)) { /* Θ̂ − θ over all 12 steps */
        float theta[NMAX], got[NMAX];
        gather(&x, 1, dlc_params_data(x.p), theta);
        memcpy(got, sent->msg.payload, sent->msg.len);
        int same_delta = 1;
        for (int64_t i = 0; i < n1; i++) same_delta &= got[i] == v[i] - theta[i];
        CHECK(same_delta);
    }
    dlc_learner_free(l);
    fx_free(&x);
}

/* dlc_learner_sends_due: the fragments the next step_done sends given room for all (due at
 * that step, or waiting); room 0 defers them (counted), and they wait, still due. */
static void test_sends_due(void) {
    fx x;
    fx_make(&x, 2, 170);
    dlc_learner_params lp = lparams(1, 8, 1, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    float base[NMAX];
    memcpy(base, dlc_params_data(x.p), (size_t)dlc_params_numel(x.p) * sizeof(float));
    resync(&x, l, base, 1, 0.0);
    for (int t = 1; t <= 3; t++) {
        CHECK(dlc_learner_sends_due(l) == 0); /* fragment 1 is due at step 4, fragment 0 at 8 */
        CHECK(dlc_learner_step_done(l, 10, 0.1, 0.1 * t) == DLC_OK);
        drain(l);
    }
    CHECK(dlc_learner_sends_due(l) == 1);
    dlc_learner_set_send_room(l, 0);
    CHECK(dlc_learner_step_done(l, 10, 0.1, 0.4) == DLC_OK); /* step 4: no room, it waits */
    lrec r = drain(l);
    CHECK(find(&r, DLC_LACT_SEND, 1) == NULL && dlc_learner_deferred(l) == 1);
    CHECK(dlc_learner_sends_due(l) == 1); /* still waiting */
    dlc_learner_set_send_room(l, -1);
    CHECK(dlc_learner_step_done(l, 10, 0.1, 0.5) == DLC_OK);
    r = drain(l);
    CHECK(find(&r, DLC_LACT_SEND, 1) != NULL && dlc_learner_sends_due(l) == 0);
    CHECK(dlc_learner_sends_due(NULL) == 0);
    dlc_learner_free(l);
    fx_free(&x);
}

/* A resync that brings, bit for bit and at the same version, the global values the
 * learner holds as its base (a reconnect to a syncer that holds them: a cut, a standby
 * that took over) overwrites nothing: the steps it trained on that fragment stay in its
 * model, nothing is counted overwritten, and its next contribution carries them all.  A
 * resync of other values, or of the same values at another version, is taken whole as
 * before.  P = 2, H = 8, τ = 1, α = 0. */
static void test_resync_of_base(void) {
    fx x;
    fx_make(&x, 2, 150);
    dlc_learner_params lp = lparams(1, 8, 1, 0, 0);
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    int64_t n = dlc_params_numel(x.p);
    float base[NMAX], target[NMAX];
    memcpy(base, dlc_params_data(x.p), (size_t)n * sizeof(float));
    randv(target, n, 151, 1.0f);
    resync(&x, l, base, 3, 0.0);
    for (int t = 1; t <= 2; t++) { /* two steps: both fragments move off the base */
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 10, 0.1, 0.1 * t) == DLC_OK);
        drain(l);
    }
    float trained[NMAX];
    memcpy(trained, dlc_params_data(x.p), (size_t)n * sizeof(float));
    /* fragment 0 again, the same values at version 3: applied at the next boundary, the
     * trained values kept */
    float v[NMAX];
    gather(&x, 0, base, v);
    dlc_msg same = fragment_msg(1, 0, 3, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, 0));
    CHECK(dlc_learner_receive(l, &same, 0.25) == DLC_OK);
    drain(l);
    inner_step(x.p, target);
    float before[NMAX];
    memcpy(before, dlc_params_data(x.p), (size_t)n * sizeof(float));
    CHECK(dlc_learner_step_done(l, 10, 0.1, 0.3) == DLC_OK);
    lrec r = drain(l);
    const dlc_learner_action *ap = find(&r, DLC_LACT_APPLIED, 0);
    CHECK(ap && ap->resync == 1 && ap->version == 3 && ap->lag == -1);
    CHECK(memcmp(before, dlc_params_data(x.p), (size_t)n * sizeof(float)) == 0); /* nothing overwritten */
    CHECK(dlc_learner_get_account(l).overwritten_steps == 0);
    /* its contribution of fragment 0 (at its offset, H/P = 4 steps in) holds every step */
    const dlc_learner_action *sent = NULL;
    for (int t = 4; t <= 8 && !sent; t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 10, 0.1, 0.1 * t) == DLC_OK);
        r = drain(l);
        sent = find(&r, DLC_LACT_SEND, 0);
        if (sent && sent->msg.type != DLC_MSG_CONTRIBUTION) sent = NULL;
    }
    CHECK(sent != NULL && sent->msg.steps >= 4 && sent->msg.version == 3);
    /* the same values at another version, and other values at the same version: whole */
    gather(&x, 1, base, v);
    dlc_msg other_v = fragment_msg(1, 1, 4, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, 1));
    CHECK(dlc_learner_receive(l, &other_v, 1.0) == DLC_OK);
    drain(l);
    CHECK(dlc_learner_step_done(l, 10, 0.1, 1.1) == DLC_OK);
    drain(l);
    float got[NMAX];
    gather(&x, 1, dlc_params_data(x.p), got);
    CHECK(memcmp(got, v, (size_t)dlc_plan_numel(x.plan, 1) * sizeof(float)) == 0); /* reset to the global */
    double over = dlc_learner_get_account(l).overwritten_steps;
    CHECK(over > 0);
    gather(&x, 0, base, v);
    v[0] += 1.0f;
    dlc_msg other_b = fragment_msg(1, 0, 3, DLC_MSG_RESYNC, v, dlc_plan_numel(x.plan, 0));
    inner_step(x.p, target);
    CHECK(dlc_learner_receive(l, &other_b, 1.2) == DLC_OK);
    drain(l);
    CHECK(dlc_learner_step_done(l, 10, 0.1, 1.3) == DLC_OK);
    drain(l);
    gather(&x, 0, dlc_params_data(x.p), got);
    CHECK(memcmp(got, v, (size_t)dlc_plan_numel(x.plan, 0) * sizeof(float)) == 0);
    CHECK(dlc_learner_get_account(l).overwritten_steps > over);
    dlc_learner_free(l);
    fx_free(&x);
}

/* Error feedback across resyncs (learner.h, error_feedback): with a sparse codec (what is
 * not sent waits in the residual), a whole resync that replaces fragment 0 zeroes its
 * residual, fragment 1's stays; a resync of fragment 1 that brings its own base back
 * (replacing nothing) keeps its residual; a resync applied while fragment 0's ENCODE is
 * out zeroes the residual only once that encode is back (the encoder reads it meanwhile). */
static int all_zero(const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (v[i] != 0.0f) return 0;
    return 1;
}

static void test_ef_resync(void) {
    fx x;
    fx_make(&x, 2, 75);
    dlc_learner_params lp = lparams(0, 2, 1, 0, 0);
    lp.codec = DLC_CODEC_SPARSE2;
    lp.codec_params.block = 32;
    lp.error_feedback = 1;
    lp.defer_encode = 1;
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    int64_t size = dlc_params_size(x.p), n0 = dlc_plan_numel(x.plan, 0), n1 = dlc_plan_numel(x.plan, 1);
    float target[NMAX], start[NMAX], v[NMAX];
    randv(target, size, 76, 1.0f);
    memcpy(start, dlc_params_data(x.p), (size_t)size * sizeof(float));
    resync(&x, l, start, 0, 0);
    float *ef[2] = {NULL, NULL};
    int t = 1;
    /* both fragments sent (and encoded) once: their residuals hold what sparse2 left out */
    for (; t <= 8 && !(ef[0] && ef[1]); t++) {
        inner_step(x.p, target);
        CHECK(dlc_learner_step_done(l, 1, 0.1, t) == DLC_OK);
        lrec r = drain(l);
        for (int i = 0; i < r.n; i++) {
            dlc_learner_action *e = &r.a[i];
            if (e->type != DLC_LACT_ENCODE) continue;
            uint8_t out[NMAX * 4];
            CHECK(dlc_learner_encode(e, out, sizeof out, NULL) == DLC_OK);
            CHECK(dlc_learner_encoded(l, e->fragment) == DLC_OK);
            ef[e->fragment] = e->ef;
        }
    }
    CHECK(ef[0] && ef[1]);
    if (!ef[0] || !ef[1]) return;
    CHECK(!all_zero(ef[0], n0) && !all_zero(ef[1], n1));
    float keep1[NMAX];
    memcpy(keep1, ef[1], (size_t)n1 * sizeof(float));
    /* fragment 1's own base back (version 0, the values it started from): replaces nothing */
    gather(&x, 1, start, v);
    dlc_msg m = fragment_msg(0, 1, 0, DLC_MSG_RESYNC, v, n1);
    CHECK(dlc_learner_receive(l, &m, t) == DLC_OK);
    CHECK(dlc_learner_step_begin(l, t) == DLC_OK);
    drain(l);
    CHECK(memcmp(ef[1], keep1, (size_t)n1 * sizeof(float)) == 0);
    /* fragment 0 replaced by other values: its residual goes, fragment 1's stays */
    gather(&x, 0, target, v);
    m = fragment_msg(0, 0, 7, DLC_MSG_RESYNC, v, n0);
    CHECK(dlc_learner_receive(l, &m, t) == DLC_OK);
    CHECK(dlc_learner_step_begin(l, t) == DLC_OK);
    lrec r = drain(l);
    const dlc_learner_action *ap = find(&r, DLC_LACT_APPLIED, 0);
    CHECK(ap && ap->resync == 1 && ap->version == 7);
    CHECK(all_zero(ef[0], n0));
    CHECK(memcmp(ef[1], keep1, (size_t)n1 * sizeof(float)) == 0);
    /* a resync while fragment 0's ENCODE is out: zeroed once the encode is back */
    const dlc_learner_action *out0 = NULL;
    for (; t <= 40 && !out0; t++) {
        inner_step(x.p, start); /* (fragment 0 is at the target now: back towards the start) */
        CHECK(dlc_learner_step_done(l, 1, 0.1, t) == DLC_OK);
        r = drain(l);
        for (int i = 0; i < r.n; i++) {
            dlc_learner_action *e = &r.a[i];
            if (e->type != DLC_LACT_ENCODE) continue;
            if (e->fragment == 0 && !out0) {
                out0 = e;
                continue;
            }
            uint8_t out[NMAX * 4];
            CHECK(dlc_learner_encode(e, out, sizeof out, NULL) == DLC_OK);
            CHECK(dlc_learner_encoded(l, e->fragment) == DLC_OK);
        }
    }
    CHECK(out0 != NULL);
    if (out0) {
        dlc_learner_action e0 = *out0;
        uint8_t out[NMAX * 4];
        m = fragment_msg(0, 0, 9, DLC_MSG_RESYNC, v, n0);
        CHECK(dlc_learner_receive(l, &m, t) == DLC_OK);
        CHECK(dlc_learner_step_begin(l, t) == DLC_OK);
        drain(l);
        CHECK(dlc_learner_encode(&e0, out, sizeof out, NULL) == DLC_OK); /* the residual updated by it */
        CHECK(!all_zero(ef[0], n0));
        CHECK(dlc_learner_encoded(l, 0) == DLC_OK);
        CHECK(all_zero(ef[0], n0));
    }
    dlc_learner_free(l);
    fx_free(&x);
}

int main(void) {
    test_resync_of_base();
    test_sends_due();
    test_lost_round_steps();
    test_schedule();
    test_apply();
    test_blocking();
    test_join_restart();
    test_phase();
    test_phase_from_age();
    test_phase_late();
    test_phase_reconnect();
    test_catch_up();
    test_catch_up_in_round();
    test_catch_up_budget();
    test_hold();
    test_set_schedule_step();
    test_dp_alone();
    test_dp_replay();
    test_flush();
    test_hostile();
    test_int4();
    test_deferred_encode();
    test_ef_resync();
    test_decoupled_equals_diloco();
    test_dp_world();
    test_dp_restart();
    test_assert_and_refusals();
    test_fence();
    test_shards();
    test_fence_world();
    test_heartbeat_precision();
    test_rollback();
    test_rollback_blocking_dp_ef();
    test_step_reads();
    test_bind_tensors();
    test_receive_lent();
    test_send_room();
    return check_done("test_learner");
}
