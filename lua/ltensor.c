/*
 * ltensor.c - the diloco.Tensor userdata: lifetime, properties, element access,
 * metamethods, and one method per op of ops.h (also exported as diloco.<op>).
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
 * collector.  __gc, __close and t:free() share one idempotent release; any other
 * use of a freed tensor raises "tensor has been freed".  Every argument is checked
 * before anything is acquired; the rare op that holds a temporary (n / x) releases
 * it before raising.
 *
 * Tensors returned by t.grad, t[i] (N-D), views, reshape and detach share storage
 * with their source: writes through one are visible in the other.
 */
#include <limits.h>
#include <math.h>
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

static void gc_account(lua_State *L, dlcL_state *st, const dlc_tensor *t) {
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
    tbox *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->t = NULL;
    luaL_setmetatable(L, DLCL_TENSOR);
    return &b->t;
}

int dlcL_settensor(lua_State *L, dlcL_state *st, dlc_tensor **slot, dlc_tensor *t) {
    if (!t) return dlcL_error(L);
    *slot = t;
    gc_account(L, st, t);
    return 1;
}

static int freed_error(lua_State *L, int arg) {
    return luaL_argerror(L, arg, "tensor has been freed");
}

dlc_tensor *dlcL_checktensor(lua_State *L, int arg) {
    tbox *b = luaL_checkudata(L, arg, DLCL_TENSOR);
    if (!b->t) freed_error(L, arg);
    return b->t;
}

dlc_tensor *dlcL_opttensor(lua_State *L, int arg) {
    return lua_isnoneornil(L, arg) ? NULL : dlcL_checktensor(L, arg);
}

dlc_tensor *dlcL_totensor(lua_State *L, int arg) {
    tbox *b = luaL_testudata(L, arg, DLCL_TENSOR);
    return b ? b->t : NULL;
}

#define checkt dlcL_checktensor
#define newbox dlcL_newtensor
#define STATE(L) DLCL_UPSTATE(L)
/* Finish an op: store the result in the box on the top, or raise the core's error. */
#define RESULT(L, slot, expr) dlcL_settensor((L), STATE(L), (slot), (expr))

/* A 1-based (negative = from the end) axis argument -> 0-based axis. */
static int checkaxis(lua_State *L, int arg, int ndim) {
    lua_Integer a = luaL_checkinteger(L, arg);
    if (a >= 1 && a <= ndim) return (int)a - 1;
    if (a < 0 && a >= -ndim) return ndim + (int)a;
    return luaL_argerror(L, arg,
                         lua_pushfstring(L, "axis %I is out of range for a %d-dimensional tensor "
                                            "(axes are 1-based; negative counts from the end)",
                                         (LUAI_UACINT)a, ndim));
}

static int checkint(lua_State *L, int arg) {
    lua_Integer v = luaL_checkinteger(L, arg);
    luaL_argcheck(L, v >= INT_MIN && v <= INT_MAX, arg, "integer out of range");
    return (int)v;
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

/* __gc, __close and t:free(): one idempotent release. */
static int t_free(lua_State *L) {
    tbox *b = luaL_checkudata(L, 1, DLCL_TENSOR);
    dlc_tensor *t = b->t;
    b->t = NULL;
    dlc_tensor_release(t);
    return 0;
}

/* ---------------------------------------------------------------------------
 * properties and element access
 * --------------------------------------------------------------------------- */

static int t_requires_grad_(lua_State *L);

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
    lua_pushinteger(L, (lua_Integer)t->shape[checkaxis(L, 2, t->ndim)]);
    return 1;
}

