/* client.c - a host's own parameters in a run (client.h): the learner driver (lrt.c) and
 * the syncer driver (srt.c) over the host's buffers.
 *
 * The state machines lay the model out on a dlc_params arena (params.h) and a plan; a
 * host's tensors are its own allocations.  The learner works on the host's buffers
 * themselves (dlc_lrt_config.tensors, learner.h dlc_learner_bind_tensors): the arena
 * only gives the layout (dlc_params_new_layout: zeros never touched), so the client
 * holds no copy of the model.  At each dlc_client_step the client checks finite the
 * fragments the step boundary will read (dlc_lrt_step_reads: those due to leave as
 * contributions and those a merge will be mixed into; at most steps none) and lets the
 * driver take the step, which writes merges straight into the host's buffers.  The
 * server copies the host's tensors once, as Θ0, into the syncer's own state.  A host
 * whose model already is a params arena, and that needs the drivers' whole configuration,
 * uses rt.h itself (lua/lrt.c does): there is no second mode here. */
#define _DEFAULT_SOURCE /* madvise */
#include "diloco/client.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "diloco/ckpt.h"
#include "diloco/frag.h"
#include "diloco/params.h"

/* ---- the layout both sides build from the host's tensor list ---- */

typedef struct layout {
    dlc_params *params;
    dlc_plan *plan;
    dlc_run_params run;
    int count;
    int64_t *offset, *numel; /* each host tensor's place in the arena */
} layout;

static void layout_free(layout *y) {
    dlc_plan_free(y->plan);
    dlc_params_free(y->params);
    free(y->offset);
    free(y->numel);
    memset(y, 0, sizeof *y);
}

/* values 0: the arena only lays the model out (dlc_params_new_layout: nothing copied or
 * touched), for a learner working on the host's buffers; 1: it holds their values. */
static dlc_status layout_make(layout *y, const char *who, const dlc_client_tensor *t, int count, const char *run_text,
                              const dlc_run_params *run_params, int values) {
    memset(y, 0, sizeof *y);
    if (!t || count < 1) return dlc_error(DLC_ERR_ARG, "%s: %d tensors: expected a list of at least one", who, count);
    for (int i = 0; i < count; i++) {
        if (!t[i].name || !t[i].name[0])
            return dlc_error(DLC_ERR_ARG, "%s: tensor %d has no name: expected a non-empty, unique name", who, i);
        if (!t[i].data) return dlc_error(DLC_ERR_ARG, "%s: tensor '%s': data is NULL", who, t[i].name);
        if (t[i].numel < 1)
            return dlc_error(DLC_ERR_ARG, "%s: tensor '%s': numel = %lld: expected >= 1", who, t[i].name,
                             (long long)t[i].numel);
        if (t[i].ndim < 0 || t[i].ndim > DLC_MAX_DIMS || (t[i].ndim > 0 && !t[i].shape))
            return dlc_error(DLC_ERR_ARG, "%s: tensor '%s': ndim = %d: expected 0 (a vector) or 1..%d with a shape",
                             who, t[i].name, t[i].ndim, DLC_MAX_DIMS);
        int64_t prod = 1;
        for (int d = 0; d < t[i].ndim; d++) prod = t[i].shape[d] >= 0 ? prod * t[i].shape[d] : -1;
        if (t[i].ndim > 0 && prod != t[i].numel)
            return dlc_error(DLC_ERR_ARG, "%s: tensor '%s': its shape holds %lld elements, numel = %lld", who,
                             t[i].name, (long long)prod, (long long)t[i].numel);
        for (int j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return dlc_error(DLC_ERR_ARG, "%s: tensors %d and %d are both named '%s': expected unique names", who, j,
                                 i, t[i].name);
    }
    dlc_status st = DLC_OK;
    if (run_params) {
        y->run = *run_params;
    } else if (run_text) {
        if ((st = dlc_run_parse(run_text, &y->run)) != DLC_OK) return st;
    } else {
        y->run = dlc_run_default_params();
    }
    if (y->run.dp)
        return dlc_error(DLC_ERR_ARG, "%s: sync.preset = dp: data parallel needs the host's gradients, which the "
                         "client does not take (diloco, streaming and decoupled run on the parameters)", who);
    const char **names = calloc((size_t)count, sizeof *names);
    dlc_tensor **ts = calloc((size_t)count, sizeof *ts);
    y->offset = calloc((size_t)count, sizeof *y->offset);
    y->numel = calloc((size_t)count, sizeof *y->numel);
    if (!names || !ts || !y->offset || !y->numel) {
        st = dlc_error(DLC_ERR_NOMEM, "%s: out of memory for %d tensors", who, count);
        goto done;
    }
    for (int i = 0; i < count && st == DLC_OK; i++) {
        int64_t vec = t[i].numel;
        names[i] = t[i].name;
        y->numel[i] = t[i].numel;
        /* the host's buffer wrapped, not copied: the params re-point the wrapper to the
         * arena (a copy would stay in the tensor pool, 1x) */
        ts[i] = t[i].ndim > 0 ? dlc_tensor_wrap(t[i].ndim, t[i].shape, t[i].data, NULL, NULL)
                              : dlc_tensor_wrap(1, &vec, t[i].data, NULL, NULL);
        if (!ts[i]) st = dlc_last_status();
    }
    if (st == DLC_OK && !(y->params = values ? dlc_params_new(count, names, ts) : dlc_params_new_layout(count, names, ts)))
        st = dlc_last_status();
    if (st == DLC_OK) {
        for (int i = 0; i < count; i++) y->offset[i] = dlc_params_offset(y->params, i);
        dlc_plan_params pp = dlc_plan_default_params();
        pp.kind = y->run.plan;
        pp.fragments = y->run.fragments;
        pp.split_rows = count < y->run.fragments; /* fewer tensors than fragments: cut them */
        if (!(y->plan = dlc_plan_new(y->params, &pp))) st = dlc_last_status();
    }
    if (st == DLC_OK) {
        y->run.plan_hash = dlc_plan_hash(y->plan);
        y->run.model_hash = dlc_plan_model_hash(y->plan);
        st = dlc_run_params_check(&y->run);
    }
    y->count = count;
done:
    for (int i = 0; ts && i < count; i++)
        if (ts[i]) dlc_tensor_release(ts[i]); /* the params hold their own references */
    free(ts);
    free(names);
    if (st != DLC_OK) layout_free(y);
    return st;
}

/* `n` floats of host tensor i from element `at` checked finite: DLC_ERR_RANGE naming
 * the first that is not. */
static dlc_status range_check(const dlc_client_tensor *t, int i, int64_t at, int64_t n) {
    const float *src = t[i].data + at;
    int any = 0;
    for (int64_t k = 0; k < n; k++) any |= !isfinite(src[k]); /* no early exit: the loop vectorizes */
    if (!any) return DLC_OK;
    int64_t k = 0;
    while (isfinite(src[k])) k++;
    return dlc_error(DLC_ERR_RANGE, "parameter '%s' element %lld is %s", t[i].name, (long long)(at + k),
                     isnan(src[k]) ? "nan" : src[k] > 0 ? "inf" : "-inf");
}

/* every tensor */
static dlc_status host_check(layout *y, const dlc_client_tensor *t) {
    dlc_status st = DLC_OK;
    for (int i = 0; i < y->count && st == DLC_OK; i++) st = range_check(t, i, 0, y->numel[i]);
    return st;
}

/* the views of fragment p */
static dlc_status frag_check(layout *y, const dlc_client_tensor *t, int p) {
    int nv;
    const dlc_frag_view *v = dlc_plan_views(y->plan, p, &nv);
    dlc_status st = DLC_OK;
    for (int j = 0; j < nv && st == DLC_OK; j++)
        st = range_check(t, v[j].tensor, v[j].offset - y->offset[v[j].tensor], v[j].numel);
    return st;
}

/* arena -> host, every tensor (the server's global model) */
static void host_out(layout *y, const dlc_client_tensor *t) {
    const float *a = dlc_params_data(y->params);
    for (int i = 0; i < y->count; i++) memcpy(t[i].data, a + y->offset[i], (size_t)y->numel[i] * sizeof(float));
}

/* Gives the pages of n floats at a back to the system (they read as zeros if touched
 * again): the server's arena once the syncer took Θ0 from it, or the host read the
 * global model through it (dlc_server_global writes it whole before it reads it). */
static void pages_release(float *a, size_t n) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)a + pg - 1) & ~(pg - 1), hi = (uintptr_t)(a + n) & ~(pg - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* a refusal only costs memory */
}

