/* learner.c - one learner as a sans-IO state machine (learner.h, docs/sim.md).
 *
 * Per fragment p the learner keeps Θ̂_p (the last global value received, contiguous in
 * the fragment's payload order), a slot for a merged fragment that arrived and waits for
 * its step boundary, and the counters of docs/algorithm.md §4.1.  Actions go to a small queue
 * that the driver drains with dlc_learner_poll; payloads live in per-fragment buffers,
 * so several contributions sent in one call never share one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/learner.h"
#include "diloco/mem.h"
#include "diloco/outer.h"

static const char *const state_names[] = {"joining", "training", "waiting", "stopped"};
_Static_assert(sizeof state_names / sizeof state_names[0] == DLC_LEARNER_STATE_COUNT,
               "one name per learner state");

const char *dlc_learner_state_name(dlc_learner_state s) {
    return (unsigned)s < DLC_LEARNER_STATE_COUNT ? state_names[s] : NULL;
}

typedef struct lfrag {
    int64_t n, off;        /* floats; offset of the fragment in the contiguous copies */
    int64_t base_version;  /* -1 before the first receive */
    int64_t c_steps, c_tokens;
    int64_t sent_step;     /* step of the last send since the last receive, -1 none */
    double sent_time;
    int pending;           /* a merged fragment waits in pend[off..] for a step boundary */
    int in_base;           /* ... in hat[off..] instead (JOINING: stash_of) */
    int pend_resync;       /* ... and it is (or replaced) a resync: taken whole, at once */
    int pend_fresh;        /* ... and it arrived after p's last send (it may hold that send) */
    int64_t pend_version;
    /* dlc_learner_receive_lent: the waiting merge kept where the driver holds it (its
     * frame), not in pend: decoded values, or the encoded payload (validated) */
    const float *lent_v;
    const uint8_t *lent_b;
    size_t lent_len;
    dlc_codec_kind lent_codec;
    int received;          /* JOINING: got it; TRAINING: its whole resync arrived (a reconnect) */
    int skipped;           /* a catch-up skipped a step at which it was due: sent at step_done */
    double acc_steps, acc_s; /* the account: its share of the steps (1/P each) and seconds
                              * trained since its last send or apply, in no contribution yet */
    uint8_t *enc;          /* encoded contribution, enc_cap bytes (NULL with defer_encode) */
    int64_t enc_cap;
    int encoding;          /* defer_encode: its ENCODE is out (raw and ef are the driver's) */
    int ef_stale;          /* a resync replaced it while its ENCODE was out: its error
                            * feedback is zeroed once the encode is back (ef_reset) */
} lfrag;


/* A learner moves its schedule on by at most one step in MOVE_SHARE it trains (and by up
 * to H/2 at once, the first at any time): learners that drift apart by a few percent
 * stay in phase, while one that is lastingly slower (an island at half the others'
 * speed, whose sends leave later at every round however often it moves) keeps its own
 * schedule and contributes every step it trains, for moving it on and on would only
 * shorten its contributions and split the others' rounds (docs/experiments.md). */
enum { MOVE_SHARE = 8 };

struct dlc_learner {
    dlc_learner_params p;
    dlc_learner_state state;
    dlc_params *params;
    const dlc_plan *plan;
    float **host;          /* [tensors] dlc_learner_bind_tensors: where each tensor of the
                            * model lives (NULL: in the params arena) */
    int P;
    int64_t n;             /* floats of all fragments */
    lfrag *f;
    float *hat;            /* [n] Θ̂, fragments concatenated */
    float *pend;           /* [n] arrived, not yet applied (allocated at the first merge
                            * that is not lent: dlc_learner_receive_lent keeps none) */
    float *scratch;        /* [max n_p], at its first use (scratch_get): a driver that
                            * defers encodes and lends merges never needs it */
    float *ef;             /* [n] error feedback, NULL when off */
    float **raw;           /* [P] defer_encode: fragment p's outer gradient lent to its
                            * ENCODE until dlc_learner_encoded (NULL: none out) */
    float *raw_spare;      /* one such buffer kept for the next ENCODE (NULL: none) */
    int64_t maxn;          /* the largest fragment's floats: every raw buffer's size */
    int encoding;          /* fragments with an ENCODE out */
    uint8_t *grad_enc;     /* dp: 4n bytes */
    int64_t steps, tokens;
    int64_t phase;         /* the run's schedule step when this learner joined (its resync) */
    int64_t incarnation;   /* stamped on what it sends; + 1 per restart */
    int shards;            /* syncer shards (dlc_learner_set_shards; 1: one syncer) */
    int *owner;            /* [P] the shard that owns each fragment (NULL: all shard 0) */
    int64_t epoch[DLC_LEARNER_SHARDS_MAX]; /* the epoch of each shard it follows (0: none
                            * heard yet) */
    double step_ema, transit_ema;
    double boundary_time;  /* `now` of the last dlc_learner_step_done (-1: none yet) */
    double next_heartbeat;
    int joined;            /* fragments received while JOINING */
    double best_age;       /* JOINING: the youngest round age a resync reported (-1 none) */
    int64_t best_k;        /* steps until that fragment is next due for the others */
    int best_p;
    int64_t rollbacks;     /* dlc_learner_rollback calls that succeeded */
    int send_room;         /* dlc_learner_set_send_room: contributions step_done may still
                            * send (-1: any) */
    int64_t deferred;      /* due contributions that waited for room (dlc_learner_deferred) */
    int resynced[DLC_LEARNER_SHARDS_MAX]; /* TRAINING: fragments of a whole resync (a
                            * reconnect to that shard) received so far */
    int64_t resync_run[DLC_LEARNER_SHARDS_MAX]; /* ... and the run's schedule step it carried */
    int owned[DLC_LEARNER_SHARDS_MAX]; /* fragments each shard owns */
    int64_t caught_up;     /* steps at its last catch-up (-1: none since it joined) */
    int64_t move_credit;   /* the steps its schedule may still move on, in 1/MOVE_SHARE
                            * steps: + 1 a step trained, at most MOVE_SHARE * H / 2 */
    dlc_learner_account acc; /* where its compute went (learner.h), over its incarnations */
    /* dp replay (learner.h, "Replay") */
    int64_t run_seen;      /* the furthest run step heard of (resyncs, averages) */
    int replaying;         /* catching up on the averages of the steps it missed */
    int64_t asked;         /* the step of the REPLAY not yet answered (-1: none) */
    int64_t asked_k;       /* the step of the last REPLAY sent while replaying (-1: none): a
                            * RESYNC answering another one is an earlier question's */
    int reask;             /* a resync came while a replayed average was in the arena: ask
                            * again at dlc_learner_replayed (a REPLAY may have been lost) */
    int64_t answer_last;   /* the last step of the answers received (0: none) */
    dlc_learner_action *q; /* ring of queued actions */
    int qcap, qhead, qlen;
};

dlc_learner_params dlc_learner_default_params(void) {
    dlc_learner_params p;
    memset(&p, 0, sizeof p);
    p.H = 24;
    p.tau = 2;
    p.codec = DLC_CODEC_F32;
    p.codec_params = dlc_codec_default_params();
    p.ring = 4;
    p.heartbeat = 1.0;
    p.ema = 0.5;
    p.incarnation = 1;
    return p;
}

dlc_status dlc_learner_params_check(const dlc_learner_params *p) {
    if (!p) return dlc_error(DLC_ERR_ARG, "learner: params is NULL");
    if (p->id < 0) return dlc_error(DLC_ERR_ARG, "learner: id = %d: expected an index >= 0", p->id);
    if (p->dp != 0 && p->dp != 1) return dlc_error(DLC_ERR_ARG, "learner: dp = %d: expected 0 or 1", p->dp);
    if (p->H < 0) return dlc_error(DLC_ERR_ARG, "learner: H = %d: expected >= 0 (0 = manual schedule)", p->H);
    if (p->tau < 0 || (p->H > 0 && p->tau >= p->H))
        return dlc_error(DLC_ERR_ARG, "learner: tau = %d: expected 0 <= tau < H = %d", p->tau, p->H);
    if (!(p->alpha >= 0 && p->alpha <= 1))
        return dlc_error(DLC_ERR_ARG, "learner: alpha = %g: expected a number in [0, 1]", p->alpha);
    if (p->blocking != 0 && p->blocking != 1)
        return dlc_error(DLC_ERR_ARG, "learner: blocking = %d: expected 0 or 1", p->blocking);
    if (p->replay != 0 && p->replay != 1)
        return dlc_error(DLC_ERR_ARG, "learner: replay = %d: expected 0 or 1", p->replay);
    if (p->defer_encode != 0 && p->defer_encode != 1)
        return dlc_error(DLC_ERR_ARG, "learner: defer_encode = %d: expected 0 or 1", p->defer_encode);
    if (p->defer_encode && p->dp)
        return dlc_error(DLC_ERR_ARG, "learner: defer_encode with dp: expected 0 (a gradient leaves as f32 at once)");
    if (p->error_feedback != 0 && p->error_feedback != 1)
        return dlc_error(DLC_ERR_ARG, "learner: error_feedback = %d: expected 0 or 1", p->error_feedback);
    if (p->ring < 1 || p->ring > DLC_FRAGSTATE_RING_MAX)
        return dlc_error(DLC_ERR_ARG, "learner: ring = %d: expected 1..%d versions", p->ring, DLC_FRAGSTATE_RING_MAX);
    if (!(p->heartbeat >= 0) || !isfinite(p->heartbeat))
        return dlc_error(DLC_ERR_ARG, "learner: heartbeat = %g: expected seconds >= 0 (0 = none)", p->heartbeat);
    if (!(p->ema > 0 && p->ema <= 1))
        return dlc_error(DLC_ERR_ARG, "learner: ema = %g: expected a number in (0, 1]", p->ema);
    if (p->incarnation < 1)
        return dlc_error(DLC_ERR_ARG, "learner: incarnation = %lld: expected >= 1", (long long)p->incarnation);
    dlc_status s = dlc_codec_check(p->codec, &p->codec_params);
    if (s != DLC_OK) return s;
    return DLC_OK;
}

