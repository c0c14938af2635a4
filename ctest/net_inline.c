/*
 * net_inline.c - dlc_net with inline_io: no I/O thread, the loop runs inside
 * dlc_net_poll and dlc_net_free.  One thread drives an inline server and an inline
 * client through the handshake and a 4 MiB exchange each way; a second thread polling
 * the same net is refused while the first waits; an inline client that stops polling is
 * lost by its server at the timeout and reconnects once it polls again; a send from
 * another thread is written by the polling thread's loop; dlc_net_free flushes a frame
 * the loop had not written yet; a poll with nothing to take returns at its timeout; a
 * frame decoded straight into the polling thread's event never overtakes one queued
 * before it; a BYE never overtakes the payloads sent before it; a write to a peer gone is
 * an error, not a SIGPIPE; the decode hook's values replace the payload, on the I/O
 * thread and on the direct path alike.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include "check.h"
#include "diloco/net.h"
#include "net_clock.h"

#define SECRET "inline secret"
#define BIG (1 << 20) /* floats: a 4 MiB payload, more than one write and read of a socket */

static const int64_t numel[1] = {BIG};
static const dlc_proto_layout layout = {1, numel, BIG, {128}};
static float pay[BIG];

static dlc_net_config config(int inline_io) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET, c.secret_len = strlen(SECRET);
    c.layout = &layout;
    c.heartbeat_s = 0.2, c.timeout_s = 1, c.auth_timeout_s = 2;
    c.reconnect_min_s = 0.05, c.reconnect_max_s = 0.1, c.drain_timeout_s = 2;
    c.inline_io = inline_io;
    return c;
}

static int connect_to(dlc_net *cl, int port) {
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    return dlc_net_connect(cl, addr);
}

/* Polls both nets in turn until one of them yields an event of `kind` (a FRAME: of
 * `type`), up to secs; the event is left in *out.  Returns the net it came from. */
static dlc_net *wait_either(dlc_net *a, dlc_net *b, dlc_net_event_kind kind, dlc_frame_type type, double secs,
                            dlc_net_event *out) {
    double end = now_s() + secs;
    while (now_s() < end)
        for (int i = 0; i < 2; i++) {
            dlc_net *n = i ? b : a;
            if (!n || dlc_net_poll(n, out, 2) != 1) continue;
            if (out->kind == kind && (kind != DLC_NET_FRAME || out->frame.type == type)) return n;
            dlc_net_event_release(out);
        }
    return NULL;
}

static void fill(float seed) {
    for (int i = 0; i < BIG; i++) pay[i] = (float)i * 0.25f + seed;
}

static dlc_frame big_frame(dlc_frame_type type, int64_t version) {
    dlc_frame f;
    dlc_frame_init(&f, type);
    f.msg.fragment = 0, f.msg.version = version, f.msg.codec = DLC_CODEC_F32;
    f.msg.payload = (const uint8_t *)pay, f.msg.len = sizeof pay;
    return f;
}

static int is_pay(const dlc_net_event *ev, int64_t version) {
    return ev->frame.msg.version == version && ev->frame.msg.len == sizeof pay &&
           memcmp(ev->frame.msg.payload, pay, sizeof pay) == 0;
}

