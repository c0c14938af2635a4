/* ckpt.c - safetensors checkpoints: a hand-written writer with atomic replace, and a
 * validating reader (jansson) for F32/F16/BF16/F64 files.  See ckpt.h. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <assert.h>
#include <jansson.h>
#include "diloco/ckpt.h"
#include "internal.h"
#include "strbuf.h"

#define META_KEY "__metadata__"
#define FORMAT_KEY "format" /* __metadata__ entry saying whose tensors these are */
#define FORMAT_PT "pt"      /* what every writer of PyTorch weights puts there */

/* ---------------------------------------------------------------------------
 * dtypes
 * --------------------------------------------------------------------------- */

typedef enum { DT_F32, DT_F16, DT_BF16, DT_F64, DT_COUNT } st_dtype;

static const struct {
    const char *name;
    int size;
} dtypes[] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}};
static_assert(sizeof dtypes / sizeof dtypes[0] == DT_COUNT, "dtype table out of sync");

/* Temporary names tried per save before giving up (each taken one is a stale file of a
 * dead process with our pid, or a concurrent save of the same path in this process). */
#define TMP_ATTEMPTS 1000

static int dtype_find(const char *s) {
    for (int i = 0; i < DT_COUNT; i++)
        if (strcmp(s, dtypes[i].name) == 0) return i;
    return -1;
}

static int host_little_endian(void) {
    uint32_t one = 1;
    unsigned char c;
    memcpy(&c, &one, 1);
    return c == 1;
}

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | (unsigned)p[1] << 8); }
static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary16 -> binary32, exact for every input (subnormals, inf, nan). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {
        float f = (float)man * 0x1p-24f; /* zero or subnormal: man * 2^-24 */
        return sign ? -f : f;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | man << 13);
    return bits_f32(sign | (exp + 112) << 23 | man << 13);
}

/* binary64 -> binary32, round to nearest; beyond the f32 range -> +-inf (done by
 * hand: the C conversion is undefined there). */
static float f64_to_f32(double d) {
    if (d >= 0x1.ffffffp127) return INFINITY;
    if (d <= -0x1.ffffffp127) return -INFINITY;
    return (float)d;
}

/* ---------------------------------------------------------------------------
 * strings: UTF-8 check, names in messages, a growable buffer with JSON escaping
 * --------------------------------------------------------------------------- */

/* The string helpers live in strbuf.c; the short names below are this file's. */
typedef dlcx_sbuf sbuf;
#define SHOW_CAP DLCX_SHOW_CAP
static const char *show(char out[SHOW_CAP], const char *s) { return dlcx_show(out, s); }
static int utf8_valid(const unsigned char *s, size_t n) { return dlcx_utf8_valid(s, n); }

static char *shape_str(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (o < size) snprintf(buf + o, size - o, "]");
    return buf;
}

/* ---------------------------------------------------------------------------
 * writing
 * --------------------------------------------------------------------------- */

/* qsort has no context argument: thread-local so concurrent saves do not collide */
static _Thread_local const char *const *sort_names;
static int cmp_by_name(const void *a, const void *b) {
    return strcmp(sort_names[*(const int *)a], sort_names[*(const int *)b]);
}

/* Checks that strs[0..n) are non-NULL, (non-empty,) valid UTF-8 and unique; `what`
 * is "tensor name" or "metadata key" for the message. */
