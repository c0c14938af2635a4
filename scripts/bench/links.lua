-- scripts/bench/links.lua, run by scripts/bench/links: the second table of issue 18's
-- chaos benchmark.  Four learner processes on one host whose links to the syncer are
-- capped (islands.bandwidth and islands.latency, shaped both ways on the syncer's side:
-- docs/runtime.md, "Links"), trained as Decoupled DiLoCo with int4 outer gradients and as
-- data parallel (f32 gradients every step), the same recipe, steps and seed.  Prints, per
-- mode, the wall time until the global model's eval loss first reaches TARGET (the run is
-- stopped there, with SIGTERM, so a slow mode costs no more than it takes), the final eval
-- loss when it ran to the end, its wall time, seconds per step and the bytes each way.
--
-- The eval loss over time: decoupled, the run's own evaluations of the global model
-- (eval.every steps, OUT/metrics.jsonl); dp, whose syncer holds no model, learner 1's
-- checkpoints (every eval.every steps: in dp every learner holds the same model),
-- evaluated here afterwards on the same held-out batches, each at the wall time its
-- checkpoint was written.  Wall time counts from the start of `run` (start-up included).
-- Usage: diloco-lua scripts/bench/links.lua RECIPE STEPS TARGET BANDWIDTH LATENCY EVAL_EVERY OUTDIR
local diloco = require "diloco"
local recipe, steps, target, bandwidth, latency, every, tmp = arg[1], tonumber(arg[2]), tonumber(arg[3]), arg[4],
  arg[5], tonumber(arg[6]), arg[7]
assert(recipe and steps and target and bandwidth and latency and every and tmp,
  "usage: diloco-lua scripts/bench/links.lua RECIPE STEPS TARGET BANDWIDTH LATENCY EVAL_EVERY OUTDIR")
local exe = diloco.proc.self_exe()

local COMMON = { "steps=" .. steps, "islands.count=4", "checkpoint.minutes=0", "threads=1", "runtime.heartbeat=0.5s",
  "runtime.timeout=5s", "islands.bandwidth=" .. bandwidth, "islands.latency=" .. latency,
  "runtime.emulate_links=true" }

-- The recipe as the runs see it (the same --set), for the evaluations of dp's checkpoints.
local function effective(sets)
  local r = assert(diloco.recipe.load(recipe))
  for _, list in ipairs { COMMON, sets } do
    for _, s in ipairs(list) do diloco.recipe.set(r, s) end
  end
  return assert(diloco.recipe.validate(r))
end

