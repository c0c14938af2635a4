/*
 * proto.h - the wire protocol: frames of a fixed prefix, a small msgpack header and a raw
 * payload, encoded and decoded with hard limits on everything a peer controls.  Sans-IO:
 * bytes in, frames out, and back; the transport (net/) moves the bytes.  The byte-for-byte
 * description is docs/protocol.md.
 *
 *   offset  size  field
 *   0       4     magic "DLCW"
 *   4       1     frame version (DLC_PROTO_FRAME_VERSION)
 *   5       1     message type (dlc_frame_type + 1; 0 is never sent)
 *   6       2     reserved, 0
 *   8       4     length: bytes after the prefix (header + payload), big-endian
 *   12      4     header length, big-endian, <= length and <= DLC_PROTO_HEADER_MAX
 *   16      H     msgpack map: the message's fields (short string keys)
 *   16+H    L-H   payload: raw bytes (an encoded fragment or gradient), outside msgpack
 *
 * Reading: peek the first DLC_PROTO_PREFIX bytes with dlc_proto_peek, which checks magic,
 * version, type and both lengths against the connection's limit before anything is
 * buffered and returns the frame's total size; once that many bytes are in, decode them
 * with dlc_proto_decode.  Writing: dlc_proto_encode writes prefix and header into a small
 * buffer; the payload follows it on the wire untouched (by reference, never copied).
 *
 *   uint8_t hdr[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX];
 *   dlc_frame f; dlc_frame_init(&f, DLC_FRAME_HEARTBEAT); f.msg.steps = 12;
 *   int64_t n = dlc_proto_encode(&f, &layout, hdr, sizeof hdr);   // then send hdr[0..n)
 *
 *   size_t need; dlc_frame_type t; int why;
 *   if (dlc_proto_peek(buf, avail, limit, &need, &t, &why) < 0) -> send ERROR(why), close
 *   if (need && avail >= need && dlc_proto_decode(buf, need, &layout, &f, &why) == DLC_OK) ...
 *
 * Every failure is a negative dlc_status with a message naming what was wrong (the field,
 * the value, the limit), and *why, the ERROR code to answer the peer with.  A decoded
 * frame borrows its payload from the input buffer.
 */
#ifndef DILOCO_PROTO_H
#define DILOCO_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include "codec.h"
#include "msg.h"
#include "run.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- limits: each bounds what a peer can make us read, buffer or allocate ---- */

/* Bytes of the fixed frame prefix. */
#define DLC_PROTO_PREFIX 16
/* Version of the framing (the prefix); the messages' version is negotiated in HELLO. */
#define DLC_PROTO_FRAME_VERSION 1
/* Message protocol versions this build speaks (HELLO's proto_min..proto_max). */
#define DLC_PROTO_VERSION_MIN 1
#define DLC_PROTO_VERSION_MAX 1
/* Largest msgpack header: bounds the header bytes buffered and what msgpack-c allocates
 * for them (a declared count is never larger than the bytes present, checked first). */
#define DLC_PROTO_HEADER_MAX 16384
/* Deepest nesting of maps and arrays in a header (the map itself is depth 1). */
#define DLC_PROTO_DEPTH_MAX 3
/* Most entries of one header array or map (fragments' owners are the longest). */
#define DLC_PROTO_ITEMS_MAX 4096
/* Most msgpack objects in one header, all levels: bounds msgpack-c's zone. */
#define DLC_PROTO_OBJECTS_MAX 8192
/* Longest string or binary value in a header. */
#define DLC_PROTO_STR_MAX 1024
/* Longest text of an ERROR or BYE (longer text is cut there when encoding). */
#define DLC_PROTO_TEXT_MAX 512
/* Longest run id. */
#define DLC_PROTO_RUN_MAX 128
/* Endpoints a WELCOME may name, and the length of each ("host:port"). */
#define DLC_PROTO_ENDPOINTS_MAX 16
#define DLC_PROTO_ENDPOINT_MAX 255
/* Most fragments of a model (WELCOME's owner list), most learners (ids 0..MAX-1). */
#define DLC_PROTO_FRAGMENTS_MAX 1024
#define DLC_PROTO_LEARNERS_MAX 65536
/* Most tensors a HELLO lists the layout of (a larger model states only its hash). */
#define DLC_PROTO_TENSORS_MAX 1024
/* Capability names a HELLO may list (known or not). */
#define DLC_PROTO_CAPS_MAX 32
/* Default and largest configurable frame size (prefix + header + payload): a 64M-float
 * f32 fragment fits the default.  The limit of a connection is chosen by its owner. */
