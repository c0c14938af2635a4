/* conn.c - one connection of the transport (net.h, docs/transport.md): its state
 * machine, the handshake, framing in and out, timers, closing and reconnecting.  Runs on
 * the I/O thread only (with inline_io: the thread in dlc_net_poll or dlc_net_free); what
 * other threads read of a conn is under net->lock (internal.h). */
#include "diloco/mem.h"
#include "internal.h"

static const char *const state_names[] = {"connecting", "authenticating", "ready", "draining", "closed"};
_Static_assert(sizeof state_names / sizeof state_names[0] == DLC_CONN_STATE_COUNT, "one name per conn state");

const char *dlc_conn_state_name(dlc_conn_state s) {
    return (unsigned)s < DLC_CONN_STATE_COUNT ? state_names[s] : NULL;
}

static double rng_unit(dlc_net *net) { /* xorshift64*, under lock or on the I/O thread */
    net->rng ^= net->rng >> 12, net->rng ^= net->rng << 25, net->rng ^= net->rng >> 27;
    return (double)((net->rng * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

void dlcn_wake(dlc_net *net) {
    if (net->wake_fd < 0) {
        event_active(net->wake, EV_READ, 0);
        return;
    }
    uint64_t one = 1; /* inline_io: no libevent call off the loop's thread */
    ssize_t r = write(net->wake_fd, &one, sizeof one);
    (void)r; /* EAGAIN: the counter is full, so the loop is woken already */
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

static pthread_mutex_t rx_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *rx_cache[NET_RX_CACHE];

/* A buffer's capacity sits in the size_t before it. */
uint8_t *dlcn_rx_alloc(size_t n) {
    if (n >= NET_RX_CACHE_MIN) {
        pthread_mutex_lock(&rx_lock);
        for (int i = 0; i < NET_RX_CACHE; i++) {
            uint8_t *b = rx_cache[i];
            size_t cap = b ? ((size_t *)b)[-1] : 0;
            if (b && cap >= n && cap / 2 <= n) {
                rx_cache[i] = NULL;
                pthread_mutex_unlock(&rx_lock);
                return b;
            }
        }
        pthread_mutex_unlock(&rx_lock);
    }
    size_t *p = dlc_big_alloc(sizeof(size_t) + n); /* freed with free() */
    if (!p) return NULL;
    p[0] = n;
    return (uint8_t *)(p + 1);
}

void dlcn_rx_free(uint8_t *b) {
    if (!b) return;
    size_t cap = ((size_t *)b)[-1];
    if (cap >= NET_RX_CACHE_MIN && cap <= NET_RX_CACHE_MAX) {
        pthread_mutex_lock(&rx_lock);
        size_t held = 0;
        for (int i = 0; i < NET_RX_CACHE; i++) held += rx_cache[i] ? ((size_t *)rx_cache[i])[-1] : 0;
        for (int i = 0; held + cap <= NET_RX_CACHE_BYTES && i < NET_RX_CACHE; i++)
            if (!rx_cache[i]) {
                rx_cache[i] = b;
                b = NULL;
                break;
            }
        pthread_mutex_unlock(&rx_lock);
        if (!b) return;
    }
    free((size_t *)b - 1);
}

evnode *dlcn_ev_new(dlc_net_event_kind kind, int peer) {
    evnode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->ev.kind = kind, n->ev.peer = peer;
    return n;
}

/* An event for a received frame: like dlcn_ev_new, but the frame is left for
 * the decoder to initialize, not zeroed twice. */
static evnode *ev_new_frame(int peer) {
    evnode *n = malloc(sizeof *n);
    if (!n) return NULL;
    n->next = NULL, n->bytes = 0;
    n->ev.kind = DLC_NET_FRAME, n->ev.peer = peer, n->ev.code = 0, n->ev.text[0] = '\0';
    n->ev.arg = NULL, n->ev.owned_ = NULL, n->ev.values = NULL, n->ev.nvalues = 0, n->ev.from[0] = '\0';
    return n;
}

/* Takes ownership of n. */
void dlcn_ev_post(dlc_net *net, evnode *n) {
    if (!n) return;
    dlc_text_clean(n->ev.text); /* it may quote a peer, cut at a byte count */
    pthread_mutex_lock(&net->lock);
    if (net->ev_tail) net->ev_tail->next = n;
    else net->ev_head = n;
    net->ev_tail = n;
    atomic_fetch_add_explicit(&net->ev_bytes, n->bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&net->ev_count, 1, memory_order_release);
    pthread_cond_broadcast(&net->cond);
    pthread_mutex_unlock(&net->lock);
}

void dlcn_ev_post_from(dlc_net *net, dlc_net_event_kind kind, int peer, int code, const char *text, const char *from) {
    evnode *n = dlcn_ev_new(kind, peer);
    if (!n) return;
    n->ev.code = code;
    snprintf(n->ev.text, sizeof n->ev.text, "%s", text ? text : "");
    snprintf(n->ev.from, sizeof n->ev.from, "%s", from ? from : "");
    dlcn_ev_post(net, n);
}

void dlcn_ev_post_simple(dlc_net *net, dlc_net_event_kind kind, int peer, int code, const char *text) {
    dlcn_ev_post_from(net, kind, peer, code, text, NULL);
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

/* The list of server conns not yet authenticated (max_unauth); net->lock held. */
static void unauth_add(conn *c) {
    dlc_net *net = c->net;
    c->unauth = 1, c->ua_next = NULL, c->ua_prev = net->ua_tail;
    if (net->ua_tail) net->ua_tail->ua_next = c;
    else net->ua_head = c;
    net->ua_tail = c;
    net->n_unauth++;
}

static void unauth_remove(conn *c) {
    dlc_net *net = c->net;
    if (!c->unauth) return;
    if (c->ua_prev) c->ua_prev->ua_next = c->ua_next;
    else net->ua_head = c->ua_next;
    if (c->ua_next) c->ua_next->ua_prev = c->ua_prev;
    else net->ua_tail = c->ua_prev;
    c->unauth = 0, c->ua_prev = c->ua_next = NULL;
    net->n_unauth--;
}

static void set_state(conn *c, dlc_conn_state to) {
    DLC_ASSERT((unsigned)to < DLC_CONN_STATE_COUNT);
    DLC_ASSERT(legal(c->state, to));
    pthread_mutex_lock(&c->net->lock);
    if (to != DLC_CONN_AUTHENTICATING) unauth_remove(c);
    c->net->n_ready += (to == DLC_CONN_READY) - (c->state == DLC_CONN_READY);
    if (to != DLC_CONN_READY) c->over_t = 0;
    c->state = to;
    if (to != DLC_CONN_READY) c->direct = 0;
    pthread_mutex_unlock(&c->net->lock);
}

void dlcn_conn_arm(conn *c);
void dlcn_conn_close_now(conn *c);

/* ---- output ---- */

void dlcn_outframe_free(outframe *f) {
    if (f->free_payload) f->free_payload(f->payload, f->arg);
    free(f);
}

/* The peer's queued bytes drop by n; DRAINED once below half its limit (out_max or its
 * share of mem_max, the smaller) after a refusal. */
void dlcn_unqueue(dlc_net *net, int peer, unsigned gen, size_t n, int app) {
    int drained = 0;
    pthread_mutex_lock(&net->lock);
    conn *c = peer >= 0 && peer < net->npeers ? net->peers[peer] : NULL;
    if (c && c->gen == gen) {
        dlcn_queued_sub(c, n, app);
        if (c->refused && c->queued < dlcn_limit(net) / 2 && (!net->mem_refused || dlcn_mem(net) < net->cfg.mem_max / 2))
            c->refused = 0, drained = 1;
    }
    pthread_mutex_unlock(&net->lock);
    if (drained) dlcn_ev_post_simple(net, DLC_NET_DRAINED, peer, 0, NULL);
    dlcn_mem_freed(net);
}

void dlcn_mem_freed(dlc_net *net) {
    if (!net->mem_refused && !net->mem_waiting) return; /* a stale look only delays to the next free */
    evnode *list = NULL;
    pthread_mutex_lock(&net->lock);
    int kick = net->mem_waiting > 0;
    if (net->mem_refused && dlcn_mem(net) < net->cfg.mem_max / 2) {
        net->mem_refused = 0;
        for (int i = 0; i < net->npeers; i++) { /* every peer refused, whose own queue allows */
            conn *c = net->peers[i];
            if (!c || !c->refused || c->queued >= dlcn_limit(net) / 2) continue;
            evnode *n = dlcn_ev_new(DLC_NET_DRAINED, c->id);
            if (!n) break;
            c->refused = 0, n->next = list, list = n;
        }
    }
    pthread_mutex_unlock(&net->lock);
    while (list) {
        evnode *n = list;
        list = n->next, n->next = NULL;
        dlcn_ev_post(net, n);
    }
    if (kick && !atomic_exchange_explicit(&net->mem_kick, 1, memory_order_acq_rel)) dlcn_wake(net);
}

void dlcn_frame_done(const outframe *f) {
    if (f->notify) { /* the transport's own frames (auth, heartbeats, ...) post nothing */
        evnode *n = dlcn_ev_new(DLC_NET_SENT, f->peer);
        if (n) n->ev.arg = f->arg, dlcn_ev_post(f->net, n);
    }
    if (f->free_payload) f->free_payload(f->payload, f->arg);
}

void dlcn_payload_written(const void *data, size_t len, void *arg) {
    (void)data, (void)len;
    outframe *f = arg;
    dlc_net *net = f->net;
    int peer = f->peer;
    unsigned gen = f->gen;
    size_t total = f->total;
    int app = dlcn_app_frame(f);
    dlcn_frame_done(f);
    free(f);
    dlcn_unqueue(net, peer, gen, total, app);
}

/* Hands f to the socket buffer (header copied, payload by reference). */
void dlcn_count_out(conn *c, const outframe *f, int direct) {
    if (direct) {
        c->direct_bytes_out[f->type] += f->total, c->direct_frames_out[f->type]++;
    } else {
        dlcn_count(&c->bytes_out[f->type], f->total);
        dlcn_count(&c->frames_out[f->type], 1);
    }
    /* the idle heartbeat waits, as after any frame (relaxed: a stamp, ordering nothing) */
    atomic_store_explicit(&c->last_tx, dlcn_now_coarse(c->net), memory_order_relaxed);
}

static void out_write(conn *c, outframe *f) {
    dlcn_count_out(c, f, 0);
    if (c->own_out) {
        dlcn_out_append(c, f);
        return;
    }
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (evbuffer_add(out, f->hdr, f->hlen) != 0) {
        dlcn_outframe_free(f);
        dlcn_conn_fail(c, DLC_PERR_INTERNAL, "out of memory queuing a frame");
        return;
    }
    if (f->len == 0) {
        dlcn_payload_written(NULL, 0, f);
        return;
    }
    if (evbuffer_add_reference(out, f->payload, f->len, dlcn_payload_written, f) != 0) {
        dlcn_payload_written(NULL, 0, f);
        dlcn_conn_fail(c, DLC_PERR_INTERNAL, "out of memory queuing a payload");
    }
}

void dlcn_update_direct(conn *c) {
    pthread_mutex_lock(&c->net->lock);
    c->direct = c->state == DLC_CONN_READY && c->own_out && c->wev && c->rate <= 0 && c->latency <= 0 &&
                !c->delay_head && c->cmd_pending == 0 && !c->cut;
    pthread_mutex_unlock(&c->net->lock);
}

/* Queues f behind any held frames; due now goes straight to the socket buffer. */
void dlcn_out_queue(conn *c, outframe *f) {
    f->due = dlcn_now(c->net) + c->latency;
    if (!c->delay_head && c->latency <= 0) {
        out_write(c, f);
        return;
    }
    f->next = NULL;
    if (c->delay_tail) c->delay_tail->next = f;
    else c->delay_head = f;
    c->delay_tail = f;
}

void dlcn_out_release(conn *c) {
    double t = dlcn_now(c->net);
    while (c->delay_head && c->delay_head->due <= t + 1e-4 && c->state != DLC_CONN_CLOSED) {
        outframe *f = c->delay_head;
        c->delay_head = f->next;
        if (!c->delay_head) c->delay_tail = NULL;
        out_write(c, f);
        if (!c->delay_head) dlcn_update_direct(c);
    }
}

/* Encodes a frame of the transport's own (auth, hello, heartbeat, error) and queues it. */
static void send_own(conn *c, dlc_frame *f) {
    uint8_t hdr[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX];
    int64_t n = dlc_proto_encode(f, NULL, hdr, sizeof hdr);
    if (n < 0) {
        dlcn_conn_fail(c, DLC_PERR_INTERNAL, "cannot encode a %s: %s", dlc_frame_type_name(f->type), dlc_last_error());
        return;
    }
    outframe *o = calloc(1, sizeof *o + (size_t)n);
    if (!o) return;
    o->net = c->net, o->peer = c->id, o->gen = c->gen, o->type = f->type, o->hlen = (size_t)n, o->total = (size_t)n;
    memcpy(o->hdr, hdr, (size_t)n);
    pthread_mutex_lock(&c->net->lock);
    dlcn_queued_add(c, o->total, 0); /* the transport's own frames are never refused for mem_max */
    pthread_mutex_unlock(&c->net->lock);
    dlcn_out_queue(c, o);
    if (c->delay_head) dlcn_conn_arm(c);
}

static void send_error(conn *c, int code, const char *text) {
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_ERROR);
    f.code = code;
    snprintf(f.text, sizeof f.text, "%s", text);
    send_own(c, &f);
}

/* ---- closing ---- */

static int output_empty(conn *c) {
    return c->own_out ? dlcn_out_empty(c) : evbuffer_get_length(bufferevent_get_output(c->bev)) == 0;
}

static void finish_draining(conn *c);
void dlcn_write_done(conn *c) { finish_draining(c); }

void dlcn_conn_fail_io(conn *c, int err) {
    if (c->state == DLC_CONN_CLOSED) return;
    if (!c->end_code || c->state != DLC_CONN_DRAINING) {
        c->end_code = DLC_PERR_NONE;
        snprintf(c->end_text, sizeof c->end_text, "write: %s", strerror(err));
    }
    dlcn_conn_close_now(c);
}

static void count_end(conn *c) {
    dlc_net *net = c->net;
    pthread_mutex_lock(&net->lock);
    if (c->end_code == DLC_PERR_AUTH && !c->client) net->total.auth_failures++;
    else if (c->end_code == DLC_PERR_TIMEOUT) net->total.timeouts++;
    else if (c->end_code == DLC_PERR_OVERLOADED) net->total.overloaded++;
    else if (c->end_code != DLC_PERR_NONE && c->end_code != DLC_PERR_SHUTDOWN) net->total.protocol_errors++;
    pthread_mutex_unlock(&net->lock);
}

/* Everything queued is written: close.  On plain TCP, half-close first and wait for the
 * peer's EOF (reading and dropping what it still sends), so the last frames are not lost
 * to a reset: closing a socket with unread input makes TCP send RST, and the peer may
 * then drop what it had not read yet.  The drain deadline bounds the wait. */
static void finish_draining(conn *c) {
    if (c->state != DLC_CONN_DRAINING || c->delay_head || !output_empty(c)) return;
    evutil_socket_t fd = c->own_out && c->bev ? bufferevent_getfd(c->bev) : -1;
    if (fd < 0) {
        dlcn_conn_close_now(c);
        return;
    }
    if (!c->half_closed) shutdown(fd, SHUT_WR);
    c->half_closed = 1;
}

/* DRAINING: no new frames in, what is queued goes out, then finish_draining. */
static void start_draining(conn *c) {
    dlcn_in_drain(c); /* input is read and dropped from now on, never left to cause a reset */
    set_state(c, DLC_CONN_DRAINING);
    c->deadline = dlcn_now(c->net) + c->net->cfg.drain_timeout_s;
    finish_draining(c);
    if (c->state == DLC_CONN_DRAINING) dlcn_conn_arm(c);
}

/* Sends ERROR(code, text) if the connection is up, then drains and closes: the peer
 * is told why, and the rest of the server goes on. */
void dlcn_conn_fail(conn *c, int code, const char *fmt, ...) {
    if (c->state == DLC_CONN_DRAINING || c->state == DLC_CONN_CLOSED) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->end_text, sizeof c->end_text, fmt, ap);
    va_end(ap);
    c->end_code = code;
    count_end(c);
    if (c->state == DLC_CONN_CONNECTING || !c->bev) {
        dlcn_conn_close_now(c);
        return;
    }
    send_error(c, code, c->end_text);
    dlcn_out_release(c);
    if (code == DLC_PERR_TIMEOUT || code == DLC_PERR_OVERLOADED || c->cut) {
        /* a silent peer reads nothing either: draining would only hold its LOST back
         * for drain_timeout_s (a paused learner reported 5 s late); the ERROR goes if
         * the socket takes it now.  A peer closed for holding more than its share of
         * memory is not flushed either.  Nothing passes a cut link at all. */
        dlcn_conn_close_now(c);
        return;
    }
    start_draining(c);
}

/* Starts a graceful close: drop input, flush, close. */
void dlcn_conn_drain(conn *c, int code, const char *text) {
    if (c->state == DLC_CONN_DRAINING || c->state == DLC_CONN_CLOSED) return;
    c->end_code = code;
    if (text != c->end_text) snprintf(c->end_text, sizeof c->end_text, "%s", text);
    if (c->state == DLC_CONN_CONNECTING || !c->bev || c->cut) { /* a cut link flushes nothing */
        dlcn_conn_close_now(c);
        return;
    }
    dlcn_out_release(c);
    start_draining(c);
}

/* Takes c out of the peer table for good; its memory waits in the graveyard until
 * dlcn_reap(), so a callback still running on it (dlcn_on_read after a frame closed it) reads
 * valid memory. */
void dlcn_conn_retire(conn *c) {
    dlc_net *net = c->net;
    if (c->timer) event_del(c->timer);
    pthread_mutex_lock(&net->lock);
    net->peers[c->id] = NULL;
    for (int t = 0; t < DLC_FRAME_TYPE_COUNT; t++) {
        net->total.bytes_out[t] += c->bytes_out[t] + c->direct_bytes_out[t];
        net->total.frames_out[t] += c->frames_out[t] + c->direct_frames_out[t];
        net->total.bytes_in[t] += c->bytes_in[t], net->total.frames_in[t] += c->frames_in[t];
    }
    c->grave = atomic_load_explicit(&net->grave, memory_order_relaxed);
    atomic_store_explicit(&net->grave, c, memory_order_release);
    pthread_mutex_unlock(&net->lock);
}

/* Frees the retired conns (the I/O thread, between callbacks; or dlc_net_free). */
void dlcn_reap(dlc_net *net) {
    if (!atomic_load_explicit(&net->grave, memory_order_acquire)) return;
    pthread_mutex_lock(&net->lock);
    conn *c = atomic_exchange_explicit(&net->grave, NULL, memory_order_acquire);
    pthread_mutex_unlock(&net->lock);
    while (c) {
        conn *next = c->grave;
        if (c->timer) event_free(c->timer);
        if (c->bucket) ev_token_bucket_cfg_free(c->bucket);
        free(c->ib);
        free(c->alts);
        pthread_mutex_destroy(&c->wlock);
        free(c);
        c = next;
    }
}

void dlcn_start_connect(conn *c);

/* A client given alternate addresses (dlc_net_connect "A|B|C") makes its next attempt at
 * the next one, round robin: its address, name (events, counters) and TLS host change
 * under net->lock (dlc_net_get_counters reads the name). */
static void next_alternate(conn *c) {
    if (c->nalt <= 1) return;
    pthread_mutex_lock(&c->net->lock);
    c->alt = (c->alt + 1) % c->nalt;
    const conn_alt *a = &c->alts[c->alt];
    c->addr = a->addr, c->addrlen = a->addrlen;
    snprintf(c->name, sizeof c->name, "%s", a->name);
    snprintf(c->host, sizeof c->host, "%s", a->host);
    pthread_mutex_unlock(&c->net->lock);
}

/* Closes the socket now; posts LOST or REFUSED; a client that may reconnect waits. */
void dlcn_conn_close_now(conn *c) {
    dlc_net *net = c->net;
    if (c->state == DLC_CONN_CLOSED) return;
    bool was_connecting = c->state == DLC_CONN_CONNECTING;
    set_state(c, DLC_CONN_CLOSED);
    if (c->own_out) dlcn_out_stop(c);
    dlcn_in_stop(c); /* before the fd closes with the bufferevent */
    if (c->bev) {
        bufferevent_free(c->bev); /* payloads still referenced are released by libevent */
        c->bev = NULL;
    }
    while (c->delay_head) {
        outframe *f = c->delay_head;
        c->delay_head = f->next;
        size_t total = f->total;
        int app = dlcn_app_frame(f);
        dlcn_outframe_free(f);
        dlcn_unqueue(net, c->id, c->gen, total, app);
    }
    c->delay_tail = NULL;
    if (c->inbuf) atomic_fetch_sub_explicit(&net->rx_bytes, c->inlen, memory_order_relaxed);
    dlcn_rx_free(c->inbuf);
    c->inbuf = NULL, c->inlen = c->inhave = 0;
    c->half_closed = 0;
    pthread_mutex_lock(&net->lock);
    dlcn_queued_sub(c, c->queued, 0);
    pthread_mutex_unlock(&net->lock);
    dlcn_in_release(c, 1); /* frames held for the emulated latency: before the LOST (dropped if cut) */
    dlcn_mem_freed(net);
    if (!was_connecting || c->client)
        dlcn_ev_post_from(net, c->was_ready || c->client ? DLC_NET_LOST : DLC_NET_REFUSED, c->id, c->end_code,
                          c->end_text[0] ? c->end_text : "connection closed", c->name);
    /* a server shutting down (or refusing learners for now: dlc_net_set_refusing) is
     * final for a client of one address; one with alternates tries its next */
    bool permanent = c->end_code == DLC_PERR_AUTH || c->end_code == DLC_PERR_VERSION ||
                     c->end_code == DLC_PERR_MISMATCH || (c->end_code == DLC_PERR_SHUTDOWN && c->nalt <= 1);
    if (c->client && !c->app_closed && !permanent && !net->stopping && net->cfg.reconnect_max_s > 0) {
        c->failures++;
        /* with alternates the backoff grows per round of them, so that each address is
         * tried at each delay (a standby that took over is found as soon as its primary
         * would have been) */
        int round = c->nalt > 1 ? (c->failures - 1) / c->nalt : c->failures - 1;
        double d = net->cfg.reconnect_min_s * pow(2.0, round);
        if (d > net->cfg.reconnect_max_s) d = net->cfg.reconnect_max_s;
        d *= 0.5 + rng_unit(net); /* +-50% jitter: a cluster that lost its syncer does not return in lockstep */
        /* refused because a live connection holds this id: the server gives way once that
         * one has been silent for NET_LIVE_FRACTION of the timeout and until the timeout
         * drops it, so retries come at most a third of that window apart, one of them
         * inside it (a backoff grown to seconds would step over the window: the old
         * connection then timed out, LOST, and the takeover went unlogged) */
        double window = (1 - NET_LIVE_FRACTION) * net->cfg.timeout_s;
        if (c->end_code == DLC_PERR_CONFLICT && window > 0 && d > window / 3) d = window / 3;
        c->deadline = dlcn_now(c->net) + d;
        c->was_ready = 0;
        next_alternate(c); /* (after the LOST above, which named the address that failed) */
        set_state(c, DLC_CONN_CONNECTING);
        dlcn_conn_arm(c);
        return;
    }
    dlcn_conn_retire(c);
}

/* ---- handshake ---- */

static void become_ready(conn *c, const dlc_hello *h) {
    dlc_net *net = c->net;
    set_state(c, DLC_CONN_READY);
    c->stall_t = 0;
    dlcn_update_direct(c);
    c->last_tx = c->last_rx = dlcn_now(c->net); /* last_tx (atomic) outermost: clang refuses a chain through it */
    dlcn_conn_arm(c); /* from the auth deadline to the heartbeat and the timeout */
    c->was_ready = 1;
    if (c->client) {
        pthread_mutex_lock(&net->lock);
        if (c->ready_once) net->total.reconnects++;
        pthread_mutex_unlock(&net->lock);
        c->failures = 0;
    }
    c->ready_once = 1;
    evnode *n = dlcn_ev_new(DLC_NET_READY, c->id);
    if (n) {
        if (h) n->ev.frame.hello = *h;
        else n->ev.frame.hello.learner = -1;
        n->ev.frame.type = c->client ? DLC_FRAME_WELCOME : DLC_FRAME_HELLO;
        snprintf(n->ev.text, sizeof n->ev.text, "%s", c->name);
        dlcn_ev_post(net, n);
    }
}

/* The ready server-side connection of learner id other than self, or NULL; net->lock held. */
static conn *learner_holder(dlc_net *net, int id, conn *self) {
    for (int i = 0; i < net->npeers; i++) {
        conn *o = net->peers[i];
        if (o && o != self && !o->client && o->state == DLC_CONN_READY && o->learner == id) return o;
    }
    return NULL;
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
            dlcn_conn_fail(c, DLC_PERR_UNEXPECTED, "%s before authentication: expected %s", dlc_frame_type_name(f->type),
                      dlc_frame_type_name(want));
            return;
        }
        if (c->step == 0) {
            memcpy(c->nc, f->nonce, DLC_PROTO_NONCE);
            if (dlc_auth_nonce(c->ns, DLC_PROTO_NONCE) < 0) {
                dlcn_conn_fail(c, DLC_PERR_INTERNAL, "%s", dlc_last_error());
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
                dlcn_conn_fail(c, DLC_PERR_AUTH, "authentication failed: the proof does not match this run's secret");
                return;
            }
            if (!net->has_hello) {
                become_ready(c, NULL);
                return;
            }
            c->step = 2;
            /* it proved it knows the secret: no flood of unauthenticated sockets may evict
             * it now (auth_timeout_s still bounds the HELLO) */
            pthread_mutex_lock(&net->lock);
            unauth_remove(c);
            pthread_mutex_unlock(&net->lock);
            return;
        }
        dlc_hello w;
        int why;
        /* a server refusing for now (dlc_net_set_refusing: a standby syncer that has not
         * taken over serves neither learners nor standbys) tells SHUTDOWN, which a client
         * with other addresses retries at its next one */
        char refusing[sizeof net->refusing];
        pthread_mutex_lock(&net->lock);
        memcpy(refusing, net->refusing, sizeof refusing);
        pthread_mutex_unlock(&net->lock);
        if (refusing[0]) {
            dlcn_conn_fail(c, DLC_PERR_SHUTDOWN, "%s", refusing);
            return;
        }
        if (dlc_proto_negotiate(&net->hello, &f->hello, &w, &why) < 0) {
            dlcn_conn_fail(c, why, "%s", dlc_last_error());
            return;
        }
        if (w.caps & DLC_CAP_STANDBY) { /* a standby: no learner id, none taken from anyone */
            pthread_mutex_lock(&net->lock);
            c->standby = 1, c->learner = -1;
            pthread_mutex_unlock(&net->lock);
            dlc_frame_init(&out, DLC_FRAME_WELCOME);
            out.hello = w; /* (learner -1: dlc_proto_negotiate) */
            send_own(c, &out);
            dlc_hello theirs = f->hello;
            theirs.learner = -1;
            become_ready(c, &theirs);
            return;
        }
        pthread_mutex_lock(&net->lock);
        int id = f->hello.learner;
        conn *old = id >= 0 ? learner_holder(net, id, c) : NULL;
        if (id < 0)
            for (id = 0; learner_holder(net, id, c); id++) {}
        double now = dlcn_now(c->net), silent = old ? now - old->last_rx : 0;
        if (!old || silent >= NET_LIVE_FRACTION * net->cfg.timeout_s) c->learner = id;
        pthread_mutex_unlock(&net->lock);
        /* A second claim on a live learner's id (a duplicate process, a stale launcher,
         * anyone holding the secret) never displaces it: refused, naming both.  Only a
         * holder already silent for part of the timeout (its process gone without a FIN,
         * paused, cut off) gives way at once to the new incarnation, which would otherwise
         * wait out the timeout; the old connection is closed, so nothing more of it is
         * taken (connection-level fencing), and its LOST says why. */
        if (old && silent < NET_LIVE_FRACTION * net->cfg.timeout_s) {
            dlcn_conn_fail(c, DLC_PERR_CONFLICT, "learner %d is live, connected from %s (heard %.1f s ago): a second "
                           "claim on its id, from %s, is refused (stop the other process, or give this one another id)",
                           id + 1, old->name, silent, c->name);
            return;
        }
        if (old)
            dlcn_conn_fail(old, DLC_PERR_CONFLICT, "learner %d connected again from %s after %.1f s of silence here: "
                           "this connection is replaced", id + 1, c->name, silent);
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
        dlcn_conn_fail(c, DLC_PERR_UNEXPECTED, "%s during the handshake: expected %s", dlc_frame_type_name(f->type),
                  dlc_frame_type_name(want));
        return;
    }
    if (c->step == 0) {
        uint8_t want_mac[DLC_PROTO_MAC];
        memcpy(c->ns, f->nonce, DLC_PROTO_NONCE);
        dlc_auth_proof(net->secret, net->secret_len, 1, c->nc, c->ns, want_mac);
        if (auth && !dlc_auth_equal(want_mac, f->mac)) {
            dlcn_conn_fail(c, DLC_PERR_AUTH, "authentication failed: the server does not know this run's secret");
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
        pthread_mutex_lock(&net->lock); /* (its learner id: dlc_net_set_learner) */
        out.hello = net->hello;
        pthread_mutex_unlock(&net->lock);
        send_own(c, &out);
        c->step = 1;
        return;
    }
    const dlc_hello *w = &f->hello, *ours = &net->hello;
    if (w->proto_min < ours->proto_min || w->proto_max > ours->proto_max || strcmp(w->run, ours->run) != 0 ||
        w->model_hash != ours->model_hash || w->plan_hash != ours->plan_hash || w->block != ours->block) {
        dlcn_conn_fail(c, DLC_PERR_MISMATCH, "welcome does not match this hello (version %d, run \"%s\")", w->proto_max,
                  w->run);
        return;
    }
    /* a standby connection is one whose WELCOME grants "standby", which only a client
     * that asked for it takes (its hello's caps do not change after dlc_net_new) */
    int asked = (ours->caps & DLC_CAP_STANDBY) != 0, granted = (w->caps & DLC_CAP_STANDBY) != 0;
    if (asked != granted) {
        if (asked)
            dlcn_conn_fail(c, DLC_PERR_MISMATCH, "the server does not take standbys: its welcome does not list "
                           "\"standby\" (a syncer without a standby's terms, or an older one)");
        else
            dlcn_conn_fail(c, DLC_PERR_MISMATCH, "welcome grants a standby connection (it lists \"standby\"), which "
                           "this client did not ask for");
        return;
    }
    pthread_mutex_lock(&net->lock);
    c->standby = granted, c->learner = w->learner;
    pthread_mutex_unlock(&net->lock);
    become_ready(c, w);
}

/* ---- input ---- */

/* Who may send each type on a READY connection, by role: a learner (what the syncer's
 * side of a learner's connection accepts), the syncer (what a learner's client accepts),
 * a standby (what the primary's side of a standby connection accepts) and the primary,
 * to its standby (what a standby's client accepts).  The handshake's types are none of
 * them: they come only while AUTHENTICATING.  The one table of direction, for what a
 * connection takes and for what dlc_net_send lets it send; docs/protocol.md has it as its
 * "direction" column. */
enum { FROM_LEARNER = 1, FROM_SYNCER = 2, FROM_STANDBY = 4, FROM_PRIMARY = 8, FROM_ANY = 15 };
static const uint8_t ready_from[DLC_FRAME_TYPE_COUNT] = {
    [DLC_FRAME_HEARTBEAT] = FROM_ANY,
    [DLC_FRAME_CONTRIBUTION] = FROM_LEARNER,
    [DLC_FRAME_FRAGMENT] = FROM_SYNCER,
    [DLC_FRAME_GRADIENT] = FROM_LEARNER,
    [DLC_FRAME_GRADIENT_AVG] = FROM_SYNCER,
    [DLC_FRAME_RESYNC] = FROM_SYNCER,
    [DLC_FRAME_BYE] = FROM_ANY,
    [DLC_FRAME_ERROR] = FROM_ANY,
    [DLC_FRAME_REPLAY] = FROM_LEARNER,
    [DLC_FRAME_REPLICA] = FROM_PRIMARY,
    [DLC_FRAME_REPLICA_ACK] = FROM_STANDBY,
};
_Static_assert(DLC_FRAME_TYPE_COUNT == 16, "ready_from: one entry per frame type");

/* The role of the peer of c (whose frames c takes) and of c's own side (what it sends). */
static int peer_role(const conn *c) {
    return c->client ? (c->standby ? FROM_PRIMARY : FROM_SYNCER) : (c->standby ? FROM_STANDBY : FROM_LEARNER);
}
static int own_role(const conn *c) {
    return c->client ? (c->standby ? FROM_STANDBY : FROM_LEARNER) : (c->standby ? FROM_PRIMARY : FROM_SYNCER);
}

/* c, for messages: "client (learner)", "server-side (syncer)", ... */
static const char *conn_desc(const conn *c) {
    return c->client ? (c->standby ? "standby client" : "client (learner)")
                     : (c->standby ? "server-side (primary) standby" : "server-side (syncer)");
}

/* Who sends type t once READY, for messages: "a learner", "the syncer", "a standby",
 * "the primary" (the handshake's types: "the handshake"). */
static const char *sender_name(int t) {
    int from = (unsigned)t < DLC_FRAME_TYPE_COUNT ? ready_from[t] : 0;
    return from & FROM_LEARNER   ? "a learner"
           : from & FROM_SYNCER  ? "the syncer"
           : from & FROM_STANDBY ? "a standby"
           : from & FROM_PRIMARY ? "the primary"
                                 : "the handshake";
}

/* The types of role `from` (error too, when with_error), for messages: "heartbeat, ..." */
static void role_types(int from, int with_error, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int t = 0; t < DLC_FRAME_TYPE_COUNT && n < cap; t++)
        if ((ready_from[t] & from) && (with_error || t != DLC_FRAME_ERROR))
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", dlc_frame_type_name(t));
}

int dlcn_direction_refusal(const conn *c, dlc_frame_type t, char *why, size_t cap) {
    if ((unsigned)t >= DLC_FRAME_TYPE_COUNT || (ready_from[t] & own_role(c))) return 0;
    char sends[200];
    role_types(own_role(c), 0, sends, sizeof sends); /* (ERROR is the transport's own) */
    snprintf(why, cap, "%s's to send (a %s connection sends %s)", sender_name(t), conn_desc(c), sends);
    return 1;
}

/* A READY connection's check of a decoded frame f: its direction (ready_from) and, on
 * the server side, its sender (the learner id WELCOME gave this connection).  0 if f
 * may be delivered, else -1 with c failing (ERROR and close). */
static int ready_check(conn *c, const dlc_frame *f) {
    int from = peer_role(c);
    if (!(ready_from[f->type] & from)) {
        char names[200];
        role_types(from, 1, names, sizeof names);
        char sender[40];
        snprintf(sender, sizeof sender, "from %s", sender_name(f->type));
        dlcn_conn_fail(c, DLC_PERR_UNEXPECTED, "%s %s: a ready %s connection takes only %s", dlc_frame_type_name(f->type),
                       f->type <= DLC_FRAME_WELCOME ? "after the handshake" : sender, conn_desc(c), names);
        return -1;
    }
    /* every learner type carries l, the sender: it must be the learner this connection
     * was welcomed as (no hello: no id was given, nothing to bind; a standby holds none) */
    if (!c->client && !c->standby && c->learner >= 0 && f->type != DLC_FRAME_ERROR && f->msg.learner != c->learner) {
        dlcn_conn_fail(c, DLC_PERR_MISMATCH, "%s from learner %d on the connection of learner %d: a learner sends only "
                       "as the id its WELCOME gave it", dlc_frame_type_name(f->type), f->msg.learner + 1,
                       c->learner + 1);
        return -1;
    }
    return 0;
}

/* inline_io: the event the polling thread is waiting in, when a frame of type t may go
 * straight into it: an application frame on a ready conn, no event queued ahead of it
 * (events of other threads are concurrent with it either way), none delivered yet. */
static dlc_net_event *direct_event(conn *c, int t) {
    dlc_net *net = c->net;
    if (!net->poll_ev || net->poll_got || c->state != DLC_CONN_READY || c->in_latency > 0 || c->held_head ||
        t <= DLC_FRAME_WELCOME ||
        t >= DLC_FRAME_ERROR || atomic_load_explicit(&net->ev_count, memory_order_acquire) != 0)
        return NULL;
    return net->poll_ev;
}

/* The bytes of a received frame, unless they are the read buffer's (borrowed). */
static void release(uint8_t *buf, int borrowed) {
    if (!borrowed) dlcn_rx_free(buf);
}

void dlcn_on_frame(conn *c, uint8_t *buf, size_t len, int borrowed) {
    dlc_net *net = c->net;
    dlc_net_event *direct = direct_event(c, (int)buf[5] - 1); /* the type dlc_proto_peek checked */
    evnode *n = direct ? NULL : ev_new_frame(c->id);
    if (!direct && !n) {
        release(buf, borrowed);
        dlcn_conn_fail(c, DLC_PERR_INTERNAL, "out of memory receiving a frame");
        return;
    }
    int why;
    dlc_frame *f = direct ? &direct->frame : &n->ev.frame;
    if (dlc_proto_decoder_decode(net->dec, buf, len, net->has_layout ? &net->layout : NULL, f, &why) < 0) {
        release(buf, borrowed), free(n);
        dlcn_conn_fail(c, why, "%s", dlc_last_error());
        return;
    }
    dlcn_count(&c->bytes_in[f->type], len);
    dlcn_count(&c->frames_in[f->type], 1);
    c->last_rx = dlcn_now_coarse(c->net);
    if (f->type == DLC_FRAME_ERROR) {
        if (f->code == DLC_PERR_AUTH && !c->client && c->state == DLC_CONN_AUTHENTICATING) {
            pthread_mutex_lock(&net->lock); /* a client that found our proof wrong: it holds another secret */
            net->total.auth_failures++;
            pthread_mutex_unlock(&net->lock);
        }
        c->end_code = f->code;
        snprintf(c->end_text, sizeof c->end_text, "the peer reported %s: %.512s",
                 dlc_proto_errcode_name(f->code) ? dlc_proto_errcode_name(f->code) : "an error", f->text);
        release(buf, borrowed), free(n);
        dlcn_conn_drain(c, c->end_code, c->end_text);
        return;
    }
    if (c->state == DLC_CONN_AUTHENTICATING) {
        on_handshake(c, f);
        release(buf, borrowed), free(n);
        return;
    }
    if (ready_check(c, f) < 0) {
        release(buf, borrowed), free(n);
        return;
    }
    float *values = NULL;
    int64_t nvalues = 0;
    /* decoded here, off the poller's thread: a tensor's payload (a REPLICA's is records
     * too, the host's to unpack: proto.h) */
    if (net->cfg.decode && f->msg.len > 0 && f->type != DLC_FRAME_REPLICA) {
        if (net->cfg.decode(f, &values, &nvalues, net->cfg.decode_arg) != DLC_OK || !values) {
            free(values);
            values = NULL, nvalues = 0;
        } else {
            release(buf, borrowed);
            buf = NULL, borrowed = 1;
            f->msg.payload = NULL, f->msg.len = 0;
        }
    }
    if (direct) {
        direct->kind = DLC_NET_FRAME, direct->peer = c->id, direct->code = 0, direct->text[0] = '\0';
        direct->arg = NULL, direct->owned_ = borrowed ? NULL : buf;
        direct->values = values, direct->nvalues = nvalues;
        net->poll_got = 1;
        return;
    }
    n->ev.owned_ = borrowed ? NULL : buf;
    n->ev.values = values, n->ev.nvalues = nvalues;
    n->bytes = len + (size_t)nvalues * sizeof(float);
    if (c->in_latency > 0 || c->held_head) { /* the receiving direction's latency: held, in order */
        n->due = dlcn_now(c->net) + c->in_latency;
        n->next = NULL;
        if (c->held_tail) c->held_tail->next = n;
        else c->held_head = n;
        c->held_tail = n;
        /* its bytes stay counted as being received (the caller takes them off) */
        atomic_fetch_add_explicit(&net->rx_bytes, n->bytes, memory_order_relaxed);
        dlcn_conn_arm(c);
        return;
    }
    dlcn_ev_post(net, n);
}

static void on_write(struct bufferevent *bev, void *arg) {
    conn *c = arg;
    (void)bev;
    finish_draining(c);
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
    conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        /* TLS reports CONNECTED once its handshake is done, also on accepted sockets,
         * which are authenticating already */
        if (c->state != DLC_CONN_CONNECTING) return;
        int fd = bufferevent_getfd(bev), one = 1;
        if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (c->own_out && (dlcn_out_start(c) < 0 || dlcn_in_start(c) < 0)) {
            snprintf(c->end_text, sizeof c->end_text, "out of memory starting a connection");
            dlcn_conn_close_now(c);
            return;
        }
        set_state(c, DLC_CONN_AUTHENTICATING);
        c->step = 0;
        c->deadline = dlcn_now(c->net) + c->net->cfg.auth_timeout_s;
        c->last_tx = c->last_rx = dlcn_now(c->net); /* last_tx (atomic) outermost: clang refuses a chain through it */
        dlc_frame f;
        dlc_frame_init(&f, DLC_FRAME_AUTH);
        if (dlc_auth_nonce(c->nc, DLC_PROTO_NONCE) < 0) {
            dlcn_conn_fail(c, DLC_PERR_INTERNAL, "%s", dlc_last_error());
            return;
        }
        memcpy(f.nonce, c->nc, DLC_PROTO_NONCE);
        send_own(c, &f);
        dlcn_conn_arm(c);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        if (c->state == DLC_CONN_CLOSED) return;
        if (c->state != DLC_CONN_DRAINING) { /* a drain keeps the reason it started with */
            unsigned long ssl_err = c->net->ssl ? bufferevent_get_openssl_error(bev) : 0;
            int err = EVUTIL_SOCKET_ERROR();
            /* libevent reports SSL_get_error's value (SSL_ERROR_SYSCALL, no library) when the
             * socket itself failed under TLS (a connect refused before the server listens, a
             * reset): a socket error, retried as one, not a TLS failure (which is final) */
            if (ssl_err && ERR_GET_LIB(ssl_err) == 0) ssl_err = 0;
            if (ssl_err) {
                char buf[160];
                ERR_error_string_n(ssl_err, buf, sizeof buf);
                c->end_code = DLC_PERR_AUTH;
                int reason = ERR_GET_REASON(ssl_err);
                if (c->state != DLC_CONN_READY &&
                    (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_HTTP_REQUEST ||
                     reason == SSL_R_PACKET_LENGTH_TOO_LONG || reason == SSL_R_UNKNOWN_PROTOCOL))
                    /* not a TLS record where the handshake's first one was due: the peer
                     * speaks the protocol without TLS */
                    snprintf(c->end_text, sizeof c->end_text,
                             "TLS: the %s at %s does not speak TLS, and this end expects it (%s): start both with "
                             "TLS (the syncer's --tls-cert and --tls-key, the learners' --tls-ca) or neither",
                             c->client ? "server" : "peer", c->name, buf);
                else
                    snprintf(c->end_text, sizeof c->end_text, "TLS: %s", buf);
            } else if (!c->end_code) {
                dlcn_conn_end_text(c, (what & BEV_EVENT_EOF) != 0, err);
            }
        }
        dlcn_conn_close_now(c);
    }
}

