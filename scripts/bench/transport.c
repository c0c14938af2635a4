/* bench_transport - the transport (net/, libdiloco_net) against bare blocking TCP sockets
 * on loopback, side by side in one run; prints the ratios.
 *
 * Default mode, one process, every pair of dlc_nets authenticated with a secret and
 * welcomed (HELLO/WELCOME):
 *   1. throughput: a 64 MiB CONTRIBUTION (one fragment of 16M f32) from a client net to a
 *      server net, against write()/read() loops of the same 64 MiB on a blocking socket
 *      pair (the writer in a thread) into a reused buffer; rounds after one warm-up of
 *      each, the order rotating every round, the time from the send to the bytes in the
 *      receiver's hands; ratio of the medians, goal >= 0.9.  Two more columns, for
 *      information: the bare socket reading into a buffer malloc'ed per transfer, and
 *      the bare socket's reader polling with SO_RCVLOWAT (as dlc_net reads a large body);
 *   2. round trip: a HEARTBEAT ping-pong (client -> server -> client) in seven kinds,
 *      batches in rotating order: the nets with their I/O threads (one thread driving
 *      both), a bare socket pair with an echo thread reading blocking or spinning 50 us
 *      first, the nets with inline_io (one thread driving both, or a thread each), a bare
 *      pair driven by one thread, and the same with an epoll_wait before each read.  The
 *      goal, <= 1.5, is taken like against like: inline against the one-thread bare pair,
 *      nobody to wake on either side (on a VM a blocked reader pays for waking an idle
 *      vCPU, so a sleeping reference measures that instead); the rest is printed for
 *      information;
 *   3. WAN emulation: a 32 MiB frame through dlc_net_shape's cap on the sending side
 *      (measured wire rate / configured, goal within 5%), then ping-pongs with the latency
 *      added on both sides' sending direction ((shaped - unshaped median round trip) / 2
 *      minus the configured one-way latency, goal within 1 ms).
 * Prints "goal met" or "goal MISSED" under each; exit 1 only on a transport error.
 * --load: one server net and ONE client net holding N connections (default 256), each
 * sending a HEARTBEAT every --heartbeat s and a 1 MiB CONTRIBUTION every --payload-every s
 * for --seconds s, staggered; the server's thread checks per client the largest gap
 * between consecutive frames (against the transport's timeout), every frame in order and
 * intact, the counts against the sender's successful sends, and that no peer was lost.
 * PASS or FAIL with the numbers; exit 1 on FAIL or on any transport error.
 *
 * Usage: bench_transport [--rounds N] [--trips N] [--rate MBPS] [--latency MS]
 *                        [--only throughput|roundtrip|wan] [--kind NAME]
 * (--kind: the round trips of that kind alone, every batch, its figures and no ratios:
 * a loop to profile, e.g. perf stat -e user_time,system_time ... --kind inline)
 *        bench_transport --load [--clients N] [--seconds S] [--heartbeat S] [--timeout S]
 *                               [--payload-every S] [--payload-mib M]
 * (defaults: 21 rounds, 2000 trips, 50 MB/s, 20 ms; 256 clients, 30 s, heartbeat 0.25 s,
 * timeout 1 s, a 1 MiB payload every 1 s) */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include "diloco/diloco.h"
#include "diloco/net.h"
#include <event2/event.h>

#define SECRET "bench_transport: the run secret"
/* HEARTBEATs this program sends carry tokens = MARK + sequence number; the transport's own
 * (sent when a link is idle) do not. */
#define MARK ((int64_t)1 << 40)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_transport: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v[0..n) and returns its median. */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void noop_free(const void *payload, void *arg) {
    (void)payload;
    (void)arg;
}

static void fill_pattern(uint8_t *p, size_t n) {
    uint32_t x = 2463534242u;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        memcpy(p + i, &x, 4);
    }
}

static void print_machine(void) {
    char line[512], model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) snprintf(model, sizeof model, "%s", c + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    double la[3] = {0, 0, 0};
    f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf %lf %lf", &la[0], &la[1], &la[2]) != 3) la[0] = la[1] = la[2] = -1;
    if (f) fclose(f);
    const char *env = getenv("OPENBLAS_CORETYPE");
    printf("machine: %ld CPUs, %s; load average %.2f %.2f %.2f; OPENBLAS_CORETYPE%s%s\n",
           sysconf(_SC_NPROCESSORS_ONLN), model, la[0], la[1], la[2], env ? "=" : " unset", env ? env : "");
}

/* ---- our transport: a server net and a client net, one connection ---- */

typedef struct bench_pair {
    int64_t numel[1];
    dlc_proto_layout layout;
    dlc_hello hello_server, hello_client;
    dlc_net *srv, *cli;
    int speer;   /* the client, as the server names it */
    int cpeer;   /* the server, as the client names it */
    int learner; /* the id WELCOME gave the client */
    dlc_frame hb; /* the ping-pongs' HEARTBEAT, built once as the bare references' buffer is */
} bench_pair;

static void hello_init(dlc_hello *h, int server, int fragments) {
    memset(h, 0, sizeof *h);
    h->proto_min = DLC_PROTO_VERSION_MIN;
    h->proto_max = DLC_PROTO_VERSION_MAX;
    snprintf(h->run, sizeof h->run, "bench_transport");
    h->model_hash = 0x62656e6368ull;
    h->plan_hash = 0x7472616e73ull;
    h->learner = 0;
    h->codecs = 1u << DLC_CODEC_F32;
    h->block = DLC_CODEC_BLOCK_DEFAULT;
    if (server) {
        h->fragments = fragments;
        h->endpoints = 1; /* endpoint[0] = "": this connection owns every fragment */
    }
}

static dlc_net_config net_config(const dlc_hello *h, const dlc_proto_layout *l, double heartbeat_s,
                                 double timeout_s) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = SECRET;
    c.secret_len = strlen(SECRET);
    c.hello = h;
    c.layout = l;
    c.heartbeat_s = heartbeat_s;
    c.timeout_s = timeout_s;
    return c;
}

static const char *kind_name(dlc_net_event_kind k) {
    static const char *names[] = {"ready", "frame", "sent", "drained", "lost", "refused"};
    return k < DLC_NET_EVENT_COUNT ? names[k] : "?";
}

/* Next event of net within ms (0 if none); a poll error or a lost or refused peer ends
 * the program (no such event is expected outside --load). */
static int next_event(dlc_net *net, dlc_net_event *ev, int ms, const char *what) {
    int r = dlc_net_poll(net, ev, ms);
    if (r < 0) die("%s: dlc_net_poll: %s", what, dlc_last_error());
    if (r == 1 && (ev->kind == DLC_NET_LOST || ev->kind == DLC_NET_REFUSED))
        die("%s: peer %d %s (%s): %s", what, ev->peer, kind_name(ev->kind), dlc_proto_errcode_name(ev->code),
            ev->text);
    return r;
}

