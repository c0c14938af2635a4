/* rt_loopback.c - the real-time drivers (rt/include/diloco/rt.h) over loopback TCP in
 * one process: a syncer and two learners on check_fx.h's small model, driven by fake
 * inner steps.  Joins, merges from both, the global model moving, a learner of another
 * model refused with the difference named, a learner that keeps stepping without ever
 * waiting while its syncer is gone (contributions held, the oldest dropped), the
 * syncer's checkpoint resumed with the next epoch (and who said BYE with it), and a
 * poisoned learner rolled back to the global model, and the start gate that lets learners
 * begin together. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "check_fx.h"
#include "diloco/ckpt.h"
#include "diloco/rt.h"
#include "fake_clock.h"

static const char SECRET[] = "rt_loopback secret";

static dlc_net_config net_config(void) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET, c.secret_len = sizeof SECRET - 1;
    c.heartbeat_s = 0.2, c.timeout_s = 3, c.reconnect_min_s = 0.05, c.reconnect_max_s = 0.2;
    return c;
}

static dlc_learner_params lparams(void) {
    dlc_learner_params lp = dlc_learner_default_params();
    lp.H = 4, lp.tau = 1, lp.heartbeat = 0.2;
    return lp;
}

static int bf16_down; /* start_syncer's syncer sends bf16 fragments */
static fake_clock *syncer_clock; /* start_syncer's syncer keeps this clock (NULL: the wall clock) */

static dlc_srt *start_syncer(const fx *x, const char *listen, const char *resume) {
    dlc_srt_config sc = dlc_srt_default_config();
    sc.syncer.learners = 2;
    if (bf16_down) sc.syncer.codec_down = DLC_CODEC_BF16;
    sc.syncer.tau = 1;
    sc.plan = x->plan;
    sc.theta0 = dlc_params_data(x->p);
    sc.net = net_config();
    if (syncer_clock) sc.net.clock = fake_clock_read, sc.net.clock_arg = syncer_clock;
    sc.listen = listen;
    sc.run = "rt_loopback";
    sc.resume = resume;
    return dlc_srt_new(&sc);
}

static int inline_codec; /* start_learner's learners encode and decode inside their calls */

static dlc_lrt *start_learner(const fx *x, int id, int port) {
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    dlc_lrt_config lc = dlc_lrt_default_config();
    lc.learner = lparams();
    lc.learner.id = id;
    lc.params = x->p;
    lc.plan = x->plan;
    lc.net = net_config();
    lc.connect = addr;
    lc.run = "rt_loopback";
    lc.hold = 3;
    lc.inline_codec = inline_codec;
    return dlc_lrt_new(&lc);
}

/* Takes the syncer's events for up to seconds; counts merges with each learner in them. */
static void collect(dlc_srt *s, double seconds, int merged_by[2], int *merges, int *refused, char *why, size_t cap) {
    double end = dlc_rt_clock() + seconds;
    dlc_srt_event ev;
    while (dlc_rt_clock() < end) {
        int r = dlc_srt_poll(s, &ev, 20);
        CHECK(r >= 0);
        if (r <= 0) continue;
        if (ev.kind == DLC_SRT_MERGED) {
            (*merges)++;
            for (int i = 0; i < ev.merge.count; i++) {
                int m = ev.merge.contribs[i].learner;
                if (m >= 0 && m < 2) merged_by[m]++;
            }
        } else if (ev.kind == DLC_SRT_REFUSED && refused) {
            (*refused)++;
            if (why) snprintf(why, cap, "%s", ev.text);
        }
        dlc_srt_event_release(&ev);
    }
}

