/* test_data.c - text corpus (cleaning, directory walk, split, shards, windows,
 * cursors), IDX image sets (gzip and plain round trips, hostile files, gzip members
 * and what may follow them), synthetic sets, loaders and their cursors. */
#define _DEFAULT_SOURCE /* mkdtemp, symlink */
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include "check.h"

static char tmpdir[64];

/* A path under this test's temporary directory (static buffer rotation). */
static const char *tpath(const char *name) {
    static char bufs[8][256];
    static int k;
    char *b = bufs[k++ & 7];
    snprintf(b, 256, "%s/%s", tmpdir, name);
    return b;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fwrite(data, 1, n, f);
    fclose(f);
}

#define CHECK_ERR(expr, status, needle)                                                 \
    do {                                                                                \
        void *ce_ = (void *)(expr);                                                     \
        if (!ce_ && dlc_last_status() == (status) && strstr(dlc_last_error(), (needle))) \
            check_pass++;                                                               \
        else {                                                                          \
            check_fail++;                                                               \
            fprintf(stderr, "%s:%d: expected %s to fail with \"%s\" (status %d), got %s: %s\n", \
                    __FILE__, __LINE__, #expr, (needle), (int)(status),                 \
                    ce_ ? "an object" : "error", dlc_last_error());                     \
        }                                                                               \
    } while (0)

static dlc_text *open_text_file(const char *path, const char *drop) {
    dlc_text_params o = dlc_text_default_params();
    o.path = path;
    o.drop_line = drop;
    return dlc_text_open(&o);
}

static int text_equals(const dlc_text *t, const char *want) {
    int64_t n;
    const uint8_t *p = dlc_text_bytes(t, &n);
    int ok = n == (int64_t)strlen(want) && !memcmp(p, want, (size_t)n);
    if (!ok) fprintf(stderr, "  corpus is \"%.*s\", expected \"%s\"\n", (int)n, (const char *)p, want);
    return ok;
}

/* ---------------------------------------------------------------------------
 * text: reading and cleaning
 * --------------------------------------------------------------------------- */

static void test_clean(void) {
    static const char raw[] = "ab\x01" "c\r\nd\te\x7f\n%\nx%\n%\r\n  %\n%\nend";
    const char *p = tpath("clean.txt");
    write_file(p, raw, sizeof raw - 1);

    dlc_text *t = open_text_file(p, NULL);
    CHECK_OK(t);
    if (t) CHECK(text_equals(t, "abc\nd\te\n%\nx%\n%\n  %\n%\nend\n"));
    CHECK(t && dlc_text_files(t) == 1);
    dlc_text_release(t);

    /* "%" lines dropped, including "%\r\n" (\r is stripped first); "x%" and "  %" stay */
    t = open_text_file(p, "%");
    CHECK_OK(t);
    if (t) CHECK(text_equals(t, "abc\nd\te\nx%\n  %\nend\n"));
    dlc_text_release(t);

    /* a file of nothing but dropped lines and control bytes is "no text" */
    write_file(tpath("only.txt"), "%\n\x01\x02\n%\n", 7);
    dlc_text_params o = dlc_text_default_params();
    o.path = tpath("only.txt");
    o.drop_line = "%";
    t = dlc_text_open(&o);
    CHECK(t && text_equals(t, "\n")); /* the blank line survives */
    dlc_text_release(t);
    write_file(tpath("empty.txt"), "", 0);
    CHECK_ERR(open_text_file(tpath("empty.txt"), NULL), DLC_ERR_FORMAT, "no text");

    CHECK_ERR(open_text_file("/nonexistent/dir/x.txt", NULL), DLC_ERR_IO,
              "/nonexistent/dir/x.txt: No such file or directory");
    o = dlc_text_default_params();
    o.path = p;
    o.drop_line = "a\nb";
    CHECK_ERR(dlc_text_open(&o), DLC_ERR_ARG, "drop_line must be one line");
    o = dlc_text_default_params();
    o.path = p;
    o.max_bytes = 5;
    CHECK_ERR(dlc_text_open(&o), DLC_ERR_RANGE, "max_bytes = 5");
    CHECK_ERR(open_text_file("/dev/zero", NULL), DLC_ERR_ARG, "/dev/zero: not a regular file");
    o = dlc_text_default_params();
    CHECK_ERR(dlc_text_open(&o), DLC_ERR_ARG, "no path given");
    o.path = p;
    o.synthetic_bytes = 100;
    CHECK_ERR(dlc_text_open(&o), DLC_ERR_ARG, "choose one");
}

static void test_directory(void) {
    char dir[256], sub[256];
    snprintf(dir, sizeof dir, "%s/corpus", tmpdir);
    snprintf(sub, sizeof sub, "%s/corpus/m-sub", tmpdir);
    mkdir(dir, 0700);
    mkdir(sub, 0700);
    write_file(tpath("corpus/b.txt"), "B\n", 2);
    write_file(tpath("corpus/a.txt"), "A", 1);          /* gets a '\n' appended */
    write_file(tpath("corpus/a.dat"), "DAT\n", 4);      /* strfile index: skipped */
    write_file(tpath("corpus/bin"), "xx\0yy\n", 6);     /* NUL in the first 4 KiB: skipped */
    write_file(tpath("corpus/.hidden"), "H\n", 2);      /* hidden: skipped */
    write_file(tpath("corpus/m-sub/z"), "Z\n", 2);      /* recursion, in name order */
    write_file(tpath("corpus/zz"), "%\nlast\n", 7);
    CHECK(symlink("a.txt", tpath("corpus/a.txt.u8")) == 0); /* link: skipped */
    /* a binary file whose NUL is past the first 4 KiB is text (control bytes go) */
    char big[5000];
    memset(big, 'q', sizeof big);
    big[4999] = '\n';
    big[4500] = 0;
    write_file(tpath("corpus/n-late-nul"), big, sizeof big);

    dlc_text *t = open_text_file(dir, "%");
    CHECK_OK(t);
    if (t) {
        int64_t n;
        const uint8_t *p = dlc_text_bytes(t, &n);
        CHECK(dlc_text_files(t) == 5);
        CHECK(n == 6 + 4998 + 1 + 5);
        CHECK(n >= 6 && !memcmp(p, "A\nB\nZ\n", 6));
        CHECK(n == 5010 && p[6] == 'q' && p[6 + 4997] == 'q' && p[6 + 4998] == '\n' && !memcmp(p + 5005, "last\n", 5));
    }
    dlc_text_release(t);

    /* a directory with nothing readable is an error naming it */
    char emp[256];
    snprintf(emp, sizeof emp, "%s/nothing", tmpdir);
    mkdir(emp, 0700);
    write_file(tpath("nothing/x.dat"), "abc\n", 4);
    CHECK_ERR(open_text_file(emp, NULL), DLC_ERR_FORMAT, "nothing: no text (0 files read");
    /* an empty directory: a clear error (was qsort(NULL, 0, ...), undefined behaviour) */
    snprintf(emp, sizeof emp, "%s/empty", tmpdir);
    mkdir(emp, 0700);
    CHECK_ERR(open_text_file(emp, NULL), DLC_ERR_FORMAT, "empty: no text (0 files read");
}

/* A huge file is refused by its size before it is read: a sparse 1 TB file of NUL
 * bytes (no disk used) was read for tens of minutes, every byte cleaned away. */
