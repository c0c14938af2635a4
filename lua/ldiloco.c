/*
 * ldiloco.c - luaopen_diloco: the module table, tensor creation, random
 * generators and the autograd mode switches.  The Tensor type itself is ltensor.c.
 *
 * Conventions (also in diloco._CONVENTIONS): positions and axes are 1-based like
 * Lua strings (negative counts from the end); index VALUES stored in tensors
 * (token ids, labels, gather/topk/argmax results) are 0-based as in the C core.
 * Shapes are tables {2, 3} or integer varargs 2, 3.
 *
 * Randomness: diloco.randn/rand and t:dropout(p) draw from one generator per
 * lua_State, seeded with 0 at load and reseeded by diloco.seed(n).  For an
 * independent stream create g = diloco.Generator(seed) and call g:randn(...),
 * g:rand(...), t:dropout(p, g).  Same seed + same calls = bit-identical numbers.
 */
#include <stdarg.h>
#include <string.h>
#include "ldiloco.h"

#define STATE(L) DLCL_UPSTATE(L)
#define DEFAULT_SEED 0

static const char state_key = 0; /* registry key: its address */

dlcL_state *dlcL_getstate(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &state_key);
    dlcL_state *st = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (!st) luaL_error(L, "diloco: the module is not loaded in this Lua state");
    return st;
}

/* ---------------------------------------------------------------------------
 * errors
 * --------------------------------------------------------------------------- */

static const char *const status_names[] = {
    "DLC_OK",         "DLC_ERR_ARG",   "DLC_ERR_SHAPE", "DLC_ERR_NOMEM",    "DLC_ERR_IO",
    "DLC_ERR_FORMAT", "DLC_ERR_STATE", "DLC_ERR_RANGE", "DLC_ERR_INTERNAL",
};
_Static_assert(sizeof status_names / sizeof status_names[0] == DLC_STATUS_COUNT,
               "status name table out of sync with dlc_status");

const char *dlcL_status_name(int s) {
    if (s > 0 || -s >= DLC_STATUS_COUNT) return "DLC_ERR_UNKNOWN";
    return status_names[-s];
}

int dlcL_fail(lua_State *L, dlc_status s) {
    if (s == DLC_ERR_NOMEM) return dlcL_error(L);
    lua_pushnil(L);
    lua_pushstring(L, dlc_last_error());
    lua_pushstring(L, dlcL_status_name(s));
    return 3;
}

int dlcL_fail_io(lua_State *L, const char *fmt, ...) {
    lua_pushnil(L);
    va_list ap;
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_pushliteral(L, "DLC_ERR_IO");
    return 3;
}

/* ---------------------------------------------------------------------------
 * userdata types (ldiloco.h: dlcL_type)
 * --------------------------------------------------------------------------- */

/* The first field of every box is a pointer to its resource; read and written as
 * a void * (all object pointers share one representation on the platforms we
 * build for, as POSIX requires of dlsym). */
_Static_assert(sizeof(dlc_tensor *) == sizeof(void *), "boxes begin with an object pointer");

void dlcL_closebox(void *box, const dlcL_type *ty) {
    void *res, *closed = NULL;
    memcpy(&res, box, sizeof res);
    if (!res) return;
    ty->release(box);
    memcpy(box, &closed, sizeof closed);
}

/* __gc, __close and :close() of every type: upvalue 1 is its dlcL_type. */
static int box_close(lua_State *L) {
    const dlcL_type *ty = lua_touserdata(L, lua_upvalueindex(1));
    dlcL_closebox(luaL_checkudata(L, 1, ty->name), ty);
    return 0;
}

void dlcL_setfuncs(lua_State *L, int tab, int st, const luaL_Reg *l) {
    lua_pushvalue(L, tab);
    lua_pushvalue(L, st);
    luaL_setfuncs(L, l, 1);
    lua_pop(L, 1);
}

void dlcL_register(lua_State *L, int mod, int st, const dlcL_type *const *types, const luaL_Reg *funcs) {
    mod = lua_absindex(L, mod);
    st = lua_absindex(L, st);
    for (; *types; types++) {
        dlcL_newtype(L, st, *types);
        lua_pop(L, 2);
    }
    if (funcs) dlcL_setfuncs(L, mod, st, funcs);
}

