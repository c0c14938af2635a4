/*
 * lgoodput.c - diloco.goodput{...}: one run of the goodput simulator (core/goodput.h,
 * docs/goodput.md) from a table of options, the result as a table.
 *
 *     local r = diloco.goodput{policy = "decoupled", learners = 8, chips = 1.2e6,
 *                              mtbi = "1y", duration = "30d", seed = 1}
 *     print(r.goodput, r.uptime, #r.series.t, r.learner_goodput[1])
 *     print(diloco.goodput_duration("90m"))   --> 5400 (or nil, message)
 *
 * Every option is optional (defaults: dlc_goodput_default_params, printed by
 * diloco.goodput_defaults()); durations are seconds or strings with a unit: ms, s, m, h,
 * d, y (365 d).  A bad or unknown option raises naming the field and the expected form.
 * series = false skips the time series.  Nothing is kept between calls.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ldiloco.h"

void dlcL_open_goodput(lua_State *L, int mod, int st);

#define DLCL_GOODPUT_RESULT "diloco.goodput.result"

/* "250ms", "30s", "5m", "1.5h", "2d", "1y" -> seconds; -1 if malformed. */
static double parse_duration(const char *s) {
    static const struct { const char *u; double k; } units[] = {
        {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}, {"y", 365 * 86400.0}};
    char *end;
    while (*s == ' ') s++;
    if (!(*s >= '0' && *s <= '9')) return -1;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0) return -1;
    while (*end == ' ') end++;
    size_t n = strlen(end);
    while (n && end[n - 1] == ' ') n--;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (n == strlen(units[i].u) && !strncmp(end, units[i].u, n)) return v * units[i].k;
    return -1;
}

static const char *const OPTIONS[] = {"policy", "chips", "learners", "slice_chips", "mtbi", "repair", "downscale",
                                      "upscale", "step", "checkpoint", "checkpoint_cost", "restart", "pause",
                                      "duration", "sample", "seed", "series", "syncer_shards", "syncer_mtbf",
                                      "syncer_restart", "syncer_checkpoint", "standby", "lease", NULL};

/* The duration at field k of table 1, or dflt when absent. */
static double opt_duration(lua_State *L, const char *k, double dflt) {
    int ty = lua_getfield(L, 1, k);
    double v = dflt;
    if (ty == LUA_TNUMBER) {
        v = lua_tonumber(L, -1);
        if (!isfinite(v) || v < 0) v = -1;
    } else if (ty == LUA_TSTRING) {
        v = parse_duration(lua_tostring(L, -1));
    } else if (ty != LUA_TNIL) {
        v = -1;
    }
    if (v < 0)
        luaL_error(L, "goodput: %s = %s, expected a duration: seconds >= 0 or a number with a unit ms, s, m, h, d or y (\"30s\", \"5m\", \"2h\", \"1y\")",
                   k, luaL_tolstring(L, -1, NULL));
    lua_pop(L, 1);
    return v;
}

static lua_Integer opt_int(lua_State *L, const char *k, lua_Integer dflt, lua_Integer lo) {
    int ty = lua_getfield(L, 1, k);
    if (ty == LUA_TNIL) return lua_pop(L, 1), dflt;
    int isint = 0;
    lua_Integer v = ty == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0;
    if (!isint || v < lo)
        luaL_error(L, "goodput: %s = %s, expected an integer >= %I", k, luaL_tolstring(L, -1, NULL), (LUAI_UACINT)lo);
    lua_pop(L, 1);
    return v;
}

#define setnum dlcL_setnum

