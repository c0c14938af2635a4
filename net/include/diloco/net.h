/*
 * net.h - the transport: framed connections over TCP (libevent 2.1), with
 * authentication, the HELLO/WELCOME handshake, heartbeats, reconnects, back-pressure,
 * per-peer counters and WAN emulation.  libdiloco_net, the only code of diloco with
 * sockets and threads (core/ stays sans-IO); docs/transport.md is the guide.
 *
 * One dlc_net owns one I/O thread running an event loop (or none, with inline_io: the
 * loop runs inside dlc_net_poll).  Any other thread talks to it through two bounded
 * queues of byte buffers, never tensors:
 *   commands in  (dlc_net_send, dlc_net_close, dlc_net_shape, dlc_net_cut, ...): they never block;
 *                a full queue, a peer over its output limit (out_max) or the net over
 *                its memory budget (mem_max) is an error the sender sees;
 *   events out   (dlc_net_poll): frames received, peers connected, lost, refused.
 * A dlc_net is a server (dlc_net_listen), a client of one or more servers
 * (dlc_net_connect), or both.  Peers are named by small integer ids, unique in a net.
 *
 *   dlc_net_config cfg = dlc_net_default_config();
 *   cfg.secret = "run secret"; cfg.secret_len = 10; cfg.hello = my_hello; cfg.layout = &l;
 *   dlc_net *net = dlc_net_new(&cfg);             // starts the I/O thread
 *   int peer = dlc_net_connect(net, "127.0.0.1:7070");
 *   dlc_net_event ev;
 *   while (dlc_net_poll(net, &ev, 1000) == 1) {    // 1 = an event, 0 = timed out
 *       if (ev.kind == DLC_NET_READY) ...           // authenticated and welcomed
 *       if (ev.kind == DLC_NET_FRAME) use(ev.frame.msg.payload, ev.frame.msg.len);
 *       dlc_net_event_release(&ev);                // frees the received bytes
 *   }
 *   dlc_net_free(net);                            // flushes, closes, joins the thread
 *
 * Errors: negative dlc_status with the message in dlc_last_error() (of the calling
 * thread), naming what was wrong: a malformed address, a port in use, an unreadable
 * secret file, a frame limit of 0, a peer that is not connected, a full queue.
 */
#ifndef DILOCO_NET_H
#define DILOCO_NET_H

#include <stddef.h>
#include <stdint.h>
#include "diloco/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Connection states (docs/transport.md has the diagram):
 *   CONNECTING      client: TCP connect in progress (or waiting to reconnect)
 *   AUTHENTICATING  the HMAC challenge-response, then HELLO/WELCOME; tight frame limit
 *   READY           messages flow both ways
 *   DRAINING        closing: no more input, the output queue is flushed
 *   CLOSED          gone (a client with reconnect goes back to CONNECTING) */
typedef enum dlc_conn_state {
    DLC_CONN_CONNECTING,
    DLC_CONN_AUTHENTICATING,
    DLC_CONN_READY,
    DLC_CONN_DRAINING,
    DLC_CONN_CLOSED,
    DLC_CONN_STATE_COUNT
} dlc_conn_state;

/* "connecting", "authenticating", "ready", "draining", "closed"; NULL out of range. */
DLC_API const char *dlc_conn_state_name(dlc_conn_state s);