void dlcL_newtype(lua_State *L, int st, const dlcL_type *ty) {
    st = lua_absindex(L, st);
    luaL_newmetatable(L, ty->name);
    int mt = lua_gettop(L);
    lua_createtable(L, 0, 16);
    int methods = lua_gettop(L);
    if (ty->methods) dlcL_setfuncs(L, methods, st, ty->methods);
    if (ty->meta) dlcL_setfuncs(L, mt, st, ty->meta);
    lua_pushlightuserdata(L, (void *)ty);
    lua_pushcclosure(L, box_close, 1);
    lua_pushvalue(L, -1);
    lua_setfield(L, mt, "__gc");
    lua_pushvalue(L, -1);
    lua_setfield(L, mt, "__close");
    lua_setfield(L, methods, "close");
    if (ty->index) {
        lua_pushvalue(L, st);
        lua_pushvalue(L, methods);
        lua_pushcclosure(L, ty->index, 2);
    } else {
        lua_pushvalue(L, methods);
    }
    lua_setfield(L, mt, "__index");
}

void *dlcL_newbox(lua_State *L, const char *tname, size_t size, int nuv) {
    void *box = lua_newuserdatauv(L, size, nuv);
    memset(box, 0, size);
    luaL_setmetatable(L, tname);
    return box;
}

#define DLCL_RES "diloco.CResource"

static void res_release(void *box) {
    dlcL_res *r = box;
    r->release(r->p);
}

static const dlcL_type res_type = {DLCL_RES, res_release, NULL, NULL, NULL};

dlcL_res *dlcL_newres(lua_State *L) { return dlcL_newbox(L, DLCL_RES, sizeof(dlcL_res), 0); }

void dlcL_freeres(dlcL_res *r) { dlcL_closebox(r, &res_type); }

/* ---------------------------------------------------------------------------
 * creation
 * --------------------------------------------------------------------------- */

/* Checks that the table at idx has exactly shape[0] entries and copies its
 * (nested) numbers to out; returns the position after the last one written. */
static float *fill_from_table(lua_State *L, int idx, float *out, const int64_t *shape, int ndim,
                              int depth) {
    if (lua_type(L, idx) != LUA_TTABLE)
        luaL_error(L, "tensor: expected a table at depth %d, got %s (the nested table is not "
                      "rectangular)", depth + 1, luaL_typename(L, idx));
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
    if (n != shape[0])
        luaL_error(L, "tensor: a table at depth %d has %I entries, expected %I (the nested table "
                      "is not rectangular)", depth + 1, (LUAI_UACINT)n, (LUAI_UACINT)shape[0]);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i);
        if (ndim == 1) {
            if (lua_type(L, -1) != LUA_TNUMBER)
                luaL_error(L, "tensor: entry %I at depth %d is a %s, expected a number",
                           (LUAI_UACINT)i, depth + 1, luaL_typename(L, -1));
            *out++ = (float)lua_tonumber(L, -1);
        } else {
            out = fill_from_table(L, lua_gettop(L), out, shape + 1, ndim - 1, depth + 1);
        }
        lua_pop(L, 1);
    }
    return out;
}

/* diloco.tensor(nested_table | number | Tensor) */
static int l_tensor(lua_State *L) {
    dlcL_state *st = STATE(L);
    if (lua_type(L, 1) == LUA_TNUMBER) {
        float v = (float)lua_tonumber(L, 1);
        dlc_tensor **slot = dlcL_newtensor(L);
        return dlcL_settensor(L, st, slot, dlc_tensor_full(0, NULL, v));
    }
    if (lua_type(L, 1) != LUA_TTABLE) {
        dlc_tensor *src = dlcL_totensor(L, 1);
        if (!src) return luaL_typeerror(L, 1, "table, number or Tensor");
        dlc_tensor **slot = dlcL_newtensor(L);
        return dlcL_settensor(L, st, slot, dlc_tensor_clone(src));
    }
    /* The shape comes from the first entry at each depth; fill_from_table checks
     * every other entry against it. */
    int64_t shape[DLC_MAX_DIMS];
    int ndim = 0;
    lua_pushvalue(L, 1);
    while (lua_type(L, -1) == LUA_TTABLE) {
        if (ndim == DLC_MAX_DIMS)
            return luaL_argerror(L, 1, "nested more than 4 levels deep (tensors have at most 4 dims)");
        shape[ndim++] = (int64_t)lua_rawlen(L, -1);
        if (shape[ndim - 1] == 0) break;
        lua_rawgeti(L, -1, 1);
        lua_remove(L, -2);
    }
    lua_pop(L, 1);
    dlc_tensor **slot = dlcL_newtensor(L);
    dlcL_settensor(L, st, slot, dlc_tensor_new(ndim, shape));
    /* The box owns the tensor now: raising while filling leaks nothing. */
    fill_from_table(L, 1, (*slot)->data, shape, ndim, 0);
    return 1;
}

