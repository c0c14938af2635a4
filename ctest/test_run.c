/*
 * test_run.c - the run description (core/run.c): the defaults are recipe.lua's decoupled
 * preset and derive exactly the learner's and syncer's defaults; every check names the
 * field, its value and the expectation; the hash is pinned to a golden value computed
 * independently from docs/protocol.md's byte stream and moves with every field; the diff
 * names the first field that differs and both values.
 */
#include "check.h"

/* Golden values: FNV-1a 64 of the stream in docs/protocol.md ("Run description"),
 * computed from that text alone by ctest/fixtures/run_hash_golden.py, not from run.c. */
#define GOLDEN_DEFAULT 0xb85d8eefcf484dc4ULL
#define GOLDEN_OTHER 0xff555ac200389b8aULL

static dlc_run_params other(void) {
    dlc_run_params r = dlc_run_default_params();
    r.preset = DLC_PRESET_STREAMING;
    r.H = 30, r.fragments = 3, r.plan = DLC_PLAN_STRIDED;
    r.plan_hash = 0x3577cf3386840948ULL, r.model_hash = 0xc1a94072485ef353ULL;
    r.tau = 3, r.alpha = 0.5, r.quorum = DLC_QUORUM_ALL, r.grace = DLC_GRACE_FIXED, r.grace_s = 1.5;
    r.weighting = DLC_WEIGHT_UNIFORM, r.merge = DLC_MERGE_MEAN;
    r.outer_lr = 1.0, r.outer_momentum = 0, r.outer_nesterov = 0;
    r.codec_up = DLC_CODEC_INT4, r.block = 64, r.error_feedback = 1, r.ema = 0.25;
    return r;
}

static void test_names(void) {
    CHECK(strcmp(dlc_run_preset_name(DLC_PRESET_DP), "dp") == 0);
    CHECK(strcmp(dlc_run_preset_name(DLC_PRESET_DECOUPLED), "decoupled") == 0);
    CHECK(dlc_run_preset_name(DLC_PRESET_COUNT) == NULL);
    dlc_run_preset p;
    CHECK(dlc_run_preset_parse("streaming", &p) == DLC_OK && p == DLC_PRESET_STREAMING);
    CHECK(dlc_run_preset_parse("blocks", &p) == DLC_ERR_ARG && strstr(dlc_last_error(), "\"blocks\"") &&
          strstr(dlc_last_error(), "decoupled"));
    CHECK(dlc_run_field_count() == 25);
    CHECK(strcmp(dlc_run_field_at(0)->name, "sync.dp") == 0);
    CHECK(dlc_run_field_at(25) == NULL && dlc_run_field_at(-1) == NULL);
    /* every field says what it means; a bounded one what it expects, from its bounds */
    int bounded = 0;
    for (int i = 0; i < dlc_run_field_count(); i++) {
        const dlc_run_field *f = dlc_run_field_at(i);
        char want[96];
        dlc_run_field_expect(f, want, sizeof want);
        CHECK(f->doc && f->doc[0]);
        CHECK(isnan(f->min) == (want[0] == 0));
        bounded += !isnan(f->min);
    }
    CHECK(bounded == 10);
    char want[96];
    for (int i = 0; i < dlc_run_field_count(); i++) {
        const dlc_run_field *f = dlc_run_field_at(i);
        dlc_run_field_expect(f, want, sizeof want);
        if (strcmp(f->name, "sync.grace_gamma") == 0) CHECK(strcmp(want, "a finite number in (0, 1]") == 0);
        if (strcmp(f->name, "sync.grace_s") == 0) CHECK(strcmp(want, "a finite number >= 0") == 0);
        if (strcmp(f->name, "sync.ring") == 0) CHECK(strcmp(want, "an integer in [1, 64]") == 0);
        if (strcmp(f->name, "sync.quorum") == 0) CHECK(want[0] == 0); /* not a range: K, or 0 for every live one */
    }
}

