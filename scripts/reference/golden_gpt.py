"""Writes the golden fixtures for spec/golden_spec.lua from PyTorch (independent reference).

For a tiny GPT (tied and untied head), fixed init and batch, 3 steps of
grad -> clip_grad_norm(1.0) -> AdamW: the initial parameters, the batch, the step-0 logits,
each step's loss and every parameter gradient (before clipping), and the final parameters.
Run: /usr/bin/python3 scripts/reference/golden_gpt.py  (writes ctest/fixtures/gpt_golden_*.safetensors)
"""
import os
import torch
from gpt import GPT, param_groups
import safetensors_io

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "ctest", "fixtures")
CFG = dict(vocab=32, ctx=8, dim=16, layers=2, heads=2, mlp_ratio=4)
# eps = 1e-4, not 1e-8: the key bias has an exactly-zero true gradient (softmax ignores
# a constant added to every key), so both sides see only rounding noise (~1e-9) there,
# and with a tiny eps AdamW turns that noise into full-size steps that differ between
# implementations.  AdamW with eps 1e-8 is checked elementwise in ctest/test_optim.c.
LR, BETAS, EPS, WD, CLIP, STEPS = 1e-2, (0.9, 0.95), 1e-4, 0.1, 1.0, 3


def main():
    torch.set_num_threads(1)
    for tied in (True, False):
        torch.manual_seed(1234 if tied else 4321)
        model = GPT(tied=tied, **CFG)
        with torch.no_grad():  # larger-than-default init so the gradients are not tiny
            for name, p in model.named_parameters():
                if not name.endswith("bias") and "ln" not in name:
                    p.normal_(0.0, 0.2)
        x = torch.randint(0, CFG["vocab"], (3, CFG["ctx"]))
        y = torch.randint(0, CFG["vocab"], (3, CFG["ctx"]))
        out = {"x": x.float(), "y": y.float()}
        for name, p in model.named_parameters():
            out["init." + name] = p.detach().clone()
        opt = torch.optim.AdamW(param_groups(model, WD), lr=LR, betas=BETAS, eps=EPS)
        for step in range(STEPS):
            opt.zero_grad()
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, y.reshape(-1))
            loss.backward()
            if step == 0:
                out["step0.logits"] = logits.detach().clone()
            out[f"step{step}.loss"] = loss.detach().reshape(())
            for name, p in model.named_parameters():
                out[f"step{step}.grad.{name}"] = p.grad.detach().clone()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            out[f"step{step}.grad_norm"] = norm.detach().reshape(())
            opt.step()
        for name, p in model.named_parameters():
            out["final." + name] = p.detach().clone()
        meta = {k: str(v) for k, v in CFG.items()}
        meta.update(tied="1" if tied else "0", lr=repr(LR), beta1=repr(BETAS[0]), beta2=repr(BETAS[1]),
                    eps=repr(EPS), weight_decay=repr(WD), clip=repr(CLIP), steps=str(STEPS),
                    torch=torch.__version__)
        path = os.path.join(OUT, f"gpt_golden_{'tied' if tied else 'untied'}.safetensors")
        safetensors_io.save(path, out, meta)
        print(f"wrote {path}: {len(out)} tensors, step-0 loss {out['step0.loss'].item():.6f}")


if __name__ == "__main__":
    main()
