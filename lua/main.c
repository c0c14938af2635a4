/*
 * main.c - the diloco-lua executable: Lua 5.4 with the `diloco` module preloaded.
 *
 * Modelled on Lua 5.4's lua.c: the same options (-e, -i, -v, script, `-`, `--`), the
 * same `arg` table, the same REPL ("return " first, continuation on "<eof>"), the same
 * Ctrl-C trick (a signal handler that only sets a hook).  Differences, on purpose:
 * exit status 2 for usage errors, a traceback for syntax errors too, Ctrl-C at the
 * prompt discards the line instead of killing the process, and the reserved
 * subcommands of the CLI contract (docs/cli.md).
 */
#define _XOPEN_SOURCE 700 /* sigaltstack, SA_ONSTACK */
#include <errno.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "diloco/ops.h"
#include "diloco/status.h"
#include "ldiloco.h"

#ifndef DLC_LUA_CLI_VERSION
#define DLC_LUA_CLI_VERSION DLC_VERSION_STRING /* CMakeLists.txt's project(VERSION) */
#endif

#define PROGNAME "diloco-lua"
#define EXIT_USAGE 2
#define HISTORY_FILE ".diloco_history"
#define HISTORY_MAX 1000
#define EOFMARK "<eof>"

enum { OPT_E = 1, OPT_I = 2, OPT_V = 4, OPT_H = 8 };

typedef struct cli_args {
    int argc;
    char **argv;
    int flags;
    int script; /* argv index of the script; argc if there is none */
    int command; /* 1 when argv[1] looks like a subcommand (command_word) */
} cli_args;

/* A first argument that looks like a subcommand name (lowercase letters, digits, '-'):
 * lua/diloco/cli.lua's main(name, args) runs it, says so if it is unknown, or, when no
 * command has that name and a file does, returns nil so the file runs as a script.
 * The commands, their options and the --help text are cli.lua's M.commands. */
static int command_word(const char *s) {
    if (*s < 'a' || *s > 'z') return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-')) return 0;
    return 1;
}

/* Signal handlers can reach no other state: these two are the only statics they touch
 * (the REPL's own, below, serve libedit's completion hook). */
static lua_State *volatile running_L;            /* set only while docall runs */
static volatile sig_atomic_t prompt_interrupted; /* Ctrl-C while reading a line */

static int usage_error(const char *problem, const char *opt) {
    fprintf(stderr,
            PROGNAME ": %s '%s'\nusage: " PROGNAME " [options] [script [args]]  (see " PROGNAME
                     " --help)\n",
            problem, opt);
    return EXIT_USAGE;
}

static void print_version(void) {
    printf(PROGNAME " " DLC_LUA_CLI_VERSION " (libdiloco %s, " LUA_RELEASE ", gemm %s, %d threads)\n",
           dlc_version(), dlc_gemm_backend(), dlc_num_threads());
    fflush(stdout);
}

static void message(const char *prefix, const char *msg) {
    if (prefix) fprintf(stderr, "%s: ", prefix);
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
}

/* Prints and pops the error on top of the stack, if status says there is one. */
static int report(lua_State *L, int status, const char *prefix) {
    if (status != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        if (msg == NULL) msg = "(error object is not a string)";
        message(prefix, msg);
        lua_pop(L, 1);
    }
    return status;
}

static int msghandler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* A hook, not a longjmp from the handler: the error is raised at a safe point. */
static void stop_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted!");
}

static void on_call_sigint(int sig) {
    (void)sig;
    lua_sethook(running_L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT,
                1);
}

/* Calls the function below narg arguments with a traceback handler.  SA_RESETHAND:
 * a second Ctrl-C kills a process stuck in C code, as with lua.c.  If SIGINT is
 * ignored (a background job), it stays ignored. */