/* Waits up to timeout_s for a FRAME of `type` (a HEARTBEAT: one of tokens `tokens`) on net,
 * releasing whatever else comes first; the frame is left in *ev, to release.  The first
 * poll waits the whole timeout, so the expected frame costs one dlc_net_poll and no clock
 * read here (the bare references read none either). */
static void wait_frame(dlc_net *net, dlc_frame_type type, int64_t tokens, double timeout_s, dlc_net_event *ev,
                       const char *what) {
    double end = 0;
    for (int ms = (int)(timeout_s * 1000);;) {
        if (next_event(net, ev, ms, what)) {
            if (ev->kind == DLC_NET_FRAME && ev->frame.type == type &&
                (type != DLC_FRAME_HEARTBEAT || ev->frame.msg.tokens == tokens))
                return;
            dlc_net_event_release(ev);
            if (end == 0) end = now() + timeout_s;
        } else if (end == 0) { /* the first poll waited it all */
            die("%s: no %s frame within %.1f s", what, dlc_frame_type_name(type), timeout_s);
        }
        double left = end - now();
        if (left <= 0) die("%s: no %s frame within %.1f s", what, dlc_frame_type_name(type), timeout_s);
        ms = left > 0.1 ? 100 : 1 + (int)(left * 1000);
    }
}

static void send_or_die(dlc_net *net, int peer, const dlc_frame *f, const char *what) {
    if (dlc_net_send(net, peer, f, noop_free, NULL) != DLC_OK)
        die("%s: dlc_net_send of a %s: %s", what, dlc_frame_type_name(f->type), dlc_last_error());
}

static void heartbeat_frame(dlc_frame *f, int learner, int64_t steps, int64_t seq) {
    dlc_frame_init(f, DLC_FRAME_HEARTBEAT);
    f->msg.learner = learner;
    f->msg.steps = steps;
    f->msg.tokens = MARK + seq;
}

/* A server net on 127.0.0.1 (any port) and a client net connected to it, both READY;
 * payload frames are of one fragment of `numel` f32. */
static bench_pair *pair_open_mode(int64_t numel, int inline_io) {
    bench_pair *p = calloc(1, sizeof *p);
    if (!p) die("out of memory");
    p->numel[0] = numel;
    p->layout.fragments = 1;
    p->layout.numel = p->numel;
    p->layout.model_numel = numel;
    p->layout.codec = dlc_codec_default_params();
    hello_init(&p->hello_server, 1, 1);
    hello_init(&p->hello_client, 0, 0);
    dlc_net_config sc = net_config(&p->hello_server, &p->layout, 1.0, 5.0);
    dlc_net_config cc = net_config(&p->hello_client, &p->layout, 1.0, 5.0);
    sc.inline_io = cc.inline_io = inline_io;
    p->srv = dlc_net_new(&sc);
    if (!p->srv) die("server dlc_net_new: %s", dlc_last_error());
    int port = dlc_net_listen(p->srv, "127.0.0.1:0");
    if (port <= 0) die("dlc_net_listen: %s", dlc_last_error());
    p->cli = dlc_net_new(&cc);
    if (!p->cli) die("client dlc_net_new: %s", dlc_last_error());
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    p->cpeer = dlc_net_connect(p->cli, addr);
    if (p->cpeer < 0) die("dlc_net_connect %s: %s", addr, dlc_last_error());
    p->speer = -1;
    int cready = 0;
    double end = now() + 10;
    while (p->speer < 0 || !cready) {
        if (now() > end) die("no READY on %s within 10 s", p->speer < 0 ? "the server" : "the client");
        dlc_net_event ev;
        if (next_event(p->srv, &ev, 5, "connect")) {
            if (ev.kind == DLC_NET_READY) p->speer = ev.peer;
            dlc_net_event_release(&ev);
        }
        if (next_event(p->cli, &ev, 5, "connect")) {
            if (ev.kind == DLC_NET_READY && ev.peer == p->cpeer) {
                cready = 1;
                p->learner = ev.frame.hello.learner < 0 ? 0 : ev.frame.hello.learner;
            }
            dlc_net_event_release(&ev);
        }
    }
    heartbeat_frame(&p->hb, p->learner, 0, 0);
    return p;
}

static bench_pair *pair_open(int64_t numel) { return pair_open_mode(numel, 0); }

static void pair_close(bench_pair *p) {
    dlc_net_free(p->cli);
    dlc_net_free(p->srv);
    free(p);
}

static void contribution_frame(dlc_frame *f, int learner, int64_t steps, int64_t seq, const uint8_t *payload,
                               size_t len) {
    dlc_msg m;
    memset(&m, 0, sizeof m);
    m.type = DLC_MSG_CONTRIBUTION;
    m.learner = learner;
    m.fragment = 0;
    m.version = seq;
    m.steps = steps;
    m.codec = DLC_CODEC_F32;
    m.payload = payload;
    m.len = len;
    if (dlc_frame_from_msg(f, &m) != DLC_OK) die("dlc_frame_from_msg: %s", dlc_last_error());
}

/* Bytes of f on the wire: prefix, header, payload. */
static size_t wire_bytes(const dlc_frame *f, const dlc_proto_layout *l) {
    static uint8_t hdr[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX];
    int64_t n = dlc_proto_encode(f, l, hdr, sizeof hdr);
    if (n < 0) die("dlc_proto_encode: %s", dlc_last_error());
    return (size_t)n + (f->type == DLC_FRAME_HEARTBEAT ? 0 : f->msg.len);
}

/* One ping-pong through the pair: client -> server -> client; seconds. */
static double ours_trip(bench_pair *p, int64_t seq) {
    p->hb.msg.steps = seq, p->hb.msg.tokens = MARK + seq;
    dlc_net_event ev;
    double t0 = now();
    send_or_die(p->cli, p->cpeer, &p->hb, "ping");
    wait_frame(p->srv, DLC_FRAME_HEARTBEAT, MARK + seq, 10, &ev, "ping");
    dlc_net_event_release(&ev);
    send_or_die(p->srv, p->speer, &p->hb, "pong");
    wait_frame(p->cli, DLC_FRAME_HEARTBEAT, MARK + seq, 10, &ev, "pong");
    double t = now() - t0;
    dlc_net_event_release(&ev);
    return t;
}

/* ---- the reference: a bare blocking TCP socket pair on loopback ---- */

static void bare_pair(int fd[2]) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&a, &al))
        die("bare socket: %s", strerror(errno));
    fd[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (fd[0] < 0 || connect(fd[0], (struct sockaddr *)&a, sizeof a)) die("bare connect: %s", strerror(errno));
    fd[1] = accept(ls, NULL, NULL);
    if (fd[1] < 0) die("bare accept: %s", strerror(errno));
    close(ls);
    int one = 1;
    setsockopt(fd[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void write_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die("bare write: %s", strerror(errno));
        p += w, n -= (size_t)w;
    }
}

static void read_all(int fd, uint8_t *p, size_t n) {
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) die("bare read: %s", r ? strerror(errno) : "end of stream");
        p += r, n -= (size_t)r;
    }
}

