/*
 * ltensor.c - the diloco.Tensor userdata itself: boxes and argument checks, GC hints,
 * lifetime, properties, element access and tostring; dlcL_open_tensor registers the
 * Tensor metatable and methods.  The op methods (also exported as diloco.<op>), the
 * arithmetic metamethods and the in-place/autograd methods are lops.c.
 *
 * Conventions of the Lua API (the C core is 0-based throughout):
 *   - POSITIONS and AXES are 1-based, like Lua strings: t[1] is the first row,
 *     t:sum(1) reduces the first axis, axis -1 is the last, t:slice(axis, i, j) is
 *     inclusive like string.sub and negative i/j count from the end.  Unlike
 *     string.sub, out-of-range positions raise instead of being clamped.
 *   - Index VALUES stored in tensors (token ids, class labels, gather/topk/argmax
 *     indices) are 0-based integers held as floats, exactly as the core uses them.
 *   - Shapes are Lua tables {2, 3}; where natural (creation, reshape) they may also
 *     be given as integer varargs: zeros(2, 3) == zeros({2, 3}).
 *
 * Lifetime (liolib's pattern): a Tensor is a box holding one reference to a
 * dlc_tensor.  The box is created empty BEFORE the core is asked for a tensor, so a
 * Lua memory error never leaks one, and a core failure leaves an empty box for the
 * collector.  __gc, __close and t:close() (alias t:free()) share one idempotent
 * release (dlcL_newtype); any other use of a freed tensor raises "tensor has been
 * freed".  Every argument is checked
 * before anything is acquired; the rare op that holds a temporary (n / x) releases
 * it before raising.
 *
 * Tensors returned by t.grad, t[i] (N-D), views, reshape and detach share storage
 * with their source: writes through one are visible in the other.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include "ldiloco.h"

typedef struct tbox {
    dlc_tensor *t; /* owned reference; NULL when released (or not yet acquired) */
} tbox;

/* ---------------------------------------------------------------------------
 * boxes, argument checks, GC hints
 * --------------------------------------------------------------------------- */

/* GC pressure.  Tensor storage lives outside Lua's heap: to the collector a 400 MB
 * activation is a 16-byte userdata, so without help it would let garbage tensors
 * pile up for a long time.  Every new tensor adds its bytes to a counter; once the
 * counter passes max(1 MiB, live tensor bytes / 4) we tell the collector that much
 * memory was allocated (lua_gc(LUA_GCSTEP, kb) adds it to the GC debt and runs a
 * step), so dead temporaries of a training step are reclaimed promptly and the
 * collector's pace follows tensor memory.  Views are counted too (they keep their
 * storage alive).  A collector stopped by the user stays stopped. */
#define GC_HINT_MIN ((size_t)1 << 20)
#define GC_HINT_LIVE_FRACTION 4

void dlcL_gc_account(lua_State *L, dlcL_state *st, const dlc_tensor *t) {
    /* + the C-side bookkeeping (tensor and storage structs, malloc headers), which
     * dominates for small tensors */
    st->since_hint += (size_t)t->numel * sizeof(float) + 256;
    if (st->since_hint < GC_HINT_MIN ||
        st->since_hint < dlc_tensor_bytes_live() / GC_HINT_LIVE_FRACTION)
        return;
    size_t kb = st->since_hint / 1024;
    st->since_hint = 0;
    if (lua_gc(L, LUA_GCISRUNNING))
        lua_gc(L, LUA_GCSTEP, kb > INT_MAX ? INT_MAX : (int)kb);
}

int dlcL_error(lua_State *L) { return luaL_error(L, "%s", dlc_last_error()); }

dlc_tensor **dlcL_newtensor(lua_State *L) {
    tbox *b = dlcL_newbox(L, DLCL_TENSOR, sizeof *b, 0);
    return &b->t;
}

int dlcL_settensor(lua_State *L, dlcL_state *st, dlc_tensor **slot, dlc_tensor *t) {
    if (!t) return dlcL_error(L);
    *slot = t;
    dlcL_gc_account(L, st, t);
    return 1;
}