void dlcn_conn_end_text(conn *c, int eof, int err) {
    c->end_code = DLC_PERR_NONE;
    const char *what = eof ? "connection closed by the peer" : evutil_socket_error_to_string(err);
    if (!c->net->ssl && c->client && c->state == DLC_CONN_AUTHENTICATING && c->step == 0)
        /* closed before the server's first frame: a server that expects TLS drops a plain
         * handshake so (its own log says so) */
        snprintf(c->end_text, sizeof c->end_text,
                 "%s before the server's first frame (does the server at %s expect TLS? then start this end with "
                 "TLS too: the learner's --tls-ca)", what, c->name);
    else
        snprintf(c->end_text, sizeof c->end_text, "%s", what);
}

/* ---- timers ---- */

static void on_timer(evutil_socket_t fd, short what, void *arg);

/* Arms c's one timer at its nearest deadline. */
void dlcn_conn_arm(conn *c) {
    dlc_net *net = c->net;
    double t = dlcn_now(c->net), next = INFINITY;
    switch (c->state) {
    case DLC_CONN_CONNECTING:
    case DLC_CONN_AUTHENTICATING:
    case DLC_CONN_DRAINING: next = c->deadline; break;
    case DLC_CONN_READY:
        if (net->cfg.timeout_s > 0 && !c->mem_wait && !net->paused) next = c->last_rx + net->cfg.timeout_s;
        if (net->cfg.heartbeat_s > 0 && c->last_tx + net->cfg.heartbeat_s < next) next = c->last_tx + net->cfg.heartbeat_s;
        if (c->over_t > 0 && net->cfg.timeout_s > 0 && c->over_t + net->cfg.timeout_s < next)
            next = c->over_t + net->cfg.timeout_s;
        break;
    default: return;
    }
    if (c->delay_head && c->delay_head->due < next) next = c->delay_head->due;
    if (c->held_head && !c->cut && c->held_head->due < next) next = c->held_head->due;
    if (c->state == DLC_CONN_AUTHENTICATING && c->delay_head && c->delay_head->due < next) next = c->delay_head->due;
    if (next == INFINITY) return;
    struct timeval tv = tv_of(next - t);
    evtimer_add(c->timer, &tv);
}