/* One thread, two inline nets: handshake, 4 MiB there and back. */
static void test_one_thread(void) {
    dlc_net_config c = config(1);
    c.drain_timeout_s = 0.2; /* freeing one net, no one polls the other to answer its close */
    dlc_net *srv = dlc_net_new(&c), *cl = dlc_net_new(&c);
    CHECK_OK(srv);
    CHECK_OK(cl);
    int port = dlc_net_listen(srv, "127.0.0.1:0");
    CHECK(port > 0);
    int cpeer = connect_to(cl, port);
    CHECK(cpeer >= 0);
    dlc_net_event ev;
    int speer = -1, ready = 0;
    double end = now_s() + 5;
    while ((speer < 0 || !ready) && now_s() < end) { /* neither gets there unless both are polled */
        if (dlc_net_poll(srv, &ev, 2) == 1) {
            if (ev.kind == DLC_NET_READY) speer = ev.peer;
            dlc_net_event_release(&ev);
        }
        if (dlc_net_poll(cl, &ev, 2) == 1) {
            if (ev.kind == DLC_NET_READY && ev.peer == cpeer) ready = 1;
            dlc_net_event_release(&ev);
        }
    }
    CHECK(speer >= 0 && ready);
    fill(1);
    dlc_frame f = big_frame(DLC_FRAME_CONTRIBUTION, 3);
    CHECK(dlc_net_send(cl, cpeer, &f, NULL, NULL) == DLC_OK);
    CHECK(wait_either(srv, cl, DLC_NET_FRAME, DLC_FRAME_CONTRIBUTION, 5, &ev) == srv);
    CHECK(is_pay(&ev, 3));
    dlc_net_event_release(&ev);
    fill(2);
    f = big_frame(DLC_FRAME_FRAGMENT, 4);
    CHECK(dlc_net_send(srv, speer, &f, NULL, NULL) == DLC_OK);
    CHECK(wait_either(srv, cl, DLC_NET_FRAME, DLC_FRAME_FRAGMENT, 5, &ev) == cl);
    CHECK(is_pay(&ev, 4));
    dlc_net_event_release(&ev);
    dlc_net_counters k;
    CHECK(dlc_net_get_counters(srv, speer, &k) == DLC_OK);
    CHECK(k.frames_in[DLC_FRAME_CONTRIBUTION] == 1 && k.frames_out[DLC_FRAME_FRAGMENT] == 1);
    dlc_net_free(cl);
    dlc_net_free(srv);
}

/* The decode hook: called on the thread that reads the socket, its values travel in the
 * event in place of the payload; a hook that fails leaves the frame as it came. */
static atomic_int decodes;
static dlc_status decode_f32(const dlc_frame *f, float **values, int64_t *n, void *arg) {
    (void)arg;
    atomic_fetch_add(&decodes, 1);
    if (f->msg.version == 99) return DLC_ERR_FORMAT; /* "cannot": the frame stays raw */
    int64_t k = (int64_t)(f->msg.len / sizeof(float));
    if (!(*values = malloc((size_t)k * sizeof(float)))) return DLC_ERR_NOMEM;
    memcpy(*values, f->msg.payload, (size_t)k * sizeof(float));
    *n = k;
    return DLC_OK;
}

static void test_decode_hook(void) {
    for (int io = 0; io < 2; io++) { /* the client's own I/O thread, then inline (the direct path) */
        dlc_net_config c = config(1);
        c.drain_timeout_s = 0.2;
        dlc_net *srv = dlc_net_new(&c);
        c.inline_io = io;
        c.decode = decode_f32;
        dlc_net *cl = dlc_net_new(&c);
        CHECK_OK(srv);
        CHECK_OK(cl);
        if (!srv || !cl) return;
        int port = dlc_net_listen(srv, "127.0.0.1:0");
        int cpeer = connect_to(cl, port), speer = -1, ready = 0;
        dlc_net_event ev;
        CHECK(cpeer >= 0);
        double end = now_s() + 5;
        while ((speer < 0 || !ready) && now_s() < end) { /* an inline net moves only while polled */
            if (dlc_net_poll(srv, &ev, 2) == 1) {
                if (ev.kind == DLC_NET_READY) speer = ev.peer;
                dlc_net_event_release(&ev);
            }
            if (dlc_net_poll(cl, &ev, 2) == 1) {
                if (ev.kind == DLC_NET_READY) ready = 1;
                dlc_net_event_release(&ev);
            }
        }
        CHECK(speer >= 0 && ready);
        atomic_store(&decodes, 0);
        for (int v = 5; v <= 6; v++) {
            fill((float)v);
            dlc_frame f = big_frame(DLC_FRAME_FRAGMENT, v == 6 ? 99 : v);
            CHECK(dlc_net_send(srv, speer, &f, NULL, NULL) == DLC_OK);
            CHECK(wait_either(srv, cl, DLC_NET_FRAME, DLC_FRAME_FRAGMENT, 5, &ev) == cl);
            if (v == 5) { /* decoded: the values, no payload */
                CHECK(ev.values && ev.nvalues == BIG && ev.frame.msg.payload == NULL && ev.frame.msg.len == 0 &&
                      memcmp(ev.values, pay, sizeof pay) == 0);
            } else { /* the hook said no: as it came */
                CHECK(ev.values == NULL && ev.nvalues == 0 && is_pay(&ev, 99));
            }
            dlc_net_event_release(&ev);
            CHECK(ev.values == NULL && ev.frame.msg.payload == NULL);
        }
        CHECK(atomic_load(&decodes) == 2);
        dlc_net_free(cl);
        dlc_net_free(srv);
    }
}

