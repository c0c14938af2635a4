/*
 * lrt.c - a learner on the wall clock, or the one its config names (rt.h).  Three
 * threads: the host's compute thread runs everything here but coder_main and
 * decode_fragment; the transport's I/O thread reads and writes the socket and decodes
 * each arrived fragment (decode_fragment, the net's decode hook), and its event queue
 * (bounded by the net's in_max) is the mailbox
 * of arrived frames, taken at step boundaries; the codec thread (coder_main) encodes the
 * contributions the state machine hands out (DLC_LACT_ENCODE) into buffers the net then
 * owns, and sends them, so the inner loop never waits for a socket or a codec.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/mem.h"
#include "diloco/params.h"
#include "diloco/rt.h"
#include "diloco/tensor.h"
#include "rt_internal.h"

static const char *const lrt_event_names[] = {"applied", "connected", "disconnected", "phase", "room"};
_Static_assert(sizeof lrt_event_names / sizeof *lrt_event_names == DLC_LRT_EVENT_COUNT, "lrt event names");
const char *dlc_lrt_event_name(dlc_lrt_event_kind k) {
    return (unsigned)k < DLC_LRT_EVENT_COUNT ? lrt_event_names[k] : NULL;
}

/* Most host events kept between two dlc_lrt_poll loops (P applied per resync at most
 * plus a few connection changes: a bound far above what one step produces). */
#define LRT_EVENTS_MAX 4096
/* CONFLICT refusals (another live connection holds this learner's id) lasting this many
 * of its net's timeout_s are final: the holder is no stale connection of its own. */
#define LRT_CONFLICT_TIMEOUTS 2
/* Sent contributions' buffers kept for the next ones (buf_get, buf_put). */
#define LRT_SPARE 1

typedef struct held {
    dlc_frame f;              /* the frame, its payload pointing at bytes */
    uint8_t *bytes;
} held;

/* One contribution out to the codec thread; at most one per fragment (learner.h). */
enum { JOB_IDLE, JOB_QUEUED, JOB_DONE };
typedef struct enc_job {
    int state;                /* under mu */
    dlc_learner_action a;     /* the ENCODE action: the learner's buffers, lent */
    int direct;               /* the codec thread sends it (nothing held ahead of it) */
    /* set by the codec thread before JOB_DONE */
    uint8_t *out;             /* the encoded payload, unless the net took it */
    size_t len;
    int sent;                 /* the net took it */
    dlc_status st;
    char err[DLC_RT_TEXT_MAX];
} enc_job;

struct dlc_lrt {
    dlc_lrt_config cfg;       /* cfg.connect points at connect */
    rt_strings strs;
    char *connect;            /* the syncer's address, copied (named in errors later) */
    dlc_learner *l;           /* made at the first WELCOME */
    dlc_net *net;
    dlc_hello hello;
    dlc_proto_layout layout;
    int64_t *numel;
    int peer, ready, id, P;   /* ready: every shard's connection is READY; peer: shard 0's */
    int ready_once; /* it was READY before: a READY after that is a reconnect */
    /* syncer shards (docs/shards.md): `connect` lists S addresses, shard k's connection
     * is peers[k], READY when rdy[k]; fragment p goes to shard owner[p] (dlc_plan_deal) */
    int S;
    int peers[DLC_LEARNER_SHARDS_MAX];
    uint8_t rdy[DLC_LEARNER_SHARDS_MAX], rdy_once[DLC_LEARNER_SHARDS_MAX];
    char *addr[DLC_LEARNER_SHARDS_MAX]; /* into addr_buf: connect's copy, split */
    char *addr_buf;
    int *owner;               /* [P], NULL with one syncer */
    double t0;
    char last_refusal[DLC_RT_TEXT_MAX];
    int joined_once;          /* dlc_lrt_join returned DLC_OK: a BYE is no longer a refusal */
    /* host events, a ring */
    dlc_lrt_event ev[LRT_EVENTS_MAX];
    int ev_head, ev_len;
    /* contributions held while the syncer is unreachable, a ring of hold entries */
    held *hq;
    int hq_head, hq_len, hold;
    int grad_ready;           /* dp: GRADIENT_READY seen since the last gradient */
    int at_boundary;          /* dlc_lrt_step_reads ran: step_done takes no more arrivals */
    int replay_ready;         /* dp: a replayed average is in the grad arena (until replayed) */
    int replays;              /* dp: the syncer's WELCOME has the "replay" capability */
    int void_step;            /* dp: the last wait ended in a resync, not the average */
    int refused;              /* the syncer refused this learner for good (another run, model,
                               * secret, version; its id held by a live learner): waiting
                               * cannot help, and training on alone would be a run of its own */
    double conflict_t;        /* lrt_now of the first of the CONFLICT refusals in a row (0: none) */
    uint8_t leaving[DLC_LEARNER_SHARDS_MAX]; /* shard k's connection is being left (older_epoch) */
    dlc_lrt_stats st;
    /* the codec thread (none with cfg.inline_codec or dp) */
    pthread_t coder;
    int coder_on, coder_stop; /* coder_stop under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* a job queued, a job done, stop */
    enc_job *jobs;            /* [P], by fragment */
    int *cq, cq_head, cq_len; /* the queue of fragments to encode, a ring of P */
    int busy;                 /* jobs not idle (compute thread's count) */
    /* payload buffers kept for the next contribution (buf_get, buf_put) */
    pthread_mutex_t spare_mu;
    uint8_t *spare[LRT_SPARE];
    int nspare;
    int64_t reused;           /* under spare_mu */
    size_t spare_cap;         /* the largest buffer asked for yet, under spare_mu */
    /* merged fragments kept in the frames they came in until applied (learner.h,
     * dlc_learner_receive_lent): the received event of fragment p (kind DLC_NET_FRAME;
     * else empty) */
    dlc_net_event *lent;      /* [P] */
};

static double lrt_now(const dlc_lrt *l) { return rt_time(&l->cfg.net) - l->t0; }

/* The shard a frame goes to: a contribution's fragment's owner, else shard 0 (the
 * messages of dp, which has one syncer; heartbeats and BYEs go to each: send_all). */
static int frame_shard(const dlc_lrt *l, const dlc_frame *f) {
    return l->owner && f->type == DLC_FRAME_CONTRIBUTION && f->msg.fragment >= 0 && f->msg.fragment < l->P
               ? l->owner[f->msg.fragment]
               : 0;
}

/* The shard whose connection a net event is of (-1: none). */
static int peer_shard(const dlc_lrt *l, int peer) {
    for (int k = 0; k < l->S; k++)
        if (l->peers[k] == peer) return k;
    return -1;
}

static void update_ready(dlc_lrt *l) {
    int all = 1;
    for (int k = 0; k < l->S; k++) all &= l->rdy[k];
    l->ready = all;
    l->st.connected = all;
}

/* A frame without payload to every shard whose connection is READY, each stamped with
 * the epoch of that shard the learner follows (a HEARTBEAT, a BYE). */
static void send_all(dlc_lrt *l, const dlc_frame *f) {
    for (int k = 0; k < l->S; k++) {
        if (!l->rdy[k]) continue;
        dlc_frame g = *f;
        if (l->S > 1 && l->l && g.msg.epoch) g.msg.epoch = dlc_learner_shard_epoch(l->l, k); /* (stamped ones) */
        dlc_net_send(l->net, l->peers[k], &g, NULL, NULL);
    }
}

dlc_lrt_config dlc_lrt_default_config(void) {
    dlc_lrt_config c;
    memset(&c, 0, sizeof c);
    c.learner = dlc_learner_default_params();
    c.learner.id = -1;
    c.net = dlc_net_default_config();
    c.run = "";
    return c;
}

