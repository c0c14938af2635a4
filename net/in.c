/* in.c - the input of a connection: bytes from the socket into frames (conn.c's
 * dlcn_on_frame takes each whole one).  Plain TCP is read with recv() past libevent: a
 * frame's body straight into its buffer, what a read brings beyond it into the conn's
 * read buffer (ib), a large body at a read threshold (SO_RCVLOWAT) that follows the
 * rate.  TLS keeps libevent's input buffer.  Runs on the I/O thread (with inline_io: the
 * polling thread), like conn.c. */
#include "internal.h"

/* The socket wakes the bulk reader once n bytes are waiting (n 0: the default). */
static void bulk_lowat(conn *c, size_t n) {
    int v = n > 1 ? (int)n : 1;
    evutil_socket_t fd = c->bev ? bufferevent_getfd(c->bev) : -1;
    if (v == (c->lowat > 1 ? c->lowat : 1) || fd < 0) return;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) == 0) c->lowat = v;
}

static void bulk_stop(conn *c) {
    if (c->in_bulk) bulk_lowat(c, 0);
    c->in_bulk = 0;
}

/* ---- input: where received bytes wait before they are framed ---- */

/* Plain TCP: our read event; TLS: the bufferevent's reading.  A cut link, or an empty
 * bucket of the receiving direction's rate cap, is not read whoever asks. */
static void read_enable(conn *c, int on) {
    if (on && (c->cut || c->in_starved)) return;
    if (!c->own_out) {
        if (!c->bev) return;
        if (on) bufferevent_enable(c->bev, EV_READ);
        else bufferevent_disable(c->bev, EV_READ);
        return;
    }
    if (!c->rev || c->rev_on == on) return;
    if (on ? event_add(c->rev, NULL) == 0 : event_del(c->rev) == 0) c->rev_on = on;
}

/* Bytes received and not yet framed. */
static size_t in_avail(conn *c) {
    if (c->own_out) return c->ib_len - c->ib_off;
    return c->bev ? evbuffer_get_length(bufferevent_get_input(c->bev)) : 0;
}

/* Copies up to n of them into dst, removing them if take; returns how many. */
static size_t in_copy(conn *c, void *dst, size_t n, int take) {
    size_t have = in_avail(c);
    if (n > have) n = have;
    if (!n) return 0;
    if (c->own_out) {
        memcpy(dst, c->ib + c->ib_off, n);
        if (take) c->ib_off += n;
        if (c->ib_off == c->ib_len) c->ib_off = c->ib_len = 0;
        return n;
    }
    struct evbuffer *in = bufferevent_get_input(c->bev);
    return (size_t)(take ? evbuffer_remove(in, dst, n) : evbuffer_copyout(in, dst, n));
}

static void in_drop(conn *c) {
    if (c->own_out) c->ib_off = c->ib_len = 0;
    else if (c->bev) evbuffer_drain(bufferevent_get_input(c->bev), in_avail(c));
}

/* The peer closed (eof) or the socket failed (errno err) under a read. */
static void conn_ended(conn *c, int eof, int err) {
    if (c->state == DLC_CONN_CLOSED) return;
    if (c->state != DLC_CONN_DRAINING && !c->end_code) /* a drain keeps the reason it started with */
        dlcn_conn_end_text(c, eof, err);
    dlcn_conn_close_now(c);
}

static double frame_limit(const conn *c) {
    /* tight until the peer has proved it knows the secret: the server after the
     * client's proof (step 2), the client after the server's challenge (step 1) */
    return c->state == DLC_CONN_READY || (c->state == DLC_CONN_AUTHENTICATING && c->step >= (c->client ? 1 : 2))
               ? (double)c->net->cfg.frame_max
               : (double)DLC_PROTO_FRAME_MAX_UNAUTH;
}

void dlcn_pause_reading(dlc_net *net, int pause) {
    for (int i = 0; i < net->npeers; i++) {
        conn *c = net->peers[i];
        if (!c || !c->bev || c->in_bulk || c->state == DLC_CONN_DRAINING || c->state == DLC_CONN_CLOSED) continue;
        read_enable(c, !pause);
    }
}

