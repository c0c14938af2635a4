-- scripts/bench/chaos.lua, run by scripts/bench/chaos: one recipe under one seeded
-- failure policy on real processes, as non-elastic data parallel (a failure stops everyone
-- until it is back: runtime.elastic = false), elastic data parallel, blocking DiLoCo and
-- Decoupled DiLoCo, side by side in one invocation, each beside sim's prediction for the
-- same recipe and schedule.  Prints goodput, uptime, the healthy learners' idle share,
-- final eval loss and wall time.  Goals: decoupled healthy-learner idle <= 2%, decoupled
-- goodput >= 3x non-elastic dp, real goodput within 5 points of sim's, final loss within 3%.
--
-- The policy: each learner is killed at Poisson times (mean time between failures MTBF,
-- down DOWN, seeded): faults the syncer sees at once (the connection drops).  Learner 1 is
-- paused at 15 s and learner 3's link is cut at 30 s, each for DOWN: faults the syncer
-- sees only by timeout (runtime.timeout = 3 s).  sim pauses and cuts as run does, with the
-- same timeout (islands.timeout = 3 s).
-- sim's step time is the real decoupled run's measured one, so the schedule's seconds mean
-- the same in both, and its links are free as loopback is (the recipe's 20 ms latency
-- would be a quarter of a step at this step time).  Both dp modes checkpoint every 10 steps: in non-elastic dp a failure
-- rolls every learner back to their newest common checkpoint (docs/runtime.md), and the
-- rolled-back steps are lost work, not goodput; in elastic dp a restarted learner starts
-- from its newest checkpoint and replays the averaged gradients of the steps since.  A second table says where each mode's wall time went
-- (per learner, the mean over the learners: training, waiting for the network, start-up of its
-- processes, down, paused, held, done before the run ended; the rest is what the
-- learners' metrics do not see within the training window, which the final evaluation
-- and save of the global model follow), with the steps non-elastic dp rolled back and
-- those elastic dp's restarted learners skipped unreplayed (their own summaries).
-- A third table runs sim again for decoupled at the speeds that run's learners computed at
-- (each one's tokens over its training seconds, relative to the fastest, whose step time
-- is sim's): four learners on two cores do not get equal shares, the survivors of a kill
-- get more, and a real run ends when the schedule reaches STEPS, which moves with the
-- fastest learner (the slower ones catch up with it, learner.h).
-- A fourth table runs sim for blocking diloco and decoupled on the host's cores
-- (islands.cores = nproc, docs/sim.md "Shared cores"): a step that starts while n learners
-- compute lasts n / cores of a step on a core of its own, which is the no-fault run's
-- step time x cores / M (its M learners computed all the time); a learner that is down,
-- or waits at a round, leaves its core to the others, as the kernel does; and each
-- learner stops when its schedule step reaches STEPS, the run when every live one has
-- (islands.stop = "steps"), as a real run ends, so that the survivors' extra speed ends
-- the run sooner instead of adding steps to a fixed horizon.
-- sim's islands.jitter is the spread of the real steps: the coefficient of variation of
-- the no-fault run's per-step compute time (its learners log every step), unless JITTER
-- says otherwise (a number; 0: sim's islands step in lockstep, as before it was measured).
-- Usage: diloco-lua scripts/bench/chaos.lua RECIPE STEPS MTBF DOWN OUTDIR [SEED [JSON [JITTER [LEARNERS]]]]
-- (SEED: the policy's, 7; JSON: a file to write every mode's summary and sim's into, for
-- scripts/experiments/chaos.lua; "-" for none; JITTER "-": the measured spread; LEARNERS:
-- how many learner processes, 4 unless said: the paper's goodput figures are for 8)
local diloco = require "diloco"
local bench = dofile(arg[0]:match("^(.*)/[^/]*$") .. "/common.lua")
local recipe, steps, mtbf, down, tmp = arg[1], tonumber(arg[2]), arg[3], arg[4], arg[5]
local seed = math.tointeger(tonumber(arg[6] or "7")) or 7 -- the failure policy's
local json_out = arg[7] ~= "-" and arg[7] or nil
local jitter_arg = arg[8] and arg[8] ~= "-" and assert(tonumber(arg[8]), "JITTER: expected a number >= 0 or -") or nil
local M = math.tointeger(tonumber(arg[9] or "4"))
if not M or M < 4 then error("LEARNERS: " .. tostring(arg[9]) .. ": expected a whole number >= 4 (learner 3's link is cut)") end
local exe = diloco.proc.self_exe()
local TIMEOUT = "3s" -- run's runtime.timeout and sim's islands.timeout: a paused or cut learner is lost after it

local function events(path)
  local out = {}
  for line in io.lines(path) do out[#out + 1] = diloco.json_decode(line) end
  return out
end

local function go(cmd, name, sets)
  local argv = { exe, cmd, recipe, "--out", tmp .. "/" .. name, "--overwrite", "--quiet", "--set", "steps=" .. steps,
    "--set", "islands.count=" .. M, "--set", "eval.every=0", "--set", "checkpoint.minutes=0", "--set", "threads=1",
    "--set", "runtime.heartbeat=0.5s", "--set", "runtime.timeout=" .. TIMEOUT,
    "--set", "log.every=5" } -- (a killed learner's steps since its last step event are not in the accounting)
  for _, s in ipairs(sets) do
    argv[#argv + 1] = "--set"
    argv[#argv + 1] = s
  end
  argv.stdout, argv.stderr = tmp .. "/" .. name .. ".log", tmp .. "/" .. name .. ".log"
  argv.env = { OMP_NUM_THREADS = "1", OPENBLAS_NUM_THREADS = "1" }
  local pid = assert(diloco.proc.spawn(argv))
  local st = diloco.proc.wait(pid, true)
  if st.exited ~= 0 then error(name .. " failed: see " .. tmp .. "/" .. name .. ".log") end
  local ev = events(tmp .. "/" .. name .. "/metrics.jsonl")
  local summary = ev[#ev]
  if cmd == "run" then -- what each learner's own summaries say (its last process's): replays, rollbacks
    summary.learner_summaries = {}
    for m = 1, M do
      local ok, lev = pcall(events, string.format("%s/%s/learner-%d/metrics.jsonl", tmp, name, m))
      local last = ok and lev[#lev] or nil
      summary.learner_summaries[m] = last and last.event == "summary" and { replayed = last.replayed,
        unreplayed = last.unreplayed, rollbacks = last.rollbacks, steps = last.steps } or diloco.json_null
    end
  end
  return summary, ev
end

-- the mean idle share of the learners while they were up: what another learner's fault
-- cost them (a learner's idle counts its waits for the network, never its own down time)
local function healthy_idle(summary)
  local sum, n = 0, 0
  for _, p in ipairs(summary.per_learner or {}) do
    if p.idle then sum, n = sum + p.idle, n + 1 end
  end
  return n > 0 and sum / n or nil
end

-- A run's learners' compute speeds: each one's tokens over its training seconds (all its
-- processes), relative to the learner the run's schedule follows, and that one's step
-- time; nil without them.  The schedule follows the fastest learner in a non-blocking run
-- (the slower ones catch up with it, learner.h) and the slowest in a blocking one (every
-- round waits for it).
local function measured_speeds(r, blocking)
  local rates, ref = {}, nil
  for m, p in ipairs(r.per_learner or {}) do
    if not (p.tokens_per_s and p.tokens_per_s > 0) then return nil end
    rates[m] = p.tokens_per_s
    ref = ref and (blocking and math.min(ref, p.tokens_per_s) or math.max(ref, p.tokens_per_s)) or p.tokens_per_s
  end
  if #rates ~= M then return nil end
  local list, parts = {}, {}
  for m, x in ipairs(rates) do
    list[m] = x / ref
    parts[m] = string.format("%.4f", list[m])
  end
  return { list = list, text = "{" .. table.concat(parts, ",") .. "}", step_time = 1024 / ref }
end

local every = {}
for m = 1, M do every[m] = tostring(m) end
local chaos = string.format("{random={mtbf=%q,down=%q,learners={%s}},seed=%d,{at='15s',pause=1,down=%q},"
  .. "{at='30s',cut=3,down=%q}}", mtbf, down, table.concat(every, ","), seed, down, down)
local sim_chaos = chaos -- (sim pauses as run does, docs/sim.md "Faults")
local modes = {
  { name = "dp, non-elastic", sets = { "sync.preset=dp", "sync.fragments=1", "runtime.elastic=false",
    "checkpoint.every=10" } },
  { name = "dp, elastic", sets = { "sync.preset=dp", "sync.fragments=1", "checkpoint.every=10" } },
  { name = "diloco (blocking)", sets = { "sync.preset=diloco" } },
  { name = "decoupled", sets = { "sync.preset=decoupled" } },
}
-- the step time sim needs: the real decoupled run's, measured without faults; and its spread
local base = go("run", "nofault", { "sync.preset=decoupled", "log.every=1" })
local tps = 0
for _, p in ipairs(base.per_learner) do tps = tps + (p.tokens_per_s or 0) end
local step_time = M * 1024 / tps -- M learners of 16 x 64 tokens a step
local measured_cv = bench.step_cv(tmp .. "/nofault", M)
local jitter = jitter_arg or measured_cv or 0
print(string.format("recipe %s, %d learners x %d steps, kills: Poisson mtbf %s down %s (seed %d), learner 1 paused at 15 s "
  .. "and learner 3's link cut at 30 s, each for %s; measured step time %.3f s (sim's islands.step_time), its "
  .. "spread %s (sim's islands.jitter = %.3f)", recipe, M, steps, mtbf, down, seed, down, step_time,
  measured_cv and string.format("%.3f", measured_cv) or "not measured", jitter))
print("| mode | goodput | sim goodput | uptime | healthy idle | final eval | sim final eval | wall s |")
print("|---|---|---|---|---|---|---|---|")
local out, sims, sims_speed, sims_cores = {}, {}, {}, {}
local cores = 2 -- the host's, for sim on shared cores
do
  local h = io.popen("nproc")
  if h then
    cores = tonumber(h:read("l")) or cores
    h:close()
  end
end
for _, m in ipairs(modes) do
  local sets = { "chaos=" .. chaos }
  for _, s in ipairs(m.sets) do sets[#sets + 1] = s end
  local r = go("run", m.name:gsub("[^%w]", "_"), sets)
  -- the real learners talk over loopback (no link emulation): sim's links are as free
  -- (the recipe's 20 ms would be a quarter of a step at this step time)
  local ssets = { "chaos=" .. sim_chaos, string.format("islands.step_time=%.6f", step_time), "islands.latency=0",
    "islands.timeout=" .. TIMEOUT, "islands.bandwidth=inf", string.format("islands.jitter=%.4f", jitter) }
  for _, s in ipairs(m.sets) do if not s:match("^runtime") then ssets[#ssets + 1] = s end end
  local ok, s = pcall(go, "sim", m.name:gsub("[^%w]", "_") .. "_sim", ssets)
  if not ok then s = {} end
  -- sim again at the speeds this run's learners computed at (learners sharing 2 cores do
  -- not get equal shares, and the survivors of a kill get more), the one the schedule
  -- follows at speed 1: a real run ends when the schedule reaches `steps`, which moves
  -- with the fastest learner in decoupled (the slower ones catch up with it, learner.h,
  -- "Catching up") and with the slowest in blocking diloco; sim's horizon is that one's
  -- (decoupled only: in blocking diloco a learner that waits at a round leaves its core
  -- to the others, and sim at equal speeds predicts it better, docs/chaos.md)
  local speeds = m.name == "decoupled" and measured_speeds(r, false)
  if speeds and s.goodput then
    local vsets = { "chaos=" .. sim_chaos, string.format("islands.step_time=%.6f", speeds.step_time),
      "islands.latency=0", "islands.timeout=" .. TIMEOUT, "islands.bandwidth=inf",
      string.format("islands.jitter=%.4f", jitter),
      "islands.speed=" .. speeds.text }
    for _, x in ipairs(m.sets) do if not x:match("^runtime") then vsets[#vsets + 1] = x end end
    local okv, v = pcall(go, "sim", m.name:gsub("[^%w]", "_") .. "_simspeed", vsets)
    if okv then
      v.speeds, v.speed_step_time = speeds.list, speeds.step_time
      sims_speed[m.name] = v
    end
  end
  -- sim on the host's cores, for the two DiLoCo modes (dp's steps wait on every learner)
  if cores < M and not m.name:match("^dp") then
    local csets = { "chaos=" .. sim_chaos, string.format("islands.step_time=%.6f", step_time * cores / M),
      string.format("islands.cores=%d", cores), "islands.stop=steps", "islands.latency=0",
      "islands.timeout=" .. TIMEOUT, "islands.bandwidth=inf",
      string.format("islands.jitter=%.4f", jitter) }
    for _, x in ipairs(m.sets) do if not x:match("^runtime") then csets[#csets + 1] = x end end
    local okc, c = pcall(go, "sim", m.name:gsub("[^%w]", "_") .. "_simcores", csets)
    if okc then sims_cores[m.name] = c end
  end
  local idle = healthy_idle(r)
  out[m.name], sims[m.name] = r, s
  print(string.format("| %s | %s | %s | %s | %s | %.4f | %s | %.1f |", m.name,
    r.goodput and string.format("%.1f%%", 100 * r.goodput) or "-",
    s.goodput and string.format("%.1f%%", 100 * s.goodput) or "-",
    r.uptime and string.format("%.1f%%", 100 * r.uptime) or "-",
    idle and string.format("%.2f%%", 100 * idle) or "-", r.final_eval_loss or 0,
    s.final_eval_loss and string.format("%.4f", s.final_eval_loss) or "-", r.wall_s))
end

-- where the wall time went: the mean over the learners of each share (summary.per_learner)
print("")
print("| mode | wall s | training | waiting | start-up | down | paused | held | done early | rest | rolled back steps | unreplayed steps |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for _, m in ipairs(modes) do
  local r = out[m.name]
  local keys = { "train_s", "wait_s", "startup_s", "down_s", "paused_s", "held_s", "after_done_s" }
  local mean, n = {}, #(r.per_learner or {})
  for _, k in ipairs(keys) do
    local sum = 0
    for _, p in ipairs(r.per_learner or {}) do sum = sum + (p[k] or 0) end
    mean[k] = n > 0 and sum / n or 0
  end
  local rest = r.train_s or r.wall_s -- the training window (the final evaluation and save come after it)
  for _, k in ipairs(keys) do rest = rest - mean[k] end
  local unrep
  for _, ls in ipairs(r.learner_summaries or {}) do
    if type(ls) == "table" and ls.unreplayed then unrep = (unrep or 0) + ls.unreplayed end
  end
  print(string.format("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %s |", m.name, r.wall_s,
    mean.train_s, mean.wait_s, mean.startup_s, mean.down_s, mean.paused_s, mean.held_s, mean.after_done_s, rest,
    r.rolled_back_steps and tostring(r.rolled_back_steps) or "-", unrep and tostring(unrep) or "-"))
end
print("")
print("sim at the speeds decoupled's learners computed at (speed 1: the fastest, its step time sim's):")
print("| mode | goodput | sim goodput | sim goodput, measured speeds | final eval | sim final eval | sim final eval, "
  .. "measured speeds | speeds | step s at speed 1 |")
print("|---|---|---|---|---|---|---|---|---|")
for _, m in ipairs(modes) do
  local r, s, v = out[m.name], sims[m.name], sims_speed[m.name]
  if v and v.goodput then
    local sp = {}
    for i, x in ipairs(v.speeds) do sp[i] = string.format("%.2f", x) end
    print(string.format("| %s | %.1f%% | %.1f%% | %.1f%% | %.4f | %.4f | %.4f | %s | %.4f |", m.name, 100 * r.goodput,
      100 * s.goodput, 100 * v.goodput, r.final_eval_loss, s.final_eval_loss, v.final_eval_loss, table.concat(sp, " "),
      v.speed_step_time))
  end
end
print("")
print(string.format("sim on the host's %d cores (islands.cores = %d, a step on a core of its own %.4f s, "
  .. "islands.stop = \"steps\"):", cores, cores, step_time * cores / M))
print("| mode | goodput | sim goodput | sim goodput, shared cores | final eval | sim final eval | sim final eval, "
  .. "shared cores | training window s: real, sim on cores |")
print("|---|---|---|---|---|---|---|---|")
for _, m in ipairs(modes) do
  local r, s, c = out[m.name], sims[m.name], sims_cores[m.name]
  if c and c.goodput and s.goodput then
    print(string.format("| %s | %.1f%% | %.1f%% | %.1f%% | %.4f | %.4f | %.4f | %.1f, %.1f |", m.name, 100 * r.goodput,
      100 * s.goodput, 100 * c.goodput, r.final_eval_loss, s.final_eval_loss, c.final_eval_loss,
      r.train_s or r.wall_s, c.virtual_s or 0))
  end
end
local d, n = out["decoupled"], out["dp, non-elastic"]
if d.goodput and n.goodput and n.goodput > 0 then
  print(string.format("decoupled goodput / non-elastic dp goodput = %.2f (goal >= 3)", d.goodput / n.goodput))
end
if json_out then
  local res = { mtbf = mtbf, down = down, seed = seed, steps = steps, step_time = step_time, modes = {},
    jitter = jitter, step_cv = measured_cv or diloco.json_null }
  for _, m in ipairs(modes) do
    local r, sm = out[m.name], sims[m.name]
    res.modes[#res.modes + 1] = { name = m.name, run = r, sim = sm.goodput and sm or nil, healthy_idle = healthy_idle(r),
      sim_speeds = sims_speed[m.name], sim_cores = sims_cores[m.name] }
  end
  local f = assert(io.open(json_out, "wb"))
  f:write(diloco.json_encode(res), "\n")
  f:close()
end
