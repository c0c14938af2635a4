/* syncer_state.c - the syncer's checkpoint (syncer.h; keys and rules in
 * docs/checkpoints.md, "The syncer's checkpoint").  save writes the state with the atomic
 * safetensors writer (ckpt.h): the floats as F32 tensors, everything else as metadata
 * strings (integers in decimal, doubles with 17 significant digits, so both come back
 * bit for bit).  load checks the file against the params and the plan it is given
 * before it allocates anything on the strength of a number in it (every tensor's shape
 * is compared with the plan's sizes before it is read), then builds a syncer with
 * dlc_syncer_new and overwrites its state. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/ckpt.h"
#include "diloco/frag.h"
#include "diloco/outer.h"
#include "diloco/syncer.h"
#include "diloco/tensor.h"
#include "strbuf.h"
#include "syncer_internal.h"

#define LAYOUT "1"          /* syncer.format: the layout version this file reads and writes */
#define PREFIX "syncer."    /* every key of ours; the driver's keys may not start with it */
#define NAME_CAP 48         /* "syncer.momentum.<p>" with p < 2^31 fits */

enum {
    K_FORMAT, K_EPOCH, K_MODEL_HASH, K_PLAN_HASH, K_LEARNERS, K_FRAGMENTS, K_DP, K_SIZES, K_VERSIONS, K_OLDEST,
    K_ROUND_AGE, K_XI_QUORUM, K_LIVE, K_EVER, K_SCHED, K_STEP_TIME, K_TRANSIT, K_SENT, K_MERGED, K_SHARD,
    K_INCARNATION, K_INC_OPEN, K_MERGED_STEPS, K_LAST_BASE, K_LAST_STEPS, K_LAST_TOKENS, K_OWNS, K_COUNT
};
/* keys newer than the format's first: a checkpoint without them loads (their state starts
 * afresh) */
#define K_FIRST_OPTIONAL K_MERGED_STEPS
static const char *const key_names[] = {
    "syncer.format",    "syncer.epoch",      "syncer.model_hash", "syncer.plan_hash", "syncer.learners",
    "syncer.fragments", "syncer.dp",         "syncer.sizes",      "syncer.versions",  "syncer.oldest",
    "syncer.round_age", "syncer.xi_quorum",  "syncer.live",       "syncer.ever",      "syncer.sched",
    "syncer.step_time", "syncer.transit",    "syncer.sent",       "syncer.merged",    "syncer.shard",
    "syncer.incarnation", "syncer.inc_open", "syncer.merged_steps", "syncer.last_base", "syncer.last_steps",
    "syncer.last_tokens", "syncer.owns"};
_Static_assert(sizeof key_names / sizeof key_names[0] == K_COUNT, "one name per checkpoint key");

/* ---- save ---- */

static void add_i64(dlcx_sbuf *b, int first, long long v) {
    if (!first) dlcx_sb_add(b, ",", 1);
    dlcx_sb_int(b, v);
}

static void add_f64(dlcx_sbuf *b, int first, double v) {
    char t[40];
    snprintf(t, sizeof t, "%s%.17g", first ? "" : ",", v);
    dlcx_sb_str(b, t);
}

static void add_hex(dlcx_sbuf *b, uint64_t v) {
    char t[24];
    snprintf(t, sizeof t, "%016llx", (unsigned long long)v);
    dlcx_sb_str(b, t);
}