/* read_all with SO_RCVLOWAT: poll() until min(1 MiB, what is left) is waiting, then
 * recv() all there is.  (A blocking read() would wait for the threshold even when the
 * receive window is full and no more can come; poll() reports readable then.) */
static void read_all_lowat(int fd, uint8_t *p, size_t n) {
    int set = 0;
    while (n) {
        int lw = n < ((size_t)1 << 20) ? (int)n : 1 << 20;
        if (lw != set && setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lw, sizeof lw) == 0) set = lw;
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, -1) < 0 && errno != EINTR) die("bare poll: %s", strerror(errno));
        ssize_t r;
        while (n && (r = recv(fd, p, n, MSG_DONTWAIT)) > 0) p += r, n -= (size_t)r;
        if (n && r == 0) die("bare read: end of stream");
        if (n && r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            die("bare read: %s", strerror(errno));
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
}

typedef struct bare_job {
    int fd;
    uint8_t *buf;
    size_t len;
    int trips; /* 0: write buf once; > 0: echo len bytes that many times */
} bare_job;

static void *bare_thread(void *arg) {
    bare_job *j = arg;
    if (!j->trips) write_all(j->fd, j->buf, j->len);
    for (int i = 0; i < j->trips; i++) {
        read_all(j->fd, j->buf, j->len);
        write_all(j->fd, j->buf, j->len);
    }
    return NULL;
}

/* ---- default mode ---- */

static int verdict(int ok) {
    printf("  %s\n", ok ? "goal met" : "goal MISSED");
    return ok;
}

static int bench_throughput(int rounds) {
    const int64_t numel = (int64_t)16 << 20;
    const size_t len = (size_t)numel * 4;
    uint8_t *payload = malloc(len), *rbuf = malloc(len);
    if (!payload || !rbuf) die("out of memory");
    fill_pattern(payload, len);
    memset(rbuf, 0, len);
    bench_pair *p = pair_open(numel);
    int fd[2];
    bare_pair(fd);
    double *ours = calloc((size_t)rounds, sizeof *ours), *bare = calloc((size_t)rounds, sizeof *bare);
    double *fresh = calloc((size_t)rounds, sizeof *fresh), *lowat = calloc((size_t)rounds, sizeof *lowat);
    if (!ours || !bare || !fresh || !lowat) die("out of memory");
    dlc_frame f;
    contribution_frame(&f, p->learner, 1, 0, payload, len);
    printf("throughput: a %zu MiB CONTRIBUTION (one fragment of %lld f32, %zu bytes on the wire) through "
           "dlc_net vs write()/read() of %zu MiB on a blocking socket pair (the writer in a thread) into a "
           "reused buffer; %d rounds after one warm-up each, the order rotating every round; time from the send "
           "to the bytes in the receiver's hands\n",
           len >> 20, (long long)numel, wire_bytes(&f, &p->layout), len >> 20, rounds);
    printf("  (for information: bare+malloc, the bare socket reading into a buffer malloc'ed for each "
           "transfer, as a receiver of frames of any size must; bare+lowat, the bare socket's reader polling "
           "with SO_RCVLOWAT 1 MiB, the threshold dlc_net reaches on a fast link)\n");
    printf("  %-6s %10s %10s %12s %11s\n", "round", "ours GB/s", "bare GB/s", "bare+malloc", "bare+lowat");
    for (int r = -1; r < rounds; r++)
        for (int side = 0; side < 4; side++) {
            int which = (side + (r < 0 ? 0 : r)) % 4; /* rotate who goes first */
            double t0 = now(), t;
            if (which == 0) {
                contribution_frame(&f, p->learner, 1, r + 1, payload, len);
                dlc_net_event ev;
                send_or_die(p->cli, p->cpeer, &f, "throughput");
                wait_frame(p->srv, DLC_FRAME_CONTRIBUTION, 0, 60, &ev, "throughput");
                t = now() - t0;
                if (ev.frame.msg.len != len || memcmp(ev.frame.msg.payload, payload, len) != 0)
                    die("throughput: the %zu-byte payload arrived as %zu bytes%s", len, ev.frame.msg.len,
                        ev.frame.msg.len == len ? " with other contents" : "");
                dlc_net_event_release(&ev);
                if (r >= 0) ours[r] = t;
            } else {
                bare_job j = {fd[0], payload, len, 0};
                pthread_t th;
                if (pthread_create(&th, NULL, bare_thread, &j)) die("pthread_create failed");
                uint8_t *into = which != 2 ? rbuf : malloc(len);
                if (!into) die("out of memory");
                if (which == 3) read_all_lowat(fd[1], into, len);
                else read_all(fd[1], into, len);
                t = now() - t0;
                pthread_join(th, NULL);
                if (memcmp(into, payload, len) != 0) die("bare: the payload arrived with other contents");
                if (which == 2) free(into);
                if (r >= 0) (which == 1 ? bare : which == 2 ? fresh : lowat)[r] = t;
            }
        }
    for (int r = 0; r < rounds; r++)
        printf("  %-6d %10.2f %10.2f %12.2f %11.2f\n", r + 1, len / ours[r] / 1e9, len / bare[r] / 1e9,
               len / fresh[r] / 1e9, len / lowat[r] / 1e9);
    double om = median(ours, rounds), bm = median(bare, rounds), fm = median(fresh, rounds);
    double lm = median(lowat, rounds);
    printf("  median: ours %.2f GB/s, bare %.2f GB/s, bare+malloc %.2f GB/s, bare+lowat %.2f GB/s; best: ours %.2f, "
           "bare %.2f, bare+malloc %.2f, bare+lowat %.2f\n",
           len / om / 1e9, len / bm / 1e9, len / fm / 1e9, len / lm / 1e9, len / ours[0] / 1e9, len / bare[0] / 1e9,
           len / fresh[0] / 1e9, len / lowat[0] / 1e9);
    printf("  ours / bare (medians) = %.3f (goal >= 0.9); ours / bare+malloc = %.3f; ours / bare+lowat = %.3f\n",
           bm / om, fm / om, lm / om);
    int ok = verdict(bm / om >= 0.9);
    close(fd[0]);
    close(fd[1]);
    pair_close(p);
    free(ours);
    free(bare);
    free(fresh);
    free(lowat);
    free(payload);
    free(rbuf);
    return ok;
}

/* read_all for the spinning reference: non-blocking reads, yielding, for up to SPIN_S
 * before each blocking one (what dlc_net_poll does before it sleeps).  A blocked reader
 * costs a wakeup of an idle vCPU, tens of microseconds on an idle VM and a few on a busy
 * one, so each kind of waiting is compared with its like. */
#define SPIN_S 50e-6
static void read_all_spin(int fd, uint8_t *p, size_t n) {
    while (n) {
        double end = now() + SPIN_S;
        ssize_t r;
        while ((r = recv(fd, p, n, MSG_DONTWAIT)) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && now() < end)
            sched_yield();
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) die("bare read: %s", r ? strerror(errno) : "end of stream");
        p += r, n -= (size_t)r;
    }
}