static void test_text_size_bound(void) {
    const char *huge = tpath("sparse-1tb");
    FILE *f = fopen(huge, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fclose(f);
    CHECK(truncate(huge, (off_t)1 << 40) == 0);
    clock_t t0 = clock();
    CHECK_ERR(open_text_file(huge, NULL), DLC_ERR_RANGE,
              "sparse-1tb: 1099511627776 bytes, more than max_bytes = 268435456 bytes of input");
    CHECK((double)(clock() - t0) / CLOCKS_PER_SEC < 1.0);
    remove(huge);
    /* the bound is on the input, NUL bytes included: 3000 NULs with max_bytes 1000 */
    char zeros[3000] = {0};
    write_file(tpath("nuls"), zeros, sizeof zeros);
    dlc_text_params o = dlc_text_default_params();
    o.path = tpath("nuls");
    o.max_bytes = 1000;
    CHECK_ERR(dlc_text_open(&o), DLC_ERR_RANGE, "nuls: 3000 bytes, more than max_bytes = 1000");
    /* a directory's files count together */
    char dir[256];
    snprintf(dir, sizeof dir, "%s/two", tmpdir);
    mkdir(dir, 0700);
    char text[600];
    memset(text, 'a', sizeof text);
    write_file(tpath("two/a"), text, sizeof text);
    write_file(tpath("two/b"), text, sizeof text);
    o.path = dir;
    CHECK_ERR(dlc_text_open(&o), DLC_ERR_RANGE, "two/b: 600 bytes, more than max_bytes = 1000 bytes of "
              "input (600 read before it)");
    o.max_bytes = 1300; /* 1200 bytes and a newline ending each file */
    dlc_text *t = dlc_text_open(&o);
    CHECK_OK(t);
    dlc_text_release(t);
}

/* ---------------------------------------------------------------------------
 * text: split, shards, windows, cursors
 * --------------------------------------------------------------------------- */

static dlc_text *synthetic_text(int64_t bytes, uint64_t seed, int64_t chunk, double frac,
                                uint64_t split_seed) {
    dlc_text_params o = dlc_text_default_params();
    o.synthetic_bytes = bytes;
    o.seed = seed;
    o.chunk = chunk;
    o.eval_fraction = frac;
    o.split_seed = split_seed;
    return dlc_text_open(&o);
}

static void test_split(void) {
    dlc_text *a = synthetic_text(200000, 1, 1000, 0.1, 7);
    dlc_text *b = synthetic_text(200000, 1, 1000, 0.1, 7);
    dlc_text *c = synthetic_text(200000, 1, 1000, 0.1, 8);
    CHECK_OK(a);
    CHECK_OK(b);
    CHECK_OK(c);
    if (!a || !b || !c) return;
    int64_t na, nb;
    const uint8_t *pa = dlc_text_bytes(a, &na), *pb = dlc_text_bytes(b, &nb);
    CHECK(na == 200000 && nb == na && !memcmp(pa, pb, (size_t)na)); /* generator deterministic */
    CHECK(dlc_text_chunks(a, DLC_SPLIT_ALL) == 200);
    int same = 1, differ = 0;
    for (int64_t i = 0; i < 200; i++) {
        same &= dlc_text_chunk_is_eval(a, i) == dlc_text_chunk_is_eval(b, i);
        differ += dlc_text_chunk_is_eval(a, i) != dlc_text_chunk_is_eval(c, i);
    }
    CHECK(same);
    CHECK(differ > 0);
    int64_t ev = dlc_text_chunks(a, DLC_SPLIT_EVAL);
    CHECK(ev >= 8 && ev <= 35); /* ~20 of 200 */
    CHECK(dlc_text_chunks(a, DLC_SPLIT_TRAIN) + ev == 200);
    CHECK(dlc_text_size(a, DLC_SPLIT_TRAIN) + dlc_text_size(a, DLC_SPLIT_EVAL) == 200000);
    CHECK(dlc_text_size(a, DLC_SPLIT_EVAL) == ev * 1000);
    dlc_text_release(a);
    dlc_text_release(b);
    dlc_text_release(c);

    /* at least one chunk on each side when there are two or more */
    uint8_t m[2];
    CHECK(dlc_split_mark(m, 2, 0.001, 0) == DLC_OK && m[0] + m[1] == 1);
    CHECK(dlc_split_mark(m, 2, 0.999, 0) == DLC_OK && m[0] + m[1] == 1);
    CHECK(dlc_split_mark(m, 2, 0.0, 0) == DLC_OK && m[0] + m[1] == 0);
    CHECK(dlc_split_mark(m, 1, 0.5, 0) == DLC_OK);
    CHECK(dlc_split_mark(m, 2, 1.0, 0) == DLC_ERR_ARG && strstr(dlc_last_error(), "eval_fraction = 1"));
    CHECK(dlc_split_mark(m, 2, -0.5, 0) == DLC_ERR_ARG);
    CHECK(dlc_split_parse("eval") == DLC_SPLIT_EVAL && dlc_split_parse("test") == -1);
    CHECK(!strcmp(dlc_split_name(DLC_SPLIT_TRAIN), "train"));
    /* a last partial chunk counts in its split */
    a = synthetic_text(2500, 3, 1000, 0.5, 1);
    CHECK(a && dlc_text_chunks(a, DLC_SPLIT_ALL) == 3);
    if (a) {
        int64_t e = dlc_text_size(a, DLC_SPLIT_EVAL);
        CHECK(e == (dlc_text_chunk_is_eval(a, 0) + dlc_text_chunk_is_eval(a, 1)) * 1000 +
                       dlc_text_chunk_is_eval(a, 2) * 500);
    }
    dlc_text_release(a);
}

/* The bytes shard s of S of `split` should hold, built independently of the loader. */
static uint8_t *expected_shard(const dlc_text *t, dlc_split split, int s, int S, int64_t *len) {
    int64_t n, chunk = dlc_text_chunk_size(t), nch = dlc_text_chunks(t, DLC_SPLIT_ALL);
    const uint8_t *p = dlc_text_bytes(t, &n);
    uint8_t *out = malloc((size_t)n);
    *len = 0;
    for (int64_t i = 0; i < nch; i++) {
        if (i % S != s) continue;
        if (split != DLC_SPLIT_ALL && dlc_text_chunk_is_eval(t, i) != (split == DLC_SPLIT_EVAL)) continue;
        int64_t l = i + 1 < nch ? chunk : n - i * chunk;
        memcpy(out + *len, p + i * chunk, (size_t)l);
        *len += l;
    }
    return out;
}

static dlc_text_loader *text_loader(dlc_text *t, dlc_split split, int64_t B, int64_t T, int shard,
                                    int shards, uint64_t seed, int seq) {
    dlc_text_loader_params o = dlc_text_loader_default_params();
    o.split = split;
    o.batch = B;
    o.ctx = T;
    o.shard = shard;
    o.shards = shards;
    o.seed = seed;
    o.sequential = seq;
    return dlc_text_loader_new(t, &o);
}

static int same_tensor(const dlc_tensor *a, const dlc_tensor *b) {
    return a && b && a->numel == b->numel && dlc_tensor_same_shape(a, b) &&
           !memcmp(a->data, b->data, (size_t)a->numel * sizeof(float));
}

static void test_shards(void) {
    dlc_text *t = synthetic_text(100000, 5, 997, 0.1, 0);
    CHECK_OK(t);
    if (!t) return;
    const int S = 3, T = 32;
    int64_t total = 0;
    for (int s = 0; s < S; s++) {
        int64_t len;
        uint8_t *want = expected_shard(t, DLC_SPLIT_TRAIN, s, S, &len);
        /* sequential windows walk the shard exactly: window k = bytes[kT .. kT+T] */
        dlc_text_loader *l = text_loader(t, DLC_SPLIT_TRAIN, 1, T, s, S, 0, 1);
        CHECK_OK(l);
        if (!l) {
            free(want);
            continue;
        }
        CHECK(dlc_text_loader_size(l) == len);
        total += len;
        int64_t W = (len - 1) / T, bad = 0;
        for (int64_t k = 0; k <= W; k++) { /* one past the end: wraps to window 0 */
            dlc_tensor *x, *y;
            if (dlc_text_loader_next(l, &x, &y) != DLC_OK) {
                bad++;
                break;
            }
            int64_t at = (k % W) * T;
            for (int j = 0; j < T; j++)
                bad += x->data[j] != want[at + j] || y->data[j] != want[at + j + 1];
            dlc_tensor_release(x);
            dlc_tensor_release(y);
        }
        CHECK(bad == 0);
        CHECK(dlc_text_loader_batches_per_epoch(l) == W);
        dlc_text_loader_free(l);
        free(want);
    }
    CHECK(total == dlc_text_size(t, DLC_SPLIT_TRAIN)); /* disjoint and complete */
    dlc_text_release(t);
}

/* batch_at: the batch of windows first .. first + b - 1 (b = min(B, windows - first)),
 * straight from the shard, whatever the loader's mode; the cursor does not move. */
static void test_text_batch_at(void) {
    dlc_text *t = synthetic_text(100000, 4, 997, 0.1, 0);
    CHECK_OK(t);
    if (!t) return;
    const int64_t B = 3, T = 32;
    int64_t len;
    uint8_t *want = expected_shard(t, DLC_SPLIT_EVAL, 0, 1, &len);
    dlc_text_loader *seq = text_loader(t, DLC_SPLIT_EVAL, B, T, 0, 1, 0, 1);
    dlc_text_loader *rnd = text_loader(t, DLC_SPLIT_EVAL, B, T, 0, 1, 7, 0);
    CHECK(seq && rnd);
    if (!seq || !rnd) goto out;
    const int64_t W = dlc_text_loader_windows(seq);
    CHECK(W == (len - 1) / T && W == dlc_text_loader_windows(rnd));
    CHECK(W % B != 0); /* so the last batch is short */
    int64_t bad = 0, firsts[] = {0, 1, 5, W / 2, W - B, W - 2, W - 1};
    for (size_t i = 0; i < sizeof firsts / sizeof firsts[0]; i++) {
        int64_t f = firsts[i], b = W - f < B ? W - f : B;
        dlc_tensor *x, *y, *x2, *y2;
        if (dlc_text_loader_batch_at(seq, f, &x, &y) != DLC_OK) {
            bad++;
            continue;
        }
        CHECK(x->ndim == 2 && x->shape[0] == b && x->shape[1] == T && dlc_tensor_same_shape(x, y));
        for (int64_t r = 0; r < b; r++)
            for (int64_t j = 0; j < T; j++)
                bad += x->data[r * T + j] != want[(f + r) * T + j] ||
                       y->data[r * T + j] != want[(f + r) * T + j + 1];
        /* a random loader reads the same windows */
        CHECK(dlc_text_loader_batch_at(rnd, f, &x2, &y2) == DLC_OK);
        CHECK(same_tensor(x, x2) && same_tensor(y, y2));
        dlc_tensor_release(x);
        dlc_tensor_release(y);
        dlc_tensor_release(x2);
        dlc_tensor_release(y2);
    }
    CHECK(bad == 0);
    CHECK(dlc_text_loader_cursor(seq) == 0 && dlc_text_loader_cursor(rnd) == 0);
    /* batch k of a sequential pass is batch_at(k * B) for every full batch */
    int same = 1;
    for (int64_t k = 0; k < W / B; k++) {
        dlc_tensor *x, *y, *x2, *y2;
        dlc_text_loader_next(seq, &x, &y);
        dlc_text_loader_batch_at(seq, k * B, &x2, &y2);
        same &= same_tensor(x, x2) && same_tensor(y, y2);
        dlc_tensor_release(x);
        dlc_tensor_release(y);
        dlc_tensor_release(x2);
        dlc_tensor_release(y2);
    }
    CHECK(same && dlc_text_loader_cursor(seq) == W / B);
    /* out of range: an error naming the index and the range, nothing returned */
    char msg[96];
    int64_t outside[] = {-1, W, W + 100};
    for (size_t i = 0; i < 3; i++) {
        dlc_tensor *x = (dlc_tensor *)1, *y = (dlc_tensor *)1;
        CHECK(dlc_text_loader_batch_at(seq, outside[i], &x, &y) == DLC_ERR_RANGE);
        CHECK(x == NULL && y == NULL);
        snprintf(msg, sizeof msg, "window %lld out of range [0, %lld)", (long long)outside[i],
                 (long long)W);
        CHECK(strstr(dlc_last_error(), msg) != NULL);
    }
out:
    dlc_text_loader_free(seq);
    dlc_text_loader_free(rnd);
    free(want);
    dlc_text_release(t);
}

static void test_random_windows(void) {
    dlc_text *t = synthetic_text(60000, 9, 1000, 0.05, 0);
    CHECK_OK(t);
    if (!t) return;
    const int B = 16, T = 64;
    int64_t len;
    uint8_t *want = expected_shard(t, DLC_SPLIT_TRAIN, 1, 2, &len);
    dlc_text_loader *l = text_loader(t, DLC_SPLIT_TRAIN, B, T, 1, 2, 42, 0);
    dlc_text_release(t); /* the loader keeps the corpus alive */
    CHECK_OK(l);
    if (!l) {
        free(want);
        return;
    }
    /* every row is a real window of the shard and y is x shifted by one */
    dlc_tensor *first_x = NULL;
    int64_t not_found = 0, not_shifted = 0, starts_seen = 0;
    uint8_t win[T + 1];
    for (int step = 0; step < 20; step++) {
        dlc_tensor *x, *y;
        CHECK(dlc_text_loader_next(l, &x, &y) == DLC_OK);
        CHECK(x->ndim == 2 && x->shape[0] == B && x->shape[1] == T);
        CHECK(dlc_tensor_same_shape(x, y));
        for (int b = 0; b < B; b++) {
            for (int j = 0; j < T; j++) win[j] = (uint8_t)x->data[b * T + j];
            win[T] = (uint8_t)y->data[b * T + T - 1];
            for (int j = 0; j + 1 < T; j++) not_shifted += y->data[b * T + j] != x->data[b * T + j + 1];
            int found = 0;
            for (int64_t p = 0; p + T + 1 <= len && !found; p++)
                found = want[p] == win[0] && !memcmp(want + p, win, T + 1);
            not_found += !found;
            starts_seen++;
        }
        if (step == 0) first_x = dlc_tensor_retain(x);
        else if (step == 1) CHECK(!same_tensor(x, first_x)); /* batches move on */
        dlc_tensor_release(x);
        dlc_tensor_release(y);
    }
    CHECK(not_found == 0);
    CHECK(not_shifted == 0);
    CHECK(starts_seen == 20 * B);
    CHECK(dlc_text_loader_cursor(l) == 20);

    /* save the cursor, draw, restore: the same batches again; also from a fresh loader */
    dlc_tensor *ax[3], *ay[3];
    int64_t saved = dlc_text_loader_cursor(l);
    for (int i = 0; i < 3; i++) dlc_text_loader_next(l, &ax[i], &ay[i]);
    CHECK(dlc_text_loader_set_cursor(l, saved) == DLC_OK);
    int same = 1;
    for (int i = 0; i < 3; i++) {
        dlc_tensor *x, *y;
        dlc_text_loader_next(l, &x, &y);
        same &= same_tensor(x, ax[i]) && same_tensor(y, ay[i]);
        dlc_tensor_release(x);
        dlc_tensor_release(y);
    }
    CHECK(same);
    dlc_text_loader_reset(l);
    dlc_tensor *x0, *y0;
    dlc_text_loader_next(l, &x0, &y0);
    CHECK(same_tensor(x0, first_x));
    CHECK(dlc_text_loader_set_cursor(l, -1) == DLC_ERR_RANGE);
    CHECK(strstr(dlc_last_error(), "cursor = -1") != NULL);
    dlc_tensor_release(x0);
    dlc_tensor_release(y0);
    dlc_tensor_release(first_x);
    for (int i = 0; i < 3; i++) dlc_tensor_release(ay[i]);
    dlc_text_loader_free(l);
    free(want);

    /* a fresh loader with the same options, set to the cursor, agrees; other shards and
     * other seeds do not */
    t = synthetic_text(60000, 9, 1000, 0.05, 0);
    dlc_text_loader *fresh = text_loader(t, DLC_SPLIT_TRAIN, B, T, 1, 2, 42, 0);
    dlc_text_loader *shard0 = text_loader(t, DLC_SPLIT_TRAIN, B, T, 0, 2, 42, 0);
    dlc_text_loader *seed43 = text_loader(t, DLC_SPLIT_TRAIN, B, T, 1, 2, 43, 0);
    CHECK(fresh && shard0 && seed43);
    if (fresh && shard0 && seed43) {
        dlc_text_loader_set_cursor(fresh, saved);
        dlc_text_loader_set_cursor(shard0, saved);
        dlc_text_loader_set_cursor(seed43, saved);
        dlc_tensor *x, *y, *x1, *y1, *x2, *y2;
        dlc_text_loader_next(fresh, &x, &y);
        dlc_text_loader_next(shard0, &x1, &y1);
        dlc_text_loader_next(seed43, &x2, &y2);
        CHECK(same_tensor(x, ax[0]));
        CHECK(!same_tensor(x1, ax[0]));
        CHECK(!same_tensor(x2, ax[0]));
        dlc_tensor *r[] = {x, y, x1, y1, x2, y2};
        for (int i = 0; i < 6; i++) dlc_tensor_release(r[i]);
    }
    for (int i = 0; i < 3; i++) dlc_tensor_release(ax[i]);
    dlc_text_loader_free(fresh);
    dlc_text_loader_free(shard0);
    dlc_text_loader_free(seed43);
    dlc_text_release(t);
}

static void test_text_loader_errors(void) {
    dlc_text *t = synthetic_text(1000, 1, 100, 0.0, 0);
    CHECK_OK(t);
    if (!t) return;
    CHECK_ERR(text_loader(t, DLC_SPLIT_TRAIN, 4, 300, 2, 4, 0, 0), DLC_ERR_RANGE,
              "text: train shard 3 of 4 has 200 bytes, fewer than ctx + 1 = 301; use fewer "
              "learners or a smaller ctx");
    CHECK_ERR(text_loader(t, DLC_SPLIT_TRAIN, 4, 1000, 0, 1, 0, 0), DLC_ERR_RANGE,
              "fewer than ctx + 1 = 1001; use more data or a smaller ctx");
    CHECK_ERR(text_loader(t, DLC_SPLIT_EVAL, 4, 10, 0, 1, 0, 1), DLC_ERR_RANGE,
              "the eval split is empty");
    CHECK_ERR(text_loader(t, DLC_SPLIT_TRAIN, 4, 10, 4, 4, 0, 0), DLC_ERR_ARG, "shard index 4 of 4");
    CHECK_ERR(text_loader(t, DLC_SPLIT_TRAIN, 0, 10, 0, 1, 0, 0), DLC_ERR_ARG, "batch = 0");
    CHECK_ERR(text_loader(t, (dlc_split)7, 4, 10, 0, 1, 0, 0), DLC_ERR_ARG, "split = 7");
    /* exactly ctx + 1 bytes is enough: every window is the whole shard */
    dlc_text_loader *l = text_loader(t, DLC_SPLIT_ALL, 3, 999, 0, 1, 0, 0);
    CHECK_OK(l);
    if (l) {
        dlc_tensor *x, *y;
        CHECK(dlc_text_loader_next(l, &x, &y) == DLC_OK);
        int64_t n;
        const uint8_t *p = dlc_text_bytes(t, &n);
        CHECK(x->data[0] == p[0] && y->data[998] == p[999] && x->data[999 * 2] == p[0]);
        dlc_tensor_release(x);
        dlc_tensor_release(y);
    }
    dlc_text_loader_free(l);
    dlc_text_release(t);
}

/* The synthetic text has structure a model can learn: the next byte given the
 * previous one has far less than the 8 bits of uniform bytes. */
static void test_synthetic_text(void) {
    dlc_text *t = synthetic_text(100000, 2, 4096, 0.05, 0);
    dlc_text *u = synthetic_text(100000, 3, 4096, 0.05, 0);
    CHECK_OK(t);
    CHECK_OK(u);
    if (!t || !u) return;
    int64_t n, m;
    const uint8_t *p = dlc_text_bytes(t, &n), *q = dlc_text_bytes(u, &m);
    CHECK(n == 100000 && memcmp(p, q, 1000) != 0); /* seeds matter */
    static double cnt[256][256], row[256];
    int64_t ctl = 0;
    for (int64_t i = 0; i + 1 < n; i++) {
        cnt[p[i]][p[i + 1]]++;
        row[p[i]]++;
        ctl += p[i] < 0x20 && p[i] != '\n';
    }
    double h = 0;
    for (int a = 0; a < 256; a++)
        for (int b = 0; b < 256; b++)
            if (cnt[a][b] > 0) h -= cnt[a][b] / (double)(n - 1) * log2(cnt[a][b] / row[a]);
    CHECK(h < 3.0);
    CHECK(ctl == 0);
    if (getenv("DLC_VERBOSE")) printf("synthetic text: H(next | prev) = %.2f bits\n", h);
    dlc_text_release(t);
    dlc_text_release(u);
}

static void test_text_speed(void) {
    dlc_text *t = synthetic_text(1 << 20, 1, 4096, 0.05, 0);
    dlc_text_loader *l = text_loader(t, DLC_SPLIT_TRAIN, 16, 64, 0, 4, 1, 0);
    CHECK_OK(l);
    if (!l) return;
    const int N = 20000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < N; i++) {
        dlc_tensor *x, *y;
        dlc_text_loader_next(l, &x, &y);
        dlc_tensor_release(x);
        dlc_tensor_release(y);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / N;
    CHECK(us < 200); /* ~1 us in a release build; generous for sanitizers */
    if (getenv("DLC_VERBOSE")) printf("text next() B=16 T=64: %.2f us\n", us);
    dlc_text_loader_free(l);
    dlc_text_release(t);
}

static void test_fortunes(void) {
    struct stat st;
    if (stat("/usr/share/games/fortunes", &st) != 0) return;
    dlc_text *t = open_text_file("/usr/share/games/fortunes", "%");
    CHECK_OK(t);
    if (!t) return;
    int64_t n, bad = 0, pct = 0;
    const uint8_t *p = dlc_text_bytes(t, &n);
    for (int64_t i = 0; i < n; i++) {
        bad += (p[i] < 0x20 && p[i] != '\n' && p[i] != '\t') || p[i] == 0x7f;
        pct += p[i] == '%' && (i == 0 || p[i - 1] == '\n') && i + 1 < n && p[i + 1] == '\n';
    }
    CHECK(bad == 0 && pct == 0 && n > 100000);
    CHECK(dlc_text_size(t, DLC_SPLIT_EVAL) > 0);
    dlc_text_release(t);
}

/* ---------------------------------------------------------------------------
 * IDX image sets
 * --------------------------------------------------------------------------- */

/* Writes an IDX file: magic, dims (big-endian), payload, `extra` junk bytes; gzip
 * compressed when gz. */
static void write_idx(const char *path, int gz, uint32_t magic, const uint32_t *dims, int nd,
                      const uint8_t *payload, size_t n, size_t extra) {
    uint8_t h[16];
    size_t hn = 0;
    uint32_t words[4] = {magic, 0, 0, 0};
    for (int i = 0; i < nd; i++) words[i + 1] = dims[i];
    for (int i = 0; i <= nd; i++) {
        h[hn++] = (uint8_t)(words[i] >> 24);
        h[hn++] = (uint8_t)(words[i] >> 16);
        h[hn++] = (uint8_t)(words[i] >> 8);
        h[hn++] = (uint8_t)words[i];
    }
    uint8_t *junk = calloc(1, extra + 1);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        gzwrite(f, h, (unsigned)hn);
        if (n) gzwrite(f, payload, (unsigned)n);
        if (extra) gzwrite(f, junk, (unsigned)extra);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        fwrite(h, 1, hn, f);
        if (n) fwrite(payload, 1, n, f);
        if (extra) fwrite(junk, 1, extra, f);
        fclose(f);
    }
    free(junk);
}

