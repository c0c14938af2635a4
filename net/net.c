/* net.c - the transport's API (net.h, docs/transport.md): one I/O thread running a
 * libevent loop (with inline_io none: dlc_net_poll runs the loop), the bounded queues
 * between it and everyone else, addresses, the configuration.  The connections
 * themselves are conn.c, their input in.c and output out.c.
 *
 * Threads and ownership:
 *   - The I/O thread owns every conn's libevent objects and input buffers.  With
 *     inline_io, "the I/O thread" below is whichever thread is in dlc_net_poll (one at a
 *     time, net->polling) or dlc_net_free.
 *   - net->lock guards the peer table, each conn's state, queued bytes and flags read by
 *     other threads, the command list and the event list.  A conn leaves the peer
 *     table only on the I/O thread with the lock held, and its memory waits in the
 *     graveyard until reap(), so a thread holding the lock may read any conn in the
 *     table, and a callback still running on a closed conn reads valid memory.
 *   - A frame's payload passed to dlc_net_send belongs to the net until its free
 *     function runs (when the bytes are written or the conn is gone); it is written from
 *     the sender's memory (sendmsg on plain TCP, net/out.c; evbuffer_add_reference on
 *     TLS).
 *   - A received frame goes into one malloc'd buffer of the size its checked prefix
 *     declared, which becomes the event's: its body read straight into it on plain TCP,
 *     its first bytes (and any small frame) through the conn's read buffer.
 */
#include "internal.h"

/* ---- addresses ---- */

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
    if (!any || real_s() >= net->stop_deadline) event_base_loopbreak(net->base);
}

static void on_wake(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    dlc_net *net = arg;
    if (fd >= 0) { /* inline_io: the eventfd, reset */
        uint64_t v;
        ssize_t r = read(fd, &v, sizeof v);
        (void)r;
    }
    dlcn_reap(net);
    pthread_mutex_lock(&net->lock);
    if (atomic_exchange_explicit(&net->wev_any, 0, memory_order_acquire))
        for (int i = 0; i < net->npeers; i++) { /* sends that found a socket full (inline_io) */
            conn *c = net->peers[i];
            if (!c || !c->own_out) continue;
            pthread_mutex_lock(&c->wlock);
            if (c->wev_want && c->wev && !c->wev_on && event_add(c->wev, NULL) == 0) c->wev_on = 1;
            c->wev_want = 0;
            pthread_mutex_unlock(&c->wlock);
        }
    cmd *k = net->cmd_head;
    net->cmd_head = net->cmd_tail = NULL;
    net->ncmds = 0;
    bool resume = net->paused && net->ev_bytes <= net->cfg.in_max / 2;
    if (resume) net->paused = 0;
    pthread_mutex_unlock(&net->lock);
    if (resume) {
        dlcn_pause_reading(net, 0);
        double now = dlcn_now_coarse(net);
        for (int i = 0; i < net->npeers; i++) { /* what waited in libevent's buffers */
            conn *c = net->peers[i];
            if (!c || c->state == DLC_CONN_CLOSED) continue;
            if (c->last_rx < now) c->last_rx = now; /* its silence was ours: the timeout starts again */
            if (c->bev) dlcn_on_read(c->bev, c);
        }
    }
    while (k) {
        cmd *next = k->next;
        bool own = k->kind != CMD_SEND; /* a send's command is freed with its frame */
        conn *c = k->peer >= 0 && k->peer < net->npeers ? net->peers[k->peer] : NULL;
        switch (k->kind) {
        case CMD_SEND:
            if (c && c->state == DLC_CONN_READY && c->gen == k->frame->gen) {
                dlcn_out_queue(c, k->frame);
                dlcn_conn_arm(c);
            } else {
                size_t total = k->frame->total;
                unsigned gen = k->frame->gen;
                dlcn_outframe_free(k->frame);
                dlcn_unqueue(net, k->peer, gen, total, 1);
            }
            if (c) { /* queued in order: the sender may write directly again */
                pthread_mutex_lock(&net->lock);
                c->cmd_pending--;
                pthread_mutex_unlock(&net->lock);
                dlcn_update_direct(c);
            }
            break;
        case CMD_CLOSE:
            if (c && k->rate != 0 && c->client) /* dlc_net_move_on: lost as any, it reconnects at its next address */
                dlcn_conn_drain(c, DLC_PERR_NONE, "left by this side for its next address");
            else if (c) {
                c->app_closed = 1;
                dlcn_conn_drain(c, DLC_PERR_NONE, "closed by this side");
            }
            break;
        case CMD_SHAPE:
            for (int i = k->peer < 0 ? 0 : k->peer; i < (k->peer < 0 ? net->npeers : k->peer + 1); i++) {
                conn *s = net->peers[i];
                if (!s) continue;
                s->rate = k->rate, s->latency = k->latency;
                dlcn_apply_shape(s);
                dlcn_update_direct(s);
                dlcn_out_release(s);
                if (s->state != DLC_CONN_CLOSED) dlcn_conn_arm(s);
            }
            break;
        case CMD_SHAPE_IN:
            for (int i = k->peer < 0 ? 0 : k->peer; i < (k->peer < 0 ? net->npeers : k->peer + 1); i++) {
                conn *s = net->peers[i];
                if (!s) continue;
                s->in_rate = k->rate, s->in_latency = k->latency;
                dlcn_apply_shape(s);
                if (s->own_out) dlcn_in_shape(s);
                dlcn_in_release(s, 0);
                if (s->state != DLC_CONN_CLOSED) dlcn_conn_arm(s);
            }
            break;
        case CMD_CUT:
            if (c) dlcn_conn_set_cut(c, k->rate != 0);
            break;
        case CMD_CONNECT:
            if (c) dlcn_start_connect(c);
            break;
        case CMD_STOP:
            net->stopping = 1;
            net->stop_deadline = real_s() + net->cfg.drain_timeout_s;
            for (int i = 0; i < net->npeers; i++) {
                conn *s = net->peers[i];
                if (!s) continue;
                s->app_closed = 1;
                if (s->state == DLC_CONN_CONNECTING) dlcn_conn_close_now(s);
                else dlcn_conn_drain(s, DLC_PERR_SHUTDOWN, "the transport is shutting down");
            }
            break;
        }
        if (own) free(k);
        k = next;
    }
    if (atomic_exchange_explicit(&net->mem_kick, 0, memory_order_acq_rel)) dlcn_mem_resume(net);
    if (atomic_exchange_explicit(&net->clock_kick, 0, memory_order_acq_rel)) { /* the injected clock moved */
        pthread_mutex_lock(&net->lock);
        uint64_t req = net->clock_req;
        pthread_mutex_unlock(&net->lock);
        for (int i = 0; i < net->npeers; i++)
            if (net->peers[i] && net->peers[i]->state != DLC_CONN_CLOSED) dlcn_conn_tick(net->peers[i]);
        net->clock_turn = 1; /* inline_io: the poll under way returns, its caller sees the new time */
        pthread_mutex_lock(&net->lock);
        net->clock_done = req;
        pthread_cond_broadcast(&net->clock_cond);
        pthread_mutex_unlock(&net->lock);
    }
    if (net->stopping) stop_check(net);
}

