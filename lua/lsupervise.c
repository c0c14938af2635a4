/*
 * lsupervise.c - diloco.Supervisor: the supervisor of a run's learner processes
 * (core/supervise.h) from Lua, as `run` drives it (lua/diloco/supervisor.lua carries out
 * its actions on real processes).
 *
 *     local s = diloco.Supervisor { learners = 3, elastic = true, rollbacks = false, restarts = 5,
 *                                   join_timeout = 60 }  -- restart_min, restart_max, slow_period, stop_timeout
 *     s:start(now)                                -- spawn actions for every learner
 *     s:exited(m, now, code, signo)               -- code nil: killed by signal signo
 *     s:kill(m, now, down, rank); s:pause(m, now, duration); s:slow(m, now, factor, begin, duration)
 *     s:joined(m, now); s:lost(m, now); s:stop(now); s:rolled_back(now); s:tick(now)
 *     for a in s:actions() do ... end             -- {kind = "spawn", learner = 2, fresh = true, ...}
 *     s:learner(m)                                -- {state = "down", restart_at = 12.5, crashes = 1, ...}
 *
 * Learners are 1-based here, 0-based in C; this file converts.  An action's fields: kind
 * (spawn, signal, island, fault, rollback, give_up), learner, time; spawn: fresh,
 * rollback; signal: signal ("STOP", "CONT", "TERM", "KILL"), rank; island: island (an
 * account state); fault: fault, begin, final, value, cause; rollback: cause, value (the
 * seconds it waited).
 */
#include <math.h>
#include <string.h>
#include "ldiloco.h"

#define DLCL_SUP "diloco.Supervisor"

void dlcL_open_supervise(lua_State *L, int mod, int st);

typedef struct supbox {
    dlc_sup *s; /* owned; NULL when closed */
    int n;
} supbox;

static supbox *checkbox(lua_State *L, int arg) {
    supbox *b = luaL_checkudata(L, arg, DLCL_SUP);
    if (!b->s) luaL_argerror(L, arg, "Supervisor has been closed");
    return b;
}

static void sup_release(void *p) { dlc_sup_free(((supbox *)p)->s); }

static int learner_arg(lua_State *L, const supbox *b, int arg) {
    int isint;
    lua_Integer m = lua_tointegerx(L, arg, &isint);
    if (!isint || m < 1 || m > b->n)
        luaL_argerror(L, arg, lua_pushfstring(L, "learner = %s, expected an integer in 1..%d",
                                              luaL_tolstring(L, arg, NULL), b->n));
    return (int)m - 1;
}

