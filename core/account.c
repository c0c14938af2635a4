/* account.c - the run's account (account.h): islands' state clocks, their work, merges.
 *
 * Each island keeps the seconds spent in every state up to its last change, the state it
 * is in and since when; a row closes the current state at t_end without changing
 * anything, so a live display and the end read the same numbers.  Merges are kept as a
 * sorted array of times (they come in time order; a late one is inserted), so the uptime
 * of any window is one pass with no allocation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/account.h"

static const char *const state_names[] = {"off", "starting", "up", "down", "paused", "held", "done"};
_Static_assert(sizeof state_names / sizeof state_names[0] == DLC_ISLAND_STATE_COUNT, "one name per state");
static const char *const bucket_names[] = {"useful", "overwritten", "dropped", "unsent",
                                           "down",   "waiting",     "done",    "other"};
_Static_assert(sizeof bucket_names / sizeof bucket_names[0] == DLC_BUCKET_COUNT, "one name per bucket");

typedef struct island {
    dlc_island_state state;
    double since;                        /* of the current state */
    double in[DLC_ISLAND_STATE_COUNT];   /* seconds in each state before `since` */
    dlc_account_work work;
} island;

struct dlc_account {
    int n;
    double t0;
    island *isl;
    double *merge_t; /* [cap], nmerge used, ascending */
    int64_t nmerge, cap;
    double useful_tokens;
};

const char *dlc_island_state_name(int s) { return s >= 0 && s < DLC_ISLAND_STATE_COUNT ? state_names[s] : "?"; }
const char *dlc_account_bucket_name(int b) { return b >= 0 && b < DLC_BUCKET_COUNT ? bucket_names[b] : "?"; }

dlc_status dlc_island_state_parse(const char *name, dlc_island_state *out) {
    if (!name || !out) return dlc_error(DLC_ERR_ARG, "island_state_parse: %s is NULL", name ? "out" : "name");
    for (int s = 0; s < DLC_ISLAND_STATE_COUNT; s++)
        if (!strcmp(name, state_names[s])) return *out = (dlc_island_state)s, DLC_OK;
    return dlc_error(DLC_ERR_ARG,
                     "account: island state \"%s\": expected off, starting, up, down, paused, held or done", name);
}

dlc_account *dlc_account_new(int islands, double t0) {
    if (islands < 1 || islands > DLC_ACCOUNT_MAX_ISLANDS) {
        dlc_error(DLC_ERR_RANGE, "account_new: %d islands: expected 1..%d", islands, DLC_ACCOUNT_MAX_ISLANDS);
        return NULL;
    }
    if (!isfinite(t0)) {
        dlc_error(DLC_ERR_ARG, "account_new: t0 = %g: expected a finite time", t0);
        return NULL;
    }
    dlc_account *a = calloc(1, sizeof *a);
    if (a) a->isl = calloc((size_t)islands, sizeof *a->isl);
    if (!a || !a->isl) {
        free(a);
        dlc_error(DLC_ERR_NOMEM, "account_new: %d islands", islands);
        return NULL;
    }
    a->n = islands, a->t0 = t0;
    for (int m = 0; m < islands; m++) a->isl[m].since = t0, a->isl[m].work.ready_since = -1;
    return a;
}

void dlc_account_free(dlc_account *a) {
    if (!a) return;
    free(a->isl);
    free(a->merge_t);
    free(a);
}

int dlc_account_islands(const dlc_account *a) { return a ? a->n : 0; }
double dlc_account_t0(const dlc_account *a) { return a ? a->t0 : 0; }

static dlc_status island_arg(const dlc_account *a, int m, const char *fn) {
    if (!a) return dlc_error(DLC_ERR_ARG, "%s: NULL account", fn);
    if (m < 0 || m >= a->n) return dlc_error(DLC_ERR_RANGE, "%s: island %d: expected 0..%d", fn, m, a->n - 1);
    return DLC_OK;
}

