/*
 * srt.c - the syncer on the wall clock, or the one its config names (rt.h).  One thread
 * runs the transport's loop inline (dlc_net_poll) and drives the syncer under `lock`;
 * host calls take the same lock, so the state machine is only ever touched by one thread
 * at a time.  Events for the host go through a queue guarded by `qlock`.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "diloco/mem.h"
#include "diloco/ckpt.h"
#include "diloco/rt.h"
#include "rt_internal.h"

double dlc_rt_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const srt_event_names[] = {"merged", "joined",   "lost",     "rejected", "refused",
                                              "bye",    "replaced", "refusals", "behind",   "standby"};
_Static_assert(sizeof srt_event_names / sizeof *srt_event_names == DLC_SRT_EVENT_COUNT, "srt event names");
const char *dlc_srt_event_name(dlc_srt_event_kind k) {
    return (unsigned)k < DLC_SRT_EVENT_COUNT ? srt_event_names[k] : NULL;
}

/* The checkpoint metadata key of the learners that said BYE (rt.h, dlc_srt_save). */
#define RT_BYE_KEY "rt.bye"

/* ---- a queue of host events ---- */

typedef struct srt_node {
    struct srt_node *next;
    dlc_srt_event ev;
} srt_node;

/* ---- a payload shared by several sends ---- */

typedef struct sbuf {
    atomic_int refs;
    size_t len;
    dlc_payload *core;        /* the syncer's own buffer, referenced (no copy), or NULL: data */
    const uint8_t *bytes;     /* core's bytes or data */
    uint8_t data[];
} sbuf;

static void sbuf_unref(const void *payload, void *arg) {
    (void)payload;
    sbuf *b = arg;
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
    dlc_payload_unref(b->core);
    free(b);
}

static sbuf *sbuf_ref(sbuf *b) {
    if (b) atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}

/* A send that waits for room in its learner's queue (the transport refused it for
 * back-pressure, or others wait ahead of it): sent in order at the peer's DRAINED.  A
 * FRAGMENT waits once per fragment: a newer one of the same fragment takes its place
 * (superseded: the learner gets the newest Θ_p, as it would have after both), keeping a
 * RESYNC's flag and schedule step.  So a learner's waiting sends hold at most one entry
 * per fragment (references to shared payloads, never copies) plus the few others. */
typedef struct owed {
    struct owed *next;
    dlc_msg msg;              /* its payload is buf's */
    struct sbuf *buf;         /* one reference; NULL without a payload */
} owed;

/* Waiting sends of other types (dp's averages, REPLAY answers) one learner may hold
 * beyond its one FRAGMENT per fragment; past it the learner is cut off and resynced. */
#define SRT_OWED_OTHER_MAX 64
/* Seconds after which waiting sends are offered to the transport again without a DRAINED. */
#define SRT_OWED_RETRY_S 0.5
/* A standby's thread turns at least this often (ms): its primary's replicas are acked
 * within it (a merge waits for the ack). */
#define SRT_STANDBY_TURN_MS 2
/* Seconds a standby waits before it makes its link again after a refusal (shutdown: the
 * address held another standby, not serving yet). */
#define SRT_RELINK_S 0.5
/* Replicas a standby refuses in a row (catching up again after each) before it ends: its
 * primary keeps sending what it cannot take (another plan), and the run's records must
 * not grow with each attempt. */
#define SRT_REFUSED_MAX 3
/* The longest dlc_srt_clock_moved waits for the thread to act on the moved clock. */
#define SRT_CLOCK_WAIT_S 10

/* A replica to the standby waiting for room in its queue: its header, and its payload
 * (Θ, momentum, contributor records: docs/protocol.md, "REPLICA"), malloc'ed, freed by
 * the net once written. */
typedef struct rep_out {
    struct rep_out *next;
    int fragment, count;
    int64_t version, epoch, tokens; /* tokens: the merge's useful tokens × P (whole: 0) */
    uint32_t flags;
    uint8_t *buf;
    size_t len;
} rep_out;

typedef struct slearner {
    int peer;                 /* the READY connection bound to it, -1 none */
    owed *ob_head, *ob_tail;  /* its waiting sends, oldest first */
    int ob_other;             /* of them not FRAGMENTs */
    size_t ob_bytes;          /* their payload bytes */
    double ob_since;          /* driver time the oldest began to wait */
    double ob_tried;          /* driver time they were last offered to the transport */
    int64_t superseded;       /* FRAGMENTs superseded since the last BEHIND event */
    double behind_t;          /* driver time of its last BEHIND event, -1 none */
    int banked;               /* the connection whose counters are in bytes_* already, -1 none */
    int joined, bye;
    int64_t steps, tokens, merged, joins;
    double step_time, heard;
    double sent_steps, sent_tokens; /* summed over the contributions it sent (any fate) */
    double best_step_time;    /* the smallest step_time reported: its healthy rate */
    double left;              /* driver time its connection ended (0: never connected here) */
    uint64_t bytes_in, bytes_out; /* of its closed connections */
    double rate, latency;     /* dlc_srt_shape: applied to each of its connections */
    double cut_until;         /* driver time its cut ends (INFINITY: never), 0: not cut */
    int held;                 /* a connection that became READY during the cut, -1 none */
    char held_text[DLC_RT_TEXT_MAX]; /* its peer address */
    int waiting;              /* a READY connection held at the start gate, -1 none */
    char waiting_text[DLC_RT_TEXT_MAX]; /* its peer address */
    char from[DLC_RT_TEXT_MAX]; /* the peer address of `peer` */
} slearner;

struct dlc_srt {
    dlc_srt_config cfg;
    rt_strings strs;
    dlc_syncer *s;
    dlc_net *net;
    dlc_hello hello;
    dlc_proto_layout layout;
    int64_t *numel;
    int M, P, port;
    double t0;
    pthread_t thread;
    int started;
    int gate;                 /* the start gate is shut: first joins wait (rt.h, start_learners) */
    double gate_first;        /* driver time the first learner reached the gate, -1 none yet */
    atomic_int stop;
    pthread_mutex_t lock;     /* the syncer, learners[], stats */
    slearner *learners;
    /* per fragment, the latest encoded Θ_p sent while sends of it are queued or waiting
     * (one reference, NULL none; cache_trim), its version and epoch: joins, resyncs and
     * broadcasts of that version share it */
    sbuf **cur;
    int64_t *cur_version, *cur_epoch;
    int *owner;                 /* [P] a shard's deal (dlc_plan_deal), NULL with one syncer */
    uint8_t *owns;              /* [P] the fragments this shard owns (the syncer's params.owns) */
    /* replication, a primary: the attached standby's connection (-1 none), its address,
     * and the replicas waiting for room in its queue, oldest first (at most one whole
     * replica per fragment from its attach, and one per fragment whose merge waits for
     * its ack: dlc_syncer_set_replicated) */
    int sb_peer;
    int killed;                 /* dlc_srt_kill: ends as a killed process would (no BYE) */
    char sb_from[DLC_RT_TEXT_MAX];
    rep_out *rq_head, *rq_tail;
    double rq_tried;
    double *rep_at;             /* [P] driver time fragment p's merge began to wait for its ack, 0 none */
    /* a standby (cfg.standby_of, copied): its link to the primary (a client net of its
     * own, with its I/O thread), caught[p] once a whole replica of p came, primary_up,
     * when it was last reachable, the epoch it stamps; standby: 1 until it takes over */
    char *standby_of;
    dlc_net *rnet;
    dlc_hello rhello;
    int rpeer, standby, primary_up;
    int refused_row;            /* replicas refused in a row (SRT_REFUSED_MAX ends the standby) */
    double primary_seen, relink_at;
    int64_t primary_epoch;
    uint8_t *caught;
    float *rscratch;            /* [2 × the largest fragment]: a replica's floats, aligned */
    dlc_replica_contrib *rcontribs; /* [M] */
    dlc_srt_stats st;
    dlc_status failed;        /* the thread's fatal status, DLC_OK while fine */
    char failed_msg[DLC_RT_TEXT_MAX];
    pthread_mutex_t qlock;    /* the event queue */
    pthread_cond_t qcond;
    /* dlc_srt_clock_moved: moves asked for, and the newest the thread has acted on (its
     * timers, its transport's, and what they caused, under qlock; qcond) */
    _Atomic uint64_t clock_req;
    uint64_t clock_done;
    /* dlc_srt_pause: the thread stands still until this driver time (0: not paused,
     * INFINITY: for good) under qlock; pcond wakes it for a change or the stop */
    double pause_until;
    pthread_cond_t pcond;
    srt_node *qhead, *qtail;
    int qlen;
    /* the refusals of the current refusals_every interval (rt.h; lock held) */
    struct {
        double t0;            /* driver time the interval began */
        int64_t count, posted; /* refusals in it; those posted as REFUSED events */
        int64_t by[DLC_SRT_REFUSAL_REASONS];
        struct {
            char host[64];
            int64_t n;
        } addr[DLC_SRT_REFUSAL_ADDRS];
        int naddr;
        int64_t others;       /* refusals from addresses beyond addr[] */
    } rf;
};

static double srt_now(const dlc_srt *s) { return rt_time(&s->cfg.net) - s->t0; }

dlc_srt_config dlc_srt_default_config(void) {
    dlc_srt_config c;
    memset(&c, 0, sizeof c);
    c.syncer = dlc_syncer_default_params();
    c.net = dlc_net_default_config();
    c.listen = "127.0.0.1:0";
    c.run = "";
    c.refusals_every = 10;
    return c;
}

/* Queues ev for the host (takes ownership of ev->owned_). */
static void post(dlc_srt *s, const dlc_srt_event *ev) {
    srt_node *n = malloc(sizeof *n);
    if (!n) {
        free(ev->owned_);
        s->st.events_dropped++;
        return;
    }
    n->next = NULL;
    n->ev = *ev;
    n->ev.clock = s->t0 + ev->time;
    dlc_text_clean(n->ev.text); /* it may quote a peer, cut at a byte count */
    pthread_mutex_lock(&s->qlock);
    if (s->qlen >= DLC_RT_EVENTS_MAX) { /* the host stopped reading: drop the oldest */
        srt_node *old = s->qhead;
        s->qhead = old->next;
        if (!s->qhead) s->qtail = NULL;
        s->qlen--;
        free(old->ev.owned_);
        free(old);
        s->st.events_dropped++;
    }
    if (s->qtail) s->qtail->next = n;
    else s->qhead = n;
    s->qtail = n;
    s->qlen++;
    pthread_cond_signal(&s->qcond);
    pthread_mutex_unlock(&s->qlock);
}

