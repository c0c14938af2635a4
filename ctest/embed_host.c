/* embed_host.c - a host with its own trainer joins a run through the public embedding
 * API only (diloco/client.h), built against the INSTALLED headers and libdiloco.so by
 * ctest/embed.sh (ctest embed_host).  Its model is hand-written: linear regression
 * y = w.x + b, D features, trained by plain SGD on host arrays (no diloco tensors).
 *
 *   embed_host                      the test: a server in this process, three learner
 *                                   processes (this program again), then the checks
 *   embed_host learner PORT SECRET_FILE ID OUT   one learner (what the test starts)
 *
 * Checks: every learner (ids 1..3, as client.h numbers them; 0..2 in the server's rt.h
 * events) joins, trains and finishes (exit 0) with contributions merged (learner 2, rt.h's
 * index 1, has its link cut past the timeout after a few merges: it is lost, trains on,
 * reconnects and rejoins with the whole model);
 * the global model's loss on held-out data falls below a tenth of the initial model's;
 * each learner ends within 5% (relative L2) of the global model; a learner whose layout
 * differs (one feature fewer) is refused, the message naming the tensor, both sides'. */
#define _POSIX_C_SOURCE 200809L
#include <diloco/client.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define D 32
#define STEPS 300
#define BATCH 16
#define LEARNERS 3
#define RUN "{\"sync\": {\"preset\": \"decoupled\", \"H\": 10, \"fragments\": 2, \"tau\": 2}," \
            " \"outer\": {\"lr\": 0.7, \"momentum\": 0.9}}"