typedef struct dlc_net_config {
    /* The run's secret (borrowed during dlc_net_new, copied): both ends prove they know it
     * with HMAC-SHA256 before anything else.  Or secret_file, a file holding it (trailing
     * newline dropped).  Neither: refused unless insecure = 1 (no authentication; for
     * tests on loopback only). */
    const void *secret;
    size_t secret_len;
    const char *secret_file;
    int insecure;
    /* The HELLO this side sends (client) or the terms it offers (server); NULL: no
     * handshake beyond authentication (a bare transport; READY right after auth). */
    const dlc_hello *hello;
    /* Payload sizes of the model (copied); NULL: payload-carrying frames are refused. */
    const dlc_proto_layout *layout;
    size_t frame_max;        /* largest frame accepted after auth (DLC_PROTO_FRAME_MAX_DEFAULT) */
    size_t out_max;          /* bytes queued for one peer before dlc_net_send refuses (256 MiB;
                              * a frame to an empty queue always goes, up to frame_max) */
    size_t in_max;           /* bytes of received frames waiting in dlc_net_poll's queue before
                              * the I/O thread stops reading sockets (512 MiB); it reads again
                              * once they are below half, and a peer is not timed out for
                              * the silence meanwhile (its timeout starts again then) */
    /* One memory budget for the whole net (1 GiB; at least frame_max): the bytes queued
     * for output to every peer, plus received frames waiting for dlc_net_poll, plus the
     * frames being received.  A send beyond it is refused (DLC_ERR_RANGE, back-pressure;
     * DRAINED follows once the net is below mem_max / 2); a frame with a payload that
     * does not fit waits, its connection not read meanwhile (and not timed out: the
     * silence is this side's), until it fits.  Each READY peer's queue is bounded by its
     * share, mem_max / the READY peers (as by out_max; a frame always fits an empty
     * queue), and a peer whose queue stays above its share for timeout_s (the share
     * shrank as peers joined) is closed with ERROR overloaded, its queue dropped. */
    size_t mem_max;
    int max_peers;           /* server: connections beyond this get ERROR overloaded (1024) */
    /* Server: connections accepted and not yet authenticated (not yet past the HMAC
     * proof), in all (64) and from one source address (8), so idle sockets cannot fill
     * max_peers.  A new connection never waits behind them: beyond max_unauth_per_addr
     * the one of its address least far in the handshake (the oldest of those) gives way
     * (ERROR overloaded, closed), so a flood from a learner's own address cannot lock it
     * out; beyond max_unauth (or at max_peers) the oldest unauthenticated connection of
     * the address holding the most gives way. */
    int max_unauth;
    int max_unauth_per_addr;
    double heartbeat_s;      /* send a HEARTBEAT when nothing was queued for this long (1 s); 0 off.
                              * Plain TCP: control frames (heartbeats, BYE, ERROR, the
                              * handshake's) overtake queued payloads at the next frame
                              * boundary; over TLS they keep their place */
    double timeout_s;        /* a READY peer silent this long is lost (5 s): ERROR timeout.
                              * A frame being received counts as life while it arrives at
                              * its observed rate (docs/transport.md); a trickle does not */
    double auth_timeout_s;   /* a peer must be READY within this (5 s) */
    double reconnect_min_s;  /* client: first reconnect delay (0.1 s), doubled per failure (per
                              * round of its alternates: dlc_net_connect), */
    double reconnect_max_s;  /*   up to this (10 s), each +-50% jitter; reconnect_max_s = 0: never */
    double drain_timeout_s;  /* closing waits this long for the output to flush (5 s) */
    /* TLS (OpenSSL bufferevents) on every connection of this net: a server needs
     * tls_cert and tls_key (PEM files); a client checks the server's certificate
     * against tls_ca (PEM) unless tls_ca is NULL and tls_insecure = 1. */
    int tls;
    const char *tls_cert, *tls_key, *tls_ca;
    int tls_insecure;
    uint64_t seed;           /* reconnect jitter; 0: from the clock */
    /* 1: no I/O thread; the event loop runs inside dlc_net_poll (and dlc_net_free), on
     * the one thread that polls, so a frame that arrives while it polls reaches it
     * without a thread hand-off.  Everything else (heartbeats, timeouts, reconnects,
     * output beyond what a send writes at once, emulated latency) happens only while
     * that thread is in dlc_net_poll: poll at least every heartbeat_s.  For a thread
     * whose job is the network (a syncer's loop); a learner that computes between polls
     * keeps the I/O thread (0, the default).  Other threads may still send, connect,
     * close and shape; dlc_net_listen must come from the polling thread or while none
     * polls (the loop takes no locks: only the thread running it touches libevent). */
    int inline_io;
    /* Decoding on the receiving side's I/O thread: when set, called on the thread that
     * reads the socket (the I/O thread; with inline_io the polling one) for each frame
     * with a tensor payload (any but a REPLICA's) from a READY peer, before it is
     * queued.  It may decode the payload into *values, an array of *n floats from
     * malloc, which the event then carries (event.values, event.nvalues; freed by
     * dlc_net_event_release) in place of the payload (released then:
     * frame.msg.payload NULL, len 0).  Returning anything but
     * DLC_OK, or leaving *values NULL, queues the frame as it came (the poller then
     * decodes it, and finds the same error).  The decoded bytes count against in_max and
     * mem_max like received ones. */
    dlc_status (*decode)(const dlc_frame *f, float **values, int64_t *n, void *arg);
    void *decode_arg;
    /* The clock of the protocol's timers, in seconds (positive, any origin above 0; never
     * going back):
     * timeouts and heartbeats, the auth, drain and takeover deadlines, reconnect delays,
     * the emulated latency (dlc_net_shape).  Called from any thread (the I/O thread, a
     * sender's), so it must be thread-safe.  NULL (default): the monotonic wall clock.
     * A host or a test that moves its own clock calls dlc_net_clock_moved after each move,
     * so that timers now due fire at once.  What stays on the wall clock whatever this
     * says: the bandwidth caps (bytes per real second), the timeouts of the calls
     * themselves (dlc_net_poll's) and the bound of dlc_net_free's drain. */
    double (*clock)(void *arg);
    void *clock_arg;
} dlc_net_config;

