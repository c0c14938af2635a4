/* run.c - the run description (run.h, docs/protocol.md "Run description").
 *
 * One table of fields drives the hash, the diff, the wire's compact form (core/proto.c)
 * and the field names the checks print; the struct's order is the table's order. */
#include "diloco/run.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "diloco/codec.h"
#include "diloco/frag.h"
#include "diloco/learner.h"
#include "diloco/merge.h"
#include "diloco/outer.h"
#include "diloco/proto.h"
#include "diloco/syncer.h"
#include "mix.h"

static const char *const preset_names[] = {"dp", "diloco", "streaming", "decoupled"};
_Static_assert(sizeof preset_names / sizeof preset_names[0] == DLC_PRESET_COUNT, "one name per preset");

const char *dlc_run_preset_name(dlc_run_preset p) {
    return (unsigned)p < DLC_PRESET_COUNT ? preset_names[p] : NULL;
}

dlc_status dlc_run_preset_parse(const char *name, dlc_run_preset *out) {
    for (int i = 0; name && out && i < DLC_PRESET_COUNT; i++)
        if (strcmp(name, preset_names[i]) == 0) return *out = (dlc_run_preset)i, DLC_OK;
    return dlc_error(DLC_ERR_ARG, "sync.preset = \"%s\": expected dp, diloco, streaming or decoupled",
                     name ? name : "(null)");
}

/* The enums' name functions, as the table calls them. */
static const char *n_preset(int v) { return dlc_run_preset_name((dlc_run_preset)v); }
static const char *n_plan(int v) { return dlc_plan_kind_name((dlc_plan_kind)v); }
static const char *n_grace(int v) { return dlc_grace_mode_name((dlc_grace_mode)v); }
static const char *n_weighting(int v) { return dlc_weighting_name((dlc_weighting)v); }
static const char *n_merge(int v) { return dlc_merge_mode_name((dlc_merge_mode)v); }
static const char *n_codec(int v) { return dlc_codec_name((dlc_codec_kind)v); }

/* Enum fields are read and written as int (memcpy): every enum here has int's size. */
_Static_assert(sizeof(dlc_run_preset) == sizeof(int) && sizeof(dlc_plan_kind) == sizeof(int) &&
                   sizeof(dlc_grace_mode) == sizeof(int) && sizeof(dlc_weighting) == sizeof(int) &&
                   sizeof(dlc_merge_mode) == sizeof(int) && sizeof(dlc_codec_kind) == sizeof(int),
               "run fields of enum type are int-sized");

/* B: a field with bounds, N: one without (its rule is not a range), E: an enum. */
#define B(name, type, member, lo, hi, lo_open, hi_open, doc) \
    {name, type, offsetof(dlc_run_params, member), NULL, 0, lo, hi, lo_open, hi_open, doc}
#define N(name, type, member, doc) {name, type, offsetof(dlc_run_params, member), NULL, 0, NAN, NAN, 0, 0, doc}
#define E(name, member, fn, count, doc) \
    {name, DLC_RUN_ENUM, offsetof(dlc_run_params, member), fn, count, NAN, NAN, 0, 0, doc}