static double num_field(lua_State *L, int t, const char *name, double dflt) {
    double v = dflt;
    if (lua_getfield(L, t, name) != LUA_TNIL) {
        if (!lua_isnumber(L, -1)) luaL_error(L, "Supervisor: %s = %s, expected a number", name, luaL_tolstring(L, -1, NULL));
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

static int bool_field(lua_State *L, int t, const char *name, int dflt) {
    int v = dflt;
    if (lua_getfield(L, t, name) != LUA_TNIL) v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* diloco.Supervisor{...} */
static int l_supervisor(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    dlc_sup_params p = dlc_sup_default_params();
    lua_getfield(L, 1, "learners");
    int isint;
    lua_Integer n = lua_tointegerx(L, -1, &isint);
    if (!isint || n < 1 || n > DLC_SUP_MAX_LEARNERS)
        return luaL_error(L, "Supervisor: learners = %s, expected an integer in 1..%d", luaL_tolstring(L, -1, NULL),
                          DLC_SUP_MAX_LEARNERS);
    lua_pop(L, 1);
    p.learners = (int)n;
    p.elastic = bool_field(L, 1, "elastic", 1);
    p.rollbacks = bool_field(L, 1, "rollbacks", 0);
    double r = num_field(L, 1, "restarts", p.restarts);
    if (r != floor(r) || r < 0 || r > 1e9) return luaL_error(L, "Supervisor: restarts = %f, expected an integer >= 0", r);
    p.restarts = (int)r;
    p.restart_min_s = num_field(L, 1, "restart_min", p.restart_min_s);
    p.restart_max_s = num_field(L, 1, "restart_max", p.restart_max_s);
    p.slow_period_s = num_field(L, 1, "slow_period", p.slow_period_s);
    p.stop_timeout_s = num_field(L, 1, "stop_timeout", p.stop_timeout_s);
    double jt = num_field(L, 1, "join_timeout", 0);
    p.join_timeout_s = isinf(jt) ? 0 : jt; /* none */
    supbox *b = dlcL_newbox(L, DLCL_SUP, sizeof *b, 0);
    if (!(b->s = dlc_sup_new(&p))) return dlcL_error(L);
    b->n = p.learners;
    return 1;
}

static int ok_or_error(lua_State *L, dlc_status st) { return st == DLC_OK ? 0 : dlcL_error(L); }

static int su_start(lua_State *L) { return ok_or_error(L, dlc_sup_start(checkbox(L, 1)->s, luaL_checknumber(L, 2))); }
static int su_stop(lua_State *L) { return ok_or_error(L, dlc_sup_stop(checkbox(L, 1)->s, luaL_checknumber(L, 2))); }
static int su_tick(lua_State *L) { return ok_or_error(L, dlc_sup_tick(checkbox(L, 1)->s, luaL_checknumber(L, 2))); }
static int su_rolled_back(lua_State *L) {
    return ok_or_error(L, dlc_sup_rolled_back(checkbox(L, 1)->s, luaL_checknumber(L, 2)));
}

/* s:exited(m, now, code, signo): code nil when a signal ended it */
static int su_exited(lua_State *L) {
    supbox *b = checkbox(L, 1);
    int m = learner_arg(L, b, 2);
    double now = luaL_checknumber(L, 3);
    int code = lua_isnoneornil(L, 4) ? -1 : (int)luaL_checkinteger(L, 4);
    int signo = (int)luaL_optinteger(L, 5, 0);
    dlc_sup_learner l;
    if (dlc_sup_get_learner(b->s, m, &l) == DLC_OK && !l.process) /* (the message speaks 1-based) */
        return luaL_error(L, "Supervisor:exited: learner %d has no process", m + 1);
    return ok_or_error(L, dlc_sup_exited(b->s, m, now, code, signo));
}

static int su_joined(lua_State *L) {
    supbox *b = checkbox(L, 1);
    int m = learner_arg(L, b, 2);
    return ok_or_error(L, dlc_sup_joined(b->s, m, luaL_checknumber(L, 3)));
}

static int su_lost(lua_State *L) {
    supbox *b = checkbox(L, 1);
    int m = learner_arg(L, b, 2);
    return ok_or_error(L, dlc_sup_lost(b->s, m, luaL_checknumber(L, 3)));
}

/* s:kill(m, now, down, rank): down nil or math.huge: for good; rank nil: the island */
static int su_kill(lua_State *L) {
    supbox *b = checkbox(L, 1);
    int m = learner_arg(L, b, 2);
    double now = luaL_checknumber(L, 3), down = luaL_optnumber(L, 4, HUGE_VAL);
    int rank = lua_isnoneornil(L, 5) ? -1 : (int)luaL_checkinteger(L, 5);
    return ok_or_error(L, dlc_sup_kill(b->s, m, now, down, rank));
}

static int su_pause(lua_State *L) {
    supbox *b = checkbox(L, 1);
    int m = learner_arg(L, b, 2);
    return ok_or_error(L, dlc_sup_pause(b->s, m, luaL_checknumber(L, 3), luaL_optnumber(L, 4, HUGE_VAL)));
}

/* s:slow(m, now, factor, begin, duration): factor the product of the slows under way */
static int su_slow(lua_State *L) {
    supbox *b = checkbox(L, 1);
    int m = learner_arg(L, b, 2);
    double now = luaL_checknumber(L, 3), factor = luaL_checknumber(L, 4);
    int begin = lua_toboolean(L, 5);
    return ok_or_error(L, dlc_sup_slow(b->s, m, now, factor, begin, luaL_optnumber(L, 6, HUGE_VAL)));
}

static void push_action(lua_State *L, const dlc_sup_action *a) {
    static const char *const kinds[] = {"spawn", "signal", "island", "fault", "rollback", "give_up"};
    lua_createtable(L, 0, 8);
    lua_pushstring(L, kinds[a->kind]);
    lua_setfield(L, -2, "kind");
    if (a->learner >= 0) {
        lua_pushinteger(L, a->learner + 1);
        lua_setfield(L, -2, "learner");
    }
    lua_pushnumber(L, a->time);
    lua_setfield(L, -2, "time");
    switch (a->kind) {
    case DLC_SUP_SPAWN:
        lua_pushboolean(L, a->fresh);
        lua_setfield(L, -2, "fresh");
        lua_pushboolean(L, a->rollback);
        lua_setfield(L, -2, "rollback");
        break;
    case DLC_SUP_SIGNAL:
        lua_pushstring(L, dlc_sup_signal_name(a->signal));
        lua_setfield(L, -2, "signal");
        if (a->rank >= 0) lua_pushinteger(L, a->rank), lua_setfield(L, -2, "rank");
        break;
    case DLC_SUP_ISLAND:
        lua_pushstring(L, dlc_island_state_name(a->island));
        lua_setfield(L, -2, "island");
        break;
    case DLC_SUP_FAULT:
        lua_pushstring(L, dlc_sup_fault_name(a->fault));
        lua_setfield(L, -2, "fault");
        lua_pushboolean(L, a->begin);
        lua_setfield(L, -2, "begin");
        lua_pushboolean(L, a->final);
        lua_setfield(L, -2, "final");
        lua_pushnumber(L, a->value);
        lua_setfield(L, -2, "value");
        if (a->rank >= 0) lua_pushinteger(L, a->rank), lua_setfield(L, -2, "rank");
        break;
    case DLC_SUP_ROLLBACK:
        lua_pushnumber(L, a->value);
        lua_setfield(L, -2, "value");
        break;
    default: break;
    }
    if ((a->kind == DLC_SUP_FAULT || a->kind == DLC_SUP_ROLLBACK) && a->cause != DLC_SUP_CAUSE_NONE) {
        lua_pushstring(L, dlc_sup_cause_name(a->cause));
        lua_setfield(L, -2, "cause");
    }
}

/* s:poll() -> the next action, or nil */
static int su_poll(lua_State *L) {
    dlc_sup_action a;
    if (dlc_sup_poll(checkbox(L, 1)->s, &a) != 1) return lua_pushnil(L), 1;
    push_action(L, &a);
    return 1;
}

static int actions_next(lua_State *L) { return su_poll(L); }

/* for a in s:actions() do ... end: the queued actions, taken as the loop goes (an event
 * the loop body feeds queues more, which the same loop then takes) */
static int su_actions(lua_State *L) {
    checkbox(L, 1);
    lua_pushcfunction(L, actions_next);
    lua_pushvalue(L, 1);
    return 2;
}

static int su_learner(lua_State *L) {
    /* s:learner(m)'s members of dlc_sup_learner, after its state and at the end. */
    typedef dlc_sup_learner SL;
    static const dlcL_field sup_learner_fields[] = {
        DLCL_BOOL(SL, process), DLCL_BOOL(SL, held), DLCL_BOOL(SL, joined), DLCL_BOOL(SL, lost),
        DLCL_INT(SL, crashes), {NULL}};
    static const dlcL_field sup_learner_fields2[] = {
        DLCL_NUM(SL, started_at), DLCL_NUM(SL, slow_factor), {NULL}};
    supbox *b = checkbox(L, 1);
    int m = learner_arg(L, b, 2);
    dlc_sup_learner l;
    if (dlc_sup_get_learner(b->s, m, &l) != DLC_OK) return dlcL_error(L);
    lua_createtable(L, 0, 12);
    lua_pushstring(L, dlc_sup_state_name(l.state));
    lua_setfield(L, -2, "state");
    dlcL_setfields(L, &l, sup_learner_fields);
    if (l.down_cause != DLC_SUP_CAUSE_NONE) {
        lua_pushstring(L, dlc_sup_cause_name(l.down_cause));
        lua_setfield(L, -2, "down_cause");
    }
    if (l.restart_at >= 0) lua_pushnumber(L, l.restart_at), lua_setfield(L, -2, "restart_at");
    if (l.state == DLC_SUP_PAUSED) lua_pushnumber(L, l.resume_at), lua_setfield(L, -2, "resume_at");
    dlcL_setfields(L, &l, sup_learner_fields2);
    return 1;
}

static int su_rolling(lua_State *L) { return lua_pushboolean(L, dlc_sup_rolling(checkbox(L, 1)->s)), 1; }
static int su_stopping(lua_State *L) { return lua_pushboolean(L, dlc_sup_stopping(checkbox(L, 1)->s)), 1; }
static int su_all_ended(lua_State *L) { return lua_pushboolean(L, dlc_sup_all_ended(checkbox(L, 1)->s)), 1; }

static int su_tostring(lua_State *L) {
    supbox *b = luaL_checkudata(L, 1, DLCL_SUP);
    if (!b->s) return lua_pushliteral(L, "Supervisor(closed)"), 1;
    lua_pushfstring(L, "Supervisor(%d learners)", b->n);
    return 1;
}

static const luaL_Reg sup_methods[] = {
    {"start", su_start},   {"exited", su_exited},       {"joined", su_joined},   {"lost", su_lost},
    {"kill", su_kill},     {"pause", su_pause},         {"slow", su_slow},       {"stop", su_stop},
    {"tick", su_tick},     {"rolled_back", su_rolled_back}, {"poll", su_poll}, {"actions", su_actions},
    {"learner", su_learner}, {"rolling", su_rolling},   {"stopping", su_stopping}, {"all_ended", su_all_ended},
    {NULL, NULL},
};
static const luaL_Reg sup_meta[] = {{"__tostring", su_tostring}, {NULL, NULL}};
static const dlcL_type sup_type = {DLCL_SUP, sup_release, sup_methods, sup_meta, NULL};

void dlcL_open_supervise(lua_State *L, int mod, int st) {
    static const dlcL_type *const types[] = {&sup_type, NULL};
    static const luaL_Reg funcs[] = {{"Supervisor", l_supervisor}, {NULL, NULL}};
    dlcL_register(L, mod, st, types, funcs);
}