/* The one place the state changes. */
static void set_state(dlc_learner *l, dlc_learner_state to) {
    dlc_learner_state from = l->state;
    DLC_ASSERT((unsigned)to < DLC_LEARNER_STATE_COUNT);
    int ok = 0;
    switch (from) {
    case DLC_LEARNER_JOINING: ok = to == DLC_LEARNER_TRAINING || to == DLC_LEARNER_STOPPED; break;
    case DLC_LEARNER_TRAINING: ok = to == DLC_LEARNER_WAITING || to == DLC_LEARNER_STOPPED; break;
    case DLC_LEARNER_WAITING: ok = to == DLC_LEARNER_TRAINING || to == DLC_LEARNER_STOPPED; break;
    case DLC_LEARNER_STOPPED: ok = to == DLC_LEARNER_JOINING; break;
    default: break;
    }
    if (!ok) dlc_assert_fail("learner: illegal transition", __FILE__, __LINE__);
    l->state = to;
}

/* The syncer shard that owns fragment p (0 with one syncer). */
static int shard_of(const dlc_learner *l, int p) { return l->owner ? l->owner[p] : 0; }

static dlc_status push(dlc_learner *l, const dlc_learner_action *a) {
    if (l->qlen == l->qcap) {
        int cap = l->qcap * 2;
        dlc_learner_action *q = malloc((size_t)cap * sizeof *q);
        if (!q) return dlc_error(DLC_ERR_NOMEM, "learner: out of memory for %d actions", cap);
        for (int i = 0; i < l->qlen; i++) q[i] = l->q[(l->qhead + i) % l->qcap];
        free(l->q);
        l->q = q, l->qcap = cap, l->qhead = 0;
    }
    l->q[(l->qhead + l->qlen) % l->qcap] = *a;
    l->qlen++;
    return DLC_OK;
}

int dlc_learner_poll(dlc_learner *l, dlc_learner_action *a) {
    if (!l || !a || l->qlen == 0) return 0;
    *a = l->q[l->qhead];
    l->qhead = (l->qhead + 1) % l->qcap;
    l->qlen--;
    return 1;
}

int dlc_learner_pending(const dlc_learner *l) { return l ? l->qlen : 0; }

/* No silent loss: an event is refused while actions of an earlier call are queued, since
 * it would reuse the buffers their payloads point into.  A refused call changes nothing. */
static dlc_status learner_unpolled(const dlc_learner *l, const char *fn) {
    if (l->qlen == 0) return DLC_OK;
    return dlc_error(DLC_ERR_STATE, "%s: learner %d has %d unpolled action%s: expected 0 (poll every action "
                     "with dlc_learner_poll before the next event)", fn, l->p.id + 1, l->qlen, l->qlen == 1 ? "" : "s");
}

dlc_learner *dlc_learner_new(const dlc_learner_params *lp, dlc_params *params, const dlc_plan *plan) {
    if (dlc_learner_params_check(lp) != DLC_OK) return NULL;
    if (!params || !plan) {
        dlc_error(DLC_ERR_ARG, "learner_new: params and plan are required");
        return NULL;
    }
    if (dlc_plan_tensors(plan) != dlc_params_count(params)) {
        dlc_error(DLC_ERR_ARG, "learner_new: the plan is for %d tensors, the model has %d", dlc_plan_tensors(plan),
                  dlc_params_count(params));
        return NULL;
    }
    if (lp->dp && dlc_plan_count(plan) != 1) {
        dlc_error(DLC_ERR_ARG, "learner_new: data parallel needs a plan of 1 fragment, got %d", dlc_plan_count(plan));
        return NULL;
    }
    dlc_learner *l = calloc(1, sizeof *l);
    if (!l) goto nomem;
    l->p = *lp;
    l->params = params, l->plan = plan;
    l->P = dlc_plan_count(plan);
    l->f = calloc((size_t)l->P, sizeof *l->f);
    if (!l->f) goto nomem;
    int64_t maxn = 0;
    for (int p = 0; p < l->P; p++) {
        lfrag *f = &l->f[p];
        f->n = dlc_plan_numel(plan, p);
        f->off = l->n;
        l->n += f->n;
        if (f->n > maxn) maxn = f->n;
        f->enc_cap = dlc_codec_encoded_size(lp->codec, &lp->codec_params, f->n);
        if (f->enc_cap < 0) goto fail;
        if (lp->defer_encode) continue; /* the driver encodes into its own buffer */
        f->enc = malloc((size_t)(f->enc_cap > 0 ? f->enc_cap : 1));
        if (!f->enc) goto nomem;
    }
    l->hat = malloc((size_t)l->n * sizeof(float));
    if (!l->hat) goto nomem;
    if (lp->dp && !(l->pend = malloc((size_t)l->n * sizeof(float)))) goto nomem;
    if (lp->error_feedback && !(l->ef = calloc((size_t)l->n, sizeof(float)))) goto nomem;
    l->maxn = maxn;
    if (lp->defer_encode && !(l->raw = calloc((size_t)l->P, sizeof *l->raw))) goto nomem;
    if (lp->dp && !(l->grad_enc = malloc((size_t)l->n * sizeof(float)))) goto nomem;
    l->qcap = 16;
    if (!(l->q = malloc((size_t)l->qcap * sizeof *l->q))) goto nomem;
    l->send_room = -1;
    l->shards = 1;
    l->owned[0] = l->P;
    l->state = DLC_LEARNER_STOPPED; /* so that restart's transition is the legal one */
    l->incarnation = lp->incarnation - 1; /* restart makes it lp->incarnation */
    dlc_learner_restart(l, 0);
    return l;
nomem:
    dlc_error(DLC_ERR_NOMEM, "learner_new: out of memory");
fail:
    dlc_learner_free(l);
    return NULL;
}

void dlc_learner_free(dlc_learner *l) {
    if (!l) return;
    if (l->f)
        for (int p = 0; p < l->P; p++) free(l->f[p].enc);
    free(l->f);
    free(l->host);
    free(l->hat);
    free(l->pend);
    free(l->scratch);
    free(l->ef);
    for (int p = 0; l->raw && p < l->P; p++) free(l->raw[p]);
    free(l->raw);
    free(l->raw_spare);
    free(l->grad_enc);
    free(l->owner);
    free(l->q);
    free(l);
}

/* ---- the fragment <-> model copies ---- */

/* Where view v's values live: in the arena, or (dlc_learner_bind_tensors) in the host's
 * tensor, at the view's offset within that tensor. */
static float *view_at(const dlc_learner *l, const dlc_frag_view *v, int grad) {
    if (l->host) return l->host[v->tensor] + (v->offset - dlc_params_offset(l->params, v->tensor));
    return (grad ? dlc_params_grad(l->params) : dlc_params_data(l->params)) + v->offset;
}

static void gather(const dlc_learner *l, int p, float *dst, int grad) {
    int nv;
    const dlc_frag_view *v = dlc_plan_views(l->plan, p, &nv);
    for (int j = 0; j < nv; j++) {
        memcpy(dst, view_at(l, &v[j], grad), (size_t)v[j].numel * sizeof(float));
        dst += v[j].numel;
    }
}

/* model_p = a·model_p + (1 − a)·src (a = 0: copy). */
static void scatter_mix(dlc_learner *l, int p, const float *src, float a, int grad) {
    int nv;
    const dlc_frag_view *v = dlc_plan_views(l->plan, p, &nv);
    for (int j = 0; j < nv; j++) {
        float *d = view_at(l, &v[j], grad);
        if (a == 0) {
            memcpy(d, src, (size_t)v[j].numel * sizeof(float));
        } else {
            float b = 1.0f - a;
            for (int64_t i = 0; i < v[j].numel; i++) d[i] = a * d[i] + b * src[i];
        }
        src += v[j].numel;
    }
}