static const dlc_run_field fields[] = {
    N("sync.dp", DLC_RUN_FLAG, dp, "data parallel: set by sync.preset = \"dp\""),
    E("sync.preset", preset, n_preset, DLC_PRESET_COUNT,
      "algorithm preset: the defaults of the fields marked (preset) (docs/algorithm.md)"),
    B("sync.H", DLC_RUN_INT, H, 0, 1e9, 0, 0,
      "inner steps between syncs of a fragment (0 is for a host that calls contribute itself; a recipe's own "
      "schedule is sync.schedule)"),
    B("sync.fragments", DLC_RUN_INT, fragments, 1, DLC_PROTO_FRAGMENTS_MAX, 0, 0,
      "fragments P (at most the wire's limit)"),
    E("sync.plan", plan, n_plan, DLC_PLAN_KIND_COUNT, "how tensors are assigned to fragments (docs/fragments.md)"),
    N("sync.plan_hash", DLC_RUN_HASH64, plan_hash, "the plan's hash, set from the layout"),
    N("model_hash", DLC_RUN_HASH64, model_hash, "the model's hash, set from the layout"),
    B("sync.tau", DLC_RUN_INT, tau, 0, 1e6, 0, 0,
      "overlap steps: a fragment sent after step t is applied after step t + tau (below H)"),
    B("sync.alpha", DLC_RUN_NUMBER, alpha, 0, 1, 0, 0, "mixing on arrival: alpha*local + (1-alpha)*global"),
    N("sync.blocking", DLC_RUN_FLAG, blocking, "the learner waits for the merged fragment tau steps after sending it"),
    N("sync.quorum", DLC_RUN_INT, quorum, "minimum quorum K (0: every live learner)"),
    E("sync.grace", grace, n_grace, DLC_GRACE_MODE_COUNT, "wait after quorum: adaptive, off, or a duration"),
    B("sync.grace_s", DLC_RUN_NUMBER, grace_s, 0, INFINITY, 0, 0,
      "the grace window in seconds when sync.grace is a duration"),
    B("sync.grace_gamma", DLC_RUN_NUMBER, grace_gamma, 0, 1, 1, 0, "gamma of the adaptive grace window"),
    E("sync.weighting", weighting, n_weighting, DLC_WEIGHTING_COUNT,
      "contribution weight: tokens^2/steps, tokens or uniform"),
    E("sync.merge", merge, n_merge, DLC_MERGE_MODE_COUNT,
      "merge of contributions: radial-directional averaging or weighted mean"),
    B("sync.ring", DLC_RUN_INT, ring, 1, DLC_FRAGSTATE_RING_MAX, 0, 0,
      "versions of each fragment kept to anchor stale contributions"),
    B("outer.lr", DLC_RUN_NUMBER, outer_lr, 0, INFINITY, 0, 0, "outer learning rate"),
    B("outer.momentum", DLC_RUN_NUMBER, outer_momentum, 0, 1, 0, 1, "outer momentum"),
    N("outer.nesterov", DLC_RUN_FLAG, outer_nesterov, "Nesterov momentum in the outer step"),
    E("sync.codec", codec_up, n_codec, DLC_CODEC_COUNT, "outer-gradient codec, uplink (docs/codecs.md)"),
    E("sync.codec_down", codec_down, n_codec, DLC_CODEC_COUNT, "codec of the merged fragments sent to the learners"),
    N("sync.block", DLC_RUN_INT, block, "block size of the int8/int4/e3m0 scales: an even integer in [32, 256]"),
    N("sync.error_feedback", DLC_RUN_FLAG, error_feedback, "add each contribution's quantization error to the next"),
    B("sync.ema", DLC_RUN_NUMBER, ema, 0, 1, 1, 0, "EMA factor of the adaptive grace estimates"),
};
#undef B
#undef N
#undef E
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))
/* A field added to the struct must be added to the table (and so to the hash, the diff
 * and the wire): the struct's size is the sum of what the table lists, padding aside. */
_Static_assert(sizeof fields / sizeof fields[0] == 25, "one table entry per dlc_run_params field");
_Static_assert(offsetof(dlc_run_params, ema) + sizeof(double) == sizeof(dlc_run_params),
               "sync.ema is the struct's last field");

int dlc_run_field_count(void) { return NFIELDS; }
const dlc_run_field *dlc_run_field_at(int i) { return i >= 0 && i < NFIELDS ? &fields[i] : NULL; }

dlc_run_params dlc_run_default_params(void) {
    dlc_run_params r;
    memset(&r, 0, sizeof r);
    r.preset = DLC_PRESET_DECOUPLED;
    r.H = 24;
    r.fragments = 4;
    r.plan = DLC_PLAN_BALANCED;
    r.tau = 2;
    r.quorum = 1;
    r.grace = DLC_GRACE_ADAPTIVE;
    r.grace_gamma = 0.8;
    r.weighting = DLC_WEIGHT_TOKENS2_STEPS;
    r.merge = DLC_MERGE_RDA;
    dlc_fragstate_params fp = dlc_fragstate_default_params();
    r.ring = fp.ring;
    r.outer_lr = fp.lr;
    r.outer_momentum = fp.momentum;
    r.outer_nesterov = fp.nesterov;
    r.codec_up = r.codec_down = DLC_CODEC_F32;
    r.block = DLC_CODEC_BLOCK_DEFAULT;
    r.ema = 0.5;
    return r;
}

