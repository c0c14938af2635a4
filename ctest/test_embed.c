/* test_embed.c - libdiloco as a C host embeds it: only <diloco/diloco.h>, linked
 * against the SHARED library (so every call here must be exported despite hidden
 * visibility).  A 2-layer MLP learns y = sin(3x) with AdamW over one parameter arena;
 * the trained parameters are saved as safetensors, reloaded, and give the same loss. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <diloco/diloco.h>

static int failures;
#define EXPECT(c)                                                                   \
    do {                                                                            \
        if (!(c)) {                                                                 \
            failures++;                                                             \
            fprintf(stderr, "%s:%d: expected %s (%s)\n", __FILE__, __LINE__, #c,    \
                    dlc_last_error());                                              \
        }                                                                           \
    } while (0)

typedef struct mlp {
    dlc_tensor *w1, *b1, *w2, *b2;
} mlp;

/* loss = mean((linear(tanh(linear(x, w1, b1)), w2, b2) - y)^2); new reference */
static dlc_tensor *loss_of(const mlp *m, dlc_tensor *x, dlc_tensor *y) {
    dlc_tensor *h = dlc_linear(x, m->w1, m->b1);
    dlc_tensor *a = dlc_unary(DLC_UNARY_TANH, h);
    dlc_tensor *o = dlc_linear(a, m->w2, m->b2);
    dlc_tensor *d = dlc_sub(o, y);
    dlc_tensor *sq = dlc_mul(d, d);
    dlc_tensor *l = dlc_mean_all(sq);
    dlc_tensor *tmp[] = {h, a, o, d, sq};
    for (int i = 0; i < 5; i++) dlc_tensor_release(tmp[i]);
    return l;
}

int main(void) {
    enum { N = 256, H = 32, STEPS = 400 };
    dlc_rng g;
    dlc_rng_init(&g, 7);
    int64_t xs[2] = {N, 1};
    dlc_tensor *x = dlc_tensor_rand(2, xs, &g, -1.0f, 1.0f), *y = dlc_tensor_new(2, xs);
    for (int i = 0; i < N; i++) y->data[i] = sinf(3.0f * x->data[i]);

    mlp m = {
        dlc_tensor_randn(2, (int64_t[]){H, 1}, &g, 0.0f, 1.0f),
        dlc_tensor_zeros(1, (int64_t[]){H}),
        dlc_tensor_randn(2, (int64_t[]){1, H}, &g, 0.0f, 0.2f),
        dlc_tensor_zeros(1, (int64_t[]){1}),
    };
    const char *names[4] = {"fc.weight", "fc.bias", "out.weight", "out.bias"};
    dlc_tensor *ts[4] = {m.w1, m.b1, m.w2, m.b2};
    dlc_params *p = dlc_params_new(4, names, ts);
    EXPECT(p && dlc_params_numel(p) == H + H + H + 1);
    dlc_optim_params op = dlc_optim_default_params(DLC_OPTIM_ADAMW);
    op.weight_decay = 0.0;
    dlc_optim *opt = dlc_optim_new(p, &op);
    EXPECT(opt != NULL);
    if (!p || !opt) return 1;

    double first = 0, last = 0;
    for (int step = 0; step < STEPS; step++) {
        dlc_params_zero_grad(p);
        dlc_tensor *l = loss_of(&m, x, y);
        EXPECT(l != NULL);
        if (!l) return 1;
        if (step == 0) first = l->data[0];
        last = l->data[0];
        EXPECT(dlc_backward(l, NULL, 0) == DLC_OK);
        dlc_tensor_release(l);
        EXPECT(dlc_optim_step(opt, 1e-2f) == DLC_OK);
    }
    printf("embed: loss %.4f -> %.5f after %d AdamW steps\n", first, last, STEPS);
    EXPECT(last < first / 10);

    /* save, reload into fresh tensors, same loss */
    char path[] = "/tmp/dlc_embed_XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    EXPECT(dlc_safetensors_save(path, 4, names, ts, 0, NULL, NULL) == DLC_OK);
    dlc_safetensors *st = dlc_safetensors_open(path);
    EXPECT(st && dlc_safetensors_count(st) == 4);
    mlp r = {0};
    if (st) {
        r.w1 = dlc_safetensors_get(st, "fc.weight");
        r.b1 = dlc_safetensors_get(st, "fc.bias");
        r.w2 = dlc_safetensors_get(st, "out.weight");
        r.b2 = dlc_safetensors_get(st, "out.bias");
        dlc_safetensors_close(st);
    }
    if (r.w1 && r.b1 && r.w2 && r.b2) {
        dlc_set_grad_enabled(0);
        dlc_tensor *a = loss_of(&m, x, y), *b = loss_of(&r, x, y);
        EXPECT(a && b && a->data[0] == b->data[0]);
        dlc_tensor_release(a);
        dlc_tensor_release(b);
    } else {
        EXPECT(!"reloaded all four tensors");
    }
    remove(path);

    dlc_tensor *all[] = {r.w1, r.b1, r.w2, r.b2, m.w1, m.b1, m.w2, m.b2, x, y};
    for (int i = 0; i < 10; i++) dlc_tensor_release(all[i]);
    dlc_optim_free(opt);
    dlc_params_free(p);
    printf("embed: %d failed\n", failures);
    return failures ? 1 : 0;
}