dlc_status dlc_syncer_save(const dlc_syncer *s, const char *path, double now, int n_meta,
                           const char *const *mk, const char *const *mv) {
    if (!s || !path) return dlc_error(DLC_ERR_ARG, "syncer_save: %s is NULL", s ? "path" : "syncer");
    if (!isfinite(now)) return dlc_error(DLC_ERR_ARG, "syncer_save: now = %g: expected a finite time", now);
    if (n_meta < 0 || (n_meta > 0 && (!mk || !mv)))
        return dlc_error(DLC_ERR_ARG, "syncer_save: %d metadata pairs with %s keys and %s values", n_meta,
                         mk ? "" : "NULL", mv ? "" : "NULL");
    for (int i = 0; i < n_meta; i++) {
        if (!mk[i] || !mv[i]) return dlc_error(DLC_ERR_ARG, "syncer_save: metadata pair %d is NULL", i);
        if (strcmp(mk[i], "format") == 0 || strncmp(mk[i], PREFIX, strlen(PREFIX)) == 0) {
            char sh[DLCX_SHOW_CAP];
            return dlc_error(DLC_ERR_ARG, "syncer_save: %s: metadata key '%s' is reserved: the driver's keys may "
                             "not be \"format\" or start with \"" PREFIX "\"", path, dlcx_show(sh, mk[i]));
        }
    }
    const int P = s->P, M = s->M;
    dlc_status st = DLC_OK;
    dlcx_sbuf v[K_COUNT];
    memset(v, 0, sizeof v);
    int nt = 0, cap = 3 * P;
    char (*names)[NAME_CAP] = calloc((size_t)cap, sizeof *names);
    const char **np = calloc((size_t)cap, sizeof *np);
    dlc_tensor **ts = calloc((size_t)cap, sizeof *ts);
    const char **keys = malloc((size_t)(K_COUNT + n_meta) * sizeof *keys);
    const char **vals = malloc((size_t)(K_COUNT + n_meta) * sizeof *vals);
    if (!names || !np || !ts || !keys || !vals) goto nomem;

    dlcx_sb_str(&v[K_FORMAT], LAYOUT);
    dlcx_sb_int(&v[K_EPOCH], (long long)s->epoch);
    add_hex(&v[K_MODEL_HASH], dlc_plan_model_hash(s->plan));
    add_hex(&v[K_PLAN_HASH], dlc_plan_hash(s->plan));
    dlcx_sb_int(&v[K_LEARNERS], M);
    dlcx_sb_int(&v[K_FRAGMENTS], P);
    dlcx_sb_int(&v[K_DP], s->p.dp);
    add_f64(&v[K_XI_QUORUM], 1, s->xi_quorum);
    for (int p = 0; p < P; p++) {
        const sfrag *f = &s->f[p];
        add_i64(&v[K_SIZES], p == 0, (long long)f->n);
        add_i64(&v[K_VERSIONS], p == 0, f->fs ? (long long)dlc_fragstate_version(f->fs) : 0);
        add_i64(&v[K_OLDEST], p == 0, f->fs ? (long long)dlc_fragstate_oldest(f->fs) : 0);
        dlcx_sb_add(&v[K_OWNS], f->fs ? "1" : "0", 1); /* a shard's (docs/shards.md) */
        add_f64(&v[K_ROUND_AGE], p == 0, f->last_open >= 0 ? now - f->last_open : -1);
    }
    for (int m = 0; m < M; m++) {
        add_i64(&v[K_LIVE], m == 0, s->live[m]);
        add_i64(&v[K_EVER], m == 0, s->ever[m]);
        add_i64(&v[K_SCHED], m == 0, (long long)s->sched[m]);
        add_f64(&v[K_STEP_TIME], m == 0, s->step_t[m]);
        add_f64(&v[K_TRANSIT], m == 0, s->transit[m]);
        add_i64(&v[K_MERGED], m == 0, (long long)s->merged[m]);
        add_i64(&v[K_SHARD], m == 0, (long long)s->shard[m]);
        add_i64(&v[K_INCARNATION], m == 0, (long long)s->incarnation[m]);
        add_i64(&v[K_INC_OPEN], m == 0, s->inc_open[m]);
        add_f64(&v[K_MERGED_STEPS], m == 0, s->merged_steps[m]);
        for (int p = 0; p < P; p++) {
            size_t at = (size_t)m * P + p;
            add_i64(&v[K_LAST_BASE], at == 0, (long long)s->last_base[at]);
            add_i64(&v[K_LAST_STEPS], at == 0, (long long)s->last_steps[at]);
            add_i64(&v[K_LAST_TOKENS], at == 0, (long long)s->last_tokens[at]);
        }
        if (m) dlcx_sb_add(&v[K_SENT], ",", 1);
        for (int p = 0; p < P; p++) dlcx_sb_add(&v[K_SENT], s->sent_since[(size_t)m * P + p] ? "1" : "0", 1);
    }
    for (int k = 0; k < K_COUNT; k++) {
        if (v[k].oom) goto nomem;
        keys[k] = key_names[k], vals[k] = v[k].p;
    }
    for (int i = 0; i < n_meta; i++) keys[K_COUNT + i] = mk[i], vals[K_COUNT + i] = mv[i];

    /* tensors: Θ_p over the fragstate's memory, momentum likewise, the older ring
     * versions copied into one [k, n] block (the ring's slots are not in version order) */
    for (int p = 0; p < P; p++) {
        const sfrag *f = &s->f[p];
        if (!f->fs) continue; /* another shard's */
        int64_t shape1[1] = {f->n};
        snprintf(names[nt], NAME_CAP, PREFIX "theta.%d", p);
        ts[nt] = dlc_tensor_wrap(1, shape1, (float *)dlc_fragstate_theta(f->fs), NULL, NULL);
        if (!ts[nt++]) goto fail;
        float *buf = dlc_fragstate_momentum(f->fs);
        if (buf) {
            snprintf(names[nt], NAME_CAP, PREFIX "momentum.%d", p);
            ts[nt] = dlc_tensor_wrap(1, shape1, buf, NULL, NULL);
            if (!ts[nt++]) goto fail;
        }
        int64_t lo = dlc_fragstate_oldest(f->fs), cur = dlc_fragstate_version(f->fs);
        if (cur > lo) {
            int64_t shape2[2] = {cur - lo, f->n};
            snprintf(names[nt], NAME_CAP, PREFIX "ring.%d", p);
            ts[nt] = dlc_tensor_new(2, shape2);
            if (!ts[nt]) goto fail;
            for (int64_t j = 0; j < cur - lo; j++)
                memcpy(ts[nt]->data + (size_t)j * (size_t)f->n, dlc_fragstate_at(f->fs, lo + j),
                       (size_t)f->n * sizeof(float));
            nt++;
        }
    }
    for (int i = 0; i < nt; i++) np[i] = names[i];
    st = dlc_safetensors_save(path, nt, np, ts, K_COUNT + n_meta, keys, vals);
    goto done;
nomem:
    st = dlc_error(DLC_ERR_NOMEM, "syncer_save: %s: out of memory", path);
    goto done;
fail:
    st = dlc_last_status();
done:
    for (int i = 0; ts && i < nt; i++) dlc_tensor_release(ts[i]);
    for (int k = 0; k < K_COUNT; k++) free(v[k].p);
    free(names);
    free(np);
    free(ts);
    free(keys);
    free(vals);
    return st;
}

