/*
 * fuzz_syncer.c - libFuzzer target for the syncer's whole receive path, not the decoder
 * alone: bytes from a TCP peer -> the transport's framing, authentication and HELLO
 * (net/) -> the syncer driver and its state machine (rt/srt.c, core/syncer.c) -> its
 * events as the Lua binding hands them out (lua/lrt.c, Syncer:poll) -> cluster.lua's
 * on_syncer_event, which the syncer host (`diloco-lua run`, `syncer`) calls on each ->
 * the metrics writer (lua/diloco/metrics.lua over lua/ljson.c) -> its file.  All of it
 * runs in this process and is instrumented; only liblua itself is not.
 *
 * Once: a Lua state with the diloco module, as lua/main.c sets it up, and in it two real
 * syncers (diloco.Syncer: two learners each, on 127.0.0.1:0, one known secret) over a
 * model of 64 floats: A decoupled with int8 contributions in 2 fragments, B data
 * parallel (f32 gradients); the cluster context on_syncer_event needs, its metrics
 * writer on a scratch file.
 *
 * Per input, byte 0 says what to do with the rest:
 *   bits 0-1  0: send it raw from the first byte on (before authentication)
 *             1: AUTH and a correct AUTH_PROOF (dlc_auth_proof with the secret, as a
 *                learner does), then the rest raw: the input writes the HELLO
 *             2: the handshake with a HELLO made from the next HELLO_CTL bytes (mode2_hello
 *                says how), then the rest raw
 *             3: the handshake with a learner's valid HELLO (rt_hello), then the rest
 *                raw: frames on a READY connection
 *   bit 2     the learner id asked for: 0 or 1
 *   bit 3     syncer B (dp) instead of A
 *   bit 4     modes 2 and 3: the rest is not raw but records of frames this target
 *             encodes (send_records): after the WELCOME and the join's resync, whose
 *             versions and epoch the records' fields are relative to, so that the
 *             mutations reach the syncer's state machine instead of the framing
 *   bits 5-6  unused
 *   bit 7     end with a close while the syncer's bytes are unread (a reset), not a
 *             half-close
 * Then it waits, in polls of at most 1 ms, until the syncer has closed the connection and
 * told its end (LOST or REFUSED, or a refusal counted in its stats: past the first of its
 * reason in an interval a refusal is summed in a REFUSALS event, every 0.05 s here;
 * after a BYE, quiet), each event through on_syncer_event,
 * and checks every line the writer added: complete, valid UTF-8, JSON that jansson reads
 * into an object with a string "event".  Every 64 inputs (and at the start) a fresh
 * learner's handshake must get its WELCOME and JOINED from each syncer.  Abort on: a Lua
 * error out of on_syncer_event or Syncer:poll (the host would die), a line that is not
 * valid JSON, a syncer that stops serving, or one that never closes a finished
 * connection or never tells that it ended.
 *
 * The syncers live across inputs, as a real one does across its peers, so a reproducer
 * may need the inputs before it; most replay alone.  Seeds: ctest/fuzz_corpus/syncer,
 * written by `DLC_FUZZ_SYNCER_SEEDS=DIR build-fuzz/fuzz/fuzz_syncer`.  Built by
 * -DDLC_FUZZ=ON, run by scripts/fuzz.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "diloco/diloco.h"
#include "diloco/rt.h"
#include "ldiloco.h"
#include "rt_internal.h"

#define SECRET "fuzz the syncer's receive path"
#define NSYNCERS 2
#define LEARNERS 2
#define CHECK_EVERY 64   /* inputs between two checks that the syncers still serve */
#define WAIT_S 10.0      /* for what a healthy syncer does at once (a loaded machine) */
#define HELLO_CTL 10     /* mode 2: control bytes of the HELLO */
#define METRICS_ROTATE (4 << 20)

/* What the target sets up in Lua: the two syncers, the context and writer of
 * cluster.lua's on_syncer_event, and pump(k, timeout): Syncer k's events that arrive
 * within timeout seconds (then those already there), each through on_syncer_event.
 * pump returns the count and whether one ended a connection (lost; refused before
 * READY or of an id out of range), a bye, a joined. */
