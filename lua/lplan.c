/*
 * lplan.c - diloco.Plan: fragment plans over a Params arena (core/frag.h,
 * docs/fragments.md), to inspect from the REPL how a model is split into P fragments.
 *
 *     local params = diloco.Params(model:parameters())
 *     local plan = diloco.Plan(params, {kind = "strided", fragments = 4})
 *     for f = 1, #plan do
 *       for _, v in ipairs(plan:views(f)) do print(f, v.name, v.offset, v.numel) end
 *     end
 *     print(plan.plan_hash)                       -- "a1b2c3d4e5f60718", compare with a peer
 *
 * Numbering: fragments and tensor indices are 1-based like every Lua position
 * (tensor i is params:names()[i]); offsets (floats from the arena start, as
 * params:offset) and row0 (first row of dim 1) are 0-based, as in the C views.
 *
 * Lifetime: the C plan copies the names and keeps no reference to the dlc_params, so a
 * Plan box holds only its dlc_plan (NULL once closed) and stays valid after the Params
 * is closed.  __gc, __close and :close() share one idempotent release (dlcL_newtype).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "ldiloco.h"

#define DLCL_PLAN "diloco.Plan"

typedef struct planbox {
    dlc_plan *p; /* owned; NULL when closed (or not yet acquired) */
} planbox;

static dlc_plan *checkplan(lua_State *L, int arg) {
    planbox *b = luaL_checkudata(L, arg, DLCL_PLAN);
    if (!b->p) luaL_argerror(L, arg, "Plan has been closed");
    return b->p;
}

dlc_plan *dlcL_checkplan(lua_State *L, int arg) { return checkplan(L, arg); }

/* The 1-based fragment at `arg` as a 0-based index; raises unless in 1..P. */
static int checkfrag(lua_State *L, dlc_plan *p, int arg) {
    lua_Integer f = luaL_checkinteger(L, arg);
    int n = dlc_plan_count(p);
    if (f < 1 || f > n)
        luaL_argerror(L, arg, lua_pushfstring(L, "fragment %I out of range 1..%d", (LUAI_UACINT)f, n));
    return (int)f - 1;
}

/* diloco.Plan(params[, {kind =, fragments =, split_rows =}]) */
static int l_plan(lua_State *L) {
    dlc_params *params = dlcL_checkparams(L, 1);
    dlc_plan_params pp = dlc_plan_default_params();
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            lua_pop(L, 1);
            const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
            if (!k || (strcmp(k, "kind") && strcmp(k, "fragments") && strcmp(k, "split_rows")))
                return luaL_error(L, "Plan: unknown option '%s' (known: kind, fragments, split_rows)",
                                  k ? k : luaL_typename(L, -1));
        }
        int ty = lua_getfield(L, 2, "kind");
        if (ty != LUA_TNIL) {
            if (ty != LUA_TSTRING)
                return luaL_error(L, "Plan: kind must be \"balanced\", \"strided\" or \"sequential\", got a %s",
                                  luaL_typename(L, -1));
            if (dlc_plan_kind_parse(lua_tostring(L, -1), &pp.kind) != DLC_OK)
                return luaL_error(L, "Plan: kind = \"%s\": unknown plan; expected balanced, strided or sequential",
                                  lua_tostring(L, -1));
        }
        ty = lua_getfield(L, 2, "fragments");
        if (ty != LUA_TNIL) {
            int isint;
            lua_Integer f = lua_tointegerx(L, -1, &isint);
            if (!isint || f < 1 || f > INT32_MAX)
                return luaL_error(L, "Plan: fragments = %s, expected an integer >= 1", luaL_tolstring(L, -1, NULL));
            pp.fragments = (int)f;
        }
        ty = lua_getfield(L, 2, "split_rows");
        if (ty != LUA_TNIL && ty != LUA_TBOOLEAN)
            return luaL_error(L, "Plan: split_rows must be a boolean, got a %s", luaL_typename(L, -1));
        pp.split_rows = lua_toboolean(L, -1);
        lua_settop(L, 2);
        params = dlcL_checkparams(L, 1); /* option metamethods may have run Lua code */
    }
    planbox *b = dlcL_newbox(L, DLCL_PLAN, sizeof *b, 0);
    b->p = dlc_plan_new(params, &pp);
    if (!b->p) return dlcL_error(L);
    return 1;
}

static void plan_release(void *box) { dlc_plan_free(((planbox *)box)->p); }

/* plan:views(f) -> array of {name, tensor, offset, numel, row0, rows} in arena order */
static int pl_views(lua_State *L) {
    dlc_plan *p = checkplan(L, 1);
    int n, f = checkfrag(L, p, 2);
    const dlc_frag_view *v = dlc_plan_views(p, f, &n);
    lua_createtable(L, n, 0);
    for (int j = 0; j < n; j++) {
        lua_createtable(L, 0, 6);
        lua_pushstring(L, v[j].name);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, (lua_Integer)v[j].tensor + 1);
        lua_setfield(L, -2, "tensor");
        lua_pushinteger(L, (lua_Integer)v[j].offset);
        lua_setfield(L, -2, "offset");
        lua_pushinteger(L, (lua_Integer)v[j].numel);
        lua_setfield(L, -2, "numel");
        lua_pushinteger(L, (lua_Integer)v[j].row0);
        lua_setfield(L, -2, "row0");
        lua_pushinteger(L, (lua_Integer)v[j].rows);
        lua_setfield(L, -2, "rows");
        lua_rawseti(L, -2, j + 1);
    }
    return 1;
}