DLC_API dlc_net_config dlc_net_default_config(void);

typedef struct dlc_net dlc_net; /* opaque */

/* Checks cfg (every error names the field) and starts the I/O thread (none with
 * inline_io); NULL on error. */
DLC_API dlc_net *dlc_net_new(const dlc_net_config *cfg);
/* Closes every peer (flushing output up to drain_timeout_s), joins the I/O thread, frees
 * everything, including events not yet polled.  With inline_io the flush runs here, on
 * the caller's thread; a peer answers the close only if its own loop runs meanwhile
 * (else the wait is drain_timeout_s).  NULL is a no-op. */
DLC_API void dlc_net_free(dlc_net *net);

/* Listens on "HOST:PORT" (PORT 0: any free port; "[::1]:7070" for IPv6).  Returns the
 * port bound (> 0) or a negative dlc_status: a malformed address, a port in use. */
DLC_API int dlc_net_listen(dlc_net *net, const char *addr);
/* Connects to "HOST:PORT" (numeric host, or a name resolved once now); returns the peer
 * id at once; DLC_NET_READY or DLC_NET_LOST follow as events.  With reconnect, a lost
 * connection is retried with backoff under the same id.
 * Alternates: "A|B|C" (up to DLC_NET_ALTERNATES_MAX addresses, each HOST:PORT, all
 * checked and resolved now, a bad one named) is one peer that connects to A first; each
 * attempt after a failure, a hung connect or a lost connection goes to the next address,
 * round robin, with the same backoff (it starts again from reconnect_min_s once a
 * connection was READY).  ERROR shutdown from one of them (a server stopping, or one
 * refusing learners: dlc_net_set_refusing) is not final then, as it is with one
 * address: the next address is tried.  Events (READY's text, LOST's from) and the peer's
 * counters (addr) name the address of the attempt. */
#define DLC_NET_ALTERNATES_MAX 4
DLC_API int dlc_net_connect(dlc_net *net, const char *addr);

