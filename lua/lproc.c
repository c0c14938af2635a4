/*
 * lproc.c - diloco.proc: the child processes of a supervisor (`diloco-lua run` with
 * several islands, lua/diloco/supervisor.lua).  A supervisor owns exactly the pids it
 * spawned: wait and signal refuse any other pid.
 *
 *   local pid = assert(diloco.proc.spawn { "/usr/bin/diloco-lua", "learner", "r.lua",
 *       env = { OMP_NUM_THREADS = "1" }, stdout = "OUT/learner-1/log", stderr = "OUT/learner-1/log" })
 *   local st = diloco.proc.wait(pid)         -- nil while it runs; {exited = 0} or {signal = 9, name = "KILL"}
 *   diloco.proc.signal(pid, "STOP")          -- KILL, TERM, INT, STOP, CONT, HUP
 *   diloco.proc.self_exe()                   -- the absolute path of this executable
 *   diloco.proc.realpath("r.lua")            -- an absolute path without links (nil, message if absent)
 *   diloco.proc.die_with_parent("TERM")      -- this process gets SIGTERM when its parent dies
 *   diloco.proc.sleep(0.1)                   -- seconds
 *   diloco.proc.write_private(path, text)    -- a new file of mode 0600 (a secret)
 *   diloco.proc.children(pid)                -- the pids whose parent is that child (mpirun's ranks)
 *   diloco.proc.signal_grandchild(pid, gpid, "KILL") -- one of them
 *
 * spawn execs a fresh program (posix_spawn: never a fork of this process, which may hold
 * OpenMP threads), with every descriptor above 2 closed, the signal mask emptied and
 * every signal at its default disposition, in its own process group (a Ctrl-C reaches
 * the supervisor, which stops its children in order).  With parent_death = "KILL" the
 * child gets that signal when this process dies (fork, prctl, exec at once: for a
 * program, such as mpirun, that does not die with its supervisor by itself; only
 * async-signal-safe calls run between the fork and the exec).  env adds to or replaces entries
 * of this process's environment (false removes one).  Environmental failures return
 * nil, message, code; misuse raises.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "ldiloco.h"

extern char **environ;

#define PROC_MAX_ARGS 256
#define PROC_MAX_ENV 4096
/* Children one Lua state may own at once (a supervisor of many islands). */
#define PROC_MAX_CHILDREN 4096

static const char *const REG_KEY = "diloco.proc.children"; /* registry: {[pid] = true} */

static const struct {
    const char *name;
    int sig;
} sigs[] = {{"KILL", SIGKILL}, {"TERM", SIGTERM}, {"INT", SIGINT}, {"STOP", SIGSTOP},
            {"CONT", SIGCONT}, {"HUP", SIGHUP},  {"USR1", SIGUSR1}, {"USR2", SIGUSR2}};

static int sig_of(lua_State *L, int arg) {
    if (lua_isinteger(L, arg)) return (int)lua_tointeger(L, arg);
    const char *n = luaL_checkstring(L, arg);
    if (!strncmp(n, "SIG", 3)) n += 3;
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        if (!strcmp(n, sigs[i].name)) return sigs[i].sig;
    return luaL_argerror(L, arg, lua_pushfstring(L, "unknown signal '%s': expected KILL, TERM, INT, STOP, CONT, "
                                                    "HUP, USR1 or USR2", n));
}

static const char *sig_name(int sig) {
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        if (sigs[i].sig == sig) return sigs[i].name;
    return NULL;
}

static void children(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, REG_KEY) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, REG_KEY);
    }
}

static int owned(lua_State *L, lua_Integer pid) {
    children(L);
    lua_rawgeti(L, -1, pid);
    int yes = lua_toboolean(L, -1);
    lua_pop(L, 2);
    return yes;
}

static void set_owned(lua_State *L, lua_Integer pid, int yes) {
    children(L);
    if (yes) lua_pushboolean(L, 1);
    else lua_pushnil(L);
    lua_rawseti(L, -2, pid);
    lua_pop(L, 1);
}

