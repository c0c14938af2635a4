/* proto.c - frames: prefix, msgpack header, raw payload (proto.h, docs/protocol.md).
 *
 * Decoding is three gates, each before the next allocates or trusts anything:
 *   1. the prefix (dlc_proto_peek): magic, version, type, lengths against the limits;
 *   2. a walk over the header bytes (walk): every declared count and length against
 *      the bytes present and the named limits, the depth, the object count, one map
 *      spanning the header exactly; only then does msgpack-c unpack it, so what it
 *      allocates is bounded by the header's size;
 *   3. the fields (read_fields, check_frame): each value's msgpack type and range, the
 *      required keys of the type, the payload's length against the layout. */
#include "diloco/proto.h"

#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <isa-l/crc.h>

#include "diloco/frag.h"
#include "internal.h"

#define STR_(x) #x
#define STR(x) STR_(x)

static const char *const frame_names[] = {"auth",     "auth_challenge", "auth_proof",   "hello",
                                          "welcome",  "heartbeat",      "contribution", "fragment",
                                          "gradient", "gradient_avg",   "resync",       "bye",
                                          "error",    "replay",         "replica",      "replica_ack"};
_Static_assert(sizeof frame_names / sizeof frame_names[0] == DLC_FRAME_TYPE_COUNT, "one name per frame type");

static const char *const errcode_names[] = {"none",     "malformed",  "too_large", "version",
                                            "auth",     "unexpected", "mismatch",  "timeout",
                                            "overloaded", "shutdown", "internal", "conflict"};
_Static_assert(sizeof errcode_names / sizeof errcode_names[0] == DLC_PERR_COUNT, "one name per error code");

static const char *const cap_names[] = {"resync_phase", "gradient", "sharded", "replay", "standby"};
#define CAP_COUNT 5
_Static_assert(sizeof cap_names / sizeof cap_names[0] == CAP_COUNT && DLC_CAP_KNOWN == (1u << CAP_COUNT) - 1,
               "one name per capability bit");

const char *dlc_frame_type_name(dlc_frame_type type) {
    return (unsigned)type < DLC_FRAME_TYPE_COUNT ? frame_names[type] : NULL;
}

const char *dlc_proto_errcode_name(int code) {
    return code >= 0 && code < DLC_PERR_COUNT ? errcode_names[code] : NULL;
}

/* The length of the valid UTF-8 sequence at s[0..n), 0 if it is not one (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1fu;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0fu;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07u;
    else return 0; /* a continuation byte, an overlong lead (c0, c1) or f5..ff */
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

size_t dlc_text_clean(char *s) {
    if (!s) return 0;
    unsigned char *u = (unsigned char *)s;
    size_t n = strlen(s), replaced = 0;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(u + i, n - i);
        if (len == 1 && (u[i] < 0x20 || u[i] == 0x7f)) len = 0;
        if (len == 0) {
            u[i++] = '?';
            replaced++;
            continue;
        }
        i += len;
    }
    return replaced;
}

const char *dlc_cap_name(uint32_t bit) {
    for (unsigned i = 0; i < sizeof cap_names / sizeof cap_names[0]; i++)
        if (bit == 1u << i) return cap_names[i];
    return NULL;
}

/* ---- header keys: one table drives decoding, encoding and the required sets ---- */

typedef enum key_id {
    K_LEARNER, K_FRAGMENT, K_VERSION, K_STEPS, K_TOKENS, K_STEP_TIME, K_TRANSIT, K_HELD,
    K_FLAGS, K_CODEC, K_NONCE, K_MAC, K_PMIN, K_PMAX, K_RUN, K_MODEL, K_PLAN, K_CAPS,
    K_CODECS, K_BLOCK, K_ENDPOINTS, K_OWNER, K_CODE, K_TEXT, K_EPOCH, K_INCARNATION, K_RUN_HASH,
    K_RUN_PARAMS, K_CHECK, K_AGE, K_ANSWERS, K_LAYOUT, K_COUNT
} key_id;
_Static_assert(K_COUNT <= 32, "key sets are 32-bit masks");

#define KEY_NAMES                                                                                   \
    X("l") X("f") X("v") X("s") X("t") X("st") X("tr") X("h") X("fl") X("c") X("n") X("m") X("pmin")  \
    X("pmax") X("run") X("mh") X("ph") X("caps") X("codecs") X("blk") X("eps") X("own") X("code")      \
    X("text") X("e") X("i") X("rh") X("rp") X("ck") X("ra") X("rq") X("lt")
#define X(s) s,
static const char *const key_names[] = {KEY_NAMES};
#undef X
/* their lengths, so neither the decoder's key match nor the encoder measures them */
#define X(s) sizeof s - 1,
static const uint8_t key_lens[] = {KEY_NAMES};
#undef X
_Static_assert(sizeof key_names / sizeof key_names[0] == K_COUNT, "one name per header key");

#define B(k) (1u << (k))
#define MSG_COMMON (B(K_LEARNER))
/* Keys each frame type carries (all required: the encoder writes every one). */
static const uint32_t type_keys[DLC_FRAME_TYPE_COUNT] = {
    [DLC_FRAME_AUTH] = B(K_NONCE),
    [DLC_FRAME_AUTH_CHALLENGE] = B(K_NONCE) | B(K_MAC),
    [DLC_FRAME_AUTH_PROOF] = B(K_MAC),
    [DLC_FRAME_HELLO] = B(K_PMIN) | B(K_PMAX) | B(K_RUN) | B(K_MODEL) | B(K_PLAN) | B(K_LEARNER) |
                        B(K_CAPS) | B(K_CODECS) | B(K_BLOCK),
    [DLC_FRAME_WELCOME] = B(K_PMIN) | B(K_PMAX) | B(K_RUN) | B(K_MODEL) | B(K_PLAN) | B(K_LEARNER) |
                          B(K_CAPS) | B(K_CODECS) | B(K_BLOCK) | B(K_ENDPOINTS) | B(K_OWNER),
    [DLC_FRAME_HEARTBEAT] = MSG_COMMON | B(K_STEPS) | B(K_TOKENS) | B(K_STEP_TIME) | B(K_TRANSIT),
    [DLC_FRAME_CONTRIBUTION] = MSG_COMMON | B(K_FRAGMENT) | B(K_VERSION) | B(K_STEPS) | B(K_TOKENS) |
                               B(K_STEP_TIME) | B(K_TRANSIT) | B(K_CODEC),
    [DLC_FRAME_FRAGMENT] = MSG_COMMON | B(K_FRAGMENT) | B(K_VERSION) | B(K_STEPS) | B(K_HELD) |
                           B(K_STEP_TIME) | B(K_FLAGS) | B(K_CODEC),
    [DLC_FRAME_GRADIENT] = MSG_COMMON | B(K_VERSION) | B(K_TOKENS) | B(K_CODEC),
    [DLC_FRAME_GRADIENT_AVG] = MSG_COMMON | B(K_VERSION) | B(K_CODEC),
    [DLC_FRAME_RESYNC] = MSG_COMMON | B(K_FRAGMENT) | B(K_VERSION) | B(K_STEPS) | B(K_HELD) |
                         B(K_STEP_TIME) | B(K_FLAGS) | B(K_CODEC),
    [DLC_FRAME_BYE] = MSG_COMMON | B(K_TEXT),
    [DLC_FRAME_ERROR] = B(K_CODE) | B(K_TEXT),
    [DLC_FRAME_REPLAY] = MSG_COMMON | B(K_VERSION),
    /* primary <-> standby: no learner; "s" counts the replica's contributor records */
    [DLC_FRAME_REPLICA] = B(K_FRAGMENT) | B(K_VERSION) | B(K_STEPS) | B(K_FLAGS) | B(K_EPOCH),
    [DLC_FRAME_REPLICA_ACK] = B(K_FRAGMENT) | B(K_VERSION) | B(K_FLAGS) | B(K_EPOCH),
};

/* Keys each frame type may carry but need not: newer than the protocol's first keys, so
 * an older peer's frame without them is still read (absent = 0, not stated).  The
 * encoder writes the fencing keys, a resync's checksum and a fragment's round age
 * always, the run keys when hello.run_hash != 0. */
#define MSG_FENCE (B(K_EPOCH) | B(K_INCARNATION))
#define HELLO_RUN (B(K_RUN_HASH) | B(K_RUN_PARAMS))
static const uint32_t type_optional[DLC_FRAME_TYPE_COUNT] = {
    [DLC_FRAME_HELLO] = HELLO_RUN | B(K_LAYOUT), [DLC_FRAME_WELCOME] = HELLO_RUN,
    [DLC_FRAME_HEARTBEAT] = MSG_FENCE,     [DLC_FRAME_CONTRIBUTION] = MSG_FENCE,
    [DLC_FRAME_FRAGMENT] = MSG_FENCE | B(K_AGE), [DLC_FRAME_GRADIENT] = MSG_FENCE,
    [DLC_FRAME_GRADIENT_AVG] = MSG_FENCE | B(K_STEPS), [DLC_FRAME_RESYNC] = MSG_FENCE | B(K_CHECK) | B(K_ANSWERS),
    [DLC_FRAME_BYE] = MSG_FENCE,           [DLC_FRAME_REPLAY] = MSG_FENCE,
    [DLC_FRAME_REPLICA] = B(K_TOKENS), /* the merge's useful tokens × P (for the standby's account) */
};

int dlc_frame_has_payload(dlc_frame_type t) {
    return t == DLC_FRAME_CONTRIBUTION || t == DLC_FRAME_FRAGMENT || t == DLC_FRAME_RESYNC ||
           t == DLC_FRAME_GRADIENT || t == DLC_FRAME_GRADIENT_AVG || t == DLC_FRAME_REPLICA;
}

/* The msg.flags bits a frame type may carry (FRAGMENT and RESYNC: exactly 0 and
 * DLC_MSG_RESYNC, checked apart). */
#define REPLICA_FLAGS (DLC_MSG_REPLICA_MOMENTUM | DLC_MSG_REPLICA_WHOLE)
static uint32_t flags_known(dlc_frame_type t) {
    return t == DLC_FRAME_REPLICA ? REPLICA_FLAGS : t == DLC_FRAME_REPLICA_ACK ? DLC_MSG_REPLICA_WHOLE : DLC_MSG_RESYNC;
}

