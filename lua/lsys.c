/*
 * lsys.c - the few process-level services the Lua front end needs and Lua lacks:
 * a monotonic wall clock, isatty, compute threads and the gemm backend, run-directory
 * locks and files.  The signals are lua/lsignal.c's (diloco.signals).
 *
 *   diloco.clock()              seconds (float) on a monotonic clock
 *   diloco.isatty(fd)           true if fd (0, 1 or 2) is a terminal
 *   diloco.terminal_size(fd)    columns, rows of the terminal on fd (0, 1 or 2), asked
 *                               of the kernel now (TIOCGWINSZ), so a caller that asks at
 *                               each redraw follows resizes; nil if fd is not a terminal
 *                               or reports no size (0 x 0, as some pseudo-terminals do)
 *   diloco.wall_time()          seconds since the Unix epoch (float), for timestamps
 *   diloco.set_num_threads(n)   compute threads (oneDNN and OpenBLAS); diloco.num_threads() reads it
 *   diloco.gemm_backend([name]) "onednn" or "openblas"; with a name, selects it
 *   diloco.physical_memory()    bytes of RAM of this machine (sysconf), the bound for
 *                               the memory estimate that validation checks
 *   diloco.lock_dir(lockfile, info)
 *                               an exclusive flock on lockfile (created if missing) held
 *                               by the returned Lock until :close() (or GC, or exit; the
 *                               kernel drops it when the process dies, even by kill -9);
 *                               info (the holder's pid and command) is written into the
 *                               file.  If another process holds it: nil, "PATH is locked
 *                               by INFO-of-the-holder", "DLC_ERR_STATE"
 *   diloco.listdir(path)        the names in a directory (no . and ..), unsorted, or nil,
 *                               message, "DLC_ERR_IO"
 *   diloco.file_id(path)        "DEV:INODE" of the file path names (following links), its
 *                               kind ("file", "directory", "other") and size; nil if it
 *                               does not exist.  Two paths of one file give one id
 *   diloco.truncate(path, size) cut a regular file to size bytes (what a failed append
 *                               left beyond a complete line): true, or nil, message, "DLC_ERR_IO"
 *   diloco.pid()                this process's id
 *   diloco.pid_alive(pid)       false only if no process pid exists (kill(pid, 0) == ESRCH)
 *   diloco.mkdir_p(path)        create a directory and its parents (like mkdir -p):
 *                               true, or nil, message naming the part that failed, "DLC_ERR_IO"
 */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "ldiloco.h"

