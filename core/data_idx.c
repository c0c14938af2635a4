/* data_idx.c - image sets from IDX files (gzip or plain) or synthesized, and their
 * loaders.  See data.h for the contract.  Everything read from a file is checked
 * against a hard limit before anything is allocated for it, and payload buffers
 * grow with the bytes actually read, so a header claiming 10^8 pixels in a 1 KB
 * file costs at most one small buffer.  gzip is inflated here rather than by gzread,
 * which silently skips whatever follows the last member. */
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
#define IN_BUFFER ((size_t)1 << 17)  /* file bytes read at a time */

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
    /* Fashion-MNIST's: 10 classes of 28 x 28, its pixels' mean and std (the rest 0) */
    return (dlc_images_params){.classes = 10, .mean = 0.2860f, .std = 0.3530f, .max_elements = DEFAULT_MAX_ELEMENTS,
                               .rows = 28, .cols = 28};
}

/* ---------------------------------------------------------------------------
 * IDX reading
 * --------------------------------------------------------------------------- */

/* Why the last idx_read failed, for the caller's message. */
typedef enum { RD_IO, RD_NOMEM, RD_CORRUPT, RD_TRUNCATED, RD_GARBAGE } read_failure;

typedef struct idx_file {
    int fd;                  /* -1 when closed */
    const char *path, *what; /* "images" / "labels" */
    uint32_t dims[3];
    int gz;                  /* the file starts with the gzip magic: inflate it */
    int zinit;               /* z needs inflateEnd */
    int eof;                 /* read() has returned 0 */
    int done;                /* gzip: the last member ended at the end of the file */
    z_stream z;
    uint8_t *in;             /* [IN_BUFFER] bytes read from the file */
    uint8_t *next;           /* unconsumed bytes next[0 .. avail) inside `in` */
    size_t avail;
    uint64_t in_end;         /* file offset just past the bytes read so far */
    read_failure fail;
    int err;                 /* RD_IO: errno */
    const char *zmsg;        /* RD_CORRUPT: zlib's message (static) */
    uint64_t garbage;        /* RD_GARBAGE: bytes after the last member */
} idx_file;

/* The file offset of the next unconsumed byte. */
static uint64_t in_offset(const idx_file *x) { return x->in_end - x->avail; }

/* Moves the unconsumed bytes to the front of `in` and reads more after them. */
static int fill(idx_file *x) {
    if (x->avail) memmove(x->in, x->next, x->avail);
    x->next = x->in;
    ssize_t r;
    do r = read(x->fd, x->in + x->avail, IN_BUFFER - x->avail);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        x->fail = RD_IO;
        x->err = errno;
        return -1;
    }
    if (r == 0) x->eof = 1;
    x->avail += (size_t)r;
    x->in_end += (uint64_t)r;
    return 0;
}

/* At the end of a gzip member: the file ends there (done), or another member
 * follows (reset for it, as gzip -d reads `cat a.gz b.gz`), or anything else follows:
 * an error, where zlib's gzread would have skipped it silently. */
static int next_member(idx_file *x) {
    while (x->avail < 2 && !x->eof)
        if (fill(x)) return -1;
    if (x->avail == 0) {
        x->done = 1;
        return 0;
    }
    if (x->avail >= 2 && x->next[0] == 0x1f && x->next[1] == 0x8b) {
        if (inflateReset(&x->z) != Z_OK) {
            x->fail = RD_CORRUPT;
            x->zmsg = "inflateReset failed";
            return -1;
        }
        return 0;
    }
    struct stat st; /* count to the end of the file without reading it */
    x->garbage = fstat(x->fd, &st) == 0 && (uint64_t)st.st_size > in_offset(x)
                     ? (uint64_t)st.st_size - in_offset(x) : x->avail;
    x->fail = RD_GARBAGE;
    return -1;
}

