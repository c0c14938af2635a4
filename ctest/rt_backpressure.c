/* rt_backpressure.c - nothing the syncer driver sends is lost to a full queue (rt.h,
 * "Back-pressure"): over loopback TCP in one process, a syncer whose per-learner queue
 * (out_max) holds less than one fragment and a learner B whose link is slow (20 KB/s,
 * dlc_srt_shape) while learner A merges as fast as it steps.
 *   - B joins: the whole model streams to it fragment by fragment, each frame on an
 *     empty queue (before, every fragment after the first was refused and dropped, and
 *     the join never completed);
 *   - while A merges ~100 times a second, the fragments to B wait and are replaced by
 *     newer versions: none dropped (sends_dropped 0), superseded counted, a BEHIND event
 *     with its count;
 *   - what waits for B is at most one entry per fragment, and it drains once A stops;
 *   - with the default out_max too: the driver keeps the transport's queue for B within
 *     its window (two frames, at least 256 KiB), the rest waiting where it is replaced. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>
#include "check.h"
#include "diloco/frag.h"
#include "diloco/params.h"
#include "diloco/rt.h"

static const char SECRET[] = "rt_backpressure secret";

enum { P = 4, T = 8, TN = 1024 }; /* fragments of 2 tensors, 2048 floats: 8 KiB frames, beyond out_max */

typedef struct model {
    dlc_tensor *t[T];
    dlc_params *p;
    dlc_plan *plan;
} model;

static void model_make(model *x, uint64_t seed) {
    static const char *const names[T] = {"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"};
    int64_t sh[1] = {TN};
    for (int i = 0; i < T; i++) x->t[i] = check_randn(seed + (uint64_t)i, 1.0f, 1, sh);
    x->p = dlc_params_new(T, names, x->t);
    dlc_plan_params pp = dlc_plan_default_params();
    pp.fragments = P;
    x->plan = dlc_plan_new(x->p, &pp);
    CHECK(x->plan && dlc_plan_count(x->plan) == P);
}

static void model_free(model *x) {
    dlc_plan_free(x->plan);
    dlc_params_free(x->p);
    for (int i = 0; i < T; i++) dlc_tensor_release(x->t[i]);
}

static dlc_net_config net_config(void) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET, c.secret_len = sizeof SECRET - 1;
    c.heartbeat_s = 0.2, c.timeout_s = 5, c.reconnect_min_s = 0.05, c.reconnect_max_s = 0.2;
    return c;
}

static dlc_lrt *start_learner(const model *x, int id, int port) {
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    dlc_lrt_config lc = dlc_lrt_default_config();
    lc.learner = dlc_learner_default_params();
    lc.learner.H = 4, lc.learner.tau = 1, lc.learner.heartbeat = 0.2;
    lc.learner.id = id;
    lc.params = x->p;
    lc.plan = x->plan;
    lc.net = net_config();
    lc.connect = addr;
    lc.run = "rt_backpressure";
    return dlc_lrt_new(&lc);
}

static void step(const model *x, float target) {
    float *th = dlc_params_data(x->p);
    for (int k = 0; k < dlc_params_count(x->p); k++) {
        int64_t o = dlc_params_offset(x->p, k);
        for (int64_t i = o; i < o + TN; i++) th[i] -= 0.05f * (th[i] - target);
    }
}

typedef struct seen {
    int merges, behind, behind_count, rejected;
} seen;

static void collect(dlc_srt *s, seen *n) {
    dlc_srt_event ev;
    int r;
    while ((r = dlc_srt_poll(s, &ev, 0)) == 1) {
        if (ev.kind == DLC_SRT_MERGED) {
            n->merges++;
        } else if (ev.kind == DLC_SRT_BEHIND) {
            n->behind++;
            n->behind_count += (int)ev.count;
            CHECK(ev.learner == 1 && ev.count >= 1 && strstr(ev.text, "replaced by"));
        } else if (ev.kind == DLC_SRT_REJECTED) {
            n->rejected++;
        }
        dlc_srt_event_release(&ev);
    }
    CHECK(r == 0);
}

