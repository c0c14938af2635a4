/* outer.c - one fragment's global parameters, outer optimizer and version ring
 * (outer.h, docs/outer.md).
 *
 * The ring is R buffers of n floats; version v lives in slot v mod R, so the current
 * Θ is a slot too and a step writes slot (cur+1) mod R from slot cur mod R, overwriting
 * exactly the version that falls out.  A slot's buffer can be given away (a driver still
 * sends from it, dlc_fragstate_give) and a fresh one takes its place.  With R = 1 both are the same slot and the step is
 * in place, which the elementwise loop allows.  Every check (finiteness of the delta,
 * version overflow) runs before the first write, so a refused call changes nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/mem.h"
#include "diloco/outer.h"
#include "internal.h"

struct dlc_fragstate {
    dlc_fragstate_params p;
    int64_t n;
    int64_t cur;   /* current version */
    int64_t reset; /* version of the last new/set: nothing older is kept */
    float **ring;  /* [R] buffers of n floats */
    float *buf;    /* [n] momentum buffer, NULL for plain SGD */
    int finite;    /* the current version's values are all finite (a step that overflowed: 0) */
};

dlc_fragstate_params dlc_fragstate_default_params(void) {
    dlc_fragstate_params p = {0.7, 0.9, 1, 4};
    return p;
}

dlc_status dlc_fragstate_params_check(const dlc_fragstate_params *p) {
    if (!p) return dlc_error(DLC_ERR_ARG, "fragstate: params is NULL");
    if (!isfinite(p->lr) || p->lr < 0)
        return dlc_error(DLC_ERR_ARG, "fragstate: lr = %g, expected a finite number >= 0", p->lr);
    if (!isfinite(p->momentum) || p->momentum < 0 || p->momentum >= 1)
        return dlc_error(DLC_ERR_ARG, "fragstate: momentum = %g, expected a finite number in [0, 1)", p->momentum);
    if (p->nesterov != 0 && p->nesterov != 1)
        return dlc_error(DLC_ERR_ARG, "fragstate: nesterov = %d, expected 0 or 1", p->nesterov);
    if (p->nesterov && p->momentum == 0)
        return dlc_error(DLC_ERR_ARG, "fragstate: nesterov = 1 with momentum = 0: Nesterov needs momentum > 0");
    if (p->ring < 1 || p->ring > DLC_FRAGSTATE_RING_MAX)
        return dlc_error(DLC_ERR_ARG, "fragstate: ring = %d, expected 1..%d versions kept", p->ring,
                         DLC_FRAGSTATE_RING_MAX);
    return DLC_OK;
}

/* Index of the first non-finite value, or -1. */
static int64_t first_nonfinite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

static float *slot(const dlc_fragstate *fs, int64_t v) { return fs->ring[v % fs->p.ring]; }

static int64_t oldest(const dlc_fragstate *fs) {
    int64_t o = fs->cur - fs->p.ring + 1;
    return o > fs->reset ? o : fs->reset;
}

dlc_fragstate *dlc_fragstate_new(const dlc_fragstate_params *p, const float *theta, int64_t n) {
    if (dlc_fragstate_params_check(p) != DLC_OK) return NULL;
    if (!theta) return dlc_error(DLC_ERR_ARG, "dlc_fragstate_new: theta is NULL"), NULL;
    if (n < 1 || (uint64_t)n > SIZE_MAX / sizeof(float) / (size_t)(p->ring + 1))
        return dlc_error(DLC_ERR_ARG, "dlc_fragstate_new: n = %lld floats with ring = %d, expected n >= 1 and (ring + 1)·n floats to fit in memory",
                         (long long)n, p->ring),
               NULL;
    int64_t bad = first_nonfinite(theta, n);
    if (bad >= 0)
        return dlc_error(DLC_ERR_ARG, "dlc_fragstate_new: theta[%lld] = %g: initial parameters must be finite",
                         (long long)bad, (double)theta[bad]),
               NULL;
    dlc_fragstate *fs = calloc(1, sizeof *fs);
    if (!fs) goto fail;
    fs->p = *p;
    fs->n = n;
    fs->ring = calloc((size_t)p->ring, sizeof *fs->ring);
    if (!fs->ring) goto fail;
    for (int r = 0; r < p->ring; r++)
        if (!(fs->ring[r] = dlc_big_alloc(sizeof(float) * (size_t)n))) goto fail;
    if (p->momentum > 0) {
        fs->buf = dlc_big_calloc((size_t)n * sizeof(float));
        if (!fs->buf) goto fail;
    }
    memcpy(slot(fs, 0), theta, sizeof(float) * (size_t)n);
    fs->finite = 1;
    return fs;
fail:
    dlc_fragstate_free(fs);
    dlc_error(DLC_ERR_NOMEM, "dlc_fragstate_new: out of memory for %lld floats x %d versions", (long long)n, p->ring);
    return NULL;
}

