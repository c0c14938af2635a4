/* test_vtime.c - the virtual-time driver (vtime.h) driven with tiny models: each learner's
 * model is the 4-tensor arena of check_fx.h and its "inner step" is done here, θ -= 0.1·(θ −
 * target_m) (dp: the gradient θ − target_m, then the same step with the averaged one).
 * Scripted cases, every host event recorded and checked: the order of events at one instant
 * (step ends, deliveries, a fault, step starts, an evaluation; a merge applied at the step
 * boundary before the step event), a kill and its rejoin, a finite cut (held messages
 * delivered when it ends) and one without end (lost, not sent to t = +inf), a syncer fault
 * with blocking learners reconnected, determinism (the same inputs give the same events,
 * stats and models; another chaos seed others), dp rounds (the averaged gradient in every
 * grad arena), a dp learner that is killed and rejoins (it takes part again), and the stats'
 * invariants (goodput <= 1, useful tokens <= trained tokens, busy + idle + down = end). */
#include <math.h>
#include <stdint.h>
#include "check.h"
#include "check_fx.h"
#include "diloco/vtime.h"

#define MMAX 4
#define LOGMAX 4096

typedef struct rec {
    dlc_vtime_event_type type;
    double time;
    int learner;
    int64_t step;
    int64_t schedule;    /* STEP, OPTIM: the schedule step before it */
    int fragment;        /* MERGE: merge.fragment; REJECT: fragment */
    int64_t version;     /* MERGE */
    int count;           /* MERGE */
    unsigned who;        /* MERGE: bit m set when learner m contributed */
    double arrived_max;  /* MERGE: latest arrival among the contributions */
    dlc_fault_kind fault;
    int begin;
    double latency;      /* FAULT of kind LINK: the link's latency from then on */
    int shard;           /* shards > 1: MERGE, REJECT, LOST, JOINED, a SYNCER FAULT */
    dlc_fault_role role; /* a SYNCER FAULT */
} rec;

typedef struct world {
    int M, dp;
    fx x[MMAX];
    dlc_params *models[MMAX];
    float target[MMAX][NMAX];
    float grad_sent[MMAX][NMAX]; /* dp: the gradient each learner sent this step */
    dlc_vtime_island is[MMAX];
    dlc_vtime_params vp;
    dlc_chaos *chaos;
    dlc_vtime *vt;
    rec log[LOGMAX];
    int n;
    int global_checks;           /* STEP events at which the model equalled the global one */
    int avg_checks;              /* dp OPTIM events with the right averaged gradient */
    int failed;                  /* dlc_vtime_next or an answer failed */
} world;

/* M learners with the same initial model, targets of their own, islands at speed 1,
 * latency 0 and infinite bandwidth, P fragments, one-second steps, the run lasting `end`. */
static void world_init(world *w, int M, int P, int dp, double end) {
    memset(w, 0, sizeof *w);
    w->M = M, w->dp = dp;
    for (int m = 0; m < M; m++) {
        fx_make(&w->x[m], P, 300);
        w->models[m] = w->x[m].p;
        randv(w->target[m], dlc_params_size(w->x[m].p), 310 + (uint64_t)m, 1.0f);
        w->is[m] = (dlc_vtime_island){.speed = 1, .scale = 1, .tokens = 10, .latency = 0, .bandwidth = INFINITY};
    }
    dlc_vtime_params *vp = &w->vp;
    vp->learners = M;
    vp->step_time = 1;
    vp->end = end;
    vp->islands = w->is;
    vp->learner = dlc_learner_default_params();
    vp->learner.dp = dp;
    vp->learner.H = 1;
    vp->learner.tau = 0;
    vp->learner.heartbeat = 0;
    vp->syncer = dlc_syncer_default_params();
    vp->syncer.learners = M;
    vp->syncer.dp = dp;
    vp->syncer.quorum = dp ? DLC_QUORUM_ALL : 1;
    vp->syncer.grace = DLC_GRACE_OFF;
    vp->syncer.weighting = DLC_WEIGHT_UNIFORM;
    vp->syncer.merge = DLC_MERGE_MEAN;
    vp->syncer.tau = 0;
}

static dlc_chaos *world_chaos(world *w) {
    if (!w->chaos) w->chaos = dlc_chaos_new(w->M);
    w->vp.chaos = w->chaos;
    return w->chaos;
}

static void fault(world *w, dlc_fault_kind k, int m, double at, double duration, double factor) {
    dlc_fault f = {.at = at, .kind = k, .learner = m, .duration = duration, .factor = factor};
    CHECK(dlc_chaos_add(world_chaos(w), &f) == DLC_OK);
}

static int world_start(world *w) {
    w->vt = dlc_vtime_new(&w->vp, w->x[0].plan, w->models, dlc_params_data(w->x[0].p));
    CHECK_OK(w->vt);
    return w->vt != NULL;
}

static void world_free(world *w) {
    dlc_vtime_free(w->vt);
    dlc_chaos_free(w->chaos);
    for (int m = 0; m < w->M; m++) fx_free(&w->x[m]);
}

/* Fragment 0 of learner m's model equals the global one (P = 1, α = 0: after a merge). */
static int holds_global(world *w, int m) {
    float g[NMAX], a[NMAX], b[NMAX];
    memcpy(g, dlc_params_data(w->models[m]), (size_t)dlc_params_size(w->models[m]) * sizeof(float));
    if (dlc_vtime_global(w->vt, g) != DLC_OK) return 0;
    gather(&w->x[m], 0, g, a);
    gather(&w->x[m], 0, dlc_params_data(w->models[m]), b);
    return memcmp(a, b, (size_t)dlc_plan_numel(w->x[m].plan, 0) * sizeof(float)) == 0;
}

/* Runs the driver to DONE, answering every STEP and OPTIM with the test's inner step;
 * `check_global_at`: at STEP events at that time, count those whose model is the global
 * one (the merge was applied at the step boundary, before the step). */