static void *spin_echo_thread(void *arg) {
    bare_job *j = arg;
    for (int i = 0; i < j->trips; i++) {
        read_all_spin(j->fd, j->buf, j->len);
        write_all(j->fd, j->buf, j->len);
    }
    return NULL;
}

/* The bare reference without a second thread: one thread writes one socket of the pair
 * and reads the other (loopback has delivered the bytes when write() returns), as one
 * thread drives both inline nets. */
static void bare_one_thread_trip(int fd[2], uint8_t *buf, size_t sz) {
    write_all(fd[0], buf, sz);
    read_all(fd[1], buf, sz);
    write_all(fd[1], buf, sz);
    read_all(fd[0], buf, sz);
}

/* The server side of the two-thread inline ping-pong: this thread alone polls the
 * server net (inline_io) and answers `trips` marked HEARTBEATs. */
typedef struct net_echo_job {
    bench_pair *p;
    int64_t first;
    int trips;
} net_echo_job;

static void *net_echo_thread(void *arg) {
    net_echo_job *j = arg;
    dlc_frame f;
    heartbeat_frame(&f, j->p->learner, 0, 0);
    for (int i = 0; i < j->trips; i++) {
        dlc_net_event ev;
        wait_frame(j->p->srv, DLC_FRAME_HEARTBEAT, MARK + j->first + i, 10, &ev, "echo");
        f.msg.steps = j->first + i, f.msg.tokens = MARK + j->first + i;
        dlc_net_event_release(&ev);
        send_or_die(j->p->srv, j->p->speer, &f, "echo");
    }
    return NULL;
}

/* bare_one_thread_trip with each read preceded by epoll_wait on the socket, as any
 * transport serving many connections must ask which one is readable (for information:
 * the part of inline's cost that multiplexing itself takes). */
static void bare_epoll_trip(int ep, int fd[2], uint8_t *buf, size_t sz) {
    struct epoll_event e;
    write_all(fd[0], buf, sz);
    if (epoll_wait(ep, &e, 1, -1) != 1 || e.data.fd != fd[1]) die("bare epoll_wait: %s", strerror(errno));
    read_all(fd[1], buf, sz);
    write_all(fd[1], buf, sz);
    if (epoll_wait(ep, &e, 1, -1) != 1 || e.data.fd != fd[0]) die("bare epoll_wait: %s", strerror(errno));
    read_all(fd[0], buf, sz);
}

/* 1-thread with each read in the callback of a persistent EV_READ event, run by a pass
 * of a libevent loop, as inline's reads are (for information: what a transport built
 * on libevent pays before it frames a byte). */
typedef struct lev_ping {
    uint8_t *buf;
    size_t sz;
    int got;
} lev_ping;

static void lev_read(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    lev_ping *p = arg;
    read_all(fd, p->buf, p->sz);
    p->got = 1;
}

static void bare_lev_trip(struct event_base *base, int fd[2], lev_ping *p) {
    write_all(fd[0], p->buf, p->sz);
    for (p->got = 0; !p->got;) event_base_loop(base, EVLOOP_ONCE);
    write_all(fd[1], p->buf, p->sz);
    for (p->got = 0; !p->got;) event_base_loop(base, EVLOOP_ONCE);
}

enum { RT_OURS, RT_BARE, RT_SPIN, RT_INLINE, RT_ONE, RT_INLINE2, RT_EPOLL, RT_LEV, RT_KINDS };
static const char *const rt_names[RT_KINDS] = {"ours",     "blocking", "spinning", "inline",
                                               "1-thread", "inline-2", "1-epoll",  "1-libev"};

/* The round trips; only_kind >= 0: that kind alone, in every batch (--kind, for a
 * profiler: its figures only, no ratios). */