static void test_two_learners(void) {
    fx xs, x1, x2;
    fx_make(&xs, 2, 11);
    fx_make(&x1, 2, 11);
    fx_make(&x2, 2, 11);
    bf16_down = 1; /* decoded on a's I/O thread (an f32 one: by the learner, into its stash) */
    dlc_srt *s = start_syncer(&xs, "127.0.0.1:0", NULL);
    bf16_down = 0;
    CHECK_OK(s);
    if (!s) return;
    int port = dlc_srt_port(s);
    CHECK(port > 0);
    float before[NMAX] = {0};
    CHECK(dlc_srt_global(s, before) == DLC_OK);
    dlc_lrt *a = start_learner(&x1, 0, port);
    inline_codec = 1;
    dlc_lrt *b = start_learner(&x2, 1, port);
    inline_codec = 0;
    CHECK_OK(a);
    CHECK_OK(b);
    CHECK(dlc_lrt_join(a, 10) == DLC_OK);
    CHECK(dlc_lrt_join(b, 10) == DLC_OK);
    CHECK(dlc_lrt_id(a) == 0 && dlc_lrt_id(b) == 1);
    CHECK(dlc_lrt_state(a) == DLC_LEARNER_TRAINING);
    int merged_by[2] = {0, 0}, merges = 0;
    for (int t = 0; t < 40; t++) {
        fx_step(&x1, 1.0f);
        fx_step(&x2, -1.0f);
        CHECK(dlc_lrt_step_done(a, 100, 0.001) == DLC_OK);
        CHECK(dlc_lrt_step_done(b, 100, 0.001) == DLC_OK);
        collect(s, 0.01, merged_by, &merges, NULL, NULL, 0);
    }
    CHECK(dlc_lrt_finish(a, 5, "done") == DLC_OK);
    CHECK(dlc_lrt_finish(b, 5, "done") == DLC_OK);
    collect(s, 0.3, merged_by, &merges, NULL, NULL, 0);
    CHECK(merges >= 10);
    CHECK(merged_by[0] > 0 && merged_by[1] > 0);
    float after[NMAX] = {0};
    CHECK(dlc_srt_global(s, after) == DLC_OK);
    int64_t n = dlc_params_numel(xs.p);
    double moved = 0;
    for (int64_t i = 0; i < n; i++) moved += fabs((double)after[i] - before[i]);
    CHECK(moved > 0.01); /* the merges moved the global model */
    dlc_srt_learner_info i0;
    CHECK(dlc_srt_learner(s, 0, &i0) == DLC_OK);
    /* its final heartbeat's schedule step: 40 steps, more if it caught up (learner.h) */
    CHECK(i0.bye == 1 && i0.steps == dlc_learner_schedule_step(dlc_lrt_learner(a)) && i0.steps >= 40 &&
          i0.bytes_in > 0 && i0.bytes_out > 0);
    dlc_lrt_stats ls;
    CHECK(dlc_lrt_get_stats(a, &ls) == DLC_OK);
    CHECK(ls.wait_s < 5 && ls.applied > 0 && ls.sent > 0);
    /* a encoded on its codec thread and its I/O thread decoded what arrived; b, with
     * inline_codec, did both inside its calls: each contribution once either way */
    CHECK(ls.encoded >= 10 && ls.decoded >= ls.applied && ls.encode_wait_s < 1);
    dlc_lrt_stats lb;
    CHECK(dlc_lrt_get_stats(b, &lb) == DLC_OK);
    CHECK(lb.encoded == 0 && lb.decoded == 0 && lb.sent > 0 && lb.applied > 0);
    /* many contributions went out in the buffer of an earlier one, kept (not all: the
     * first, and one encoded while the last was still on its way) */
    CHECK(ls.reused >= ls.sent / 4 && ls.reused < ls.sent && lb.reused >= lb.sent / 4);
    fprintf(stderr, "  buffers reused: a %lld of %lld sent, b %lld of %lld\n", (long long)ls.reused,
            (long long)ls.sent, (long long)lb.reused, (long long)lb.sent);
    dlc_lrt_free(a);
    dlc_lrt_free(b);

    /* a learner of another model (5 fragments' plan, another layout) is refused, named */
    fx other;
    fx_make(&other, 3, 12);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    dlc_lrt_config lc = dlc_lrt_default_config();
    lc.learner = lparams();
    lc.params = other.p, lc.plan = other.plan, lc.net = net_config(), lc.connect = addr, lc.run = "rt_loopback";
    dlc_lrt *bad = dlc_lrt_new(&lc);
    CHECK_OK(bad);
    double t0 = dlc_rt_clock();
    CHECK(dlc_lrt_join(bad, 10) == DLC_ERR_STATE);
    CHECK(strstr(dlc_last_error(), "refused") && strstr(dlc_last_error(), "mismatch"));
    CHECK(dlc_rt_clock() - t0 < 5); /* at once, not at the deadline */
    int refused = 0;
    char why[DLC_RT_TEXT_MAX] = "";
    collect(s, 0.2, merged_by, &merges, &refused, why, sizeof why);
    CHECK(refused >= 1);
    dlc_lrt_free(bad);
    fx_free(&other);
    dlc_srt_free(s);
    fx_free(&xs);
    fx_free(&x1);
    fx_free(&x2);
}

/* A learner whose syncer is gone keeps stepping: nothing in step_done waits, what cannot
 * be sent is held, and a newer contribution of a fragment from the same base (no merge
 * comes back) replaces the one held: one per fragment waits, nothing is dropped. */
