/*
 * rt_client.c - the embedding API's bad input (rt/include/diloco/client.h): every config
 * the client and the server refuse before they open a socket, each with a message that
 * names what was wrong and what was expected, and nothing made; one client's steps against
 * an in-process server (what the host's buffers hold after each); driver mode refused.  (A
 * whole run through the API: ctest embed_host and embed_python.)
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "diloco/ckpt.h"
#include "diloco/client.h"
#include "diloco/frag.h"
#include "diloco/params.h"

static float w[12], b[3];

static void refused_client(const dlc_client_config *cc, const char *says) {
    dlc_client *c = dlc_client_new(cc);
    CHECK(c == NULL && strstr(dlc_last_error(), says));
    if (c || !strstr(dlc_last_error(), says)) fprintf(stderr, "  expected \"%s\", got \"%s\"\n", says, dlc_last_error());
    dlc_client_free(c);
}

static void test_client_config(void) {
    int64_t shape[2] = {3, 4}, bad_shape[2] = {3, 5};
    dlc_client_tensor t[2] = {{"w", w, 12, 2, shape}, {"b", b, 3, 0, NULL}};
    dlc_client_config cc = dlc_client_default_config();
    CHECK(cc.id == 0 && cc.join_timeout == 60 && cc.wait_timeout == 300 && cc.heartbeat == 1);
    cc.tensors = t, cc.count = 2, cc.connect = "127.0.0.1:1", cc.secret = "s3cret-s3cret-s3cret", cc.join_timeout = 1;
    CHECK(dlc_client_new(NULL) == NULL && strstr(dlc_last_error(), "NULL config"));
    dlc_client_config x = cc;
    x.connect = NULL;
    refused_client(&x, "connect: expected the syncer's HOST:PORT or @FILE");
    x = cc, x.heartbeat = 0;
    refused_client(&x, "heartbeat 0: expected seconds > 0");
    x = cc, x.id = -2;
    refused_client(&x, "id = -2: expected a learner id from 1 to 65536, numbered as `diloco-lua learner --id`");
    x = cc, x.id = 65537;
    refused_client(&x, "id = 65537: expected a learner id from 1");
    /* a host built against version 2 numbers from 0 (-1: assigned), as it did */
    dlc_client_config v2;
    CHECK(dlc_client_config_default_versioned(DLC_CLIENT_CONFIG_V2, &v2) == DLC_OK && v2.id == -1);
    v2.tensors = t, v2.count = 2, v2.connect = "127.0.0.1:1", v2.secret = cc.secret, v2.id = -2;
    CHECK_PFAILS(dlc_client_new_versioned(DLC_CLIENT_CONFIG_V2, &v2), DLC_ERR_ARG,
                 "id = -2: expected a 0-based learner id below 65536, or -1 (assigned): config versions 1 and 2");
    x = cc, x.count = 0;
    refused_client(&x, "0 tensors: expected a list of at least one");
    dlc_client_tensor u[2] = {t[0], t[1]};
    x = cc, x.tensors = u;
    u[1].name = "";
    refused_client(&x, "tensor 1 has no name");
    u[1].name = "w";
    refused_client(&x, "tensors 0 and 1 are both named 'w'");
    u[1] = t[1], u[1].data = NULL;
    refused_client(&x, "tensor 'b': data is NULL");
    u[1] = t[1], u[1].numel = 0;
    refused_client(&x, "tensor 'b': numel = 0: expected >= 1");
    u[1] = t[1], u[0].shape = bad_shape;
    refused_client(&x, "tensor 'w': its shape holds 15 elements, numel = 12");
    u[0] = t[0], u[0].ndim = 5;
    refused_client(&x, "tensor 'w': ndim = 5");
    x = cc, x.run = "{\"sync\": {\"H\": 0.5}}";
    refused_client(&x, "sync.H: expected an integer");
    x = cc, x.run = "{\"sync\": {\"preset\": \"dp\"}}";
    refused_client(&x, "data parallel needs the host's gradients");
    x = cc, x.secret_file = "/nonexistent";
    refused_client(&x, "expected one of secret_file and secret");
    x = cc, x.secret = NULL;
    refused_client(&x, "expected one of secret_file and secret");
    x = cc, x.connect = "@/nonexistent/dir/address", x.join_timeout = 0.2;
    refused_client(&x, "no address file within 0.2 s");
    /* a syncer that is not there: the join's deadline names what did not arrive */
    x = cc, x.join_timeout = 0.5;
    refused_client(&x, "WELCOME and whole model");
    CHECK(dlc_client_step(NULL, 1) == DLC_ERR_ARG && dlc_client_finish(NULL, 1) == DLC_ERR_ARG &&
          dlc_client_rollback(NULL) == DLC_ERR_ARG && dlc_client_id(NULL) == -1 && dlc_client_lrt(NULL) == NULL);
    dlc_client_free(NULL);
}