static void world_run(world *w, double check_global_at) {
    for (;;) {
        dlc_vtime_event ev;
        int rc = dlc_vtime_next(w->vt, &ev);
        if (rc != 1) {
            fprintf(stderr, "vtime_next: %s\n", dlc_last_error());
            w->failed = 1;
            CHECK(rc == 1);
            return;
        }
        if (w->n < LOGMAX) {
            rec *r = &w->log[w->n++];
            *r = (rec){.type = ev.type, .time = ev.time, .learner = ev.learner, .step = ev.step, .schedule = ev.schedule,
                       .fragment = ev.type == DLC_VT_MERGE ? ev.merge.fragment : ev.fragment, .fault = ev.fault,
                       .begin = ev.begin, .latency = ev.latency, .shard = ev.shard,
                       .role = ev.role};
            if (ev.type == DLC_VT_MERGE) {
                r->version = ev.merge.version, r->count = ev.merge.count;
                for (int i = 0; i < ev.merge.count; i++) {
                    r->who |= 1u << ev.merge.contribs[i].learner;
                    if (ev.merge.contribs[i].arrived > r->arrived_max) r->arrived_max = ev.merge.contribs[i].arrived;
                }
            }
        }
        int m = ev.learner;
        dlc_status st = DLC_OK;
        if (ev.type == DLC_VT_STEP) {
            float *th = dlc_params_data(w->models[m]);
            int64_t size = dlc_params_size(w->models[m]);
            if (!w->dp && ev.time == check_global_at && holds_global(w, m)) w->global_checks++;
            if (w->dp) {
                float *g = dlc_params_grad(w->models[m]);
                for (int64_t i = 0; i < size; i++) g[i] = th[i] - w->target[m][i];
                gather(&w->x[m], 0, g, w->grad_sent[m]);
                st = dlc_vtime_gradient_done(w->vt, m, w->is[m].tokens);
            } else {
                for (int64_t i = 0; i < size; i++) th[i] -= 0.1f * (th[i] - w->target[m][i]);
                st = dlc_vtime_step_done(w->vt, m, w->is[m].tokens);
            }
        } else if (ev.type == DLC_VT_OPTIM) {
            /* every learner that sent in this round: the grad arena holds their mean */
            float got[NMAX];
            gather(&w->x[m], 0, dlc_params_grad(w->models[m]), got);
            int64_t n = dlc_plan_numel(w->x[m].plan, 0);
            double worst = 0;
            for (int64_t i = 0; i < n; i++) {
                double s = 0;
                for (int j = 0; j < w->M; j++) s += w->grad_sent[j][i];
                worst = fmax(worst, fabs(got[i] - s / w->M));
            }
            if (worst < 1e-6) w->avg_checks++;
            float *th = dlc_params_data(w->models[m]);
            const float *g = dlc_params_grad(w->models[m]);
            for (int64_t i = 0; i < dlc_params_size(w->models[m]); i++) th[i] -= 0.1f * g[i];
            st = dlc_vtime_optim_done(w->vt, m);
        } else if (ev.type == DLC_VT_DONE) {
            return;
        }
        if (st != DLC_OK) {
            fprintf(stderr, "answer: %s\n", dlc_last_error());
            w->failed = 1;
            CHECK(st == DLC_OK);
            return;
        }
    }
}

static int count(const world *w, dlc_vtime_event_type t, int learner, double t0, double t1) {
    int k = 0;
    for (int i = 0; i < w->n; i++)
        if (w->log[i].type == t && (learner < -1 || w->log[i].learner == learner) && w->log[i].time > t0 &&
            w->log[i].time < t1)
            k++;
    return k;
}

/* MERGE events in (t0, t1) with learner m among the contributors. */
static int merges_of(const world *w, int m, double t0, double t1) {
    int k = 0;
    for (int i = 0; i < w->n; i++)
        if (w->log[i].type == DLC_VT_MERGE && (w->log[i].who >> m & 1) && w->log[i].time > t0 && w->log[i].time < t1)
            k++;
    return k;
}

static const rec *find(const world *w, dlc_vtime_event_type t, int learner, double time) {
    for (int i = 0; i < w->n; i++)
        if (w->log[i].type == t && w->log[i].learner == learner && w->log[i].time == time) return &w->log[i];
    return NULL;
}

/* The stats' invariants, and the per-learner steps the log shows. */
static void check_stats(world *w) {
    dlc_vtime_stats st;
    CHECK(dlc_vtime_get_stats(w->vt, &st) == DLC_OK);
    int64_t trained = 0;
    for (int m = 0; m < w->M; m++) {
        const dlc_vtime_learner_stats *l = &st.learner[m];
        trained += l->tokens;
        CHECK(l->tokens == 10 * l->steps);
        CHECK(l->idle_s >= 0 && l->busy_s >= 0 && l->down_s >= 0);
        CHECK_NEAR(l->busy_s + l->idle_s + l->down_s, st.end, 1e-9);
        /* the account: every second in one bucket, none negative, merged steps are sent ones */
        double b[] = {l->useful_s, l->overwritten_s, l->dropped_s, l->unsent_s, l->waiting_s, l->done_s, l->down_s};
        double sum = 0;
        for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
            CHECK(b[i] >= -1e-9 && isfinite(b[i]));
            sum += b[i];
        }
        CHECK_NEAR(sum, st.end, 1e-9 * (st.end > 1 ? st.end : 1));
        CHECK_NEAR(l->useful_s + l->overwritten_s + l->dropped_s + l->unsent_s, l->busy_s < st.end ? l->busy_s : st.end,
                   1e-9 * st.end);
        CHECK(l->merged_steps <= l->sent_steps + 1e-9 && l->sent_steps <= (double)l->steps + 1e-9);
    }
    CHECK(st.goodput >= 0 && st.goodput <= 1);
    CHECK(st.useful_tokens >= 0 && st.useful_tokens <= (double)trained);
    CHECK(st.uptime >= 0 && st.uptime <= 1);
    CHECK(isfinite(st.now) && st.now >= st.end);
    CHECK(st.merges == count(w, DLC_VT_MERGE, -2, -1, INFINITY));
}

/* ---- the cases ---- */

/* Two learners, H = 1, K = 1, no grace, latency 0; a SLOW fault of learner 1 and an EVAL at
 * t = 1, where both steps end.  Learner 0's step end comes first (scheduled first): its
 * contribution is delivered at once and merged (v1); the merge reaches learner 0 between
 * steps (stashed) and learner 1 mid-step (received after its step end); learner 1's step
 * end sends a contribution on base 0, merged as v2 (staleness 1); then the fault, then the
 * step starts (each applying v2 at its step boundary before the STEP event: the model is
 * the global one), then the evaluation. */
static void test_one_instant(void) {
    world w;
    world_init(&w, 2, 1, 0, 3);
    w.vp.eval_every = 1;
    fault(&w, DLC_FAULT_SLOW, 1, 1.0, 0.5, 2.0);
    if (!world_start(&w)) return world_free(&w);
    world_run(&w, 1.0);
    CHECK(!w.failed);
    static const struct { dlc_vtime_event_type type; double time; int learner; int64_t step; } want[] = {
        {DLC_VT_STEP, 0, 0, 1}, {DLC_VT_STEP, 0, 1, 1},
        {DLC_VT_MERGE, 1, 0, 0}, {DLC_VT_MERGE, 1, 0, 0}, {DLC_VT_FAULT, 1, 1, 0},
        {DLC_VT_STEP, 1, 0, 2}, {DLC_VT_STEP, 1, 1, 2}, {DLC_VT_EVAL, 1, -1, 0},
        {DLC_VT_FAULT, 1.5, 1, 0},
    };
    int nw = (int)(sizeof want / sizeof want[0]);
    CHECK(w.n > nw);
    for (int i = 0; i < nw && i < w.n; i++) {
        const rec *r = &w.log[i];
        int ok = r->type == want[i].type && r->time == want[i].time &&
                 (r->type == DLC_VT_MERGE || r->learner == want[i].learner) &&
                 (r->type != DLC_VT_STEP || r->step == want[i].step);
        if (!ok)
            fprintf(stderr, "event %d: %s at %g learner %d step %lld; expected %s at %g learner %d\n", i,
                    dlc_vtime_event_name(r->type), r->time, r->learner, (long long)r->step,
                    dlc_vtime_event_name(want[i].type), want[i].time, want[i].learner);
        CHECK(ok);
    }
    if (w.n > 8) {
        CHECK(w.log[2].version == 1 && w.log[2].who == 1u && w.log[2].count == 1);
        CHECK(w.log[3].version == 2 && w.log[3].who == 2u);
        CHECK(w.log[4].fault == DLC_FAULT_SLOW && w.log[4].begin == 1 && w.log[8].begin == 0);
    }
    CHECK(w.global_checks == 2); /* both STEP events at t = 1 found the merge applied */
    /* learner 1's second step started under the SLOW factor 2: it ends at 3, the horizon */
    dlc_vtime_stats st;
    CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK);
    CHECK(st.learner[0].steps == 3 && st.learner[1].steps == 2);
    CHECK(find(&w, DLC_VT_DONE, -1, 3.0) != NULL);
    check_stats(&w);
    world_free(&w);
}