#define DLC_PROTO_FRAME_MAX_DEFAULT ((size_t)512 << 20)
#define DLC_PROTO_FRAME_MAX_LIMIT ((size_t)2047 << 20)
/* Frame limit before a peer has authenticated: the AUTH messages and an ERROR fit. */
#define DLC_PROTO_FRAME_MAX_UNAUTH 1024
/* Bytes of the authentication nonces and of an HMAC-SHA256. */
#define DLC_PROTO_NONCE 32
#define DLC_PROTO_MAC 32
/* Most contributor records of one REPLICA (a merge's contributors), and the bytes of one. */
#define DLC_PROTO_REPLICA_CONTRIBS_MAX 4096
#define DLC_PROTO_REPLICA_RECORD 40

/* ---- messages ---- */

typedef enum dlc_frame_type {
    DLC_FRAME_AUTH,           /* client -> server: nonce (the client's challenge) */
    DLC_FRAME_AUTH_CHALLENGE, /* server -> client: nonce (the server's), mac (its proof) */
    DLC_FRAME_AUTH_PROOF,     /* client -> server: mac (the client's proof) */
    DLC_FRAME_HELLO,          /* client -> server: hello (who it is, what it speaks) */
    DLC_FRAME_WELCOME,        /* server -> client: hello (the negotiated terms) */
    DLC_FRAME_HEARTBEAT,      /* either way: msg (HEARTBEAT fields) */
    DLC_FRAME_CONTRIBUTION,   /* learner -> syncer: msg, payload = encoded outer gradient */
    DLC_FRAME_FRAGMENT,       /* syncer -> learner: msg, payload = the new global fragment */
    DLC_FRAME_GRADIENT,       /* learner -> syncer (dp): msg, payload = the gradient */
    DLC_FRAME_GRADIENT_AVG,   /* syncer -> learner (dp): msg, payload = the average */
    DLC_FRAME_RESYNC,         /* syncer -> learner: one fragment of a full-model resync
                               * (msg as FRAGMENT with DLC_MSG_RESYNC) */
    DLC_FRAME_BYE,            /* either way: msg.learner, text (the reason) */
    DLC_FRAME_ERROR,          /* either way: code, text; the sender closes after it */
    DLC_FRAME_REPLAY,         /* learner -> syncer (dp, cap "replay"): msg.version, the last
                               * step whose average the learner holds; the syncer answers
                               * with the GRADIENT_AVGs after it (msg.h) */
    DLC_FRAME_REPLICA,        /* primary -> standby (cap "standby"): what one merge made of
                               * fragment msg.fragment, payload = the replica (below) */
    DLC_FRAME_REPLICA_ACK,    /* standby -> primary: it holds msg.fragment at msg.version */
    DLC_FRAME_TYPE_COUNT
} dlc_frame_type;

/* "auth", "auth_challenge", "auth_proof", "hello", "welcome", "heartbeat",
 * "contribution", "fragment", "gradient", "gradient_avg", "resync", "bye", "error",
 * "replay", "replica", "replica_ack"; NULL out of range. */
DLC_API const char *dlc_frame_type_name(dlc_frame_type type);
/* Whether frames of the type carry a payload (CONTRIBUTION, FRAGMENT, GRADIENT,
 * GRADIENT_AVG, RESYNC, REPLICA); the others are a header alone. */
DLC_API int dlc_frame_has_payload(dlc_frame_type type);

