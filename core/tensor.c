/* tensor.c - storage, tensor lifetime, creation, views, and the Philox generator. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <math.h>
#include <stdatomic.h>
#include "diloco/mem.h"
#include "diloco/tensor.h"
#include "internal.h"

/* A storage is a float buffer with a refcount.  Buffers we allocate are recycled
 * through a per-thread cache keyed by size class: training repeats the same shapes
 * every step, so after the first step no op touches malloc or the page-fault path.
 * Classes are exact below 4096 floats; above, sizes round up to the next eighth of a
 * power of two (at most 12.5% slack), so ops whose sizes vary a little from step to
 * step (an MoE expert sees a different number of tokens each step) reuse buffers too. */
struct dlc_storage {
    float *data;
    int64_t n;   /* floats in use (views are bounded by it) */
    int64_t cap; /* floats allocated: the size class of n */
    int refs;
    void (*release)(void *ctx); /* external memory (dlc_tensor_wrap); NULL = ours */
    void *ctx;
    int external;      /* memory not ours: never cached or freed by us */
    dlc_storage *next; /* cache list link */
};

#include <pthread.h>

#define POOL_BUCKETS 256
#define POOL_MAX_BYTES ((size_t)1 << 30)
static _Thread_local dlc_storage *pool[POOL_BUCKETS];
static _Thread_local size_t pool_bytes;
static atomic_size_t live_bytes;

size_t dlc_tensor_bytes_cached(void) { return pool_bytes; }

size_t dlc_tensor_bytes_live(void) { return atomic_load(&live_bytes); }

/* The cache is per thread; a thread that exits hands its cached buffers back to
 * malloc through a pthread key destructor (registered the first time it caches). */
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static pthread_key_t pool_key;
static _Thread_local int pool_registered;

void dlc_tensor_cache_clear(void) {
    for (int b = 0; b < POOL_BUCKETS; b++)
        while (pool[b]) {
            dlc_storage *s = pool[b];
            pool[b] = s->next;
            free(s->data);
            free(s);
        }
    pool_bytes = 0;
}

static void pool_thread_exit(void *unused) {
    (void)unused;
    dlc_tensor_cache_clear();
}

static void pool_key_init(void) {
    if (pthread_key_create(&pool_key, pool_thread_exit) != 0) pool_key = 0;
}

static int64_t size_class(int64_t n) {
    if (n < 4096) return n;
    int64_t step = ((int64_t)1 << (63 - __builtin_clzll((uint64_t)n))) / 8;
    return (n + step - 1) / step * step;
}

static unsigned pool_bucket(int64_t cap) {
    return (unsigned)((uint64_t)cap * 0x9E3779B97F4A7C15ull >> 56) % POOL_BUCKETS;
}

static dlc_storage *storage_alloc(int64_t n) {
    int64_t cap = size_class(n);
    for (dlc_storage **p = &pool[pool_bucket(cap)]; *p; p = &(*p)->next) {
        if ((*p)->cap == cap) {
            dlc_storage *s = *p;
            *p = s->next;
            pool_bytes -= (size_t)cap * sizeof(float);
            s->next = NULL;
            s->n = n;
            s->refs = 1;
            atomic_fetch_add(&live_bytes, (size_t)n * sizeof(float));
            return s;
        }
    }
    dlc_storage *s = calloc(1, sizeof *s);
    if (!s) goto fail;
    size_t bytes = ((size_t)(cap > 0 ? cap : 1) * sizeof(float) + 63) & ~(size_t)63;
    s->data = dlc_big_alloc(bytes);
    if (!s->data) goto fail;
    s->n = n;
    s->cap = cap;
    s->refs = 1;
    atomic_fetch_add(&live_bytes, (size_t)n * sizeof(float));
    return s;
fail:
    free(s);
    dlc_error(DLC_ERR_NOMEM, "out of memory allocating %lld floats", (long long)n);
    return NULL;
}