typedef struct {
    dlc_net *net;
    int rc;
    double took;
    atomic_int started;
} poller;

static void *poll_main(void *arg) {
    poller *p = arg;
    dlc_net_event ev;
    atomic_store(&p->started, 1);
    double t0;
    do { /* (the main thread's probe may hold the net for an instant: then again) */
        t0 = now_s();
        p->rc = dlc_net_poll(p->net, &ev, 400);
    } while (p->rc == DLC_ERR_STATE);
    p->took = now_s() - t0;
    if (p->rc == 1) dlc_net_event_release(&ev);
    return NULL;
}

/* One thread at a time polls an inline net; a poll with nothing returns at its timeout. */
static void test_one_poller(void) {
    dlc_net_config c = config(1);
    dlc_net *net = dlc_net_new(&c);
    CHECK_OK(net);
    poller p = {net, -99, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, poll_main, &p);
    while (!atomic_load(&p.started)) sleep_s(0.001);
    /* probe until the poller is inside its 400 ms poll: then this one is refused */
    dlc_net_event ev;
    int rc = 0;
    for (double end = now_s() + 5; now_s() < end && (rc = dlc_net_poll(net, &ev, 0)) != DLC_ERR_STATE;)
        if (rc == 1) dlc_net_event_release(&ev);
    CHECK(rc == DLC_ERR_STATE && strstr(dlc_last_error(), "another thread is polling this net"));
    pthread_join(th, NULL);
    CHECK(p.rc == 0 && p.took >= 0.39 && p.took < 1.5);
    double t0 = now_s();
    CHECK(dlc_net_poll(net, &ev, 200) == 0); /* and the first poller's turn is over */
    double took = now_s() - t0;
    CHECK(took >= 0.19 && took < 1.0);
    dlc_net_free(net);
}

/* A server with an I/O thread and an inline client connected to it, both READY. */
static void open_pair(dlc_net_config sc, dlc_net_config cc, dlc_net **srv, dlc_net **cl, int *cpeer) {
    *srv = dlc_net_new(&sc), *cl = dlc_net_new(&cc);
    CHECK_OK(*srv);
    CHECK_OK(*cl);
    *cpeer = connect_to(*cl, dlc_net_listen(*srv, "127.0.0.1:0"));
    dlc_net_event ev;
    for (int n = 0; n < 2; n++) { /* one READY on each side */
        CHECK(wait_either(*cl, *srv, DLC_NET_READY, 0, 5, &ev) != NULL);
        dlc_net_event_release(&ev);
    }
}

/* An inline client does nothing while it is not polled: its server loses it at the
 * timeout; when it polls again it learns it was lost and reconnects. */
static void test_not_polled(void) {
    dlc_net *srv, *cl;
    int cpeer;
    open_pair(config(0), config(1), &srv, &cl, &cpeer);
    dlc_net_event ev;
    /* heartbeats flow while the client polls: nothing is lost for 2 s, twice the timeout */
    CHECK(wait_either(cl, srv, DLC_NET_LOST, 0, 2.0, &ev) == NULL);
    /* now only the server is polled */
    CHECK(wait_either(srv, NULL, DLC_NET_LOST, 0, 3, &ev) == srv);
    CHECK(ev.code == DLC_PERR_TIMEOUT);
    dlc_net_event_release(&ev);
    CHECK(wait_either(cl, srv, DLC_NET_LOST, 0, 3, &ev) == cl && ev.peer == cpeer);
    dlc_net_event_release(&ev);
    CHECK(wait_either(cl, srv, DLC_NET_READY, 0, 5, &ev) != NULL);
    dlc_net_event_release(&ev);
    dlc_net_free(cl);
    dlc_net_free(srv);
}