static void on_stop_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    dlc_net *net = arg;
    dlcn_reap(net);
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

/* inline_io: the poll's deadline (the loop returns once it has run this). */
static void on_poll_timer(evutil_socket_t fd, short what, void *arg) { (void)fd, (void)what, (void)arg; }

/* ---- public API ---- */

dlc_net_config dlc_net_default_config(void) {
    dlc_net_config c = {0};
    c.frame_max = DLC_PROTO_FRAME_MAX_DEFAULT;
    c.out_max = (size_t)256 << 20;
    c.in_max = (size_t)512 << 20;
    c.mem_max = NET_MEM_DEFAULT;
    c.max_peers = 1024;
    c.max_unauth = NET_UNAUTH_DEFAULT, c.max_unauth_per_addr = NET_UNAUTH_PER_ADDR_DEFAULT;
    c.heartbeat_s = 1, c.timeout_s = 5, c.auth_timeout_s = 5;
    c.reconnect_min_s = 0.1, c.reconnect_max_s = 10, c.drain_timeout_s = 5;
    return c;
}

static pthread_once_t evthread_once = PTHREAD_ONCE_INIT;
static int evthread_ok;
double dlcn_coarse_tick = 0.1; /* until measured: a safe upper bound */

static void evthread_init(void) {
    evthread_ok = evthread_use_pthreads() == 0;
    struct timespec res;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && res.tv_sec == 0) dlcn_coarse_tick = res.tv_nsec * 1e-9;
}

