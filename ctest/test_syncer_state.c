/* test_syncer_state.c - the syncer's checkpoint (syncer.h, dlc_syncer_save / _load;
 * docs/checkpoints.md).  A syncer with Nesterov momentum, adaptive grace and P = 2 runs a
 * scripted history, is saved with its rings holding several versions, and loaded; the
 * original and the loaded one then take the same scripted events (first messages after
 * the load, contributions based on versions older than the load's current one, a rejoin,
 * a stale base) and must answer with the same actions bit for bit: every SEND payload,
 * every MERGED record, Θ after.  Then: the epoch goes up by one per load; the driver's
 * metadata and shard table come back and reserved keys are refused; a save killed mid-
 * write (a temporary file left behind, a truncated newer file) leaves the previous
 * checkpoint loadable; a checkpoint of another run (learners, plan, model, dp, outer
 * optimizer) and tampered files are refused naming the key and both values; truncation
 * at every offset and flipped bytes give an error, never a crash; a smaller ring keeps
 * the newest versions; with blocking, the first message after a load brings a resync;
 * after a load the learners' incarnations are kept and the old epoch is fenced. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "check_fx.h"
#include "diloco/ckpt.h"
#include "diloco/syncer.h"

static char dir[64];

static const char *pathf(char *buf, const char *name) {
    snprintf(buf, 256, "%s/%s", dir, name);
    return buf;
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    return buf;
}

static void write_bytes(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

/* ---- actions of one call, and comparing two syncers' ---- */

typedef struct rec {
    int n;
    dlc_syncer_action a[64];
} rec;

static rec drain(dlc_syncer *s) {
    rec r;
    r.n = 0;
    while (r.n < 64 && dlc_syncer_poll(s, &r.a[r.n])) r.n++;
    return r;
}

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* 1 when the two action lists are identical, payload bytes and doubles bit for bit. */
static int same_actions(const rec *x, const rec *y) {
    if (x->n != y->n) return 0;
    for (int i = 0; i < x->n; i++) {
        const dlc_syncer_action *a = &x->a[i], *b = &y->a[i];
        if (a->type != b->type || a->learner != b->learner || a->fragment != b->fragment) return 0;
        if (a->type == DLC_SACT_REJECTED && a->reason != b->reason) return 0;
        if (a->type == DLC_SACT_SEND) {
            const dlc_msg *m = &a->msg, *n = &b->msg;
            if (m->type != n->type || m->learner != n->learner || m->fragment != n->fragment ||
                m->version != n->version || m->flags != n->flags || m->steps != n->steps || m->codec != n->codec ||
                !same_bits(m->held, n->held) || !same_bits(m->step_time, n->step_time) || m->len != n->len ||
                (m->len && memcmp(m->payload, n->payload, m->len) != 0))
                return 0;
        }
        if (a->type == DLC_SACT_MERGED) {
            const dlc_merge_info *m = &a->merge, *n = &b->merge;
            if (m->fragment != n->fragment || m->version != n->version || m->count != n->count || m->live != n->live ||
                m->quorum != n->quorum || !same_bits(m->opened, n->opened) || !same_bits(m->quorum_at, n->quorum_at) ||
                !same_bits(m->grace, n->grace) || !same_bits(m->waited, n->waited) || m->all_sent != n->all_sent ||
                m->flushed != n->flushed || m->bytes_in != n->bytes_in || m->bytes_out != n->bytes_out ||
                !same_bits(m->useful_tokens, n->useful_tokens))
                return 0;
            for (int k = 0; k < m->count; k++) {
                const dlc_merge_contrib *c = &m->contribs[k], *d = &n->contribs[k];
                if (c->learner != d->learner || !same_bits(c->weight, d->weight) || c->base_version != d->base_version ||
                    c->staleness != d->staleness || c->steps != d->steps || c->tokens != d->tokens ||
                    !same_bits(c->arrived, d->arrived))
                    return 0;
            }
        }
    }
    return 1;
}

static int same_theta(const dlc_syncer *a, const dlc_syncer *b, const dlc_plan *plan) {
    for (int p = 0; p < dlc_plan_count(plan); p++)
        if (dlc_syncer_version(a, p) != dlc_syncer_version(b, p) ||
            !dlc_syncer_theta(a, p) != !dlc_syncer_theta(b, p) || /* (a shard holds only its own) */
            (dlc_syncer_theta(a, p) && memcmp(dlc_syncer_theta(a, p), dlc_syncer_theta(b, p), (size_t)dlc_plan_numel(plan, p) * sizeof(float))))
            return 0;
    return 1;
}

/* ---- a scripted history ---- */

/* Decoupled defaults (Nesterov 0.7 / 0.9, R = 4, tokens2_steps, RDA, adaptive grace) with
 * M learners and K = 2. */
static dlc_syncer_params params(int M) {
    dlc_syncer_params sp = dlc_syncer_default_params();
    sp.learners = M;
    sp.quorum = 2;
    return sp;
}

typedef struct script {
    float d[NMAX];
    uint64_t lcg;
    int64_t max_staleness; /* the oldest base used by a merged contribution, relative */
} script;

static uint64_t next(script *sc) {
    sc->lcg = sc->lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return sc->lcg >> 33;
}

/* Event i at time t (quarter seconds, so times subtract exactly) to every syncer in ss
 * (the same event to each), with their expiries handled first; the actions of each
 * call must be identical across the syncers.  Returns 0 on a mismatch. */
static int deliver(dlc_syncer **ss, int ns, const dlc_msg *m, double t) {
    int ok = 1;
    for (;;) {
        double e = dlc_syncer_expiry(ss[0]);
        if (!(e <= t)) break;
        rec r0;
        for (int k = 0; k < ns; k++) {
            ok &= dlc_syncer_expiry(ss[k]) == e;
            CHECK(dlc_syncer_handle_expiry(ss[k], e) == DLC_OK);
            rec r = drain(ss[k]);
            if (k == 0) r0 = r;
            else ok &= same_actions(&r0, &r);
        }
    }
    if (!m) return ok;
    rec r0;
    for (int k = 0; k < ns; k++) {
        dlc_status st = dlc_syncer_receive(ss[k], m, t);
        CHECK(st == DLC_OK);
        rec r = drain(ss[k]);
        if (k == 0) r0 = r;
        else ok &= same_actions(&r0, &r);
    }
    return ok;
}

/* A contribution of learner L to fragment p based on the current version minus up to
 * 2 (as far as the ring allows), its payload from seed i. */
static dlc_msg contrib_msg(script *sc, const dlc_syncer *s, const dlc_plan *plan, int L, int p, int i) {
    int64_t n = dlc_plan_numel(plan, p), v = dlc_syncer_version(s, p);
    int64_t back = (int64_t)(next(sc) % 3);
    if (back > v) back = v;
    randv(sc->d, n, 5000 + (uint64_t)i, 0.05f);
    return (dlc_msg){.type = DLC_MSG_CONTRIBUTION, .learner = L, .fragment = p, .version = v - back,
                     .steps = 4 + i % 3, .tokens = 40 * (1 + i % 2), .step_time = 0.5 + 0.25 * (i % 3),
                     .transit = 0.25, .codec = DLC_CODEC_F32, .payload = (const uint8_t *)sc->d,
                     .len = (size_t)n * sizeof(float)};
}

/* Events i0..i1-1: learner i % M sends fragment (i / M) % P at t = 0.25 i, a heartbeat
 * every 7th event.  Returns 0 on a mismatch between the syncers. */
static double run_t0; /* added to every event time of run() */