static dlc_status check_names(const char *path, int n, const char *const *strs, const char *what,
                              int allow_meta_name) {
    char sa[SHOW_CAP];
    for (int i = 0; i < n; i++) {
        if (!strs[i]) return dlc_error(DLC_ERR_ARG, "safetensors_save: %s: %s %d is NULL", path, what, i);
        if (!strs[i][0])
            return dlc_error(DLC_ERR_ARG, "safetensors_save: %s: %s %d is empty", path, what, i);
        if (!utf8_valid((const unsigned char *)strs[i], strlen(strs[i])))
            return dlc_error(DLC_ERR_ARG, "safetensors_save: %s: %s '%s' is not valid UTF-8", path,
                             what, show(sa, strs[i]));
        if (!allow_meta_name && strcmp(strs[i], META_KEY) == 0)
            return dlc_error(DLC_ERR_ARG, "safetensors_save: %s: a tensor cannot be called '%s' "
                                          "(reserved for the metadata)", path, META_KEY);
    }
    if (n < 2) return DLC_OK;
    int *idx = malloc((size_t)n * sizeof *idx);
    if (!idx) return dlc_error(DLC_ERR_NOMEM, "safetensors_save: out of memory");
    for (int i = 0; i < n; i++) idx[i] = i;
    sort_names = strs;
    qsort(idx, (size_t)n, sizeof *idx, cmp_by_name);
    dlc_status err = DLC_OK;
    for (int i = 1; i < n; i++)
        if (strcmp(strs[idx[i - 1]], strs[idx[i]]) == 0) {
            err = dlc_error(DLC_ERR_ARG, "safetensors_save: %s: duplicate %s '%s'", path, what,
                            show(sa, strs[idx[i]]));
            break;
        }
    free(idx);
    return err;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes, in b. */
static dlc_status build_header(sbuf *b, const char *path, int n, const char *const *names,
                               dlc_tensor *const *tensors, int n_meta, const char *const *mk,
                               const char *const *mv) {
    /* "format": "pt" first, as Hugging Face writers put it: transformers refuses a file
     * whose __metadata__ lacks it.  A caller's own "format" pair replaces it. */
    int own_format = 0;
    for (int i = 0; i < n_meta; i++) own_format |= strcmp(mk[i], FORMAT_KEY) == 0;
    dlcx_sb_add(b, "{", 1);
    dlcx_sb_json_str(b, META_KEY);
    dlcx_sb_add(b, ":{", 2);
    if (!own_format) {
        dlcx_sb_json_str(b, FORMAT_KEY);
        dlcx_sb_add(b, ":", 1);
        dlcx_sb_json_str(b, FORMAT_PT);
    }
    for (int i = 0; i < n_meta; i++) {
        if (i || !own_format) dlcx_sb_add(b, ",", 1);
        dlcx_sb_json_str(b, mk[i]);
        dlcx_sb_add(b, ":", 1);
        dlcx_sb_json_str(b, mv[i]);
    }
    dlcx_sb_add(b, "}", 1);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const dlc_tensor *t = tensors[i];
        if (t->numel > (INT64_MAX - off) / 4)
            return dlc_error(DLC_ERR_ARG, "safetensors_save: %s: total size overflows", path);
        int64_t end = off + t->numel * 4;
        dlcx_sb_add(b, ",", 1); /* after __metadata__ or the previous tensor */
        dlcx_sb_json_str(b, names[i]);
        dlcx_sb_str(b, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) dlcx_sb_add(b, ",", 1);
            dlcx_sb_int(b, (long long)t->shape[d]);
        }
        dlcx_sb_str(b, "],\"data_offsets\":[");
        dlcx_sb_int(b, (long long)off);
        dlcx_sb_add(b, ",", 1);
        dlcx_sb_int(b, (long long)end);
        dlcx_sb_str(b, "]}");
        off = end;
    }
    dlcx_sb_add(b, "}", 1);
    while (!b->oom && b->len % 8) dlcx_sb_add(b, " ", 1);
    if (b->oom) return dlc_error(DLC_ERR_NOMEM, "safetensors_save: %s: out of memory building the header", path);
    if (b->len > DLC_SAFETENSORS_MAX_HEADER)
        return dlc_error(DLC_ERR_ARG, "safetensors_save: %s: header is %zu bytes, more than the %llu "
                                      "readers accept (too many tensors or too much metadata)",
                         path, b->len, (unsigned long long)DLC_SAFETENSORS_MAX_HEADER);
    return DLC_OK;
}

