/* goodput.c - the goodput simulator (goodput.h, docs/goodput.md).
 *
 * One event loop over all learners.  A learner's next event is the earliest of its next
 * interruption, the return of the oldest slice under repair (repair times are all equal,
 * so slices return in the order they left: a FIFO) and the end of its pause; a tournament
 * tree over the learners gives the global earliest in O(log M).  The interruption process
 * of a learner is ONE Poisson process of rate live_chips / mtbi, redrawn whenever
 * live_chips changes (exponential gaps are memoryless, so redrawing is exact).  Steps and
 * checkpoints are not events: the work done in a run segment is computed in closed form
 * from the segment's start when something interrupts it or when it is sampled. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/goodput.h"
#include "mix.h"

static const char *const policy_names[] = {"dp", "elastic-dp", "decoupled"};
static const char *const pause_names[] = {"absorb", "extend"};
static_assert(sizeof policy_names / sizeof policy_names[0] == DLC_GOODPUT_POLICY_COUNT, "policy name table");
static_assert(sizeof pause_names / sizeof pause_names[0] == DLC_GOODPUT_PAUSE_COUNT, "pause name table");

const char *dlc_goodput_policy_name(int p) {
    return p >= 0 && p < DLC_GOODPUT_POLICY_COUNT ? policy_names[p] : "?";
}
const char *dlc_goodput_pause_name(int p) { return p >= 0 && p < DLC_GOODPUT_PAUSE_COUNT ? pause_names[p] : "?"; }

dlc_status dlc_goodput_policy_parse(const char *name, dlc_goodput_policy *out) {
    for (int i = 0; name && out && i < DLC_GOODPUT_POLICY_COUNT; i++)
        if (!strcmp(name, policy_names[i])) return *out = (dlc_goodput_policy)i, DLC_OK;
    return dlc_error(DLC_ERR_ARG, "goodput: policy = \"%s\", expected dp, elastic-dp or decoupled", name ? name : "(null)");
}

dlc_status dlc_goodput_pause_parse(const char *name, dlc_goodput_pause *out) {
    for (int i = 0; name && out && i < DLC_GOODPUT_PAUSE_COUNT; i++)
        if (!strcmp(name, pause_names[i])) return *out = (dlc_goodput_pause)i, DLC_OK;
    return dlc_error(DLC_ERR_ARG, "goodput: pause = \"%s\", expected absorb or extend", name ? name : "(null)");
}

#define DAY 86400.0
#define YEAR (365 * DAY)

dlc_goodput_params dlc_goodput_default_params(void) {
    dlc_goodput_params p;
    memset(&p, 0, sizeof p);
    p.policy = DLC_GOODPUT_ELASTIC;
    p.chips = 1200000;       /* paper */
    p.slice_chips = 256;     /* estimate */
    p.learners = 1;
    p.mtbi = YEAR;           /* paper */
    p.repair = 3600;         /* estimate */
    p.downscale = 7.5;       /* calibrated: elastic-dp 58% at 1.2M chips */
    p.upscale = 7.5;         /* calibrated together with downscale (equal) */
    p.step = 2;              /* estimate */
    p.checkpoint = 30;       /* estimate */
    p.checkpoint_cost = 0;   /* estimate: asynchronous in-memory checkpoints */
    p.restart = 30;          /* estimate */
    p.pause = DLC_GOODPUT_ABSORB;
    p.duration = 30 * DAY;
    p.sample = 3600;
    p.seed = 0;
    p.syncer_shards = 0;        /* not modeled unless asked */
    p.syncer_mtbf = 30 * DAY;   /* estimate: a CPU host */
    p.syncer_restart = 300;     /* estimate: a new process, its checkpoint read, learners back */
    p.syncer_checkpoint = 600;  /* estimate */
    p.standby = 0;
    p.lease = 10;               /* estimate: runtime.timeout's default */
    return p;
}

static int bad_dur(double v, double lo, int open) { return !isfinite(v) || v < lo || (open && v == lo); }

