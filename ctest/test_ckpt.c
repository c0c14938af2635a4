/*
 * test_ckpt.c - safetensors checkpoints: round trip (0-d to 4-d, bit-exact, odd
 * names, metadata), the exact bytes we write against a hand-made fixture, the
 * padding rule, atomic replace, F16/BF16/F64 conversion with known values, and a
 * hostile-input table where every corrupted file fails with DLC_ERR_FORMAT and a
 * precise message while a valid file still opens afterwards.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"

static char dir[64];

static const char *pathf(char *buf, const char *name) {
    snprintf(buf, 256, "%s/%s", dir, name);
    return buf;
}

static void write_bytes(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

/* Whole file (malloc'd) and its size; NULL if it cannot be read. */
static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    return buf;
}

static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> 8 * i);
}

/* A safetensors file from a raw header (not padded) and data; hlen_override != 0
 * replaces the length field (to lie about it). */
static void make_file(const char *path, const char *hdr, size_t hlen, const void *data, size_t dlen,
                      uint64_t hlen_override) {
    size_t n = 8 + hlen + dlen;
    unsigned char *buf = malloc(n);
    put_le64(buf, hlen_override ? hlen_override : hlen);
    memcpy(buf + 8, hdr, hlen);
    if (dlen) memcpy(buf + 8 + hlen, data, dlen);
    write_bytes(path, buf, n);
    free(buf);
}

/* Files in dir whose name contains ".tmp." (leftovers of a failed save). */
static int count_temp_files(void) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

static int same_bits(const dlc_tensor *a, const dlc_tensor *b) {
    if (!a || !b || a->ndim != b->ndim || a->numel != b->numel) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return a->numel == 0 || memcmp(a->data, b->data, (size_t)a->numel * 4) == 0;
}

