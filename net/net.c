/* net.c - the transport (net.h, docs/transport.md): one I/O thread running a libevent
 * loop; connections as explicit state machines; framing through core/proto.c; bounded
 * queues between the I/O thread and everyone else.
 *
 * Threads and ownership:
 *   - The I/O thread owns every conn's libevent objects and input buffers.
 *   - net->lock guards the peer table, each conn's state, queued bytes and flags read by
 *     other threads, the command list and the event list.  A conn is freed only by the
 *     I/O thread with the lock held, so a thread holding the lock may read it.
 *   - A frame's payload passed to dlc_net_send belongs to the net until its free
 *     function runs (on the I/O thread, when libevent has written the bytes or the conn
 *     is gone); it is handed to the socket by reference (evbuffer_add_reference).
 *   - A received frame is read once, from the socket buffer into one malloc'd buffer of
 *     the size its checked prefix declared; that buffer becomes the event's.
 */
#define _GNU_SOURCE /* struct addrinfo flags, strerror_r is not needed */
#include "diloco/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Most commands waiting for the I/O thread (sends beyond it are refused: back-pressure
 * on a thread that outruns the loop). */
#define NET_COMMANDS_MAX 65536
/* Longest secret (a secret file longer than this is refused). */
#define NET_SECRET_MAX 4096
/* Largest peer id: ids are never reused within a net, up to this many connections. */
#define NET_PEERS_MAX (1 << 22)
/* libevent token-bucket tick of the WAN emulation. */
#define NET_TICK_MS 5

static const char *const state_names[] = {"connecting", "authenticating", "ready", "draining", "closed"};
_Static_assert(sizeof state_names / sizeof state_names[0] == DLC_CONN_STATE_COUNT, "one name per conn state");

const char *dlc_conn_state_name(dlc_conn_state s) {
    return (unsigned)s < DLC_CONN_STATE_COUNT ? state_names[s] : NULL;
}

typedef struct outframe {
    struct outframe *next;
    struct dlc_net *net;
    int peer;
    unsigned gen;            /* the conn's generation it was queued on (reconnects) */
    dlc_frame_type type;
    double due;              /* monotonic seconds when it may reach the socket */
    size_t hlen;             /* prefix + header bytes in hdr */
    size_t total;            /* hlen + len: what it counts in the peer's queued bytes */
    const void *payload;
    size_t len;
    void (*free_payload)(const void *, void *);
    void *arg;
    uint8_t hdr[];
} outframe;

typedef enum cmd_kind { CMD_SEND, CMD_CLOSE, CMD_SHAPE, CMD_CONNECT, CMD_STOP } cmd_kind;

typedef struct cmd {
    struct cmd *next;
    cmd_kind kind;
    int peer;
    outframe *frame;
    double rate, latency;
} cmd;

typedef struct evnode {
    struct evnode *next;
    size_t bytes; /* received frame bytes it holds (counted against in_max) */
    dlc_net_event ev;
} evnode;

typedef struct conn {
    struct dlc_net *net;
    struct conn *grave;      /* retired: freed by reap() on the I/O thread */
    unsigned gen;            /* bumped at each connection attempt */
    int id, client, learner;
    dlc_conn_state state;
    struct bufferevent *bev;
    struct event *timer;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char name[80];           /* "127.0.0.1:5555" */
    char host[256];          /* for TLS verification (client) */
    int step;                /* handshake step within AUTHENTICATING (see on_handshake) */
    uint8_t nc[DLC_PROTO_NONCE], ns[DLC_PROTO_NONCE];
    double deadline;         /* AUTHENTICATING: READY by then; CONNECTING: next attempt; DRAINING: close by then */
    double last_rx, last_tx;
    uint8_t *inbuf;          /* the frame being received: inlen bytes, inhave in */
    size_t inlen, inhave;
    outframe *delay_head, *delay_tail; /* held for the emulated latency */
    size_t queued;           /* under net->lock */
    int refused;             /* a send was refused since the last DRAINED */
    int app_closed;          /* dlc_net_close: no reconnect */
    int ready_once;
    int failures;            /* client: connection attempts failed in a row */
    int was_ready;           /* it reached READY (LOST rather than REFUSED) */
    int end_code;            /* why it is closing */
    char end_text[DLC_PROTO_TEXT_MAX + 128];
    double rate, latency;
    struct ev_token_bucket_cfg *bucket;
    _Atomic uint64_t bytes_out[DLC_FRAME_TYPE_COUNT], frames_out[DLC_FRAME_TYPE_COUNT];
    _Atomic uint64_t bytes_in[DLC_FRAME_TYPE_COUNT], frames_in[DLC_FRAME_TYPE_COUNT];
} conn;

struct dlc_net {
    dlc_net_config cfg;
    uint8_t secret[NET_SECRET_MAX];
    size_t secret_len;
    dlc_hello hello;
    int has_hello;
    dlc_proto_layout layout;
    int64_t *numel;
    int has_layout;
    SSL_CTX *ssl;

    struct event_base *base;
    struct event *wake;
    pthread_t thread;
    int thread_started;
    struct evconnlistener **listeners;
    int nlisteners;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    conn *grave;             /* conns closed for good, freed at the next reap() */
    conn **peers;            /* by id */
    int npeers;              /* ids handed out */
    cmd *cmd_head, *cmd_tail;
    int ncmds;
    evnode *ev_head, *ev_tail;
    size_t ev_bytes;
    int paused;              /* reading stopped: the event queue is over in_max */
    int stopping;
    double stop_deadline;
    double shape_rate, shape_latency; /* for peers to come (dlc_net_shape(-1)) */
    uint64_t rng;
    /* totals (under lock): connection-level counters, and bytes of conns gone */
    dlc_net_counters total;
};

/* ---- small things ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static struct timeval tv_of(double s) {
    if (s < 0) s = 0;
    struct timeval tv = {(time_t)s, (suseconds_t)((s - floor(s)) * 1e6)};
    return tv;
}

static double rng_unit(dlc_net *net) { /* xorshift64*, under lock or on the I/O thread */
    net->rng ^= net->rng >> 12, net->rng ^= net->rng << 25, net->rng ^= net->rng >> 27;
    return (double)((net->rng * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

static void wake(dlc_net *net) { event_active(net->wake, EV_READ, 0); }

/* Parses "HOST:PORT" or "[HOST]:PORT"; host and port into the buffers. */
static dlc_status split_addr(const char *addr, char *host, size_t hcap, char *port, size_t pcap) {
    const char *hint = "expected HOST:PORT, e.g. 127.0.0.1:7070 or [::1]:7070";
    if (!addr) return dlc_error(DLC_ERR_ARG, "address NULL: %s", hint);
    const char *colon, *h = addr, *hend;
    if (addr[0] == '[') {
        hend = strchr(addr, ']');
        if (!hend || hend[1] != ':') return dlc_error(DLC_ERR_ARG, "address \"%s\": %s", addr, hint);
        h = addr + 1, colon = hend + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon || strchr(addr, ':') != colon) return dlc_error(DLC_ERR_ARG, "address \"%s\": %s", addr, hint);
        hend = colon;
    }
    size_t hl = (size_t)(hend - h), pl = strlen(colon + 1);
    if (hl == 0 || hl >= hcap || pl == 0 || pl > 5 || pl >= pcap || strspn(colon + 1, "0123456789") != pl ||
        atoi(colon + 1) > 65535)
        return dlc_error(DLC_ERR_ARG, "address \"%s\": %s (port 0..65535)", addr, hint);
    memcpy(host, h, hl), host[hl] = '\0';
    memcpy(port, colon + 1, pl + 1);
    return DLC_OK;
}

static dlc_status resolve(const char *addr, int numeric, struct sockaddr_storage *ss, socklen_t *len, char *host,
                          size_t hcap) {
    char port[8];
    dlc_status st = split_addr(addr, host, hcap, port, sizeof port);
    if (st < 0) return st;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (numeric ? AI_NUMERICHOST | AI_PASSIVE : 0);
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || !res)
        return dlc_error(DLC_ERR_ARG, "address \"%s\": %s%s", addr, gai_strerror(rc),
                         numeric ? " (listen takes a numeric host: 0.0.0.0, 127.0.0.1, [::])" : "");
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return DLC_OK;
}