static int run(script *sc, dlc_syncer **ss, int ns, const dlc_plan *plan, int M, int i0, int i1) {
    int ok = 1, P = dlc_plan_count(plan);
    for (int i = i0; i < i1; i++) {
        double t = run_t0 + 0.25 * i;
        int L = i % M, p = (i / M) % P;
        if (i % 7 == 3) {
            dlc_msg hb = {.type = DLC_MSG_HEARTBEAT, .learner = L, .steps = 10 + i, .step_time = 0.75,
                          .transit = 0.25};
            ok &= deliver(ss, ns, &hb, t);
            continue;
        }
        dlc_msg m = contrib_msg(sc, ss[0], plan, L, p, i);
        ok &= deliver(ss, ns, &m, t);
    }
    return ok;
}

/* Closes every open round of s (all learners send base = current; expiries run). */
static double settle(script *sc, dlc_syncer *s, const dlc_plan *plan, int M, double t) {
    for (int p = 0; p < dlc_plan_count(plan); p++)
        for (int L = 0; L < M && dlc_syncer_round_state(s, p) != DLC_ROUND_IDLE; L++) {
            dlc_msg m = contrib_msg(sc, s, plan, L, p, 900 + L);
            m.version = dlc_syncer_version(s, p);
            t += 0.25;
            deliver(&s, 1, &m, t);
            for (int k = 0; k < 8 && dlc_syncer_round_state(s, p) != DLC_ROUND_IDLE; k++) {
                t += 0.25;
                deliver(&s, 1, NULL, t);
            }
        }
    return t;
}

/* ---- save mid-run, load, continue: bit for bit ---- */

static void test_continue_bit_identical(void) {
    fx x;
    fx_make(&x, 2, 40);
    char path[256];
    pathf(path, "mid.safetensors");
    const int M = 3;
    dlc_syncer_params sp = params(M);
    dlc_syncer *a = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(a);
    if (!a) return;
    script sc = {.lcg = 7};
    for (int L = 0; L < M; L++) {
        CHECK(dlc_syncer_join(a, L, 0) == DLC_OK);
        drain(a);
    }
    CHECK(dlc_syncer_set_shard(a, 1, 17) == DLC_OK);
    run(&sc, &a, 1, x.plan, M, 1, 40);
    double t = settle(&sc, a, x.plan, M, 0.25 * 40);
    t = (double)(int64_t)(t * 4 + 1) / 4;
    CHECK(dlc_syncer_round_state(a, 0) == DLC_ROUND_IDLE && dlc_syncer_round_state(a, 1) == DLC_ROUND_IDLE);
    CHECK(dlc_syncer_version(a, 0) >= 4 && dlc_syncer_version(a, 1) >= 4); /* rings full: 4 versions */
    double e1[3], e2[3];
    dlc_syncer_estimates(a, &e1[0], &e1[1], &e1[2]);
    CHECK(e1[0] > 0 && e1[1] > 0 && e1[2] > 0);

    const char *mk[2] = {"run_id", "recipe_json"}, *mv[2] = {"r-42", "{\"sync\":{\"H\":8}}"};
    CHECK(dlc_syncer_save(a, path, t, 2, mk, mv) == DLC_OK);
    dlc_syncer *b = dlc_syncer_load(path, &sp, x.plan, t);
    CHECK_OK(b);
    if (!b) {
        dlc_syncer_free(a);
        fx_free(&x);
        return;
    }
    CHECK(dlc_syncer_epoch(a) == 1 && dlc_syncer_epoch(b) == 2);
    CHECK(same_theta(a, b, x.plan));
    float arena[NMAX], frag[NMAX];
    CHECK(dlc_syncer_copy_model(b, arena) == DLC_OK);
    gather(&x, 1, arena, frag);
    CHECK(!memcmp(frag, dlc_syncer_theta(a, 1), (size_t)dlc_plan_numel(x.plan, 1) * sizeof(float)));
    dlc_syncer_estimates(b, &e2[0], &e2[1], &e2[2]);
    CHECK(same_bits(e1[0], e2[0]) && same_bits(e1[1], e2[1]) && same_bits(e1[2], e2[2]));
    for (int L = 0; L < M; L++) {
        CHECK(dlc_syncer_is_live(b, L) && dlc_syncer_is_unheard(b, L) && !dlc_syncer_is_unheard(a, L));
        CHECK(dlc_syncer_merged(b, L) == dlc_syncer_merged(a, L) && dlc_syncer_merged(a, L) > 0);
    }
    CHECK(dlc_syncer_shard(b, 1) == 17 && dlc_syncer_shard(b, 0) == -1);
    CHECK(dlc_syncer_expiry(b) == INFINITY);
    /* the driver's metadata comes back through the safetensors reader */
    dlc_safetensors *st = dlc_safetensors_open(path);
    CHECK_OK(st);
    CHECK(st && !strcmp(dlc_safetensors_meta(st, "run_id"), "r-42") &&
          !strcmp(dlc_safetensors_meta(st, "recipe_json"), mv[1]) &&
          !strcmp(dlc_safetensors_meta(st, "syncer.epoch"), "1"));
    dlc_safetensors_close(st);
    /* what was saved: a ring of 4 versions (3 older ones), a momentum buffer not zero */
    st = dlc_safetensors_open(path);
    int64_t shp[DLC_MAX_DIMS];
    CHECK(st && dlc_safetensors_shape(st, "syncer.ring.0", shp) == 2 && shp[0] == 3);
    dlc_tensor *mom = st ? dlc_safetensors_get(st, "syncer.momentum.0") : NULL;
    double mabs = 0;
    for (int64_t i = 0; mom && i < mom->numel; i++) mabs += fabs(mom->data[i]);
    CHECK(mom && mabs > 0);
    dlc_tensor_release(mom);
    dlc_safetensors_close(st);

    /* the same events to both: first the oldest base the saved ring holds (merged in
     * both only if the ring came back) and one older (stale in both); then bases back to
     * current − 2, a rejoin (phase, step time and round age from the saved counters),
     * more merges */
    int64_t v_load0 = dlc_syncer_version(a, 0), v_load1 = dlc_syncer_version(a, 1);
    dlc_syncer *ss[2] = {a, b};
    run_t0 = t + 1 - 0.25 * 41; /* event 41 at t + 1 */
    /* learner 2 rejoins at once: its resync carries the run's phase (saved schedule
     * steps), the median step time and each fragment's round age (saved) */
    CHECK(dlc_syncer_lost(a, 2, t + 0.125) == DLC_OK && dlc_syncer_lost(b, 2, t + 0.125) == DLC_OK);
    drain(a), drain(b);
    CHECK(dlc_syncer_join(a, 2, t + 0.125) == DLC_OK && dlc_syncer_join(b, 2, t + 0.125) == DLC_OK);
    rec r0a = drain(a), r0b = drain(b);
    CHECK(r0a.n == 2 && same_actions(&r0a, &r0b));
    CHECK(r0a.a[0].msg.steps > 0 && r0a.a[0].msg.held > 0 && r0a.a[0].msg.step_time > 0);
    dlc_msg m = contrib_msg(&sc, a, x.plan, 0, 0, 40);
    m.version = v_load0 - 3;
    CHECK(deliver(ss, 2, &m, t + 0.25));
    CHECK(dlc_syncer_round_count(b, 0) == 1 && dlc_syncer_round_count(a, 0) == 1);
    m.version = v_load0 - 4;
    m.learner = 1;
    CHECK(deliver(ss, 2, &m, t + 0.5));
    CHECK(dlc_syncer_round_count(b, 0) == 1);
    for (int i = 41; i < 70; i++) { /* the script goes on from here */
        CHECK(run(&sc, ss, 2, x.plan, M, i, i + 1));
    }
    double tl = run_t0 + 0.25 * 73;
    CHECK(deliver(ss, 2, NULL, tl));
    CHECK(dlc_syncer_lost(a, 2, tl) == DLC_OK && dlc_syncer_lost(b, 2, tl) == DLC_OK);
    rec ra = drain(a), rb = drain(b);
    CHECK(same_actions(&ra, &rb));
    CHECK(dlc_syncer_join(a, 2, tl + 0.25) == DLC_OK && dlc_syncer_join(b, 2, tl + 0.25) == DLC_OK);
    ra = drain(a), rb = drain(b);
    CHECK(ra.n == 2 && same_actions(&ra, &rb));
    CHECK(run(&sc, ss, 2, x.plan, M, 75, 110));
    CHECK(dlc_syncer_version(a, 0) > v_load0 + 2 && dlc_syncer_version(a, 1) > v_load1 + 2);
    CHECK(same_theta(a, b, x.plan));
    for (int L = 0; L < M; L++) CHECK(dlc_syncer_merged(b, L) == dlc_syncer_merged(a, L));
    dlc_syncer_free(a);
    dlc_syncer_free(b);
    run_t0 = 0;
    fx_free(&x);
}