int dlcL_freed_error(lua_State *L, int arg) {
    return luaL_argerror(L, arg, "tensor has been freed");
}

dlc_tensor *dlcL_checktensor(lua_State *L, int arg) {
    tbox *b = luaL_checkudata(L, arg, DLCL_TENSOR);
    if (!b->t) dlcL_freed_error(L, arg);
    return b->t;
}

dlc_tensor *dlcL_opttensor(lua_State *L, int arg) {
    return lua_isnoneornil(L, arg) ? NULL : dlcL_checktensor(L, arg);
}

dlc_tensor *dlcL_totensor(lua_State *L, int arg) {
    tbox *b = luaL_testudata(L, arg, DLCL_TENSOR);
    return b ? b->t : NULL;
}

dlc_tensor **dlcL_testtensor(lua_State *L, int arg) {
    tbox *b = luaL_testudata(L, arg, DLCL_TENSOR);
    return b ? &b->t : NULL;
}

#define checkt dlcL_checktensor
#define newbox dlcL_newtensor
#define RESULT DLCL_RESULT

/* A 1-based (negative = from the end) axis argument -> 0-based axis. */
int dlcL_checkaxis(lua_State *L, int arg, int ndim) {
    lua_Integer a = luaL_checkinteger(L, arg);
    if (a >= 1 && a <= ndim) return (int)a - 1;
    if (a < 0 && a >= -ndim) return ndim + (int)a;
    return luaL_argerror(L, arg,
                         lua_pushfstring(L, "axis %I is out of range for a %d-dimensional tensor "
                                            "(axes are 1-based; negative counts from the end)",
                                         (LUAI_UACINT)a, ndim));
}

/* A 1-based (negative = from the end) position along `dim` (1-based, for messages)
 * of size n -> 0-based. */
static int64_t checkpos(lua_State *L, lua_Integer i, int64_t n, int dim) {
    lua_Integer k = i < 0 ? i + n + 1 : i;
    if (k < 1 || k > n)
        luaL_error(L, "index %I is out of range for dimension %d of size %I", (LUAI_UACINT)i, dim,
                   (LUAI_UACINT)n);
    return (int64_t)k - 1;
}

/* Elements in one slice along the first dim. */
static int64_t rowsize(const dlc_tensor *t) {
    int64_t r = 1;
    for (int i = 1; i < t->ndim; i++) r *= t->shape[i];
    return r;
}

int dlcL_checkshape(lua_State *L, int first, int last, int64_t *shape, int allow_infer) {
    int ndim = 0;
    if (first <= last && lua_type(L, first) == LUA_TTABLE) {
        luaL_argcheck(L, first == last, first + 1, "a shape table must be the only shape argument");
        lua_Integer n = (lua_Integer)lua_rawlen(L, first);
        if (n > DLC_MAX_DIMS)
            luaL_argerror(L, first, lua_pushfstring(L, "shape has %I dims, at most %d are supported",
                                                    (LUAI_UACINT)n, DLC_MAX_DIMS));
        for (int i = 0; i < (int)n; i++) {
            int isint;
            lua_rawgeti(L, first, i + 1);
            lua_Integer v = lua_tointegerx(L, -1, &isint);
            lua_pop(L, 1);
            if (!isint || v < (allow_infer ? -1 : 0))
                luaL_argerror(L, first,
                              lua_pushfstring(L, "shape entry %d must be an integer >= %d", i + 1,
                                              allow_infer ? -1 : 0));
            shape[ndim++] = (int64_t)v;
        }
    } else {
        if (last - first + 1 > DLC_MAX_DIMS)
            luaL_argerror(L, first + DLC_MAX_DIMS,
                          lua_pushfstring(L, "shape has %d dims, at most %d are supported",
                                          last - first + 1, DLC_MAX_DIMS));
        for (int a = first; a <= last; a++) {
            lua_Integer v = luaL_checkinteger(L, a);
            if (v < (allow_infer ? -1 : 0))
                luaL_argerror(L, a, allow_infer ? "size must be >= 0 (or -1 to infer)" : "size must be >= 0");
            shape[ndim++] = (int64_t)v;
        }
    }
    if (allow_infer) {
        int inferred = 0;
        for (int i = 0; i < ndim; i++) inferred += shape[i] == -1;
        if (inferred > 1) luaL_argerror(L, first, "at most one size may be -1");
    }
    return ndim;
}