static int get_int(const dlc_run_params *r, const dlc_run_field *f) {
    int v;
    memcpy(&v, (const char *)r + f->offset, sizeof v);
    return v;
}
static double get_num(const dlc_run_params *r, const dlc_run_field *f) {
    double v;
    memcpy(&v, (const char *)r + f->offset, sizeof v);
    return v;
}
static uint64_t get_u64(const dlc_run_params *r, const dlc_run_field *f) {
    uint64_t v;
    memcpy(&v, (const char *)r + f->offset, sizeof v);
    return v;
}

dlc_status dlc_run_params_check(const dlc_run_params *r) {
    if (!r) return dlc_error(DLC_ERR_ARG, "run: params is NULL");
    for (int i = 0; i < NFIELDS; i++) {
        const dlc_run_field *f = &fields[i];
        if (f->type == DLC_RUN_ENUM && !f->enum_name(get_int(r, f)))
            return dlc_error(DLC_ERR_ARG, "run: %s = %d: not one of its %d values", f->name, get_int(r, f),
                             f->enum_count);
        if (f->type == DLC_RUN_FLAG && get_int(r, f) != 0 && get_int(r, f) != 1)
            return dlc_error(DLC_ERR_ARG, "run: %s = %d: expected 0 or 1", f->name, get_int(r, f));
        if (f->type == DLC_RUN_NUMBER && !isfinite(get_num(r, f)))
            return dlc_error(DLC_ERR_ARG, "run: %s = %g: expected a finite number", f->name, get_num(r, f));
        if (!isnan(f->min)) {
            double v = f->type == DLC_RUN_INT ? (double)get_int(r, f) : get_num(r, f);
            if (v < f->min || v > f->max || (f->min_open && v == f->min) || (f->max_open && v == f->max)) {
                char want[96];
                dlc_run_field_expect(f, want, sizeof want);
                return dlc_error(DLC_ERR_ARG, "run: %s = %.15g: expected %s", f->name, v, want);
            }
        }
    }
    if (r->H > 0 && r->tau >= r->H)
        return dlc_error(DLC_ERR_ARG, "run: sync.tau = %d: expected 0 <= tau < H = %d", r->tau, r->H);
    if (r->dp != (r->preset == DLC_PRESET_DP))
        return dlc_error(DLC_ERR_ARG, "run: sync.dp = %d with sync.preset = %s: data parallel is exactly the dp preset",
                         r->dp, preset_names[r->preset]);
    if (r->dp && r->fragments != 1)
        return dlc_error(DLC_ERR_ARG, "run: sync.fragments = %d: expected 1 with sync.preset = dp", r->fragments);
    if (r->quorum < 0)
        return dlc_error(DLC_ERR_ARG, "run: sync.quorum = %d: expected K >= 1 (0 = every live learner)", r->quorum);
    if (r->outer_nesterov && r->outer_momentum == 0)
        return dlc_error(DLC_ERR_ARG, "run: outer.nesterov = 1 with outer.momentum = 0: Nesterov needs momentum > 0");
    if (r->block < DLC_CODEC_BLOCK_MIN || r->block > DLC_CODEC_BLOCK_MAX || (r->block & 1))
        return dlc_error(DLC_ERR_ARG, "run: sync.block = %d: expected an even size in %d..%d", r->block,
                         DLC_CODEC_BLOCK_MIN, DLC_CODEC_BLOCK_MAX);
    if (r->codec_down != DLC_CODEC_F32 && r->codec_down != DLC_CODEC_BF16)
        return dlc_error(DLC_ERR_ARG, "run: sync.codec_down = %s: expected f32 or bf16", dlc_codec_name(r->codec_down));
    return DLC_OK;
}

/* A bound as a recipe writes it: integers and 1e9 plainly, 0.5 as 0.5. */
static void bound_text(double v, char *out, size_t cap) {
    if (v == floor(v) && fabs(v) < 1e15) snprintf(out, cap, "%.0f", v);
    else snprintf(out, cap, "%.17g", v);
}

void dlc_run_field_expect(const dlc_run_field *f, char *out, size_t cap) {
    if (!out || cap == 0) return;
    out[0] = '\0';
    if (!f || isnan(f->min)) return;
    const char *what = f->type == DLC_RUN_INT ? "an integer" : "a finite number";
    char lo[32], hi[32];
    bound_text(f->min, lo, sizeof lo);
    bound_text(f->max, hi, sizeof hi);
    if (isinf(f->max)) snprintf(out, cap, "%s %s %s", what, f->min_open ? ">" : ">=", lo);
    else snprintf(out, cap, "%s in %s%s, %s%s", what, f->min_open ? "(" : "[", lo, hi, f->max_open ? ")" : "]");
}

