/*
 * data.h - training data for the learners: a byte-level text corpus and IDX image
 * sets (Fashion-MNIST), each with a deterministic train/eval split, disjoint shards
 * (one per learner) and loaders whose position ("cursor") can be saved and restored
 * so a resumed learner sees exactly the batches it would have seen.
 *
 *     dlc_text_params o = dlc_text_default_params();
 *     o.path = "/usr/share/games/fortunes";
 *     o.drop_line = "%";                       // fortune separators
 *     dlc_text *txt = dlc_text_open(&o);       // NULL + dlc_last_error() on failure
 *
 *     dlc_text_loader_params lo = dlc_text_loader_default_params();
 *     lo.batch = 16; lo.ctx = 64; lo.shard = m; lo.shards = M; lo.seed = 1;
 *     dlc_text_loader *ld = dlc_text_loader_new(txt, &lo);
 *     dlc_text_release(txt);                   // fine: the loader holds a reference
 *     dlc_tensor *x, *y;
 *     dlc_text_loader_next(ld, &x, &y);        // x, y [16,64] byte ids; y = x shifted by 1
 *     int64_t c = dlc_text_loader_cursor(ld);  // save c with the checkpoint ...
 *     dlc_text_loader_set_cursor(ld, c);       // ... and the same batches follow again
 *     dlc_tensor_release(x); dlc_tensor_release(y);
 *     dlc_text_loader_free(ld);
 *
 * Ownership.  Datasets are refcounted: *_open returns one reference, *_release
 * drops one, and every loader holds one for as long as it lives, so a dataset may
 * be released before its loaders.  Loaders are plain owned objects (*_new / *_free; free
 * accepts NULL).  Tensors returned by the loaders are new references the caller
 * releases.  Option structs and the strings in them are borrowed for the duration
 * of the call only.  Nothing here is thread-safe: use one loader per thread.
 *
 * Splits.  The corpus is cut into items (text: chunks of `chunk` bytes; images:
 * examples); item i goes to eval when a hash of (i, split_seed) falls below
 * eval_fraction (dlc_split_mark).  Same data + same options = same split on every
 * machine.
 *
 * Sharding.  Shard s of S (0-based here, 1-based in Lua) owns the train chunks with
 * chunk index i % S == s (text) or the examples at position p % S == s of the chosen
 * split (images).  Shards are disjoint and together cover the split exactly once.
 * Error messages count shards from 1 ("shard 3 of 4" is index 2).
 *
 * Randomness.  Loaders draw from Philox (dlc_rng) keyed by (seed, shard) and, for
 * images, the epoch.  The generator counter is derived from the cursor, so a cursor
 * alone determines every following batch.
 *
 * Index values (byte ids, labels) are stored as 0-based integers in f32 tensors.
 */
#ifndef DILOCO_DATA_H
#define DILOCO_DATA_H

#include <stdint.h>
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * splits
 * --------------------------------------------------------------------------- */

typedef enum dlc_split {
    DLC_SPLIT_TRAIN, /* items not selected for eval */
    DLC_SPLIT_EVAL,  /* items selected for eval */
    DLC_SPLIT_ALL,   /* every item (the default of image loaders) */
    DLC_SPLIT_COUNT
} dlc_split;

/* "train", "eval", "all"; "?" for an invalid value. */
DLC_API const char *dlc_split_name(dlc_split s);
/* The split named `name`, or -1 (no error recorded) if there is none. */
DLC_API int dlc_split_parse(const char *name);

/* Marks which of n items go to eval: is_eval[i] = 1 when the hash of (i, split_seed)
 * is below eval_fraction, else 0.  When eval_fraction > 0 and n >= 2 at least one
 * item lands on each side (the item with the lowest hash is forced to eval, the one
 * with the highest to train).  eval_fraction must be in [0, 1).  is_eval (n bytes)
 * is the caller's. */
DLC_API dlc_status dlc_split_mark(uint8_t *is_eval, int64_t n, double eval_fraction,
                                  uint64_t split_seed);

/* ---------------------------------------------------------------------------
 * byte-level text
 * --------------------------------------------------------------------------- */