static int bench_roundtrip(int trips, int only_kind) {
    bench_pair *p = pair_open(1024), *q = pair_open_mode(1024, 1);
    dlc_frame f;
    heartbeat_frame(&f, p->learner, 0, 0);
    size_t sz = wire_bytes(&f, NULL);
    int fd[2];
    bare_pair(fd);
    int ep = epoll_create1(0);
    for (int k = 0; k < 2; k++) {
        struct epoll_event e = {.events = EPOLLIN, .data.fd = fd[k]};
        if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd[k], &e) != 0) die("epoll: %s", strerror(errno));
    }
    uint8_t lbuf[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX];
    lev_ping lp = {lbuf, sz, 0};
    struct event_base *lbase = event_base_new(); /* locking on, as the transport's (evthread) */
    struct event *lev[2];
    for (int k = 0; k < 2; k++)
        if (!lbase || !(lev[k] = event_new(lbase, fd[k], EV_READ | EV_PERSIST, lev_read, &lp)) ||
            event_add(lev[k], NULL) != 0)
            die("libevent: cannot set up the bare loop");
    int batches = 10, per = (trips + batches - 1) / batches;
    trips = per * batches;
    double *t[RT_KINDS];
    for (int k = 0; k < RT_KINDS; k++)
        if (!(t[k] = calloc((size_t)trips, sizeof *t[k]))) die("out of memory");
    uint8_t buf[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX], echo[sizeof buf];
    memset(buf, 0x5a, sizeof buf);
    printf("round trip: a HEARTBEAT (%zu bytes on the wire) client -> server -> client, one thread driving both "
           "nets, against a %zu-byte ping-pong on a bare socket pair (TCP_NODELAY); %d trips each in %d batches "
           "after a warm-up batch, the order rotating every batch:\n"
           "  ours      the nets with their I/O threads (dlc_net_poll spins %.0f us before it sleeps)\n"
           "  blocking  bare, an echo thread, blocking reads\n"
           "  spinning  bare, an echo thread, reads that spin %.0f us before they block\n"
           "  inline    the nets with inline_io: the polling thread runs their loops, no I/O thread\n"
           "  1-thread  bare, one thread writing one socket and reading the other, no echo thread\n"
           "  inline-2  the nets with inline_io, each polled by its own thread (the server's echoes), as "
           "spinning\n"
           "  1-epoll   1-thread with an epoll_wait before each read (for information: what multiplexing "
           "connections costs any transport)\n"
           "  1-libev   1-thread with each read in a libevent callback, one loop pass per hop (for information: "
           "what a transport on libevent pays before framing)\n",
           sz, sz, trips, batches, SPIN_S * 1e6, SPIN_S * 1e6);
    int64_t seq = 0;
    for (int b = -1; b < batches; b++)
        for (int side = 0; side < RT_KINDS; side++) {
            int which = (side + (b < 0 ? 0 : b)) % RT_KINDS;
            if (only_kind >= 0) {
                if (side > 0) continue; /* one slot per batch, for that kind */
                which = only_kind;
            }
            double *into = t[which];
            if (which == RT_OURS || which == RT_INLINE) {
                for (int i = 0; i < per; i++) {
                    double dt = ours_trip(which == RT_OURS ? p : q, ++seq);
                    if (b >= 0) into[b * per + i] = dt;
                }
                continue;
            }
            if (which == RT_INLINE2) {
                net_echo_job j = {q, seq + 1, per};
                pthread_t th;
                if (pthread_create(&th, NULL, net_echo_thread, &j)) die("pthread_create failed");
                for (int i = 0; i < per; i++) {
                    dlc_net_event ev;
                    seq++;
                    q->hb.msg.steps = seq, q->hb.msg.tokens = MARK + seq;
                    double t0 = now();
                    send_or_die(q->cli, q->cpeer, &q->hb, "ping");
                    wait_frame(q->cli, DLC_FRAME_HEARTBEAT, MARK + seq, 10, &ev, "pong");
                    if (b >= 0) into[b * per + i] = now() - t0;
                    dlc_net_event_release(&ev);
                }
                pthread_join(th, NULL);
                continue;
            }
            if (which == RT_LEV) {
                for (int i = 0; i < per; i++) {
                    double t0 = now();
                    bare_lev_trip(lbase, fd, &lp);
                    if (b >= 0) into[b * per + i] = now() - t0;
                }
                continue;
            }
            if (which == RT_EPOLL) {
                for (int i = 0; i < per; i++) {
                    double t0 = now();
                    bare_epoll_trip(ep, fd, buf, sz);
                    if (b >= 0) into[b * per + i] = now() - t0;
                }
                continue;
            }
            if (which == RT_ONE) {
                for (int i = 0; i < per; i++) {
                    double t0 = now();
                    bare_one_thread_trip(fd, buf, sz);
                    if (b >= 0) into[b * per + i] = now() - t0;
                }
                continue;
            }
            bare_job j = {fd[1], echo, sz, per};
            pthread_t th;
            if (pthread_create(&th, NULL, which == RT_BARE ? bare_thread : spin_echo_thread, &j))
                die("pthread_create failed");
            for (int i = 0; i < per; i++) {
                double t0 = now();
                write_all(fd[0], buf, sz);
                if (which == RT_BARE)
                    read_all(fd[0], buf, sz);
                else
                    read_all_spin(fd[0], buf, sz);
                if (b >= 0) into[b * per + i] = now() - t0;
            }
            pthread_join(th, NULL);
        }
    double m[RT_KINDS];
    printf("  %-10s %10s %10s %10s\n", "", "median us", "10th pct", "90th pct");
    for (int k = 0; k < RT_KINDS; k++) {
        if (only_kind >= 0 && k != only_kind) continue;
        m[k] = median(t[k], trips);
        printf("  %-10s %10.1f %10.1f %10.1f\n", rt_names[k], m[k] * 1e6, t[k][trips / 10] * 1e6,
               t[k][trips * 9 / 10] * 1e6);
    }
    int ok = 1;
    if (only_kind >= 0) goto done;
    printf("  with the I/O thread: ours / blocking = %.3f, ours / spinning = %.3f (medians; each hop wakes a "
           "sleeping thread, as blocking does, which spinning avoids)\n",
           m[RT_OURS] / m[RT_BARE], m[RT_OURS] / m[RT_SPIN]);
    printf("  inline: inline / 1-thread = %.3f, inline-2 / spinning = %.3f (goal <= 1.5: the same threads "
           "doing the same work, no wake-ups)\n",
           m[RT_INLINE] / m[RT_ONE], m[RT_INLINE2] / m[RT_SPIN]);
    printf("  for information: 1-epoll / 1-thread = %.3f (multiplexing), 1-libev / 1-thread = %.3f (libevent's "
           "loop), inline / 1-libev = %.3f (the rest: framing, the event queue)\n",
           m[RT_EPOLL] / m[RT_ONE], m[RT_LEV] / m[RT_ONE], m[RT_INLINE] / m[RT_LEV]);
    ok = verdict(m[RT_INLINE] / m[RT_ONE] <= 1.5);
done:
    close(ep);
    for (int k = 0; k < 2; k++) event_free(lev[k]);
    event_base_free(lbase);
    close(fd[0]);
    close(fd[1]);
    pair_close(p);
    pair_close(q);
    for (int k = 0; k < RT_KINDS; k++) free(t[k]);
    return ok;
}

static int bench_wan(double rate_mb, double latency_ms) {
    const int64_t numel = (int64_t)8 << 20;
    const size_t len = (size_t)numel * 4;
    uint8_t *payload = malloc(len);
    if (!payload) die("out of memory");
    fill_pattern(payload, len);
    bench_pair *p = pair_open(numel);
    dlc_frame f;
    contribution_frame(&f, p->learner, 1, 0, payload, len);
    size_t wire = wire_bytes(&f, &p->layout);
    double rate = rate_mb * 1e6;
    int reps = 3;
    double t[3];
    printf("WAN rate: dlc_net_shape(client, server peer, %.0f MB/s, 0) on the client; a %zu MiB CONTRIBUTION "
           "(%zu bytes on the wire) x %d, send to frame received\n",
           rate_mb, len >> 20, wire, reps);
    if (dlc_net_shape(p->cli, p->cpeer, rate, 0) != DLC_OK) die("dlc_net_shape: %s", dlc_last_error());
    for (int r = 0; r < reps; r++) {
        contribution_frame(&f, p->learner, 1, r + 1, payload, len);
        dlc_net_event ev;
        double t0 = now();
        send_or_die(p->cli, p->cpeer, &f, "WAN rate");
        wait_frame(p->srv, DLC_FRAME_CONTRIBUTION, 0, 60, &ev, "WAN rate");
        t[r] = now() - t0;
        if (ev.frame.msg.len != len || memcmp(ev.frame.msg.payload, payload, len) != 0)
            die("WAN rate: the payload arrived damaged");
        dlc_net_event_release(&ev);
        printf("  transfer %d: %.3f s, %.2f MB/s = %.4f x configured\n", r + 1, t[r], wire / t[r] / 1e6,
               wire / t[r] / rate);
    }
    double tm = median(t, reps);
    double ratio = wire / tm / rate;
    printf("  median: %.2f MB/s; measured / configured = %.4f (goal 0.95..1.05)\n", wire / tm / 1e6, ratio);
    int ok = verdict(ratio >= 0.95 && ratio <= 1.05);
    if (dlc_net_shape(p->cli, p->cpeer, 0, 0) != DLC_OK) die("dlc_net_shape: %s", dlc_last_error());

    int base_n = 200, lat_n = 50;
    double *base = calloc((size_t)base_n, sizeof *base), *lat = calloc((size_t)lat_n, sizeof *lat);
    if (!base || !lat) die("out of memory");
    int64_t seq = 0;
    for (int i = 0; i < 20; i++) ours_trip(p, ++seq);
    for (int i = 0; i < base_n; i++) base[i] = ours_trip(p, ++seq);
    double L = latency_ms * 1e-3;
    if (dlc_net_shape(p->cli, p->cpeer, 0, L) != DLC_OK || dlc_net_shape(p->srv, p->speer, 0, L) != DLC_OK)
        die("dlc_net_shape: %s", dlc_last_error());
    ours_trip(p, ++seq); /* a frame sent before the shaping took effect cannot be in the way */
    for (int i = 0; i < lat_n; i++) lat[i] = ours_trip(p, ++seq);
    double bm = median(base, base_n), lm = median(lat, lat_n);
    double added = (lm - bm) / 2, err = added - L;
    printf("WAN latency: dlc_net_shape(.., 0, %.1f ms) on both nets' sending direction; HEARTBEAT round trips: "
           "%d unshaped, then %d shaped\n",
           latency_ms, base_n, lat_n);
    printf("  median round trip: unshaped %.3f ms, shaped %.3f ms (shaped min %.3f, max %.3f)\n", bm * 1e3, lm * 1e3,
           lat[0] * 1e3, lat[lat_n - 1] * 1e3);
    printf("  added one-way latency %.3f ms - configured %.3f ms = %+.3f ms (goal within +-1 ms)\n", added * 1e3,
           L * 1e3, err * 1e3);
    ok &= verdict(fabs(err) <= 1e-3);
    if (dlc_net_shape(p->cli, p->cpeer, 0, 0) != DLC_OK || dlc_net_shape(p->srv, p->speer, 0, 0) != DLC_OK)
        die("dlc_net_shape: %s", dlc_last_error());
    pair_close(p);
    free(base);
    free(lat);
    free(payload);
    return ok;
}