/* 1 if READY c's peer has taken none of the bytes sent to it for timeout_s: it stopped
 * reading (its window stays shut) or the link died.  Progress is any byte the kernel had
 * acknowledged (its unacknowledged count, SIOCOUTQ, moved) or any byte written into the
 * socket (room was made), so a slow link, which takes something all the time, never
 * looks stalled; a peer that sends heartbeats but reads nothing would otherwise hold
 * its queue (up to out_max) for ever.  Plain TCP (over TLS the writes are OpenSSL's:
 * such a peer is bounded by out_max alone). */
static int stalled(conn *c, double t) {
    evutil_socket_t fd = c->own_out && c->bev ? bufferevent_getfd(c->bev) : -1;
    int outq = 0;
    uint64_t wrote = atomic_load_explicit(&c->wrote, memory_order_relaxed);
    if (fd < 0 || c->cut || ioctl(fd, SIOCOUTQ, &outq) < 0 || outq <= 0) {
        c->stall_t = 0;
        return 0;
    }
    if (c->stall_t <= 0 || outq != c->stall_outq || wrote != c->stall_wrote) {
        c->stall_t = t, c->stall_outq = outq, c->stall_wrote = wrote;
        return 0;
    }
    return t - c->stall_t >= c->net->cfg.timeout_s;
}

