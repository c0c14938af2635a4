/* params.c - the parameter arena: packing tensors into one buffer, grad norm, clipping. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "diloco/params.h"
#include "internal.h"

struct dlc_params {
    int n;
    char **names;         /* [n] owned copies */
    dlc_tensor **t;       /* [n] retained */
    int64_t *off;         /* [n] offsets in floats, multiples of DLC_PARAMS_ALIGN */
    int64_t numel, size;  /* values; arena length with padding */
    dlc_tensor *flat;     /* [size] the value arena (our reference to its storage) */
    dlc_tensor *gflat;    /* [size] the grad arena */
    dlc_params *next;     /* registry link */
};

/* An arena of zeros, aligned by hand, that costs no resident memory until written
 * (fresh anonymous pages, touched only when written; a small one from calloc): the grad
 * arena, so that a host that never takes a gradient (a syncer's or an embedding
 * client's layout: they run on values alone) does not pay for it, and
 * dlc_params_new_layout's value arena.  NULL when out of memory. */
typedef struct lazy {
    void *base;
    size_t bytes; /* 0: from calloc */
} lazy;

static void lazy_release(void *ctx) {
    lazy *z = ctx;
    if (z->bytes) munmap(z->base, z->bytes);
    else free(z->base);
    free(z);
}

static dlc_tensor *lazy_arena(int64_t size, const char *what) {
    size_t bytes = (size_t)size * sizeof(float) + 64;
    lazy *z = malloc(sizeof *z);
    if (!z) return dlc_error(DLC_ERR_NOMEM, "params: out of memory"), NULL;
    /* from 1 MiB on, pages of its own (calloc may reuse the heap's touched memory) */
    z->bytes = bytes >= ((size_t)1 << 20) ? bytes : 0;
    z->base = z->bytes ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                       : calloc(1, bytes);
    if (z->base == MAP_FAILED) z->base = NULL;
    if (!z->base) {
        free(z);
        return dlc_error(DLC_ERR_NOMEM, "params: out of memory for a %s arena of %lld floats", what,
                         (long long)size), NULL;
    }
    float *data = (float *)(((uintptr_t)z->base + 63) & ~(uintptr_t)63);
    dlc_tensor *t = dlc_tensor_wrap(1, &size, data, lazy_release, z);
    if (!t) lazy_release(z);
    return t;
}

/* Live dlc_params, so a tensor is never packed into two at once (the second would
 * re-point it and leave the first with a stale slot).  Any thread may create one. */
static atomic_flag registry_flag = ATOMIC_FLAG_INIT;
static dlc_params *registry;

/* A spin lock (core/ has no thread library: it stays sans-IO); the sections it guards
 * walk a short list of live arenas. */
static void registry_lock(void) {
    while (atomic_flag_test_and_set_explicit(&registry_flag, memory_order_acquire)) {
    }
}
static void registry_unlock(void) { atomic_flag_clear_explicit(&registry_flag, memory_order_release); }

/* Name of the tensor of q whose memory contains addr (or "?"). */
static const char *name_at(const dlc_params *q, const float *addr) {
    for (int i = 0; i < q->n; i++) {
        const float *s = q->flat->data + q->off[i];
        int64_t k = q->t[i]->numel;
        if (addr >= s && (addr < s + k || (k == 0 && addr == s))) return q->names[i];
    }
    return "?";
}

/* DLC_OK, or the error for a tensor that lives in the arena of a live dlc_params. */
static dlc_status check_unpacked(const char *name, const dlc_tensor *t) {
    dlc_status st = DLC_OK;
    registry_lock();
    for (const dlc_params *q = registry; q; q = q->next) {
        if (q->flat->storage != t->storage) continue;
        st = dlc_error(DLC_ERR_STATE,
                       "params: tensor '%s' is already in the arena of another live Params (as '%s'); "
                       "free that Params first, or pack each tensor once",
                       name, name_at(q, t->data));
        break;
    }
    registry_unlock();
    return st;
}

static void registry_remove(dlc_params *p) {
    registry_lock();
    for (dlc_params **q = &registry; *q; q = &(*q)->next) {
        if (*q == p) {
            *q = p->next;
            break;
        }
    }
    registry_unlock();
}

