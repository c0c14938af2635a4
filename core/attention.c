/* attention.c - fused multi-head attention (causal or not) and its backward, the
 * (batch, head) pairs split across the compute threads.  Split out of nnops.c. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/ops.h"
#include "internal.h"

/* ---- multi-head attention (causal or not) ----
 * qkv [B, T, 3C]; per (batch, head) q, k, v are [T, hd] matrices read in place with
 * leading dimension 3C.  Rows are processed in blocks of ATT_BLOCK; when causal, the
 * scores above the diagonal block are never computed (a block of rows [r0, r1) sees
 * columns [0, r1)), otherwise every block sees all T columns.  saved[0] =
 * probabilities [B,H,T,T] (zero above the diagonal when causal); i[0] = heads,
 * i[1] = causal. */

#define ATT_BLOCK 64

/* The (batch, head) pairs [bt0, bt1) of one part: each pair is independent (its own
 * rows of the output and its own slices of dqkv), so the pairs are split across the
 * compute threads and each pair's products run on one thread.  `scratch` holds one
 * [T, T] matrix per part (the forward's probabilities when not recorded; the
 * backward's dS). */
typedef struct {
    const float *qkv, *g, *probs;
    float *out, *p, *dqkv, *scratch;
    int64_t T, C, H, hd;
    int causal, rec;
    float scale;
    _Atomic int err;          /* the first failing sgemm's status */
} att_ctx;

DLC_HOT static void attention_heads(void *ctx, int64_t bt0, int64_t bt1, int part) {
    att_ctx *c = ctx;
    int64_t T = c->T, C = c->C, C3 = 3 * C, H = c->H, hd = c->hd;
    int causal = c->causal;
    dlc_status st = DLC_OK;
    for (int64_t bt = bt0; bt < bt1 && st == DLC_OK; bt++) {
        int64_t b = bt / H, h = bt % H;
        const float *q = c->qkv + b * T * C3 + h * hd, *k = q + C, *v = q + 2 * C;
        float *p = c->rec ? c->p + bt * T * T : c->scratch + part * T * T, *o = c->out + b * T * C + h * hd;
        for (int64_t r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int64_t r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
            int64_t cols = causal ? r1 : T;
            /* S[r0:r1, 0:cols] = scale Q[r0:r1] K[0:cols]^T */
            st = dlcx_sgemm(0, 1, rows, cols, hd, c->scale, q + r0 * C3, C3, k, C3, 0.0f, p + r0 * T, T);
            if (st != DLC_OK) break;
            for (int64_t i = r0; i < r1; i++) {
                int64_t lim = causal ? i + 1 : T;
                float *pr = p + i * T, inv = 1.0f / dlcx_exp_sum(pr, pr, lim, dlcx_row_max(pr, lim));
                for (int64_t j = 0; j < lim; j++) pr[j] *= inv;
                for (int64_t j = lim; j < T; j++) pr[j] = 0.0f;
            }
            /* O[r0:r1] = P[r0:r1, 0:cols] V[0:cols] */
            st = dlcx_sgemm(0, 0, rows, hd, cols, 1.0f, p + r0 * T, T, v, C3, 0.0f, o + r0 * C, C);
            if (st != DLC_OK) break;
        }
    }
    if (st != DLC_OK) c->err = st;
}

/* Parts for the B*H pairs of an attention of this size: about 4 T^2 hd flops a pair. */
static int attention_parts(int64_t BH, int64_t T, int64_t hd) { return dlcx_par_parts(BH, BH * T * (T + 4 * hd)); }

/* A failed product in another thread left its message there: say it here too. */
static dlc_status attention_status(att_ctx *c, int parts, const char *fn) {
    dlc_status st = c->err;
    if (st != DLC_OK && parts > 1)
        dlc_error(st, "%s: a matrix product failed: %s", fn, dlc_status_str(st));
    return st;
}

dlc_tensor *dlc_attention(dlc_tensor *qkv, int heads, int causal) {
    char a[64];
    if (!qkv) FAIL(DLC_ERR_ARG, "attention: qkv is NULL");
    if (qkv->ndim != 3 || qkv->shape[2] % 3 != 0 || qkv->shape[2] == 0)
        FAIL(DLC_ERR_SHAPE, "attention: qkv %s: expected [B, T, 3C] with C > 0", SHP(qkv, a));
    int64_t B = qkv->shape[0], T = qkv->shape[1], C3 = qkv->shape[2], C = C3 / 3, H = heads;
    if (heads < 1 || C % heads != 0)
        FAIL(DLC_ERR_ARG, "attention: qkv %s has C = %lld, which heads = %d does not divide",
             SHP(qkv, a), (long long)C, heads);
    if (T > INT_MAX || C3 > INT_MAX)
        FAIL(DLC_ERR_SHAPE, "attention: qkv %s: T and 3C must fit in an int (BLAS)", SHP(qkv, a));
    int64_t hd = C / H;
    dlc_tensor *in[1] = {qkv};
    int rec = dlcx_should_record(1, in), parts = attention_parts(B * H, T, hd);
    int64_t oshape[3] = {B, T, C}, pshape[4] = {B, H, T, T}, sshape[3] = {parts, T, T};
    dlc_tensor *out = dlc_tensor_new(3, oshape);
    dlc_tensor *probs = rec ? dlc_tensor_new(4, pshape) : dlc_tensor_new(3, sshape);
    if (!out || !probs) {
        dlc_tensor_release(out);
        dlc_tensor_release(probs);
        return NULL;
    }
    att_ctx c = {.qkv = qkv->data, .out = out->data, .p = probs->data, .scratch = probs->data,
                 .T = T, .C = C, .H = H, .hd = hd, .causal = causal != 0, .rec = rec,
                 .scale = 1.0f / sqrtf((float)hd), .err = DLC_OK};
    dlcx_par_run(parts, B * H, attention_heads, &c);
    if (attention_status(&c, parts, "attention") != DLC_OK) {
        dlc_tensor_release(out);
        dlc_tensor_release(probs);
        return NULL;
    }
    if (!rec) {
        dlc_tensor_release(probs);
        return out;
    }
    dlc_node *nd = dlcx_attach(out, DLC_OP_ATTENTION, 1, in, probs, NULL);
    if (!nd) return NULL;
    nd->i[0] = heads;
    nd->i[1] = causal != 0;
    return out;
}