static int read_gz(idx_file *x, uint8_t *p, size_t n, size_t *got) {
    while (*got < n && !x->done) {
        if (x->avail == 0 && !x->eof && fill(x)) return -1;
        size_t ask = n - *got > (1u << 30) ? (1u << 30) : n - *got;
        x->z.next_in = x->next;
        x->z.avail_in = (uInt)x->avail;
        x->z.next_out = p + *got;
        x->z.avail_out = (uInt)ask;
        int zr = inflate(&x->z, Z_NO_FLUSH);
        x->avail -= (size_t)(x->z.next_in - x->next);
        x->next = x->z.next_in;
        *got += ask - x->z.avail_out;
        if (zr == Z_STREAM_END) {
            if (next_member(x)) return -1;
        } else if (zr == Z_BUF_ERROR && x->avail == 0 && x->eof) {
            x->fail = RD_TRUNCATED; /* no progress, no input left, the member not ended */
            return -1;
        } else if (zr == Z_MEM_ERROR) {
            x->fail = RD_NOMEM;
            return -1;
        } else if (zr != Z_OK && !(zr == Z_BUF_ERROR && x->avail == 0)) {
            x->fail = RD_CORRUPT; /* Z_DATA_ERROR (also a bad CRC or length), Z_NEED_DICT */
            x->zmsg = x->z.msg;
            return -1;
        }
    }
    return 0;
}

/* Reads up to n bytes of data (decompressed when gzip) into p; *got says how many,
 * fewer than n only at the end of the data.  Returns 0, or -1 with x->fail set
 * (*got then counts what came before the failure). */
static int idx_read(idx_file *x, uint8_t *p, size_t n, size_t *got) {
    *got = 0;
    if (x->gz) return read_gz(x, p, n, got);
    while (*got < n) {
        if (x->avail == 0) {
            if (x->eof) break;
            if (fill(x)) return -1;
            continue;
        }
        size_t k = n - *got < x->avail ? n - *got : x->avail;
        memcpy(p + *got, x->next, k);
        x->next += k;
        x->avail -= k;
        *got += k;
    }
    return 0;
}

static dlc_status read_fail(const idx_file *x, const char *doing) {
    switch (x->fail) {
    case RD_IO:
        return dlc_error(DLC_ERR_IO, "%s: %s: %s", x->path, doing, strerror(x->err));
    case RD_NOMEM:
        return dlc_error(DLC_ERR_NOMEM, "%s: %s: out of memory", x->path, doing);
    case RD_TRUNCATED:
        return dlc_error(DLC_ERR_FORMAT, "%s: %s: the file ends at offset %llu inside a gzip "
                         "stream (truncated?)", x->path, doing, (unsigned long long)x->in_end);
    case RD_GARBAGE:
        return dlc_error(DLC_ERR_FORMAT, "%s: %llu bytes of garbage after the gzip stream at "
                         "offset %llu; expected the end of the file or another gzip member "
                         "(damaged file, or something appended to it?)", x->path,
                         (unsigned long long)x->garbage, (unsigned long long)in_offset(x));
    case RD_CORRUPT:
        break;
    }
    return dlc_error(DLC_ERR_FORMAT, "%s: %s: %s near offset %llu (corrupt gzip data)", x->path,
                     doing, x->zmsg ? x->zmsg : "invalid data", (unsigned long long)in_offset(x));
}

/* Opens path and reads and checks an IDX header: magic, then ndims big-endian u32
 * dims into x->dims.  x->fd must be -1; idx_close releases x whatever this returns. */