static void test_round_trip(void) {
    char p[256];
    pathf(p, "rt.safetensors");
    int64_t s1[1] = {5}, s2[2] = {2, 3}, s4[4] = {2, 1, 3, 2}, s0[2] = {0, 3};
    dlc_tensor *t[5];
    t[0] = dlc_tensor_full(0, NULL, 3.5f);
    t[1] = check_randn(1, 1.0f, 1, s1);
    t[2] = check_randn(2, 1.0f, 2, s2);
    t[3] = check_randn(3, 1.0f, 4, s4);
    t[4] = dlc_tensor_zeros(2, s0);
    /* values that must survive bit for bit */
    t[1]->data[0] = -0.0f;
    t[1]->data[1] = INFINITY;
    t[1]->data[2] = NAN;
    t[1]->data[3] = 1e-40f; /* subnormal */
    const char *names[5] = {"scalar", "\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87 (key)", "a\"b\\c\nd\te",
                            "layers.0.w", "empty"};
    const char *mk[2] = {"step", "note"}, *mv[2] = {"12", "with \"quotes\", a\ttab and \xc3\xa9"};
    CHECK(dlc_safetensors_save(p, 5, names, t, 2, mk, mv) == DLC_OK);
    CHECK(count_temp_files() == 0);

    dlc_safetensors *st = dlc_safetensors_open(p);
    CHECK_OK(st);
    if (st) {
        CHECK(dlc_safetensors_count(st) == 5);
        for (int i = 0; i < 5; i++) {
            const char *nm = dlc_safetensors_name(st, i);
            CHECK(nm && strcmp(nm, names[i]) == 0); /* written order kept */
            dlc_tensor *g = dlc_safetensors_get(st, names[i]);
            CHECK_OK(g);
            CHECK(same_bits(g, t[i]));
            CHECK(strcmp(dlc_safetensors_dtype(st, names[i]), "F32") == 0);
            int64_t shp[DLC_MAX_DIMS];
            int nd = dlc_safetensors_shape(st, names[i], shp);
            CHECK(nd == t[i]->ndim);
            for (int d = 0; d < nd && d < DLC_MAX_DIMS; d++) CHECK(shp[d] == t[i]->shape[d]);
            dlc_tensor_release(g);
        }
        CHECK(dlc_safetensors_name(st, 5) == NULL && dlc_safetensors_name(st, -1) == NULL);
        CHECK(dlc_safetensors_shape(st, "absent", NULL) == -1 && dlc_safetensors_shape(NULL, names[0], NULL) == -1);
        CHECK(dlc_safetensors_meta_count(st) == 3); /* "format": "pt" first, then ours */
        CHECK(strcmp(dlc_safetensors_meta_key(st, 0), "format") == 0);
        CHECK(strcmp(dlc_safetensors_meta_key(st, 1), "step") == 0);
        CHECK(strcmp(dlc_safetensors_meta_key(st, 2), "note") == 0);
        CHECK(strcmp(dlc_safetensors_meta(st, "format"), "pt") == 0);
        CHECK(strcmp(dlc_safetensors_meta(st, "step"), "12") == 0);
        CHECK(strcmp(dlc_safetensors_meta(st, "note"), mv[1]) == 0);
        CHECK(dlc_safetensors_meta(st, "absent") == NULL);
        CHECK(dlc_safetensors_meta_key(st, 3) == NULL);
        CHECK_FAILS(dlc_safetensors_get(st, "nope"), DLC_ERR_ARG, "has no tensor 'nope'");
        /* the returned tensor is a copy: writing it does not change the next get */
        dlc_tensor *g = dlc_safetensors_get(st, "scalar");
        g->data[0] = 7.0f;
        dlc_tensor *h = dlc_safetensors_get(st, "scalar");
        CHECK(h && h->ndim == 0 && h->data[0] == 3.5f);
        dlc_tensor_release(g);
        dlc_tensor_release(h);
        dlc_safetensors_close(st);
    }

    /* the padding rule: header length % 8 == 0, header = JSON + spaces, data right after */
    size_t n;
    unsigned char *raw = read_bytes(p, &n);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)raw[i] << 8 * i;
    CHECK(hlen % 8 == 0);
    size_t data_bytes = 4 * (1 + 5 + 6 + 12 + 0);
    CHECK(n == 8 + hlen + data_bytes);
    CHECK(raw[8] == '{');
    size_t close = 8 + hlen - 1;
    while (close > 8 && raw[close] == ' ') close--;
    CHECK(raw[close] == '}' && 8 + hlen - 1 - close < 8); /* fewer than 8 padding spaces */
    CHECK(memcmp(raw + 8 + hlen, t[0]->data, 4) == 0);    /* first tensor at the data start */
    CHECK(memcmp(raw + n - 48, t[3]->data, 48) == 0);      /* last non-empty one at the end */
    free(raw);
    for (int i = 0; i < 5; i++) dlc_tensor_release(t[i]);
}

/* The header alone: the same names, shapes and metadata as a whole open, no tensor
 * (get fails naming the way to read one), and a file whose data region is cut short is
 * refused as open refuses it, though the data is never read. */