/* ERROR codes: why a peer is being disconnected. */
typedef enum dlc_proto_errcode {
    DLC_PERR_NONE,        /* 0: no error */
    DLC_PERR_MALFORMED,   /* the frame or its header breaks the format */
    DLC_PERR_TOO_LARGE,   /* a frame beyond the connection's limit */
    DLC_PERR_VERSION,     /* no frame or protocol version in common */
    DLC_PERR_AUTH,        /* authentication failed */
    DLC_PERR_UNEXPECTED,  /* a message not allowed in the connection's state */
    DLC_PERR_MISMATCH,    /* another run, model layout, plan or codec block */
    DLC_PERR_TIMEOUT,     /* the peer was silent past its deadline */
    DLC_PERR_OVERLOADED,  /* too many connections */
    DLC_PERR_SHUTDOWN,    /* the server is shutting down */
    DLC_PERR_INTERNAL,    /* a bug or resource failure on the sender's side */
    DLC_PERR_CONFLICT,    /* a learner id held by another live connection (the claim is
                           * refused), or this connection's id taken over by a new one
                           * after it fell silent */
    DLC_PERR_COUNT
} dlc_proto_errcode;

/* "none", "malformed", "too_large", "version", "auth", "unexpected", "mismatch",
 * "timeout", "overloaded", "shutdown", "internal", "conflict"; NULL out of range. */
DLC_API const char *dlc_proto_errcode_name(int code);

/* Text from the wire is data: every string the decoder hands out (an ERROR's or BYE's
 * text, a HELLO's run id, endpoints) has passed through this, and so does every event
 * text the transport and the runtimes build around one, since a byte-count truncation
 * may cut a character in two.  In place, s[0..n) (n = strlen(s)): each byte of an
 * invalid, overlong or truncated UTF-8 sequence, of a surrogate or a code point past
 * U+10FFFF, and each ASCII control character (0x00-0x1f, 0x7f) becomes '?', so the
 * result is valid UTF-8 of the same length, safe in a JSON string, a log line or a
 * terminal.  Returns the bytes replaced.  NULL is 0. */
DLC_API size_t dlc_text_clean(char *s);

/* Capabilities (HELLO and WELCOME list them by name; a name this build does not know is
 * counted and ignored, so an older peer talks to a newer one). */
#define DLC_CAP_RESYNC_PHASE 0x1u /* "resync_phase": resync fragments carry the schedule */
#define DLC_CAP_GRADIENT 0x2u     /* "gradient": data-parallel GRADIENT / GRADIENT_AVG */
#define DLC_CAP_SHARDED 0x4u      /* "sharded": fragments may be owned by other endpoints */
#define DLC_CAP_REPLAY 0x8u       /* "replay": a dp learner may ask for past averages (REPLAY) */
/* "standby": a role, not a feature.  A HELLO listing it asks to attach as a syncer's
 * standby (REPLICA in, REPLICA_ACK out), not as a learner; a server offers it by listing
 * it in its own terms, and a WELCOME listing it grants it (learner -1: a standby holds no
 * learner id).  docs/protocol.md, "Standbys". */
#define DLC_CAP_STANDBY 0x10u
/* The features a peer offers by default (every one but the standby role: a hello made
 * from DLC_CAP_ALL is a learner's or a plain server's), and every name this build knows.
 * lua/lnetopt.c pins DLC_CAP_ALL to its 4 names (DLCL_NET_CAP_BITS). */
#define DLC_CAP_ALL 0xfu
#define DLC_CAP_KNOWN (DLC_CAP_ALL | DLC_CAP_STANDBY)
/* The name of one capability bit, NULL if none. */
DLC_API const char *dlc_cap_name(uint32_t bit);

