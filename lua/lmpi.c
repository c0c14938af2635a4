/*
 * lmpi.c - diloco.mpi: the few MPI calls an island of several ranks makes (docs/mpi.md).
 *
 * An island of R ranks is one MPI job: every rank runs the inner step on its rows of the
 * island's batch, the gradients are averaged in place over the gradient arena (one
 * MPI_Allreduce), and rank 0 alone speaks to the syncer; what it applies at a step
 * boundary reaches the other ranks by MPI_Bcast of the arena's range.  lua/diloco/
 * learner.lua drives it; nothing here knows the protocol.
 *
 *     local mpi = diloco.mpi            -- mpi.available is false in a build without MPI
 *     local rank, size = mpi.init()
 *     local loss = mpi.mean(local_loss)                    -- before the backward pass
 *     mpi.average_grads(params)                            -- the gradients: the mean
 *     mpi.bcast(params:flat(), offset, count)              -- rank 0's floats to all
 *     local msg = mpi.bcast_string(rank == 0 and text or nil)
 *
 * Every call checks its MPI status (the communicator returns errors rather than
 * aborting) and raises a Lua error naming the call and MPI's reason: a rank whose
 * peer died ends with a message instead of hanging or aborting silently.
 *
 * Threads: MPI is initialised MPI_THREAD_FUNNELED; only the Lua (compute) thread calls
 * it.  The transport's I/O thread never does.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "ldiloco.h"

#ifdef DLC_HAVE_MPI
#include <mpi.h>

static int inited;
/* What average_grads and bcast cost this process (mpi.stats): the allreduce's share of
 * the step is the figure an island of several ranks is judged by. */
static double allreduce_s, bcast_s;
static long long allreduce_n, bcast_n, bcast_bytes;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Raises "NAME: MPI's reason" unless rc is MPI_SUCCESS. */
static void check(lua_State *L, int rc, const char *name) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
    text[len < (int)sizeof text ? len : (int)sizeof text - 1] = 0;
    luaL_error(L, "%s failed: %s (a rank of this island ended or its link broke)", name,
               len ? text : "unknown MPI error");
}

static void need_init(lua_State *L) {
    if (!inited) luaL_error(L, "diloco.mpi: call mpi.init() first");
}

