/* data_text.c - splits (shared with data_idx.c), the byte-level text corpus and its
 * loaders.  See data.h for the contract. */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "diloco/data.h"

#define DEFAULT_CHUNK 4096
#define DEFAULT_EVAL_FRACTION 0.05
#define DEFAULT_MAX_BYTES ((int64_t)256 << 20)
#define MAX_DEPTH 32          /* directory nesting */
#define MAX_FILES 100000      /* files in a directory tree */
#define SNIFF_BYTES 4096      /* a NUL in here marks a binary file */
#define READ_BLOCK 65536

/* ---------------------------------------------------------------------------
 * splits
 * --------------------------------------------------------------------------- */

static const char *const split_names[] = {"train", "eval", "all"};
static_assert(sizeof split_names / sizeof split_names[0] == DLC_SPLIT_COUNT,
              "split name table out of sync with dlc_split");

const char *dlc_split_name(dlc_split s) {
    return (unsigned)s < DLC_SPLIT_COUNT ? split_names[s] : "?";
}

int dlc_split_parse(const char *name) {
    for (int i = 0; name && i < DLC_SPLIT_COUNT; i++)
        if (!strcmp(name, split_names[i])) return i;
    return -1;
}

/* splitmix64's finaliser: a bijective 64-bit mix. */
static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

dlc_status dlc_split_mark(uint8_t *is_eval, int64_t n, double eval_fraction,
                          uint64_t split_seed) {
    if (!(eval_fraction >= 0 && eval_fraction < 1))
        return dlc_error(DLC_ERR_ARG, "split: eval_fraction = %g, expected a number in [0, 1)",
                         eval_fraction);
    if (n < 0) return dlc_error(DLC_ERR_ARG, "split: %lld items", (long long)n);
    uint64_t key = mix64(split_seed);
    int64_t n_eval = 0, lo = 0, hi = 0;
    uint64_t hlo = UINT64_MAX, hhi = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = mix64((uint64_t)i ^ key);
        double u = (double)(h >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
        is_eval[i] = u < eval_fraction;
        n_eval += is_eval[i];
        if (h <= hlo) hlo = h, lo = i;
        if (h >= hhi) hhi = h, hi = i;
    }
    if (eval_fraction > 0 && n >= 2) {
        if (n_eval == 0) is_eval[lo] = 1;
        if (n_eval == n) is_eval[hi] = 0;
    }
    return DLC_OK;
}

/* ---------------------------------------------------------------------------
 * the corpus
 * --------------------------------------------------------------------------- */

struct dlc_text {
    int refs;
    uint8_t *bytes;        /* [n] cleaned corpus */
    int64_t n;
    int64_t chunk;         /* chunk size */
    int64_t nchunks;
    uint8_t *is_eval;      /* [nchunks] */
    int64_t size[DLC_SPLIT_COUNT], chunks[DLC_SPLIT_COUNT];
    int64_t files;
};

dlc_text_params dlc_text_default_params(void) {
    dlc_text_params o;
    memset(&o, 0, sizeof o);
    o.chunk = DEFAULT_CHUNK;
    o.eval_fraction = DEFAULT_EVAL_FRACTION;
    o.max_bytes = DEFAULT_MAX_BYTES;
    return o;
}

/* The growing output buffer plus the line-dropping state of the cleaner. */
typedef struct builder {
    uint8_t *p;
    int64_t n, cap, max;
    int64_t read;          /* raw bytes read, before cleaning: also bounded by max */
    int64_t line_start;    /* offset of the line being written */
    const char *drop;      /* NULL or the line to drop */
    size_t drop_len;
    const char *path;      /* for messages */
} builder;

static dlc_status reserve(builder *b, int64_t more) {
    if (b->n + more > b->max)
        return dlc_error(DLC_ERR_RANGE, "text: %s: the corpus exceeds max_bytes = %lld bytes; "
                         "raise max_bytes or read less", b->path, (long long)b->max);
    if (b->n + more <= b->cap) return DLC_OK;
    int64_t cap = b->cap ? b->cap : 65536;
    while (cap < b->n + more) cap *= 2;
    uint8_t *p = realloc(b->p, (size_t)cap);
    if (!p) return dlc_error(DLC_ERR_NOMEM, "text: out of memory growing the corpus to %lld bytes",
                             (long long)cap);
    b->p = p;
    b->cap = cap;
    return DLC_OK;
}