/* An event of `kind` about learner (-1: none) at driver time `now`, the rest zero. */
static dlc_srt_event event_at(dlc_srt_event_kind kind, int learner, double now) {
    dlc_srt_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.time = now;
    ev.learner = learner;
    return ev;
}

static void post_simple(dlc_srt *s, dlc_srt_event_kind kind, int learner, const char *text) {
    dlc_srt_event ev = event_at(kind, learner, srt_now(s));
    if (text) snprintf(ev.text, sizeof ev.text, "%s", text);
    post(s, &ev);
}

static const char *refusal_reason_name(int r) {
    return r == DLC_PERR_COUNT ? "message" : dlc_proto_errcode_name(r) ? dlc_proto_errcode_name(r) : "?";
}

/* A refusal of `reason` (a dlc_proto_errcode, or DLC_PERR_COUNT for a learner's message)
 * from address `from` ("host:port", "" unknown): counted; posted as a REFUSED event only
 * if it is the first of its reason in the interval (so a flood of refusals costs the
 * host a bounded number of events: refusals_tick reports the rest).  lock held. */
static void refuse(dlc_srt *s, int reason, int learner, const char *from, const char *text) {
    if (reason < 0 || reason > DLC_PERR_COUNT) reason = DLC_PERR_INTERNAL;
    s->st.refused++;
    s->st.refused_by[reason]++;
    s->rf.count++;
    char host[64];
    snprintf(host, sizeof host, "%s", from && from[0] ? from : "unknown");
    char *colon = strrchr(host, ':'); /* the port aside: one host, many sockets */
    if (colon && colon != host) *colon = '\0';
    int a = 0;
    while (a < s->rf.naddr && strcmp(s->rf.addr[a].host, host) != 0) a++;
    if (a == s->rf.naddr && a < DLC_SRT_REFUSAL_ADDRS) snprintf(s->rf.addr[s->rf.naddr++].host, sizeof host, "%s", host);
    if (a < s->rf.naddr) s->rf.addr[a].n++;
    else s->rf.others++;
    if (s->rf.by[reason]++ == 0) {
        s->rf.posted++;
        post_simple(s, DLC_SRT_REFUSED, learner, text);
    }
}

/* At the end of a refusals_every interval: one REFUSALS event for the refusals that were
 * not each posted (with the counts of all of them), and a new interval.  lock held. */
static void refusals_tick(dlc_srt *s, double now) {
    if (now - s->rf.t0 < s->cfg.refusals_every) return;
    if (s->rf.count > s->rf.posted) {
        dlc_srt_event ev = event_at(DLC_SRT_REFUSALS, -1, now);
        ev.count = s->rf.count;
        ev.interval = now - s->rf.t0;
        size_t n = (size_t)snprintf(ev.text, sizeof ev.text, "%lld refused in %.1f s (%lld reported one by one): by "
                                    "reason", (long long)s->rf.count, ev.interval, (long long)s->rf.posted);
        for (int r = 0; r < DLC_SRT_REFUSAL_REASONS && n < sizeof ev.text; r++)
            if (s->rf.by[r])
                n += (size_t)snprintf(ev.text + n, sizeof ev.text - n, " %s %lld", refusal_reason_name(r),
                                      (long long)s->rf.by[r]);
        if (n < sizeof ev.text) n += (size_t)snprintf(ev.text + n, sizeof ev.text - n, "; by address");
        for (int a = 0; a < s->rf.naddr && n < sizeof ev.text; a++)
            n += (size_t)snprintf(ev.text + n, sizeof ev.text - n, " %s %lld", s->rf.addr[a].host,
                                  (long long)s->rf.addr[a].n);
        if (s->rf.others && n < sizeof ev.text)
            snprintf(ev.text + n, sizeof ev.text - n, " others %lld", (long long)s->rf.others);
        post(s, &ev);
    }
    memset(&s->rf, 0, sizeof s->rf);
    s->rf.t0 = now;
}

/* The learner bound to peer, -1 none.  lock held. */
static int learner_of(const dlc_srt *s, int peer) {
    for (int m = 0; m < s->M; m++)
        if (s->learners[m].peer == peer) return m;
    return -1;
}

/* ---- sends that wait for room (owed) ---- */

static void cache_trim(dlc_srt *s);

static void owed_free(owed *o) {
    sbuf_unref(NULL, o->buf);
    free(o);
}

/* Learner m's waiting sends are dropped (its connection ended: a join resyncs it whole).
 * lock held. */
static void owed_clear(dlc_srt *s, int m) {
    slearner *L = &s->learners[m];
    for (owed *o = L->ob_head, *next; o; o = next) {
        next = o->next;
        owed_free(o);
    }
    L->ob_head = L->ob_tail = NULL;
    L->ob_other = 0, L->ob_bytes = 0, L->ob_since = 0;
}

/* A BEHIND event for learner m, at most one per refusals_every: a FRAGMENT to it was
 * superseded while it waited (m's link or reading is slower than the merges).  lock held. */
static void behind(dlc_srt *s, int m, const dlc_msg *old, const dlc_msg *now_msg) {
    slearner *L = &s->learners[m];
    s->st.sends_superseded++;
    L->superseded++;
    double now = srt_now(s);
    if (L->behind_t >= 0 && now - L->behind_t < s->cfg.refusals_every) return;
    dlc_srt_event ev = event_at(DLC_SRT_BEHIND, m, now);
    ev.fragment = now_msg->fragment;
    ev.count = L->superseded;
    ev.interval = L->behind_t >= 0 ? now - L->behind_t : now;
    snprintf(ev.text, sizeof ev.text, "its queue is full (%zu bytes of fragments waiting for it %.1f s): fragment %d "
             "v%lld waited and was replaced by v%lld, the newest, before it could go; %lld replaced in %.1f s (its "
             "link or its reading is slower than the merges)", L->ob_bytes, now - L->ob_since, now_msg->fragment,
             (long long)old->version, (long long)now_msg->version, (long long)L->superseded, ev.interval);
    L->behind_t = now;
    L->superseded = 0;
    post(s, &ev);
}

/* msg (its payload buf's, one reference taken over) waits for room in learner m's queue.
 * A FRAGMENT takes the place of a waiting one of the same fragment.  lock held. */
static dlc_status owe(dlc_srt *s, int m, const dlc_msg *msg, sbuf *buf) {
    slearner *L = &s->learners[m];
    if (msg->type == DLC_MSG_FRAGMENT) {
        for (owed *o = L->ob_head; o; o = o->next) {
            if (o->msg.type != DLC_MSG_FRAGMENT || o->msg.fragment != msg->fragment) continue;
            dlc_msg was = o->msg;
            o->msg = *msg;
            if ((was.flags & DLC_MSG_RESYNC) && !(msg->flags & DLC_MSG_RESYNC)) { /* still a resync: its phase kept */
                o->msg.flags |= DLC_MSG_RESYNC;
                o->msg.steps = was.steps, o->msg.step_time = was.step_time, o->msg.held = was.held;
            }
            L->ob_bytes = L->ob_bytes - was.len + msg->len;
            sbuf_unref(NULL, o->buf);
            o->buf = buf;
            behind(s, m, &was, msg);
            return DLC_OK;
        }
    } else if (L->ob_other >= SRT_OWED_OTHER_MAX) {
        sbuf_unref(NULL, buf);
        char text[DLC_RT_TEXT_MAX];
        snprintf(text, sizeof text, "%d %s and other sends wait for room in its queue (%zu bytes, %.1f s): it is "
                 "cut off, to rejoin and be resynced", L->ob_other, dlc_msg_type_name(msg->type), L->ob_bytes,
                 srt_now(s) - L->ob_since);
        s->st.sends_dropped++;
        owed_clear(s, m);
        dlc_net_close(s->net, L->peer); /* LOST follows; its next connection joins */
        post_simple(s, DLC_SRT_BEHIND, m, text);
        return DLC_OK;
    }
    owed *o = malloc(sizeof *o);
    if (!o) {
        sbuf_unref(NULL, buf);
        return dlc_error(DLC_ERR_NOMEM, "syncer: out of memory for a waiting send");
    }
    o->next = NULL, o->msg = *msg, o->buf = buf;
    if (!L->ob_head) L->ob_since = L->ob_tried = srt_now(s);
    if (L->ob_tail) L->ob_tail->next = o;
    else L->ob_head = o;
    L->ob_tail = o;
    L->ob_other += msg->type != DLC_MSG_FRAGMENT;
    L->ob_bytes += msg->len;
    s->st.sends_held++;
    return DLC_OK;
}

/* Sends msg (payload buf's, one reference taken over) to learner m's connection now: 1
 * sent (or dropped, the peer going: its LOST follows), 0 refused for back-pressure (buf
 * not taken: still the caller's reference), or a negative status (the reference
 * released).  lock held. */
static int send_now(dlc_srt *s, int m, const dlc_msg *msg, sbuf *buf) {
    dlc_frame f;
    if (dlc_frame_from_msg(&f, msg) != DLC_OK) {
        sbuf_unref(NULL, buf);
        return dlc_error(DLC_ERR_INTERNAL, "syncer: cannot frame a %s message: %s", dlc_msg_type_name(msg->type),
                         dlc_last_error());
    }
    dlc_status ss = dlc_net_send(s->net, s->learners[m].peer, &f, buf ? sbuf_unref : NULL, buf);
    if (ss == DLC_OK) return 1;
    if (ss == DLC_ERR_RANGE) return 0;
    sbuf_unref(NULL, buf);
    s->st.sends_dropped++; /* the peer is going (its LOST follows): its next join resyncs it */
    return 1;
}

/* msg to learner m: now if nothing waits ahead of it and its queue takes it, else it
 * waits (owe) for the peer's DRAINED.  buf: one reference, taken over.  lock held. */
static dlc_status deliver(dlc_srt *s, int m, const dlc_msg *msg, sbuf *buf) {
    if (!s->learners[m].ob_head) {
        int r = send_now(s, m, msg, buf);
        if (r != 0) return r < 0 ? (dlc_status)r : DLC_OK;
    }
    return owe(s, m, msg, buf);
}

/* Learner m's peer has room again: its waiting sends go, oldest first, until the queue
 * is full again.  lock held. */