/* Queues frame f to peer.  The prefix and header are encoded now (into the queue);
 * the payload f->msg.payload[0..len) is sent by reference, never copied: the net owns it
 * from this call on and calls free_payload(payload, arg) once it is written or
 * dropped (free_payload NULL: the caller keeps the payload alive until the
 * DLC_NET_SENT event for this frame, or the peer's DLC_NET_LOST).  Returns DLC_OK, or
 * without queuing anything (the payload still the caller's):
 *   DLC_ERR_STATE  the peer is not READY (unknown, connecting, lost, closing);
 *   DLC_ERR_RANGE  back-pressure: the peer's queued bytes plus this frame exceed out_max
 *                  or its share of mem_max (mem_max / the READY peers; neither for a
 *                  frame to an empty queue), or the net's memory plus this frame
 *                  exceeds mem_max (retry after
 *                  DLC_NET_DRAINED), or the command queue is full;
 *   DLC_ERR_ARG    a frame that cannot be encoded (named), or of a type this side of
 *                  this connection does not send: a learner's client sends HEARTBEAT,
 *                  CONTRIBUTION, GRADIENT, REPLAY, BYE; the syncer's side of a learner's
 *                  connection HEARTBEAT, FRAGMENT, RESYNC, GRADIENT_AVG, BYE; a standby's
 *                  client HEARTBEAT, REPLICA_ACK, BYE; the primary's side of it
 *                  HEARTBEAT, REPLICA, BYE (docs/protocol.md, "Message types").
 * Thread-safe. */
DLC_API dlc_status dlc_net_send(dlc_net *net, int peer, const dlc_frame *f,
                                void (*free_payload)(const void *payload, void *arg), void *arg);
/* Closes peer gracefully: stops reading, flushes what is queued, then closes (a client
 * does not reconnect).  Thread-safe; an unknown peer is DLC_ERR_STATE. */
DLC_API dlc_status dlc_net_close(dlc_net *net, int peer);
/* A client's connection closed (what is queued flushed first, as dlc_net_close) as if it
 * were lost: LOST follows, and with reconnect it connects again, with its backoff, at its
 * next alternate address (dlc_net_connect "A|B"): a learner leaves a syncer it found to
 * be an older incarnation than the one it follows (rt/lrt.c).  A server's side or a
 * client without reconnect is closed as by dlc_net_close. */
DLC_API dlc_status dlc_net_move_on(dlc_net *net, int peer);

/* WAN emulation of the link to peer, on this side's sending direction: a bandwidth cap
 * in bytes/s (0 = none; a token bucket refilled every 5 ms) and an added one-way latency
 * in seconds (frames are held that long before they reach the socket).  Takes effect
 * at once, also on a running transfer; thread-safe.  peer -1: every current and future
 * peer of this net. */
DLC_API dlc_status dlc_net_shape(dlc_net *net, int peer, double rate_bytes_s, double latency_s);
/* The same on this side's receiving direction of the link to peer, so that one end can
 * emulate both directions of a link: the socket is read at most rate_bytes_s (0 = no cap;
 * while the bucket is empty the socket is not read, and TCP pushes back on the sender),
 * and every frame that arrives is held latency_s before it becomes an event (in order;
 * held frames still count against mem_max, and those held when the connection ends come
 * before its LOST).  Liveness is the socket's: a frame held does not make the peer
 * silent.  Thread-safe; peer -1: every current and future peer. */
DLC_API dlc_status dlc_net_shape_in(dlc_net *net, int peer, double rate_bytes_s, double latency_s);
/* Cuts the link to peer (cut 1) or restores it (0): while cut, this side neither writes
 * nor reads that connection.  What is sent queues (up to out_max), what the peer sends
 * waits in the kernel and then in the peer's queue, heartbeats do not get through, so
 * both ends lose each other after timeout_s unless the cut ends first, when everything
 * queued flows again.  A cut connection that closes (a timeout, dlc_net_close) closes at
 * once, flushing nothing.  On a client the cut holds across its reconnects (nothing
 * reaches the server until it ends).  Thread-safe; peer must be a connection (>= 0). */
