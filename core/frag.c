/* frag.c - fragment plans over the parameter arena and their layout hashes.
 * The rules are in docs/fragments.md; keep the two in step (and the golden hash in
 * ctest/test_frag.c, which pins the byte stream). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/frag.h"
#include "internal.h"
#include "mix.h"

static const char *const kind_names[] = {"balanced", "strided", "sequential"};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == DLC_PLAN_KIND_COUNT,
               "plan name table out of sync with dlc_plan_kind");

const char *dlc_plan_kind_name(dlc_plan_kind kind) {
    return (unsigned)kind < DLC_PLAN_KIND_COUNT ? kind_names[kind] : NULL;
}

dlc_status dlc_plan_kind_parse(const char *name, dlc_plan_kind *out) {
    if (!name) return dlc_error(DLC_ERR_ARG, "plan: name is NULL; expected balanced, strided or sequential");
    for (int k = 0; k < DLC_PLAN_KIND_COUNT; k++)
        if (!strcmp(name, kind_names[k])) {
            if (out) *out = (dlc_plan_kind)k;
            return DLC_OK;
        }
    return dlc_error(DLC_ERR_ARG, "plan = \"%s\": unknown plan; expected balanced, strided or sequential",
                     name);
}

dlc_plan_params dlc_plan_default_params(void) {
    return (dlc_plan_params){.kind = DLC_PLAN_BALANCED, .fragments = 1, .split_rows = 0};
}

struct dlc_plan {
    dlc_plan_params pp;
    int n;                 /* tensors */
    int *nviews;           /* [P] */
    dlc_frag_view **views; /* [P] pointers into all */
    dlc_frag_view *all;    /* every view, fragment by fragment */
    int64_t *numel;        /* [P] */
    int *whole;            /* [n] fragment holding tensor i whole, -1 if split */
    char *names;           /* the names, NUL-separated */
    uint32_t *thash;       /* [n] each tensor's name and shape, hashed (dlc_plan_tensor_hash) */
    char **desc;           /* [n] "'name' [d0, d1]" (dlc_plan_tensor_desc) */
    uint64_t model_hash, hash;
};

/* ---- the hashes: FNV-1a 64 over a little-endian byte stream (mix.h) ---- */

/* The model stream (names and shapes), continuing from DLC_FNV_OFFSET. */
static uint64_t model_hash(const dlc_params *params) {
    uint64_t h = dlc_fnv_bytes(DLC_FNV_OFFSET, "dlc.model.v1", 12);
    int n = dlc_params_count(params);
    h = dlc_fnv_u32(h, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        const char *name = dlc_params_name(params, i);
        const dlc_tensor *t = dlc_params_tensor(params, i);
        size_t len = strlen(name);
        h = dlc_fnv_u32(h, (uint32_t)len);
        h = dlc_fnv_bytes(h, name, len);
        h = dlc_fnv_u32(h, (uint32_t)t->ndim);
        for (int d = 0; d < t->ndim; d++) h = dlc_fnv_u64(h, (uint64_t)t->shape[d]);
    }
    return h;
}

/* One tensor's part of the model stream, on its own (a HELLO lists them: hello.tensors). */
static uint32_t tensor_hash(const dlc_params *params, int i) {
    const char *name = dlc_params_name(params, i);
    const dlc_tensor *t = dlc_params_tensor(params, i);
    size_t len = strlen(name);
    uint64_t h = dlc_fnv_bytes(DLC_FNV_OFFSET, "dlc.tensor.v1", 13);
    h = dlc_fnv_u32(h, (uint32_t)len);
    h = dlc_fnv_bytes(h, name, len);
    h = dlc_fnv_u32(h, (uint32_t)t->ndim);
    for (int d = 0; d < t->ndim; d++) h = dlc_fnv_u64(h, (uint64_t)t->shape[d]);
    return (uint32_t)(h ^ (h >> 32));
}

static char *tensor_desc(const dlc_params *params, int i) {
    const dlc_tensor *t = dlc_params_tensor(params, i);
    char shape[DLC_MAX_DIMS * 22 + 4] = "";
    size_t at = 0;
    for (int d = 0; d < t->ndim; d++)
        at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    size_t cap = strlen(dlc_params_name(params, i)) + strlen(shape) + 8;
    char *out = malloc(cap);
    if (out) snprintf(out, cap, "'%s' [%s]", dlc_params_name(params, i), shape);
    return out;
}