static int docall(lua_State *L, int narg, int nres) {
    int base = lua_gettop(L) - narg;
    struct sigaction sa, old;
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    sigaction(SIGINT, NULL, &old);
    int catch_int = old.sa_handler != SIG_IGN;
    if (catch_int) {
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_call_sigint;
        sa.sa_flags = SA_RESETHAND | SA_ONSTACK; /* ONSTACK: see dlcL_signal_stack */
        sigemptyset(&sa.sa_mask);
        running_L = L;
        sigaction(SIGINT, &sa, NULL);
    }
    int status = lua_pcall(L, narg, nres, base);
    if (catch_int) {
        sigaction(SIGINT, &old, NULL);
        running_L = NULL;
        lua_sethook(L, NULL, 0, 0); /* a Ctrl-C that came too late must not hit the next chunk */
    }
    lua_remove(L, base);
    return status;
}

/* A failed load: a syntax error gets the same "message + traceback" shape as a
 * runtime error so every Lua error looks alike; a missing file is not a Lua error. */
static int load_failed(lua_State *L, int status) {
    if (status == LUA_ERRSYNTAX) {
        luaL_traceback(L, L, lua_tostring(L, -1), 0);
        lua_remove(L, -2);
    }
    return status;
}

static int dochunk(lua_State *L, int status) {
    if (status == LUA_OK) status = docall(L, 0, 0);
    else load_failed(L, status);
    return report(L, status, PROGNAME);
}