typedef struct dlc_text dlc_text;               /* opaque, refcounted */
typedef struct dlc_text_loader dlc_text_loader; /* opaque, owned */

typedef struct dlc_text_params {
    /* A file, or a directory read recursively: regular files (symlinks are
     * skipped: fortune's *.u8 are links to the same files) in sorted name order,
     * skipping hidden names (".*"), names ending in ".dat" (strfile indexes) and
     * files with a NUL byte in their first 4 KiB (binary).  A file given directly
     * is always read (it must be a regular file, not a FIFO or device).  Each file
     * is followed by '\n' if it does not end in one.  NULL when synthetic_bytes > 0. */
    const char *path;
    int64_t chunk;          /* split granularity in bytes, >= 1 (default 4096) */
    double eval_fraction;   /* in [0, 1) (default 0.05) */
    uint64_t split_seed;    /* (default 0) */
    /* Lines consisting of exactly this string (after control bytes are removed)
     * are dropped, newline included: "%" drops fortune separators.  NULL = keep
     * every line.  Must not contain '\n'. */
    const char *drop_line;
    int64_t max_bytes;      /* refuse corpora larger than this (default 256 MiB) */
    /* > 0: generate this many bytes of learnable text (words of a small vocabulary
     * chained by a Markov model, punctuation, line breaks) from `seed` instead of
     * reading files.  Deterministic; already clean (drop_line does not apply). */
    int64_t synthetic_bytes;
    uint64_t seed;          /* for synthetic text (default 0) */
} dlc_text_params;

DLC_API dlc_text_params dlc_text_default_params(void);

/* Reads (or generates), cleans and splits a corpus.  Cleaning removes bytes < 0x20
 * except '\n' and '\t', and 0x7f (so "\r\n" becomes "\n"), then drops drop_line
 * lines.  Returns one reference (dlc_text_release), or NULL: a missing path (the path
 * and strerror), an empty corpus, a corpus over max_bytes, bad options. */
DLC_API dlc_text *dlc_text_open(const dlc_text_params *opts);
/* Drops one reference; the data goes when the last loader is freed too.  NULL ok. */
DLC_API void dlc_text_release(dlc_text *t);

/* Bytes in a split (DLC_SPLIT_ALL: the whole cleaned corpus). */
DLC_API int64_t dlc_text_size(const dlc_text *t, dlc_split split);
/* Chunks in a split. */
DLC_API int64_t dlc_text_chunks(const dlc_text *t, dlc_split split);
/* Chunk size in bytes (the last chunk may be shorter). */
DLC_API int64_t dlc_text_chunk_size(const dlc_text *t);
/* 1 if chunk i (0-based, < dlc_text_chunks(t, DLC_SPLIT_ALL)) is in eval. */
DLC_API int dlc_text_chunk_is_eval(const dlc_text *t, int64_t i);
/* The whole cleaned corpus (borrowed, valid while t is); *n gets its length. */
DLC_API const uint8_t *dlc_text_bytes(const dlc_text *t, int64_t *n);
/* Number of files read (0 for synthetic text). */
DLC_API int64_t dlc_text_files(const dlc_text *t);

typedef struct dlc_text_loader_params {
    dlc_split split;  /* (default TRAIN) */
    int64_t batch;    /* B >= 1 (default 16) */
    int64_t ctx;      /* T >= 1 (default 64) */
    int shard;        /* 0-based index < shards (default 0) */
    int shards;       /* >= 1 (default 1) */
    uint64_t seed;    /* window sampling (default 0) */
    /* 0: B windows of T+1 bytes uniformly at random from the shard's bytes.
     * 1: non-overlapping windows in order (window k starts at k*T), wrapping
     *    around; for evaluation.  (default 0) */
    int sequential;
} dlc_text_loader_params;

DLC_API dlc_text_loader_params dlc_text_loader_default_params(void);

/* A loader over the chunks of `split` that belong to shard `shard`, concatenated
 * in chunk order (a private copy: next() does no I/O).  t is borrowed; the loader
 * takes its own reference.  Fails when the shard has fewer than ctx + 1 bytes
 * ("text: shard 3 of 4 has 50 bytes, fewer than ctx + 1 = 65; ..."). */
