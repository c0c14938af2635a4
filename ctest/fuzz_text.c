/*
 * fuzz_text.c - libFuzzer target for the text corpus reader and its loaders
 * (core/data_text.c).
 *
 * The whole input is the text file.  Its first byte also picks the options:
 *   bits 0-2  chunk size 1, 2, 3, 5, 8, 16, 64 or 1000 bytes
 *   bits 3-4  ctx 1, 2, 4 or 16
 *   bit 5     sequential windows (else random)
 *   bit 6     open the directory holding the file (directory walk, binary sniff)
 *   bit 7     drop_line "" (empty lines) instead of "%"
 * max_bytes (4000) is small, so the limit is reached by ordinary inputs too.  On success
 * loaders for the train and eval splits, shards 1 and 2 of 2, draw a few batches
 * (also at the largest cursor allowed) and each batch is checked: y is x shifted
 * by one and only cleaned bytes appear.  A shard smaller than ctx + 1 and an empty
 * split are documented errors.  Built by -DDLC_FUZZ=ON, run by scripts/fuzz.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "diloco/diloco.h"

#define MAX_BYTES 4000

static char dir[64], path[96];

static void cleanup(void) {
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(dir, sizeof dir, "/tmp/dlc_fuzz_text.%ld", (long)getpid());
    snprintf(path, sizeof path, "%s/corpus.txt", dir);
    if (mkdir(dir, 0700) != 0) abort();
    atexit(cleanup);
    return 0;
}

static void draw(dlc_text_loader *l, int64_t B, int64_t T) {
    dlc_tensor *x, *y;
    if (dlc_text_loader_next(l, &x, &y) != DLC_OK) {
        if (x || y) abort();
        return;
    }
    if (x->ndim != 2 || x->shape[0] != B || x->shape[1] != T || y->shape[0] != B ||
        y->shape[1] != T)
        abort();
    for (int64_t i = 0; i < B * T; i++) {
        float c = x->data[i];
        if (!(c == '\n' || c == '\t' || (c >= 0x20 && c <= 0xff && c != 0x7f))) abort();
        if (i % T + 1 < T && y->data[i] != x->data[i + 1]) abort();
    }
    dlc_tensor_release(x);
    dlc_tensor_release(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const int64_t chunks[8] = {1, 2, 3, 5, 8, 16, 64, 1000}, ctxs[4] = {1, 2, 4, 16};
    uint8_t cfg = size ? data[0] : 0;
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();

    dlc_text_params o = dlc_text_default_params();
    o.path = cfg & 64 ? dir : path;
    o.chunk = chunks[cfg & 7];
    o.eval_fraction = 0.3;
    o.split_seed = cfg;
    o.drop_line = cfg & 128 ? "" : "%";
    o.max_bytes = MAX_BYTES;
    dlc_text *t = dlc_text_open(&o);
    if (!t) return 0; /* empty, binary, only dropped lines, over max_bytes */

    int64_t n;
    const uint8_t *bytes = dlc_text_bytes(t, &n);
    if (!bytes || n < 1 || n > MAX_BYTES ||
        dlc_text_size(t, DLC_SPLIT_TRAIN) + dlc_text_size(t, DLC_SPLIT_EVAL) != n ||
        dlc_text_chunks(t, DLC_SPLIT_ALL) != (n + o.chunk - 1) / o.chunk)
        abort();

    dlc_text_loader_params lo = dlc_text_loader_default_params();
    lo.batch = 3;
    lo.ctx = ctxs[(cfg >> 3) & 3];
    lo.shards = 2;
    lo.sequential = (cfg & 32) != 0;
    lo.seed = size;
    for (int split = DLC_SPLIT_TRAIN; split <= DLC_SPLIT_EVAL; split++)
        for (int s = 0; s < lo.shards; s++) {
            lo.split = (dlc_split)split;
            lo.shard = s;
            dlc_text_loader *l = dlc_text_loader_new(t, &lo);
            if (!l) {
                if (dlc_last_status() != DLC_ERR_RANGE) abort(); /* too small or empty */
                continue;
            }
            if (dlc_text_loader_size(l) < lo.ctx + 1 || dlc_text_loader_batches_per_epoch(l) < 1)
                abort();
            for (int i = 0; i < 3; i++) draw(l, lo.batch, lo.ctx);
            /* the largest cursor set_cursor accepts; one more is refused */
            int64_t hi = INT64_MAX / lo.batch - 1;
            if (dlc_text_loader_set_cursor(l, hi) != DLC_OK ||
                dlc_text_loader_set_cursor(l, hi + 1) == DLC_OK)
                abort();
            draw(l, lo.batch, lo.ctx);
            dlc_text_loader_reset(l);
            draw(l, lo.batch, lo.ctx);
            dlc_text_loader_free(l);
        }
    dlc_text_release(t);
    return 0;
}