static bool over_in_max(dlc_net *net) {
    /* only this thread queues frames' bytes: a value read without the lock is no
     * smaller than the true one, so below the limit needs no lock */
    if (atomic_load_explicit(&net->ev_bytes, memory_order_relaxed) <= net->cfg.in_max) return false;
    pthread_mutex_lock(&net->lock);
    bool over = net->ev_bytes > net->cfg.in_max;
    if (over && !net->paused) net->paused = 1;
    pthread_mutex_unlock(&net->lock);
    return over;
}

/* The bytes of the frame being received that keep the peer alive (NET_ALIVE_PARTS): what
 * arrives in a quarter of timeout_s at the rate observed since the frame began. */
static size_t alive_chunk(const conn *c, double t) {
    double el = t - c->body_t0, rate = el > 1e-3 ? (double)c->inhave / el : INFINITY;
    double chunk = rate * c->net->cfg.timeout_s / NET_ALIVE_PARTS;
    if (!(chunk < (double)NET_LOWAT_MIN)) return NET_LOWAT_MIN;
    return chunk < (double)NET_ALIVE_MIN ? NET_ALIVE_MIN : (size_t)chunk;
}

/* got more bytes of the frame being received: a body arriving at its observed rate
 * keeps the peer alive, a trickle does not (alive_chunk). */
static void body_alive(conn *c, size_t got) {
    if (!got) return;
    double t = dlcn_now_coarse(c->net);
    c->bulk_fresh += got;
    if (c->bulk_fresh >= alive_chunk(c, t)) c->last_rx = t, c->bulk_fresh = 0;
}

/* The rest of a large frame, read by recv() into its buffer: one copy, as a bare socket
 * does.  It keeps the peer alive as it arrives (body_alive); a trickle does not.
 * Returns 0 when the frame is still incomplete and c open, else 1 (the frame is done or
 * c is closed). */