/* A kill mid-step: learner 1 dies at 2.5 (its third step lost), comes back at 4.5 with
 * the whole model over its link (latency 0: at once), counters from 0. */
static void test_kill_rejoin(void) {
    world w;
    world_init(&w, 2, 1, 0, 7);
    w.vp.learner.H = 2;
    fault(&w, DLC_FAULT_KILL, 1, 2.5, 2.0, 0);
    if (!world_start(&w)) return world_free(&w);
    world_run(&w, -1);
    CHECK(!w.failed);
    const rec *k0 = find(&w, DLC_VT_FAULT, 1, 2.5), *k1 = find(&w, DLC_VT_FAULT, 1, 4.5);
    CHECK(k0 && k0->fault == DLC_FAULT_KILL && k0->begin == 1);
    CHECK(k1 && k1->fault == DLC_FAULT_KILL && k1->begin == 0);
    CHECK(count(&w, DLC_VT_STEP, 1, 2.5, 4.5) == 0);
    const rec *s = find(&w, DLC_VT_STEP, 1, 4.5);
    CHECK(s && s->step == 1); /* counted again from its rejoin */
    CHECK(merges_of(&w, 1, 4.5, INFINITY) >= 1); /* and it takes part again */
    dlc_vtime_stats st;
    CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK);
    CHECK(st.learner[0].steps == 7 && st.learner[1].steps == 4); /* 2 before, the lost one not, 2 after */
    CHECK_NEAR(st.learner[1].down_s, 2.0, 1e-12);
    CHECK_NEAR(st.learner[1].busy_s, 4.5, 1e-12); /* half of the lost step ran */
    CHECK(st.faults == 1);
    check_stats(&w);
    world_free(&w);
}

/* A cut of learner 1's links from 1.5 to 3.5: what it sends meanwhile is held and arrives
 * at 3.5; a cut without end (duration INFINITY) loses it instead, the syncer times the
 * learner out, and the run still ends at its horizon (nothing delivered at t = +inf). */
static void test_cut(void) {
    for (int forever = 0; forever <= 1; forever++) {
        world w;
        world_init(&w, 2, 1, 0, 6);
        w.vp.syncer.timeout = forever ? 2.5 : 0;
        fault(&w, DLC_FAULT_CUT, 1, 1.5, forever ? INFINITY : 2.0, 0);
        if (!world_start(&w)) {
            world_free(&w);
            continue;
        }
        world_run(&w, -1);
        CHECK(!w.failed);
        CHECK(merges_of(&w, 1, 1.5, 3.5) == 0);
        dlc_vtime_stats st;
        CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK);
        const rec *done = w.n ? &w.log[w.n - 1] : NULL;
        CHECK(done && done->type == DLC_VT_DONE && done->time == 6.0 && st.now == 6.0);
        if (!forever) {
            int at35 = 0;
            for (int i = 0; i < w.n; i++)
                if (w.log[i].type == DLC_VT_MERGE && (w.log[i].who & 2u) && w.log[i].time == 3.5 &&
                    w.log[i].arrived_max == 3.5)
                    at35++;
            CHECK(at35 >= 1);
            CHECK(st.dropped == 0 && count(&w, DLC_VT_LOST, 1, 0, INFINITY) == 0);
        } else {
            CHECK(merges_of(&w, 1, 1.5, INFINITY) == 0);
            CHECK(count(&w, DLC_VT_LOST, 1, 1.5, 6.0) == 1);
            CHECK(st.dropped >= 4); /* its contributions after 1.5, and what was sent to it */
        }
        CHECK(st.learner[1].steps == 6); /* a cut island keeps training */
        check_stats(&w);
        world_free(&w);
    }
}

/* A PAUSE of learner 1 from 2.5 to 5.5 (a process under SIGSTOP): its step 2 - 3 ends at
 * 6 (3 s later), it starts none meanwhile and says nothing, so the syncer (timeout 2.5 s,
 * last heard at 2) loses it at 4.5 and takes it back with its contribution at 6; then it
 * steps on: 7 steps by the horizon (10), 3 s of them paused (down_s).  Paused for good and
 * killed at 4 (back at 5): the step under way when the pause began is lost (0.5 s of it
 * ran), its down time is the pause and the kill (1.5 + 1 s). */
