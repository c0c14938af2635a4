/*
 * lvtime.c - diloco.VTime: the virtual-time driver (core/vtime.h) for `diloco-lua sim`
 * (lua/diloco/sim.lua) and for scripts.
 *
 *     local vt = diloco.VTime {
 *       params = { p1, p2, p3, p4 },        -- one Params per learner (same model layout)
 *       plan = plan,                        -- diloco.Plan over that layout
 *       step_time = 1.0, horizon = 3000, eval_every = 250,
 *       islands = { {speed = 1, scale = 1, tokens = 1024, latency = 0.02, bandwidth = 3.1e8,
 *                    jitter = 0}, ... },             -- jitter: each step's time, log-normal
 *       seed = 0,                           -- of the steps' jitter
 *       cores = 0,                          -- > 0: the islands share that many cores
 *       steps = 0,                          -- > 0: each learner stops when its schedule step
 *                                           --   reaches it; the run ends when every live one has
 *       learner = { H = 24, tau = 2, alpha = 0, blocking = false, dp = false, codec = "int4",
 *                   block = 128, error_feedback = false, heartbeat = 1, ema = 0.5 },
 *       syncer = { quorum = 1 (0 = all live), grace = "adaptive" | "off" | seconds,
 *                  grace_gamma = 0.8, ema = 0.5, weighting = "tokens2_steps", merge = "rda",
 *                  outer = { lr = 0.7, momentum = 0.9, nesterov = true }, ring = 4,
 *                  codec_down = "f32", embedding = { true, false, ... } (per tensor),
 *                  timeout = 10 },
 *       chaos = ch,                         -- optional diloco.Chaos
 *     }
 *   (learner.preset = "decoupled" names the run's sync.preset; default dp when learner.dp)
 *     while true do
 *       local ev = vt:next()                -- {type = "step", learner = 2, time =, step =}, ...
 *       if ev.type == "done" then break end
 *       ...
 *     end
 *
 * The learner and syncer tables are read into one run description (core/run.h), from
 * which both state machines' params derive, so they cannot disagree (one ema: syncer.ema
 * must equal learner.ema if both are given).  Or run_json = '{"sync": {...}, "outer":
 * {...}}' gives it as text under the recipe's names (read_run below; what lua/diloco/
 * islands.lua passes).  Learners and fragments are 1-based in Lua.  The VTime keeps
 * references to its Params, Plan and Chaos (a user value), so they live as long as it
 * does; closing one of them while the VTime runs is misuse the C side cannot see: don't.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ldiloco.h"

#define DLCL_VTIME "diloco.VTime"

typedef struct vtbox {
    dlc_vtime *vt; /* owned; NULL when closed.  The models array it borrows is a userdata
                    * in the box's reference table, so it lives as long as the box. */
} vtbox;

static dlc_vtime *checkvt(lua_State *L, int arg) {
    vtbox *b = luaL_checkudata(L, arg, DLCL_VTIME);
    if (!b->vt) luaL_argerror(L, arg, "VTime has been closed");
    return b->vt;
}

/* ---- options ---- */