static int write_floats(FILE *f, const float *x, int64_t n) {
    if (host_little_endian()) return n == 0 || fwrite(x, sizeof *x, (size_t)n, f) == (size_t)n;
    unsigned char buf[4096];
    while (n > 0) {
        size_t k = n > 1024 ? 1024 : (size_t)n;
        for (size_t i = 0; i < k; i++) {
            uint32_t u;
            memcpy(&u, x + i, 4);
            for (int j = 0; j < 4; j++) buf[4 * i + j] = (unsigned char)(u >> 8 * j);
        }
        if (fwrite(buf, 4, k, f) != k) return 0;
        x += k;
        n -= (int64_t)k;
    }
    return 1;
}

/* fsync the directory holding path, so the rename itself is durable. */
static dlc_status sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash) dir = strdup(".");
    else if (slash == path) dir = strdup("/");
    else {
        dir = malloc((size_t)(slash - path) + 1);
        if (dir) {
            memcpy(dir, path, (size_t)(slash - path));
            dir[slash - path] = 0;
        }
    }
    if (!dir) return dlc_error(DLC_ERR_NOMEM, "safetensors_save: out of memory");
    dlc_status err = DLC_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /* A directory we may not open for reading, or a file system that cannot sync
     * directories (EINVAL), is left as it is: the rename has been done. */
    if (fd >= 0) {
        if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
            err = dlc_error(DLC_ERR_IO, "safetensors_save: %s: written and renamed, but syncing the "
                                        "directory %s failed: %s (the new file may not survive a crash)",
                            path, dir, strerror(errno));
        close(fd);
    }
    free(dir);
    return err;
}

dlc_status dlc_safetensors_save(const char *path, int n, const char *const *names,
                                dlc_tensor *const *tensors, int n_meta,
                                const char *const *meta_keys, const char *const *meta_values) {
    if (!path || !path[0]) return dlc_error(DLC_ERR_ARG, "safetensors_save: path is empty");
    if (n < 0 || (n > 0 && (!names || !tensors)))
        return dlc_error(DLC_ERR_ARG, "safetensors_save: %s: %d tensors but names or tensors is NULL "
                                      "(n must be >= 0)", path, n);
    if (n_meta < 0 || (n_meta > 0 && (!meta_keys || !meta_values)))
        return dlc_error(DLC_ERR_ARG, "safetensors_save: %s: %d metadata pairs but keys or values is "
                                      "NULL (n_meta must be >= 0)", path, n_meta);
    for (int i = 0; i < n; i++)
        if (!tensors[i]) return dlc_error(DLC_ERR_ARG, "safetensors_save: %s: tensor %d is NULL", path, i);
    dlc_status err = check_names(path, n, names, "tensor name", 0);
    if (err == DLC_OK) err = check_names(path, n_meta, meta_keys, "metadata key", 1);
    if (err != DLC_OK) return err;
    char sa[SHOW_CAP];
    for (int i = 0; i < n_meta; i++) {
        if (!meta_values[i])
            return dlc_error(DLC_ERR_ARG, "safetensors_save: %s: metadata value of '%s' is NULL", path,
                             show(sa, meta_keys[i]));
        if (!utf8_valid((const unsigned char *)meta_values[i], strlen(meta_values[i])))
            return dlc_error(DLC_ERR_ARG, "safetensors_save: %s: metadata value of '%s' is not valid "
                                          "UTF-8", path, show(sa, meta_keys[i]));
    }

    sbuf hdr = {0};
    char *tmp = NULL;
    FILE *f = NULL;
    int created = 0;
    err = build_header(&hdr, path, n, names, tensors, n_meta, meta_keys, meta_values);
    if (err != DLC_OK) goto fail;

    size_t tlen = strlen(path) + 48; /* ".tmp." PID "." N NUL */
    tmp = malloc(tlen);
    if (!tmp) {
        err = dlc_error(DLC_ERR_NOMEM, "safetensors_save: out of memory");
        goto fail;
    }
    /* PATH.tmp.PID.N, created O_EXCL (never through a file or symlink someone else put
     * there).  A dead run of the same pid may have left PATH.tmp.PID.N behind: then the
     * next N is tried, so a save never fails on a stale file.  The pid lets a cleaner
     * tell a live writer's file from a dead one's. */
    static atomic_uint tmp_serial;
    int fd = -1;
    for (int attempt = 0; attempt < TMP_ATTEMPTS && fd < 0; attempt++) {
        snprintf(tmp, tlen, "%s.tmp.%ld.%u", path, (long)getpid(),
                 atomic_fetch_add(&tmp_serial, 1u));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        err = dlc_error(DLC_ERR_IO, "safetensors_save: %s: cannot create the temporary file %s: %s",
                        path, tmp, strerror(errno));
        goto fail;
    }
    created = 1;
    f = fdopen(fd, "wb");
    if (!f) {
        err = dlc_error(DLC_ERR_IO, "safetensors_save: %s: %s", tmp, strerror(errno));
        close(fd);
        goto fail;
    }
    unsigned char len8[8];
    for (int j = 0; j < 8; j++) len8[j] = (unsigned char)((uint64_t)hdr.len >> 8 * j);
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr.p, 1, hdr.len, f) == hdr.len;
    for (int i = 0; ok && i < n; i++) ok = write_floats(f, tensors[i]->data, tensors[i]->numel);
    if (!ok || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        err = dlc_error(DLC_ERR_IO, "safetensors_save: %s: writing %s failed: %s", path, tmp,
                        strerror(errno));
        goto fail;
    }
    int rc = fclose(f);
    f = NULL;
    if (rc != 0) {
        err = dlc_error(DLC_ERR_IO, "safetensors_save: %s: closing %s failed: %s", path, tmp,
                        strerror(errno));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        err = dlc_error(DLC_ERR_IO, "safetensors_save: %s: cannot rename %s over it: %s", path, tmp,
                        strerror(errno));
        goto fail;
    }
    created = 0;
    err = sync_dir(path);

