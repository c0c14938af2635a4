/*
 * ljson.c - JSON for Lua: diloco.json_encode, diloco.json_decode and the
 * diloco.json_null sentinel (jansson underneath).
 *
 *     diloco.json_encode({ step = 3, loss = 2.5 })           --> {"step":3,"loss":2.5}
 *     diloco.json_encode(t, { indent = 2, sort_keys = true })  -- pretty, stable order
 *     local v = assert(diloco.json_decode('{"a":[1,null,2.5]}'))
 *     -- v.a[1] == 1 (integer), v.a[2] == diloco.json_null, v.a[3] == 2.5 (float)
 *
 * Errors (ldiloco.h): a value that JSON cannot represent raises (it is the caller's
 * mistake); a string that is not valid JSON returns nil, message, "DLC_ERR_FORMAT".
 *
 * JSON mapping.  Encoding: a table whose keys are exactly 1..n is an array; an empty
 * table is the empty array []; any other table is an object and every key must be a
 * string.  Integers stay integers, floats are written with 17 significant digits, so
 * every double reads back exactly (0.1 -> 0.10000000000000001, -0.0 keeps its sign),
 * always with a '.' or exponent (2.0 -> 2.0), so decode(encode(x)) keeps Lua's
 * integer/float subtype.  NaN and +-inf, functions, userdata other than json_null,
 * non-UTF-8 strings and nesting deeper than 100 raise an error naming the path
 * (".summary.loss", ".losses[3]").  Objects come out in
 * table order unless sort_keys is set.  The default is compact, one line (JSON lines).
 * Decoding: objects and arrays become tables, null is nil in an object (the key is
 * absent) and diloco.json_null in an array or at the top level, so arrays keep their
 * length; duplicate object keys are an error.  Both directions use jansson: the
 * encoder walks the Lua value into a json_t tree (checking it as above) and
 * serialises it with json_dumps.
 *
 * Lifetime: the encoder's tree and its text and the decoded document are held
 * across calls that may raise in a dlcL_res box (ldiloco.h), so a Lua error never
 * leaks them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "ldiloco.h"

#define DLCL_JSONNULL "diloco.json_null"
#define DLCL_JSON_MAX_DEPTH 100
#define DLCL_JSON_MAX_INDENT 16

static const char json_null_key = 0; /* registry key of the json_null sentinel */

static void json_release(void *p) { json_decref(p); }

/* ---------------------------------------------------------------------------
 * JSON encoding: the Lua value is walked into a jansson tree, then json_dumps
 * --------------------------------------------------------------------------- */

typedef struct jpath {
    const char *key; /* object key (borrowed from the table being encoded), or NULL */
    size_t keylen;
    lua_Integer index; /* 1-based array index when key == NULL */
} jpath;

typedef struct jenc {
    dlcL_res *root;   /* owns the tree: every node is attached before anything below it may raise */
    int depth;
    int null_idx; /* stack index of the json_null sentinel */
    jpath path[DLCL_JSON_MAX_DEPTH + 1];
} jenc;

/* Pushes the path of the value being encoded: ".summary.loss", ".losses[3]". */
static const char *push_path(lua_State *L, const jenc *e) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    if (e->depth == 0) luaL_addstring(&b, "(top level)");
    int first = e->depth > 10 ? e->depth - 8 : 0; /* deep (a cycle?): the last 8 steps */
    if (first) luaL_addstring(&b, "(...)");
    for (int i = first; i < e->depth; i++) {
        const jpath *p = &e->path[i];
        if (p->key) {
            luaL_addchar(&b, '.');
            luaL_addlstring(&b, p->key, p->keylen > 60 ? 60 : p->keylen);
            if (p->keylen > 60) luaL_addstring(&b, "...");
        } else {
            char tmp[32];
            snprintf(tmp, sizeof tmp, "[%lld]", (long long)p->index);
            luaL_addstring(&b, tmp);
        }
    }
    luaL_pushresult(&b);
    return lua_tostring(L, -1);
}

static int encode_fail(lua_State *L, const jenc *e, const char *what) {
    const char *path = push_path(L, e);
    lua_pushfstring(L, "json_encode: value at %s %s", path, what);
    return lua_error(L);
}

static int encode_oom(lua_State *L) { return luaL_error(L, "json_encode: out of memory"); }

/* jansson refuses a string (json_stringn, or a key in json_object_setn) that is not
 * valid UTF-8, and fails the same way when out of memory: tell the two apart. */
static int string_fail(lua_State *L, const jenc *e, const char *s, size_t n) {
    json_t *probe = json_stringn(s, n);
    int bad = !probe && (probe = json_stringn_nocheck(s, n)) != NULL; /* _nocheck fails only on OOM */
    json_decref(probe);
    return bad ? encode_fail(L, e, "is a string that is not valid UTF-8") : encode_oom(L);
}

/* Hands the new reference v (stolen, also on failure) to parent: appended to an
 * array, set under the current path key in an object, or made the root (parent NULL). */
