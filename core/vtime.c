/* vtime.c - the virtual-time driver (vtime.h, docs/sim.md).
 *
 * One binary heap of timed events (deliveries, step ends, faults, step starts,
 * evaluations) ordered by (time, class, sequence number); the state machines' timers
 * are asked for their deadline each turn instead of being queued, since they move.
 * What the host must see goes to a small FIFO of host events that dlc_vtime_next
 * drains first.  After every call into a state machine its actions are polled to the
 * last (it refuses the next event while any is queued); messages are copied when sent
 * (a payload is valid only until the machine's next event) and freed when delivered or
 * lost. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/account.h"
#include "diloco/vtime.h"

static const char *const event_names[] = {"step", "optim", "merge", "reject", "fault", "lost", "joined", "eval",
                                          "done"};
_Static_assert(sizeof event_names / sizeof event_names[0] == DLC_VT_EVENT_COUNT, "one name per vtime event");

const char *dlc_vtime_event_name(dlc_vtime_event_type t) {
    return (unsigned)t < DLC_VT_EVENT_COUNT ? event_names[t] : NULL;
}

/* Classes: the order of events at one instant. */
enum { EV_DELIVER, EV_STEP_END, EV_CHAOS, EV_TAKEOVER, EV_TIMER, EV_STEP_START, EV_EVAL };

typedef struct qmsg {
    dlc_msg m;          /* payload points at bytes */
    uint8_t *bytes;
    int to_syncer;
    int shard;          /* to_syncer: the syncer shard it goes to (0: the only one) */
    uint64_t gen;       /* the learner's incarnation when sent: a message from or to an
                         * earlier one is lost with it */
    struct qmsg *next;  /* held for a paused shard (dlc_vtime.held), in arrival order */
} qmsg;

typedef struct tev {
    double t;
    int cls;
    uint64_t seq;
    int learner;
    uint64_t gen;       /* STEP_END, STEP_START: the learner's incarnation */
    int index;          /* CHAOS: timeline index; EVAL: k */
    qmsg *msg;          /* DELIVER (and a delivery deferred to a step end) */
    int deferred;       /* STEP_END class: a delivery held for the end of a step */
} tev;

typedef struct hostev {
    dlc_vtime_event e;
    int mc_off;                 /* MERGE: its contributors at mc + mc_off */
} hostev;

typedef struct vlearner {
    dlc_learner *l;
    dlc_vtime_island is;
    int alive, busy, start_queued, awaiting; /* awaiting: 1 STEP, 2 OPTIM */
    uint64_t gen;
    double step_start, step_dt;
    int64_t step_tokens;
    double up_free, down_free;  /* when each link is free again */
    int cut;
    double cut_until;           /* while cut: messages wait for this (a connection that
                                 * stalls and retransmits, as TCP does) */
    uint8_t *due;               /* [P]: fragments the host's schedule sends after this step */
    double last_end, up_since;  /* its last step's end; when it last came up (0: the start) */
    int finished;               /* steps > 0: its schedule reached them (this life) */
    int paused;                 /* a PAUSE under way: it neither computes nor hears nor says */
    double pause_until;
    double step_end;            /* when its step under way ends: start + its time + the
                                 * pauses it sat through (INFINITY: paused for good) */
    double pause_left;          /* paused mid-step: the compute its step had left */
    dlc_vtime_learner_stats st;
} vlearner;

struct dlc_vtime {
    dlc_vtime_params p;
    const dlc_plan *plan;
    dlc_params *const *models;
    int M, P;
    int S;                      /* syncer shards (1: one syncer): shard k owns the fragments
                                 * p with owner[p] = k (dlc_plan_deal) */
    dlc_syncer *s[DLC_LEARNER_SHARDS_MAX];
    int *owner;                 /* [P], S > 1 */
    int down[DLC_LEARNER_SHARDS_MAX]; /* SYNCER faults under way that hold shard k down (of it
                                 * or of the whole syncer), and a takeover under way */
    int standby[DLC_LEARNER_SHARDS_MAX]; /* standbys: shard k has one now */
    int replaced[DLC_LEARNER_SHARDS_MAX]; /* a primary fault under way that its standby took
                                 * over: its end brings the old primary back as the standby */
    /* A PAUSE of shard k under way (a fault of the syncer, learner -1): it reads nothing
     * (what reaches it is held, in order), sends nothing and its timers wait, until it goes
     * on with its state; with a standby, one that outlasts the lease ends in a takeover. */
    int paused[DLC_LEARNER_SHARDS_MAX];
    uint64_t pause_gen[DLC_LEARNER_SHARDS_MAX]; /* pauses begun: a takeover names its own */
    int pause_took[DLC_LEARNER_SHARDS_MAX];     /* its standby took over during it */
    qmsg *held[DLC_LEARNER_SHARDS_MAX], *held_tail[DLC_LEARNER_SHARDS_MAX];
    vlearner *L;
    dlc_vtime_island *islands;
    tev *heap;
    int hlen, hcap;
    uint64_t seq;
    struct hostev *hq;          /* host events FIFO */
    int hq_head, hq_len, hq_cap;
    dlc_merge_contrib *mc;      /* copies of MERGE contributors, one block per queued merge */
    int mc_len, mc_cap;
    dlc_chaos_cursor chaos;     /* the schedule as it comes due (chaos.h): its next event
                                 * waits in the heap (EV_CHAOS), one at a time */
    double now;
    int flushed, done, mc_reset;
    int end_check;              /* steps > 0: a learner stopped or died: has the run ended? */
    int ended;                  /* steps > 0: every live learner stopped; p.end moved here */
    int direct;                 /* construction: SENDs to learners are handed over at once */
    int awaiting;               /* learner index + 1 whose STEP / OPTIM is unanswered */
    double window;              /* uptime window (s) */
    dlc_account *acct;          /* the account (account.h): islands' states, merges */
    dlc_vtime_stats st;
    dlc_vtime_learner_stats *lst; /* [M], what get_stats returns */
};

/* ---- heap ---- */

static int before(const tev *a, const tev *b) {
    if (a->t != b->t) return a->t < b->t;
    if (a->cls != b->cls) return a->cls < b->cls;
    return a->seq < b->seq;
}

static dlc_status heap_push(dlc_vtime *vt, tev e) {
    if (vt->hlen == vt->hcap) {
        int cap = vt->hcap ? vt->hcap * 2 : 256;
        tev *h = realloc(vt->heap, (size_t)cap * sizeof *h);
        if (!h) return dlc_error(DLC_ERR_NOMEM, "vtime: out of memory for %d events", cap);
        vt->heap = h, vt->hcap = cap;
    }
    e.seq = vt->seq++;
    int i = vt->hlen++;
    while (i > 0) {
        int up = (i - 1) / 2;
        if (!before(&e, &vt->heap[up])) break;
        vt->heap[i] = vt->heap[up];
        i = up;
    }
    vt->heap[i] = e;
    return DLC_OK;
}

static tev heap_pop(dlc_vtime *vt) {
    tev top = vt->heap[0], last = vt->heap[--vt->hlen];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= vt->hlen) break;
        if (c + 1 < vt->hlen && before(&vt->heap[c + 1], &vt->heap[c])) c++;
        if (!before(&vt->heap[c], &last)) break;
        vt->heap[i] = vt->heap[c];
        i = c;
    }
    if (vt->hlen > 0) vt->heap[i] = last;
    return top;
}

/* ---- host events ---- */

