/* auth.c - HMAC-SHA256 challenge-response proofs, nonces and secret files (net.h,
 * docs/protocol.md "Authentication").  The secret never leaves this process: only
 * proofs over fresh nonces cross the wire. */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#include "diloco/net.h"

void dlc_auth_proof(const void *secret, size_t secret_len, int server, const uint8_t nc[DLC_PROTO_NONCE],
                    const uint8_t ns[DLC_PROTO_NONCE], uint8_t mac[DLC_PROTO_MAC]) {
    /* label | first nonce | second nonce: the labels differ by role, so a proof is never
     * valid when reflected to its sender; the server's nonce is fresh per connection, so
     * a recorded client proof is worthless on the next one. */
    uint8_t msg[16 + 2 * DLC_PROTO_NONCE];
    const char *label = server ? "diloco-server" : "diloco-client";
    size_t n = strlen(label);
    memcpy(msg, label, n);
    memcpy(msg + n, server ? nc : ns, DLC_PROTO_NONCE);
    memcpy(msg + n + DLC_PROTO_NONCE, server ? ns : nc, DLC_PROTO_NONCE);
    unsigned int len = DLC_PROTO_MAC;
    if (!HMAC(EVP_sha256(), secret, (int)secret_len, msg, n + 2 * DLC_PROTO_NONCE, mac, &len) || len != DLC_PROTO_MAC)
        memset(mac, 0, DLC_PROTO_MAC); /* never equal to a real proof of a nonempty key... */
}

dlc_status dlc_auth_nonce(uint8_t *out, size_t n) {
    if (RAND_bytes(out, (int)n) != 1) return dlc_error(DLC_ERR_IO, "OpenSSL RAND_bytes failed: no randomness for a nonce");
    return DLC_OK;
}

int dlc_auth_equal(const uint8_t a[DLC_PROTO_MAC], const uint8_t b[DLC_PROTO_MAC]) {
    return CRYPTO_memcmp(a, b, DLC_PROTO_MAC) == 0;
}

int64_t dlc_auth_read_secret(const char *path, uint8_t *out, size_t cap) {
    if (!path || !out) return dlc_error(DLC_ERR_ARG, "secret_file: NULL path");
    FILE *f = fopen(path, "rb");
    if (!f) return dlc_error(DLC_ERR_IO, "secret_file \"%s\": cannot open it: %s", path, strerror(errno));
    size_t n = fread(out, 1, cap, f);
    int bad = ferror(f), more = !bad && n == cap && fgetc(f) != EOF;
    fclose(f);
    if (bad) return dlc_error(DLC_ERR_IO, "secret_file \"%s\": cannot read it", path);
    if (more) return dlc_error(DLC_ERR_ARG, "secret_file \"%s\": longer than %zu bytes", path, cap);
    while (n && (out[n - 1] == '\n' || out[n - 1] == '\r')) n--;
    if (n == 0) return dlc_error(DLC_ERR_ARG, "secret_file \"%s\": empty (a run secret must have at least 1 byte)", path);
    return (int64_t)n;
}
