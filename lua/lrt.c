/*
 * lrt.c - diloco.Syncer and diloco.Learner: the real-time drivers (rt/include/diloco/rt.h,
 * docs/runtime.md) from Lua, for `diloco-lua run`, `syncer` and `learner`: each box holds
 * its dlc_srt or dlc_lrt and calls rt.h on it (the embedding API, client.h, is the facade
 * for hosts with their own tensors; these hosts need the drivers' whole configuration).
 *
 *     local s = diloco.Syncer { params = P, plan = plan, learners = 3, listen = "127.0.0.1:0",
 *                               run = "r1", net = { secret_file = "OUT/secret" },
 *                               learner = { tau = 2 }, syncer = { quorum = 1 } }
 *     local ev = s:poll(0.1)            -- {type = "merged", merge = {...}} or nil
 *     s:global(P)                       -- the global model into Params P
 *     s:shape(2, 2.5e6, 0.05)           -- learner 2's link, both ways: 2.5 MB/s, 50 ms
 *     s:cut(2, 10)                      -- learner 2's link cut for 10 s
 *
 *     local l = assert(diloco.Learner { params = P, plan = plan, connect = "127.0.0.1:" .. s:port(),
 *                                id = 2, run = "r1", net = { secret_file = "OUT/secret" },
 *                                learner = { tau = 2 }, join_timeout = 30 })
 *                                       -- joined: the whole model arrived
 *     l:step_done(tokens, seconds)      -- after each inner step
 *     if l:nonfinite() then l:rollback() end  -- instead, after a step gone non-finite
 *
 * The learner and syncer options are those of diloco.VTime (lvtime.c); net takes the
 * options of diloco.net.new (lnetopt.c) but hello and layout, which the drivers make.
 * Learners and fragments are 1-based here, 0-based in C.  Misuse raises; an environmental
 * failure (an address in use, a syncer that never answers, a refusal) returns nil,
 * message, code.
 *
 * Lifetime: a box holds its driver (NULL once closed) and keeps the Params and Plan it
 * borrows alive through its user value; __gc, __close and :close() share one release.
 */
#include <limits.h>
#include <math.h>
#include <string.h>
#include "diloco/rt.h"
#include "ldiloco.h"
#include "lnet.h"

#define DLCL_SYNCER "diloco.Syncer"
#define DLCL_LEARNER "diloco.Learner"

typedef struct srtbox {
    dlc_srt *s;         /* first: the resource (NULL once closed) */
    dlc_params *params; /* the layout of global() (borrowed, kept alive by the user value) */
    int M;
    int kill;           /* s:kill(): released as a killed process ends (dlc_srt_kill) */
} srtbox;

typedef struct lrtbox {
    dlc_lrt *l;   /* first: the resource (NULL once closed) */
    int finished; /* l:finish was called (it said BYE, or tried) */
} lrtbox;

static dlc_srt *checksrt(lua_State *L, int arg) {
    srtbox *b = luaL_checkudata(L, arg, DLCL_SYNCER);
    if (!b->s) luaL_argerror(L, arg, "Syncer has been closed");
    return b->s;
}

static dlc_lrt *checklrt(lua_State *L, int arg) {
    lrtbox *b = luaL_checkudata(L, arg, DLCL_LEARNER);
    if (!b->l) luaL_argerror(L, arg, "Learner has been closed");
    return b->l;
}

static const char *reqstr(lua_State *L, int t, const char *who, const char *k) {
    if (lua_getfield(L, t, k) != LUA_TSTRING) luaL_error(L, "%s: %s must be a string (\"HOST:PORT\")", who, k);
    const char *v = lua_tostring(L, -1);
    lua_pop(L, 1); /* a field of the options table: stays alive */
    return v;
}

static const char *optstr(lua_State *L, int t, const char *who, const char *k, const char *def) {
    int ty = lua_getfield(L, t, k);
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        return def;
    }
    if (ty != LUA_TSTRING) luaL_error(L, "%s: %s must be a string, got a %s", who, k, luaL_typename(L, -1));
    const char *v = lua_tostring(L, -1);
    lua_pop(L, 1);
    return v;
}

/* The net options at t (diloco.net.new's) into *cfg; the strings stay in the options table. */
static void read_net(lua_State *L, int t, dlc_net_config *cfg) {
    static dlcL_netopts o; /* large; filled and copied before anything else runs on this state */
    memset(&o, 0, sizeof o);
    dlcL_net_options(L, t, &o);
    *cfg = o.cfg;
    cfg->secret_file = o.strs[DLCL_NET_S_SECRET_FILE];
    cfg->tls_cert = o.strs[DLCL_NET_S_CERT];
    cfg->tls_key = o.strs[DLCL_NET_S_KEY];
    cfg->tls_ca = o.strs[DLCL_NET_S_CA];
    cfg->hello = NULL;
    cfg->layout = NULL;
}