#define NIMG 12
#define ROWS 3
#define COLS 4

/* Image i has pixel 0 = i, so a loader's output identifies the example. */
static void make_pixels(uint8_t *px, uint8_t *lb) {
    for (int i = 0; i < NIMG; i++) {
        for (int j = 0; j < ROWS * COLS; j++) px[i * ROWS * COLS + j] = (uint8_t)(i * 20 + j);
        px[i * ROWS * COLS] = (uint8_t)i;
        lb[i] = (uint8_t)(i % 10);
    }
}

static void write_set(const char *im, const char *lb, int gz) {
    uint8_t px[NIMG * ROWS * COLS], lab[NIMG];
    make_pixels(px, lab);
    uint32_t di[3] = {NIMG, ROWS, COLS}, dl[1] = {NIMG};
    write_idx(im, gz, 0x803, di, 3, px, sizeof px, 0);
    write_idx(lb, gz, 0x801, dl, 1, lab, sizeof lab, 0);
}

static dlc_images *open_idx(const char *im, const char *lb, int classes) {
    dlc_images_params o = dlc_images_default_params();
    o.images = im;
    o.labels = lb;
    o.classes = classes;
    o.mean = 0.0f;
    o.std = 1.0f;
    return dlc_images_open(&o);
}

static dlc_image_loader *image_loader(dlc_images *d, dlc_split split, int64_t B, int shard,
                                      int shards, uint64_t seed, int shuffle) {
    dlc_image_loader_params o = dlc_image_loader_default_params();
    o.split = split;
    o.batch = B;
    o.shard = shard;
    o.shards = shards;
    o.seed = seed;
    o.shuffle = shuffle;
    return dlc_image_loader_new(d, &o);
}

