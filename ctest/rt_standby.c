/* rt_standby.c - standbys (docs/shards.md, "Standbys") over loopback TCP in one process.
 *
 * test_replicated: a primary syncer, its standby (dlc_srt_config.standby_of) and three
 * learners given the standby's address first ("STANDBY|PRIMARY"): the standby refuses
 * learners until it takes over, so each goes on to the primary; a second standby is
 * refused (the attached one is never displaced) and ends; every merge of the primary is
 * on the standby's record (a MERGED event with merge.replica), and once the run is quiet
 * the standby holds the primary's global model bit for bit; the standby lost, the primary
 * merges on alone; the primary's end ends a standby, which never takes over.
 *
 * test_hostile_primary: a "primary" made of a bare transport that sends replicas by hand:
 * a replica out of order is refused (an event saying so) and the standby reconnects to be
 * caught up again, still serving; once caught up and its primary gone for the lease, it
 * takes over with the primary's epoch + 1, and a learner joins it and merges there.
 *
 * test_paused_primary: a primary stopped (dlc_srt_pause) is taken over; once it goes on, a
 * learner that reaches it leaves it for its next address (below). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "check_fx.h"
#include "diloco/net.h"
#include "diloco/rt.h"

static const char SECRET[] = "rt_standby secret";
#define P 3
#define M 3

static dlc_net_config net_config(void) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET, c.secret_len = sizeof SECRET - 1;
    c.heartbeat_s = 0.2, c.timeout_s = 2, c.reconnect_min_s = 0.05, c.reconnect_max_s = 0.2;
    return c;
}

static dlc_srt *start_shard(const fx *x, const char *standby_of, int shard, int shards) {
    dlc_srt_config sc = dlc_srt_default_config();
    sc.shard = shard, sc.shards = shards;
    sc.syncer.learners = M;
    sc.syncer.tau = 1;
    sc.plan = x->plan;
    sc.theta0 = dlc_params_data(x->p);
    sc.net = net_config();
    sc.run = "rt_standby";
    sc.standby_of = standby_of;
    sc.lease = 0.3;
    return dlc_srt_new(&sc);
}

static dlc_srt *start_syncer(const fx *x, const char *standby_of) { return start_shard(x, standby_of, 0, 0); }

/* A primary and its standby, their addresses in paddr and saddr: 1, or 0 (failed, checked). */
static int start_pair(const fx *x, dlc_srt **pri, dlc_srt **sb, char paddr[32], char saddr[32]) {
    *sb = NULL;
    *pri = start_syncer(x, NULL);
    CHECK_OK(*pri);
    if (!*pri) return 0;
    snprintf(paddr, 32, "127.0.0.1:%d", dlc_srt_port(*pri));
    *sb = start_syncer(x, paddr);
    CHECK_OK(*sb);
    if (!*sb) return 0;
    snprintf(saddr, 32, "127.0.0.1:%d", dlc_srt_port(*sb));
    return 1;
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
    lc.run = "rt_standby";
    return dlc_lrt_new(&lc);
}

/* What a syncer's events showed. */
typedef struct seen {
    int merges, replicas;   /* MERGED events: its own, and its primary's (merge.replica) */
    int by[M];              /* its own merges' contributors */
    int attached, refused, reached, took_over, ended, replica_refused;
    int64_t epoch;          /* a takeover's */
} seen;

static void drain(dlc_srt *s, seen *w, int ms) {
    dlc_srt_event ev;
    while (s && dlc_srt_poll(s, &ev, ms) > 0) {
        ms = 0;
        if (ev.kind == DLC_SRT_MERGED) {
            if (ev.merge.replica) w->replicas++;
            else w->merges++;
            for (int i = 0; i < ev.merge.count && !ev.merge.replica; i++)
                if (ev.merge.contribs[i].learner >= 0 && ev.merge.contribs[i].learner < M)
                    w->by[ev.merge.contribs[i].learner]++;
        } else if (ev.kind == DLC_SRT_STANDBY) {
            w->attached += strstr(ev.text, "attached from") != NULL;
            w->refused += strstr(ev.text, "refused: one is attached already") != NULL;
            w->reached += strstr(ev.text, "reached its primary") != NULL;
            w->ended += strstr(ev.text, "this standby ends") != NULL;
            w->replica_refused += strstr(ev.text, "a replica from the primary refused") != NULL;
            if (strstr(ev.text, "took over")) w->took_over++, w->epoch = ev.count;
        }
        dlc_srt_event_release(&ev);
    }
}