typedef struct {
    dlc_net *net;
    atomic_int started;
    int got;
} receiver;

static void *receive_main(void *arg) { /* polls the inline client until a FRAGMENT comes */
    receiver *r = arg;
    dlc_net_event ev;
    atomic_store(&r->started, 1);
    double end = now_s() + 10;
    while (!r->got && now_s() < end) {
        if (dlc_net_poll(r->net, &ev, 50) != 1) continue;
        if (ev.kind == DLC_NET_FRAME && ev.frame.type == DLC_FRAME_FRAGMENT) r->got = is_pay(&ev, 6) ? 1 : -1;
        dlc_net_event_release(&ev);
    }
    return NULL;
}

/* Another thread sends on an inline net while one polls it: what the send cannot write
 * at once is written by the polling thread's loop, woken for it. */
static void test_send_while_polled(void) {
    dlc_net *srv, *cl;
    int cpeer;
    open_pair(config(0), config(1), &srv, &cl, &cpeer);
    receiver r = {cl, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, receive_main, &r);
    while (!atomic_load(&r.started)) sleep_s(0.001);
    fill(5);
    dlc_frame f = big_frame(DLC_FRAME_CONTRIBUTION, 5);
    CHECK(dlc_net_shape(cl, cpeer, 40e6, 0) == DLC_OK); /* nothing written by the sender itself */
    CHECK(dlc_net_send(cl, cpeer, &f, NULL, NULL) == DLC_OK);
    dlc_net_event ev;
    CHECK(wait_either(srv, NULL, DLC_NET_FRAME, DLC_FRAME_CONTRIBUTION, 5, &ev) == srv);
    CHECK(is_pay(&ev, 5));
    int speer = ev.peer;
    dlc_net_event_release(&ev);
    fill(6);
    f = big_frame(DLC_FRAME_FRAGMENT, 6);
    CHECK(dlc_net_send(srv, speer, &f, NULL, NULL) == DLC_OK);
    pthread_join(th, NULL);
    CHECK(r.got == 1);
    dlc_net_free(cl);
    dlc_net_free(srv);
}

/* dlc_net_free of an inline net writes what a send left queued before it closes. */
static void test_free_flushes(void) {
    dlc_net_config sc = config(0), cc = config(1);
    sc.timeout_s = cc.timeout_s = 5, sc.heartbeat_s = cc.heartbeat_s = 1;
    dlc_net *srv, *cl;
    int cpeer;
    open_pair(sc, cc, &srv, &cl, &cpeer);
    dlc_net_event ev;
    fill(3);
    dlc_frame f = big_frame(DLC_FRAME_CONTRIBUTION, 9);
    /* capped at 40 MB/s, the send cannot write itself: all 4 MiB wait for the loop */
    CHECK(dlc_net_shape(cl, cpeer, 40e6, 0) == DLC_OK);
    CHECK(dlc_net_send(cl, cpeer, &f, NULL, NULL) == DLC_OK);
    dlc_net_counters k;
    CHECK(dlc_net_get_counters(cl, cpeer, &k) == DLC_OK);
    CHECK(k.queued >= sizeof pay);
    double t0 = now_s();
    dlc_net_free(cl);
    CHECK(now_s() - t0 >= 0.08); /* it waited for the cap to let 4 MiB out */
    CHECK(wait_either(srv, NULL, DLC_NET_FRAME, DLC_FRAME_CONTRIBUTION, 5, &ev) == srv);
    CHECK(is_pay(&ev, 9));
    dlc_net_event_release(&ev);
    dlc_net_free(srv);
}


static dlc_frame heartbeat(int64_t tokens) {
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_HEARTBEAT);
    f.msg.tokens = tokens;
    return f;
}

/* A BYE keeps its place behind the payloads queued before it (a learner's last
 * contributions, then its BYE), while a heartbeat sent after it still goes ahead of them:
 * two 4 MiB contributions on a link capped at 40 MB/s, a BYE, a heartbeat. */