dlc_status dlc_learner_bind_tensors(dlc_learner *l, float *const *data) {
    if (!l || !data) return dlc_error(DLC_ERR_ARG, "learner_bind_tensors: NULL %s", l ? "data" : "learner");
    if (l->p.dp)
        return dlc_error(DLC_ERR_ARG, "learner_bind_tensors: learner %d is data parallel: its gradient lives in the "
                         "params arena", l->p.id + 1);
    int count = dlc_params_count(l->params);
    for (int i = 0; i < count; i++)
        if (!data[i]) return dlc_error(DLC_ERR_ARG, "learner_bind_tensors: tensor %d ('%s') is NULL", i,
                                       dlc_params_name(l->params, i));
    float **h = malloc((size_t)count * sizeof *h);
    if (!h) return dlc_error(DLC_ERR_NOMEM, "learner_bind_tensors: out of memory");
    memcpy(h, data, (size_t)count * sizeof *h);
    free(l->host);
    l->host = h;
    return DLC_OK;
}

static double ema(double old, double x, double k) { return old == 0 ? x : (1 - k) * old + k * x; }

/* The account: fragment p's steps since its last send or apply go to `to` (and with
 * keep > 0 that share of them to kept), then start again. */
static void settle(dlc_learner *l, lfrag *f, double *to_steps, double *to_s, double keep) {
    l->acc.kept_steps += keep * f->acc_steps, l->acc.kept_s += keep * f->acc_s;
    *to_steps += (1 - keep) * f->acc_steps, *to_s += (1 - keep) * f->acc_s;
    f->acc_steps = f->acc_s = 0;
}

/* Does fragment p's waiting resync bring, bit for bit and at the same version, the global
 * values this learner holds as its base (a reconnect to a syncer that holds them: the same
 * syncer after a cut, or a standby that took over, docs/shards.md)?  Then what it trained
 * on p since is not to be overwritten.  Compared before anything is written to the base. */
static int resync_of_base(const dlc_learner *l, const lfrag *f) {
    if (!f->pend_resync || f->base_version < 0 || f->pend_version != f->base_version || f->in_base) return 0;
    const float *base = l->hat + f->off;
    size_t bytes = (size_t)f->n * sizeof(float);
    if (f->lent_v) return memcmp(f->lent_v, base, bytes) == 0;
    if (f->lent_b) return f->lent_codec == DLC_CODEC_F32 && f->lent_len == bytes && memcmp(f->lent_b, base, bytes) == 0;
    return l->pend && memcmp(l->pend + f->off, base, bytes) == 0;
}

/* Fragment p's error feedback zeroed: a whole resync replaced the trajectory its residual
 * was measured on (learner.h); one lent to an ENCODE under way is zeroed when it is back. */
static void ef_reset(dlc_learner *l, lfrag *f) {
    if (!l->ef) return;
    if (f->encoding) {
        f->ef_stale = 1;
        return;
    }
    memset(l->ef + f->off, 0, (size_t)f->n * sizeof(float));
    f->ef_stale = 0;
}

/* Applies the waiting merged fragment p (pend) to the arena: the only write of the model
 * arena, made at a step boundary (step_begin, step_done) or while JOINING. */
static dlc_status apply(dlc_learner *l, int p) {
    lfrag *f = &l->f[p];
    DLC_ASSERT(f->pending);
    int resync = f->pend_resync;
    if (resync_of_base(l, f)) { /* the base it holds: its own steps on p stay, to be sent */
        dlc_learner_action a = {.type = DLC_LACT_APPLIED, .fragment = p, .version = f->pend_version, .lag = -1,
                                .resync = 1};
        f->lent_v = NULL, f->lent_b = NULL;
        f->sent_step = -1; /* (what was in flight may be lost with the syncer it went to) */
        f->pending = f->pend_resync = f->pend_fresh = 0;
        return push(l, &a);
    }
    /* what it trained on p since its last send is replaced (alpha of it kept in the mix) */
    settle(l, f, &l->acc.overwritten_steps, &l->acc.overwritten_s, resync ? 0.0 : l->p.alpha);
    if (f->lent_v || f->lent_b) { /* from the driver's frame into the base, then mixed from there */
        if (f->lent_v) {
            memcpy(l->hat + f->off, f->lent_v, (size_t)f->n * sizeof(float));
        } else {
            dlc_status d = dlc_codec_decode(f->lent_codec, NULL, f->lent_b, f->lent_len, l->hat + f->off, f->n);
            DLC_ASSERT(d == DLC_OK); /* validated on arrival; the driver keeps the bytes unchanged */
        }
        f->lent_v = NULL, f->lent_b = NULL;
        f->in_base = 1;
    }
    const float *src = f->in_base ? l->hat + f->off : l->pend + f->off;
    scatter_mix(l, p, src, resync ? 0.0f : (float)l->p.alpha, 0);
    if (!f->in_base) memcpy(l->hat + f->off, src, (size_t)f->n * sizeof(float));
    f->in_base = 0;
    dlc_learner_action a = {.type = DLC_LACT_APPLIED, .fragment = p, .version = f->pend_version,
                            .lag = f->sent_step >= 0 && !resync ? l->steps - f->sent_step : -1, .resync = resync};
    f->base_version = f->pend_version;
    f->c_steps = f->c_tokens = 0;
    if (resync) f->skipped = 0; /* taken whole: nothing of its own is left to send */
    if (resync) ef_reset(l, f);
    f->sent_step = -1;
    f->pending = f->pend_resync = f->pend_fresh = 0;
    return push(l, &a);
}

/* May fragment p's waiting merge be applied at this step boundary? */
static int applicable(const dlc_learner *l, const lfrag *f) {
    if (!f->pending) return 0;
    if (f->pend_resync) return 1;
    if (f->sent_step >= 0) return l->steps - f->sent_step >= l->p.tau;
    /* held (learner.h, "Step boundaries"): p was trained and not sent since its last
     * apply; applied now, the merge would overwrite those steps, which its next
     * contribution would then lack; only the first version past the base */
    return !(f->c_steps > 0 && l->p.H > 0 && !l->p.dp && !l->p.blocking && f->pend_version == f->base_version + 1 &&
             l->p.ring >= 3);
}

/* Applies every waiting fragment that may be applied now (a step boundary). */
static dlc_status apply_due(dlc_learner *l) {
    dlc_status s = DLC_OK;
    for (int p = 0; p < l->P && s == DLC_OK; p++)
        if (applicable(l, &l->f[p])) s = apply(l, p);
    return s;
}

/* WAITING while a blocking fragment is overdue, else TRAINING. */
static void update_blocking(dlc_learner *l) {
    if (l->state != DLC_LEARNER_TRAINING && l->state != DLC_LEARNER_WAITING) return;
    int wait = 0;
    if (l->p.blocking && !l->p.dp)
        for (int p = 0; p < l->P && !wait; p++) {
            const lfrag *f = &l->f[p];
            wait = f->sent_step >= 0 && !f->pending && l->steps - f->sent_step >= l->p.tau;
        }
    if (l->p.dp) return; /* dp waits in dlc_learner_gradient and resumes on the average */
    if (wait && l->state == DLC_LEARNER_TRAINING) set_state(l, DLC_LEARNER_WAITING);
    if (!wait && l->state == DLC_LEARNER_WAITING) set_state(l, DLC_LEARNER_TRAINING);
}

/* Deferred encoding: the event calls that would use a buffer an ENCODE lent out. */
static dlc_status encode_busy(const dlc_learner *l, int p, const char *fn) {
    if (p >= 0 ? !l->f[p].encoding : !l->encoding) return DLC_OK;
    return dlc_error(DLC_ERR_STATE, "%s: learner %d has %s still out to encode: expected dlc_learner_encoded first",
                     fn, l->p.id + 1, p >= 0 ? "this fragment's contribution" : "contributions");
}

/* The scratch fragment, allocated at its first use. */
static float *scratch_get(dlc_learner *l) {
    if (!l->scratch) l->scratch = malloc((size_t)l->maxn * sizeof(float));
    return l->scratch;
}

/* defer_encode: a buffer for fragment p's outer gradient while its ENCODE is out (the
 * one kept from an earlier ENCODE, else a new one), and back when it is done: at most
 * the fragments out at once plus one, not a copy of the whole model, and no pages
 * faulted in anew at every send. */
static float *raw_take(dlc_learner *l, int p) {
    DLC_ASSERT(!l->raw[p]);
    float *d = l->raw_spare;
    l->raw_spare = NULL;
    if (!d) d = dlc_big_alloc((size_t)l->maxn * sizeof(float));
    return l->raw[p] = d;
}

static void raw_give(dlc_learner *l, int p) {
    float *d = l->raw[p];
    l->raw[p] = NULL;
    if (!l->raw_spare) l->raw_spare = d;
    else free(d);
}

