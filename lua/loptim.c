/*
 * loptim.c - diloco.Params (one arena per model), diloco.Optimizer (AdamW, SGD) and
 * diloco.lr_at (learning-rate schedules).  See docs/optim.md for the user's view.
 *
 *     local params = diloco.Params(model:parameters())      -- array of {name, tensor}
 *     local opt = diloco.Optimizer(params, {kind = "adamw", lr = 3e-4, weight_decay = 0.1})
 *     params:zero_grad(); loss:backward(); params:clip_grad_norm(1.0)
 *     opt:step(diloco.lr_at(step, {schedule = "cosine", lr = 3e-4, warmup = 100, total = 5000}))
 *
 * Lifetime: a Params box holds the dlc_params (NULL once closed) and, as its user
 * value, the array of the Tensor objects it was given, so :get(name) returns the very
 * object the caller passed in.  An Optimizer box holds the dlc_optim and, as its user
 * value, the Params box, which therefore lives as long as the optimizer.  :close()
 * (also __gc and __close) is idempotent; closing the Params leaves its tensors working
 * (core/params.h) but makes every optimizer over it refuse to step.
 */
#include <limits.h>
#include <math.h>
#include <string.h>
#include "ldiloco.h"

#define DLCL_PARAMS "diloco.Params"
#define DLCL_OPTIM "diloco.Optimizer"

typedef struct pbox {
    dlc_params *p; /* owned; NULL when closed (or not yet acquired) */
} pbox;

typedef struct obox {
    dlc_optim *o; /* owned; NULL when closed */
} obox;

#define STATE(L) DLCL_UPSTATE(L)

/* Names matched by these Lua patterns get no weight decay by default (besides every
 * tensor with fewer than 2 dims): embeddings, norms, GPT-2's wte/wpe. */
static const char *const default_no_decay[] = {
    "emb", "norm", "%f[%w]ln_?%d*%f[%W]", "%f[%w]wte%f[%W]", "%f[%w]wpe%f[%W]",
};
#define N_DEFAULT_NO_DECAY (int)(sizeof default_no_decay / sizeof default_no_decay[0])

/* ---------------------------------------------------------------------------
 * Params
 * --------------------------------------------------------------------------- */

static dlc_params *checkparams(lua_State *L, int arg) {
    pbox *b = luaL_checkudata(L, arg, DLCL_PARAMS);
    if (!b->p) luaL_argerror(L, arg, "Params has been closed");
    return b->p;
}

dlc_params *dlcL_checkparams(lua_State *L, int arg) { return checkparams(L, arg); }

/* diloco.Params(list): list = array of {name, tensor}. */
static int l_params(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
    if (n < 1) return luaL_argerror(L, 1, "expected a non-empty array of {name, tensor}");
    if (n > INT_MAX / 2) return luaL_argerror(L, 1, "too many tensors");
    /* scratch arrays owned by Lua: nothing leaks if a check below raises */
    const char **names = lua_newuserdatauv(L, (size_t)n * sizeof *names, 0);
    dlc_tensor **ts = lua_newuserdatauv(L, (size_t)n * sizeof *ts, 0);
    lua_createtable(L, (int)n, 0); /* the Tensor objects, for the user value */
    int objs = lua_gettop(L);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, 1, i) != LUA_TTABLE)
            return luaL_argerror(L, 1, lua_pushfstring(L, "entry %I is a %s, expected {name, tensor}",
                                                       (LUAI_UACINT)i, luaL_typename(L, -1)));
        int e = lua_gettop(L);
        if (lua_rawgeti(L, e, 1) != LUA_TSTRING)
            return luaL_argerror(L, 1, lua_pushfstring(L, "entry %I: the name (entry[1]) is a %s, "
                                                          "expected a string",
                                                       (LUAI_UACINT)i, luaL_typename(L, -1)));
        names[i - 1] = lua_tostring(L, -1); /* stays valid: the list holds the string */
        lua_rawgeti(L, e, 2);
        ts[i - 1] = dlcL_totensor(L, -1);
        if (!ts[i - 1])
            return luaL_argerror(L, 1, lua_pushfstring(L, "entry %I ('%s'): entry[2] is %s, expected "
                                                          "a live Tensor",
                                                       (LUAI_UACINT)i, names[i - 1],
                                                       luaL_testudata(L, -1, DLCL_TENSOR)
                                                           ? "a freed tensor"
                                                           : luaL_typename(L, -1)));
        lua_rawseti(L, objs, i);
        lua_pop(L, 2);
    }
    pbox *b = dlcL_newbox(L, DLCL_PARAMS, sizeof *b, 1);
    lua_pushvalue(L, objs);
    lua_setiuservalue(L, -2, 1);
    b->p = dlc_params_new((int)n, names, ts);
    if (!b->p) return dlcL_error(L);
    return 1;
}

