/*
 * net_standby.c - the transport's part of syncer standbys (docs/protocol.md, "Standbys";
 * docs/transport.md): a server that offers "standby" and its clients on loopback.
 *   - roles: a client whose HELLO lists "standby" is READY as learner -1 on both ends and
 *     takes no learner id (a learner after it is still learner 0); REPLICA goes server
 *     to standby and REPLICA_ACK back, each intact; dlc_net_send refuses a type the
 *     connection's role does not send, named; on the wire (raw sockets), a learner's
 *     REPLICA_ACK, a standby's CONTRIBUTION and REPLICA, and a REPLICA to a learner's
 *     client are each answered ERROR unexpected and closed;
 *   - a standby asking a server that takes none is refused (ERROR mismatch), and a
 *     standby whose WELCOME does not grant it (an older server) fails on its side;
 *   - dlc_net_set_refusing: a learner's HELLO gets ERROR shutdown with the text (final
 *     for a client of one address), a standby's is taken, and once cleared a learner is
 *     served;
 *   - address alternates: "dead|live" is READY at the live one; when that one goes, the
 *     client comes back READY at the first address once something listens there; a
 *     refusing server is passed over for the next address; bad lists are refused, named.
 * Every wait is for an event (or a frame on a raw socket), never a sleep.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include "check.h"
#include "diloco/net.h"
#include "net_clock.h"
#include "net_hellos.h"

#define SECRET "standby test secret"
#define NUMEL 256

static const int64_t numel[2] = {NUMEL, 7};
static const dlc_proto_layout layout = {2, numel, NUMEL + 7, {128}};
static dlc_hello hello_server, hello_learner, hello_standby;

static dlc_net_config base_config(const dlc_hello *h) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET, c.secret_len = strlen(SECRET);
    c.layout = &layout, c.hello = h;
    c.heartbeat_s = 0.3, c.timeout_s = 2, c.auth_timeout_s = 2, c.drain_timeout_s = 1;
    c.reconnect_min_s = 0.05, c.reconnect_max_s = 0.2;
    return c;
}

static dlc_net *new_server(const dlc_hello *h, int *port) {
    dlc_net_config c = base_config(h);
    dlc_net *s = dlc_net_new(&c);
    CHECK_OK(s);
    *port = s ? dlc_net_listen(s, "127.0.0.1:0") : -1;
    CHECK(*port > 0);
    return s;
}

static dlc_net *new_client(const dlc_hello *h, const char *addr, int *peer) {
    dlc_net_config c = base_config(h);
    dlc_net *cl = dlc_net_new(&c);
    CHECK_OK(cl);
    *peer = cl ? dlc_net_connect(cl, addr) : -1;
    CHECK(*peer >= 0);
    return cl;
}

static const char *addr_of(int port) {
    static char a[4][32];
    static int k;
    char *s = a[k++ % 4];
    snprintf(s, sizeof a[0], "127.0.0.1:%d", port);
    return s;
}

/* 1 once client connection `peer` of `net` is retired (no reconnect: unknown to the net),
 * which follows its LOST on the I/O thread; waits on the net's events, up to 2 s. */
static int retired(dlc_net *net, int peer) {
    dlc_net_counters k;
    dlc_net_event ev;
    for (int tries = 0; tries < 200; tries++) {
        if (dlc_net_get_counters(net, peer, &k) == DLC_ERR_STATE) return 1;
        if (dlc_net_poll(net, &ev, 10) > 0) dlc_net_event_release(&ev);
    }
    return 0;
}

/* A port nothing listens on: bound once, closed, not listened on. */
static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    socklen_t alen = sizeof a;
    a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &alen) == 0;
    if (fd >= 0) close(fd);
    CHECK(ok);
    return ok ? ntohs(a.sin_port) : -1;
}

/* ---- raw sockets: a peer that sends what the transport never would ---- */

static int raw_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET, a.sin_port = htons((uint16_t)port), a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void raw_send(int fd, const void *buf, size_t len) {
    if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len) { /* the peer may have closed: fine */ }
}