/* The child of spawn_tied, between fork and exec: async-signal-safe calls only.  Any
 * failure writes its errno to fd `report` and exits. */
static void tied_child(const char *const *argv, const char *const *envp, const char *out, const char *err,
                       int pdeath, pid_t parent, int report) {
    sigset_t none;
    sigemptyset(&none);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, NULL);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setpgid(0, 0);
    int e = 0;
    if (prctl(PR_SET_PDEATHSIG, pdeath) != 0) e = errno;
    if (!e && getppid() != parent) e = ESRCH; /* the supervisor died meanwhile */
    int fd = e ? -1 : open("/dev/null", O_RDONLY);
    if (!e && (fd < 0 || dup2(fd, 0) < 0)) e = errno;
    if (!e && out) {
        fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0 || dup2(fd, 1) < 0) e = errno;
    }
    if (!e && err && out && !strcmp(err, out)) {
        if (dup2(1, 2) < 0) e = errno;
    } else if (!e && err) {
        fd = open(err, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0 || dup2(fd, 2) < 0) e = errno;
    }
    if (!e) {
        for (int i = 3; i < 65536; i++)
            if (i != report) close(i);
        execve(argv[0], (char *const *)argv, (char *const *)envp);
        e = errno;
    }
    while (write(report, &e, sizeof e) < 0 && errno == EINTR) {}
    _exit(127);
}

/* fork + exec with the parent-death signal set in between; 0 or an errno (the exec's
 * failure comes back through a close-on-exec pipe). */
static int spawn_tied(pid_t *pid, const char *const *argv, const char *const *envp, const char *out,
                      const char *err, int pdeath) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return errno;
    pid_t parent = getpid();
    pid_t c = fork();
    if (c < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return e;
    }
    if (c == 0) {
        close(p[0]);
        tied_child(argv, envp, out, err, pdeath, parent, p[1]);
    }
    close(p[1]);
    int e = 0;
    ssize_t n;
    do n = read(p[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(p[0]);
    if (n == (ssize_t)sizeof e) { /* it failed before or at the exec: reap it */
        while (waitpid(c, NULL, 0) < 0 && errno == EINTR) {}
        return e ? e : EIO;
    }
    *pid = c;
    return 0;
}

/* proc.spawn {argv..., env = {}, stdout = path, stderr = path, parent_death = "KILL"} */
static int l_spawn(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 1);
    if (n < 1 || n > PROC_MAX_ARGS)
        return luaL_error(L, "proc.spawn: expected 1..%d arguments (the program first), got %d", PROC_MAX_ARGS, (int)n);
    const char *argv[PROC_MAX_ARGS + 1];
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, 1, i) != LUA_TSTRING) return luaL_error(L, "proc.spawn: argument %d must be a string", (int)i);
        argv[i - 1] = lua_tostring(L, -1);
        lua_pop(L, 1); /* a field of the table: stays alive */
    }
    argv[n] = NULL;
    /* the environment: ours, with env's entries replacing or removing ours */
    int ne = 0;
    static const char *envp[PROC_MAX_ENV + 1];
    int et = lua_getfield(L, 1, "env");
    if (et != LUA_TNIL && et != LUA_TTABLE) return luaL_error(L, "proc.spawn: env must be a table of NAME = value");
    int env_i = lua_gettop(L);
    for (char **e = environ; *e && ne < PROC_MAX_ENV; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        if (et == LUA_TTABLE) {
            lua_pushlstring(L, *e, (size_t)(eq - *e));
            int t = lua_rawget(L, env_i);
            lua_pop(L, 1);
            if (t != LUA_TNIL) continue; /* replaced or removed below */
        }
        envp[ne++] = *e;
    }
    lua_newtable(L); /* keeps the "NAME=value" strings alive until the spawn */
    int keep_i = lua_gettop(L);
    if (et == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, env_i)) {
            if (lua_type(L, -2) != LUA_TSTRING) return luaL_error(L, "proc.spawn: env keys must be names");
            if (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
                lua_pop(L, 1);
                continue;
            }
            if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
                return luaL_error(L, "proc.spawn: env.%s must be a string (or false to remove it)", lua_tostring(L, -2));
            if (ne >= PROC_MAX_ENV) return luaL_error(L, "proc.spawn: more than %d environment entries", PROC_MAX_ENV);
            lua_pushfstring(L, "%s=%s", lua_tostring(L, -2), lua_tostring(L, -1));
            envp[ne++] = lua_tostring(L, -1);
            lua_rawseti(L, keep_i, ne);
            lua_pop(L, 1);
        }
    }
    envp[ne] = NULL;
    const char *out = (lua_getfield(L, 1, "stdout"), lua_tostring(L, -1));
    const char *err = (lua_getfield(L, 1, "stderr"), lua_tostring(L, -1));
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out) posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (err && out && !strcmp(err, out)) posix_spawn_file_actions_adddup2(&fa, 1, 2);
    else if (err) posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    int pdeath = 0;
    if (lua_getfield(L, 1, "parent_death") != LUA_TNIL) pdeath = sig_of(L, -1);
    pid_t pid;
    int rc = pdeath ? spawn_tied(&pid, argv, envp, out, err, pdeath)
                    : posix_spawn(&pid, argv[0], &fa, &at, (char *const *)argv, (char *const *)envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        return dlcL_fail_io(L, "cannot start %s: %s", argv[0], strerror(rc));
    }
    set_owned(L, pid, 1);
    lua_pushinteger(L, pid);
    return 1;
}

