/*
 * lckpt.c - checkpoints for Lua: diloco.save_safetensors, diloco.load_safetensors and
 * diloco.safetensors_meta (core/ckpt.h).  JSON (diloco.json_encode / json_decode / json_null) is ljson.c.
 *
 *     assert(diloco.save_safetensors("m.safetensors", { {"wte", wte}, {"wpe", wpe} },
 *                                    { step = 1200, recipe = "gpt-tiny" }))
 *     local ts, meta, names = assert(diloco.load_safetensors("m.safetensors"))
 *     -- ts.wte is a Tensor, meta.step == "1200", names == {"wte", "wpe"}
 *     local meta, names = assert(diloco.safetensors_meta("m.safetensors")) -- no tensor read
 *
 * Errors (liolib's convention, ldiloco.h): wrong arguments raise; an environmental
 * failure returns nil, message, code (the status name, "DLC_ERR_IO" / "DLC_ERR_FORMAT"):
 * a file that cannot be written or read, a file that is not valid safetensors.
 *
 * Lifetime: the open checkpoint is held across calls that may raise in a dlcL_res
 * box (ldiloco.h) whose __gc releases it, so a Lua error never leaks it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ldiloco.h"

#define STATE(L) DLCL_UPSTATE(L)
/* ---------------------------------------------------------------------------
 * shared helpers
 * --------------------------------------------------------------------------- */

static const char *checkpath(lua_State *L, int arg) {
    size_t len;
    const char *p = luaL_checklstring(L, arg, &len);
    luaL_argcheck(L, len > 0, arg, "path is empty");
    luaL_argcheck(L, strlen(p) == len, arg, "path contains a NUL byte");
    return p;
}

/* ---------------------------------------------------------------------------
 * safetensors
 * --------------------------------------------------------------------------- */

typedef struct named {
    const char *name; /* borrowed from a Lua string kept alive by the caller's tables */
    dlc_tensor *t;    /* borrowed from a Tensor box likewise */
} named;

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

typedef struct kv {
    const char *k, *v; /* borrowed: k from the metadata table, v anchored by the caller */
} kv;

static int cmp_kv(const void *a, const void *b) { return strcmp(((const kv *)a)->k, ((const kv *)b)->k); }

/* The Tensor at idx (borrowed), or raises "<what> is a <type>, expected a Tensor". */
static dlc_tensor *tensor_entry(lua_State *L, int idx, const char *what) {
    dlc_tensor *t = dlcL_totensor(L, idx);
    if (t) return t;
    if (luaL_testudata(L, idx, DLCL_TENSOR))
        luaL_error(L, "save_safetensors: %s has been freed", what);
    luaL_error(L, "save_safetensors: %s must be a Tensor, got %s", what, luaL_typename(L, idx));
    return NULL;
}

/* A Lua string key/name without NUL bytes (C names cannot hold them). */
static const char *cname(lua_State *L, int idx, const char *what) {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (strlen(s) != len) luaL_error(L, "save_safetensors: %s contains a NUL byte", what);
    return s;
}

/* diloco.save_safetensors(path, tensors, metadata) -> true | nil, msg, code */
static int l_save_safetensors(lua_State *L) {
    const char *path = checkpath(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 3);

    /* Which form: {{name, tensor}, ...} (order kept) or {name = tensor} (sorted). */
    lua_Integer nkeys = 0, len = (lua_Integer)lua_rawlen(L, 2);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        nkeys++;
        lua_pop(L, 1);
    }
    int pairs = len > 0;
    if (pairs && nkeys != len)
        return luaL_argerror(L, 2, "mixes {name, tensor} array entries with other keys; use an array "
                                   "of {name, tensor} pairs or a map name -> Tensor");
    luaL_argcheck(L, nkeys <= 1 << 24, 2, "too many tensors");
    int n = (int)nkeys;
    named *ts = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *ts, 0); /* 4 */
    if (pairs) {
        for (int i = 0; i < n; i++) {
            if (lua_rawgeti(L, 2, i + 1) != LUA_TTABLE || lua_rawgeti(L, -1, 1) != LUA_TSTRING)
                luaL_error(L, "save_safetensors: tensors[%d] must be a {name, tensor} pair with a "
                              "string name", i + 1);
            char what[64];
            snprintf(what, sizeof what, "tensors[%d] name", i + 1);
            ts[i].name = cname(L, -1, what);
            lua_rawgeti(L, -2, 2);
            snprintf(what, sizeof what, "tensors[%d][2]", i + 1);
            ts[i].t = tensor_entry(L, -1, what);
            lua_pop(L, 3); /* the pair table, in tensors, keeps name and tensor alive */
        }
    } else {
        int i = 0;
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            if (lua_type(L, -2) != LUA_TSTRING)
                luaL_error(L, "save_safetensors: tensors has a %s key; use a map name -> Tensor or an "
                              "array of {name, tensor} pairs", luaL_typename(L, -2));
            const char *k = cname(L, -2, "a tensor name");
            const char *what = lua_pushfstring(L, "tensors[\"%s\"]", k);
            ts[i].name = k;
            ts[i].t = tensor_entry(L, -2, what);
            lua_pop(L, 2);
            i++;
        }
        qsort(ts, (size_t)n, sizeof *ts, cmp_named);
    }

    /* metadata: string keys, string or number values (numbers through tostring) */
    int nm = 0;
    if (!lua_isnil(L, 3)) {
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            nm++;
            lua_pop(L, 1);
        }
    }
    luaL_argcheck(L, nm <= 1 << 20, 3, "too many metadata entries");
    kv *meta = lua_newuserdatauv(L, (size_t)(nm ? nm : 1) * sizeof *meta, 0); /* 5 */
    lua_createtable(L, nm, 0); /* 6: anchors the values converted to strings */
    if (nm) {
        int i = 0;
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            if (lua_type(L, -2) != LUA_TSTRING)
                luaL_error(L, "save_safetensors: metadata has a %s key, keys must be strings",
                           luaL_typename(L, -2));
            const char *k = cname(L, -2, "a metadata key");
            int vt = lua_type(L, -1);
            if (vt != LUA_TSTRING && vt != LUA_TNUMBER)
                luaL_error(L, "save_safetensors: metadata[\"%s\"] must be a string or a number, got %s",
                           k, luaL_typename(L, -1));
            size_t vlen;
            lua_pushvalue(L, -1); /* converted raw: a __tostring could free a tensor in ts */
            const char *v = lua_tolstring(L, -1, &vlen);
            if (strlen(v) != vlen)
                luaL_error(L, "save_safetensors: metadata[\"%s\"] contains a NUL byte", k);
            meta[i].k = k;
            meta[i].v = v;
            lua_rawseti(L, 6, ++i); /* anchored */
            lua_pop(L, 1);
        }
        qsort(meta, (size_t)nm, sizeof *meta, cmp_kv);
    }
    /* C arrays of what the core wants, in userdata so an error leaks nothing */
    const char **arr = lua_newuserdatauv(L, (size_t)(n + 2 * nm + 1) * sizeof *arr, 0);
    dlc_tensor **tarr = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *tarr, 0);
    const char **names = arr, **mk = arr + n, **mv = arr + n + nm;
    for (int i = 0; i < n; i++) {
        names[i] = ts[i].name;
        tarr[i] = ts[i].t;
    }
    for (int i = 0; i < nm; i++) {
        mk[i] = meta[i].k;
        mv[i] = meta[i].v;
    }
    dlc_status s = dlc_safetensors_save(path, n, names, tarr, nm, mk, mv);
    if (s == DLC_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    if (s == DLC_ERR_IO) return dlcL_fail(L, s);
    return dlcL_error(L);
}

