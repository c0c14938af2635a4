/*
 * test_proto.c - the wire protocol (core/proto.c): every frame type round trips; every
 * hostile frame (a lying prefix, lying msgpack counts, deep nesting, wrong types, a
 * payload that does not fit the layout, ...) is refused with its ERROR code and a
 * message naming the problem, and a valid frame decodes right after.
 *
 *   test_proto                  run the checks
 *   test_proto --corpus DIR     also write every frame tried into DIR, one file each:
 *                               the seed corpus of ctest/fuzz_proto.c
 *                               (ctest/fuzz_corpus/proto is made this way)
 */
#include <stdint.h>
#include "check.h"
#include "diloco/frag.h"
#include "diloco/params.h"

static const char *corpus_dir;
static int corpus_n;

static void corpus_write(const char *name, const uint8_t *buf, size_t len) {
    if (!corpus_dir) return;
    char path[512];
    snprintf(path, sizeof path, "%s/%03d_%s", corpus_dir, corpus_n++, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* The layout every test uses: 3 fragments. */
static const int64_t numel3[3] = {100, 256, 7};
static dlc_proto_layout layout3 = {3, numel3, 363, {128}};

/* The first occurrence of needle[0..n) in hay[0..len), or NULL. */
static uint8_t *find(uint8_t *hay, size_t len, const char *needle, size_t n) {
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(hay + i, needle, n) == 0) return hay + i;
    return NULL;
}

static uint8_t scratch[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX + 65536];

/* Encodes f (+ payload) into scratch, returns the total frame length. */
static size_t encode(const dlc_frame *f) {
    int64_t n = dlc_proto_encode(f, &layout3, scratch, DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX);
    if (n < 0) {
        fprintf(stderr, "encode %s: %s\n", dlc_frame_type_name(f->type), dlc_last_error());
        exit(1);
    }
    if (f->msg.len) memcpy(scratch + n, f->msg.payload, f->msg.len);
    return (size_t)n + f->msg.len;
}

/* One decoder that every refused frame goes through too, then a valid one. */
static dlc_proto_decoder *dec;

/* A decode expected to fail with `why` and a message containing `needle` (with and
 * without the decoder). */
static void refuse(const char *name, const uint8_t *buf, size_t len, int want_why, const char *needle) {
    corpus_write(name, buf, len);
    size_t need = 0;
    int why = -1;
    dlc_frame f;
    dlc_status st = dlc_proto_peek(buf, len, DLC_PROTO_FRAME_MAX_DEFAULT, &need, NULL, &why);
    if (st == DLC_OK && need == len) {
        int dwhy = -1;
        dlc_status dst = dlc_proto_decoder_decode(dec, buf, len, &layout3, &f, &dwhy);
        char dmsg[600];
        snprintf(dmsg, sizeof dmsg, "%s", dlc_last_error());
        st = dlc_proto_decode(buf, len, &layout3, &f, &why);
        CHECK(dst == st && dwhy == why && (st == DLC_OK || strcmp(dmsg, dlc_last_error()) == 0));
    } else if (st == DLC_OK) {
        st = dlc_error(DLC_ERR_FORMAT, "incomplete: %zu of %zu", len, need), why = -2;
    }
    if (st < 0 && why == want_why && strstr(dlc_last_error(), needle)) {
        check_pass++;
    } else {
        check_fail++;
        fprintf(stderr, "%s: expected %s \"%s\", got status %d why %d: %s\n", name,
                dlc_proto_errcode_name(want_why), needle, st, why, st < 0 ? dlc_last_error() : "(decoded)");
    }
    /* ...and the next valid frame decodes. */
    dlc_frame hb;
    dlc_frame_init(&hb, DLC_FRAME_HEARTBEAT);
    hb.msg.learner = 1, hb.msg.steps = 5;
    size_t n = encode(&hb);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &f, NULL) == DLC_OK && f.msg.steps == 5);
    CHECK(dlc_proto_decoder_decode(dec, scratch, n, &layout3, &f, NULL) == DLC_OK && f.msg.steps == 5);
}

/* A decoder gives what dlc_proto_decode gives, frame after frame: small headers in the
 * memory it keeps, a WELCOME of 1024 fragments (16 KiB of msgpack objects) beyond it,
 * then small ones again. */
static void test_decoder(void) {
    dlc_frame f, g, h;
    dlc_frame_init(&f, DLC_FRAME_WELCOME);
    f.hello.proto_min = f.hello.proto_max = 1, f.hello.learner = 3, f.hello.block = 128;
    f.hello.codecs = 1u << DLC_CODEC_F32, f.hello.fragments = DLC_PROTO_FRAGMENTS_MAX, f.hello.endpoints = 2;
    strcpy(f.hello.endpoint[1], "10.0.0.9:7070");
    for (int p = 0; p < DLC_PROTO_FRAGMENTS_MAX; p++) f.hello.owner[p] = (uint16_t)(p % 2);
    dlc_frame hb;
    dlc_frame_init(&hb, DLC_FRAME_HEARTBEAT);
    for (int round = 0; round < 3; round++) {
        hb.msg.learner = 2, hb.msg.steps = 10 + round, hb.msg.tokens = 1000 + round, hb.msg.step_time = 0.25;
        size_t n = encode(&hb);
        CHECK(dlc_proto_decoder_decode(dec, scratch, n, NULL, &g, NULL) == DLC_OK);
        CHECK(dlc_proto_decode(scratch, n, NULL, &h, NULL) == DLC_OK);
        CHECK(g.type == DLC_FRAME_HEARTBEAT && g.msg.steps == 10 + round && g.msg.tokens == 1000 + round &&
              g.msg.step_time == 0.25 && g.msg.learner == 2 && memcmp(&g.msg, &h.msg, sizeof g.msg) == 0);
        n = encode(&f);
        CHECK(dlc_proto_decoder_decode(dec, scratch, n, NULL, &g, NULL) == DLC_OK);
        CHECK(g.type == DLC_FRAME_WELCOME && g.hello.fragments == DLC_PROTO_FRAGMENTS_MAX && g.hello.endpoints == 2 &&
              g.hello.learner == 3 && strcmp(g.hello.endpoint[1], "10.0.0.9:7070") == 0 &&
              g.hello.endpoint[0][0] == '\0');
        int owners_ok = 1;
        for (int p = 0; p < DLC_PROTO_FRAGMENTS_MAX; p++) owners_ok &= g.hello.owner[p] == p % 2;
        CHECK(owners_ok);
    }
    CHECK(dlc_proto_decoder_decode(NULL, scratch, 16, NULL, &g, NULL) == DLC_ERR_ARG);
}

/* A raw frame: prefix declaring `type` with header hdr[0..hlen) and plen payload bytes
 * (zeros).  Returns its length in out. */
static size_t raw(uint8_t *out, int type, const void *hdr, size_t hlen, size_t plen) {
    memcpy(out, "DLCW", 4);
    out[4] = 1, out[5] = (uint8_t)(type + 1), out[6] = out[7] = 0;
    uint32_t length = (uint32_t)(hlen + plen);
    for (int i = 0; i < 4; i++) {
        out[8 + i] = (uint8_t)(length >> (24 - 8 * i));
        out[12 + i] = (uint8_t)(hlen >> (24 - 8 * i));
    }
    memcpy(out + 16, hdr, hlen);
    memset(out + 16 + hlen, 0, plen);
    return 16 + hlen + plen;
}

static void test_roundtrip(void) {
    uint8_t pay[1024];
    for (size_t i = 0; i < sizeof pay; i++) pay[i] = (uint8_t)(i * 7);
    dlc_frame f, g;

    dlc_frame_init(&f, DLC_FRAME_CONTRIBUTION);
    f.msg.learner = 3, f.msg.fragment = 1, f.msg.version = 42, f.msg.steps = 24, f.msg.tokens = 1 << 20;
    f.msg.step_time = 0.125, f.msg.transit = 0.5, f.msg.codec = DLC_CODEC_INT4;
    f.msg.payload = pay, f.msg.len = (size_t)dlc_codec_encoded_size(DLC_CODEC_INT4, &layout3.codec, 256);
    size_t n = encode(&f);
    corpus_write("contribution", scratch, n);
    size_t need;
    dlc_frame_type t;
    CHECK(dlc_proto_peek(scratch, 3, DLC_PROTO_FRAME_MAX_DEFAULT, &need, &t, NULL) == DLC_OK && need == 0);
    CHECK(dlc_proto_peek(scratch, 16, DLC_PROTO_FRAME_MAX_DEFAULT, &need, &t, NULL) == DLC_OK && need == n &&
          t == DLC_FRAME_CONTRIBUTION);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK);
    CHECK(g.type == DLC_FRAME_CONTRIBUTION && g.msg.type == DLC_MSG_CONTRIBUTION && g.msg.learner == 3 &&
          g.msg.fragment == 1 && g.msg.version == 42 && g.msg.steps == 24 && g.msg.tokens == 1 << 20 &&
          g.msg.step_time == 0.125 && g.msg.transit == 0.5 && g.msg.codec == DLC_CODEC_INT4);
    CHECK(g.msg.len == f.msg.len && g.msg.payload == scratch + n - f.msg.len && memcmp(g.msg.payload, pay, g.msg.len) == 0);

    /* a resync: the msg.h FRAGMENT with the resync flag travels as RESYNC */
    dlc_msg m = {0};
    m.type = DLC_MSG_FRAGMENT, m.learner = 2, m.fragment = 2, m.version = 9, m.steps = 100, m.held = -1;
    m.step_time = 0.25, m.flags = DLC_MSG_RESYNC, m.codec = DLC_CODEC_F32, m.payload = pay, m.len = 28;
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK && f.type == DLC_FRAME_RESYNC);
    n = encode(&f);
    corpus_write("resync", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.type == DLC_FRAME_RESYNC &&
          g.msg.type == DLC_MSG_FRAGMENT && g.msg.flags == DLC_MSG_RESYNC && g.msg.held == -1 && g.msg.steps == 100 &&
          g.msg.version == 9 && g.msg.len == 28);
    m.flags = 0, m.held = 1.5;
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK && f.type == DLC_FRAME_FRAGMENT);
    n = encode(&f);
    corpus_write("fragment", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.type == DLC_FRAME_FRAGMENT &&
          g.msg.flags == 0 && g.msg.held == 1.5);

    dlc_frame_init(&f, DLC_FRAME_GRADIENT);
    f.msg.learner = 0, f.msg.version = 7, f.msg.tokens = 512, f.msg.codec = DLC_CODEC_BF16;
    f.msg.payload = pay, f.msg.len = 363 * 2;
    n = encode(&f);
    corpus_write("gradient", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.msg.type == DLC_MSG_GRADIENT &&
          g.msg.len == 726 && g.msg.tokens == 512);
    dlc_frame_init(&f, DLC_FRAME_GRADIENT_AVG);
    f.msg.learner = 5, f.msg.version = 7, f.msg.payload = pay, f.msg.len = 363 * 4 > 1024 ? 0 : 0;
    f.msg.codec = DLC_CODEC_FP8, f.msg.len = 363, f.msg.steps = 9; /* an answer to a REPLAY, ending at 9 */
    n = encode(&f);
    corpus_write("gradient_avg", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.msg.type == DLC_MSG_GRADIENT_AVG &&
          g.msg.learner == 5 && g.msg.version == 7 && g.msg.steps == 9);

    /* a dp learner's request for the averages after its step: a header alone */
    dlc_frame_init(&f, DLC_FRAME_REPLAY);
    CHECK(f.msg.type == DLC_MSG_REPLAY && strcmp(dlc_frame_type_name(DLC_FRAME_REPLAY), "replay") == 0 &&
          !dlc_frame_has_payload(DLC_FRAME_REPLAY) && strcmp(dlc_msg_type_name(DLC_MSG_REPLAY), "replay") == 0);
    f.msg.learner = 2, f.msg.version = 41, f.msg.epoch = 3, f.msg.incarnation = 8;
    n = encode(&f);
    corpus_write("replay", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.type == DLC_FRAME_REPLAY &&
          g.msg.type == DLC_MSG_REPLAY && g.msg.learner == 2 && g.msg.version == 41 && g.msg.epoch == 3 &&
          g.msg.incarnation == 8 && g.msg.len == 0);
    dlc_msg rq = {.type = DLC_MSG_REPLAY, .learner = 1, .version = 2};
    CHECK(dlc_frame_from_msg(&g, &rq) == DLC_OK && g.type == DLC_FRAME_REPLAY && g.msg.version == 2);
    f.msg.payload = pay, f.msg.len = 4, f.msg.codec = DLC_CODEC_F32; /* it carries none */
    CHECK(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch) == DLC_ERR_ARG);
    f.msg.payload = NULL, f.msg.len = 0, f.msg.version = -1;
    CHECK(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch) == DLC_ERR_ARG);

    dlc_frame_init(&f, DLC_FRAME_HEARTBEAT);
    f.msg.learner = 65535, f.msg.steps = INT64_MAX, f.msg.tokens = 0, f.msg.step_time = 1e-9, f.msg.transit = 0;
    n = encode(&f);
    corpus_write("heartbeat", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.msg.type == DLC_MSG_HEARTBEAT &&
          g.msg.learner == 65535 && g.msg.steps == INT64_MAX && g.msg.step_time == 1e-9 && g.msg.payload == NULL);

    dlc_frame_init(&f, DLC_FRAME_BYE);
    f.msg.learner = 4;
    strcpy(f.text, "run over");
    n = encode(&f);
    corpus_write("bye", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.msg.type == DLC_MSG_BYE &&
          g.msg.learner == 4 && strcmp(g.text, "run over") == 0);

    dlc_frame_init(&f, DLC_FRAME_ERROR);
    f.code = DLC_PERR_AUTH;
    memset(f.text, 'x', DLC_PROTO_TEXT_MAX);
    f.text[DLC_PROTO_TEXT_MAX] = '\0';
    n = encode(&f);
    corpus_write("error", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.code == DLC_PERR_AUTH &&
          strlen(g.text) == DLC_PROTO_TEXT_MAX);

    for (int k = 0; k < 3; k++) {
        dlc_frame_type types[3] = {DLC_FRAME_AUTH, DLC_FRAME_AUTH_CHALLENGE, DLC_FRAME_AUTH_PROOF};
        dlc_frame_init(&f, types[k]);
        for (int i = 0; i < 32; i++) f.nonce[i] = (uint8_t)(i + k), f.mac[i] = (uint8_t)(255 - i);
        n = encode(&f);
        corpus_write(dlc_frame_type_name(types[k]), scratch, n);
        CHECK(n <= DLC_PROTO_FRAME_MAX_UNAUTH);
        CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.type == types[k]);
        if (k < 2) CHECK(memcmp(g.nonce, f.nonce, 32) == 0);
        if (k > 0) CHECK(memcmp(g.mac, f.mac, 32) == 0);
    }
}