void dlc_fragstate_free(dlc_fragstate *fs) {
    if (!fs) return;
    for (int r = 0; fs->ring && r < fs->p.ring; r++) dlc_big_free(fs->ring[r]);
    free(fs->ring);
    dlc_big_free(fs->buf);
    free(fs);
}

/* DLC_OK when x[0..n) is finite, else DLC_ERR_ARG "fn: name[i] = v: why; nothing was
 * changed" (the refusal of every call that takes values in). */
static dlc_status finite_in(const char *fn, const char *name, const float *x, int64_t n, const char *why) {
    int64_t bad = first_nonfinite(x, n);
    if (bad < 0) return DLC_OK;
    return dlc_error(DLC_ERR_ARG, "%s: %s[%lld] = %g: %s; nothing was changed", fn, name, (long long)bad,
                     (double)x[bad], why);
}

dlc_status dlc_fragstate_step(dlc_fragstate *fs, const float *delta) {
    if (!fs || !delta) return dlc_error(DLC_ERR_ARG, "fragstate_step: %s is NULL", fs ? "delta" : "fs");
    dlc_status st = finite_in("fragstate_step", "delta", delta, fs->n, "the merged outer gradient must be finite");
    if (st != DLC_OK) return st;
    if (fs->cur == INT64_MAX)
        return dlc_error(DLC_ERR_RANGE, "fragstate_step: version %lld cannot be incremented", (long long)fs->cur);
    const float *old = slot(fs, fs->cur);
    float *next = slot(fs, fs->cur + 1); /* == old when R == 1: in place */
    const float lr = (float)fs->p.lr, mu = (float)fs->p.momentum;
    const int64_t n = fs->n;
    float z = 0.0f; /* NaN once a value overflowed: whoever sends Θ need not scan it again */
    if (!fs->buf) {
        DLC_SIMD_REDUCE(+ : z)
        for (int64_t i = 0; i < n; i++) {
            next[i] = old[i] - lr * delta[i];
            z += next[i] - next[i];
        }
    } else if (fs->p.nesterov) {
        float *b = fs->buf;
        DLC_SIMD_REDUCE(+ : z)
        for (int64_t i = 0; i < n; i++) {
            b[i] = mu * b[i] + delta[i];
            next[i] = old[i] - lr * (delta[i] + mu * b[i]);
            z += next[i] - next[i];
        }
    } else {
        float *b = fs->buf;
        DLC_SIMD_REDUCE(+ : z)
        for (int64_t i = 0; i < n; i++) {
            b[i] = mu * b[i] + delta[i];
            next[i] = old[i] - lr * b[i];
            z += next[i] - next[i];
        }
    }
    fs->finite = z == 0.0f;
    fs->cur++;
    return DLC_OK;
}

dlc_status dlc_fragstate_anchor(const dlc_fragstate *fs, int64_t base, float *d) {
    if (!fs || !d) return dlc_error(DLC_ERR_ARG, "fragstate_anchor: %s is NULL", fs ? "delta_inout" : "fs");
    int64_t lo = oldest(fs);
    if (base < lo || base > fs->cur)
        return dlc_error(DLC_ERR_STATE,
                         "fragstate_anchor: base version %lld is not kept: the ring holds versions %lld..%lld (current %lld); drop the contribution and resync the learner",
                         (long long)base, (long long)lo, (long long)fs->cur, (long long)fs->cur);
    if (base == fs->cur) return DLC_OK;
    const float *c = slot(fs, fs->cur), *b = slot(fs, base);
    for (int64_t i = 0; i < fs->n; i++) d[i] = d[i] + (c[i] - b[i]);
    return DLC_OK;
}

dlc_status dlc_fragstate_push(dlc_fragstate *fs, const float *theta) {
    if (!fs || !theta) return dlc_error(DLC_ERR_ARG, "fragstate_push: %s is NULL", fs ? "theta" : "fs");
    dlc_status st = finite_in("fragstate_push", "theta", theta, fs->n, "parameters must be finite");
    if (st != DLC_OK) return st;
    if (fs->cur == INT64_MAX)
        return dlc_error(DLC_ERR_RANGE, "fragstate_push: version %lld cannot be incremented", (long long)fs->cur);
    memmove(slot(fs, fs->cur + 1), theta, sizeof(float) * (size_t)fs->n);
    fs->cur++;
    fs->finite = 1;
    return DLC_OK;
}