/* Polls s's events until cond holds (at most secs): 1 if it did. */
#define AWAIT(s, w, secs, cond)                                                 \
    do {                                                                        \
        for (int tries_ = 0; tries_ < (secs) * 20 && !(cond); tries_++) drain(s, w, 50); \
    } while (0)

static void train(fx *xl, dlc_lrt **l, int n, dlc_srt *a, seen *wa, dlc_srt *b, seen *wb, int steps) {
    for (int t = 0; t < steps; t++) {
        for (int m = 0; m < n; m++) {
            fx_step(&xl[m], m == 0 ? 1.0f : m == 1 ? -1.0f : 0.5f);
            if (dlc_lrt_step_done(l[m], 100, 0.001) != DLC_OK) fprintf(stderr, "step_done: %s\n", dlc_last_error());
            CHECK(dlc_lrt_state(l[m]) == DLC_LEARNER_TRAINING); /* non-blocking: never waits */
        }
        drain(a, wa, 3);
        drain(b, wb, 0);
    }
}

static int same_global(const fx *x, dlc_srt *a, dlc_srt *b) {
    float ga[NMAX], gb[NMAX];
    int64_t n = dlc_params_numel(x->p);
    memcpy(ga, dlc_params_data(x->p), (size_t)n * sizeof(float));
    memcpy(gb, ga, (size_t)n * sizeof(float));
    return dlc_srt_global(a, ga) == DLC_OK && dlc_srt_global(b, gb) == DLC_OK &&
           memcmp(ga, gb, (size_t)n * sizeof(float)) == 0;
}