static double optnum(lua_State *L, int t, const char *who, const char *k, double def) {
    if (!dlcL_optfield(L, t, "VTime: ", who, ".", k, LUA_TNUMBER)) return def;
    double v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static int optint(lua_State *L, int t, const char *who, const char *k, int def) {
    double v = optnum(L, t, who, k, def);
    if (v != floor(v) || v < -2147483647.0 || v > 2147483647.0)
        luaL_error(L, "VTime: %s.%s = %f: expected an integer", who, k, (lua_Number)v);
    return (int)v;
}

static int optbool(lua_State *L, int t, const char *who, const char *k, int def) {
    if (!dlcL_optfield(L, t, "VTime: ", who, ".", k, LUA_TBOOLEAN)) return def;
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

static const char *optstr(lua_State *L, int t, const char *who, const char *k, const char *def) {
    if (!dlcL_optfield(L, t, "VTime: ", who, ".", k, LUA_TSTRING)) return def;
    const char *v = lua_tostring(L, -1);
    lua_pop(L, 1); /* the string stays alive: it is a field of the options table */
    return v;
}

/* Pushes the sub-table t[k] (an empty one when absent) and returns its index. */
static int subtable(lua_State *L, int t, const char *k) {
    int ty = lua_getfield(L, t, k);
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        lua_newtable(L);
    } else if (ty != LUA_TTABLE) {
        luaL_error(L, "VTime: %s must be a table, got a %s", k, luaL_typename(L, -1));
    }
    return lua_gettop(L);
}

static void check_status(lua_State *L, dlc_status s) {
    if (s != DLC_OK) dlcL_error(L);
}

/* The run description (core/run.h) from the options.  Either run_json, the constructor's
 * option (the options table at index 1): the run as text, {"sync": {...}, "outer": {...}}
 * with the recipe's own names ("sync.codec", "outer.lr"), read by dlc_run_parse as the
 * embedding API reads its hosts' (client.h), every field it leaves out at its preset's
 * value; the learner and syncer tables then hold only what each process chooses alone
 * (a run field in them is refused).  Or, the older way, the learner table at lt and the
 * syncer table at st (0: none, its fields at their defaults) name its fields (one ema:
 * syncer.ema, if given, must be learner.ema); learner.preset names the preset (default:
 * dp for a data-parallel run, else decoupled).  The plan gives P, its kind and the hashes.
 * What each process chooses alone comes back in *x: the heartbeat, the timeout and the
 * embedding flags (a userdata pushed on the stack, alive until the calling C function
 * returns; NULL for none). */
typedef struct run_extras {
    double heartbeat, timeout;
    const uint8_t *embedding;
} run_extras;

/* syncer.embedding: one flag per tensor (merged by weighted mean under rda), into x. */
static void read_embedding(lua_State *L, int st, const dlc_plan *plan, run_extras *x) {
    int ty = lua_getfield(L, st, "embedding");
    if (ty == LUA_TTABLE) {
        int ntensors = dlc_plan_tensors(plan);
        uint8_t *emb = lua_newuserdatauv(L, (size_t)ntensors + 1, 0); /* lives until the caller returns */
        lua_insert(L, -2);
        for (int i = 0; i < ntensors; i++) {
            lua_rawgeti(L, -1, i + 1);
            emb[i] = (uint8_t)lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
        x->embedding = emb;
    } else if (ty != LUA_TNIL) {
        luaL_error(L, "VTime: syncer.embedding must be a list of booleans (one per tensor)");
    }
    lua_pop(L, 1);
}

/* The options the older way reads as run fields: refused beside run_json, naming the
 * field that says them now. */
static const char *const learner_run_keys[][2] = {
    {"dp", "sync.preset"},
    {"preset", "sync.preset"},
    {"H", "sync.H"},
    {"tau", "sync.tau"},
    {"alpha", "sync.alpha"},
    {"blocking", "sync.blocking"},
    {"codec", "sync.codec"},
    {"block", "sync.block"},
    {"error_feedback", "sync.error_feedback"},
    {"ema", "sync.ema"}};
static const char *const syncer_run_keys[][2] = {
    {"ema", "sync.ema"},
    {"quorum", "sync.quorum"},
    {"grace", "sync.grace"},
    {"grace_gamma", "sync.grace_gamma"},
    {"weighting", "sync.weighting"},
    {"merge", "sync.merge"},
    {"codec_down", "sync.codec_down"},
    {"ring", "sync.ring"},
    {"outer", "outer.lr, outer.momentum, outer.nesterov"}};

static void refuse_run_keys(lua_State *L, int t, const char *who, const char *const (*keys)[2], int n) {
    for (int i = 0; t && i < n; i++) {
        int ty = lua_getfield(L, t, keys[i][0]);
        lua_pop(L, 1);
        if (ty != LUA_TNIL)
            luaL_error(L, "%s.%s: with run_json the run's fields come from it (%s there)", who, keys[i][0], keys[i][1]);
    }
}

/* What the plan says of the run: P, its kind, the hashes. */
static void run_layout(dlc_run_params *r, const dlc_plan *plan) {
    r->fragments = dlc_plan_count(plan);
    r->plan = dlc_plan_get_params(plan).kind;
    r->plan_hash = dlc_plan_hash(plan);
    r->model_hash = dlc_plan_model_hash(plan);
}

static void read_run(lua_State *L, int lt, int st, const dlc_plan *plan, dlc_run_params *r, run_extras *x) {
    *r = dlc_run_default_params();
    int has_json = lua_type(L, 1) == LUA_TTABLE && lua_getfield(L, 1, "run_json") != LUA_TNIL;
    if (has_json) {
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "run_json must be a string (the run as JSON, client.h's run)");
        check_status(L, dlc_run_parse(lua_tostring(L, -1), r));
        lua_pop(L, 1);
        refuse_run_keys(L, lt, "learner", learner_run_keys, (int)(sizeof learner_run_keys / sizeof *learner_run_keys));
        refuse_run_keys(L, st, "syncer", syncer_run_keys, (int)(sizeof syncer_run_keys / sizeof *syncer_run_keys));
        run_layout(r, plan);
        check_status(L, dlc_run_params_check(r)); /* the plan's P with the preset: dp takes 1 */
        x->heartbeat = optnum(L, lt, "learner", "heartbeat", dlc_learner_default_params().heartbeat);
        x->timeout = st ? optnum(L, st, "syncer", "timeout", 0) : 0;
        x->embedding = NULL;
        if (st) read_embedding(L, st, plan, x);
        return;
    }
    if (lua_type(L, 1) == LUA_TTABLE) lua_pop(L, 1); /* the nil run_json */
    r->dp = optbool(L, lt, "learner", "dp", 0);
    check_status(L, dlc_run_preset_parse(optstr(L, lt, "learner", "preset", r->dp ? "dp" : "decoupled"), &r->preset));
    run_layout(r, plan);
    r->H = optint(L, lt, "learner", "H", r->H);
    r->tau = optint(L, lt, "learner", "tau", r->tau);
    r->alpha = optnum(L, lt, "learner", "alpha", r->alpha);
    r->blocking = optbool(L, lt, "learner", "blocking", 0);
    check_status(L, dlc_codec_from_name(optstr(L, lt, "learner", "codec", "f32"), &r->codec_up));
    r->block = optint(L, lt, "learner", "block", r->block);
    r->error_feedback = optbool(L, lt, "learner", "error_feedback", 0);
    x->heartbeat = optnum(L, lt, "learner", "heartbeat", dlc_learner_default_params().heartbeat);
    r->ema = optnum(L, lt, "learner", "ema", r->ema);
    x->timeout = 0;
    x->embedding = NULL;
    if (!st) return;

    double sema = optnum(L, st, "syncer", "ema", r->ema);
    if (sema != r->ema)
        luaL_error(L, "VTime: syncer.ema = %f but learner.ema = %f: a run has one ema (sync.ema)", sema, r->ema);
    r->quorum = optint(L, st, "syncer", "quorum", r->quorum);
    int ty = lua_getfield(L, st, "grace");
    if (ty == LUA_TNUMBER) {
        r->grace = DLC_GRACE_FIXED;
        r->grace_s = lua_tonumber(L, -1);
    } else if (ty == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "off")) {
        r->grace = DLC_GRACE_OFF;
    } else if (ty == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "adaptive")) {
        r->grace = DLC_GRACE_ADAPTIVE;
    } else if (ty != LUA_TNIL) {
        luaL_error(L, "VTime: syncer.grace = %s: expected \"adaptive\", \"off\" or seconds", luaL_tolstring(L, -1, NULL));
    }
    lua_pop(L, 1);
    r->grace_gamma = optnum(L, st, "syncer", "grace_gamma", r->grace_gamma);
    check_status(L, dlc_weighting_parse(optstr(L, st, "syncer", "weighting", "tokens2_steps"), &r->weighting));
    check_status(L, dlc_merge_mode_parse(optstr(L, st, "syncer", "merge", "rda"), &r->merge));
    check_status(L, dlc_codec_from_name(optstr(L, st, "syncer", "codec_down", "f32"), &r->codec_down));
    x->timeout = optnum(L, st, "syncer", "timeout", 0);
    r->ring = optint(L, st, "syncer", "ring", r->ring);
    int o = subtable(L, st, "outer");
    r->outer_lr = optnum(L, o, "syncer.outer", "lr", r->outer_lr);
    r->outer_momentum = optnum(L, o, "syncer.outer", "momentum", r->outer_momentum);
    r->outer_nesterov = optbool(L, o, "syncer.outer", "nesterov", r->outer_nesterov);
    lua_pop(L, 1);
    read_embedding(L, st, plan, x);
}