/* Appends src, cleaned: control bytes removed, drop lines removed at their '\n'. */
static dlc_status clean_append(builder *b, const uint8_t *src, int64_t len) {
    dlc_status s = reserve(b, len);
    if (s) return s;
    uint8_t *out = b->p;
    int64_t n = b->n;
    for (int64_t i = 0; i < len; i++) {
        uint8_t c = src[i];
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) continue;
        out[n++] = c;
        if (c != '\n') continue;
        if (b->drop && (size_t)(n - 1 - b->line_start) == b->drop_len &&
            !memcmp(out + b->line_start, b->drop, b->drop_len))
            n = b->line_start;
        b->line_start = n;
    }
    b->n = n;
    return DLC_OK;
}

/* End of a file: finish its last line so the next file starts on a new one. */
static dlc_status end_file(builder *b) {
    if (b->n > b->line_start) return clean_append(b, (const uint8_t *)"\n", 1);
    return DLC_OK;
}

/* Reads one file into b.  sniff: skip it (return DLC_OK, *used = 0) if its first
 * SNIFF_BYTES contain a NUL. */
static dlc_status read_file(builder *b, const char *path, int sniff, int *used) {
    *used = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return dlc_error(DLC_ERR_IO, "text: %s: %s", path, strerror(errno));
    const char *saved = b->path;
    b->path = path;
    dlc_status s = DLC_OK;
    uint8_t *blk = NULL;
    /* max bounds the bytes read too, not just the text kept: a huge file of NUL or
     * control bytes (a sparse file) is refused at once instead of read for hours */
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (int64_t)st.st_size > b->max - b->read) {
        s = dlc_error(DLC_ERR_RANGE, "text: %s: %lld bytes, more than max_bytes = %lld bytes of "
                      "input (%lld read before it); raise max_bytes or read less", path,
                      (long long)st.st_size, (long long)b->max, (long long)b->read);
        goto done;
    }
    if (!(blk = malloc(READ_BLOCK))) {
        s = dlc_error(DLC_ERR_NOMEM, "text: out of memory");
        goto done;
    }
    size_t got;
    for (int first = 1; (got = fread(blk, 1, READ_BLOCK, f)) > 0; first = 0) {
        if (first && sniff && memchr(blk, 0, got < SNIFF_BYTES ? got : SNIFF_BYTES)) goto done;
        b->read += (int64_t)got;
        if (b->read > b->max) { /* the file grew while being read */
            s = dlc_error(DLC_ERR_RANGE, "text: %s: more than max_bytes = %lld bytes of input; "
                          "raise max_bytes or read less", path, (long long)b->max);
            goto done;
        }
        if ((s = clean_append(b, blk, (int64_t)got))) goto done;
    }
    if (ferror(f)) {
        s = dlc_error(DLC_ERR_IO, "text: %s: read error: %s", path, strerror(errno));
        goto done;
    }
    *used = 1;
    s = end_file(b);
done:
    b->path = saved;
    free(blk);
    fclose(f);
    return s;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Reads the regular files under dir, depth first in sorted name order. */
static dlc_status read_dir(builder *b, const char *dir, int depth, int64_t *files) {
    if (depth > MAX_DEPTH)
        return dlc_error(DLC_ERR_RANGE, "text: %s: directories nested deeper than %d levels",
                         dir, MAX_DEPTH);
    DIR *d = opendir(dir);
    if (!d) return dlc_error(DLC_ERR_IO, "text: %s: %s", dir, strerror(errno));
    char **names = NULL, *path = NULL;
    size_t n = 0, cap = 0;
    dlc_status s = DLC_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue; /* ".", ".." and hidden files */
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            char **nn = realloc(names, nc * sizeof *nn);
            if (!nn) goto nomem;
            names = nn;
            cap = nc;
        }
        if (!(names[n] = strdup(e->d_name))) goto nomem;
        n++;
    }
    closedir(d);
    d = NULL;
    if (n > 1) qsort(names, n, sizeof *names, cmp_names); /* names is NULL when n == 0 */
    size_t dlen = strlen(dir);
    for (size_t i = 0; i < n && !s; i++) {
        free(path);
        if (!(path = malloc(dlen + strlen(names[i]) + 2))) goto nomem;
        sprintf(path, "%s%s%s", dir, dlen && dir[dlen - 1] == '/' ? "" : "/", names[i]);
        struct stat st;
        if (lstat(path, &st) != 0) {
            s = dlc_error(DLC_ERR_IO, "text: %s: %s", path, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            s = read_dir(b, path, depth + 1, files);
        } else if (S_ISREG(st.st_mode) && !ends_with(names[i], ".dat")) {
            if (*files >= MAX_FILES) {
                s = dlc_error(DLC_ERR_RANGE, "text: %s: more than %d files under the directory",
                              path, MAX_FILES);
                break;
            }
            int used;
            s = read_file(b, path, 1, &used);
            *files += used;
        }
    }
    goto done;
nomem:
    s = dlc_error(DLC_ERR_NOMEM, "text: out of memory listing %s", dir);
done:
    if (d) closedir(d);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(path);
    return s;
}

