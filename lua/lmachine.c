/*
 * lmachine.c - diloco.machine: the learner and syncer state machines of core/
 * (core/include/diloco/learner.h, syncer.h) driven by hand from Lua, without a clock or
 * a network: the caller passes the time, carries each message from one machine to the
 * other, and runs the inner steps.  `sim --replay` (lua/diloco/replay.lua) drives them
 * from a real run's tape; a script can use them to try a schedule event by event.
 *
 *     local s = diloco.machine.Syncer { params = G, plan = plan, learners = 2,
 *                                       learner = lopts, syncer = sopts }
 *     -- manual = true: rounds close only by s:flush() (dlc_syncer_set_manual)
 *     local l = diloco.machine.Learner { params = P, plan = plan, id = 1, learner = lopts,
 *                                        syncer = sopts }
 *     for _, a in ipairs(s:join(1, 0)) do l:receive(a.msg, 0) end   -- the whole model
 *     ... an inner step on P ...
 *     for _, a in ipairs(l:step_done(tokens, 0.1, t)) do
 *       if a.type == "send" then s:receive(a.msg, t) end            -- a contribution
 *     end
 *
 * Every event call returns the list of the actions it queued (the machine is polled
 * empty), each a table: {type = "send", msg = Message}, {type = "applied", fragment,
 * version, lag, resync}, {type = "gradient_ready", version}, {type = "phase", fragment,
 * lag, schedule}, {type = "merged", merge =
 * (sim's merge record)}, {type = "rejected", learner, fragment, reason}, {type =
 * "joined" | "lost", learner}.  A Message (diloco.machine.Message) owns a copy of its
 * payload; msg:fields() gives its header as a table and msg:set{steps =, held =} changes
 * those two.  A message the machine refuses (DLC_ERR_FORMAT: the machine is unchanged)
 * returns nil, the message, the code; misuse raises.  Learners and fragments are 1-based.
 */
#include <math.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include "diloco/learner.h"
#include "diloco/run.h"
#include "diloco/syncer.h"
#include "ldiloco.h"

#define DLCL_MLEARNER "diloco.machine.Learner"
#define DLCL_MSYNCER "diloco.machine.Syncer"
#define DLCL_MESSAGE "diloco.machine.Message"

typedef struct mlearner {
    dlc_learner *l;
} mlearner;

typedef struct msyncer {
    dlc_syncer *s;
    dlc_params *params; /* the layout of global() (kept alive by the user value) */
    int M;
} msyncer;

typedef struct mmsg {
    uint8_t *payload; /* owned; first field: NULL once closed */
    dlc_msg m;        /* m.payload == payload */
} mmsg;

static void mmsg_release(void *box) { free(((mmsg *)box)->payload); }

static const dlc_msg *checkmsg(lua_State *L, int arg) {
    mmsg *b = luaL_checkudata(L, arg, DLCL_MESSAGE);
    if (!b->payload && b->m.len > 0) luaL_argerror(L, arg, "Message has been closed");
    return &b->m;
}

/* Pushes a Message holding a copy of m and its payload. */
static void push_msg(lua_State *L, const dlc_msg *m) {
    mmsg *b = dlcL_newbox(L, DLCL_MESSAGE, sizeof *b, 0);
    b->m = *m;
    b->m.payload = NULL;
    if (m->len > 0) {
        if (!(b->payload = malloc(m->len))) luaL_error(L, "out of memory for a %zu-byte message", m->len);
        memcpy(b->payload, m->payload, m->len);
        b->m.payload = b->payload;
    }
}