/* The defaults derive the state machines' own defaults, field for field. */
static void test_derive(void) {
    dlc_run_params r = dlc_run_default_params();
    CHECK(dlc_run_params_check(&r) == DLC_OK);
    dlc_learner_params lp, ld = dlc_learner_default_params();
    CHECK(dlc_run_learner_params(&r, 3, &lp) == DLC_OK);
    ld.id = 3;
    CHECK((lp.id == 3 && lp.dp == ld.dp && lp.H == ld.H && lp.tau == ld.tau &&
                                               lp.alpha == ld.alpha && lp.blocking == ld.blocking &&
                                               lp.codec == ld.codec && lp.codec_params.block == ld.codec_params.block &&
                                               lp.error_feedback == ld.error_feedback &&
                                               lp.heartbeat == ld.heartbeat && lp.ema == ld.ema &&
                                               lp.incarnation == ld.incarnation));
    dlc_syncer_params sp, sd = dlc_syncer_default_params();
    CHECK(dlc_run_syncer_params(&r, 1, &sp) == DLC_OK);
    CHECK(sp.learners == 1 && sp.dp == sd.dp && sp.quorum == sd.quorum && sp.grace == sd.grace &&
          sp.grace_s == sd.grace_s && sp.grace_gamma == sd.grace_gamma && sp.ema == sd.ema && sp.tau == sd.tau &&
          sp.weighting == sd.weighting && sp.merge == sd.merge && sp.outer.lr == sd.outer.lr &&
          sp.outer.momentum == sd.outer.momentum && sp.outer.nesterov == sd.outer.nesterov &&
          sp.outer.ring == sd.outer.ring && sp.codec_up == sd.codec_up &&
          sp.codec_params.block == sd.codec_params.block && sp.codec_down == sd.codec_down &&
          sp.embedding == NULL && sp.timeout == 0 && sp.blocking == sd.blocking && sp.epoch == 1);

    /* every field of another run reaches the params that use it */
    r = other();
    r.blocking = 1;
    CHECK(dlc_run_params_check(&r) == DLC_OK);
    CHECK(dlc_run_learner_params(&r, 0, &lp) == DLC_OK);
    CHECK(lp.H == 30 && lp.tau == 3 && lp.alpha == 0.5 && lp.blocking == 1 && lp.dp == 0 &&
          lp.codec == DLC_CODEC_INT4 && lp.codec_params.block == 64 && lp.error_feedback == 1 && lp.ema == 0.25);
    CHECK(dlc_run_syncer_params(&r, 4, &sp) == DLC_OK);
    CHECK(sp.learners == 4 && sp.quorum == 0 && sp.grace == DLC_GRACE_FIXED && sp.grace_s == 1.5 &&
          sp.weighting == DLC_WEIGHT_UNIFORM && sp.merge == DLC_MERGE_MEAN && sp.outer.lr == 1.0 &&
          sp.outer.momentum == 0 && sp.outer.nesterov == 0 && sp.codec_up == DLC_CODEC_INT4 &&
          sp.codec_params.block == 64 && sp.tau == 3 && sp.blocking == 1 && sp.ema == 0.25);
    /* dp reaches both */
    r = dlc_run_default_params();
    r.preset = DLC_PRESET_DP, r.dp = 1, r.fragments = 1;
    CHECK(dlc_run_learner_params(&r, 0, &lp) == DLC_OK && lp.dp == 1);
    CHECK(dlc_run_syncer_params(&r, 2, &sp) == DLC_OK && sp.dp == 1);
    /* what only the syncer knows is checked there */
    r = dlc_run_default_params();
    r.quorum = 5;
    CHECK(dlc_run_syncer_params(&r, 4, &sp) == DLC_ERR_ARG && strstr(dlc_last_error(), "quorum = 5 but learners = 4"));
    CHECK(dlc_run_learner_params(&r, -1, &lp) == DLC_ERR_ARG && strstr(dlc_last_error(), "id = -1"));
}

static void refused(dlc_run_params r, const char *needle) {
    dlc_learner_params lp;
    CHECK(dlc_run_params_check(&r) == DLC_ERR_ARG);
    if (!strstr(dlc_last_error(), needle)) {
        fprintf(stderr, "expected \"%s\" in: %s\n", needle, dlc_last_error());
        CHECK(0);
    }
    CHECK(dlc_run_learner_params(&r, 0, &lp) == DLC_ERR_ARG && strstr(dlc_last_error(), needle));
}