/* The release behind __gc, __close and params:close() (dlcL_newtype). */
static void params_release(void *box) { dlc_params_free(((pbox *)box)->p); }

static int p_count(lua_State *L) {
    lua_pushinteger(L, dlc_params_count(checkparams(L, 1)));
    return 1;
}

/* Parameter values, padding excluded. */
static int p_numel(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)dlc_params_numel(checkparams(L, 1)));
    return 1;
}

/* Arena length, padding included (= #params:flat()). */
static int p_size(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)dlc_params_size(checkparams(L, 1)));
    return 1;
}

static int p_names(lua_State *L) {
    dlc_params *p = checkparams(L, 1);
    int n = dlc_params_count(p);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, dlc_params_name(p, i));
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* Pushes the Tensor object of tensor i: the one given to diloco.Params, or, if the
 * caller has freed that box since, a new box sharing the same dlc_tensor. */
static void push_param_tensor(lua_State *L, int pidx, dlc_params *p, int i) {
    lua_getiuservalue(L, pidx, 1);
    lua_rawgeti(L, -1, i + 1);
    lua_remove(L, -2);
    if (dlcL_totensor(L, -1)) return;
    lua_pop(L, 1);
    dlc_tensor **slot = dlcL_newtensor(L);
    *slot = dlc_tensor_retain(dlc_params_tensor(p, i));
}

static int checkname(lua_State *L, dlc_params *p, int arg) {
    const char *name = luaL_checkstring(L, arg);
    int i = dlc_params_find(p, name);
    if (i < 0) luaL_argerror(L, arg, lua_pushfstring(L, "no parameter named '%s'", name));
    return i;
}

/* params:get(name) -> the Tensor, or nil if there is no such name. */
static int p_get(lua_State *L) {
    dlc_params *p = checkparams(L, 1);
    int i = dlc_params_find(p, luaL_checkstring(L, 2));
    if (i < 0) return lua_pushnil(L), 1;
    push_param_tensor(L, 1, p, i);
    return 1;
}

/* params:offset(name) -> offset of the tensor in the arena, in floats (0-based:
 * its first element is params:flat()[offset + 1]). */
static int p_offset(lua_State *L) {
    dlc_params *p = checkparams(L, 1);
    lua_pushinteger(L, (lua_Integer)dlc_params_offset(p, checkname(L, p, 2)));
    return 1;
}

