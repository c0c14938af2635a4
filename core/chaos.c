/* chaos.c - fault schedules (chaos.h, docs/chaos.md).
 *
 * The faults live in one array sorted by `at`, ties in insertion order, and the on/off
 * kinds (kill, cut, syncer, pause) are kept disjoint per target by a merge sweep after every
 * change: in time order, a fault that starts before (or when) the last kept fault of
 * its target ends is folded into it.  Since everything before the change was already
 * disjoint, that single pass is enough.  One add is a binary-search insert plus a sweep
 * of its target; a poisson batch is sorted, merged with the array into a new one and
 * swept once, so a long random schedule costs O(n log n), not O(n²).  Every check and
 * allocation runs before the first write, so a refused call changes nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/chaos.h"
#include "mix.h"

static const char *const kind_names[] = {"kill", "slow", "cut", "syncer", "link", "pause"};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == DLC_FAULT_KIND_COUNT,
               "one name per dlc_fault_kind");

/* The merge targets (target() below): kill, cut and pause of each learner, the whole
 * syncer, and each role of each shard, down or paused. */
#define TARGETS(c) (3 * (c)->learners + 6 * (DLC_CHAOS_MAX_SHARDS + 1))

struct dlc_chaos {
    int learners;
    int n, cap;
    dlc_fault *f;        /* [cap], n used, sorted by at (stable) */
    int *last;           /* [TARGETS] scratch of the merge sweep: last kept index per target */
    dlc_chaos_event *tl; /* cached timeline, ntl events; valid when tl_ok */
    int ntl, tl_ok;
    uint64_t gen;        /* changes so far (a cursor started before one is stale) */
};

const char *dlc_fault_kind_name(dlc_fault_kind k) {
    return (unsigned)k < DLC_FAULT_KIND_COUNT ? kind_names[k] : "?";
}

static const char *const role_names[] = {"primary", "standby", "both"};
_Static_assert(sizeof role_names / sizeof role_names[0] == DLC_ROLE_COUNT, "one name per dlc_fault_role");

const char *dlc_fault_role_name(dlc_fault_role r) { return (unsigned)r < DLC_ROLE_COUNT ? role_names[r] : "?"; }

dlc_status dlc_fault_role_parse(const char *name, dlc_fault_role *out) {
    if (!name || !out) return dlc_error(DLC_ERR_ARG, "fault_role_parse: %s is NULL", name ? "out" : "name");
    for (int r = 0; r < DLC_ROLE_COUNT; r++)
        if (!strcmp(name, role_names[r])) return *out = (dlc_fault_role)r, DLC_OK;
    return dlc_error(DLC_ERR_ARG, "chaos: role = \"%s\": expected primary, standby or both", name);
}

dlc_status dlc_fault_kind_parse(const char *name, dlc_fault_kind *out) {
    if (!name || !out) return dlc_error(DLC_ERR_ARG, "fault_kind_parse: %s is NULL", name ? "out" : "name");
    for (int k = 0; k < DLC_FAULT_KIND_COUNT; k++)
        if (!strcmp(name, kind_names[k])) return *out = (dlc_fault_kind)k, DLC_OK;
    return dlc_error(DLC_ERR_ARG, "chaos: kind = \"%s\": expected kill, slow, cut, syncer, link or pause", name);
}

/* ---- the random source: splitmix64 seeds xoshiro256** (mix.h) ---- */

typedef dlc_xo rng;

/* Learner m's stream: a function of (seed, m) only.  mix64 is a bijection, so distinct
 * learners of one seed start their splitmix64 sequences at unrelated points. */
static void rng_stream(rng *g, uint64_t seed, int m) {
    uint64_t x = dlc_mix64(dlc_mix64(seed) ^ (uint64_t)(uint32_t)m);
    for (int i = 0; i < 4; i++) g->s[i] = dlc_splitmix64(&x);
}

/* -mean·log(1 - u), u in [0, 1) from the top 53 bits (log1p for accuracy near 0). */
static double expo(rng *g, double mean) {
    double u = (double)(dlc_xo_next(g) >> 11) * 0x1.0p-53;
    return -mean * log1p(-u);
}

/* ---- the schedule ---- */

dlc_chaos *dlc_chaos_new(int learners) {
    if (learners < 1 || learners > DLC_CHAOS_MAX_LEARNERS)
        return dlc_error(DLC_ERR_ARG, "chaos: learners = %d: expected 1..%d (DLC_CHAOS_MAX_LEARNERS)", learners,
                         DLC_CHAOS_MAX_LEARNERS),
               NULL;
    dlc_chaos *c = calloc(1, sizeof *c);
    if (!c) goto fail;
    c->learners = learners;
    c->last = malloc(sizeof(int) * (size_t)TARGETS(c));
    if (!c->last) goto fail;
    return c;
fail:
    dlc_chaos_free(c);
    dlc_error(DLC_ERR_NOMEM, "chaos: out of memory for a schedule of %d learners", learners);
    return NULL;
}