/* The run's fields the learner and the syncer both take, under one name in both params:
 * X(field of dlc_learner_params and dlc_syncer_params, field of the run). */
#define SHARED_FIELDS(X) X(dp, dp) X(tau, tau) X(ema, ema) X(blocking, blocking) X(codec_params.block, block)
#define COPY_FIELD(to, from) out->to = r->from;

dlc_status dlc_run_learner_params(const dlc_run_params *r, int id, dlc_learner_params *out) {
    if (!out) return dlc_error(DLC_ERR_ARG, "run_learner_params: out is NULL");
    dlc_status st = dlc_run_params_check(r);
    if (st != DLC_OK) return st;
    *out = dlc_learner_default_params();
    SHARED_FIELDS(COPY_FIELD)
    out->id = id;
    out->H = r->H;
    out->alpha = r->alpha;
    out->codec = r->codec_up;
    out->error_feedback = r->error_feedback;
    out->ring = r->ring;
    return dlc_learner_params_check(out);
}

dlc_status dlc_run_syncer_params(const dlc_run_params *r, int learners, dlc_syncer_params *out) {
    if (!out) return dlc_error(DLC_ERR_ARG, "run_syncer_params: out is NULL");
    dlc_status st = dlc_run_params_check(r);
    if (st != DLC_OK) return st;
    *out = dlc_syncer_default_params();
    SHARED_FIELDS(COPY_FIELD)
    out->learners = learners;
    out->quorum = r->quorum;
    out->grace = r->grace;
    out->grace_s = r->grace_s;
    out->grace_gamma = r->grace_gamma;
    out->outer.lr = r->outer_lr;
    out->outer.momentum = r->outer_momentum;
    out->outer.nesterov = r->outer_nesterov;
    out->outer.ring = r->ring;
    out->weighting = r->weighting;
    out->merge = r->merge;
    out->codec_up = r->codec_up;
    out->codec_down = r->codec_down;
    return dlc_syncer_params_check(out);
}

#undef COPY_FIELD
#undef SHARED_FIELDS

/* ---- the hash: FNV-1a 64 over the canonical little-endian stream (mix.h) ---- */

uint64_t dlc_run_hash(const dlc_run_params *r) {
    if (!r) return 0;
    uint64_t h = dlc_fnv_bytes(DLC_FNV_OFFSET, "dlc.run.v1", 10);
    for (int i = 0; i < NFIELDS; i++) {
        const dlc_run_field *f = &fields[i];
        switch (f->type) {
        case DLC_RUN_INT:
        case DLC_RUN_FLAG: h = dlc_fnv_u64(h, (uint64_t)(int64_t)get_int(r, f)); break;
        case DLC_RUN_HASH64: h = dlc_fnv_u64(h, get_u64(r, f)); break;
        case DLC_RUN_NUMBER: {
            double x = get_num(r, f);
            uint64_t bits;
            if (x == 0) x = 0; /* -0 hashes as +0: they compare equal */
            memcpy(&bits, &x, sizeof bits);
            h = dlc_fnv_u64(h, bits);
            break;
        }
        case DLC_RUN_ENUM: {
            const char *name = f->enum_name(get_int(r, f));
            if (!name) return 0;
            uint32_t n = (uint32_t)strlen(name);
            unsigned char b[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16),
                                  (unsigned char)(n >> 24)};
            h = dlc_fnv_bytes(dlc_fnv_bytes(h, b, 4), name, n);
            break;
        }
        default: return 0;
        }
    }
    return h;
}

/* ---- the diff ---- */

/* Field f of r as text into buf; `precise`: numbers with every digit. */
static void field_text(const dlc_run_params *r, const dlc_run_field *f, int precise, char *buf, size_t cap) {
    switch (f->type) {
    case DLC_RUN_INT: snprintf(buf, cap, "%d", get_int(r, f)); break;
    case DLC_RUN_FLAG: snprintf(buf, cap, "%s", get_int(r, f) == 1 ? "true" : get_int(r, f) == 0 ? "false" : "?"); break;
    case DLC_RUN_HASH64: snprintf(buf, cap, "%016llx", (unsigned long long)get_u64(r, f)); break;
    case DLC_RUN_NUMBER: snprintf(buf, cap, precise ? "%.17g" : "%g", get_num(r, f)); break;
    case DLC_RUN_ENUM: {
        const char *name = f->enum_name(get_int(r, f));
        if (name) snprintf(buf, cap, "%s", name);
        else snprintf(buf, cap, "(value %d)", get_int(r, f));
        break;
    }
    default: snprintf(buf, cap, "?");
    }
}

