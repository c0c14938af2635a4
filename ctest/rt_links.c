/* rt_links.c - a learner's link emulated on the syncer's side (dlc_srt_shape, dlc_srt_cut),
 * on an injected clock that the test moves (fake_clock.h; rt.h, "An injected clock"):
 * a link with 0.25 s of one-way latency delays the whole model on the way down and each
 * contribution on the way up by at least that much of the clock; a cut of 3.5 s, longer
 * than the timeout (1.5 s), loses the learner within a heartbeat of the timeout, and the
 * learner trains on, is held while it retries during the cut, joins again once the clock
 * passes the cut's end and contributes to merges again; a cut ended early loses nobody;
 * bad arguments are refused, named.  One syncer and one learner over loopback in one
 * process, on check_fx.h's small model.  Every time asserted is the injected clock's, as
 * the events carry it (ev.clock): nothing waits on the wall clock but for an event. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include "check.h"
#include "check_fx.h"
#include "diloco/rt.h"
#include "fake_clock.h"

static const char SECRET[] = "rt_links secret";
#define HEARTBEAT 0.2
#define TIMEOUT 1.5
#define STEP 0.0625 /* the clock's step: exact in binary */

static fake_clock fc;
static dlc_srt *S;
static dlc_lrt *A;

static dlc_net_config net_config(void) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET, c.secret_len = sizeof SECRET - 1;
    c.heartbeat_s = HEARTBEAT, c.timeout_s = TIMEOUT, c.reconnect_min_s = 0.05, c.reconnect_max_s = 0.2;
    c.clock = fake_clock_read, c.clock_arg = &fc;
    return c;
}

static double now(void) { return fake_clock_read(&fc); }

/* Moves the run's clock by dt; both drivers have acted on it when this returns. */
static void advance(double dt) {
    fake_clock_advance(&fc, dt);
    if (A) CHECK(dlc_lrt_clock_moved(A) == DLC_OK);
    CHECK(dlc_srt_clock_moved(S) == DLC_OK);
}

typedef struct tally {
    int merges, merged0, lost, joined, bye;
    double t_merge, t_lost, t_joined; /* the injected clock's, from the events */
} tally;

/* Takes the syncer's events, waiting up to wait_ms for the first (what the network
 * brings between two moves of the clock). */
static void collect(int wait_ms, tally *t) {
    dlc_srt_event ev;
    int r;
    while ((r = dlc_srt_poll(S, &ev, wait_ms)) == 1) {
        wait_ms = 0;
        if (ev.kind == DLC_SRT_MERGED) {
            t->merges++, t->t_merge = ev.clock;
            for (int i = 0; i < ev.merge.count; i++) t->merged0 += ev.merge.contribs[i].learner == 0;
        }
        if (ev.kind == DLC_SRT_LOST && ev.learner == 0 && !t->lost++) t->t_lost = ev.clock;
        if (ev.kind == DLC_SRT_JOINED && ev.learner == 0) t->joined++, t->t_joined = ev.clock;
        if (ev.kind == DLC_SRT_BYE && ev.learner == 0) t->bye++;
        dlc_srt_event_release(&ev);
    }
    CHECK(r >= 0);
}

/* One step of the run: the clock moves, the learner takes one inner step, the syncer's
 * events are taken. */
static void tick(tally *t) {
    advance(STEP);
    CHECK(dlc_lrt_step_done(A, 100, STEP) == DLC_OK); /* it trains on, never waiting */
    collect(2, t);
}