void dlc_chaos_free(dlc_chaos *c) {
    if (!c) return;
    free(c->f);
    free(c->last);
    free(c->tl);
    free(c);
}

static double end_of(const dlc_fault *f) { return f->at + f->duration; }

/* The merge target of f: kill m -> m, cut m -> M + m, syncer -> 2M, pause m -> 2M + 1 + m,
 * syncer shard k -> 3M + k; its standby (role r = 1) or both (r = 2): 3M + 17r + k (k = 0:
 * the whole syncer's); a pause of the syncer's role r of shard k (learner -1): 3M + 51 +
 * 17r + k; -1 for slow and link. */
static int target(const dlc_chaos *c, const dlc_fault *f) {
    switch (f->kind) {
    case DLC_FAULT_KILL: return f->learner;
    case DLC_FAULT_CUT: return c->learners + f->learner;
    case DLC_FAULT_SYNCER:
        if (f->role != DLC_ROLE_PRIMARY) return 3 * c->learners + (DLC_CHAOS_MAX_SHARDS + 1) * (int)f->role + f->shard;
        return f->shard ? 3 * c->learners + f->shard : 2 * c->learners;
    case DLC_FAULT_PAUSE:
        if (f->learner < 0) return 3 * c->learners + (DLC_CHAOS_MAX_SHARDS + 1) * (3 + (int)f->role) + f->shard;
        return 2 * c->learners + 1 + f->learner;
    default: return -1;
    }
}

/* One pass in time order folding each fault into the last kept one of its target when
 * they overlap or touch; only target `only`, or all of them when only < 0. */
static void sweep(dlc_chaos *c, int only) {
    int single = -1, w = 0;
    if (only < 0)
        for (int k = 0; k < TARGETS(c); k++) c->last[k] = -1;
    for (int r = 0; r < c->n; r++) {
        dlc_fault f = c->f[r];
        int k = target(c, &f);
        if (k < 0 || (only >= 0 && k != only)) {
            c->f[w++] = f;
            continue;
        }
        int *last = only >= 0 ? &single : &c->last[k];
        if (*last >= 0 && end_of(&c->f[*last]) >= f.at) {
            dlc_fault *keep = &c->f[*last];
            double e = fmax(end_of(keep), end_of(&f));
            keep->duration = e - keep->at;
            continue;
        }
        *last = w;
        c->f[w++] = f;
    }
    c->n = w;
    c->tl_ok = 0, c->gen++;
}

static dlc_status check_fault(const dlc_chaos *c, const dlc_fault *f) {
    if (!isfinite(f->at) || f->at < 0)
        return dlc_error(DLC_ERR_ARG, "chaos: at = %g: expected a finite time >= 0 s", f->at);
    if ((unsigned)f->kind >= DLC_FAULT_KIND_COUNT)
        return dlc_error(DLC_ERR_ARG, "chaos: kind = %d: expected 0..%d (kill, slow, cut, syncer, link, pause)", (int)f->kind,
                         DLC_FAULT_KIND_COUNT - 1);
    /* a syncer fault, or a pause of the syncer (learner -1): the only ones naming a shard or role */
    int of_syncer = f->kind == DLC_FAULT_SYNCER || (f->kind == DLC_FAULT_PAUSE && f->learner == -1);
    if (of_syncer ? f->shard < 0 || f->shard > DLC_CHAOS_MAX_SHARDS : f->shard != 0)
        return dlc_error(DLC_ERR_ARG, "chaos: shard = %d: expected %s", f->shard,
                         of_syncer ? "0 (the whole syncer) or a shard in [1, 16]"
                                   : "0 (only a fault of the syncer names a shard)");
    if ((unsigned)f->role >= DLC_ROLE_COUNT || (!of_syncer && f->role != DLC_ROLE_PRIMARY))
        return dlc_error(DLC_ERR_ARG, "chaos: role = %d: expected %s", (int)f->role, of_syncer
                         ? "0..2 (primary, standby, both)" : "0 (only a fault of the syncer names a role)");
    if (f->kind == DLC_FAULT_SYNCER) {
        if (f->learner != -1)
            return dlc_error(DLC_ERR_ARG, "chaos: learner = %d: expected -1 for a syncer fault (it has no learner)",
                             f->learner);
    } else if (!of_syncer && (f->learner < 0 || f->learner >= c->learners)) {
        return dlc_error(DLC_ERR_ARG, "chaos: learner = %d: expected an index in [0, %d] (%d learners)%s", f->learner,
                         c->learners - 1, c->learners, f->kind == DLC_FAULT_PAUSE ? ", or -1 to pause the syncer" : "");
    }
    if (!(f->duration > 0))
        return dlc_error(DLC_ERR_ARG, "chaos: duration = %g: expected > 0 s (INFINITY = for the rest of the run)",
                         f->duration);
    if (f->kind == DLC_FAULT_SLOW && (!isfinite(f->factor) || f->factor <= 0))
        return dlc_error(DLC_ERR_ARG, "chaos: factor = %g: expected a finite step-time multiplier > 0 (>= 1 slower)",
                         f->factor);
    if (f->kind == DLC_FAULT_LINK) {
        if (!(f->bandwidth >= 0))
            return dlc_error(DLC_ERR_ARG, "chaos: bandwidth = %g: expected bytes/s > 0 (INFINITY: no cap), or 0 to keep "
                             "the link's", f->bandwidth);
        if (isnan(f->latency) || isinf(f->latency))
            return dlc_error(DLC_ERR_ARG, "chaos: latency = %g: expected one-way seconds >= 0, or < 0 to keep the "
                             "link's", f->latency);
        if (f->bandwidth == 0 && f->latency < 0)
            return dlc_error(DLC_ERR_ARG, "chaos: a link fault sets bandwidth (> 0), latency (>= 0) or both; this one "
                             "keeps both (bandwidth 0, latency %g)", f->latency);
    }
    return DLC_OK;
}