/* HELLO and WELCOME. */
typedef struct dlc_hello {
    int proto_min, proto_max;          /* HELLO: versions spoken; WELCOME: both the chosen one */
    char run[DLC_PROTO_RUN_MAX + 1];   /* run id, NUL-terminated, may be "" */
    uint64_t model_hash;               /* dlc_plan_model_hash: the parameter layout */
    uint64_t plan_hash;                /* dlc_plan_hash: the fragment plan */
    int learner;                       /* HELLO: the id asked for, -1 any; WELCOME: given
                                        * (-1 for a standby: DLC_CAP_STANDBY in caps) */
    uint32_t caps;                     /* DLC_CAP_* */
    int caps_unknown;                  /* decoded names this build does not know */
    uint32_t codecs;                   /* bit (1u << kind) per dlc_codec_kind spoken */
    int block;                         /* codec block size (dlc_codec_params) */
    uint64_t run_hash;                 /* dlc_run_hash(&run_params); 0 = no run stated (an older
                                        * peer): the run is then not compared */
    dlc_run_params run_params;         /* the run description, when run_hash != 0 */
    int fragments;                     /* WELCOME: P, entries of owner; HELLO: 0 */
    int endpoints;                     /* WELCOME: entries of endpoint ("" = this one) */
    char endpoint[DLC_PROTO_ENDPOINTS_MAX][DLC_PROTO_ENDPOINT_MAX + 1];
    uint16_t owner[DLC_PROTO_FRAGMENTS_MAX]; /* WELCOME: fragment -> endpoint index */
    int tensors;                       /* HELLO: entries of tensor_hash (0: not stated) */
    uint32_t tensor_hash[DLC_PROTO_TENSORS_MAX]; /* dlc_plan_tensor_hash of each, in order */
    const struct dlc_plan *plan;       /* ours only, never on the wire (NULL when decoded):
                                        * negotiation names this side's tensor that differs */
} dlc_hello;

/* One frame, decoded or to encode. */
typedef struct dlc_frame {
    dlc_frame_type type;
    dlc_msg msg;            /* HEARTBEAT, CONTRIBUTION, FRAGMENT, GRADIENT, GRADIENT_AVG,
                             * RESYNC, BYE, REPLAY, REPLICA, REPLICA_ACK: the state
                             * machines' message (msg.h), msg.type set from the frame
                             * type; payload borrowed */
    uint32_t crc;           /* RESYNC: CRC-32 (zlib's) of the payload.  The encoder computes
                             * and writes it (key "ck") whatever this field holds; the decoder
                             * refuses a RESYNC whose payload does not match it */
    int has_crc;            /* decoded: 1 when the frame stated "ck" (an older peer's does not) */
    uint8_t nonce[DLC_PROTO_NONCE]; /* AUTH, AUTH_CHALLENGE */
    uint8_t mac[DLC_PROTO_MAC];     /* AUTH_CHALLENGE, AUTH_PROOF */
    dlc_hello hello;                /* HELLO, WELCOME */
    int code;                       /* ERROR: dlc_proto_errcode */
    char text[DLC_PROTO_TEXT_MAX + 1]; /* ERROR message, BYE reason; NUL-terminated */
} dlc_frame;

/* What the payloads of a connection must be: the model's fragment sizes (from the plan
 * both ends share) and the codec block size.  Borrowed by the calls that take it. */
typedef struct dlc_proto_layout {
    int fragments;             /* P, 1..DLC_PROTO_FRAGMENTS_MAX */
    const int64_t *numel;      /* numel[P]: floats of each fragment */
    int64_t model_numel;       /* floats of the whole model (GRADIENT payloads) */
    dlc_codec_params codec;
} dlc_proto_layout;

/* Zeroes f and sets its type (and msg.type for the message-carrying types); learner and
 * fragment start at 0, hello.learner at -1. */
DLC_API void dlc_frame_init(dlc_frame *f, dlc_frame_type type);
/* The frame that carries state-machine message m (RESYNC for a FRAGMENT with
 * DLC_MSG_RESYNC); m and its payload are borrowed by *f.  DLC_ERR_ARG for a bad type. */
DLC_API dlc_status dlc_frame_from_msg(dlc_frame *f, const dlc_msg *m);

/* Checks the prefix of a frame.  buf[0..avail) is what has arrived so far.
 *   avail < DLC_PROTO_PREFIX: DLC_OK with *frame_len = 0 (wait for more);
 *   otherwise magic, frame version, type, reserved bits, header length (<= length and
 *   <= DLC_PROTO_HEADER_MAX) and the total size (<= frame_max) are checked: DLC_OK with
 *   *frame_len = the total bytes of the frame and *type, or DLC_ERR_FORMAT / DLC_ERR_RANGE
 *   with *why set.  frame_max is the connection's limit (DLC_PROTO_PREFIX < frame_max <=
 *   DLC_PROTO_FRAME_MAX_LIMIT, else DLC_ERR_ARG).  type and why may be NULL. */