static void test_links(void) {
    fake_clock_init(&fc);
    fx xs, x1;
    fx_make(&xs, 2, 31);
    fx_make(&x1, 2, 31);
    dlc_srt_config sc = dlc_srt_default_config();
    sc.syncer.learners = 1;
    sc.syncer.tau = 1;
    sc.plan = xs.plan;
    sc.theta0 = dlc_params_data(xs.p);
    sc.net = net_config();
    sc.run = "rt_links";
    S = dlc_srt_new(&sc);
    CHECK_OK(S);
    if (!S) return;

    /* bad arguments: named (a learner by its number, index + 1), nothing changed */
    CHECK(dlc_srt_shape(S, 1, 0, 0) == DLC_ERR_RANGE && strstr(dlc_last_error(), "learner 2: expected 1..1"));
    CHECK(dlc_srt_shape(S, 0, 10, 0) == DLC_ERR_ARG && strstr(dlc_last_error(), "learner 1: bandwidth = 10 bytes/s"));
    CHECK(dlc_srt_shape(S, 0, 0, -1) == DLC_ERR_ARG && strstr(dlc_last_error(), "latency = -1 s"));
    CHECK(dlc_srt_cut(S, 0, -2) == DLC_ERR_ARG && strstr(dlc_last_error(), "seconds = -2"));
    CHECK(dlc_srt_cut(S, 0, NAN) == DLC_ERR_ARG);

    /* 0.25 s each way, set before the learner connects: held for its connections */
    CHECK(dlc_srt_shape(S, 0, 0, 0.25) == DLC_OK);
    dlc_srt_learner_info info;
    CHECK(dlc_srt_learner(S, 0, &info) == DLC_OK && info.latency == 0.25 && info.rate == 0 && info.cut == 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", dlc_srt_port(S));
    dlc_lrt_config lc = dlc_lrt_default_config();
    lc.learner = dlc_learner_default_params();
    lc.learner.H = 4, lc.learner.tau = 1, lc.learner.heartbeat = HEARTBEAT, lc.learner.id = 0;
    lc.params = x1.p, lc.plan = x1.plan, lc.net = net_config(), lc.connect = addr, lc.run = "rt_links";
    lc.inline_codec = 1; /* a contribution has left when step_done returns */
    A = dlc_lrt_new(&lc);
    CHECK_OK(A);
    if (!A) return;
    /* the join: each move of the clock lets the held frames go; a join call takes them */
    double t0 = now();
    int joined = 0;
    for (int k = 0; k < 400 && !joined; k++) {
        joined = dlc_lrt_join(A, 0.02) == DLC_OK;
        if (!joined) advance(STEP);
    }
    double join_s = now() - t0;
    CHECK(joined && join_s >= 0.25); /* the whole model came down the link */

    /* the first contribution goes up the link: its merge comes >= 0.25 s after it left */
    tally t = {0};
    dlc_lrt_stats ls = {0};
    for (int k = 0; k < 50 && ls.sent == 0; k++) {
        CHECK(dlc_lrt_step_done(A, 100, STEP) == DLC_OK);
        CHECK(dlc_lrt_get_stats(A, &ls) == DLC_OK);
        if (ls.sent == 0) advance(STEP);
    }
    double sent_at = now(); /* it left at this clock reading: nothing moved it since */
    CHECK(ls.sent > 0);
    for (int k = 0; k < 100 && !t.merges; k++) tick(&t);
    fprintf(stderr, "latency 0.25 s: join %.3f s, first contribution merged %.3f s after it was sent\n", join_s,
            t.t_merge - sent_at);
    CHECK(t.merges >= 1 && t.t_merge - sent_at >= 0.25 && t.t_merge - sent_at < 1);
    CHECK(dlc_srt_shape(S, 0, 0, 0) == DLC_OK);

    /* a cut of 3.5 s, longer than the timeout: lost, held, joined again after.  First
     * what the learner sent is in (the clock stopped: nothing more leaves), so what the
     * syncer merges during the cut could only have crossed it */
    tally c = {0};
    dlc_srt_stats ss = {0};
    for (double end = dlc_rt_clock() + 10; dlc_rt_clock() < end;) {
        CHECK(dlc_lrt_get_stats(A, &ls) == DLC_OK && dlc_srt_get_stats(S, &ss) == DLC_OK);
        if (ss.bytes_in == ls.bytes_out) break;
        collect(2, &t);
    }
    CHECK(ss.bytes_in == ls.bytes_out);
    advance(0); /* and acted on */
    CHECK(dlc_srt_cut(S, 0, 3.5) == DLC_OK);
    double cut_at = now();
    CHECK(dlc_srt_learner(S, 0, &info) == DLC_OK && info.cut == 3.5);
    int merges_in_cut = -1;
    while (now() - cut_at < 10) {
        tick(&c);
        if (merges_in_cut < 0 && now() - cut_at >= 3.5 - STEP - STEP / 2) merges_in_cut = c.merged0; /* the cut's last step */
        if (c.joined && c.merged0 > 0 && c.t_merge > c.t_joined) break;
    }
    fprintf(stderr, "cut 3.5 s: lost after %.3f s, joined again after %.3f s, %d merges (%d with its contribution "
            "during the cut)\n", c.t_lost - cut_at, c.t_joined - cut_at, c.merges, merges_in_cut);
    /* lost by the timeout after the cut (its last frame was read before the cut began) */
    CHECK(c.lost == 1 && c.t_lost - cut_at > 1.0 && c.t_lost - cut_at <= TIMEOUT + STEP);
    CHECK(merges_in_cut == 0); /* nothing of it got through */
    CHECK(c.joined >= 1 && c.t_joined - cut_at >= 3.5);
    CHECK(c.merged0 > 0 && c.t_merge > c.t_joined); /* it contributes again */
    CHECK(dlc_srt_learner(S, 0, &info) == DLC_OK && info.cut == 0 && info.connected);

    /* a cut ended early by cut(0), a heartbeat before the timeout: nobody lost */
    tally e = {0};
    CHECK(dlc_srt_cut(S, 0, INFINITY) == DLC_OK);
    CHECK(dlc_srt_learner(S, 0, &info) == DLC_OK && isinf(info.cut));
    for (double from = now(); now() - from < TIMEOUT - HEARTBEAT;) tick(&e);
    CHECK(dlc_srt_cut(S, 0, 0) == DLC_OK);
    for (int k = 0; k < 100; k++) tick(&e);
    CHECK(e.lost == 0 && e.merged0 > 0);
    CHECK(dlc_lrt_finish(A, 5, "done") == DLC_OK);
    dlc_lrt_free(A);
    A = NULL;
    for (int k = 0; k < 500 && !e.bye; k++) collect(20, &e); /* its BYE: the syncer heard it leave */
    CHECK(e.bye == 1 && e.lost == 0);
    dlc_srt_free(S);
    S = NULL;
    fx_free(&xs);
    fx_free(&x1);
}

int main(void) {
    (void)gather, (void)randv; /* check_fx.h's, unused here */
    test_links();
    return check_done("rt_links");
}
