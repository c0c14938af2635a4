-- Does the real runtime train as the simulator says?  The same recipe and seed, without
-- faults, under `diloco-lua run` (learner processes over loopback TCP, the wall clock)
-- and `diloco-lua sim` (the virtual clock), for each preset given; prints a table of
-- final eval loss (the whole final eval of each), merges and goodput, and the relative
-- difference run / sim - 1 (goal: within 2% in final eval loss), and whether `sim --replay`
-- of each real run reproduces its final global parameters bit for bit.
--
--   diloco-lua scripts/experiments/runtime_parity.lua [--steps N] [--seeds 0,1] [--islands M]
--       [--presets decoupled,diloco] [--repeat R] [--jitter measured] [--replay no] [--out runs/parity]
--
-- --repeat R runs `run` R times per seed (sim once: it is deterministic) and adds a row
-- with the mean of the R real runs' final eval loss against sim's: a real decoupled run
-- moves from one invocation to the next with the same seed (which contributions meet in
-- a round depends on the host's scheduling), and R runs say by how much.
--
-- --jitter measured has each real run's learners log every step and runs sim a second
-- time with islands.jitter = the spread of those steps (the coefficient of variation of
-- one step's compute time, scripts/bench/common.lua): learner processes sharing cores
-- do not step in lockstep as sim's islands do, so their rounds split, and sim given the
-- measured spread predicts that (docs/sim.md, "Step times").  Two more columns: sim's
-- final eval with the spread, and run / that - 1.  --replay no skips `sim --replay`.
--
-- The recipe is recipes/decoupled.lua (charlm's GPT, M islands of data.batch 16 x 64
-- tokens).  Token budget per run: M x N x 1024.  Each learner process trains with one
-- compute thread; sim runs one island at a time on one thread.  Out of CI (minutes).
local diloco = require "diloco"

local root = (arg[0]:match("^(.*)/scripts/experiments/runtime_parity%.lua$") or ".")
local opts = { steps = 300, seeds = "0", islands = 4, presets = "decoupled", out = "runs/parity", ["repeat"] = "1",
  jitter = "none", replay = "yes" }
do
  local i = 1
  while i <= #arg do
    local k = arg[i]:match("^%-%-(.+)$")
    if not k or opts[k] == nil then error("unknown argument " .. arg[i]) end
    opts[k] = arg[i + 1]
    i = i + 2
  end
end
local R = math.tointeger(tonumber(opts["repeat"]))
if not R or R < 1 then error("--repeat " .. tostring(opts["repeat"]) .. ": expected a whole number >= 1") end
if opts.jitter ~= "none" and opts.jitter ~= "measured" then
  error("--jitter " .. tostring(opts.jitter) .. ": expected measured (or none)")
end
if opts.replay ~= "yes" and opts.replay ~= "no" then error("--replay " .. tostring(opts.replay) .. ": expected yes or no") end
local JIT = opts.jitter == "measured"
local bench = dofile(root .. "/scripts/bench/common.lua")
local exe = diloco.proc.self_exe()
local recipe = root .. "/recipes/decoupled.lua"

local function split(s)
  local t = {}
  for x in tostring(s):gmatch("[^,]+") do t[#t + 1] = x end
  return t
end

local function summary(path)
  local last
  for line in io.lines(path) do last = line end
  return diloco.json_decode(last)
end

local extra = {}
local function go(cmd, out)
  local argv = { exe, cmd, recipe, "--out", out, "--overwrite", "--quiet", "--set", "steps=" .. opts.steps,
    "--set", "islands.count=" .. opts.islands, "--set", "eval.every=0", "--set", "checkpoint.minutes=0",
    "--set", "threads=1" }
  for _, a in ipairs(extra) do argv[#argv + 1] = a end
  argv.stdout, argv.stderr = out .. ".log", out .. ".log"
  argv.env = { OMP_NUM_THREADS = "1", OPENBLAS_NUM_THREADS = "1" }
  diloco.mkdir_p(opts.out)
  local pid = assert(diloco.proc.spawn(argv))
  local st = diloco.proc.wait(pid, true)
  if st.exited ~= 0 then error(cmd .. " failed, see " .. out .. ".log") end
  return summary(out .. "/metrics.jsonl")
end

print(string.format("recipes/decoupled.lua, %d islands x %d steps x 1024 tokens = %d tokens per run",
  opts.islands, opts.steps, opts.islands * opts.steps * 1024))
-- sim --replay of the real run: its final global parameters, bit for bit
local function replay(out)
  local pid = assert(diloco.proc.spawn { exe, "sim", "--replay", out, "--quiet", stdout = out .. ".replay",
    stderr = out .. ".replay", env = { OMP_NUM_THREADS = "1", OPENBLAS_NUM_THREADS = "1" } })
  local st = diloco.proc.wait(pid, true)
  return st.exited == 0 and "yes" or ("no (exit " .. tostring(st.exited) .. ", see " .. out .. ".replay)")
end

print("| preset | seed | sim final eval | run final eval | run / sim - 1 | merges sim / run | goodput sim / run | "
  .. "replay bit for bit |" .. (JIT and " spread | sim final eval, spread | run / sim with spread - 1 |" or ""))
print("|---|---|---|---|---|---|---|---|" .. (JIT and "---|---|---|" or ""))
local function pct(a, b) return string.format("%+.2f%%", 100 * (a / b - 1)) end
for _, preset in ipairs(split(opts.presets)) do
  for _, seed in ipairs(split(opts.seeds)) do
    local base = { "--set", "sync.preset=" .. preset, "--set", "seed=" .. seed }
    local name = string.format("%s/%s-s%s", opts.out, preset, seed)
    extra = base
    local s = go("sim", name .. "-sim")
    local sum, merges, jsum, jn = 0, 0, 0, 0
    for k = 1, R do
      local rn = R > 1 and string.format("%s-run%d", name, k) or name .. "-run"
      extra = { table.unpack(base) }
      if JIT then extra[#extra + 1], extra[#extra + 2] = "--set", "log.every=1" end
      local r = go("run", rn)
      sum, merges = sum + r.final_eval_loss, merges + r.merges
      local jcols = ""
      if JIT then -- sim again, its islands as spread as this run's learners were
        local cv = bench.step_cv(rn, opts.islands)
        local j
        if cv then
          extra = { table.unpack(base) }
          extra[#extra + 1], extra[#extra + 2] = "--set", string.format("islands.jitter=%.4f", cv)
          j = go("sim", rn .. "-simjit")
          jsum, jn = jsum + r.final_eval_loss / j.final_eval_loss, jn + 1
        end
        jcols = j and string.format(" %.3f | %.4f | %s |", cv, j.final_eval_loss, pct(r.final_eval_loss, j.final_eval_loss))
          or " - | - | - |"
      end
      print(string.format("| %s | %s%s | %.4f | %.4f | %s | %d / %d | %.3f / %.3f | %s |%s", preset, seed,
        R > 1 and (" run " .. k) or "", s.final_eval_loss, r.final_eval_loss, pct(r.final_eval_loss, s.final_eval_loss),
        s.merges, r.merges, s.goodput or 0, r.goodput or 0, opts.replay == "yes" and replay(rn) or "-", jcols))
    end
    if R > 1 then
      print(string.format("| %s | %s, mean of %d | %.4f | %.4f | %s | %d / %.1f | | |%s", preset, seed, R,
        s.final_eval_loss, sum / R, pct(sum / R, s.final_eval_loss), s.merges, merges / R,
        JIT and jn > 0 and string.format(" | | %+.2f%% |", 100 * (jsum / jn - 1)) or (JIT and " | | |" or "")))
    end
  end
end
