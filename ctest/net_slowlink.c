/*
 * net_slowlink.c - liveness on a slow link (docs/transport.md, "Bytes"): a syncer sends
 * three fragments back to back to a learner over a link capped at 20 kB/s
 * (dlc_net_shape), each frame 2-10 times longer to transmit than timeout_s (1.5 s).
 * Neither side is lost: the learner's receiver counts the body arriving at its observed
 * rate as life (the 64 KiB fragment takes the small-frame read path, the 272 KiB one the
 * bulk path), and the syncer's heartbeats overtake the queued fragments at every frame
 * boundary instead of waiting behind all of them.  Runs in about 21 s.  And a learner
 * that does not poll while frames wait over its in_max is not timed out by its own
 * silence (it stops reading; its timeout starts again when it reads).
 */
#include <signal.h>
#include <stdint.h>
#include "check.h"
#include "diloco/net.h"
#include "net_clock.h"

#define SECRET "slow link secret"
#define RATE 20000.0      /* bytes/s: 64 KiB take 3.3 s, 272 KiB take 13.9 s */
#define SMALL (16 << 10)  /* floats: 64 KiB, below the bulk read threshold (256 KiB) */
#define LARGE (68 << 10)  /* floats: 272 KiB, read at the SO_RCVLOWAT threshold */

static const int64_t numel[2] = {SMALL, LARGE};
static const dlc_proto_layout layout = {2, numel, SMALL + LARGE, {128}};
static float small_pay[SMALL], large_pay[LARGE];

static dlc_net_config config(const dlc_hello *h) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET, c.secret_len = strlen(SECRET);
    c.layout = &layout, c.hello = h;
    c.heartbeat_s = 0.3, c.timeout_s = 1.5, c.auth_timeout_s = 5, c.drain_timeout_s = 1;
    c.reconnect_max_s = 0;
    return c;
}

/* A syncer's net and a learner's, connected and READY on loopback (run id `run`; the
 * learner's in_max, 0: the default); the hellos live here, as long as the nets. */
typedef struct pair {
    dlc_hello hs, hc;
    dlc_net *srv, *cl;
    int cpeer, speer, learner;
} pair;

static int pair_up(pair *x, const char *run, size_t in_max) {
    dlc_frame w;
    dlc_frame_init(&w, DLC_FRAME_WELCOME);
    x->hs = w.hello;
    x->hs.proto_min = DLC_PROTO_VERSION_MIN, x->hs.proto_max = DLC_PROTO_VERSION_MAX;
    snprintf(x->hs.run, sizeof x->hs.run, "%s", run);
    x->hs.model_hash = 3, x->hs.plan_hash = 4, x->hs.block = 128, x->hs.codecs = 1u << DLC_CODEC_F32;
    x->hs.fragments = 2, x->hs.endpoints = 1;
    x->hc = x->hs;
    x->hc.fragments = 0, x->hc.endpoints = 0, x->hc.learner = -1;
    dlc_net_config sc = config(&x->hs), cc = config(&x->hc);
    if (in_max) cc.in_max = in_max;
    x->srv = dlc_net_new(&sc), x->cl = dlc_net_new(&cc);
    CHECK_OK(x->srv);
    CHECK_OK(x->cl);
    x->speer = x->learner = -1;
    if (!x->srv || !x->cl) return -1;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", dlc_net_listen(x->srv, "127.0.0.1:0"));
    x->cpeer = dlc_net_connect(x->cl, addr);
    dlc_net_event ev;
    for (double end = now_s() + 10; (x->speer < 0 || x->learner < 0) && now_s() < end;) {
        if (dlc_net_poll(x->srv, &ev, 10) == 1) {
            if (ev.kind == DLC_NET_READY) x->speer = ev.peer;
            dlc_net_event_release(&ev);
        }
        if (dlc_net_poll(x->cl, &ev, 10) == 1) {
            if (ev.kind == DLC_NET_READY && ev.peer == x->cpeer) x->learner = ev.frame.hello.learner;
            dlc_net_event_release(&ev);
        }
    }
    CHECK(x->speer >= 0 && x->learner >= 0);
    return x->speer >= 0 && x->learner >= 0 ? 0 : -1;
}