static dlc_status owed_flush(dlc_srt *s, int m) {
    slearner *L = &s->learners[m];
    L->ob_tried = srt_now(s);
    while (L->ob_head && L->peer >= 0) {
        owed *o = L->ob_head;
        int r = send_now(s, m, &o->msg, o->buf);
        if (r == 0) return DLC_OK; /* full again: the next DRAINED */
        L->ob_head = o->next;
        if (!L->ob_head) L->ob_tail = NULL;
        L->ob_other -= o->msg.type != DLC_MSG_FRAGMENT;
        L->ob_bytes -= o->msg.len;
        L->ob_since = srt_now(s);
        free(o); /* its reference went with the send */
        if (r < 0) {
            owed_clear(s, m);
            return (dlc_status)r;
        }
    }
    cache_trim(s);
    return DLC_OK;
}

/* The cached payloads that nothing else references (every send of them written) are let
 * go: the cache shares a version's bytes among the sends that overlap, it does not keep
 * a copy of the model for ever.  Only this thread takes references from the cache
 * (under lock), so a count of 1 stays 1.  lock held. */
static void cache_trim(dlc_srt *s) {
    for (int p = 0; p < s->P; p++)
        if (s->cur[p] && atomic_load_explicit(&s->cur[p]->refs, memory_order_acquire) == 1) {
            sbuf_unref(NULL, s->cur[p]);
            s->cur[p] = NULL;
        }
}

/* The payload of a SEND as a shared buffer (one reference for the caller): a FRAGMENT's
 * from the cache of its fragment's latest version, which references the syncer's own
 * buffer (`owner`, no copy; copied in once per version without one), another type's from
 * the batch's (*batch, copied once per distinct payload of a drain).  NULL when out of
 * memory.  lock held. */
static sbuf *payload_of(dlc_srt *s, const dlc_msg *msg, dlc_payload *owner, sbuf **batch,
                        const uint8_t **batch_src) {
    if (msg->type == DLC_MSG_FRAGMENT && msg->fragment >= 0 && msg->fragment < s->P) {
        int p = msg->fragment;
        sbuf *c = s->cur[p];
        if (c && s->cur_version[p] == msg->version && s->cur_epoch[p] == msg->epoch && c->len == msg->len &&
            (!owner || c->core == owner))
            return sbuf_ref(c);
        /* the syncer's buffer referenced, not copied (syncer.h, dlc_payload) */
        if (!(c = owner ? malloc(sizeof *c) : dlc_big_alloc(sizeof *c + msg->len))) return NULL;
        atomic_init(&c->refs, 1);
        c->len = msg->len;
        c->core = owner ? dlc_payload_ref(owner) : NULL;
        c->bytes = owner ? msg->payload : c->data;
        if (!owner) memcpy(c->data, msg->payload, msg->len);
        sbuf_unref(NULL, s->cur[p]);
        s->cur[p] = c, s->cur_version[p] = msg->version, s->cur_epoch[p] = msg->epoch;
        return sbuf_ref(c);
    }
    if (!*batch || *batch_src != msg->payload || (*batch)->len != msg->len) {
        sbuf *b = dlc_big_alloc(sizeof *b + msg->len);
        if (!b) return NULL;
        atomic_init(&b->refs, 1);
        b->len = msg->len;
        b->core = NULL, b->bytes = b->data;
        memcpy(b->data, msg->payload, msg->len);
        sbuf_unref(NULL, *batch);
        *batch = b, *batch_src = msg->payload;
    }
    return sbuf_ref(*batch);
}

static dlc_status drain(dlc_srt *s);

/* ---- replication: the primary's side (docs/shards.md, "Standbys") ---- */

static void rep_free(const void *payload, void *arg) {
    (void)payload;
    dlc_big_free(arg);
}

/* The replicas waiting for the standby are dropped (it is gone).  lock held. */
static void rq_clear(dlc_srt *s) {
    for (rep_out *o = s->rq_head, *next; o; o = next) {
        next = o->next;
        dlc_big_free(o->buf);
        free(o);
    }
    s->rq_head = s->rq_tail = NULL;
}

/* The waiting replicas go to the standby, oldest first, until its queue is full (the rest
 * at its DRAINED, or the thread's next retry).  lock held. */
static void rq_flush(dlc_srt *s) {
    s->rq_tried = srt_now(s);
    while (s->rq_head && s->sb_peer >= 0) {
        rep_out *o = s->rq_head;
        dlc_frame f;
        dlc_frame_init(&f, DLC_FRAME_REPLICA);
        f.msg.fragment = o->fragment, f.msg.version = o->version, f.msg.epoch = o->epoch;
        f.msg.steps = o->count, f.msg.flags = o->flags, f.msg.tokens = o->tokens;
        f.msg.payload = o->buf, f.msg.len = o->len;
        dlc_status st = dlc_net_send(s->net, s->sb_peer, &f, rep_free, o->buf);
        if (st == DLC_ERR_RANGE) return; /* full: its DRAINED */
        if (st != DLC_OK) dlc_big_free(o->buf); /* going: its LOST follows */
        else s->st.replicas++;
        s->rq_head = o->next;
        if (!s->rq_head) s->rq_tail = NULL;
        free(o);
    }
}

/* Replica r (the syncer's, borrowed) copied into one payload and queued for the standby.
 * lock held. */
static dlc_status rq_push(dlc_srt *s, const dlc_replica *r) {
    uint32_t flags = (r->momentum ? DLC_MSG_REPLICA_MOMENTUM : 0) | (r->whole ? DLC_MSG_REPLICA_WHOLE : 0);
    int64_t len = dlc_replica_payload_size(r->n, flags, r->count);
    if (len < 0) return (dlc_status)len;
    rep_out *o = calloc(1, sizeof *o);
    dlc_replica_record *rec = r->count ? malloc((size_t)r->count * sizeof *rec) : NULL;
    if (!o || (r->count && !rec) || !(o->buf = dlc_big_alloc((size_t)len))) {
        free(o), free(rec);
        return dlc_error(DLC_ERR_NOMEM, "syncer: out of memory for a %lld-byte replica", (long long)len);
    }
    o->fragment = r->fragment, o->count = r->count, o->version = r->version, o->epoch = dlc_syncer_epoch(s->s);
    o->flags = flags;
    o->tokens = llround(r->useful_tokens * s->P);
    o->len = (size_t)len;
    for (int i = 0; i < r->count; i++) {
        const dlc_replica_contrib *c = &r->contribs[i];
        rec[i] = (dlc_replica_record){.learner = c->learner, .new_steps = c->new_steps, .base_version = c->base_version,
                                      .steps = c->steps, .tokens = c->tokens};
    }
    int64_t w = dlc_replica_pack(o->buf, o->len, r->n, flags, r->theta, r->momentum, rec, r->count);
    free(rec);
    if (w < 0) {
        dlc_big_free(o->buf);
        free(o);
        return (dlc_status)w;
    }
    if (s->rq_tail) s->rq_tail->next = o;
    else s->rq_head = o;
    s->rq_tail = o;
    rq_flush(s);
    return DLC_OK;
}

/* A standby's connection `peer` is READY: it gets a whole replica of each fragment this
 * syncer owns, and from now on merges wait for its acks.  A second standby while one is
 * attached is refused (the live one is never displaced).  lock held. */
static dlc_status standby_attach(dlc_srt *s, int peer, const char *from, double now) {
    char text[DLC_RT_TEXT_MAX];
    if (s->standby) { /* (the transport refuses it before this while refusing) not a primary yet: it
                       * retries, and finds this one a primary once it has taken over */
        dlc_net_close(s->net, peer);
        return DLC_OK;
    }
    /* a replica of each fragment must fit a frame (the largest, with momentum and every
     * learner's record): else this syncer takes no standby */
    int64_t too_big = -1;
    for (int p = 0; p < s->P && too_big < 0; p++)
        if (dlc_syncer_owns(s->s, p) &&
            dlc_replica_payload_size(s->numel[p], DLC_MSG_REPLICA_MOMENTUM | DLC_MSG_REPLICA_WHOLE, s->M) < 0)
            too_big = p;
    if (s->sb_peer >= 0 || s->cfg.syncer.dp || too_big >= 0) {
        char why[160];
        if (too_big >= 0)
            snprintf(why, sizeof why, "fragment %lld's replica (%lld floats, with momentum) exceeds the largest frame",
                     (long long)too_big + 1, (long long)s->numel[too_big]);
        snprintf(text, sizeof text, "a standby from %.200s refused: %s", from,
                 s->cfg.syncer.dp ? "data parallel is not replicated"
                 : too_big >= 0   ? why
                                  : "one is attached already");
        dlc_frame f;
        dlc_frame_init(&f, DLC_FRAME_BYE);
        f.msg.learner = 0; /* (a standby has no id: the field is not read) */
        snprintf(f.text, sizeof f.text, "refused: %.490s", text);
        (void)dlc_net_send(s->net, peer, &f, NULL, NULL);
        dlc_net_close(s->net, peer);
        post_simple(s, DLC_SRT_STANDBY, -1, text);
        return DLC_OK;
    }
    s->sb_peer = peer;
    snprintf(s->sb_from, sizeof s->sb_from, "%s", from);
    s->st.standby = 1;
    dlc_status st = dlc_syncer_set_replicated(s->s, 1, now);
    for (int p = 0; p < s->P && st == DLC_OK; p++) {
        if (!dlc_syncer_owns(s->s, p)) continue;
        dlc_replica r;
        st = dlc_syncer_replica_of(s->s, p, 1, &r);
        if (st == DLC_OK) st = rq_push(s, &r);
    }
    snprintf(text, sizeof text, "a standby attached from %.200s: merges now wait for its acknowledgement", from);
    post_simple(s, DLC_SRT_STANDBY, -1, text);
    return st;
}

/* The standby is gone: what waited for it goes to the learners now, and merges go at once
 * again.  lock held. */
static dlc_status standby_lost(dlc_srt *s, const char *why, double now) {
    char text[DLC_RT_TEXT_MAX];
    snprintf(text, sizeof text, "the standby from %.200s is lost (%.200s): this syncer goes on unreplicated", s->sb_from,
             why);
    s->sb_peer = -1;
    s->st.standby = 0;
    rq_clear(s);
    memset(s->rep_at, 0, (size_t)s->P * sizeof *s->rep_at);
    post_simple(s, DLC_SRT_STANDBY, -1, text);
    dlc_status st = dlc_syncer_set_replicated(s->s, 0, now);
    return st == DLC_OK ? drain(s) : st;
}

/* A frame from the standby: an ack releases the merge it waited for.  lock held. */
static dlc_status standby_frame(dlc_srt *s, const dlc_frame *f, double now) {
    if (f->type != DLC_FRAME_REPLICA_ACK) return DLC_OK; /* heartbeats */
    s->st.acks++;
    int p = f->msg.fragment;
    if (p < 0 || p >= s->P || dlc_syncer_awaiting(s->s, p) != f->msg.version) return DLC_OK; /* a whole one's */
    s->rep_at[p] = 0;
    dlc_status st = dlc_syncer_replica_acked(s->s, p, f->msg.version, now);
    return st == DLC_OK ? drain(s) : st;
}

