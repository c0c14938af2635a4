/* merge.c - the one-fragment merge accumulator (merge.h, docs/merge.md).
 *
 * A contribution is decoded in chunks of at most CH floats into a stack-sized scratch
 * that stays in L1; a chunk never crosses a segment boundary.  MEAN is one
 * dlc_codec_decode_axpy over the whole payload (which checks everything before it
 * writes).  RDA needs ‖Δ_s‖ before Δ_s/‖Δ_s‖ can be added, so an add is two sweeps over
 * the encoded bytes: sweep 1 decodes every chunk, which both validates (the codec
 * reports non-finite values) and sums the squares per segment, touching nothing in m;
 * sweep 2 decodes again and adds w/‖Δ_s‖ · Δ_s (w · Δ_s for embeddings).  A failed add
 * therefore leaves m untouched, and no scratch the size of a tensor is needed. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/mem.h"
#include "diloco/merge.h"
#include "internal.h"

#define CH 4096 /* floats per decode chunk: 16 KiB, stays in L1 */

static const char *const mode_names[] = {"rda", "mean"};
_Static_assert(sizeof mode_names / sizeof mode_names[0] == DLC_MERGE_MODE_COUNT, "mode_names");

struct dlc_merge {
    dlc_merge_mode mode;
    int T;
    int64_t n;
    int64_t *numel;    /* [T] */
    uint8_t *emb;      /* [T] */
    double *normsum;   /* [T] Σ w‖Δ_s‖ (RDA segments) */
    double *sumsq;     /* [T] per-add scratch of sweep 1 */
    float *acc;        /* [n] Σ w·Δ or Σ w·Δ_s/‖Δ_s‖ */
    double wsum;
    int count;
    int64_t base; /* first element of the last decode_range buffer (for messages) */
    float chunk[CH + 2 * DLC_CODEC_BLOCK_MAX];
    uint8_t mini[4 * (CH / DLC_CODEC_BLOCK_MIN + 2) + CH + 2 * DLC_CODEC_BLOCK_MAX];
};

const char *dlc_merge_mode_name(dlc_merge_mode mode) {
    return (unsigned)mode < DLC_MERGE_MODE_COUNT ? mode_names[mode] : NULL;
}

dlc_status dlc_merge_mode_parse(const char *name, dlc_merge_mode *out) {
    for (int i = 0; name && i < DLC_MERGE_MODE_COUNT; i++)
        if (!strcmp(name, mode_names[i])) {
            *out = (dlc_merge_mode)i;
            return DLC_OK;
        }
    return dlc_error(DLC_ERR_ARG, "merge = \"%s\": unknown merge; expected rda or mean", name ? name : "(null)");
}

dlc_merge *dlc_merge_new(const dlc_merge_params *p) {
    if (!p) return dlc_error(DLC_ERR_ARG, "dlc_merge_new: params is NULL"), NULL;
    if ((unsigned)p->mode >= DLC_MERGE_MODE_COUNT)
        return dlc_error(DLC_ERR_ARG, "dlc_merge_new: mode = %d, expected DLC_MERGE_RDA or DLC_MERGE_MEAN",
                         (int)p->mode),
               NULL;
    if (p->segments < 1 || !p->numel)
        return dlc_error(DLC_ERR_ARG, "dlc_merge_new: segments = %d%s, expected >= 1 segment lengths",
                         p->segments, p->numel ? "" : " with numel NULL"),
               NULL;
    int64_t n = 0;
    for (int s = 0; s < p->segments; s++) {
        if (p->numel[s] < 1 || p->numel[s] > (INT64_MAX / 4 - n) / 2)
            return dlc_error(DLC_ERR_ARG, "dlc_merge_new: segment %d has numel = %lld, expected >= 1 (and a sane total)",
                             s, (long long)p->numel[s]),
                   NULL;
        n += p->numel[s];
    }
    if ((uint64_t)n > SIZE_MAX / sizeof(float))
        return dlc_error(DLC_ERR_ARG, "dlc_merge_new: n = %lld floats do not fit in memory", (long long)n), NULL;
    dlc_merge *m = calloc(1, sizeof *m);
    if (!m) goto fail;
    m->mode = p->mode;
    m->T = p->segments;
    m->n = n;
    m->numel = malloc(sizeof(int64_t) * (size_t)m->T);
    m->emb = calloc((size_t)m->T, 1);
    m->normsum = calloc((size_t)m->T, sizeof(double));
    m->sumsq = calloc((size_t)m->T, sizeof(double));
    m->acc = dlc_big_calloc((size_t)n * sizeof(float));
    if (!m->numel || !m->emb || !m->normsum || !m->sumsq || !m->acc) goto fail;
    memcpy(m->numel, p->numel, sizeof(int64_t) * (size_t)m->T);
    for (int s = 0; s < m->T; s++) m->emb[s] = p->embedding && p->embedding[s] ? 1 : 0;
    return m;
fail:
    dlc_merge_free(m);
    dlc_error(DLC_ERR_NOMEM, "dlc_merge_new: out of memory for %lld floats", (long long)n);
    return NULL;
}