static int msg_fields(lua_State *L) {
    const dlc_msg *m = checkmsg(L, 1);
    lua_createtable(L, 0, 12);
    lua_pushstring(L, dlc_msg_type_name(m->type));
    lua_setfield(L, -2, "type");
    dlcL_setint(L, "learner", m->learner + 1);
    dlcL_setint(L, "fragment", m->fragment + 1);
    dlcL_setint(L, "version", m->version);
    dlcL_setint(L, "steps", m->steps);
    dlcL_setint(L, "tokens", m->tokens);
    dlcL_setnum(L, "held", m->held);
    dlcL_setnum(L, "age", m->age);
    lua_pushboolean(L, (m->flags & DLC_MSG_RESYNC) != 0);
    lua_setfield(L, -2, "resync");
    lua_pushstring(L, dlc_codec_name(m->codec) ? dlc_codec_name(m->codec) : "?");
    lua_setfield(L, -2, "codec");
    dlcL_setint(L, "len", (int64_t)m->len);
    dlcL_setint(L, "epoch", m->epoch);
    dlcL_setint(L, "incarnation", m->incarnation);
    return 1;
}

/* msg:set{steps = N, held = S, resync = B, learner = M}: the header fields a driver may
 * rewrite (a resync's phase, the round age a joining learner takes its phase from, the
 * resync flag, the destination) to hand one merged fragment to several learners. */
static int msg_set(lua_State *L) {
    checkmsg(L, 1);
    mmsg *b = lua_touserdata(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const known[] = {"steps", "held", "resync", "learner", NULL};
    dlcL_check_keys(L, 2, "Message:set", known, "field");
    if (lua_getfield(L, 2, "steps") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
            return luaL_error(L, "Message:set: steps must be an integer >= 0");
        b->m.steps = lua_tointeger(L, -1);
    }
    if (lua_getfield(L, 2, "held") != LUA_TNIL) {
        double h = luaL_checknumber(L, -1);
        if (!isfinite(h)) return luaL_error(L, "Message:set: held must be finite (-1: none)");
        b->m.held = h;
    }
    if (lua_getfield(L, 2, "resync") != LUA_TNIL) {
        if (lua_toboolean(L, -1)) b->m.flags |= DLC_MSG_RESYNC;
        else b->m.flags &= ~DLC_MSG_RESYNC;
    }
    if (lua_getfield(L, 2, "learner") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > DLC_SYNCER_LEARNERS_MAX)
            return luaL_error(L, "Message:set: learner must be an integer in 1..%d", DLC_SYNCER_LEARNERS_MAX);
        b->m.learner = (int)lua_tointeger(L, -1) - 1;
    }
    lua_settop(L, 1);
    return 1;
}

static const luaL_Reg msg_methods[] = {{"fields", msg_fields}, {"set", msg_set}, {NULL, NULL}};
static const dlcL_type msg_type = {DLCL_MESSAGE, mmsg_release, msg_methods, NULL, NULL};

/* ---- shared ---- */

static double checktime(lua_State *L, int arg) {
    double t = luaL_optnumber(L, arg, 0);
    luaL_argcheck(L, isfinite(t) && t >= 0, arg, "time must be finite and >= 0");
    return t;
}

/* The result of an event call that queued actions now in the list at `list`: the list,
 * or nil, message, code for a refused message (the machine is unchanged); raises else. */
static int event_result(lua_State *L, dlc_status st, int list) {
    if (st == DLC_OK) {
        lua_pushvalue(L, list);
        return 1;
    }
    if (st == DLC_ERR_FORMAT || st == DLC_ERR_STATE) return dlcL_fail(L, st);
    return dlcL_error(L);
}

/* ---- diloco.machine.Learner ---- */

static dlc_learner *checklearner(lua_State *L, int arg) {
    mlearner *b = luaL_checkudata(L, arg, DLCL_MLEARNER);
    if (!b->l) luaL_argerror(L, arg, "Learner has been closed");
    return b->l;
}

static void mlearner_release(void *box) { dlc_learner_free(((mlearner *)box)->l); }