/* Learnable synthetic text: sentences of words from a fixed vocabulary, each word
 * followed by one of four successors chosen from the seed with skewed odds. */
static const char *const syn_words[32] = {
    "the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "tree", "big",
    "small", "red", "blue", "and", "then", "quick", "lazy", "fox", "jumps", "over",
    "bird", "sings", "in", "morning", "night", "sun", "moon", "sleeps", "eats", "fish",
    "home",
};

typedef struct draws {
    dlc_rng g;
    uint32_t buf[64];
    int left;
} draws;

static uint32_t draw(draws *d) {
    if (d->left == 0) {
        dlc_rng_u32(&d->g, d->buf, 64);
        d->left = 64;
    }
    return d->buf[--d->left];
}

static dlc_status synthesize(builder *b, int64_t want, uint64_t seed) {
    draws d = {.left = 0};
    dlc_rng_init(&d.g, mix64(seed ^ 0x5445585400000000ull));
    uint8_t succ[32][4];
    for (int w = 0; w < 32; w++)
        for (int k = 0; k < 4; k++) succ[w][k] = (uint8_t)(draw(&d) % 32);
    dlc_status s = reserve(b, want + 32);
    if (s) return s;
    int w = (int)(draw(&d) % 32), left = 0;
    while (b->n < want) {
        char word[16];
        size_t len = strlen(syn_words[w]);
        memcpy(word, syn_words[w], len + 1);
        if (left == 0) {
            left = 4 + (int)(draw(&d) % 9); /* sentence of 4..12 words */
            word[0] = (char)(word[0] - 'a' + 'A');
        }
        memcpy(b->p + b->n, word, len);
        b->n += (int64_t)len;
        if (--left == 0) {
            b->p[b->n++] = '.';
            b->p[b->n++] = draw(&d) % 10 < 3 ? '\n' : ' ';
        } else {
            b->p[b->n++] = ' ';
        }
        uint32_t r = draw(&d) % 20; /* successor odds 10 : 5 : 3 : 2 */
        w = succ[w][r < 10 ? 0 : r < 15 ? 1 : r < 18 ? 2 : 3];
    }
    b->n = want;
    return DLC_OK;
}

static dlc_status check_params(const dlc_text_params *o) {
    if (o->synthetic_bytes < 0)
        return dlc_error(DLC_ERR_ARG, "text: synthetic_bytes = %lld, expected >= 0",
                         (long long)o->synthetic_bytes);
    if (o->synthetic_bytes > 0 && o->path)
        return dlc_error(DLC_ERR_ARG, "text: both path (%s) and synthetic_bytes = %lld given; "
                         "choose one", o->path, (long long)o->synthetic_bytes);
    if (o->synthetic_bytes == 0 && !o->path)
        return dlc_error(DLC_ERR_ARG, "text: no path given (and synthetic_bytes = 0)");
    if (o->chunk < 1)
        return dlc_error(DLC_ERR_ARG, "text: chunk = %lld, expected an integer >= 1",
                         (long long)o->chunk);
    if (!(o->eval_fraction >= 0 && o->eval_fraction < 1))
        return dlc_error(DLC_ERR_ARG, "text: eval_fraction = %g, expected a number in [0, 1)",
                         o->eval_fraction);
    if (o->max_bytes < 1)
        return dlc_error(DLC_ERR_ARG, "text: max_bytes = %lld, expected >= 1",
                         (long long)o->max_bytes);
    if (o->synthetic_bytes > o->max_bytes)
        return dlc_error(DLC_ERR_RANGE, "text: synthetic_bytes = %lld exceeds max_bytes = %lld",
                         (long long)o->synthetic_bytes, (long long)o->max_bytes);
    if (o->drop_line && strchr(o->drop_line, '\n'))
        return dlc_error(DLC_ERR_ARG, "text: drop_line must be one line (it contains '\\n')");
    return DLC_OK;
}