static const char LUA_SETUP[] =
    "local secret, path, M = ...\n"
    "local diloco = require 'diloco'\n"
    "local cluster = require 'diloco.cluster'\n"
    "local metrics = require 'diloco.metrics'\n"
    "local params = diloco.Params { { 'a', diloco.full({ 48 }, 0.5) }, { 'b', diloco.full({ 16 }, -0.25) } }\n"
    "local net = { secret = secret, heartbeat = 1, timeout = 5, auth_timeout = 3, drain_timeout = 0.5 }\n"
    "local S = {\n"
    "  { plan = diloco.Plan(params, { fragments = 2 }),\n"
    "    learner = { preset = 'decoupled', H = 24, tau = 2, codec = 'int8', block = 32 },\n"
    "    syncer = { quorum = 1, grace = 'off' } },\n"
    "  { plan = diloco.Plan(params, { fragments = 1 }),\n"
    "    learner = { dp = true }, syncer = { quorum = 0, grace = 'off' } },\n"
    "}\n"
    "local w = assert(metrics.open(path))\n"
    "for k, s in ipairs(S) do\n"
    "  s.syncer_box = assert(diloco.Syncer { params = params, plan = s.plan, learners = M, run = 'fuzz',\n"
    "    listen = '127.0.0.1:0', net = net, learner = s.learner, syncer = s.syncer, refusals_every = 0.05 })\n"
    "  s.port = s.syncer_box:port()\n"
    "  -- what on_syncer_event reads of a run's context (cluster.lua); not supervising\n"
    "  s.ctx = { learners = {}, merges = 0, gm = 0, faults = 0, rejects = 0, quiet = true,\n"
    "    rt = { elastic = true }, versions = {}, reported = {},\n"
    "    recipe = { hooks = {}, sync = { quorum = s.syncer.quorum } }, t_start = diloco.clock(), metrics = w }\n"
    "  for m = 1, M do s.ctx.learners[m] = { id = m, state = 'running', crashes = 0 } end\n"
    "  s.ctx.account = diloco.Account(M, 0)\n"
    "end\n"
    "local function show(ev)\n"
    "  return string.format('%s event (learner %s, text %q)', tostring(ev.type), tostring(ev.learner),\n"
    "    tostring(ev.text))\n"
    "end\n"
    "local F = { S = S }\n"
    "function F.pump(k, timeout)\n"
    "  local s = S[k]\n"
    "  local n, ended, bye, joined = 0, false, false, false\n"
    "  local ev, err = s.syncer_box:poll(timeout)\n"
    "  while ev do\n"
    "    n = n + 1\n"
    "    local ok, e = pcall(cluster.on_syncer_event, s.ctx, ev)\n"
    "    if not ok then error(string.format('on_syncer_event(%s): %s', show(ev), tostring(e)), 0) end\n"
    "    if ev.type == 'lost' or (ev.type == 'refused' and (not ev.learner or ev.learner > M)) then ended = true end\n"
    "    bye = bye or ev.type == 'bye'\n"
    "    joined = joined or ev.type == 'joined'\n"
    "    ev, err = s.syncer_box:poll(0)\n"
    "  end\n"
    "  if err then error('syncer ' .. k .. ': its driver failed: ' .. tostring(err), 0) end\n"
    "  -- a refusal past the first of its reason in an interval is counted, not an event of\n"
    "  -- its own (the next refusals event sums it): counted is told\n"
    "  local refused = s.syncer_box:stats().refused\n"
    "  if refused > (s.refused_seen or 0) then ended = true end\n"
    "  s.refused_seen = refused\n"
    "  s.ctx.account:forget_merges(0) -- (bounded over a long fuzzing run)\n"
    "  return n, ended, bye, joined\n"
    "end\n"
    "function F.reopen()\n"
    "  assert(w:close())\n"
    "  w = assert(metrics.open(path))\n"
    "  for _, s in ipairs(S) do s.ctx.metrics = w end\n"
    "end\n"
    "return F\n";

typedef struct target {
    int port;
    dlc_hello hello[LEARNERS]; /* a learner's HELLO asking for id 0, 1 */
    dlc_proto_layout layout;
    int64_t *numel;
    dlc_learner_params lp; /* codec, block, dp of the run */
} target;

static lua_State *L;
static int F_ref;
static target T[NSYNCERS];
static char scratch[64], metrics_path[128];
static int metrics_fd = -1;
static off_t metrics_off;
static long inputs;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_syncer: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the metrics file: every line the writer adds ---- */

static int utf8_valid(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k;
        unsigned cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) k = 1, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef) k = 2, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4) k = 3, cp = c & 0x07;
        else return 0;
        if (n - i <= k) return 0; /* cut short */
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        i += k + 1;
    }
    return 1;
}

static int verbose; /* DLC_FUZZ_SYNCER_VERBOSE=1: every line to stderr */

static void check_line(const char *line, size_t n) {
    if (verbose) fprintf(stderr, "  %.*s\n", (int)n, line);
    if (!utf8_valid((const unsigned char *)line, n)) die("metrics line is not valid UTF-8: %.*s", (int)n, line);
    json_error_t err;
    /* a \u0000 escape is valid JSON: only what jansson's reader refuses by default else */
    json_t *j = json_loadb(line, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    if (!j) die("metrics line is not JSON (%s at column %d): %.*s", err.text, err.column, (int)n, line);
    if (!json_is_object(j) || !json_is_string(json_object_get(j, "event")))
        die("metrics line is not an object with a string \"event\": %.*s", (int)n, line);
    json_decref(j);
}

/* Reads what the writer added since the last call; every byte must be in complete lines
 * (it writes and flushes each whole, on this thread, inside pump). */
static void check_metrics(void) {
    static char *buf;
    static size_t cap;
    struct stat st;
    if (fstat(metrics_fd, &st) != 0) die("fstat %s: %s", metrics_path, strerror(errno));
    if (st.st_size < metrics_off) die("%s shrank from %lld to %lld bytes", metrics_path, (long long)metrics_off,
                                      (long long)st.st_size);
    size_t n = (size_t)(st.st_size - metrics_off);
    if (!n) return;
    if (n > cap && !(buf = realloc(buf, cap = n))) die("out of memory");
    if (pread(metrics_fd, buf, n, metrics_off) != (ssize_t)n) die("reading %s: %s", metrics_path, strerror(errno));
    if (buf[n - 1] != '\n') die("metrics file ends inside a line: ...%.*s", (int)(n < 200 ? n : 200), buf + (n < 200 ? 0 : n - 200));
    for (size_t i = 0; i < n;) {
        char *nl = memchr(buf + i, '\n', n - i);
        check_line(buf + i, (size_t)(nl - (buf + i)));
        i = (size_t)(nl - buf) + 1;
    }
    metrics_off = st.st_size;
    if (metrics_off > METRICS_ROTATE) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, F_ref);
        lua_getfield(L, -1, "reopen");
        if (lua_pcall(L, 0, 0, 0) != LUA_OK) die("reopening the metrics writer: %s", lua_tostring(L, -1));
        lua_pop(L, 1);
        metrics_off = 0;
    }
}