static dlc_status host_push_at(dlc_vtime *vt, const dlc_vtime_event *e, int mc_off) {
    if (vt->hq_len == vt->hq_cap) {
        int cap = vt->hq_cap ? vt->hq_cap * 2 : 64;
        hostev *q = malloc((size_t)cap * sizeof *q);
        if (!q) return dlc_error(DLC_ERR_NOMEM, "vtime: out of memory for host events");
        for (int i = 0; i < vt->hq_len; i++) q[i] = vt->hq[(vt->hq_head + i) % vt->hq_cap];
        free(vt->hq);
        vt->hq = q, vt->hq_cap = cap, vt->hq_head = 0;
    }
    hostev *h = &vt->hq[(vt->hq_head + vt->hq_len) % vt->hq_cap];
    h->e = *e;
    h->mc_off = mc_off;
    vt->hq_len++;
    return DLC_OK;
}

static dlc_status host_push(dlc_vtime *vt, const dlc_vtime_event *e) { return host_push_at(vt, e, -1); }

/* ---- links ---- */

static void free_msg(qmsg *q) {
    if (!q) return;
    free(q->bytes);
    free(q);
}

/* Copies m and schedules its delivery over learner `lm`'s uplink (to_syncer) or
 * downlink. */
static dlc_status transmit(dlc_vtime *vt, int lm, const dlc_msg *m, int to_syncer, int shard) {
    vlearner *v = &vt->L[lm];
    int64_t bytes = dlc_msg_wire_bytes(m);
    if (to_syncer) {
        v->st.bytes_up += bytes;
        vt->st.bytes_up += bytes;
        vt->st.bytes_up_type[m->type] += bytes;
    } else {
        v->st.bytes_down += bytes;
        vt->st.bytes_down += bytes;
        vt->st.bytes_down_type[m->type] += bytes;
    }
    if ((to_syncer && vt->down[shard]) || (!to_syncer && !v->alive)) {
        vt->st.dropped++;
        return DLC_OK;
    }
    double *freeat = to_syncer ? &v->up_free : &v->down_free;
    double depart = *freeat > vt->now ? *freeat : vt->now;
    if (v->cut && depart < v->cut_until) {
        if (isinf(v->cut_until)) { /* a cut without end: the link never delivers it */
            vt->st.dropped++;
            return DLC_OK;
        }
        depart = v->cut_until;
    }
    double busy = isinf(v->is.bandwidth) ? 0 : (double)bytes / v->is.bandwidth;
    *freeat = depart + busy;
    qmsg *q = calloc(1, sizeof *q);
    if (!q) return dlc_error(DLC_ERR_NOMEM, "vtime: out of memory for a message");
    q->m = *m;
    q->to_syncer = to_syncer;
    q->shard = shard;
    q->gen = v->gen;
    if (m->len) {
        if (!(q->bytes = malloc(m->len))) {
            free(q);
            return dlc_error(DLC_ERR_NOMEM, "vtime: out of memory for a %zu-byte message", m->len);
        }
        memcpy(q->bytes, m->payload, m->len);
    }
    q->m.payload = q->bytes;
    tev e = {.t = depart + busy + v->is.latency, .cls = EV_DELIVER, .learner = lm, .msg = q};
    dlc_status st = heap_push(vt, e);
    if (st != DLC_OK) free_msg(q);
    return st;
}

/* ---- reacting to the state machines' actions ---- */

static dlc_status maybe_start(dlc_vtime *vt, int m);
static dlc_status learner_actions(dlc_vtime *vt, int m);

/* Learner m is in `state` from now on, in the account. */
static dlc_status island_enter(dlc_vtime *vt, int m, dlc_island_state state) {
    return dlc_account_enter(vt->acct, m, state, vt->now);
}

/* Shard sh's actions (0 with one syncer). */
static dlc_status syncer_actions(dlc_vtime *vt, int sh) {
    dlc_syncer_action a;
    dlc_status st = DLC_OK;
    while (dlc_syncer_poll(vt->s[sh], &a) && st == DLC_OK) {
        dlc_vtime_event e = {.time = vt->now, .learner = a.learner, .fragment = a.fragment,
                             .shard = vt->S > 1 ? sh + 1 : 0};
        switch (a.type) {
        case DLC_SACT_SEND:
            if (vt->direct) {
                st = dlc_learner_receive(vt->L[a.msg.learner].l, &a.msg, vt->now);
                if (st == DLC_OK) st = learner_actions(vt, a.msg.learner);
            } else if (!vt->down[sh]) {
                st = transmit(vt, a.msg.learner, &a.msg, 0, sh);
            }
            break;
        case DLC_SACT_MERGED: {
            e.type = DLC_VT_MERGE;
            e.merge = a.merge;
            int k = a.merge.count;
            if (vt->mc_len + k > vt->mc_cap) {
                int cap = vt->mc_len + k > 2 * vt->mc_cap ? vt->mc_len + k : 2 * vt->mc_cap;
                dlc_merge_contrib *mc = realloc(vt->mc, (size_t)cap * sizeof *mc);
                if (!mc) {
                    st = dlc_error(DLC_ERR_NOMEM, "vtime: out of memory for merge records");
                    break;
                }
                vt->mc = mc, vt->mc_cap = cap;
            }
            memcpy(vt->mc + vt->mc_len, a.merge.contribs, (size_t)k * sizeof *vt->mc);
            int off = vt->mc_len;
            vt->mc_len += k;
            e.merge.contribs = NULL;
            for (int i = 0; i < k; i++) vt->L[a.merge.contribs[i].learner].st.merged++;
            vt->st.merges++;
            vt->st.useful_tokens += a.merge.useful_tokens;
            st = dlc_account_merge(vt->acct, vt->now, a.merge.useful_tokens);
            if (st == DLC_OK) st = host_push_at(vt, &e, off);
            break;
        }
        case DLC_SACT_REJECTED:
            e.type = DLC_VT_REJECT;
            e.reason = a.reason;
            vt->st.rejects++;
            st = host_push(vt, &e);
            break;
        case DLC_SACT_JOINED:
            e.type = DLC_VT_JOINED;
            st = host_push(vt, &e);
            break;
        case DLC_SACT_LOST:
            e.type = DLC_VT_LOST;
            st = host_push(vt, &e);
            break;
        default: break;
        }
    }
    return st;
}