dlc_status dlc_goodput_params_check(const dlc_goodput_params *p) {
    if (!p) return dlc_error(DLC_ERR_ARG, "goodput: params is NULL");
    if ((int)p->policy < 0 || p->policy >= DLC_GOODPUT_POLICY_COUNT)
        return dlc_error(DLC_ERR_ARG, "goodput: policy = %d, expected 0..%d (dp, elastic-dp, decoupled)", (int)p->policy,
                         DLC_GOODPUT_POLICY_COUNT - 1);
    if (p->chips < 1 || p->chips > DLC_GOODPUT_MAX_CHIPS)
        return dlc_error(DLC_ERR_ARG, "goodput: chips = %lld, expected 1..%lld", (long long)p->chips,
                         (long long)DLC_GOODPUT_MAX_CHIPS);
    if (p->learners < 1 || p->learners > DLC_GOODPUT_MAX_LEARNERS || p->learners > p->chips)
        return dlc_error(DLC_ERR_ARG, "goodput: learners = %d, expected 1..%d and at most chips (%lld)", p->learners,
                         DLC_GOODPUT_MAX_LEARNERS, (long long)p->chips);
    if (p->learners != 1 && p->policy != DLC_GOODPUT_DECOUPLED)
        return dlc_error(DLC_ERR_ARG, "goodput: learners = %d with policy %s: only decoupled has several learners",
                         p->learners, policy_names[p->policy]);
    int64_t per = p->chips / p->learners;
    if (p->slice_chips < 1 || p->slice_chips > per)
        return dlc_error(DLC_ERR_ARG, "goodput: slice_chips = %lld, expected 1..%lld (the chips of one learner)",
                         (long long)p->slice_chips, (long long)per);
    if (bad_dur(p->mtbi, 0, 1))
        return dlc_error(DLC_ERR_ARG, "goodput: mtbi = %g, expected a finite duration > 0 (seconds)", p->mtbi);
    if (bad_dur(p->step, 0, 1))
        return dlc_error(DLC_ERR_ARG, "goodput: step = %g, expected a finite duration > 0 (seconds)", p->step);
    const struct { const char *name; double v; } nonneg[] = {{"repair", p->repair}, {"downscale", p->downscale},
        {"upscale", p->upscale}, {"checkpoint_cost", p->checkpoint_cost}, {"restart", p->restart}};
    for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
        if (bad_dur(nonneg[i].v, 0, 0))
            return dlc_error(DLC_ERR_ARG, "goodput: %s = %g, expected a finite duration >= 0 (seconds)", nonneg[i].name,
                             nonneg[i].v);
    if (!isfinite(p->checkpoint) || p->checkpoint < p->step)
        return dlc_error(DLC_ERR_ARG, "goodput: checkpoint = %g, expected a finite duration >= step (%g s)", p->checkpoint,
                         p->step);
    if ((int)p->pause < 0 || p->pause >= DLC_GOODPUT_PAUSE_COUNT)
        return dlc_error(DLC_ERR_ARG, "goodput: pause = %d, expected 0 (absorb) or 1 (extend)", (int)p->pause);
    if (bad_dur(p->duration, 0, 1) || p->duration > 1e6 * YEAR)
        return dlc_error(DLC_ERR_ARG, "goodput: duration = %g, expected a finite duration in (0, 1e6 years] (seconds)",
                         p->duration);
    if (!isfinite(p->sample) || p->sample < 0 || (p->sample > 0 && p->duration / p->sample >= DLC_GOODPUT_MAX_SAMPLES))
        return dlc_error(DLC_ERR_ARG, "goodput: sample = %g, expected 0 (no series) or a duration >= duration / %d (%g s)",
                         p->sample, DLC_GOODPUT_MAX_SAMPLES, p->duration / DLC_GOODPUT_MAX_SAMPLES);
    if (p->syncer_shards < 0 || p->syncer_shards > DLC_GOODPUT_MAX_SHARDS)
        return dlc_error(DLC_ERR_ARG, "goodput: syncer_shards = %d, expected 0 (no syncer modeled) .. %d", p->syncer_shards,
                         DLC_GOODPUT_MAX_SHARDS);
    if (p->syncer_shards > 0 && p->policy != DLC_GOODPUT_DECOUPLED)
        return dlc_error(DLC_ERR_ARG, "goodput: syncer_shards = %d with policy %s: the syncer is modeled for decoupled only",
                         p->syncer_shards, policy_names[p->policy]);
    if (bad_dur(p->syncer_mtbf, 0, 1))
        return dlc_error(DLC_ERR_ARG, "goodput: syncer_mtbf = %g, expected a finite duration > 0 (seconds)", p->syncer_mtbf);
    if (bad_dur(p->syncer_checkpoint, 0, 1))
        return dlc_error(DLC_ERR_ARG, "goodput: syncer_checkpoint = %g, expected a finite duration > 0 (seconds)",
                         p->syncer_checkpoint);
    if (bad_dur(p->syncer_restart, 0, 0) || bad_dur(p->lease, 0, 0))
        return dlc_error(DLC_ERR_ARG, "goodput: %s = %g, expected a finite duration >= 0 (seconds)",
                         bad_dur(p->lease, 0, 0) ? "lease" : "syncer_restart",
                         bad_dur(p->lease, 0, 0) ? p->lease : p->syncer_restart);
    if (p->standby != 0 && p->standby != 1)
        return dlc_error(DLC_ERR_ARG, "goodput: standby = %d, expected 0 or 1", p->standby);
    return DLC_OK;
}