dlc_status dlc_fragstate_set(dlc_fragstate *fs, const float *theta, int64_t version) {
    if (!fs || !theta) return dlc_error(DLC_ERR_ARG, "fragstate_set: %s is NULL", fs ? "theta" : "fs");
    if (version < 0)
        return dlc_error(DLC_ERR_ARG, "fragstate_set: version = %lld, expected >= 0", (long long)version);
    dlc_status st = finite_in("fragstate_set", "theta", theta, fs->n, "parameters must be finite");
    if (st != DLC_OK) return st;
    memmove(slot(fs, version), theta, sizeof(float) * (size_t)fs->n); /* theta may be dlc_fragstate_theta() */
    fs->cur = fs->reset = version;
    fs->finite = 1;
    return DLC_OK;
}

dlc_status dlc_fragstate_restore(dlc_fragstate *fs, int64_t lo, int64_t version, const float *thetas) {
    if (!fs || !thetas) return dlc_error(DLC_ERR_ARG, "fragstate_restore: %s is NULL", fs ? "thetas" : "fs");
    if (lo < 0 || version < lo || version - lo >= fs->p.ring)
        return dlc_error(DLC_ERR_ARG, "fragstate_restore: versions %lld..%lld: expected 0 <= oldest <= version and "
                         "at most ring = %d versions", (long long)lo, (long long)version, fs->p.ring);
    int64_t k = version - lo + 1;
    for (int64_t j = 0; j < k; j++) {
        int64_t bad = first_nonfinite(thetas + (size_t)j * (size_t)fs->n, fs->n);
        if (bad >= 0)
            return dlc_error(DLC_ERR_ARG, "fragstate_restore: version %lld [%lld] = %g: parameters must be finite; "
                             "nothing was changed", (long long)(lo + j), (long long)bad,
                             (double)thetas[(size_t)j * (size_t)fs->n + (size_t)bad]);
    }
    for (int64_t j = 0; j < k; j++)
        memcpy(slot(fs, lo + j), thetas + (size_t)j * (size_t)fs->n, sizeof(float) * (size_t)fs->n);
    fs->cur = version;
    fs->reset = lo;
    fs->finite = 1;
    return DLC_OK;
}

float *dlc_fragstate_give(dlc_fragstate *fs, int64_t version) {
    if (!fs) return dlc_error(DLC_ERR_ARG, "fragstate_give: fs is NULL"), NULL;
    if (version > fs->cur || version <= fs->cur - fs->p.ring || version < 0)
        return dlc_error(DLC_ERR_STATE, "fragstate_give: version %lld has no slot: the slots hold versions %lld..%lld",
                         (long long)version, (long long)(fs->cur - fs->p.ring + 1 > 0 ? fs->cur - fs->p.ring + 1 : 0),
                         (long long)fs->cur),
               NULL;
    float *fresh = dlc_big_alloc(sizeof(float) * (size_t)fs->n);
    if (!fresh)
        return dlc_error(DLC_ERR_NOMEM, "fragstate_give: out of memory for %lld floats", (long long)fs->n), NULL;
    float **at = &fs->ring[version % fs->p.ring], *old = *at;
    *at = fresh;
    if (version == fs->cur)
        memcpy(fresh, old, sizeof(float) * (size_t)fs->n);
    else if (fs->reset <= version)
        fs->reset = version + 1; /* it, and anything older, leaves the ring */
    return old;
}

int64_t dlc_fragstate_size(const dlc_fragstate *fs) { return fs ? fs->n : 0; }
const dlc_fragstate_params *dlc_fragstate_get_params(const dlc_fragstate *fs) { return fs ? &fs->p : NULL; }
const float *dlc_fragstate_theta(const dlc_fragstate *fs) { return fs ? slot(fs, fs->cur) : NULL; }
int dlc_fragstate_finite(const dlc_fragstate *fs) { return fs ? fs->finite : 0; }
int64_t dlc_fragstate_version(const dlc_fragstate *fs) { return fs ? fs->cur : 0; }
int64_t dlc_fragstate_oldest(const dlc_fragstate *fs) { return fs ? oldest(fs) : 0; }
float *dlc_fragstate_momentum(dlc_fragstate *fs) { return fs ? fs->buf : NULL; }

const float *dlc_fragstate_at(const dlc_fragstate *fs, int64_t version) {
    if (!fs) return dlc_error(DLC_ERR_ARG, "fragstate_at: fs is NULL"), NULL;
    int64_t lo = oldest(fs);
    if (version < lo || version > fs->cur)
        return dlc_error(DLC_ERR_STATE, "fragstate_at: version %lld is not kept: the ring holds versions %lld..%lld",
                         (long long)version, (long long)lo, (long long)fs->cur),
               NULL;
    return slot(fs, version);
}