/* The merges after a load used the saved ring: a contribution based on a version older
 * than the load's current one is merged (staleness > 0), not rejected. */
static void test_ring_anchors_after_load(void) {
    fx x;
    fx_make(&x, 1, 41);
    int64_t n = dlc_plan_numel(x.plan, 0);
    char path[256];
    pathf(path, "ring.safetensors");
    dlc_syncer_params sp = params(2);
    sp.quorum = 1;
    sp.grace = DLC_GRACE_OFF;
    dlc_syncer *a = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(a);
    if (!a) return;
    float d[NMAX];
    randv(d, n, 41, 0.05f);
    for (int L = 0; L < 2; L++) {
        CHECK(dlc_syncer_join(a, L, 0) == DLC_OK);
        drain(a); /* every action polled before the next event (syncer.h) */
    }
    drain(a);
    for (int k = 0; k < 5; k++) { /* five merges: versions 1..5, the ring holds 2..5 */
        dlc_msg m = {.type = DLC_MSG_CONTRIBUTION, .learner = 0, .version = k, .steps = 2, .tokens = 20,
                     .codec = DLC_CODEC_F32, .payload = (const uint8_t *)d, .len = (size_t)n * sizeof(float)};
        CHECK(dlc_syncer_receive(a, &m, 1.0 + k) == DLC_OK);
        drain(a);
    }
    CHECK(dlc_syncer_version(a, 0) == 5);
    CHECK(dlc_syncer_save(a, path, 10.0, 0, NULL, NULL) == DLC_OK);
    dlc_syncer *b = dlc_syncer_load(path, &sp, x.plan, 10.0);
    CHECK_OK(b);
    /* learner 1's first message: based on version 2 (the ring's oldest) */
    dlc_msg m = {.type = DLC_MSG_CONTRIBUTION, .learner = 1, .version = 2, .steps = 2, .tokens = 20,
                 .codec = DLC_CODEC_F32, .payload = (const uint8_t *)d, .len = (size_t)n * sizeof(float)};
    CHECK(b && dlc_syncer_receive(b, &m, 11.0) == DLC_OK);
    rec r = drain(b);
    const dlc_syncer_action *ma = NULL;
    for (int i = 0; i < r.n; i++)
        if (r.a[i].type == DLC_SACT_MERGED) ma = &r.a[i];
    CHECK(ma && ma->merge.count == 1 && ma->merge.contribs[0].staleness == 3 && ma->merge.version == 6);
    /* with a ring of 2 in the params, the file's 4 versions shrink to the newest 2 */
    dlc_syncer_params sp2 = sp;
    sp2.outer.ring = 2;
    dlc_syncer *c = dlc_syncer_load(path, &sp2, x.plan, 10.0);
    CHECK_OK(c);
    m.version = 4;
    CHECK(c && dlc_syncer_receive(c, &m, 11.0) == DLC_OK);
    r = drain(c);
    CHECK(r.n > 0 && r.a[r.n - 1].type == DLC_SACT_MERGED && r.a[r.n - 1].merge.contribs[0].staleness == 1);
    m.version = 4; /* now two behind the current 6: stale */
    CHECK(c && dlc_syncer_receive(c, &m, 12.0) == DLC_OK);
    r = drain(c);
    CHECK(r.n > 0 && r.a[0].type == DLC_SACT_REJECTED && r.a[0].reason == DLC_REJECT_STALE);
    dlc_syncer_free(c);
    dlc_syncer_free(b);
    dlc_syncer_free(a);
    fx_free(&x);
}

/* ---- epochs, blocking first messages ---- */

static void test_epochs_and_blocking(void) {
    fx x;
    fx_make(&x, 2, 42);
    char path[256];
    pathf(path, "epoch.safetensors");
    dlc_syncer_params sp = params(2);
    sp.blocking = 1;
    sp.epoch = 7;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    CHECK(dlc_syncer_join(s, 0, 0) == DLC_OK);
    drain(s);
    CHECK(dlc_syncer_join(s, 1, 0) == DLC_OK);
    drain(s);
    for (int k = 0; k < 3 && s; k++) {
        CHECK(dlc_syncer_epoch(s) == 7 + k);
        CHECK(dlc_syncer_save(s, path, 1.0 + k, 0, NULL, NULL) == DLC_OK);
        dlc_syncer_free(s);
        s = dlc_syncer_load(path, &sp, x.plan, 1.0 + k); /* sp.epoch stays 7: below, not used */
        CHECK_OK(s);
    }
    CHECK(s && dlc_syncer_epoch(s) == 10);
    /* incarnations that died before they saved: the driver's epoch, when larger, is taken */
    {
        dlc_syncer_params later = sp;
        later.epoch = 13;
        dlc_syncer *t = dlc_syncer_load(path, &later, x.plan, 4.0); /* saved 9: 10 < 13 */
        CHECK(t && dlc_syncer_epoch(t) == 13);
        dlc_syncer_free(t);
        later.epoch = 10;
        t = dlc_syncer_load(path, &later, x.plan, 4.0); /* equal to saved + 1 */
        CHECK(t && dlc_syncer_epoch(t) == 10);
        dlc_syncer_free(t);
    }
    /* blocking: the first message after the load is answered with the whole model */
    dlc_msg hb = {.type = DLC_MSG_HEARTBEAT, .learner = 1, .steps = 5};
    CHECK(s && dlc_syncer_receive(s, &hb, 5.0) == DLC_OK);
    rec r = drain(s);
    CHECK(r.n == 3 && r.a[0].type == DLC_SACT_JOINED && r.a[0].learner == 1);
    for (int i = 1; i < r.n; i++)
        CHECK(r.a[i].type == DLC_SACT_SEND && r.a[i].msg.flags == DLC_MSG_RESYNC && r.a[i].msg.learner == 1);
    CHECK(s && dlc_syncer_receive(s, &hb, 6.0) == DLC_OK && drain(s).n == 0); /* only the first */
    CHECK(dlc_syncer_is_unheard(s, 0) && !dlc_syncer_is_unheard(s, 1));
    dlc_syncer_free(s);
    fx_free(&x);
}

/* Fencing after a load: the learners' incarnations come back, and what a learner stamped
 * with the old epoch is refused (never merged) and answered once with the whole model
 * under the new epoch; after that its messages are taken, with blocking too (the fenced
 * resync counts as the answer to its first message: no second resync). */
