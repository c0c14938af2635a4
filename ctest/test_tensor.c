/* test_tensor.c - creation, views and refcounting, the random generator, errors. */
#include <pthread.h>
#include "check.h"
#include "diloco/mem.h"

static void test_creation(void) {
    int64_t s[2] = {2, 3};
    dlc_tensor *z = dlc_tensor_zeros(2, s);
    CHECK_OK(z);
    CHECK(z->numel == 6 && z->ndim == 2 && z->shape[0] == 2 && z->shape[1] == 3);
    for (int i = 0; i < 6; i++) CHECK(z->data[i] == 0.0f);
    dlc_tensor *f = dlc_tensor_full(2, s, 2.5f);
    CHECK(f->data[5] == 2.5f);
    dlc_tensor *r = dlc_tensor_arange(1, 2, 0.25);
    CHECK(r->numel == 4 && r->data[0] == 1.0f && r->data[3] == 1.75f);
    dlc_tensor *d = dlc_tensor_arange(3, 0, -1);
    CHECK(d->numel == 3 && d->data[2] == 1.0f);
    dlc_tensor *sc = dlc_tensor_full(0, NULL, 7.0f);
    CHECK(sc->ndim == 0 && sc->numel == 1 && sc->data[0] == 7.0f);
    char buf[32];
    CHECK(strcmp(dlc_shape_str(z, buf, sizeof buf), "[2,3]") == 0);
    CHECK(strcmp(dlc_shape_str(sc, buf, sizeof buf), "[]") == 0);
    CHECK_FAILS(dlc_tensor_arange(0, 1, 0), DLC_ERR_ARG, "step must be non-zero");
    int64_t bad[5] = {1, 1, 1, 1, 1};
    CHECK_FAILS(dlc_tensor_zeros(5, bad), DLC_ERR_SHAPE, "at most 4 dims");
    int64_t neg[1] = {-3};
    CHECK_FAILS(dlc_tensor_zeros(1, neg), DLC_ERR_SHAPE, "invalid shape");
    dlc_tensor_release(z);
    dlc_tensor_release(f);
    dlc_tensor_release(r);
    dlc_tensor_release(d);
    dlc_tensor_release(sc);
}

static void test_views(void) {
    int64_t s[2] = {3, 4}, row[1] = {4};
    dlc_tensor *t = dlc_tensor_arange(0, 12, 1);
    dlc_tensor *m = dlc_tensor_view(t, 0, 2, s);
    dlc_tensor_release(t); /* the view keeps the storage alive */
    dlc_tensor *r1 = dlc_tensor_view(m, 4, 1, row);
    CHECK_OK(r1);
    CHECK(r1->data[0] == 4.0f && r1->data[3] == 7.0f);
    r1->data[0] = 100.0f; /* writes through to the parent */
    CHECK(m->data[4] == 100.0f);
    CHECK_FAILS(dlc_tensor_view(m, 10, 1, row), DLC_ERR_RANGE, "do not fit");
    dlc_tensor *c = dlc_tensor_clone(m);
    c->data[0] = -1.0f;
    CHECK(m->data[0] == 0.0f);
    dlc_tensor_release(m);
    CHECK(r1->data[3] == 7.0f);
    dlc_tensor_release(r1);
    dlc_tensor_release(c);
}

static int released;
static void on_release(void *ctx) { released += *(int *)ctx; }