/* Syncer k's events for up to timeout_s, through on_syncer_event; flags as F.pump's. */
static int pump(int k, double timeout_s, int *ended, int *bye, int *joined) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, F_ref);
    lua_getfield(L, -1, "pump");
    lua_pushinteger(L, k + 1);
    lua_pushnumber(L, timeout_s);
    if (lua_pcall(L, 2, 4, 0) != LUA_OK) die("the syncer host would die: %s", lua_tostring(L, -1));
    int n = (int)lua_tointeger(L, -4);
    *ended |= lua_toboolean(L, -3);
    *bye |= lua_toboolean(L, -2);
    *joined |= lua_toboolean(L, -1);
    lua_pop(L, 5);
    return n;
}

/* ---- a peer on a raw socket ---- */

static int peer_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket: %s", strerror(errno));
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET, a.sin_port = htons((uint16_t)port), a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        /* libFuzzer's SIGALRM (its -timeout clock) may interrupt it: the connect goes on */
        int err = errno;
        if (err == EINTR) {
            struct pollfd p = {fd, POLLOUT, 0};
            double end = now_s() + WAIT_S;
            while (poll(&p, 1, 100) != 1 && now_s() < end) {}
            socklen_t len = sizeof err;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
            if (!(p.revents & POLLOUT)) err = ETIMEDOUT;
        }
        if (err) die("connecting to the syncer on port %d: %s", port, strerror(err));
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {(time_t)WAIT_S, 0}; /* a syncer that stops reading: send gives up */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

static void peer_send(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue; /* (libFuzzer's SIGALRM: every call below too) */
        if (w <= 0) return; /* the syncer closed (an ERROR before): what is left is not read */
        b += w, n -= (size_t)w;
    }
}

/* Reads n bytes by the deadline: 1, or 0 at EOF, an error or the deadline. */
static int read_exact(int fd, uint8_t *b, size_t n, double deadline) {
    while (n) {
        int ms = (int)((deadline - now_s()) * 1e3);
        if (ms < 0) return 0;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, ms) <= 0) continue;
        ssize_t r = recv(fd, b, n, MSG_DONTWAIT);
        if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (r <= 0) return 0;
        b += r, n -= (size_t)r;
    }
    return 1;
}

/* One frame from the syncer by the deadline: 1 decoded into *f, 0 otherwise. */
static int read_frame(int fd, const target *t, dlc_frame *f, double deadline) {
    static uint8_t buf[1 << 20];
    size_t need;
    if (!read_exact(fd, buf, DLC_PROTO_PREFIX, deadline)) return 0;
    if (dlc_proto_peek(buf, DLC_PROTO_PREFIX, sizeof buf, &need, NULL, NULL) != DLC_OK) return 0;
    if (!read_exact(fd, buf + DLC_PROTO_PREFIX, need - DLC_PROTO_PREFIX, deadline)) return 0;
    return dlc_proto_decode(buf, need, &t->layout, f, NULL) == DLC_OK;
}

static size_t encode(const target *t, const dlc_frame *f, uint8_t *out, size_t cap) {
    int64_t n = dlc_proto_encode(f, &t->layout, out, cap);
    if (n < 0) return 0;
    if (f->msg.len) memcpy(out + n, f->msg.payload, f->msg.len);
    return (size_t)n + f->msg.len;
}

/* AUTH, the syncer's AUTH_CHALLENGE (its proof checked), our AUTH_PROOF: 1 when sent. */
static int authenticate(int fd, const target *t) {
    uint8_t buf[4096];
    dlc_frame f, g;
    dlc_frame_init(&f, DLC_FRAME_AUTH);
    if (dlc_auth_nonce(f.nonce, sizeof f.nonce) != DLC_OK) die("dlc_auth_nonce: %s", dlc_last_error());
    peer_send(fd, buf, encode(t, &f, buf, sizeof buf));
    if (!read_frame(fd, t, &g, now_s() + WAIT_S) || g.type != DLC_FRAME_AUTH_CHALLENGE) return 0;
    uint8_t mac[DLC_PROTO_MAC];
    dlc_auth_proof(SECRET, strlen(SECRET), 1, f.nonce, g.nonce, mac);
    if (!dlc_auth_equal(mac, g.mac)) die("the syncer's AUTH_CHALLENGE does not prove the secret");
    dlc_frame p;
    dlc_frame_init(&p, DLC_FRAME_AUTH_PROOF);
    dlc_auth_proof(SECRET, strlen(SECRET), 0, f.nonce, g.nonce, p.mac);
    peer_send(fd, buf, encode(t, &p, buf, sizeof buf));
    return 1;
}

