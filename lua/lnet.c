/*
 * lnet.c - diloco.net: the transport (net/include/diloco/net.h, docs/transport.md) from
 * Lua, for recipes and tests: start a server or a client, send frames, poll events, read
 * counters, shape links.
 *
 *     local net = assert(diloco.net.new { secret = "s3cret", hello = { run = "r1" },
 *                                         layout = { numel = { 100, 256 } } })
 *     local port = assert(net:listen("127.0.0.1:0"))
 *     local peer = assert(other:connect("127.0.0.1:" .. port))
 *     local ev = net:poll(1.0)          -- {kind = "ready", peer = 3, hello = {...}} or nil
 *     assert(net:send(ev.peer, { type = "fragment", fragment = 1, version = 4,
 *                                payload = diloco.codec_encode("f32", x) }))
 *     net:close()
 *
 * Threads: a Net owns one I/O thread (dlc_net_new), which never calls Lua; this file only
 * calls the thread-safe API from the Lua thread and polls for events.  A sent payload is
 * copied once into a malloc'd buffer that the net owns and frees (Lua strings may move or
 * be collected while the I/O thread still writes it).
 *
 * Numbering: learners, fragments and WELCOME's endpoint indices are 1-based like every
 * Lua position (lvtime.c, lchaos.c); the C side is 0-based and this file converts both
 * ways.  Peer ids are opaque handles, passed through unchanged.
 *
 * Errors (ldiloco.h): a wrong argument or option raises, naming it; an environmental
 * failure (an address that does not parse or is in use, an unreadable secret file, a peer
 * that is not ready, a full queue) returns nil, message, code, code the status name
 * ("DLC_ERR_STATE", "DLC_ERR_RANGE", "DLC_ERR_IO", ...).
 *
 * Lifetime: a box holds its dlc_net (NULL once closed); __gc, __close and net:close()
 * share one idempotent release (dlcL_newtype), which flushes and joins the I/O thread
 * (dlc_net_free: up to drain_timeout seconds).  net:close(peer) closes one peer.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/net.h"
#include "ldiloco.h"

#define DLCL_NET "diloco.Net"
#define WHO "diloco.net.new"

void dlcL_open_net(lua_State *L, int mod, int st);

/* The config strings the net may keep pointers to (cfg.secret_file, cfg.tls_*), copied
 * into the box's tail so that they live exactly as long as the net. */
enum { S_SECRET_FILE, S_CERT, S_KEY, S_CA, S_COUNT };

typedef struct netbox {
    dlc_net *net;           /* owned; NULL when closed (or not yet acquired) */
    int has_hello;          /* cfg.hello was given: READY events carry one */
    int ev_held;            /* ev was taken by dlc_net_poll and not yet released */
    dlc_net_event ev;       /* the event being turned into a table (released on the next
                             * poll or at close if building the table raised) */
    dlc_hello hello;        /* cfg.hello points here */
    dlc_proto_layout layout; /* cfg.layout points here; numel = tail */
    int64_t tail[];         /* numel[P], then the strings of S_* */
} netbox;

static const dlcL_type net_type; /* below */

static netbox *checkbox(lua_State *L, int arg) {
    netbox *b = luaL_checkudata(L, arg, DLCL_NET);
    if (!b->net) luaL_argerror(L, arg, "Net has been closed");
    return b;
}

static void drop_event(netbox *b) {
    if (b->ev_held) {
        b->ev_held = 0;
        dlc_net_event_release(&b->ev);
    }
}

static void net_release(void *box) {
    netbox *b = box;
    drop_event(b);
    dlc_net_free(b->net);
}

/* ---- options ---- */

/* Raises unless every key of the table at t is one of `known` (NULL-terminated). */
static void check_keys(lua_State *L, int t, const char *who, const char *const *known) {
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        int ok = 0;
        for (int i = 0; k && known[i]; i++) ok |= !strcmp(k, known[i]);
        if (!ok) {
            luaL_Buffer lb;
            luaL_buffinit(L, &lb);
            for (int i = 0; known[i]; i++) {
                if (i) luaL_addstring(&lb, ", ");
                luaL_addstring(&lb, known[i]);
            }
            luaL_pushresult(&lb);
            if (k)
                luaL_error(L, "%s: unknown option '%s' (known: %s)", who, k, lua_tostring(L, -1));
            luaL_error(L, "%s: option keys must be strings, got a %s key (known: %s)", who,
                       luaL_typename(L, -2), lua_tostring(L, -1));
        }
    }
}

/* t[k] as a number in lo..hi (an integer if `integer`; lo excluded if `open`), def when
 * nil; a bad value raises "who: k = v: expected <expect>". */
static double num_opt(lua_State *L, int t, const char *who, const char *k, double def, double lo, double hi,
                      int integer, int open, const char *expect) {
    int ty = lua_getfield(L, t, k);
    double v = def;
    if (ty != LUA_TNIL) {
        if (ty != LUA_TNUMBER) luaL_error(L, "%s: %s must be a number (%s), got a %s", who, k, expect, luaL_typename(L, -1));
        v = lua_tonumber(L, -1);
        if (!(v >= lo && v <= hi) || (open && v == lo) || (integer && v != floor(v)))
            luaL_error(L, "%s: %s = %s: expected %s", who, k, luaL_tolstring(L, -1, NULL), expect);
    }
    lua_pop(L, 1);
    return v;
}

/* t[k] as a string (length in *len if len), def when nil. The string is the table's. */
static const char *str_opt(lua_State *L, int t, const char *who, const char *k, const char *def, size_t *len) {
    int ty = lua_getfield(L, t, k);
    const char *v = def;
    if (len) *len = def ? strlen(def) : 0;
    if (ty != LUA_TNIL) {
        if (ty != LUA_TSTRING) luaL_error(L, "%s: %s must be a string, got a %s", who, k, luaL_typename(L, -1));
        v = lua_tolstring(L, -1, len);
    }
    lua_pop(L, 1);
    return v;
}