static void push_event(dlc_lrt *l, const dlc_lrt_event *e) {
    if (l->ev_len == LRT_EVENTS_MAX) { /* the host does not read them: keep the newest */
        l->ev_head = (l->ev_head + 1) % LRT_EVENTS_MAX;
        l->ev_len--;
    }
    l->ev[(l->ev_head + l->ev_len) % LRT_EVENTS_MAX] = *e;
    l->ev_len++;
}

/* An event of kind k, stamped now, its other fields zero. */
static dlc_lrt_event new_event(dlc_lrt *l, dlc_lrt_event_kind k) {
    dlc_lrt_event e;
    memset(&e, 0, sizeof e);
    e.kind = k;
    e.time = lrt_now(l);
    return e;
}

/* An event for the state machine's action a: its fragment and lag, at the step the
 * learner is at. */
static dlc_lrt_event action_event(dlc_lrt *l, dlc_lrt_event_kind k, const dlc_learner_action *a) {
    dlc_lrt_event e = new_event(l, k);
    e.fragment = a->fragment;
    e.lag = a->lag;
    e.boundary = dlc_learner_steps(l->l);
    return e;
}

static void conn_event(dlc_lrt *l, dlc_lrt_event_kind k, const char *text) {
    dlc_lrt_event e = new_event(l, k);
    snprintf(e.text, sizeof e.text, "%s", text ? text : "");
    dlc_text_clean(e.text); /* it may quote the syncer, cut at a byte count */
    push_event(l, &e);
}

/* A connection event of shard k's link, its text naming the shard when there are several. */
static void shard_event(dlc_lrt *l, dlc_lrt_event_kind kind, int k, const char *text) {
    char t[DLC_RT_TEXT_MAX];
    if (l->S > 1) snprintf(t, sizeof t, "shard %d of %d: %s", k + 1, l->S, text);
    conn_event(l, kind, l->S > 1 ? t : text);
}

/* ---- payload buffers ----
 * A contribution's encoded bytes go to the net, which frees them once sent.  A fragment
 * of a large model is tens of megabytes: a fresh allocation is mapped anew and every page
 * of it faulted in, at every send.  So sent buffers are kept, LRT_SPARE at most, for the
 * next contribution to take (the size each holds is in a header before its bytes), each
 * as large as the largest contribution yet. */
#define BUF_HDR 64

static uint8_t *buf_get(dlc_lrt *l, size_t len) {
    if (len == 0) len = 1;
    pthread_mutex_lock(&l->spare_mu);
    for (int i = 0; i < l->nspare; i++) {
        uint8_t *b = l->spare[i];
        size_t cap;
        memcpy(&cap, b - BUF_HDR, sizeof cap);
        if (cap >= len) {
            l->spare[i] = l->spare[--l->nspare];
            l->reused++;
            pthread_mutex_unlock(&l->spare_mu);
            return b;
        }
    }
    /* as large as the largest asked for yet: fragments differ in size, and a kept
     * buffer is to take the next contribution of any of them */
    if (len < l->spare_cap) len = l->spare_cap;
    else l->spare_cap = len;
    pthread_mutex_unlock(&l->spare_mu);
    uint8_t *b = len <= SIZE_MAX - BUF_HDR ? dlc_big_alloc(len + BUF_HDR) : NULL;
    if (!b) return NULL;
    memcpy(b, &len, sizeof len);
    return b + BUF_HDR;
}