static dlc_status check_config(const dlc_net_config *c) {
    if (c->frame_max <= DLC_PROTO_PREFIX + 64 || c->frame_max > DLC_PROTO_FRAME_MAX_LIMIT)
        return dlc_error(DLC_ERR_ARG, "frame_max = %zu: expected %d..%zu bytes", c->frame_max, DLC_PROTO_PREFIX + 65,
                         DLC_PROTO_FRAME_MAX_LIMIT);
    if (c->out_max < 1024) return dlc_error(DLC_ERR_ARG, "out_max = %zu: expected >= 1024 bytes", c->out_max);
    if (c->in_max < 1024) return dlc_error(DLC_ERR_ARG, "in_max = %zu: expected >= 1024 bytes", c->in_max);
    if (c->mem_max < c->frame_max)
        return dlc_error(DLC_ERR_ARG, "mem_max = %zu < frame_max = %zu: expected mem_max >= frame_max (a largest frame "
                                      "must fit the net's memory budget)", c->mem_max, c->frame_max);
    if (c->max_peers < 1 || c->max_peers > 1000000)
        return dlc_error(DLC_ERR_ARG, "max_peers = %d: expected 1..1000000", c->max_peers);
    if (c->max_unauth < 1 || c->max_unauth > NET_UNAUTH_MAX)
        return dlc_error(DLC_ERR_ARG, "max_unauth = %d: expected 1..%d connections not yet authenticated", c->max_unauth,
                         NET_UNAUTH_MAX);
    if (c->max_unauth_per_addr < 1 || c->max_unauth_per_addr > c->max_unauth)
        return dlc_error(DLC_ERR_ARG, "max_unauth_per_addr = %d: expected 1..max_unauth (%d)", c->max_unauth_per_addr,
                         c->max_unauth);
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
    net->wake_fd = -1;
    pthread_mutex_init(&net->lock, NULL);
    pthread_cond_init(&net->cond, NULL);
    pthread_cond_init(&net->clock_cond, NULL);
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
    if (!(net->dec = dlc_proto_decoder_new())) goto fail;
    if (cfg->tls && tls_setup(net) < 0) goto fail;
    net->rng = cfg->seed ? cfg->seed : (uint64_t)(real_s() * 1e9) ^ (uint64_t)(uintptr_t)net;
    if (!net->rng) net->rng = 1;
    if (cfg->inline_io) { /* one thread at a time runs this loop: no locks in it */
        struct event_config *ec = event_config_new();
        if (ec && event_config_set_flag(ec, EVENT_BASE_FLAG_NOLOCK) == 0) net->base = event_base_new_with_config(ec);
        if (ec) event_config_free(ec);
        net->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        net->wake = net->base && net->wake_fd >= 0
                        ? event_new(net->base, net->wake_fd, EV_PERSIST | EV_READ, on_wake, net)
                        : NULL;
        if (net->wake && event_add(net->wake, NULL) < 0) event_free(net->wake), net->wake = NULL;
    } else {
        net->base = event_base_new();
        net->wake = net->base ? event_new(net->base, -1, EV_PERSIST | EV_READ, on_wake, net) : NULL;
    }
    if (!net->wake) {
        dlc_error(DLC_ERR_INTERNAL, "libevent: cannot create the event loop");
        goto fail;
    }
    if (cfg->inline_io) {
        atomic_flag_clear(&net->polling);
        net->poll_timer = evtimer_new(net->base, on_poll_timer, net);
        if (!net->poll_timer) {
            dlc_error(DLC_ERR_INTERNAL, "libevent: cannot create the event loop");
            goto fail;
        }
        return net;
    }
    /* The I/O thread starts with the asynchronous signals blocked: the host's handlers
     * run on its own threads, and a SIGPIPE from a write to a peer gone (OpenSSL's, over
     * TLS; plain TCP never raises one, MSG_NOSIGNAL) stays pending on this thread rather
     * than killing a host that did not ignore it. */
    sigset_t all, old;
    sigfillset(&all);
    int sync_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof sync_signals / sizeof sync_signals[0]; i++) sigdelset(&all, sync_signals[i]);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int started = pthread_create(&net->thread, NULL, io_main, net) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!started) {
        dlc_error(DLC_ERR_INTERNAL, "cannot start the transport's I/O thread");
        goto fail;
    }
    net->thread_started = 1;
    return net;
fail:
    dlc_net_free(net);
    return NULL;
}

/* Hands the loop its CMD_STOP (drain every peer, then leave); 0 if it could not (out of
 * memory, a full command queue). */
static int queue_stop(dlc_net *net) {
    cmd *k = calloc(1, sizeof *k);
    if (!k) return 0;
    k->kind = CMD_STOP;
    pthread_mutex_lock(&net->lock);
    dlc_status st = cmd_push(net, k);
    pthread_mutex_unlock(&net->lock);
    if (st < 0) {
        free(k);
        return 0;
    }
    dlcn_wake(net);
    return 1;
}

