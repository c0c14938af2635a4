"""A PyTorch training loop joins a diloco-lua run as one learner (python/diloco).

The model is the project's GPT written in PyTorch (scripts/reference/gpt.py: the same
parameter names, shapes and order as lua/diloco/nn.lua's), trained by torch.optim.AdamW
with the recipe's clip, warm-up and cosine schedule on the batches diloco-lua's learner of
the same island would have read (scripts/reference/dump_islands.lua writes them).  After
each of its steps it calls learner.step_done; merged fragments land in the model's own
parameter storage there.  Its learning rate follows the run's step (learner.schedule_step),
as a diloco-lua learner's does.

  /usr/bin/python3 scripts/examples/torch_learner.py DUMP_DIR ISLAND --connect @ADDRESS_FILE \\
      --secret-file SECRET [--threads 1] [--state-dir DIR]

With --state-dir, AdamW's state and the data position are saved there every 100 steps
and at the end (the library publishes each save whole), and a learner started again with
the same directory loads them after its join: the model itself comes back from the syncer.

DUMP_DIR is dump_islands.lua's output for the recipe and --set of the run; ISLAND the
1-based island this learner is (its learner-ISLAND.bin).  scripts/examples/torch_mixed
runs the whole comparison (docs/embedding.md)."""

import argparse
import json
import math
import os
import sys
import time

import torch

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(root, "scripts", "reference"))
sys.path.insert(0, os.path.join(root, "python"))
import diloco  # noqa: E402
from gpt import GPT  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("island", type=int)
    ap.add_argument("--connect", required=True)
    ap.add_argument("--secret-file", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--state-dir")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(os.path.join(a.dump, "meta.json")) as f:
        meta = json.load(f)
    with open(os.path.join(a.dump, "plan.json")) as f:
        plan = json.load(f)
    m, inner = meta["model"], meta["inner"]
    steps, B, T = meta["steps"], meta["batch"], meta["ctx"]
    with open(os.path.join(a.dump, "learner-%d.bin" % a.island), "rb") as f:
        f.readline()
        data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long().view(-1, B, T + 1)

    model = GPT(vocab=m.get("vocab", 256), ctx=m["ctx"], dim=m["dim"], layers=m["layers"], heads=m["heads"],
                tied=m.get("tied", False))
    named = dict(model.named_parameters())
    names = plan["tensors"]  # diloco-lua's order
    missing = [n for n in names if n not in named]
    if missing or len(names) != len(named):
        sys.exit("torch_learner: the PyTorch GPT's parameters differ from diloco-lua's: %s" % (missing or "count"))
    params = {n: named[n].data for n in names}  # the model's own storage, by pointer
    known = ("preset", "H", "fragments", "plan", "tau", "alpha", "blocking", "quorum", "grace", "grace_s",
             "grace_gamma", "weighting", "merge", "ring", "codec", "codec_down", "block", "error_feedback", "ema")
    run = {"sync": {k: v for k, v in meta["sync"].items() if k in known},
           "outer": {"lr": meta["outer"]["lr"], "momentum": meta["outer"]["momentum"]}}
    decay = [named[n] for n in names if plan["decays"][n]]
    no_decay = [named[n] for n in names if not plan["decays"][n]]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": inner["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=inner["lr"],
                            betas=(inner["beta1"], inner["beta2"]), eps=inner["eps"])
    state, pos = {}, [0]  # pos[0]: the next batch of this island's data

    def load(path, step):
        saved = torch.load(path)
        opt.load_state_dict(saved["opt"])
        pos[0] = saved["batch"]

    if a.state_dir:  # AdamW's moments and the data position survive a restart; the model comes from the syncer
        state = dict(state_dir=a.state_dir, save_every=100, load_state=load,
                     save_state=lambda path, step: torch.save({"opt": opt.state_dict(), "batch": pos[0]}, path))
    learner = diloco.Learner(params, connect=a.connect, secret_file=a.secret_file, run=run, id=a.island,
                             heartbeat=0.5, **state)
    warm, lr0, lr1 = inner.get("warmup") or 0, inner["lr"], inner.get("min_lr") or inner["lr"]

    def lr_at(s):
        if s < warm:
            return lr0 * (s + 1) / warm
        q = min(max((s - warm) / max(steps - warm, 1), 0.0), 1.0)
        return lr1 + 0.5 * (lr0 - lr1) * (1 + math.cos(math.pi * q))

    t0, i = time.time(), pos[0]
    while learner.schedule_step < steps and i < len(data):
        s = learner.schedule_step
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        w = data[i]
        i += 1
        pos[0] = i
        loss = model.loss(w[:, :T], w[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if inner.get("clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), inner["clip"])
        with torch.no_grad():
            opt.step()  # in place: the storage the learner holds
        learner.step_done(B * T)
        if i % 50 == 0:
            print("torch learner %d: step %d (run step %d) loss %.4f, %d merged fragments applied (%.0f s)"
                  % (a.island, i, learner.schedule_step, loss.item(), learner.applied, time.time() - t0), flush=True)
    learner.finish(60)
    print("torch learner %d: done, %d steps, %d merged fragments applied" % (a.island, i, learner.applied), flush=True)
    learner.close()


if __name__ == "__main__":
    main()
