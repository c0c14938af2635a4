/* internal.h - what net/conn.c, in.c, out.c and net.c share: limits, the queued frame, command
 * and event nodes, the connection and the net (threads and ownership: net.c's opening
 * comment).  Not installed. */
#ifndef DLC_NET_INTERNAL_H
#define DLC_NET_INTERNAL_H
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
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <linux/sockios.h> /* SIOCOUTQ */
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
/* A frame body at least this long is read with a read threshold (below). */
#define NET_BULK_MIN ((size_t)256 << 10)
/* A plain-TCP connection's read buffer for what is not a frame body (prefixes, headers,
 * small frames), allocated when it is connected. */
#define NET_IB ((size_t)16 << 10)
/* While a body is read that way, the socket reports readable only once this much of it
 * is waiting (SO_RCVLOWAT), so a fast link is read in large gulps, few wake-ups per
 * frame as a blocking read() gets: at least NET_LOWAT_MIN (a new body, a slow link,
 * and the bytes that keep a peer alive: NET_LOWAT_MIN per timeout_s), at most
 * NET_LOWAT_MAX, else what arrives in NET_LOWAT_S at the rate seen so far. */
#define NET_LOWAT_MIN ((size_t)64 << 10)
#define NET_LOWAT_MAX ((size_t)1 << 20)
#define NET_LOWAT_S 0.01
/* While a frame is being received, every `chunk` of its bytes keeps the peer alive (a
 * frame may take longer than timeout_s to arrive on a slow link, and no heartbeat can
 * pass it): chunk is what arrives in timeout_s / NET_ALIVE_PARTS at the rate observed
 * over the frame so far, at least NET_ALIVE_MIN (a trickle below NET_ALIVE_MIN per
 * timeout_s is not alive), at most NET_LOWAT_MIN. */
#define NET_ALIVE_PARTS 4
#define NET_ALIVE_MIN ((size_t)4 << 10)
/* Receive buffers kept for reuse (process-wide): at most 2, each of 1 to 128 MiB, and
 * 128 MiB in all stay allocated after a burst of large fragments (a model's size does
 * not add to what a process holds idle; two, as the drivers keep two frames waiting,
 * rt/rt_internal.h: at 16M parameters in 4 fragments a third and fourth were half a
 * model held idle). */
#define NET_RX_CACHE 2
#define NET_RX_CACHE_MIN ((size_t)1 << 20)
#define NET_RX_CACHE_MAX ((size_t)128 << 20)
#define NET_RX_CACHE_BYTES ((size_t)128 << 20)
/* How long dlc_net_poll spins (yielding) for an event before sleeping on its condition
 * variable: a reply that comes back within it skips a thread wake-up (~3 us here). */
#define NET_POLL_SPIN_S 50e-6
/* Defaults of max_unauth and max_unauth_per_addr (server connections not yet
 * authenticated: in all, from one address), and the largest max_unauth accepted (the
 * eviction scan is quadratic in it). */
#define NET_UNAUTH_DEFAULT 64
#define NET_UNAUTH_PER_ADDR_DEFAULT 8
#define NET_UNAUTH_MAX 4096
/* A server-side connection heard from within this fraction of timeout_s is live: a new
 * claim on its learner id is refused; one silent longer gives way to the claim. */
#define NET_LIVE_FRACTION 0.5
/* Default of mem_max: the net's memory budget (output queued, frames received). */
#define NET_MEM_DEFAULT ((size_t)1 << 30)
/* The longest dlc_net_clock_moved waits for the I/O thread to check its timers. */
#define NET_CLOCK_WAIT_S 10
/* libevent token-bucket tick of the WAN emulation. */
#define NET_TICK_MS 5
/* The buckets of the WAN emulation (each direction) hold at most this much time of
 * their rate, and at least NET_BUCKET_MIN bytes. */
#define NET_BURST_S 0.020
#define NET_BUCKET_MIN ((size_t)64 << 10)