static void pushshape(lua_State *L, const dlc_tensor *t) {
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; i++) {
        lua_pushinteger(L, (lua_Integer)t->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

/* ---------------------------------------------------------------------------
 * lifetime
 * --------------------------------------------------------------------------- */

/* The release behind __gc, __close and t:close() / t:free() (dlcL_newtype). */
static void tensor_release(void *box) { dlc_tensor_release(((tbox *)box)->t); }

/* ---------------------------------------------------------------------------
 * properties and element access
 * --------------------------------------------------------------------------- */

static int push_property(lua_State *L, dlc_tensor *t, const char *k) {
    switch (k[0]) {
    case 's':
        if (!strcmp(k, "shape")) return pushshape(L, t), 1;
        break;
    case 'n':
        if (!strcmp(k, "ndim")) return lua_pushinteger(L, t->ndim), 1;
        if (!strcmp(k, "numel")) return lua_pushinteger(L, (lua_Integer)t->numel), 1;
        break;
    case 'g':
        if (!strcmp(k, "grad")) {
            if (!t->grad) return lua_pushnil(L), 1;
            dlc_tensor **slot = newbox(L);
            *slot = dlc_tensor_retain(t->grad); /* shares the buffer; no new memory */
            return 1;
        }
        break;
    case 'r':
        if (!strcmp(k, "requires_grad")) return lua_pushboolean(L, t->requires_grad), 1;
        break;
    case 'i':
        if (!strcmp(k, "is_leaf")) return lua_pushboolean(L, !t->node && !t->graph_freed), 1;
        break;
    case 'o':
        if (!strcmp(k, "op")) return lua_pushstring(L, dlc_op_name(dlc_tensor_op(t))), 1;
        break;
    }
    return lua_pushnil(L), 1;
}

/* __index: methods first (upvalue 2), then integer positions, then properties. */
static int t_index(lua_State *L) {
    int kt = lua_type(L, 2);
    if (kt == LUA_TSTRING) {
        lua_pushvalue(L, 2);
        if (lua_rawget(L, lua_upvalueindex(2)) != LUA_TNIL) return 1;
        lua_pop(L, 1);
        return push_property(L, checkt(L, 1), lua_tostring(L, 2));
    }
    dlc_tensor *t = checkt(L, 1);
    if (kt != LUA_TNUMBER) return lua_pushnil(L), 1;
    lua_Integer i = luaL_checkinteger(L, 2);
    if (t->ndim == 0) return luaL_error(L, "cannot index a 0-dimensional tensor (use t:item())");
    int64_t k = checkpos(L, i, t->shape[0], 1);
    if (t->ndim == 1) return lua_pushnumber(L, t->data[k]), 1;
    int64_t rs = rowsize(t);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_tensor_view(t, k * rs, t->ndim - 1, t->shape + 1));
}

/* __newindex: t[i] = number (1-D element, or fills row i), t[i] = tensor (copies
 * into row i), t.requires_grad = bool.  In place, not recorded by autograd. */
static int t_newindex(lua_State *L) {
    dlc_tensor *t = checkt(L, 1);
    if (lua_type(L, 2) == LUA_TSTRING) {
        if (strcmp(lua_tostring(L, 2), "requires_grad") != 0)
            return luaL_error(L, "cannot set field '%s' of a Tensor", lua_tostring(L, 2));
        if (dlc_tensor_set_requires_grad(t, lua_toboolean(L, 3)) != DLC_OK) return dlcL_error(L);
        return 0;
    }
    lua_Integer i = luaL_checkinteger(L, 2);
    if (t->ndim == 0) return luaL_error(L, "cannot index a 0-dimensional tensor (use t:fill(v))");
    int64_t k = checkpos(L, i, t->shape[0], 1), rs = rowsize(t);
    float *row = t->data + k * rs;
    if (lua_type(L, 3) == LUA_TNUMBER) {
        float v = (float)lua_tonumber(L, 3);
        for (int64_t j = 0; j < rs; j++) row[j] = v;
        return 0;
    }
    dlc_tensor *src = dlcL_totensor(L, 3);
    if (!src) return luaL_typeerror(L, 3, "number or Tensor");
    if (src->numel != rs)
        return luaL_error(L, "cannot assign a tensor of %I elements to row %I of %I elements",
                          (LUAI_UACINT)src->numel, (LUAI_UACINT)i, (LUAI_UACINT)rs);
    memmove(row, src->data, (size_t)rs * sizeof(float));
    return 0;
}

/* Flat offset of the ndim positions at args first.. (exactly ndim of them). */
static int64_t checkoffset(lua_State *L, dlc_tensor *t, int first, const char *fn) {
    int n = lua_gettop(L) - first + 1;
    if (n != t->ndim)
        luaL_error(L, "%s: %d indices given for a %d-dimensional tensor", fn, n < 0 ? 0 : n, t->ndim);
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++)
        off = off * t->shape[d] + checkpos(L, luaL_checkinteger(L, first + d), t->shape[d], d + 1);
    return off;
}