static dlc_hello server_hello(void) {
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_WELCOME);
    dlc_hello h = f.hello;
    h.proto_min = 1, h.proto_max = 3;
    strcpy(h.run, "charlm-7");
    h.model_hash = 0x0123456789abcdefull, h.plan_hash = 0xfedcba9876543210ull;
    h.learner = 0, h.caps = DLC_CAP_ALL, h.codecs = 0x3f, h.block = 128;
    h.fragments = 3, h.endpoints = 2;
    strcpy(h.endpoint[0], "");
    strcpy(h.endpoint[1], "10.0.0.2:7070");
    h.owner[0] = 0, h.owner[1] = 1, h.owner[2] = 0;
    return h;
}

static void test_hello(void) {
    dlc_frame f, g;
    dlc_frame_init(&f, DLC_FRAME_HELLO);
    f.hello = server_hello();
    f.hello.proto_min = 1, f.hello.proto_max = 2, f.hello.learner = -1, f.hello.caps = DLC_CAP_GRADIENT | DLC_CAP_SHARDED;
    f.hello.fragments = 0, f.hello.endpoints = 0;
    f.hello.codecs = (1u << DLC_CODEC_F32) | (1u << DLC_CODEC_INT4);
    size_t n = encode(&f);
    corpus_write("hello", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK);
    CHECK(g.hello.proto_min == 1 && g.hello.proto_max == 2 && strcmp(g.hello.run, "charlm-7") == 0 &&
          g.hello.model_hash == 0x0123456789abcdefull && g.hello.plan_hash == 0xfedcba9876543210ull &&
          g.hello.learner == -1 && g.hello.caps == (DLC_CAP_GRADIENT | DLC_CAP_SHARDED) && g.hello.block == 128 &&
          g.hello.codecs == f.hello.codecs && g.hello.caps_unknown == 0);

    dlc_hello ours = server_hello(), w;
    int why;
    CHECK(dlc_proto_negotiate(&ours, &g.hello, &w, &why) == DLC_OK && why == DLC_PERR_NONE);
    CHECK(w.proto_min == 2 && w.proto_max == 2 && w.caps == (DLC_CAP_GRADIENT | DLC_CAP_SHARDED) &&
          w.codecs == f.hello.codecs && w.fragments == 3 && w.endpoints == 2 && w.learner == -1);
    /* a shard (more than one endpoint) refuses a learner that does not speak "sharded":
     * it would join with part of the model and wait for the rest for ever */
    dlc_hello unsharded = g.hello, w2;
    unsharded.caps = DLC_CAP_GRADIENT;
    CHECK(dlc_proto_negotiate(&ours, &unsharded, &w2, &why) == DLC_ERR_STATE && why == DLC_PERR_MISMATCH &&
          strstr(dlc_last_error(), "this syncer is shard 1 of 2") && strstr(dlc_last_error(), "\"sharded\""));
    w.learner = 6;
    dlc_frame_init(&f, DLC_FRAME_WELCOME);
    f.hello = w;
    n = encode(&f);
    corpus_write("welcome", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.hello.learner == 6 && g.hello.fragments == 3 &&
          g.hello.endpoints == 2 && strcmp(g.hello.endpoint[1], "10.0.0.2:7070") == 0 && g.hello.owner[1] == 1 &&
          g.hello.owner[2] == 0 && g.hello.proto_min == 2);

    /* refusals name both sides */
    dlc_hello c = ours;
    c.proto_min = 4, c.proto_max = 5;
    CHECK(dlc_proto_negotiate(&ours, &c, &w, &why) == DLC_ERR_STATE && why == DLC_PERR_VERSION &&
          strstr(dlc_last_error(), "the peer speaks 4..5, this server 1..3"));
    c = ours, strcpy(c.run, "other");
    CHECK(dlc_proto_negotiate(&ours, &c, &w, &why) < 0 && why == DLC_PERR_MISMATCH &&
          strstr(dlc_last_error(), "\"other\"") && strstr(dlc_last_error(), "\"charlm-7\""));
    c = ours, c.model_hash ^= 1;
    CHECK(dlc_proto_negotiate(&ours, &c, &w, &why) < 0 && why == DLC_PERR_MISMATCH &&
          strstr(dlc_last_error(), "model layout hash 0123456789abcdee"));
    c = ours, c.plan_hash ^= 2;
    CHECK(dlc_proto_negotiate(&ours, &c, &w, &why) < 0 && why == DLC_PERR_MISMATCH &&
          strstr(dlc_last_error(), "fragment plan hash"));
    c = ours, c.block = 64;
    CHECK(dlc_proto_negotiate(&ours, &c, &w, &why) < 0 && why == DLC_PERR_MISMATCH &&
          strstr(dlc_last_error(), "codec block 64, but this server uses 128"));
    c = ours, c.codecs = 1u << DLC_CODEC_INT4;
    CHECK(dlc_proto_negotiate(&ours, &c, &w, &why) < 0 && why == DLC_PERR_MISMATCH && strstr(dlc_last_error(), "f32"));

    /* a newer peer's unknown capabilities and codecs are counted and ignored; its
     * unknown header keys too */
    static const uint8_t hello_new[] = {
        0x8b,                                     /* map of 11 */
        0xa4, 'p', 'm', 'i', 'n', 0x01,           /* pmin 1 */
        0xa4, 'p', 'm', 'a', 'x', 0x09,           /* pmax 9 */
        0xa3, 'r', 'u', 'n', 0xa0,                /* run "" */
        0xa2, 'm', 'h', 0x05, 0xa2, 'p', 'h', 0x06, 0xa1, 'l', 0xff, /* l -1 */
        0xa4, 'c', 'a', 'p', 's', 0x92, 0xa8, 'g', 'r', 'a', 'd', 'i', 'e', 'n', 't', 0xa4, 'w', 'a', 'r', 'p',
        0xa6, 'c', 'o', 'd', 'e', 'c', 's', 0x92, 0xa3, 'f', '3', '2', 0xa3, 'f', 'p', '4',
        0xa3, 'b', 'l', 'k', 0xcc, 0x80,
        0xa6, 'f', 'u', 't', 'u', 'r', 'e', 0x91, 0x01,    /* unknown key */
        0xa3, 'e', 'p', 's', 0xc0,                /* a welcome's key in a hello: ignored */
    };
    uint8_t buf[256];
    n = raw(buf, DLC_FRAME_HELLO, hello_new, sizeof hello_new, 0);
    corpus_write("hello_newer_peer", buf, n);
    CHECK(dlc_proto_decode(buf, n, NULL, &g, NULL) == DLC_OK && g.hello.proto_max == 9 &&
          g.hello.caps == DLC_CAP_GRADIENT && g.hello.caps_unknown == 1 && g.hello.codecs == 1u && g.hello.learner == -1 &&
          g.hello.model_hash == 5);
}

/* ---- the run description in HELLO (rh, rp) and the fencing stamps (e, i) ---- */

/* The server's run: plan and model hashes as its hello's. */
static dlc_run_params server_run(void) {
    dlc_run_params r = dlc_run_default_params();
    r.fragments = 3, r.plan_hash = 0xfedcba9876543210ull, r.model_hash = 0x0123456789abcdefull;
    return r;
}

/* A client hello stating run r, encoded and decoded as the server reads it. */
static dlc_hello client_hello(const dlc_run_params *r) {
    dlc_frame f, g;
    dlc_frame_init(&f, DLC_FRAME_HELLO);
    f.hello = server_hello();
    f.hello.learner = -1, f.hello.fragments = 0, f.hello.endpoints = 0;
    f.hello.run_hash = dlc_run_hash(r), f.hello.run_params = *r;
    size_t n = encode(&f);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK);
    return g.hello;
}

/* Learner run `r` against the server's: refused with `field` named, both values. */
static void run_refused(const dlc_run_params *r, const char *text) {
    dlc_hello ours = server_hello(), theirs = client_hello(r), w;
    dlc_run_params sr = server_run();
    ours.run_hash = dlc_run_hash(&sr), ours.run_params = sr;
    int why = -1;
    CHECK(dlc_proto_negotiate(&ours, &theirs, &w, &why) == DLC_ERR_STATE && why == DLC_PERR_MISMATCH);
    if (!strstr(dlc_last_error(), text)) {
        fprintf(stderr, "expected \"%s\" in: %s\n", text, dlc_last_error());
        CHECK(0);
    }
}

/* A HELLO's layout ("lt"): each tensor's name-and-shape hash round trips, absent when
 * none is stated; a wrong one is refused naming the field; negotiation names the first
 * tensor that differs, with this side's name and shape when its plan is at hand. */