static int example_id(const dlc_tensor *x, int64_t row) {
    return (int)lrintf(x->data[row * x->shape[1]] * 255.0f);
}

static void test_idx_round_trip(void) {
    uint8_t px[NIMG * ROWS * COLS], lab[NIMG];
    make_pixels(px, lab);
    for (int gz = 0; gz < 2; gz++) {
        const char *im = tpath(gz ? "im.gz" : "im.idx"), *lb = tpath(gz ? "lb.gz" : "lb.idx");
        write_set(im, lb, gz);
        dlc_images *d = open_idx(im, lb, 10);
        CHECK_OK(d);
        if (!d) continue;
        int64_t n;
        CHECK(dlc_images_count(d, DLC_SPLIT_ALL) == NIMG && dlc_images_rows(d) == ROWS &&
              dlc_images_cols(d) == COLS && dlc_images_classes(d) == 10);
        CHECK(!memcmp(dlc_images_pixels(d, &n), px, sizeof px) && n == NIMG);
        CHECK(!memcmp(dlc_images_labels(d, &n), lab, sizeof lab));
        /* in order, batches of 5: 5, 5, 2, then the next epoch */
        dlc_image_loader *l = image_loader(d, DLC_SPLIT_ALL, 5, 0, 1, 0, 0);
        CHECK(l && dlc_image_loader_batches_per_epoch(l) == 3);
        int64_t want_b[4] = {5, 5, 2, 5}, seen = 0, wrong = 0;
        for (int k = 0; l && k < 4; k++) {
            dlc_tensor *x, *y;
            CHECK(dlc_image_loader_next(l, &x, &y) == DLC_OK);
            CHECK(x->ndim == 2 && x->shape[0] == want_b[k] && x->shape[1] == ROWS * COLS);
            CHECK(y->ndim == 1 && y->shape[0] == want_b[k]);
            for (int64_t r = 0; r < x->shape[0]; r++, seen++) {
                int64_t i = seen % NIMG;
                for (int j = 0; j < ROWS * COLS; j++)
                    wrong += fabsf(x->data[r * ROWS * COLS + j] - px[i * ROWS * COLS + j] / 255.0f) > 1e-6f;
                wrong += y->data[r] != lab[i];
            }
            dlc_tensor_release(x);
            dlc_tensor_release(y);
        }
        CHECK(wrong == 0);
        int64_t e, p;
        if (l) dlc_image_loader_cursor(l, &e, &p);
        CHECK(l && e == 1 && p == 5);
        dlc_image_loader_free(l);
        dlc_images_release(d);
    }

    /* normalisation with the Fashion-MNIST defaults */
    dlc_images_params o = dlc_images_default_params();
    o.images = tpath("im.gz");
    o.labels = tpath("lb.gz");
    dlc_images *d = dlc_images_open(&o);
    dlc_image_loader *l = d ? image_loader(d, DLC_SPLIT_ALL, 1, 0, 1, 0, 0) : NULL;
    CHECK_OK(l);
    if (l) {
        dlc_tensor *x, *y;
        dlc_image_loader_next(l, &x, &y);
        CHECK_NEAR(x->data[1], (1 / 255.0 - 0.2860) / 0.3530, 1e-5);
        dlc_tensor_release(x);
        dlc_tensor_release(y);
    }
    dlc_image_loader_free(l);
    dlc_images_release(d);
}

