/* syncer.c - the syncer as a sans-IO state machine (syncer.h, docs/sim.md).
 *
 * One sfrag per fragment: its outer state (Θ, momentum, ring), a merge accumulator, the
 * round (state, one slot per learner with what its contribution's report and account
 * need) and the encoded Θ_p last sent.  A contribution is checked, decoded, re-anchored
 * at the current Θ_p (which no other event moves while the round is open) and added to
 * the accumulator when it arrives, so the syncer never stores contributions: its memory
 * does not grow with the learners, and closing a round cannot fail on a learner's data.
 * Sums run in arrival order, which a replay feeds again in the same order (bit for bit).
 * What a stored contribution allowed and an accumulated one does not: taking it back.
 * So a contribution stays in its round when its sender is lost or restarts, and a
 * learner that sends p again while its earlier contribution waits in p's open round has
 * the newer one held (its encoded bytes, one per learner and fragment, a newer one
 * replacing it) to open p's next round, re-anchored there like any late one. */
#include <math.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/mem.h"
#include "diloco/syncer.h"
#include "syncer_internal.h"

static const char *const round_names[] = {"idle", "collecting", "grace"};
_Static_assert(sizeof round_names / sizeof round_names[0] == DLC_ROUND_STATE_COUNT, "one name per round state");
static const char *const grace_names[] = {"adaptive", "off", "fixed"};
_Static_assert(sizeof grace_names / sizeof grace_names[0] == DLC_GRACE_MODE_COUNT, "one name per grace mode");
static const char *const weighting_names[] = {"tokens2_steps", "tokens", "uniform"};
_Static_assert(sizeof weighting_names / sizeof weighting_names[0] == DLC_WEIGHTING_COUNT, "one name per weighting");
static const char *const reject_names[] = {"stale", "nonfinite", "malformed", "epoch", "incarnation"};
_Static_assert(sizeof reject_names / sizeof reject_names[0] == DLC_REJECT_REASON_COUNT, "one name per reason");

const char *dlc_round_state_name(dlc_round_state s) {
    return (unsigned)s < DLC_ROUND_STATE_COUNT ? round_names[s] : NULL;
}
const char *dlc_grace_mode_name(dlc_grace_mode m) {
    return (unsigned)m < DLC_GRACE_MODE_COUNT ? grace_names[m] : NULL;
}
const char *dlc_weighting_name(dlc_weighting w) {
    return (unsigned)w < DLC_WEIGHTING_COUNT ? weighting_names[w] : NULL;
}
const char *dlc_reject_reason_name(dlc_reject_reason r) {
    return (unsigned)r < DLC_REJECT_REASON_COUNT ? reject_names[r] : NULL;
}

dlc_status dlc_weighting_parse(const char *name, dlc_weighting *out) {
    for (int i = 0; name && out && i < DLC_WEIGHTING_COUNT; i++)
        if (strcmp(name, weighting_names[i]) == 0) return *out = (dlc_weighting)i, DLC_OK;
    return dlc_error(DLC_ERR_ARG, "weighting = \"%s\": expected tokens2_steps, tokens or uniform",
                     name ? name : "(null)");
}

dlc_syncer_params dlc_syncer_default_params(void) {
    dlc_syncer_params p;
    memset(&p, 0, sizeof p);
    p.learners = 1;
    p.quorum = 1;
    p.grace = DLC_GRACE_ADAPTIVE;
    p.grace_gamma = 0.8;
    p.ema = 0.5;
    p.tau = 2;
    p.weighting = DLC_WEIGHT_TOKENS2_STEPS;
    p.merge = DLC_MERGE_RDA;
    p.outer = dlc_fragstate_default_params();
    p.codec_up = DLC_CODEC_F32;
    p.codec_params = dlc_codec_default_params();
    p.codec_down = DLC_CODEC_F32;
    p.epoch = 1;
    return p;
}

dlc_status dlc_syncer_params_check(const dlc_syncer_params *p) {
    if (!p) return dlc_error(DLC_ERR_ARG, "syncer: params is NULL");
    if (p->learners < 1 || p->learners > DLC_SYNCER_LEARNERS_MAX)
        return dlc_error(DLC_ERR_ARG, "syncer: learners = %d: expected 1..%d", p->learners, DLC_SYNCER_LEARNERS_MAX);
    if (p->dp != 0 && p->dp != 1) return dlc_error(DLC_ERR_ARG, "syncer: dp = %d: expected 0 or 1", p->dp);
    if (p->dp_history < 0)
        return dlc_error(DLC_ERR_ARG, "syncer: dp_history = %d: expected >= 0 (0: as many as 512 MiB hold)",
                         p->dp_history);
    if (p->quorum < 0 || p->quorum > p->learners)
        return dlc_error(DLC_ERR_ARG, "syncer: quorum = %d but learners = %d: quorum must be <= the number of "
                         "learners (0 = every live learner)", p->quorum, p->learners);
    if ((unsigned)p->grace >= DLC_GRACE_MODE_COUNT)
        return dlc_error(DLC_ERR_ARG, "syncer: grace mode %d: expected adaptive, off or fixed", (int)p->grace);
    if (!(p->grace_s >= 0) || !isfinite(p->grace_s))
        return dlc_error(DLC_ERR_ARG, "syncer: grace_s = %g: expected seconds >= 0", p->grace_s);
    if (!(p->grace_gamma > 0 && p->grace_gamma <= 1))
        return dlc_error(DLC_ERR_ARG, "syncer: grace_gamma = %g: expected a number in (0, 1]", p->grace_gamma);
    if (!(p->ema > 0 && p->ema <= 1))
        return dlc_error(DLC_ERR_ARG, "syncer: ema = %g: expected a number in (0, 1]", p->ema);
    if (p->tau < 0) return dlc_error(DLC_ERR_ARG, "syncer: tau = %d: expected >= 0", p->tau);
    if ((unsigned)p->weighting >= DLC_WEIGHTING_COUNT)
        return dlc_error(DLC_ERR_ARG, "syncer: weighting %d: expected tokens2_steps, tokens or uniform",
                         (int)p->weighting);
    if ((unsigned)p->merge >= DLC_MERGE_MODE_COUNT)
        return dlc_error(DLC_ERR_ARG, "syncer: merge %d: expected rda or mean", (int)p->merge);
    dlc_status s = dlc_fragstate_params_check(&p->outer);
    if (s == DLC_OK) s = dlc_codec_check(p->codec_up, &p->codec_params);
    if (s != DLC_OK) return s;
    if (p->codec_down != DLC_CODEC_F32 && p->codec_down != DLC_CODEC_BF16)
        return dlc_error(DLC_ERR_ARG, "syncer: codec_down = %s: expected f32 or bf16",
                         dlc_codec_name(p->codec_down) ? dlc_codec_name(p->codec_down) : "(unknown)");
    if (!(p->timeout >= 0) || !isfinite(p->timeout))
        return dlc_error(DLC_ERR_ARG, "syncer: timeout = %g: expected seconds >= 0 (0 = never)", p->timeout);
    if (p->epoch < 1)
        return dlc_error(DLC_ERR_ARG, "syncer: epoch = %lld: expected >= 1 (the epoch this syncer incarnation stamps)",
                         (long long)p->epoch);
    return DLC_OK;
}

/* The one place a round's state changes. */
static void set_round_state(sfrag *f, dlc_round_state to) {
    DLC_ASSERT((unsigned)to < DLC_ROUND_STATE_COUNT);
    int ok = 0;
    switch (f->state) {
    case DLC_ROUND_IDLE: ok = to == DLC_ROUND_COLLECTING || to == DLC_ROUND_GRACE; break;
    case DLC_ROUND_COLLECTING: ok = to == DLC_ROUND_GRACE || to == DLC_ROUND_IDLE; break;
    case DLC_ROUND_GRACE: ok = to == DLC_ROUND_IDLE || to == DLC_ROUND_COLLECTING; break;
    default: break;
    }
    if (!ok) dlc_assert_fail("syncer: illegal round transition", __FILE__, __LINE__);
    f->state = to;
}

static dlc_status push(dlc_syncer *s, const dlc_syncer_action *a) {
    if (s->qlen == s->qcap) {
        int cap = s->qcap * 2;
        dlc_syncer_action *q = malloc((size_t)cap * sizeof *q);
        if (!q) return dlc_error(DLC_ERR_NOMEM, "syncer: out of memory for %d actions", cap);
        for (int i = 0; i < s->qlen; i++) q[i] = s->q[(s->qhead + i) % s->qcap];
        free(s->q);
        s->q = q, s->qcap = cap, s->qhead = 0;
    }
    s->q[(s->qhead + s->qlen) % s->qcap] = *a;
    s->qlen++;
    return DLC_OK;
}

int dlc_syncer_poll(dlc_syncer *s, dlc_syncer_action *a) {
    if (!s || !a || s->qlen == 0) return 0;
    *a = s->q[s->qhead];
    s->qhead = (s->qhead + 1) % s->qcap;
    s->qlen--;
    return 1;
}

int dlc_syncer_pending(const dlc_syncer *s) { return s ? s->qlen : 0; }

/* No silent loss: an event is refused while actions of an earlier call are queued, since
 * it would reuse the buffers their payloads and merge records point into.  A refused call
 * changes nothing. */
static dlc_status syncer_unpolled(const dlc_syncer *s, const char *fn) {
    if (s->qlen == 0) return DLC_OK;
    return dlc_error(DLC_ERR_STATE, "%s: the syncer has %d unpolled action%s: expected 0 (poll every action "
                     "with dlc_syncer_poll before the next event)", fn, s->qlen, s->qlen == 1 ? "" : "s");
}

/* ---- shared payload buffers (syncer.h) ---- */

struct dlc_payload {
    atomic_int refs;
    int owned;     /* data is the payload's own (else a ring slot's, until given to it) */
    uint8_t *data;
};

static dlc_payload *payload_new(size_t cap) {
    dlc_payload *p = malloc(sizeof *p);
    if (!p) return NULL;
    if (!(p->data = dlc_big_alloc(cap ? cap : 1))) {
        free(p);
        return NULL;
    }
    p->owned = 1;
    atomic_init(&p->refs, 1);
    return p;
}