int dlcL_subtable(lua_State *L, int t, const char *who, const char *k) {
    int ty = lua_getfield(L, t, k);
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        lua_newtable(L);
    } else if (ty != LUA_TTABLE) {
        luaL_error(L, "%s: %s must be a table, got a %s", who, k, luaL_typename(L, -1));
    }
    return lua_gettop(L);
}

void dlcL_params_and_plan(lua_State *L, dlc_params **params, dlc_plan **plan) {
    lua_createtable(L, 2, 0); /* 3 */
    lua_pushvalue(L, 3);
    lua_setiuservalue(L, 2, 1);
    lua_getfield(L, 1, "params");
    *params = dlcL_checkparams(L, -1);
    lua_rawseti(L, 3, 1);
    lua_getfield(L, 1, "plan");
    *plan = dlcL_checkplan(L, -1);
    lua_rawseti(L, 3, 2);
}

void *dlcL_syncer_box(lua_State *L, const char *who, const char *tname, size_t size, dlcL_syncer_opts *o) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    void *box = dlcL_newbox(L, tname, size, 1); /* 2 */
    dlcL_params_and_plan(L, &o->params, &o->plan);
    lua_Integer M = (lua_getfield(L, 1, "learners"), lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0);
    lua_pop(L, 1);
    if (M < 1 || M > DLC_SYNCER_LEARNERS_MAX)
        luaL_error(L, "%s: learners must be an integer in 1..%d", who, DLC_SYNCER_LEARNERS_MAX);
    o->M = (int)M;
    o->li = dlcL_subtable(L, 1, who, "learner");
    o->si = dlcL_subtable(L, 1, who, "syncer");
    o->embedding = NULL;
    dlcL_read_run(L, o->li, o->si, o->plan, &o->run, NULL, NULL, &o->embedding);
    return box;
}