/* ---- diloco.Syncer ---- */

static int l_syncer(lua_State *L) {
    static const char *const WHO = "diloco.Syncer";
    /* with what the learners do: one run description (core/run.h), stated in the WELCOME */
    dlcL_syncer_opts o;
    srtbox *b = dlcL_syncer_box(L, WHO, DLCL_SYNCER, sizeof *b, &o);
    int M = o.M;
    dlc_srt_config c = dlc_srt_default_config();
    if (dlc_run_syncer_params(&o.run, M, &c.syncer) != DLC_OK) return dlcL_error(L);
    c.syncer.embedding = o.embedding;
    c.run_params = &o.run;
    if (lua_getfield(L, o.si, "dp_history") != LUA_TNIL) { /* not part of the run: the syncer's own */
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0 || lua_tointeger(L, -1) > INT_MAX)
            return luaL_error(L, "%s: syncer.dp_history must be an integer >= 0 (0: as many as 512 MiB hold)", WHO);
        c.syncer.dp_history = (int)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "epoch") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
            return luaL_error(L, "%s: epoch must be an integer >= 1 (the epoch to stamp at least)", WHO);
        c.syncer.epoch = lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    /* the start gate: learners to wait for (0 none) and for how long at most */
    if (lua_getfield(L, 1, "start_learners") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0 || lua_tointeger(L, -1) > M)
            return luaL_error(L, "%s: start_learners must be an integer in 0..%d (learners)", WHO, M);
        c.start_learners = (int)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "refusals_every") != LUA_TNIL) {
        if (!lua_isnumber(L, -1) || !(lua_tonumber(L, -1) > 0) || !isfinite(lua_tonumber(L, -1)))
            return luaL_error(L, "%s: refusals_every must be a finite number of seconds > 0", WHO);
        c.refusals_every = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "start_timeout") != LUA_TNIL) {
        if (!lua_isnumber(L, -1) || !(lua_tonumber(L, -1) >= 0) || !isfinite(lua_tonumber(L, -1)))
            return luaL_error(L, "%s: start_timeout must be a finite number of seconds >= 0", WHO);
        c.start_timeout = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    /* a shard of a sharded syncer (docs/shards.md): shard (1-based) of shards */
    if (lua_getfield(L, 1, "shards") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > DLC_PROTO_ENDPOINTS_MAX)
            return luaL_error(L, "%s: shards must be an integer in 1..%d", WHO, DLC_PROTO_ENDPOINTS_MAX);
        c.shards = (int)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "shard") != LUA_TNIL) {
        int S = c.shards > 0 ? c.shards : 1;
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > S)
            return luaL_error(L, "%s: shard must be an integer in 1..%d (shards)", WHO, S);
        c.shard = (int)lua_tointeger(L, -1) - 1;
    }
    lua_pop(L, 1);
    int ni = dlcL_subtable(L, 1, WHO, "net");
    read_net(L, ni, &c.net);
    c.listen = optstr(L, 1, WHO, "listen", "127.0.0.1:0");
    c.run = optstr(L, 1, WHO, "run", "");
    c.resume = optstr(L, 1, WHO, "resume", NULL);
    /* a standby of the primary at standby_of (rt.h): it takes over after `lease` s without it */
    c.standby_of = optstr(L, 1, WHO, "standby_of", NULL);
    if (lua_getfield(L, 1, "lease") != LUA_TNIL) {
        if (!lua_isnumber(L, -1) || !(lua_tonumber(L, -1) > 0) || !isfinite(lua_tonumber(L, -1)))
            return luaL_error(L, "%s: lease must be a finite number of seconds > 0", WHO);
        c.lease = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    c.plan = o.plan;
    c.theta0 = dlc_params_data(o.params);
    dlcL_check_plan_model(L, WHO, o.params, o.plan);
    b->s = dlc_srt_new(&c);
    if (!b->s) return dlcL_fail(L, dlc_last_status());
    b->params = o.params;
    b->M = M;
    lua_settop(L, 2);
    return 1;
}

static void srt_release(void *box) {
    srtbox *b = box;
    if (b->kill) dlc_srt_kill(b->s);
    else dlc_srt_free(b->s);
}

static int s_port(lua_State *L) {
    lua_pushinteger(L, dlc_srt_port(checksrt(L, 1)));
    return 1;
}

