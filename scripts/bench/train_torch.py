"""Training speed of the charlm GPT in PyTorch 1.13 (reference for scripts/bench/train)."""
import os, sys, time
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from gpt import GPT, param_groups

threads = int(sys.argv[1])
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 60
torch.set_num_threads(threads)
torch.manual_seed(1)
B, T = 16, 64
model = GPT(vocab=256, ctx=64, dim=128, layers=4, heads=4, tied=True)
opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95))
batches = []
for _ in range(8):
    d = torch.randint(0, 256, (B, T + 1))
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
for _ in range(3):
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    best = min(best, time.perf_counter() - t0)
print(f"tokens_per_s_ref {steps * B * T / best:.1f}")