static int read_full(int fd, uint8_t *buf, size_t n) {
    size_t have = 0;
    while (have < n) {
        ssize_t r = recv(fd, buf + have, n - have, 0);
        if (r <= 0) return (int)r;
        have += (size_t)r;
    }
    return 1;
}

/* One frame into f (its payload into buf): 1, 0 EOF, -1 an error. */
static int raw_read(int fd, dlc_frame *f, uint8_t *buf, size_t cap) {
    int r = read_full(fd, buf, DLC_PROTO_PREFIX);
    if (r <= 0) return r;
    size_t need;
    if (dlc_proto_peek(buf, DLC_PROTO_PREFIX, cap, &need, NULL, NULL) < 0) return -1;
    if (read_full(fd, buf + DLC_PROTO_PREFIX, need - DLC_PROTO_PREFIX) <= 0) return -1;
    return dlc_proto_decode(buf, need, &layout, f, NULL) == DLC_OK ? 1 : -1;
}

/* Frames until an ERROR: its code and text, then the close.  1 if both came. */
static int expect_error(int fd, int code, const char *needle) {
    static uint8_t buf[1 << 16];
    dlc_frame f;
    int r;
    while ((r = raw_read(fd, &f, buf, sizeof buf)) == 1 && f.type != DLC_FRAME_ERROR) {}
    if (r != 1 || f.code != code || !strstr(f.text, needle)) {
        fprintf(stderr, "expected ERROR %s \"%s\", got %s \"%s\"\n", dlc_proto_errcode_name(code), needle,
                r != 1 ? "no frame" : dlc_proto_errcode_name(f.code), r == 1 ? f.text : "");
        return 0;
    }
    uint8_t b;
    r = (int)recv(fd, &b, 1, 0);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

/* A frame with its payload into out; its length. */
static size_t frame_bytes(const dlc_frame *f, uint8_t *out) {
    int64_t n = dlc_proto_encode(f, &layout, out, DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX);
    DLC_ASSERT(n > 0);
    if (f->msg.len) memcpy(out + n, f->msg.payload, f->msg.len);
    return (size_t)n + f->msg.len;
}

/* The client's handshake by hand, with hello h, up to the WELCOME (into *w): 1 if it came. */
static int raw_handshake(int fd, const dlc_hello *h, dlc_hello *w) {
    static uint8_t buf[1 << 16];
    dlc_frame f, g;
    dlc_frame_init(&f, DLC_FRAME_AUTH);
    dlc_auth_nonce(f.nonce, sizeof f.nonce);
    raw_send(fd, buf, frame_bytes(&f, buf));
    if (raw_read(fd, &g, buf, sizeof buf) != 1 || g.type != DLC_FRAME_AUTH_CHALLENGE) return 0;
    dlc_frame p;
    dlc_frame_init(&p, DLC_FRAME_AUTH_PROOF);
    dlc_auth_proof(SECRET, strlen(SECRET), 0, f.nonce, g.nonce, p.mac);
    raw_send(fd, buf, frame_bytes(&p, buf));
    dlc_frame_init(&p, DLC_FRAME_HELLO);
    p.hello = *h;
    raw_send(fd, buf, frame_bytes(&p, buf));
    while (raw_read(fd, &g, buf, sizeof buf) == 1)
        if (g.type == DLC_FRAME_WELCOME) return *w = g.hello, 1;
    return 0;
}

/* A raw server on a port of its own that accepts one client net (made with hello h and
 * connected to it) and runs the server's handshake by hand up to its WELCOME, which
 * states `caps` and `learner`.  Returns the raw side's socket; *cl, *peer, *lfd: the
 * client, its peer id, the listening socket. */
static int fake_server(const dlc_hello *h, uint32_t caps, int learner, dlc_net **cl, int *peer, int *lfd) {
    *lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    socklen_t alen = sizeof a;
    a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(*lfd >= 0 && bind(*lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(*lfd, 4) == 0 &&
          getsockname(*lfd, (struct sockaddr *)&a, &alen) == 0);
    dlc_net_config c = base_config(h);
    c.reconnect_max_s = 0; /* one connection */
    *cl = dlc_net_new(&c);
    CHECK_OK(*cl);
    *peer = dlc_net_connect(*cl, addr_of(ntohs(a.sin_port)));
    struct pollfd pf = {*lfd, POLLIN, 0};
    int fd = poll(&pf, 1, 5000) == 1 ? accept(*lfd, NULL, NULL) : -1;
    CHECK(fd >= 0);
    if (fd < 0) return -1;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    static uint8_t buf[1 << 16];
    dlc_frame f, g;
    CHECK(raw_read(fd, &f, buf, sizeof buf) == 1 && f.type == DLC_FRAME_AUTH);
    dlc_frame_init(&g, DLC_FRAME_AUTH_CHALLENGE);
    dlc_auth_nonce(g.nonce, sizeof g.nonce);
    dlc_auth_proof(SECRET, strlen(SECRET), 1, f.nonce, g.nonce, g.mac);
    raw_send(fd, buf, frame_bytes(&g, buf));
    CHECK(raw_read(fd, &f, buf, sizeof buf) == 1 && f.type == DLC_FRAME_AUTH_PROOF);
    CHECK(raw_read(fd, &f, buf, sizeof buf) == 1 && f.type == DLC_FRAME_HELLO);
    dlc_frame_init(&g, DLC_FRAME_WELCOME);
    g.hello = hello_server;
    g.hello.proto_min = g.hello.proto_max = DLC_PROTO_VERSION_MAX, g.hello.caps = caps, g.hello.learner = learner;
    raw_send(fd, buf, frame_bytes(&g, buf));
    return fd;
}

/* ---- the cases ---- */

/* A REPLICA of fragment 0 with momentum and two contributors, its payload in pay. */
static void replica_of(dlc_frame *f, uint8_t *pay, size_t cap) {
    static float theta[NUMEL], mom[NUMEL];
    for (int i = 0; i < NUMEL; i++) theta[i] = (float)i / 8, mom[i] = -(float)i;
    dlc_replica_record recs[2] = {{.learner = 0, .new_steps = 0.5, .base_version = 3, .steps = 12, .tokens = 4096},
                                  {.learner = 5, .new_steps = 0.5, .base_version = 2, .steps = 9, .tokens = 3000}};
    int64_t len = dlc_replica_pack(pay, cap, NUMEL, DLC_MSG_REPLICA_MOMENTUM, theta, mom, recs, 2);
    CHECK(len == 2 * NUMEL * 4 + 2 * 40);
    dlc_frame_init(f, DLC_FRAME_REPLICA);
    f->msg.fragment = 0, f->msg.version = 4, f->msg.epoch = 2, f->msg.steps = 2;
    f->msg.flags = DLC_MSG_REPLICA_MOMENTUM, f->msg.payload = pay, f->msg.len = (size_t)len;
}

static void test_roles(void) {
    int port, speer, lpeer, ssb = -1, sl = -1;
    dlc_net *srv = new_server(&hello_server, &port);
    dlc_net_event ev;
    /* the standby first: READY as learner -1 on both ends, with "standby" */
    dlc_net *sb = new_client(&hello_standby, addr_of(port), &speer);
    CHECK(wait_event(sb, DLC_NET_READY, 5, &ev) && ev.frame.hello.learner == -1 &&
          (ev.frame.hello.caps & DLC_CAP_STANDBY));
    dlc_net_event_release(&ev);
    CHECK(wait_event(srv, DLC_NET_READY, 5, &ev) && ev.frame.hello.learner == -1 &&
          (ev.frame.hello.caps & DLC_CAP_STANDBY));
    ssb = ev.peer;
    dlc_net_event_release(&ev);
    /* ...and it took no id: the first learner is still learner 0 */
    dlc_net *ln = new_client(&hello_learner, addr_of(port), &lpeer);
    CHECK(wait_event(ln, DLC_NET_READY, 5, &ev) && ev.frame.hello.learner == 0 &&
          !(ev.frame.hello.caps & DLC_CAP_STANDBY));
    dlc_net_event_release(&ev);
    CHECK(wait_event(srv, DLC_NET_READY, 5, &ev) && ev.frame.hello.learner == 0 &&
          !(ev.frame.hello.caps & DLC_CAP_STANDBY));
    sl = ev.peer;
    dlc_net_event_release(&ev);

    /* REPLICA to the standby, intact */
    static uint8_t pay[2 * NUMEL * 4 + 2 * 40];
    dlc_frame f;
    replica_of(&f, pay, sizeof pay);
    CHECK(dlc_net_send(srv, ssb, &f, NULL, NULL) == DLC_OK);
    CHECK(wait_event(sb, DLC_NET_FRAME, 5, &ev) && ev.frame.type == DLC_FRAME_REPLICA &&
          ev.frame.msg.type == DLC_MSG_REPLICA && ev.frame.msg.fragment == 0 && ev.frame.msg.version == 4 &&
          ev.frame.msg.epoch == 2 && ev.frame.msg.steps == 2 && ev.frame.msg.flags == DLC_MSG_REPLICA_MOMENTUM &&
          ev.frame.msg.len == sizeof pay && memcmp(ev.frame.msg.payload, pay, sizeof pay) == 0);
    dlc_replica_record r;
    CHECK(dlc_replica_record_read(ev.frame.msg.payload, ev.frame.msg.len, NUMEL, ev.frame.msg.flags, 1, &r) == DLC_OK &&
          r.learner == 5 && r.tokens == 3000);
    dlc_net_event_release(&ev);
    /* REPLICA_ACK back to the server, intact */
    dlc_frame ack;
    dlc_frame_init(&ack, DLC_FRAME_REPLICA_ACK);
    ack.msg.fragment = 0, ack.msg.version = 4, ack.msg.epoch = 2, ack.msg.flags = DLC_MSG_REPLICA_WHOLE;
    CHECK(dlc_net_send(sb, speer, &ack, NULL, NULL) == DLC_OK);
    CHECK(wait_event(srv, DLC_NET_FRAME, 5, &ev) && ev.peer == ssb && ev.frame.type == DLC_FRAME_REPLICA_ACK &&
          ev.frame.msg.version == 4 && ev.frame.msg.flags == DLC_MSG_REPLICA_WHOLE && ev.frame.msg.len == 0);
    dlc_net_event_release(&ev);

    /* dlc_net_send: each role sends its own types only, refused at once and named */
    CHECK_SFAILS(dlc_net_send(srv, sl, &f, NULL, NULL), DLC_ERR_ARG,
                 "a replica is the primary's to send (a server-side (syncer) connection sends heartbeat, fragment, "
                 "gradient_avg, resync, bye)");
    CHECK_SFAILS(dlc_net_send(ln, lpeer, &ack, NULL, NULL), DLC_ERR_ARG,
                 "a replica_ack is a standby's to send (a client (learner) connection sends heartbeat, contribution, "
                 "gradient, bye, replay)");
    static float grad[NUMEL];
    dlc_frame c;
    dlc_frame_init(&c, DLC_FRAME_CONTRIBUTION);
    c.msg.codec = DLC_CODEC_F32, c.msg.payload = (const uint8_t *)grad, c.msg.len = sizeof grad;
    CHECK_SFAILS(dlc_net_send(sb, speer, &c, NULL, NULL), DLC_ERR_ARG,
                 "a contribution is a learner's to send (a standby client connection sends heartbeat, bye, replica_ack)");
    CHECK_SFAILS(dlc_net_send(sb, speer, &f, NULL, NULL), DLC_ERR_ARG, "a replica is the primary's to send");
    c.type = DLC_FRAME_FRAGMENT, c.msg.type = DLC_MSG_FRAGMENT;
    CHECK_SFAILS(dlc_net_send(srv, ssb, &c, NULL, NULL), DLC_ERR_ARG,
                 "a fragment is the syncer's to send (a server-side (primary) standby connection sends heartbeat, bye, "
                 "replica)");
    dlc_net_counters k;
    CHECK(dlc_net_get_counters(srv, ssb, &k) == DLC_OK && k.frames_out[DLC_FRAME_REPLICA] == 1 &&
          k.frames_out[DLC_FRAME_FRAGMENT] == 0 && k.frames_in[DLC_FRAME_REPLICA_ACK] == 1);
    CHECK(dlc_net_get_counters(srv, sl, &k) == DLC_OK && k.frames_out[DLC_FRAME_REPLICA] == 0);
    /* the same connections still serve: a heartbeat each way on the standby's link */
    dlc_frame hb;
    dlc_frame_init(&hb, DLC_FRAME_HEARTBEAT);
    CHECK(dlc_net_send(sb, speer, &hb, NULL, NULL) == DLC_OK);
    CHECK(wait_event(srv, DLC_NET_FRAME, 5, &ev) && ev.peer == ssb && ev.frame.type == DLC_FRAME_HEARTBEAT);
    dlc_net_event_release(&ev);

    /* on the wire: a learner's REPLICA_ACK, a standby's CONTRIBUTION and REPLICA */
    static uint8_t buf[1 << 16];
    dlc_hello w;
    int fd = raw_connect(port);
    CHECK(fd >= 0 && raw_handshake(fd, &hello_learner, &w) && w.learner == 1 && !(w.caps & DLC_CAP_STANDBY));
    raw_send(fd, buf, frame_bytes(&ack, buf));
    CHECK(expect_error(fd, DLC_PERR_UNEXPECTED, "replica_ack from a standby: a ready server-side (syncer) connection "
                                                "takes only heartbeat, contribution, gradient, bye, error, replay"));
    close(fd);
    fd = raw_connect(port);
    CHECK(fd >= 0 && raw_handshake(fd, &hello_standby, &w) && w.learner == -1 && (w.caps & DLC_CAP_STANDBY));
    c.type = DLC_FRAME_CONTRIBUTION, c.msg.type = DLC_MSG_CONTRIBUTION;
    raw_send(fd, buf, frame_bytes(&c, buf));
    CHECK(expect_error(fd, DLC_PERR_UNEXPECTED, "contribution from a learner: a ready server-side (primary) standby "
                                                "connection takes only heartbeat, bye, error, replica_ack"));
    close(fd);
    fd = raw_connect(port);
    CHECK(fd >= 0 && raw_handshake(fd, &hello_standby, &w));
    raw_send(fd, buf, frame_bytes(&f, buf));
    CHECK(expect_error(fd, DLC_PERR_UNEXPECTED, "replica from the primary: a ready server-side (primary) standby"));
    close(fd);
    /* the server served on: the first learner's link still carries frames */
    CHECK(dlc_net_send(ln, lpeer, &hb, NULL, NULL) == DLC_OK);
    int got = 0;
    while (!got && wait_event(srv, DLC_NET_FRAME, 5, &ev)) { /* (past the standby's own heartbeats) */
        got = ev.peer == sl && ev.frame.type == DLC_FRAME_HEARTBEAT;
        dlc_net_event_release(&ev);
    }
    CHECK(got);
    dlc_net_free(ln);
    dlc_net_free(sb);

    /* a server that takes no standbys refuses one before any id is given */
    dlc_hello plain = hello_server;
    plain.caps = DLC_CAP_ALL;
    int pport;
    dlc_net *ps = new_server(&plain, &pport);
    sb = new_client(&hello_standby, addr_of(pport), &speer);
    CHECK(wait_event(sb, DLC_NET_LOST, 5, &ev) && ev.code == DLC_PERR_MISMATCH &&
          strstr(ev.text, "asks to attach as a standby") && strstr(ev.text, "takes no standbys"));
    dlc_net_event_release(&ev);
    CHECK(wait_event(ps, DLC_NET_REFUSED, 5, &ev) && ev.code == DLC_PERR_MISMATCH);
    dlc_net_event_release(&ev);
    CHECK(retired(sb, speer)); /* final: no retry */
    dlc_net_free(sb);
    dlc_net_free(ps);
    dlc_net_free(srv);
}

/* The client's side: an older server welcomes a standby as a learner (its WELCOME lacks
 * "standby"): the standby refuses it, finally; a learner's client takes no REPLICA. */
static void test_client_side(void) {
    dlc_net *cl;
    dlc_net_event ev;
    int peer, lfd, fd = fake_server(&hello_standby, DLC_CAP_RESYNC_PHASE, 0, &cl, &peer, &lfd);
    CHECK(wait_event(cl, DLC_NET_LOST, 5, &ev) && ev.peer == peer && ev.code == DLC_PERR_MISMATCH &&
          strstr(ev.text, "the server does not take standbys: its welcome does not list \"standby\""));
    dlc_net_event_release(&ev);
    CHECK(expect_error(fd, DLC_PERR_MISMATCH, "the server does not take standbys"));
    dlc_net_free(cl);
    close(fd), close(lfd);

    fd = fake_server(&hello_learner, DLC_CAP_RESYNC_PHASE, 3, &cl, &peer, &lfd);
    CHECK(wait_event(cl, DLC_NET_READY, 5, &ev) && ev.frame.hello.learner == 3);
    dlc_net_event_release(&ev);
    static uint8_t pay[2 * NUMEL * 4 + 2 * 40], buf[1 << 16];
    dlc_frame f;
    replica_of(&f, pay, sizeof pay);
    raw_send(fd, buf, frame_bytes(&f, buf));
    CHECK(expect_error(fd, DLC_PERR_UNEXPECTED, "replica from the primary: a ready client (learner) connection takes "
                                                "only heartbeat, fragment, gradient_avg, resync, bye, error"));
    CHECK(wait_event(cl, DLC_NET_LOST, 5, &ev) && ev.code == DLC_PERR_UNEXPECTED);
    dlc_net_event_release(&ev);
    dlc_net_free(cl);
    close(fd), close(lfd);

    /* a standby granted: it takes REPLICA, and nothing of a learner's link */
    fd = fake_server(&hello_standby, DLC_CAP_RESYNC_PHASE | DLC_CAP_STANDBY, -1, &cl, &peer, &lfd);
    CHECK(wait_event(cl, DLC_NET_READY, 5, &ev) && ev.frame.hello.learner == -1);
    dlc_net_event_release(&ev);
    raw_send(fd, buf, frame_bytes(&f, buf));
    CHECK(wait_event(cl, DLC_NET_FRAME, 5, &ev) && ev.frame.type == DLC_FRAME_REPLICA && ev.frame.msg.len == sizeof pay);
    dlc_net_event_release(&ev);
    static float v[NUMEL];
    dlc_frame g;
    dlc_frame_init(&g, DLC_FRAME_FRAGMENT);
    g.msg.codec = DLC_CODEC_F32, g.msg.payload = (const uint8_t *)v, g.msg.len = sizeof v;
    raw_send(fd, buf, frame_bytes(&g, buf));
    CHECK(expect_error(fd, DLC_PERR_UNEXPECTED, "fragment from the syncer: a ready standby client connection takes only "
                                                "heartbeat, bye, error, replica"));
    dlc_net_free(cl);
    close(fd), close(lfd);
}


/* dlc_net_set_refusing: learners and standbys are told SHUTDOWN with the text, and
 * clearing it serves them again. */
static void test_refusing(void) {
    static const char why[] = "a standby syncer: it serves no learner until it takes over";
    int port, peer;
    dlc_net_event ev;
    dlc_net *srv = new_server(&hello_server, &port);
    CHECK(dlc_net_set_refusing(srv, why) == DLC_OK);
    dlc_net *ln = new_client(&hello_learner, addr_of(port), &peer);
    CHECK(wait_event(ln, DLC_NET_LOST, 5, &ev) && ev.code == DLC_PERR_SHUTDOWN && strstr(ev.text, why) &&
          strcmp(ev.from, addr_of(port)) == 0);
    dlc_net_event_release(&ev);
    CHECK(wait_event(srv, DLC_NET_REFUSED, 5, &ev) && ev.code == DLC_PERR_SHUTDOWN && strcmp(ev.text, why) == 0);
    dlc_net_event_release(&ev);
    CHECK(retired(ln, peer)); /* one address: final, as before */
    dlc_net_free(ln);
    /* a standby too (a standby syncer serves no standby of its own before it takes over) */
    dlc_net *sb = new_client(&hello_standby, addr_of(port), &peer);
    CHECK(wait_event(sb, DLC_NET_LOST, 5, &ev) && ev.code == DLC_PERR_SHUTDOWN && strstr(ev.text, why));
    dlc_net_event_release(&ev);
    CHECK(wait_event(srv, DLC_NET_REFUSED, 5, &ev) && ev.code == DLC_PERR_SHUTDOWN);
    dlc_net_event_release(&ev);
    dlc_net_free(sb);
    /* cleared (NULL; "" too): a learner and a standby are served */
    CHECK(dlc_net_set_refusing(srv, "") == DLC_OK && dlc_net_set_refusing(srv, NULL) == DLC_OK);
    ln = new_client(&hello_learner, addr_of(port), &peer);
    CHECK(wait_event(ln, DLC_NET_READY, 5, &ev) && ev.frame.hello.learner == 0);
    dlc_net_event_release(&ev);
    CHECK(wait_event(srv, DLC_NET_READY, 5, &ev) && ev.frame.hello.learner == 0);
    dlc_net_event_release(&ev);
    sb = new_client(&hello_standby, addr_of(port), &peer);
    CHECK(wait_event(sb, DLC_NET_READY, 5, &ev) && ev.frame.hello.learner == -1);
    dlc_net_event_release(&ev);
    CHECK(wait_event(srv, DLC_NET_READY, 5, &ev) && (ev.frame.hello.caps & DLC_CAP_STANDBY));
    dlc_net_event_release(&ev);
    /* refused, named: a text longer than an ERROR's, a net without a hello */
    char longer[DLC_PROTO_TEXT_MAX + 2];
    memset(longer, 'x', sizeof longer - 1), longer[sizeof longer - 1] = '\0';
    CHECK_SFAILS(dlc_net_set_refusing(srv, longer), DLC_ERR_ARG, "a reason of 513 bytes, expected at most 512");
    dlc_net_config bare = base_config(NULL);
    dlc_net *b = dlc_net_new(&bare);
    CHECK_SFAILS(dlc_net_set_refusing(b, "x"), DLC_ERR_ARG, "the net has no hello");
    dlc_net_free(b);
    dlc_net_free(ln);
    dlc_net_free(sb);
    dlc_net_free(srv);
}

/* Takes events of cl until READY: 1 with its text (the address used) into addr. */
static int ready_at(dlc_net *cl, char *addr, size_t cap) {
    dlc_net_event ev;
    if (!wait_event(cl, DLC_NET_READY, 10, &ev)) return 0;
    snprintf(addr, cap, "%s", ev.text);
    dlc_net_event_release(&ev);
    return 1;
}

/* Address alternates: validation, round robin past a dead address, back to the first
 * when the second goes, and past a server that refuses learners. */
static void test_alternates(void) {
    dlc_net_config c = base_config(&hello_learner);
    dlc_net *cl = dlc_net_new(&c);
    CHECK_OK(cl);
    CHECK_SFAILS(dlc_net_connect(cl, "127.0.0.1:7070|nonsense"), DLC_ERR_ARG,
                 "connect \"127.0.0.1:7070|nonsense\": alternate 2 of 2: address \"nonsense\": expected HOST:PORT");
    CHECK_SFAILS(dlc_net_connect(cl, "127.0.0.1:1|127.0.0.1:2|127.0.0.1:3|127.0.0.1:4|127.0.0.1:5"), DLC_ERR_ARG,
                 "5 alternate addresses, at most 4");
    CHECK_SFAILS(dlc_net_connect(cl, "127.0.0.1:7070|"), DLC_ERR_ARG, "alternate 2 of 2 is empty");
    CHECK_SFAILS(dlc_net_connect(cl, "|127.0.0.1:7070"), DLC_ERR_ARG, "alternate 1 of 2 is empty");
    CHECK_SFAILS(dlc_net_connect(cl, "nonsense"), DLC_ERR_ARG, "address \"nonsense\": expected HOST:PORT"); /* as before */
    dlc_net_free(cl);

    /* the first address dead, the second live: READY at the second */
    int dead = closed_port(), live, peer;
    dlc_net *srv = new_server(&hello_server, &live);
    char both[64], at[DLC_PROTO_TEXT_MAX + 128];
    snprintf(both, sizeof both, "127.0.0.1:%d|127.0.0.1:%d", dead, live);
    cl = new_client(&hello_learner, both, &peer);
    CHECK(ready_at(cl, at, sizeof at) && strcmp(at, addr_of(live)) == 0);
    dlc_net_counters k;
    CHECK(dlc_net_get_counters(cl, peer, &k) == DLC_OK && strcmp(k.addr, addr_of(live)) == 0 &&
          k.state == DLC_CONN_READY);
    /* the second goes; something listens at the first: the client comes back READY there */
    dlc_net_free(srv);
    dlc_net_event ev;
    CHECK(wait_event(cl, DLC_NET_LOST, 5, &ev) && strcmp(ev.from, addr_of(live)) == 0);
    dlc_net_event_release(&ev);
    dlc_net_config sc = base_config(&hello_server);
    dlc_net *srv2 = dlc_net_new(&sc);
    CHECK_OK(srv2);
    CHECK(srv2 && dlc_net_listen(srv2, addr_of(dead)) == dead);
    CHECK(ready_at(cl, at, sizeof at) && strcmp(at, addr_of(dead)) == 0);
    CHECK(dlc_net_get_counters(cl, peer, &k) == DLC_OK && strcmp(k.addr, addr_of(dead)) == 0);
    CHECK(dlc_net_get_counters(cl, -1, &k) == DLC_OK && k.reconnects == 1 && k.addr[0] == '\0');
    dlc_net_free(cl);

    /* a server refusing learners (a standby) is passed over for the next address */
    int port3;
    dlc_net *srv3 = new_server(&hello_server, &port3);
    CHECK(dlc_net_set_refusing(srv2, "standing by") == DLC_OK);
    snprintf(both, sizeof both, "127.0.0.1:%d|127.0.0.1:%d", dead, port3);
    cl = new_client(&hello_learner, both, &peer);
    CHECK(wait_event(cl, DLC_NET_LOST, 5, &ev) && ev.code == DLC_PERR_SHUTDOWN && strstr(ev.text, "standing by") &&
          strcmp(ev.from, addr_of(dead)) == 0);
    dlc_net_event_release(&ev);
    CHECK(ready_at(cl, at, sizeof at) && strcmp(at, addr_of(port3)) == 0);
    dlc_net_free(cl);
    dlc_net_free(srv3);
    dlc_net_free(srv2);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    net_test_hellos("standby", &hello_server, &hello_learner);
    hello_server.caps = DLC_CAP_ALL | DLC_CAP_STANDBY; /* a syncer that takes a standby */
    hello_server.fragments = 2, hello_server.owner[1] = 0;
    hello_learner.caps = DLC_CAP_ALL;
    hello_standby = hello_learner;
    hello_standby.caps = DLC_CAP_RESYNC_PHASE | DLC_CAP_STANDBY;
    test_roles();
    test_client_side();
    test_refusing();
    test_alternates();
    return check_done("net_standby");
}