/* A standby that leaves a merge unacknowledged for the transport's timeout (connected,
 * heartbeating, but not acking: stuck or hostile) is let go, so that merges go on: its
 * connection closed, its LOST releases what waited (standby_lost).  lock held. */
static void ack_deadline(dlc_srt *s, double now) {
    for (int p = 0; p < s->P && s->sb_peer >= 0; p++) {
        if (!(s->rep_at[p] > 0) || now - s->rep_at[p] < s->cfg.net.timeout_s) continue;
        char text[DLC_RT_TEXT_MAX];
        snprintf(text, sizeof text, "the standby from %.200s did not acknowledge fragment %d v%lld within %.1f s "
                 "(the timeout): it is let go, merges go on without it", s->sb_from, p + 1,
                 (long long)dlc_syncer_awaiting(s->s, p), s->cfg.net.timeout_s);
        post_simple(s, DLC_SRT_STANDBY, -1, text);
        memset(s->rep_at, 0, (size_t)s->P * sizeof *s->rep_at);
        dlc_net_close(s->net, s->sb_peer); /* its LOST follows */
    }
}

/* Performs the syncer's queued actions.  lock held. */
static dlc_status drain(dlc_srt *s) {
    dlc_syncer_action a;
    sbuf *shared = NULL;
    const uint8_t *shared_src = NULL;
    dlc_status st = DLC_OK;
    while (dlc_syncer_poll(s->s, &a)) {
        dlc_srt_event ev;
        memset(&ev, 0, sizeof ev);
        ev.time = srt_now(s);
        ev.learner = a.learner;
        switch (a.type) {
        case DLC_SACT_SEND: {
            int m = a.msg.learner;
            if (m < 0 || m >= s->M || s->learners[m].peer < 0) {
                s->st.sends_dropped++; /* not connected: its join resyncs it whole */
                break;
            }
            dlc_msg msg = a.msg;
            sbuf *buf = NULL;
            if (msg.len) { /* a merged fragment broadcast to M learners is one buffer */
                if (!(buf = payload_of(s, &msg, a.owner, &shared, &shared_src))) {
                    st = dlc_error(DLC_ERR_NOMEM, "syncer: out of memory for a %zu-byte %s", msg.len,
                                   dlc_msg_type_name(msg.type));
                    break;
                }
                msg.payload = buf->bytes;
            }
            st = deliver(s, m, &msg, buf);
            break;
        }
        case DLC_SACT_MERGED: {
            ev.kind = DLC_SRT_MERGED;
            ev.merge = a.merge;
            ev.learner = -1;
            ev.fragment = a.merge.fragment;
            if (a.merge.count > 0) {
                ev.owned_ = malloc((size_t)a.merge.count * sizeof *ev.owned_);
                if (!ev.owned_) {
                    st = dlc_error(DLC_ERR_NOMEM, "syncer: out of memory for a merge record");
                    break;
                }
                memcpy(ev.owned_, a.merge.contribs, (size_t)a.merge.count * sizeof *ev.owned_);
                for (int i = 0; i < a.merge.count; i++) {
                    int m = a.merge.contribs[i].learner;
                    if (m >= 0 && m < s->M) s->learners[m].merged++;
                }
            }
            ev.merge.contribs = ev.owned_;
            s->st.merges++;
            s->st.useful_tokens += a.merge.useful_tokens;
            post(s, &ev);
            break;
        }
        case DLC_SACT_REJECTED:
            ev.kind = DLC_SRT_REJECTED;
            ev.fragment = a.fragment;
            ev.reason = a.reason;
            s->st.rejects++;
            post(s, &ev);
            break;
        case DLC_SACT_JOINED:
            ev.kind = DLC_SRT_JOINED;
            snprintf(ev.text, sizeof ev.text, "rejoined by its message");
            post(s, &ev);
            break;
        case DLC_SACT_LOST:
            ev.kind = DLC_SRT_LOST;
            snprintf(ev.text, sizeof ev.text, "silent past the syncer's timeout");
            post(s, &ev);
            break;
        case DLC_SACT_REPLICATE: { /* the merge waits for the standby: its replica goes */
            dlc_replica r;
            s->rep_at[a.fragment] = ev.time;
            st = dlc_syncer_replica(s->s, a.fragment, &r);
            if (st == DLC_OK) st = rq_push(s, &r);
            break;
        }
        default: break;
        }
        if (st != DLC_OK) break;
    }
    if (shared) sbuf_unref(NULL, shared);
    cache_trim(s);
    return st;
}

/* Adds the counters of learner m's connection `peer` to its totals, once (at its BYE,
 * while the connection still exists, or when it is replaced or lost).  lock held. */
static void bank_bytes(dlc_srt *s, int m, int peer) {
    dlc_net_counters c;
    if (s->learners[m].banked == peer) return;
    if (dlc_net_get_counters(s->net, peer, &c) != DLC_OK) return;
    s->learners[m].banked = peer;
    for (int t = 0; t < DLC_FRAME_TYPE_COUNT; t++) {
        s->learners[m].bytes_in += c.bytes_in[t];
        s->learners[m].bytes_out += c.bytes_out[t];
    }
}

/* Both directions of a connection's emulated link (dlc_srt_shape).  lock held. */
static void link_shape(dlc_srt *s, int peer, double rate, double latency) {
    dlc_net_shape(s->net, peer, rate, latency);
    dlc_net_shape_in(s->net, peer, rate, latency);
}

/* Learner m's connection `peer` (READY, from address `from`) joins: the state machine
 * sends it the whole model.  lock held. */
static dlc_status join(dlc_srt *s, int m, int peer, const char *from, double now) {
    slearner *L = &s->learners[m];
    if (L->peer >= 0 && L->peer != peer) {
        bank_bytes(s, m, L->peer);
        char text[DLC_RT_TEXT_MAX];
        snprintf(text, sizeof text, "its connection from %.200s fell silent and gave way to a new one from %.200s",
                 L->from, from);
        post_simple(s, DLC_SRT_REPLACED, m, text);
    }
    owed_clear(s, m); /* what waited for the old connection: the join resyncs it whole */
    L->peer = peer;
    snprintf(L->from, sizeof L->from, "%s", from);
    L->joined = 1;
    L->bye = 0;
    L->joins++;
    L->heard = now;
    L->tokens = 0;
    dlc_status st = dlc_syncer_join(s->s, m, now);
    if (st == DLC_OK) st = drain(s);
    char text[DLC_RT_TEXT_MAX];
    snprintf(text, sizeof text, "connected from %.400s", from);
    post_simple(s, DLC_SRT_JOINED, m, text);
    return st;
}

/* Learner m's cut ends: its connection resumes, or the one held during the cut joins.
 * lock held. */
static dlc_status cut_end(dlc_srt *s, int m, double now) {
    slearner *L = &s->learners[m];
    L->cut_until = 0;
    if (L->peer >= 0) dlc_net_cut(s->net, L->peer, 0);
    if (L->held < 0) return DLC_OK;
    int held = L->held;
    L->held = -1;
    dlc_net_cut(s->net, held, 0);
    return join(s, m, held, L->held_text, now);
}

/* Opens the start gate: every learner waiting at it joins (each is sent the whole model
 * with the run's step 0, so all start the schedule together).  lock held. */
static dlc_status gate_open(dlc_srt *s, double now) {
    s->gate = 0;
    dlc_status st = DLC_OK;
    for (int m = 0; m < s->M && st == DLC_OK; m++) {
        slearner *L = &s->learners[m];
        if (L->waiting < 0) continue;
        int peer = L->waiting;
        L->waiting = -1;
        st = join(s, m, peer, L->waiting_text, now);
    }
    return st;
}

/* Learner m's READY connection `peer` reaches the shut start gate: it waits there, and
 * the gate opens once start_learners learners wait.  lock held. */
static dlc_status gate_wait(dlc_srt *s, int m, int peer, const char *from, double now) {
    slearner *L = &s->learners[m];
    if (L->waiting >= 0 && L->waiting != peer) dlc_net_close(s->net, L->waiting); /* replaced */
    L->waiting = peer;
    snprintf(L->waiting_text, sizeof L->waiting_text, "%s", from);
    if (s->gate_first < 0) s->gate_first = now;
    int n = 0;
    for (int k = 0; k < s->M; k++) n += s->learners[k].waiting >= 0;
    return n >= s->cfg.start_learners ? gate_open(s, now) : DLC_OK;
}

