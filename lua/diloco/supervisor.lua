-- diloco.supervisor: the learner processes of `diloco-lua run` (islands.count > 1).  What
-- happens to them (done, crashed and restarted with backoff, held while another is down in
-- a non-elastic run, rolled back together in non-elastic data parallel, paused, slowed,
-- stopped) is decided by the state machine of core/supervise.h (diloco.Supervisor); this
-- file carries out its actions: the processes (each a fresh diloco-lua learner, exec'd; an
-- island of several ranks one mpirun job), their signals, the fault events, a rollback's
-- checkpoints and syncer; and it reads the recipe's fault schedule (core/chaos.h's cursor,
-- as sim reads it), executing those on the syncer and the links itself.  It works on the
-- run context of lua/diloco/cluster.lua (runctx); what it needs of the syncer it asks
-- through ctx.host (start_syncer, save_syncer, restore_counts, link_of).  docs/runtime.md.
local diloco = require "diloco"
local train = require "diloco.train"
local islands = require "diloco.islands"
local EXIT = require("diloco.errors").EXIT
local rc = require "diloco.runctx"
local elapsed, island, say, fault = rc.elapsed, rc.island, rc.say, rc.fault
local M = {}

local fail = train.fail

-- The supervisor's limits (given to diloco.Supervisor): every wait has a deadline (the
-- recipe's runtime section sets the join deadline, the drain and the restart budget).
M.STOP_TIMEOUT = 60       -- s: learners asked to stop must be gone within this, else KILL
M.SLOW_PERIOD = 0.5       -- s: a chaos slow event runs its learner 1/factor of each period
M.RESTART_MIN = 1         -- s: the first restart of a crashed learner waits this,
M.RESTART_MAX = 30        -- s:   doubled per crash in a row, up to this

-- An island of several ranks (islands[m].ranks > 1, docs/mpi.md) runs as one mpirun job:
-- L.pid is mpirun's.  mpirun puts each rank in a process group of its own and, killed
-- alone, leaves them running, so its ranks are signalled by pid (each checked to be a
-- child of that mpirun): STOP, CONT and KILL reach every rank (KILL then mpirun too);
-- TERM goes to rank 0, the learner, which stops its ranks and ends in order.
local function rank_pid(ctx, m, k)
  local f = io.open(string.format("%s/learner-%d/rank-%d.pid", ctx.out, m, k), "r")
  local pid = f and math.tointeger(tonumber(f:read("l") or ""))
  if f then f:close() end
  return pid
end

local function signal_learner(ctx, m, sig)
  local L = ctx.learners[m]
  if not L.pid then return nil end
  if not L.ranks then return diloco.proc.signal(L.pid, sig) end
  if sig == "TERM" then
    local pid = rank_pid(ctx, m, 0)
    if pid and diloco.proc.signal_grandchild(L.pid, pid, "TERM") then return true end
    return diloco.proc.signal(L.pid, "TERM") -- rank 0 not up yet: mpirun ends its job
  end
  for _, pid in ipairs(diloco.proc.children(L.pid)) do diloco.proc.signal_grandchild(L.pid, pid, sig) end
  if sig == "KILL" then return diloco.proc.signal(L.pid, "KILL") end
  return true
end

-- ---- the learner processes (run) ----

