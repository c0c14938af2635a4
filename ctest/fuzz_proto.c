/*
 * fuzz_proto.c - libFuzzer target for the wire protocol's decoder (core/proto.c): the
 * prefix check, the header walk, msgpack-c's unpack of what passed it, the fields and
 * the payload against a layout.  Input: a frame's bytes, fed as a stream would arrive
 * (the prefix peeked with a 1 MiB connection limit, then the whole frame decoded).
 * A frame that decodes must encode again to the same prefix and header and decode to
 * the same fields (what is accepted is what we would send), and a HELLO is negotiated
 * against a server's.  Errors are normal outcomes; a crash, leak, hang or sanitizer
 * report is a bug.  Seeds: ctest/fuzz_corpus/proto, written by `test_proto --corpus`
 * from the hostile cases of ctest/test_proto.c.  Built by -DDLC_FUZZ=ON, run by
 * scripts/fuzz.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/diloco.h"

static const int64_t numel[3] = {100, 256, 7};
static const dlc_proto_layout layout = {3, numel, 363, {128}};

static void same(int cond) {
    if (!cond) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t need = 0;
    dlc_frame_type type;
    int why;
    /* every prefix length of the stream, as a reader sees it grow */
    for (size_t avail = 0; avail <= size && avail <= DLC_PROTO_PREFIX; avail++) {
        if (dlc_proto_peek(data, avail, (size_t)1 << 20, &need, &type, &why) < 0) {
            same(why > DLC_PERR_NONE && why < DLC_PERR_COUNT);
            return 0;
        }
    }
    if (need == 0 || need > size) return 0;
    static dlc_frame f, g;
    if (dlc_proto_decode(data, need, &layout, &f, &why) < 0) {
        same(why > DLC_PERR_NONE && why < DLC_PERR_COUNT);
        return 0;
    }
    static uint8_t out[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX + (1 << 20)];
    int64_t n = dlc_proto_encode(&f, &layout, out, DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX);
    same(n > 0);
    same(n + f.msg.len <= sizeof out);
    if (f.msg.len) memcpy(out + n, f.msg.payload, f.msg.len);
    static dlc_proto_decoder *dec; /* the re-encoded frame through a decoder kept across inputs */
    if (!dec) dec = dlc_proto_decoder_new();
    same(dec && dlc_proto_decoder_decode(dec, out, (size_t)n + f.msg.len, &layout, &g, &why) == DLC_OK);
    same(g.type == f.type && g.msg.type == f.msg.type && g.msg.learner == f.msg.learner &&
         g.msg.fragment == f.msg.fragment && g.msg.version == f.msg.version && g.msg.steps == f.msg.steps &&
         g.msg.tokens == f.msg.tokens && g.msg.flags == f.msg.flags && g.msg.codec == f.msg.codec &&
         g.msg.len == f.msg.len && g.code == f.code && strcmp(g.text, f.text) == 0 &&
         memcmp(g.nonce, f.nonce, sizeof g.nonce) == 0 && memcmp(g.mac, f.mac, sizeof g.mac) == 0 &&
         strcmp(g.hello.run, f.hello.run) == 0 && g.hello.caps == f.hello.caps && g.hello.codecs == f.hello.codecs &&
         g.hello.fragments == f.hello.fragments && g.hello.endpoints == f.hello.endpoints &&
         g.msg.epoch == f.msg.epoch && g.msg.incarnation == f.msg.incarnation &&
         g.hello.run_hash == f.hello.run_hash &&
         (!f.hello.run_hash || dlc_run_diff(&g.hello.run_params, &f.hello.run_params, NULL, 0) == 0));
    if (f.msg.len) same(memcmp(g.msg.payload, f.msg.payload, f.msg.len) == 0);
    if (f.type == DLC_FRAME_HELLO) {
        dlc_hello ours = f.hello, w;
        ours.proto_min = DLC_PROTO_VERSION_MIN, ours.proto_max = DLC_PROTO_VERSION_MAX;
        ours.fragments = 1, ours.endpoints = 1, ours.owner[0] = 0, ours.endpoint[0][0] = '\0';
        if (dlc_proto_negotiate(&ours, &f.hello, &w, &why) == DLC_OK) {
            static dlc_frame wf;
            dlc_frame_init(&wf, DLC_FRAME_WELCOME);
            wf.hello = w;
            /* the host gives a learner its id; a standby's welcome says -1 */
            if (wf.hello.learner < 0 && !(wf.hello.caps & DLC_CAP_STANDBY)) wf.hello.learner = 0;
            same(dlc_proto_encode(&wf, NULL, out, sizeof out) > 0);
        } else {
            same(why == DLC_PERR_VERSION || why == DLC_PERR_MISMATCH);
        }
    }
    return 0;
}