static void storage_release(dlc_storage *s) {
    if (!s || --s->refs > 0) return;
    if (s->external) {
        if (s->release) s->release(s->ctx);
        free(s);
        return;
    }
    atomic_fetch_sub(&live_bytes, (size_t)s->n * sizeof(float));
    size_t bytes = (size_t)s->cap * sizeof(float);
    if (!pool_registered) {
        pthread_once(&pool_once, pool_key_init);
        pthread_setspecific(pool_key, (void *)1);
        pool_registered = 1;
    }
    if (pool_bytes + bytes <= POOL_MAX_BYTES) {
        unsigned b = pool_bucket(s->cap);
        s->next = pool[b];
        pool[b] = s;
        pool_bytes += bytes;
        return;
    }
    free(s->data);
    free(s);
}

int64_t dlc_shape_numel(int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > DLC_MAX_DIMS || (ndim > 0 && !shape)) return -1;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] > 0 && n > INT64_MAX / 4 / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

static dlc_tensor *tensor_alloc(int ndim, const int64_t *shape) {
    int64_t n = dlc_shape_numel(ndim, shape);
    if (n < 0) {
        dlc_error(DLC_ERR_SHAPE, "tensor: invalid shape (ndim %d, at most %d dims, sizes >= 0)",
                  ndim, DLC_MAX_DIMS);
        return NULL;
    }
    dlc_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        dlc_error(DLC_ERR_NOMEM, "out of memory allocating a tensor");
        return NULL;
    }
    t->ndim = ndim;
    for (int i = 0; i < DLC_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 1;
    t->numel = n;
    t->refs = 1;
    return t;
}

dlc_tensor *dlc_tensor_new(int ndim, const int64_t *shape) {
    dlc_tensor *t = tensor_alloc(ndim, shape);
    if (!t) return NULL;
    t->storage = storage_alloc(t->numel);
    if (!t->storage) {
        free(t);
        return NULL;
    }
    t->data = t->storage->data;
    return t;
}

dlc_tensor *dlc_tensor_zeros(int ndim, const int64_t *shape) {
    dlc_tensor *t = dlc_tensor_new(ndim, shape);
    if (t) dlcx_par_zero(t->data, t->numel);
    return t;
}

dlc_tensor *dlc_tensor_full(int ndim, const int64_t *shape, float value) {
    dlc_tensor *t = dlc_tensor_new(ndim, shape);
    if (t) dlc_tensor_fill(t, value);
    return t;
}

dlc_tensor *dlc_tensor_arange(double start, double stop, double step) {
    if (step == 0 || !isfinite(start) || !isfinite(stop) || !isfinite(step)) {
        dlc_error(DLC_ERR_ARG, "arange(%g, %g, %g): step must be non-zero and all finite",
                  start, stop, step);
        return NULL;
    }
    double cnt = ceil((stop - start) / step);
    if (cnt < 0) cnt = 0;
    if (cnt > 1e12) {
        dlc_error(DLC_ERR_ARG, "arange(%g, %g, %g): %g elements is too many", start, stop, step, cnt);
        return NULL;
    }
    int64_t n = (int64_t)cnt;
    dlc_tensor *t = dlc_tensor_new(1, &n);
    if (!t) return NULL;
    for (int64_t i = 0; i < n; i++) t->data[i] = (float)(start + (double)i * step);
    return t;
}

dlc_tensor *dlc_tensor_from_data(int ndim, const int64_t *shape, const float *src) {
    dlc_tensor *t = dlc_tensor_new(ndim, shape);
    if (t && t->numel) memcpy(t->data, src, (size_t)t->numel * sizeof(float));
    return t;
}