static void addr_name(const struct sockaddr *sa, char *out, size_t cap) {
    char h[64] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const void *)sa;
        inet_ntop(AF_INET, &s->sin_addr, h, sizeof h), port = ntohs(s->sin_port);
        snprintf(out, cap, "%s:%d", h, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const void *)sa;
        inet_ntop(AF_INET6, &s->sin6_addr, h, sizeof h), port = ntohs(s->sin6_port);
        snprintf(out, cap, "[%s]:%d", h, port);
    } else {
        snprintf(out, cap, "?");
    }
}

/* ---- the event queue (I/O thread -> poll) ---- */

static evnode *ev_new(dlc_net_event_kind kind, int peer) {
    evnode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->ev.kind = kind, n->ev.peer = peer;
    return n;
}

/* Takes ownership of n. */
static void ev_post(dlc_net *net, evnode *n) {
    if (!n) return;
    pthread_mutex_lock(&net->lock);
    if (net->ev_tail) net->ev_tail->next = n;
    else net->ev_head = n;
    net->ev_tail = n;
    net->ev_bytes += n->bytes;
    pthread_cond_broadcast(&net->cond);
    pthread_mutex_unlock(&net->lock);
}

static void ev_post_simple(dlc_net *net, dlc_net_event_kind kind, int peer, int code, const char *text) {
    evnode *n = ev_new(kind, peer);
    if (!n) return;
    n->ev.code = code;
    snprintf(n->ev.text, sizeof n->ev.text, "%s", text ? text : "");
    ev_post(net, n);
}

/* ---- connection state ---- */

/* The legal transitions (docs/transport.md has the diagram). */
static bool legal(dlc_conn_state from, dlc_conn_state to) {
    switch (from) {
    case DLC_CONN_CONNECTING: return to == DLC_CONN_AUTHENTICATING || to == DLC_CONN_CLOSED;
    case DLC_CONN_AUTHENTICATING: return to == DLC_CONN_READY || to == DLC_CONN_DRAINING || to == DLC_CONN_CLOSED;
    case DLC_CONN_READY: return to == DLC_CONN_DRAINING || to == DLC_CONN_CLOSED;
    case DLC_CONN_DRAINING: return to == DLC_CONN_CLOSED;
    case DLC_CONN_CLOSED: return to == DLC_CONN_CONNECTING; /* a client's reconnect */
    default: return false;
    }
}

static void set_state(conn *c, dlc_conn_state to) {
    DLC_ASSERT((unsigned)to < DLC_CONN_STATE_COUNT);
    DLC_ASSERT(legal(c->state, to));
    pthread_mutex_lock(&c->net->lock);
    c->state = to;
    pthread_mutex_unlock(&c->net->lock);
}

static void conn_arm(conn *c);
static void conn_close_now(conn *c);
static void conn_fail(conn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void on_read(struct bufferevent *bev, void *arg);

static double frame_limit(const conn *c) {
    /* tight until the peer has proved it knows the secret: the server after the
     * client's proof (step 2), the client after the server's challenge (step 1) */
    return c->state == DLC_CONN_READY || (c->state == DLC_CONN_AUTHENTICATING && c->step >= (c->client ? 1 : 2))
               ? (double)c->net->cfg.frame_max
               : (double)DLC_PROTO_FRAME_MAX_UNAUTH;
}

/* ---- output ---- */

static void outframe_free(outframe *f) {
    if (f->free_payload) f->free_payload(f->payload, f->arg);
    free(f);
}

/* The peer's queued bytes drop by n; DRAINED once below out_max / 2 after a refusal. */
static void unqueue(dlc_net *net, int peer, unsigned gen, size_t n) {
    int drained = 0;
    pthread_mutex_lock(&net->lock);
    conn *c = peer >= 0 && peer < net->npeers ? net->peers[peer] : NULL;
    if (c && c->gen == gen) {
        c->queued = c->queued > n ? c->queued - n : 0;
        if (c->refused && c->queued < net->cfg.out_max / 2) c->refused = 0, drained = 1;
    }
    pthread_mutex_unlock(&net->lock);
    if (drained) ev_post_simple(net, DLC_NET_DRAINED, peer, 0, NULL);
}

static void payload_written(const void *data, size_t len, void *arg) {
    (void)data, (void)len;
    outframe *f = arg;
    dlc_net *net = f->net;
    int peer = f->peer;
    unsigned gen = f->gen;
    size_t total = f->total;
    if (!f->free_payload) {
        evnode *n = ev_new(DLC_NET_SENT, peer);
        if (n) n->ev.arg = f->arg, ev_post(net, n);
    }
    outframe_free(f);
    unqueue(net, peer, gen, total);
}

/* Hands f to the socket buffer (header copied, payload by reference). */
static void out_write(conn *c, outframe *f) {
    struct evbuffer *out = bufferevent_get_output(c->bev);
    atomic_fetch_add_explicit(&c->bytes_out[f->type], f->total, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->frames_out[f->type], 1, memory_order_relaxed);
    c->last_tx = now_s();
    if (evbuffer_add(out, f->hdr, f->hlen) != 0) {
        outframe_free(f);
        conn_fail(c, DLC_PERR_INTERNAL, "out of memory queuing a frame");
        return;
    }
    if (f->len == 0) {
        payload_written(NULL, 0, f);
        return;
    }
    if (evbuffer_add_reference(out, f->payload, f->len, payload_written, f) != 0) {
        payload_written(NULL, 0, f);
        conn_fail(c, DLC_PERR_INTERNAL, "out of memory queuing a payload");
    }
}

/* Queues f behind any held frames; due now goes straight to the socket buffer. */
static void out_queue(conn *c, outframe *f) {
    f->due = now_s() + c->latency;
    if (!c->delay_head && c->latency <= 0) {
        out_write(c, f);
        return;
    }
    f->next = NULL;
    if (c->delay_tail) c->delay_tail->next = f;
    else c->delay_head = f;
    c->delay_tail = f;
}

static void out_release(conn *c) {
    double t = now_s();
    while (c->delay_head && c->delay_head->due <= t + 1e-4 && c->state != DLC_CONN_CLOSED) {
        outframe *f = c->delay_head;
        c->delay_head = f->next;
        if (!c->delay_head) c->delay_tail = NULL;
        out_write(c, f);
    }
}

/* Encodes a frame of the transport's own (auth, hello, heartbeat, error) and queues it. */
static void send_own(conn *c, dlc_frame *f) {
    uint8_t hdr[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX];
    int64_t n = dlc_proto_encode(f, NULL, hdr, sizeof hdr);
    if (n < 0) {
        conn_fail(c, DLC_PERR_INTERNAL, "cannot encode a %s: %s", dlc_frame_type_name(f->type), dlc_last_error());
        return;
    }
    outframe *o = calloc(1, sizeof *o + (size_t)n);
    if (!o) return;
    o->net = c->net, o->peer = c->id, o->gen = c->gen, o->type = f->type, o->hlen = (size_t)n, o->total = (size_t)n;
    memcpy(o->hdr, hdr, (size_t)n);
    pthread_mutex_lock(&c->net->lock);
    c->queued += o->total;
    pthread_mutex_unlock(&c->net->lock);
    out_queue(c, o);
    if (c->delay_head) conn_arm(c);
}

static void send_error(conn *c, int code, const char *text) {
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_ERROR);
    f.code = code;
    snprintf(f.text, sizeof f.text, "%s", text);
    send_own(c, &f);
}

/* ---- closing ---- */

static void count_end(conn *c) {
    dlc_net *net = c->net;
    pthread_mutex_lock(&net->lock);
    if (c->end_code == DLC_PERR_AUTH && !c->client) net->total.auth_failures++;
    else if (c->end_code == DLC_PERR_TIMEOUT) net->total.timeouts++;
    else if (c->end_code == DLC_PERR_OVERLOADED) net->total.overloaded++;
    else if (c->end_code != DLC_PERR_NONE && c->end_code != DLC_PERR_SHUTDOWN) net->total.protocol_errors++;
    pthread_mutex_unlock(&net->lock);
}

/* Sends ERROR(code, text) if the connection is up, then drains and closes: the peer
 * is told why, and the rest of the server goes on. */
static void conn_fail(conn *c, int code, const char *fmt, ...) {
    if (c->state == DLC_CONN_DRAINING || c->state == DLC_CONN_CLOSED) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->end_text, sizeof c->end_text, fmt, ap);
    va_end(ap);
    c->end_code = code;
    count_end(c);
    if (c->state == DLC_CONN_CONNECTING || !c->bev) {
        conn_close_now(c);
        return;
    }
    send_error(c, code, c->end_text);
    out_release(c);
    set_state(c, DLC_CONN_DRAINING);
    bufferevent_disable(c->bev, EV_READ);
    c->deadline = now_s() + c->net->cfg.drain_timeout_s;
    if (!c->delay_head && evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) conn_close_now(c);
    else conn_arm(c);
}

