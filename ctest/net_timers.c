/*
 * net_timers.c - the transport's timers on an injected clock (dlc_net_config.clock):
 * heartbeats, the READY timeout, the auth timeout, reconnect delays, the takeover window
 * and the emulated latency each fire when the test's clock passes their deadline, not
 * before and not by the wall clock.  Every timer here is tens of seconds long and the
 * test takes milliseconds: a wait below is bounded in wall time only as a guard, and
 * absence is asserted after dlc_net_clock_moved has returned (the I/O thread has then
 * checked every timer against the new time), never after a sleep.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include "check.h"
#include "diloco/net.h"
#include "fake_clock.h"
#include "net_clock.h"
#include "net_hellos.h"

#define SECRET "tick tock"
#define NUMEL 16
#define GUARD 10.0 /* wall seconds: the bound of a wait for what should come at once */
#define HEARTBEAT 1.0
#define TIMEOUT 30.0
#define AUTH_TIMEOUT 20.0
#define RECONNECT_MIN 8.0
#define DRAIN 5.0

static const int64_t numel[1] = {NUMEL};
static const dlc_proto_layout layout = {1, numel, NUMEL, {128}};
static dlc_hello hello_server, hello_client;

static dlc_net_config config(fake_clock *clock, const dlc_hello *hello) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET, c.secret_len = strlen(SECRET);
    c.layout = &layout, c.hello = hello;
    c.heartbeat_s = HEARTBEAT, c.timeout_s = TIMEOUT, c.auth_timeout_s = AUTH_TIMEOUT;
    c.reconnect_min_s = RECONNECT_MIN, c.reconnect_max_s = 4 * RECONNECT_MIN, c.drain_timeout_s = DRAIN;
    c.clock = fake_clock_read, c.clock_arg = clock;
    return c;
}

/* The events waiting now (all taken): how many are of `kind`; *sent counts SENT ones. */
static int kinds(dlc_net *net, dlc_net_event_kind kind, int *sent) {
    dlc_net_event ev;
    int n = 0;
    while (dlc_net_poll(net, &ev, 0) == 1) {
        n += ev.kind == kind, *sent += ev.kind == DLC_NET_SENT;
        dlc_net_event_release(&ev);
    }
    return n;
}

/* 1 if an event of `kind` is waiting now (the others dropped). */
static int pending(dlc_net *net, dlc_net_event_kind kind) {
    dlc_net_event ev;
    int found = 0;
    while (dlc_net_poll(net, &ev, 0) == 1) {
        found |= ev.kind == kind;
        dlc_net_event_release(&ev);
    }
    return found;
}

/* 1 if a FRAGMENT of this version is among the events waiting now (all taken). */
static int fragment_waiting(dlc_net *net, int64_t version) {
    dlc_net_event ev;
    int found = 0;
    while (dlc_net_poll(net, &ev, 0) == 1) {
        found |= ev.kind == DLC_NET_FRAME && ev.frame.type == DLC_FRAME_FRAGMENT && ev.frame.msg.version == version;
        dlc_net_event_release(&ev);
    }
    return found;
}

static uint64_t count(dlc_net *net, int peer, int in, dlc_frame_type t) {
    dlc_net_counters k;
    if (dlc_net_get_counters(net, peer, &k) != DLC_OK) return UINT64_MAX;
    return in ? k.frames_in[t] : k.frames_out[t];
}

/* Waits until net has received n heartbeats in all (the wall-time guard only). */
static int heard(dlc_net *net, uint64_t n) {
    for (double end = now_s() + 10; now_s() < end;) {
        if (count(net, -1, 1, DLC_FRAME_HEARTBEAT) >= n) return 1;
        dlc_net_event ev;
        if (dlc_net_poll(net, &ev, 5) == 1) dlc_net_event_release(&ev);
    }
    return 0;
}

static int moved(dlc_net *a, dlc_net *b) {
    return dlc_net_clock_moved(a) == DLC_OK && (!b || dlc_net_clock_moved(b) == DLC_OK);
}

/* A server and a client, each on its own clock, READY.  *sp, *cp: the peer ids. */
static void pair(fake_clock *sc, fake_clock *cc, dlc_net **s, dlc_net **c, int *sp, int *cp) {
    dlc_net_config scfg = config(sc, &hello_server), ccfg = config(cc, &hello_client);
    *s = dlc_net_new(&scfg), *c = dlc_net_new(&ccfg);
    CHECK_OK(*s && *c);
    int port = dlc_net_listen(*s, "127.0.0.1:0");
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    *cp = dlc_net_connect(*c, addr);
    dlc_net_event ev;
    CHECK(*cp >= 0 && wait_event(*c, DLC_NET_READY, GUARD, &ev));
    dlc_net_event_release(&ev);
    CHECK(wait_event(*s, DLC_NET_READY, GUARD, &ev));
    *sp = ev.peer;
    dlc_net_event_release(&ev);
}