DLC_API dlc_status dlc_proto_peek(const uint8_t *buf, size_t avail, size_t frame_max,
                                  size_t *frame_len, dlc_frame_type *type, int *why);

/* Decodes one whole frame buf[0..len) (len as dlc_proto_peek returned it) into *out.
 * The header is walked byte by byte before msgpack-c sees it (counts and lengths against
 * the bytes present and the limits above, depth, one map spanning the header exactly);
 * then every field's type and range is checked, required fields must be present and
 * unknown keys are ignored.  The payload must be empty for the types without one and,
 * for the others, exactly dlc_codec_encoded_size(codec, numel) of the fragment (or the
 * model) in *layout; without a layout (NULL) a payload-carrying frame is refused.  A
 * RESYNC that states its payload's CRC-32 ("ck") must match it: DLC_ERR_FORMAT with
 * DLC_PERR_MALFORMED naming the fragment and both values otherwise (the peer closes and,
 * reconnecting, is resynced again: docs/protocol.md, "Resync checksum").
 * out->msg.payload points into buf.  *out is set as dlc_frame_init would, then filled,
 * except for what no reader looks at, which is not written: the entries of hello.endpoint
 * and hello.owner past hello.endpoints and hello.fragments (6.6 of a frame's 7 KB), and
 * the bytes of hello.run and text after their NUL.  On failure *out is unspecified, *why
 * (may be NULL) holds the ERROR code to answer with. */
DLC_API dlc_status dlc_proto_decode(const uint8_t *buf, size_t len,
                                    const dlc_proto_layout *layout, dlc_frame *out,
                                    int *why);

/* A decoder keeps msgpack-c's memory from one frame to the next: dlc_proto_decoder_decode
 * is dlc_proto_decode without an allocation per frame (none while a header's msgpack
 * objects fit in DLC_PROTO_DECODER_KEEP bytes; a larger header's are freed after it).
 * One thread at a time uses a decoder: one per reading thread or connection. */
typedef struct dlc_proto_decoder dlc_proto_decoder;
#define DLC_PROTO_DECODER_KEEP 4096
DLC_API dlc_proto_decoder *dlc_proto_decoder_new(void); /* NULL: out of memory */
DLC_API void dlc_proto_decoder_free(dlc_proto_decoder *d);
DLC_API dlc_status dlc_proto_decoder_decode(dlc_proto_decoder *d, const uint8_t *buf, size_t len,
                                            const dlc_proto_layout *layout, dlc_frame *out, int *why);

/* Encodes the prefix and header of *f into out[0..cap) and returns the bytes written (the
 * payload, f->msg.payload[0..f->msg.len), is sent right after them, not copied here), or
 * a negative dlc_status: DLC_ERR_ARG for a field out of range or a payload that does not
 * fit *layout (which may be NULL for frames without a payload), DLC_ERR_RANGE if out is
 * too small (DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX always suffices).  What
 * dlc_proto_encode writes, dlc_proto_decode accepts. */
DLC_API int64_t dlc_proto_encode(const dlc_frame *f, const dlc_proto_layout *layout,
                                 uint8_t *out, size_t cap);

/* ---- REPLICA payloads (docs/protocol.md, "Standbys") ----
 *
 * A REPLICA's header states msg.fragment p, msg.version (the version the replica brings
 * p to), msg.epoch (the primary's), msg.steps = count, the contributor records, and
 * msg.flags (DLC_MSG_REPLICA_MOMENTUM, DLC_MSG_REPLICA_WHOLE: msg.h).  Its payload, with
 * n = the layout's numel[p], every number little-endian:
 *
 *   offset          size      field
 *   0               4n        theta: f32[n], Θ_p at that version
 *   4n              4n        momentum: f32[n], only with DLC_MSG_REPLICA_MOMENTUM
 *   4n·k + 40·i     40        contributor record i (k = 2 with momentum, else 1):
 *     +0   int32  learner (0-based, 0..DLC_PROTO_LEARNERS_MAX-1)
 *     +4   int32  reserved, 0
 *     +8   f64    new_steps (finite, >= 0)
 *     +16  int64  base_version, +24 int64 steps, +32 int64 tokens (each >= 0)
 *
 * The decoder checks the length exactly and every record; these helpers are the one
 * place that layout is written, for the encoder and the drivers alike. */