static void test_server_config(void) {
    dlc_client_tensor t[2] = {{"w", w, 12, 0, NULL}, {"b", b, 3, 0, NULL}};
    dlc_server_config sc = dlc_server_default_config();
    CHECK(sc.learners == 1 && strcmp(sc.listen, "127.0.0.1:0") == 0 && sc.timeout == 5 && sc.heartbeat == 1);
    sc.tensors = t, sc.count = 2, sc.secret = "s3cret-s3cret-s3cret";
    dlc_server_config x = sc;
    x.heartbeat = 5;
    CHECK(dlc_server_new(&x) == NULL && strstr(dlc_last_error(), "heartbeat < timeout"));
    x = sc, x.learners = 0;
    CHECK(dlc_server_new(&x) == NULL && strstr(dlc_last_error(), "learners"));
    x = sc, x.run = "{\"outer\": {\"momentum\": 1.5}}";
    CHECK(dlc_server_new(&x) == NULL && strstr(dlc_last_error(), "outer.momentum = 1.5"));
    w[3] = 1.0f / 0.0f;
    CHECK(dlc_server_new(&sc) == NULL && strstr(dlc_last_error(), "parameter 'w' element 3 is inf"));
    w[3] = 0;
    x = sc, x.listen = "not an address";
    CHECK(dlc_server_new(&x) == NULL && strlen(dlc_last_error()) > 0);
    /* a good one serves, and hands its global model back into the host's buffers */
    for (int i = 0; i < 12; i++) w[i] = (float)i;
    dlc_server *s = dlc_server_new(&sc);
    CHECK_OK(s);
    if (!s) return;
    CHECK(dlc_server_port(s) > 0 && dlc_server_srt(s) != NULL);
    float w2[12] = {0}, b2[3] = {0};
    dlc_client_tensor g[2] = {{"w", w2, 12, 0, NULL}, {"b", b2, 3, 0, NULL}};
    CHECK(dlc_server_global(s, g, 2) == DLC_OK && w2[11] == 11.0f && b2[0] == 0.0f);
    CHECK(dlc_server_global(s, g, 1) == DLC_ERR_ARG && strstr(dlc_last_error(), "1 tensors, the server's layout has 2"));
    g[1].numel = 2;
    CHECK(dlc_server_global(s, g, 2) == DLC_ERR_ARG && strstr(dlc_last_error(), "2 elements, the layout's has 3"));
    dlc_server_event ev;
    CHECK(dlc_server_poll(s, &ev, 10) == 0); /* nothing happened */
    CHECK(strcmp(dlc_server_event_name(DLC_SRT_MERGED), "merged") == 0 && dlc_server_event_name(99) == NULL);
    dlc_server_free(s);
    dlc_server_free(NULL);
}

/* One client against an in-process server (streaming, H 8, 2 fragments: w and b): the
 * join writes the global model into the host's buffers; a step that applies no merge
 * leaves them bit for bit as the host wrote them, and one that applies a merge to one
 * fragment leaves the other's values the host's (the client copies out only what a
 * merge changed); a NaN is refused, naming it, once its fragment is due, and rollback
 * brings the buffers back to the last global model; a learner with another layout is
 * refused naming the first tensor that differs, the server's and its own. */
/* The two tests' run: a server on w[12] and b[3] (streaming, H 8, 2 fragments) and a
 * client config of the host's buffers for it; NULL when the server failed. */
static const char *const RUN2 = "{\"sync\": {\"preset\": \"streaming\", \"H\": 8, \"fragments\": 2}}";