typedef enum cmd_kind { CMD_SEND, CMD_CLOSE, CMD_SHAPE, CMD_SHAPE_IN, CMD_CUT, CMD_CONNECT, CMD_STOP } cmd_kind;

/* A command for the I/O thread.  A CMD_SEND lives inside its outframe (one allocation
 * per send) and goes with it; the others are malloc'ed and freed by the I/O thread. */
typedef struct cmd {
    struct cmd *next;
    cmd_kind kind;
    int peer;
    struct outframe *frame;
    double rate, latency;    /* CMD_SHAPE, CMD_SHAPE_IN; CMD_CUT: rate != 0 cuts; CMD_CLOSE: rate != 0 moves on */
} cmd;

typedef struct outframe {
    struct outframe *next;   /* in the delay queue, then in the output queue */
    cmd send;                /* dlc_net_send's command, while it waits for the I/O thread */
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
    int notify;              /* an application frame without free_payload: post SENT */
    uint8_t hdr[];
} outframe;

typedef struct evnode {
    struct evnode *next;
    size_t bytes; /* received frame bytes it holds (counted against in_max) */
    double due;   /* held for the receiving direction's emulated latency until then */
    dlc_net_event ev;
} evnode;

/* One address of a client given alternates (dlc_net_connect "A|B"): resolved once, up front. */
typedef struct conn_alt {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char name[80];           /* as given: "127.0.0.1:5555" */
    char host[256];          /* for TLS verification */
} conn_alt;