static dlc_status learner_actions(dlc_vtime *vt, int m) {
    dlc_learner_action a;
    dlc_status st = DLC_OK;
    vlearner *v = &vt->L[m];
    while (dlc_learner_poll(v->l, &a) && st == DLC_OK) {
        if (a.type == DLC_LACT_SEND && vt->S > 1 && a.msg.type != DLC_MSG_CONTRIBUTION) {
            /* to every shard, stamped with the epoch of each (learner.h, dlc_learner_set_shards) */
            for (int k = 0; k < vt->S && st == DLC_OK; k++) {
                dlc_msg mk = a.msg;
                mk.epoch = dlc_learner_shard_epoch(v->l, k);
                st = transmit(vt, m, &mk, 1, k);
            }
        } else if (a.type == DLC_LACT_SEND) {
            st = transmit(vt, m, &a.msg, 1, vt->S > 1 ? vt->owner[a.msg.fragment] : 0);
        } else if (a.type == DLC_LACT_GRADIENT_READY) {
            dlc_vtime_event e = {.type = DLC_VT_OPTIM, .time = vt->now, .learner = m,
                                 .step = dlc_learner_steps(v->l) + 1, .schedule = dlc_learner_schedule_step(v->l)};
            v->awaiting = 2;
            st = host_push(vt, &e);
        }
    }
    if (st == DLC_OK) st = maybe_start(vt, m);
    return st;
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Step k's jitter factor of learner m in its life `gen`: exp(s·z − s²/2), z a standard
 * normal (Box-Muller over two hashed uniforms), s² = ln(1 + jitter²): mean 1, coefficient
 * of variation jitter.  A pure function of its arguments: the start check and the start
 * itself draw the same. */
static double jitter_factor(uint64_t seed, int m, uint64_t gen, int64_t k, double jitter) {
    if (!(jitter > 0)) return 1.0;
    uint64_t h = mix64(seed ^ mix64(0x6a09e667f3bcc909ULL + (uint64_t)m) ^ mix64(gen * 0x9e3779b97f4a7c15ULL + 1) ^
                       mix64((uint64_t)k + 0x3c6ef372fe94f82bULL));
    double u1 = ((double)(mix64(h) >> 11) + 0.5) * 0x1.0p-53, u2 = (double)(mix64(h + 1) >> 11) * 0x1.0p-53;
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    double s2 = log1p(jitter * jitter);
    return exp(sqrt(s2) * z - 0.5 * s2);
}

/* Shared cores (vtime.h, cores): how many learners compute now, learner m included:
 * alive and training, not waiting at a round, with a step under way or steps left. */
static int computing(const dlc_vtime *vt, int m) {
    int n = 1;
    for (int k = 0; k < vt->M; k++) {
        const vlearner *o = &vt->L[k];
        if (k == m || !o->alive || o->paused) continue;
        if (o->busy || o->start_queued || o->awaiting ||
            (dlc_learner_state_of(o->l) == DLC_LEARNER_TRAINING && !o->finished &&
             o->last_end + vt->p.step_time <= vt->p.end))
            n++;
    }
    return n;
}

static double step_dt(const dlc_vtime *vt, int m, double t) {
    const vlearner *v = &vt->L[m];
    double f = vt->p.chaos ? dlc_chaos_slow_factor(vt->p.chaos, m, t) : 1.0;
    if (!(f > 0) || !isfinite(f)) f = 1.0;
    f *= jitter_factor(vt->p.seed, m, (uint64_t)v->gen, dlc_learner_steps(v->l), v->is.jitter);
    if (vt->p.cores > 0) {
        int n = computing(vt, m);
        if (n > vt->p.cores) f *= (double)n / vt->p.cores;
    }
    return vt->p.step_time * v->is.scale / v->is.speed * f;
}

/* steps > 0: learner m, between steps, has reached the run's last step: it stops (and
 * flushes with final_flush, as a real learner does as its loop ends). */
static dlc_status finish_learner(dlc_vtime *vt, int m) {
    vlearner *v = &vt->L[m];
    v->finished = 1;
    vt->end_check = 1;
    if (!vt->p.final_flush || vt->p.learner.dp) return DLC_OK;
    dlc_status st = dlc_learner_flush(v->l, vt->now, NULL);
    return st == DLC_OK ? learner_actions(vt, m) : st;
}

/* Queues learner m's next step start if it may step now. */
static dlc_status maybe_start(dlc_vtime *vt, int m) {
    vlearner *v = &vt->L[m];
    if (!v->alive || v->busy || v->start_queued || v->awaiting || v->finished || v->paused) return DLC_OK;
    if (dlc_learner_state_of(v->l) != DLC_LEARNER_TRAINING) return DLC_OK;
    if (vt->p.steps > 0 && dlc_learner_schedule_step(v->l) >= vt->p.steps) return finish_learner(vt, m);
    if (vt->now + step_dt(vt, m, vt->now) > vt->p.end * (1 + 1e-12)) return DLC_OK;
    v->start_queued = 1;
    tev e = {.t = vt->now, .cls = EV_STEP_START, .learner = m, .gen = v->gen};
    return heap_push(vt, e);
}

/* ---- faults ---- */

/* Queues the schedule's next event, if it falls within the run. */
static dlc_status chaos_queue_next(dlc_vtime *vt) {
    double t = dlc_chaos_cursor_peek(&vt->chaos);
    return t <= vt->p.end ? heap_push(vt, (tev){.t = t, .cls = EV_CHAOS}) : DLC_OK;
}

/* Shard k serves again (its fault ended, or its standby took over): as it was, its open
 * rounds dropped (dlc_syncer_restart).  What the live learners need the syncer decides from
 * their first messages (syncer.h, "Restarts"); one that restarted while it was down only
 * waits for its model, says nothing, and joins as it connects. */
static dlc_status shard_back(dlc_vtime *vt, int k) {
    dlc_status st = dlc_syncer_restart(vt->s[k], vt->now);
    if (st == DLC_OK) st = syncer_actions(vt, k);
    for (int m = 0; m < vt->M && st == DLC_OK; m++) {
        if (vt->L[m].alive && dlc_learner_state_of(vt->L[m].l) == DLC_LEARNER_JOINING) {
            st = dlc_syncer_join(vt->s[k], m, vt->now);
            if (st == DLC_OK) st = syncer_actions(vt, k);
        }
    }
    return st;
}

/* Shard k's held messages: taken in order as it goes on (drop: lost with the paused
 * process, whose standby took over). */
static dlc_status take_held(dlc_vtime *vt, int k, int drop) {
    dlc_status st = DLC_OK;
    while (vt->held[k]) {
        qmsg *q = vt->held[k];
        vt->held[k] = q->next;
        if (!vt->held[k]) vt->held_tail[k] = NULL;
        const vlearner *v = &vt->L[q->m.learner];
        if (st != DLC_OK || drop || vt->down[k] || !v->alive || q->gen != v->gen) {
            vt->st.dropped += st == DLC_OK;
        } else {
            st = dlc_syncer_receive(vt->s[k], &q->m, vt->now);
            if (st == DLC_ERR_FORMAT) st = DLC_OK; /* (the syncer's REJECT says so) */
            if (st == DLC_OK) st = syncer_actions(vt, k);
        }
        free_msg(q);
    }
    return st;
}

/* The lease after shard k's primary stopped (pause `gen`) ran out: if that pause still
 * lasts, its standby serves, holding every merge (as after a kill); what the stopped
 * primary had not read is lost with it, and when the pause ends the old primary is the
 * standby. */
static dlc_status pause_takeover(dlc_vtime *vt, int k, uint64_t gen) {
    if (!vt->paused[k] || vt->pause_gen[k] != gen || !vt->standby[k]) return DLC_OK;
    vt->st.takeovers++;
    vt->paused[k] = 0, vt->pause_took[k] = 1, vt->standby[k] = 0;
    dlc_status st = take_held(vt, k, 1);
    return st == DLC_OK && !vt->down[k] ? shard_back(vt, k) : st;
}

/* A pause of the syncer (learner -1) begins or ends for shard k (docs/chaos.md). */
static dlc_status shard_pause(dlc_vtime *vt, int k, const dlc_fault *f, int begin) {
    if (f->role == DLC_ROLE_STANDBY) return DLC_OK; /* learners see nothing (vtime.h) */
    if (begin) {
        if (vt->paused[k]) return DLC_OK; /* (the whole syncer's and one of the shard's may overlap) */
        vt->paused[k] = 1;
        vt->pause_gen[k]++;
        if (f->role == DLC_ROLE_PRIMARY && vt->standby[k])
            return heap_push(vt, (tev){.t = vt->now + vt->p.lease, .cls = EV_TAKEOVER, .index = k, .learner = -2,
                                       .gen = vt->pause_gen[k]});
        return DLC_OK;
    }
    if (vt->pause_took[k]) { /* the old primary is back, as the standby */
        vt->pause_took[k] = 0, vt->standby[k] = 1;
        return DLC_OK;
    }
    if (!vt->paused[k]) return DLC_OK;
    vt->paused[k] = 0;
    return take_held(vt, k, 0); /* then its timers, late */
}

static dlc_status chaos_event(dlc_vtime *vt) {
    dlc_chaos_event event;
    const dlc_chaos_event *ce = &event;
    const dlc_fault *f;
    int got = dlc_chaos_cursor_next(&vt->chaos, vt->now, &event, &f);
    if (got < 0) return got;
    if (got == 0) return dlc_error(DLC_ERR_INTERNAL, "vtime: no chaos event due at %g", vt->now);
    dlc_vtime_event e = {.type = DLC_VT_FAULT, .time = vt->now, .learner = f->learner, .fault = f->kind,
                         .begin = ce->begin, .duration = f->duration, .factor = f->factor};
    dlc_status st = DLC_OK;
    vt->st.faults += ce->begin;
    if (f->kind == DLC_FAULT_KILL) {
        vlearner *v = &vt->L[f->learner];
        if (ce->begin && v->alive) {
            v->alive = 0;
            v->gen++;
            if (v->busy) { /* the step under way is lost: count only what ran before the kill */
                v->st.busy_s -= v->paused ? v->pause_left : v->step_end - vt->now;
                v->busy = 0;
            }
            v->start_queued = 0;
            v->awaiting = 0;
            if (vt->awaiting == f->learner + 1) vt->awaiting = 0;
            v->paused = 0; /* (paused until now, then dead) */
            v->finished = 0;
            vt->end_check = 1;
            dlc_learner_stop(v->l);
            st = island_enter(vt, f->learner, DLC_ISLAND_DOWN);
            for (int k = 0; k < vt->S && st == DLC_OK; k++) {
                st = dlc_syncer_lost(vt->s[k], f->learner, vt->now);
                if (st == DLC_OK) st = syncer_actions(vt, k);
            }
        } else if (!ce->begin && !v->alive) {
            v->alive = 1;
            v->up_since = vt->now;
            st = island_enter(vt, f->learner, DLC_ISLAND_UP);
            if (st == DLC_OK) st = dlc_learner_restart(v->l, vt->now);
            for (int k = 0; k < vt->S && st == DLC_OK; k++) /* the shards up now; the others at their restart */
                if (!vt->down[k]) {
                    st = dlc_syncer_join(vt->s[k], f->learner, vt->now);
                    if (st == DLC_OK) st = syncer_actions(vt, k);
                }
        }
    } else if (f->kind == DLC_FAULT_PAUSE && f->learner < 0) {
        /* the syncer (shard 0: every shard) or one shard stopped where it is */
        e.shard = f->shard, e.role = f->role;
        for (int k = 0; k < vt->S && st == DLC_OK; k++)
            if (!f->shard || k == f->shard - 1) st = shard_pause(vt, k, f, ce->begin);
    } else if (f->kind == DLC_FAULT_PAUSE) {
        /* stopped where it is: a step under way ends that much later, nothing reaches it
         * or leaves it meanwhile (its timers wait), then it goes on with its state */
        vlearner *v = &vt->L[f->learner];
        if (ce->begin && v->alive && !v->paused) {
            v->paused = 1;
            v->pause_until = f->at + f->duration;
            if (v->busy) v->pause_left = v->step_end - vt->now, v->step_end += f->duration;
            st = island_enter(vt, f->learner, DLC_ISLAND_PAUSED);
        } else if (!ce->begin && v->alive && v->paused) {
            v->paused = 0;
            st = island_enter(vt, f->learner, DLC_ISLAND_UP);
            if (st == DLC_OK) st = maybe_start(vt, f->learner);
        }
    } else if (f->kind == DLC_FAULT_CUT) {
        vt->L[f->learner].cut = ce->begin;
        vt->L[f->learner].cut_until = ce->begin ? f->at + f->duration : vt->now;
    } else if (f->kind == DLC_FAULT_LINK) {
        /* the island's own link with the LINK faults under way now on top: at its end
         * the fault itself is no longer among them */
        dlc_vtime_island *is = &vt->L[f->learner].is;
        is->bandwidth = vt->islands[f->learner].bandwidth, is->latency = vt->islands[f->learner].latency;
        st = dlc_chaos_link_at(vt->p.chaos, f->learner, vt->now, &is->bandwidth, &is->latency);
        e.bandwidth = is->bandwidth, e.latency = is->latency;
    } else if (f->kind == DLC_FAULT_SYNCER) {
        /* the whole syncer (shard 0: every shard) or one shard (1-based); with standbys,
         * which of its processes (vtime.h, standbys) */
        e.shard = f->shard, e.role = f->role;
        for (int k = 0; k < vt->S && st == DLC_OK; k++) {
            if (f->shard && k != f->shard - 1) continue;
            if (f->role == DLC_ROLE_STANDBY) { /* learners see nothing */
                vt->standby[k] = !ce->begin;
                continue;
            }
            if (f->role == DLC_ROLE_PRIMARY && ce->begin && vt->standby[k]) {
                /* its standby takes over after the lease, holding every merge; the old
                 * primary is back as the standby when the fault ends */
                vt->standby[k] = 0, vt->replaced[k] = 1;
                vt->down[k]++;
                st = heap_push(vt, (tev){.t = vt->now + vt->p.lease, .cls = EV_TAKEOVER, .index = k});
                continue;
            }
            if (f->role == DLC_ROLE_PRIMARY && !ce->begin && vt->replaced[k]) {
                vt->replaced[k] = 0, vt->standby[k] = 1;
                continue;
            }
            if (f->role == DLC_ROLE_BOTH) vt->standby[k] = !ce->begin;
            vt->down[k] += ce->begin ? 1 : -1; /* (a fault of the whole and one of the shard may overlap) */
            if (vt->down[k] == 0 && !ce->begin) st = shard_back(vt, k);
        }
    }
    if (st == DLC_OK) st = host_push(vt, &e);
    return st;
}

/* ---- construction ---- */

static dlc_status check_params(const dlc_vtime_params *p) {
    if (!p) return dlc_error(DLC_ERR_ARG, "vtime: params is NULL");
    if (p->learners < 1 || p->learners > DLC_SYNCER_LEARNERS_MAX)
        return dlc_error(DLC_ERR_ARG, "vtime: learners = %d: expected 1..%d", p->learners, DLC_SYNCER_LEARNERS_MAX);
    if (!(p->step_time > 0) || !isfinite(p->step_time))
        return dlc_error(DLC_ERR_ARG, "vtime: step_time = %g: expected seconds > 0", p->step_time);
    if (!(p->end > 0) || !isfinite(p->end)) return dlc_error(DLC_ERR_ARG, "vtime: end = %g: expected seconds > 0", p->end);
    if (!(p->eval_every >= 0) || !isfinite(p->eval_every))
        return dlc_error(DLC_ERR_ARG, "vtime: eval_every = %g: expected seconds >= 0", p->eval_every);
    if (p->final_flush != 0 && p->final_flush != 1)
        return dlc_error(DLC_ERR_ARG, "vtime: final_flush = %d: expected 0 or 1", p->final_flush);
    if (p->steps < 0)
        return dlc_error(DLC_ERR_ARG, "vtime: steps = %lld: expected the run's steps (> 0) or 0 (train until end)",
                         (long long)p->steps);
    if (p->cores < 0)
        return dlc_error(DLC_ERR_ARG, "vtime: cores = %d: expected 0 (an island's own hardware each) or the "
                         "cores the islands share (>= 1)", p->cores);
    if (!p->islands) return dlc_error(DLC_ERR_ARG, "vtime: islands is NULL");
    for (int m = 0; m < p->learners; m++) {
        const dlc_vtime_island *is = &p->islands[m];
        if (!(is->speed > 0) || !isfinite(is->speed))
            return dlc_error(DLC_ERR_ARG, "vtime: island %d: speed = %g: expected a finite number > 0",
                             m + 1, is->speed);
        if (!(is->scale > 0) || !isfinite(is->scale))
            return dlc_error(DLC_ERR_ARG, "vtime: island %d: scale = %g: expected a finite number > 0",
                             m + 1, is->scale);
        if (!(is->jitter >= 0) || !isfinite(is->jitter))
            return dlc_error(DLC_ERR_ARG, "vtime: island %d: jitter = %g: expected a finite number >= 0",
                             m + 1, is->jitter);
        if (is->tokens < 1)
            return dlc_error(DLC_ERR_ARG, "vtime: island %d: tokens = %lld: expected >= 1",
                             m + 1, (long long)is->tokens);
        if (!(is->latency >= 0) || !isfinite(is->latency))
            return dlc_error(DLC_ERR_ARG, "vtime: island %d: latency = %g: expected seconds >= 0", m + 1, is->latency);
        if (!(is->bandwidth > 0))
            return dlc_error(DLC_ERR_ARG, "vtime: island %d: bandwidth = %g: expected bytes/s > 0",
                             m + 1, is->bandwidth);
    }
    if (p->syncer.learners != p->learners)
        return dlc_error(DLC_ERR_ARG, "vtime: syncer.learners = %d but learners = %d", p->syncer.learners,
                         p->learners);
    if (p->syncer.dp != p->learner.dp)
        return dlc_error(DLC_ERR_ARG, "vtime: syncer.dp = %d but learner.dp = %d", p->syncer.dp, p->learner.dp);
    if (p->chaos && dlc_chaos_learners(p->chaos) != p->learners)
        return dlc_error(DLC_ERR_ARG, "vtime: the chaos schedule is for %d learners, the run has %d",
                         dlc_chaos_learners(p->chaos), p->learners);
    if (p->shards < 0 || p->shards > DLC_LEARNER_SHARDS_MAX)
        return dlc_error(DLC_ERR_ARG, "vtime: shards = %d: expected 0 or 1 (one syncer) or up to %d shards", p->shards,
                         DLC_LEARNER_SHARDS_MAX);
    if (p->shards > 1 && p->learner.dp)
        return dlc_error(DLC_ERR_ARG, "vtime: shards = %d with dp: expected one syncer (data parallel has one fragment)",
                         p->shards);
    int S = p->shards > 1 ? p->shards : 1;
    if (p->standbys != 0 && p->standbys != 1)
        return dlc_error(DLC_ERR_ARG, "vtime: standbys = %d: expected 0 or 1", p->standbys);
    if (p->standbys && p->learner.dp)
        return dlc_error(DLC_ERR_ARG, "vtime: standbys with dp: expected none (data parallel's syncer takes no standby)");
    if (!(p->lease >= 0) || !isfinite(p->lease))
        return dlc_error(DLC_ERR_ARG, "vtime: lease = %g: expected seconds >= 0", p->lease);
    for (int i = 0; p->chaos && i < dlc_chaos_count(p->chaos); i++) {
        const dlc_fault *f = dlc_chaos_get(p->chaos, i);
        int of_syncer = f->kind == DLC_FAULT_SYNCER || (f->kind == DLC_FAULT_PAUSE && f->learner < 0);
        const char *what = f->kind == DLC_FAULT_SYNCER ? "syncer fault" : "pause of the syncer";
        if (of_syncer && f->shard > S)
            return dlc_error(DLC_ERR_ARG, "vtime: a %s of shard %d at %g s: the run's syncer has %d shard%s", what,
                             f->shard, f->at, S, S > 1 ? "s" : "");
        if (of_syncer && f->role != DLC_ROLE_PRIMARY && !p->standbys)
            return dlc_error(DLC_ERR_ARG, "vtime: a %s of role %s at %g s: the run's syncer has no standby "
                             "(standbys = 0)", what, dlc_fault_role_name(f->role), f->at);
    }
    return DLC_OK;
}

dlc_vtime *dlc_vtime_new(const dlc_vtime_params *vp, const dlc_plan *plan, dlc_params *const *models,
                         const float *theta0) {
    if (check_params(vp) != DLC_OK) return NULL;
    if (!plan || !models || !theta0) {
        dlc_error(DLC_ERR_ARG, "vtime_new: plan, models and theta0 are required");
        return NULL;
    }
    dlc_vtime *vt = calloc(1, sizeof *vt);
    if (!vt) goto nomem;
    vt->p = *vp;
    vt->plan = plan, vt->models = models;
    vt->M = vp->learners, vt->P = dlc_plan_count(plan);
    vt->islands = malloc((size_t)vt->M * sizeof *vt->islands);
    vt->L = calloc((size_t)vt->M, sizeof *vt->L);
    vt->lst = calloc((size_t)vt->M, sizeof *vt->lst);
    if (!vt->islands || !vt->L || !vt->lst) goto nomem;
    memcpy(vt->islands, vp->islands, (size_t)vt->M * sizeof *vt->islands);
    vt->p.islands = vt->islands;
    vt->S = vp->shards > 1 ? vp->shards : 1;
    for (int k = 0; k < vt->S; k++) vt->standby[k] = vp->standbys;
    if (vt->S > 1) { /* each shard a syncer of its own fragments (docs/shards.md) */
        uint8_t *owns = malloc((size_t)vt->P);
        if (!(vt->owner = malloc((size_t)vt->P * sizeof *vt->owner)) || !owns) {
            free(owns);
            goto nomem;
        }
        if (dlc_plan_deal(plan, vt->S, vt->owner) != DLC_OK) {
            free(owns);
            goto fail;
        }
        for (int k = 0; k < vt->S; k++) {
            dlc_syncer_params sp = vp->syncer;
            for (int p = 0; p < vt->P; p++) owns[p] = vt->owner[p] == k;
            sp.owns = owns;
            if (!(vt->s[k] = dlc_syncer_new(&sp, plan, theta0))) {
                free(owns);
                goto fail;
            }
        }
        free(owns);
    } else if (!(vt->s[0] = dlc_syncer_new(&vp->syncer, plan, theta0))) {
        goto fail;
    }
    for (int m = 0; m < vt->M; m++) {
        vlearner *v = &vt->L[m];
        dlc_learner_params lp = vp->learner;
        lp.id = m;
        if (!models[m]) {
            dlc_error(DLC_ERR_ARG, "vtime_new: models[%d] is NULL", m);
            goto fail;
        }
        if (!(v->l = dlc_learner_new(&lp, models[m], plan))) goto fail;
        if (vt->S > 1 && dlc_learner_set_shards(v->l, vt->S, vt->owner) != DLC_OK) goto fail;
        v->is = vt->islands[m];
        v->alive = 1;
        if (!(v->due = calloc((size_t)vt->P, 1))) goto nomem;
        v->st.nominal_tps = (double)v->is.tokens / (vp->step_time * v->is.scale / v->is.speed);
    }
    int H = vp->learner.dp || vp->learner.H < 1 ? 1 : vp->learner.H;
    vt->window = H * vp->step_time;
    if (vp->cores > 0 && vp->learners > vp->cores) vt->window *= (double)vp->learners / vp->cores; /* shared */
    if (!(vt->acct = dlc_account_new(vt->M, 0))) goto fail;
    for (int m = 0; m < vt->M; m++)
        if (dlc_account_enter(vt->acct, m, DLC_ISLAND_UP, 0) != DLC_OK) goto fail;
    vt->st.learners = vt->M;
    if (vp->chaos) {
        int n;
        if (!dlc_chaos_timeline(vp->chaos, &n) && dlc_chaos_count(vp->chaos) > 0) goto fail;
        if (dlc_chaos_cursor_init(&vt->chaos, vp->chaos) != DLC_OK || chaos_queue_next(vt) != DLC_OK) goto fail;
    }
    if (vp->eval_every > 0)
        for (int k = 1; k * vp->eval_every <= vp->end * (1 + 1e-12); k++)
            if (heap_push(vt, (tev){.t = k * vp->eval_every, .cls = EV_EVAL, .index = k}) != DLC_OK) goto fail;
    /* Every learner starts from the initial model: handed over at time 0, not sent over
     * a link (a learner that joins later downloads it). */
    vt->direct = 1;
    for (int m = 0; m < vt->M; m++)
        for (int k = 0; k < vt->S; k++)
            if (dlc_syncer_join(vt->s[k], m, 0) != DLC_OK || syncer_actions(vt, k) != DLC_OK) goto fail;
    vt->direct = 0;
    return vt;
nomem:
    dlc_error(DLC_ERR_NOMEM, "vtime_new: out of memory");
fail:
    dlc_vtime_free(vt);
    return NULL;
}

void dlc_vtime_free(dlc_vtime *vt) {
    if (!vt) return;
    for (int i = 0; i < vt->hlen; i++) free_msg(vt->heap[i].msg);
    free(vt->heap);
    for (int k = 0; k < DLC_LEARNER_SHARDS_MAX; k++)
        for (qmsg *q = vt->held[k], *next; q; q = next) next = q->next, free_msg(q);
    for (int m = 0; vt->L && m < vt->M; m++) {
        dlc_learner_free(vt->L[m].l);
        free(vt->L[m].due);
    }
    free(vt->L);
    for (int k = 0; k < DLC_LEARNER_SHARDS_MAX; k++) dlc_syncer_free(vt->s[k]);
    free(vt->owner);
    free(vt->islands);
    free(vt->hq);
    free(vt->mc);
    dlc_account_free(vt->acct);
    free(vt->lst);
    free(vt);
}

/* ---- the loop ---- */

static dlc_status deliver(dlc_vtime *vt, tev *e) {
    qmsg *q = e->msg;
    vlearner *v = &vt->L[e->learner];
    dlc_status st = DLC_OK;
    if (v->cut && vt->now < v->cut_until && isinf(v->cut_until)) {
        vt->st.dropped++; /* the link went down under it for good */
        free_msg(q);
        e->msg = NULL;
        return DLC_OK;
    }
    if (v->cut && vt->now < v->cut_until) {
        /* the link went down under it: it arrives when the link is back */
        tev later = {.t = v->cut_until, .cls = EV_DELIVER, .learner = e->learner, .msg = q};
        e->msg = NULL;
        return heap_push(vt, later);
    }
    if (!q->to_syncer && v->alive && v->paused && vt->now < v->pause_until) {
        if (isinf(v->pause_until)) { /* stopped for good: it never reads it */
            vt->st.dropped++;
            free_msg(q);
            e->msg = NULL;
            return DLC_OK;
        }
        /* a stopped process reads nothing: it takes it when it goes on */
        tev later = {.t = v->pause_until, .cls = EV_DELIVER, .learner = e->learner, .msg = q};
        e->msg = NULL;
        return heap_push(vt, later);
    }
    if (!q->to_syncer && v->alive && v->busy) {
        /* mid-step: the learner, which reads its messages between steps, takes it right
         * after its step end (same instant and class, later sequence number).  Not for the
         * arena's sake (dlc_learner_receive only stashes a fragment): the time it is
         * received at is the arrival time the learner measures its transit with, which
         * the syncer's adaptive grace uses; docs/sim.md says what moves without this. */
        tev later = {.t = v->step_end, .cls = EV_STEP_END, .learner = e->learner, .msg = q, .deferred = 1};
        e->msg = NULL;
        return heap_push(vt, later);
    }
    if (q->to_syncer && vt->paused[q->shard] && !vt->down[q->shard]) {
        /* a stopped syncer reads nothing: it takes it, in order, when it goes on */
        q->next = NULL;
        if (vt->held_tail[q->shard]) vt->held_tail[q->shard]->next = q;
        else vt->held[q->shard] = q;
        vt->held_tail[q->shard] = q;
        e->msg = NULL;
        return DLC_OK;
    }
    if ((q->to_syncer && vt->down[q->shard]) || !v->alive || q->gen != v->gen) {
        vt->st.dropped++;
    } else if (q->to_syncer) {
        st = dlc_syncer_receive(vt->s[q->shard], &q->m, vt->now);
        /* a refused message is the syncer's business (REJECT events say so): go on */
        if (st == DLC_ERR_FORMAT) st = DLC_OK;
        if (st == DLC_OK) st = syncer_actions(vt, q->shard);
    } else {
        st = dlc_learner_receive(v->l, &q->m, vt->now);
        if (st == DLC_OK) st = learner_actions(vt, e->learner);
    }
    free_msg(q);
    e->msg = NULL;
    return st;
}

static dlc_status step_end(dlc_vtime *vt, const tev *e) {
    vlearner *v = &vt->L[e->learner];
    if (e->gen != v->gen || !v->busy) return DLC_OK; /* killed during the step */
    if (vt->now < v->step_end) { /* paused during the step: it ends that much later */
        if (isinf(v->step_end)) return DLC_OK; /* stopped for good: it never ends */
        return heap_push(vt, (tev){.t = v->step_end, .cls = EV_STEP_END, .learner = e->learner, .gen = v->gen});
    }
    v->busy = 0;
    v->last_end = vt->now;
    dlc_status st;
    if (vt->p.learner.dp) {
        st = dlc_learner_gradient(v->l, v->step_tokens, vt->now);
    } else {
        v->st.steps++;
        v->st.tokens += v->step_tokens;
        st = dlc_learner_step_done(v->l, v->step_tokens, v->step_dt, vt->now);
        if (st == DLC_OK) st = learner_actions(vt, e->learner);
        /* the recipe's schedule; a fragment sent at this step already has nothing to add */
        for (int p = 0; p < vt->P && st == DLC_OK; p++)
            if (v->due[p]) {
                v->due[p] = 0;
                if (dlc_learner_fragment_steps(v->l, p) == 0) continue;
                st = dlc_learner_contribute(v->l, p, vt->now);
                if (st == DLC_OK) st = learner_actions(vt, e->learner);
            }
        /* the final flush: its last step (no other fits before the end) */
        int last = vt->p.steps == 0 && vt->now + step_dt(vt, e->learner, vt->now) > vt->p.end * (1 + 1e-12);
        if (st == DLC_OK && vt->p.final_flush && last) {
            st = dlc_learner_flush(v->l, vt->now, NULL);
            if (st == DLC_OK) st = learner_actions(vt, e->learner);
        }
        return st;
    }
    if (st == DLC_OK) st = learner_actions(vt, e->learner);
    return st;
}

/* steps > 0: the run ends once every live learner has stopped (at least one has; a
 * learner that is down then stays down, as `run` does not restart one to train alone):
 * its end moves to now, and the faults and evaluations scheduled after it are dropped
 * (what is in flight is delivered: the drain). */
static void check_end(dlc_vtime *vt) {
    vt->end_check = 0;
    if (vt->ended) return;
    int stopped = 0;
    for (int m = 0; m < vt->M; m++) {
        const vlearner *v = &vt->L[m];
        if (!v->alive) continue;
        if (!v->finished) return;
        stopped++;
    }
    if (stopped == 0) return;
    vt->ended = 1;
    if (vt->now < vt->p.end) vt->p.end = vt->now;
    int n = 0;
    for (int i = 0; i < vt->hlen; i++) {
        const tev *e = &vt->heap[i];
        if ((e->cls == EV_CHAOS || e->cls == EV_EVAL || e->cls == EV_STEP_START) && e->t > vt->now) continue;
        vt->heap[n++] = *e;
    }
    vt->hlen = n;
    for (int i = n / 2 - 1; i >= 0; i--) { /* heapify: sift each parent down */
        tev x = vt->heap[i];
        int j = i;
        for (;;) {
            int c = 2 * j + 1;
            if (c >= n) break;
            if (c + 1 < n && before(&vt->heap[c + 1], &vt->heap[c])) c++;
            if (!before(&vt->heap[c], &x)) break;
            vt->heap[j] = vt->heap[c];
            j = c;
        }
        vt->heap[j] = x;
    }
}

/* The earliest state-machine timer: *who = -1 for a syncer (shard *shard), else the
 * learner. */
static double next_timer(const dlc_vtime *vt, int *who, int *shard) {
    double t = INFINITY;
    *who = -2, *shard = 0;
    for (int k = 0; k < vt->S; k++)
        if (!vt->down[k] && !vt->paused[k]) { /* (a paused shard's timers wait) */
            double s = dlc_syncer_expiry(vt->s[k]);
            if (s < t) t = s, *who = -1, *shard = k;
        }
    if (vt->now < vt->p.end)
        for (int m = 0; m < vt->M; m++) {
            if (!vt->L[m].alive || vt->L[m].paused) continue;
            double x = dlc_learner_expiry(vt->L[m].l);
            if (x < t && x <= vt->p.end) t = x, *who = m;
        }
    return t;
}

int dlc_vtime_next(dlc_vtime *vt, dlc_vtime_event *ev) {
    if (!vt || !ev) return dlc_error(DLC_ERR_ARG, "vtime_next: NULL argument");
    if (vt->mc_reset) vt->mc_len = 0, vt->mc_reset = 0;
    for (;;) {
        if (vt->hq_len > 0) {
            if (vt->awaiting) break; /* the STEP/OPTIM is out; later events wait for its answer */
            const hostev *h = &vt->hq[vt->hq_head];
            *ev = h->e;
            if (h->mc_off >= 0) ev->merge.contribs = vt->mc + h->mc_off;
            vt->hq_head = (vt->hq_head + 1) % vt->hq_cap;
            vt->hq_len--;
            vt->mc_reset = vt->hq_len == 0; /* the records stay valid until the next call */
            if (ev->type == DLC_VT_STEP || ev->type == DLC_VT_OPTIM) vt->awaiting = ev->learner + 1;
            return 1;
        }
        if (vt->awaiting)
            return dlc_error(DLC_ERR_STATE, "vtime_next: learner %d's %s has not been answered", vt->awaiting,
                             vt->L[vt->awaiting - 1].awaiting == 2 ? "optim" : "step");
        if (vt->done) {
            *ev = (dlc_vtime_event){.type = DLC_VT_DONE, .time = vt->now, .learner = -1};
            return 1;
        }
        if (vt->end_check) check_end(vt);
        int who, shard;
        double tt = next_timer(vt, &who, &shard);
        /* Drained: nothing in flight and the syncer's next timer at or after end: it
         * cannot bring a contribution (the flush below merges what grace windows
         * hold); its liveness timeouts would only declare every learner lost, a
         * timeout after the last heartbeat. */
        if (vt->hlen == 0 && who == -1 && tt >= vt->p.end) who = -2, tt = INFINITY;
        dlc_status st = DLC_OK;
        int heap_first = vt->hlen > 0 && (vt->heap[0].t < tt || (vt->heap[0].t == tt && vt->heap[0].cls < EV_TIMER));
        if (heap_first) {
            tev e = heap_pop(vt);
            if (e.t > vt->now) vt->now = e.t;
            switch (e.cls) {
            case EV_DELIVER: st = deliver(vt, &e); break;
            case EV_STEP_END: st = e.deferred ? deliver(vt, &e) : step_end(vt, &e); break;
            case EV_CHAOS:
                st = chaos_event(vt);
                if (st == DLC_OK) st = chaos_queue_next(vt);
                break;
            case EV_TAKEOVER: /* shard e.index's standby serves (vtime.h, standbys) */
                if (e.learner == -2) { /* after a pause of its primary: if it still lasts */
                    st = pause_takeover(vt, e.index, e.gen);
                    break;
                }
                vt->st.takeovers++;
                if (--vt->down[e.index] == 0) st = shard_back(vt, e.index);
                break;
            case EV_STEP_START: {
                vlearner *v = &vt->L[e.learner];
                v->start_queued = 0;
                if (e.gen != v->gen || !v->alive || v->paused || dlc_learner_state_of(v->l) != DLC_LEARNER_TRAINING)
                    break;
                if (vt->p.steps > 0 && dlc_learner_schedule_step(v->l) >= vt->p.steps) { /* a catch-up since */
                    st = finish_learner(vt, e.learner);
                    break;
                }
                double dt = step_dt(vt, e.learner, vt->now);
                if (vt->now + dt > vt->p.end * (1 + 1e-12)) break;
                v->busy = 1, v->awaiting = 1;
                v->step_start = vt->now, v->step_dt = dt;
                v->st.busy_s += dt;
                /* the step boundary: what arrived since the last step end is applied */
                st = dlc_learner_step_begin(v->l, vt->now);
                if (st == DLC_OK) st = learner_actions(vt, e.learner);
                if (st != DLC_OK) break;
                dlc_vtime_event h = {.type = DLC_VT_STEP, .time = vt->now, .learner = e.learner,
                                     .step = dlc_learner_steps(v->l) + 1, .schedule = dlc_learner_schedule_step(v->l)};
                st = host_push(vt, &h);
                break;
            }
            case EV_EVAL: {
                dlc_vtime_event h = {.type = DLC_VT_EVAL, .time = vt->now, .learner = -1};
                st = host_push(vt, &h);
                break;
            }
            default: break;
            }
        } else if (who != -2) {
            if (tt > vt->now) vt->now = tt;
            if (who == -1) {
                st = dlc_syncer_handle_expiry(vt->s[shard], vt->now);
                if (st == DLC_OK) st = syncer_actions(vt, shard);
            } else {
                st = dlc_learner_handle_expiry(vt->L[who].l, vt->now);
                if (st == DLC_OK) st = learner_actions(vt, who);
            }
        } else if (!vt->flushed) {
            vt->flushed = 1;
            if (vt->now < vt->p.end) vt->now = vt->p.end; /* the run lasts until end at least */
            for (int k = 0; k < vt->S && st == DLC_OK; k++) {
                st = dlc_syncer_flush(vt->s[k], vt->now);
                if (st == DLC_OK) st = syncer_actions(vt, k);
            }
        } else {
            vt->done = 1;
        }
        if (st != DLC_OK) return st;
    }
    return dlc_error(DLC_ERR_INTERNAL, "vtime_next: unreachable");
}

static dlc_status answer(dlc_vtime *vt, int m, int kind, const char *fn) {
    if (!vt) return dlc_error(DLC_ERR_ARG, "%s: NULL driver", fn);
    if (m < 0 || m >= vt->M) return dlc_error(DLC_ERR_RANGE, "%s: learner %d: expected 1..%d", fn, m + 1, vt->M);
    if (vt->awaiting != m + 1 || vt->L[m].awaiting != kind)
        return dlc_error(DLC_ERR_STATE, "%s: learner %d was not asked to %s", fn, m + 1,
                         kind == 2 ? "step its optimizer" : "step");
    return DLC_OK;
}

static dlc_status schedule_end(dlc_vtime *vt, int m, int64_t tokens) {
    vlearner *v = &vt->L[m];
    v->step_tokens = tokens;
    v->awaiting = 0;
    vt->awaiting = 0;
    v->step_end = v->step_start + v->step_dt;
    return heap_push(vt, (tev){.t = v->step_end, .cls = EV_STEP_END, .learner = m, .gen = v->gen});
}

dlc_status dlc_vtime_step_done(dlc_vtime *vt, int m, int64_t tokens) {
    dlc_status st = answer(vt, m, 1, "vtime_step_done");
    if (st != DLC_OK) return st;
    if (vt->p.learner.dp) return dlc_error(DLC_ERR_STATE, "vtime_step_done: data parallel answers with gradient_done");
    if (tokens < 0) return dlc_error(DLC_ERR_ARG, "vtime_step_done: tokens = %lld: expected >= 0", (long long)tokens);
    return schedule_end(vt, m, tokens);
}

dlc_status dlc_vtime_gradient_done(dlc_vtime *vt, int m, int64_t tokens) {
    dlc_status st = answer(vt, m, 1, "vtime_gradient_done");
    if (st != DLC_OK) return st;
    if (!vt->p.learner.dp) return dlc_error(DLC_ERR_STATE, "vtime_gradient_done: not a data-parallel run");
    if (tokens < 0) return dlc_error(DLC_ERR_ARG, "vtime_gradient_done: tokens = %lld: expected >= 0", (long long)tokens);
    return schedule_end(vt, m, tokens);
}

dlc_status dlc_vtime_optim_done(dlc_vtime *vt, int m) {
    dlc_status st = answer(vt, m, 2, "vtime_optim_done");
    if (st != DLC_OK) return st;
    vlearner *v = &vt->L[m];
    v->awaiting = 0;
    vt->awaiting = 0;
    v->st.steps++;
    v->st.tokens += v->step_tokens;
    v->last_end = vt->now;
    st = dlc_learner_step_done(v->l, v->step_tokens, v->step_dt, vt->now);
    return st == DLC_OK ? learner_actions(vt, m) : st;
}

dlc_status dlc_vtime_contribute(dlc_vtime *vt, int m, int p) {
    dlc_status st = answer(vt, m, 1, "vtime_contribute");
    if (st != DLC_OK) return st;
    if (p < 0 || p >= vt->P) return dlc_error(DLC_ERR_RANGE, "vtime_contribute: fragment %d: expected 0..%d", p, vt->P - 1);
    if (vt->p.learner.dp) return dlc_error(DLC_ERR_STATE, "vtime_contribute: data parallel has no fragments");
    vt->L[m].due[p] = 1;
    return DLC_OK;
}

dlc_status dlc_vtime_set_quorum(dlc_vtime *vt, int quorum) {
    if (!vt) return dlc_error(DLC_ERR_ARG, "vtime_set_quorum: NULL driver");
    dlc_status st = DLC_OK;
    for (int k = 0; k < vt->S && st == DLC_OK; k++) {
        st = dlc_syncer_set_quorum(vt->s[k], quorum, vt->now);
        if (st == DLC_OK) st = syncer_actions(vt, k);
    }
    return st;
}

dlc_status dlc_vtime_global(const dlc_vtime *vt, float *arena) {
    if (!vt || !arena) return dlc_error(DLC_ERR_ARG, "vtime_global: NULL argument");
    dlc_status st = DLC_OK;
    for (int k = 0; k < vt->S && st == DLC_OK && !vt->p.learner.dp; k++) st = dlc_syncer_copy_model(vt->s[k], arena);
    if (!vt->p.learner.dp) return st; /* (each shard writes its own fragments) */
    for (int m = 0; m < vt->M; m++)
        if (vt->L[m].alive && dlc_learner_state_of(vt->L[m].l) != DLC_LEARNER_JOINING) {
            memcpy(arena, dlc_params_data(vt->models[m]), (size_t)dlc_params_size(vt->models[m]) * sizeof(float));
            return DLC_OK;
        }
    return dlc_error(DLC_ERR_STATE, "vtime_global: data parallel with no live learner holds no model");
}

const dlc_syncer *dlc_vtime_syncer(const dlc_vtime *vt) { return vt ? vt->s[0] : NULL; }
const dlc_syncer *dlc_vtime_shard(const dlc_vtime *vt, int k) {
    return vt && k >= 0 && k < vt->S ? vt->s[k] : NULL;
}
int dlc_vtime_shards(const dlc_vtime *vt) { return vt ? vt->S : 0; }
const dlc_account *dlc_vtime_account(const dlc_vtime *vt) { return vt ? vt->acct : NULL; }
const dlc_learner *dlc_vtime_learner(const dlc_vtime *vt, int m) {
    return vt && m >= 0 && m < vt->M ? vt->L[m].l : NULL;
}
int dlc_vtime_learners(const dlc_vtime *vt) { return vt ? vt->M : 0; }
int dlc_vtime_live(const dlc_vtime *vt, int m) { return vt && m >= 0 && m < vt->M ? vt->L[m].alive : 0; }

dlc_status dlc_vtime_get_stats(dlc_vtime *vt, dlc_vtime_stats *st) {
    if (!vt || !st) return dlc_error(DLC_ERR_ARG, "vtime_get_stats: NULL argument");
    double end = vt->p.end; /* steps > 0: the run may have ended early */
    for (int m = 0; m < vt->M; m++) {
        const vlearner *v = &vt->L[m];
        dlc_vtime_learner_stats *o = &vt->lst[m];
        *o = v->st;
        if (vt->p.cores > 0) { /* the rate it reached on the shared cores, as `run` measures */
            double share = vt->M > vt->p.cores ? (double)vt->M / vt->p.cores : 1;
            o->nominal_tps = o->busy_s > 0 && o->tokens > 0 ? (double)o->tokens / o->busy_s : o->nominal_tps / share;
        }
        /* the account (account.h): its up time is compute (busy) and idle; ready with no
         * further step fitting before `end`, it is done since its last step */
        dlc_learner_account a = dlc_learner_get_account(v->l);
        double busy = o->busy_s < end ? o->busy_s : end;
        double up = dlc_account_seconds(vt->acct, m, DLC_ISLAND_UP, end);
        int ready = v->alive && !v->paused && !v->busy && dlc_learner_state_of(v->l) == DLC_LEARNER_TRAINING;
        dlc_account_work w = {.busy_s = busy, .idle_s = up > busy ? up - busy : 0,
                              .ready_since = ready ? (v->last_end > v->up_since ? v->last_end : v->up_since) : -1,
                              .nominal_tps = o->nominal_tps, .fates = a,
                              .merged_steps = 0};
        for (int k = 0; k < vt->S; k++) w.merged_steps += dlc_syncer_merged_steps(vt->s[k], m);
        dlc_account_row r;
        dlc_status rs = dlc_account_set_work(vt->acct, m, &w);
        if (rs == DLC_OK) rs = dlc_account_row_of(vt->acct, m, end, &r);
        if (rs != DLC_OK) return rs;
        o->sent_steps = a.sent_steps;
        o->merged_steps = w.merged_steps;
        o->useful_s = r.s[DLC_BUCKET_USEFUL];
        o->overwritten_s = r.s[DLC_BUCKET_OVERWRITTEN];
        o->dropped_s = r.s[DLC_BUCKET_DROPPED];
        o->unsent_s = r.s[DLC_BUCKET_UNSENT];
        o->down_s = r.s[DLC_BUCKET_DOWN];
        o->waiting_s = r.s[DLC_BUCKET_WAITING] + r.s[DLC_BUCKET_OTHER]; /* (other: 0 but for rounding) */
        o->done_s = r.s[DLC_BUCKET_DONE];
        o->idle_s = o->waiting_s + o->done_s;
    }
    *st = vt->st;
    st->now = vt->now, st->end = end;
    st->goodput = dlc_account_goodput(vt->acct, end);
    st->uptime = dlc_account_uptime(vt->acct, end, vt->window);
    st->learners = vt->M;
    st->learner = vt->lst;
    return DLC_OK;
}