static dlc_status reserve(dlc_chaos *c, int extra, const char *who) {
    if (extra > DLC_CHAOS_MAX_FAULTS - c->n)
        return dlc_error(DLC_ERR_RANGE, "%s: %d faults + %d would exceed DLC_CHAOS_MAX_FAULTS = %d", who, c->n, extra,
                         DLC_CHAOS_MAX_FAULTS);
    if (c->n + extra <= c->cap) return DLC_OK;
    int cap = c->cap ? c->cap : 16;
    while (cap < c->n + extra) cap = cap > DLC_CHAOS_MAX_FAULTS / 2 ? DLC_CHAOS_MAX_FAULTS : 2 * cap;
    dlc_fault *f = realloc(c->f, sizeof *f * (size_t)cap);
    if (!f) return dlc_error(DLC_ERR_NOMEM, "%s: out of memory for %d faults", who, cap);
    c->f = f;
    c->cap = cap;
    return DLC_OK;
}

dlc_status dlc_chaos_add(dlc_chaos *c, const dlc_fault *fin) {
    if (!c || !fin) return dlc_error(DLC_ERR_ARG, "chaos_add: %s is NULL", c ? "f" : "c");
    dlc_status s = check_fault(c, fin);
    if (s != DLC_OK) return s;
    if ((s = reserve(c, 1, "chaos_add")) != DLC_OK) return s;
    dlc_fault f = *fin;
    if (f.kind != DLC_FAULT_SLOW) f.factor = 0;
    if (f.kind != DLC_FAULT_LINK) f.bandwidth = f.latency = 0;
    else if (f.latency < 0) f.latency = -1;
    int lo = 0, hi = c->n; /* first index with at > f.at: after every equal one */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (c->f[mid].at <= f.at) lo = mid + 1;
        else hi = mid;
    }
    memmove(c->f + lo + 1, c->f + lo, sizeof *c->f * (size_t)(c->n - lo));
    c->f[lo] = f;
    c->n++;
    c->tl_ok = 0, c->gen++;
    int k = target(c, &f);
    if (k >= 0) sweep(c, k);
    return DLC_OK;
}

typedef struct ordered { dlc_fault f; int ord; } ordered;

static int cmp_ordered(const void *pa, const void *pb) {
    const ordered *a = pa, *b = pb;
    if (a->f.at != b->f.at) return a->f.at < b->f.at ? -1 : 1;
    return (a->ord > b->ord) - (a->ord < b->ord);
}