static void test_hello_layout(void) {
    dlc_frame f, g;
    dlc_frame_init(&f, DLC_FRAME_HELLO);
    f.hello = server_hello();
    f.hello.fragments = 0, f.hello.endpoints = 0;
    size_t n = encode(&f);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.hello.tensors == 0 && g.hello.plan == NULL);
    f.hello.tensors = 3;
    f.hello.tensor_hash[0] = 5, f.hello.tensor_hash[1] = 0xffffffffu, f.hello.tensor_hash[2] = 0;
    n = encode(&f);
    corpus_write("hello_layout", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.hello.tensors == 3 &&
          g.hello.tensor_hash[0] == 5 && g.hello.tensor_hash[1] == 0xffffffffu && g.hello.tensor_hash[2] == 0);
    /* patched in place: [5, ...] -> [-1, ...] */
    uint8_t *at = NULL;
    for (size_t i = 0; i + 4 < n && !at; i++)
        if (scratch[i] == 0xa2 && scratch[i + 1] == 'l' && scratch[i + 2] == 't' && scratch[i + 3] == 0x93) at = scratch + i;
    CHECK(at != NULL);
    if (at) {
        at[4] = 0xff;
        refuse("hello_layout_negative", scratch, n, DLC_PERR_MALFORMED, "header field \"lt\" = -1, expected 0..4294967295");
    }
    /* "lt": [] appended to a hello without it (the map one key longer): refused, not read as none */
    f.hello.tensors = 0;
    n = encode(&f);
    uint8_t hdr[1024], buf[1100];
    size_t hlen = n - 16;
    CHECK(hlen + 4 <= sizeof hdr && (scratch[16] & 0xf0) == 0x80 && (scratch[16] & 0x0f) < 15);
    if (hlen + 4 <= sizeof hdr && (scratch[16] & 0xf0) == 0x80 && (scratch[16] & 0x0f) < 15) {
        memcpy(hdr, scratch + 16, hlen);
        hdr[0]++;
        hdr[hlen++] = 0xa2, hdr[hlen++] = 'l', hdr[hlen++] = 't', hdr[hlen++] = 0x90;
        size_t m = raw(buf, DLC_FRAME_HELLO, hdr, hlen, 0);
        refuse("hello_layout_empty", buf, m, DLC_PERR_MALFORMED, "header field \"lt\": 0 tensors, expected 1..1024");
    }
    f.hello.tensors = DLC_PROTO_TENSORS_MAX + 1;
    CHECK(dlc_proto_encode(&f, NULL, scratch, DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX) == DLC_ERR_ARG &&
          strstr(dlc_last_error(), "1025 tensors, expected 0..1024"));

    /* negotiation: this side's plan names its tensor */
    float wv[12] = {0}, bv[3] = {0};
    int64_t ws[2] = {3, 4}, bs[1] = {3};
    dlc_tensor *ts[2] = {dlc_tensor_from_data(2, ws, wv), dlc_tensor_from_data(1, bs, bv)};
    const char *names[2] = {"w", "b"};
    dlc_params *params = dlc_params_new(2, names, ts);
    dlc_plan *plan = dlc_plan_new(params, NULL);
    CHECK_OK(plan);
    if (!plan) return;
    CHECK(dlc_plan_tensors(plan) == 2 && strcmp(dlc_plan_tensor_desc(plan, 0), "'w' [3, 4]") == 0 &&
          strcmp(dlc_plan_tensor_desc(plan, 1), "'b' [3]") == 0 && dlc_plan_tensor_desc(plan, 2) == NULL &&
          dlc_plan_tensor_hash(plan, 2) == 0 && dlc_plan_tensor_hash(plan, 0) != dlc_plan_tensor_hash(plan, 1));
    dlc_hello ours = server_hello(), c, w;
    ours.plan = plan, ours.tensors = 2;
    ours.tensor_hash[0] = dlc_plan_tensor_hash(plan, 0), ours.tensor_hash[1] = dlc_plan_tensor_hash(plan, 1);
    int why;
    c = ours, c.plan = NULL, c.model_hash ^= 1, c.tensor_hash[1] ^= 1;
    CHECK(dlc_proto_negotiate(&ours, &c, &w, &why) < 0 && why == DLC_PERR_MISMATCH &&
          strstr(dlc_last_error(), "the layout differs at tensor 1: this server's is 'b' [3]"));
    c = ours, c.model_hash ^= 1, c.tensors = 1;
    CHECK(dlc_proto_negotiate(&ours, &c, &w, &why) < 0 &&
          strstr(dlc_last_error(), "differs at tensor 1: the learner states 1 tensors, this server's is 'b' [3]"));
    c = ours, c.model_hash ^= 1, c.tensors = 3, c.tensor_hash[2] = 9;
    CHECK(dlc_proto_negotiate(&ours, &c, &w, &why) < 0 &&
          strstr(dlc_last_error(), "differs at tensor 2: this server's has 2 tensors"));
    ours.plan = NULL, c = ours, c.model_hash ^= 1, c.tensor_hash[0] ^= 1;
    CHECK(dlc_proto_negotiate(&ours, &c, &w, &why) < 0 &&
          strstr(dlc_last_error(), "differs at tensor 0: this server's is another name or shape"));
    c = ours, c.model_hash ^= 1, c.tensors = 0; /* an older peer: the hashes only */
    CHECK(dlc_proto_negotiate(&ours, &c, &w, &why) < 0 && !strstr(dlc_last_error(), "differs at tensor"));
    dlc_plan_free(plan);
    dlc_params_free(params);
    dlc_tensor_release(ts[0]);
    dlc_tensor_release(ts[1]);
}

static void test_hello_run(void) {
    dlc_run_params sr = server_run();
    dlc_hello ours = server_hello(), w;
    ours.run_hash = dlc_run_hash(&sr), ours.run_params = sr;
    /* the same run: welcome, which states the server's run back */
    dlc_hello theirs = client_hello(&sr);
    CHECK(theirs.run_hash == ours.run_hash && dlc_run_diff(&sr, &theirs.run_params, NULL, 0) == 0);
    int why = -1;
    CHECK(dlc_proto_negotiate(&ours, &theirs, &w, &why) == DLC_OK && why == DLC_PERR_NONE);
    CHECK(w.run_hash == ours.run_hash);
    dlc_frame f, g;
    dlc_frame_init(&f, DLC_FRAME_WELCOME);
    f.hello = w, f.hello.learner = 1;
    size_t n = encode(&f);
    corpus_write("welcome_run", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.hello.run_hash == ours.run_hash &&
          dlc_run_diff(&sr, &g.hello.run_params, NULL, 0) == 0 && g.hello.owner[1] == 1);

    /* each field that differs refuses the learner, named with both values */
    dlc_run_params r = sr;
    r.tau = 3;
    run_refused(&r, "run description differs: sync.tau: 2 here, 3 in the learner's run");
    r = sr, r.H = 30;
    run_refused(&r, "sync.H: 24 here, 30 in the learner's run");
    r = sr, r.blocking = 1;
    run_refused(&r, "sync.blocking: false here, true in the learner's run");
    r = sr, r.dp = 1, r.preset = DLC_PRESET_DP, r.fragments = 1;
    run_refused(&r, "sync.dp: false here, true in the learner's run");
    r = sr, r.codec_up = DLC_CODEC_INT8;
    run_refused(&r, "sync.codec: f32 here, int8 in the learner's run");
    r = sr, r.outer_lr = 0.5;
    run_refused(&r, "outer.lr: 0.7 here, 0.5 in the learner's run");
    /* hashes that differ with every known field equal: a newer peer's field */
    theirs = client_hello(&sr);
    theirs.run_hash ^= 1;
    CHECK(dlc_proto_negotiate(&ours, &theirs, &w, &why) == DLC_ERR_STATE && why == DLC_PERR_MISMATCH &&
          strstr(dlc_last_error(), "though every field this build knows agrees"));
    /* an older peer states no run: compared as before, on mh, ph and blk */
    theirs = client_hello(&sr);
    theirs.run_hash = 0;
    CHECK(dlc_proto_negotiate(&ours, &theirs, &w, &why) == DLC_OK);
    dlc_frame_init(&f, DLC_FRAME_HELLO);
    f.hello = server_hello();
    f.hello.learner = -1, f.hello.fragments = 0, f.hello.endpoints = 0;
    n = encode(&f);
    CHECK(find(scratch, n, "\xa2rh", 3) == NULL && find(scratch, n, "\xa2rp", 3) == NULL);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.hello.run_hash == 0);
    /* a run that fails its check is not encoded */
    f.hello.run_hash = 1, f.hello.run_params = sr, f.hello.run_params.tau = 24;
    CHECK(dlc_proto_encode(&f, NULL, scratch, sizeof scratch) == DLC_ERR_ARG &&
          strstr(dlc_last_error(), "sync.tau = 24"));

    /* hostile descriptions: each refused, named */
    f.hello.run_hash = dlc_run_hash(&sr), f.hello.run_params = sr;
    size_t good = encode(&f);
    static uint8_t orig[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX], buf[sizeof orig];
    CHECK(good <= sizeof buf);
    memcpy(orig, scratch, good); /* refuse() encodes into scratch */
    struct {
        const char *name, *find, *put;
        size_t len;
        const char *needle;
    } cases[] = {
        {"hello_rh_without_rp", "\xa2rp", "\xa2rq", 3, "hello with \"rh\" but without \"rp\""},
        {"hello_rp_wrong_type", "\xa8sync.tau\x02", "\xa8sync.tau\xc3", 10, "sync.tau is a boolean, expected a 32-bit integer"},
        {"hello_rp_unknown_enum", "balanced", "balancex", 8, "sync.plan = \"balancex\": not one of its names"},
        {"hello_rp_missing_field", "\xa9sync.ring", "\xa9sync.rinG", 10, "\"rp\" without sync.ring"},
        {"hello_rp_unrunnable", "\xa8sync.tau\x02", "\xa8sync.tau\x18", 10, "\"rp\": run: sync.tau = 24: expected"},
        {"hello_rp_flag_as_int", "\xadsync.blocking\xc2", "\xadsync.blocking\x00", 15, "sync.blocking is a integer, expected a boolean"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(buf, orig, good);
        uint8_t *at = find(buf, good, cases[c].find, cases[c].len);
        CHECK(at != NULL);
        if (!at) continue;
        memcpy(at, cases[c].put, cases[c].len);
        refuse(cases[c].name, buf, good, DLC_PERR_MALFORMED, cases[c].needle);
    }
    /* rh = 0 is never written: refused */
    memcpy(buf, orig, good);
    uint8_t *at = find(buf, good, "\xa2rh\xcf", 4);
    CHECK(at != NULL);
    if (at) {
        memset(at + 4, 0, 8);
        refuse("hello_rh_zero", buf, good, DLC_PERR_MALFORMED, "nonzero unsigned 64-bit run hash");
    }
}

static void test_fence_stamps(void) {
    dlc_frame f, g;
    dlc_frame_init(&f, DLC_FRAME_HEARTBEAT);
    f.msg.learner = 2, f.msg.steps = 5, f.msg.tokens = 9, f.msg.epoch = 3, f.msg.incarnation = 7;
    size_t n = encode(&f);
    corpus_write("heartbeat_stamped", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.msg.epoch == 3 && g.msg.incarnation == 7);
    /* an older peer's frame without the stamps: 0, not stated */
    uint8_t *e = find(scratch, n, "\xa1" "e\x03", 3), *i = find(scratch, n, "\xa1i\x07", 3);
    CHECK(e && i);
    if (e && i) {
        e[1] = 'x', i[1] = 'y';
        CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.msg.epoch == 0 && g.msg.incarnation == 0 &&
              g.msg.steps == 5);
        e[1] = 'e', i[1] = 'i';
        e[2] = 0xff; /* -1 */
        refuse("heartbeat_negative_epoch", scratch, n, DLC_PERR_MALFORMED, "\"e\" = -1");
    }
    /* every message type carries them */
    uint8_t pay[64] = {0};
    dlc_msg m = {.type = DLC_MSG_FRAGMENT, .learner = 1, .fragment = 2, .version = 4, .codec = DLC_CODEC_F32,
                 .payload = pay, .len = 28, .epoch = 2, .incarnation = 5, .flags = DLC_MSG_RESYNC};
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK);
    n = encode(&f);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.type == DLC_FRAME_RESYNC &&
          g.msg.epoch == 2 && g.msg.incarnation == 5);
    f.msg.epoch = -1;
    CHECK(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch) == DLC_ERR_ARG && strstr(dlc_last_error(), "epoch -1"));
}

/* A RESYNC carries the CRC-32 of its payload ("ck", docs/protocol.md "Resync checksum"):
 * the golden value is Python's zlib.crc32(bytes(range(28))); a payload changed on the way
 * is refused naming both values; an older peer's resync without "ck" is read unchecked. */