/* One transport event.  lock held. */
static dlc_status on_net_event(dlc_srt *s, dlc_net_event *ev) {
    double now = srt_now(s);
    switch (ev->kind) {
    case DLC_NET_READY: {
        if (ev->frame.hello.caps & DLC_CAP_STANDBY) return standby_attach(s, ev->peer, ev->text, now);
        int m = ev->frame.hello.learner;
        if (m < 0 || m >= s->M) {
            char why[DLC_RT_TEXT_MAX];
            snprintf(why, sizeof why, "learner id %d from %.400s: this run has learners 1..%d (--id or the launcher's rank)",
                     m + 1, ev->text, s->M);
            /* told why, so that it fails at once instead of retrying (a BYE before its join
             * is final for the learner driver), then closed */
            dlc_frame f;
            dlc_frame_init(&f, DLC_FRAME_BYE);
            f.msg.learner = m;
            snprintf(f.text, sizeof f.text, "refused: %.490s", why);
            (void)dlc_net_send(s->net, ev->peer, &f, NULL, NULL);
            dlc_net_close(s->net, ev->peer);
            refuse(s, DLC_PERR_MISMATCH, m, ev->text, why);
            return DLC_OK;
        }
        slearner *L = &s->learners[m];
        if (L->rate > 0 || L->latency > 0) link_shape(s, ev->peer, L->rate, L->latency);
        if (L->cut_until > 0) { /* held, cut, until the cut ends (cut_end) */
            dlc_net_cut(s->net, ev->peer, 1);
            if (L->held >= 0 && L->held != ev->peer) dlc_net_close(s->net, L->held);
            L->held = ev->peer;
            snprintf(L->held_text, sizeof L->held_text, "%s", ev->text);
            return DLC_OK;
        }
        if (s->gate) return gate_wait(s, m, ev->peer, ev->text, now);
        return join(s, m, ev->peer, ev->text, now);
    }
    case DLC_NET_FRAME: {
        if (s->sb_peer >= 0 && ev->peer == s->sb_peer) return standby_frame(s, &ev->frame, now);
        int m = learner_of(s, ev->peer);
        if (m < 0) return DLC_OK; /* a connection we already let go of */
        dlc_msg msg = ev->frame.msg;
        msg.learner = m; /* the id this connection was welcomed with, whatever the frame says */
        slearner *L = &s->learners[m];
        L->heard = now;
        if (msg.type == DLC_MSG_HEARTBEAT) { /* the transport's own heartbeats carry zeros */
            if (msg.steps > 0) L->steps = msg.steps;
            if (msg.tokens > 0) L->tokens = msg.tokens;
            if (msg.step_time > 0) L->step_time = msg.step_time;
        } else if (msg.type == DLC_MSG_CONTRIBUTION) {
            if (msg.step_time > 0) L->step_time = msg.step_time;
            if (msg.steps > 0 && msg.tokens > 0) L->sent_steps += (double)msg.steps, L->sent_tokens += (double)msg.tokens;
        }
        if (msg.step_time > 0 && isfinite(msg.step_time) &&
            (L->best_step_time == 0 || msg.step_time < L->best_step_time))
            L->best_step_time = msg.step_time;
        if (msg.type == DLC_MSG_BYE) {
            L->bye = 1;
            bank_bytes(s, m, ev->peer);
            post_simple(s, DLC_SRT_BYE, m, ev->frame.text[0] ? ev->frame.text : "bye");
        }
        dlc_status st = dlc_syncer_receive(s->s, &msg, now);
        if (st == DLC_ERR_FORMAT) { /* refused, the syncer unchanged: say so and go on */
            refuse(s, DLC_PERR_COUNT, m, s->learners[m].from, dlc_last_error());
            st = DLC_OK;
        }
        if (st == DLC_OK) st = drain(s);
        return st;
    }
    case DLC_NET_LOST: {
        if (s->sb_peer >= 0 && ev->peer == s->sb_peer) return standby_lost(s, ev->text, now);
        int m = learner_of(s, ev->peer);
        for (int k = 0; m < 0 && k < s->M; k++)
            if (s->learners[k].held == ev->peer) s->learners[k].held = -1; /* never joined: nothing to lose */
        for (int k = 0; m < 0 && k < s->M; k++)
            if (s->learners[k].waiting == ev->peer) s->learners[k].waiting = -1; /* left the start gate */
        if (m < 0) return DLC_OK;
        slearner *L = &s->learners[m];
        bank_bytes(s, m, ev->peer);
        owed_clear(s, m);
        L->peer = -1;
        L->left = now;
        dlc_status st = DLC_OK;
        if (dlc_syncer_is_live(s->s, m)) {
            st = dlc_syncer_lost(s->s, m, now);
            if (st == DLC_OK) st = drain(s);
        }
        if (!L->bye) post_simple(s, DLC_SRT_LOST, m, ev->text);
        return st;
    }
    case DLC_NET_REFUSED:
        refuse(s, ev->code, -1, ev->from, ev->text);
        return DLC_OK;
    case DLC_NET_DRAINED: { /* room again: what waits for it goes */
        if (s->sb_peer >= 0 && ev->peer == s->sb_peer) {
            rq_flush(s);
            return DLC_OK;
        }
        int m = learner_of(s, ev->peer);
        return m >= 0 ? owed_flush(s, m) : DLC_OK;
    }
    default: return DLC_OK;
    }
}

/* ---- replication: the standby's side ---- */

/* The standby's link to its primary: a client net of its own (with its I/O thread: the
 * syncer's thread polls it between its own net's turns), reconnecting with backoff. */
static dlc_status rnet_start(dlc_srt *s) {
    dlc_net_config c = s->cfg.net;
    c.hello = &s->rhello;
    c.layout = &s->layout;
    c.inline_io = 0;
    c.decode = NULL;
    /* closed at once (a takeover, a relink): nothing on this link is worth waiting for, and
     * a primary that hangs (stopped, not dead) would hold the takeover for the whole drain */
    c.drain_timeout_s = 0;
    if (c.tls && !c.tls_ca) c.tls_ca = c.tls_cert; /* the run's own certificate, as the learners check it */
    if (!(s->rnet = dlc_net_new(&c))) return dlc_last_status();
    s->rpeer = dlc_net_connect(s->rnet, s->standby_of);
    return s->rpeer < 0 ? (dlc_status)s->rpeer : DLC_OK;
}

/* A REPLICA from the primary, applied: acknowledged, or refused (a replica lost or out of
 * order: the link is made again, and the primary's whole replicas bring it back).  lock
 * held; *relink set for the caller (after the event is released). */
static dlc_status standby_replica(dlc_srt *s, const dlc_frame *f, double now, int *relink) {
    const dlc_msg *m = &f->msg;
    int p = m->fragment, mom = (m->flags & DLC_MSG_REPLICA_MOMENTUM) != 0, whole = (m->flags & DLC_MSG_REPLICA_WHOLE) != 0;
    char why[DLC_RT_TEXT_MAX] = "";
    dlc_status st = DLC_OK;
    if (p < 0 || p >= s->P || m->steps < 0 || m->steps > s->M)
        st = dlc_error(DLC_ERR_FORMAT, "fragment %d, %lld contributors: expected a fragment in 1..%d and 0..%d "
                       "contributors", p + 1, (long long)m->steps, s->P, s->M);
    int64_t n = st == DLC_OK ? s->numel[p] : 0;
    /* copied out (the frame's bytes are not float-aligned); the decoder checked the layout */
    if (st == DLC_OK) st = dlc_replica_unpack(m->payload, m->len, n, m->flags, s->rscratch, mom ? s->rscratch + n : NULL);
    for (int i = 0; i < (int)m->steps && st == DLC_OK; i++) {
        dlc_replica_record rec;
        st = dlc_replica_record_read(m->payload, m->len, n, m->flags, i, &rec);
        s->rcontribs[i] = (dlc_replica_contrib){.learner = rec.learner, .new_steps = rec.new_steps,
                                                .base_version = rec.base_version, .steps = rec.steps,
                                                .tokens = rec.tokens};
    }
    if (st == DLC_OK) {
        dlc_replica r = {.fragment = p, .version = m->version, .theta = s->rscratch,
                         .momentum = mom ? s->rscratch + n : NULL, .n = n, .count = (int)m->steps,
                         .contribs = s->rcontribs, .whole = whole};
        st = dlc_syncer_replicate(s->s, &r, now);
    }
    if (st == DLC_ERR_ARG || st == DLC_ERR_STATE || st == DLC_ERR_FORMAT) { /* refused: data, not a failure */
        snprintf(why, sizeof why, "%s", dlc_last_error());
        st = DLC_OK;
    }
    if (st != DLC_OK) return st;
    if (why[0]) {
        char text[DLC_RT_TEXT_MAX];
        int last = ++s->refused_row >= SRT_REFUSED_MAX;
        snprintf(text, sizeof text, "a replica from the primary refused (%.400s): %s", why,
                 last ? "the third in a row: this standby ends" : "catching up again");
        post_simple(s, DLC_SRT_STANDBY, -1, text);
        memset(s->caught, 0, (size_t)s->P);
        if (last) s->st.standby = 4;
        *relink = 1;
        return DLC_OK;
    }
    s->refused_row = 0;
    if (whole) s->caught[p] = 1;
    s->primary_epoch = m->epoch;
    s->st.replicas++;
    if (!whole) { /* the primary's merge, on this standby's record (its tape goes on from there) */
        dlc_srt_event ev = event_at(DLC_SRT_MERGED, -1, now);
        ev.fragment = p;
        if (m->steps > 0 && !(ev.owned_ = calloc((size_t)m->steps, sizeof *ev.owned_)))
            return dlc_error(DLC_ERR_NOMEM, "syncer: out of memory for a merge record");
        for (int i = 0; i < (int)m->steps; i++) {
            const dlc_replica_contrib *c = &s->rcontribs[i];
            ev.owned_[i] = (dlc_merge_contrib){.learner = c->learner, .base_version = c->base_version,
                                               .staleness = m->version - 1 - c->base_version, .steps = c->steps,
                                               .tokens = c->tokens};
        }
        ev.merge = (dlc_merge_info){.fragment = p, .version = m->version, .count = (int)m->steps,
                                    .contribs = ev.owned_, .useful_tokens = (double)m->tokens / s->P, .replica = 1};
        s->st.merges++;
        s->st.useful_tokens += ev.merge.useful_tokens;
        post(s, &ev);
    }
    dlc_frame ack;
    dlc_frame_init(&ack, DLC_FRAME_REPLICA_ACK);
    ack.msg.fragment = p, ack.msg.version = m->version, ack.msg.epoch = m->epoch;
    (void)dlc_net_send(s->rnet, s->rpeer, &ack, NULL, NULL); /* lost: the primary goes on without us */
    return DLC_OK;
}

/* One event of the standby's link.  lock held. */
static dlc_status standby_event(dlc_srt *s, dlc_net_event *ev, double now, int *relink) {
    char text[DLC_RT_TEXT_MAX];
    switch (ev->kind) {
    case DLC_NET_READY: {
        /* the primary's WELCOME states its shard: this standby's, or it ends */
        const dlc_hello *w = &ev->frame.hello;
        int S = w->endpoints > 1 ? w->endpoints : 1, self = 0, mine = s->cfg.shards > 1 ? s->cfg.shard : 0;
        for (int e = 0; e < w->endpoints; e++)
            if (!w->endpoint[e][0]) self = e;
        if (S != (s->cfg.shards > 1 ? s->cfg.shards : 1) || self != mine) {
            snprintf(text, sizeof text, "the syncer at %.200s is shard %d of %d, this standby serves shard %d of %d: "
                     "this standby ends (give it its own shard's primary)", s->standby_of, self + 1, S, mine + 1,
                     s->cfg.shards > 1 ? s->cfg.shards : 1);
            s->st.standby = 4;
            *relink = 1;
            post_simple(s, DLC_SRT_STANDBY, -1, text);
            return DLC_OK;
        }
        s->primary_up = 1;
        s->primary_seen = now;
        snprintf(text, sizeof text, "reached its primary at %.300s: catching up from its whole replicas", s->standby_of);
        post_simple(s, DLC_SRT_STANDBY, -1, text);
        return DLC_OK;
    }
    case DLC_NET_FRAME:
        s->primary_seen = now;
        if (ev->frame.type == DLC_FRAME_REPLICA) return standby_replica(s, &ev->frame, now, relink);
        if (ev->frame.type == DLC_FRAME_BYE) { /* ended, or refused: this standby ends (never takes over) */
            snprintf(text, sizeof text, "its primary said bye (%.400s): this standby ends", ev->frame.text);
            s->st.standby = 4;
            *relink = 1;
            post_simple(s, DLC_SRT_STANDBY, -1, text);
        }
        return DLC_OK;
    case DLC_NET_LOST:
        if (s->primary_up) {
            snprintf(text, sizeof text, "lost its primary (%.400s): it takes over after %.1f s without it", ev->text,
                     s->cfg.lease);
            post_simple(s, DLC_SRT_STANDBY, -1, text);
        }
        if (s->primary_up) s->primary_seen = now; /* (its failed reconnects do not renew the lease) */
        s->primary_up = 0;
        /* another standby there, not serving yet (shutdown): the transport gives up on one
         * address, this link is made again after a pause */
        if (ev->code == DLC_PERR_SHUTDOWN) *relink = 2;
        return DLC_OK;
    default: return DLC_OK;
    }
}