void dlc_merge_free(dlc_merge *m) {
    if (!m) return;
    free(m->numel);
    free(m->emb);
    free(m->normsum);
    free(m->sumsq);
    free(m->acc);
    free(m);
}

void dlc_merge_reset(dlc_merge *m) {
    if (!m) return;
    memset(m->acc, 0, sizeof(float) * (size_t)m->n);
    memset(m->normsum, 0, sizeof(double) * (size_t)m->T);
    m->wsum = 0.0;
    m->count = 0;
}

int64_t dlc_merge_numel(const dlc_merge *m) { return m ? m->n : 0; }
int dlc_merge_count(const dlc_merge *m) { return m ? m->count : 0; }
double dlc_merge_weight_sum(const dlc_merge *m) { return m ? m->wsum : 0.0; }

static int is_blocked(dlc_codec_kind k) {
    return k == DLC_CODEC_INT8 || k == DLC_CODEC_INT4 || k == DLC_CODEC_E3M0;
}
static int is_sparse(dlc_codec_kind k) { return k == DLC_CODEC_SPARSE2 || k == DLC_CODEC_SPARSE4; }

/* Decodes elements [i0, i0 + len) (len <= CH) of the n-float payload `in` and returns a
 * pointer to them (in m->chunk), or NULL with the codec's error.  Blocked codecs: the
 * covering blocks' scales and codes are gathered into m->mini, a valid encoding of
 * those blocks, and decoded as one buffer, so the codec's own decoder and checks run. */
static float *decode_range(dlc_merge *m, dlc_codec_kind kind, const dlc_codec_params *cp, const uint8_t *in,
                           int64_t i0, int len) {
    dlc_status st;
    if (is_sparse(kind)) { /* its records are self-contained: blocks b0..b1 decode on their own */
        int64_t B = cp->block, n = m->n, b0 = i0 / B, b1 = (i0 + len - 1) / B;
        int64_t e0 = b0 * B, e1 = (b1 + 1) * B < n ? (b1 + 1) * B : n, cnt = e1 - e0;
        int64_t off = dlc_codec_encoded_size(kind, cp, e0), bytes = dlc_codec_encoded_size(kind, cp, cnt);
        m->base = e0;
        if (off < 0 || bytes < 0) return NULL;
        st = dlc_codec_decode(kind, cp, in + off, (size_t)bytes, m->chunk, cnt);
        return st == DLC_OK ? m->chunk + (i0 - e0) : NULL;
    }
    if (!is_blocked(kind)) {
        int esz = kind == DLC_CODEC_F32 ? 4 : kind == DLC_CODEC_BF16 ? 2 : 1;
        m->base = i0;
        st = dlc_codec_decode(kind, cp, in + i0 * esz, (size_t)len * (size_t)esz, m->chunk, len);
        return st == DLC_OK ? m->chunk : NULL;
    }
    int64_t B = cp->block, n = m->n, nb = (n + B - 1) / B;
    int64_t b0 = i0 / B, b1 = (i0 + len - 1) / B, k = b1 - b0 + 1;
    int64_t e0 = b0 * B, e1 = (b1 + 1) * B < n ? (b1 + 1) * B : n, cnt = e1 - e0;
    const uint8_t *codes = in + 4 * nb;
    m->base = e0;
    memcpy(m->mini, in + 4 * b0, (size_t)(4 * k));
    size_t cbytes;
    if (kind == DLC_CODEC_INT8) {
        cbytes = (size_t)cnt;
        memcpy(m->mini + 4 * k, codes + e0, cbytes);
    } else {
        cbytes = (size_t)((cnt + 1) / 2);
        memcpy(m->mini + 4 * k, codes + e0 / 2, cbytes);
    }
    st = dlc_codec_decode(kind, cp, m->mini, (size_t)(4 * k) + cbytes, m->chunk, cnt);
    return st == DLC_OK ? m->chunk + (i0 - e0) : NULL;
}