/* Starts a graceful close: stop reading, flush, close. */
static void conn_drain(conn *c, int code, const char *text) {
    if (c->state == DLC_CONN_DRAINING || c->state == DLC_CONN_CLOSED) return;
    c->end_code = code;
    if (text != c->end_text) snprintf(c->end_text, sizeof c->end_text, "%s", text);
    if (c->state == DLC_CONN_CONNECTING || !c->bev) {
        conn_close_now(c);
        return;
    }
    set_state(c, DLC_CONN_DRAINING);
    bufferevent_disable(c->bev, EV_READ);
    c->deadline = now_s() + c->net->cfg.drain_timeout_s;
    out_release(c);
    if (!c->delay_head && evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) conn_close_now(c);
    else conn_arm(c);
}

/* Takes c out of the peer table for good; its memory waits in the graveyard until
 * reap(), so a callback still running on it (on_read after a frame closed it) reads
 * valid memory. */
static void conn_retire(conn *c) {
    dlc_net *net = c->net;
    if (c->timer) event_del(c->timer);
    pthread_mutex_lock(&net->lock);
    net->peers[c->id] = NULL;
    for (int t = 0; t < DLC_FRAME_TYPE_COUNT; t++) {
        net->total.bytes_out[t] += c->bytes_out[t], net->total.frames_out[t] += c->frames_out[t];
        net->total.bytes_in[t] += c->bytes_in[t], net->total.frames_in[t] += c->frames_in[t];
    }
    c->grave = net->grave;
    net->grave = c;
    pthread_mutex_unlock(&net->lock);
}

/* Frees the retired conns (the I/O thread, between callbacks; or dlc_net_free). */
static void reap(dlc_net *net) {
    pthread_mutex_lock(&net->lock);
    conn *c = net->grave;
    net->grave = NULL;
    pthread_mutex_unlock(&net->lock);
    while (c) {
        conn *next = c->grave;
        if (c->timer) event_free(c->timer);
        if (c->bucket) ev_token_bucket_cfg_free(c->bucket);
        free(c);
        c = next;
    }
}

static void start_connect(conn *c);

/* Closes the socket now; posts LOST or REFUSED; a client that may reconnect waits. */
static void conn_close_now(conn *c) {
    dlc_net *net = c->net;
    if (c->state == DLC_CONN_CLOSED) return;
    bool was_connecting = c->state == DLC_CONN_CONNECTING;
    set_state(c, DLC_CONN_CLOSED);
    if (c->bev) {
        bufferevent_free(c->bev); /* payloads still referenced are released by libevent */
        c->bev = NULL;
    }
    while (c->delay_head) {
        outframe *f = c->delay_head;
        c->delay_head = f->next;
        size_t total = f->total;
        outframe_free(f);
        unqueue(net, c->id, c->gen, total);
    }
    c->delay_tail = NULL;
    free(c->inbuf);
    c->inbuf = NULL, c->inlen = c->inhave = 0;
    pthread_mutex_lock(&net->lock);
    c->queued = 0;
    pthread_mutex_unlock(&net->lock);
    if (!was_connecting || c->client)
        ev_post_simple(net, c->was_ready || c->client ? DLC_NET_LOST : DLC_NET_REFUSED, c->id, c->end_code,
                       c->end_text[0] ? c->end_text : "connection closed");
    bool permanent = c->end_code == DLC_PERR_AUTH || c->end_code == DLC_PERR_VERSION ||
                     c->end_code == DLC_PERR_MISMATCH || c->end_code == DLC_PERR_SHUTDOWN;
    if (c->client && !c->app_closed && !permanent && !net->stopping && net->cfg.reconnect_max_s > 0) {
        c->failures++;
        double d = net->cfg.reconnect_min_s * pow(2.0, c->failures - 1);
        if (d > net->cfg.reconnect_max_s) d = net->cfg.reconnect_max_s;
        d *= 0.5 + rng_unit(net); /* +-50% jitter: a cluster that lost its syncer does not return in lockstep */
        c->deadline = now_s() + d;
        c->was_ready = 0;
        set_state(c, DLC_CONN_CONNECTING);
        conn_arm(c);
        return;
    }
    conn_retire(c);
}

/* ---- handshake ---- */

static void become_ready(conn *c, const dlc_hello *h) {
    dlc_net *net = c->net;
    set_state(c, DLC_CONN_READY);
    c->was_ready = 1;
    if (c->client) {
        pthread_mutex_lock(&net->lock);
        if (c->ready_once) net->total.reconnects++;
        pthread_mutex_unlock(&net->lock);
        c->failures = 0;
    }
    c->ready_once = 1;
    evnode *n = ev_new(DLC_NET_READY, c->id);
    if (n) {
        if (h) n->ev.frame.hello = *h;
        else n->ev.frame.hello.learner = -1;
        n->ev.frame.type = c->client ? DLC_FRAME_WELCOME : DLC_FRAME_HELLO;
        snprintf(n->ev.text, sizeof n->ev.text, "%s", c->name);
        ev_post(net, n);
    }
}

static bool learner_taken(dlc_net *net, int id, conn *self) {
    for (int i = 0; i < net->npeers; i++) {
        conn *o = net->peers[i];
        if (o && o != self && !o->client && o->state == DLC_CONN_READY && o->learner == id) return true;
    }
    return false;
}

/* Server steps: 0 wait AUTH, 1 wait AUTH_PROOF, 2 wait HELLO.  Client steps: 0 wait
 * AUTH_CHALLENGE, 1 wait WELCOME. */
static void on_handshake(conn *c, dlc_frame *f) {
    dlc_net *net = c->net;
    bool auth = !net->cfg.insecure;
    dlc_frame out;
    if (!c->client) {
        dlc_frame_type want = c->step == 0 ? DLC_FRAME_AUTH : c->step == 1 ? DLC_FRAME_AUTH_PROOF : DLC_FRAME_HELLO;
        if (f->type != want) {
            conn_fail(c, DLC_PERR_UNEXPECTED, "%s before authentication: expected %s", dlc_frame_type_name(f->type),
                      dlc_frame_type_name(want));
            return;
        }
        if (c->step == 0) {
            memcpy(c->nc, f->nonce, DLC_PROTO_NONCE);
            if (dlc_auth_nonce(c->ns, DLC_PROTO_NONCE) < 0) {
                conn_fail(c, DLC_PERR_INTERNAL, "%s", dlc_last_error());
                return;
            }
            dlc_frame_init(&out, DLC_FRAME_AUTH_CHALLENGE);
            memcpy(out.nonce, c->ns, DLC_PROTO_NONCE);
            dlc_auth_proof(net->secret, net->secret_len, 1, c->nc, c->ns, out.mac);
            send_own(c, &out);
            c->step = 1;
            return;
        }
        if (c->step == 1) {
            uint8_t want_mac[DLC_PROTO_MAC];
            dlc_auth_proof(net->secret, net->secret_len, 0, c->nc, c->ns, want_mac);
            if (auth && !dlc_auth_equal(want_mac, f->mac)) {
                conn_fail(c, DLC_PERR_AUTH, "authentication failed: the proof does not match this run's secret");
                return;
            }
            if (!net->has_hello) {
                become_ready(c, NULL);
                return;
            }
            c->step = 2;
            return;
        }
        dlc_hello w;
        int why;
        if (dlc_proto_negotiate(&net->hello, &f->hello, &w, &why) < 0) {
            conn_fail(c, why, "%s", dlc_last_error());
            return;
        }
        pthread_mutex_lock(&net->lock);
        int id = f->hello.learner;
        bool taken = id >= 0 && learner_taken(net, id, c);
        if (id < 0)
            for (id = 0; learner_taken(net, id, c); id++) {}
        c->learner = id;
        pthread_mutex_unlock(&net->lock);
        if (taken) {
            conn_fail(c, DLC_PERR_MISMATCH, "learner %d is already connected", id);
            return;
        }
        w.learner = id;
        dlc_frame_init(&out, DLC_FRAME_WELCOME);
        out.hello = w;
        send_own(c, &out);
        dlc_hello theirs = f->hello;
        theirs.learner = id;
        become_ready(c, &theirs);
        return;
    }
    dlc_frame_type want = c->step == 0 ? DLC_FRAME_AUTH_CHALLENGE : DLC_FRAME_WELCOME;
    if (f->type != want) {
        conn_fail(c, DLC_PERR_UNEXPECTED, "%s during the handshake: expected %s", dlc_frame_type_name(f->type),
                  dlc_frame_type_name(want));
        return;
    }
    if (c->step == 0) {
        uint8_t want_mac[DLC_PROTO_MAC];
        memcpy(c->ns, f->nonce, DLC_PROTO_NONCE);
        dlc_auth_proof(net->secret, net->secret_len, 1, c->nc, c->ns, want_mac);
        if (auth && !dlc_auth_equal(want_mac, f->mac)) {
            conn_fail(c, DLC_PERR_AUTH, "authentication failed: the server does not know this run's secret");
            return;
        }
        dlc_frame_init(&out, DLC_FRAME_AUTH_PROOF);
        dlc_auth_proof(net->secret, net->secret_len, 0, c->nc, c->ns, out.mac);
        send_own(c, &out);
        if (!net->has_hello) {
            become_ready(c, NULL);
            return;
        }
        dlc_frame_init(&out, DLC_FRAME_HELLO);
        out.hello = net->hello;
        send_own(c, &out);
        c->step = 1;
        return;
    }
    const dlc_hello *w = &f->hello, *ours = &net->hello;
    if (w->proto_min < ours->proto_min || w->proto_max > ours->proto_max || strcmp(w->run, ours->run) != 0 ||
        w->model_hash != ours->model_hash || w->plan_hash != ours->plan_hash || w->block != ours->block) {
        conn_fail(c, DLC_PERR_MISMATCH, "welcome does not match this hello (version %d, run \"%s\")", w->proto_max,
                  w->run);
        return;
    }
    c->learner = w->learner;
    become_ready(c, w);
}