void *dlcL_learner_box(lua_State *L, const char *who, const char *tname, size_t size, dlcL_learner_opts *o) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    void *box = dlcL_newbox(L, tname, size, 1); /* 2 */
    dlcL_params_and_plan(L, &o->params, &o->plan);
    o->li = dlcL_subtable(L, 1, who, "learner");
    o->si = 0;
    if (lua_getfield(L, 1, "syncer") == LUA_TTABLE) o->si = lua_gettop(L);
    else lua_pop(L, 1);
    dlcL_read_run(L, o->li, o->si, o->plan, &o->run, &o->heartbeat, NULL, NULL);
    return box;
}

void dlcL_check_plan_model(lua_State *L, const char *who, const dlc_params *params, const dlc_plan *plan) {
    int64_t plan_numel = 0;
    for (int p = 0; p < dlc_plan_count(plan); p++) plan_numel += dlc_plan_numel(plan, p);
    if (dlc_params_numel(params) != plan_numel)
        luaL_error(L, "%s: params has %lld floats, the plan's model %lld: expected the plan's model", who,
                   (long long)dlc_params_numel(params), (long long)plan_numel);
}

int dlcL_checklearner(lua_State *L, int arg, int M) {
    lua_Integer m = luaL_checkinteger(L, arg);
    luaL_argcheck(L, m >= 1 && m <= M, arg, "learner out of range");
    return (int)m - 1;
}

float *dlcL_checkmodel(lua_State *L, int arg, const dlc_params *model) {
    dlc_params *p = dlcL_checkparams(L, arg);
    if (dlc_params_numel(p) != dlc_params_numel(model))
        luaL_argerror(L, arg, "Params of another model (a different number of floats)");
    return dlc_params_data(p);
}

void dlcL_read_run(lua_State *L, int lt, int st, const dlc_plan *plan, dlc_run_params *run, double *heartbeat,
                   double *timeout, const uint8_t **embedding) {
    run_extras x;
    read_run(L, lt, st, plan, run, &x);
    if (heartbeat) *heartbeat = x.heartbeat;
    if (timeout) *timeout = x.timeout;
    if (embedding) *embedding = x.embedding;
}

void dlcL_read_learner_params(lua_State *L, int lt, const dlc_plan *plan, dlc_learner_params *lp) {
    dlc_run_params run;
    run_extras x;
    read_run(L, lt, 0, plan, &run, &x);
    check_status(L, dlc_run_learner_params(&run, 0, lp));
    lp->heartbeat = x.heartbeat;
}

void dlcL_read_syncer_params(lua_State *L, int lt, int st, const dlc_plan *plan, int M, dlc_syncer_params *sp) {
    dlc_run_params run;
    run_extras x;
    read_run(L, lt, st, plan, &run, &x);
    check_status(L, dlc_run_syncer_params(&run, M, sp));
    sp->timeout = x.timeout;
    sp->embedding = x.embedding;
}

