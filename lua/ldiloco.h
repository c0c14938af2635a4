/*
 * ldiloco.h - the Lua 5.4 binding of libdiloco: the module entry point and the
 * helpers every per-type binding file (ltensor.c, ...) shares.
 *
 * Layering (as torch7's TH / luaT / per-type bindings): core/ knows nothing of Lua;
 * this header is the thin helper layer; one l<module>.c file per core module adds
 * its functions to the module table in its dlcL_open_<module>().
 *
 *     lua_State *L = luaL_newstate();
 *     luaL_openlibs(L);
 *     luaL_requiref(L, "diloco", luaopen_diloco, 0);   // or require "diloco"
 *
 * Ownership: a Tensor userdata is a box holding ONE reference to a dlc_tensor
 * (NULL once released).  Boxes are created "closed" (NULL) BEFORE the tensor is
 * acquired, so a memory error while creating the box never leaks a tensor:
 *
 *     dlc_tensor *a = dlcL_checktensor(L, 1), *b = dlcL_checktensor(L, 2);  // check first
 *     dlc_tensor **slot = dlcL_newtensor(L);                     // push an empty box
 *     return dlcL_settensor(L, dlcL_getstate(L), slot, dlc_matmul(a, b, 0, 0));
 *                                                 // stores it and returns 1, or raises
 *
 * Conventions (see ltensor.c): positions and axes are 1-based in Lua, negative
 * counts from the end; index VALUES stored in tensors are 0-based as in the core.
 *
 * The Tensor binding is two files: ltensor.c (the type: boxes, lifetime, properties,
 * element access, registration) and lops.c (the op methods and diloco.<op>); the
 * helpers they share are declared at the end of this header.
 */
#ifndef DILOCO_LDILOCO_H
#define DILOCO_LDILOCO_H

#include <stddef.h>
#include <lua.h>
#include <lauxlib.h>
#include "diloco/diloco.h"

int luaopen_diloco(lua_State *L);

/* Registry / metatable names. */
#define DLCL_TENSOR "diloco.Tensor"
#define DLCL_GENERATOR "diloco.Generator"

/* Per-lua_State binding state: the default random generator (diloco.seed) and the
 * allocation counter behind the GC hints.  Created by luaopen_diloco, kept in the
 * registry (dlcL_getstate) and as upvalue 1 of every C function of the module
 * (DLCL_UPSTATE, the cheap way for those functions). */
typedef struct dlcL_state {
    dlc_rng rng;        /* used by randn/rand/dropout when no Generator is given */
    size_t since_hint;  /* tensor bytes allocated since the last GC hint */
} dlcL_state;

#define DLCL_UPSTATE(L) ((dlcL_state *)lua_touserdata((L), lua_upvalueindex(1)))

/* The state of this lua_State; raises if diloco was never opened in it. */
dlcL_state *dlcL_getstate(lua_State *L);

/* ltensor.c: adds the Tensor methods, the op functions (lops.c) and diloco.Tensor
 * (the methods table) to the module table at `mod`, with the state userdata at `st`
 * as their upvalue, and registers the Tensor metatable. */
void dlcL_open_tensor(lua_State *L, int mod, int st);
/* laccount.c: pushes a row of the run's account (core/account.h) as two tables, its
 * shares and its seconds by bucket name. */
void dlcL_push_account_row(lua_State *L, const dlc_account_row *r);
/* lsys.c: clocks, isatty, compute threads, gemm backend, run-directory
 * locks and listings. */
void dlcL_open_sys(lua_State *L, int mod, int st);
/* lsignal.c: diloco.signals (catch, clear, pending, pipe_broken) and their older names
 * at the top of diloco. */
void dlcL_open_signals(lua_State *L, int mod, int st);
/* lsignal.c: gives the calling thread an alternate signal stack if it has none (so a
 * handler never writes below the stack pointer of a JIT kernel it interrupted);
 * 0, or -1 if none could be made. */
int dlcL_signal_stack(void);
/* lsignal.c: blocks SIGINT, SIGTERM, SIGHUP and SIGPIPE in the OpenMP worker threads of
 * the calling thread's pool, so those signals reach the thread with the handlers and
 * the alternate stack. */
void dlcL_block_signals_in_workers(void);
/* lsignal.c: nonzero once a stop signal was caught (the drivers' interrupted() hook:
 * a wait in C honours Ctrl-C at once); arg unused. */