static const dlc_msg_type frame_msg_type[DLC_FRAME_TYPE_COUNT] = {
    [DLC_FRAME_HEARTBEAT] = DLC_MSG_HEARTBEAT,   [DLC_FRAME_CONTRIBUTION] = DLC_MSG_CONTRIBUTION,
    [DLC_FRAME_FRAGMENT] = DLC_MSG_FRAGMENT,     [DLC_FRAME_GRADIENT] = DLC_MSG_GRADIENT,
    [DLC_FRAME_GRADIENT_AVG] = DLC_MSG_GRADIENT_AVG, [DLC_FRAME_RESYNC] = DLC_MSG_FRAGMENT,
    [DLC_FRAME_BYE] = DLC_MSG_BYE,               [DLC_FRAME_REPLAY] = DLC_MSG_REPLAY,
    [DLC_FRAME_REPLICA] = DLC_MSG_REPLICA,       [DLC_FRAME_REPLICA_ACK] = DLC_MSG_REPLICA_ACK,
};

/* Every type but the handshake's and ERROR carries a message (so a REPLICA's msg.type is
 * never left at 0, a HEARTBEAT's). */
static bool carries_msg(dlc_frame_type t) {
    return (t >= DLC_FRAME_HEARTBEAT && t <= DLC_FRAME_BYE) || t == DLC_FRAME_REPLAY || t == DLC_FRAME_REPLICA ||
           t == DLC_FRAME_REPLICA_ACK;
}

static void frame_set_type(dlc_frame *f, dlc_frame_type type) {
    f->type = type;
    if ((unsigned)type < DLC_FRAME_TYPE_COUNT && carries_msg(type)) f->msg.type = frame_msg_type[type];
    if (type == DLC_FRAME_RESYNC) f->msg.flags = DLC_MSG_RESYNC;
    f->hello.learner = -1;
}

void dlc_frame_init(dlc_frame *f, dlc_frame_type type) {
    memset(f, 0, sizeof *f);
    frame_set_type(f, type);
}

/* dlc_frame_init but for what no reader looks at: hello's endpoint and owner tables past
 * their counts (6.6 of the frame's 7 KB; both counts 0 here, and decoding a WELCOME
 * writes the entries it counts), and the bytes of hello.run and text after their NUL. */
_Static_assert(offsetof(dlc_hello, run) < offsetof(dlc_hello, model_hash) &&
                   offsetof(dlc_hello, model_hash) < offsetof(dlc_hello, endpoint) &&
                   offsetof(dlc_hello, owner) == offsetof(dlc_hello, endpoint) + sizeof(((dlc_hello *)0)->endpoint) &&
                   offsetof(dlc_frame, code) >= offsetof(dlc_frame, hello) + sizeof(dlc_hello) &&
                   offsetof(dlc_frame, text) > offsetof(dlc_frame, code),
               "the order of the fields frame_init_decoded zeroes around");
static void frame_init_decoded(dlc_frame *f, dlc_frame_type type) {
    memset(f, 0, offsetof(dlc_frame, hello) + offsetof(dlc_hello, run));
    f->hello.run[0] = '\0';
    memset(&f->hello.model_hash, 0, offsetof(dlc_hello, endpoint) - offsetof(dlc_hello, model_hash));
    f->code = 0;
    f->text[0] = '\0';
    frame_set_type(f, type);
}

dlc_status dlc_frame_from_msg(dlc_frame *f, const dlc_msg *m) {
    if (!f || !m) return dlc_error(DLC_ERR_ARG, "dlc_frame_from_msg: NULL argument");
    dlc_frame_type t;
    switch (m->type) {
    case DLC_MSG_HEARTBEAT: t = DLC_FRAME_HEARTBEAT; break;
    case DLC_MSG_CONTRIBUTION: t = DLC_FRAME_CONTRIBUTION; break;
    case DLC_MSG_FRAGMENT: t = (m->flags & DLC_MSG_RESYNC) ? DLC_FRAME_RESYNC : DLC_FRAME_FRAGMENT; break;
    case DLC_MSG_GRADIENT: t = DLC_FRAME_GRADIENT; break;
    case DLC_MSG_GRADIENT_AVG: t = DLC_FRAME_GRADIENT_AVG; break;
    case DLC_MSG_BYE: t = DLC_FRAME_BYE; break;
    case DLC_MSG_REPLAY: t = DLC_FRAME_REPLAY; break;
    case DLC_MSG_REPLICA: t = DLC_FRAME_REPLICA; break;
    case DLC_MSG_REPLICA_ACK: t = DLC_FRAME_REPLICA_ACK; break;
    default: return dlc_error(DLC_ERR_ARG, "dlc_frame_from_msg: message type %d is not one of msg.h's", (int)m->type);
    }
    dlc_frame_init(f, t);
    f->msg = *m;
    return DLC_OK;
}

/* ---- gate 1: the prefix ---- */

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void wr32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static dlc_status fail(int *why, int code, dlc_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static dlc_status fail(int *why, int code, dlc_status st, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (why) *why = code;
    return dlc_error(st, "%s", buf);
}

dlc_status dlc_proto_peek(const uint8_t *buf, size_t avail, size_t frame_max, size_t *frame_len,
                          dlc_frame_type *type, int *why) {
    if (why) *why = DLC_PERR_NONE;
    if (!frame_len || (avail && !buf)) return fail(why, DLC_PERR_INTERNAL, DLC_ERR_ARG, "dlc_proto_peek: NULL argument");
    if (frame_max <= DLC_PROTO_PREFIX || frame_max > DLC_PROTO_FRAME_MAX_LIMIT)
        return fail(why, DLC_PERR_INTERNAL, DLC_ERR_ARG, "frame limit %zu: must be in %d..%zu", frame_max,
                    DLC_PROTO_PREFIX + 1, DLC_PROTO_FRAME_MAX_LIMIT);
    *frame_len = 0;
    /* Reject a wrong magic as soon as its bytes are in: a stray HTTP request or a
     * port scan is refused on its first bytes, not after 16. */
    static const uint8_t magic[4] = {'D', 'L', 'C', 'W'};
    if (avail == 1 && buf[0] == 0x16) return DLC_OK; /* a TLS record? its next byte tells */
    if (avail >= 2 && buf[0] == 0x16 && buf[1] == 0x03) /* a TLS handshake record where a frame was due */
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT,
                    "frame: the peer speaks TLS (a TLS handshake record), and this end does not: start both with TLS "
                    "(the syncer's --tls-cert and --tls-key, the learners' --tls-ca) or neither");
    for (size_t i = 0; i < 4 && i < avail; i++)
        if (buf[i] != magic[i])
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT,
                        "frame: byte %zu is 0x%02x, not the magic \"DLCW\" (is the peer a diloco-lua "
                        "learner or syncer?)", i, buf[i]);
    if (avail >= 5 && buf[4] != DLC_PROTO_FRAME_VERSION)
        return fail(why, DLC_PERR_VERSION, DLC_ERR_FORMAT, "frame version %u, but this peer reads frame version %d",
                    buf[4], DLC_PROTO_FRAME_VERSION);
    if (avail < DLC_PROTO_PREFIX) return DLC_OK;
    unsigned t = buf[5];
    if (t == 0 || t > DLC_FRAME_TYPE_COUNT)
        return fail(why, DLC_PERR_UNEXPECTED, DLC_ERR_FORMAT, "frame: unknown message type %u (this peer knows 1..%d)",
                    t, DLC_FRAME_TYPE_COUNT);
    if (buf[6] || buf[7])
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "frame: reserved bytes 6..7 are 0x%02x%02x, must be 0",
                    buf[6], buf[7]);
    uint32_t length = rd32(buf + 8), hlen = rd32(buf + 12);
    if ((uint64_t)length + DLC_PROTO_PREFIX > frame_max)
        return fail(why, DLC_PERR_TOO_LARGE, DLC_ERR_RANGE,
                    "frame of %llu bytes (%s) exceeds this connection's limit of %zu bytes",
                    (unsigned long long)length + DLC_PROTO_PREFIX, frame_names[t - 1], frame_max);
    if (hlen > length)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "frame: header length %u exceeds the frame's length %u",
                    hlen, length);
    if (hlen > DLC_PROTO_HEADER_MAX)
        return fail(why, DLC_PERR_TOO_LARGE, DLC_ERR_RANGE, "frame: header of %u bytes exceeds the limit of %d bytes",
                    hlen, DLC_PROTO_HEADER_MAX);
    if (hlen == 0)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "frame: header length 0 (a %s needs a msgpack map)",
                    frame_names[t - 1]);
    *frame_len = (size_t)length + DLC_PROTO_PREFIX;
    if (type) *type = (dlc_frame_type)(t - 1);
    return DLC_OK;
}

/* ---- gate 2: walk the header bytes before msgpack-c sees them ---- */

typedef struct walker {
    const uint8_t *base, *p, *end;
    size_t objects;
    int *why;
} walker;

static dlc_status walk_fail(walker *w, const uint8_t *at, const char *what, uint64_t n, const char *limit) {
    return fail(w->why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header byte %td: %s %llu, but %s", at - w->base, what,
                (unsigned long long)n, limit);
}

/* A msgpack type byte with a length or a fixed-size body: the bytes of its length, of its
 * body (fixed), 1 for an array and 2 for a map (container). */
typedef struct walk_type {
    uint8_t lenbytes, fixed, container;
    const char *name;
} walk_type;

/* Walks the value at w->p (the header's map) and all it holds, in order, without
 * recursion: open[d] counts the values still to come in the container at depth d. */