/* A payload over a ring slot's Θ (f32 down: the encoding is the floats themselves). */
static dlc_payload *payload_wrap(const float *theta) {
    dlc_payload *p = malloc(sizeof *p);
    if (!p) return NULL;
    p->owned = 0;
    p->data = (uint8_t *)(uintptr_t)theta;
    atomic_init(&p->refs, 1);
    return p;
}

dlc_payload *dlc_payload_ref(dlc_payload *p) {
    if (p) atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
    return p;
}

void dlc_payload_unref(dlc_payload *p) {
    if (!p || atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1) return;
    if (p->owned) dlc_big_free(p->data);
    free(p);
}

dlc_syncer *dlc_syncer_new(const dlc_syncer_params *sp, const dlc_plan *plan, const float *theta0) {
    if (dlc_syncer_params_check(sp) != DLC_OK) return NULL;
    if (!plan || !theta0) {
        dlc_error(DLC_ERR_ARG, "syncer_new: plan and theta0 are required");
        return NULL;
    }
    if (sp->dp && dlc_plan_count(plan) != 1) {
        dlc_error(DLC_ERR_ARG, "syncer_new: data parallel needs a plan of 1 fragment, got %d", dlc_plan_count(plan));
        return NULL;
    }
    dlc_syncer *s = calloc(1, sizeof *s);
    int64_t *seg = NULL;
    uint8_t *emb = NULL;
    float *gathered = NULL;
    if (!s) goto nomem;
    s->p = *sp;
    s->p.embedding = NULL;
    s->p.owns = NULL;
    s->plan = plan;
    s->P = dlc_plan_count(plan);
    s->owned = s->P;
    if (sp->owns) {
        s->owned = 0;
        for (int p = 0; p < s->P; p++) s->owned += sp->owns[p] != 0;
        if (!s->owned || sp->dp) {
            free(s);
            dlc_error(DLC_ERR_ARG, "syncer_new: a shard %s: expected one owning at least one fragment, not in dp",
                      sp->dp ? "in data parallel" : "that owns no fragment");
            return NULL;
        }
    }
    s->M = sp->learners;
    s->dp_next = 1;
    s->f = calloc((size_t)s->P, sizeof *s->f);
    s->sorted = malloc((size_t)s->M * sizeof(double));
    s->live = calloc((size_t)s->M, 1);
    s->heard = calloc((size_t)s->M, sizeof(double));
    s->step_t = calloc((size_t)s->M, sizeof(double));
    s->transit = calloc((size_t)s->M, sizeof(double));
    s->joined_at = calloc((size_t)s->M, sizeof(double));
    s->ever = calloc((size_t)s->M, 1);
    s->sent_since = calloc((size_t)s->M * (size_t)(s->P > 0 ? s->P : 1), 1);
    s->sched = calloc((size_t)s->M, sizeof(int64_t));
    s->epoch = sp->epoch;
    s->incarnation = calloc((size_t)s->M, sizeof(int64_t));
    s->inc_open = calloc((size_t)s->M, 1);
    s->fenced = calloc((size_t)s->M, 1);
    s->unheard = calloc((size_t)s->M, 1);
    s->merged = calloc((size_t)s->M, sizeof(int64_t));
    s->merged_steps = calloc((size_t)s->M, sizeof(double));
    s->last_base = malloc((size_t)s->M * (size_t)s->P * sizeof(int64_t));
    s->last_life = calloc((size_t)s->M * (size_t)s->P, sizeof(int64_t));
    s->life = calloc((size_t)s->M, sizeof(int64_t));
    s->last_steps = calloc((size_t)s->M * (size_t)s->P, sizeof(int64_t));
    s->last_tokens = calloc((size_t)s->M * (size_t)s->P, sizeof(int64_t));
    s->shard = malloc((size_t)s->M * sizeof(int64_t));
    s->rep = calloc((size_t)s->M, sizeof *s->rep);
    s->qcap = 16;
    s->q = malloc((size_t)s->qcap * sizeof *s->q);
    if (!s->f || !s->sorted || !s->live || !s->heard || !s->step_t || !s->transit || !s->joined_at || !s->sched || !s->ever || !s->sent_since ||
        !s->q || !s->incarnation || !s->inc_open || !s->fenced || !s->unheard || !s->merged || !s->shard ||
        !s->merged_steps || !s->last_base || !s->last_steps || !s->last_tokens || !s->last_life || !s->life || !s->rep)
        goto nomem;
    for (int64_t i = 0; i < (int64_t)s->M * s->P; i++) s->last_base[i] = -1;
    for (int m = 0; m < s->M; m++) s->shard[m] = -1;
    int64_t maxn = 0;
    for (int p = 0; p < s->P; p++) maxn = dlc_plan_numel(plan, p) > maxn ? dlc_plan_numel(plan, p) : maxn;
    /* Θ0's fragment p gathered, for the ring to copy (freed on return: the rounds need no
     * fragment-sized scratch, merge.h) */
    if (!(gathered = dlc_big_alloc((size_t)maxn * sizeof(float)))) goto nomem;
    for (int p = 0; p < s->P; p++) {
        sfrag *f = &s->f[p];
        int nv;
        const dlc_frag_view *v = dlc_plan_views(plan, p, &nv);
        f->n = dlc_plan_numel(plan, p);
        f->out_version = -1;
        f->last_open = -1;
        f->avg_step = -1;
        f->c = calloc((size_t)s->M, sizeof *f->c);
        f->mc = calloc((size_t)s->M * 2, sizeof *f->mc);
        f->mc_new = calloc((size_t)s->M * 2, sizeof *f->mc_new);
        f->arr = calloc((size_t)s->M, sizeof *f->arr);
        if (!f->c || !f->mc || !f->mc_new || !f->arr) goto nomem;
        if (sp->owns && !sp->owns[p]) continue; /* another shard's: nothing fragment-sized here,
                                                 * and its values in theta0 are not read */
        seg = malloc((size_t)nv * sizeof *seg);
        emb = malloc((size_t)nv);
        if (!seg || !emb) goto nomem;
        float *t = gathered;
        for (int j = 0; j < nv; j++) {
            seg[j] = v[j].numel;
            emb[j] = sp->embedding ? sp->embedding[v[j].tensor] != 0 : 0;
            memcpy(t, theta0 + v[j].offset, (size_t)v[j].numel * sizeof(float));
            t += v[j].numel;
        }
        dlc_merge_params mp = {sp->dp ? DLC_MERGE_MEAN : sp->merge, nv, seg, emb};
        f->mg = dlc_merge_new(&mp);
        free(seg), free(emb);
        seg = NULL, emb = NULL;
        if (!f->mg) goto fail;
        if (!(f->fs = dlc_fragstate_new(&sp->outer, gathered, f->n))) goto fail;
        f->out_cap = f->n * (int64_t)sizeof(float);
        /* f32 down: sent from the ring's slots (no encoded copy); else an encoded copy */
        if (sp->codec_down == DLC_CODEC_F32) {
            f->ring_pl = calloc((size_t)sp->outer.ring, sizeof *f->ring_pl);
            f->ring_v = calloc((size_t)sp->outer.ring, sizeof *f->ring_v);
            if (!f->ring_pl || !f->ring_v) goto nomem;
        } else if (!(f->out = payload_new((size_t)f->out_cap))) {
            goto nomem;
        }
        if (sp->dp) {
            int64_t cap = sp->dp_history;
            if (cap == 0) {
                cap = DLC_SYNCER_DP_HISTORY_BYTES / (f->out_cap > 0 ? f->out_cap : 1);
                cap = cap < 8 ? 8 : cap > 1024 ? 1024 : cap;
            }
            f->hist_cap = (int)cap;
            f->hist = calloc((size_t)f->hist_cap, sizeof *f->hist);
            f->hist_step = calloc((size_t)f->hist_cap, sizeof *f->hist_step);
            if (!f->hist || !f->hist_step) goto nomem;
        }
    }
    free(gathered);
    return s;
nomem:
    dlc_error(DLC_ERR_NOMEM, "syncer_new: out of memory");
fail:
    free(seg);
    free(emb);
    free(gathered);
    dlc_syncer_free(s);
    return NULL;
}

void dlc_syncer_free(dlc_syncer *s) {
    if (!s) return;
    for (int p = 0; s->f && p < s->P; p++) {
        sfrag *f = &s->f[p];
        /* a slot a driver still sends from becomes its payload's own (else a leak, not a
         * dangling read: out of memory while freeing) */
        int keep_fs = 0;
        for (int r = 0; f->ring_pl && r < s->p.outer.ring; r++) {
            dlc_payload *pl = f->ring_pl[r];
            if (!pl) continue;
            if (atomic_load_explicit(&pl->refs, memory_order_acquire) > 1) {
                if (dlc_fragstate_give(f->fs, f->ring_v[r])) pl->owned = 1;
                else keep_fs = 1;
            }
            dlc_payload_unref(pl);
        }
        free(f->ring_pl);
        free(f->ring_v);
        if (!keep_fs) dlc_fragstate_free(f->fs);
        dlc_merge_free(f->mg);
        for (int m = 0; f->c && m < s->M; m++) dlc_big_free(f->c[m].h_bytes);
        free(f->c);
        free(f->mc);
        free(f->mc_new);
        free(f->arr);
        free(f->pub_arr);
        free(f->pub_owed);
        dlc_payload_unref(f->out);
        for (int i = 0; f->hist && i < f->hist_cap; i++) free(f->hist[i]);
        free(f->hist);
        free(f->hist_step);
    }
    free(s->f);
    free(s->sorted);
    free(s->live);
    free(s->heard);
    free(s->step_t);
    free(s->transit);
    free(s->joined_at);
    free(s->ever);
    free(s->sent_since);
    free(s->sched);
    free(s->incarnation);
    free(s->inc_open);
    free(s->fenced);
    free(s->unheard);
    free(s->merged);
    free(s->merged_steps);
    free(s->last_base);
    free(s->last_life);
    free(s->life);
    free(s->last_steps);
    free(s->last_tokens);
    free(s->shard);
    free(s->rep);
    free(s->q);
    free(s);
}