static void attach(lua_State *L, jenc *e, json_t *parent, json_t *v) {
    if (!v) encode_oom(L);
    if (!parent) {
        e->root->p = v;
    } else if (json_is_array(parent)) {
        if (json_array_append_new(parent, v)) encode_oom(L);
    } else {
        const jpath *k = &e->path[e->depth - 1];
        if (json_object_setn_new(parent, k->key, k->keylen, v)) string_fail(L, e, k->key, k->keylen);
    }
}

static void encode(lua_State *L, jenc *e, int idx, json_t *parent);

static void encode_table(lua_State *L, jenc *e, int idx, json_t *parent) {
    if (e->depth >= DLCL_JSON_MAX_DEPTH) encode_fail(L, e, "is nested deeper than 100 levels (a cycle?)");
    luaL_checkstack(L, 6, "json_encode: nesting too deep");
    lua_Integer nkeys = 0, maxint = 0;
    int all_int = 1;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        nkeys++;
        if (lua_isinteger(L, -2)) {
            lua_Integer k = lua_tointeger(L, -2);
            if (k < 1) all_int = 0;
            else if (k > maxint) maxint = k;
        } else {
            all_int = 0;
        }
        lua_pop(L, 1);
    }
    jpath *slot = &e->path[e->depth];
    if (all_int && maxint == nkeys) { /* an array, [] when empty */
        json_t *a = json_array();
        attach(L, e, parent, a);
        e->depth++;
        for (lua_Integer i = 1; i <= nkeys; i++) {
            slot->key = NULL;
            slot->index = i;
            lua_rawgeti(L, idx, i);
            encode(L, e, lua_gettop(L), a);
            lua_pop(L, 1);
        }
        e->depth--;
        return;
    }
    if (all_int) {
        const char *what = lua_pushfstring(L, "is an array with holes (%I entries, largest key %I): "
                                              "JSON arrays need exactly the keys 1..n",
                                           (LUAI_UACINT)nkeys, (LUAI_UACINT)maxint);
        encode_fail(L, e, what);
    }
    /* an object: every key must be a string, checked before any value is encoded */
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            lua_pop(L, 1);
            const char *ks = luaL_tolstring(L, -1, NULL);
            const char *what = lua_pushfstring(L, "is a table with a %s key %s%s%s: JSON object keys must "
                                                  "be strings (arrays need exactly the keys 1..n)",
                                               luaL_typename(L, -2), lua_isnumber(L, -2) ? "" : "(",
                                               ks, lua_isnumber(L, -2) ? "" : ")");
            encode_fail(L, e, what);
        }
        lua_pop(L, 1);
    }
    json_t *o = json_object(); /* keeps insertion (table) order; json_dumps sorts if asked */
    attach(L, e, parent, o);
    e->depth++;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        slot->key = lua_tolstring(L, -2, &slot->keylen); /* a string: alive while on the stack */
        encode(L, e, lua_gettop(L), o);
        lua_pop(L, 1);
    }
    e->depth--;
}

static void encode(lua_State *L, jenc *e, int idx, json_t *parent) {
    json_t *v;
    switch (lua_type(L, idx)) {
    case LUA_TNIL: v = json_null(); break;
    case LUA_TBOOLEAN: v = json_boolean(lua_toboolean(L, idx)); break;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            v = json_integer((json_int_t)lua_tointeger(L, idx));
        } else {
            double d = (double)lua_tonumber(L, idx);
            if (isnan(d)) encode_fail(L, e, "is nan (JSON has no NaN)");
            if (isinf(d))
                encode_fail(L, e, d > 0 ? "is inf (JSON has no infinity)" : "is -inf (JSON has no infinity)");
            v = json_real(d);
        }
        break;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        v = json_stringn(s, n);
        if (!v) string_fail(L, e, s, n);
        break;
    }
    case LUA_TTABLE: encode_table(L, e, idx, parent); return;
    default:
        if (!lua_rawequal(L, idx, e->null_idx))
            encode_fail(L, e, lua_pushfstring(L, "is a %s, which JSON cannot represent", luaL_typename(L, idx)));
        v = json_null();
    }
    attach(L, e, parent, v);
}

static void check_known(lua_State *L, int opts, const char *fn, const char *const *known) {
    lua_pushnil(L);
    while (lua_next(L, opts)) {
        int ok = 0;
        if (lua_type(L, -2) == LUA_TSTRING)
            for (const char *const *k = known; *k; k++)
                if (strcmp(lua_tostring(L, -2), *k) == 0) ok = 1;
        if (!ok) {
            lua_pop(L, 1);
            luaL_error(L, "%s: unknown option %s", fn, luaL_tolstring(L, -1, NULL));
        }
        lua_pop(L, 1);
    }
}