/* Any thread (the net's I/O thread among them). */
static void buf_put(dlc_lrt *l, uint8_t *b) {
    if (!b) return;
    size_t cap;
    memcpy(&cap, b - BUF_HDR, sizeof cap);
    pthread_mutex_lock(&l->spare_mu);
    if (l->nspare < LRT_SPARE && cap >= l->spare_cap) { /* not one smaller than the largest */
        l->spare[l->nspare++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&l->spare_mu);
    if (b) free(b - BUF_HDR);
}

static void free_bytes(const void *payload, void *arg) { buf_put(arg, (uint8_t *)payload); }

static void drop_held(dlc_lrt *l, held *h) {
    buf_put(l, h->bytes);
    h->bytes = NULL;
}

/* A contribution of fragment p from base version v holds every step of an earlier one of
 * p from v (its outer gradient is measured from the same base, its steps and tokens
 * counted from it: learner.h), so a held one of p from v that has not left yet goes when
 * a newer one is sent or held: what waits for a slow or unreachable syncer is at most
 * one contribution per fragment and base, and none arrives after the one that holds it. */
static void supersede(dlc_lrt *l, const dlc_frame *g) {
    if (g->type != DLC_FRAME_CONTRIBUTION || l->hq_len == 0) return;
    int kept = 0;
    for (int i = 0; i < l->hq_len; i++) {
        held h = l->hq[(l->hq_head + i) % l->hold];
        if (h.f.type == DLC_FRAME_CONTRIBUTION && h.f.msg.fragment == g->msg.fragment &&
            h.f.msg.version == g->msg.version) {
            drop_held(l, &h);
            l->st.held_superseded++;
            continue;
        }
        l->hq[(l->hq_head + kept++) % l->hold] = h;
    }
    l->hq_len = kept;
}

/* Sends f whose payload `copy` (malloc'd, or NULL) is now the net's or held.  A frame
 * that cannot go now is held when `keep` (contributions, gradients), else dropped
 * (heartbeats). */
static dlc_status send_owned(dlc_lrt *l, const dlc_frame *f, uint8_t *copy, int keep) {
    dlc_frame g = *f;
    g.msg.payload = copy;
    int k = frame_shard(l, &g);
    dlc_status st = l->rdy[k] ? dlc_net_send(l->net, l->peers[k], &g, copy ? free_bytes : NULL, l) : DLC_ERR_STATE;
    if (st == DLC_OK) {
        supersede(l, &g);
        l->st.sent++;
        return DLC_OK;
    }
    if (st != DLC_ERR_STATE && st != DLC_ERR_RANGE) {
        buf_put(l, copy);
        return st;
    }
    if (!keep) {
        buf_put(l, copy);
        return DLC_OK;
    }
    supersede(l, &g);
    if (l->hq_len == l->hold) { /* bounded: the oldest goes */
        drop_held(l, &l->hq[l->hq_head]);
        l->hq_head = (l->hq_head + 1) % l->hold;
        l->hq_len--;
        l->st.held_dropped++;
    }
    held *h = &l->hq[(l->hq_head + l->hq_len) % l->hold];
    h->f = g;
    h->bytes = copy;
    l->hq_len++;
    l->st.held++;
    return DLC_OK;
}

/* send_owned of a copy of f's payload. */
static dlc_status send_frame(dlc_lrt *l, const dlc_frame *f, int keep) {
    uint8_t *copy = NULL;
    if (f->msg.len) {
        if (!(copy = buf_get(l, f->msg.len)))
            return dlc_error(DLC_ERR_NOMEM, "learner: out of memory for a %zu-byte contribution", f->msg.len);
        memcpy(copy, f->msg.payload, f->msg.len);
    }
    return send_owned(l, f, copy, keep);
}

/* ---- the codec thread ---- */

/* Encodes job's contribution into a buffer of its own, and sends it when direct. */
static void encode_job(dlc_lrt *l, enc_job *j) {
    j->out = NULL, j->len = 0, j->sent = 0, j->err[0] = '\0';
    j->st = DLC_OK;
    size_t cap = j->a.msg.len;
    if (!(j->out = buf_get(l, cap))) {
        j->st = dlc_error(DLC_ERR_NOMEM, "learner: out of memory for a %zu-byte contribution", cap);
    } else {
        j->st = dlc_learner_encode(&j->a, j->out, cap, &j->len);
    }
    if (j->st != DLC_OK) {
        snprintf(j->err, sizeof j->err, "%s", dlc_last_error());
        buf_put(l, j->out);
        j->out = NULL;
        return;
    }
    if (!j->direct) return;
    dlc_msg m = j->a.msg;
    m.payload = j->out, m.len = j->len;
    dlc_frame f;
    if (dlc_frame_from_msg(&f, &m) == DLC_OK &&
        dlc_net_send(l->net, l->peers[frame_shard(l, &f)], &f, free_bytes, l) == DLC_OK) {
        j->sent = 1; /* the net's now */
        j->out = NULL;
    }
}

static void *coder_main(void *arg) {
    dlc_lrt *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->coder_stop && l->cq_len == 0) pthread_cond_wait(&l->cv, &l->mu);
        if (l->cq_len == 0) break; /* stopped, and nothing left */
        enc_job *j = &l->jobs[l->cq[l->cq_head]];
        l->cq_head = (l->cq_head + 1) % l->P;
        l->cq_len--;
        pthread_mutex_unlock(&l->mu);
        encode_job(l, j);
        pthread_mutex_lock(&l->mu);
        j->state = JOB_DONE;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Takes back the encodes that are done (with `all`, waiting for every one out): gives
 * the learner its buffers back and sends or holds what the codec thread did not send.
 * The first error of a failed encode is returned, after the others are taken. */
static dlc_status collect(dlc_lrt *l, int all) {
    if (l->busy == 0) return DLC_OK;
    dlc_status st = DLC_OK;
    double t0 = all ? dlc_rt_clock() : 0;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        for (int p = 0; p < l->P; p++) {
            enc_job *j = &l->jobs[p];
            if (j->state != JOB_DONE) continue;
            j->state = JOB_IDLE;
            l->busy--;
            pthread_mutex_unlock(&l->mu);
            dlc_status s = l->l ? dlc_learner_encoded(l->l, p) : DLC_OK;
            if (s == DLC_OK && j->st != DLC_OK) s = dlc_error(j->st, "%s", j->err);
            if (s == DLC_OK) {
                l->st.encoded++;
                if (j->sent) {
                    l->st.sent++;
                } else {
                    dlc_msg m = j->a.msg;
                    m.payload = j->out, m.len = j->len;
                    dlc_frame f;
                    s = dlc_frame_from_msg(&f, &m);
                    if (s == DLC_OK) s = send_owned(l, &f, j->out, 1);
                    else buf_put(l, j->out);
                    j->out = NULL;
                }
            }
            if (st == DLC_OK) st = s;
            pthread_mutex_lock(&l->mu);
        }
        if (!all || l->busy == 0) break;
        pthread_cond_wait(&l->cv, &l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    if (all) l->st.encode_wait_s += dlc_rt_clock() - t0;
    return st;
}

/* An ENCODE action: to the codec thread (or encoded here with inline_codec). */
static dlc_status start_encode(dlc_lrt *l, const dlc_learner_action *a) {
    enc_job *j = &l->jobs[a->fragment];
    DLC_ASSERT(j->state == JOB_IDLE); /* the learner lends a fragment once (learner.h) */
    j->a = *a;
    j->direct = l->rdy[l->owner ? l->owner[a->fragment] : 0] && l->hq_len == 0;
    l->busy++;
    pthread_mutex_lock(&l->mu);
    j->state = JOB_QUEUED;
    l->cq[(l->cq_head + l->cq_len) % l->P] = a->fragment;
    l->cq_len++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return DLC_OK;
}

/* The net's decode hook, on the I/O thread: a FRAGMENT or RESYNC payload, decoded and
 * checked (dlc_learner_receive_decoded takes it as it is).  Anything it cannot decode
 * stays as it came, for the state machine to refuse with its own message.  An f32
 * payload stays as it came too: its decode is a checked copy, which the learner makes
 * straight into its base when it applies the merge (core/learner.c), where here it
 * would be a copy into a fresh buffer (its pages faulted in) and then one more. */
static dlc_status decode_fragment(const dlc_frame *f, float **values, int64_t *n, void *arg) {
    const dlc_lrt *l = arg;
    if ((f->type != DLC_FRAME_FRAGMENT && f->type != DLC_FRAME_RESYNC) || f->msg.fragment < 0 ||
        f->msg.fragment >= l->P || f->msg.codec == DLC_CODEC_F32)
        return DLC_OK;
    int64_t k = l->numel[f->msg.fragment];
    float *v = dlc_big_alloc((size_t)(k > 0 ? k : 1) * sizeof(float)); /* freed with free() */
    if (!v) return DLC_ERR_NOMEM;
    dlc_status st = dlc_codec_decode(f->msg.codec, NULL, f->msg.payload, f->msg.len, v, k);
    if (st != DLC_OK) {
        free(v);
        return st;
    }
    *values = v, *n = k;
    return DLC_OK;
}

/* Sends what was held, oldest first, while the net takes it: each shard's in order, a
 * shard that is down or full keeping its own (later) without holding back the others'. */
static void flush_held(dlc_lrt *l) {
    uint8_t stuck[DLC_LEARNER_SHARDS_MAX];
    for (int k = 0; k < l->S; k++) stuck[k] = !l->rdy[k];
    int kept = 0, n = l->hq_len;
    for (int i = 0; i < n; i++) {
        held h = l->hq[(l->hq_head + i) % l->hold];
        int k = frame_shard(l, &h.f);
        if (!stuck[k]) {
            h.f.msg.payload = h.bytes;
            if (dlc_net_send(l->net, l->peers[k], &h.f, h.bytes ? free_bytes : NULL, l) == DLC_OK) {
                l->st.sent++; /* the net's now */
                continue;
            }
            stuck[k] = 1; /* still full or gone: later */
        }
        l->hq[(l->hq_head + kept++) % l->hold] = h;
    }
    l->hq_len = kept;
}

/* The address the learner holds of a kept frame: its decoded values, or its payload. */
static const void *lent_ptr(const dlc_net_event *ev) {
    return ev->values ? (const void *)ev->values : (const void *)ev->frame.msg.payload;
}

/* Frees the kept frames the learner no longer holds (applied, replaced, restarted). */
static void reclaim(dlc_lrt *l) {
    for (int p = 0; l->lent && p < l->P; p++)
        if (l->lent[p].kind == DLC_NET_FRAME && (!l->l || dlc_learner_lent(l->l, p) != lent_ptr(&l->lent[p]))) {
            dlc_net_event_release(&l->lent[p]);
            l->lent[p].kind = DLC_NET_READY; /* empty */
        }
}

/* Keeps the frame of ev (a FRAGMENT just received) if the learner holds it lent: the
 * event is moved into its fragment's slot and ev left owning nothing. */
static void keep_lent(dlc_lrt *l, dlc_net_event *ev) {
    int p = ev->frame.msg.fragment;
    if (p < 0 || p >= l->P || !l->lent || dlc_learner_lent(l->l, p) != lent_ptr(ev)) return;
    if (l->lent[p].kind == DLC_NET_FRAME) dlc_net_event_release(&l->lent[p]); /* (it let that one go) */
    l->lent[p] = *ev;
    ev->owned_ = NULL, ev->values = NULL, ev->nvalues = 0;
}

/* Performs the state machine's queued actions. */
static dlc_status actions(dlc_lrt *l) {
    dlc_learner_action a;
    dlc_status st = DLC_OK;
    while (dlc_learner_poll(l->l, &a)) {
        if (st != DLC_OK) { /* empty the queue, keep the first error; nothing stays lent */
            if (a.type == DLC_LACT_ENCODE) dlc_learner_encoded(l->l, a.fragment);
            continue;
        }
        if (a.type == DLC_LACT_SEND) {
            dlc_frame f;
            st = dlc_frame_from_msg(&f, &a.msg);
            if (st == DLC_OK && a.msg.type == DLC_MSG_HEARTBEAT && l->S > 1) send_all(l, &f); /* (no payload) */
            else if (st == DLC_OK) st = send_frame(l, &f, a.msg.type != DLC_MSG_HEARTBEAT);
        } else if (a.type == DLC_LACT_ENCODE) {
            st = start_encode(l, &a);
        } else if (a.type == DLC_LACT_APPLIED) {
            dlc_lrt_event e = action_event(l, DLC_LRT_APPLIED, &a);
            e.version = a.version;
            e.resync = a.resync;
            push_event(l, &e);
            l->st.applied++;
        } else if (a.type == DLC_LACT_GRADIENT_READY) {
            if (dlc_learner_replaying(l->l))
                l->replay_ready = 1;
            else
                l->grad_ready = 1;
        } else if (a.type == DLC_LACT_PHASE) {
            dlc_lrt_event e = action_event(l, DLC_LRT_PHASE, &a);
            e.schedule = a.schedule;
            e.unreplayed = a.unreplayed;
            push_event(l, &e);
            l->st.unreplayed += a.unreplayed;
        }
    }
    reclaim(l);
    return st;
}

/* The learner's timers (heartbeats) due now. */
static dlc_status timers(dlc_lrt *l) {
    if (!l->l) return DLC_OK;
    double now = lrt_now(l);
    if (dlc_learner_expiry(l->l) > now) return DLC_OK;
    dlc_status st = dlc_learner_handle_expiry(l->l, now);
    return st == DLC_OK ? actions(l) : st;
}

/* A syncer that refused this learner's layout names the first tensor that differs and
 * its own (docs/protocol.md, "mismatch"): this learner's goes beside it. */
static void layout_own(const dlc_lrt *l, const dlc_net_event *ev, char *out, size_t cap) {
    const char *at = ev->code == DLC_PERR_MISMATCH ? strstr(ev->text, "the layout differs at tensor ") : NULL;
    int i;
    if (!at || sscanf(at, "the layout differs at tensor %d", &i) != 1 || i < 0) return;
    const char *desc = dlc_plan_tensor_desc(l->cfg.plan, i);
    if (desc) snprintf(out, cap, "; this learner's is %.200s", desc);
    else snprintf(out, cap, "; this learner has %d tensors", dlc_plan_tensors(l->cfg.plan));
}

/* The WELCOME of shard k states the deal this learner made (docs/shards.md): as many
 * endpoints as it was given addresses, itself ("") at k, each fragment's owner as ours.
 * With one address, a syncer that is one shard of several is refused, named. */
static dlc_status check_welcome(const dlc_lrt *l, int k, const dlc_hello *w) {
    int S = w->endpoints > 1 ? w->endpoints : 1, self = -1;
    for (int e = 0; e < w->endpoints && self < 0; e++)
        if (!w->endpoint[e][0]) self = e;
    if (S != l->S)
        return dlc_error(DLC_ERR_STATE, "the syncer at %s is shard %d of %d, but this learner was given %d "
                         "address%s (%s): give it every shard's, in the order of the run's address file",
                         l->addr[k], self + 1, S, l->S, l->S == 1 ? "" : "es", l->cfg.connect);
    if (S == 1) return DLC_OK;
    if (self != k)
        return dlc_error(DLC_ERR_STATE, "the syncer at %s is shard %d of %d, but this learner was given it as shard "
                         "%d: the addresses are out of order", l->addr[k], self + 1, S, k + 1);
    for (int p = 0; p < l->P; p++)
        if (w->fragments != l->P || w->owner[p] != l->owner[p])
            return dlc_error(DLC_ERR_STATE, "the syncer at %s (shard %d of %d) deals fragment %d to shard %d, this "
                             "learner to shard %d: another build or plan", l->addr[k], k + 1, S, p,
                             w->fragments == l->P ? w->owner[p] + 1 : -1, l->owner[p] + 1);
    return DLC_OK;
}

/* A merged fragment or resync refused for its epoch, older than the one this learner
 * follows for that shard: the syncer there is an incarnation that another took over from
 * (a standby, while it was stopped: dlc_srt_pause), which cannot serve this learner (it
 * fences what the learner stamps, the learner refuses what it sends).  With alternates
 * the learner leaves it for its next address, once per connection; with one address it
 * stays (the next incarnation comes back there). */
static dlc_status older_epoch(dlc_lrt *l, const dlc_net_event *ev) {
    int k = peer_shard(l, ev->peer);
    dlc_frame_type t = ev->frame.type;
    if (k < 0 || l->leaving[k] || (t != DLC_FRAME_FRAGMENT && t != DLC_FRAME_RESYNC) || !ev->frame.msg.epoch ||
        ev->frame.msg.epoch >= dlc_learner_shard_epoch(l->l, k) || !strchr(l->addr[k], '|'))
        return DLC_OK;
    l->leaving[k] = 1;
    l->st.left++;
    char text[DLC_RT_TEXT_MAX];
    snprintf(text, sizeof text, "left the syncer%s: it stamps epoch %lld, this learner follows epoch %lld (a later "
             "incarnation serves it): trying the next address", l->S > 1 ? " shard" : "",
             (long long)ev->frame.msg.epoch, (long long)dlc_learner_shard_epoch(l->l, k));
    snprintf(l->last_refusal, sizeof l->last_refusal, "%s", text);
    dlc_status st = dlc_net_move_on(l->net, ev->peer);
    return st == DLC_ERR_STATE ? DLC_OK : st; /* (gone meanwhile: its LOST follows anyway) */
}

/* One transport event. */
static dlc_status on_net_event(dlc_lrt *l, dlc_net_event *ev) {
    switch (ev->kind) {
    case DLC_NET_READY: {
        int id = ev->frame.hello.learner, k = peer_shard(l, ev->peer);
        if (k < 0) return DLC_OK;
        dlc_status wst = check_welcome(l, k, &ev->frame.hello);
        if (wst != DLC_OK) { /* another deal of the fragments: final */
            snprintf(l->last_refusal, sizeof l->last_refusal, "%s", dlc_last_error());
            l->refused = 1;
            dlc_net_close(l->net, ev->peer);
            return DLC_OK;
        }
        if (!l->l) {
            dlc_learner_params lp = l->cfg.learner;
            lp.id = id;
            lp.replay = l->replays = lp.dp && (ev->frame.hello.caps & DLC_CAP_REPLAY) != 0; /* the syncer replays */
            lp.defer_encode = l->coder_on; /* contributions go to the codec thread */
            if (!(l->l = dlc_learner_new(&lp, l->cfg.params, l->cfg.plan))) return dlc_last_status();
            if (l->cfg.tensors && dlc_learner_bind_tensors(l->l, l->cfg.tensors) != DLC_OK) {
                dlc_status st = dlc_last_status();
                dlc_learner_free(l->l);
                l->l = NULL;
                return st;
            }
            if (l->S > 1 && dlc_learner_set_shards(l->l, l->S, l->owner) != DLC_OK) {
                dlc_status st = dlc_last_status();
                dlc_learner_free(l->l);
                l->l = NULL;
                return st;
            }
            l->id = id;
            if (l->S > 1 && l->cfg.learner.id < 0) { /* the other shards: with the id this one gave */
                if (dlc_net_set_learner(l->net, id) != DLC_OK) return dlc_last_status();
                for (int j = 1; j < l->S; j++)
                    if ((l->peers[j] = dlc_net_connect(l->net, l->addr[j])) < 0) return dlc_last_status();
            }
        } else if (id != l->id) {
            return dlc_error(DLC_ERR_STATE, "learner %d: the syncer welcomed it back as learner %d", l->id + 1,
                             id + 1);
        }
        if (l->rdy_once[k]) l->st.reconnects++; /* (a LOST cleared `rdy` before this READY) */
        l->leaving[k] = 0;
        l->conflict_t = 0;
        l->rdy[k] = l->rdy_once[k] = 1;
        l->ready_once = 1;
        update_ready(l);
        shard_event(l, DLC_LRT_CONNECTED, k, ev->text);
        flush_held(l);
        return DLC_OK;
    }
    case DLC_NET_FRAME: {
        if (!l->l) return DLC_OK;
        dlc_frame_type t = ev->frame.type;
        if (t == DLC_FRAME_HEARTBEAT) return DLC_OK; /* the transport's: liveness only */
        if (t == DLC_FRAME_BYE) {
            snprintf(l->last_refusal, sizeof l->last_refusal, "the syncer said bye: %s", ev->frame.text);
            dlc_text_clean(l->last_refusal);
            /* before its join is done (no whole model yet): the syncer will not serve it
             * (an id beyond the run's, a run that is over): final, not retried */
            if (!l->joined_once) l->refused = 1;
            return DLC_OK;
        }
        /* a merged fragment stays in its frame until applied (no stash of the model) */
        int lend = (t == DLC_FRAME_FRAGMENT || t == DLC_FRAME_RESYNC) && !l->cfg.learner.dp;
        dlc_status st = lend ? dlc_learner_receive_lent(l->l, &ev->frame.msg, ev->values, ev->nvalues, lrt_now(l))
                        : ev->values ? dlc_learner_receive_decoded(l->l, &ev->frame.msg, ev->values, ev->nvalues, lrt_now(l))
                                     : dlc_learner_receive(l->l, &ev->frame.msg, lrt_now(l));
        if (ev->values) l->st.decoded++;
        if (lend) keep_lent(l, ev);
        if (st == DLC_ERR_FORMAT) { /* refused and unchanged: the syncer will resync it */
            snprintf(l->last_refusal, sizeof l->last_refusal, "%s", dlc_last_error());
            st = older_epoch(l, ev);
        }
        return st == DLC_OK ? actions(l) : st;
    }
    case DLC_NET_LOST: {
        int was_refused = l->refused; /* (a BYE before the join said why: kept) */
        /* another run, secret or version: final, before it joined or after (a syncer
         * restarted with another recipe): it never trains on alone */
        if (ev->code == DLC_PERR_MISMATCH || ev->code == DLC_PERR_AUTH || ev->code == DLC_PERR_VERSION) l->refused = 1;
        /* its id held by a live connection (a duplicate), or taken over by a new
         * incarnation while this one was silent: the transport retries, since a restart
         * may reach the syncer before its old connection falls silent there; refusals
         * that last LRT_CONFLICT_TIMEOUTS of its timeouts are final */
        if (ev->code == DLC_PERR_CONFLICT) {
            double now = lrt_now(l);
            if (l->conflict_t <= 0) l->conflict_t = now > 0 ? now : 1e-9;
            else if (now - l->conflict_t >= LRT_CONFLICT_TIMEOUTS * l->cfg.net.timeout_s) l->refused = 1;
        }
        if (!was_refused && (ev->code != DLC_PERR_NONE || ev->text[0])) {
            char own[290] = "";
            const char *code = dlc_proto_errcode_name(ev->code) ? dlc_proto_errcode_name(ev->code) : "?";
            layout_own(l, ev, own, sizeof own);
            if (own[0]) /* (bounded to fit: the syncer's sentence, then this learner's) */
                snprintf(l->last_refusal, sizeof l->last_refusal, "%.330s%.289s (%.10s)", ev->text, own, code);
            else
                snprintf(l->last_refusal, sizeof l->last_refusal, "%.500s (%s)", ev->text, code);
            dlc_text_clean(l->last_refusal); /* cut at byte counts */
        }
        int k = peer_shard(l, ev->peer);
        if (k >= 0 && l->rdy[k]) shard_event(l, DLC_LRT_DISCONNECTED, k, ev->text);
        if (k >= 0) l->rdy[k] = 0;
        update_ready(l);
        return DLC_OK;
    }
    case DLC_NET_DRAINED:
        flush_held(l);
        return DLC_OK;
    default: return DLC_OK;
    }
}

/* Takes transport events for up to timeout_ms (0: only what is there), returning after
 * the first one when `one`. */
static dlc_status pump(dlc_lrt *l, int timeout_ms) {
    l->at_boundary = 0; /* a boundary's reads are stale once more has arrived */
    for (;;) {
        dlc_net_event ev;
        int r = dlc_net_poll(l->net, &ev, timeout_ms);
        if (r < 0) return r;
        if (r == 0) return DLC_OK;
        dlc_status st = on_net_event(l, &ev);
        dlc_net_event_release(&ev);
        if (st != DLC_OK) return st;
        /* dp: an average in the grad arena waits for its optimizer step; the next stays
         * queued (it would find the learner not waiting for it) */
        if (l->grad_ready || l->replay_ready) return DLC_OK;
        timeout_ms = 0; /* after one, take only what is already there */
    }
}

dlc_lrt *dlc_lrt_new(const dlc_lrt_config *cfg) {
    if (!cfg || !cfg->params || !cfg->plan || !cfg->connect) {
        dlc_error(DLC_ERR_ARG, "lrt_new: config, params, plan and connect are required");
        return NULL;
    }
    if (cfg->tensors && cfg->learner.dp) {
        dlc_error(DLC_ERR_ARG, "lrt_new: tensors given with dp: data parallel works in the params arena (its "
                  "gradient lives there)");
        return NULL;
    }
    dlc_lrt *l = calloc(1, sizeof *l);
    if (!l) {
        dlc_error(DLC_ERR_NOMEM, "lrt_new: out of memory");
        return NULL;
    }
    pthread_mutex_init(&l->spare_mu, NULL);
    l->cfg = *cfg;
    l->t0 = rt_time(&l->cfg.net);
    l->peer = l->id = -1;
    l->P = dlc_plan_count(cfg->plan);
    dlc_learner_params lp = cfg->learner;
    if (lp.id < 0) lp.id = 0; /* the WELCOME will say */
    if (dlc_learner_params_check(&lp) != DLC_OK) goto fail;
    if (rt_strings_copy(&l->strs, &l->cfg.net, &l->cfg.run) != DLC_OK) goto fail;
    if (!(l->connect = strdup(cfg->connect))) {
        dlc_error(DLC_ERR_NOMEM, "lrt_new: out of memory");
        goto fail;
    }
    l->cfg.connect = cfg->connect; /* (re-pointed below, once split) */
    /* "HOST:PORT" or, for syncer shards, "HOST:PORT,HOST:PORT,...": one per shard, in
     * order.  l->connect keeps the whole text for messages, l->addr the split copies. */
    {
        char *copy = strdup(cfg->connect);
        if (!copy) {
            dlc_error(DLC_ERR_NOMEM, "lrt_new: out of memory");
            goto fail;
        }
        l->addr_buf = copy;
        for (char *t = copy;;) { /* (each may be "A|B": a shard and its standbys, dlc_net_connect) */
            char *comma = strchr(t, ',');
            if (comma) *comma = '\0';
            if (!*t || l->S == DLC_LEARNER_SHARDS_MAX) {
                dlc_error(DLC_ERR_ARG, "lrt_new: connect \"%.200s\": %s (expected HOST:PORT, or one per syncer shard "
                          "joined by commas, at most %d)", cfg->connect, *t ? "too many addresses" : "an empty address",
                          DLC_LEARNER_SHARDS_MAX);
                goto fail;
            }
            l->addr[l->S++] = t;
            if (!comma) break;
            t = comma + 1;
        }
        if (l->S == 0) {
            dlc_error(DLC_ERR_ARG, "lrt_new: connect \"%.200s\": expected HOST:PORT, or one per syncer shard joined "
                      "by commas", cfg->connect);
            goto fail;
        }
    }
    l->cfg.connect = l->connect;
    if (l->S > 1) {
        if (cfg->learner.dp) {
            dlc_error(DLC_ERR_ARG, "lrt_new: %d syncer shards in data parallel: expected one syncer", l->S);
            goto fail;
        }
        if (!(l->owner = calloc((size_t)l->P, sizeof *l->owner))) {
            dlc_error(DLC_ERR_NOMEM, "lrt_new: out of memory");
            goto fail;
        }
        if (dlc_plan_deal(cfg->plan, l->S, l->owner) != DLC_OK) goto fail;
    }
    l->hold = cfg->hold > 0 ? cfg->hold : 2 * l->P;
    if (!(l->hq = calloc((size_t)l->hold, sizeof *l->hq))) {
        dlc_error(DLC_ERR_NOMEM, "lrt_new: out of memory");
        goto fail;
    }
    if (rt_layout(cfg->plan, cfg->learner.codec_params, &l->layout, &l->numel) != DLC_OK) goto fail;
    if (rt_limits("learner", l->numel, l->P, &l->cfg.net) != DLC_OK) goto fail;
    /* the syncer's queue in the transport a short pipe: contributions that do not fit
     * wait in hq, where a newer one of a fragment and base replaces the one held */
    rt_window(l->numel, l->P, 1, &l->cfg.net);
    if (rt_hello(&l->hello, cfg->plan, l->cfg.run, cfg->learner.id, cfg->learner.codec_params.block, cfg->learner.dp,
                 cfg->run_params) !=
        DLC_OK)
        goto fail;
    l->cfg.net.hello = &l->hello;
    l->cfg.net.layout = &l->layout;
    l->cfg.net.inline_io = 0; /* the compute thread computes between polls: the I/O thread keeps the link */
    /* dp: the compute thread waits for each average anyway, and decodes what arrives itself
     * (its resyncs only tell the run's step) */
    if (!cfg->inline_codec && !cfg->learner.dp) l->cfg.net.decode = decode_fragment, l->cfg.net.decode_arg = l;
    if (!(l->jobs = calloc((size_t)l->P, sizeof *l->jobs)) || !(l->cq = calloc((size_t)l->P, sizeof *l->cq)) ||
        !(l->lent = calloc((size_t)l->P, sizeof *l->lent))) {
        dlc_error(DLC_ERR_NOMEM, "lrt_new: out of memory");
        goto fail;
    }
    if (!cfg->inline_codec && !cfg->learner.dp) { /* dp: a gradient leaves as f32 at once */
        pthread_mutex_init(&l->mu, NULL);
        pthread_cond_init(&l->cv, NULL);
        if (pthread_create(&l->coder, NULL, coder_main, l) != 0) {
            pthread_cond_destroy(&l->cv);
            pthread_mutex_destroy(&l->mu);
            dlc_error(DLC_ERR_NOMEM, "lrt_new: cannot start the codec thread");
            goto fail;
        }
        l->coder_on = 1;
    }
    if (!(l->net = dlc_net_new(&l->cfg.net))) goto fail;
    for (int k = 0; k < l->S; k++) l->peers[k] = -1;
    /* shard 0 first; the others at once when the id is known, else once shard 0 gave it */
    for (int k = 0; k < (cfg->learner.id >= 0 ? l->S : 1); k++)
        if ((l->peers[k] = dlc_net_connect(l->net, l->addr[k])) < 0) goto fail;
    l->peer = l->peers[0];
    return l;
fail:
    dlc_lrt_free(l);
    return NULL;
}

void dlc_lrt_free(dlc_lrt *l) {
    if (!l) return;
    if (l->coder_on) { /* it may be sending: before the net goes */
        pthread_mutex_lock(&l->mu);
        l->coder_stop = 1;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->coder, NULL);
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
    }
    for (int p = 0; l->jobs && p < l->P; p++) buf_put(l, l->jobs[p].out);
    free(l->jobs);
    free(l->cq);
    dlc_net_free(l->net); /* its queued payloads come back through free_bytes */
    dlc_learner_free(l->l);
    l->l = NULL;
    reclaim(l); /* every kept frame */
    free(l->lent);
    for (int i = 0; l->hq && i < l->hq_len; i++) drop_held(l, &l->hq[(l->hq_head + i) % l->hold]);
    free(l->hq);
    for (int i = 0; i < l->nspare; i++) free(l->spare[i] - BUF_HDR);
    pthread_mutex_destroy(&l->spare_mu);
    free(l->numel);
    rt_strings_free(&l->strs);
    free(l->connect);
    free(l->addr_buf);
    free(l->owner);
    free(l);
}

/* The error of a learner the syncer refused or cut off for good (l->refused). */
static dlc_status refused_error(const dlc_lrt *l) {
    char who[32] = "learner";
    if (l->id >= 0) snprintf(who, sizeof who, "learner %d", l->id + 1);
    return dlc_error(DLC_ERR_STATE, "%s: refused by the syncer at %s: %s", who, l->cfg.connect, l->last_refusal);
}

/* Waits (taking messages) until done(l) or the deadline; what names what it waited for. */
/* interruptible: the host's interrupted() may end the wait */
static dlc_status wait_until(dlc_lrt *l, double timeout_s, int (*done)(const dlc_lrt *), const char *what,
                             int interruptible) {
    double t0 = dlc_rt_clock(), deadline = t0 + timeout_s;
    dlc_status st = DLC_OK;
    while (!done(l)) {
        double now = dlc_rt_clock();
        if (l->refused) {
            l->st.wait_s += now - t0;
            return refused_error(l);
        }
        if (interruptible && l->cfg.interrupted && l->cfg.interrupted(l->cfg.interrupt_arg)) {
            l->st.wait_s += now - t0;
            char who[32] = "learner";
            if (l->id >= 0) snprintf(who, sizeof who, "learner %d", l->id + 1);
            return dlc_error(DLC_ERR_STATE, "%s: interrupted while waiting for the %s from the syncer at %s", who,
                             what, l->cfg.connect);
        }
        if (now >= deadline) {
            l->st.wait_s += now - t0;
            char who[32] = "learner";
            if (l->id >= 0) snprintf(who, sizeof who, "learner %d", l->id + 1);
            return dlc_error(DLC_ERR_STATE, "%s: no %s from the syncer at %s within %g s%s%s", who, what,
                             l->cfg.connect, timeout_s, l->last_refusal[0] ? ": last refusal: " : "", l->last_refusal);
        }
        double until = deadline; /* the call's bound (wall time); the learner's timers are on the driver's clock */
        if (l->l && now + (dlc_learner_expiry(l->l) - lrt_now(l)) < until)
            until = now + (dlc_learner_expiry(l->l) - lrt_now(l));
        int ms = (int)ceil((until - now) * 1e3);
        if (ms > 100) ms = 100;
        if (ms < 0) ms = 0;
        if ((st = collect(l, 0)) != DLC_OK) break;
        if ((st = pump(l, ms)) != DLC_OK) break;
        if ((st = timers(l)) != DLC_OK) break;
    }
    l->st.wait_s += dlc_rt_clock() - t0;
    return st;
}

static int is_training(const dlc_lrt *l) { return l->l && dlc_learner_state_of(l->l) == DLC_LEARNER_TRAINING; }
static int may_step(const dlc_lrt *l) {
    if (!l->l) return 0;
    if (l->cfg.learner.dp)
        return l->grad_ready || l->replay_ready || dlc_learner_state_of(l->l) == DLC_LEARNER_TRAINING;
    return dlc_learner_state_of(l->l) == DLC_LEARNER_TRAINING;
}

dlc_status dlc_lrt_join(dlc_lrt *l, double timeout_s) {
    if (!l) return dlc_error(DLC_ERR_ARG, "lrt_join: NULL learner");
    dlc_status st = wait_until(l, timeout_s, is_training, "WELCOME and whole model", 1);
    if (st == DLC_OK) l->joined_once = 1;
    return st;
}

dlc_status dlc_lrt_step_done(dlc_lrt *l, int64_t tokens, double seconds) {
    if (!l || !l->l) return dlc_error(DLC_ERR_STATE, "lrt_step_done: the learner has not joined (dlc_lrt_join)");
    if (l->refused) return refused_error(l);
    double t0 = dlc_rt_clock();
    /* the encodes of earlier steps back first (the learner may send those fragments
     * again now); done long ago unless an encode took longer than a whole step */
    dlc_status st = collect(l, 1);
    /* the step boundary: arrived fragments first (dp: after, for a resync there may
     * start a replay, which the host runs before its next step); after step_reads, what
     * arrived since waits for the next boundary (the host copied in only what the
     * state machine would read then) */
    if (st == DLC_OK && !l->cfg.learner.dp && !l->at_boundary) st = pump(l, 0);
    l->at_boundary = 0;
    /* back-pressure: while a contribution waits for the transport, the next that falls
     * due trains on and leaves once the link has room (learner.h) instead of queueing;
     * then the fragments that waited leave a few a step (as many as fall due in a step,
     * and one more), not all at once, each with its buffers */
    if (st == DLC_OK) {
        int H = l->cfg.learner.H > 0 ? l->cfg.learner.H : 1;
        int room = !l->ready ? -1 : l->hq_len > 0 ? 0 : (l->P + H - 1) / H + 1;
        dlc_learner_set_send_room(l->l, room);
        if (room >= 0 && dlc_learner_sends_due(l->l) > room) { /* it binds: on the tape (rt.h, ROOM) */
            dlc_lrt_event e = new_event(l, DLC_LRT_ROOM);
            e.boundary = dlc_learner_steps(l->l) + 1;
            e.room = room;
            push_event(l, &e);
        }
    }
    if (st == DLC_OK) st = dlc_learner_step_done(l->l, tokens, seconds, lrt_now(l));
    if (st == DLC_OK) st = actions(l);
    if (st == DLC_OK && l->cfg.learner.dp) st = pump(l, 0);
    if (st == DLC_OK) st = timers(l);
    l->st.call_s += dlc_rt_clock() - t0;
    return st;
}

int dlc_lrt_step_reads(dlc_lrt *l, uint8_t *mask) {
    if (!l || !l->l) return dlc_error(DLC_ERR_STATE, "lrt_step_reads: the learner has not joined (dlc_lrt_join)");
    if (!mask) return dlc_error(DLC_ERR_ARG, "lrt_step_reads: NULL mask");
    double t0 = dlc_rt_clock();
    dlc_status st = collect(l, 1);
    if (st == DLC_OK && !l->cfg.learner.dp) st = pump(l, 0);
    l->st.call_s += dlc_rt_clock() - t0;
    if (st != DLC_OK) return st;
    l->at_boundary = 1;
    return dlc_learner_step_reads(l->l, mask);
}

dlc_status dlc_lrt_gradient(dlc_lrt *l, int64_t tokens) {
    if (!l || !l->l) return dlc_error(DLC_ERR_STATE, "lrt_gradient: the learner has not joined (dlc_lrt_join)");
    l->grad_ready = 0;
    dlc_status st = pump(l, 0);
    /* a resync just started a replay: this step's gradient is void (dlc_lrt_wait says so) */
    if (st != DLC_OK || dlc_learner_replaying(l->l)) return st;
    st = dlc_learner_gradient(l->l, tokens, lrt_now(l));
    return st == DLC_OK ? actions(l) : st;
}

dlc_status dlc_lrt_replay(dlc_lrt *l) {
    if (!l || !l->l) return dlc_error(DLC_ERR_STATE, "lrt_replay: the learner has not joined (dlc_lrt_join)");
    if (!l->cfg.learner.dp || dlc_learner_replaying(l->l)) return DLC_OK;
    if (!dlc_lrt_replays(l))
        return dlc_error(DLC_ERR_STATE, "learner %d: the syncer at %s does not replay averaged gradients (an older "
                         "version): a restarted data-parallel learner cannot catch up", l->id + 1, l->cfg.connect);
    dlc_status st = pump(l, 0); /* the run's step as the syncer last told it */
    if (st == DLC_OK && !dlc_learner_replaying(l->l) && dlc_learner_state_of(l->l) == DLC_LEARNER_TRAINING)
        st = dlc_learner_replay(l->l, lrt_now(l));
    return st == DLC_OK ? actions(l) : st;
}

dlc_status dlc_lrt_replayed(dlc_lrt *l) {
    if (!l || !l->l) return dlc_error(DLC_ERR_STATE, "lrt_replayed: the learner has not joined (dlc_lrt_join)");
    if (!l->replay_ready)
        return dlc_error(DLC_ERR_STATE, "lrt_replayed: learner %d has no replayed average in its grad arena",
                         l->id + 1);
    l->replay_ready = 0;
    dlc_status st = dlc_learner_replayed(l->l, lrt_now(l));
    if (st == DLC_OK) {
        l->st.replayed++;
        st = actions(l);
    }
    return st;
}

int dlc_lrt_replaying(const dlc_lrt *l) { return l && l->l && dlc_learner_replaying(l->l); }
int dlc_lrt_replay_ready(const dlc_lrt *l) { return l && l->replay_ready; }
int dlc_lrt_replays(const dlc_lrt *l) { return l && l->replays; }

dlc_status dlc_lrt_flush(dlc_lrt *l, int *sent) {
    if (sent) *sent = 0;
    if (!l || !l->l) return dlc_error(DLC_ERR_STATE, "lrt_flush: the learner has not joined (dlc_lrt_join)");
    dlc_status st = collect(l, 1);
    if (st == DLC_OK) st = dlc_learner_flush(l->l, lrt_now(l), sent);
    return st == DLC_OK ? actions(l) : st;
}

dlc_status dlc_lrt_contribute(dlc_lrt *l, int p) {
    if (!l || !l->l) return dlc_error(DLC_ERR_STATE, "lrt_contribute: the learner has not joined (dlc_lrt_join)");
    dlc_status st = collect(l, 1);
    if (st == DLC_OK) st = dlc_learner_contribute(l->l, p, lrt_now(l));
    return st == DLC_OK ? actions(l) : st;
}

dlc_status dlc_lrt_wait(dlc_lrt *l, double timeout_s) {
    if (!l || !l->l) return dlc_error(DLC_ERR_STATE, "lrt_wait: the learner has not joined (dlc_lrt_join)");
    dlc_status st =
        wait_until(l, timeout_s, may_step, l->cfg.learner.dp ? "averaged gradient" : "merged fragment", 1);
    if (st == DLC_OK && l->cfg.learner.dp) {
        /* released by a resync instead of the average: the model is the syncer's, this
         * step's gradient is void (learner.h) */
        l->void_step = !l->grad_ready;
        l->grad_ready = 0;
    }
    /* the step boundary before the next step: the receive that released the learner only
     * stashed the fragment (learner.h); step_begin applies it */
    if (st == DLC_OK && !l->cfg.learner.dp && is_training(l)) {
        st = dlc_learner_step_begin(l->l, lrt_now(l));
        if (st == DLC_OK) st = actions(l);
    }
    return st;
}

dlc_status dlc_lrt_pump(dlc_lrt *l, double timeout_s) {
    if (!l) return dlc_error(DLC_ERR_ARG, "lrt_pump: NULL learner");
    if (!(timeout_s >= 0) || !isfinite(timeout_s))
        return dlc_error(DLC_ERR_ARG, "lrt_pump: timeout_s = %g: expected seconds >= 0", timeout_s);
    dlc_status st = collect(l, 0);
    if (st == DLC_OK) st = pump(l, (int)(timeout_s * 1000));
    return st;
}

dlc_status dlc_lrt_rollback(dlc_lrt *l) {
    if (!l || !l->l) return dlc_error(DLC_ERR_STATE, "lrt_rollback: the learner has not joined (dlc_lrt_join)");
    dlc_status st = collect(l, 1);
    if (st == DLC_OK) st = pump(l, 0); /* what arrived: the newest global model there is */
    if (st == DLC_OK) st = dlc_learner_rollback(l->l, lrt_now(l));
    if (st == DLC_OK) {
        l->st.rollbacks++;
        st = actions(l);
    }
    return st;
}

dlc_status dlc_lrt_check_finite(const dlc_lrt *l, int *tensor, int64_t *index, float *value) {
    if (!l) return dlc_error(DLC_ERR_ARG, "lrt_check_finite: NULL learner");
    const dlc_params *p = l->cfg.params;
    for (int k = 0; k < dlc_params_count(p); k++) {
        const float *x = l->cfg.tensors ? l->cfg.tensors[k] : dlc_params_data(p) + dlc_params_offset(p, k);
        int64_t n = dlc_params_tensor(p, k)->numel, bad = -1;
        int any = 0;
        for (int64_t i = 0; i < n; i++) any |= !isfinite(x[i]); /* no early exit: the loop vectorizes */
        if (!any) continue;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (!isfinite(x[i])) bad = i;
        if (tensor) *tensor = k;
        if (index) *index = bad;
        if (value) *value = x[bad];
        return dlc_error(DLC_ERR_RANGE, "parameter '%s' element %lld is %g", dlc_params_name(p, k), (long long)bad,
                         (double)x[bad]);
    }
    return DLC_OK;
}

static int any_ready(const dlc_lrt *l) {
    for (int k = 0; k < l->S; k++)
        if (l->rdy[k]) return 1;
    return 0;
}
static int nothing_outstanding(const dlc_lrt *l) {
    return !l->l || dlc_learner_outstanding(l->l) == 0 || !any_ready(l);
}

dlc_status dlc_lrt_finish(dlc_lrt *l, double timeout_s, const char *why) {
    if (!l) return dlc_error(DLC_ERR_ARG, "lrt_finish: NULL learner");
    dlc_status st = collect(l, 1); /* every contribution out before the BYE */
    if (l->l && any_ready(l) && timeout_s > 0) {
        dlc_status w = wait_until(l, timeout_s, nothing_outstanding, "merge of the last contributions", 1);
        if (w != DLC_ERR_STATE && st == DLC_OK) st = w; /* a deadline: the run is over for it either way */
    }
    if (any_ready(l) && l->l) { /* a last heartbeat: the syncer's record of its steps and tokens */
        dlc_frame hb;
        dlc_frame_init(&hb, DLC_FRAME_HEARTBEAT);
        hb.msg.learner = l->id;
        hb.msg.steps = dlc_learner_schedule_step(l->l);
        hb.msg.tokens = dlc_learner_tokens(l->l);
        hb.msg.step_time = dlc_learner_step_time(l->l);
        hb.msg.transit = dlc_learner_transit(l->l);
        send_all(l, &hb);
    }
    if (any_ready(l)) {
        dlc_frame f;
        dlc_frame_init(&f, DLC_FRAME_BYE);
        f.msg.learner = l->id;
        snprintf(f.text, sizeof f.text, "%s", why ? why : "finished");
        send_all(l, &f);
        for (int k = 0; k < l->S; k++)
            if (l->rdy[k]) dlc_net_close(l->net, l->peers[k]);
    }
    memset(l->rdy, 0, sizeof l->rdy);
    update_ready(l);
    if (l->l) dlc_learner_stop(l->l);
    return st;
}

dlc_learner_state dlc_lrt_state(const dlc_lrt *l) {
    return l && l->l ? dlc_learner_state_of(l->l) : DLC_LEARNER_JOINING;
}
int dlc_lrt_id(const dlc_lrt *l) { return l ? l->id : -1; }
int dlc_lrt_step_void(const dlc_lrt *l) { return l ? l->void_step : 0; }
const dlc_learner *dlc_lrt_learner(const dlc_lrt *l) { return l ? l->l : NULL; }
const char *dlc_lrt_last_refusal(const dlc_lrt *l) { return l ? l->last_refusal : ""; }
dlc_status dlc_lrt_set_schedule_step(dlc_lrt *l, int64_t step) {
    if (!l || !l->l) return dlc_error(DLC_ERR_STATE, "lrt_set_schedule_step: the learner has not joined (dlc_lrt_join)");
    return dlc_learner_set_schedule_step(l->l, step);
}

int dlc_lrt_poll(dlc_lrt *l, dlc_lrt_event *ev) {
    if (!l || !ev || l->ev_len == 0) return 0;
    *ev = l->ev[l->ev_head];
    l->ev_head = (l->ev_head + 1) % LRT_EVENTS_MAX;
    l->ev_len--;
    return 1;
}

dlc_status dlc_lrt_get_stats(dlc_lrt *l, dlc_lrt_stats *out) {
    if (!l || !out) return dlc_error(DLC_ERR_ARG, "lrt_get_stats: NULL argument");
    *out = l->st;
    out->now = lrt_now(l);
    pthread_mutex_lock(&l->spare_mu);
    out->reused = l->reused;
    pthread_mutex_unlock(&l->spare_mu);
    out->deferred = l->l ? dlc_learner_deferred(l->l) : 0;
    dlc_net_counters c;
    if (dlc_net_get_counters(l->net, -1, &c) == DLC_OK) {
        out->bytes_in = out->bytes_out = 0;
        for (int t = 0; t < DLC_FRAME_TYPE_COUNT; t++) out->bytes_in += c.bytes_in[t], out->bytes_out += c.bytes_out[t];
    }
    return DLC_OK;
}

dlc_status dlc_lrt_clock_moved(dlc_lrt *l) {
    if (!l) return dlc_error(DLC_ERR_ARG, "lrt_clock_moved: NULL learner");
    return dlc_net_clock_moved(l->net);
}