static void test_resync_crc(void) {
    uint8_t pay[28];
    for (int i = 0; i < 28; i++) pay[i] = (uint8_t)i;
    dlc_msg m = {.type = DLC_MSG_FRAGMENT, .learner = 1, .fragment = 2, .version = 6, .codec = DLC_CODEC_F32,
                 .payload = pay, .len = 28, .flags = DLC_MSG_RESYNC};
    dlc_frame f, g;
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK && f.type == DLC_FRAME_RESYNC);
    f.crc = 0x12345678; /* ignored: the encoder computes it */
    size_t n = encode(&f);
    corpus_write("resync_crc", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.has_crc == 1 && g.crc == 0xd708085du);
    uint8_t buf[512];
    memcpy(buf, scratch, n);
    buf[n - 5] ^= 0x01; /* one bit of the payload */
    /* ea6821ed: Python's zlib.crc32 of the same bytes with bit 0 of byte 23 flipped */
    refuse("resync_crc_wrong", buf, n, DLC_PERR_MALFORMED,
           "resync of fragment 2 version 6: its payload's crc32 is ea6821ed, but the header says d708085d (\"ck\")");
    buf[n - 5] ^= 0x01;
    uint8_t *ck = find(buf, n, "\xa2" "ck", 3);
    CHECK(ck != NULL);
    if (ck) {
        CHECK(ck[3] == 0xce); /* uint32 */
        ck[3 + 4] ^= 0x01; /* the stated value, off by one bit */
        refuse("resync_crc_header_wrong", buf, n, DLC_PERR_MALFORMED, "but the header says d708085c");
        ck[3 + 4] ^= 0x01;
        ck[2] = 'x'; /* an older peer: no "ck", the payload is read unchecked */
        buf[n - 5] ^= 0x01;
        CHECK(dlc_proto_decode(buf, n, &layout3, &g, NULL) == DLC_OK && g.has_crc == 0 && g.msg.len == 28);
        buf[n - 5] ^= 0x01;
        ck[2] = 'k';
        ck[3] = 0xd2, ck[4] = ck[5] = ck[6] = ck[7] = 0xff; /* int32 -1 */
        refuse("resync_crc_negative", buf, n, DLC_PERR_MALFORMED, "\"ck\" = -1");
    }
    /* a plain FRAGMENT carries no checksum: its "ck" (a newer peer's?) is ignored */
    m.flags = 0;
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK && f.type == DLC_FRAME_FRAGMENT);
    n = encode(&f);
    CHECK(find(scratch, n, "\xa2" "ck", 3) == NULL);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.has_crc == 0);
}

/* A FRAGMENT carries the round's age ("ra", optional): read back as sent; a negative one
 * is refused by the encoder and the decoder, naming the key; an older syncer's FRAGMENT
 * without it reads as 0, not stated; a RESYNC does not carry it. */
static void test_fragment_age(void) {
    uint8_t pay[28] = {0};
    dlc_msg m = {.type = DLC_MSG_FRAGMENT, .learner = 1, .fragment = 2, .version = 6, .codec = DLC_CODEC_F32,
                 .payload = pay, .len = 28, .held = 0.5, .age = 2.25};
    dlc_frame f, g;
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK && f.type == DLC_FRAME_FRAGMENT);
    size_t n = encode(&f);
    corpus_write("fragment_age", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.msg.age == 2.25 && g.msg.held == 0.5);
    uint8_t buf[512];
    memcpy(buf, scratch, n);
    uint8_t *ra = find(buf, n, "\xa2" "ra", 3);
    CHECK(ra != NULL && ra[3] == 0xcb); /* float 64 */
    if (ra) {
        ra[4] |= 0x80; /* -2.25 */
        refuse("fragment_age_negative", buf, n, DLC_PERR_MALFORMED, "\"ra\"");
        ra[4] &= 0x7f;
        ra[2] = 'x'; /* an older syncer: no "ra" */
        CHECK(dlc_proto_decode(buf, n, &layout3, &g, NULL) == DLC_OK && g.msg.age == 0 && g.msg.held == 0.5);
    }
    f.msg.age = -1;
    CHECK(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch) == DLC_ERR_ARG && strstr(dlc_last_error(), "age -1"));
    m.flags = DLC_MSG_RESYNC;
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK && f.type == DLC_FRAME_RESYNC);
    n = encode(&f);
    CHECK(find(scratch, n, "\xa2" "ra", 3) == NULL);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.msg.age == 0);
}

/* A RESYNC answering a dp learner's REPLAY of step k carries k ("rq", optional): read back
 * as 1 + k in `answers`; a resync that answers none has no "rq" and reads 0; a negative one
 * is refused by the decoder naming the key, and the encoder refuses `answers` < 0 and on
 * any frame but a RESYNC. */
static void test_resync_answers(void) {
    uint8_t pay[28] = {0};
    dlc_msg m = {.type = DLC_MSG_FRAGMENT, .learner = 1, .fragment = 2, .version = 0, .steps = 9,
                 .codec = DLC_CODEC_F32, .payload = pay, .len = 28, .flags = DLC_MSG_RESYNC, .answers = 7 + 1};
    dlc_frame f, g;
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK && f.type == DLC_FRAME_RESYNC);
    size_t n = encode(&f);
    corpus_write("resync_answers", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.msg.answers == 8 && g.msg.steps == 9);
    uint8_t buf[512];
    memcpy(buf, scratch, n);
    uint8_t *rq = find(buf, n, "\xa2" "rq", 3);
    CHECK(rq != NULL && rq[3] == 0x07); /* positive fixint: the step itself */
    if (rq) {
        rq[3] = 0xff; /* -1 */
        refuse("resync_answers_negative", buf, n, DLC_PERR_MALFORMED, "\"rq\"");
        rq[3] = 0x00; /* a REPLAY of step 0 */
        CHECK(dlc_proto_decode(buf, n, &layout3, &g, NULL) == DLC_OK && g.msg.answers == 1);
        rq[2] = 'x'; /* an older syncer's resync: answers none */
        CHECK(dlc_proto_decode(buf, n, &layout3, &g, NULL) == DLC_OK && g.msg.answers == 0);
    }
    m.answers = 0; /* a join's or a refusal's resync: no "rq" */
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK);
    n = encode(&f);
    CHECK(find(scratch, n, "\xa2" "rq", 3) == NULL);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.msg.answers == 0);
    f.msg.answers = -1;
    CHECK(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch) == DLC_ERR_ARG &&
          strstr(dlc_last_error(), "answers -1"));
    m.flags = 0, m.answers = 3; /* a FRAGMENT answers no REPLAY */
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK && f.type == DLC_FRAME_FRAGMENT);
    CHECK(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch) == DLC_ERR_ARG &&
          strstr(dlc_last_error(), "only a RESYNC answers a REPLAY"));
}

/* ---- standbys: REPLICA, REPLICA_ACK, the "standby" capability (docs/protocol.md) ---- */

/* Sets the prefix's length (bytes after the prefix) of frame buf to `length`. */
static void set_length(uint8_t *buf, uint32_t length) {
    for (int i = 0; i < 4; i++) buf[8 + i] = (uint8_t)(length >> (24 - 8 * i));
}

/* A REPLICA of layout3's fragment p (n floats) at version v with `count` records built
 * from the index, into scratch through dlc_replica_pack; returns the frame's length. */
static dlc_replica_record rec_of(int i) {
    return (dlc_replica_record){.learner = i * 3 + 1, .new_steps = 0.25 * (i + 1), .base_version = 40 + i,
                                .steps = 24 + i, .tokens = (int64_t)1 << (33 + i % 20)};
}
static uint8_t replica_pay[2 * 256 * 4 + 320 * DLC_PROTO_REPLICA_RECORD];
static size_t replica_frame(int p, int64_t v, uint32_t flags, int count) {
    int64_t n = numel3[p];
    float theta[256], mom[256];
    for (int64_t i = 0; i < n; i++) theta[i] = (float)i * 0.5f - 3, mom[i] = -(float)i / 7;
    dlc_replica_record recs[320];
    for (int i = 0; i < count; i++) recs[i] = rec_of(i);
    int64_t len = dlc_replica_pack(replica_pay, sizeof replica_pay, n, flags, theta,
                                   (flags & DLC_MSG_REPLICA_MOMENTUM) ? mom : NULL, recs, count);
    CHECK(len == dlc_replica_payload_size(n, flags, count));
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_REPLICA);
    f.msg.fragment = p, f.msg.version = v, f.msg.epoch = 3, f.msg.steps = count, f.msg.flags = flags;
    f.msg.payload = replica_pay, f.msg.len = (size_t)len;
    return encode(&f);
}

/* The record layout against bytes written by hand from docs/protocol.md's table: an
 * independent check of the offsets, the little-endian order and the f64 bits. */