DLC_HOT static double sum_squares(const float *x, int len) {
    double a[8] = {0};
    int i = 0;
    for (; i + 8 <= len; i += 8)
        for (int j = 0; j < 8; j++) a[j] += (double)x[i + j] * (double)x[i + j];
    for (; i < len; i++) a[0] += (double)x[i] * (double)x[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

DLC_HOT static void axpy(float *acc, const float *x, int len, float f) {
    for (int i = 0; i < len; i++) acc[i] += f * x[i];
}

/* w/‖Δ‖ overflows f32 only for ‖Δ‖ below ~1e-38·w: then scale in double, element-wise. */
static void axpy_d(float *acc, const float *x, int len, double w, double norm) {
    for (int i = 0; i < len; i++) acc[i] += (float)(w * ((double)x[i] / norm));
}

DLC_HOT static void anchor(float *x, const float *cur, const float *base, int len) {
    for (int i = 0; i < len; i++) x[i] = x[i] + (cur[i] - base[i]);
}

static dlc_status range_error(const dlc_merge *m, dlc_codec_kind kind, int s) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s", dlc_last_error());
    return dlc_error(DLC_ERR_FORMAT,
                     "merge add (%s): contribution refused, segment %d does not decode to finite values "
                     "(%s, elements and blocks counted from fragment element %lld)",
                     dlc_codec_name(kind), s, msg, (long long)m->base);
}

/* Elements [i0, i0 + len) of the contribution as merged: decoded, plus (cur - base) when
 * it is re-anchored (the same float operations as dlc_fragstate_anchor's); NULL on a
 * decode error. */
static const float *range_of(dlc_merge *m, dlc_codec_kind kind, const dlc_codec_params *cp, const uint8_t *in,
                             int64_t i0, int len, const float *cur, const float *base) {
    float *x = decode_range(m, kind, cp, in, i0, len);
    if (x && cur) anchor(x, cur + i0, base + i0, len);
    return x;
}

/* Sweep 1 of an add: every chunk decoded (the codec checks its values), re-anchored and
 * checked finite, the squares summed per segment into m->sumsq; the accumulators are
 * untouched.  The arguments are checked. */
static dlc_status sweep_check(dlc_merge *m, dlc_codec_kind kind, const dlc_codec_params *cparams,
                              const uint8_t *bytes, size_t len, const float *cur, const float *base,
                              dlc_codec_params *cp) {
    if (!m) return dlc_error(DLC_ERR_ARG, "merge add: m is NULL");
    if ((cur == NULL) != (base == NULL))
        return dlc_error(DLC_ERR_ARG, "merge add: cur and base are both given or both NULL");
    *cp = cparams ? *cparams : dlc_codec_default_params();
    dlc_status st = dlc_codec_check(kind, cp);
    if (st != DLC_OK) return st;
    int64_t size = dlc_codec_encoded_size(kind, cp, m->n);
    if (size < 0) return (dlc_status)size;
    if ((uint64_t)size != len)
        return dlc_error(DLC_ERR_FORMAT, "merge add (%s): len = %zu bytes, but the fragment's %lld floats encode to %lld",
                         dlc_codec_name(kind), len, (long long)m->n, (long long)size);
    if (!bytes) return dlc_error(DLC_ERR_ARG, "merge add: bytes is NULL");
    if (m->mode == DLC_MERGE_MEAN && !cur) return DLC_OK; /* dlc_codec_decode_axpy checks first */
    int64_t off = 0;
    for (int s = 0; s < m->T; off += m->numel[s], s++) {
        double ss = 0.0;
        int sum = cur || (m->mode == DLC_MERGE_RDA && !m->emb[s]);
        for (int64_t i = 0; i < m->numel[s]; i += CH) {
            int l = m->numel[s] - i < CH ? (int)(m->numel[s] - i) : CH;
            const float *x = range_of(m, kind, cp, bytes, off + i, l, cur, base);
            if (!x) return range_error(m, kind, s);
            if (sum) ss += sum_squares(x, l);
        }
        /* decoded values are finite (the codec checked); re-anchored ones may not be,
         * and a square of a finite float cannot overflow a double */
        if (!isfinite(ss))
            return dlc_error(DLC_ERR_FORMAT, "merge add (%s): contribution refused, segment %d (fragment elements "
                             "%lld..%lld) is not finite once re-anchored at the current version",
                             dlc_codec_name(kind), s, (long long)off, (long long)(off + m->numel[s] - 1));
        m->sumsq[s] = ss;
    }
    return DLC_OK;
}

dlc_status dlc_merge_add(dlc_merge *m, dlc_codec_kind kind, const dlc_codec_params *cparams,
                         const uint8_t *bytes, size_t len, double weight) {
    return dlc_merge_add_anchored(m, kind, cparams, bytes, len, weight, NULL, NULL);
}

dlc_status dlc_merge_check(dlc_merge *m, dlc_codec_kind kind, const dlc_codec_params *cparams,
                           const uint8_t *bytes, size_t len, const float *cur, const float *base) {
    dlc_codec_params cp;
    dlc_status st = sweep_check(m, kind, cparams, bytes, len, cur, base, &cp);
    if (st == DLC_OK && m->mode == DLC_MERGE_MEAN && !cur) {
        /* no accumulator is touched: a decode of each chunk checks every value */
        for (int64_t i = 0; i < m->n && st == DLC_OK; i += CH)
            if (!decode_range(m, kind, &cp, bytes, i, m->n - i < CH ? (int)(m->n - i) : CH))
                st = range_error(m, kind, 0);
    }
    return st;
}

dlc_status dlc_merge_add_anchored(dlc_merge *m, dlc_codec_kind kind, const dlc_codec_params *cparams,
                                  const uint8_t *bytes, size_t len, double weight, const float *cur,
                                  const float *base) {
    if (m && !(weight > 0.0 && weight <= DLC_MERGE_WEIGHT_MAX))
        return dlc_error(DLC_ERR_ARG, "merge add: weight = %g, expected a finite number in (0, %g]", weight,
                         DLC_MERGE_WEIGHT_MAX);
    dlc_codec_params cp;
    dlc_status st = sweep_check(m, kind, cparams, bytes, len, cur, base, &cp);
    if (st != DLC_OK) return st;
    if (!isfinite(m->wsum + weight))
        return dlc_error(DLC_ERR_RANGE, "merge add: weight sum %g + %g overflows", m->wsum, weight);

    if (m->mode == DLC_MERGE_MEAN && !cur) {
        st = dlc_codec_decode_axpy(kind, &cp, bytes, len, m->n, (float)weight, m->acc);
        if (st != DLC_OK) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", dlc_last_error());
            return dlc_error(st, "merge add: contribution refused: %s", msg);
        }
    } else {
        /* sweep 2 (sweep 1 checked): cannot fail (same bytes, same checks) */
        int64_t off = 0;
        for (int s = 0; s < m->T; off += m->numel[s], s++) {
            int rda = m->mode == DLC_MERGE_RDA && !m->emb[s];
            double norm = rda ? sqrt(m->sumsq[s]) : 1.0;
            if (rda && norm == 0.0) continue; /* φ(0) = 0 */
            double f = rda ? weight / norm : weight;
            int wide = !(f <= FLT_MAX);
            for (int64_t i = 0; i < m->numel[s]; i += CH) {
                int l = m->numel[s] - i < CH ? (int)(m->numel[s] - i) : CH;
                const float *x = range_of(m, kind, &cp, bytes, off + i, l, cur, base);
                DLC_ASSERT(x);
                if (wide) axpy_d(m->acc + off + i, x, l, weight, norm);
                else axpy(m->acc + off + i, x, l, (float)f);
            }
            if (rda) m->normsum[s] += weight * norm;
        }
    }
    m->wsum += weight;
    m->count++;
    return DLC_OK;
}