/* ---- estimates for the adaptive grace window ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over live learners of v[m] > 0 (0 if none reported). */
static double live_median(const dlc_syncer *s, const double *v) {
    int k = 0;
    for (int m = 0; m < s->M; m++)
        if (s->live[m] && v[m] > 0) s->sorted[k++] = v[m];
    if (k == 0) return 0;
    qsort(s->sorted, (size_t)k, sizeof(double), cmp_double);
    return k % 2 ? s->sorted[k / 2] : 0.5 * (s->sorted[k / 2 - 1] + s->sorted[k / 2]);
}

static double grace_window(dlc_syncer *s) {
    switch (s->p.grace) {
    case DLC_GRACE_OFF: return 0;
    case DLC_GRACE_FIXED: return s->p.grace_s;
    default: break;
    }
    double step = live_median(s, s->step_t), sync = live_median(s, s->transit);
    double g = s->p.grace_gamma * (s->p.tau * step - s->xi_quorum - sync);
    return g < 0 ? 0 : g > step ? step : g;
}

/* ---- rounds ---- */

/* Live learner m is awaited in p's open round: it was live when the round opened, and
 * (blocking with several fragments) a rejoined learner only once it has sent p again
 * (dlc_syncer_params.blocking says why); dp: not while it replays (from its REPLAY to its
 * next gradient, syncer.h). */
static int awaited(const dlc_syncer *s, const sfrag *f, int m) {
    int gate = (s->p.blocking && s->P > 1) || s->p.dp;
    return s->live[m] && s->joined_at[m] <= f->opened &&
           (!gate || s->sent_since[(size_t)m * s->P + (size_t)(f - s->f)]);
}

/* Live learners that take part in fragment p's open round: those awaited (one that joins
 * during a round takes part from the next, so a blocking run does not wait a whole period
 * for a newcomer) and those that sent to it. */
static int expected(const dlc_syncer *s, const sfrag *f) {
    if (f->state == DLC_ROUND_IDLE) return s->nlive;
    int k = 0;
    for (int m = 0; m < s->M; m++) k += awaited(s, f, m) || (s->live[m] && f->c[m].present);
    return k;
}

static int quorum_of(const dlc_syncer *s, const sfrag *f) {
    return s->p.quorum == DLC_QUORUM_ALL ? expected(s, f) : s->p.quorum;
}

/* A contribution's weight in its merge.  dp: 1, or 0 for a void gradient (no tokens: the
 * learner's step went non-finite on a finite model; it applies the others' average). */
static double weight_of(const dlc_syncer *s, int64_t tokens, int64_t steps) {
    if (s->p.dp) return tokens > 0 ? 1 : 0;
    switch (s->p.weighting) {
    case DLC_WEIGHT_UNIFORM: return 1;
    case DLC_WEIGHT_TOKENS: return (double)tokens;
    default: return (double)tokens * (double)tokens / (double)steps;
    }
}

/* Every learner that takes part in p's open round (expected) has sent to it. */
static int all_in(const dlc_syncer *s, const sfrag *f) {
    for (int m = 0; m < s->M; m++)
        if (awaited(s, f, m) && !f->c[m].present) return 0;
    return 1;
}

/* Empties p's round and its accumulator (a held contribution stays held). */
static void clear_round(sfrag *f, int M) {
    for (int m = 0; m < M; m++) f->c[m].present = 0;
    f->count = 0;
    if (dlc_merge_count(f->mg) > 0) dlc_merge_reset(f->mg);
    if (f->state != DLC_ROUND_IDLE) set_round_state(f, DLC_ROUND_IDLE);
}

/* f32 down: the payload over Θ_p's ring slot, made on first use. */
static dlc_status wrap_theta(dlc_syncer *s, sfrag *f) {
    int64_t v = dlc_fragstate_version(f->fs);
    int r = (int)(v % s->p.outer.ring);
    if (f->ring_pl[r] && f->ring_v[r] == v) return DLC_OK;
    DLC_ASSERT(!f->ring_pl[r]); /* released before its slot was written (release_slot) */
    const float *th = dlc_fragstate_theta(f->fs);
    for (int64_t i = 0; i < f->n && !dlc_fragstate_finite(f->fs); i++) /* (the step checked it) */
        if (!isfinite(th[i]))
            return dlc_error(DLC_ERR_RANGE, "syncer: fragment %d version %lld: [%lld] = %g: expected finite values to "
                             "send", (int)(f - s->f), (long long)v, (long long)i, (double)th[i]);
    if (!(f->ring_pl[r] = payload_wrap(th))) return dlc_error(DLC_ERR_NOMEM, "syncer: out of memory");
    f->ring_v[r] = v;
    f->out_len = f->n * (int64_t)sizeof(float);
    f->out_version = v;
    return DLC_OK;
}

/* f32 down, before a step writes ring slot r: its payload goes; one a driver still
 * sends from takes the slot's buffer with it (the ring gets a fresh one). */
static dlc_status release_slot(sfrag *f, int r) {
    dlc_payload *pl = f->ring_pl[r];
    if (!pl) return DLC_OK;
    if (atomic_load_explicit(&pl->refs, memory_order_acquire) > 1) {
        float *buf = dlc_fragstate_give(f->fs, f->ring_v[r]);
        if (!buf) return dlc_error(DLC_ERR_NOMEM, "syncer: %s", dlc_last_error());
        DLC_ASSERT((uint8_t *)buf == pl->data);
        pl->owned = 1;
    }
    f->ring_pl[r] = NULL;
    dlc_payload_unref(pl);
    return DLC_OK;
}

/* The payload of the Θ_p last encoded or wrapped. */
static dlc_payload *out_payload(const dlc_syncer *s, const sfrag *f) {
    return f->ring_pl ? f->ring_pl[f->out_version % s->p.outer.ring] : f->out;
}

/* Encodes Θ_p (codec_down) into f->out unless it already holds this version; into a new
 * buffer when a driver still holds the old one (f32: wrap_theta). */
static dlc_status encode_theta(dlc_syncer *s, sfrag *f) {
    if (f->ring_pl) return wrap_theta(s, f);
    int64_t v = dlc_fragstate_version(f->fs);
    if (f->out_version == v) return DLC_OK;
    if (atomic_load_explicit(&f->out->refs, memory_order_acquire) > 1) {
        dlc_payload *fresh = payload_new((size_t)f->out_cap);
        if (!fresh) return dlc_error(DLC_ERR_NOMEM, "syncer: out of memory for a %lld-byte fragment",
                                     (long long)f->out_cap);
        dlc_payload_unref(f->out);
        f->out = fresh;
    }
    int64_t w = dlc_codec_encode(s->p.codec_down, NULL, dlc_fragstate_theta(f->fs), f->n, f->out->data,
                                 (size_t)f->out_cap, NULL);
    if (w < 0) return (dlc_status)w;
    f->out_len = w;
    f->out_version = v;
    return DLC_OK;
}

/* The incarnation stamped on what goes to learner m: 0 while a join waits to learn it. */
static int64_t stamp_incarnation(const dlc_syncer *s, int m) { return s->inc_open[m] ? 0 : s->incarnation[m]; }