static uint64_t rng_state;
static double uniform(void) { /* xorshift64*: the host's own, in [0, 1) */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}
static double normal(void) {
    double u = uniform(), v = uniform();
    return sqrt(-2 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

/* the true model every shard is drawn from */
static void truth(float *wt, float *bt) {
    rng_state = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < D; i++) wt[i] = (float)normal();
    *bt = 0.5f;
}

/* one example of shard `seed`: x, y = wt.x + bt + noise */
static float example(const float *wt, float bt, float *x) {
    double y = bt;
    for (int i = 0; i < D; i++) x[i] = (float)normal(), y += wt[i] * x[i];
    return (float)(y + 0.01 * normal());
}

/* mean squared error on 512 held-out examples */
static double loss(const float *w, float b) {
    float wt[D], bt, x[D];
    truth(wt, &bt);
    rng_state = 0x1234567ULL;
    double s = 0;
    for (int n = 0; n < 512; n++) {
        float y = example(wt, bt, x);
        double p = b;
        for (int i = 0; i < D; i++) p += w[i] * x[i];
        s += (p - y) * (p - y);
    }
    return s / 512;
}

static int learner(const char *port, const char *secret, int id, const char *out) {
    float w[D], b = 0, wt[D], bt, x[BATCH][D], y[BATCH];
    memset(w, 0, sizeof w);
    int64_t shape[2] = {1, D};
    dlc_client_tensor t[2] = {{"w", w, D, 2, shape}, {"b", &b, 1, 0, NULL}};
    dlc_client_config cc = dlc_client_default_config();
    cc.tensors = t, cc.count = 2, cc.run = RUN, cc.connect = port, cc.secret_file = secret, cc.id = id;
    cc.run_id = "embed", cc.join_timeout = 30, cc.heartbeat = 0.25;
    dlc_client *c = dlc_client_new(&cc);
    if (!c) return fprintf(stderr, "learner %d: %s\n", id, dlc_last_error()), 1;
    double l0 = loss(w, b);
    truth(wt, &bt);
    rng_state = 1000 + (uint64_t)id; /* its own shard */
    for (int step = 0; step < STEPS; step++) {
        float gw[D] = {0}, gb = 0;
        for (int n = 0; n < BATCH; n++) y[n] = example(wt, bt, x[n]);
        for (int n = 0; n < BATCH; n++) {
            double p = b;
            for (int i = 0; i < D; i++) p += w[i] * x[n][i];
            float e = (float)(2 * (p - y[n]) / BATCH);
            for (int i = 0; i < D; i++) gw[i] += e * x[n][i];
            gb += e;
        }
        for (int i = 0; i < D; i++) w[i] -= 0.02f * gw[i];
        b -= 0.02f * gb;
        /* a step of a real trainer takes time; learner 2's longer (the server's srt index 1,
         * rt.h numbering from 0), so that it still trains when its cut (below) ends: it
         * rejoins, then finishes */
        struct timespec ts = {0, (id == 2 ? 20 : 2) * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (dlc_client_step(c, BATCH) != DLC_OK) {
            fprintf(stderr, "learner %d: step %d: %s\n", id, step, dlc_last_error());
            dlc_client_free(c);
            return 1;
        }
        if (step % 60 == 30) { /* between calls the buffers are the host's alone (client.h) */
            float keep[D];
            memcpy(keep, w, sizeof w);
            struct timespec wait = {0, 150 * 1000 * 1000}; /* merges arrive meanwhile */
            nanosleep(&wait, NULL);
            if (memcmp(keep, w, sizeof w) != 0) {
                fprintf(stderr, "learner %d: its buffer changed between two calls\n", id);
                dlc_client_free(c);
                return 1;
            }
        }
    }
    int64_t sched = dlc_client_schedule_step(c);
    if (sched < STEPS || dlc_client_steps(c) != STEPS) {
        fprintf(stderr, "learner %d: %lld steps, run step %lld: expected %d and >= %d\n", id,
                (long long)dlc_client_steps(c), (long long)sched, STEPS, STEPS);
        dlc_client_free(c);
        return 1;
    }
    if (dlc_client_finish(c, 20) != DLC_OK) fprintf(stderr, "learner %d: finish: %s\n", id, dlc_last_error());
    dlc_lrt_stats ls;
    dlc_lrt_get_stats(dlc_client_lrt(c), &ls);
    printf("learner %d: loss %.5f -> %.5f, %lld merged fragments applied, %lld reconnects, connected %d\n", id, l0,
           loss(w, b), (long long)dlc_client_applied(c), (long long)ls.reconnects, ls.connected);
    dlc_client_free(c);
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(w, sizeof w, 1, f) != 1 || fwrite(&b, sizeof b, 1, f) != 1) return perror(out), 1;
    fclose(f);
    return 0;
}

static int failures;
#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) failures++, fprintf(stderr, "embed_host: FAIL %s:%d: ", __FILE__, __LINE__), \
                     fprintf(stderr, __VA_ARGS__), fputc('\n', stderr);                           \
    } while (0)

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "learner") == 0) return learner(argv[2], argv[3], atoi(argv[4]), argv[5]);
    char dir[] = "/tmp/embed_host.XXXXXX";
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    char secret[256], port[64], outs[LEARNERS][256];
    snprintf(secret, sizeof secret, "%s/secret", dir);
    FILE *f = fopen(secret, "w");
    if (!f) return perror(secret), 1;
    fputs("embed-host-secret-0123456789\n", f);
    fclose(f);

    float w[D] = {0}, b = 0;
    int64_t shape[2] = {1, D};
    dlc_client_tensor t[2] = {{"w", w, D, 2, shape}, {"b", &b, 1, 0, NULL}};
    dlc_server_config sc = dlc_server_default_config();
    sc.tensors = t, sc.count = 2, sc.run = RUN, sc.learners = LEARNERS, sc.secret_file = secret, sc.run_id = "embed";
    sc.heartbeat = 0.25, sc.timeout = 3;
    dlc_server *s = dlc_server_new(&sc);
    if (!s) return fprintf(stderr, "embed_host: server: %s\n", dlc_last_error()), 1;
    double l0 = loss(w, b);
    snprintf(port, sizeof port, "127.0.0.1:%d", dlc_server_port(s));

    /* a learner of another layout (one feature fewer) is refused, naming the tensor, both sides' */
    float w2[D - 1] = {0};
    dlc_client_tensor t2[2] = {{"w", w2, D - 1, 0, NULL}, {"b", &b, 1, 0, NULL}};
    dlc_client_config bad = dlc_client_default_config();
    bad.tensors = t2, bad.count = 2, bad.run = RUN, bad.connect = port, bad.secret_file = secret;
    bad.run_id = "embed", bad.join_timeout = 5;
    dlc_client *c = dlc_client_new(&bad);
    CHECK(!c && strstr(dlc_last_error(), "the layout differs at tensor 0: this server's is 'w' [") &&
              strstr(dlc_last_error(), "this learner's is 'w' ["),
          "a learner of another layout: %s", c ? "joined" : dlc_last_error());
    dlc_client_free(c);
    /* a run description that does not parse is refused naming the field */
    bad.tensors = t, bad.run = "{\"sync\": {\"tau\": \"two\"}}";
    c = dlc_client_new(&bad);
    CHECK(!c && strstr(dlc_last_error(), "sync.tau"), "a bad run: %s", c ? "accepted" : dlc_last_error());
    dlc_client_free(c);

    pid_t pid[LEARNERS];
    for (int m = 0; m < LEARNERS; m++) {
        snprintf(outs[m], sizeof outs[m], "%s/learner-%d.bin", dir, m);
        char id[16];
        snprintf(id, sizeof id, "%d", m + 1); /* client.h numbers learners from 1, rt.h's srt from 0 */
        pid[m] = fork();
        if (pid[m] == 0) {
            execl("/proc/self/exe", argv[0], "learner", port, secret, id, outs[m], (char *)NULL);
            _exit(127);
        }
        CHECK(pid[m] > 0, "fork: %s", strerror(errno));
    }
    /* serve until every learner said BYE (or a deadline) */
    dlc_srt *srt = dlc_server_srt(s);
    int byes = 0, merges = 0, cut = 0, joined1 = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (byes < LEARNERS) {
        dlc_srt_event ev;
        int got = dlc_srt_poll(srt, &ev, 200);
        if (got < 0) {
            CHECK(0, "server: %s", dlc_last_error());
            break;
        }
        if (got == 1) {
            if (ev.kind == DLC_SRT_BYE) byes++;
            if (ev.kind == DLC_SRT_JOINED && ev.learner == 1) joined1 = 1;
            if (ev.kind == DLC_SRT_LOST || ev.kind == DLC_SRT_REFUSED || ev.kind == DLC_SRT_JOINED)
                printf("embed_host: %.2f s: learner %d %s%s%s\n", ev.time, ev.learner, dlc_srt_event_name(ev.kind),
                       ev.text[0] ? ": " : "", ev.text);
            if (ev.kind == DLC_SRT_MERGED) merges++;
            dlc_srt_event_release(&ev);
        }
        /* learner 1's link cut past the timeout once it has joined (a slow start under a
         * sanitizer may bring it after the others' first merges): lost, then back whole */
        if (merges >= 6 && joined1 && !cut) {
            CHECK(dlc_srt_cut(srt, 1, 3.5) == DLC_OK, "cut: %s", dlc_last_error());
            cut = 1;
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 90) {
            CHECK(0, "only %d of %d learners said bye within 90 s", byes, LEARNERS);
            break;
        }
    }
    for (int m = 0; m < LEARNERS; m++) {
        int status = 0;
        if (pid[m] > 0) {
            waitpid(pid[m], &status, 0);
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "learner %d exited with %d", m, status);
        }
        dlc_srt_learner_info info;
        CHECK(dlc_srt_learner(srt, m, &info) == DLC_OK && info.merged > 0, "learner %d: no contribution merged", m);
        CHECK(m != 1 || info.joins >= 2, "learner 1 joined %lld times: expected a rejoin after its cut",
              (long long)info.joins);
    }
    CHECK(dlc_server_global(s, t, 2) == DLC_OK, "global: %s", dlc_last_error());
    double lg = loss(w, b);
    printf("embed_host: %d merges; the global model's loss %.5f -> %.5f\n", merges, l0, lg);
    CHECK(lg < 0.1 * l0, "the global model's loss %.5f is not below a tenth of %.5f", lg, l0);
    double ng = b * b;
    for (int i = 0; i < D; i++) ng += w[i] * w[i];
    for (int m = 0; m < LEARNERS; m++) {
        float lw[D], lb;
        FILE *in = fopen(outs[m], "rb");
        int ok = in && fread(lw, sizeof lw, 1, in) == 1 && fread(&lb, sizeof lb, 1, in) == 1;
        if (in) fclose(in);
        CHECK(ok, "learner %d wrote no model", m);
        if (!ok) continue;
        double d = (lb - b) * (lb - b);
        for (int i = 0; i < D; i++) d += (lw[i] - w[i]) * (lw[i] - w[i]);
        printf("embed_host: learner %d is %.4f (relative L2) from the global model\n", m, sqrt(d / ng));
        CHECK(sqrt(d / ng) < 0.05, "learner %d ends %.4f (relative L2) from the global model", m, sqrt(d / ng));
        remove(outs[m]);
    }
    dlc_server_free(s);
    remove(secret);
    rmdir(dir);
    if (failures) return fprintf(stderr, "embed_host: %d checks failed\n", failures), 1;
    printf("embed_host: ok\n");
    return 0;
}
