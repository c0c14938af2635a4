-- scripts/bench/mpi_allreduce.lua, run by scripts/bench/mpi under `mpirun -np 2`: the
-- island's gradient average as a learner runs it (mpi.average_grads(params, true): one
-- MPI_Allreduce of SUM over the gradient arena, the 1/R being in the backward pass's seed)
-- against a bare MPI_Allreduce of the same buffer (mpi.allreduce: that one call), on the
-- gradient arena of RECIPE's model.  Also printed: the average with a scale pass by 1/R
-- after it (a caller that did not seed the backward), and the loss's mean (mpi.mean, one
-- double, which a learner takes before its backward pass).  ITERS calls of each per
-- round, rounds alternating; medians of the per-call times.
-- Usage: mpirun -np 2 diloco-lua scripts/bench/mpi_allreduce.lua RECIPE ITERS ROUNDS
local diloco = require "diloco"
local mpi = diloco.mpi
local path, iters, rounds = arg[1], math.tointeger(tonumber(arg[2])), math.tointeger(tonumber(arg[3]))
local rank, size = mpi.init()
local r = assert(diloco.recipe.validate(diloco.recipe.load(path)))
local model = require("diloco.train").build_model(r.model, r.seed)
local params = diloco.Params(model:parameters())
local g = params:flat_grad()
g:copy(diloco.randn({ params:size() }) * 1e-3)

local function median(xs)
  table.sort(xs)
  local n = #xs
  return n % 2 == 1 and xs[(n + 1) // 2] or 0.5 * (xs[n // 2] + xs[n // 2 + 1])
end

local function timed(fn)
  mpi.barrier()
  local t0 = diloco.clock()
  for _ = 1, iters do fn() end
  mpi.barrier()
  return (diloco.clock() - t0) / iters
end

local bare, ours, scaled, means = {}, {}, {}, {}
timed(function() mpi.allreduce(g) end) -- warm-up: connections, buffers
for _ = 1, rounds do
  bare[#bare + 1] = timed(function() mpi.allreduce(g) end)
  ours[#ours + 1] = timed(function() mpi.average_grads(params, true) end)
  scaled[#scaled + 1] = timed(function() mpi.average_grads(params) end)
  means[#means + 1] = timed(function() mpi.mean(1.0) end)
end
if rank == 0 then
  local b, o = median(bare), median(ours)
  print(string.format("allreduce of the gradient arena (%d floats, %.1f MB) over %d ranks, %s", params:size(),
    params:size() * 4 / 1e6, size, mpi.library()))
  print(string.format("  bare MPI_Allreduce %.3f ms, island's average_grads %.3f ms: ratio %.3f  (goal >= 0.95)",
    b * 1e3, o * 1e3, b / o))
  print(string.format("  (with a scale pass by 1/R after it instead of the seeded backward: %.3f ms, ratio %.3f; "
    .. "the loss's mean: %.4f ms)", median(scaled) * 1e3, b / median(scaled), median(means) * 1e3))
end
mpi.finalize()
