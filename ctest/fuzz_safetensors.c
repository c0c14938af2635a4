/*
 * fuzz_safetensors.c - libFuzzer target for the safetensors reader (core/ckpt.c).
 *
 * The input is the whole file.  It is written to one scratch path per process and
 * opened with dlc_safetensors_open; on success every tensor is read back with
 * dlc_safetensors_get (all four dtypes convert), every metadata key is looked up,
 * and a name taken from the input's last bytes is looked up too (a caller may ask
 * for any name: absent names must fail cleanly and show safely in the message).
 * The header alone (dlc_safetensors_open_header) must agree: it opens exactly when the
 * whole open does, with the same status when neither does (only NOMEM may differ: the
 * header alone allocates less), and the same names and metadata.
 * Failure to open is a normal outcome; the crash, hang, leak and sanitizer reports
 * are the findings.  Built by -DDLC_FUZZ=ON, run by scripts/fuzz.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "diloco/diloco.h"

static char path[64];

static void cleanup(void) { unlink(path); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(path, sizeof path, "/tmp/dlc_fuzz_st.%ld.safetensors", (long)getpid());
    atexit(cleanup);
    return 0;
}

static int write_file(const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!write_file(data, size)) abort(); /* the harness itself is broken */
    dlc_safetensors *hd = dlc_safetensors_open_header(path);
    dlc_status hs = hd ? DLC_OK : dlc_last_status();
    dlc_safetensors *st = dlc_safetensors_open(path);
    dlc_status ws = st ? DLC_OK : dlc_last_status();
    if (hs != ws && hs != DLC_ERR_NOMEM && ws != DLC_ERR_NOMEM) abort();
    if (!st || !hd) {
        dlc_safetensors_close(hd);
        dlc_safetensors_close(st);
        return 0;
    }
    int n = dlc_safetensors_count(st);
    if (dlc_safetensors_count(hd) != n || dlc_safetensors_meta_count(hd) != dlc_safetensors_meta_count(st)) abort();
    for (int i = 0; i < n; i++)
        if (strcmp(dlc_safetensors_name(hd, i), dlc_safetensors_name(st, i)) != 0) abort();
    for (int i = 0; i < dlc_safetensors_meta_count(st); i++)
        if (strcmp(dlc_safetensors_meta_key(hd, i), dlc_safetensors_meta_key(st, i)) != 0) abort();
    dlc_safetensors_close(hd);
    for (int i = 0; i < n; i++) {
        const char *name = dlc_safetensors_name(st, i);
        if (!name || !dlc_safetensors_dtype(st, name)) abort();
        dlc_tensor *t = dlc_safetensors_get(st, name);
        /* only an allocation can fail once the file validated */
        if (!t && dlc_last_status() != DLC_ERR_NOMEM) abort();
        dlc_tensor_release(t);
    }
    if (dlc_safetensors_name(st, n) || dlc_safetensors_name(st, -1)) abort();
    int m = dlc_safetensors_meta_count(st);
    for (int i = 0; i < m; i++) {
        const char *k = dlc_safetensors_meta_key(st, i);
        if (!k || !dlc_safetensors_meta(st, k)) abort();
    }
    /* an arbitrary (maybe absent, maybe not UTF-8) name from the input's tail */
    char probe[200];
    size_t k = size < sizeof probe - 1 ? size : sizeof probe - 1;
    memcpy(probe, data + size - k, k);
    probe[k] = 0;
    dlc_tensor *t = dlc_safetensors_get(st, probe);
    dlc_tensor_release(t);
    (void)dlc_safetensors_meta(st, probe);
    (void)dlc_safetensors_dtype(st, probe);
    dlc_safetensors_close(st);
    return 0;
}