static dlc_server *serve_two(float *sw, float *sb, float *cw, float *cb, dlc_client_tensor ct[2], char *addr,
                             size_t cap, dlc_client_config *cc, void (*on_event)(void *, const dlc_server_event *),
                             void *ctx, int event_thread) {
    dlc_client_tensor st[2] = {{"w", sw, 12, 0, NULL}, {"b", sb, 3, 0, NULL}};
    dlc_server_config sc = dlc_server_default_config();
    sc.tensors = st, sc.count = 2, sc.secret = "s3cret-s3cret-s3cret", sc.run = RUN2;
    sc.on_event = on_event, sc.event_ctx = ctx, sc.event_thread = event_thread;
    dlc_server *s = dlc_server_new(&sc);
    CHECK_OK(s);
    if (!s) return NULL;
    snprintf(addr, cap, "127.0.0.1:%d", dlc_server_port(s));
    ct[0] = (dlc_client_tensor){"w", cw, 12, 0, NULL}, ct[1] = (dlc_client_tensor){"b", cb, 3, 0, NULL};
    *cc = dlc_client_default_config();
    cc->tensors = ct, cc->count = 2, cc->connect = addr, cc->secret = sc.secret, cc->run = RUN2, cc->join_timeout = 10;
    return s;
}

static void test_client_steps(void) {
    float sw[12], sb[3] = {1, 2, 3}, cw[12] = {0}, cb[3] = {0}, pw[12], pb[3];
    for (int i = 0; i < 12; i++) sw[i] = 0.5f * (float)i;
    dlc_client_tensor ct[2];
    dlc_client_config cc;
    char addr[64];
    dlc_tensor_cache_clear();
    dlc_server *s = serve_two(sw, sb, cw, cb, ct, addr, sizeof addr, &cc, NULL, NULL, 0);
    if (!s) return;
    dlc_client *c = dlc_client_new(&cc);
    CHECK_OK(c);
    if (!c) {
        dlc_server_free(s);
        return;
    }
    CHECK(memcmp(cw, sw, sizeof cw) == 0 && memcmp(cb, sb, sizeof cb) == 0);
    /* the layouts took the hosts' buffers without a copy: none left in this thread's
     * tensor cache (a whole model, for a real one) */
    CHECK(dlc_tensor_bytes_cached() == 0);
    int untouched = 0, one = 0, both = 0;
    for (int t = 1; t <= 60; t++) {
        for (int i = 0; i < 12; i++) cw[i] += 0.01f;
        for (int i = 0; i < 3; i++) cb[i] -= 0.01f;
        memcpy(pw, cw, sizeof cw), memcpy(pb, cb, sizeof cb);
        int64_t before = dlc_client_applied(c);
        CHECK(dlc_client_step(c, 10) == DLC_OK);
        int dw = memcmp(pw, cw, sizeof cw) != 0, db = memcmp(pb, cb, sizeof cb) != 0;
        if (dlc_client_applied(c) == before) {
            CHECK(!dw && !db);
            untouched++;
        } else if (dw != db) {
            one++;
        } else {
            both++;
        }
        struct timespec ts = {0, 3 * 1000 * 1000};
        nanosleep(&ts, NULL); /* the merges' round trip */
    }
    CHECK(untouched > 0 && one > 0);
    if (one == 0) fprintf(stderr, "  no step applied one fragment alone (%d untouched, %d both)\n", untouched, both);
    cw[5] = NAN;
    dlc_status r = DLC_OK;
    for (int t = 0; t < 10 && r == DLC_OK; t++) r = dlc_client_step(c, 10); /* due within H = 8 */
    CHECK(r == DLC_ERR_RANGE && strstr(dlc_last_error(), "parameter 'w' element 5 is nan"));
    CHECK(dlc_client_rollback(c) == DLC_OK);
    int finite = 1;
    for (int i = 0; i < 12; i++) finite &= isfinite(cw[i]) != 0;
    CHECK(finite && dlc_client_step(c, 10) == DLC_OK);
    CHECK(dlc_client_finish(c, 5) == DLC_OK);
    dlc_client_free(c);
    /* a learner whose layout differs is refused with the tensor named, both sides' */
    float xb[4] = {0};
    dlc_client_tensor xt[2] = {{"w", cw, 12, 0, NULL}, {"b", xb, 4, 0, NULL}};
    cc.tensors = xt;
    c = dlc_client_new(&cc);
    const char *want[] = {"the layout differs at tensor 1: this server's is 'b' [3]", "this learner's is 'b' [4]",
                          "mismatch"};
    CHECK(c == NULL);
    for (int i = 0; i < 3; i++) {
        CHECK(strstr(dlc_last_error(), want[i]) != NULL);
        if (!strstr(dlc_last_error(), want[i])) fprintf(stderr, "  expected \"%s\" in \"%s\"\n", want[i], dlc_last_error());
    }
    dlc_client_free(c);
    dlc_server_free(s);
}