static void test_idx_hostile(void) {
    uint8_t px[NIMG * ROWS * COLS], lab[NIMG];
    make_pixels(px, lab);
    uint32_t di[3] = {NIMG, ROWS, COLS}, dl[1] = {NIMG};
    const char *goodi = tpath("good-im.gz"), *goodl = tpath("good-lb.gz"), *bad = tpath("bad");
    write_set(goodi, goodl, 1);

    for (int gz = 0; gz < 2; gz++) {
        /* labels where images belong: wrong magic */
        CHECK_ERR(open_idx(goodl, goodl, 10), DLC_ERR_FORMAT,
                  "magic 0x00000801, expected 0x00000803 for IDX images");
        /* not IDX at all */
        write_file(bad, "hello world, not an idx file", 28);
        CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, "bad: magic 0x68656c6c");
        /* a float IDX file (type 0x0d) */
        write_idx(bad, gz, 0xd03, di, 3, px, sizeof px, 0);
        CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, "magic 0x00000d03, expected 0x00000803");
        /* too short for a header */
        write_idx(bad, gz, 0x803, di, 0, NULL, 0, 0);
        CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, "4 bytes, too short for an IDX images header");
        /* truncated payload */
        write_idx(bad, gz, 0x803, di, 3, px, sizeof px - 7, 0);
        CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT,
                  "images header says 12 x 3 x 4 = 144 bytes, file has 137 after the header (truncated?)");
        /* trailing bytes */
        write_idx(bad, gz, 0x803, di, 3, px, sizeof px, 3);
        CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, "file has 3 more after them (trailing bytes");
        write_idx(bad, gz, 0x801, dl, 1, lab, sizeof lab, 1);
        CHECK_ERR(open_idx(goodi, bad, 10), DLC_ERR_FORMAT, "labels header says 12 = 12 bytes, file has 1 more");
        /* absurd dims: nothing is allocated for them (the file is tiny) */
        uint32_t huge[3] = {4000000000u, 60000, 60000};
        write_idx(bad, gz, 0x803, huge, 3, px, 16, 0);
        CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, "rows, cols in [1, 4096]");
        uint32_t many[3] = {4000000000u, 28, 28};
        write_idx(bad, gz, 0x803, many, 3, px, 16, 0);
        CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_RANGE,
                  "4000000000 x 28 x 28 = 3136000000000 pixels, more than max_elements = 100000000");
        uint32_t zero[3] = {0, 28, 28};
        write_idx(bad, gz, 0x803, zero, 3, NULL, 0, 0);
        CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, "expected count >= 1");
        /* just under the limit but a tiny file: truncated, and no 1e8-byte buffer */
        uint32_t big[3] = {100000, 1000, 1};
        write_idx(bad, gz, 0x803, big, 3, px, 16, 0);
        uint32_t biglab[1] = {100000};
        write_idx(tpath("bad-lb"), gz, 0x801, biglab, 1, lab, 4, 0);
        CHECK_ERR(open_idx(bad, tpath("bad-lb"), 10), DLC_ERR_FORMAT,
                  "= 100000000 bytes, file has 16 after the header (truncated?)");
        /* count mismatch */
        uint32_t fewer[1] = {NIMG - 1};
        write_idx(bad, gz, 0x801, fewer, 1, lab, NIMG - 1, 0);
        CHECK_ERR(open_idx(goodi, bad, 10), DLC_ERR_FORMAT, "labels header says 11 labels, but");
        /* label out of range */
        uint8_t lab2[NIMG];
        memcpy(lab2, lab, sizeof lab2);
        lab2[7] = 10;
        write_idx(bad, gz, 0x801, dl, 1, lab2, sizeof lab2, 0);
        CHECK_ERR(open_idx(goodi, bad, 10), DLC_ERR_RANGE, "label 10 at index 7, expected < classes = 10");
        CHECK_ERR(open_idx(goodi, goodl, 5), DLC_ERR_RANGE, "label 5 at index 5, expected < classes = 5");
        /* and the next valid request still works */
        dlc_images *d = open_idx(goodi, goodl, 10);
        CHECK_OK(d);
        dlc_images_release(d);
    }
    /* a corrupt gzip stream (valid header, garbage deflate data) */
    uint8_t gzbad[64] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    for (int i = 10; i < 64; i++) gzbad[i] = (uint8_t)(i * 37);
    write_file(bad, gzbad, sizeof gzbad);
    dlc_images *d = open_idx(bad, goodl, 10);
    CHECK(!d && strstr(dlc_last_error(), tpath("bad")));
    dlc_images_release(d);
    /* a gzip file cut in the middle */
    write_set(tpath("cut-im.gz"), tpath("cut-lb.gz"), 1);
    FILE *f = fopen(tpath("cut-im.gz"), "rb");
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_file(tpath("cut-im.gz"), buf, n / 2);
    d = open_idx(tpath("cut-im.gz"), goodl, 10);
    CHECK(!d && dlc_last_status() == DLC_ERR_FORMAT && strstr(dlc_last_error(), "cut-im.gz"));
    dlc_images_release(d);
    CHECK_ERR(open_idx(tpath("missing.gz"), goodl, 10), DLC_ERR_IO, "missing.gz: cannot open the images file");
    /* a FIFO is refused without waiting for a writer (open() used to hang), a
     * directory likewise */
    CHECK(mkfifo(tpath("fifo"), 0600) == 0);
    CHECK_ERR(open_idx(tpath("fifo"), goodl, 10), DLC_ERR_ARG, "fifo: the images file is not a regular file");
    CHECK_ERR(open_idx(tpath("good-im.gz"), tpath("fifo"), 10), DLC_ERR_ARG, "fifo: the labels file is not a regular file");
    CHECK_ERR(open_idx(tmpdir, goodl, 10), DLC_ERR_ARG, "the images file is not a regular file");

    dlc_images_params o = dlc_images_default_params();
    CHECK_ERR(dlc_images_open(&o), DLC_ERR_ARG, "need both an images and a labels path");
    o.synthetic = 10;
    o.classes = 1;
    CHECK_ERR(dlc_images_open(&o), DLC_ERR_ARG, "classes = 1");
    o.classes = 10;
    o.std = 0;
    CHECK_ERR(dlc_images_open(&o), DLC_ERR_ARG, "std > 0");
}

