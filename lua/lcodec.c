/*
 * lcodec.c - the outer-gradient codecs (core/codec.h, docs/codecs.md) from Lua, for
 * experiments at the REPL and for Lua code that drives them:
 *
 *     local bytes = diloco.codec_encode("int4", x, {block = 64})   -- a Lua string
 *     local y = diloco.codec_decode("int4", bytes, x.numel, {block = 64})  -- 1-D Tensor
 *     assert(#bytes == diloco.codec_size("int4", x.numel, {block = 64}))
 *     local ef = diloco.zeros(x.numel)                                 -- error feedback
 *     bytes = diloco.codec_encode("int8", x, {feedback = ef})          -- updates ef
 *
 * Every check is the C library's: a NaN / Inf in x and malformed bytes (wrong length,
 * a bad scale, an f32 / bf16 value that is not finite) raise its message.  They are
 * misuse or hostile data, not an environmental failure, so nothing here returns
 * nil, message, code.  Tensors are always contiguous (core/tensor.h), so any shape
 * is accepted and read in row-major order.
 */
#include <string.h>
#include "ldiloco.h"

/* The codec named at `arg`; raises the C message ("... expected f32, bf16, ..."). */
static dlc_codec_kind checkcodec(lua_State *L, int arg) {
    dlc_codec_kind k;
    if (dlc_codec_from_name(luaL_checkstring(L, arg), &k) != DLC_OK) luaL_argerror(L, arg, dlc_last_error());
    return k;
}

/* The options table at `arg` (none/nil = defaults): block, and feedback when fb is not
 * NULL (*fb = NULL when absent).  Unknown keys raise. */
static dlc_codec_params checkopts(lua_State *L, int arg, const char *fn, dlc_tensor **fb) {
    dlc_codec_params p = dlc_codec_default_params();
    if (fb) *fb = NULL;
    if (lua_isnoneornil(L, arg)) return p;
    luaL_checktype(L, arg, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, arg)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (!k || (strcmp(k, "block") && (!fb || strcmp(k, "feedback"))))
            luaL_error(L, "%s: unknown option '%s' (known: %s)", fn, k ? k : luaL_typename(L, -1),
                       fb ? "block, feedback" : "block");
    }
    int ty = lua_getfield(L, arg, "block");
    if (ty != LUA_TNIL) {
        int isint;
        lua_Integer b = lua_tointegerx(L, -1, &isint);
        if (!isint || b < DLC_CODEC_BLOCK_MIN || b > DLC_CODEC_BLOCK_MAX || b % 2)
            luaL_error(L, "%s: block = %s, expected an even integer in %d..%d", fn, luaL_tolstring(L, -1, NULL),
                       DLC_CODEC_BLOCK_MIN, DLC_CODEC_BLOCK_MAX);
        p.block = (int)b;
    }
    lua_pop(L, 1);
    if (fb && lua_getfield(L, arg, "feedback") != LUA_TNIL) {
        *fb = dlcL_totensor(L, -1);
        if (!*fb)
            luaL_error(L, "%s: option feedback is a %s, expected a live Tensor (or nil)", fn,
                       luaL_testudata(L, -1, DLCL_TENSOR) ? "freed tensor" : luaL_typename(L, -1));
    }
    if (fb) lua_pop(L, 1);
    return p;
}

/* diloco.codec_encode(name, x[, {block =, feedback =}]) -> string */
static int l_encode(lua_State *L) {
    dlc_codec_kind k = checkcodec(L, 1);
    dlc_tensor *x = dlcL_checktensor(L, 2);
    dlc_tensor *fb;
    dlc_codec_params p = checkopts(L, 3, "codec_encode", &fb);
    if (fb) {
        if (fb->numel != x->numel)
            return luaL_error(L, "codec_encode: feedback has %I elements, x has %I: they must match",
                              (LUAI_UACINT)fb->numel, (LUAI_UACINT)x->numel);
        const float *xa = x->data, *xb = x->data + x->numel, *fa = fb->data, *fe = fb->data + fb->numel;
        if (x->numel > 0 && fa < xb && xa < fe)
            return luaL_error(L, "codec_encode: feedback overlaps x: give it its own tensor");
    }
    int64_t size = dlc_codec_encoded_size(k, &p, x->numel);
    if (size < 0) return dlcL_error(L);
    luaL_Buffer b;
    uint8_t *out = (uint8_t *)luaL_buffinitsize(L, &b, (size_t)size);
    int64_t w = dlc_codec_encode(k, &p, x->data, x->numel, out, (size_t)size, fb ? fb->data : NULL);
    if (w < 0) return dlcL_error(L);
    luaL_pushresultsize(&b, (size_t)w);
    return 1;
}

/* diloco.codec_decode(name, bytes, n[, {block =}]) -> a new 1-D Tensor of n */
static int l_decode(lua_State *L) {
    dlc_codec_kind k = checkcodec(L, 1);
    size_t len;
    const char *in = luaL_checklstring(L, 2, &len);
    lua_Integer n = luaL_checkinteger(L, 3);
    luaL_argcheck(L, n >= 0, 3, "the number of elements must be >= 0");
    dlc_codec_params p = checkopts(L, 4, "codec_decode", NULL);
    int64_t size = dlc_codec_encoded_size(k, &p, (int64_t)n);
    if (size < 0) return dlcL_error(L);
    /* a wrong length is refused before n floats are allocated: the C check, with no
     * output buffer (it looks at the length first) */
    if ((uint64_t)size != len) {
        dlc_codec_decode(k, &p, (const uint8_t *)in, len, NULL, (int64_t)n);
        return dlcL_error(L);
    }
    int64_t shape[1] = {(int64_t)n};
    dlc_tensor **slot = dlcL_newtensor(L);
    dlcL_settensor(L, DLCL_UPSTATE(L), slot, dlc_tensor_new(1, shape));
    if (dlc_codec_decode(k, &p, (const uint8_t *)in, len, (*slot)->data, (int64_t)n) != DLC_OK)
        return dlcL_error(L);
    return 1;
}

/* diloco.codec_size(name, n[, {block =}]) -> bytes */
static int l_size(lua_State *L) {
    dlc_codec_kind k = checkcodec(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_argcheck(L, n >= 0, 2, "the number of elements must be >= 0");
    dlc_codec_params p = checkopts(L, 3, "codec_size", NULL);
    int64_t size = dlc_codec_encoded_size(k, &p, (int64_t)n);
    if (size < 0) return dlcL_error(L);
    lua_pushinteger(L, (lua_Integer)size);
    return 1;
}

/* diloco.codecs() -> {"f32", "bf16", ...} in enum order */
static int l_codecs(lua_State *L) {
    lua_createtable(L, DLC_CODEC_COUNT, 0);
    for (int i = 0; i < DLC_CODEC_COUNT; i++) {
        lua_pushstring(L, dlc_codec_name((dlc_codec_kind)i));
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

void dlcL_open_codec(lua_State *L, int mod, int st) {
    static const luaL_Reg funcs[] = {
        {"codec_encode", l_encode}, {"codec_decode", l_decode}, {"codec_size", l_size},
        {"codecs", l_codecs},       {NULL, NULL},
    };
    dlcL_setfuncs(L, lua_absindex(L, mod), lua_absindex(L, st), funcs);
}