/* params:tensors() -> array of {name, tensor} (fresh tables, the same tensors). */
static int p_tensors(lua_State *L) {
    dlc_params *p = checkparams(L, 1);
    int n = dlc_params_count(p);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_createtable(L, 2, 0);
        lua_pushstring(L, dlc_params_name(p, i));
        lua_rawseti(L, -2, 1);
        push_param_tensor(L, 1, p, i);
        lua_rawseti(L, -2, 2);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int p_zero_grad(lua_State *L) {
    dlc_params_zero_grad(checkparams(L, 1));
    lua_settop(L, 1);
    return 1;
}

static int p_grad_norm(lua_State *L) {
    lua_pushnumber(L, dlc_params_grad_norm(checkparams(L, 1)));
    return 1;
}

/* params:clip_grad_norm(max_norm) -> the norm before clipping */
static int p_clip_grad_norm(lua_State *L) {
    dlc_params *p = checkparams(L, 1);
    double norm = dlc_params_clip_grad_norm(p, luaL_checknumber(L, 2));
    if (norm < 0) return dlcL_error(L);
    lua_pushnumber(L, norm);
    return 1;
}

static int p_flat(lua_State *L) {
    dlc_params *p = checkparams(L, 1);
    dlc_tensor **slot = dlcL_newtensor(L);
    return dlcL_settensor(L, STATE(L), slot, dlc_params_flat(p));
}

static int p_flat_grad(lua_State *L) {
    dlc_params *p = checkparams(L, 1);
    dlc_tensor **slot = dlcL_newtensor(L);
    return dlcL_settensor(L, STATE(L), slot, dlc_params_flat_grad(p));
}

static int p_tostring(lua_State *L) {
    pbox *b = luaL_checkudata(L, 1, DLCL_PARAMS);
    if (!b->p) return lua_pushliteral(L, "Params(closed)"), 1;
    lua_pushfstring(L, "Params(%d tensors, %I values)", dlc_params_count(b->p),
                    (LUAI_UACINT)dlc_params_numel(b->p));
    return 1;
}

/* ---------------------------------------------------------------------------
 * Optimizer
 * --------------------------------------------------------------------------- */

/* The optimizer at arg and its (open) Params, which the optimizer's user value keeps
 * alive while the optimizer is on the stack. */
static dlc_optim *checkoptim(lua_State *L, int arg, dlc_params **pp) {
    obox *b = luaL_checkudata(L, arg, DLCL_OPTIM);
    if (!b->o) luaL_argerror(L, arg, "Optimizer has been closed");
    lua_getiuservalue(L, arg, 1);
    pbox *pb = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (!pb || !pb->p)
        luaL_error(L, "Optimizer: its Params has been closed; the optimizer cannot be used any more");
    if (pp) *pp = pb->p;
    return b->o;
}

static const char *const optim_keys[] = {
    "kind", "lr", "betas", "beta1", "beta2", "eps", "weight_decay", "momentum", "dampening",
    "nesterov", "no_decay", "decay", NULL,
};
/* Keys that only one kind accepts: "adamw" / "sgd". */
static const char *key_kind(const char *k) {
    static const char *const adamw_only[] = {"betas", "beta1", "beta2", "eps", NULL};
    static const char *const sgd_only[] = {"momentum", "dampening", "nesterov", NULL};
    for (int i = 0; adamw_only[i]; i++)
        if (!strcmp(k, adamw_only[i])) return "adamw";
    for (int i = 0; sgd_only[i]; i++)
        if (!strcmp(k, sgd_only[i])) return "sgd";
    return NULL;
}

/* Rejects unknown option names and options of the other kind. */
static void check_keys(lua_State *L, int opts, const char *kind) {
    lua_pushnil(L);
    while (lua_next(L, opts)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "Optimizer: option keys must be strings, got a %s", luaL_typename(L, -1));
        const char *k = lua_tostring(L, -1);
        int known = 0;
        for (int i = 0; optim_keys[i]; i++) known |= !strcmp(k, optim_keys[i]);
        if (!known)
            luaL_error(L, "Optimizer: unknown option '%s' (known: kind, lr, betas, beta1, beta2, eps, "
                          "weight_decay, momentum, dampening, nesterov, no_decay, decay)", k);
        const char *only = key_kind(k);
        if (only && strcmp(only, kind) != 0)
            luaL_error(L, "Optimizer: option '%s' is for %s, not %s", k, only, kind);
    }
}