void dlc_net_free(dlc_net *net) {
    if (!net) return;
    if (net->thread_started) {
        if (!queue_stop(net)) event_base_loopbreak(net->base); /* no drain: closed below */
        pthread_join(net->thread, NULL);
    } else if (net->poll_timer && queue_stop(net)) { /* inline_io: the drain runs here */
        io_main(net);
    }
    for (int i = 0; i < net->nlisteners; i++) evconnlistener_free(net->listeners[i]);
    free(net->listeners);
    for (int i = 0; i < net->npeers; i++) { /* what the drain deadline cut off */
        conn *c = net->peers[i];
        if (!c) continue;
        c->app_closed = 1;
        if (c->state != DLC_CONN_CLOSED) dlcn_conn_close_now(c);
        else dlcn_conn_retire(c);
    }
    dlcn_reap(net);
    for (cmd *k = net->cmd_head, *n; k; k = n) {
        n = k->next;
        if (k->kind == CMD_SEND) dlcn_outframe_free(k->frame);
        else free(k);
    }
    for (evnode *e = net->ev_head, *n; e; e = n) {
        n = e->next;
        dlc_net_event_release(&e->ev);
        free(e);
    }
    if (net->poll_timer) event_free(net->poll_timer);
    if (net->wake) event_free(net->wake);
    if (net->wake_fd >= 0) close(net->wake_fd);
    /* the bufferevents freed above finish in one more turn of the loop, which holds no
     * other event now: libevent defers their finalizers, and a TLS one freed while its
     * handshake's last records were in flight would keep its SSL (and the context) */
    if (net->base) event_base_loop(net->base, EVLOOP_NONBLOCK);
    if (net->base) event_base_free(net->base);
    if (net->ssl) SSL_CTX_free(net->ssl);
    dlc_proto_decoder_free(net->dec);
    free(net->peers);
    free(net->numel);
    pthread_cond_destroy(&net->cond);
    pthread_cond_destroy(&net->clock_cond);
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
        l ? evconnlistener_new(net->base, dlcn_on_accept, net, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_THREADSAFE, 0, fd) : NULL;
    if (el) net->listeners[net->nlisteners++] = el;
    pthread_mutex_unlock(&net->lock);
    if (!el) {
        close(fd);
        return dlc_error(DLC_ERR_INTERNAL, "listen %s: libevent could not take the socket", addr);
    }
    return port;
}

/* Splits "A|B|C" into its alternates, each resolved now (a name once); one address is
 * resolved as it always was.  *alts (calloc'ed) with *nalt entries, or NULL with *nalt 1
 * and the one address in *one. */
static dlc_status resolve_alternates(const char *addr, conn_alt *one, conn_alt **alts, int *nalt) {
    *alts = NULL, *nalt = 1;
    if (!addr || !strchr(addr, '|')) {
        dlc_status st = resolve(addr, 0, &one->addr, &one->addrlen, one->host, sizeof one->host);
        if (st == DLC_OK) snprintf(one->name, sizeof one->name, "%s", addr);
        return st;
    }
    int n = 1;
    for (const char *p = addr; *p; p++) n += *p == '|';
    if (n > DLC_NET_ALTERNATES_MAX)
        return dlc_error(DLC_ERR_ARG, "connect \"%.300s\": %d alternate addresses, at most %d (HOST:PORT|HOST:PORT...)",
                         addr, n, DLC_NET_ALTERNATES_MAX);
    conn_alt *a = calloc((size_t)n, sizeof *a);
    if (!a) return dlc_error(DLC_ERR_NOMEM, "dlc_net_connect: out of memory");
    const char *p = addr;
    for (int i = 0; i < n; i++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        char one_addr[sizeof a->host + 8];
        dlc_status st = DLC_OK;
        if (len == 0 || len >= sizeof one_addr) {
            st = dlc_error(DLC_ERR_ARG, "connect \"%.300s\": alternate %d of %d is %s: expected HOST:PORT|HOST:PORT..., "
                           "e.g. 10.0.0.1:7070|10.0.0.2:7070", addr, i + 1, n, len ? "too long" : "empty");
        } else {
            memcpy(one_addr, p, len), one_addr[len] = '\0';
            if ((st = resolve(one_addr, 0, &a[i].addr, &a[i].addrlen, a[i].host, sizeof a[i].host)) < 0) {
                char e[320];
                snprintf(e, sizeof e, "%s", dlc_last_error());
                st = dlc_error(DLC_ERR_ARG, "connect \"%.300s\": alternate %d of %d: %s", addr, i + 1, n, e);
            }
            size_t nl = len < sizeof a[i].name - 1 ? len : sizeof a[i].name - 1; /* (cut as one address's is) */
            memcpy(a[i].name, one_addr, nl), a[i].name[nl] = '\0';
        }
        if (st < 0) {
            free(a);
            return st;
        }
        p += len + 1;
    }
    *one = a[0], *alts = a, *nalt = n;
    return DLC_OK;
}