static int field_equal(const dlc_run_params *a, const dlc_run_params *b, const dlc_run_field *f) {
    switch (f->type) {
    case DLC_RUN_HASH64: return get_u64(a, f) == get_u64(b, f);
    case DLC_RUN_NUMBER: return get_num(a, f) == get_num(b, f);
    default: return get_int(a, f) == get_int(b, f);
    }
}

int dlc_run_diff(const dlc_run_params *a, const dlc_run_params *b, char *out, size_t cap) {
    if (out && cap) out[0] = '\0';
    if (!a || !b) return dlc_error(DLC_ERR_ARG, "run_diff: NULL run");
    for (int i = 0; i < NFIELDS; i++) {
        const dlc_run_field *f = &fields[i];
        if (field_equal(a, b, f)) continue;
        char x[64], y[64];
        field_text(a, f, 0, x, sizeof x);
        field_text(b, f, 0, y, sizeof y);
        if (strcmp(x, y) == 0) { /* close numbers: every digit */
            field_text(a, f, 1, x, sizeof x);
            field_text(b, f, 1, y, sizeof y);
        }
        if (out && cap) snprintf(out, cap, "%s: %s here, %s in the learner's run", f->name, x, y);
        return 1;
    }
    return 0;
}

/* ---- presets and the text form (run.h, "From text") ---- */

dlc_status dlc_run_preset_params(dlc_run_preset p, dlc_run_params *out) {
    if (!out) return dlc_error(DLC_ERR_ARG, "run_preset_params: out is NULL");
    if ((unsigned)p >= DLC_PRESET_COUNT)
        return dlc_error(DLC_ERR_ARG, "run_preset_params: preset %d: expected 0..%d", (int)p, DLC_PRESET_COUNT - 1);
    dlc_run_params r = dlc_run_default_params(); /* decoupled */
    r.preset = p;
    if (p != DLC_PRESET_DECOUPLED) { /* the synchronous family: every learner, plain mean */
        r.quorum = DLC_QUORUM_ALL;
        r.grace = DLC_GRACE_OFF;
        r.weighting = DLC_WEIGHT_UNIFORM;
        r.merge = DLC_MERGE_MEAN;
    }
    switch (p) {
    case DLC_PRESET_DP: r.dp = 1, r.H = 1, r.fragments = 1, r.tau = 0, r.blocking = 1; break;
    case DLC_PRESET_DILOCO: r.fragments = 1, r.tau = 0, r.blocking = 1; break;
    case DLC_PRESET_STREAMING: r.alpha = 0.5; break;
    default: break;
    }
    *out = r;
    return DLC_OK;
}

/* One value of field f from JSON into r; a message naming the field on failure. */
static dlc_status read_json_field(const dlc_run_field *f, json_t *v, dlc_run_params *r) {
    char *at = (char *)r + f->offset;
    switch (f->type) {
    case DLC_RUN_INT: {
        if (f->offset == offsetof(dlc_run_params, quorum) && json_is_string(v) &&
            strcmp(json_string_value(v), "all") == 0) {
            int all = DLC_QUORUM_ALL;
            memcpy(at, &all, sizeof all);
            return DLC_OK;
        }
        if (!json_is_integer(v) || json_integer_value(v) < INT_MIN || json_integer_value(v) > INT_MAX)
            return dlc_error(DLC_ERR_ARG, "run: %s: expected an integer%s", f->name,
                             f->offset == offsetof(dlc_run_params, quorum) ? " or \"all\"" : "");
        int i = (int)json_integer_value(v);
        memcpy(at, &i, sizeof i);
        return DLC_OK;
    }
    case DLC_RUN_FLAG: {
        if (!json_is_boolean(v)) return dlc_error(DLC_ERR_ARG, "run: %s: expected true or false", f->name);
        int i = json_is_true(v);
        memcpy(at, &i, sizeof i);
        return DLC_OK;
    }
    case DLC_RUN_NUMBER: {
        if (!json_is_number(v)) return dlc_error(DLC_ERR_ARG, "run: %s: expected a number", f->name);
        double d = json_number_value(v);
        memcpy(at, &d, sizeof d);
        return DLC_OK;
    }
    case DLC_RUN_ENUM: {
        const char *s = json_is_string(v) ? json_string_value(v) : NULL;
        for (int e = 0; s && e < f->enum_count; e++)
            if (strcmp(s, f->enum_name(e)) == 0) return memcpy(at, &e, sizeof e), DLC_OK;
        char names[256] = "";
        size_t used = 0;
        for (int e = 0; e < f->enum_count && used < sizeof names; e++)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", e ? ", " : "", f->enum_name(e));
        return dlc_error(DLC_ERR_ARG, "run: %s = %s%s%s: expected one of %s", f->name, s ? "\"" : "",
                         s ? s : "(not a string)", s ? "\"" : "", names);
    }
    default: return dlc_error(DLC_ERR_ARG, "run: %s is not set from text", f->name);
    }
}