/* s:poll([timeout_s]) -> event table or nil (nil, msg, code when the driver failed) */
static int s_poll(lua_State *L) {
    dlc_srt *s = checksrt(L, 1);
    double t = luaL_optnumber(L, 2, 0);
    int ms = t < 0 ? -1 : (int)fmin(t * 1e3, 2e9);
    dlc_srt_event ev;
    int r = dlc_srt_poll(s, &ev, ms);
    if (r < 0) return dlcL_fail(L, r);
    if (r == 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_createtable(L, 0, 6);
    lua_pushstring(L, dlc_srt_event_name(ev.kind));
    lua_setfield(L, -2, "type");
    dlcL_setnum(L, "time", ev.time);
    dlcL_setnum(L, "clock", ev.clock);
    if (ev.learner >= 0) dlcL_setint(L, "learner", ev.learner + 1);
    if (ev.text[0]) {
        lua_pushstring(L, ev.text);
        lua_setfield(L, -2, "text");
    }
    if (ev.kind == DLC_SRT_MERGED) {
        dlcL_push_merge(L, &ev.merge);
        lua_setfield(L, -2, "merge");
    } else if (ev.kind == DLC_SRT_REJECTED) {
        dlcL_setint(L, "fragment", ev.fragment + 1);
        lua_pushstring(L, dlc_reject_reason_name(ev.reason));
        lua_setfield(L, -2, "reason");
    } else if (ev.kind == DLC_SRT_REFUSALS) {
        dlcL_setint(L, "count", ev.count);
        dlcL_setnum(L, "interval", ev.interval);
    } else if (ev.kind == DLC_SRT_STANDBY && ev.count > 0) { /* a standby took over: its epoch */
        dlcL_setint(L, "epoch", ev.count);
    } else if (ev.kind == DLC_SRT_BEHIND && ev.count > 0) { /* a fragment replaced while it waited */
        dlcL_setint(L, "fragment", ev.fragment + 1);
        dlcL_setint(L, "count", ev.count);
        dlcL_setnum(L, "interval", ev.interval);
    }
    dlc_srt_event_release(&ev);
    return 1;
}

static int s_global(lua_State *L) {
    srtbox *b = luaL_checkudata(L, 1, DLCL_SYNCER);
    checksrt(L, 1);
    if (dlc_srt_global(b->s, dlcL_checkmodel(L, 2, b->params)) != DLC_OK) return dlcL_error(L);
    lua_settop(L, 2);
    return 1;
}

/* s:save(path[, meta]) -> true | nil, message, code */
static int s_save(lua_State *L) {
    dlc_srt *s = checksrt(L, 1);
    const char *path = luaL_checkstring(L, 2);
    enum { META_MAX = 64 };
    const char *keys[META_MAX], *values[META_MAX];
    int n = 0;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
                return luaL_argerror(L, 3, "metadata must map strings to strings");
            if (n == META_MAX) return luaL_argerror(L, 3, "more than 64 metadata entries");
            keys[n] = lua_tostring(L, -2), values[n] = lua_tostring(L, -1); /* fields of the table: alive */
            n++;
            lua_pop(L, 1);
        }
    }
    dlc_status st = dlc_srt_save(s, path, n, keys, values);
    if (st == DLC_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    if (st == DLC_ERR_ARG) return dlcL_error(L);
    return dlcL_fail(L, st);
}

static int s_epoch(lua_State *L) {
    lua_pushinteger(L, dlc_srt_epoch(checksrt(L, 1)));
    return 1;
}

static int s_set_quorum(lua_State *L) {
    dlc_srt *s = checksrt(L, 1);
    lua_Integer k = luaL_checkinteger(L, 2);
    if (dlc_srt_set_quorum(s, (int)k) != DLC_OK) return dlcL_error(L);
    return 0;
}

