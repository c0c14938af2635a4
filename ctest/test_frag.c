/* test_frag.c - fragment plans on the tensors of a small GPT: every float in exactly one
 * fragment, balance bounds, the strided rule, sequential contiguity, the layout hashes
 * (with a golden value) and every error. */
#include <stdint.h>
#include "check.h"

/* ---- a model: names and shapes packed into an arena ---- */

typedef struct model {
    dlc_params *p;
    int n;
    dlc_tensor *t[128];
} model;

typedef struct spec {
    const char *name;
    int ndim;
    int64_t shape[2];
} spec;

static model model_make(int n, const spec *s) {
    model m = {.n = n};
    const char *names[128];
    for (int i = 0; i < n; i++) {
        m.t[i] = dlc_tensor_zeros(s[i].ndim, s[i].shape);
        names[i] = s[i].name;
    }
    m.p = dlc_params_new(n, names, m.t);
    return m;
}

static void model_free(model *m) {
    dlc_params_free(m->p);
    for (int i = 0; i < m->n; i++) dlc_tensor_release(m->t[i]);
}

/* GPT-2-like: wte [V,C], wpe [T,C], per block ln1, attn.qkv, attn.proj, ln2, mlp.fc,
 * mlp.proj (weight and bias each), lnf, head [V,C].  fc_rows changes one shape. */
static char gpt_names[128][48];
static model gpt(int L, int64_t V, int64_t C, int64_t T, int64_t fc_rows) {
    spec s[128];
    int n = 0;
#define ADD(nm, nd, a, b) (snprintf(gpt_names[n], sizeof gpt_names[n], "%s", nm), \
                           s[n] = (spec){gpt_names[n], nd, {a, b}}, n++)
    ADD("wte.weight", 2, V, C);
    ADD("wpe.weight", 2, T, C);
    for (int i = 0; i < L; i++) {
        static const char *const part[] = {"ln1", "attn.qkv", "attn.proj", "ln2", "mlp.fc", "mlp.proj"};
        int64_t rows[] = {C, 3 * C, C, C, fc_rows, C}, cols[] = {0, C, C, 0, C, 4 * C};
        for (int k = 0; k < 6; k++) {
            char nm[48];
            snprintf(nm, sizeof nm, "blocks.%d.%s.weight", i, part[k]);
            if (cols[k]) ADD(nm, 2, rows[k], cols[k]);
            else ADD(nm, 1, rows[k], 0);
            snprintf(nm, sizeof nm, "blocks.%d.%s.bias", i, part[k]);
            ADD(nm, 1, rows[k], 0);
        }
    }
    ADD("lnf.weight", 1, C, 0);
    ADD("lnf.bias", 1, C, 0);
    ADD("head.weight", 2, V, C);
#undef ADD
    return model_make(n, s);
}

static dlc_plan *plan_of(const model *m, dlc_plan_kind kind, int P, int split) {
    dlc_plan_params pp = dlc_plan_default_params();
    pp.kind = kind;
    pp.fragments = P;
    pp.split_rows = split;
    return dlc_plan_new(m->p, &pp);
}

/* Every float of every tensor in exactly one view, padding in none; each view a run of
 * whole rows inside its tensor, named after it; views in arena order; sums agree. */
static int partition_ok(const model *m, const dlc_plan *plan) {
    int64_t size = dlc_params_size(m->p);
    unsigned char *seen = calloc((size_t)size, 1);
    int bad = 0;
    for (int f = 0; f < dlc_plan_count(plan); f++) {
        int nv;
        const dlc_frag_view *v = dlc_plan_views(plan, f, &nv);
        int64_t sum = 0, prev_end = -1;
        bad += nv < 1;
        for (int j = 0; j < nv; j++) {
            const dlc_tensor *t = dlc_params_tensor(m->p, v[j].tensor);
            int64_t off = dlc_params_offset(m->p, v[j].tensor);
            int64_t rows = t->ndim ? t->shape[0] : 1, rowsz = rows ? t->numel / rows : 0;
            bad += strcmp(v[j].name, dlc_params_name(m->p, v[j].tensor)) != 0;
            bad += v[j].offset != off + v[j].row0 * rowsz || v[j].numel != v[j].rows * rowsz;
            bad += v[j].row0 < 0 || v[j].row0 + v[j].rows > rows;
            bad += v[j].offset < prev_end;
            prev_end = v[j].offset + v[j].numel;
            for (int64_t k = v[j].offset; k < v[j].offset + v[j].numel; k++) seen[k]++;
            sum += v[j].numel;
        }
        bad += sum != dlc_plan_numel(plan, f) || 4 * sum != dlc_plan_bytes(plan, f);
    }
    int64_t inside = 0;
    for (int i = 0; i < m->n; i++) {
        int64_t off = dlc_params_offset(m->p, i), ne = dlc_params_tensor(m->p, i)->numel;
        for (int64_t k = off; k < off + ne; k++) {
            bad += seen[k] != 1;
            seen[k] = 0;
        }
        inside += ne;
    }
    for (int64_t k = 0; k < size; k++) bad += seen[k] != 0; /* padding */
    bad += inside != dlc_params_numel(m->p);
    free(seen);
    return bad == 0;
}