static int t_len(lua_State *L) {
    dlc_tensor *t = checkt(L, 1);
    if (t->ndim == 0) return luaL_error(L, "a 0-dimensional tensor has no length");
    lua_pushinteger(L, (lua_Integer)t->shape[0]);
    return 1;
}

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
    if (t->numel <= TOSTRING_FULL_MAX) {
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
 * arithmetic: tensor (op) tensor with broadcasting, or tensor (op) number
 * --------------------------------------------------------------------------- */

enum { AR_ADD, AR_SUB, AR_MUL, AR_DIV, AR_POW };

/* The tensor at arg, or NULL with *n set when it is a number; raises otherwise. */
static dlc_tensor *tensor_or_number(lua_State *L, int arg, lua_Number *n) {
    if (lua_type(L, arg) == LUA_TNUMBER) {
        *n = lua_tonumber(L, arg);
        return NULL;
    }
    tbox *b = luaL_testudata(L, arg, DLCL_TENSOR);
    if (!b) luaL_typeerror(L, arg, "Tensor or number");
    if (!b->t) freed_error(L, arg);
    return b->t;
}

static int arith(lua_State *L, int op) {
    lua_Number na = 0, nb = 0;
    dlc_tensor *a = tensor_or_number(L, 1, &na), *b = tensor_or_number(L, 2, &nb);
    if (!a && !b) return luaL_typeerror(L, 1, "Tensor");
    dlc_tensor **slot = newbox(L), *r = NULL;
    switch (op) {
    case AR_ADD:
        r = a && b ? dlc_add(a, b) : a ? dlc_affine(a, 1.0f, (float)nb) : dlc_affine(b, 1.0f, (float)na);
        break;
    case AR_SUB:
        r = a && b ? dlc_sub(a, b) : a ? dlc_affine(a, 1.0f, (float)-nb) : dlc_affine(b, -1.0f, (float)na);
        break;
    case AR_MUL:
        r = a && b ? dlc_mul(a, b) : a ? dlc_scale(a, (float)nb) : dlc_scale(b, (float)na);
        break;
    case AR_DIV:
        if (a && b) {
            r = dlc_div(a, b);
        } else if (a) {
            r = dlc_scale(a, (float)(1.0 / nb));
        } else { /* n / x = n * x^-1; the temporary is released before any raise */
            dlc_tensor *inv = dlc_pow(b, -1.0f);
            if (!inv || na == 1.0) {
                r = inv;
            } else {
                r = dlc_scale(inv, (float)na);
                dlc_tensor_release(inv);
            }
        }
        break;
    case AR_POW:
        if (!a || b) return luaL_typeerror(L, b ? 2 : 1, a ? "number" : "Tensor");
        r = dlc_pow(a, (float)nb);
        break;
    }
    return RESULT(L, slot, r);
}

static int t_add(lua_State *L) { return arith(L, AR_ADD); }
static int t_sub(lua_State *L) { return arith(L, AR_SUB); }
static int t_mul(lua_State *L) { return arith(L, AR_MUL); }
static int t_div(lua_State *L) { return arith(L, AR_DIV); }
static int t_powmm(lua_State *L) { return arith(L, AR_POW); }

static int t_pow(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    float p = (float)luaL_checknumber(L, 2);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_pow(x, p));
}

static int t_unm(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_unary(DLC_UNARY_NEG, x));
}

static int t_bias_add(lua_State *L) {
    dlc_tensor *x = checkt(L, 1), *b = checkt(L, 2);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_bias_add(x, b));
}

static int t_affine(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    float alpha = (float)luaL_checknumber(L, 2), beta = (float)luaL_optnumber(L, 3, 0.0);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_affine(x, alpha, beta));
}

static int t_scale(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    float alpha = (float)luaL_checknumber(L, 2);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_scale(x, alpha));
}

/* One closure per dlc_unary_op; upvalue 2 holds the op. */
static int t_unary(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    dlc_unary_op op = (dlc_unary_op)lua_tointeger(L, lua_upvalueindex(2));
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_unary(op, x));
}

/* ---------------------------------------------------------------------------
 * reductions: t:sum() over everything, t:sum(axis[, keepdim])
 * --------------------------------------------------------------------------- */

enum { RD_SUM, RD_MEAN, RD_MAX, RD_ARGMAX };

static int reduce(lua_State *L, int kind) {
    dlc_tensor *x = checkt(L, 1), *r;
    int all = lua_isnoneornil(L, 2), axis = 0, keepdim = 0;
    if (!all) {
        axis = checkaxis(L, 2, x->ndim);
        keepdim = lua_toboolean(L, 3);
    }
    dlc_tensor **slot = newbox(L);
    if (all && kind == RD_SUM) {
        r = dlc_sum_all(x);
    } else if (all && kind == RD_MEAN) {
        r = dlc_mean_all(x);
    } else if (all) { /* max/argmax over everything: of the flattened tensor */
        int64_t flat = -1;
        dlc_tensor *f = dlc_reshape(x, 1, &flat);
        r = !f ? NULL : kind == RD_MAX ? dlc_max(f, 0, 0) : dlc_argmax(f, 0, 0);
        dlc_tensor_release(f);
    } else {
        switch (kind) {
        case RD_SUM: r = dlc_sum(x, axis, keepdim); break;
        case RD_MEAN: r = dlc_mean(x, axis, keepdim); break;
        case RD_MAX: r = dlc_max(x, axis, keepdim); break;
        default: r = dlc_argmax(x, axis, keepdim); break;
        }
    }
    return RESULT(L, slot, r);
}