static void test_pause(void) {
    for (int killed = 0; killed <= 1; killed++) {
        world w;
        world_init(&w, 2, 1, 0, 10);
        w.vp.syncer.timeout = 2.5;
        fault(&w, DLC_FAULT_PAUSE, 1, 2.5, killed ? INFINITY : 3.0, 0);
        if (killed) fault(&w, DLC_FAULT_KILL, 1, 4.0, 1.0, 0);
        if (!world_start(&w)) return world_free(&w);
        world_run(&w, -1);
        CHECK(!w.failed);
        dlc_vtime_stats st;
        CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK);
        CHECK(st.learner[0].steps == 10);
        if (!killed) {
            CHECK(count(&w, DLC_VT_STEP, 1, 2.5, 6.0) == 0 && find(&w, DLC_VT_STEP, 1, 6.0));
            CHECK(st.learner[1].steps == 7);
            CHECK_NEAR(st.learner[1].busy_s, 7.0, 1e-9);
            CHECK_NEAR(st.learner[1].down_s, 3.0, 1e-9);
            CHECK(count(&w, DLC_VT_LOST, 1, 4.4, 4.6) == 1);
            CHECK(find(&w, DLC_VT_JOINED, 1, 6.0) != NULL);
            CHECK(merges_of(&w, 1, 2.5, 6.0) == 0 && merges_of(&w, 1, 6.0, INFINITY) >= 3);
        } else {
            CHECK_NEAR(st.learner[1].busy_s, 2.5 + (double)(st.learner[1].steps - 2), 1e-9);
            CHECK_NEAR(st.learner[1].down_s, 2.5, 1e-9);
            CHECK(find(&w, DLC_VT_STEP, 1, 2.0) && count(&w, DLC_VT_STEP, 1, 2.0, 5.0) == 0);
        }
        check_stats(&w);
        world_free(&w);
    }
    /* a pause that begins at a step boundary (3.0: the step end, then the pause, then the
     * step start that would have been) starts no step until it ends */
    world w;
    world_init(&w, 2, 1, 0, 10);
    fault(&w, DLC_FAULT_PAUSE, 1, 3.0, 3.0, 0);
    if (!world_start(&w)) return world_free(&w);
    world_run(&w, -1);
    CHECK(!w.failed && count(&w, DLC_VT_STEP, 1, 2.5, 6.0) == 0 && find(&w, DLC_VT_STEP, 1, 6.0));
    check_stats(&w);
    world_free(&w);
    dlc_chaos *c = dlc_chaos_new(2);
    dlc_fault_kind k;
    CHECK(c && dlc_fault_kind_parse("pause", &k) == DLC_OK && k == DLC_FAULT_PAUSE);
    CHECK(!strcmp(dlc_fault_kind_name(DLC_FAULT_PAUSE), "pause"));
    /* an on/off state: touching pauses of one learner merge, as kills do */
    dlc_fault a = {.at = 1, .kind = DLC_FAULT_PAUSE, .learner = 1, .duration = 2};
    dlc_fault b = {.at = 3, .kind = DLC_FAULT_PAUSE, .learner = 1, .duration = 1};
    CHECK(dlc_chaos_add(c, &a) == DLC_OK && dlc_chaos_add(c, &b) == DLC_OK);
    CHECK(dlc_chaos_count(c) == 1 && dlc_chaos_get(c, 0)->duration == 3);
    dlc_chaos_free(c);
}

/* A LINK fault on learner 1 from 1.5 to 4.5 with a latency of 0.25 s (its bandwidth
 * kept), H = 2: its contributions sent at 2 and 4 arrive 0.25 s later, the one sent at 6
 * at once again; the FAULT events carry the link's latency from then on; a second LINK
 * fault over the first (3.5 to 4.5, latency 0.5) wins while both are under way.  (H = 2
 * brings each merge back before the learner's next send: with H = 1 its next contribution
 * would count the tokens of the step already sent again, an accounting matter of its own.) */
static void test_link(void) {
    for (int stacked = 0; stacked <= 1; stacked++) {
        world w;
        world_init(&w, 2, 1, 0, 6);
        w.vp.learner.H = 2;
        dlc_fault f = {.at = 1.5, .kind = DLC_FAULT_LINK, .learner = 1, .duration = 3.0, .latency = 0.25};
        CHECK(dlc_chaos_add(world_chaos(&w), &f) == DLC_OK);
        if (stacked) {
            f.at = 3.5, f.duration = 1.0, f.latency = 0.5;
            CHECK(dlc_chaos_add(world_chaos(&w), &f) == DLC_OK);
        }
        if (!world_start(&w)) {
            world_free(&w);
            continue;
        }
        world_run(&w, -1);
        CHECK(!w.failed);
        int got[3] = {0, 0, 0};
        double want[3] = {2.25, stacked ? 4.5 : 4.25, 6.0};
        for (int i = 0; i < w.n; i++)
            for (int k = 0; k < 3; k++)
                if (w.log[i].type == DLC_VT_MERGE && (w.log[i].who & 2u) && w.log[i].arrived_max == want[k]) got[k]++;
        CHECK(got[0] == 1 && got[1] == 1 && got[2] == 1);
        const rec *b = find(&w, DLC_VT_FAULT, 1, 1.5), *e = find(&w, DLC_VT_FAULT, 1, 4.5);
        CHECK(b && b->fault == DLC_FAULT_LINK && b->begin == 1 && b->latency == 0.25);
        CHECK(e && e->fault == DLC_FAULT_LINK && e->begin == 0 && e->latency == 0);
        if (stacked) {
            const rec *s2 = find(&w, DLC_VT_FAULT, 1, 3.5);
            CHECK(s2 && s2->begin == 1 && s2->latency == 0.5);
        }
        check_stats(&w);
        world_free(&w);
    }
}

/* Blocking DiLoCo (K = all, τ = 0) with the syncer down from 1.5 to 2.5: both learners'
 * contributions after step 2 are lost and they block; their first message to the
 * restarted syncer (a heartbeat at 2.5) makes it resync them (JOINED), they step on at 2.5
 * (their counters go on) and the next round merges both. */
static void test_syncer_fault(void) {
    world w;
    world_init(&w, 2, 1, 0, 8);
    w.vp.learner.H = 2;
    w.vp.learner.blocking = 1;
    w.vp.learner.heartbeat = 0.25;
    w.vp.syncer.quorum = DLC_QUORUM_ALL;
    w.vp.syncer.blocking = 1;
    fault(&w, DLC_FAULT_SYNCER, -1, 1.5, 1.0, 0);
    if (!world_start(&w)) return world_free(&w);
    world_run(&w, -1);
    CHECK(!w.failed);
    const rec *f0 = find(&w, DLC_VT_FAULT, -1, 1.5), *f1 = find(&w, DLC_VT_FAULT, -1, 2.5);
    CHECK(f0 && f0->fault == DLC_FAULT_SYNCER && f0->begin == 1 && f1 && f1->begin == 0);
    CHECK(count(&w, DLC_VT_STEP, -2, 2.0 - 1e-9, 2.5) == 0); /* blocked */
    for (int m = 0; m < 2; m++) {
        const rec *s = find(&w, DLC_VT_STEP, m, 2.5);
        CHECK(s && s->step == 3);
        CHECK(find(&w, DLC_VT_JOINED, m, 2.5) != NULL);
    }
    CHECK(count(&w, DLC_VT_MERGE, -2, 0, 4.5) == 0);
    int both = 0;
    for (int i = 0; i < w.n; i++)
        if (w.log[i].type == DLC_VT_MERGE && w.log[i].time == 4.5 && w.log[i].count == 2 && w.log[i].version == 1)
            both++;
    CHECK(both == 1);
    dlc_vtime_stats st;
    CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK);
    CHECK(st.dropped == 2 + 2 * 4 && st.faults == 1); /* the contributions, heartbeats at 1.5 .. 2.25 */
    check_stats(&w);
    world_free(&w);
}

/* A run with everything at once (3 learners, 2 fragments, τ = 1, adaptive grace, links
 * with latency and bandwidth, heartbeats and a timeout, random kills, a cut and a slow
 * fault): twice with the same inputs gives the same events, stats and models; another
 * seed of the kills gives other events. */