/* The host's own state (client.h: state_dir): saved every save_every steps and at the
 * finish, published whole in the layout of every learner's state (checkpoint-STEP.
 * safetensors, whose metadata say whose it is and name the host's file beside it); a save
 * that fails or writes nothing is an error that leaves the published state as it was; a
 * restarted client (same id) loads the newest; another run's or learner's is refused; a
 * directory of the older layout (state-STEP named by latest) still loads; bad configs and
 * a latest naming nothing are refused. */
typedef struct host_st {
    int saves, loads, fail, empty;
    int64_t loaded_step;
    char loaded[64];
} host_st;

static int save_cb(void *ctx, const char *path, int64_t step) {
    host_st *h = ctx;
    if (h->fail) return 7;
    if (h->empty) return 0;
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "moments of step %lld\n", (long long)step);
    h->saves++;
    return fclose(f) != 0;
}

static int load_cb(void *ctx, const char *path, int64_t step) {
    host_st *h = ctx;
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    h->loaded[0] = 0;
    if (!fgets(h->loaded, sizeof h->loaded, f)) h->loaded[0] = 0;
    fclose(f);
    h->loads++, h->loaded_step = step;
    return 0;
}

static int count_files(const char *dir, const char *prefix) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -c '^%s' || true", dir, prefix);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p && fscanf(p, "%d", &n) != 1) n = -1;
    if (p) pclose(p);
    return n;
}