static int t_sum(lua_State *L) { return reduce(L, RD_SUM); }
static int t_mean(lua_State *L) { return reduce(L, RD_MEAN); }
static int t_max(lua_State *L) { return reduce(L, RD_MAX); }
static int t_argmax(lua_State *L) { return reduce(L, RD_ARGMAX); }

/* ---------------------------------------------------------------------------
 * linear algebra, normalisation, losses
 * --------------------------------------------------------------------------- */

/* x:linear(w[, b]): x . w^T + b with w [out, in] (fused; one pass over the output). */
static int t_linear(lua_State *L) {
    dlc_tensor *x = dlcL_checktensor(L, 1), *w = dlcL_checktensor(L, 2), *b = dlcL_opttensor(L, 3);
    dlc_tensor **slot = dlcL_newtensor(L);
    return RESULT(L, slot, dlc_linear(x, w, b));
}

/* a:matmul(b[, ta, tb]) or a:matmul(b, {ta = bool, tb = bool}). */
static int t_matmul(lua_State *L) {
    dlc_tensor *a = checkt(L, 1), *b = checkt(L, 2);
    int ta, tb;
    if (lua_type(L, 3) == LUA_TTABLE) {
        lua_getfield(L, 3, "ta");
        lua_getfield(L, 3, "tb");
        ta = lua_toboolean(L, -2);
        tb = lua_toboolean(L, -1);
        lua_pop(L, 2);
    } else {
        ta = lua_toboolean(L, 3);
        tb = lua_toboolean(L, 4);
    }
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_matmul(a, b, ta, tb));
}

static int t_softmax(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_softmax(x));
}

static int t_log_softmax(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_log_softmax(x));
}

static int t_cross_entropy(lua_State *L) {
    dlc_tensor *logits = checkt(L, 1), *targets = checkt(L, 2);
    int ignore = lua_isnoneornil(L, 3) ? -1 : checkint(L, 3);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_cross_entropy(logits, targets, ignore));
}

static int t_layernorm(lua_State *L) {
    dlc_tensor *x = checkt(L, 1), *w = dlcL_opttensor(L, 2), *b = dlcL_opttensor(L, 3);
    float eps = (float)luaL_optnumber(L, 4, 1e-5);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_layernorm(x, w, b, eps));
}

static int t_rmsnorm(lua_State *L) {
    dlc_tensor *x = checkt(L, 1), *w = dlcL_opttensor(L, 2);
    float eps = (float)luaL_optnumber(L, 3, 1e-5);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_rmsnorm(x, w, eps));
}

/* ---------------------------------------------------------------------------
 * indexing (index values are 0-based)
 * --------------------------------------------------------------------------- */

static int t_index_select(lua_State *L) {
    dlc_tensor *x = checkt(L, 1), *idx = checkt(L, 2);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_index_select(x, idx));
}

static int t_embedding(lua_State *L) {
    dlc_tensor *w = checkt(L, 1), *idx = checkt(L, 2);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_embedding(w, idx));
}

static int t_index_add(lua_State *L) {
    dlc_tensor *base = checkt(L, 1), *idx = checkt(L, 2), *src = checkt(L, 3);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_index_add(base, idx, src));
}

static int t_gather(lua_State *L) {
    dlc_tensor *x = checkt(L, 1), *idx = checkt(L, 2);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_gather(x, idx));
}

/* values, indices = x:topk(k) */
static int t_topk(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    int k = checkint(L, 2);
    dlc_tensor **vslot = newbox(L), **islot = newbox(L), *v, *i;
    if (dlc_topk(x, k, &v, &i) != DLC_OK) return dlcL_error(L);
    *vslot = v; /* both owned by their boxes before a GC step can run */
    *islot = i;
    gc_account(L, STATE(L), v);
    gc_account(L, STATE(L), i);
    return 2;
}

/* t:attention(heads[, causal = true]); nil counts as the default. */
static int t_attention(lua_State *L) {
    dlc_tensor *qkv = checkt(L, 1);
    int heads = checkint(L, 2);
    int causal = lua_isnoneornil(L, 3) ? 1 : lua_toboolean(L, 3);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_attention(qkv, heads, causal));
}

/* ---------------------------------------------------------------------------
 * shape
 * --------------------------------------------------------------------------- */

/* t:reshape(2, -1) or t:reshape({2, -1}); shares storage. */
static int t_reshape(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    int64_t shape[DLC_MAX_DIMS];
    int ndim = dlcL_checkshape(L, 2, lua_gettop(L), shape, 1);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_reshape(x, ndim, shape));
}