static dlc_status walk(walker *w) {
    /* the other types a header may hold, by type byte from 0xc4 (name NULL: not allowed) */
    static const walk_type types[0xe0 - 0xc4] = {
        [0xc4 - 0xc4] = {1, 0, 0, "bin8"},    [0xc5 - 0xc4] = {2, 0, 0, "bin16"},   [0xc6 - 0xc4] = {4, 0, 0, "bin32"},
        [0xca - 0xc4] = {0, 4, 0, "float32"}, [0xcb - 0xc4] = {0, 8, 0, "float64"}, [0xcc - 0xc4] = {0, 1, 0, "uint8"},
        [0xcd - 0xc4] = {0, 2, 0, "uint16"},  [0xce - 0xc4] = {0, 4, 0, "uint32"},  [0xcf - 0xc4] = {0, 8, 0, "uint64"},
        [0xd0 - 0xc4] = {0, 1, 0, "int8"},    [0xd1 - 0xc4] = {0, 2, 0, "int16"},   [0xd2 - 0xc4] = {0, 4, 0, "int32"},
        [0xd3 - 0xc4] = {0, 8, 0, "int64"},   [0xd9 - 0xc4] = {1, 0, 0, "str8"},    [0xda - 0xc4] = {2, 0, 0, "str16"},
        [0xdb - 0xc4] = {4, 0, 0, "str32"},   [0xdc - 0xc4] = {2, 0, 1, "array16"}, [0xdd - 0xc4] = {4, 0, 1, "array32"},
        [0xde - 0xc4] = {2, 0, 2, "map16"},   [0xdf - 0xc4] = {4, 0, 2, "map32"},
    };
    uint64_t open[DLC_PROTO_DEPTH_MAX + 1];
    int depth = 0; /* containers around the next value */
    open[0] = 1;
    const uint8_t *p = w->p, *const end = w->end;
    size_t objects = w->objects;
    for (;;) {
        while (open[depth] == 0)
            if (depth-- == 0) {
                w->p = p, w->objects = objects;
                return DLC_OK;
            }
        open[depth]--;
        if (p >= end)
            return fail(w->why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header ends inside a value (byte %td)", p - w->base);
        if (++objects > DLC_PROTO_OBJECTS_MAX)
            return fail(w->why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header holds more than %d values", DLC_PROTO_OBJECTS_MAX);
        const uint8_t *at = p;
        uint8_t b = *p++;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) continue; /* one byte */
        uint64_t n;
        int container = 0; /* 1 array, 2 map */
        if (b <= 0x8f) {
            container = 2, n = b & 0x0f;
        } else if (b <= 0x9f) {
            container = 1, n = b & 0x0f;
        } else if (b <= 0xbf) {
            n = b & 0x1f;
        } else {
            if (b < 0xc4 || !types[b - 0xc4].name)
                return fail(w->why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT,
                            "header byte %td: msgpack type 0x%02x is not allowed in a header (ext types and 0xc1 never are)",
                            at - w->base, b);
            const walk_type *t = &types[b - 0xc4];
            if (t->fixed) {
                if (end - p < t->fixed)
                    return fail(w->why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT,
                                "header byte %td: a %s cut off by the header's end", at - w->base, t->name);
                p += t->fixed;
                continue;
            }
            if (end - p < t->lenbytes)
                return fail(w->why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT,
                            "header byte %td: %s length cut off by the header's end", at - w->base, t->name);
            n = 0;
            for (int i = 0; i < t->lenbytes; i++) n = n << 8 | *p++; /* big-endian */
            container = t->container;
        }
        size_t left = (size_t)(end - p);
        if (!container) { /* str or bin of n bytes */
            if (n > DLC_PROTO_STR_MAX)
                return walk_fail(w, at, "string or binary of bytes", n, "the limit is " STR(DLC_PROTO_STR_MAX));
            if (n > left) return walk_fail(w, at, "string or binary of bytes", n, "fewer bytes follow");
            p += n;
            continue;
        }
        /* A container: every entry takes at least one byte, so a count beyond the bytes
         * left is a lie, refused before anything is read or allocated for it. */
        if (depth + 1 > DLC_PROTO_DEPTH_MAX)
            return fail(w->why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header byte %td: nesting deeper than %d levels",
                        at - w->base, DLC_PROTO_DEPTH_MAX);
        if (n > DLC_PROTO_ITEMS_MAX)
            return walk_fail(w, at, container == 2 ? "map of entries" : "array of items", n,
                             "the limit is " STR(DLC_PROTO_ITEMS_MAX));
        uint64_t values = container == 2 ? 2 * n : n;
        if (values > left)
            return walk_fail(w, at, container == 2 ? "map of entries" : "array of items", n,
                             "fewer bytes follow than it needs");
        open[++depth] = values;
    }
}

/* ---- gate 3: the fields ---- */

static const char *mp_type_name(msgpack_object_type t) {
    switch (t) {
    case MSGPACK_OBJECT_NIL: return "nil";
    case MSGPACK_OBJECT_BOOLEAN: return "boolean";
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return "integer";
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "negative integer";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return "float";
    case MSGPACK_OBJECT_STR: return "string";
    case MSGPACK_OBJECT_ARRAY: return "array";
    case MSGPACK_OBJECT_MAP: return "map";
    case MSGPACK_OBJECT_BIN: return "binary";
    default: return "ext";
    }
}

static dlc_status field_type(int *why, key_id k, const msgpack_object *o, const char *want) {
    return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"%s\" is a %s, expected %s", key_names[k],
                mp_type_name(o->type), want);
}

static dlc_status get_int(int *why, key_id k, const msgpack_object *o, int64_t lo, int64_t hi, int64_t *out) {
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        /* a uint64 beyond the signed range is refused, never clamped to INT64_MAX */
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT,
                        "header field \"%s\" = %llu: above the signed 64-bit range, expected %lld..%lld", key_names[k],
                        (unsigned long long)o->via.u64, (long long)lo, (long long)hi);
        v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        v = o->via.i64;
    } else {
        return field_type(why, k, o, "an integer");
    }
    if (v < lo || v > hi)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"%s\" = %lld, expected %lld..%lld",
                    key_names[k], (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return DLC_OK;
}

static dlc_status get_num(int *why, key_id k, const msgpack_object *o, double lo, double *out) {
    double v;
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64) v = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) v = (double)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) v = (double)o->via.i64;
    else return field_type(why, k, o, "a number");
    if (!isfinite(v) || v < lo)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"%s\" = %g, expected a finite number >= %g",
                    key_names[k], v, lo);
    *out = v;
    return DLC_OK;
}

/* A string into dst[cap] (NUL-terminated); longer than cap-1 is an error. */
static dlc_status get_str(int *why, key_id k, const msgpack_object *o, char *dst, size_t cap) {
    if (o->type != MSGPACK_OBJECT_STR) return field_type(why, k, o, "a string");
    if (o->via.str.size >= cap)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"%s\": a string of %u bytes, at most %zu",
                    key_names[k], o->via.str.size, cap - 1);
    if (memchr(o->via.str.ptr, '\0', o->via.str.size))
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"%s\": a string holding a NUL byte", key_names[k]);
    memcpy(dst, o->via.str.ptr, o->via.str.size);
    dst[o->via.str.size] = '\0';
    dlc_text_clean(dst); /* text from the wire is data: valid UTF-8, no control characters */
    return DLC_OK;
}

/* The first bytes of a peer's string o, cleaned, for an error message that quotes it. */
static const char *quote(const msgpack_object *o, char *buf, size_t cap) {
    size_t n = o->via.str.size < cap - 1 ? o->via.str.size : cap - 1;
    memcpy(buf, o->via.str.ptr, n);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\0') buf[i] = '?';
    dlc_text_clean(buf);
    return buf;
}

static dlc_status get_bin(int *why, key_id k, const msgpack_object *o, uint8_t *dst, size_t n) {
    if (o->type != MSGPACK_OBJECT_BIN) return field_type(why, k, o, "binary");
    if (o->via.bin.size != n)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"%s\": %u bytes, expected %zu", key_names[k],
                    o->via.bin.size, n);
    memcpy(dst, o->via.bin.ptr, n);
    return DLC_OK;
}

static bool str_eq(const msgpack_object *o, const char *s) {
    size_t n = strlen(s);
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n && memcmp(o->via.str.ptr, s, n) == 0;
}

/* The key id of string o, K_COUNT if none: our encoder writes the keys in key_id order,
 * so the search starts after the last key found. */
static int key_find(const msgpack_object *o, int hint) {
    for (int i = 0; i < K_COUNT; i++) {
        int k = (hint + i) % K_COUNT;
        if (o->via.str.size == key_lens[k] && memcmp(o->via.str.ptr, key_names[k], key_lens[k]) == 0) return k;
    }
    return K_COUNT;
}

static dlc_status get_codec(int *why, key_id k, const msgpack_object *o, dlc_codec_kind *out) {
    if (o->type != MSGPACK_OBJECT_STR) return field_type(why, k, o, "a codec name");
    for (int c = 0; c < DLC_CODEC_COUNT; c++)
        if (str_eq(o, dlc_codec_name((dlc_codec_kind)c))) {
            *out = (dlc_codec_kind)c;
            return DLC_OK;
        }
    char q[33];
    return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT,
                "header field \"%s\" = \"%s\": not a codec (f32, bf16, fp8, int8, int4, e3m0)", key_names[k],
                quote(o, q, sizeof q));
}

/* An array of strings matched against names[count]: bit i set for names[i]; the names
 * not known are counted in *unknown. */
static dlc_status get_names(int *why, key_id k, const msgpack_object *o, size_t max, const char *(*name)(int),
                            int count, uint32_t *bits, int *unknown) {
    if (o->type != MSGPACK_OBJECT_ARRAY) return field_type(why, k, o, "an array of strings");
    if (o->via.array.size > max)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"%s\": %u names, at most %zu", key_names[k],
                    o->via.array.size, max);
    *bits = 0;
    if (unknown) *unknown = 0;
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_STR)
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"%s\"[%u] is a %s, expected a string",
                        key_names[k], i, mp_type_name(e->type));
        int j = 0;
        while (j < count && !str_eq(e, name(j))) j++;
        if (j < count) *bits |= 1u << j;
        else if (unknown) (*unknown)++;
    }
    return DLC_OK;
}

static const char *cap_by_index(int i) { return cap_names[i]; }
static const char *codec_by_index(int i) { return dlc_codec_name((dlc_codec_kind)i); }

/* The run description's compact form: a map of dlc_run_field names to values (integers,
 * booleans, unsigned hashes, numbers, enum names).  Unknown names are a newer peer's
 * fields, ignored; every field this build knows must be there, once. */
static dlc_status get_run(int *why, const msgpack_object *o, dlc_run_params *r) {
    if (o->type != MSGPACK_OBJECT_MAP) return field_type(why, K_RUN_PARAMS, o, "a map of run fields");
    int nf = dlc_run_field_count();
    uint64_t seen = 0;
    DLC_ASSERT(nf <= 64);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *key = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
        if (key->type != MSGPACK_OBJECT_STR)
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"rp\": key %u is a %s, expected a string",
                        i, mp_type_name(key->type));
        int j = 0;
        const dlc_run_field *f = NULL;
        for (; j < nf; j++)
            if (str_eq(key, (f = dlc_run_field_at(j))->name)) break;
        if (j == nf) continue;
        if (seen & (1ull << j))
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"rp\": %s appears twice", f->name);
        seen |= 1ull << j;
        char *at = (char *)r + f->offset;
        int iv = 0;
        switch (f->type) {
        case DLC_RUN_INT:
            if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 <= INT32_MAX) iv = (int)v->via.u64;
            else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && v->via.i64 >= INT32_MIN) iv = (int)v->via.i64;
            else goto bad;
            memcpy(at, &iv, sizeof iv);
            break;
        case DLC_RUN_FLAG:
            if (v->type != MSGPACK_OBJECT_BOOLEAN) goto bad;
            iv = v->via.boolean ? 1 : 0;
            memcpy(at, &iv, sizeof iv);
            break;
        case DLC_RUN_HASH64:
            if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER) goto bad;
            memcpy(at, &v->via.u64, sizeof v->via.u64);
            break;
        case DLC_RUN_NUMBER: {
            double d;
            if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64) d = v->via.f64;
            else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) d = (double)v->via.u64;
            else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) d = (double)v->via.i64;
            else goto bad;
            if (!isfinite(d)) goto bad;
            memcpy(at, &d, sizeof d);
            break;
        }
        case DLC_RUN_ENUM:
            if (v->type != MSGPACK_OBJECT_STR) goto bad;
            for (iv = 0; iv < f->enum_count && !str_eq(v, f->enum_name(iv)); iv++) {}
            if (iv == f->enum_count) {
                char q[33];
                return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"rp\": %s = \"%s\": not one of "
                            "its names", f->name, quote(v, q, sizeof q));
            }
            memcpy(at, &iv, sizeof iv);
            break;
        default: goto bad;
        }
        continue;
    bad:
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"rp\": %s is a %s, expected %s", f->name,
                    mp_type_name(v->type),
                    f->type == DLC_RUN_INT ? "a 32-bit integer" : f->type == DLC_RUN_FLAG ? "a boolean"
                    : f->type == DLC_RUN_HASH64 ? "an unsigned 64-bit hash" : f->type == DLC_RUN_NUMBER
                    ? "a finite number" : "a name");
    }
    for (int j = 0; j < nf; j++)
        if (!(seen & (1ull << j)))
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"rp\" without %s",
                        dlc_run_field_at(j)->name);
    /* what the encoder refuses to write is not read either (a run no learner could run) */
    if (dlc_run_params_check(r) < 0)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"rp\": %s", dlc_last_error());
    return DLC_OK;
}