/* The bytes of a file (at most cap), for building gzip files by hand. */
static size_t read_all(const char *path, uint8_t *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* One gzip member holding p[0..n), written at out; returns its length. */
static size_t gz_member(const uint8_t *p, size_t n, uint8_t *out, size_t cap) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) exit(2);
    z.next_in = (Bytef *)(uintptr_t)p;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) exit(2);
    size_t len = cap - z.avail_out;
    deflateEnd(&z);
    return len;
}

/* What follows a gzip member: another member (read as the concatenation, as gzip -d
 * does), or nothing.  zlib's gzread skipped anything else silently. */
static void test_idx_gzip_members(void) {
    const char *plaini = tpath("m-im.idx"), *plainl = tpath("m-lb.idx");
    const char *goodi = tpath("m-im.gz"), *goodl = tpath("m-lb.gz"), *bad = tpath("m-bad.gz");
    write_set(plaini, plainl, 0);
    write_set(goodi, goodl, 1);
    static uint8_t raw[4096], gz[8192], buf[8192];
    size_t nraw = read_all(plaini, raw, sizeof raw), ngz = read_all(goodi, gz, sizeof gz);
    char want[512];

    /* garbage after the stream names the file, the count and the offset */
    memcpy(buf, gz, ngz);
    memcpy(buf + ngz, "not gzip, garbage", 17);
    write_file(bad, buf, ngz + 17);
    snprintf(want, sizeof want, "%s: 17 bytes of garbage after the gzip stream at offset %zu", bad,
             ngz);
    CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, want);
    /* zero padding (as some copying tools leave) is garbage too */
    memset(buf + ngz, 0, 512);
    write_file(bad, buf, ngz + 512);
    snprintf(want, sizeof want, "%s: 512 bytes of garbage after the gzip stream at offset %zu", bad,
             ngz);
    CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, want);
    /* one stray byte, even the first byte of the gzip magic */
    buf[ngz] = 0x1f;
    write_file(bad, buf, ngz + 1);
    CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, "1 bytes of garbage after the gzip stream");
    /* in the labels file */
    size_t nl = read_all(goodl, buf, sizeof buf);
    buf[nl] = 0;
    write_file(bad, buf, nl + 1);
    snprintf(want, sizeof want, "%s: 1 bytes of garbage after the gzip stream at offset %zu", bad, nl);
    CHECK_ERR(open_idx(goodi, bad, 10), DLC_ERR_FORMAT, want);
    /* the gzip magic, then no valid member: corrupt or truncated, never ignored */
    memcpy(buf, gz, ngz);
    memcpy(buf + ngz, "\x1f\x8bjunk after the magic", 22);
    write_file(bad, buf, ngz + 22);
    CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, bad);
    write_file(bad, buf, ngz + 2);
    CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, "(truncated?)");

    /* members split inside the header and inside the payload, plus an empty member:
     * the concatenation, equal to the plain file */
    size_t n = gz_member(raw, 6, buf, sizeof buf);
    n += gz_member(raw + 6, 50, buf + n, sizeof buf - n);
    n += gz_member(raw, 0, buf + n, sizeof buf - n);
    n += gz_member(raw + 56, nraw - 56, buf + n, sizeof buf - n);
    write_file(tpath("cat-im.gz"), buf, n);
    size_t nlraw = read_all(plainl, raw, sizeof raw);
    n = gz_member(raw, nlraw - 1, buf, sizeof buf);
    n += gz_member(raw + nlraw - 1, 1, buf + n, sizeof buf - n);
    write_file(tpath("cat-lb.gz"), buf, n);
    dlc_images *p = open_idx(plaini, plainl, 10), *c = open_idx(tpath("cat-im.gz"), tpath("cat-lb.gz"), 10);
    CHECK_OK(p);
    CHECK_OK(c);
    if (p && c) {
        int64_t np, nc;
        CHECK(!memcmp(dlc_images_pixels(p, &np), dlc_images_pixels(c, &nc), NIMG * ROWS * COLS) &&
              np == NIMG && nc == NIMG);
        CHECK(!memcmp(dlc_images_labels(p, NULL), dlc_images_labels(c, NULL), NIMG));
        CHECK(dlc_images_rows(c) == ROWS && dlc_images_cols(c) == COLS);
    }
    dlc_images_release(c);
    /* concatenated members followed by garbage */
    n = read_all(tpath("cat-im.gz"), buf, sizeof buf);
    memcpy(buf + n, "xyz", 3);
    write_file(bad, buf, n + 3);
    snprintf(want, sizeof want, "3 bytes of garbage after the gzip stream at offset %zu", n);
    CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, want);

    /* truncated: in the second member, in the trailer's length, without the whole
     * trailer (the payload is complete, the CRC unchecked), in the middle */
    n = read_all(tpath("cat-im.gz"), buf, sizeof buf);
    size_t cuts[4] = {n - 5, ngz - 1, ngz - 8, ngz / 2};
    for (int k = 0; k < 4; k++) {
        write_file(bad, k == 0 ? buf : gz, cuts[k]);
        dlc_images *d = open_idx(bad, goodl, 10);
        CHECK(!d && dlc_last_status() == DLC_ERR_FORMAT && strstr(dlc_last_error(), bad) &&
              strstr(dlc_last_error(), "truncated"));
        if (d || !strstr(dlc_last_error(), "truncated"))
            fprintf(stderr, "cut %d at %zu: %s\n", k, cuts[k], d ? "read" : dlc_last_error());
        dlc_images_release(d);
    }
    /* a wrong CRC is corrupt data */
    memcpy(buf, gz, ngz);
    buf[ngz - 8] ^= 1;
    write_file(bad, buf, ngz);
    CHECK_ERR(open_idx(bad, goodl, 10), DLC_ERR_FORMAT, "incorrect data check");

    /* and the next valid request still works */
    dlc_images *d = open_idx(goodi, goodl, 10);
    CHECK_OK(d);
    if (d && p) CHECK(!memcmp(dlc_images_pixels(d, NULL), dlc_images_pixels(p, NULL), NIMG * ROWS * COLS));
    dlc_images_release(d);
    dlc_images_release(p);
}