static int s_flush(lua_State *L) {
    if (dlc_srt_flush(checksrt(L, 1)) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* s:shape(m, rate, latency): learner m's link, both ways, on the syncer's side (bytes/s,
 * 0 = no cap; seconds).  Bad values raise naming them. */
static int s_shape(lua_State *L) {
    srtbox *b = luaL_checkudata(L, 1, DLCL_SYNCER);
    dlc_srt *s = checksrt(L, 1);
    int m = dlcL_checklearner(L, 2, b->M);
    double rate = luaL_optnumber(L, 3, 0), latency = luaL_optnumber(L, 4, 0);
    if (dlc_srt_shape(s, m, rate, latency) != DLC_OK)
        return luaL_error(L, "Syncer:shape(%d, ...): %s", m + 1, dlc_last_error());
    return 0;
}

/* s:cut(m, seconds): learner m's link cut for seconds (math.huge: for good), 0 ends it. */
static int s_cut(lua_State *L) {
    srtbox *b = luaL_checkudata(L, 1, DLCL_SYNCER);
    dlc_srt *s = checksrt(L, 1);
    int m = dlcL_checklearner(L, 2, b->M);
    double secs = luaL_checknumber(L, 3);
    if (dlc_srt_cut(s, m, secs) != DLC_OK)
        return luaL_error(L, "Syncer:cut(%d, ...): %s", m + 1, dlc_last_error());
    return 0;
}

/* s:pause(seconds): its thread stands still for seconds (math.huge: for good), as a
 * stopped process (rt.h, dlc_srt_pause); 0 goes on now.  s:paused() -> seconds left. */
static int s_pause(lua_State *L) {
    dlc_srt *s = checksrt(L, 1);
    if (dlc_srt_pause(s, luaL_checknumber(L, 2)) != DLC_OK) return luaL_error(L, "Syncer:pause: %s", dlc_last_error());
    return 0;
}
static int s_paused(lua_State *L) {
    lua_pushnumber(L, dlc_srt_paused(checksrt(L, 1)));
    return 1;
}

/* s:learner(m) -> {connected, joined, bye, steps, tokens, step_time, best_step_time, heard, merged, joins, bytes_in, bytes_out,
 * rate, latency, cut (seconds it lasts still, 0 not cut), tokens_per_step (0 unknown)} */
static int s_learner(lua_State *L) {
    typedef dlc_srt_learner_info I;
    static const dlcL_field learner_info_fields[] = {
        DLCL_BOOL(I, connected), DLCL_BOOL(I, joined), DLCL_BOOL(I, bye), DLCL_INT(I, steps), DLCL_INT(I, tokens),
        DLCL_NUM(I, step_time), DLCL_NUM(I, best_step_time), DLCL_NUM(I, heard), DLCL_NUM(I, absent),
        DLCL_INT(I, merged), DLCL_NUM(I, merged_steps), DLCL_INT(I, joins), DLCL_INT(I, bytes_in),
        DLCL_INT(I, bytes_out), DLCL_NUM(I, rate), DLCL_NUM(I, latency), DLCL_NUM(I, cut),
        DLCL_NUM(I, tokens_per_step), {NULL}};
    srtbox *b = luaL_checkudata(L, 1, DLCL_SYNCER);
    dlc_srt *s = checksrt(L, 1);
    int m = dlcL_checklearner(L, 2, b->M);
    dlc_srt_learner_info i;
    if (dlc_srt_learner(s, m, &i) != DLC_OK) return dlcL_error(L);
    lua_createtable(L, 0, 18);
    dlcL_setfields(L, &i, learner_info_fields);
    return 1;
}

static int s_stats(lua_State *L) {
    /* s:stats()'s members of dlc_srt_stats, before and after refused_by. */
    typedef dlc_srt_stats S;
    static const dlcL_field srt_stats_fields[] = {
        DLCL_NUM(S, now), DLCL_INT(S, live), DLCL_INT(S, merges), DLCL_INT(S, rejects), DLCL_INT(S, refused), {NULL}};
    static const dlcL_field srt_stats_fields2[] = {
        DLCL_INT(S, events_dropped), DLCL_INT(S, sends_dropped), DLCL_INT(S, sends_held),
        DLCL_INT(S, sends_superseded), DLCL_NUM(S, useful_tokens), DLCL_INT(S, bytes_in), DLCL_INT(S, bytes_out),
        DLCL_INT(S, standby), DLCL_INT(S, replicas), DLCL_INT(S, acks), {NULL}};
    dlc_srt *s = checksrt(L, 1);
    dlc_srt_stats st;
    if (dlc_srt_get_stats(s, &st) != DLC_OK) return dlcL_error(L);
    lua_createtable(L, 0, 12);
    dlcL_setfields(L, &st, srt_stats_fields);
    lua_createtable(L, 0, 4); /* refused_by: {reason = count}, the reasons seen */
    for (int r = 0; r < DLC_SRT_REFUSAL_REASONS; r++) {
        if (!st.refused_by[r]) continue;
        lua_pushinteger(L, st.refused_by[r]);
        lua_setfield(L, -2, r == DLC_PERR_COUNT ? "message" : dlc_proto_errcode_name(r));
    }
    lua_setfield(L, -2, "refused_by");
    dlcL_setfields(L, &st, srt_stats_fields2);
    lua_createtable(L, 0, 8);
    for (int t = 0; t < DLC_FRAME_TYPE_COUNT; t++) {
        if (!st.bytes_in_type[t] && !st.bytes_out_type[t]) continue;
        lua_createtable(L, 0, 2);
        dlcL_setint(L, "up", (int64_t)st.bytes_in_type[t]);
        dlcL_setint(L, "down", (int64_t)st.bytes_out_type[t]);
        lua_setfield(L, -2, dlc_frame_type_name((dlc_frame_type)t));
    }
    lua_setfield(L, -2, "bytes_by_type");
    return 1;
}

/* diloco.advertise_address(listen, port[, advertise]) -> "HOST:PORT": the address
 * learners reach a syncer at (rt.h dlc_rt_advertise); a malformed one raises. */
static int l_advertise_address(lua_State *L) {
    const char *listen = luaL_checkstring(L, 1);
    lua_Integer port = luaL_checkinteger(L, 2);
    const char *adv = luaL_optstring(L, 3, NULL);
    char out[300];
    if (port < 0 || port > 65535) return luaL_error(L, "advertise_address: port %d: expected 0..65535", (int)port);
    if (dlc_rt_advertise(listen, (int)port, adv, out, sizeof out) != DLC_OK) return dlcL_error(L);
    lua_pushstring(L, out);
    return 1;
}

static const dlcL_type srt_type;

/* s:kill(): closes it as a killed process ends (no BYE to its standby, which takes over). */
static int s_kill(lua_State *L) {
    srtbox *b = luaL_checkudata(L, 1, DLCL_SYNCER);
    b->kill = 1;
    dlcL_closebox(b, &srt_type);
    return 0;
}

static const luaL_Reg srt_methods[] = {
    {"port", s_port},   {"poll", s_poll},       {"global", s_global}, {"set_quorum", s_set_quorum},
    {"flush", s_flush}, {"learner", s_learner}, {"stats", s_stats},   {"save", s_save},
    {"epoch", s_epoch}, {"shape", s_shape},     {"cut", s_cut},       {"kill", s_kill},
    {"pause", s_pause}, {"paused", s_paused},   {NULL, NULL}};
static const dlcL_type srt_type = {DLCL_SYNCER, srt_release, srt_methods, NULL, NULL};

/* ---- diloco.Learner ---- */

static void lrt_release(void *box);

static int l_learner(lua_State *L) {
    static const char *const WHO = "diloco.Learner";
    /* the syncer's fields too (given: the recipe's), so that HELLO states the whole run */
    dlcL_learner_opts o;
    lrtbox *b = dlcL_learner_box(L, WHO, DLCL_LEARNER, sizeof *b, &o);
    dlc_lrt_config c = dlc_lrt_default_config();
    if (dlc_run_learner_params(&o.run, 0, &c.learner) != DLC_OK) return dlcL_error(L);
    c.learner.heartbeat = o.heartbeat;
    if (o.si) c.run_params = &o.run;
    c.learner.id = -1;
    int ty = lua_getfield(L, 1, "id");
    if (ty != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > DLC_PROTO_LEARNERS_MAX)
            return luaL_error(L, "%s: id must be an integer in 1..%d (or nil: the syncer assigns one)", WHO,
                              DLC_PROTO_LEARNERS_MAX);
        c.learner.id = (int)lua_tointeger(L, -1) - 1;
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "hold") != LUA_TNIL) c.hold = (int)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 1, "inline_codec");
    c.inline_codec = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "incarnation") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
            return luaL_error(L, "%s: incarnation must be an integer >= 1 (larger for each restart)", WHO);
        c.learner.incarnation = lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    int ni = dlcL_subtable(L, 1, WHO, "net");
    read_net(L, ni, &c.net);
    c.connect = reqstr(L, 1, WHO, "connect");
    c.run = optstr(L, 1, WHO, "run", "");
    c.params = o.params;
    c.plan = o.plan;
    /* a stop signal (diloco.signals) ends the join and l:wait() at once */
    c.interrupted = dlcL_signal_caught;
    /* joined on return: the whole model arrived, or a refusal or deadline named */
    double join_timeout = 30;
    if (lua_getfield(L, 1, "join_timeout") != LUA_TNIL) {
        join_timeout = lua_tonumber(L, -1);
        if (!lua_isnumber(L, -1) || !(join_timeout > 0) || !isfinite(join_timeout))
            return luaL_error(L, "%s: join_timeout must be a finite number of seconds > 0", WHO);
    }
    lua_pop(L, 1);
    /* "HOST:PORT" or @FILE (the syncer's address file, waited for within the join's
     * time), or one of them per syncer shard joined by commas (docs/shards.md), each with
     * its standbys' after '|' (alternates, tried in turn) */
    char addr[DLC_PROTO_ENDPOINTS_MAX * 1024 + 16], one[512], file_run[DLC_PROTO_RUN_MAX + 1];
    size_t used = 0;
    addr[0] = '\0';
    for (const char *at = c.connect; *at;) {
        size_t len = strcspn(at, ",|");
        char sep = at[len];
        if (len == 0 || len >= sizeof one || (sep && !at[len + 1]))
            return luaL_error(L, "%s: connect \"%s\": expected HOST:PORT or @FILE, one per syncer shard joined by "
                              "commas, each with its standbys' after '|'", WHO, c.connect);
        memcpy(one, at, len);
        one[len] = '\0';
        at += len + (sep != '\0');
        const char *item = one;
        char resolved[512];
        if (one[0] == '@') {
            if (dlc_rt_address_file(one + 1, join_timeout, resolved, sizeof resolved, file_run, sizeof file_run) !=
                DLC_OK)
                return dlcL_fail(L, dlc_last_status());
            item = resolved;
        }
        size_t n = strlen(item);
        if (used + n + 2 > sizeof addr)
            return luaL_error(L, "%s: connect \"%s\": too long (at most %d shards)", WHO, c.connect,
                              DLC_PROTO_ENDPOINTS_MAX);
        memcpy(addr + used, item, n);
        used += n;
        if (sep) addr[used++] = sep;
        addr[used] = '\0';
    }
    c.connect = addr;
    b->l = dlc_lrt_new(&c);
    if (!b->l) return dlcL_fail(L, dlc_last_status());
    dlc_status st = dlc_lrt_join(b->l, join_timeout);
    if (st != DLC_OK) { /* closed at once (not left to the collector), the join's error kept */
        char keep[1024];
        snprintf(keep, sizeof keep, "%s", dlc_last_error());
        lrt_release(b);
        b->l = NULL;
        dlc_error(st, "%s", keep);
        return dlcL_fail(L, st);
    }
    lua_settop(L, 2);
    return 1;
}