/* 1 when sent (0: a HELLO the encoder refuses, not sent: the syncer waits for one). */
static int send_hello(int fd, const target *t, const dlc_hello *h) {
    static dlc_frame f;
    static uint8_t buf[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX];
    dlc_frame_init(&f, DLC_FRAME_HELLO);
    f.hello = *h;
    size_t n = encode(t, &f, buf, sizeof buf);
    peer_send(fd, buf, n);
    return n > 0;
}

/* Mode 2: the valid HELLO of learner `id` changed as the control bytes c[0..HELLO_CTL)
 * say (c[1] a bit per change), the run id taken from *rest when asked. */
static void mode2_hello(const target *t, int id, const uint8_t *c, const uint8_t **rest, size_t *left,
                        dlc_hello *h) {
    *h = t->hello[id];
    uint8_t fl = c[1];
    if (fl & 1) h->learner = c[0] == 0x7f ? DLC_PROTO_LEARNERS_MAX - 1 : (int8_t)c[0];
    if (fl & 2) { /* the run id: bytes of the input, any */
        size_t n = c[2] % (DLC_PROTO_RUN_MAX + 1);
        if (n > *left) n = *left;
        memcpy(h->run, *rest, n);
        h->run[n] = '\0';
        *rest += n, *left -= n;
    }
    if (fl & 4) h->run_hash = 0; /* an older learner: no run description */
    if ((fl & 8) && h->run_hash) { /* a run that differs in one field, or its hash alone */
        if (c[3] & 1) h->run_hash ^= (uint64_t)c[3] << 8;
        else h->run_params.tau = c[3] >> 1, h->run_hash = dlc_run_hash(&h->run_params);
    }
    if (fl & 16) h->caps = c[4] & DLC_CAP_ALL;
    if (fl & 32) {
        h->codecs = (c[5] | (uint32_t)c[6] << 8) & ((1u << DLC_CODEC_COUNT) - 1);
        h->proto_min = 1 + (c[6] >> 4 & 3), h->proto_max = h->proto_min + (c[6] >> 6);
    }
    if (fl & 64) h->block = 2 * c[7];
    if (fl & 128) {
        h->model_hash ^= (uint64_t)(c[8] & 15) << 4, h->plan_hash ^= (uint64_t)(c[8] >> 4);
        if (h->tensors) h->tensor_hash[c[9] % h->tensors] ^= c[9] >> 4;
        if (c[9] & 8) h->tensors = 0;
    }
}

/* What a learner knows after its join: its id, each fragment's version and the epoch. */
typedef struct joined_state {
    int id;
    int64_t version[DLC_PROTO_FRAGMENTS_MAX], epoch;
} joined_state;

/* After the HELLO: the WELCOME (0 without one: refused) and the join's resync. */
static int await_join(int fd, const target *t, joined_state *j) {
    static dlc_frame f;
    memset(j, 0, sizeof *j);
    if (!read_frame(fd, t, &f, now_s() + WAIT_S) || f.type != DLC_FRAME_WELCOME) return 0;
    j->id = f.hello.learner;
    int P = t->layout.fragments, seen = 0;
    double end = now_s() + 1.0; /* the resync follows at once; without it, versions 0 */
    while (seen < P && read_frame(fd, t, &f, end))
        if (f.type == DLC_FRAME_RESYNC && f.msg.fragment >= 0 && f.msg.fragment < P) {
            j->version[f.msg.fragment] = f.msg.version, j->epoch = f.msg.epoch;
            seen++;
        }
    return 1;
}

/* Takes n bytes of the input (zeros past its end). */
static void take(const uint8_t **p, size_t *left, void *out, size_t n) {
    size_t k = n < *left ? n : *left;
    memcpy(out, *p, k);
    memset((uint8_t *)out + k, 0, n - k);
    *p += k, *left -= k;
}

/* Bit 4: the rest as records, each a frame of a learner.  A record is an op byte and 12
 * field bytes b[]: op & 7 the type (heartbeat, contribution twice, gradient, replay, bye,
 * error, heartbeat), op & 0x80 another learner id (b[0] % 4), fragment b[1] % P, version
 * the fragment's last known one minus (int8) b[2], steps b[3..4], tokens b[5..6] x 16,
 * step time b[7] / 64, transit b[8] / 256, epoch by b[9] (none, the syncer's, the next,
 * b[9] >> 2), incarnation b[10] >> 2 (0 when b[10] & 3 is 0), op & 0x40 another codec
 * (b[11]).  A payload follows: op & 0x10 its bytes raw from the input, else one float per
 * input byte ((int8) byte * 2^-(b[11] & 15)) encoded with the codec, so that it decodes;
 * a text (bye, error) takes b[11] bytes.  A frame the encoder refuses is not sent. */