static int l_zeros(lua_State *L) {
    int64_t shape[DLC_MAX_DIMS];
    int ndim = dlcL_checkshape(L, 1, lua_gettop(L), shape, 0);
    dlc_tensor **slot = dlcL_newtensor(L);
    return dlcL_settensor(L, STATE(L), slot, dlc_tensor_zeros(ndim, shape));
}

static int l_ones(lua_State *L) {
    int64_t shape[DLC_MAX_DIMS];
    int ndim = dlcL_checkshape(L, 1, lua_gettop(L), shape, 0);
    dlc_tensor **slot = dlcL_newtensor(L);
    return dlcL_settensor(L, STATE(L), slot, dlc_tensor_full(ndim, shape, 1.0f));
}

/* diloco.full({2, 3}, v) or diloco.full(2, 3, v) */
static int l_full(lua_State *L) {
    int64_t shape[DLC_MAX_DIMS];
    int top = lua_gettop(L), ndim;
    float v;
    if (lua_type(L, 1) == LUA_TTABLE) {
        ndim = dlcL_checkshape(L, 1, 1, shape, 0);
        v = (float)luaL_checknumber(L, 2);
    } else {
        v = (float)luaL_checknumber(L, top > 0 ? top : 1);
        ndim = dlcL_checkshape(L, 1, top - 1, shape, 0);
    }
    dlc_tensor **slot = dlcL_newtensor(L);
    return dlcL_settensor(L, STATE(L), slot, dlc_tensor_full(ndim, shape, v));
}

/* diloco.arange(stop) | arange(start, stop[, step]): values start, start+step, ...
 * < stop (stop exclusive; these are values, not positions). */
static int l_arange(lua_State *L) {
    double start = 0, stop, step = 1;
    if (lua_isnoneornil(L, 2)) {
        stop = luaL_checknumber(L, 1);
    } else {
        start = luaL_checknumber(L, 1);
        stop = luaL_checknumber(L, 2);
        step = luaL_optnumber(L, 3, 1.0);
    }
    dlc_tensor **slot = dlcL_newtensor(L);
    return dlcL_settensor(L, STATE(L), slot, dlc_tensor_arange(start, stop, step));
}

static lua_Number optfield(lua_State *L, int opts, const char *fn, const char *k, lua_Number def) {
    if (!opts) return def;
    int ty = lua_getfield(L, opts, k);
    lua_Number v = def;
    if (ty == LUA_TNUMBER)
        v = lua_tonumber(L, -1);
    else if (ty != LUA_TNIL)
        luaL_error(L, "%s: option %s must be a number, got %s", fn, k, luaL_typename(L, -1));
    lua_pop(L, 1);
    return v;
}

/* randn/rand(shape...[, opts]) with the shape from `first`:
 *   randn: opts {mean = 0, std = 1, requires_grad = false}
 *   rand:  opts {lo = 0, hi = 1, requires_grad = false}   (uniform in [lo, hi)) */