/* mpi.init() -> rank (0-based), size.  Idempotent. */
static int l_init(lua_State *L) {
    if (!inited) {
        int have = 0;
        MPI_Initialized(&have);
        if (!have) {
            int provided = 0;
            check(L, MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
        }
        check(L, MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        inited = 1;
    }
    int rank = 0, size = 1;
    check(L, MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    check(L, MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    lua_pushinteger(L, rank);
    lua_pushinteger(L, size);
    return 2;
}

/* mpi.finalize(): after the last collective of every rank. */
static int l_finalize(lua_State *L) {
    if (inited) {
        int done = 0;
        MPI_Finalized(&done);
        if (!done) check(L, MPI_Finalize(), "MPI_Finalize");
    }
    return 0;
}

/* mpi.abort(code): ends the whole job (every rank) with that exit status. */
static int l_abort(lua_State *L) {
    int code = (int)luaL_optinteger(L, 1, 1);
    if (inited) MPI_Abort(MPI_COMM_WORLD, code);
    return 0;
}

/* Waits for a non-blocking request without spinning a core: the ranks of several
 * islands share the machine's cores, and rank 0 may wait on the network for long. */
static void wait_quietly(lua_State *L, MPI_Request *req, const char *name) {
    for (int i = 0;; i++) {
        int done = 0;
        check(L, MPI_Test(req, &done, MPI_STATUS_IGNORE), name);
        if (done) return;
        if (i < 64) continue; /* a few tests first: the common case is a short wait */
        struct timespec ts = {0, i < 1024 ? 50000 : 500000};
        nanosleep(&ts, NULL);
    }
}

/* mpi.mean(x) -> the mean of x over the ranks (one MPI_Allreduce of a double): the loss,
 * taken before the backward pass, where the ranks meet anyway. */
static int l_mean(lua_State *L) {
    need_init(L);
    double v[1] = {luaL_checknumber(L, 1)};
    int size = 1;
    check(L, MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    double t0 = now_s();
    check(L, MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    allreduce_s += now_s() - t0;
    lua_pushnumber(L, v[0] / size);
    return 1;
}

/* mpi.average_grads(params [, prescaled]): the gradient arena becomes the mean of every
 * rank's, in place: one MPI_Allreduce of SUM, then a scale by 1/R, unless prescaled says
 * the backward pass was seeded with 1/R already (the island's way: the call is then the
 * bare allreduce, no pass over the arena). */
static int l_average_grads(lua_State *L) {
    need_init(L);
    dlc_params *p = dlcL_checkparams(L, 1);
    int prescaled = lua_toboolean(L, 2);
    int size = 1;
    check(L, MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    float *g = dlc_params_grad(p);
    int64_t n = dlc_params_size(p);
    double t0 = now_s();
    for (int64_t off = 0; off < n;) { /* counts are int: chunks of at most 2^30 floats */
        int c = (int)(n - off < (1 << 30) ? n - off : (1 << 30));
        check(L, MPI_Allreduce(MPI_IN_PLACE, g + off, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        off += c;
    }
    if (size > 1 && !prescaled) {
        const float s = 1.0f / (float)size;
        for (int64_t i = 0; i < n; i++) g[i] *= s;
    }
    allreduce_s += now_s() - t0;
    allreduce_n++;
    return 0;
}

/* The floats [offset, offset + count) of tensor arg (contiguous), checked. */
static float *range_of(lua_State *L, int arg, int64_t *count) {
    dlc_tensor *t = dlcL_checktensor(L, arg);
    lua_Integer off = luaL_optinteger(L, arg + 1, 0);
    lua_Integer n = luaL_optinteger(L, arg + 2, (lua_Integer)t->numel - off);
    if (off < 0 || n < 0 || off > t->numel || n > t->numel - off)
        luaL_error(L, "mpi: floats [%I, %I) are outside the tensor's %I", (LUAI_UACINT)off,
                   (LUAI_UACINT)(off + n), (LUAI_UACINT)t->numel);
    *count = n;
    return t->data + off;
}

/* mpi.allreduce(tensor [, offset, count]): SUM in place, nothing else (the bare call
 * scripts/bench/mpi measures average_grads against). */
static int l_allreduce(lua_State *L) {
    need_init(L);
    int64_t n;
    float *d = range_of(L, 1, &n);
    for (int64_t off = 0; off < n;) {
        int c = (int)(n - off < (1 << 30) ? n - off : (1 << 30));
        check(L, MPI_Allreduce(MPI_IN_PLACE, d + off, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        off += c;
    }
    return 0;
}

/* mpi.bcast(tensor [, offset, count]): rank 0's floats to every rank, in place.  A
 * blocking MPI_Bcast: it follows a control message every rank has just received, so
 * nobody waits long, and MPI progresses a large payload only inside its calls. */
static int l_bcast(lua_State *L) {
    need_init(L);
    int64_t n;
    float *d = range_of(L, 1, &n);
    double t0 = now_s();
    for (int64_t off = 0; off < n;) {
        int c = (int)(n - off < (1 << 30) ? n - off : (1 << 30));
        check(L, MPI_Bcast(d + off, c, MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Bcast");
        off += c;
    }
    bcast_s += now_s() - t0;
    bcast_n++;
    bcast_bytes += n * (int64_t)sizeof(float);
    return 0;
}

/* mpi.bcast_string(s on rank 0, nil elsewhere) -> rank 0's string on every rank.  The
 * others wait without spinning (rank 0 may be waiting on the syncer meanwhile). */
static int l_bcast_string(lua_State *L) {
    need_init(L);
    int rank = 0;
    check(L, MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    size_t len = 0;
    const char *s = rank == 0 ? luaL_checklstring(L, 1, &len) : NULL;
    if (len > (size_t)1 << 30) return luaL_error(L, "mpi.bcast_string: %I bytes: at most 2^30", (LUAI_UACINT)len);
    long long n = (long long)len;
    MPI_Request req;
    check(L, MPI_Ibcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD, &req), "MPI_Ibcast");
    wait_quietly(L, &req, "MPI_Ibcast");
    if (n < 0 || n > (1LL << 30)) return luaL_error(L, "mpi.bcast_string: rank 0 sent a length of %I", (LUAI_UACINT)n);
    luaL_Buffer B;
    char *buf = luaL_buffinitsize(L, &B, (size_t)n + 1);
    if (rank == 0) memcpy(buf, s, (size_t)n);
    if (n > 0) {
        check(L, MPI_Ibcast(buf, (int)n, MPI_CHAR, 0, MPI_COMM_WORLD, &req), "MPI_Ibcast");
        wait_quietly(L, &req, "MPI_Ibcast");
    }
    luaL_pushresultsize(&B, (size_t)n);
    return 1;
}

/* mpi.same(tensor) -> true when every rank holds the same bytes (a 64-bit FNV-1a of
 * them, its minimum and maximum over the ranks): the island's ranks never drift. */
static int l_same(lua_State *L) {
    need_init(L);
    int64_t n;
    const unsigned char *d = (const unsigned char *)range_of(L, 1, &n);
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n * (int64_t)sizeof(float); i++) h = (h ^ d[i]) * 1099511628211ull;
    uint64_t lo = h, hi = h;
    check(L, MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
    check(L, MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    lua_pushboolean(L, lo == hi);
    return 1;
}

/* mpi.barrier() */
static int l_barrier(lua_State *L) {
    need_init(L);
    MPI_Request req;
    check(L, MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier");
    wait_quietly(L, &req, "MPI_Ibarrier");
    return 0;
}

/* mpi.stats() -> {allreduce_s, allreduce_n, bcast_s, bcast_n, bcast_bytes}: this
 * process's time in average_grads and mean (allreduce_s; allreduce_n counts the
 * average_grads) and in bcast of floats, since it started. */
static int l_stats(lua_State *L) {
    lua_createtable(L, 0, 5);
    dlcL_setnum(L, "allreduce_s", allreduce_s);
    dlcL_setint(L, "allreduce_n", allreduce_n);
    dlcL_setnum(L, "bcast_s", bcast_s);
    dlcL_setint(L, "bcast_n", bcast_n);
    dlcL_setint(L, "bcast_bytes", bcast_bytes);
    return 1;
}

/* mpi.library() -> the MPI library's version line. */
static int l_library(lua_State *L) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) len = 0;
    v[len < (int)sizeof v ? len : (int)sizeof v - 1] = 0;
    char *nl = strchr(v, '\n');
    if (nl) *nl = 0;
    lua_pushstring(L, v);
    return 1;
}

void dlcL_open_mpi(lua_State *L, int mod, int st) {
    mod = lua_absindex(L, mod);
    (void)st;
    static const luaL_Reg funcs[] = {
        {"init", l_init},           {"finalize", l_finalize},   {"abort", l_abort},
        {"average_grads", l_average_grads}, {"allreduce", l_allreduce}, {"bcast", l_bcast},
        {"bcast_string", l_bcast_string}, {"same", l_same},   {"barrier", l_barrier},
        {"library", l_library},     {"stats", l_stats},         {"mean", l_mean}, {NULL, NULL}};
    lua_newtable(L);
    luaL_setfuncs(L, funcs, 0);
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "available");
    lua_setfield(L, mod, "mpi");
}

#else /* built without MPI: diloco.mpi says so */

void dlcL_open_mpi(lua_State *L, int mod, int st) {
    mod = lua_absindex(L, mod);
    (void)st;
    lua_newtable(L);
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "available");
    lua_pushliteral(L, "this diloco-lua was built without MPI: install libopenmpi-dev (scripts/setup does) and "
                       "configure again");
    lua_setfield(L, -2, "why");
    lua_setfield(L, mod, "mpi");
}

#endif