uint64_t dlc_frag_model_hash(const dlc_params *params) {
    if (!params) {
        dlc_error(DLC_ERR_ARG, "frag_model_hash: params is NULL; pass the model's dlc_params");
        return 0;
    }
    return model_hash(params);
}

/* ---- planning ---- */

typedef struct piece {
    int tensor, frag;
    int64_t offset, numel, row0, rows;
} piece;

/* The first dot-separated component of `name` made only of 1..9 decimal digits, or -1:
 * "blocks.3.attn.qkv.weight" -> 3, "h.12.mlp" -> 12, "wte" -> -1. */
static int layer_of(const char *name) {
    const char *s = name;
    while (*s) {
        const char *e = strchr(s, '.');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int digits = len > 0 && len <= 9;
        for (size_t i = 0; digits && i < len; i++) digits = s[i] >= '0' && s[i] <= '9';
        if (digits) {
            int v = 0;
            for (size_t i = 0; i < len; i++) v = v * 10 + (s[i] - '0');
            return v;
        }
        if (!e) break;
        s = e + 1;
    }
    return -1;
}

/* Largest first; ties by arena order, so the order is total and the plan deterministic. */
static int by_size_desc(const void *a, const void *b) {
    const piece *x = *(const piece *const *)a, *y = *(const piece *const *)b;
    if (x->numel != y->numel) return x->numel > y->numel ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Places each of the m pieces (already ordered) into the fragment with the fewest floats,
 * then the fewest pieces, then the lowest index. */
static void pack_lightest(piece **order, int m, int P, int64_t *load, int *cnt) {
    for (int k = 0; k < m; k++) {
        int best = 0;
        for (int f = 1; f < P; f++)
            if (load[f] < load[best] || (load[f] == load[best] && cnt[f] < cnt[best])) best = f;
        order[k]->frag = best;
        load[best] += order[k]->numel;
        cnt[best]++;
    }
}

dlc_plan *dlc_plan_new(const dlc_params *params, const dlc_plan_params *ppin) {
    dlc_plan_params pp = ppin ? *ppin : dlc_plan_default_params();
    piece *pc = NULL, **order = NULL;
    int64_t *load = NULL;
    int *cnt = NULL, *layer = NULL;
    dlc_plan *plan = NULL;

    if (!params) {
        dlc_error(DLC_ERR_ARG, "plan_new: params is NULL; pass the model's dlc_params");
        return NULL;
    }
    if ((unsigned)pp.kind >= DLC_PLAN_KIND_COUNT) {
        dlc_error(DLC_ERR_ARG, "plan_new: kind = %d: unknown plan; expected 0..%d (balanced, strided, sequential)",
                  (int)pp.kind, DLC_PLAN_KIND_COUNT - 1);
        return NULL;
    }
    const int n = dlc_params_count(params), P = pp.fragments;
    if (P < 1) {
        dlc_error(DLC_ERR_ARG, "plan_new: fragments = %d: expected at least 1", P);
        return NULL;
    }
    if (!pp.split_rows && P > n) {
        dlc_error(DLC_ERR_ARG,
                  "plan_new: fragments = %d but the model has %d tensors: without row-splitting each "
                  "fragment needs a whole tensor; use fragments <= %d or enable split_rows",
                  P, n, n);
        return NULL;
    }
    pp.split_rows = pp.split_rows != 0;
    const int64_t total = dlc_params_numel(params);
    const int64_t cap = total / P + (total % P != 0); /* ceil(total / P) */

    /* Pieces in arena order: whole tensors, or runs of rows of the large ones. */
    layer = malloc((size_t)n * sizeof *layer);
    if (!layer) goto nomem;
    int npieces = 0;
    for (int i = 0; i < n; i++) {
        const dlc_tensor *t = dlc_params_tensor(params, i);
        layer[i] = layer_of(dlc_params_name(params, i));
        int64_t rows = t->ndim ? t->shape[0] : 1;
        int64_t k = 1;
        if (pp.split_rows && t->numel > cap && rows >= 2 &&
            (pp.kind != DLC_PLAN_STRIDED || layer[i] < 0)) {
            k = t->numel / cap + (t->numel % cap != 0);
            if (k > rows) k = rows;
        }
        if (k > INT32_MAX - npieces) {
            dlc_error(DLC_ERR_ARG, "plan_new: fragments = %d would cut the model into more than %d pieces",
                      P, INT32_MAX);
            goto fail;
        }
        npieces += (int)k;
    }
    if (P > npieces) {
        dlc_error(DLC_ERR_ARG,
                  "plan_new: fragments = %d but even with row-splitting the model (%d tensors) cuts into "
                  "only %d pieces of at most ceil(total / P) = %lld floats; use fragments <= %d",
                  P, n, npieces, (long long)cap, npieces);
        goto fail;
    }
    pc = malloc((size_t)npieces * sizeof *pc);
    order = malloc((size_t)npieces * sizeof *order);
    load = calloc((size_t)P, sizeof *load);
    cnt = calloc((size_t)P, sizeof *cnt);
    if (!pc || !order || !load || !cnt) goto nomem;
    int m = 0;
    for (int i = 0; i < n; i++) {
        const dlc_tensor *t = dlc_params_tensor(params, i);
        int64_t off = dlc_params_offset(params, i), rows = t->ndim ? t->shape[0] : 1;
        int64_t k = 1;
        if (pp.split_rows && t->numel > cap && rows >= 2 &&
            (pp.kind != DLC_PLAN_STRIDED || layer[i] < 0)) {
            k = t->numel / cap + (t->numel % cap != 0);
            if (k > rows) k = rows;
        }
        int64_t rowsz = rows ? t->numel / rows : 0;
        for (int64_t j = 0; j < k; j++) {
            int64_t r0 = j * rows / k, r1 = (j + 1) * rows / k;
            pc[m++] = (piece){.tensor = i, .frag = -1, .offset = off + r0 * rowsz,
                              .numel = k == 1 ? t->numel : (r1 - r0) * rowsz, .row0 = r0, .rows = r1 - r0};
        }
    }
    DLC_ASSERT(m == npieces);

    switch (pp.kind) {
    case DLC_PLAN_BALANCED:
        for (int k = 0; k < m; k++) order[k] = &pc[k];
        qsort(order, (size_t)m, sizeof *order, by_size_desc);
        pack_lightest(order, m, P, load, cnt);
        break;
    case DLC_PLAN_STRIDED: {
        int nu = 0;
        for (int k = 0; k < m; k++) {
            int L = layer[pc[k].tensor];
            if (L >= 0) {
                pc[k].frag = L % P;
                load[pc[k].frag] += pc[k].numel;
                cnt[pc[k].frag]++;
            } else
                order[nu++] = &pc[k];
        }
        qsort(order, (size_t)nu, sizeof *order, by_size_desc);
        pack_lightest(order, nu, P, load, cnt);
        for (int f = 0; f < P; f++)
            if (!cnt[f]) {
                int maxl = -1;
                for (int i = 0; i < n; i++) maxl = layer[i] > maxl ? layer[i] : maxl;
                dlc_error(DLC_ERR_ARG,
                          "plan_new: strided with fragments = %d leaves fragment %d empty: the names "
                          "number layers up to %d and %d pieces have no layer number; use fewer "
                          "fragments or plan = balanced",
                          P, f, maxl, nu);
                goto fail;
            }
        break;
    }
    case DLC_PLAN_SEQUENTIAL: {
        /* The fragment where a piece's midpoint falls, clamped so fragments are
         * contiguous, none is skipped, and enough pieces remain for the rest. */
        int64_t cum = 0;
        int prev = -1;
        for (int k = 0; k < m; k++) {
            int64_t f = total ? (2 * cum + pc[k].numel) * P / (2 * total) : 0;
            int64_t lo = prev > P - (m - k) ? prev : P - (m - k);
            int64_t hi = prev + 1 < P - 1 ? prev + 1 : P - 1;
            if (f < lo) f = lo;
            if (f > hi) f = hi;
            pc[k].frag = (int)f;
            cnt[f]++;
            load[f] += pc[k].numel;
            cum += pc[k].numel;
            prev = (int)f;
        }
        break;
    }
    default: DLC_ASSERT(0);
    }
    for (int f = 0; f < P; f++) DLC_ASSERT(cnt[f] > 0);

    /* The plan: per fragment, its pieces in arena order, adjacent rows of one tensor
     * merged into one view. */
    size_t namebytes = 0;
    for (int i = 0; i < n; i++) namebytes += strlen(dlc_params_name(params, i)) + 1;
    plan = calloc(1, sizeof *plan);
    if (!plan) goto nomem;
    plan->pp = pp;
    plan->n = n;
    plan->nviews = calloc((size_t)P, sizeof *plan->nviews);
    plan->views = calloc((size_t)P, sizeof *plan->views);
    plan->numel = calloc((size_t)P, sizeof *plan->numel);
    plan->whole = malloc((size_t)n * sizeof *plan->whole);
    plan->all = malloc((size_t)m * sizeof *plan->all);
    plan->names = malloc(namebytes);
    plan->thash = malloc((size_t)n * sizeof *plan->thash);
    plan->desc = calloc((size_t)n, sizeof *plan->desc);
    if (!plan->nviews || !plan->views || !plan->numel || !plan->whole || !plan->all || !plan->names ||
        !plan->thash || !plan->desc)
        goto nomem;
    for (int i = 0; i < n; i++) {
        plan->thash[i] = tensor_hash(params, i);
        if (!(plan->desc[i] = tensor_desc(params, i))) goto nomem;
    }
    char *np = plan->names;
    const char **names = malloc((size_t)n * sizeof *names);
    if (!names) goto nomem;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(dlc_params_name(params, i)) + 1;
        memcpy(np, dlc_params_name(params, i), len);
        names[i] = np;
        np += len;
        plan->whole[i] = -1;
    }
    for (int k = 0; k < m; k++)
        if (pc[k].row0 == 0 && pc[k].numel == dlc_params_tensor(params, pc[k].tensor)->numel)
            plan->whole[pc[k].tensor] = pc[k].frag;
    int nv = 0;
    for (int f = 0; f < P; f++) {
        plan->views[f] = plan->all + nv;
        for (int k = 0; k < m; k++) {
            if (pc[k].frag != f) continue;
            dlc_frag_view *last = plan->nviews[f] ? &plan->views[f][plan->nviews[f] - 1] : NULL;
            if (last && last->tensor == pc[k].tensor && last->row0 + last->rows == pc[k].row0) {
                last->rows += pc[k].rows;
                last->numel += pc[k].numel;
            } else {
                plan->views[f][plan->nviews[f]++] =
                    (dlc_frag_view){.name = names[pc[k].tensor], .tensor = pc[k].tensor, .offset = pc[k].offset,
                                    .numel = pc[k].numel, .row0 = pc[k].row0, .rows = pc[k].rows};
                nv++;
            }
            plan->numel[f] += pc[k].numel;
        }
        /* a tensor whose pieces all landed here, merged back into one view, is whole */
        for (int j = 0; j < plan->nviews[f]; j++) {
            const dlc_frag_view *v = &plan->views[f][j];
            if (v->row0 == 0 && v->numel == dlc_params_tensor(params, v->tensor)->numel) plan->whole[v->tensor] = f;
        }
    }
    free(names);

    /* Plan hash: continues the model stream (docs/fragments.md, "Hashes"). */
    plan->model_hash = model_hash(params);
    uint64_t h = plan->model_hash; /* FNV-1a state after the model stream */
    h = dlc_fnv_bytes(h, "dlc.plan.v1", 11);
    h = dlc_fnv_u64(h, (uint64_t)dlc_params_size(params));
    for (int i = 0; i < n; i++) h = dlc_fnv_u64(h, (uint64_t)dlc_params_offset(params, i));
    h = dlc_fnv_u32(h, (uint32_t)P);
    for (int f = 0; f < P; f++) {
        h = dlc_fnv_u32(h, (uint32_t)plan->nviews[f]);
        for (int j = 0; j < plan->nviews[f]; j++) {
            const dlc_frag_view *v = &plan->views[f][j];
            h = dlc_fnv_u32(h, (uint32_t)v->tensor);
            h = dlc_fnv_u64(h, (uint64_t)v->offset);
            h = dlc_fnv_u64(h, (uint64_t)v->numel);
        }
    }
    plan->hash = h;

    free(pc);
    free(order);
    free(load);
    free(cnt);
    free(layer);
    return plan;

nomem:
    dlc_error(DLC_ERR_NOMEM, "plan_new: out of memory planning %d tensors into %d fragments", n, P);
fail:
    free(pc);
    free(order);
    free(load);
    free(cnt);
    free(layer);
    dlc_plan_free(plan);
    return NULL;
}