/* diloco.json_encode(value[, {indent = n, sort_keys = bool}]) -> string */
static int l_json_encode(lua_State *L) {
    int indent = 0, sort_keys = 0;
    luaL_checkany(L, 1);
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        static const char *const known[] = {"indent", "sort_keys", NULL};
        check_known(L, 2, "json_encode", known);
        int ty = lua_getfield(L, 2, "indent");
        if (ty != LUA_TNIL) {
            int isint;
            lua_Integer v = lua_tointegerx(L, -1, &isint);
            if (!isint || v < 0 || v > DLCL_JSON_MAX_INDENT)
                luaL_error(L, "json_encode: option indent must be an integer in 0..%d", DLCL_JSON_MAX_INDENT);
            indent = (int)v;
        }
        ty = lua_getfield(L, 2, "sort_keys");
        if (ty != LUA_TNIL && ty != LUA_TBOOLEAN)
            luaL_error(L, "json_encode: option sort_keys must be a boolean, got %s", luaL_typename(L, -1));
        sort_keys = lua_toboolean(L, -1);
    }
    lua_settop(L, 1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &json_null_key); /* 2 */
    jenc e;
    e.root = dlcL_newres(L); /* 3: decrefs the tree if the walk raises */
    e.root->release = json_release;
    e.depth = 0;
    e.null_idx = 2;
    encode(L, &e, 1, NULL);
    /* 17 significant digits: every double reads back exactly (0.1 -> 0.10000000000000001) */
    size_t flags = JSON_ENCODE_ANY | JSON_REAL_PRECISION(17) | (indent ? JSON_INDENT(indent) : JSON_COMPACT) |
                   (sort_keys ? JSON_SORT_KEYS : 0);
    char *out = json_dumps(e.root->p, flags);
    dlcL_freeres(e.root);
    if (!out) return encode_oom(L);
    e.root->p = out; /* now the box frees the text if pushing it raises */
    e.root->release = free;
    lua_pushstring(L, out);
    dlcL_freeres(e.root);
    return 1;
}

/* ---------------------------------------------------------------------------
 * JSON decoding (jansson)
 * --------------------------------------------------------------------------- */

static int json_depth(const json_t *j) {
    int d = 0;
    if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++) {
            int k = json_depth(json_array_get(j, i));
            if (k > d) d = k;
        }
        return d + 1;
    }
    if (json_is_object(j)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)j, key, v) {
            int k = json_depth(v);
            if (k > d) d = k;
        }
        return d + 1;
    }
    return 0;
}

static void push_json(lua_State *L, const json_t *j, int in_array) {
    luaL_checkstack(L, 4, "json_decode: nesting too deep");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(j);
        lua_createtable(L, 0, n > 1 << 20 ? 1 << 20 : (int)n); /* a hint only */
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)j, key, v) {
            if (json_is_null(v)) continue; /* null in an object: the key is absent */
            lua_pushstring(L, key);
            push_json(L, v, 0);
            lua_rawset(L, -3);
        }
        break;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        lua_createtable(L, n > 1 << 20 ? 1 << 20 : (int)n, 0);
        for (size_t i = 0; i < n; i++) {
            push_json(L, json_array_get(j, i), 1);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    }
    case JSON_STRING: lua_pushlstring(L, json_string_value(j), json_string_length(j)); break;
    case JSON_INTEGER: lua_pushinteger(L, (lua_Integer)json_integer_value(j)); break;
    case JSON_REAL: lua_pushnumber(L, (lua_Number)json_real_value(j)); break;
    case JSON_TRUE: lua_pushboolean(L, 1); break;
    case JSON_FALSE: lua_pushboolean(L, 0); break;
    default: /* null: only reached in arrays and at the top level */
        (void)in_array;
        lua_rawgetp(L, LUA_REGISTRYINDEX, &json_null_key);
    }
}

/* diloco.json_decode(str) -> value | nil, msg, "DLC_ERR_FORMAT" */
static int l_json_decode(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    lua_settop(L, 1);
    dlcL_res *b = dlcL_newres(L);
    json_error_t err;
    json_t *j = json_loadb(s, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    if (!j) {
        lua_pushnil(L);
        lua_pushfstring(L, "json_decode: %s (line %d, column %d)", err.text, err.line, err.column);
        lua_pushstring(L, dlcL_status_name(DLC_ERR_FORMAT));
        return 3;
    }
    b->p = j;
    b->release = json_release;
    if (json_depth(j) > DLCL_JSON_MAX_DEPTH) {
        dlcL_freeres(b);
        lua_pushnil(L);
        lua_pushfstring(L, "json_decode: nested deeper than %d levels", DLCL_JSON_MAX_DEPTH);
        lua_pushstring(L, dlcL_status_name(DLC_ERR_FORMAT));
        return 3;
    }
    push_json(L, j, 0);
    dlcL_freeres(b);
    return 1;
}

static int null_tostring(lua_State *L) {
    lua_pushliteral(L, "json_null");
    return 1;
}

static const luaL_Reg json_funcs[] = {
    {"json_encode", l_json_encode},
    {"json_decode", l_json_decode},
    {NULL, NULL},
};

void dlcL_open_json(lua_State *L, int mod, int st) {
    mod = lua_absindex(L, mod);
    st = lua_absindex(L, st);

    /* json_null: one empty userdata per Lua state, tostring "json_null" */
    lua_newuserdatauv(L, 0, 0);
    luaL_newmetatable(L, DLCL_JSONNULL);
    lua_pushcfunction(L, null_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &json_null_key);
    lua_setfield(L, mod, "json_null");

    dlcL_setfuncs(L, mod, st, json_funcs);
}