/* ---- --load ---- */

typedef struct load_opts {
    int clients;
    double seconds, heartbeat_s, timeout_s, payload_s;
    size_t payload_len;
} load_opts;

/* Client i's frames carry msg.steps = i (and msg.learner = the id its WELCOME gave), so
 * the server attributes them to i over every connection i had. */
typedef struct load_client { /* the sender's view of client i */
    int peer, learner;         /* its id in the client net; its learner id */
    int64_t hb_sent, pl_sent;  /* successful dlc_net_send calls */
    int64_t refused, not_ready, reconnects;
    double next_hb, next_pl;
} load_client;

typedef struct load_recv { /* the server's view of client i */
    int64_t hb, pl, idle_hb, order_errors, damaged;
    double last, max_gap;
} load_recv;

/* A growable map of small peer ids to client indices (-1: none yet). */
typedef struct id_map {
    int *v, cap;
} id_map;

static int *id_slot(id_map *m, int id) {
    if (id < 0) die("load: an event with peer id %d", id);
    if (id >= m->cap) {
        int nc = m->cap ? m->cap : 64;
        while (nc <= id) nc *= 2;
        int *nv = realloc(m->v, sizeof *nv * (size_t)nc);
        if (!nv) die("out of memory");
        for (int k = m->cap; k < nc; k++) nv[k] = -1;
        m->v = nv;
        m->cap = nc;
    }
    return &m->v[id];
}

typedef struct load_sender {
    const load_opts *o;
    dlc_net *cli;
    load_client *c;
    id_map *cmap; /* client net peer id -> client index */
    const uint8_t *payload;
    double t0, t_end;
    int64_t lost, frames; /* LOST or REFUSED events; frames from the server (its heartbeats) */
    atomic_int done; /* 1: sending over, counts final; 2: main asks the thread to end */
} load_sender;

static void sender_event(load_sender *s, dlc_net_event *ev) {
    if (ev->kind == DLC_NET_LOST || ev->kind == DLC_NET_REFUSED) {
        if (s->lost++ < 5)
            fprintf(stderr, "load: client side: peer %d %s (%s): %s\n", ev->peer, kind_name(ev->kind),
                    dlc_proto_errcode_name(ev->code), ev->text);
    } else if (ev->kind == DLC_NET_FRAME) {
        s->frames++;
    } else if (ev->kind == DLC_NET_READY) { /* a reconnect */
        int i = *id_slot(s->cmap, ev->peer);
        if (i >= 0) {
            s->c[i].learner = ev->frame.hello.learner;
            s->c[i].reconnects++;
        }
    }
    dlc_net_event_release(ev);
}

static void *sender_thread(void *arg) {
    load_sender *s = arg;
    const load_opts *o = s->o;
    int n = o->clients;
    dlc_frame f;
    for (;;) {
        double t = now();
        if (t >= s->t_end) break;
        double due = s->t_end;
        for (int i = 0; i < n; i++) {
            if (s->c[i].next_hb < due) due = s->c[i].next_hb;
            if (s->c[i].next_pl < due) due = s->c[i].next_pl;
        }
        dlc_net_event ev;
        if (due > t) {
            int ms = (int)ceil((due - t) * 1000);
            int r = dlc_net_poll(s->cli, &ev, ms > 50 ? 50 : ms);
            if (r < 0) die("load: client dlc_net_poll: %s", dlc_last_error());
            if (r == 1) sender_event(s, &ev);
            continue;
        }
        for (int i = 0; i < n; i++) {
            load_client *c = &s->c[i];
            for (int kind = 0; kind < 2; kind++) {
                double *next = kind ? &c->next_pl : &c->next_hb;
                if (*next > t || *next >= s->t_end) continue;
                *next += kind ? o->payload_s : o->heartbeat_s;
                if (kind)
                    contribution_frame(&f, c->learner, i, c->pl_sent, s->payload, o->payload_len);
                else
                    heartbeat_frame(&f, c->learner, i, c->hb_sent);
                dlc_status st = dlc_net_send(s->cli, c->peer, &f, noop_free, NULL);
                if (st == DLC_OK)
                    (*(kind ? &c->pl_sent : &c->hb_sent))++;
                else if (st == DLC_ERR_RANGE)
                    c->refused++;
                else
                    c->not_ready++;
            }
        }
        while (dlc_net_poll(s->cli, &ev, 0) == 1) sender_event(s, &ev);
    }
    atomic_store(&s->done, 1);
    /* keep taking the client's events while the server drains */
    while (atomic_load(&s->done) == 1) {
        dlc_net_event ev;
        if (dlc_net_poll(s->cli, &ev, 20) == 1) sender_event(s, &ev);
    }
    return NULL;
}