static void test_bye_in_order(void) {
    dlc_net_config sc = config(0), cc = config(1);
    sc.timeout_s = cc.timeout_s = 5, sc.heartbeat_s = cc.heartbeat_s = 0;
    dlc_net *srv, *cl;
    int cpeer;
    open_pair(sc, cc, &srv, &cl, &cpeer);
    fill(4);
    CHECK(dlc_net_shape(cl, cpeer, 40e6, 0) == DLC_OK);
    dlc_frame f = big_frame(DLC_FRAME_CONTRIBUTION, 1);
    CHECK(dlc_net_send(cl, cpeer, &f, NULL, NULL) == DLC_OK);
    f.msg.version = 2;
    CHECK(dlc_net_send(cl, cpeer, &f, NULL, NULL) == DLC_OK);
    dlc_frame bye;
    dlc_frame_init(&bye, DLC_FRAME_BYE);
    strcpy(bye.text, "done");
    CHECK(dlc_net_send(cl, cpeer, &bye, NULL, NULL) == DLC_OK);
    f = heartbeat(7);
    CHECK(dlc_net_send(cl, cpeer, &f, NULL, NULL) == DLC_OK);
    char order[8] = "";
    size_t n = 0;
    dlc_net_event ev;
    for (double end = now_s() + 5; n < 4 && now_s() < end;) {
        if (dlc_net_poll(cl, &ev, 2) == 1) dlc_net_event_release(&ev);
        if (dlc_net_poll(srv, &ev, 2) != 1) continue;
        if (ev.kind == DLC_NET_FRAME) {
            dlc_frame_type t = ev.frame.type;
            order[n++] = t == DLC_FRAME_BYE ? 'B' : t == DLC_FRAME_HEARTBEAT ? 'H' : (char)('0' + ev.frame.msg.version);
        }
        dlc_net_event_release(&ev);
    }
    /* the heartbeat went ahead of the contributions not yet begun (no loop ran since the
     * sends: both), the BYE stayed behind them */
    CHECK(strcmp(order, "1H2B") == 0 || strcmp(order, "H12B") == 0);
    if (strcmp(order, "1H2B") != 0 && strcmp(order, "H12B") != 0) fprintf(stderr, "order: %s\n", order);
    dlc_net_free(cl);
    dlc_net_free(srv);
}

/* HELLO and WELCOME contents for test_order (the handshake with a WELCOME). */
static void hellos(dlc_hello *srv, dlc_hello *cl) {
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_WELCOME);
    *srv = f.hello;
    srv->proto_min = DLC_PROTO_VERSION_MIN, srv->proto_max = DLC_PROTO_VERSION_MAX;
    strcpy(srv->run, "inline");
    srv->model_hash = 1, srv->plan_hash = 2, srv->block = 128;
    srv->codecs = 1u << DLC_CODEC_F32;
    srv->fragments = 1, srv->endpoints = 1;
    *cl = *srv;
    cl->fragments = 0, cl->endpoints = 0, cl->learner = -1;
}

/* A frame that arrives while a poll runs the loop goes straight into the poller's event
 * only when nothing is queued ahead of it: the events come in the order they arose.  The
 * server sends a HEARTBEAT right after its WELCOME, so the client reads both in one pass
 * (READY queued, then the frame behind it); then 40 frames sent before the server polls,
 * read in one pass (the first into the poll's event, the rest queued), and 40 more while
 * those wait. */
