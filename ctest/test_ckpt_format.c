/*
 * test_ckpt_format.c - saved safetensors carry "format": "pt" in __metadata__, as
 * Hugging Face loaders expect (transformers refuses a file whose metadata lacks it), and
 * files written without it, by older versions of diloco or by other tools, still load.
 * The header is parsed as JSON (jansson) here, independently of core/ckpt.c's reader.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"

static char dir[64];

static const char *pathf(char *buf, const char *name) {
    snprintf(buf, 256, "%s/%s", dir, name);
    return buf;
}

/* The JSON header of a safetensors file, parsed; NULL (and a failed check) if the file
 * is not one. */
static json_t *header_of(const char *path) {
    FILE *f = fopen(path, "rb");
    unsigned char len8[8];
    json_t *root = NULL;
    if (f && fread(len8, 1, 8, f) == 8) {
        uint64_t n = 0;
        for (int i = 0; i < 8; i++) n |= (uint64_t)len8[i] << 8 * i;
        char *h = n < (1u << 20) ? malloc((size_t)n) : NULL;
        if (h && fread(h, 1, (size_t)n, f) == n) root = json_loadb(h, (size_t)n, 0, NULL);
        free(h);
    }
    if (f) fclose(f);
    CHECK(root != NULL);
    return root;
}

static const char *meta_str(json_t *root, const char *key) {
    return json_string_value(json_object_get(json_object_get(root, "__metadata__"), key));
}

static void write_file(const char *path, const char *hdr, const float *data, size_t n) {
    FILE *f = fopen(path, "wb");
    size_t hl = strlen(hdr);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hl >> 8 * i);
    if (!f || fwrite(len8, 1, 8, f) != 8 || fwrite(hdr, 1, hl, f) != hl ||
        fwrite(data, sizeof *data, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

/* Every save writes "format": "pt", first, next to the caller's own pairs. */
static void test_saved_files_say_pt(void) {
    char p[256];
    int64_t s[1] = {3};
    dlc_tensor *t = dlc_tensor_full(1, s, 2.0f);
    const char *names[1] = {"w"};
    dlc_tensor *ts[1] = {t};

    pathf(p, "plain.safetensors");
    CHECK(dlc_safetensors_save(p, 1, names, ts, 0, NULL, NULL) == DLC_OK);
    json_t *h = header_of(p);
    CHECK(h && json_is_object(json_object_get(h, "__metadata__")));
    CHECK(h && meta_str(h, "format") && strcmp(meta_str(h, "format"), "pt") == 0);
    CHECK(h && json_object_size(json_object_get(h, "__metadata__")) == 1);
    json_decref(h);

    const char *mk[2] = {"step", "diloco.recipe"}, *mv[2] = {"7", "tiny"};
    pathf(p, "meta.safetensors");
    CHECK(dlc_safetensors_save(p, 1, names, ts, 2, mk, mv) == DLC_OK);
    h = header_of(p);
    CHECK(h && meta_str(h, "format") && strcmp(meta_str(h, "format"), "pt") == 0);
    CHECK(h && meta_str(h, "step") && strcmp(meta_str(h, "step"), "7") == 0);
    CHECK(h && json_object_size(json_object_get(h, "__metadata__")) == 3);
    json_decref(h);
    dlc_safetensors *st = dlc_safetensors_open(p);
    CHECK_OK(st);
    if (st) {
        CHECK(dlc_safetensors_meta_count(st) == 3);
        CHECK(strcmp(dlc_safetensors_meta_key(st, 0), "format") == 0); /* first, as HF writes it */
        CHECK(strcmp(dlc_safetensors_meta(st, "format"), "pt") == 0);
        CHECK(strcmp(dlc_safetensors_meta(st, "diloco.recipe"), "tiny") == 0);
        dlc_safetensors_close(st);
    }

    /* a caller's own format replaces ours: one "format" key, the caller's value */
    const char *fk[2] = {"format", "step"}, *fv[2] = {"np", "1"};
    pathf(p, "own.safetensors");
    CHECK(dlc_safetensors_save(p, 1, names, ts, 2, fk, fv) == DLC_OK);
    h = header_of(p);
    CHECK(h && meta_str(h, "format") && strcmp(meta_str(h, "format"), "np") == 0);
    CHECK(h && json_object_size(json_object_get(h, "__metadata__")) == 2);
    json_decref(h);
    st = dlc_safetensors_open(p);
    CHECK_OK(st);
    if (st) {
        CHECK(dlc_safetensors_meta_count(st) == 2 && strcmp(dlc_safetensors_meta(st, "format"), "np") == 0);
        dlc_safetensors_close(st);
    }
    dlc_tensor_release(t);
}

/* Files without the pair (no __metadata__ at all, or metadata without "format") load
 * as before: their tensors, and exactly the metadata they have. */
static void test_files_without_format_load(void) {
    char p[256];
    const float data[2] = {1.5f, -2.0f};

    pathf(p, "nometa.safetensors");
    write_file(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 2);
    dlc_safetensors *st = dlc_safetensors_open(p);
    CHECK_OK(st);
    if (st) {
        CHECK(dlc_safetensors_meta_count(st) == 0 && dlc_safetensors_meta(st, "format") == NULL);
        dlc_tensor *w = dlc_safetensors_get(st, "w");
        CHECK_OK(w);
        CHECK(w && w->numel == 2 && w->data[0] == 1.5f && w->data[1] == -2.0f);
        dlc_tensor_release(w);
        dlc_safetensors_close(st);
    }

    pathf(p, "oldmeta.safetensors");
    write_file(p, "{\"__metadata__\":{\"diloco.step\":\"12\"},"
                  "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               data, 2);
    st = dlc_safetensors_open(p);
    CHECK_OK(st);
    if (st) {
        CHECK(dlc_safetensors_meta_count(st) == 1 && dlc_safetensors_meta(st, "format") == NULL);
        CHECK(strcmp(dlc_safetensors_meta(st, "diloco.step"), "12") == 0);
        dlc_tensor *w = dlc_safetensors_get(st, "w");
        CHECK(w && w->data[1] == -2.0f);
        dlc_tensor_release(w);
        dlc_safetensors_close(st);
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dlc_ckfmt_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_saved_files_say_pt();
    test_files_without_format_load();
    const char *files[] = {"plain", "meta", "own", "nometa", "oldmeta"};
    char p[256];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.safetensors", files[i]);
        unlink(pathf(p, name));
    }
    rmdir(dir);
    return check_done("ckpt_format");
}