static void st_release(void *p) { dlc_safetensors_close(p); }

/* diloco.load_safetensors(path) -> {name = Tensor}, metadata, {names in file order}
 *                                 | nil, msg, code */
static int l_load_safetensors(lua_State *L) {
    const char *path = checkpath(L, 1);
    dlcL_state *state = STATE(L);
    lua_settop(L, 1);
    dlcL_res *b = dlcL_newres(L); /* 2 */
    dlc_safetensors *st = dlc_safetensors_open(path);
    if (!st) return dlcL_fail(L, dlc_last_status()); /* raises on NOMEM */
    b->p = st;
    b->release = st_release;
    int n = dlc_safetensors_count(st), nm = dlc_safetensors_meta_count(st);
    lua_createtable(L, 0, n);  /* 3 */
    lua_createtable(L, 0, nm); /* 4 */
    lua_createtable(L, n, 0);  /* 5 */
    for (int i = 0; i < n; i++) {
        const char *name = dlc_safetensors_name(st, i);
        lua_pushstring(L, name);
        lua_rawseti(L, 5, i + 1);
        dlc_tensor **slot = dlcL_newtensor(L);
        dlcL_settensor(L, state, slot, dlc_safetensors_get(st, name));
        lua_setfield(L, 3, name);
    }
    for (int i = 0; i < nm; i++) {
        const char *k = dlc_safetensors_meta_key(st, i);
        lua_pushstring(L, dlc_safetensors_meta(st, k));
        lua_setfield(L, 4, k);
    }
    dlcL_freeres(b);
    return 3;
}

/* diloco.safetensors_meta(path) -> metadata, {names in file order} | nil, msg, code
 * The header alone (dlc_safetensors_open_header): validated as load_safetensors does,
 * the tensors' data never read. */
static int l_safetensors_meta(lua_State *L) {
    const char *path = checkpath(L, 1);
    lua_settop(L, 1);
    dlcL_res *b = dlcL_newres(L); /* 2 */
    dlc_safetensors *st = dlc_safetensors_open_header(path);
    if (!st) return dlcL_fail(L, dlc_last_status()); /* raises on NOMEM */
    b->p = st;
    b->release = st_release;
    int n = dlc_safetensors_count(st), nm = dlc_safetensors_meta_count(st);
    lua_createtable(L, 0, nm); /* 3 */
    lua_createtable(L, n, 0);  /* 4 */
    for (int i = 0; i < nm; i++) {
        const char *k = dlc_safetensors_meta_key(st, i);
        lua_pushstring(L, dlc_safetensors_meta(st, k));
        lua_setfield(L, 3, k);
    }
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, dlc_safetensors_name(st, i));
        lua_rawseti(L, 4, i + 1);
    }
    dlcL_freeres(b);
    return 2;
}

static const luaL_Reg ckpt_funcs[] = {
    {"safetensors_meta", l_safetensors_meta},
    {"save_safetensors", l_save_safetensors},
    {"load_safetensors", l_load_safetensors},
    {NULL, NULL},
};

void dlcL_open_ckpt(lua_State *L, int mod, int st) {
    mod = lua_absindex(L, mod);
    st = lua_absindex(L, st);

    dlcL_setfuncs(L, mod, st, ckpt_funcs);
}