static int bool_opt(lua_State *L, int t, const char *who, const char *k, int def) {
    int ty = lua_getfield(L, t, k);
    int v = def;
    if (ty != LUA_TNIL) {
        if (ty != LUA_TBOOLEAN) luaL_error(L, "%s: %s must be a boolean, got a %s", who, k, luaL_typename(L, -1));
        v = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

/* Pushes t[k] if it is a table and returns its index, 0 (nothing pushed) when nil. */
static int table_opt(lua_State *L, int t, const char *who, const char *k) {
    int ty = lua_getfield(L, t, k);
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        return 0;
    }
    if (ty != LUA_TTABLE) luaL_error(L, "%s: %s must be a table, got a %s", who, k, luaL_typename(L, -1));
    return lua_gettop(L);
}

/* A 64-bit hash: an integer (its bits) or up to 16 hex digits (as Plan.model_hash). */
static uint64_t hash_opt(lua_State *L, int t, const char *who, const char *k) {
    int ty = lua_getfield(L, t, k);
    uint64_t v = 0;
    if (ty == LUA_TNUMBER && lua_isinteger(L, -1)) {
        v = (uint64_t)lua_tointeger(L, -1);
    } else if (ty == LUA_TSTRING) {
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        char *end = NULL;
        if (n >= 1 && n <= 16 && strspn(s, "0123456789abcdefABCDEF") == n) v = strtoull(s, &end, 16);
        if (!end) luaL_error(L, "%s: %s = \"%s\": expected up to 16 hex digits (as plan.%s) or an integer", who, k, s, k);
    } else if (ty != LUA_TNIL) {
        luaL_error(L, "%s: %s must be an integer or a hex string (as plan.%s), got %s", who, k, k,
                   luaL_tolstring(L, -1, NULL));
    }
    lua_pop(L, 1);
    return v;
}

static void pushhex(lua_State *L, uint64_t h) {
    char buf[17];
    snprintf(buf, sizeof buf, "%016" PRIx64, h);
    lua_pushstring(L, buf);
}

/* A list of names at t[k] into a bit set: name(i) for i < count names bit i (NULL: none).
 * nil: def. */
static uint32_t names_opt(lua_State *L, int t, const char *who, const char *k, uint32_t def, int count,
                          const char *(*name)(int)) {
    int ty = lua_getfield(L, t, k);
    uint32_t bits = def;
    if (ty != LUA_TNIL) {
        if (ty != LUA_TTABLE) luaL_error(L, "%s: %s must be a list of names, got a %s", who, k, luaL_typename(L, -1));
        bits = 0;
        lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            const char *s = lua_tostring(L, -1);
            int found = -1;
            for (int j = 0; s && lua_type(L, -1) == LUA_TSTRING && j < count; j++)
                if (name(j) && !strcmp(s, name(j))) found = j;
            if (found < 0) {
                luaL_Buffer lb;
                luaL_buffinit(L, &lb);
                for (int j = 0, first = 1; j < count; j++)
                    if (name(j)) {
                        if (!first) luaL_addstring(&lb, ", ");
                        luaL_addstring(&lb, name(j));
                        first = 0;
                    }
                luaL_pushresult(&lb);
                const char *known = lua_tostring(L, -1);
                const char *got = luaL_tolstring(L, -2, NULL);
                luaL_error(L, "%s: %s[%I] = %s: expected one of %s", who, k, (LUAI_UACINT)i, got, known);
            }
            bits |= 1u << found;
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return bits;
}

static const char *cap_name_i(int i) { return dlc_cap_name(1u << i); }
static const char *codec_name_i(int i) { return dlc_codec_name((dlc_codec_kind)i); }

#define CAP_BITS 3
_Static_assert(DLC_CAP_ALL == (1u << CAP_BITS) - 1, "CAP_BITS covers every capability");

static const char *const hello_keys[] = {"run",       "model_hash", "plan_hash", "learner",  "caps",
                                         "codecs",    "block",      "proto_min", "proto_max", "fragments",
                                         "endpoints", "owner",      NULL};

/* hello = {...} at h into *o; `fragments_def` is the layout's fragment count (or 1). */
static void read_hello(lua_State *L, int h, dlc_hello *o, int block_def, int fragments_def) {
    const char *who = WHO ": hello";
    check_keys(L, h, who, hello_keys);
    memset(o, 0, sizeof *o);
    size_t n;
    const char *run = str_opt(L, h, who, "run", "", &n);
    if (n > DLC_PROTO_RUN_MAX) luaL_error(L, "%s: run is %d bytes: expected at most %d", who, (int)n, DLC_PROTO_RUN_MAX);
    memcpy(o->run, run, n);
    o->model_hash = hash_opt(L, h, who, "model_hash");
    o->plan_hash = hash_opt(L, h, who, "plan_hash");
    o->learner = (int)num_opt(L, h, who, "learner", 0, 1, DLC_PROTO_LEARNERS_MAX, 1, 0,
                              "a learner 1..65536 (nil: any)") - 1;
    o->caps = names_opt(L, h, who, "caps", DLC_CAP_ALL, CAP_BITS, cap_name_i);
    o->codecs = names_opt(L, h, who, "codecs", (1u << DLC_CODEC_COUNT) - 1, DLC_CODEC_COUNT, codec_name_i);
    o->block = (int)num_opt(L, h, who, "block", block_def, DLC_CODEC_BLOCK_MIN, DLC_CODEC_BLOCK_MAX, 1, 0,
                            "an even codec block size 32..256");
    if (o->block % 2) luaL_error(L, "%s: block = %d: expected an even codec block size 32..256", who, o->block);
    o->proto_min = (int)num_opt(L, h, who, "proto_min", DLC_PROTO_VERSION_MIN, 1, 255, 1, 0, "a protocol version 1..255");
    o->proto_max = (int)num_opt(L, h, who, "proto_max", DLC_PROTO_VERSION_MAX, 1, 255, 1, 0, "a protocol version 1..255");
    if (o->proto_min > o->proto_max)
        luaL_error(L, "%s: proto_min = %d > proto_max = %d: expected proto_min <= proto_max", who, o->proto_min, o->proto_max);
    /* What a server announces in WELCOME (a client's HELLO sends none of it). */
    o->fragments = (int)num_opt(L, h, who, "fragments", fragments_def, 1, DLC_PROTO_FRAGMENTS_MAX, 1, 0,
                                "a fragment count 1..1024");
    int e = table_opt(L, h, who, "endpoints");
    if (e) {
        lua_Integer ne = (lua_Integer)lua_rawlen(L, e);
        if (ne < 1 || ne > DLC_PROTO_ENDPOINTS_MAX)
            luaL_error(L, "%s: endpoints has %I entries: expected 1..%d \"host:port\" strings (\"\" = this one)", who,
                       (LUAI_UACINT)ne, DLC_PROTO_ENDPOINTS_MAX);
        o->endpoints = (int)ne;
        for (int i = 0; i < o->endpoints; i++) {
            lua_rawgeti(L, e, i + 1);
            size_t el;
            const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &el) : NULL;
            if (!s || el > DLC_PROTO_ENDPOINT_MAX)
                luaL_error(L, "%s: endpoints[%d]: expected a \"host:port\" string of at most %d bytes", who, i + 1,
                           DLC_PROTO_ENDPOINT_MAX);
            memcpy(o->endpoint[i], s, el);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    } else {
        o->endpoints = 1; /* "": this endpoint owns everything */
    }
    int w = table_opt(L, h, who, "owner");
    if (w) {
        lua_Integer nw = (lua_Integer)lua_rawlen(L, w);
        if (nw != o->fragments)
            luaL_error(L, "%s: owner has %I entries: expected one endpoint index per fragment (%d)", who, (LUAI_UACINT)nw,
                       o->fragments);
        for (int p = 0; p < o->fragments; p++) {
            lua_rawgeti(L, w, p + 1);
            int isnum;
            lua_Integer x = lua_tointegerx(L, -1, &isnum);
            if (!isnum || x < 1 || x > o->endpoints)
                luaL_error(L, "%s: owner[%d] = %s: expected an index into endpoints, 1..%d", who, p + 1,
                           luaL_tolstring(L, -1, NULL), o->endpoints);
            o->owner[p] = (uint16_t)(x - 1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
}

/* layout = {numel = {...}, block = 128} at t: returns P, numel[] into out (P entries). */
static int read_layout(lua_State *L, int t, int64_t *numel, int *block) {
    const char *who = WHO ": layout";
    static const char *const keys[] = {"numel", "block", NULL};
    check_keys(L, t, who, keys);
    if (lua_getfield(L, t, "numel") != LUA_TTABLE)
        luaL_error(L, "%s: numel must be a list of fragment sizes (floats per fragment), got a %s", who,
                   luaL_typename(L, -1));
    lua_Integer P = (lua_Integer)lua_rawlen(L, -1);
    if (P < 1 || P > DLC_PROTO_FRAGMENTS_MAX)
        luaL_error(L, "%s: numel has %I entries: expected 1..%d fragments", who, (LUAI_UACINT)P, DLC_PROTO_FRAGMENTS_MAX);
    for (int p = 0; p < (int)P; p++) {
        lua_rawgeti(L, -1, p + 1);
        int isnum;
        lua_Integer x = lua_tointegerx(L, -1, &isnum);
        if (!isnum || x < 1 || x > ((lua_Integer)1 << 40))
            luaL_error(L, "%s: numel[%d] = %s: expected the floats of fragment %d, an integer 1..2^40", who, p + 1,
                       luaL_tolstring(L, -1, NULL), p + 1);
        numel[p] = (int64_t)x;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    *block = (int)num_opt(L, t, who, "block", DLC_CODEC_BLOCK_DEFAULT, DLC_CODEC_BLOCK_MIN, DLC_CODEC_BLOCK_MAX, 1, 0,
                          "an even codec block size 32..256");
    if (*block % 2) luaL_error(L, "%s: block = %d: expected an even codec block size 32..256", who, *block);
    return (int)P;
}

static const char *const new_keys[] = {
    "secret", "secret_file", "insecure", "frame_max",     "out_max",       "in_max", "max_peers", "heartbeat",
    "timeout", "auth_timeout", "reconnect_min", "reconnect_max", "drain_timeout", "tls", "hello",     "layout",
    "seed",   NULL};

/* A number as %g would print it, for messages (lua_pushfstring has no %g). */
typedef struct { char s[32]; } gbuf;
static gbuf gfmt(double v) {
    gbuf b;
    snprintf(b.s, sizeof b.s, "%g", v);
    return b;
}
#define G(v) (gfmt(v).s)

/* diloco.net.new{...} -> Net, or nil, message, code */
static int l_new(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    check_keys(L, 1, WHO, new_keys);
    dlc_net_config cfg = dlc_net_default_config();
    const double big = 9007199254740992.0; /* 2^53: every integer below is exact */

    size_t slen = 0;
    const char *secret = str_opt(L, 1, WHO, "secret", NULL, &slen);
    const char *strs[S_COUNT] = {NULL};
    strs[S_SECRET_FILE] = str_opt(L, 1, WHO, "secret_file", NULL, NULL);
    cfg.insecure = bool_opt(L, 1, WHO, "insecure", 0);
    if (secret && !slen) luaL_error(L, "%s: secret is empty: expected the run's secret (a non-empty string)", WHO);
    if (secret && strs[S_SECRET_FILE]) luaL_error(L, "%s: both secret and secret_file given: expected one of them", WHO);
    if (cfg.insecure && (secret || strs[S_SECRET_FILE]))
        luaL_error(L, "%s: insecure = true with a secret: expected either a secret or insecure (no authentication)", WHO);
    if (!secret && !strs[S_SECRET_FILE] && !cfg.insecure)
        luaL_error(L, "%s: no secret: expected secret = \"...\" or secret_file = PATH (or insecure = true, "
                      "no authentication, for loopback tests)", WHO);
    cfg.secret = secret;
    cfg.secret_len = slen;

    /* Sizes: integers here; their ranges are the C side's, whose message names them. */
    cfg.frame_max = (size_t)num_opt(L, 1, WHO, "frame_max", (double)cfg.frame_max, 0, big, 1, 0,
                                    "bytes of the largest frame, an integer");
    cfg.out_max = (size_t)num_opt(L, 1, WHO, "out_max", (double)cfg.out_max, 0, big, 1, 0,
                                  "bytes queued per peer, an integer");
    cfg.in_max = (size_t)num_opt(L, 1, WHO, "in_max", (double)cfg.in_max, 0, big, 1, 0,
                                 "bytes of received frames waiting for poll, an integer");
    cfg.max_peers = (int)num_opt(L, 1, WHO, "max_peers", cfg.max_peers, 0, INT_MAX, 1, 0,
                                 "connections a server accepts, an integer >= 1");
    /* Durations: named as the Lua options (the C side names its fields, timeout_s, ...). */
    cfg.heartbeat_s = num_opt(L, 1, WHO, "heartbeat", cfg.heartbeat_s, 0, 86400, 0, 0,
                              "seconds 0..86400 (0 = no heartbeats)");
    cfg.timeout_s = num_opt(L, 1, WHO, "timeout", cfg.timeout_s, 0, 86400, 0, 0,
                            "seconds 0..86400 (0 = a silent peer is never lost)");
    if (cfg.heartbeat_s > 0 && cfg.timeout_s > 0 && cfg.heartbeat_s >= cfg.timeout_s)
        luaL_error(L, "%s: heartbeat = %s >= timeout = %s: expected heartbeat < timeout (a peer would be lost "
                      "between heartbeats)", WHO, G(cfg.heartbeat_s), G(cfg.timeout_s));
    cfg.auth_timeout_s = num_opt(L, 1, WHO, "auth_timeout", cfg.auth_timeout_s, 0, 86400, 0, 1,
                                 "seconds, > 0 and <= 86400");
    cfg.reconnect_min_s = num_opt(L, 1, WHO, "reconnect_min", cfg.reconnect_min_s, 0, 86400, 0, 1,
                                  "seconds, > 0 and <= 86400");
    cfg.reconnect_max_s = num_opt(L, 1, WHO, "reconnect_max", cfg.reconnect_max_s, 0, 86400, 0, 0,
                                  "seconds 0..86400 (0 = never reconnect)");
    if (cfg.reconnect_max_s > 0 && cfg.reconnect_max_s < cfg.reconnect_min_s)
        luaL_error(L, "%s: reconnect_max = %s < reconnect_min = %s: expected reconnect_max >= reconnect_min "
                      "(or 0, never reconnect)", WHO, G(cfg.reconnect_max_s), G(cfg.reconnect_min_s));
    cfg.drain_timeout_s = num_opt(L, 1, WHO, "drain_timeout", cfg.drain_timeout_s, 0, 86400, 0, 0, "seconds 0..86400");
    int ty = lua_getfield(L, 1, "seed");
    if (ty != LUA_TNIL) {
        if (!lua_isinteger(L, -1))
            luaL_error(L, "%s: seed = %s: expected an integer (0: from the clock)", WHO, luaL_tolstring(L, -1, NULL));
        cfg.seed = (uint64_t)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);

    int tls = table_opt(L, 1, WHO, "tls");
    if (tls) {
        static const char *const keys[] = {"cert", "key", "ca", "insecure", NULL};
        check_keys(L, tls, WHO ": tls", keys);
        cfg.tls = 1;
        strs[S_CERT] = str_opt(L, tls, WHO ": tls", "cert", NULL, NULL);
        strs[S_KEY] = str_opt(L, tls, WHO ": tls", "key", NULL, NULL);
        strs[S_CA] = str_opt(L, tls, WHO ": tls", "ca", NULL, NULL);
        cfg.tls_insecure = bool_opt(L, tls, WHO ": tls", "insecure", 0);
        if (!strs[S_CERT] != !strs[S_KEY])
            luaL_error(L, "%s: tls: cert and key go together (a server's PEM files): got only %s", WHO,
                       strs[S_CERT] ? "cert" : "key");
        if (!strs[S_CA] && !strs[S_CERT] && !cfg.tls_insecure)
            luaL_error(L, "%s: tls: expected cert and key (a server), ca (a client that checks the server) or "
                          "insecure = true (a client that does not)", WHO);
        lua_pop(L, 1);
    }

    int64_t numel[DLC_PROTO_FRAGMENTS_MAX];
    int P = 0, block = DLC_CODEC_BLOCK_DEFAULT;
    int lt = table_opt(L, 1, WHO, "layout");
    if (lt) {
        P = read_layout(L, lt, numel, &block);
        lua_pop(L, 1);
    }
    dlc_hello hello;
    int h = table_opt(L, 1, WHO, "hello");
    if (h) {
        read_hello(L, h, &hello, block, P ? P : 1);
        if (lt && hello.block != block)
            luaL_error(L, "%s: hello.block = %d but layout.block = %d: expected one codec block size", WHO, hello.block,
                       block);
        lua_pop(L, 1);
    }

    /* Everything is checked: the box (closed), then the net. */
    size_t strbytes = 0;
    for (int i = 0; i < S_COUNT; i++) strbytes += strs[i] ? strlen(strs[i]) + 1 : 0;
    netbox *b = dlcL_newbox(L, DLCL_NET, sizeof(netbox) + (size_t)P * sizeof(int64_t) + strbytes, 0);
    char *sp = (char *)(b->tail + P);
    const char **dst[S_COUNT] = {&cfg.secret_file, &cfg.tls_cert, &cfg.tls_key, &cfg.tls_ca};
    for (int i = 0; i < S_COUNT; i++) {
        *dst[i] = NULL;
        if (!strs[i]) continue;
        size_t n = strlen(strs[i]) + 1;
        memcpy(sp, strs[i], n);
        *dst[i] = sp;
        sp += n;
    }
    if (P) {
        memcpy(b->tail, numel, (size_t)P * sizeof *numel);
        b->layout.fragments = P;
        b->layout.numel = b->tail;
        for (int p = 0; p < P; p++) b->layout.model_numel += numel[p];
        b->layout.codec = dlc_codec_default_params();
        b->layout.codec.block = block;
        cfg.layout = &b->layout;
    }
    if (h) {
        b->hello = hello;
        b->has_hello = 1;
        cfg.hello = &b->hello;
    }
    if (!(b->net = dlc_net_new(&cfg))) {
        dlc_status s = dlc_last_status();
        /* A bad value the checks above let through is misuse; a file that cannot be read
         * (the secret, a certificate) or a thread that cannot start is the environment. */
        if (s == DLC_ERR_ARG || s == DLC_ERR_RANGE) return luaL_error(L, "%s: %s", WHO, dlc_last_error());
        return dlcL_fail(L, s);
    }
    return 1;
}

/* ---- addresses, peers ---- */

static int checkpeer(lua_State *L, int arg) {
    int isnum;
    lua_Integer p = lua_tointegerx(L, arg, &isnum);
    if (!isnum) return luaL_typeerror(L, arg, "peer id (an integer)");
    if (p < 0 || p > INT_MAX) return luaL_argerror(L, arg, lua_pushfstring(L, "peer id %I: expected >= 0", (LUAI_UACINT)p));
    return (int)p;
}

/* net:listen("HOST:PORT") -> port, or nil, message, code */
static int n_listen(lua_State *L) {
    netbox *b = checkbox(L, 1);
    const char *addr = luaL_checkstring(L, 2);
    int r = dlc_net_listen(b->net, addr);
    if (r < 0) return dlcL_fail(L, r);
    lua_pushinteger(L, r);
    return 1;
}

/* net:connect("HOST:PORT") -> peer id, or nil, message, code */
static int n_connect(lua_State *L) {
    netbox *b = checkbox(L, 1);
    const char *addr = luaL_checkstring(L, 2);
    int r = dlc_net_connect(b->net, addr);
    if (r < 0) return dlcL_fail(L, r);
    lua_pushinteger(L, r);
    return 1;
}

/* ---- frames ---- */

#define TB(t) (1u << (t))
#define T_PAYLOAD (TB(DLC_FRAME_CONTRIBUTION) | TB(DLC_FRAME_FRAGMENT) | TB(DLC_FRAME_RESYNC) | TB(DLC_FRAME_GRADIENT) | \
                   TB(DLC_FRAME_GRADIENT_AVG))
#define T_FRAG (TB(DLC_FRAME_FRAGMENT) | TB(DLC_FRAME_RESYNC))
#define T_MSG (T_PAYLOAD | TB(DLC_FRAME_HEARTBEAT) | TB(DLC_FRAME_BYE))

/* The fields of each message frame type (docs/protocol.md, "Keys by type"), which
 * net:send takes and poll's frames carry. */
enum { F_LEARNER, F_FRAGMENT, F_VERSION, F_STEPS, F_TOKENS, F_STEP_TIME, F_TRANSIT, F_HELD, F_CODEC, F_PAYLOAD, F_TEXT,
       F_COUNT };
static const struct {
    const char *key;
    unsigned types;
} fields[F_COUNT] = {
    [F_LEARNER] = {"learner", T_MSG},
    [F_FRAGMENT] = {"fragment", TB(DLC_FRAME_CONTRIBUTION) | T_FRAG},
    [F_VERSION] = {"version", T_PAYLOAD},
    [F_STEPS] = {"steps", TB(DLC_FRAME_HEARTBEAT) | TB(DLC_FRAME_CONTRIBUTION) | T_FRAG},
    [F_TOKENS] = {"tokens", TB(DLC_FRAME_HEARTBEAT) | TB(DLC_FRAME_CONTRIBUTION) | TB(DLC_FRAME_GRADIENT)},
    [F_STEP_TIME] = {"step_time", TB(DLC_FRAME_HEARTBEAT) | TB(DLC_FRAME_CONTRIBUTION) | T_FRAG},
    [F_TRANSIT] = {"transit", TB(DLC_FRAME_HEARTBEAT) | TB(DLC_FRAME_CONTRIBUTION)},
    [F_HELD] = {"held", T_FRAG},
    [F_CODEC] = {"codec", T_PAYLOAD},
    [F_PAYLOAD] = {"payload", T_PAYLOAD},
    [F_TEXT] = {"text", TB(DLC_FRAME_BYE)},
};

static int has(dlc_frame_type t, int field) { return (fields[field].types >> t) & 1u; }

/* The fields frame type t takes, "learner, steps, ..." (pushed). */
static const char *push_field_list(lua_State *L, dlc_frame_type t) {
    luaL_Buffer lb;
    luaL_buffinit(L, &lb);
    for (int i = 0, first = 1; i < F_COUNT; i++)
        if (has(t, i)) {
            if (!first) luaL_addstring(&lb, ", ");
            luaL_addstring(&lb, fields[i].key);
            first = 0;
        }
    luaL_pushresult(&lb);
    return lua_tostring(L, -1);
}

static const char *const send_types = "heartbeat, contribution, fragment, resync, gradient, gradient_avg, bye";

/* frame.k as an integer in lo..hi; def when nil. */
static int64_t frame_int(lua_State *L, int t, const char *k, int64_t def, int64_t lo, int64_t hi, const char *expect) {
    int ty = lua_getfield(L, t, k);
    int64_t v = def;
    if (ty != LUA_TNIL) {
        int isnum;
        lua_Integer x = lua_tointegerx(L, -1, &isnum);
        if (!isnum || x < lo || x > hi)
            luaL_error(L, "net:send: frame.%s = %s: expected %s", k, luaL_tolstring(L, -1, NULL), expect);
        v = (int64_t)x;
    }
    lua_pop(L, 1);
    return v;
}

static double frame_num(lua_State *L, int t, const char *k) {
    int ty = lua_getfield(L, t, k);
    double v = 0;
    if (ty != LUA_TNIL) {
        if (ty != LUA_TNUMBER) luaL_error(L, "net:send: frame.%s must be a number (seconds), got a %s", k, luaL_typename(L, -1));
        v = lua_tonumber(L, -1); /* range: checked by the encoder, which names the field */
    }
    lua_pop(L, 1);
    return v;
}

/* Reads the frame table at t into *f; the payload (borrowed from the table's string) in
 * *payload, *len. */
static void read_frame(lua_State *L, int t, dlc_frame *f, const char **payload, size_t *len) {
    if (lua_getfield(L, t, "type") != LUA_TSTRING)
        luaL_error(L, "net:send: frame.type must be a string (%s), got a %s", send_types, luaL_typename(L, -1));
    const char *name = lua_tostring(L, -1);
    int type = -1;
    for (int i = 0; i < DLC_FRAME_TYPE_COUNT; i++)
        if (((T_MSG >> i) & 1u) && !strcmp(name, dlc_frame_type_name((dlc_frame_type)i))) type = i;
    if (type < 0) luaL_error(L, "net:send: frame.type = \"%s\": expected one of %s", name, send_types);
    lua_pop(L, 1);
    dlc_frame_init(f, (dlc_frame_type)type);
    /* every key must be one this type carries */
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        int ok = k && !strcmp(k, "type");
        for (int i = 0; k && !ok && i < F_COUNT; i++) ok = has(f->type, i) && !strcmp(k, fields[i].key);
        if (!ok) {
            const char *list = push_field_list(L, f->type);
            luaL_error(L, "net:send: a %s frame has no field '%s' (it takes type, %s)", name,
                       k ? k : luaL_typename(L, -2), list);
        }
    }
    dlc_msg *m = &f->msg;
    m->learner = (int)frame_int(L, t, "learner", 1, 1, DLC_PROTO_LEARNERS_MAX, "a learner 1..65536") - 1;
    m->fragment = (int)frame_int(L, t, "fragment", 1, 1, DLC_PROTO_FRAGMENTS_MAX, "a fragment 1..1024") - 1;
    m->version = frame_int(L, t, "version", 0, 0, INT64_MAX, "an integer >= 0");
    m->steps = frame_int(L, t, "steps", 0, 0, INT64_MAX, "an integer >= 0");
    m->tokens = frame_int(L, t, "tokens", 0, 0, INT64_MAX, "an integer >= 0");
    m->step_time = frame_num(L, t, "step_time");
    m->transit = frame_num(L, t, "transit");
    m->held = frame_num(L, t, "held");
    *payload = NULL;
    *len = 0;
    if (has(f->type, F_PAYLOAD)) {
        const char *c = NULL;
        if (lua_getfield(L, t, "codec") != LUA_TNIL) {
            c = lua_tostring(L, -1);
            if (lua_type(L, -1) != LUA_TSTRING || dlc_codec_from_name(c, &m->codec) != DLC_OK)
                luaL_error(L, "net:send: frame.codec = %s: expected a codec name (f32 bf16 fp8 int8 int4 e3m0)",
                           luaL_tolstring(L, -1, NULL));
        } else {
            m->codec = DLC_CODEC_F32;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, t, "payload") != LUA_TSTRING)
            luaL_error(L, "net:send: a %s frame needs payload, a string of the encoded floats, got a %s", name,
                       luaL_typename(L, -1));
        *payload = lua_tolstring(L, -1, len);
        lua_pop(L, 1);
    }
    if (has(f->type, F_TEXT)) {
        size_t n;
        const char *s = lua_getfield(L, t, "text") == LUA_TNIL ? "" : lua_tolstring(L, -1, &n);
        if (!s) luaL_error(L, "net:send: frame.text must be a string, got a %s", luaL_typename(L, -1));
        n = strlen(s);
        if (n > DLC_PROTO_TEXT_MAX) n = DLC_PROTO_TEXT_MAX; /* as the encoder does: cut there */
        memcpy(f->text, s, n);
        f->text[n] = 0;
        lua_pop(L, 1);
    }
}

static void free_payload(const void *payload, void *arg) {
    (void)arg;
    free((void *)payload);
}

/* net:send(peer, frame) -> true, or nil, message, code */
static int n_send(lua_State *L) {
    netbox *b = checkbox(L, 1);
    int peer = checkpeer(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    dlc_frame f;
    const char *payload;
    size_t len;
    read_frame(L, 3, &f, &payload, &len);
    void *copy = NULL;
    if (len) {
        if (!(copy = malloc(len))) return luaL_error(L, "net:send: out of memory copying a payload of %I bytes",
                                                     (LUAI_UACINT)len);
        memcpy(copy, payload, len);
    }
    f.msg.payload = copy;
    f.msg.len = len;
    /* From here the net owns copy, unless send fails (then nothing was queued). */
    dlc_status s = dlc_net_send(b->net, peer, &f, free_payload, NULL);
    if (s != DLC_OK) {
        free(copy);
        if (s == DLC_ERR_ARG) return dlcL_error(L); /* a frame that cannot be encoded: misuse */
        return dlcL_fail(L, s);
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- events ---- */

static void setstr(lua_State *L, const char *k, const char *v) {
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
}

static void push_names(lua_State *L, const char *k, uint32_t bits, int count, const char *(*name)(int)) {
    lua_createtable(L, count, 0);
    int n = 0;
    for (int i = 0; i < count; i++)
        if (((bits >> i) & 1u) && name(i)) {
            lua_pushstring(L, name(i));
            lua_rawseti(L, -2, ++n);
        }
    lua_setfield(L, -2, k);
}

static void push_hello(lua_State *L, const dlc_hello *h) {
    lua_createtable(L, 0, 14);
    dlcL_setint(L, "proto_min", h->proto_min);
    dlcL_setint(L, "proto_max", h->proto_max);
    setstr(L, "run", h->run);
    pushhex(L, h->model_hash);
    lua_setfield(L, -2, "model_hash");
    pushhex(L, h->plan_hash);
    lua_setfield(L, -2, "plan_hash");
    if (h->learner >= 0) dlcL_setint(L, "learner", (int64_t)h->learner + 1);
    push_names(L, "caps", h->caps, CAP_BITS, cap_name_i);
    dlcL_setint(L, "caps_unknown", h->caps_unknown);
    push_names(L, "codecs", h->codecs, DLC_CODEC_COUNT, codec_name_i);
    dlcL_setint(L, "block", h->block);
    if (h->endpoints > 0) {
        int ne = h->endpoints < DLC_PROTO_ENDPOINTS_MAX ? h->endpoints : DLC_PROTO_ENDPOINTS_MAX;
        int nf = h->fragments < DLC_PROTO_FRAGMENTS_MAX ? h->fragments : DLC_PROTO_FRAGMENTS_MAX;
        dlcL_setint(L, "fragments", nf);
        lua_createtable(L, ne, 0);
        for (int e = 0; e < ne; e++) {
            lua_pushstring(L, h->endpoint[e]);
            lua_rawseti(L, -2, e + 1);
        }
        lua_setfield(L, -2, "endpoints");
        lua_createtable(L, nf, 0);
        for (int p = 0; p < nf; p++) {
            lua_pushinteger(L, (lua_Integer)h->owner[p] + 1);
            lua_rawseti(L, -2, p + 1);
        }
        lua_setfield(L, -2, "owner");
    }
}

static void push_frame(lua_State *L, const dlc_frame *f) {
    lua_createtable(L, 0, 12);
    const char *name = dlc_frame_type_name(f->type);
    setstr(L, "type", name ? name : "unknown");
    if ((unsigned)f->type >= DLC_FRAME_TYPE_COUNT) return;
    if (f->type == DLC_FRAME_ERROR) {
        const char *c = dlc_proto_errcode_name(f->code);
        setstr(L, "code", c ? c : "unknown");
        setstr(L, "text", f->text);
        return;
    }
    if (f->type == DLC_FRAME_HELLO || f->type == DLC_FRAME_WELCOME) {
        push_hello(L, &f->hello);
        lua_setfield(L, -2, "hello");
        return;
    }
    const dlc_msg *m = &f->msg;
    if (has(f->type, F_LEARNER)) dlcL_setint(L, "learner", (int64_t)m->learner + 1);
    if (has(f->type, F_FRAGMENT)) dlcL_setint(L, "fragment", (int64_t)m->fragment + 1);
    if (has(f->type, F_VERSION)) dlcL_setint(L, "version", m->version);
    if (has(f->type, F_STEPS)) dlcL_setint(L, "steps", m->steps);
    if (has(f->type, F_TOKENS)) dlcL_setint(L, "tokens", m->tokens);
    if (has(f->type, F_STEP_TIME)) dlcL_setnum(L, "step_time", m->step_time);
    if (has(f->type, F_TRANSIT)) dlcL_setnum(L, "transit", m->transit);
    if (has(f->type, F_HELD)) dlcL_setnum(L, "held", m->held);
    if (has(f->type, F_CODEC)) {
        const char *c = dlc_codec_name(m->codec);
        setstr(L, "codec", c ? c : "unknown");
    }
    if (has(f->type, F_PAYLOAD)) {
        lua_pushlstring(L, m->payload ? (const char *)m->payload : "", m->payload ? m->len : 0);
        lua_setfield(L, -2, "payload");
    }
    if (has(f->type, F_TEXT)) setstr(L, "text", f->text);
}

static const char *const event_names[] = {"ready", "frame", "sent", "drained", "lost", "refused"};
_Static_assert(sizeof event_names / sizeof event_names[0] == DLC_NET_EVENT_COUNT, "one name per event kind");

/* net:poll([timeout_s = 0]) -> event table, nil (nothing within the timeout), or nil,
 * message, code.  timeout math.huge waits for ever. */
static int n_poll(lua_State *L) {
    netbox *b = checkbox(L, 1);
    double t = luaL_optnumber(L, 2, 0);
    if (!(t >= 0)) return luaL_argerror(L, 2, "timeout: expected seconds >= 0 (math.huge: wait for ever)");
    int ms = t * 1000.0 >= (double)INT_MAX ? -1 : (int)ceil(t * 1000.0);
    drop_event(b);
    int r = dlc_net_poll(b->net, &b->ev, ms);
    if (r < 0) return dlcL_fail(L, r);
    if (r == 0) return lua_pushnil(L), 1;
    b->ev_held = 1; /* released below, or by the next poll / close if a push raises */
    const dlc_net_event *ev = &b->ev;
    lua_createtable(L, 0, 6);
    unsigned kind = (unsigned)ev->kind;
    setstr(L, "kind", kind < DLC_NET_EVENT_COUNT ? event_names[kind] : "unknown");
    dlcL_setint(L, "peer", ev->peer);
    switch (ev->kind) {
    case DLC_NET_READY:
        setstr(L, "address", ev->text);
        if (b->has_hello) {
            push_hello(L, &ev->frame.hello);
            lua_setfield(L, -2, "hello");
        }
        break;
    case DLC_NET_FRAME:
        push_frame(L, &ev->frame);
        lua_setfield(L, -2, "frame");
        break;
    case DLC_NET_LOST:
    case DLC_NET_REFUSED: {
        const char *c = dlc_proto_errcode_name(ev->code);
        setstr(L, "code", c ? c : "unknown");
        setstr(L, "text", ev->text);
        break;
    }
    default: break;
    }
    drop_event(b);
    return 1;
}

/* ---- counters, shaping, closing ---- */

/* net:counters([peer]) -> table (the sum over all peers without one), or nil, message, code */
static int n_counters(lua_State *L) {
    netbox *b = checkbox(L, 1);
    int peer = lua_isnoneornil(L, 2) ? -1 : checkpeer(L, 2);
    dlc_net_counters c;
    dlc_status s = dlc_net_get_counters(b->net, peer, &c);
    if (s != DLC_OK) return dlcL_fail(L, s);
    lua_createtable(L, 0, 16);
    const uint64_t *per[4] = {c.bytes_out, c.frames_out, c.bytes_in, c.frames_in};
    const char *names[4] = {"bytes_out", "frames_out", "bytes_in", "frames_in"};
    for (int i = 0; i < 4; i++) {
        lua_createtable(L, 0, DLC_FRAME_TYPE_COUNT);
        uint64_t total = 0;
        for (int t = 0; t < DLC_FRAME_TYPE_COUNT; t++) {
            dlcL_setint(L, dlc_frame_type_name((dlc_frame_type)t), (int64_t)per[i][t]);
            total += per[i][t];
        }
        dlcL_setint(L, "total", (int64_t)total);
        lua_setfield(L, -2, names[i]);
    }
    dlcL_setint(L, "queued", (int64_t)c.queued);
    dlcL_setint(L, "refused_full", (int64_t)c.refused_full);
    dlcL_setint(L, "auth_failures", (int64_t)c.auth_failures);
    dlcL_setint(L, "protocol_errors", (int64_t)c.protocol_errors);
    dlcL_setint(L, "timeouts", (int64_t)c.timeouts);
    dlcL_setint(L, "reconnects", (int64_t)c.reconnects);
    dlcL_setint(L, "accepted", (int64_t)c.accepted);
    dlcL_setint(L, "overloaded", (int64_t)c.overloaded);
    const char *state = c.state >= 0 ? dlc_conn_state_name((dlc_conn_state)c.state) : NULL;
    if (state) setstr(L, "state", state);
    return 1;
}

/* net:shape(peer, {rate =, latency =}) or net:shape({...}) (every current and future
 * peer) -> true, or nil, message, code */
static int n_shape(lua_State *L) {
    netbox *b = checkbox(L, 1);
    int peer = -1, t = 2;
    if (!lua_istable(L, 2)) {
        peer = checkpeer(L, 2);
        t = 3;
    }
    luaL_checktype(L, t, LUA_TTABLE);
    static const char *const keys[] = {"rate", "latency", NULL};
    check_keys(L, t, "net:shape", keys);
    /* ranges: the C side's (its message names rate and latency as here) */
    double rate = num_opt(L, t, "net:shape", "rate", 0, -HUGE_VAL, HUGE_VAL, 0, 0, "bytes per second (0 = no cap)");
    double latency = num_opt(L, t, "net:shape", "latency", 0, -HUGE_VAL, HUGE_VAL, 0, 0, "seconds (added one way)");
    dlc_status s = dlc_net_shape(b->net, peer, rate, latency);
    if (s == DLC_ERR_ARG) return luaL_error(L, "net:shape: %s", dlc_last_error());
    if (s != DLC_OK) return dlcL_fail(L, s);
    lua_pushboolean(L, 1);
    return 1;
}

/* net:close(peer) -> true, or nil, message, code: closes one peer gracefully.
 * net:close() closes the whole net (as __gc and __close; idempotent). */
static int n_close(lua_State *L) {
    netbox *b = luaL_checkudata(L, 1, DLCL_NET);
    if (lua_isnoneornil(L, 2)) {
        dlcL_closebox(b, &net_type);
        return 0;
    }
    if (!b->net) return luaL_argerror(L, 1, "Net has been closed");
    dlc_status s = dlc_net_close(b->net, checkpeer(L, 2));
    if (s != DLC_OK) return dlcL_fail(L, s);
    lua_pushboolean(L, 1);
    return 1;
}

static int n_tostring(lua_State *L) {
    netbox *b = luaL_checkudata(L, 1, DLCL_NET);
    if (!b->net) return lua_pushliteral(L, "Net(closed)"), 1;
    lua_pushfstring(L, "Net(%s%s)", b->has_hello ? "handshake" : "bare", b->layout.fragments ? ", layout" : "");
    return 1;
}

static const luaL_Reg net_methods[] = {
    {"listen", n_listen}, {"connect", n_connect}, {"send", n_send},   {"poll", n_poll},
    {"counters", n_counters}, {"shape", n_shape}, {NULL, NULL},
};
static const luaL_Reg net_meta[] = {{"__tostring", n_tostring}, {NULL, NULL}};
static const dlcL_type net_type = {DLCL_NET, net_release, net_methods, net_meta, NULL};

void dlcL_open_net(lua_State *L, int mod, int st) {
    mod = lua_absindex(L, mod);
    st = lua_absindex(L, st);
    dlcL_newtype(L, st, &net_type); /* metatable, methods */
    /* close takes an optional peer: replace the plain close dlcL_newtype added */
    lua_pushvalue(L, st);
    lua_pushcclosure(L, n_close, 1);
    lua_setfield(L, -2, "close");
    lua_pop(L, 2);
    lua_createtable(L, 0, 2);
    static const luaL_Reg funcs[] = {{"new", l_new}, {NULL, NULL}};
    dlcL_setfuncs(L, lua_gettop(L), st, funcs);
    lua_setfield(L, mod, "net");
}