fail:
    if (f) fclose(f);
    if (created) unlink(tmp);
    free(tmp);
    free(hdr.p);
    return err;
}

/* ---------------------------------------------------------------------------
 * reading
 * --------------------------------------------------------------------------- */

typedef struct st_entry {
    char *name;
    int dtype;
    int ndim;
    int64_t shape[DLC_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* relative to the data region */
    size_t order;        /* position in the header, breaks ties of empty tensors */
} st_entry;

struct dlc_safetensors {
    char *path;
    int n;
    st_entry *e;   /* owned; sorted by data offset */
    int *by_name;  /* owned; indices into e sorted by name */
    int n_meta;
    char **mkeys;  /* owned, header order */
    char **mvals;  /* owned */
    unsigned char *data; /* owned; the data region */
    uint64_t data_len;
};

void dlc_safetensors_close(dlc_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) free(st->e[i].name);
    for (int i = 0; i < st->n_meta; i++) {
        free(st->mkeys[i]);
        free(st->mvals[i]);
    }
    free(st->e);
    free(st->by_name);
    free(st->mkeys);
    free(st->mvals);
    free(st->data);
    free(st->path);
    free(st);
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    default: return "null";
    }
}

static dlc_status read_exact(FILE *f, void *buf, size_t n, const char *path) {
    if (n && fread(buf, 1, n, f) != n)
        return dlc_error(ferror(f) ? DLC_ERR_IO : DLC_ERR_FORMAT, "%s: %s", path,
                         ferror(f) ? strerror(errno) : "file shrank while being read");
    return DLC_OK;
}