static void test_order(void) {
    dlc_hello hs, hc;
    hellos(&hs, &hc);
    dlc_net_config sc = config(1), cc = config(1);
    sc.heartbeat_s = cc.heartbeat_s = 0, sc.drain_timeout_s = cc.drain_timeout_s = 0.2;
    sc.hello = &hs, cc.hello = &hc;
    dlc_net *srv = dlc_net_new(&sc), *cl = dlc_net_new(&cc);
    CHECK_OK(srv);
    CHECK_OK(cl);
    int cpeer = connect_to(cl, dlc_net_listen(srv, "127.0.0.1:0"));
    CHECK(cpeer >= 0);
    dlc_net_event ev;
    int speer = -1, early = 0;
    double end = now_s() + 5;
    while (speer < 0 && now_s() < end) { /* the client's polls write its AUTH, PROOF, HELLO */
        if (dlc_net_poll(cl, &ev, 0) == 1) early++, dlc_net_event_release(&ev);
        if (dlc_net_poll(srv, &ev, 2) == 1) {
            if (ev.kind == DLC_NET_READY) speer = ev.peer;
            dlc_net_event_release(&ev);
        }
    }
    CHECK(speer >= 0 && early == 0); /* the client is READY only once it reads the WELCOME */
    dlc_frame f = heartbeat(1000);
    CHECK(dlc_net_send(srv, speer, &f, NULL, NULL) == DLC_OK); /* behind the WELCOME */
    CHECK(dlc_net_poll(cl, &ev, 1000) == 1 && ev.kind == DLC_NET_READY);
    dlc_net_event_release(&ev);
    CHECK(dlc_net_poll(cl, &ev, 1000) == 1 && ev.kind == DLC_NET_FRAME && ev.frame.msg.tokens == 1000);
    dlc_net_event_release(&ev);
    for (int64_t i = 0; i < 40; i++) {
        f = heartbeat(i);
        CHECK(dlc_net_send(cl, cpeer, &f, NULL, NULL) == DLC_OK);
    }
    int64_t next = 0, bad = 0;
    for (int k = 0; k < 200 && next < 80; k++) {
        if (dlc_net_poll(srv, &ev, 100) != 1) continue;
        if (ev.kind == DLC_NET_FRAME && ev.frame.type == DLC_FRAME_HEARTBEAT) bad += ev.frame.msg.tokens != next++;
        dlc_net_event_release(&ev);
        if (next == 1) /* 39 wait in the queue: these go behind them */
            for (int64_t i = 40; i < 80; i++) {
                f = heartbeat(i);
                CHECK(dlc_net_send(cl, cpeer, &f, NULL, NULL) == DLC_OK);
            }
    }
    CHECK(next == 80 && bad == 0);
    dlc_net_counters k;
    CHECK(dlc_net_get_counters(srv, speer, &k) == DLC_OK && k.frames_in[DLC_FRAME_HEARTBEAT] == 80);
    dlc_net_free(cl);
    dlc_net_free(srv);
}

/* A peer gone under a write is the write's error, never a SIGPIPE: this test keeps the
 * default disposition, which kills the process on one.  The server goes; the client,
 * not polled meanwhile, still takes it for READY and writes into the closed socket. */
static void test_no_sigpipe(void) {
    void (*old)(int) = signal(SIGPIPE, SIG_DFL);
    dlc_net_config c = config(1);
    c.heartbeat_s = 0, c.drain_timeout_s = 0.05;
    dlc_net *srv = dlc_net_new(&c), *cl = dlc_net_new(&c);
    CHECK_OK(srv);
    CHECK_OK(cl);
    int cpeer = connect_to(cl, dlc_net_listen(srv, "127.0.0.1:0"));
    dlc_net_event ev;
    for (int n = 0; n < 2; n++) {
        CHECK(wait_either(cl, srv, DLC_NET_READY, 0, 5, &ev) != NULL);
        dlc_net_event_release(&ev);
    }
    dlc_net_free(srv); /* BYE, then closed at its drain deadline: no one answers it */
    for (int i = 0; i < 20; i++) {
        dlc_frame f = heartbeat(i);
        dlc_status st = dlc_net_send(cl, cpeer, &f, NULL, NULL);
        if (st != DLC_OK) break; /* refused once the client saw it go: fine too */
        sleep_s(0.005);
    }
    CHECK(wait_either(cl, NULL, DLC_NET_LOST, 0, 5, &ev) == cl && ev.peer == cpeer);
    dlc_net_event_release(&ev);
    dlc_net_free(cl);
    signal(SIGPIPE, old);
}

int main(void) {
    test_decode_hook();
    signal(SIGPIPE, SIG_IGN);
    test_no_sigpipe();
    test_order();
    test_one_thread();
    test_one_poller();
    test_not_polled();
    test_send_while_polled();
    test_free_flushes();
    test_bye_in_order();
    return check_done("net_inline");
}