static void optnum(lua_State *L, int opts, const char *k, double *out) {
    int ty = lua_getfield(L, opts, k);
    if (ty == LUA_TNUMBER)
        *out = lua_tonumber(L, -1);
    else if (ty != LUA_TNIL)
        luaL_error(L, "Optimizer: option %s must be a number, got %s", k, luaL_typename(L, -1));
    lua_pop(L, 1);
}

/* The pattern lists `no_decay` / `decay` at opts, as a table on the stack (or nil). */
static int push_patterns(lua_State *L, int opts, const char *k) {
    int ty = lua_getfield(L, opts, k);
    if (ty == LUA_TNIL) return 0;
    if (ty != LUA_TTABLE)
        luaL_error(L, "Optimizer: option %s must be an array of Lua patterns, got %s", k, luaL_typename(L, -1));
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, -1, i) != LUA_TSTRING)
            luaL_error(L, "Optimizer: %s[%I] is a %s, expected a Lua pattern (string)", k, (LUAI_UACINT)i,
                       luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    return 1;
}

/* string.find(name, pattern) ~= nil, through the string library (a malformed pattern
 * raises, naming the option). */
static int matches(lua_State *L, int find, const char *name, const char *pattern, const char *opt) {
    lua_pushvalue(L, find);
    lua_pushstring(L, name);
    lua_pushstring(L, pattern);
    if (lua_pcall(L, 2, 1, 0) != LUA_OK)
        luaL_error(L, "Optimizer: %s pattern '%s': %s", opt, pattern, lua_tostring(L, -1));
    int m = !lua_isnil(L, -1);
    lua_pop(L, 1);
    return m;
}

static int matches_any(lua_State *L, int find, int list, const char *name, const char *opt) {
    if (!list) return 0;
    lua_Integer n = (lua_Integer)lua_rawlen(L, list);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, list, i);
        const char *pat = lua_tostring(L, -1);
        int m = matches(L, find, name, pat, opt);
        lua_pop(L, 1);
        if (m) return 1;
    }
    return 0;
}

/* The decay rule for tensor i: see docs/optim.md. */
static int decays(lua_State *L, int find, int no_decay, int decay, const char *name, const dlc_tensor *t) {
    int on = t->ndim >= 2;
    for (int k = 0; on && k < N_DEFAULT_NO_DECAY; k++)
        if (matches(L, find, name, default_no_decay[k], "default no_decay")) on = 0;
    if (matches_any(L, find, decay, name, "decay")) on = 1;
    if (matches_any(L, find, no_decay, name, "no_decay")) on = 0;
    return on;
}