static void test_syncer_gone(void) {
    fx xs, x1;
    fx_make(&xs, 2, 21);
    fx_make(&x1, 2, 21);
    dlc_srt *s = start_syncer(&xs, "127.0.0.1:0", NULL);
    CHECK_OK(s);
    if (!s) return;
    dlc_lrt *a = start_learner(&x1, 0, dlc_srt_port(s));
    CHECK(dlc_lrt_join(a, 10) == DLC_OK);
    dlc_srt_free(s);
    /* the learner steps on until it has noticed: its DISCONNECTED event */
    int gone = 0;
    for (double end = dlc_rt_clock() + 10; !gone && dlc_rt_clock() < end;) {
        fx_step(&x1, 1.0f);
        CHECK(dlc_lrt_step_done(a, 100, 0.001) == DLC_OK);
        dlc_lrt_event ev;
        while (dlc_lrt_poll(a, &ev) == 1) gone |= ev.kind == DLC_LRT_DISCONNECTED;
    }
    CHECK(gone);
    double slowest = 0;
    for (int t = 0; t < 60; t++) {
        fx_step(&x1, 1.0f);
        double t0 = dlc_rt_clock();
        CHECK(dlc_lrt_step_done(a, 100, 0.001) == DLC_OK);
        double dt = dlc_rt_clock() - t0;
        if (dt > slowest) slowest = dt;
    }
    CHECK(slowest < 0.1); /* a socket wait would be a reconnect backoff or a timeout */
    dlc_lrt_stats ls;
    CHECK(dlc_lrt_get_stats(a, &ls) == DLC_OK);
    CHECK(ls.connected == 0);
    CHECK(ls.held >= 4 && ls.held_superseded >= ls.held - 2 && ls.held_dropped == 0);
    CHECK(dlc_lrt_state(a) == DLC_LEARNER_TRAINING);
    dlc_lrt_free(a);
    fx_free(&xs);
    fx_free(&x1);
}

/* The syncer saved, freed (a crash after its checkpoint) and started from the file:
 * the next epoch, the same global model, and its learner reconnects and merges again. */
static void test_resume(void) {
    fx xs, x1;
    fx_make(&xs, 2, 31);
    fx_make(&x1, 2, 31);
    char path[] = "/tmp/rt_loopback_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    dlc_srt *s = start_syncer(&xs, "127.0.0.1:0", NULL);
    CHECK_OK(s);
    if (!s) return;
    int port = dlc_srt_port(s);
    dlc_lrt *a = start_learner(&x1, 0, port);
    CHECK(dlc_lrt_join(a, 10) == DLC_OK);
    int merged_by[2] = {0, 0}, merges = 0;
    for (int t = 0; t < 20; t++) {
        fx_step(&x1, 1.0f);
        CHECK(dlc_lrt_step_done(a, 100, 0.001) == DLC_OK);
        collect(s, 0.01, merged_by, &merges, NULL, NULL, 0);
    }
    CHECK(merges > 0);
    collect(s, 0.3, merged_by, &merges, NULL, NULL, 0); /* what was in flight is merged: the model rests */
    CHECK(dlc_srt_epoch(s) == 1);
    const char *k[1] = {"test.note"}, *v[1] = {"saved"};
    CHECK(dlc_srt_save(s, path, 1, k, v) == DLC_OK);
    float saved[NMAX] = {0}; /* the arena's padding is not written: zero on both sides */
    CHECK(dlc_srt_global(s, saved) == DLC_OK);
    dlc_srt_free(s);
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    s = start_syncer(&xs, listen, path);
    CHECK_OK(s);
    if (!s) goto out;
    CHECK(dlc_srt_epoch(s) == 2);
    float loaded[NMAX] = {0};
    CHECK(dlc_srt_global(s, loaded) == DLC_OK);
    int ndiff = 0;
    for (int64_t i = 0; i < dlc_params_numel(xs.p); i++) ndiff += saved[i] != loaded[i];
    if (ndiff) fprintf(stderr, "resume: %d of %lld floats differ\n", ndiff, (long long)dlc_params_numel(xs.p));
    CHECK(ndiff == 0);
    merges = 0;
    for (int t = 0; t < 200 && merges == 0; t++) { /* it reconnects (backoff 50..200 ms), is resynced, merges */
        fx_step(&x1, 1.0f);
        CHECK(dlc_lrt_step_done(a, 100, 0.001) == DLC_OK);
        collect(s, 0.02, merged_by, &merges, NULL, NULL, 0);
    }
    CHECK(merges > 0);
    dlc_srt_free(s);
out:
    dlc_lrt_free(a);
    unlink(path);
    fx_free(&xs);
    fx_free(&x1);
}

