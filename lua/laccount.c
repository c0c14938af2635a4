/*
 * laccount.c - diloco.Account: the run's account (core/account.h) from Lua, as the real
 * run's supervisor keeps it (lua/diloco/supervisor.lua, cluster.lua): islands' state changes, the work
 * their processes measured, the merges; rows, total, goodput and uptime computed by the
 * same C code `sim` uses.
 *
 *     local a = diloco.Account(2, t0)                 -- 2 islands (1..2), window from t0
 *     a:enter(1, "up", t0)                            -- off, starting, up, down, paused, held, done
 *     a:merge(t, useful_tokens)
 *     a:set_work(1, { busy_s = 40, idle_s = 3, nominal_tps = 900, merged_steps = 12, steps = 20,
 *                     fates = l:account() })        -- learner.h's fields (sent_s, ...)
 *     local shares, seconds = a:row(1, t_end)         -- { useful = 0.61, ..., other = 0.02 }
 *     local total = a:total(t_end)
 *     print(a:goodput(t_end), a:uptime(t_end, window))
 *     a:forget_merges(n); a:set_useful_tokens(x)     -- a syncer restored, a dp rollback
 *
 * Islands are 1-based here, 0-based in C; this file converts.  diloco.ACCOUNT_BUCKETS
 * lists the bucket names in the order rows are printed.
 *
 * Lifetime: a box holds its dlc_account (NULL once closed); __gc, __close and :close()
 * share one idempotent release (dlcL_newtype).
 */
#include <math.h>
#include <string.h>
#include "ldiloco.h"

#define DLCL_ACCOUNT "diloco.Account"

void dlcL_open_account(lua_State *L, int mod, int st);

typedef struct accountbox {
    dlc_account *a; /* owned; NULL when closed */
} accountbox;

static dlc_account *checkaccount(lua_State *L, int arg) {
    accountbox *b = luaL_checkudata(L, arg, DLCL_ACCOUNT);
    if (!b->a) luaL_argerror(L, arg, "Account has been closed");
    return b->a;
}

static void account_release(void *p) { dlc_account_free(((accountbox *)p)->a); }

/* Argument `arg` as a 0-based island of a. */
static int island_arg(lua_State *L, dlc_account *a, int arg) {
    int isint;
    lua_Integer m = lua_tointegerx(L, arg, &isint);
    int n = dlc_account_islands(a);
    if (!isint || m < 1 || m > n)
        luaL_argerror(L, arg, lua_pushfstring(L, "island = %s, expected an integer in 1..%d", luaL_tolstring(L, arg, NULL),
                                              n));
    return (int)m - 1;
}

static double time_arg(lua_State *L, int arg, const char *name) {
    double t = luaL_checknumber(L, arg);
    if (!isfinite(t)) luaL_argerror(L, arg, lua_pushfstring(L, "%s = %f, expected a finite time in seconds", name, t));
    return t;
}

/* diloco.Account(islands, t0) */
static int l_account(lua_State *L) {
    int isint;
    lua_Integer n = lua_tointegerx(L, 1, &isint);
    if (!isint || n < 1 || n > DLC_ACCOUNT_MAX_ISLANDS)
        return luaL_argerror(L, 1, lua_pushfstring(L, "islands = %s, expected an integer in 1..%d",
                                                   luaL_tolstring(L, 1, NULL), DLC_ACCOUNT_MAX_ISLANDS));
    double t0 = time_arg(L, 2, "t0");
    accountbox *b = dlcL_newbox(L, DLCL_ACCOUNT, sizeof *b, 0);
    if (!(b->a = dlc_account_new((int)n, t0))) return dlcL_error(L);
    return 1;
}