/* READY c's queue has stayed above its share of mem_max (mem_max / the READY peers) for
 * timeout_s: the share shrank as peers joined, or the peer reads too slowly for what is
 * sent to it, and it holds memory that belongs to the others.  Sends past the share are
 * refused (dlc_net_send), so only a share that shrank puts a queue above it; a lone frame
 * larger than the share is let through and never counts.  Closes c and returns 1. */
static int over_share(conn *c, double t) {
    dlc_net *net = c->net;
    pthread_mutex_lock(&net->lock);
    size_t queued = c->queued, share = dlcn_share(net);
    int frames = c->qframes, ready = net->n_ready;
    pthread_mutex_unlock(&net->lock);
    if (queued <= share || frames < 2) {
        c->over_t = 0;
        return 0;
    }
    if (c->over_t <= 0) c->over_t = t;
    if (t - c->over_t < net->cfg.timeout_s) return 0;
    dlcn_conn_fail(c, DLC_PERR_OVERLOADED, "its queue stayed above its share of the memory budget for %.3g s: %zu bytes "
                   "in %d frames queued, its share %zu = mem_max %zu / %d ready peers (timeout); its queue is dropped",
                   t - c->over_t, queued, frames, share, net->cfg.mem_max, ready);
    return 1;
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    conn *c = arg;
    dlc_net *net = c->net;
    double t = dlcn_now(c->net);
    dlcn_out_release(c);
    switch (c->state) {
    case DLC_CONN_CONNECTING:
        if (t >= c->deadline) {
            dlcn_start_connect(c);
            return;
        }
        break;
    case DLC_CONN_AUTHENTICATING:
        if (t >= c->deadline) {
            dlcn_conn_fail(c, DLC_PERR_TIMEOUT, "not authenticated within %.3g s (auth_timeout)", net->cfg.auth_timeout_s);
            return;
        }
        break;
    case DLC_CONN_READY:
        dlcn_in_release(c, 0);
        /* a body slowed down below its read threshold: take what is there, wake sooner */
        if (dlcn_in_timer(c) && c->state != DLC_CONN_READY) return;
        /* a conn waiting for mem_max, or not read while the event queue is over in_max
         * (its reader is busy: a long step of the host), is silent because this side
         * does not read it */
        if (net->cfg.timeout_s > 0 && t - c->last_rx >= net->cfg.timeout_s && !c->mem_wait && !net->paused) {
            dlcn_conn_fail(c, DLC_PERR_TIMEOUT, "no frame for %.3g s (timeout)", t - c->last_rx);
            return;
        }
        if (net->cfg.timeout_s > 0 && over_share(c, t)) return;
        if (net->cfg.timeout_s > 0 && stalled(c, t)) {
            size_t queued;
            pthread_mutex_lock(&net->lock);
            queued = c->queued;
            pthread_mutex_unlock(&net->lock);
            dlcn_conn_fail(c, DLC_PERR_TIMEOUT, "it stopped reading: none of the %d bytes in flight to it acknowledged for "
                           "%.3g s, %zu more queued (timeout); its queue is dropped", c->stall_outq, t - c->stall_t,
                           queued);
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
            dlcn_conn_close_now(c);
            return;
        }
        break;
    default: return;
    }
    dlcn_conn_arm(c);
}