/* ---- load: reading and checking one key ---- */

typedef struct reader {
    const dlc_safetensors *st;
    const char *path;
} reader;

static const char *meta(const reader *r, int k) {
    const char *v = dlc_safetensors_meta(r->st, key_names[k]);
    if (!v) dlc_error(DLC_ERR_FORMAT, "%s: %s is missing: not a syncer checkpoint (or a damaged one)", r->path,
                      key_names[k]);
    return v;
}

/* The n comma-separated entries of key k: integers in [lo, hi] (is_f64 = 0) or finite
 * doubles in [lo, hi] or exactly -1 when minus1 (is_f64 = 1). */
static dlc_status list(const reader *r, int k, int n, const char *what, int is_f64, double lo, double hi,
                       int minus1, int64_t *oi, double *od) {
    const char *v = meta(r, k);
    if (!v) return dlc_last_status();
    char sh[DLCX_SHOW_CAP];
    const char *c = v;
    for (int i = 0; i < n; i++) {
        if (i > 0) {
            if (*c != ',') break;
            c++;
        }
        char *end;
        errno = 0;
        int ok;
        if (is_f64) {
            double d = strtod(c, &end);
            ok = end != c && errno == 0 && isfinite(d) && ((d >= lo && d <= hi) || (minus1 && d == -1));
            if (ok) od[i] = d;
        } else {
            long long x = strtoll(c, &end, 10);
            ok = end != c && errno == 0 && (double)x >= lo && (double)x <= hi;
            if (ok) oi[i] = x;
        }
        if (!ok || (*end != ',' && *end != '\0'))
            return dlc_error(DLC_ERR_FORMAT, "%s: %s = \"%s\": entry %d (%s) is not %s in [%.17g, %.17g]%s", r->path,
                             key_names[k], dlcx_show(sh, v), i, what, is_f64 ? "a number" : "an integer", lo, hi,
                             minus1 ? " or -1" : "");
        c = end;
    }
    /* exactly n entries: the loop stopped on a missing comma, or entries remain */
    int count = *v ? 1 : 0;
    for (const char *q = v; *q; q++) count += *q == ',';
    if (count != n || *c != '\0')
        return dlc_error(DLC_ERR_FORMAT, "%s: %s holds %d entries, expected %d (one per %s)", r->path, key_names[k],
                         count, n, what);
    return DLC_OK;
}