int dlc_net_connect(dlc_net *net, const char *addr) {
    if (!net) return dlc_error(DLC_ERR_ARG, "dlc_net_connect: NULL net");
    conn_alt first, *alts;
    int nalt;
    dlc_status st = resolve_alternates(addr, &first, &alts, &nalt);
    if (st < 0) return st;
    if (net->ssl && !net->cfg.tls_ca && !net->cfg.tls_insecure) {
        free(alts);
        return dlc_error(DLC_ERR_ARG, "connect %s: a TLS client needs tls_ca (or tls_insecure)", addr);
    }
    cmd *k = calloc(1, sizeof *k);
    if (!k) {
        free(alts);
        return dlc_error(DLC_ERR_NOMEM, "dlc_net_connect: out of memory");
    }
    /* The conn is made here (its timer is created on the base, thread-safe) and started
     * on the I/O thread, at the first address. */
    conn *c = dlcn_conn_new(net, 1);
    if (!c) {
        free(k), free(alts);
        return dlc_error(DLC_ERR_NOMEM, "dlc_net_connect: out of memory or peer ids");
    }
    pthread_mutex_lock(&net->lock); /* (dlc_net_get_counters reads the name) */
    c->addr = first.addr, c->addrlen = first.addrlen;
    snprintf(c->name, sizeof c->name, "%s", first.name);
    snprintf(c->host, sizeof c->host, "%s", first.host);
    c->alts = alts, c->nalt = nalt, c->alt = 0;
    pthread_mutex_unlock(&net->lock);
    c->state = DLC_CONN_CONNECTING;
    k->kind = CMD_CONNECT, k->peer = c->id;
    pthread_mutex_lock(&net->lock);
    st = cmd_push(net, k);
    pthread_mutex_unlock(&net->lock);
    if (st < 0) {
        free(k);
        return st;
    }
    dlcn_wake(net);
    return c->id;
}

