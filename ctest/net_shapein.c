/*
 * net_shapein.c - one end emulating both directions of a link (docs/transport.md, "WAN
 * emulation"): dlc_net_shape_in caps and delays what a server receives from a client,
 * and dlc_net_cut stalls a link both ways.  Checks:
 *   - 3 MiB from the client, read by a server capped at 1 MB/s, arrive in 2.6-4.5 s
 *     (3.1 s at the cap), intact; uncapped, far faster;
 *   - a server receiving with 0.3 s of latency sees a small frame 0.3-0.8 s after it was
 *     sent, and frames in their order;
 *   - a cut shorter than the timeout delays frames both ways until it ends, and nobody is
 *     lost; one longer than the timeout loses the peer on both sides, at the timeout, and
 *     the server's LOST comes at once (a cut link flushes nothing);
 *   - bad rates and latencies are refused, naming the value.
 * Runs in about 12 s.
 */
#include <signal.h>
#include <stdint.h>
#include "check.h"
#include "diloco/net.h"
#include "net_clock.h"

#define SECRET "shape in secret"
#define BIG (768 << 10) /* floats: 3 MiB */
#define SMALL 256

static const int64_t numel[2] = {BIG, SMALL};
static const dlc_proto_layout layout = {2, numel, BIG + SMALL, {128}};
static float big_pay[BIG], small_pay[SMALL];

typedef struct pair {
    dlc_net *srv, *cl;
    int speer, cpeer, learner;
} pair;

static dlc_net_config config(const dlc_hello *h) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET, c.secret_len = strlen(SECRET);
    c.layout = &layout, c.hello = h;
    c.heartbeat_s = 0.2, c.timeout_s = 1.5, c.auth_timeout_s = 5, c.drain_timeout_s = 3;
    c.reconnect_max_s = 0;
    return c;
}

static int pair_open(pair *p) {
    dlc_frame w;
    dlc_frame_init(&w, DLC_FRAME_WELCOME);
    dlc_hello hs = w.hello, hc;
    hs.proto_min = DLC_PROTO_VERSION_MIN, hs.proto_max = DLC_PROTO_VERSION_MAX;
    strcpy(hs.run, "shapein");
    hs.model_hash = 3, hs.plan_hash = 4, hs.block = 128, hs.codecs = 1u << DLC_CODEC_F32;
    hs.fragments = 2, hs.endpoints = 1;
    hc = hs;
    hc.fragments = 0, hc.endpoints = 0, hc.learner = -1;
    dlc_net_config sc = config(&hs), cc = config(&hc);
    p->srv = dlc_net_new(&sc), p->cl = dlc_net_new(&cc);
    if (!p->srv || !p->cl) return 0;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", dlc_net_listen(p->srv, "127.0.0.1:0"));
    p->cpeer = dlc_net_connect(p->cl, addr), p->speer = -1, p->learner = -1;
    dlc_net_event ev;
    for (double end = now_s() + 10; (p->speer < 0 || p->learner < 0) && now_s() < end;) {
        if (dlc_net_poll(p->srv, &ev, 5) == 1) {
            if (ev.kind == DLC_NET_READY) p->speer = ev.peer;
            dlc_net_event_release(&ev);
        }
        if (dlc_net_poll(p->cl, &ev, 5) == 1) {
            if (ev.kind == DLC_NET_READY && ev.peer == p->cpeer) p->learner = ev.frame.hello.learner;
            dlc_net_event_release(&ev);
        }
    }
    return p->speer >= 0 && p->learner >= 0;
}

static void pair_close(pair *p) {
    dlc_net_free(p->cl);
    dlc_net_free(p->srv);
}

static int send_contribution(pair *p, int frag, int version) {
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_CONTRIBUTION);
    f.msg.learner = p->learner, f.msg.fragment = frag, f.msg.version = version, f.msg.codec = DLC_CODEC_F32;
    f.msg.payload = (const uint8_t *)(frag ? small_pay : big_pay);
    f.msg.len = (size_t)numel[frag] * sizeof(float);
    return dlc_net_send(p->cl, p->cpeer, &f, NULL, NULL) == DLC_OK;
}