/* A heartbeat leaves exactly heartbeat_s after the last frame on the injected clock,
 * none before, both ways; heartbeats keep a link alive for ten timeouts; a peer silent
 * for timeout_s is lost at that instant, and the text measures the silence in the
 * injected seconds; the client then waits its reconnect delay, on its own clock. */
static void test_heartbeat_timeout_reconnect(void) {
    fake_clock sc, cc;
    fake_clock_init(&sc), fake_clock_init(&cc);
    dlc_net *s, *c;
    int sp, cp;
    pair(&sc, &cc, &s, &c, &sp, &cp);
    /* no heartbeat can have left yet: the clocks have not moved since READY */
    uint64_t c0 = count(c, cp, 0, DLC_FRAME_HEARTBEAT), s0 = count(s, sp, 0, DLC_FRAME_HEARTBEAT);
    uint64_t heard_s = count(s, -1, 1, DLC_FRAME_HEARTBEAT), heard_c = count(c, -1, 1, DLC_FRAME_HEARTBEAT);
    fake_clock_advance(&sc, HEARTBEAT - 0.25), fake_clock_advance(&cc, HEARTBEAT - 0.25);
    CHECK(moved(s, c));
    CHECK(count(c, cp, 0, DLC_FRAME_HEARTBEAT) == c0 && count(s, sp, 0, DLC_FRAME_HEARTBEAT) == s0);
    fake_clock_advance(&sc, 0.25), fake_clock_advance(&cc, 0.25);
    CHECK(moved(s, c));
    CHECK(count(c, cp, 0, DLC_FRAME_HEARTBEAT) == c0 + 1 && count(s, sp, 0, DLC_FRAME_HEARTBEAT) == s0 + 1);
    CHECK(heard(s, ++heard_s) && heard(c, ++heard_c));
    /* ten timeouts of idle time, a heartbeat each way per second, nothing lost */
    int steps = (int)(10 * TIMEOUT / HEARTBEAT), lost = 0, sent = 0;
    for (int i = 1; i <= steps; i++) {
        fake_clock_advance(&sc, HEARTBEAT), fake_clock_advance(&cc, HEARTBEAT);
        CHECK(moved(s, c));
        /* each side's heartbeat is in before the next step: moved back to back, faster
         * than the I/O threads read, the clock would outrun the reading (a peer's
         * heartbeats waiting in its socket while its clock passed its timeout) */
        CHECK(heard(s, heard_s + (uint64_t)i) && heard(c, heard_c + (uint64_t)i));
        lost += kinds(s, DLC_NET_LOST, &sent) + kinds(c, DLC_NET_LOST, &sent);
    }
    CHECK(lost == 0 && sent == 0); /* the transport's own frames post no SENT events */
    CHECK(count(c, cp, 0, DLC_FRAME_HEARTBEAT) == c0 + 1 + (uint64_t)steps);
    CHECK(count(s, sp, 0, DLC_FRAME_HEARTBEAT) == s0 + 1 + (uint64_t)steps);
    /* the client's clock stops: it sends nothing more; the server's goes on */
    fake_clock_advance(&sc, TIMEOUT - 0.25);
    CHECK(moved(s, NULL));
    CHECK(!pending(s, DLC_NET_LOST));
    fake_clock_advance(&sc, 0.25);
    CHECK(moved(s, NULL));
    dlc_net_event ev;
    CHECK(dlc_net_poll(s, &ev, 0) == 1 && ev.kind == DLC_NET_LOST && ev.code == DLC_PERR_TIMEOUT &&
          strstr(ev.text, "no frame for 30 s (timeout)"));
    dlc_net_event_release(&ev);
    dlc_net_counters k;
    CHECK(dlc_net_get_counters(s, -1, &k) == DLC_OK && k.timeouts == 1 && k.accepted == 1);
    /* the client heard the server's ERROR: its connection ends (at once, or at its drain
     * deadline if the reset beat the end of the stream), then it reconnects after its
     * delay (8 s +-50%), all on its own clock, which has not moved: once that clock has
     * passed both, it is back */
    CHECK(wait_event(c, DLC_NET_LOST, GUARD, &ev) && ev.code == DLC_PERR_TIMEOUT);
    dlc_net_event_release(&ev);
    fake_clock_advance(&cc, DRAIN);
    CHECK(moved(c, NULL));
    fake_clock_advance(&cc, 1.5 * RECONNECT_MIN);
    CHECK(moved(c, NULL));
    CHECK(wait_event(s, DLC_NET_READY, GUARD, &ev));
    dlc_net_event_release(&ev);
    CHECK(wait_event(c, DLC_NET_READY, GUARD, &ev) && ev.peer == cp);
    dlc_net_event_release(&ev);
    CHECK(dlc_net_get_counters(c, -1, &k) == DLC_OK && k.reconnects == 1);
    dlc_net_free(c);
    dlc_net_free(s);
}