/* diloco.VTime{...} */
static int l_vtime(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    vtbox *b = dlcL_newbox(L, DLCL_VTIME, sizeof *b, 1); /* 2 */
    lua_newtable(L);                                      /* 3: references kept */
    lua_pushvalue(L, 3);
    lua_setiuservalue(L, 2, 1);

    if (lua_getfield(L, 1, "params") != LUA_TTABLE) return luaL_error(L, "VTime: params must be a list of Params");
    int M = (int)luaL_len(L, -1);
    if (M < 1 || M > DLC_SYNCER_LEARNERS_MAX)
        return luaL_error(L, "VTime: params has %d entries: expected 1..%d learners", M, DLC_SYNCER_LEARNERS_MAX);
    int pi = lua_gettop(L);
    dlc_params **models = lua_newuserdatauv(L, (size_t)M * sizeof *models, 0);
    lua_rawseti(L, 3, (lua_Integer)luaL_len(L, 3) + 1);
    for (int m = 0; m < M; m++) {
        lua_rawgeti(L, pi, m + 1);
        models[m] = dlcL_checkparams(L, lua_gettop(L));
        lua_rawseti(L, 3, (lua_Integer)luaL_len(L, 3) + 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, 1, "plan");
    dlc_plan *plan = dlcL_checkplan(L, lua_gettop(L));
    lua_rawseti(L, 3, (lua_Integer)luaL_len(L, 3) + 1);
    dlc_chaos *chaos = NULL;
    if (lua_getfield(L, 1, "chaos") != LUA_TNIL) {
        chaos = dlcL_checkchaos(L, lua_gettop(L));
        lua_rawseti(L, 3, (lua_Integer)luaL_len(L, 3) + 1);
    } else {
        lua_pop(L, 1);
    }

    dlc_vtime_params vp;
    memset(&vp, 0, sizeof vp);
    vp.learners = M;
    vp.step_time = optnum(L, 1, "VTime", "step_time", 1.0);
    vp.end = optnum(L, 1, "VTime", "horizon", 0);
    vp.eval_every = optnum(L, 1, "VTime", "eval_every", 0);
    vp.final_flush = optbool(L, 1, "VTime", "final_flush", 0);
    vp.seed = (uint64_t)(int64_t)optnum(L, 1, "VTime", "seed", 0);
    vp.cores = optint(L, 1, "VTime", "cores", 0);
    vp.shards = optint(L, 1, "VTime", "shards", 0);
    vp.standbys = optbool(L, 1, "VTime", "standbys", 0);
    vp.lease = optnum(L, 1, "VTime", "lease", 0);
    double steps = optnum(L, 1, "VTime", "steps", 0);
    if (steps != floor(steps) || steps < 0 || steps > 9007199254740992.0) {
        if (steps == floor(steps) && fabs(steps) < 9e18) lua_pushfstring(L, "%I", (lua_Integer)steps);
        else lua_pushfstring(L, "%f", (lua_Number)steps);
        return luaL_error(L, "VTime: steps = %s: expected the run's steps (an integer > 0) or 0 (train until horizon)",
                          lua_tostring(L, -1));
    }
    vp.steps = (int64_t)steps;
    vp.chaos = chaos;
    int li = subtable(L, 1, "learner");
    int si = subtable(L, 1, "syncer");
    /* both state machines' params derive from the one run description (vtime sets the ids) */
    dlc_run_params run;
    run_extras x;
    read_run(L, li, si, plan, &run, &x);
    check_status(L, dlc_run_learner_params(&run, 0, &vp.learner));
    vp.learner.heartbeat = x.heartbeat;
    check_status(L, dlc_run_syncer_params(&run, M, &vp.syncer));
    vp.syncer.timeout = x.timeout;
    vp.syncer.embedding = x.embedding;
    if (lua_getfield(L, 1, "islands") != LUA_TTABLE || luaL_len(L, -1) != M)
        return luaL_error(L, "VTime: islands must be a list of %d island tables (one per learner)", M);
    int ii = lua_gettop(L);
    dlc_vtime_island *is = lua_newuserdatauv(L, (size_t)M * sizeof *is, 0); /* freed by the GC */
    for (int m = 0; m < M; m++) {
        lua_rawgeti(L, ii, m + 1);
        int t = lua_gettop(L);
        if (!lua_istable(L, t)) return luaL_error(L, "VTime: islands[%d] must be a table", m + 1);
        is[m].speed = optnum(L, t, "island", "speed", 1);
        is[m].scale = optnum(L, t, "island", "scale", 1);
        is[m].tokens = (int64_t)optnum(L, t, "island", "tokens", 1);
        is[m].latency = optnum(L, t, "island", "latency", 0);
        is[m].bandwidth = optnum(L, t, "island", "bandwidth", INFINITY);
        is[m].jitter = optnum(L, t, "island", "jitter", 0);
        lua_pop(L, 1);
    }
    vp.islands = is;
    b->vt = dlc_vtime_new(&vp, plan, models, dlc_params_data(models[0]));
    if (!b->vt) return dlcL_error(L);
    lua_settop(L, 2);
    return 1;
}

static void vt_release(void *box) {
    vtbox *b = box;
    dlc_vtime_free(b->vt);
}

#define setnum dlcL_setnum
#define setint dlcL_setint

void dlcL_push_merge(lua_State *L, const dlc_merge_info *mi) {
    /* The members of a merge record and of a contribution after the (1-based) fragment and
     * learner, in the order the tables always had them. */
    typedef dlc_merge_info MI;
    static const dlcL_field merge_fields[] = {
        DLCL_INT(MI, version), DLCL_INT(MI, count), DLCL_INT(MI, live), DLCL_INT(MI, quorum), DLCL_NUM(MI, opened),
        DLCL_NUM(MI, quorum_at), DLCL_NUM(MI, grace), DLCL_NUM(MI, waited), DLCL_BOOL(MI, all_sent),
        DLCL_BOOL(MI, flushed), DLCL_INT(MI, bytes_in), DLCL_INT(MI, bytes_out), DLCL_NUM(MI, useful_tokens), DLCL_BOOL(MI, replica), {NULL}};
    typedef dlc_merge_contrib MC;
    static const dlcL_field contrib_fields[] = {
        DLCL_NUM(MC, weight), DLCL_INT(MC, base_version), DLCL_INT(MC, staleness), DLCL_INT(MC, steps),
        DLCL_INT(MC, tokens), DLCL_INT(MC, incarnation), DLCL_NUM(MC, arrived), {NULL}};
    lua_createtable(L, 0, 16);
    setint(L, "fragment", mi->fragment + 1);
    dlcL_setfields(L, mi, merge_fields);
    lua_createtable(L, mi->count, 0);
    for (int i = 0; i < mi->count; i++) {
        const dlc_merge_contrib *c = &mi->contribs[i];
        lua_createtable(L, 0, 7);
        setint(L, "learner", c->learner + 1);
        dlcL_setfields(L, c, contrib_fields);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "contributors");
}

void dlcL_set_rejection(lua_State *L, int learner, int fragment, dlc_reject_reason reason) {
    setint(L, "learner", learner + 1);
    setint(L, "fragment", fragment + 1);
    lua_pushstring(L, dlc_reject_reason_name(reason));
    lua_setfield(L, -2, "reason");
}

/* vt:next() -> event table */
static int vt_next(lua_State *L) {
    dlc_vtime *vt = checkvt(L, 1);
    dlc_vtime_event ev;
    int r = dlc_vtime_next(vt, &ev);
    if (r != 1) return dlcL_error(L);
    lua_createtable(L, 0, 8);
    lua_pushstring(L, dlc_vtime_event_name(ev.type));
    lua_setfield(L, -2, "type");
    setnum(L, "time", ev.time);
    if (ev.shard > 0) setint(L, "shard", ev.shard); /* (shards > 1: which shard's) */
    switch (ev.type) {
    case DLC_VT_STEP:
    case DLC_VT_OPTIM:
        setint(L, "learner", ev.learner + 1);
        setint(L, "step", ev.step);
        setint(L, "schedule", ev.schedule);
        break;
    case DLC_VT_MERGE:
        dlcL_push_merge(L, &ev.merge);
        lua_setfield(L, -2, "merge");
        break;
    case DLC_VT_REJECT:
        dlcL_set_rejection(L, ev.learner, ev.fragment, ev.reason);
        break;
    case DLC_VT_FAULT:
        if (ev.learner >= 0) setint(L, "learner", ev.learner + 1);
        lua_pushstring(L, dlc_fault_kind_name(ev.fault));
        lua_setfield(L, -2, "fault");
        lua_pushboolean(L, ev.begin);
        lua_setfield(L, -2, "begin");
        if (ev.role != DLC_ROLE_PRIMARY) {
            lua_pushstring(L, dlc_fault_role_name(ev.role));
            lua_setfield(L, -2, "role");
        }
        setnum(L, "duration", ev.duration);
        if (ev.fault == DLC_FAULT_SLOW) setnum(L, "factor", ev.factor);
        if (ev.fault == DLC_FAULT_LINK) setnum(L, "bandwidth", ev.bandwidth), setnum(L, "latency", ev.latency);
        break;
    case DLC_VT_LOST:
    case DLC_VT_JOINED: setint(L, "learner", ev.learner + 1); break;
    default: break;
    }
    return 1;
}

static int checklearner(lua_State *L, dlc_vtime *vt, int arg) {
    lua_Integer m = luaL_checkinteger(L, arg);
    int M = dlc_vtime_learners(vt);
    if (m < 1 || m > M) luaL_argerror(L, arg, lua_pushfstring(L, "learner %I out of range 1..%d", (LUAI_UACINT)m, M));
    return (int)m - 1;
}

static int vt_step_done(lua_State *L) {
    dlc_vtime *vt = checkvt(L, 1);
    int m = checklearner(L, vt, 2);
    if (dlc_vtime_step_done(vt, m, (int64_t)luaL_checkinteger(L, 3)) != DLC_OK) return dlcL_error(L);
    return 0;
}

static int vt_gradient_done(lua_State *L) {
    dlc_vtime *vt = checkvt(L, 1);
    int m = checklearner(L, vt, 2);
    if (dlc_vtime_gradient_done(vt, m, (int64_t)luaL_checkinteger(L, 3)) != DLC_OK) return dlcL_error(L);
    return 0;
}

static int vt_optim_done(lua_State *L) {
    dlc_vtime *vt = checkvt(L, 1);
    if (dlc_vtime_optim_done(vt, checklearner(L, vt, 2)) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* vt:contribute(m, p): the recipe's schedule sends fragment p after m's current step. */
static int vt_contribute(lua_State *L) {
    dlc_vtime *vt = checkvt(L, 1);
    int m = checklearner(L, vt, 2);
    lua_Integer p = luaL_checkinteger(L, 3);
    if (p < 1 || p > 1 << 30) return luaL_argerror(L, 3, "fragment must be >= 1");
    if (dlc_vtime_contribute(vt, m, (int)p - 1) != DLC_OK) return dlcL_error(L);
    return 0;
}

static int vt_set_quorum(lua_State *L) {
    dlc_vtime *vt = checkvt(L, 1);
    lua_Integer k = luaL_checkinteger(L, 2);
    if (k < 0 || k > 1 << 30) return luaL_argerror(L, 2, "quorum must be >= 0 (0 = every live learner)");
    if (dlc_vtime_set_quorum(vt, (int)k) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* vt:global(params): the global model into that Params' arena (same layout). */
static int vt_global(lua_State *L) {
    dlc_vtime *vt = checkvt(L, 1);
    dlc_params *p = dlcL_checkparams(L, 2);
    if (dlc_vtime_global(vt, dlc_params_data(p)) != DLC_OK) return dlcL_error(L);
    return 0;
}

static int vt_live(lua_State *L) {
    dlc_vtime *vt = checkvt(L, 1);
    lua_pushboolean(L, dlc_vtime_live(vt, checklearner(L, vt, 2)));
    return 1;
}

static int vt_live_count(lua_State *L) {
    dlc_vtime *vt = checkvt(L, 1);
    lua_pushinteger(L, dlc_syncer_live(dlc_vtime_syncer(vt)));
    return 1;
}

/* vt:learner_state(m) -> "joining" | "training" | "waiting" | "stopped" */
static int vt_learner_state(lua_State *L) {
    dlc_vtime *vt = checkvt(L, 1);
    lua_pushstring(L, dlc_learner_state_name(dlc_learner_state_of(dlc_vtime_learner(vt, checklearner(L, vt, 2)))));
    return 1;
}

static int vt_stats(lua_State *L) {
    /* vt:stats()'s members of dlc_vtime_stats, then of each learner's (around its idle share). */
    typedef dlc_vtime_stats S;
    static const dlcL_field vt_stats_fields[] = {
        DLCL_FIELD("virtual_s", 'n', S, now), DLCL_FIELD("horizon", 'n', S, end), DLCL_INT(S, merges),
        DLCL_INT(S, rejects), DLCL_INT(S, faults), DLCL_INT(S, bytes_up), DLCL_INT(S, bytes_down),
        DLCL_INT(S, dropped), DLCL_INT(S, takeovers), DLCL_NUM(S, useful_tokens), DLCL_NUM(S, goodput),
        DLCL_NUM(S, uptime), {NULL}};
    typedef dlc_vtime_learner_stats LS;
    static const dlcL_field vt_learner_fields[] = {
        DLCL_INT(LS, steps), DLCL_INT(LS, tokens), DLCL_NUM(LS, busy_s), DLCL_NUM(LS, idle_s), DLCL_NUM(LS, down_s),
        {NULL}};
    static const dlcL_field vt_learner_fields2[] = {
        DLCL_INT(LS, bytes_up), DLCL_INT(LS, bytes_down), DLCL_INT(LS, merged), DLCL_NUM(LS, nominal_tps),
        /* the account (vtime.h), in virtual seconds */
        DLCL_NUM(LS, useful_s), DLCL_NUM(LS, overwritten_s), DLCL_NUM(LS, dropped_s), DLCL_NUM(LS, unsent_s),
        DLCL_NUM(LS, waiting_s), DLCL_NUM(LS, done_s), DLCL_NUM(LS, sent_steps), DLCL_NUM(LS, merged_steps), {NULL}};
    dlc_vtime *vt = checkvt(L, 1);
    dlc_vtime_stats st;
    if (dlc_vtime_get_stats(vt, &st) != DLC_OK) return dlcL_error(L);
    lua_createtable(L, 0, 16);
    dlcL_setfields(L, &st, vt_stats_fields);
    lua_createtable(L, 0, DLC_MSG_TYPE_COUNT);
    for (int t = 0; t < DLC_MSG_TYPE_COUNT; t++)
        if (st.bytes_up_type[t] || st.bytes_down_type[t]) {
            lua_createtable(L, 0, 2);
            setint(L, "up", st.bytes_up_type[t]);
            setint(L, "down", st.bytes_down_type[t]);
            lua_setfield(L, -2, dlc_msg_type_name((dlc_msg_type)t));
        }
    lua_setfield(L, -2, "bytes_by_type");
    lua_createtable(L, st.learners, 0);
    for (int m = 0; m < st.learners; m++) {
        const dlc_vtime_learner_stats *s = &st.learner[m];
        lua_createtable(L, 0, 18);
        dlcL_setfields(L, s, vt_learner_fields);
        setnum(L, "idle", st.end > 0 ? s->idle_s / st.end : 0);
        dlcL_setfields(L, s, vt_learner_fields2);
        /* its shares of the horizon, by the account's rules (core/account.h) */
        dlc_account_row r;
        if (dlc_account_row_of(dlc_vtime_account(vt), m, st.end, &r) != DLC_OK) return dlcL_error(L);
        dlcL_push_account_row(L, &r);
        lua_pop(L, 1);
        lua_setfield(L, -2, "account");
        lua_rawseti(L, -2, m + 1);
    }
    lua_setfield(L, -2, "learners");
    dlc_account_row total; /* weighted by the islands' nominal rates */
    if (dlc_account_total(dlc_vtime_account(vt), st.end, &total) != DLC_OK) return dlcL_error(L);
    dlcL_push_account_row(L, &total);
    lua_pop(L, 1);
    lua_setfield(L, -2, "account");
    return 1;
}

static int vt_tostring(lua_State *L) {
    vtbox *b = luaL_checkudata(L, 1, DLCL_VTIME);
    if (!b->vt) return lua_pushliteral(L, "VTime(closed)"), 1;
    lua_pushfstring(L, "VTime(%d learners)", dlc_vtime_learners(b->vt));
    return 1;
}

static const luaL_Reg vt_methods[] = {
    {"next", vt_next}, {"step_done", vt_step_done}, {"gradient_done", vt_gradient_done},
    {"optim_done", vt_optim_done}, {"contribute", vt_contribute}, {"set_quorum", vt_set_quorum}, {"global", vt_global},
    {"live", vt_live}, {"live_count", vt_live_count}, {"learner_state", vt_learner_state},
    {"stats", vt_stats}, {NULL, NULL},
};
static const luaL_Reg vt_meta[] = {{"__tostring", vt_tostring}, {NULL, NULL}};
static const dlcL_type vt_type = {DLCL_VTIME, vt_release, vt_methods, vt_meta, NULL};

void dlcL_open_vtime(lua_State *L, int mod, int st) {
    static const dlcL_type *const types[] = {&vt_type, NULL};
    static const luaL_Reg funcs[] = {{"VTime", l_vtime}, {NULL, NULL}};
    dlcL_register(L, mod, st, types, funcs);
}