/* The secret of a config: the file's or the string, into the net config. */
static dlc_status secret_of(const char *who, const char *file, const char *text, dlc_net_config *nc) {
    if ((file != NULL) == (text != NULL))
        return dlc_error(DLC_ERR_ARG, "%s: expected one of secret_file and secret (the run's secret)", who);
    if (file) nc->secret_file = file;
    else nc->secret = text, nc->secret_len = strlen(text);
    return DLC_OK;
}

/* Frees a half-made object and returns NULL, keeping the error that stopped it (what
 * the frees do may set others). */
static void *drop(void (*release)(void *), void *obj) {
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", dlc_last_error());
    dlc_status code = dlc_last_status();
    release(obj);
    dlc_error(code, "%s", keep);
    return NULL;
}

/* ---- the host's state for a restart (client.h: state_dir) ----
 *
 * The layout of every learner's state, diloco-lua learner's too (docs/checkpoints.md):
 * STATE_DIR/checkpoint-STEP.safetensors (STEP in 8 digits or more) is the checkpoint of
 * schedule step STEP, its metadata saying whose it is (diloco.learner, 1-based, and
 * diloco.run_id) and at which step (diloco.step); the newest readable one is restored.
 * diloco-lua learner's holds its tensors; a host's state is in its own format, so here
 * the checkpoint holds none and names the host's file beside it (diloco.host_state:
 * checkpoint-STEP.host).  The host file goes in place first, the checkpoint last (itself
 * written whole, dlc_safetensors_save): a crash leaves the checkpoint before as it was.
 * A directory of an older version (state-STEP named by STATE_DIR/latest) is still read. */

typedef struct host_state {
    char *dir;
    int (*save)(void *ctx, const char *path, int64_t step);
    int (*load)(void *ctx, const char *path, int64_t step);
    void *ctx;
    int64_t every, last_step; /* last_step: the published state's step, -1 none */
    int last_old;             /* last_step's state is of the older layout */
    /* whose state it is, in its checkpoint's metadata and checked before a load: the run
     * id this client joined, and its learner id (0-based; own: the host chose it, so a
     * restart asks for the same one, rather than the syncer assigning it) */
    char run[DLC_PROTO_RUN_MAX + 1];
    int learner, learner_own;
} host_state;

/* fsync a file or directory by path; 0, or -1 with errno (a directory a file system
 * cannot sync, EINVAL, counts as synced) */
static int sync_path(const char *path, int dir) {
    int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = fsync(fd) != 0 && errno != EINVAL ? -1 : 0;
    int keep = errno;
    close(fd);
    errno = keep;
    return r;
}

/* Whether a run id goes into the metadata as it is (printable ASCII: valid UTF-8). */
static int run_text_ok(const char *run) {
    for (const unsigned char *p = (const unsigned char *)run; *p; p++)
        if (*p < 0x20 || *p >= 0x7f) return 0;
    return 1;
}