static dlc_status read_field(int *why, key_id k, const msgpack_object *v, dlc_frame *f) {
    int64_t i = 0;
    dlc_status st = DLC_OK;
    dlc_hello *h = &f->hello;
    switch (k) {
    case K_LEARNER:
        /* HELLO: -1 asks for any id; WELCOME: -1 is a standby's (check_hello) */
        st = get_int(why, k, v, f->type == DLC_FRAME_HELLO || f->type == DLC_FRAME_WELCOME ? -1 : 0,
                     DLC_PROTO_LEARNERS_MAX - 1, &i);
        f->msg.learner = h->learner = (int)i;
        break;
    case K_FRAGMENT:
        st = get_int(why, k, v, 0, DLC_PROTO_FRAGMENTS_MAX - 1, &i);
        f->msg.fragment = (int)i;
        break;
    case K_VERSION: st = get_int(why, k, v, 0, INT64_MAX, &f->msg.version); break;
    case K_STEPS: st = get_int(why, k, v, 0, INT64_MAX, &f->msg.steps); break;
    case K_TOKENS: st = get_int(why, k, v, 0, INT64_MAX, &f->msg.tokens); break;
    case K_STEP_TIME: st = get_num(why, k, v, 0, &f->msg.step_time); break;
    case K_TRANSIT: st = get_num(why, k, v, 0, &f->msg.transit); break;
    case K_HELD: st = get_num(why, k, v, -1, &f->msg.held); break;
    case K_AGE: st = get_num(why, k, v, 0, &f->msg.age); break;
    case K_ANSWERS: /* the REPLAY's step k on the wire, 1 + k in the message (0 = none) */
        st = get_int(why, k, v, 0, INT64_MAX - 1, &i);
        f->msg.answers = i + 1;
        break;
    case K_FLAGS: {
        uint32_t known = flags_known(f->type);
        st = get_int(why, k, v, 0, UINT32_MAX, &i);
        if (st == DLC_OK && (i & ~(int64_t)known))
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT,
                        "header field \"fl\" = 0x%llx: unknown flag bits (a %s takes those of 0x%x)",
                        (unsigned long long)i, frame_names[f->type], known);
        f->msg.flags = (uint32_t)i;
        break;
    }
    case K_CODEC: st = get_codec(why, k, v, &f->msg.codec); break;
    case K_NONCE: st = get_bin(why, k, v, f->nonce, DLC_PROTO_NONCE); break;
    case K_MAC: st = get_bin(why, k, v, f->mac, DLC_PROTO_MAC); break;
    case K_PMIN: st = get_int(why, k, v, 1, 255, &i), h->proto_min = (int)i; break;
    case K_PMAX: st = get_int(why, k, v, 1, 255, &i), h->proto_max = (int)i; break;
    case K_RUN: st = get_str(why, k, v, h->run, sizeof h->run); break;
    case K_MODEL:
    case K_PLAN:
        if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return field_type(why, k, v, "an unsigned 64-bit hash");
        *(k == K_MODEL ? &h->model_hash : &h->plan_hash) = v->via.u64;
        break;
    case K_CAPS:
        st = get_names(why, k, v, DLC_PROTO_CAPS_MAX, cap_by_index, CAP_COUNT, &h->caps, &h->caps_unknown);
        break;
    case K_CODECS:
        st = get_names(why, k, v, 2 * DLC_CODEC_COUNT + DLC_PROTO_CAPS_MAX, codec_by_index, DLC_CODEC_COUNT,
                       &h->codecs, NULL);
        break;
    case K_BLOCK:
        st = get_int(why, k, v, DLC_CODEC_BLOCK_MIN, DLC_CODEC_BLOCK_MAX, &i);
        if (st == DLC_OK && (i & 1))
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"blk\" = %lld, expected an even block size",
                        (long long)i);
        h->block = (int)i;
        break;
    case K_ENDPOINTS:
        if (v->type != MSGPACK_OBJECT_ARRAY) return field_type(why, k, v, "an array of endpoints");
        if (v->via.array.size < 1 || v->via.array.size > DLC_PROTO_ENDPOINTS_MAX)
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"eps\": %u endpoints, expected 1..%d",
                        v->via.array.size, DLC_PROTO_ENDPOINTS_MAX);
        h->endpoints = (int)v->via.array.size;
        for (int e = 0; e < h->endpoints && st == DLC_OK; e++)
            st = get_str(why, k, &v->via.array.ptr[e], h->endpoint[e], sizeof h->endpoint[e]);
        break;
    case K_OWNER:
        if (v->type != MSGPACK_OBJECT_ARRAY) return field_type(why, k, v, "an array of endpoint indices");
        if (v->via.array.size < 1 || v->via.array.size > DLC_PROTO_FRAGMENTS_MAX)
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"own\": %u fragments, expected 1..%d",
                        v->via.array.size, DLC_PROTO_FRAGMENTS_MAX);
        h->fragments = (int)v->via.array.size;
        for (int p = 0; p < h->fragments && st == DLC_OK; p++) {
            st = get_int(why, k, &v->via.array.ptr[p], 0, DLC_PROTO_ENDPOINTS_MAX - 1, &i);
            h->owner[p] = (uint16_t)i;
        }
        break;
    case K_LAYOUT:
        if (v->type != MSGPACK_OBJECT_ARRAY) return field_type(why, k, v, "an array of tensor hashes");
        if (v->via.array.size < 1 || v->via.array.size > DLC_PROTO_TENSORS_MAX)
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header field \"lt\": %u tensors, expected 1..%d",
                        v->via.array.size, DLC_PROTO_TENSORS_MAX);
        h->tensors = (int)v->via.array.size;
        for (int t = 0; t < h->tensors && st == DLC_OK; t++) {
            st = get_int(why, k, &v->via.array.ptr[t], 0, UINT32_MAX, &i);
            h->tensor_hash[t] = (uint32_t)i;
        }
        break;
    case K_CODE:
        st = get_int(why, k, v, 1, 255, &i);
        f->code = (int)i;
        break;
    case K_TEXT: st = get_str(why, k, v, f->text, sizeof f->text); break;
    case K_EPOCH: st = get_int(why, k, v, 0, INT64_MAX, &f->msg.epoch); break;
    case K_INCARNATION: st = get_int(why, k, v, 0, INT64_MAX, &f->msg.incarnation); break;
    case K_RUN_HASH:
        if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 == 0)
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT,
                        "header field \"rh\": expected a nonzero unsigned 64-bit run hash");
        h->run_hash = v->via.u64;
        break;
    case K_RUN_PARAMS: st = get_run(why, v, &h->run_params); break;
    case K_CHECK:
        st = get_int(why, k, v, 0, UINT32_MAX, &i);
        f->crc = (uint32_t)i;
        f->has_crc = 1;
        break;
    case K_COUNT: DLC_ASSERT(0);
    }
    return st;
}

/* The CRC-32 of a message's payload (docs/protocol.md, "Resync checksum"): zlib's, as
 * ISA-L's crc32_gzip_refl computes it (the same function, at several times the speed). */
static uint32_t payload_crc(const dlc_msg *m) { return crc32_gzip_refl(0, m->payload, (uint64_t)m->len); }

/* ---- REPLICA payloads (proto.h): theta, momentum, then 40-byte contributor records,
 * every number little-endian at a fixed offset ---- */

static void le_put(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t le_get(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* n floats between host order and little-endian bytes (a plain copy on a little-endian
 * host; the bytes need not be aligned). */
static void floats_put(uint8_t *out, const float *v, int64_t n) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n > 0) memcpy(out, v, (size_t)n * sizeof(float));
#else
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        le_put(out + 4 * i, u, 4);
    }
#endif
}
static void floats_get(float *v, const uint8_t *in, int64_t n) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n > 0) memcpy(v, in, (size_t)n * sizeof(float));
#else
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)le_get(in + 4 * i, 4);
        memcpy(&v[i], &u, 4);
    }
#endif
}

/* Bytes of the float sections: theta, and momentum with its flag. */
static uint64_t replica_floats(int64_t n, uint32_t flags) {
    return (uint64_t)n * sizeof(float) * ((flags & DLC_MSG_REPLICA_MOMENTUM) ? 2 : 1);
}

/* Why record r (with its reserved field) is refused, into why[cap]: 0 if it is not. */
static int record_refusal(const dlc_replica_record *r, uint32_t reserved, char *why, size_t cap) {
    if (r->learner < 0 || r->learner >= DLC_PROTO_LEARNERS_MAX)
        snprintf(why, cap, "learner %d, expected 0..%d (0-based)", r->learner, DLC_PROTO_LEARNERS_MAX - 1);
    else if (reserved)
        snprintf(why, cap, "reserved field 0x%08x at byte 4, must be 0", (unsigned)reserved);
    else if (!isfinite(r->new_steps) || r->new_steps < 0)
        snprintf(why, cap, "new_steps %g, expected a finite number >= 0", r->new_steps);
    else if (r->base_version < 0 || r->steps < 0 || r->tokens < 0)
        snprintf(why, cap, "base_version %lld, steps %lld, tokens %lld: none may be negative",
                 (long long)r->base_version, (long long)r->steps, (long long)r->tokens);
    else
        return 0;
    return 1;
}