DLC_API dlc_status dlc_net_cut(dlc_net *net, int peer, int cut);

/* The clock given in the config (dlc_net_config.clock) moved: every connection's timers
 * are checked against it now, so a timeout, heartbeat or reconnect now due happens
 * without waiting for the wall clock.  With the I/O thread, it returns once that thread
 * has done so (a LOST now due is queued, a heartbeat written): call it from any thread
 * but that one (not from the decode callback).  With inline_io the next dlc_net_poll
 * does it (one under way returns, 0 if nothing arrived, so that its caller sees the new
 * time too).  Harmless without an injected clock.  Thread-safe.  The clock is the
 * host's to keep plausible: moved on again before the net has read what arrived meanwhile
 * (wait for the events a move should bring first), a peer's frames may still sit in its
 * socket when its timeout falls due. */
DLC_API dlc_status dlc_net_clock_moved(dlc_net *net);

/* A client's HELLO asks for learner id `id` (-1: any) on every connection it makes from
 * now on (a learner of several syncer shards, given its id by the first, claims it from
 * the others; its reconnects claim it too).  Thread-safe.  DLC_ERR_ARG without a hello. */
DLC_API dlc_status dlc_net_set_learner(dlc_net *net, int id);

/* A server refuses while `why` is set (not NULL, not ""; copied, at most
 * DLC_PROTO_TEXT_MAX bytes): every HELLO, a learner's or a standby's, is answered ERROR
 * shutdown with `why` as its text and closed (DLC_NET_REFUSED for the host); connections
 * already READY stay.  NULL or "" serves again.  For a standby syncer, which serves
 * neither learners nor standbys of its own until it takes over: a learner given it among
 * its alternates (dlc_net_connect "A|B") tries its next address, a standby started as
 * the standby of this one retries later (rt/srt.c).  Thread-safe.  DLC_ERR_ARG without
 * a hello, or for a longer text. */
DLC_API dlc_status dlc_net_set_refusing(dlc_net *net, const char *why);

typedef enum dlc_net_event_kind {
    DLC_NET_READY,   /* peer authenticated (and welcomed): frames may flow; hello holds
                      * the WELCOME (client) or the peer's HELLO (server), its learner the
                      * id given, or -1 with DLC_CAP_STANDBY in caps on a standby
                      * connection; text the peer's address */
    DLC_NET_FRAME,   /* a frame from peer: frame (payload borrowed from the event).  Only
                      * the peer's role's types arrive: the syncer's side of a learner's
                      * connection takes HEARTBEAT, CONTRIBUTION, GRADIENT, REPLAY, BYE; a
                      * learner's client HEARTBEAT, FRAGMENT, RESYNC, GRADIENT_AVG, BYE;
                      * the primary's side of a standby connection HEARTBEAT, REPLICA_ACK,
                      * BYE; a standby's client HEARTBEAT, REPLICA, BYE (anything else:
                      * ERROR unexpected, closed).  On the syncer's side of a learner's
                      * connection frame.msg.learner is the id WELCOME gave it (another
                      * id: ERROR mismatch, closed). */
    DLC_NET_SENT,    /* a frame queued with free_payload NULL was written (arg = its arg) */
    DLC_NET_DRAINED, /* peer's queued bytes fell below out_max / 2 (and the net's below
                      * mem_max / 2) after a refusal */
    DLC_NET_LOST,    /* peer's connection ended: code (dlc_proto_errcode) and text say why;
                      * a reconnecting client follows with READY again */
    DLC_NET_REFUSED, /* server: a connection refused before READY (bad auth, version,
                      * malformed first frame, overload or evicted for a newer one,
                      * timeout, a learner while dlc_net_set_refusing); code and text say
                      * why */
    DLC_NET_EVENT_COUNT
} dlc_net_event_kind;