static void test_slow_link(void) {
    pair x;
    if (pair_up(&x, "slowlink", 0) != 0) return;
    dlc_net *srv = x.srv, *cl = x.cl;
    int cpeer = x.cpeer, speer = x.speer, learner = x.learner;
    dlc_net_config sc = config(&x.hs);
    dlc_net_event ev;
    CHECK(dlc_net_shape(srv, speer, RATE, 0) == DLC_OK);
    for (int i = 0; i < SMALL; i++) small_pay[i] = (float)i * 0.5f;
    for (int i = 0; i < LARGE; i++) large_pay[i] = (float)i * -0.25f;
    /* fragments 0, 1, 0, queued at once: about 20.5 s of transfer at RATE */
    static const int order[3] = {0, 1, 0};
    for (int k = 0; k < 3; k++) {
        dlc_frame f;
        dlc_frame_init(&f, DLC_FRAME_FRAGMENT);
        f.msg.learner = learner, f.msg.fragment = order[k], f.msg.version = k + 1, f.msg.codec = DLC_CODEC_F32;
        f.msg.payload = (const uint8_t *)(order[k] ? large_pay : small_pay);
        f.msg.len = (size_t)numel[order[k]] * sizeof(float);
        CHECK(dlc_net_send(srv, speer, &f, NULL, NULL) == DLC_OK);
    }
    /* the learner's side: fragments in order, intact; heartbeats between them */
    int got = 0, lost = 0, intact = 0, hb_between[3] = {0};
    double t0 = now_s(), end = t0 + 60;
    while (got < 3 && !lost && now_s() < end) {
        if (dlc_net_poll(srv, &ev, 0) == 1) {
            lost += ev.kind == DLC_NET_LOST;
            if (ev.kind == DLC_NET_LOST) fprintf(stderr, "syncer lost the learner: %s\n", ev.text);
            dlc_net_event_release(&ev);
        }
        if (dlc_net_poll(cl, &ev, 20) != 1) continue;
        if (ev.kind == DLC_NET_LOST) lost++, fprintf(stderr, "learner lost the syncer: %s\n", ev.text);
        if (ev.kind == DLC_NET_FRAME && ev.frame.type == DLC_FRAME_HEARTBEAT && got >= 1) hb_between[got]++;
        if (ev.kind == DLC_NET_FRAME && ev.frame.type == DLC_FRAME_FRAGMENT) {
            int p = order[got];
            intact += ev.frame.msg.version == got + 1 && ev.frame.msg.fragment == p &&
                      ev.frame.msg.len == (size_t)numel[p] * sizeof(float) &&
                      memcmp(ev.frame.msg.payload, p ? (const void *)large_pay : (const void *)small_pay,
                             ev.frame.msg.len) == 0;
            got++;
        }
        dlc_net_event_release(&ev);
    }
    double dt = now_s() - t0;
    CHECK(got == 3 && intact == 3 && lost == 0);
    /* the syncer's heartbeats did not wait behind the fragments queued after the one on
     * the wire: at least one came between each two */
    CHECK(hb_between[1] >= 1 && hb_between[2] >= 1);
    /* the link was slow: every frame took longer than timeout_s */
    CHECK(dt > 3 * sc.timeout_s);
    dlc_net_counters k;
    CHECK(dlc_net_get_counters(srv, speer, &k) == DLC_OK && k.state == DLC_CONN_READY);
    CHECK(dlc_net_get_counters(cl, cpeer, &k) == DLC_OK && k.state == DLC_CONN_READY);
    if (got != 3 || lost || hb_between[1] < 1 || hb_between[2] < 1)
        fprintf(stderr, "slow link: %d fragments (%d intact) in %.1f s, %d lost, heartbeats between: %d, %d\n", got, intact,
                dt, lost, hb_between[1], hb_between[2]);
    dlc_net_free(cl);
    dlc_net_free(srv);
}

/* A learner that does not poll (a long step of its host) while frames wait over in_max:
 * its net stops reading, and the silence that follows is its own, so it does not time
 * the syncer out; polled again, every frame is there and the connection READY. */
static void test_paused_reader(void) {
    pair x;
    if (pair_up(&x, "paused", (size_t)SMALL * sizeof(float)) != 0) return; /* one frame waiting is over in_max */
    dlc_net *srv = x.srv, *cl = x.cl;
    int cpeer = x.cpeer, speer = x.speer, learner = x.learner;
    dlc_net_config cc = config(&x.hc);
    dlc_net_event ev;
    for (int i = 0; i < SMALL; i++) small_pay[i] = (float)i * 0.5f;
    for (int k = 0; k < 4; k++) {
        dlc_frame f;
        dlc_frame_init(&f, DLC_FRAME_FRAGMENT);
        f.msg.learner = learner, f.msg.fragment = 0, f.msg.version = k + 1, f.msg.codec = DLC_CODEC_F32;
        f.msg.payload = (const uint8_t *)small_pay, f.msg.len = (size_t)SMALL * sizeof(float);
        CHECK(dlc_net_send(srv, speer, &f, NULL, NULL) == DLC_OK);
    }
    /* the learner does not poll; its heartbeats keep coming to the syncer for twice its
     * timeout (counted, not slept) */
    int beats = 0, lost = 0;
    double t0 = now_s();
    while (beats < (int)(2 * cc.timeout_s / cc.heartbeat_s) && !lost && now_s() < t0 + 30) {
        if (dlc_net_poll(srv, &ev, 50) != 1) continue;
        beats += ev.kind == DLC_NET_FRAME && ev.frame.type == DLC_FRAME_HEARTBEAT;
        if (ev.kind == DLC_NET_LOST) lost++, fprintf(stderr, "paused reader: syncer lost the learner: %s\n", ev.text);
        dlc_net_event_release(&ev);
    }
    CHECK(lost == 0 && now_s() - t0 > cc.timeout_s);
    int got = 0;
    for (double end = now_s() + 10; got < 4 && !lost && now_s() < end;) {
        if (dlc_net_poll(cl, &ev, 20) != 1) continue;
        if (ev.kind == DLC_NET_LOST) lost++, fprintf(stderr, "paused reader: learner lost the syncer: %s\n", ev.text);
        got += ev.kind == DLC_NET_FRAME && ev.frame.type == DLC_FRAME_FRAGMENT && ev.frame.msg.version == got + 1;
        dlc_net_event_release(&ev);
    }
    CHECK(got == 4 && lost == 0);
    dlc_net_counters k;
    CHECK(dlc_net_get_counters(cl, cpeer, &k) == DLC_OK && k.state == DLC_CONN_READY);
    dlc_net_free(cl);
    dlc_net_free(srv);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    test_paused_reader();
    test_slow_link();
    return check_done("net_slowlink");
}