static int bulk_read(conn *c, size_t wake_at_most) {
    dlc_net *net = c->net;
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    size_t got = 0;
    while (c->inhave < c->inlen) {
        ssize_t r = recv(fd, c->inbuf + c->inhave, c->inlen - c->inhave, 0);
        if (r > 0) {
            c->inhave += (size_t)r, got += (size_t)r;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
        int err = errno;
        bulk_stop(c);
        conn_ended(c, r == 0, err);
        return 1;
    }
    double t = real_s(); /* the read rate's (real bytes per real second) */
    body_alive(c, got);
    if (c->inhave < c->inlen) {
        /* the next wake-up: what arrives in NET_LOWAT_S at this rate, within the bounds */
        double rate = t > c->bulk_t ? (double)got / (t - c->bulk_t) : 0;
        size_t want = rate * NET_LOWAT_S > (double)NET_LOWAT_MAX ? NET_LOWAT_MAX : (size_t)(rate * NET_LOWAT_S);
        if (want > wake_at_most) want = wake_at_most;
        size_t floor = alive_chunk(c, dlcn_now_coarse(net)); /* wake once what keeps the peer alive is there */
        if (want < floor) want = floor;
        if (want > c->inlen - c->inhave) want = c->inlen - c->inhave;
        bulk_lowat(c, want);
        c->bulk_t = t;
        return 0;
    }
    bulk_stop(c);
    pthread_mutex_lock(&net->lock);
    bool paused = net->paused;
    pthread_mutex_unlock(&net->lock);
    if (paused) read_enable(c, 0); /* it read past a pause to finish this body */
    uint8_t *buf = c->inbuf;
    size_t len = c->inlen;
    c->inbuf = NULL, c->inlen = c->inhave = 0;
    dlcn_on_frame(c, buf, len, 0); /* its bytes are the event's now (or freed): */
    atomic_fetch_sub_explicit(&net->rx_bytes, len, memory_order_relaxed);
    if (c->state == DLC_CONN_READY || c->state == DLC_CONN_AUTHENTICATING) dlcn_on_read(c->bev, c);
    return 1;
}

/* ---- the receiving direction's WAN emulation (dlc_net_shape_in) ---- */

/* Bytes the receiving bucket allows now (SIZE_MAX without a cap). */
static size_t in_allowance(conn *c) {
    if (c->in_rate <= 0) return SIZE_MAX;
    double t = real_s(); /* a rate: real bytes per real second */
    c->in_tokens += (t - c->in_tokens_t) * c->in_rate;
    c->in_tokens_t = t;
    double burst = c->in_rate * NET_BURST_S;
    if (burst < (double)NET_BUCKET_MIN) burst = (double)NET_BUCKET_MIN;
    if (c->in_tokens > burst) c->in_tokens = burst;
    return c->in_tokens >= 1 ? (size_t)c->in_tokens : 0;
}

/* The bucket is empty: stop reading until it holds 1 ms of the rate. */
static void in_starve(conn *c) {
    read_enable(c, 0);
    c->in_starved = 1;
    double want = c->in_rate * 0.001 > 1 ? c->in_rate * 0.001 : 1, need = want - c->in_tokens;
    struct timeval tv = tv_of(need > 0 ? need / c->in_rate : 0);
    if (c->itimer) evtimer_add(c->itimer, &tv);
}

/* Reading may resume unless something else holds it: the app behind (in_max), a frame
 * waiting for mem_max, a cut. */
static void in_resume(conn *c) {
    if (!c->bev || c->state == DLC_CONN_CLOSED || c->state == DLC_CONN_CONNECTING || c->mem_wait) return;
    pthread_mutex_lock(&c->net->lock);
    bool paused = c->net->paused;
    pthread_mutex_unlock(&c->net->lock);
    if (!paused || c->state == DLC_CONN_DRAINING) read_enable(c, 1);
}

static void on_in_refill(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    conn *c = arg;
    c->in_starved = 0;
    in_resume(c);
}

void dlcn_in_shape(conn *c) {
    c->in_tokens = 0, c->in_tokens_t = real_s();
    if (c->in_rate > 0 && c->in_bulk) bulk_stop(c); /* capped bodies are read by on_readable */
    if (c->in_rate <= 0 && c->in_starved) {
        if (c->itimer) evtimer_del(c->itimer);
        c->in_starved = 0;
        in_resume(c);
    }
}

void dlcn_in_cut(conn *c) {
    if (c->cut) read_enable(c, 0);
    else in_resume(c);
}

/* Frames held for the latency are on the link: a cut holds them too, and a cut
 * connection that ends loses them; otherwise they arrived before the end (all). */
void dlcn_in_release(conn *c, int all) {
    dlc_net *net = c->net;
    double t = dlcn_now(c->net);
    while (c->held_head && (c->cut ? all : all || c->held_head->due <= t + 1e-4)) {
        evnode *n = c->held_head;
        c->held_head = n->next;
        if (!c->held_head) c->held_tail = NULL;
        n->next = NULL;
        atomic_fetch_sub_explicit(&net->rx_bytes, n->bytes, memory_order_relaxed);
        if (c->cut) {
            dlc_net_event_release(&n->ev);
            free(n);
        } else {
            dlcn_ev_post(net, n);
        }
    }
}

/* Plain TCP: the socket is readable.  One recv(): into the body being filled when
 * nothing else waits ahead of it, else into ib; dropped while draining. */
static void on_readable(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    conn *c = arg;
    if (c->in_bulk) {
        bulk_read(c, NET_LOWAT_MAX);
        return;
    }
    uint8_t *dst;
    size_t cap;
    int body = 0;
    if (c->state == DLC_CONN_DRAINING) {
        c->ib_off = c->ib_len = 0;
        dst = c->ib, cap = NET_IB;
    } else if (c->inbuf && c->ib_off == c->ib_len) {
        dst = c->inbuf + c->inhave, cap = c->inlen - c->inhave, body = 1;
    } else {
        if (c->ib_off) memmove(c->ib, c->ib + c->ib_off, c->ib_len - c->ib_off), c->ib_len -= c->ib_off, c->ib_off = 0;
        dst = c->ib + c->ib_len, cap = NET_IB - c->ib_len;
        if (cap == 0) { /* framing stopped (the app is behind): wait for it */
            read_enable(c, 0);
            return;
        }
    }
    if (c->in_rate > 0 && c->state != DLC_CONN_DRAINING) {
        size_t allow = in_allowance(c);
        if (allow == 0) {
            in_starve(c);
            return;
        }
        if (cap > allow) cap = allow;
    }
    ssize_t r = recv(fd, dst, cap, 0);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (r <= 0) {
        conn_ended(c, r == 0, errno);
        return;
    }
    if (c->state == DLC_CONN_DRAINING) return;
    if (c->in_rate > 0) c->in_tokens -= (double)r;
    if (body) c->inhave += (size_t)r, body_alive(c, (size_t)r);
    else c->ib_len += (size_t)r;
    dlcn_on_read(c->bev, c);
}

/* Plain TCP, once connected: we read the socket from now on, libevent does not. */
int dlcn_in_start(conn *c) {
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    if (fd < 0) return -1;
    bufferevent_disable(c->bev, EV_READ);
    if (c->rev) event_free(c->rev);
    c->rev = event_new(c->net->base, fd, EV_READ | EV_PERSIST, on_readable, c);
    if (!c->itimer) c->itimer = evtimer_new(c->net->base, on_in_refill, c);
    if (!c->ib) c->ib = malloc(NET_IB);
    if (!c->rev || !c->ib || !c->itimer) return -1;
    c->rev_on = 0, c->ib_off = c->ib_len = 0;
    c->in_starved = 0, c->in_tokens = 0, c->in_tokens_t = real_s();
    read_enable(c, 1);
    return 0;
}

/* A large body from here on is read at the threshold (plain TCP). */
static void bulk_start(conn *c) {
    c->in_bulk = 1;
    c->bulk_t = real_s();
    bulk_lowat(c, alive_chunk(c, dlcn_now_coarse(c->net)));
}

/* The budget (mem_max) for a frame of n bytes about to be received: 1 and counted, or 0
 * and c waits, not read, until memory is freed (dlcn_mem_resume). */
static int mem_take(conn *c, size_t n) {
    dlc_net *net = c->net;
    pthread_mutex_lock(&net->lock);
    int fits = dlcn_mem(net) + n <= net->cfg.mem_max;
    if (fits) atomic_fetch_add_explicit(&net->rx_bytes, n, memory_order_relaxed);
    if (fits && c->mem_wait) { /* its silence was ours: the timeout starts again */
        c->mem_wait = 0, c->last_rx = dlcn_now_coarse(c->net);
        atomic_fetch_sub(&net->mem_waiting, 1);
    } else if (!fits && !c->mem_wait) {
        c->mem_wait = 1;
        atomic_fetch_add(&net->mem_waiting, 1);
    }
    pthread_mutex_unlock(&net->lock);
    if (!fits) read_enable(c, 0);
    return fits;
}

void dlcn_mem_resume(dlc_net *net) {
    pthread_mutex_lock(&net->lock);
    bool paused = net->paused;
    pthread_mutex_unlock(&net->lock);
    for (int i = 0; i < net->npeers; i++) {
        conn *c = net->peers[i];
        if (!c || !c->mem_wait || !c->bev || c->state == DLC_CONN_CLOSED) continue;
        if (!paused) read_enable(c, 1);
        dlcn_on_read(c->bev, c); /* takes the budget, or waits again */
        if (c->mem_wait && c->state == DLC_CONN_READY) dlcn_conn_arm(c);
    }
}

void dlcn_on_read(struct bufferevent *bev, void *arg) {
    (void)bev;
    conn *c = arg;
    dlc_net *net = c->net;
    if (c->in_bulk) return; /* the body is being read at its threshold */
    if (c->state == DLC_CONN_DRAINING) { /* closing: what the peer still sends is dropped */
        in_drop(c);
        return;
    }
    while (c->state == DLC_CONN_AUTHENTICATING || c->state == DLC_CONN_READY) {
        if (!c->inbuf) {
            if (over_in_max(net)) { /* the app is behind: stop reading until it polls */
                dlcn_pause_reading(net, 1);
                return;
            }
            uint8_t prefix[DLC_PROTO_PREFIX];
            /* plain TCP: the prefix is read where it lies in ib */
            const uint8_t *at = c->own_out ? c->ib + c->ib_off : prefix;
            size_t have = c->own_out ? in_avail(c) : in_copy(c, prefix, sizeof prefix, 0);
            if (have == 0) return;
            size_t need;
            dlc_frame_type type;
            int why;
            if (dlc_proto_peek(at, have, (size_t)frame_limit(c), &need, &type, &why) < 0) {
                dlcn_conn_fail(c, why, "%s%s", dlc_last_error(),
                          c->state == DLC_CONN_AUTHENTICATING ? " (before authentication)" : "");
                return;
            }
            if (need == 0) return;
            if (c->own_out && have >= need && !dlc_frame_has_payload(type)) {
                /* a whole header-only frame in ib (a HEARTBEAT, a BYE, the handshake's):
                 * decoded where it lies, nothing allocated nor copied; ib moves past it
                 * first, as dlcn_on_frame may close c and free ib */
                c->ib_off += need;
                if (c->ib_off == c->ib_len) c->ib_off = c->ib_len = 0;
                dlcn_on_frame(c, (uint8_t *)at, need, 1);
                if (c->state == DLC_CONN_CLOSED || c->state == DLC_CONN_CONNECTING) return;
                continue;
            }
            if (!mem_take(c, need)) return; /* waits, unread, for mem_max to allow it */
            c->inbuf = dlcn_rx_alloc(need);
            if (!c->inbuf) {
                atomic_fetch_sub_explicit(&net->rx_bytes, need, memory_order_relaxed);
                dlcn_conn_fail(c, DLC_PERR_INTERNAL, "out of memory for a frame of %zu bytes", need);
                return;
            }
            c->inlen = need, c->inhave = 0;
            c->body_t0 = dlcn_now_coarse(c->net), c->bulk_fresh = 0;
        }
        size_t got = in_copy(c, c->inbuf + c->inhave, c->inlen - c->inhave, 1);
        c->inhave += got;
        body_alive(c, got);
        if (c->inhave < c->inlen) {
            if (c->own_out && c->in_rate <= 0 && c->inlen - c->inhave >= NET_BULK_MIN && in_avail(c) == 0)
                bulk_start(c);
            return;
        }
        uint8_t *buf = c->inbuf;
        size_t len = c->inlen;
        c->inbuf = NULL, c->inlen = c->inhave = 0;
        dlcn_on_frame(c, buf, len, 0); /* may close c: the loop condition reads c->state, and a
                                * closed conn is freed only when not reconnecting... */
        atomic_fetch_sub_explicit(&net->rx_bytes, len, memory_order_relaxed); /* the event's now */
        if (c->state == DLC_CONN_CLOSED || c->state == DLC_CONN_CONNECTING) return;
    }
}

/* Closing: the read event and buffer go (before the fd closes with the bufferevent). */
void dlcn_in_stop(conn *c) {
    if (c->mem_wait) {
        pthread_mutex_lock(&c->net->lock);
        c->mem_wait = 0;
        atomic_fetch_sub(&c->net->mem_waiting, 1);
        pthread_mutex_unlock(&c->net->lock);
    }
    if (c->rev) event_free(c->rev);
    if (c->itimer) event_free(c->itimer);
    c->rev = NULL, c->rev_on = 0, c->in_bulk = 0, c->lowat = 0;
    c->itimer = NULL, c->in_starved = 0;
    free(c->ib);
    c->ib = NULL, c->ib_off = c->ib_len = 0;
}

/* Draining: no more frames; what waits and what still comes is dropped (read, so that
 * unread input does not make the close a reset). */
void dlcn_in_drain(conn *c) {
    bulk_stop(c);
    in_drop(c);
    read_enable(c, 1);
}

/* The conn's timer: a large body that slowed down below its read threshold is read as
 * far as it has come, and the threshold lowered.  1 if that finished the frame or closed
 * c, else 0. */
int dlcn_in_timer(conn *c) { return c->in_bulk ? bulk_read(c, NET_LOWAT_MIN) : 0; }
