/* out.c - the output of a plain-TCP connection: a queue of frames written with sendmsg(),
 * by the I/O thread or, when nothing is queued ahead, by the thread that sends (the
 * round trip then costs no hand-off to the I/O thread on the way out).  Payloads are
 * written from the sender's memory, never copied.  The WAN emulation's rate cap is a
 * token bucket here; its latency is the delay queue before this one (conn.c).  TLS
 * connections keep libevent's output (conn.c).
 *
 * Locks: c->wlock guards the queue, the write event's state and the fd's writes.  A
 * thread may take it while holding net->lock (dlc_net_send); the I/O thread takes it
 * without net->lock and releases it before anything that takes net->lock (releasing
 * written frames, posting events). */
#include "internal.h"

#include <sys/uio.h>

/* iovecs per sendmsg */
#define OUT_IOV 64

static void on_writable(evutil_socket_t fd, short what, void *arg);
static void on_refill(evutil_socket_t fd, short what, void *arg);

int dlcn_out_start(conn *c) {
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    if (fd < 0) return -1;
    if (c->wev) event_free(c->wev);
    c->wev = event_new(c->net->base, fd, EV_WRITE | EV_PERSIST, on_writable, c);
    if (!c->rtimer) c->rtimer = evtimer_new(c->net->base, on_refill, c);
    if (!c->wev || !c->rtimer) return -1;
    c->wev_on = 0, c->werr = 0;
    c->tokens = 0, c->tokens_t = real_s();
    bufferevent_disable(c->bev, EV_WRITE); /* libevent reads; we write */
    return 0;
}

int dlcn_out_empty(conn *c) {
    pthread_mutex_lock(&c->wlock);
    int empty = c->oq_head == NULL;
    pthread_mutex_unlock(&c->wlock);
    return empty;
}

/* Bytes the bucket allows now (SIZE_MAX without a cap). */
static size_t allowance(conn *c) {
    if (c->rate <= 0) return SIZE_MAX;
    double t = real_s();
    c->tokens += (t - c->tokens_t) * c->rate;
    c->tokens_t = t;
    double burst = c->rate * NET_BURST_S;
    if (burst < (double)NET_BUCKET_MIN) burst = (double)NET_BUCKET_MIN;
    if (c->tokens > burst) c->tokens = burst;
    return c->tokens >= 1 ? (size_t)c->tokens : 0;
}

/* Writes what the socket and the bucket take.  wlock held.  Frames written whole are
 * moved to *done; returns 1 if the socket is full (arm EV_WRITE), 2 if the bucket is
 * empty (arm the refill timer), 3 if the link is cut (nothing armed: uncutting writes
 * again, dlcn_out_kick), 0 if the queue emptied, -1 on an error (c->werr). */
static int write_some(conn *c, outframe **done) {
    evutil_socket_t fd = c->wev ? event_get_fd(c->wev) : -1;
    if (fd < 0) return -1;
    if (c->cut) return c->oq_head ? 3 : 0;
    while (c->oq_head) {
        size_t allow = allowance(c);
        if (allow == 0) return 2;
        struct iovec iov[OUT_IOV];
        int n = 0;
        size_t off = c->oq_off, sum = 0;
        for (outframe *f = c->oq_head; f && n < OUT_IOV - 1 && sum < allow; f = f->next, off = 0) {
            if (off < f->hlen) iov[n].iov_base = f->hdr + off, iov[n].iov_len = f->hlen - off, sum += iov[n++].iov_len;
            size_t poff = off > f->hlen ? off - f->hlen : 0;
            if (f->len > poff)
                iov[n].iov_base = (uint8_t *)f->payload + poff, iov[n].iov_len = f->len - poff, sum += iov[n++].iov_len;
        }
        if (sum > allow) { /* trim the last iovecs to the allowance */
            size_t over = sum - allow;
            while (over && n > 0) {
                if (iov[n - 1].iov_len > over) iov[n - 1].iov_len -= over, over = 0;
                else over -= iov[--n].iov_len;
            }
        }
        /* MSG_NOSIGNAL: a peer gone under the write is EPIPE here, never a SIGPIPE that
         * kills a host which did not ignore it; one iovec (a small frame) as send() */
        ssize_t w;
        if (n == 1) {
            w = send(fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL);
        } else {
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
            w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        }
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
            if (errno == EINTR) continue;
            c->werr = errno;
            return -1;
        }
        if (c->rate > 0) c->tokens -= (double)w;
        atomic_fetch_add_explicit(&c->wrote, (uint64_t)w, memory_order_relaxed);
        size_t left = (size_t)w;
        while (left && c->oq_head) {
            outframe *f = c->oq_head;
            size_t rest = f->hlen + f->len - c->oq_off;
            if (left < rest) {
                c->oq_off += left;
                left = 0;
                break;
            }
            left -= rest;
            c->oq_head = f->next;
            if (!c->oq_head) c->oq_tail = NULL;
            c->oq_off = 0;
            f->next = *done;
            *done = f;
        }
        if (c->oq_head && (size_t)w < sum) return 1; /* the socket took less: it is full */
    }
    return 0;
}