int dlcL_signal_caught(void *arg);
/* lsignal.c: diloco.catch_signals() from C (the CLI calls it first thing for `run`, so a
 * signal during startup is not lost). */
void dlcL_catch_signals(void);
/* ldata.c: diloco.TextData, diloco.ImageData (datasets and their loaders). */
void dlcL_open_data(lua_State *L, int mod, int st);
/* lckpt.c: safetensors save/load. */
void dlcL_open_ckpt(lua_State *L, int mod, int st);
/* ljson.c: json_encode, json_decode, json_null. */
void dlcL_open_json(lua_State *L, int mod, int st);
/* loptim.c: diloco.Params (one arena per model), diloco.Optimizer, lr schedules. */
void dlcL_open_optim(lua_State *L, int mod, int st);
/* loptim.c: the live dlc_params of the Params box at `arg` (borrowed: valid while the
 * box is open and reachable); raises a type error, or "Params has been closed". */
dlc_params *dlcL_checkparams(lua_State *L, int arg);
/* lcodec.c: diloco.codec_encode, codec_decode, codec_size, codecs (core/codec.h). */
void dlcL_open_codec(lua_State *L, int mod, int st);
/* lplan.c: diloco.Plan, fragment plans over a Params arena (core/frag.h). */
void dlcL_open_plan(lua_State *L, int mod, int st);
/* lplan.c: the live dlc_plan of the Plan box at `arg` (borrowed while the box is open). */
dlc_plan *dlcL_checkplan(lua_State *L, int arg);
/* lchaos.c: the live dlc_chaos of the Chaos box at `arg` (borrowed while the box is open). */
dlc_chaos *dlcL_checkchaos(lua_State *L, int arg);
/* lvtime.c: diloco.VTime, the virtual-time driver (core/vtime.h). */
void dlcL_open_vtime(lua_State *L, int mod, int st);
/* diloco.Syncer and diloco.Learner, the real-time drivers (lrt.c). */
void dlcL_open_rt(lua_State *L, int mod, int st);
/* diloco.proc, child processes of a supervisor (lproc.c). */
void dlcL_open_proc(lua_State *L, int mod, int st);
/* lmachine.c: diloco.machine, the core state machines driven by hand. */
void dlcL_open_machine(lua_State *L, int mod, int st);
/* lmpi.c: diloco.mpi, the collectives of an island of several ranks (docs/mpi.md); its
 * `available` is false in a build without MPI. */
void dlcL_open_mpi(lua_State *L, int mod, int st);
/* The learner and syncer options of diloco.VTime (and of the real-time drivers), checked
 * (raises naming the option), through one run description (core/run.h) so that both
 * derive from the same fields: the learner table at lt (with learner.preset) and, for
 * the syncer, the syncer table at st; P, the plan kind and the hashes come from plan.
 * The learner's id is 0 (set it after).  The syncer's embedding list becomes a userdata
 * pushed on the stack: it lives until the calling C function returns.  M learners. */
struct dlc_learner_params;
struct dlc_syncer_params;
struct dlc_merge_info;
struct dlc_plan;
void dlcL_read_learner_params(lua_State *L, int lt, const struct dlc_plan *plan, struct dlc_learner_params *lp);
void dlcL_read_syncer_params(lua_State *L, int lt, int st, const struct dlc_plan *plan, int M,
                             struct dlc_syncer_params *sp);
/* The run description itself from the same tables (st 0: the syncer's fields at their
 * defaults), with the heartbeat, the syncer's timeout and the embedding flags (each may
 * be NULL). */
struct dlc_run_params;
void dlcL_read_run(lua_State *L, int lt, int st, const struct dlc_plan *plan, struct dlc_run_params *run,
                   double *heartbeat, double *timeout, const uint8_t **embedding);
/* Pushes the options' sub-table t[k] (an empty one when absent; raises "WHO: k must be a
 * table" for another type) and returns its index. */
int dlcL_subtable(lua_State *L, int t, const char *who, const char *k);
/* The constructor's options at 1 name `params` and `plan`: checks both and keeps them
 * alive as long as the new box at 2, through a user value table left at 3. */