static void test_check(void) {
    dlc_run_params r;
    r = dlc_run_default_params(), r.tau = 24;
    refused(r, "sync.tau = 24: expected 0 <= tau < H = 24");
    r = dlc_run_default_params(), r.H = 0, r.tau = 30; /* the host's schedule: any tau */
    CHECK(dlc_run_params_check(&r) == DLC_OK);
    r = dlc_run_default_params(), r.H = -1;
    refused(r, "sync.H = -1");
    r = dlc_run_default_params(), r.fragments = 0;
    refused(r, "sync.fragments = 0");
    r = dlc_run_default_params(), r.alpha = 1.5;
    refused(r, "sync.alpha = 1.5: expected a finite number in [0, 1]");
    /* the bounds of the field table (the recipe reads the same), each named */
    r = dlc_run_default_params(), r.fragments = DLC_PROTO_FRAGMENTS_MAX + 1;
    refused(r, "sync.fragments = 1025: expected an integer in [1, 1024]");
    r = dlc_run_default_params(), r.H = 2000000, r.tau = 1000001;
    refused(r, "sync.tau = 1000001: expected an integer in [0, 1000000]");
    r = dlc_run_default_params(), r.H = 1000000001;
    refused(r, "sync.H = 1000000001: expected an integer in [0, 1000000000]");
    r = dlc_run_default_params(), r.blocking = 2;
    refused(r, "sync.blocking = 2: expected 0 or 1");
    r = dlc_run_default_params(), r.dp = 1, r.fragments = 1;
    refused(r, "sync.dp = 1 with sync.preset = decoupled");
    r = dlc_run_default_params(), r.preset = DLC_PRESET_DP;
    refused(r, "sync.dp = 0 with sync.preset = dp");
    r = dlc_run_default_params(), r.preset = DLC_PRESET_DP, r.dp = 1;
    refused(r, "sync.fragments = 4: expected 1 with sync.preset = dp");
    r = dlc_run_default_params(), r.preset = DLC_PRESET_COUNT;
    refused(r, "sync.preset = 4");
    r = dlc_run_default_params(), r.codec_up = (dlc_codec_kind)17;
    refused(r, "sync.codec = 17");
    r = dlc_run_default_params(), r.codec_down = DLC_CODEC_INT8;
    refused(r, "sync.codec_down = int8: expected f32 or bf16");
    r = dlc_run_default_params(), r.block = 33;
    refused(r, "sync.block = 33");
    r = dlc_run_default_params(), r.quorum = -1;
    refused(r, "sync.quorum = -1");
    r = dlc_run_default_params(), r.grace_gamma = 0;
    refused(r, "sync.grace_gamma = 0");
    r = dlc_run_default_params(), r.grace_s = NAN;
    refused(r, "sync.grace_s = nan: expected a finite number");
    r = dlc_run_default_params(), r.ring = 65;
    refused(r, "sync.ring = 65: expected an integer in [1, 64]");
    r = dlc_run_default_params(), r.outer_momentum = 1;
    refused(r, "outer.momentum = 1: expected a finite number in [0, 1)");
    r = dlc_run_default_params(), r.outer_momentum = 0;
    refused(r, "outer.nesterov = 1 with outer.momentum = 0");
    r = dlc_run_default_params(), r.outer_lr = -0.5;
    refused(r, "outer.lr = -0.5: expected a finite number >= 0");
    r = dlc_run_default_params(), r.ema = 0;
    refused(r, "sync.ema = 0: expected a finite number in (0, 1]");
    r = dlc_run_default_params(), r.error_feedback = -1;
    refused(r, "sync.error_feedback = -1");
    CHECK(dlc_run_params_check(NULL) == DLC_ERR_ARG);
}

static void test_hash(void) {
    dlc_run_params r = dlc_run_default_params();
    CHECK(dlc_run_hash(&r) == GOLDEN_DEFAULT);
    dlc_run_params o = other();
    CHECK(dlc_run_hash(&o) == GOLDEN_OTHER);
    CHECK(dlc_run_hash(NULL) == 0);
    /* -0 is +0 */
    r.alpha = -0.0;
    CHECK(dlc_run_hash(&r) == GOLDEN_DEFAULT);
    /* every field moves the hash: each one changed alone */
    for (int i = 0; i < dlc_run_field_count(); i++) {
        const dlc_run_field *f = dlc_run_field_at(i);
        r = dlc_run_default_params();
        char *at = (char *)&r + f->offset;
        int iv;
        double dv;
        uint64_t uv;
        switch (f->type) {
        case DLC_RUN_INT:
        case DLC_RUN_FLAG:
        case DLC_RUN_ENUM:
            memcpy(&iv, at, sizeof iv);
            iv = iv == 0 ? 1 : 0;
            memcpy(at, &iv, sizeof iv);
            break;
        case DLC_RUN_HASH64:
            memcpy(&uv, at, sizeof uv);
            uv ^= 1;
            memcpy(at, &uv, sizeof uv);
            break;
        default:
            memcpy(&dv, at, sizeof dv);
            dv += 0.125;
            memcpy(at, &dv, sizeof dv);
        }
        if (dlc_run_hash(&r) == GOLDEN_DEFAULT) {
            fprintf(stderr, "changing %s leaves the run hash\n", f->name);
            CHECK(0);
        }
        /* and the diff names exactly that field */
        dlc_run_params d = dlc_run_default_params();
        char why[256];
        CHECK(dlc_run_diff(&d, &r, why, sizeof why) == 1);
        size_t n = strlen(f->name);
        if (strncmp(why, f->name, n) != 0 || why[n] != ':') {
            fprintf(stderr, "diff of %s: %s\n", f->name, why);
            CHECK(0);
        }
    }
}