dlc_tensor *dlc_tensor_wrap(int ndim, const int64_t *shape, float *data,
                            void (*release)(void *ctx), void *ctx) {
    if (!data) {
        dlc_error(DLC_ERR_ARG, "tensor_wrap: data is NULL");
        return NULL;
    }
    dlc_tensor *t = tensor_alloc(ndim, shape);
    if (!t) return NULL;
    dlc_storage *s = calloc(1, sizeof *s);
    if (!s) {
        free(t);
        dlc_error(DLC_ERR_NOMEM, "out of memory allocating a tensor");
        return NULL;
    }
    s->data = data;
    s->n = s->cap = t->numel;
    s->refs = 1;
    s->release = release;
    s->ctx = ctx;
    s->external = 1;
    t->storage = s;
    t->data = data;
    return t;
}

dlc_tensor *dlc_tensor_view(dlc_tensor *t, int64_t offset, int ndim, const int64_t *shape) {
    int64_t n = dlc_shape_numel(ndim, shape);
    int64_t base = t->data - t->storage->data;
    if (n < 0 || offset < 0 || offset > t->numel - n || base + offset + n > t->storage->n) {
        char buf[64];
        dlc_error(DLC_ERR_RANGE, "view: %lld elements at offset %lld do not fit in a tensor of shape %s",
                  (long long)n, (long long)offset, dlc_shape_str(t, buf, sizeof buf));
        return NULL;
    }
    dlc_tensor *v = tensor_alloc(ndim, shape);
    if (!v) return NULL;
    v->storage = t->storage;
    v->storage->refs++;
    v->data = t->data + offset;
    return v;
}

dlc_status dlcx_tensor_rebind(dlc_tensor *t, dlc_tensor *base, int64_t offset) {
    int64_t b = base->data - base->storage->data;
    if (offset < 0 || offset > base->numel - t->numel || b + offset + t->numel > base->storage->n) {
        char buf[64];
        return dlc_error(DLC_ERR_RANGE, "rebind: %lld elements at offset %lld do not fit in a tensor of shape %s",
                         (long long)t->numel, (long long)offset, dlc_shape_str(base, buf, sizeof buf));
    }
    dlc_storage *old = t->storage;
    base->storage->refs++; /* before the release: old may be base's own storage */
    t->storage = base->storage;
    t->data = base->data + offset;
    storage_release(old);
    return DLC_OK;
}

dlc_tensor *dlc_tensor_detach(dlc_tensor *t) {
    return dlc_tensor_view(t, 0, t->ndim, t->shape);
}

dlc_tensor *dlc_tensor_clone(const dlc_tensor *t) {
    return dlc_tensor_from_data(t->ndim, t->shape, t->data);
}

dlc_tensor *dlc_tensor_retain(dlc_tensor *t) {
    if (t) t->refs++;
    return t;
}

/* Freeing a tensor frees its autograd node, which releases the node's inputs, and so
 * on down the graph.  Done recursively that would use one C stack frame per op of a
 * chain (a REPL loop of a million `x = x + 1` would overflow the stack), so tensors
 * that reach zero are queued and the outermost release drains the queue. */
static _Thread_local dlc_tensor *release_queue;
static _Thread_local int releasing;

void dlc_tensor_release(dlc_tensor *t) {
    if (!t || --t->refs > 0) return;
    t->release_next = release_queue;
    release_queue = t;
    if (releasing) return;
    releasing = 1;
    while (release_queue) {
        dlc_tensor *x = release_queue;
        release_queue = x->release_next;
        if (x->node) dlcx_node_free(x->node);
        dlc_tensor_release(x->grad);
        storage_release(x->storage);
        free(x);
    }
    releasing = 0;
}

void dlc_tensor_fill(dlc_tensor *t, float value) {
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = value;
}

dlc_status dlc_tensor_copy(dlc_tensor *dst, const dlc_tensor *src) {
    if (dst->numel != src->numel) {
        char a[64], b[64];
        return dlc_error(DLC_ERR_SHAPE, "copy: destination %s and source %s differ in size",
                         dlc_shape_str(dst, a, sizeof a), dlc_shape_str(src, b, sizeof b));
    }
    memmove(dst->data, src->data, (size_t)src->numel * sizeof(float));
    return DLC_OK;
}