dlc_status dlc_chaos_add_poisson(dlc_chaos *c, int learner, double mtbf, double down, int exponential_down,
                                 double horizon, uint64_t seed) {
    if (!c) return dlc_error(DLC_ERR_ARG, "chaos_add_poisson: c is NULL");
    if (learner < -1 || learner >= c->learners)
        return dlc_error(DLC_ERR_ARG, "chaos_add_poisson: learner = %d: expected -1 (all) or an index in [0, %d] (%d learners)",
                         learner, c->learners - 1, c->learners);
    if (!isfinite(mtbf) || mtbf <= 0)
        return dlc_error(DLC_ERR_ARG, "chaos_add_poisson: mtbf = %g: expected a finite mean time between failures > 0 s", mtbf);
    if (!isfinite(down) || down <= 0)
        return dlc_error(DLC_ERR_ARG, "chaos_add_poisson: down = %g: expected a finite down time > 0 s", down);
    if (exponential_down != 0 && exponential_down != 1)
        return dlc_error(DLC_ERR_ARG, "chaos_add_poisson: exponential_down = %d: expected 0 (fixed) or 1", exponential_down);
    if (!isfinite(horizon) || horizon < 0)
        return dlc_error(DLC_ERR_ARG, "chaos_add_poisson: horizon = %g: expected a finite time >= 0 s", horizon);
    int room = DLC_CHAOS_MAX_FAULTS - c->n, nn = 0, capn = 0;
    ordered *nw = NULL;
    dlc_fault *merged = NULL;
    int m0 = learner < 0 ? 0 : learner, m1 = learner < 0 ? c->learners : learner + 1;
    for (int m = m0; m < m1; m++) {
        rng g;
        rng_stream(&g, seed, m);
        for (double t = 0;;) {
            double at = t + expo(&g, mtbf);
            if (!(at < horizon)) break;
            double d = exponential_down ? expo(&g, down) : down;
            if (d <= 0) d = 0x1p-30; /* u = 0 gives 0; a fault lasts > 0 */
            if (nn == room) {
                free(nw);
                return dlc_error(DLC_ERR_RANGE,
                                 "chaos_add_poisson: more than DLC_CHAOS_MAX_FAULTS = %d faults (%d already there; mtbf = %g s over horizon = %g s for %d learner(s)): raise mtbf or shorten the horizon",
                                 DLC_CHAOS_MAX_FAULTS, c->n, mtbf, horizon, m1 - m0);
            }
            if (nn == capn) {
                int nc = capn ? (capn > room / 2 ? room : 2 * capn) : 64;
                ordered *p = realloc(nw, sizeof *p * (size_t)nc);
                if (!p) goto nomem;
                nw = p;
                capn = nc;
            }
            nw[nn].f = (dlc_fault){.at = at, .kind = DLC_FAULT_KILL, .learner = m, .duration = d, .factor = 0};
            nw[nn].ord = nn;
            nn++;
            t = at + d;
        }
    }
    if (nn == 0) return free(nw), DLC_OK;
    qsort(nw, (size_t)nn, sizeof *nw, cmp_ordered);
    int total = c->n + nn;
    merged = malloc(sizeof *merged * (size_t)total);
    if (!merged) goto nomem;
    for (int i = 0, j = 0, w = 0; w < total; w++) /* the existing faults first on ties */
        merged[w] = j >= nn || (i < c->n && c->f[i].at <= nw[j].f.at) ? c->f[i++] : nw[j++].f;
    free(nw);
    free(c->f);
    c->f = merged;
    c->n = c->cap = total;
    sweep(c, -1);
    return DLC_OK;
nomem:
    free(nw);
    return dlc_error(DLC_ERR_NOMEM, "chaos_add_poisson: out of memory for %d faults", nn);
}

int dlc_chaos_learners(const dlc_chaos *c) { return c ? c->learners : 0; }
int dlc_chaos_count(const dlc_chaos *c) { return c ? c->n : 0; }

const dlc_fault *dlc_chaos_get(const dlc_chaos *c, int i) {
    if (!c) return dlc_error(DLC_ERR_ARG, "chaos_get: c is NULL"), NULL;
    if (i < 0 || i >= c->n)
        return dlc_error(DLC_ERR_RANGE, "chaos_get: i = %d: expected an index in [0, %d) (%d faults)", i, c->n, c->n),
               NULL;
    return &c->f[i];
}

static int cmp_event(const void *pa, const void *pb) {
    const dlc_chaos_event *a = pa, *b = pb;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    if (a->begin != b->begin) return a->begin - b->begin; /* ends (0) first */
    return (a->index > b->index) - (a->index < b->index);
}