struct dlc_params;
void dlcL_params_and_plan(lua_State *L, struct dlc_params **params, struct dlc_plan **plan);
/* A syncer constructor's options (diloco.Syncer, diloco.machine.Syncer). */
typedef struct dlcL_syncer_opts {
    struct dlc_params *params;
    struct dlc_plan *plan;
    int M;                      /* learners */
    int li, si;                 /* the learner and syncer sub-tables' indices */
    dlc_run_params run;         /* the run they describe */
    const uint8_t *embedding;   /* its embedding flags (dlcL_read_run) */
} dlcL_syncer_opts;
/* The start both syncer constructors share: checks that the options at 1 are a table,
 * pushes a closed box (dlcL_newbox: type tname, `size` bytes, one user value) at 2, then
 * reads into *o params and plan (as above), learners (checked: 1..DLC_SYNCER_LEARNERS_MAX,
 * raising naming `who`), the learner and syncer sub-tables and the run.  Returns the box. */
void *dlcL_syncer_box(lua_State *L, const char *who, const char *tname, size_t size, dlcL_syncer_opts *o);
/* A learner constructor's options (diloco.Learner, diloco.machine.Learner). */
typedef struct dlcL_learner_opts {
    struct dlc_params *params;
    struct dlc_plan *plan;
    int li, si;          /* the learner sub-table; the syncer's (0 when absent) */
    dlc_run_params run;  /* the run they describe */
    double heartbeat;
} dlcL_learner_opts;
/* The start both learner constructors share: as dlcL_syncer_box, then the learner
 * sub-table and the syncer's if given (so that the run states the syncer's fields too)
 * and the run with its heartbeat (dlcL_read_run).  Returns the box. */
void *dlcL_learner_box(lua_State *L, const char *who, const char *tname, size_t size, dlcL_learner_opts *o);
/* Raises "who: params has N floats, the plan's model M: ..." unless params holds exactly
 * the model the plan cuts into fragments. */
void dlcL_check_plan_model(lua_State *L, const char *who, const struct dlc_params *params,
                           const struct dlc_plan *plan);
/* The learner argument `arg` (1-based, 1..M) as a 0-based index; raises "learner out of
 * range" for another. */
int dlcL_checklearner(lua_State *L, int arg, int M);
/* The data of the Params at `arg`, checked to be of the same model as `model` (raises
 * "Params of another model ..."): where a syncer copies its global model. */
float *dlcL_checkmodel(lua_State *L, int arg, const struct dlc_params *model);
/* Pushes a merge record as the table sim's merge events carry (1-based numbers). */
void dlcL_push_merge(lua_State *L, const struct dlc_merge_info *mi);
/* A rejection's fields (learner, fragment: 0-based here, 1-based in the table; reason by
 * name) into the table on top of the stack. */
void dlcL_set_rejection(lua_State *L, int learner, int fragment, dlc_reject_reason reason);

/* t[k] = v for the table on top of the stack (result tables of the bindings). */
void dlcL_setnum(lua_State *L, const char *k, double v);
void dlcL_setint(lua_State *L, const char *k, int64_t v);
/* A result table filled from a C struct by a table of its members, rather than field by
 * field: each dlcL_field sets t[name] to one member as an integer (DLCL_INT: dlcL_setint),
 * a number (DLCL_NUM: dlcL_setnum) or a boolean (DLCL_BOOL: lua_pushboolean), in the
 * table's order, converted as those calls' arguments would convert it.  The member's C
 * type (any integer or floating type) is found by _Generic; DLCL_FIELD names it otherwise.
 *
 *     typedef dlc_vtime_stats S;                 // in the function that uses the table
 *     static const dlcL_field fields[] = {
 *         DLCL_FIELD("horizon", 'n', S, end), DLCL_INT(S, merges), DLCL_NUM(S, goodput), {NULL}};
 *     dlcL_setfields(L, &st, fields);            // into the table on top of the stack */
typedef struct dlcL_field {
    const char *name;     /* NULL ends the table */
    size_t offset;        /* of the member */
    unsigned char ctype;  /* its C type: DLCL_CTYPE */
    char as;              /* 'i' integer, 'n' number, 'b' boolean */
} dlcL_field;
#define DLCL_CTYPE(e)                                                                                       \
    _Generic((e), _Bool: 1, char: 2, signed char: 3, unsigned char: 4, short: 5, unsigned short: 6, int: 7, \
             unsigned: 8, long: 9, unsigned long: 10, long long: 11, unsigned long long: 12, float: 13,  \
             double: 14)