static int dostring(lua_State *L, const char *s, const char *name) {
    return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* fname NULL means stdin. */
static int dofile(lua_State *L, const char *fname) {
    return dochunk(L, luaL_loadfile(L, fname));
}

/* Returns -1 to go on, else the exit status (after --help or a usage error). */
static int collect_args(cli_args *a) {
    int i;
    for (i = 1; i < a->argc; i++) {
        const char *opt = a->argv[i];
        if (opt[0] != '-' || strcmp(opt, "-") == 0) break;
        if (strcmp(opt, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
            a->flags |= OPT_H; /* printed by cli.lua's help(), from its tables */
            break;
        } else if (strcmp(opt, "-v") == 0 || strcmp(opt, "--version") == 0) {
            a->flags |= OPT_V;
        } else if (strcmp(opt, "-i") == 0) {
            a->flags |= OPT_I | OPT_V; /* the REPL opens with the version line */
        } else if (strncmp(opt, "-e", 2) == 0) {
            a->flags |= OPT_E;
            if (opt[2] == '\0' && ++i == a->argc)
                return usage_error("missing argument for option", opt);
        } else {
            return usage_error("unrecognized option", opt);
        }
    }
    a->script = i;
    return -1;
}

/* The options were validated by collect_args; this pass runs the -e chunks in order. */
static int run_e_args(lua_State *L, const cli_args *a) {
    for (int i = 1; i < a->script; i++) {
        const char *opt = a->argv[i];
        if (strncmp(opt, "-e", 2) != 0) continue;
        const char *code = opt[2] ? opt + 2 : a->argv[++i];
        if (dostring(L, code, "=(command line)") != LUA_OK) return 0;
    }
    return 1;
}

/* arg[0] is the script, arg[1..] its arguments, arg[-k] what came before it. */
static void create_arg_table(lua_State *L, const cli_args *a) {
    int script = a->script == a->argc ? 0 : a->script;
    lua_createtable(L, a->argc - script - 1 > 0 ? a->argc - script - 1 : 0, script + 1);
    for (int i = 0; i < a->argc; i++) {
        lua_pushstring(L, a->argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

static int handle_script(lua_State *L, const cli_args *a) {
    const char *fname = a->argv[a->script];
    if (strcmp(fname, "-") == 0 && strcmp(a->argv[a->script - 1], "--") != 0) fname = NULL;
    int status = luaL_loadfile(L, fname);
    if (status == LUA_OK) {
        int n = a->argc - a->script - 1;
        luaL_checkstack(L, n + 3, "too many arguments to script");
        for (int i = 1; i <= n; i++) lua_pushstring(L, a->argv[a->script + i]);
        status = docall(L, n, 0);
    } else {
        load_failed(L, status);
    }
    return report(L, status, PROGNAME);
}

/* ---- the REPL ----
 * The line editing is here (libedit); what the REPL does with values is Lua,
 * lua/diloco/repl.lua: tab-completion candidates, the readable printing of results,
 * and help() and the pretty print() it installs (repl.setup).  The completion hook is
 * a plain callback of readline(), so it reaches the state through repl.L; no signal
 * handler touches this struct. */

enum { LINE_OK, LINE_EOF, LINE_INTERRUPTED };
enum { CHUNK_EOF = -1, CHUNK_DROPPED = -2 }; /* never a lua load status */

#define REPL_SHOW_KEY "diloco-lua.repl.show" /* registry: repl.show, the result printer */

static struct {
    lua_State *L;       /* the REPL's state, for the completion hook */
    char history[4096]; /* the history file; "" when there is none */
    char **matches;     /* the candidates of the word being completed (malloc'd) */
    int nmatches, next;
} repl;

static void clear_matches(void) {
    for (int i = 0; i < repl.nmatches; i++) free(repl.matches[i]);
    free(repl.matches);
    repl.matches = NULL;
    repl.nmatches = repl.next = 0;
}

/* (word) -> repl.complete(word): run protected, so completion never raises. */
static int completion_list(lua_State *L) {
    luaL_checkstring(L, 1);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "diloco.repl");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "complete");
    lua_pushvalue(L, 1);
    lua_call(L, 1, 1);
    return 1;
}

static void load_matches(const char *word) {
    lua_State *L = repl.L;
    clear_matches();
    if (L == NULL || !lua_checkstack(L, 4)) return;
    int top = lua_gettop(L);
    lua_pushcfunction(L, completion_list);
    lua_pushstring(L, word);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_istable(L, -1)) {
        lua_Integer n = luaL_len(L, -1);
        repl.matches = n > 0 && n < 100000 ? calloc((size_t)n, sizeof *repl.matches) : NULL;
        for (lua_Integer i = 1; repl.matches && i <= n; i++) {
            lua_rawgeti(L, -1, i);
            const char *c = lua_tostring(L, -1);
            if (c && (repl.matches[repl.nmatches] = strdup(c)) != NULL) repl.nmatches++;
            lua_pop(L, 1);
        }
    }
    lua_settop(L, top);
}

/* readline's generator: state 0 starts a new word; each call returns one candidate,
 * malloc'd (readline frees it), then NULL. */
static char *completion_generator(const char *word, int state) {
    if (state == 0) load_matches(word);
    if (repl.next >= repl.nmatches) return NULL;
    return strdup(repl.matches[repl.next++]);
}

static char **repl_complete(const char *word, int start, int end) {
    (void)start;
    (void)end;
    rl_attempted_completion_over = 1; /* Lua names only: never file names */
    return rl_completion_matches(word, completion_generator);
}

/* Words end at blanks, quotes and operators, not at '.' or ':', so "diloco.nn.G" and
 * "t:resh" are completed as a whole. */
static char repl_word_breaks[] = " \t\n\"\\'`@$><=;|&{(+-*/%^~#,[]})";

static void repl_init_editline(void) {
    rl_readline_name = PROGNAME;
    rl_attempted_completion_function = repl_complete;
    rl_basic_word_break_characters = repl_word_breaks;
    rl_completer_word_break_characters = repl_word_breaks;
    rl_completion_append_character = '\0'; /* the candidates end in "(" or "." themselves */
}

static void on_prompt_sigint(int sig) {
    (void)sig;
    prompt_interrupted = 1;
}

/* Pushes the next line without its newline.  SIGINT is caught only while waiting
 * for input, with no SA_RESTART, so the blocked read returns and the line is dropped. */
static int read_line(lua_State *L, int firstline, int tty) {
    const char *prompt = firstline ? "> " : ">> ";
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prompt_sigint;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    prompt_interrupted = 0;
    sigaction(SIGINT, &sa, &old);
    int result = LINE_OK;
    if (tty) {
        char *line = readline(prompt);
        if (prompt_interrupted) result = LINE_INTERRUPTED;
        else if (line == NULL) result = LINE_EOF;
        else {
            if (line[0] != '\0') {
                add_history(line);
                /* now, not at exit: a closed terminal or a kill loses nothing (best
                 * effort: a read-only HOME is fine) */
                if (repl.history[0]) write_history(repl.history);
            }
            lua_pushstring(L, line);
        }
        free(line);
    } else {
        char *line = NULL;
        size_t cap = 0;
        fputs(prompt, stdout);
        fflush(stdout);
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            result = prompt_interrupted ? LINE_INTERRUPTED : LINE_EOF;
            clearerr(stdin);
        } else {
            if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
            lua_pushlstring(L, line, (size_t)n);
        }
        free(line);
    }
    sigaction(SIGINT, &old, NULL);
    if (result == LINE_INTERRUPTED) {
        fputc('\n', stdout);
        fflush(stdout);
    }
    return result;
}

static int incomplete(lua_State *L, int status) {
    if (status != LUA_ERRSYNTAX) return 0;
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    size_t marklen = sizeof(EOFMARK) - 1;
    if (len >= marklen && strcmp(msg + len - marklen, EOFMARK) == 0) {
        lua_pop(L, 1);
        return 1;
    }
    return 0;
}

/* Reads one complete chunk and leaves it compiled (or its error) on the stack.
 * Returns CHUNK_EOF, or CHUNK_DROPPED when Ctrl-C discarded the input. */
static int load_chunk(lua_State *L, int tty) {
    lua_settop(L, 0);
    int r = read_line(L, 1, tty);
    if (r == LINE_EOF) return CHUNK_EOF;
    if (r == LINE_INTERRUPTED) return CHUNK_DROPPED;
    /* "=expr" is the Lua 5.1 spelling of "return expr"; lua.c 5.4 still takes it. */
    const char *line = lua_tostring(L, 1);
    if (line[0] == '=') {
        lua_pushfstring(L, "return %s", line + 1);
        lua_replace(L, 1);
        line = lua_tostring(L, 1);
    }
    const char *ret = lua_pushfstring(L, "return %s;", line);
    int status = luaL_loadbuffer(L, ret, strlen(ret), "=stdin");
    lua_remove(L, -2);
    if (status != LUA_OK) {
        lua_pop(L, 1);
        for (;;) {
            size_t len;
            const char *chunk = lua_tolstring(L, 1, &len);
            status = luaL_loadbuffer(L, chunk, len, "=stdin");
            if (!incomplete(L, status)) break;
            r = read_line(L, 0, tty);
            if (r == LINE_INTERRUPTED) {
                lua_settop(L, 0);
                return CHUNK_DROPPED;
            }
            if (r == LINE_EOF) { /* report the incomplete chunk; the next read ends the REPL */
                status = luaL_loadbuffer(L, chunk, len, "=stdin");
                break;
            }
            lua_pushliteral(L, "\n");
            lua_insert(L, -2);
            lua_concat(L, 3);
        }
    }
    lua_remove(L, 1);
    return status;
}

/* Prints a chunk's results with repl.show (readable tables and tensors), or with
 * print when the Lua side could not be loaded. */
static void print_results(lua_State *L) {
    int n = lua_gettop(L);
    if (n == 0) return;
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    lua_getfield(L, LUA_REGISTRYINDEX, REPL_SHOW_KEY);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_getglobal(L, "print");
    }
    lua_insert(L, 1);
    if (lua_pcall(L, n, 0, 0) != LUA_OK)
        message(NULL, lua_pushfstring(L, "error printing the results (%s)", lua_tostring(L, -1)));
}