static void minmax(const dlc_plan *plan, int64_t *mn, int64_t *mx) {
    *mn = INT64_MAX;
    *mx = 0;
    for (int f = 0; f < dlc_plan_count(plan); f++) {
        int64_t b = dlc_plan_bytes(plan, f);
        *mn = b < *mn ? b : *mn;
        *mx = b > *mx ? b : *mx;
    }
}

/* ---- tests ---- */

static void test_names(void) {
    for (int k = 0; k < DLC_PLAN_KIND_COUNT; k++) {
        dlc_plan_kind got = DLC_PLAN_KIND_COUNT;
        CHECK(dlc_plan_kind_parse(dlc_plan_kind_name((dlc_plan_kind)k), &got) == DLC_OK && (int)got == k);
    }
    CHECK(dlc_plan_kind_name(DLC_PLAN_KIND_COUNT) == NULL);
    CHECK(dlc_plan_kind_parse("blocks", NULL) == DLC_ERR_ARG);
    CHECK(strstr(dlc_last_error(), "plan = \"blocks\"") && strstr(dlc_last_error(), "balanced, strided or sequential"));
    CHECK(dlc_plan_kind_parse(NULL, NULL) == DLC_ERR_ARG);
}

static void test_partition(void) {
    model m = gpt(4, 256, 32, 64, 128);
    CHECK_OK(m.p);
    int Ps[] = {1, 2, 3, 4, 5, 7, 16, 24};
    for (int kind = 0; kind < DLC_PLAN_KIND_COUNT; kind++)
        for (int split = 0; split <= 1; split++)
            for (size_t q = 0; q < sizeof Ps / sizeof Ps[0]; q++) {
                dlc_plan *plan = plan_of(&m, (dlc_plan_kind)kind, Ps[q], split);
                if (kind == DLC_PLAN_STRIDED && Ps[q] > 8) { /* 4 layers + 4 unlayered: too few */
                    CHECK(!plan && strstr(dlc_last_error(), "strided"));
                    continue;
                }
                CHECK_OK(plan);
                if (!plan) continue;
                CHECK(dlc_plan_count(plan) == Ps[q] && dlc_plan_tensors(plan) == m.n);
                if (!partition_ok(&m, plan))
                    fprintf(stderr, "partition broken: %s P=%d split=%d\n",
                            dlc_plan_kind_name((dlc_plan_kind)kind), Ps[q], split), check_fail++;
                else check_pass++;
                dlc_plan_free(plan);
            }
    /* NULL plan params = defaults: one fragment with every tensor whole, in order */
    dlc_plan *one = dlc_plan_new(m.p, NULL);
    CHECK_OK(one);
    int nv;
    const dlc_frag_view *v = dlc_plan_views(one, 0, &nv);
    CHECK(dlc_plan_count(one) == 1 && nv == m.n && v[0].tensor == 0 && v[nv - 1].tensor == m.n - 1);
    CHECK(dlc_plan_numel(one, 0) == dlc_params_numel(m.p));
    dlc_plan_free(one);
    /* row splitting really splits: one fragment per row piece of a single matrix */
    spec s1[] = {{"w", 2, {10, 3}}};
    model w = model_make(1, s1);
    dlc_plan *r = plan_of(&w, DLC_PLAN_BALANCED, 3, 1);
    CHECK_OK(r);
    if (r) {
        CHECK(partition_ok(&w, r));
        CHECK(dlc_plan_fragment_of(r, 0) == -1);
        for (int f = 0; f < 3; f++) CHECK(dlc_plan_numel(r, f) >= 9 && dlc_plan_numel(r, f) <= 12);
    }
    dlc_plan_free(r);
    model_free(&w);
    model_free(&m);
}

