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
 * The options of diloco.net.new are read and checked in lnetopt.c (lnet.h).
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
#include "lnet.h"

#define DLCL_NET "diloco.Net"
#define WHO "diloco.net.new"

void dlcL_open_net(lua_State *L, int mod, int st);

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

static void pushhex(lua_State *L, uint64_t h) {
    char buf[17];
    snprintf(buf, sizeof buf, "%016" PRIx64, h);
    lua_pushstring(L, buf);
}

/* diloco.net.new{...} -> Net, or nil, message, code */
static int l_new(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    dlcL_netopts o; /* strings borrowed from the options table at 1 */
    dlcL_net_options(L, 1, &o);
    dlc_net_config cfg = o.cfg;
    int P = o.fragments;
    const char *const *strs = o.strs;

    /* Everything is checked: the box (closed), then the net. */
    size_t strbytes = 0;
    for (int i = 0; i < DLCL_NET_S_COUNT; i++) strbytes += strs[i] ? strlen(strs[i]) + 1 : 0;
    netbox *b = dlcL_newbox(L, DLCL_NET, sizeof(netbox) + (size_t)P * sizeof(int64_t) + strbytes, 0);
    char *sp = (char *)(b->tail + P);
    const char **dst[DLCL_NET_S_COUNT] = {&cfg.secret_file, &cfg.tls_cert, &cfg.tls_key, &cfg.tls_ca};
    for (int i = 0; i < DLCL_NET_S_COUNT; i++) {
        *dst[i] = NULL;
        if (!strs[i]) continue;
        size_t n = strlen(strs[i]) + 1;
        memcpy(sp, strs[i], n);
        *dst[i] = sp;
        sp += n;
    }
    if (P) {
        memcpy(b->tail, o.numel, (size_t)P * sizeof *o.numel);
        b->layout.fragments = P;
        b->layout.numel = b->tail;
        for (int p = 0; p < P; p++) b->layout.model_numel += o.numel[p];
        b->layout.codec = dlc_codec_default_params();
        b->layout.codec.block = o.block;
        cfg.layout = &b->layout;
    }
    if (o.has_hello) {
        b->hello = o.hello;
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

/* net:OP("HOST:PORT") -> what op returns (a port, a peer id), or nil, message, code */
static int addr_call(lua_State *L, int (*op)(dlc_net *, const char *)) {
    netbox *b = checkbox(L, 1);
    int r = op(b->net, luaL_checkstring(L, 2));
    if (r < 0) return dlcL_fail(L, r);
    lua_pushinteger(L, r);
    return 1;
}

/* net:listen("HOST:PORT") -> port; net:connect("HOST:PORT") -> peer id */
static int n_listen(lua_State *L) { return addr_call(L, dlc_net_listen); }
static int n_connect(lua_State *L) { return addr_call(L, dlc_net_connect); }

/* ---- frames ---- */

#define TB(t) (1u << (t))
#define T_PAYLOAD (TB(DLC_FRAME_CONTRIBUTION) | TB(DLC_FRAME_FRAGMENT) | TB(DLC_FRAME_RESYNC) | TB(DLC_FRAME_GRADIENT) | \
                   TB(DLC_FRAME_GRADIENT_AVG))
#define T_FRAG (TB(DLC_FRAME_FRAGMENT) | TB(DLC_FRAME_RESYNC))
#define T_MSG (T_PAYLOAD | TB(DLC_FRAME_HEARTBEAT) | TB(DLC_FRAME_BYE) | TB(DLC_FRAME_REPLAY))

/* The fields of each message frame type (docs/protocol.md, "Keys by type"), which
 * net:send takes and poll's frames carry. */
enum { F_LEARNER, F_FRAGMENT, F_VERSION, F_STEPS, F_TOKENS, F_STEP_TIME, F_TRANSIT, F_HELD, F_AGE, F_CODEC, F_PAYLOAD,
       F_TEXT, F_COUNT };
static const struct {
    const char *key;
    unsigned types;
} fields[F_COUNT] = {
    [F_LEARNER] = {"learner", T_MSG},
    [F_FRAGMENT] = {"fragment", TB(DLC_FRAME_CONTRIBUTION) | T_FRAG},
    [F_VERSION] = {"version", T_PAYLOAD | TB(DLC_FRAME_REPLAY)},
    [F_STEPS] = {"steps", TB(DLC_FRAME_HEARTBEAT) | TB(DLC_FRAME_CONTRIBUTION) | T_FRAG | TB(DLC_FRAME_GRADIENT_AVG)},
    [F_TOKENS] = {"tokens", TB(DLC_FRAME_HEARTBEAT) | TB(DLC_FRAME_CONTRIBUTION) | TB(DLC_FRAME_GRADIENT)},
    [F_STEP_TIME] = {"step_time", TB(DLC_FRAME_HEARTBEAT) | TB(DLC_FRAME_CONTRIBUTION) | T_FRAG},
    [F_TRANSIT] = {"transit", TB(DLC_FRAME_HEARTBEAT) | TB(DLC_FRAME_CONTRIBUTION)},
    [F_HELD] = {"held", T_FRAG},
    [F_AGE] = {"age", TB(DLC_FRAME_FRAGMENT)},
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
    m->age = frame_num(L, t, "age");
    *payload = NULL;
    *len = 0;
    if (has(f->type, F_PAYLOAD)) {
        const char *c = NULL;
        if (lua_getfield(L, t, "codec") != LUA_TNIL) {
            c = lua_tostring(L, -1);
            if (lua_type(L, -1) != LUA_TSTRING || dlc_codec_from_name(c, &m->codec) != DLC_OK)
                luaL_error(L, "net:send: frame.codec = %s: expected a codec name (f32 bf16 fp8 int8 int4 e3m0 sparse2 sparse4)",
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
    push_names(L, "caps", h->caps, DLCL_NET_CAP_BITS, dlcL_net_cap_name);
    dlcL_setint(L, "caps_unknown", h->caps_unknown);
    push_names(L, "codecs", h->codecs, DLC_CODEC_COUNT, dlcL_net_codec_name);
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
    if (has(f->type, F_AGE)) dlcL_setnum(L, "age", m->age);
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
    dlcL_setint(L, "unauth", (int64_t)c.unauth);
    dlcL_setint(L, "mem", (int64_t)c.mem);
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
    dlcL_check_keys(L, t, "net:shape", keys, "option");
    /* ranges: the C side's (its message names rate and latency as here) */
    double rate = dlcL_net_num(L, t, "net:shape", "rate", 0, -HUGE_VAL, HUGE_VAL, 0, 0, "bytes per second (0 = no cap)");
    double latency = dlcL_net_num(L, t, "net:shape", "latency", 0, -HUGE_VAL, HUGE_VAL, 0, 0, "seconds (added one way)");
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