static int send_fragment(pair *p, int version) {
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_FRAGMENT);
    f.msg.learner = p->learner, f.msg.fragment = 1, f.msg.version = version, f.msg.codec = DLC_CODEC_F32;
    f.msg.payload = (const uint8_t *)small_pay, f.msg.len = SMALL * sizeof(float);
    return dlc_net_send(p->srv, p->speer, &f, NULL, NULL) == DLC_OK;
}

/* Polls both ends until the server has `want` contributions or `secs` pass (the client's
 * fragments counted in *cl_frags, losses in *lost); returns the contributions seen and
 * the time of the last in *t_last. */
typedef struct seen {
    int contribs, intact, in_order, cl_frags, srv_lost, cl_lost;
    double t_last, t_srv_lost, t_cl_lost, t_cl_frag;
} seen;

static void pump(pair *p, int want, double secs, seen *s) {
    dlc_net_event ev;
    double end = now_s() + secs;
    while (now_s() < end && s->contribs < want) {
        if (dlc_net_poll(p->cl, &ev, 0) == 1) {
            if (ev.kind == DLC_NET_FRAME && ev.frame.type == DLC_FRAME_FRAGMENT) s->cl_frags++, s->t_cl_frag = now_s();
            if (ev.kind == DLC_NET_LOST && !s->cl_lost++) s->t_cl_lost = now_s();
            dlc_net_event_release(&ev);
        }
        if (dlc_net_poll(p->srv, &ev, 5) != 1) continue;
        if (ev.kind == DLC_NET_LOST && !s->srv_lost++) s->t_srv_lost = now_s();
        if (ev.kind == DLC_NET_FRAME && ev.frame.type == DLC_FRAME_CONTRIBUTION) {
            int frag = ev.frame.msg.fragment;
            s->intact += ev.frame.msg.len == (size_t)numel[frag] * sizeof(float) &&
                         memcmp(ev.frame.msg.payload, frag ? (const void *)small_pay : (const void *)big_pay,
                                ev.frame.msg.len) == 0;
            s->in_order += ev.frame.msg.version == s->contribs + 1;
            s->contribs++;
            s->t_last = now_s();
        }
        dlc_net_event_release(&ev);
    }
}

static void test_rate(void) {
    pair p;
    CHECK(pair_open(&p));
    /* uncapped first: the same 3 MiB in well under a second */
    seen s0 = {0};
    double t0 = now_s();
    CHECK(send_contribution(&p, 0, 1));
    pump(&p, 1, 10, &s0);
    double fast = s0.t_last - t0;
    CHECK(s0.contribs == 1 && s0.intact == 1 && fast < 1.0);
    /* capped at the server's receiving end */
    CHECK(dlc_net_shape_in(p.srv, p.speer, 1e6, 0) == DLC_OK);
    seen s = {0};
    s.contribs = 1;
    t0 = now_s();
    CHECK(send_contribution(&p, 0, 2));
    pump(&p, 2, 15, &s);
    double dt = s.t_last - t0, rate = (double)BIG * sizeof(float) / dt;
    fprintf(stderr, "shape_in 1 MB/s: 3 MiB in %.2f s (%.3g bytes/s; uncapped %.3f s)\n", dt, rate, fast);
    CHECK(s.contribs == 2 && s.intact == 1 && s.srv_lost == 0 && s.cl_lost == 0);
    CHECK(dt > 2.6 && dt < 4.5);
    /* uncapped again: at full speed once more */
    CHECK(dlc_net_shape_in(p.srv, p.speer, 0, 0) == DLC_OK);
    seen s2 = {0};
    s2.contribs = 2;
    t0 = now_s();
    CHECK(send_contribution(&p, 0, 3));
    pump(&p, 3, 10, &s2);
    CHECK(s2.contribs == 3 && s2.t_last - t0 < 1.0);
    pair_close(&p);
}