/* ---- randomness: xoshiro256** seeded by splitmix64, one stream per learner ---- */

typedef dlc_xo xo;

static void xo_seed(xo *g, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++) g->s[i] = dlc_splitmix64(&x);
}

/* Uniform in (0, 1]. */
static double xo_open01(xo *g) { return (double)((dlc_xo_next(g) >> 11) + 1) * 0x1p-53; }

/* ---- one learner ---- */

enum { RUN, PAUSE, DOWN };

typedef struct repair {
    double t;  /* return time */
    int last;  /* 1: the learner's last (remainder) slice */
} repair;

typedef struct learner {
    xo rng;
    int64_t chips, nslices, rem; /* nslices - 1 slices of slice_chips, one of rem (1..slice_chips) */
    int64_t live_full;           /* live full slices */
    int rem_live;                /* the last slice is live */
    repair *rq;                  /* FIFO of nslices entries */
    int64_t rq_head, rq_len;
    int state;
    double next_fail, pause_end;
    double run_start; /* RUN: start of the current segment */
    int64_t working;  /* RUN: chips computing in it */
    double pos;       /* useful chip-seconds at run_start (or now, when not running) */
} learner;

/* A syncer shard (goodput.h, "The syncer"): the times of its next events, INFINITY for none. */
typedef struct shard {
    xo rng;
    double primary_fail;   /* its primary's next failure (INFINITY while the shard is down) */
    double standby_fail;   /* its standby's next failure (INFINITY: no standby now) */
    double standby_up;     /* a new standby is ready (INFINITY: none starting) */
    double back;           /* down: back from its checkpoint set then */
    double lease_end;      /* a takeover under way ends */
    double base_time;      /* when it last came back (-1: never went down) */
    double *from;          /* [M] the learners' progress the loss under way is counted from */
    double *base;          /* [M] their progress when it last came back */
} shard;

typedef struct sim {
    const dlc_goodput_params *p;
    int dp;
    int64_t ckpt_steps; /* dp: steps per checkpoint */
    learner *l;
    int m;
    int *tree; /* tournament tree over learners: tree[1] is the one with the earliest event */
    int leaves;
    int running; /* learners in RUN */
    int64_t live_total;
    int64_t events, interruptions, rollbacks;
    double first; /* time of the first interruption */
    /* the syncer (S = 0: not modeled) */
    int S;
    shard *sh;
    int down;          /* shards down now: no checkpoint set is written */
    double tick;       /* the next checkpoint set */
    double ck_time;    /* the last one written, and every learner's progress then */
    double *ck_pos;    /* [M] */
    double *lost;      /* [M] useful chip-seconds each learner lost to the syncer */
    double lost_total;
    int64_t syncer_failures, outages, takeovers;
} sim;