/* Polls every action of l into a new list on the stack; returns its index. */
static int learner_actions(lua_State *L, dlc_learner *l) {
    lua_newtable(L);
    int list = lua_gettop(L), n = 0;
    dlc_learner_action a;
    while (dlc_learner_poll(l, &a)) {
        lua_createtable(L, 0, 6);
        switch (a.type) {
        case DLC_LACT_SEND:
            lua_pushliteral(L, "send");
            lua_setfield(L, -2, "type");
            push_msg(L, &a.msg);
            lua_setfield(L, -2, "msg");
            break;
        case DLC_LACT_APPLIED:
            lua_pushliteral(L, "applied");
            lua_setfield(L, -2, "type");
            dlcL_setint(L, "fragment", a.fragment + 1);
            dlcL_setint(L, "version", a.version);
            dlcL_setint(L, "lag", a.lag);
            lua_pushboolean(L, a.resync);
            lua_setfield(L, -2, "resync");
            break;
        case DLC_LACT_GRADIENT_READY:
            lua_pushliteral(L, "gradient_ready");
            lua_setfield(L, -2, "type");
            dlcL_setint(L, "version", a.version);
            break;
        case DLC_LACT_PHASE:
            lua_pushliteral(L, "phase");
            lua_setfield(L, -2, "type");
            if (a.fragment >= 0) dlcL_setint(L, "fragment", a.fragment + 1);
            dlcL_setint(L, "lag", a.lag);
            dlcL_setint(L, "schedule", a.schedule);
            break;
        default:
            lua_pushliteral(L, "other");
            lua_setfield(L, -2, "type");
            break;
        }
        lua_rawseti(L, list, ++n);
    }
    return list;
}

static int m_learner(lua_State *L) {
    static const char *const WHO = "diloco.machine.Learner";
    dlcL_learner_opts o;
    mlearner *b = dlcL_learner_box(L, WHO, DLCL_MLEARNER, sizeof *b, &o);
    lua_Integer id = (lua_getfield(L, 1, "id"), lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0);
    if (id < 1 || id > DLC_SYNCER_LEARNERS_MAX)
        return luaL_error(L, "%s: id must be an integer in 1..%d", WHO, DLC_SYNCER_LEARNERS_MAX);
    dlc_learner_params lp;
    if (dlc_run_learner_params(&o.run, (int)id - 1, &lp) != DLC_OK) return dlcL_error(L);
    lp.heartbeat = 0; /* no timers: a hand-driven machine sends what its events make */
    if (lua_getfield(L, 1, "incarnation") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
            return luaL_error(L, "%s: incarnation must be an integer >= 1", WHO);
        lp.incarnation = lua_tointeger(L, -1);
    }
    b->l = dlc_learner_new(&lp, o.params, o.plan);
    if (!b->l) return dlcL_error(L);
    lua_settop(L, 2);
    return 1;
}

static int ml_step_begin(lua_State *L) {
    dlc_learner *l = checklearner(L, 1);
    dlc_status st = dlc_learner_step_begin(l, checktime(L, 2));
    return event_result(L, st, learner_actions(L, l));
}

static int ml_step_done(lua_State *L) {
    dlc_learner *l = checklearner(L, 1);
    lua_Integer tokens = luaL_checkinteger(L, 2);
    double seconds = luaL_optnumber(L, 3, 0);
    dlc_status st = dlc_learner_step_done(l, tokens, seconds, checktime(L, 4));
    return event_result(L, st, learner_actions(L, l));
}

static int ml_contribute(lua_State *L) {
    dlc_learner *l = checklearner(L, 1);
    lua_Integer p = luaL_checkinteger(L, 2);
    luaL_argcheck(L, p >= 1 && p <= INT32_MAX, 2, "fragment out of range");
    dlc_status st = dlc_learner_contribute(l, (int)p - 1, checktime(L, 3));
    return event_result(L, st, learner_actions(L, l));
}

static int ml_gradient(lua_State *L) {
    dlc_learner *l = checklearner(L, 1);
    dlc_status st = dlc_learner_gradient(l, luaL_checkinteger(L, 2), checktime(L, 3));
    return event_result(L, st, learner_actions(L, l));
}

static int ml_receive(lua_State *L) {
    dlc_learner *l = checklearner(L, 1);
    const dlc_msg *m = checkmsg(L, 2);
    dlc_status st = dlc_learner_receive(l, m, checktime(L, 3));
    return event_result(L, st, learner_actions(L, l));
}