/* Shards of the image set are disjoint and cover it; shuffled epochs are
 * permutations; cursors restore. */
static void test_image_loaders(void) {
    write_set(tpath("s-im"), tpath("s-lb"), 0);
    dlc_images *d = open_idx(tpath("s-im"), tpath("s-lb"), 10);
    CHECK_OK(d);
    if (!d) return;
    /* 12 examples, 3 shards of 4, batch 2: each epoch a permutation of the shard */
    int owner[NIMG];
    for (int i = 0; i < NIMG; i++) owner[i] = -1;
    int overlap = 0, foreign = 0;
    for (int s = 0; s < 3; s++) {
        dlc_image_loader *l = image_loader(d, DLC_SPLIT_ALL, 2, s, 3, 11, 1);
        CHECK(l && dlc_image_loader_size(l) == 4 && dlc_image_loader_batches_per_epoch(l) == 2);
        if (!l) continue;
        int orders[3][4];
        for (int ep = 0; ep < 3; ep++)
            for (int k = 0; k < 2; k++) {
                dlc_tensor *x, *y;
                dlc_image_loader_next(l, &x, &y);
                for (int r = 0; r < 2; r++) {
                    int id = example_id(x, r);
                    orders[ep][k * 2 + r] = id;
                    foreign += id % 3 != s; /* shard s = examples with index % 3 == s */
                    if (ep == 0) {
                        overlap += owner[id] != -1;
                        owner[id] = s;
                    }
                    foreign += y->data[r] != id % 10;
                }
                dlc_tensor_release(x);
                dlc_tensor_release(y);
            }
        int perm_ok = 1, differs = 0;
        for (int ep = 0; ep < 3; ep++) {
            int seen[NIMG] = {0};
            for (int k = 0; k < 4; k++) seen[orders[ep][k]]++;
            for (int i = 0; i < NIMG; i++) perm_ok &= seen[i] == (i % 3 == s);
            if (ep) differs += memcmp(orders[ep], orders[0], sizeof orders[0]) != 0;
        }
        CHECK(perm_ok);
        CHECK(differs > 0); /* new order each epoch (3 tries at 1/24 each to fail) */
        dlc_image_loader_free(l);
    }
    int covered = 1;
    for (int i = 0; i < NIMG; i++) covered &= owner[i] == i % 3;
    CHECK(covered && !overlap && !foreign);

    /* cursor restore across an epoch boundary, and from a fresh loader */
    dlc_image_loader *a = image_loader(d, DLC_SPLIT_ALL, 5, 0, 1, 3, 1);
    dlc_image_loader *b = image_loader(d, DLC_SPLIT_ALL, 5, 0, 1, 3, 1);
    dlc_image_loader *c = image_loader(d, DLC_SPLIT_ALL, 5, 0, 1, 4, 1);
    CHECK(a && b && c && dlc_image_loader_batches_per_epoch(a) == 2);
    if (a && b && c) {
        dlc_tensor *x, *y, *xs[4], *ys[4];
        dlc_image_loader_next(a, &x, &y);
        dlc_tensor_release(x);
        dlc_tensor_release(y);
        int64_t e, p;
        dlc_image_loader_cursor(a, &e, &p);
        CHECK(e == 0 && p == 5);
        for (int i = 0; i < 4; i++) dlc_image_loader_next(a, &xs[i], &ys[i]);
        dlc_image_loader_cursor(a, &e, &p);
        CHECK(e == 2 && p == 5); /* 2 full batches per epoch, 2 left over each time */
        CHECK(dlc_image_loader_set_cursor(b, 0, 5) == DLC_OK);
        int same = 1;
        for (int i = 0; i < 4; i++) {
            dlc_image_loader_next(b, &x, &y);
            same &= same_tensor(x, xs[i]) && same_tensor(y, ys[i]);
            dlc_tensor_release(x);
            dlc_tensor_release(y);
        }
        CHECK(same);
        dlc_image_loader_set_cursor(c, 0, 5);
        dlc_image_loader_next(c, &x, &y);
        CHECK(!same_tensor(x, xs[0])); /* another seed, another order */
        dlc_tensor_release(x);
        dlc_tensor_release(y);
        for (int i = 0; i < 4; i++) {
            dlc_tensor_release(xs[i]);
            dlc_tensor_release(ys[i]);
        }
        CHECK(dlc_image_loader_set_cursor(a, 0, 13) == DLC_ERR_RANGE);
        CHECK(strstr(dlc_last_error(), "position = 13") != NULL);
        CHECK(dlc_image_loader_set_cursor(a, -1, 0) == DLC_ERR_RANGE);
    }
    dlc_image_loader_free(a);
    dlc_image_loader_free(b);
    dlc_image_loader_free(c);

    CHECK_ERR(image_loader(d, DLC_SPLIT_ALL, 13, 0, 1, 0, 1), DLC_ERR_RANGE,
              "images: all shard 1 of 1 has 12 examples (of 12 in the split), fewer than one "
              "shuffled batch");
    CHECK_ERR(image_loader(d, DLC_SPLIT_EVAL, 1, 0, 1, 0, 0), DLC_ERR_RANGE, "eval shard 1 of 1 has 0");
    CHECK_ERR(image_loader(d, DLC_SPLIT_ALL, 1, 12, 13, 0, 0), DLC_ERR_RANGE, "use fewer learners");
    CHECK_ERR(image_loader(d, DLC_SPLIT_ALL, 1, 3, 3, 0, 0), DLC_ERR_ARG, "shard index 3 of 3");
    /* an unshuffled loader accepts a batch larger than its shard */
    a = image_loader(d, DLC_SPLIT_ALL, 100, 0, 1, 0, 0);
    CHECK_OK(a);
    dlc_image_loader_free(a);
    dlc_images_release(d);
}