/* ---- input ---- */

static void on_frame(conn *c, uint8_t *buf, size_t len) {
    dlc_net *net = c->net;
    evnode *n = ev_new(DLC_NET_FRAME, c->id);
    if (!n) {
        free(buf);
        conn_fail(c, DLC_PERR_INTERNAL, "out of memory receiving a frame");
        return;
    }
    int why;
    dlc_frame *f = &n->ev.frame;
    if (dlc_proto_decode(buf, len, net->has_layout ? &net->layout : NULL, f, &why) < 0) {
        free(buf), free(n);
        conn_fail(c, why, "%s", dlc_last_error());
        return;
    }
    atomic_fetch_add_explicit(&c->bytes_in[f->type], len, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->frames_in[f->type], 1, memory_order_relaxed);
    c->last_rx = now_s();
    if (f->type == DLC_FRAME_ERROR) {
        c->end_code = f->code;
        snprintf(c->end_text, sizeof c->end_text, "the peer reported %s: %.512s",
                 dlc_proto_errcode_name(f->code) ? dlc_proto_errcode_name(f->code) : "an error", f->text);
        free(buf), free(n);
        conn_drain(c, c->end_code, c->end_text);
        return;
    }
    if (c->state == DLC_CONN_AUTHENTICATING) {
        on_handshake(c, f);
        free(buf), free(n);
        return;
    }
    if (f->type <= DLC_FRAME_WELCOME) {
        conn_fail(c, DLC_PERR_UNEXPECTED, "%s after the handshake", dlc_frame_type_name(f->type));
        free(buf), free(n);
        return;
    }
    n->ev.owned_ = buf;
    n->bytes = len;
    ev_post(net, n);
}

static void pause_reading(dlc_net *net, int pause) {
    for (int i = 0; i < net->npeers; i++) {
        conn *c = net->peers[i];
        if (!c || !c->bev || c->state == DLC_CONN_DRAINING || c->state == DLC_CONN_CLOSED) continue;
        if (pause) bufferevent_disable(c->bev, EV_READ);
        else bufferevent_enable(c->bev, EV_READ);
    }
}

static bool over_in_max(dlc_net *net) {
    pthread_mutex_lock(&net->lock);
    bool over = net->ev_bytes > net->cfg.in_max;
    if (over && !net->paused) net->paused = 1;
    pthread_mutex_unlock(&net->lock);
    return over;
}

static void on_read(struct bufferevent *bev, void *arg) {
    conn *c = arg;
    dlc_net *net = c->net;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (c->state == DLC_CONN_AUTHENTICATING || c->state == DLC_CONN_READY) {
        if (!c->inbuf) {
            if (over_in_max(net)) { /* the app is behind: stop reading until it polls */
                pause_reading(net, 1);
                return;
            }
            uint8_t prefix[DLC_PROTO_PREFIX];
            ev_ssize_t have = evbuffer_copyout(in, prefix, sizeof prefix);
            if (have <= 0) return;
            size_t need;
            dlc_frame_type type;
            int why;
            if (dlc_proto_peek(prefix, (size_t)have, (size_t)frame_limit(c), &need, &type, &why) < 0) {
                conn_fail(c, why, "%s%s", dlc_last_error(),
                          c->state == DLC_CONN_AUTHENTICATING ? " (before authentication)" : "");
                return;
            }
            if (need == 0) return;
            c->inbuf = malloc(need);
            if (!c->inbuf) {
                conn_fail(c, DLC_PERR_INTERNAL, "out of memory for a frame of %zu bytes", need);
                return;
            }
            c->inlen = need, c->inhave = 0;
        }
        size_t avail = evbuffer_get_length(in), take = c->inlen - c->inhave;
        if (avail == 0) return;
        if (take > avail) take = avail;
        evbuffer_remove(in, c->inbuf + c->inhave, take);
        c->inhave += take;
        if (c->inhave < c->inlen) return;
        uint8_t *buf = c->inbuf;
        size_t len = c->inlen;
        c->inbuf = NULL, c->inlen = c->inhave = 0;
        on_frame(c, buf, len); /* may close c: the loop condition reads c->state, and a
                                * closed conn is freed only when not reconnecting... */
        if (c->state == DLC_CONN_CLOSED || c->state == DLC_CONN_CONNECTING) return;
    }
}

static void on_write(struct bufferevent *bev, void *arg) {
    conn *c = arg;
    (void)bev;
    if (c->state == DLC_CONN_DRAINING && !c->delay_head) conn_close_now(c);
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
    conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        /* TLS reports CONNECTED once its handshake is done, also on accepted sockets,
         * which are authenticating already */
        if (c->state != DLC_CONN_CONNECTING) return;
        int fd = bufferevent_getfd(bev), one = 1;
        if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        set_state(c, DLC_CONN_AUTHENTICATING);
        c->step = 0;
        c->deadline = now_s() + c->net->cfg.auth_timeout_s;
        c->last_rx = c->last_tx = now_s();
        dlc_frame f;
        dlc_frame_init(&f, DLC_FRAME_AUTH);
        if (dlc_auth_nonce(c->nc, DLC_PROTO_NONCE) < 0) {
            conn_fail(c, DLC_PERR_INTERNAL, "%s", dlc_last_error());
            return;
        }
        memcpy(f.nonce, c->nc, DLC_PROTO_NONCE);
        send_own(c, &f);
        conn_arm(c);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        if (c->state == DLC_CONN_CLOSED) return;
        if (!c->end_code || c->state != DLC_CONN_DRAINING) {
            unsigned long ssl_err = c->net->ssl ? bufferevent_get_openssl_error(bev) : 0;
            int err = EVUTIL_SOCKET_ERROR();
            if (ssl_err) {
                char buf[160];
                ERR_error_string_n(ssl_err, buf, sizeof buf);
                c->end_code = DLC_PERR_AUTH;
                snprintf(c->end_text, sizeof c->end_text, "TLS: %s", buf);
            } else if (!c->end_code) {
                c->end_code = DLC_PERR_NONE;
                snprintf(c->end_text, sizeof c->end_text, "%s", (what & BEV_EVENT_EOF) ? "connection closed by the peer"
                                                                : evutil_socket_error_to_string(err));
            }
        }
        conn_close_now(c);
    }
}

/* ---- timers ---- */

static void on_timer(evutil_socket_t fd, short what, void *arg);