static void test_replicated(void) {
    fx xs, xl[M];
    fx_make(&xs, P, 31);
    for (int m = 0; m < M; m++) fx_make(&xl[m], P, 31);
    dlc_srt *pri, *sb;
    char paddr[32], saddr[32], connect[80];
    if (!start_pair(&xs, &pri, &sb, paddr, saddr)) return;
    seen wp, ws, w2;
    memset(&wp, 0, sizeof wp), memset(&ws, 0, sizeof ws), memset(&w2, 0, sizeof w2);
    AWAIT(pri, &wp, 10, wp.attached == 1);
    AWAIT(sb, &ws, 10, ws.reached == 1);
    CHECK(wp.attached == 1 && ws.reached == 1);
    dlc_srt_stats st;
    CHECK(dlc_srt_get_stats(pri, &st) == DLC_OK && st.standby == 1 && st.replicas >= P);
    CHECK(dlc_srt_get_stats(sb, &st) == DLC_OK && st.standby == 2);

    /* a second standby: refused, named; it ends, the first stays attached */
    dlc_srt *sb2 = start_syncer(&xs, paddr);
    CHECK_OK(sb2);
    AWAIT(pri, &wp, 10, wp.refused == 1);
    AWAIT(sb2, &w2, 10, w2.ended == 1);
    CHECK(wp.refused == 1 && w2.ended == 1);
    CHECK(dlc_srt_get_stats(sb2, &st) == DLC_OK && st.standby == 4);
    dlc_srt_free(sb2);

    /* learners given the standby first: it refuses them (shutdown), they go on to the primary */
    snprintf(connect, sizeof connect, "%s|%s", saddr, paddr);
    dlc_lrt *l[M];
    for (int m = 0; m < M; m++) {
        l[m] = start_learner(&xl[m], m, connect);
        CHECK_OK(l[m]);
    }
    for (int m = 0; m < M; m++) CHECK(dlc_lrt_join(l[m], 10) == DLC_OK);
    train(xl, l, M, pri, &wp, sb, &ws, 40);
    CHECK(wp.merges > 0);
    for (int m = 0; m < M; m++) CHECK(wp.by[m] > 0);
    CHECK(ws.merges == 0); /* the standby merged nothing of its own */
    CHECK(dlc_srt_get_stats(sb, &st) == DLC_OK && st.refused_by[DLC_PERR_SHUTDOWN] >= M);
    /* quiet (no step): every merge of the primary on the standby's record, the same model */
    AWAIT(pri, &wp, 10, (drain(sb, &ws, 0), ws.replicas == wp.merges && wp.merges > 0));
    AWAIT(pri, &wp, 10, (drain(sb, &ws, 0), ws.replicas == wp.merges && same_global(&xs, pri, sb)));
    CHECK(ws.replicas == wp.merges);
    CHECK(same_global(&xs, pri, sb));

    /* the standby lost: the primary merges on alone, nothing waits for it */
    dlc_srt_free(sb);
    sb = NULL;
    int before = wp.merges;
    train(xl, l, M, pri, &wp, NULL, NULL, 30);
    CHECK(wp.merges > before);
    CHECK(dlc_srt_get_stats(pri, &st) == DLC_OK && st.standby == 0);

    /* a new standby attaches late: caught up from whole replicas, then the primary's end
     * ends it (it does not take over) */
    memset(&ws, 0, sizeof ws);
    sb = start_syncer(&xs, paddr);
    CHECK_OK(sb);
    AWAIT(sb, &ws, 10, ws.reached == 1);
    train(xl, l, M, pri, &wp, sb, &ws, 20);
    for (int m = 0; m < M; m++) {
        CHECK(dlc_lrt_finish(l[m], 5, "done") == DLC_OK);
        dlc_lrt_free(l[m]);
        fx_free(&xl[m]);
    }
    AWAIT(pri, &wp, 10, (drain(sb, &ws, 0), dlc_srt_get_stats(sb, &st) == DLC_OK && st.replicas >= P + ws.replicas &&
                         ws.replicas > 0));
    AWAIT(pri, &wp, 10, (drain(sb, &ws, 0), same_global(&xs, pri, sb)));
    CHECK(same_global(&xs, pri, sb));
    dlc_srt_free(pri);
    AWAIT(sb, &ws, 10, ws.ended == 1);
    CHECK(ws.ended == 1 && ws.took_over == 0);
    CHECK(dlc_srt_get_stats(sb, &st) == DLC_OK && st.standby == 4);
    dlc_srt_free(sb);
    fx_free(&xs);
}

/* ---- a primary made by hand ---- */

typedef struct fake {
    dlc_net *net;
    dlc_hello hello;
    dlc_proto_layout layout;
    int64_t numel[P];
    int peer;
} fake;

/* The fake's net: a primary's terms (listen) or a standby's HELLO (connect to `addr`).
 * Returns the port listened on, or the peer connected; negative on failure. */
static int fake_net(fake *f, const fx *x, const char *addr) {
    memset(f, 0, sizeof *f);
    dlc_frame fr;
    dlc_frame_init(&fr, DLC_FRAME_WELCOME);
    f->hello = fr.hello;
    f->hello.proto_min = DLC_PROTO_VERSION_MIN, f->hello.proto_max = DLC_PROTO_VERSION_MAX;
    snprintf(f->hello.run, sizeof f->hello.run, "rt_standby");
    f->hello.model_hash = dlc_plan_model_hash(x->plan);
    f->hello.plan_hash = dlc_plan_hash(x->plan);
    dlc_syncer_params sp = dlc_syncer_default_params();
    f->hello.block = sp.codec_params.block;
    f->hello.caps = DLC_CAP_ALL | DLC_CAP_STANDBY;
    f->hello.codecs = 0xffffu;
    f->hello.fragments = addr ? 0 : P, f->hello.endpoints = addr ? 0 : 1;
    if (addr) f->hello.learner = -1;
    for (int p = 0; p < P; p++) f->numel[p] = dlc_plan_numel(x->plan, p);
    f->layout = (dlc_proto_layout){.fragments = P, .numel = f->numel, .model_numel = dlc_params_numel(x->p),
                                   .codec = sp.codec_params};
    dlc_net_config c = net_config();
    c.hello = &f->hello;
    c.layout = &f->layout;
    c.frame_max = 1 << 20;
    if (!(f->net = dlc_net_new(&c))) return -1;
    return addr ? (f->peer = dlc_net_connect(f->net, addr)) : dlc_net_listen(f->net, "127.0.0.1:0");
}