/* batch_at on images: examples first .. first + b - 1 in shard order, shuffled or not. */
static void test_image_batch_at(void) {
    write_set(tpath("b-im"), tpath("b-lb"), 0);
    dlc_images *d = open_idx(tpath("b-im"), tpath("b-lb"), 10);
    CHECK_OK(d);
    if (!d) return;
    dlc_image_loader *in_order = image_loader(d, DLC_SPLIT_ALL, 5, 1, 2, 0, 0); /* 1, 3, .., 11 */
    dlc_image_loader *shuffled = image_loader(d, DLC_SPLIT_ALL, 5, 1, 2, 9, 1);
    CHECK(in_order && shuffled);
    if (in_order && shuffled) {
        int bad = 0;
        for (int64_t f = 0; f < 6; f++) {
            dlc_tensor *x, *y, *x2, *y2;
            int64_t b = 6 - f < 5 ? 6 - f : 5;
            if (dlc_image_loader_batch_at(in_order, f, &x, &y) != DLC_OK) {
                bad++;
                continue;
            }
            bad += x->shape[0] != b || x->shape[1] != ROWS * COLS || y->ndim != 1 || y->shape[0] != b;
            for (int64_t r = 0; r < b && !bad; r++) {
                int id = (int)(2 * (f + r) + 1);
                bad += example_id(x, r) != id || y->data[r] != id % 10;
            }
            CHECK(dlc_image_loader_batch_at(shuffled, f, &x2, &y2) == DLC_OK);
            bad += !same_tensor(x, x2) || !same_tensor(y, y2);
            dlc_tensor_release(x);
            dlc_tensor_release(y);
            dlc_tensor_release(x2);
            dlc_tensor_release(y2);
        }
        CHECK(bad == 0);
        /* the first batch of an unshuffled epoch; the cursor does not move */
        dlc_tensor *x, *y, *x2, *y2;
        dlc_image_loader_next(in_order, &x, &y);
        dlc_image_loader_batch_at(in_order, 0, &x2, &y2);
        CHECK(same_tensor(x, x2) && same_tensor(y, y2));
        int64_t e, p;
        dlc_image_loader_cursor(in_order, &e, &p);
        CHECK(e == 0 && p == 5);
        dlc_tensor_release(x);
        dlc_tensor_release(y);
        dlc_tensor_release(x2);
        dlc_tensor_release(y2);
        x = y = (dlc_tensor *)1;
        CHECK(dlc_image_loader_batch_at(in_order, 6, &x, &y) == DLC_ERR_RANGE && !x && !y);
        CHECK(strstr(dlc_last_error(), "example 6 out of range [0, 6)") != NULL);
        CHECK(dlc_image_loader_batch_at(shuffled, -1, &x, &y) == DLC_ERR_RANGE);
        CHECK(strstr(dlc_last_error(), "example -1 out of range [0, 6)") != NULL);
    }
    dlc_image_loader_free(in_order);
    dlc_image_loader_free(shuffled);
    dlc_images_release(d);
}

static dlc_images *synthetic_images(int64_t n, int classes, int rows, int cols, uint64_t seed,
                                    double frac) {
    dlc_images_params o = dlc_images_default_params();
    o.synthetic = n;
    o.classes = classes;
    o.rows = rows;
    o.cols = cols;
    o.seed = seed;
    o.eval_fraction = frac;
    return dlc_images_open(&o);
}

/* Synthetic images are deterministic and a nearest-centroid classifier learned on
 * the train split gets most of the eval split right. */
static void test_synthetic_images(void) {
    dlc_images *a = synthetic_images(2000, 10, 12, 12, 5, 0.2);
    dlc_images *b = synthetic_images(2000, 10, 12, 12, 5, 0.2);
    dlc_images *c = synthetic_images(2000, 10, 12, 12, 6, 0.2);
    CHECK(a && b && c);
    if (!a || !b || !c) return;
    int64_t n;
    const uint8_t *pa = dlc_images_pixels(a, &n), *pb = dlc_images_pixels(b, NULL);
    const uint8_t *pc = dlc_images_pixels(c, NULL);
    CHECK(n == 2000 && !memcmp(pa, pb, 2000 * 144) && memcmp(pa, pc, 2000 * 144));
    CHECK(dlc_images_count(a, DLC_SPLIT_TRAIN) + dlc_images_count(a, DLC_SPLIT_EVAL) == 2000);
    CHECK(dlc_images_count(a, DLC_SPLIT_EVAL) > 300 && dlc_images_count(a, DLC_SPLIT_EVAL) < 500);
    const uint8_t *lb = dlc_images_labels(a, NULL);
    int hist[10] = {0};
    for (int64_t i = 0; i < n; i++) hist[lb[i] < 10 ? lb[i] : 0]++;
    int balanced = 1;
    for (int k = 0; k < 10; k++) balanced &= hist[k] > 120 && hist[k] < 280;
    CHECK(balanced);

    /* centroids from a train loader, classification of an eval loader */
    static double cen[10][144];
    double cnt[10] = {0};
    dlc_image_loader *tr = image_loader(a, DLC_SPLIT_TRAIN, 100, 0, 1, 0, 0);
    dlc_image_loader *ev = image_loader(a, DLC_SPLIT_EVAL, 100, 0, 1, 0, 0);
    CHECK(tr && ev);
    if (tr && ev) {
        for (int64_t k = 0; k < dlc_image_loader_batches_per_epoch(tr); k++) {
            dlc_tensor *x, *y;
            dlc_image_loader_next(tr, &x, &y);
            for (int64_t r = 0; r < x->shape[0]; r++) {
                int cl = (int)y->data[r];
                cnt[cl]++;
                for (int j = 0; j < 144; j++) cen[cl][j] += x->data[r * 144 + j];
            }
            dlc_tensor_release(x);
            dlc_tensor_release(y);
        }
        for (int k = 0; k < 10; k++)
            for (int j = 0; j < 144; j++) cen[k][j] /= cnt[k] > 0 ? cnt[k] : 1;
        int64_t right = 0, total = 0;
        for (int64_t k = 0; k < dlc_image_loader_batches_per_epoch(ev); k++) {
            dlc_tensor *x, *y;
            dlc_image_loader_next(ev, &x, &y);
            for (int64_t r = 0; r < x->shape[0]; r++) {
                int best = 0;
                double bd = 1e300;
                for (int cl = 0; cl < 10; cl++) {
                    double dd = 0;
                    for (int j = 0; j < 144; j++) {
                        double t = x->data[r * 144 + j] - cen[cl][j];
                        dd += t * t;
                    }
                    if (dd < bd) bd = dd, best = cl;
                }
                right += best == (int)y->data[r];
                total++;
            }
            dlc_tensor_release(x);
            dlc_tensor_release(y);
        }
        CHECK(total == dlc_images_count(a, DLC_SPLIT_EVAL));
        CHECK(right > 0.9 * (double)total);
        if (getenv("DLC_VERBOSE"))
            printf("synthetic images: nearest centroid %lld / %lld\n", (long long)right, (long long)total);
    }
    dlc_image_loader_free(tr);
    dlc_image_loader_free(ev);
    dlc_images_release(a);
    dlc_images_release(b);
    dlc_images_release(c);
    CHECK_ERR(synthetic_images(1000000, 10, 1000, 1000, 0, 0), DLC_ERR_RANGE, "max_elements");
    CHECK_ERR(synthetic_images(10, 10, 0, 5, 0, 0), DLC_ERR_ARG, "rows = 0");
}

static void test_fashion_mnist(void) {
    const char *im = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
    const char *lb = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
    struct stat st;
    if (stat(im, &st) != 0 || stat(lb, &st) != 0) return;
    dlc_images_params o = dlc_images_default_params();
    o.images = im;
    o.labels = lb;
    dlc_images *d = dlc_images_open(&o);
    CHECK_OK(d);
    if (!d) return;
    int64_t n;
    const uint8_t *px = dlc_images_pixels(d, &n);
    CHECK(n == 60000 && dlc_images_rows(d) == 28 && dlc_images_cols(d) == 28);
    double sum = 0;
    for (int64_t i = 0; i < n * 784; i++) sum += px[i];
    CHECK_NEAR(sum / (double)(n * 784) / 255.0, 0.2860, 1e-3); /* the default mean */
    dlc_images_release(d);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dlc-test-data-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_clean();
    test_directory();
    test_text_size_bound();
    test_split();
    test_shards();
    test_text_batch_at();
    test_random_windows();
    test_text_loader_errors();
    test_synthetic_text();
    test_text_speed();
    test_fortunes();
    test_idx_round_trip();
    test_idx_hostile();
    test_idx_gzip_members();
    test_image_loaders();
    test_image_batch_at();
    test_synthetic_images();
    test_fashion_mnist();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_done("data");
}