/* repl.setup() (help, the pretty print) and repl.show kept in the registry. */
static int repl_setup(lua_State *L) {
    lua_getglobal(L, "require");
    lua_pushliteral(L, "diloco.repl");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "setup");
    lua_call(L, 0, 0);
    lua_getfield(L, -1, "show");
    lua_setfield(L, LUA_REGISTRYINDEX, REPL_SHOW_KEY);
    return 0;
}

static void do_repl(lua_State *L) {
    int tty = isatty(STDIN_FILENO);
    const char *home = getenv("HOME");
    lua_pushcfunction(L, repl_setup);
    if (report(L, docall(L, 0, 0), PROGNAME) != LUA_OK)
        message(PROGNAME, "the REPL goes on without help() and readable printing");
    repl.L = L;
    repl.history[0] = '\0';
    if (tty) {
        setlocale(LC_CTYPE, ""); /* libedit rejects non-ASCII keys in the "C" locale */
        repl_init_editline();
        stifle_history(HISTORY_MAX);
        if (home && snprintf(repl.history, sizeof repl.history, "%s/" HISTORY_FILE, home) <
                        (int)sizeof repl.history)
            read_history(repl.history);
        else
            repl.history[0] = '\0';
    }
    int status;
    /* Unlike scripts, a syntax error here gets no traceback: the user just typed it. */
    while ((status = load_chunk(L, tty)) != CHUNK_EOF) {
        if (status == CHUNK_DROPPED) continue;
        if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
        if (status == LUA_OK) print_results(L);
        else report(L, status, NULL);
    }
    lua_settop(L, 0);
    fputc('\n', stdout);
    fflush(stdout);
    clear_matches();
    repl.L = NULL;
}