#define DLCL_FIELD(name, as, T, m) {(name), offsetof(T, m), DLCL_CTYPE(((T *)0)->m), (as)}
#define DLCL_INT(T, m) DLCL_FIELD(#m, 'i', T, m)
#define DLCL_NUM(T, m) DLCL_FIELD(#m, 'n', T, m)
#define DLCL_BOOL(T, m) DLCL_FIELD(#m, 'b', T, m)
void dlcL_setfields(lua_State *L, const void *s, const dlcL_field *f);
/* Option tables: pushes t[k] and returns 1 if it is of Lua type `type` (LUA_TNUMBER,
 * LUA_TSTRING, LUA_TBOOLEAN, LUA_TTABLE); returns 0, nothing pushed, if it is nil; else
 * raises "<pre><who><sep><k> must be a <type>, got a <its type>" (pre "VTime: ", sep ".";
 * or pre "", sep ": "). */
int dlcL_optfield(lua_State *L, int t, const char *pre, const char *who, const char *sep, const char *k, int type);
/* Raises "who: unknown NOUN 'k' (known: a, b, ...)" unless every key of the table at t is
 * one of known (NULL-terminated); noun is "option" or "field". */
void dlcL_check_keys(lua_State *L, int t, const char *who, const char *const *known, const char *noun);

/* The live dlc_tensor at `arg` (borrowed): raises a type error if it is not a
 * Tensor and "tensor has been freed" if it was released. */
dlc_tensor *dlcL_checktensor(lua_State *L, int arg);
/* As dlcL_checktensor, but nil/none gives NULL. */
dlc_tensor *dlcL_opttensor(lua_State *L, int arg);
/* The live tensor at `arg`, or NULL if it is not a Tensor (or freed); never raises. */
dlc_tensor *dlcL_totensor(lua_State *L, int arg);

/* Pushes an empty ("closed") Tensor box and returns its slot. */
dlc_tensor **dlcL_newtensor(lua_State *L);
/* Stores t (a NEW reference, owned by the box from now on) in `slot` of the box
 * just pushed, accounts its bytes for the GC hints (see ltensor.c) and returns 1.
 * t == NULL raises dlc_last_error(); the empty box is left to the collector. */
int dlcL_settensor(lua_State *L, dlcL_state *st, dlc_tensor **slot, dlc_tensor *t);

/* Reads a shape from the arguments first..last: one table {2, 3} or integers 2, 3.
 * Sizes must be >= 0, or -1 (at most once) when allow_infer.  Returns ndim
 * (0..DLC_MAX_DIMS); raises an argument error naming the bad entry. */
int dlcL_checkshape(lua_State *L, int first, int last, int64_t *shape, int allow_infer);

/* Raises dlc_last_error() as a Lua error (with the caller's position).  Release
 * every C resource you hold first. */
int dlcL_error(lua_State *L);

/* The error convention of the binding (liolib's, luv's): misuse (a wrong argument
 * type or value) raises; an environmental failure (a missing or unreadable file, a
 * file that is not valid, later a refused connection) returns nil, message, code,
 * where code is the status's enum name ("DLC_ERR_IO", "DLC_ERR_FORMAT", ...).
 * dlcL_fail pushes those three values for status s with dlc_last_error() and
 * returns 3; DLC_ERR_NOMEM is never environmental: it raises. */
int dlcL_fail(lua_State *L, dlc_status s);
/* The same for a failure of the system (errno's kind): nil, the message formatted as by
 * lua_pushfstring, "DLC_ERR_IO"; returns 3. */
int dlcL_fail_io(lua_State *L, const char *fmt, ...);
/* lsys.c: diloco.pid() and diloco.proc.pid(): this process's id. */
int dlcL_pid(lua_State *L);
/* "DLC_OK", "DLC_ERR_ARG", ... for a status; "DLC_ERR_UNKNOWN" outside the enum. */
const char *dlcL_status_name(int s);

