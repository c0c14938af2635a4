/*
 * lchaos.c - diloco.Chaos: fault schedules (core/chaos.h, docs/chaos.md) from Lua, to
 * write a run's failures by hand or draw them, and to look at what the driver will see.
 *
 *     local ch = diloco.Chaos(4)                                  -- 4 learners, 1..4
 *     ch:add{at = 30, kind = "kill", learner = 2, duration = 60}
 *     ch:add{at = 50, kind = "syncer", duration = math.huge}      -- the syncer: no learner
 *     ch:add{at = 60, kind = "pause", duration = 5, shard = 2}     -- shard 2 of the syncer stopped
 *     ch:poisson{mtbf = 3600, down = 120, horizon = 86400, seed = 42}   -- every learner
 *     for _, e in ipairs(ch:timeline()) do print(e.t, e.begin, ch:get(e.fault).kind) end
 *     print(ch:down_share(2, 86400))
 *
 * Numbering: learners, faults (ch:get(i), e.fault) are 1-based like every Lua position;
 * the C side is 0-based and this file converts both ways.  Learner ranges are checked
 * here so that messages speak 1-based; every other value is checked by the C code, whose
 * message (naming the field, as the Lua field) is raised.
 *
 * Lifetime: a box holds its dlc_chaos (NULL once closed); __gc, __close and :close()
 * share one idempotent release (dlcL_newtype).
 */
#include <math.h>
#include <string.h>
#include "ldiloco.h"

#define DLCL_CHAOS "diloco.Chaos"

void dlcL_open_chaos(lua_State *L, int mod, int st);

typedef struct chaosbox {
    dlc_chaos *c;         /* owned; NULL when closed (or not yet acquired) */
    dlc_chaos_cursor cur; /* ch:due's, started by its first call */
    int cur_started;
} chaosbox;

static dlc_chaos *checkchaos(lua_State *L, int arg) {
    chaosbox *b = luaL_checkudata(L, arg, DLCL_CHAOS);
    if (!b->c) luaL_argerror(L, arg, "Chaos has been closed");
    return b->c;
}

dlc_chaos *dlcL_checkchaos(lua_State *L, int arg) { return checkchaos(L, arg); }