static int t_get(lua_State *L) {
    dlc_tensor *t = checkt(L, 1);
    lua_pushnumber(L, t->data[checkoffset(L, t, 2, "get")]);
    return 1;
}

static int t_set(lua_State *L) {
    dlc_tensor *t = checkt(L, 1);
    float v = (float)luaL_checknumber(L, 2);
    t->data[checkoffset(L, t, 3, "set")] = v;
    lua_settop(L, 1);
    return 1;
}

static int t_item(lua_State *L) {
    dlc_tensor *t = checkt(L, 1);
    if (t->numel != 1) {
        char buf[64];
        return luaL_error(L, "item: tensor %s has %I elements, expected 1",
                          dlc_shape_str(t, buf, sizeof buf), (LUAI_UACINT)t->numel);
    }
    lua_pushnumber(L, t->data[0]);
    return 1;
}

static int t_size(lua_State *L) {
    dlc_tensor *t = checkt(L, 1);
    if (lua_isnoneornil(L, 2)) return pushshape(L, t), 1;
    lua_pushinteger(L, (lua_Integer)t->shape[dlcL_checkaxis(L, 2, t->ndim)]);
    return 1;
}

static int t_len(lua_State *L) {
    dlc_tensor *t = checkt(L, 1);
    if (t->ndim == 0) return luaL_error(L, "a 0-dimensional tensor has no length");
    lua_pushinteger(L, (lua_Integer)t->shape[0]);
    return 1;
}

/* Tables (tolist) or brace pairs (tostring) of the nested rendering: 1 + shape[0] +
 * shape[0]*shape[1] + ...  Without elements this is unbounded ([2^40, 0] has none but
 * 2^40 rows); the prefix products stay below INT64_MAX / 4 (dlc_shape_numel). */
static int64_t nested_groups(const dlc_tensor *t) {
    int64_t g = 0, p = 1;
    for (int i = 0; i < t->ndim && p > 0; i++) {
        g += p;
        p *= t->shape[i];
    }
    return g;
}

#define TOLIST_EMPTY_MAX ((int64_t)1 << 24)