static pid_t checkchild(lua_State *L, int arg) {
    lua_Integer pid = luaL_checkinteger(L, arg);
    if (pid <= 0 || !owned(L, pid))
        luaL_argerror(L, arg, lua_pushfstring(L, "pid %d was not started by diloco.proc.spawn (or was reaped)", (int)pid));
    return (pid_t)pid;
}

/* proc.wait(pid [, block]) -> nil while running, else {exited = code} or {signal = n, name} */
static int l_wait(lua_State *L) {
    pid_t pid = checkchild(L, 1);
    int block = lua_toboolean(L, 2);
    int status;
    pid_t r;
    do r = waitpid(pid, &status, block ? 0 : WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0) {
        lua_pushnil(L);
        return 1;
    }
    if (r < 0) {
        set_owned(L, pid, 0);
        return dlcL_fail_io(L, "waitpid(%d): %s", (int)pid, strerror(errno));
    }
    set_owned(L, pid, 0);
    lua_createtable(L, 0, 2);
    if (WIFEXITED(status)) {
        lua_pushinteger(L, WEXITSTATUS(status));
        lua_setfield(L, -2, "exited");
    } else if (WIFSIGNALED(status)) {
        lua_pushinteger(L, WTERMSIG(status));
        lua_setfield(L, -2, "signal");
        const char *nm = sig_name(WTERMSIG(status));
        if (nm) {
            lua_pushstring(L, nm);
            lua_setfield(L, -2, "name");
        }
    }
    return 1;
}