/* The step of a checkpoint's file name, or -1 for another name. */
static long long ckpt_step(const char *name) {
    static const char pre[] = "checkpoint-", suf[] = ".safetensors";
    size_t n = strlen(name), np = sizeof pre - 1, ns = sizeof suf - 1;
    if (n <= np + ns || n - np - ns < 8 || n - np - ns > 18 || strncmp(name, pre, np) != 0 ||
        strcmp(name + n - ns, suf) != 0)
        return -1;
    long long k = 0;
    for (size_t i = np; i < n - ns; i++) {
        if (name[i] < '0' || name[i] > '9') return -1;
        k = k * 10 + (name[i] - '0');
    }
    return k;
}

static int desc_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Whose state a checkpoint's metadata say it is: DLC_OK if this client's (or it does not
 * say), else DLC_ERR_STATE naming both. */
static dlc_status state_owner(const host_state *h, const char *what, const char *run, const char *learner) {
    if (run && strcmp(run, h->run) != 0)
        return dlc_error(DLC_ERR_STATE,
                         "client: state_dir %s holds the state of run \"%s\" (%s), this client joined run \"%s\": a "
                         "state is restored only by the run and learner that wrote it (give another state_dir, or "
                         "remove that one's files)", h->dir, run, what, h->run);
    int l = learner ? atoi(learner) : 0;
    if (l >= 1 && h->learner_own && l != h->learner + 1)
        return dlc_error(DLC_ERR_STATE,
                         "client: state_dir %s holds the state of learner %d (1-based; %s), this client is learner "
                         "%d: a state is restored only by the run and learner that wrote it (give each learner its "
                         "own state_dir)", h->dir, l, what, h->learner + 1);
    return DLC_OK;
}

/* The newest state of the older layout: 1 with its step and path, 0 when there is none
 * (no STATE_DIR/latest), or a negative status. */
static int state_latest_old(const host_state *h, int64_t *step, char *path, size_t cap) {
    char lp[4096], line[64];
    snprintf(lp, sizeof lp, "%s/latest", h->dir);
    FILE *f = fopen(lp, "r");
    if (!f) return errno == ENOENT ? 0 : dlc_error(DLC_ERR_IO, "client: state_dir: %s: %s", lp, strerror(errno));
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    long long k = -1;
    char end = 0;
    if (!ok || sscanf(line, "state-%lld%c", &k, &end) != 2 || end != '\n' || k < 0)
        return dlc_error(DLC_ERR_FORMAT, "client: state_dir: %s does not name a state (expected \"state-STEP\")", lp);
    snprintf(path, cap, "%s/state-%012lld", h->dir, k);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return dlc_error(DLC_ERR_IO, "client: state_dir: %s names %s: %s", lp, path, strerror(errno));
    *step = k;
    return 1;
}

/* The newest checkpoint that is readable and has its host file: 1 with its step and the
 * host file's path (*old: of the older layout), 0 when there is none, or a negative
 * status (a directory that cannot be read, the newest being another run's or learner's). */
static int state_latest(const host_state *h, int64_t *step, char *path, size_t cap, int *old) {
    *old = 0;
    DIR *d = opendir(h->dir);
    if (!d) return dlc_error(DLC_ERR_IO, "client: state_dir %s: %s", h->dir, strerror(errno));
    long long *steps = NULL;
    size_t n = 0, room = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long k = ckpt_step(e->d_name);
        if (k < 0) continue;
        if (n == room) {
            long long *more = realloc(steps, (room = room ? 2 * room : 16) * sizeof *steps);
            if (!more) {
                free(steps), closedir(d);
                return dlc_error(DLC_ERR_NOMEM, "client: out of memory");
            }
            steps = more;
        }
        steps[n++] = k;
    }
    closedir(d);
    if (n > 0) qsort(steps, n, sizeof *steps, desc_ll);
    for (size_t i = 0; i < n; i++) { /* the newest readable one */
        char ck[4096];
        snprintf(ck, sizeof ck, "%s/checkpoint-%08lld.safetensors", h->dir, steps[i]);
        dlc_safetensors *st = dlc_safetensors_open_header(ck);
        if (!st) continue;
        const char *host = dlc_safetensors_meta(st, "diloco.host_state");
        struct stat sb;
        if (!host || strchr(host, '/') || (snprintf(path, cap, "%s/%s", h->dir, host), stat(path, &sb) != 0)) {
            dlc_safetensors_close(st); /* not a host's checkpoint, or its file is gone */
            continue;
        }
        dlc_status own = state_owner(h, ck, dlc_safetensors_meta(st, "diloco.run_id"),
                                     dlc_safetensors_meta(st, "diloco.learner"));
        dlc_safetensors_close(st);
        *step = steps[i];
        free(steps);
        return own != DLC_OK ? own : 1;
    }
    free(steps);
    *old = 1;
    return state_latest_old(h, step, path, cap);
}

/* The host saves its state of the run's step `step` into checkpoint-STEP.host; the
 * checkpoint naming it is written last, then the one before is removed. */