/* Caught up (a whole replica of each fragment it owns) and its primary unreachable for the
 * lease: the standby serves, with the next epoch.  lock held. */
static dlc_status take_over(dlc_srt *s, double now) {
    int64_t own = dlc_syncer_epoch(s->s);
    int64_t e = (own > s->primary_epoch ? own : s->primary_epoch) + 1;
    dlc_status st = dlc_syncer_take_over(s->s, e, s->primary_epoch, now);
    if (st != DLC_OK) return st;
    s->standby = 0;
    s->st.standby = 3;
    for (int m = 0; m < s->M; m++) s->learners[m].left = now; /* away since the takeover, not the start */
    dlc_net_free(s->rnet); /* no more of the old primary, should it come back */
    s->rnet = NULL;
    if ((st = dlc_net_set_refusing(s->net, NULL)) != DLC_OK) return st;
    dlc_srt_event ev = event_at(DLC_SRT_STANDBY, -1, now);
    ev.count = e;
    snprintf(ev.text, sizeof ev.text, "took over from its primary at %.300s (unreachable for %.1f s): epoch %lld, "
             "contributions stamped with the primary's epoch %lld taken", s->standby_of, now - s->primary_seen,
             (long long)e, (long long)s->primary_epoch);
    post(s, &ev);
    return DLC_OK;
}

/* The standby's turn: its link's events, then the lease.  Not under lock. */
static dlc_status standby_turn(dlc_srt *s) {
    dlc_net_event ev;
    int r = 0, relink = 0;
    dlc_status st = DLC_OK;
    while (st == DLC_OK && s->rnet && !relink && (r = dlc_net_poll(s->rnet, &ev, 0)) > 0) {
        pthread_mutex_lock(&s->lock);
        st = standby_event(s, &ev, srt_now(s), &relink);
        pthread_mutex_unlock(&s->lock);
        dlc_net_event_release(&ev);
    }
    if (st == DLC_OK && r < 0 && !relink) st = (dlc_status)r;
    if (st != DLC_OK) return st;
    pthread_mutex_lock(&s->lock);
    double now = srt_now(s);
    if (relink) { /* made again: the primary attaches it anew, with whole replicas (or ended) */
        dlc_net_free(s->rnet);
        s->rnet = NULL;
        s->primary_up = 0;
        s->relink_at = relink == 2 ? now + SRT_RELINK_S : now;
    }
    if (!s->rnet && s->st.standby == 2 && now >= s->relink_at) st = rnet_start(s);
    int caught = 1;
    for (int p = 0; p < s->P; p++) caught &= !dlc_syncer_owns(s->s, p) || s->caught[p];
    if (st == DLC_OK && caught && !s->primary_up && now - s->primary_seen >= s->cfg.lease) st = take_over(s, now);
    pthread_mutex_unlock(&s->lock);
    return st;
}

static void fail_thread(dlc_srt *s, dlc_status st) {
    pthread_mutex_lock(&s->qlock);
    s->failed = st;
    snprintf(s->failed_msg, sizeof s->failed_msg, "syncer: %s", dlc_last_error());
    pthread_cond_broadcast(&s->qcond);
    pthread_mutex_unlock(&s->qlock);
}

/* A pause (dlc_srt_pause): the thread stands still, as a stopped process's would, until
 * the pause ends or the driver stops: no transport turn (nothing read or written, no
 * heartbeat), no timer.  A clock move is acknowledged (there is nothing to act on).
 * Whether it stood still. */
static int pause_wait(dlc_srt *s, uint64_t *acked) {
    int stood = 0;
    pthread_mutex_lock(&s->qlock);
    while (!atomic_load(&s->stop) && s->pause_until > srt_now(s)) {
        stood = 1;
        uint64_t creq = atomic_load(&s->clock_req);
        if (creq > *acked) {
            s->clock_done = *acked = creq;
            pthread_cond_broadcast(&s->qcond);
        }
        double left = s->pause_until - srt_now(s), step = left < 0.05 ? left : 0.05; /* (stop, an injected clock) */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)(step * 1e9);
        ts.tv_sec += ns / 1000000000L, ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&s->pcond, &s->qlock, &ts);
    }
    pthread_mutex_unlock(&s->qlock);
    return stood;
}

static void *srt_thread(void *arg) {
    dlc_srt *s = arg;
    uint64_t acked = 0; /* the clock moves acknowledged (dlc_srt_clock_moved) */
    while (!atomic_load(&s->stop)) {
        if (pause_wait(s, &acked)) continue;
        /* read before the time: a turn that sees a move reads the moved clock */
        uint64_t creq = atomic_load(&s->clock_req);
        pthread_mutex_lock(&s->lock);
        double now = srt_now(s);
        double exp = dlc_syncer_expiry(s->s);
        dlc_status st = DLC_OK;
        for (int m = 0; m < s->M && st == DLC_OK; m++)
            if (s->learners[m].cut_until > 0 && s->learners[m].cut_until <= now) st = cut_end(s, m, now);
        if (st == DLC_OK && s->gate && s->gate_first >= 0 && now >= s->gate_first + s->cfg.start_timeout)
            st = gate_open(s, now); /* start with those there */
        /* waiting sends are offered again now and then, whatever the DRAINED events: a send
         * refused because the transport's command queue was full has no DRAINED of its own */
        for (int m = 0; m < s->M && st == DLC_OK; m++)
            if (s->learners[m].ob_head && now - s->learners[m].ob_tried >= SRT_OWED_RETRY_S) st = owed_flush(s, m);
        if (s->rq_head && now - s->rq_tried >= SRT_OWED_RETRY_S) rq_flush(s);
        if (s->sb_peer >= 0) ack_deadline(s, now);
        if (exp <= now) {
            st = dlc_syncer_handle_expiry(s->s, now);
            if (st == DLC_OK) st = drain(s);
            exp = dlc_syncer_expiry(s->s);
        }
        refusals_tick(s, now);
        pthread_mutex_unlock(&s->lock);
        if (st != DLC_OK) {
            fail_thread(s, st);
            break;
        }
        if (st == DLC_OK && s->standby && s->st.standby == 2) st = standby_turn(s);
        if (st != DLC_OK) {
            fail_thread(s, st);
            break;
        }
        int tmo = creq > acked ? 0 : 50; /* the inline loop must turn at least every heartbeat; stop is seen within this */
        if (s->standby && s->st.standby == 2) tmo = tmo < SRT_STANDBY_TURN_MS ? tmo : SRT_STANDBY_TURN_MS; /* its link's replicas, acked soon */
        if (isfinite(exp)) {
            double ms = (exp - srt_now(s)) * 1e3 + 1;
            if (ms < tmo) tmo = ms < 0 ? 0 : (int)ms;
        }
        dlc_net_event ev;
        int r = dlc_net_poll(s->net, &ev, tmo);
        if (r < 0) {
            fail_thread(s, r);
            break;
        }
        if (r == 0) {
            /* a turn that began after a move, its timers handled, and nothing left from
             * the transport (its timers ran in this poll or an earlier one, and their
             * events were taken): the move is acted on */
            if (creq > acked) {
                pthread_mutex_lock(&s->qlock);
                s->clock_done = acked = creq;
                pthread_cond_broadcast(&s->qcond);
                pthread_mutex_unlock(&s->qlock);
            }
            continue;
        }
        pthread_mutex_lock(&s->lock);
        st = on_net_event(s, &ev);
        pthread_mutex_unlock(&s->lock);
        dlc_net_event_release(&ev);
        if (st != DLC_OK) {
            fail_thread(s, st);
            break;
        }
    }
    return NULL;
}

/* The learners that had said BYE when the checkpoint at `path` was saved (its metadata
 * RT_BYE_KEY: 0-based ids, comma-separated): they stay gone (rt.h).  A checkpoint of an
 * older build without the key: none.  An id out of range is refused, naming it. */
static dlc_status read_byes(dlc_srt *s, const char *path) {
    dlc_safetensors *st = dlc_safetensors_open(path);
    if (!st) return dlc_last_status();
    const char *v = dlc_safetensors_meta(st, RT_BYE_KEY);
    dlc_status rc = DLC_OK;
    for (const char *p = v; p && *p && rc == DLC_OK;) {
        char *end;
        long m = strtol(p, &end, 10);
        if (end == p || m < 0 || m >= s->M || (*end && *end != ',')) {
            rc = dlc_error(DLC_ERR_FORMAT, "srt_new: %s: metadata %s = \"%.64s\": expected learner ids 0..%d, "
                           "comma-separated", path, RT_BYE_KEY, v, s->M - 1);
            break;
        }
        s->learners[m].bye = 1;
        p = *end ? end + 1 : end;
    }
    dlc_safetensors_close(st);
    return rc;
}