static dlc_status parse_meta(dlc_safetensors *st, const json_t *m) {
    char sa[SHOW_CAP];
    if (!json_is_object(m))
        return dlc_error(DLC_ERR_FORMAT, "%s: %s is %s, expected an object of string -> string",
                         st->path, META_KEY, json_kind(m));
    size_t cnt = json_object_size(m);
    st->mkeys = calloc(cnt ? cnt : 1, sizeof *st->mkeys);
    st->mvals = calloc(cnt ? cnt : 1, sizeof *st->mvals);
    if (!st->mkeys || !st->mvals) return dlc_error(DLC_ERR_NOMEM, "%s: out of memory", st->path);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        if (!json_is_string(v))
            return dlc_error(DLC_ERR_FORMAT, "%s: %s entry '%s' is %s, expected a string", st->path,
                             META_KEY, show(sa, k), json_kind(v));
        char *ck = strdup(k), *cv = strdup(json_string_value(v));
        if (!ck || !cv) {
            free(ck);
            free(cv);
            return dlc_error(DLC_ERR_NOMEM, "%s: out of memory", st->path);
        }
        st->mkeys[st->n_meta] = ck;
        st->mvals[st->n_meta++] = cv;
    }
    return DLC_OK;
}

/* Validates one tensor entry against the data region size and fills e (except name). */
static dlc_status parse_entry(const dlc_safetensors *st, const char *name, const json_t *v,
                              st_entry *e) {
    char sa[SHOW_CAP], sb[SHOW_CAP], shp[160];
    const char *p = st->path, *nm = show(sa, name);
    if (!json_is_object(v))
        return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': entry is %s, expected an object with "
                                         "dtype, shape and data_offsets", p, nm, json_kind(v));
    const json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
                 *of = json_object_get(v, "data_offsets");
    if (!dt || !json_is_string(dt))
        return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': dtype is %s, expected a string like \"F32\"",
                         p, nm, dt ? json_kind(dt) : "missing");
    e->dtype = dtype_find(json_string_value(dt));
    if (e->dtype < 0)
        return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': dtype %s is not supported (only F32, F16, "
                                         "BF16 and F64 load, converted to f32)", p, nm, show(sb, json_string_value(dt)));
    if (!sh || !json_is_array(sh))
        return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': shape is %s, expected an array of integers",
                         p, nm, sh ? json_kind(sh) : "missing");
    size_t nd = json_array_size(sh);
    if (nd > DLC_MAX_DIMS)
        return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': shape has %zu dims, at most %d are supported",
                         p, nm, nd, DLC_MAX_DIMS);
    e->ndim = (int)nd;
    int64_t prod = 1; /* of the non-zero dims, so an empty tensor's shape is still checked */
    int zero = 0;
    for (size_t i = 0; i < nd; i++) {
        const json_t *d = json_array_get(sh, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': shape entry %zu is %s, expected an "
                                             "integer >= 0", p, nm, i,
                             json_is_integer(d) ? "negative" : json_kind(d));
        int64_t s = (int64_t)json_integer_value(d);
        e->shape[i] = s;
        if (s == 0) zero = 1;
        else if (prod > INT64_MAX / 8 / s)
            return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': shape entry %zu (%lld) makes the element "
                                             "count overflow", p, nm, i, (long long)s);
        else prod *= s;
    }
    e->numel = zero ? 0 : prod;
    const char *bad = NULL;
    if (!of) bad = "nothing";
    else if (!json_is_array(of)) bad = json_kind(of);
    else if (json_array_size(of) != 2) bad = "an array of another length";
    else
        for (size_t i = 0; i < 2 && !bad; i++) {
            const json_t *o = json_array_get(of, i);
            if (!json_is_integer(o)) bad = json_kind(o);
            else if (json_integer_value(o) < 0) bad = "a negative offset";
        }
    if (bad)
        return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': data_offsets must be two integers [begin, "
                                         "end] >= 0, got %s", p, nm, bad);
    e->begin = (uint64_t)json_integer_value(json_array_get(of, 0));
    e->end = (uint64_t)json_integer_value(json_array_get(of, 1));
    if (e->begin > e->end)
        return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu]: begin > end", p,
                         nm, (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > st->data_len)
        return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] go beyond the "
                                         "%llu-byte data region (truncated file?)", p, nm,
                         (unsigned long long)e->begin, (unsigned long long)e->end,
                         (unsigned long long)st->data_len);
    uint64_t need = (uint64_t)e->numel * (uint64_t)dtypes[e->dtype].size;
    if (e->end - e->begin != need)
        return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, "
                                         "shape %s %s needs %llu", p, nm,
                         (unsigned long long)e->begin, (unsigned long long)e->end,
                         (unsigned long long)(e->end - e->begin),
                         shape_str(shp, sizeof shp, e->ndim, e->shape), dtypes[e->dtype].name,
                         (unsigned long long)need);
    return DLC_OK;
}