static int l_wall_time(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
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

static int l_terminal_size(lua_State *L) {
    lua_Integer fd = luaL_checkinteger(L, 1);
    luaL_argcheck(L, fd >= 0 && fd <= 2, 1, "expected 0, 1 or 2");
    struct winsize ws;
    if (ioctl((int)fd, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushinteger(L, ws.ws_col);
    lua_pushinteger(L, ws.ws_row);
    return 2;
}

static int l_set_num_threads(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 1 && n <= 256, 1, "expected a thread count in [1, 256]");
    dlc_set_num_threads((int)n);
    dlcL_block_signals_in_workers(); /* a larger pool has new threads */
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

/* ---- run-directory locks ---- */

typedef struct lockbox {
    char *path; /* first field: non-NULL while the lock is held (dlcL_type's rule) */
    int fd;
} lockbox;

static void lock_release(void *box) {
    lockbox *b = box;
    close(b->fd); /* drops the flock; the file stays (unlinking it would race a new locker) */
    free(b->path);
}

static int lock_tostring(lua_State *L) {
    lockbox *b = luaL_checkudata(L, 1, "diloco.Lock");
    lua_pushfstring(L, "diloco.Lock(%s%s)", b->path ? b->path : "", b->path ? "" : "closed");
    return 1;
}

static const luaL_Reg lock_meta[] = {{"__tostring", lock_tostring}, {NULL, NULL}};
static const luaL_Reg lock_methods[] = {{NULL, NULL}};
static const dlcL_type lock_type = {"diloco.Lock", lock_release, lock_methods, lock_meta, NULL};

/* What the holder wrote, for the message; at most 200 bytes, one line. */
static void read_holder(int fd, char *buf, size_t cap) {
    ssize_t n = pread(fd, buf, cap - 1, 0);
    if (n < 0) n = 0;
    buf[n] = '\0';
    for (char *c = buf; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    if (n == 0) snprintf(buf, cap, "another process (it wrote nothing into the lock file)");
}

static int l_lock_dir(lua_State *L) {
    size_t len, ilen;
    const char *path = luaL_checklstring(L, 1, &len);
    const char *info = luaL_optlstring(L, 2, "", &ilen);
    luaL_argcheck(L, len > 0 && strlen(path) == len, 1, "expected a non-empty path without NUL bytes");
    lockbox *b = dlcL_newbox(L, lock_type.name, sizeof *b, 0);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        return dlcL_fail_io(L, "cannot create the lock file %s: %s", path, strerror(errno));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char holder[201];
        if (e == EWOULDBLOCK) read_holder(fd, holder, sizeof holder);
        close(fd);
        lua_pushnil(L);
        if (e == EWOULDBLOCK) {
            lua_pushfstring(L, "%s is locked by %s", path, holder);
            lua_pushliteral(L, "DLC_ERR_STATE");
        } else {
            lua_pushfstring(L, "cannot lock %s: %s", path, strerror(e));
            lua_pushliteral(L, "DLC_ERR_IO");
        }
        return 3;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL || ftruncate(fd, 0) != 0 ||
        (ilen > 0 && pwrite(fd, info, ilen, 0) != (ssize_t)ilen)) {
        int e = copy ? errno : ENOMEM;
        free(copy);
        close(fd);
        return dlcL_fail_io(L, "cannot write the lock file %s: %s", path, strerror(e));
    }
    memcpy(copy, path, len + 1);
    b->fd = fd;
    b->path = copy;
    return 1;
}

static int l_listdir(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    DIR *d = opendir(path);
    if (d == NULL) {
        return dlcL_fail_io(L, "cannot list %s: %s", path, strerror(errno));
    }
    lua_newtable(L);
    lua_Integer n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        lua_pushstring(L, e->d_name); /* may raise on memory: then d leaks, as lua_ does */
        lua_rawseti(L, -2, ++n);
    }
    closedir(d);
    return 1;
}

static int l_file_id(lua_State *L) {
    struct stat st;
    if (stat(luaL_checkstring(L, 1), &st) != 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushfstring(L, "%d:%I", (int)st.st_dev, (lua_Integer)st.st_ino);
    lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "directory" : "other");
    lua_pushinteger(L, (lua_Integer)st.st_size);
    return 3;
}

static int l_truncate(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    lua_Integer size = luaL_checkinteger(L, 2);
    luaL_argcheck(L, size >= 0, 2, "expected a size >= 0");
    if (truncate(path, (off_t)size) != 0) {
        return dlcL_fail_io(L, "%s: %s", path, strerror(errno));
    }
    lua_pushboolean(L, 1);
    return 1;
}

int dlcL_pid(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)getpid());
    return 1;
}

static int l_pid_alive(lua_State *L) {
    lua_Integer pid = luaL_checkinteger(L, 1);
    luaL_argcheck(L, pid > 0 && pid <= 0x7fffffff, 1, "expected a process id");
    lua_pushboolean(L, !(kill((pid_t)pid, 0) != 0 && errno == ESRCH));
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
            return dlcL_fail_io(L, "cannot create directory %s: %s", p, strerror(errno));
        }
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
            return dlcL_fail_io(L, "%s exists and is not a directory", p);
        }
        p[i] = c;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static const luaL_Reg sys_funcs[] = {
    {"mkdir_p", l_mkdir_p},
    {"lock_dir", l_lock_dir},
    {"listdir", l_listdir},
    {"file_id", l_file_id},
    {"truncate", l_truncate},
    {"pid", dlcL_pid},
    {"pid_alive", l_pid_alive},
    {"physical_memory", l_physical_memory},
    {"clock", l_clock},
    {"isatty", l_isatty},
    {"terminal_size", l_terminal_size},
    {"wall_time", l_wall_time},
    {"set_num_threads", l_set_num_threads},
    {"num_threads", l_num_threads},
    {"gemm_backend", l_gemm_backend},
    {NULL, NULL},
};

void dlcL_open_sys(lua_State *L, int mod, int st) {
    dlcL_newtype(L, st, &lock_type);
    lua_pop(L, 2);
    lua_pushvalue(L, mod);
    luaL_setfuncs(L, sys_funcs, 0);
    lua_pop(L, 1);
}