/* ---- startup ---- */

/* Where the Lua half of diloco (diloco/cli.lua, nn.lua, ...) is found, decided once at
 * startup from the executable's own location (/proc/self/exe), never from a path fixed
 * at build time, so an install works under any prefix:
 *   - a build tree: the build directory holds DLC_SOURCE_MARKER, a one-line file naming
 *     the source tree's lua/ directory (CMakeLists.txt writes it; install never copies it);
 *   - an install: EXEDIR/DLC_LUA_RELDIR (../share/lua/5.4 from bin/) holding diloco/cli.lua;
 *   - neither: package.path as Lua made it from LUA_PATH, said so by --version. */
#ifndef DLC_LUA_RELDIR
#define DLC_LUA_RELDIR "../share/lua/5.4"
#endif
#define DLC_SOURCE_MARKER "diloco-lua.srcdir"

enum { LUA_DIR_NONE, LUA_DIR_SOURCE, LUA_DIR_INSTALLED };

typedef struct lua_dir {
    int kind;
    char path[4096];
} lua_dir;

static int is_file(const char *dir, const char *name) {
    char p[4200];
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
    FILE *f = fopen(p, "r");
    if (f) fclose(f);
    return f != NULL;
}

static void find_lua_dir(lua_dir *d) {
    char exe[4096], p[4200];
    d->kind = LUA_DIR_NONE;
    d->path[0] = '\0';
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return;
    *slash = '\0'; /* exe is now the executable's directory */
    if (snprintf(p, sizeof p, "%s/" DLC_SOURCE_MARKER, exe) < (int)sizeof p) {
        FILE *f = fopen(p, "r");
        if (f) {
            int ok = fgets(d->path, sizeof d->path, f) != NULL;
            fclose(f);
            d->path[strcspn(d->path, "\r\n")] = '\0';
            if (ok && d->path[0] && is_file(d->path, "diloco/cli.lua")) {
                d->kind = LUA_DIR_SOURCE;
                return;
            }
            d->path[0] = '\0';
        }
    }
    if (snprintf(p, sizeof p, "%s/" DLC_LUA_RELDIR, exe) < (int)sizeof p &&
        realpath(p, d->path) != NULL && is_file(d->path, "diloco/cli.lua")) {
        d->kind = LUA_DIR_INSTALLED;
        return;
    }
    d->path[0] = '\0';
}

/* The found directory goes first in package.path, so the files next to this executable
 * win over an older install on LUA_PATH. */
static void set_package_path(lua_State *L, const lua_dir *d) {
    if (d->kind == LUA_DIR_NONE) return;
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", d->path, d->path);
    lua_getfield(L, -2, "path");
    lua_concat(L, 2);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
}

/* --version: the first line is the contract (the `version` ctest), the second says
 * which Lua files this executable runs. */
static void print_lua_dir(const lua_dir *d) {
    if (d->kind == LUA_DIR_SOURCE) printf("lua files: %s (build tree: the source's lua/)\n", d->path);
    else if (d->kind == LUA_DIR_INSTALLED) printf("lua files: %s (installed)\n", d->path);
    else
        printf("lua files: not found next to the executable (" DLC_LUA_RELDIR
               "); using package.path (LUA_PATH)\n");
    fflush(stdout);
}