static void test_diff(void) {
    dlc_run_params a = dlc_run_default_params(), b = a;
    char why[256];
    CHECK(dlc_run_diff(&a, &b, why, sizeof why) == 0 && why[0] == '\0');
    b.tau = 3;
    CHECK(dlc_run_diff(&a, &b, why, sizeof why) == 1);
    CHECK(strcmp(why, "sync.tau: 2 here, 3 in the learner's run") == 0);
    /* the FIRST field that differs, in the struct's order */
    b.H = 30, b.codec_up = DLC_CODEC_INT8;
    CHECK(dlc_run_diff(&a, &b, why, sizeof why) == 1 && strcmp(why, "sync.H: 24 here, 30 in the learner's run") == 0);
    b = a, b.blocking = 1;
    CHECK(dlc_run_diff(&a, &b, why, sizeof why) == 1 &&
          strcmp(why, "sync.blocking: false here, true in the learner's run") == 0);
    b = a, b.codec_up = DLC_CODEC_INT4;
    CHECK(dlc_run_diff(&a, &b, why, sizeof why) == 1 &&
          strcmp(why, "sync.codec: f32 here, int4 in the learner's run") == 0);
    b = a, b.plan_hash = 0x3577cf3386840948ULL;
    CHECK(dlc_run_diff(&a, &b, why, sizeof why) == 1 &&
          strcmp(why, "sync.plan_hash: 0000000000000000 here, 3577cf3386840948 in the learner's run") == 0);
    /* numbers that print alike at %g get every digit */
    b = a, b.outer_lr = 0.7000001;
    CHECK(dlc_run_diff(&a, &b, why, sizeof why) == 1 && strstr(why, "outer.lr: 0.69999999999999996 here, 0.70000010000000001 in"));
    /* cut to fit, NUL-terminated; NULL out allowed */
    b = a, b.tau = 3;
    char tiny[9];
    CHECK(dlc_run_diff(&a, &b, tiny, sizeof tiny) == 1 && strcmp(tiny, "sync.tau") == 0);
    CHECK(dlc_run_diff(&a, &b, NULL, 0) == 1);
    CHECK(dlc_run_diff(NULL, &b, why, sizeof why) == DLC_ERR_ARG);
}

/* The presets as lua/diloco/recipe.lua's PRESETS fill a recipe's sync fields. */
static void test_presets(void) {
    dlc_run_params r;
    CHECK(dlc_run_preset_params(DLC_PRESET_DP, &r) == DLC_OK && r.dp == 1 && r.H == 1 && r.fragments == 1 &&
          r.tau == 0 && r.quorum == DLC_QUORUM_ALL && r.grace == DLC_GRACE_OFF && r.weighting == DLC_WEIGHT_UNIFORM &&
          r.merge == DLC_MERGE_MEAN && r.alpha == 0 && r.blocking == 1 && dlc_run_params_check(&r) == DLC_OK);
    CHECK(dlc_run_preset_params(DLC_PRESET_DILOCO, &r) == DLC_OK && r.dp == 0 && r.H == 24 && r.fragments == 1 &&
          r.tau == 0 && r.quorum == DLC_QUORUM_ALL && r.grace == DLC_GRACE_OFF && r.merge == DLC_MERGE_MEAN &&
          r.blocking == 1 && r.preset == DLC_PRESET_DILOCO && dlc_run_params_check(&r) == DLC_OK);
    CHECK(dlc_run_preset_params(DLC_PRESET_STREAMING, &r) == DLC_OK && r.H == 24 && r.fragments == 4 && r.tau == 2 &&
          r.quorum == DLC_QUORUM_ALL && r.grace == DLC_GRACE_OFF && r.weighting == DLC_WEIGHT_UNIFORM &&
          r.merge == DLC_MERGE_MEAN && r.alpha == 0.5 && r.blocking == 0 && dlc_run_params_check(&r) == DLC_OK);
    dlc_run_params d = dlc_run_default_params();
    CHECK(dlc_run_preset_params(DLC_PRESET_DECOUPLED, &r) == DLC_OK && memcmp(&r, &d, sizeof r) == 0);
    CHECK(dlc_run_preset_params(DLC_PRESET_COUNT, &r) == DLC_ERR_ARG && strstr(dlc_last_error(), "preset 4"));
}