static dlc_status send_contribution(dlc_learner *l, int p, double now) {
    lfrag *f = &l->f[p];
    dlc_status s = encode_busy(l, p, "learner: send");
    if (s != DLC_OK) return s;
    float *d = l->raw ? raw_take(l, p) : scratch_get(l);
    if (!d) return dlc_error(DLC_ERR_NOMEM, "learner: out of memory for fragment %d's outer gradient", p);
    gather(l, p, d, 0);
    const float *hat = l->hat + f->off;
    for (int64_t i = 0; i < f->n; i++) d[i] = hat[i] - d[i];
    int64_t w = f->enc_cap;
    if (!l->raw) {
        w = dlc_codec_encode(l->p.codec, &l->p.codec_params, d, f->n, f->enc, (size_t)f->enc_cap,
                             l->ef ? l->ef + f->off : NULL);
        if (w < 0) return (dlc_status)w; /* non-finite parameters: the codec names the element */
    }
    settle(l, f, &l->acc.sent_steps, &l->acc.sent_s, 0);
    dlc_learner_action a = {.type = l->raw ? DLC_LACT_ENCODE : DLC_LACT_SEND, .fragment = p};
    a.msg = (dlc_msg){.type = DLC_MSG_CONTRIBUTION, .learner = l->p.id, .fragment = p,
                      .version = f->base_version, .steps = f->c_steps, .tokens = f->c_tokens,
                      .step_time = l->step_ema, .transit = l->transit_ema, .codec = l->p.codec,
                      .payload = f->enc, .len = (size_t)w, .epoch = l->epoch[shard_of(l, p)], .incarnation = l->incarnation};
    if (l->raw) {
        a.delta = d, a.n = f->n, a.codec_params = l->p.codec_params;
        a.ef = l->ef ? l->ef + f->off : NULL;
        f->encoding = 1;
        l->encoding++;
    }
    f->sent_step = l->steps;
    f->sent_time = now;
    f->pend_fresh = 0; /* a merge waiting now came before this send */
    s = push(l, &a);
    if (s != DLC_OK && l->raw) { /* never handed out */
        f->encoding = 0;
        l->encoding--;
        raw_give(l, p);
    }
    return s;
}

/* Is fragment p due at the boundary that ends inner step `steps`? */
static int due_at(const dlc_learner *l, int p, int64_t steps) {
    int H = l->p.H;
    if (H <= 0 || l->p.dp) return 0;
    int64_t off = (int64_t)p * H / l->P, t = steps + l->phase;
    return t >= off && steps > 0 && (t - off) % H == 0;
}

static int due(const dlc_learner *l, int p) { return due_at(l, p, l->steps); }

int dlc_learner_step_reads(const dlc_learner *l, uint8_t *mask) {
    if (!l || !mask) return dlc_error(DLC_ERR_ARG, "learner_step_reads: NULL argument");
    int n = 0;
    for (int p = 0; p < l->P; p++) {
        const lfrag *f = &l->f[p];
        mask[p] = (uint8_t)(l->p.dp || due_at(l, p, l->steps + 1) || f->skipped || f->pending);
        n += mask[p];
    }
    return n;
}

dlc_status dlc_learner_step_done(dlc_learner *l, int64_t tokens, double seconds, double now) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_step_done: NULL learner");
    dlc_status s = learner_unpolled(l, "learner_step_done");
    if (s == DLC_OK) s = encode_busy(l, -1, "learner_step_done");
    if (s != DLC_OK) return s;
    if (l->state != DLC_LEARNER_TRAINING || l->replaying)
        return dlc_error(DLC_ERR_STATE, "learner_step_done: learner %d is %s, steps are allowed only while training%s",
                         l->p.id + 1, state_names[l->state],
                         l->replaying ? " (it is replaying: dlc_learner_replayed)" : "");
    if (tokens < 0 || !(seconds >= 0) || !isfinite(seconds))
        return dlc_error(DLC_ERR_ARG, "learner_step_done: tokens = %lld, seconds = %g: expected >= 0",
                         (long long)tokens, seconds);
    l->steps++;
    l->tokens += tokens;
    if (l->move_credit < MOVE_SHARE * (l->p.H / 2)) l->move_credit++;
    l->boundary_time = now;
    if (l->p.dp) { /* its gradient went out (a step its resync voided never gets here) */
        l->acc.sent_steps += 1, l->acc.sent_s += seconds;
    } else {
        for (int p = 0; p < l->P; p++) l->f[p].acc_steps += 1.0 / l->P, l->f[p].acc_s += seconds / l->P;
    }
    if (seconds > 0) l->step_ema = ema(l->step_ema, seconds, l->p.ema);
    for (int p = 0; p < l->P; p++) {
        l->f[p].c_steps++;
        l->f[p].c_tokens += tokens;
    }
    for (int p = 0; p < l->P && s == DLC_OK; p++)
        if (due(l, p) || l->f[p].skipped) {
            if (l->send_room == 0 && !l->p.blocking && !l->p.dp) { /* no room: it trains on, sent later */
                if (!l->f[p].skipped) l->deferred++;
                l->f[p].skipped = 1;
                continue;
            }
            l->f[p].skipped = 0;
            if (l->send_room > 0) l->send_room--;
            s = send_contribution(l, p, now);
        }
    if (s == DLC_OK) s = apply_due(l);
    update_blocking(l);
    return s;
}

dlc_status dlc_learner_step_begin(dlc_learner *l, double now) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_step_begin: NULL learner");
    dlc_status s = learner_unpolled(l, "learner_step_begin");
    if (s != DLC_OK) return s;
    if (l->state != DLC_LEARNER_TRAINING)
        return dlc_error(DLC_ERR_STATE, "learner_step_begin: learner %d is %s, steps are allowed only while training",
                         l->p.id + 1, state_names[l->state]);
    (void)now;
    return apply_due(l);
}

dlc_status dlc_learner_contribute(dlc_learner *l, int p, double now) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_contribute: NULL learner");
    dlc_status s = learner_unpolled(l, "learner_contribute");
    if (s != DLC_OK) return s;
    if (p < 0 || p >= l->P)
        return dlc_error(DLC_ERR_RANGE, "learner_contribute: fragment %d: expected 0..%d", p, l->P - 1);
    if ((s = encode_busy(l, p, "learner_contribute")) != DLC_OK) return s;
    if (l->p.dp || (l->state != DLC_LEARNER_TRAINING && l->state != DLC_LEARNER_WAITING))
        return dlc_error(DLC_ERR_STATE, "learner_contribute: learner %d is %s%s", l->p.id + 1, state_names[l->state],
                         l->p.dp ? " (data parallel sends gradients)" : "");
    s = send_contribution(l, p, now);
    update_blocking(l);
    return s;
}

dlc_status dlc_learner_flush(dlc_learner *l, double now, int *sent) {
    if (sent) *sent = 0;
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_flush: NULL learner");
    dlc_status s = learner_unpolled(l, "learner_flush");
    if (s == DLC_OK) s = encode_busy(l, -1, "learner_flush");
    if (s != DLC_OK) return s;
    if (l->p.dp || (l->state != DLC_LEARNER_TRAINING && l->state != DLC_LEARNER_WAITING))
        return dlc_error(DLC_ERR_STATE, "learner_flush: learner %d is %s%s", l->p.id + 1, state_names[l->state],
                         l->p.dp ? " (data parallel has no fragments)" : "");
    for (int p = 0; p < l->P && s == DLC_OK; p++) {
        lfrag *f = &l->f[p];
        /* trained since its last apply and not in flight: a fragment sent and not yet
         * merged back would be sent again from the same base, its steps counted twice */
        if (f->c_steps == 0 || f->sent_step >= 0) continue;
        s = send_contribution(l, p, now);
        if (s == DLC_OK && sent) (*sent)++;
    }
    update_blocking(l);
    return s;
}

dlc_status dlc_learner_gradient(dlc_learner *l, int64_t tokens, double now) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_gradient: NULL learner");
    dlc_status s = learner_unpolled(l, "learner_gradient");
    if (s != DLC_OK) return s;
    if (!l->p.dp || l->state != DLC_LEARNER_TRAINING || l->replaying)
        return dlc_error(DLC_ERR_STATE, "learner_gradient: learner %d is %s%s", l->p.id + 1, state_names[l->state],
                         !l->p.dp ? " and not data parallel" : l->replaying ? " and replaying (dlc_learner_replayed)" : "");
    gather(l, 0, (float *)(void *)l->grad_enc, 1);
    int64_t bad = -1;
    const float *g = (const float *)(void *)l->grad_enc;
    for (int64_t i = 0; i < l->n && bad < 0; i++)
        if (!isfinite(g[i])) bad = i;
    if (bad >= 0)
        return dlc_error(DLC_ERR_ARG, "learner_gradient: gradient element %lld is not finite", (long long)bad);
    dlc_learner_action a = {.type = DLC_LACT_SEND};
    a.msg = (dlc_msg){.type = DLC_MSG_GRADIENT, .learner = l->p.id, .version = l->steps + l->phase + 1, .tokens = tokens,
                      .step_time = l->step_ema, .codec = DLC_CODEC_F32, .payload = l->grad_enc,
                      .len = (size_t)l->n * sizeof(float), .epoch = l->epoch[0], .incarnation = l->incarnation};
    set_state(l, DLC_LEARNER_WAITING);
    return push(l, &a);
}

/* Notes what a resync of fragment p says about the others' rounds: they sent it `held`
 * seconds ago and send it again H steps after that, so our step k ends then. */
static void note_round(dlc_learner *l, const dlc_msg *m) {
    if (m->held >= 0 && m->step_time > 0 && l->p.H > 0 && (l->best_age < 0 || m->held < l->best_age)) {
        l->best_age = m->held;
        l->best_p = m->fragment;
        l->best_k = (int64_t)floor((l->p.H * m->step_time - m->held) / m->step_time + 0.5);
    }
}