dlc_status dlc_net_send(dlc_net *net, int peer, const dlc_frame *f, void (*free_payload)(const void *, void *),
                        void *arg) {
    if (!net || !f) return dlc_error(DLC_ERR_ARG, "dlc_net_send: NULL argument");
    if (f->type <= DLC_FRAME_WELCOME || f->type == DLC_FRAME_ERROR || (unsigned)f->type >= DLC_FRAME_TYPE_COUNT)
        return dlc_error(DLC_ERR_ARG, "dlc_net_send: a %s is the transport's own to send",
                         dlc_frame_type_name(f->type) ? dlc_frame_type_name(f->type) : "frame of no known type");
    /* encoded into a frame on this stack: written from here when the socket takes it at
     * once, copied to the heap only when it must wait */
    union {
        outframe o;
        uint8_t room[sizeof(outframe) + DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX];
    } tmp;
    outframe *o = &tmp.o;
    memset(o, 0, sizeof *o);
    int64_t n = dlc_proto_encode(f, net->has_layout ? &net->layout : NULL, o->hdr, DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX);
    if (n < 0) return (dlc_status)n;
    o->net = net, o->peer = peer, o->type = f->type, o->hlen = (size_t)n, o->total = (size_t)n + f->msg.len;
    o->payload = f->msg.payload, o->len = f->msg.len, o->free_payload = free_payload, o->arg = arg;
    o->notify = free_payload == NULL;
    dlc_status st = DLC_OK;
    char why[320];
    pthread_mutex_lock(&net->lock);
    conn *c = peer >= 0 && peer < net->npeers ? net->peers[peer] : NULL;
    if (!c || c->state != DLC_CONN_READY) {
        st = dlc_error(DLC_ERR_STATE, "peer %d is %s, not ready", peer,
                       c ? dlc_conn_state_name(c->state) : "not connected (unknown or gone)");
    } else if (dlcn_direction_refusal(c, f->type, why, sizeof why)) {
        st = dlc_error(DLC_ERR_ARG, "dlc_net_send to peer %d: a %s is %s", peer, dlc_frame_type_name(f->type), why);
    } else if (c->queued > 0 && c->queued + o->total > net->cfg.out_max) { /* one frame always fits an empty queue */
        c->refused = 1;
        net->total.refused_full++;
        st = dlc_error(DLC_ERR_RANGE, "peer %d: %zu bytes queued + %zu exceed out_max = %zu (back-pressure: retry "
                                      "after its DRAINED event)", peer, c->queued, o->total, net->cfg.out_max);
    } else if (c->queued > 0 && c->queued + o->total > dlcn_share(net)) {
        c->refused = 1;
        net->total.refused_full++;
        st = dlc_error(DLC_ERR_RANGE, "peer %d: %zu bytes queued + %zu exceed its share of mem_max, %zu = mem_max %zu "
                                      "/ %d ready peers (back-pressure: retry after its DRAINED event)", peer,
                       c->queued, o->total, dlcn_share(net), net->cfg.mem_max, net->n_ready);
    } else if (dlcn_mem(net) + o->total > net->cfg.mem_max) {
        c->refused = 1, net->mem_refused = 1;
        net->total.refused_full++;
        st = dlc_error(DLC_ERR_RANGE, "peer %d: the net holds %zu bytes (queued for every peer, received and being "
                                      "received) + %zu exceed mem_max = %zu (back-pressure: retry after its DRAINED "
                                      "event)", peer, dlcn_mem(net), o->total, net->cfg.mem_max);
    } else if (c->direct) { /* nothing queued ahead: write from this thread, no hand-off */
        o->gen = c->gen;
        int r = dlcn_send_direct(c, o);
        bool drained = false;
        if (r >= 0) dlcn_count_out(c, o, 1);
        if (r == 0) dlcn_queued_add(c, o->total, 1); /* its copy waits in the queue */
        else if (r == 1 && c->refused && c->queued < dlcn_limit(net) / 2) c->refused = 0, drained = true;
        pthread_mutex_unlock(&net->lock);
        if (r < 0) return dlc_error(DLC_ERR_NOMEM, "dlc_net_send: out of memory");
        if (r == 1) dlcn_frame_done(o);
        if (drained) dlcn_ev_post_simple(net, DLC_NET_DRAINED, peer, 0, NULL);
        return DLC_OK;
    } else {
        outframe *h = malloc(sizeof *h + (size_t)n); /* for the I/O thread */
        if (!h) {
            st = dlc_error(DLC_ERR_NOMEM, "dlc_net_send: out of memory");
        } else {
            memcpy(h, o, sizeof *h + (size_t)n);
            h->gen = c->gen;
            cmd *k = &h->send;
            k->kind = CMD_SEND, k->peer = peer, k->frame = h;
            st = cmd_push(net, k);
            if (st == DLC_OK) dlcn_queued_add(c, h->total, 1), c->cmd_pending++, c->direct = 0;
            else free(h);
        }
    }
    pthread_mutex_unlock(&net->lock);
    if (st < 0) return st;
    dlcn_wake(net);
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
    if (st == DLC_OK && kind == CMD_SHAPE_IN && peer < 0) net->shape_in_rate = rate, net->shape_in_latency = latency;
    if (st == DLC_OK && kind == CMD_CUT && rate != 0) c->direct = 0; /* nothing may write past the cut */
    if (st == DLC_OK && kind == CMD_SHAPE && (rate > 0 || latency > 0)) /* nothing may write past the shaper */
        for (int i = peer < 0 ? 0 : peer; i < (peer < 0 ? net->npeers : peer + 1); i++)
            if (net->peers[i]) net->peers[i]->direct = 0;
    if (st == DLC_OK) st = cmd_push(net, k);
    pthread_mutex_unlock(&net->lock);
    if (st < 0) {
        free(k);
        return st;
    }
    dlcn_wake(net);
    return DLC_OK;
}

dlc_status dlc_net_close(dlc_net *net, int peer) {
    if (!net) return dlc_error(DLC_ERR_ARG, "dlc_net_close: NULL net");
    if (peer < 0) return dlc_error(DLC_ERR_STATE, "peer %d is not connected (unknown or gone)", peer);
    return push_simple(net, CMD_CLOSE, peer, 0, 0);
}

dlc_status dlc_net_move_on(dlc_net *net, int peer) {
    if (!net) return dlc_error(DLC_ERR_ARG, "dlc_net_move_on: NULL net");
    if (peer < 0) return dlc_error(DLC_ERR_STATE, "peer %d is not connected (unknown or gone)", peer);
    return push_simple(net, CMD_CLOSE, peer, 1, 0);
}

dlc_status dlc_net_shape(dlc_net *net, int peer, double rate, double latency) {
    if (!net) return dlc_error(DLC_ERR_ARG, "dlc_net_shape: NULL net");
    if (!isfinite(rate) || rate < 0 || (rate > 0 && rate < 1000))
        return dlc_error(DLC_ERR_ARG, "rate = %g bytes/s: expected 0 (no cap) or >= 1000", rate);
    if (!isfinite(latency) || latency < 0 || latency > 60)
        return dlc_error(DLC_ERR_ARG, "latency = %g s: expected 0..60", latency);
    return push_simple(net, CMD_SHAPE, peer, rate, latency);
}