static int cmp_offset(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static _Thread_local const st_entry *sort_entries; /* qsort context, as sort_names */
static int cmp_entry_name(const void *a, const void *b) {
    return strcmp(sort_entries[*(const int *)a].name, sort_entries[*(const int *)b].name);
}

/* The tensors must cover the data region exactly, as the spec requires. */
static dlc_status check_coverage(const dlc_safetensors *st) {
    char sa[SHOW_CAP], sb[SHOW_CAP];
    uint64_t at = 0;
    for (int i = 0; i < st->n; i++) {
        const st_entry *e = &st->e[i], *prev = i ? &st->e[i - 1] : NULL;
        if (e->begin < at)
            return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor "
                                             "'%s' at [%llu, %llu]", st->path, show(sa, e->name),
                             (unsigned long long)e->begin, (unsigned long long)e->end,
                             show(sb, prev->name), (unsigned long long)prev->begin,
                             (unsigned long long)prev->end);
        if (e->begin > at)
            return dlc_error(DLC_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] leave a gap of "
                                             "%llu bytes after %s%s%s (the data region must be covered "
                                             "exactly)", st->path, show(sa, e->name),
                             (unsigned long long)e->begin, (unsigned long long)e->end,
                             (unsigned long long)(e->begin - at), prev ? "tensor '" : "",
                             prev ? show(sb, prev->name) : "the start of the data region",
                             prev ? "'" : "");
        at = e->end;
    }
    if (at != st->data_len)
        return dlc_error(DLC_ERR_FORMAT, "%s: the data region is %llu bytes but the tensors cover %llu: "
                                         "%llu trailing bytes belong to no tensor", st->path,
                         (unsigned long long)st->data_len, (unsigned long long)at,
                         (unsigned long long)(st->data_len - at));
    return DLC_OK;
}