static dlc_status state_save(host_state *h, int64_t step) {
    char tmp[4096], host[4096], ck[4096], hname[64], stext[24], ltext[16];
    snprintf(hname, sizeof hname, "checkpoint-%08lld.host", (long long)step);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", h->dir, hname);
    snprintf(host, sizeof host, "%s/%s", h->dir, hname);
    snprintf(ck, sizeof ck, "%s/checkpoint-%08lld.safetensors", h->dir, (long long)step);
    (void)unlink(tmp);
    int r = h->save(h->ctx, tmp, step);
    struct stat sb;
    if (r != 0 || stat(tmp, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int none = r == 0;
        (void)unlink(tmp);
        return dlc_error(DLC_ERR_IO, "client: save_state for step %lld %s %s; the state %s stays", (long long)step,
                         none ? "wrote no file at" : "failed for", tmp, h->last_step >= 0 ? "published before" : "(none)");
    }
    if (sync_path(tmp, 0) != 0 || rename(tmp, host) != 0) {
        dlc_status e = dlc_error(DLC_ERR_IO, "client: publishing the host's state %s: %s", host, strerror(errno));
        (void)unlink(tmp);
        return e;
    }
    snprintf(stext, sizeof stext, "%lld", (long long)step);
    snprintf(ltext, sizeof ltext, "%d", h->learner + 1);
    const char *keys[] = {"diloco.format", "diloco.step", "diloco.learner", "diloco.host_state", "diloco.run_id"};
    const char *vals[] = {"1", stext, ltext, hname, h->run};
    if (dlc_safetensors_save(ck, 0, NULL, NULL, run_text_ok(h->run) ? 5 : 4, keys, vals) != DLC_OK)
        return dlc_error(DLC_ERR_IO, "client: publishing the host's state %s: %s", ck, dlc_last_error());
    if (h->last_step >= 0 && h->last_step != step) { /* the one before */
        char old[4096];
        if (h->last_old) {
            snprintf(old, sizeof old, "%s/state-%012lld", h->dir, (long long)h->last_step);
            (void)unlink(old);
            snprintf(old, sizeof old, "%s/latest", h->dir);
            (void)unlink(old);
        } else {
            snprintf(old, sizeof old, "%s/checkpoint-%08lld.safetensors", h->dir, (long long)h->last_step);
            (void)unlink(old);
            snprintf(old, sizeof old, "%s/checkpoint-%08lld.host", h->dir, (long long)h->last_step);
            (void)unlink(old);
        }
    }
    (void)sync_path(h->dir, 1);
    h->last_step = step, h->last_old = 0;
    return DLC_OK;
}

/* ---- the learner ---- */

struct dlc_client {
    layout y;
    host_state hs;
    dlc_client_tensor *t; /* the host's list (copied; the names too) */
    char **names;
    float **data;         /* [count]: the host's buffers, where the learner works */
    uint8_t *taken;       /* [P]: fragments checked at this step boundary */
    dlc_lrt *l;
    double wait_timeout;
    double last_step;     /* clock at the end of the last dlc_client_step (or the join) */
    int64_t steps, applied;
    int finished;
    int one_based;        /* config version 3: ids 1-based (dlc_client_id), else 0-based */
};

static void client_release(void *c) { dlc_client_free(c); }

/* ---- the config structs' versions (client.h) ---- */

/* The bytes of each version of the structs: a version's fields are a prefix of every
 * later one's (fields are only added at the end).  0: unknown here. */
static size_t client_config_size(int version) {
    return version >= DLC_CLIENT_CONFIG_V1 && version <= DLC_CLIENT_CONFIG_V3 ? sizeof(dlc_client_config) : 0;
}
static size_t server_config_size(int version) {
    if (version >= DLC_SERVER_CONFIG_V1 && version <= DLC_SERVER_CONFIG_V3) return offsetof(dlc_server_config, shard);
    if (version == DLC_SERVER_CONFIG_V4) return offsetof(dlc_server_config, standby_of);
    return version == DLC_SERVER_CONFIG_V5 ? sizeof(dlc_server_config) : 0;
}

/* `driver` is not read since version 2: a config that sets it is refused, whatever its
 * version (its driver struct may not even have the layout of this library's rt.h). */
static dlc_status no_driver(const char *what, const char *type, const char *calls) {
    return dlc_error(DLC_ERR_ARG, "%s: driver is set: driver mode was removed in version 2 of client.h; a host "
                     "that needs the driver's whole configuration makes the driver itself (rt.h: %s from its %s)",
                     what, calls, type);
}

static dlc_client_config client_defaults(void) {
    dlc_client_config c;
    memset(&c, 0, sizeof c);
    c.id = -1;
    c.join_timeout = 60;
    c.wait_timeout = 300;
    c.heartbeat = 1;
    return c;
}

static dlc_server_config server_defaults(void) {
    dlc_server_config c;
    memset(&c, 0, sizeof c);
    c.learners = 1;
    c.listen = "127.0.0.1:0";
    c.run_id = "";
    c.timeout = 5;
    c.heartbeat = 1;
    return c;
}

static dlc_status unknown_version(const char *what, int version, int newest) {
    return dlc_error(DLC_ERR_ARG, "%s: config version %d is not one this library knows (1 to %d): the host was built "
                     "against a newer client.h than this libdiloco; use a library at least as new as the header",
                     what, version, newest);
}

dlc_status dlc_client_config_default_versioned(int version, dlc_client_config *cfg) {
    size_t n = client_config_size(version);
    if (!n) return unknown_version("client", version, DLC_CLIENT_CONFIG_VERSION);
    if (!cfg) return dlc_error(DLC_ERR_ARG, "client: NULL config");
    dlc_client_config d = client_defaults();
    if (version >= DLC_CLIENT_CONFIG_V3) d.id = 0; /* 1-based: 0, the syncer assigns one */
    memcpy(cfg, &d, n);
    return DLC_OK;
}

dlc_status dlc_server_config_default_versioned(int version, dlc_server_config *cfg) {
    size_t n = server_config_size(version);
    if (!n) return unknown_version("server", version, DLC_SERVER_CONFIG_VERSION);
    if (!cfg) return dlc_error(DLC_ERR_ARG, "server: NULL config");
    dlc_server_config d = server_defaults();
    memcpy(cfg, &d, n);
    return DLC_OK;
}

dlc_client_config(dlc_client_default_config)(void) { return client_defaults(); }
dlc_server_config(dlc_server_default_config)(void) { return server_defaults(); }

/* Counts the merged fragments the driver applied (into the host's buffers) since the
 * last call. */
static void take_applied(dlc_client *c) {
    dlc_lrt_event ev;
    int P = dlc_plan_count(c->y.plan);
    while (dlc_lrt_poll(c->l, &ev) == 1)
        if (ev.kind == DLC_LRT_APPLIED && ev.fragment >= 0 && ev.fragment < P) c->applied++;
}

static dlc_client *client_new(const dlc_client_config *cfg, int one_based);

/* A config of version `version`: its fields over the defaults of the fields added since;
 * from version 3 its id is 1-based (0: assigned), made the drivers' 0-based one here. */
dlc_client *dlc_client_new_versioned(int version, const dlc_client_config *cfg) {
    size_t n = client_config_size(version);
    if (!n) return unknown_version("client", version, DLC_CLIENT_CONFIG_VERSION), NULL;
    if (!cfg) return dlc_error(DLC_ERR_ARG, "client: NULL config"), NULL;
    if (cfg && cfg->driver) return no_driver("client", "dlc_lrt_config", "dlc_lrt_new, dlc_lrt_join"), NULL;
    dlc_client_config c = client_defaults();
    memcpy(&c, cfg, n);
    int one_based = version >= DLC_CLIENT_CONFIG_V3;
    if (one_based) {
        if (c.id < 0 || c.id > DLC_PROTO_LEARNERS_MAX)
            return dlc_error(DLC_ERR_ARG, "client: id = %d: expected a learner id from 1 to %d, numbered as "
                             "`diloco-lua learner --id` numbers them, or 0: the syncer assigns one",
                             c.id, DLC_PROTO_LEARNERS_MAX),
                   NULL;
        c.id -= 1;
    }
    return client_new(&c, one_based);
}

dlc_client *(dlc_client_new)(const dlc_client_config *cfg) {
    return dlc_client_new_versioned(DLC_CLIENT_CONFIG_V1, cfg);
}

static dlc_client *client_new(const dlc_client_config *cfg, int one_based) {
    static const char *const WHO = "client";
    const char *connect = cfg->connect;
    if (!connect || !connect[0])
        return dlc_error(DLC_ERR_ARG, "client: connect: expected the syncer's HOST:PORT or @FILE"), NULL;
    if (!(cfg->join_timeout > 0) || !(cfg->wait_timeout > 0) || !(cfg->heartbeat > 0))
        return dlc_error(DLC_ERR_ARG, "client: join_timeout %g, wait_timeout %g, heartbeat %g: expected seconds > 0",
                         cfg->join_timeout, cfg->wait_timeout, cfg->heartbeat),
               NULL;
    if (cfg->id < -1 || cfg->id >= DLC_PROTO_LEARNERS_MAX) /* (config versions 1 and 2) */
        return dlc_error(DLC_ERR_ARG, "client: id = %d: expected a 0-based learner id below %d, or -1 (assigned): "
                         "config versions 1 and %d number learners from 0 (version %d, this header's, from 1)",
                         cfg->id, DLC_PROTO_LEARNERS_MAX, DLC_CLIENT_CONFIG_V2, DLC_CLIENT_CONFIG_VERSION),
               NULL;
    if ((cfg->state_dir != NULL) != (cfg->save_state != NULL) || (cfg->load_state && !cfg->state_dir) ||
        cfg->save_every < 0)
        return dlc_error(DLC_ERR_ARG, "client: state_dir %s, save_state %s, load_state %s, save_every %lld: expected "
                         "a state_dir with a save_state (load_state optional), or none of them; save_every >= 0",
                         cfg->state_dir ? "set" : "NULL", cfg->save_state ? "set" : "NULL",
                         cfg->load_state ? "set" : "NULL", (long long)cfg->save_every),
               NULL;
    if (cfg->state_dir && (!cfg->state_dir[0] || strlen(cfg->state_dir) > 3000))
        return dlc_error(DLC_ERR_ARG, "client: state_dir of %zu bytes: expected a directory path of 1..3000 bytes",
                         strlen(cfg->state_dir)),
               NULL;
    if (cfg->state_dir && mkdir(cfg->state_dir, 0700) != 0 && errno != EEXIST)
        return dlc_error(DLC_ERR_IO, "client: state_dir %s: %s", cfg->state_dir, strerror(errno)), NULL;
    dlc_client *c = calloc(1, sizeof *c);
    if (!c) return dlc_error(DLC_ERR_NOMEM, "client: out of memory"), NULL;
    c->hs = (host_state){.save = cfg->save_state, .load = cfg->load_state, .ctx = cfg->state_ctx,
                         .every = cfg->save_every, .last_step = -1};
    if (cfg->state_dir && !(c->hs.dir = strdup(cfg->state_dir)))
        return free(c), dlc_error(DLC_ERR_NOMEM, "client: out of memory"), NULL;
    if (layout_make(&c->y, WHO, cfg->tensors, cfg->count, cfg->run, cfg->run_params, 0) != DLC_OK)
        return free(c->hs.dir), free(c), NULL;
    c->taken = calloc((size_t)dlc_plan_count(c->y.plan), 1);
    c->t = calloc((size_t)cfg->count, sizeof *c->t);
    c->names = calloc((size_t)cfg->count, sizeof *c->names);
    c->data = calloc((size_t)cfg->count, sizeof *c->data);
    if (!c->taken || !c->t || !c->names || !c->data) {
        dlc_error(DLC_ERR_NOMEM, "client: out of memory");
        goto fail;
    }
    for (int i = 0; i < cfg->count; i++) {
        c->t[i] = cfg->tensors[i];
        if (!(c->names[i] = strdup(cfg->tensors[i].name))) {
            dlc_error(DLC_ERR_NOMEM, "client: out of memory");
            goto fail;
        }
        c->t[i].name = c->names[i];
        c->t[i].shape = NULL; /* not kept */
        c->data[i] = cfg->tensors[i].data;
    }
    c->wait_timeout = cfg->wait_timeout;
    c->one_based = one_based;
    char addr[512], run_id[DLC_PROTO_RUN_MAX + 1] = "";
    if (connect[0] == '@') {
        if (dlc_rt_address_file(connect + 1, cfg->join_timeout, addr, sizeof addr, run_id, sizeof run_id) != DLC_OK)
            goto fail;
    } else {
        snprintf(addr, sizeof addr, "%s", connect);
    }
    dlc_lrt_config lc = dlc_lrt_default_config();
    if (dlc_run_learner_params(&c->y.run, 0, &lc.learner) != DLC_OK) goto fail;
    lc.learner.id = cfg->id;
    lc.learner.heartbeat = cfg->heartbeat;
    lc.params = c->y.params;
    lc.plan = c->y.plan;
    lc.tensors = c->data;
    lc.run_params = &c->y.run;
    lc.run = cfg->run_id ? cfg->run_id : run_id;
    if (secret_of(WHO, cfg->secret_file, cfg->secret, &lc.net) != DLC_OK) goto fail;
    lc.net.heartbeat_s = cfg->heartbeat;
    lc.connect = addr;
    if (!(c->l = dlc_lrt_new(&lc))) goto fail;
    if (dlc_lrt_join(c->l, cfg->join_timeout) != DLC_OK) goto fail;
    take_applied(c); /* the join wrote the whole global model into the host's buffers */
    snprintf(c->hs.run, sizeof c->hs.run, "%s", lc.run ? lc.run : "");
    c->hs.learner = dlc_lrt_id(c->l), c->hs.learner_own = cfg->id >= 0;
    if (c->hs.dir) { /* the host's own state of before a restart, if it is its own */
        int64_t step = -1;
        char path[4096];
        int old = 0, got = state_latest(&c->hs, &step, path, sizeof path, &old);
        if (got < 0) goto fail;
        if (got) {
            c->hs.last_step = step, c->hs.last_old = old;
            int r = c->hs.load ? c->hs.load(c->hs.ctx, path, step) : 0;
            if (r != 0) {
                dlc_error(DLC_ERR_IO, "client: load_state returned %d for %s", r, path);
                goto fail;
            }
        }
    }
    c->last_step = dlc_rt_clock();
    return c;
fail:
    return drop(client_release, c);
}

void dlc_client_free(dlc_client *c) {
    if (!c) return;
    if (c->l && !c->finished && dlc_lrt_state(c->l) != DLC_LEARNER_STOPPED)
        (void)dlc_lrt_finish(c->l, 0, "the host closed its client");
    dlc_lrt_free(c->l);
    for (int i = 0; c->names && i < c->y.count; i++) free(c->names[i]);
    free(c->names);
    free(c->t);
    free(c->taken);
    free(c->data);
    free(c->hs.dir);
    layout_free(&c->y);
    free(c);
}

dlc_status dlc_client_step(dlc_client *c, int64_t tokens) { return dlc_client_step_timed(c, tokens, -1); }

dlc_status dlc_client_step_timed(dlc_client *c, int64_t tokens, double seconds) {
    if (!c) return dlc_error(DLC_ERR_ARG, "client_step: NULL client");
    if (c->finished) return dlc_error(DLC_ERR_STATE, "client_step: the client has finished (dlc_client_finish)");
    if (tokens < 0) return dlc_error(DLC_ERR_ARG, "client_step: tokens = %lld: expected >= 0", (long long)tokens);
    if (isnan(seconds) || isinf(seconds))
        return dlc_error(DLC_ERR_ARG, "client_step: seconds = %g: expected a finite number (< 0: measured)", seconds);
    /* only the fragments this boundary reads are checked: those due to leave, those a
     * merge mixes into (most steps, none) */
    int P = dlc_plan_count(c->y.plan);
    dlc_status st = DLC_OK;
    int n = dlc_lrt_step_reads(c->l, c->taken);
    if (n < 0) return n;
    for (int p = 0; p < P && st == DLC_OK; p++)
        if (c->taken[p]) st = frag_check(&c->y, c->t, p);
    if (st != DLC_OK) return st;
    double now = dlc_rt_clock();
    st = dlc_lrt_step_done(c->l, tokens, seconds >= 0 ? seconds : now - c->last_step);
    if (st == DLC_OK && dlc_lrt_state(c->l) == DLC_LEARNER_WAITING) {
        /* blocked on the round: what arrives meanwhile is mixed in at the boundary ending
         * the wait, so the rest of the model is checked too (the wait costs far more) */
        for (int p = 0; p < P && st == DLC_OK; p++)
            if (!c->taken[p]) st = frag_check(&c->y, c->t, p);
        if (st == DLC_OK) st = dlc_lrt_wait(c->l, c->wait_timeout);
    }
    take_applied(c);
    if (st == DLC_OK) c->steps++;
    if (st == DLC_OK && c->hs.dir && c->hs.every > 0 && c->steps % c->hs.every == 0)
        st = state_save(&c->hs, dlc_client_schedule_step(c));
    c->last_step = dlc_rt_clock();
    return st;
}

dlc_status dlc_client_rollback(dlc_client *c) {
    if (!c) return dlc_error(DLC_ERR_ARG, "client_rollback: NULL client");
    dlc_status st = dlc_lrt_rollback(c->l);
    if (st == DLC_OK) take_applied(c); /* it wrote the last global model into the host's buffers */
    return st;
}

dlc_status dlc_client_finish(dlc_client *c, double timeout_s) { return dlc_client_finish_why(c, timeout_s, NULL, 1); }

dlc_status dlc_client_finish_why(dlc_client *c, double timeout_s, const char *why, int flush) {
    if (!c) return dlc_error(DLC_ERR_ARG, "client_finish: NULL client");
    if (c->finished) return DLC_OK;
    if (!(timeout_s >= 0) || isinf(timeout_s))
        return dlc_error(DLC_ERR_ARG, "client_finish: timeout %g: expected seconds >= 0", timeout_s);
    dlc_status st = flush ? host_check(&c->y, c->t) : DLC_OK;
    if (st == DLC_OK && flush) st = dlc_lrt_flush(c->l, NULL);
    dlc_status f = dlc_lrt_finish(c->l, timeout_s, why ? why : "finished");
    take_applied(c);
    c->finished = 1;
    /* the host's state at the end, whatever the syncer said (saved even when the
     * connection was down: a restart continues from here) */
    dlc_status first = st != DLC_OK ? st : f;
    char keep[1024] = "";
    if (first != DLC_OK) snprintf(keep, sizeof keep, "%s", dlc_last_error());
    dlc_status sv = c->hs.dir ? state_save(&c->hs, dlc_client_schedule_step(c)) : DLC_OK;
    if (first == DLC_OK) return sv;
    char also[1024] = "";
    if (sv != DLC_OK) snprintf(also, sizeof also, "; and %s", dlc_last_error()); /* (copied: dlc_error writes there) */
    return dlc_error(first, "%s%s", keep, also);
}

int dlc_client_id(const dlc_client *c) { return c ? dlc_lrt_id(c->l) + c->one_based : -1; }
int64_t dlc_client_steps(const dlc_client *c) { return c ? c->steps : 0; }
int64_t dlc_client_applied(const dlc_client *c) { return c ? c->applied : 0; }
int64_t dlc_client_schedule_step(const dlc_client *c) {
    const dlc_learner *l = c ? dlc_lrt_learner(c->l) : NULL;
    return l ? dlc_learner_schedule_step(l) : 0;
}
dlc_lrt *dlc_client_lrt(dlc_client *c) { return c ? c->l : NULL; }

/* ---- the syncer ---- */

struct dlc_server {
    layout y;
    dlc_srt *s;
    void (*on_event)(void *ctx, const dlc_server_event *ev);
    void *event_ctx;
    int event_thread;         /* the thread below runs (joined by dlc_server_free) */
    int one_based;            /* config version 3: events' learners 1-based (0 unknown) */
    pthread_t thread;
    atomic_int stop;
};

/* The next event of the driver, flattened. */
static int server_take(dlc_server *s, dlc_server_event *ev, int timeout_ms) {
    dlc_srt_event e;
    int got = dlc_srt_poll(s->s, &e, timeout_ms);
    if (got != 1) return got;
    memset(ev, 0, sizeof *ev);
    ev->kind = (int)e.kind;
    ev->learner = e.learner >= 0 ? e.learner + s->one_based : s->one_based ? 0 : -1;
    if (e.kind == DLC_SRT_MERGED) ev->fragment = e.merge.fragment;
    else if (e.kind == DLC_SRT_REJECTED || (e.kind == DLC_SRT_BEHIND && e.count > 0)) ev->fragment = e.fragment;
    else ev->fragment = -1;
    ev->version = e.kind == DLC_SRT_MERGED ? e.merge.version : -1;
    ev->time = e.time;
    snprintf(ev->text, sizeof ev->text, "%.*s", (int)sizeof ev->text - 1, e.text);
    dlc_text_clean(ev->text);
    dlc_srt_event_release(&e);
    return 1;
}

/* Waits up to timeout_ms for an event, then hands it and every other one ready to
 * on_event: how many, or a negative status. */
static int server_dispatch(dlc_server *s, int timeout_ms) {
    dlc_server_event ev;
    int n = 0, got = server_take(s, &ev, timeout_ms);
    while (got == 1) {
        s->on_event(s->event_ctx, &ev);
        n++;
        got = server_take(s, &ev, 0);
    }
    return got < 0 ? got : n;
}

/* event_thread: the events to on_event until dlc_server_free (its waits short enough
 * that the stop is seen within 100 ms) */
static void *event_loop(void *arg) {
    dlc_server *s = arg;
    while (!atomic_load(&s->stop))
        if (server_dispatch(s, 100) < 0) break; /* the driver failed: nothing more will come */
    return NULL;
}

static void server_release(void *s) { dlc_server_free(s); }


/* The driver of a server made from the host's tensors: its layout, then dlc_srt_new. */
static dlc_status server_from_tensors(dlc_server *s, const dlc_server_config *cfg) {
    static const char *const WHO = "server";
    if (!(cfg->timeout > 0) || !(cfg->heartbeat > 0) || cfg->heartbeat >= cfg->timeout)
        return dlc_error(DLC_ERR_ARG, "server: heartbeat %g, timeout %g: expected seconds > 0, heartbeat < timeout",
                         cfg->heartbeat, cfg->timeout);
    dlc_status st = layout_make(&s->y, WHO, cfg->tensors, cfg->count, cfg->run, cfg->run_params, 1);
    if (st == DLC_OK) st = host_check(&s->y, cfg->tensors); /* params_new copied them into the arena */
    dlc_srt_config sc = dlc_srt_default_config();
    if (st == DLC_OK) st = dlc_run_syncer_params(&s->y.run, cfg->learners, &sc.syncer);
    if (st != DLC_OK) return st;
    sc.plan = s->y.plan;
    sc.theta0 = dlc_params_data(s->y.params);
    sc.listen = cfg->listen ? cfg->listen : "127.0.0.1:0";
    sc.run = cfg->run_id ? cfg->run_id : "";
    sc.run_params = &s->y.run;
    if ((st = secret_of(WHO, cfg->secret_file, cfg->secret, &sc.net)) != DLC_OK) return st;
    sc.net.heartbeat_s = cfg->heartbeat;
    sc.net.timeout_s = cfg->timeout;
    if (cfg->shards > 1 && (cfg->shard < 1 || cfg->shard > cfg->shards))
        return dlc_error(DLC_ERR_ARG, "server: shard %d of %d: expected 1..%d", cfg->shard, cfg->shards, cfg->shards);
    sc.shard = cfg->shards > 1 ? cfg->shard - 1 : 0, sc.shards = cfg->shards;
    if (cfg->standby_of && !(cfg->lease >= 0 && isfinite(cfg->lease)))
        return dlc_error(DLC_ERR_ARG, "server: lease %g: expected a finite number of seconds >= 0 (0: the timeout)",
                         cfg->lease);
    sc.standby_of = cfg->standby_of, sc.lease = cfg->lease;
    if (!(s->s = dlc_srt_new(&sc))) return dlc_last_status();
    /* Θ0 is the syncer's now: the arena holds nothing until dlc_server_global */
    pages_release(dlc_params_data(s->y.params), (size_t)dlc_params_size(s->y.params));
    return DLC_OK;
}

static dlc_server *server_new(const dlc_server_config *cfg, int one_based);

dlc_server *dlc_server_new_versioned(int version, const dlc_server_config *cfg) {
    size_t n = server_config_size(version);
    if (!n) return unknown_version("server", version, DLC_SERVER_CONFIG_VERSION), NULL;
    if (!cfg) return dlc_error(DLC_ERR_ARG, "server: NULL config"), NULL;
    if (cfg && cfg->driver) return no_driver("server", "dlc_srt_config", "dlc_srt_new"), NULL;
    dlc_server_config c = server_defaults();
    memcpy(&c, cfg, n);
    return server_new(&c, version >= DLC_SERVER_CONFIG_V3);
}

dlc_server *(dlc_server_new)(const dlc_server_config *cfg) {
    return dlc_server_new_versioned(DLC_SERVER_CONFIG_V1, cfg);
}

static dlc_server *server_new(const dlc_server_config *cfg, int one_based) {
    dlc_server *s = calloc(1, sizeof *s);
    if (!s) return dlc_error(DLC_ERR_NOMEM, "server: out of memory"), NULL;
    s->one_based = one_based;
    if (server_from_tensors(s, cfg) != DLC_OK) goto fail;
    s->on_event = cfg->on_event, s->event_ctx = cfg->event_ctx;
    if (cfg->event_thread) {
        int e = pthread_create(&s->thread, NULL, event_loop, s);
        if (e != 0) {
            dlc_error(DLC_ERR_IO, "server: cannot start the event thread: %s", strerror(e));
            goto fail;
        }
        s->event_thread = 1;
    }
    return s;
fail:
    return drop(server_release, s);
}

void dlc_server_free(dlc_server *s) {
    if (!s) return;
    if (s->event_thread) {
        atomic_store(&s->stop, 1);
        pthread_join(s->thread, NULL);
    }
    dlc_srt_free(s->s);
    layout_free(&s->y);
    free(s);
}

int dlc_server_port(const dlc_server *s) { return s ? dlc_srt_port(s->s) : -1; }
dlc_srt *dlc_server_srt(dlc_server *s) { return s ? s->s : NULL; }

int dlc_server_poll(dlc_server *s, dlc_server_event *ev, int timeout_ms) {
    if (!s || !ev) return dlc_error(DLC_ERR_ARG, "server_poll: NULL argument");
    if (s->on_event)
        return dlc_error(DLC_ERR_STATE, "server_poll: the server hands its events to on_event (dlc_server_dispatch)");
    return server_take(s, ev, timeout_ms);
}

int dlc_server_dispatch(dlc_server *s, int timeout_ms) {
    if (!s) return dlc_error(DLC_ERR_ARG, "server_dispatch: NULL server");
    if (!s->on_event || s->event_thread)
        return dlc_error(DLC_ERR_STATE, "server_dispatch: %s", !s->on_event ? "no on_event in the server's config "
                         "(dlc_server_poll takes the events)" : "the server's own thread dispatches (event_thread)");
    return server_dispatch(s, timeout_ms);
}

const char *dlc_server_event_name(int kind) { return dlc_srt_event_name((dlc_srt_event_kind)kind); }

dlc_status dlc_server_global(dlc_server *s, const dlc_client_tensor *t, int count) {
    if (!s || !t) return dlc_error(DLC_ERR_ARG, "server_global: NULL argument");
    if (count != s->y.count)
        return dlc_error(DLC_ERR_ARG, "server_global: %d tensors, the server's layout has %d", count, s->y.count);
    for (int i = 0; i < count; i++)
        if (!t[i].data || t[i].numel != s->y.numel[i])
            return dlc_error(DLC_ERR_ARG, "server_global: tensor %d ('%s'): %lld elements, the layout's has %lld", i,
                             t[i].name ? t[i].name : "?", (long long)t[i].numel, (long long)s->y.numel[i]);
    dlc_status st = dlc_srt_global(s->s, dlc_params_data(s->y.params));
    if (st == DLC_OK) host_out(&s->y, t);
    pages_release(dlc_params_data(s->y.params), (size_t)dlc_params_size(s->y.params)); /* read, not kept */
    return st;
}