/* The result of write_some, acted on; wlock held.  Only the I/O thread deletes the
 * write event or arms the refill timer (event_del from another thread would wait for a
 * running callback that waits for wlock); any thread may add the write event.  An error
 * that its finder may not act on (close_ok 0) arms the write event: its callback meets
 * the error again and closes. */
static void arm(conn *c, int r, int io_thread, int close_ok) {
    if (r == 1 || (r == -1 && !close_ok)) {
        if (!io_thread && c->net->wake_fd >= 0) { /* inline_io: the loop's thread adds it */
            if (!c->wev_on && !c->wev_want) {
                c->wev_want = 1;
                atomic_store_explicit(&c->net->wev_any, 1, memory_order_release);
                dlcn_wake(c->net);
            }
        } else if (!c->wev_on && event_add(c->wev, NULL) == 0) {
            c->wev_on = 1;
        }
    } else if (c->wev_on && io_thread) {
        event_del(c->wev);
        c->wev_on = 0;
    }
    if (r == 2 && io_thread && c->rate > 0) {
        double need = (c->rate * 0.001 > 1 ? c->rate * 0.001 : 1) - c->tokens; /* 1 ms worth */
        struct timeval tv = tv_of(need > 0 ? need / c->rate : 0);
        evtimer_add(c->rtimer, &tv);
    }
}

static void reverse(outframe **list) {
    outframe *r = NULL;
    while (*list) {
        outframe *f = *list;
        *list = f->next;
        f->next = r;
        r = f;
    }
    *list = r;
}

/* Finishes the frames written whole, in the order written (no lock held). */
static void release_written(outframe *done) {
    reverse(&done);
    while (done) {
        outframe *f = done;
        done = f->next;
        dlcn_payload_written(NULL, 0, f);
    }
}

/* I/O thread: write, then act.  From an event callback an error closes the connection
 * and an emptied queue finishes a drain; from inside other conn code (from_event 0:
 * a frame queued while the conn is mid-transition) an error only arms the write event,
 * whose callback then closes in a clean context. */
static void flush(conn *c, int from_event) {
    outframe *done = NULL;
    pthread_mutex_lock(&c->wlock);
    int r = write_some(c, &done);
    arm(c, r, 1, from_event);
    int err = c->werr;
    pthread_mutex_unlock(&c->wlock);
    release_written(done);
    if (!from_event) return;
    if (r == -1) dlcn_conn_fail_io(c, err);
    else if (r == 0) dlcn_write_done(c);
}

/* Frames that keep their place in the queue: those with a payload (bulk), and a BYE,
 * which says the sender is done and so must not overtake what it sent before. */
static bool in_order(dlc_frame_type t) { return dlc_frame_has_payload(t) || t == DLC_FRAME_BYE; }

/* f joins the queue; wlock held.  A frame with a payload (bulk) or a BYE goes to the
 * tail.  A control frame (none: a heartbeat, the handshake's, an ERROR) goes ahead of
 * the bulk frames not yet begun, behind the frame being written and the control frames
 * queued before it: it waits for at most one frame, never for every payload queued,
 * and no frame is ever split.  So heartbeats keep flowing on a slow link that carries
 * fragments back to back, and a learner's last contributions arrive before its BYE. */
