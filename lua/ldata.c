/*
 * ldata.c - diloco.TextData, diloco.ImageData and their Loaders (core/data.h).
 *
 *     local text = diloco.TextData { path = "/usr/share/games/fortunes", drop_line = "%" }
 *     local train = text:loader { batch = 16, ctx = 64, shard = m, shards = M, seed = 1 }
 *     local x, y = train:next()          -- Tensors [16,64]; y is x shifted by one byte
 *     local saved = train:state()        -- { cursor = 1 }: plain integers, JSON-friendly
 *     train:set_state(saved)             -- the same batches follow again
 *     local x, y = eval:batch_at(1)      -- the batch starting at window 1, cursor untouched
 *
 * Errors (ldiloco.h): bad options raise; a dataset whose files cannot be read (missing,
 * unreadable, not valid IDX, larger than max_bytes / max_elements) returns
 * nil, message, code ("DLC_ERR_IO", "DLC_ERR_FORMAT", ...), like io.open.
 *
 * Shard indices are 1-based here (shard = 1..shards), 0-based in the core.  Label and
 * byte VALUES in the tensors are 0-based, as everywhere.
 *
 * Lifetime (liolib's pattern, dlcL_newtype in ldiloco.h): every userdata is a box
 * created empty BEFORE the core object is acquired; __gc, __close and :close() share
 * one idempotent release; using a closed object raises.  A Loader keeps its dataset userdata in its
 * uservalue (and the core loader holds its own reference to the data), so the
 * dataset may be closed or collected before its loaders.  Every option is checked,
 * with a message naming the field, its value and what is allowed, before anything
 * is acquired; unknown option names are errors (they are usually typos).
 */
#include <string.h>
#include "ldiloco.h"

#define DLCL_TEXTDATA "diloco.TextData"
#define DLCL_IMAGEDATA "diloco.ImageData"
#define DLCL_LOADER "diloco.Loader"

#define STATE(L) DLCL_UPSTATE(L)
#define MAX_SHARDS 65536

typedef struct textbox {
    dlc_text *t; /* owned reference; NULL when closed */
} textbox;

typedef struct imagebox {
    dlc_images *d; /* owned reference; NULL when closed */
} imagebox;

typedef struct loaderbox {
    void *l;              /* owned dlc_text_loader (is_text) or dlc_image_loader; NULL when closed */
    dlc_text_loader *tl;  /* l as the one of these it is, the other NULL (borrowed) */
    dlc_image_loader *il;
    int is_text;
    int64_t batch, ctx;   /* ctx: text only */
    int shard, shards;    /* 0-based shard */
    int ordered;          /* text: sequential; images: !shuffle */
    dlc_split split;
} loaderbox;

/* ---------------------------------------------------------------------------
 * option tables
 * --------------------------------------------------------------------------- */

/* Pushes a short rendering of the value at idx for messages: strings quoted. */
static const char *valstr(lua_State *L, int idx) {
    if (lua_type(L, idx) == LUA_TSTRING) return lua_pushfstring(L, "\"%s\"", lua_tostring(L, idx));
    return luaL_tolstring(L, idx, NULL);
}

/* Raises unless every key of the table at idx is one of `known` (`what`: "option"). */
static void check_known(lua_State *L, int idx, const char *fn, const char *what,
                        const char *const *known) {
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        int ok = 0;
        if (lua_type(L, -1) == LUA_TSTRING)
            for (const char *const *k = known; *k && !ok; k++) ok = !strcmp(*k, lua_tostring(L, -1));
        if (!ok) {
            luaL_Buffer b;
            const char *key = valstr(L, -1);
            luaL_buffinit(L, &b);
            for (const char *const *k = known; *k; k++) {
                if (k != known) luaL_addstring(&b, ", ");
                luaL_addstring(&b, *k);
            }
            luaL_pushresult(&b);
            luaL_error(L, "%s: unknown %s %s (known: %s)", fn, what, key, lua_tostring(L, -1));
        }
    }
}

/* Pushes field k of the option table; returns its type. */
static int field(lua_State *L, int idx, const char *k) { return lua_getfield(L, idx, k); }