static void det_run(world *w, uint64_t seed) {
    world_init(w, 3, 2, 0, 60);
    w->vp.learner.H = 4, w->vp.learner.tau = 1, w->vp.learner.heartbeat = 1.0;
    w->vp.syncer = dlc_syncer_default_params();
    w->vp.syncer.learners = 3;
    w->vp.syncer.timeout = 5;
    w->vp.eval_every = 10;
    double speed[3] = {1.0, 0.7, 1.3}, lat[3] = {0.05, 0.1, 0.2};
    for (int m = 0; m < 3; m++) w->is[m].speed = speed[m], w->is[m].latency = lat[m], w->is[m].bandwidth = 1e5;
    CHECK(dlc_chaos_add_poisson(world_chaos(w), -1, 20, 3, 0, 50, seed) == DLC_OK);
    fault(w, DLC_FAULT_CUT, 2, 30, 7, 0);
    fault(w, DLC_FAULT_SLOW, 0, 12, 6, 2.5);
    if (world_start(w)) world_run(w, -1);
}

static void test_determinism(void) {
    static world a, b, c;
    det_run(&a, 7);
    det_run(&b, 7);
    det_run(&c, 8);
    CHECK(!a.failed && !b.failed && !c.failed && a.vt && b.vt && c.vt);
    if (a.vt && b.vt && c.vt) {
        CHECK(a.n == b.n && a.n > 50 && memcmp(a.log, b.log, (size_t)a.n * sizeof a.log[0]) == 0);
        CHECK(count(&a, DLC_VT_MERGE, -2, 0, INFINITY) >= 10 && count(&a, DLC_VT_FAULT, -2, 0, INFINITY) >= 4);
        CHECK(c.n != a.n || memcmp(a.log, c.log, (size_t)a.n * sizeof a.log[0]) != 0);
        dlc_vtime_stats sa, sb;
        CHECK(dlc_vtime_get_stats(a.vt, &sa) == DLC_OK && dlc_vtime_get_stats(b.vt, &sb) == DLC_OK);
        CHECK(sa.useful_tokens == sb.useful_tokens && sa.goodput == sb.goodput && sa.bytes_up == sb.bytes_up &&
              sa.bytes_down == sb.bytes_down && sa.dropped == sb.dropped && sa.now == sb.now);
        for (int m = 0; m < 3; m++) {
            CHECK(memcmp(&sa.learner[m], &sb.learner[m], sizeof sa.learner[m]) == 0);
            CHECK(memcmp(dlc_params_data(a.models[m]), dlc_params_data(b.models[m]),
                         (size_t)dlc_params_size(a.models[m]) * sizeof(float)) == 0);
        }
        CHECK(sa.goodput > 0);
        check_stats(&a);
        check_stats(&c);
    }
    world_free(&a);
    world_free(&b);
    world_free(&c);
}

/* The account (vtime.h) under each preset's shape and every fault kind at once: the
 * buckets of every learner sum to the horizon (check_stats), useful tokens never pass
 * the tokens trained; without faults and with alpha 0, equal islands' useful share is
 * the goodput (merged tokens; with alpha > 0 the account adds the part kept) and
 * each loss is where the design puts it: decoupled (H = 4, 2 fragments, tau = 1) loses
 * tau/H of each round to overwriting and the steps after the last sends to unsent. */
static void test_account(void) {
    /* dp, diloco (blocking, P 1), streaming (blocking, P 2, tau 1), decoupled (K 1, P 2, tau 1), alpha 0.5 */
    const struct { int dp, P, H, tau, blocking, quorum; double alpha; } presets[] = {
        {1, 1, 1, 0, 0, DLC_QUORUM_ALL, 0}, {0, 1, 4, 0, 1, DLC_QUORUM_ALL, 0}, {0, 2, 4, 1, 1, DLC_QUORUM_ALL, 0},
        {0, 2, 4, 1, 0, 1, 0}, {0, 2, 4, 1, 0, 1, 0.5}};
    for (size_t k = 0; k < sizeof presets / sizeof presets[0]; k++)
        for (int faults = 0; faults <= 1; faults++) {
            world w;
            world_init(&w, 3, presets[k].P, presets[k].dp, 24);
            w.vp.learner.H = presets[k].H, w.vp.learner.tau = presets[k].tau;
            w.vp.learner.blocking = w.vp.syncer.blocking = presets[k].blocking;
            w.vp.learner.alpha = presets[k].alpha;
            w.vp.syncer.quorum = presets[k].quorum, w.vp.syncer.tau = presets[k].tau;
            w.vp.syncer.timeout = 3;
            if (faults) {
                fault(&w, DLC_FAULT_KILL, 1, 5.5, 3, 0);
                fault(&w, DLC_FAULT_SLOW, 2, 2, 6, 2);
                if (!presets[k].dp) { /* (dp's rounds wait for every live learner: a cut stalls them all) */
                    fault(&w, DLC_FAULT_CUT, 0, 11, 2, 0);
                    fault(&w, DLC_FAULT_SYNCER, -1, 15, 1.5, 0);
                }
                dlc_fault f = {.at = 3, .kind = DLC_FAULT_LINK, .learner = 0, .duration = 4, .latency = 0.3};
                CHECK(dlc_chaos_add(world_chaos(&w), &f) == DLC_OK);
            }
            if (!world_start(&w)) {
                world_free(&w);
                continue;
            }
            world_run(&w, -1);
            CHECK(!w.failed);
            check_stats(&w);
            dlc_vtime_stats st;
            CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK);
            if (!faults && presets[k].alpha == 0) { /* (alpha > 0: the account's useful adds the kept part) */
                double useful = 0;
                for (int m = 0; m < 3; m++) useful += st.learner[m].useful_s;
                CHECK_NEAR(useful / (3 * st.end), st.goodput, 1e-9);
            }
            if (!faults && k == 3) {
                for (int m = 0; m < 3; m++) {
                    const dlc_vtime_learner_stats *l = &st.learner[m];
                    /* 24 steps; each fragment sent every 4 (at 4, 8, .. 24 and 2, 6, .. 22):
                     * 1 step of 4 after each send is overwritten when its merge comes back
                     * (tau 1) */
                    CHECK(l->dropped_s < 1e-9 && l->down_s == 0 && l->waiting_s < 1e-9);
                    CHECK(l->overwritten_s > 0 && l->unsent_s > 0);
                    CHECK_NEAR(l->useful_s + l->overwritten_s + l->unsent_s, 24, 1e-9);
                }
            }
            world_free(&w);
        }
}

/* The final flush: 2 learners, H = 4 over 2 fragments, 10 steps.  Without it, fragment 0
 * (sent after steps 4 and 8) and fragment 1 (after 2, 6, 10) leave steps 9 and 10 of
 * fragment 0 unmerged; with it each learner sends fragment 0 after its last step (10),
 * fragment 1 being sent then anyway, and the final merges hold them: one more merge of
 * fragment 0 per learner, and the useful tokens grow by exactly those 2 steps of both
 * learners (never past the tokens trained). */
/* Two learners, H = 4, P = 2, with and without the final flush, over `end` s with the
 * steps limit `steps` (0: none): with it, the final merges hold 2 more contributions of
 * fragment 0 (one per learner: its 2 steps since its last send), 2 x 2 x 10 tokens / P
 * more useful tokens.  With steps, the run ends at that step (1 s a step), each learner
 * having trained them. */