/* diloco.Optimizer(params, opts) */
static int l_optimizer(lua_State *L) {
    dlc_params *p = checkparams(L, 1);
    int opts = 2;
    if (lua_isnoneornil(L, 2)) {
        lua_settop(L, 1);
        lua_newtable(L);
    }
    luaL_checktype(L, opts, LUA_TTABLE);
    lua_settop(L, 2);

    const char *kind = "adamw";
    if (lua_getfield(L, opts, "kind") != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "Optimizer: option kind must be \"adamw\" or \"sgd\", got a %s",
                              luaL_typename(L, -1));
        kind = lua_tostring(L, -1);
    }
    lua_pop(L, 1);
    dlc_optim_kind k = DLC_OPTIM_KIND_COUNT;
    for (int i = 0; i < DLC_OPTIM_KIND_COUNT; i++)
        if (!strcmp(kind, dlc_optim_kind_name((dlc_optim_kind)i))) k = (dlc_optim_kind)i;
    if (k == DLC_OPTIM_KIND_COUNT)
        return luaL_error(L, "Optimizer: kind = '%s', expected \"adamw\" or \"sgd\"", kind);
    check_keys(L, opts, kind);

    dlc_optim_params op = dlc_optim_default_params(k);
    optnum(L, opts, "lr", &op.lr);
    optnum(L, opts, "weight_decay", &op.weight_decay);
    if (k == DLC_OPTIM_ADAMW) {
        if (lua_getfield(L, opts, "betas") != LUA_TNIL) {
            lua_getfield(L, opts, "beta1");
            lua_getfield(L, opts, "beta2");
            if (!lua_isnil(L, -1) || !lua_isnil(L, -2))
                return luaL_error(L, "Optimizer: give betas = {b1, b2} or beta1/beta2, not both");
            lua_pop(L, 2);
            if (!lua_istable(L, -1) || lua_rawlen(L, -1) != 2 || lua_rawgeti(L, -1, 1) != LUA_TNUMBER ||
                lua_rawgeti(L, -2, 2) != LUA_TNUMBER)
                return luaL_error(L, "Optimizer: option betas must be {beta1, beta2} (two numbers)");
            op.beta1 = lua_tonumber(L, -2);
            op.beta2 = lua_tonumber(L, -1);
            lua_pop(L, 2);
        }
        lua_pop(L, 1);
        optnum(L, opts, "beta1", &op.beta1);
        optnum(L, opts, "beta2", &op.beta2);
        optnum(L, opts, "eps", &op.eps);
    } else {
        optnum(L, opts, "momentum", &op.momentum);
        optnum(L, opts, "dampening", &op.dampening);
        int ty = lua_getfield(L, opts, "nesterov");
        if (ty != LUA_TNIL && ty != LUA_TBOOLEAN)
            return luaL_error(L, "Optimizer: option nesterov must be a boolean, got %s", luaL_typename(L, -1));
        op.nesterov = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    if (dlc_optim_params_check(&op) != DLC_OK) return dlcL_error(L);

    /* decay flags, computed before anything is acquired */
    int no_decay = push_patterns(L, opts, "no_decay") ? lua_gettop(L) : 0;
    int decay = push_patterns(L, opts, "decay") ? lua_gettop(L) : 0;
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "string");
    if (!lua_istable(L, -1)) return luaL_error(L, "Optimizer: the string library is not loaded");
    lua_getfield(L, -1, "find");
    int find = lua_gettop(L);
    /* Lua code has run since the check (the options' metamethods) and runs in decays
     * (string.find): p may have been closed, so check it again before each use and keep
     * the name on the stack rather than borrowing it from p. */
    p = checkparams(L, 1);
    int n = dlc_params_count(p);
    unsigned char *flags = lua_newuserdatauv(L, (size_t)n, 0);
    for (int i = 0; i < n; i++) {
        p = checkparams(L, 1);
        const char *name = lua_pushstring(L, dlc_params_name(p, i));
        flags[i] = (unsigned char)decays(L, find, no_decay, decay, name, dlc_params_tensor(p, i));
        lua_pop(L, 1);
    }
    p = checkparams(L, 1);

    obox *b = dlcL_newbox(L, DLCL_OPTIM, sizeof *b, 1);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    b->o = dlc_optim_new(p, &op);
    if (!b->o) return dlcL_error(L);
    for (int i = 0; i < n; i++) dlc_optim_set_decay(b->o, i, flags[i]);
    return 1;
}

/* The release behind __gc, __close and opt:close() (dlcL_newtype). */
static void optim_release(void *box) { dlc_optim_free(((obox *)box)->o); }

/* opt:step([lr]): lr defaults to the optimizer's lr option. */
static int o_step(lua_State *L) {
    dlc_optim *o = checkoptim(L, 1, NULL);
    double lr = lua_isnoneornil(L, 2) ? dlc_optim_get_params(o)->lr : luaL_checknumber(L, 2);
    if (dlc_optim_step(o, (float)lr) != DLC_OK) return dlcL_error(L);
    return 0;
}

static int o_step_count(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)dlc_optim_step_count(checkoptim(L, 1, NULL)));
    return 1;
}

static int o_set_step_count(lua_State *L) {
    dlc_optim *o = checkoptim(L, 1, NULL);
    if (dlc_optim_set_step_count(o, (int64_t)luaL_checkinteger(L, 2)) != DLC_OK) return dlcL_error(L);
    lua_settop(L, 1);
    return 1;
}

