/*
 * lnetopt.c - the options of diloco.net.new (lnet.c): every key checked against the
 * known ones, every value's type and range, with messages that name the Lua option and
 * what was expected; the hello and layout tables read into their C structs.  Ranges the
 * C side also checks (sizes) are left to dlc_net_new, whose message is raised.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lnet.h"

#define WHO "diloco.net.new"

/* t[k] as a number in lo..hi (an integer if `integer`; lo excluded if `open`), def when
 * nil; a bad value raises "who: k = v: expected <expect>". */
double dlcL_net_num(lua_State *L, int t, const char *who, const char *k, double def, double lo, double hi,
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
    if (!dlcL_optfield(L, t, "", who, ": ", k, LUA_TSTRING)) {
        if (len) *len = def ? strlen(def) : 0;
        return def;
    }
    const char *v = lua_tolstring(L, -1, len);
    lua_pop(L, 1);
    return v;
}

static int bool_opt(lua_State *L, int t, const char *who, const char *k, int def) {
    if (!dlcL_optfield(L, t, "", who, ": ", k, LUA_TBOOLEAN)) return def;
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* Pushes t[k] if it is a table and returns its index, 0 (nothing pushed) when nil. */
static int table_opt(lua_State *L, int t, const char *who, const char *k) {
    return dlcL_optfield(L, t, "", who, ": ", k, LUA_TTABLE) ? lua_gettop(L) : 0;
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

const char *dlcL_net_cap_name(int i) { return dlc_cap_name(1u << i); }
const char *dlcL_net_codec_name(int i) { return dlc_codec_name((dlc_codec_kind)i); }

_Static_assert(DLC_CAP_ALL == (1u << DLCL_NET_CAP_BITS) - 1, "DLCL_NET_CAP_BITS covers every capability");

static const char *const hello_keys[] = {"run",       "model_hash", "plan_hash", "learner",  "caps",
                                         "codecs",    "block",      "proto_min", "proto_max", "fragments",
                                         "endpoints", "owner",      NULL};

/* hello = {...} at h into *o; `fragments_def` is the layout's fragment count (or 1). */
static void read_hello(lua_State *L, int h, dlc_hello *o, int block_def, int fragments_def) {
    const char *who = WHO ": hello";
    dlcL_check_keys(L, h, who, hello_keys, "option");
    memset(o, 0, sizeof *o);
    size_t n;
    const char *run = str_opt(L, h, who, "run", "", &n);
    if (n > DLC_PROTO_RUN_MAX) luaL_error(L, "%s: run is %d bytes: expected at most %d", who, (int)n, DLC_PROTO_RUN_MAX);
    memcpy(o->run, run, n);
    o->model_hash = hash_opt(L, h, who, "model_hash");
    o->plan_hash = hash_opt(L, h, who, "plan_hash");
    o->learner = (int)dlcL_net_num(L, h, who, "learner", 0, 1, DLC_PROTO_LEARNERS_MAX, 1, 0,
                              "a learner 1..65536 (nil: any)") - 1;
    o->caps = names_opt(L, h, who, "caps", DLC_CAP_ALL, DLCL_NET_CAP_BITS, dlcL_net_cap_name);
    o->codecs = names_opt(L, h, who, "codecs", (1u << DLC_CODEC_COUNT) - 1, DLC_CODEC_COUNT, dlcL_net_codec_name);
    o->block = (int)dlcL_net_num(L, h, who, "block", block_def, DLC_CODEC_BLOCK_MIN, DLC_CODEC_BLOCK_MAX, 1, 0,
                            "an even codec block size 32..256");
    if (o->block % 2) luaL_error(L, "%s: block = %d: expected an even codec block size 32..256", who, o->block);
    o->proto_min = (int)dlcL_net_num(L, h, who, "proto_min", DLC_PROTO_VERSION_MIN, 1, 255, 1, 0, "a protocol version 1..255");
    o->proto_max = (int)dlcL_net_num(L, h, who, "proto_max", DLC_PROTO_VERSION_MAX, 1, 255, 1, 0, "a protocol version 1..255");
    if (o->proto_min > o->proto_max)
        luaL_error(L, "%s: proto_min = %d > proto_max = %d: expected proto_min <= proto_max", who, o->proto_min, o->proto_max);
    /* What a server announces in WELCOME (a client's HELLO sends none of it). */
    o->fragments = (int)dlcL_net_num(L, h, who, "fragments", fragments_def, 1, DLC_PROTO_FRAGMENTS_MAX, 1, 0,
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
    dlcL_check_keys(L, t, who, keys, "option");
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
    *block = (int)dlcL_net_num(L, t, who, "block", DLC_CODEC_BLOCK_DEFAULT, DLC_CODEC_BLOCK_MIN, DLC_CODEC_BLOCK_MAX, 1, 0,
                          "an even codec block size 32..256");
    if (*block % 2) luaL_error(L, "%s: block = %d: expected an even codec block size 32..256", who, *block);
    return (int)P;
}

static const char *const new_keys[] = {
    "secret", "secret_file", "insecure", "frame_max",     "out_max",       "in_max", "mem_max", "max_peers", "max_unauth",
    "max_unauth_per_addr", "heartbeat", "timeout", "auth_timeout", "reconnect_min", "reconnect_max", "drain_timeout",
    "tls", "hello", "layout", "seed", "inline_io", NULL};

/* A number as %g would print it, for messages (lua_pushfstring has no %g). */
typedef struct { char s[32]; } gbuf;
static gbuf gfmt(double v) {
    gbuf b;
    snprintf(b.s, sizeof b.s, "%g", v);
    return b;
}
#define G(v) (gfmt(v).s)

void dlcL_net_options(lua_State *L, int t, dlcL_netopts *o) {
    t = lua_absindex(L, t);
    dlcL_check_keys(L, t, WHO, new_keys, "option");
    memset(o, 0, sizeof *o);
    dlc_net_config cfg = dlc_net_default_config();
    const double big = 9007199254740992.0; /* 2^53: every integer below is exact */

    size_t slen = 0;
    const char *secret = str_opt(L, t, WHO, "secret", NULL, &slen);
    const char **strs = o->strs;
    strs[DLCL_NET_S_SECRET_FILE] = str_opt(L, t, WHO, "secret_file", NULL, NULL);
    cfg.insecure = bool_opt(L, t, WHO, "insecure", 0);
    cfg.inline_io = bool_opt(L, t, WHO, "inline_io", 0);
    if (secret && !slen) luaL_error(L, "%s: secret is empty: expected the run's secret (a non-empty string)", WHO);
    if (secret && strs[DLCL_NET_S_SECRET_FILE]) luaL_error(L, "%s: both secret and secret_file given: expected one of them", WHO);
    if (cfg.insecure && (secret || strs[DLCL_NET_S_SECRET_FILE]))
        luaL_error(L, "%s: insecure = true with a secret: expected either a secret or insecure (no authentication)", WHO);
    if (!secret && !strs[DLCL_NET_S_SECRET_FILE] && !cfg.insecure)
        luaL_error(L, "%s: no secret: expected secret = \"...\" or secret_file = PATH (or insecure = true, "
                      "no authentication, for loopback tests)", WHO);
    cfg.secret = secret;
    cfg.secret_len = slen;

    /* Sizes: integers here; their ranges are the C side's, whose message names them. */
    cfg.frame_max = (size_t)dlcL_net_num(L, t, WHO, "frame_max", (double)cfg.frame_max, 0, big, 1, 0,
                                    "bytes of the largest frame, an integer");
    cfg.out_max = (size_t)dlcL_net_num(L, t, WHO, "out_max", (double)cfg.out_max, 0, big, 1, 0,
                                  "bytes queued per peer, an integer");
    cfg.in_max = (size_t)dlcL_net_num(L, t, WHO, "in_max", (double)cfg.in_max, 0, big, 1, 0,
                                 "bytes of received frames waiting for poll, an integer");
    cfg.mem_max = (size_t)dlcL_net_num(L, t, WHO, "mem_max", (double)cfg.mem_max, 0, big, 1, 0,
                                       "bytes the net holds in all (queued out, received), an integer");
    cfg.max_peers = (int)dlcL_net_num(L, t, WHO, "max_peers", cfg.max_peers, 0, INT_MAX, 1, 0,
                                 "connections a server accepts, an integer >= 1");
    cfg.max_unauth = (int)dlcL_net_num(L, t, WHO, "max_unauth", cfg.max_unauth, 0, INT_MAX, 1, 0,
                                       "connections a server holds before they authenticate, an integer >= 1");
    cfg.max_unauth_per_addr = (int)dlcL_net_num(L, t, WHO, "max_unauth_per_addr", cfg.max_unauth_per_addr, 0, INT_MAX, 1,
                                                0, "connections from one address before they authenticate, an integer >= 1");
    /* Durations: named as the Lua options (the C side names its fields, timeout_s, ...). */
    cfg.heartbeat_s = dlcL_net_num(L, t, WHO, "heartbeat", cfg.heartbeat_s, 0, 86400, 0, 0,
                              "seconds 0..86400 (0 = no heartbeats)");
    cfg.timeout_s = dlcL_net_num(L, t, WHO, "timeout", cfg.timeout_s, 0, 86400, 0, 0,
                            "seconds 0..86400 (0 = a silent peer is never lost)");
    if (cfg.heartbeat_s > 0 && cfg.timeout_s > 0 && cfg.heartbeat_s >= cfg.timeout_s)
        luaL_error(L, "%s: heartbeat = %s >= timeout = %s: expected heartbeat < timeout (a peer would be lost "
                      "between heartbeats)", WHO, G(cfg.heartbeat_s), G(cfg.timeout_s));
    cfg.auth_timeout_s = dlcL_net_num(L, t, WHO, "auth_timeout", cfg.auth_timeout_s, 0, 86400, 0, 1,
                                 "seconds, > 0 and <= 86400");
    cfg.reconnect_min_s = dlcL_net_num(L, t, WHO, "reconnect_min", cfg.reconnect_min_s, 0, 86400, 0, 1,
                                  "seconds, > 0 and <= 86400");
    cfg.reconnect_max_s = dlcL_net_num(L, t, WHO, "reconnect_max", cfg.reconnect_max_s, 0, 86400, 0, 0,
                                  "seconds 0..86400 (0 = never reconnect)");
    if (cfg.reconnect_max_s > 0 && cfg.reconnect_max_s < cfg.reconnect_min_s)
        luaL_error(L, "%s: reconnect_max = %s < reconnect_min = %s: expected reconnect_max >= reconnect_min "
                      "(or 0, never reconnect)", WHO, G(cfg.reconnect_max_s), G(cfg.reconnect_min_s));
    cfg.drain_timeout_s = dlcL_net_num(L, t, WHO, "drain_timeout", cfg.drain_timeout_s, 0, 86400, 0, 0, "seconds 0..86400");
    int ty = lua_getfield(L, t, "seed");
    if (ty != LUA_TNIL) {
        if (!lua_isinteger(L, -1))
            luaL_error(L, "%s: seed = %s: expected an integer (0: from the clock)", WHO, luaL_tolstring(L, -1, NULL));
        cfg.seed = (uint64_t)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);

    int tls = table_opt(L, t, WHO, "tls");
    if (tls) {
        static const char *const keys[] = {"cert", "key", "ca", "insecure", NULL};
        dlcL_check_keys(L, tls, WHO ": tls", keys, "option");
        cfg.tls = 1;
        strs[DLCL_NET_S_CERT] = str_opt(L, tls, WHO ": tls", "cert", NULL, NULL);
        strs[DLCL_NET_S_KEY] = str_opt(L, tls, WHO ": tls", "key", NULL, NULL);
        strs[DLCL_NET_S_CA] = str_opt(L, tls, WHO ": tls", "ca", NULL, NULL);
        cfg.tls_insecure = bool_opt(L, tls, WHO ": tls", "insecure", 0);
        if (!strs[DLCL_NET_S_CERT] != !strs[DLCL_NET_S_KEY])
            luaL_error(L, "%s: tls: cert and key go together (a server's PEM files): got only %s", WHO,
                       strs[DLCL_NET_S_CERT] ? "cert" : "key");
        if (!strs[DLCL_NET_S_CA] && !strs[DLCL_NET_S_CERT] && !cfg.tls_insecure)
            luaL_error(L, "%s: tls: expected cert and key (a server), ca (a client that checks the server) or "
                          "insecure = true (a client that does not)", WHO);
        lua_pop(L, 1);
    }

    o->block = DLC_CODEC_BLOCK_DEFAULT;
    int lt = table_opt(L, t, WHO, "layout");
    if (lt) {
        o->fragments = read_layout(L, lt, o->numel, &o->block);
        lua_pop(L, 1);
    }
    int h = table_opt(L, t, WHO, "hello");
    if (h) {
        read_hello(L, h, &o->hello, o->block, o->fragments ? o->fragments : 1);
        if (lt && o->hello.block != o->block)
            luaL_error(L, "%s: hello.block = %d but layout.block = %d: expected one codec block size", WHO,
                       o->hello.block, o->block);
        o->has_hello = 1;
        lua_pop(L, 1);
    }
    o->cfg = cfg;
}