/* Greedy placement into the lightest fragment: when the heaviest fragment got its last
 * piece x it was the lightest, so max - x <= min then <= min at the end:
 * max - min <= the largest piece.  Whole tensors: the largest tensor; split: a piece
 * has at most ceil(rows / k) rows with k = ceil(numel / cap), so <= cap + one row. */
static void test_balance(void) {
    model m = gpt(4, 256, 32, 64, 128);
    int64_t total = dlc_params_numel(m.p), largest = 0, largest_split = 0;
    for (int P = 2; P <= 8; P++) {
        int64_t cap = (total + P - 1) / P;
        largest = largest_split = 0;
        for (int i = 0; i < m.n; i++) {
            const dlc_tensor *t = dlc_params_tensor(m.p, i);
            int64_t rowsz = t->ndim ? t->numel / t->shape[0] : t->numel;
            int64_t piece = t->numel > cap && t->ndim ? cap + rowsz : t->numel;
            largest = t->numel > largest ? t->numel : largest;
            largest_split = piece > largest_split ? piece : largest_split;
        }
        dlc_plan *b = plan_of(&m, DLC_PLAN_BALANCED, P, 0), *bs = plan_of(&m, DLC_PLAN_BALANCED, P, 1);
        dlc_plan *s = plan_of(&m, DLC_PLAN_SEQUENTIAL, P, 0);
        CHECK_OK(b);
        CHECK_OK(bs);
        CHECK_OK(s);
        int64_t bmin, bmax, smin, smax, sbmin, sbmax;
        minmax(b, &bmin, &bmax);
        minmax(bs, &sbmin, &sbmax);
        minmax(s, &smin, &smax);
        CHECK(bmax - bmin <= 4 * largest);
        CHECK(sbmax - sbmin <= 4 * largest_split);
        CHECK(bmax <= smax);              /* balanced never worse than sequential here */
        CHECK(sbmax <= bmax);             /* splitting never hurts the peak */
        CHECK(4 * total <= (int64_t)P * bmax); /* sanity: the peak is at least the mean */
        if (P == 4) {
            CHECK(bmax < smax); /* strictly better on this model */
            /* 4 fragments of a 69,312-float model, largest tensor 8192: within 25% */
            CHECK((double)bmax / (double)bmin <= 1.25);
            CHECK((double)sbmax / (double)sbmin <= 1.25);
        }
        dlc_plan_free(b);
        dlc_plan_free(bs);
        dlc_plan_free(s);
    }
    model_free(&m);
}

static void test_strided(void) {
    model m = gpt(6, 256, 32, 64, 128);
    for (int split = 0; split <= 1; split++)
        for (int P = 1; P <= 6; P++) {
            dlc_plan *plan = plan_of(&m, DLC_PLAN_STRIDED, P, split);
            CHECK_OK(plan);
            if (!plan) continue;
            int bad = 0;
            for (int i = 0; i < m.n; i++) {
                int L;
                if (sscanf(dlc_params_name(m.p, i), "blocks.%d.", &L) == 1)
                    bad += dlc_plan_fragment_of(plan, i) != L % P;
            }
            CHECK(bad == 0);
            CHECK(partition_ok(&m, plan));
            dlc_plan_free(plan);
        }
    /* unlayered tensors, largest first into the lightest: with P = 2 and 6 equal blocks,
     * wte (tie, lowest index) -> 0, head -> 1, wpe -> 0, then lnf.weight -> 1 ... */
    dlc_plan *plan = plan_of(&m, DLC_PLAN_STRIDED, 2, 0);
    CHECK(dlc_plan_fragment_of(plan, dlc_params_find(m.p, "wte.weight")) == 0);
    CHECK(dlc_plan_fragment_of(plan, dlc_params_find(m.p, "head.weight")) == 1);
    CHECK(dlc_plan_fragment_of(plan, dlc_params_find(m.p, "wpe.weight")) == 0);
    dlc_plan_free(plan);
    /* P = 12 > 6 layers: fragments 6..11 hold only the 4 unlayered tensors, so it needs
     * split_rows, which cuts wte and head (8192 > ceil(94720 / 12)); blocks stay whole */
    CHECK_PFAILS(plan_of(&m, DLC_PLAN_STRIDED, 12, 0), DLC_ERR_ARG, "leaves fragment");
    plan = plan_of(&m, DLC_PLAN_STRIDED, 12, 1);
    CHECK_OK(plan);
    if (plan) CHECK(partition_ok(&m, plan));
    CHECK(dlc_plan_fragment_of(plan, dlc_params_find(m.p, "wte.weight")) == -1);
    CHECK(dlc_plan_fragment_of(plan, dlc_params_find(m.p, "blocks.5.mlp.fc.weight")) == 5);
    dlc_plan_free(plan);
    model_free(&m);
}