static void send_records(int fd, const target *t, const joined_state *j, const uint8_t *p, size_t left) {
    static const dlc_frame_type types[8] = {DLC_FRAME_HEARTBEAT, DLC_FRAME_CONTRIBUTION, DLC_FRAME_CONTRIBUTION,
                                            DLC_FRAME_GRADIENT,  DLC_FRAME_REPLAY,       DLC_FRAME_BYE,
                                            DLC_FRAME_ERROR,     DLC_FRAME_HEARTBEAT};
    static uint8_t buf[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX + (1 << 16)], pay[1 << 16], raw[1 << 14];
    static float x[1 << 14];
    static dlc_frame f;
    while (left) {
        uint8_t op, b[12];
        take(&p, &left, &op, 1);
        take(&p, &left, b, sizeof b);
        dlc_frame_type type = types[op & 7];
        dlc_frame_init(&f, type);
        int P = t->layout.fragments;
        f.msg.learner = op & 0x80 ? b[0] % 4 : j->id;
        f.msg.fragment = type == DLC_FRAME_CONTRIBUTION ? b[1] % P : 0;
        f.msg.version = j->version[f.msg.fragment] - (int8_t)b[2];
        if (f.msg.version < 0) f.msg.version = 0;
        f.msg.steps = b[3] | b[4] << 8;
        f.msg.tokens = (int64_t)(b[5] | b[6] << 8) * 16;
        f.msg.step_time = b[7] / 64.0, f.msg.transit = b[8] / 256.0;
        int64_t epochs[4] = {0, j->epoch, j->epoch + 1, b[9] >> 2};
        f.msg.epoch = epochs[b[9] & 3];
        f.msg.incarnation = b[10] & 3 ? b[10] >> 2 : 0;
        if (type == DLC_FRAME_CONTRIBUTION || type == DLC_FRAME_GRADIENT) {
            dlc_codec_kind codec = type == DLC_FRAME_GRADIENT ? DLC_CODEC_F32 : t->lp.codec;
            if (op & 0x40) codec = (dlc_codec_kind)(b[11] % DLC_CODEC_COUNT);
            int64_t n = type == DLC_FRAME_GRADIENT ? t->layout.model_numel : t->numel[f.msg.fragment];
            int64_t size = dlc_codec_encoded_size(codec, &t->lp.codec_params, n);
            if (size < 0 || size > (int64_t)sizeof pay || n > (int64_t)sizeof raw) continue;
            if (op & 0x10) {
                take(&p, &left, pay, (size_t)size);
            } else {
                take(&p, &left, raw, (size_t)n);
                for (int64_t i = 0; i < n; i++) x[i] = ldexpf((float)(int8_t)raw[i], -(b[11] & 15));
                if (dlc_codec_encode(codec, &t->lp.codec_params, x, n, pay, sizeof pay, NULL) != size) continue;
            }
            f.msg.codec = codec, f.msg.payload = pay, f.msg.len = (size_t)size;
        } else if (type == DLC_FRAME_BYE || type == DLC_FRAME_ERROR) {
            size_t n = b[11]; /* < DLC_PROTO_TEXT_MAX */
            take(&p, &left, f.text, n);
            f.text[n] = '\0';
            f.code = 1 + b[1] % (DLC_PERR_COUNT - 1);
        }
        size_t n = encode(t, &f, buf, sizeof buf);
        if (n) peer_send(fd, buf, n);
    }
}

/* The connection is done: half-closed (or reset, abrupt), then until the syncer closed
 * it and told its end, every event through on_syncer_event. */
static void finish(int fd, int k, int abrupt) {
    int ended = 0, bye = 0, joined = 0, closed = 0;
    if (abrupt) {
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd);
        closed = 1;
    } else {
        shutdown(fd, SHUT_WR);
    }
    double end = now_s() + WAIT_S, quiet = 0;
    for (;;) {
        while (!closed) { /* what the syncer sends (its model): read and dropped */
            static uint8_t sink[1 << 16];
            ssize_t r = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
            if (r > 0 || (r < 0 && errno == EINTR)) continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            close(fd);
            closed = 1;
        }
        if (!closed) {
            struct pollfd p = {fd, POLLIN, 0};
            poll(&p, 1, 1);
        }
        int n = pump(k, closed ? 0.001 : 0, &ended, &bye, &joined);
        if (closed && ended) break;
        if (closed && bye) { /* said BYE: no LOST follows; done once quiet a moment */
            quiet = n ? now_s() : quiet ? quiet : now_s();
            if (now_s() - quiet > 0.002) break;
        }
        if (now_s() > end) {
            if (!closed) die("syncer %c kept a connection open %.0f s after the peer's last byte", 'A' + k, WAIT_S);
            die("syncer %c closed a connection and told its host nothing of it in %.0f s (no lost or refused)",
                'A' + k, WAIT_S);
        }
    }
}

/* A fresh learner's handshake must get WELCOME with its id, and the syncer JOINED. */
static void check_serves(int k) {
    const target *t = &T[k];
    int fd = peer_connect(t->port);
    if (!authenticate(fd, t)) die("syncer %c: no AUTH_CHALLENGE for a learner after %ld inputs", 'A' + k, inputs);
    send_hello(fd, t, &t->hello[1]);
    dlc_frame f;
    double end = now_s() + WAIT_S;
    int welcomed = 0;
    while (!welcomed && read_frame(fd, t, &f, end)) welcomed = f.type == DLC_FRAME_WELCOME && f.hello.learner == 1;
    if (!welcomed) die("syncer %c: a learner's valid handshake got no WELCOME after %ld inputs", 'A' + k, inputs);
    int ended = 0, bye = 0, joined = 0;
    while (!joined && now_s() < end) pump(k, 0.001, &ended, &bye, &joined);
    if (!joined) die("syncer %c: a welcomed learner did not join after %ld inputs", 'A' + k, inputs);
    finish(fd, k, 0);
    check_metrics();
}