dlc_status dlc_account_enter(dlc_account *a, int m, dlc_island_state state, double t) {
    dlc_status st = island_arg(a, m, "account_enter");
    if (st != DLC_OK) return st;
    if ((unsigned)state >= DLC_ISLAND_STATE_COUNT)
        return dlc_error(DLC_ERR_ARG, "account_enter: state %d: expected 0..%d", (int)state, DLC_ISLAND_STATE_COUNT - 1);
    if (!isfinite(t)) return dlc_error(DLC_ERR_ARG, "account_enter: t = %g: expected a finite time", t);
    island *i = &a->isl[m];
    if (state == i->state) return DLC_OK;
    if (t < i->since) t = i->since;
    i->in[i->state] += t - i->since;
    i->state = state, i->since = t;
    return DLC_OK;
}

dlc_island_state dlc_account_state(const dlc_account *a, int m, double *since) {
    if (!a || m < 0 || m >= a->n) return DLC_ISLAND_OFF;
    if (since) *since = a->isl[m].since;
    return a->isl[m].state;
}

/* The seconds of each state within [t0, t_end], the current one lasting to t_end.  The
 * states tile [t0, since] (each change closes the last at its own time), so with
 * t_end >= since the sum is exactly the window; a t_end before the last change (a row
 * asked for the past) scales the closed seconds to fit, exact only in their sum. */
static void seconds_of(const island *i, double t0, double t_end, double out[DLC_ISLAND_STATE_COUNT]) {
    for (int s = 0; s < DLC_ISLAND_STATE_COUNT; s++) out[s] = i->in[s];
    if (t_end >= i->since) {
        out[i->state] += t_end - i->since;
        return;
    }
    double closed = i->since - t0, window = t_end > t0 ? t_end - t0 : 0;
    double k = closed > 0 ? window / closed : 0;
    for (int s = 0; s < DLC_ISLAND_STATE_COUNT; s++) out[s] *= k;
}

double dlc_account_seconds(const dlc_account *a, int m, dlc_island_state state, double t_end) {
    if (!a || m < 0 || m >= a->n || (unsigned)state >= DLC_ISLAND_STATE_COUNT) return 0;
    double sec[DLC_ISLAND_STATE_COUNT];
    seconds_of(&a->isl[m], a->t0, t_end, sec);
    return sec[state];
}

static int bad_number(double x) { return !isfinite(x) || x < 0; }

dlc_status dlc_account_set_work(dlc_account *a, int m, const dlc_account_work *w) {
    dlc_status st = island_arg(a, m, "account_set_work");
    if (st != DLC_OK) return st;
    if (!w) return dlc_error(DLC_ERR_ARG, "account_set_work: NULL work");
    const dlc_learner_account *f = &w->fates;
    const struct { const char *name; double v; } fields[] = {
        {"busy_s", w->busy_s},           {"idle_s", w->idle_s},           {"steps", w->steps},
        {"nominal_tps", w->nominal_tps}, {"merged_steps", w->merged_steps},
        {"sent_steps", f->sent_steps},   {"overwritten_steps", f->overwritten_steps},
        {"kept_steps", f->kept_steps},   {"discarded_steps", f->discarded_steps},
        {"unsent_steps", f->unsent_steps}, {"sent_s", f->sent_s},
        {"overwritten_s", f->overwritten_s}, {"kept_s", f->kept_s},
        {"discarded_s", f->discarded_s}, {"unsent_s", f->unsent_s},
    };
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++)
        if (bad_number(fields[k].v))
            return dlc_error(DLC_ERR_ARG, "account_set_work: %s = %g: expected a finite number >= 0", fields[k].name,
                             fields[k].v);
    if (!isfinite(w->ready_since))
        return dlc_error(DLC_ERR_ARG, "account_set_work: ready_since = %g: expected a finite time", w->ready_since);
    a->isl[m].work = *w;
    return DLC_OK;
}