static int fake_start(fake *f, const fx *x) { return fake_net(f, x, NULL); }

static void free_buf(const void *payload, void *arg) {
    (void)payload;
    free(arg);
}

/* The fake's next event of `kind` (a FRAME: of type `type`) within secs, into *ev (the
 * caller releases it): 1, or 0 if none came. */
static int fake_next(fake *f, dlc_net_event_kind kind, dlc_frame_type type, dlc_net_event *ev, double secs) {
    for (int tries = 0; tries < secs * 20; tries++) {
        if (dlc_net_poll(f->net, ev, 50) <= 0) continue;
        if (ev->kind == kind && (kind != DLC_NET_FRAME || ev->frame.type == type)) return 1;
        dlc_net_event_release(ev);
    }
    return 0;
}

/* The fake's REPLICA of fragment p at `version` (whole, or the next merge): theta0's
 * values + shift, zero momentum, no contributor. */
static void fake_replica(fake *f, const fx *x, int p, int64_t version, int whole, float shift) {
    int64_t n = f->numel[p];
    float th[NMAX], mom[NMAX] = {0};
    gather(x, p, dlc_params_data(x->p), th);
    for (int64_t i = 0; i < n; i++) th[i] += shift;
    uint32_t flags = DLC_MSG_REPLICA_MOMENTUM | (whole ? DLC_MSG_REPLICA_WHOLE : 0);
    int64_t len = dlc_replica_payload_size(n, flags, 0);
    uint8_t *buf = len > 0 ? malloc((size_t)len) : NULL;
    CHECK(buf && dlc_replica_pack(buf, (size_t)len, n, flags, th, mom, NULL, 0) == len);
    if (!buf) return;
    dlc_frame fr;
    dlc_frame_init(&fr, DLC_FRAME_REPLICA);
    fr.msg.fragment = p, fr.msg.version = version, fr.msg.epoch = 7, fr.msg.flags = flags;
    fr.msg.payload = buf, fr.msg.len = (size_t)len;
    if (dlc_net_send(f->net, f->peer, &fr, free_buf, buf) != DLC_OK) {
        free(buf);
        CHECK(0);
    }
}

/* Sends whole replicas of every fragment at version v (+shift) and takes their P acks. */
static void fake_catch_up(fake *f, const fx *x, int64_t v, float shift) {
    for (int p = 0; p < P; p++) fake_replica(f, x, p, v, 1, shift);
    for (int p = 0; p < P; p++) {
        dlc_net_event ev;
        int got = fake_next(f, DLC_NET_FRAME, DLC_FRAME_REPLICA_ACK, &ev, 10);
        CHECK(got && ev.frame.msg.version == v);
        if (got) dlc_net_event_release(&ev);
    }
}

