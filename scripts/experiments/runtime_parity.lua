-- Does the real runtime train as the simulator says?  The same recipe and seed, without
-- faults, under `diloco-lua run` (learner processes over loopback TCP, the wall clock)
-- and `diloco-lua sim` (the virtual clock), for each preset given; prints a table of
-- final eval loss (the whole final eval of each), merges and goodput, and the relative
-- difference run / sim - 1 (goal: within 2% in final eval loss), and whether `sim --replay`
-- of each real run reproduces its final global parameters bit for bit.
--
--   diloco-lua scripts/experiments/runtime_parity.lua [--steps N] [--seeds 0,1] [--islands M]
--       [--presets decoupled,diloco] [--repeat R] [--out runs/parity]
--
-- --repeat R runs `run` R times per seed (sim once: it is deterministic) and adds a row
-- with the mean of the R real runs' final eval loss against sim's: a real decoupled run
-- moves from one invocation to the next with the same seed (which contributions meet in
-- a round depends on the host's scheduling), and R runs say by how much.
--
-- The recipe is recipes/decoupled.lua (charlm's GPT, M islands of data.batch 16 x 64
-- tokens).  Token budget per run: M x N x 1024.  Each learner process trains with one
-- compute thread; sim runs one island at a time on one thread.  Out of CI (minutes).
local diloco = require "diloco"

local root = (arg[0]:match("^(.*)/scripts/experiments/runtime_parity%.lua$") or ".")
local opts = { steps = 300, seeds = "0", islands = 4, presets = "decoupled", out = "runs/parity", ["repeat"] = "1" }
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

print("| preset | seed | sim final eval | run final eval | run / sim - 1 | merges sim / run | goodput sim / run | replay bit for bit |")
print("|---|---|---|---|---|---|---|---|")
for _, preset in ipairs(split(opts.presets)) do
  for _, seed in ipairs(split(opts.seeds)) do
    extra = { "--set", "sync.preset=" .. preset, "--set", "seed=" .. seed }
    local name = string.format("%s/%s-s%s", opts.out, preset, seed)
    local s = go("sim", name .. "-sim")
    local sum, merges = 0, 0
    for k = 1, R do
      local rn = R > 1 and string.format("%s-run%d", name, k) or name .. "-run"
      local r = go("run", rn)
      sum, merges = sum + r.final_eval_loss, merges + r.merges
      print(string.format("| %s | %s%s | %.4f | %.4f | %+.2f%% | %d / %d | %.3f / %.3f | %s |", preset, seed,
        R > 1 and (" run " .. k) or "", s.final_eval_loss, r.final_eval_loss,
        100 * (r.final_eval_loss / s.final_eval_loss - 1), s.merges, r.merges, s.goodput or 0, r.goodput or 0,
        replay(rn)))
    end
    if R > 1 then
      print(string.format("| %s | %s, mean of %d | %.4f | %.4f | %+.2f%% | %d / %.1f | | |", preset, seed, R,
        s.final_eval_loss, sum / R, 100 * (sum / R / s.final_eval_loss - 1), s.merges, merges / R))
    end
  end
end