dlc_status dlc_account_merge(dlc_account *a, double t, double useful_tokens) {
    if (!a) return dlc_error(DLC_ERR_ARG, "account_merge: NULL account");
    if (!isfinite(t)) return dlc_error(DLC_ERR_ARG, "account_merge: t = %g: expected a finite time", t);
    if (bad_number(useful_tokens))
        return dlc_error(DLC_ERR_ARG, "account_merge: useful_tokens = %g: expected a finite number >= 0", useful_tokens);
    if (a->nmerge == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 256;
        double *p = realloc(a->merge_t, (size_t)cap * sizeof *p);
        if (!p) return dlc_error(DLC_ERR_NOMEM, "account_merge: %lld merge times", (long long)cap);
        a->merge_t = p, a->cap = cap;
    }
    int64_t k = a->nmerge++;
    while (k > 0 && a->merge_t[k - 1] > t) a->merge_t[k] = a->merge_t[k - 1], k--; /* a late one */
    a->merge_t[k] = t;
    a->useful_tokens += useful_tokens;
    return DLC_OK;
}

int64_t dlc_account_merges(const dlc_account *a) { return a ? a->nmerge : 0; }

dlc_status dlc_account_forget_merges(dlc_account *a, int64_t keep) {
    if (!a) return dlc_error(DLC_ERR_ARG, "account_forget_merges: NULL account");
    if (keep < 0) return dlc_error(DLC_ERR_RANGE, "account_forget_merges: keep = %lld: expected >= 0", (long long)keep);
    if (keep < a->nmerge) a->nmerge = keep;
    return DLC_OK;
}

dlc_status dlc_account_set_useful_tokens(dlc_account *a, double useful_tokens) {
    if (!a) return dlc_error(DLC_ERR_ARG, "account_set_useful_tokens: NULL account");
    if (bad_number(useful_tokens))
        return dlc_error(DLC_ERR_ARG, "account_set_useful_tokens: %g: expected a finite number >= 0", useful_tokens);
    a->useful_tokens = useful_tokens;
    return DLC_OK;
}
double dlc_account_useful_tokens(const dlc_account *a) { return a ? a->useful_tokens : 0; }

/* The rules of account.h, for one island. */
static void row_of(const dlc_account *a, const island *i, double t_end, dlc_account_row *out) {
    memset(out, 0, sizeof *out);
    double window = t_end > a->t0 ? t_end - a->t0 : 0;
    out->window = window;
    if (window <= 0) return;
    double sec[DLC_ISLAND_STATE_COUNT];
    seconds_of(i, a->t0, t_end, sec);
    const dlc_account_work *w = &i->work;
    double up = sec[DLC_ISLAND_UP], done = sec[DLC_ISLAND_DONE], busy = w->busy_s, idle = w->idle_s;
    /* ready with nothing to do: the up time since then (within the current up state) */
    if (w->ready_since >= 0 && i->state == DLC_ISLAND_UP && t_end > i->since) {
        double from = w->ready_since > i->since ? w->ready_since : i->since;
        double tail = t_end > from ? t_end - from : 0;
        if (tail > up) tail = up;
        up -= tail, done += tail;
        idle = idle > tail ? idle - tail : 0; /* the tail was idle */
    }
    if (busy + idle > up) { /* its processes' clocks ran past the up time: scale to it */
        double k = busy + idle > 0 ? up / (busy + idle) : 0;
        busy *= k, idle *= k;
    }
    /* the compute by fate */
    const dlc_learner_account *f = &w->fates;
    double merged = f->sent_steps > 0 ? (w->merged_steps < f->sent_steps ? w->merged_steps : f->sent_steps) /
                                            f->sent_steps
                                      : 0;
    double useful = f->sent_s * merged + f->kept_s, over = f->overwritten_s, unsent = f->unsent_s;
    double dropped = f->sent_s * (1 - merged) + f->discarded_s;
    double counted = useful + over + unsent + dropped;
    if (counted == 0 && w->steps > 0) {
        /* no account of its processes (their metrics are not the driver's to read): the
         * merged share of its steps is useful, the fate of the rest unknown (other) */
        useful = busy * (w->merged_steps < w->steps ? w->merged_steps / w->steps : 1);
    } else if (counted > busy) { /* the compute is what ran */
        double k = counted > 0 ? busy / counted : 0;
        useful *= k, over *= k, unsent *= k, dropped *= k;
    } else {
        dropped += busy - counted; /* what ran of steps no fate holds: cut short by a kill */
    }
    out->s[DLC_BUCKET_USEFUL] = useful;
    out->s[DLC_BUCKET_OVERWRITTEN] = over;
    out->s[DLC_BUCKET_DROPPED] = dropped;
    out->s[DLC_BUCKET_UNSENT] = unsent;
    out->s[DLC_BUCKET_DOWN] = sec[DLC_ISLAND_DOWN] + sec[DLC_ISLAND_PAUSED];
    out->s[DLC_BUCKET_WAITING] = idle + sec[DLC_ISLAND_STARTING] + sec[DLC_ISLAND_HELD];
    out->s[DLC_BUCKET_DONE] = done;
    double used = 0;
    for (int b = 0; b < DLC_BUCKET_OTHER; b++) used += out->s[b];
    out->s[DLC_BUCKET_OTHER] = window - used > 0 ? window - used : 0;
    for (int b = 0; b < DLC_BUCKET_COUNT; b++) out->share[b] = out->s[b] / window;
}