static void test_hostile_primary(void) {
    fx xs, xl;
    fx_make(&xs, P, 31);
    fx_make(&xl, P, 31);
    fake f;
    int port = fake_start(&f, &xs);
    CHECK(port > 0);
    if (port <= 0) return;
    char faddr[32];
    snprintf(faddr, sizeof faddr, "127.0.0.1:%d", port);
    dlc_srt *sb = start_syncer(&xs, faddr);
    CHECK_OK(sb);
    if (!sb) return;
    seen ws;
    memset(&ws, 0, sizeof ws);
    dlc_net_event ev;
    CHECK(fake_next(&f, DLC_NET_READY, 0, &ev, 10));
    CHECK((ev.frame.hello.caps & DLC_CAP_STANDBY) && ev.frame.hello.learner == -1); /* no learner id */
    f.peer = ev.peer;
    dlc_net_event_release(&ev);
    fake_catch_up(&f, &xs, 3, 0.5f);
    /* out of order (v5 after v3): refused, said, and it comes back to be caught up again */
    fake_replica(&f, &xs, 0, 5, 0, 0.25f);
    AWAIT(sb, &ws, 10, ws.replica_refused == 1);
    CHECK(ws.replica_refused == 1);
    CHECK(fake_next(&f, DLC_NET_READY, 0, &ev, 10));
    f.peer = ev.peer;
    dlc_net_event_release(&ev);
    fake_catch_up(&f, &xs, 3, 0.5f);
    fake_replica(&f, &xs, 0, 4, 0, 0.75f); /* the next merge: applied, on its record */
    CHECK(fake_next(&f, DLC_NET_FRAME, DLC_FRAME_REPLICA_ACK, &ev, 10) && ev.frame.msg.version == 4);
    dlc_net_event_release(&ev);
    AWAIT(sb, &ws, 10, ws.replicas == 1);
    CHECK(ws.replicas == 1 && ws.took_over == 0);
    /* the primary gone (no bye): after the lease the standby serves, epoch 7 + 1 */
    dlc_net_free(f.net);
    AWAIT(sb, &ws, 10, ws.took_over == 1);
    CHECK(ws.took_over == 1 && ws.epoch == 8 && dlc_srt_epoch(sb) == 8);
    float g[NMAX], want[NMAX], got[NMAX];
    memcpy(g, dlc_params_data(xs.p), (size_t)dlc_params_numel(xs.p) * sizeof(float));
    CHECK(dlc_srt_global(sb, g) == DLC_OK);
    for (int p = 0; p < P; p++) {
        gather(&xs, p, dlc_params_data(xs.p), want);
        gather(&xs, p, g, got);
        int ok = 1;
        for (int64_t i = 0; i < dlc_plan_numel(xs.plan, p); i++) ok &= got[i] == want[i] + (p == 0 ? 0.75f : 0.5f);
        CHECK(ok);
    }
    /* a learner joins it and merges there */
    char saddr[32];
    snprintf(saddr, sizeof saddr, "127.0.0.1:%d", dlc_srt_port(sb));
    dlc_lrt *l = start_learner(&xl, 0, saddr);
    CHECK_OK(l);
    CHECK(dlc_lrt_join(l, 10) == DLC_OK);
    train(&xl, &l, 1, sb, &ws, NULL, NULL, 30);
    CHECK(ws.merges > 0 && ws.by[0] > 0);
    CHECK(dlc_learner_shard_epoch(dlc_lrt_learner(l), 0) == 8);
    CHECK(dlc_lrt_finish(l, 5, "done") == DLC_OK);
    dlc_lrt_free(l);
    dlc_srt_free(sb);
    fx_free(&xl);
    fx_free(&xs);
}

/* A standby started for another shard than its primary's: it ends, naming both, and never
 * takes over (the primary's WELCOME states its shard). */
static void test_wrong_shard(void) {
    fx xs;
    fx_make(&xs, P, 31);
    dlc_srt *pri = start_shard(&xs, NULL, 0, 2);
    CHECK_OK(pri);
    if (!pri) return;
    char paddr[32];
    snprintf(paddr, sizeof paddr, "127.0.0.1:%d", dlc_srt_port(pri));
    dlc_srt *sb = start_shard(&xs, paddr, 1, 2);
    CHECK_OK(sb);
    seen ws;
    memset(&ws, 0, sizeof ws);
    dlc_srt_event ev;
    int named = 0;
    for (int tries = 0; tries < 200 && !named && sb; tries++)
        if (dlc_srt_poll(sb, &ev, 50) > 0) {
            named = strstr(ev.text, "is shard 1 of 2, this standby serves shard 2 of 2") != NULL;
            dlc_srt_event_release(&ev);
        }
    CHECK(named);
    dlc_srt_stats st;
    CHECK(sb && dlc_srt_get_stats(sb, &st) == DLC_OK && st.standby == 4);
    dlc_srt_free(sb);
    dlc_srt_free(pri);
    fx_free(&xs);
}