typedef struct dlc_replica_record {
    int learner;                          /* 0-based */
    double new_steps;                     /* the steps the merge added to its account */
    int64_t base_version, steps, tokens;  /* its contribution's, as sent */
} dlc_replica_record;

/* The bytes of a REPLICA payload of n floats per section, with `flags` and `count`
 * records: 4n (8n with momentum) + 40·count.  DLC_ERR_ARG (negative) for n < 0, count
 * outside 0..DLC_PROTO_REPLICA_CONTRIBS_MAX, or flags with bits other than MOMENTUM and
 * WHOLE, or a size past the largest frame. */
DLC_API int64_t dlc_replica_payload_size(int64_t n, uint32_t flags, int count);
/* Writes a whole REPLICA payload into out[0..cap): theta[n], then momentum[n] when flags
 * has DLC_MSG_REPLICA_MOMENTUM (momentum must then be given, and NULL otherwise), then
 * the `count` records (each checked as the decoder checks it).  Returns the bytes written
 * (dlc_replica_payload_size), or DLC_ERR_ARG naming what was wrong, DLC_ERR_RANGE if out
 * is too small. */
DLC_API int64_t dlc_replica_pack(uint8_t *out, size_t cap, int64_t n, uint32_t flags, const float *theta,
                                 const float *momentum, const dlc_replica_record *records, int count);
/* Copies theta (and momentum, with the flag) out of payload[0..len) into the caller's
 * arrays of n floats (the payload need not be aligned); either may be NULL to skip it.
 * DLC_ERR_FORMAT when len is not that of such a payload. */
DLC_API dlc_status dlc_replica_unpack(const uint8_t *payload, size_t len, int64_t n, uint32_t flags, float *theta,
                                      float *momentum);
/* Record i of payload[0..len) (n, flags as above; the count follows from len) into *out,
 * or record *r written at i.  DLC_ERR_FORMAT (read) or DLC_ERR_ARG (write), naming it,
 * for a len that is no such payload, i out of range, or a record the decoder refuses
 * (a learner out of range, the reserved field not 0, a negative or non-finite field). */
DLC_API dlc_status dlc_replica_record_read(const uint8_t *payload, size_t len, int64_t n, uint32_t flags, int i,
                                           dlc_replica_record *out);
DLC_API dlc_status dlc_replica_record_write(uint8_t *payload, size_t len, int64_t n, uint32_t flags, int i,
                                            const dlc_replica_record *r);

/* The server's side of HELLO: compares the client's hello with the server's own (`ours`:
 * versions, run, hashes, block, run description, codecs, caps, fragments and
 * endpoints/owner to announce) and fills *welcome with the terms: the highest version
 * both speak, the capabilities and codecs in common, the client's learner id (the host
 * may change it), or -1 for a standby (both list DLC_CAP_STANDBY; a HELLO asking for it
 * from a server that does not offer it is refused, DLC_PERR_MISMATCH, and a shard does
 * not ask a standby for "sharded").  When both state a run description (run_hash != 0), any field that
 * differs refuses the client, named with both values ("run description differs:
 * sync.tau: 2 here, 3 in the learner's run", dlc_run_diff), and so do different hashes.
 * DLC_ERR_STATE with *why = DLC_PERR_VERSION naming both ranges, or DLC_PERR_MISMATCH
 * naming the field and both values, when they cannot talk; the message is what the ERROR
 * frame should say. */
DLC_API dlc_status dlc_proto_negotiate(const dlc_hello *ours, const dlc_hello *theirs,
                                       dlc_hello *welcome, int *why);

#ifdef __cplusplus
}
#endif
#endif