static int random_tensor(lua_State *L, dlc_rng *g, int first, int normal) {
    const char *fn = normal ? "randn" : "rand";
    int top = lua_gettop(L), last = top, opts = 0;
    if (top >= first && lua_type(L, first) == LUA_TTABLE) {
        last = first;
        if (top > first) {
            luaL_checktype(L, first + 1, LUA_TTABLE);
            opts = first + 1;
        }
    } else if (top >= first && lua_type(L, top) == LUA_TTABLE) {
        opts = top;
        last = top - 1;
    }
    int64_t shape[DLC_MAX_DIMS];
    int ndim = dlcL_checkshape(L, first, last, shape, 0);
    float a = (float)optfield(L, opts, fn, normal ? "mean" : "lo", 0.0);
    float b = (float)optfield(L, opts, fn, normal ? "std" : "hi", 1.0);
    int rg = 0;
    if (opts) {
        lua_getfield(L, opts, "requires_grad");
        rg = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    dlc_tensor **slot = dlcL_newtensor(L);
    dlcL_settensor(L, STATE(L), slot,
                   normal ? dlc_tensor_randn(ndim, shape, g, a, b) : dlc_tensor_rand(ndim, shape, g, a, b));
    if (rg) dlc_tensor_set_requires_grad(*slot, 1); /* a fresh leaf: cannot fail */
    return 1;
}

static int l_randn(lua_State *L) { return random_tensor(L, &STATE(L)->rng, 1, 1); }
static int l_rand(lua_State *L) { return random_tensor(L, &STATE(L)->rng, 1, 0); }

static int l_seed(lua_State *L) {
    dlc_rng_init(&STATE(L)->rng, (uint64_t)luaL_checkinteger(L, 1));
    return 0;
}

/* ---------------------------------------------------------------------------
 * diloco.Generator(seed): an independent Philox stream
 * --------------------------------------------------------------------------- */

static int l_generator(lua_State *L) {
    uint64_t seed = (uint64_t)luaL_checkinteger(L, 1);
    dlc_rng *g = lua_newuserdatauv(L, sizeof *g, 0);
    dlc_rng_init(g, seed);
    luaL_setmetatable(L, DLCL_GENERATOR);
    return 1;
}

static int g_randn(lua_State *L) {
    return random_tensor(L, luaL_checkudata(L, 1, DLCL_GENERATOR), 2, 1);
}

static int g_rand(lua_State *L) {
    return random_tensor(L, luaL_checkudata(L, 1, DLCL_GENERATOR), 2, 0);
}

/* g:seed(n) -> g: restart the stream from seed n. */
static int g_seed(lua_State *L) {
    dlc_rng *g = luaL_checkudata(L, 1, DLCL_GENERATOR);
    dlc_rng_init(g, (uint64_t)luaL_checkinteger(L, 2));
    lua_settop(L, 1);
    return 1;
}

static int g_tostring(lua_State *L) {
    dlc_rng *g = luaL_checkudata(L, 1, DLCL_GENERATOR);
    lua_pushfstring(L, "Generator(seed=%I, counter=%I)", (LUAI_UACINT)g->seed, (LUAI_UACINT)g->counter);
    return 1;
}

/* ---------------------------------------------------------------------------
 * autograd mode
 * --------------------------------------------------------------------------- */

/* diloco.no_grad(fn, ...) -> fn(...): runs fn with grad disabled; the previous mode
 * is restored on return AND on error (the error is rethrown unchanged).  fn must
 * not yield. */
static int l_no_grad(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    int prev = dlc_set_grad_enabled(0);
    int status = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    dlc_set_grad_enabled(prev);
    if (status != LUA_OK) return lua_error(L);
    return lua_gettop(L);
}

/* diloco.set_grad_enabled(bool) -> previous setting */
static int l_set_grad_enabled(lua_State *L) {
    luaL_checkany(L, 1);
    lua_pushboolean(L, dlc_set_grad_enabled(lua_toboolean(L, 1)));
    return 1;
}

static int l_grad_enabled(lua_State *L) {
    lua_pushboolean(L, dlc_grad_enabled());
    return 1;
}

/* ---------------------------------------------------------------------------
 * misc
 * --------------------------------------------------------------------------- */

static int l_is_tensor(lua_State *L) {
    lua_pushboolean(L, luaL_testudata(L, 1, DLCL_TENSOR) != NULL);
    return 1;
}

/* Bytes of tensor storage alive in this process (all states); for leak checks. */
static int l_bytes_live(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)dlc_tensor_bytes_live());
    return 1;
}

static const luaL_Reg module_funcs[] = {
    {"tensor", l_tensor},
    {"zeros", l_zeros},
    {"ones", l_ones},
    {"full", l_full},
    {"arange", l_arange},
    {"randn", l_randn},
    {"rand", l_rand},
    {"seed", l_seed},
    {"Generator", l_generator},
    {"no_grad", l_no_grad},
    {"set_grad_enabled", l_set_grad_enabled},
    {"grad_enabled", l_grad_enabled},
    {"is_tensor", l_is_tensor},
    {"bytes_live", l_bytes_live},
    {NULL, NULL},
};

