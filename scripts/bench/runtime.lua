-- scripts/bench/runtime.lua, run by scripts/bench/runtime: what the real runtime costs,
-- side by side in one invocation on this machine.
--   1. cluster tokens/s of `run` with 2 learner processes at one thread each against two
--      independent one-thread single-island `run`s started at the same time (goal >= 0.95);
--   2. each learner's share of its loop spent waiting for the network and inside
--      step_done (goal <= 1% on healthy loopback links);
--   3. the share inside step_done with int4 contributions, encoded on the learner's codec
--      thread (the default) and inside step_done (runtime.codec_thread=false);
--   4. rejoin latency: a learner killed mid-run, restarted after 1 s: restart -> joined
--      (the whole model received) and restart -> its first contribution merged.
-- Rates are steady state: tokens between the first and the last step event over the wall
-- time between them, for the single runs and the learners alike (no start-up, no final
-- save).  Rounds alternate reference and ours; medians are reported.
-- Usage: diloco-lua scripts/bench/runtime.lua RECIPE STEPS ROUNDS OUTDIR
local diloco = require "diloco"
local recipe, steps, rounds, tmp = arg[1], math.tointeger(tonumber(arg[2])), math.tointeger(tonumber(arg[3])), arg[4]
local exe = diloco.proc.self_exe()
local bench = dofile(arg[0]:match("^(.*)/[^/]*$") .. "/common.lua")
local events, rate, median = bench.events, bench.rate, bench.median
local common = { "--set", "eval.every=0", "--set", "checkpoint.minutes=0", "--set", "threads=1", "--quiet",
  "--overwrite", "--set", "steps=" .. steps, "--set", "log.every=" .. math.max(1, steps // 40) }

local function spawn(args, log)
  local argv = { exe }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  for _, a in ipairs(common) do argv[#argv + 1] = a end
  argv.stdout, argv.stderr = log, log
  argv.env = { OMP_NUM_THREADS = "1", OPENBLAS_NUM_THREADS = "1" }
  return assert(diloco.proc.spawn(argv))
end

local function wait_ok(pid, log)
  local st = diloco.proc.wait(pid, true)
  if st.exited ~= 0 then
    local f = io.open(log)
    error(string.format("%s failed (%s): %s", log, diloco.json_encode(st), f and f:read("a") or ""))
  end
end

local ref, ours, waits, calls = {}, {}, {}, {}
for round = 1, rounds do
  local a = spawn({ "run", recipe, "--out", tmp .. "/ref1" }, tmp .. "/ref1.log")
  local b = spawn({ "run", recipe, "--out", tmp .. "/ref2" }, tmp .. "/ref2.log")
  wait_ok(a, tmp .. "/ref1.log")
  wait_ok(b, tmp .. "/ref2.log")
  local r = rate(tmp .. "/ref1/metrics.jsonl") + rate(tmp .. "/ref2/metrics.jsonl")
  local c = spawn({ "run", recipe, "--out", tmp .. "/ours", "--set", "islands.count=2" }, tmp .. "/ours.log")
  wait_ok(c, tmp .. "/ours.log")
  local o = 0
  for m = 1, 2 do
    local path = string.format("%s/ours/learner-%d/metrics.jsonl", tmp, m)
    o = o + rate(path)
    local ev = events(path)
    local s = ev[#ev]
    local first
    for _, e in ipairs(ev) do
      if e.event == "step" then first = first or e end
    end
    local loop = s.wall_s - first.wall_s
    waits[#waits + 1] = s.wait_s / loop
    calls[#calls + 1] = s.step_done_s / loop
  end
  ref[#ref + 1], ours[#ours + 1] = r, o
  print(string.format("round %d: two single runs %.0f tokens/s, run with 2 learners %.0f tokens/s, ratio %.3f", round, r,
    o, o / r))
end
local R, O = median(ref), median(ours)
print(string.format("cluster tokens/s, medians: ours %.0f / reference %.0f = %.3f  (goal >= 0.95)", O, R, O / R))
local wmax, cmax = 0, 0
for i = 1, #waits do
  wmax, cmax = math.max(wmax, waits[i]), math.max(cmax, calls[i])
end
print(string.format("learners' wait share: median %.4f, max %.4f  (goal <= 0.01); in step_done: median %.4f, max %.4f",
  median(waits), wmax, median(calls), cmax))

-- the compute thread's share inside step_done with int4 contributions (quantization and
-- error feedback: the encode with work in it), encoded on the codec thread (the default)
-- against inside step_done (runtime.codec_thread=false), rounds alternating
local function call_share(out)
  local xs = {}
  for m = 1, 2 do
    local ev = events(string.format("%s/learner-%d/metrics.jsonl", out, m))
    local s, first = ev[#ev], nil
    for _, e in ipairs(ev) do
      if e.event == "step" then first = first or e end
    end
    xs[#xs + 1] = s.step_done_s / (s.wall_s - first.wall_s)
  end
  return xs
end
local share = { [true] = {}, [false] = {} }
for round = 1, rounds do
  for _, thread in ipairs { true, false } do
    local out = string.format("%s/codec-%s", tmp, tostring(thread))
    local c = spawn({ "run", recipe, "--out", out, "--set", "islands.count=2", "--set", "sync.codec=int4", "--set",
      "runtime.codec_thread=" .. tostring(thread) }, out .. ".log")
    wait_ok(c, out .. ".log")
    for _, x in ipairs(call_share(out)) do table.insert(share[thread], x) end
  end
end
local on, off = median(share[true]), median(share[false])
print(string.format("int4 contributions, share of the loop inside step_done: codec thread %.4f, on the compute thread "
  .. "%.4f (ratio %.2f)", on, off, on / off))

-- rejoin latency
local kill_at = 4
local c = spawn({ "run", recipe, "--out", tmp .. "/kill", "--set", "islands.count=2", "--set",
  "chaos={{at='" .. kill_at .. "s',kill=2,down='1s'}}" }, tmp .. "/kill.log")
wait_ok(c, tmp .. "/kill.log")
local joined, recovered
for _, e in ipairs(events(tmp .. "/kill/metrics.jsonl")) do
  if e.event == "fault" and e.kind == "joined" and e.latency then joined = joined or e.latency end
  if e.event == "fault" and e.kind == "recovered" then recovered = recovered or e.latency end
end
print(string.format("rejoin after a kill: restart -> joined %.3f s, restart -> first contribution merged %.3f s",
  joined or -1, recovered or -1))