static void test_header_only(void) {
    char p[256];
    pathf(p, "hdr.safetensors");
    int64_t s2[2] = {2, 3};
    dlc_tensor *t[2] = {check_randn(11, 1.0f, 2, s2), dlc_tensor_full(0, NULL, 2.0f)};
    const char *names[2] = {"w", "b"}, *mk[1] = {"diloco.step"}, *mv[1] = {"40"};
    CHECK(dlc_safetensors_save(p, 2, names, t, 1, mk, mv) == DLC_OK);
    dlc_safetensors *st = dlc_safetensors_open_header(p);
    CHECK_OK(st);
    if (st) {
        CHECK(dlc_safetensors_count(st) == 2);
        CHECK(strcmp(dlc_safetensors_name(st, 0), "w") == 0 && strcmp(dlc_safetensors_name(st, 1), "b") == 0);
        int64_t shp[DLC_MAX_DIMS];
        CHECK(dlc_safetensors_shape(st, "w", shp) == 2 && shp[0] == 2 && shp[1] == 3);
        CHECK(dlc_safetensors_shape(st, "b", shp) == 0);
        CHECK(strcmp(dlc_safetensors_dtype(st, "w"), "F32") == 0);
        CHECK(strcmp(dlc_safetensors_meta(st, "diloco.step"), "40") == 0);
        CHECK(dlc_safetensors_meta_count(st) == 2);
        CHECK_FAILS(dlc_safetensors_get(st, "w"), DLC_ERR_ARG, "header only");
        CHECK_FAILS(dlc_safetensors_get(st, "nope"), DLC_ERR_ARG, "has no tensor 'nope'");
        dlc_safetensors_close(st);
    }
    size_t n;
    unsigned char *raw = read_bytes(p, &n);
    write_bytes(p, raw, n - 4); /* the last tensor's bytes cut short */
    st = dlc_safetensors_open_header(p);
    CHECK(!st && dlc_last_status() == DLC_ERR_FORMAT && strstr(dlc_last_error(), p) == dlc_last_error());
    dlc_safetensors_close(st);
    write_bytes(p, raw, n + 0); /* whole again: opens */
    st = dlc_safetensors_open_header(p);
    CHECK_OK(st);
    dlc_safetensors_close(st);
    free(raw);
    pathf(p, "missing.safetensors");
    CHECK(!dlc_safetensors_open_header(p) && dlc_last_status() == DLC_ERR_IO);
    CHECK(!dlc_safetensors_open_header("") && dlc_last_status() == DLC_ERR_ARG);
    dlc_tensor_release(t[0]);
    dlc_tensor_release(t[1]);
}

/* The exact bytes of a small file, built by hand from the spec. */
static void test_fixture_bytes(void) {
    char p[256];
    pathf(p, "fixture.safetensors");
    float av[2] = {1.0f, -2.0f};
    int64_t s[1] = {2};
    dlc_tensor *t[2] = {dlc_tensor_from_data(1, s, av), dlc_tensor_full(0, NULL, 0.5f)};
    const char *names[2] = {"a", "b"}, *mk[1] = {"k"}, *mv[1] = {"v"};
    CHECK(dlc_safetensors_save(p, 2, names, t, 1, mk, mv) == DLC_OK);
    static const char hdr[] = "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"},"
                              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]}}"
                              "      "; /* 146 bytes of JSON + 6 spaces = 152 */
    unsigned char want[8 + 152 + 12] = {152, 0, 0, 0, 0, 0, 0, 0};
    CHECK(sizeof hdr - 1 == 152);
    memcpy(want + 8, hdr, 152);
    static const unsigned char data[12] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0,
                                           0x00, 0x00, 0x00, 0x3f};
    memcpy(want + 160, data, 12);
    size_t n;
    unsigned char *got = read_bytes(p, &n);
    CHECK(got && n == sizeof want && memcmp(got, want, sizeof want) == 0);
    if (got && n == sizeof want)
        for (size_t i = 0; i < n; i++)
            if (got[i] != want[i]) {
                fprintf(stderr, "fixture: first difference at byte %zu: %02x != %02x\n", i, got[i], want[i]);
                break;
            }
    free(got);

    /* no tensors, no metadata of ours: the format alone, 32 bytes of JSON */
    pathf(p, "none.safetensors");
    CHECK(dlc_safetensors_save(p, 0, NULL, NULL, 0, NULL, NULL) == DLC_OK);
    got = read_bytes(p, &n);
    CHECK(got && n == 40 && got[0] == 32 &&
          memcmp(got + 8, "{\"__metadata__\":{\"format\":\"pt\"}}", 32) == 0);
    free(got);
    dlc_safetensors *st = dlc_safetensors_open(p);
    CHECK_OK(st);
    CHECK(dlc_safetensors_count(st) == 0 && dlc_safetensors_meta_count(st) == 1);
    dlc_safetensors_close(st);
    dlc_tensor_release(t[0]);
    dlc_tensor_release(t[1]);
}

