/*
 * lsys.c - the few process-level services the Lua front end needs and Lua lacks:
 * a monotonic wall clock, isatty, a Ctrl-C flag for long runs, compute threads and the gemm backend.
 *
 *   diloco.clock()              seconds (float) on a monotonic clock
 *   diloco.isatty(fd)           true if fd (0, 1 or 2) is a terminal
 *   diloco.catch_sigint()       from now on the first Ctrl-C only raises a flag (the
 *                               training loop finishes its step, saves and exits); a
 *                               second Ctrl-C kills the process as usual
 *   diloco.sigint_pending()     true once Ctrl-C was pressed after catch_sigint()
 *   diloco.set_num_threads(n)   compute threads (oneDNN and OpenBLAS); diloco.num_threads() reads it
 *   diloco.gemm_backend([name]) "onednn" or "openblas"; with a name, selects it
 *   diloco.physical_memory()    bytes of RAM of this machine (sysconf), the bound for
 *                               the memory estimate that validation checks
 *   diloco.mkdir_p(path)        create a directory and its parents (like mkdir -p):
 *                               true, or nil + message naming the part that failed
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "ldiloco.h"

static volatile sig_atomic_t sigint_count;

static void on_sigint(int sig) {
    sigint_count++;
    signal(sig, SIG_DFL); /* the next Ctrl-C is not caught */
}

static int l_clock(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

static int l_isatty(lua_State *L) {
    lua_Integer fd = luaL_checkinteger(L, 1);
    luaL_argcheck(L, fd >= 0 && fd <= 2, 1, "expected 0, 1 or 2");
    lua_pushboolean(L, isatty((int)fd));
    return 1;
}

static int l_catch_sigint(lua_State *L) {
    struct sigaction sa;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sa.sa_handler = on_sigint;
    sigint_count = 0;
    sigaction(SIGINT, &sa, NULL);
    (void)L;
    return 0;
}

static int l_sigint_pending(lua_State *L) {
    lua_pushboolean(L, sigint_count > 0);
    return 1;
}

static int l_set_num_threads(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 1 && n <= 256, 1, "expected a thread count in [1, 256]");
    dlc_set_num_threads((int)n);
    return 0;
}

static int l_num_threads(lua_State *L) {
    lua_pushinteger(L, dlc_num_threads());
    return 1;
}

/* gemm_backend() -> name; gemm_backend(name) selects "onednn" or "openblas". */
static int l_gemm_backend(lua_State *L) {
    if (!lua_isnoneornil(L, 1) && dlc_set_gemm_backend(luaL_checkstring(L, 1)) != DLC_OK)
        return luaL_argerror(L, 1, dlc_last_error());
    lua_pushstring(L, dlc_gemm_backend());
    return 1;
}

static int l_physical_memory(lua_State *L) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || size <= 0) lua_pushnil(L); /* unknown: callers skip the check */
    else lua_pushinteger(L, (lua_Integer)pages * size);
    return 1;
}

static int l_mkdir_p(lua_State *L) {
    size_t len;
    const char *path = luaL_checklstring(L, 1, &len);
    luaL_argcheck(L, len > 0 && strlen(path) == len, 1, "expected a non-empty path without NUL bytes");
    luaL_Buffer b;
    char *p = luaL_buffinitsize(L, &b, len + 1);
    memcpy(p, path, len + 1);
    for (size_t i = 1; i <= len; i++) { /* each prefix ending before a '/', then the whole */
        if (i < len && p[i] != '/') continue;
        char c = p[i];
        p[i] = '\0';
        struct stat st;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            lua_pushnil(L);
            lua_pushfstring(L, "cannot create directory %s: %s", p, strerror(errno));
            return 2;
        }
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
            lua_pushnil(L);
            lua_pushfstring(L, "%s exists and is not a directory", p);
            return 2;
        }
        p[i] = c;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static const luaL_Reg sys_funcs[] = {
    {"mkdir_p", l_mkdir_p},
    {"physical_memory", l_physical_memory},
    {"clock", l_clock},
    {"isatty", l_isatty},
    {"catch_sigint", l_catch_sigint},
    {"sigint_pending", l_sigint_pending},
    {"set_num_threads", l_set_num_threads},
    {"num_threads", l_num_threads},
    {"gemm_backend", l_gemm_backend},
    {NULL, NULL},
};

void dlcL_open_sys(lua_State *L, int mod, int st) {
    (void)st;
    lua_pushvalue(L, mod);
    luaL_setfuncs(L, sys_funcs, 0);
    lua_pop(L, 1);
}