typedef struct conn {
    struct dlc_net *net;
    struct conn *grave;      /* retired: freed by reap() on the I/O thread */
    unsigned gen;            /* bumped at each connection attempt */
    int id, client, learner;
    /* a standby connection (docs/protocol.md, "Standbys"): the server's side took a HELLO
     * asking for "standby" (no learner id: learner -1), a client's WELCOME granted it;
     * set before READY, under net->lock */
    int standby;
    dlc_conn_state state;
    struct bufferevent *bev;
    struct event *timer;
    /* Plain TCP input (the conns with own_out): read with recv(), not through libevent's
     * input buffer.  A frame body goes straight into inbuf; ib holds what a read brought
     * beyond it (prefixes, headers, small frames): ib[ib_off..ib_len). */
    struct event *rev;       /* EV_READ on the fd */
    int rev_on;
    uint8_t *ib;
    size_t ib_off, ib_len;
    int in_bulk;             /* a large body is being read with the SO_RCVLOWAT threshold */
    int lowat;               /* the fd's SO_RCVLOWAT while in_bulk (0: the default, 1) */
    size_t bulk_fresh;       /* frame bytes read since the last that kept the peer alive */
    double bulk_t;           /* when the body was last read */
    double body_t0;          /* when the frame being received began (its rate: inhave since) */
    int half_closed;         /* DRAINING, output flushed: shutdown(SHUT_WR) done, waiting for EOF */
    /* server, AUTHENTICATING: in the net's list of unauthenticated conns, oldest first
     * (under net->lock) */
    int unauth;
    struct conn *ua_prev, *ua_next;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char name[80];           /* "127.0.0.1:5555"; a client's: the address of its current attempt */
    char host[256];          /* for TLS verification (client) */
    /* client with alternate addresses (NULL, nalt 1: one address): each attempt after a
     * failure or a lost connection goes to the next, round robin; alt is the current */
    conn_alt *alts;
    int nalt, alt;
    int step;                /* handshake step within AUTHENTICATING (see on_handshake) */
    uint8_t nc[DLC_PROTO_NONCE], ns[DLC_PROTO_NONCE];
    double deadline;         /* AUTHENTICATING: READY by then; CONNECTING: next attempt; DRAINING: close by then */
    double last_rx;
    _Atomic double last_tx;  /* also set by a sending thread that writes directly */
    uint8_t *inbuf;          /* the frame being received: inlen bytes, inhave in */
    size_t inlen, inhave;
    outframe *delay_head, *delay_tail; /* held for the emulated latency */
    size_t queued;           /* under net->lock */
    int qframes;             /* under net->lock: the application frames queued counts */
    double over_t;           /* I/O thread: since when queued has been above the peer's share (0: not) */
    int refused;             /* a send was refused since the last DRAINED */
    int mem_wait;            /* I/O thread: the next frame waits for mem_max; not read meanwhile */
    int app_closed;          /* dlc_net_close: no reconnect */
    int ready_once;
    int failures;            /* client: connection attempts failed in a row */
    int was_ready;           /* it reached READY (LOST rather than REFUSED) */
    int end_code;            /* why it is closing */
    char end_text[DLC_PROTO_TEXT_MAX + 128];
    double rate, latency;
    /* The receiving direction's WAN emulation (dlc_net_shape_in): plain TCP reads at most
     * in_rate bytes/s (a token bucket in in.c: the socket is not read while it is empty,
     * so TCP pushes back on the peer), TLS through libevent's read limit; each frame
     * received on a READY conn is held in_latency before it becomes an event (held_*,
     * oldest first, its bytes still counted in rx_bytes). */
    double in_rate, in_latency;
    double in_tokens, in_tokens_t;
    int in_starved;          /* reading stopped until itimer refills the bucket */
    struct event *itimer;
    struct evnode *held_head, *held_tail;
    /* dlc_net_cut: neither read nor written (what is sent is queued, nothing arrives)
     * until uncut; the timeout runs on, and a close closes at once (nothing can flush) */
    int cut;
    /* READY: the bytes the kernel had not yet had acknowledged (SIOCOUTQ) when last
     * looked at, and since when that count has not moved; a count above 0 that stays
     * put for timeout_s is a peer that stopped reading (or a dead link) */
    int stall_outq;
    double stall_t;
    _Atomic uint64_t wrote;  /* plain TCP: bytes written to the socket (any thread, under wlock) */
    uint64_t stall_wrote;    /* wrote when stall_t was set */
    struct ev_token_bucket_cfg *bucket; /* TLS: libevent's rate limit */
    /* Plain TCP output (net/out.c): our own queue and writer instead of libevent's, so
     * that dlc_net_send can write the socket from the caller's thread.  wlock guards
     * oq_*, wev_on and the fd's writes; it nests inside net->lock, never around it. */
    int own_out;
    pthread_mutex_t wlock;
    outframe *oq_head, *oq_tail;
    size_t oq_off;           /* bytes of oq_head already written */
    struct event *wev;       /* EV_WRITE on the fd while the socket is full */
    int wev_on;
    int wev_want;            /* inline_io: a sender found the socket full; the loop arms wev */
    int werr;                /* errno of a failed write, for the I/O thread to close on */
    struct event *rtimer;    /* the token bucket's refill (rate > 0) */
    double tokens, tokens_t;
    int cmd_pending;         /* under net->lock: CMD_SEND commands queued for this conn */
    int direct;              /* under net->lock: dlc_net_send may write itself (ready, plain
                              * TCP, no cap, no latency, nothing queued ahead) */
    /* Counters, each with one writer at a time: what the I/O thread sends and receives
     * (read by others, so atomic), and what dlc_net_send writes directly (under
     * net->lock, as every reader is); a frame's bytes are in one of the two _out sets. */
    _Atomic uint64_t bytes_out[DLC_FRAME_TYPE_COUNT], frames_out[DLC_FRAME_TYPE_COUNT];
    _Atomic uint64_t bytes_in[DLC_FRAME_TYPE_COUNT], frames_in[DLC_FRAME_TYPE_COUNT];
    uint64_t direct_bytes_out[DLC_FRAME_TYPE_COUNT], direct_frames_out[DLC_FRAME_TYPE_COUNT];
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
    dlc_proto_decoder *dec;  /* every received frame's (the I/O thread's) */
    SSL_CTX *ssl;

    struct event_base *base;
    struct event *wake;
    /* inline_io: the base has no locks (only the polling thread touches libevent), and
     * other threads wake its loop through this eventfd, not event_active; -1 otherwise */
    int wake_fd;
    atomic_int wev_any;      /* inline_io: some conn's wev_want is set */
    pthread_t thread;
    int thread_started;
    struct event *poll_timer; /* inline_io: ends a dlc_net_poll that waits in the loop */
    atomic_flag polling;     /* inline_io: a thread is in dlc_net_poll */
    /* inline_io, the polling thread only: while its loop runs, the caller's event, which
     * a frame arriving with no event queued ahead of it is decoded into directly (no
     * queue node, no copy), and whether one was */
    dlc_net_event *poll_ev;
    int poll_got;
    struct evconnlistener **listeners;
    int nlisteners;
    /* dlc_net_set_refusing: while not "", a HELLO that does not ask for "standby" is
     * answered ERROR shutdown with this text (under lock) */
    char refusing[DLC_PROTO_TEXT_MAX + 1];

    pthread_mutex_t lock;
    pthread_cond_t cond;
    _Atomic(conn *) grave;   /* conns closed for good, freed at the next reap() (written
                              * under lock; reap looks without it first) */
    conn **peers;            /* by id */
    conn *ua_head, *ua_tail; /* server conns not yet authenticated, oldest first */
    int n_unauth;
    int n_ready;             /* under lock: conns READY (mem_max is shared among them) */
    int npeers;              /* ids handed out */
    cmd *cmd_head, *cmd_tail;
    int ncmds;
    evnode *ev_head, *ev_tail;
    _Atomic size_t ev_bytes; /* changed under lock; the reader's in_max check looks without it */
    /* mem_max: the sum of every conn's queued bytes (under lock), and the bytes of frames
     * being received (the I/O thread writes it) */
    size_t out_bytes;
    _Atomic size_t rx_bytes;
    atomic_int mem_refused;  /* written under lock: a send was refused for mem_max since the last DRAINED */
    atomic_int mem_waiting;  /* written under lock: conns whose next frame waits for mem_max */
    atomic_int mem_kick;     /* memory was freed while conns wait: the loop retries them */
    atomic_int clock_kick;   /* the injected clock moved: the loop checks every timer */
    int clock_turn;          /* the loop did (inline_io: the poll under way returns; loop thread only) */
    uint64_t clock_req, clock_done; /* dlc_net_clock_moved calls, and those the loop has acted on (lock) */
    pthread_cond_t clock_cond;       /* clock_done moved */
    atomic_int ev_count;     /* events waiting: read without the lock by a spinning poll */
    int paused;              /* reading stopped: the event queue is over in_max */
    int stopping;
    double stop_deadline;
    double shape_rate, shape_latency; /* for peers to come (dlc_net_shape(-1)) */
    double shape_in_rate, shape_in_latency; /* (dlc_net_shape_in(-1)) */
    uint64_t rng;
    /* totals (under lock): connection-level counters, and bytes of conns gone */
    dlc_net_counters total;
};