dlc_text *dlc_text_open(const dlc_text_params *o) {
    if (check_params(o)) return NULL;
    builder b = {.max = o->max_bytes, .drop = o->drop_line,
                 .drop_len = o->drop_line ? strlen(o->drop_line) : 0,
                 .path = o->path ? o->path : "synthetic"};
    dlc_text *t = calloc(1, sizeof *t);
    if (!t) {
        dlc_error(DLC_ERR_NOMEM, "text: out of memory");
        return NULL;
    }
    t->refs = 1;
    if (o->synthetic_bytes > 0) {
        if (synthesize(&b, o->synthetic_bytes, o->seed)) goto fail;
    } else {
        struct stat st;
        if (stat(o->path, &st) != 0) {
            dlc_error(DLC_ERR_IO, "text: %s: %s", o->path, strerror(errno));
            goto fail;
        }
        if (S_ISDIR(st.st_mode)) {
            if (read_dir(&b, o->path, 0, &t->files)) goto fail;
        } else if (!S_ISREG(st.st_mode)) { /* a FIFO or /dev/zero could never end */
            dlc_error(DLC_ERR_ARG, "text: %s: not a regular file or a directory", o->path);
            goto fail;
        } else {
            int used;
            if (read_file(&b, o->path, 0, &used)) goto fail;
            t->files = 1;
        }
        if (b.n == 0) {
            dlc_error(DLC_ERR_FORMAT, "text: %s: no text (%lld files read; empty, binary, or only "
                      "dropped lines)", o->path, (long long)t->files);
            goto fail;
        }
    }
    t->bytes = b.p;
    t->n = b.n;
    t->chunk = o->chunk;
    t->nchunks = (t->n + t->chunk - 1) / t->chunk;
    if (!(t->is_eval = malloc((size_t)t->nchunks))) {
        dlc_error(DLC_ERR_NOMEM, "text: out of memory");
        goto fail_t;
    }
    if (dlc_split_mark(t->is_eval, t->nchunks, o->eval_fraction, o->split_seed)) goto fail_t;
    for (int64_t i = 0; i < t->nchunks; i++) {
        int64_t len = i + 1 < t->nchunks ? t->chunk : t->n - i * t->chunk;
        dlc_split s = t->is_eval[i] ? DLC_SPLIT_EVAL : DLC_SPLIT_TRAIN;
        t->size[s] += len;
        t->chunks[s]++;
    }
    t->size[DLC_SPLIT_ALL] = t->n;
    t->chunks[DLC_SPLIT_ALL] = t->nchunks;
    return t;
fail:
    free(b.p);
fail_t:
    free(t->is_eval);
    free(t->bytes);
    free(t);
    return NULL;
}

static dlc_text *text_retain(dlc_text *t) {
    t->refs++;
    return t;
}

void dlc_text_release(dlc_text *t) {
    if (!t || --t->refs > 0) return;
    free(t->bytes);
    free(t->is_eval);
    free(t);
}

int64_t dlc_text_size(const dlc_text *t, dlc_split s) {
    return (unsigned)s < DLC_SPLIT_COUNT ? t->size[s] : 0;
}
int64_t dlc_text_chunks(const dlc_text *t, dlc_split s) {
    return (unsigned)s < DLC_SPLIT_COUNT ? t->chunks[s] : 0;
}
int64_t dlc_text_chunk_size(const dlc_text *t) { return t->chunk; }
int dlc_text_chunk_is_eval(const dlc_text *t, int64_t i) {
    return i >= 0 && i < t->nchunks && t->is_eval[i];
}
const uint8_t *dlc_text_bytes(const dlc_text *t, int64_t *n) {
    if (n) *n = t->n;
    return t->bytes;
}
int64_t dlc_text_files(const dlc_text *t) { return t->files; }