dlc_srt *dlc_srt_new(const dlc_srt_config *cfg) {
    if (!cfg || !cfg->plan || (!cfg->theta0 && !cfg->resume) || !cfg->listen) {
        dlc_error(DLC_ERR_ARG, "srt_new: config, plan, theta0 (or resume) and listen are required");
        return NULL;
    }
    if (!(cfg->refusals_every > 0) || !isfinite(cfg->refusals_every)) {
        dlc_error(DLC_ERR_ARG, "srt_new: refusals_every = %g: expected a finite interval > 0 s", cfg->refusals_every);
        return NULL;
    }
    if (cfg->start_learners < 0 || cfg->start_learners > cfg->syncer.learners || !(cfg->start_timeout >= 0) ||
        !isfinite(cfg->start_timeout)) {
        dlc_error(DLC_ERR_ARG, "srt_new: start_learners = %d, start_timeout = %g: expected 0..%d learners and a "
                  "finite timeout >= 0 s", cfg->start_learners, cfg->start_timeout, cfg->syncer.learners);
        return NULL;
    }
    dlc_srt *s = calloc(1, sizeof *s);
    if (!s) {
        dlc_error(DLC_ERR_NOMEM, "srt_new: out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->cfg.syncer.timeout = 0; /* liveness is the transport's */
    s->cfg.endpoints = NULL;  /* borrowed during new only */
    s->sb_peer = s->rpeer = -1;
    s->cfg.standby_of = NULL; /* copied below */
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->qlock, NULL);
    pthread_cond_init(&s->qcond, NULL);
    pthread_cond_init(&s->pcond, NULL);
    s->t0 = rt_time(&s->cfg.net);
    s->M = cfg->syncer.learners;
    s->P = dlc_plan_count(cfg->plan);
    if (rt_strings_copy(&s->strs, &s->cfg.net, &s->cfg.run) != DLC_OK) goto fail;
    /* the layout's limits before the syncer's memory is taken */
    if (rt_layout(cfg->plan, s->cfg.syncer.codec_params, &s->layout, &s->numel) != DLC_OK) goto fail;
    if (rt_limits("syncer", s->numel, s->P, &s->cfg.net) != DLC_OK) goto fail;
    /* a learner's queue in the transport is a short pipe: what does not fit waits here
     * (owed), where a newer version of a fragment replaces an older one */
    rt_window(s->numel, s->P, 2, &s->cfg.net);
    int shards = cfg->shards > 1 ? cfg->shards : 1;
    if (shards > 1) {
        if (cfg->shard < 0 || cfg->shard >= shards || shards > DLC_PROTO_ENDPOINTS_MAX || cfg->syncer.dp) {
            dlc_error(DLC_ERR_ARG, "srt_new: shard %d of %d%s: expected 0..%d of at most %d shards, not in dp",
                      cfg->shard, shards, cfg->syncer.dp ? " in data parallel" : "", shards - 1,
                      DLC_PROTO_ENDPOINTS_MAX);
            goto fail;
        }
        if (!(s->owner = calloc((size_t)s->P, sizeof *s->owner)) || !(s->owns = calloc((size_t)s->P, 1))) goto nomem;
        if (dlc_plan_deal(cfg->plan, shards, s->owner) != DLC_OK) goto fail;
        for (int p = 0; p < s->P; p++) s->owns[p] = s->owner[p] == cfg->shard;
        s->cfg.syncer.owns = s->owns;
    }
    s->s = cfg->resume ? dlc_syncer_load(cfg->resume, &s->cfg.syncer, cfg->plan, 0)
                       : dlc_syncer_new(&s->cfg.syncer, cfg->plan, cfg->theta0);
    if (!s->s) goto fail;
    if (!(s->learners = calloc((size_t)s->M, sizeof *s->learners))) goto nomem;
    for (int m = 0; m < s->M; m++)
        s->learners[m].peer = s->learners[m].banked = s->learners[m].held = s->learners[m].waiting = -1,
        s->learners[m].heard = -1, s->learners[m].behind_t = -1;
    if (!(s->rep_at = calloc((size_t)s->P, sizeof *s->rep_at)) || !(s->cur = calloc((size_t)s->P, sizeof *s->cur)) || !(s->cur_version = calloc((size_t)s->P, sizeof(int64_t))) ||
        !(s->cur_epoch = calloc((size_t)s->P, sizeof(int64_t))))
        goto nomem;
    /* a resumed run is under way: its learners rejoin as they come */
    s->gate = !cfg->resume && cfg->start_learners > 0;
    s->gate_first = -1;
    if (cfg->resume && read_byes(s, cfg->resume) != DLC_OK) goto fail;
    if (cfg->standby_of) { /* a standby: caught up from its primary, it serves once that is lost */
        if (cfg->syncer.dp || !cfg->standby_of[0] || !(cfg->lease >= 0) || !isfinite(cfg->lease)) {
            dlc_error(DLC_ERR_ARG, "srt_new: a standby of \"%.200s\"%s with a lease of %g s: expected an address, "
                      "not in data parallel, and a finite lease >= 0 s (0: the net's timeout)", cfg->standby_of,
                      cfg->syncer.dp ? " in data parallel" : "", cfg->lease);
            goto fail;
        }
        s->cfg.lease = cfg->lease > 0 ? cfg->lease : s->cfg.net.timeout_s;
        int64_t maxn = 0;
        for (int p = 0; p < s->P; p++) maxn = s->numel[p] > maxn ? s->numel[p] : maxn;
        if (!(s->standby_of = strdup(cfg->standby_of)) || !(s->caught = calloc((size_t)s->P, 1)) ||
            !(s->rscratch = dlc_big_alloc((size_t)maxn * 2 * sizeof(float))) ||
            !(s->rcontribs = calloc((size_t)s->M, sizeof *s->rcontribs)))
            goto nomem;
        s->standby = 1;
        s->st.standby = 2;
        s->gate = 0; /* its learners come from a run under way */
        s->primary_seen = srt_now(s);
    }
    s->cfg.resume = NULL; /* borrowed during new only */
    if (rt_hello(&s->hello, cfg->plan, s->cfg.run, RT_SERVER, s->cfg.syncer.codec_params.block, s->cfg.syncer.dp,
                 cfg->run_params) != DLC_OK)
        goto fail;
    if (shards > 1) { /* the deal and the shards' endpoints, in the WELCOME */
        s->hello.endpoints = shards;
        for (int k = 0; k < shards; k++) {
            const char *e = k == cfg->shard ? "" : cfg->endpoints && cfg->endpoints[k] ? cfg->endpoints[k] : "*";
            if (strlen(e) > DLC_PROTO_ENDPOINT_MAX) {
                dlc_error(DLC_ERR_ARG, "srt_new: endpoint of shard %d of %zu bytes: expected at most %d", k + 1,
                          strlen(e), DLC_PROTO_ENDPOINT_MAX);
                goto fail;
            }
            strcpy(s->hello.endpoint[k], e);
        }
        for (int p = 0; p < s->P; p++) s->hello.owner[p] = (uint16_t)s->owner[p];
    }
    if (!cfg->syncer.dp) s->hello.caps |= DLC_CAP_STANDBY; /* it takes a standby */
    if (s->standby) { /* its link's HELLO: a standby's, no learner id */
        if (rt_hello(&s->rhello, cfg->plan, s->cfg.run, -1, s->cfg.syncer.codec_params.block, 0, cfg->run_params) !=
            DLC_OK)
            goto fail;
        s->rhello.caps |= DLC_CAP_STANDBY;
        if (rnet_start(s) != DLC_OK) goto fail;
    }
    s->cfg.net.hello = &s->hello;
    s->cfg.net.layout = &s->layout;
    s->cfg.net.inline_io = 1;
    if (!(s->net = dlc_net_new(&s->cfg.net))) goto fail;
    if (s->standby) {
        char why[DLC_RT_TEXT_MAX];
        snprintf(why, sizeof why, "a standby of the syncer at %.300s: it serves learners once it takes over",
                 s->standby_of);
        if (dlc_net_set_refusing(s->net, why) != DLC_OK) goto fail;
    }
    int port = dlc_net_listen(s->net, cfg->listen);
    if (port < 0) goto fail;
    s->port = port;
    s->st.learners = s->M;
    if (pthread_create(&s->thread, NULL, srt_thread, s) != 0) {
        dlc_error(DLC_ERR_IO, "srt_new: cannot start the syncer's thread");
        goto fail;
    }
    s->started = 1;
    return s;
nomem:
    dlc_error(DLC_ERR_NOMEM, "srt_new: out of memory");
fail:
    dlc_srt_free(s);
    return NULL;
}

void dlc_srt_kill(dlc_srt *s) {
    if (!s) return;
    s->killed = 1;
    dlc_srt_free(s);
}

void dlc_srt_free(dlc_srt *s) {
    if (!s) return;
    if (s->started) {
        atomic_store(&s->stop, 1);
        pthread_mutex_lock(&s->qlock);
        pthread_cond_broadcast(&s->pcond); /* (a paused thread sees the stop at once) */
        pthread_mutex_unlock(&s->qlock);
        pthread_join(s->thread, NULL);
    }
    if (s->sb_peer >= 0 && !s->killed) { /* the run is over here: the standby ends too (it does not take over) */
        dlc_frame f;
        dlc_frame_init(&f, DLC_FRAME_BYE);
        f.msg.learner = 0; /* (a standby has no id: the field is not read) */
        snprintf(f.text, sizeof f.text, "the primary ended: the run is over");
        (void)dlc_net_send(s->net, s->sb_peer, &f, NULL, NULL);
    }
    dlc_net_free(s->net); /* its queues release their references to the shared payloads */
    dlc_net_free(s->rnet);
    rq_clear(s);
    free(s->standby_of);
    free(s->caught);
    dlc_big_free(s->rscratch);
    free(s->rcontribs);
    for (int m = 0; s->learners && m < s->M; m++) owed_clear(s, m);
    for (int p = 0; s->cur && p < s->P; p++) sbuf_unref(NULL, s->cur[p]);
    free(s->cur);
    free(s->rep_at);
    free(s->owner);
    free(s->owns);
    free(s->cur_version);
    free(s->cur_epoch);
    dlc_syncer_free(s->s);
    for (srt_node *n = s->qhead, *next; n; n = next) {
        next = n->next;
        free(n->ev.owned_);
        free(n);
    }
    free(s->learners);
    free(s->numel);
    rt_strings_free(&s->strs);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->qlock);
    pthread_cond_destroy(&s->qcond);
    pthread_cond_destroy(&s->pcond);
    free(s);
}

int dlc_srt_port(const dlc_srt *s) { return s ? s->port : -1; }

int dlc_srt_poll(dlc_srt *s, dlc_srt_event *ev, int timeout_ms) {
    if (!s || !ev) return dlc_error(DLC_ERR_ARG, "srt_poll: NULL argument");
    pthread_mutex_lock(&s->qlock);
    if (!s->qhead && timeout_ms != 0 && s->failed == DLC_OK) {
        if (timeout_ms < 0) {
            while (!s->qhead && s->failed == DLC_OK) pthread_cond_wait(&s->qcond, &s->qlock);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            while (!s->qhead && s->failed == DLC_OK)
                if (pthread_cond_timedwait(&s->qcond, &s->qlock, &ts) != 0) break;
        }
    }
    srt_node *n = s->qhead;
    if (n) {
        s->qhead = n->next;
        if (!s->qhead) s->qtail = NULL;
        s->qlen--;
    }
    dlc_status failed = s->failed;
    pthread_mutex_unlock(&s->qlock);
    if (n) {
        *ev = n->ev;
        free(n);
        return 1;
    }
    if (failed != DLC_OK) return dlc_error(failed, "%s", s->failed_msg);
    return 0;
}