/* Arms c's one timer at its nearest deadline. */
static void conn_arm(conn *c) {
    dlc_net *net = c->net;
    double t = now_s(), next = INFINITY;
    switch (c->state) {
    case DLC_CONN_CONNECTING:
    case DLC_CONN_AUTHENTICATING:
    case DLC_CONN_DRAINING: next = c->deadline; break;
    case DLC_CONN_READY:
        if (net->cfg.timeout_s > 0) next = c->last_rx + net->cfg.timeout_s;
        if (net->cfg.heartbeat_s > 0 && c->last_tx + net->cfg.heartbeat_s < next) next = c->last_tx + net->cfg.heartbeat_s;
        break;
    default: return;
    }
    if (c->delay_head && c->delay_head->due < next) next = c->delay_head->due;
    if (c->state == DLC_CONN_AUTHENTICATING && c->delay_head && c->delay_head->due < next) next = c->delay_head->due;
    if (next == INFINITY) return;
    struct timeval tv = tv_of(next - t);
    evtimer_add(c->timer, &tv);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    conn *c = arg;
    dlc_net *net = c->net;
    double t = now_s();
    out_release(c);
    switch (c->state) {
    case DLC_CONN_CONNECTING:
        if (t >= c->deadline) {
            start_connect(c);
            return;
        }
        break;
    case DLC_CONN_AUTHENTICATING:
        if (t >= c->deadline) {
            conn_fail(c, DLC_PERR_TIMEOUT, "not authenticated within %.3g s (auth_timeout)", net->cfg.auth_timeout_s);
            return;
        }
        break;
    case DLC_CONN_READY:
        if (net->cfg.timeout_s > 0 && t - c->last_rx >= net->cfg.timeout_s) {
            conn_fail(c, DLC_PERR_TIMEOUT, "no frame for %.3g s (timeout)", t - c->last_rx);
            return;
        }
        if (net->cfg.heartbeat_s > 0 && t - c->last_tx >= net->cfg.heartbeat_s) {
            dlc_frame hb;
            dlc_frame_init(&hb, DLC_FRAME_HEARTBEAT);
            hb.msg.learner = c->learner >= 0 ? c->learner : 0;
            send_own(c, &hb);
            c->last_tx = t;
        }
        break;
    case DLC_CONN_DRAINING:
        if (t >= c->deadline) {
            conn_close_now(c);
            return;
        }
        break;
    default: return;
    }
    conn_arm(c);
}

/* ---- connections ---- */

static SSL *new_ssl(dlc_net *net, conn *c) {
    SSL *ssl = SSL_new(net->ssl);
    if (!ssl) return NULL;
    if (c->client && !net->cfg.tls_insecure) {
        X509_VERIFY_PARAM *p = SSL_get0_param(ssl);
        struct in6_addr a6;
        struct in_addr a4;
        if (inet_pton(AF_INET, c->host, &a4) == 1 || inet_pton(AF_INET6, c->host, &a6) == 1)
            X509_VERIFY_PARAM_set1_ip_asc(p, c->host);
        else
            X509_VERIFY_PARAM_set1_host(p, c->host, 0), SSL_set_tlsext_host_name(ssl, c->host);
    }
    return ssl;
}

static conn *conn_new(dlc_net *net, int client) {
    conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->net = net, c->client = client, c->learner = -1;
    c->timer = evtimer_new(net->base, on_timer, c);
    if (!c->timer) {
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&net->lock);
    if (net->npeers >= NET_PEERS_MAX) {
        pthread_mutex_unlock(&net->lock);
        event_free(c->timer);
        free(c);
        return NULL;
    }
    if ((net->npeers & (net->npeers - 1)) == 0 || net->npeers < 16) { /* grow at powers of two */
        size_t cap = net->npeers < 16 ? 16 : (size_t)net->npeers * 2;
        conn **p = realloc(net->peers, cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&net->lock);
            event_free(c->timer);
            free(c);
            return NULL;
        }
        net->peers = p;
    }
    c->id = net->npeers++;
    net->peers[c->id] = c;
    c->rate = net->shape_rate, c->latency = net->shape_latency;
    pthread_mutex_unlock(&net->lock);
    return c;
}

static void apply_shape(conn *c) {
    if (!c->bev) return;
    if (c->rate > 0) {
        struct timeval tick = {0, NET_TICK_MS * 1000};
        double per_tick = c->rate * NET_TICK_MS / 1000.0;
        if (per_tick < 1) per_tick = 1;
        size_t w = (size_t)per_tick;
        struct ev_token_bucket_cfg *b = ev_token_bucket_cfg_new(EV_RATE_LIMIT_MAX, EV_RATE_LIMIT_MAX, w, w, &tick);
        if (b && bufferevent_set_rate_limit(c->bev, b) == 0) {
            if (c->bucket) ev_token_bucket_cfg_free(c->bucket);
            c->bucket = b;
        } else if (b) {
            ev_token_bucket_cfg_free(b);
        }
    } else if (c->bucket) {
        bufferevent_set_rate_limit(c->bev, NULL);
        ev_token_bucket_cfg_free(c->bucket);
        c->bucket = NULL;
    }
}

static void conn_attach(conn *c, struct bufferevent *bev) {
    c->bev = bev;
    bufferevent_setcb(bev, on_read, on_write, on_event, c);
    /* High read watermark: at most 4 MiB sit in libevent's input buffer; on_read moves
     * them into the frame's own buffer, or stops (the app is behind) and libevent stops
     * reading the socket: TCP pushes back on the peer. */
    bufferevent_setwatermark(bev, EV_READ, 0, 4u << 20);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    apply_shape(c);
}

static void start_connect(conn *c) {
    dlc_net *net = c->net;
    struct bufferevent *bev;
    pthread_mutex_lock(&net->lock);
    c->gen++;
    pthread_mutex_unlock(&net->lock);
    int opts = BEV_OPT_CLOSE_ON_FREE;
    if (net->ssl) {
        SSL *ssl = new_ssl(net, c);
        bev = ssl ? bufferevent_openssl_socket_new(net->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, opts) : NULL;
        if (!bev && ssl) SSL_free(ssl);
    } else {
        bev = bufferevent_socket_new(net->base, -1, opts);
    }
    if (!bev) {
        c->end_code = DLC_PERR_INTERNAL;
        snprintf(c->end_text, sizeof c->end_text, "cannot create a connection to %s", c->name);
        set_state(c, DLC_CONN_CLOSED), set_state(c, DLC_CONN_CONNECTING);
        c->deadline = now_s() + net->cfg.reconnect_max_s;
        conn_arm(c);
        return;
    }
    conn_attach(c, bev);
    c->deadline = now_s() + net->cfg.auth_timeout_s;
    if (bufferevent_socket_connect(bev, (struct sockaddr *)&c->addr, (int)c->addrlen) < 0) {
        c->end_code = DLC_PERR_NONE;
        snprintf(c->end_text, sizeof c->end_text, "connect to %s failed", c->name);
        conn_close_now(c);
        return;
    }
    conn_arm(c);
}