/* ---- setup ---- */

static int read_run(lua_State *l) {
    target *t = lua_touserdata(l, 1);
    dlc_plan *plan = dlcL_checkplan(l, 2);
    dlc_run_params run;
    dlcL_read_run(l, 3, 4, plan, &run, NULL, NULL, NULL);
    if (dlc_run_learner_params(&run, 0, &t->lp) != DLC_OK) return dlcL_error(l);
    for (int m = 0; m < LEARNERS; m++)
        if (rt_hello(&t->hello[m], plan, "fuzz", m, t->lp.codec_params.block, t->lp.dp, &run) != DLC_OK)
            return dlcL_error(l);
    if (rt_layout(plan, t->lp.codec_params, &t->layout, &t->numel) != DLC_OK) return dlcL_error(l);
    return 0;
}

static void cleanup(void) {
    if (metrics_path[0]) unlink(metrics_path);
    if (scratch[0]) rmdir(scratch);
}

static void write_seeds(const char *dir);

/* libFuzzer's leak check after each input (-detect_leaks=1) reruns every input that
 * allocated more than it freed, then scans the heap: here that is nearly every input
 * (the syncers, the Lua state and the writer keep what they take, as a real syncer does),
 * so it would halve the first thousand inputs' rate for nothing until libFuzzer gives
 * up on it.  Off unless asked for; LeakSanitizer still checks the whole process at exit.
 * (libFuzzer reads its flags after this function, from the argv it leaves.) */
static void leaks_at_exit_only(int *argc, char ***argv) {
    static char *args[256];
    for (int i = 1; i < *argc; i++)
        if (!strncmp((*argv)[i], "-detect_leaks=", 14)) return;
    if (*argc + 2 > (int)(sizeof args / sizeof *args)) return;
    for (int i = 0; i < *argc; i++) args[i] = (*argv)[i];
    args[(*argc)++] = "-detect_leaks=0";
    args[*argc] = NULL;
    *argv = args;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    leaks_at_exit_only(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    verbose = getenv("DLC_FUZZ_SYNCER_VERBOSE") != NULL;
    strcpy(scratch, "/tmp/fuzz_syncer.XXXXXX");
    if (!mkdtemp(scratch)) die("mkdtemp: %s", strerror(errno));
    snprintf(metrics_path, sizeof metrics_path, "%s/metrics.jsonl", scratch);
    atexit(cleanup);
    L = luaL_newstate();
    luaL_openlibs(L);
    lua_getglobal(L, "package"); /* the Lua files of this source tree first */
    lua_pushstring(L, DLC_FUZZ_LUA_DIR "/?.lua;" DLC_FUZZ_LUA_DIR "/?/init.lua;");
    lua_getfield(L, -2, "path");
    lua_concat(L, 2);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
    luaL_requiref(L, "diloco", luaopen_diloco, 0);
    lua_setglobal(L, "diloco");
    if (luaL_loadbuffer(L, LUA_SETUP, sizeof LUA_SETUP - 1, "=fuzz_syncer") != LUA_OK)
        die("%s", lua_tostring(L, -1));
    lua_pushstring(L, SECRET);
    lua_pushstring(L, metrics_path);
    lua_pushinteger(L, LEARNERS);
    if (lua_pcall(L, 3, 1, 0) != LUA_OK) die("setting up the syncers: %s", lua_tostring(L, -1));
    lua_getfield(L, -1, "S");
    for (int k = 0; k < NSYNCERS; k++) {
        lua_rawgeti(L, -1, k + 1);
        lua_getfield(L, -1, "port");
        T[k].port = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
        lua_pushcfunction(L, read_run);
        lua_pushlightuserdata(L, &T[k]);
        lua_getfield(L, -3, "plan");
        lua_getfield(L, -4, "learner");
        lua_getfield(L, -5, "syncer");
        if (lua_pcall(L, 4, 0, 0) != LUA_OK) die("syncer %c's HELLO: %s", 'A' + k, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    F_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if ((metrics_fd = open(metrics_path, O_RDONLY | O_CLOEXEC)) < 0) die("%s: %s", metrics_path, strerror(errno));
    const char *seeds = getenv("DLC_FUZZ_SYNCER_SEEDS");
    if (seeds) {
        write_seeds(seeds);
        exit(0);
    }
    for (int k = 0; k < NSYNCERS; k++) check_serves(k);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] & 3, id = data[0] >> 2 & 1, k = data[0] >> 3 & 1, records = data[0] >> 4 & 1,
        abrupt = data[0] >> 7;
    const uint8_t *rest = data + 1;
    size_t left = size - 1;
    const target *t = &T[k];
    double t0 = now_s();
    int fd = peer_connect(t->port);
    if (mode == 0 || authenticate(fd, t)) {
        int hello = 0;
        if (mode == 2) {
            uint8_t c[HELLO_CTL] = {0};
            size_t n = left < HELLO_CTL ? left : HELLO_CTL;
            memcpy(c, rest, n);
            rest += n, left -= n;
            static dlc_hello h;
            mode2_hello(t, id, c, &rest, &left, &h);
            hello = send_hello(fd, t, &h);
        } else if (mode == 3) {
            hello = send_hello(fd, t, &t->hello[id]);
        }
        static joined_state j;
        if (hello && records) {
            if (await_join(fd, t, &j)) send_records(fd, t, &j, rest, left);
        } else {
            peer_send(fd, rest, left);
        }
    }
    double t1 = now_s();
    finish(fd, k, abrupt);
    if (verbose) fprintf(stderr, "  (sent in %.1f ms, ended in %.1f ms)\n", (t1 - t0) * 1e3, (now_s() - t1) * 1e3);
    check_metrics();
    if (++inputs % CHECK_EVERY == 0)
        for (int j = 0; j < NSYNCERS; j++) check_serves(j);
    return 0;
}

/* ---- the seed corpus (DLC_FUZZ_SYNCER_SEEDS=DIR) ---- */

static uint8_t seed[1 << 16];
static size_t seed_len;

static void seed_begin(int mode_byte) { seed[0] = (uint8_t)mode_byte, seed_len = 1; }

static void seed_bytes(const void *p, size_t n) {
    if (seed_len + n > sizeof seed) die("seed too large");
    memcpy(seed + seed_len, p, n);
    seed_len += n;
}

static void seed_frame(const target *t, const dlc_frame *f) {
    static uint8_t buf[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX + 4096];
    size_t n = encode(t, f, buf, sizeof buf);
    if (!n) die("seed frame %s: %s", dlc_frame_type_name(f->type), dlc_last_error());
    seed_bytes(buf, n);
}

static void seed_write(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(seed, 1, seed_len, fp) != seed_len || fclose(fp) != 0) die("writing %s", path);
}

/* A contribution of learner m to fragment p of syncer A (int8, its codec). */
static void seed_contribution(const target *t, int m, int p, int64_t version, const char *codec_as) {
    static float x[4096];
    static uint8_t pay[4096 * 4];
    int64_t n = t->numel[p];
    for (int64_t i = 0; i < n; i++) x[i] = 0.01f * (float)((i * 7 + p * 3) % 19 - 9);
    dlc_codec_kind kind = t->lp.codec;
    if (codec_as) dlc_codec_from_name(codec_as, &kind);
    int64_t w = dlc_codec_encode(kind, &t->lp.codec_params, x, n, pay, sizeof pay, NULL);
    if (w < 0) die("seed contribution: %s", dlc_last_error());
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_CONTRIBUTION);
    f.msg.learner = m, f.msg.fragment = p, f.msg.version = version, f.msg.steps = 24, f.msg.tokens = 4096;
    f.msg.step_time = 0.01, f.msg.codec = kind, f.msg.payload = pay, f.msg.len = (size_t)w;
    seed_frame(t, &f);
}