static void flush_pair(int64_t steps, double end) {
    double useful[2];
    int merges0[2];
    for (int ff = 0; ff < 2; ff++) {
        world w;
        world_init(&w, 2, 2, 0, end);
        w.vp.learner.H = 4;
        w.vp.steps = steps;
        w.vp.final_flush = ff;
        if (!world_start(&w)) return world_free(&w);
        world_run(&w, -1);
        CHECK(!w.failed);
        merges0[ff] = 0;
        for (int i = 0; i < w.n; i++)
            if (w.log[i].type == DLC_VT_MERGE && w.log[i].fragment == 0) merges0[ff]++;
        dlc_vtime_stats st;
        CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK);
        useful[ff] = st.useful_tokens;
        CHECK(st.useful_tokens <= st.learner[0].tokens + st.learner[1].tokens);
        if (steps > 0) {
            CHECK_NEAR(st.end, (double)steps, 1e-9);
            CHECK(st.learner[0].steps == steps && st.learner[1].steps == steps);
        }
        check_stats(&w);
        world_free(&w);
    }
    CHECK(merges0[1] == merges0[0] + 2); /* quorum 1 without grace: one merge per contribution */
    /* 2 learners x 2 steps x 10 tokens, over P = 2 fragments */
    CHECK_NEAR(useful[1] - useful[0], 2 * 2 * 10 / 2.0, 1e-9);
}

static void test_final_flush(void) {
    flush_pair(0, 10);
    world w;
    world_init(&w, 1, 1, 0, 3);
    w.vp.final_flush = 2;
    CHECK(dlc_vtime_new(&w.vp, w.x[0].plan, w.models, dlc_params_data(w.x[0].p)) == NULL &&
          strstr(dlc_last_error(), "final_flush = 2"));
    world_free(&w);
}

/* dp: every step is a round of both learners' gradients; each OPTIM finds the mean of the
 * two in the grad arena, and the two models stay identical. */
static void test_dp_rounds(void) {
    world w;
    world_init(&w, 2, 1, 1, 5);
    if (!world_start(&w)) return world_free(&w);
    world_run(&w, -1);
    CHECK(!w.failed);
    CHECK(count(&w, DLC_VT_OPTIM, -2, -1, INFINITY) == 10 && w.avg_checks == 10);
    int k = 0;
    for (int i = 0; i < w.n; i++)
        if (w.log[i].type == DLC_VT_MERGE) {
            k++;
            CHECK(w.log[i].version == k && w.log[i].count == 2 && w.log[i].time == k);
        }
    CHECK(k == 5);
    float m0[NMAX], m1[NMAX];
    gather(&w.x[0], 0, dlc_params_data(w.models[0]), m0);
    gather(&w.x[1], 0, dlc_params_data(w.models[1]), m1);
    CHECK(memcmp(m0, m1, (size_t)dlc_plan_numel(w.x[0].plan, 0) * sizeof(float)) == 0);
    dlc_vtime_stats st;
    CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK);
    CHECK(st.learner[0].steps == 5 && st.learner[1].steps == 5 && st.merges == 5);
    /* every token trained entered a round, and the run was busy throughout: goodput 1 */
    CHECK_NEAR(st.useful_tokens, 100, 1e-12);
    CHECK_NEAR(st.goodput, 1, 1e-12);
    check_stats(&w);
    world_free(&w);
}

/* dp with a kill: learner 1 dies at 2.5 and rejoins at 3.5; its resync carries the run's
 * step, so its gradient counts in the others' round and every round after holds both
 * (before, it counted from 1, waited for ever and stalled learner 0 with it). */
static void test_dp_kill(void) {
    world w;
    world_init(&w, 2, 1, 1, 10);
    fault(&w, DLC_FAULT_KILL, 1, 2.5, 1.0, 0);
    if (!world_start(&w)) return world_free(&w);
    world_run(&w, -1);
    CHECK(!w.failed);
    int both_after = 0, alone = 0;
    for (int i = 0; i < w.n; i++)
        if (w.log[i].type == DLC_VT_MERGE) {
            if (w.log[i].time > 3.5 && w.log[i].count == 2) both_after++;
            if (w.log[i].count == 1) alone++;
        }
    CHECK(both_after >= 5 && alone == 1); /* round 3, while learner 1 was down */
    dlc_vtime_stats st;
    CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK);
    CHECK(st.learner[0].steps >= 9 && st.learner[1].steps >= 7);
    check_stats(&w);
    world_free(&w);
}

/* Shared cores (vtime.h, cores): 3 learners on 2 cores step 1.5 s each while all three
 * compute; learner 2 killed at 3.2 for good, the other two step at their own 1 s from
 * their next step (the one under way keeps its length); their nominal rate is the one they
 * reached.  Without cores, or with as many cores as learners, every step takes 1 s; a
 * negative count is refused. */
static void test_shared_cores(void) {
    for (int cores = 0; cores <= 3; cores++) {
        if (cores == 1) continue;
        world w;
        world_init(&w, 3, 1, 0, 9);
        w.vp.cores = cores;
        fault(&w, DLC_FAULT_KILL, 2, 3.2, INFINITY, 0);
        if (!world_start(&w)) return world_free(&w);
        world_run(&w, -1);
        CHECK(!w.failed);
        dlc_vtime_stats st;
        CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK);
        if (cores == 2) {
            /* 0 - 1.5 - 3.0 - 4.5 (the step under way at the kill), then 1 s: 5.5 ... 8.5 */
            CHECK(st.learner[0].steps == 7 && st.learner[1].steps == 7 && st.learner[2].steps == 2);
            CHECK(find(&w, DLC_VT_STEP, 0, 4.5) && find(&w, DLC_VT_STEP, 0, 7.5) && !find(&w, DLC_VT_STEP, 0, 4.0));
            CHECK_NEAR(st.learner[0].busy_s, 3 * 1.5 + 4 * 1.0, 1e-9);
            CHECK_NEAR(st.learner[0].nominal_tps, 70 / 8.5, 1e-9);
            CHECK_NEAR(st.learner[2].busy_s, 2 * 1.5 + 0.2, 1e-9); /* and 0.2 s of the lost step */
        } else {
            CHECK(st.learner[0].steps == 9 && st.learner[1].steps == 9 && st.learner[2].steps == 3);
            CHECK_NEAR(st.learner[0].nominal_tps, 10.0, 1e-12);
        }
        check_stats(&w);
        world_free(&w);
    }
    world w;
    world_init(&w, 3, 1, 0, 9);
    w.vp.cores = -1;
    w.vt = dlc_vtime_new(&w.vp, w.x[0].plan, w.models, dlc_params_data(w.x[0].p));
    CHECK(w.vt == NULL && strstr(dlc_last_error(), "cores = -1"));
    world_free(&w);
}