local function learner_argv(ctx, m, fresh, rollback)
  local o = ctx.opts
  local argv = { diloco.proc.self_exe(), "learner", o.recipe_path, "--connect", ctx.address, "--id", tostring(m),
    "--out", string.format("%s/learner-%d", ctx.out, m), "--secret-file", ctx.secret_file, "--run-id", ctx.run_id,
    "--quiet" }
  -- a new run: nothing of an earlier one is continued (a resumed run's learners continue
  -- from their own newest checkpoints)
  if fresh and not o.resume then argv[#argv + 1] = "--overwrite" end
  if rollback then
    argv[#argv + 1] = "--restart-at"
    argv[#argv + 1] = tostring(rollback)
  end
  for _, s in ipairs(o.set or {}) do
    argv[#argv + 1] = "--set"
    argv[#argv + 1] = s
  end
  return argv
end

-- Starts learner m's process (the supervisor's SPAWN); fresh: the run's first start;
-- rollback: the step a rolled-back job starts from.
local function spawn(ctx, m, fresh, rollback)
  local L = ctx.learners[m]
  local dir = string.format("%s/learner-%d", ctx.out, m)
  diloco.mkdir_p(dir)
  if fresh then -- a new run: the display must not read an earlier run's progress
    os.remove(dir .. "/metrics.jsonl")
    if L.tail then L.tail:close() end
    L.tail, L.progress, L.partial = nil, nil, nil
  end
  local threads = tostring(ctx.recipe.threads or 1)
  local argv = learner_argv(ctx, m, fresh, rollback)
  argv.env = { OMP_NUM_THREADS = threads, OPENBLAS_NUM_THREADS = threads, DILOCO_SUPERVISOR = tostring(diloco.proc.pid()) }
  local R = ctx.recipe.islands.list[m].ranks
  L.ranks = R
  if R then
    -- an island of R ranks: one mpirun job on this machine (its ranks inherit the
    -- environment), unbound (several jobs share the cores), tied to this process
    for k = 0, R - 1 do os.remove(string.format("%s/rank-%d.pid", dir, k)) end
    table.move(argv, 1, #argv, 7, argv)
    argv[1], argv[2], argv[3], argv[4], argv[5], argv[6] = ctx.mpirun, "--oversubscribe", "--bind-to", "none", "-np",
      tostring(R)
    argv.env.OMPI_ALLOW_RUN_AS_ROOT, argv.env.OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = "1", "1"
    -- a rank that died ends the job at once: the others are killed without the second
    -- of grace mpirun gives by default (rank 0 takes a TERM for a clean stop, and a rank
    -- whose peer died is stuck in a collective that never completes)
    argv.env.OMPI_MCA_odls_base_sigkill_timeout = "0"
    -- each job its own session directory: jobs starting at once on one host race creating
    -- OpenMPI's shared one (/tmp/ompi.HOST.UID: "File exists"); short, for its sockets
    ctx.mpi_tmp = ctx.mpi_tmp or string.format("/tmp/dlc-ompi-%d", diloco.proc.pid())
    local tmp = string.format("%s/%d", ctx.mpi_tmp, m)
    diloco.mkdir_p(tmp)
    argv.env.OMPI_MCA_orte_tmpdir_base = tmp
    argv.parent_death = "KILL"
  end
  argv.stdout, argv.stderr = dir .. "/log", dir .. "/log"
  local pid, err = diloco.proc.spawn(argv)
  if not pid then fail("starting learner %d: %s", m, err) end
  L.pid, L.started, L.bye = pid, elapsed(ctx), false
  return pid
end

-- The last lines of a learner's log, for a message about its death.
local function log_tail(ctx, m)
  local f = io.open(string.format("%s/learner-%d/log", ctx.out, m), "r")
  if not f then return "" end
  local lines = {}
  for line in f:lines() do
    lines[#lines + 1] = line
    if #lines > 3 then table.remove(lines, 1) end
  end
  f:close()
  return table.concat(lines, " | ")
end

-- ---- the decisions: core/supervise.h (diloco.Supervisor) ----
--
-- What happens to the learners' processes is decided by the supervisor state machine in
-- core/supervise.c: this file tells it what happened (an exit, a fault of the schedule,
-- the syncer's joins and losses, the stop, the time) and carries out what it asks (start,
-- signal, the account's island states, fault events, a rollback).  The learners' tables
-- keep a copy of its view of each (state, crashes, restart_at, down_cause, held, slow)
-- for the display and the summary, refreshed after every batch of actions (mirror).

local function finite(v) return v and v < math.huge and v or nil end

-- The state machine's view of each learner, copied into ctx.learners for its readers.
local function mirror(ctx)
  for m, L in ipairs(ctx.learners) do
    local i = ctx.sup:learner(m)
    L.state, L.crashes, L.restart_at, L.down_cause = i.state, i.crashes, i.restart_at, i.down_cause
    L.held, L.slow_factor, L.resume_at = i.held, i.slow_factor, i.resume_at
  end
end

-- non-elastic data parallel: the job rolled back to the newest checkpoint every learner
-- holds (checkpoint.every), model and optimizer included (learner --restart-at STEP); the
-- steps past it are lost work, taken out of the goodput.  The syncer starts again from a
-- checkpoint of its own (a new epoch: nothing the killed processes sent is merged; the
-- first gradient, for STEP + 1, sets its round).  Then every learner starts again.
local function roll_back(ctx, a)
  local Mn = ctx.recipe.islands.count
  local lists, count, K = {}, {}, 0
  for m = 1, Mn do
    lists[m] = diloco.rundir.checkpoints(string.format("%s/learner-%d", ctx.out, m))
    for _, c in ipairs(lists[m]) do count[c.step] = (count[c.step] or 0) + 1 end
  end
  for step, n in pairs(count) do
    if n == Mn and step > K then K = step end
  end
  -- past K is another timeline now: its checkpoints go, its merged tokens are lost work
  for m = 1, Mn do
    for _, c in ipairs(lists[m]) do
      if c.step > K then os.remove(c.path) end
    end
  end
  local lost_steps, lost_tokens = math.max(0, (ctx.dp_step or 0) - K), 0
  for v, u in pairs(ctx.dp_useful) do
    if v > K then
      lost_tokens = lost_tokens + u
      ctx.dp_useful[v] = nil
    end
  end
  ctx.account:set_useful_tokens(math.max(0, ctx.account:useful_tokens() - lost_tokens))
  ctx.dp_step = K
  ctx.rolled_back_steps = ctx.rolled_back_steps + lost_steps
  ctx.rolled_back_tokens = ctx.rolled_back_tokens + lost_tokens
  local t0 = diloco.clock()
  ctx.host.save_syncer(ctx)
  local st = ctx.syncer:stats()
  ctx.bytes_prev_in = (ctx.bytes_prev_in or 0) + st.bytes_in
  ctx.bytes_prev_out = (ctx.bytes_prev_out or 0) + st.bytes_out
  ctx.syncer:close()
  ctx.syncer = nil
  local list = diloco.rundir.checkpoints(ctx.out .. "/syncer")
  ctx.host.start_syncer(ctx, ctx.address, list[#list] and list[#list].path or nil)
  for _, L in ipairs(ctx.learners) do L.rolled_back_steps = (L.rolled_back_steps or 0) + lost_steps end
  ctx.rollback_step = K
  ctx.sup:rolled_back(elapsed(ctx)) -- every learner's SPAWN, from K: taken by the same act loop
  fault(ctx, { kind = "job_rollback", learner = a.learner, begin = false, cause = a.cause, step = K,
    rolled_back_steps = lost_steps, rolled_back_tokens = lost_tokens, latency = a.value,
    syncer_s = diloco.clock() - t0, epoch = ctx.syncer:epoch() })
end

-- A fault action as the run's fault event (docs/runtime.md lists them); extra: fields of
-- the schedule's event that caused it (a slow's own factor).
local function fault_action(ctx, a, extra)
  local m, f = a.learner, a.fault
  local L = m and ctx.learners[m]
  if f == "crash" then
    local why, tail = L.exit_why or "?", log_tail(ctx, m)
    if a.final then
      fault(ctx, { kind = "crash", learner = m, text = why .. ": " .. tail, restart = false })
      if ctx.job_rollbacks then
        ctx.failed_learner = string.format("learner %d failed for good (%s): a non-elastic run cannot go on "
          .. "without it", m, why)
      end
      say(ctx, "learner %d failed (%s): %s", m, why, tail)
    else
      fault(ctx, { kind = "crash", learner = m, text = why .. ": " .. tail, restart_in = a.value })
      say(ctx, "learner %d crashed (%s), restarting in %g s: %s", m, why, a.value, tail)
    end
  elseif f == "back" then
    fault(ctx, { kind = a.cause or "kill", learner = m, begin = false })
  elseif f == "restart_skipped" then
    fault(ctx, { kind = "restart", learner = m, skipped = "the others finished: the run is over" })
  elseif f == "held" then
    fault(ctx, { kind = "held", learner = m, begin = a.begin })
  elseif f == "kill" then
    fault(ctx, { kind = "kill", learner = m, rank = a.rank, begin = true, duration = finite(a.value) })
  elseif f == "pause" then
    fault(ctx, { kind = "pause", learner = m, begin = a.begin, duration = a.begin and finite(a.value) or nil })
  elseif f == "slow" then
    fault(ctx, { kind = "slow", learner = m, begin = a.begin, factor = a.begin and extra and extra.factor or nil,
      duration = a.begin and finite(a.value) or nil })
  elseif f == "job_rollback" then
    ctx.job_rollbacks = ctx.job_rollbacks + 1
    fault(ctx, { kind = "job_rollback", learner = m, begin = true, cause = a.cause, back_in = a.value })
  elseif f == "join_timeout" then
    say(ctx, "learner %d did not join within %g s: killed (its log: %s)", m, a.value, log_tail(ctx, m))
  elseif f == "stop_timeout" then
    say(ctx, "learner %d did not stop within %d s: killed", m, a.value)
  end
end

-- Carries out the supervisor's queued actions, in order.
local function act(ctx, extra)
  for a in ctx.sup:actions() do
    local m = a.learner
    if a.kind == "spawn" then
      spawn(ctx, m, a.fresh, a.rollback and ctx.rollback_step or nil)
      if not a.fresh then
        local L = ctx.learners[m]
        L.restarted_at, L.rejoined, L.recovered = a.time, false, false
        ctx.restarts = ctx.restarts + 1
      end
    elseif a.kind == "signal" then
      local L = ctx.learners[m]
      -- one rank of an island: its mpirun ends the job, the island is down as a whole
      local pid = a.rank and L.ranks and rank_pid(ctx, m, a.rank)
      if not (pid and L.pid and diloco.proc.signal_grandchild(L.pid, pid, a.signal)) then
        signal_learner(ctx, m, a.signal)
      end
    elseif a.kind == "island" then
      island(ctx, m, a.island)
    elseif a.kind == "fault" then
      fault_action(ctx, a, extra)
    elseif a.kind == "rollback" then
      roll_back(ctx, a)
    end -- give_up: the crash's fault said it (ctx.failed_learner)
  end
  mirror(ctx)
end

-- The supervisor of the run's learners; their processes started.
function M.start(ctx)
  local rt = ctx.rt
  ctx.sup = diloco.Supervisor { learners = ctx.recipe.islands.count, elastic = rt.elastic,
    rollbacks = ctx.job_rollbacks ~= nil, restarts = rt.restarts, restart_min = M.RESTART_MIN,
    restart_max = M.RESTART_MAX, slow_period = M.SLOW_PERIOD, stop_timeout = M.STOP_TIMEOUT,
    join_timeout = rt.join_timeout }
  ctx.sup:start(elapsed(ctx))
  act(ctx)
end

-- Reaps the learners' processes that ended and tells the supervisor.
function M.reap(ctx)
  for m, L in ipairs(ctx.learners) do
    if L.pid then
      local st = diloco.proc.wait(L.pid)
      if st then
        L.pid = nil
        L.exit_why = st.exited and string.format("exit status %d", st.exited)
          or string.format("signal %s", st.name or tostring(st.signal))
        if st.exited == EXIT.undelivered then -- done (not restarted), but say what it said
          say(ctx, "learner %d finished unheard by the syncer: %s", m, log_tail(ctx, m))
        end
        ctx.sup:exited(m, elapsed(ctx), st.exited, st.signal)
        act(ctx)
      end
    end
  end
end

-- What is due by now: restarts, a rollback, resumes, slow duty cycles, deadlines.
function M.tick(ctx)
  ctx.sup:tick(elapsed(ctx))
  act(ctx)
end

-- The syncer heard learner m join, or lost it (holds and rollbacks follow).
function M.joined(ctx, m)
  ctx.sup:joined(m, elapsed(ctx))
  act(ctx)
end
function M.lost(ctx, m)
  ctx.sup:lost(m, elapsed(ctx))
  act(ctx)
end

-- The run stops: TERM to every process, KILL after STOP_TIMEOUT (M.tick).
function M.stop(ctx)
  ctx.sup:stop(elapsed(ctx))
  act(ctx)
end

function M.all_ended(ctx) return ctx.sup:all_ended() end

-- ---- chaos on real processes ----

-- The recipe's fault schedule as sim builds it (islands.chaos over core/chaos.h: scripted
-- and random faults merged by one set of rules, ties in one order), read through its
-- cursor (Chaos:due) on the wall clock since the learners started; nil without faults.
-- The MPI rank a scripted kill names, by (learner, at): a merged kill keeps the first's at.
local function chaos_schedule(ctx)
  local r = ctx.recipe
  local ch = islands.chaos(r, ctx.opts.horizon or 3600)
  ctx.chaos_ranks = {}
  for _, e in ipairs(r.chaos and r.chaos.events or {}) do
    if e.rank and e.kind == "kill" then ctx.chaos_ranks[e.learner .. "@" .. e.at] = e.rank end
  end
  return ch
end

-- The faults of the schedule due by now: those on learners' processes go to the
-- supervisor, those on the syncer and its links are executed here.
local function chaos_due(ctx)
  if not ctx.chaos then return end
  while not ctx.stopping do
    local e = ctx.chaos:due(elapsed(ctx) - (ctx.chaos_t0 or 0))
    if not e then break end
    local L = e.learner and ctx.learners[e.learner]
    local down = e.duration or math.huge
    local now = elapsed(ctx)
    if not e.begin then
      -- the ends of kills, pauses, cuts, links and syncer outages are the timers their
      -- begins set (their merged durations); a slow's end changes the product
      if e.kind == "slow" and L then
        ctx.sup:slow(e.learner, now, ctx.chaos:slow_factor(e.learner, e.t), false)
        act(ctx)
      end
    elseif e.kind == "kill" and L then
      ctx.sup:kill(e.learner, now, down, ctx.chaos_ranks[e.learner .. "@" .. e.at])
      act(ctx)
    elseif e.kind == "pause" and L then
      ctx.sup:pause(e.learner, now, down)
      act(ctx)
    elseif e.kind == "pause" and e.learner == nil and ctx.syncer then
      -- the syncer (one shard of it; with standbys, which process) stopped where it is
      for k = e.shard or 1, e.shard or (type(ctx.syncer) == "table" and ctx.syncer.S or 1) do
        require("diloco.shard_faults").pause_begin(ctx, k, down, now, function(f) fault(ctx, f) end, e.role)
      end
    elseif e.kind == "slow" and L then
      ctx.sup:slow(e.learner, now, ctx.chaos:slow_factor(e.learner, e.t), true, down)
      act(ctx, { factor = e.factor })
    elseif e.kind == "syncer" and (e.shard or ctx.syncer and ctx.syncer.standbys) and type(ctx.syncer) == "table" then
      -- one shard (docs/shards.md), or with standbys each shard, which of its processes (role)
      for k = e.shard or 1, e.shard or ctx.syncer.S do
        require("diloco.shard_faults").fault_begin(ctx, k, down, now, function(f) fault(ctx, f) end, e.role)
      end
    elseif e.kind == "syncer" and ctx.syncer then
      -- the syncer dies (nothing saved at its end) and comes back from its newest checkpoint
      local st = ctx.syncer:stats()
      ctx.bytes_prev_in = (ctx.bytes_prev_in or 0) + st.bytes_in
      ctx.bytes_prev_out = (ctx.bytes_prev_out or 0) + st.bytes_out
      ctx.syncer:close()
      ctx.syncer = nil
      ctx.syncer_back_at = now + (down < math.huge and down or 0)
      fault(ctx, { kind = "syncer", begin = true, duration = down < math.huge and down or nil,
        merges_lost = ctx.gm - ctx.merges_saved })
    elseif e.kind == "cut" then
      -- the link stalls both ways (the syncer's side of it); the learner, alive or not, is
      -- held off until it ends (the syncer times it out meanwhile, and it rejoins after)
      ctx.cuts = ctx.cuts or {}
      ctx.cuts[e.learner] = now + down
      if ctx.syncer then ctx.syncer:cut(e.learner, down) end
      if L then L.cut_ended, L.cut_recovered = nil, nil end
      fault(ctx, { kind = "cut", learner = e.learner, begin = true, duration = down < math.huge and down or nil })
    elseif e.kind == "link" then
      ctx.link_events = ctx.link_events or {}
      local list = ctx.link_events[e.learner] or {}
      ctx.link_events[e.learner] = list
      list[#list + 1] = { bandwidth = e.bandwidth, latency = e.latency, untl = now + down }
      local rate, latency = ctx.host.link_of(ctx, e.learner)
      if ctx.syncer then ctx.syncer:shape(e.learner, rate, latency) end
      fault(ctx, { kind = "link", learner = e.learner, begin = true, bandwidth = rate, latency = latency,
        duration = down < math.huge and down or nil })
    elseif L == nil or L.pid then
      fault(ctx, { kind = e.kind, learner = e.learner, begin = true, skipped = "not executed on real processes in this "
        .. "version (kill, pause, slow, cut, link and syncer are)" })
    end
  end
  for m, untl in pairs(ctx.cuts or {}) do
    if elapsed(ctx) >= untl then -- the syncer's driver ended it at this time itself
      ctx.cuts[m] = nil
      ctx.learners[m].cut_ended = elapsed(ctx)
      fault(ctx, { kind = "cut", learner = m, begin = false })
    end
  end
  for m, list in pairs(ctx.link_events or {}) do
    local kept = {}
    for _, le in ipairs(list) do
      if elapsed(ctx) < le.untl then kept[#kept + 1] = le end
    end
    if #kept < #list then
      ctx.link_events[m] = kept
      local rate, latency = ctx.host.link_of(ctx, m)
      if ctx.syncer then ctx.syncer:shape(m, rate, latency) end
      fault(ctx, { kind = "link", learner = m, begin = false, bandwidth = rate, latency = latency })
    end
  end
  if ctx.shard_back_at and type(ctx.syncer) == "table" then
    require("diloco.shard_faults").fault_ends(ctx, elapsed(ctx), function(f) fault(ctx, f) end)
  end
  if ctx.syncer_paused then require("diloco.shard_faults").pause_ends(ctx, elapsed(ctx), function(f) fault(ctx, f) end) end
  if ctx.standby_back_at and type(ctx.syncer) == "table" then
    require("diloco.shard_faults").standby_ends(ctx, elapsed(ctx), function(f) fault(ctx, f) end)
  end
  if not ctx.syncer and ctx.syncer_back_at and elapsed(ctx) >= ctx.syncer_back_at then
    local list = diloco.rundir.checkpoints(ctx.out .. "/syncer")
    local last = list[#list]
    ctx.host.restore_counts(ctx, last) -- the merges of that checkpoint: the rest are lost
    local t0 = diloco.clock()
    ctx.host.start_syncer(ctx, ctx.address, last and last.path or nil)
    ctx.syncer_back_at = nil
    ctx.syncer_restarts = (ctx.syncer_restarts or 0) + 1
    fault(ctx, { kind = "syncer", begin = false, epoch = ctx.syncer:epoch(), from = last and last.path or nil,
      load_s = diloco.clock() - t0, fresh = not last or nil })
  end
end

-- One turn of the supervisor in the run's loop: exits, restarts and rollbacks due, the
-- schedule's faults, then resumes, duty cycles and deadlines.
function M.turn(ctx)
  M.reap(ctx)
  M.tick(ctx)
  chaos_due(ctx)
  M.tick(ctx)
end

-- mpirun's path, for islands of several ranks; a clear error when it (or MPI in this
-- build) is missing.
function M.find_mpirun(m, R)
  if not diloco.mpi.available then fail("islands[%d].ranks = %d: %s", m, R, diloco.mpi.why) end
  for dir in (os.getenv("PATH") or "/usr/bin:/bin"):gmatch("[^:]+") do
    local path = dir .. "/mpirun"
    local f = io.open(path, "r")
    if f then
      f:close()
      return path
    end
  end
  fail("islands[%d].ranks = %d: mpirun is not on PATH (install openmpi-bin: scripts/setup does)", m, R)
end

M.signal_learner, M.spawn, M.log_tail, M.chaos_schedule = signal_learner, spawn, log_tail, chaos_schedule

return M
