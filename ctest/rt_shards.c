/* rt_shards.c - a sharded syncer (docs/shards.md) over loopback TCP in one process: two
 * syncer shards (dlc_srt_config.shard/shards) each owning the fragments dlc_plan_deal
 * gives it, and three learners connected to both (dlc_lrt_config.connect lists the
 * shards), driven by fake inner steps.  Merges on every fragment from every learner, each
 * by its owner and by no other shard; a learner given its id by shard 1 claims it on
 * shard 2; a shard killed mid-run delays only its own fragments (the learners never
 * wait, the other shard merges on) and, resumed from its checkpoint with the next epoch,
 * takes the learners back (each follows that shard's epoch alone); a shard's checkpoint
 * refused as the other's; learners given one address of a sharded run, or the addresses
 * out of order, refused with the reason named. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "check_fx.h"
#include "diloco/rt.h"

static const char SECRET[] = "rt_shards secret";
#define P 4
#define S 2
#define M 3

static dlc_net_config net_config(void) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET, c.secret_len = sizeof SECRET - 1;
    c.heartbeat_s = 0.2, c.timeout_s = 3, c.reconnect_min_s = 0.05, c.reconnect_max_s = 0.2;
    return c;
}

static dlc_srt *start_shard(const fx *x, int k, const char *listen, const char *resume) {
    dlc_srt_config sc = dlc_srt_default_config();
    sc.syncer.learners = M;
    sc.syncer.tau = 1;
    sc.plan = x->plan;
    sc.theta0 = dlc_params_data(x->p);
    sc.net = net_config();
    sc.listen = listen;
    sc.run = "rt_shards";
    sc.resume = resume;
    sc.shard = k, sc.shards = S;
    return dlc_srt_new(&sc);
}

static dlc_lrt *start_learner(const fx *x, int id, const char *connect) {
    dlc_lrt_config lc = dlc_lrt_default_config();
    lc.learner = dlc_learner_default_params();
    lc.learner.H = 4, lc.learner.tau = 1, lc.learner.heartbeat = 0.2;
    lc.learner.id = id;
    lc.params = x->p;
    lc.plan = x->plan;
    lc.net = net_config();
    lc.connect = connect;
    lc.run = "rt_shards";
    return dlc_lrt_new(&lc);
}

/* What the shards' events showed: merges by fragment and by learner, for each shard. */
typedef struct seen {
    int merges[S][P];
    int by[S][M];
    int rejected_malformed;
} seen;

/* Takes shard k's events, waiting up to ms for the first. */
static void drain(dlc_srt *s, int k, seen *w, int ms) {
    dlc_srt_event ev;
    while (s && dlc_srt_poll(s, &ev, ms) > 0) {
        ms = 0;
        if (ev.kind == DLC_SRT_MERGED) {
            if (ev.merge.fragment >= 0 && ev.merge.fragment < P) w->merges[k][ev.merge.fragment]++;
            for (int i = 0; i < ev.merge.count; i++)
                if (ev.merge.contribs[i].learner >= 0 && ev.merge.contribs[i].learner < M)
                    w->by[k][ev.merge.contribs[i].learner]++;
        } else if (ev.kind == DLC_SRT_REJECTED && ev.reason == DLC_REJECT_MALFORMED) {
            w->rejected_malformed++;
        }
        dlc_srt_event_release(&ev);
    }
}

/* Steps every learner `steps` times, each towards its own target; nobody waits. */
static void train(fx *xl, dlc_lrt **l, dlc_srt **s, seen *w, int steps) {
    for (int t = 0; t < steps; t++) {
        for (int m = 0; m < M; m++) {
            fx_step(&xl[m], m == 0 ? 1.0f : m == 1 ? -1.0f : 0.5f);
            if (dlc_lrt_step_done(l[m], 100, 0.001) != DLC_OK) fprintf(stderr, "step_done: %s\n", dlc_last_error());
            CHECK(dlc_lrt_state(l[m]) == DLC_LEARNER_TRAINING); /* non-blocking: never waits */
        }
        /* a step's compute time, taking the shards' events meanwhile */
        for (int k = 0; k < S; k++) drain(s[k], k, w, 3);
    }
}