static void oq_insert(conn *c, outframe *f) {
    f->next = NULL;
    if (!c->oq_head) {
        c->oq_head = c->oq_tail = f, c->oq_off = 0;
        return;
    }
    if (in_order(f->type)) {
        c->oq_tail->next = f, c->oq_tail = f;
        return;
    }
    outframe **at = c->oq_off > 0 ? &c->oq_head->next : &c->oq_head; /* the one begun stays first */
    while (*at && !in_order((*at)->type)) at = &(*at)->next;
    f->next = *at;
    *at = f;
    if (!f->next) c->oq_tail = f;
}

void dlcn_out_append(conn *c, outframe *f) {
    pthread_mutex_lock(&c->wlock);
    bool first = c->oq_head == NULL;
    oq_insert(c, f);
    pthread_mutex_unlock(&c->wlock);
    if (first) flush(c, 0);
}

/* One write of a whole frame f (header and payload) on an empty queue; wlock held.  The
 * bytes the socket took (0 when full), or -1 on an error (c->werr). */
static ssize_t write_now(conn *c, const outframe *f) {
    evutil_socket_t fd = c->wev ? event_get_fd(c->wev) : -1;
    if (fd < 0) return c->werr = EBADF, -1;
    for (;;) {
        ssize_t w;
        if (f->len == 0) {
            w = send(fd, f->hdr, f->hlen, MSG_NOSIGNAL);
        } else {
            struct iovec iov[2] = {{(void *)f->hdr, f->hlen}, {(void *)f->payload, f->len}};
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
            w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        }
        if (w > 0) atomic_fetch_add_explicit(&c->wrote, (uint64_t)w, memory_order_relaxed);
        if (w >= 0) return w;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        c->werr = errno;
        return -1;
    }
}

int dlcn_send_direct(conn *c, const outframe *f) {
    pthread_mutex_lock(&c->wlock);
    size_t off = 0;
    int r = 1; /* for arm: the socket is full, wait until it is writable */
    if (!c->oq_head) {
        ssize_t w = write_now(c, f);
        if (w == (ssize_t)(f->hlen + f->len)) {
            pthread_mutex_unlock(&c->wlock);
            return 1;
        }
        if (w < 0) r = -1;
        else off = (size_t)w;
    }
    outframe *q = malloc(sizeof *q + f->hlen);
    if (!q) {
        if (off) c->werr = ENOMEM, r = -1; /* part of it went: the stream cannot go on */
        if (r == -1) arm(c, -1, 0, 0);
        pthread_mutex_unlock(&c->wlock);
        return -1;
    }
    memcpy(q, f, sizeof *q + f->hlen);
    bool first = c->oq_head == NULL;
    oq_insert(c, q);
    if (first) c->oq_off = off, arm(c, r, 0, 0);
    pthread_mutex_unlock(&c->wlock);
    return 0;
}

void dlcn_out_kick(conn *c) {
    if (c->own_out && c->wev) flush(c, 0);
}

static void on_writable(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    conn *c = arg;
    flush(c, 1);
}

static void on_refill(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    conn *c = arg;
    flush(c, 1);
}

void dlcn_out_stop(conn *c) {
    pthread_mutex_lock(&c->wlock);
    outframe *f = c->oq_head;
    c->oq_head = c->oq_tail = NULL;
    c->oq_off = 0;
    if (c->wev) event_free(c->wev);
    if (c->rtimer) event_free(c->rtimer);
    c->wev = c->rtimer = NULL;
    c->wev_on = 0;
    pthread_mutex_unlock(&c->wlock);
    while (f) { /* dropped: the payload is released, nothing is counted as sent */
        outframe *next = f->next;
        size_t total = f->total;
        unsigned gen = f->gen;
        int app = dlcn_app_frame(f);
        dlcn_outframe_free(f);
        dlcn_unqueue(c->net, c->id, gen, total, app);
        f = next;
    }
}