/* Field `name` of the table at `t` as a number: `def` when nil and not required. */
static double num_field(lua_State *L, int t, const char *who, const char *name, int required, double def) {
    int ty = lua_getfield(L, t, name);
    double v = def;
    if (ty == LUA_TNIL) {
        if (required) luaL_error(L, "%s: %s is required (a number of seconds)", who, name);
    } else if (ty != LUA_TNUMBER) {
        luaL_error(L, "%s: %s must be a number, got a %s", who, name, luaL_typename(L, -1));
    } else {
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

/* Field "learner" as a 0-based index; nil gives -1 when allow_nil, else raises. */
static int learner_field(lua_State *L, int t, const char *who, int learners, int allow_nil) {
    int ty = lua_getfield(L, t, "learner"), isint = 0;
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        if (!allow_nil) luaL_error(L, "%s: learner is required (1..%d)", who, learners);
        return -1;
    }
    lua_Integer m = ty == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0;
    if (!isint || m < 1 || m > learners)
        luaL_error(L, "%s: learner = %s, expected an integer in 1..%d (%d learners)", who, luaL_tolstring(L, -1, NULL),
                   learners, learners);
    lua_pop(L, 1);
    return (int)m - 1;
}

/* diloco.Chaos(learners) */
static int l_chaos(lua_State *L) {
    int isint;
    lua_Integer m = lua_tointegerx(L, 1, &isint);
    if (!isint || m < 1 || m > DLC_CHAOS_MAX_LEARNERS)
        return luaL_argerror(L, 1, lua_pushfstring(L, "learners = %s, expected an integer in 1..%d",
                                                   luaL_tolstring(L, 1, NULL), DLC_CHAOS_MAX_LEARNERS));
    chaosbox *b = dlcL_newbox(L, DLCL_CHAOS, sizeof *b, 0);
    if (!(b->c = dlc_chaos_new((int)m))) return dlcL_error(L);
    return 1;
}

static void chaos_release(void *box) { dlc_chaos_free(((chaosbox *)box)->c); }

/* ch:add{at =, kind =, learner =, duration =, factor =, bandwidth =, latency =} */
static int ch_add(lua_State *L) {
    static const char *const who = "Chaos:add";
    static const char *const known[] = {"at", "kind", "learner", "duration", "factor", "bandwidth", "latency", "shard",
                                        "role", NULL};
    dlc_chaos *c = checkchaos(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    dlcL_check_keys(L, 2, who, known, "field");
    dlc_fault f = {0};
    if (lua_getfield(L, 2, "kind") != LUA_TSTRING)
        return luaL_error(L, "%s: kind must be \"kill\", \"slow\", \"cut\", \"syncer\", \"link\" or \"pause\", got a %s", who,
                          luaL_typename(L, -1));
    if (dlc_fault_kind_parse(lua_tostring(L, -1), &f.kind) != DLC_OK)
        return luaL_error(L, "%s: kind = \"%s\": expected kill, slow, cut, syncer, link or pause", who, lua_tostring(L, -1));
    lua_pop(L, 1);
    f.at = num_field(L, 2, who, "at", 1, 0);
    f.duration = num_field(L, 2, who, "duration", 1, 0);
    /* a fault of the syncer: kind "syncer", or "pause" naming no learner (the syncer paused) */
    int of_syncer = f.kind == DLC_FAULT_SYNCER;
    if (f.kind == DLC_FAULT_PAUSE) of_syncer = lua_getfield(L, 2, "learner") == LUA_TNIL, lua_pop(L, 1);
    if (of_syncer) {
        if (lua_getfield(L, 2, "learner") != LUA_TNIL)
            return luaL_error(L, "%s: a syncer fault has no learner (got learner = %s)", who,
                              luaL_tolstring(L, -1, NULL));
        lua_pop(L, 1);
        f.learner = -1;
        if (lua_getfield(L, 2, "shard") != LUA_TNIL) { /* one shard of a sharded syncer (1-based) */
            if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > DLC_CHAOS_MAX_SHARDS)
                return luaL_error(L, "%s: shard = %s: expected an integer in [1, %d] (nil: the whole syncer)", who,
                                  luaL_tolstring(L, -1, NULL), DLC_CHAOS_MAX_SHARDS);
            f.shard = (int)lua_tointeger(L, -1);
        }
        lua_pop(L, 1);
        if (lua_getfield(L, 2, "role") != LUA_TNIL) { /* which process of it (docs/shards.md, "Standbys") */
            if (lua_type(L, -1) != LUA_TSTRING || dlc_fault_role_parse(lua_tostring(L, -1), &f.role) != DLC_OK)
                return luaL_error(L, "%s: role = %s: expected \"primary\", \"standby\" or \"both\"", who,
                                  luaL_tolstring(L, -1, NULL));
        }
        lua_pop(L, 1);
    } else if (lua_getfield(L, 2, "role") != LUA_TNIL) {
        return luaL_error(L, "%s: role is only for a fault of the syncer (kind = \"%s\" with a learner)", who,
                          dlc_fault_kind_name(f.kind));
    } else if ((lua_pop(L, 1), lua_getfield(L, 2, "shard")) != LUA_TNIL) {
        return luaL_error(L, "%s: shard is only for a fault of the syncer (kind = \"%s\" with a learner)", who,
                          dlc_fault_kind_name(f.kind));
    } else {
        lua_pop(L, 1);
        f.learner = learner_field(L, 2, who, dlc_chaos_learners(c), 0);
    }
    if (f.kind == DLC_FAULT_SLOW) {
        f.factor = num_field(L, 2, who, "factor", 1, 0);
    } else if (lua_getfield(L, 2, "factor") != LUA_TNIL) {
        return luaL_error(L, "%s: factor is only for kind = \"slow\" (kind = \"%s\")", who, dlc_fault_kind_name(f.kind));
    }
    if (f.kind == DLC_FAULT_LINK) { /* nil: the link keeps its own */
        f.bandwidth = num_field(L, 2, who, "bandwidth", 0, 0);
        f.latency = num_field(L, 2, who, "latency", 0, -1);
    } else {
        for (int k = 0; k < 2; k++)
            if (lua_getfield(L, 2, k ? "latency" : "bandwidth") != LUA_TNIL)
                return luaL_error(L, "%s: %s is only for kind = \"link\" (kind = \"%s\")", who,
                                  k ? "latency" : "bandwidth", dlc_fault_kind_name(f.kind));
    }
    c = checkchaos(L, 1); /* option metamethods may have run Lua code */
    if (dlc_chaos_add(c, &f) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* ch:poisson{learner = (nil: all), mtbf =, down =, exponential_down =, horizon =, seed =} */
static int ch_poisson(lua_State *L) {
    static const char *const who = "Chaos:poisson";
    static const char *const known[] = {"learner", "mtbf", "down", "exponential_down", "horizon", "seed", NULL};
    dlc_chaos *c = checkchaos(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    dlcL_check_keys(L, 2, who, known, "field");
    int m = learner_field(L, 2, who, dlc_chaos_learners(c), 1);
    double mtbf = num_field(L, 2, who, "mtbf", 1, 0);
    double down = num_field(L, 2, who, "down", 1, 0);
    double horizon = num_field(L, 2, who, "horizon", 1, 0);
    int ty = lua_getfield(L, 2, "exponential_down");
    if (ty != LUA_TNIL && ty != LUA_TBOOLEAN)
        return luaL_error(L, "%s: exponential_down must be a boolean, got a %s", who, luaL_typename(L, -1));
    int expd = lua_toboolean(L, -1);
    lua_pop(L, 1);
    int isint = 0;
    ty = lua_getfield(L, 2, "seed");
    lua_Integer seed = ty == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0;
    if (!isint)
        return luaL_error(L, "%s: seed = %s, expected an integer (the same seed gives the same schedule)", who,
                          luaL_tolstring(L, -1, NULL));
    lua_pop(L, 1);
    c = checkchaos(L, 1);
    if (dlc_chaos_add_poisson(c, m, mtbf, down, expd, horizon, (uint64_t)seed) != DLC_OK) return dlcL_error(L);
    return 0;
}

static int ch_count(lua_State *L) {
    lua_pushinteger(L, dlc_chaos_count(checkchaos(L, 1)));
    return 1;
}

static void push_fault(lua_State *L, const dlc_fault *f);

/* Argument `arg`, a 1-based learner of c, as its 0-based index; raises otherwise. */
static int learner_arg(lua_State *L, dlc_chaos *c, int arg) {
    lua_Integer m = luaL_checkinteger(L, arg);
    int M = dlc_chaos_learners(c);
    if (m < 1 || m > M) luaL_argerror(L, arg, lua_pushfstring(L, "learner %I out of range 1..%d", (LUAI_UACINT)m, M));
    return (int)m - 1;
}

/* ch:get(i) -> {at =, kind =, learner = (1-based; nil for the syncer), duration =, factor = (slow only),
 * bandwidth =, latency = (link only, each nil when the link keeps its own)} */
static int ch_get(lua_State *L) {
    dlc_chaos *c = checkchaos(L, 1);
    lua_Integer i = luaL_checkinteger(L, 2);
    int n = dlc_chaos_count(c);
    if (i < 1 || i > n) return luaL_argerror(L, 2, lua_pushfstring(L, "fault %I out of range 1..%d", (LUAI_UACINT)i, n));
    push_fault(L, dlc_chaos_get(c, (int)i - 1));
    return 1;
}

/* Pushes fault f as ch:get gives it. */
static void push_fault(lua_State *L, const dlc_fault *f) {
    lua_createtable(L, 0, 5);
    lua_pushnumber(L, f->at);
    lua_setfield(L, -2, "at");
    lua_pushstring(L, dlc_fault_kind_name(f->kind));
    lua_setfield(L, -2, "kind");
    if (f->learner >= 0) {
        lua_pushinteger(L, f->learner + 1);
        lua_setfield(L, -2, "learner");
    }
    if (f->shard > 0) {
        lua_pushinteger(L, f->shard);
        lua_setfield(L, -2, "shard");
    }
    if (f->role != DLC_ROLE_PRIMARY) {
        lua_pushstring(L, dlc_fault_role_name(f->role));
        lua_setfield(L, -2, "role");
    }
    lua_pushnumber(L, f->duration);
    lua_setfield(L, -2, "duration");
    if (f->kind == DLC_FAULT_SLOW) {
        lua_pushnumber(L, f->factor);
        lua_setfield(L, -2, "factor");
    }
    if (f->kind == DLC_FAULT_LINK && f->bandwidth > 0) {
        lua_pushnumber(L, f->bandwidth);
        lua_setfield(L, -2, "bandwidth");
    }
    if (f->kind == DLC_FAULT_LINK && f->latency >= 0) {
        lua_pushnumber(L, f->latency);
        lua_setfield(L, -2, "latency");
    }
}

/* ch:due(now) -> {t =, begin =, fault = (1-based), at =, kind =, learner =, duration =, ...} | nil
 * The next event of the timeline at t <= now, each once, in timeline order (chaos.h, the
 * cursor): the real run's supervisor reads the schedule as vtime does. */
static int ch_due(lua_State *L) {
    chaosbox *b = luaL_checkudata(L, 1, DLCL_CHAOS);
    checkchaos(L, 1);
    double now = luaL_checknumber(L, 2);
    if (isnan(now)) return luaL_argerror(L, 2, "now = nan, expected a time in seconds");
    if (!b->cur_started) {
        if (dlc_chaos_cursor_init(&b->cur, b->c) != DLC_OK) return dlcL_error(L);
        b->cur_started = 1;
    }
    dlc_chaos_event ev;
    const dlc_fault *f;
    int got = dlc_chaos_cursor_next(&b->cur, now, &ev, &f);
    if (got < 0) return dlcL_error(L);
    if (got == 0) return lua_pushnil(L), 1;
    push_fault(L, f);
    lua_pushnumber(L, ev.t);
    lua_setfield(L, -2, "t");
    lua_pushboolean(L, ev.begin);
    lua_setfield(L, -2, "begin");
    lua_pushinteger(L, ev.index + 1);
    lua_setfield(L, -2, "fault");
    return 1;
}

/* ch:slow_factor(learner, t): the product of the factors of its slow faults active at t. */
static int ch_slow_factor(lua_State *L) {
    dlc_chaos *c = checkchaos(L, 1);
    int m = learner_arg(L, c, 2);
    double t = luaL_checknumber(L, 3);
    if (!isfinite(t)) return luaL_argerror(L, 3, lua_pushfstring(L, "t = %f, expected a finite time in seconds", t));
    lua_pushnumber(L, dlc_chaos_slow_factor(c, m, t));
    return 1;
}

/* ch:timeline() -> list of {t =, fault = (1-based), begin = boolean} */
static int ch_timeline(lua_State *L) {
    dlc_chaos *c = checkchaos(L, 1);
    int n;
    const dlc_chaos_event *e = dlc_chaos_timeline(c, &n);
    if (!e && dlc_chaos_count(c) > 0) return dlcL_error(L);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_createtable(L, 0, 3);
        lua_pushnumber(L, e[i].t);
        lua_setfield(L, -2, "t");
        lua_pushinteger(L, e[i].index + 1);
        lua_setfield(L, -2, "fault");
        lua_pushboolean(L, e[i].begin);
        lua_setfield(L, -2, "begin");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* ch:down_share(learner, horizon) */
static int ch_down_share(lua_State *L) {
    dlc_chaos *c = checkchaos(L, 1);
    int m = learner_arg(L, c, 2);
    double h = luaL_checknumber(L, 3);
    if (!isfinite(h) || h <= 0)
        return luaL_argerror(L, 3, lua_pushfstring(L, "horizon = %f, expected a finite number of seconds > 0", h));
    lua_pushnumber(L, dlc_chaos_down_share(c, m, h));
    return 1;
}

static int ch_tostring(lua_State *L) {
    chaosbox *b = luaL_checkudata(L, 1, DLCL_CHAOS);
    if (!b->c) return lua_pushliteral(L, "Chaos(closed)"), 1;
    lua_pushfstring(L, "Chaos(%d learners, %d faults)", dlc_chaos_learners(b->c), dlc_chaos_count(b->c));
    return 1;
}

static const luaL_Reg chaos_methods[] = {
    {"add", ch_add},           {"poisson", ch_poisson},       {"count", ch_count}, {"get", ch_get},
    {"timeline", ch_timeline}, {"down_share", ch_down_share}, {"due", ch_due}, {"slow_factor", ch_slow_factor},
    {NULL, NULL},
};
static const luaL_Reg chaos_meta[] = {{"__len", ch_count}, {"__tostring", ch_tostring}, {NULL, NULL}};
static const dlcL_type chaos_type = {DLCL_CHAOS, chaos_release, chaos_methods, chaos_meta, NULL};

void dlcL_open_chaos(lua_State *L, int mod, int st) {
    static const dlcL_type *const types[] = {&chaos_type, NULL};
    static const luaL_Reg funcs[] = {{"Chaos", l_chaos}, {NULL, NULL}};
    dlcL_register(L, mod, st, types, funcs);
}
