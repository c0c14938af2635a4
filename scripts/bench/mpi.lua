-- scripts/bench/mpi.lua, run by scripts/bench/mpi: an island of 2 MPI ranks at one thread
-- each (`run` with islands.ranks = 2: the syncer here, the island one mpirun job, each rank
-- data.batch rows) against one learner at two threads with 2 x data.batch rows (a
-- single-island `run`), the same tokens per step.  Rates are steady state: tokens between
-- the first and the last step event over the wall time between them.  Rounds alternate;
-- medians.  Also the island's allreduce share of its training time (rank 0's summary).
-- Usage: diloco-lua scripts/bench/mpi.lua RECIPE STEPS ROUNDS OUTDIR
local diloco = require "diloco"
local recipe, steps, rounds, tmp = arg[1], math.tointeger(tonumber(arg[2])), math.tointeger(tonumber(arg[3])), arg[4]
local exe = diloco.proc.self_exe()
local bench = dofile(arg[0]:match("^(.*)/[^/]*$") .. "/common.lua")
local events, rate, median = bench.events, bench.rate, bench.median
local r = assert(diloco.recipe.validate(diloco.recipe.load(recipe)))
local B = r.data.batch
local common = { "--set", "eval.every=0", "--set", "checkpoint.minutes=0", "--quiet", "--overwrite", "--set",
  "steps=" .. steps, "--set", "log.every=" .. math.max(1, steps // 30) }

local function run(args, threads, log)
  local argv = { exe }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  for _, a in ipairs(common) do argv[#argv + 1] = a end
  argv.stdout, argv.stderr = log, log
  argv.env = { OMP_NUM_THREADS = tostring(threads), OPENBLAS_NUM_THREADS = tostring(threads) }
  local st = diloco.proc.wait(assert(diloco.proc.spawn(argv)), true)
  if st.exited ~= 0 then
    local f = io.open(log)
    error(string.format("%s failed (%s): %s", log, diloco.json_encode(st), f and f:read("a") or ""))
  end
end

local ref, ours, shares = {}, {}, {}
for round = 1, rounds do
  run({ "run", recipe, "--out", tmp .. "/ref", "--set", "threads=2", "--set", "data.batch=" .. (2 * B) }, 2,
    tmp .. "/ref.log")
  local a = rate(tmp .. "/ref/metrics.jsonl")
  run({ "run", recipe, "--out", tmp .. "/isl", "--set", "threads=1", "--set", "islands.ranks=2" }, 1, tmp .. "/isl.log")
  local path = tmp .. "/isl/learner-1/metrics.jsonl"
  local b = rate(path)
  local ev = events(path)
  local s = ev[#ev]
  assert(s.event == "summary" and s.ranks == 2 and s.ranks_same, "the island's summary: " .. diloco.json_encode(s))
  ref[#ref + 1], ours[#ours + 1], shares[#shares + 1] = a, b, s.allreduce_share
  print(string.format("round %d: one learner at 2 threads, batch %d: %.0f tokens/s; island of 2 ranks at 1 thread, "
    .. "batch %d each: %.0f tokens/s; ratio %.3f; allreduce %.1f%% of the island's training time", round, 2 * B, a, B,
    b, b / a, 100 * s.allreduce_share))
end
local A, O = median(ref), median(ours)
print(string.format("tokens/s, medians: island of 2 ranks %.0f / one learner at 2 threads %.0f = %.3f; allreduce "
  .. "share of the step %.1f%%", O, A, O / A, 100 * median(shares)))
