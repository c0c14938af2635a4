/*
 * lsignal.c - the stop signals of a run: diloco.signals (and, under their older names,
 * the same functions at the top of diloco).
 *
 *   diloco.signals.catch()      from now on SIGINT, SIGTERM and SIGHUP only raise a flag
 *                               (the training loop finishes its step, saves and exits with
 *                               128 + the signal's number); a second one of them kills the
 *                               process as the default action would.  SIGPIPE only raises
 *                               a flag too: a write to a closed pipe fails with EPIPE and
 *                               the writer reports it.  Idempotent; keeps the flags (a
 *                               signal caught earlier, e.g. by the CLI at startup, stays
 *                               pending).
 *   diloco.signals.clear()      forgets the caught signals (a run that handled one calls it)
 *   diloco.signals.pending()    nil, or the name ("SIGINT", "SIGTERM", "SIGHUP") and
 *                               number of the first signal caught since catch()
 *   diloco.signals.pipe_broken()  true once a SIGPIPE was caught since catch()
 *   diloco.catch_signals, clear_signals, signal_pending, pipe_broken: the same four, the
 *   names they had at the top of diloco; diloco.catch_sigint(), diloco.sigint_pending():
 *   older still: catch(), and true if any of the three signals is pending
 *
 * Why the handlers are safe next to any kernel library: they only store to
 * sig_atomic_t flags (and re-raise for a second signal), and they run on an alternate
 * signal stack (sigaltstack + SA_ONSTACK) of the thread that installed them.  A signal
 * that lands inside oneDNN's JIT code otherwise has its frame pushed onto the JIT
 * kernel's stack, below its stack pointer, where the kernel keeps data: that corrupted
 * the heap in 15 of 53 Ctrl-Cs (issue 7).  The OpenMP worker threads, which run the
 * same kernels but have no alternate stack, block these signals, so a process-directed
 * signal is always delivered to the thread that has one (dlcL_block_signals_in_workers,
 * called again whenever the thread count changes, since the pool may grow).
 */
#define _XOPEN_SOURCE 700 /* sigaltstack, SA_ONSTACK */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "ldiloco.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* The caught signals; SIGPIPE has a flag of its own since it never stops a run by itself. */
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define N_STOP_SIGNALS ((int)(sizeof stop_signals / sizeof stop_signals[0]))
static volatile sig_atomic_t pending_signal; /* first stop signal caught, 0 if none */
static volatile sig_atomic_t pipe_broken;

/* Size of the alternate signal stack: far above MINSIGSTKSZ even with the AVX-512
 * state in the signal frame (about 3 KiB), and the handlers use a few bytes. */
#define ALT_STACK_BYTES (64 * 1024)

static void on_stop_signal(int sig) {
    if (pending_signal != 0) { /* the second one: the default action, now */
        signal(sig, SIG_DFL);
        raise(sig); /* blocked while this handler runs; delivered as it returns */
        return;
    }
    pending_signal = sig;
}

static void on_sigpipe(int sig) {
    (void)sig;
    pipe_broken = 1;
}

int dlcL_signal_stack(void) {
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) return 0; /* has one */
    stack_t ss;
    ss.ss_sp = malloc(ALT_STACK_BYTES); /* kept for the life of the thread */
    if (ss.ss_sp == NULL) return -1;
    ss.ss_size = ALT_STACK_BYTES;
    ss.ss_flags = 0;
    if (sigaltstack(&ss, NULL) != 0) {
        free(ss.ss_sp);
        return -1;
    }
    return 0;
}

void dlcL_block_signals_in_workers(void) {
#ifdef _OPENMP
    int n = dlc_num_threads();
    if (n < 2) return;
    sigset_t set;
    sigemptyset(&set);
    for (int i = 0; i < N_STOP_SIGNALS; i++) sigaddset(&set, stop_signals[i]);
    sigaddset(&set, SIGPIPE);
    /* The pool's threads persist between regions: blocking once per thread sticks. */
#pragma omp parallel num_threads(n)
    {
        if (omp_get_thread_num() != 0) pthread_sigmask(SIG_BLOCK, &set, NULL);
    }
#endif
}

void dlcL_catch_signals(void) {
    dlcL_signal_stack(); /* without one the handlers still work, as before */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_STOP_SIGNALS; i++) sigaddset(&sa.sa_mask, stop_signals[i]);
    sa.sa_flags = SA_ONSTACK | SA_RESTART;
    sa.sa_handler = on_stop_signal;
    for (int i = 0; i < N_STOP_SIGNALS; i++) {
        struct sigaction old;
        /* nohup's SIGHUP stays ignored.  SIGINT and SIGTERM are taken even when ignored
         * (sh ignores SIGINT in its background jobs): a launcher's `kill -INT` must still
         * stop the run cleanly. */
        if (stop_signals[i] == SIGHUP && sigaction(SIGHUP, NULL, &old) == 0 &&
            old.sa_handler == SIG_IGN)
            continue;
        sigaction(stop_signals[i], &sa, NULL);
    }
    sa.sa_handler = on_sigpipe;
    sigaction(SIGPIPE, &sa, NULL);
}

static int l_catch_signals(lua_State *L) {
    (void)L;
    dlcL_catch_signals();
    /* Here, not in dlcL_catch_signals: this starts the OpenMP pool, which the CLI must
     * not do at startup (a process that will fork should not have one yet). */
    dlcL_block_signals_in_workers();
    return 0;
}

int dlcL_signal_caught(void *arg) {
    (void)arg;
    return pending_signal != 0;
}

static int l_clear_signals(lua_State *L) {
    (void)L;
    pending_signal = 0;
    pipe_broken = 0;
    return 0;
}

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "signal";
    }
}

static int l_signal_pending(lua_State *L) {
    int sig = pending_signal;
    if (sig == 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushstring(L, signal_name(sig));
    lua_pushinteger(L, sig);
    return 2;
}

static int l_sigint_pending(lua_State *L) {
    lua_pushboolean(L, pending_signal != 0);
    return 1;
}

static int l_pipe_broken(lua_State *L) {
    lua_pushboolean(L, pipe_broken != 0);
    return 1;
}

void dlcL_open_signals(lua_State *L, int mod, int st) {
    (void)st;
    mod = lua_absindex(L, mod);
    static const luaL_Reg funcs[] = {{"catch", l_catch_signals},     {"clear", l_clear_signals},
                                     {"pending", l_signal_pending},  {"pipe_broken", l_pipe_broken},
                                     {NULL, NULL}};
    static const luaL_Reg top[] = {{"catch_signals", l_catch_signals},   {"clear_signals", l_clear_signals},
                                   {"signal_pending", l_signal_pending}, {"pipe_broken", l_pipe_broken},
                                   {"catch_sigint", l_catch_signals},    {"sigint_pending", l_sigint_pending},
                                   {NULL, NULL}};
    lua_newtable(L);
    luaL_setfuncs(L, funcs, 0);
    lua_setfield(L, mod, "signals");
    lua_pushvalue(L, mod);
    luaL_setfuncs(L, top, 0);
    lua_pop(L, 1);
}