static void test_replica_bytes(void) {
    /* fragment 2 of layout3: 7 floats, no momentum, one record */
    uint8_t want[7 * 4 + 40];
    memset(want, 0, sizeof want);
    for (int i = 0; i < 7; i++) want[4 * i + 2] = 0x80, want[4 * i + 3] = 0x3f; /* 1.0f = 0x3f800000 */
    uint8_t *r = want + 28;
    r[0] = 0x02;                                          /* learner 2 (0-based) */
    /* r[4..8): reserved, 0 */
    r[8 + 6] = 0xe0, r[8 + 7] = 0x3f;                    /* new_steps 0.5 = 0x3fe0000000000000 */
    r[16] = 0x05;                                         /* base_version 5 */
    for (int i = 0; i < 8; i++) r[24 + i] = (uint8_t)(8 - i); /* steps 0x0102030405060708 */
    r[32 + 5] = 0x01;                                     /* tokens 1 << 40 */
    float ones[7] = {1, 1, 1, 1, 1, 1, 1};
    dlc_replica_record rec = {.learner = 2, .new_steps = 0.5, .base_version = 5, .steps = 0x0102030405060708ll,
                              .tokens = (int64_t)1 << 40};
    uint8_t got[sizeof want + 8];
    CHECK(dlc_replica_payload_size(7, 0, 1) == (int64_t)sizeof want);
    CHECK(dlc_replica_pack(got, sizeof got, 7, 0, ones, NULL, &rec, 1) == (int64_t)sizeof want);
    CHECK(memcmp(got, want, sizeof want) == 0);
    dlc_replica_record back;
    CHECK(dlc_replica_record_read(want, sizeof want, 7, 0, 0, &back) == DLC_OK && back.learner == 2 &&
          back.new_steps == 0.5 && back.base_version == 5 && back.steps == 0x0102030405060708ll &&
          back.tokens == (int64_t)1 << 40);
    float th[7] = {0};
    CHECK(dlc_replica_unpack(want, sizeof want, 7, 0, th, NULL) == DLC_OK && memcmp(th, ones, sizeof th) == 0);
    /* the same with momentum: the record moves by 4n, momentum (-2.0f = 0xc0000000) between */
    uint8_t want2[7 * 8 + 40];
    memcpy(want2, want, 28);
    memset(want2 + 28, 0, 28);
    for (int i = 0; i < 7; i++) want2[28 + 4 * i + 3] = 0xc0;
    memcpy(want2 + 56, r, 40);
    float m2[7] = {-2, -2, -2, -2, -2, -2, -2}, mb[7] = {0};
    CHECK_SFAILS(dlc_replica_pack(got, sizeof got, 7, DLC_MSG_REPLICA_MOMENTUM, ones, m2, &rec, 1), DLC_ERR_RANGE,
                 "a payload of 96 bytes in a buffer of 76");
    uint8_t got2[sizeof want2];
    CHECK(dlc_replica_pack(got2, sizeof got2, 7, DLC_MSG_REPLICA_MOMENTUM, ones, m2, &rec, 1) == (int64_t)sizeof want2);
    CHECK(memcmp(got2, want2, sizeof want2) == 0);
    CHECK(dlc_replica_unpack(want2, sizeof want2, 7, DLC_MSG_REPLICA_MOMENTUM, th, mb) == DLC_OK &&
          memcmp(mb, m2, sizeof mb) == 0 && memcmp(th, ones, sizeof th) == 0);
    CHECK(dlc_replica_record_read(want2, sizeof want2, 7, DLC_MSG_REPLICA_MOMENTUM, 0, &back) == DLC_OK &&
          back.steps == 0x0102030405060708ll);
    /* write: record 0 rewritten in place reads back; the reserved bytes stay 0 */
    dlc_replica_record other = {.learner = 65535, .new_steps = 0, .base_version = 0, .steps = 0, .tokens = 0};
    CHECK(dlc_replica_record_write(want2, sizeof want2, 7, DLC_MSG_REPLICA_MOMENTUM, 0, &other) == DLC_OK);
    CHECK(want2[56] == 0xff && want2[57] == 0xff && want2[58] == 0 && want2[59] == 0 && want2[60] == 0);
    CHECK(dlc_replica_record_read(want2, sizeof want2, 7, DLC_MSG_REPLICA_MOMENTUM, 0, &back) == DLC_OK &&
          back.learner == 65535 && back.tokens == 0);

    /* the helpers' refusals, named */
    CHECK(dlc_replica_payload_size(100, 0, 3) == 520 && dlc_replica_payload_size(100, DLC_MSG_REPLICA_MOMENTUM, 0) == 800 &&
          dlc_replica_payload_size(0, DLC_MSG_REPLICA_WHOLE, 0) == 0);
    CHECK_SFAILS(dlc_replica_payload_size(100, 0, DLC_PROTO_REPLICA_CONTRIBS_MAX + 1), DLC_ERR_ARG,
                 "4097 contributor records, expected 0..4096");
    CHECK_SFAILS(dlc_replica_payload_size(100, 0x1, 0), DLC_ERR_ARG, "flags 0x1, expected those of 0x6");
    CHECK_SFAILS(dlc_replica_payload_size(-1, 0, 0), DLC_ERR_ARG, "-1 floats");
    CHECK_SFAILS(dlc_replica_record_read(want, sizeof want, 7, 0, 1, &back), DLC_ERR_RANGE, "records 0..0");
    CHECK_SFAILS(dlc_replica_record_read(want, sizeof want - 1, 7, 0, 0, &back), DLC_ERR_FORMAT,
                 "a payload of 67 bytes is not 28 bytes of floats");
    CHECK_SFAILS(dlc_replica_unpack(want, sizeof want, 7, DLC_MSG_REPLICA_MOMENTUM, th, mb), DLC_ERR_FORMAT,
                 "is not 56 bytes of floats (7, with momentum)");
    want[28 + 4] = 1; /* the reserved field */
    CHECK_SFAILS(dlc_replica_record_read(want, sizeof want, 7, 0, 0, &back), DLC_ERR_FORMAT,
                 "replica record 0: reserved field 0x00000001 at byte 4, must be 0");
    dlc_replica_record neg = rec;
    neg.learner = -1;
    CHECK_SFAILS(dlc_replica_pack(got, sizeof got, 7, 0, ones, NULL, &neg, 1), DLC_ERR_ARG,
                 "contributor record 0: learner -1, expected 0..65535");
    CHECK_SFAILS(dlc_replica_record_write(want2, sizeof want2, 7, DLC_MSG_REPLICA_MOMENTUM, 0, &neg), DLC_ERR_ARG,
                 "learner -1");
    neg = rec, neg.new_steps = NAN;
    CHECK_SFAILS(dlc_replica_pack(got, sizeof got, 7, 0, ones, NULL, &neg, 1), DLC_ERR_ARG, "new_steps nan");
    neg = rec, neg.tokens = -5;
    CHECK_SFAILS(dlc_replica_pack(got, sizeof got, 7, 0, ones, NULL, &neg, 1), DLC_ERR_ARG, "tokens -5");
    CHECK_SFAILS(dlc_replica_pack(got, 10, 7, 0, ones, NULL, &rec, 1), DLC_ERR_RANGE, "68 bytes in a buffer of 10");
    CHECK_SFAILS(dlc_replica_pack(got, sizeof got, 7, DLC_MSG_REPLICA_MOMENTUM, ones, NULL, &rec, 1), DLC_ERR_ARG,
                 "momentum NULL with flags 0x2");
    CHECK_SFAILS(dlc_replica_pack(got, sizeof got, 7, 0, ones, m2, &rec, 1), DLC_ERR_ARG, "momentum given with flags 0x0");
}

static void test_replica(void) {
    dlc_frame f, g;
    CHECK(strcmp(dlc_frame_type_name(DLC_FRAME_REPLICA), "replica") == 0 &&
          strcmp(dlc_frame_type_name(DLC_FRAME_REPLICA_ACK), "replica_ack") == 0 &&
          dlc_frame_has_payload(DLC_FRAME_REPLICA) && !dlc_frame_has_payload(DLC_FRAME_REPLICA_ACK) &&
          strcmp(dlc_msg_type_name(DLC_MSG_REPLICA), "replica") == 0 &&
          strcmp(dlc_msg_type_name(DLC_MSG_REPLICA_ACK), "replica_ack") == 0);
    dlc_frame_init(&f, DLC_FRAME_REPLICA);
    CHECK(f.msg.type == DLC_MSG_REPLICA);
    dlc_frame_init(&f, DLC_FRAME_REPLICA_ACK);
    CHECK(f.msg.type == DLC_MSG_REPLICA_ACK);

    /* a merge of fragment 0 (100 floats) with 3 contributors, no momentum */
    size_t n = replica_frame(0, 7, 0, 3);
    corpus_write("replica", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK);
    CHECK(g.type == DLC_FRAME_REPLICA && g.msg.type == DLC_MSG_REPLICA && g.msg.fragment == 0 && g.msg.version == 7 &&
          g.msg.epoch == 3 && g.msg.steps == 3 && g.msg.flags == 0 && g.msg.len == 400 + 3 * 40 &&
          memcmp(g.msg.payload, replica_pay, g.msg.len) == 0);
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        dlc_replica_record r, want = rec_of(i);
        ok &= dlc_replica_record_read(g.msg.payload, g.msg.len, 100, g.msg.flags, i, &r) == DLC_OK &&
              r.learner == want.learner && r.new_steps == want.new_steps && r.base_version == want.base_version &&
              r.steps == want.steps && r.tokens == want.tokens;
    }
    CHECK(ok);
    float th[256];
    CHECK(dlc_replica_unpack(g.msg.payload, g.msg.len, 100, 0, th, NULL) == DLC_OK && th[0] == -3 && th[99] == 46.5f);
    /* with momentum (fragment 1, 256 floats), and a catch-up: the whole fragment, no contributors */
    n = replica_frame(1, 12, DLC_MSG_REPLICA_MOMENTUM, 2);
    corpus_write("replica_momentum", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK && g.msg.flags == DLC_MSG_REPLICA_MOMENTUM &&
          g.msg.len == 2 * 256 * 4 + 2 * 40 && g.msg.steps == 2);
    float mo[256];
    CHECK(dlc_replica_unpack(g.msg.payload, g.msg.len, 256, g.msg.flags, th, mo) == DLC_OK && th[255] == 124.5f &&
          mo[7] == -1.0f);
    n = replica_frame(2, 30, DLC_MSG_REPLICA_MOMENTUM | DLC_MSG_REPLICA_WHOLE, 0);
    corpus_write("replica_whole", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, &layout3, &g, NULL) == DLC_OK &&
          g.msg.flags == (DLC_MSG_REPLICA_MOMENTUM | DLC_MSG_REPLICA_WHOLE) && g.msg.version == 30 &&
          g.msg.steps == 0 && g.msg.len == 56);
    /* from a msg.h message */
    dlc_msg m = {.type = DLC_MSG_REPLICA, .fragment = 2, .version = 30, .epoch = 3, .payload = replica_pay, .len = 28};
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK && f.type == DLC_FRAME_REPLICA);

    /* refusals: each names what was wrong, then the next frame decodes (refuse) */
    static uint8_t buf[sizeof scratch];
    n = replica_frame(0, 7, 0, 1);
    memcpy(buf, scratch, n);
    uint32_t length = (uint32_t)(n - DLC_PROTO_PREFIX);
    set_length(buf, length - 4); /* 4 payload bytes short */
    refuse("replica_payload_short", buf, n - 4, DLC_PERR_MALFORMED,
           "replica payload of 436 bytes, but fragment 0's 100 floats and 1 contributor records of 40 bytes take 440 bytes");
    set_length(buf, length);
    uint8_t *fl = find(buf, n, "\xa2" "fl\x00", 4);
    CHECK(fl != NULL);
    if (fl) {
        fl[3] = DLC_MSG_REPLICA_MOMENTUM; /* says momentum, carries none */
        refuse("replica_momentum_missing", buf, n, DLC_PERR_MALFORMED,
               "replica payload of 440 bytes, but fragment 0's 100 floats with momentum and 1 contributor records of 40 "
               "bytes take 840 bytes");
        fl[3] = 0x08;
        refuse("replica_unknown_flags", buf, n, DLC_PERR_MALFORMED, "\"fl\" = 0x8: unknown flag bits (a replica takes those of 0x6)");
        fl[3] = DLC_MSG_RESYNC;
        refuse("replica_resync_flag", buf, n, DLC_PERR_MALFORMED, "\"fl\" = 0x1: unknown flag bits");
        fl[3] = 0;
    }
    uint8_t *rec = buf + n - 40; /* the one record */
    rec[4] = 0x01;
    refuse("replica_reserved", buf, n, DLC_PERR_MALFORMED,
           "replica of fragment 0 version 7: contributor record 0: reserved field 0x00000001 at byte 4, must be 0");
    rec[4] = 0;
    rec[0] = rec[1] = rec[2] = rec[3] = 0xff; /* learner -1 */
    refuse("replica_learner_negative", buf, n, DLC_PERR_MALFORMED, "contributor record 0: learner -1, expected 0..65535");
    rec[0] = 0x00, rec[1] = 0x00, rec[2] = 0x01, rec[3] = 0x00; /* 65536 */
    refuse("replica_learner_65536", buf, n, DLC_PERR_MALFORMED, "learner 65536");
    rec[2] = 0;
    memcpy(rec + 8, "\x00\x00\x00\x00\x00\x00\xf8\x7f", 8); /* new_steps NaN */
    refuse("replica_new_steps_nan", buf, n, DLC_PERR_MALFORMED, "new_steps nan");
    memset(rec + 8, 0, 8);
    rec[39] = 0x80; /* tokens < 0 */
    refuse("replica_tokens_negative", buf, n, DLC_PERR_MALFORMED, "none may be negative");
    rec[39] = 0;
    CHECK(dlc_proto_decode(buf, n, &layout3, &g, NULL) == DLC_OK); /* restored */
    /* the count: 300 records (uint16 on the wire) made 4097 */
    n = replica_frame(0, 7, 0, 300);
    memcpy(buf, scratch, n);
    uint8_t *s = find(buf, n, "\xa1s\xcd\x01\x2c", 5);
    CHECK(s != NULL);
    if (s) {
        s[3] = 0x10, s[4] = 0x01;
        refuse("replica_count_4097", buf, n, DLC_PERR_MALFORMED,
               "replica of fragment 0 version 7: 4097 contributor records (\"s\"), expected 0..4096");
        s[3] = 0x01, s[4] = 0x2d; /* 301: the payload holds 300 */
        refuse("replica_count_wrong", buf, n, DLC_PERR_MALFORMED, "replica payload of 12400 bytes, but fragment 0's 100 "
               "floats and 301 contributor records of 40 bytes take 12440 bytes");
    }
    /* a fragment the layout does not have */
    dlc_proto_layout four = {4, (const int64_t[]){100, 256, 7, 7}, 370, {128}};
    dlc_frame_init(&f, DLC_FRAME_REPLICA);
    f.msg.fragment = 3, f.msg.version = 1, f.msg.payload = replica_pay, f.msg.len = 28;
    CHECK_SFAILS(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch), DLC_ERR_ARG,
                 "replica of fragment 3, but the model has 3 fragments");
    int64_t h = dlc_proto_encode(&f, &four, scratch, sizeof scratch);
    CHECK(h > 0);
    memset(scratch + h, 0, 28);
    refuse("replica_fragment_beyond_layout", scratch, (size_t)h + 28, DLC_PERR_MISMATCH,
           "replica of fragment 3, but the model has 3 fragments");
    /* no layout on the connection */
    n = replica_frame(2, 1, 0, 0);
    int why;
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, &why) == DLC_ERR_STATE && why == DLC_PERR_UNEXPECTED &&
          strstr(dlc_last_error(), "replica before the model layout is known"));
    /* the encoder refuses what the decoder would */
    dlc_frame_init(&f, DLC_FRAME_REPLICA);
    f.msg.fragment = 2, f.msg.version = 1, f.msg.payload = replica_pay, f.msg.len = 28;
    f.msg.flags = 0x9;
    CHECK_SFAILS(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch), DLC_ERR_ARG, "replica: flags 0x9, expected those of 0x6");
    f.msg.flags = 0, f.msg.steps = 1; /* one record the payload lacks */
    CHECK_SFAILS(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch), DLC_ERR_ARG,
                 "replica payload of 28 bytes, but fragment 2's 7 floats and 1 contributor records of 40 bytes take 68");
    f.msg.steps = 4097;
    CHECK_SFAILS(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch), DLC_ERR_ARG, "4097 contributor records");
    uint8_t bad[68] = {0};
    bad[28 + 4] = 7; /* a reserved field set */
    f.msg.steps = 1, f.msg.payload = bad, f.msg.len = sizeof bad;
    CHECK_SFAILS(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch), DLC_ERR_ARG, "reserved field 0x00000007");
    f.msg.payload = replica_pay, f.msg.len = 28, f.msg.steps = 0, f.msg.version = -1;
    CHECK_SFAILS(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch), DLC_ERR_ARG, "version -1");
}

