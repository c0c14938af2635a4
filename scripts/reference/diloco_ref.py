"""Independent PyTorch 1.13 mirror of the multi-island presets (dp, diloco, streaming,
decoupled; docs/algorithm.md sections 3, 4.1, 4.2, 4.4, 5) with homogeneous islands, zero latency
and infinite bandwidth: everything is synchronous and deterministic.  Reads only the files
written by dump_islands.lua (our initial parameters, our fragment plan, the settings, every
learner's batches, the eval batches); imports none of our code.
  /usr/bin/python3 scripts/reference/diloco_ref.py OUTDIR [threads]
DILOCO_REF_DOUBLE=1 runs everything in float64 (the self-checks use it to separate float32
rounding, which training amplifies, from a difference in logic).
Prints `eval STEP LOSS` every eval.every steps and `final_eval_loss X` (the global model:
every fragment's global value; for dp the one shared model).

Per learner m: its own GPT copy from Θ0, AdamW (param_groups of gpt.py), lr schedule,
gradient-norm clip and shard.  After inner step t every fragment p with t >= 1, t >= off_p,
(t - off_p) % H == 0 (off_p = p*H//P, p 0-based) merges: Δ_m = Θ̂_p − θ_m,p, weights
uniform / tokens (c_tokens) / tokens2_steps (c_tokens²/c_steps), mean or RDA (embeddings by
the weighted mean), then torch.optim.SGD on the global Θ_p with .grad = Δ.  The new Θ_p is
applied after step t + tau (never when t + tau > steps): θ = α·θ + (1 − α)·Θ_p, Θ̂_p = Θ_p,
the learner's counters of p restart; AdamW moments are kept.
"""
import json
import math
import os
import re
import sys
import time
import torch
import safetensors_io
from gpt import GPT, param_groups