static void test_shards(void) {
    fx xs, xl[M];
    fx_make(&xs, P, 21);
    for (int m = 0; m < M; m++) fx_make(&xl[m], P, 21);
    int owner[P];
    CHECK(dlc_plan_deal(xs.plan, S, owner) == DLC_OK);
    dlc_srt *s[S];
    char addr[S][32], connect[80], reversed[80];
    for (int k = 0; k < S; k++) {
        s[k] = start_shard(&xs, k, "127.0.0.1:0", NULL);
        CHECK_OK(s[k]);
        if (!s[k]) return;
        snprintf(addr[k], sizeof addr[k], "127.0.0.1:%d", dlc_srt_port(s[k]));
    }
    snprintf(connect, sizeof connect, "%s,%s", addr[0], addr[1]);
    snprintf(reversed, sizeof reversed, "%s,%s", addr[1], addr[0]);
    float init[NMAX] = {0};
    memcpy(init, dlc_params_data(xs.p), (size_t)dlc_params_numel(xs.p) * sizeof(float));

    /* learners 1 and 2 by id, the third given its id by shard 1 */
    dlc_lrt *l[M];
    for (int m = 0; m < M; m++) { /* (the third once the others hold their ids) */
        l[m] = start_learner(&xl[m], m < 2 ? m : -1, connect);
        CHECK_OK(l[m]);
        if (m == 1)
            for (int j = 0; j < 2; j++) CHECK(dlc_lrt_join(l[j], 10) == DLC_OK);
    }
    CHECK(dlc_lrt_join(l[2], 10) == DLC_OK);
    CHECK(dlc_lrt_id(l[2]) == 2);
    for (int p = 0; p < P; p++) CHECK(dlc_learner_owner(dlc_lrt_learner(l[0]), p) == owner[p]);

    seen w;
    memset(&w, 0, sizeof w);
    train(xl, l, s, &w, 40);
    for (int p = 0; p < P; p++) {
        CHECK(w.merges[owner[p]][p] > 0);   /* merged by its owner */
        CHECK(w.merges[!owner[p]][p] == 0); /* and by no other shard */
    }
    for (int k = 0; k < S; k++)
        for (int m = 0; m < M; m++) CHECK(w.by[k][m] > 0); /* every learner, on both shards */
    CHECK(w.rejected_malformed == 0);
    /* each shard moved its own fragments' global values and holds none of the others' */
    for (int k = 0; k < S; k++) {
        float g[NMAX], frag[NMAX], frag0[NMAX];
        memcpy(g, init, sizeof g);
        CHECK(dlc_srt_global(s[k], g) == DLC_OK);
        for (int p = 0; p < P; p++) {
            gather(&xs, p, g, frag);
            gather(&xs, p, init, frag0);
            int moved = memcmp(frag, frag0, (size_t)dlc_plan_numel(xs.plan, p) * sizeof(float)) != 0;
            CHECK(moved == (owner[p] == k));
        }
    }

    /* shard 2 killed (its checkpoint saved first): the learners train on without waiting,
     * shard 1 merges on; its fragments' contributions are held for it */
    char dir[] = "/tmp/rt_shards.XXXXXX", path[64], path0[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/shard2.safetensors", dir);
    snprintf(path0, sizeof path0, "%s/shard1.safetensors", dir);
    CHECK(dlc_srt_save(s[1], path, 0, NULL, NULL) == DLC_OK);
    CHECK(dlc_srt_save(s[0], path0, 0, NULL, NULL) == DLC_OK);
    int64_t epoch2 = dlc_srt_epoch(s[1]);
    dlc_srt_free(s[1]);
    s[1] = NULL;
    memset(&w, 0, sizeof w);
    train(xl, l, s, &w, 30);
    int shard1_merges = 0;
    for (int p = 0; p < P; p++) shard1_merges += w.merges[0][p];
    CHECK(shard1_merges > 0);

    /* the other shard's checkpoint is refused, named */
    dlc_srt *wrong = start_shard(&xs, 1, "127.0.0.1:0", path0);
    CHECK(wrong == NULL);
    CHECK(strstr(dlc_last_error(), "another shard's checkpoint") != NULL);

    /* shard 2 back from its checkpoint on its address: the next epoch; the learners
     * rejoin it and follow its epoch, shard 1's unchanged */
    s[1] = start_shard(&xs, 1, addr[1], path);
    CHECK_OK(s[1]);
    if (!s[1]) return;
    CHECK(dlc_srt_epoch(s[1]) == epoch2 + 1);
    memset(&w, 0, sizeof w);
    for (int round = 0; round < 20; round++) {
        int back = 0;
        train(xl, l, s, &w, 10);
        for (int m = 0; m < M; m++) back += w.by[1][m] > 0;
        if (back == M) break;
    }
    for (int m = 0; m < M; m++) {
        CHECK(w.by[1][m] > 0);
        CHECK(dlc_learner_shard_epoch(dlc_lrt_learner(l[m]), 1) == epoch2 + 1);
        CHECK(dlc_learner_shard_epoch(dlc_lrt_learner(l[m]), 0) == dlc_srt_epoch(s[0]));
    }

    /* a learner given one address of the sharded run, or both out of order: refused */
    fx xo;
    fx_make(&xo, P, 21);
    dlc_lrt *one = start_learner(&xo, -1, addr[1]);
    CHECK_OK(one);
    CHECK(dlc_lrt_join(one, 5) != DLC_OK);
    CHECK(strstr(dlc_last_error(), "is shard 2 of 2") != NULL);
    dlc_lrt_free(one);
    dlc_lrt *swapped = start_learner(&xo, -1, reversed);
    CHECK_OK(swapped);
    CHECK(dlc_lrt_join(swapped, 5) != DLC_OK);
    CHECK(strstr(dlc_last_error(), "out of order") != NULL);
    dlc_lrt_free(swapped);
    fx_free(&xo);

    for (int m = 0; m < M; m++) {
        CHECK(dlc_lrt_finish(l[m], 5, "done") == DLC_OK);
        dlc_lrt_free(l[m]);
        fx_free(&xl[m]);
    }
    for (int k = 0; k < S; k++) dlc_srt_free(s[k]);
    unlink(path);
    unlink(path0);
    rmdir(dir);
    fx_free(&xs);
}

int main(void) {
    (void)randv; /* check_fx.h's, unused here */
    test_shards();
    return check_done("rt_shards");
}