/* ---- shared between conn.c (the I/O thread's connection code) and net.c (the API,
 * the queues, the loop) ---- */
/* The wall clock (monotonic seconds): for the bandwidth caps' buckets, the calls'
 * own timeouts and the stop's bound, which are real time whatever the config's clock. */
static inline double real_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The protocol's clock (dlc_net_config.clock, else the wall clock): every timer's. */
static inline double dlcn_now(const dlc_net *net) {
    return net->cfg.clock ? net->cfg.clock(net->cfg.clock_arg) : real_s();
}

/* The coarse clock's tick (clock_getres of CLOCK_MONOTONIC_COARSE), set by the first
 * dlc_net_new. */
extern double dlcn_coarse_tick;

/* An upper bound of dlcn_now() from the coarse clock, which costs a memory read rather than
 * a clock read: at most one tick (1-10 ms) late.  For the liveness stamps last_rx and
 * last_tx, set at every frame, which a late stamp only makes lenient: a timeout or an
 * idle heartbeat comes at most a tick later, never earlier. */
static inline double dlcn_now_coarse(const dlc_net *net) {
    if (net->cfg.clock) return net->cfg.clock(net->cfg.clock_arg);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9 + dlcn_coarse_tick;
}

static inline struct timeval tv_of(double s) {
    if (s < 0) s = 0;
    struct timeval tv = {(time_t)s, (suseconds_t)((s - floor(s)) * 1e6)};
    return tv;
}