static void test_atomic_replace(void) {
    char p[256], q[256];
    pathf(p, "atomic.safetensors");
    int64_t s[1] = {3};
    dlc_tensor *t[2] = {dlc_tensor_full(1, s, 1.0f), dlc_tensor_full(1, s, 2.0f)};
    const char *names[2] = {"x", "y"}, *dup[2] = {"x", "x"};
    CHECK(dlc_safetensors_save(p, 2, names, t, 0, NULL, NULL) == DLC_OK);
    size_t n0, n1;
    unsigned char *before = read_bytes(p, &n0);

    /* argument errors are found before the file system is touched */
    CHECK(dlc_safetensors_save(p, 2, dup, t, 0, NULL, NULL) == DLC_ERR_ARG);
    CHECK(strstr(dlc_last_error(), "duplicate tensor name 'x'") != NULL);
    const char *empty[1] = {""}, *reserved[1] = {"__metadata__"}, *badutf[1] = {"a\xff"};
    CHECK(dlc_safetensors_save(p, 1, empty, t, 0, NULL, NULL) == DLC_ERR_ARG);
    CHECK(strstr(dlc_last_error(), "tensor name 0 is empty") != NULL);
    CHECK(dlc_safetensors_save(p, 1, reserved, t, 0, NULL, NULL) == DLC_ERR_ARG);
    CHECK(dlc_safetensors_save(p, 1, badutf, t, 0, NULL, NULL) == DLC_ERR_ARG);
    CHECK(strstr(dlc_last_error(), "not valid UTF-8") != NULL);
    dlc_tensor *nullt[1] = {NULL};
    CHECK(dlc_safetensors_save(p, 1, names, nullt, 0, NULL, NULL) == DLC_ERR_ARG);
    const char *mk[2] = {"k", "k"}, *mv[2] = {"1", "2"};
    CHECK(dlc_safetensors_save(p, 1, names, t, 2, mk, mv) == DLC_ERR_ARG);
    CHECK(strstr(dlc_last_error(), "duplicate metadata key 'k'") != NULL);
    CHECK(dlc_safetensors_save(p, -1, names, t, 0, NULL, NULL) == DLC_ERR_ARG);

    unsigned char *after = read_bytes(p, &n1);
    CHECK(n0 == n1 && memcmp(before, after, n0) == 0);
    free(after);
    CHECK(count_temp_files() == 0);

    /* an I/O failure after the temp file was written: rename over a directory */
    pathf(q, "adir");
    mkdir(q, 0755);
    char inner[300];
    snprintf(inner, sizeof inner, "%s/keep", q);
    write_bytes(inner, "k", 1);
    CHECK(dlc_safetensors_save(q, 2, names, t, 0, NULL, NULL) == DLC_ERR_IO);
    CHECK(strstr(dlc_last_error(), "cannot rename") != NULL);
    struct stat sb;
    CHECK(stat(q, &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK(count_temp_files() == 0);
    unlink(inner);
    rmdir(q);

    /* a directory that does not exist */
    pathf(q, "no/such/dir/x.safetensors");
    CHECK(dlc_safetensors_save(q, 2, names, t, 0, NULL, NULL) == DLC_ERR_IO);
    CHECK(strstr(dlc_last_error(), "cannot create the temporary file") != NULL);

    /* a successful save replaces the old file completely */
    dlc_tensor *bigger[1] = {dlc_tensor_full(1, (int64_t[]){100}, 4.0f)};
    CHECK(dlc_safetensors_save(p, 1, names, bigger, 0, NULL, NULL) == DLC_OK);
    dlc_safetensors *st = dlc_safetensors_open(p);
    CHECK_OK(st);
    CHECK(dlc_safetensors_count(st) == 1);
    dlc_tensor *x = dlc_safetensors_get(st, "x");
    CHECK(x && x->numel == 100 && x->data[99] == 4.0f);
    dlc_tensor_release(x);
    dlc_safetensors_close(st);
    CHECK(count_temp_files() == 0);
    dlc_tensor_release(bigger[0]);
    free(before);
    dlc_tensor_release(t[0]);
    dlc_tensor_release(t[1]);
}

/* F16, BF16 and F64 from a hand-made file: known bit patterns -> known floats. */
static void test_conversions(void) {
    char p[256];
    pathf(p, "conv.safetensors");
    static const uint16_t f16[9] = {0x3c00, 0xc000, 0x3555, 0x7bff, 0x0001, 0x7c00, 0xfc00, 0x8000, 0x7e00};
    static const uint16_t bf16[4] = {0x3f80, 0xc040, 0x4049, 0xff80};
    static const double f64[4] = {0.1, -2.5, 1e300, -1e-300};
    unsigned char data[18 + 8 + 32];
    for (int i = 0; i < 9; i++) data[2 * i] = f16[i] & 0xff, data[2 * i + 1] = f16[i] >> 8;
    for (int i = 0; i < 4; i++) data[18 + 2 * i] = bf16[i] & 0xff, data[18 + 2 * i + 1] = bf16[i] >> 8;
    for (int i = 0; i < 4; i++) {
        uint64_t u;
        memcpy(&u, &f64[i], 8);
        put_le64(data + 26 + 8 * i, u);
    }
    /* offsets deliberately unaligned for F64 (26): the reader must not care */
    const char *hdr = "{\"h\":{\"dtype\":\"F16\",\"shape\":[9],\"data_offsets\":[0,18]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[18,26]},"
                      "\"d\":{\"dtype\":\"F64\",\"shape\":[4],\"data_offsets\":[26,58]}}";
    make_file(p, hdr, strlen(hdr), data, sizeof data, 0);
    dlc_safetensors *st = dlc_safetensors_open(p);
    CHECK_OK(st);
    if (!st) return;
    CHECK(strcmp(dlc_safetensors_name(st, 0), "h") == 0 && strcmp(dlc_safetensors_name(st, 2), "d") == 0);
    CHECK(strcmp(dlc_safetensors_dtype(st, "b"), "BF16") == 0);
    dlc_tensor *h = dlc_safetensors_get(st, "h"), *b = dlc_safetensors_get(st, "b"),
               *d = dlc_safetensors_get(st, "d");
    CHECK_OK(h);
    CHECK_OK(b);
    CHECK_OK(d);
    if (h && b && d) {
        CHECK(h->data[0] == 1.0f && h->data[1] == -2.0f);
        CHECK(h->data[2] == 0.333251953125f);
        CHECK(h->data[3] == 65504.0f);
        CHECK(h->data[4] == 0x1p-24f); /* smallest subnormal */
        CHECK(isinf(h->data[5]) && h->data[5] > 0 && isinf(h->data[6]) && h->data[6] < 0);
        CHECK(h->data[7] == 0.0f && signbit(h->data[7]));
        CHECK(isnan(h->data[8]));
        CHECK(b->ndim == 2 && b->shape[0] == 2 && b->shape[1] == 2);
        CHECK(b->data[0] == 1.0f && b->data[1] == -3.0f && b->data[2] == 3.140625f);
        CHECK(isinf(b->data[3]) && b->data[3] < 0);
        CHECK(d->data[0] == (float)0.1 && d->data[1] == -2.5f);
        CHECK(isinf(d->data[2]) && d->data[2] > 0); /* beyond the f32 range */
        CHECK(d->data[3] == 0.0f && signbit(d->data[3]));
    }
    dlc_tensor_release(h);
    dlc_tensor_release(b);
    dlc_tensor_release(d);
    dlc_safetensors_close(st);
}

typedef struct hostile {
    const char *what;
    const char *hdr;     /* raw header; NULL = use raw bytes below */
    size_t data_len;     /* zero bytes of data after the header */
    uint64_t hlen_lie;   /* != 0: length field to write instead of the real one */
    const char *needle;  /* expected message fragment */
} hostile;

#define E(dt, sh, off) "{\"dtype\":" dt ",\"shape\":" sh ",\"data_offsets\":" off "}"

static const hostile cases[] = {
    {"huge header length", "{}", 0, (uint64_t)1 << 40, "header length 1099511627776 is over the limit"},
    {"header longer than the file", "{}", 0, 1000, "header length 1000 is more than the 2 bytes"},
    {"empty header", "", 0, 0, "starting with '{'"},
    {"leading space", " {}", 0, 0, "starting with '{'"},
    {"not an object", "[1,2]", 0, 0, "starting with '{'"},
    {"bad JSON", "{\"a\":", 0, 0, "not valid JSON"},
    {"bad JSON has a position", "{\"a\" 1}", 0, 0, "(line 1, column"},
    {"invalid UTF-8", "{\"\xff\":1}", 0, 0, "not valid JSON"},
    {"NUL in the header", "{\"a\\u0000\":1}", 0, 0, "not valid JSON"},
    {"duplicate names", "{\"a\":" E("\"F32\"", "[1]", "[0,4]") ",\"a\":" E("\"F32\"", "[1]", "[4,8]") "}",
     8, 0, "duplicate object key"},
    {"entry not an object", "{\"a\":5}", 0, 0, "tensor 'a': entry is an integer, expected an object"},
    {"dtype missing", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, "tensor 'a': dtype is missing"},
    {"dtype not a string", "{\"a\":" E("3", "[1]", "[0,4]") "}", 4, 0, "dtype is an integer"},
    {"unknown dtype", "{\"a\":" E("\"Q4\"", "[1]", "[0,4]") "}", 4, 0, "tensor 'a': dtype Q4 is not supported"},
    {"unsupported dtype", "{\"w\":" E("\"I64\"", "[1]", "[0,8]") "}", 8, 0, "tensor 'w': dtype I64 is not supported"},
    {"shape not an array", "{\"a\":" E("\"F32\"", "\"2\"", "[0,8]") "}", 8, 0, "shape is a string"},
    {"shape missing", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, 0, "shape is missing"},
    {"negative dim", "{\"a\":" E("\"F32\"", "[-1]", "[0,4]") "}", 4, 0, "shape entry 0 is negative"},
    {"real dim", "{\"a\":" E("\"F32\"", "[1,2.0]", "[0,8]") "}", 8, 0, "shape entry 1 is a real"},
    {"too many dims", "{\"a\":" E("\"F32\"", "[1,1,1,1,2]", "[0,8]") "}", 8, 0, "shape has 5 dims, at most 4"},
    {"shape overflows", "{\"a\":" E("\"F32\"", "[4294967296,4294967296,4294967296]", "[0,8]") "}", 8, 0,
     "shape entry 1 (4294967296) makes the element count overflow"},
    {"offsets missing", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, 0, "data_offsets must be two integers"},
    {"one offset", "{\"a\":" E("\"F32\"", "[1]", "[0]") "}", 4, 0, "got an array of another length"},
    {"offsets not integers", "{\"a\":" E("\"F32\"", "[1]", "[0,\"4\"]") "}", 4, 0, "[begin, end] >= 0, got a string"},
    {"negative offset", "{\"a\":" E("\"F32\"", "[1]", "[-4,0]") "}", 4, 0, "got a negative offset"},
    {"begin > end", "{\"a\":" E("\"F32\"", "[0]", "[8,0]") "}", 8, 0, "data_offsets [8, 0]: begin > end"},
    {"offsets beyond the data", "{\"a\":" E("\"F32\"", "[4]", "[0,16]") "}", 8, 0,
     "data_offsets [0, 16] go beyond the 8-byte data region"},
    {"byte count != shape", "{\"wte.weight\":" E("\"F32\"", "[10,20]", "[0,400]") "}", 400, 0,
     "tensor 'wte.weight': data_offsets [0, 400] hold 400 bytes, shape [10,20] F32 needs 800"},
    {"byte count != dtype", "{\"a\":" E("\"F16\"", "[2]", "[0,8]") "}", 8, 0, "shape [2] F16 needs 4"},
    {"overlap", "{\"a\":" E("\"F32\"", "[2]", "[0,8]") ",\"b\":" E("\"F32\"", "[2]", "[4,12]") "}", 12, 0,
     "tensor 'b': data_offsets [4, 12] overlap tensor 'a' at [0, 8]"},
    {"gap", "{\"a\":" E("\"F32\"", "[1]", "[0,4]") ",\"b\":" E("\"F32\"", "[1]", "[8,12]") "}", 12, 0,
     "tensor 'b': data_offsets [8, 12] leave a gap of 4 bytes after tensor 'a'"},
    {"gap at the start", "{\"a\":" E("\"F32\"", "[1]", "[4,8]") "}", 8, 0,
     "leave a gap of 4 bytes after the start of the data region"},
    {"trailing bytes", "{\"a\":" E("\"F32\"", "[1]", "[0,4]") "}", 8, 0, "4 trailing bytes belong to no tensor"},
    {"metadata not an object", "{\"__metadata__\":[1]}", 0, 0, "__metadata__ is an array, expected an object"},
    {"metadata value not a string", "{\"__metadata__\":{\"step\":12}}", 0, 0,
     "__metadata__ entry 'step' is an integer, expected a string"},
    {"control characters in a name are shown escaped", "{\"a\\nb\":5}", 0, 0, "tensor 'a\\x0ab'"},
};

static void test_hostile(void) {
    char p[256], good[256];
    pathf(p, "bad.safetensors");
    pathf(good, "good.safetensors");
    dlc_tensor *t = dlc_tensor_full(2, (int64_t[]){2, 2}, 1.5f);
    const char *nm[1] = {"w"};
    CHECK(dlc_safetensors_save(good, 1, nm, &t, 0, NULL, NULL) == DLC_OK);
    unsigned char zeros[400] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const hostile *c = &cases[i];
        make_file(p, c->hdr, strlen(c->hdr), zeros, c->data_len, c->hlen_lie);
        dlc_safetensors *st = dlc_safetensors_open(p);
        int ok = !st && dlc_last_status() == DLC_ERR_FORMAT && strstr(dlc_last_error(), c->needle) &&
                 strstr(dlc_last_error(), p) == dlc_last_error(); /* message starts with the path */
        CHECK(ok);
        if (getenv("DLC_VERBOSE")) printf("%-48s %s\n", c->what, dlc_last_error());
        if (!ok)
            fprintf(stderr, "  hostile case '%s': %s: %s\n", c->what, st ? "opened" : "wrong error",
                    dlc_last_error());
        dlc_safetensors_close(st);
        /* the header alone is held to the same rules */
        st = dlc_safetensors_open_header(p);
        CHECK(!st && dlc_last_status() == DLC_ERR_FORMAT && strstr(dlc_last_error(), c->needle));
        dlc_safetensors_close(st);
        /* no state damage: the valid file still opens and reads */
        dlc_safetensors *g = dlc_safetensors_open(good);
        dlc_tensor *w = g ? dlc_safetensors_get(g, "w") : NULL;
        CHECK(w && same_bits(w, t));
        dlc_tensor_release(w);
        dlc_safetensors_close(g);
    }

    /* files too short to hold the length, and truncations of a valid file */
    size_t n;
    unsigned char *raw = read_bytes(good, &n);
    for (size_t cut = 0; cut < n; cut += (cut < 16 ? 1 : 7)) {
        write_bytes(p, raw, cut);
        dlc_safetensors *st = dlc_safetensors_open(p);
        CHECK(!st && dlc_last_status() == DLC_ERR_FORMAT);
        if (cut < 8) CHECK(strstr(dlc_last_error(), "too short for the 8-byte header length") != NULL);
        dlc_safetensors_close(st);
    }
    /* every single-byte corruption of the header either opens or fails cleanly */
    for (size_t i = 8; i < n - 16; i++) {
        unsigned char keep = raw[i];
        raw[i] = (unsigned char)(keep ^ 0x5a);
        write_bytes(p, raw, n);
        dlc_safetensors *st = dlc_safetensors_open(p);
        CHECK(st || dlc_last_status() == DLC_ERR_FORMAT);
        dlc_safetensors_close(st);
        raw[i] = keep;
    }
    free(raw);

    /* environmental failures are I/O errors */
    pathf(p, "missing.safetensors");
    CHECK(!dlc_safetensors_open(p) && dlc_last_status() == DLC_ERR_IO &&
          strstr(dlc_last_error(), "cannot open") != NULL);
    CHECK(!dlc_safetensors_open(dir) && dlc_last_status() == DLC_ERR_IO);
    CHECK(!dlc_safetensors_open("") && dlc_last_status() == DLC_ERR_ARG);
    dlc_tensor_release(t);
}

/* Names from the caller need not be UTF-8.  A long run of continuation bytes has no
 * character boundary to cut at; showing it in the message overflowed a stack buffer
 * (found by ctest/fuzz_safetensors.c).  Both paths must fail cleanly and say so. */
static void test_caller_names_not_utf8(void) {
    char p[256], name[400];
    pathf(p, "names.safetensors");
    memset(name, 0x80, sizeof name - 1);
    name[sizeof name - 1] = 0;
    name[0] = 'w';
    dlc_tensor *t = dlc_tensor_full(1, (int64_t[]){2}, 2.0f);
    const char *nm[1] = {name};
    CHECK(dlc_safetensors_save(p, 1, nm, &t, 0, NULL, NULL) == DLC_ERR_ARG &&
          strstr(dlc_last_error(), "is not valid UTF-8") && strstr(dlc_last_error(), "..."));
    nm[0] = "w";
    CHECK(dlc_safetensors_save(p, 1, nm, &t, 0, NULL, NULL) == DLC_OK);
    dlc_safetensors *st = dlc_safetensors_open(p);
    CHECK_OK(st);
    CHECK(!dlc_safetensors_get(st, name) && dlc_last_status() == DLC_ERR_ARG &&
          strstr(dlc_last_error(), "has no tensor 'w\x80") && strstr(dlc_last_error(), "...'"));
    name[300] = 0x01; /* control bytes are escaped to 4 bytes each: still bounded */
    memset(name + 85, 0x02, 20);
    CHECK(!dlc_safetensors_get(st, name) && strstr(dlc_last_error(), "...'"));
    dlc_tensor *w = dlc_safetensors_get(st, "w");
    CHECK(w && w->numel == 2 && w->data[1] == 2.0f);
    dlc_tensor_release(w);
    dlc_safetensors_close(st);
    dlc_tensor_release(t);
}

/* A dead run with our pid left PATH.tmp.PID.0 .. .2 behind (kill -9 mid-save): the save
 * still succeeds, takes another name, and leaves the stale files for the run's cleaner. */
static void test_stale_temp_same_pid(void) {
    char p[600], stale[700];
    snprintf(p, sizeof p, "%s/stale.safetensors", dir);
    for (int k = 0; k < 3; k++) {
        snprintf(stale, sizeof stale, "%s.tmp.%ld.%d", p, (long)getpid(), k);
        write_bytes(stale, (const unsigned char *)"junk", 4);
    }
    snprintf(stale, sizeof stale, "%s.tmp.%ld", p, (long)getpid()); /* the old naming */
    write_bytes(stale, (const unsigned char *)"junk", 4);
    int before = count_temp_files();
    float v[2] = {1.0f, 2.0f};
    int64_t shape[1] = {2};
    dlc_tensor *t = dlc_tensor_from_data(1, shape, v);
    const char *nm[1] = {"w"};
    CHECK(dlc_safetensors_save(p, 1, nm, &t, 0, NULL, NULL) == DLC_OK);
    CHECK(count_temp_files() == before);
    dlc_safetensors *st = dlc_safetensors_open(p);
    CHECK_OK(st);
    dlc_safetensors_close(st);
    dlc_tensor_release(t);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dlc_ckpt_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_round_trip();
    test_header_only();
    test_fixture_bytes();
    test_atomic_replace();
    test_conversions();
    test_hostile();
    test_caller_names_not_utf8();
    test_stale_temp_same_pid();
    /* clean up the scratch directory */
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    rmdir(dir);
    return check_done("ckpt");
}