static int count_server_conns(dlc_net *net) {
    int n = 0;
    for (int i = 0; i < net->npeers; i++)
        if (net->peers[i] && !net->peers[i]->client) n++;
    return n;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg) {
    (void)l, (void)salen;
    dlc_net *net = arg;
    pthread_mutex_lock(&net->lock);
    net->total.accepted++;
    int n = count_server_conns(net);
    bool stopping = net->stopping;
    pthread_mutex_unlock(&net->lock);
    char name[80];
    addr_name(sa, name, sizeof name);
    if (n >= net->cfg.max_peers || stopping) {
        /* refused before a conn exists: one best-effort ERROR frame, then close */
        dlc_frame f;
        dlc_frame_init(&f, DLC_FRAME_ERROR);
        f.code = stopping ? DLC_PERR_SHUTDOWN : DLC_PERR_OVERLOADED;
        snprintf(f.text, sizeof f.text, stopping ? "the server is shutting down"
                                                 : "the server has its maximum of %d connections", net->cfg.max_peers);
        uint8_t hdr[DLC_PROTO_PREFIX + 1024];
        int64_t len = dlc_proto_encode(&f, NULL, hdr, sizeof hdr);
        if (len > 0 && send(fd, hdr, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) { /* best effort */ }
        evutil_closesocket(fd);
        pthread_mutex_lock(&net->lock);
        net->total.overloaded++;
        pthread_mutex_unlock(&net->lock);
        ev_post_simple(net, DLC_NET_REFUSED, -1, f.code, f.text);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = conn_new(net, 0);
    if (!c) {
        evutil_closesocket(fd);
        return;
    }
    memcpy(c->name, name, sizeof name);
    struct bufferevent *bev;
    if (net->ssl) {
        SSL *ssl = new_ssl(net, c);
        bev = ssl ? bufferevent_openssl_socket_new(net->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE)
                  : NULL;
        if (!bev && ssl) SSL_free(ssl);
    } else {
        bev = bufferevent_socket_new(net->base, fd, BEV_OPT_CLOSE_ON_FREE);
    }
    if (!bev) {
        evutil_closesocket(fd);
        conn_retire(c);
        return;
    }
    c->state = DLC_CONN_AUTHENTICATING; /* born there: accepted sockets skip CONNECTING */
    conn_attach(c, bev);
    c->deadline = now_s() + net->cfg.auth_timeout_s;
    c->last_rx = c->last_tx = now_s();
    conn_arm(c);
}

/* ---- commands (other threads -> I/O thread) ---- */

static dlc_status cmd_push(dlc_net *net, cmd *k) {
    /* under net->lock */
    if (net->ncmds >= NET_COMMANDS_MAX)
        return dlc_error(DLC_ERR_RANGE, "the transport's command queue is full (%d commands): the I/O thread is behind",
                         NET_COMMANDS_MAX);
    if (net->cmd_tail) net->cmd_tail->next = k;
    else net->cmd_head = k;
    net->cmd_tail = k;
    net->ncmds++;
    return DLC_OK;
}

static void stop_check(dlc_net *net) {
    bool any = false;
    for (int i = 0; i < net->npeers; i++)
        if (net->peers[i] && net->peers[i]->state != DLC_CONN_CLOSED) any = true;
    if (!any || now_s() >= net->stop_deadline) event_base_loopbreak(net->base);
}

static void on_wake(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    dlc_net *net = arg;
    reap(net);
    pthread_mutex_lock(&net->lock);
    cmd *k = net->cmd_head;
    net->cmd_head = net->cmd_tail = NULL;
    net->ncmds = 0;
    bool resume = net->paused && net->ev_bytes <= net->cfg.in_max / 2;
    if (resume) net->paused = 0;
    pthread_mutex_unlock(&net->lock);
    if (resume) {
        pause_reading(net, 0);
        for (int i = 0; i < net->npeers; i++) /* what waited in libevent's buffers */
            if (net->peers[i] && net->peers[i]->bev && net->peers[i]->state != DLC_CONN_CLOSED)
                on_read(net->peers[i]->bev, net->peers[i]);
    }
    while (k) {
        cmd *next = k->next;
        conn *c = k->peer >= 0 && k->peer < net->npeers ? net->peers[k->peer] : NULL;
        switch (k->kind) {
        case CMD_SEND:
            if (c && c->state == DLC_CONN_READY && c->gen == k->frame->gen) {
                out_queue(c, k->frame);
                conn_arm(c);
            } else {
                size_t total = k->frame->total;
                unsigned gen = k->frame->gen;
                outframe_free(k->frame);
                unqueue(net, k->peer, gen, total);
            }
            break;
        case CMD_CLOSE:
            if (c) {
                c->app_closed = 1;
                conn_drain(c, DLC_PERR_NONE, "closed by this side");
            }
            break;
        case CMD_SHAPE:
            for (int i = k->peer < 0 ? 0 : k->peer; i < (k->peer < 0 ? net->npeers : k->peer + 1); i++) {
                conn *s = net->peers[i];
                if (!s) continue;
                s->rate = k->rate, s->latency = k->latency;
                apply_shape(s);
                out_release(s);
                if (s->state != DLC_CONN_CLOSED) conn_arm(s);
            }
            break;
        case CMD_CONNECT:
            if (c) start_connect(c);
            break;
        case CMD_STOP:
            net->stopping = 1;
            net->stop_deadline = now_s() + net->cfg.drain_timeout_s;
            for (int i = 0; i < net->npeers; i++) {
                conn *s = net->peers[i];
                if (!s) continue;
                s->app_closed = 1;
                if (s->state == DLC_CONN_CONNECTING) conn_close_now(s);
                else conn_drain(s, DLC_PERR_SHUTDOWN, "the transport is shutting down");
            }
            break;
        }
        free(k);
        k = next;
    }
    if (net->stopping) stop_check(net);
}

static void on_stop_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    dlc_net *net = arg;
    reap(net);
    if (net->stopping) stop_check(net);
}

static void *io_main(void *arg) {
    dlc_net *net = arg;
    struct event *tick = event_new(net->base, -1, EV_PERSIST, on_stop_tick, net);
    struct timeval tv = {0, 20000};
    if (tick) event_add(tick, &tv);
    event_base_loop(net->base, EVLOOP_NO_EXIT_ON_EMPTY);
    if (tick) event_free(tick);
    return NULL;
}

/* ---- public API ---- */

dlc_net_config dlc_net_default_config(void) {
    dlc_net_config c = {0};
    c.frame_max = DLC_PROTO_FRAME_MAX_DEFAULT;
    c.out_max = (size_t)256 << 20;
    c.in_max = (size_t)512 << 20;
    c.max_peers = 1024;
    c.heartbeat_s = 1, c.timeout_s = 5, c.auth_timeout_s = 5;
    c.reconnect_min_s = 0.1, c.reconnect_max_s = 10, c.drain_timeout_s = 5;
    return c;
}

static pthread_once_t evthread_once = PTHREAD_ONCE_INIT;
static int evthread_ok;
static void evthread_init(void) { evthread_ok = evthread_use_pthreads() == 0; }

static dlc_status check_config(const dlc_net_config *c) {
    if (c->frame_max <= DLC_PROTO_PREFIX + 64 || c->frame_max > DLC_PROTO_FRAME_MAX_LIMIT)
        return dlc_error(DLC_ERR_ARG, "frame_max = %zu: expected %d..%zu bytes", c->frame_max, DLC_PROTO_PREFIX + 65,
                         DLC_PROTO_FRAME_MAX_LIMIT);
    if (c->out_max < 1024) return dlc_error(DLC_ERR_ARG, "out_max = %zu: expected >= 1024 bytes", c->out_max);
    if (c->in_max < 1024) return dlc_error(DLC_ERR_ARG, "in_max = %zu: expected >= 1024 bytes", c->in_max);
    if (c->max_peers < 1 || c->max_peers > 1000000)
        return dlc_error(DLC_ERR_ARG, "max_peers = %d: expected 1..1000000", c->max_peers);
    struct { const char *name; double v; double lo; } t[] = {
        {"heartbeat_s", c->heartbeat_s, 0},         {"timeout_s", c->timeout_s, 0},
        {"auth_timeout_s", c->auth_timeout_s, 1e-3}, {"reconnect_min_s", c->reconnect_min_s, 1e-3},
        {"reconnect_max_s", c->reconnect_max_s, 0}, {"drain_timeout_s", c->drain_timeout_s, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!isfinite(t[i].v) || t[i].v < t[i].lo || t[i].v > 86400)
            return dlc_error(DLC_ERR_ARG, "%s = %g: expected %g..86400 seconds", t[i].name, t[i].v, t[i].lo);
    if (c->timeout_s > 0 && c->heartbeat_s > 0 && c->heartbeat_s >= c->timeout_s)
        return dlc_error(DLC_ERR_ARG, "heartbeat_s = %g >= timeout_s = %g: a peer would be lost between heartbeats",
                         c->heartbeat_s, c->timeout_s);
    if (c->secret && c->secret_file) return dlc_error(DLC_ERR_ARG, "secret and secret_file both given: choose one");
    if (c->secret && (c->secret_len == 0 || c->secret_len > NET_SECRET_MAX))
        return dlc_error(DLC_ERR_ARG, "secret of %zu bytes: expected 1..%d", c->secret_len, NET_SECRET_MAX);
    if (!c->secret && !c->secret_file && !c->insecure)
        return dlc_error(DLC_ERR_ARG, "no secret: give secret or secret_file (the run's shared secret), or insecure = 1 "
                                      "for an unauthenticated transport on loopback");
    if ((c->secret || c->secret_file) && c->insecure)
        return dlc_error(DLC_ERR_ARG, "insecure = 1 with a secret: choose one");
    if (c->tls && c->tls_insecure && c->tls_ca) return dlc_error(DLC_ERR_ARG, "tls_insecure with tls_ca: choose one");
    if (c->layout) {
        const dlc_proto_layout *l = c->layout;
        if (l->fragments < 1 || l->fragments > DLC_PROTO_FRAGMENTS_MAX || !l->numel)
            return dlc_error(DLC_ERR_ARG, "layout: %d fragments, expected 1..%d with their sizes", l->fragments,
                             DLC_PROTO_FRAGMENTS_MAX);
        if (dlc_codec_check(DLC_CODEC_INT8, &l->codec) < 0) return dlc_error(DLC_ERR_ARG, "layout: %s", dlc_last_error());
        for (int i = 0; i < l->fragments; i++)
            if (l->numel[i] < 0) return dlc_error(DLC_ERR_ARG, "layout: fragment %d has %lld floats", i, (long long)l->numel[i]);
    }
    return DLC_OK;
}

static dlc_status tls_setup(dlc_net *net) {
    const dlc_net_config *c = &net->cfg;
    SSL_CTX *ctx = SSL_CTX_new(TLS_method());
    if (!ctx) return dlc_error(DLC_ERR_IO, "TLS: cannot create an OpenSSL context");
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    net->ssl = ctx;
    if (c->tls_cert || c->tls_key) {
        if (!c->tls_cert || !c->tls_key) return dlc_error(DLC_ERR_ARG, "TLS: tls_cert and tls_key go together");
        if (SSL_CTX_use_certificate_chain_file(ctx, c->tls_cert) != 1)
            return dlc_error(DLC_ERR_IO, "tls_cert \"%s\": cannot load a PEM certificate from it", c->tls_cert);
        if (SSL_CTX_use_PrivateKey_file(ctx, c->tls_key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1)
            return dlc_error(DLC_ERR_IO, "tls_key \"%s\": cannot load a PEM key matching tls_cert from it", c->tls_key);
    }
    if (c->tls_ca) {
        if (SSL_CTX_load_verify_locations(ctx, c->tls_ca, NULL) != 1)
            return dlc_error(DLC_ERR_IO, "tls_ca \"%s\": cannot load PEM certificates from it", c->tls_ca);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    } else if (!c->tls_insecure && !c->tls_cert) {
        return dlc_error(DLC_ERR_ARG, "TLS client without tls_ca: give the CA that signed the server's certificate, "
                                      "or tls_insecure = 1 to skip verification");
    }
    return DLC_OK;
}

dlc_net *dlc_net_new(const dlc_net_config *cfg) {
    if (!cfg) {
        dlc_error(DLC_ERR_ARG, "dlc_net_new: NULL config");
        return NULL;
    }
    if (check_config(cfg) < 0) return NULL;
    pthread_once(&evthread_once, evthread_init);
    if (!evthread_ok) {
        dlc_error(DLC_ERR_INTERNAL, "libevent: evthread_use_pthreads failed");
        return NULL;
    }
    dlc_net *net = calloc(1, sizeof *net);
    if (!net) {
        dlc_error(DLC_ERR_NOMEM, "dlc_net_new: out of memory");
        return NULL;
    }
    net->cfg = *cfg;
    net->cfg.secret = NULL, net->cfg.secret_file = NULL, net->cfg.hello = NULL, net->cfg.layout = NULL;
    pthread_mutex_init(&net->lock, NULL);
    pthread_cond_init(&net->cond, NULL);
    if (cfg->secret) {
        memcpy(net->secret, cfg->secret, cfg->secret_len);
        net->secret_len = cfg->secret_len;
    } else if (cfg->secret_file) {
        int64_t n = dlc_auth_read_secret(cfg->secret_file, net->secret, sizeof net->secret);
        if (n < 0) goto fail;
        net->secret_len = (size_t)n;
    }
    if (cfg->hello) net->hello = *cfg->hello, net->has_hello = 1;
    if (cfg->layout) {
        net->layout = *cfg->layout;
        net->numel = malloc((size_t)cfg->layout->fragments * sizeof *net->numel);
        if (!net->numel) {
            dlc_error(DLC_ERR_NOMEM, "dlc_net_new: out of memory");
            goto fail;
        }
        memcpy(net->numel, cfg->layout->numel, (size_t)cfg->layout->fragments * sizeof *net->numel);
        net->layout.numel = net->numel;
        net->has_layout = 1;
    }
    if (cfg->tls && tls_setup(net) < 0) goto fail;
    net->rng = cfg->seed ? cfg->seed : (uint64_t)(now_s() * 1e9) ^ (uint64_t)(uintptr_t)net;
    if (!net->rng) net->rng = 1;
    net->base = event_base_new();
    net->wake = net->base ? event_new(net->base, -1, EV_PERSIST | EV_READ, on_wake, net) : NULL;
    if (!net->wake) {
        dlc_error(DLC_ERR_INTERNAL, "libevent: cannot create the event loop");
        goto fail;
    }
    if (pthread_create(&net->thread, NULL, io_main, net) != 0) {
        dlc_error(DLC_ERR_INTERNAL, "cannot start the transport's I/O thread");
        goto fail;
    }
    net->thread_started = 1;
    return net;
fail:
    dlc_net_free(net);
    return NULL;
}

void dlc_net_free(dlc_net *net) {
    if (!net) return;
    if (net->thread_started) {
        cmd *k = calloc(1, sizeof *k);
        pthread_mutex_lock(&net->lock);
        if (k) k->kind = CMD_STOP, cmd_push(net, k);
        pthread_mutex_unlock(&net->lock);
        wake(net);
        pthread_join(net->thread, NULL);
    }
    for (int i = 0; i < net->nlisteners; i++) evconnlistener_free(net->listeners[i]);
    free(net->listeners);
    for (int i = 0; i < net->npeers; i++) { /* what the drain deadline cut off */
        conn *c = net->peers[i];
        if (!c) continue;
        c->app_closed = 1;
        if (c->state != DLC_CONN_CLOSED) conn_close_now(c);
        else conn_retire(c);
    }
    reap(net);
    for (cmd *k = net->cmd_head, *n; k; k = n) {
        n = k->next;
        if (k->frame) outframe_free(k->frame);
        free(k);
    }
    for (evnode *e = net->ev_head, *n; e; e = n) {
        n = e->next;
        free(e->ev.owned_);
        free(e);
    }
    if (net->wake) event_free(net->wake);
    if (net->base) event_base_free(net->base);
    if (net->ssl) SSL_CTX_free(net->ssl);
    free(net->peers);
    free(net->numel);
    pthread_cond_destroy(&net->cond);
    pthread_mutex_destroy(&net->lock);
    OPENSSL_cleanse(net->secret, sizeof net->secret);
    free(net);
}

int dlc_net_listen(dlc_net *net, const char *addr) {
    if (!net) return dlc_error(DLC_ERR_ARG, "dlc_net_listen: NULL net");
    if (net->ssl && !net->cfg.tls_cert)
        return dlc_error(DLC_ERR_ARG, "listen %s: a TLS server needs tls_cert and tls_key", addr ? addr : "");
    struct sockaddr_storage ss;
    socklen_t len;
    char host[256];
    dlc_status st = resolve(addr, 1, &ss, &len, host, sizeof host);
    if (st < 0) return st;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return dlc_error(DLC_ERR_IO, "listen %s: socket: %s", addr, strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 4096) < 0) {
        int e = errno;
        close(fd);
        return dlc_error(DLC_ERR_IO, "listen %s: %s%s", addr, strerror(e),
                         e == EADDRINUSE ? " (the port is in use: another syncer? choose another port or 0)" : "");
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;
    getsockname(fd, (struct sockaddr *)&bound, &blen);
    int port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                                : ((struct sockaddr_in6 *)&bound)->sin6_port);
    pthread_mutex_lock(&net->lock);
    struct evconnlistener **l = realloc(net->listeners, (size_t)(net->nlisteners + 1) * sizeof *l);
    if (l) net->listeners = l;
    struct evconnlistener *el =
        l ? evconnlistener_new(net->base, on_accept, net, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_THREADSAFE, 0, fd) : NULL;
    if (el) net->listeners[net->nlisteners++] = el;
    pthread_mutex_unlock(&net->lock);
    if (!el) {
        close(fd);
        return dlc_error(DLC_ERR_INTERNAL, "listen %s: libevent could not take the socket", addr);
    }
    return port;
}

int dlc_net_connect(dlc_net *net, const char *addr) {
    if (!net) return dlc_error(DLC_ERR_ARG, "dlc_net_connect: NULL net");
    struct sockaddr_storage ss;
    socklen_t len;
    char host[256];
    dlc_status st = resolve(addr, 0, &ss, &len, host, sizeof host);
    if (st < 0) return st;
    if (net->ssl && !net->cfg.tls_ca && !net->cfg.tls_insecure)
        return dlc_error(DLC_ERR_ARG, "connect %s: a TLS client needs tls_ca (or tls_insecure)", addr);
    cmd *k = calloc(1, sizeof *k);
    if (!k) return dlc_error(DLC_ERR_NOMEM, "dlc_net_connect: out of memory");
    /* The conn is made here (its timer is created on the base, thread-safe) and started
     * on the I/O thread. */
    conn *c = conn_new(net, 1);
    if (!c) {
        free(k);
        return dlc_error(DLC_ERR_NOMEM, "dlc_net_connect: out of memory or peer ids");
    }
    c->addr = ss, c->addrlen = len;
    snprintf(c->name, sizeof c->name, "%s", addr);
    snprintf(c->host, sizeof c->host, "%s", host);
    c->state = DLC_CONN_CONNECTING;
    k->kind = CMD_CONNECT, k->peer = c->id;
    pthread_mutex_lock(&net->lock);
    st = cmd_push(net, k);
    pthread_mutex_unlock(&net->lock);
    if (st < 0) {
        free(k);
        return st;
    }
    wake(net);
    return c->id;
}

dlc_status dlc_net_send(dlc_net *net, int peer, const dlc_frame *f, void (*free_payload)(const void *, void *),
                        void *arg) {
    if (!net || !f) return dlc_error(DLC_ERR_ARG, "dlc_net_send: NULL argument");
    if (f->type <= DLC_FRAME_WELCOME || f->type == DLC_FRAME_ERROR || (unsigned)f->type >= DLC_FRAME_TYPE_COUNT)
        return dlc_error(DLC_ERR_ARG, "dlc_net_send: a %s is the transport's own to send",
                         dlc_frame_type_name(f->type) ? dlc_frame_type_name(f->type) : "frame of no known type");
    uint8_t hdr[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX];
    int64_t n = dlc_proto_encode(f, net->has_layout ? &net->layout : NULL, hdr, sizeof hdr);
    if (n < 0) return (dlc_status)n;
    outframe *o = malloc(sizeof *o + (size_t)n);
    cmd *k = malloc(sizeof *k);
    if (!o || !k) {
        free(o), free(k);
        return dlc_error(DLC_ERR_NOMEM, "dlc_net_send: out of memory");
    }
    memset(o, 0, sizeof *o);
    o->net = net, o->peer = peer, o->type = f->type, o->hlen = (size_t)n, o->total = (size_t)n + f->msg.len;
    o->payload = f->msg.payload, o->len = f->msg.len, o->free_payload = free_payload, o->arg = arg;
    memcpy(o->hdr, hdr, (size_t)n);
    memset(k, 0, sizeof *k);
    k->kind = CMD_SEND, k->peer = peer, k->frame = o;
    dlc_status st = DLC_OK;
    pthread_mutex_lock(&net->lock);
    conn *c = peer >= 0 && peer < net->npeers ? net->peers[peer] : NULL;
    if (!c || c->state != DLC_CONN_READY) {
        st = dlc_error(DLC_ERR_STATE, "peer %d is %s, not ready", peer,
                       c ? dlc_conn_state_name(c->state) : "not connected (unknown or gone)");
    } else if (c->queued + o->total > net->cfg.out_max) {
        c->refused = 1;
        net->total.refused_full++;
        st = dlc_error(DLC_ERR_RANGE, "peer %d: %zu bytes queued + %zu exceed out_max = %zu (back-pressure: retry "
                                      "after its DRAINED event)", peer, c->queued, o->total, net->cfg.out_max);
    } else {
        o->gen = c->gen;
        st = cmd_push(net, k);
        if (st == DLC_OK) c->queued += o->total;
    }
    pthread_mutex_unlock(&net->lock);
    if (st < 0) {
        free(o), free(k);
        return st;
    }
    wake(net);
    return DLC_OK;
}

static dlc_status push_simple(dlc_net *net, cmd_kind kind, int peer, double rate, double latency) {
    cmd *k = calloc(1, sizeof *k);
    if (!k) return dlc_error(DLC_ERR_NOMEM, "out of memory");
    k->kind = kind, k->peer = peer, k->rate = rate, k->latency = latency;
    pthread_mutex_lock(&net->lock);
    dlc_status st = DLC_OK;
    conn *c = peer >= 0 && peer < net->npeers ? net->peers[peer] : NULL;
    if (peer >= 0 && !c) st = dlc_error(DLC_ERR_STATE, "peer %d is not connected (unknown or gone)", peer);
    if (st == DLC_OK && kind == CMD_SHAPE && peer < 0) net->shape_rate = rate, net->shape_latency = latency;
    if (st == DLC_OK) st = cmd_push(net, k);
    pthread_mutex_unlock(&net->lock);
    if (st < 0) {
        free(k);
        return st;
    }
    wake(net);
    return DLC_OK;
}

dlc_status dlc_net_close(dlc_net *net, int peer) {
    if (!net) return dlc_error(DLC_ERR_ARG, "dlc_net_close: NULL net");
    if (peer < 0) return dlc_error(DLC_ERR_STATE, "peer %d is not connected (unknown or gone)", peer);
    return push_simple(net, CMD_CLOSE, peer, 0, 0);
}

dlc_status dlc_net_shape(dlc_net *net, int peer, double rate, double latency) {
    if (!net) return dlc_error(DLC_ERR_ARG, "dlc_net_shape: NULL net");
    if (!isfinite(rate) || rate < 0 || (rate > 0 && rate < 1000))
        return dlc_error(DLC_ERR_ARG, "rate = %g bytes/s: expected 0 (no cap) or >= 1000", rate);
    if (!isfinite(latency) || latency < 0 || latency > 60)
        return dlc_error(DLC_ERR_ARG, "latency = %g s: expected 0..60", latency);
    return push_simple(net, CMD_SHAPE, peer, rate, latency);
}

int dlc_net_poll(dlc_net *net, dlc_net_event *ev, int timeout_ms) {
    if (!net || !ev) return dlc_error(DLC_ERR_ARG, "dlc_net_poll: NULL argument");
    struct timespec until;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&net->lock);
    while (!net->ev_head && timeout_ms != 0) {
        if (timeout_ms < 0) pthread_cond_wait(&net->cond, &net->lock);
        else if (pthread_cond_timedwait(&net->cond, &net->lock, &until) == ETIMEDOUT) break;
    }
    evnode *n = net->ev_head;
    bool resume = false;
    if (n) {
        net->ev_head = n->next;
        if (!net->ev_head) net->ev_tail = NULL;
        net->ev_bytes -= n->bytes;
        resume = net->paused && net->ev_bytes <= net->cfg.in_max / 2;
    }
    pthread_mutex_unlock(&net->lock);
    if (resume) wake(net);
    if (!n) return 0;
    memcpy(ev, &n->ev, sizeof *ev);
    free(n);
    return 1;
}

void dlc_net_event_release(dlc_net_event *ev) {
    if (!ev) return;
    free(ev->owned_);
    ev->owned_ = NULL;
    ev->frame.msg.payload = NULL;
    ev->frame.msg.len = 0;
}

dlc_status dlc_net_get_counters(dlc_net *net, int peer, dlc_net_counters *out) {
    if (!net || !out) return dlc_error(DLC_ERR_ARG, "dlc_net_get_counters: NULL argument");
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&net->lock);
    dlc_status st = DLC_OK;
    if (peer < 0) {
        *out = net->total;
        out->state = -1;
    } else if (peer >= net->npeers || !net->peers[peer]) {
        st = dlc_error(DLC_ERR_STATE, "peer %d is not connected (unknown or gone)", peer);
    } else {
        out->state = net->peers[peer]->state;
    }
    for (int i = peer < 0 ? 0 : peer; st == DLC_OK && i < (peer < 0 ? net->npeers : peer + 1); i++) {
        conn *c = net->peers[i];
        if (!c) continue;
        for (int t = 0; t < DLC_FRAME_TYPE_COUNT; t++) {
            out->bytes_out[t] += c->bytes_out[t], out->frames_out[t] += c->frames_out[t];
            out->bytes_in[t] += c->bytes_in[t], out->frames_in[t] += c->frames_in[t];
        }
        out->queued += c->queued;
    }
    pthread_mutex_unlock(&net->lock);
    return st;
}