void dlc_srt_event_release(dlc_srt_event *ev) {
    if (!ev) return;
    free(ev->owned_);
    ev->owned_ = NULL;
    ev->merge.contribs = NULL;
}

dlc_status dlc_srt_global(dlc_srt *s, float *arena) {
    if (!s || !arena) return dlc_error(DLC_ERR_ARG, "srt_global: NULL argument");
    pthread_mutex_lock(&s->lock);
    dlc_status st = dlc_syncer_copy_model(s->s, arena);
    pthread_mutex_unlock(&s->lock);
    return st;
}

dlc_status dlc_srt_save(dlc_srt *s, const char *path, int n, const char *const *keys, const char *const *values) {
    if (!s || !path || n < 0 || (n > 0 && (!keys || !values))) return dlc_error(DLC_ERR_ARG, "srt_save: NULL argument");
    for (int i = 0; i < n; i++)
        if (keys[i] && strcmp(keys[i], RT_BYE_KEY) == 0)
            return dlc_error(DLC_ERR_ARG, "srt_save: metadata key \"%s\" is the driver's own", RT_BYE_KEY);
    const char **k = malloc((size_t)(n + 1) * sizeof *k), **v = malloc((size_t)(n + 1) * sizeof *v);
    char *byes = malloc((size_t)s->M * 8 + 1);
    dlc_status st = DLC_OK;
    if (!k || !v || !byes) {
        st = dlc_error(DLC_ERR_NOMEM, "srt_save: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) k[i] = keys[i], v[i] = values[i];
    pthread_mutex_lock(&s->lock);
    size_t len = 0;
    byes[0] = '\0';
    for (int m = 0; m < s->M; m++)
        if (s->learners[m].bye) len += (size_t)snprintf(byes + len, 9, "%s%d", len ? "," : "", m);
    k[n] = RT_BYE_KEY, v[n] = byes;
    st = dlc_syncer_save(s->s, path, srt_now(s), n + 1, k, v);
    pthread_mutex_unlock(&s->lock);
done:
    free(k);
    free(v);
    free(byes);
    return st;
}

int64_t dlc_srt_epoch(dlc_srt *s) {
    if (!s) return 0;
    pthread_mutex_lock(&s->lock);
    int64_t e = dlc_syncer_epoch(s->s);
    pthread_mutex_unlock(&s->lock);
    return e;
}

dlc_status dlc_srt_set_quorum(dlc_srt *s, int quorum) {
    if (!s) return dlc_error(DLC_ERR_ARG, "srt_set_quorum: NULL syncer");
    pthread_mutex_lock(&s->lock);
    dlc_status st = dlc_syncer_set_quorum(s->s, quorum, srt_now(s));
    if (st == DLC_OK) st = drain(s);
    pthread_mutex_unlock(&s->lock);
    return st;
}

dlc_status dlc_srt_flush(dlc_srt *s) {
    if (!s) return dlc_error(DLC_ERR_ARG, "srt_flush: NULL syncer");
    pthread_mutex_lock(&s->lock);
    dlc_status st = dlc_syncer_flush(s->s, srt_now(s));
    if (st == DLC_OK) st = drain(s);
    pthread_mutex_unlock(&s->lock);
    return st;
}

/* The fields of dlc_srt_learner_info that are the driver's record of the learner as it
 * stands, under the same names in slearner. */
#define INFO_FIELDS(X)                                                                             \
    X(joined) X(bye) X(steps) X(tokens) X(step_time) X(best_step_time) X(heard) X(merged) X(joins) \
    X(bytes_in) X(bytes_out) X(rate) X(latency)
#define COPY_FIELD(f) out->f = L->f;

dlc_status dlc_srt_learner(dlc_srt *s, int m, dlc_srt_learner_info *out) {
    if (!s || !out) return dlc_error(DLC_ERR_ARG, "srt_learner: NULL argument");
    if (m < 0 || m >= s->M) return dlc_error(DLC_ERR_RANGE, "srt_learner: learner %d: expected 1..%d", m + 1, s->M);
    pthread_mutex_lock(&s->lock);
    const slearner *L = &s->learners[m];
    memset(out, 0, sizeof *out);
    INFO_FIELDS(COPY_FIELD)
    out->connected = L->peer >= 0;
    out->absent = L->peer >= 0 ? 0 : srt_now(s) - L->left;
    out->merged_steps = dlc_syncer_merged_steps(s->s, m);
    out->tokens_per_step = L->sent_steps > 0 ? L->sent_tokens / L->sent_steps : 0;
    out->cut = L->cut_until > 0 ? L->cut_until - srt_now(s) : 0;
    if (L->cut_until > 0 && out->cut <= 0) out->cut = 1e-9; /* ends at the driver's next turn */
    for (const owed *o = L->ob_head; o; o = o->next) out->held++;
    out->held_bytes = (int64_t)L->ob_bytes;
    dlc_net_counters c;
    if (L->peer >= 0 && dlc_net_get_counters(s->net, L->peer, &c) == DLC_OK) {
        out->queued_bytes = (int64_t)c.queued;
        if (L->banked != L->peer)
            for (int t = 0; t < DLC_FRAME_TYPE_COUNT; t++) out->bytes_in += c.bytes_in[t], out->bytes_out += c.bytes_out[t];
    }
    pthread_mutex_unlock(&s->lock);
    return DLC_OK;
}

#undef COPY_FIELD
#undef INFO_FIELDS

dlc_status dlc_srt_get_stats(dlc_srt *s, dlc_srt_stats *out) {
    if (!s || !out) return dlc_error(DLC_ERR_ARG, "srt_get_stats: NULL argument");
    pthread_mutex_lock(&s->lock);
    *out = s->st;
    out->now = srt_now(s);
    out->live = dlc_syncer_live(s->s);
    dlc_net_counters c;
    if (dlc_net_get_counters(s->net, -1, &c) == DLC_OK) {
        out->bytes_in = out->bytes_out = 0;
        for (int t = 0; t < DLC_FRAME_TYPE_COUNT; t++) {
            out->bytes_in_type[t] = c.bytes_in[t];
            out->bytes_out_type[t] = c.bytes_out[t];
            out->bytes_in += c.bytes_in[t];
            out->bytes_out += c.bytes_out[t];
        }
    }
    pthread_mutex_unlock(&s->lock);
    return DLC_OK;
}

dlc_status dlc_srt_shape(dlc_srt *s, int m, double rate, double latency) {
    if (!s) return dlc_error(DLC_ERR_ARG, "srt_shape: NULL syncer");
    if (m < 0 || m >= s->M) return dlc_error(DLC_ERR_RANGE, "srt_shape: learner %d: expected 1..%d", m + 1, s->M);
    if (!isfinite(rate) || rate < 0 || (rate > 0 && rate < 1000))
        return dlc_error(DLC_ERR_ARG, "srt_shape: learner %d: bandwidth = %g bytes/s: expected 0 (no cap) or >= 1000", m + 1,
                         rate);
    if (!isfinite(latency) || latency < 0 || latency > 60)
        return dlc_error(DLC_ERR_ARG, "srt_shape: learner %d: latency = %g s: expected 0..60", m + 1, latency);
    pthread_mutex_lock(&s->lock);
    slearner *L = &s->learners[m];
    L->rate = rate, L->latency = latency;
    if (L->peer >= 0) link_shape(s, L->peer, rate, latency);
    if (L->held >= 0) link_shape(s, L->held, rate, latency);
    pthread_mutex_unlock(&s->lock);
    return DLC_OK;
}

dlc_status dlc_srt_cut(dlc_srt *s, int m, double seconds) {
    if (!s) return dlc_error(DLC_ERR_ARG, "srt_cut: NULL syncer");
    if (m < 0 || m >= s->M) return dlc_error(DLC_ERR_RANGE, "srt_cut: learner %d: expected 1..%d", m + 1, s->M);
    if (isnan(seconds) || seconds < 0)
        return dlc_error(DLC_ERR_ARG, "srt_cut: learner %d: seconds = %g: expected > 0 (INFINITY: for good), or 0 to "
                         "end the cut", m + 1, seconds);
    pthread_mutex_lock(&s->lock);
    slearner *L = &s->learners[m];
    dlc_status st = DLC_OK;
    double now = srt_now(s);
    if (seconds == 0) {
        if (L->cut_until > 0) st = cut_end(s, m, now);
    } else {
        if (L->cut_until == 0 && L->peer >= 0) dlc_net_cut(s->net, L->peer, 1);
        L->cut_until = now + seconds;
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}

dlc_status dlc_srt_clock_moved(dlc_srt *s) {
    if (!s) return dlc_error(DLC_ERR_ARG, "srt_clock_moved: NULL syncer");
    dlc_status st = dlc_net_clock_moved(s->net); /* inline: the thread's next poll acts on it */
    if (st != DLC_OK) return st;
    uint64_t req = atomic_fetch_add(&s->clock_req, 1) + 1;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += SRT_CLOCK_WAIT_S;
    pthread_mutex_lock(&s->qlock);
    while (s->clock_done < req && s->failed == DLC_OK && st == DLC_OK)
        if (pthread_cond_timedwait(&s->qcond, &s->qlock, &until) == ETIMEDOUT)
            st = dlc_error(DLC_ERR_STATE, "srt_clock_moved: the syncer's thread did not act on the clock within %d s",
                           SRT_CLOCK_WAIT_S);
    if (st == DLC_OK && s->failed != DLC_OK) st = dlc_error(s->failed, "%s", s->failed_msg);
    pthread_mutex_unlock(&s->qlock);
    return st;
}

dlc_status dlc_srt_pause(dlc_srt *s, double seconds) {
    if (!s) return dlc_error(DLC_ERR_ARG, "srt_pause: NULL syncer");
    if (!(seconds >= 0))
        return dlc_error(DLC_ERR_ARG, "srt_pause: seconds = %g: expected > 0 (INFINITY: for good), or 0 to go on now",
                         seconds);
    pthread_mutex_lock(&s->qlock);
    s->pause_until = seconds > 0 ? srt_now(s) + seconds : 0;
    pthread_cond_broadcast(&s->pcond);
    pthread_mutex_unlock(&s->qlock);
    return DLC_OK;
}

double dlc_srt_paused(dlc_srt *s) {
    if (!s) return 0;
    pthread_mutex_lock(&s->qlock);
    double left = s->pause_until - srt_now(s);
    pthread_mutex_unlock(&s->qlock);
    return left > 0 ? left : 0;
}