static void seed_heartbeat(const target *t, int m, int64_t steps) {
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_HEARTBEAT);
    f.msg.learner = m, f.msg.steps = steps, f.msg.tokens = steps * 100, f.msg.step_time = 0.02;
    seed_frame(t, &f);
}

static void seed_text(const target *t, dlc_frame_type type, int m, int code, const char *text) {
    dlc_frame f;
    dlc_frame_init(&f, type);
    f.msg.learner = m, f.code = code;
    snprintf(f.text, sizeof f.text, "%s", text);
    seed_frame(t, &f);
}

/* The HELLO frame of learner m with the run id's bytes replaced in place (same length). */
static void seed_hello_patched(const target *t, int m, const char *from, const char *to) {
    static uint8_t buf[DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX];
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_HELLO);
    f.hello = t->hello[m];
    size_t n = encode(t, &f, buf, sizeof buf);
    if (!n) die("seed hello: %s", dlc_last_error());
    if (from) {
        size_t fl = strlen(from);
        uint8_t *at = memmem(buf, n, from, fl);
        if (!at || strlen(to) != fl) die("seed hello: no \"%s\" to replace", from);
        memcpy(at, to, fl);
    }
    seed_bytes(buf, n);
}

static void write_seeds(const char *dir) {
    const target *A = &T[0], *B = &T[1];
    /* the valid path: a learner contributes both fragments, heartbeats, says BYE */
    seed_begin(3);
    seed_heartbeat(A, 0, 3);
    seed_contribution(A, 0, 0, 0, NULL);
    seed_contribution(A, 0, 1, 0, NULL);
    seed_heartbeat(A, 0, 24);
    seed_text(A, DLC_FRAME_BYE, 0, 0, "finished");
    seed_write(dir, "valid_contributions_bye");
    /* learner 2, a contribution in the wrong codec, one of a stale base, then lost */
    seed_begin(3 | 4);
    seed_contribution(A, 1, 1, 0, "f32");
    seed_contribution(A, 1, 0, 7, NULL);
    seed_write(dir, "contribution_refused_lost");
    /* a learner's ERROR once READY, a text with multibyte characters (lost, its text) */
    seed_begin(3);
    seed_text(A, DLC_FRAME_ERROR, 0, DLC_PERR_INTERNAL, "learner crashed: caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x9b");
    seed_write(dir, "ready_error_utf8");
    /* dp: a gradient, a replay request, a heartbeat, then reset */
    {
        static float g[4096];
        int64_t n = B->numel[0];
        for (int64_t i = 0; i < n; i++) g[i] = 0.001f * (float)(i % 13);
        dlc_frame f;
        dlc_frame_init(&f, DLC_FRAME_GRADIENT);
        f.msg.learner = 0, f.msg.version = 1, f.msg.tokens = 512, f.msg.codec = DLC_CODEC_F32;
        f.msg.payload = (const uint8_t *)g, f.msg.len = (size_t)n * sizeof(float);
        seed_begin(3 | 8 | 128);
        seed_heartbeat(B, 0, 1);
        seed_frame(B, &f);
        dlc_frame_init(&f, DLC_FRAME_REPLAY);
        f.msg.learner = 0, f.msg.version = 0;
        seed_frame(B, &f);
        seed_write(dir, "dp_gradient_replay_reset");
    }
    /* before authentication: an ERROR frame (its text reaches the refusal), with
     * ASCII and with bytes that are not UTF-8; a stray HTTP request */
    seed_begin(0);
    seed_text(A, DLC_FRAME_ERROR, 0, DLC_PERR_SHUTDOWN, "going away");
    seed_write(dir, "preauth_error");
    seed_begin(0);
    seed_text(A, DLC_FRAME_ERROR, 0, DLC_PERR_AUTH, "bad \xff\xfe\xc3\x28 bytes \xed\xa0\x80");
    seed_write(dir, "preauth_error_not_utf8");
    seed_begin(0);
    seed_bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
    seed_write(dir, "preauth_http");
    /* the HELLO written by the input: valid, then with a run id that is not UTF-8 (the
     * mismatch names it) and a codec name that is not (ignored) */
    seed_begin(1);
    seed_hello_patched(A, 0, NULL, NULL);
    seed_contribution(A, 0, 0, 0, NULL);
    seed_write(dir, "hello_raw_valid");
    seed_begin(1);
    seed_hello_patched(A, 0, "\xa4" "fuzz", "\xa4" "\xc3\x28\xff" "z");
    seed_write(dir, "hello_raw_run_not_utf8");
    seed_begin(1 | 4);
    seed_hello_patched(A, 1, "\xa4" "int4", "\xa4" "\xe2\x28\xa1" "4");
    seed_write(dir, "hello_raw_codec_not_utf8");
    /* mode 2: an id out of range with an odd run id; a run that differs in tau */
    {
        uint8_t c[HELLO_CTL] = {5, 1 | 2, 9};
        seed_begin(2);
        seed_bytes(c, sizeof c);
        seed_bytes("r\xc3\xa9n\x01\x7f\xc0\xaf", 9);
        seed_write(dir, "hello_ctl_odd_run_id");
        uint8_t d[HELLO_CTL] = {0, 8, 0, 6};
        seed_begin(2 | 4);
        seed_bytes(d, sizeof d);
        seed_write(dir, "hello_ctl_run_differs");
        uint8_t e[HELLO_CTL] = {0, 128 | 32, 0, 0, 0, 0x3f, 0x10, 0, 0x21, 0x13};
        seed_begin(2 | 8);
        seed_bytes(e, sizeof e);
        seed_write(dir, "hello_ctl_model_differs");
    }
    /* bit 4: records (send_records) */
    {
        static uint8_t vals[64];
        for (int i = 0; i < 64; i++) vals[i] = (uint8_t)(i * 37 % 23 - 11);
        uint8_t hb[13] = {0, 0, 0, 0, 3, 0, 0, 1, 16, 8, 1, 0, 0};
        uint8_t c0[13] = {1, 0, 0, 0, 24, 0, 0, 1, 16, 8, 1, 0, 7};
        uint8_t c1[13] = {2, 0, 1, 0, 24, 0, 0, 1, 16, 8, 1, 0, 7};
        uint8_t stale[13] = {1, 0, 0, 3, 48, 0, 0, 2, 16, 8, 2, 0, 7};
        uint8_t bye[13] = {5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 6};
        seed_begin(3 | 16);
        seed_bytes(hb, 13);
        seed_bytes(c0, 13), seed_bytes(vals, (size_t)A->numel[0]);
        seed_bytes(c1, 13), seed_bytes(vals, (size_t)A->numel[1]);
        seed_bytes(stale, 13), seed_bytes(vals, (size_t)A->numel[0]);
        seed_bytes(bye, 13), seed_bytes("done \xe2\x9c\x93", 6);
        seed_write(dir, "records_contributions_bye");
        uint8_t g1[13] = {3, 0, 0, 0xff, 1, 0, 2, 0, 16, 8, 1, 0, 9};
        uint8_t g2[13] = {3, 0, 0, 0xfe, 2, 0, 2, 0, 16, 8, 1, 0, 9};
        uint8_t rp[13] = {4, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0};
        uint8_t er[13] = {6, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
        seed_begin(3 | 8 | 16);
        seed_bytes(g1, 13), seed_bytes(vals, (size_t)B->layout.model_numel);
        seed_bytes(g2, 13), seed_bytes(vals, (size_t)B->layout.model_numel);
        seed_bytes(rp, 13);
        seed_bytes(er, 13), seed_bytes("oops \xc3\xa9\xff", 9);
        seed_write(dir, "records_dp_gradients_replay_error");
    }
    fprintf(stderr, "fuzz_syncer: seeds written to %s\n", dir);
}