/* FRAGMENT p to learner m; a resync also carries the run's phase and median step time. */
static dlc_status send_fragment(dlc_syncer *s, int p, int m, uint32_t flags, double held, double age,
                                int64_t phase, double step_time) {
    sfrag *f = &s->f[p];
    if (f->pub) { /* Θ_p's version waits for the standby: this send goes with it (a resync kept) */
        pub_owed *o = &f->pub_owed[m];
        if (!o->on || (flags & DLC_MSG_RESYNC))
            *o = (pub_owed){.on = 1, .flags = flags | (o->on ? o->flags : 0), .held = held, .age = age,
                            .step_time = step_time, .phase = phase};
        return DLC_OK;
    }
    dlc_status st = encode_theta(s, f);
    if (st != DLC_OK) return st;
    dlc_payload *pl = out_payload(s, f);
    dlc_syncer_action a = {.type = DLC_SACT_SEND, .learner = m, .fragment = p, .owner = pl};
    a.msg = (dlc_msg){.type = DLC_MSG_FRAGMENT, .learner = m, .fragment = p, .version = f->out_version,
                      .steps = phase, .step_time = step_time, .flags = flags, .held = held, .age = age,
                      .codec = s->p.codec_down, .payload = pl->data,
                      .len = (size_t)f->out_len, .epoch = s->epoch, .incarnation = stamp_incarnation(s, m)};
    return push(s, &a);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* dp after a load (dp_next unknown): the largest step another live learner reported. */
static int64_t live_max_sched(const dlc_syncer *s, int m) {
    int64_t k = 0;
    for (int j = 0; j < s->M; j++)
        if (j != m && s->live[j] && s->sched[j] > k) k = s->sched[j];
    return k;
}

/* The schedule step of the run for a (re)joining learner m: the median of what the other
 * live learners last reported; with none live, the furthest any other one reported before
 * it left (a learner restarted after the others finished joins at the end of the run, not
 * at its start); 0 before any report.  dp: the rounds closed so far, so its next gradient
 * is for the round the others are at. */
static int64_t run_phase(dlc_syncer *s, int m) {
    if (s->p.dp) return s->dp_next > 0 ? s->dp_next - 1 : live_max_sched(s, m);
    int k = 0;
    int64_t *v = (int64_t *)(void *)s->sorted; /* M doubles of room: as many int64s */
    for (int j = 0; j < s->M; j++)
        if (j != m && s->live[j] && s->sched[j] > 0) v[k++] = s->sched[j];
    if (k == 0) {
        int64_t far = 0;
        for (int j = 0; j < s->M; j++)
            if (j != m && s->sched[j] > far) far = s->sched[j];
        return far;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_i64);
    return v[k / 2];
}

/* The whole model to learner m, each fragment flagged RESYNC, with what a newcomer needs
 * to sync its fragments in step with the others: the run's schedule step in `steps`, the
 * age of the fragment's latest round in `held` (-1 if none) and the learners' median step
 * time in `step_time`. */
static dlc_status resync_all(dlc_syncer *s, int m, double now) {
    dlc_status st = DLC_OK;
    int64_t phase = run_phase(s, m);
    double step = live_median(s, s->step_t);
    for (int p = 0; p < s->P && st == DLC_OK; p++) {
        sfrag *f = &s->f[p];
        if (!f->fs) continue; /* another shard's */
        st = send_fragment(s, p, m, DLC_MSG_RESYNC, f->last_open >= 0 ? now - f->last_open : -1, 0, phase, step);
    }
    return st;
}

/* dp: the averaged gradient `avg` of step `step` to learner m; last > 0: an answer to a
 * REPLAY, whose last step is `last`. */
static dlc_status send_avg_of(dlc_syncer *s, sfrag *f, int m, const uint8_t *avg, int64_t step, int64_t last) {
    dlc_syncer_action g = {.type = DLC_SACT_SEND, .learner = m};
    g.msg = (dlc_msg){.type = DLC_MSG_GRADIENT_AVG, .learner = m, .version = step, .steps = last,
                      .codec = DLC_CODEC_F32, .payload = avg, .len = (size_t)f->n * sizeof(float), .epoch = s->epoch,
                      .incarnation = stamp_incarnation(s, m)};
    return push(s, &g);
}

/* dp: the last averaged gradient (step avg_step) to learner m. */
static dlc_status send_avg(dlc_syncer *s, sfrag *f, int m) { return send_avg_of(s, f, m, f->avg, f->avg_step, 0); }

/* dp: the round's average (the merge's Δ) into the history, the oldest giving way; f->avg
 * points at it. */
static dlc_status hist_push(sfrag *f, const float *avg, int64_t step) {
    int slot;
    if (f->hist_len < f->hist_cap) {
        slot = (f->hist_head + f->hist_len) % f->hist_cap;
        if (!f->hist[slot] && !(f->hist[slot] = dlc_big_alloc((size_t)f->n * sizeof(float))))
            return dlc_error(DLC_ERR_NOMEM, "syncer: out of memory for the history of averaged gradients (%d of "
                             "%lld bytes each; dp_history sets how many)", f->hist_len + 1,
                             (long long)(f->n * (int64_t)sizeof(float)));
        f->hist_len++;
    } else {
        slot = f->hist_head;
        f->hist_head = (f->hist_head + 1) % f->hist_cap;
    }
    memcpy(f->hist[slot], avg, (size_t)f->n * sizeof(float));
    f->hist_step[slot] = step;
    f->avg = f->hist[slot];
    return DLC_OK;
}

static dlc_status evaluate(dlc_syncer *s, int p, double now, int may_close);
static dlc_status admit_held(dlc_syncer *s, int p, double now);

/* Merges fragment p's round (its contributions are in the accumulator already) and sends
 * the result; then a held contribution opens the next round. */
static dlc_status publish(dlc_syncer *s, int p, double now);

static dlc_status close_round(dlc_syncer *s, int p, double now, int flushed) {
    sfrag *f = &s->f[p];
    if (f->pub) return DLC_OK; /* the previous merge waits for the standby: this round waits too */
    int k = 0;
    int64_t bytes_in = 0;
    double useful = 0;
    dlc_status st = DLC_OK;
    /* two lists, used in turn: a flush can close p twice before the driver polls */
    dlc_merge_contrib *mc = f->mc + (f->mc_flip ? s->M : 0);
    double *mcn = f->mc_new + (f->mc_flip ? s->M : 0);
    f->mc_flip ^= 1;
    for (int i = 0; i < f->count; i++) { /* in arrival order: the order of the sums */
        int m = f->arr[i];
        contrib *c = &f->c[m];
        if (!(c->weight > 0)) continue;
        mc[k++] = (dlc_merge_contrib){.learner = m, .weight = c->weight, .base_version = c->base,
                                      .staleness = (s->p.dp ? f->dp_step : dlc_fragstate_version(f->fs)) - c->base,
                                      .steps = c->steps, .tokens = c->tokens, .incarnation = c->incarnation,
                                      .arrived = c->arrived};
        mcn[k - 1] = 0;
        bytes_in += (int64_t)c->len;
        /* the steps and tokens new to the run: a contribution from the base of one of its
         * earlier merged ones (sent again before a merge came back: a cut, a restarted
         * syncer) holds that one's steps too (syncer.h, the account), when both came from
         * the same life of the learner (between two of its joins: its counters restart at
         * a join).  A round merges an earlier life's contribution before a later one's
         * (a later one is held while the earlier is in p's round). */
        s->merged[m]++;
        /* dp: a gradient whose learner was lost before its round closed is in the average,
         * but its step never completed (a step is done at its average) */
        if (s->p.dp && (!s->live[m] || c->life != s->life[m])) continue;
        int64_t steps = c->steps, tokens = c->tokens;
        size_t at = (size_t)m * s->P + (size_t)p;
        if (c->life == s->last_life[at] && c->base == s->last_base[at] && steps >= s->last_steps[at]) {
            steps -= s->last_steps[at];
            tokens -= tokens >= s->last_tokens[at] ? s->last_tokens[at] : tokens;
        }
        s->last_base[at] = c->base, s->last_steps[at] = c->steps, s->last_tokens[at] = c->tokens;
        s->last_life[at] = c->life;
        useful += (double)tokens / s->P;
        s->merged_steps[m] += (double)steps / s->P;
        mcn[k - 1] = (double)steps / s->P;
    }
    f->mc_count = k;
    f->mc_useful = useful;
    const float *delta = NULL; /* the merged Δ, in the accumulator itself (reset at the clear) */
    if (k > 0 && !(delta = dlc_merge_take(f->mg))) st = DLC_ERR_RANGE;
    if (st == DLC_OK && k == 0) {
        /* every contribution weighed 0 (no tokens): nothing to merge, but their senders may
         * be blocked on this round: they get the current fragment back (dp: the run's step
         * with it, at which each runs its step again, learner.h) */
        for (int m = 0; m < s->M && st == DLC_OK; m++)
            if (f->c[m].present && s->live[m])
                st = send_fragment(s, p, m, DLC_MSG_RESYNC, 0, 0, s->p.dp ? run_phase(s, m) : 0, 0);
    }
    if (st != DLC_OK || k == 0) {
        clear_round(f, s->M);
        return st == DLC_OK ? admit_held(s, p, now) : st;
    }
    dlc_syncer_action a = {.type = DLC_SACT_MERGED, .fragment = p};
    dlc_merge_info *mi = &a.merge;
    *mi = (dlc_merge_info){.fragment = p, .count = k, .contribs = mc, .live = s->nlive, .quorum = quorum_of(s, f),
                           .opened = f->opened, .quorum_at = f->state == DLC_ROUND_GRACE ? f->quorum_at : now,
                           .grace = f->state == DLC_ROUND_GRACE ? f->grace : 0, .flushed = flushed,
                           .bytes_in = bytes_in, .useful_tokens = useful};
    mi->waited = now - mi->quorum_at;
    mi->all_sent = all_in(s, f);
    int64_t sent = 0;
    if (s->p.dp) {
        st = hist_push(f, delta, f->dp_step);
        if (st != DLC_OK) {
            clear_round(f, s->M);
            return st;
        }
        f->avg_step = f->dp_step;
        s->dp_next = f->dp_step + 1;
        mi->version = f->dp_step;
        for (int m = 0; m < s->M && st == DLC_OK; m++) {
            if (!s->live[m]) continue;
            st = send_avg(s, f, m);
            sent += f->n * (int64_t)sizeof(float);
        }
    } else {
        if (f->ring_pl)
            st = release_slot(f, (int)((dlc_fragstate_version(f->fs) + 1) % s->p.outer.ring));
        if (st == DLC_OK) st = dlc_fragstate_step(f->fs, delta);
        mi->version = dlc_fragstate_version(f->fs);
        if (st == DLC_OK && s->replicated) { /* held back until the standby holds it (publish) */
            f->pub = 1;
            f->pub_version = mi->version;
            f->pub_mi = *mi;
            f->pub_at = now, f->pub_opened = f->opened;
            for (int m = 0; m < s->M; m++) {
                f->pub_arr[m] = f->c[m].present ? f->c[m].arrived : -1;
                f->pub_owed[m].on = 0;
            }
            clear_round(f, s->M);
            dlc_syncer_action r = {.type = DLC_SACT_REPLICATE, .fragment = p};
            r.merge.fragment = p, r.merge.version = mi->version;
            st = push(s, &r);
            return st == DLC_OK ? admit_held(s, p, now) : st;
        }
        for (int m = 0; m < s->M && st == DLC_OK; m++) {
            if (!s->live[m]) continue;
            /* contributors: how long their contribution waited here, and the round's age
             * (one that came late in it catches up, learner.h); the others: how old the
             * round is (a newcomer takes its phase from it), and no age */
            int in = f->c[m].present;
            st = send_fragment(s, p, m, 0, now - (in ? f->c[m].arrived : f->opened), in ? now - f->opened : 0, 0, 0);
            sent += f->out_len;
        }
    }
    mi->bytes_out = sent;
    clear_round(f, s->M);
    if (st == DLC_OK) st = push(s, &a);
    return st == DLC_OK ? admit_held(s, p, now) : st;
}

/* Re-checks fragment p's round against the quorum, the grace deadline and the live set. */
/* may_close 0: a round that is due to close is left in GRACE with its deadline now, for
 * the driver's next dlc_syncer_handle_expiry (a round opened by a held contribution
 * inside close_round: one close per fragment per call). */
static dlc_status evaluate(dlc_syncer *s, int p, double now, int may_close) {
    sfrag *f = &s->f[p];
    if (f->state == DLC_ROUND_IDLE) return DLC_OK;
    if (f->count == 0) {
        clear_round(f, s->M);
        return DLC_OK;
    }
    /* every learner of the round (syncer.h): a lost learner's contribution stays, so the
     * count may hold more than the live ones */
    int all = all_in(s, f);
    if (s->p.quorum == DLC_QUORUM_ALL ? all : f->count >= s->p.quorum) {
        if (f->state != DLC_ROUND_GRACE) {
            double sample = now - f->opened;
            s->xi_quorum = s->xi_quorum == 0 ? sample : (1 - s->p.ema) * s->xi_quorum + s->p.ema * sample;
            f->quorum_at = now;
            f->grace = s->p.dp ? 0 : grace_window(s);
            f->deadline = now + f->grace;
            set_round_state(f, DLC_ROUND_GRACE);
        }
        if (!s->manual && !f->pub && (all || now >= f->deadline)) {
            if (may_close) return close_round(s, p, now, 0);
            f->deadline = now;
        }
    } else if (f->state == DLC_ROUND_GRACE) {
        set_round_state(f, DLC_ROUND_COLLECTING);
    }
    return DLC_OK;
}

static dlc_status reject(dlc_syncer *s, int m, int p, dlc_reject_reason why) {
    dlc_syncer_action a = {.type = DLC_SACT_REJECTED, .learner = m, .fragment = p, .reason = why};
    dlc_status st = push(s, &a);
    /* dp: the resync carries the run's step, from which the learner counts its next one */
    return st == DLC_OK ? send_fragment(s, p, m, DLC_MSG_RESYNC, 0, 0, s->p.dp ? run_phase(s, m) : 0, 0) : st;
}

static void heard_from(dlc_syncer *s, const dlc_msg *m, double now) {
    s->heard[m->learner] = now;
    if (m->type == DLC_MSG_HEARTBEAT && m->steps > 0) s->sched[m->learner] = m->steps;
    if (m->step_time > 0 && isfinite(m->step_time)) s->step_t[m->learner] = m->step_time;
    if (m->transit > 0 && isfinite(m->transit)) s->transit[m->learner] = m->transit;
}

/* What enters a round: a contribution's (or dp gradient's) record, its payload apart. */
typedef struct arrival {
    int64_t base, steps, tokens, incarnation, life;
    double arrived;
} arrival;

/* Learner L's payload (codec_up; dp: an f32 gradient) enters fragment p's round, opening
 * one if none is open: decoded, re-anchored at the current Θ_p through the ring (its base
 * must be in it) and added to the accumulator with its weight, in one pass (merge.h,
 * dlc_merge_add_anchored).  A refusal leaves the round and the accumulator as they were and
 * returns DLC_ERR_FORMAT naming it, with *why the reason. */
static dlc_status admit(dlc_syncer *s, int p, int L, const arrival *a, const uint8_t *bytes, size_t len,
                        dlc_reject_reason *why, double now) {
    sfrag *f = &s->f[p];
    *why = DLC_REJECT_NONFINITE;
    dlc_status st = DLC_OK;
    dlc_codec_kind kind = s->p.dp ? DLC_CODEC_F32 : s->p.codec_up;
    const float *cur = NULL, *base = NULL;
    if (!s->p.dp && a->base != dlc_fragstate_version(f->fs)) {
        cur = dlc_fragstate_theta(f->fs);
        if (!(base = dlc_fragstate_at(f->fs, a->base))) {
            *why = DLC_REJECT_STALE;
            st = dlc_error(DLC_ERR_STATE, "base version %lld is not kept: the ring holds versions %lld..%lld",
                           (long long)a->base, (long long)dlc_fragstate_oldest(f->fs),
                           (long long)dlc_fragstate_version(f->fs));
        }
    }
    double w = weight_of(s, a->tokens, a->steps);
    if (st == DLC_OK) {
        st = w > 0 ? dlc_merge_add_anchored(f->mg, kind, &s->p.codec_params, bytes, len, w, cur, base)
                   : dlc_merge_check(f->mg, kind, &s->p.codec_params, bytes, len, cur, base);
        if (st != DLC_OK && st != DLC_ERR_FORMAT) *why = DLC_REJECT_MALFORMED; /* a weight out of range */
    }
    if (st != DLC_OK)
        return dlc_error(DLC_ERR_FORMAT, "syncer: %s from learner %d for fragment %d: %s", s->p.dp ? "gradient" :
                         "contribution", L + 1, p, dlc_last_error());
    contrib *c = &f->c[L];
    c->present = 1;
    c->weight = w;
    c->base = a->base, c->steps = a->steps, c->tokens = a->tokens, c->incarnation = a->incarnation;
    c->life = a->life, c->arrived = a->arrived;
    c->len = len;
    f->arr[f->count++] = L;
    if (f->state == DLC_ROUND_IDLE) {
        f->opened = f->last_open = now;
        if (s->p.dp) f->dp_step = a->base;
        set_round_state(f, DLC_ROUND_COLLECTING);
    }
    return DLC_OK;
}

/* After a close: the contributions held for p's next round open it, in learner order;
 * one refused now (its base fell out of the ring) is dropped, its sender resynced when
 * it is live. */
static dlc_status admit_held(dlc_syncer *s, int p, double now) {
    sfrag *f = &s->f[p];
    dlc_status st = DLC_OK;
    for (int m = 0; m < s->M && st == DLC_OK; m++) {
        contrib *c = &f->c[m];
        if (!c->held) continue;
        c->held = 0;
        arrival a = {c->h_base, c->h_steps, c->h_tokens, c->h_incarnation, c->h_life, c->h_arrived};
        dlc_reject_reason why;
        if (admit(s, p, m, &a, c->h_bytes, c->h_len, &why, now) != DLC_OK && s->live[m])
            st = reject(s, m, p, why);
        dlc_big_free(c->h_bytes);
        c->h_bytes = NULL;
    }
    return st == DLC_OK ? evaluate(s, p, now, 0) : st;
}

static dlc_status receive_contribution(dlc_syncer *s, const dlc_msg *m, double now) {
    int L = m->learner, p = m->fragment;
    if (s->p.dp)
        return dlc_error(DLC_ERR_FORMAT, "syncer: a contribution from learner %d in a data-parallel run "
                         "(expected gradients)", L + 1);
    if (p < 0 || p >= s->P)
        return dlc_error(DLC_ERR_FORMAT, "syncer: contribution from learner %d for fragment %d: expected 0..%d", L + 1,
                         p, s->P - 1);
    sfrag *f = &s->f[p];
    if (!f->fs) { /* a learner that dealt the fragments otherwise: refused, no resync */
        dlc_syncer_action a = {.type = DLC_SACT_REJECTED, .learner = L, .fragment = p, .reason = DLC_REJECT_MALFORMED};
        dlc_status st = push(s, &a);
        if (st != DLC_OK) return st;
        return dlc_error(DLC_ERR_FORMAT, "syncer: contribution from learner %d for fragment %d, which this shard does "
                         "not own (another shard merges it): refused", L + 1, p);
    }
    int64_t want = dlc_codec_encoded_size(s->p.codec_up, &s->p.codec_params, f->n);
    if (m->codec != s->p.codec_up || (int64_t)m->len != want || (!m->payload && m->len) || m->tokens < 0 ||
        m->steps < 0) {
        dlc_status e = dlc_error(DLC_ERR_FORMAT, "syncer: contribution from learner %d for fragment %d: %s %zu bytes, "
                                 "steps %lld, tokens %lld: expected %s, %lld bytes, steps and tokens >= 0", L + 1, p,
                                 dlc_codec_name(m->codec) ? dlc_codec_name(m->codec) : "(unknown codec)", m->len,
                                 (long long)m->steps, (long long)m->tokens, dlc_codec_name(s->p.codec_up),
                                 (long long)want);
        dlc_status st = reject(s, L, p, DLC_REJECT_MALFORMED);
        return st != DLC_OK ? st : e;
    }
    int in_ring = dlc_fragstate_at(f->fs, m->version) != NULL;
    contrib *c = &f->c[L];
    arrival a = {m->version, m->steps, m->tokens, s->incarnation[L], s->life[L], now};
    int admitted = 0;
    if (m->steps > 0 && in_ring) {
        dlc_status e;
        dlc_reject_reason why = DLC_REJECT_NONFINITE;
        if (!c->present) {
            e = admit(s, p, L, &a, m->payload, m->len, &why, now);
            admitted = e == DLC_OK;
        } else { /* to be held: checked now all the same */
            e = dlc_merge_check(f->mg, m->codec, &s->p.codec_params, m->payload, m->len, NULL, NULL);
            if (e != DLC_OK)
                e = dlc_error(DLC_ERR_FORMAT, "syncer: contribution from learner %d for fragment %d: %s", L + 1, p,
                              dlc_last_error());
        }
        if (e != DLC_OK) {
            dlc_status st = reject(s, L, p, why);
            return st != DLC_OK ? st : e;
        }
    }
    heard_from(s, m, now); /* a valid message (a stale one too: its sender is alive) */
    if (m->steps == 0) return DLC_OK; /* nothing trained since the last receive */
    if (!in_ring) return reject(s, L, p, DLC_REJECT_STALE);
    s->sent_since[(size_t)L * s->P + p] = 1;
    if (admitted) return evaluate(s, p, now, 1);
    /* its earlier contribution is in the open round: this one waits for the next (a
     * newer one replacing it) */
    if (!c->h_bytes || c->h_len < m->len) {
        uint8_t *b = dlc_big_alloc(m->len);
        if (!b) return dlc_error(DLC_ERR_NOMEM, "syncer: out of memory for a %zu-byte contribution", m->len);
        dlc_big_free(c->h_bytes);
        c->h_bytes = b;
    }
    memcpy(c->h_bytes, m->payload, m->len);
    c->h_len = m->len;
    c->held = 1;
    c->h_base = a.base, c->h_steps = a.steps, c->h_tokens = a.tokens, c->h_incarnation = a.incarnation;
    c->h_life = a.life, c->h_arrived = a.arrived;
    s->held++;
    return DLC_OK;
}

static dlc_status receive_gradient(dlc_syncer *s, const dlc_msg *m, double now) {
    int L = m->learner;
    if (!s->p.dp)
        return dlc_error(DLC_ERR_FORMAT, "syncer: a gradient from learner %d in a DiLoCo run (expected "
                         "contributions)", L + 1);
    sfrag *f = &s->f[0];
    if (m->codec != DLC_CODEC_F32 || (int64_t)m->len != f->n * (int64_t)sizeof(float) || !m->payload)
        return dlc_error(DLC_ERR_FORMAT, "syncer: gradient from learner %d: %zu bytes: expected f32, %lld bytes", L + 1,
                         m->len, (long long)(f->n * (int64_t)sizeof(float)));
    if (dlc_merge_check(f->mg, DLC_CODEC_F32, NULL, m->payload, m->len, NULL, NULL) != DLC_OK)
        return dlc_error(DLC_ERR_FORMAT, "syncer: gradient from learner %d: %s", L + 1, dlc_last_error());
    /* the round a gradient belongs to is its step: the open round's, or the next one */
    /* (dp_next 0, after a load: unknown, the first gradient's step is taken) */
    int64_t want = f->state != DLC_ROUND_IDLE ? f->dp_step : s->dp_next > 0 ? s->dp_next : m->version;
    if (m->version != want) {
        if (m->version < want && m->version == f->avg_step) {
            /* its round closed while it was on the way (it joined during the round, or
             * the quorum did not wait): it gets that round's average, as the others did */
            heard_from(s, m, now);
            s->sent_since[L] = 1;
            return send_avg(s, f, L);
        }
        /* from another step altogether (a restarted learner's own count, a lost round):
         * refused, and the learner resynced at the run's step */
        dlc_status e = dlc_error(DLC_ERR_FORMAT, "syncer: gradient from learner %d for step %lld: expected step %lld "
                                 "(%s)", L + 1, (long long)m->version, (long long)want,
                                 f->state == DLC_ROUND_IDLE ? "the next round" : "the open round");
        dlc_status st = reject(s, L, 0, m->version < want ? DLC_REJECT_STALE : DLC_REJECT_MALFORMED);
        return st != DLC_OK ? st : e;
    }
    heard_from(s, m, now);
    s->sent_since[L] = 1; /* awaited in the next rounds (expected) */
    /* a second gradient of the same step (a restarted learner's) adds nothing: its first
     * is in the average */
    if (f->c[L].present) return DLC_OK;
    arrival a = {m->version, 1, m->tokens, s->incarnation[L], s->life[L], now};
    dlc_reject_reason why;
    dlc_status st = admit(s, 0, L, &a, m->payload, m->len, &why, now);
    return st == DLC_OK ? evaluate(s, 0, now, 1) : st;
}

/* dp: a REPLAY (syncer.h, "Replay"): the averages after step k that the history holds. */
static dlc_status receive_replay(dlc_syncer *s, const dlc_msg *m, double now) {
    int L = m->learner;
    if (!s->p.dp)
        return dlc_error(DLC_ERR_FORMAT, "syncer: a replay request from learner %d in a DiLoCo run (only data "
                         "parallel keeps averaged gradients)", L + 1);
    if (m->version < 0)
        return dlc_error(DLC_ERR_FORMAT, "syncer: a replay request from learner %d after step %lld: expected >= 0",
                         L + 1, (long long)m->version);
    heard_from(s, m, now);
    /* catching up: not awaited in the rounds until it sends a gradient again */
    s->sent_since[L] = 0;
    dlc_status st = evaluate(s, 0, now, 1);
    if (st != DLC_OK) return st;
    sfrag *f = &s->f[0];
    int64_t k = m->version, chunk = DLC_SYNCER_REPLAY_BYTES / (f->n > 0 ? f->n * (int64_t)sizeof(float) : 1);
    int first = -1, count = 0;
    for (int i = 0; i < f->hist_len; i++) {
        int slot = (f->hist_head + i) % f->hist_cap;
        if (f->hist_step[slot] <= k) continue;
        if (first < 0) first = i;
        if (count < (chunk < 1 ? 1 : chunk)) count++;
    }
    if (count == 0) { /* nothing after k: the run's step, with the model (in dp, the learner keeps its own) */
        st = send_fragment(s, 0, L, DLC_MSG_RESYNC, 0, 0, run_phase(s, L), 0);
        /* marked as this REPLAY's answer: a refused gradient's resync on its way is not one */
        if (st == DLC_OK) s->q[(s->qhead + s->qlen - 1) % s->qcap].msg.answers = k + 1;
        return st;
    }
    int64_t last = f->hist_step[(f->hist_head + first + count - 1) % f->hist_cap];
    for (int i = first; i < first + count && st == DLC_OK; i++) {
        int slot = (f->hist_head + i) % f->hist_cap;
        st = send_avg_of(s, f, L, f->hist[slot], f->hist_step[slot], last);
    }
    return st;
}

/* m live and resynced whole.  inc > 0: the incarnation it is known to be; 0 (a join):
 * not known, its next stamped message tells. */
static dlc_status make_live(dlc_syncer *s, int m, int64_t inc, double now) {
    if (inc > 0) s->incarnation[m] = inc;
    s->inc_open[m] = inc <= 0;
    s->fenced[m] = 0;
    if (!s->live[m]) s->nlive++;
    s->live[m] = 1;
    s->heard[m] = now;
    s->joined_at[m] = now;
    /* the first join counts as having sent every fragment (the run starts in phase); dp:
     * every join does, until the learner asks for a replay */
    memset(s->sent_since + (size_t)m * s->P, s->ever[m] && !s->p.dp ? 0 : 1, (size_t)s->P);
    s->ever[m] = 1;
    s->unheard[m] = 0;
    s->step_t[m] = s->transit[m] = 0;
    s->sched[m] = 0;
    s->life[m]++; /* its counters restart: its records of earlier lives do not apply */
    return resync_all(s, m, now);
}

static dlc_status drop_learner(dlc_syncer *s, int m, double now);

static dlc_status check_learner(const dlc_syncer *s, int m, const char *fn) {
    if (!s) return dlc_error(DLC_ERR_ARG, "%s: NULL syncer", fn);
    if (m < 0 || m >= s->M)
        return dlc_error(DLC_ERR_RANGE, "%s: learner %d: expected 1..%d", fn, m + 1, s->M);
    return DLC_OK;
}

dlc_status dlc_syncer_join(dlc_syncer *s, int m, double now) {
    dlc_status st = check_learner(s, m, "syncer_join");
    if (st == DLC_OK) st = syncer_unpolled(s, "syncer_join");
    if (st != DLC_OK) return st;
    /* a learner that joins while still counted live restarted: what it sent before
     * belongs to its previous incarnation */
    if (s->live[m]) st = drop_learner(s, m, now);
    return st == DLC_OK ? make_live(s, m, 0, now) : st;
}

/* m leaves the live set; its contributions stay in the open rounds (and a held one
 * waits for its next), the rounds stop waiting for it. */
static dlc_status drop_learner(dlc_syncer *s, int m, double now) {
    if (!s->live[m]) return DLC_OK;
    s->live[m] = 0;
    s->nlive--;
    dlc_status st = DLC_OK;
    for (int p = 0; p < s->P && st == DLC_OK; p++) st = evaluate(s, p, now, 1);
    return st;
}

dlc_status dlc_syncer_lost(dlc_syncer *s, int m, double now) {
    dlc_status st = check_learner(s, m, "syncer_lost");
    if (st == DLC_OK) st = syncer_unpolled(s, "syncer_lost");
    if (st != DLC_OK) return st;
    return drop_learner(s, m, now);
}

/* A fenced message (syncer.h): refused, never merged; a live sender is resynced whole with
 * this epoch, once until a message of it is taken again (what it sent before the resync
 * reached it is refused alone); a contribution or gradient also makes a REJECTED action,
 * a BYE nothing. */
static dlc_status fence(dlc_syncer *s, const dlc_msg *m, dlc_reject_reason why, double now) {
    int L = m->learner;
    const char *type = dlc_msg_type_name(m->type) ? dlc_msg_type_name(m->type) : "(unknown)";
    char what[160];
    if (why == DLC_REJECT_EPOCH)
        snprintf(what, sizeof what, "stamped epoch %lld, but this syncer is epoch %lld (it talked to another syncer "
                 "incarnation)", (long long)m->epoch, (long long)s->epoch);
    else
        snprintf(what, sizeof what, "of incarnation %lld, but learner %d is incarnation %lld now (a previous "
                 "process of it)", (long long)m->incarnation, L + 1, (long long)s->incarnation[L]);
    dlc_status st = DLC_OK;
    int resync = s->live[L] && m->type != DLC_MSG_BYE;
    if (resync && (m->type == DLC_MSG_CONTRIBUTION || m->type == DLC_MSG_GRADIENT)) {
        int p = m->type == DLC_MSG_CONTRIBUTION && m->fragment >= 0 && m->fragment < s->P ? m->fragment : 0;
        dlc_syncer_action a = {.type = DLC_SACT_REJECTED, .learner = L, .fragment = p, .reason = why};
        st = push(s, &a);
    }
    if (st == DLC_OK && resync && !s->fenced[L]) {
        st = resync_all(s, L, now);
        s->fenced[L] = 1;
        s->unheard[L] = 0; /* resynced whole: what a first message after a restart brings */
    }
    if (st != DLC_OK) return st;
    return dlc_error(DLC_ERR_FORMAT, "syncer: a %s from learner %d %s: refused, not merged%s", type, L + 1, what,
                     resync ? "; the learner is resynced" : "");
}

dlc_status dlc_syncer_receive(dlc_syncer *s, const dlc_msg *m, double now) {
    if (!s || !m) return dlc_error(DLC_ERR_ARG, "syncer_receive: NULL argument");
    dlc_status st = syncer_unpolled(s, "syncer_receive");
    if (st != DLC_OK) return st;
    st = check_learner(s, m->learner, "syncer_receive");
    if (st != DLC_OK) return dlc_error(DLC_ERR_FORMAT, "%s", dlc_last_error());
    int L = m->learner;
    if (m->type != DLC_MSG_CONTRIBUTION && m->type != DLC_MSG_GRADIENT && m->type != DLC_MSG_REPLAY &&
        m->type != DLC_MSG_HEARTBEAT && m->type != DLC_MSG_BYE) /* (before a rejoin: nothing else makes one) */
        return dlc_error(DLC_ERR_FORMAT, "syncer: a %s message from learner %d: expected contribution, gradient, "
                         "replay, heartbeat or bye", dlc_msg_type_name(m->type) ? dlc_msg_type_name(m->type) : "(unknown)",
                         L + 1);
    if (m->incarnation < 0 || m->epoch < 0)
        return dlc_error(DLC_ERR_FORMAT, "syncer: a message from learner %d stamped epoch %lld, incarnation %lld: "
                         "expected >= 0", L + 1, (long long)m->epoch, (long long)m->incarnation);
    if (m->incarnation != 0 && m->incarnation < s->incarnation[L]) return fence(s, m, DLC_REJECT_INCARNATION, now);
    if (!s->live[L] && m->type == DLC_MSG_BYE) return DLC_OK; /* gone already: not a rejoin */
    if (!s->live[L] || (m->incarnation > s->incarnation[L] && !s->inc_open[L])) {
        /* a learner we had given up on (timeout, restart) is back, or a newer incarnation
         * of a live one (it restarted): resync it whole */
        dlc_syncer_action a = {.type = DLC_SACT_JOINED, .learner = L};
        st = push(s, &a);
        if (st == DLC_OK && s->live[L]) st = drop_learner(s, L, now);
        return st == DLC_OK ? make_live(s, L, m->incarnation, now) : st;
    }
    if (m->epoch != 0 && m->epoch != s->epoch && m->epoch != s->prev_epoch) return fence(s, m, DLC_REJECT_EPOCH, now);
    if (m->incarnation != 0) s->incarnation[L] = m->incarnation, s->inc_open[L] = 0;
    s->fenced[L] = 0;
    if (s->unheard[L] && m->type != DLC_MSG_BYE && s->p.blocking && !s->p.dp) {
        /* the first message since a restart or a load in a blocking run: the learner may
         * wait for a round the restart dropped, which nothing would end, so it is resynced
         * whole (keeping its counters and its place in the rounds) and the message is not
         * used (syncer.h, "Restarts") */
        s->unheard[L] = 0;
        heard_from(s, m, now);
        dlc_syncer_action a = {.type = DLC_SACT_JOINED, .learner = L};
        st = push(s, &a);
        return st == DLC_OK ? resync_all(s, L, now) : st;
    }
    s->unheard[L] = 0;
    /* heard_from only once a message is valid: a refused one changes nothing */
    switch (m->type) {
    case DLC_MSG_CONTRIBUTION: return receive_contribution(s, m, now);
    case DLC_MSG_GRADIENT: return receive_gradient(s, m, now);
    case DLC_MSG_REPLAY: return receive_replay(s, m, now);
    case DLC_MSG_HEARTBEAT: heard_from(s, m, now); return DLC_OK;
    case DLC_MSG_BYE: return drop_learner(s, m->learner, now);
    default: return DLC_OK; /* (any other type was refused at the top) */
    }
}

double dlc_syncer_expiry(const dlc_syncer *s) {
    double t = INFINITY;
    if (!s) return t;
    for (int p = 0; p < s->P; p++)
        if (s->f[p].state == DLC_ROUND_GRACE && !s->f[p].pub && s->f[p].deadline < t) t = s->f[p].deadline;
    if (s->p.timeout > 0)
        for (int m = 0; m < s->M; m++)
            if (s->live[m] && s->heard[m] + s->p.timeout < t) t = s->heard[m] + s->p.timeout;
    return t;
}

dlc_status dlc_syncer_handle_expiry(dlc_syncer *s, double now) {
    if (!s) return dlc_error(DLC_ERR_ARG, "syncer_handle_expiry: NULL syncer");
    dlc_status st = syncer_unpolled(s, "syncer_handle_expiry");
    if (s->p.timeout > 0)
        for (int m = 0; m < s->M && st == DLC_OK; m++)
            if (s->live[m] && s->heard[m] + s->p.timeout <= now) {
                dlc_syncer_action a = {.type = DLC_SACT_LOST, .learner = m};
                st = push(s, &a);
                if (st == DLC_OK) st = drop_learner(s, m, now);
            }
    for (int p = 0; p < s->P && st == DLC_OK; p++)
        if (s->f[p].state == DLC_ROUND_GRACE && s->f[p].deadline <= now) st = evaluate(s, p, now, 1);
    return st;
}

dlc_status dlc_syncer_set_quorum(dlc_syncer *s, int k, double now) {
    if (!s) return dlc_error(DLC_ERR_ARG, "syncer_set_quorum: NULL syncer");
    if (k < 0 || k > s->M)
        return dlc_error(DLC_ERR_ARG, "syncer_set_quorum: quorum = %d: expected 1..%d (0 = every live learner)", k,
                         s->M);
    dlc_status st = syncer_unpolled(s, "syncer_set_quorum");
    if (st != DLC_OK) return st;
    s->p.quorum = k;
    for (int p = 0; p < s->P && st == DLC_OK; p++) st = evaluate(s, p, now, 1);
    return st;
}

dlc_status dlc_syncer_set_manual(dlc_syncer *s, int on) {
    if (!s) return dlc_error(DLC_ERR_ARG, "syncer_set_manual: NULL syncer");
    s->manual = on != 0;
    return DLC_OK;
}

dlc_status dlc_syncer_flush(dlc_syncer *s, double now) {
    if (!s) return dlc_error(DLC_ERR_ARG, "syncer_flush: NULL syncer");
    dlc_status st = syncer_unpolled(s, "syncer_flush");
    /* twice: a contribution held for a fragment's next round opens it at the first close */
    for (int pass = 0; pass < 2; pass++)
        for (int p = 0; p < s->P && st == DLC_OK; p++)
            if (s->f[p].count > 0) st = close_round(s, p, now, 1);
    return st;
}

dlc_status dlc_syncer_restart(dlc_syncer *s, double now) {
    if (!s) return dlc_error(DLC_ERR_ARG, "syncer_restart: NULL syncer");
    dlc_status st = syncer_unpolled(s, "syncer_restart");
    if (st != DLC_OK) return st;
    for (int p = 0; p < s->P; p++) {
        clear_round(&s->f[p], s->M);
        for (int m = 0; m < s->M; m++) s->f[p].c[m].held = 0;
    }
    for (int m = 0; m < s->M; m++) {
        s->unheard[m] = 1;
        if (s->live[m]) s->heard[m] = now;
    }
    return DLC_OK;
}

dlc_status dlc_syncer_replica_of(dlc_syncer *s, int p, int whole, dlc_replica *out) {
    if (!s || !out) return dlc_error(DLC_ERR_ARG, "syncer_replica: NULL argument");
    if (p < 0 || p >= s->P || !s->f[p].fs)
        return dlc_error(DLC_ERR_ARG, "syncer_replica: fragment %d: expected one this syncer owns", p);
    sfrag *f = &s->f[p];
    if (s->p.dp || (f->mc_count == 0 && !whole))
        return dlc_error(DLC_ERR_STATE, "syncer_replica: fragment %d: %s", p,
                         s->p.dp ? "data parallel is not replicated" : "its latest round merged nothing");
    *out = (dlc_replica){.fragment = p, .version = dlc_fragstate_version(f->fs), .theta = dlc_fragstate_theta(f->fs),
                         .momentum = dlc_fragstate_momentum(f->fs), .n = f->n, .whole = whole != 0};
    if (whole) return DLC_OK;
    /* the half of mc the latest close used: the one before the flip */
    const dlc_merge_contrib *mc = f->mc + (f->mc_flip ? 0 : s->M);
    const double *mcn = f->mc_new + (f->mc_flip ? 0 : s->M);
    for (int i = 0; i < f->mc_count; i++)
        s->rep[i] = (dlc_replica_contrib){.learner = mc[i].learner, .new_steps = mcn[i],
                                          .base_version = mc[i].base_version, .steps = mc[i].steps,
                                          .tokens = mc[i].tokens};
    out->count = f->mc_count;
    out->contribs = s->rep;
    out->useful_tokens = f->mc_useful;
    return DLC_OK;
}

dlc_status dlc_syncer_replica(dlc_syncer *s, int p, dlc_replica *out) { return dlc_syncer_replica_of(s, p, 0, out); }

dlc_status dlc_syncer_replicate(dlc_syncer *s, const dlc_replica *r, double now) {
    if (!s || !r) return dlc_error(DLC_ERR_ARG, "syncer_replicate: NULL argument");
    int p = r->fragment;
    if (s->p.dp) return dlc_error(DLC_ERR_ARG, "syncer_replicate: data parallel is not replicated");
    if (p < 0 || p >= s->P || !s->f[p].fs)
        return dlc_error(DLC_ERR_ARG, "syncer_replicate: fragment %d: expected one this syncer owns", p);
    sfrag *f = &s->f[p];
    float *mom = dlc_fragstate_momentum(f->fs);
    if (r->n != f->n || !r->theta || !mom != !r->momentum || r->count < 0 || r->count > s->M ||
        (r->count > 0 && !r->contribs) || (r->whole && r->count != 0))
        return dlc_error(DLC_ERR_ARG, "syncer_replicate: fragment %d: %lld floats%s, %d contributors%s: expected %lld "
                         "floats%s and 0..%d contributors (none in a whole replica)", p, (long long)r->n,
                         r->momentum ? " with momentum" : " without momentum", r->count, r->whole ? " (whole)" : "",
                         (long long)f->n, mom ? " with momentum" : " without momentum", s->M);
    int64_t v = dlc_fragstate_version(f->fs);
    if (r->whole ? r->version < 0 : r->version != v + 1)
        return dlc_error(DLC_ERR_STATE, "syncer_replicate: fragment %d version %lld, but this standby holds version "
                         "%lld: expected %s (a replica was lost or repeated: the standby must catch up again from "
                         "a whole replica)", p, (long long)r->version, (long long)v,
                         r->whole ? "a version >= 0" : "the next one");
    for (int i = 0; i < r->count; i++)
        if (r->contribs[i].learner < 0 || r->contribs[i].learner >= s->M || !(r->contribs[i].new_steps >= 0))
            return dlc_error(DLC_ERR_ARG, "syncer_replicate: fragment %d: contributor %d: learner %d, %g new steps: "
                             "expected a learner in 1..%d and steps >= 0", p, i, r->contribs[i].learner + 1,
                             r->contribs[i].new_steps, s->M);
    for (int64_t i = 0; r->momentum && i < f->n; i++)
        if (!isfinite(r->momentum[i]))
            return dlc_error(DLC_ERR_ARG, "syncer_replicate: fragment %d: momentum[%lld] = %g: expected finite values",
                             p, (long long)i, (double)r->momentum[i]);
    dlc_status st = DLC_OK;
    if (r->whole) {
        for (int i = 0; i < f->n; i++)
            if (!isfinite(r->theta[i]))
                return dlc_error(DLC_ERR_ARG, "syncer_replicate: fragment %d: theta[%d] = %g: expected finite values",
                                 p, i, (double)r->theta[i]);
        for (int k = 0; f->ring_pl && k < s->p.outer.ring && st == DLC_OK; k++) st = release_slot(f, k);
        if (st == DLC_OK) st = dlc_fragstate_set(f->fs, r->theta, r->version);
        f->out_version = -1; /* an encoded Θ_p of that version number is not this one */
    } else {
        st = f->ring_pl ? release_slot(f, (int)((v + 1) % s->p.outer.ring)) : DLC_OK;
        if (st == DLC_OK) st = dlc_fragstate_push(f->fs, r->theta); /* (checks theta) */
    }
    if (st != DLC_OK) return st;
    if (mom) memcpy(mom, r->momentum, (size_t)f->n * sizeof(float));
    for (int i = 0; i < r->count; i++) {
        const dlc_replica_contrib *c = &r->contribs[i];
        size_t at = (size_t)c->learner * s->P + (size_t)p;
        s->merged[c->learner]++;
        s->merged_steps[c->learner] += c->new_steps;
        s->last_base[at] = c->base_version, s->last_steps[at] = c->steps, s->last_tokens[at] = c->tokens;
        s->last_life[at] = s->life[c->learner];
    }
    f->last_open = now;
    return DLC_OK;
}

/* Fragment p's merge held back for the standby goes: each live learner's send of it (the
 * merged fragment, or what else was held for that learner: a join's resync), then its
 * DLC_SACT_MERGED; then p's next round may close. */
static dlc_status publish(dlc_syncer *s, int p, double now) {
    sfrag *f = &s->f[p];
    f->pub = 0;
    dlc_status st = DLC_OK;
    int64_t sent = 0;
    for (int m = 0; m < s->M && st == DLC_OK; m++) {
        pub_owed o = f->pub_owed[m];
        f->pub_owed[m].on = 0;
        if (!s->live[m]) continue;
        int in = f->pub_arr[m] >= 0;
        st = o.on ? send_fragment(s, p, m, o.flags, o.held, o.age, o.phase, o.step_time)
                  : send_fragment(s, p, m, 0, now - (in ? f->pub_arr[m] : f->pub_opened), in ? now - f->pub_opened : 0,
                                  0, 0);
        sent += f->out_len;
    }
    if (st != DLC_OK) return st;
    dlc_syncer_action a = {.type = DLC_SACT_MERGED, .fragment = p, .merge = f->pub_mi};
    a.merge.bytes_out = sent;
    st = push(s, &a);
    return st == DLC_OK ? evaluate(s, p, now, 1) : st;
}

dlc_status dlc_syncer_set_replicated(dlc_syncer *s, int on, double now) {
    if (!s) return dlc_error(DLC_ERR_ARG, "syncer_set_replicated: NULL syncer");
    if (s->p.dp) return dlc_error(DLC_ERR_ARG, "syncer_set_replicated: data parallel is not replicated");
    dlc_status st = syncer_unpolled(s, "syncer_set_replicated");
    for (int p = 0; p < s->P && st == DLC_OK && on; p++) {
        sfrag *f = &s->f[p];
        if (!f->fs || f->pub_arr) continue;
        if (!(f->pub_arr = calloc((size_t)s->M, sizeof *f->pub_arr)) ||
            !(f->pub_owed = calloc((size_t)s->M, sizeof *f->pub_owed)))
            st = dlc_error(DLC_ERR_NOMEM, "syncer_set_replicated: out of memory");
    }
    if (st != DLC_OK) return st;
    s->replicated = on != 0;
    for (int p = 0; p < s->P && st == DLC_OK && !on; p++)
        if (s->f[p].pub) st = publish(s, p, now);
    return st;
}

int dlc_syncer_replicated(const dlc_syncer *s) { return s ? s->replicated : 0; }

int64_t dlc_syncer_awaiting(const dlc_syncer *s, int p) {
    return s && p >= 0 && p < s->P && s->f[p].pub ? s->f[p].pub_version : -1;
}

dlc_status dlc_syncer_replica_acked(dlc_syncer *s, int p, int64_t version, double now) {
    if (!s) return dlc_error(DLC_ERR_ARG, "syncer_replica_acked: NULL syncer");
    dlc_status st = syncer_unpolled(s, "syncer_replica_acked");
    if (st != DLC_OK) return st;
    if (p < 0 || p >= s->P || !s->f[p].fs)
        return dlc_error(DLC_ERR_ARG, "syncer_replica_acked: fragment %d: expected one this syncer owns", p);
    if (!s->f[p].pub || s->f[p].pub_version != version)
        return dlc_error(DLC_ERR_STATE, "syncer_replica_acked: fragment %d version %lld acknowledged, but %s%lld%s", p,
                         (long long)version, s->f[p].pub ? "version " : "", (long long)(s->f[p].pub ? s->f[p].pub_version : 0),
                         s->f[p].pub ? " waits for its standby" : " (none) waits for its standby");
    return publish(s, p, now);
}

dlc_status dlc_syncer_take_over(dlc_syncer *s, int64_t epoch, int64_t prev_epoch, double now) {
    (void)now;
    if (!s) return dlc_error(DLC_ERR_ARG, "syncer_take_over: NULL syncer");
    if (epoch <= s->epoch || epoch <= prev_epoch || prev_epoch < 0)
        return dlc_error(DLC_ERR_ARG, "syncer_take_over: epoch %lld after the primary's %lld: expected an epoch above "
                         "both that and this syncer's %lld", (long long)epoch, (long long)prev_epoch,
                         (long long)s->epoch);
    s->prev_epoch = prev_epoch;
    s->epoch = epoch;
    return DLC_OK;
}

int dlc_syncer_fragments(const dlc_syncer *s) { return s ? s->P : 0; }
int dlc_syncer_owns(const dlc_syncer *s, int p) { return s && p >= 0 && p < s->P && s->f[p].fs != NULL; }
int64_t dlc_syncer_held(const dlc_syncer *s) { return s ? s->held : 0; }
int64_t dlc_syncer_merged(const dlc_syncer *s, int m) { return s && m >= 0 && m < s->M ? s->merged[m] : 0; }
double dlc_syncer_merged_steps(const dlc_syncer *s, int m) {
    return s && m >= 0 && m < s->M ? s->merged_steps[m] : 0;
}
int dlc_syncer_is_unheard(const dlc_syncer *s, int m) {
    return s && m >= 0 && m < s->M && s->live[m] && s->unheard[m];
}
int64_t dlc_syncer_shard(const dlc_syncer *s, int m) { return s && m >= 0 && m < s->M ? s->shard[m] : -1; }
dlc_status dlc_syncer_set_shard(dlc_syncer *s, int m, int64_t shard) {
    dlc_status st = check_learner(s, m, "syncer_set_shard");
    if (st != DLC_OK) return st;
    if (shard < -1)
        return dlc_error(DLC_ERR_ARG, "syncer_set_shard: learner %d: shard = %lld: expected >= 0 (-1 = none)", m + 1,
                         (long long)shard);
    s->shard[m] = shard;
    return DLC_OK;
}
int64_t dlc_syncer_version(const dlc_syncer *s, int p) {
    return s && p >= 0 && p < s->P && s->f[p].fs ? dlc_fragstate_version(s->f[p].fs) : -1;
}
dlc_round_state dlc_syncer_round_state(const dlc_syncer *s, int p) {
    return s && p >= 0 && p < s->P ? s->f[p].state : DLC_ROUND_IDLE;
}
int dlc_syncer_round_count(const dlc_syncer *s, int p) { return s && p >= 0 && p < s->P ? s->f[p].count : 0; }
int dlc_syncer_live(const dlc_syncer *s) { return s ? s->nlive : 0; }
int dlc_syncer_is_live(const dlc_syncer *s, int m) { return s && m >= 0 && m < s->M ? s->live[m] : 0; }
const float *dlc_syncer_theta(const dlc_syncer *s, int p) {
    return s && p >= 0 && p < s->P && s->f[p].fs ? dlc_fragstate_theta(s->f[p].fs) : NULL;
}

dlc_status dlc_syncer_copy_model(const dlc_syncer *s, float *arena) {
    if (!s || !arena) return dlc_error(DLC_ERR_ARG, "syncer_copy_model: NULL argument");
    for (int p = 0; p < s->P; p++) {
        if (!s->f[p].fs) continue; /* another shard's */
        int nv;
        const dlc_frag_view *v = dlc_plan_views(s->plan, p, &nv);
        const float *src = dlc_fragstate_theta(s->f[p].fs);
        for (int j = 0; j < nv; j++) {
            memcpy(arena + v[j].offset, src, (size_t)v[j].numel * sizeof(float));
            src += v[j].numel;
        }
    }
    return DLC_OK;
}

int64_t dlc_syncer_epoch(const dlc_syncer *s) { return s ? s->epoch : 0; }
int64_t dlc_syncer_incarnation(const dlc_syncer *s, int m) {
    return s && m >= 0 && m < s->M ? s->incarnation[m] : 0;
}

void dlc_syncer_estimates(const dlc_syncer *s, double *step, double *quorum_s, double *sync) {
    if (step) *step = s ? live_median(s, s->step_t) : 0;
    if (quorum_s) *quorum_s = s ? s->xi_quorum : 0;
    if (sync) *sync = s ? live_median(s, s->transit) : 0;
}
