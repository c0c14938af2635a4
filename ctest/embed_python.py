"""ctest embed_python: a Python learner with a numpy model (python/diloco over libdiloco's
embedding API) joins a `diloco-lua syncer` run beside a `diloco-lua learner` process.

    python3 ctest/embed_python.py SOURCE_DIR BUILD_DIR

The recipe is an MLP classifier on Fashion-MNIST (784 -> 32 -> 10, relu), two islands,
decoupled DiLoCo.  Island 1 is `diloco-lua learner`; island 2 is this program's numpy MLP
with the same parameter names and shapes, trained by its own SGD on its own shard of the
IDX files.  Checks: both learners' contributions are merged (the syncer's summary); the
numpy learner's held-out loss falls; it ends within 20% (relative L2) of the global model
the syncer saved; a numpy learner with one hidden unit fewer is refused, the message
naming the tensor that differs, both sides'.  Then a syncer hosted in Python
(diloco.Server) serves a numpy learner of a linear model: its events are polled (joined,
merged, bye) and its global model, read back, is within 5% of the true weights; the
learner's momentum, its own state, is saved through state_dir every 50 steps and at the
finish, and a learner made again on the same state_dir loads the last one; a server's
events come to its on_event from the caller's loop (dispatch) and from the library's
thread.  Exit 0 on success; every failure printed."""

import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.join(src, "python"))
os.environ.setdefault("DILOCO_LIB", os.path.join(build, "libdiloco.so"))
import diloco  # noqa: E402

EXE = os.path.join(build, "diloco-lua")
DATA = "/usr/share/datasets/fashion-mnist"
HIDDEN, STEPS, BATCH = 32, 240, 32
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("embed_python: FAIL: " + what, flush=True)


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    _, _, _, ndim = struct.unpack(">BBBB", raw[:4])
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def mlp_params(hidden, rng):
    return {"fc.0.weight": (rng.standard_normal((hidden, 784)) * np.sqrt(2 / 784)).astype(np.float32),
            "fc.0.bias": np.zeros(hidden, np.float32),
            "head.weight": (rng.standard_normal((10, hidden)) * np.sqrt(1 / hidden)).astype(np.float32),
            "head.bias": np.zeros(10, np.float32)}


def forward(p, x):
    h = np.maximum(x @ p["fc.0.weight"].T + p["fc.0.bias"], 0)
    z = h @ p["head.weight"].T + p["head.bias"]
    z = z - z.max(axis=1, keepdims=True)
    prob = np.exp(z)
    prob /= prob.sum(axis=1, keepdims=True)
    return h, prob


def loss(p, x, y):
    _, prob = forward(p, x)
    return float(-np.log(prob[np.arange(len(y)), y] + 1e-12).mean())


def sgd_step(p, x, y, lr):
    h, prob = forward(p, x)
    d = prob
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    gW2, gb2 = d.T @ h, d.sum(0)
    dh = (d @ p["head.weight"]) * (h > 0)
    gW1, gb1 = dh.T @ x, dh.sum(0)
    # in place: the library holds the arrays' memory
    p["head.weight"] -= lr * gW2
    p["head.bias"] -= lr * gb2
    p["fc.0.weight"] -= lr * gW1
    p["fc.0.bias"] -= lr * gb1


def safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        body = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(body[a:b], np.float32).reshape(v["shape"])
    return out