/* Everything that touches Lua runs protected: an error here is reported, not fatal. */
static int pmain(lua_State *L) {
    cli_args *a = lua_touserdata(L, 1); /* cli.main may turn a command word back into a script */
    lua_dir dir;
    find_lua_dir(&dir);
    luaL_checkversion(L);
    luaL_openlibs(L);
    set_package_path(L, &dir);
    luaL_requiref(L, "diloco", luaopen_diloco, 0);
    lua_setglobal(L, "diloco");
    create_arg_table(L, a);
    lua_settop(L, 0);

    if (a->flags & OPT_H) {
        lua_getglobal(L, "require");
        lua_pushliteral(L, "diloco.cli");
        lua_call(L, 1, 1);
        lua_getfield(L, -1, "help");
        lua_call(L, 0, 0);
        lua_pushinteger(L, EXIT_SUCCESS);
        return 1;
    }

    if (a->command) { /* diloco-lua COMMAND args...: exit status from cli.main */
        lua_getglobal(L, "diloco"); /* diloco.cli: names LUA_PATH if the Lua files are missing */
        lua_getfield(L, -1, "cli");
        lua_getfield(L, -1, "main");
        lua_pushstring(L, a->argv[1]);
        lua_createtable(L, a->argc - 2, 0);
        for (int i = 2; i < a->argc; i++) {
            lua_pushstring(L, a->argv[i]);
            lua_rawseti(L, -2, i - 1);
        }
        lua_call(L, 2, 1);
        if (!lua_isnil(L, -1)) {
            lua_Integer code = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : EXIT_FAILURE;
            lua_pushinteger(L, code);
            return 1;
        }
        a->command = 0; /* not a command but a file of that name: run it as a script */
        a->script = 1;
        create_arg_table(L, a);
        lua_settop(L, 0);
    }

    int failed = 0;
    if (a->flags & OPT_V) {
        print_version();
        if (!(a->flags & OPT_I)) print_lua_dir(&dir); /* -i: the REPL banner, one line */
    }
    if (!run_e_args(L, a)) failed = 1;
    else if (a->script < a->argc && handle_script(L, a) != LUA_OK) failed = 1;
    else if (a->flags & OPT_I) do_repl(L);
    else if (a->script == a->argc && !(a->flags & (OPT_E | OPT_V))) {
        if (isatty(STDIN_FILENO)) {
            print_version();
            do_repl(L);
        } else if (dofile(L, NULL) != LUA_OK) {
            failed = 1;
        }
    }
    lua_pushinteger(L, failed ? EXIT_FAILURE : EXIT_SUCCESS);
    return 1;
}

int main(int argc, char **argv) {
    int command = argc >= 2 && argv[1] != NULL && command_word(argv[1]);
    /* Before any thread exists: every handler of this process runs on this stack. */
    dlcL_signal_stack();
    const char *gemm = getenv("DILOCO_GEMM");
    if (gemm && *gemm && dlc_set_gemm_backend(gemm) != DLC_OK) {
        fprintf(stderr, PROGNAME ": DILOCO_GEMM: %s\n", dlc_last_error());
        return EXIT_USAGE;
    }
    cli_args a = {argc, argv, 0, 0, 0};
    if (argc == 0 || argv[0] == NULL) { /* exec'd without argv[0]: nothing to index */
        static char *fallback[] = {PROGNAME, NULL};
        a.argc = 1;
        a.argv = fallback;
    }
    if (command) {
        /* A run (and later every learner) turns SIGINT/TERM/HUP into "finish the step,
         * save, exit 128 + signal" from its first instruction on. */
        if (strcmp(argv[1], "run") == 0 || strcmp(argv[1], "sim") == 0) dlcL_catch_signals();
        a.command = 1;
        a.script = a.argc;
    } else {
        int early = collect_args(&a);
        if (early >= 0) return early;
    }

    lua_State *L = luaL_newstate();
    if (L == NULL) {
        message(PROGNAME, "cannot create state: not enough memory");
        return EXIT_FAILURE;
    }
    lua_pushcfunction(L, msghandler);
    lua_pushcfunction(L, pmain);
    lua_pushlightuserdata(L, &a);
    int status = lua_pcall(L, 1, 1, 1);
    int result = status == LUA_OK ? (int)lua_tointeger(L, -1) : EXIT_FAILURE;
    report(L, status, PROGNAME);
    lua_close(L);
    fflush(stdout);
    return result;
}