static void test_slow_learner(int small_out_max) {
    model xs, xa, xb;
    model_make(&xs, 5);
    model_make(&xa, 5);
    model_make(&xb, 5);
    dlc_srt_config sc = dlc_srt_default_config();
    sc.syncer.learners = 2;
    sc.syncer.tau = 1;
    sc.plan = xs.plan;
    sc.theta0 = dlc_params_data(xs.p);
    sc.net = net_config();
    sc.listen = "127.0.0.1:0";
    if (small_out_max) sc.net.out_max = 1024; /* less than one frame: each goes on an empty queue */
    sc.run = "rt_backpressure";
    sc.refusals_every = 0.5;
    dlc_srt *s = dlc_srt_new(&sc);
    CHECK_OK(s);
    if (!s) return;
    int port = dlc_srt_port(s);
    CHECK(dlc_srt_shape(s, 1, 20000, 0) == DLC_OK); /* B's link: 20 KB/s both ways */
    dlc_lrt *a = start_learner(&xa, 0, port), *b = start_learner(&xb, 1, port);
    CHECK_OK(a);
    CHECK_OK(b);
    CHECK(dlc_lrt_join(a, 10) == DLC_OK);
    double t0 = dlc_rt_clock();
    CHECK(dlc_lrt_join(b, 20) == DLC_OK); /* 4 fragments of 8 KiB through 1 KiB of queue */
    if (dlc_rt_clock() - t0 > 20) fprintf(stderr, "slow learner: B's join: %s\n", dlc_last_error());
    /* 32 KiB at 20 KB/s: it took the link's time, not a timeout's */
    CHECK(dlc_rt_clock() - t0 >= 1.0 && dlc_rt_clock() - t0 < 15);
    seen n = {0};
    /* A merges at every step; B steps 10 times slower and its link cannot carry the
     * merged fragments as fast as they come */
    for (int t = 0; t < 300; t++) {
        step(&xa, 1.0f);
        CHECK(dlc_lrt_step_done(a, 100, 0.001) == DLC_OK);
        if (t % 10 == 0) {
            step(&xb, -1.0f);
            CHECK(dlc_lrt_step_done(b, 100, 0.01) == DLC_OK);
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
        collect(s, &n);
        /* the transport's queue for B stays a short pipe: one frame beyond the window
         * (out_max 1024: one frame; else the driver's, 256 KiB for these 8 KiB frames) */
        dlc_srt_learner_info q;
        CHECK(dlc_srt_learner(s, 1, &q) == DLC_OK);
        size_t pipe = small_out_max ? 16 << 10 : (256 << 10) + (16 << 10);
        if ((size_t)q.queued_bytes > pipe) {
            CHECK((size_t)q.queued_bytes <= pipe);
            fprintf(stderr, "slow learner: %zu bytes queued for B in the transport, beyond %zu\n",
                    (size_t)q.queued_bytes, pipe);
            break;
        }
    }
    CHECK(dlc_lrt_finish(a, 10, "done") == DLC_OK);
    dlc_srt_stats st;
    CHECK(dlc_srt_get_stats(s, &st) == DLC_OK);
    CHECK(st.sends_dropped == 0);     /* before: every fragment B's queue could not take */
    CHECK(st.sends_held > 0 && st.sends_superseded > 0);
    collect(s, &n);
    CHECK(n.merges >= 50 && n.behind >= 1 && n.behind_count >= 1);
    if (st.sends_dropped || !st.sends_superseded || !n.behind)
        fprintf(stderr, "slow learner: %d merges, dropped %lld held %lld superseded %lld, %d behind events\n", n.merges,
                (long long)st.sends_dropped, (long long)st.sends_held, (long long)st.sends_superseded, n.behind);
    /* B's link carries what waited for it, at most one entry per fragment (32 KiB, 2 s
     * at 20 KB/s): the newest version of each, then nothing waits */
    dlc_srt_learner_info li = {0};
    /* (with the driver's window, 256 KiB wait in the transport: 13 s at 20 KB/s; the
     * link is let go instead) */
    if (!small_out_max) CHECK(dlc_srt_shape(s, 1, 0, 0) == DLC_OK);
    double end = dlc_rt_clock() + 20;
    while (dlc_rt_clock() < end) {
        CHECK(dlc_srt_learner(s, 1, &li) == DLC_OK);
        if (li.held == 0 && li.queued_bytes == 0) break;
        CHECK(li.held <= P && li.held_bytes <= P * 2 * TN * (int64_t)sizeof(float));
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
        collect(s, &n);
    }
    CHECK(li.held == 0 && li.queued_bytes == 0);
    CHECK(dlc_lrt_finish(b, 20, "done") == DLC_OK);
    CHECK(dlc_srt_get_stats(s, &st) == DLC_OK && st.sends_dropped == 0);
    dlc_lrt_free(a);
    dlc_lrt_free(b);
    dlc_srt_free(s);
    model_free(&xs);
    model_free(&xa);
    model_free(&xb);
}

int main(void) {
    test_slow_learner(1);
    test_slow_learner(0); /* the driver's own window on the transport's queue */
    return check_done("rt_backpressure");
}