-- The events written to path since byte pos (whole lines only), and the new pos.
local function lines_from(path, pos)
  local fh = io.open(path, "r")
  if not fh then return {}, pos end
  fh:seek("set", pos)
  local text = fh:read("a") or ""
  fh:close()
  local out = {}
  for line in text:gmatch("([^\n]*)\n") do
    out[#out + 1] = diloco.json_decode(line)
    pos = pos + #line + 1
  end
  return out, pos
end

-- Runs one mode, following its eval loss as it goes (decoupled: the run's evaluations of
-- the global model; dp: learner 1's checkpoints, evaluated here), and stops the run
-- (SIGTERM: it finishes cleanly) once the loss is at or below TARGET.  Returns the
-- summary, the curve {step, loss, wall_s} and whether it was stopped at the target.
local function go(name, m)
  local out = tmp .. "/" .. name
  local argv = { exe, "run", recipe, "--out", out, "--overwrite", "--quiet" }
  for _, list in ipairs { COMMON, m.sets } do
    for _, s in ipairs(list) do
      argv[#argv + 1] = "--set"
      argv[#argv + 1] = s
    end
  end
  argv.stdout, argv.stderr = out .. ".log", out .. ".log"
  argv.env = { OMP_NUM_THREADS = "1", OPENBLAS_NUM_THREADS = "1" }
  local t0 = os.time()
  local pid = assert(diloco.proc.spawn(argv))
  local curve, pos, lpos, stopped, st = {}, 0, 0, false, nil
  local r, model, loaders
  if m.key == "dp" then
    r = effective(m.sets)
    model = diloco.train.build_model(r.model, r.seed)
    loaders = diloco.data.open(r.data, 1, r.islands.count, r.seed)
  end
  local start -- the run's start (unix seconds), from its first event: wall_s = time - start
  repeat
    st = diloco.proc.wait(pid, false)
    local evs
    evs, pos = lines_from(out .. "/metrics.jsonl", pos)
    for _, e in ipairs(evs) do
      if e.wall_s and e.time and not start then start = e.time - e.wall_s end
      if e.event == "eval" and m.key ~= "dp" then curve[#curve + 1] = { step = e.step, loss = e.loss, wall_s = e.wall_s } end
    end
    if m.key == "dp" then
      local lev
      lev, lpos = lines_from(out .. "/learner-1/metrics.jsonl", lpos)
      for _, e in ipairs(lev) do
        if e.event == "checkpoint" and e.path and start then
          local t = diloco.load_safetensors(e.path)
          if t then
            for _, p in ipairs(model:parameters()) do p[2]:copy(assert(t[p[1]], "checkpoint lacks " .. p[1])) end
            local ev = diloco.train.evaluate(model, loaders, r.eval.batches)
            curve[#curve + 1] = { step = e.step, loss = ev.loss, wall_s = e.time - start }
          end
        end
      end
    end
    local last = curve[#curve]
    if not st and not stopped and last and last.loss <= target then
      diloco.proc.signal(pid, "TERM")
      stopped = true
    end
    if not st then diloco.proc.sleep(1) end
  until st
  if not ((st.exited == 0) or (stopped and st.exited == 143)) then
    error(string.format("%s failed (%s): see %s.log", name, diloco.json_encode(st), out))
  end
  local ev = {}
  for line in io.lines(out .. "/metrics.jsonl") do ev[#ev + 1] = diloco.json_decode(line) end
  local summary = ev[#ev]
  if not stopped and summary.final_eval_loss and (not curve[#curve] or curve[#curve].step ~= steps) then
    curve[#curve + 1] = { step = steps, loss = summary.final_eval_loss, wall_s = summary.wall_s }
  end
  return summary, curve, stopped, os.time() - t0
end

local function first_below(curve)
  for _, c in ipairs(curve) do
    if c.loss <= target then return c end
  end
end

local modes = {
  { name = "decoupled, int4", key = "decoupled", sets = { "sync.preset=decoupled", "sync.codec=int4",
    "eval.every=" .. every } },
  { name = "dp (f32)", key = "dp", sets = { "sync.preset=dp", "sync.fragments=1", "eval.every=0",
    "checkpoint.every=" .. every, "checkpoint.keep=100000" } },
}
print(string.format("recipe %s, 4 learners x %d steps, every link %s and %s one way (both directions shaped on the "
  .. "syncer's side); target eval loss %.3f, the eval loss every %d steps", recipe, steps, bandwidth, latency, target,
  every))
print("| mode | wall s to target | step at target | final eval | wall s | s / step | MB up | MB down |")
print("|---|---|---|---|---|---|---|---|")
for _, m in ipairs(modes) do
  local s, curve, stopped = go(m.key, m)
  local hit = first_below(curve)
  print(string.format("| %s | %s | %s | %s | %.1f | %.3f | %.1f | %.1f |", m.name,
    hit and string.format("%.1f", hit.wall_s) or "not reached", hit and tostring(hit.step) or "-",
    stopped and "(stopped at the target)" or string.format("%.4f", s.final_eval_loss or 0), s.wall_s,
    s.wall_s / math.max(1, s.steps / 4), (s.bytes_up or 0) / 1e6, (s.bytes_down or 0) / 1e6))
  local pts = {}
  for _, c in ipairs(curve) do pts[#pts + 1] = string.format("%s:%.3f@%.0fs", tostring(c.step), c.loss, c.wall_s) end
  print("  " .. m.name .. " eval curve (step:loss@wall): " .. table.concat(pts, " "))
end