/* dP = dO V^T; dV += P^T dO; dS = P (dP - rowsum(dP P)) scale; dQ += dS K; dK += dS^T Q. */
DLC_HOT static void attention_backward_heads(void *ctx, int64_t bt0, int64_t bt1, int part) {
    att_ctx *c = ctx;
    int64_t T = c->T, C = c->C, C3 = 3 * C, H = c->H, hd = c->hd;
    int causal = c->causal;
    float scale = c->scale, *ds = c->scratch + part * T * T;
    dlc_status err = DLC_OK;
    for (int64_t bt = bt0; bt < bt1 && err == DLC_OK; bt++) {
        int64_t b = bt / H, h = bt % H, off = b * T * C3 + h * hd;
        const float *q = c->qkv + off, *k = q + C, *v = q + 2 * C;
        const float *p = c->probs + bt * T * T, *go = c->g + b * T * C + h * hd;
        float *dq = c->dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
        for (int64_t r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int64_t r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
            int64_t cols = causal ? r1 : T;
            /* dP[r0:r1, 0:cols] = dO[r0:r1] V[0:cols]^T */
            err = dlcx_sgemm(0, 1, rows, cols, hd, 1.0f, go + r0 * C, C, v, C3, 0.0f, ds + r0 * T, T);
            /* dV[0:cols] += P[r0:r1, 0:cols]^T dO[r0:r1] */
            if (err == DLC_OK)
                err = dlcx_sgemm(1, 0, cols, hd, rows, 1.0f, p + r0 * T, T, go + r0 * C, C, 1.0f, dv, C3);
            if (err != DLC_OK) break;
            for (int64_t i = r0; i < r1; i++) {
                int64_t lim = causal ? i + 1 : T;
                const float *pr = p + i * T;
                float *d = ds + i * T, dot = 0.0f;
                DLC_SIMD_REDUCE(+ : dot)
                for (int64_t j = 0; j < lim; j++) dot += d[j] * pr[j];
                for (int64_t j = 0; j < lim; j++) d[j] = pr[j] * (d[j] - dot) * scale;
                for (int64_t j = lim; j < cols; j++) d[j] = 0.0f;
            }
            /* dQ[r0:r1] += dS[r0:r1, 0:cols] K[0:cols] */
            err = dlcx_sgemm(0, 0, rows, hd, cols, 1.0f, ds + r0 * T, T, k, C3, 1.0f, dq + r0 * C3, C3);
            /* dK[0:cols] += dS[r0:r1, 0:cols]^T Q[r0:r1] */
            if (err == DLC_OK)
                err = dlcx_sgemm(1, 0, cols, hd, rows, 1.0f, ds + r0 * T, T, q + r0 * C3, C3, 1.0f, dk, C3);
            if (err != DLC_OK) break;
        }
    }
    if (err != DLC_OK) c->err = err;
}

dlc_status dlcx_attention_backward(dlc_node *n, dlc_tensor *out, const float *g) {
    dlc_status err = DLC_OK;
    dlc_tensor *qkv = n->in[0];
    float *dqkv = dlcx_grad(qkv, &err);
    if (!dqkv) return err;
    int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, H = n->i[0], hd = C / H;
    int parts = attention_parts(B * H, T, hd);
    int64_t sshape[3] = {parts, T, T};
    dlc_tensor *scratch = dlc_tensor_new(3, sshape);
    if (!scratch) return dlc_last_status();
    att_ctx c = {.qkv = qkv->data, .g = g, .probs = n->saved[0]->data, .dqkv = dqkv,
                 .scratch = scratch->data, .T = T, .C = C, .H = H, .hd = hd, .causal = (int)n->i[1],
                 .scale = 1.0f / sqrtf((float)hd), .err = DLC_OK};
    dlcx_par_run(parts, B * H, attention_backward_heads, &c);
    dlc_tensor_release(scratch);
    return attention_status(&c, parts, "backward of attention");
}