/* ---------------------------------------------------------------------------
 * loaders
 * --------------------------------------------------------------------------- */

struct dlc_text_loader {
    dlc_text *t;       /* owned reference */
    uint8_t *buf;      /* [n] the shard's chunks, concatenated */
    int64_t n, B, T;
    int shard, shards, sequential;
    dlc_split split;
    uint64_t key;      /* Philox key from (seed, shard) */
    int64_t cursor;    /* batches drawn */
    int64_t windows;   /* sequential: windows per pass */
};

dlc_text_loader_params dlc_text_loader_default_params(void) {
    dlc_text_loader_params o;
    memset(&o, 0, sizeof o);
    o.split = DLC_SPLIT_TRAIN;
    o.batch = 16;
    o.ctx = 64;
    o.shards = 1;
    return o;
}

dlc_text_loader *dlc_text_loader_new(dlc_text *t, const dlc_text_loader_params *o) {
    if ((unsigned)o->split >= DLC_SPLIT_COUNT) {
        dlc_error(DLC_ERR_ARG, "text loader: split = %d, expected train, eval or all", (int)o->split);
        return NULL;
    }
    if (o->batch < 1 || o->batch > (1 << 20) || o->ctx < 1 || o->ctx > (1 << 24)) {
        dlc_error(DLC_ERR_ARG, "text loader: batch = %lld, ctx = %lld; expected batch in "
                  "[1, 2^20] and ctx in [1, 2^24]", (long long)o->batch, (long long)o->ctx);
        return NULL;
    }
    if (o->shards < 1 || o->shard < 0 || o->shard >= o->shards) {
        dlc_error(DLC_ERR_ARG, "text loader: shard index %d of %d shards; expected shards >= 1 "
                  "and 0 <= shard < shards", o->shard, o->shards);
        return NULL;
    }
    const char *sname = dlc_split_name(o->split);
    if (t->size[o->split] == 0) {
        dlc_error(DLC_ERR_RANGE, "text: the %s split is empty (%lld chunks of %lld bytes, %lld in "
                  "eval); set eval_fraction > 0 or provide more data", sname,
                  (long long)t->nchunks, (long long)t->chunk, (long long)t->chunks[DLC_SPLIT_EVAL]);
        return NULL;
    }
    /* the shard's size first, so a too-small shard allocates nothing */
    int64_t n = 0;
    for (int64_t i = o->shard; i < t->nchunks; i += o->shards) {
        if (o->split != DLC_SPLIT_ALL && t->is_eval[i] != (o->split == DLC_SPLIT_EVAL)) continue;
        n += i + 1 < t->nchunks ? t->chunk : t->n - i * t->chunk;
    }
    if (n < o->ctx + 1) {
        dlc_error(DLC_ERR_RANGE, "text: %s shard %d of %d has %lld bytes, fewer than ctx + 1 = %lld; "
                  "use %s a smaller ctx", sname, o->shard + 1, o->shards, (long long)n,
                  (long long)(o->ctx + 1),
                  o->shards > 1 ? "fewer learners or" : "more data or");
        return NULL;
    }
    dlc_text_loader *l = calloc(1, sizeof *l);
    if (!l || !(l->buf = malloc((size_t)n))) {
        free(l);
        dlc_error(DLC_ERR_NOMEM, "text loader: out of memory for a %lld-byte shard", (long long)n);
        return NULL;
    }
    for (int64_t i = o->shard; i < t->nchunks; i += o->shards) {
        if (o->split != DLC_SPLIT_ALL && t->is_eval[i] != (o->split == DLC_SPLIT_EVAL)) continue;
        int64_t len = i + 1 < t->nchunks ? t->chunk : t->n - i * t->chunk;
        memcpy(l->buf + l->n, t->bytes + i * t->chunk, (size_t)len);
        l->n += len;
    }
    l->t = text_retain(t);
    l->B = o->batch;
    l->T = o->ctx;
    l->shard = o->shard;
    l->shards = o->shards;
    l->split = o->split;
    l->sequential = o->sequential != 0;
    l->key = mix64(mix64(o->seed) + (uint64_t)o->shard);
    l->windows = (l->n - 1) / l->T;
    return l;
}

void dlc_text_loader_free(dlc_text_loader *l) {
    if (!l) return;
    dlc_text_release(l->t);
    free(l->buf);
    free(l);
}