/* steps: each learner stops when its schedule step reaches them, and the run ends when
 * every live one has.  3 learners on 2 cores (1.5 s a step while all 3 compute), learner 2
 * killed at 3.2 s (its step 3.0 - 4.5 lost): learners 0 and 1 step at 0, 1.5, 3.0, then
 * 1 s a step alone: 4.5, 5.5, 6.5, and stop at 7.5 with 6 steps, far before `end` (100).
 * Learner 2 down for good, or due back after the end (at 13.2: it stays down), changes
 * nothing; the evaluations after 7.5 are dropped, the stats are over [0, 7.5]. */
static void test_stop_at_steps(void) {
    for (int back = 0; back < 2; back++) {
        world w;
        world_init(&w, 3, 1, 0, 100);
        w.vp.cores = 2;
        w.vp.steps = 6;
        w.vp.eval_every = 2;
        fault(&w, DLC_FAULT_KILL, 2, 3.2, back ? 10 : INFINITY, 0);
        if (!world_start(&w)) return world_free(&w);
        world_run(&w, -1);
        CHECK(!w.failed);
        dlc_vtime_stats st;
        CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK);
        CHECK_NEAR(st.end, 7.5, 1e-9);
        CHECK(st.learner[0].steps == 6 && st.learner[1].steps == 6 && st.learner[2].steps == 2);
        CHECK_NEAR(st.learner[2].down_s, 7.5 - 3.2, 1e-9);
        CHECK(count(&w, DLC_VT_EVAL, -2, -1, INFINITY) == 3); /* 2, 4, 6 */
        CHECK(count(&w, DLC_VT_FAULT, -2, -1, INFINITY) == 1); /* the kill; its end (13.2) is past the run's */
        const rec *r = find(&w, DLC_VT_STEP, 0, 6.5);
        CHECK(r && r->step == 6 && r->schedule == 5);
        CHECK(dlc_learner_schedule_step(dlc_vtime_learner(w.vt, 0)) == 6);
        CHECK_NEAR(st.learner[0].busy_s, 3 * 1.5 + 3 * 1.0, 1e-9);
        CHECK(st.learner[0].done_s < 1e-9); /* it stopped at the end */
        check_stats(&w);
        world_free(&w);
    }
    /* the final flush as a learner stops (fragment 1 sent at 2 and 6, fragment 0 at 4: at
     * step 6 each flushes fragment 0's steps 5 and 6) */
    flush_pair(6, 100);
    world w;
    world_init(&w, 1, 1, 0, 3);
    w.vp.steps = -1;
    CHECK(dlc_vtime_new(&w.vp, w.x[0].plan, w.models, dlc_params_data(w.x[0].p)) == NULL &&
          strstr(dlc_last_error(), "steps = -1"));
    world_free(&w);
}

/* The syncer in 2 shards (vtime.h, shards): 3 learners, 4 fragments, shard 2 down from
 * 10.5 to 20.5.  Every merge is made by the owner of its fragment; while shard 2 is down
 * shard 1 merges on and no learner waits (a step every second each); shard 2 merges again
 * after its restart; the global model holds each fragment as its owner holds it; a
 * fault of a shard that the run does not have is refused, named. */
/* 3 learners, 4 fragments, H = 4, tau = 1, the syncer in 2 shards (with standbys and a
 * lease of 2 s when standbys), the faults f[0..nf) scheduled; started, or 0. */
static int shard_world(world *w, const dlc_fault *f, int nf, int standbys) {
    world_init(w, 3, 4, 0, 40);
    w->vp.learner.H = 4, w->vp.learner.tau = 1, w->vp.learner.heartbeat = 0.5;
    w->vp.syncer.timeout = 30;
    w->vp.shards = 2, w->vp.standbys = standbys, w->vp.lease = standbys ? 2 : 0;
    for (int i = 0; i < nf; i++) CHECK(dlc_chaos_add(world_chaos(w), &f[i]) == DLC_OK);
    return world_start(w);
}

/* A syncer fault that the run of 2 shards (standbys: 0) cannot take: refused, naming
 * both. */
static void shard_fault_refused(dlc_fault bad, const char *what, const char *why) {
    world w;
    world_init(&w, 2, 4, 0, 10);
    w.vp.shards = 2;
    CHECK(dlc_chaos_add(world_chaos(&w), &bad) == DLC_OK);
    w.vt = dlc_vtime_new(&w.vp, w.x[0].plan, w.models, dlc_params_data(w.x[0].p));
    CHECK(w.vt == NULL && strstr(dlc_last_error(), what) && strstr(dlc_last_error(), why));
    world_free(&w);
}

static void test_shards(void) {
    world w;
    dlc_fault f = {.at = 10.5, .kind = DLC_FAULT_SYNCER, .learner = -1, .duration = 10, .shard = 2};
    if (!shard_world(&w, &f, 1, 0)) return world_free(&w);
    CHECK(dlc_vtime_shards(w.vt) == 2 && dlc_vtime_shard(w.vt, 1) != NULL && dlc_vtime_shard(w.vt, 2) == NULL);
    world_run(&w, -1);
    CHECK(!w.failed);
    int owner[4];
    CHECK(dlc_plan_deal(w.x[0].plan, 2, owner) == DLC_OK);
    int merged[4] = {0}, during[2] = {0}, after2 = 0, wrong = 0;
    for (int i = 0; i < w.n; i++) {
        const rec *r = &w.log[i];
        if (r->type != DLC_VT_MERGE) continue;
        if (r->shard != owner[r->fragment] + 1) wrong++;
        merged[r->fragment]++;
        if (r->time > 10.5 && r->time < 20.5) during[r->shard - 1]++;
        if (r->time > 20.5 && r->shard == 2) after2++;
    }
    CHECK(wrong == 0);
    for (int p = 0; p < 4; p++) CHECK(merged[p] > 0);
    CHECK(during[0] > 0 && during[1] == 0);
    CHECK(after2 > 0);
    const rec *f0 = find(&w, DLC_VT_FAULT, -1, 10.5), *f1 = find(&w, DLC_VT_FAULT, -1, 20.5);
    CHECK(f0 && f0->fault == DLC_FAULT_SYNCER && f0->begin == 1 && f0->shard == 2 && f1 && f1->begin == 0);
    for (int m = 0; m < 3; m++) CHECK(count(&w, DLC_VT_STEP, m, 10.0, 21.0) == 10); /* no wait */
    float g[NMAX], a[NMAX];
    memset(g, 0, sizeof g);
    CHECK(dlc_vtime_global(w.vt, g) == DLC_OK);
    for (int p = 0; p < 4; p++) {
        gather(&w.x[0], p, g, a);
        const float *t = dlc_syncer_theta(dlc_vtime_shard(w.vt, owner[p]), p);
        CHECK(t && memcmp(a, t, (size_t)dlc_plan_numel(w.x[0].plan, p) * sizeof(float)) == 0);
    }
    check_stats(&w);
    world_free(&w);
    shard_fault_refused((dlc_fault){.at = 1, .kind = DLC_FAULT_SYNCER, .learner = -1, .duration = 1, .shard = 3},
                        "shard 3", "2 shards");
}