static int ml_set_schedule_step(lua_State *L) {
    dlc_learner *l = checklearner(L, 1);
    /* a catch-up's move (true) sends what the steps it skips were due to send */
    dlc_status st = lua_toboolean(L, 3) ? dlc_learner_skip_to(l, luaL_checkinteger(L, 2))
                                        : dlc_learner_set_schedule_step(l, luaL_checkinteger(L, 2));
    if (st != DLC_OK) return dlcL_error(L);
    return 0;
}

/* l:set_send_room(n): contributions the next step_done may send (-1: any; learner.h) */
static int ml_set_send_room(lua_State *L) {
    dlc_learner_set_send_room(checklearner(L, 1), (int)luaL_checkinteger(L, 2));
    return 0;
}

static int ml_state(lua_State *L) {
    lua_pushstring(L, dlc_learner_state_name(dlc_learner_state_of(checklearner(L, 1))));
    return 1;
}

static int ml_steps(lua_State *L) {
    lua_pushinteger(L, dlc_learner_steps(checklearner(L, 1)));
    return 1;
}

static int ml_schedule_step(lua_State *L) {
    lua_pushinteger(L, dlc_learner_schedule_step(checklearner(L, 1)));
    return 1;
}

static const luaL_Reg learner_methods[] = {
    {"step_begin", ml_step_begin}, {"step_done", ml_step_done}, {"contribute", ml_contribute},
    {"gradient", ml_gradient},     {"receive", ml_receive},     {"state", ml_state},
    {"steps", ml_steps},           {"schedule_step", ml_schedule_step},
    {"set_schedule_step", ml_set_schedule_step}, {"set_send_room", ml_set_send_room}, {NULL, NULL}};
static const dlcL_type learner_type = {DLCL_MLEARNER, mlearner_release, learner_methods, NULL, NULL};

/* ---- diloco.machine.Syncer ---- */

static msyncer *checksyncer(lua_State *L, int arg) {
    msyncer *b = luaL_checkudata(L, arg, DLCL_MSYNCER);
    if (!b->s) luaL_argerror(L, arg, "Syncer has been closed");
    return b;
}

static void msyncer_release(void *box) { dlc_syncer_free(((msyncer *)box)->s); }

static int syncer_actions(lua_State *L, dlc_syncer *s) {
    lua_newtable(L);
    int list = lua_gettop(L), n = 0;
    dlc_syncer_action a;
    while (dlc_syncer_poll(s, &a)) {
        lua_createtable(L, 0, 4);
        const char *type = "other";
        switch (a.type) {
        case DLC_SACT_SEND:
            type = "send";
            push_msg(L, &a.msg);
            lua_setfield(L, -2, "msg");
            dlcL_setint(L, "learner", a.msg.learner + 1);
            break;
        case DLC_SACT_MERGED:
            type = "merged";
            dlcL_push_merge(L, &a.merge);
            lua_setfield(L, -2, "merge");
            break;
        case DLC_SACT_REJECTED:
            type = "rejected";
            dlcL_set_rejection(L, a.learner, a.fragment, a.reason);
            break;
        case DLC_SACT_JOINED:
        case DLC_SACT_LOST:
            type = a.type == DLC_SACT_JOINED ? "joined" : "lost";
            dlcL_setint(L, "learner", a.learner + 1);
            break;
        default: break;
        }
        lua_pushstring(L, type);
        lua_setfield(L, -2, "type");
        lua_rawseti(L, list, ++n);
    }
    return list;
}