/* a:enter(island, state, t) */
static int ac_enter(lua_State *L) {
    dlc_account *a = checkaccount(L, 1);
    int m = island_arg(L, a, 2);
    dlc_island_state s;
    if (dlc_island_state_parse(luaL_checkstring(L, 3), &s) != DLC_OK) return dlcL_error(L);
    if (dlc_account_enter(a, m, s, time_arg(L, 4, "t")) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* a:state(island) -> name, since */
static int ac_state(lua_State *L) {
    dlc_account *a = checkaccount(L, 1);
    double since = 0;
    lua_pushstring(L, dlc_island_state_name(dlc_account_state(a, island_arg(L, a, 2), &since)));
    lua_pushnumber(L, since);
    return 2;
}

/* a:seconds(island, state, t_end) */
static int ac_seconds(lua_State *L) {
    dlc_account *a = checkaccount(L, 1);
    int m = island_arg(L, a, 2);
    dlc_island_state s;
    if (dlc_island_state_parse(luaL_checkstring(L, 3), &s) != DLC_OK) return dlcL_error(L);
    lua_pushnumber(L, dlc_account_seconds(a, m, s, time_arg(L, 4, "t_end")));
    return 1;
}

/* Field `name` of the table at t: a number, 0 when nil. */
static double field(lua_State *L, int t, const char *name, double def) {
    int ty = lua_getfield(L, t, name);
    double v = def;
    if (ty == LUA_TNUMBER) v = lua_tonumber(L, -1);
    else if (ty != LUA_TNIL)
        luaL_error(L, "Account:set_work: %s must be a number, got a %s", name, luaL_typename(L, -1));
    lua_pop(L, 1);
    return v;
}

/* a:set_work(island, {busy_s, idle_s, ready_since, nominal_tps, merged_steps, fates = {...}}) */
static int ac_set_work(lua_State *L) {
    dlc_account *a = checkaccount(L, 1);
    int m = island_arg(L, a, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    dlc_account_work w = {.busy_s = field(L, 3, "busy_s", 0), .idle_s = field(L, 3, "idle_s", 0),
                          .ready_since = field(L, 3, "ready_since", -1), .nominal_tps = field(L, 3, "nominal_tps", 0),
                          .merged_steps = field(L, 3, "merged_steps", 0), .steps = field(L, 3, "steps", 0)};
    int ty = lua_getfield(L, 3, "fates");
    if (ty == LUA_TTABLE) {
        int f = lua_gettop(L);
        dlc_learner_account *x = &w.fates;
        x->sent_steps = field(L, f, "sent_steps", 0), x->sent_s = field(L, f, "sent_s", 0);
        x->overwritten_steps = field(L, f, "overwritten_steps", 0), x->overwritten_s = field(L, f, "overwritten_s", 0);
        x->kept_steps = field(L, f, "kept_steps", 0), x->kept_s = field(L, f, "kept_s", 0);
        x->discarded_steps = field(L, f, "discarded_steps", 0), x->discarded_s = field(L, f, "discarded_s", 0);
        x->unsent_steps = field(L, f, "unsent_steps", 0), x->unsent_s = field(L, f, "unsent_s", 0);
    } else if (ty != LUA_TNIL) {
        return luaL_error(L, "Account:set_work: fates must be a table (the learner's account), got a %s",
                          luaL_typename(L, -1));
    }
    lua_pop(L, 1);
    if (dlc_account_set_work(a, m, &w) != DLC_OK)
        return luaL_error(L, "Account:set_work: island %d: %s", m + 1, dlc_last_error());
    return 0;
}

/* a:merge(t, useful_tokens) */
static int ac_merge(lua_State *L) {
    dlc_account *a = checkaccount(L, 1);
    if (dlc_account_merge(a, time_arg(L, 2, "t"), luaL_optnumber(L, 3, 0)) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* Pushes {bucket = value} for the row's shares (seconds: 0) or seconds (1). */
static void push_buckets(lua_State *L, const dlc_account_row *r, int seconds) {
    lua_createtable(L, 0, DLC_BUCKET_COUNT);
    for (int b = 0; b < DLC_BUCKET_COUNT; b++) {
        lua_pushnumber(L, seconds ? r->s[b] : r->share[b]);
        lua_setfield(L, -2, dlc_account_bucket_name(b));
    }
}

void dlcL_push_account_row(lua_State *L, const dlc_account_row *r) {
    push_buckets(L, r, 0);
    push_buckets(L, r, 1);
}

/* a:row(island, t_end) -> shares, seconds */
static int ac_row(lua_State *L) {
    dlc_account *a = checkaccount(L, 1);
    dlc_account_row r;
    if (dlc_account_row_of(a, island_arg(L, a, 2), time_arg(L, 3, "t_end"), &r) != DLC_OK) return dlcL_error(L);
    dlcL_push_account_row(L, &r);
    return 2;
}

/* a:total(t_end) -> shares, seconds */
static int ac_total(lua_State *L) {
    dlc_account *a = checkaccount(L, 1);
    dlc_account_row r;
    if (dlc_account_total(a, time_arg(L, 2, "t_end"), &r) != DLC_OK) return dlcL_error(L);
    dlcL_push_account_row(L, &r);
    return 2;
}

/* a:goodput(t_end [, useful]): its useful tokens (or `useful`, tallied elsewhere: every
 * shard's) over its capacity */
static int ac_goodput(lua_State *L) {
    dlc_account *a = checkaccount(L, 1);
    double t_end = time_arg(L, 2, "t_end");
    if (lua_isnoneornil(L, 3)) lua_pushnumber(L, dlc_account_goodput(a, t_end));
    else lua_pushnumber(L, dlc_account_goodput_of(a, t_end, luaL_checknumber(L, 3)));
    return 1;
}

/* a:uptime(t_end, window) */
static int ac_uptime(lua_State *L) {
    dlc_account *a = checkaccount(L, 1);
    lua_pushnumber(L, dlc_account_uptime(a, time_arg(L, 2, "t_end"), luaL_checknumber(L, 3)));
    return 1;
}

static int ac_merges(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)dlc_account_merges(checkaccount(L, 1)));
    return 1;
}

/* a:forget_merges(keep) */
static int ac_forget_merges(lua_State *L) {
    if (dlc_account_forget_merges(checkaccount(L, 1), luaL_checkinteger(L, 2)) != DLC_OK) return dlcL_error(L);
    return 0;
}

/* a:set_useful_tokens(n) */
static int ac_set_useful_tokens(lua_State *L) {
    if (dlc_account_set_useful_tokens(checkaccount(L, 1), luaL_checknumber(L, 2)) != DLC_OK) return dlcL_error(L);
    return 0;
}

static int ac_useful_tokens(lua_State *L) {
    lua_pushnumber(L, dlc_account_useful_tokens(checkaccount(L, 1)));
    return 1;
}

static int ac_t0(lua_State *L) {
    lua_pushnumber(L, dlc_account_t0(checkaccount(L, 1)));
    return 1;
}

static int ac_tostring(lua_State *L) {
    accountbox *b = luaL_checkudata(L, 1, DLCL_ACCOUNT);
    if (!b->a) return lua_pushliteral(L, "Account(closed)"), 1;
    lua_pushfstring(L, "Account(%d islands, %I merges)", dlc_account_islands(b->a),
                    (LUAI_UACINT)dlc_account_merges(b->a));
    return 1;
}

static const luaL_Reg account_methods[] = {
    {"enter", ac_enter},     {"state", ac_state},     {"seconds", ac_seconds}, {"set_work", ac_set_work},
    {"merge", ac_merge},     {"row", ac_row},         {"total", ac_total},     {"goodput", ac_goodput},
    {"uptime", ac_uptime},   {"merges", ac_merges},   {"useful_tokens", ac_useful_tokens},
    {"t0", ac_t0}, {"forget_merges", ac_forget_merges}, {"set_useful_tokens", ac_set_useful_tokens}, {NULL, NULL},
};
static const luaL_Reg account_meta[] = {{"__tostring", ac_tostring}, {NULL, NULL}};
static const dlcL_type account_type = {DLCL_ACCOUNT, account_release, account_methods, account_meta, NULL};

void dlcL_open_account(lua_State *L, int mod, int st) {
    mod = lua_absindex(L, mod);
    static const dlcL_type *const types[] = {&account_type, NULL};
    static const luaL_Reg funcs[] = {{"Account", l_account}, {NULL, NULL}};
    dlcL_register(L, mod, st, types, funcs);
    lua_createtable(L, DLC_BUCKET_COUNT, 0);
    for (int b = 0; b < DLC_BUCKET_COUNT; b++) {
        lua_pushstring(L, dlc_account_bucket_name(b));
        lua_rawseti(L, -2, b + 1);
    }
    lua_setfield(L, mod, "ACCOUNT_BUCKETS");
}