static void test_client_state(void) {
    float sw[12] = {0}, sb[3] = {0}, cw[12], cb[3];
    dlc_client_tensor ct[2];
    dlc_client_config cc;
    char addr[64], dir[] = "/tmp/dlc-state-XXXXXX", path[256];
    dlc_server *s = serve_two(sw, sb, cw, cb, ct, addr, sizeof addr, &cc, NULL, NULL, 0);
    if (!s) return;
    CHECK(mkdtemp(dir) != NULL);
    host_st h = {0};
    /* an id beyond the run's: the syncer says why and the client fails at once, not at
     * its join deadline (it retried silently until then) */
    dlc_client_config x = cc;
    x.id = 6, x.join_timeout = 30;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    refused_client(&x, "learner id 6 from");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(strstr(dlc_last_error(), "this run has learners 1..1"));
    if (!strstr(dlc_last_error(), "this run has learners 1..1")) fprintf(stderr, "  got \"%s\"\n", dlc_last_error());
    double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK(took < 10);
    if (took >= 10) fprintf(stderr, "  an id beyond the run's failed after %.1f s\n", took);
    cc.id = 1;
    x = cc;
    x.state_dir = dir;
    refused_client(&x, "expected a state_dir with a save_state");
    x = cc, x.save_state = save_cb;
    refused_client(&x, "state_dir NULL, save_state set");
    x = cc, x.state_dir = dir, x.save_state = save_cb, x.save_every = -1;
    refused_client(&x, "save_every -1");
    char longdir[3100];
    memset(longdir, 'd', sizeof longdir - 1), longdir[sizeof longdir - 1] = 0;
    x = cc, x.state_dir = longdir, x.save_state = save_cb;
    refused_client(&x, "state_dir of 3099 bytes: expected a directory path of 1..3000 bytes");
    x = cc, x.state_dir = "", x.save_state = save_cb;
    refused_client(&x, "state_dir of 0 bytes");
    cc.state_dir = dir, cc.save_state = save_cb, cc.load_state = load_cb, cc.state_ctx = &h, cc.save_every = 5;
    dlc_client *c = dlc_client_new(&cc);
    CHECK_OK(c);
    if (!c) goto out;
    CHECK(h.loads == 0); /* nothing published yet */
    for (int t = 1; t <= 12; t++) CHECK(dlc_client_step(c, 10) == DLC_OK);
    /* saves at steps 5 and 10 of its own: the run's schedule steps then (a checkpoint and its host file) */
    CHECK(h.saves == 2 && count_files(dir, "checkpoint-") == 2);
    if (h.saves != 2 || count_files(dir, "checkpoint-") != 2) {
        snprintf(path, sizeof path, "ls -l %s >&2", dir);
        if (system(path)) {}
    }
    h.fail = 1;
    for (int t = 13; t <= 14; t++) CHECK(dlc_client_step(c, 10) == DLC_OK);
    CHECK(dlc_client_step(c, 10) == DLC_ERR_IO && strstr(dlc_last_error(), "save_state for step") &&
          strstr(dlc_last_error(), "failed for") && strstr(dlc_last_error(), "stays"));
    h.fail = 0, h.empty = 1;
    for (int t = 16; t <= 19; t++) CHECK(dlc_client_step(c, 10) == DLC_OK);
    CHECK(dlc_client_step(c, 10) == DLC_ERR_IO && strstr(dlc_last_error(), "wrote no file at"));
    CHECK(count_files(dir, "checkpoint-") == 2 && count_files(dir, ".checkpoint") == 0 && h.saves == 2);
    h.empty = 0;
    int64_t end = dlc_client_schedule_step(c);
    CHECK(dlc_client_finish(c, 5) == DLC_OK && h.saves == 3 && count_files(dir, "checkpoint-") == 2);
    end = dlc_client_schedule_step(c) > end ? dlc_client_schedule_step(c) : end;
    dlc_client_free(c);
    /* restarted: the newest state comes back */
    c = dlc_client_new(&cc);
    CHECK_OK(c);
    CHECK(h.loads == 1 && h.loaded_step == end);
    snprintf(path, sizeof path, "moments of step %lld\n", (long long)end);
    CHECK(strcmp(h.loaded, path) == 0);
    if (strcmp(h.loaded, path) != 0) fprintf(stderr, "  loaded \"%s\", expected \"%s\"\n", h.loaded, path);
    dlc_client_free(c);
    /* the checkpoint says whose state it is (this learner's, 1-based, of this run), at
     * which step, and names the host's file beside it */
    char ck[512], hostf[64];
    snprintf(ck, sizeof ck, "%s/checkpoint-%08lld.safetensors", dir, (long long)end);
    dlc_safetensors *st = dlc_safetensors_open_header(ck);
    CHECK_OK(st);
    if (st) {
        snprintf(path, sizeof path, "%lld", (long long)end);
        snprintf(hostf, sizeof hostf, "checkpoint-%08lld.host", (long long)end);
        const char *m[][2] = {{"diloco.learner", "1"}, {"diloco.run_id", ""}, {"diloco.step", path},
                              {"diloco.host_state", hostf}, {"diloco.format", "1"}};
        for (int i = 0; i < 5; i++) {
            const char *v = dlc_safetensors_meta(st, m[i][0]);
            CHECK(v && strcmp(v, m[i][1]) == 0);
            if (!v || strcmp(v, m[i][1]) != 0)
                fprintf(stderr, "  %s = %s, expected %s\n", m[i][0], v ? v : "(none)", m[i][1]);
        }
        CHECK(dlc_safetensors_count(st) == 0);
        dlc_safetensors_close(st);
    }
    /* a newer checkpoint of another run, or of another learner, is not loaded: refused,
     * naming both */
    static const char *const foreign[][3] = {
        {"1", "other-run", "holds the state of run \"other-run\""},
        {"2", "", "holds the state of learner 2 (1-based; "},
    };
    snprintf(ck, sizeof ck, "%s/checkpoint-%08lld.safetensors", dir, (long long)end + 1);
    snprintf(hostf, sizeof hostf, "checkpoint-%08lld.host", (long long)end + 1);
    snprintf(path, sizeof path, "%s/%s", dir, hostf);
    FILE *f = fopen(path, "w");
    if (f) fputs("moments of someone else\n", f), fclose(f);
    for (int i = 0; i < 2; i++) {
        const char *keys[] = {"diloco.learner", "diloco.run_id", "diloco.host_state"};
        const char *vals[] = {foreign[i][0], foreign[i][1], hostf};
        CHECK(dlc_safetensors_save(ck, 0, NULL, NULL, 3, keys, vals) == DLC_OK);
        h.loads = 0;
        refused_client(&cc, foreign[i][2]);
        CHECK(h.loads == 0);
    }
    /* one whose host file is gone is passed over: the one before loads */
    CHECK(unlink(path) == 0);
    h.loads = 0;
    c = dlc_client_new(&cc);
    CHECK_OK(c);
    CHECK(h.loads == 1 && h.loaded_step == end);
    dlc_client_free(c);
    /* a directory of the older layout (state-STEP named by latest) still loads */
    snprintf(path, sizeof path, "rm -f %s/checkpoint-*", dir);
    CHECK(system(path) == 0);
    snprintf(path, sizeof path, "%s/state-%012lld", dir, (long long)end);
    f = fopen(path, "w");
    if (f) fputs("older moments\n", f), fclose(f);
    snprintf(path, sizeof path, "%s/latest", dir);
    f = fopen(path, "w");
    if (f) fprintf(f, "state-%012lld\n", (long long)end), fclose(f);
    h.loads = 0;
    c = dlc_client_new(&cc);
    CHECK_OK(c);
    CHECK(h.loads == 1 && h.loaded_step == end && strcmp(h.loaded, "older moments\n") == 0);
    dlc_client_free(c);
    /* a latest that names no state is refused, naming it */
    f = fopen(path, "w");
    if (f) fputs("garbage\n", f), fclose(f);
    refused_client(&cc, "does not name a state");
out:
    snprintf(path, sizeof path, "rm -rf %s", dir);
    CHECK(system(path) == 0);
    dlc_server_free(s);
}