void dlc_plan_free(dlc_plan *plan) {
    if (!plan) return;
    free(plan->nviews);
    free(plan->views);
    free(plan->numel);
    free(plan->whole);
    free(plan->all);
    free(plan->names);
    free(plan->thash);
    for (int i = 0; plan->desc && i < plan->n; i++) free(plan->desc[i]);
    free(plan->desc);
    free(plan);
}

dlc_plan_params dlc_plan_get_params(const dlc_plan *plan) {
    return plan ? plan->pp : dlc_plan_default_params();
}

int dlc_plan_count(const dlc_plan *plan) { return plan ? plan->pp.fragments : 0; }

int dlc_plan_tensors(const dlc_plan *plan) { return plan ? plan->n : 0; }

const dlc_frag_view *dlc_plan_views(const dlc_plan *plan, int f, int *count) {
    if (count) *count = 0;
    if (!plan || f < 0 || f >= plan->pp.fragments) {
        dlc_error(DLC_ERR_RANGE, "plan_views: fragment %d: expected 0..%d", f,
                  plan ? plan->pp.fragments - 1 : -1);
        return NULL;
    }
    if (count) *count = plan->nviews[f];
    return plan->views[f];
}

int64_t dlc_plan_numel(const dlc_plan *plan, int f) {
    return plan && f >= 0 && f < plan->pp.fragments ? plan->numel[f] : -1;
}