static void test_sequential(void) {
    model m = gpt(4, 256, 32, 64, 128);
    for (int split = 0; split <= 1; split++)
        for (int P = 1; P <= 12; P++) {
            dlc_plan *plan = plan_of(&m, DLC_PLAN_SEQUENTIAL, P, split);
            CHECK_OK(plan);
            if (!plan) continue;
            /* walking fragments in order walks the arena in order */
            int64_t prev = -1;
            int bad = 0;
            for (int f = 0; f < P; f++) {
                int nv;
                const dlc_frag_view *v = dlc_plan_views(plan, f, &nv);
                for (int j = 0; j < nv; j++) {
                    bad += v[j].offset < prev;
                    prev = v[j].offset + v[j].numel;
                }
            }
            CHECK(bad == 0);
            CHECK(partition_ok(&m, plan));
            dlc_plan_free(plan);
        }
    model_free(&m);
}

/* FNV-1a 64 of the byte stream in docs/fragments.md, for the layout {"a" [2,3],
 * "b.0.w" [5]} (offsets 0 and 16, arena 32), balanced, P = 2: fragment 0 = {a},
 * fragment 1 = {b.0.w}.  Computed independently (Python, from the document). */
#define GOLDEN_MODEL 0xc1a94072485ef353ULL
#define GOLDEN_PLAN 0x3577cf3386840948ULL
/* Each tensor's own hash (a HELLO's "lt"): FNV-1a 64 of its part of the stream under the
 * tag "dlc.tensor.v1", folded to 32 bits (h ^ h >> 32); same layout, same source. */
#define GOLDEN_TENSOR_A 0xf05cc334u
#define GOLDEN_TENSOR_B 0xc318b6c3u