/* Record at p (40 bytes) into *r; its refusal into why[cap], 1 if refused. */
static int record_get(const uint8_t *p, dlc_replica_record *r, char *why, size_t cap) {
    uint64_t bits = le_get(p + 8, 8);
    r->learner = (int32_t)(uint32_t)le_get(p, 4);
    memcpy(&r->new_steps, &bits, sizeof bits);
    r->base_version = (int64_t)le_get(p + 16, 8);
    r->steps = (int64_t)le_get(p + 24, 8);
    r->tokens = (int64_t)le_get(p + 32, 8);
    return record_refusal(r, (uint32_t)le_get(p + 4, 4), why, cap);
}

static void record_put(uint8_t *p, const dlc_replica_record *r) {
    uint64_t bits;
    memcpy(&bits, &r->new_steps, sizeof bits);
    le_put(p, (uint32_t)(int32_t)r->learner, 4);
    le_put(p + 4, 0, 4);
    le_put(p + 8, bits, 8);
    le_put(p + 16, (uint64_t)r->base_version, 8);
    le_put(p + 24, (uint64_t)r->steps, 8);
    le_put(p + 32, (uint64_t)r->tokens, 8);
}

int64_t dlc_replica_payload_size(int64_t n, uint32_t flags, int count) {
    if (n < 0 || (uint64_t)n > DLC_PROTO_FRAME_MAX_LIMIT / sizeof(float))
        return dlc_error(DLC_ERR_ARG, "replica payload: %lld floats per section, expected 0..%zu (the largest frame)",
                         (long long)n, DLC_PROTO_FRAME_MAX_LIMIT / sizeof(float));
    if (flags & ~REPLICA_FLAGS)
        return dlc_error(DLC_ERR_ARG, "replica payload: flags 0x%x, expected those of 0x%x (momentum 0x%x, whole 0x%x)",
                         flags, REPLICA_FLAGS, DLC_MSG_REPLICA_MOMENTUM, DLC_MSG_REPLICA_WHOLE);
    if (count < 0 || count > DLC_PROTO_REPLICA_CONTRIBS_MAX)
        return dlc_error(DLC_ERR_ARG, "replica payload: %d contributor records, expected 0..%d", count,
                         DLC_PROTO_REPLICA_CONTRIBS_MAX);
    uint64_t bytes = replica_floats(n, flags) + (uint64_t)count * DLC_PROTO_REPLICA_RECORD;
    if (bytes > DLC_PROTO_FRAME_MAX_LIMIT)
        return dlc_error(DLC_ERR_ARG, "replica payload of %llu bytes (%lld floats%s, %d records): beyond the largest "
                         "frame, %zu bytes", (unsigned long long)bytes, (long long)n,
                         (flags & DLC_MSG_REPLICA_MOMENTUM) ? " with momentum" : "", count, DLC_PROTO_FRAME_MAX_LIMIT);
    return (int64_t)bytes;
}

/* The records a payload of len bytes holds (n, flags as its header says), or -1 with
 * the reason in why[cap] when len is no such payload's. */
static int replica_count(size_t len, int64_t n, uint32_t flags, char *why, size_t cap) {
    if (dlc_replica_payload_size(n, flags, 0) < 0) {
        snprintf(why, cap, "%s", dlc_last_error());
        return -1;
    }
    uint64_t floats = replica_floats(n, flags);
    if (len < floats || (len - floats) % DLC_PROTO_REPLICA_RECORD ||
        (len - floats) / DLC_PROTO_REPLICA_RECORD > DLC_PROTO_REPLICA_CONTRIBS_MAX) {
        snprintf(why, cap, "a payload of %zu bytes is not %llu bytes of floats (%lld%s) and then 0..%d records of %d "
                 "bytes", len, (unsigned long long)floats, (long long)n,
                 (flags & DLC_MSG_REPLICA_MOMENTUM) ? ", with momentum" : "", DLC_PROTO_REPLICA_CONTRIBS_MAX,
                 DLC_PROTO_REPLICA_RECORD);
        return -1;
    }
    return (int)((len - floats) / DLC_PROTO_REPLICA_RECORD);
}

int64_t dlc_replica_pack(uint8_t *out, size_t cap, int64_t n, uint32_t flags, const float *theta,
                         const float *momentum, const dlc_replica_record *records, int count) {
    int64_t size = dlc_replica_payload_size(n, flags, count);
    if (size < 0) return size;
    int mom = (flags & DLC_MSG_REPLICA_MOMENTUM) != 0;
    if (!out || (n > 0 && !theta) || (count > 0 && !records) || (mom && n > 0 && !momentum) || (!mom && momentum))
        return dlc_error(DLC_ERR_ARG, "dlc_replica_pack: out %s, theta %s, records %s, momentum %s with flags 0x%x: "
                         "expected out, theta (n = %lld), records (count = %d), and momentum exactly with 0x%x",
                         out ? "given" : "NULL", theta ? "given" : "NULL", records ? "given" : "NULL",
                         momentum ? "given" : "NULL", flags, (long long)n, count, DLC_MSG_REPLICA_MOMENTUM);
    if ((uint64_t)size > cap)
        return dlc_error(DLC_ERR_RANGE, "dlc_replica_pack: a payload of %lld bytes in a buffer of %zu", (long long)size,
                         cap);
    char why[200];
    for (int i = 0; i < count; i++)
        if (record_refusal(&records[i], 0, why, sizeof why))
            return dlc_error(DLC_ERR_ARG, "dlc_replica_pack: contributor record %d: %s", i, why);
    floats_put(out, theta, n);
    if (mom) floats_put(out + (size_t)n * sizeof(float), momentum, n);
    uint8_t *rec = out + replica_floats(n, flags);
    for (int i = 0; i < count; i++) record_put(rec + (size_t)i * DLC_PROTO_REPLICA_RECORD, &records[i]);
    return size;
}

dlc_status dlc_replica_unpack(const uint8_t *payload, size_t len, int64_t n, uint32_t flags, float *theta,
                              float *momentum) {
    char why[200];
    if (replica_count(len, n, flags, why, sizeof why) < 0) return dlc_error(DLC_ERR_FORMAT, "dlc_replica_unpack: %s", why);
    if (!payload && len) return dlc_error(DLC_ERR_ARG, "dlc_replica_unpack: payload of %zu bytes at NULL", len);
    if (theta) floats_get(theta, payload, n);
    if (momentum && (flags & DLC_MSG_REPLICA_MOMENTUM)) floats_get(momentum, payload + (size_t)n * sizeof(float), n);
    return DLC_OK;
}

dlc_status dlc_replica_record_read(const uint8_t *payload, size_t len, int64_t n, uint32_t flags, int i,
                                   dlc_replica_record *out) {
    char why[200];
    int count = replica_count(len, n, flags, why, sizeof why);
    if (count < 0) return dlc_error(DLC_ERR_FORMAT, "replica record %d: %s", i, why);
    if (!payload || !out) return dlc_error(DLC_ERR_ARG, "dlc_replica_record_read: NULL argument");
    if (i < 0 || i >= count)
        return dlc_error(DLC_ERR_RANGE, "replica record %d: the payload holds records 0..%d", i, count - 1);
    if (record_get(payload + replica_floats(n, flags) + (size_t)i * DLC_PROTO_REPLICA_RECORD, out, why, sizeof why))
        return dlc_error(DLC_ERR_FORMAT, "replica record %d: %s", i, why);
    return DLC_OK;
}

dlc_status dlc_replica_record_write(uint8_t *payload, size_t len, int64_t n, uint32_t flags, int i,
                                    const dlc_replica_record *r) {
    char why[200];
    int count = replica_count(len, n, flags, why, sizeof why);
    if (count < 0) return dlc_error(DLC_ERR_ARG, "replica record %d: %s", i, why);
    if (!payload || !r) return dlc_error(DLC_ERR_ARG, "dlc_replica_record_write: NULL argument");
    if (i < 0 || i >= count)
        return dlc_error(DLC_ERR_RANGE, "replica record %d: the payload holds records 0..%d", i, count - 1);
    if (record_refusal(r, 0, why, sizeof why)) return dlc_error(DLC_ERR_ARG, "replica record %d: %s", i, why);
    record_put(payload + replica_floats(n, flags) + (size_t)i * DLC_PROTO_REPLICA_RECORD, r);
    return DLC_OK;
}

/* A REPLICA's payload against the layout and its header: the fragment, the count of
 * records ("s"), the exact length, then every record. */
static dlc_status check_replica(const dlc_frame *f, const dlc_proto_layout *layout, int *why, bool encoding) {
    const dlc_msg *m = &f->msg;
    dlc_status bad = encoding ? DLC_ERR_ARG : DLC_ERR_FORMAT;
    if (m->fragment >= layout->fragments)
        return fail(why, DLC_PERR_MISMATCH, bad, "replica of fragment %d, but the model has %d fragments", m->fragment,
                    layout->fragments);
    if (m->steps > DLC_PROTO_REPLICA_CONTRIBS_MAX)
        return fail(why, DLC_PERR_MALFORMED, bad, "replica of fragment %d version %lld: %lld contributor records "
                    "(\"s\"), expected 0..%d", m->fragment, (long long)m->version, (long long)m->steps,
                    DLC_PROTO_REPLICA_CONTRIBS_MAX);
    int64_t n = layout->numel[m->fragment];
    uint64_t floats = replica_floats(n, m->flags);
    uint64_t want = floats + (uint64_t)m->steps * DLC_PROTO_REPLICA_RECORD;
    if (want != (uint64_t)m->len)
        return fail(why, DLC_PERR_MALFORMED, bad, "replica payload of %zu bytes, but fragment %d's %lld floats%s and %lld "
                    "contributor records of %d bytes take %llu bytes", m->len, m->fragment, (long long)n,
                    (m->flags & DLC_MSG_REPLICA_MOMENTUM) ? " with momentum" : "", (long long)m->steps,
                    DLC_PROTO_REPLICA_RECORD, (unsigned long long)want);
    char reason[200];
    dlc_replica_record r;
    for (int64_t i = 0; i < m->steps; i++)
        if (record_get(m->payload + floats + (size_t)i * DLC_PROTO_REPLICA_RECORD, &r, reason, sizeof reason))
            return fail(why, DLC_PERR_MALFORMED, bad, "replica of fragment %d version %lld: contributor record %lld: %s",
                        m->fragment, (long long)m->version, (long long)i, reason);
    return DLC_OK;
}