/* plan:bytes(f), plan:numel(f): a size of fragment f. */
static int frag_size(lua_State *L, int64_t (*size)(const dlc_plan *, int)) {
    dlc_plan *p = checkplan(L, 1);
    lua_pushinteger(L, (lua_Integer)size(p, checkfrag(L, p, 2)));
    return 1;
}
static int pl_bytes(lua_State *L) { return frag_size(L, dlc_plan_bytes); }
static int pl_numel(lua_State *L) { return frag_size(L, dlc_plan_numel); }

/* plan:fragment_of(i) -> the 1-based fragment holding tensor i whole, or nil when the
 * tensor is split across fragments (split_rows). */
static int pl_fragment_of(lua_State *L) {
    dlc_plan *p = checkplan(L, 1);
    lua_Integer i = luaL_checkinteger(L, 2);
    int n = dlc_plan_tensors(p);
    if (i < 1 || i > n)
        return luaL_argerror(L, 2, lua_pushfstring(L, "tensor %I out of range 1..%d", (LUAI_UACINT)i, n));
    int f = dlc_plan_fragment_of(p, (int)i - 1);
    if (f < 0) return lua_pushnil(L), 1;
    lua_pushinteger(L, f + 1);
    return 1;
}

/* plan:deal(S) -> {shard of fragment 1, ...}: the 1-based syncer shard each fragment
 * belongs to (dlc_plan_deal: by bytes, largest first; docs/shards.md). */
static int pl_deal(lua_State *L) {
    dlc_plan *p = checkplan(L, 1);
    lua_Integer S = luaL_checkinteger(L, 2);
    int P = dlc_plan_count(p);
    if (S < 1 || S > P) return luaL_argerror(L, 2, lua_pushfstring(L, "%I shards for %d fragments: expected 1..%d",
                                                                   (LUAI_UACINT)S, P, P));
    int *owner = lua_newuserdatauv(L, (size_t)P * sizeof *owner, 0);
    if (dlc_plan_deal(p, (int)S, owner) != DLC_OK) return dlcL_error(L);
    lua_createtable(L, P, 0);
    for (int f = 0; f < P; f++) {
        lua_pushinteger(L, owner[f] + 1);
        lua_rawseti(L, -2, f + 1);
    }
    return 1;
}

static void pushhex(lua_State *L, uint64_t h) {
    char buf[17];
    snprintf(buf, sizeof buf, "%016" PRIx64, h);
    lua_pushstring(L, buf);
}

static int pl_len(lua_State *L) {
    lua_pushinteger(L, dlc_plan_count(checkplan(L, 1)));
    return 1;
}

/* __index: methods, then closed, and (open plans only) fragments, tensors, kind,
 * split_rows, model_hash, plan_hash. */
static int pl_index(lua_State *L) {
    planbox *b = luaL_checkudata(L, 1, DLCL_PLAN);
    const char *k = luaL_checkstring(L, 2);
    if (lua_getfield(L, lua_upvalueindex(2), k) != LUA_TNIL) return 1;
    if (!strcmp(k, "closed")) return lua_pushboolean(L, !b->p), 1;
    dlc_plan *p = checkplan(L, 1);
    if (!strcmp(k, "fragments")) return lua_pushinteger(L, dlc_plan_count(p)), 1;
    if (!strcmp(k, "tensors")) return lua_pushinteger(L, dlc_plan_tensors(p)), 1;
    if (!strcmp(k, "kind")) return lua_pushstring(L, dlc_plan_kind_name(dlc_plan_get_params(p).kind)), 1;
    if (!strcmp(k, "split_rows")) return lua_pushboolean(L, dlc_plan_get_params(p).split_rows), 1;
    if (!strcmp(k, "model_hash")) return pushhex(L, dlc_plan_model_hash(p)), 1;
    if (!strcmp(k, "plan_hash")) return pushhex(L, dlc_plan_hash(p)), 1;
    return 0;
}

static int pl_tostring(lua_State *L) {
    planbox *b = luaL_checkudata(L, 1, DLCL_PLAN);
    if (!b->p) return lua_pushliteral(L, "Plan(closed)"), 1;
    dlc_plan_params pp = dlc_plan_get_params(b->p);
    lua_pushfstring(L, "Plan(%s, %d fragments over %d tensors%s)", dlc_plan_kind_name(pp.kind),
                    dlc_plan_count(b->p), dlc_plan_tensors(b->p), pp.split_rows ? ", split_rows" : "");
    return 1;
}

static const luaL_Reg plan_methods[] = {
    {"views", pl_views}, {"bytes", pl_bytes}, {"numel", pl_numel}, {"fragment_of", pl_fragment_of},
    {"deal", pl_deal}, {NULL, NULL},
};
static const luaL_Reg plan_meta[] = {{"__len", pl_len}, {"__tostring", pl_tostring}, {NULL, NULL}};
static const dlcL_type plan_type = {DLCL_PLAN, plan_release, plan_methods, plan_meta, pl_index};

void dlcL_open_plan(lua_State *L, int mod, int st) {
    static const dlcL_type *const types[] = {&plan_type, NULL};
    static const luaL_Reg funcs[] = {{"Plan", l_plan}, {NULL, NULL}};
    dlcL_register(L, mod, st, types, funcs);
}