static int m_syncer(lua_State *L) {
    static const char *const WHO = "diloco.machine.Syncer";
    dlcL_syncer_opts o;
    msyncer *b = dlcL_syncer_box(L, WHO, DLCL_MSYNCER, sizeof *b, &o);
    dlcL_check_plan_model(L, WHO, o.params, o.plan);
    dlc_syncer_params sp;
    if (dlc_run_syncer_params(&o.run, o.M, &sp) != DLC_OK) return dlcL_error(L);
    sp.embedding = o.embedding;
    sp.timeout = 0; /* no timers: the caller says who is lost */
    b->s = dlc_syncer_new(&sp, o.plan, dlc_params_data(o.params));
    if (!b->s) return dlcL_error(L);
    if (lua_getfield(L, 1, "manual") != LUA_TNIL) dlc_syncer_set_manual(b->s, lua_toboolean(L, -1));
    lua_pop(L, 1);
    b->params = o.params;
    b->M = o.M;
    lua_settop(L, 2);
    return 1;
}

static int ms_join(lua_State *L) {
    msyncer *b = checksyncer(L, 1);
    int m = dlcL_checklearner(L, 2, b->M);
    dlc_status st = dlc_syncer_join(b->s, m, checktime(L, 3));
    return event_result(L, st, syncer_actions(L, b->s));
}

static int ms_lost(lua_State *L) {
    msyncer *b = checksyncer(L, 1);
    int m = dlcL_checklearner(L, 2, b->M);
    dlc_status st = dlc_syncer_lost(b->s, m, checktime(L, 3));
    return event_result(L, st, syncer_actions(L, b->s));
}

static int ms_receive(lua_State *L) {
    msyncer *b = checksyncer(L, 1);
    const dlc_msg *m = checkmsg(L, 2);
    dlc_status st = dlc_syncer_receive(b->s, m, checktime(L, 3));
    return event_result(L, st, syncer_actions(L, b->s));
}

static int ms_flush(lua_State *L) {
    msyncer *b = checksyncer(L, 1);
    dlc_status st = dlc_syncer_flush(b->s, checktime(L, 2));
    return event_result(L, st, syncer_actions(L, b->s));
}

static int ms_global(lua_State *L) {
    msyncer *b = checksyncer(L, 1);
    if (dlc_syncer_copy_model(b->s, dlcL_checkmodel(L, 2, b->params)) != DLC_OK) return dlcL_error(L);
    lua_settop(L, 2);
    return 1;
}

static int ms_version(lua_State *L) {
    msyncer *b = checksyncer(L, 1);
    lua_Integer p = luaL_checkinteger(L, 2);
    luaL_argcheck(L, p >= 1 && p <= dlc_syncer_fragments(b->s), 2, "fragment out of range");
    lua_pushinteger(L, dlc_syncer_version(b->s, (int)p - 1));
    return 1;
}

static const luaL_Reg syncer_methods[] = {{"join", ms_join},       {"lost", ms_lost},     {"receive", ms_receive},
                                          {"flush", ms_flush},     {"global", ms_global}, {"version", ms_version},
                                          {NULL, NULL}};
static const dlcL_type syncer_type = {DLCL_MSYNCER, msyncer_release, syncer_methods, NULL, NULL};

/* diloco.machine.diff(P, Q) -> nil when the two Params hold the same floats bit for bit,
 * else {count = elements that differ, first = its 1-based index, a, b = the values there,
 * max_abs = the largest |a - b|}. */
static int m_diff(lua_State *L) {
    dlc_params *p = dlcL_checkparams(L, 1), *q = dlcL_checkparams(L, 2);
    int64_t n = dlc_params_numel(p);
    if (dlc_params_numel(q) != n)
        return luaL_error(L, "machine.diff: %lld floats against %lld: expected Params of one model", (long long)n,
                          (long long)dlc_params_numel(q));
    const float *a = dlc_params_data(p), *b = dlc_params_data(q);
    if (memcmp(a, b, (size_t)n * sizeof(float)) == 0) {
        lua_pushnil(L);
        return 1;
    }
    int64_t count = 0, first = -1;
    double mx = 0;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)) == 0) continue;
        if (first < 0) first = i;
        count++;
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > mx || d != d) mx = d;
    }
    lua_createtable(L, 0, 5);
    dlcL_setint(L, "count", count);
    dlcL_setint(L, "first", first + 1);
    dlcL_setnum(L, "a", a[first]);
    dlcL_setnum(L, "b", b[first]);
    dlcL_setnum(L, "max_abs", mx);
    return 1;
}