void dlcn_wake(dlc_net *net);                                  /* any thread */
/* Receive buffers of frames (any thread): the few largest freed ones are kept for the
 * next frame, so a stream of big fragments does not page-fault fresh memory each time. */
uint8_t *dlcn_rx_alloc(size_t n);
void dlcn_rx_free(uint8_t *buf);
evnode *dlcn_ev_new(dlc_net_event_kind kind, int peer);
void dlcn_ev_post(dlc_net *net, evnode *n);                    /* takes n */
void dlcn_ev_post_simple(dlc_net *net, dlc_net_event_kind kind, int peer, int code, const char *text);
/* The same, naming the peer's address (event.from). */
void dlcn_ev_post_from(dlc_net *net, dlc_net_event_kind kind, int peer, int code, const char *text, const char *from);
/* I/O thread only: */
conn *dlcn_conn_new(dlc_net *net, int client);                 /* also from dlc_net_connect */
void dlcn_start_connect(conn *c);
void dlcn_conn_drain(conn *c, int code, const char *text);
void dlcn_conn_close_now(conn *c);
void dlcn_conn_retire(conn *c);
void dlcn_reap(dlc_net *net);
/* Why c ended, when the peer closed (eof) or the socket failed (errno err) with no reason
 * of its own yet: into c->end_code and c->end_text (a client without TLS closed before the
 * server's first frame is told the server may expect TLS). */
void dlcn_conn_end_text(conn *c, int eof, int err);
void dlcn_conn_arm(conn *c);
/* Runs c's timer now (the injected clock moved: dlc_net_clock_moved). */
void dlcn_conn_tick(conn *c);
void dlcn_out_queue(conn *c, outframe *f);
void dlcn_out_release(conn *c);
void dlcn_apply_shape(conn *c);
void dlcn_conn_set_cut(conn *c, int on);
void dlcn_outframe_free(outframe *f);
/* the per-type counters of a frame going out: by the I/O thread, or (direct) by
 * dlc_net_send with net->lock held */
void dlcn_count_out(conn *c, const outframe *f, int direct);
/* Adds v to a counter whose one writer is the calling thread (others read it). */
static inline void dlcn_count(_Atomic uint64_t *counter, uint64_t v) {
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + v, memory_order_relaxed);
}
void dlcn_unqueue(dlc_net *net, int peer, unsigned gen, size_t n, int app);
/* net->lock held: c's queued bytes, and with them the net's (mem_max), change by n. */
/* app: a frame of dlc_net_send's (counted in qframes), not one of the transport's own. */
static inline void dlcn_queued_add(conn *c, size_t n, int app) {
    c->queued += n, c->net->out_bytes += n;
    if (app) c->qframes++;
}
static inline void dlcn_queued_sub(conn *c, size_t n, int app) {
    if (n > c->queued) n = c->queued;
    c->queued -= n, c->net->out_bytes -= n;
    if (app && c->qframes > 0) c->qframes--;
    if (c->queued == 0) c->qframes = 0;
}
/* An application frame (dlc_net_send's): it notifies SENT or frees a payload. */
static inline int dlcn_app_frame(const outframe *f) { return f->notify || f->free_payload != NULL; }
/* net->lock held: one READY peer's share of mem_max (mem_max / the READY peers), and the
 * bytes a peer may have queued, the smaller of out_max and that share.  A frame always
 * fits an empty queue (out_max permitting), so a share below a frame still moves. */