/* A standby that attaches, takes its whole replicas and then never acknowledges a merge
 * (stuck, or hostile: an ack of a version that does not wait is ignored) holds the
 * primary's merges back for the transport's timeout at most: then it is let go, named,
 * and the primary merges on. */
static void test_silent_standby(void) {
    fx xs, xl;
    fx_make(&xs, P, 31);
    fx_make(&xl, P, 31);
    dlc_srt *pri = start_syncer(&xs, NULL);
    CHECK_OK(pri);
    if (!pri) return;
    char paddr[32];
    snprintf(paddr, sizeof paddr, "127.0.0.1:%d", dlc_srt_port(pri));
    fake f;
    CHECK(fake_net(&f, &xs, paddr) >= 0);
    dlc_net_event ev;
    CHECK(fake_next(&f, DLC_NET_READY, 0, &ev, 10) && (ev.frame.hello.caps & DLC_CAP_STANDBY));
    dlc_net_event_release(&ev);
    for (int p = 0; p < P; p++) {
        CHECK(fake_next(&f, DLC_NET_FRAME, DLC_FRAME_REPLICA, &ev, 10) && (ev.frame.msg.flags & DLC_MSG_REPLICA_WHOLE));
        dlc_net_event_release(&ev);
    }
    dlc_frame ack; /* of a version nothing waits for: ignored */
    dlc_frame_init(&ack, DLC_FRAME_REPLICA_ACK);
    ack.msg.fragment = 0, ack.msg.version = 12345;
    CHECK(dlc_net_send(f.net, f.peer, &ack, NULL, NULL) == DLC_OK);
    seen wp;
    memset(&wp, 0, sizeof wp);
    int let_go = 0;
    dlc_lrt *l = start_learner(&xl, 0, paddr);
    CHECK_OK(l);
    CHECK(dlc_lrt_join(l, 10) == DLC_OK);
    dlc_srt_event e;
    for (int t = 0; t < 2000 && wp.merges < 3; t++) { /* (merges wait for the timeout, 2 s, then go on) */
        fx_step(&xl, 1.0f);
        CHECK(dlc_lrt_step_done(l, 100, 0.001) == DLC_OK);
        while (dlc_srt_poll(pri, &e, 5) > 0) {
            if (e.kind == DLC_SRT_MERGED) wp.merges++;
            if (e.kind == DLC_SRT_STANDBY && strstr(e.text, "did not acknowledge")) let_go++;
            dlc_srt_event_release(&e);
        }
        while (dlc_net_poll(f.net, &ev, 0) > 0) dlc_net_event_release(&ev); /* (never acked) */
    }
    CHECK(let_go == 1 && wp.merges >= 3);
    dlc_srt_stats st;
    CHECK(dlc_srt_get_stats(pri, &st) == DLC_OK && st.standby == 0);
    CHECK(dlc_lrt_finish(l, 5, "done") == DLC_OK);
    dlc_lrt_free(l);
    dlc_net_free(f.net);
    dlc_srt_free(pri);
    fx_free(&xl);
    fx_free(&xs);
}

/* test_paused_primary: a primary stopped for good (dlc_srt_pause) while two learners train
 * ("PRIMARY|STANDBY"): the standby, which no longer hears it, takes over after the
 * transport's timeout and its lease (epoch 2); the learners time the primary out, go on to
 * the standby and merge there.  Then the stopped primary goes on (pause 0), stamping epoch
 * 1, which the learners no longer follow.  Learner 1, cut from the standby for longer than
 * the timeout, goes to it: it refuses what the old primary sends (an older epoch) and
 * leaves it for its next address (stats.left), joins the standby again once the cut ends
 * and is merged there. */