/* After a whole resync (a join, or a reconnect: the model was taken whole, so nothing of
 * its own is lost by moving): the schedule step `run` the resync carried (the others'
 * median), moved to the nearest step in step with the others' rounds (t ≡ r mod H, from
 * the youngest round's age), at least r + H (t >= H > off_p: never before an offset).
 * Not r + H alone: a learner restarted late in the run would start its schedule over
 * and train on long after the others stopped; nor its own step after a reconnect: one
 * paused for a while would stay behind the others, out of step with their rounds. */
static dlc_status take_phase(dlc_learner *l, int64_t run) {
    int64_t t = run;
    if (l->best_age >= 0) {
        int64_t H = l->p.H, off = (int64_t)l->best_p * H / l->P;
        int64_t r = ((off - l->best_k) % H + H) % H;
        int64_t k = run - r >= 0 ? (run - r + H / 2) / H : 0;
        t = r + (k > 1 ? k : 1) * H;
    }
    int64_t was = l->steps + l->phase;
    l->phase = t - l->steps;
    if (l->state == DLC_LEARNER_JOINING || t == was) return DLC_OK;
    dlc_learner_action a = {.type = DLC_LACT_PHASE, .fragment = -1, .lag = t - was, .schedule = t};
    return push(l, &a);
}

/* The schedule moves on from `from` to `to` as a catch-up: each fragment due at a step
 * in (from, to] is sent at the next step_done, never skipped (learner.h). */
static void skip_schedule(dlc_learner *l, int64_t from, int64_t to) {
    int64_t H = l->p.H;
    if (H <= 0 || l->p.dp) return;
    for (int p = 0; p < l->P; p++) {
        int64_t off = (int64_t)p * H / l->P;
        int64_t s = from + 1 <= off ? off : off + ((from + 1 - off + H - 1) / H) * H; /* first due > from */
        if (s <= to) l->f[p].skipped = 1;
    }
    l->phase += to - from;
}

/* The schedule moves on by `lag` steps (1 to H/2) after a merge of fragment p showed the
 * learner's sends leaving that much after the others' (learner.h, "Catching up"): at
 * most once every H/P steps it trains, and within its budget of moves (MOVE_SHARE). */
static dlc_status move_on(dlc_learner *l, int p, int64_t lag) {
    int64_t H = l->p.H, every = H / l->P > 1 ? H / l->P : 1;
    if (lag < 1 || lag > H / 2) return DLC_OK;
    if (l->caught_up >= 0 && l->steps - l->caught_up < every) return DLC_OK;
    if (lag * MOVE_SHARE > l->move_credit) return DLC_OK;
    int64_t t = l->steps + l->phase;
    skip_schedule(l, t, t + lag);
    l->caught_up = l->steps;
    l->move_credit -= lag * MOVE_SHARE;
    dlc_learner_action a = {.type = DLC_LACT_PHASE, .fragment = p, .lag = lag, .schedule = l->steps + l->phase};
    return push(l, &a);
}

/* How many steps the learner's sends leave after those of the round's first contributor,
 * rounded so that moving on by it lands the learner at most a quarter step ahead of that
 * contributor (one that overshoots becomes the first, and the one it passed would then
 * move on in turn); 0 when nothing says.  In steps of its own step time:
 * - a merge of p it sent nothing to since it last applied p (`behind`): the round's
 *   first contribution left held + transit ago, and its own p is due d steps on,
 *   counted from where it is within its current step;
 * - a merge its contribution was in (age > 0): it arrived age - held after the first;
 * - a merge its contribution missed (sent, age 0): it left (now - held - transit) ago
 *   against the first's, a round ago at most.  (An older syncer states no age: then
 *   every contribution looks like the last, whose lag is about 0.)
 * Blocking rounds wait for every learner, so only the first case applies there. */
static int64_t lag_of(const dlc_learner *l, const lfrag *f, const dlc_msg *m, double now, int behind) {
    int64_t H = l->p.H;
    double step = l->step_ema, d;
    if (H < 2 || l->p.dp || m->held < 0 || !(step > 0) || !isfinite(m->held)) return 0;
    if (behind) {
        int64_t off = (int64_t)m->fragment * H / l->P, t = l->steps + l->phase;
        int64_t next = t + 1 <= off ? off : off + ((t + 1 - off + H - 1) / H) * H; /* next due after t */
        double within = l->boundary_time >= 0 ? (now - l->boundary_time) / step : 0;
        within = within > 0 ? (within < 1 ? within : 1) : 0;
        d = (double)(next - t) - within + (m->held + l->transit_ema) / step;
    } else if (l->p.blocking) {
        return 0; /* its rounds wait for everyone: the phase is theirs */
    } else if (m->age > 0) {
        d = (m->age - m->held) / step;
    } else {
        d = (f->sent_time - (now - m->held - l->transit_ema)) / step;
    }
    if (!(d < (double)H)) return 0;
    return (int64_t)floor(d + 0.25);
}

/* dp: the schedule asks the syncer for the averages after it (learner.h, "Replay"). */
static dlc_status ask_replay(dlc_learner *l) {
    int64_t t = l->steps + l->phase;
    l->replaying = 1;
    l->asked = l->asked_k = t;
    l->reask = 0;
    if (l->state != DLC_LEARNER_WAITING) set_state(l, DLC_LEARNER_WAITING); /* (a waiting gradient is void) */
    dlc_learner_action a = {.type = DLC_LACT_SEND};
    a.msg = (dlc_msg){.type = DLC_MSG_REPLAY, .learner = l->p.id, .version = t, .epoch = l->epoch[0],
                      .incarnation = l->incarnation};
    return push(l, &a);
}

/* dp: steps up to `to` whose averages the syncer no longer holds are skipped: the schedule
 * moves there, and the model is no longer the others' (action PHASE, unreplayed). */
static dlc_status skip_unreplayed(dlc_learner *l, int64_t to) {
    int64_t t = l->steps + l->phase;
    if (to <= t) return DLC_OK;
    l->phase += to - t;
    dlc_learner_action a = {.type = DLC_LACT_PHASE, .fragment = -1, .lag = to - t, .schedule = to, .unreplayed = to - t};
    return push(l, &a);
}

/* dp: a resync once joined.  A dp syncer holds no model (its payload is the initial one),
 * so the learner keeps its own; the resync tells the run's step (learner.h, "Replay"). */
static dlc_status dp_resync(dlc_learner *l, const dlc_msg *m) {
    int64_t run = m->steps, t = l->steps + l->phase;
    dlc_status s = DLC_OK;
    if (m->answers > 0) {
        /* "nothing held after k", the answer to a REPLAY of step k: taken only as the
         * answer to the last one asked (a second answer to a REPLAY asked twice, or one
         * that comes after the replay ended, changes nothing) */
        if (!l->replaying || m->answers - 1 != l->asked_k || l->state != DLC_LEARNER_WAITING) return DLC_OK;
        l->asked = l->asked_k = -1;
        l->replaying = 0;
        if (run > t) s = skip_unreplayed(l, run);
        set_state(l, DLC_LEARNER_TRAINING);
        return s;
    }
    if (l->replaying) {
        /* a refused gradient's resync (sent before the syncer read its REPLAY) or a
         * rejoin's, whose connection may have lost the REPLAY or its answers: it asks
         * again from where it is; answers to both are told apart by their steps */
        if (l->state != DLC_LEARNER_WAITING) {
            l->reask = 1; /* a replayed average is in the arena: asked at dlc_learner_replayed */
            return DLC_OK;
        }
        return ask_replay(l);
    }
    if (run > t && l->p.replay) return ask_replay(l); /* behind: catch up (a waiting gradient is void) */
    /* its gradient will not be averaged (refused, or its round lost): it takes the run's
     * step and steps again */
    l->phase = run - l->steps;
    if (l->state == DLC_LEARNER_WAITING) set_state(l, DLC_LEARNER_TRAINING);
    return s;
}

/* Where an arriving merge of f waits for its apply: the stash (pend), or, while JOINING
 * with f not yet received (it is applied at once, and nothing reads f's base until
 * then), the base Θ̂ itself: a join then writes no stash, whose pages a first join
 * would otherwise fault in all at once (a rejoin, a newer resync of f and dp use pend). */
static float *stash_of(const dlc_learner *l, const lfrag *f) {
    int in_base = l->state == DLC_LEARNER_JOINING && !f->received && !f->pending && !l->p.dp;
    return (in_base ? l->hat : l->pend) + f->off;
}

/* A FRAGMENT is checked and decoded, then only stashed (pend): the arena is written at
 * the next step boundary (learner.h), except while JOINING, when the learner is not
 * stepping and a resync is taken at once. */