/* A socket that connects and says nothing is closed at auth_timeout_s on the server's
 * clock, not before. */
static void test_auth_timeout(void) {
    fake_clock sc;
    fake_clock_init(&sc);
    dlc_net_config cfg = config(&sc, &hello_server);
    dlc_net *s = dlc_net_new(&cfg);
    CHECK_OK(s);
    int port = dlc_net_listen(s, "127.0.0.1:0");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET, a.sin_port = htons((uint16_t)port), a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    dlc_net_counters k = {0};
    for (double end = now_s() + 10; now_s() < end && k.unauth == 0;) { /* accepted */
        dlc_net_event ev;
        if (dlc_net_poll(s, &ev, 5) == 1) dlc_net_event_release(&ev);
        dlc_net_get_counters(s, -1, &k);
    }
    CHECK(k.unauth == 1);
    fake_clock_advance(&sc, AUTH_TIMEOUT - 0.25);
    CHECK(moved(s, NULL));
    struct pollfd p = {fd, POLLIN, 0};
    CHECK(poll(&p, 1, 0) == 0); /* loopback: a close would already be in our buffer */
    CHECK(dlc_net_get_counters(s, -1, &k) == DLC_OK && k.unauth == 1);
    fake_clock_advance(&sc, 0.25);
    CHECK(moved(s, NULL));
    CHECK(poll(&p, 1, 10000) == 1);
    char buf[512];
    ssize_t r;
    while ((r = recv(fd, buf, sizeof buf, 0)) > 0) {} /* its ERROR, then the end */
    CHECK(r == 0);
    CHECK(dlc_net_get_counters(s, -1, &k) == DLC_OK && k.unauth == 0);
    close(fd);
    dlc_net_free(s);
}

/* A takeover's three parties, each on its own clock: the server s; a holder a of learner
 * id `learner`, READY (one connection, no reconnects), the server's peer `holder`; a
 * claimant b of the same id, not yet connected (reconnect_max_s: its backoff's cap). */
typedef struct claim {
    fake_clock sc, ac, bc;
    dlc_hello h;
    dlc_net *s, *a, *b;
    int holder;
    char addr[64];
} claim;

static void claim_open(claim *k, int learner, double reconnect_max_s) {
    fake_clock_init(&k->sc), fake_clock_init(&k->ac), fake_clock_init(&k->bc);
    k->h = hello_client;
    k->h.learner = learner;
    dlc_net_config scfg = config(&k->sc, &hello_server), acfg = config(&k->ac, &k->h), bcfg = config(&k->bc, &k->h);
    acfg.reconnect_max_s = 0; /* the holder: one connection */
    bcfg.reconnect_max_s = reconnect_max_s;
    k->s = dlc_net_new(&scfg), k->a = dlc_net_new(&acfg), k->b = dlc_net_new(&bcfg);
    CHECK_OK(k->s && k->a && k->b);
    snprintf(k->addr, sizeof k->addr, "127.0.0.1:%d", dlc_net_listen(k->s, "127.0.0.1:0"));
    dlc_net_event ev;
    CHECK(dlc_net_connect(k->a, k->addr) >= 0 && wait_event(k->a, DLC_NET_READY, GUARD, &ev) &&
          ev.frame.hello.learner == learner);
    dlc_net_event_release(&ev);
    CHECK(wait_event(k->s, DLC_NET_READY, GUARD, &ev));
    k->holder = ev.peer;
    dlc_net_event_release(&ev);
}

/* How the server ended the holder's connection: its LOST's code (-1: none came). */
static int holder_end(claim *k) {
    dlc_net_event ev;
    int code = -1;
    for (double end = now_s() + GUARD; code < 0 && now_s() < end;) {
        if (dlc_net_poll(k->s, &ev, 20) != 1) continue;
        if (ev.kind == DLC_NET_LOST && ev.peer == k->holder) code = ev.code;
        dlc_net_event_release(&ev);
    }
    return code;
}