static void test_latency(void) {
    pair p;
    CHECK(pair_open(&p));
    CHECK(dlc_net_shape_in(p.srv, -1, 0, 0.3) == DLC_OK);
    seen s = {0};
    double t0 = now_s();
    for (int v = 1; v <= 5; v++) CHECK(send_contribution(&p, 1, v));
    pump(&p, 5, 5, &s);
    double dt = s.t_last - t0;
    fprintf(stderr, "shape_in latency 0.3 s: 5 frames, the last after %.3f s\n", dt);
    CHECK(s.contribs == 5 && s.in_order == 5 && s.intact == 5);
    CHECK(dt >= 0.29 && dt < 0.8);
    pair_close(&p);
}

static void test_cut(void) {
    pair p;
    CHECK(pair_open(&p));
    /* shorter than the timeout (1.5 s): held both ways, nobody lost */
    CHECK(dlc_net_cut(p.srv, p.speer, 1) == DLC_OK);
    sleep_s(0.05);
    CHECK(send_contribution(&p, 1, 1));
    CHECK(send_fragment(&p, 1));
    seen s = {0};
    double t0 = now_s();
    pump(&p, 1, 0.8, &s);
    CHECK(s.contribs == 0 && s.cl_frags == 0); /* nothing got through the cut */
    CHECK(dlc_net_cut(p.srv, p.speer, 0) == DLC_OK);
    pump(&p, 1, 3, &s);
    for (double end = now_s() + 1; s.cl_frags == 0 && now_s() < end;) pump(&p, 2, 0.05, &s);
    fprintf(stderr, "cut 0.8 s: contribution after %.3f s, fragment after %.3f s\n", s.t_last - t0, s.t_cl_frag - t0);
    CHECK(s.contribs == 1 && s.intact == 1 && s.cl_frags == 1 && s.srv_lost == 0 && s.cl_lost == 0);
    CHECK(s.t_last - t0 >= 0.75);
    /* longer than the timeout: both ends lose the other, the server at once when it
     * times out (no drain of a link that cannot flush) */
    CHECK(dlc_net_cut(p.srv, p.speer, 1) == DLC_OK);
    seen l = {0};
    t0 = now_s();
    pump(&p, 1, 4, &l);
    fprintf(stderr, "cut for good: server lost the client after %.2f s, client the server after %.2f s\n",
            l.t_srv_lost - t0, l.t_cl_lost - t0);
    CHECK(l.srv_lost == 1 && l.cl_lost == 1);
    CHECK(l.t_srv_lost - t0 > 1.3 && l.t_srv_lost - t0 < 2.5);
    CHECK(l.t_cl_lost - t0 > 1.3 && l.t_cl_lost - t0 < 2.5);
    CHECK(dlc_net_cut(p.srv, -1, 1) == DLC_ERR_STATE);
    pair_close(&p);
}

static void test_bad(void) {
    dlc_net_config c = dlc_net_default_config();
    c.insecure = 1;
    dlc_net *n = dlc_net_new(&c);
    CHECK_OK(n);
    CHECK(dlc_net_shape_in(n, -1, 500, 0) == DLC_ERR_ARG && strstr(dlc_last_error(), "rate = 500"));
    CHECK(dlc_net_shape_in(n, -1, 0, 61) == DLC_ERR_ARG && strstr(dlc_last_error(), "latency = 61"));
    CHECK(dlc_net_shape_in(n, 7, 0, 0) == DLC_ERR_STATE);
    CHECK(dlc_net_cut(n, 7, 1) == DLC_ERR_STATE);
    dlc_net_free(n);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < BIG; i++) big_pay[i] = (float)i * 0.5f;
    for (int i = 0; i < SMALL; i++) small_pay[i] = (float)i * -0.25f;
    test_bad();
    test_rate();
    test_latency();
    test_cut();
    return check_done("net_shapein");
}