static inline size_t dlcn_share(const struct dlc_net *net) {
    return net->cfg.mem_max / (size_t)(net->n_ready > 1 ? net->n_ready : 1);
}
static inline size_t dlcn_limit(const struct dlc_net *net) {
    size_t s = dlcn_share(net);
    return s < net->cfg.out_max ? s : net->cfg.out_max;
}
/* The bytes counted against mem_max (a snapshot; exact with net->lock held). */
static inline size_t dlcn_mem(dlc_net *net) {
    return net->out_bytes + atomic_load_explicit(&net->ev_bytes, memory_order_relaxed) +
           atomic_load_explicit(&net->rx_bytes, memory_order_relaxed);
}
/* Memory was freed (net->lock held or not): DRAINED for the peers refused for mem_max
 * once the net is below mem_max / 2, and a kick to the loop for conns that wait. */
void dlcn_mem_freed(dlc_net *net);
void dlcn_mem_resume(dlc_net *net);        /* in.c, I/O thread: retries the conns that wait */
/* conn.c: a whole frame received: takes buf (dlcn_rx_alloc'ed), or only reads it when
 * borrowed (a frame without a payload, decoded where it lies in the read buffer, which
 * the call may free: the caller has moved past it and does not touch it after) */
void dlcn_on_frame(conn *c, uint8_t *buf, size_t len, int borrowed);
/* Any thread, net->lock held: 0 if c's side may send type t once READY (conn.c's
 * ready_from, the one table of direction, and c's role), else 1 with why not in why[cap]
 * ("the syncer's to send (a client (learner) connection sends ...)"). */
int dlcn_direction_refusal(const conn *c, dlc_frame_type t, char *why, size_t cap);
void dlcn_conn_fail(conn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* net/in.c (I/O thread) */
int dlcn_in_start(conn *c);                /* plain TCP, once connected: 0 or -1 */
void dlcn_in_stop(conn *c);                /* at close */
void dlcn_in_drain(conn *c);               /* entering DRAINING: input dropped from now on */
int dlcn_in_timer(conn *c);                /* the conn's timer: 1 if it finished a frame or closed c */
void dlcn_in_shape(conn *c);               /* in_rate or in_latency changed */
void dlcn_in_cut(conn *c);                 /* c->cut changed: reading stops or resumes */
void dlcn_in_release(conn *c, int all);    /* posts the held frames that are due (all: every one) */
void dlcn_on_read(struct bufferevent *bev, void *arg); /* frames what waits (libevent's read callback) */
void dlcn_pause_reading(dlc_net *net, int pause);     /* every conn: stop or resume reading */
void dlcn_update_direct(conn *c);          /* recomputes c->direct (takes net->lock) */
void dlcn_payload_written(const void *data, size_t len, void *arg); /* f (arg) left: done, freed, unqueued */
void dlcn_frame_done(const outframe *f);   /* f left: SENT if asked for, its payload released */
void dlcn_conn_fail_io(conn *c, int err);  /* a write failed: close (I/O thread) */
void dlcn_write_done(conn *c);             /* the output queue emptied (I/O thread) */
/* net/out.c */
int dlcn_out_start(conn *c);               /* I/O thread, once the fd is known: 0 or -1 */
void dlcn_out_stop(conn *c);               /* I/O thread, at close: drops what is queued */
void dlcn_out_append(conn *c, outframe *f); /* I/O thread: queue and write what fits */
void dlcn_out_kick(conn *c);               /* I/O thread: write what waits (after a cut) */
int dlcn_out_empty(conn *c);
/* Any thread, net->lock held, c->direct.  f is the caller's (on its stack): with nothing
 * queued ahead it is written from there, 1 if the socket took it whole (the caller then
 * finishes it, dlcn_frame_done).  Else a heap copy of it is queued for the rest, 0; or
 * -1 out of memory (if part of it went, the connection fails). */
int dlcn_send_direct(conn *c, const outframe *f);
void dlcn_on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg);

#endif