static const luaL_Reg generator_methods[] = {
    {"randn", g_randn},
    {"rand", g_rand},
    {"seed", g_seed},
    {NULL, NULL},
};

/* package.searchpath(name, package.path), or nil. */
static int search_lua(lua_State *L, const char *name) {
    lua_getglobal(L, "package");
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        lua_pushnil(L);
        return 0;
    }
    lua_getfield(L, -1, "searchpath");
    lua_pushstring(L, name);
    lua_getfield(L, -3, "path");
    lua_call(L, 2, 1);
    lua_remove(L, -2);
    return !lua_isnil(L, -1);
}

/* __index of the module table: diloco.NAME -> require("diloco.NAME") when
 * package.searchpath finds it, cached with rawset.  A NAME that is not there is nil,
 * as in any table, while the Lua half of diloco is on package.path (diloco/cli.lua
 * found); without it every diloco.NAME raises an error saying where to point LUA_PATH,
 * instead of diloco.nn being a silent nil. */
static int lazy_submodule(lua_State *L) {
    if (lua_type(L, 2) != LUA_TSTRING) return 0;
    const char *key = lua_tostring(L, 2);
    const char *name = lua_pushfstring(L, "diloco.%s", key);
    if (!search_lua(L, name)) {
        if (search_lua(L, "diloco.cli")) return 0;
        lua_getglobal(L, "package");
        lua_getfield(L, -1, "path");
        return luaL_error(L,
                          "diloco.%s: the Lua files of diloco (diloco/%s.lua, diloco/cli.lua, ...) "
                          "are not on package.path (%s); they are installed in "
                          "PREFIX/share/lua/5.4: add 'PREFIX/share/lua/5.4/?.lua' to LUA_PATH",
                          key, key, lua_isstring(L, -1) ? lua_tostring(L, -1) : "unset");
    }
    lua_pop(L, 1);
    lua_getglobal(L, "require");
    lua_pushstring(L, name);
    lua_call(L, 1, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, -2);
    lua_rawset(L, 1);
    return 1;
}

/* lchaos.c: diloco.Chaos, fault schedules (core/chaos.h). */
void dlcL_open_chaos(lua_State *L, int mod, int st);
/* laccount.c: diloco.Account, the run's account (core/account.h). */
void dlcL_open_account(lua_State *L, int mod, int st);
void dlcL_open_supervise(lua_State *L, int mod, int st);
/* lgoodput.c: diloco.goodput{...}, the goodput simulator (core/goodput.h). */
void dlcL_open_goodput(lua_State *L, int mod, int st);
/* lnet.c: diloco.net, the transport (net/include/diloco/net.h). */
void dlcL_open_net(lua_State *L, int mod, int st);

int luaopen_diloco(lua_State *L) {
    luaL_checkversion(L);
    lua_createtable(L, 0, 96);
    int mod = lua_gettop(L);

    dlcL_state *st = lua_newuserdatauv(L, sizeof *st, 0);
    memset(st, 0, sizeof *st);
    dlc_rng_init(&st->rng, DEFAULT_SEED);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &state_key);
    int sti = lua_gettop(L);

    lua_pushvalue(L, mod);
    lua_pushvalue(L, sti);
    luaL_setfuncs(L, module_funcs, 1);
    lua_pop(L, 1);

    luaL_newmetatable(L, DLCL_GENERATOR);
    lua_pushcfunction(L, g_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_createtable(L, 0, 4);
    lua_pushvalue(L, sti);
    luaL_setfuncs(L, generator_methods, 1);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);

    dlcL_newtype(L, sti, &res_type);
    lua_pop(L, 2);

    dlcL_open_tensor(L, mod, sti);
    dlcL_open_sys(L, mod, sti);
    dlcL_open_signals(L, mod, sti);
    dlcL_open_data(L, mod, sti);
    dlcL_open_ckpt(L, mod, sti);
    dlcL_open_json(L, mod, sti);
    dlcL_open_optim(L, mod, sti);
    dlcL_open_codec(L, mod, sti);
    dlcL_open_plan(L, mod, sti);
    dlcL_open_chaos(L, mod, sti);
    dlcL_open_goodput(L, mod, sti);
    dlcL_open_account(L, mod, sti);
    dlcL_open_supervise(L, mod, sti);
    dlcL_open_vtime(L, mod, sti);
    dlcL_open_net(L, mod, sti);
    dlcL_open_rt(L, mod, sti);
    dlcL_open_proc(L, mod, sti);
    dlcL_open_machine(L, mod, sti);
    dlcL_open_mpi(L, mod, sti);

    /* Pure-Lua submodules (lua/diloco/NAME.lua: nn, data, optim, recipe, ...) load on
     * first use as diloco.NAME, so `local diloco = require "diloco"` is all a recipe
     * needs. */
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, lazy_submodule);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, mod);

    lua_pushstring(L, dlc_version());
    lua_setfield(L, mod, "version");
    lua_pushfstring(L, "diloco %s", dlc_version());
    lua_setfield(L, mod, "_VERSION");
    lua_pushliteral(L, "positions and axes are 1-based like Lua strings (negative counts from "
                       "the end; slice(axis, i, j) is inclusive); index values stored in tensors "
                       "(token ids, labels, gather/topk/argmax indices) are 0-based");
    lua_setfield(L, mod, "_CONVENTIONS");
    lua_settop(L, mod);
    return 1;
}

