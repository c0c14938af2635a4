/*
 * lops.c - the op bindings of diloco.Tensor: one method per op of ops.h (most also
 * exported as diloco.<op>), the arithmetic metamethods, and the in-place and autograd
 * methods.  The Tensor type itself (boxes, lifetime, properties, element access,
 * tostring) is ltensor.c, which registers these through dlcL_register_ops.
 *
 * Every binding follows the pattern of ldiloco.h: check all arguments, push an empty
 * box, then RESULT(L, slot, dlc_<op>(...)) stores the new tensor or raises the core's
 * error.  The rare op that holds a temporary (n / x) releases it before raising.
 * Positions and axes are 1-based (negative counts from the end), index values stored
 * in tensors are 0-based: the conventions of ltensor.c.
 */
#include <limits.h>
#include "ldiloco.h"

#define checkt dlcL_checktensor
#define newbox dlcL_newtensor
#define STATE(L) DLCL_UPSTATE(L)
#define RESULT DLCL_RESULT

/* An integer argument that fits in an int. */
static int checkint(lua_State *L, int arg) {
    lua_Integer v = luaL_checkinteger(L, arg);
    luaL_argcheck(L, v >= INT_MIN && v <= INT_MAX, arg, "integer out of range");
    return (int)v;
}

/* The ops whose binding is only "check the arguments, push a box, RESULT(fn(...))", one
 * line each, by what they take: OP1 the Tensor at 1, OP2 the Tensors at 1 and 2, OP3 those
 * at 1, 2 and 3, OP1N the Tensor at 1 and a number at 2 (as a float). */
#define OP1(name, fn)                        \
    static int name(lua_State *L) {          \
        dlc_tensor *x = checkt(L, 1);        \
        dlc_tensor **slot = newbox(L);       \
        return RESULT(L, slot, fn(x));       \
    }
#define OP2(name, fn)                                      \
    static int name(lua_State *L) {                        \
        dlc_tensor *a = checkt(L, 1), *b = checkt(L, 2);   \
        dlc_tensor **slot = newbox(L);                     \
        return RESULT(L, slot, fn(a, b));                  \
    }
#define OP3(name, fn)                                                        \
    static int name(lua_State *L) {                                          \
        dlc_tensor *a = checkt(L, 1), *b = checkt(L, 2), *c = checkt(L, 3);  \
        dlc_tensor **slot = newbox(L);                                       \
        return RESULT(L, slot, fn(a, b, c));                                 \
    }
#define OP1N(name, fn)                               \
    static int name(lua_State *L) {                  \
        dlc_tensor *x = checkt(L, 1);                \
        float n = (float)luaL_checknumber(L, 2);     \
        dlc_tensor **slot = newbox(L);               \
        return RESULT(L, slot, fn(x, n));            \
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
    dlc_tensor **b = dlcL_testtensor(L, arg);
    if (!b) luaL_typeerror(L, arg, "Tensor or number");
    if (!*b) dlcL_freed_error(L, arg);
    return *b;
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

OP1N(t_pow, dlc_pow)

static dlc_tensor *neg(dlc_tensor *x) { return dlc_unary(DLC_UNARY_NEG, x); }
OP1(t_unm, neg)
OP2(t_bias_add, dlc_bias_add)

static int t_affine(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    float alpha = (float)luaL_checknumber(L, 2), beta = (float)luaL_optnumber(L, 3, 0.0);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_affine(x, alpha, beta));
}

OP1N(t_scale, dlc_scale)

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
        axis = dlcL_checkaxis(L, 2, x->ndim);
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
    a = checkt(L, 1); /* the options' __index may have freed them */
    b = checkt(L, 2);
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_matmul(a, b, ta, tb));
}

OP1(t_softmax, dlc_softmax)
OP1(t_log_softmax, dlc_log_softmax)

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

OP2(t_index_select, dlc_index_select)
OP2(t_embedding, dlc_embedding)
OP3(t_index_add, dlc_index_add)
OP2(t_gather, dlc_gather)