static void test_hash(void) {
    model a = gpt(2, 64, 16, 32, 64), b = gpt(2, 64, 16, 32, 64);
    model shape = gpt(2, 64, 16, 32, 48);
    dlc_plan *pa = plan_of(&a, DLC_PLAN_BALANCED, 3, 0), *pb = plan_of(&b, DLC_PLAN_BALANCED, 3, 0);
    CHECK(dlc_plan_hash(pa) == dlc_plan_hash(pb) && dlc_plan_model_hash(pa) == dlc_plan_model_hash(pb));
    CHECK(dlc_plan_model_hash(pa) == dlc_frag_model_hash(a.p));
    CHECK(dlc_frag_model_hash(a.p) != dlc_frag_model_hash(shape.p));
    dlc_plan *ps = plan_of(&shape, DLC_PLAN_BALANCED, 3, 0);
    CHECK(dlc_plan_hash(ps) != dlc_plan_hash(pa));
    /* the plan changes, the model does not */
    dlc_plan *seq = plan_of(&a, DLC_PLAN_SEQUENTIAL, 3, 0), *p4 = plan_of(&a, DLC_PLAN_BALANCED, 4, 0);
    CHECK(dlc_plan_model_hash(seq) == dlc_plan_model_hash(pa) && dlc_plan_hash(seq) != dlc_plan_hash(pa));
    CHECK(dlc_plan_hash(p4) != dlc_plan_hash(pa));
    dlc_plan_free(pa);
    dlc_plan_free(pb);
    dlc_plan_free(ps);
    dlc_plan_free(seq);
    dlc_plan_free(p4);
    /* a renamed tensor */
    spec s1[] = {{"a", 2, {2, 3}}, {"b.0.w", 1, {5}}}, s2[] = {{"a", 2, {2, 3}}, {"b.0.v", 1, {5}}};
    spec s3[] = {{"a", 2, {3, 2}}, {"b.0.w", 1, {5}}};
    model g = model_make(2, s1), r = model_make(2, s2), t = model_make(2, s3);
    CHECK(dlc_frag_model_hash(g.p) != dlc_frag_model_hash(r.p));
    CHECK(dlc_frag_model_hash(g.p) != dlc_frag_model_hash(t.p)); /* same numel, other shape */
    dlc_plan *gp = plan_of(&g, DLC_PLAN_BALANCED, 2, 0);
    int nv0, nv1;
    const dlc_frag_view *v0 = dlc_plan_views(gp, 0, &nv0), *v1 = dlc_plan_views(gp, 1, &nv1);
    CHECK(nv0 == 1 && nv1 == 1 && v0[0].tensor == 0 && v1[0].tensor == 1 && v1[0].offset == 16);
    CHECK(dlc_params_size(g.p) == 32);
    CHECK(dlc_frag_model_hash(g.p) == GOLDEN_MODEL);
    CHECK(dlc_plan_hash(gp) == GOLDEN_PLAN);
    CHECK(dlc_plan_tensor_hash(gp, 0) == GOLDEN_TENSOR_A && dlc_plan_tensor_hash(gp, 1) == GOLDEN_TENSOR_B);
    dlc_plan *rp = plan_of(&r, DLC_PLAN_BALANCED, 2, 0), *tp = plan_of(&t, DLC_PLAN_BALANCED, 2, 0);
    CHECK(dlc_plan_tensor_hash(rp, 0) == GOLDEN_TENSOR_A && dlc_plan_tensor_hash(rp, 1) != GOLDEN_TENSOR_B);
    CHECK(dlc_plan_tensor_hash(tp, 0) != GOLDEN_TENSOR_A && dlc_plan_tensor_hash(tp, 1) == GOLDEN_TENSOR_B);
    CHECK(strcmp(dlc_plan_tensor_desc(tp, 0), "'a' [3, 2]") == 0 &&
          strcmp(dlc_plan_tensor_desc(rp, 1), "'b.0.v' [5]") == 0);
    dlc_plan_free(rp);
    dlc_plan_free(tp);
    dlc_plan_free(gp);
    model_free(&g);
    model_free(&r);
    model_free(&t);
    model_free(&a);
    model_free(&b);
    model_free(&shape);
}

static void test_errors(void) {
    model m = gpt(2, 64, 16, 32, 64); /* 2*12 + 5 = 29 tensors */
    CHECK_PFAILS(plan_of(&m, DLC_PLAN_BALANCED, 0, 0), DLC_ERR_ARG, "fragments = 0: expected at least 1");
    CHECK_PFAILS(plan_of(&m, DLC_PLAN_BALANCED, -3, 1), DLC_ERR_ARG, "fragments = -3");
    CHECK_PFAILS(plan_of(&m, DLC_PLAN_SEQUENTIAL, 30, 0), DLC_ERR_ARG,
                 "fragments = 30 but the model has 29 tensors");
    CHECK(strstr(dlc_last_error(), "split_rows") && strstr(dlc_last_error(), "fragments <= 29"));
    CHECK_PFAILS(plan_of(&m, (dlc_plan_kind)7, 2, 0), DLC_ERR_ARG, "kind = 7: unknown plan");
    CHECK_PFAILS(plan_of(&m, DLC_PLAN_KIND_COUNT, 2, 0), DLC_ERR_ARG, "unknown plan");
    dlc_plan_params pp = dlc_plan_default_params();
    CHECK_PFAILS(dlc_plan_new(NULL, &pp), DLC_ERR_ARG, "params is NULL");
    CHECK(dlc_frag_model_hash(NULL) == 0 && strstr(dlc_last_error(), "params is NULL"));
    /* 30 fragments are fine once rows may be split */
    dlc_plan *ok = plan_of(&m, DLC_PLAN_BALANCED, 30, 1);
    CHECK_OK(ok);
    if (ok) CHECK(partition_ok(&m, ok));
    CHECK_PFAILS(dlc_plan_views(ok, 30, NULL), DLC_ERR_RANGE, "fragment 30: expected 0..29");
    CHECK_PFAILS(dlc_plan_views(ok, -1, NULL), DLC_ERR_RANGE, "fragment -1");
    CHECK(dlc_plan_numel(ok, 30) == -1 && dlc_plan_bytes(ok, -1) == -1 && dlc_plan_fragment_of(ok, 99) == -1);
    dlc_plan_free(ok);
    /* too few rows even with splitting */
    spec s1[] = {{"w", 2, {2, 5}}, {"s", 0, {0, 0}}};
    model w = model_make(2, s1);
    CHECK_PFAILS(plan_of(&w, DLC_PLAN_BALANCED, 4, 1), DLC_ERR_ARG,
                 "fragments = 4 but even with row-splitting the model (2 tensors) cuts into only 3 pieces");
    model_free(&w);
    /* strided with a layer gap: fragment 1 gets nothing */
    spec s2[] = {{"blocks.0.w", 1, {4}}, {"blocks.0.b", 1, {4}}, {"blocks.2.w", 1, {4}}};
    model gap = model_make(3, s2);
    CHECK_PFAILS(plan_of(&gap, DLC_PLAN_STRIDED, 3, 0), DLC_ERR_ARG,
                 "strided with fragments = 3 leaves fragment 1 empty");
    CHECK(strstr(dlc_last_error(), "plan = balanced"));
    dlc_plan *bal = plan_of(&gap, DLC_PLAN_BALANCED, 3, 0);
    CHECK_OK(bal);
    dlc_plan_free(bal);
    model_free(&gap);
    dlc_plan_free(NULL);
    CHECK(dlc_plan_count(NULL) == 0 && dlc_plan_hash(NULL) == 0);
    model_free(&m);
}