static int64_t live_chips(const sim *s, const learner *l) {
    return s->dp ? l->chips : l->live_full * s->p->slice_chips + (l->rem_live ? l->rem : 0);
}

static double next_time(const learner *l) {
    double t = l->next_fail;
    if (l->rq_len && l->rq[l->rq_head].t < t) t = l->rq[l->rq_head].t;
    if (l->state == PAUSE && l->pause_end < t) t = l->pause_end;
    return t;
}

static double tree_time(const sim *s, int node) {
    int i = s->tree[node];
    return i < 0 ? INFINITY : next_time(&s->l[i]);
}

static void tree_update(sim *s, int i) {
    for (int n = (s->leaves + i) / 2; n >= 1; n /= 2) {
        int a = s->tree[2 * n], b = s->tree[2 * n + 1];
        s->tree[n] = (b >= 0 && (a < 0 || tree_time(s, 2 * n + 1) < tree_time(s, 2 * n))) ? b : a;
    }
}

/* Work of a run segment of length e: completed steps, and for dp the steps already covered
 * by a completed checkpoint (each checkpoint_cost seconds after its ckpt_steps steps). */
static void segment(const sim *s, double e, double *steps, double *committed) {
    const double st = s->p->step;
    if (!s->dp) {
        *steps = floor(e / st);
        *committed = *steps;
        return;
    }
    const double k = (double)s->ckpt_steps, cycle = k * st + s->p->checkpoint_cost;
    double c = floor(e / cycle), r = e - c * cycle;
    double in = floor(r / st);
    *steps = c * k + (in < k ? in : k);
    *committed = c * k;
}

static double progress_at(const sim *s, const learner *l, double t) {
    if (l->state != RUN) return l->pos;
    double steps, committed;
    segment(s, t - l->run_start, &steps, &committed);
    return l->pos + steps * s->p->step * (double)l->working;
}

static void redraw_fail(sim *s, learner *l, double t) {
    int64_t c = live_chips(s, l);
    l->next_fail = c > 0 ? t - log(xo_open01(&l->rng)) * s->p->mtbi / (double)c : INFINITY;
}

/* Ends the running segment at t (keeping its completed steps, or for dp rolling back to the
 * last checkpoint) and pauses for d seconds; during a pause, absorbs or extends. */
static void pause_for(sim *s, learner *l, double t, double d) {
    if (l->state == RUN) {
        double steps, committed;
        segment(s, t - l->run_start, &steps, &committed);
        double keep = s->dp ? committed : steps;
        if (s->dp && steps > committed) s->rollbacks++;
        l->pos += keep * s->p->step * (double)l->working;
        l->state = PAUSE;
        l->pause_end = t + d;
        s->running--;
    } else if (l->state == DOWN) {
        l->state = PAUSE;
        l->pause_end = t + d;
    } else if (s->p->pause == DLC_GOODPUT_EXTEND && t + d > l->pause_end) {
        l->pause_end = t + d;
    }
}

static void interrupt(sim *s, learner *l, double t) {
    if (s->interruptions++ == 0) s->first = t;
    if (s->dp) { /* a spare takes the slice's place: the job keeps its chips */
        pause_for(s, l, t, s->p->restart);
        redraw_fail(s, l, t);
        return;
    }
    int64_t live = live_chips(s, l);
    int last = l->rem_live && xo_open01(&l->rng) * (double)live <= (double)l->rem;
    if (last) l->rem_live = 0;
    else l->live_full--;
    int64_t gone = last ? l->rem : s->p->slice_chips;
    s->live_total -= gone;
    int64_t tail = (l->rq_head + l->rq_len) % l->nslices;
    l->rq[tail].t = t + s->p->repair;
    l->rq[tail].last = last;
    l->rq_len++;
    pause_for(s, l, t, s->p->downscale);
    if (live - gone == 0) l->state = DOWN; /* nothing to compute with until a slice returns */
    redraw_fail(s, l, t);
}

