/*
 * ckpt.h - checkpoints in the safetensors format (huggingface/safetensors), so a
 * model saved here loads in PyTorch and a PyTorch checkpoint loads here.
 *
 * File layout:
 *   u64 little-endian N | N bytes of JSON header | data region
 * The header is one JSON object: tensor name -> {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets relative to the start of the data region) plus an optional
 * "__metadata__" object of string -> string.  The tensors' byte ranges cover the data
 * region exactly: contiguous, no gaps, no overlaps.  What we write: F32 only, the
 * tensors in the order given, the header compact and padded with spaces to a multiple
 * of 8 bytes (so the data region is 8-byte aligned); docs/checkpoints.md has details.
 *
 *     const char *names[] = {"wte.weight", "ln_f.bias"};
 *     dlc_tensor *ts[] = {wte, ln_f_b};
 *     const char *mk[] = {"step"}, *mv[] = {"1200"};
 *     if (dlc_safetensors_save("model.safetensors", 2, names, ts, 1, mk, mv) != DLC_OK)
 *         fprintf(stderr, "%s\n", dlc_last_error());
 *
 *     dlc_safetensors *st = dlc_safetensors_open("model.safetensors");
 *     if (!st) fprintf(stderr, "%s\n", dlc_last_error());
 *     dlc_tensor *w = dlc_safetensors_get(st, "wte.weight");   // new reference
 *     const char *step = dlc_safetensors_meta(st, "step");      // "1200", borrowed
 *     dlc_tensor_release(w);
 *     dlc_safetensors_close(st);
 *
 * Files are hostile input: every size and offset is checked against the actual file
 * size before anything is allocated or read on its strength, and every error names
 * the file, the tensor and what was expected.
 */
#ifndef DILOCO_CKPT_H
#define DILOCO_CKPT_H

#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest JSON header accepted (the reference implementation's limit is 100 MB). */
#define DLC_SAFETENSORS_MAX_HEADER ((uint64_t)100 << 20)

/*
 * Writes n tensors (borrowed; f32, written little-endian in the given order under
 * names[i]) and n_meta metadata pairs (borrowed strings) to `path`.
 *
 * The metadata written starts with "format": "pt", which Hugging Face loaders require,
 * unless the caller gives its own "format" pair; so every saved file has __metadata__.
 * Names and metadata keys must be non-empty, unique and valid UTF-8; a tensor may not
 * be called "__metadata__".  Violations are DLC_ERR_ARG and are detected before the
 * file system is touched.  n == 0 writes a valid file with no tensors.
 *
 * Atomic replace: the file is written to "<path>.tmp.<pid>" in the same directory,
 * flushed and fsync'ed, renamed over `path`, and the directory is fsync'ed.  On any
 * failure the temporary file is removed and a file already at `path` is untouched:
 * readers see the old complete file or the new complete file, never a mix.  (The one
 * exception: if only the final directory fsync fails, the new file is in place and
 * the DLC_ERR_IO message says so.)
 * Returns DLC_OK, DLC_ERR_ARG, DLC_ERR_IO (message has the path and strerror) or
 * DLC_ERR_NOMEM.
 */
DLC_API dlc_status dlc_safetensors_save(const char *path, int n, const char *const *names,
                                        dlc_tensor *const *tensors, int n_meta,
                                        const char *const *meta_keys,
                                        const char *const *meta_values);

typedef struct dlc_safetensors dlc_safetensors; /* opaque: an opened, validated file */

/*
 * Reads and validates the whole file: header, every entry, and the exact coverage of
 * the data region.  Returns a handle the caller frees with dlc_safetensors_close, or
 * NULL with DLC_ERR_IO (cannot open/read), DLC_ERR_FORMAT (not a valid safetensors
 * file: the message names the path, the tensor and the rule broken) or
 * DLC_ERR_NOMEM.  Supported dtypes: F32, and F16, BF16, F64 converted to f32 by
 * dlc_safetensors_get (F64 values beyond the f32 range become +-inf).  Tensors of
 * more than DLC_MAX_DIMS dimensions are rejected.
 */
DLC_API dlc_safetensors *dlc_safetensors_open(const char *path);

/*
 * The header alone: reads and validates it as dlc_safetensors_open does (every entry,
 * the exact coverage of the data region, which is measured by the file's size and not
 * read), for the names, dtypes, shapes and metadata of a file without reading its
 * tensors (a checkpoint's step, say).  dlc_safetensors_get on the handle fails with
 * DLC_ERR_ARG.  The same errors as dlc_safetensors_open.
 */
DLC_API dlc_safetensors *dlc_safetensors_open_header(const char *path);

/* Number of tensors; names in file-layout order (by data offset), i in [0, count).
 * The returned string is borrowed from st (valid until close); NULL if i is out of
 * range. */
DLC_API int dlc_safetensors_count(const dlc_safetensors *st);
DLC_API const char *dlc_safetensors_name(const dlc_safetensors *st, int i);
/* The stored dtype of tensor `name` ("F32", "F16", "BF16", "F64"), NULL if absent. */
DLC_API const char *dlc_safetensors_dtype(const dlc_safetensors *st, const char *name);

/* The stored shape of tensor `name` into shape[0..ndim): returns ndim (0..DLC_MAX_DIMS),
 * or -1 if absent.  Lets a reader check a tensor against what it expects before
 * dlc_safetensors_get allocates a copy. */
DLC_API int dlc_safetensors_shape(const dlc_safetensors *st, const char *name, int64_t shape[DLC_MAX_DIMS]);

/* A NEW f32 tensor (a copy, independent of st) holding tensor `name`; NULL with
 * DLC_ERR_ARG "... has no tensor 'x'" if absent, or DLC_ERR_NOMEM. */
DLC_API dlc_tensor *dlc_safetensors_get(const dlc_safetensors *st, const char *name);

/* Metadata value of `key` (borrowed from st), NULL if absent.  Keys in header order:
 * dlc_safetensors_meta_key(st, i) for i in [0, meta_count), NULL if out of range. */
DLC_API const char *dlc_safetensors_meta(const dlc_safetensors *st, const char *key);
DLC_API int dlc_safetensors_meta_count(const dlc_safetensors *st);
DLC_API const char *dlc_safetensors_meta_key(const dlc_safetensors *st, int i);

/* Frees st and everything borrowed from it.  NULL ok. */
DLC_API void dlc_safetensors_close(dlc_safetensors *st);

#ifdef __cplusplus
}
#endif
#endif