dlc_status dlc_net_shape_in(dlc_net *net, int peer, double rate, double latency) {
    if (!net) return dlc_error(DLC_ERR_ARG, "dlc_net_shape_in: NULL net");
    if (!isfinite(rate) || rate < 0 || (rate > 0 && rate < 1000))
        return dlc_error(DLC_ERR_ARG, "rate = %g bytes/s: expected 0 (no cap) or >= 1000", rate);
    if (!isfinite(latency) || latency < 0 || latency > 60)
        return dlc_error(DLC_ERR_ARG, "latency = %g s: expected 0..60", latency);
    return push_simple(net, CMD_SHAPE_IN, peer, rate, latency);
}

dlc_status dlc_net_set_learner(dlc_net *net, int id) {
    if (!net || !net->has_hello || id < -1)
        return dlc_error(DLC_ERR_ARG, "net_set_learner: %s", !net ? "NULL net" : !net->has_hello ? "the net has no hello"
                                                                                : "id below -1");
    pthread_mutex_lock(&net->lock);
    net->hello.learner = id;
    pthread_mutex_unlock(&net->lock);
    return DLC_OK;
}

dlc_status dlc_net_set_refusing(dlc_net *net, const char *why) {
    if (!net || !net->has_hello)
        return dlc_error(DLC_ERR_ARG, "dlc_net_set_refusing: %s", !net ? "NULL net"
                         : "the net has no hello: without a HELLO no connection says whether it is a standby");
    size_t n = why ? strlen(why) : 0;
    if (n > DLC_PROTO_TEXT_MAX)
        return dlc_error(DLC_ERR_ARG, "dlc_net_set_refusing: a reason of %zu bytes, expected at most %d (an ERROR's "
                         "text)", n, DLC_PROTO_TEXT_MAX);
    pthread_mutex_lock(&net->lock);
    memcpy(net->refusing, why ? why : "", n);
    net->refusing[n] = '\0';
    dlc_text_clean(net->refusing); /* it goes on the wire */
    pthread_mutex_unlock(&net->lock);
    return DLC_OK;
}

dlc_status dlc_net_clock_moved(dlc_net *net) {
    if (!net) return dlc_error(DLC_ERR_ARG, "dlc_net_clock_moved: NULL net");
    pthread_mutex_lock(&net->lock);
    uint64_t req = ++net->clock_req;
    pthread_mutex_unlock(&net->lock);
    atomic_store_explicit(&net->clock_kick, 1, memory_order_release);
    dlcn_wake(net);
    /* inline_io: the next dlc_net_poll acts on it; else the I/O thread, now */
    if (!net->thread_started || pthread_equal(pthread_self(), net->thread)) return DLC_OK;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += NET_CLOCK_WAIT_S;
    dlc_status st = DLC_OK;
    pthread_mutex_lock(&net->lock);
    while (net->clock_done < req && st == DLC_OK)
        if (pthread_cond_timedwait(&net->clock_cond, &net->lock, &until) == ETIMEDOUT)
            st = dlc_error(DLC_ERR_STATE, "dlc_net_clock_moved: the I/O thread did not check its timers within %d s",
                           NET_CLOCK_WAIT_S);
    pthread_mutex_unlock(&net->lock);
    return st;
}

dlc_status dlc_net_cut(dlc_net *net, int peer, int cut) {
    if (!net) return dlc_error(DLC_ERR_ARG, "dlc_net_cut: NULL net");
    if (peer < 0) return dlc_error(DLC_ERR_STATE, "peer %d is not connected (unknown or gone): a cut names one link", peer);
    return push_simple(net, CMD_CUT, peer, cut ? 1 : 0, 0);
}

/* Takes the first waiting event into *ev: 1, or 0 if none.  Called with net->lock
 * held; returns with it released. */
static int take_event_locked(dlc_net *net, dlc_net_event *ev) {
    evnode *n = net->ev_head;
    bool resume = false;
    if (n) {
        net->ev_head = n->next;
        if (!net->ev_head) net->ev_tail = NULL;
        atomic_fetch_sub_explicit(&net->ev_bytes, n->bytes, memory_order_relaxed);
        atomic_fetch_sub_explicit(&net->ev_count, 1, memory_order_relaxed);
        resume = net->paused && net->ev_bytes <= net->cfg.in_max / 2;
    }
    pthread_mutex_unlock(&net->lock);
    if (resume) dlcn_wake(net);
    if (!n) return 0;
    if (n->bytes) dlcn_mem_freed(net);
    memcpy(ev, &n->ev, sizeof *ev);
    free(n);
    return 1;
}