DLC_API dlc_text_loader *dlc_text_loader_new(dlc_text *t, const dlc_text_loader_params *opts);
DLC_API void dlc_text_loader_free(dlc_text_loader *l);

/* Next batch: *x and *y get new tensors [B, T] with x = window[0..T) and
 * y = window[1..T] (byte values 0..255 as f32).  Advances the cursor by one.  On
 * failure (out of memory) *x = *y = NULL and the cursor does not move. */
DLC_API dlc_status dlc_text_loader_next(dlc_text_loader *l, dlc_tensor **x, dlc_tensor **y);
/* Batches drawn so far (since creation, reset or set_cursor). */
DLC_API int64_t dlc_text_loader_cursor(const dlc_text_loader *l);
/* Restores a cursor (>= 0): the following batches are exactly those that followed
 * when the cursor had this value. */
DLC_API dlc_status dlc_text_loader_set_cursor(dlc_text_loader *l, int64_t cursor);
/* Same as set_cursor(l, 0). */
DLC_API void dlc_text_loader_reset(dlc_text_loader *l);
/* Bytes in this loader's shard. */
DLC_API int64_t dlc_text_loader_size(const dlc_text_loader *l);
/* Non-overlapping windows of T + 1 bytes in the shard: (size - 1) / T; window k
 * starts at byte k * T (the windows of a sequential pass). */
DLC_API int64_t dlc_text_loader_windows(const dlc_text_loader *l);
/* The batch of windows first, first + 1, ..., first + b - 1 in order, b = min(B,
 * windows - first): *x, *y new tensors [b, T] as from next().  Random access for
 * evaluation: the same for a random or sequential loader, never shuffled, never
 * wrapped; the cursor does not move.  first outside [0, windows) is DLC_ERR_RANGE
 * naming it and the range; on failure *x = *y = NULL. */
DLC_API dlc_status dlc_text_loader_batch_at(dlc_text_loader *l, int64_t first, dlc_tensor **x,
                                            dlc_tensor **y);
/* Sequential: batches for one pass over the shard, ceil(windows / B) with
 * windows = (size - 1) / T.  Random: size / (B * T), at least 1 (the batches whose
 * tokens add up to the shard once). */
DLC_API int64_t dlc_text_loader_batches_per_epoch(const dlc_text_loader *l);

/* ---------------------------------------------------------------------------
 * images (IDX files, e.g. MNIST / Fashion-MNIST)
 * --------------------------------------------------------------------------- */

typedef struct dlc_images dlc_images;               /* opaque, refcounted */
typedef struct dlc_image_loader dlc_image_loader;   /* opaque, owned */

typedef struct dlc_images_params {
    /* IDX files, gzip-compressed or plain: images magic 0x00000803 (u8, 3 dims:
     * count x rows x cols), labels magic 0x00000801 (u8, 1 dim: count).  Both NULL
     * when synthetic > 0. */
    const char *images, *labels;
    int classes;            /* labels must be < classes, in [2, 256] (default 10) */
    /* Loaders yield (pixel / 255 - mean) / std.  Defaults: Fashion-MNIST's training
     * set statistics, 0.2860 and 0.3530.  std > 0. */
    float mean, std;
    double eval_fraction;   /* examples held out as DLC_SPLIT_EVAL, [0, 1) (default 0) */
    uint64_t split_seed;    /* (default 0) */
    int64_t max_elements;   /* refuse more pixels than this (default 1e8) */
    /* > 0: generate this many examples instead of reading files: each class has a
     * fixed pattern of blobs (from `seed`), each example is its class pattern with
     * random contrast and noise; labels uniform over the classes.  Deterministic
     * and learnable by a linear model. */
    int64_t synthetic;
    int rows, cols;         /* synthetic only, [1, 1024] (default 28 x 28) */
    uint64_t seed;          /* synthetic only (default 0) */
} dlc_images_params;

DLC_API dlc_images_params dlc_images_default_params(void);