/* Writes the merged Δ into out, which may be m->acc itself (each segment's norm is taken
 * before it is written, and every element is written from its own). */
static dlc_status finish_into(const dlc_merge *m, float *out) {
    if (m->count == 0)
        return dlc_error(DLC_ERR_STATE, "merge finish: no contribution was added (expected at least one)");
    int64_t off = 0;
    for (int s = 0; s < m->T; off += m->numel[s], s++) {
        const float *a = m->acc + off;
        float *o = out + off;
        int64_t len = m->numel[s];
        double f;
        if (m->mode == DLC_MERGE_MEAN || m->emb[s]) {
            f = 1.0 / m->wsum;
        } else {
            double ss = 0.0;
            for (int64_t i = 0; i < len; i += CH) ss += sum_squares(a + i, len - i < CH ? (int)(len - i) : CH);
            f = ss > 0.0 ? (m->normsum[s] / m->wsum) / sqrt(ss) : 0.0; /* φ(0) = 0 */
        }
        for (int64_t i = 0; i < len; i++) o[i] = (float)(f * (double)a[i]);
        for (int64_t i = 0; i < len; i++)
            if (!isfinite(o[i]))
                return dlc_error(DLC_ERR_RANGE, "merge finish: merged element %lld of segment %d is %g, expected finite",
                                 (long long)(off + i), s, o[i]);
    }
    return DLC_OK;
}

dlc_status dlc_merge_finish(const dlc_merge *m, float *out) {
    if (!m || !out) return dlc_error(DLC_ERR_ARG, "merge finish: %s is NULL", m ? "out" : "m");
    return finish_into(m, out);
}

float *dlc_merge_take(dlc_merge *m) {
    if (!m) return dlc_error(DLC_ERR_ARG, "merge take: m is NULL"), NULL;
    return finish_into(m, m->acc) == DLC_OK ? m->acc : NULL;
}