static dlc_status receive_fragment(dlc_learner *l, const dlc_msg *m, const float *values, int64_t nvalues,
                                   int lend, double now) {
    if (m->fragment < 0 || m->fragment >= l->P)
        return dlc_error(DLC_ERR_FORMAT, "learner %d: FRAGMENT %d: expected a fragment in 0..%d", l->p.id + 1,
                         m->fragment, l->P - 1);
    lfrag *f = &l->f[m->fragment];
    int resync = (m->flags & DLC_MSG_RESYNC) != 0;
    if (m->version < 0)
        return dlc_error(DLC_ERR_FORMAT, "learner %d: FRAGMENT %d version %lld: expected >= 0", l->p.id + 1,
                         m->fragment, (long long)m->version);
    if (!resync && (m->version <= f->base_version || (f->pending && m->version <= f->pend_version)))
        return DLC_OK; /* older than what we hold: late or duplicate */
    if (!resync && l->state == DLC_LEARNER_JOINING) return DLC_OK; /* the resync will follow */
    if (m->codec != DLC_CODEC_F32 && m->codec != DLC_CODEC_BF16)
        return dlc_error(DLC_ERR_FORMAT, "learner %d: FRAGMENT %d codec %s: expected f32 or bf16", l->p.id + 1,
                         m->fragment, dlc_codec_name(m->codec) ? dlc_codec_name(m->codec) : "(unknown)");
    dlc_status s = DLC_OK;
    if (values && nvalues != f->n)
        return dlc_error(DLC_ERR_FORMAT, "learner %d: FRAGMENT %d decoded to %lld values: expected %lld", l->p.id + 1,
                         m->fragment, (long long)nvalues, (long long)f->n);
    /* lent (dlc_learner_receive_lent): kept where the driver holds it until applied, so
     * only checked now; not while JOINING into the base (applied at once) nor in dp */
    int in_base = l->state == DLC_LEARNER_JOINING && !f->received && !f->pending && !l->p.dp;
    lend = lend && !in_base && !l->p.dp;
    if (!lend && !in_base && !l->pend && !(l->pend = malloc((size_t)l->n * sizeof(float))))
        return dlc_error(DLC_ERR_NOMEM, "learner %d: out of memory for the stash of merges", l->p.id + 1);
    if (lend) {
        if (!values && (s = dlc_codec_validate(m->codec, NULL, m->payload, m->len, f->n)) != DLC_OK) return s;
    } else if (values) { /* decoded by the driver (dlc_learner_receive_decoded) */
    } else if (f->pending || (l->p.dp && l->state != DLC_LEARNER_JOINING)) {
        /* decoded into scratch first: a malformed payload leaves the waiting one intact */
        if (!scratch_get(l))
            return dlc_error(DLC_ERR_NOMEM, "learner %d: out of memory decoding fragment %d", l->p.id + 1, m->fragment);
        if ((s = dlc_codec_decode(m->codec, NULL, m->payload, m->len, l->scratch, f->n)) != DLC_OK) return s;
        values = l->scratch;
    } else { /* nothing waits in p's stash: decoded into it (a refusal leaves p as it was) */
        if ((s = dlc_codec_decode(m->codec, NULL, m->payload, m->len, stash_of(l, f), f->n)) != DLC_OK) return s;
        values = stash_of(l, f);
    }
    if (resync && m->steps > l->run_seen) l->run_seen = m->steps;
    if (l->p.dp && l->state != DLC_LEARNER_JOINING) return dp_resync(l, m);
    if (lend) {
        f->lent_v = values, f->lent_b = values ? NULL : m->payload;
        f->lent_len = m->len, f->lent_codec = m->codec;
    } else {
        if (values != stash_of(l, f)) memcpy(stash_of(l, f), values, (size_t)f->n * sizeof(float));
        f->lent_v = NULL, f->lent_b = NULL; /* this one replaces a lent one waiting */
    }
    if (!resync && f->sent_step >= 0) {
        /* the links' share of the round trip, measured on arrival (not on application, which
         * waits for tau steps by design): what the syncer's grace window must leave room for */
        double transit = (now - f->sent_time) - m->held;
        if (transit >= 0) l->transit_ema = ema(l->transit_ema, transit, l->p.ema);
    }
    int behind = !resync && f->sent_step < 0 && l->state != DLC_LEARNER_JOINING;
    /* a newer merge over a waiting resync is taken whole too: the resync said our own
     * copy of this fragment is not to be mixed in */
    f->in_base = !lend && stash_of(l, f) == l->hat + f->off;
    f->pend_resync = resync || (f->pending && f->pend_resync);
    f->pend_fresh = f->sent_step >= 0;
    f->pending = 1;
    f->pend_version = m->version;
    if (l->state != DLC_LEARNER_JOINING) {
        if (resync && m->steps > 0 && !f->received) {
            /* a whole resync after a reconnect (a single resync, a refused contribution's,
             * carries no run step): once every fragment is in, back in step with the others */
            int k = shard_of(l, m->fragment);
            if (l->resynced[k] == 0) l->best_age = -1, l->resync_run[k] = m->steps;
            note_round(l, m);
            f->received = 1;
            if (++l->resynced[k] == l->owned[k]) { /* (of that shard, when sharded) */
                l->resynced[k] = 0;
                for (int q = 0; q < l->P; q++)
                    if (shard_of(l, q) == k) l->f[q].received = 0;
                s = take_phase(l, l->resync_run[k]);
            }
        } else if (!resync) {
            s = move_on(l, m->fragment, lag_of(l, f, m, now, behind));
        }
        update_blocking(l); /* a blocked learner may go on: the apply waits for step_begin */
        return s;
    }
    s = apply(l, m->fragment);
    if (s != DLC_OK || f->received) return s;
    if (l->joined == 0 && m->steps > 0) l->phase = m->steps;
    note_round(l, m);
    f->received = 1;
    if (++l->joined == l->P) {
        (void)take_phase(l, l->phase); /* l->steps = 0 while JOINING: no action */
        for (int q = 0; q < l->P; q++) l->f[q].received = 0;
        set_state(l, DLC_LEARNER_TRAINING);
        l->next_heartbeat = l->p.heartbeat > 0 ? now + l->p.heartbeat : INFINITY;
    }
    return DLC_OK;
}

static dlc_status receive_gradient(dlc_learner *l, const dlc_msg *m) {
    if (!l->p.dp) return DLC_OK;
    if (m->codec != DLC_CODEC_F32)
        return dlc_error(DLC_ERR_FORMAT, "learner %d: GRADIENT_AVG codec %s: expected f32", l->p.id + 1,
                         dlc_codec_name(m->codec) ? dlc_codec_name(m->codec) : "(unknown)");
    if (m->version < 1 || m->steps < 0 || (m->steps > 0 && m->steps < m->version))
        return dlc_error(DLC_ERR_FORMAT, "learner %d: GRADIENT_AVG of step %lld ending a replay at %lld: expected a "
                         "step >= 1 and an end of 0 or >= the step", l->p.id + 1, (long long)m->version,
                         (long long)m->steps);
    int64_t t = l->steps + l->phase;
    int answer = m->steps > 0, first = 0;
    if (l->state != DLC_LEARNER_WAITING || (answer && !l->replaying)) return DLC_OK;
    if (m->version != t + 1) {
        /* not the one due: late, from before a restart, or (replaying) a round's average
         * ahead of the answers; an answer that starts past it: the gap was lost */
        first = answer && l->replaying && l->asked >= 0 && m->version > t + 1;
        if (!first) {
            if (m->version > l->run_seen) l->run_seen = m->version;
            /* an answer to the REPLAY asked (its steps are past it) that a round's average
             * already gave: the answers are coming, in order from here */
            if (answer && m->version <= t && m->version > l->asked) l->asked = -1;
            return DLC_OK;
        }
    }
    dlc_status s = dlc_codec_decode(DLC_CODEC_F32, NULL, m->payload, m->len, l->pend, l->n);
    if (s != DLC_OK) return s;
    if (m->version > l->run_seen) l->run_seen = m->version;
    if (answer) {
        l->asked = -1;
        if (m->steps > l->answer_last) l->answer_last = m->steps;
        if (m->steps > l->run_seen) l->run_seen = m->steps;
    }
    if (first && (s = skip_unreplayed(l, m->version - 1)) != DLC_OK) return s;
    scatter_mix(l, 0, l->pend, 0.0f, 1);
    set_state(l, DLC_LEARNER_TRAINING);
    dlc_learner_action a = {.type = DLC_LACT_GRADIENT_READY, .version = m->version};
    return push(l, &a);
}