/* Reads and validates (or generates) an image set.  Every check happens before
 * the corresponding allocation, and buffers grow with the data actually read, so a
 * hostile header cannot make us allocate.  Errors name the path, what was found and
 * what was expected: wrong magic, dims of 0 or over the limits, count mismatch
 * between the files, truncated data, trailing bytes, a label >= classes, gzip
 * corruption, a missing file. */
DLC_API dlc_images *dlc_images_open(const dlc_images_params *opts);
DLC_API void dlc_images_release(dlc_images *d); /* drops one reference; NULL ok */

DLC_API int64_t dlc_images_count(const dlc_images *d, dlc_split split);
DLC_API int dlc_images_rows(const dlc_images *d);
DLC_API int dlc_images_cols(const dlc_images *d);
DLC_API int dlc_images_classes(const dlc_images *d);
/* Raw data, borrowed: pixels [count, rows * cols] u8 and labels [count] u8, in
 * file order, all examples (*count gets the number). */
DLC_API const uint8_t *dlc_images_pixels(const dlc_images *d, int64_t *count);
DLC_API const uint8_t *dlc_images_labels(const dlc_images *d, int64_t *count);
/* 1 if example i is in the eval split. */
DLC_API int dlc_images_is_eval(const dlc_images *d, int64_t i);

typedef struct dlc_image_loader_params {
    dlc_split split;  /* (default ALL) */
    int64_t batch;    /* >= 1 (default 64) */
    int shard;        /* 0-based, < shards (default 0) */
    int shards;       /* >= 1 (default 1) */
    uint64_t seed;    /* (default 0) */
    /* 1: a new permutation of the shard each epoch (Philox keyed by seed, shard,
     *    epoch), full batches only (the n % B examples left over are skipped that
     *    epoch; they differ each epoch).  Needs n >= B.
     * 0: the shard in order; the last batch of an epoch may be short, so every
     *    example is seen exactly once per epoch.  (default 1) */
    int shuffle;
} dlc_image_loader_params;

DLC_API dlc_image_loader_params dlc_image_loader_default_params(void);

/* A loader over shard `shard` of `split`.  d is borrowed; the loader takes its own
 * reference.  Fails on an empty shard or (shuffle) a shard smaller than a batch. */
DLC_API dlc_image_loader *dlc_image_loader_new(dlc_images *d, const dlc_image_loader_params *opts);
DLC_API void dlc_image_loader_free(dlc_image_loader *l);

/* Next batch: *x [b, rows * cols] normalised pixels and *y [b] labels (0-based),
 * new references; b = B except for the short last batch of a non-shuffled epoch.
 * Moves to the next epoch when this one is used up. */
DLC_API dlc_status dlc_image_loader_next(dlc_image_loader *l, dlc_tensor **x, dlc_tensor **y);
/* Cursor: the epoch and the position in it (examples of the epoch consumed). */
DLC_API void dlc_image_loader_cursor(const dlc_image_loader *l, int64_t *epoch, int64_t *position);
/* Restores a cursor: epoch >= 0, 0 <= position <= examples in the shard. */
DLC_API dlc_status dlc_image_loader_set_cursor(dlc_image_loader *l, int64_t epoch, int64_t position);
DLC_API void dlc_image_loader_reset(dlc_image_loader *l); /* epoch 0, position 0 */
/* Examples in this loader's shard. */
DLC_API int64_t dlc_image_loader_size(const dlc_image_loader *l);
/* The batch of the shard's examples first, ..., first + b - 1 in shard order (the
 * order of a non-shuffled epoch, whatever `shuffle` says), b = min(B, size - first):
 * *x [b, rows * cols], *y [b] as from next().  The cursor does not move.  first
 * outside [0, size) is DLC_ERR_RANGE naming it and the range; on failure
 * *x = *y = NULL. */
DLC_API dlc_status dlc_image_loader_batch_at(dlc_image_loader *l, int64_t first, dlc_tensor **x,
                                             dlc_tensor **y);
/* shuffle: floor(n / B); otherwise ceil(n / B). */
DLC_API int64_t dlc_image_loader_batches_per_epoch(const dlc_image_loader *l);

#ifdef __cplusplus
}
#endif
#endif