static int run_load(const load_opts *o) {
    int n = o->clients;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int64_t numel[1] = {(int64_t)(o->payload_len / 4)};
    dlc_proto_layout layout = {1, numel, numel[0], dlc_codec_default_params()};
    dlc_hello hs, hc;
    hello_init(&hs, 1, 1);
    hello_init(&hc, 0, 0);
    hc.learner = -1; /* one hello for every connection of the client net: the server picks each id */
    dlc_net_config sc = net_config(&hs, &layout, o->heartbeat_s, o->timeout_s);
    dlc_net_config cc = net_config(&hc, &layout, o->heartbeat_s, o->timeout_s);
    if (sc.max_peers < n + 16) sc.max_peers = n + 16;
    dlc_net *srv = dlc_net_new(&sc);
    if (!srv) die("load: server dlc_net_new: %s", dlc_last_error());
    int port = dlc_net_listen(srv, "127.0.0.1:0");
    if (port <= 0) die("load: dlc_net_listen: %s", dlc_last_error());
    dlc_net *cli = dlc_net_new(&cc);
    if (!cli) die("load: client dlc_net_new: %s", dlc_last_error());
    uint8_t *payload = malloc(o->payload_len);
    load_client *c = calloc((size_t)n, sizeof *c);
    load_recv *rv = calloc((size_t)n, sizeof *rv);
    if (!payload || !c || !rv) die("out of memory");
    fill_pattern(payload, o->payload_len);
    printf("load: one server net, one client net holding %d connections (authenticated, welcomed) on 127.0.0.1:%d; "
           "each: a HEARTBEAT every %.3f s and a %.2f MiB CONTRIBUTION every %.3f s for %.0f s, staggered; "
           "transport heartbeat_s %.3f, timeout_s %.3f on both nets\n",
           n, port, o->heartbeat_s, o->payload_len / 1048576.0, o->payload_s, o->seconds, o->heartbeat_s,
           o->timeout_s);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    id_map cmap = {NULL, 0}, smap = {NULL, 0}; /* client / server net peer id -> client index */
    double t_conn = now();
    for (int i = 0; i < n; i++) {
        c[i].peer = dlc_net_connect(cli, addr);
        if (c[i].peer < 0) die("load: dlc_net_connect %d: %s", i, dlc_last_error());
        *id_slot(&cmap, c[i].peer) = i;
    }
    int sready = 0, cready = 0;
    int64_t slost = 0, srefused = 0, sready_later = 0;
    dlc_net_event ev;
    while (sready < n || cready < n) {
        if (now() - t_conn > 60) die("load: %d of %d READY on the server, %d on the client after 60 s", sready, n, cready);
        if (next_event(srv, &ev, 5, "load connect")) {
            if (ev.kind == DLC_NET_READY) sready++;
            dlc_net_event_release(&ev);
        }
        while (next_event(cli, &ev, sready < n ? 0 : 5, "load connect")) {
            int i = ev.kind == DLC_NET_READY ? *id_slot(&cmap, ev.peer) : -1;
            if (i >= 0) {
                c[i].learner = ev.frame.hello.learner;
                cready++;
            }
            dlc_net_event_release(&ev);
        }
    }
    printf("  %d connections READY on both sides in %.2f s\n", n, now() - t_conn);

    load_sender s;
    memset(&s, 0, sizeof s);
    s.o = o;
    s.cli = cli;
    s.c = c;
    s.cmap = &cmap;
    s.payload = payload;
    s.t0 = now() + 0.05;
    s.t_end = s.t0 + o->seconds;
    atomic_init(&s.done, 0);
    for (int i = 0; i < n; i++) {
        c[i].next_hb = s.t0 + o->heartbeat_s * i / n;
        c[i].next_pl = s.t0 + o->payload_s * i / n;
        rv[i].last = s.t0;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, sender_thread, &s)) die("pthread_create failed");

    int64_t got = 0, sent = -1, other = 0, stray = 0, unattributed = 0;
    double drain_end = s.t_end + 10, worst_poll = 0;
    int tail_checked = 0;
    for (;;) {
        double t = now();
        if (!tail_checked && t >= s.t_end) {
            /* the silence since a client's last frame counts up to the end of the sending window */
            for (int i = 0; i < n; i++)
                if (s.t_end - rv[i].last > rv[i].max_gap) rv[i].max_gap = s.t_end - rv[i].last;
            tail_checked = 1;
        }
        if (sent < 0 && atomic_load(&s.done)) {
            sent = 0;
            for (int i = 0; i < n; i++) sent += c[i].hb_sent + c[i].pl_sent;
        }
        if ((sent >= 0 && got >= sent) || t > drain_end) break;
        int r = dlc_net_poll(srv, &ev, 20);
        if (r < 0) die("load: server dlc_net_poll: %s", dlc_last_error());
        if (r == 0) continue;
        double ta = now();
        if (ta < s.t_end && ta - t > worst_poll) worst_poll = ta - t;
        if (ev.kind == DLC_NET_LOST) {
            if (slost++ < 5)
                fprintf(stderr, "load: server side: peer %d lost (%s): %s\n", ev.peer, dlc_proto_errcode_name(ev.code),
                        ev.text);
        } else if (ev.kind == DLC_NET_REFUSED) {
            if (srefused++ < 5)
                fprintf(stderr, "load: server side: a connection refused (%s): %s\n", dlc_proto_errcode_name(ev.code),
                        ev.text);
        } else if (ev.kind == DLC_NET_READY) {
            sready_later++;
        } else if (ev.kind == DLC_NET_FRAME) {
            const dlc_msg *m = &ev.frame.msg;
            int pl = ev.frame.type == DLC_FRAME_CONTRIBUTION;
            int app = pl || (ev.frame.type == DLC_FRAME_HEARTBEAT && m->tokens >= MARK);
            int *slot = id_slot(&smap, ev.peer);
            int i = -1;
            if (app && m->steps >= 0 && m->steps < n)
                i = *slot = (int)m->steps;
            else if (app)
                stray++;
            else if (ev.frame.type == DLC_FRAME_HEARTBEAT && *slot >= 0)
                i = *slot;
            else if (ev.frame.type == DLC_FRAME_HEARTBEAT)
                unattributed++; /* the transport's own heartbeat before any frame of ours */
            else
                other++;
            if (i >= 0) {
                load_recv *q = &rv[i];
                if (ta <= s.t_end + o->timeout_s && ta - q->last > q->max_gap) q->max_gap = ta - q->last;
                if (ta > q->last) q->last = ta;
                if (!app) {
                    q->idle_hb++; /* the transport's own, sent on an idle link */
                } else {
                    int64_t seq = pl ? m->version : m->tokens - MARK;
                    if (seq != (pl ? q->pl : q->hb)) q->order_errors++;
                    if (pl && (m->len != o->payload_len || memcmp(m->payload, payload, 64) != 0 ||
                               memcmp(m->payload + m->len - 64, payload + o->payload_len - 64, 64) != 0))
                        q->damaged++;
                    (*(pl ? &q->pl : &q->hb))++;
                    got++;
                }
            }
        }
        dlc_net_event_release(&ev);
    }
    while (!atomic_load(&s.done)) { /* the drain ran out before the sender ended (it ends at t_end) */
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    if (sent < 0) {
        sent = 0;
        for (int i = 0; i < n; i++) sent += c[i].hb_sent + c[i].pl_sent;
    }
    atomic_store(&s.done, 2);
    pthread_join(th, NULL);

    int64_t hb_sent = 0, pl_sent = 0, refused = 0, not_ready = 0, reconnects = 0, hb_got = 0, pl_got = 0, idle = 0,
            order = 0, damaged = 0;
    int mismatched = 0, over = 0, worst = -1;
    double max_gap = 0, sum_gap = 0;
    for (int i = 0; i < n; i++) {
        hb_sent += c[i].hb_sent, pl_sent += c[i].pl_sent;
        refused += c[i].refused, not_ready += c[i].not_ready, reconnects += c[i].reconnects;
        hb_got += rv[i].hb, pl_got += rv[i].pl, idle += rv[i].idle_hb;
        order += rv[i].order_errors, damaged += rv[i].damaged;
        if (rv[i].hb != c[i].hb_sent || rv[i].pl != c[i].pl_sent) mismatched++;
        sum_gap += rv[i].max_gap;
        if (rv[i].max_gap > max_gap) max_gap = rv[i].max_gap, worst = i;
        if (rv[i].max_gap > o->timeout_s) over++;
    }
    dlc_net_counters cs, ccl;
    if (dlc_net_get_counters(srv, -1, &cs) != DLC_OK || dlc_net_get_counters(cli, -1, &ccl) != DLC_OK)
        die("load: dlc_net_get_counters: %s", dlc_last_error());
    printf("  sent (successful dlc_net_send): %lld HEARTBEAT + %lld CONTRIBUTION; refused for back-pressure %lld, "
           "peer not ready %lld\n",
           (long long)hb_sent, (long long)pl_sent, (long long)refused, (long long)not_ready);
    printf("  received by the server's poll: %lld HEARTBEAT + %lld CONTRIBUTION (%lld out of order, %lld damaged, "
           "%lld stray), plus %lld idle-link heartbeats of the transport (%lld before any frame of ours) and %lld "
           "other frames\n",
           (long long)hb_got, (long long)pl_got, (long long)order, (long long)damaged, (long long)stray,
           (long long)(idle + unattributed), (long long)unattributed, (long long)other);
    printf("  counters: client frames_out heartbeat %llu contribution %llu, reconnects %llu; server frames_in "
           "heartbeat %llu contribution %llu, timeouts %llu, protocol errors %llu\n",
           (unsigned long long)ccl.frames_out[DLC_FRAME_HEARTBEAT],
           (unsigned long long)ccl.frames_out[DLC_FRAME_CONTRIBUTION], (unsigned long long)ccl.reconnects,
           (unsigned long long)cs.frames_in[DLC_FRAME_HEARTBEAT], (unsigned long long)cs.frames_in[DLC_FRAME_CONTRIBUTION],
           (unsigned long long)cs.timeouts, (unsigned long long)cs.protocol_errors);
    printf("  clients whose counts differ from the server's: %d of %d; lost: %lld on the server, %lld on the client; "
           "refused %lld; READY again %lld (server) %lld (client); frames the client net received from the server "
           "(its idle-link heartbeats) %lld\n",
           mismatched, n, (long long)slost, (long long)s.lost, (long long)srefused, (long long)sready_later,
           (long long)reconnects, (long long)s.frames);
    printf("  largest gap between consecutive frames of one client at the server: %.3f s (client %d; mean of the "
           "per-client maxima %.3f s) vs the deadline (timeout_s) %.3f s, heartbeat interval %.3f s; %d clients over "
           "the deadline; longest server poll wait while sending %.3f s\n",
           max_gap, worst, sum_gap / n, o->timeout_s, o->heartbeat_s, over, worst_poll);
    int pass = mismatched == 0 && hb_got == hb_sent && pl_got == pl_sent && refused == 0 && not_ready == 0 &&
               order == 0 && damaged == 0 && stray == 0 && slost == 0 && s.lost == 0 && srefused == 0 &&
               sready_later == 0 && reconnects == 0 && over == 0 &&
               ccl.frames_out[DLC_FRAME_CONTRIBUTION] == cs.frames_in[DLC_FRAME_CONTRIBUTION];
    printf("load: %s: %lld frames sent, %lld received; max gap %.3f s vs deadline %.3f s; %lld peers lost\n",
           pass ? "PASS" : "FAIL", (long long)(hb_sent + pl_sent), (long long)(hb_got + pl_got), max_gap,
           o->timeout_s, (long long)(slost + s.lost));
    dlc_net_free(cli);
    dlc_net_free(srv);
    free(cmap.v);
    free(smap.v);
    free(rv);
    free(c);
    free(payload);
    return pass;
}