static dlc_status check_payload(const dlc_frame *f, const dlc_proto_layout *layout, int *why, bool encoding) {
    size_t len = f->msg.len;
    const char *name = frame_names[f->type];
    if (!dlc_frame_has_payload(f->type)) {
        if (len)
            return fail(why, DLC_PERR_MALFORMED, encoding ? DLC_ERR_ARG : DLC_ERR_FORMAT,
                        "%s with a payload of %zu bytes: it carries none", name, len);
        return DLC_OK;
    }
    if (!layout)
        return fail(why, DLC_PERR_UNEXPECTED, encoding ? DLC_ERR_ARG : DLC_ERR_STATE,
                    "%s before the model layout is known on this connection", name);
    if (f->type == DLC_FRAME_REPLICA) return check_replica(f, layout, why, encoding);
    int64_t numel;
    if (f->type == DLC_FRAME_GRADIENT || f->type == DLC_FRAME_GRADIENT_AVG) {
        numel = layout->model_numel;
    } else {
        if (f->msg.fragment >= layout->fragments)
            return fail(why, DLC_PERR_MISMATCH, encoding ? DLC_ERR_ARG : DLC_ERR_FORMAT,
                        "%s of fragment %d, but the model has %d fragments", name, f->msg.fragment, layout->fragments);
        numel = layout->numel[f->msg.fragment];
    }
    int64_t want = dlc_codec_encoded_size(f->msg.codec, &layout->codec, numel);
    if (want < 0) return fail(why, DLC_PERR_INTERNAL, DLC_ERR_ARG, "%s: %s", name, dlc_last_error());
    if ((uint64_t)want != (uint64_t)len)
        return fail(why, DLC_PERR_MALFORMED, encoding ? DLC_ERR_ARG : DLC_ERR_FORMAT,
                    "%s payload of %zu bytes, but %lld floats in %s take %lld bytes", name, len, (long long)numel,
                    dlc_codec_name(f->msg.codec), (long long)want);
    return DLC_OK;
}

static dlc_status check_layout(const dlc_proto_layout *l) {
    if (!l) return DLC_OK;
    if (l->fragments < 1 || l->fragments > DLC_PROTO_FRAGMENTS_MAX || !l->numel || l->model_numel < 0)
        return dlc_error(DLC_ERR_ARG, "protocol layout: %d fragments (expected 1..%d with numel) and model_numel %lld",
                         l->fragments, DLC_PROTO_FRAGMENTS_MAX, (long long)l->model_numel);
    return dlc_codec_check(DLC_CODEC_INT8, &l->codec);
}

static dlc_status check_hello(const dlc_frame *f, int *why, dlc_status st) {
    const dlc_hello *h = &f->hello;
    if (f->type != DLC_FRAME_HELLO && f->type != DLC_FRAME_WELCOME) return DLC_OK;
    if (h->proto_min < 1 || h->proto_max > 255 || h->proto_min > h->proto_max)
        return fail(why, DLC_PERR_MALFORMED, st, "%s: protocol versions %d..%d, expected 1 <= min <= max <= 255",
                    frame_names[f->type], h->proto_min, h->proto_max);
    if (f->type == DLC_FRAME_WELCOME) {
        if (h->proto_min != h->proto_max)
            return fail(why, DLC_PERR_MALFORMED, st, "welcome: versions %d..%d, expected the one chosen (min = max)",
                        h->proto_min, h->proto_max);
        /* a standby holds no learner id: its welcome (listing "standby") says -1 */
        if ((h->caps & DLC_CAP_STANDBY) ? h->learner != -1 : h->learner < 0)
            return fail(why, DLC_PERR_MALFORMED, st, "welcome: learner %d, expected %s", h->learner,
                        (h->caps & DLC_CAP_STANDBY) ? "-1 (a standby's welcome, listing \"standby\")" : "an id >= 0");
        if (h->endpoints < 1 || h->endpoints > DLC_PROTO_ENDPOINTS_MAX || h->fragments < 1 ||
            h->fragments > DLC_PROTO_FRAGMENTS_MAX)
            return fail(why, DLC_PERR_MALFORMED, st, "welcome: %d endpoints and %d fragments, expected 1..%d and 1..%d",
                        h->endpoints, h->fragments, DLC_PROTO_ENDPOINTS_MAX, DLC_PROTO_FRAGMENTS_MAX);
        for (int p = 0; p < h->fragments; p++)
            if (h->owner[p] >= h->endpoints)
                return fail(why, DLC_PERR_MALFORMED, st, "welcome: fragment %d owned by endpoint %u of %d", p,
                            h->owner[p], h->endpoints);
    }
    return DLC_OK;
}

struct dlc_proto_decoder {
    msgpack_zone zone; /* its first chunk, of DLC_PROTO_DECODER_KEEP bytes, is kept */
};

dlc_proto_decoder *dlc_proto_decoder_new(void) {
    dlc_proto_decoder *d = malloc(sizeof *d);
    if (!d || !msgpack_zone_init(&d->zone, DLC_PROTO_DECODER_KEEP)) {
        free(d);
        dlc_error(DLC_ERR_NOMEM, "dlc_proto_decoder_new: out of memory");
        return NULL;
    }
    return d;
}

void dlc_proto_decoder_free(dlc_proto_decoder *d) {
    if (!d) return;
    msgpack_zone_destroy(&d->zone);
    free(d);
}

static dlc_status decode(msgpack_zone *keep, const uint8_t *buf, size_t len, const dlc_proto_layout *layout,
                         dlc_frame *out, int *why);

dlc_status dlc_proto_decode(const uint8_t *buf, size_t len, const dlc_proto_layout *layout, dlc_frame *out,
                            int *why) {
    return decode(NULL, buf, len, layout, out, why);
}

dlc_status dlc_proto_decoder_decode(dlc_proto_decoder *d, const uint8_t *buf, size_t len,
                                    const dlc_proto_layout *layout, dlc_frame *out, int *why) {
    if (!d) return fail(why, DLC_PERR_INTERNAL, DLC_ERR_ARG, "dlc_proto_decoder_decode: NULL decoder");
    return decode(&d->zone, buf, len, layout, out, why);
}

/* keep: a decoder's zone, cleared before this returns; NULL: a zone of this call's own */
static dlc_status decode(msgpack_zone *keep, const uint8_t *buf, size_t len, const dlc_proto_layout *layout,
                         dlc_frame *out, int *why) {
    if (why) *why = DLC_PERR_NONE;
    if (!buf || !out) return fail(why, DLC_PERR_INTERNAL, DLC_ERR_ARG, "dlc_proto_decode: NULL argument");
    if (check_layout(layout) < 0) return fail(why, DLC_PERR_INTERNAL, DLC_ERR_ARG, "%s", dlc_last_error());
    size_t need;
    dlc_frame_type type;
    dlc_status st = dlc_proto_peek(buf, len, DLC_PROTO_FRAME_MAX_LIMIT, &need, &type, why);
    if (st < 0) return st;
    if (need == 0 || need != len)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "frame: %zu bytes given, but its prefix declares %zu", len,
                    need ? need : (size_t)DLC_PROTO_PREFIX);
    size_t hlen = rd32(buf + 12);
    const uint8_t *hdr = buf + DLC_PROTO_PREFIX;

    walker w = {hdr, hdr, hdr + hlen, 0, why};
    if (hdr[0] != 0xde && hdr[0] != 0xdf && (hdr[0] & 0xf0) != 0x80)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header: starts with msgpack type 0x%02x, expected a map",
                    hdr[0]);
    if ((st = walk(&w)) < 0) return st;
    if (w.p != w.end)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header: %td bytes after its map", w.end - w.p);

    frame_init_decoded(out, type);
    /* msgpack-c allocates its objects in this zone: at most one msgpack_object per value
     * the walk counted (a map's pairs are two values), so one chunk of that size holds
     * them all and a small header costs one small allocation, not msgpack_unpack_next's
     * 8 KiB zone */
    msgpack_zone own, *zone = keep ? keep : &own;
    if (!keep && !msgpack_zone_init(&own, w.objects * sizeof(msgpack_object) + 64))
        return fail(why, DLC_PERR_INTERNAL, DLC_ERR_NOMEM, "header: out of memory");
    msgpack_object obj;
    size_t off = 0;
    msgpack_unpack_return r = msgpack_unpack((const char *)hdr, hlen, &off, zone, &obj);
    if (r != MSGPACK_UNPACK_SUCCESS || off != hlen || obj.type != MSGPACK_OBJECT_MAP) {
        if (keep) msgpack_zone_clear(keep);
        else msgpack_zone_destroy(&own);
        return fail(why, r == MSGPACK_UNPACK_NOMEM_ERROR ? DLC_PERR_INTERNAL : DLC_PERR_MALFORMED,
                    r == MSGPACK_UNPACK_NOMEM_ERROR ? DLC_ERR_NOMEM : DLC_ERR_FORMAT,
                    "header: msgpack-c refused it (status %d) after it passed the walk", (int)r);
    }
    uint32_t present = 0;
    int hint = 0;
    const msgpack_object_map *map = &obj.via.map;
    for (uint32_t i = 0; i < map->size && st == DLC_OK; i++) {
        const msgpack_object *key = &map->ptr[i].key;
        if (key->type != MSGPACK_OBJECT_STR) {
            st = fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header: key %u is a %s, expected a string", i,
                      mp_type_name(key->type));
            break;
        }
        int k = key_find(key, hint);
        hint = k + 1;
        if (k == K_COUNT || !((type_keys[type] | type_optional[type]) & B(k))) continue; /* a newer peer's: ignored */
        if (present & B(k)) {
            st = fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "header: field \"%s\" appears twice", key_names[k]);
            break;
        }
        present |= B(k);
        st = read_field(why, (key_id)k, &map->ptr[i].val, out);
    }
    if (keep) msgpack_zone_clear(keep);
    else msgpack_zone_destroy(&own);
    if (st < 0) return st;
    uint32_t missing = type_keys[type] & ~present;
    if (missing) {
        int k = __builtin_ctz(missing);
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "%s without its field \"%s\"", frame_names[type],
                    key_names[k]);
    }
    if ((present & HELLO_RUN) && (present & HELLO_RUN) != HELLO_RUN)
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "%s with \"%s\" but without \"%s\"", frame_names[type],
                    present & B(K_RUN_HASH) ? "rh" : "rp", present & B(K_RUN_HASH) ? "rp" : "rh");
    if (type == DLC_FRAME_RESYNC && !(out->msg.flags & DLC_MSG_RESYNC))
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "resync without the resync flag");
    if (type == DLC_FRAME_FRAGMENT && (out->msg.flags & DLC_MSG_RESYNC))
        return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT, "fragment with the resync flag (a resync is its own type)");
    if ((st = check_hello(out, why, DLC_ERR_FORMAT)) < 0) return st;
    out->msg.payload = buf + DLC_PROTO_PREFIX + hlen;
    out->msg.len = len - DLC_PROTO_PREFIX - hlen;
    if (out->msg.len == 0) out->msg.payload = NULL;
    if ((st = check_payload(out, layout, why, false)) < 0) return st;
    if (out->has_crc) {
        uint32_t got = payload_crc(&out->msg);
        if (got != out->crc)
            return fail(why, DLC_PERR_MALFORMED, DLC_ERR_FORMAT,
                        "resync of fragment %d version %lld: its payload's crc32 is %08x, but the header says %08x "
                        "(\"ck\"): corrupted on the way, refused", out->msg.fragment, (long long)out->msg.version,
                        (unsigned)got, (unsigned)out->crc);
    }
    return DLC_OK;
}