/* Philox blocks per random batch: one block (4 x u32) gives two 64-bit starts. */
static int64_t blocks_per_batch(const dlc_text_loader *l) { return (l->B + 1) / 2; }

dlc_status dlc_text_loader_next(dlc_text_loader *l, dlc_tensor **x, dlc_tensor **y) {
    int64_t shape[2] = {l->B, l->T};
    *x = dlc_tensor_new(2, shape);
    *y = *x ? dlc_tensor_new(2, shape) : NULL;
    if (!*y) {
        dlc_tensor_release(*x);
        *x = NULL;
        return dlc_last_status();
    }
    const int64_t T = l->T;
    float *xd = (*x)->data, *yd = (*y)->data;
    dlc_rng g;
    uint32_t r[4];
    dlc_rng_init(&g, l->key);
    g.counter = (uint64_t)l->cursor * (uint64_t)blocks_per_batch(l);
    for (int64_t b = 0; b < l->B; b++) {
        int64_t start;
        if (l->sequential) {
            start = ((l->cursor * l->B + b) % l->windows) * T;
        } else {
            if ((b & 1) == 0) dlc_rng_u32(&g, r, 4);
            uint64_t v = (uint64_t)r[(b & 1) * 2] << 32 | r[(b & 1) * 2 + 1];
            start = (int64_t)(v % (uint64_t)(l->n - T)); /* n - T starts fit T + 1 bytes */
        }
        const uint8_t *w = l->buf + start;
        float *xr = xd + b * T, *yr = yd + b * T;
        for (int64_t j = 0; j < T; j++) {
            xr[j] = (float)w[j];
            yr[j] = (float)w[j + 1];
        }
    }
    l->cursor++;
    return DLC_OK;
}

dlc_status dlc_text_loader_batch_at(dlc_text_loader *l, int64_t first, dlc_tensor **x,
                                    dlc_tensor **y) {
    *x = *y = NULL;
    if (first < 0 || first >= l->windows)
        return dlc_error(DLC_ERR_RANGE, "text loader: batch_at window %lld out of range [0, %lld) "
                         "(the %s shard's windows of ctx + 1 = %lld bytes)", (long long)first,
                         (long long)l->windows, dlc_split_name(l->split), (long long)(l->T + 1));
    const int64_t T = l->T;
    int64_t b = l->windows - first < l->B ? l->windows - first : l->B;
    int64_t shape[2] = {b, T};
    *x = dlc_tensor_new(2, shape);
    *y = *x ? dlc_tensor_new(2, shape) : NULL;
    if (!*y) {
        dlc_tensor_release(*x);
        *x = NULL;
        return dlc_last_status();
    }
    float *xd = (*x)->data, *yd = (*y)->data;
    for (int64_t r = 0; r < b; r++) {
        const uint8_t *w = l->buf + (first + r) * T;
        float *xr = xd + r * T, *yr = yd + r * T;
        for (int64_t j = 0; j < T; j++) {
            xr[j] = (float)w[j];
            yr[j] = (float)w[j + 1];
        }
    }
    return DLC_OK;
}

int64_t dlc_text_loader_cursor(const dlc_text_loader *l) { return l->cursor; }

dlc_status dlc_text_loader_set_cursor(dlc_text_loader *l, int64_t cursor) {
    int64_t per = l->B > blocks_per_batch(l) ? l->B : blocks_per_batch(l);
    if (cursor < 0 || cursor > INT64_MAX / per - 1)
        return dlc_error(DLC_ERR_RANGE, "text loader: cursor = %lld, expected an integer in "
                         "[0, %lld]", (long long)cursor, (long long)(INT64_MAX / per - 1));
    l->cursor = cursor;
    return DLC_OK;
}

void dlc_text_loader_reset(dlc_text_loader *l) { l->cursor = 0; }
int64_t dlc_text_loader_size(const dlc_text_loader *l) { return l->n; }
int64_t dlc_text_loader_windows(const dlc_text_loader *l) { return l->windows; }

int64_t dlc_text_loader_batches_per_epoch(const dlc_text_loader *l) {
    if (l->sequential) return (l->windows + l->B - 1) / l->B;
    int64_t b = l->n / (l->B * l->T);
    return b > 0 ? b : 1;
}