/* opt:state() -> array of {"<kind>.<state>.<param>", tensor}: views into the state
 * arenas with each parameter's shape (copy into them to restore a checkpoint). */
static int o_state(lua_State *L) {
    dlc_params *p;
    dlc_optim *o = checkoptim(L, 1, &p);
    int ns = dlc_optim_state_count(o), n = dlc_params_count(p);
    const char *kind = dlc_optim_kind_name(dlc_optim_get_params(o)->kind);
    lua_createtable(L, ns * n, 0);
    int out = lua_gettop(L);
    for (int s = 0; s < ns; s++) {
        dlc_tensor *arena = dlc_optim_state_tensor(o, s);
        for (int i = 0; i < n; i++) {
            dlc_tensor *t = dlc_params_tensor(p, i);
            lua_createtable(L, 2, 0);
            lua_pushfstring(L, "%s.%s.%s", kind, dlc_optim_state_name(o, s), dlc_params_name(p, i));
            lua_rawseti(L, -2, 1);
            dlc_tensor **slot = dlcL_newtensor(L);
            dlcL_settensor(L, STATE(L), slot, dlc_tensor_view(arena, dlc_params_offset(p, i), t->ndim, t->shape));
            lua_rawseti(L, -2, 2);
            lua_rawseti(L, out, s * n + i + 1);
        }
    }
    return 1;
}

/* opt:decays(name) -> whether weight decay applies to that parameter. */
static int o_decays(lua_State *L) {
    dlc_params *p;
    dlc_optim *o = checkoptim(L, 1, &p);
    lua_pushboolean(L, dlc_optim_decays(o, checkname(L, p, 2)) == 1);
    return 1;
}

/* opt:set_decay(name, bool) -> opt */
static int o_set_decay(lua_State *L) {
    dlc_params *p;
    dlc_optim *o = checkoptim(L, 1, &p);
    int i = checkname(L, p, 2);
    luaL_checktype(L, 3, LUA_TBOOLEAN);
    dlc_optim_set_decay(o, i, lua_toboolean(L, 3));
    lua_settop(L, 1);
    return 1;
}

static int o_tostring(lua_State *L) {
    obox *b = luaL_checkudata(L, 1, DLCL_OPTIM);
    if (!b->o) return lua_pushliteral(L, "Optimizer(closed)"), 1;
    const dlc_optim_params *op = dlc_optim_get_params(b->o);
    lua_pushfstring(L, "Optimizer(%s, lr=%f, weight_decay=%f, step %I)", dlc_optim_kind_name(op->kind),
                    op->lr, op->weight_decay, (LUAI_UACINT)dlc_optim_step_count(b->o));
    return 1;
}

/* ---------------------------------------------------------------------------
 * diloco.lr_at(step, {schedule =, lr =, warmup =, total =, min_lr =})
 * --------------------------------------------------------------------------- */