def lua_pattern_to_regex(pat):
    """A Lua pattern (the subset used for tensor names) as a Python regex."""
    classes = {"a": "A-Za-z", "d": "0-9", "l": "a-z", "s": r"\s", "u": "A-Z", "w": "A-Za-z0-9",
               "x": "0-9A-Fa-f", "p": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")}
    out, i, n, in_set = [], 0, len(pat), False
    while i < n:
        c = pat[i]
        if c == "%":
            if i + 1 >= n:
                raise SystemExit(f"pattern {pat!r}: ends with %")
            d = pat[i + 1]
            if d in "fb":
                raise SystemExit(f"pattern {pat!r}: %{d} is not supported by the mirror")
            if d.lower() in classes:
                body = classes[d.lower()]
                if in_set:
                    if d.isupper():
                        raise SystemExit(f"pattern {pat!r}: %{d} inside a set is not supported")
                    out.append(body)
                else:
                    out.append(("[^" if d.isupper() else "[") + body + "]")
            else:
                out.append(re.escape(d))
            i += 2
            continue
        if in_set:
            if c == "]":
                in_set = False
                out.append("]")
            elif c == "\\":
                out.append("\\\\")
            else:
                out.append(c)
        elif c == "[":
            in_set = True
            out.append("[")
            if i + 1 < n and pat[i + 1] == "^":
                out.append("^")
                i += 1
        elif c == "-":
            out.append("*?")
        elif c == "^" and i == 0:
            out.append("^")
        elif c == "$" and i == n - 1:
            out.append("$")
        elif c in ".*+?()":
            out.append(c)
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def read_batches(path):
    with open(path, "rb") as f:
        head = f.readline().split()
        data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    return list(map(int, head)), data


class Schedule:
    """lr_at(step, total) of core/optim.c: linear warm-up, then constant, cosine or linear to min_lr."""

    def __init__(self, inner):
        self.kind, self.lr, self.min_lr = inner["schedule"], inner["lr"], inner["min_lr"]
        self.warmup = inner.get("warmup") or 0

    def __call__(self, step, total):
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        if self.kind == "constant":
            return self.lr
        q = min(max((step - self.warmup) / (total - self.warmup), 0.0), 1.0)
        f = 0.5 * (1 + math.cos(math.pi * q)) if self.kind == "cosine" else 1 - q
        return self.min_lr + (self.lr - self.min_lr) * f


def unit(x):
    n = x.norm()
    return x / n if n > 0 else torch.zeros_like(x)


def merge(deltas, weights, how, embedding):
    """One tensor's merged outer gradient from the learners' Δ (float64 accumulation)."""
    ws = sum(weights)
    if how == "mean" or embedding:
        return sum(w * d.double() for w, d in zip(weights, deltas)) / ws
    radius = sum(w * d.double().norm() for w, d in zip(weights, deltas)) / ws
    return radius * unit(sum(w * unit(d.double()) for w, d in zip(weights, deltas)))


def make_model(spec, init):
    known = ("vocab", "ctx", "dim", "layers", "heads", "tied", "mlp_ratio")
    extra = sorted(set(spec) - set(known) - {"arch", "seed"})
    if spec.get("arch") != "gpt" or extra:
        raise SystemExit(f"the mirror builds plain GPTs only (model: arch {spec.get('arch')}, options {extra})")
    model = GPT(**{k: spec[k] for k in known if k in spec})
    theirs, ours = set(init), set(dict(model.named_parameters()))
    if theirs != ours:
        raise SystemExit(f"parameter names differ: only in init.safetensors {sorted(theirs - ours)}, "
                         f"only in gpt.py {sorted(ours - theirs)}")
    model.load_state_dict(init, strict=True)
    return model


def evaluate(model, evals, T):
    model.eval()
    total, rows = 0.0, 0
    with torch.no_grad():
        for w in evals:
            total += model.loss(w[:, :T], w[:, 1:]).item() * w.shape[0]
            rows += w.shape[0]
    model.train()
    return total / rows


def main():
    out = sys.argv[1]
    torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    if os.environ.get("DILOCO_REF_DOUBLE") == "1":  # float64 throughout, to tell rounding from logic
        torch.set_default_dtype(torch.float64)
    meta = json.load(open(os.path.join(out, "meta.json")))
    plan = json.load(open(os.path.join(out, "plan.json")))
    init, _ = safetensors_io.load(os.path.join(out, "init.safetensors"))
    init = {n: t.to(torch.get_default_dtype()) for n, t in init.items()}
    M, steps, B, T = meta["learners"], meta["steps"], meta["batch"], meta["ctx"]
    inner, outer, sy = meta["inner"], meta["outer"], meta["sync"]
    preset = sy["preset"]
    if inner["kind"] != "adamw":
        raise SystemExit("the mirror trains with AdamW only")
    if sy.get("split_rows"):
        raise SystemExit("sync.split_rows = true: the mirror handles whole-tensor fragments only (split plans refused)")
    frags = plan["fragments"]
    if sorted(n for f in frags for n in f) != sorted(init):
        raise SystemExit("plan.json does not partition the tensors of init.safetensors")

    trains = []
    for m in range(1, M + 1):
        (s, b, t, _), data = read_batches(os.path.join(out, f"learner-{m}.bin"))
        assert (s, t) == (steps, T), f"learner-{m}.bin: header {s} {b} {t}"
        trains.append(data.view(steps, b, T + 1))
    (_, _, t, ne), edata = read_batches(os.path.join(out, "eval.bin"))
    rows = meta["eval"].get("rows") or [B] * ne
    evals, pos = [], 0
    for r in rows:
        evals.append(edata[pos:pos + r * (T + 1)].view(r, T + 1))
        pos += r * (T + 1)
    assert len(evals) == ne and pos == edata.numel(), "eval.bin does not match meta.json eval.rows"

    lr_at = Schedule(inner)
    betas, eps, wd, clip = (inner["beta1"], inner["beta2"]), inner["eps"], inner["weight_decay"], inner["clip"]
    every = meta["eval"]["every"]
    tokens = [trains[m].shape[1] * T for m in range(M)]

    def new_learner():
        model = make_model(meta["model"], init)
        ours = plan.get("decays")
        if ours is not None:  # our optimizer's decay flags vs gpt.py's rule
            mine = {n: p.dim() >= 2 and not n.startswith(("wte.", "wpe.")) for n, p in model.named_parameters()}
            if mine != ours:
                bad = sorted(n for n in mine if mine[n] != ours.get(n))
                raise SystemExit(f"weight-decay groups differ from ours on {bad}")
        return model, torch.optim.AdamW(param_groups(model, wd), lr=inner["lr"], betas=betas, eps=eps)

    t0 = time.time()
    if preset == "dp":
        model, opt = new_learner()
        params = list(model.parameters())
        for step in range(1, steps + 1):
            for g in opt.param_groups:
                g["lr"] = lr_at(step - 1, steps)
            grads, losses = None, []
            for m in range(M):  # each learner's gradient on its own batch, then the uniform mean
                w = trains[m][step - 1]
                model.zero_grad(set_to_none=True)
                loss = model.loss(w[:, :T], w[:, 1:])
                loss.backward()
                losses.append(loss.item())
                gs = [p.grad.detach().clone() for p in params]
                grads = gs if grads is None else [a + b for a, b in zip(grads, gs)]
            for p, g in zip(params, grads):
                p.grad = g / M
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()
            report(step, steps, losses, t0)
            if every > 0 and step % every == 0 and step < steps:
                print(f"eval {step} {evaluate(model, evals, T):.6f}", flush=True)
        print(f"final_eval_loss {evaluate(model, evals, T):.6f}")
        return

    P, H, tau, alpha = len(frags), sy["H"], sy["tau"], sy["alpha"]
    weighting, how = sy["weighting"], sy["merge"]
    if P != sy["fragments"]:
        raise SystemExit(f"plan.json has {P} fragments, meta.json sync.fragments = {sy['fragments']}")
    emb = [re.compile(lua_pattern_to_regex(p)) for p in sy.get("embeddings", ["^wte%.", "^wpe%.", "emb"])]
    is_emb = {n: any(r.search(n) for r in emb) for n in init}
    offsets = [(p * H) // P for p in range(P)]
    learners = [new_learner() for _ in range(M)]
    named = [dict(model.named_parameters()) for model, _ in learners]
    # the global Θ per fragment, its outer optimizer and version
    theta = {n: torch.nn.Parameter(init[n].clone()) for n in init}
    nesterov = outer["kind"] == "nesterov" and outer["momentum"] > 0  # Nesterov with μ = 0 is plain SGD
    outer_opt = [torch.optim.SGD([theta[n] for n in f], lr=outer["lr"], momentum=outer["momentum"],
                                 nesterov=nesterov) for f in frags]
    version = [0] * P
    base = [{n: init[n].clone() for n in init} for _ in range(M)]  # Θ̂: the last global value received
    c_steps = [[0] * P for _ in range(M)]
    c_tokens = [[0] * P for _ in range(M)]
    pending = []  # (apply after this step, fragment, {name: Θ_p})

    def global_model():
        g = make_model(meta["model"], {n: theta[n].detach() for n in theta})
        return g

    for step in range(1, steps + 1):
        losses = []
        for m, (model, opt) in enumerate(learners):
            for g in opt.param_groups:
                g["lr"] = lr_at(step - 1, steps)
            w = trains[m][step - 1]
            loss = model.loss(w[:, :T], w[:, 1:])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            losses.append(loss.item())
            for p in range(P):
                c_steps[m][p] += 1
                c_tokens[m][p] += tokens[m]
        for p in range(P):
            if not (step >= offsets[p] and (step - offsets[p]) % H == 0):
                continue
            if weighting == "uniform":
                ws = [1.0] * M
            elif weighting == "tokens":
                ws = [float(c_tokens[m][p]) for m in range(M)]
            else:
                ws = [c_tokens[m][p] ** 2 / c_steps[m][p] for m in range(M)]
            with torch.no_grad():
                for n in frags[p]:
                    deltas = [base[m][n] - named[m][n].detach() for m in range(M)]
                    # anchored at the current global (docs/algorithm.md 4.2); Θ̂ == Θ_p here since tau < H
                    deltas = [d + (theta[n].detach() - base[m][n]) for m, d in enumerate(deltas)]
                    theta[n].grad = merge(deltas, ws, how, is_emb[n]).to(theta[n].dtype)
            outer_opt[p].step()
            outer_opt[p].zero_grad(set_to_none=True)
            version[p] += 1
            if step + tau <= steps:
                pending.append((step + tau, p, {n: theta[n].detach().clone() for n in frags[p]}))
        keep = []
        for at, p, values in pending:
            if at != step:
                keep.append((at, p, values))
                continue
            with torch.no_grad():
                for m in range(M):
                    for n in frags[p]:
                        named[m][n].mul_(alpha).add_(values[n], alpha=1 - alpha)
                        base[m][n] = values[n].clone()
                    c_steps[m][p] = c_tokens[m][p] = 0
        pending = keep
        report(step, steps, losses, t0)
        if every > 0 and step % every == 0 and step < steps:
            print(f"eval {step} {evaluate(global_model(), evals, T):.6f}", flush=True)
    print(f"merges per fragment: {version}", flush=True)
    print(f"final_eval_loss {evaluate(global_model(), evals, T):.6f}")


def report(step, steps, losses, t0):
    if step % max(1, steps // 10) == 0:
        print(f"step {step} loss {sum(losses) / len(losses):.4f} ({time.time() - t0:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