/* machine.preset(name) -> {["sync.H"] = 24, ...}: a preset's value of every run field
 * (run.h, dlc_run_preset_params; the layout's hashes left out), enums by name, a quorum
 * of every learner as "all".  The one definition of the presets, which recipe.lua reads. */
static int m_preset(lua_State *L) {
    dlc_run_preset p;
    if (dlc_run_preset_parse(luaL_checkstring(L, 1), &p) != DLC_OK) return dlcL_error(L);
    dlc_run_params r;
    if (dlc_run_preset_params(p, &r) != DLC_OK) return dlcL_error(L);
    lua_createtable(L, 0, dlc_run_field_count());
    for (int i = 0; i < dlc_run_field_count(); i++) {
        const dlc_run_field *f = dlc_run_field_at(i);
        const char *at = (const char *)&r + f->offset;
        int v;
        double d;
        switch (f->type) {
        case DLC_RUN_INT:
            memcpy(&v, at, sizeof v);
            if (f->offset == offsetof(dlc_run_params, quorum) && v == DLC_QUORUM_ALL) lua_pushliteral(L, "all");
            else lua_pushinteger(L, v);
            break;
        case DLC_RUN_FLAG: memcpy(&v, at, sizeof v), lua_pushboolean(L, v); break;
        case DLC_RUN_NUMBER: memcpy(&d, at, sizeof d), lua_pushnumber(L, d); break;
        case DLC_RUN_ENUM: memcpy(&v, at, sizeof v), lua_pushstring(L, f->enum_name(v)); break;
        default: continue; /* the layout's hashes: not a preset's */
        }
        lua_setfield(L, -2, f->name);
    }
    return 1;
}

/* machine.fields() -> { {name = "sync.H", type = "integer", min = 0, max = 1e9, min_open =
 * false, max_open = false, expect = "an integer in [0, 1000000000]", doc = "..."}, ... }:
 * every run field (run.h, the table of core/run.c) in the struct's order, with its bounds
 * (absent for a field whose rule is not a range) and what it means.  The one definition
 * of the run fields' bounds and docs, which recipe.lua reads. */
static int m_fields(lua_State *L) {
    typedef dlc_run_field F;
    static const dlcL_field bound_fields[] = {
        DLCL_NUM(F, min), DLCL_NUM(F, max), DLCL_BOOL(F, min_open), DLCL_BOOL(F, max_open), {NULL}};
    static const char *const types[DLC_RUN_FIELD_TYPE_COUNT] = {"integer", "flag", "hash", "number", "enum"};
    lua_createtable(L, dlc_run_field_count(), 0);
    for (int i = 0; i < dlc_run_field_count(); i++) {
        const dlc_run_field *f = dlc_run_field_at(i);
        lua_createtable(L, 0, 8);
        lua_pushstring(L, f->name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, types[f->type]);
        lua_setfield(L, -2, "type");
        lua_pushstring(L, f->doc ? f->doc : "");
        lua_setfield(L, -2, "doc");
        if (!isnan(f->min)) {
            char want[96];
            dlc_run_field_expect(f, want, sizeof want);
            dlcL_setfields(L, f, bound_fields);
            lua_pushstring(L, want);
            lua_setfield(L, -2, "expect");
        }
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

void dlcL_open_machine(lua_State *L, int mod, int st) {
    mod = lua_absindex(L, mod);
    st = lua_absindex(L, st);
    static const dlcL_type *const types[] = {&msg_type, &learner_type, &syncer_type, NULL};
    static const luaL_Reg funcs[] = {
        {"Learner", m_learner}, {"Syncer", m_syncer}, {"diff", m_diff},
        {"preset", m_preset},   {"fields", m_fields}, {NULL, NULL}};
    lua_newtable(L); /* diloco.machine */
    dlcL_register(L, -1, st, types, funcs);
    lua_setfield(L, mod, "machine");
}