/* ---- userdata types that hold a C resource (every type of the binding) ----
 *
 * liolib's pattern, in one place.  A box is a userdata whose FIRST field is the
 * pointer to its resource (a dlc_tensor *, dlc_text *, ...; NULL = closed).  It is
 * pushed closed (dlcL_newbox, zero-filled) BEFORE the resource is acquired, so a
 * failure in between leaves an empty box for the collector and leaks nothing.
 *
 *     static void text_release(void *box) { dlc_text_release(((textbox *)box)->t); }
 *     static const dlcL_type text_type = {"diloco.TextData", text_release, text_methods,
 *                                         text_meta, td_index};
 *     dlcL_newtype(L, st, &text_type); lua_pop(L, 2);        // at registration
 *     textbox *b = dlcL_newbox(L, text_type.name, sizeof *b, 0);
 *     if (!(b->t = dlc_text_open(&o))) return dlcL_error(L);
 *
 * dlcL_newtype gives the type ONE close function, used as __gc, __close and the
 * :close() method: on an open box it calls release(box) once, then sets the first
 * field to NULL; on a closed box it does nothing.  So release never sees a closed
 * box and never runs twice.  Using a closed box is each type's own check (with its
 * own message, e.g. "tensor has been freed"). */
typedef struct dlcL_type {
    const char *name;            /* metatable name in the registry: "diloco.TextData" */
    void (*release)(void *box);  /* frees what an OPEN box holds; must not raise */
    const luaL_Reg *methods;     /* methods (upvalue 1: the state); "close" is added */
    const luaL_Reg *meta;        /* other metamethods, e.g. __tostring (upvalue 1: the
                                  * state); NULL for none */
    lua_CFunction index;         /* __index closure with upvalues (state, methods), which
                                  * looks up methods itself; NULL: __index = methods */
} dlcL_type;

/* Registers ty (borrowed; must outlive the Lua state: make it static) with the state
 * at `st` and pushes its metatable and methods table (2 values), which the caller
 * may extend before popping them. */
void dlcL_newtype(lua_State *L, int st, const dlcL_type *ty);
/* Pushes a closed box of `size` bytes (>= one pointer), zero-filled, with `nuv` user
 * values and metatable `tname` (registered by dlcL_newtype), and returns it. */
void *dlcL_newbox(lua_State *L, const char *tname, size_t size, int nuv);
/* Closes `box` (of type ty) now, as :close() would; idempotent; never raises. */
void dlcL_closebox(void *box, const dlcL_type *ty);
/* Sets every function of l in the table at `tab` with the state at `st` as upvalue 1. */
void dlcL_setfuncs(lua_State *L, int tab, int st, const luaL_Reg *l);
/* A binding file's usual registration: dlcL_newtype of each type of the NULL-terminated
 * `types` (their tables popped), then dlcL_setfuncs of `funcs` (NULL: none) into the table
 * at `mod`. */
void dlcL_register(lua_State *L, int mod, int st, const dlcL_type *const *types, const luaL_Reg *funcs);

/* A C resource held across calls that may raise (an open checkpoint, a JSON tree,
 * a malloc'd text): an internal box type ("diloco.CResource") of the same kind, so
 * a Lua error never leaks it.  dlcL_newres pushes an empty one; set p and release
 * (which frees p) together once acquired; dlcL_freeres frees it now (idempotent), or
 * the collector does. */
typedef struct dlcL_res {
    void *p;                 /* owned; NULL when released or not yet acquired */
    void (*release)(void *); /* frees p */
} dlcL_res;
dlcL_res *dlcL_newres(lua_State *L);
void dlcL_freeres(dlcL_res *r);

/* ---- shared by ltensor.c and lops.c (the Tensor binding) ---- */

/* Finish an op (C function with the state as upvalue 1): dlcL_settensor of expr. */
#define DLCL_RESULT(L, slot, expr) dlcL_settensor((L), DLCL_UPSTATE(L), (slot), (expr))

/* The slot of the Tensor box at `arg` (borrowed; *slot is NULL once freed), or NULL
 * if it is not a Tensor; never raises. */
dlc_tensor **dlcL_testtensor(lua_State *L, int arg);
/* Raises the argument error "tensor has been freed" for `arg`; does not return. */
int dlcL_freed_error(lua_State *L, int arg);
/* Adds the bytes of t (borrowed, already owned by a box) to the GC hints; may step the GC. */
void dlcL_gc_account(lua_State *L, dlcL_state *st, const dlc_tensor *t);
/* The 1-based (negative = from the end) axis argument `arg` as a 0-based axis; raises
 * an argument error unless it is in range for an ndim-dimensional tensor. */
int dlcL_checkaxis(lua_State *L, int arg, int ndim);
/* lops.c: adds the op methods to `methods`, the ops to the module `mod` (with concat
 * and the unary ops), the arithmetic metamethods to `mt`; state at `st`. */
void dlcL_register_ops(lua_State *L, int methods, int mt, int mod, int st);

#endif