static dlc_status idx_open(idx_file *x, const char *path, const char *what, uint32_t magic) {
    int ndims = (int)(magic & 0xff);
    x->path = path;
    x->what = what;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; anything but a regular
     * file is refused before a byte is read */
    x->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (x->fd < 0)
        return dlc_error(DLC_ERR_IO, "%s: cannot open the %s file: %s", path, what, strerror(errno));
    struct stat st;
    if (fstat(x->fd, &st) != 0)
        return dlc_error(DLC_ERR_IO, "%s: cannot open the %s file: %s", path, what, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return dlc_error(DLC_ERR_ARG, "%s: the %s file is not a regular file (a FIFO, device or "
                         "directory?); expected an IDX file", path, what);
    int fl = fcntl(x->fd, F_GETFL);
    if (fl >= 0) fcntl(x->fd, F_SETFL, fl & ~O_NONBLOCK);
    if (!(x->in = malloc(IN_BUFFER)))
        return dlc_error(DLC_ERR_NOMEM, "%s: cannot open the %s file: out of memory", path, what);
    x->next = x->in;
    while (x->avail < 2 && !x->eof)
        if (fill(x)) return read_fail(x, "reading the IDX header");
    /* gzip or plain, as zlib's gzread decides: by the first two bytes */
    if (x->avail >= 2 && x->in[0] == 0x1f && x->in[1] == 0x8b) {
        x->gz = 1;
        int zr = inflateInit2(&x->z, 16 + MAX_WBITS); /* gzip only, no zlib or raw */
        if (zr != Z_OK)
            return dlc_error(zr == Z_MEM_ERROR ? DLC_ERR_NOMEM : DLC_ERR_FORMAT,
                             "%s: cannot open the %s file: %s", path, what,
                             zr == Z_MEM_ERROR ? "out of memory" : "zlib initialisation failed");
        x->zinit = 1;
    }
    uint8_t h[16];
    size_t want = 4 + 4 * (size_t)ndims, got;
    if (idx_read(x, h, want, &got)) return read_fail(x, "reading the IDX header");
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
 * follows: no more data, and in a gzip file nothing after the last member.  `desc`
 * describes the header's claim for the messages ("60000 x 28 x 28"). */
static dlc_status idx_payload(idx_file *x, uint64_t want, const char *desc, uint8_t **out) {
    *out = NULL;
    size_t cap = want < FIRST_BUFFER ? (size_t)want : FIRST_BUFFER;
    uint8_t *p = malloc(cap ? cap : 1);
    if (!p) return dlc_error(DLC_ERR_NOMEM, "%s: out of memory", x->path);
    size_t have = 0, got;
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
        if (idx_read(x, p + have, cap - have, &got)) {
            free(p);
            if (x->fail == RD_TRUNCATED)
                return dlc_error(DLC_ERR_FORMAT, "%s: %s header says %s = %llu bytes, the gzip "
                                 "stream ends after %llu (truncated?)", x->path, x->what, desc,
                                 (unsigned long long)want, (unsigned long long)(have + got));
            return read_fail(x, "reading the payload");
        }
        have += got;
        if (have < cap) { /* a short read is the end of the data */
            free(p);
            return dlc_error(DLC_ERR_FORMAT, "%s: %s header says %s = %llu bytes, file has "
                             "%llu after the header (truncated?)", x->path, x->what, desc,
                             (unsigned long long)want, (unsigned long long)have);
        }
    }
    /* reading on to the end also checks the last member's CRC and length, and what
     * follows it; decompressed trailing bytes are counted up to 2^32 */
    uint8_t extra[4096];
    uint64_t trailing = 0;
    int rc;
    do {
        rc = idx_read(x, extra, sizeof extra, &got);
        trailing += got;
    } while (rc == 0 && got == sizeof extra && trailing < ((uint64_t)1 << 32));
    if (rc && trailing == 0) {
        free(p);
        return read_fail(x, "reading past the payload");
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
    if (x->zinit) inflateEnd(&x->z);
    x->zinit = 0;
    free(x->in);
    x->in = NULL;
    if (x->fd >= 0) close(x->fd);
    x->fd = -1;
}

static dlc_status read_idx(dlc_images *d, const dlc_images_params *o) {
    idx_file im = {.fd = -1}, lb = {.fd = -1};
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

dlc_status dlc_image_loader_batch_at(dlc_image_loader *l, int64_t first, dlc_tensor **x,
                                     dlc_tensor **y) {
    *x = *y = NULL;
    if (first < 0 || first >= l->n)
        return dlc_error(DLC_ERR_RANGE, "image loader: batch_at example %lld out of range [0, %lld) "
                         "(the shard's examples)", (long long)first, (long long)l->n);
    int64_t b = l->n - first < l->B ? l->n - first : l->B;
    int64_t P = (int64_t)l->d->rows * l->d->cols;
    int64_t xs[2] = {b, P}, ys[1] = {b};
    *x = dlc_tensor_new(2, xs);
    *y = *x ? dlc_tensor_new(1, ys) : NULL;
    if (!*y) {
        dlc_tensor_release(*x);
        *x = NULL;
        return dlc_last_status();
    }
    for (int64_t i = 0; i < b; i++) {
        int64_t e = l->idx[first + i];
        const uint8_t *px = l->d->pixels + e * P;
        float *xr = (*x)->data + i * P;
        for (int64_t j = 0; j < P; j++) xr[j] = l->lut[px[j]];
        (*y)->data[i] = (float)l->d->labels[e];
    }
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