static void test_fencing_after_load(void) {
    for (int blocking = 0; blocking <= 1; blocking++) {
        fx x;
        fx_make(&x, 2, 46);
        int64_t n0 = dlc_plan_numel(x.plan, 0);
        char path[256];
        pathf(path, "fence.safetensors");
        dlc_syncer_params sp = params(2);
        sp.blocking = blocking;
        dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
        CHECK_OK(s);
        if (!s) return;
        CHECK(dlc_syncer_join(s, 0, 0) == DLC_OK);
        drain(s);
        CHECK(dlc_syncer_join(s, 1, 0) == DLC_OK);
        drain(s);
        dlc_msg hb = {.type = DLC_MSG_HEARTBEAT, .learner = 1, .steps = 3, .epoch = 1, .incarnation = 3};
        CHECK(dlc_syncer_receive(s, &hb, 1.0) == DLC_OK && drain(s).n == 0);
        CHECK(dlc_syncer_incarnation(s, 1) == 3);
        CHECK(dlc_syncer_save(s, path, 2.0, 0, NULL, NULL) == DLC_OK);
        dlc_syncer *l = dlc_syncer_load(path, &sp, x.plan, 2.0);
        CHECK_OK(l);
        if (!l) {
            dlc_syncer_free(s);
            fx_free(&x);
            return;
        }
        CHECK(dlc_syncer_epoch(l) == 2 && dlc_syncer_incarnation(l, 1) == 3 && dlc_syncer_incarnation(l, 0) == 0);
        float d[NMAX];
        randv(d, n0, 46, 0.05f);
        dlc_msg c = {.type = DLC_MSG_CONTRIBUTION, .learner = 1, .fragment = 0, .version = 0, .steps = 2,
                     .tokens = 20, .codec = DLC_CODEC_F32, .payload = (const uint8_t *)d,
                     .len = (size_t)n0 * sizeof(float), .epoch = 1, .incarnation = 3};
        CHECK(dlc_syncer_receive(l, &c, 3.0) == DLC_ERR_FORMAT && strstr(dlc_last_error(), "epoch 1"));
        rec r = drain(l);
        CHECK(r.n == 3 && r.a[0].type == DLC_SACT_REJECTED && r.a[0].reason == DLC_REJECT_EPOCH);
        for (int i = 1; i < r.n; i++)
            CHECK(r.a[i].type == DLC_SACT_SEND && r.a[i].msg.flags == DLC_MSG_RESYNC && r.a[i].msg.epoch == 2 &&
                  r.a[i].msg.incarnation == 3);
        CHECK(dlc_syncer_round_count(l, 0) == 0 && !dlc_syncer_is_unheard(l, 1));
        /* an older incarnation than the saved one is refused as such */
        hb.epoch = 2, hb.incarnation = 2;
        CHECK(dlc_syncer_receive(l, &hb, 3.5) == DLC_ERR_FORMAT && strstr(dlc_last_error(), "incarnation 2"));
        drain(l);
        /* stamped with the new epoch: taken as it is (no second resync with blocking) */
        c.epoch = 2;
        CHECK(dlc_syncer_receive(l, &c, 4.0) == DLC_OK);
        r = drain(l);
        CHECK(r.n == 0 && dlc_syncer_round_count(l, 0) == 1);
        dlc_syncer_free(l);
        dlc_syncer_free(s);
        fx_free(&x);
    }
}

/* ---- a save killed mid-write ---- */