static void claim_close(claim *k) {
    dlc_net_free(k->a);
    dlc_net_free(k->b);
    dlc_net_free(k->s);
}

/* A second claim on a live learner's id is refused; once the holder has been silent on
 * the server's clock for half the timeout, the claimant's next try (its delay on its
 * own clock) takes over, and the holder's connection is closed as replaced. */
static void test_takeover_window(void) {
    claim k;
    claim_open(&k, 3, 4 * RECONNECT_MIN);
    dlc_net_event ev;
    CHECK(dlc_net_connect(k.b, k.addr) >= 0);
    CHECK(wait_event(k.b, DLC_NET_LOST, GUARD, &ev) && ev.code == DLC_PERR_CONFLICT &&
          strstr(ev.text, "learner 4 is live"));
    dlc_net_event_release(&ev);
    /* the holder, its clock stopped, is silent; the server's clock passes half the
     * timeout (heartbeats to it go on: they do not make it heard) */
    fake_clock_advance(&k.sc, TIMEOUT / 2);
    CHECK(moved(k.s, NULL));
    CHECK(!pending(k.s, DLC_NET_LOST));
    /* the claimant's refused connection ends (at once, or at its drain deadline), and its
     * retry comes within a third of the window (capped), all on its own clock */
    fake_clock_advance(&k.bc, DRAIN);
    CHECK(moved(k.b, NULL));
    fake_clock_advance(&k.bc, TIMEOUT / 6);
    CHECK(moved(k.b, NULL));
    CHECK(wait_event(k.b, DLC_NET_READY, GUARD, &ev) && ev.frame.hello.learner == 3);
    dlc_net_event_release(&ev);
    CHECK(holder_end(&k) == DLC_PERR_CONFLICT); /* replaced, not timed out */
    claim_close(&k);
}

/* A claimant refused many times over has grown its reconnect backoff (8 s doubling, no
 * cap of its own: 256 to 768 s at the seventh), but its retries after a CONFLICT come at
 * most a third of the takeover window apart (half the timeout to the timeout: 5 s here),
 * so once the holder falls silent one of them lands inside the window and takes over
 * before the holder's timeout would have freed the id unlogged. */
static void test_takeover_backoff(void) {
    claim k;
    claim_open(&k, 5, 1e4);
    dlc_net_event ev;
    uint64_t hs = count(k.s, -1, 1, DLC_FRAME_HEARTBEAT), ha = count(k.a, -1, 1, DLC_FRAME_HEARTBEAT);
    CHECK(dlc_net_connect(k.b, k.addr) >= 0);
    /* the holder is live (heartbeats both ways each second): the claimant is refused,
     * again and again */
    int refusals = 0, steps = 0;
    while (refusals < 7 && steps < 100) {
        fake_clock_advance(&k.sc, 1), fake_clock_advance(&k.ac, 1), fake_clock_advance(&k.bc, 1);
        steps++;
        CHECK(moved(k.s, k.a) && moved(k.b, NULL));
        CHECK(heard(k.s, ++hs) && heard(k.a, ++ha));
        while (dlc_net_poll(k.b, &ev, 5) == 1) {
            refusals += ev.kind == DLC_NET_LOST && ev.code == DLC_PERR_CONFLICT;
            dlc_net_event_release(&ev);
        }
    }
    CHECK(refusals == 7);
    /* the holder falls silent (its clock stops); the server's and the claimant's go on */
    int ready = 0;
    double silent = 0;
    while (!ready && silent < TIMEOUT - 1) {
        fake_clock_advance(&k.sc, 1), fake_clock_advance(&k.bc, 1);
        silent += 1;
        CHECK(moved(k.s, k.b));
        while (dlc_net_poll(k.b, &ev, 20) == 1) { /* a retry's handshake, if one is under way */
            ready |= ev.kind == DLC_NET_READY && ev.frame.hello.learner == 5;
            dlc_net_event_release(&ev);
        }
    }
    int end = holder_end(&k);
    fprintf(stderr, "takeover: 7 refusals in %d s; in after %.0f s of the holder's silence\n", steps, silent);
    CHECK(ready && end == DLC_PERR_CONFLICT); /* replaced, not timed out */
    CHECK(silent >= TIMEOUT / 2 && silent <= TIMEOUT / 2 + TIMEOUT / 6 + 1);
    claim_close(&k);
}

/* Emulated latency holds a frame until the clock passes its due time: the sender's for the
 * sending direction, the receiver's for the receiving one. */