/* The server's events through on_event: in the host's own loop (dlc_server_dispatch, on
 * the calling thread) and on the library's thread (event_thread), each seeing the
 * client's join, merges and BYE in order; dlc_server_poll is refused while on_event takes
 * the events, dlc_server_dispatch without one or beside the library's thread. */
typedef struct evcount {
    atomic_int n[8], other_thread, order_bad, last, joined_learner;
    pthread_t main;
} evcount;

static void count_event(void *ctx, const dlc_server_event *ev) {
    evcount *c = ctx;
    if (ev->kind >= 0 && ev->kind < 8) atomic_fetch_add(&c->n[ev->kind], 1);
    if (!pthread_equal(pthread_self(), c->main)) atomic_store(&c->other_thread, 1);
    if (atomic_load(&c->last) == DLC_SRT_BYE) atomic_store(&c->order_bad, 1); /* nothing after the BYE */
    atomic_store(&c->last, ev->kind);
    if (ev->kind == DLC_SRT_JOINED) atomic_store(&c->joined_learner, ev->learner);
}

static void test_server_events(void) {
    for (int thread = 0; thread <= 1; thread++) {
        float sw[12] = {0}, sb[3] = {0}, cw[12], cb[3];
        dlc_client_tensor ct[2];
        dlc_client_config cc;
        char addr[64];
        evcount c;
        memset(&c, 0, sizeof c);
        atomic_store(&c.last, -1);
        c.main = pthread_self();
        dlc_server *s = serve_two(sw, sb, cw, cb, ct, addr, sizeof addr, &cc, count_event, &c, thread);
        if (!s) return;
        dlc_server_event ev;
        CHECK(dlc_server_poll(s, &ev, 0) == DLC_ERR_STATE && strstr(dlc_last_error(), "on_event"));
        if (thread) CHECK(dlc_server_dispatch(s, 0) == DLC_ERR_STATE && strstr(dlc_last_error(), "event_thread"));
        dlc_client *cl = dlc_client_new(&cc);
        CHECK_OK(cl);
        CHECK(dlc_client_id(cl) == 1); /* assigned, numbered from 1 as everywhere */
        for (int t = 0; cl && t < 24; t++) {
            CHECK(dlc_client_step(cl, 10) == DLC_OK);
            struct timespec ts = {0, 3 * 1000 * 1000};
            nanosleep(&ts, NULL);
            if (!thread) CHECK(dlc_server_dispatch(s, 0) >= 0); /* the host's loop, between its own work */
        }
        if (cl) CHECK(dlc_client_finish(cl, 5) == DLC_OK);
        dlc_client_free(cl);
        for (int i = 0; i < 500 && atomic_load(&c.n[DLC_SRT_BYE]) == 0; i++) {
            if (!thread) CHECK(dlc_server_dispatch(s, 10) >= 0);
            else nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        }
        CHECK(atomic_load(&c.n[DLC_SRT_JOINED]) == 1 && atomic_load(&c.n[DLC_SRT_MERGED]) >= 3 &&
              atomic_load(&c.n[DLC_SRT_BYE]) == 1 && !atomic_load(&c.order_bad));
        CHECK(atomic_load(&c.other_thread) == thread); /* the library's thread, or the host's */
        CHECK(atomic_load(&c.joined_learner) == 1);
        dlc_server_free(s);
    }
    /* hosts built against version 2: the server's events and the client's id from 0 */
    {
        float sw[12] = {0}, sb[3] = {0}, cw[12], cb[3];
        dlc_client_tensor st[2] = {{"w", sw, 12, 0, NULL}, {"b", sb, 3, 0, NULL}};
        dlc_client_tensor ct[2] = {{"w", cw, 12, 0, NULL}, {"b", cb, 3, 0, NULL}};
        dlc_server_config sc;
        CHECK(dlc_server_config_default_versioned(DLC_SERVER_CONFIG_V2, &sc) == DLC_OK);
        sc.tensors = st, sc.count = 2, sc.secret = "s3cret-s3cret-s3cret", sc.run = RUN2;
        dlc_server *s = dlc_server_new_versioned(DLC_SERVER_CONFIG_V2, &sc);
        CHECK_OK(s);
        char addr[64];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", s ? dlc_server_port(s) : 1);
        dlc_client_config cc;
        CHECK(dlc_client_config_default_versioned(DLC_CLIENT_CONFIG_V2, &cc) == DLC_OK);
        cc.tensors = ct, cc.count = 2, cc.connect = addr, cc.secret = sc.secret, cc.run = RUN2, cc.join_timeout = 10;
        dlc_client *cl = s ? dlc_client_new_versioned(DLC_CLIENT_CONFIG_V2, &cc) : NULL;
        CHECK_OK(cl);
        CHECK(dlc_client_id(cl) == 0);
        dlc_server_event ev;
        int joined = -2;
        for (int i = 0; s && i < 200 && joined == -2; i++)
            if (dlc_server_poll(s, &ev, 10) == 1 && ev.kind == DLC_SRT_JOINED) joined = ev.learner;
        CHECK(joined == 0);
        if (cl) dlc_client_finish(cl, 5);
        dlc_client_free(cl);
        dlc_server_free(s);
    }
    float w1[12] = {0}, b1[3] = {0};
    dlc_client_tensor t[2] = {{"w", w1, 12, 0, NULL}, {"b", b1, 3, 0, NULL}};
    dlc_server_config sc = dlc_server_default_config();
    sc.tensors = t, sc.count = 2, sc.secret = "s3cret-s3cret-s3cret";
    dlc_server *s = dlc_server_new(&sc);
    CHECK_OK(s);
    CHECK(dlc_server_dispatch(s, 0) == DLC_ERR_STATE && strstr(dlc_last_error(), "no on_event"));
    CHECK(dlc_server_dispatch(NULL, 0) == DLC_ERR_ARG);
    dlc_server_free(s);
}