/* t:transpose(a1, a2), both default to the last two axes (-2, -1). */
static int t_transpose(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    int a0 = lua_isnoneornil(L, 2) ? x->ndim - 2 : checkaxis(L, 2, x->ndim);
    int a1 = lua_isnoneornil(L, 3) ? x->ndim - 1 : checkaxis(L, 3, x->ndim);
    if (a0 < 0) return luaL_argerror(L, 1, "transpose needs at least 2 dims");
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_transpose(x, a0, a1));
}

/* t:slice(axis, i[, j]): positions i..j inclusive (j defaults to -1, the end), like
 * string.sub; j = i - 1 gives an empty slice. */
static int t_slice(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    int axis = checkaxis(L, 2, x->ndim);
    lua_Integer n = (lua_Integer)x->shape[axis];
    lua_Integer i = luaL_checkinteger(L, 3), j = luaL_optinteger(L, 4, -1);
    lua_Integer i1 = i < 0 ? n + i + 1 : i, j1 = j < 0 ? n + j + 1 : j;
    if (i1 < 1 || i1 > n + 1 || j1 < i1 - 1 || j1 > n)
        return luaL_error(L, "slice: positions %I..%I are out of range for axis %d of size %I",
                          (LUAI_UACINT)i, (LUAI_UACINT)j, axis + 1, (LUAI_UACINT)n);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_slice(x, axis, (int64_t)i1 - 1, (int64_t)(j1 - i1 + 1)));
}

/* diloco.concat({t1, t2, ...}[, axis = 1]) */
#define CONCAT_STACK 16
static int t_concat(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
    if (n < 1) return luaL_argerror(L, 1, "needs at least one tensor");
    if (n > INT_MAX / (lua_Integer)sizeof(dlc_tensor *)) return luaL_argerror(L, 1, "too many tensors");
    dlc_tensor *small[CONCAT_STACK];
    dlc_tensor **xs = n <= CONCAT_STACK ? small
                                        : lua_newuserdatauv(L, (size_t)n * sizeof *xs, 0); /* GC'd */
    for (lua_Integer k = 0; k < n; k++) {
        lua_rawgeti(L, 1, k + 1);
        tbox *b = luaL_testudata(L, -1, DLCL_TENSOR);
        if (!b)
            return luaL_argerror(L, 1, lua_pushfstring(L, "element %I is a %s, expected a Tensor",
                                                       (LUAI_UACINT)(k + 1), luaL_typename(L, -1)));
        if (!b->t)
            return luaL_argerror(L, 1, lua_pushfstring(L, "element %I: tensor has been freed",
                                                       (LUAI_UACINT)(k + 1)));
        xs[k] = b->t; /* stays alive: the table holds it */
        lua_pop(L, 1);
    }
    int axis = lua_isnoneornil(L, 2) ? 0 : checkaxis(L, 2, xs[0]->ndim);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_concat((int)n, xs, axis));
}

/* ---------------------------------------------------------------------------
 * regularisation, copies, in-place, autograd
 * --------------------------------------------------------------------------- */

/* t:dropout(p[, generator]); without a Generator uses the diloco.seed generator. */
static int t_dropout(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    float p = (float)luaL_checknumber(L, 2);
    dlc_rng *g = lua_isnoneornil(L, 3) ? &STATE(L)->rng : luaL_checkudata(L, 3, DLCL_GENERATOR);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_dropout(x, p, g));
}

static int t_clone(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_tensor_clone(x));
}

static int t_detach(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_tensor_detach(x));
}

static int t_fill(lua_State *L) {
    dlc_tensor *t = checkt(L, 1);
    dlc_tensor_fill(t, (float)luaL_checknumber(L, 2));
    lua_settop(L, 1);
    return 1;
}

static int t_copy(lua_State *L) {
    dlc_tensor *dst = checkt(L, 1), *src = checkt(L, 2);
    if (dlc_tensor_copy(dst, src) != DLC_OK) return dlcL_error(L);
    lua_settop(L, 1);
    return 1;
}

static int t_zero_grad(lua_State *L) {
    dlc_tensor_zero_grad(checkt(L, 1));
    lua_settop(L, 1);
    return 1;
}

/* t:requires_grad_([on = true]) -> t.  Leaves only. */
static int t_requires_grad_(lua_State *L) {
    dlc_tensor *t = checkt(L, 1);
    int on = lua_isnone(L, 2) ? 1 : lua_toboolean(L, 2);
    if (dlc_tensor_set_requires_grad(t, on) != DLC_OK) return dlcL_error(L);
    lua_settop(L, 1);
    return 1;
}

/* t:retain_grad() -> t: keep .grad of a non-leaf after backward. */
static int t_retain_grad(lua_State *L) {
    dlc_tensor *t = checkt(L, 1);
    t->retain_grad = 1;
    lua_settop(L, 1);
    return 1;
}