static dlc_status receive(dlc_learner *l, const dlc_msg *m, const float *values, int64_t nvalues, int lend,
                          double now) {
    if (!l || !m) return dlc_error(DLC_ERR_ARG, "learner_receive: NULL argument");
    dlc_status s = learner_unpolled(l, "learner_receive");
    if (s != DLC_OK) return s;
    if (l->state == DLC_LEARNER_STOPPED) return DLC_OK;
    /* the epoch of the shard that owns the fragment (one syncer: shard 0) */
    int k = m->type == DLC_MSG_FRAGMENT && m->fragment >= 0 && m->fragment < l->P ? shard_of(l, m->fragment) : 0;
    if ((m->type == DLC_MSG_FRAGMENT || m->type == DLC_MSG_GRADIENT_AVG) && m->epoch != 0 && m->epoch < l->epoch[k])
        return dlc_error(DLC_ERR_FORMAT, "learner %d: a %s of syncer epoch %lld, but it follows epoch %lld%s: a previous "
                         "syncer incarnation's, refused", l->p.id + 1, dlc_msg_type_name(m->type), (long long)m->epoch,
                         (long long)l->epoch[k], l->shards > 1 ? " of that fragment's shard" : "");
    if ((m->type == DLC_MSG_FRAGMENT || m->type == DLC_MSG_GRADIENT_AVG) && m->learner != l->p.id)
        return dlc_error(DLC_ERR_FORMAT, "learner %d: a %s addressed to learner %d, refused", l->p.id + 1,
                         dlc_msg_type_name(m->type), m->learner + 1);
    switch (m->type) {
    case DLC_MSG_FRAGMENT:
    case DLC_MSG_GRADIENT_AVG:
        s = m->type == DLC_MSG_FRAGMENT ? receive_fragment(l, m, values, nvalues, lend, now) : receive_gradient(l, m);
        if (s == DLC_OK && m->epoch > l->epoch[k]) l->epoch[k] = m->epoch; /* the syncer (shard) restarted */
        return s;
    default:
        return dlc_error(DLC_ERR_FORMAT, "learner %d: a %s message: a learner takes fragment and gradient_avg",
                         l->p.id + 1, dlc_msg_type_name(m->type) ? dlc_msg_type_name(m->type) : "(unknown)");
    }
}

dlc_status dlc_learner_receive(dlc_learner *l, const dlc_msg *m, double now) {
    return receive(l, m, NULL, 0, 0, now);
}

dlc_status dlc_learner_receive_decoded(dlc_learner *l, const dlc_msg *m, const float *values, int64_t n, double now) {
    if (m && m->type == DLC_MSG_FRAGMENT && !values)
        return dlc_error(DLC_ERR_ARG, "learner_receive_decoded: a FRAGMENT without its values");
    return receive(l, m, m && m->type == DLC_MSG_FRAGMENT ? values : NULL, n, 0, now);
}

dlc_status dlc_learner_receive_lent(dlc_learner *l, const dlc_msg *m, const float *values, int64_t n, double now) {
    int frag = m && m->type == DLC_MSG_FRAGMENT;
    return receive(l, m, frag ? values : NULL, frag && values ? n : 0, 1, now);
}

const void *dlc_learner_lent(const dlc_learner *l, int p) {
    if (!l || p < 0 || p >= l->P) return NULL;
    const lfrag *f = &l->f[p];
    return f->lent_v ? (const void *)f->lent_v : (const void *)f->lent_b;
}

double dlc_learner_expiry(const dlc_learner *l) {
    if (!l || l->state == DLC_LEARNER_STOPPED || l->state == DLC_LEARNER_JOINING) return INFINITY;
    return l->next_heartbeat;
}

dlc_status dlc_learner_handle_expiry(dlc_learner *l, double now) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_handle_expiry: NULL learner");
    dlc_status s = learner_unpolled(l, "learner_handle_expiry");
    if (s != DLC_OK) return s;
    if (!isfinite(now)) return dlc_error(DLC_ERR_ARG, "learner_handle_expiry: now = %g: expected a finite time", now);
    if (now < dlc_learner_expiry(l)) return DLC_OK;
    dlc_learner_action a = {.type = DLC_LACT_SEND};
    a.msg = (dlc_msg){.type = DLC_MSG_HEARTBEAT, .learner = l->p.id, .steps = l->steps + l->phase, .tokens = l->tokens,
                      .step_time = l->step_ema, .transit = l->transit_ema, .codec = DLC_CODEC_F32,
                      .epoch = l->epoch[0], .incarnation = l->incarnation};
    /* the next beat on the grid next + k·heartbeat after now, in O(1) and finite even when
     * the period is below the clock's precision (now + heartbeat == now) */
    double hb = l->p.heartbeat, next = l->next_heartbeat + hb;
    if (!(next > now)) next = l->next_heartbeat + (floor((now - l->next_heartbeat) / hb) + 1) * hb;
    if (!(next > now)) next = now + hb;
    if (!(next > now)) next = nextafter(now, INFINITY);
    DLC_ASSERT(next > now);
    l->next_heartbeat = next;
    return push(l, &a);
}

void dlc_learner_stop(dlc_learner *l) {
    if (!l || l->state == DLC_LEARNER_STOPPED) return;
    for (int i = 0; i < l->qlen; i++) { /* an ENCODE never polled lent nothing out */
        const dlc_learner_action *a = &l->q[(l->qhead + i) % l->qcap];
        if (a->type == DLC_LACT_ENCODE) {
            l->f[a->fragment].encoding = 0, l->encoding--;
            raw_give(l, a->fragment);
            if (l->f[a->fragment].ef_stale) ef_reset(l, &l->f[a->fragment]);
        }
    }
    l->qhead = l->qlen = 0; /* a dead learner sends nothing (learner.h) */
    for (int p = 0; p < l->P; p++) settle(l, &l->f[p], &l->acc.discarded_steps, &l->acc.discarded_s, 0);
    set_state(l, DLC_LEARNER_STOPPED);
}

dlc_status dlc_learner_restart(dlc_learner *l, double now) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_restart: NULL learner");
    if (l->state != DLC_LEARNER_STOPPED)
        return dlc_error(DLC_ERR_STATE, "learner_restart: learner %d is %s, expected stopped", l->p.id + 1,
                         state_names[l->state]);
    dlc_status busy = encode_busy(l, -1, "learner_restart");
    if (busy != DLC_OK) return busy;
    DLC_ASSERT(l->qlen == 0); /* stop emptied it and STOPPED queues nothing */
    l->incarnation++;
    for (int p = 0; p < l->P; p++) {
        lfrag *f = &l->f[p];
        f->base_version = -1;
        f->c_steps = f->c_tokens = 0;
        f->sent_step = -1;
        f->pending = f->pend_resync = f->pend_fresh = f->received = f->skipped = f->in_base = f->ef_stale = 0;
        f->lent_v = NULL, f->lent_b = NULL; /* the driver's again */
    }
    if (l->ef) memset(l->ef, 0, (size_t)l->n * sizeof(float));
    l->steps = l->tokens = 0;
    l->phase = 0;
    l->best_age = -1;
    l->caught_up = -1;
    l->move_credit = MOVE_SHARE * (l->p.H / 2);
    l->run_seen = l->answer_last = 0;
    l->replaying = 0;
    l->asked = l->asked_k = -1;
    l->reask = 0;
    l->best_k = 0;
    l->best_p = 0;
    l->step_ema = l->transit_ema = 0;
    l->boundary_time = -1;
    l->joined = 0;
    memset(l->resynced, 0, sizeof l->resynced);
    l->next_heartbeat = INFINITY;
    (void)now;
    set_state(l, DLC_LEARNER_JOINING);
    return DLC_OK;
}

/* learner.h: each fragment back to its last global value (a stashed merge taken whole),
 * counters and error feedback restarted, what was sent left outstanding. */
dlc_status dlc_learner_rollback(dlc_learner *l, double now) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_rollback: NULL learner");
    dlc_status s = learner_unpolled(l, "learner_rollback");
    if (s == DLC_OK) s = encode_busy(l, -1, "learner_rollback");
    if (s != DLC_OK) return s;
    if (l->state != DLC_LEARNER_TRAINING && l->state != DLC_LEARNER_WAITING)
        return dlc_error(DLC_ERR_STATE, "learner_rollback: learner %d is %s: expected training or waiting (it holds "
                         "the whole global model only once joined)", l->p.id + 1, state_names[l->state]);
    if (l->p.dp)
        return dlc_error(DLC_ERR_STATE, "learner_rollback: learner %d is data parallel: its last global model is its "
                         "last resync, not the model the others step on (a restart resyncs it)", l->p.id + 1);
    for (int p = 0; p < l->P && s == DLC_OK; p++) {
        lfrag *f = &l->f[p];
        DLC_ASSERT(f->base_version >= 0); /* joined: every fragment was received */
        settle(l, f, &l->acc.discarded_steps, &l->acc.discarded_s, 0); /* the trajectory it discards */
        if (f->pending) {
            f->pend_resync = 1;
            s = apply(l, p);
        } else {
            scatter_mix(l, p, l->hat + f->off, 0.0f, 0);
            f->c_steps = f->c_tokens = 0;
        }
    }
    if (s != DLC_OK) return s;
    if (l->ef) memset(l->ef, 0, (size_t)l->n * sizeof(float));
    l->rollbacks++;
    update_blocking(l);
    (void)now;
    return DLC_OK;
}

dlc_status dlc_learner_encode(const dlc_learner_action *a, uint8_t *out, size_t cap, size_t *len) {
    if (len) *len = 0;
    if (!a || a->type != DLC_LACT_ENCODE || !a->delta || (!out && cap))
        return dlc_error(DLC_ERR_ARG, "learner_encode: expected an ENCODE action and an output buffer");
    if (cap < a->msg.len)
        return dlc_error(DLC_ERR_RANGE, "learner_encode: fragment %d needs %zu bytes, the buffer holds %zu",
                         a->fragment, a->msg.len, cap);
    int64_t w = dlc_codec_encode(a->msg.codec, &a->codec_params, a->delta, a->n, out, cap, a->ef);
    if (w < 0) return (dlc_status)w; /* a non-finite value: the codec names the element */
    if (len) *len = (size_t)w;
    return DLC_OK;
}