static dlc_status one_int(const reader *r, int k, int64_t lo, int64_t hi, int64_t *out) {
    return list(r, k, 1, "value", 0, (double)lo, (double)hi, 0, out, NULL);
}

/* Key k must equal `want` (what the params or the plan say, named by `whose`). */
static dlc_status expect_int(const reader *r, int k, int64_t want, const char *whose) {
    int64_t got;
    dlc_status st = one_int(r, k, INT32_MIN, INT32_MAX, &got);
    if (st != DLC_OK) return st;
    if (got != want)
        return dlc_error(DLC_ERR_FORMAT, "%s: %s = %lld in the file, %lld in the %s: not this run's checkpoint",
                         r->path, key_names[k], (long long)got, (long long)want, whose);
    return DLC_OK;
}

static dlc_status expect_hash(const reader *r, int k, uint64_t want) {
    const char *v = meta(r, k);
    if (!v) return dlc_last_status();
    char w[24], sh[DLCX_SHOW_CAP];
    snprintf(w, sizeof w, "%016llx", (unsigned long long)want);
    if (strcmp(v, w) != 0)
        return dlc_error(DLC_ERR_FORMAT, "%s: %s = %s in the file, %s for the plan given: %s", r->path, key_names[k],
                         dlcx_show(sh, v), w,
                         k == K_MODEL_HASH ? "another model (names or shapes differ)"
                                           : "another fragment plan (kind, fragments or split differ)");
    return DLC_OK;
}

/* Tensor `name`: F32 of exactly ndim/shape (checked before it is read), every value
 * finite.  A new tensor, or NULL with the error. */
static dlc_tensor *tensor(const reader *r, const char *name, int ndim, const int64_t *want) {
    int64_t shape[DLC_MAX_DIMS];
    int nd = dlc_safetensors_shape(r->st, name, shape);
    if (nd < 0) return dlc_error(DLC_ERR_FORMAT, "%s: tensor %s is missing", r->path, name), NULL;
    const char *dt = dlc_safetensors_dtype(r->st, name);
    if (!dt || strcmp(dt, "F32") != 0)
        return dlc_error(DLC_ERR_FORMAT, "%s: tensor %s is %s: expected F32 (saved bit for bit)", r->path, name,
                         dt ? dt : "?"), NULL;
    int same = nd == ndim;
    for (int d = 0; same && d < nd; d++) same = shape[d] == want[d];
    if (!same) {
        char a[96] = "[", b[96] = "[";
        for (int d = 0; d < nd; d++) snprintf(a + strlen(a), sizeof a - strlen(a), d ? ",%lld" : "%lld", (long long)shape[d]);
        for (int d = 0; d < ndim; d++) snprintf(b + strlen(b), sizeof b - strlen(b), d ? ",%lld" : "%lld", (long long)want[d]);
        return dlc_error(DLC_ERR_FORMAT, "%s: tensor %s has shape %s] in the file, %s] expected from the plan and "
                         "the versions", r->path, name, a, b), NULL;
    }
    dlc_tensor *t = dlc_safetensors_get(r->st, name);
    if (!t) return NULL;
    for (int64_t i = 0; i < t->numel; i++)
        if (!isfinite(t->data[i])) {
            dlc_error(DLC_ERR_FORMAT, "%s: tensor %s [%lld] = %g: expected finite values", r->path, name,
                      (long long)i, (double)t->data[i]);
            dlc_tensor_release(t);
            return NULL;
        }
    return t;
}

/* ---- load ---- */