/* A learner's model poisoned between steps: dlc_lrt_check_finite names the element,
 * dlc_lrt_rollback writes the last global model back (the syncer's, bit for bit: nothing
 * was merged since the join), and the learner steps and contributes on. */
static void test_rollback(void) {
    fx xs, x1;
    fx_make(&xs, 2, 41);
    fx_make(&x1, 2, 41);
    dlc_srt *s = start_syncer(&xs, "127.0.0.1:0", NULL);
    CHECK_OK(s);
    if (!s) return;
    dlc_lrt *a = start_learner(&x1, 0, dlc_srt_port(s));
    CHECK_OK(a);
    CHECK(a && dlc_lrt_join(a, 10) == DLC_OK);
    if (!a) goto out;
    int k = -1;
    int64_t idx = -1;
    float val = 0;
    CHECK(dlc_lrt_check_finite(a, &k, &idx, &val) == DLC_OK);
    fx_step(&x1, 1.0f); /* step 1: nothing is due (fragment 1 after step 2, fragment 0 after 4) */
    CHECK(dlc_lrt_step_done(a, 100, 0.001) == DLC_OK);
    fx_step(&x1, 1.0f);
    float *th = dlc_params_data(x1.p);
    th[dlc_params_offset(x1.p, 1) + 3] = NAN;
    th[dlc_params_offset(x1.p, 2)] = -INFINITY;
    CHECK(dlc_lrt_check_finite(a, &k, &idx, &val) == DLC_ERR_RANGE && k == 1 && idx == 3 && isnan(val) &&
          strstr(dlc_last_error(), "parameter 'b' element 3 is nan"));
    CHECK(dlc_lrt_rollback(a) == DLC_OK);
    CHECK(dlc_lrt_check_finite(a, NULL, NULL, NULL) == DLC_OK);
    float global[NMAX] = {0}, mine[NMAX] = {0};
    CHECK(dlc_srt_global(s, global) == DLC_OK);
    memcpy(mine, th, (size_t)dlc_params_numel(x1.p) * sizeof(float));
    int ndiff = 0;
    for (int64_t i = 0; i < dlc_params_numel(x1.p); i++) ndiff += global[i] != mine[i];
    CHECK(ndiff == 0);
    dlc_lrt_stats st;
    CHECK(dlc_lrt_get_stats(a, &st) == DLC_OK && st.rollbacks == 1);
    CHECK(dlc_learner_steps(dlc_lrt_learner(a)) == 1); /* the failed step is not counted */
    int merged_by[2] = {0, 0}, merges = 0;
    for (int t = 0; t < 100 && merged_by[0] == 0; t++) {
        fx_step(&x1, 1.0f);
        CHECK(dlc_lrt_step_done(a, 100, 0.001) == DLC_OK);
        collect(s, 0.01, merged_by, &merges, NULL, NULL, 0);
    }
    CHECK(merged_by[0] > 0);
out:
    dlc_lrt_free(a);
    dlc_srt_free(s);
    fx_free(&xs);
    fx_free(&x1);
}

/* A learner says BYE; the syncer's checkpoint records it (rt.bye) and a resumed syncer
 * knows it left, while the other, which never came, is absent since the start; the host
 * may not write the driver's key itself. */
static void test_resume_bye(void) {
    fx xs, x1;
    fx_make(&xs, 2, 51);
    fx_make(&x1, 2, 51);
    char path[] = "/tmp/rt_loopback_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    dlc_srt *s = start_syncer(&xs, "127.0.0.1:0", NULL);
    CHECK_OK(s);
    if (!s) return;
    dlc_lrt *a = start_learner(&x1, 1, dlc_srt_port(s));
    CHECK(a && dlc_lrt_join(a, 10) == DLC_OK);
    CHECK(a && dlc_lrt_finish(a, 1, "finished") == DLC_OK);
    dlc_srt_learner_info info;
    int bye = 0;
    for (int i = 0; i < 200 && !bye; i++) {
        collect(s, 0.01, (int[2]){0, 0}, &(int){0}, NULL, NULL, 0);
        bye = dlc_srt_learner(s, 1, &info) == DLC_OK && info.bye && !info.connected;
    }
    CHECK(bye);
    const char *k[1] = {"rt.bye"}, *v[1] = {"0"};
    CHECK(dlc_srt_save(s, path, 1, k, v) == DLC_ERR_ARG && strstr(dlc_last_error(), "\"rt.bye\" is the driver's own"));
    CHECK(dlc_srt_save(s, path, 0, NULL, NULL) == DLC_OK);
    dlc_srt_free(s);
    dlc_safetensors *st = dlc_safetensors_open(path);
    CHECK(st && dlc_safetensors_meta(st, "rt.bye") && strcmp(dlc_safetensors_meta(st, "rt.bye"), "1") == 0);
    dlc_safetensors_close(st);
    fake_clock fc; /* the resumed syncer's clock, moved by hand */
    fake_clock_init(&fc);
    syncer_clock = &fc;
    s = start_syncer(&xs, "127.0.0.1:0", path);
    syncer_clock = NULL;
    CHECK_OK(s);
    if (s) {
        CHECK(dlc_srt_learner(s, 1, &info) == DLC_OK && info.bye == 1 && !info.connected);
        CHECK(dlc_srt_learner(s, 0, &info) == DLC_OK && info.bye == 0 && info.joins == 0 && info.absent == 0);
        fake_clock_advance(&fc, 2.5);
        CHECK(dlc_srt_clock_moved(s) == DLC_OK);
        /* absent since the start, on the syncer's clock; the one that said BYE is still gone */
        CHECK(dlc_srt_learner(s, 0, &info) == DLC_OK && info.joins == 0 && info.absent == 2.5);
        CHECK(dlc_srt_learner(s, 1, &info) == DLC_OK && info.bye == 1 && !info.connected);
        dlc_srt_free(s);
    }
    dlc_lrt_free(a);
    unlink(path);
    fx_free(&xs);
    fx_free(&x1);
}