void dlcn_conn_tick(conn *c) { on_timer(-1, 0, c); }

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

conn *dlcn_conn_new(dlc_net *net, int client) {
    conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->net = net, c->client = client, c->learner = -1;
    pthread_mutex_init(&c->wlock, NULL);
    c->own_out = !net->ssl;
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
    c->in_rate = net->shape_in_rate, c->in_latency = net->shape_in_latency;
    pthread_mutex_unlock(&net->lock);
    return c;
}

void dlcn_apply_shape(conn *c) {
    if (!c->bev) return;
    if (c->own_out) { /* out.c's token bucket reads c->rate; start it empty */
        c->tokens = 0, c->tokens_t = real_s();
        return;
    }
    if (c->rate > 0 || c->in_rate > 0) {
        struct timeval tick = {0, NET_TICK_MS * 1000};
        double per_tick = c->rate * NET_TICK_MS / 1000.0, per_tick_in = c->in_rate * NET_TICK_MS / 1000.0;
        if (per_tick < 1) per_tick = 1;
        if (per_tick_in < 1) per_tick_in = 1;
        size_t w = c->rate > 0 ? (size_t)per_tick : EV_RATE_LIMIT_MAX;
        size_t r = c->in_rate > 0 ? (size_t)per_tick_in : EV_RATE_LIMIT_MAX;
        /* burst of 4 ticks: a tick the loop serves late is made up by the next ones
         * instead of lost (libevent refills by ticks elapsed, capped at the burst) */
        struct ev_token_bucket_cfg *b = ev_token_bucket_cfg_new(r, c->in_rate > 0 ? 4 * r : EV_RATE_LIMIT_MAX, w,
                                                                c->rate > 0 ? 4 * w : EV_RATE_LIMIT_MAX, &tick);
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

void dlcn_conn_set_cut(conn *c, int on) {
    if (c->cut == on) return;
    c->cut = on;
    dlcn_update_direct(c);
    if (c->state == DLC_CONN_CLOSED || c->state == DLC_CONN_CONNECTING || !c->bev) return;
    if (on && c->state == DLC_CONN_DRAINING) { /* nothing more can be flushed */
        dlcn_conn_close_now(c);
        return;
    }
    if (!c->own_out) { /* TLS: libevent writes the output buffer */
        if (on) bufferevent_disable(c->bev, EV_WRITE);
        else bufferevent_enable(c->bev, EV_WRITE);
    }
    dlcn_in_cut(c);
    if (!on) {
        dlcn_in_release(c, 0);
        dlcn_out_kick(c);
        dlcn_on_read(c->bev, c); /* what was read before the cut and not framed yet */
        if (c->state != DLC_CONN_CLOSED) dlcn_conn_arm(c);
    }
}

static void conn_attach(conn *c, struct bufferevent *bev) {
    c->bev = bev;
    bufferevent_setcb(bev, dlcn_on_read, on_write, on_event, c);
    /* TLS (plain TCP reads past libevent, on_readable): at most 4 MiB sit in libevent's
     * input buffer; dlcn_on_read moves them into the frame's own buffer, or stops (the app
     * is behind) and libevent stops reading the socket: TCP pushes back on the peer. */
    bufferevent_setwatermark(bev, EV_READ, 0, 4u << 20);
    /* libevent moves 16 KiB per read or write call by default: 4096 system calls and
     * callbacks for a 64 MiB fragment.  Let each call move up to what the socket takes. */
    bufferevent_set_max_single_read(bev, 1u << 20);
    bufferevent_set_max_single_write(bev, 4u << 20);
    /* plain TCP: libevent only connects (EV_WRITE); dlcn_in_start and dlcn_out_start take over */
    bufferevent_enable(bev, c->own_out ? EV_WRITE : EV_READ | EV_WRITE);
    dlcn_apply_shape(c);
}

void dlcn_start_connect(conn *c) {
    dlc_net *net = c->net;
    struct bufferevent *bev;
    if (c->bev) { /* an attempt past its deadline (a connect or a TLS handshake that hung):
                     * given up, its socket closed (its reads and writes never started);
                     * a client with alternates tries the next address */
        bufferevent_free(c->bev);
        c->bev = NULL;
        next_alternate(c);
    }
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
        c->deadline = dlcn_now(c->net) + net->cfg.reconnect_max_s;
        dlcn_conn_arm(c);
        return;
    }
    conn_attach(c, bev);
    c->deadline = dlcn_now(c->net) + net->cfg.auth_timeout_s;
    if (bufferevent_socket_connect(bev, (struct sockaddr *)&c->addr, (int)c->addrlen) < 0) {
        c->end_code = DLC_PERR_NONE;
        snprintf(c->end_text, sizeof c->end_text, "connect to %s failed", c->name);
        dlcn_conn_close_now(c);
        return;
    }
    dlcn_conn_arm(c);
}

static int count_server_conns(dlc_net *net) {
    int n = 0;
    for (int i = 0; i < net->npeers; i++)
        if (net->peers[i] && !net->peers[i]->client) n++;
    return n;
}

/* The same host (the port aside). */
static bool same_host(const struct sockaddr *a, const struct sockaddr *b) {
    if (a->sa_family != b->sa_family) return false;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
    return false;
}

/* Unauthenticated conns from sa's host; net->lock held. */
static int unauth_from(dlc_net *net, const struct sockaddr *sa) {
    int n = 0;
    for (conn *o = net->ua_head; o; o = o->ua_next) n += same_host((const struct sockaddr *)&o->addr, sa);
    return n;
}

/* The unauthenticated conn that gives way to a new one: the oldest of the host holding
 * the most, so that one address flooding the server evicts its own; net->lock held. */
static conn *unauth_victim(dlc_net *net) {
    conn *best = NULL;
    int most = 0;
    for (conn *o = net->ua_head; o; o = o->ua_next) {
        int n = unauth_from(net, (const struct sockaddr *)&o->addr);
        if (n > most) most = n, best = o;
    }
    return best;
}

/* The unauthenticated conn of sa's host that gives way to a new one from that host at
 * max_unauth_per_addr: the least far in its handshake (a socket that sent nothing before
 * one that sent AUTH), the oldest of those.  So a flood from a learner's own address (a
 * co-located process, a NAT, a launcher gone wrong) evicts its own sockets and cannot
 * lock a learner out: the learner's socket, newest and answering at once, outlasts
 * max_unauth_per_addr - 1 flood sockets after it.  net->lock held. */
static conn *unauth_victim_of(dlc_net *net, const struct sockaddr *sa) {
    conn *best = NULL;
    for (conn *o = net->ua_head; o; o = o->ua_next)
        if (same_host((const struct sockaddr *)&o->addr, sa) && (!best || o->step < best->step)) best = o;
    return best;
}

/* One best-effort ERROR frame written straight to fd, then the caller closes it. */
static void error_to_fd(evutil_socket_t fd, int code, const char *text) {
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_ERROR);
    f.code = code;
    snprintf(f.text, sizeof f.text, "%s", text);
    uint8_t hdr[DLC_PROTO_PREFIX + 1024];
    int64_t len = dlc_proto_encode(&f, NULL, hdr, sizeof hdr);
    if (len > 0 && send(fd, hdr, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) { /* best effort */ }
}

/* A connection refused before a conn exists: ERROR, close, REFUSED, counted. */
static void refuse_fd(dlc_net *net, evutil_socket_t fd, int code, const char *text, const char *from) {
    error_to_fd(fd, code, text);
    evutil_closesocket(fd);
    pthread_mutex_lock(&net->lock);
    net->total.overloaded += code == DLC_PERR_OVERLOADED;
    pthread_mutex_unlock(&net->lock);
    dlcn_ev_post_from(net, DLC_NET_REFUSED, -1, code, text, from);
}

/* An unauthenticated conn gives way: told why (plain TCP: the ERROR written at once;
 * over TLS the stream is OpenSSL's, so only the close), closed now, not drained, so
 * that evictions cannot pile up draining sockets. */
static void evict(conn *v, const char *why) {
    dlc_net *net = v->net;
    v->end_code = DLC_PERR_OVERLOADED;
    snprintf(v->end_text, sizeof v->end_text, "%s", why);
    evutil_socket_t fd = v->bev ? bufferevent_getfd(v->bev) : -1;
    if (fd >= 0 && v->own_out && dlcn_out_empty(v)) error_to_fd(fd, DLC_PERR_OVERLOADED, why);
    pthread_mutex_lock(&net->lock);
    net->total.overloaded++;
    pthread_mutex_unlock(&net->lock);
    dlcn_conn_close_now(v);
}

void dlcn_on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg) {
    (void)l;
    dlc_net *net = arg;
    char name[80], text[DLC_PROTO_TEXT_MAX];
    addr_name(sa, name, sizeof name);
    pthread_mutex_lock(&net->lock);
    net->total.accepted++;
    int n = count_server_conns(net), from = unauth_from(net, sa), unauth = net->n_unauth;
    bool stopping = net->stopping;
    conn *own = from >= net->cfg.max_unauth_per_addr ? unauth_victim_of(net, sa) : NULL;
    conn *victim = !own && (n >= net->cfg.max_peers || unauth >= net->cfg.max_unauth) ? unauth_victim(net) : NULL;
    pthread_mutex_unlock(&net->lock);
    if (stopping) {
        refuse_fd(net, fd, DLC_PERR_SHUTDOWN, "the server is shutting down", name);
        return;
    }
    if (own) {
        char host[80];
        snprintf(host, sizeof host, "%s", name);
        char *colon = strrchr(host, ':');
        if (colon) *colon = '\0';
        snprintf(text, sizeof text, "evicted for a newer connection from the same address: %d connections from %s are "
                 "not authenticated yet (max_unauth_per_addr = %d), this one the oldest of the least far in the handshake",
                 from, host, net->cfg.max_unauth_per_addr);
        evict(own, text);
    }
    if (n >= net->cfg.max_peers && !victim) {
        snprintf(text, sizeof text, "the server has its maximum of %d connections", net->cfg.max_peers);
        refuse_fd(net, fd, DLC_PERR_OVERLOADED, text, name);
        return;
    }
    if (victim) {
        snprintf(text, sizeof text, "evicted for a newer connection: %d connections not authenticated yet (max_unauth = "
                 "%d, max_peers = %d), this one the oldest of its address", unauth, net->cfg.max_unauth,
                 net->cfg.max_peers);
        evict(victim, text);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = dlcn_conn_new(net, 0);
    if (!c) {
        evutil_closesocket(fd);
        return;
    }
    pthread_mutex_lock(&net->lock); /* (dlc_net_get_counters reads it) */
    memcpy(c->name, name, sizeof name);
    pthread_mutex_unlock(&net->lock);
    if ((size_t)salen <= sizeof c->addr) memcpy(&c->addr, sa, (size_t)salen), c->addrlen = (socklen_t)salen;
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
        dlcn_conn_retire(c);
        return;
    }
    c->state = DLC_CONN_AUTHENTICATING; /* born there: accepted sockets skip CONNECTING */
    conn_attach(c, bev);
    if (c->own_out && (dlcn_out_start(c) < 0 || dlcn_in_start(c) < 0)) {
        snprintf(c->end_text, sizeof c->end_text, "out of memory accepting a connection");
        dlcn_conn_close_now(c);
        return;
    }
    pthread_mutex_lock(&net->lock);
    unauth_add(c);
    pthread_mutex_unlock(&net->lock);
    c->deadline = dlcn_now(c->net) + net->cfg.auth_timeout_s;
    c->last_tx = c->last_rx = dlcn_now(c->net); /* last_tx (atomic) outermost: clang refuses a chain through it */
    dlcn_conn_arm(c);
}