int dlc_tensor_same_shape(const dlc_tensor *a, const dlc_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

char *dlc_shape_str(const dlc_tensor *t, char *buf, size_t size) {
    size_t k = 0;
    if (size == 0) return buf;
    k += (size_t)snprintf(buf + k, size - k, "[");
    for (int i = 0; i < t->ndim && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, i ? ",%lld" : "%lld", (long long)t->shape[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
    return buf;
}

int dlcx_axis(const char *fn, int axis, int ndim) {
    int a = axis < 0 ? axis + ndim : axis;
    if (a < 0 || a >= ndim) {
        dlc_error(DLC_ERR_ARG, "%s: axis %d is out of range for a %d-dimensional tensor", fn,
                  axis, ndim);
        return -1;
    }
    return a;
}

dlc_status dlcx_check_index(const char *fn, const dlc_tensor *idx, int64_t n, int64_t allow) {
    for (int64_t i = 0; i < idx->numel; i++) {
        float v = idx->data[i];
        if (v == (float)allow && allow != INT64_MIN) continue;
        if (!(v >= 0 && v < (float)n) || v != floorf(v))
            return dlc_error(DLC_ERR_RANGE, "%s: index %g at position %lld is not an integer in [0, %lld)",
                             fn, (double)v, (long long)i, (long long)n);
    }
    return DLC_OK;
}

/* ---- Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3") ---- */

static void philox(uint32_t out[4], uint64_t ctr, uint64_t seed) {
    uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void dlc_rng_init(dlc_rng *g, uint64_t seed) {
    g->seed = seed;
    g->counter = 0;
}

void dlc_rng_u32(dlc_rng *g, uint32_t *out, int64_t n) {
    uint32_t blk[4];
    for (int64_t i = 0; i < n; i += 4) {
        philox(blk, g->counter++, g->seed);
        for (int j = 0; j < 4 && i + j < n; j++) out[i + j] = blk[j];
    }
}

void dlc_rng_uniform(dlc_rng *g, float *out, int64_t n, float lo, float hi) {
    uint32_t blk[4];
    for (int64_t i = 0; i < n; i += 4) {
        philox(blk, g->counter++, g->seed);
        for (int j = 0; j < 4 && i + j < n; j++) {
            float u = (float)(blk[j] >> 8) * (1.0f / 16777216.0f);
            out[i + j] = lo + (hi - lo) * u;
        }
    }
}

void dlc_rng_normal(dlc_rng *g, float *out, int64_t n, float mean, float std) {
    uint32_t blk[4];
    for (int64_t i = 0; i < n; i += 4) {
        philox(blk, g->counter++, g->seed);
        for (int j = 0; j < 4; j += 2) {
            double u1 = ((double)(blk[j] >> 8) + 1.0) * (1.0 / 16777216.0); /* (0, 1] */
            double u2 = (double)(blk[j + 1] >> 8) * (1.0 / 16777216.0);
            double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
            if (i + j < n) out[i + j] = mean + std * (float)(r * cos(th));
            if (i + j + 1 < n) out[i + j + 1] = mean + std * (float)(r * sin(th));
        }
    }
}

dlc_tensor *dlc_tensor_randn(int ndim, const int64_t *shape, dlc_rng *g, float mean, float std) {
    dlc_tensor *t = dlc_tensor_new(ndim, shape);
    if (t) dlc_rng_normal(g, t->data, t->numel, mean, std);
    return t;
}

dlc_tensor *dlc_tensor_rand(int ndim, const int64_t *shape, dlc_rng *g, float lo, float hi) {
    dlc_tensor *t = dlc_tensor_new(ndim, shape);
    if (t) dlc_rng_uniform(g, t->data, t->numel, lo, hi);
    return t;
}