/* Sends sig to pid: true, or nil, msg, code. */
static int send_signal(lua_State *L, pid_t pid, int sig) {
    if (kill(pid, sig) != 0) {
        return dlcL_fail_io(L, "signal %d to pid %d: %s", sig, (int)pid, strerror(errno));
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* proc.signal(pid, sig) -> true, or nil, msg, code */
static int l_signal(lua_State *L) {
    pid_t pid = checkchild(L, 1);
    return send_signal(L, pid, sig_of(L, 2));
}

/* The parent pid in /proc/PID/stat (after the command's closing parenthesis), or -1. */
static pid_t ppid_of(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    int pp = -1;
    char state;
    if (!rp || sscanf(rp + 1, " %c %d", &state, &pp) != 2) return -1;
    return (pid_t)pp;
}

/* proc.children(pid) -> {pid, ...}: the live processes whose parent is that child of
 * ours (the ranks an mpirun we started forked: it puts each in a process group of
 * its own, so a signal to its group does not reach them). */
static int l_children(lua_State *L) {
    pid_t parent = checkchild(L, 1);
    lua_newtable(L);
    DIR *d = opendir("/proc");
    if (!d) return 1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (*end || v <= 0) continue;
        if (ppid_of((pid_t)v) == parent) {
            lua_pushinteger(L, v);
            lua_rawseti(L, -2, ++n);
        }
    }
    closedir(d);
    return 1;
}

/* proc.signal_grandchild(child, pid, sig): pid must be a child of that child of ours. */
static int l_signal_grandchild(lua_State *L) {
    pid_t parent = checkchild(L, 1);
    lua_Integer pid = luaL_checkinteger(L, 2);
    int sig = sig_of(L, 3);
    if (pid <= 0 || ppid_of((pid_t)pid) != parent) {
        return dlcL_fail_io(L, "pid %d is not a child of pid %d (it ended, or is not one of its processes)",
                            (int)pid, (int)parent);
    }
    return send_signal(L, (pid_t)pid, sig);
}

static int l_self_exe(lua_State *L) {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return luaL_error(L, "proc.self_exe: /proc/self/exe: %s", strerror(errno));
    lua_pushlstring(L, buf, (size_t)n);
    return 1;
}

static int l_realpath(lua_State *L) {
    const char *p = luaL_checkstring(L, 1);
    char *r = realpath(p, NULL);
    if (!r) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", p, strerror(errno));
        return 2;
    }
    lua_pushstring(L, r);
    free(r);
    return 1;
}

/* proc.die_with_parent(sig [, ppid]): the kernel sends sig when the parent dies; false
 * (and nothing set) if the parent is already gone or is not ppid. */
static int l_die_with_parent(lua_State *L) {
    int sig = sig_of(L, 1);
    lua_Integer want = luaL_optinteger(L, 2, 0);
    if (prctl(PR_SET_PDEATHSIG, sig) != 0) return luaL_error(L, "proc.die_with_parent: %s", strerror(errno));
    pid_t pp = getppid();
    lua_pushboolean(L, pp != 1 && (want == 0 || pp == (pid_t)want));
    return 1;
}

/* proc.sleep(seconds): a plain wait, restarted after signals until the time is up (a
 * caught signal is still seen by diloco.signal_pending afterwards). */
static int l_sleep(lua_State *L) {
    double s = luaL_checknumber(L, 1);
    luaL_argcheck(L, s >= 0 && s < 1e6, 1, "seconds must be in [0, 1e6)");
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    return 0;
}

/* proc.write_private(path, text): a new file of mode 0600 holding text (a secret),
 * synced; refused if path exists.  true, or nil, msg, code. */
static int l_write_private(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    size_t n;
    const char *text = luaL_checklstring(L, 2, &n);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        return dlcL_fail_io(L, "%s: %s", path, strerror(errno));
    }
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    int bad = off < n || fsync(fd) != 0;
    int e = errno;
    close(fd);
    if (bad) {
        unlink(path);
        return dlcL_fail_io(L, "%s: %s", path, strerror(e));
    }
    lua_pushboolean(L, 1);
    return 1;
}

void dlcL_open_proc(lua_State *L, int mod, int st) {
    mod = lua_absindex(L, mod);
    (void)st;
    static const luaL_Reg funcs[] = {{"spawn", l_spawn}, {"wait", l_wait},       {"signal", l_signal},
                                     {"self_exe", l_self_exe}, {"realpath", l_realpath}, {"die_with_parent", l_die_with_parent},
                                     {"pid", dlcL_pid},     {"sleep", l_sleep},   {"write_private", l_write_private},
                                     {"children", l_children}, {"signal_grandchild", l_signal_grandchild}, {NULL, NULL}};
    lua_newtable(L);
    luaL_setfuncs(L, funcs, 0);
    lua_setfield(L, mod, "proc");
}