/* The start gate (rt.h, start_learners): the first learner to connect waits without the
 * model until the second has connected, then both join at once; with one missing, the
 * gate opens start_timeout after the first arrived.  A bad gate is refused. */
static void test_start_gate(void) {
    fx xs, x1, x2;
    fx_make(&xs, 2, 11);
    fx_make(&x1, 2, 11);
    fx_make(&x2, 2, 11);
    dlc_srt_config sc = dlc_srt_default_config();
    sc.syncer.learners = 2, sc.syncer.tau = 1;
    sc.plan = xs.plan, sc.theta0 = dlc_params_data(xs.p), sc.net = net_config(), sc.run = "rt_loopback";
    sc.start_learners = 3; /* more than the run has */
    CHECK(dlc_srt_new(&sc) == NULL && dlc_last_status() == DLC_ERR_ARG);
    sc.start_learners = 2, sc.start_timeout = -1;
    CHECK(dlc_srt_new(&sc) == NULL && strstr(dlc_last_error(), "start_timeout") != NULL);
    sc.start_timeout = 60;
    sc.refusals_every = 0; /* refusals reported in intervals of no length */
    CHECK(dlc_srt_new(&sc) == NULL && strstr(dlc_last_error(), "refusals_every = 0: expected a finite interval > 0 s"));
    sc.refusals_every = 10;
    dlc_srt *s = dlc_srt_new(&sc);
    CHECK_OK(s);
    if (!s) return;
    dlc_lrt *a = start_learner(&x1, 0, dlc_srt_port(s));
    CHECK_OK(a);
    /* alone at the gate: no model within a second */
    CHECK(a && dlc_lrt_join(a, 1.0) != DLC_OK);
    dlc_srt_learner_info ia;
    CHECK(dlc_srt_learner(s, 0, &ia) == DLC_OK && !ia.joined);
    dlc_lrt *b = start_learner(&x2, 1, dlc_srt_port(s));
    CHECK_OK(b);
    CHECK(b && dlc_lrt_join(b, 10.0) == DLC_OK);
    CHECK(a && dlc_lrt_join(a, 10.0) == DLC_OK);
    CHECK(dlc_srt_learner(s, 0, &ia) == DLC_OK && ia.joined && ia.joins == 1);
    dlc_lrt_free(a);
    dlc_lrt_free(b);
    dlc_srt_free(s);
    /* one of two never comes: the gate opens 0.5 s after the first arrived */
    sc.start_timeout = 0.5;
    s = dlc_srt_new(&sc);
    CHECK_OK(s);
    if (!s) return;
    double t0 = dlc_rt_clock();
    a = start_learner(&x1, 0, dlc_srt_port(s));
    CHECK(a && dlc_lrt_join(a, 10.0) == DLC_OK);
    double waited = dlc_rt_clock() - t0;
    CHECK(waited >= 0.5 && waited < 5);
    dlc_lrt_free(a);
    dlc_srt_free(s);
    fx_free(&xs);
    fx_free(&x1);
    fx_free(&x2);
}

int main(void) {
    (void)gather, (void)randv; /* check_fx.h's, unused here */
    test_start_gate();
    test_two_learners();
    test_syncer_gone();
    test_resume();
    test_rollback();
    test_resume_bye();
    return check_done("rt_loopback");
}