static void test_killed_save(void) {
    fx x;
    fx_make(&x, 2, 43);
    char path[256], tmp[300], older[256];
    pathf(path, "kill.safetensors");
    pathf(older, "kill-older.safetensors");
    dlc_syncer_params sp = params(2);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    CHECK(dlc_syncer_save(s, path, 0, 0, NULL, NULL) == DLC_OK);
    size_t n = 0;
    unsigned char *good = read_bytes(path, &n);
    /* a newer save killed before its rename: its temporary file is left behind, half
     * written; the checkpoint at path is the previous one, and loads */
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.0", path, (int)getpid() + 1);
    write_bytes(tmp, good, n / 2);
    dlc_syncer *l = dlc_syncer_load(path, &sp, x.plan, 1.0);
    CHECK_OK(l);
    CHECK(l && dlc_syncer_epoch(l) == 2);
    /* the next save is not disturbed by the leftover, and replaces path atomically */
    CHECK(l && dlc_syncer_save(l, path, 2.0, 0, NULL, NULL) == DLC_OK);
    dlc_syncer_free(l);
    l = dlc_syncer_load(path, &sp, x.plan, 3.0);
    CHECK(l && dlc_syncer_epoch(l) == 3);
    dlc_syncer_free(l);
    unlink(tmp);
    /* a truncated newest file (a copy cut short, a disk that lied about fsync) is an
     * error naming the file; the older checkpoint beside it still loads */
    write_bytes(older, good, n);
    unsigned char *cur = read_bytes(path, &n);
    write_bytes(path, cur, n - 5);
    CHECK_PFAILS(dlc_syncer_load(path, &sp, x.plan, 4.0), DLC_ERR_FORMAT, path);
    l = dlc_syncer_load(older, &sp, x.plan, 4.0);
    CHECK(l && dlc_syncer_epoch(l) == 2);
    dlc_syncer_free(l);
    free(cur);
    free(good);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* ---- another run's checkpoint, tampered files ---- */

/* Copies src to dst with metadata key `key` set to `value` (NULL: removed) and tensor
 * `tname` replaced by `t` (NULL: unchanged; t == (void*)1: removed). */
static void rewrite(const char *src, const char *dst, const char *key, const char *value, const char *tname,
                    dlc_tensor *t) {
    dlc_safetensors *st = dlc_safetensors_open(src);
    if (!st) {
        fprintf(stderr, "rewrite: %s\n", dlc_last_error());
        exit(2);
    }
    int nt = dlc_safetensors_count(st), nm = dlc_safetensors_meta_count(st);
    const char *names[16], *mk[64], *mv[64];
    dlc_tensor *ts[16];
    int k = 0, j = 0;
    for (int i = 0; i < nt && k < 16; i++) {
        const char *nmi = dlc_safetensors_name(st, i);
        if (tname && !strcmp(nmi, tname) && t == (void *)1) continue;
        names[k] = nmi;
        ts[k] = tname && !strcmp(nmi, tname) ? dlc_tensor_retain(t) : dlc_safetensors_get(st, nmi);
        k++;
    }
    for (int i = 0; i < nm && j < 64; i++) {
        const char *ki = dlc_safetensors_meta_key(st, i);
        if (key && !strcmp(ki, key)) {
            if (!value) continue;
            mk[j] = ki, mv[j++] = value;
        } else {
            mk[j] = ki, mv[j++] = dlc_safetensors_meta(st, ki);
        }
    }
    if (dlc_safetensors_save(dst, k, names, ts, j, mk, mv) != DLC_OK) {
        fprintf(stderr, "rewrite: %s\n", dlc_last_error());
        exit(2);
    }
    for (int i = 0; i < k; i++) dlc_tensor_release(ts[i]);
    dlc_safetensors_close(st);
}

static void test_refused(void) {
    fx x, x1, y;
    fx_make(&x, 2, 44);
    fx_make(&x1, 1, 44);
    char path[256], bad[256];
    pathf(path, "run.safetensors");
    pathf(bad, "bad.safetensors");
    dlc_syncer_params sp = params(3);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    for (int L = 0; L < 3; L++) dlc_syncer_join(s, L, 0), drain(s);
    drain(s);
    CHECK(dlc_syncer_save(s, path, 0, 0, NULL, NULL) == DLC_OK);

    /* another run's shape */
    dlc_syncer_params o = sp;
    o.learners = 4;
    CHECK_PFAILS(dlc_syncer_load(path, &o, x.plan, 0), DLC_ERR_FORMAT,
                 "syncer.learners = 3 in the file, 4 in the params");
    CHECK_PFAILS(dlc_syncer_load(path, &sp, x1.plan, 0), DLC_ERR_FORMAT,
                 "syncer.fragments = 2 in the file, 1 in the plan");
    /* another model: same names, one shape differs */
    static const char *const names[4] = {"w", "b", "e", "h"};
    int64_t sh[4][2] = {{3, 5}, {7, 0}, {2, 4}, {5, 0}};
    int nd[4] = {2, 1, 2, 1};
    for (int i = 0; i < 4; i++) y.t[i] = check_randn(50 + (uint64_t)i, 1.0f, nd[i], sh[i]);
    y.p = dlc_params_new(4, names, y.t);
    dlc_plan_params pp = dlc_plan_default_params();
    pp.fragments = 2;
    y.plan = dlc_plan_new(y.p, &pp);
    CHECK_PFAILS(dlc_syncer_load(path, &sp, y.plan, 0), DLC_ERR_FORMAT, "syncer.model_hash = ");
    CHECK(strstr(dlc_last_error(), "another model"));
    /* the same model cut another way */
    dlc_plan_free(y.plan);
    pp.kind = DLC_PLAN_SEQUENTIAL;
    y.plan = dlc_plan_new(x.p, &pp);
    CHECK_PFAILS(dlc_syncer_load(path, &sp, y.plan, 0), DLC_ERR_FORMAT, "syncer.plan_hash = ");
    dlc_syncer *one = dlc_syncer_new(&sp, x1.plan, dlc_params_data(x1.p));
    CHECK(one && dlc_syncer_save(one, bad, 0, 0, NULL, NULL) == DLC_OK);
    dlc_syncer_free(one);
    o = sp;
    o.dp = 1;
    CHECK_PFAILS(dlc_syncer_load(bad, &o, x1.plan, 0), DLC_ERR_FORMAT, "syncer.dp = 0 in the file, 1 in the params");
    /* another outer optimizer */
    o = sp;
    o.outer.momentum = 0, o.outer.nesterov = 0;
    CHECK_PFAILS(dlc_syncer_load(path, &o, x.plan, 0), DLC_ERR_FORMAT,
                 "syncer.momentum.0 is in the file but the params' outer.momentum = 0");
    dlc_syncer *plain = dlc_syncer_new(&o, x.plan, dlc_params_data(x.p));
    CHECK(plain && dlc_syncer_save(plain, bad, 0, 0, NULL, NULL) == DLC_OK);
    CHECK_PFAILS(dlc_syncer_load(bad, &sp, x.plan, 0), DLC_ERR_FORMAT, "tensor syncer.momentum.0 is missing");
    dlc_syncer_free(plain);
    CHECK_PFAILS(dlc_syncer_load(path, &sp, NULL, 0), DLC_ERR_ARG, "plan");
    o = sp;
    o.epoch = 0;
    CHECK_PFAILS(dlc_syncer_load(path, &o, x.plan, 0), DLC_ERR_ARG, "epoch = 0");
    pathf(bad, "absent.safetensors");
    CHECK_PFAILS(dlc_syncer_load(bad, &sp, x.plan, 0), DLC_ERR_IO, "absent.safetensors");
    pathf(bad, "bad.safetensors");

    /* tampered: each refused naming the key and the value */
    char sizes[64], sizes_needle[96];
    snprintf(sizes, sizeof sizes, "%lld,%lld", (long long)dlc_plan_numel(x.plan, 0),
             (long long)dlc_plan_numel(x.plan, 1) + 1);
    snprintf(sizes_needle, sizeof sizes_needle, "syncer.sizes: fragment 1 holds %lld floats in the file, %lld in the plan",
             (long long)dlc_plan_numel(x.plan, 1) + 1, (long long)dlc_plan_numel(x.plan, 1));
    struct {
        const char *key, *value, *needle;
    } meta[] = {
        {"syncer.format", "2", "syncer.format = \"2\": this build reads layout 1"},
        {"syncer.format", NULL, "syncer.format is missing"},
        {"syncer.epoch", "0", "syncer.epoch = \"0\": entry 0 (value) is not an integer in [1, "},
        {"syncer.epoch", "12x", "syncer.epoch = \"12x\""},
        {"syncer.learners", "99999999999", "syncer.learners"},
        {"syncer.sizes", sizes, sizes_needle},
        {"syncer.versions", "99,0", "syncer.oldest = 0, syncer.versions = 99: expected oldest <= version"},
        {"syncer.versions", "-1,0", "syncer.versions = \"-1,0\": entry 0 (fragment)"},
        {"syncer.oldest", "1,1", "syncer.oldest = 1, syncer.versions = 0"},
        {"syncer.live", "1,1", "syncer.live holds 2 entries, expected 3 (one per learner)"},
        {"syncer.live", "1,2,1", "syncer.live = \"1,2,1\": entry 1 (learner)"},
        {"syncer.live", "1,1,1,", "syncer.live holds 4 entries, expected 3"},
        {"syncer.ever", "1,0,1", "learner 2: syncer.live = 1 but syncer.ever = 0"}, /* entry 1: learner 2 */
        {"syncer.step_time", "0,nan,0", "syncer.step_time = \"0,nan,0\": entry 1 (learner) is not a number"},
        {"syncer.transit", "0,0,-3", "syncer.transit"},
        {"syncer.sched", "0,0", "syncer.sched holds 2 entries"},
        {"syncer.merged", "0,-1,0", "syncer.merged"},
        {"syncer.shard", "0,-2,0", "syncer.shard"},
        {"syncer.sent", "11,11", "syncer.sent = \"11,11\": expected 3 groups of 2 digits"},
        {"syncer.sent", "11,1x,11", "syncer.sent = \"11,1x,11\""},
        {"syncer.round_age", "-2,0", "syncer.round_age"},
        {"syncer.xi_quorum", "inf", "syncer.xi_quorum"},
        {"syncer.model_hash", "0000000000000000", "syncer.model_hash = 0000000000000000 in the file"},
        {"syncer.incarnation", "0,-4,0", "syncer.incarnation = \"0,-4,0\": entry 1 (learner)"},
        {"syncer.inc_open", "0,0", "syncer.inc_open holds 2 entries"},
    };
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) {
        rewrite(path, bad, meta[i].key, meta[i].value, NULL, NULL);
        dlc_syncer *l = dlc_syncer_load(bad, &sp, x.plan, 0);
        int ok = !l && dlc_last_status() == DLC_ERR_FORMAT && strstr(dlc_last_error(), meta[i].needle) &&
                 strstr(dlc_last_error(), bad);
        CHECK(ok);
        if (!ok) fprintf(stderr, "  %s = %s: got \"%s\"\n", meta[i].key, meta[i].value ? meta[i].value : "(none)",
                         l ? "a syncer" : dlc_last_error());
        dlc_syncer_free(l);
    }
    int64_t n0 = dlc_plan_numel(x.plan, 0), shape[2] = {n0, 0};
    dlc_tensor *t = dlc_tensor_zeros(1, shape);
    t->data[3] = NAN;
    rewrite(path, bad, NULL, NULL, "syncer.theta.0", t);
    CHECK_PFAILS(dlc_syncer_load(bad, &sp, x.plan, 0), DLC_ERR_FORMAT, "tensor syncer.theta.0 [3] = nan");
    dlc_tensor_release(t);
    shape[0] = n0 + 1;
    t = dlc_tensor_zeros(1, shape);
    rewrite(path, bad, NULL, NULL, "syncer.momentum.1", t);
    char want[128];
    snprintf(want, sizeof want, "tensor syncer.momentum.1 has shape [%lld] in the file, [%lld] expected",
             (long long)n0 + 1, (long long)dlc_plan_numel(x.plan, 1));
    CHECK_PFAILS(dlc_syncer_load(bad, &sp, x.plan, 0), DLC_ERR_FORMAT, want);
    dlc_tensor_release(t);
    rewrite(path, bad, NULL, NULL, "syncer.theta.1", (dlc_tensor *)(void *)1);
    CHECK_PFAILS(dlc_syncer_load(bad, &sp, x.plan, 0), DLC_ERR_FORMAT, "tensor syncer.theta.1 is missing");
    /* a ring the versions do not promise */
    rewrite(path, bad, "syncer.versions", "2,0", NULL, NULL);
    CHECK_PFAILS(dlc_syncer_load(bad, &sp, x.plan, 0), DLC_ERR_FORMAT, "tensor syncer.ring.0 is missing");
    /* the original still loads */
    dlc_syncer *l = dlc_syncer_load(path, &sp, x.plan, 0);
    CHECK_OK(l);
    dlc_syncer_free(l);

    /* the driver may not use our keys */
    const char *k1[1] = {"syncer.epoch"}, *k2[1] = {"format"}, *v1[1] = {"9"};
    CHECK(dlc_syncer_save(s, bad, 0, 1, k1, v1) == DLC_ERR_ARG && strstr(dlc_last_error(), "'syncer.epoch' is reserved"));
    CHECK(dlc_syncer_save(s, bad, 0, 1, k2, v1) == DLC_ERR_ARG && strstr(dlc_last_error(), "'format' is reserved"));
    CHECK(dlc_syncer_save(s, bad, NAN, 0, NULL, NULL) == DLC_ERR_ARG);
    CHECK(dlc_syncer_save(NULL, bad, 0, 0, NULL, NULL) == DLC_ERR_ARG);
    CHECK(dlc_syncer_set_shard(s, 0, -2) == DLC_ERR_ARG && dlc_syncer_set_shard(s, 3, 0) == DLC_ERR_RANGE);
    dlc_syncer_free(s);
    dlc_plan_free(y.plan);
    dlc_params_free(y.p);
    for (int i = 0; i < 4; i++) dlc_tensor_release(y.t[i]);
    fx_free(&x1);
    fx_free(&x);
}

