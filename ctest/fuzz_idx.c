/*
 * fuzz_idx.c - libFuzzer target for the IDX image reader and its loaders
 * (core/data_idx.c).
 *
 * Input layout:
 *   byte 0      length of the labels file, taken from the end of the rest
 *   byte 1      flags: bit 0 gzip the images file (zlib), bit 1 gzip the labels
 *               file, bit 2 shuffled loader, bit 3 two shards, bit 4 eval_fraction
 *               0.25, bit 5 load the eval split (else train; ALL without bit 4),
 *               bit 6 batch 3 (else 1), bit 7 the large max_elements
 *   rest        images file bytes, then labels file bytes
 * Raw inputs that are themselves gzip streams go through the reader's inflate loop
 * (several members, trailing bytes), so corrupt and truncated gzip is covered too; the flag bits add valid
 * gzip around whatever the fuzzer built.  max_elements is small (4096 pixels) so a
 * header that asks for more must be refused before anything is allocated for it; the
 * large limit (2^21) is just past the reader's first 1 MiB buffer, so a header that
 * lies within it exercises the buffer growth (gzip makes such payloads cheap) and
 * the cost of believing it stays one buffer plus what was really read.  On success
 * (and within the small limit) a loader per shard draws a few batches, across an
 * epoch boundary and after a cursor restore.  Errors are normal outcomes.  Built
 * by -DDLC_FUZZ=ON, run by scripts/fuzz.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "diloco/diloco.h"

#define MAX_ELEMENTS 4096
#define MAX_ELEMENTS_LARGE (1 << 21)

static char images_path[64], labels_path[64];

static void cleanup(void) {
    unlink(images_path);
    unlink(labels_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(images_path, sizeof images_path, "/tmp/dlc_fuzz_idx.%ld.images", (long)getpid());
    snprintf(labels_path, sizeof labels_path, "/tmp/dlc_fuzz_idx.%ld.labels", (long)getpid());
    atexit(cleanup);
    return 0;
}

static void write_file(const char *path, const uint8_t *p, size_t n, int gzip) {
    int ok;
    if (gzip) {
        gzFile f = gzopen(path, "wb1");
        ok = f && (n == 0 || gzwrite(f, p, (unsigned)n) == (int)n);
        ok = f && gzclose(f) == Z_OK && ok;
    } else {
        FILE *f = fopen(path, "wb");
        ok = f && fwrite(p, 1, n, f) == n;
        ok = f && fclose(f) == 0 && ok;
    }
    if (!ok) abort(); /* the harness itself is broken */
}

/* Draws a batch and checks what the loader promises about it. */
static void draw(dlc_image_loader *l, const dlc_images *d, int64_t B, int shuffle) {
    dlc_tensor *x, *y;
    if (dlc_image_loader_next(l, &x, &y) != DLC_OK) {
        if (x || y) abort();
        return;
    }
    int64_t b = x->shape[0], P = (int64_t)dlc_images_rows(d) * dlc_images_cols(d);
    if (x->ndim != 2 || x->shape[1] != P || y->ndim != 1 || y->shape[0] != b || b < 1 || b > B ||
        (shuffle && b != B))
        abort();
    for (int64_t i = 0; i < b; i++)
        if (!(y->data[i] >= 0 && y->data[i] < dlc_images_classes(d))) abort();
    dlc_tensor_release(x);
    dlc_tensor_release(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t rest = size - 2, nl = data[0] < rest ? data[0] : rest;
    uint8_t flags = data[1];
    write_file(images_path, data + 2, rest - nl, flags & 1);
    write_file(labels_path, data + 2 + rest - nl, nl, flags & 2);

    dlc_images_params o = dlc_images_default_params();
    o.images = images_path;
    o.labels = labels_path;
    o.max_elements = flags & 128 ? MAX_ELEMENTS_LARGE : MAX_ELEMENTS;
    o.eval_fraction = flags & 16 ? 0.25 : 0;
    dlc_images *d = dlc_images_open(&o);
    if (!d) return 0;

    int64_t count;
    if (!dlc_images_pixels(d, &count) || !dlc_images_labels(d, NULL) || count < 1 ||
        count * dlc_images_rows(d) * dlc_images_cols(d) > o.max_elements ||
        dlc_images_count(d, DLC_SPLIT_TRAIN) + dlc_images_count(d, DLC_SPLIT_EVAL) != count)
        abort();
    if (count * dlc_images_rows(d) * dlc_images_cols(d) > MAX_ELEMENTS) {
        dlc_images_release(d); /* batches of megapixel images would only be slow */
        return 0;
    }

    dlc_image_loader_params lo = dlc_image_loader_default_params();
    lo.split = !(flags & 16) ? DLC_SPLIT_ALL : flags & 32 ? DLC_SPLIT_EVAL : DLC_SPLIT_TRAIN;
    lo.batch = flags & 64 ? 3 : 1;
    lo.shuffle = (flags & 4) != 0;
    lo.shards = flags & 8 ? 2 : 1;
    lo.seed = data[0];
    for (int s = 0; s < lo.shards; s++) {
        lo.shard = s;
        dlc_image_loader *l = dlc_image_loader_new(d, &lo);
        if (!l) continue; /* an empty or too small shard: a documented error */
        int64_t n = dlc_image_loader_size(l), per = dlc_image_loader_batches_per_epoch(l);
        if (n < 1 || per < 1) abort();
        for (int64_t i = 0; i < per + 1 && i < 4; i++) draw(l, d, lo.batch, lo.shuffle);
        if (dlc_image_loader_set_cursor(l, 3, n) != DLC_OK) abort(); /* end of epoch 3 */
        draw(l, d, lo.batch, lo.shuffle);
        int64_t epoch, pos;
        dlc_image_loader_cursor(l, &epoch, &pos);
        if (epoch != 4) abort();
        dlc_image_loader_reset(l);
        draw(l, d, lo.batch, lo.shuffle);
        dlc_image_loader_free(l);
    }
    dlc_images_release(d);
    return 0;
}