static void test_replica_ack(void) {
    dlc_frame f, g;
    dlc_frame_init(&f, DLC_FRAME_REPLICA_ACK);
    f.msg.fragment = 1, f.msg.version = 9, f.msg.epoch = 2;
    size_t n = encode(&f);
    corpus_write("replica_ack", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.type == DLC_FRAME_REPLICA_ACK &&
          g.msg.type == DLC_MSG_REPLICA_ACK && g.msg.fragment == 1 && g.msg.version == 9 && g.msg.epoch == 2 &&
          g.msg.flags == 0 && g.msg.len == 0);
    /* the standby's statement of what it holds, once per fragment as it attaches */
    f.msg.flags = DLC_MSG_REPLICA_WHOLE;
    n = encode(&f);
    corpus_write("replica_ack_whole", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.msg.flags == DLC_MSG_REPLICA_WHOLE);
    uint8_t buf[256];
    memcpy(buf, scratch, n);
    uint8_t *fl = find(buf, n, "\xa2" "fl\x04", 4);
    CHECK(fl != NULL);
    if (fl) {
        fl[3] = DLC_MSG_REPLICA_MOMENTUM;
        refuse("replica_ack_momentum", buf, n, DLC_PERR_MALFORMED,
               "\"fl\" = 0x2: unknown flag bits (a replica_ack takes those of 0x4)");
        fl[3] = 0x04;
    }
    buf[11] += 4; /* a payload on a header alone */
    memset(buf + n, 0, 4);
    refuse("replica_ack_payload", buf, n + 4, DLC_PERR_MALFORMED, "replica_ack with a payload of 4 bytes");
    f.msg.flags = DLC_MSG_REPLICA_MOMENTUM;
    CHECK_SFAILS(dlc_proto_encode(&f, NULL, scratch, sizeof scratch), DLC_ERR_ARG, "replica_ack: flags 0x2, expected those of 0x4");
    f.msg.flags = 0, f.msg.fragment = DLC_PROTO_FRAGMENTS_MAX;
    CHECK_SFAILS(dlc_proto_encode(&f, NULL, scratch, sizeof scratch), DLC_ERR_ARG, "fragment 1024");
    dlc_msg m = {.type = DLC_MSG_REPLICA_ACK, .fragment = 0, .version = 3};
    CHECK(dlc_frame_from_msg(&f, &m) == DLC_OK && f.type == DLC_FRAME_REPLICA_ACK);
}

/* "standby": a HELLO asks for it; a server that offers it welcomes the peer as a standby
 * (learner -1), one that does not refuses it; a shard does not ask a standby for
 * "sharded"; a WELCOME says learner -1 exactly when it lists "standby". */
static void test_standby_hello(void) {
    CHECK(strcmp(dlc_cap_name(DLC_CAP_STANDBY), "standby") == 0 && DLC_CAP_KNOWN == 0x1fu && !dlc_cap_name(32));
    dlc_frame f, g;
    dlc_frame_init(&f, DLC_FRAME_HELLO);
    f.hello = server_hello();
    f.hello.learner = -1, f.hello.fragments = 0, f.hello.endpoints = 0, f.hello.caps = DLC_CAP_STANDBY;
    size_t n = encode(&f);
    corpus_write("hello_standby", scratch, n);
    CHECK(find(scratch, n, "\xa7standby", 8) != NULL);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.hello.caps == DLC_CAP_STANDBY &&
          g.hello.caps_unknown == 0);
    dlc_hello ours = server_hello(), w; /* two endpoints: a shard */
    int why;
    CHECK_SFAILS(dlc_proto_negotiate(&ours, &g.hello, &w, &why), DLC_ERR_STATE,
                 "the peer asks to attach as a standby (its hello lists \"standby\"), but this server takes no standbys");
    CHECK(why == DLC_PERR_MISMATCH);
    ours.caps |= DLC_CAP_STANDBY;
    g.hello.learner = 4; /* whatever it asked, a standby holds no id */
    CHECK(dlc_proto_negotiate(&ours, &g.hello, &w, &why) == DLC_OK && w.learner == -1 && w.caps == DLC_CAP_STANDBY);
    /* a learner is still refused by the shard without "sharded", and welcomed with its id */
    dlc_hello learner = g.hello;
    learner.caps = DLC_CAP_GRADIENT;
    CHECK_SFAILS(dlc_proto_negotiate(&ours, &learner, &w, &why), DLC_ERR_STATE, "this syncer is shard 1 of 2");
    learner.caps = DLC_CAP_SHARDED;
    CHECK(dlc_proto_negotiate(&ours, &learner, &w, &why) == DLC_OK && w.learner == 4 && !(w.caps & DLC_CAP_STANDBY));
    /* the standby's WELCOME */
    CHECK(dlc_proto_negotiate(&ours, &g.hello, &w, &why) == DLC_OK);
    dlc_frame_init(&f, DLC_FRAME_WELCOME);
    f.hello = w;
    n = encode(&f);
    corpus_write("welcome_standby", scratch, n);
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, NULL) == DLC_OK && g.hello.learner == -1 &&
          g.hello.caps == DLC_CAP_STANDBY);
    uint8_t buf[2048];
    memcpy(buf, scratch, n);
    uint8_t *l = find(buf, n, "\xa1l\xff", 3);
    CHECK(l != NULL);
    if (l) {
        l[2] = 0x03;
        refuse("welcome_standby_with_id", buf, n, DLC_PERR_MALFORMED,
               "welcome: learner 3, expected -1 (a standby's welcome, listing \"standby\")");
    }
    f.hello.learner = 3;
    CHECK_SFAILS(dlc_proto_encode(&f, NULL, scratch, sizeof scratch), DLC_ERR_ARG, "welcome: learner 3, expected -1");
    f.hello.learner = -1, f.hello.caps = DLC_CAP_SHARDED;
    CHECK_SFAILS(dlc_proto_encode(&f, NULL, scratch, sizeof scratch), DLC_ERR_ARG, "welcome: learner -1, expected an id >= 0");
    f.hello.caps = DLC_CAP_STANDBY;
    n = encode(&f);
    memcpy(buf, scratch, n);
    uint8_t *sb = find(buf, n, "\xa7standby", 8);
    CHECK(sb != NULL);
    if (sb) { /* a learner's welcome (no "standby") that says -1 */
        memcpy(sb + 1, "stanbye", 7);
        refuse("welcome_learner_minus_1", buf, n, DLC_PERR_MALFORMED, "welcome: learner -1, expected an id >= 0");
    }
}

static void test_prefix(void) {
    uint8_t buf[64], hdr[1] = {0x80};
    size_t n = raw(buf, DLC_FRAME_HEARTBEAT, hdr, 1, 0);
    buf[0] = 'G';
    refuse("bad_magic", buf, 4, DLC_PERR_MALFORMED, "not the magic");
    memcpy(buf, "GET / HTTP/1.1\r\n", 16);
    refuse("http", buf, 16, DLC_PERR_MALFORMED, "byte 0 is 0x47");
    /* a TLS ClientHello where a frame was due: the peer speaks TLS and this end does not */
    static const uint8_t hello[16] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03};
    memcpy(buf, hello, sizeof hello);
    refuse("tls_hello", buf, 16, DLC_PERR_MALFORMED, "the peer speaks TLS (a TLS handshake record), and this end does not");
    n = raw(buf, DLC_FRAME_HEARTBEAT, hdr, 1, 0);
    buf[3] = 'X';
    refuse("bad_magic_3", buf, n, DLC_PERR_MALFORMED, "byte 3 is 0x58");
    n = raw(buf, DLC_FRAME_HEARTBEAT, hdr, 1, 0);
    buf[4] = 2;
    refuse("frame_version", buf, n, DLC_PERR_VERSION, "frame version 2, but this peer reads frame version 1");
    n = raw(buf, DLC_FRAME_HEARTBEAT, hdr, 1, 0);
    buf[5] = 200;
    refuse("unknown_type", buf, n, DLC_PERR_UNEXPECTED, "unknown message type 200");
    buf[5] = 0;
    refuse("type_zero", buf, n, DLC_PERR_UNEXPECTED, "unknown message type 0");
    n = raw(buf, DLC_FRAME_HEARTBEAT, hdr, 1, 0);
    buf[7] = 1;
    refuse("reserved", buf, n, DLC_PERR_MALFORMED, "reserved bytes");
    n = raw(buf, DLC_FRAME_HEARTBEAT, hdr, 1, 0);
    buf[8] = 0xff, buf[9] = 0xff, buf[10] = 0xff, buf[11] = 0xff;
    refuse("length_4g", buf, n, DLC_PERR_TOO_LARGE, "exceeds this connection's limit of 536870912 bytes");
    n = raw(buf, DLC_FRAME_HEARTBEAT, hdr, 1, 0);
    buf[15] = 2;
    refuse("hlen_beyond_length", buf, n, DLC_PERR_MALFORMED, "header length 2 exceeds the frame's length 1");
    n = raw(buf, DLC_FRAME_CONTRIBUTION, hdr, 1, 0);
    buf[8] = 0x01, buf[13] = 0x01; /* length 16M+1, header 64K+1 */
    refuse("hlen_beyond_max", buf, 16, DLC_PERR_TOO_LARGE, "header of 65537 bytes exceeds the limit of 16384");
    n = raw(buf, DLC_FRAME_HEARTBEAT, hdr, 0, 0);
    refuse("hlen_zero", buf, n, DLC_PERR_MALFORMED, "header length 0");

    /* the connection's own limit, and a limit that makes no sense */
    size_t need;
    int why;
    n = raw(buf, DLC_FRAME_HEARTBEAT, hdr, 1, 40);
    CHECK(dlc_proto_peek(buf, n, 57, &need, NULL, &why) == DLC_OK && need == 57);
    CHECK(dlc_proto_peek(buf, n, 56, &need, NULL, &why) == DLC_ERR_RANGE && why == DLC_PERR_TOO_LARGE &&
          strstr(dlc_last_error(), "frame of 57 bytes (heartbeat) exceeds this connection's limit of 56 bytes"));
    CHECK(dlc_proto_peek(buf, n, 0, &need, NULL, &why) == DLC_ERR_ARG && strstr(dlc_last_error(), "frame limit 0"));
    CHECK(dlc_proto_peek(buf, n, DLC_PROTO_FRAME_MAX_LIMIT + 1, &need, NULL, &why) == DLC_ERR_ARG);
    /* a whole frame with fewer bytes than its prefix says */
    n = raw(buf, DLC_FRAME_HEARTBEAT, hdr, 1, 0);
    CHECK(dlc_proto_decode(buf, n - 1, NULL, &(dlc_frame){0}, &why) == DLC_ERR_FORMAT && why == DLC_PERR_MALFORMED);
    CHECK(dlc_proto_decode(buf, 10, NULL, &(dlc_frame){0}, &why) == DLC_ERR_FORMAT && why == DLC_PERR_MALFORMED);
}