int64_t dlc_plan_bytes(const dlc_plan *plan, int f) {
    int64_t n = dlc_plan_numel(plan, f);
    return n < 0 ? -1 : n * (int64_t)sizeof(float);
}

dlc_status dlc_plan_deal(const dlc_plan *plan, int shards, int *owner) {
    int P = dlc_plan_count(plan);
    if (!plan || !owner) return dlc_error(DLC_ERR_ARG, "plan_deal: plan and owner are required");
    if (shards < 1 || shards > P)
        return dlc_error(DLC_ERR_ARG, "plan_deal: %d shards for %d fragments: expected 1..%d (each shard owns a "
                         "fragment at least)", shards, P, P);
    int64_t *load = calloc((size_t)shards, sizeof *load);
    if (!load) return dlc_error(DLC_ERR_NOMEM, "plan_deal: out of memory");
    for (int p = 0; p < P; p++) owner[p] = -1;
    for (int dealt = 0; dealt < P; dealt++) {
        int big = -1; /* the largest fragment not dealt yet (the lowest index among equals) */
        for (int p = 0; p < P; p++)
            if (owner[p] < 0 && (big < 0 || dlc_plan_bytes(plan, p) > dlc_plan_bytes(plan, big))) big = p;
        int k = 0;
        for (int j = 1; j < shards; j++)
            if (load[j] < load[k]) k = j;
        owner[big] = k; /* (every load > 0 once dealt: the first `shards` go one to each) */
        load[k] += dlc_plan_bytes(plan, big) > 0 ? dlc_plan_bytes(plan, big) : 1;
    }
    free(load);
    return DLC_OK;
}

int dlc_plan_fragment_of(const dlc_plan *plan, int i) {
    return plan && i >= 0 && i < plan->n ? plan->whole[i] : -1;
}

uint64_t dlc_plan_model_hash(const dlc_plan *plan) { return plan ? plan->model_hash : 0; }

uint32_t dlc_plan_tensor_hash(const dlc_plan *plan, int i) {
    return plan && i >= 0 && i < plan->n ? plan->thash[i] : 0;
}

const char *dlc_plan_tensor_desc(const dlc_plan *plan, int i) {
    return plan && i >= 0 && i < plan->n ? plan->desc[i] : NULL;
}

uint64_t dlc_plan_hash(const dlc_plan *plan) { return plan ? plan->hash : 0; }