const dlc_chaos_event *dlc_chaos_timeline(dlc_chaos *c, int *n) {
    if (n) *n = 0;
    if (!c || !n) return dlc_error(DLC_ERR_ARG, "chaos_timeline: %s is NULL", c ? "n" : "c"), NULL;
    if (!c->tl_ok) {
        dlc_chaos_event *e = c->n ? malloc(sizeof *e * 2 * (size_t)c->n) : NULL;
        if (c->n && !e)
            return dlc_error(DLC_ERR_NOMEM, "chaos_timeline: out of memory for %d events", 2 * c->n), NULL;
        int k = 0;
        for (int i = 0; i < c->n; i++) {
            e[k++] = (dlc_chaos_event){c->f[i].at, i, 1};
            double t = end_of(&c->f[i]);
            if (isfinite(t)) e[k++] = (dlc_chaos_event){t, i, 0};
        }
        if (k) qsort(e, (size_t)k, sizeof *e, cmp_event);
        free(c->tl);
        c->tl = e;
        c->ntl = k;
        c->tl_ok = 1;
    }
    *n = c->ntl;
    return c->tl;
}

double dlc_chaos_down_share(const dlc_chaos *c, int learner, double horizon) {
    if (!c || learner < 0 || learner >= c->learners || !isfinite(horizon) || horizon <= 0) return NAN;
    double down = 0;
    for (int i = 0; i < c->n && c->f[i].at < horizon; i++) {
        const dlc_fault *f = &c->f[i];
        if (f->kind != DLC_FAULT_KILL || f->learner != learner) continue;
        down += fmin(end_of(f), horizon) - f->at; /* kills of one learner are disjoint */
    }
    return down / horizon;
}

double dlc_chaos_slow_factor(const dlc_chaos *c, int learner, double t) {
    if (!c || learner < 0 || learner >= c->learners) return NAN;
    double x = 1;
    for (int i = 0; i < c->n && c->f[i].at <= t; i++) {
        const dlc_fault *f = &c->f[i];
        if (f->kind == DLC_FAULT_SLOW && f->learner == learner && t < end_of(f)) x *= f->factor;
    }
    return x;
}

dlc_status dlc_chaos_link_at(const dlc_chaos *c, int learner, double t, double *bandwidth, double *latency) {
    if (!c || !bandwidth || !latency) return dlc_error(DLC_ERR_ARG, "chaos_link_at: NULL argument");
    if (learner < 0 || learner >= c->learners)
        return dlc_error(DLC_ERR_ARG, "chaos_link_at: learner = %d: expected an index in [0, %d]", learner,
                         c->learners - 1);
    for (int i = 0; i < c->n && c->f[i].at <= t; i++) {
        const dlc_fault *f = &c->f[i];
        if (f->kind != DLC_FAULT_LINK || f->learner != learner || !(t < end_of(f))) continue;
        if (f->bandwidth > 0) *bandwidth = f->bandwidth;
        if (f->latency >= 0) *latency = f->latency;
    }
    return DLC_OK;
}

/* ---- the cursor ---- */

dlc_status dlc_chaos_cursor_init(dlc_chaos_cursor *cur, dlc_chaos *c) {
    if (!cur || !c) return dlc_error(DLC_ERR_ARG, "chaos_cursor_init: %s is NULL", cur ? "c" : "cur");
    *cur = (dlc_chaos_cursor){.c = c, .next = 0, .gen = c->gen};
    return DLC_OK;
}

/* The timeline under the cursor (*tl NULL when empty), or an error. */
static dlc_status cursor_timeline(dlc_chaos_cursor *cur, const dlc_chaos_event **tl, int *n) {
    *tl = NULL, *n = 0;
    if (!cur || !cur->c) return dlc_error(DLC_ERR_ARG, "chaos_cursor: not started (dlc_chaos_cursor_init)");
    if (cur->gen != cur->c->gen)
        return dlc_error(DLC_ERR_STATE, "chaos_cursor: the schedule changed after the cursor started");
    *tl = dlc_chaos_timeline(cur->c, n);
    return *tl || cur->c->n == 0 ? DLC_OK : dlc_last_status();
}

int dlc_chaos_cursor_next(dlc_chaos_cursor *cur, double now, dlc_chaos_event *ev, const dlc_fault **f) {
    if (!ev) return dlc_error(DLC_ERR_ARG, "chaos_cursor_next: ev is NULL");
    const dlc_chaos_event *tl;
    int n;
    dlc_status st = cursor_timeline(cur, &tl, &n);
    if (st != DLC_OK) return st;
    if (cur->next >= n || tl[cur->next].t > now) return 0;
    *ev = tl[cur->next++];
    if (f) *f = &cur->c->f[ev->index];
    return 1;
}

double dlc_chaos_cursor_peek(dlc_chaos_cursor *cur) {
    const dlc_chaos_event *tl;
    int n;
    return cursor_timeline(cur, &tl, &n) == DLC_OK && cur->next < n ? tl[cur->next].t : INFINITY;
}

int dlc_chaos_cursor_position(const dlc_chaos_cursor *cur) { return cur ? cur->next : 0; }