static lua_Integer opt_int(lua_State *L, int idx, const char *fn, const char *k, lua_Integer def,
                           lua_Integer lo, lua_Integer hi) {
    if (field(L, idx, k) == LUA_TNIL) {
        lua_pop(L, 1);
        return def;
    }
    int isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (!isint || lua_type(L, -1) != LUA_TNUMBER || v < lo || v > hi)
        luaL_error(L, "%s: %s = %s, expected an integer in [%I, %I]", fn, k, valstr(L, -1),
                   (LUAI_UACINT)lo, (LUAI_UACINT)hi);
    lua_pop(L, 1);
    return v;
}

/* Any integer (seeds: used as 64 bits). */
static uint64_t opt_seed(lua_State *L, int idx, const char *fn, const char *k) {
    if (field(L, idx, k) == LUA_TNIL) {
        lua_pop(L, 1);
        return 0;
    }
    int isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (!isint || lua_type(L, -1) != LUA_TNUMBER)
        luaL_error(L, "%s: %s = %s, expected an integer", fn, k, valstr(L, -1));
    lua_pop(L, 1);
    return (uint64_t)v;
}

/* A number in [lo, hi) (hi_open) or [lo, hi]. */
static double opt_num(lua_State *L, int idx, const char *fn, const char *k, double def, double lo,
                      double hi, int hi_open, const char *range) {
    if (field(L, idx, k) == LUA_TNIL) {
        lua_pop(L, 1);
        return def;
    }
    double v = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || !(v >= lo) || (hi_open ? !(v < hi) : !(v <= hi)))
        luaL_error(L, "%s: %s = %s, expected a number in %s", fn, k, valstr(L, -1), range);
    lua_pop(L, 1);
    return v;
}

/* A string option; the returned pointer stays valid while the option table lives
 * (it is the table's own string). */
static const char *opt_str(lua_State *L, int idx, const char *fn, const char *k) {
    int ty = field(L, idx, k);
    const char *s = NULL;
    if (ty == LUA_TSTRING)
        s = lua_tostring(L, -1);
    else if (ty != LUA_TNIL)
        luaL_error(L, "%s: %s = %s, expected a string", fn, k, valstr(L, -1));
    lua_pop(L, 1);
    return s;
}

static int opt_bool(lua_State *L, int idx, const char *fn, const char *k, int def) {
    int ty = field(L, idx, k);
    int v = def;
    if (ty == LUA_TBOOLEAN)
        v = lua_toboolean(L, -1);
    else if (ty != LUA_TNIL)
        luaL_error(L, "%s: %s = %s, expected true or false", fn, k, valstr(L, -1));
    lua_pop(L, 1);
    return v;
}

static dlc_split opt_split(lua_State *L, int idx, const char *fn, dlc_split def) {
    int ty = field(L, idx, "split");
    int s = def;
    if (ty != LUA_TNIL) {
        s = ty == LUA_TSTRING ? dlc_split_parse(lua_tostring(L, -1)) : -1;
        if (s < 0)
            luaL_error(L, "%s: split = %s, expected \"train\", \"eval\" or \"all\"", fn, valstr(L, -1));
    }
    lua_pop(L, 1);
    return (dlc_split)s;
}

/* shard (1-based) and shards -> 0-based index and count. */
static void opt_shard(lua_State *L, int idx, const char *fn, int *shard, int *shards) {
    *shards = (int)opt_int(L, idx, fn, "shards", 1, 1, MAX_SHARDS);
    lua_Integer s = opt_int(L, idx, fn, "shard", 1, LUA_MININTEGER, LUA_MAXINTEGER);
    if (s < 1 || s > *shards)
        luaL_error(L, "%s: shard = %I, expected an integer in [1, %d] (shards = %d; shards are "
                      "numbered from 1)", fn, (LUAI_UACINT)s, *shards, *shards);
    *shard = (int)s - 1;
}

/* ---------------------------------------------------------------------------
 * Loader
 * --------------------------------------------------------------------------- */