typedef struct dlc_net_event {
    dlc_net_event_kind kind;
    int peer;
    dlc_frame frame;        /* DLC_NET_FRAME; frame.hello for DLC_NET_READY */
    int code;               /* DLC_NET_LOST, DLC_NET_REFUSED: dlc_proto_errcode */
    char text[DLC_PROTO_TEXT_MAX + 128]; /* why, for LOST and REFUSED; the peer address for READY */
    void *arg;              /* DLC_NET_SENT */
    float *values;          /* DLC_NET_FRAME: the payload as decode (config) decoded it, or NULL */
    int64_t nvalues;
    void *owned_;           /* the received bytes; freed by dlc_net_event_release */
    char from[80];          /* LOST, REFUSED: the peer's address ("127.0.0.1:5555"), "" unknown */
} dlc_net_event;

/* Takes the next event into *ev: 1, or 0 when none arrived within timeout_ms (0: do
 * not wait, -1: wait for ever), or a negative dlc_status.  Call dlc_net_event_release
 * on every event taken.  With inline_io it runs the event loop meanwhile, and one thread
 * at a time may call it (a second gets DLC_ERR_STATE). */
DLC_API int dlc_net_poll(dlc_net *net, dlc_net_event *ev, int timeout_ms);
DLC_API void dlc_net_event_release(dlc_net_event *ev);

/* Counters of one peer (or the sum of all, peer -1): bytes and frames by frame type and
 * direction, plus the connection-level ones. */
typedef struct dlc_net_counters {
    uint64_t bytes_out[DLC_FRAME_TYPE_COUNT], frames_out[DLC_FRAME_TYPE_COUNT];
    uint64_t bytes_in[DLC_FRAME_TYPE_COUNT], frames_in[DLC_FRAME_TYPE_COUNT];
    uint64_t queued;         /* bytes queued for sending now */
    uint64_t refused_full;   /* dlc_net_send refusals for back-pressure (out_max or mem_max) */
    uint64_t auth_failures;  /* server: connections that failed authentication */
    uint64_t protocol_errors; /* connections closed for a protocol violation */
    uint64_t timeouts;       /* peers lost to silence */
    uint64_t reconnects;     /* client: successful reconnects */
    uint64_t accepted;       /* server: connections accepted */
    uint64_t overloaded;     /* server: connections refused or evicted for max_peers,
                              * max_unauth, max_unauth_per_addr */
    uint64_t unauth;         /* server, the sum only: connections not yet authenticated now */
    uint64_t mem;            /* the sum only: bytes counted against mem_max now */
    int state;               /* dlc_conn_state of the peer (-1 for the sum) */
    char addr[80];           /* the peer's address (a client's: that of its current or last
                              * attempt, one of its alternates); "" for the sum */
} dlc_net_counters;

DLC_API dlc_status dlc_net_get_counters(dlc_net *net, int peer, dlc_net_counters *out);

/* ---- authentication, exposed for tests and tools (net/auth.c) ---- */

/* HMAC-SHA256 proofs: server = HMAC(secret, "diloco-server" | nc | ns),
 * client = HMAC(secret, "diloco-client" | ns | nc). */
DLC_API void dlc_auth_proof(const void *secret, size_t secret_len, int server, const uint8_t nc[DLC_PROTO_NONCE],
                            const uint8_t ns[DLC_PROTO_NONCE], uint8_t mac[DLC_PROTO_MAC]);
/* Fresh random bytes (OpenSSL RAND_bytes): DLC_OK or DLC_ERR_IO. */
DLC_API dlc_status dlc_auth_nonce(uint8_t *out, size_t n);
/* Constant-time comparison of two MACs: 1 equal, 0 not. */
DLC_API int dlc_auth_equal(const uint8_t a[DLC_PROTO_MAC], const uint8_t b[DLC_PROTO_MAC]);
/* Reads a secret file (at most 4096 bytes, trailing newlines dropped, not empty) into
 * out[0..cap); returns its length or a negative dlc_status naming the path. */
DLC_API int64_t dlc_auth_read_secret(const char *path, uint8_t *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