void dlcL_setnum(lua_State *L, const char *k, double v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

void dlcL_setint(lua_State *L, const char *k, int64_t v) {
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

/* One member of type T at `at` into t[f->name], as f->as says. */
#define SETFIELD(T)                                                  \
    do {                                                             \
        T v;                                                         \
        memcpy(&v, at, sizeof v);                                    \
        if (f->as == 'i') {                                          \
            dlcL_setint(L, f->name, (int64_t)v);                     \
        } else if (f->as == 'n') {                                   \
            dlcL_setnum(L, f->name, (double)v);                      \
        } else {                                                     \
            lua_pushboolean(L, (int)v);                              \
            lua_setfield(L, -2, f->name);                            \
        }                                                            \
    } while (0)

void dlcL_setfields(lua_State *L, const void *s, const dlcL_field *f) {
    for (; f->name; f++) {
        const char *at = (const char *)s + f->offset;
        switch (f->ctype) { /* the codes of DLCL_CTYPE */
        case 1: SETFIELD(_Bool); break;
        case 2: SETFIELD(char); break;
        case 3: SETFIELD(signed char); break;
        case 4: SETFIELD(unsigned char); break;
        case 5: SETFIELD(short); break;
        case 6: SETFIELD(unsigned short); break;
        case 7: SETFIELD(int); break;
        case 8: SETFIELD(unsigned); break;
        case 9: SETFIELD(long); break;
        case 10: SETFIELD(unsigned long); break;
        case 11: SETFIELD(long long); break;
        case 12: SETFIELD(unsigned long long); break;
        case 13: SETFIELD(float); break;
        default: SETFIELD(double); break;
        }
    }
}
#undef SETFIELD

int dlcL_optfield(lua_State *L, int t, const char *pre, const char *who, const char *sep, const char *k, int type) {
    int ty = lua_getfield(L, t, k);
    if (ty == type) return 1;
    if (ty != LUA_TNIL)
        luaL_error(L, "%s%s%s%s must be a %s, got a %s", pre, who, sep, k, lua_typename(L, type), luaL_typename(L, -1));
    lua_pop(L, 1);
    return 0;
}

void dlcL_check_keys(lua_State *L, int t, const char *who, const char *const *known, const char *noun) {
    t = lua_absindex(L, t);
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        int ok = 0;
        for (int i = 0; k && known[i]; i++) ok |= !strcmp(k, known[i]);
        if (ok) continue;
        luaL_Buffer lb;
        luaL_buffinit(L, &lb);
        for (int i = 0; known[i]; i++) {
            if (i) luaL_addstring(&lb, ", ");
            luaL_addstring(&lb, known[i]);
        }
        luaL_pushresult(&lb);
        if (k) luaL_error(L, "%s: unknown %s '%s' (known: %s)", who, noun, k, lua_tostring(L, -1));
        luaL_error(L, "%s: %s keys must be strings, got a %s key (known: %s)", who, noun, luaL_typename(L, -2),
                   lua_tostring(L, -1));
    }
}