static void test_header_walk(void) {
    uint8_t buf[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX + 64];
    size_t n;
    /* msgpack-c would allocate on these counts; the walk refuses them first */
    static const uint8_t arr32[] = {0x81, 0xa1, 'l', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x01};
    n = raw(buf, DLC_FRAME_HEARTBEAT, arr32, sizeof arr32, 0);
    refuse("array32_huge", buf, n, DLC_PERR_MALFORMED, "array of items 4294967295");
    static const uint8_t str32[] = {0x81, 0xa1, 'l', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'};
    n = raw(buf, DLC_FRAME_HEARTBEAT, str32, sizeof str32, 0);
    refuse("str32_4g", buf, n, DLC_PERR_MALFORMED, "string or binary of bytes 4294967295");
    static const uint8_t map32[] = {0xdf, 0x00, 0x00, 0x10, 0x00, 0x01, 0x02};
    n = raw(buf, DLC_FRAME_HEARTBEAT, map32, sizeof map32, 0);
    refuse("map32_lies", buf, n, DLC_PERR_MALFORMED, "map of entries 4096, but fewer bytes follow");
    static const uint8_t bin32[] = {0x81, 0xa1, 'n', 0xc6, 0x7f, 0xff, 0xff, 0xff};
    n = raw(buf, DLC_FRAME_AUTH, bin32, sizeof bin32, 0);
    refuse("bin32_2g", buf, n, DLC_PERR_MALFORMED, "string or binary of bytes 2147483647");
    static const uint8_t arr_many[] = {0x81, 0xa1, 'l', 0xdc, 0x20, 0x00};
    n = raw(buf, DLC_FRAME_HEARTBEAT, arr_many, sizeof arr_many, 0);
    refuse("array16_over_items", buf, n, DLC_PERR_MALFORMED, "array of items 8192, but the limit is 4096");
    /* the count fits the bytes but no value is complete */
    static const uint8_t cut[] = {0x82, 0xa1, 'l', 0xcd, 0x01};
    n = raw(buf, DLC_FRAME_HEARTBEAT, cut, sizeof cut, 0);
    refuse("cut_uint16", buf, n, DLC_PERR_MALFORMED, "uint16 cut off");
    static const uint8_t cut2[] = {0x82, 0xa1, 'l', 0x01};
    n = raw(buf, DLC_FRAME_HEARTBEAT, cut2, sizeof cut2, 0);
    refuse("cut_map", buf, n, DLC_PERR_MALFORMED, "fewer bytes follow");
    /* nesting: map > array > array > array */
    static const uint8_t deep[] = {0x81, 0xa1, 'x', 0x91, 0x91, 0x91, 0x01};
    n = raw(buf, DLC_FRAME_HEARTBEAT, deep, sizeof deep, 0);
    refuse("deep", buf, n, DLC_PERR_MALFORMED, "nesting deeper than 3 levels");
    uint8_t deeper[200];
    deeper[0] = 0x81, deeper[1] = 0xa1, deeper[2] = 'x';
    for (int i = 3; i < 199; i++) deeper[i] = 0x91;
    deeper[199] = 0x01;
    n = raw(buf, DLC_FRAME_HEARTBEAT, deeper, sizeof deeper, 0);
    refuse("deep_196", buf, n, DLC_PERR_MALFORMED, "nesting deeper");
    static const uint8_t ext[] = {0x81, 0xa1, 'l', 0xd4, 0x01, 0x02};
    n = raw(buf, DLC_FRAME_HEARTBEAT, ext, sizeof ext, 0);
    refuse("ext", buf, n, DLC_PERR_MALFORMED, "msgpack type 0xd4 is not allowed");
    static const uint8_t never[] = {0x81, 0xa1, 'l', 0xc1};
    n = raw(buf, DLC_FRAME_HEARTBEAT, never, sizeof never, 0);
    refuse("c1", buf, n, DLC_PERR_MALFORMED, "0xc1");
    static const uint8_t trailing[] = {0x80, 0x01};
    n = raw(buf, DLC_FRAME_HEARTBEAT, trailing, sizeof trailing, 0);
    refuse("trailing", buf, n, DLC_PERR_MALFORMED, "1 bytes after its map");
    static const uint8_t notmap[] = {0x93, 0x01, 0x02, 0x03};
    n = raw(buf, DLC_FRAME_HEARTBEAT, notmap, sizeof notmap, 0);
    refuse("not_a_map", buf, n, DLC_PERR_MALFORMED, "expected a map");
    /* many small values: the object count bounds msgpack-c's zone */
    uint8_t many[DLC_PROTO_HEADER_MAX];
    size_t k = 0;
    many[k++] = 0x84;
    for (int e = 0; e < 4; e++) {
        many[k++] = 0xa1, many[k++] = (uint8_t)('w' + e), many[k++] = 0xdc, many[k++] = 0x0f, many[k++] = 0xa0;
        for (int i = 0; i < 4000; i++) many[k++] = 0x91;
        k -= 4000;
        for (int i = 0; i < 0xfa0 && k < sizeof many; i++) many[k++] = 0x00;
    }
    n = raw(buf, DLC_FRAME_HEARTBEAT, many, k, 0);
    refuse("objects", buf, n, DLC_PERR_MALFORMED, "more than 8192 values");
}

static void test_fields(void) {
    uint8_t buf[1024];
    size_t n;
    /* a heartbeat with each field wrong in turn */
    static const uint8_t str_learner[] = {0x85, 0xa1, 'l', 0xa1, '1', 0xa1, 's', 0x01, 0xa1, 't', 0x01,
                                          0xa2, 's', 't', 0x00, 0xa2, 't', 'r', 0x00};
    n = raw(buf, DLC_FRAME_HEARTBEAT, str_learner, sizeof str_learner, 0);
    refuse("learner_string", buf, n, DLC_PERR_MALFORMED, "header field \"l\" is a string, expected an integer");
    static const uint8_t neg_steps[] = {0x85, 0xa1, 'l', 0x01, 0xa1, 's', 0xff, 0xa1, 't', 0x01,
                                        0xa2, 's', 't', 0x00, 0xa2, 't', 'r', 0x00};
    n = raw(buf, DLC_FRAME_HEARTBEAT, neg_steps, sizeof neg_steps, 0);
    refuse("steps_negative", buf, n, DLC_PERR_MALFORMED, "header field \"s\" = -1, expected 0..");
    static const uint8_t big_learner[] = {0x85, 0xa1, 'l', 0xce, 0x00, 0x01, 0x00, 0x00, 0xa1, 's', 0x01, 0xa1, 't', 0x01,
                                          0xa2, 's', 't', 0x00, 0xa2, 't', 'r', 0x00};
    n = raw(buf, DLC_FRAME_HEARTBEAT, big_learner, sizeof big_learner, 0);
    refuse("learner_65536", buf, n, DLC_PERR_MALFORMED, "\"l\" = 65536, expected 0..65535");
    /* a uint64 above INT64_MAX is refused naming the field, not clamped to INT64_MAX */
    static const uint8_t huge_steps[] = {0x85, 0xa1, 'l', 0x01, 0xa1, 's', 0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0,
                                         0xa1, 't', 0x01, 0xa2, 's', 't', 0x00, 0xa2, 't', 'r', 0x00};
    n = raw(buf, DLC_FRAME_HEARTBEAT, huge_steps, sizeof huge_steps, 0);
    refuse("steps_2p63", buf, n, DLC_PERR_MALFORMED,
           "header field \"s\" = 9223372036854775808: above the signed 64-bit range, expected 0..9223372036854775807");
    static const uint8_t max_tokens[] = {0x85, 0xa1, 'l', 0x01, 0xa1, 's', 0x01, 0xa1, 't', 0xcf, 0xff, 0xff, 0xff, 0xff,
                                         0xff, 0xff, 0xff, 0xff, 0xa2, 's', 't', 0x00, 0xa2, 't', 'r', 0x00};
    n = raw(buf, DLC_FRAME_HEARTBEAT, max_tokens, sizeof max_tokens, 0);
    refuse("tokens_u64_max", buf, n, DLC_PERR_MALFORMED, "header field \"t\" = 18446744073709551615: above the signed");
    static const uint8_t nan_time[] = {0x85, 0xa1, 'l', 0x01, 0xa1, 's', 0x01, 0xa1, 't', 0x01,
                                       0xa2, 's', 't', 0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0, 0xa2, 't', 'r', 0x00};
    n = raw(buf, DLC_FRAME_HEARTBEAT, nan_time, sizeof nan_time, 0);
    refuse("step_time_nan", buf, n, DLC_PERR_MALFORMED, "\"st\" = nan, expected a finite number");
    static const uint8_t missing[] = {0x84, 0xa1, 'l', 0x01, 0xa1, 's', 0x01, 0xa1, 't', 0x01, 0xa2, 's', 't', 0x00};
    n = raw(buf, DLC_FRAME_HEARTBEAT, missing, sizeof missing, 0);
    refuse("missing_transit", buf, n, DLC_PERR_MALFORMED, "heartbeat without its field \"tr\"");
    static const uint8_t twice[] = {0x86, 0xa1, 'l', 0x01, 0xa1, 's', 0x01, 0xa1, 't', 0x01,
                                    0xa2, 's', 't', 0x00, 0xa2, 't', 'r', 0x00, 0xa1, 'l', 0x02};
    n = raw(buf, DLC_FRAME_HEARTBEAT, twice, sizeof twice, 0);
    refuse("duplicate_key", buf, n, DLC_PERR_MALFORMED, "field \"l\" appears twice");
    static const uint8_t intkey[] = {0x81, 0x01, 0x01};
    n = raw(buf, DLC_FRAME_HEARTBEAT, intkey, sizeof intkey, 0);
    refuse("int_key", buf, n, DLC_PERR_MALFORMED, "key 0 is a integer, expected a string");
    static const uint8_t short_nonce[] = {0x81, 0xa1, 'n', 0xc4, 0x03, 1, 2, 3};
    n = raw(buf, DLC_FRAME_AUTH, short_nonce, sizeof short_nonce, 0);
    refuse("nonce_short", buf, n, DLC_PERR_MALFORMED, "\"n\": 3 bytes, expected 32");
    static const uint8_t str_nonce[] = {0x81, 0xa1, 'n', 0xa3, 1, 2, 3};
    n = raw(buf, DLC_FRAME_AUTH, str_nonce, sizeof str_nonce, 0);
    refuse("nonce_string", buf, n, DLC_PERR_MALFORMED, "\"n\" is a string, expected binary");
    static const uint8_t err_nul[] = {0x82, 0xa4, 'c', 'o', 'd', 'e', 0x01, 0xa4, 't', 'e', 'x', 't', 0xa3, 'a', 0, 'b'};
    n = raw(buf, DLC_FRAME_ERROR, err_nul, sizeof err_nul, 0);
    refuse("text_nul", buf, n, DLC_PERR_MALFORMED, "NUL byte");
    static const uint8_t err_code0[] = {0x82, 0xa4, 'c', 'o', 'd', 'e', 0x00, 0xa4, 't', 'e', 'x', 't', 0xa0};
    n = raw(buf, DLC_FRAME_ERROR, err_code0, sizeof err_code0, 0);
    refuse("error_code_0", buf, n, DLC_PERR_MALFORMED, "\"code\" = 0, expected 1..255");
    uint8_t bigtext[600];
    size_t k = 0;
    bigtext[k++] = 0x82, bigtext[k++] = 0xa4, memcpy(bigtext + k, "code", 4), k += 4, bigtext[k++] = 0x01;
    bigtext[k++] = 0xa4, memcpy(bigtext + k, "text", 4), k += 4;
    bigtext[k++] = 0xda, bigtext[k++] = 0x02, bigtext[k++] = 0x01;
    memset(bigtext + k, 'y', 513), k += 513;
    n = raw(buf, DLC_FRAME_ERROR, bigtext, k, 0);
    refuse("text_513", buf, n, DLC_PERR_MALFORMED, "a string of 513 bytes, at most 512");
}

static void test_payload(void) {
    uint8_t pay[1100] = {0}, buf[2048];
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_CONTRIBUTION);
    f.msg.learner = 1, f.msg.fragment = 0, f.msg.codec = DLC_CODEC_F32, f.msg.payload = pay, f.msg.len = 400;
    size_t n = encode(&f);
    memcpy(buf, scratch, n);
    /* shorter and longer than the header and layout imply (the prefix kept consistent) */
    uint8_t *p = buf;
    uint32_t len = (uint32_t)(p[8] << 24 | p[9] << 16 | p[10] << 8 | p[11]);
    uint32_t l2 = len - 4;
    p[8] = (uint8_t)(l2 >> 24), p[9] = (uint8_t)(l2 >> 16), p[10] = (uint8_t)(l2 >> 8), p[11] = (uint8_t)l2;
    refuse("payload_short", buf, n - 4, DLC_PERR_MALFORMED, "payload of 396 bytes, but 100 floats in f32 take 400 bytes");
    l2 = len + 4;
    p[8] = (uint8_t)(l2 >> 24), p[9] = (uint8_t)(l2 >> 16), p[10] = (uint8_t)(l2 >> 8), p[11] = (uint8_t)l2;
    refuse("payload_long", buf, n + 4, DLC_PERR_MALFORMED, "payload of 404 bytes");
    /* a fragment the layout does not have */
    f.msg.fragment = 3, f.msg.len = 28;
    CHECK(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch) == DLC_ERR_ARG &&
          strstr(dlc_last_error(), "fragment 3, but the model has 3 fragments"));
    dlc_proto_layout four = {4, (const int64_t[]){100, 256, 7, 7}, 370, {128}};
    n = (size_t)dlc_proto_encode(&f, &four, scratch, sizeof scratch);
    memcpy(scratch + n, pay, 28);
    refuse("fragment_beyond_layout", scratch, n + 28, DLC_PERR_MISMATCH, "fragment 3, but the model has 3");
    /* no layout on the connection yet */
    f.msg.fragment = 2;
    n = encode(&f);
    int why;
    dlc_frame g;
    CHECK(dlc_proto_decode(scratch, n, NULL, &g, &why) == DLC_ERR_STATE && why == DLC_PERR_UNEXPECTED &&
          strstr(dlc_last_error(), "contribution before the model layout is known"));
    /* a payload on a frame that carries none */
    dlc_frame_init(&f, DLC_FRAME_HEARTBEAT);
    n = encode(&f);
    memcpy(buf, scratch, n);
    buf[11] += 3;
    memset(buf + n, 0, 3);
    refuse("heartbeat_payload", buf, n + 3, DLC_PERR_MALFORMED, "heartbeat with a payload of 3 bytes");
    f.msg.payload = pay, f.msg.len = 3;
    CHECK(dlc_proto_encode(&f, &layout3, scratch, sizeof scratch) == DLC_ERR_ARG);
    /* a bad codec name, a resync without its flag, unknown flag bits */
    dlc_frame_init(&f, DLC_FRAME_FRAGMENT);
    f.msg.learner = 1, f.msg.codec = DLC_CODEC_F32, f.msg.payload = pay, f.msg.len = 400;
    n = encode(&f);
    memcpy(buf, scratch, n);
    uint8_t *c = find(buf, n, "\xa1" "c" "\xa3" "f32", 6);
    CHECK(c != NULL);
    if (c) {
        memcpy(c + 3, "f99", 3);
        refuse("codec_unknown", buf, n, DLC_PERR_MALFORMED, "\"c\" = \"f99\": not a codec");
        memcpy(c + 3, "f32", 3);
    }
    uint8_t *fl = find(buf, n, "\xa2" "fl", 3);
    CHECK(fl != NULL);
    if (fl) {
        fl[3] = 0x01; /* the resync flag on a FRAGMENT */
        refuse("fragment_resync_flag", buf, n, DLC_PERR_MALFORMED, "fragment with the resync flag");
        fl[3] = 0x04;
        refuse("unknown_flags", buf, n, DLC_PERR_MALFORMED, "unknown flag bits");
        fl[3] = 0x00;
        buf[5] = DLC_FRAME_RESYNC + 1;
        refuse("resync_no_flag", buf, n, DLC_PERR_MALFORMED, "resync without the resync flag");
    }
}