dlc_status dlc_learner_encoded(dlc_learner *l, int p) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_encoded: NULL learner");
    if (p < 0 || p >= l->P || !l->f[p].encoding)
        return dlc_error(DLC_ERR_STATE, "learner_encoded: learner %d has no encode of fragment %d out", l->p.id + 1, p);
    l->f[p].encoding = 0;
    l->encoding--;
    raw_give(l, p);
    if (l->f[p].ef_stale) ef_reset(l, &l->f[p]);
    return DLC_OK;
}

int dlc_learner_encoding(const dlc_learner *l) { return l ? l->encoding : 0; }

int64_t dlc_learner_rollbacks(const dlc_learner *l) { return l ? l->rollbacks : 0; }

void dlc_learner_set_send_room(dlc_learner *l, int room) {
    if (l) l->send_room = room < 0 ? -1 : room;
}

int64_t dlc_learner_deferred(const dlc_learner *l) { return l ? l->deferred : 0; }

int dlc_learner_sends_due(const dlc_learner *l) {
    int n = 0;
    for (int p = 0; l && !l->p.dp && p < l->P; p++) n += due_at(l, p, l->steps + 1) || l->f[p].skipped;
    return n;
}

dlc_learner_account dlc_learner_get_account(const dlc_learner *l) {
    dlc_learner_account a;
    memset(&a, 0, sizeof a);
    if (!l) return a;
    a = l->acc;
    for (int p = 0; p < l->P; p++) a.unsent_steps += l->f[p].acc_steps, a.unsent_s += l->f[p].acc_s;
    return a;
}

dlc_learner_state dlc_learner_state_of(const dlc_learner *l) { return l ? l->state : DLC_LEARNER_STOPPED; }
int dlc_learner_id(const dlc_learner *l) { return l ? l->p.id : -1; }
int64_t dlc_learner_steps(const dlc_learner *l) { return l ? l->steps : 0; }
int64_t dlc_learner_tokens(const dlc_learner *l) { return l ? l->tokens : 0; }
int64_t dlc_learner_base_version(const dlc_learner *l, int p) {
    return l && p >= 0 && p < l->P ? l->f[p].base_version : -1;
}
int64_t dlc_learner_fragment_steps(const dlc_learner *l, int p) {
    return l && p >= 0 && p < l->P ? l->f[p].c_steps : 0;
}
int64_t dlc_learner_fragment_tokens(const dlc_learner *l, int p) {
    return l && p >= 0 && p < l->P ? l->f[p].c_tokens : 0;
}
double dlc_learner_step_time(const dlc_learner *l) { return l ? l->step_ema : 0; }
int64_t dlc_learner_schedule_step(const dlc_learner *l) { return l ? l->steps + l->phase : 0; }

int dlc_learner_replaying(const dlc_learner *l) { return l ? l->replaying : 0; }

dlc_status dlc_learner_replay(dlc_learner *l, double now) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_replay: NULL learner");
    dlc_status s = learner_unpolled(l, "learner_replay");
    if (s != DLC_OK) return s;
    if (!l->p.dp || !l->p.replay || l->state != DLC_LEARNER_TRAINING || l->replaying)
        return dlc_error(DLC_ERR_STATE, "learner_replay: learner %d is %s%s%s%s: expected a data-parallel learner "
                         "training, whose syncer replays", l->p.id + 1, state_names[l->state],
                         l->p.dp ? "" : ", not data parallel", l->p.replay ? "" : ", its syncer does not replay",
                         l->replaying ? ", already replaying" : "");
    (void)now;
    return l->steps + l->phase < l->run_seen ? ask_replay(l) : DLC_OK;
}

dlc_status dlc_learner_replayed(dlc_learner *l, double now) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_replayed: NULL learner");
    dlc_status s = learner_unpolled(l, "learner_replayed");
    if (s != DLC_OK) return s;
    if (!l->replaying || l->state != DLC_LEARNER_TRAINING)
        return dlc_error(DLC_ERR_STATE, "learner_replayed: learner %d is %s%s: expected a replayed average in its "
                         "grad arena (GRADIENT_READY while replaying)", l->p.id + 1, state_names[l->state],
                         l->replaying ? "" : " and not replaying");
    (void)now;
    int64_t t = ++l->phase + l->steps;
    if (t >= l->run_seen) {
        l->replaying = 0;
        l->asked = l->asked_k = -1;
        l->reask = 0;
        return DLC_OK;
    }
    if (l->answer_last > t && !l->reask) {
        set_state(l, DLC_LEARNER_WAITING); /* the next answer is on its way */
        return DLC_OK;
    }
    return ask_replay(l);
}

dlc_status dlc_learner_set_schedule_step(dlc_learner *l, int64_t step) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_set_schedule_step: NULL learner");
    if (step < 0)
        return dlc_error(DLC_ERR_ARG, "learner_set_schedule_step: step = %lld: expected >= 0", (long long)step);
    if (l->state != DLC_LEARNER_TRAINING)
        return dlc_error(DLC_ERR_STATE, "learner_set_schedule_step: learner %d is %s, expected training", l->p.id + 1,
                         state_names[l->state]);
    l->phase = step - l->steps;
    return DLC_OK;
}

dlc_status dlc_learner_skip_to(dlc_learner *l, int64_t step) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_skip_to: NULL learner");
    int64_t t = l->steps + l->phase;
    if (step < t)
        return dlc_error(DLC_ERR_ARG, "learner_skip_to: step = %lld: expected >= the schedule step %lld (a catch-up "
                         "only moves on)", (long long)step, (long long)t);
    if (l->state != DLC_LEARNER_TRAINING)
        return dlc_error(DLC_ERR_STATE, "learner_skip_to: learner %d is %s, expected training", l->p.id + 1,
                         state_names[l->state]);
    skip_schedule(l, t, step);
    return DLC_OK;
}
int dlc_learner_outstanding(const dlc_learner *l) {
    int n = 0;
    for (int p = 0; l && p < l->P; p++) n += l->f[p].sent_step >= 0 && !(l->f[p].pending && l->f[p].pend_fresh);
    return n;
}
double dlc_learner_transit(const dlc_learner *l) { return l ? l->transit_ema : 0; }
int64_t dlc_learner_incarnation(const dlc_learner *l) { return l ? l->incarnation : 0; }
int64_t dlc_learner_epoch(const dlc_learner *l) { return l ? l->epoch[0] : 0; }
int64_t dlc_learner_shard_epoch(const dlc_learner *l, int k) {
    return l && k >= 0 && k < l->shards ? l->epoch[k] : 0;
}
int dlc_learner_shards(const dlc_learner *l) { return l ? l->shards : 0; }
int dlc_learner_owner(const dlc_learner *l, int p) { return l && p >= 0 && p < l->P ? shard_of(l, p) : -1; }

dlc_status dlc_learner_set_shards(dlc_learner *l, int shards, const int *owner) {
    if (!l) return dlc_error(DLC_ERR_ARG, "learner_set_shards: NULL learner");
    if (shards < 1 || shards > DLC_LEARNER_SHARDS_MAX || (shards > 1 && !owner))
        return dlc_error(DLC_ERR_ARG, "learner_set_shards: %d shards%s: expected 1..%d, with an owner per fragment "
                         "when more than 1", shards, owner ? "" : " without owners", DLC_LEARNER_SHARDS_MAX);
    if (shards > 1 && l->p.dp)
        return dlc_error(DLC_ERR_ARG, "learner_set_shards: %d shards in data parallel: expected 1 (one fragment)",
                         shards);
    if (l->state != DLC_LEARNER_JOINING || l->joined || l->steps)
        return dlc_error(DLC_ERR_STATE, "learner_set_shards: learner %d has started: expected it before the first "
                         "event", l->p.id + 1);
    int count[DLC_LEARNER_SHARDS_MAX] = {0};
    for (int p = 0; shards > 1 && p < l->P; p++) {
        if (owner[p] < 0 || owner[p] >= shards)
            return dlc_error(DLC_ERR_ARG, "learner_set_shards: fragment %d owned by shard %d: expected 0..%d", p,
                             owner[p], shards - 1);
        count[owner[p]]++;
    }
    for (int k = 0; k < shards && shards > 1; k++)
        if (!count[k]) return dlc_error(DLC_ERR_ARG, "learner_set_shards: shard %d owns no fragment", k);
    int *o = NULL;
    if (shards > 1) {
        if (!(o = malloc((size_t)l->P * sizeof *o))) return dlc_error(DLC_ERR_NOMEM, "learner_set_shards: out of memory");
        memcpy(o, owner, (size_t)l->P * sizeof *o);
    }
    free(l->owner);
    l->owner = o;
    l->shards = shards;
    memset(l->owned, 0, sizeof l->owned);
    for (int p = 0; p < l->P; p++) l->owned[shard_of(l, p)]++;
    return DLC_OK;
}