/* ---- truncated and corrupted files: an error, never a crash ---- */

static void test_fuzz(void) {
    fx x;
    fx_make(&x, 2, 45);
    char path[256], bad[256];
    pathf(path, "fuzz.safetensors");
    pathf(bad, "fuzzed.safetensors");
    dlc_syncer_params sp = params(3);
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    script sc = {.lcg = 9};
    for (int L = 0; L < 3; L++) dlc_syncer_join(s, L, 0), drain(s);
    drain(s);
    run(&sc, &s, 1, x.plan, 3, 1, 30);
    CHECK(dlc_syncer_save(s, path, 8.0, 0, NULL, NULL) == DLC_OK);
    size_t n = 0;
    unsigned char *good = read_bytes(path, &n);
    int refused = 0, loaded = 0, silent = 0;
    for (size_t cut = 0; cut < n; cut++) {
        write_bytes(bad, good, cut);
        dlc_syncer *l = dlc_syncer_load(bad, &sp, x.plan, 8.0);
        if (l) loaded++;
        else refused++, silent += dlc_last_status() >= 0 || !dlc_last_error()[0];
        dlc_syncer_free(l);
    }
    CHECK(refused == (int)n && loaded == 0 && silent == 0); /* every truncation refused */
    unsigned char *buf = malloc(n);
    const unsigned char flips[3] = {0x01, 0x80, 0xff};
    refused = loaded = silent = 0;
    for (size_t i = 0; i < n; i++)
        for (int f = 0; f < 3; f++) {
            memcpy(buf, good, n);
            buf[i] ^= flips[f];
            write_bytes(bad, buf, n);
            dlc_syncer *l = dlc_syncer_load(bad, &sp, x.plan, 8.0);
            if (l) loaded++; /* a flipped mantissa bit, a digit of a counter: still valid */
            else refused++, silent += dlc_last_status() >= 0 || !dlc_last_error()[0];
            dlc_syncer_free(l);
        }
    CHECK(refused > 0 && silent == 0);
    /* the valid file still loads after all that */
    dlc_syncer *l = dlc_syncer_load(path, &sp, x.plan, 8.0);
    CHECK_OK(l);
    dlc_syncer_free(l);
    free(buf);
    free(good);
    dlc_syncer_free(s);
    fx_free(&x);
}

/* A shard (syncer.h, params.owns) of fragments 1 and 3 of 4: it holds no Θ, ring or round
 * of 0 and 2, joins send only its own, a contribution to another's is refused (REJECTED
 * malformed, no resync) and merges nothing, copy_model writes only its own; its
 * checkpoint keeps only its own and loads only as that shard, a whole syncer's file not
 * as a shard (and a shard's not as a whole syncer), each refusal named. */
static void test_shard(void) {
    fx x;
    fx_make(&x, 4, 140);
    const int P = 4;
    uint8_t owns[4] = {0, 1, 0, 1}, other[4] = {1, 0, 1, 0}, none[4] = {0, 0, 0, 0};
    dlc_syncer_params sp = params(2);
    sp.quorum = 1;
    sp.grace = DLC_GRACE_OFF;
    sp.owns = none;
    CHECK_PFAILS(dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p)), DLC_ERR_ARG, "owns no fragment");
    sp.owns = owns;
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    for (int p = 0; p < P; p++) {
        CHECK(dlc_syncer_owns(s, p) == owns[p]);
        CHECK((dlc_syncer_theta(s, p) != NULL) == owns[p] && dlc_syncer_version(s, p) == (owns[p] ? 0 : -1));
    }
    CHECK(dlc_syncer_join(s, 0, 0) == DLC_OK);
    rec r = drain(s);
    CHECK(r.n == 2 && r.a[0].msg.fragment == 1 && r.a[1].msg.fragment == 3 && r.a[0].msg.flags == DLC_MSG_RESYNC);
    /* a contribution to fragment 2 (shard 0's): refused, nothing merged, nobody resynced */
    int64_t n2 = dlc_plan_numel(x.plan, 2), n3 = dlc_plan_numel(x.plan, 3);
    float d[NMAX];
    randv(d, NMAX, 141, 0.1f);
    dlc_msg m = {.type = DLC_MSG_CONTRIBUTION, .learner = 0, .fragment = 2, .version = 0, .steps = 4, .tokens = 40,
                 .codec = DLC_CODEC_F32, .payload = (const uint8_t *)d, .len = (size_t)n2 * sizeof(float)};
    CHECK_SFAILS(dlc_syncer_receive(s, &m, 1), DLC_ERR_FORMAT, "which this shard does not own");
    r = drain(s);
    CHECK(r.n == 1 && r.a[0].type == DLC_SACT_REJECTED && r.a[0].reason == DLC_REJECT_MALFORMED && r.a[0].fragment == 2);
    /* one to fragment 3 merges (K = 1, no grace): version 1 */
    m.fragment = 3, m.len = (size_t)n3 * sizeof(float);
    CHECK(dlc_syncer_receive(s, &m, 2) == DLC_OK);
    r = drain(s);
    CHECK(dlc_syncer_version(s, 3) == 1);
    /* copy_model writes only the shard's fragments */
    float arena[256];
    for (int i = 0; i < 256; i++) arena[i] = 99.0f;
    CHECK(dlc_syncer_copy_model(s, arena) == DLC_OK);
    float frag[NMAX];
    for (int p = 0; p < P; p++) {
        gather(&x, p, arena, frag);
        int untouched = 1;
        for (int64_t i = 0; i < dlc_plan_numel(x.plan, p); i++) untouched &= frag[i] == 99.0f;
        CHECK(untouched == !owns[p]);
    }
    /* its checkpoint: its own fragments only, loaded back as the same shard, bit for bit */
    char path[256], whole[256];
    CHECK(dlc_syncer_save(s, pathf(path, "shard.safetensors"), 3, 0, NULL, NULL) == DLC_OK);
    dlc_safetensors *st = dlc_safetensors_open(path);
    CHECK_OK(st);
    if (st) {
        CHECK(strcmp(dlc_safetensors_meta(st, "syncer.owns"), "0101") == 0);
        CHECK(dlc_safetensors_shape(st, "syncer.theta.0", NULL) < 0 && dlc_safetensors_shape(st, "syncer.theta.3", NULL) >= 0);
        dlc_safetensors_close(st);
    }
    dlc_syncer *t = dlc_syncer_load(path, &sp, x.plan, 3);
    CHECK_OK(t);
    if (t) {
        CHECK(same_theta(s, t, x.plan) && dlc_syncer_version(t, 3) == 1 && dlc_syncer_epoch(t) == 2);
        dlc_syncer_free(t);
    }
    sp.owns = other;
    CHECK_PFAILS(dlc_syncer_load(path, &sp, x.plan, 3), DLC_ERR_FORMAT, "another shard's checkpoint");
    sp.owns = NULL;
    CHECK_PFAILS(dlc_syncer_load(path, &sp, x.plan, 3), DLC_ERR_FORMAT, "fragment 0 is not owned by the syncer of the file");
    /* a whole syncer's checkpoint does not load as a shard */
    dlc_syncer *w = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(w);
    if (w) {
        CHECK(dlc_syncer_save(w, pathf(whole, "whole.safetensors"), 0, 0, NULL, NULL) == DLC_OK);
        sp.owns = owns;
        CHECK_PFAILS(dlc_syncer_load(whole, &sp, x.plan, 0), DLC_ERR_FORMAT, "fragment 0 is owned by the syncer of the file, not by this one");
        dlc_syncer_free(w);
    }
    dlc_syncer_free(s);
    fx_free(&x);
}

