"""PyTorch 1.13 reference for recipes/charlm.lua: the same GPT, optimizer, schedule, clip,
and the same token batches in the same order (dumped by dump_batches.lua); prints the final
eval loss on the same held-out batches.
  /usr/bin/python3 scripts/reference/charlm.py BATCHES.bin [threads]
"""
import math
import sys
import time
import torch
from gpt import GPT, param_groups

LR, MIN_LR, WARMUP, WD, BETAS, CLIP = 3e-3, 3e-4, 100, 0.1, (0.9, 0.95), 1.0


def lr_at(step, total):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    q = min(max((step - WARMUP) / (total - WARMUP), 0.0), 1.0)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * q))


def main():
    path = sys.argv[1]
    torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
    with open(path, "rb") as f:
        steps, B, T, neval = map(int, f.readline().split())
        data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    data = data.view(-1, B, T + 1)
    train, evals = data[:steps], data[steps:steps + neval]
    torch.manual_seed(0)
    model = GPT(vocab=256, ctx=T, dim=128, layers=4, heads=4, tied=True)
    opt = torch.optim.AdamW(param_groups(model, WD), lr=LR, betas=BETAS)
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps)
        w = train[step]
        loss = model.loss(w[:, :T], w[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        if (step + 1) % max(1, steps // 10) == 0:
            print(f"step {step + 1} loss {loss.item():.4f} ({time.time() - t0:.0f}s)", flush=True)
    model.eval()
    with torch.no_grad():
        ev = sum(model.loss(w[:, :T], w[:, 1:]).item() for w in evals) / len(evals)
    print(f"final_eval_loss {ev:.6f}")


if __name__ == "__main__":
    main()