static void test_latency(void) {
    fake_clock sc, cc;
    fake_clock_init(&sc), fake_clock_init(&cc);
    dlc_net *s, *c;
    int sp, cp;
    pair(&sc, &cc, &s, &c, &sp, &cp);
    CHECK(dlc_net_shape(s, sp, 0, 2.0) == DLC_OK);
    static float pay[NUMEL];
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_FRAGMENT);
    f.msg.learner = 0, f.msg.fragment = 0, f.msg.version = 1, f.msg.codec = DLC_CODEC_F32;
    f.msg.payload = (const uint8_t *)pay, f.msg.len = sizeof pay;
    CHECK(dlc_net_send(s, sp, &f, NULL, NULL) == DLC_OK);
    CHECK(moved(s, NULL)); /* the I/O thread took the send first: held, due in 2 s */
    fake_clock_advance(&sc, 1.75);
    CHECK(moved(s, NULL));
    CHECK(count(s, sp, 0, DLC_FRAME_FRAGMENT) == 0);
    fake_clock_advance(&sc, 0.25);
    CHECK(moved(s, NULL));
    CHECK(count(s, sp, 0, DLC_FRAME_FRAGMENT) == 1);
    dlc_net_event ev;
    CHECK(wait_event(c, DLC_NET_FRAME, GUARD, &ev) && ev.frame.type == DLC_FRAME_FRAGMENT && ev.frame.msg.version == 1);
    dlc_net_event_release(&ev);
    /* the receiving direction (dlc_net_shape_in): held from its arrival, on the
     * receiver's clock */
    CHECK(dlc_net_shape(s, sp, 0, 0) == DLC_OK && dlc_net_shape_in(c, cp, 0, 2.0) == DLC_OK);
    CHECK(moved(c, NULL)); /* the I/O thread took the shaping */
    f.msg.version = 2;
    CHECK(dlc_net_send(s, sp, &f, NULL, NULL) == DLC_OK);
    /* behind what the server holds for its earlier latency (a heartbeat): it goes once
     * the server's clock lets that go, keeping its place */
    fake_clock_advance(&sc, 2.0);
    CHECK(moved(s, NULL));
    for (double end = now_s() + 10; now_s() < end && count(c, cp, 1, DLC_FRAME_FRAGMENT) < 2;) {
        struct pollfd none;
        poll(&none, 0, 1);
    }
    CHECK(count(c, cp, 1, DLC_FRAME_FRAGMENT) == 2); /* arrived, held */
    fake_clock_advance(&cc, 1.75);
    CHECK(moved(c, NULL));
    CHECK(!fragment_waiting(c, 2)); /* (the heartbeats held with it are frames too) */
    fake_clock_advance(&cc, 0.25);
    CHECK(moved(c, NULL));
    CHECK(fragment_waiting(c, 2));
    dlc_net_free(c);
    dlc_net_free(s);
}

/* With inline_io the loop runs in dlc_net_poll: a poll under way returns once the moved
 * clock has been acted on, and a timeout now due is its next event. */
static void test_inline_poll(void) {
    fake_clock sc, cc;
    fake_clock_init(&sc), fake_clock_init(&cc);
    dlc_net_config scfg = config(&sc, &hello_server), ccfg = config(&cc, &hello_client);
    scfg.inline_io = 1;
    dlc_net *s = dlc_net_new(&scfg), *c = dlc_net_new(&ccfg);
    CHECK_OK(s && c);
    int port = dlc_net_listen(s, "127.0.0.1:0");
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    dlc_net_event ev;
    CHECK(dlc_net_connect(c, addr) >= 0);
    CHECK(wait_event(s, DLC_NET_READY, GUARD, &ev));
    dlc_net_event_release(&ev);
    fake_clock_advance(&sc, TIMEOUT);
    CHECK(dlc_net_clock_moved(s) == DLC_OK); /* returns at once: the next poll acts */
    CHECK(wait_event(s, DLC_NET_LOST, GUARD, &ev) && ev.code == DLC_PERR_TIMEOUT && strstr(ev.text, "no frame for 30 s"));
    dlc_net_event_release(&ev);
    dlc_net_free(c);
    dlc_net_free(s);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    net_test_hellos("timers", &hello_server, &hello_client);
    double t0 = now_s();
    test_heartbeat_timeout_reconnect();
    test_auth_timeout();
    test_takeover_window();
    test_takeover_backoff();
    test_latency();
    test_inline_poll();
    printf("net_timers: %.0f s of timers in %.2f s of wall time\n", 10 * TIMEOUT + 2 * TIMEOUT, now_s() - t0);
    return check_done("net_timers");
}