tmp = tempfile.mkdtemp(prefix="diloco-embed-python.")
syncer = learner = None
try:
    recipe = os.path.join(tmp, "mlp.lua")
    with open(recipe, "w") as f:
        f.write("""local diloco = require "diloco"
return diloco.recipe {
  name = "embedpy",
  model = { arch = "mlp", input = 784, hidden = { %d }, classes = 10 },
  data = diloco.data.fashion { batch = %d },
  inner = diloco.optim.adamw { lr = 3e-3, warmup = 10 },
  outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 },
  sync = { preset = "decoupled", H = 8, fragments = 2 },
  islands = { count = 2 },
  runtime = { heartbeat = "0.25s", timeout = "3s" },
  steps = %d, eval = { every = 0, batches = 4 }, threads = 1,
}
""" % (HIDDEN, BATCH, STEPS))
    secret = os.path.join(tmp, "secret")
    with open(secret, "w") as f:
        f.write("embed-python-secret-0123456789\n")
    os.chmod(secret, 0o600)
    addr = os.path.join(tmp, "address")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    syncer = subprocess.Popen([EXE, "syncer", recipe, "--listen", "127.0.0.1:0", "--address-file", addr,
                               "--secret-file", secret, "--out", os.path.join(tmp, "run"), "--quiet"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    # the diloco-lua learner trains half as many steps, so that it leaves before the numpy
    # one and the final global model is the numpy learner's last merge, not the other
    # learner's training on after it left
    learner = subprocess.Popen([EXE, "learner", recipe, "--connect", "@" + addr, "--id", "1", "--secret-file", secret,
                                "--set", "steps=%d" % (STEPS // 2), "--out", os.path.join(tmp, "learner-1"),
                                "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)

    # the data: the test split held out, a shard of the training split of its own
    xs = ((idx(os.path.join(DATA, "train-images-idx3-ubyte.gz")).reshape(-1, 784) / 255.0 - 0.2860) / 0.3530)
    ys = idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    xt = ((idx(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")).reshape(-1, 784)[:1000] / 255.0 - 0.2860) / 0.3530)
    yt = idx(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)[:1000]
    xs, xt = xs.astype(np.float32), xt.astype(np.float32)
    rng = np.random.default_rng(7)

    # a layout of another model (one hidden unit fewer) is refused, naming the tensor, both sides'
    try:
        diloco.Learner(mlp_params(HIDDEN - 1, rng), connect="@" + addr, secret_file=secret,
                       run={"sync": {"preset": "decoupled", "H": 8, "fragments": 2}}, join_timeout=20)
        check(False, "a learner of another layout joined")
    except diloco.Error as e:
        want = ["the layout differs at tensor 0: this server's is 'fc.0.weight' [%d, 784]" % HIDDEN,
                "this learner's is 'fc.0.weight' [%d, 784]" % (HIDDEN - 1)]
        check(all(w in str(e) for w in want), "another layout's refusal does not name the tensor: %s" % e)

    p = mlp_params(HIDDEN, rng)
    run = {"sync": {"preset": "decoupled", "H": 8, "fragments": 2}, "outer": {"lr": 0.7, "momentum": 0.9}}
    lr_ = diloco.Learner(p, connect="@" + addr, secret_file=secret, run=run, id=2, join_timeout=60, heartbeat=0.25)
    l0 = loss(p, xt, yt)
    shard = rng.permutation(len(xs))[:STEPS * BATCH]
    for step in range(STEPS):
        b = shard[step * BATCH:(step + 1) * BATCH]
        sgd_step(p, xs[b], ys[b], 0.05)
        time.sleep(0.005)  # a step of a real trainer takes time
        lr_.step_done(BATCH)
    # it trains on until the diloco-lua learner has left, so that the final global model is
    # this learner's last merge: under load a sanitized diloco-lua learner of half the steps
    # can still be the slower one (0.40 apart once, ASan beside stress-ng --cpu 2)
    extra, deadline = 0, time.time() + 600
    while learner.poll() is None and time.time() < deadline:
        k = extra % STEPS
        b = shard[k * BATCH:(k + 1) * BATCH]
        sgd_step(p, xs[b], ys[b], 0.05)
        time.sleep(0.005)
        lr_.step_done(BATCH)
        extra += 1
    lr_.finish(30)
    l1 = loss(p, xt, yt)
    print("embed_python: the numpy learner's held-out loss %.4f -> %.4f, %d merged fragments applied, %d steps "
          "past its %d while the other trained on" % (l0, l1, lr_.applied, extra, STEPS), flush=True)
    lr_.close()
    check(l1 < 0.8 * l0, "the numpy learner's loss %.4f did not fall below 0.8 x %.4f" % (l1, l0))
    check(learner.wait(timeout=120) == 0, "diloco-lua learner failed:\n" + learner.stdout.read().decode())
    check(syncer.wait(timeout=120) == 0, "diloco-lua syncer failed:\n" + syncer.stdout.read().decode())
    with open(os.path.join(tmp, "run", "metrics.jsonl")) as f:
        summary = [json.loads(line) for line in f][-1]
    merged = [pl.get("merged", 0) for pl in summary.get("per_learner", [])]
    print("embed_python: the syncer merged %s contributions from the two learners" % merged, flush=True)
    check(len(merged) == 2 and all(m > 0 for m in merged), "contributions merged per learner: %s" % merged)
    g = safetensors(os.path.join(tmp, "run", "model.safetensors"))
    num = sum(float(((p[k] - g[k]) ** 2).sum()) for k in p)
    den = sum(float((g[k] ** 2).sum()) for k in p)
    rel = (num / den) ** 0.5
    print("embed_python: the numpy learner is %.4f (relative L2) from the global model; its loss %.4f" %
          (rel, loss(g, xt, yt)), flush=True)
    # (the final global model takes in the numpy learner's last contributions, the other
    # learner gone: only the outer step and the merges it had not applied yet part them)
    check(rel < 0.2, "the numpy learner ends %.4f (relative L2) from the global model" % rel)

    # a syncer hosted in Python (diloco.Server) with a numpy learner of its own: a linear
    # model y = w.x, merged, polled, and the global model read back
    rng2 = np.random.default_rng(3)
    wt = rng2.standard_normal(16).astype(np.float32)
    w0 = np.zeros(16, np.float32)
    srv = diloco.Server({"w": w0}, learners=1, secret="python-server-secret-0123456789",
                        run={"sync": {"preset": "streaming", "H": 4, "fragments": 1, "tau": 1}}, timeout=3.0,
                        heartbeat=0.25)
    w, v = np.zeros(16, np.float32), np.zeros(16, np.float32)  # v: the momentum, the host's own state
    state = os.path.join(tmp, "host-state")
    saved, loaded = [], []

    def save_v(path, step):
        with open(path, "wb") as f:
            np.save(f, v)
        saved.append(step)

    def load_v(path, step):
        with open(path, "rb") as f:
            loaded.append((step, np.load(f)))

    lrun = {"sync": {"preset": "streaming", "H": 4, "fragments": 1, "tau": 1}}
    with diloco.Learner({"w": w}, connect="127.0.0.1:%d" % srv.port, secret="python-server-secret-0123456789",
                        run=lrun, heartbeat=0.25, id=1, state_dir=state, save_state=save_v, load_state=load_v,
                        save_every=50) as ln:
        check(ln.id == 1, "the learner's id is %s, expected 1 (numbered as --id numbers them)" % ln.id)
        for step in range(120):
            x = rng2.standard_normal((8, 16)).astype(np.float32)
            v[:] = 0.5 * v + 2 * x.T @ (x @ w - x @ wt) / 8
            w -= 0.05 * v
            ln.step_done(8)
        ln.finish(10)
    # restarted with the same state_dir: the host's momentum of the finish comes back
    w2 = np.zeros(16, np.float32)
    with diloco.Learner({"w": w2}, connect="127.0.0.1:%d" % srv.port, secret="python-server-secret-0123456789",
                        run=lrun, heartbeat=0.25, id=1, state_dir=state, save_state=save_v, load_state=load_v):
        pass
    check(len(saved) == 3 and saved[-1] >= 120, "host state saves at steps %s (expected 50, 100 and the finish)" % saved)
    check(len(loaded) == 1 and loaded[0][0] == saved[-1] and np.array_equal(loaded[0][1], v),
          "a restarted learner loaded %s, expected the state of step %s" % ([s for s, _ in loaded], saved[-1:]))
    # the layout of every learner's state: the checkpoint, and the host's file it names
    check(sorted(os.listdir(state)) == ["checkpoint-%08d.host" % saved[-1], "checkpoint-%08d.safetensors" % saved[-1]],
          "the state directory holds %s" % sorted(os.listdir(state)))
    kinds, joined = [], []
    while True:
        ev = srv.poll(2.0)
        if ev is None:
            break
        kinds.append(ev["kind"])
        if ev["kind"] == "joined":
            joined.append(ev["learner"])
        if ev["kind"] == "bye":
            break
    g = np.zeros(16, np.float32)
    srv.global_model({"w": g})
    srv.close()
    err = float(np.linalg.norm(g - wt) / np.linalg.norm(wt))
    print("embed_python: diloco.Server saw %s; its global model is %.4f (relative) from the true weights"
          % (sorted(set(kinds)), err), flush=True)
    check("joined" in kinds and "merged" in kinds and "bye" in kinds, "diloco.Server events: %s" % kinds)
    check(set(joined) == {1}, "diloco.Server's joined events name learners %s, expected 1" % joined)
    check(err < 0.05, "diloco.Server's global model is %.4f from the true weights" % err)

    # the events through on_event: from the caller's loop (dispatch), and from the library's thread
    for threaded in (False, True):
        seen = []
        srv = diloco.Server({"w": w0}, learners=1, secret="python-server-secret-0123456789", run=lrun,
                            timeout=3.0, heartbeat=0.25, on_event=lambda ev: seen.append(ev["kind"]),
                            event_thread=threaded)
        w3 = np.zeros(16, np.float32)
        with diloco.Learner({"w": w3}, connect="127.0.0.1:%d" % srv.port, secret="python-server-secret-0123456789",
                            run=lrun, heartbeat=0.25) as ln:
            for step in range(40):
                w3 -= 0.01 * w3
                ln.step_done(8)
                if not threaded:
                    srv.dispatch(0)
            ln.finish(10)
        deadline = time.time() + 5
        while "bye" not in seen and time.time() < deadline:
            if threaded:
                time.sleep(0.01)
            else:
                srv.dispatch(0.1)
        srv.close()
        check(seen[:1] == ["joined"] and "merged" in seen and seen[-1:] == ["bye"],
              "diloco.Server on_event (event_thread=%s) saw %s" % (threaded, seen))

    # a syncer in two shards hosted in Python (docs/shards.md): the model in two tensors of
    # two fragments, each shard merging its own; the learner given both addresses
    srun = {"sync": {"preset": "streaming", "H": 4, "fragments": 2, "tau": 1}}
    a0, b0 = np.zeros(64, np.float32), np.zeros(64, np.float32)
    shards = [diloco.Server({"a": a0, "b": b0}, learners=1, secret="python-server-secret-0123456789", run=srun,
                            timeout=3.0, heartbeat=0.25, shard=k, shards=2) for k in (1, 2)]
    a, b = np.zeros(64, np.float32), np.zeros(64, np.float32)
    with diloco.Learner({"a": a, "b": b}, connect=",".join("127.0.0.1:%d" % sv.port for sv in shards),
                        secret="python-server-secret-0123456789", run=srun, heartbeat=0.25, id=1) as ln:
        for step in range(40):
            a += 0.01 * (1 - a)
            b += 0.01 * (2 - b)
            ln.step_done(8)
        ln.finish(10)
    merged = []
    for sv in shards:
        frags = set()
        deadline = time.time() + 5
        while time.time() < deadline:
            ev = sv.poll(0.5)
            if ev is None or ev["kind"] == "bye":
                break
            if ev["kind"] == "merged":
                frags.add(ev["fragment"])
        merged.append(frags)
        sv.close()
    check(len(merged[0]) == 1 and len(merged[1]) == 1 and merged[0] != merged[1],
          "two shards merged fragments %s: expected one each, not the same" % merged)

    # a syncer and its standby hosted in Python (docs/shards.md, "Standbys"): the standby
    # attaches, records every merge of the primary, and ends with it
    sec = "python-server-secret-0123456789"
    pri = diloco.Server({"a": a0, "b": b0}, learners=1, secret=sec, run=srun, timeout=3.0, heartbeat=0.25)
    sb = diloco.Server({"a": a0, "b": b0}, learners=1, secret=sec, run=srun, timeout=3.0, heartbeat=0.25,
                       standby_of="127.0.0.1:%d" % pri.port, lease=0.5)

    def kinds_until(sv, want, secs):
        seen = []
        deadline = time.time() + secs
        while time.time() < deadline:
            ev = sv.poll(0.2)
            if ev is not None:
                seen.append((ev["kind"], ev["text"], ev["fragment"], ev["version"]))
                if want(ev):
                    break
        return seen

    got = kinds_until(pri, lambda ev: ev["kind"] == "standby", 10)
    check(got and got[-1][0] == "standby" and "attached" in got[-1][1], "the primary saw its standby attach: %s" % got)
    a, b = np.zeros(64, np.float32), np.zeros(64, np.float32)
    with diloco.Learner({"a": a, "b": b}, connect="127.0.0.1:%d|127.0.0.1:%d" % (pri.port, sb.port), secret=sec,
                        run=srun, heartbeat=0.25, id=1) as ln:
        for step in range(40):
            a += 0.01 * (1 - a)
            ln.step_done(8)
        ln.finish(10)
    got = kinds_until(pri, lambda ev: ev["kind"] == "bye", 5)
    ev = pri.poll(1.0)
    while ev is not None:  # (merges the learner's last contributions made after its bye came)
        got.append((ev["kind"], ev["text"], ev["fragment"], ev["version"]))
        ev = pri.poll(1.0)
    primary_merges = set((e[2], e[3]) for e in got if e[0] == "merged")
    pri.close()
    seen = kinds_until(sb, lambda ev: ev["kind"] == "standby" and "ends" in ev["text"], 10)
    # every merge the primary reported is on the standby's record (it held each before the
    # primary reported it; a last one the primary had not reported yet may be there too)
    replicas = set((e[2], e[3]) for e in seen if e[0] == "merged")
    check(len(primary_merges) > 0 and primary_merges <= replicas and seen[-1][0] == "standby",
          "the standby recorded %d merges, the primary reported %d (%d missing), and ended: %s" %
          (len(replicas), len(primary_merges), len(primary_merges - replicas), seen[-2:]))
    sb.close()
finally:
    for proc in (learner, syncer):
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print("embed_python: %d checks failed" % len(failures))
    sys.exit(1)
print("embed_python: ok")