/* dlc_plan_deal (docs/shards.md): every fragment dealt once, every shard owning one at
 * least, the shards' bytes as even as largest-first dealing makes them (no shard above
 * the mean by more than the largest fragment), the same deal every time; bad counts named. */
static void test_deal(void) {
    model m = gpt(4, 256, 32, 64, 128);
    for (int P = 1; P <= 12; P++) {
        dlc_plan *plan = plan_of(&m, DLC_PLAN_BALANCED, P, 1);
        CHECK_OK(plan);
        if (!plan) continue;
        int64_t total = 0, big = 0;
        for (int p = 0; p < P; p++) {
            total += dlc_plan_bytes(plan, p);
            if (dlc_plan_bytes(plan, p) > big) big = dlc_plan_bytes(plan, p);
        }
        for (int S = 1; S <= P; S++) {
            int owner[16], again[16];
            int64_t load[16] = {0};
            int count[16] = {0};
            CHECK(dlc_plan_deal(plan, S, owner) == DLC_OK && dlc_plan_deal(plan, S, again) == DLC_OK);
            CHECK(memcmp(owner, again, (size_t)P * sizeof *owner) == 0);
            int ok = 1;
            for (int p = 0; p < P; p++) {
                ok &= owner[p] >= 0 && owner[p] < S;
                if (owner[p] >= 0 && owner[p] < S) load[owner[p]] += dlc_plan_bytes(plan, p), count[owner[p]]++;
            }
            CHECK(ok);
            for (int k = 0; k < S; k++) CHECK(count[k] >= 1 && load[k] <= total / S + big);
        }
        int owner[16];
        CHECK_SFAILS(dlc_plan_deal(plan, P + 1, owner), DLC_ERR_ARG, "expected 1..");
        CHECK_SFAILS(dlc_plan_deal(plan, 0, owner), DLC_ERR_ARG, "0 shards");
        dlc_plan_free(plan);
    }
    model_free(&m);
    /* four equal fragments, two shards: dealt round-robin, two each */
    spec sp4[4] = {{"a", 1, {64, 0}}, {"b", 1, {64, 0}}, {"c", 1, {64, 0}}, {"d", 1, {64, 0}}};
    model e = model_make(4, sp4);
    dlc_plan *plan = plan_of(&e, DLC_PLAN_SEQUENTIAL, 4, 0);
    int owner[4] = {-1, -1, -1, -1};
    CHECK(plan && dlc_plan_count(plan) == 4 && dlc_plan_deal(plan, 2, owner) == DLC_OK);
    CHECK(owner[0] == 0 && owner[1] == 1 && owner[2] == 0 && owner[3] == 1);
    dlc_plan_free(plan);
    model_free(&e);
}

int main(void) {
    test_names();
    test_partition();
    test_balance();
    test_deal();
    test_strided();
    test_sequential();
    test_hash();
    test_errors();
    return check_done("test_frag");
}