/* Everything that can fail without touching a tensor. */
static dlc_status validate(int n, const char *const *names, dlc_tensor *const *ts) {
    if (n < 1) return dlc_error(DLC_ERR_ARG, "params: %d tensors given, need at least 1", n);
    if (!names || !ts) return dlc_error(DLC_ERR_ARG, "params: names or tensors is NULL");
    for (int i = 0; i < n; i++) {
        if (!names[i] || !names[i][0])
            return dlc_error(DLC_ERR_ARG, "params: tensor %d has an empty name; every tensor needs a unique name", i);
        if (!ts[i]) return dlc_error(DLC_ERR_ARG, "params: tensor '%s' is NULL", names[i]);
        if (ts[i]->node || ts[i]->graph_freed)
            return dlc_error(DLC_ERR_STATE,
                             "params: tensor '%s' is the result of an op (%s), not a leaf; pack the "
                             "model's own parameter tensors",
                             names[i], ts[i]->node ? dlc_op_name(ts[i]->node->op) : "freed graph");
        for (int j = 0; j < i; j++) {
            if (!strcmp(names[i], names[j]))
                return dlc_error(DLC_ERR_ARG, "params: the name '%s' is used twice (tensors %d and %d)",
                                 names[i], j, i);
            if (ts[i] == ts[j])
                return dlc_error(DLC_ERR_ARG, "params: the same tensor is given twice, as '%s' and '%s'",
                                 names[j], names[i]);
            if (ts[i]->storage == ts[j]->storage && ts[i]->numel && ts[j]->numel &&
                ts[i]->data < ts[j]->data + ts[j]->numel && ts[j]->data < ts[i]->data + ts[i]->numel)
                return dlc_error(DLC_ERR_ARG,
                                 "params: tensors '%s' and '%s' share memory (views of one another); "
                                 "packing would give each its own copy",
                                 names[j], names[i]);
        }
        dlc_status st = check_unpacked(names[i], ts[i]);
        if (st != DLC_OK) return st;
    }
    return DLC_OK;
}

static dlc_params *pack(int n, const char *const *names, dlc_tensor *const *tensors, int values) {
    if (validate(n, names, tensors) != DLC_OK) return NULL;
    dlc_tensor **grads = NULL;
    dlc_params *p = calloc(1, sizeof *p);
    if (!p) goto nomem;
    p->n = n;
    p->names = calloc((size_t)n, sizeof *p->names);
    p->t = calloc((size_t)n, sizeof *p->t);
    p->off = calloc((size_t)n, sizeof *p->off);
    grads = calloc((size_t)n, sizeof *grads);
    if (!p->names || !p->t || !p->off || !grads) goto nomem;

    const int64_t A = DLC_PARAMS_ALIGN, limit = INT64_MAX / 8;
    for (int i = 0; i < n; i++) {
        int64_t k = tensors[i]->numel;
        if (k > limit - p->size - A) {
            dlc_error(DLC_ERR_RANGE, "params: the arena would exceed %lld floats at tensor '%s'",
                      (long long)limit, names[i]);
            goto fail;
        }
        p->off[i] = p->size;
        p->size += (k + A - 1) / A * A;
        p->numel += k;
        size_t len = strlen(names[i]) + 1;
        if (!(p->names[i] = malloc(len))) goto nomem;
        memcpy(p->names[i], names[i], len);
    }
    if (p->size == 0) p->size = A; /* all tensors empty: keep the arenas non-empty */

    /* Acquire everything before changing any tensor, so failure leaves them as given. */
    p->flat = values ? dlc_tensor_zeros(1, &p->size) : lazy_arena(p->size, "value");
    p->gflat = lazy_arena(p->size, "grad");
    if (!p->flat || !p->gflat) goto fail;
    for (int i = 0; i < n; i++) {
        grads[i] = dlc_tensor_view(p->gflat, p->off[i], tensors[i]->ndim, tensors[i]->shape);
        if (!grads[i]) goto fail;
    }

    for (int i = 0; i < n; i++) {
        dlc_tensor *t = tensors[i];
        if (t->numel && values) memcpy(p->flat->data + p->off[i], t->data, (size_t)t->numel * sizeof(float));
        dlc_status st = dlcx_tensor_rebind(t, p->flat, p->off[i]); /* fits by construction */
        DLC_ASSERT(st == DLC_OK);
        t->requires_grad = 1;
        dlc_tensor_release(t->grad);
        t->grad = grads[i];
        grads[i] = NULL;
        p->t[i] = dlc_tensor_retain(t);
    }
    free(grads);
    registry_lock();
    p->next = registry;
    registry = p;
    registry_unlock();
    return p;

nomem:
    dlc_error(DLC_ERR_NOMEM, "params: out of memory packing %d tensors", n);
fail:
    if (grads)
        for (int i = 0; i < n; i++) dlc_tensor_release(grads[i]);
    free(grads);
    if (p) {
        p->n = 0; /* no tensor retained yet: dlc_params_free must not release them */
        if (p->names)
            for (int i = 0; i < n; i++) free(p->names[i]);
        dlc_params_free(p);
    }
    return NULL;
}

dlc_params *dlc_params_new(int n, const char *const *names, dlc_tensor *const *tensors) {
    return pack(n, names, tensors, 1);
}

dlc_params *dlc_params_new_layout(int n, const char *const *names, dlc_tensor *const *tensors) {
    return pack(n, names, tensors, 0);
}

void dlc_params_free(dlc_params *p) {
    if (!p) return;
    if (p->n) registry_remove(p);
    for (int i = 0; i < p->n; i++) {
        free(p->names[i]);
        dlc_tensor_release(p->t[i]);
    }
    free(p->names);
    free(p->t);
    free(p->off);
    dlc_tensor_release(p->flat);
    dlc_tensor_release(p->gflat);
    free(p);
}