/* A learner closed without l:finish says BYE on its way out (nothing more is waited for). */
static void lrt_release(void *box) {
    lrtbox *b = box;
    if (b->l && !b->finished && dlc_lrt_state(b->l) != DLC_LEARNER_STOPPED)
        (void)dlc_lrt_finish(b->l, 0, "the host closed its learner");
    dlc_lrt_free(b->l);
}

/* Pushes true for DLC_OK, else nil, message, code (raises for misuse). */
static int result(lua_State *L, dlc_status st) {
    if (st == DLC_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    if (st == DLC_ERR_ARG) return dlcL_error(L);
    return dlcL_fail(L, st);
}

/* l:join([timeout_s]) -> true: diloco.Learner{} joined already (kept for the scripts that
 * call it) */
static int lr_join(lua_State *L) {
    checklrt(L, 1);
    lua_pushboolean(L, 1);
    return 1;
}
/* l:pump([timeout_s]): takes what arrived, waiting up to timeout_s (0) for it; never steps */
static int lr_pump(lua_State *L) {
    dlc_lrt *l = checklrt(L, 1);
    if (dlc_lrt_pump(l, luaL_optnumber(L, 2, 0)) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* l:wait([timeout_s]) -> true, void | nil, message, code (void: dp, resynced instead) */
static int lr_wait(lua_State *L) {
    dlc_lrt *l = checklrt(L, 1);
    dlc_status st = dlc_lrt_wait(l, luaL_optnumber(L, 2, 60));
    if (st != DLC_OK) return result(L, st);
    lua_pushboolean(L, 1);
    lua_pushboolean(L, dlc_lrt_step_void(l));
    return 2;
}

static int lr_step_done(lua_State *L) {
    dlc_lrt *l = checklrt(L, 1);
    lua_Integer tokens = luaL_checkinteger(L, 2);
    double seconds = luaL_optnumber(L, 3, 0);
    luaL_argcheck(L, tokens >= 0, 2, "tokens must be >= 0");
    luaL_argcheck(L, seconds >= 0 && isfinite(seconds), 3, "seconds must be >= 0");
    if (dlc_lrt_step_done(l, tokens, seconds) != DLC_OK) return dlcL_error(L);
    return 0;
}

static int lr_gradient(lua_State *L) {
    dlc_lrt *l = checklrt(L, 1);
    lua_Integer tokens = luaL_checkinteger(L, 2);
    if (dlc_lrt_gradient(l, tokens) != DLC_OK) return dlcL_error(L);
    return 0;
}

static int lr_contribute(lua_State *L) {
    dlc_lrt *l = checklrt(L, 1);
    lua_Integer p = luaL_checkinteger(L, 2);
    luaL_argcheck(L, p >= 1 && p <= DLC_PROTO_FRAGMENTS_MAX, 2, "fragment out of range");
    if (dlc_lrt_contribute(l, (int)p - 1) != DLC_OK) return dlcL_error(L);
    return 0;
}

static int lr_finish(lua_State *L) {
    dlc_lrt *l = checklrt(L, 1);
    lrtbox *b = lua_touserdata(L, 1);
    double timeout = luaL_optnumber(L, 2, 10);
    luaL_argcheck(L, timeout >= 0 && isfinite(timeout), 2, "timeout must be a finite number of seconds >= 0");
    if (b->finished) return result(L, DLC_OK);
    b->finished = 1;
    /* the host flushed (l:flush) when it wanted to */
    return result(L, dlc_lrt_finish(l, timeout, luaL_optstring(L, 3, "finished")));
}

/* l:rollback() -> true | nil, message, code: back to the last global model (rt.h). */
static int lr_rollback(lua_State *L) {
    dlc_status st = dlc_lrt_rollback(checklrt(L, 1));
    if (st == DLC_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    return dlcL_fail(L, st);
}

/* l:nonfinite() -> nil when every parameter is finite, else message ("parameter 'h'
 * element 3 is nan"), tensor (1-based, in the Params' order), index (1-based in the
 * tensor), value (nan, inf or -inf). */
static int lr_nonfinite(lua_State *L) {
    dlc_lrt *l = checklrt(L, 1);
    int k;
    int64_t i;
    float v;
    if (dlc_lrt_check_finite(l, &k, &i, &v) == DLC_OK) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushstring(L, dlc_last_error());
    lua_pushinteger(L, k + 1);
    lua_pushinteger(L, (lua_Integer)i + 1);
    lua_pushnumber(L, v);
    return 4;
}

static int lr_state(lua_State *L) {
    lua_pushstring(L, dlc_learner_state_name(dlc_lrt_state(checklrt(L, 1))));
    return 1;
}

static int lr_id(lua_State *L) {
    int id = dlc_lrt_id(checklrt(L, 1));
    if (id < 0) lua_pushnil(L);
    else lua_pushinteger(L, id + 1);
    return 1;
}

static int lr_schedule_step(lua_State *L) {
    lua_pushinteger(L, dlc_learner_schedule_step(dlc_lrt_learner(checklrt(L, 1))));
    return 1;
}

static int lr_set_schedule_step(lua_State *L) {
    dlc_lrt *l = checklrt(L, 1);
    lua_Integer step = luaL_checkinteger(L, 2);
    if (dlc_lrt_set_schedule_step(l, (int64_t)step) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* l:replay(): dp, asks for the averages of the steps the run is past (rt.h). */
static int lr_replay(lua_State *L) {
    if (dlc_lrt_replay(checklrt(L, 1)) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* l:replayed(): the optimizer step on the replayed average is done. */
/* l:outstanding(): its contributions sent with no merge since (what its finish waits for). */
static int lr_outstanding(lua_State *L) {
    const dlc_learner *lr = dlc_lrt_learner(checklrt(L, 1));
    lua_pushinteger(L, lr ? dlc_learner_outstanding(lr) : 0);
    return 1;
}

/* l:last_refusal(): why the syncer last refused or dropped it ("" if never; rt.h). */
static int lr_last_refusal(lua_State *L) {
    lua_pushstring(L, dlc_lrt_last_refusal(checklrt(L, 1)));
    return 1;
}

static int lr_replayed(lua_State *L) {
    if (dlc_lrt_replayed(checklrt(L, 1)) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* l:replaying() -> bool, ready: catching up; ready: an average waits in the grads */
static int lr_replaying(lua_State *L) {
    dlc_lrt *l = checklrt(L, 1);
    lua_pushboolean(L, dlc_lrt_replaying(l));
    lua_pushboolean(L, dlc_lrt_replay_ready(l));
    return 2;
}

/* l:flush() -> n: the final flush, the fragments sent (rt.h) */
static int lr_flush(lua_State *L) {
    int n = 0;
    if (dlc_lrt_flush(checklrt(L, 1), &n) != DLC_OK) return dlcL_error(L);
    lua_pushinteger(L, n);
    return 1;
}

/* l:account() -> {sent_steps, overwritten_steps, kept_steps, discarded_steps, unsent_steps,
 * and the same in seconds (_s)}: where this process's compute went (learner.h) */
static int lr_account(lua_State *L) {
    typedef dlc_learner_account A;
    static const dlcL_field account_fields[] = {
        DLCL_NUM(A, sent_steps), DLCL_NUM(A, overwritten_steps), DLCL_NUM(A, kept_steps),
        DLCL_NUM(A, discarded_steps), DLCL_NUM(A, unsent_steps), DLCL_NUM(A, sent_s), DLCL_NUM(A, overwritten_s),
        DLCL_NUM(A, kept_s), DLCL_NUM(A, discarded_s), DLCL_NUM(A, unsent_s), {NULL}};
    dlc_learner_account a = dlc_learner_get_account(dlc_lrt_learner(checklrt(L, 1)));
    lua_createtable(L, 0, 10);
    dlcL_setfields(L, &a, account_fields);
    return 1;
}

/* l:replays() -> bool: dp, the syncer replays averaged gradients (its WELCOME said so) */
static int lr_replays(lua_State *L) {
    lua_pushboolean(L, dlc_lrt_replays(checklrt(L, 1)));
    return 1;
}

static int lr_poll(lua_State *L) {
    dlc_lrt_event ev;
    if (!dlc_lrt_poll(checklrt(L, 1), &ev)) {
        lua_pushnil(L);
        return 1;
    }
    lua_createtable(L, 0, 6);
    lua_pushstring(L, dlc_lrt_event_name(ev.kind));
    lua_setfield(L, -2, "type");
    dlcL_setnum(L, "time", ev.time);
    if (ev.kind == DLC_LRT_APPLIED) {
        dlcL_setint(L, "fragment", ev.fragment + 1);
        dlcL_setint(L, "version", ev.version);
        dlcL_setint(L, "lag", ev.lag);
        dlcL_setint(L, "boundary", ev.boundary);
        lua_pushboolean(L, ev.resync);
        lua_setfield(L, -2, "resync");
    } else if (ev.kind == DLC_LRT_ROOM) {
        dlcL_setint(L, "boundary", ev.boundary);
        dlcL_setint(L, "room", ev.room);
    } else if (ev.kind == DLC_LRT_PHASE) {
        if (ev.fragment >= 0) dlcL_setint(L, "fragment", ev.fragment + 1);
        dlcL_setint(L, "lag", ev.lag);
        dlcL_setint(L, "boundary", ev.boundary);
        dlcL_setint(L, "schedule", ev.schedule);
        if (ev.unreplayed > 0) dlcL_setint(L, "unreplayed", ev.unreplayed);
    } else {
        lua_pushstring(L, ev.text);
        lua_setfield(L, -2, "text");
    }
    return 1;
}

static int lr_stats(lua_State *L) {
    typedef dlc_lrt_stats S;
    static const dlcL_field lrt_stats_fields[] = {
        DLCL_NUM(S, now), DLCL_NUM(S, wait_s), DLCL_NUM(S, call_s), DLCL_NUM(S, encode_wait_s), DLCL_INT(S, encoded),
        DLCL_INT(S, decoded), DLCL_BOOL(S, connected), DLCL_INT(S, sent), DLCL_INT(S, held),
        DLCL_INT(S, held_dropped), DLCL_INT(S, held_superseded), DLCL_INT(S, deferred), DLCL_INT(S, left),
        DLCL_INT(S, reused), DLCL_INT(S, applied), DLCL_INT(S, reconnects), DLCL_INT(S, bytes_in), DLCL_INT(S, bytes_out),
        DLCL_INT(S, rollbacks), DLCL_INT(S, replayed), DLCL_INT(S, unreplayed), {NULL}};
    dlc_lrt *l = checklrt(L, 1);
    dlc_lrt_stats st;
    if (dlc_lrt_get_stats(l, &st) != DLC_OK) return dlcL_error(L);
    lua_createtable(L, 0, 23);
    dlcL_setfields(L, &st, lrt_stats_fields);
    const dlc_learner *lr = dlc_lrt_learner(l);
    dlcL_setnum(L, "step_time", dlc_learner_step_time(lr));
    dlcL_setint(L, "steps", dlc_learner_steps(lr));
    return 1;
}

static const luaL_Reg lrt_methods[] = {
    {"join", lr_join},       {"wait", lr_wait},   {"pump", lr_pump},     {"step_done", lr_step_done},
    {"gradient", lr_gradient}, {"contribute", lr_contribute}, {"finish", lr_finish},
    {"state", lr_state},     {"id", lr_id},       {"schedule_step", lr_schedule_step},
    {"set_schedule_step", lr_set_schedule_step},
    {"poll", lr_poll},       {"stats", lr_stats}, {"rollback", lr_rollback},
    {"nonfinite", lr_nonfinite}, {"replay", lr_replay}, {"replayed", lr_replayed},
    {"last_refusal", lr_last_refusal}, {"outstanding", lr_outstanding},
    {"replaying", lr_replaying}, {"replays", lr_replays}, {"flush", lr_flush}, {"account", lr_account}, {NULL, NULL}};
static const dlcL_type lrt_type = {DLCL_LEARNER, lrt_release, lrt_methods, NULL, NULL};

/* ---- registration ---- */

void dlcL_open_rt(lua_State *L, int mod, int st) {
    static const dlcL_type *const types[] = {&srt_type, &lrt_type, NULL};
    static const luaL_Reg funcs[] = {{"Syncer", l_syncer}, {"Learner", l_learner},
                                     {"advertise_address", l_advertise_address}, {NULL, NULL}};
    dlcL_register(L, mod, st, types, funcs);
}