/* Driver mode was removed (client.h, version 2): a config that sets `driver` is refused,
 * whatever its version, naming rt.h as the way to the drivers' whole configuration. */
static void test_no_driver_mode(void) {
    dlc_lrt_config ldc = dlc_lrt_default_config();
    dlc_client_config cc = dlc_client_default_config();
    cc.driver = &ldc;
    CHECK_PFAILS(dlc_client_new(&cc), DLC_ERR_ARG, "client: driver is set: driver mode was removed in version 2");
    CHECK(strstr(dlc_last_error(), "rt.h: dlc_lrt_new, dlc_lrt_join") != NULL);
    CHECK_PFAILS(dlc_client_new_versioned(DLC_CLIENT_CONFIG_V1, &cc), DLC_ERR_ARG, "driver mode was removed");
    dlc_srt_config sdc = dlc_srt_default_config();
    dlc_server_config sc = dlc_server_default_config();
    sc.driver = &sdc;
    CHECK_PFAILS(dlc_server_new(&sc), DLC_ERR_ARG, "server: driver is set: driver mode was removed in version 2");
    CHECK(strstr(dlc_last_error(), "rt.h: dlc_srt_new") != NULL);
}

/* The config structs' versions (client.h): a version this library does not know (a host
 * built against a newer header) is refused naming it; the defaults of a version write
 * that version's bytes and nothing past them; the unversioned symbols of hosts built
 * before the versions are version 1. */