/* Replication (syncer.h): a standby made as its primary, fed the replica of every merge,
 * holds the primary's state bit for bit (Θ and versions of every fragment, each learner's
 * merged contributions and steps); after a failover a contribution from an older base in
 * the ring merges on it exactly as on the primary (so the ring and the momentum are the
 * primary's too).  A repeated replica, another fragment's size, a fragment it does not own
 * and data parallel are refused, changing nothing. */
static void test_standby(void) {
    fx x;
    fx_make(&x, 3, 150);
    dlc_syncer_params sp = params(2);
    sp.quorum = 1;
    sp.grace = DLC_GRACE_OFF;
    dlc_syncer *pri = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    dlc_syncer *sb = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(pri);
    CHECK_OK(sb);
    if (!pri || !sb) return;
    for (int m = 0; m < 2; m++) {
        CHECK(dlc_syncer_join(pri, m, 0) == DLC_OK);
        drain(pri);
    }
    script sc = {.lcg = 11};
    int merges = 0, same = 1;
    dlc_replica last = {0};
    for (int i = 0; i < 40; i++) {
        int L = i % 2, p = (i / 2) % 3;
        dlc_msg m = contrib_msg(&sc, pri, x.plan, L, p, i);
        CHECK(dlc_syncer_receive(pri, &m, 0.25 * i) == DLC_OK);
        rec r = drain(pri);
        for (int a = 0; a < r.n; a++) {
            if (r.a[a].type != DLC_SACT_MERGED) continue;
            dlc_replica rp;
            CHECK(dlc_syncer_replica(pri, r.a[a].merge.fragment, &rp) == DLC_OK);
            CHECK(rp.count == r.a[a].merge.count && rp.version == r.a[a].merge.version);
            CHECK(dlc_syncer_replicate(sb, &rp, 0.25 * i) == DLC_OK);
            last = rp;
            merges++;
        }
        same &= same_theta(pri, sb, x.plan);
        for (int L2 = 0; L2 < 2; L2++)
            same &= dlc_syncer_merged(pri, L2) == dlc_syncer_merged(sb, L2) &&
                    same_bits(dlc_syncer_merged_steps(pri, L2), dlc_syncer_merged_steps(sb, L2));
    }
    CHECK(merges >= 30 && same);
    /* the same replica again: refused, nothing changed */
    CHECK_SFAILS(dlc_syncer_replicate(sb, &last, 11), DLC_ERR_STATE, "a replica was lost or repeated");
    dlc_replica wrong = last;
    wrong.n = last.n + 1;
    CHECK_SFAILS(dlc_syncer_replicate(sb, &wrong, 11), DLC_ERR_ARG, "floats");
    CHECK(same_theta(pri, sb, x.plan));
    /* the failover: the standby serves; a contribution from two versions back merges on it
     * as on the primary, bit for bit */
    for (int m = 0; m < 2; m++) {
        CHECK(dlc_syncer_join(sb, m, 20) == DLC_OK);
        drain(sb);
    }
    int64_t v = dlc_syncer_version(pri, 1), n1 = dlc_plan_numel(x.plan, 1);
    float d[NMAX];
    randv(d, n1, 777, 0.05f);
    dlc_msg m = {.type = DLC_MSG_CONTRIBUTION, .learner = 1, .fragment = 1, .version = v - 2, .steps = 5, .tokens = 80,
                 .codec = DLC_CODEC_F32, .payload = (const uint8_t *)d, .len = (size_t)n1 * sizeof(float)};
    CHECK(v >= 2);
    CHECK(dlc_syncer_receive(pri, &m, 21) == DLC_OK);
    drain(pri);
    CHECK(dlc_syncer_receive(sb, &m, 21) == DLC_OK);
    drain(sb);
    CHECK(dlc_syncer_version(sb, 1) == v + 1 && same_theta(pri, sb, x.plan));
    dlc_syncer_free(pri);
    dlc_syncer_free(sb);
    /* a shard's standby takes only its fragments; dp is not replicated */
    uint8_t owns[3] = {1, 0, 1};
    sp.owns = owns;
    dlc_syncer *shard = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(shard);
    dlc_replica other = {.fragment = 1, .version = 1, .theta = d, .n = n1};
    float mom[NMAX] = {0};
    other.momentum = mom;
    CHECK_SFAILS(dlc_syncer_replicate(shard, &other, 0), DLC_ERR_ARG, "fragment 1: expected one this syncer owns");
    CHECK_SFAILS(dlc_syncer_replica(shard, 0, &other), DLC_ERR_STATE, "its latest round merged nothing");
    dlc_syncer_free(shard);
    fx_free(&x);
}

/* The primary of a standby (dlc_syncer_set_replicated): a merge goes to no learner, and
 * is not reported, before the standby acknowledged it; so whenever the primary is lost,
 * every version any learner holds is one the standby holds.  Acknowledgements come one
 * event late here, so rounds, joins and resyncs happen while merges wait: a round that
 * reaches its quorum meanwhile closes at the acknowledgement, and a learner that joins
 * gets the waiting fragment once, as a resync, with it.  Then: a wrong acknowledgement is
 * refused, set_replicated(0) releases what waits, a standby attached late catches up from
 * whole replicas, and a standby that takes over merges what learners stamped with its
 * primary's epoch (a round in flight) and fences any other epoch. */