static void slice_returns(sim *s, learner *l, double t) {
    repair r = l->rq[l->rq_head];
    l->rq_head = (l->rq_head + 1) % l->nslices;
    l->rq_len--;
    if (r.last) l->rem_live = 1;
    else l->live_full++;
    s->live_total += r.last ? l->rem : s->p->slice_chips;
    pause_for(s, l, t, s->p->upscale);
    redraw_fail(s, l, t);
}

static void pause_ends(sim *s, learner *l, double t) {
    l->state = RUN;
    l->run_start = t;
    l->working = live_chips(s, l);
    s->running++;
}

/* ---- the syncer's shards (goodput.h, "The syncer") ---- */

enum { SY_TICK, SY_PRIMARY, SY_STANDBY, SY_STANDBY_UP, SY_BACK, SY_LEASE };

static double draw(xo *g, double t, double mean) { return t - log(xo_open01(g)) * mean; }

/* The syncer's earliest event: its time, *kind and the shard *k (INFINITY: none). */
static double syncer_next(const sim *s, int *kind, int *k) {
    *kind = -1, *k = -1;
    if (!s->S) return INFINITY;
    double t = s->tick;
    *kind = SY_TICK;
    for (int j = 0; j < s->S; j++) {
        const shard *h = &s->sh[j];
        const double at[] = {h->primary_fail, h->standby_fail, h->standby_up, h->back, h->lease_end};
        const int kinds[] = {SY_PRIMARY, SY_STANDBY, SY_STANDBY_UP, SY_BACK, SY_LEASE};
        for (int q = 0; q < 5; q++)
            if (at[q] < t) t = at[q], *kind = kinds[q], *k = j;
    }
    return t;
}

/* Every learner's progress at t into dst. */
static void snap(const sim *s, double t, double *dst) {
    for (int j = 0; j < s->m; j++) dst[j] = progress_at(s, &s->l[j], t);
}

/* A shard's share (1/S) of every learner's work since `from` is lost. */
static void lose_since(sim *s, double t, const double *from) {
    for (int j = 0; j < s->m; j++) {
        double d = (progress_at(s, &s->l[j], t) - from[j]) / s->S;
        if (d > 0) s->lost[j] += d, s->lost_total += d;
    }
}

static void syncer_event(sim *s, double t, int kind, int k) {
    const dlc_goodput_params *p = s->p;
    shard *h = k >= 0 ? &s->sh[k] : NULL;
    switch (kind) {
    case SY_TICK:
        if (s->down == 0) {
            snap(s, t, s->ck_pos);
            s->ck_time = t;
        }
        s->tick = t + p->syncer_checkpoint;
        break;
    case SY_PRIMARY:
        s->syncer_failures++;
        if (h->lease_end < INFINITY) { /* the one that took over fails in its lease: that takeover ends here */
            lose_since(s, t, h->from);
            h->lease_end = INFINITY;
        }
        if (h->standby_fail < INFINITY) { /* its standby takes over, with its own failure clock */
            s->takeovers++;
            snap(s, t, h->from);
            h->lease_end = t + p->lease;
            h->primary_fail = h->standby_fail;
            h->standby_fail = INFINITY;
            h->standby_up = t + p->syncer_restart; /* the replaced primary, back as the standby */
        } else { /* down: back from its checkpoint set, what it merged since lost */
            s->outages++;
            s->down++;
            memcpy(h->from, s->ck_time >= h->base_time ? s->ck_pos : h->base, sizeof(double) * (size_t)s->m);
            h->back = t + p->syncer_restart;
            h->primary_fail = INFINITY;
            h->standby_up = INFINITY; /* a standby attaches once it is back */
        }
        break;
    case SY_STANDBY:
        s->syncer_failures++;
        h->standby_fail = INFINITY;
        h->standby_up = t + p->syncer_restart;
        break;
    case SY_STANDBY_UP:
        h->standby_up = INFINITY;
        h->standby_fail = draw(&h->rng, t, p->syncer_mtbf);
        break;
    case SY_BACK:
        lose_since(s, t, h->from);
        s->down--;
        h->back = INFINITY;
        h->primary_fail = draw(&h->rng, t, p->syncer_mtbf);
        snap(s, t, h->base);
        h->base_time = t;
        if (p->standby) h->standby_up = t + p->syncer_restart;
        break;
    case SY_LEASE:
        lose_since(s, t, h->from);
        h->lease_end = INFINITY;
        break;
    default: break;
    }
}