static dlc_status parse_header(dlc_safetensors *st, const char *hdr, size_t len) {
    if (len == 0 || hdr[0] != '{')
        return dlc_error(DLC_ERR_FORMAT, "%s: the header must be a JSON object starting with '{'%s",
                         st->path, len ? "" : " (header length is 0)");
    json_error_t jerr;
    json_t *root = json_loadb(hdr, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return dlc_error(DLC_ERR_FORMAT, "%s: the header is not valid JSON: %s (line %d, column %d)",
                         st->path, jerr.text, jerr.line, jerr.column);
    dlc_status err = DLC_OK;
    if (!json_is_object(root)) {
        err = dlc_error(DLC_ERR_FORMAT, "%s: the header is %s, expected a JSON object", st->path,
                        json_kind(root));
        goto done;
    }
    size_t cnt = json_object_size(root);
    const json_t *meta = json_object_get(root, META_KEY);
    if (meta) cnt--;
    if (cnt > INT32_MAX) {
        err = dlc_error(DLC_ERR_FORMAT, "%s: too many tensors (%zu)", st->path, cnt);
        goto done;
    }
    st->e = calloc(cnt ? cnt : 1, sizeof *st->e);
    st->by_name = malloc((cnt ? cnt : 1) * sizeof *st->by_name);
    if (!st->e || !st->by_name) {
        err = dlc_error(DLC_ERR_NOMEM, "%s: out of memory", st->path);
        goto done;
    }
    if (meta && (err = parse_meta(st, meta)) != DLC_OK) goto done;
    const char *k;
    json_t *v;
    size_t order = 0;
    json_object_foreach(root, k, v) {
        if (v == meta) continue;
        st_entry *e = &st->e[st->n];
        if ((err = parse_entry(st, k, v, e)) != DLC_OK) goto done;
        if (!(e->name = strdup(k))) {
            err = dlc_error(DLC_ERR_NOMEM, "%s: out of memory", st->path);
            goto done;
        }
        e->order = order++;
        st->n++;
    }
    qsort(st->e, (size_t)st->n, sizeof *st->e, cmp_offset);
    if ((err = check_coverage(st)) != DLC_OK) goto done;
    for (int i = 0; i < st->n; i++) st->by_name[i] = i;
    sort_entries = st->e;
    qsort(st->by_name, (size_t)st->n, sizeof *st->by_name, cmp_entry_name);
done:
    json_decref(root);
    return err;
}

/* Opens `path`, validates its header against the file's size, and reads the data region
 * too when `with_data` (dlc_safetensors_open), not when only the header is wanted
 * (dlc_safetensors_open_header: st->data stays NULL). */
static dlc_safetensors *open_file(const char *path, int with_data) {
    if (!path || !path[0]) {
        dlc_error(DLC_ERR_ARG, "safetensors_open: path is empty");
        return NULL;
    }
    dlc_status err = DLC_OK;
    char *hdr = NULL;
    dlc_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        dlc_error(DLC_ERR_NOMEM, "safetensors_open: out of memory");
        free(st);
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        err = dlc_error(DLC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        err = dlc_error(DLC_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        err = dlc_error(DLC_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        err = dlc_error(DLC_ERR_FORMAT, "%s: file is %llu bytes, too short for the 8-byte header "
                                        "length (not a safetensors file?)", path, (unsigned long long)size);
        goto fail;
    }
    unsigned char len8[8];
    if ((err = read_exact(f, len8, 8, path)) != DLC_OK) goto fail;
    uint64_t hlen = rd64(len8);
    if (hlen > DLC_SAFETENSORS_MAX_HEADER) {
        err = dlc_error(DLC_ERR_FORMAT, "%s: header length %llu is over the limit of %llu bytes (not a "
                                        "safetensors file?)", path, (unsigned long long)hlen,
                        (unsigned long long)DLC_SAFETENSORS_MAX_HEADER);
        goto fail;
    }
    if (hlen > size - 8) {
        err = dlc_error(DLC_ERR_FORMAT, "%s: header length %llu is more than the %llu bytes after the "
                                        "length field (truncated file?)", path, (unsigned long long)hlen,
                        (unsigned long long)(size - 8));
        goto fail;
    }
    /* Both bounded by the file size now. */
    hdr = malloc(hlen ? hlen : 1);
    if (!hdr) {
        err = dlc_error(DLC_ERR_NOMEM, "%s: out of memory for a %llu-byte header", path,
                        (unsigned long long)hlen);
        goto fail;
    }
    if ((err = read_exact(f, hdr, hlen, path)) != DLC_OK) goto fail;
    st->data_len = size - 8 - hlen;
    if ((err = parse_header(st, hdr, hlen)) != DLC_OK) goto fail;
    free(hdr);
    hdr = NULL;
    if (!with_data) {
        fclose(f);
        return st;
    }
    if (st->data_len > SIZE_MAX || !(st->data = malloc(st->data_len ? st->data_len : 1))) {
        err = dlc_error(DLC_ERR_NOMEM, "%s: out of memory for %llu bytes of tensor data", path,
                        (unsigned long long)st->data_len);
        goto fail;
    }
    if ((err = read_exact(f, st->data, st->data_len, path)) != DLC_OK) goto fail;
    fclose(f);
    return st;

fail:
    (void)err;
    if (f) fclose(f);
    free(hdr);
    dlc_safetensors_close(st);
    return NULL;
}

dlc_safetensors *dlc_safetensors_open(const char *path) { return open_file(path, 1); }

dlc_safetensors *dlc_safetensors_open_header(const char *path) { return open_file(path, 0); }

int dlc_safetensors_count(const dlc_safetensors *st) { return st ? st->n : 0; }

const char *dlc_safetensors_name(const dlc_safetensors *st, int i) {
    return st && i >= 0 && i < st->n ? st->e[i].name : NULL;
}

static const st_entry *find(const dlc_safetensors *st, const char *name) {
    int lo = 0, hi = st->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const st_entry *e = &st->e[st->by_name[mid]];
        int c = strcmp(name, e->name);
        if (c == 0) return e;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *dlc_safetensors_dtype(const dlc_safetensors *st, const char *name) {
    const st_entry *e = st && name ? find(st, name) : NULL;
    return e ? dtypes[e->dtype].name : NULL;
}

int dlc_safetensors_shape(const dlc_safetensors *st, const char *name, int64_t shape[DLC_MAX_DIMS]) {
    const st_entry *e = st && name ? find(st, name) : NULL;
    if (!e) return -1;
    for (int d = 0; shape && d < e->ndim; d++) shape[d] = e->shape[d];
    return e->ndim;
}

dlc_tensor *dlc_safetensors_get(const dlc_safetensors *st, const char *name) {
    char sa[SHOW_CAP];
    if (!st || !name) {
        dlc_error(DLC_ERR_ARG, "safetensors_get: NULL %s", st ? "name" : "file");
        return NULL;
    }
    const st_entry *e = find(st, name);
    if (!e) {
        dlc_error(DLC_ERR_ARG, "%s: has no tensor '%s'", st->path, show(sa, name));
        return NULL;
    }
    if (!st->data) {
        dlc_error(DLC_ERR_ARG, "%s: tensor '%s': the file was opened for its header only "
                               "(dlc_safetensors_open_header): open it with dlc_safetensors_open to read tensors",
                  st->path, show(sa, name));
        return NULL;
    }
    dlc_tensor *t = dlc_tensor_new(e->ndim, e->shape);
    if (!t) return NULL;
    const unsigned char *src = st->data + e->begin;
    float *out = t->data;
    int64_t n = e->numel;
    switch (e->dtype) {
    case DT_F32:
        if (host_little_endian()) {
            if (n) memcpy(out, src, (size_t)n * 4);
        } else {
            for (int64_t i = 0; i < n; i++) out[i] = bits_f32(rd32(src + 4 * i));
        }
        break;
    case DT_F16:
        for (int64_t i = 0; i < n; i++) out[i] = f16_to_f32(rd16(src + 2 * i));
        break;
    case DT_BF16:
        for (int64_t i = 0; i < n; i++) out[i] = bits_f32((uint32_t)rd16(src + 2 * i) << 16);
        break;
    case DT_F64:
        for (int64_t i = 0; i < n; i++) {
            uint64_t u = rd64(src + 8 * i);
            double d;
            memcpy(&d, &u, sizeof d);
            out[i] = f64_to_f32(d);
        }
        break;
    default:
        DLC_ASSERT(0);
    }
    return t;
}

const char *dlc_safetensors_meta(const dlc_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->mkeys[i], key) == 0) return st->mvals[i];
    return NULL;
}

int dlc_safetensors_meta_count(const dlc_safetensors *st) { return st ? st->n_meta : 0; }

const char *dlc_safetensors_meta_key(const dlc_safetensors *st, int i) {
    return st && i >= 0 && i < st->n_meta ? st->mkeys[i] : NULL;
}