static void test_config_versions(void) {
    dlc_client_config cc;
    dlc_server_config sc;
    CHECK_SFAILS(dlc_client_config_default_versioned(0, &cc), DLC_ERR_ARG, "client: config version 0 is not one");
    CHECK_SFAILS(dlc_client_config_default_versioned(DLC_CLIENT_CONFIG_VERSION + 1, &cc), DLC_ERR_ARG,
                 "(1 to 3): the host was built against a newer client.h");
    CHECK_SFAILS(dlc_server_config_default_versioned(7, &sc), DLC_ERR_ARG, "server: config version 7 is not one");
    CHECK_SFAILS(dlc_client_config_default_versioned(DLC_CLIENT_CONFIG_V1, NULL), DLC_ERR_ARG, "NULL config");
    CHECK_SFAILS(dlc_server_config_default_versioned(DLC_SERVER_CONFIG_V1, NULL), DLC_ERR_ARG, "NULL config");
    cc = dlc_client_default_config();
    CHECK_PFAILS(dlc_client_new_versioned(4, &cc), DLC_ERR_ARG, "client: config version 4 is not one");
    sc = dlc_server_default_config();
    CHECK_PFAILS(dlc_server_new_versioned(-1, &sc), DLC_ERR_ARG, "server: config version -1 is not one");
    /* version 1's defaults fill its bytes exactly: the guard past them stays */
    size_t n = sizeof(dlc_client_config);
    unsigned char *buf = malloc(n + 16);
    memset(buf, 0xAB, n + 16);
    CHECK(dlc_client_config_default_versioned(DLC_CLIENT_CONFIG_V1, (dlc_client_config *)buf) == DLC_OK);
    int guard = 1;
    for (size_t i = n; i < n + 16; i++) guard &= buf[i] == 0xAB;
    CHECK(guard);
    dlc_client_config *v1 = (dlc_client_config *)buf;
    dlc_client_config old = (dlc_client_default_config)();
    CHECK(v1->id == -1 && v1->join_timeout == 60 && v1->wait_timeout == 300 && v1->heartbeat == 1 &&
          v1->tensors == NULL && v1->driver == NULL && v1->save_state == NULL);
    CHECK(old.id == v1->id && old.join_timeout == v1->join_timeout && old.heartbeat == v1->heartbeat &&
          old.driver == NULL);
    free(buf);
    /* a version 3 server config is version 4's without shard and shards: its defaults
     * write nothing past them, and a V3 host's struct is read no further */
    size_t n3 = offsetof(dlc_server_config, shard);
    unsigned char *sbuf = malloc(sizeof(dlc_server_config) + 16);
    memset(sbuf, 0xAB, sizeof(dlc_server_config) + 16);
    CHECK(dlc_server_config_default_versioned(DLC_SERVER_CONFIG_V3, (dlc_server_config *)sbuf) == DLC_OK);
    int sguard = 1;
    for (size_t i = n3; i < sizeof(dlc_server_config) + 16; i++) sguard &= sbuf[i] == 0xAB;
    CHECK(sguard);
    CHECK(dlc_server_config_default_versioned(DLC_SERVER_CONFIG_V4, (dlc_server_config *)sbuf) == DLC_OK &&
          ((dlc_server_config *)sbuf)->shards == 0 && ((dlc_server_config *)sbuf)->shard == 0);
    free(sbuf);
    dlc_server_config olds = (dlc_server_default_config)();
    CHECK(olds.learners == 1 && strcmp(olds.listen, "127.0.0.1:0") == 0 && olds.timeout == 5 && olds.driver == NULL);
    /* the unversioned entry points check as the versioned ones do */
    CHECK_PFAILS((dlc_client_new)(NULL), DLC_ERR_ARG, "client: NULL config");
    CHECK_PFAILS((dlc_server_new)(NULL), DLC_ERR_ARG, "server: NULL config");
    old.connect = NULL;
    CHECK_PFAILS((dlc_client_new)(&old), DLC_ERR_ARG, "connect: expected the syncer's HOST:PORT or @FILE");
}

int main(void) {
    test_client_config();
    test_server_config();
    test_config_versions();
    test_client_steps();
    test_client_state();
    test_server_events();
    test_no_driver_mode();
    return check_done("rt_client");
}