static int64_t optint(lua_State *L, int opts, const char *k, int64_t def) {
    int ty = lua_getfield(L, opts, k);
    int64_t v = def;
    if (ty != LUA_TNIL) {
        int isint;
        lua_Integer x = lua_tointegerx(L, -1, &isint);
        if (!isint) luaL_error(L, "lr_at: %s must be an integer number of steps, got %s", k,
                               ty == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
        v = (int64_t)x;
    }
    lua_pop(L, 1);
    return v;
}

static int l_lr_at(lua_State *L) {
    lua_Integer step = luaL_checkinteger(L, 1);
    luaL_argcheck(L, step >= 0, 1, "step must be >= 0 (steps are 0-based)");
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (!k || (strcmp(k, "schedule") && strcmp(k, "lr") && strcmp(k, "warmup") && strcmp(k, "total") &&
                   strcmp(k, "min_lr")))
            return luaL_error(L, "lr_at: unknown option '%s' (known: schedule, lr, warmup, total, min_lr)",
                              k ? k : luaL_typename(L, -1));
    }
    dlc_lr_schedule s = {DLC_LR_CONSTANT, 0, 0, 0, 0};
    if (lua_getfield(L, 2, "schedule") != LUA_TNIL) {
        const char *name = lua_tostring(L, -1);
        s.kind = DLC_LR_KIND_COUNT;
        for (int i = 0; name && lua_type(L, -1) == LUA_TSTRING && i < DLC_LR_KIND_COUNT; i++)
            if (!strcmp(name, dlc_lr_kind_name((dlc_lr_kind)i))) s.kind = (dlc_lr_kind)i;
        if (s.kind == DLC_LR_KIND_COUNT)
            return luaL_error(L, "lr_at: schedule = %s, expected \"constant\", \"cosine\" or \"linear\"",
                              luaL_tolstring(L, -1, NULL));
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 2, "lr") != LUA_TNUMBER)
        return luaL_error(L, "lr_at: lr must be a number, got %s", luaL_typename(L, -1));
    s.lr = lua_tonumber(L, -1);
    lua_pop(L, 1);
    int ty = lua_getfield(L, 2, "min_lr");
    if (ty != LUA_TNIL && ty != LUA_TNUMBER)
        return luaL_error(L, "lr_at: min_lr must be a number, got %s", luaL_typename(L, -1));
    s.min_lr = lua_tonumber(L, -1);
    lua_pop(L, 1);
    s.warmup = optint(L, 2, "warmup", 0);
    s.total = optint(L, 2, "total", -1);
    if (s.total < 0 && s.kind != DLC_LR_CONSTANT)
        return luaL_error(L, "lr_at: the %s schedule needs total (the step at which it reaches min_lr)",
                          dlc_lr_kind_name(s.kind));
    if (dlc_lr_schedule_check(&s) != DLC_OK) return dlcL_error(L);
    lua_pushnumber(L, dlc_lr_at(&s, (int64_t)step));
    return 1;
}

/* ---------------------------------------------------------------------------
 * registration
 * --------------------------------------------------------------------------- */

static const luaL_Reg params_methods[] = {
    {"count", p_count},         {"numel", p_numel},       {"size", p_size},
    {"names", p_names},         {"get", p_get},           {"offset", p_offset},
    {"tensors", p_tensors},     {"zero_grad", p_zero_grad}, {"grad_norm", p_grad_norm},
    {"clip_grad_norm", p_clip_grad_norm}, {"flat", p_flat}, {"flat_grad", p_flat_grad},
    {NULL, NULL},
};

static const luaL_Reg optim_methods[] = {
    {"step", o_step},       {"step_count", o_step_count}, {"set_step_count", o_set_step_count},
    {"state", o_state},     {"decays", o_decays},         {"set_decay", o_set_decay},
    {NULL, NULL},
};

static const luaL_Reg params_meta[] = {{"__tostring", p_tostring}, {NULL, NULL}};
static const luaL_Reg optim_meta[] = {{"__tostring", o_tostring}, {NULL, NULL}};
static const dlcL_type params_type = {DLCL_PARAMS, params_release, params_methods, params_meta, NULL};
static const dlcL_type optim_type = {DLCL_OPTIM, optim_release, optim_methods, optim_meta, NULL};

void dlcL_open_optim(lua_State *L, int mod, int st) {
    mod = lua_absindex(L, mod);
    static const dlcL_type *const types[] = {&params_type, &optim_type, NULL};
    static const luaL_Reg funcs[] = {
        {"Params", l_params}, {"Optimizer", l_optimizer}, {"lr_at", l_lr_at}, {NULL, NULL},
    };
    dlcL_register(L, mod, st, types, funcs);
    /* a copy of the default no-decay patterns, for reference (changing it changes nothing) */
    lua_createtable(L, N_DEFAULT_NO_DECAY, 0);
    for (int i = 0; i < N_DEFAULT_NO_DECAY; i++) {
        lua_pushstring(L, default_no_decay[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, mod, "no_decay_patterns");
}
