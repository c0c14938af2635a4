"""Training speed of the diloco-lua GPT mirrored in PyTorch 1.13 (run by scripts/bench/train).

Usage: train_torch.py [--dim 128] [--layers 4] [--heads 4] [--ctx 64] [--batch 16]
                      [--steps 50] [--reps 2] [--intra N] [--peak]
--intra is torch.set_num_threads (the intra-op pool); OpenBLAS's own pool is sized by
OPENBLAS_NUM_THREADS, which the driver sets per configuration.  Prints "key value" lines:
tokens_per_s (best of --reps timed runs of --steps steps after 5 warm-up steps), params,
flops_per_token, and with --peak only peak_gflops (torch.mm at 1024^3, the product on
the BLAS this build calls).  Same model as scripts/reference/gpt.py, the mirror of
lua/diloco/nn.lua; same AdamW, decay rule and clip as train_ours.lua; random token batches
so data loading is measured on neither side.
"""
import argparse, os, sys, time
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from gpt import GPT, param_groups

ap = argparse.ArgumentParser()
for name, default in (("dim", 128), ("layers", 4), ("heads", 4), ("ctx", 64), ("batch", 16),
                      ("steps", 50), ("reps", 2), ("intra", 1)):
    ap.add_argument("--" + name, type=int, default=default)
ap.add_argument("--peak", action="store_true")
a = ap.parse_args()
torch.set_num_threads(a.intra)

if a.peak:
    x, y = torch.randn(1024, 1024), torch.randn(1024, 1024)
    for _ in range(3):
        torch.mm(x, y)
    tb = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10):
            torch.mm(x, y)
        tb = min(tb, (time.perf_counter() - t0) / 10)
    print(f"peak_gflops {2 * 1024 ** 3 / tb / 1e9:.1f}")
    sys.exit(0)

torch.manual_seed(1)
B, T, C, L, V = a.batch, a.ctx, a.dim, a.layers, 256
model = GPT(vocab=V, ctx=T, dim=C, layers=L, heads=a.heads, tied=True)
opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95))
batches = []
for _ in range(8):
    d = torch.randint(0, V, (B, T + 1))
    batches.append((d[:, :T].contiguous(), d[:, 1:].contiguous()))


def step(i):
    x, y = batches[i % len(batches)]
    opt.zero_grad(set_to_none=True)
    loss = model.loss(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


for i in range(5):
    step(i)
best = float("inf")
for _ in range(a.reps):
    t0 = time.perf_counter()
    for i in range(a.steps):
        step(i)
    best = min(best, time.perf_counter() - t0)
# PaLM counting: 6 x the parameters of the products (blocks and the tied head) + attention
fwd = 2 * (L * 12 * C * C + C * V) + L * 2 * 2 * T * C
print(f"tokens_per_s {a.steps * B * T / best:.1f}")
print(f"params {sum(p.numel() for p in model.parameters())}")
print(f"flops_per_token {3 * fwd}")