dlc_syncer *dlc_syncer_load(const char *path, const dlc_syncer_params *sp, const dlc_plan *plan, double now) {
    if (dlc_syncer_params_check(sp) != DLC_OK) return NULL;
    if (!path || !plan) return dlc_error(DLC_ERR_ARG, "syncer_load: %s is NULL", path ? "plan" : "path"), NULL;
    if (!isfinite(now)) return dlc_error(DLC_ERR_ARG, "syncer_load: now = %g: expected a finite time", now), NULL;
    const int M = sp->learners, P = dlc_plan_count(plan), R = sp->outer.ring;
    dlc_syncer *s = NULL;
    dlc_tensor *t = NULL;
    float *arena = NULL, *rows = NULL;
    int64_t *iv = NULL, epoch = 0;
    double *dv = NULL;
    dlc_tensor **theta = NULL;
    char name[NAME_CAP], sh[DLCX_SHOW_CAP];
    int nmax = M > P ? M : P;
    reader r = {dlc_safetensors_open(path), path};
    if (!r.st) goto fail;
    /* what the file must agree with first: layout, run shape, model, plan */
    const char *fmt = meta(&r, K_FORMAT);
    if (!fmt) goto fail;
    if (strcmp(fmt, LAYOUT) != 0) {
        dlc_error(DLC_ERR_FORMAT, "%s: %s = \"%s\": this build reads layout " LAYOUT, path, key_names[K_FORMAT],
                  dlcx_show(sh, fmt));
        goto fail;
    }
    if (expect_int(&r, K_LEARNERS, M, "params (learners)") != DLC_OK ||
        expect_int(&r, K_FRAGMENTS, P, "plan (fragments)") != DLC_OK || expect_int(&r, K_DP, sp->dp, "params (dp)") != DLC_OK ||
        expect_hash(&r, K_MODEL_HASH, dlc_plan_model_hash(plan)) != DLC_OK ||
        expect_hash(&r, K_PLAN_HASH, dlc_plan_hash(plan)) != DLC_OK ||
        one_int(&r, K_EPOCH, 1, 9.2e18, &epoch) != DLC_OK)
        goto fail;
    iv = malloc((size_t)nmax * 3 * sizeof *iv);
    dv = malloc((size_t)nmax * sizeof *dv);
    theta = calloc((size_t)P, sizeof *theta);
    if (!iv || !dv || !theta) goto nomem;
    int64_t *ver = iv + nmax, *lo = iv + 2 * nmax;
    if (list(&r, K_SIZES, P, "fragment", 0, 1, 9.2e18, 0, iv, NULL) != DLC_OK) goto fail;
    for (int p = 0; p < P; p++)
        if (iv[p] != dlc_plan_numel(plan, p)) {
            dlc_error(DLC_ERR_FORMAT, "%s: %s: fragment %d holds %lld floats in the file, %lld in the plan", path,
                      key_names[K_SIZES], p, (long long)iv[p], (long long)dlc_plan_numel(plan, p));
            goto fail;
        }
    if (list(&r, K_VERSIONS, P, "fragment", 0, 0, 9.2e18, 0, ver, NULL) != DLC_OK ||
        list(&r, K_OLDEST, P, "fragment", 0, 0, 9.2e18, 0, lo, NULL) != DLC_OK)
        goto fail;
    for (int p = 0; p < P; p++)
        if (lo[p] > ver[p] || ver[p] - lo[p] >= DLC_FRAGSTATE_RING_MAX) {
            dlc_error(DLC_ERR_FORMAT, "%s: fragment %d: %s = %lld, %s = %lld: expected oldest <= version and at most "
                      "%d versions", path, p, key_names[K_OLDEST], (long long)lo[p], key_names[K_VERSIONS],
                      (long long)ver[p], DLC_FRAGSTATE_RING_MAX);
            goto fail;
        }
    /* the fragments the file's syncer owned (all, without the key) must be the params' */
    const char *owns = dlc_safetensors_meta(r.st, key_names[K_OWNS]);
    for (int p = 0; p < P; p++) {
        int file = owns ? (strlen(owns) == (size_t)P && (owns[p] == '0' || owns[p] == '1') ? owns[p] - '0' : -1) : 1;
        int want = sp->owns ? sp->owns[p] != 0 : 1;
        if (file < 0) {
            dlc_error(DLC_ERR_FORMAT, "%s: %s = \"%s\": expected %d digits 0/1 (the fragments a shard owns)", path,
                      key_names[K_OWNS], dlcx_show(sh, owns), P);
            goto fail;
        }
        if (file != want) {
            dlc_error(DLC_ERR_FORMAT, "%s: fragment %d is %sowned by the syncer of the file, %sby this one: another "
                      "shard's checkpoint, or another number of shards", path, p, file ? "" : "not ", want ? "" : "not ");
            goto fail;
        }
    }
    /* Θ of every fragment it owns, checked, into an arena for dlc_syncer_new */
    int64_t arena_n = 0;
    for (int p = 0; p < P; p++) {
        int nv;
        const dlc_frag_view *vw = dlc_plan_views(plan, p, &nv);
        for (int j = 0; j < nv; j++)
            if (vw[j].offset + vw[j].numel > arena_n) arena_n = vw[j].offset + vw[j].numel;
    }
    arena = calloc((size_t)(arena_n > 0 ? arena_n : 1), sizeof(float));
    if (!arena) goto nomem;
    for (int p = 0; p < P; p++) {
        if (sp->owns && !sp->owns[p]) continue;
        int64_t n = dlc_plan_numel(plan, p);
        snprintf(name, sizeof name, PREFIX "theta.%d", p);
        if (!(theta[p] = tensor(&r, name, 1, &n))) goto fail;
        int nv;
        const dlc_frag_view *vw = dlc_plan_views(plan, p, &nv);
        const float *src = theta[p]->data;
        for (int j = 0; j < nv; j++) {
            memcpy(arena + vw[j].offset, src, (size_t)vw[j].numel * sizeof(float));
            src += vw[j].numel;
        }
    }
    if (!(s = dlc_syncer_new(sp, plan, arena))) goto fail;
    /* the next epoch, or the driver's when it knows of later incarnations (that never saved) */
    s->epoch = s->p.epoch = epoch + 1 > sp->epoch ? epoch + 1 : sp->epoch;

    /* per fragment: ring, momentum, the age of its latest round */
    if (list(&r, K_ROUND_AGE, P, "fragment", 1, 0, 1e300, 1, NULL, dv) != DLC_OK) goto fail;
    for (int p = 0; p < P; p++) {
        sfrag *f = &s->f[p];
        if (!f->fs) continue; /* another shard's */
        int64_t n = f->n, k = ver[p] - lo[p], keep = k < R - 1 ? k : R - 1;
        free(rows);
        rows = malloc((size_t)(keep + 1) * (size_t)n * sizeof(float));
        if (!rows) goto nomem;
        if (k > 0) {
            int64_t shape2[2] = {k, n};
            snprintf(name, sizeof name, PREFIX "ring.%d", p);
            if (!(t = tensor(&r, name, 2, shape2))) goto fail;
            memcpy(rows, t->data + (size_t)(k - keep) * (size_t)n, (size_t)keep * (size_t)n * sizeof(float));
            dlc_tensor_release(t);
            t = NULL;
        }
        memcpy(rows + (size_t)keep * (size_t)n, theta[p]->data, (size_t)n * sizeof(float));
        if (dlc_fragstate_restore(f->fs, ver[p] - keep, ver[p], rows) != DLC_OK) goto fail;
        float *buf = dlc_fragstate_momentum(f->fs);
        snprintf(name, sizeof name, PREFIX "momentum.%d", p);
        if (buf) {
            if (!(t = tensor(&r, name, 1, &n))) goto fail;
            memcpy(buf, t->data, (size_t)n * sizeof(float));
            dlc_tensor_release(t);
            t = NULL;
        } else if (dlc_safetensors_shape(r.st, name, NULL) >= 0) {
            dlc_error(DLC_ERR_FORMAT, "%s: tensor %s is in the file but the params' outer.momentum = 0 (no buffer): "
                      "another outer optimizer", path, name);
            goto fail;
        }
        f->last_open = dv[p] < 0 ? -1 : now - dv[p];
    }
    double xq;
    if (list(&r, K_XI_QUORUM, 1, "value", 1, 0, 1e300, 0, NULL, &xq) != DLC_OK) goto fail;
    s->xi_quorum = xq;
    s->dp_next = 0; /* dp: not in the checkpoint; the next round takes its first gradient's step */

    /* per learner */
    if (list(&r, K_LIVE, M, "learner", 0, 0, 1, 0, iv, NULL) != DLC_OK) goto fail;
    for (int m = 0; m < M; m++) s->live[m] = (uint8_t)iv[m];
    if (list(&r, K_EVER, M, "learner", 0, 0, 1, 0, iv, NULL) != DLC_OK) goto fail;
    for (int m = 0; m < M; m++) {
        if (s->live[m] && !iv[m]) {
            dlc_error(DLC_ERR_FORMAT, "%s: learner %d: %s = 1 but %s = 0: a live learner has joined", path, m + 1,
                      key_names[K_LIVE], key_names[K_EVER]);
            goto fail;
        }
        s->ever[m] = (uint8_t)iv[m];
    }
    if (list(&r, K_SCHED, M, "learner", 0, 0, 9.2e18, 0, s->sched, NULL) != DLC_OK ||
        list(&r, K_MERGED, M, "learner", 0, 0, 9.2e18, 0, s->merged, NULL) != DLC_OK ||
        list(&r, K_SHARD, M, "learner", 0, -1, 9.2e18, 0, s->shard, NULL) != DLC_OK ||
        list(&r, K_INCARNATION, M, "learner", 0, 0, 9.2e18, 0, s->incarnation, NULL) != DLC_OK ||
        list(&r, K_STEP_TIME, M, "learner", 1, 0, 1e300, 0, NULL, s->step_t) != DLC_OK ||
        list(&r, K_TRANSIT, M, "learner", 1, 0, 1e300, 0, NULL, s->transit) != DLC_OK)
        goto fail;
    if (list(&r, K_INC_OPEN, M, "learner", 0, 0, 1, 0, iv, NULL) != DLC_OK) goto fail;
    for (int m = 0; m < M; m++) s->inc_open[m] = (uint8_t)iv[m];
    /* the account's records (syncer.h), when the checkpoint has them */
    if (dlc_safetensors_meta(r.st, key_names[K_MERGED_STEPS]) &&
        (list(&r, K_MERGED_STEPS, M, "learner", 1, 0, 1e300, 0, NULL, s->merged_steps) != DLC_OK ||
         list(&r, K_LAST_BASE, M * P, "learner x fragment", 0, -1, 9.2e18, 0, s->last_base, NULL) != DLC_OK ||
         list(&r, K_LAST_STEPS, M * P, "learner x fragment", 0, 0, 9.2e18, 0, s->last_steps, NULL) != DLC_OK ||
         list(&r, K_LAST_TOKENS, M * P, "learner x fragment", 0, 0, 9.2e18, 0, s->last_tokens, NULL) != DLC_OK))
        goto fail;
    const char *sent = meta(&r, K_SENT);
    if (!sent) goto fail;
    size_t sent_len = strlen(sent);
    for (int m = 0; m < M; m++) {
        const char *c = sent + (size_t)m * (size_t)(P + 1);
        int ok = sent_len == (size_t)M * (size_t)(P + 1) - 1 && (m == 0 || c[-1] == ',');
        for (int p = 0; ok && p < P; p++) {
            ok = c[p] == '0' || c[p] == '1';
            if (ok) s->sent_since[(size_t)m * P + p] = c[p] == '1';
        }
        if (!ok) {
            dlc_error(DLC_ERR_FORMAT, "%s: %s = \"%s\": expected %d groups of %d digits 0/1 (a learner's fragments) "
                      "joined by commas", path, key_names[K_SENT], dlcx_show(sh, sent), M, P);
            goto fail;
        }
    }
    s->nlive = 0;
    for (int m = 0; m < M; m++) {
        s->unheard[m] = 1;
        if (s->live[m]) s->nlive++, s->heard[m] = s->joined_at[m] = now;
    }
    goto done;
nomem:
    dlc_error(DLC_ERR_NOMEM, "syncer_load: %s: out of memory", path);
fail:
    dlc_syncer_free(s);
    s = NULL;
done:
    dlc_tensor_release(t);
    for (int p = 0; theta && p < P; p++) dlc_tensor_release(theta[p]);
    free(theta);
    free(arena);
    free(rows);
    free(iv);
    free(dv);
    dlc_safetensors_close((dlc_safetensors *)r.st);
    return s;
}