static void test_paused_primary(void) {
    fx xs, xl[2];
    fx_make(&xs, P, 37);
    for (int m = 0; m < 2; m++) fx_make(&xl[m], P, 37);
    dlc_srt *pri, *sb;
    char paddr[32], saddr[32], connect[80];
    if (!start_pair(&xs, &pri, &sb, paddr, saddr)) return;
    seen wp, ws;
    memset(&wp, 0, sizeof wp), memset(&ws, 0, sizeof ws);
    AWAIT(pri, &wp, 10, wp.attached == 1);
    AWAIT(sb, &ws, 10, ws.reached == 1);
    snprintf(connect, sizeof connect, "%s|%s", paddr, saddr);
    dlc_lrt *l[2];
    for (int m = 0; m < 2; m++) {
        l[m] = start_learner(&xl[m], m, connect);
        CHECK_OK(l[m]);
    }
    for (int m = 0; m < 2; m++) CHECK(dlc_lrt_join(l[m], 10) == DLC_OK);
    train(xl, l, 2, pri, &wp, sb, &ws, 20);
    CHECK(wp.merges > 0 && ws.merges == 0);
    CHECK(dlc_srt_pause(pri, -1) == DLC_ERR_ARG && strstr(dlc_last_error(), "seconds = -1"));
    CHECK(dlc_srt_pause(pri, INFINITY) == DLC_OK && dlc_srt_paused(pri) == INFINITY);
    /* (bounded by time: the takeover comes after the transport's timeout and the lease,
     * 2.3 s; it came after 5 s more, the drain of the standby's link to the hung primary,
     * before that link was closed at once) */
    double t0 = dlc_rt_clock(), took = -1;
    while (dlc_rt_clock() - t0 < 20 && !(ws.took_over && ws.by[0] > 0 && ws.by[1] > 0)) {
        train(xl, l, 2, sb, &ws, NULL, NULL, 1);
        if (ws.took_over && took < 0) took = dlc_rt_clock() - t0;
    }
    CHECK(ws.took_over == 1 && ws.epoch == 2 && ws.by[0] > 0 && ws.by[1] > 0);
    CHECK(took > 2 && took < 4.5);
    /* the old primary goes on; learner 1 is cut from the standby and tries it */
    CHECK(dlc_srt_pause(pri, 0) == DLC_OK && dlc_srt_paused(pri) == 0);
    dlc_srt_learner_info info;
    CHECK(dlc_srt_learner(sb, 0, &info) == DLC_OK);
    int64_t joins = info.joins;
    CHECK(dlc_srt_cut(sb, 0, 3) == DLC_OK);
    dlc_lrt_stats ls;
    for (t0 = dlc_rt_clock(); dlc_rt_clock() - t0 < 20 && !(dlc_lrt_get_stats(l[0], &ls) == DLC_OK && ls.left);) {
        train(xl, l, 2, sb, &ws, NULL, NULL, 1);
        drain(pri, &wp, 0);
    }
    CHECK(dlc_lrt_get_stats(l[0], &ls) == DLC_OK && ls.left == 1);
    /* back at the standby once the cut ends: joined there again, and merged */
    for (t0 = dlc_rt_clock(); dlc_rt_clock() - t0 < 20 && dlc_srt_learner(sb, 0, &info) == DLC_OK &&
                              info.joins == joins;)
        train(xl, l, 2, sb, &ws, NULL, NULL, 1);
    CHECK(info.joins > joins);
    int mine = ws.by[0];
    for (t0 = dlc_rt_clock(); dlc_rt_clock() - t0 < 20 && ws.by[0] == mine;) train(xl, l, 2, sb, &ws, NULL, NULL, 1);
    CHECK(ws.by[0] > mine);
    CHECK(dlc_srt_epoch(pri) == 1 && dlc_srt_epoch(sb) == 2);
    for (int m = 0; m < 2; m++) {
        CHECK(dlc_lrt_finish(l[m], 5, "done") == DLC_OK);
        dlc_lrt_free(l[m]);
        fx_free(&xl[m]);
    }
    dlc_srt_free(pri);
    dlc_srt_free(sb);
    fx_free(&xs);
}

int main(void) {
    (void)randv; /* check_fx.h's, unused here */
    test_replicated();
    test_hostile_primary();
    test_wrong_shard();
    test_silent_standby();
    test_paused_primary();
    return check_done("rt_standby");
}