/* The text form: the preset fills what the text leaves out, every type is read, and a
 * bad text is refused naming the field, leaving *out unchanged. */
static void test_parse(void) {
    dlc_run_params r = dlc_run_default_params(), d = r;
    CHECK(dlc_run_parse("{}", &r) == DLC_OK && memcmp(&r, &d, sizeof r) == 0);
    CHECK(dlc_run_parse("{\"sync\": {\"preset\": \"streaming\", \"H\": 12, \"codec\": \"int4\", \"quorum\": 2, "
                        "\"error_feedback\": true, \"grace\": \"fixed\", \"grace_s\": 1.5}, "
                        "\"outer\": {\"lr\": 0.4, \"momentum\": 0.8, \"nesterov\": false}}",
                        &r) == DLC_OK);
    CHECK(r.preset == DLC_PRESET_STREAMING && r.H == 12 && r.fragments == 4 && r.tau == 2 && r.alpha == 0.5 &&
          r.codec_up == DLC_CODEC_INT4 && r.quorum == 2 && r.error_feedback == 1 && r.grace == DLC_GRACE_FIXED &&
          r.grace_s == 1.5 && r.outer_lr == 0.4 && r.outer_momentum == 0.8 && r.outer_nesterov == 0);
    CHECK(dlc_run_parse("{\"sync\": {\"preset\": \"diloco\", \"quorum\": \"all\"}}", &r) == DLC_OK &&
          r.blocking == 1 && r.fragments == 1 && r.quorum == DLC_QUORUM_ALL);
    CHECK(dlc_run_parse("{\"sync\": {\"preset\": \"dp\"}}", &r) == DLC_OK && r.dp == 1);
    dlc_run_params before = r;
    struct {
        const char *text, *says;
    } bad[] = {
        {"not json", "not JSON"},
        {"[1]", "expected a JSON object"},
        {"{\"inner\": {}}", "unknown section \"inner\""},
        {"{\"sync\": 3}", "sync: expected an object"},
        {"{\"sync\": {\"preset\": \"fast\"}}", "sync.preset"},
        {"{\"sync\": {\"tua\": 2}}", "unknown field sync.tua: expected one of preset, H, fragments"},
        {"{\"outer\": {\"lr\": \"big\"}}", "outer.lr: expected a number"},
        {"{\"sync\": {\"tau\": 2.5}}", "sync.tau: expected an integer"},
        {"{\"sync\": {\"quorum\": \"most\"}}", "sync.quorum: expected an integer or \"all\""},
        {"{\"sync\": {\"blocking\": 1}}", "sync.blocking: expected true or false"},
        {"{\"sync\": {\"codec\": \"int3\"}}", "sync.codec = \"int3\": expected one of f32, bf16"},
        {"{\"sync\": {\"H\": 4, \"tau\": 4}}", "sync.tau = 4: expected 0 <= tau < H = 4"},
        {"{\"sync\": {\"plan_hash\": 1}}", "unknown field sync.plan_hash"},
        {"{\"sync\": {\"H\": 4, \"H\": 5}}", "not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dlc_status st = dlc_run_parse(bad[i].text, &r);
        CHECK(st == DLC_ERR_ARG && strstr(dlc_last_error(), bad[i].says) && memcmp(&r, &before, sizeof r) == 0);
        if (!strstr(dlc_last_error(), bad[i].says)) fprintf(stderr, "  %s -> %s\n", bad[i].text, dlc_last_error());
    }
    CHECK(dlc_run_parse(NULL, &r) == DLC_ERR_ARG && dlc_run_parse("{}", NULL) == DLC_ERR_ARG);
}

int main(void) {
    test_names();
    test_derive();
    test_check();
    test_hash();
    test_diff();
    test_presets();
    test_parse();
    return check_done("run");
}