static void pusharray(lua_State *L, const double *x, int64_t n) {
    lua_createtable(L, n > INT32_MAX ? INT32_MAX : (int)n, 0);
    for (int64_t i = 0; i < n; i++) {
        lua_pushnumber(L, x[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

static void pushparams(lua_State *L, const dlc_goodput_params *p) {
    typedef dlc_goodput_params GP;
    static const dlcL_field fields[] = {
        DLCL_INT(GP, chips), DLCL_INT(GP, learners), DLCL_INT(GP, slice_chips), DLCL_NUM(GP, mtbi),
        DLCL_NUM(GP, repair), DLCL_NUM(GP, downscale), DLCL_NUM(GP, upscale), DLCL_NUM(GP, step),
        DLCL_NUM(GP, checkpoint), DLCL_NUM(GP, checkpoint_cost), DLCL_NUM(GP, restart), DLCL_NUM(GP, duration),
        DLCL_NUM(GP, sample), DLCL_INT(GP, seed), DLCL_INT(GP, syncer_shards), DLCL_NUM(GP, syncer_mtbf),
        DLCL_NUM(GP, syncer_restart), DLCL_NUM(GP, syncer_checkpoint), DLCL_INT(GP, standby), DLCL_NUM(GP, lease),
        {NULL}};
    lua_createtable(L, 0, 24);
    lua_pushstring(L, dlc_goodput_policy_name(p->policy));
    lua_setfield(L, -2, "policy");
    lua_pushstring(L, dlc_goodput_pause_name(p->pause));
    lua_setfield(L, -2, "pause");
    dlcL_setfields(L, p, fields);
}

/* diloco.goodput([opts]) -> result table */
static int l_goodput(lua_State *L) {
    dlc_goodput_params p = dlc_goodput_default_params();
    int series = 1;
    if (lua_isnoneornil(L, 1)) {
        lua_settop(L, 0);
        lua_newtable(L);
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        int known = 0;
        for (int i = 0; k && OPTIONS[i]; i++) known |= !strcmp(k, OPTIONS[i]);
        if (!known)
            return luaL_error(L, "goodput: unknown option '%s' (known: policy, chips, learners, slice_chips, mtbi, repair, downscale, upscale, step, checkpoint, checkpoint_cost, restart, pause, duration, sample, seed, series, syncer_shards, syncer_mtbf, syncer_restart, syncer_checkpoint, standby, lease)",
                              k ? k : luaL_typename(L, -1));
    }
    int ty = lua_getfield(L, 1, "policy");
    if (ty != LUA_TNIL && (ty != LUA_TSTRING || dlc_goodput_policy_parse(lua_tostring(L, -1), &p.policy) != DLC_OK))
        return luaL_error(L, "goodput: policy = %s, expected \"dp\", \"elastic-dp\" or \"decoupled\"", luaL_tolstring(L, -1, NULL));
    ty = lua_getfield(L, 1, "pause");
    if (ty != LUA_TNIL && (ty != LUA_TSTRING || dlc_goodput_pause_parse(lua_tostring(L, -1), &p.pause) != DLC_OK))
        return luaL_error(L, "goodput: pause = %s, expected \"absorb\" or \"extend\"", luaL_tolstring(L, -1, NULL));
    ty = lua_getfield(L, 1, "series");
    if (ty != LUA_TNIL && ty != LUA_TBOOLEAN)
        return luaL_error(L, "goodput: series must be a boolean, got a %s", luaL_typename(L, -1));
    if (ty == LUA_TBOOLEAN) series = lua_toboolean(L, -1);
    lua_settop(L, 1);
    p.chips = (int64_t)opt_int(L, "chips", p.chips, 1);
    lua_Integer m = opt_int(L, "learners", p.learners, 1);
    p.learners = m > DLC_GOODPUT_MAX_LEARNERS ? DLC_GOODPUT_MAX_LEARNERS + 1 : (int)m;
    p.slice_chips = (int64_t)opt_int(L, "slice_chips", p.slice_chips, 1);
    p.seed = (uint64_t)opt_int(L, "seed", (lua_Integer)p.seed, 0);
    p.mtbi = opt_duration(L, "mtbi", p.mtbi);
    p.repair = opt_duration(L, "repair", p.repair);
    p.downscale = opt_duration(L, "downscale", p.downscale);
    p.upscale = opt_duration(L, "upscale", p.upscale);
    p.step = opt_duration(L, "step", p.step);
    p.checkpoint = opt_duration(L, "checkpoint", p.checkpoint);
    p.checkpoint_cost = opt_duration(L, "checkpoint_cost", p.checkpoint_cost);
    p.restart = opt_duration(L, "restart", p.restart);
    p.duration = opt_duration(L, "duration", p.duration);
    p.sample = opt_duration(L, "sample", p.sample);
    lua_Integer ns = opt_int(L, "syncer_shards", p.syncer_shards, 0);
    p.syncer_shards = ns > DLC_GOODPUT_MAX_SHARDS ? DLC_GOODPUT_MAX_SHARDS + 1 : (int)ns;
    lua_Integer sb = opt_int(L, "standby", p.standby, 0);
    p.standby = sb > 1000000 ? 1000000 : (int)sb; /* (checked below, named as given) */
    p.syncer_mtbf = opt_duration(L, "syncer_mtbf", p.syncer_mtbf);
    p.syncer_restart = opt_duration(L, "syncer_restart", p.syncer_restart);
    p.syncer_checkpoint = opt_duration(L, "syncer_checkpoint", p.syncer_checkpoint);
    p.lease = opt_duration(L, "lease", p.lease);
    if (!series) p.sample = 0;
    if (dlc_goodput_params_check(&p) != DLC_OK) return luaL_error(L, "%s", dlc_last_error());

    /* The C result lives in a userdata whose __gc frees it, so a memory error raised
     * while it is copied into Lua tables leaks nothing. */
    dlc_goodput_result *rp = lua_newuserdatauv(L, sizeof *rp, 0);
    memset(rp, 0, sizeof *rp);
    luaL_setmetatable(L, DLCL_GOODPUT_RESULT);
    if (dlc_goodput_run(&p, rp) != DLC_OK) return luaL_error(L, "%s", dlc_last_error());
    const dlc_goodput_result r = *rp;
    lua_createtable(L, 0, 12);
    setnum(L, "goodput", r.goodput);
    setnum(L, "uptime", r.uptime);
    setnum(L, "useful", r.useful);
    dlcL_setint(L, "interruptions", r.interruptions);
    dlcL_setint(L, "rollbacks", r.rollbacks);
    dlcL_setint(L, "events", r.events);
    setnum(L, "first_interruption", r.first_interruption);
    dlcL_setint(L, "syncer_failures", r.syncer_failures);
    dlcL_setint(L, "syncer_outages", r.syncer_outages);
    dlcL_setint(L, "takeovers", r.takeovers);
    setnum(L, "syncer_lost", r.syncer_lost);
    pusharray(L, r.learner_goodput, r.learners);
    lua_setfield(L, -2, "learner_goodput");
    if (r.samples) {
        lua_createtable(L, 0, 3);
        pusharray(L, r.t, r.samples);
        lua_setfield(L, -2, "t");
        pusharray(L, r.live_chips, r.samples);
        lua_setfield(L, -2, "live_chips");
        pusharray(L, r.progress, r.samples);
        lua_setfield(L, -2, "progress");
        lua_setfield(L, -2, "series");
    }
    pushparams(L, &p);
    lua_setfield(L, -2, "params");
    dlc_goodput_result_free(rp);
    return 1;
}

static int result_gc(lua_State *L) {
    dlc_goodput_result_free(luaL_checkudata(L, 1, DLCL_GOODPUT_RESULT));
    return 0;
}

/* diloco.goodput_defaults() -> the default parameters as a table (durations in seconds) */
static int l_goodput_defaults(lua_State *L) {
    dlc_goodput_params p = dlc_goodput_default_params();
    pushparams(L, &p);
    return 1;
}

/* diloco.goodput_duration(s) -> seconds, or nil and the expected form */
static int l_goodput_duration(lua_State *L) {
    double v = -1;
    if (lua_type(L, 1) == LUA_TNUMBER) {
        v = lua_tonumber(L, 1);
        if (!isfinite(v) || v < 0) v = -1;
    } else if (lua_type(L, 1) == LUA_TSTRING) {
        v = parse_duration(lua_tostring(L, 1));
    }
    if (v < 0) {
        const char *got = luaL_tolstring(L, 1, NULL);
        lua_pushnil(L);
        lua_pushfstring(L, "%s: expected a duration such as \"30s\", \"5m\", \"2h\", \"1y\" (units ms, s, m, h, d, y)", got);
        return 2;
    }
    lua_pushnumber(L, v);
    return 1;
}

void dlcL_open_goodput(lua_State *L, int mod, int st) {
    static const luaL_Reg funcs[] = {{"goodput", l_goodput},
                                     {"goodput_defaults", l_goodput_defaults},
                                     {"goodput_duration", l_goodput_duration},
                                     {NULL, NULL}};
    luaL_newmetatable(L, DLCL_GOODPUT_RESULT);
    lua_pushcfunction(L, result_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    dlcL_setfuncs(L, lua_absindex(L, mod), lua_absindex(L, st), funcs);
}