static void test_replicated(void) {
    fx x;
    fx_make(&x, 3, 150);
    enum { M = 3, P = 3 };
    dlc_syncer_params sp = params(M);
    sp.quorum = 1;
    sp.grace = DLC_GRACE_OFF;
    dlc_syncer *pri = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    dlc_syncer *sb = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(pri);
    CHECK_OK(sb);
    if (!pri || !sb) return;
    CHECK(dlc_syncer_set_replicated(pri, 1, 0) == DLC_OK && dlc_syncer_replicated(pri));
    for (int m = 0; m < 2; m++) {
        CHECK(dlc_syncer_join(pri, m, 0) == DLC_OK);
        drain(pri);
    }
    script sc = {.lcg = 5};
    int64_t got[M][P]; /* the version each learner last got of each fragment, -1 none */
    for (int m = 0; m < M; m++)
        for (int p = 0; p < P; p++) got[m][p] = m < 2 ? 0 : -1;
    int waiting[P] = {0}, ok = 1, replicas = 0, merged = 0, joined_resync = 0, closed_at_ack = 0;
    /* every drain: the sends carry versions the standby holds already; then the
     * REPLICATEs are replicated into it (their acknowledgements: at the next event) */
    #define DRAIN_CHECK(tag)                                                                          \
        do {                                                                                          \
            rec r = drain(pri);                                                                       \
            for (int a = 0; a < r.n; a++) {                                                           \
                const dlc_syncer_action *ac = &r.a[a];                                                \
                if (ac->type == DLC_SACT_SEND && ac->msg.type == DLC_MSG_FRAGMENT) {                  \
                    ok &= ac->msg.version <= dlc_syncer_version(sb, ac->msg.fragment);                \
                    got[ac->msg.learner][ac->msg.fragment] = ac->msg.version;                         \
                    if (ac->msg.learner == 2 && (ac->msg.flags & DLC_MSG_RESYNC) && tag) joined_resync++; \
                } else if (ac->type == DLC_SACT_MERGED) {                                             \
                    ok &= ac->merge.version <= dlc_syncer_version(sb, ac->merge.fragment);            \
                    merged++;                                                                         \
                } else if (ac->type == DLC_SACT_REPLICATE) {                                          \
                    CHECK(dlc_syncer_awaiting(pri, ac->fragment) == ac->merge.version);               \
                    waiting[ac->fragment] = 1;                                                        \
                    replicas++;                                                                       \
                }                                                                                     \
            }                                                                                         \
        } while (0)
    for (int i = 0; i < 60; i++) {
        double t = 0.25 * i;
        for (int p = 0; p < P; p++) { /* last event's merges acknowledged */
            if (!waiting[p]) continue;
            waiting[p] = 0;
            int64_t r0 = replicas;
            dlc_replica rp; /* (the replica is read at the ack: it stays valid while it waits) */
            CHECK(dlc_syncer_replica(pri, p, &rp) == DLC_OK && !rp.whole);
            CHECK(rp.version == dlc_syncer_awaiting(pri, p) && dlc_syncer_replicate(sb, &rp, t) == DLC_OK);
            CHECK(dlc_syncer_replica_acked(pri, p, dlc_syncer_version(sb, p), t) == DLC_OK);
            DRAIN_CHECK(1);
            closed_at_ack += replicas > r0;
        }
        int L = i % (i < 10 ? 2 : 3), p = (i / 2) % P;
        dlc_msg m = contrib_msg(&sc, pri, x.plan, L, p, i);
        if (m.version > got[L][p]) m.version = got[L][p]; /* from a base it holds */
        CHECK(dlc_syncer_receive(pri, &m, t) == DLC_OK);
        DRAIN_CHECK(0);
        if (i % 5 == 4) { /* another to the fragment that waits: its round closes at the ack */
            int L2 = (L + 1) % 2;
            m = contrib_msg(&sc, pri, x.plan, L2, p, 1000 + i);
            if (m.version > got[L2][p]) m.version = got[L2][p];
            CHECK(dlc_syncer_receive(pri, &m, t) == DLC_OK);
            DRAIN_CHECK(0);
        }
        if (i == 9) { /* learner 3 joins while a merge waits */
            CHECK(waiting[0] + waiting[1] + waiting[2] > 0);
            CHECK(dlc_syncer_join(pri, 2, t) == DLC_OK);
            DRAIN_CHECK(1);
        }
    }
    CHECK(ok && replicas >= 30 && merged + 3 >= replicas && closed_at_ack > 0);
    CHECK(joined_resync >= 1);
    for (int p = 0; p < P; p++) {
        if (!waiting[p]) continue;
        /* a wrong acknowledgement changes nothing */
        CHECK_SFAILS(dlc_syncer_replica_acked(pri, p, dlc_syncer_version(sb, p) + 5, 20), DLC_ERR_STATE,
                     "waits for its standby");
        CHECK(dlc_syncer_awaiting(pri, p) == dlc_syncer_version(sb, p) + 1);
    }
    for (int p = 0; p < P; p++) { /* what waits reaches the standby; it is not acknowledged */
        dlc_replica rp;
        if (waiting[p] && dlc_syncer_replica(pri, p, &rp) == DLC_OK) CHECK(dlc_syncer_replicate(sb, &rp, 20) == DLC_OK);
    }
    CHECK(same_theta(pri, sb, x.plan));
    /* the standby lost: what waits goes now (and a round it held back closes, unreplicated) */
    CHECK(dlc_syncer_set_replicated(pri, 0, 20) == DLC_OK);
    DRAIN_CHECK(1);
    for (int p = 0; p < P; p++) {
        CHECK(dlc_syncer_awaiting(pri, p) == -1);
        for (int m = 0; m < M; m++) CHECK(got[m][p] == dlc_syncer_version(pri, p));
    }
    /* a standby attached late: whole replicas bring it to the primary's state */
    dlc_syncer *late = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(late);
    for (int p = 0; late && p < P; p++) {
        dlc_replica rp;
        CHECK(dlc_syncer_replica_of(pri, p, 1, &rp) == DLC_OK && rp.whole && rp.count == 0);
        CHECK(dlc_syncer_replicate(late, &rp, 21) == DLC_OK);
    }
    CHECK(late && same_theta(pri, late, x.plan));
    dlc_syncer_free(late);
    /* the failover: the standby stamps a later epoch, merges a contribution stamped with
     * the primary's (a round in flight) and fences another */
    int64_t e = dlc_syncer_epoch(pri);
    CHECK_SFAILS(dlc_syncer_take_over(sb, e, e, 22), DLC_ERR_ARG, "expected an epoch above");
    CHECK(dlc_syncer_take_over(sb, e + 1, e, 22) == DLC_OK && dlc_syncer_epoch(sb) == e + 1);
    CHECK(dlc_syncer_join(sb, 0, 22) == DLC_OK);
    drain(sb);
    dlc_msg m = contrib_msg(&sc, sb, x.plan, 0, 1, 99);
    m.epoch = e;
    int64_t v1 = dlc_syncer_version(sb, 1);
    CHECK(dlc_syncer_receive(sb, &m, 23) == DLC_OK);
    drain(sb);
    CHECK(dlc_syncer_version(sb, 1) == v1 + 1);
    m = contrib_msg(&sc, sb, x.plan, 0, 2, 100);
    m.epoch = e + 7;
    CHECK_SFAILS(dlc_syncer_receive(sb, &m, 24), DLC_ERR_FORMAT, "stamped epoch");
    drain(sb);
    #undef DRAIN_CHECK
    dlc_syncer_free(pri);
    dlc_syncer_free(sb);
    fx_free(&x);
}

int main(void) {
    /* tmpfs when there is one: the writer fsyncs every save, which a busy disk makes slow */
    snprintf(dir, sizeof dir, "/dev/shm/dlc_syncer_state_XXXXXX");
    if (!mkdtemp(dir)) snprintf(dir, sizeof dir, "/tmp/dlc_syncer_state_XXXXXX");
    if (dir[1] == 't' && !mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_continue_bit_identical();
    test_ring_anchors_after_load();
    test_epochs_and_blocking();
    test_fencing_after_load();
    test_killed_save();
    test_refused();
    test_fuzz();
    test_shard();
    test_standby();
    test_replicated();
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    rmdir(dir);
    return check_done("test_syncer_state");
}