int dlc_params_count(const dlc_params *p) { return p->n; }
int64_t dlc_params_numel(const dlc_params *p) { return p->numel; }
int64_t dlc_params_size(const dlc_params *p) { return p->size; }

const char *dlc_params_name(const dlc_params *p, int i) {
    return i >= 0 && i < p->n ? p->names[i] : NULL;
}

dlc_tensor *dlc_params_tensor(const dlc_params *p, int i) {
    return i >= 0 && i < p->n ? p->t[i] : NULL;
}

int64_t dlc_params_offset(const dlc_params *p, int i) {
    return i >= 0 && i < p->n ? p->off[i] : -1;
}

int dlc_params_find(const dlc_params *p, const char *name) {
    if (!name) return -1;
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->names[i], name)) return i;
    return -1;
}

float *dlc_params_data(const dlc_params *p) { return p->flat->data; }
float *dlc_params_grad(const dlc_params *p) { return p->gflat->data; }

dlc_tensor *dlc_params_flat(const dlc_params *p) { return dlc_tensor_detach(p->flat); }
dlc_tensor *dlc_params_flat_grad(const dlc_params *p) { return dlc_tensor_detach(p->gflat); }

void dlc_params_zero_grad(dlc_params *p) { dlcx_par_zero(p->gflat->data, p->size); }

/* The arena length is a multiple of DLC_PARAMS_ALIGN: the fixed-size inner loops
 * vectorise at -O2 without a scalar tail.  The sum of squares runs over at most
 * NORM_PARTS chunks whose length depends on the arena size only, each summed alone and
 * the sums added in order: the same norm at any thread count. */
enum { B = DLC_PARAMS_ALIGN, NORM_PARTS = 64, NORM_MIN_CHUNK = 16384 };

typedef struct {
    float *g;
    int64_t size, chunk;
    double part[NORM_PARTS];
    float coef;
} norm_ctx;

static int64_t norm_chunk(int64_t size) {
    int64_t c = (size + NORM_PARTS - 1) / NORM_PARTS;
    c = c < NORM_MIN_CHUNK ? NORM_MIN_CHUNK : c;
    return (c + B - 1) / B * B;
}

static void sumsq_chunks(void *ctx, int64_t k0, int64_t k1, int part) {
    norm_ctx *c = ctx;
    for (int64_t k = k0; k < k1; k++) {
        int64_t lo = k * c->chunk, hi = lo + c->chunk < c->size ? lo + c->chunk : c->size;
        const float *g = c->g;
        double acc[B] = {0};
        for (int64_t i = lo; i < hi; i += B)
            for (int j = 0; j < B; j++) acc[j] += (double)g[i + j] * g[i + j];
        double s = 0;
        for (int j = 0; j < B; j++) s += acc[j];
        c->part[k] = s;
    }
}

static void scale_blocks(void *ctx, int64_t b0, int64_t b1, int part) {
    norm_ctx *c = ctx;
    float k = c->coef, *g = c->g;
    for (int64_t i = b0 * B; i < b1 * B; i += B)
        for (int j = 0; j < B; j++) g[i + j] *= k;
}

double dlc_params_grad_norm(const dlc_params *p) {
    norm_ctx c = {.g = p->gflat->data, .size = p->size, .chunk = norm_chunk(p->size)};
    int64_t chunks = (p->size + c.chunk - 1) / c.chunk;
    dlcx_parallel_for(chunks, p->size, sumsq_chunks, &c);
    double s = 0;
    for (int64_t k = 0; k < chunks; k++) s += c.part[k];
    return sqrt(s);
}

double dlc_params_clip_grad_norm(dlc_params *p, double max_norm) {
    if (!(max_norm > 0) || !isfinite(max_norm)) {
        dlc_error(DLC_ERR_ARG, "clip_grad_norm: max_norm = %g, expected a finite number > 0", max_norm);
        return -1.0;
    }
    double norm = dlc_params_grad_norm(p);
    double coef = max_norm / (norm + 1e-6);
    if (isfinite(norm) && coef < 1.0) {
        norm_ctx c = {.g = p->gflat->data, .coef = (float)coef};
        dlcx_parallel_for(p->size / B, 2 * p->size, scale_blocks, &c);
    }
    return norm;
}

dlc_status dlc_params_check(const dlc_params *p, const char *fn) {
    for (int i = 0; i < p->n; i++) {
        const dlc_tensor *t = p->t[i];
        if (t->data != p->flat->data + p->off[i] || t->storage != p->flat->storage)
            return dlc_error(DLC_ERR_STATE, "%s: tensor '%s' no longer points into the parameter arena",
                             fn, p->names[i]);
        if (!t->grad || t->grad->data != p->gflat->data + p->off[i])
            return dlc_error(DLC_ERR_STATE,
                             "%s: the .grad of tensor '%s' is no longer the grad arena's view (was it "
                             "replaced or released?); its gradients would be lost",
                             fn, p->names[i]);
    }
    return DLC_OK;
}