/* values, indices = x:topk(k) */
static int t_topk(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    int k = checkint(L, 2);
    dlc_tensor **vslot = newbox(L), **islot = newbox(L), *v, *i;
    if (dlc_topk(x, k, &v, &i) != DLC_OK) return dlcL_error(L);
    *vslot = v; /* both owned by their boxes before a GC step can run */
    *islot = i;
    dlcL_gc_account(L, STATE(L), v);
    dlcL_gc_account(L, STATE(L), i);
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
    int a0 = lua_isnoneornil(L, 2) ? x->ndim - 2 : dlcL_checkaxis(L, 2, x->ndim);
    int a1 = lua_isnoneornil(L, 3) ? x->ndim - 1 : dlcL_checkaxis(L, 3, x->ndim);
    if (a0 < 0) return luaL_argerror(L, 1, "transpose needs at least 2 dims");
    dlc_tensor **slot = newbox(L);
    return RESULT(L, slot, dlc_transpose(x, a0, a1));
}

/* t:slice(axis, i[, j]): positions i..j inclusive (j defaults to -1, the end), like
 * string.sub; j = i - 1 gives an empty slice. */
static int t_slice(lua_State *L) {
    dlc_tensor *x = checkt(L, 1);
    int axis = dlcL_checkaxis(L, 2, x->ndim);
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
    lua_settop(L, 2); /* the scratch array below must not land at the axis position */
    lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
    if (n < 1) return luaL_argerror(L, 1, "needs at least one tensor");
    if (n > INT_MAX / (lua_Integer)sizeof(dlc_tensor *)) return luaL_argerror(L, 1, "too many tensors");
    dlc_tensor *small[CONCAT_STACK];
    dlc_tensor **xs = n <= CONCAT_STACK ? small
                                        : lua_newuserdatauv(L, (size_t)n * sizeof *xs, 0); /* GC'd */
    for (lua_Integer k = 0; k < n; k++) {
        lua_rawgeti(L, 1, k + 1);
        dlc_tensor **b = dlcL_testtensor(L, -1);
        if (!b)
            return luaL_argerror(L, 1, lua_pushfstring(L, "element %I is a %s, expected a Tensor",
                                                       (LUAI_UACINT)(k + 1), luaL_typename(L, -1)));
        if (!*b)
            return luaL_argerror(L, 1, lua_pushfstring(L, "element %I: tensor has been freed",
                                                       (LUAI_UACINT)(k + 1)));
        xs[k] = *b; /* stays alive: the table holds it */
        lua_pop(L, 1);
    }
    int axis = lua_isnoneornil(L, 2) ? 0 : dlcL_checkaxis(L, 2, xs[0]->ndim);
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

OP1(t_clone, dlc_tensor_clone)
OP1(t_detach, dlc_tensor_detach)

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

/* Methods only: in place and autograd. */
static const luaL_Reg op_methods[] = {
    {"fill", t_fill},
    {"copy", t_copy},
    {"zero_grad", t_zero_grad},
    {"requires_grad_", t_requires_grad_},
    {"retain_grad", t_retain_grad},
    {"backward", t_backward},
    {NULL, NULL},
};

/* Arithmetic metamethods: a + b, 2 / a, a ^ 2, -a. */
static const luaL_Reg op_meta[] = {
    {"__add", t_add},
    {"__sub", t_sub},
    {"__mul", t_mul},
    {"__div", t_div},
    {"__pow", t_powmm},
    {"__unm", t_unm},
    {NULL, NULL},
};

void dlcL_register_ops(lua_State *L, int methods, int mt, int mod, int st) {
    methods = lua_absindex(L, methods);
    mt = lua_absindex(L, mt);
    mod = lua_absindex(L, mod);
    st = lua_absindex(L, st);

    dlcL_setfuncs(L, methods, st, op_funcs);
    dlcL_setfuncs(L, methods, st, op_methods);
    dlcL_setfuncs(L, mod, st, op_funcs);
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
    dlcL_setfuncs(L, mt, st, op_meta);
}
