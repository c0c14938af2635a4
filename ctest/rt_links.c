/* rt_links.c - a learner's link emulated on the syncer's side (dlc_srt_shape, dlc_srt_cut):
 * a link with 0.25 s of one-way latency delays the whole model on the way down and each
 * contribution on the way up; a cut longer than the timeout loses the learner, which
 * trains on, is held while it reconnects during the cut, joins again when the cut ends
 * and contributes to merges again; bad arguments are refused, named.  One syncer and one
 * learner over loopback in one process, on check_fx.h's small model.  About 9 s. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>
#include "check.h"
#include "check_fx.h"
#include "diloco/rt.h"

static const char SECRET[] = "rt_links secret";

static dlc_net_config net_config(void) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET, c.secret_len = sizeof SECRET - 1;
    c.heartbeat_s = 0.2, c.timeout_s = 1.5, c.reconnect_min_s = 0.05, c.reconnect_max_s = 0.2;
    return c;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

typedef struct tally {
    int merges, merged0, lost, joined;
    double t_merge, t_lost, t_joined;
} tally;

static void collect(dlc_srt *s, double seconds, tally *t) {
    double end = dlc_rt_clock() + seconds;
    dlc_srt_event ev;
    while (dlc_rt_clock() < end) {
        int r = dlc_srt_poll(s, &ev, 5);
        CHECK(r >= 0);
        if (r <= 0) continue;
        if (ev.kind == DLC_SRT_MERGED) {
            t->merges++, t->t_merge = dlc_rt_clock();
            for (int i = 0; i < ev.merge.count; i++) t->merged0 += ev.merge.contribs[i].learner == 0;
        }
        if (ev.kind == DLC_SRT_LOST && ev.learner == 0 && !t->lost++) t->t_lost = dlc_rt_clock();
        if (ev.kind == DLC_SRT_JOINED && ev.learner == 0) t->joined++, t->t_joined = dlc_rt_clock();
        dlc_srt_event_release(&ev);
    }
}

static void test_links(void) {
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
    dlc_srt *s = dlc_srt_new(&sc);
    CHECK_OK(s);
    if (!s) return;

    /* bad arguments: named (a learner by its number, index + 1), nothing changed */
    CHECK(dlc_srt_shape(s, 1, 0, 0) == DLC_ERR_RANGE && strstr(dlc_last_error(), "learner 2: expected 1..1"));
    CHECK(dlc_srt_shape(s, 0, 10, 0) == DLC_ERR_ARG && strstr(dlc_last_error(), "learner 1: bandwidth = 10 bytes/s"));
    CHECK(dlc_srt_shape(s, 0, 0, -1) == DLC_ERR_ARG && strstr(dlc_last_error(), "latency = -1 s"));
    CHECK(dlc_srt_cut(s, 0, -2) == DLC_ERR_ARG && strstr(dlc_last_error(), "seconds = -2"));
    CHECK(dlc_srt_cut(s, 0, NAN) == DLC_ERR_ARG);

    /* 0.25 s each way, set before the learner connects: held for its connections */
    CHECK(dlc_srt_shape(s, 0, 0, 0.25) == DLC_OK);
    dlc_srt_learner_info info;
    CHECK(dlc_srt_learner(s, 0, &info) == DLC_OK && info.latency == 0.25 && info.rate == 0 && info.cut == 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", dlc_srt_port(s));
    dlc_lrt_config lc = dlc_lrt_default_config();
    lc.learner = dlc_learner_default_params();
    lc.learner.H = 4, lc.learner.tau = 1, lc.learner.heartbeat = 0.2, lc.learner.id = 0;
    lc.params = x1.p, lc.plan = x1.plan, lc.net = net_config(), lc.connect = addr, lc.run = "rt_links";
    dlc_lrt *a = dlc_lrt_new(&lc);
    CHECK_OK(a);
    double t0 = dlc_rt_clock();
    CHECK(dlc_lrt_join(a, 10) == DLC_OK);
    double join_s = dlc_rt_clock() - t0;
    CHECK(join_s >= 0.24); /* the whole model came down the link */

    /* the first contribution goes up the link: its merge comes >= 0.25 s after it left */
    tally t = {0};
    /* the contribution leaves from the codec thread during the step_done that made it due
     * and is counted (ls.sent) by then or by the next one: it left after the start of the
     * iteration before the one that first counts it (sent_lo) and before that count
     * (sent_at) */
    double sent_at = 0, sent_lo = 0, prev_start = dlc_rt_clock();
    dlc_lrt_stats ls;
    for (int k = 0; k < 200 && !t.merges; k++) {
        double start = dlc_rt_clock();
        CHECK(dlc_lrt_step_done(a, 100, 0.001) == DLC_OK);
        CHECK(dlc_lrt_get_stats(a, &ls) == DLC_OK);
        if (ls.sent > 0 && sent_at == 0) sent_at = dlc_rt_clock(), sent_lo = prev_start;
        prev_start = start;
        collect(s, 0.01, &t);
    }
    for (double end = dlc_rt_clock() + 2; !t.merges && dlc_rt_clock() < end;) collect(s, 0.02, &t);
    fprintf(stderr, "latency 0.25 s: join %.3f s, first contribution merged %.3f to %.3f s after it was sent\n",
            join_s, t.t_merge - sent_at, t.t_merge - sent_lo);
    CHECK(t.merges >= 1 && sent_at > 0 && t.t_merge - sent_lo >= 0.25 && t.t_merge - sent_at < 1.5);
    CHECK(dlc_srt_shape(s, 0, 0, 0) == DLC_OK);

    /* a cut of 3.5 s, longer than the timeout (1.5 s): lost, held, joined again after */
    tally c = {0};
    CHECK(dlc_srt_cut(s, 0, 3.5) == DLC_OK);
    double cut_at = dlc_rt_clock();
    CHECK(dlc_srt_learner(s, 0, &info) == DLC_OK && info.cut > 3 && info.cut <= 3.5);
    int merges_in_cut = -1;
    while (dlc_rt_clock() - cut_at < 6) {
        CHECK(dlc_lrt_step_done(a, 100, 0.001) == DLC_OK); /* it trains on, never waiting */
        collect(s, 0.02, &c);
        if (merges_in_cut < 0 && dlc_rt_clock() - cut_at > 3.3) merges_in_cut = c.merged0;
        if (c.joined && c.merged0 > 0 && c.t_merge > c.t_joined) break;
    }
    fprintf(stderr, "cut 3.5 s: lost after %.2f s, joined again after %.2f s, %d merges (%d with its contribution "
            "during the cut)\n", c.t_lost - cut_at, c.t_joined - cut_at, c.merges, merges_in_cut);
    CHECK(c.lost == 1 && c.t_lost - cut_at > 1.0 && c.t_lost - cut_at < 2.6);
    CHECK(merges_in_cut == 0); /* nothing of it got through */
    CHECK(c.joined >= 1 && c.t_joined - cut_at >= 3.4);
    CHECK(c.merged0 > 0 && c.t_merge > c.t_joined); /* it contributes again */
    CHECK(dlc_srt_learner(s, 0, &info) == DLC_OK && info.cut == 0 && info.connected);

    /* a cut ended early by cut(0): nobody lost */
    tally e = {0};
    CHECK(dlc_srt_cut(s, 0, INFINITY) == DLC_OK);
    CHECK(dlc_srt_learner(s, 0, &info) == DLC_OK && isinf(info.cut));
    collect(s, 0.5, &e);
    CHECK(dlc_srt_cut(s, 0, 0) == DLC_OK);
    for (int k = 0; k < 100; k++) {
        CHECK(dlc_lrt_step_done(a, 100, 0.001) == DLC_OK);
        collect(s, 0.01, &e);
    }
    CHECK(e.lost == 0 && e.merged0 > 0);
    CHECK(dlc_lrt_finish(a, 5, "done") == DLC_OK);
    dlc_lrt_free(a);
    sleep_s(0.1);
    dlc_srt_free(s);
    fx_free(&xs);
    fx_free(&x1);
}

int main(void) {
    (void)gather, (void)randv; /* check_fx.h's, unused here */
    test_links();
    return check_done("rt_links");
}