static int take_event(dlc_net *net, dlc_net_event *ev) {
    if (atomic_load_explicit(&net->ev_count, memory_order_acquire) == 0) return 0;
    pthread_mutex_lock(&net->lock);
    return take_event_locked(net, ev);
}

/* inline_io: runs the loop until an event is waiting or the time is up; it does not
 * sleep for the first NET_POLL_SPIN_S. */
static int poll_inline(dlc_net *net, dlc_net_event *ev, int timeout_ms) {
    if (atomic_flag_test_and_set_explicit(&net->polling, memory_order_acquire))
        return dlc_error(DLC_ERR_STATE, "dlc_net_poll: another thread is polling this net (inline_io: one thread polls)");
    /* first what is waiting, then one pass of the loop: no clock read on this path; a
     * frame the loop receives with nothing queued ahead is decoded into *ev (poll_got) */
    int got = take_event(net, ev);
    net->poll_ev = ev, net->poll_got = 0;
    if (!got) {
        event_base_loop(net->base, EVLOOP_NONBLOCK | EVLOOP_ONCE);
        got = net->poll_got || take_event(net, ev);
    }
    if (!got && timeout_ms != 0) {
        double t0 = real_s(), end = t0 + timeout_ms / 1e3, spin_end = t0 + NET_POLL_SPIN_S;
        int timer = 0;
        for (;;) {
            double t = real_s();
            if (t < spin_end) {
                event_base_loop(net->base, EVLOOP_NONBLOCK | EVLOOP_ONCE);
            } else {
                if (timeout_ms > 0 && t >= end) break;
                if (timeout_ms > 0) {
                    struct timeval tv = tv_of(end - t);
                    evtimer_add(net->poll_timer, &tv);
                    timer = 1;
                }
                event_base_loop(net->base, EVLOOP_ONCE);
            }
            if ((got = net->poll_got || take_event(net, ev))) break;
            if (net->clock_turn) break;
        }
        if (timer) evtimer_del(net->poll_timer);
    }
    net->poll_ev = NULL, net->clock_turn = 0;
    dlcn_reap(net);
    atomic_flag_clear_explicit(&net->polling, memory_order_release);
    return got;
}

int dlc_net_poll(dlc_net *net, dlc_net_event *ev, int timeout_ms) {
    if (!net || !ev) return dlc_error(DLC_ERR_ARG, "dlc_net_poll: NULL argument");
    if (net->poll_timer) return poll_inline(net, ev, timeout_ms);
    struct timespec until;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    }
    if (timeout_ms != 0 && atomic_load_explicit(&net->ev_count, memory_order_acquire) == 0) {
        double end = real_s() + NET_POLL_SPIN_S;
        while (atomic_load_explicit(&net->ev_count, memory_order_acquire) == 0 && real_s() < end) sched_yield();
    }
    pthread_mutex_lock(&net->lock);
    while (!net->ev_head && timeout_ms != 0) {
        if (timeout_ms < 0) pthread_cond_wait(&net->cond, &net->lock);
        else if (pthread_cond_timedwait(&net->cond, &net->lock, &until) == ETIMEDOUT) break;
    }
    return take_event_locked(net, ev);
}

void dlc_net_event_release(dlc_net_event *ev) {
    if (!ev) return;
    dlcn_rx_free(ev->owned_);
    ev->owned_ = NULL;
    free(ev->values);
    ev->values = NULL, ev->nvalues = 0;
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
        out->unauth = (uint64_t)net->n_unauth;
        out->mem = dlcn_mem(net);
    } else if (peer >= net->npeers || !net->peers[peer]) {
        st = dlc_error(DLC_ERR_STATE, "peer %d is not connected (unknown or gone)", peer);
    } else {
        out->state = net->peers[peer]->state;
        snprintf(out->addr, sizeof out->addr, "%s", net->peers[peer]->name);
    }
    for (int i = peer < 0 ? 0 : peer; st == DLC_OK && i < (peer < 0 ? net->npeers : peer + 1); i++) {
        conn *c = net->peers[i];
        if (!c) continue;
        for (int t = 0; t < DLC_FRAME_TYPE_COUNT; t++) {
            out->bytes_out[t] += c->bytes_out[t] + c->direct_bytes_out[t];
            out->frames_out[t] += c->frames_out[t] + c->direct_frames_out[t];
            out->bytes_in[t] += c->bytes_in[t], out->frames_in[t] += c->frames_in[t];
        }
        out->queued += c->queued;
    }
    pthread_mutex_unlock(&net->lock);
    return st;
}
