-- diloco.ranks: an island of several MPI ranks (docs/mpi.md), the learner's side of it.
--
-- `mpirun -np R diloco-lua learner RECIPE --connect ... --id N` (or `run` with
-- islands[N].ranks = R): island N is one MPI job.  Every rank opens the island's data
-- with R x its batch and trains on its own rows of each batch; the gradients and the
-- loss are averaged over the ranks (one allreduce of the gradient arena) before the
-- clip and the optimizer step, so the island trains as one learner with R x the batch.
-- Rank 0 is the learner (the connection, the state machine, checkpoints, metrics);
-- before each step it tells the others, in one small message, the run's step (the
-- learning rate follows it) and what changed in the model since the last one (the
-- fragments it applied, or the whole model after a resync or a rollback, with a fresh
-- optimizer), and broadcasts those ranges of the arena: every rank holds the same
-- parameters.  At the end all ranks check that (mpi.same) and rank 0 reports it.
-- A rank that dies ends the job (mpirun), and its launcher restarts the island.
local diloco = require "diloco"
local train = require "diloco.train"
local islands = require "diloco.islands"
local M = {}

local fail, fail_code, plain = train.fail, train.fail_code, train.plain

-- The ranks the launcher started, from its environment (before MPI starts): 1 when not
-- under a launcher of several.
function M.launcher_size(env)
  env = env or os.getenv
  for _, k in ipairs { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE" } do
    local v = env(k)
    if v and v:match("^%d+$") then return math.tointeger(tonumber(v)) end
  end
  if env("SLURM_STEP_ID") or env("SLURM_STEPID") then -- inside an srun step, not a batch script
    local v = env("SLURM_NTASKS")
    if v and v:match("^%d+$") then return math.tointeger(tonumber(v)) end
  end
  return 1
end

-- R when this learner is an island of R > 1 ranks, else nil: --id N under a launcher of
-- several ranks (without --id they are one-process learners, ids from the ranks), or
-- a recipe that gives island N ranks = R (then the launcher must have started R).
function M.island_ranks(r, opts, env)
  if not opts.id then return nil end
  local isl = r.islands.list[opts.id]
  local want = isl and isl.ranks or 1
  local size = M.launcher_size(env)
  if size <= 1 and want <= 1 then return nil end
  if size <= 1 then
    fail_code(2, "islands[%d].ranks = %d: start this island as one MPI job of %d ranks, `mpirun -np %d diloco-lua "
      .. "learner RECIPE --connect ... --id %d` (diloco-lua run does), not as one process", opts.id, want, want, want,
      opts.id)
  end
  if want > 1 and size ~= want then
    fail_code(2, "islands[%d].ranks = %d but the launcher started %d ranks: expected mpirun -np %d", opts.id, want, size,
      want)
  end
  if r.sync.preset == "dp" then
    fail_code(2, "learner %d under a launcher of %d ranks with --id: an island of several ranks runs the DiLoCo "
      .. "presets, not sync.preset = \"dp\" (start one-process learners: no --id, ids from the ranks)", opts.id, size)
  end
  if not diloco.mpi.available then fail_code(2, "island %d of %d ranks: %s", opts.id, size, diloco.mpi.why) end
  return size
end

-- The model's state every rank must hold at the start: rank 0's, after its join and
-- restore.  Followed by the whole arena and the optimizer state.
local function island_start_msg(ctx)
  return diloco.json_encode({ op = "start", step = ctx.lrt:schedule_step(), optim_steps = ctx.opt:step_count(),
    loader = ctx.loaders.train:state() })
end

-- Rank 0: the message `op` ("step": run one; "stop") with what changed in the model since
-- the last one (drain_events, rollback), then those ranges of the arena.
local function push_changes(ctx, op)
  local mpi, frags = diloco.mpi, {}
  if not ctx.ranks_whole then
    for f in pairs(ctx.ranks_frags) do frags[#frags + 1] = f end
    table.sort(frags)
  end
  mpi.bcast_string(diloco.json_encode({ op = op, step = ctx.lrt:schedule_step(), whole = ctx.ranks_whole or nil,
    fresh = ctx.ranks_fresh or nil, fragments = #frags > 0 and frags or nil, check = op == "stop" or nil }))
  if ctx.ranks_whole then
    mpi.bcast(ctx.flat)
  else
    for _, f in ipairs(frags) do
      for _, v in ipairs(ctx.plan:views(f)) do mpi.bcast(ctx.flat, v.offset, v.numel) end
    end
  end
end

-- Rank 0, before each step: the step and what changed.
function M.send(ctx)
  local t0 = diloco.clock()
  local mpi = diloco.mpi
  if ctx.ranks_started then
    push_changes(ctx, "step")
  else
    mpi.bcast_string(island_start_msg(ctx))
    mpi.bcast(ctx.flat)
    for _, p in ipairs(ctx.opt:state()) do mpi.bcast(p[2]) end
    ctx.ranks_started = true
  end
  ctx.ranks_whole, ctx.ranks_fresh, ctx.ranks_frags = false, false, {}
  ctx.ranks_sync_s = (ctx.ranks_sync_s or 0) + (diloco.clock() - t0)
end

-- Rank 0, at the end of its loop: what changed since the last step (the merges its last
-- step boundary applied), then stop, and all ranks compare their parameters.
function M.stop(ctx)
  local mpi = diloco.mpi
  if ctx.ranks_started then
    push_changes(ctx, "stop")
  else -- (a learner that joined at the last step never started them: nothing to compare)
    mpi.bcast_string(diloco.json_encode({ op = "stop" }))
  end
  ctx.ranks_same = not ctx.ranks_started or mpi.same(ctx.flat)
  ctx.mpi = nil
  if not ctx.ranks_same then
    fail("learner %d: the %d ranks of this island ended with different parameters (a bug: every change rank 0 "
      .. "makes is broadcast)", ctx.id, ctx.ranks)
  end
end

-- OUT/learner-N/rank-K.pid: what `run` signals (TERM to rank 0 for a clean stop, KILL
-- to one rank for chaos), each pid checked to be a child of the mpirun it started.
function M.write_rank_pid(r, opts, rank)
  local dir = opts.out or string.format("%s/learner-%d", r.out or ("runs/" .. (r.name or "run")), opts.id)
  diloco.mkdir_p(dir)
  local f = io.open(string.format("%s/rank-%d.pid", dir, rank), "w")
  if f then
    f:write(diloco.proc.pid(), "\n")
    f:close()
  end
end

-- Ranks 1..R-1: the same model, optimizer and data as rank 0, no connection; each
-- step as rank 0 says, until it says stop.
function M.run_rank(r, opts, rank, size)
  local mpi = diloco.mpi
  if r.threads then diloco.set_num_threads(r.threads) end
  diloco.seed(r.seed)
  local id, Mn = opts.id, r.islands.count
  local isl = r.islands.list[id]
  local ctx = require("diloco.island").new(r, { who = string.format("learner %d rank %d", id, rank) })
  ctx:build()
  ctx.flat = ctx.params:flat()
  ctx.plan = islands.plan(r, ctx.params, #ctx.plist)
  local okd, loaders = ctx:open_data(isl.batch * size, isl.shard, Mn)
  if not okd then fail("data (island %d, rank %d): %s", id, rank, plain(loaders)) end
  ctx.rows = { rank * isl.batch + 1, (rank + 1) * isl.batch }
  ctx.grad_seed = 1 / size
  ctx.reduce_loss = mpi.mean
  ctx.reduce = function() mpi.average_grads(ctx.params, true) end
  local steps = 0
  while true do
    local msg = diloco.json_decode(mpi.bcast_string(nil))
    if msg.op == "start" then
      mpi.bcast(ctx.flat)
      for _, p in ipairs(ctx.opt:state()) do mpi.bcast(p[2]) end
      ctx.opt:set_step_count(msg.optim_steps)
      if type(msg.loader) == "table" and next(msg.loader) then ctx.loaders.train:set_state(msg.loader) end
    else
      if msg.fresh then ctx:fresh_optimizer() end
      if msg.whole then
        mpi.bcast(ctx.flat)
      else
        for _, f in ipairs(msg.fragments or {}) do
          for _, v in ipairs(ctx.plan:views(f)) do mpi.bcast(ctx.flat, v.offset, v.numel) end
        end
      end
    end
    if msg.op == "stop" then
      if msg.check and not mpi.same(ctx.flat) then
        fail("learner %d rank %d: this rank's parameters differ from rank 0's at the end", id, rank)
      end
      break
    end
    if msg.step then ctx.step = msg.step end
    -- the step itself (a rollback on rank 0, from a non-finite mean, is its to handle)
    local ok, res = pcall(ctx.inner_step, ctx)
    if not ok and not (type(res) == "table" and res.nonfinite) then error(res, 0) end
    steps = steps + 1
  end
  mpi.finalize()
  return { learner = id, rank = rank, ranks = size, steps = steps, silent = true }, false, nil
end

return M