dlc_status dlc_account_row_of(const dlc_account *a, int m, double t_end, dlc_account_row *out) {
    dlc_status st = island_arg(a, m, "account_row_of");
    if (st != DLC_OK) return st;
    if (!out) return dlc_error(DLC_ERR_ARG, "account_row_of: NULL row");
    if (!isfinite(t_end)) return dlc_error(DLC_ERR_ARG, "account_row_of: t_end = %g: expected a finite time", t_end);
    row_of(a, &a->isl[m], t_end, out);
    return DLC_OK;
}

dlc_status dlc_account_total(const dlc_account *a, double t_end, dlc_account_row *out) {
    if (!a || !out) return dlc_error(DLC_ERR_ARG, "account_total: NULL %s", a ? "row" : "account");
    if (!isfinite(t_end)) return dlc_error(DLC_ERR_ARG, "account_total: t_end = %g: expected a finite time", t_end);
    memset(out, 0, sizeof *out);
    double weight = 0;
    for (int m = 0; m < a->n; m++) {
        dlc_account_row r;
        row_of(a, &a->isl[m], t_end, &r);
        double w = a->isl[m].work.nominal_tps > 0 ? a->isl[m].work.nominal_tps : 1;
        weight += w;
        out->window = r.window;
        for (int b = 0; b < DLC_BUCKET_COUNT; b++) out->s[b] += w * r.s[b], out->share[b] += w * r.share[b];
    }
    for (int b = 0; b < DLC_BUCKET_COUNT; b++) out->s[b] /= weight, out->share[b] /= weight;
    return DLC_OK;
}

double dlc_account_goodput_of(const dlc_account *a, double t_end, double useful_tokens) {
    if (!a || !(t_end > a->t0) || !(useful_tokens >= 0) || !isfinite(useful_tokens)) return 0;
    double capacity = 0;
    for (int m = 0; m < a->n; m++) capacity += a->isl[m].work.nominal_tps * (t_end - a->t0);
    return capacity > 0 ? useful_tokens / capacity : 0;
}

double dlc_account_goodput(const dlc_account *a, double t_end) {
    return a ? dlc_account_goodput_of(a, t_end, a->useful_tokens) : 0;
}

double dlc_account_uptime(const dlc_account *a, double t_end, double window) {
    if (!a || !(window > 0) || !(t_end > a->t0) || !isfinite(t_end)) return 0;
    double n = ceil((t_end - a->t0) / window);
    if (n < 1) n = 1;
    int64_t hit = 0;
    double last = -1;
    for (int64_t k = 0; k < a->nmerge && a->merge_t[k] < t_end; k++) {
        double w = floor((a->merge_t[k] - a->t0) / window);
        if (w < 0 || w >= n || w == last) continue;
        hit++, last = w;
    }
    return (double)hit / n;
}