static loaderbox *checkloader(lua_State *L) {
    loaderbox *b = luaL_checkudata(L, 1, DLCL_LOADER);
    if (!b->l) luaL_error(L, "Loader: the loader has been closed");
    return b;
}

/* Pushes an empty Loader box whose uservalue is the dataset at `data`. */
static loaderbox *newloader(lua_State *L, int data) {
    loaderbox *b = dlcL_newbox(L, DLCL_LOADER, sizeof *b, 1);
    lua_pushvalue(L, data);
    lua_setiuservalue(L, -2, 1);
    return b;
}

/* l:next() -> x, y */
static int ld_next(lua_State *L) {
    loaderbox *b = checkloader(L);
    dlcL_state *st = STATE(L);
    dlc_tensor **xs = dlcL_newtensor(L), **ys = dlcL_newtensor(L);
    dlc_tensor *x, *y;
    dlc_status s = b->tl ? dlc_text_loader_next(b->tl, &x, &y) : dlc_image_loader_next(b->il, &x, &y);
    if (s != DLC_OK) return dlcL_error(L);
    dlcL_settensor(L, st, xs, x);
    dlcL_settensor(L, st, ys, y);
    return 2;
}

/* Windows (text) or examples (images) in the loader's shard: what batch_at indexes. */
static int64_t ld_items(const loaderbox *b) {
    return b->tl ? dlc_text_loader_windows(b->tl) : dlc_image_loader_size(b->il);
}

/* l:batch_at(i) -> x, y: the batch whose first window (text: the windows of a
 * sequential pass) or example (images, in shard order) is number i, 1-based; up to
 * `batch` rows, fewer at the end.  Never shuffled; the cursor does not move. */
static int ld_batch_at(lua_State *L) {
    loaderbox *b = checkloader(L);
    int isint;
    lua_Integer i = lua_tointegerx(L, 2, &isint);
    int64_t n = ld_items(b);
    if (!isint || lua_type(L, 2) != LUA_TNUMBER || i < 1 || i > n)
        return luaL_error(L, "Loader:batch_at: index %s, expected an integer in [1, %I] (the %s %s's "
                             "%s)",
                          valstr(L, 2), (LUAI_UACINT)n, dlc_split_name(b->split),
                          b->shards > 1 ? "shard" : "split", b->tl ? "windows" : "examples");
    dlcL_state *st = STATE(L);
    dlc_tensor **xs = dlcL_newtensor(L), **ys = dlcL_newtensor(L);
    dlc_tensor *x, *y;
    dlc_status s = b->tl ? dlc_text_loader_batch_at(b->tl, (int64_t)i - 1, &x, &y)
                         : dlc_image_loader_batch_at(b->il, (int64_t)i - 1, &x, &y);
    if (s != DLC_OK) return dlcL_error(L);
    dlcL_settensor(L, st, xs, x);
    dlcL_settensor(L, st, ys, y);
    return 2;
}

/* l:state() -> {cursor=} (text) or {epoch=, position=} (images) */
static int ld_state(lua_State *L) {
    loaderbox *b = checkloader(L);
    lua_createtable(L, 0, 2);
    if (b->tl) {
        lua_pushinteger(L, (lua_Integer)dlc_text_loader_cursor(b->tl));
        lua_setfield(L, -2, "cursor");
    } else {
        int64_t e, p;
        dlc_image_loader_cursor(b->il, &e, &p);
        lua_pushinteger(L, (lua_Integer)e);
        lua_setfield(L, -2, "epoch");
        lua_pushinteger(L, (lua_Integer)p);
        lua_setfield(L, -2, "position");
    }
    return 1;
}

static lua_Integer state_field(lua_State *L, const char *k) {
    int ty = lua_getfield(L, 2, k), isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (ty == LUA_TNIL)
        luaL_error(L, "Loader:set_state: field %s is missing (pass a table from :state())", k);
    if (ty != LUA_TNUMBER || !isint || v < 0)
        luaL_error(L, "Loader:set_state: %s = %s, expected an integer >= 0", k, valstr(L, -1));
    lua_pop(L, 1);
    return v;
}