static double arg_num(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) die("%s needs a value", argv[*i]);
    char *end;
    double v = strtod(argv[*i + 1], &end);
    if (*end || !(v > 0)) die("%s %s: expected a positive number", argv[*i], argv[*i + 1]);
    return v;
}

int main(int argc, char **argv) {
    int load = 0, rounds = 21, trips = 2000, kind = -1;
    const char *only = NULL;
    double rate_mb = 50, latency_ms = 20;
    load_opts o = {256, 30, 0.25, 1.0, 1.0, (size_t)1 << 20};
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--load")) {
            load = 1;
            continue;
        }
        if (!strcmp(a, "--kind") && i + 1 < argc) {
            const char *name = argv[++i];
            for (kind = 0; kind < RT_KINDS && strcmp(name, rt_names[kind]); kind++) {}
            if (kind == RT_KINDS)
                die("--kind %s: expected ours, blocking, spinning, inline, 1-thread, inline-2, 1-epoll or 1-libev",
                    name);
            only = "roundtrip";
            continue;
        }
        if (!strcmp(a, "--only") && i + 1 < argc) {
            only = argv[++i];
            if (strcmp(only, "throughput") && strcmp(only, "roundtrip") && strcmp(only, "wan"))
                die("--only %s: expected throughput, roundtrip or wan", only);
            continue;
        }
        double v = arg_num(argc, argv, &i);
        i++;
        if (!strcmp(a, "--rounds")) rounds = (int)v;
        else if (!strcmp(a, "--trips")) trips = (int)v;
        else if (!strcmp(a, "--rate")) rate_mb = v;
        else if (!strcmp(a, "--latency")) latency_ms = v;
        else if (!strcmp(a, "--clients")) o.clients = (int)v;
        else if (!strcmp(a, "--seconds")) o.seconds = v;
        else if (!strcmp(a, "--heartbeat")) o.heartbeat_s = v;
        else if (!strcmp(a, "--timeout")) o.timeout_s = v;
        else if (!strcmp(a, "--payload-every")) o.payload_s = v;
        else if (!strcmp(a, "--payload-mib")) o.payload_len = ((size_t)(v * 1048576) + 3) / 4 * 4;
        else die("unknown option %s (see the comment at the top of scripts/bench/transport.c)", a);
    }
    if (rounds < 1 || trips < 10 || o.clients < 1) die("--rounds >= 1, --trips >= 10, --clients >= 1");
    print_machine();
    if (load) return run_load(&o) ? 0 : 1;
    int ok = 1;
    if (!only || !strcmp(only, "throughput")) ok &= bench_throughput(rounds);
    if (!only || !strcmp(only, "roundtrip")) ok &= bench_roundtrip(trips, kind);
    if (!only || !strcmp(only, "wan")) ok &= bench_wan(rate_mb, latency_ms);
    printf("%s\n", ok ? "every goal met" : "some goal MISSED (above)");
    return 0;
}