static void sim_free(sim *s) {
    if (s->l)
        for (int i = 0; i < s->m; i++) free(s->l[i].rq);
    free(s->l);
    free(s->tree);
    if (s->sh)
        for (int k = 0; k < s->S; k++) free(s->sh[k].from), free(s->sh[k].base);
    free(s->sh);
    free(s->ck_pos);
    free(s->lost);
}

void dlc_goodput_result_free(dlc_goodput_result *r) {
    if (!r) return;
    free(r->learner_goodput);
    free(r->t);
    free(r->live_chips);
    free(r->progress);
    memset(r, 0, sizeof *r);
}

dlc_status dlc_goodput_run(const dlc_goodput_params *p, dlc_goodput_result *out) {
    if (!out) return dlc_error(DLC_ERR_ARG, "goodput_run: out is NULL");
    memset(out, 0, sizeof *out);
    dlc_status st = dlc_goodput_params_check(p);
    if (st != DLC_OK) return st;
    sim s;
    memset(&s, 0, sizeof s);
    s.p = p;
    s.first = -1;
    s.dp = p->policy == DLC_GOODPUT_DP;
    s.ckpt_steps = (int64_t)floor(p->checkpoint / p->step * (1 + 1e-12));
    if (s.ckpt_steps < 1) s.ckpt_steps = 1;
    s.m = p->learners;
    for (s.leaves = 1; s.leaves < s.m; s.leaves *= 2) {}
    s.l = calloc((size_t)s.m, sizeof *s.l);
    s.tree = malloc(sizeof(int) * 2 * (size_t)s.leaves);
    out->learners = s.m;
    out->learner_goodput = calloc((size_t)s.m, sizeof(double));
    int64_t ns = p->sample > 0 ? (int64_t)floor(p->duration / p->sample) + 1 : 0;
    if (ns) {
        out->t = malloc(sizeof(double) * (size_t)ns);
        out->live_chips = malloc(sizeof(double) * (size_t)ns);
        out->progress = malloc(sizeof(double) * (size_t)ns);
    }
    if (!s.l || !s.tree || !out->learner_goodput || (ns && (!out->t || !out->live_chips || !out->progress)))
        goto nomem;
    for (int i = 0; i < s.m; i++) {
        learner *l = &s.l[i];
        l->chips = p->chips / s.m + (i < p->chips % s.m);
        l->nslices = (l->chips + p->slice_chips - 1) / p->slice_chips;
        l->rem = l->chips - (l->nslices - 1) * p->slice_chips;
        l->live_full = l->nslices - 1;
        l->rem_live = 1;
        if (!s.dp && !(l->rq = malloc(sizeof(repair) * (size_t)l->nslices))) goto nomem;
        xo_seed(&l->rng, p->seed, (uint64_t)i);
        l->state = PAUSE; /* a zero-length pause: the first event starts the run at t = 0 */
        l->pause_end = 0;
        s.live_total += l->chips;
        redraw_fail(&s, l, 0);
    }
    s.S = p->syncer_shards;
    s.lost = calloc((size_t)s.m, sizeof(double));
    if (!s.lost) goto nomem;
    if (s.S > 0) {
        s.sh = calloc((size_t)s.S, sizeof *s.sh);
        s.ck_pos = calloc((size_t)s.m, sizeof(double));
        if (!s.sh || !s.ck_pos) goto nomem;
        s.tick = p->syncer_checkpoint;
        for (int k = 0; k < s.S; k++) {
            shard *h = &s.sh[k];
            if (!(h->from = calloc((size_t)s.m, sizeof(double))) || !(h->base = calloc((size_t)s.m, sizeof(double))))
                goto nomem;
            xo_seed(&h->rng, p->seed, ((uint64_t)1 << 32) + (uint64_t)k); /* (learners use streams 0..M-1) */
            h->primary_fail = draw(&h->rng, 0, p->syncer_mtbf);
            h->standby_fail = p->standby ? draw(&h->rng, 0, p->syncer_mtbf) : INFINITY;
            h->standby_up = h->back = h->lease_end = INFINITY;
            h->base_time = -1;
        }
    }
    for (int n = 0; n < 2 * s.leaves; n++) s.tree[n] = -1;
    for (int i = 0; i < s.m; i++) s.tree[s.leaves + i] = i;
    for (int i = 0; i < s.m; i++) tree_update(&s, i);

    double now = 0, up = 0;
    int64_t next_sample = 0;
    for (;;) {
        int i = s.tree[1], kind, k;
        double te = tree_time(&s, 1), ts = syncer_next(&s, &kind, &k);
        int syncer = ts < te; /* (a learner's event first at the same instant) */
        if (syncer) te = ts;
        double stop = te < p->duration ? te : p->duration;
        for (; next_sample < ns && (double)next_sample * p->sample < te; next_sample++) {
            double tsm = (double)next_sample * p->sample, prog = -s.lost_total;
            for (int j = 0; j < s.m; j++) prog += progress_at(&s, &s.l[j], tsm);
            out->t[next_sample] = tsm;
            out->live_chips[next_sample] = (double)s.live_total;
            out->progress[next_sample] = prog / (double)p->chips;
        }
        if (s.running > 0) up += stop - now;
        now = stop;
        if (te > p->duration) break;
        if (syncer) {
            syncer_event(&s, te, kind, k);
            continue;
        }
        learner *l = &s.l[i];
        s.events++;
        if (l->state == PAUSE && l->pause_end <= l->next_fail && (!l->rq_len || l->pause_end <= l->rq[l->rq_head].t))
            pause_ends(&s, l, te);
        else if (l->rq_len && l->rq[l->rq_head].t <= l->next_fail)
            slice_returns(&s, l, te);
        else
            interrupt(&s, l, te);
        tree_update(&s, i);
    }
    for (int k = 0; k < s.S; k++) /* a shard down or taken over at the end: what it lost so far */
        if (s.sh[k].back < INFINITY || s.sh[k].lease_end < INFINITY) lose_since(&s, p->duration, s.sh[k].from);
    double useful = 0;
    for (int i = 0; i < s.m; i++) {
        double u = progress_at(&s, &s.l[i], p->duration) - s.lost[i];
        out->learner_goodput[i] = u / ((double)s.l[i].chips * p->duration);
        useful += u;
    }
    out->useful = useful;
    out->goodput = useful / ((double)p->chips * p->duration);
    out->uptime = up / p->duration;
    out->interruptions = s.interruptions;
    out->rollbacks = s.rollbacks;
    out->first_interruption = s.first;
    out->syncer_failures = s.syncer_failures;
    out->syncer_outages = s.outages;
    out->takeovers = s.takeovers;
    out->syncer_lost = s.lost_total;
    out->events = s.events;
    out->samples = ns;
    sim_free(&s);
    return DLC_OK;
nomem:
    sim_free(&s);
    dlc_goodput_result_free(out);
    return dlc_error(DLC_ERR_NOMEM, "goodput_run: out of memory for %d learners and %lld samples", p->learners,
                     (long long)ns);
}