/* l:set_state(t) -> l */
static int ld_set_state(lua_State *L) {
    loaderbox *b = checkloader(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const text_keys[] = {"cursor", NULL};
    static const char *const image_keys[] = {"epoch", "position", NULL};
    check_known(L, 2, b->tl ? "Loader:set_state (text)" : "Loader:set_state (images)",
                "field", b->tl ? text_keys : image_keys);
    dlc_status s;
    /* read every field first: their __index may close the loader (checked again) */
    if (b->tl) {
        lua_Integer c = state_field(L, "cursor");
        b = checkloader(L);
        s = dlc_text_loader_set_cursor(b->tl, (int64_t)c);
    } else {
        lua_Integer e = state_field(L, "epoch"), p = state_field(L, "position");
        b = checkloader(L);
        s = dlc_image_loader_set_cursor(b->il, (int64_t)e, (int64_t)p);
    }
    if (s != DLC_OK) return dlcL_error(L);
    lua_settop(L, 1);
    return 1;
}

static int ld_reset(lua_State *L) {
    loaderbox *b = checkloader(L);
    if (b->tl) dlc_text_loader_reset(b->tl);
    else dlc_image_loader_reset(b->il);
    lua_settop(L, 1);
    return 1;
}

/* The release behind __gc, __close and l:close() (dlcL_newtype). */
static void loader_release(void *box) {
    loaderbox *b = box;
    dlc_text_loader_free(b->tl);
    dlc_image_loader_free(b->il);
    b->tl = NULL;
    b->il = NULL;
}

static int ld_index(lua_State *L) {
    loaderbox *b = luaL_checkudata(L, 1, DLCL_LOADER);
    const char *k = luaL_checkstring(L, 2);
    if (lua_getfield(L, lua_upvalueindex(2), k) != LUA_TNIL) return 1;
    if (!strcmp(k, "closed")) return lua_pushboolean(L, !b->l), 1;
    if (!strcmp(k, "kind")) return lua_pushstring(L, b->is_text ? "text" : "images"), 1;
    b = checkloader(L);
    if (!strcmp(k, "batch")) return lua_pushinteger(L, (lua_Integer)b->batch), 1;
    if (!strcmp(k, "ctx") && b->tl) return lua_pushinteger(L, (lua_Integer)b->ctx), 1;
    if (!strcmp(k, "shard")) return lua_pushinteger(L, b->shard + 1), 1;
    if (!strcmp(k, "shards")) return lua_pushinteger(L, b->shards), 1;
    if (!strcmp(k, "split")) return lua_pushstring(L, dlc_split_name(b->split)), 1;
    if (!strcmp(k, "sequential") && b->tl) return lua_pushboolean(L, b->ordered), 1;
    if (!strcmp(k, "shuffle") && b->il) return lua_pushboolean(L, !b->ordered), 1;
    if (!strcmp(k, "size"))
        return lua_pushinteger(L, (lua_Integer)(b->tl ? dlc_text_loader_size(b->tl)
                                                      : dlc_image_loader_size(b->il))), 1;
    if (!strcmp(k, "windows") && b->tl)
        return lua_pushinteger(L, (lua_Integer)dlc_text_loader_windows(b->tl)), 1;
    if (!strcmp(k, "batches_per_epoch"))
        return lua_pushinteger(L, (lua_Integer)(b->tl ? dlc_text_loader_batches_per_epoch(b->tl)
                                                      : dlc_image_loader_batches_per_epoch(b->il))), 1;
    return 0;
}

static int ld_tostring(lua_State *L) {
    loaderbox *b = luaL_checkudata(L, 1, DLCL_LOADER);
    if (!b->l) return lua_pushliteral(L, "Loader(closed)"), 1;
    if (b->tl)
        lua_pushfstring(L, "Loader(text %s, shard %d of %d, batch %I, ctx %I, %s, cursor %I)",
                        dlc_split_name(b->split), b->shard + 1, b->shards, (LUAI_UACINT)b->batch,
                        (LUAI_UACINT)b->ctx, b->ordered ? "sequential" : "random",
                        (LUAI_UACINT)dlc_text_loader_cursor(b->tl));
    else {
        int64_t e, p;
        dlc_image_loader_cursor(b->il, &e, &p);
        lua_pushfstring(L, "Loader(images %s, shard %d of %d, batch %I, %s, epoch %I, position %I)",
                        dlc_split_name(b->split), b->shard + 1, b->shards, (LUAI_UACINT)b->batch,
                        b->ordered ? "in order" : "shuffled", (LUAI_UACINT)e, (LUAI_UACINT)p);
    }
    return 1;
}

static const luaL_Reg loader_methods[] = {
    {"next", ld_next}, {"state", ld_state}, {"set_state", ld_set_state},
    {"reset", ld_reset}, {"batch_at", ld_batch_at}, {NULL, NULL},
};

static const luaL_Reg loader_meta[] = {{"__tostring", ld_tostring}, {NULL, NULL}};

static const dlcL_type loader_type = {DLCL_LOADER, loader_release, loader_methods, loader_meta,
                                      ld_index};

/* ---------------------------------------------------------------------------
 * TextData
 * --------------------------------------------------------------------------- */

static dlc_text *checktext(lua_State *L) {
    textbox *b = luaL_checkudata(L, 1, DLCL_TEXTDATA);
    if (!b->t) luaL_error(L, "TextData: the dataset has been closed");
    return b->t;
}

/* diloco.TextData{path=, chunk=, eval_fraction=, split_seed=, drop_line=, max_bytes=}
 * or diloco.TextData{synthetic=bytes, seed=, ...} */
static int l_textdata(lua_State *L) {
    static const char *const known[] = {"path", "synthetic", "seed", "chunk", "eval_fraction",
                                        "split_seed", "drop_line", "max_bytes", NULL};
    const char *fn = "TextData";
    luaL_checktype(L, 1, LUA_TTABLE);
    check_known(L, 1, fn, "option", known);
    dlc_text_params o = dlc_text_default_params();
    o.path = opt_str(L, 1, fn, "path");
    o.synthetic_bytes = opt_int(L, 1, fn, "synthetic", 0, 0, (lua_Integer)1 << 40);
    o.seed = opt_seed(L, 1, fn, "seed");
    o.chunk = opt_int(L, 1, fn, "chunk", o.chunk, 1, (lua_Integer)1 << 40);
    o.eval_fraction = opt_num(L, 1, fn, "eval_fraction", o.eval_fraction, 0, 1, 1, "[0, 1)");
    o.split_seed = opt_seed(L, 1, fn, "split_seed");
    o.drop_line = opt_str(L, 1, fn, "drop_line");
    o.max_bytes = opt_int(L, 1, fn, "max_bytes", o.max_bytes, 1, LUA_MAXINTEGER);
    if ((o.path != NULL) == (o.synthetic_bytes > 0))
        return luaL_error(L, "%s: give either path = a file or directory, or synthetic = a byte "
                             "count > 0 (got %s)", fn, o.path ? "both" : "neither");
    textbox *b = dlcL_newbox(L, DLCL_TEXTDATA, sizeof *b, 0);
    if (!(b->t = dlc_text_open(&o))) /* the options are checked: a path's failure is the file's */
        return o.path ? dlcL_fail(L, dlc_last_status()) : dlcL_error(L);
    return 1;
}

/* d:sizes() -> train_bytes, eval_bytes */
static int td_sizes(lua_State *L) {
    dlc_text *t = checktext(L);
    lua_pushinteger(L, (lua_Integer)dlc_text_size(t, DLC_SPLIT_TRAIN));
    lua_pushinteger(L, (lua_Integer)dlc_text_size(t, DLC_SPLIT_EVAL));
    return 2;
}

/* d:loader{split="train", batch=16, ctx=64, shard=1, shards=1, seed=0, sequential=} */
static int td_loader(lua_State *L) {
    static const char *const known[] = {"split", "batch", "ctx", "shard", "shards", "seed",
                                        "sequential", NULL};
    const char *fn = "TextData:loader";
    dlc_text *t = checktext(L);
    if (lua_isnoneornil(L, 2)) {
        lua_settop(L, 1);
        lua_newtable(L);
    }
    luaL_checktype(L, 2, LUA_TTABLE);
    check_known(L, 2, fn, "option", known);
    dlc_text_loader_params o = dlc_text_loader_default_params();
    o.split = opt_split(L, 2, fn, DLC_SPLIT_TRAIN);
    o.batch = opt_int(L, 2, fn, "batch", o.batch, 1, 1 << 20);
    o.ctx = opt_int(L, 2, fn, "ctx", o.ctx, 1, 1 << 24);
    opt_shard(L, 2, fn, &o.shard, &o.shards);
    o.seed = opt_seed(L, 2, fn, "seed");
    o.sequential = opt_bool(L, 2, fn, "sequential", o.split == DLC_SPLIT_EVAL);
    t = checktext(L); /* the options' __index may have closed it */
    loaderbox *b = newloader(L, 1);
    if (!(b->l = b->tl = dlc_text_loader_new(t, &o))) return dlcL_error(L);
    b->is_text = 1;
    b->batch = o.batch;
    b->ctx = o.ctx;
    b->shard = o.shard;
    b->shards = o.shards;
    b->ordered = o.sequential;
    b->split = o.split;
    return 1;
}

static void text_release(void *box) { dlc_text_release(((textbox *)box)->t); }

static int td_index(lua_State *L) {
    textbox *b = luaL_checkudata(L, 1, DLCL_TEXTDATA);
    const char *k = luaL_checkstring(L, 2);
    if (lua_getfield(L, lua_upvalueindex(2), k) != LUA_TNIL) return 1;
    if (!strcmp(k, "closed")) return lua_pushboolean(L, !b->t), 1;
    if (!strcmp(k, "vocab")) return lua_pushinteger(L, 256), 1;
    dlc_text *t = checktext(L);
    if (!strcmp(k, "bytes")) return lua_pushinteger(L, (lua_Integer)dlc_text_size(t, DLC_SPLIT_ALL)), 1;
    if (!strcmp(k, "chunks")) return lua_pushinteger(L, (lua_Integer)dlc_text_chunks(t, DLC_SPLIT_ALL)), 1;
    if (!strcmp(k, "chunk")) return lua_pushinteger(L, (lua_Integer)dlc_text_chunk_size(t)), 1;
    if (!strcmp(k, "files")) return lua_pushinteger(L, (lua_Integer)dlc_text_files(t)), 1;
    return 0;
}

/* d:text([i, j]) -> the cleaned corpus bytes i..j (1-based, inclusive, like
 * string.sub; default the whole corpus) as a Lua string: for inspection. */
static int td_text(lua_State *L) {
    dlc_text *t = checktext(L);
    int64_t n;
    const uint8_t *p = dlc_text_bytes(t, &n);
    lua_Integer i = luaL_optinteger(L, 2, 1), j = luaL_optinteger(L, 3, (lua_Integer)n);
    if (i < 0) i += n + 1;
    if (j < 0) j += n + 1;
    if (i < 1) i = 1;
    if (j > n) j = n;
    if (i > j) lua_pushliteral(L, "");
    else lua_pushlstring(L, (const char *)p + i - 1, (size_t)(j - i + 1));
    return 1;
}

static int td_tostring(lua_State *L) {
    textbox *b = luaL_checkudata(L, 1, DLCL_TEXTDATA);
    if (!b->t) return lua_pushliteral(L, "TextData(closed)"), 1;
    lua_pushfstring(L, "TextData(%I bytes: %I train, %I eval; %I chunks of %I; %I files)",
                    (LUAI_UACINT)dlc_text_size(b->t, DLC_SPLIT_ALL),
                    (LUAI_UACINT)dlc_text_size(b->t, DLC_SPLIT_TRAIN),
                    (LUAI_UACINT)dlc_text_size(b->t, DLC_SPLIT_EVAL),
                    (LUAI_UACINT)dlc_text_chunks(b->t, DLC_SPLIT_ALL),
                    (LUAI_UACINT)dlc_text_chunk_size(b->t), (LUAI_UACINT)dlc_text_files(b->t));
    return 1;
}

static const luaL_Reg text_methods[] = {
    {"sizes", td_sizes}, {"loader", td_loader}, {"text", td_text}, {NULL, NULL},
};

static const luaL_Reg text_meta[] = {{"__tostring", td_tostring}, {NULL, NULL}};

static const dlcL_type text_type = {DLCL_TEXTDATA, text_release, text_methods, text_meta, td_index};

/* ---------------------------------------------------------------------------
 * ImageData
 * --------------------------------------------------------------------------- */

static dlc_images *checkimages(lua_State *L) {
    imagebox *b = luaL_checkudata(L, 1, DLCL_IMAGEDATA);
    if (!b->d) luaL_error(L, "ImageData: the dataset has been closed");
    return b->d;
}

/* diloco.ImageData{images=, labels=, classes=10, mean=, std=, eval_fraction=0, split_seed=0,
 * max_elements=} or diloco.ImageData{synthetic=n, classes=, rows=, cols=, seed=, ...} */
static int l_imagedata(lua_State *L) {
    static const char *const known[] = {"images", "labels", "synthetic", "classes", "rows", "cols",
                                        "seed", "mean", "std", "eval_fraction", "split_seed",
                                        "max_elements", NULL};
    const char *fn = "ImageData";
    luaL_checktype(L, 1, LUA_TTABLE);
    check_known(L, 1, fn, "option", known);
    dlc_images_params o = dlc_images_default_params();
    o.images = opt_str(L, 1, fn, "images");
    o.labels = opt_str(L, 1, fn, "labels");
    o.synthetic = opt_int(L, 1, fn, "synthetic", 0, 0, (lua_Integer)1 << 32);
    o.classes = (int)opt_int(L, 1, fn, "classes", o.classes, 2, 256);
    o.rows = (int)opt_int(L, 1, fn, "rows", o.rows, 1, 1024);
    o.cols = (int)opt_int(L, 1, fn, "cols", o.cols, 1, 1024);
    o.seed = opt_seed(L, 1, fn, "seed");
    o.mean = (float)opt_num(L, 1, fn, "mean", o.mean, -1e6, 1e6, 0, "[-1e6, 1e6]");
    o.std = (float)opt_num(L, 1, fn, "std", o.std, 1e-6, 1e6, 0, "[1e-6, 1e6]");
    o.eval_fraction = opt_num(L, 1, fn, "eval_fraction", o.eval_fraction, 0, 1, 1, "[0, 1)");
    o.split_seed = opt_seed(L, 1, fn, "split_seed");
    o.max_elements = opt_int(L, 1, fn, "max_elements", o.max_elements, 1, LUA_MAXINTEGER);
    int files = o.images || o.labels;
    if (files == (o.synthetic > 0) || (files && (!o.images || !o.labels)))
        return luaL_error(L, "%s: give either images = path and labels = path, or synthetic = an "
                             "example count > 0", fn);
    if (files && (lua_getfield(L, 1, "rows") != LUA_TNIL || lua_getfield(L, 1, "cols") != LUA_TNIL))
        return luaL_error(L, "%s: rows and cols are for synthetic data; IDX files carry their own",
                          fn);
    imagebox *b = dlcL_newbox(L, DLCL_IMAGEDATA, sizeof *b, 0);
    if (!(b->d = dlc_images_open(&o))) /* the options are checked: a failure is the files' */
        return files ? dlcL_fail(L, dlc_last_status()) : dlcL_error(L);
    return 1;
}

/* d:sizes() -> train_count, eval_count */
static int id_sizes(lua_State *L) {
    dlc_images *d = checkimages(L);
    lua_pushinteger(L, (lua_Integer)dlc_images_count(d, DLC_SPLIT_TRAIN));
    lua_pushinteger(L, (lua_Integer)dlc_images_count(d, DLC_SPLIT_EVAL));
    return 2;
}

/* d:loader{split="all", batch=64, shard=1, shards=1, seed=0, shuffle=(split ~= "eval")} */
static int id_loader(lua_State *L) {
    static const char *const known[] = {"split", "batch", "shard", "shards", "seed", "shuffle", NULL};
    const char *fn = "ImageData:loader";
    dlc_images *d = checkimages(L);
    if (lua_isnoneornil(L, 2)) {
        lua_settop(L, 1);
        lua_newtable(L);
    }
    luaL_checktype(L, 2, LUA_TTABLE);
    check_known(L, 2, fn, "option", known);
    dlc_image_loader_params o = dlc_image_loader_default_params();
    o.split = opt_split(L, 2, fn, DLC_SPLIT_ALL);
    o.batch = opt_int(L, 2, fn, "batch", o.batch, 1, 1 << 20);
    opt_shard(L, 2, fn, &o.shard, &o.shards);
    o.seed = opt_seed(L, 2, fn, "seed");
    o.shuffle = opt_bool(L, 2, fn, "shuffle", o.split != DLC_SPLIT_EVAL);
    d = checkimages(L); /* the options' __index may have closed it */
    loaderbox *b = newloader(L, 1);
    if (!(b->l = b->il = dlc_image_loader_new(d, &o))) return dlcL_error(L);
    b->batch = o.batch;
    b->shard = o.shard;
    b->shards = o.shards;
    b->ordered = !o.shuffle;
    b->split = o.split;
    return 1;
}

static void images_release(void *box) { dlc_images_release(((imagebox *)box)->d); }

static int id_index(lua_State *L) {
    imagebox *b = luaL_checkudata(L, 1, DLCL_IMAGEDATA);
    const char *k = luaL_checkstring(L, 2);
    if (lua_getfield(L, lua_upvalueindex(2), k) != LUA_TNIL) return 1;
    if (!strcmp(k, "closed")) return lua_pushboolean(L, !b->d), 1;
    dlc_images *d = checkimages(L);
    if (!strcmp(k, "count")) return lua_pushinteger(L, (lua_Integer)dlc_images_count(d, DLC_SPLIT_ALL)), 1;
    if (!strcmp(k, "rows")) return lua_pushinteger(L, dlc_images_rows(d)), 1;
    if (!strcmp(k, "cols")) return lua_pushinteger(L, dlc_images_cols(d)), 1;
    if (!strcmp(k, "classes")) return lua_pushinteger(L, dlc_images_classes(d)), 1;
    if (!strcmp(k, "features"))
        return lua_pushinteger(L, (lua_Integer)dlc_images_rows(d) * dlc_images_cols(d)), 1;
    return 0;
}

static int id_tostring(lua_State *L) {
    imagebox *b = luaL_checkudata(L, 1, DLCL_IMAGEDATA);
    if (!b->d) return lua_pushliteral(L, "ImageData(closed)"), 1;
    lua_pushfstring(L, "ImageData(%I x %d x %d, %d classes; %I train, %I eval)",
                    (LUAI_UACINT)dlc_images_count(b->d, DLC_SPLIT_ALL), dlc_images_rows(b->d),
                    dlc_images_cols(b->d), dlc_images_classes(b->d),
                    (LUAI_UACINT)dlc_images_count(b->d, DLC_SPLIT_TRAIN),
                    (LUAI_UACINT)dlc_images_count(b->d, DLC_SPLIT_EVAL));
    return 1;
}

static const luaL_Reg image_methods[] = {
    {"sizes", id_sizes}, {"loader", id_loader}, {NULL, NULL},
};

static const luaL_Reg image_meta[] = {{"__tostring", id_tostring}, {NULL, NULL}};

static const dlcL_type image_type = {DLCL_IMAGEDATA, images_release, image_methods, image_meta,
                                     id_index};

/* ---------------------------------------------------------------------------
 * registration
 * --------------------------------------------------------------------------- */

void dlcL_open_data(lua_State *L, int mod, int st) {
    static const dlcL_type *const types[] = {&text_type, &image_type, &loader_type, NULL};
    static const luaL_Reg funcs[] = {
        {"TextData", l_textdata}, {"ImageData", l_imagedata}, {NULL, NULL},
    };
    dlcL_register(L, mod, st, types, funcs);
}