static void test_wrap(void) {
    float arena[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t s[1] = {8}, h[1] = {4};
    int one = 1;
    released = 0;
    dlc_tensor *w = dlc_tensor_wrap(1, s, arena, on_release, &one);
    dlc_tensor *v = dlc_tensor_view(w, 4, 1, h);
    dlc_tensor_release(w);
    CHECK(released == 0 && v->data[0] == 5.0f);
    dlc_tensor_release(v);
    CHECK(released == 1);
    CHECK(arena[7] == 8.0f); /* external memory is not freed or recycled */
}

static void test_pool_reuse(void) {
    /* recycled storage must not leak the old contents into zeros() */
    int64_t s[1] = {1000};
    dlc_tensor *a = dlc_tensor_full(1, s, 3.0f);
    dlc_tensor_release(a);
    dlc_tensor *b = dlc_tensor_zeros(1, s);
    int clean = 1;
    for (int i = 0; i < 1000; i++) clean &= b->data[i] == 0.0f;
    CHECK(clean);
    dlc_tensor_release(b);

    /* above 4096 floats a buffer serves any size of its class (an eighth of a power of
     * two): 5000 and 5100 share the class 5120, 5200 is in the next one */
    dlc_tensor_cache_clear();
    int64_t n1[1] = {5000}, n2[1] = {5100}, n3[1] = {5200};
    a = dlc_tensor_full(1, n1, 2.0f);
    float *buf = a->data;
    dlc_tensor_release(a);
    b = dlc_tensor_zeros(1, n2);
    CHECK(b->data == buf);
    clean = 1;
    for (int i = 0; i < 5100; i++) clean &= b->data[i] == 0.0f;
    CHECK(clean);
    /* views are bounded by the tensor's 5100 floats, not by the buffer's 5120 */
    CHECK_FAILS(dlc_tensor_view(b, 5090, 1, (int64_t[]){20}), DLC_ERR_RANGE, "do not fit");
    dlc_tensor *v = dlc_tensor_view(b, 5090, 1, (int64_t[]){10});
    CHECK_OK(v);
    dlc_tensor_release(v);
    dlc_tensor_release(b);
    b = dlc_tensor_zeros(1, n3);
    CHECK(b->data != buf);
    dlc_tensor_release(b);
    dlc_tensor_cache_clear();
}

static void test_rng(void) {
    /* Philox-4x32-10 known-answer vector (counter 0, key 0) from Random123's kat_vectors */
    dlc_rng g;
    uint32_t o[4];
    dlc_rng_init(&g, 0);
    dlc_rng_u32(&g, o, 4);
    CHECK(o[0] == 0x6627e8d5u && o[1] == 0xe169c58du && o[2] == 0xbc57ac4cu && o[3] == 0x9b00dbd8u);

    /* same seed, same stream; different seeds differ */
    float a[1000], b[1000], c[1000];
    dlc_rng_init(&g, 42);
    dlc_rng_normal(&g, a, 1000, 0, 1);
    dlc_rng_init(&g, 42);
    dlc_rng_normal(&g, b, 1000, 0, 1);
    dlc_rng_init(&g, 43);
    dlc_rng_normal(&g, c, 1000, 0, 1);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);

    /* moments of 200k normals and uniforms */
    enum { N = 200000 };
    static float x[N];
    dlc_rng_init(&g, 7);
    dlc_rng_normal(&g, x, N, 1.0f, 2.0f);
    double m = 0, v = 0;
    for (int i = 0; i < N; i++) m += x[i];
    m /= N;
    for (int i = 0; i < N; i++) v += (x[i] - m) * (x[i] - m);
    v /= N;
    CHECK_NEAR(m, 1.0, 0.02);
    CHECK_NEAR(v, 4.0, 0.06);
    dlc_rng_uniform(&g, x, N, -1.0f, 3.0f);
    double lo = 1e9, hi = -1e9;
    m = 0;
    for (int i = 0; i < N; i++) {
        m += x[i];
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    CHECK_NEAR(m / N, 1.0, 0.02);
    CHECK(lo >= -1.0 && hi < 3.0 && lo < -0.99 && hi > 2.99);
}

/* A window whose offset + size overflows int64 must not wrap into one that "fits". */
static void test_view_overflow(void) {
    int64_t s8[1] = {8}, s4[1] = {4};
    dlc_tensor *t = dlc_tensor_zeros(1, s8);
    CHECK_FAILS(dlc_tensor_view(t, INT64_MAX - 1, 1, s4), DLC_ERR_RANGE, "do not fit");
    dlc_tensor_release(t);
}

/* A worker thread's cached storages go back to malloc when it exits (the sanitizer
 * build's leak check fails this test otherwise), and cache_clear empties the cache. */
static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 10; i++) dlc_tensor_release(dlc_tensor_zeros(1, (int64_t[]){1000 + i}));
    return NULL;
}

static void test_cache_threads(void) {
    pthread_t th;
    CHECK(pthread_create(&th, NULL, worker, NULL) == 0);
    CHECK(pthread_join(th, NULL) == 0);
    dlc_tensor *t = dlc_tensor_zeros(1, (int64_t[]){777});
    float *first = t->data;
    dlc_tensor_release(t); /* cached */
    dlc_tensor_cache_clear();
    t = dlc_tensor_zeros(1, (int64_t[]){777});
    CHECK(t->data[0] == 0.0f); /* a fresh buffer (address may or may not differ) */
    (void)first;
    dlc_tensor_release(t);
    dlc_tensor_cache_clear();
}

/* mem.h: a large buffer is 2 MiB aligned (advised for huge pages), a small one 64-byte
 * aligned; the zeroed one is zeros; both are writable end to end and freed by free(). */
static void test_big_alloc(void) {
    size_t sizes[] = {1, 100, DLC_BIG_MIN - 1, DLC_BIG_MIN, (size_t)5 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        uint8_t *a = dlc_big_alloc(n), *z = dlc_big_calloc(n);
        CHECK(a && z);
        if (!a || !z) continue;
        uintptr_t align = n >= DLC_BIG_MIN ? (uintptr_t)2 << 20 : 64;
        CHECK((uintptr_t)a % align == 0 && (uintptr_t)z % align == 0);
        size_t zeros = 0;
        for (size_t i = 0; i < n; i++) zeros += z[i] == 0;
        CHECK(zeros == n);
        memset(a, 0xab, n);
        CHECK(a[0] == 0xab && a[n - 1] == 0xab);
        dlc_big_free(a);
        free(z);
    }
    dlc_big_free(NULL);
}

int main(void) {
    test_big_alloc();
    test_cache_threads();
    test_creation();
    test_view_overflow();
    test_views();
    test_wrap();
    test_pool_reuse();
    test_rng();
    return check_done("tensor");
}