/* t:backward([grad][, retain_graph]) */
static int t_backward(lua_State *L) {
    dlc_tensor *t = checkt(L, 1), *g = NULL;
    int retain;
    if (lua_type(L, 2) == LUA_TBOOLEAN) {
        retain = lua_toboolean(L, 2);
    } else {
        g = dlcL_opttensor(L, 2);
        retain = lua_toboolean(L, 3);
    }
    if (dlc_backward(t, g, retain) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* ---------------------------------------------------------------------------
 * registration
 * --------------------------------------------------------------------------- */

/* Ops: methods of Tensor AND functions of the module (diloco.matmul(a, b)). */
static const luaL_Reg op_funcs[] = {
    {"add", t_add},
    {"sub", t_sub},
    {"mul", t_mul},
    {"div", t_div},
    {"bias_add", t_bias_add},
    {"affine", t_affine},
    {"scale", t_scale},
    {"pow", t_pow},
    {"sum", t_sum},
    {"mean", t_mean},
    {"max", t_max},
    {"argmax", t_argmax},
    {"matmul", t_matmul},
    {"linear", t_linear},
    {"softmax", t_softmax},
    {"log_softmax", t_log_softmax},
    {"cross_entropy", t_cross_entropy},
    {"layernorm", t_layernorm},
    {"rmsnorm", t_rmsnorm},
    {"index_select", t_index_select},
    {"embedding", t_embedding},
    {"index_add", t_index_add},
    {"gather", t_gather},
    {"topk", t_topk},
    {"attention", t_attention},
    {"reshape", t_reshape},
    {"view", t_reshape},
    {"transpose", t_transpose},
    {"slice", t_slice},
    {"dropout", t_dropout},
    {"clone", t_clone},
    {"detach", t_detach},
    {NULL, NULL},
};

/* Methods only. */
static const luaL_Reg tensor_methods[] = {
    {"free", t_free},
    {"get", t_get},
    {"set", t_set},
    {"item", t_item},
    {"size", t_size},
    {"tolist", t_tolist},
    {"fill", t_fill},
    {"copy", t_copy},
    {"zero_grad", t_zero_grad},
    {"requires_grad_", t_requires_grad_},
    {"retain_grad", t_retain_grad},
    {"backward", t_backward},
    {NULL, NULL},
};

static const luaL_Reg tensor_meta[] = {
    {"__gc", t_free},
    {"__close", t_free},
    {"__tostring", t_tostring},
    {"__len", t_len},
    {"__newindex", t_newindex},
    {"__add", t_add},
    {"__sub", t_sub},
    {"__mul", t_mul},
    {"__div", t_div},
    {"__pow", t_powmm},
    {"__unm", t_unm},
    {NULL, NULL},
};

/* Registers into the table at `tab` every function of l with the state (at `st`)
 * as upvalue 1. */
static void setfuncs(lua_State *L, int tab, int st, const luaL_Reg *l) {
    lua_pushvalue(L, tab);
    lua_pushvalue(L, st);
    luaL_setfuncs(L, l, 1);
    lua_pop(L, 1);
}

void dlcL_open_tensor(lua_State *L, int mod, int st) {
    mod = lua_absindex(L, mod);
    st = lua_absindex(L, st);

    lua_createtable(L, 0, 64); /* methods; also exposed as diloco.Tensor */
    int methods = lua_gettop(L);
    setfuncs(L, methods, st, op_funcs);
    setfuncs(L, methods, st, tensor_methods);
    setfuncs(L, mod, st, op_funcs);
    lua_pushvalue(L, st); /* concat: module only (its first argument is a list) */
    lua_pushcclosure(L, t_concat, 1);
    lua_setfield(L, mod, "concat");
    for (int op = 0; op < DLC_UNARY_COUNT; op++) {
        lua_pushvalue(L, st);
        lua_pushinteger(L, op);
        lua_pushcclosure(L, t_unary, 2);
        lua_pushvalue(L, -1);
        lua_setfield(L, methods, dlc_unary_name((dlc_unary_op)op));
        lua_setfield(L, mod, dlc_unary_name((dlc_unary_op)op));
    }

    luaL_newmetatable(L, DLCL_TENSOR);
    int mt = lua_gettop(L);
    setfuncs(L, mt, st, tensor_meta);
    lua_pushvalue(L, st);
    lua_pushvalue(L, methods);
    lua_pushcclosure(L, t_index, 2);
    lua_setfield(L, mt, "__index");
    lua_pop(L, 1);

    lua_setfield(L, mod, "Tensor"); /* the methods table: Lua code may add methods */
}