/* Standbys (vtime.h, standbys): 2 shards with a standby each, a lease of 2 s.  Shard 2's
 * primary fails at 10.5 for 10 s: its standby serves from 12.5 (no merge of shard 2 in
 * between, merges again before the fault ends), one takeover.  Its standby fails at 25.5
 * for 10 s and its primary at 28.5 for 5 s: with no standby to take over, shard 2 is down
 * the whole 5 s.  Shard 1 merges throughout.  A fault of role standby without standbys is
 * refused, named. */
static void test_standbys(void) {
    world w;
    const dlc_fault f[3] = {
        {.at = 10.5, .kind = DLC_FAULT_SYNCER, .learner = -1, .duration = 10, .shard = 2},
        {.at = 25.5, .kind = DLC_FAULT_SYNCER, .learner = -1, .duration = 10, .shard = 2, .role = DLC_ROLE_STANDBY},
        {.at = 28.5, .kind = DLC_FAULT_SYNCER, .learner = -1, .duration = 5, .shard = 2}};
    if (!shard_world(&w, f, 3, 1)) return world_free(&w);
    world_run(&w, -1);
    CHECK(!w.failed);
    int in_lease = 0, after_lease = 0, outage = 0, shard1 = 0;
    for (int i = 0; i < w.n; i++) {
        const rec *r = &w.log[i];
        if (r->type != DLC_VT_MERGE) continue;
        if (r->shard == 2 && r->time > 10.5 && r->time < 12.5) in_lease++;
        if (r->shard == 2 && r->time > 12.5 && r->time < 20.5) after_lease++;
        if (r->shard == 2 && r->time > 28.5 && r->time < 33.5) outage++;
        if (r->shard == 1 && r->time > 28.5 && r->time < 33.5) shard1++;
    }
    CHECK(in_lease == 0 && after_lease > 0 && outage == 0 && shard1 > 0);
    dlc_vtime_stats st;
    CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK && st.takeovers == 1);
    const rec *sb = find(&w, DLC_VT_FAULT, -1, 25.5);
    CHECK(sb && sb->fault == DLC_FAULT_SYNCER && sb->role == DLC_ROLE_STANDBY && sb->shard == 2);
    for (int m = 0; m < 3; m++) CHECK(count(&w, DLC_VT_STEP, m, 10.0, 36.0) == 25); /* no wait */
    check_stats(&w);
    world_free(&w);
    shard_fault_refused((dlc_fault){.at = 1, .kind = DLC_FAULT_SYNCER, .learner = -1, .duration = 1, .shard = 1,
                                    .role = DLC_ROLE_STANDBY},
                        "role standby", "no standby");
}

/* Pauses of the syncer (chaos.h: kind PAUSE, learner -1): 2 shards, 3 learners.  Without
 * standbys shard 2 stopped from 10.5 to 20.5 merges nothing then and loses nothing: what
 * reached it is taken, in order, when it goes on (a merge of shard 2 at 20.5 with all
 * three learners' contributions), no message dropped (a fault of kind SYNCER loses
 * them), shard 1 merges throughout and no learner waits.  With
 * standbys (lease 2 s) a pause of shard 2's primary from 10.5 for 10 s ends in a takeover
 * at 12.5 (merges again before 20.5; what the stopped primary held is lost); one of 1 s
 * at 25.5, shorter than the lease, takes nothing over and loses nothing. */
static void test_syncer_pause(void) {
    world w;
    dlc_fault f = {.at = 10.5, .kind = DLC_FAULT_PAUSE, .learner = -1, .duration = 10, .shard = 2};
    if (!shard_world(&w, &f, 1, 0)) return world_free(&w);
    world_run(&w, -1);
    CHECK(!w.failed);
    int during[2] = {0}, after = 0;
    unsigned at_end = 0; /* the learners whose contributions shard 2 merged as it went on */
    for (int i = 0; i < w.n; i++) {
        const rec *r = &w.log[i];
        if (r->type != DLC_VT_MERGE) continue;
        if (r->time > 10.5 && r->time < 20.5) during[r->shard - 1]++;
        if (r->shard == 2 && r->time == 20.5) at_end |= r->who;
        if (r->shard == 2 && r->time > 20.5) after++;
    }
    CHECK(during[0] > 0 && during[1] == 0 && at_end == 7u && after > 0);
    dlc_vtime_stats st;
    CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK && st.dropped == 0 && st.takeovers == 0);
    const rec *f0 = find(&w, DLC_VT_FAULT, -1, 10.5);
    CHECK(f0 && f0->fault == DLC_FAULT_PAUSE && f0->begin == 1 && f0->shard == 2);
    for (int m = 0; m < 3; m++) CHECK(count(&w, DLC_VT_STEP, m, 10.0, 21.0) == 10); /* no wait */
    check_stats(&w);
    world_free(&w);

    const dlc_fault g[2] = {{.at = 10.5, .kind = DLC_FAULT_PAUSE, .learner = -1, .duration = 10, .shard = 2},
                            {.at = 25.5, .kind = DLC_FAULT_PAUSE, .learner = -1, .duration = 1, .shard = 2}};
    if (!shard_world(&w, g, 2, 1)) return world_free(&w);
    world_run(&w, -1);
    CHECK(!w.failed);
    int in_lease = 0, taken = 0;
    for (int i = 0; i < w.n; i++) {
        const rec *r = &w.log[i];
        if (r->type != DLC_VT_MERGE || r->shard != 2) continue;
        if (r->time > 10.5 && r->time < 12.5) in_lease++;
        if (r->time >= 12.5 && r->time < 20.5) taken++;
    }
    CHECK(in_lease == 0 && taken > 0);
    CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK && st.takeovers == 1 && st.dropped > 0);
    int64_t dropped = st.dropped;
    world_free(&w);
    /* the short pause alone: nothing taken over, nothing lost */
    if (!shard_world(&w, &g[1], 1, 1)) return world_free(&w);
    world_run(&w, -1);
    CHECK(!w.failed);
    CHECK(dlc_vtime_get_stats(w.vt, &st) == DLC_OK && st.takeovers == 0 && st.dropped == 0 && dropped > 0);
    check_stats(&w);
    world_free(&w);
    shard_fault_refused((dlc_fault){.at = 1, .kind = DLC_FAULT_PAUSE, .learner = -1, .duration = 1, .shard = 3},
                        "pause of the syncer of shard 3", "2 shards");
}

int main(void) {
    test_one_instant();
    test_kill_rejoin();
    test_cut();
    test_link();
    test_syncer_fault();
    test_determinism();
    test_final_flush();
    test_account();
    test_dp_rounds();
    test_dp_kill();
    test_shared_cores();
    test_stop_at_steps();
    test_pause();
    test_shards();
    test_standbys();
    test_syncer_pause();
    return check_done("test_vtime");
}
