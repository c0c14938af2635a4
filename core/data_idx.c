/* data_idx.c - image sets from IDX files (gzip or plain) or synthesized, and their
 * loaders.  See data.h for the contract.  Everything read from a file is checked
 * against a hard limit before anything is allocated for it, and payload buffers
 * grow with the bytes actually read, so a header claiming 10^8 pixels in a 1 KB
 * file costs at most one small buffer. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "diloco/data.h"

#define IDX_IMAGES_MAGIC 0x00000803u /* u8, 3 dims */
#define IDX_LABELS_MAGIC 0x00000801u /* u8, 1 dim */
#define MAX_SIDE 4096                /* rows, cols */
#define DEFAULT_MAX_ELEMENTS 100000000
#define FIRST_BUFFER ((size_t)1 << 20)

static uint64_t mix64(uint64_t z) { /* splitmix64 finaliser, as in data_text.c */
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

struct dlc_images {
    int refs;
    uint8_t *pixels;       /* [count, rows * cols] */
    uint8_t *labels;       /* [count] */
    uint8_t *is_eval;      /* [count] */
    int64_t count, counts[DLC_SPLIT_COUNT];
    int rows, cols, classes;
    float mean, std;
};

dlc_images_params dlc_images_default_params(void) {
    dlc_images_params o;
    memset(&o, 0, sizeof o);
    o.classes = 10;
    o.mean = 0.2860f;
    o.std = 0.3530f;
    o.max_elements = DEFAULT_MAX_ELEMENTS;
    o.rows = 28;
    o.cols = 28;
    return o;
}

/* ---------------------------------------------------------------------------
 * IDX reading
 * --------------------------------------------------------------------------- */

typedef struct idx_file {
    gzFile f;
    const char *path, *what; /* "images" / "labels" */
    uint32_t dims[3];
} idx_file;

static dlc_status gz_fail(idx_file *x, const char *doing) {
    int code = 0;
    const char *msg = gzerror(x->f, &code);
    if (code == Z_ERRNO)
        return dlc_error(DLC_ERR_IO, "%s: %s: %s", x->path, doing, strerror(errno));
    return dlc_error(DLC_ERR_FORMAT, "%s: %s: %s (corrupt or truncated gzip data?)", x->path,
                     doing, msg ? msg : "gzip error");
}

/* Reads up to n bytes; returns the count (< n only at end of data) or -1 on error. */
static int64_t gz_read_full(gzFile f, uint8_t *p, int64_t n) {
    int64_t have = 0;
    while (have < n) {
        int64_t ask = n - have > (1 << 30) ? (1 << 30) : n - have;
        int got = gzread(f, p + have, (unsigned)ask);
        if (got < 0) return -1;
        if (got == 0) break;
        have += got;
    }
    return have;
}

/* Opens path and reads and checks an IDX header: magic, then ndims big-endian u32
 * dims into x->dims. */
static dlc_status idx_open(idx_file *x, const char *path, const char *what, uint32_t magic) {
    int ndims = (int)(magic & 0xff);
    x->path = path;
    x->what = what;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; anything but a regular
     * file is refused before a byte is read */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return dlc_error(DLC_ERR_IO, "%s: cannot open the %s file: %s", path, what, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return dlc_error(DLC_ERR_IO, "%s: cannot open the %s file: %s", path, what, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dlc_error(DLC_ERR_ARG, "%s: the %s file is not a regular file (a FIFO, device or "
                         "directory?); expected an IDX file", path, what);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    errno = 0;
    x->f = gzdopen(fd, "rb");
    if (!x->f) {
        close(fd);
        return dlc_error(DLC_ERR_NOMEM, "%s: cannot open the %s file: out of memory", path, what);
    }
    gzbuffer(x->f, 1 << 17);
    uint8_t h[16];
    int64_t want = 4 + 4 * (int64_t)ndims;
    int64_t got = gz_read_full(x->f, h, want);
    if (got < 0) return gz_fail(x, "reading the IDX header");
    if (got < want)
        return dlc_error(DLC_ERR_FORMAT, "%s: %lld bytes, too short for an IDX %s header "
                         "(%lld bytes)", path, (long long)got, what, (long long)want);
    uint32_t m = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    if (m != magic)
        return dlc_error(DLC_ERR_FORMAT, "%s: magic 0x%08x, expected 0x%08x for IDX %s (unsigned "
                         "bytes, %d dimension%s)%s", path, m, magic, what, ndims,
                         ndims == 1 ? "" : "s",
                         m == IDX_IMAGES_MAGIC || m == IDX_LABELS_MAGIC
                             ? "; images and labels swapped?" : "");
    for (int i = 0; i < ndims; i++) {
        const uint8_t *d = h + 4 + 4 * i;
        x->dims[i] = (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
    }
    return DLC_OK;
}

/* Reads exactly `want` payload bytes into a new buffer and checks that nothing
 * follows.  `desc` describes the header's claim for the messages ("60000 x 28 x 28"). */
static dlc_status idx_payload(idx_file *x, uint64_t want, const char *desc, uint8_t **out) {
    *out = NULL;
    size_t cap = want < FIRST_BUFFER ? (size_t)want : FIRST_BUFFER;
    uint8_t *p = malloc(cap ? cap : 1);
    if (!p) return dlc_error(DLC_ERR_NOMEM, "%s: out of memory", x->path);
    size_t have = 0;
    while (have < want) {
        if (have == cap) {
            size_t nc = cap * 2 < want ? cap * 2 : (size_t)want;
            uint8_t *np = realloc(p, nc);
            if (!np) {
                free(p);
                return dlc_error(DLC_ERR_NOMEM, "%s: out of memory reading %s", x->path, x->what);
            }
            p = np;
            cap = nc;
        }
        int64_t got = gz_read_full(x->f, p + have, (int64_t)(cap - have));
        if (got < 0) {
            int code = 0;
            gzerror(x->f, &code);
            free(p);
            if (code == Z_BUF_ERROR)
                return dlc_error(DLC_ERR_FORMAT, "%s: %s header says %s = %llu bytes, the gzip "
                                 "stream ends after %llu (truncated?)", x->path, x->what, desc,
                                 (unsigned long long)want, (unsigned long long)have);
            return gz_fail(x, "reading the payload");
        }
        have += (size_t)got;
        if (have < cap) { /* a short read is the end of the data */
            free(p);
            return dlc_error(DLC_ERR_FORMAT, "%s: %s header says %s = %llu bytes, file has "
                             "%llu after the header (truncated?)", x->path, x->what, desc,
                             (unsigned long long)want, (unsigned long long)have);
        }
    }
    uint8_t extra[4096];
    uint64_t trailing = 0;
    int64_t got;
    while ((got = gz_read_full(x->f, extra, sizeof extra)) > 0 && trailing < ((uint64_t)1 << 32))
        trailing += (uint64_t)got;
    if (got < 0 && trailing == 0) {
        int code = 0;
        gzerror(x->f, &code);
        if (code != Z_BUF_ERROR) {
            free(p);
            return gz_fail(x, "reading past the payload");
        }
    }
    if (trailing) {
        free(p);
        return dlc_error(DLC_ERR_FORMAT, "%s: %s header says %s = %llu bytes, file has %llu more "
                         "after them (trailing bytes; wrong header?)", x->path, x->what, desc,
                         (unsigned long long)want, (unsigned long long)trailing);
    }
    *out = p;
    return DLC_OK;
}

static void idx_close(idx_file *x) {
    if (x->f) gzclose(x->f);
    x->f = NULL;
}

static dlc_status read_idx(dlc_images *d, const dlc_images_params *o) {
    idx_file im = {0}, lb = {0};
    char desc[96];
    dlc_status s;
    if ((s = idx_open(&im, o->images, "images", IDX_IMAGES_MAGIC))) goto done;
    if ((s = idx_open(&lb, o->labels, "labels", IDX_LABELS_MAGIC))) goto done;
    uint32_t n = im.dims[0], rows = im.dims[1], cols = im.dims[2];
    snprintf(desc, sizeof desc, "%u x %u x %u", n, rows, cols);
    if (n == 0 || rows == 0 || cols == 0 || rows > MAX_SIDE || cols > MAX_SIDE) {
        s = dlc_error(DLC_ERR_FORMAT, "%s: images header says %s (count x rows x cols); expected "
                      "count >= 1 and rows, cols in [1, %d]", o->images, desc, MAX_SIDE);
        goto done;
    }
    uint64_t total = (uint64_t)n * rows * cols; /* < 2^56: no overflow */
    if (total > (uint64_t)o->max_elements) {
        s = dlc_error(DLC_ERR_RANGE, "%s: images header says %s = %llu pixels, more than "
                      "max_elements = %lld", o->images, desc, (unsigned long long)total,
                      (long long)o->max_elements);
        goto done;
    }
    if (lb.dims[0] != n) {
        s = dlc_error(DLC_ERR_FORMAT, "%s: labels header says %u labels, but %s has %u images; "
                      "the files do not belong together", o->labels, lb.dims[0], o->images, n);
        goto done;
    }
    if ((s = idx_payload(&im, total, desc, &d->pixels))) goto done;
    snprintf(desc, sizeof desc, "%u", n);
    if ((s = idx_payload(&lb, n, desc, &d->labels))) goto done;
    for (uint32_t i = 0; i < n; i++)
        if (d->labels[i] >= o->classes) {
            s = dlc_error(DLC_ERR_RANGE, "%s: label %d at index %u, expected < classes = %d",
                          o->labels, d->labels[i], i, o->classes);
            goto done;
        }
    d->count = n;
    d->rows = (int)rows;
    d->cols = (int)cols;
done:
    idx_close(&im);
    idx_close(&lb);
    return s;
}

/* ---------------------------------------------------------------------------
 * synthetic images
 * --------------------------------------------------------------------------- */

static dlc_status synthesize(dlc_images *d, const dlc_images_params *o) {
    const int R = o->rows, C = o->cols, K = o->classes, P = R * C;
    const int64_t n = o->synthetic;
    float *proto = malloc((size_t)K * (size_t)P * sizeof *proto);
    float *noise = malloc((size_t)P * sizeof *noise);
    d->pixels = malloc((size_t)n * (size_t)P);
    d->labels = malloc((size_t)n);
    if (!proto || !noise || !d->pixels || !d->labels) {
        free(proto);
        free(noise);
        return dlc_error(DLC_ERR_NOMEM, "images: out of memory for %lld synthetic examples",
                         (long long)n);
    }
    dlc_rng g;
    dlc_rng_init(&g, mix64(o->seed ^ 0x494d414745530000ull));
    /* each class: three gaussian blobs at random places */
    const float side = (float)(R < C ? R : C);
    for (int k = 0; k < K; k++) {
        float blob[12];
        dlc_rng_uniform(&g, blob, 12, 0.0f, 1.0f);
        float *pk = proto + (size_t)k * P;
        for (int i = 0; i < P; i++) pk[i] = 0;
        for (int b = 0; b < 3; b++) {
            float cy = (0.15f + 0.7f * blob[4 * b]) * (float)R;
            float cx = (0.15f + 0.7f * blob[4 * b + 1]) * (float)C;
            float sg = (0.08f + 0.17f * blob[4 * b + 2]) * side + 0.5f;
            float amp = 0.5f + 0.5f * blob[4 * b + 3];
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++) {
                    float dy = (float)r + 0.5f - cy, dx = (float)c + 0.5f - cx;
                    pk[r * C + c] += amp * expf(-(dx * dx + dy * dy) / (2 * sg * sg));
                }
        }
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t u[4];
        dlc_rng_u32(&g, u, 4);
        int k = (int)(u[0] % (uint32_t)K);
        float contrast = 0.7f + 0.3f * (float)(u[1] >> 8) * (1.0f / 16777216.0f);
        dlc_rng_normal(&g, noise, P, 0.0f, 0.1f);
        const float *pk = proto + (size_t)k * P;
        uint8_t *px = d->pixels + i * P;
        for (int j = 0; j < P; j++) {
            float v = pk[j] * contrast + noise[j];
            v = v < 0 ? 0 : v > 1 ? 1 : v;
            px[j] = (uint8_t)lrintf(v * 255.0f);
        }
        d->labels[i] = (uint8_t)k;
    }
    free(proto);
    free(noise);
    d->count = n;
    d->rows = R;
    d->cols = C;
    return DLC_OK;
}

/* ---------------------------------------------------------------------------
 * the image set
 * --------------------------------------------------------------------------- */

static dlc_status check_params(const dlc_images_params *o) {
    if (o->synthetic < 0)
        return dlc_error(DLC_ERR_ARG, "images: synthetic = %lld, expected >= 0",
                         (long long)o->synthetic);
    if (o->synthetic > 0 && (o->images || o->labels))
        return dlc_error(DLC_ERR_ARG, "images: both files (%s) and synthetic = %lld given; choose "
                         "one", o->images ? o->images : o->labels, (long long)o->synthetic);
    if (o->synthetic == 0 && (!o->images || !o->labels))
        return dlc_error(DLC_ERR_ARG, "images: need both an images and a labels path (got %s and "
                         "%s), or synthetic > 0", o->images ? o->images : "none",
                         o->labels ? o->labels : "none");
    if (o->classes < 2 || o->classes > 256)
        return dlc_error(DLC_ERR_ARG, "images: classes = %d, expected an integer in [2, 256]",
                         o->classes);
    if (!isfinite(o->mean) || !(o->std > 0) || !isfinite(o->std))
        return dlc_error(DLC_ERR_ARG, "images: mean = %g, std = %g; expected finite numbers with "
                         "std > 0", (double)o->mean, (double)o->std);
    if (!(o->eval_fraction >= 0 && o->eval_fraction < 1))
        return dlc_error(DLC_ERR_ARG, "images: eval_fraction = %g, expected a number in [0, 1)",
                         o->eval_fraction);
    if (o->max_elements < 1)
        return dlc_error(DLC_ERR_ARG, "images: max_elements = %lld, expected >= 1",
                         (long long)o->max_elements);
    if (o->synthetic > 0) {
        if (o->rows < 1 || o->rows > 1024 || o->cols < 1 || o->cols > 1024)
            return dlc_error(DLC_ERR_ARG, "images: synthetic rows = %d, cols = %d; expected "
                             "integers in [1, 1024]", o->rows, o->cols);
        if (o->synthetic > o->max_elements / ((int64_t)o->rows * o->cols))
            return dlc_error(DLC_ERR_RANGE, "images: synthetic = %lld examples of %d x %d is more "
                             "than max_elements = %lld pixels", (long long)o->synthetic, o->rows,
                             o->cols, (long long)o->max_elements);
    }
    return DLC_OK;
}

dlc_images *dlc_images_open(const dlc_images_params *o) {
    if (check_params(o)) return NULL;
    dlc_images *d = calloc(1, sizeof *d);
    if (!d) {
        dlc_error(DLC_ERR_NOMEM, "images: out of memory");
        return NULL;
    }
    d->refs = 1;
    d->classes = o->classes;
    d->mean = o->mean;
    d->std = o->std;
    if (o->synthetic > 0 ? synthesize(d, o) : read_idx(d, o)) goto fail;
    if (!(d->is_eval = malloc((size_t)d->count))) {
        dlc_error(DLC_ERR_NOMEM, "images: out of memory");
        goto fail;
    }
    if (dlc_split_mark(d->is_eval, d->count, o->eval_fraction, o->split_seed)) goto fail;
    for (int64_t i = 0; i < d->count; i++) d->counts[d->is_eval[i] ? DLC_SPLIT_EVAL : DLC_SPLIT_TRAIN]++;
    d->counts[DLC_SPLIT_ALL] = d->count;
    return d;
fail:
    d->refs = 1;
    dlc_images_release(d);
    return NULL;
}

void dlc_images_release(dlc_images *d) {
    if (!d || --d->refs > 0) return;
    free(d->pixels);
    free(d->labels);
    free(d->is_eval);
    free(d);
}

int64_t dlc_images_count(const dlc_images *d, dlc_split s) {
    return (unsigned)s < DLC_SPLIT_COUNT ? d->counts[s] : 0;
}
int dlc_images_rows(const dlc_images *d) { return d->rows; }
int dlc_images_cols(const dlc_images *d) { return d->cols; }
int dlc_images_classes(const dlc_images *d) { return d->classes; }
const uint8_t *dlc_images_pixels(const dlc_images *d, int64_t *count) {
    if (count) *count = d->count;
    return d->pixels;
}
const uint8_t *dlc_images_labels(const dlc_images *d, int64_t *count) {
    if (count) *count = d->count;
    return d->labels;
}
int dlc_images_is_eval(const dlc_images *d, int64_t i) {
    return i >= 0 && i < d->count && d->is_eval[i];
}

/* ---------------------------------------------------------------------------
 * loaders
 * --------------------------------------------------------------------------- */

struct dlc_image_loader {
    dlc_images *d;      /* owned reference */
    int64_t *idx;       /* [n] the shard's examples, in order */
    int64_t *order;     /* [n] this epoch's order (shuffle), valid for order_epoch */
    int64_t n, B, order_epoch;
    int shard, shards, shuffle;
    uint64_t key;       /* Philox key from (seed, shard) */
    int64_t epoch, pos;
    float lut[256];     /* pixel byte -> normalised value */
};

dlc_image_loader_params dlc_image_loader_default_params(void) {
    dlc_image_loader_params o;
    memset(&o, 0, sizeof o);
    o.split = DLC_SPLIT_ALL;
    o.batch = 64;
    o.shards = 1;
    o.shuffle = 1;
    return o;
}

dlc_image_loader *dlc_image_loader_new(dlc_images *d, const dlc_image_loader_params *o) {
    if ((unsigned)o->split >= DLC_SPLIT_COUNT) {
        dlc_error(DLC_ERR_ARG, "image loader: split = %d, expected train, eval or all", (int)o->split);
        return NULL;
    }
    if (o->batch < 1 || o->batch > (1 << 20)) {
        dlc_error(DLC_ERR_ARG, "image loader: batch = %lld, expected an integer in [1, 2^20]",
                  (long long)o->batch);
        return NULL;
    }
    if (o->shards < 1 || o->shard < 0 || o->shard >= o->shards) {
        dlc_error(DLC_ERR_ARG, "image loader: shard index %d of %d shards; expected shards >= 1 "
                  "and 0 <= shard < shards", o->shard, o->shards);
        return NULL;
    }
    int64_t total = d->counts[o->split];
    int64_t n = total > o->shard ? (total - o->shard + o->shards - 1) / o->shards : 0;
    const char *sname = dlc_split_name(o->split);
    if (n == 0 || (o->shuffle && n < o->batch)) {
        dlc_error(DLC_ERR_RANGE, "images: %s shard %d of %d has %lld examples (of %lld in the "
                  "split), %s; use %s", sname, o->shard + 1, o->shards, (long long)n,
                  (long long)total, n == 0 ? "none" : "fewer than one shuffled batch",
                  n == 0 ? (total == 0 ? "a split with data (eval_fraction > 0 for eval)"
                                       : "fewer learners")
                         : "a smaller batch or fewer learners");
        return NULL;
    }
    dlc_image_loader *l = calloc(1, sizeof *l);
    if (!l || !(l->idx = malloc((size_t)n * sizeof *l->idx)) ||
        !(l->order = malloc((size_t)n * sizeof *l->order))) {
        if (l) free(l->idx);
        free(l);
        dlc_error(DLC_ERR_NOMEM, "image loader: out of memory");
        return NULL;
    }
    int64_t p = 0, k = 0;
    for (int64_t i = 0; i < d->count; i++) {
        if (o->split != DLC_SPLIT_ALL && d->is_eval[i] != (o->split == DLC_SPLIT_EVAL)) continue;
        if (p++ % o->shards == o->shard) l->idx[k++] = i;
    }
    DLC_ASSERT(k == n);
    l->d = d;
    d->refs++;
    l->n = n;
    l->B = o->batch;
    l->shard = o->shard;
    l->shards = o->shards;
    l->shuffle = o->shuffle != 0;
    l->key = mix64(mix64(o->seed) + (uint64_t)o->shard);
    l->order_epoch = -1;
    for (int v = 0; v < 256; v++) l->lut[v] = ((float)v / 255.0f - d->mean) / d->std;
    return l;
}

void dlc_image_loader_free(dlc_image_loader *l) {
    if (!l) return;
    dlc_images_release(l->d);
    free(l->idx);
    free(l->order);
    free(l);
}

/* Fisher-Yates over the shard with Philox keyed by (seed, shard, epoch). */
static void shuffle_epoch(dlc_image_loader *l) {
    if (l->order_epoch == l->epoch) return;
    memcpy(l->order, l->idx, (size_t)l->n * sizeof *l->order);
    dlc_rng g;
    dlc_rng_init(&g, mix64(l->key ^ mix64((uint64_t)l->epoch)));
    uint32_t r[4];
    for (int64_t i = l->n - 1, k = 0; i > 0; i--, k++) {
        if ((k & 1) == 0) dlc_rng_u32(&g, r, 4);
        uint64_t v = (uint64_t)r[(k & 1) * 2] << 32 | r[(k & 1) * 2 + 1];
        int64_t j = (int64_t)(v % (uint64_t)(i + 1));
        int64_t t = l->order[i];
        l->order[i] = l->order[j];
        l->order[j] = t;
    }
    l->order_epoch = l->epoch;
}

dlc_status dlc_image_loader_next(dlc_image_loader *l, dlc_tensor **x, dlc_tensor **y) {
    *x = *y = NULL;
    int64_t epoch = l->epoch, pos = l->pos;
    if (l->shuffle ? pos + l->B > l->n : pos >= l->n) {
        if (epoch == INT64_MAX)
            return dlc_error(DLC_ERR_RANGE, "image loader: epoch counter overflow");
        epoch++;
        pos = 0;
    }
    int64_t b = l->n - pos < l->B ? l->n - pos : l->B;
    int64_t P = (int64_t)l->d->rows * l->d->cols;
    int64_t xs[2] = {b, P}, ys[1] = {b};
    *x = dlc_tensor_new(2, xs);
    *y = *x ? dlc_tensor_new(1, ys) : NULL;
    if (!*y) {
        dlc_tensor_release(*x);
        *x = NULL;
        return dlc_last_status();
    }
    l->epoch = epoch;
    l->pos = pos;
    const int64_t *ord = l->idx;
    if (l->shuffle) {
        shuffle_epoch(l);
        ord = l->order;
    }
    for (int64_t i = 0; i < b; i++) {
        int64_t e = ord[pos + i];
        const uint8_t *px = l->d->pixels + e * P;
        float *xr = (*x)->data + i * P;
        for (int64_t j = 0; j < P; j++) xr[j] = l->lut[px[j]];
        (*y)->data[i] = (float)l->d->labels[e];
    }
    l->pos = pos + b;
    return DLC_OK;
}

void dlc_image_loader_cursor(const dlc_image_loader *l, int64_t *epoch, int64_t *position) {
    if (epoch) *epoch = l->epoch;
    if (position) *position = l->pos;
}

dlc_status dlc_image_loader_set_cursor(dlc_image_loader *l, int64_t epoch, int64_t position) {
    if (epoch < 0 || position < 0 || position > l->n)
        return dlc_error(DLC_ERR_RANGE, "image loader: cursor epoch = %lld, position = %lld; "
                         "expected epoch >= 0 and position in [0, %lld] (the shard's examples)",
                         (long long)epoch, (long long)position, (long long)l->n);
    l->epoch = epoch;
    l->pos = position;
    return DLC_OK;
}

void dlc_image_loader_reset(dlc_image_loader *l) {
    l->epoch = 0;
    l->pos = 0;
}

int64_t dlc_image_loader_size(const dlc_image_loader *l) { return l->n; }

int64_t dlc_image_loader_batches_per_epoch(const dlc_image_loader *l) {
    return l->shuffle ? l->n / l->B : (l->n + l->B - 1) / l->B;
}