/* The message types without a case above: a hostile form of each. */
static void test_types_hostile(void) {
    uint8_t buf[2048];
    dlc_frame f;
    /* HELLO with its versions the wrong way round */
    dlc_frame_init(&f, DLC_FRAME_HELLO);
    f.hello = server_hello();
    f.hello.proto_min = 1, f.hello.proto_max = 2, f.hello.fragments = 0, f.hello.endpoints = 0;
    size_t n = encode(&f);
    memcpy(buf, scratch, n);
    uint8_t *v = find(buf, n, "\xa4pmin\x01", 6);
    CHECK(v != NULL);
    if (v) {
        v[5] = 3;
        refuse("hello_versions_reversed", buf, n, DLC_PERR_MALFORMED, "protocol versions 3..2");
    }
    /* WELCOME naming an endpoint it does not list */
    dlc_frame_init(&f, DLC_FRAME_WELCOME);
    f.hello = server_hello();
    f.hello.proto_min = f.hello.proto_max = 1;
    n = encode(&f);
    memcpy(buf, scratch, n);
    v = find(buf, n, "\xa3own\x93\x00\x01\x00", 8);
    CHECK(v != NULL);
    if (v) {
        v[6] = 5;
        refuse("welcome_owner_beyond", buf, n, DLC_PERR_MALFORMED, "fragment 1 owned by endpoint 5 of 2");
    }
    /* GRADIENT whose payload is not the model's size in its codec */
    static uint8_t pay[1024];
    dlc_frame_init(&f, DLC_FRAME_GRADIENT);
    f.msg.codec = DLC_CODEC_BF16, f.msg.payload = pay, f.msg.len = 363 * 2;
    n = encode(&f);
    memcpy(buf, scratch, n);
    buf[11] += 2, buf[n] = buf[n + 1] = 0;
    refuse("gradient_payload_long", buf, n + 2, DLC_PERR_MALFORMED, "gradient payload of 728 bytes, but 363 floats");
    /* AUTH_PROOF with a short MAC; BYE without its reason */
    static const uint8_t short_mac[] = {0x81, 0xa1, 'm', 0xc4, 0x05, 1, 2, 3, 4, 5};
    n = raw(buf, DLC_FRAME_AUTH_PROOF, short_mac, sizeof short_mac, 0);
    refuse("auth_proof_short_mac", buf, n, DLC_PERR_MALFORMED, "\"m\": 5 bytes, expected 32");
    static const uint8_t bye[] = {0x81, 0xa1, 'l', 0x01};
    n = raw(buf, DLC_FRAME_BYE, bye, sizeof bye, 0);
    refuse("bye_without_text", buf, n, DLC_PERR_MALFORMED, "bye without its field \"text\"");
}

static void test_encode_refuses(void) {
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_HEARTBEAT);
    f.msg.learner = -1;
    CHECK(dlc_proto_encode(&f, NULL, scratch, sizeof scratch) == DLC_ERR_ARG && strstr(dlc_last_error(), "learner -1"));
    f.msg.learner = 0, f.msg.step_time = NAN;
    CHECK(dlc_proto_encode(&f, NULL, scratch, sizeof scratch) == DLC_ERR_ARG && strstr(dlc_last_error(), "step_time nan"));
    f.msg.step_time = 0;
    CHECK(dlc_proto_encode(&f, NULL, scratch, 20) == DLC_ERR_RANGE && strstr(dlc_last_error(), "does not fit"));
    dlc_frame_init(&f, DLC_FRAME_ERROR);
    CHECK(dlc_proto_encode(&f, NULL, scratch, sizeof scratch) == DLC_ERR_ARG && strstr(dlc_last_error(), "code 0"));
    dlc_frame_init(&f, DLC_FRAME_WELCOME);
    f.hello.proto_min = f.hello.proto_max = 1, f.hello.block = 128, f.hello.learner = 0;
    CHECK(dlc_proto_encode(&f, NULL, scratch, sizeof scratch) == DLC_ERR_ARG && strstr(dlc_last_error(), "0 endpoints"));
    f.hello.endpoints = 1, f.hello.fragments = 2, f.hello.owner[1] = 1;
    CHECK(dlc_proto_encode(&f, NULL, scratch, sizeof scratch) == DLC_ERR_ARG &&
          strstr(dlc_last_error(), "fragment 1 owned by endpoint 1 of 1"));
    CHECK(strcmp(dlc_frame_type_name(DLC_FRAME_GRADIENT_AVG), "gradient_avg") == 0 && !dlc_frame_type_name(DLC_FRAME_TYPE_COUNT));
    CHECK(strcmp(dlc_proto_errcode_name(DLC_PERR_OVERLOADED), "overloaded") == 0 && !dlc_proto_errcode_name(-1));
    CHECK(strcmp(dlc_cap_name(DLC_CAP_SHARDED), "sharded") == 0 &&
          strcmp(dlc_cap_name(DLC_CAP_REPLAY), "replay") == 0 && !dlc_cap_name(64));
}

/* dlc_text_clean: valid text unchanged, each bad byte one '?', the length kept. */
static void test_text_clean(void) {
    static const struct {
        const char *in, *out;
        size_t replaced;
    } cases[] = {
        {"plain ascii", "plain ascii", 0},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 0},
        {"\xff\xfe", "??", 2},
        {"a\x1b[2Jb\tc\x7f", "a?[2Jb?c?", 3},
        {"over\xc0\xaflong", "over??long", 2},              /* overlong '/' */
        {"\xe0\x80\xafx", "???x", 3},                       /* overlong, 3 bytes */
        {"sur\xed\xa0\x80", "sur???", 3},                   /* U+D800 */
        {"big\xf4\x90\x80\x80", "big????", 4},             /* past U+10FFFF */
        {"cut\xe2\x82", "cut??", 2},                         /* truncated at the end */
        {"\xe2\x82x\xc3\xa9", "??x\xc3\xa9", 2},            /* truncated in the middle */
        {"\x80lone", "?lone", 1},
        {"", "", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s", cases[i].in);
        size_t r = dlc_text_clean(buf);
        if (strcmp(buf, cases[i].out) != 0 || r != cases[i].replaced)
            fprintf(stderr, "text_clean case %zu: got \"%s\" (%zu replaced)\n", i, buf, r);
        CHECK(strcmp(buf, cases[i].out) == 0 && r == cases[i].replaced);
    }
    CHECK(dlc_text_clean(NULL) == 0);
    /* decoded strings pass through it: a BYE's text with bad bytes comes out clean */
    dlc_frame f, g;
    dlc_frame_init(&f, DLC_FRAME_BYE);
    snprintf(f.text, sizeof f.text, "%s", "bye\xff\x1b.");
    uint8_t buf[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX];
    int64_t n = dlc_proto_encode(&f, NULL, buf, sizeof buf);
    CHECK(n > 0 && dlc_proto_decode(buf, (size_t)n, NULL, &g, NULL) == DLC_OK && strcmp(g.text, "bye??.") == 0);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--corpus") == 0) corpus_dir = argv[2];
    dec = dlc_proto_decoder_new();
    CHECK(dec != NULL);
    test_roundtrip();
    test_decoder();
    test_text_clean();
    test_hello();
    test_hello_run();
    test_hello_layout();
    test_fence_stamps();
    test_resync_crc();
    test_fragment_age();
    test_resync_answers();
    test_replica_bytes();
    test_replica();
    test_replica_ack();
    test_standby_hello();
    test_prefix();
    test_header_walk();
    test_fields();
    test_payload();
    test_types_hostile();
    test_encode_refuses();
    dlc_proto_decoder_free(dec);
    return check_done("test_proto");
}