/* The fields a text may set: the recipe's sync and outer fields, not the derived ones. */
static int settable(const dlc_run_field *f) {
    return f->type != DLC_RUN_HASH64 && strcmp(f->name, "sync.dp") != 0 && strcmp(f->name, "sync.preset") != 0;
}

dlc_status dlc_run_parse(const char *text, dlc_run_params *out) {
    if (!text || !out) return dlc_error(DLC_ERR_ARG, "run_parse: NULL argument");
    json_error_t jerr;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return dlc_error(DLC_ERR_ARG, "run: not JSON: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
    dlc_status st = DLC_OK;
    dlc_run_params r;
    const char *key;
    json_t *sec;
    if (!json_is_object(root)) {
        st = dlc_error(DLC_ERR_ARG, "run: expected a JSON object {\"sync\": {...}, \"outer\": {...}}");
        goto done;
    }
    json_object_foreach(root, key, sec) {
        if (strcmp(key, "sync") != 0 && strcmp(key, "outer") != 0) {
            st = dlc_error(DLC_ERR_ARG, "run: unknown section \"%s\": expected sync and outer", key);
            goto done;
        }
        if (!json_is_object(sec)) {
            st = dlc_error(DLC_ERR_ARG, "run: %s: expected an object of fields", key);
            goto done;
        }
    }
    /* the preset first: it fills every field the text leaves out (as a recipe's does) */
    json_t *sync = json_object_get(root, "sync"), *preset = sync ? json_object_get(sync, "preset") : NULL;
    dlc_run_preset p = DLC_PRESET_DECOUPLED;
    if (preset && (!json_is_string(preset) || dlc_run_preset_parse(json_string_value(preset), &p) != DLC_OK)) {
        st = dlc_error(DLC_ERR_ARG, "run: sync.preset: expected \"dp\", \"diloco\", \"streaming\" or \"decoupled\"");
        goto done;
    }
    (void)dlc_run_preset_params(p, &r);
    json_object_foreach(root, key, sec) {
        const char *name;
        json_t *v;
        json_object_foreach(sec, name, v) {
            if (strcmp(key, "sync") == 0 && strcmp(name, "preset") == 0) continue;
            char full[96];
            snprintf(full, sizeof full, "%s.%s", key, name);
            const dlc_run_field *f = NULL;
            for (int i = 0; i < NFIELDS && !f; i++)
                if (settable(&fields[i]) && strcmp(fields[i].name, full) == 0) f = &fields[i];
            if (!f) {
                char known[512] = "";
                size_t used = 0;
                for (int i = 0; i < NFIELDS && used < sizeof known; i++)
                    if (settable(&fields[i]) && strncmp(fields[i].name, key, strlen(key)) == 0)
                        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "",
                                                 fields[i].name + strlen(key) + 1);
                st = dlc_error(DLC_ERR_ARG, "run: unknown field %s: expected one of %s%s", full,
                               strcmp(key, "sync") == 0 ? "preset, " : "", known);
                goto done;
            }
            if ((st = read_json_field(f, v, &r)) != DLC_OK) goto done;
        }
    }
    if ((st = dlc_run_params_check(&r)) == DLC_OK) *out = r;
done:
    json_decref(root);
    return st;
}