static void pushlist(lua_State *L, const float *d, const int64_t *shape, int ndim) {
    if (ndim == 0) {
        lua_pushnumber(L, *d);
        return;
    }
    int64_t stride = 1;
    for (int i = 1; i < ndim; i++) stride *= shape[i];
    luaL_checkstack(L, 2, "tolist");
    lua_createtable(L, shape[0] < INT_MAX ? (int)shape[0] : 0, 0);
    for (int64_t i = 0; i < shape[0]; i++) {
        pushlist(L, d + i * stride, shape + 1, ndim - 1);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

static int t_tolist(lua_State *L) {
    dlc_tensor *t = checkt(L, 1);
    if (t->numel == 0 && nested_groups(t) > TOLIST_EMPTY_MAX) {
        char buf[64];
        return luaL_error(L, "tolist: a %s tensor has no elements but would need %I empty tables",
                          dlc_shape_str(t, buf, sizeof buf), (LUAI_UACINT)nested_groups(t));
    }
    pushlist(L, t->data, t->shape, t->ndim);
    return 1;
}

/* ---------------------------------------------------------------------------
 * tostring: "Tensor[2,3] {{1, 2, 3}, {4, 5, 6}}"; large tensors show the first
 * values flat: "Tensor[100,100] {0.5, 1, -2, 3, 0.25, 7, ...}".
 * --------------------------------------------------------------------------- */

#define TOSTRING_FULL_MAX 64
#define TOSTRING_HEAD 6

static void addnum(luaL_Buffer *B, float v) {
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%.6g", (double)v);
    luaL_addlstring(B, buf, (size_t)n);
}

static void addnested(luaL_Buffer *B, const float *d, const int64_t *shape, int ndim) {
    if (ndim == 0) {
        addnum(B, *d);
        return;
    }
    int64_t stride = 1;
    for (int i = 1; i < ndim; i++) stride *= shape[i];
    luaL_addchar(B, '{');
    for (int64_t i = 0; i < shape[0]; i++) {
        if (i) luaL_addstring(B, ", ");
        addnested(B, d + i * stride, shape + 1, ndim - 1);
    }
    luaL_addchar(B, '}');
}

static int t_tostring(lua_State *L) {
    tbox *b = luaL_checkudata(L, 1, DLCL_TENSOR);
    dlc_tensor *t = b->t;
    if (!t) return lua_pushliteral(L, "Tensor (freed)"), 1;
    char shp[64];
    luaL_Buffer B;
    luaL_buffinit(L, &B);
    luaL_addstring(&B, "Tensor");
    luaL_addstring(&B, dlc_shape_str(t, shp, sizeof shp));
    luaL_addchar(&B, ' ');
    if (t->numel == 0 && nested_groups(t) > TOSTRING_FULL_MAX) {
        luaL_addstring(&B, "{...}"); /* e.g. [2^40, 0]: no values, too many empty rows */
    } else if (t->numel <= TOSTRING_FULL_MAX) {
        addnested(&B, t->data, t->shape, t->ndim);
    } else {
        luaL_addchar(&B, '{');
        for (int i = 0; i < TOSTRING_HEAD; i++) {
            addnum(&B, t->data[i]);
            luaL_addstring(&B, ", ");
        }
        luaL_addstring(&B, "...}");
    }
    luaL_pushresult(&B);
    return 1;
}

/* ---------------------------------------------------------------------------
 * registration
 * --------------------------------------------------------------------------- */

/* Methods only; the op methods are added by dlcL_register_ops (lops.c). */
static const luaL_Reg tensor_methods[] = {
    {"get", t_get},
    {"set", t_set},
    {"item", t_item},
    {"size", t_size},
    {"tolist", t_tolist},
    {NULL, NULL},
};

/* The arithmetic metamethods are added by dlcL_register_ops (lops.c). */
static const luaL_Reg tensor_meta[] = {
    {"__tostring", t_tostring},
    {"__len", t_len},
    {"__newindex", t_newindex},
    {NULL, NULL},
};

/* __gc, __close, :close() from dlcL_newtype; __index looks up methods itself. */
static const dlcL_type tensor_type = {DLCL_TENSOR, tensor_release, tensor_methods, tensor_meta,
                                      t_index};

void dlcL_open_tensor(lua_State *L, int mod, int st) {
    mod = lua_absindex(L, mod);
    st = lua_absindex(L, st);

    dlcL_newtype(L, st, &tensor_type);
    int mt = lua_gettop(L) - 1, methods = mt + 1;
    lua_getfield(L, methods, "close");
    lua_setfield(L, methods, "free"); /* the older name, kept as an alias */
    dlcL_register_ops(L, methods, mt, mod, st); /* ops: methods, diloco.<op>, metamethods */
    lua_setfield(L, mod, "Tensor"); /* the methods table: Lua code may add methods */
    lua_pop(L, 1);
}