/* ---- encoding ---- */

typedef struct outbuf {
    uint8_t *p;
    size_t len, cap;
} outbuf;

/* msgpack-c's packer hands over each value's bytes, mostly 1, 2, 3, 5 or 9 of them:
 * those are copied inline, without a call */
static int out_write(void *data, const char *buf, size_t len) {
    outbuf *o = data;
    if (len > o->cap - o->len) return -1;
    uint8_t *d = o->p + o->len;
    switch (len) {
    case 1: d[0] = (uint8_t)buf[0]; break;
    case 2: memcpy(d, buf, 2); break;
    case 3: memcpy(d, buf, 3); break;
    case 5: memcpy(d, buf, 5); break;
    case 9: memcpy(d, buf, 9); break;
    default: memcpy(d, buf, len);
    }
    o->len += len;
    return 0;
}

static int pack_cstr(msgpack_packer *pk, const char *s, size_t max) {
    size_t n = strnlen(s, max);
    return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

static int pack_names(msgpack_packer *pk, uint32_t bits, const char *(*name)(int), int count) {
    int n = 0;
    for (int i = 0; i < count; i++) n += (bits >> i) & 1;
    if (msgpack_pack_array(pk, (size_t)n)) return -1;
    for (int i = 0; i < count; i++)
        if (((bits >> i) & 1) && pack_cstr(pk, name(i), 64)) return -1;
    return 0;
}

static int pack_run(msgpack_packer *pk, const dlc_run_params *r) {
    int nf = dlc_run_field_count();
    if (msgpack_pack_map(pk, (size_t)nf)) return -1;
    for (int j = 0; j < nf; j++) {
        const dlc_run_field *f = dlc_run_field_at(j);
        const char *at = (const char *)r + f->offset;
        int iv;
        uint64_t u;
        double d;
        if (pack_cstr(pk, f->name, 64)) return -1;
        int bad;
        switch (f->type) {
        case DLC_RUN_INT: memcpy(&iv, at, sizeof iv), bad = msgpack_pack_int(pk, iv); break;
        case DLC_RUN_FLAG:
            memcpy(&iv, at, sizeof iv);
            bad = iv ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
            break;
        case DLC_RUN_HASH64: memcpy(&u, at, sizeof u), bad = msgpack_pack_uint64(pk, u); break;
        case DLC_RUN_NUMBER: memcpy(&d, at, sizeof d), bad = msgpack_pack_double(pk, d); break;
        case DLC_RUN_ENUM:
            memcpy(&iv, at, sizeof iv);
            bad = f->enum_name(iv) ? pack_cstr(pk, f->enum_name(iv), 64) : -1;
            break;
        default: bad = -1;
        }
        if (bad) return -1;
    }
    return 0;
}

/* The keys the encoder writes for f: the required ones and the optional ones it has. */
static uint32_t keys_of(const dlc_frame *f) {
    uint32_t keys = type_keys[f->type] | type_optional[f->type];
    if ((f->type == DLC_FRAME_HELLO || f->type == DLC_FRAME_WELCOME) && f->hello.run_hash == 0) keys &= ~HELLO_RUN;
    if (f->msg.answers <= 0) keys &= ~B(K_ANSWERS); /* a resync that answers no REPLAY */
    if (f->hello.tensors <= 0) keys &= ~B(K_LAYOUT);
    return keys;
}

static int pack_field(msgpack_packer *pk, key_id k, const dlc_frame *f) {
    const dlc_hello *h = &f->hello;
    if (msgpack_pack_str(pk, key_lens[k]) || msgpack_pack_str_body(pk, key_names[k], key_lens[k])) return -1;
    switch (k) {
    case K_LEARNER: return msgpack_pack_int64(pk, f->type == DLC_FRAME_HELLO || f->type == DLC_FRAME_WELCOME ? h->learner : f->msg.learner);
    case K_FRAGMENT: return msgpack_pack_int64(pk, f->msg.fragment);
    case K_VERSION: return msgpack_pack_int64(pk, f->msg.version);
    case K_STEPS: return msgpack_pack_int64(pk, f->msg.steps);
    case K_TOKENS: return msgpack_pack_int64(pk, f->msg.tokens);
    case K_STEP_TIME: return msgpack_pack_double(pk, f->msg.step_time);
    case K_TRANSIT: return msgpack_pack_double(pk, f->msg.transit);
    case K_HELD: return msgpack_pack_double(pk, f->msg.held);
    case K_AGE: return msgpack_pack_double(pk, f->msg.age);
    case K_ANSWERS: return msgpack_pack_int64(pk, f->msg.answers - 1);
    case K_FLAGS: return msgpack_pack_uint32(pk, f->msg.flags);
    case K_CODEC: return pack_cstr(pk, dlc_codec_name(f->msg.codec), 16);
    case K_NONCE: return msgpack_pack_bin(pk, DLC_PROTO_NONCE) || msgpack_pack_bin_body(pk, f->nonce, DLC_PROTO_NONCE);
    case K_MAC: return msgpack_pack_bin(pk, DLC_PROTO_MAC) || msgpack_pack_bin_body(pk, f->mac, DLC_PROTO_MAC);
    case K_PMIN: return msgpack_pack_int(pk, h->proto_min);
    case K_PMAX: return msgpack_pack_int(pk, h->proto_max);
    case K_RUN: return pack_cstr(pk, h->run, DLC_PROTO_RUN_MAX);
    case K_MODEL: return msgpack_pack_uint64(pk, h->model_hash);
    case K_PLAN: return msgpack_pack_uint64(pk, h->plan_hash);
    case K_CAPS: return pack_names(pk, h->caps & DLC_CAP_KNOWN, cap_by_index, CAP_COUNT);
    case K_CODECS: return pack_names(pk, h->codecs, codec_by_index, DLC_CODEC_COUNT);
    case K_BLOCK: return msgpack_pack_int(pk, h->block);
    case K_ENDPOINTS:
        if (msgpack_pack_array(pk, (size_t)h->endpoints)) return -1;
        for (int e = 0; e < h->endpoints; e++)
            if (pack_cstr(pk, h->endpoint[e], DLC_PROTO_ENDPOINT_MAX)) return -1;
        return 0;
    case K_OWNER:
        if (msgpack_pack_array(pk, (size_t)h->fragments)) return -1;
        for (int p = 0; p < h->fragments; p++)
            if (msgpack_pack_uint16(pk, h->owner[p])) return -1;
        return 0;
    case K_CODE: return msgpack_pack_int(pk, f->code);
    case K_TEXT: return pack_cstr(pk, f->text, DLC_PROTO_TEXT_MAX);
    case K_EPOCH: return msgpack_pack_int64(pk, f->msg.epoch);
    case K_INCARNATION: return msgpack_pack_int64(pk, f->msg.incarnation);
    case K_RUN_HASH: return msgpack_pack_uint64(pk, h->run_hash);
    case K_RUN_PARAMS: return pack_run(pk, &h->run_params);
    case K_CHECK: return msgpack_pack_uint32(pk, payload_crc(&f->msg));
    case K_LAYOUT:
        if (msgpack_pack_array(pk, (size_t)h->tensors)) return -1;
        for (int t = 0; t < h->tensors; t++)
            if (msgpack_pack_uint32(pk, h->tensor_hash[t])) return -1;
        return 0;
    case K_COUNT: break;
    }
    return -1;
}

/* What the decoder would refuse, refused before it is sent. */
static dlc_status check_encodable(const dlc_frame *f) {
    const dlc_msg *m = &f->msg;
    uint32_t keys = keys_of(f);
    const char *name = frame_names[f->type];
    if ((keys & B(K_LEARNER)) && f->type != DLC_FRAME_HELLO && f->type != DLC_FRAME_WELCOME &&
        (m->learner < 0 || m->learner >= DLC_PROTO_LEARNERS_MAX))
        return dlc_error(DLC_ERR_ARG, "%s: learner %d, expected 0..%d", name, m->learner, DLC_PROTO_LEARNERS_MAX - 1);
    if (f->type == DLC_FRAME_HELLO && (f->hello.learner < -1 || f->hello.learner >= DLC_PROTO_LEARNERS_MAX))
        return dlc_error(DLC_ERR_ARG, "hello: learner %d, expected -1..%d", f->hello.learner, DLC_PROTO_LEARNERS_MAX - 1);
    if (f->type == DLC_FRAME_HELLO && (f->hello.tensors < 0 || f->hello.tensors > DLC_PROTO_TENSORS_MAX))
        return dlc_error(DLC_ERR_ARG, "hello: %d tensors, expected 0..%d", f->hello.tensors, DLC_PROTO_TENSORS_MAX);
    if ((keys & B(K_FRAGMENT)) && (m->fragment < 0 || m->fragment >= DLC_PROTO_FRAGMENTS_MAX))
        return dlc_error(DLC_ERR_ARG, "%s: fragment %d, expected 0..%d", name, m->fragment, DLC_PROTO_FRAGMENTS_MAX - 1);
    if (((keys & B(K_VERSION)) && m->version < 0) || ((keys & B(K_STEPS)) && m->steps < 0) ||
        ((keys & B(K_TOKENS)) && m->tokens < 0))
        return dlc_error(DLC_ERR_ARG, "%s: version %lld, steps %lld, tokens %lld: none may be negative", name,
                         (long long)m->version, (long long)m->steps, (long long)m->tokens);
    if (((keys & B(K_STEP_TIME)) && !(isfinite(m->step_time) && m->step_time >= 0)) ||
        ((keys & B(K_TRANSIT)) && !(isfinite(m->transit) && m->transit >= 0)) ||
        ((keys & B(K_HELD)) && !(isfinite(m->held) && m->held >= -1)))
        return dlc_error(DLC_ERR_ARG, "%s: step_time %g, transit %g, held %g: must be finite, >= 0 (held >= -1)", name,
                         m->step_time, m->transit, m->held);
    if (m->answers < 0)
        return dlc_error(DLC_ERR_ARG, "%s: answers %lld: expected 0 (none) or 1 + a REPLAY's step", name,
                         (long long)m->answers);
    if (m->answers > 0 && f->type != DLC_FRAME_RESYNC)
        return dlc_error(DLC_ERR_ARG, "%s: answers %lld: only a RESYNC answers a REPLAY", name, (long long)m->answers);
    if ((keys & B(K_AGE)) && !(isfinite(m->age) && m->age >= 0))
        return dlc_error(DLC_ERR_ARG, "%s: age %g: must be finite, >= 0", name, m->age);
    if (f->type == DLC_FRAME_REPLICA || f->type == DLC_FRAME_REPLICA_ACK) {
        if (m->flags & ~flags_known(f->type))
            return dlc_error(DLC_ERR_ARG, "%s: flags 0x%x, expected those of 0x%x", name, m->flags, flags_known(f->type));
    } else if ((keys & B(K_FLAGS)) && m->flags != (f->type == DLC_FRAME_RESYNC ? DLC_MSG_RESYNC : 0u)) {
        return dlc_error(DLC_ERR_ARG, "%s: flags 0x%x, expected 0x%x", name, m->flags,
                         f->type == DLC_FRAME_RESYNC ? DLC_MSG_RESYNC : 0u);
    }
    if ((keys & MSG_FENCE) && (m->epoch < 0 || m->incarnation < 0))
        return dlc_error(DLC_ERR_ARG, "%s: epoch %lld, incarnation %lld: neither may be negative", name,
                         (long long)m->epoch, (long long)m->incarnation);
    if ((keys & HELLO_RUN) && dlc_run_params_check(&f->hello.run_params) < 0)
        return dlc_error(DLC_ERR_ARG, "%s: its run description: %s", name, dlc_last_error());
    if ((keys & B(K_CODEC)) && (unsigned)m->codec >= DLC_CODEC_COUNT)
        return dlc_error(DLC_ERR_ARG, "%s: codec %d out of range", name, (int)m->codec);
    if (f->type == DLC_FRAME_ERROR && (f->code < 1 || f->code > 255))
        return dlc_error(DLC_ERR_ARG, "error frame: code %d, expected 1..255", f->code);
    if (f->type == DLC_FRAME_HELLO || f->type == DLC_FRAME_WELCOME) {
        if (f->hello.block < DLC_CODEC_BLOCK_MIN || f->hello.block > DLC_CODEC_BLOCK_MAX || (f->hello.block & 1))
            return dlc_error(DLC_ERR_ARG, "%s: block %d, expected an even size in %d..%d", name, f->hello.block,
                             DLC_CODEC_BLOCK_MIN, DLC_CODEC_BLOCK_MAX);
        if (check_hello(f, NULL, DLC_ERR_ARG) < 0) return DLC_ERR_ARG;
    }
    if (m->len && !m->payload) return dlc_error(DLC_ERR_ARG, "%s: payload of %zu bytes at NULL", name, m->len);
    return DLC_OK;
}

int64_t dlc_proto_encode(const dlc_frame *f, const dlc_proto_layout *layout, uint8_t *out, size_t cap) {
    if (!f || !out) return dlc_error(DLC_ERR_ARG, "dlc_proto_encode: NULL argument");
    if ((unsigned)f->type >= DLC_FRAME_TYPE_COUNT)
        return dlc_error(DLC_ERR_ARG, "dlc_proto_encode: frame type %d out of range", (int)f->type);
    dlc_status st;
    if ((st = check_layout(layout)) < 0) return st;
    if ((st = check_encodable(f)) < 0) return st;
    if ((st = check_payload(f, layout, NULL, true)) < 0) return st;
    if (cap < DLC_PROTO_PREFIX) return dlc_error(DLC_ERR_RANGE, "dlc_proto_encode: buffer of %zu bytes", cap);

    outbuf ob = {out, DLC_PROTO_PREFIX, cap < DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX ? cap : DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &ob, out_write);
    uint32_t keys = keys_of(f);
    int bad = msgpack_pack_map(&pk, (size_t)__builtin_popcount(keys));
    for (int k = 0; k < K_COUNT && !bad; k++)
        if (keys & B(k)) bad = pack_field(&pk, (key_id)k, f);
    if (bad)
        return dlc_error(DLC_ERR_RANGE, "%s: header does not fit in %zu bytes (the limit is %d)", frame_names[f->type],
                         ob.cap - DLC_PROTO_PREFIX, DLC_PROTO_HEADER_MAX);
    size_t hlen = ob.len - DLC_PROTO_PREFIX;
    uint64_t length = (uint64_t)hlen + f->msg.len;
    if (length + DLC_PROTO_PREFIX > DLC_PROTO_FRAME_MAX_LIMIT)
        return dlc_error(DLC_ERR_RANGE, "%s of %llu bytes exceeds the largest frame, %zu bytes", frame_names[f->type],
                         (unsigned long long)length + DLC_PROTO_PREFIX, DLC_PROTO_FRAME_MAX_LIMIT);
    memcpy(out, "DLCW", 4);
    out[4] = DLC_PROTO_FRAME_VERSION;
    out[5] = (uint8_t)(f->type + 1);
    out[6] = out[7] = 0;
    wr32(out + 8, (uint32_t)length);
    wr32(out + 12, (uint32_t)hlen);
    return (int64_t)ob.len;
}

/* ---- negotiation ---- */

/* The first tensor whose name or shape differs, when both hellos list them: "; the layout
 * differs at tensor I: this server's is 'name' [shape]" (the learner's driver adds its
 * own, docs/protocol.md). */
static void layout_diff(const dlc_hello *ours, const dlc_hello *theirs, char *out, size_t cap) {
    if (ours->tensors <= 0 || theirs->tensors <= 0) return;
    int n = ours->tensors < theirs->tensors ? ours->tensors : theirs->tensors, i = 0;
    while (i < n && ours->tensor_hash[i] == theirs->tensor_hash[i]) i++;
    const char *desc = dlc_plan_tensor_desc(ours->plan, i);
    if (i >= ours->tensors)
        snprintf(out, cap, "; the layout differs at tensor %d: this server's has %d tensors", i, ours->tensors);
    else if (i >= theirs->tensors)
        snprintf(out, cap, "; the layout differs at tensor %d: the learner states %d tensors%s%.200s", i,
                 theirs->tensors, desc ? ", this server's is " : "", desc ? desc : "");
    else
        snprintf(out, cap, "; the layout differs at tensor %d: this server's is %.200s", i,
                 desc ? desc : "another name or shape");
}

dlc_status dlc_proto_negotiate(const dlc_hello *ours, const dlc_hello *theirs, dlc_hello *welcome, int *why) {
    if (why) *why = DLC_PERR_NONE;
    if (!ours || !theirs || !welcome) return fail(why, DLC_PERR_INTERNAL, DLC_ERR_ARG, "dlc_proto_negotiate: NULL argument");
    int lo = ours->proto_min > theirs->proto_min ? ours->proto_min : theirs->proto_min;
    int hi = ours->proto_max < theirs->proto_max ? ours->proto_max : theirs->proto_max;
    if (lo > hi)
        return fail(why, DLC_PERR_VERSION, DLC_ERR_STATE,
                    "protocol versions: the peer speaks %d..%d, this server %d..%d; upgrade the older side",
                    theirs->proto_min, theirs->proto_max, ours->proto_min, ours->proto_max);
    if (strcmp(ours->run, theirs->run) != 0)
        return fail(why, DLC_PERR_MISMATCH, DLC_ERR_STATE, "run id \"%s\", but this server runs \"%s\"", theirs->run,
                    ours->run);
    if (ours->model_hash != theirs->model_hash) {
        char d[320] = "";
        layout_diff(ours, theirs, d, sizeof d);
        return fail(why, DLC_PERR_MISMATCH, DLC_ERR_STATE,
                    "model layout hash %016llx, but this server's model is %016llx (another model or recipe?)%s",
                    (unsigned long long)theirs->model_hash, (unsigned long long)ours->model_hash, d);
    }
    if (ours->plan_hash != theirs->plan_hash)
        return fail(why, DLC_PERR_MISMATCH, DLC_ERR_STATE,
                    "fragment plan hash %016llx, but this server's plan is %016llx (sync.fragments or sync.plan differ)",
                    (unsigned long long)theirs->plan_hash, (unsigned long long)ours->plan_hash);
    if (ours->block != theirs->block)
        return fail(why, DLC_PERR_MISMATCH, DLC_ERR_STATE, "codec block %d, but this server uses %d", theirs->block,
                    ours->block);
    if (ours->run_hash && theirs->run_hash) {
        char d[320];
        if (dlc_run_diff(&ours->run_params, &theirs->run_params, d, sizeof d) == 1)
            return fail(why, DLC_PERR_MISMATCH, DLC_ERR_STATE, "run description differs: %s", d);
        if (ours->run_hash != theirs->run_hash)
            return fail(why, DLC_PERR_MISMATCH, DLC_ERR_STATE,
                        "run hash %016llx, but this server's run hashes to %016llx, though every field this build "
                        "knows agrees (a newer peer's field?)",
                        (unsigned long long)theirs->run_hash, (unsigned long long)ours->run_hash);
    }
    uint32_t codecs = ours->codecs & theirs->codecs;
    if (!(codecs & (1u << DLC_CODEC_F32)))
        return fail(why, DLC_PERR_MISMATCH, DLC_ERR_STATE, "codecs in common lack f32, which every peer must speak");
    /* a HELLO listing "standby" asks to attach as a standby, which only a server that
     * offers it takes: refused before any id is given, so the host never sees a learner */
    int standby = (theirs->caps & DLC_CAP_STANDBY) != 0;
    if (standby && !(ours->caps & DLC_CAP_STANDBY))
        return fail(why, DLC_PERR_MISMATCH, DLC_ERR_STATE, "the peer asks to attach as a standby (its hello lists "
                    "\"standby\"), but this server takes no standbys (its terms do not offer \"standby\")");
    if (ours->endpoints > 1 && !(theirs->caps & DLC_CAP_SHARDED) && !standby) {
        int self = 0;
        while (self < ours->endpoints - 1 && ours->endpoint[self][0]) self++;
        return fail(why, DLC_PERR_MISMATCH, DLC_ERR_STATE, "this syncer is shard %d of %d (it owns some of the "
                    "fragments), but the learner does not speak \"sharded\": give it every shard's address (the "
                    "address file of the run's syncers)", self + 1, ours->endpoints);
    }
    *welcome = *ours;
    welcome->proto_min = welcome->proto_max = hi;
    welcome->caps = ours->caps & theirs->caps;
    welcome->caps_unknown = 0;
    welcome->codecs = codecs;
    welcome->learner = standby ? -1 : theirs->learner;
    return DLC_OK;
}
